"""The array class of an annotation: ``f32[jax.Array, b'...']``, ``f32[np.ndarray, b'...']``, or a
union of array classes, ``f32[jax.Array | np.ndarray, b'...']`` (host-or-device: a value that is
host data before ``shard`` and a device array after it).

A union is read here (``typing.get_args`` stays in the model layer) and checked once, where the
annotation is written: each member must be a class of arrays (a subclass of ``jax.Array``,
``numpy.ndarray`` or ``jax.ShapeDtypeStruct``). The annotation keeps the union itself as its
``array_type`` (``isinstance`` takes it) and its members as ``array_types``.
"""

from __future__ import annotations

import functools
import operator
import types
from typing import Any, TypeAlias, Union, get_args, get_origin

import jax
import numpy as np

__all__ = ["ARRAY_CLASSES", "HostOrDevice", "union_members", "union_of", "accepts_host"]

# What a member of a union of array classes may be (a subclass of one of these).
ARRAY_CLASSES: tuple[type, ...] = (jax.Array, np.ndarray, jax.ShapeDtypeStruct)

HostOrDevice: TypeAlias = Union[jax.Array, np.ndarray]
"""``jax.Array | numpy.ndarray``: ``f32[HostOrDevice, b'batch embed']`` is
``f32[jax.Array | np.ndarray, b'batch embed']``, a field that holds host data before ``shard``."""


def union_members(obj: object) -> tuple[Any, ...] | None:
    """The members of ``X | Y`` or ``Union[X, Y]``, or None for anything else."""
    if isinstance(obj, types.UnionType) or get_origin(obj) is Union:
        return get_args(obj)
    return None


def union_of(members: tuple[type, ...]) -> Any:
    """``members[0] | members[1] | ...``: one object ``isinstance`` takes."""
    return functools.reduce(operator.or_, members)


def check_union(name: str, shape: object, members: tuple[Any, ...]) -> tuple[type, ...]:
    """The members of the union ``f32[X | Y, shape]`` as classes of arrays, or a ``TypeError``
    naming the annotation and the member that is not one."""
    shown = " | ".join(_name(m) for m in members) + f", {shape!r}"
    for member in members:
        if member is type(None):
            raise TypeError(
                f"{name}[{shown}]: None is not an array class; an optional array is "
                f"{name}[array_type, shape] | None (Optional[...])"
            )
        if not isinstance(member, type) or not issubclass(member, ARRAY_CLASSES):
            raise TypeError(
                f"{name}[{shown}]: each member of the union of array classes must be a class of "
                f"arrays (jax.Array, numpy.ndarray, jax.ShapeDtypeStruct or a subclass), got {_name(member)}"
            )
    return tuple(members)


def accepts_host(array_type: object) -> bool:
    """Whether ``array_type`` is a union of array classes with a numpy member: a numpy value is
    then host data that ``shard`` will place, checked for dtype and shape but not sharding."""
    members = union_members(array_type)
    return members is not None and any(issubclass(m, np.ndarray) for m in members)


def _name(obj: object) -> str:
    if obj is type(None):
        return "None"
    if obj is jax.Array:
        return "jax.Array"
    if isinstance(obj, type):
        module = getattr(obj, "__module__", "")
        return obj.__qualname__ if module == "builtins" else f"{module}.{obj.__qualname__}"
    return repr(obj)
