"""The checker: one value against one annotation, in whichever context it is seen.

Contexts, and where the sharding comes from:

* eager ``jax.Array``: ``x.sharding``, compared exactly (after normalising: padded to rank,
  size-1 mesh axes dropped, ``UNCONSTRAINED`` read as unsharded);
* under ``jax.jit``, Explicit axes: ``jax.typeof(x).sharding`` at trace time;
* under ``jax.jit``, Auto axes: XLA decides the sharding, so it is read at compile time with
  ``jax.debug.inspect_array_sharding`` (see ``shardtypes.config.auto_sharding_check``);
* inside ``jax.shard_map``, Manual axes: the value is a local shard, so the global size of a dim is
  its local size times the sizes of the Manual axes it is annotated with;
* ``numpy.ndarray``: host data, never sharded; ``jax.ShapeDtypeStruct``: its ``sharding`` if any.

The dimension table is only read here; new bindings are returned to the caller, which commits
them once the whole value has passed.
"""

from __future__ import annotations

import contextvars
import difflib
import functools
import math
from typing import Any, Callable

import jax
import jax.core
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec

from ._config import config
from ._dims import Table
from ._dtypes import annotation_class, dtype_name, number, type_name
from ._rule_resolution import layout as rules_layout
from ._rules import _ACTIVE as _ACTIVE_RULES, AxisRulesError
from ._shape import ANY, BROADCAST, EXPR, FIXED, NAMED, VARIADIC, ShapeSpec, entry_axes
from ._sizes import evaluate, size_equal
from typeguard import TypeCheckError

__all__ = ["Plan", "check_value", "fast_check", "describe"]

_MISSING = object()
_NOTHING_NEW: dict = {}  # shared: never mutated

# False while typed_shard_map checks its global result: out_specs come from the same annotation,
# so shard_map lays it out as annotated (its arguments are checked at compile time, as elsewhere).
COMPILE_TIME_CHECKS: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "shardtypes.compile_time_checks", default=True
)

# Concrete (non-tracer) jax.Array classes seen so far; lets the fast path skip ABC isinstance.
_ARRAY_TYPES: set[type] = set()
_CACHE_LIMIT = 512

# The dtypes a Python scalar of each type may stand for (weak typing), the default first.
_WEAK = {
    bool: (np.dtype(bool),),
    int: tuple(np.dtype(t) for t in ("int32", "int64", "int16", "int8", "uint32", "uint64", "uint16", "uint8")),
    float: tuple(np.dtype(t) for t in ("float32", "float64", "float16")) + (np.dtype(jnp.bfloat16),),
    complex: (np.dtype("complex64"), np.dtype("complex128")),
}

# A per-dim sharding: one tuple of mesh axis names per array dim.
Layout = tuple[tuple[str, ...], ...]


class Mismatch(Exception):
    """A check failed; ``problem`` says how. Turned into a TypeCheckError with full context."""

    def __init__(self, problem: str):
        super().__init__(problem)
        self.problem = problem


# ---------------------------------------------------------------------------------------------
# Describing values and layouts for messages.


def _n_dims(n: int) -> str:
    return "1 dim" if n == 1 else f"{n} dims"


def _fmt_shape(shape) -> str:
    return "[" + ",".join(str(d) for d in shape) + "]"


def _fmt_layout(layout: Layout) -> str:
    entries = []
    for axes in layout:
        if not axes:
            entries.append("None")
        elif len(axes) == 1:
            entries.append(repr(axes[0]))
        else:
            entries.append("(" + ", ".join(repr(a) for a in axes) + ")")
    return "P(" + ", ".join(entries) + ")"


def describe(value: Any) -> str:
    """A short description of what was found: ``float32[8,16] sharded P('d', None)``."""
    shape = getattr(value, "shape", None)
    dtype = getattr(value, "dtype", None)
    if shape is None or dtype is None:
        return type(value).__name__
    text = f"{dtype_name(dtype)}{_fmt_shape(shape)}"
    if isinstance(value, (np.ndarray, np.generic)):
        return text + " (numpy, on the host)"
    try:
        manual = ()
        if isinstance(value, jax.core.Tracer):
            sharding = jax.typeof(value).sharding
            manual = jax.sharding.get_abstract_mesh().manual_axes
        else:
            sharding = getattr(value, "sharding", None)
    except Exception:  # describing must never hide the real error
        return text
    if manual:  # inside shard_map the shape is this device's block
        text += f", a local block under manual axes {tuple(manual)}"
    sep = "," if manual else ""
    if isinstance(value, jax.core.Tracer):
        unknown = _unknown_at_trace_time(sharding, len(shape))
        if unknown:
            return text + f", {unknown}"
    if isinstance(sharding, NamedSharding):
        return text + f"{sep} sharded {_fmt_layout(_normalise(sharding.spec, len(shape), None))}"
    if sharding is not None:
        return text + f"{sep} with {type(sharding).__name__}"
    return text


def _unknown_at_trace_time(sharding: Any, ndim: int) -> str | None:
    """For a traced value whose layout XLA has not chosen yet (no mesh, or Auto axes), what a
    message can say about it instead of the placeholder ``P(None, ...)`` the type carries."""
    mesh = sharding.mesh if isinstance(sharding, NamedSharding) else None
    if mesh is None or mesh.empty:
        mesh = jax.sharding.get_abstract_mesh()
    when = (
        "where shardtypes checks it" if config.auto_sharding_check == "compile"
        else "not checked: shardtypes.config.auto_sharding_check is 'off'"
    )
    if mesh.empty:
        return f"traced with no mesh, so its sharding is unknown until compiled, {when}"
    sizes = dict(mesh.shape)
    auto = [a for a, t in zip(mesh.axis_names, mesh.axis_types)
            if t == jax.sharding.AxisType.Auto and sizes[a] != 1]
    if not auto:
        return None
    explicit = {a for a, t in zip(mesh.axis_names, mesh.axis_types) if t == jax.sharding.AxisType.Explicit}
    known = ""
    if explicit and isinstance(sharding, NamedSharding):
        layout = tuple(tuple(a for a in axes if a in explicit)
                       for axes in _normalise(sharding.spec, ndim, None))
        known = f"sharded {_fmt_layout(layout)} over Explicit axes, "
    axes = ", ".join(repr(a) for a in auto)
    return f"{known}its layout over Auto axes {axes} unknown until compiled, {when}"


# ---------------------------------------------------------------------------------------------
# Layouts.


def _normalise(spec: PartitionSpec, ndim: int, axis_sizes: dict | None) -> Layout:
    """A PartitionSpec as one tuple of axes per dim, padded to ``ndim``; axes of size 1 dropped."""
    out = []
    for i in range(ndim):
        axes = entry_axes(spec[i]) if i < len(spec) else ()  # UNCONSTRAINED: no axes
        if axis_sizes is not None:
            axes = tuple(a for a in axes if axis_sizes.get(a, 2) != 1)
        out.append(axes)
    return tuple(out)


def _expected_layout(spec: ShapeSpec, ndim: int, mesh_sizes: dict | None = None,
                     shape: tuple | None = None, active: Any = False) -> Layout:
    """The annotation's mesh axes per dim: as written, or through the active axis rules (whose
    errors, such as a logical name with no rule, are mismatches of this value)."""
    try:
        return rules_layout(spec, ndim, mesh_sizes, shape, active=active)
    except AxisRulesError as e:
        raise Mismatch(str(e)) from None


def _drop_size_one(layout: Layout, axis_sizes: dict) -> Layout:
    return tuple(tuple(a for a in axes if axis_sizes.get(a, 2) != 1) for axes in layout)


def _missing_axes(layout: Layout, axis_names) -> list[str]:
    return [a for axes in layout for a in axes if a not in axis_names]


def _missing_axes_problem(missing: list[str], axis_names, where: str) -> str:
    names = ", ".join(repr(a) for a in missing)
    text = (
        f"mesh axis {names} is not in {where}, which has axes {tuple(axis_names)}"
        if len(missing) == 1
        else f"mesh axes {names} are not in {where}, which has axes {tuple(axis_names)}"
    )
    return text + axis_hint(missing, axis_names)


def axis_hint(missing: list[str], axis_names) -> str:
    """What to say after "axis 'x' is not in the mesh": a close axis name, and the rules."""
    text = ""
    close = [m for a in missing for m in difflib.get_close_matches(a, list(axis_names), n=1, cutoff=0.75)]
    if close:
        text += f"; did you mean {' / '.join(repr(c) for c in close)}?"
    if _ACTIVE_RULES.get() is None:
        text += " (if these are logical axis names, activate rules with shardtypes.axis_rules)"
    return text


def _layout_problem(actual: Layout, expected: Layout) -> str:
    return f"sharding is {_fmt_layout(actual)} but the annotation says {_fmt_layout(expected)}"


def _named_sharding_problem(sharding: NamedSharding, spec: ShapeSpec, ndim: int,
                            active: Any = None, shape: tuple | None = None) -> str | None:
    """Compares a concrete NamedSharding with the annotation (through ``active`` axis rules,
    with ``shape`` for their divisibility checks)."""
    try:
        return _named_sharding_problem_cached(sharding, spec, ndim, active,
                                              shape if active is not None else None)
    except TypeError:  # unhashable symbolic sizes
        return _named_sharding_problem_cached.__wrapped__(sharding, spec, ndim, active, shape)


@functools.lru_cache(maxsize=2048)
def _named_sharding_problem_cached(sharding, spec, ndim, active, shape) -> str | None:
    mesh = sharding.mesh
    sizes = dict(mesh.shape)
    try:
        expected = _expected_layout(spec, ndim, sizes, shape, active)
    except Mismatch as m:
        return m.problem
    missing = _missing_axes(expected, mesh.axis_names)
    if missing:
        return _missing_axes_problem(missing, mesh.axis_names, "the array's mesh")
    actual = _normalise(sharding.spec, ndim, sizes)
    expected = _drop_size_one(expected, sizes)
    if actual != expected:
        return _layout_problem(actual, expected)
    return None


def _unnamed_sharding_problem(sharding: Any, spec: ShapeSpec, ndim: int, active: Any = None,
                              shape: tuple | None = None, expected: Layout | None = None) -> str | None:
    """A sharding that names no mesh axes (SingleDeviceSharding, GSPMDSharding, ...)."""
    sizes = _current_axis_sizes()
    if expected is None:
        try:
            expected = _expected_layout(spec, ndim, sizes or None, shape, active)
        except Mismatch as m:
            return m.problem
    if sizes:
        expected = _drop_size_one(expected, sizes)
    wanted = [a for axes in expected for a in axes]
    if not wanted and sharding.is_fully_replicated:
        return None
    kind = type(sharding).__name__
    if wanted:
        return (
            f"the array has a {kind} (not sharded over any named mesh axis) but the annotation "
            f"shards it as {_fmt_layout(expected)}; lay it out with "
            f"jax.device_put(x, NamedSharding(mesh, {_fmt_layout(expected)}))"
        )
    return (
        f"the array has a {kind} that is not fully replicated, so its layout cannot be compared "
        f"with the annotation's {_fmt_layout(expected)}; use a NamedSharding"
    )


def _current_axis_sizes() -> dict:
    mesh = jax.sharding.get_abstract_mesh()
    return {} if mesh.empty else dict(mesh.shape)


# ---------------------------------------------------------------------------------------------
# Sizes.


def _match_sizes(shape: tuple, spec: ShapeSpec, table: Table) -> dict:
    """Checks ``shape`` (global sizes) against ``spec`` with ``table``; returns new bindings."""
    dims = spec.dims
    var = spec.variadic_index
    ndim = len(shape)
    var_sizes: tuple = ()
    if var is None:
        if ndim != len(dims):
            raise Mismatch(f"has {_n_dims(ndim)} {_fmt_shape(shape)} but the annotation has {len(dims)}")
        pairs = [(d, s, i) for i, (d, s) in enumerate(zip(dims, shape))]
    else:
        fixed = len(dims) - 1
        if ndim < fixed:
            raise Mismatch(
                f"has {ndim} dims {_fmt_shape(shape)} but the annotation needs at least {fixed}"
            )
        tail = len(dims) - var - 1
        pairs = [(d, s, i) for i, (d, s) in enumerate(zip(dims[:var], shape[:var]))]
        pairs += [
            (d, s, ndim - tail + i)
            for i, (d, s) in enumerate(zip(dims[var + 1 :], shape[ndim - tail :] if tail else ()))
        ]
        var_sizes = tuple(shape[var : ndim - tail])

    sizes = table.sizes
    new: dict = {}

    def lookup(name):
        got = new.get(name, _MISSING)
        return sizes.get(name, _MISSING) if got is _MISSING else got

    def clash(name, size, bound, where):
        origin = table.origins.get(name, "this value") if name not in new else "this value"
        origin = str(origin)
        raise Mismatch(
            f"dimension {name!r} is {_fmt_size(size)} here ({where}) but was bound to "
            f"{_fmt_size(bound)} by {origin}"
        )

    if var is not None and dims[var].kind == VARIADIC:
        name = dims[var].name
        bound = lookup(name)
        if bound is _MISSING:
            new[name] = var_sizes
        elif not isinstance(bound, tuple):
            raise Mismatch(f"'*{name}' stands for several dims but {name!r} is bound to one size, {bound}")
        elif not _sizes_equal(bound, var_sizes):
            clash(name, var_sizes, bound, f"dims {var}..{var + len(var_sizes) - 1}")

    for dim, size, index in pairs:
        kind = dim.kind
        if kind == NAMED:
            bound = lookup(dim.shape)
            if bound is _MISSING:
                new[dim.shape] = size
            elif isinstance(bound, tuple):
                raise Mismatch(f"{dim.shape!r} is bound to several dims {bound} by '*{dim.shape}'")
            elif not size_equal(bound, size):
                clash(dim.shape, size, bound, f"dim {index}")
        elif kind == FIXED:
            if not size_equal(dim.expr, size):
                raise Mismatch(f"dim {str(dim)!r} is {_fmt_size(size)}, but the annotation fixes it to {dim.expr}")

    for dim, size, _ in pairs:
        if dim.kind == BROADCAST:
            name = dim.name
            bound = lookup(name)
            if isinstance(bound, tuple):
                raise Mismatch(f"{name!r} is bound to several dims {bound} by '*{name}'")
            if size_equal(size, 1):
                continue
            if bound is _MISSING:
                new[name] = size
            elif not size_equal(bound, size):
                raise Mismatch(
                    f"dim {str(dim)!r} is {_fmt_size(size)}, but must be 1 or {name}={_fmt_size(bound)}"
                    f" (bound by {table.origins.get(name, 'this value')})"
                )

    for dim, size, _ in pairs:
        if dim.kind == EXPR and isinstance(dim.expr, tuple):
            unbound = sorted(n for n in dim.names if lookup(n) is _MISSING)
            if unbound:
                raise Mismatch(
                    f"dim {str(dim)!r} uses {', '.join(repr(n) for n in unbound)}, which no "
                    "argument has bound yet; bind it in an earlier dim or with Scope(name=size)"
                )
            for n in sorted(dim.names):
                if isinstance(lookup(n), tuple):
                    raise Mismatch(f"{n!r} is bound to several dims {lookup(n)} by '*{n}'")
            try:
                want = evaluate(dim.expr, lookup)
            except Exception as e:  # e.g. symbolic // symbolic
                raise Mismatch(f"dim {str(dim)!r} cannot be evaluated: {e}") from None
            if not size_equal(want, size):
                values = ", ".join(f"{n}={_fmt_size(lookup(n))}" for n in sorted(dim.names))
                raise Mismatch(f"dim {str(dim)!r} is {_fmt_size(size)}, but {dim.shape} = {_fmt_size(want)} ({values})")
    return new


def _fmt_size(size) -> str:
    if isinstance(size, tuple):
        return _fmt_shape(size)
    return str(size)


def _sizes_equal(a: tuple, b: tuple) -> bool:
    return len(a) == len(b) and all(size_equal(x, y) for x, y in zip(a, b))


# ---------------------------------------------------------------------------------------------
# The check.


class Plan:
    """What one annotation needs at check time, computed once per annotation.

    ``names`` is set for the common shapes made only of names, integers and ``_``: one entry per
    dim (a name, an int, or None). ``seen`` memoises, per (shape, dtype, sharding) that passed,
    the (name, size) pairs left to check against the dimension table.
    """

    __slots__ = ("dtype_cls", "spec", "text", "array_type", "strict_type", "names", "ndim", "seen",
                 "by_id", "agreed")

    def __init__(self, dtype_cls: type[number], spec: ShapeSpec, text: str, array_type: type | None = None):
        self.dtype_cls = dtype_cls
        self.spec = spec
        self.text = text
        # The class a value must be an instance of (f32[jax.Array, b'...']), or None; and the
        # same where a concrete jax.Array might not be one (the fast paths then step aside).
        self.array_type = array_type
        self.strict_type = array_type if array_type not in (None, jax.Array, object) else None
        self.ndim = len(spec.dims)
        simple = all(d.kind in (NAMED, FIXED, ANY) for d in spec.dims)
        self.names = (
            tuple(d.shape if d.kind == NAMED else d.expr for d in spec.dims) if simple else None
        )
        self.seen: dict = {}  # (shape, dtype, sharding, rules) -> pairs
        self.by_id: dict = {}  # id(sharding) -> memo (see leaf_memo)
        # (sizes, memo) of the last table found to hold all of a memo's pairs already.
        self.agreed: tuple = (None, None)


def fast_check(value: Any, plan: Plan, sizes: dict) -> dict | None:
    """The check of a concrete jax.Array against a simple annotation, with no message work.

    Everything but the dimension table is a function of (shape, dtype, sharding), so it is
    memoised per annotation as the list of (name, size) pairs to bind or compare. Returns the new
    bindings, or None when the value needs the full check (which also explains any failure).
    """
    if type(value) not in _ARRAY_TYPES or plan.strict_type is not None:
        return None
    sharding = value.sharding
    memo = plan.by_id.get(id(sharding))
    if (memo is None or memo[0] is not sharding or memo[2] != value.shape
            or memo[1] is not value.dtype or memo[3] is not _ACTIVE_RULES.get()):
        memo = _new_memo(value, plan, sharding)
        if memo is None:
            return None
    if not sizes:  # the first value of a call: its bindings are exactly the (consistent) pairs
        return memo[5]
    agreed = plan.agreed
    if agreed[0] is sizes and agreed[1] is memo:
        return _NOTHING_NEW  # this table already holds every pair (tables never change)
    new: dict = {}
    for name, size in memo[4]:
        bound = sizes.get(name, _MISSING)
        if bound is _MISSING:
            bound = new.get(name, _MISSING)
            if bound is _MISSING:
                new[name] = size
                continue
        if bound != size:
            return None
    if not new:
        plan.agreed = (sizes, memo)
    return new


def leaf_memo(value: Any, plan: Plan, active: Any) -> tuple | None:
    """For a concrete jax.Array that passes ``plan`` apart from the table: its memo
    ``(sharding, dtype, shape, rules, pairs, first)``, where ``pairs`` are the (name, size)
    pairs to bind or compare and ``first`` the same as a dict (never mutated: tables copy on
    bind). None if the annotation is not simple or the value fails (the full check explains)."""
    sharding = value.sharding
    memo = plan.by_id.get(id(sharding))
    if (memo is None or memo[0] is not sharding or memo[2] != value.shape
            or memo[1] is not value.dtype or memo[3] is not active):
        return _new_memo(value, plan, sharding)
    return memo


def _new_memo(value: Any, plan: Plan, sharding: Any) -> tuple | None:
    """The memo of a (shape, dtype, sharding, rules) not met with this sharding object before.
    Kept per id(sharding): arrays laid out alike share their sharding object, so the next
    lookup needs no hash of the sharding, which costs more than the rest of the check."""
    shape, dtype, active = value.shape, value.dtype, _ACTIVE_RULES.get()
    key = (shape, dtype, sharding, active)
    pairs = plan.seen.get(key)
    if pairs is None:
        pairs = _simple_pairs(plan, key)
        if pairs is None:
            return None
    memo = (sharding, dtype, shape, active, pairs, dict(pairs))
    if len(plan.by_id) > _CACHE_LIMIT:
        plan.by_id.clear()
    plan.by_id[id(sharding)] = memo
    return memo


def _simple_pairs(plan: Plan, key: tuple) -> tuple | None:
    names = plan.names
    shape, dtype, sharding, active = key
    if names is None or len(shape) != plan.ndim or not plan.dtype_cls.accepts(dtype):
        return None
    if isinstance(sharding, NamedSharding):
        if _named_sharding_problem(sharding, plan.spec, plan.ndim, active, shape) is not None:
            return None
    elif plan.spec.is_sharded or active is not None or not sharding.is_fully_replicated:
        return None  # compared against the current mesh, so not memoised
    # else: an unsharded annotation and a replicated array (a plain jnp array): always fine.
    pairs = []
    seen: dict = {}
    for name, size in zip(names, shape):
        if name is None:
            continue
        if name.__class__ is int:
            if size != name:
                return None
            continue
        if name in seen:  # a name used twice in one annotation: sizes must agree, keep one pair
            if seen[name] != size:
                return None
            continue
        seen[name] = size
        pairs.append((name, size))
    if len(plan.seen) > _CACHE_LIMIT:
        plan.seen.clear()
    result = plan.seen[key] = tuple(pairs)
    return result


def check_value(
    value: Any,
    dtype_cls: type[number],
    spec: ShapeSpec,
    table: Table,
    context: Callable[[], str],
    array_type: type | None = None,
) -> dict:
    """Checks ``value`` against ``dtype_cls[spec]`` (``dtype_cls[array_type, spec]`` when
    ``array_type`` is given); returns the new bindings.

    Raises ``Mismatch`` naming the problem. ``context()`` names where the value is (for the
    compile-time check, which reports after this function has returned).
    """
    if array_type is not None and not isinstance(value, array_type):
        raise Mismatch(f"the annotation wants a {type_name(array_type)}, not a {_type_of(value)}")
    sharding: Any = None
    dtype: Any
    if isinstance(value, jax.core.Tracer):
        aval = jax.typeof(value)
        _check_dtype(aval.dtype, dtype_cls)
        return _check_traced(value, aval, spec, table, context)
    elif isinstance(value, jax.Array):
        shape, dtype, sharding = value.shape, value.dtype, value.sharding
        kind = "array"
        _ARRAY_TYPES.add(type(value))
    elif isinstance(value, (np.ndarray, np.generic)):
        shape, dtype = value.shape, value.dtype
        kind = "numpy"
    elif isinstance(value, (bool, int, float, complex)):
        # A Python scalar: host data of rank 0. JAX gives it a dtype when it meets it (a typed
        # literal, as custom_vjp's forward pass sees outside jit, carries it); an untyped one is
        # weakly typed and takes any dtype of its kind, as in JAX's type promotion.
        shape = ()
        dtype = getattr(value, "dtype", None)
        if not isinstance(dtype, np.dtype):
            kinds = _WEAK[next(t for t in (bool, int, float, complex) if isinstance(value, t))]
            dtype = next((d for d in kinds if dtype_cls.accepts(d)), kinds[0])
        kind = "numpy"
    elif isinstance(value, jax.ShapeDtypeStruct):
        shape, dtype, sharding = value.shape, value.dtype, value.sharding
        kind = "struct"
    else:
        raise Mismatch(f"found a {_type_of(value)}, which is not an array")

    _check_dtype(dtype, dtype_cls)
    new = _match_sizes(tuple(shape), spec, table)
    ndim = len(shape)
    active = _ACTIVE_RULES.get()
    shape = tuple(shape)
    if kind == "array":
        problem = (
            _named_sharding_problem(sharding, spec, ndim, active, shape)
            if isinstance(sharding, NamedSharding)
            else _unnamed_sharding_problem(sharding, spec, ndim, active, shape)
        )
    elif kind == "numpy":
        problem = None
        expected = _expected_layout(spec, ndim, None, shape, active)
        if any(expected):
            layout = _fmt_layout(expected)
            problem = (
                f"is a numpy array (host data, never sharded) but the annotation shards it as "
                f"{layout}; put it on the mesh with jax.device_put(x, NamedSharding(mesh, {layout}))"
            )
    else:  # ShapeDtypeStruct: a sharding of None means "unspecified" and is not checked.
        if sharding is None:
            problem = None
        elif isinstance(sharding, NamedSharding):
            problem = _named_sharding_problem(sharding, spec, ndim, active, shape)
        else:
            problem = _unnamed_sharding_problem(sharding, spec, ndim, active, shape)
    if problem is not None:
        raise Mismatch(problem)
    return new


def _check_dtype(dtype: Any, dtype_cls: type[number]) -> None:
    if not dtype_cls.accepts(dtype):
        raise Mismatch(f"has dtype {dtype_name(dtype)}, the annotation wants {dtype_cls.description}")


def _check_rank(shape: tuple, spec: ShapeSpec) -> None:
    ndim, n = len(shape), len(spec.dims)
    if spec.variadic_index is None:
        if ndim != n:
            raise Mismatch(f"has {_n_dims(ndim)} {_fmt_shape(shape)} but the annotation has {n}")
    elif ndim < n - 1:
        raise Mismatch(f"has {ndim} dims {_fmt_shape(shape)} but the annotation needs at least {n - 1}")


def _check_traced(value, aval, spec: ShapeSpec, table: Table, context) -> dict:
    shape = tuple(aval.shape)
    _check_rank(shape, spec)  # before anything zips the shape with the annotation's dims
    ndim = len(shape)
    sharding = aval.sharding
    mesh = sharding.mesh if isinstance(sharding, NamedSharding) else None
    if mesh is None or mesh.empty:
        mesh = jax.sharding.get_abstract_mesh()
    AxisType = jax.sharding.AxisType
    active = _ACTIVE_RULES.get()
    if mesh.empty:
        manual: frozenset = frozenset()
        types: dict = {}
        sizes: dict = {}
        expected = _expected_layout(spec, ndim, None, None, active)
    else:
        types = dict(zip(mesh.axis_names, mesh.axis_types))
        sizes = dict(mesh.shape)
        manual = frozenset(a for a, t in types.items() if t == AxisType.Manual)
        # Divisibility through the rules is judged on global sizes, which a local block in a
        # shard_map only gives after scaling: leave it to the boundary checks there.
        expected = _expected_layout(spec, ndim, sizes, None if manual else shape, active)
        missing = _missing_axes(expected, mesh.axis_names)
        if missing:
            raise Mismatch(_missing_axes_problem(missing, mesh.axis_names, "the mesh"))

    if manual:
        # A local shard: scale each dim by the Manual axes it is annotated with.
        shape = tuple(
            size * math.prod(sizes[a] for a in axes if a in manual) if axes else size
            for size, axes in zip(shape, expected)
        )
    new = _match_sizes(shape, spec, table)

    if mesh.empty:
        if config.auto_sharding_check == "compile" and COMPILE_TIME_CHECKS.get():
            _check_at_compile_time(value, spec, ndim, frozenset(), context, expected, sizes)
        return new
    # Explicit axes are exact in the type; compare them now.
    explicit = {a for a, t in types.items() if t == AxisType.Explicit and sizes[a] != 1}
    actual = _normalise(sharding.spec, ndim, sizes) if isinstance(sharding, NamedSharding) else ((),) * ndim
    actual_e = tuple(tuple(a for a in axes if a in explicit) for axes in actual)
    expected_e = tuple(tuple(a for a in axes if a in explicit) for axes in expected)
    if actual_e != expected_e:
        raise Mismatch(
            f"sharding over Explicit axes is {_fmt_layout(actual_e)} but the annotation says "
            f"{_fmt_layout(expected_e)}"
        )
    auto = any(t == AxisType.Auto and sizes[a] != 1 for a, t in types.items())
    if auto and config.auto_sharding_check == "compile" and COMPILE_TIME_CHECKS.get():
        _check_at_compile_time(value, spec, ndim, manual, context, expected, sizes)
    return new


def _check_at_compile_time(value, spec: ShapeSpec, ndim: int, manual: frozenset, context,
                           expected: Layout, sizes: dict) -> None:
    """Registers a check of the sharding XLA chooses; runs during compilation, costs nothing after.
    ``expected`` is resolved now, at trace time, under the axis rules active now; ``sizes`` are
    the mesh's axis sizes now (for a sharding that names no mesh axes)."""
    where = context()

    def report(sharding, shape: tuple) -> None:
        """``shape`` is the inspected array's: under vmap, its leading dims are vmap's."""
        if config.auto_sharding_check == "off":  # read now: the setting may change after tracing
            return
        batch = len(shape) - ndim
        if isinstance(sharding, NamedSharding):
            mesh_sizes = dict(sharding.mesh.shape)
            missing = _missing_axes(expected, sharding.mesh.axis_names)
            want = tuple(tuple(a for a in axes if a not in manual)
                         for axes in _drop_size_one(expected, mesh_sizes))
            found = tuple(sharding.spec) + (None,) * (len(shape) - len(sharding.spec))
            actual = _normalise(PartitionSpec(*found[batch:]), ndim, mesh_sizes)
            problem: str | None
            if missing:
                problem = _missing_axes_problem(missing, sharding.mesh.axis_names, "the array's mesh")
            else:
                problem = None if actual == want else _layout_problem(actual, want)
        else:
            problem = _unnamed_block_problem(sharding, shape, batch, expected, sizes, spec, ndim)
        if problem is not None:
            raise TypeCheckError(
                f"shardtypes (compile-time check): {where}: {problem} (the sharding compiled under "
                "jax.jit on Auto mesh axes; lay the value out as annotated or constrain it with "
                "jax.lax.with_sharding_constraint, or set shardtypes.config.auto_sharding_check = "
                "'off')"
            )

    _inspect(value, report, 0)


def _unnamed_block_problem(sharding: Any, shape: tuple, batch: int, expected: Layout, sizes: dict,
                           spec: ShapeSpec, ndim: int) -> str | None:
    """A sharding that names no mesh axes (GSPMDSharding, when nothing in the program was laid out
    over a mesh): compared through the block each device holds, which the axis sizes fix."""
    if not sizes or sharding.is_fully_replicated:
        return _unnamed_sharding_problem(sharding, spec, ndim, expected=expected)
    want = _drop_size_one(expected, sizes)
    block = tuple(sharding.shard_shape(shape))[batch:]
    wanted = tuple(size // math.prod(sizes[a] for a in axes) for size, axes in zip(shape[batch:], want))
    if block == wanted:
        return None
    return (f"the array's blocks are {_fmt_shape(block)} but the annotation's layout "
            f"{_fmt_layout(want)} gives blocks of {_fmt_shape(wanted)}")


def _inspect(value: Any, report: Callable, batch: int) -> None:
    """``report(sharding, shape)`` with the sharding XLA gives ``value`` (at compile time under
    jit) and the inspected array's shape, whose first ``batch`` dims are vmap's.

    * ``custom_vmap`` tells how many dims vmap adds (its rule sees the batched value with the
      batch dim first); JAX's spec of the batched array drops trailing unsharded dims, so the
      count cannot be read from the spec.
    * ``stop_gradient``: the inspection is no part of any derivative (custom_vmap has none).
    * ``device_put``: outside jit a transformation evaluates the inspection on the value it
      traces, which for a numpy array or Python scalar has no sharding; under jit it lowers to
      nothing, like the other two: the compiled program is the same.
    """

    @jax.custom_batching.custom_vmap
    def inspect(x):
        jax.debug.inspect_array_sharding(
            jax.device_put(x), callback=lambda sharding: report(sharding, tuple(x.shape)))
        return x

    @inspect.def_vmap
    def _batched(axis_size, in_batched, x):
        (batched,) = in_batched
        _inspect(x, report, batch + 1 if batched else batch)
        return x, batched

    inspect(jax.lax.stop_gradient(value))


# ---------------------------------------------------------------------------------------------
# Plans: everything a check needs that depends only on the annotation, made once.


def _type_of(value: Any) -> str:
    """``jax.Array`` (for every concrete or traced array class), ``numpy.ndarray``, ``str``."""
    return "jax.Array" if isinstance(value, jax.Array) else type_name(type(value))


def annotation_text(origin: type, shape: bytes) -> str:
    return f"{origin.__name__}[{shape!r}]"


_PLANS: dict[type, Plan] = {}


def malformed(origin: type, args: tuple) -> TypeCheckError:
    """The error for a dtype class used bare (``x: f32``) or subscripted by hand
    (``types.GenericAlias(f32, (3,))``)."""
    return TypeCheckError(
        f"has a malformed annotation {origin.__name__}{list(args)}; write "
        f"{origin.__name__}[jax.Array, b'batch embed'] or {origin.__name__}[b'batch embed']"
    )


def plan_of(annotation: type[number]) -> Plan:
    """The plan of a subscripted annotation class (made once, then kept)."""
    plan = _PLANS.get(annotation)
    if plan is None:
        spec, shape = annotation.spec, annotation.shape_string
        if spec is None or shape is None:
            raise malformed(annotation, ())
        text = repr(annotation).removeprefix("shardtypes.")
        plan = _PLANS[annotation] = Plan(annotation.dtype_class, spec, text, annotation.array_type)
    return plan


def plan_for(annotation: Any) -> Plan | None:
    """The plan of a shardtypes array annotation, or None for any other annotation."""
    plan = _PLANS.get(annotation) if isinstance(annotation, type) else None
    if plan is not None:
        return plan
    found = annotation_class(annotation)
    return plan_of(found) if found is not None else None
