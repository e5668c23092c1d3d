"""verify's activation estimate against XLA's own figure for the compiled step, in one run.

    python benchmarks/activations.py

For each step below, on the simulated 8-device CPU mesh, it prints verify's estimate of the peak
intermediate memory per device (``VerifyReport.activation_bytes_per_device``, from the traced step,
no compilation), XLA's ``temp_size_in_bytes`` of ``jax.jit(step).lower(...).compile()`` (the
bytes per device it allocates besides arguments and outputs), and their ratio:

  kernel      examples/transformer.py's training kernel (a typed_shard_map: local shapes, exact
              layouts), under its train rules, Explicit axes; target within 2x
  mlp+optax   a jitted @typechecked MLP step with optax's Adam (batch over d, weights over t), Auto
              axes (XLA chooses the intermediates' layouts); target within 3x
  scan+remat  a lax.scan over 8 stacked layers, each under jax.checkpoint, with its gradient, Auto
              axes; target within 3x

Where the estimate is high or low and why: docs/verify.md, "Activation memory".
"""

from __future__ import annotations

import os
import sys
import time

import jax

jax.config.update("jax_num_cpu_devices", 8)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402
from jax.sharding import AxisType  # noqa: E402

import shardtypes  # noqa: E402
from shardtypes import Array, axis_rules, f32, make_shape_dtype_structs, pytree_dataclass, typechecked, verify  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from _common import load_demo  # noqa: E402

# The state each step updates is donated, as training loops do: its outputs then take the
# arguments' buffers, and XLA's temp_size counts the intermediates (undonated, XLA may place
# them in the buffers of outputs not written yet, and reports less).
DONATE = (0, 1)


def xla_temp(fn, *args, donate=()) -> int:
    return jax.jit(fn, donate_argnums=donate).lower(*args).compile().memory_analysis().temp_size_in_bytes


def real(structs):
    """Arrays of ones laid out as ``structs`` say."""
    return jax.tree.map(lambda s: jax.device_put(jnp.ones(s.shape, s.dtype), s.sharding), structs)


# ---------------------------------------------------------------------------------------------
# The three steps.


def kernel_case() -> tuple[int, int, object]:
    demo = load_demo("transformer_demo_activations")
    mesh = jax.make_mesh((4, 2), ("d", "t"), axis_types=(AxisType.Explicit,) * 2)
    with axis_rules(demo.RULES):
        report = verify(demo.training_kernel, mesh.abstract_mesh, demo.DIMS)
        assert report.ok, report
        with jax.set_mesh(mesh):
            state = demo.init_state(jax.random.key(0), mesh)
            rng = np.random.default_rng(0)
            batch = demo.make_batch(rng, rng.permutation(demo.DIMS["vocab"])[:demo.PATTERN_LENGTH], mesh)
            with shardtypes.Scope(**demo.DIMS):
                temp = xla_temp(demo.training_kernel, state, batch, donate=DONATE[:1])
    return report.activation_bytes_per_device, temp, report


@pytree_dataclass
class Mlp:
    w_in: f32[b"embed hidden/t"]
    w_out: f32[b"hidden/t embed"]


MLP_DIMS = {"batch": 256, "embed": 512, "hidden": 2048}
OPTIMIZER = optax.adam(1e-3)


@typechecked
def mlp_step(params: Mlp, opt_state: optax.OptState, x: f32[b"batch/d embed"]) -> tuple[Mlp, optax.OptState, f32[b""]]:
    def loss(p: Mlp) -> f32[b""]:
        h: f32[b"batch/d hidden/t"] = jax.nn.gelu(x @ p.w_in)
        return jnp.mean((h @ p.w_out - x) ** 2)

    value, grads = jax.value_and_grad(loss)(params)
    updates, opt_state = OPTIMIZER.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, value


def mlp_case() -> tuple[int, int, object]:
    mesh = jax.make_mesh((4, 2), ("d", "t"), axis_types=(AxisType.Auto,) * 2)
    params = make_shape_dtype_structs(Mlp, MLP_DIMS, mesh)
    opt_state = jax.eval_shape(OPTIMIZER.init, params)
    report = verify(mlp_step, mesh.abstract_mesh, MLP_DIMS, inputs={"opt_state": opt_state})
    assert report.ok, report
    x = make_shape_dtype_structs(f32[b"batch/d embed"], MLP_DIMS, mesh)
    with jax.set_mesh(mesh):
        p = real(params)
        temp = xla_temp(mlp_step, p, OPTIMIZER.init(p), real(x), donate=DONATE)
    return report.activation_bytes_per_device, temp, report


@pytree_dataclass
class Block:
    w_in: f32[b"embed hidden/t"]
    w_out: f32[b"hidden/t embed"]


SCAN_DIMS = {"layers": 8, "batch": 128, "embed": 512, "hidden": 1024}


@typechecked
def scan_step(blocks: Array["layers", Block], x: f32[b"batch/d embed"]) -> Array["layers", Block]:
    @jax.checkpoint
    def layer(h, block):
        return h + jnp.tanh(h @ block.w_in) @ block.w_out, None

    def loss(blocks):
        out, _ = jax.lax.scan(layer, x, blocks)
        return jnp.mean(out ** 2)

    grads = jax.grad(loss)(blocks)
    return jax.tree.map(lambda w, g: w - 0.01 * g, blocks, grads)


def scan_case() -> tuple[int, int, object]:
    mesh = jax.make_mesh((4, 2), ("d", "t"), axis_types=(AxisType.Auto,) * 2)
    report = verify(scan_step, mesh.abstract_mesh, SCAN_DIMS)
    assert report.ok, report
    blocks = make_shape_dtype_structs(Array["layers", Block], SCAN_DIMS, mesh)
    x = make_shape_dtype_structs(f32[b"batch/d embed"], SCAN_DIMS, mesh)
    with jax.set_mesh(mesh):
        temp = xla_temp(scan_step, real(blocks), real(x), donate=DONATE[:1])
    return report.activation_bytes_per_device, temp, report


CASES = {"kernel": (kernel_case, 2.0), "mlp+optax": (mlp_case, 3.0), "scan+remat": (scan_case, 3.0)}


def main() -> None:
    print("verify's activation estimate against XLA's temp_size_in_bytes, per device, 8 CPU devices\n")
    print(f"  {'step':12s} {'estimate':>12s} {'XLA temp':>12s} {'ratio':>7s}  target")
    for name, (case, target) in CASES.items():
        start = time.perf_counter()
        estimate, temp, report = case()
        ratio = estimate / temp
        inside = 1 / target <= ratio <= target
        print(f"  {name:12s} {estimate:12,d} {temp:12,d} {ratio:7.2f}  within {target:g}x: "
              f"{'yes' if inside else 'NO'}  ({time.perf_counter() - start:.1f} s)")
        print(f"      {report.activations}")


if __name__ == "__main__":
    main()
