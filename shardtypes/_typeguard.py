"""Typeguard integration: the checker typeguard calls for shardtypes annotations, the one-value
check shared with the decorator, ``check`` and ``register_with_typeguard``.

Where a value sits (``argument "x" of f()``) matters for messages and for saying who bound a dim.
The decorator knows it and passes it in. When typeguard itself calls us (plain
``typeguard.typechecked``, ``check_type``, annotations nested in ``tuple[...]`` or ``Optional``),
typeguard passes no argument name to its checkers, so it is read from typeguard's own frame, only
when a dim is first bound or a check fails.
"""

from __future__ import annotations

import contextvars
import re
import dataclasses
import functools
import sys
import types
import typing
from typing import Any, Union

import jax
import jax.core
import numpy as np
import typeguard
from typeguard import TypeCheckError, TypeCheckMemo
from typeguard import _checkers as _tg_checkers
from typeguard import _functions as _tg_functions

from . import _dims
from ._config import _FORCED, config
from ._check import check_value
from ._describe import Mismatch, describe
from ._plans import _PLANS, Plan, annotation_text, fast_check, malformed, plan_for, plan_of
from ._dims import _TABLE, Table
from ._hints import resolve_hints
from ._model import ClassNode, model
from ._dtypes import annotation_class, dtype_classes, install_instance_check, is_annotation, number
from ._shape import ShapeSpec
from ._trees import _INFO as _TREE_CLASSES, tree_info

__all__ = ["register_with_typeguard", "check", "ShardtypesWarning", "FieldError"]

# typeguard renamed these in 4.5 (the old names became frame-reading helpers); the instrumented
# code and our decorator call whichever this typeguard has.
check_argument_types_internal = getattr(
    _tg_functions, "check_argument_types_internal", _tg_functions.check_argument_types
)
check_return_type_internal = getattr(
    _tg_functions, "check_return_type_internal", _tg_functions.check_return_type
)


class ShardtypesWarning(UserWarning):
    """A check shardtypes was asked for cannot run as asked (for example, no source to instrument)."""


def _qualified(value: Any) -> str:
    if isinstance(value, jax.core.Tracer):
        return "traced jax.Array"
    if isinstance(value, jax.Array):
        return "jax.Array"
    cls = type(value)
    return cls.__qualname__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"


def check_with_plan(value: Any, plan: Plan, role: str, func: str, origin: str,
                    tried_fast: bool = False) -> None:
    """Checks one value where the caller knows its place (the decorator). Needs a table.
    ``tried_fast``: the caller has just tried ``fast_check`` and it had no answer."""
    table = _TABLE.get()
    if table is None:
        raise RuntimeError(f"shardtypes: checking {origin} needs a dimension table (a Scope)")
    new = None if tried_fast else fast_check(value, plan, table.sizes)
    if new is None:
        try:
            new = check_value(value, plan.dtype_cls, plan.spec, table,
                              lambda: f"{origin}, annotated {plan.text}", plan.array_type)
        except Mismatch as m:
            error = TypeCheckError(
                f"{role} ({_qualified(value)}) of {func}() is not {plan.text}: {m.problem}"
                f"{_found(value, m)}"
            )
            if _collect(error):
                return
            raise error from None
    if new:
        _TABLE.set(table.bind(new, origin))


# While shardtypes.verify runs a function, failed checks are collected here instead of raised,
# so that one run reports every problem it can reach.
COLLECTED: contextvars.ContextVar[list | None] = contextvars.ContextVar("shardtypes.collected", default=None)


def _collect(error: TypeCheckError) -> bool:
    problems = COLLECTED.get()
    if problems is None:
        return False
    problems.append(error)
    return True


def _found(value: Any, m: Mismatch) -> str:
    return "" if m.problem.endswith("which is not an array") else f" (found {describe(value)})"


# ---------------------------------------------------------------------------------------------
# Where typeguard is checking a value, read from its frames.

_ROLE_NAMES = {
    "check_argument_types_internal": "argument",
    "check_return_type_internal": "return",
    "check_variable_assignment": "variable",
    "check_yield_type_internal": "yield",
    "check_send_type_internal": "send",
    "check_type": "check_type",
}
if check_argument_types_internal.__name__ == "check_argument_types":  # typeguard < 4.5
    _ROLE_NAMES.update(check_argument_types="argument", check_return_type="return")

_CODES = {
    getattr(_tg_functions, name).__code__: role
    for name, role in _ROLE_NAMES.items()
    if hasattr(_tg_functions, name)
}


def _typeguard_frame() -> types.FrameType | None:
    frame: types.FrameType | None = sys._getframe(2)
    for _ in range(32):
        if frame is None or frame.f_code in _CODES:
            return frame
        frame = frame.f_back
    return None


def _role() -> tuple[str, str | None, str]:
    """(what is checked, in which function, which typeguard entry point), e.g.
    ('argument "x"', 'center', 'argument') or ('check_type()', None, 'check_type')."""
    frame = _typeguard_frame()
    if frame is None:
        return "a checked value", None, "unknown"
    kind = _CODES[frame.f_code]
    local = frame.f_locals
    func = local.get("func_name")
    if kind == "argument":
        return f'argument "{local.get("argname")}"', func, kind
    if kind == "return":
        return "the return value", func, kind
    if kind == "variable":
        caller = frame.f_back
        return f'the value assigned to {local.get("varname")}', caller and caller.f_code.co_qualname, kind
    if kind == "yield":
        return "a yielded value", func, kind
    if kind == "send":
        return "a sent value", func, kind
    return "check_type()", None, kind


def _origin_phrase() -> str:
    role, func, kind = _role()
    phrase = f"{role} of {func}()" if func else role
    fields = _FIELD_PATH.get()
    if fields:
        path = "." + ".".join(fields)
        if kind == "argument" and role.startswith('argument "'):
            path = role[len('argument "'):-1] + path
        phrase = f"{path} ({phrase})"
    return phrase


# ---------------------------------------------------------------------------------------------
# Tables when typeguard calls us. Inside a shardtypes call or Scope: that table. Otherwise, for
# checks made by a plain typeguard-instrumented function: a table kept with that call's frame
# (see _dims.memo_table). Otherwise (check_type at top level): a fresh table per check.


_CHECK_TYPE_TABLE = "_shardtypes_dimension_table"


def _get_table(memo: TypeCheckMemo) -> tuple[Table, bool]:
    table = _TABLE.get()
    if table is not None:
        return table, True
    frame = _typeguard_frame()
    kind = _CODES[frame.f_code] if frame is not None else None
    if kind == "check_type":
        # check_type makes a fresh configuration object per call; the call's table rides on it,
        # so the items of one check_type([...]) share a table and separate calls never do.
        return getattr(memo.config, _CHECK_TYPE_TABLE, None) or Table(), False
    if kind is not None:
        return _dims.memo_table(memo), False
    return Table(), False


def _set_table(memo: TypeCheckMemo, table: Table, scoped: bool) -> None:
    if scoped:
        _TABLE.set(table)
        return
    frame = _typeguard_frame()
    kind = _CODES[frame.f_code] if frame is not None else None
    if kind == "check_type":
        try:
            setattr(memo.config, _CHECK_TYPE_TABLE, table)
        except (AttributeError, TypeError):  # a frozen or slotted config: one table per item
            pass
    elif kind is not None:
        _dims.commit_memo_table(memo, table)


def _check_annotation(value: Any, origin: type, args: tuple, memo: TypeCheckMemo) -> None:
    plan = _PLANS.get(origin)
    if plan is None:
        annotation = annotation_class(origin)
        if annotation is None or args:
            raise malformed(origin, args)
        plan = plan_of(annotation)
    table, scoped = _get_table(memo)
    new = fast_check(value, plan, table.sizes)
    if new is None:
        try:
            new = check_value(value, plan.dtype_cls, plan.spec, table,
                              lambda: f"{_origin_phrase()}, annotated {plan.text}", plan.array_type)
        except Mismatch as m:
            role, func, kind = _role()
            core = f"is not {plan.text}: {m.problem}{_found(value, m)}"
            if COLLECTED.get() is not None:
                # No typeguard frame will add the argument to this message: say it all here.
                fields = _FIELD_PATH.get()
                where = role
                if fields:
                    root = role[len('argument "'):-1] if role.startswith('argument "') else ""
                    where = f"{role} of {func}(): {root}.{'.'.join(fields)}" if func else f".{'.'.join(fields)}"
                elif func:
                    where = f"{role} of {func}()"
                _collect(TypeCheckError(f"{where} {core}"))
                return
            prefix = f"of {func}() " if func and kind != "check_type" else ""
            raise _ArrayError(f"{prefix}{core}") from None
    if new:
        _set_table(memo, table.bind(new, _origin_phrase()), scoped)


def _snapshot(memo: TypeCheckMemo):
    table = _TABLE.get()
    if table is not None:
        return lambda: _TABLE.set(table)
    config_table = getattr(memo.config, _CHECK_TYPE_TABLE, None)
    local_vars = memo.locals
    frame_table = _dims.memo_table(memo)

    def restore():
        if getattr(memo.config, _CHECK_TYPE_TABLE, None) is not config_table:
            setattr(memo.config, _CHECK_TYPE_TABLE, config_table)
        if isinstance(local_vars, dict) and local_vars is not memo.globals:
            _dims.commit_memo_table(memo, frame_table)

    return restore


def _all_or_nothing(checker):
    """typeguard's checker for a container, made all-or-nothing: if any item fails, the items
    that passed leave no bindings behind."""

    def check(value: Any, origin: Any, args: tuple, memo: TypeCheckMemo) -> None:
        restore = _snapshot(memo)
        try:
            checker(value, origin, args, memo)
        except TypeCheckError:
            restore()
            raise

    return check


_INTERNAL_NAMES = re.compile(r"jaxlib\._jax\.ArrayImpl|jax\._src\.[\w.]*Tracer")


def _public_names(text: str) -> str:
    """typeguard names a value by its class: say ``jax.Array`` and ``traced jax.Array``, not
    JAX's internal classes."""
    return _INTERNAL_NAMES.sub(lambda m: "jax.Array" if m.group().startswith("jaxlib") else "traced jax.Array", text)


class _ArrayError(TypeCheckError):
    """A shardtypes check failed where typeguard adds the value's path to the message."""

    def __str__(self) -> str:
        return _public_names(super().__str__())


class FieldError(TypeCheckError):
    """A field of a dataclass failed its annotation: ``fields`` is the attribute path from the
    outermost dataclass (``['weights', 'embed']``), ``core`` the leaf's own complaint. A
    ``TypeCheckError``, so ``except TypeCheckError`` catches it."""

    def __init__(self, message: str, fields: list[str], core: str):
        super().__init__(message)
        self.fields = fields
        self.core = core

    def __str__(self) -> str:
        # typeguard puts the value's own path before the message with a space; a message that
        # starts with the field path (``.weights.embed``) continues that path instead.
        message = str(self.args[0]) if self.args else ""
        if self._path and message.startswith("."):
            return _public_names(" of ".join(self._path) + message)
        return _public_names(super().__str__())

    def __reduce__(self) -> Any:
        return (type(self), (self.args[0] if self.args else "", self.fields, self.core), self.__dict__)


FieldError.__module__ = "shardtypes"  # its public home: shardtypes.FieldError


def _check_dataclass(value: Any, origin: type, args: tuple, memo: TypeCheckMemo) -> None:
    """A pytree dataclass: any stacking of the same base class, checked field by field against
    the annotation's field types. Any other dataclass (an ``eqx.Module``, a
    ``flax.struct.dataclass``, a ``register_dataclass`` class, a plain one): an instance of it,
    checked field by field."""
    info = tree_info(origin)
    if info is None:
        if not isinstance(value, origin):
            _, func, kind = _role()
            prefix = f"of {func}() " if func and kind != "check_type" else ""
            raise TypeCheckError(f"{prefix}is not an instance of {origin.__module__}.{origin.__qualname__} "
                                 f"(found {_qualified(value)})")
        cls: type = type(value)
        field_types = _dataclass_field_types(cls)
        _check_fields(value, field_types, tuple(field_types), memo)
        return
    value_info = tree_info(type(value))
    if value_info is None or not (
        value_info.base is info.base
        or (issubclass(value_info.base, info.base) and value_info.axes == info.axes)
    ):
        _, func, kind = _role()
        prefix = f"of {func}() " if func and kind != "check_type" else ""
        hint = ""
        if value_info is None and isinstance(value, info.base):
            hint = (f"; {type(value).__qualname__} subclasses {info.base.__qualname__} but is not "
                    "registered as a pytree: decorate it with @pytree_dataclass too")
        raise TypeCheckError(f"{prefix}is not an instance of {origin!r} (found {_qualified(value)}){hint}")
    # The annotation's fields against its own types; a subclass's extra fields against its own.
    field_types = info.field_types
    names = info.field_names
    if value_info.base is not info.base:
        field_types = {**value_info.field_types, **field_types}
        names = value_info.field_names
    _check_fields(value, field_types, names, memo)


@functools.lru_cache(maxsize=None)
def _dataclass_field_types(cls: type) -> dict:
    """Every field's annotation (static fields too) of a dataclass or NamedTuple."""
    hints = resolve_hints(cls, "shardtypes")
    names = [f.name for f in dataclasses.fields(cls)] if dataclasses.is_dataclass(cls) else getattr(cls, "_fields")
    return {name: hints.get(name, Any) for name in names}


@functools.lru_cache(maxsize=None)
def _is_checked_class(cls: type) -> bool:
    """A dataclass (of any model library) or NamedTuple whose fields hold shardtypes annotations."""
    node = model(cls)
    return isinstance(node, ClassNode) and node.has_arrays


def _check_fields(value: Any, types: dict, names: tuple, memo: TypeCheckMemo) -> None:
    restore = _snapshot(memo)
    outer = _FIELD_PATH.get()
    try:
        for name in names:
            _FIELD_PATH.set((*outer, name))
            try:
                typeguard.check_type_internal(getattr(value, name), types[name], memo)
            except TypeCheckError as e:
                restore()
                raise _field_error(e, name) from None
    finally:
        _FIELD_PATH.set(outer)


# The attribute path of the dataclass field being checked, for "bound by" phrases.
_FIELD_PATH: contextvars.ContextVar[tuple] = contextvars.ContextVar("shardtypes.field_path", default=())


def _field_error(e: TypeCheckError, name: str) -> FieldError:
    if isinstance(e, FieldError):
        fields, core = [name, *e.fields], e.core
    else:
        fields, core = [name], _core_message(e)
    role, func, kind = _role()
    path = "." + ".".join(fields)
    if kind == "argument" and role.startswith('argument "'):
        root = role[len('argument "'):-1]
        message = f"of {func}(): {root}{path} {core}"
    elif func:
        message = f"of {func}(): {path} {core}"
    else:
        message = f"{path} {core}"
    return FieldError(message, fields, core)


def _core_message(e: TypeCheckError) -> str:
    """A leaf's complaint without the ``of f()`` prefix our checkers add (the field error says
    the function once, at its start), keeping typeguard's own path (``item 1``)."""
    text = str(e.args[0]) if e.args else ""
    if text.startswith("of ") and "() " in text:
        text = text[text.index("() ") + 3:]
    path = getattr(e, "_path", None)
    return f"{' of '.join(path)} {text}" if path else text


def _check_union(value: Any, origin: Any, args: tuple, memo: TypeCheckMemo) -> None:
    """typing.Union with shardtypes members: like typeguard's, but a member that fails leaves
    no bindings behind for the next member to trip on."""
    restore = _snapshot(memo)
    errors = []
    for member in args:
        try:
            typeguard.check_type_internal(value, member, memo)
            return
        except TypeCheckError as e:
            errors.append(f"{_type_repr(member)}: {e}")
            restore()
    raise TypeCheckError("did not match any element in the union:\n  " + "\n  ".join(errors))


def _type_repr(annotation: Any) -> str:
    if isinstance(annotation, type) and not typing.get_args(annotation):
        return annotation.__qualname__
    return repr(annotation).replace("typing.", "")


@functools.lru_cache(maxsize=1024)
def _has_shardtypes_member(args: tuple) -> bool:
    for arg in args:
        if is_annotation(arg):
            return True
        origin = typing.get_origin(arg)
        if arg in _TREE_CLASSES:
            return True
        if isinstance(arg, type) and _safe_is_checked_class(arg):
            return True
        if origin is not None and _has_shardtypes_member(typing.get_args(arg)):
            return True
    return False


def _safe_is_checked_class(cls: type) -> bool:
    try:
        return _is_checked_class(cls)
    except (NameError, TypeError):
        return False


def _has_member(args: tuple) -> bool:
    try:
        return _has_shardtypes_member(args)
    except TypeError:  # unhashable arguments (Literal of a list, ...): not ours
        return False


def _lookup(origin, args, extras):
    if extras:
        ours = tuple(e for e in extras if _is_shardtypes_annotation(e))
        if ours:
            return _annotated_checker(origin, args, ours)
    checker = _ours(origin, args)
    if checker is not None and not config._checks and not _FORCED.get():
        # Containers and unions go back to typeguard's own checkers, which then meet their
        # shardtypes members here again.
        return _no_check if checker in (_check_annotation, _check_dataclass) else None
    return checker


def _is_shardtypes_annotation(extra: Any) -> bool:
    """Whether ``Annotated`` metadata is a shardtypes annotation (checked, not ignored)."""
    if is_annotation(extra):
        return True
    return isinstance(extra, type) and (extra in _TREE_CLASSES or _safe_is_checked_class(extra))


def _annotated_checker(origin: Any, args: tuple, extras: tuple) -> Any:
    """``Annotated[T, f32[b'...']]``: the value must be a ``T`` (typeguard's check) and pass
    each shardtypes annotation in the metadata, as if it were the annotation itself."""

    def check(value: Any, _origin: Any, _args: tuple, memo: TypeCheckMemo) -> None:
        if origin is not Any and origin is not typing.Any:
            typeguard.check_type_internal(value, origin[args] if args else origin, memo)
        for extra in extras:
            typeguard.check_type_internal(value, extra, memo)

    return check


def _no_check(value: Any, origin: Any, args: tuple, memo: TypeCheckMemo) -> None:
    """What typeguard runs for a shardtypes annotation while ``config.checks`` is off."""


def _ours(origin: Any, args: tuple) -> Any:
    """The checker for an annotation that is (or holds) a shardtypes one, else None."""
    if isinstance(origin, type) and issubclass(origin, number):
        return _check_annotation
    if not args and isinstance(origin, type):
        if origin in _TREE_CLASSES:
            return _check_dataclass
        try:
            if _is_checked_class(origin):
                return _check_dataclass
        except NameError:  # annotations that cannot be resolved: typeguard's isinstance
            pass
    if args and origin is not None and _has_member(args):
        if origin is Union:
            return _check_union
        checker = _CONTAINER_CHECKERS.get(origin)
        if checker is not None:
            return _ALL_OR_NOTHING.setdefault(origin, _all_or_nothing(checker))
    return None


# typeguard's own checkers for containers (tuple, list, dict, Sequence, ...), which we wrap.
_CONTAINER_CHECKERS = {
    origin: checker
    for origin, checker in _tg_checkers.origin_type_checkers.items()
    if origin is not Union
}
_ALL_OR_NOTHING: dict = {}


def register_with_typeguard() -> None:
    """Teaches typeguard to check shardtypes annotations. Done on import; idempotent."""
    if _lookup not in typeguard.checker_lookup_functions:
        typeguard.checker_lookup_functions.insert(0, _lookup)


# ---------------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=None)
def _class_for_dtype(np_dtype: np.dtype) -> type:
    for cls in dtype_classes.values():
        if cls.dtype == np_dtype:
            return cls
    raise TypeError(f"check(): no shardtypes class for dtype {np_dtype}")


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
    from ._dtypes import anydtype, floating, integer

    abstract = {np.floating: floating, np.integer: integer, np.number: anydtype, np.generic: anydtype,
                np.inexact: floating}
    if isinstance(dtype, type) and dtype in abstract:
        return abstract[dtype]
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
    if not config._checks and not _FORCED.get():
        return
    dtype_cls = _check_dtype_argument(dtype)
    if not isinstance(shape_spec, (ShapeSpec, str, bytes)):
        raise TypeError(
            f"check(): shape_spec must be a shape string ('batch embed') or a ShapeSpec, got "
            f"{shape_spec!r}"
        )
    spec = shape_spec if isinstance(shape_spec, ShapeSpec) else ShapeSpec.parse(shape_spec)
    table = _TABLE.get()
    text = annotation_text(dtype_cls, str(spec).encode())
    try:
        new = check_value(value, dtype_cls, spec, table or Table(), lambda: f"check() of {text}")
    except Mismatch as m:
        raise TypeCheckError(f"check(): value is not {text}: {m.problem}{_found(value, m)}") from None
    if new and table is not None:
        _TABLE.set(table.bind(new, "check()"))


def instance_check(annotation: type[number], value: object) -> bool:
    """``isinstance(value, annotation)`` for an array annotation class: the full check (dtype,
    rank, sizes, sharding; the array type of ``f32[jax.Array, b'...']``) as a bool. Inside a
    checked call or ``Scope`` sizes are compared with the current table and new ones bound into
    it, as ``check`` does; elsewhere each ``isinstance`` gets a fresh table. Runs whether or not
    ``config.checks`` is on: it is a question, not a check that can be switched off."""
    plan = plan_of(annotation)
    table = _TABLE.get()
    new = fast_check(value, plan, table.sizes if table is not None else {})
    if new is None:
        try:
            new = check_value(value, plan.dtype_cls, plan.spec, table or Table(),
                              lambda: f"isinstance() of {plan.text}", plan.array_type)
        except Mismatch:
            return False
    if new and table is not None:
        _TABLE.set(table.bind(new, f"isinstance() of {plan.text}"))
    return True


install_instance_check(instance_check)


def check_named(value: Any, annotation: Any, where: str, who: str) -> None:
    """Checks one value against an annotation in the current table, where the caller names the
    value (``MLP.blocks[0].w`` for ``shardtypes.nnx.check``)."""
    plan = plan_for(annotation)
    table = _TABLE.get()
    if table is None:
        raise RuntimeError(f"{who}: check_named needs a dimension table (a Scope)")
    if plan is None:
        try:
            typeguard.check_type(value, annotation, collection_check_strategy=typeguard.CollectionCheckStrategy.ALL_ITEMS)
        except TypeCheckError as e:
            raise TypeCheckError(f"{who}: {where}: {e}") from None
        return
    try:
        new = check_value(value, plan.dtype_cls, plan.spec, table, lambda: f"{where} ({who})", plan.array_type)
    except Mismatch as m:
        raise TypeCheckError(f"{who}: {where} is not {plan.text}: {m.problem}{_found(value, m)}") from None
    if new:
        _TABLE.set(table.bind(new, where))
