"""Meshes and hosts (shardtypes.context.hosts and shardtypes.layout.data_layout): default_mesh, hybrid_mesh,
data_layout and make_global_array (issue 4, item 6).

Single-process tests run on the 8 simulated CPU devices of conftest. Layouts of several processes
are tested twice: with a made-up process for each device (``layout_for_processes``, the code
``data_layout`` runs), and for real with two JAX processes of 4 CPU devices each on localhost
(``test_two_processes``, which starts tests/context/multihost_worker.py twice).
"""

import json
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import AbstractMesh, AxisType, NamedSharding, PartitionSpec as P
from typeguard import TypeCheckError

from shardtypes import (
    AxisRules,
    DataLayout,
    Scope,
    axis_rules,
    data_layout,
    default_mesh,
    dims,
    f32,
    hybrid_mesh,
    integer,
    make_global_array,
    typechecked,
    u32,
)
from shardtypes.layout.data_layout import layout_for_processes  # test-facing: made-up processes

from conftest import make_mesh

WORKER = Path(__file__).with_name("multihost_worker.py")


def ids(mesh):
    return [d.id for d in mesh.devices.flat]


# --- default_mesh ----------------------------------------------------------------------------


def test_default_mesh_is_hosts_by_local_devices():
    mesh = default_mesh()
    assert dict(mesh.shape) == {"data": 8, "model": 1}
    assert mesh.axis_types == (AxisType.Explicit, AxisType.Explicit)  # as jax.make_mesh
    assert ids(mesh) == [d.id for d in jax.devices()]


@pytest.mark.parametrize(
    "names, mp, shape",
    [
        (("data", "model"), 2, {"data": 4, "model": 2}),
        (("data", "model"), 8, {"data": 1, "model": 8}),
        (("replica", "data", "model"), 1, {"replica": 1, "data": 8, "model": 1}),
        (("replica", "data", "model"), 4, {"replica": 1, "data": 2, "model": 4}),
        (("x",), 1, {"x": 8}),
        ("x", 1, {"x": 8}),
    ],
)
def test_default_mesh_shapes(names, mp, shape):
    assert dict(default_mesh(names, model_parallelism=mp).shape) == shape


def test_default_mesh_axis_types_and_devices():
    mesh = default_mesh(axis_types=AxisType.Auto)
    assert mesh.axis_types == (AxisType.Auto, AxisType.Auto)
    mesh = default_mesh(("a", "b"), axis_types=(AxisType.Explicit, AxisType.Auto))
    assert mesh.axis_types == (AxisType.Explicit, AxisType.Auto)
    mesh = default_mesh(devices=jax.devices()[4:])
    assert dict(mesh.shape) == {"data": 4, "model": 1}
    assert ids(mesh) == [4, 5, 6, 7]


def test_default_mesh_feeds_the_annotations():
    mesh = default_mesh(model_parallelism=2)
    x = make_global_array(np.ones((8, 6), np.float32), f32[b"batch/data embed/model"], (8, 6), mesh)

    @typechecked
    def f(x: f32[b"batch/data embed/model"]) -> f32[b"batch/data embed/model"]:
        return x * 2

    assert f(x).sharding.is_equivalent_to(NamedSharding(mesh, P("data", "model")), 2)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (
            dict(model_parallelism=3),
            "model_parallelism=3 must divide the 8 devices of each process, or be a multiple of 8 "
            "that divides the 8 devices (1 process x 8)",
        ),
        (dict(model_parallelism=16), "model_parallelism=16 must divide the 8 devices"),
        (dict(model_parallelism=0), "model_parallelism must be a positive int, got 0"),
        (dict(axis_names=("x",), model_parallelism=2), "one axis name ('x',) leaves no axis"),
        (dict(axis_names=("a", "b", "c", "d")), "default_mesh knows 1 to 3"),
        (dict(axis_names=("a", "a")), "repeat a name"),
        (dict(axis_types=(AxisType.Auto,)), "1 axis_types (Auto,) for 2 axes"),
        (dict(devices=[]), "no devices"),
    ],
)
def test_default_mesh_errors(kwargs, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        default_mesh(**kwargs)


# --- hybrid_mesh -----------------------------------------------------------------------------


def test_hybrid_mesh_single_process():
    mesh = hybrid_mesh((4, 2), (1, 1), ("data", "model"))
    assert dict(mesh.shape) == {"data": 4, "model": 2}
    assert mesh.axis_types == (AxisType.Explicit,) * 2
    assert ids(mesh) == list(range(8))
    mesh = hybrid_mesh((2, 2, 2), (1, 1, 1), ("r", "d", "m"), axis_types=AxisType.Auto)
    assert dict(mesh.shape) == {"r": 2, "d": 2, "m": 2}
    assert mesh.axis_types == (AxisType.Auto,) * 3
    mesh = hybrid_mesh((2,), (1,), ("d",), devices=jax.devices()[:2])
    assert ids(mesh) == [0, 1]


@pytest.mark.parametrize(
    "ici, dcn, names, message",
    [
        (
            (4, 2),
            (2, 1),
            ("data", "model"),
            "dcn_shape (2, 1) splits the mesh over 2 processes, but the 8 devices come from "
            "1 process; the product of dcn_shape must be 1",
        ),
        (
            (4, 1),
            (1, 1),
            ("data", "model"),
            "ici_shape (4, 1) needs 4 devices per process, but each of the 1 process has 8; the "
            "product of ici_shape must be 8",
        ),
        (
            (8,),
            (1, 1),
            ("data", "model"),
            "ici_shape (8,), dcn_shape (1, 1) and axis_names ('data', 'model') must have one entry",
        ),
        ((8, 0), (1, 1), ("data", "model"), "ici_shape (8, 0) has a size below 1"),
    ],
)
def test_hybrid_mesh_errors(ici, dcn, names, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        hybrid_mesh(ici, dcn, names)


# --- data_layout in one process --------------------------------------------------------------


@pytest.mark.parametrize(
    "annotation, spec",
    [
        (u32[b"batch/d len"], P("d", None)),  # batch over one axis
        (u32[b"batch/d/t len"], P(("d", "t"), None)),  # over two axes
        (u32[b"batch/t len/d"], P("t", "d")),
        (u32[b"batch len"], P(None, None)),  # replicated batch
        (u32[b"batch len/t"], P(None, "t")),
    ],
)
def test_data_layout_one_process_loads_everything(mesh, annotation, spec):
    layout = data_layout(annotation, (16, 4), mesh)
    assert isinstance(layout, DataLayout)
    assert layout.batch_slice == slice(0, 16)
    assert layout.local_index == (slice(0, 16), slice(0, 4))
    assert layout.local_shape == (16, 4)
    assert layout.global_shape == (16, 4)
    assert (layout.shard_id, layout.num_shards, layout.replica_id, layout.num_replicas) == (0, 1, 0, 1)
    assert layout.is_first_in_replica_set
    assert layout.process_index == 0
    assert layout.sharding.mesh is mesh
    assert layout.sharding.is_equivalent_to(NamedSharding(mesh, spec), 2)


def test_data_layout_takes_the_current_mesh():
    mesh = make_mesh("explicit")
    with jax.set_mesh(mesh):
        layout = data_layout(u32[b"batch/d len"], (8, 3))
    assert layout.sharding.mesh == mesh


def test_data_layout_resolves_logical_axes():
    mesh = default_mesh(("data", "fsdp", "model"), model_parallelism=2)
    with axis_rules(AxisRules([("dp", ("data", "fsdp")), ("tp", "model")])):
        layout = data_layout(u32[b"batch/dp len/tp"], (16, 4), mesh)
        x = make_global_array(np.zeros((16, 4), np.uint32), u32[b"batch/dp len/tp"], (16, 4), mesh)
    assert layout.sharding.is_equivalent_to(NamedSharding(mesh, P(("data", "fsdp"), "model")), 2)
    assert x.sharding.is_equivalent_to(layout.sharding, 2)


def test_data_layout_keeps_the_callers_dimension_table():
    with Scope(batch=3):
        data_layout(u32[b"batch/d len"], (16, 4), make_mesh("auto"))
        assert dict(dims()) == {"batch": 3}


@pytest.mark.parametrize(
    "annotation, shape, error, message",
    [
        (
            u32[b"batch/d/t len"],
            (12, 4),
            ValueError,
            "u32[b'batch/d/t len'] with global_shape (12, 4): dim 0 has size 12, which does not "
            "divide over mesh axes ('d', 't') of total size 8",
        ),
        (u32[b"batch/d len"], (16, 4, 2), ValueError, "global_shape (16, 4, 2) does not fit u32[b'batch/d len']: has 3 dims"),
        (u32[b"batch/d 5"], (16, 4), ValueError, "dim '5' is 4, but the annotation fixes it to 5"),
        (u32[b"batch/x len"], (16, 4), ValueError, "mesh axis 'x', which the mesh does not have"),
        (u32[b""], (), ValueError, "needs a batch dim"),
        ((u32[b"batch/d"], u32[b"batch/d"]), (16,), TypeError, "must be one array annotation"),
        (u32[b"batch/d len"], 16, TypeError, "global_shape must be a tuple of ints"),
    ],
)
def test_data_layout_errors(annotation, shape, error, message):
    mesh = make_mesh("explicit")
    with pytest.raises(error, match=re.escape(message)):
        data_layout(annotation, shape, mesh)


def test_data_layout_needs_devices():
    abstract = AbstractMesh((4, 2), ("d", "t"))
    with pytest.raises(ValueError, match="needs a mesh with devices"):
        data_layout(u32[b"batch/d len"], (16, 4), abstract)


# --- layouts of several processes, with a made-up process for each device ----------------------


def two_processes(device):
    """Devices 0-3 are process 0, 4-7 process 1 (as two hosts of 4 would be)."""
    return device.id // 4


def layouts(annotation, shape, mesh, process_of=two_processes, processes=(0, 1)):
    sharding = NamedSharding(mesh, P(*annotation))
    return [layout_for_processes(sharding, shape, process_of, p, f"spec {annotation}") for p in processes]


@pytest.fixture
def hosts_mesh():
    """(replica=2, data=4): one row per made-up process."""
    return make_mesh("explicit", (2, 4), ("replica", "data"))


def test_batch_split_over_processes(hosts_mesh):
    for spec in [(("replica", "data"),), ("replica",)]:
        first, second = layouts(spec, (16, 4), hosts_mesh)
        assert (first.batch_slice, second.batch_slice) == (slice(0, 8), slice(8, 16))
        assert (first.shard_id, second.shard_id) == (0, 1)
        assert first.num_shards == second.num_shards == 2
        assert first.replica_id == second.replica_id == 0
        assert first.num_replicas == 1
        assert first.local_shape == second.local_shape == (8, 4)


def test_batch_replicated_over_processes(hosts_mesh):
    # Sharded over 'data' only, which stays inside each process: both hold every row.
    first, second = layouts(("data",), (16, 4), hosts_mesh)
    assert first.batch_slice == second.batch_slice == slice(0, 16)
    assert first.num_shards == 1 and first.shard_id == second.shard_id == 0
    assert (first.replica_id, second.replica_id) == (0, 1)
    assert first.num_replicas == second.num_replicas == 2
    assert first.is_first_in_replica_set and not second.is_first_in_replica_set


def test_other_dims_split_over_processes(hosts_mesh):
    first, second = layouts((None, "replica"), (4, 16), hosts_mesh)
    assert first.batch_slice == second.batch_slice == slice(0, 4)
    assert first.local_index == (slice(0, 4), slice(0, 8))
    assert second.local_index == (slice(0, 4), slice(8, 16))
    assert (first.replica_id, second.replica_id) == (0, 1)


def test_non_contiguous_rows_are_explained(hosts_mesh):
    # Shard i of ('data', 'replica') sits at data=i//2, replica=i%2: process 0 gets every other
    # block of rows. Every process raises, naming the first process that cannot load its part.
    for p in (0, 1):
        with pytest.raises(ValueError) as info:
            layouts((("data", "replica"),), (16, 4), hosts_mesh, processes=(p,))
        message = str(info.value)
        assert "the devices of process 0" in message
        assert "hold batch rows 0:2, 4:6, 8:10, 12:14, not one contiguous slice" in message
        assert "('replica',) span processes: list those first" in message
        assert "b'batch/replica/data'" in message
        assert ("(this process)" in message) == (p == 0)


def test_interleaved_processes_are_explained():
    mesh = make_mesh("explicit", (8,), ("d",))
    with pytest.raises(ValueError) as info:
        layouts(("d",), (16,), mesh, process_of=lambda d: d.id % 2)
    assert "hold batch rows 0:2, 4:6, 8:10, 12:14" in str(info.value)
    assert "build the mesh with default_mesh or hybrid_mesh" in str(info.value)


def test_non_rectangular_blocks_are_rejected():
    mesh = make_mesh("explicit", (2, 4), ("x", "y"))
    grid = mesh.devices
    owner = {grid[0, 0]: 0, grid[0, 1]: 0, grid[1, 1]: 0, grid[1, 2]: 0}
    with pytest.raises(ValueError, match="do not fill the rectangle 0:2, 0:3"):
        layouts(("x", "y"), (2, 4), mesh, process_of=lambda d: owner.get(d, 1))


def test_partly_overlapping_slices_are_rejected():
    mesh = make_mesh("explicit", (4, 2), ("x", "y"))
    g = mesh.devices
    owner = {g[0, 0]: 0, g[1, 0]: 0, g[1, 1]: 1, g[2, 1]: 1, g[2, 0]: 2, g[3, 0]: 2, g[3, 1]: 2, g[0, 1]: 3}
    with pytest.raises(ValueError, match="overlapping but different batch slices 0:2 and 0:4"):
        layouts(("x",), (8,), mesh, process_of=owner.__getitem__)


def test_a_process_without_devices():
    with pytest.raises(ValueError, match=re.escape("process 0 has no devices in the mesh (its processes: [1])")):
        layouts(("d",), (8,), make_mesh("explicit"), process_of=lambda d: 1, processes=(0,))


# --- make_global_array -----------------------------------------------------------------------


def test_make_global_array_round_trip(mesh):
    annotation = u32[b"batch/d len/t"]
    data = np.arange(64, dtype=np.uint32).reshape(16, 4)
    layout = data_layout(annotation, data.shape, mesh)
    x = make_global_array(data[layout.local_index], annotation, data.shape, mesh)
    assert isinstance(x, jax.Array) and x.shape == (16, 4) and x.dtype == np.uint32
    assert x.sharding.is_equivalent_to(NamedSharding(mesh, P("d", "t")), 2)
    np.testing.assert_array_equal(np.asarray(x), data)

    seen = {}

    @typechecked
    def step(x: u32[b"batch/d len/t"]) -> u32[b"batch/d len/t"]:
        seen.update(dims())
        return x + jnp.uint32(1)

    np.testing.assert_array_equal(np.asarray(step(x)), data + 1)
    assert seen == {"batch": 16, "len": 4}
    with jax.set_mesh(mesh):
        np.testing.assert_array_equal(np.asarray(jax.jit(step)(x)), data + 1)

    @typechecked
    def replicated(x: u32[b"batch len"]) -> u32[b""]:
        return jnp.sum(x)

    with pytest.raises(TypeCheckError):  # the layout is the annotation's, not any layout
        replicated(x)


def test_make_global_array_checks_shape_and_dtype(mesh):
    annotation = u32[b"batch/d len"]
    with pytest.raises(ValueError) as info:
        make_global_array(np.zeros((8, 4), np.uint32), annotation, (16, 4), mesh)
    assert str(info.value) == (
        "make_global_array: u32[b'batch/d len'] with global_shape (16, 4): process 0 (of 1) must "
        "pass its block of shape (16, 4) (global index 0:16, 0:4), found local_data of shape (8, 4)"
    )
    with pytest.raises(TypeError, match=re.escape("wants uint32, found local_data of dtype float32")):
        make_global_array(np.zeros((16, 4), np.float32), annotation, (16, 4), mesh)
    x = make_global_array(np.zeros((16, 4), np.int16), integer[b"batch/d len"], (16, 4), mesh)
    assert x.dtype == np.int16


# --- two real processes ----------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def worker_env() -> dict:
    env = dict(os.environ)
    # The workers choose their own device count; a forced count from the parent would clash.
    flags = [f for f in env.get("XLA_FLAGS", "").split() if "xla_force_host_platform_device_count" not in f]
    env["XLA_FLAGS"] = " ".join(flags)
    env["JAX_PLATFORMS"] = "cpu"
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join([root, *filter(None, [env.get("PYTHONPATH")])])
    return env


def run_workers(end: float, n: int = 2):
    """Runs ``n`` workers until they finish or ``end`` (a ``time.monotonic()``), when they are
    killed. Returns ([the records of each], [return codes], [stderr tails], timed out?)."""
    port = free_port()
    procs = [
        subprocess.Popen(
            [sys.executable, str(WORKER), str(i), str(n), str(port)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=worker_env(),
        )
        for i in range(n)
    ]
    outputs = [None] * n
    timed_out = False
    try:
        for i, proc in enumerate(procs):
            try:
                outputs[i] = proc.communicate(timeout=max(1.0, end - time.monotonic()))
            except subprocess.TimeoutExpired:
                timed_out = True
                break
    finally:
        for i, proc in enumerate(procs):
            if proc.poll() is None:
                proc.kill()
            if outputs[i] is None:
                outputs[i] = proc.communicate()
    records = [[json.loads(line) for line in out.splitlines() if line.startswith("{")] for out, _ in outputs]
    return records, [p.returncode for p in procs], [err[-3000:] for _, err in outputs], timed_out


def test_two_processes():
    end = time.monotonic() + 55
    for attempt in (1, 2):
        records, codes, errors, timed_out = run_workers(end)
        if any(r.get("initialized") for rs in records for r in rs):
            break
        # No process got past jax.distributed.initialize. Try once more if there is time (the
        # port may have been taken between choosing and binding it), else skip.
        if attempt == 2 or end - time.monotonic() < 25:
            init_errors = [r["init_error"] for rs in records for r in rs if "init_error" in r]
            reason = init_errors[0] if init_errors else f"return codes {codes}, stderr: {errors[0][-500:]}"
            pytest.skip(f"jax.distributed cannot start two CPU processes on localhost here: {reason}")
    assert not timed_out, f"the workers started but did not finish in time; stderr: {errors}"
    assert codes == [0, 0], f"workers failed: return codes {codes}; stderr: {errors}"
    by = [{r["scenario"]: r for r in rs if "scenario" in r} for rs in records]
    assert [rs[0] for rs in records] == [{"initialized": True, "process": 0}, {"initialized": True, "process": 1}]
    assert [rs[-1] for rs in records] == [{"done": True, "process": 0}, {"done": True, "process": 1}]

    def expected(shape):
        x = np.arange(np.prod(shape), dtype=np.uint64).reshape(shape)
        rows = np.arange(1, shape[0] + 1)[:, None]
        cols = np.arange(1, shape[1] + 1)[None, :]
        return int(x.sum()), int((x * rows * cols).sum()) % 2**32

    def common(name, shape, spec):
        first, second = by[0][name], by[1][name]
        assert (first["process"], second["process"]) == (0, 1)
        for r in (first, second):
            # The global array, as each process sees it and as the checked functions saw it.
            assert r["global_shape"] == r["shape"] == r["traced_shape"] == r["step_out_shape"] == list(shape)
            assert r["spec"] == r["traced_spec"] == r["traced_out_spec"] == spec
            assert r["dims"] == {"batch": shape[0], "len": shape[1]}
            assert r["sharding_ok"] and r["addressable_shards"] == 4
            assert (r["sum"], r["weighted_sum"]) == expected(shape)
        return first, second

    # Batch over one axis and over two axes: disjoint halves that cover the batch.
    for name, spec in [
        ("batch_over_data", "P('data', None)"),
        ("batch_over_two_axes", "P(('replica', 'data'), None)"),
        ("logical_dp", "P(('replica', 'data'), None)"),  # u32[b'batch/dp len'] under axis rules
    ]:
        first, second = common(name, (16, 4), spec)
        assert (first["batch_slice"], second["batch_slice"]) == ([0, 8], [8, 16])
        assert (first["shard_id"], second["shard_id"], first["num_shards"], second["num_shards"]) == (0, 1, 2, 2)
        assert (first["replica_id"], second["replica_id"]) == (0, 0)
        assert first["local_shape"] == second["local_shape"] == [8, 4]
        assert first["local_sum"] + second["local_sum"] == expected((16, 4))[0]
    assert by[0]["batch_over_two_axes"]["mesh"] == {"replica": 2, "data": 4, "model": 1}

    # Batch replicated across processes: the same rows, replicas 0 and 1.
    first, second = common("replicated_batch", (8, 4), "P('model', None)")
    assert first["batch_slice"] == second["batch_slice"] == [0, 8]
    assert (first["num_shards"], first["shard_id"], second["shard_id"]) == (1, 0, 0)
    assert (first["replica_id"], second["replica_id"], first["num_replicas"]) == (0, 1, 2)

    # The model axis spans the processes: the same rows, different columns.
    first, second = common("model_across_hosts", (4, 16), "P('data', 'model')")
    assert first["mesh"] == {"data": 1, "model": 8}
    assert (first["local_index"], second["local_index"]) == ([[0, 4], [0, 8]], [[0, 4], [8, 16]])
    assert first["local_sum"] + second["local_sum"] == expected((4, 16))[0]

    # The processes on the minor part of the batch axes: both explain, neither hangs.
    for p in (0, 1):
        error = by[p]["non_contiguous"]["error"]
        assert error is not None and "batch rows 0:2, 4:6, 8:10, 12:14, not one contiguous slice" in error


# ---------------------------------------------------------------------------------------------
# Input validation (the catalogue in test_catalogue.py has more).


@pytest.mark.parametrize(
    "call, error, message",
    [
        (lambda: default_mesh(3), TypeError, "default_mesh: axis_names must be a sequence of mesh axis names, got 3"),
        (lambda: default_mesh(("", "m")), ValueError, "axis_names ('', 'm') has '', which is not an identifier"),
        (lambda: default_mesh(model_parallelism="2"), TypeError, "default_mesh: model_parallelism must be a positive int, got '2'"),
        (lambda: default_mesh(devices=["cpu:0"]), TypeError, "default_mesh: devices must be a sequence of JAX devices"),
        (lambda: default_mesh(("data",), axis_types="x"), TypeError, "default_mesh: axis_types must be a jax.sharding.AxisType"),
        (lambda: hybrid_mesh((8.5,), (1,), ("d",)), TypeError, "hybrid_mesh: ici_shape must be a sequence of ints"),
        (lambda: data_layout(u32[b"batch/d len"], (-8, 4), make_mesh("explicit")), ValueError,
         "data_layout: global_shape (-8, 4) has a negative size"),
        (lambda: data_layout(u32[b"batch/d len"], (8, 4), "d"), TypeError, "data_layout: mesh must be a Mesh"),
        (lambda: make_global_array(None, u32[b"batch/d len"], (8, 4), make_mesh("explicit")), TypeError,
         "make_global_array: local_data must be this process's block of the array"),
    ],
)
def test_bad_arguments_are_named(call, error, message):
    with pytest.raises(error, match=re.escape(message)):
        call()
