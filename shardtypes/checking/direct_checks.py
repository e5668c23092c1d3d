"""The checks of one value that do not go through typeguard: ``check`` (the seed's low-level
check), ``isinstance(x, f32[...])``, ``check_named`` (for ``shardtypes.nnx``) and the decorator's
check of one argument, each where the caller names the value.

>>> import jax.numpy as jnp
>>> check(jnp.float32, 'batch embed', jnp.zeros((2, 3)))
"""

from __future__ import annotations

import functools
from typing import Any, TypeGuard, TypeVar, overload

import jax
import numpy as np
import typeguard
from typeguard import TypeCheckError

from ..context import FORCED, TABLE, Table, checks_on, config, filter_traceback, staged_read
from ..language import CHECK_FAILED, ShapeSpec, linked
from ..model import (
    Mismatch,
    Plan,
    annotation_class,
    annotation_text,
    collect,
    dtype_classes,
    found_text,
    install_instance_check,
    number,
    plan_for,
    plan_of,
    qualified,
    type_name,
    union_members,
)
from .fast_path import fast_check
from .value import check_value

__all__ = ["check", "check_named", "check_with_plan", "is_instance"]

_T = TypeVar("_T")
_U = TypeVar("_U")


def check_with_plan(value: Any, plan: Plan, role: str, func: str, origin: str,
                    tried_fast: bool = False) -> None:
    """Checks one value where the caller knows its place (the decorator). Needs a table.
    ``tried_fast``: the caller has just tried ``fast_check`` and it had no answer."""
    table = TABLE.get()
    if table is None:
        raise RuntimeError(f"shardtypes: checking {origin} needs a dimension table (a Scope)")
    new = None if tried_fast else fast_check(value, plan, table.sizes)
    if new is None:
        try:
            new = check_value(value, plan.dtype_cls, plan.spec, table,
                              lambda: f"{origin}, annotated {plan.text}", plan.array_type)
        except Mismatch as m:
            error = TypeCheckError(linked(
                f"{role} ({qualified(value)}) of {func}() is not {plan.text}: {m.problem}"
                f"{found_text(value, m)}", CHECK_FAILED
            ))
            if collect(error):
                return
            raise error from None
    if new:
        TABLE.set(table.bind(new, origin))


@functools.lru_cache(maxsize=None)
def _class_for_dtype(np_dtype: np.dtype) -> type:
    for cls in dtype_classes.values():
        if cls.dtype == np_dtype:
            return cls
    raise TypeError(f"check(): no shardtypes class for dtype {np_dtype}")


# numpy's abstract scalar types that no shardtypes category means exactly (np.dtype() would read
# some of them as a concrete default, e.g. np.number as float64).
_ABSTRACT_NUMPY = (np.number, np.inexact, np.signedinteger, np.unsignedinteger, np.complexfloating,
                   np.flexible, np.character)


def _check_dtype_argument(dtype: Any) -> type:
    """check()'s ``dtype``: a shardtypes class, a numpy/JAX dtype or its name, or an abstract
    numpy type (``np.floating`` means ``floating``)."""
    annotation = annotation_class(dtype)
    if annotation is not None:
        raise TypeError(
            f"check(): dtype is the annotation {dtype!r}, which has a shape of its own; pass the "
            f"dtype class ({annotation.dtype_class.__name__}) and the shape separately"
        )
    if isinstance(dtype, type) and issubclass(dtype, number):
        return dtype
    from ..model import anydtype, floating, integer

    # Only the abstract numpy types a category means exactly: np.number would let bool through
    # as anydtype, np.inexact would turn complex away as floating.
    abstract = {np.floating: floating, np.integer: integer, np.generic: anydtype}
    if isinstance(dtype, type) and dtype in abstract:
        return abstract[dtype]
    if isinstance(dtype, type) and dtype in _ABSTRACT_NUMPY:
        raise TypeError(
            f"check(): dtype {dtype.__module__}.{dtype.__name__} is an abstract numpy type that no "
            "shardtypes category means exactly; pass a dtype class or category (f32, floating, "
            "integer, anydtype) or a concrete dtype (jnp.float32)"
        )
    try:
        if dtype is None:  # np.dtype(None) is float64: a silent default, never what was meant
            raise TypeError("None")
        return _class_for_dtype(np.dtype(dtype))
    except TypeError as e:
        raise TypeError(
            f"check(): dtype must be a shardtypes dtype class (f32, floating, ...) or a numpy/JAX "
            f"dtype (jnp.float32, 'float32'), got {dtype!r}"
        ) from e


def check(dtype: Any, shape_spec: ShapeSpec | str | bytes, value: Any) -> None:
    """Checks one value against a dtype and shape spec (the seed's low-level check).

    ``dtype`` is a shardtypes class (``f32``, ``floating``) or a numpy/JAX dtype. Uses the
    current dimension table if there is one (inside a checked call or ``Scope``).

    >>> check(jnp.float32, 'batch embed', jnp.zeros((2, 3)))
    """
    if not config._checks and not FORCED.get():
        return
    try:
        dtype_cls = _check_dtype_argument(dtype)
        if not isinstance(shape_spec, (ShapeSpec, str, bytes)):
            raise TypeError(
                f"check(): shape_spec must be a shape string ('batch embed') or a ShapeSpec, got "
                f"{shape_spec!r}"
            )
        spec = shape_spec if isinstance(shape_spec, ShapeSpec) else ShapeSpec.parse(shape_spec)
        table = TABLE.get()
        if table is not None:
            staged_read()
        text = annotation_text(dtype_cls, str(spec).encode())
        try:
            new = check_value(value, dtype_cls, spec, table or Table(), lambda: f"check() of {text}")
        except Mismatch as m:
            raise TypeCheckError(linked(f"check(): value is not {text}: {m.problem}{found_text(value, m)}",
                                        CHECK_FAILED)) from None
        if new and table is not None:
            TABLE.set(table.bind(new, "check()"))
    except TypeCheckError as e:
        filter_traceback(e)  # the user's frames only (config.traceback_filtering)
        raise


def instance_check(annotation: type[number], value: object) -> bool:
    """``isinstance(value, annotation)`` for an array annotation class: the full check (dtype,
    rank, sizes, sharding; the array type of ``f32[jax.Array, b'...']``) as a bool. Inside a
    checked call or ``Scope`` sizes are compared with the current table and new ones bound into
    it, as ``check`` does; elsewhere each ``isinstance`` gets a fresh table. Runs whether or not
    ``config.checks`` is on: it is a question, not a check that can be switched off."""
    plan = plan_of(annotation)
    table = TABLE.get()
    if table is not None:
        staged_read()
    new = fast_check(value, plan, table.sizes if table is not None else {})
    if new is None:
        try:
            new = check_value(value, plan.dtype_cls, plan.spec, table or Table(),
                              lambda: f"isinstance() of {plan.text}", plan.array_type)
        except Mismatch:
            return False
    if new and table is not None:
        TABLE.set(table.bind(new, f"isinstance() of {plan.text}"))
    return True


install_instance_check(instance_check)


@overload
def is_instance(value: object, annotation: Any, /) -> TypeGuard[jax.Array]: ...
@overload
def is_instance(value: object, annotation: Any, array_type: type[_T], /) -> TypeGuard[_T]: ...
@overload
def is_instance(value: object, annotation: Any, array_type: tuple[type[_T], type[_U]], /) -> TypeGuard[_T | _U]: ...
def is_instance(value: object, annotation: Any, array_type: Any = jax.Array, /) -> bool:
    """``isinstance(value, annotation)`` in a spelling static checkers accept and narrow by:

    >>> if shardtypes.is_instance(x, f32[jax.Array, b'batch embed']):  # doctest: +SKIP
    ...     reveal_type(x)  # jax.Array
    >>> shardtypes.is_instance(x, f32[np.ndarray, b'rows'], np.ndarray)  # doctest: +SKIP
    >>> shardtypes.is_instance(x, f32[jax.Array | np.ndarray, b'b e'], (jax.Array, np.ndarray))  # doctest: +SKIP

    Checkers cannot read the array class out of an annotation used as a value, so it is the
    third argument, ``jax.Array`` unless given (a class, or a tuple of two for a union), and it
    must name the annotation's array classes; the narrowing holds only where the check passes
    (a ``TypeGuard``: False says nothing about the class). The check is ``isinstance``'s.
    """
    found = annotation_class(annotation)
    if found is None:
        raise TypeError(f"is_instance: annotation must be an array annotation such as "
                        f"f32[jax.Array, b'batch embed'], got {annotation!r}")
    given = array_type if isinstance(array_type, tuple) else (array_type,)
    if not given or not all(isinstance(c, type) for c in given):
        raise TypeError(f"is_instance: array_type must be a class or a tuple of classes, got {array_type!r}")
    wanted = found.array_type
    if wanted is not None:
        members = union_members(wanted) or (wanted,)
        if set(members) != set(given):
            shown = type_name(given[0]) if len(given) == 1 else "(" + ", ".join(type_name(c) for c in given) + ")"
            fix = type_name(members[0]) if len(members) == 1 else "(" + ", ".join(type_name(c) for c in members) + ")"
            raise TypeError(f"is_instance: {found!r} wants a {type_name(wanted)}, but the class to narrow to is "
                            f"{shown}; pass is_instance(value, annotation, {fix})")
    return isinstance(value, given) and instance_check(found, value)


def check_named(value: Any, annotation: Any, where: str, who: str) -> None:
    """Checks one value against an annotation in the current table, where the caller names the
    value (``MLP.blocks[0].w`` for ``shardtypes.nnx.check``)."""
    if not checks_on():
        return  # checks off (shardtypes.nnx.check, the Linen checks): as check() does
    plan = plan_for(annotation)
    table = TABLE.get()
    if table is not None:
        staged_read()
    if table is None:
        raise RuntimeError(f"{who}: check_named needs a dimension table (a Scope)")
    if plan is None:
        try:
            typeguard.check_type(value, annotation,
                                 collection_check_strategy=typeguard.CollectionCheckStrategy.ALL_ITEMS)
        except TypeCheckError as e:
            raise TypeCheckError(linked(f"{who}: {where}: {e}", CHECK_FAILED)) from None
        return
    try:
        new = check_value(value, plan.dtype_cls, plan.spec, table, lambda: f"{where} ({who})", plan.array_type)
    except Mismatch as m:
        raise TypeCheckError(linked(f"{who}: {where} is not {plan.text}: {m.problem}{found_text(value, m)}",
                                    CHECK_FAILED)) from None
    if new:
        TABLE.set(table.bind(new, where))
