"""How the collectives move layouts, varying axes and what is owed (the interpreter's rules for
``psum``/``pmax``/``pmin``, ``all_gather``, ``all_to_all``, ``reduce_scatter``, ``ppermute`` and
``axis_index``; ``p`` is the running pass).
"""

from __future__ import annotations

from typing import Any

from . import messages as say
from .algebra import FOLD, drop_rel, fact_of, ring_of
from .catalogue import Family, Owed, Part, implements
from .facts import UNKNOWN, Fact, SumToken
from .jaxpr import axis_names, invars, is_literal, name as prim_name, outvars, param
from .walk import primitive_of

__all__: list[str] = []  # (its rules register themselves: catalogue.implements)


def combined(p: Any, f: Fact, axes: frozenset) -> None:
    """Values that are each device's own (``Fact.lost``) along ``axes`` may not be combined
    over them: the finding that made them so is the refusal."""
    for apart, finding in f.lost:
        if apart & axes:
            p.fail(say.per_device_combined(finding, apart & axes))


def manual_axes(p: Any, eqn: Any) -> tuple:
    """The mesh axes a collective runs over that are manual in this kernel, in its order (an
    axis of size 1, or one the kernel leaves to JAX, moves nothing the pass follows)."""
    return tuple(a for a in axis_names(eqn) if a in p.manual)


def gathered_lost(f: Fact, axes: frozenset) -> tuple:
    """``Fact.lost`` once the values of every device along ``axes`` are side by side."""
    return tuple(e for e in f.lost if not e[0] <= axes)


@implements(Part.PASS, Family.PSUM)
def _psum(p: Any, eqn: Any, ins: list[Fact]) -> list[Fact]:
    paid = frozenset(manual_axes(p, eqn))
    name = prim_name(eqn)
    pays = primitive_of(eqn).pays or Owed.SUM
    sums = pays is Owed.SUM
    out = []
    for v, f in zip(invars(eqn), ins):
        if sums and f.rel and _rescaled_part(f, paid):
            f = f.same_origin(f.dims, f.owed, f.owed_by, rel=())  # exp(log(l_local) - M): l_local e^-M
        elif sums and f.rel:
            p.fail(say.relative_psummed(p.head, f, name, paid))
        if not f.known and not is_literal(v):
            out.append(UNKNOWN)
            continue
        combined(p, f, paid)
        owed = f.owed - paid if f.kind == pays else f.owed
        counted = f.counted
        split = [(i, frozenset(axes) & paid) for i, axes in enumerate(f.dims or ()) if axes and frozenset(axes) & paid]
        folded = frozenset(a for _, axes in split for a in axes)
        if sums and f.vary is not None and not is_literal(v):
            counted = counted | (paid - f.vary - f.owed - folded)
        vary = None if f.vary is None else f.vary - paid
        if split:  # the blocks of a split dim added together, elementwise
            by = say.fold_by(name, folded, [i for i, _ in split], f.origin)
            out.append(f.derived(f.dims, name, owed | folded, by, kind=FOLD[pays], vary=vary, counted=counted))
            continue
        rel = f.rel if sums else drop_rel(f.rel, paid)  # (a max over the devices: the same on all)
        out.append(f.derived(f.dims, name, owed, vary=vary, counted=counted, rel=rel))
    return out


def _rescaled_part(f: Fact, paid: frozenset) -> bool:
    """A value relative to one partial sum over ``paid`` with power +1 alone (``exp(lse_local -
    M)``, FlashDecoding's weight): that part of the sum times a factor the same on every device,
    a partial sum again."""
    rel = f.rel or ()
    return not (f.owed & paid) and len(rel) == 1 and isinstance(rel[0][0], SumToken) and rel[0][2] == 1 \
        and set(rel[0][1]) <= paid


def _gathered(p: Any, eqn: Any, fact: Fact, dim: int) -> tuple | None:
    """The axes of ``dim`` once a tiled gather over the eqn's axes has undone them: every mesh
    axis the dim is split over, or the last of them (a suffix), in order."""
    names = manual_axes(p, eqn)
    dims = fact.dims
    axes = dims[dim] if dims is not None else None
    if dims is None or axes is None:
        return None
    axes = tuple(a for a in axes if a in p.manual)
    if not axes:
        return None  # gathering a dim that is not split: copies side by side
    if not names:
        return axes
    if tuple(axes[len(axes) - len(names):]) != names:
        p.fail(say.gather_order(p.head, prim_name(eqn), dim, names, dims, fact.origin, axes))
        return None
    return tuple(axes[:len(axes) - len(names)])


@implements(Part.PASS, Family.ALL_GATHER)
def _all_gather(p: Any, eqn: Any, ins: list[Fact]) -> list[Fact]:
    f = ins[0]
    names = frozenset(manual_axes(p, eqn))
    dim = param(eqn, "all_gather_dimension")
    vary = None if f.vary is None else f.vary - names
    # A plain gather's result is typed varying by JAX: each device's copy (an invariant one's is not).
    copies = f.copies if primitive_of(eqn).invariant else f.copies | names
    if not param(eqn, "tiled"):  # the parts of every device side by side: nothing owed over them
        # (a new dim of the devices' blocks: the dims are whole blocks, split over them no more)
        kept = None if f.dims is None else tuple(
            None if axes is None else tuple(a for a in axes if a not in names) for axes in f.dims)
        stacked = None if kept is None else kept[:dim] + ((),) + kept[dim:]
        return fact_of(p, eqn, ins, stacked, f.owed - names, vary=vary, rel=drop_rel(f.rel, names),
                    lost=gathered_lost(f, names), copies=copies)
    # Tiled along a dim not split over the axes: every device's part side by side, nothing owed
    # over them any more. (Along a dim split over them, the blocks are put back together, each
    # still owing what it owed: a prefix stays one.)
    along = f.dims[dim] if f.dims is not None else None
    undone = along is not None and bool(set(along) & names)
    owed, rel = (f.owed if undone else f.owed - names), drop_rel(f.rel, names)
    lost = gathered_lost(f, names)
    if f.dims is None:
        return fact_of(p, eqn, ins, None, owed, vary=vary, rel=rel, lost=lost, copies=copies)
    tiled = list(f.dims)
    tiled[dim] = _gathered(p, eqn, f, dim)
    return fact_of(p, eqn, ins, tuple(tiled), owed, vary=vary, rel=rel, lost=lost, copies=copies)


@implements(Part.PASS, Family.ALL_TO_ALL)
def _all_to_all(p: Any, eqn: Any, ins: list[Fact]) -> list[Fact]:
    f = ins[0]
    names = manual_axes(p, eqn)
    vary = None if f.vary is None else f.vary | frozenset(names)
    if f.dims is None or not param(eqn, "tiled"):
        return fact_of(p, eqn, ins, None, vary=vary)
    split, concat = param(eqn, "split_axis"), param(eqn, "concat_axis")
    dims = list(f.dims)
    if split == concat:  # chunks of one dim exchanged in place: a permutation of it, no layout
        dims[split] = None
        return fact_of(p, eqn, ins, tuple(dims), vary=vary)
    dims[concat] = _gathered(p, eqn, f, concat)
    if dims[split] is not None:
        dims[split] = dims[split] + names
    return fact_of(p, eqn, ins, tuple(dims), vary=vary)


@implements(Part.PASS, Family.REDUCE_SCATTER)
def _reduce_scatter(p: Any, eqn: Any, ins: list[Fact]) -> list[Fact]:
    f = ins[0]
    names = manual_axes(p, eqn)
    combined(p, f, frozenset(names))
    owed = f.owed - frozenset(names) if f.kind == Owed.SUM else f.owed
    vary = None if f.vary is None else (f.vary - frozenset(names)) | frozenset(names)
    # As psum: over an axis the value is the same on (not owed, no dim split over it, not
    # copies JAX types as each device's own: ``Fact.copies``), it is counted once per device.
    counted = f.counted
    if f.vary is not None and not is_literal(invars(eqn)[0]):
        split = frozenset(a for axes in f.dims or () if axes for a in axes)
        counted = counted | (frozenset(names) - f.vary - f.owed - split - f.copies)
    if f.dims is None or not param(eqn, "tiled"):
        return fact_of(p, eqn, ins, None, owed, vary=vary, counted=counted)
    dims = list(f.dims)
    k = param(eqn, "scatter_dimension")
    if any(axes and set(axes) & set(names) for axes in dims):
        # Already split over the scattered axes: the devices' blocks are added together and the
        # sum scattered. Along the scattered dim the result is a chunk of that sum (split over
        # them once); another dim split over them holds summed blocks (no layout the pass claims).
        dims = [None if axes is None or (i != k and set(axes) & set(names)) else
                tuple(a for a in axes if a not in names) for i, axes in enumerate(dims)]
    dims[k] = None if dims[k] is None else dims[k] + names
    return fact_of(p, eqn, ins, tuple(dims), owed, vary=vary, counted=counted)


@implements(Part.PASS, Family.PPERMUTE)
def _ppermute(p: Any, eqn: Any, ins: list[Fact]) -> list[Fact]:
    """Each device gets another's block: a dim split over the permuted axes holds another part
    of the dim from here on (unknown which); an invariant value stays invariant."""
    names = frozenset(axis_names(eqn))
    d = ins[0].dims
    dims = None if d is None else tuple(None if a is not None and names & set(a) else a for a in d)
    along = manual_axes(p, eqn)
    ring = ring_of(ins[0], along[0]) if len(along) == 1 else None
    if ring is None:
        return fact_of(p, eqn, ins, dims)
    shift, how = cyclic_shift(p, eqn, ring[0]), "ring"
    if shift is None:
        shift, how = chain_shift(p, eqn, ring[0]), "chain"
    if shift is None or ring[3] not in (None, how):
        return fact_of(p, eqn, ins, dims)
    n = p.sizes[ring[0]]
    offsets = frozenset((o + shift) % n if how == "ring" else o + shift for o in ring[2])
    return fact_of(p, eqn, ins, dims, ring=(ring[0], ring[1], offsets, how))


def chain_shift(p: Any, eqn: Any, axis: str) -> int | None:
    """The shift ``s`` of a ppermute over ``axis`` alone that sends every device's value ``s``
    devices on where there is one, without wrapping round (``perm`` pairs ``(i, i + s)`` for
    every ``i`` with ``0 <= i + s < n``: the first ``|s|`` devices get zeros); None for any other."""
    if tuple(axis_names(eqn)) != (axis,) or axis not in p.sizes:
        return None
    n = p.sizes[axis]
    pairs = frozenset(tuple(pair) for pair in param(eqn, "perm"))
    shifts = {dst - src for src, dst in pairs}
    if len(shifts) != 1:
        return None
    s = shifts.pop()
    return s if s and pairs == frozenset((i, i + s) for i in range(n) if 0 <= i + s < n) else None


def cyclic_shift(p: Any, eqn: Any, axis: str) -> int | None:
    """The shift ``s`` of a ppermute over ``axis`` alone that sends every device's value ``s``
    devices on, round the ring (``perm`` pairs ``(i, (i + s) % n)`` for every ``i``); None for
    any other permutation."""
    if tuple(axis_names(eqn)) != (axis,) or axis not in p.sizes:
        return None
    n = p.sizes[axis]
    pairs = tuple(param(eqn, "perm"))
    shifts = {(dst - src) % n for src, dst in pairs}
    if len(pairs) != n or len({src for src, _ in pairs}) != n or len(shifts) != 1:
        return None
    return shifts.pop()


@implements(Part.PASS, Family.PBROADCAST)
def _pbroadcast(p: Any, eqn: Any, ins: list[Fact]) -> list[Fact]:
    """Every device along the axes gets the source device's value (``pbroadcast``, and
    ``pbroadcast_dynamic`` with the source as an operand): a dim split over them holds the source's
    block; one device's part of a sum is not the sum."""
    names = frozenset(manual_axes(p, eqn))
    f = ins[0]
    if f.owed & names:
        p.nonlinear(f"{prim_name(eqn)} (one device's part handed to all)", f)
    dims = None if f.dims is None else tuple(None if a is not None and names & set(a) else a for a in f.dims)
    return fact_of(p, eqn, ins[:1], dims)


@implements(Part.PASS, Family.ASYNC_DONE)
def _done(p: Any, eqn: Any, ins: list[Fact]) -> list[Fact]:
    """The end of an async collective: the value its start computed (``Family.ASYNC_DONE``)."""
    return list(ins[:len(outvars(eqn))])


@implements(Part.PASS, Family.AXIS_INDEX)
def _axis_index(p: Any, eqn: Any, ins: list[Fact]) -> list[Fact]:
    names = frozenset(manual_axes(p, eqn))
    return [Fact((), origin=f"jax.lax.axis_index({', '.join(repr(a) for a in sorted(names))})", vary=names)]
