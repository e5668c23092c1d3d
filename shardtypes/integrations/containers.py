"""Checking values that hold shardtypes annotations inside: dataclasses of every model library
field by field (the path of the field in errors), and unions and typeguard's containers (tuple,
list, dict, ...) made all-or-nothing, so that a failed member or item leaves no bindings behind.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Callable

import jax
import typeguard
from typeguard import TypeCheckError, TypeCheckMemo

from ..checking import FIELD_PATH, checked_role, snapshot
from ..model import (
    ArrayError,
    FieldError,
    PyTreeNode,
    annotated_instances,
    field_path,
    holds_shardtypes,
    is_annotation,
    model,
    qualified,
    resolve_hints,
    tree_info,
    type_text,
)

__all__: list[str] = []


def all_or_nothing(checker):
    """typeguard's checker for a container, made all-or-nothing: if any item fails, the items
    that passed leave no bindings behind."""

    def check(value: Any, origin: Any, args: tuple, memo: TypeCheckMemo) -> None:
        restore = snapshot(memo)
        try:
            checker(value, origin, args, memo)
        except TypeCheckError:
            restore()
            raise

    return check


def sequence_items(checker: Callable) -> Callable:
    """typeguard's checker for ``tuple[X, ...]``, ``tuple[A, B]``, ``list[X]`` or ``Sequence[X]``
    whose items are classes with annotated fields (a model's layers): the container checked as
    typeguard does (its type, a fixed tuple's length), then each item with its index in the path,
    so that ``p.blocks[1].w_out`` is named in errors and in "bound by" phrases, not ``p.blocks.w_out``.
    Items that are arrays keep typeguard's own ``item 1`` wording."""

    def check(value: Any, origin: Any, args: tuple, memo: TypeCheckMemo) -> None:
        fixed = origin is tuple and not (len(args) == 2 and args[1] is Ellipsis) and args != ((),)
        shape = tuple(Any for _ in args) if fixed else ((Any, Ellipsis) if origin is tuple else (Any,))
        checker(value, origin, shape, memo)  # the container's type and length, as typeguard says them
        restore = snapshot(memo)
        outer = FIELD_PATH.get()
        try:
            for i, item in enumerate(value):
                annotation = args[i] if fixed else args[0]
                indexed = not is_annotation(annotation)
                if indexed:
                    FIELD_PATH.set((*outer, f"[{i}]"))
                try:
                    typeguard.check_type_internal(item, annotation, memo)
                except TypeCheckError as e:
                    restore()
                    if indexed and isinstance(e, FieldError):
                        raise _field_error(e, f"[{i}]") from None
                    e.append_path_element(f"item {i}")
                    raise
        finally:
            FIELD_PATH.set(outer)

    return check


def check_dataclass(value: Any, origin: type, args: tuple, memo: TypeCheckMemo) -> None:
    """A pytree dataclass: any stacking of the same base class, checked field by field against
    the annotation's field types. Any other dataclass (an ``eqx.Module``, a
    ``flax.struct.dataclass``, a ``register_dataclass`` class, a plain one): an instance of it,
    checked field by field."""
    info = tree_info(origin)
    if info is None:
        if not isinstance(value, origin):
            raise ArrayError(f"{_prefix()}is not an instance of {origin.__module__}.{origin.__qualname__} "
                             f"(found {qualified(value)})")
        cls: type = type(value)
        field_types = _dataclass_field_types(cls)
        _check_fields(value, field_types, tuple(field_types), memo)
        return
    value_info = tree_info(type(value))
    if value_info is None or not (
        value_info.base is info.base
        or (issubclass(value_info.base, info.base) and value_info.axes == info.axes)
    ):
        hint = ""
        if value_info is None and isinstance(value, info.base):
            hint = (f"; {type(value).__qualname__} subclasses {info.base.__qualname__} but is not "
                    "registered as a pytree: decorate it with @pytree_dataclass too")
        name = repr(origin) if type(origin) is not type else f"{origin.__module__}.{origin.__qualname__}"
        raise ArrayError(f"{_prefix()}is not an instance of {name} (found {qualified(value)}){hint}")
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


def _check_fields(value: Any, types: dict, names: tuple, memo: TypeCheckMemo) -> None:
    restore = snapshot(memo)
    outer = FIELD_PATH.get()
    try:
        for name in names:
            FIELD_PATH.set((*outer, name))
            field = getattr(value, name)
            try:
                typeguard.check_type_internal(field, types[name], memo)
            except TypeCheckError as e:
                restore()
                raise _field_error(e, name) from None
            if not holds_shardtypes((types[name],)):
                _check_instances_inside(field, name, memo, restore, outer)
    finally:
        FIELD_PATH.set(outer)


def check_pytree(value: Any, origin: type, args: tuple, memo: TypeCheckMemo) -> None:
    """``PyTree[X]``: every leaf of the value (as JAX flattens it; instances of ``X``'s class are
    leaves when ``X`` is a class) against ``X``, in one table, with the leaf's key path in errors."""
    node = model(origin)
    assert isinstance(node, PyTreeNode)
    try:
        leaves = jax.tree_util.tree_flatten_with_path(value, is_leaf=_leaf_test(node.leaf_class))[0]
    except Exception as e:  # a registered class whose flatten fails on this value
        raise ArrayError(f"{_prefix()}is not a pytree JAX can flatten ({type(e).__name__}: {e})") from None
    restore = snapshot(memo)
    outer = FIELD_PATH.get()
    annotation = node.leaf.annotation
    try:
        for path, leaf in leaves:
            where = jax.tree_util.keystr(path).removeprefix(".")
            if where:
                FIELD_PATH.set((*outer, where))
            try:
                typeguard.check_type_internal(leaf, annotation, memo)
            except TypeCheckError as e:
                restore()
                if not where:
                    raise
                raise _field_error(e, where) from None
    finally:
        FIELD_PATH.set(outer)


def _leaf_test(leaf_class: type | None) -> Callable[[Any], bool] | None:
    """``is_leaf`` for ``PyTree[X]``: None when X is an array annotation (JAX's own leaves);
    for an annotated class, an instance of it or of a stacking of it is one leaf."""
    if leaf_class is None:
        return None

    def is_leaf(x: Any) -> bool:
        info = tree_info(type(x))
        return isinstance(x, leaf_class) or (info is not None and info.base is leaf_class)

    return is_leaf


def _check_instances_inside(field: Any, name: str, memo: TypeCheckMemo, restore: Any, outer: tuple) -> None:
    """A field whose annotation holds no shardtypes one (``opt_state: Any``, an optax state):
    each annotated class inside it (``mu``, a ``Params``) is still checked against its own class,
    so nothing that carries annotations passes unchecked."""
    for path, instance in annotated_instances(field):
        where = f"{name}{path}"
        FIELD_PATH.set((*outer, where))
        try:
            typeguard.check_type_internal(instance, type(instance), memo)
        except TypeCheckError as e:
            restore()
            raise _field_error(e, where) from None


def _field_error(e: TypeCheckError, name: str) -> FieldError:
    if isinstance(e, FieldError):
        fields, core = [name, *e.fields], e.core
    else:
        fields, core = [name], _core_message(e)
    role, func, kind = checked_role()
    path = field_path(fields)
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


def check_union(value: Any, origin: Any, args: tuple, memo: TypeCheckMemo) -> None:
    """typing.Union with shardtypes members: like typeguard's, but a member that fails leaves
    no bindings behind for the next member to trip on, members are written as in the source
    (``f32[b'a b']``) and the value's class by its public name (``jax.Array``)."""
    restore = snapshot(memo)
    errors = []
    for member in args:
        try:
            typeguard.check_type_internal(value, member, memo)
            return
        except TypeCheckError as e:
            why = f"{field_path(e.fields)} {e.core}" if isinstance(e, FieldError) else _core_message(e)
            errors.append(f"{type_text(member).replace('shardtypes.', '')}: {why}")
            restore()
    raise ArrayError(f"{_prefix()}did not match any element in the union:\n  " + "\n  ".join(errors))


def public_error(e: TypeCheckError) -> TypeCheckError:
    """typeguard's own failure inside a shardtypes annotation (the ``jax.Array`` of
    ``Annotated[jax.Array, f32[b'...']]``) as an ``ArrayError``: the function named, and classes
    by their public names (``jax.Array``, not ``jaxlib._jax.ArrayImpl``), under plain
    ``typeguard.typechecked`` too. Our own errors pass through unchanged."""
    if type(e) is not TypeCheckError:
        return e
    public = ArrayError(f"{_prefix()}{e.args[0] if e.args else ''}")
    public._path = e._path  # the path inside the value typeguard has noted so far (item 0, ...)
    return public


def _prefix() -> str:
    """``of f() `` where the failure is an argument or return value of ``f``, for messages that
    typeguard's frame then starts with the value's own path."""
    _, func, kind = checked_role()
    return f"of {func}() " if func and kind != "check_type" else ""
