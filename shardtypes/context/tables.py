"""Dimension tables: which size each dimension name is bound to, and who bound it.

A table is immutable; binding makes a new one and sets it in a ContextVar. That gives:

* one table per call of a checked function, shared by nested checked calls (they run in the same
  context and see each other's bindings, the seed's "one name, one size across the call tree");
* ``Scope()`` / ``@scope`` start a fresh table and restore the old one on exit;
* threads and asyncio tasks never see each other's bindings (each has its own context, and since a
  table is never mutated in place, a task that inherited a table cannot change its parent's);
* a failed check commits nothing (bindings are committed only once a whole value has passed).

jit's cache must never change a verdict, so what a traced check compares with is part of jit's
cache key, and what it binds never outlives the trace:

* ``Scope(batch=8)`` enters a ``jax.make_user_context`` keyed on its bindings: a jitted function
  traced outside it (or under other bindings) is traced again inside it;
* the outermost traced checked call inside an eager call tree (``jax.jit(g)`` called from the
  body of an eager checked ``f``) starts from the innermost ``Scope``'s table, not from the eager
  call's bindings (which jit's key does not see), and its own bindings end with it (a cached
  trace would not make them again). Checked calls nested in a trace share its table as usual;
* inside an outermost checked call that JAX stages out, jit's key holds a number shared by all
  such calls until a trace JAX may cache (a jitted, scanned or checkpointed function inside the
  call) reads the table; then the number is stale and the next call gets a new one. So a jitted
  checked function is traced again for each call (its checks see that call's table, its bindings
  reach it), never reused from a trace made inside another call, while jitted functions that read
  no table (jax.numpy's) keep one trace across calls.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import inspect
import itertools
import operator
import re
import sys
import threading
import types
from collections.abc import Mapping
from typing import Any, Callable, TypeVar, cast

import jax
import jax.core
import numpy as np

from ..language import is_size
from .compat import JitKey
from .settings import checks_on

__all__ = ["Scope", "scope", "dims", "Table"]

F = TypeVar("F", bound=Callable[..., Any])


class Table(tuple):
    """An immutable dimension table: ``sizes`` maps names to sizes (an int, a symbolic dim, or a
    tuple for ``*name``), ``origins`` maps names to who bound them (a str, or an object whose
    ``str()`` says it). A tuple underneath, because one is made on every top-level call."""

    __slots__ = ()

    def __new__(cls, sizes: dict | None = None, origins: dict | None = None):
        return tuple.__new__(cls, (sizes if sizes is not None else {}, origins if origins is not None else {}))

    sizes = property(operator.itemgetter(0))
    origins = property(operator.itemgetter(1))

    def bind(self, new_sizes: dict, origin: object) -> "Table":
        """A new table with ``new_sizes`` added, all bound by ``origin``."""
        sizes, origins = self
        if sizes:
            origins = {**origins, **dict.fromkeys(new_sizes, origin)}
            sizes = {**sizes, **new_sizes}
        else:
            sizes = new_sizes
            origins = dict.fromkeys(new_sizes, origin)
        return tuple.__new__(Table, (sizes, origins))

    def __repr__(self) -> str:
        return f"Table({self[0]!r})"


_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")

# The table of the current call tree, or None outside any checked call and any Scope.
TABLE: contextvars.ContextVar[Table | None] = contextvars.ContextVar("shardtypes.table", default=None)

# The table the innermost Scope started with (what jit's cache key covers), or None.
BASE: contextvars.ContextVar[Table | None] = contextvars.ContextVar("shardtypes.scope_base", default=None)

# True inside the outermost traced checked call of a call tree (nested ones share its table).
IN_TRACE: contextvars.ContextVar[bool] = contextvars.ContextVar("shardtypes.in_trace", default=False)

# What jit's cache key holds inside an outermost checked call that JAX stages out (jit, scan,
# cond, checkpoint, eval_shape): a number, the same for every such call (so jitted functions that
# read no table, jax.numpy's included, keep one trace) until a trace that may be cached reads the
# table there: a checked call, ``check``, ``dims()`` or a kernel op reached through JAX's own
# frames (a jitted, scanned or rematerialised function inside the call). From then on that number
# is stale: the next outermost call gets a new one, so a jitted checked function it calls is
# traced again for it (its checks see that call's table, its bindings reach it), never taken from
# a trace made inside another call (see ``trace_key`` and ``staged_read``). Numbers are per
# thread, so a trace in one thread never marks another's number stale under it.
_JIT_TRACE = JitKey(default=None)
_TRACES = itertools.count()
_ZERO = np.float32(0)
_NO_KEY = contextlib.nullcontext()
_EPOCH = threading.local()  # .number: this thread's current number; .stale: whether it is stale

# The frame of the wrapper of the outermost staged checked call running here (where a walk up
# from a read of the table stops), or None outside one.
_OUTER_FRAME: contextvars.ContextVar[types.FrameType | None] = contextvars.ContextVar(
    "shardtypes.outer_frame", default=None)


class _StagedCall:
    """The context an outermost staged checked call runs its body in: jit's key holds the thread's
    current number, and the call's wrapper frame is where ``staged_read`` stops."""

    __slots__ = ("_number", "_frame", "_key", "_token")

    def __init__(self, number: int, frame: types.FrameType | None) -> None:
        self._number = number
        self._frame = frame

    def __enter__(self) -> None:
        self._key = _JIT_TRACE(self._number)
        self._key.__enter__()
        self._token = _OUTER_FRAME.set(self._frame)

    def __exit__(self, *exc: Any) -> None:
        _OUTER_FRAME.reset(self._token)
        self._frame = None  # (no reference cycle through the frame)
        self._key.__exit__(*exc)


def trace_key() -> contextlib.AbstractContextManager[Any]:
    """The context an outermost traced checked call runs its body in, where the call is being
    staged out: jit's key holds the thread's current number (a new one once the last is stale).
    Under an eager transformation (``jax.grad(f)(x)`` without jit) none: the body runs on every
    call, and a new key would make every jitted function inside it trace and compile again."""
    if not isinstance(jax.device_put(_ZERO), jax.core.Tracer):  # a constant is a tracer only when staged
        return _NO_KEY
    state = _EPOCH.__dict__
    number = state.get("number")
    if number is None or state["stale"]:
        number = state["number"] = next(_TRACES)
        state["stale"] = False
    return _StagedCall(number, sys._getframe(1))


def staged_read() -> None:
    """Called where the table is read inside an outermost staged checked call: if JAX's own frames
    stand between here and that call's wrapper (a jitted, scanned, checkpointed or vmapped
    function inside it, whose trace JAX may cache), the current number is stale, so no later
    call reuses this trace. A plain nested call (no JAX frame between) leaves it as it is."""
    state = _EPOCH.__dict__
    if state.get("stale", True):
        return
    outer = _OUTER_FRAME.get()
    if outer is None:
        return
    frame: types.FrameType | None = sys._getframe(2)
    while frame is not None and frame is not outer:
        name = frame.f_globals.get("__name__", "")
        if name.startswith("jax.") or name == "jax":
            break
        frame = frame.f_back
    if frame is not outer:  # a JAX frame between, or the wrapper not found (another thread's)
        state["stale"] = True

# The Scopes open in this context, innermost last, each with what its exit restores:
# (scope, table token, base token, jit key context). One variable for all Scopes, so a Scope
# leaves nothing behind in the context once it exits; an exit out of order is refused.
_OPEN: contextvars.ContextVar[tuple] = contextvars.ContextVar("shardtypes.open_scopes", default=())

# The bindings of the innermost Scope, as part of jit's cache key.
_JIT_SCOPE = JitKey(default=None)


def tracing() -> bool:
    """Whether JAX is tracing (jit, grad, vmap, ...) here. ``jax.sharding.get_mesh`` is the
    public API that tells: it answers only outside any trace."""
    try:
        jax.sharding.get_mesh()
    except ValueError:
        return True
    return False


class Scope:
    """Context manager that starts a fresh dimension table, optionally with sizes pre-bound.

    >>> with Scope(batch=8):
    ...     dims()['batch']
    8
    """

    def __init__(self, **bindings: Any):
        for name, size in bindings.items():
            if not _NAME.match(name) or name == "_":
                raise ValueError(
                    f"Scope({name!r}=...): a dimension name is an identifier other than '_', "
                    "as in Scope(batch=8)"
                )
            sizes = size if isinstance(size, tuple) else (size,)
            if not all(is_size(s) for s in sizes):
                raise TypeError(
                    f"Scope({name}=...) must be an int size (or a tuple of them for a '*{name}' "
                    f"dim), got {size!r}"
                )
            negative = [s for s in sizes if isinstance(_as_size(s), int) and _as_size(s) < 0]
            if negative:
                raise ValueError(f"Scope({name}=...): a size cannot be negative, got {size!r}")
        self._bindings = {
            n: tuple(_as_size(s) for s in v) if isinstance(v, tuple) else _as_size(v)
            for n, v in bindings.items()
        }
        self._origin: str | None = None  # who bound these, for messages (default: Scope(n=v))

    def __enter__(self) -> "Scope":
        table = Table(dict(self._bindings), {
            n: self._origin or f"Scope({n}={v!r})" for n, v in self._bindings.items()
        })
        key = _JIT_SCOPE(tuple(sorted(self._bindings.items(), key=lambda item: item[0])))
        key.__enter__()
        # Kept per context: one Scope object may be entered by several threads or asyncio tasks
        # at once, each in its own context.
        _OPEN.set((*_OPEN.get(), (self, TABLE.set(table), BASE.set(table), key, UNCHECKED.set(None))))
        return self

    def __exit__(self, *exc_info: object) -> None:
        open_scopes = _OPEN.get()
        if open_scopes and open_scopes[-1][0] is self:
            _OPEN.set(open_scopes[:-1])
            _close(open_scopes[-1], exc_info)
            return
        # Out of order (two Scopes, or two generators that each hold one across a yield): the
        # Scopes opened since this one are closed with it, so the context is as it was before
        # any of them, never half-unwound with an inner Scope's sizes left in dims().
        position = next((i for i in range(len(open_scopes) - 1, -1, -1) if open_scopes[i][0] is self), None)
        if position is None:
            raise RuntimeError(
                "shardtypes.Scope exited out of order: this Scope is not open here (it was never "
                "entered in this context, or was closed when an outer Scope exited before it); "
                "exit the innermost Scope first (use `with`)"
            )
        _OPEN.set(open_scopes[:position])
        for entry in reversed(open_scopes[position:]):
            _close(entry, (None, None, None))
        inner = len(open_scopes) - position - 1
        raise RuntimeError(
            f"shardtypes.Scope exited out of order: {inner} Scope(s) entered after it were still "
            "open; they are closed too, and the dimension table is as it was before this Scope. "
            "Exit the innermost Scope first (use `with`)"
        )


def _close(entry: tuple, exc_info: tuple) -> None:
    _, table, base, key, unchecked = entry
    UNCHECKED.reset(unchecked)
    BASE.reset(base)
    TABLE.reset(table)
    key.__exit__(*exc_info)


def _as_size(size: Any) -> Any:
    try:
        return operator.index(size)
    except TypeError:
        return size


def scope(f: F) -> F:
    """Decorator: each call of ``f`` runs with a fresh dimension table (see ``Scope``).

    Use it where a callee reuses a name (``batch``) to mean a different size than its caller.
    """
    if not callable(f):
        raise TypeError(f"scope expects a function to decorate, got {f!r}; for a block, write `with Scope():`")
    if inspect.isgeneratorfunction(f):

        @functools.wraps(f)
        def generator_wrapper(*args, **kwargs):
            with Scope():  # around the body's run, not just the call that makes the generator
                return (yield from f(*args, **kwargs))

        return cast(F, generator_wrapper)  # the wrapper takes and gives what f does

    if inspect.isasyncgenfunction(f):

        @functools.wraps(f)
        async def async_generator_wrapper(*args, **kwargs):
            with Scope():
                async for item in f(*args, **kwargs):
                    yield item

        return cast(F, async_generator_wrapper)

    if inspect.iscoroutinefunction(f):

        @functools.wraps(f)
        async def async_wrapper(*args, **kwargs):
            with Scope():
                return await f(*args, **kwargs)

        setattr(async_wrapper, "__shardtypes_scope__", True)
        return cast(F, async_wrapper)

    @functools.wraps(f)
    def wrapper(*args, **kwargs):
        with Scope():
            return f(*args, **kwargs)

    # Lets typechecked(scope(f)) and typed_shard_map(scope(f)) check inside the fresh table.
    setattr(wrapper, "__shardtypes_scope__", True)
    return cast(F, wrapper)


def dims() -> Mapping[str, Any]:
    """A read-only view of the current bindings (global sizes), e.g. ``dims()['batch']``.

    Empty outside a checked call or ``Scope``. With checks off (``config.checks = False``,
    ``SHARDTYPES_DISABLE=1``) it holds what the arguments of the checked calls it is read in give
    (worked out when read; nothing is compared), and a name no argument or Scope binds is a
    KeyError that says the checks are off.
    """
    table = TABLE.get()
    if table is not None:
        staged_read()
    sizes = table.sizes if table is not None else {}
    call = UNCHECKED.get()
    if call is not None:
        sizes = {**sizes, **call.sizes()}
    if not checks_on():
        return _UncheckedDims(sizes)
    used = NAMES_USED.get()
    if used is not None:
        return _RecordedDims(sizes, used)
    return types.MappingProxyType(sizes)


# The dimension names the checks made here compare or bind, and those read through dims(), while
# ``verify`` traces a step (a dims= name none of them uses is a typo); None elsewhere.
NAMES_USED: contextvars.ContextVar[set[str] | None] = contextvars.ContextVar("shardtypes.names_used", default=None)


class _RecordedDims(Mapping):
    """``dims()`` while names are recorded: each name read counts as used."""

    __slots__ = ("_sizes", "_used")

    def __init__(self, sizes: Mapping[str, Any], used: set[str]):
        self._sizes = sizes
        self._used = used

    def __getitem__(self, name: str) -> Any:
        self._used.add(name)
        return self._sizes[name]

    def __iter__(self):
        self._used.update(self._sizes)  # (a body that reads them all uses them all)
        return iter(self._sizes)

    def __len__(self) -> int:
        return len(self._sizes)

    def __repr__(self) -> str:
        return f"dims({dict(self._sizes)!r})"


# ---------------------------------------------------------------------------------------------
# Sizes with checks off. Nothing is checked, so nothing binds sizes as a call runs; a checked
# call records what it was called with instead (``UncheckedCall``), and ``dims()`` works the
# sizes out from the arguments when it is read, so code that reads ``dims()`` runs the same with
# the switch set. A call that never reads ``dims()`` pays for one context variable set and reset.

class UncheckedCall:
    """One call of a checked function made with checks off: ``sizer(args, kwargs)`` gives the
    sizes its arguments bind (the checker's own binding, run when first asked); ``outer`` is the
    call it is nested in, whose sizes it sees (its own win where they differ: with checks off
    nothing is compared)."""

    __slots__ = ("sizer", "args", "kwargs", "outer", "found", "was_traced", "extra")

    def __init__(self, sizer: Callable[[tuple, dict], dict], args: tuple, kwargs: dict,
                 outer: "UncheckedCall | None"):
        self.sizer = sizer
        self.args = args
        self.kwargs = kwargs
        self.outer = outer
        self.found: dict | None = None
        self.was_traced = False
        self.extra: dict = {}  # what typed ops called in its body bound (shardtypes.ops)

    def sizes(self) -> dict:
        if self.found is None:
            traced = _holds_tracer(self.args, self.kwargs)
            outer = self.outer
            # The outermost traced call in an eager call tree does not see the eager calls'
            # sizes (jit's cache does not key on them), as with checks on.
            base = outer.sizes() if outer is not None and (not traced or outer.traced()) else {}
            try:
                own = self.sizer(self.args, self.kwargs)
            except Exception:  # never break the user's program over a size
                own = {}
            self.found = {**base, **own}
            self.was_traced = traced
            self.args, self.kwargs = (), {}  # the arrays are no longer needed here
        return {**self.found, **self.extra} if self.extra else self.found

    def add(self, sizes: dict) -> None:
        """Sizes a typed op in the call's body bound (its operands and result, as with checks on)."""
        if sizes:
            self.extra = {**self.extra, **sizes}

    def traced(self) -> bool:
        return _holds_tracer(self.args, self.kwargs) if self.found is None else self.was_traced


def _holds_tracer(args: tuple, kwargs: dict) -> bool:
    return any(isinstance(leaf, jax.core.Tracer) for leaf in jax.tree_util.tree_leaves((args, kwargs)))


# The innermost checked call made with checks off in this context, or None (inside a Scope: None
# until a call is made in it).
UNCHECKED: contextvars.ContextVar[UncheckedCall | None] = contextvars.ContextVar(
    "shardtypes.unchecked_call", default=None)


class _UncheckedDims(Mapping):
    """``dims()`` with checks off: a read-only mapping whose missing name says the checks are off."""

    __slots__ = ("_sizes",)

    def __init__(self, sizes: dict):
        self._sizes = sizes

    def __getitem__(self, name: str) -> Any:
        try:
            return self._sizes[name]
        except KeyError:
            raise KeyError(
                f"dims()[{name!r}]: no size is bound to {name!r} here, and shardtypes' checks are "
                "off (shardtypes.config.checks = False, or SHARDTYPES_DISABLE=1 at import): sizes then "
                "come only from Scope(...) and from the arguments of the checked calls dims() is read "
                f"in, as their annotations name them; bound here: {sorted(self._sizes)}"
            ) from None

    def __iter__(self):
        return iter(self._sizes)

    def __len__(self) -> int:
        return len(self._sizes)

    def __repr__(self) -> str:
        return f"dims({self._sizes!r})"


# ---------------------------------------------------------------------------------------------
# Tables for plain ``typeguard.typechecked`` functions and ``typeguard.check_type`` outside any
# shardtypes call or Scope. There is no shardtypes wrapper to open a table per call, so the table
# lives in the locals dict of the checked call's frame, which typeguard hands us as ``memo.locals``:
# the arguments, annotated locals and return value of one call share it, and it dies with the frame
# (holding arrays in a side table would keep them alive). At module level ``memo.locals`` is the
# module's globals; there every check gets a fresh table, so nothing persists between checks.

_MEMO_KEY = "__shardtypes_dimension_table__"


def memo_table(memo: Any) -> Table:
    local_vars = memo.locals
    if isinstance(local_vars, dict) and local_vars is not memo.globals:
        table = local_vars.get(_MEMO_KEY)
        if isinstance(table, Table):
            return table
    return Table()


def commit_memo_table(memo: Any, table: Table) -> None:
    local_vars = memo.locals
    if isinstance(local_vars, dict) and local_vars is not memo.globals:
        local_vars[_MEMO_KEY] = table
