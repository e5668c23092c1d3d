"""verify's step time on a named chip against the same step measured on this machine's accelerator.

    python benchmarks/step_time.py [--chip h200] [--small]

The step is a jitted @typechecked training step of a stack of bf16 MLP blocks (a lax.scan over
stacked layers, the loss's gradient, an SGD update) on a one-device mesh. verify(..., chip=...)
gives its lower bound per step from the traced step alone (compute at the chip's peak bf16
FLOP/s, memory at its HBM bandwidth, perfect overlap), with no device; the same step is then
compiled and timed on the first local device. The ratio measured / lower bound is at least 1 for
a true lower bound, and says how far from the roofline XLA's program runs (docs/chips.md). On a
CPU-only machine (``--small``) it runs the same code at small sizes, to show that it works; the
ratio is then meaningless.
"""

from __future__ import annotations

import argparse
import time

import jax
import jax.numpy as jnp
import numpy as np

from shardtypes import bf16, pytree_dataclass, typechecked, verify

BIG = {"batch": 16384, "embed": 8192, "hidden": 32768, "layers": 4}
SMALL = {"batch": 64, "embed": 32, "hidden": 128, "layers": 2}


@pytree_dataclass
class Blocks:
    w_in: bf16[jax.Array, b"layers embed hidden"]
    w_out: bf16[jax.Array, b"layers hidden embed"]


def loss_fn(blocks: Blocks, x: jax.Array) -> jax.Array:
    def layer(h, w):
        w_in, w_out = w
        return h + jax.nn.gelu(h @ w_in) @ w_out, None

    h, _ = jax.lax.scan(layer, x, (blocks.w_in, blocks.w_out))
    return jnp.mean(jnp.square(h.astype(jnp.float32)))


@typechecked
def train_step(blocks: Blocks, x: bf16[jax.Array, b"batch/d embed"]) -> Blocks:
    grads = jax.grad(loss_fn)(blocks, x)
    return jax.tree.map(lambda w, g: w - (1e-3 * g).astype(w.dtype), blocks, grads)


def measured_seconds(dims: dict, repeat: int) -> float:
    key = jax.random.key(0)
    k1, k2, k3 = jax.random.split(key, 3)
    e, h, n = dims["embed"], dims["hidden"], dims["layers"]
    blocks = Blocks(w_in=(jax.random.normal(k1, (n, e, h)) * e ** -0.5).astype(jnp.bfloat16),
                    w_out=(jax.random.normal(k2, (n, h, e)) * h ** -0.5).astype(jnp.bfloat16))
    x = jax.random.normal(k3, (dims["batch"], e)).astype(jnp.bfloat16)
    step = jax.jit(train_step, donate_argnums=0)
    blocks = step(blocks, x)  # compile and warm up
    jax.block_until_ready(blocks)
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        blocks = step(blocks, x)
        jax.block_until_ready(blocks)
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chip", default="h200")
    parser.add_argument("--small", action="store_true", help="small sizes (for a machine without the chip)")
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    dims = SMALL if args.small else BIG
    device = jax.devices()[0]
    mesh = jax.make_mesh((1,), ("d",), axis_types=(jax.sharding.AxisType.Explicit,), devices=[device])
    start = time.perf_counter()
    report = verify(train_step, {"d": 1}, dims, chip=args.chip)
    verify_s = time.perf_counter() - start
    if not report.ok or report.step_time is None:
        raise SystemExit(f"verify did not time the step:\n{report}")
    with jax.set_mesh(mesh):
        seconds = measured_seconds(dims, args.repeat)
    t = report.step_time
    print(f"step: {dims}, bf16, on {device.device_kind} ({device.platform})")
    print(f"verify (no device, {verify_s:.2f} s): {report.flops_per_device / 1e12:.2f} TFLOP, "
          f"{report.memory_bytes_per_device / 2**30:.2f} GiB read and written per step")
    print(f"  on {args.chip}: compute {t.compute * 1e3:.1f} ms, memory {t.memory * 1e3:.1f} ms; lower bound "
          f"{t.perfect_overlap * 1e3:.1f} ms (no overlap {t.no_overlap * 1e3:.1f} ms)")
    print(f"measured: {seconds * 1e3:.1f} ms per step (median of {args.repeat})")
    print(f"measured / lower bound: {seconds / t.perfect_overlap:.2f}x; measured / no overlap: "
          f"{seconds / t.no_overlap:.2f}x")


if __name__ == "__main__":
    main()
