"""Typeguard integration: ``register_with_typeguard`` puts a lookup first in typeguard's, which
hands typeguard our checkers: for array annotations (the checker here), for dataclasses, unions
and containers that hold them (``integrations.containers``), and for ``Annotated`` metadata.

Once registered, plain ``typeguard.typechecked`` and ``typeguard.check_type`` check shardtypes
annotations; where the value sits and which dimension table it binds into are read from
typeguard's frames (``checking.typeguard_frames``).
"""

from __future__ import annotations

import collections.abc
import types
import typing
from typing import Any, Union

import typeguard
from typeguard import TypeCheckError, TypeCheckMemo

from ..checking import (
    FIELD_PATH,
    check_value,
    checked_role,
    container_checkers,
    fast_check,
    get_table,
    origin_phrase,
    set_table,
)
from ..context import FORCED, TABLE, Table, config, staged_read
from ..model import (
    COLLECTED,
    INFO as _TREE_CLASSES,
    PLANS,
    PYTREES,
    ArrayError,
    Mismatch,
    annotation_class,
    collect,
    field_path,
    found_text,
    holds_shardtypes,
    install_pytree_instance_check,
    is_annotation,
    is_checked_class,
    malformed,
    number,
    plan_of,
    safe_is_checked_class,
)
from .containers import all_or_nothing, check_dataclass, check_pytree, check_union, public_error, sequence_items

__all__ = ["register_with_typeguard"]


def _check_annotation(value: Any, origin: type, args: tuple, memo: TypeCheckMemo) -> None:
    plan = PLANS.get(origin)
    if plan is None:
        annotation = annotation_class(origin)
        if annotation is None or args:
            raise malformed(origin, args)
        plan = plan_of(annotation)
    table, scoped = get_table(memo)
    new = fast_check(value, plan, table.sizes)
    if new is None:
        try:
            new = check_value(value, plan.dtype_cls, plan.spec, table,
                              lambda: f"{origin_phrase()}, annotated {plan.text}", plan.array_type)
        except Mismatch as m:
            role, func, kind = checked_role()
            core = f"is not {plan.text}: {m.problem}{found_text(value, m)}"
            if COLLECTED.get() is not None:
                # No typeguard frame will add the argument to this message: say it all here.
                fields = FIELD_PATH.get()
                where = role
                if fields:
                    root = role[len('argument "'):-1] if role.startswith('argument "') else ""
                    where = f"{role} of {func}(): {root}{field_path(fields)}" if func else field_path(fields)
                elif func:
                    where = f"{role} of {func}()"
                collect(TypeCheckError(f"{where} {core}"))
                return
            prefix = f"of {func}() " if func and kind != "check_type" else ""
            # typeguard raises it from the user's instrumented function, past any boundary of
            # ours that could filter the traceback: pytest at least leaves this frame out.
            __tracebackhide__ = True  # noqa: F841
            raise ArrayError(f"{prefix}{core}") from None
    if new:
        set_table(memo, table.bind(new, origin_phrase()), scoped)


def _lookup(origin, args, extras):
    if extras:
        ours = tuple(e for e in extras if _is_shardtypes_annotation(e))
        if ours:
            return _annotated_checker(origin, args, ours)
    checker = _ours(origin, args)
    if checker is not None and not config._checks and not FORCED.get():
        # Containers and unions go back to typeguard's own checkers, which then meet their
        # shardtypes members here again.
        return _no_check if checker in (_check_annotation, check_dataclass, check_pytree) else None
    return checker


def _is_shardtypes_annotation(extra: Any) -> bool:
    """Whether ``Annotated`` metadata is a shardtypes annotation (checked, not ignored)."""
    if is_annotation(extra):
        return True
    return isinstance(extra, type) and (extra in _TREE_CLASSES or extra in PYTREES or safe_is_checked_class(extra))


def _annotated_checker(origin: Any, args: tuple, extras: tuple) -> Any:
    """``Annotated[T, f32[b'...']]``: the value must be a ``T`` (typeguard's check) and pass
    each shardtypes annotation in the metadata, as if it were the annotation itself."""

    def check(value: Any, _origin: Any, _args: tuple, memo: TypeCheckMemo) -> None:
        if origin is not Any and origin is not typing.Any:
            try:
                typeguard.check_type_internal(value, origin[args] if args else origin, memo)
            except TypeCheckError as e:
                raise public_error(e) from None
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
        if origin in PYTREES:
            return check_pytree
        if origin in _TREE_CLASSES:
            return check_dataclass
        try:
            if is_checked_class(origin):
                return check_dataclass
        except NameError:  # annotations that cannot be resolved: typeguard's isinstance
            pass
    if args and origin is not None and holds_shardtypes(args):
        if origin is Union or origin is types.UnionType:  # Optional[X], X | Y
            return check_union
        checker = _CONTAINER_CHECKERS.get(origin)
        if checker is not None and origin in _SEQUENCES:
            return _SEQUENCE_ITEMS.setdefault(origin, sequence_items(checker))
        if checker is not None:
            return _ALL_OR_NOTHING.setdefault(origin, all_or_nothing(checker))
    return None


# typeguard's own checkers for containers (tuple, list, dict, Sequence, ...), which we wrap.
_CONTAINER_CHECKERS = {
    origin: checker
    for origin, checker in container_checkers().items()
    if origin is not Union
}
_ALL_OR_NOTHING: dict = {}
# Those whose items are checked one by one with their index in the path (containers.sequence_items).
_SEQUENCES = (tuple, list, collections.abc.Sequence)
_SEQUENCE_ITEMS: dict = {}


def _pytree_instance_check(cls: type, value: object) -> bool:
    """``isinstance(value, PyTree[X])``: the full check as a bool. Inside a checked call or
    ``Scope`` the leaves bind into the current table (as ``isinstance(x, f32[...])`` does);
    elsewhere they share a fresh one. Runs whether or not ``config.checks`` is on."""
    outer = TABLE.get()
    if outer is not None:
        staged_read()
    token, forced = TABLE.set(outer if outer is not None else Table()), FORCED.set(True)
    passed = True
    try:
        typeguard.check_type(value, cls, collection_check_strategy=typeguard.CollectionCheckStrategy.ALL_ITEMS)
    except TypeCheckError:
        passed = False
    finally:
        FORCED.reset(forced)
        table = TABLE.get()
        TABLE.reset(token)
    if passed and outer is not None and table is not None:
        TABLE.set(table)
    return passed


install_pytree_instance_check(_pytree_instance_check)


def register_with_typeguard() -> None:
    """Teaches typeguard to check shardtypes annotations. Done on import; idempotent."""
    if _lookup not in typeguard.checker_lookup_functions:
        typeguard.checker_lookup_functions.insert(0, _lookup)
