"""Typeguard integration: the checker lookup, ``typechecked``, ``check`` and the error messages."""

from __future__ import annotations

import functools
import inspect
import sys
import typing
import warnings
from typing import Any, Callable, TypeVar

import numpy as np
import typeguard
from typeguard import TypeCheckError, TypeCheckMemo

from . import _dims
from ._check import Mismatch, check_value, describe
from ._dtypes import number
from ._shape import ShapeSpec

__all__ = ["typechecked", "register_with_typeguard", "check", "ShardtypesWarning"]

F = TypeVar("F", bound=Callable[..., Any])


class ShardtypesWarning(UserWarning):
    """A check shardtypes was asked for cannot run as asked (for example, no source to instrument)."""


def annotation_text(origin: type, shape: bytes) -> str:
    return f"{origin.__name__}[{shape!r}]"


# ---------------------------------------------------------------------------------------------
# Where a value is being checked. Typeguard passes the argument name to none of its checkers, so
# it is read from typeguard's own frame (only when a dim is first bound, or a check fails).

_ROLE_FRAMES = frozenset(
    {
        "check_argument_types_internal",
        "check_return_type_internal",
        "check_variable_assignment",
        "check_yield_type_internal",
        "check_send_type_internal",
        "check_type",
    }
)


def _typeguard_frame():
    frame = sys._getframe(2)
    for _ in range(24):
        if frame is None:
            return None
        if frame.f_code.co_name in _ROLE_FRAMES and frame.f_globals.get("__name__", "").startswith(
            "typeguard"
        ):
            return frame
        frame = frame.f_back
    return None


def _role() -> tuple[str, str | None]:
    """(what is checked, in which function): ('argument "x"', 'center'), ('check_type()', None)."""
    frame = _typeguard_frame()
    if frame is None:
        return "a checked value", None
    name = frame.f_code.co_name
    local = frame.f_locals
    func = local.get("func_name")
    if name == "check_argument_types_internal":
        return f'argument "{local.get("argname")}"', func
    if name == "check_return_type_internal":
        return "the return value", func
    if name == "check_variable_assignment":
        return f'the value assigned to {local.get("varname")}', _frame_function(frame.f_back)
    if name == "check_yield_type_internal":
        return "a yielded value", func
    if name == "check_send_type_internal":
        return "a sent value", func
    return "check_type()", None


def _frame_function(frame) -> str | None:
    return frame.f_code.co_qualname if frame is not None else None


def _origin_phrase() -> str:
    role, func = _role()
    return f"{role} of {func}()" if func else role


# ---------------------------------------------------------------------------------------------
# The checker typeguard calls for every shardtypes annotation.


def _check_annotation(value: Any, origin: type, args: tuple, memo: TypeCheckMemo) -> None:
    if len(args) != 1 or not isinstance(args[0], bytes):
        raise TypeCheckError(
            f"has a malformed annotation {origin.__name__}{list(args)}; write "
            f"{origin.__name__}[b'batch embed']"
        )
    shape = args[0]
    spec = ShapeSpec.parse(shape)
    table = _dims.current()
    scoped = table is not None
    if not scoped:
        table = _dims.memo_table(memo)
    try:
        new = check_value(value, origin, spec, table, lambda: _where(origin, shape))
    except Mismatch as m:
        role, func = _role()
        prefix = f"of {func}() " if func and role != "check_type()" else ""
        raise TypeCheckError(
            f"{prefix}is not {annotation_text(origin, shape)}: {m.problem} (found {describe(value)})"
        ) from None
    if new:
        table = table.bind(new, _origin_phrase())
        if scoped:
            _dims.commit(table)
        else:
            _dims.commit_memo_table(memo, table)


def _where(origin: type, shape: bytes) -> str:
    return f"{_origin_phrase()}, annotated {annotation_text(origin, shape)}"


def _lookup(origin, args, extras):
    if isinstance(origin, type) and issubclass(origin, number):
        return _check_annotation
    return None


def register_with_typeguard() -> None:
    """Teaches typeguard to check shardtypes annotations. Done on import; idempotent."""
    if _lookup not in typeguard.checker_lookup_functions:
        typeguard.checker_lookup_functions.insert(0, _lookup)


# ---------------------------------------------------------------------------------------------
# The decorator.


def typechecked(target: F | None = None) -> F:
    """Checks the annotated arguments, annotated locals and return value of each call.

    This is ``typeguard.typechecked`` plus dimension tables: every call of a checked function
    that is not itself inside a checked call gets a fresh table; nested checked calls share their
    caller's (use ``@scope`` or ``with Scope():`` to isolate a callee).

    >>> @typechecked
    ... def center(x: f32[b'batch/d channels']) -> f32[b'batch/d channels']:
    ...     return x - jnp.mean(x, axis=-1, keepdims=True)
    """
    if target is None:
        return typechecked  # type: ignore[return-value]
    if isinstance(target, type):
        return _typecheck_class(target)  # type: ignore[return-value]
    if isinstance(target, (staticmethod, classmethod)):
        return type(target)(typechecked(target.__func__))  # type: ignore[return-value]
    if not callable(target):
        raise TypeError(f"typechecked expects a function or class, got {target!r}")

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        instrumented = typeguard.typechecked(target)
    for w in caught:
        if not issubclass(w.category, typeguard.InstrumentationWarning):
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    if instrumented is target or getattr(instrumented, "__code__", None) is getattr(
        target, "__code__", None
    ):
        reason = (
            "Python runs with -O, which turns typeguard's instrumentation off"
            if not __debug__
            else "; ".join(str(w.message) for w in caught) or "typeguard left it unchanged"
        )
        warnings.warn(
            f"shardtypes.typechecked could not instrument {_qualname(target)} ({reason}). Its "
            "arguments and return value are checked from its signature instead; annotated local "
            "variables inside it are NOT checked.",
            ShardtypesWarning,
            stacklevel=2,
        )
        instrumented = _signature_checked(target)

    if inspect.iscoroutinefunction(target):

        @functools.wraps(target)
        async def async_wrapper(*args, **kwargs):
            if _dims.current() is not None:
                return await instrumented(*args, **kwargs)
            with _dims.Scope():
                return await instrumented(*args, **kwargs)

        return async_wrapper  # type: ignore[return-value]

    @functools.wraps(target)
    def wrapper(*args, **kwargs):
        if _dims.current() is not None:
            return instrumented(*args, **kwargs)
        token = _dims._TABLE.set(_dims.Table())
        try:
            return instrumented(*args, **kwargs)
        finally:
            _dims._TABLE.reset(token)

    return wrapper  # type: ignore[return-value]


def _qualname(f: Any) -> str:
    return f"{getattr(f, '__module__', '?')}.{getattr(f, '__qualname__', repr(f))}"


def _typecheck_class(cls: type) -> type:
    for name, attr in list(vars(cls).items()):
        if inspect.isfunction(attr) or isinstance(attr, (staticmethod, classmethod)):
            setattr(cls, name, typechecked(attr))
    return cls


def _signature_checked(target: Callable) -> Callable:
    """Checks arguments and return value from the signature, for functions typeguard cannot
    instrument. Uses typeguard's own checks so the messages are the same."""
    from typeguard._functions import check_argument_types_internal, check_return_type_internal

    sig = inspect.signature(target)
    try:
        hints = typing.get_type_hints(target)
    except Exception:
        hints = {name: p.annotation for name, p in sig.parameters.items()}
        hints["return"] = sig.return_annotation
    func_name = getattr(target, "__qualname__", repr(target))
    globals_ = getattr(target, "__globals__", {})

    def checked(*args, **kwargs):
        bound = sig.bind(*args, **kwargs)
        bound.apply_defaults()
        local_vars = dict(bound.arguments)
        memo = TypeCheckMemo(globals_, local_vars)
        arguments = {}
        for name, value in bound.arguments.items():
            if name not in hints:
                continue
            kind = sig.parameters[name].kind
            ann = hints[name]
            if kind is inspect.Parameter.VAR_POSITIONAL:
                ann = tuple[ann, ...]
            elif kind is inspect.Parameter.VAR_KEYWORD:
                ann = dict[str, ann]
            arguments[name] = (value, ann)
        check_argument_types_internal(func_name, arguments, memo)
        result = target(*args, **kwargs)
        if "return" in hints and hints["return"] is not inspect.Signature.empty:
            check_return_type_internal(func_name, result, hints["return"], memo)
        return result

    if inspect.iscoroutinefunction(target):

        async def async_checked(*args, **kwargs):
            return await checked(*args, **kwargs)

        return async_checked
    return checked


# ---------------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=None)
def _class_for_dtype(np_dtype: np.dtype) -> type:
    from ._dtypes import dtype_classes

    for cls in dtype_classes.values():
        if cls.dtype == np_dtype:
            return cls
    raise TypeError(f"check(): no shardtypes class for dtype {np_dtype}")


def check(dtype: Any, shape_spec: ShapeSpec | str | bytes, value: Any) -> None:
    """Checks one value against a dtype and shape spec (the seed's low-level check).

    ``dtype`` is a shardtypes class (``f32``, ``floating``) or a numpy/JAX dtype. Uses the
    current dimension table if there is one (inside a checked call or ``Scope``).

    >>> check(jnp.float32, 'batch embed', jnp.zeros((2, 3)))
    """
    if isinstance(dtype, type) and issubclass(dtype, number):
        dtype_cls = dtype
    else:
        dtype_cls = _class_for_dtype(np.dtype(dtype))
    spec = shape_spec if isinstance(shape_spec, ShapeSpec) else ShapeSpec.parse(shape_spec)
    table = _dims.current()
    scoped = table is not None
    text = annotation_text(dtype_cls, str(spec).encode())
    try:
        new = check_value(value, dtype_cls, spec, table or _dims.Table(), lambda: f"check() of {text}")
    except Mismatch as m:
        raise TypeCheckError(f"is not {text}: {m.problem} (found {describe(value)})") from None
    if new and scoped:
        _dims.commit(table.bind(new, "check()"))
