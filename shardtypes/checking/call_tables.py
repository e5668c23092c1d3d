"""One dimension table per top-level call of a checked function: the wrapper that starts a call
outside any table with a fresh one (and the outermost traced call of an eager call tree with the
table of its base, see ``context.tables``), for plain functions, coroutines and generators, whose steps each
run in the call's own table.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import warnings
from typing import Any, Callable, Iterator

from typeguard import TypeCheckError

from ..context import (
    BASE,
    FORCED,
    IN_TRACE,
    TABLE,
    UNCHECKED,
    Table,
    UncheckedCall,
    config,
    staged_read,
    trace_key,
    tracing,
)
from ..model import in_function
from .compile_time import COMPILE_TIME_CHECKS
from .fast_path import ARRAY_TYPES
from .typeguard_frames import failed_function

__all__: list[str] = []

# What ``typing.no_type_check`` sets on a function: on a checked wrapper (``@no_type_check``
# above ``@typechecked``), the wrapper calls its function unchecked.
NO_TYPE_CHECK = "__no_type_check__"


EMPTY = Table()  # tables are immutable, so every top-level call can start from this one


@contextlib.contextmanager
def sizing() -> Iterator[None]:
    """Where the sizes of a call made with checks off are worked out, when ``dims()`` asks: the
    checks forced on, in a table of their own, with no compile-time check registered (the
    program stays as it was traced) and no warning (the user turned the checks off)."""
    forced, compile_time = FORCED.set(True), COMPILE_TIME_CHECKS.set(False)
    table, unchecked = TABLE.set(EMPTY), UNCHECKED.set(None)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        UNCHECKED.reset(unchecked)
        TABLE.reset(table)
        COMPILE_TIME_CHECKS.reset(compile_time)
        FORCED.reset(forced)


def run_unchecked(sizer: Callable[[tuple, dict], dict], target: Callable, args: tuple, kwargs: dict) -> Any:
    """``target(*args, **kwargs)`` called with checks off, recorded so that ``dims()`` read in it
    can work out the sizes its arguments give (``sizer``; see ``UncheckedCall``)."""
    token = UNCHECKED.set(UncheckedCall(sizer, args, kwargs, UNCHECKED.get()))
    try:
        return target(*args, **kwargs)
    finally:
        UNCHECKED.reset(token)


def with_table(target: Callable, checked: Callable,
                sizer: Callable[[tuple, dict], dict] | None = None) -> Callable:
    """Wraps ``checked`` so that a call outside any table runs with a fresh one. With checks off
    a plain function's call is recorded with ``sizer`` (the sizes its arguments give, for
    ``dims()``; see ``UncheckedCall``)."""
    if inspect.iscoroutinefunction(target):
        return _coroutine_with_table(target, checked)
    if inspect.isasyncgenfunction(target) or inspect.isgeneratorfunction(target):
        return _generator_with_table(target, checked)
    return _function_with_table(target, checked, sizer)


def _coroutine_with_table(target: Callable, checked: Callable) -> Callable:
    """``with_table`` for a coroutine function."""

    @functools.wraps(target)
    async def async_wrapper(*args, **kwargs):
        if not config._checks and not FORCED.get() or NO_TYPE_CHECK in async_wrapper.__dict__:
            return await target(*args, **kwargs)
        start = TABLE.get()
        if start is not None:
            try:
                return await checked(*args, **kwargs)
            except TypeCheckError:
                TABLE.set(start)  # a failed call leaves the caller's table as it was
                raise
        token = TABLE.set(EMPTY)
        try:
            return await checked(*args, **kwargs)
        finally:
            TABLE.reset(token)

    return async_wrapper


def _generator_with_table(target: Callable, checked: Callable) -> Callable:
    """``with_table`` for a generator function or an async generator function."""
    # A generator's body runs after the call returns, a step at each resumption: each step
    # runs in the call's own table (a snapshot of the caller's when the call was made), so
    # its arguments, yields, sends and return value share one table, seen by dims() inside.
    if inspect.isasyncgenfunction(target):

        @functools.wraps(target)
        def async_generator_wrapper(*args, **kwargs):
            if not config._checks and not FORCED.get() or NO_TYPE_CHECK in async_generator_wrapper.__dict__:
                return target(*args, **kwargs)
            return _async_generator_in_table(checked(*args, **kwargs), TABLE.get() or EMPTY)

        return async_generator_wrapper

    @functools.wraps(target)
    def generator_wrapper(*args, **kwargs):
        if not config._checks and not FORCED.get() or NO_TYPE_CHECK in generator_wrapper.__dict__:
            return target(*args, **kwargs)
        return _generator_in_table(checked(*args, **kwargs), TABLE.get() or EMPTY)

    return generator_wrapper


def _function_with_table(target: Callable, checked: Callable,
                         sizer: Callable[[tuple, dict], dict] | None) -> Callable:
    """``with_table`` for a plain function."""

    @functools.wraps(target)
    def wrapper(*args, **kwargs):
        if not config._checks and not FORCED.get():
            if sizer is None or NO_TYPE_CHECK in own:
                return target(*args, **kwargs)
            return run_unchecked(sizer, target, args, kwargs)
        if NO_TYPE_CHECK in own:
            return target(*args, **kwargs)
        start = TABLE.get()
        table, traced = _call_table(start, args)
        if table is None:
            try:
                return checked(*args, **kwargs)
            except TypeCheckError as e:
                TABLE.set(start)  # a failed call leaves the caller's table as it was
                _raise_named(e)
                raise
        token = TABLE.set(table)
        if not traced:
            try:
                return checked(*args, **kwargs)
            except TypeCheckError as e:
                _raise_named(e)
                raise
            finally:
                TABLE.reset(token)
        trace_token = IN_TRACE.set(True)
        try:
            with trace_key():
                return checked(*args, **kwargs)
        except TypeCheckError as e:
            _raise_named(e)
            raise
        finally:
            IN_TRACE.reset(trace_token)
            TABLE.reset(token)

    own = wrapper.__dict__
    return wrapper


def _raise_named(error: TypeCheckError) -> None:
    """Raises typeguard's own failure in an instrumented function (``the return value
    (jaxlib._jax.ArrayImpl) is not a tuple``) again with the function and public class names, as
    shardtypes' messages have them; returns for any other error (the caller re-raises it)."""
    if type(error) is not TypeCheckError:
        return
    func = failed_function(error)
    if func is not None:
        raise in_function(error, func) from None


def _call_table(start: Table | None, args: tuple) -> tuple[Table | None, bool]:
    """(the table a call starts with, or None to share its caller's; whether the call is the
    outermost traced one of its call tree). A top-level call starts empty; the outermost traced
    call inside an eager call tree starts from the innermost Scope's table, so that what it
    compares with is part of jit's cache key and what it binds ends with it (see ``context.tables``)."""
    if start is None:
        concrete = bool(args) and type(args[0]) in ARRAY_TYPES
        return EMPTY, not concrete and tracing()
    if IN_TRACE.get():
        staged_read()  # nested in a staged call: a trace JAX may cache reads its table
        return None, False
    if not tracing():
        return None, False
    return BASE.get() or EMPTY, True


def _generator_in_table(gen: Any, table: Table) -> Any:
    """Runs each step of ``gen`` with ``table`` as the current one, keeping what it binds."""
    method, arg = gen.send, None
    while True:
        token = TABLE.set(table)
        try:
            item = method(arg)
        except StopIteration as stop:
            return stop.value
        except TypeCheckError as e:
            _raise_named(e)
            raise
        finally:
            table = TABLE.get() or table
            TABLE.reset(token)
        try:
            arg = yield item
            method = gen.send
        except GeneratorExit:
            gen.close()
            raise
        except BaseException as e:
            method, arg = gen.throw, e


async def _async_generator_in_table(gen: Any, table: Table) -> Any:
    """``_generator_in_table`` for an async generator."""
    method, arg = gen.asend, None
    while True:
        token = TABLE.set(table)
        try:
            item = await method(arg)
        except StopAsyncIteration:
            return
        except TypeCheckError as e:
            _raise_named(e)
            raise
        finally:
            table = TABLE.get() or table
            TABLE.reset(token)
        try:
            arg = yield item
            method = gen.asend
        except GeneratorExit:
            await gen.aclose()
            raise
        except BaseException as e:
            method, arg = gen.athrow, e
