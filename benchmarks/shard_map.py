"""typed_shard_map against a hand-written jax.shard_map of the same kernel, in one run.

    python benchmarks/shard_map.py [--auto] [--number N] [--repeat R]
    python benchmarks/shard_map.py --tracking [--auto] [--repeat R]

The kernel is an FSDP + tensor-parallel MLP block on a (d=4, t=2) mesh of 8 simulated CPU
devices: gather the weights over d, two einsums, a psum_scatter over t. The typed version is
written with shardtypes.ops and takes its specs from its annotations; the hand-written one
passes the same specs to jax.shard_map and calls the jax.lax collectives directly. It prints
whether the compiled programs are identical (compared with instruction names aside too) and the
ratio of cached jitted-call times.

On Explicit axes (the default) every check runs at trace time: target identical HLO and a ratio
near 1.0. With ``--auto`` (Auto axes) the kernel's arguments are checked at compile time, through
shardtypes' effect-free primitive (``jax.debug.inspect_array_sharding``'s lowering without its
effect); the compiled HLO is still identical and cached calls stay on jit's C++ fast path
(target ratio ~1.0 against check 'off'). The run then
also times the typed kernel with ``shardtypes.config.auto_sharding_check = 'off'`` (no
inspection), and the same three ways for a kernel over a pytree dataclass of 16 weights (an
optimizer-style update), so the cost of the check is measured against both peers in one run.

``--tracking`` measures what layout tracking inside kernels costs (layouts that follow values,
sums still owed: ``shardtypes.checking.kernel_layouts``): the trace time of the demo's training kernel
(``examples/transformer.py``, forward, backward and Adam in one ``typed_shard_map``) with
tracking on and off, fresh traces taking turns, median of R each (target: ratio <= 1.2); and
whether the compiled HLO is the same both ways (tracking is trace-time only; partial sums typed
unreduced for JAX rename its reductions, so the names-aside comparison is the one to read).
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
from _common import measure, program_text, without_names  # noqa: E402


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
        with_check = without_names(program_text(hand, *args)) == without_names(program_text(typed, *args))
        shardtypes.config.auto_sharding_check = "off"
        without = without_names(program_text(hand, *args)) == without_names(program_text(typed, *args))
    finally:
        shardtypes.config.auto_sharding_check = "compile"
    return with_check, without


def tracking_cost(kind: AxisType, repeat: int) -> None:
    """Trace time of the demo's training kernel with layout tracking on and off."""
    import gc
    import statistics
    import time

    import numpy as np

    from shardtypes import axis_rules
    from shardtypes.checking import kernel_layouts as _kernel_layouts

    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "examples"))
    import transformer as demo

    mesh = jax.make_mesh((4, 2), ("d", "t"), axis_types=(kind, kind))
    rng = np.random.default_rng(0)
    pattern = rng.permutation(demo.DIMS["vocab"])[: demo.PATTERN_LENGTH]
    times: dict[bool, list[float]] = {True: [], False: []}
    try:
        with axis_rules(demo.RULES, mode=None), jax.set_mesh(mesh):
            state = demo.init_state(jax.random.key(0), mesh)
            batch = demo.make_batch(rng, pattern, mesh)

            def trace(on: bool) -> float:
                _kernel_layouts.ENABLED = on
                jax.clear_caches()
                gc.collect()
                start = time.perf_counter()
                jax.jit(demo.training_kernel).trace(state, batch)
                return time.perf_counter() - start

            trace(True), trace(False)  # warm up imports and caches outside JAX's
            for _ in range(repeat):
                for on in (True, False):
                    times[on].append(trace(on))
            programs = {}
            for on in (True, False):
                _kernel_layouts.ENABLED = on
                jax.clear_caches()
                programs[on] = program_text(jax.jit(demo.training_kernel), state, batch)
    finally:
        _kernel_layouts.ENABLED = True
    on, off = statistics.median(times[True]), statistics.median(times[False])
    print(f"Layout tracking in the demo's training kernel (examples/transformer.py), {kind.name} axes, "
          f"JAX {jax.__version__}; median of {repeat} fresh traces each, taking turns\n")
    print(f"  trace, tracking on:   {on * 1e3:8.1f} ms")
    print(f"  trace, tracking off:  {off * 1e3:8.1f} ms")
    print(f"  ratio on / off = {on / off:.2f}   (target <= 1.2)")
    print(f"  identical compiled HLO on and off: {programs[True] == programs[False]}; instruction names "
          f"aside: {without_names(programs[True]) == without_names(programs[False])}   (target: True)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--auto", action="store_true", help="Auto mesh axes (default Explicit)")
    parser.add_argument("--number", type=int, default=300)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--tracking", action="store_true",
                        help="the trace-time cost of layout tracking in the demo's training kernel")
    args = parser.parse_args()
    kind = AxisType.Auto if args.auto else AxisType.Explicit
    if args.tracking:
        tracking_cost(kind, args.repeat)
        return
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
            same_program = without_names(program_text(hand, *mlp_args)) == without_names(program_text(typed, *mlp_args))
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
    print(f"  identical compiled HLO (instruction names aside):  {same_program}   (target: True)")
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
