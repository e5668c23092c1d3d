"""The checker: one value against one annotation, in whichever context it is seen.

Contexts, and where the sharding comes from:

* eager ``jax.Array``: ``x.sharding``, compared exactly (after normalising: padded to rank,
  size-1 mesh axes dropped, ``UNCONSTRAINED`` read as unsharded);
* under ``jax.jit``, Explicit axes: ``jax.typeof(x).sharding`` at trace time;
* under ``jax.jit``, Auto axes: XLA decides the sharding, so it is read at compile time with
  ``jax.debug.inspect_array_sharding`` (see ``shardtypes.config.auto_sharding_check``);
* inside ``jax.shard_map``, Manual axes: the value is a local shard, so the global size of a dim is
  its local size times the sizes of the Manual axes it is annotated with;
* ``numpy.ndarray``: host data, never sharded (against a host-or-device annotation,
  ``f32[jax.Array | np.ndarray, ...]``, its dtype and shape only); ``jax.ShapeDtypeStruct``: its
  ``sharding`` if any.

The dimension table is only read here; new bindings are returned to the caller, which commits
them once the whole value has passed.

Here: the sizes against the table, and the check in each context. A concrete sharding is compared
in ``checking.sharding``, the compile-time check is ``checking.compile_time``'s, messages are made in
``model.describe``, and ``model.plans`` holds what is made once per annotation and the fast path.
"""

from __future__ import annotations

import math
import types
from typing import Any, Callable

import jax
import jax.core
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding

from ..context import ACTIVE as _ACTIVE_RULES, NAMES_USED, Table, config, varying_axes
from ..language import BROADCAST, EXPR, FIXED, NAMED, VARIADIC, ShapeSpec, evaluate, is_unconstrained, size_equal
from ..model import (
    Mismatch,
    accepts_host,
    adopt,
    dtype_name,
    fmt_layout,
    fmt_shape,
    fmt_size,
    mesh_axes,
    missing_axes_problem,
    n_dims,
    normalise,
    number,
    type_name,
    type_of,
)
from .compile_time import COMPILE_TIME_CHECKS, check_at_compile_time
from .fast_path import ARRAY_TYPES, MISSING
from .kernel_layouts import defer_varying, in_op, record_checked, undefer, vma_exempt
from .sharding import expected_layout, missing_axes, named_sharding_problem, unnamed_sharding_problem

__all__ = ["check_value"]


# The dtypes a Python scalar of each type may stand for (weak typing), the default first.
_WEAK = {
    bool: (np.dtype(bool),),
    int: tuple(np.dtype(t) for t in ("int32", "int64", "int16", "int8", "uint32", "uint64", "uint16", "uint8")),
    float: tuple(np.dtype(t) for t in ("float32", "float64", "float16")) + (np.dtype(jnp.bfloat16),),
    complex: (np.dtype("complex64"), np.dtype("complex128")),
}

# ---------------------------------------------------------------------------------------------
# Sizes.


def _match_sizes(shape: tuple, spec: ShapeSpec, table: Table) -> dict:
    """Checks ``shape`` (global sizes) against ``spec`` with ``table``; returns new bindings."""
    dims = spec.dims
    var = spec.variadic_index
    pairs, var_sizes = _paired_dims(shape, spec)
    sizes = table.sizes
    new: dict = {}

    def lookup(name):
        got = new.get(name, MISSING)
        return sizes.get(name, MISSING) if got is MISSING else got

    def clash(name, size, bound, where):
        origin = table.origins.get(name, "this value") if name not in new else "this value"
        origin = str(origin)
        raise Mismatch(
            f"dimension {name!r} is {fmt_size(size)} here ({where}) but was bound to "
            f"{fmt_size(bound)} by {origin}"
        )

    if var is not None and dims[var].kind == VARIADIC:
        name = dims[var].name
        bound = lookup(name)
        if bound is MISSING:
            new[name] = var_sizes
        elif not isinstance(bound, tuple):
            raise Mismatch(f"'*{name}' stands for several dims but {name!r} is bound to one size, {bound}")
        elif not _sizes_equal(bound, var_sizes):
            clash(name, var_sizes, bound, f"dims {var}..{var + len(var_sizes) - 1}")

    for dim, size, index in pairs:
        kind = dim.kind
        if kind == NAMED:
            bound = lookup(dim.shape)
            if bound is MISSING:
                new[dim.shape] = size
            elif isinstance(bound, tuple):
                raise Mismatch(f"{dim.shape!r} is bound to several dims {bound} by '*{dim.shape}'")
            elif not size_equal(bound, size):
                clash(dim.shape, size, bound, f"dim {index}")
        elif kind == FIXED:
            if not size_equal(dim.expr, size):
                raise Mismatch(f"dim {str(dim)!r} is {fmt_size(size)}, but the annotation fixes it to {dim.expr}")

    _match_broadcast_dims(pairs, lookup, new, table)
    _match_expression_dims(pairs, lookup)
    return new


def _paired_dims(shape: tuple, spec: ShapeSpec) -> tuple[list, tuple]:
    """(each dim of ``spec`` but the variadic one, with its size in ``shape`` and its index;
    the sizes the variadic dim stands for), once the rank is right for ``spec``."""
    dims = spec.dims
    var = spec.variadic_index
    ndim = len(shape)
    var_sizes: tuple = ()
    if var is None:
        if ndim != len(dims):
            raise Mismatch(f"has {n_dims(ndim)} {fmt_shape(shape)} but the annotation has {len(dims)}")
        pairs = [(d, s, i) for i, (d, s) in enumerate(zip(dims, shape))]
    else:
        fixed = len(dims) - 1
        if ndim < fixed:
            raise Mismatch(
                f"has {ndim} dims {fmt_shape(shape)} but the annotation needs at least {fixed}"
            )
        tail = len(dims) - var - 1
        pairs = [(d, s, i) for i, (d, s) in enumerate(zip(dims[:var], shape[:var]))]
        pairs += [
            (d, s, ndim - tail + i)
            for i, (d, s) in enumerate(zip(dims[var + 1 :], shape[ndim - tail :] if tail else ()))
        ]
        var_sizes = tuple(shape[var : ndim - tail])
    return pairs, var_sizes


def _match_broadcast_dims(pairs: list, lookup: Callable[[str], Any], new: dict, table: Table) -> None:
    """Checks the broadcast dims (``#name``: 1 or the name's size), binding into ``new`` a name
    one of them gives first."""
    for dim, size, _ in pairs:
        if dim.kind == BROADCAST:
            name = dim.name
            bound = lookup(name)
            if isinstance(bound, tuple):
                raise Mismatch(f"{name!r} is bound to several dims {bound} by '*{name}'")
            if size_equal(size, 1):
                continue
            if bound is MISSING:
                new[name] = size
            elif not size_equal(bound, size):
                raise Mismatch(
                    f"dim {str(dim)!r} is {fmt_size(size)}, but must be 1 or {name}={fmt_size(bound)}"
                    f" (bound by {table.origins.get(name, 'this value')})"
                )


def _match_expression_dims(pairs: list, lookup: Callable[[str], Any]) -> None:
    """Checks the dims given by a size expression (``seq+1``) against the sizes their names are
    bound to, here or before."""
    for dim, size, _ in pairs:
        if dim.kind == EXPR and isinstance(dim.expr, tuple):
            unbound = sorted(n for n in dim.names if lookup(n) is MISSING)
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
                values = ", ".join(f"{n}={fmt_size(lookup(n))}" for n in sorted(dim.names))
                raise Mismatch(f"dim {str(dim)!r} is {fmt_size(size)}, but {dim.shape} = {fmt_size(want)} ({values})")


def _sizes_equal(a: tuple, b: tuple) -> bool:
    return len(a) == len(b) and all(size_equal(x, y) for x, y in zip(a, b))


# ---------------------------------------------------------------------------------------------
# The check.


def check_value(
    value: Any,
    dtype_cls: type[number],
    spec: ShapeSpec,
    table: Table,
    context: Callable[[], str],
    array_type: type | types.UnionType | None = None,
) -> dict:
    """Checks ``value`` against ``dtype_cls[spec]`` (``dtype_cls[array_type, spec]`` when
    ``array_type`` is given); returns the new bindings.

    Raises ``Mismatch`` naming the problem. ``context()`` names where the value is (for the
    compile-time check, which reports after this function has returned).
    """
    used = NAMES_USED.get()
    if used is not None:  # (verify: which names the checks of a step use)
        for dim in spec.dims:
            used.update(dim.names)
    if array_type is not None and not isinstance(value, array_type):
        raise Mismatch(f"the annotation wants a {type_name(array_type)}, not a {type_of(value)}")
    sharding: Any = None
    dtype: Any
    if isinstance(value, jax.core.Tracer):
        aval = jax.typeof(value)
        _check_dtype(aval.dtype, dtype_cls)
        return _check_traced(value, aval, spec, table, context)
    elif isinstance(value, jax.Array):
        shape, dtype, sharding = value.shape, value.dtype, value.sharding
        kind = "array"
        ARRAY_TYPES.add(type(value))
    elif isinstance(value, (np.ndarray, np.generic)):
        shape, dtype = value.shape, value.dtype
        kind = "numpy"
    elif isinstance(value, (bool, int, float, complex)):
        shape, dtype = (), _scalar_dtype(value, dtype_cls)  # host data of rank 0
        kind = "numpy"
    elif isinstance(value, jax.ShapeDtypeStruct):
        shape, dtype, sharding = value.shape, value.dtype, value.sharding
        kind = "struct"
        negative = next((i for i, d in enumerate(shape) if isinstance(d, int) and d < 0), None)
        if negative is not None:  # JAX builds such a struct; no array has its shape
            raise Mismatch(f"is a ShapeDtypeStruct of shape {tuple(shape)}, whose dim {negative} is "
                           f"negative ({shape[negative]}): no array has that shape")
    else:
        raise Mismatch(f"found a {type_of(value)}, which is not an array")

    _check_dtype(dtype, dtype_cls)
    new = _match_sizes(tuple(shape), spec, table)
    problem = _layout_problem(kind, sharding, spec, tuple(shape), array_type)
    if problem is not None:
        raise Mismatch(problem)
    return new


def _scalar_dtype(value: bool | int | float | complex, dtype_cls: type[number]) -> Any:
    """The dtype a Python scalar is checked with: its own where it carries one, else the first
    dtype of its kind that ``dtype_cls`` accepts (its kind's default if none)."""
    # JAX gives a scalar a dtype when it meets it (a typed literal, as custom_vjp's forward pass
    # sees outside jit, carries it); an untyped one is weakly typed and takes any dtype of its
    # kind, as in JAX's type promotion.
    dtype = getattr(value, "dtype", None)
    if not isinstance(dtype, np.dtype):
        kinds = _WEAK[next(t for t in (bool, int, float, complex) if isinstance(value, t))]
        dtype = next((d for d in kinds if dtype_cls.accepts(d)), kinds[0])
    return dtype


def _layout_problem(kind: str, sharding: Any, spec: ShapeSpec, shape: tuple,
                    array_type: type | types.UnionType | None) -> str | None:
    """What is wrong with the layout of a concrete value (a ``kind`` of ``check_value``: an
    ``"array"``, ``"numpy"`` host data, a ``"struct"``) that has ``sharding``; None if nothing."""
    ndim = len(shape)
    active = _ACTIVE_RULES.get()
    if kind == "array":
        return (
            named_sharding_problem(sharding, spec, ndim, active, shape)
            if isinstance(sharding, NamedSharding)
            else unnamed_sharding_problem(sharding, spec, ndim, active, shape)
        )
    if kind == "numpy":
        # Host-or-device (f32[jax.Array | np.ndarray, ...]): host data is checked for dtype and
        # shape; its layout is where shard will put it, so it is not a sharding it has now.
        expected = () if accepts_host(array_type) else expected_layout(spec, ndim, None, shape, active)
        if any(expected):
            layout = fmt_layout(expected)
            return (
                f"is a numpy array (host data, never sharded) but the annotation shards it as "
                f"{layout}; put it on the mesh with jax.device_put(x, NamedSharding(mesh, {layout}))"
            )
        return None
    # ShapeDtypeStruct: a sharding of None means "unspecified" and is not checked.
    if sharding is None:
        return None
    if isinstance(sharding, NamedSharding):
        return named_sharding_problem(sharding, spec, ndim, active, shape)
    return unnamed_sharding_problem(sharding, spec, ndim, active, shape)


def _check_dtype(dtype: Any, dtype_cls: type[number]) -> None:
    if not dtype_cls.accepts(dtype):
        raise Mismatch(f"has dtype {dtype_name(dtype)}, the annotation wants {dtype_cls.description}")


def _check_rank(shape: tuple, spec: ShapeSpec) -> None:
    ndim, n = len(shape), len(spec.dims)
    if spec.variadic_index is None:
        if ndim != n:
            raise Mismatch(f"has {n_dims(ndim)} {fmt_shape(shape)} but the annotation has {n}")
    elif ndim < n - 1:
        raise Mismatch(f"has {ndim} dims {fmt_shape(shape)} but the annotation needs at least {n - 1}")


def _dim_names(spec: ShapeSpec, ndim: int) -> tuple | None:
    """Per dim, the names the annotation's dim reads or binds (none for a fixed or anonymous
    size); None where a variadic dim stands for several."""
    if spec.variadic_index is not None or len(spec.dims) != ndim:
        return None
    return tuple(d.names for d in spec.dims)


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
        expected = expected_layout(spec, ndim, None, None, active)
    else:
        types = dict(zip(mesh.axis_names, mesh.axis_types))
        sizes = dict(mesh.shape)
        manual = frozenset(a for a, t in types.items() if t == AxisType.Manual)
        # Divisibility through the rules is judged on global sizes, which a local block in a
        # shard_map only gives after scaling: leave it to the boundary checks there.
        expected = expected_layout(spec, ndim, sizes, None if manual else shape, active)
        missing = missing_axes(expected, mesh.axis_names)
        if missing:
            raise Mismatch(missing_axes_problem(missing, mesh.axis_names, "the mesh"))

    if manual and any(is_unconstrained(axes) for axes in expected):
        dims = ", ".join(str(i) for i, axes in enumerate(expected) if is_unconstrained(axes))
        raise Mismatch(
            f"it is a local block inside shard_map, where an UNCONSTRAINED ('/?') dim has no meaning "
            f"(dim {dims}): the block's size does not say the dim's global size, and the kernel, not "
            "XLA, decides the split; write the mesh axes the block is split over (or none)"
        )
    # Inside a shard_map: a value whose layout the kernel knows is compared first (_kernel_layouts).
    unknown = manual and not in_op() and record_checked(value, expected, context, _dim_names(spec, ndim)) is None
    if manual:
        # A local shard: scale each dim by the Manual axes it is annotated with.
        shape = tuple(
            size * math.prod(sizes[a] for a in axes if a in manual) if axes else size
            for size, axes in zip(shape, expected)
        )
    try:
        new = _match_sizes(shape, spec, table)
        if unknown:
            try:
                _varying_axes_named(aval, expected)
            except Mismatch as e:  # the pass says it better where it knows the value
                if not defer_varying(value, str(e)):
                    raise
    except Mismatch:
        if unknown:
            undefer(value)  # this check failed already: the jaxpr pass need not say so again
        raise

    if mesh.empty:
        if config.auto_sharding_check == "compile" and COMPILE_TIME_CHECKS.get():
            check_at_compile_time(value, spec, ndim, frozenset(), context, expected, sizes)
        return new
    # Explicit axes are exact in the type; compare them now.
    explicit = {a for a, t in types.items() if t == AxisType.Explicit and sizes[a] != 1}
    actual = normalise(sharding.spec, ndim, sizes) if isinstance(sharding, NamedSharding) else ((),) * ndim
    actual_e = tuple(tuple(a for a in axes if a in explicit) for axes in actual)
    expected_e = tuple(axes if is_unconstrained(axes) else tuple(a for a in axes if a in explicit)
                       for axes in expected)
    if actual_e != adopt(actual_e, expected_e):
        raise Mismatch(
            f"sharding over Explicit axes is {fmt_layout(actual_e)} but the annotation says "
            f"{fmt_layout(expected_e)}"
        )
    auto = any(t == AxisType.Auto and sizes[a] != 1 for a, t in types.items())
    # Inside a partially manual shard_map (axis_names), JAX's inspect_array_sharding misreads the
    # sharding over the automatic axes (the wrong axis name on a 2x2 mesh; an AssertionError in
    # JAX on others; JAX 0.9.2 and 0.10.2): no compile-time check there. The kernel's arguments
    # are checked outside it, on the global arrays.
    if auto and not manual and config.auto_sharding_check == "compile" and COMPILE_TIME_CHECKS.get():
        check_at_compile_time(value, spec, ndim, manual, context, expected, sizes)
    return new



def _varying_axes_named(aval, expected) -> None:
    """Inside a shard_map body, a value whose layout the kernel does not know must vary over no
    manual axis its annotation does not name (``jax.typeof(x)``'s varying axes, tracked by JAX
    under check_vma): one that does is split, or a partial sum, over that axis, not replicated
    over it as annotated. Inside a ``typed_shard_map`` kernel, axes it gathered with
    ``ops.all_gather`` are left out: JAX types a gathered value as varying over them although it
    is the same on every device."""
    exempt = vma_exempt()
    if exempt is None:  # a kernel traced with tracking off
        return
    varying = varying_axes(aval)
    if not varying:
        return
    named = {a for axes in expected for a in axes}
    extra = sorted(varying - named - exempt)
    if extra:
        axes = ", ".join(repr(a) for a in extra)
        raise Mismatch(
            f"it varies over manual {mesh_axes(extra)} "
            f"(jax.typeof gives {aval}), which the annotation does not name: the block is split "
            f"(or is a partial sum) over {axes}, not replicated over it as {fmt_layout(expected)} "
            "says. (A value that is the same on every device but typed varying, as "
            "jax.lax.all_gather's result is, passes once gathered with shardtypes.ops.all_gather "
            "in a typed_shard_map kernel or with jax.lax.all_gather(..., to='invarying') on JAX 0.10+)"
        )
