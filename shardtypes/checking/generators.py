"""Generators checked from their signature, where typeguard cannot instrument them (an annotation
naming a variable of an enclosing function, no source, ``python -O``).

The arguments are checked when the generator is made, in a table of its own (a snapshot of the
caller's); each step then runs in that table, so every yielded value, sent value and the return
value is checked against the sizes the arguments bound, as in an instrumented generator, and
nothing the generator binds reaches the caller's table.
"""

from __future__ import annotations

import functools
import inspect
import types
from typing import Any, Callable

from typeguard import TypeCheckMemo

from ..context import FORCED, TABLE, Table, config
from ..model import generator_types, resolve_hints
from .call_tables import EMPTY, NO_TYPE_CHECK
from .signature import typeguard_config
from .typeguard_frames import check_argument_types_internal, check_return_type_internal
from .typeguard_internals import check_send, check_yield

__all__ = ["generator_from_signature"]

# typeguard's checks of a yielded and a sent value (named ..._internal from some version on).
_check_yield = check_yield
_check_send = check_send
# (Their names, and so their signatures to a type checker, depend on typeguard's version.)
_check_arguments: Callable[..., Any] = check_argument_types_internal
_check_return: Callable[..., Any] = check_return_type_internal


class _Checks:
    """What one generator function checks, resolved at its first call (forward references)."""

    def __init__(self, target: Callable, scope_vars: dict):
        self.target = target
        self.scope_vars: dict | None = scope_vars
        self.signature = inspect.signature(target)
        self.func_name = target.__qualname__
        self.hints: dict[str, Any] | None = None
        self.types: tuple[Any, Any, Any] = (None, None, None)

    def resolve(self) -> dict[str, Any]:
        if self.hints is None:
            hints = resolve_hints(self.target, "shardtypes.typechecked", self.scope_vars or {})
            self.types = generator_types(hints.pop("return", None))
            self.hints, self.scope_vars = hints, None
        return self.hints

    def arguments(self, args: tuple, kwargs: dict) -> tuple[Table, TypeCheckMemo]:
        """Checks the arguments in a snapshot of the caller's table; (that table, the memo)."""
        hints = self.resolve()
        bound = self.signature.bind(*args, **kwargs)
        bound.apply_defaults()
        checked = {}
        for name, value in bound.arguments.items():
            annotation = hints.get(name)
            if annotation is None:
                continue
            kind = self.signature.parameters[name].kind
            if kind is inspect.Parameter.VAR_POSITIONAL:
                annotation = types.GenericAlias(tuple, (annotation, ...))
            elif kind is inspect.Parameter.VAR_KEYWORD:
                annotation = types.GenericAlias(dict, (str, annotation))
            checked[name] = (value, annotation)
        memo = TypeCheckMemo(self.target.__globals__, dict(bound.arguments), config=typeguard_config())
        token = TABLE.set(TABLE.get() or EMPTY)
        try:
            _check_arguments(self.func_name, checked, memo)
            return TABLE.get() or EMPTY, memo
        finally:
            TABLE.reset(token)


def generator_from_signature(target: Callable, scope_vars: dict) -> Callable:
    """``target`` (a generator or async generator function) with its arguments, yields, sends
    and return value checked from its annotations."""
    checks = _Checks(target, scope_vars)
    if inspect.isasyncgenfunction(target):

        @functools.wraps(target)
        def async_wrapper(*args, **kwargs):
            if not config._checks and not FORCED.get() or NO_TYPE_CHECK in async_wrapper.__dict__:
                return target(*args, **kwargs)
            table, memo = checks.arguments(args, kwargs)
            return _async_steps(checks, target(*args, **kwargs), table, memo)

        return async_wrapper

    @functools.wraps(target)
    def wrapper(*args, **kwargs):
        if not config._checks and not FORCED.get() or NO_TYPE_CHECK in wrapper.__dict__:
            return target(*args, **kwargs)
        table, memo = checks.arguments(args, kwargs)
        return _steps(checks, target(*args, **kwargs), table, memo)

    return wrapper


def _steps(checks: _Checks, gen: Any, table: Table, memo: TypeCheckMemo) -> Any:
    yield_type, send_type, return_type = checks.types
    name = checks.func_name
    method, arg, sent = gen.send, None, False
    while True:
        token = TABLE.set(table)
        try:
            if sent and send_type is not None:
                _check_send(name, arg, send_type, memo)
            try:
                item = method(arg)
            except StopIteration as stop:
                if return_type is not None:
                    _check_return(name, stop.value, return_type, memo)
                return stop.value
            if yield_type is not None:
                _check_yield(name, item, yield_type, memo)
        finally:
            table = TABLE.get() or table
            TABLE.reset(token)
        try:
            arg = yield item
            method, sent = gen.send, True
        except GeneratorExit:
            gen.close()
            raise
        except BaseException as e:
            method, arg, sent = gen.throw, e, False


async def _async_steps(checks: _Checks, gen: Any, table: Table, memo: TypeCheckMemo) -> Any:
    yield_type, send_type, _ = checks.types
    name = checks.func_name
    method, arg, sent = gen.asend, None, False
    while True:
        token = TABLE.set(table)
        try:
            if sent and send_type is not None:
                _check_send(name, arg, send_type, memo)
            try:
                item = await method(arg)
            except StopAsyncIteration:
                return
            if yield_type is not None:
                _check_yield(name, item, yield_type, memo)
        finally:
            table = TABLE.get() or table
            TABLE.reset(token)
        try:
            arg = yield item
            method, sent = gen.asend, True
        except GeneratorExit:
            await gen.aclose()
            raise
        except BaseException as e:
            method, arg, sent = gen.athrow, e, False
