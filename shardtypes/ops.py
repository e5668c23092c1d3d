"""Typed collectives for ``shard_map`` kernels, written as spec strings (seqax's style).

Each op takes a spec string saying the layouts before and after, checks its operands and its
result against the current dimension table (global sizes, as in annotations), and calls the JAX
collective the layouts imply::

    all_gather('V/t M/d -> V/t M', w)          # gather dim 1 over mesh axis d
    psum_scatter('B/d L M -> B/d L M/t', h)    # sum over t, leaving dim 2 scattered over t
    einsum_unreduced('B/d L M, M F/t -> B/d L F/t', x, w)   # local einsum; sharded contracted
                                                            # dims leave partial sums
    index_unreduced('[V/t] M, B/d L -> B/d L M', table, ids)  # rows of a table sharded over t;
                                                              # rows held elsewhere are zero
    axis_size('d')

An operand that does not match its spec raises TypeCheckError naming the op, the operand and
the spec.
"""

from __future__ import annotations

import functools
import os
import string
import sys
import types
from typing import Any, Callable

import jax
import jax.numpy as jnp
from typeguard import TypeCheckError

from ._check import Mismatch, check_value, describe
from ._dims import _TABLE, Table
from ._dtypes import anydtype
from ._rules import layout as rules_layout
from ._shape import NAMED, ShapeSpec, ShapeSpecError

__all__ = ["all_gather", "psum_scatter", "einsum_unreduced", "index_unreduced", "axis_size"]


def _check(op: str, spec_text: str, what: str, spec: ShapeSpec, value: Any) -> None:
    table = _TABLE.get()
    try:
        new = check_value(value, anydtype, spec, table if table is not None else Table(),
                          lambda: f"{what} of shardtypes.ops.{op}({spec_text!r})")
    except Mismatch as m:
        raise TypeCheckError(
            f"{_caller()}shardtypes.ops.{op}({spec_text!r}): {what} is not {str(spec)!r}: "
            f"{m.problem} (found {describe(value)})"
        ) from None
    if new and table is not None:
        _TABLE.set(table.bind(new, f"{what} of shardtypes.ops.{op}()"))


def _caller() -> str:
    """``in f(), `` for the nearest function outside shardtypes that called the op."""
    here = os.path.dirname(__file__)
    frame: types.FrameType | None = sys._getframe(2)
    while frame is not None and os.path.dirname(frame.f_code.co_filename) == here:
        frame = frame.f_back
    return f"in {frame.f_code.co_qualname}(), " if frame is not None else ""


@functools.lru_cache(maxsize=1024)
def _arrow(op: str, text: str, n_inputs: int) -> tuple[tuple[ShapeSpec, ...], ShapeSpec]:
    if not isinstance(text, str) or text.count("->") != 1:
        raise ShapeSpecError(text, f"shardtypes.ops.{op} wants 'inputs -> output', as in 'B/d M -> B M'")
    lhs, rhs = text.split("->")
    inputs = tuple(ShapeSpec.parse(part.strip()) for part in lhs.split(","))
    if len(inputs) != n_inputs:
        raise ShapeSpecError(text, f"shardtypes.ops.{op} takes {n_inputs} input spec(s), found {len(inputs)}")
    return inputs, ShapeSpec.parse(rhs.strip())


def _same_dims(op: str, text: str, a: ShapeSpec, b: ShapeSpec) -> None:
    if [d.shape for d in a.dims] != [d.shape for d in b.dims]:
        raise ShapeSpecError(
            text, f"shardtypes.ops.{op}: both sides must have the same dims, differing only in sharding"
        )


def _own_table(op: Callable) -> Callable:
    """Outside any dimension table (a hand-written shard_map), the operands and result of one op
    call share a table of their own."""

    @functools.wraps(op)
    def wrapper(*args, **kwargs):
        if _TABLE.get() is not None:
            return op(*args, **kwargs)
        token = _TABLE.set(Table())
        try:
            return op(*args, **kwargs)
        finally:
            _TABLE.reset(token)

    return wrapper


def _axes(spec: ShapeSpec) -> tuple[tuple[str, ...], ...]:
    """The mesh axes of each dim: as written, or through the active axis rules."""
    mesh = jax.sharding.get_abstract_mesh()
    return rules_layout(spec, len(spec.dims), None if mesh.empty else dict(mesh.shape))


def _trailing_extra(op: str, spec: str, i: int, before, after, fewer: tuple, more: tuple, verb: str) -> tuple:
    """The mesh axes ``more`` has after ``fewer``, which must be its leading axes."""
    if more[: len(fewer)] != fewer or len(more) == len(fewer):
        raise ShapeSpecError(
            spec, f"shardtypes.ops.{op}: dim {i} goes from {str(before)!r} to {str(after)!r}; "
            f"{op} can only {verb} trailing mesh axes of a dim"
        )
    return more[len(fewer):]


def _one_or_tuple(axes: tuple[str, ...]) -> str | tuple[str, ...]:
    return axes[0] if len(axes) == 1 else axes


@_own_table
def all_gather(spec: str, x: Any) -> Any:
    """Gathers the mesh axes that ``spec`` removes from a dim: ``'V/t M/d -> V/t M'``.

    The removed axes must be the trailing axes of that dim (``M/d/e -> M/d`` gathers ``e``).
    """
    (before,), after = _arrow("all_gather", spec, 1)
    _same_dims("all_gather", spec, before, after)
    gathers = [
        (i, _trailing_extra("all_gather", spec, i, b, a, fewer=a_axes, more=b_axes, verb="remove"))
        for i, (b, a, b_axes, a_axes) in enumerate(zip(before.dims, after.dims, _axes(before), _axes(after)))
        if b_axes != a_axes
    ]
    _check("all_gather", spec, "operand", before, x)
    for i, axes in gathers:
        x = jax.lax.all_gather(x, _one_or_tuple(axes), axis=i, tiled=True)
    _check("all_gather", spec, "result", after, x)
    return x


@_own_table
def psum_scatter(spec: str, x: Any) -> Any:
    """Sums over the mesh axes that ``spec`` adds to one dim and leaves that dim scattered over
    them: ``'B/d L M -> B/d L M/t'``."""
    (before,), after = _arrow("psum_scatter", spec, 1)
    _same_dims("psum_scatter", spec, before, after)
    b_axes, a_axes = _axes(before), _axes(after)
    changed = [i for i in range(len(before.dims)) if b_axes[i] != a_axes[i]]
    if not changed and str(before) != str(after):
        # Axis rules put no mesh axis on the logical one gained: nothing to sum or scatter over.
        _check("psum_scatter", spec, "operand", before, x)
        _check("psum_scatter", spec, "result", after, x)
        return x
    if len(changed) != 1:
        raise ShapeSpecError(spec, "shardtypes.ops.psum_scatter: exactly one dim must gain mesh axes")
    (i,) = changed
    b, a = before.dims[i], after.dims[i]
    added = _trailing_extra("psum_scatter", spec, i, b, a, fewer=b_axes[i], more=a_axes[i], verb="gain")
    _check("psum_scatter", spec, "operand", before, x)
    x = jax.lax.psum_scatter(x, _one_or_tuple(added), scatter_dimension=i, tiled=True)
    _check("psum_scatter", spec, "result", after, x)
    return x


@_own_table
def einsum_unreduced(spec: str, *operands: Any, **kwargs: Any) -> Any:
    """A local ``jnp.einsum`` written with dim names: ``'B/d L M, M F/t -> B/d L F/t'``.

    Contracted dims that are sharded leave partial sums ("unreduced"): follow with a psum or
    ``psum_scatter``. Keyword arguments go to ``jnp.einsum`` (``preferred_element_type=...``).
    """
    inputs, output = _arrow("einsum_unreduced", spec, len(operands))
    letters: dict[str, str] = {}

    def subscript(s: ShapeSpec) -> str:
        out = []
        for dim in s.dims:
            if dim.kind != NAMED:
                raise ShapeSpecError(spec, f"shardtypes.ops.einsum_unreduced: dim {str(dim)!r} must be a plain name")
            if dim.shape not in letters:
                if len(letters) == len(string.ascii_letters):
                    raise ShapeSpecError(spec, "shardtypes.ops.einsum_unreduced: too many dim names")
                letters[dim.shape] = string.ascii_letters[len(letters)]
            out.append(letters[dim.shape])
        return "".join(out)

    in_subs = [subscript(s) for s in inputs]
    out_sub = subscript(output)
    given = {d.shape for s in inputs for d in s.dims}
    stray = [d.shape for d in output.dims if d.shape not in given]
    if stray:
        raise ShapeSpecError(spec, f"shardtypes.ops.einsum_unreduced: output dim {stray[0]!r} is in no input")
    for i, (s, x) in enumerate(zip(inputs, operands)):
        _check("einsum_unreduced", spec, f"operand {i}", s, x)
    result = jnp.einsum(",".join(in_subs) + "->" + out_sub, *operands, **kwargs)
    _check("einsum_unreduced", spec, "result", output, result)
    return result


@_own_table
def index_unreduced(spec: str, table: Any, ids: Any) -> Any:
    """Rows of ``table`` picked by ``ids``, where the indexed dim (in brackets) is sharded:
    ``'[V/t] M, B/d L -> B/d L M'``.

    Each device looks up the ids that fall in its block of rows and gives zeros for the rest, so
    the result is a partial sum over the bracketed dim's axes: follow with a psum.
    """
    text = spec.replace("[", " ").replace("]", " ") if isinstance(spec, str) else spec
    if not isinstance(spec, str) or spec.count("[") != 1 or spec.count("]") != 1 or not spec.lstrip().startswith("["):
        raise ShapeSpecError(spec, "shardtypes.ops.index_unreduced wants '[V/t] M, B L -> B L M': the table's first dim in brackets")
    (table_spec, ids_spec), output = _arrow("index_unreduced", text, 2)
    expected = [str(d) for d in ids_spec.dims] + [str(d) for d in table_spec.dims[1:]]
    if [str(d) for d in output.dims] != expected:
        raise ShapeSpecError(
            spec, f"shardtypes.ops.index_unreduced: the output must be the ids' dims then the "
            f"table's other dims: {' '.join(expected)!r}"
        )
    _check("index_unreduced", spec, "table", table_spec, table)
    _check("index_unreduced", spec, "ids", ids_spec, ids)
    rows = table.shape[0]
    start: int | jax.Array = 0
    for axis in _axes(table_spec)[0]:  # the block this device holds, major axis first
        start = start * jax.lax.axis_size(axis) + jax.lax.axis_index(axis)
    start = start * rows
    local = ids - start
    inside = (local >= 0) & (local < rows)
    picked = jnp.take(table, jnp.clip(local, 0, rows - 1), axis=0)
    inside = inside.reshape(inside.shape + (1,) * (table.ndim - 1))
    result = jnp.where(inside, picked, jnp.zeros((), table.dtype))
    _check("index_unreduced", spec, "result", output, result)
    return result


def axis_size(name: str) -> int:
    """The size of mesh axis ``name`` (``jax.lax.axis_size``)."""
    return jax.lax.axis_size(name)

