"""Resolving annotations, PEP 563 strings included, with an error that says whose they are.

Annotations from other libraries may hold forward references their own module resolves and ours
cannot: optax's ``OptState`` is a ``Union`` with ``Iterable['ArrayTree']`` inside. Such a
reference, nested in an annotation object (not in the text the user wrote), is read as ``Any``
(and looked into, as ``Any`` is), with one ``ShardtypesWarning`` naming it; an annotation the
user wrote that does not resolve is still a NameError naming whose it is.
"""

from __future__ import annotations

import collections.abc
import logging
import re
import sys
import typing
from typing import Any


def resolve_hints(obj: Any, who: str, localns: dict | None = None) -> dict[str, Any]:
    """``typing.get_type_hints(obj)`` with ``Annotated`` kept; a failure is a NameError that
    names ``who`` wanted them (``shardtypes.typechecked cannot resolve the annotations of f``)."""
    try:
        return typing.get_type_hints(obj, localns=localns, include_extras=True)
    except Exception as e:
        name = f"{getattr(obj, '__module__', '?')}.{getattr(obj, '__qualname__', repr(obj))}"
        error = NameError(f"{who} cannot resolve the annotations of {name}: {type(e).__name__}: {e}")
        if not isinstance(e, NameError):
            raise error from e
        try:
            return _lenient(obj, name, localns)
        except _Unresolved:
            raise error from e


_NOTED: set = set()  # forward references of other libraries read as Any: each said once, at debug level
_LOG = logging.getLogger("shardtypes")


class _Unresolved(Exception):
    """A name the user wrote does not resolve."""


def _lenient(obj: Any, name: str, localns: dict | None) -> dict[str, Any]:
    raw = dict(getattr(obj, "__annotations__", {}) or {})
    globalns = getattr(obj, "__globals__", None)
    if globalns is None:
        module = sys.modules.get(getattr(obj, "__module__", ""), None)
        globalns = dict(vars(module)) if module is not None else {}
    hints = {}
    for key, written in raw.items():
        value = written
        for _ in range(2):  # (a string, or a string of a string: ``x: "T"`` under PEP 563)
            if isinstance(value, str):
                try:
                    value = eval(value, globalns, localns or {})  # noqa: S307 - PEP 563: as typing does
                except NameError as e:
                    raise _Unresolved(key) from e
        hints[key] = _without_forward_refs(value, globalns, localns or {}, name,
                                           written if isinstance(written, str) else "")
    return hints


def _without_forward_refs(tp: Any, globalns: dict, localns: dict, where: str, written: str) -> Any:
    if isinstance(tp, (typing.ForwardRef, str)):  # (``list['T']`` keeps the string itself)
        ref = tp.__forward_arg__ if isinstance(tp, typing.ForwardRef) else tp
        try:
            return eval(ref, globalns, localns)  # noqa: S307 - a forward reference, as typing does
        except NameError:
            if re.search(rf"(?<![\w.]){re.escape(ref)}(?![\w])", written):
                raise _Unresolved(ref) from None  # (the user's own: a name the user wrote, whole)
            if ref not in _NOTED:
                # Not the user's to fix (optax's 'ArrayTree' inside an OptState or a MultiStepsState):
                # said once per process, at debug level, never as a warning.
                _NOTED.add(ref)
                _LOG.debug("the forward reference %r inside the annotations of %s comes from another library and "
                           "cannot be resolved here; it is read as Any (and looked into, as Any is)", ref, where)
            return Any
    args = typing.get_args(tp)
    origin = typing.get_origin(tp)
    if not args or origin is None:
        return tp
    new: tuple[Any, ...] = tuple(
        _without_forward_refs(a, globalns, localns, where, written) if not isinstance(a, list) else
        [_without_forward_refs(b, globalns, localns, where, written) for b in a] for a in args)
    if new == args:
        return tp
    if origin is typing.Union:
        return typing.Union[new]
    if origin is typing.Annotated:
        return typing.Annotated[(new[0], *tp.__metadata__)]
    generic: Any = origin  # (rebuilt from its own origin and the resolved arguments)
    if origin is collections.abc.Callable and len(new) == 2:
        return generic[new[0], new[1]]
    try:
        return generic[new if len(new) > 1 else next(iter(new))]
    except TypeError:
        return tp
