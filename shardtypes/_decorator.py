"""``typechecked``: the decorator users put on functions, methods and classes.

It checks a function's annotated arguments and return value, and its annotated locals, with one
dimension table per top-level call (nested checked calls share it). Two ways to get there:

* A function whose body annotates no locals (the usual model code) is checked by a wrapper that
  reads its signature once and checks shardtypes annotations directly, with no typeguard machinery
  per call; every other annotation (``int``, ``tuple[f32[...], ...]``, a config class) goes to
  typeguard's own argument checks, so the messages are typeguard's.
* A function that annotates locals, or a generator, is instrumented by ``typeguard.typechecked``,
  which is the only way to check an annotated assignment.

A function typeguard cannot instrument (no source, ``python -O``) is never left unchecked: its
arguments and return value are checked from the signature and a ShardtypesWarning says that its
annotated locals are not.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import inspect
import sys
import textwrap
import types
import warnings
from typing import Any, Callable, TypeVar, overload

import jax
import typeguard
from typeguard import TypeCheckError, TypeCheckMemo

from ._config import _FORCED, config
from ._dtypes import number
from ._dims import _BASE, _IN_TRACE, _TABLE, Table, scope, tracing
from ._hints import resolve_hints
from ._instrument import has_str_shapes, instrument_str_shapes, with_closure
from ._check_entry import check_with_plan
from ._errors import ShardtypesWarning
from ._typeguard_frames import check_argument_types_internal, check_return_type_internal
from ._plans import _ARRAY_TYPES, fast_check, plan_for
from ._model import fast_tree, learn_layout, model, tree_node

__all__ = ["typechecked"]

# What typechecked decorates, and gives back with the same type (so the same signature).
_Target = TypeVar(
    "_Target",
    bound="Callable[..., Any] | type | property | staticmethod[..., Any] | classmethod[Any, ..., Any]",
)

_EMPTY = Table()  # tables are immutable, so every top-level call can start from this one

def _config() -> Any:
    """typeguard's configuration as it is now, except that every item of a list or dict of
    arrays is checked (typeguard checks only the first by default, which would let the second
    layer of a list through unchecked)."""
    return dataclasses.replace(
        typeguard.config, collection_check_strategy=typeguard.CollectionCheckStrategy.ALL_ITEMS
    )


@overload
def typechecked(target: _Target, /) -> _Target: ...


@overload
def typechecked(target: None = None, /) -> Callable[[_Target], _Target]: ...


def typechecked(target: _Target | None = None, /) -> _Target | Callable[[_Target], _Target]:
    """Checks the annotated arguments, annotated locals and return value of each call.

    This is ``typeguard.typechecked`` plus dimension tables: a call of a checked function that is
    not inside another checked call gets a fresh table; nested checked calls share their caller's
    (use ``@scope`` or ``with Scope():`` to isolate a callee). Works on functions, methods,
    ``staticmethod``/``classmethod``, properties, classes and ``async`` functions.

    >>> @typechecked
    ... def center(x: f32[b'batch/d channels']) -> f32[b'batch/d channels']:
    ...     return x - jnp.mean(x, axis=-1, keepdims=True)
    """
    if target is None:  # @typechecked()
        return typechecked
    # Annotations may name variables of the scope the decorator is applied in (a class body, an
    # enclosing function); keep that scope's names to resolve them, as typeguard does.
    return _typechecked(target, sys._getframe(1).f_locals)


def _typechecked(target: Any, scope_vars: dict) -> Any:
    if isinstance(target, type) and issubclass(target, number):
        raise TypeError(
            f"typechecked expects a function, method or class, got the annotation {target!r}: "
            "annotate a function's parameters with it and decorate the function"
        )
    if isinstance(target, type):
        return _typecheck_class(target, scope_vars)
    if isinstance(target, (staticmethod, classmethod)):
        return type(target)(_typechecked(target.__func__, scope_vars))
    if isinstance(target, property):
        def checked(f: Callable[..., Any] | None) -> Callable[..., Any] | None:
            return _typechecked(f, scope_vars) if f is not None else None

        return property(checked(target.fget), checked(target.fset), checked(target.fdel), target.__doc__)
    if not callable(target) or not hasattr(target, "__code__"):
        raise TypeError(f"typechecked expects a function, method or class, got {target!r}")

    if getattr(target, "__shardtypes_checked__", False):
        return target  # already checked: checking twice would only cost time
    if getattr(target, "__shardtypes_scope__", False):
        # typechecked(scope(f)): the checks belong inside the fresh table, as in scope(typechecked(f)).
        return scope(_typechecked(getattr(target, "__wrapped__"), scope_vars))
    needs, why_not = _needs_instrumentation(target)
    if needs:
        instrumented, problem = _instrument(target, scope_vars)
        if problem is None:
            return _mark(_with_table(target, instrumented))
        _warn_unchecked_locals(target, problem)
    elif why_not is not None:
        _warn_unchecked_locals(target, why_not)
    return _mark(_SignatureChecker(target, scope_vars).wrap())


def _mark(wrapper: Callable[..., Any]) -> Callable[..., Any]:
    setattr(wrapper, "__shardtypes_checked__", True)  # typechecked(typechecked(f)) is typechecked(f)
    return wrapper


def _warn_unchecked_locals(target: Callable, reason: str) -> None:
    warnings.warn(
        f"shardtypes.typechecked cannot instrument {_qualname(target)} ({reason}). Its arguments "
        "and return value are checked from its signature; annotated local variables inside it, "
        "if any, are NOT checked.",
        ShardtypesWarning,
        stacklevel=_user_stacklevel(),
    )


def _user_stacklevel() -> int:
    """The stacklevel of the first frame outside this module (the line that applied the decorator)."""
    frame: types.FrameType | None = sys._getframe(1)
    level = 1
    while frame is not None and frame.f_globals.get("__name__") == __name__:
        frame = frame.f_back
        level += 1
    return level


def _qualname(f: Any) -> str:
    return f"{getattr(f, '__module__', '?')}.{getattr(f, '__qualname__', repr(f))}"


def _typecheck_class(cls: type, scope_vars: dict) -> type:
    scope_vars = {**scope_vars, cls.__name__: cls}
    for name, attr in list(vars(cls).items()):
        if inspect.isfunction(attr) or isinstance(attr, (staticmethod, classmethod, property)):
            setattr(cls, name, _typechecked(attr, scope_vars))
    return cls


# ---------------------------------------------------------------------------------------------
# Choosing how to check.


def _needs_instrumentation(target: Callable) -> tuple[bool, str | None]:
    """(whether typeguard must instrument ``target``, why its body could not be read)."""
    if inspect.isgeneratorfunction(target) or inspect.isasyncgenfunction(target):
        return True, None
    if hasattr(target, "__wrapped__"):
        # A wrapper made by another decorator (scope, typed_shard_map, functools.wraps): its
        # source is the wrapped function's, which typeguard cannot find in the wrapper's code.
        # Its arguments and return value are checked from the signature; the wrapped function's
        # locals are the business of whoever checks it.
        return False, None
    try:
        source = textwrap.dedent(inspect.getsource(target))
        tree = ast.parse(source)
    except (OSError, TypeError, SyntaxError, IndentationError) as e:
        return False, f"its source is not available: {e}"
    func = next(
        (n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))), None
    )
    if func is None:  # a lambda: it has no statements, so no annotated locals
        return False, None
    return _annotates_locals(func.body), None


def _annotates_locals(body: list) -> bool:
    stack = list(body)
    while stack:
        node = stack.pop()
        if isinstance(node, ast.AnnAssign):
            return True
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            continue  # a nested scope's locals are not this function's
        stack.extend(ast.iter_child_nodes(node))
    return False


def _instrument(target: Callable, scope_vars: dict) -> tuple[Callable, str | None]:
    """typeguard's instrumentation of ``target``, or why there is none."""
    if not __debug__:
        return target, "Python runs with -O, which turns typeguard's instrumentation off"
    if has_str_shapes(target, scope_vars):  # typeguard would read f32['batch embed'] as a forward reference
        return instrument_str_shapes(target, scope_vars)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            instrumented = typeguard.typechecked(
                collection_check_strategy=typeguard.CollectionCheckStrategy.ALL_ITEMS
            )(target)
        except Exception as e:  # typeguard fails on some exec'd or interactive code
            return target, f"typeguard failed: {type(e).__name__}: {e}"
    problems = [str(w.message) for w in caught if issubclass(w.category, typeguard.InstrumentationWarning)]
    for w in caught:
        if not issubclass(w.category, typeguard.InstrumentationWarning):
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    if instrumented is target or getattr(instrumented, "__code__", None) is target.__code__:
        return target, "; ".join(problems) or "typeguard left it unchanged"
    return with_closure(instrumented.__code__, target, scope_vars)


def _with_table(target: Callable, checked: Callable) -> Callable:
    """Wraps ``checked`` so that a call outside any table runs with a fresh one."""
    if inspect.iscoroutinefunction(target):

        @functools.wraps(target)
        async def async_wrapper(*args, **kwargs):
            if not config._checks and not _FORCED.get():
                return await target(*args, **kwargs)
            start = _TABLE.get()
            if start is not None:
                try:
                    return await checked(*args, **kwargs)
                except TypeCheckError:
                    _TABLE.set(start)  # a failed call leaves the caller's table as it was
                    raise
            token = _TABLE.set(_EMPTY)
            try:
                return await checked(*args, **kwargs)
            finally:
                _TABLE.reset(token)

        return async_wrapper

    if inspect.isasyncgenfunction(target) or inspect.isgeneratorfunction(target):
        # A generator's body runs after the call returns, a step at each resumption: each step
        # runs in the call's own table (a snapshot of the caller's when the call was made), so
        # its arguments, yields, sends and return value share one table, seen by dims() inside.
        if inspect.isasyncgenfunction(target):

            @functools.wraps(target)
            def async_generator_wrapper(*args, **kwargs):
                if not config._checks and not _FORCED.get():
                    return target(*args, **kwargs)
                return _async_generator_in_table(checked(*args, **kwargs), _TABLE.get() or _EMPTY)

            return async_generator_wrapper

        @functools.wraps(target)
        def generator_wrapper(*args, **kwargs):
            if not config._checks and not _FORCED.get():
                return target(*args, **kwargs)
            return _generator_in_table(checked(*args, **kwargs), _TABLE.get() or _EMPTY)

        return generator_wrapper

    @functools.wraps(target)
    def wrapper(*args, **kwargs):
        if not config._checks and not _FORCED.get():
            return target(*args, **kwargs)
        start = _TABLE.get()
        table, traced = _call_table(start, args)
        if table is None:
            try:
                return checked(*args, **kwargs)
            except TypeCheckError:
                _TABLE.set(start)  # a failed call leaves the caller's table as it was
                raise
        token = _TABLE.set(table)
        trace_token = _IN_TRACE.set(True) if traced else None
        try:
            return checked(*args, **kwargs)
        finally:
            if trace_token is not None:
                _IN_TRACE.reset(trace_token)
            _TABLE.reset(token)

    return wrapper


def _call_table(start: Table | None, args: tuple) -> tuple[Table | None, bool]:
    """(the table a call starts with, or None to share its caller's; whether the call is the
    outermost traced one of its call tree). A top-level call starts empty; the outermost traced
    call inside an eager call tree starts from the innermost Scope's table, so that what it
    compares with is part of jit's cache key and what it binds ends with it (see ``_dims``)."""
    if start is None:
        concrete = bool(args) and type(args[0]) in _ARRAY_TYPES
        return _EMPTY, not concrete and tracing()
    if _IN_TRACE.get() or not tracing():
        return None, False
    return _BASE.get() or _EMPTY, True


# ---------------------------------------------------------------------------------------------
# The signature checker.


class _Param:
    __slots__ = ("name", "kind", "annotation", "plan", "role", "origin", "first", "node", "leaf_origins")

    def __init__(self, name, kind, annotation, plan, role, origin):
        self.name = name
        self.kind = kind
        self.annotation = annotation
        self.plan = plan
        self.role = role
        self.origin = origin
        # A tree annotation (a dataclass, a list of them, ...): its model node, for the fast
        # path of trees; and the origin phrase of each leaf that binds a name, made on demand.
        node = model(annotation) if plan is None and annotation is not None else None
        self.node = tree_node(node) if node is not None else None
        self.leaf_origins: dict = {}
        # (bindings, table) of the last call in which this parameter bound first into an empty
        # table: the next such call with the same bindings object reuses the table (both are
        # immutable), which saves building one on every top-level call.
        self.first: tuple = (None, None)


class _SignatureChecker:
    """Checks arguments and return value of one function from its signature.

    Annotations are resolved at the first call (so forward references and PEP 563 strings may
    name things defined after the function), then kept.
    """

    def __init__(self, target: Callable, scope_vars: dict):
        self.target = target
        self.scope_vars: dict | None = scope_vars
        self.signature = inspect.signature(target)
        self.func_name = target.__qualname__
        self.params: list[_Param] | None = None
        # Parameters in order when every one is positional-or-keyword; None until resolved.
        self.positional: list[_Param] | None = None
        self.by_name: dict[str, _Param] = {}
        self.returns: _Param | None = None

    def _resolve(self) -> None:
        hints = resolve_hints(self.target, "shardtypes.typechecked", self.scope_vars)
        fn = self.func_name
        params = []
        for p in self.signature.parameters.values():
            ann = hints.get(p.name)
            if ann is not None and p.kind is inspect.Parameter.VAR_POSITIONAL:
                ann = types.GenericAlias(tuple, (ann, ...))
            elif ann is not None and p.kind is inspect.Parameter.VAR_KEYWORD:
                ann = types.GenericAlias(dict, (str, ann))
            plan = plan_for(ann)
            role = f'argument "{p.name}"'
            params.append(_Param(p.name, p.kind, ann, plan, role, f"{role} of {fn}()"))
        simple = all(
            p.kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
            for p in params
        )
        # Published in this order, with `positional` and `params` last: a call in another thread
        # that sees them resolved also sees the return annotation.
        if "return" in hints:
            ann = hints["return"]
            self.returns = _Param("return", None, ann, plan_for(ann), "the return value",
                                  f"the return value of {fn}()")
        self.by_name = {p.name: p for p in params}
        self.positional = params if simple else None
        self.params = params
        self.scope_vars = None  # resolved: stop holding the defining scope's objects

    def wrap(self) -> Callable:
        # Resolve now if the annotations can be (and drop the defining scope); forward
        # references to names defined later are resolved at the first call instead.
        try:
            self._resolve()
        except NameError:
            pass
        target = self.target
        checker = self
        func_name = self.func_name
        get_table, set_table, reset_table = _TABLE.get, _TABLE.set, _TABLE.reset
        cfg, forced = config, _FORCED.get
        get_in_trace, set_in_trace, reset_in_trace = _IN_TRACE.get, _IN_TRACE.set, _IN_TRACE.reset
        get_base, array_types = _BASE.get, _ARRAY_TYPES

        def check_one(param: _Param, value: Any, table: Table, tried_fast: bool = False) -> Table:
            """Checks one argument or return value; returns the table with its bindings.
            ``tried_fast``: the inline fast path has just had no answer for this value."""
            plan = param.plan
            if plan is not None:
                new = None if tried_fast else fast_check(value, plan, table[0])
                if new:
                    return table.bind(new, param.origin)
                if new is not None:
                    return table
                set_table(table)  # the full check, which also explains a failure
                check_with_plan(value, plan, param.role, func_name, param.origin, tried_fast=True)
                return get_table() or _EMPTY
            if param.annotation is None:
                return table
            node = param.node
            if node is not None:
                found = fast_tree(value, node, table[0])
                if found is not None:
                    new, first_leaf, treedef = found
                    return _bind_leaves(param, treedef, value, table, new, first_leaf) if new else table
            # Any other annotation: typeguard's own check, with typeguard's messages.
            set_table(table)
            if param.kind is None:
                memo = TypeCheckMemo(target.__globals__, {}, config=_config())
                _transactional(check_return_type_internal, func_name, value, param.annotation, memo)
            else:
                memo = TypeCheckMemo(target.__globals__, {param.name: value}, config=_config())
                _transactional(check_argument_types_internal, func_name,
                               {param.name: (value, param.annotation)}, memo)
            if node is not None:
                learn_layout(value, node)  # it passed: the next value of its structure is fast
            return get_table() or _EMPTY

        def check_arguments(args, kwargs, table: Table) -> Table:
            if checker.params is None:
                checker._resolve()
            bound = checker.signature.bind(*args, **kwargs)
            bound.apply_defaults()
            by_name = checker.by_name
            for name, value in bound.arguments.items():
                table = check_one(by_name[name], value, table)
            return table

        if inspect.iscoroutinefunction(target):

            async def async_checked(*args, **kwargs):
                if not cfg._checks and not forced():
                    return await target(*args, **kwargs)
                set_table(check_arguments(args, kwargs, (get_table() or _EMPTY)))
                result = await target(*args, **kwargs)
                if checker.returns is not None:
                    set_table(check_one(checker.returns, result, (get_table() or _EMPTY)))
                return result

            return _with_table(target, async_checked)

        # The wrapper of every call, so its common case is inline: all arguments positional,
        # each checked by the fast path, in order (messages name the argument that bound a dim
        # first). Anything else goes through check_one / check_arguments.
        @functools.wraps(target)
        def checked(*args, **kwargs):
            if not cfg._checks and not forced():
                return target(*args, **kwargs)
            table = start = get_table()
            token = trace_token = None
            if table is None:
                table = _EMPTY
                token = set_table(_EMPTY)
                if not (args and type(args[0]) in array_types) and tracing():
                    trace_token = set_in_trace(True)
            elif not get_in_trace() and tracing():
                # The outermost traced call in an eager call tree (see _dims).
                table = get_base() or _EMPTY
                token = set_table(table)
                trace_token = set_in_trace(True)
            try:
                positional = checker.positional
                if positional is not None and not kwargs and len(args) == len(positional):
                    for param, value in zip(positional, args):
                        plan = param.plan
                        new = fast_check(value, plan, table[0]) if plan is not None else None
                        if new:
                            if table[0]:
                                table = table.bind(new, param.origin)
                            else:
                                first_new, first_table = param.first
                                if new is not first_new:
                                    first_table = table.bind(new, param.origin)
                                    param.first = (new, first_table)
                                table = first_table
                        elif new is None:
                            table = check_one(param, value, table, tried_fast=plan is not None)
                else:
                    table = check_arguments(args, kwargs, table)
                if table is not start:
                    set_table(table)
                result = target(*args, **kwargs)
                ret = checker.returns
                if ret is not None:
                    table = get_table() or _EMPTY  # (set above: a Table, never None)
                    plan = ret.plan
                    new = fast_check(result, plan, table[0]) if plan is not None else None
                    if new:
                        set_table(table.bind(new, ret.origin))
                    elif new is None:
                        set_table(check_one(ret, result, table, tried_fast=plan is not None))
                return result
            except TypeCheckError:
                if token is None:  # nested: a failed call leaves the caller's table as it was
                    set_table(start)
                raise
            finally:
                if token is not None:
                    reset_table(token)
                if trace_token is not None:
                    reset_in_trace(trace_token)

        return checked


def _generator_in_table(gen: Any, table: Table) -> Any:
    """Runs each step of ``gen`` with ``table`` as the current one, keeping what it binds."""
    method, arg = gen.send, None
    while True:
        token = _TABLE.set(table)
        try:
            item = method(arg)
        except StopIteration as stop:
            return stop.value
        finally:
            table = _TABLE.get() or table
            _TABLE.reset(token)
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
        token = _TABLE.set(table)
        try:
            item = await method(arg)
        except StopAsyncIteration:
            return
        finally:
            table = _TABLE.get() or table
            _TABLE.reset(token)
        try:
            arg = yield item
            method = gen.asend
        except GeneratorExit:
            await gen.aclose()
            raise
        except BaseException as e:
            method, arg = gen.athrow, e


def _bind_leaves(param: _Param, treedef: Any, value: Any, table: Table, new: dict, first_leaf: dict) -> Table:
    """``table`` with the names leaves of a tree argument bound first, each said to be bound by
    its leaf (``state.weights.embed (argument "state" of f())``)."""
    by_leaf: dict = {}
    for name, leaf in first_leaf.items():
        by_leaf.setdefault(leaf, {})[name] = new[name]
    for leaf, names in by_leaf.items():
        origin = param.leaf_origins.get((treedef, leaf))
        if origin is None:
            paths = jax.tree_util.tree_flatten_with_path(value)[0]
            root = param.name if param.kind is not None else ""
            origin = f"{root}{jax.tree_util.keystr(paths[leaf][0])} ({param.origin})"
            if len(param.leaf_origins) > 256:
                param.leaf_origins.clear()
            param.leaf_origins[(treedef, leaf)] = origin
        table = table.bind(names, origin)
    return table


def _transactional(fn: Callable, *args) -> Any:
    """Runs one of typeguard's checks; if it fails, the table is left as it was before."""
    before = _TABLE.get()
    try:
        return fn(*args)
    except TypeCheckError:
        _TABLE.set(before)
        raise

