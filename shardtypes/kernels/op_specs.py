"""The machinery behind ``shardtypes.ops``: spec strings, operand checks, mesh axes, the lookup.

``ops`` holds the public collectives; this module holds what they share: parsing their spec
strings (``'B/d M -> B M'``, ``'batch len [V/t], batch len -> batch len'``), checking operands
and results against the dimension table, validating the mesh axes they use (inside a
``shard_map``, manual there), and the local table lookup of ``index_unreduced``.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
import sys
import types
from typing import Any, Callable, TypeVar, cast

import jax
import jax.numpy as jnp
from typeguard import TypeCheckError

from ..checking import check_value, kernel_check_vma, op_check, with_op_context
from ..context import (
    TABLE,
    UNCHECKED,
    AxisRulesError,
    Table,
    checks_on,
    layout as rules_layout,
    staged_read,
    varying_axes,
)
from ..language import FIXED, INVARIANT_GATHER, KERNEL_OPS, NAMED, DimSpec, ShapeSpec, ShapeSpecError, linked
from ..model import Mismatch, anydtype, axis_hint, describe, in_kernel

__all__ = [
    "check", "call", "arrow", "single", "same_dims", "own_table", "axes", "trailing_extra",
    "one_or_tuple", "axis_names", "manual", "tracks_varying", "splits", "IndexSpec", "index_spec", "lookup",
]


# ---------------------------------------------------------------------------------------------
# Operands and results against the dimension table.


def check(op: str, spec_text: Any, what: str, spec: ShapeSpec, value: Any, dtype: type = anydtype) -> None:
    """Checks ``value`` (the op's ``what``) against ``dtype[spec]`` and binds its new dims."""
    table = TABLE.get()
    if table is not None:
        staged_read()
    try:
        with op_check():  # the op compares layouts itself (_kernel_layouts)
            new = check_value(value, dtype, spec, table if table is not None else Table(),
                              lambda: f"{what} of shardtypes.ops.{op}({spec_text!r})")
    except Mismatch as m:
        if not checks_on():  # checks off: nothing is compared (a value that matches binds its sizes)
            return
        raise TypeCheckError(linked(
            f"{_caller()}{call(op, spec_text)}: {what} is not {str(spec)!r}: "
            f"{m.problem} (found {describe(value)})", KERNEL_OPS
        )) from None
    if new and table is not None:
        TABLE.set(table.bind(new, f"{what} of shardtypes.ops.{op}()"))


def call(op: str, spec_text: Any = None) -> str:
    """``shardtypes.ops.psum('B/d M')``: how messages name a call."""
    return f"shardtypes.ops.{op}({spec_text!r})" if spec_text is not None else f"shardtypes.ops.{op}()"


def _caller() -> str:
    """``in f(), `` for the nearest function outside shardtypes that called the op."""
    here = os.path.dirname(__file__)
    frame: types.FrameType | None = sys._getframe(2)
    while frame is not None and os.path.dirname(frame.f_code.co_filename) == here:
        frame = frame.f_back
    return f"in {frame.f_code.co_qualname}(), " if frame is not None else ""


_Op = TypeVar("_Op", bound=Callable[..., Any])


def own_table(op: _Op) -> _Op:
    """Outside any dimension table (a hand-written shard_map), the operands and result of one op
    call share a table of their own."""

    @functools.wraps(op)
    def wrapper(*args, **kwargs):
        try:
            if TABLE.get() is not None:
                return op(*args, **kwargs)
            token = TABLE.set(Table())
            try:
                result = op(*args, **kwargs)
                unchecked = UNCHECKED.get()  # checks off: what the op bound reaches dims()
                if unchecked is not None:
                    unchecked.add((TABLE.get() or Table()).sizes)
                return result
            finally:
                TABLE.reset(token)
        except AxisRulesError as e:  # the rules could not place a logical name of the spec
            raise with_op_context(e, op.__name__, args[0] if args else kwargs.get("spec")) from None

    return cast(_Op, wrapper)


# ---------------------------------------------------------------------------------------------
# Spec strings.


def arrow(op: str, text: Any, n_inputs: int) -> tuple[tuple[ShapeSpec, ...], ShapeSpec]:
    """``'a, b -> c'`` parsed: the ``n_inputs`` input specs and the output spec."""
    if not isinstance(text, str):
        raise ShapeSpecError(text, f"shardtypes.ops.{op} wants a str spec 'inputs -> output', as in "
                                   f"'B/d M -> B M', not a {type(text).__name__}")
    return _arrow(op, text, n_inputs)


@functools.lru_cache(maxsize=1024)
def _arrow(op: str, text: str, n_inputs: int) -> tuple[tuple[ShapeSpec, ...], ShapeSpec]:
    if text.count("->") != 1:
        raise ShapeSpecError(text, f"shardtypes.ops.{op} wants 'inputs -> output', as in 'B/d M -> B M'")
    lhs, rhs = text.split("->")
    inputs = tuple(parse(op, part.strip()) for part in lhs.split(","))
    if len(inputs) != n_inputs:
        raise ShapeSpecError(text, f"shardtypes.ops.{op} takes {n_inputs} input spec(s), found {len(inputs)}")
    return inputs, parse(op, rhs.strip())


def single(op: str, text: Any, example: str) -> ShapeSpec:
    """The one shape of an op that keeps its operand's layout (``psum('B/d M', x, 't')``)."""
    if not isinstance(text, (str, bytes)):
        raise ShapeSpecError(text, f"shardtypes.ops.{op} wants a shape string, as in {example}, "
                                   f"not a {type(text).__name__}")
    if (text.decode("utf-8", "replace") if isinstance(text, bytes) else text).count("->"):
        raise ShapeSpecError(text, f"shardtypes.ops.{op} keeps the layout: write one shape, as in {example}")
    return parse(op, text)


def parse(op: str, text: str | bytes) -> ShapeSpec:
    """``ShapeSpec.parse(text)``, its error naming the op the spec was given to."""
    try:
        return ShapeSpec.parse(text)
    except ShapeSpecError as e:
        raise ShapeSpecError(e.spec, f"shardtypes.ops.{op}: {e.problem}", e.span) from None


def same_dims(op: str, text: str, a: ShapeSpec, b: ShapeSpec) -> None:
    if [d.shape for d in a.dims] != [d.shape for d in b.dims]:
        raise ShapeSpecError(
            text, f"shardtypes.ops.{op}: both sides must have the same dims, differing only in sharding"
        )


def axes(spec: ShapeSpec) -> tuple[tuple[str, ...], ...]:
    """The mesh axes of each dim: as written, or through the active axis rules."""
    mesh = jax.sharding.get_abstract_mesh()
    return rules_layout(spec, len(spec.dims), None if mesh.empty else dict(mesh.shape))


def trailing_extra(op: str, spec: str, i: int, before, after, fewer: tuple, more: tuple, verb: str) -> tuple:
    """The mesh axes ``more`` has after ``fewer``, which must be its leading axes."""
    if more[: len(fewer)] != fewer or len(more) == len(fewer):
        raise ShapeSpecError(
            spec, f"shardtypes.ops.{op}: dim {i} goes from {str(before)!r} to {str(after)!r}; "
            f"{op} can only {verb} trailing mesh axes of a dim"
        )
    return more[len(fewer):]


def one_or_tuple(names: tuple[str, ...]) -> str | tuple[str, ...]:
    return names[0] if len(names) == 1 else names


# ---------------------------------------------------------------------------------------------
# Mesh axes: an op's axes must be manual axes of the shard_map it runs in.


def axis_names(op: str, spec_text: Any, arg: str, value: Any) -> tuple[str, ...]:
    """``value`` (argument ``arg``: a mesh axis name or a tuple of them) as a tuple, validated
    by type; ``manual`` validates it against the mesh."""
    names = (value,) if isinstance(value, str) else value
    if not isinstance(names, (tuple, list)) or not names or not all(isinstance(a, str) for a in names):
        raise TypeError(f"{_caller()}{call(op, spec_text)}: argument {arg!r} must be a mesh axis "
                        f"name or a non-empty tuple of them, not {value!r}")
    if len(set(names)) != len(names):
        raise ValueError(f"{_caller()}{call(op, spec_text)}: argument {arg!r} names a mesh axis twice: {value!r}")
    return tuple(names)


def manual(op: str, spec_text: Any, names: tuple[str, ...], where: str) -> dict[str, int]:
    """The sizes of mesh axes ``names`` (named by ``where``), which must be manual here: the
    op runs inside a ``shard_map`` over them."""
    mesh = jax.sharding.get_abstract_mesh()
    here = tuple(mesh.manual_axes) if not mesh.empty else ()
    head = f"{_caller()}{call(op, spec_text)}: {where}"
    if names and not here:
        raise ValueError(
            f"{head} names mesh axis {names[0]!r}, but no shard_map is running here; call "
            f"shardtypes.ops.{op} inside jax.shard_map or typed_shard_map"
        )
    for name in names:
        if name not in mesh.axis_names:
            known = ", ".join(repr(a) for a in mesh.axis_names)
            raise ValueError(f"{head}: mesh axis {name!r} is not in the mesh (its axes: {known})"
                             f"{axis_hint([name], mesh.axis_names)}")
        if name not in here:
            manual_ = ", ".join(repr(a) for a in here)
            raise ValueError(f"{head}: mesh axis {name!r} is not manual in this shard_map (manual "
                             f"axes: {manual_}); add it to the shard_map's axis_names")
    return {name: mesh.shape[name] for name in names}


def tracks_varying(op: str, spec_text: Any, x: Any, names: tuple[str, ...]) -> None:
    """An invariant gather over ``names`` needs JAX to track varying axes (check_vma on): with it
    off, JAX's gradient of the gather is wrong. In a typed_shard_map kernel the option is known;
    in a hand-written shard_map, an operand that varies over no gathered axis says it is off."""
    if not names:
        return
    head = f"{call(op, spec_text)} with invariant=True"
    why = ("JAX's gradient of an invariant gather is wrong (scaled by one over the number of "
           "devices gathered over); use a plain gather (invariant=False) or turn check_vma on")
    kernel = kernel_check_vma()
    if kernel is not None and kernel[1] is False:
        raise TypeCheckError(linked(f"{in_kernel(kernel[0])}, {head}: the kernel runs with check_vma=False, "
                                    f"where {why}", INVARIANT_GATHER))
    aval = jax.typeof(x)
    missing = [a for a in names if a not in varying_axes(aval)]
    if missing:
        raise TypeCheckError(linked(
            f"{_caller()}{head}: the operand does not vary over mesh axis {missing[0]!r} (jax.typeof "
            f"gives {aval}): the shard_map runs with check_vma=False, or the operand is the same on "
            f"every device of {missing[0]!r}, not a block split over it; with check_vma off, {why}",
            INVARIANT_GATHER))


def splits(op: str, spec_text: str, spec: ShapeSpec, i: int, x: Any, sizes: dict[str, int]) -> None:
    """Dim ``i`` of ``x`` must split evenly over mesh axes ``sizes`` (a scatter along it)."""
    parts = math.prod(sizes.values())
    n = x.shape[i] if i < len(getattr(x, "shape", ())) else None
    if isinstance(n, int) and n % parts:
        raise TypeCheckError(linked(
            f"{_caller()}{call(op, spec_text)}: result is not {str(spec)!r}: dim {i} has local size "
            f"{n}, which does not split over mesh axes {', '.join(sizes)} ({parts} devices)", KERNEL_OPS
        ))


# ---------------------------------------------------------------------------------------------
# index_unreduced: the spec and the local lookup.


@dataclasses.dataclass(frozen=True)
class IndexSpec:
    """``'batch len [V/t], batch len -> batch len'`` parsed: the table (brackets removed), the
    position of the bracketed dim in it, the ids and the output."""

    table: ShapeSpec
    position: int
    ids: ShapeSpec
    output: ShapeSpec

    @property
    def looked_up(self) -> DimSpec:
        return self.table.dims[self.position]


def _bad(text: str, problem: str) -> ShapeSpecError:
    return ShapeSpecError(text, f"shardtypes.ops.index_unreduced: {problem}")


_FORM = "as in 'batch len [V/t], batch len -> batch len' or '[V/t] M, B L -> B L M'"


def index_spec(text: Any) -> IndexSpec:
    """Parses and validates an ``index_unreduced`` spec (see ``ops.index_unreduced``)."""
    if not isinstance(text, str):
        raise ShapeSpecError(text, f"shardtypes.ops.index_unreduced wants a str spec, {_FORM}, "
                                   f"not a {type(text).__name__}")
    return _index_spec(text)


@functools.lru_cache(maxsize=1024)
def _index_spec(text: str) -> IndexSpec:
    n_open, n_close = text.count("["), text.count("]")
    if n_open != 1 or n_close != 1:
        found = "no brackets" if n_open + n_close == 0 else f"{n_open} '[' and {n_close} ']'"
        raise _bad(text, f"put exactly one dim of the table in brackets, {_FORM}; found {found}")
    plain = text.replace("[", " ").replace("]", " ")
    try:
        (table, ids), output = arrow("index_unreduced", plain, 2)
    except ShapeSpecError as e:  # quote the spec as the user wrote it, brackets and all
        raise ShapeSpecError(text, _where(plain, e)) from None
    tokens = text.split("->")[0].split(",")[0].split()
    marked = [i for i, t in enumerate(tokens) if t.startswith("[") and t.endswith("]") and len(t) > 2]
    if not marked:
        raise _bad(text, f"the brackets must enclose one whole dim of the table (the first input), {_FORM}")
    spec = IndexSpec(table, marked[0], ids, output)
    _validate_index_dims(text, spec)
    return spec


def _where(plain: str, e: ShapeSpecError) -> str:
    """``e``'s problem, saying which part of the spec it is in."""
    lhs, _, rhs = plain.partition("->")
    parts = [p.strip() for p in lhs.split(",")] + [rhs.strip()]
    head = "shardtypes.ops.index_unreduced: "
    problem = e.problem.removeprefix(head)
    for side, part in zip(("the table", "the ids", "the output"), parts[:2] + parts[-1:]):
        if e.spec == part:
            return f"{head}in {side}: {problem}"
    return head + problem


def _validate_index_dims(text: str, spec: IndexSpec) -> None:
    key = spec.looked_up
    if key.is_variadic:
        raise _bad(text, f"the bracketed dim {str(key)!r} must be one dim, not a variadic one")
    sides = {"table": spec.table, "ids": spec.ids, "output": spec.output}
    for side, s in sides.items():
        seen: set[str] = set()
        for i, dim in enumerate(s.dims):
            if side == "table" and i == spec.position:
                continue
            if dim.kind not in (NAMED, FIXED):
                raise _bad(text, f"{side} dim {str(dim)!r} must be a plain name or an integer "
                                 "(dims are matched by name)")
            if dim.shape in seen:
                raise _bad(text, f"dim {dim.shape!r} appears twice in the {side}")
            seen.add(dim.shape)
    table = {d.shape: d for i, d in enumerate(spec.table.dims) if i != spec.position}
    if key.shape in table:
        raise _bad(text, f"dim {key.shape!r} appears twice in the table")
    ids = {d.shape: d for d in spec.ids.dims}
    output = {d.shape: d for d in spec.output.dims}
    for side, names in (("ids", ids), ("output", output)):
        if key.shape in names:
            raise _bad(text, f"the bracketed dim {key.shape!r} is the one looked up, so it cannot "
                             f"also be in the {side}")
    for name in table.keys() & ids.keys():
        if str(table[name]) != str(ids[name]):
            raise _bad(text, f"dim {name!r} is {str(table[name])!r} in the table but {str(ids[name])!r} "
                             "in the ids: a dim the lookup is batched over must be laid out alike in both")
    for name, dim in output.items():
        sources = [(side, d[name]) for side, d in (("table", table), ("ids", ids)) if name in d]
        if not sources:
            raise _bad(text, f"output dim {name!r} is in neither the table nor the ids")
        for side, source in sources:
            if str(source) != str(dim):
                raise _bad(text, f"dim {name!r} is {str(source)!r} in the {side} but {str(dim)!r} "
                                 "in the output: the lookup is local, so it keeps every layout")
    for side, names in (("table", table), ("ids", ids)):
        missing = [name for name in names if name not in output]
        if missing:
            raise _bad(text, f"{side} dim {missing[0]!r} is missing from the output (every dim of "
                             "the table but the bracketed one, and every dim of the ids, is in it)")


def lookup(spec: IndexSpec, table: Any, ids: Any, block_axes: tuple[str, ...], sizes: dict[str, int]) -> Any:
    """The local lookup: ``table``'s entries at ``ids`` along the bracketed dim, batched over
    the dims the table and ids share, zero where an id falls outside this device's block."""
    key = spec.position
    t_pos = {d.shape: i for i, d in enumerate(spec.table.dims) if i != key}
    i_pos = {d.shape: i for i, d in enumerate(spec.ids.dims)}
    out = [d.shape for d in spec.output.dims]
    shared = [n for n in out if n in t_pos and n in i_pos]
    ids_only = [n for n in out if n in i_pos and n not in t_pos]
    table_only = [n for n in out if n in t_pos and n not in i_pos]
    table = jnp.transpose(table, [t_pos[n] for n in shared] + [key] + [t_pos[n] for n in table_only])
    ids = jnp.transpose(ids, [i_pos[n] for n in shared + ids_only])
    rows = table.shape[len(shared)]
    start: int | jax.Array = 0
    for name in block_axes:  # the block this device holds, major axis first
        start = start * sizes[name] + jax.lax.axis_index(name)
    local = ids - start * rows
    inside = (local >= 0) & (local < rows)

    def take(t, i):
        return jnp.take(t, i, axis=0)

    for _ in shared:
        take = jax.vmap(take)
    picked = take(table, jnp.where(inside, local, 0))
    inside = inside.reshape(inside.shape + (1,) * len(table_only))
    result = jnp.where(inside, picked, jnp.zeros((), picked.dtype))
    order = shared + ids_only + table_only
    return jnp.transpose(result, [order.index(n) for n in out])
