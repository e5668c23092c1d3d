"""Flax Linen: the implementation behind the public module ``shardtypes.linen``, whose
docstring is the user's guide."""

from typing import Any

import jax

from ..checking import check_named
from ..context import Scope
from ..layout import partition_specs as derive_specs, shardings as derive_shardings
from ..model import box_annotation, is_box, replicated_annotation, walk_leaves

__all__ = ["annotations", "partition_specs", "shardings", "unbox", "check"]


def _flat(tree: Any, what: str, arg: str) -> list:
    if tree is None or isinstance(tree, type):
        raise TypeError(f"{what}: {arg} must be a Linen variables tree (a dict, as model.init returns), got {tree!r}")
    return jax.tree_util.tree_flatten_with_path(tree, is_leaf=is_box)[0]


_UNBOXED = ("error", "replicate")


def annotations(variables: Any, unboxed: str = "error") -> Any:
    """The tree of ``variables`` (``jax.eval_shape(model.init, ...)``, or real ones) with each
    ``nn.Partitioned``/``nn.LogicallyPartitioned`` box replaced by the shardtypes annotation its
    names say (``f32[b'8/embed 32/mlp']``). A leaf in no box (a LayerNorm's scale, a step
    counter, an optimizer's count) is an error naming its path; with ``unboxed='replicate'`` it
    is replicated, as Flax lays it out (``f32[b'32']``)."""
    who = "shardtypes.linen.annotations"
    if unboxed not in _UNBOXED:
        raise ValueError(f"{who}: unboxed must be 'error' or 'replicate', got {unboxed!r}")
    flat = _flat(variables, who, "variables")
    bare = [jax.tree_util.keystr(p) or f"variables ({type(x).__name__})" for p, x in flat if not is_box(x)]
    if bare and unboxed == "error":
        shown = ", ".join(bare[:6]) + (f" and {len(bare) - 6} more" if len(bare) > 6 else "")
        kinds = {type(x).__name__ for _, x in flat if is_box(x)}
        wrapper = ("nn.with_partitioning(init, ('fsdp', None))" if kinds == {"Partitioned"}
                   else "nn.with_logical_partitioning(init, ('embed', 'mlp'))")
        raise TypeError(
            f"{who}: {shown} is in no nn.Partitioned box, so it has no layout; replicate what is in no box, as "
            f"Flax does, with unboxed='replicate', or wrap its initializer in {wrapper}"
        )

    def leaf(path: Any, x: Any) -> Any:
        where = jax.tree_util.keystr(path)
        if is_box(x):
            return box_annotation(x, lambda: where)
        return replicated_annotation(x, f"{who}: {where or 'variables'}")

    return jax.tree_util.tree_map_with_path(leaf, variables, is_leaf=is_box)


def partition_specs(variables: Any, unboxed: str = "error") -> Any:
    """The PartitionSpec of every boxed variable, through the active ``AxisRules`` for logical
    names (``make_partition_specs`` of ``annotations(variables, unboxed)``)."""
    return derive_specs(annotations(variables, unboxed))


def shardings(variables: Any, mesh: Any = None, unboxed: str = "error") -> Any:
    """The NamedSharding of every boxed variable over ``mesh`` (default: the current one),
    through the active ``AxisRules``: ``jax.jit(model.init, out_shardings=...)`` takes it as
    it is (each box's subtree gets its sharding). ``unboxed='replicate'``: a variable in no box
    (a LayerNorm's scale, a step counter) is replicated, as Flax does, instead of an error."""
    return derive_shardings(annotations(variables, unboxed), mesh)


def unbox(variables: Any) -> Any:
    """``variables`` with every box replaced by its value (``nn.meta.unbox``'s job, without
    needing Flax here): the tree ``shard``, checks and the training step take."""
    _flat(variables, "shardtypes.linen.unbox", "variables")
    return jax.tree.map(lambda x: x.value if is_box(x) else x, variables, is_leaf=is_box)


def check(variables: Any, annotation: Any = None) -> None:
    """Checks a Linen variables tree (boxed or unboxed) against ``annotation``, an annotation
    tree the user wrote (nested dicts of ``f32[b'embed/embed mlp/mlp']``, as the tree is
    nested), or, with no annotation, against the annotations its own boxes say. All leaves share
    one dimension table, so ``embed`` is one size across the model. A path the annotation has and
    the variables lack, or the reverse, is an error naming it."""
    who = "shardtypes.linen.check"
    if annotation is None:
        annotation = annotations(variables)
    values = {jax.tree_util.keystr(p): x for p, x in _flat(unbox(variables), who, "variables")}
    leaves = jax.tree.leaves(walk_leaves(annotation, _Annotation))
    paths = [jax.tree_util.keystr(p) for p, _ in jax.tree_util.tree_flatten_with_path(
        walk_leaves(annotation, _Annotation), is_leaf=lambda x: isinstance(x, _Annotation))[0]]
    missing = [p for p in paths if p not in values]
    extra = [p for p in values if p not in set(paths)]
    if missing or extra:
        parts = ([f"the annotation has {missing[:6]}, which the variables lack"] if missing else []) + \
            ([f"the variables have {extra[:6]}, which the annotation does not"] if extra else [])
        raise TypeError(f"{who}: the variables do not match the annotation: {'; '.join(parts)}")
    with Scope():
        for path, leaf in zip(paths, leaves):
            check_named(values[path], leaf.annotation, path, who)


class _Annotation:
    """One leaf of the walked annotation tree (an object, so JAX keeps it a leaf)."""

    __slots__ = ("annotation",)

    def __init__(self, leaf: Any):
        self.annotation = leaf.annotation
