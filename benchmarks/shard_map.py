"""typed_shard_map against a hand-written jax.shard_map of the same kernel, in one run.

    python benchmarks/shard_map.py [--auto] [--number N] [--repeat R]

The kernel is an FSDP + tensor-parallel MLP block on a (d=4, t=2) mesh of 8 simulated CPU
devices: gather the weights over d, two einsums, a psum_scatter over t. The typed version is
written with shardtypes.ops and takes its specs from its annotations; the hand-written one
passes the same specs to jax.shard_map and calls the jax.lax collectives directly. It prints
whether the compiled programs are identical and the ratio of cached jitted-call times.

On Explicit axes (the default) every check runs at trace time: target identical HLO and a ratio
near 1.0. With ``--auto`` (Auto axes) the kernel's arguments are checked at compile time, through
shardtypes' effect-free primitive (``jax.debug.inspect_array_sharding``'s lowering without its
effect); the compiled HLO is still identical and cached calls stay on jit's C++ fast path
(target ratio ~1.0 against check 'off'). The run then
also times the typed kernel with ``shardtypes.config.auto_sharding_check = 'off'`` (no
inspection), and the same three ways for a kernel over a pytree dataclass of 16 weights (an
optimizer-style update), so the cost of the check is measured against both peers in one run.
"""

from __future__ import annotations

import argparse
import os
import sys
import timeit

import jax

jax.config.update("jax_num_cpu_devices", 8)

import jax.numpy as jnp  # noqa: E402
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P  # noqa: E402

import shardtypes  # noqa: E402
from shardtypes import f32, make_partition_specs, ops, pytree_dataclass, typed_shard_map  # noqa: E402

sys.path.insert(0, os.path.dirname(__file__))
from _common import measure, program_text  # noqa: E402


@typed_shard_map
def typed_mlp(
    x: f32[b"batch/d seq embed"], w_up: f32[b"embed/d hidden/t"], w_down: f32[b"hidden/t embed/d"]
) -> f32[b"batch/d seq embed/t"]:
    w_up = ops.all_gather("embed/d hidden/t -> embed hidden/t", w_up)
    w_down = ops.all_gather("hidden/t embed/d -> hidden/t embed", w_down)
    h = ops.einsum_unreduced("batch/d seq embed, embed hidden/t -> batch/d seq hidden/t", x, w_up)
    h = jax.nn.relu(h)
    y = ops.einsum_unreduced("batch/d seq hidden/t, hidden/t embed -> batch/d seq embed", h, w_down)
    return ops.psum_scatter("batch/d seq embed -> batch/d seq embed/t", y)


def hand_mlp(x, w_up, w_down):
    w_up = jax.lax.all_gather(w_up, "d", axis=0, tiled=True)
    w_down = jax.lax.all_gather(w_down, "d", axis=1, tiled=True)
    h = jax.nn.relu(jnp.einsum("bsm,mh->bsh", x, w_up))
    y = jnp.einsum("bsh,hm->bsm", h, w_down)
    return jax.lax.psum_scatter(y, "t", scatter_dimension=2, tiled=True)


@pytree_dataclass
class Block:
    w_q: f32[b"embed/d heads/t"]
    w_k: f32[b"embed/d heads/t"]
    w_v: f32[b"embed/d heads/t"]
    w_o: f32[b"heads/t embed/d"]


@pytree_dataclass
class Weights:
    blocks: tuple[Block, Block, Block, Block]  # 16 weights


@typed_shard_map
def typed_update(weights: Weights, grads: Weights) -> Weights:
    return jax.tree.map(lambda w, g: w - 0.01 * g, weights, grads)


def hand_update(weights, grads):
    return jax.tree.map(lambda w, g: w - 0.01 * g, weights, grads)


def _time_modes(variants: dict, number: int, repeat: int) -> dict[str, float]:
    """Best µs per call of each (function, auto_sharding_check) variant; they take turns."""
    best = {name: float("inf") for name in variants}
    try:
        for _ in range(repeat):
            for name, (fn, mode) in variants.items():
                shardtypes.config.auto_sharding_check = mode  # part of jit's cache key
                fn()  # the compiled program of this mode (traced on the first turn)
                best[name] = min(best[name], timeit.timeit(fn, number=number) / number * 1e6)
    finally:
        shardtypes.config.auto_sharding_check = "compile"
    return best


def _same_program(hand, typed, args) -> tuple[bool, bool]:
    """(identical compiled HLO with the check, identical with it off)."""
    try:
        with_check = program_text(hand, *args) == program_text(typed, *args)
        shardtypes.config.auto_sharding_check = "off"
        without = program_text(hand, *args) == program_text(typed, *args)
    finally:
        shardtypes.config.auto_sharding_check = "compile"
    return with_check, without


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--auto", action="store_true", help="Auto mesh axes (default Explicit)")
    parser.add_argument("--number", type=int, default=300)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    kind = AxisType.Auto if args.auto else AxisType.Explicit
    mesh = jax.make_mesh((4, 2), ("d", "t"), axis_types=(kind, kind))

    def put(a, *spec):
        return jax.device_put(a, NamedSharding(mesh, P(*spec)))

    key = jax.random.key(0)
    x = put(jax.random.normal(key, (16, 32, 64)), "d")
    w_up = put(jax.random.normal(key, (64, 256)), "d", "t")
    w_down = put(jax.random.normal(key, (256, 64)), "t", "d")

    with jax.set_mesh(mesh):
        hand = jax.jit(jax.shard_map(
            hand_mlp,
            in_specs=(P("d", None, None), P("d", "t"), P("t", "d")),
            out_specs=P("d", None, "t"),
        ))
        typed = jax.jit(typed_mlp)
        same_numbers = bool(jnp.allclose(hand(x, w_up, w_down), typed(x, w_up, w_down)))
        mlp_args = (x, w_up, w_down)

        def mlp_hand():
            return hand(x, w_up, w_down).block_until_ready()

        def mlp_typed():
            return typed(x, w_up, w_down).block_until_ready()

        if not args.auto:
            same_program = program_text(hand, *mlp_args) == program_text(typed, *mlp_args)
            times = measure({"jax.shard_map": mlp_hand, "typed_shard_map": mlp_typed},
                            args.number, args.repeat)
        else:
            same_program, same_off = _same_program(hand, typed, mlp_args)
            times = _time_modes({
                "jax.shard_map": (mlp_hand, "compile"),
                "typed_shard_map": (mlp_typed, "compile"),
                "typed, check 'off'": (mlp_typed, "off"),
            }, args.number, args.repeat)

            specs = make_partition_specs(Weights)
            tree = jax.tree.map(
                lambda s: put(jax.random.normal(key, (64, 64)), *s), specs,
                is_leaf=lambda s: isinstance(s, P))
            grads = jax.tree.map(lambda w: w * 0.5, tree)
            hand_u = jax.jit(jax.shard_map(hand_update, in_specs=(specs, specs), out_specs=specs))
            typed_u = jax.jit(typed_update)
            same_u = _same_program(hand_u, typed_u, (tree, grads))

            def leaves_ready(out):
                return jax.block_until_ready(out)

            times_u = _time_modes({
                "jax.shard_map": (lambda: leaves_ready(hand_u(tree, grads)), "compile"),
                "typed_shard_map": (lambda: leaves_ready(typed_u(tree, grads)), "compile"),
                "typed, check 'off'": (lambda: leaves_ready(typed_u(tree, grads)), "off"),
            }, args.number, args.repeat)

    print(f"FSDP+TP MLP kernel on a (d=4, t=2) {kind.name} mesh, jitted; best of {args.repeat} x "
          f"{args.number} cached calls\n")
    print(f"  same numbers:            {same_numbers}")
    print(f"  identical compiled HLO:  {same_program}   (target: True)")
    if not args.auto:
        for name, t in times.items():
            print(f"  {name:20s} {t:9.2f} µs/call")
        print(f"  ratio typed / hand-written = {times['typed_shard_map'] / times['jax.shard_map']:.2f}"
              "   (target ~1.0)")
        return
    print(f"  identical compiled HLO with auto_sharding_check='off': {same_off}")
    _report_auto(times, "3 array arguments")
    print(f"\nOptimizer-style update over a pytree dataclass of 16 weights (twice: weights, grads)"
          f"\n\n  identical compiled HLO:  {same_u[0]}   (with 'off': {same_u[1]})")
    _report_auto(times_u, "32 array leaves")


def _report_auto(times: dict[str, float], what: str) -> None:
    for name, t in times.items():
        print(f"  {name:20s} {t:9.2f} µs/call")
    hand, typed, off = times["jax.shard_map"], times["typed_shard_map"], times["typed, check 'off'"]
    print(f"  ratio typed (compile-time check, {what}) / hand-written = {typed / hand:.2f}")
    print(f"  ratio typed (check 'off') / hand-written = {off / hand:.2f}   (target ~1.0)")
    print(f"  ratio check / check 'off' = {typed / off:.2f}   (target <= 1.05: the compiled program is "
          "the same and the check declares no JAX effect, so cached calls keep jit's fast path)")


if __name__ == "__main__":
    main()
