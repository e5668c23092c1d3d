"""make_shardings on a 2,000-leaf parameter tree, against Flax's logical_to_mesh_sharding.

    python benchmarks/make_shardings.py [--repeat R]

The tree: 80 unstacked transformer layers of 8 weights each, plus embedding, unembedding and a
final norm, for the parameters and for both Adam moments: 3 x (80 x 8 + 3) = 1,929 leaves. In
shardtypes it is one annotation (layers are a pytree dataclass), written once with mesh axes and
once with logical axes resolved through AxisRules; in Flax it is the same tree of logical
PartitionSpecs with the same rules mapping logical names to the mesh axes. Both give the same
NamedShardings on a (d=4, t=2) mesh of 8 simulated CPU devices. It prints ms per derivation and
the ratio (target: shardtypes faster than Flax). shardtypes keeps the NamedSharding of each
(annotation, mesh) pair, as layer after layer repeats the same few annotations; the "cold" line
clears that cache before every derivation. It also lays out the same parameters as a Linen
model's boxed abstract variables hold them (nn.LogicallyPartitioned), through shardtypes.linen
and through Flax (target: shardtypes faster). With optax installed it also times the AdamW state of
the parameters laid out through like=, per leaf against the parameters' own (target <= 1.5).
"""

from __future__ import annotations

import argparse
import os
import sys

import jax

jax.config.update("jax_num_cpu_devices", 8)

from jax.sharding import PartitionSpec as P  # noqa: E402

from shardtypes import AxisRules, axis_rules, f32, make_shape_dtype_structs, make_shardings, pytree_dataclass  # noqa: E402

sys.path.insert(0, os.path.dirname(__file__))
from _common import measure  # noqa: E402

N_LAYERS = 80


@pytree_dataclass
class Layer:
    ln1: f32[b"embed"]
    w_q: f32[b"embed/d heads/t head_dim"]
    w_k: f32[b"embed/d heads/t head_dim"]
    w_v: f32[b"embed/d heads/t head_dim"]
    w_o: f32[b"heads/t head_dim embed/d"]
    ln2: f32[b"embed"]
    w_up: f32[b"embed/d hidden/t"]
    w_down: f32[b"hidden/t embed/d"]


PARAMS = {
    "embed": f32[b"vocab/t embed/d"],
    "layers": [Layer] * N_LAYERS,
    "final_norm": f32[b"embed"],
    "unembed": f32[b"embed/d vocab/t"],
}
STATE = {"params": PARAMS, "mu": PARAMS, "nu": PARAMS}


# The same tree annotated with logical axes, laid out through rules (issue 4's benchmark).
@pytree_dataclass
class LogicalLayer:
    ln1: f32[b"e"]
    w_q: f32[b"e/embed h/heads k"]
    w_k: f32[b"e/embed h/heads k"]
    w_v: f32[b"e/embed h/heads k"]
    w_o: f32[b"h/heads k e/embed"]
    ln2: f32[b"e"]
    w_up: f32[b"e/embed m/mlp"]
    w_down: f32[b"m/mlp e/embed"]


LOGICAL_PARAMS = {
    "embed": f32[b"v/vocab e/embed"],
    "layers": [LogicalLayer] * N_LAYERS,
    "final_norm": f32[b"e"],
    "unembed": f32[b"e/embed v/vocab"],
}
LOGICAL_STATE = {"params": LOGICAL_PARAMS, "mu": LOGICAL_PARAMS, "nu": LOGICAL_PARAMS}
RULES = AxisRules([("embed", "d"), ("heads", "t"), ("mlp", "t"), ("vocab", "t")], name="bench")

# The same layout as Flax writes it: logical names per dim, and rules to mesh axes.
FLAX_RULES = (("embed", "d"), ("heads", "t"), ("hidden", "t"), ("vocab", "t"), ("head_dim", None))
FLAX_LAYER = {
    "ln1": P(None), "w_q": P("embed", "heads", "head_dim"), "w_k": P("embed", "heads", "head_dim"),
    "w_v": P("embed", "heads", "head_dim"), "w_o": P("heads", "head_dim", "embed"), "ln2": P(None),
    "w_up": P("embed", "hidden"), "w_down": P("hidden", "embed"),
}
FLAX_PARAMS = {
    "embed": P("vocab", "embed"),
    "layers": [dict(FLAX_LAYER) for _ in range(N_LAYERS)],
    "final_norm": P(None),
    "unembed": P("embed", "vocab"),
}
FLAX_STATE = {"params": FLAX_PARAMS, "mu": FLAX_PARAMS, "nu": FLAX_PARAMS}


# The rules for Linen boxes: head_dim is named in the boxes, so it needs a rule (to no axis).
LINEN_RULES = AxisRules([(name, axis) for name, axis in FLAX_RULES], name="linen-bench")


def linen_boxes(specs, nn) -> dict:
    """FLAX_PARAMS as a Linen model's abstract variables: a LogicallyPartitioned box of a
    ShapeDtypeStruct per leaf, its names the spec's logical names."""
    sizes = {"vocab": 512, "embed": 64, "heads": 4, "head_dim": 16, "hidden": 128, None: 64}

    def box(spec):
        names = tuple(spec) if spec != P(None) else ("embed",)
        return nn.LogicallyPartitioned(
            jax.ShapeDtypeStruct(tuple(sizes[n] for n in names), jax.numpy.float32), names)

    return {"params": jax.tree.map(box, specs, is_leaf=lambda x: isinstance(x, P))}


def by_path(tree) -> dict:
    """Leaf path (attribute and key steps written alike) -> normalised PartitionSpec."""
    out = {}
    for path, sharding in jax.tree_util.tree_flatten_with_path(tree)[0]:
        steps = "/".join(str(getattr(k, "name", getattr(k, "key", getattr(k, "idx", k)))) for k in path)
        spec = tuple(sharding.spec) + (None,) * 3
        out[steps] = spec[:3]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--number", type=int, default=5)
    args = parser.parse_args()
    mesh = jax.make_mesh((4, 2), ("d", "t"))

    ours = make_shardings(STATE, mesh)
    n_leaves = len(jax.tree.leaves(ours))
    from shardtypes.layout import specs as _specs

    def cold():  # as on the first call for this mesh: nothing cached
        _specs._SHARDINGS.clear()
        return make_shardings(STATE, mesh)

    def through_rules():
        with axis_rules(RULES):
            return make_shardings(LOGICAL_STATE, mesh)

    def through_rules_cold():
        _specs._SHARDINGS.clear()
        return through_rules()

    same_through_rules = by_path(through_rules()) == by_path(ours)
    fns = {
        "shardtypes.make_shardings": lambda: make_shardings(STATE, mesh),
        "shardtypes, cold (no cache)": cold,
        "shardtypes through AxisRules": through_rules,
        "shardtypes through rules, cold": through_rules_cold,
    }
    try:
        from flax import linen as nn
    except ImportError:
        nn = None
        print("(flax is not installed: pip install flax, to compare)\n")
    if nn is not None:
        theirs = nn.logical_to_mesh_sharding(FLAX_STATE, mesh, FLAX_RULES)
        same = by_path(ours) == by_path(theirs)
        fns["flax logical_to_mesh_sharding"] = lambda: nn.logical_to_mesh_sharding(FLAX_STATE, mesh, FLAX_RULES)
    try:
        import optax
    except ImportError:
        optax = None
        print("(optax is not installed: pip install optax, to time an optimizer state)\n")
    if optax is not None:
        # optax's AdamW state of the parameters alone (mu and nu mirror them, count is a scalar),
        # laid out like the parameters through like=: per leaf against the parameters' own.
        dims = {"vocab": 512, "embed": 64, "heads": 4, "head_dim": 16, "hidden": 128}
        adamw = jax.eval_shape(optax.adamw(1e-3).init, make_shape_dtype_structs(PARAMS, dims, mesh))
        n_params = len(jax.tree.leaves(make_shardings(PARAMS, mesh)))
        n_adamw = len(jax.tree.leaves(make_shardings(adamw, mesh, like=PARAMS)))
        fns["shardtypes params alone"] = lambda: make_shardings(PARAMS, mesh)
        fns["shardtypes optax adamw (like=)"] = lambda: make_shardings(adamw, mesh, like=PARAMS)
    if nn is not None:
        # The parameters as a Linen model's abstract variables hold them: a LogicallyPartitioned
        # box per leaf with its logical names, laid out through the same rules by both libraries.
        linen_tree = linen_boxes(FLAX_PARAMS, nn)
        n_linen = len(jax.tree.leaves(linen_tree, is_leaf=lambda x: isinstance(x, nn.Partitioned)))
        import shardtypes.linen as st_linen

        def linen_ours():
            with axis_rules(LINEN_RULES):
                return st_linen.shardings(linen_tree, mesh)

        def linen_flax():
            return nn.logical_to_mesh_sharding(nn.get_partition_spec(linen_tree), mesh, FLAX_RULES)

        same_linen = by_path(linen_ours()) == by_path(linen_flax())
        fns["shardtypes.linen.shardings"] = linen_ours
        fns["flax on the Linen tree"] = linen_flax
    times = measure(fns, args.number, args.repeat)
    print(f"{n_leaves}-leaf tree (params + 2 Adam moments, {N_LAYERS} unstacked layers) on a "
          f"(d=4, t=2) mesh; best of {args.repeat} x {args.number}\n")
    leaves = {"shardtypes params alone": n_params, "shardtypes optax adamw (like=)": n_adamw} if optax else {}
    if nn is not None:
        leaves.update({"shardtypes.linen.shardings": n_linen, "flax on the Linen tree": n_linen})
    for name, t in times.items():
        n = leaves.get(name, n_leaves)
        print(f"  {name:32s} {t / 1000:8.2f} ms per derivation  ({t / n:.2f} µs per leaf, {n} leaves)")
    if optax is not None:
        per_leaf = (times["shardtypes optax adamw (like=)"] / n_adamw) / (times["shardtypes params alone"] / n_params)
        print(f"\n  optax adamw state per leaf / parameters per leaf = {per_leaf:.2f}   (target <= 1.5)")
    if nn is not None:
        print(f"\n  same shardings: {same} (mesh axes), {same_through_rules} (through rules)")
        flax_t = times["flax logical_to_mesh_sharding"]
        print(f"  ratio shardtypes / flax       = {times['shardtypes.make_shardings'] / flax_t:.2f}"
              "   (target < 1)")
        print(f"  ratio shardtypes cold / flax  = {times['shardtypes, cold (no cache)'] / flax_t:.2f}")
        print(f"  ratio through rules / flax    = {times['shardtypes through AxisRules'] / flax_t:.2f}"
              "   (target < 1; Flax resolves the same rules)")
        print(f"  ratio through rules, cold / flax = "
              f"{times['shardtypes through rules, cold'] / flax_t:.2f}")
        print(f"\n  Linen boxes ({n_linen} leaves), same shardings: {same_linen}")
        print(f"  ratio shardtypes.linen / flax (get_partition_spec + logical_to_mesh_sharding) = "
              f"{times['shardtypes.linen.shardings'] / times['flax on the Linen tree']:.2f}   (target < 1)")


if __name__ == "__main__":
    main()
