"""Cost of checking one eager call, against peers measured in the same run.

    python benchmarks/overhead.py [--auto] [--number N] [--repeat R]

The function is ``f(x: f32[b'b/d e'], y: f32[b'b/d e']) -> f32[b'b/d e']`` on arrays sharded over an
8-device simulated CPU mesh, decorated four ways, with two bodies: ``return x`` (so the time is the
cost of checking alone; the targets are judged on this one) and ``return x + y`` (an eager op,
whose dispatch dominates and is noisy):

  bare                 no checks
  typeguard            plain typeguard.typechecked with jax.Array annotations (type only)
  shardtypes           shardtypes.typechecked (dtype, shape, dimension table AND sharding)
  jaxtyping+beartype   Float[Array, 'b e'] under jaxtyped(typechecker=beartype) (shape only)

It prints µs per call, the cost above bare, and the ratios. Machines
are noisy: only the ratios within one run mean anything. Under jax.jit it also compares the
compiled program of the checked function with the bare one and the cost of a cached call.
"""

from __future__ import annotations

import argparse
import os
import sys

import jax

jax.config.update("jax_num_cpu_devices", 8)

import jax.numpy as jnp  # noqa: E402
import typeguard  # noqa: E402
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P  # noqa: E402

import shardtypes  # noqa: E402
from shardtypes import f32  # noqa: E402

sys.path.insert(0, os.path.dirname(__file__))
from _common import measure as _measure, program_text  # noqa: E402


def measure(fns: dict, args, number: int, repeat: int) -> dict:
    return _measure({name: (lambda fn=fn: fn(*args)) for name, fn in fns.items()}, number, repeat)


def make_versions(body):
    """The function decorated each way, with ``body(x, y)`` as its body."""

    def bare(x, y):
        return body(x, y)

    @typeguard.typechecked
    def with_typeguard(x: jax.Array, y: jax.Array) -> jax.Array:
        return body(x, y)

    @shardtypes.typechecked
    def with_shardtypes(x: f32[b"b/d e"], y: f32[b"b/d e"]) -> f32[b"b/d e"]:
        return body(x, y)

    versions = {"bare": bare, "typeguard": with_typeguard, "shardtypes": with_shardtypes}
    try:
        from beartype import beartype
        from jaxtyping import Array, Float, jaxtyped
    except ImportError:
        return versions

    @jaxtyped(typechecker=beartype)
    def with_jaxtyping(x: Float[Array, "b e"], y: Float[Array, "b e"]) -> Float[Array, "b e"]:
        return body(x, y)

    versions["jaxtyping+beartype"] = with_jaxtyping
    return versions


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--auto", action="store_true", help="Auto mesh axes (default Explicit)")
    parser.add_argument("--number", type=int, default=2000, help="calls per timing")
    parser.add_argument("--repeat", type=int, default=7, help="timings per function (best kept)")
    args = parser.parse_args()

    kind = AxisType.Auto if args.auto else AxisType.Explicit
    mesh = jax.make_mesh((8,), ("d",), axis_types=(kind,))
    sharding = NamedSharding(mesh, P("d"))
    x = jax.device_put(jnp.ones((64, 128), jnp.float32), sharding)
    y = jax.device_put(jnp.ones((64, 128), jnp.float32), sharding)

    print(f"f(x: f32[b'b/d e'], y: f32[b'b/d e']) -> f32[b'b/d e'] on float32[64,128] sharded "
          f"P('d') over 8 CPU devices, {kind.name} axes; best of {args.repeat} x {args.number}\n")
    over = {}
    for title, body in [("body `return x` (the cost of checking alone)", lambda x, y: x),
                        ("body `return x + y` (an eager op)", lambda x, y: x + y)]:
        fns = make_versions(body)
        for fn in fns.values():  # warm up, and prove every version accepts the call
            jax.block_until_ready(fn(x, y))
        times = measure(fns, (x, y), args.number, args.repeat)
        base = times["bare"]
        print(f"{title}\n  {'':20s} {'µs/call':>9s} {'above bare':>11s}")
        for name, t in times.items():
            print(f"  {name:20s} {t:9.2f} {t - base:11.2f}")
        if not over:
            over = {name: max(t - base, 1e-3) for name, t in times.items()}
        print()

    print("ratios of checking cost (µs above bare, body `return x`):")
    print(f"  shardtypes / typeguard          = {over['shardtypes'] / over['typeguard']:.2f}"
          "   (target <= 1.5)")
    if "jaxtyping+beartype" in over:
        print(f"  shardtypes / jaxtyping+beartype = "
              f"{over['shardtypes'] / over['jaxtyping+beartype']:.2f}   (target < 1)")

    # Under jit, checks run once at trace time (and, on Auto axes, once at compile time).
    with jax.set_mesh(mesh):
        fns = make_versions(lambda x, y: x + y)
        jit_bare = jax.jit(fns["bare"])
        jit_checked = jax.jit(fns["shardtypes"])
        same = program_text(jit_bare, x, y) == program_text(jit_checked, x, y)
        jax.block_until_ready(jit_bare(x, y))
        jax.block_until_ready(jit_checked(x, y))
        jit_times = measure({"jit bare": jit_bare, "jit shardtypes": jit_checked}, (x, y),
                            args.number, args.repeat)
    print("\nunder jax.jit (body `return x + y`):")
    print(f"  compiled program identical to the unchecked one: {same}")
    print(f"  cached call: bare {jit_times['jit bare']:.2f} µs, shardtypes "
          f"{jit_times['jit shardtypes']:.2f} µs, ratio "
          f"{jit_times['jit shardtypes'] / jit_times['jit bare']:.2f}   (target ~1.0)")
    if kind == AxisType.Auto and shardtypes.config.auto_sharding_check == "compile":
        print("  (Auto axes: the compile-time check leaves a debug effect in the executable, which\n"
              "   takes jit off its C++ fast path; shardtypes.config.auto_sharding_check = 'off'\n"
              "   removes it. Explicit axes are checked at trace time and cost nothing here.)")


if __name__ == "__main__":
    main()
