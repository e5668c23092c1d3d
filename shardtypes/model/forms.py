"""Questions the layers above ask of an annotation's form, answered here so that no module
outside the model takes ``typing`` forms apart: whether an annotation holds a shardtypes one
anywhere inside (typeguard's containers and unions, ``typed_shard_map``), whether a class is
checked field by field, how to print a member of a union, and the forms Flax NNX writes
(``nnx.Param[f32[b'...']]``, lists and dicts of modules).
"""

from __future__ import annotations

import collections.abc
import functools
import typing
from typing import Any

from .annotation_nodes import PYTREES, ClassNode, model
from .annotations import is_annotation
from .pytree_dataclasses import INFO as _TREE_CLASSES

__all__ = ["generator_types", "holds_shardtypes", "is_checked_class", "safe_is_checked_class", "type_text",
           "variable_annotation", "item_annotation", "homogeneous_item", "literal_container", "tuple_items"]


def tuple_items(annotation: Any, length: int | None) -> tuple | None:
    """The item annotations of a ``tuple[A, B]`` (``tuple[X, ...]``: X ``length`` times, or
    once where ``length`` is None), or None where ``annotation`` is no tuple annotation."""
    if typing.get_origin(annotation) is not tuple:
        return None
    args = typing.get_args(annotation)
    if len(args) == 2 and args[1] is Ellipsis:
        return (args[0],) * (1 if length is None else length)
    return args


@functools.lru_cache(maxsize=None)
def is_checked_class(cls: type) -> bool:
    """A dataclass (of any model library) or NamedTuple whose fields hold shardtypes annotations.
    Raises NameError or TypeError where the class's annotations cannot be resolved."""
    node = model(cls)
    return isinstance(node, ClassNode) and node.has_arrays


def safe_is_checked_class(cls: type) -> bool:
    """``is_checked_class``, False where the class's annotations cannot be resolved."""
    try:
        return is_checked_class(cls)
    except (NameError, TypeError):
        return False


@functools.lru_cache(maxsize=1024)
def _holds(args: tuple) -> bool:
    for arg in args:
        if is_annotation(arg) or arg in _TREE_CLASSES or arg in PYTREES:
            return True
        if isinstance(arg, type) and safe_is_checked_class(arg):
            return True
        if typing.get_origin(arg) is not None and _holds(typing.get_args(arg)):
            return True
    return False


def holds_shardtypes(args: tuple) -> bool:
    """Whether any of ``args`` (a generic's arguments, or ``(annotation,)``) is or holds a
    shardtypes annotation or a checked class, at any depth."""
    try:
        return _holds(args)
    except TypeError:  # unhashable arguments (Literal of a list, ...): not ours
        return False


def type_text(annotation: Any) -> str:
    """An annotation as messages print it: a plain class by its qualified name, any other form
    as written, without ``typing.``."""
    if isinstance(annotation, type) and not typing.get_args(annotation):
        return annotation.__qualname__
    return repr(annotation).replace("typing.", "")


def variable_annotation(annotation: Any, variable_base: type) -> tuple[type | None, Any]:
    """``(wrapper, inner)`` for an annotation that wraps another in a subclass of
    ``variable_base`` (``nnx.Param[f32[b'...']]`` gives ``(nnx.Param, f32[b'...'])``); else
    ``(None, annotation)``."""
    origin = typing.get_origin(annotation)
    if isinstance(origin, type) and issubclass(origin, variable_base):
        (inner,) = typing.get_args(annotation)
        return origin, inner
    return None, annotation


def item_annotation(annotation: Any) -> Any:
    """The annotation of an item of a list/dict-like annotation (``list[X]``, ``dict[str, X]``,
    ``tuple[X, ...]``), or None where it names none."""
    args = typing.get_args(annotation)
    if not args:
        return None
    return args[-1] if args[-1] is not Ellipsis else args[0]


_GENERATORS = {
    collections.abc.Generator: 3, collections.abc.AsyncGenerator: 2,
    collections.abc.Iterator: 1, collections.abc.Iterable: 1,
    collections.abc.AsyncIterator: 1, collections.abc.AsyncIterable: 1,
}


def generator_types(annotation: Any) -> tuple[Any, Any, Any]:
    """(yield, send, return) annotations of a generator function's return annotation, None where
    it says none: ``Iterator[Y]`` gives ``(Y, None, None)``, ``Generator[Y, S, R]`` all three.
    Anything else is the type of the generator's return value, as typeguard reads it."""
    origin = typing.get_origin(annotation)
    count = _GENERATORS.get(origin) if origin is not None else None
    if count is None:
        if annotation in _GENERATORS:  # a bare Iterator: nothing to check
            return None, None, None
        return None, None, annotation
    args = list(typing.get_args(annotation)[:count]) + [None] * 3
    return args[0], args[1], args[2]


_SEQUENCES = (list, tuple, collections.abc.Sequence, collections.abc.MutableSequence)
_MAPPINGS = (dict, collections.abc.Mapping, collections.abc.MutableMapping)


def homogeneous_item(annotation: Any) -> tuple[Any, str] | None:
    """``(X, 'sequence' | 'mapping')`` for ``list[X]``, ``tuple[X, ...]``, ``Sequence[X]``,
    ``dict[K, X]``, ``Mapping[K, X]``; None for anything else."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is tuple:
        return (args[0], "sequence") if len(args) == 2 and args[1] is Ellipsis else None
    if origin in _SEQUENCES and len(args) == 1:
        return args[0], "sequence"
    if origin in _MAPPINGS and len(args) == 2:
        return args[1], "mapping"
    return None


def literal_container(annotation: Any, where: str) -> None:
    """A list or dict written as an annotation (``[f32[b'n'], f32[b'n']]``) is no type Python's
    typing (nor typeguard) can check: refused where the function is first called, saying what to
    write instead."""
    if isinstance(annotation, (list, dict)):
        kind = "list" if isinstance(annotation, list) else "dict"
        instead = ("tuple[...] with one annotation per item (fixed length), or list[X] for any length"
                   if kind == "list" else "dict[str, X] (any keys, one annotation for every value), or a "
                   "pytree dataclass or NamedTuple for fixed keys")
        raise TypeError(f"shardtypes.typechecked: {where} is annotated with a {kind} literal "
                        f"({annotation!r}), which is not a type Python's typing can check; write {instead}")
