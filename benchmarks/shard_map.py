"""typed_shard_map against a hand-written jax.shard_map of the same kernel, in one run.

    python benchmarks/shard_map.py [--auto] [--number N] [--repeat R]

The kernel is an FSDP + tensor-parallel MLP block on a (d=4, t=2) mesh of 8 simulated CPU
devices: gather the weights over d, two einsums, a psum_scatter over t. The typed version is
written with shardtypes.ops and takes its specs from its annotations; the hand-written one
passes the same specs to jax.shard_map and calls the jax.lax collectives directly. It prints
whether the compiled programs are identical and the ratio of cached jitted-call times (target:
identical, ratio near 1.0; checks run at trace time only).
"""

from __future__ import annotations

import argparse
import os
import sys

import jax

jax.config.update("jax_num_cpu_devices", 8)

import jax.numpy as jnp  # noqa: E402
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P  # noqa: E402

from shardtypes import f32, ops, typed_shard_map  # noqa: E402

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
        same_program = program_text(hand, x, w_up, w_down) == program_text(typed, x, w_up, w_down)
        times = measure({
            "jax.shard_map": lambda: hand(x, w_up, w_down).block_until_ready(),
            "typed_shard_map": lambda: typed(x, w_up, w_down).block_until_ready(),
        }, args.number, args.repeat)

    print(f"FSDP+TP MLP kernel on a (d=4, t=2) {kind.name} mesh, jitted; best of {args.repeat} x "
          f"{args.number} cached calls\n")
    print(f"  same numbers:            {same_numbers}")
    print(f"  identical compiled HLO:  {same_program}   (target: True)")
    for name, t in times.items():
        print(f"  {name:16s} {t:9.2f} µs/call")
    print(f"  ratio typed / hand-written = {times['typed_shard_map'] / times['jax.shard_map']:.2f}"
          "   (target ~1.0)")


if __name__ == "__main__":
    main()
