"""Walking an annotation tree leaf by leaf: ``walk_leaves`` maps a function over the array annotations
of an annotation tree (an array annotation, a pytree dataclass or a dataclass of any model
library, ``tuple[...]``, ``Optional[X]``, a NamedTuple, or tuples, lists and dicts of them) and
builds a result of the same shape; each leaf is a ``Leaf`` that says where it sits
(``Layer.w_up``). Derivation, ``explain``, ``verify`` and ``plan`` walk annotations with it.
"""

from __future__ import annotations

import dataclasses
import typing
from typing import Any, Callable, Union

import jax

from ..language import ShapeSpec
from .annotation_nodes import ClassNode, PyTreeNode, model
from .annotations import annotation_class, is_annotation, number
from .errors import qualified
from .optimizer_states import Like, is_array_value, is_value_tree, walk_value
from .plans import plan_of
from .pytree_annotation import pytree_leaf
from .pytree_dataclasses import tree_info

__all__: list[str] = []


class Leaf(typing.NamedTuple):
    path: str
    dtype_cls: type[number]
    spec: ShapeSpec
    text: str
    annotation: Any
    optional: bool = False  # reached through Optional[...]: a value may leave it None


def _leaf_of(annotation: type[number], path: str, optional: bool = False) -> Leaf:
    plan = plan_of(annotation)
    return Leaf(path, plan.dtype_cls, plan.spec, plan.text, annotation, optional)


# An annotation tree deeper than this is an error (a tree built by mistake, or a cycle).
_MAX_DEPTH = 64


def brief(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def walk_leaves(
    annotation: Any,
    leaf: Callable[[Leaf], Any],
    path: str | None = None,
    fast: Callable[[Any], Any] | None = None,
    *,
    like: Any = None,
    _stack: tuple = (),
    _optional: bool = False,
) -> Any:
    """Maps ``leaf`` over the array annotations of an annotation tree, keeping its shape.
    ``path`` names where a leaf sits, from the root's name (``Layer.w_up``, ``[0]['x']``).
    ``fast(annotation)``, if given, is tried first and may answer from a cache (None: no answer).
    A tree of values (an optimizer state, an abstract model) is walked by ``optimizer_states``: its
    annotated classes give the layout, and ``like`` (an annotation tree, or a ``Like``) the
    layout of subtrees with its structure that no annotation covers.
    A tree that contains itself, or is nested more than ``_MAX_DEPTH`` deep, is a ValueError.
    """
    if like is not None and pytree_leaf(like) is not None and not _stack:
        return _walk_pytree(annotation, like, leaf, path or "", fast)
    if like is not None and not isinstance(like, Like):
        like = _like(like)
    if path is None:
        path = _root_name(annotation)
    if fast is not None and is_annotation(annotation):
        hit = fast(annotation)
        if hit is not None:
            return hit
    where = f"the annotation{path}" if not path or path.startswith("[") else path  # (a key path from a plain container)
    if isinstance(annotation, str):
        raise TypeError(
            f"{brief(where)} is the string {brief(repr(annotation))}: pass the annotation itself (with "
            "PEP 563, resolve it with typing.get_type_hints first)"
        )
    array = annotation_class(annotation)
    if array is not None:
        return leaf(_leaf_of(array, path, _optional))
    _check_walkable(annotation, where, _stack)
    stack = (*_stack, annotation)

    def walk(a: Any, at: str, optional: bool = _optional) -> Any:
        return walk_leaves(a, leaf, at, fast, like=like, _stack=stack, _optional=optional)

    instance: Any = annotation  # (a name of its own: is_dataclass narrows what it is given)
    if not isinstance(instance, type) and dataclasses.is_dataclass(instance):
        built = _model_class_or_instance(instance, walk, path)  # a plain dataclass: one JAX leaf
        if built is not _NOT_A_MODEL:
            return built
    if is_value_tree(annotation):
        return walk_value(annotation, path, lambda a, at: walk(a, at, False), like)
    return _walk_tree_annotation(annotation, walk, path, where)


def _check_walkable(annotation: Any, where: str, stack: tuple) -> None:
    """Refuses a tree annotation that cannot be walked: ``PyTree[X]`` (the value's structure, not
    the annotation's; it goes with like=), one that contains itself, or one nested too deep."""
    if pytree_leaf(annotation) is not None:
        raise TypeError(
            f"{brief(where)} is {annotation!r}, whose structure is the value's, not the annotation's: "
            f"pass a value tree with it as like=, as in make_partition_specs(params, like={annotation!r})"
        )
    if any(a is annotation for a in stack):
        raise ValueError(
            f"{brief(where)} contains itself (a {type(annotation).__name__} that holds itself): an "
            "annotation tree must be finite"
        )
    if len(stack) >= _MAX_DEPTH:
        raise ValueError(f"{brief(where)}: the annotation tree is nested more than {_MAX_DEPTH} levels deep")


def _walk_tree_annotation(annotation: Any, walk: Callable[..., Any], path: str, where: str) -> Any:
    """The result of ``walk_leaves`` for an annotation that is neither an array annotation nor a
    tree of values: a pytree dataclass, ``Optional[X]``, ``tuple[...]``, a model library's class,
    a NamedTuple, or a tuple, list or dict of annotations, each part walked with ``walk``."""
    origin = typing.get_origin(annotation)
    info = tree_info(annotation)
    if info is not None:
        return _build_pytree_dataclass(annotation, info, walk, path)
    if origin is Union:
        members = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(members) == 1:
            return walk(members[0], path, True)
        raise TypeError(f"{where}: a Union of several types {annotation!r} has no single layout")
    if origin is tuple:
        args = typing.get_args(annotation)
        if len(args) == 2 and args[1] is Ellipsis:
            raise TypeError(f"{where}: {annotation!r} has no fixed length, so no layout tree")
        return tuple(walk(a, f"{path}[{i}]") for i, a in enumerate(args))
    built = _model_class_or_instance(annotation, walk, path)
    if built is not _NOT_A_MODEL:
        return built
    is_tuple_class = isinstance(annotation, type) and issubclass(annotation, tuple)
    fields = getattr(annotation, "_fields", None) if is_tuple_class else None
    if fields is not None:  # a NamedTuple
        hints = typing.get_type_hints(annotation)
        return annotation(*(walk(hints[n], f"{path}.{n}") for n in fields))
    if isinstance(annotation, (tuple, list)):
        return type(annotation)(walk(a, f"{path}[{i}]") for i, a in enumerate(annotation))
    if isinstance(annotation, dict):
        return {k: walk(a, f"{path}[{k!r}]") for k, a in annotation.items()}
    raise TypeError(
        f"{brief(where)} is {brief(repr(annotation))}, which has no layout: use array annotations (f32[b'...']), "
        "pytree dataclasses, tuple[...], Optional[...], NamedTuples, or tuples, lists and dicts "
        "of them"
    )


def _build_pytree_dataclass(annotation: Any, info: Any, walk: Callable[..., Any], path: str) -> Any:
    """An instance of the pytree dataclass ``annotation`` (whose ``tree_info`` is ``info``): each
    field that is not static holds what ``walk`` makes of its annotation, each static field its
    default (None where it has none)."""
    field_types = info.field_types
    static = info.static_fields
    values = {}
    for f in annotation.__dataclass_fields__.values():
        if f.name in static:
            if f.default is not dataclasses.MISSING:
                values[f.name] = f.default
            elif f.default_factory is not dataclasses.MISSING:
                values[f.name] = f.default_factory()
            else:
                values[f.name] = None
        else:
            values[f.name] = walk(field_types[f.name], f"{path}.{f.name}")
    return annotation(**values)


_NOT_A_MODEL = object()


def _walk_pytree(values: Any, like: type, leaf: Callable[[Leaf], Any], path: str,
                 fast: Callable[[Any], Any] | None) -> Any:
    """``values`` (a tree of arrays, or of instances of X's class) with ``like=PyTree[X]``: the
    same tree with X's result at each leaf."""
    node = model(like)
    assert isinstance(node, PyTreeNode)
    x, cls = node.leaf.annotation, node.leaf_class

    def is_leaf(v: Any) -> bool:
        info = tree_info(type(v))
        return cls is not None and (isinstance(v, cls) or (info is not None and info.base is cls))

    def one(key_path: Any, value: Any) -> Any:
        at = f"{path}{jax.tree_util.keystr(key_path)}"
        if cls is None and not is_array_value(value):
            raise TypeError(f"{at or 'the value'} is {qualified(value)}, not an array; like= {like!r} wants "
                            "a tree of arrays")
        if cls is not None and not is_leaf(value):
            raise TypeError(f"{at or 'the value'} is {qualified(value)}, not a {cls.__qualname__}; like= "
                            f"{like!r} wants a tree of them")
        return walk_leaves(x, leaf, at, fast)

    return jax.tree_util.tree_map_with_path(one, values, is_leaf=is_leaf)


def _model_class_or_instance(annotation: Any, walk: Callable[[Any, str], Any], path: str) -> Any:
    """A dataclass of a model library (an ``eqx.Module``, a ``flax.struct.dataclass``, a
    ``register_dataclass`` class, a plain dataclass) given as its class, built from its field
    annotations without running its ``__init__``; an instance of a plain dataclass (one leaf to
    JAX) as its class's layout with the instance's other fields; ``_NOT_A_MODEL`` for anything
    else. (An instance of a pytree class, real or abstract, is a value tree: ``optimizer_states``
    walks it.)"""
    if not isinstance(annotation, type):
        cls = type(annotation)
        if not dataclasses.is_dataclass(cls) or not _is_plain_dataclass(annotation):
            return _NOT_A_MODEL
        node = model(cls)
        if not isinstance(node, ClassNode) or not node.has_arrays:
            return _NOT_A_MODEL
        built = _model_class_or_instance(cls, walk, path)
        for f in dataclasses.fields(cls):
            if not (f.name in node.fields and node.fields[f.name].has_arrays):
                object.__setattr__(built, f.name, getattr(annotation, f.name, None))
        return built
    if not dataclasses.is_dataclass(annotation):
        return _NOT_A_MODEL
    node = model(annotation)
    if not isinstance(node, ClassNode) or not node.has_arrays:
        return _NOT_A_MODEL
    built = object.__new__(annotation)
    hints = typing.get_type_hints(annotation)
    # A plain dataclass (not a pytree) keeps its other fields as they are: JAX never sees them.
    plain = _is_plain_dataclass(built)
    for f in dataclasses.fields(annotation):
        if f.name in node.fields and not (plain and not node.fields[f.name].has_arrays):
            value = walk(hints[f.name], f"{path}.{f.name}")
        elif f.default is not dataclasses.MISSING:
            value = f.default
        elif f.default_factory is not dataclasses.MISSING:
            value = f.default_factory()
        else:
            value = None
        object.__setattr__(built, f.name, value)
    return built


def _is_plain_dataclass(instance: Any) -> bool:
    """Whether a dataclass instance is one leaf to JAX (not registered as a pytree). An instance
    without its fields yet (``object.__new__``) that a registered class cannot flatten is not."""
    try:
        return jax.tree_util.treedef_is_leaf(jax.tree_util.tree_structure(instance))
    except Exception:  # a registered class's flatten, reading fields not set yet
        return False


# ``like=`` trees taken apart, by id: (the tree, its flattening, the Like). A hit must be the same
# object flattening to the same leaves, so a dict or list changed in place is taken apart again.
_LIKES: dict[int, tuple[Any, tuple, Like]] = {}
_LIKES_MAX = 64


def _like(like: Any) -> Like:
    """``like=`` taken apart (kept for the next call with the same, unchanged tree); an
    annotation tree it is not is a TypeError saying so."""
    leaves, treedef = jax.tree_util.tree_flatten(like)
    flat = (treedef, tuple(leaves))
    hit = _LIKES.get(id(like))
    if hit is not None and hit[0] is like and hit[1][0] == treedef and all(
            a is b for a, b in zip(hit[1][1], flat[1])):
        return hit[2]
    try:
        taken = Like(like, walk_leaves)
    except (TypeError, ValueError) as e:
        raise type(e)(f"like= must be an annotation tree (as the parameters' class): {e}") from None
    if len(_LIKES) >= _LIKES_MAX:
        _LIKES.clear()
    _LIKES[id(like)] = (like, flat, taken)
    return taken


def _root_name(annotation: Any) -> str:
    if tree_info(annotation) is not None:
        return repr(annotation).replace("shardtypes.", "") if type(annotation) is not type else annotation.__qualname__
    if isinstance(annotation, type) and issubclass(annotation, tuple) and hasattr(annotation, "_fields"):
        return annotation.__qualname__
    return ""
