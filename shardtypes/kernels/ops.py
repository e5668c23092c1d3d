"""The typed collectives: the implementation behind the public module ``shardtypes.ops``,
whose docstring is the user's guide to them."""

from __future__ import annotations

import contextvars
import math
import string
from typing import Any, Sequence, TypeVar

import jax
import jax.numpy as jnp

from ..checking import einsum_owed, gathered, mark_per_device, mark_unreduced, op_operand, op_result, still_owed
from ..context import all_gather_invariant
from ..language import NAMED, ShapeSpecError
from ..model import integer
from . import op_specs

_T = TypeVar("_T")

# The axes each ``per_device`` call names, collected while a caller listens (shardtypes.testing:
# a kernel that says it is per-device along an axis depends on that axis's size by design).
PER_DEVICE_CALLS: contextvars.ContextVar[list | None] = contextvars.ContextVar("per_device_calls", default=None)

__all__ = [
    "all_gather", "psum_scatter", "all_to_all", "psum", "pmean", "ppermute",
    "einsum_unreduced", "index_unreduced", "axis_index", "axis_size",
]


@op_specs.own_table
def all_gather(spec: str, x: jax.Array, *, invariant: bool = False) -> jax.Array:
    """Gathers the mesh axes that ``spec`` removes from a dim: ``'V/t M/d -> V/t M'``.

    The removed axes must be the trailing axes of that dim (``M/d/e -> M/d`` gathers ``e``).

    JAX types the result as varying over the gathered axes, although it is the same on every
    device: computing with it is fine, but a kernel cannot return it replicated over them.
    ``invariant=True`` gives a result typed invariant over them, which a kernel can return::

        @typed_shard_map
        def gather_rows(x: f32[b'batch/d embed']) -> f32[b'batch embed']:
            return ops.all_gather('batch/d embed -> batch embed', x, invariant=True)

    It needs ``check_vma`` on (the default): with it off, JAX's gradient of an invariant gather is
    wrong (scaled by one over the number of devices gathered over). On JAX 0.10+ it is the same
    single all-gather (``to='invarying'``); on older JAX it is a ``psum`` of the zero-padded
    block, an all-reduce of the whole array. Inside a kernel, a loss computed from an invariant
    gather is counted once in all, from a plain one once per device: keep the plain gather for
    weights gathered inside a training step.
    """
    if not isinstance(invariant, bool):
        raise TypeError(f"{op_specs.call('all_gather', spec)}: argument 'invariant' must be True or False, "
                        f"not {invariant!r}")
    (before,), after = op_specs.arrow("all_gather", spec, 1)
    op_specs.same_dims("all_gather", spec, before, after)
    gathers = [
        (i, op_specs.trailing_extra("all_gather", spec, i, b, a, fewer=a_axes, more=b_axes, verb="remove"))
        for i, (b, a, b_axes, a_axes) in enumerate(
            zip(before.dims, after.dims, op_specs.axes(before), op_specs.axes(after)))
        if b_axes != a_axes
    ]
    sizes = op_specs.manual("all_gather", spec, tuple(a for _, names in gathers for a in names), "the spec")
    op_operand("all_gather", spec, "operand", x, before)
    op_specs.check("all_gather", spec, "operand", before, x)
    if invariant:
        op_specs.tracks_varying("all_gather", spec, x, tuple(sizes))
    for i, names in gathers:
        if invariant:
            x = all_gather_invariant(x, op_specs.one_or_tuple(names), i, math.prod(sizes[a] for a in names))
        else:
            x = jax.lax.all_gather(x, op_specs.one_or_tuple(names), axis=i, tiled=True)
    op_specs.check("all_gather", spec, "result", after, x)
    op_result("all_gather", spec, x, after)
    if not invariant:
        gathered((a for _, names in gathers for a in names), op_specs.call("all_gather", spec))
    return x


@op_specs.own_table
def psum_scatter(spec: str, x: jax.Array) -> jax.Array:
    """Sums over the mesh axes that ``spec`` adds to dims and leaves each such dim scattered over
    the axes it gains: ``'B/d L M -> B/d L M/t'``, or several dims at once, ``'A B -> A/d B/t'``
    (summed over ``d`` and ``t``)."""
    (before,), after = op_specs.arrow("psum_scatter", spec, 1)
    op_specs.same_dims("psum_scatter", spec, before, after)
    b_axes, a_axes = op_specs.axes(before), op_specs.axes(after)
    changed = [i for i in range(len(before.dims)) if b_axes[i] != a_axes[i]]
    if not changed and str(before) != str(after):
        # Axis rules put no mesh axis on the logical one gained: nothing to sum or scatter over.
        known = op_operand("psum_scatter", spec, "operand", x, before)
        op_specs.check("psum_scatter", spec, "operand", before, x)
        op_specs.check("psum_scatter", spec, "result", after, x)
        op_result("psum_scatter", spec, x, after, *still_owed(known, ()))
        return x
    if not changed:
        raise ShapeSpecError(spec, "shardtypes.ops.psum_scatter: at least one dim must gain mesh axes")
    scatters = []
    for i in changed:
        b, a = before.dims[i], after.dims[i]
        added = op_specs.trailing_extra("psum_scatter", spec, i, b, a, fewer=b_axes[i], more=a_axes[i], verb="gain")
        scatters.append((i, added, op_specs.manual("psum_scatter", spec, added, "the spec")))
    known = op_operand("psum_scatter", spec, "operand", x, before)
    op_specs.check("psum_scatter", spec, "operand", before, x)
    for i, _, sizes in scatters:
        op_specs.splits("psum_scatter", spec, after, i, x, sizes)
    # One psum_scatter per dim: each sums over its own axes, so together they sum over all of them.
    for i, added, _ in scatters:
        x = jax.lax.psum_scatter(x, op_specs.one_or_tuple(added), scatter_dimension=i, tiled=True)
    op_specs.check("psum_scatter", spec, "result", after, x)
    op_result("psum_scatter", spec, x, after, *still_owed(known, (a for _, added, _ in scatters for a in added)))
    return x


@op_specs.own_table
def all_to_all(spec: str, x: jax.Array) -> jax.Array:
    """Moves mesh axes from one dim to another: ``'B/d L M -> B L M/d'``.

    The dim that loses axes is gathered over them and the dim that gains them is scattered over
    them, in one ``jax.lax.all_to_all``; no sum. The moved axes must be the trailing axes of the
    dim that loses them and are appended, in the same order, to the one that gains them
    (``'B/d/t M -> B/d M/t'`` moves ``t``; ``'B/d/t M -> B M/d/t'`` moves both).
    """
    (before,), after = op_specs.arrow("all_to_all", spec, 1)
    op_specs.same_dims("all_to_all", spec, before, after)
    b_axes, a_axes = op_specs.axes(before), op_specs.axes(after)
    changed = [i for i in range(len(before.dims)) if b_axes[i] != a_axes[i]]
    if not changed and str(before) != str(after):  # axis rules map the moved axis to nothing
        op_operand("all_to_all", spec, "operand", x, before)
        op_specs.check("all_to_all", spec, "operand", before, x)
        op_specs.check("all_to_all", spec, "result", after, x)
        op_result("all_to_all", spec, x, after)
        return x
    src, dst, moved = _move(spec, before, after, b_axes, a_axes, changed)
    sizes = op_specs.manual("all_to_all", spec, moved, "the spec")
    op_operand("all_to_all", spec, "operand", x, before)
    op_specs.check("all_to_all", spec, "operand", before, x)
    op_specs.splits("all_to_all", spec, after, dst, x, sizes)
    x = jax.lax.all_to_all(x, op_specs.one_or_tuple(moved), split_axis=dst, concat_axis=src, tiled=True)
    op_specs.check("all_to_all", spec, "result", after, x)
    op_result("all_to_all", spec, x, after)
    return x


def _move(spec, before, after, b_axes, a_axes, changed) -> tuple[int, int, tuple[str, ...]]:
    """``(src, dst, axes)``: all_to_all moves ``axes`` from the end of dim src to dim dst."""
    if len(changed) != 2:
        raise ShapeSpecError(spec, "shardtypes.ops.all_to_all: exactly two dims must change: one "
                                   f"gives mesh axes to the other (found {len(changed)} changed)")
    i, j = changed
    src, dst = (i, j) if len(b_axes[i]) > len(a_axes[i]) else (j, i)
    lost = op_specs.trailing_extra("all_to_all", spec, src, before.dims[src], after.dims[src],
                            fewer=a_axes[src], more=b_axes[src], verb="move")
    gained = op_specs.trailing_extra("all_to_all", spec, dst, before.dims[dst], after.dims[dst],
                              fewer=b_axes[dst], more=a_axes[dst], verb="move")
    if lost != gained:
        raise ShapeSpecError(spec, f"shardtypes.ops.all_to_all: dim {src} gives up {'/'.join(lost)} "
                                   f"but dim {dst} gains {'/'.join(gained)}: the same mesh axes, in "
                                   "the same order, must move")
    return src, dst, lost


@op_specs.own_table
def psum(spec: str, x: jax.Array, axes: str | Sequence[str]) -> jax.Array:
    """Adds up ``x``'s partial sums over mesh axes ``axes`` (``jax.lax.psum``); the layout is
    ``spec`` before and after::

        h = einsum_unreduced('B/d L M/t, M/t F -> B/d L F', x, w)   # partial sums over t
        h = psum('B/d L F', h, 't')

    ``axes`` is a mesh axis name or a tuple of them (JAX's ``axis_name``); the layout cannot
    say them, since a partial sum is laid out like the full one. No dim of ``spec`` may be split
    over them: that would add different blocks together (gather it first, or use
    ``psum_scatter`` to sum and split in one step). As in JAX, a value the same on every device
    of ``axes`` is counted once per device (``psum('L M', ones, 't')`` is ``2 * ones`` if t is 2).
    """
    return _reduce("psum", jax.lax.psum, spec, x, axes)


@op_specs.own_table
def pmean(spec: str, x: jax.Array, axes: str | Sequence[str]) -> jax.Array:
    """The mean over mesh axes ``axes`` (``jax.lax.pmean``), like ``psum``:
    ``pmean('B/d L M', loss_parts, ('d', 't'))``."""
    return _reduce("pmean", jax.lax.pmean, spec, x, axes)


def _reduce(op: str, collective, spec: str, x: jax.Array, axes: Any) -> jax.Array:
    shape = op_specs.single(op, spec, f"{op}('B/d L M', x, 't')")
    names = op_specs.axis_names(op, spec, "axes", axes)
    op_specs.manual(op, spec, names, "argument 'axes'")
    for i, (dim, dim_axes) in enumerate(zip(shape.dims, op_specs.axes(shape))):
        split = [a for a in names if a in dim_axes]
        if split:
            raise ValueError(
                f"{op_specs.call(op, spec)}: argument 'axes' reduces over mesh axis {split[0]!r}, but dim "
                f"{i} ({str(dim)!r}) is split over it, so the {op} would combine different blocks "
                "of it; all_gather that dim first, or sum with psum_scatter"
            )
    known = op_operand(op, spec, "operand", x, shape)
    op_specs.check(op, spec, "operand", shape, x)
    x = collective(x, op_specs.one_or_tuple(names))
    op_specs.check(op, spec, "result", shape, x)
    op_result(op, spec, x, shape, *still_owed(known, names))
    return x


@op_specs.own_table
def ppermute(spec: str, x: jax.Array, axis: str | Sequence[str], perm: Sequence[tuple[int, int]]) -> jax.Array:
    """Sends ``x`` from device ``src`` to device ``dst`` along mesh axis ``axis`` for each pair
    of ``perm`` (``jax.lax.ppermute``); devices no pair sends to get zeros. The layout is
    ``spec`` before and after::

        nxt = ppermute('B/d L M', x, 'd', [(i, (i + 1) % 4) for i in range(4)])   # a ring

    Device indices run over ``axis`` (over the tuple, major axis first, if ``axis`` is one);
    each source and each destination appears at most once.
    """
    shape = op_specs.single("ppermute", spec, "ppermute('B/d L M', x, 'd', [(0, 1), (1, 0)])")
    names = op_specs.axis_names("ppermute", spec, "axis", axis)
    sizes = op_specs.manual("ppermute", spec, names, "argument 'axis'")
    pairs = _perm(spec, perm, math.prod(sizes.values()))
    op_operand("ppermute", spec, "operand", x, shape)
    op_specs.check("ppermute", spec, "operand", shape, x)
    x = jax.lax.ppermute(x, op_specs.one_or_tuple(names), pairs)
    op_specs.check("ppermute", spec, "result", shape, x)
    op_result("ppermute", spec, x, shape)
    return x


def _perm(spec: str, perm: Any, n: int) -> list[tuple[int, int]]:
    head = f"{op_specs.call('ppermute', spec)}: argument 'perm'"

    def index(v: Any) -> bool:
        return isinstance(v, int) and not isinstance(v, bool)

    try:
        pairs = [tuple(p) for p in perm]
    except TypeError:
        pairs = None
    if pairs is None or isinstance(perm, (str, bytes)) or not all(len(p) == 2 and all(map(index, p)) for p in pairs):
        raise TypeError(f"{head} must be a list of (source, destination) pairs of ints, not {perm!r}")
    for src, dst in pairs:
        if not (0 <= src < n and 0 <= dst < n):
            raise ValueError(f"{head}: pair ({src}, {dst}) is out of range: the axis has {n} devices")
    for k, what in ((0, "source"), (1, "destination")):
        seen = [p[k] for p in pairs]
        twice = next((v for v in seen if seen.count(v) > 1), None)
        if twice is not None:
            raise ValueError(f"{head}: device {twice} is a {what} twice")
    return [(src, dst) for src, dst in pairs]


@op_specs.own_table
def einsum_unreduced(spec: str, *operands: jax.Array, **kwargs: Any) -> jax.Array:
    """A local ``jnp.einsum`` written with dim names: ``'B/d L M, M F/t -> B/d L F/t'``.

    Contracted dims that are sharded leave partial sums ("unreduced"): follow with ``psum`` or
    ``psum_scatter``. Keyword arguments go to ``jnp.einsum`` (``preferred_element_type=...``).
    Under ``jax.jit`` with ``check_vma`` on, the result is also typed unreduced for JAX
    (``jax.lax.pcast(..., to='unreduced')``), so JAX refuses nonlinear ops on it before the
    reduction (docs/shard-map.md, "Sums still owed").
    """
    inputs, output = op_specs.arrow("einsum_unreduced", spec, len(operands))
    letters: dict[str, str] = {}

    def subscript(s) -> str:
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
        op_operand("einsum_unreduced", spec, f"operand {i}", x, s)
        op_specs.check("einsum_unreduced", spec, f"operand {i}", s, x)
    contracted = einsum_owed(spec, inputs, output)  # after the operands: theirs is the clearer message
    result = jnp.einsum(",".join(in_subs) + "->" + out_sub, *operands, **kwargs)
    op_specs.check("einsum_unreduced", spec, "result", output, result)
    typed = mark_unreduced(result, contracted)  # JAX's unreduced type, where JAX has one
    op_result("einsum_unreduced", spec, typed, output, contracted, jax_typed=typed is not result)
    return typed


@op_specs.own_table
def index_unreduced(spec: str, table: jax.Array, ids: jax.Array) -> jax.Array:
    """Entries of ``table`` picked by integer ``ids`` along the table's dim in brackets, which
    may be sharded: ``'batch/d len [V/t], batch/d len -> batch/d len'`` (seqax's loss: the
    log-probability of each target) or ``'[V/t] M, B/d L -> B/d L M'`` (embedding rows).

    Dims are matched by name. A dim in both the table and the ids is batched over element-wise
    (``batch`` and ``len`` above: ``out[b, l] = table[b, l, ids[b, l]]``); a dim in only one of
    them is crossed (``M``: ``out[b, l, m] = table[ids[b, l], m]``). The output holds every dim
    of the ids and every dim of the table but the bracketed one, each once, in any order, and
    laid out as in the inputs. The bracketed dim is in neither the ids nor the output.

    Each device looks up the ids that fall in its block of the bracketed dim and gives zeros for
    the rest (ids outside ``[0, V)`` give zeros everywhere), so the result is a partial sum over
    the bracketed dim's mesh axes: follow with ``psum`` (or ``psum_scatter``) over them. Under
    ``jax.jit`` with ``check_vma`` on, JAX types it unreduced too (as ``einsum_unreduced``).
    """
    parsed = op_specs.index_spec(spec)
    block_axes = op_specs.axes(parsed.table)[parsed.position]
    sizes = op_specs.manual("index_unreduced", spec, block_axes, "the bracketed dim")
    op_operand("index_unreduced", spec, "table", table, parsed.table)
    op_operand("index_unreduced", spec, "ids", ids, parsed.ids)
    op_specs.check("index_unreduced", spec, "table", parsed.table, table)
    op_specs.check("index_unreduced", spec, "ids", parsed.ids, ids, integer)
    result = op_specs.lookup(parsed, table, ids, block_axes, sizes)
    op_specs.check("index_unreduced", spec, "result", parsed.output, result)
    typed = mark_unreduced(result, frozenset(block_axes))
    op_result("index_unreduced", spec, typed, parsed.output, frozenset(block_axes),
                 jax_typed=typed is not result)
    return typed


def axis_index(name: str | Sequence[str]) -> jax.Array:
    """This device's index along mesh axis ``name`` (``jax.lax.axis_index``), inside a
    ``shard_map`` where ``name`` is manual: ``axis_index('d')``. A tuple of axes gives the
    index over them together, major axis first."""
    names = op_specs.axis_names("axis_index", name, "name", name)
    op_specs.manual("axis_index", name, names, "argument 'name'")
    return jax.lax.axis_index(op_specs.one_or_tuple(names))


def axis_size(name: str | Sequence[str]) -> int:
    """The size of mesh axis ``name`` (``jax.lax.axis_size``), inside a ``shard_map`` where it
    is manual: ``axis_size('d')``. A tuple of axes gives the product of their sizes."""
    names = op_specs.axis_names("axis_size", name, "name", name)
    return math.prod(op_specs.manual("axis_size", name, names, "argument 'name'").values())


def per_device(value: _T, axes: str | Sequence[str]) -> _T:
    """Says that ``value`` (an array, or a tree of them) differs from device to device along mesh
    axes ``axes`` by intent, inside a ``typed_shard_map`` kernel, and returns it unchanged::

        frac = per_device(probs.mean(0), 'd')     # this group's router statistics, not the
        aux = pmean('', (frac * counts).sum(), 'd')   # global ones: a per-group auxiliary loss

    The kernel pass then no longer takes what it owes over ``axes`` (a partial sum, maximum,
    minimum or prefix left by a ``jnp.sum``, ``max``, contraction or ``cumsum`` over a dim split
    over them) as owed: each device's part is the value. It still varies over ``axes``: returning
    it, or checking it against an annotation, that says it is the same on every device along
    them is a TypeCheckError naming this call; sum, average or gather it first. Use it where a
    value is per-device by design and the pass cannot know it, not to silence a missing psum.
    """
    names = op_specs.axis_names("per_device", axes, "axes", axes)
    op_specs.manual("per_device", axes, names, "argument 'axes'")
    leaves = jax.tree.leaves(value)
    if not leaves or not all(isinstance(x, jax.Array) for x in leaves):
        found = ", ".join(sorted({type(x).__name__ for x in leaves})) or "no arrays"
        raise TypeError(f"shardtypes.ops.per_device: argument 'value' must be a jax.Array or a tree of them "
                        f"(found {found})")
    mark_per_device(leaves, frozenset(names), f"shardtypes.ops.per_device(..., {op_specs.one_or_tuple(names)!r})")
    listening = PER_DEVICE_CALLS.get()
    if listening is not None:
        listening.extend(n for n in names if n not in listening)
    return value
