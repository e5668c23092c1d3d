"""The plan's HTML page: time to render and size, for the demo's 70B-class plan on 4,096 devices
(train and decode side by side, as ``shardtypes plan --mode default --mode decode --html`` makes
it) and for a tree of 2,000 arrays. The issue's bound is under 1 s and under 2 MB each.

    python benchmarks/plan_html.py [--repeat R]
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import time

import jax

jax.config.update("jax_num_cpu_devices", 8)

from shardtypes import axis_rules, f32, plan, plan_html  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


def demo_reports() -> dict:
    spec = importlib.util.spec_from_file_location("transformer", os.path.join(HERE, "..", "examples", "transformer.py"))
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    with axis_rules(module.RULES):
        train = plan(module.State, module.LARGE_MESH, module.LARGE)
    with axis_rules(module.RULES, mode="decode"):
        decode = plan(module.State, module.LARGE_MESH, module.LARGE)
    return {"train": train, "decode": decode}


def big_tree() -> dict:
    """2,000 arrays of one to four dims over a 64x64 mesh, some replicated."""
    specs = [b"embed/d hidden/t", b"layers embed/d heads/t head_dim", b"embed", b"vocab/t embed/d",
             b"layers hidden/t embed"]
    return {f"block_{j // 10}": {f"w{i % 10}": f32[jax.Array, specs[i % len(specs)]] for i in range(j, j + 10)}
            for j in range(0, 2000, 10)}


def best(fn, repeat: int) -> tuple[float, float, str]:
    """The first run's time (nothing cached), the best of ``repeat`` and the page."""
    times, page = [], ""
    for _ in range(repeat):
        start = time.perf_counter()
        page = fn()
        times.append(time.perf_counter() - start)
    return times[0], min(times), page


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").partition("\n")[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    reports = demo_reports()
    tree = plan(big_tree(), {"d": 64, "t": 64},
                {"embed": 8192, "hidden": 28672, "layers": 80, "heads": 64, "head_dim": 128, "vocab": 128256})
    assert len(tree.rows) == 2000, len(tree.rows)
    cases = {
        "demo 70B-class, train+decode, 37 arrays, 4,096 devices": lambda: plan_html(reports, "h100"),
        "demo 70B-class, train only": lambda: reports["train"].to_html("h100"),
        "2,000 arrays, 4,096 devices": lambda: tree.to_html("h100"),
    }
    print(f"{'page':58s} {'first':>10s} {'best':>10s} {'size':>10s}   (bound: 1 s, 2 MB)")
    for name, fn in cases.items():
        first, seconds, page = best(fn, args.repeat)
        size = len(page.encode())
        flag = "" if first < 1 and size < 2 * 2**20 else "  OVER THE BOUND"
        print(f"{name:58s} {first * 1e3:8.1f} ms {seconds * 1e3:8.1f} ms {size / 2**10:7.0f} KiB{flag}")


if __name__ == "__main__":
    main()
