"""Cost of tracing a checked step, against unchecked code and jaxtyping+beartype in the same run.

    python benchmarks/trace_cost.py [--layers N] [--repeat R] [--no-demo]

The step is a 64-layer MLP stack, unrolled in Python, whose loss is differentiated with
``jax.grad`` and traced with ``jax.jit(...).trace`` (tracing only: no lowering, no compiling),
on arrays sharded over an 8-device simulated CPU mesh (``d`` x ``t``, Explicit axes). Each layer
is ``x + gelu(x @ w1) @ w2 - mean(...)``, written four ways:

  unchecked            plain functions
  shardtypes           each layer @typechecked on f32[jax.Array, b'batch/d embed'] and friends
                       (dtype, shape, one dimension table per layer call, AND sharding); the step
                       that calls them is unchecked, so each layer is an outermost checked call
  shardtypes (step)    the same layers, and the loss itself @typechecked on its arguments: the
                       layers are nested checked calls sharing the loss's table
  jaxtyping+beartype   Float[Array, 'batch embed'] under jaxtyped(typechecker=beartype) (shape
                       only)

Each version is traced ``--repeat`` times as a new jitted function (so the step itself is traced
each time, while jitted functions inside it, jax.numpy's ``mean`` and ``gelu`` among them, may keep
their traces from one time to the next, as they do in a real program); it prints the median
milliseconds and each version's ratio to unchecked. Target: shardtypes within 1.5x of unchecked.

Unless ``--no-demo``, it also times the first call (trace, compile, run) of examples/transformer.py's
jitted training kernel with checks on and off (``benchmarks/overhead.py``'s measurement); target:
within 10 %. Machines are noisy: only the ratios within one run mean anything.
"""

from __future__ import annotations

import argparse
import statistics
import time

import jax

jax.config.update("jax_num_cpu_devices", 8)

import jax.numpy as jnp  # noqa: E402
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P  # noqa: E402

import shardtypes  # noqa: E402
from shardtypes import f32  # noqa: E402

try:
    from beartype import beartype
    from jaxtyping import Array, Float, jaxtyped
except ImportError:  # (the peers are optional: pip install jaxtyping beartype)
    beartype = None

Acts = f32[jax.Array, b"batch/d embed"]
W1 = f32[jax.Array, b"embed mlp/t"]
W2 = f32[jax.Array, b"mlp/t embed"]


def _layer_body(x, w1, w2):
    y = jnp.matmul(jax.nn.gelu(x @ w1), w2, out_sharding=P("d", None))  # (Explicit axes: say where)
    return x + y - jnp.mean(y, axis=-1, keepdims=True)


@shardtypes.typechecked
def checked_layer(x: Acts, w1: W1, w2: W2) -> Acts:
    return _layer_body(x, w1, w2)


def _loss_with(layer):
    def loss(ws, x):
        for w1, w2 in ws:
            x = layer(x, w1, w2)
        return jnp.mean(x * x)
    return loss


@shardtypes.typechecked
def _checked_loss(ws: list[tuple[W1, W2]], x: Acts) -> f32[jax.Array, b""]:
    return _loss_with(checked_layer)(ws, x)


def versions() -> dict:
    found = {
        "unchecked": _loss_with(_layer_body),
        "shardtypes": _loss_with(checked_layer),
        "shardtypes (step)": _checked_loss,
    }
    if beartype is not None:
        @jaxtyped(typechecker=beartype)
        def jaxtyping_layer(x: Float[Array, "batch embed"], w1: Float[Array, "embed mlp"],
                            w2: Float[Array, "mlp embed"]) -> Float[Array, "batch embed"]:
            return _layer_body(x, w1, w2)
        found["jaxtyping+beartype"] = _loss_with(jaxtyping_layer)
    return found


def trace_times(fns: dict, args: tuple, repeat: int) -> dict:
    """Median ms to trace each of ``fns``'s grad as a new jitted function, interleaved."""
    samples: dict = {name: [] for name in fns}
    for name, fn in fns.items():  # a first trace of each, untimed: JAX's own first-use costs
        jax.jit(jax.grad(fn, argnums=1)).trace(*args)
    for _ in range(repeat):
        for name, fn in fns.items():
            start = time.perf_counter()
            jax.jit(jax.grad(fn, argnums=1)).trace(*args)
            samples[name].append((time.perf_counter() - start) * 1e3)
    return {name: statistics.median(times) for name, times in samples.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--layers", type=int, default=64)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--no-demo", action="store_true", help="skip the demo's first step")
    options = parser.parse_args()
    mesh = jax.make_mesh((4, 2), ("d", "t"), axis_types=(AxisType.Explicit,) * 2)
    with jax.set_mesh(mesh):
        def put(shape, spec):
            return jax.device_put(jnp.ones(shape, jnp.float32) / shape[-1], NamedSharding(mesh, spec))
        ws = [(put((32, 64), P(None, "t")), put((64, 32), P("t", None))) for _ in range(options.layers)]
        x = put((16, 32), P("d", None))
        fns = versions()
        grads = {name: jax.jit(jax.grad(fn, argnums=1))(ws, x) for name, fn in fns.items()}
        for name, grad in grads.items():  # every version computes the same thing
            assert jnp.allclose(grad, grads["unchecked"], rtol=1e-5), name
        times = trace_times(fns, (ws, x), options.repeat)
    print(f"tracing jax.grad of a {options.layers}-layer unrolled step (median of {options.repeat}, ms):")
    for name, ms in times.items():
        print(f"  {name:<20} {ms:8.1f}   x{ms / times['unchecked']:.2f} of unchecked")
    print(f"  target: shardtypes <= 1.5x of unchecked: "
          f"{'met' if times['shardtypes'] <= 1.5 * times['unchecked'] else 'NOT met'}")
    if not options.no_demo:
        from overhead import demo_first_calls

        for kind in (AxisType.Explicit, AxisType.Auto):
            first = demo_first_calls(kind)
            print(f"demo's first training step ({kind.name} axes, trace + compile + run, ms): "
                  f"checks off {first['off']:.0f}, on {first['on']:.0f}, x{first['on'] / first['off']:.2f}"
                  f" (target <= 1.10)")


if __name__ == "__main__":
    main()
