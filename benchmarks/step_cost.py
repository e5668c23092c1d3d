"""verify's step cost against XLA's compiled program and jax.experimental.roofline, in one run.

    python benchmarks/step_cost.py

For each step below, on the simulated 8-device CPU mesh (d=4, t=2), it prints per device the
bytes sent in collectives and the matmul FLOPs: ours (``verify(...).cost``, from the traced
step, no compilation), XLA's (the collectives and dots of ``jax.jit(step).lower(...).compile()``,
with the same ring cost convention and loop trip counts: tests/tools/xla_costs.py), XLA's own
``cost_analysis()['flops']`` (which counts a while loop's body once), and
``jax.experimental.roofline``'s figures where the installed JAX has it (``roofline(step, mesh=mesh)(*args)``:
a kernel's per-device body, or the whole step at global shapes where there is no shard_map, its
FLOPs then divided by the devices; it counts ICI bytes only for collectives inside shard_map, and
has no rules for some primitives, where it fails), side by side with the ratios ours / XLA's.

  kernel        examples/transformer.py's training kernel (a typed_shard_map), Explicit axes
  mlp-explicit  a jitted @typechecked MLP step with a reshard (FSDP gather) on Explicit axes
  mlp-auto      the same step on Auto axes, a sharding constraint for the reshard
  scan-explicit a lax.scan over 6 stacked layers under jax.grad, Explicit axes
  scan-auto     the same on Auto axes

Targets (issue 36): communication within 1.25x of XLA's on kernel and Explicit steps, 2x on Auto;
matmul FLOPs within 1.25x everywhere.
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
import time
import warnings

import jax

jax.config.update("jax_num_cpu_devices", 8)

import shardtypes  # noqa: E402
from shardtypes import axis_rules, f32, make_shape_dtype_structs, verify  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
TESTS = os.path.join(HERE, "..", "tests")
sys.path[:0] = [HERE, TESTS, os.path.join(TESTS, "tools")]
from test_step_cost import MLP_DIMS, SCAN_DIMS, Blocks, Mlp, mlp_step, scan_step  # noqa: E402
from xla_costs import xla_cost  # noqa: E402

from _common import load_demo  # noqa: E402
from conftest import make_mesh  # noqa: E402

try:
    from jax.experimental import roofline as _roofline
except ImportError:  # (not in every JAX)
    _roofline = None


def roofline_of(fn, args, kernel: bool, mesh) -> str:
    """roofline's ICI bytes and FLOPs, per device: a kernel's body is per device already; a step
    with no shard_map is read at global shapes, so its FLOPs are divided by the devices."""
    if _roofline is None:
        return "not in this JAX"
    try:
        with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # (it says what it has no rule for, at length)
            _, result = _roofline.roofline(fn, mesh=mesh)(*args)
    except Exception as e:  # its rules do not cover every primitive
        return f"failed ({type(e).__name__}: {(str(e).splitlines() or [repr(e)])[0][:60]})"
    ici = sum(result.ici_bytes.values())
    per = 1 if kernel else jax.device_count()
    return f"{ici:>10,d} B {result.flops // per:>12,d} FLOP" + ("" if kernel else f" (global / {per})")


def demo_case():
    demo = load_demo("transformer_demo_step_cost")
    mesh = make_mesh("explicit")
    with axis_rules(demo.RULES):
        report = verify(demo.training_kernel, mesh.abstract_mesh, demo.DIMS)
        with shardtypes.Scope(**demo.DIMS), jax.set_mesh(mesh):
            args = (make_shape_dtype_structs(demo.State, demo.DIMS, mesh),
                    make_shape_dtype_structs(demo.Batch, demo.DIMS, mesh))
            return report, *compiled(demo.training_kernel, args, mesh, kernel=True)


def compiled(fn, args, mesh, kernel: bool = False):
    xla = xla_cost(jax.jit(fn), *args)
    analysed = jax.jit(fn).lower(*args).compile().cost_analysis()
    analysed = analysed[0] if isinstance(analysed, list) else analysed
    return xla, analysed.get("flops", 0.0), roofline_of(fn, args, kernel, mesh)


def step_case(fn, params_class, dims, kind):
    mesh = make_mesh(kind)
    args = (make_shape_dtype_structs(params_class, dims, mesh),
            make_shape_dtype_structs(f32[b"batch/d embed"], dims, mesh))
    report = verify(fn, mesh.abstract_mesh, dims)
    with jax.set_mesh(mesh):
        return report, *compiled(fn, args, mesh)


CASES = {
    "kernel": (demo_case, 1.25),
    "mlp-explicit": (lambda: step_case(mlp_step, Mlp, MLP_DIMS, "explicit"), 1.25),
    "mlp-auto": (lambda: step_case(mlp_step, Mlp, MLP_DIMS, "auto"), 2.0),
    "scan-explicit": (lambda: step_case(scan_step, Blocks, SCAN_DIMS, "explicit"), 1.25),
    "scan-auto": (lambda: step_case(scan_step, Blocks, SCAN_DIMS, "auto"), 2.0),
}


def main() -> None:
    print("verify's step cost against XLA's compiled program, per device, 8 CPU devices (d=4, t=2)\n")
    print(f"  {'step':14s} {'bytes: ours':>12s} {'XLA':>12s} {'ratio':>6s}   {'matmul FLOP: ours':>17s} "
          f"{'XLA dots':>12s} {'ratio':>6s} {'XLA cost_analysis':>18s}   roofline: ICI bytes, FLOP")
    for name, (case, target) in CASES.items():
        start = time.perf_counter()
        report, xla, analysed, roof = case()
        assert report.ok, report
        ours = report.cost
        comm = ours.communication.bytes_per_device / max(xla.bytes, 1)
        flops = ours.matmul_flops_per_device / max(xla.matmul_flops, 1)
        ok = max(comm, 1 / comm) <= target and max(flops, 1 / flops) <= 1.25
        print(f"  {name:14s} {ours.communication.bytes_per_device:12,d} {xla.bytes:12,d} {comm:6.2f}   "
              f"{ours.matmul_flops_per_device:17,d} {xla.matmul_flops:12,d} {flops:6.2f} {analysed:18,.0f}   "
              f"{roof}")
        print(f"  {'':14s} within {target:g}x (bytes) and 1.25x (FLOPs): {'yes' if ok else 'NO'}; all FLOPs "
              f"{ours.flops_per_device:,d}, memory {ours.memory_bytes_per_device:,d} B "
              f"({time.perf_counter() - start:.1f} s)")


if __name__ == "__main__":
    main()
