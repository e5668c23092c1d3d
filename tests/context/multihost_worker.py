"""One JAX process of a two-process job on localhost, for tests/context/test_hosts.py.

    python tests/context/multihost_worker.py PROCESS_ID NUM_PROCESSES COORDINATOR_PORT

Each process has 4 CPU devices. For each scenario it computes its DataLayout, loads ITS part of a
deterministic global dataset (np.arange), builds the global array with make_global_array, passes
it to @typechecked functions (eagerly and under jit) and runs a jitted reduction. It prints one
JSON object per line: {"initialized": true} once jax.distributed has started, then
{"scenario": ..., ...} per scenario; {"init_error": ...} if jax.distributed.initialize raises
(where it cannot reach the coordinator, JAX aborts the process instead).
"""

import json
import sys

import jax

process_id, num_processes, port = (int(a) for a in sys.argv[1:4])

# Before the backend starts: 4 CPU devices per process, and cross-process CPU collectives.
jax.config.update("jax_num_cpu_devices", 4)
jax.config.update("jax_cpu_collectives_implementation", "gloo")


def emit(**record):
    print(json.dumps(record), flush=True)


try:
    jax.distributed.initialize(
        coordinator_address=f"127.0.0.1:{port}",
        num_processes=num_processes,
        process_id=process_id,
        initialization_timeout=15,
    )
except Exception as e:  # the test skips on this (or on dying here, as JAX does when it cannot connect)
    emit(init_error=f"{type(e).__name__}: {e}")
    sys.exit(3)
emit(initialized=True, process=process_id)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import shardtypes  # noqa: E402
from shardtypes import (  # noqa: E402
    AxisRules,
    axis_rules,
    data_layout,
    default_mesh,
    hybrid_mesh,
    make_global_array,
    typechecked,
    u32,
)


def global_data(shape):
    """The dataset every process can read: deterministic, and different in every element."""
    return np.arange(int(np.prod(shape)), dtype=np.uint32).reshape(shape)


@jax.jit
def weighted_sum(x):
    # Weights by row and column: rows landing in the wrong place change the result.
    rows = jnp.arange(x.shape[0], dtype=jnp.uint32)[:, None] + 1
    cols = jnp.arange(x.shape[1], dtype=jnp.uint32)[None, :] + 1
    return jnp.sum(x * rows * cols, dtype=jnp.uint32)


def run(name, annotation, shape, mesh):
    layout = data_layout(annotation, shape, mesh)
    local = global_data(shape)[layout.local_index]
    x = make_global_array(local, annotation, shape, mesh)

    seen = {}

    @typechecked
    def step(x: annotation) -> annotation:
        seen["shape"] = list(x.shape)
        seen["spec"] = str(x.sharding.spec)
        seen["dims"] = dict(shardtypes.dims())
        return x + jnp.uint32(1)

    @jax.jit
    @typechecked
    def traced(x: annotation) -> annotation:
        seen["traced_shape"] = list(x.shape)
        seen["traced_spec"] = str(jax.typeof(x).sharding.spec)
        return x * jnp.uint32(2)

    y = step(x)
    z = traced(x)
    emit(
        scenario=name,
        process=jax.process_index(),
        mesh=dict(mesh.shape),
        batch_slice=[layout.batch_slice.start, layout.batch_slice.stop],
        local_index=[[s.start, s.stop] for s in layout.local_index],
        local_shape=list(layout.local_shape),
        shard_id=layout.shard_id,
        num_shards=layout.num_shards,
        replica_id=layout.replica_id,
        num_replicas=layout.num_replicas,
        local_sum=int(local.sum()),
        global_shape=list(x.shape),
        addressable_shards=len(x.addressable_shards),
        sharding_ok=bool(x.sharding.is_equivalent_to(layout.sharding, len(shape))),
        step_out_shape=list(y.shape),
        traced_out_spec=str(z.sharding.spec),
        sum=int(jnp.sum(x, dtype=jnp.uint32)),
        weighted_sum=int(weighted_sum(x)),
        **seen,
    )


# Batch over one axis that spans both processes: (data=8, model=1), hosts major.
run("batch_over_data", u32[b"batch/data len"], (16, 4), default_mesh())
# Batch over two axes: (replica=2 processes, data=4 local, model=1).
run("batch_over_two_axes", u32[b"batch/replica/data len"], (16, 4), default_mesh(("replica", "data", "model")))
# The annotation, with 'dp' a logical axis: the layout follows the active rules.
with axis_rules(AxisRules([("dp", ("replica", "data"))])):
    run("logical_dp", u32[b"batch/dp len"], (16, 4), default_mesh(("replica", "data", "model")))
# Batch sharded only inside each process, replicated across them: both load all rows.
run("replicated_batch", u32[b"batch/model len"], (8, 4), hybrid_mesh((1, 4), (2, 1), ("data", "model")))
# The model axis spans both processes: same rows everywhere, each process its own columns.
run("model_across_hosts", u32[b"batch/data len/model"], (4, 16), default_mesh(model_parallelism=8))

# The processes on the minor part of the batch axes: each would hold every other block of rows.
try:
    data_layout(u32[b"batch/data/replica len"], (16, 4), default_mesh(("replica", "data", "model")))
except ValueError as e:
    emit(scenario="non_contiguous", process=jax.process_index(), error=str(e))
else:
    emit(scenario="non_contiguous", process=jax.process_index(), error=None)

jax.distributed.shutdown()
emit(done=True, process=jax.process_index())
