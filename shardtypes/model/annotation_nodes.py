"""The annotation model: one place that turns an annotation into the tree the rest walks.

``model(annotation)`` gives a ``Node``:

* ``ArrayNode``: a shardtypes array annotation (``f32[b'batch/d embed']``), with its ``Plan``;
* ``ClassNode``: a class whose fields carry annotations (a ``pytree_dataclass`` and its stackings,
  any dataclass, a NamedTuple), with a node per field;
* ``SeqNode`` (``tuple[...]``, ``list[...]``), ``DictNode`` (``dict[str, ...]``), ``UnionNode``
  (``Optional``/``Union``);
* ``PyTreeNode``: ``PyTree[X]``, any pytree whose leaves are all ``X`` (``leaf``, ``X``'s node);
* ``OtherNode``: anything else (``int``, a config class), which holds no layout.

The checker's fast path for trees (``shardtypes.checking.fast_path``) keeps a memo per tree
structure on each ``ClassNode``, ``SeqNode`` and ``DictNode`` (``layouts``), and finds the
plan of each leaf with ``follow``.
"""

from __future__ import annotations

import dataclasses
import typing
from typing import Any, Union

import jax

from .annotations import annotation_class
from .hints import resolve_hints
from .plans import Plan, plan_of
from .pytree_dataclasses import tree_info

__all__ = ["Node", "ArrayNode", "ClassNode", "SeqNode", "DictNode", "UnionNode", "OtherNode", "PyTreeNode",
           "model", "follow", "PYTREES"]

# The PyTree[X] classes and their X (filled by ``pytree_annotation``, which builds on this module).
PYTREES: dict[type, Any] = {}


class Node:
    __slots__ = ("annotation", "has_arrays")

    def __init__(self, annotation: Any, has_arrays: bool):
        self.annotation = annotation
        self.has_arrays = has_arrays


class ArrayNode(Node):
    __slots__ = ("plan",)

    def __init__(self, annotation: Any, plan: Plan):
        super().__init__(annotation, True)
        self.plan = plan


class ClassNode(Node):
    """``cls``'s fields; ``base`` is the class a value's own class must stack (itself if the
    class is not a ``pytree_dataclass`` stacking). ``layouts`` is the fast path's memo."""

    __slots__ = ("cls", "base", "fields", "layouts")

    def __init__(self, annotation: Any, cls: type, base: type, fields: dict[str, Node]):
        super().__init__(annotation, any(n.has_arrays for n in fields.values()))
        self.cls = cls
        self.base = base
        self.fields = fields
        self.layouts: dict = {}


class SeqNode(Node):
    """``tuple[A, B]`` (``items``), ``tuple[A, ...]`` and ``list[A]`` (``item``)."""

    __slots__ = ("origin", "items", "item", "layouts")

    def __init__(self, annotation: Any, origin: type, items: tuple | None, item: Node | None):
        nodes = items if items is not None else (item,)
        super().__init__(annotation, any(n is not None and n.has_arrays for n in nodes))
        self.origin = origin
        self.items = items
        self.item = item
        self.layouts: dict = {}


class DictNode(Node):
    __slots__ = ("value", "layouts")

    def __init__(self, annotation: Any, value: Node):
        super().__init__(annotation, value.has_arrays)
        self.value = value
        self.layouts: dict = {}


class UnionNode(Node):
    __slots__ = ("members", "optional")

    def __init__(self, annotation: Any, members: tuple[Node, ...], optional: bool):
        super().__init__(annotation, any(n.has_arrays for n in members))
        self.members = members
        self.optional = optional


class PyTreeNode(Node):
    """``PyTree[X]``: ``leaf`` is ``X``'s node; ``leaf_class`` the class whose instances are the
    tree's leaves when ``X`` is an annotated class (JAX would flatten them further), else None.
    ``layouts`` is the fast path's memo (used when ``X`` is an array annotation)."""

    __slots__ = ("leaf", "leaf_class", "layouts")

    def __init__(self, annotation: Any, leaf: Node, leaf_class: type | None):
        super().__init__(annotation, leaf.has_arrays)
        self.leaf = leaf
        self.leaf_class = leaf_class
        self.layouts: dict = {}


class OtherNode(Node):
    __slots__ = ()

    def __init__(self, annotation: Any):
        super().__init__(annotation, False)


_MODELS: dict = {}


def model(annotation: Any) -> Node:
    """The node of ``annotation`` (cached for hashable annotations)."""
    try:
        found = _MODELS.get(annotation)
    except TypeError:  # unhashable (a Literal of a list, ...)
        return _build(annotation, ())
    if found is None:
        found = _MODELS[annotation] = _build(annotation, ())
    return found


def _build(annotation: Any, seen: tuple) -> Node:
    array = annotation_class(annotation)
    if array is not None:
        return ArrayNode(annotation, plan_of(array))
    if isinstance(annotation, type) and annotation in PYTREES:
        leaf = _child(PYTREES[annotation], seen)
        return PyTreeNode(annotation, leaf, leaf.base if isinstance(leaf, ClassNode) else None)
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is Union:
        members = tuple(_child(a, seen) for a in args if a is not type(None))
        return UnionNode(annotation, members, type(None) in args)
    if origin in (tuple, list):
        if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
            return SeqNode(annotation, tuple, None, _child(args[0], seen))
        if origin is tuple:
            return SeqNode(annotation, tuple, tuple(_child(a, seen) for a in args), None)
        return SeqNode(annotation, list, None, _child(args[0], seen) if args else OtherNode(Any))
    if origin is dict and len(args) == 2:
        return DictNode(annotation, _child(args[1], seen))
    if isinstance(annotation, type) and annotation not in seen:
        fields = _class_fields(annotation)
        if fields is not None:
            nodes = {name: _child(ann, (*seen, annotation)) for name, ann in fields.items()}
            info = tree_info(annotation)
            return ClassNode(annotation, annotation, info.base if info is not None else annotation, nodes)
    return OtherNode(annotation)


def _child(annotation: Any, seen: tuple) -> Node:
    try:
        found = _MODELS.get(annotation)
    except TypeError:
        return _build(annotation, seen)
    return found if found is not None else _build(annotation, seen)


def _class_fields(cls: type) -> dict[str, Any] | None:
    """The annotated data fields of a dataclass or NamedTuple, or None for any other class."""
    info = tree_info(cls)
    if info is not None:
        return {name: info.field_types[name] for name in info.data_fields}
    if dataclasses.is_dataclass(cls):
        hints = resolve_hints(cls, "shardtypes")
        return {f.name: hints.get(f.name, Any) for f in dataclasses.fields(cls)
                if not f.metadata.get("static", False)}
    fields = getattr(cls, "_fields", None) if issubclass(cls, tuple) else None
    if fields is not None:  # a NamedTuple
        hints = resolve_hints(cls, "shardtypes")
        return {name: hints.get(name, Any) for name in fields}
    return None


def follow(node: Node | None, path: tuple) -> Node | None:
    """The node a JAX key path (``tree_flatten_with_path``'s) leads to from ``node``, or None."""
    for key in path:
        while isinstance(node, UnionNode) and len(node.members) == 1:
            node = node.members[0]  # Optional[X] holding a value
        if isinstance(node, PyTreeNode):  # every leaf of PyTree[array annotation] is X
            return node.leaf if isinstance(node.leaf, ArrayNode) else None
        if isinstance(key, jax.tree_util.GetAttrKey) and isinstance(node, ClassNode):
            node = node.fields.get(key.name)
        elif isinstance(key, jax.tree_util.SequenceKey) and isinstance(node, SeqNode):
            if node.items is not None:
                node = node.items[key.idx] if key.idx < len(node.items) else None
            else:
                node = node.item
        elif isinstance(key, jax.tree_util.DictKey) and isinstance(node, DictNode):
            node = node.value
        else:
            return None
        if node is None:
            return None
    while isinstance(node, UnionNode) and len(node.members) == 1:
        node = node.members[0]
    if isinstance(node, PyTreeNode):  # the value itself is the one leaf
        return node.leaf if isinstance(node.leaf, ArrayNode) else None
    return node


