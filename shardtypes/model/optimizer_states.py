"""Trees of values whose layout comes from the annotated classes inside them: optimizer states.

An optax state is a tree of containers that carry no shardtypes annotation (``ScaleByAdamState``,
a NamedTuple whose annotations are optax's own and may not even resolve; tuples of them from
``optax.chain``; ``EmptyState()``; ``MaskedNode()`` holes from ``optax.masked``), and inside
them the parameters' own annotated classes (``mu`` and ``nu`` are ``Params`` instances).
``walk_value`` maps a function over such a tree, leaf by leaf, with these rules:

* a subtree that is an instance of an annotated class (a pytree dataclass, a dataclass of any
  model library, a NamedTuple with shardtypes fields) takes its class's layout, field by field;
* a scalar leaf that no annotation covers (``count``) is replicated: it is read as its dtype
  class with no dims (``i32[b'']``);
* where a ``like=`` tree is given, a subtree with no annotation above it whose key paths are
  ``like``'s (``MaskedNode`` holes allowed) takes ``like``'s layout, leaf for leaf;
* a Flax Linen box (``nn.LogicallyPartitioned``) takes the layout its names say (``linen_boxes``);
* any other leaf is an error naming its path; empty nodes (``EmptyState()``, ``None``) stay.

>>> state = jax.eval_shape(optax.adamw(1e-3).init, params)        # doctest: +SKIP
>>> make_shardings(state, mesh)                                    # doctest: +SKIP
(ScaleByAdamState(count=NamedSharding(.., P()), mu=Params(w=..P('d', 't')..), nu=...), ...)
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import jax

from .annotation_nodes import ArrayNode, ClassNode, DictNode, Node, SeqNode, UnionNode, follow, model
from .annotations import dtype_classes, subscript
from .categories import anydtype
from .describe import describe
from .forms import safe_is_checked_class
from .linen_boxes import box_annotation, is_box

__all__ = ["Like", "walk_value", "is_value_tree", "is_array_value", "holds_annotated_class", "scalar_annotation",
           "annotated_instances"]

# An annotation's walk at one path: ``(annotation, path) -> result``.
AnnotationWalk = Callable[[Any, str], Any]


def is_array_value(x: Any) -> bool:
    """An array-like leaf: a ``jax.Array``, tracer, ``np.ndarray`` or ``jax.ShapeDtypeStruct``
    (an annotation class has a ``dtype`` too, but is a class)."""
    return not isinstance(x, type) and hasattr(x, "shape") and hasattr(x, "dtype")


def is_value_tree(x: Any) -> bool:
    """Whether ``x``, given where an annotation tree is expected, is a tree of values: an
    array-like, an instance of a dataclass or NamedTuple (of any class), a pytree node JAX
    knows other than a plain tuple, list or dict, or a plain container holding any of these."""
    if type(x) not in (tuple, list, dict):
        return _is_value_node(x)
    # A plain container: looked into without recursion (the annotation walk reports a tree that
    # holds itself or is nested too deeply), each container once.
    stack, seen = [x], {id(x)}
    while stack:
        for child in _children(stack.pop()):
            if type(child) in (tuple, list, dict):
                if id(child) not in seen and len(seen) < 100_000:
                    seen.add(id(child))
                    stack.append(child)
            elif _is_value_node(child):
                return True
    return False


def _children(container: Any) -> Any:
    return container.values() if isinstance(container, dict) else container


def _is_value_node(x: Any) -> bool:
    if isinstance(x, type) or x is None:
        return False
    if is_array_value(x):
        return True
    if dataclasses.is_dataclass(x) or (isinstance(x, tuple) and hasattr(type(x), "_fields")):
        return True
    try:
        leaves = jax.tree.leaves(x)
    except Exception:  # an object JAX cannot flatten: not a value tree; the walk says why
        return False
    return len(leaves) != 1 or leaves[0] is not x


def holds_annotated_class(tree: Any) -> bool:
    """Whether the value tree ``tree`` holds an instance of an annotated class (or a Linen box)
    anywhere."""
    leaves = jax.tree.leaves(tree, is_leaf=lambda x: is_box(x) or _own_node(x) is not None)
    return any(is_box(x) or _own_node(x) is not None for x in leaves)


def annotated_instances(tree: Any) -> list[tuple[str, Any]]:
    """``(key path text, instance)`` for each outermost instance of an annotated class inside the
    value tree ``tree`` (``[0].mu`` of an optax state): what a check of a field annotated ``Any``
    still checks."""
    if tree is None or isinstance(tree, (bool, int, float, str, bytes)):
        return []
    def is_annotated(x: Any) -> bool:
        known = _ANNOTATED.get(type(x))
        if known is None:
            known = _own_node(x) is not None
            cls = type(x)
            structured = dataclasses.is_dataclass(cls) or (issubclass(cls, tuple) and hasattr(cls, "_fields"))
            if (known or not structured) and len(_ANNOTATED) < 4096:
                _ANNOTATED[cls] = known
        return known

    # Most trees hold none: a flatten without key paths (much cheaper) says so first.
    if not any(map(is_annotated, jax.tree_util.tree_leaves(tree, is_leaf=is_annotated))):
        return []
    flat = jax.tree_util.tree_flatten_with_path(tree, is_leaf=is_annotated)[0]
    return [(jax.tree_util.keystr(p), x) for p, x in flat if is_annotated(x)]


# type -> whether its instances take their class's layout (``_own_node``), for the look inside
# ``Any`` that every checked call with such an argument makes. Only answers that cannot change
# are kept: a class that is not a dataclass or NamedTuple, or one found annotated (a dataclass
# whose annotations do not resolve yet is asked again).
_ANNOTATED: dict = {}


def _is_hole(x: Any) -> bool:
    """An empty NamedTuple (``optax.MaskedNode()``, ``optax.EmptyState()``): a node with no
    leaves that stands where ``like`` may have a leaf (``optax.masked``'s left-out params)."""
    return isinstance(x, tuple) and len(x) == 0 and hasattr(type(x), "_fields")


class _Box:
    """One leaf of ``like``'s walked tree (an object, so JAX keeps it a leaf)."""

    __slots__ = ("annotation",)

    def __init__(self, annotation: Any):
        self.annotation = annotation


class Like:
    """A ``like=`` annotation tree taken apart: its leaves' annotations by key path, in JAX's
    flattening order. ``walk(annotation, leaf)`` is the annotation walk (``model.annotation_leaves.walk_leaves``)."""

    def __init__(self, annotation: Any, walk: Callable[[Any, Callable[[Any], Any]], Any]):
        tree = walk(annotation, lambda leaf: _Box(leaf.annotation))
        flat, treedef = jax.tree_util.tree_flatten_with_path(tree, is_leaf=lambda x: isinstance(x, _Box))
        self.treedef: Any = treedef
        self.paths = tuple(jax.tree_util.keystr(p) for p, _ in flat)
        self.annotations = tuple(box.annotation for _, box in flat)
        self.root_type = type(tree)
        self.text = _brief_paths(self.paths)

    def match(self, value: Any) -> tuple | None:
        """``(treedef, leaves, key path texts)`` of ``value``, holes as leaves, in ``like``'s
        leaf order, if ``value`` has ``like``'s key paths; else None."""
        leaves, treedef = jax.tree_util.tree_flatten(value)
        if treedef == self.treedef:  # the same structure, no holes: the same key paths
            return treedef, leaves, self.paths
        if len(leaves) > len(self.paths):  # (a hole is a leaf below, and no leaf here)
            return None
        leaves, treedef = jax.tree_util.tree_flatten(value, is_leaf=_is_hole)
        if len(leaves) != len(self.paths):
            return None
        flat = jax.tree_util.tree_flatten_with_path(value, is_leaf=_is_hole)[0]
        paths = tuple(jax.tree_util.keystr(p) for p, _ in flat)
        return (treedef, leaves, paths) if paths == self.paths else None

    def resembles(self, value: Any) -> bool:
        """Whether ``value``'s leaves share at least half their key paths, or ``like``'s, with ``like``:
        then it is the subtree a message compares with ``like``."""
        paths = {jax.tree_util.keystr(p) for p, _ in jax.tree_util.tree_flatten_with_path(value)[0]}
        shared = len(paths & set(self.paths))
        return shared > 0 and 2 * shared >= min(len(paths), len(self.paths))

    def difference(self, value: Any) -> str:
        """What ``value``'s key paths lack and add, compared with ``like``'s."""
        flat = jax.tree_util.tree_flatten_with_path(value, is_leaf=_is_hole)[0]
        paths = [jax.tree_util.keystr(p) for p, _ in flat]
        have, want = set(paths), set(self.paths)
        missing = [p for p in self.paths if p not in have]
        extra = [p for p in paths if p not in want]
        parts = []
        if missing:
            parts.append(f"missing {_brief_paths(tuple(missing))}")
        if extra:
            parts.append(f"has {_brief_paths(tuple(extra))}, which like= does not")
        if not parts:
            parts.append(f"its leaves are {_brief_paths(tuple(paths))}, in another order or nesting")
        return "; ".join(parts)


def _brief_paths(paths: tuple, limit: int = 4) -> str:
    shown = ", ".join(p or "(the root)" for p in paths[:limit])
    return f"[{shown}{f', ... ({len(paths)} in all)' if len(paths) > limit else ''}]"


def scalar_annotation(value: Any) -> Any:
    """The annotation of a scalar leaf no annotation covers: its dtype class with no dims
    (``i32[b'']``), replicated; ``anydtype[b'']`` for dtypes no class names (PRNG keys)."""
    for cls in dtype_classes.values():
        if cls.accepts(value.dtype):
            return subscript(cls, b"")
    return subscript(anydtype, b"")


def _own_node(value: Any) -> ClassNode | None:
    """The node of ``value``'s class if that class carries shardtypes annotations."""
    cls = type(value)
    if not (dataclasses.is_dataclass(cls) or (issubclass(cls, tuple) and hasattr(cls, "_fields"))):
        return None
    if not safe_is_checked_class(cls):
        return None
    node = model(cls)
    return node if isinstance(node, ClassNode) else None


def _unwrap(node: Node | None) -> Node | None:
    while isinstance(node, UnionNode) and len(node.members) == 1:
        node = node.members[0]
    if isinstance(node, (ArrayNode, ClassNode, SeqNode, DictNode)) and node.has_arrays:
        return node
    return None


def walk_value(value: Any, path: str, annotation_walk: AnnotationWalk, like: Like | None = None) -> Any:
    """Maps ``annotation_walk`` over the leaves of the value tree ``value`` with the annotation
    each leaf takes (see the module's rules); the result has ``value``'s structure. ``path``
    names ``value`` in messages (the root's class name for an annotated instance)."""
    if not path:
        own = _own_node(value)
        path = type(value).__qualname__ if own is not None else ""
    return _walk_value(value, path, None, None, annotation_walk, like, None)


def _walk_value(value: Any, path: str, node: Node | None, owner: type | None, annotation_walk: AnnotationWalk,
                like: Like | None, near: tuple | None) -> Any:
    node = _unwrap(node)
    if node is None and is_box(value):  # a Linen box: its names are its annotation
        return annotation_walk(box_annotation(value, path), path)
    flat, treedef = jax.tree_util.tree_flatten_with_path(value, is_leaf=lambda x: x is not value)
    is_leaf = len(flat) == 1 and flat[0][0] == ()  # (an empty node has no leaves, not itself)
    if isinstance(node, ArrayNode):
        if is_leaf:
            return annotation_walk(node.annotation, path)
        if not flat:  # None for an Optional, or a hole (optax.masked's MaskedNode)
            return value
        raise TypeError(
            f"{path or 'the value'} is annotated {node.plan.text}, but holds a "
            f"{type(value).__qualname__} tree of {len(jax.tree.leaves(value))} leaves, not one array"
        )
    if not flat:
        return value  # EmptyState(), None, (), {}: nothing to lay out
    own = _own_node(value)
    if own is not None and not isinstance(node, ClassNode):
        node, owner = own, type(value)
    if node is None and like is not None:
        matched = like.match(value)
        if matched is not None:
            return _follow_like(value, path, matched, like, annotation_walk)
        if type(value) is like.root_type and not is_leaf and like.resembles(value):
            near = (path, value)
    if is_leaf:
        if node is None and is_array_value(value):
            return _unannotated_leaf(value, path, owner, like, near, annotation_walk)
        return annotation_walk(value, path)  # an annotation inside a container, or no layout
    results = []
    for key_path, child in flat:
        (key,) = key_path
        child_node = follow(node, (key,)) if node is not None else None
        results.append(_walk_value(child, f"{path}{jax.tree_util.keystr((key,))}", child_node, owner,
                                   annotation_walk, like, near))
    return jax.tree_util.tree_unflatten(treedef, results)


def _follow_like(value: Any, path: str, matched: tuple, like: Like, annotation_walk: AnnotationWalk) -> Any:
    treedef, leaves, paths = matched
    results = []
    for leaf, annotation, key_text in zip(leaves, like.annotations, paths):
        if is_array_value(leaf):
            results.append(annotation_walk(annotation, path + key_text))
        elif _is_hole(leaf):
            results.append(leaf)
        else:
            raise TypeError(f"{path + key_text} is {type(leaf).__qualname__}, not an array; like= gives it "
                            f"{annotation!r}")
    return jax.tree_util.tree_unflatten(treedef, results)


def _unannotated_leaf(value: Any, path: str, owner: type | None, like: Like | None, near: tuple | None,
                      annotation_walk: AnnotationWalk) -> Any:
    if len(value.shape) == 0:
        return annotation_walk(scalar_annotation(value), path)
    where = path or "the value"
    if owner is not None:
        raise TypeError(
            f"{where} has no shardtypes annotation on {owner.__qualname__}, so no layout; "
            "annotate the field (w: f32[b'embed/d hidden/t'])"
        )
    if like is None:
        raise TypeError(
            f"{where} ({describe(value)}) has no shardtypes annotation anywhere above it, so no layout: "
            "hold it in an annotated class (a pytree_dataclass of the parameters), or pass like= an "
            "annotation tree whose structure its subtree has (like=Params)"
        )
    if near is not None:
        near_path, near_value = near
        raise TypeError(
            f"{where} ({describe(value)}) has no shardtypes annotation above it, and "
            f"{near_path or 'the value'} does not have the structure of like= {like.text}: "
            f"{like.difference(near_value)}"
        )
    raise TypeError(
        f"{where} ({describe(value)}) has no shardtypes annotation above it, and no subtree holding "
        f"it has the structure of like= ({like.root_type.__qualname__} with leaves {like.text})"
    )
