"""The signature checker: the wrapper ``typechecked`` puts on a function whose body annotates no
locals. It reads the signature once, checks shardtypes annotations directly (inline, through the
fast path, for the common call with every argument positional), trees through the annotation
model's fast path, and hands every other annotation to typeguard's own argument checks.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import types
from typing import Any, Callable

import jax
import jax.core
import typeguard
from jax.sharding import AxisType
from typeguard import TypeCheckError, TypeCheckMemo

from ..context import BASE, FORCED, IN_TRACE, TABLE, Table, config, filter_traceback, staged_read, trace_key, tracing
from ..model import in_function, literal_container, model, plan_for, resolve_hints
from .call_tables import EMPTY, NO_TYPE_CHECK, run_unchecked, sizing, with_table
from .direct_checks import check_with_plan
from .fast_path import ARRAY_TYPES, fast_check, fast_tree, learn_layout, tree_node
from .inside_unannotated import check_inside, looks_inside
from .typeguard_frames import check_argument_types_internal, check_return_type_internal

__all__: list[str] = []


def typeguard_config() -> Any:
    """typeguard's configuration as it is now, except that every item of a list or dict of
    arrays is checked (typeguard checks only the first by default, which would let the second
    layer of a list through unchecked)."""
    return dataclasses.replace(
        typeguard.config, collection_check_strategy=typeguard.CollectionCheckStrategy.ALL_ITEMS
    )


class _Param:
    __slots__ = ("name", "kind", "annotation", "plan", "role", "origin", "first", "node", "leaf_origins", "inside")

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
        # An annotation with no shardtypes one in it (Any, optax.OptState): the annotated class
        # instances inside the value are checked against their classes (checking/inside_unannotated.py).
        self.inside = looks_inside(annotation, plan)
        # (bindings, table) of the last call in which this parameter bound first into an empty
        # table: the next such call with the same bindings object reuses the table (both are
        # immutable), which saves building one on every top-level call.
        self.first: tuple = (None, None)


class SignatureChecker:
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
            role = f'argument "{p.name}"'
            literal_container(ann, f"{role} of {fn}()")
            plan = plan_for(ann)
            params.append(_Param(p.name, p.kind, ann, plan, role, f"{role} of {fn}()"))
        simple = all(
            p.kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
            for p in params
        )
        # Published in this order, with `positional` and `params` last: a call in another thread
        # that sees them resolved also sees the return annotation.
        if "return" in hints:
            ann = hints["return"]
            literal_container(ann, f"the return value of {fn}()")
            self.returns = _Param("return", None, ann, plan_for(ann), "the return value",
                                  f"the return value of {fn}()")
        self.by_name = {p.name: p for p in params}
        self.positional = params if simple else None
        self.params = params
        self.scope_vars = None  # resolved: stop holding the defining scope's objects

    def wrap(self) -> Callable:
        """``target`` checked: each call's arguments and return value, in the call's dimension
        table."""
        # Resolve now if the annotations can be (and drop the defining scope); forward
        # references to names defined later are resolved at the first call instead.
        try:
            self._resolve()
        except NameError:
            pass
        if inspect.iscoroutinefunction(self.target):
            return with_table(self.target, self._coroutine_wrapper())
        return self._function_wrapper()

    def _check_one(self, param: _Param, value: Any, table: Table, tried_fast: bool = False) -> Table:
        """Checks one argument or return value; returns the table with its bindings.
        ``tried_fast``: the inline fast path has just had no answer for this value."""
        func_name = self.func_name
        plan = param.plan
        if plan is not None:
            new = None if tried_fast else fast_check(value, plan, table[0])
            if new:
                return table.bind(new, param.origin)
            if new is not None:
                return table
            TABLE.set(table)  # the full check, which also explains a failure
            check_with_plan(value, plan, param.role, func_name, param.origin, tried_fast=True)
            return TABLE.get() or EMPTY
        if param.annotation is None:
            return table
        node = param.node
        if node is not None:
            found = fast_tree(value, node, table[0])
            if found is not None:
                new, first_leaf, treedef = found
                return _bind_leaves(param, treedef, value, table, new, first_leaf) if new else table
        # Any other annotation: typeguard's own check, with typeguard's messages.
        TABLE.set(table)
        globals_ = self.target.__globals__
        if param.kind is None:
            memo = TypeCheckMemo(globals_, {}, config=typeguard_config())
            _transactional(check_return_type_internal, func_name, value, param.annotation, memo)
        else:
            memo = TypeCheckMemo(globals_, {param.name: value}, config=typeguard_config())
            _transactional(check_argument_types_internal, func_name,
                           {param.name: (value, param.annotation)}, memo)
        if param.inside:
            check_inside(param.name if param.kind is not None else None, value, func_name, memo, _transactional)
        if node is not None:
            learn_layout(value, node)  # it passed: the next value of its structure is fast
        return TABLE.get() or EMPTY

    def _check_arguments(self, args: tuple, kwargs: dict, table: Table) -> Table:
        """Checks a call's arguments bound to the signature, each by ``_check_one``."""
        if self.params is None:
            self._resolve()
        bound = self.signature.bind(*args, **kwargs)
        bound.apply_defaults()
        by_name, check_one = self.by_name, self._check_one
        for name, value in bound.arguments.items():
            table = check_one(by_name[name], value, table)
        return table

    def _sizes_of(self, args: tuple, kwargs: dict) -> dict:
        """The sizes a call's arguments bind, for ``dims()`` read in a call made with checks
        off: each argument's own check, run now; one that fails binds nothing."""
        if self.params is None:
            self._resolve()
        positional = self.positional
        if positional is not None and not kwargs and len(args) == len(positional):
            pairs: Any = zip(positional, args)
        else:
            bound = self.signature.bind(*args, **kwargs)
            bound.apply_defaults()
            pairs = [(self.by_name[name], value) for name, value in bound.arguments.items()]
        table, slow = EMPTY, []
        for param, value in pairs:  # concrete arrays first, through the fast path
            new = fast_check(value, param.plan, table[0]) if param.plan is not None else None
            if new:
                table = table.bind(new, param.origin)
            elif new is None:
                slow.append((param, value))
        if slow:
            with sizing():
                for param, value in slow:
                    try:
                        table = self._check_one(param, value, table)
                    except Exception:  # checks are off: a value that does not match is let
                        table = _lenient(param, value, table)  # be; its plain sizes still bind
        return table[0]

    def _coroutine_wrapper(self) -> Callable:
        """The checks of a coroutine function's call, for ``with_table`` to wrap."""
        target, checker = self.target, self
        get_table, set_table, cfg, forced = TABLE.get, TABLE.set, config, FORCED.get
        check_one, check_arguments = self._check_one, self._check_arguments

        async def async_checked(*args, **kwargs):
            if not cfg._checks and not forced():  # (no_type_check: on with_table's wrapper)
                return await target(*args, **kwargs)
            set_table(check_arguments(args, kwargs, (get_table() or EMPTY)))
            result = await target(*args, **kwargs)
            if checker.returns is not None:
                set_table(check_one(checker.returns, result, (get_table() or EMPTY)))
            return result

        return async_checked

    def _function_wrapper(self) -> Callable:
        """The wrapper of a plain function: it starts the call's table (see ``call_tables``) and
        checks the call."""
        target, checker = self.target, self
        check_one, check_arguments, sizes_of = self._check_one, self._check_arguments, self._sizes_of
        get_table, set_table, reset_table = TABLE.get, TABLE.set, TABLE.reset
        cfg, forced = config, FORCED.get
        get_in_trace, set_in_trace, reset_in_trace = IN_TRACE.get, IN_TRACE.set, IN_TRACE.reset
        get_base, array_types = BASE.get, ARRAY_TYPES

        # The wrapper of every call, so its common case is short: all arguments positional,
        # each checked by the fast path, in order (_check_positional; messages name the argument
        # that bound a dim first). Anything else goes through check_one / check_arguments.
        @functools.wraps(target)
        def checked(*args, **kwargs):
            if not cfg._checks and not forced():  # checks off: dims() works sizes out if read
                if NO_TYPE_CHECK in own:
                    return target(*args, **kwargs)
                return run_unchecked(sizes_of, target, args, kwargs)
            if NO_TYPE_CHECK in own:  # (typing.no_type_check on top)
                return target(*args, **kwargs)
            table = start = get_table()
            token = trace_token = key = None
            if table is None:
                table = EMPTY
                token = set_table(EMPTY)
                if not (args and type(args[0]) in array_types) and tracing():
                    trace_token = set_in_trace(True)
            elif get_in_trace():
                staged_read()  # nested in a staged call: a trace JAX may cache reads its table
            elif tracing():
                # The outermost traced call in an eager call tree (see context.tables).
                table = get_base() or EMPTY
                token = set_table(table)
                trace_token = set_in_trace(True)
            if trace_token is not None:
                key = trace_key()  # jitted checked calls inside are traced for this call (context.tables)
                key.__enter__()  # (here: the wrapper's own frame is where staged_read stops)
            try:
                positional = checker.positional
                if positional is not None and not kwargs and len(args) == len(positional):
                    table = _check_positional(positional, args, table, check_one)
                else:
                    table = check_arguments(args, kwargs, table)
                if table is not start:
                    set_table(table)
                result = target(*args, **kwargs)
                ret = checker.returns
                if ret is not None:
                    _check_result(ret, result, check_one)
                return result
            except TypeCheckError as e:
                if token is None:  # nested: a failed call leaves the caller's table as it was
                    set_table(start)
                filter_traceback(e)  # the user's frames only (config.traceback_filtering)
                raise
            finally:
                if key is not None:
                    key.__exit__(None, None, None)
                if token is not None:
                    reset_table(token)
                if trace_token is not None:
                    reset_in_trace(trace_token)

        own = checked.__dict__
        setattr(checked, "sizes_of", sizes_of)  # (for with_table's sizer, see signature_sizer)
        return checked


def _check_positional(positional: list[_Param], args: tuple, table: Table, check_one: Callable) -> Table:
    """Checks a call whose arguments are all positional, each by the fast path in order
    (``check_one`` where it has no answer); returns the table with their bindings."""
    for param, value in zip(positional, args):
        plan = param.plan
        new = fast_check(value, plan, table[0]) if plan is not None else None
        if new:
            if table[0]:
                table = table.bind(new, param.origin)
            else:  # the first to bind into an empty table: reuse the table its last such call made
                first_new, first_table = param.first
                if new is not first_new:
                    first_table = table.bind(new, param.origin)
                    param.first = (new, first_table)
                table = first_table
        elif new is None:
            table = check_one(param, value, table, tried_fast=plan is not None)
    return table


def _check_result(ret: _Param, result: Any, check_one: Callable) -> None:
    """Checks a call's return value in the call's table, by the fast path first; sets the table
    with its bindings."""
    table = TABLE.get() or EMPTY  # (set by the wrapper: a Table, never None)
    plan = ret.plan
    new = fast_check(result, plan, table[0]) if plan is not None else None
    if new:
        TABLE.set(table.bind(new, ret.origin))
    elif new is None:
        TABLE.set(check_one(ret, result, table, tried_fast=plan is not None))


def _lenient(param: _Param, value: Any, table: Table) -> Table:
    """With checks off, what a value that fails its check still binds: the sizes of a plain
    annotation's named dims (``f32[b'batch embed']``) where its rank is right and its shape is the
    global one (outside shard_map); nothing otherwise."""
    plan = param.plan
    shape = getattr(value, "shape", None)
    if plan is None or plan.names is None or not isinstance(shape, tuple) or len(shape) != plan.ndim:
        return table
    if isinstance(value, jax.core.Tracer) and AxisType.Manual in getattr(
            jax.typeof(value).sharding.mesh, "axis_types", ()):
        return table  # a local block: its sizes are not the global ones dims() holds
    new = {name: size for name, size in zip(plan.names, shape)
           if isinstance(name, str) and name not in table[0]}
    return table.bind(new, param.origin) if new else table


def signature_sizer(target: Callable, scope_vars: dict) -> Callable[[tuple, dict], dict]:
    """The sizes a call of ``target`` binds from its signature, for a function checked another way
    (typeguard's instrumentation) when it is called with checks off; built when first asked."""
    made: list = []

    def sizes_of(args: tuple, kwargs: dict) -> dict:
        if not made:
            made.append(getattr(SignatureChecker(target, scope_vars).wrap(), "sizes_of"))
        return made[0](args, kwargs)

    return sizes_of


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
    before = TABLE.get()
    try:
        return fn(*args)
    except TypeCheckError as e:
        TABLE.set(before)
        if type(e) is TypeCheckError:  # typeguard's own message: name the function (args[0])
            raise in_function(e, args[0]) from None
        raise


def looking_inside(target: Callable, instrumented: Callable, scope_vars: dict) -> Callable:
    """``instrumented`` (typeguard's instrumentation of ``target``) preceded by the look inside
    its arguments annotated with no shardtypes annotation (``opt_state: Any``), and followed by
    the look inside such a return value: typeguard's instrumented code leaves ``Any`` out before
    shardtypes sees it. Unchanged if no annotation asks for it, and for generators and coroutines
    (their bodies run later, in tables of their own)."""
    if (inspect.isgeneratorfunction(target) or inspect.isasyncgenfunction(target)
            or inspect.iscoroutinefunction(target)):
        return instrumented
    try:
        hints = resolve_hints(target, "shardtypes.typechecked", scope_vars)
    except NameError:  # forward references: typeguard's own checks resolve them at the call
        return instrumented
    signature = inspect.signature(target)
    names = [p.name for p in signature.parameters.values()
             if p.kind not in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
             and looks_inside(hints.get(p.name), plan_for(hints.get(p.name)))]
    returns = looks_inside(hints.get("return"), plan_for(hints.get("return")))
    if not names and not returns:
        return instrumented
    func_name = target.__qualname__

    @functools.wraps(instrumented)
    def inside(*args, **kwargs):
        memo = TypeCheckMemo(target.__globals__, {}, config=typeguard_config())
        if names:
            arguments = signature.bind(*args, **kwargs).arguments
            for name in names:
                if name in arguments:
                    check_inside(name, arguments[name], func_name, memo, _transactional)
        result = instrumented(*args, **kwargs)
        if returns:
            check_inside(None, result, func_name, memo, _transactional)
        return result

    return inside
