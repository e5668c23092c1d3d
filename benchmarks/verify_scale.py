"""verify of the demo's training step on abstract meshes of 8 to 65,536 devices, against lowering
and compiling the same step for real on 8 simulated CPU devices, in one run.

    python benchmarks/verify_scale.py [--repeat R]

The step is examples/transformer.py's training kernel (embedding, 80 scanned layers of attention
with RoPE and a SwiGLU MLP, loss, gradients, Adam) under its axis rules. For each mesh it verifies
the step with 70B-class sizes made divisible by that mesh (nothing is compiled, no device is
used), and prints the wall time, which should stay flat as the mesh grows: in full, without the
step's cost (``verify(..., cost=False)``: communication, FLOPs and memory bytes per device, which
may add at most 30%), and without the cost and the activation estimate (``activations=False``,
which may add at most 20% to the rest). The reference is
jax.jit(...).lower(...).compile() of the same kernel with the demo's small sizes on the real
(d=4, t=2) CPU mesh; the ratio says how much cheaper the abstract check is than one compile.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import jax

jax.config.update("jax_num_cpu_devices", 8)

from shardtypes import Scope, axis_rules, make_shape_dtype_structs, verify  # noqa: E402
from shardtypes.tools.activations import trace_step  # noqa: E402
from shardtypes.tools.cost_model import step_cost  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from _common import load_demo  # noqa: E402


def sizes_for(d: int, t: int) -> dict:
    """70B-class sizes, each sharded dim made a multiple of the axes that split it."""
    return {
        "vocab": 128256 if 128256 % t == 0 else t * (128256 // t + 1),
        "embed": max(8192, d * t),
        "heads": max(64, t),
        "head_dim": 128,
        "hidden": 28672 if 28672 % t == 0 else 28672 * t,
        "layers": 80,
        "seq": 4096,
        "batch": max(256, d),
    }


def walk_seconds(demo, repeat: int) -> tuple[float, float]:
    """The best times of the cost's walk alone over the demo's step traced once at 4,096 devices,
    and of verify without the cost, taking turns (less noisy than the difference of two verify
    times on a busy machine)."""
    sizes = sizes_for(64, 64)
    report = verify(demo.training_kernel, {"d": 64, "t": 64}, sizes, cost=False, activations=False)
    mesh = jax.sharding.AbstractMesh((64, 64), ("d", "t"), axis_types=(jax.sharding.AxisType.Explicit,) * 2)
    with jax.sharding.use_abstract_mesh(mesh), Scope(**sizes_for(64, 64)):
        _, closed, leaves = trace_step(demo.training_kernel, report.inputs)
    best = [float("inf")] * 2
    for _ in range(3 * repeat):
        start = time.perf_counter()
        step_cost(closed, leaves, mesh)
        best[0] = min(best[0], time.perf_counter() - start)
        start = time.perf_counter()
        verify(demo.training_kernel, {"d": 64, "t": 64}, sizes, cost=False)
        best[1] = min(best[1], time.perf_counter() - start)
    return best[0], best[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="verify runs per mesh (best kept)")
    args = parser.parse_args()
    demo = load_demo("transformer_demo")

    meshes = [(4, 2), (32, 16), (64, 64), (256, 256)]
    configs = {"full": {}, "no cost": {"cost": False}, "neither": {"cost": False, "activations": False}}
    times: dict = {name: {} for name in configs}  # config -> devices -> best seconds
    with axis_rules(demo.RULES):
        for d, t in meshes:
            best = {name: float("inf") for name in configs}
            for _ in range(args.repeat):
                for name, options in configs.items():  # taking turns, so drift hits all alike
                    start = time.perf_counter()
                    report = verify(demo.training_kernel, {"d": d, "t": t}, sizes_for(d, t), **options)
                    best[name] = min(best[name], time.perf_counter() - start)
                    assert report.ok, str(report)
                    assert (report.cost is not None) == options.get("cost", True)
                    assert (report.activations is not None) == options.get("activations", True)
            for name in configs:
                times[name][d * t] = best[name]

        walk = walk_seconds(demo, args.repeat)
        mesh = jax.make_mesh((4, 2), ("d", "t"))
        with jax.set_mesh(mesh):
            state = make_shape_dtype_structs(demo.State, demo.DIMS, mesh)
            batch = make_shape_dtype_structs(demo.Batch, demo.DIMS, mesh)
            start = time.perf_counter()
            jax.jit(demo.training_kernel).lower(state, batch).compile()
            compile_seconds = time.perf_counter() - start

    print("verify of the demo's training step (80 layers, 70B-class sizes), best of "
          f"{args.repeat}, on abstract meshes:\n")
    print(f"  {'devices':>8s}  {'mesh':>10s}  {'verify s':>9s}  {'without the cost':>17s}  "
          f"{'without it and the activations':>31s}")
    full, no_cost, neither = times["full"], times["no cost"], times["neither"]
    for d, t in meshes:
        n = d * t
        print(f"  {n:8,d}  {f'{d}x{t}':>10s}  {full[n]:9.3f}  {no_cost[n]:17.3f}  {neither[n]:31.3f}")
    flat = max(full.values()) / min(full.values())
    print(f"\n  largest / smallest verify time = {flat:.2f}   (target: flat, near 1)")
    print(f"  at 4,096 devices, verify with / without the step's cost = "
          f"{full[4096] / no_cost[4096]:.2f}   (target <= 1.3)")
    print(f"  at 4,096 devices, the cost's walk alone (the step traced once, walked {3 * args.repeat} times, "
          f"best) = {walk[0]:.3f} s, {walk[0] / walk[1]:.2f} of verify without it ({walk[1]:.3f} s, "
          "best, taking turns)   (target <= 0.3)")
    print(f"  at 4,096 devices, verify with / without the activation estimate (no cost either way) = "
          f"{no_cost[4096] / neither[4096]:.2f}   (target <= 1.2)")
    print(f"  lower + compile of the same step on 8 real CPU devices (small sizes): "
          f"{compile_seconds:.2f} s")
    print(f"  verify at 4,096 devices / one real compile = {full[4096] / compile_seconds:.3f}")


if __name__ == "__main__":
    main()
