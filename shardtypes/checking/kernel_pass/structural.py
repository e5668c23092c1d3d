"""How each structural and collective primitive moves layouts, varying axes and what is owed
(the interpreter's rules, one function per primitive kind; ``p`` is the running pass). Params are
read through ``jaxpr``, which raises ``Unreadable`` for a shape it does not know."""

from __future__ import annotations

from typing import Any

from . import messages as say
from .algebra import FOLD, fact_of, ndim, rel_mul, union
from .catalogue import Family, Part, implements
from .facts import UNKNOWN, Fact, Owed, joined_lost
from .jaxpr import contraction, invars, name as prim_name, optional_param, outvars, param, shape
from .walk import primitive_of

__all__: list[str] = []  # (its rules register themselves: catalogue.implements)


def _rank_dropped(fact: Fact, out: list[Fact]) -> list[Fact]:
    """A prefix whose rank drops (its last row taken, summed over) is a partial sum: each block's
    total."""
    if fact.owed and fact.kind == Owed.PREFIX:
        return [f.evolve(kind=Owed.SUM) if f.owed else f for f in out]
    return out


@implements(Part.PASS, Family.TRANSPOSE)
def _transpose(p: Any, eqn: Any, ins: list[Fact]) -> list[Fact]:
    d = ins[0].dims
    return fact_of(p, eqn, ins, None if d is None else tuple(d[i] for i in param(eqn, "permutation")))


@implements(Part.PASS, Family.SQUEEZE)
def _squeeze(p: Any, eqn: Any, ins: list[Fact]) -> list[Fact]:
    d = ins[0].dims
    drop = {i % max(ndim(invars(eqn)[0]), 1) for i in param(eqn, "dimensions")}
    out = fact_of(p, eqn, ins, None if d is None else tuple(a for i, a in enumerate(d) if i not in drop))
    return _rank_dropped(ins[0], out)


@implements(Part.PASS, Family.BROADCAST)
def _broadcast(p: Any, eqn: Any, ins: list[Fact]) -> list[Fact]:
    d = ins[0].dims
    to = param(eqn, "shape")
    if d is None:
        return fact_of(p, eqn, ins, None)
    out: list = [None] * len(to)
    in_shape = shape(invars(eqn)[0])
    for i, o in enumerate(param(eqn, "broadcast_dimensions")):
        out[o] = d[i] if in_shape[i] == to[o] else None
    return fact_of(p, eqn, ins, tuple(out))


@implements(Part.PASS, Family.RESHAPE)
def _reshape(p: Any, eqn: Any, ins: list[Fact]) -> list[Fact]:
    d = ins[0].dims
    if d is None or optional_param(eqn, "dimensions") is not None:
        return fact_of(p, eqn, ins, None)
    old, new = tuple(shape(invars(eqn)[0])), tuple(param(eqn, "new_sizes"))
    out: list = [None] * len(new)
    i = j = 0
    while i < len(old) and j < len(new):  # groups of dims whose sizes multiply to the same
        gi, gj, si, sj = [i], [j], old[i], new[j]
        while si != sj:
            if si < sj and i + 1 < len(old):
                i += 1
                gi.append(i)
                si *= old[i]
            elif j + 1 < len(new):
                j += 1
                gj.append(j)
                sj *= new[j]
            else:
                return fact_of(p, eqn, ins, None)
        split_in = [k for k in gi if d[k] is None or d[k]]
        if len(gi) == 1 and len(gj) == 1:
            out[gj[0]] = d[gi[0]]
        elif not split_in:  # dims that are not split merge or split into dims that are not
            for k in gj:
                out[k] = ()
        i, j = i + 1, j + 1
    return fact_of(p, eqn, ins, tuple(out))


@implements(Part.PASS, Family.SAME_SIZE)
def _same_size(p: Any, eqn: Any, ins: list[Fact]) -> list[Fact]:
    """slice, pad, rev, dynamic_slice, dynamic_update_slice, gather...: dims keeping their size
    keep their axes; indices may not owe a sum; indices that vary make the result vary."""
    prim = primitive_of(eqn)
    name = prim.name
    for f in ins[1:]:
        if f.owed and not prim.writes_into:
            p.nonlinear(f"{name} (indexing with a partial sum)", f)
    d = ins[0].dims
    out_shape = shape(outvars(eqn)[0])
    in_shape = shape(invars(eqn)[0])
    vary = union(*ins)
    if d is None or len(out_shape) != len(in_shape):
        return _rank_dropped(ins[0], fact_of(p, eqn, ins, None, vary=vary))
    owed = frozenset().union(*(f.owed for f in ins[:2])) if prim.writes_into else None
    out = fact_of(p, eqn, ins, tuple(a if o == s else None for a, o, s in zip(d, out_shape, in_shape)), owed,
               vary=vary)
    cut = {a for a, o, s in zip(d, out_shape, in_shape) if o != s for a in (a or ())}
    if ins[0].kind == Owed.PREFIX and cut & ins[0].owed:  # rows of a prefix (its last: the block's total)
        return _rank_dropped(ins[0], out)
    return out


@implements(Part.PASS, Family.CONCATENATE)
def _concatenate(p: Any, eqn: Any, ins: list[Fact]) -> list[Fact]:
    fact = p.elementwise(eqn, ins)
    if fact.dims is not None:
        k = param(eqn, "dimension")
        fact = fact.evolve(dims=tuple(None if i == k else a for i, a in enumerate(fact.dims)))
    return [fact]


def _split_axes(p: Any, eqn: Any, fact: Fact, dims: Any, blocks_of_one: bool = True) -> frozenset:
    """The manual axes (of more than one device) of ``dims`` of ``fact`` (``blocks_of_one``:
    also of dims with one element per device)."""
    have, sizes = fact.dims or (), shape(invars(eqn)[0])
    return frozenset(a for i in dims if i < len(have) and (blocks_of_one or sizes[i] != 1)
                     for a in (have[i] or ()) if a in p.manual)


@implements(Part.PASS, Family.REDUCE)
def _reduce(p: Any, eqn: Any, ins: list[Fact]) -> list[Fact]:
    d = ins[0].dims
    axes = set(param(eqn, "axes"))
    kept = None if d is None else tuple(a for i, a in enumerate(d) if i not in axes)
    kind = primitive_of(eqn).pays  # (a sum, max or min over a split dim leaves one owed)
    if all(shape(invars(eqn)[0])[i] == 1 for i in axes):  # over dims of one element: the value
        return fact_of(p, eqn, ins, kept)
    if kind is None or d is None:
        return _rank_dropped(ins[0], fact_of(p, eqn, ins, kept))
    f = ins[0]
    # A dim of one element per device is taken as that element, not as a part the mesh still
    # owes: jnp.einsum and JAX's AD sum over such dims to drop them (the transpose of a
    # broadcast), as with heads/tp and as many heads as tp devices. (A sum over a dim split into
    # one-element blocks is not followed: docs/shard-map.md.)
    summed = _split_axes(p, eqn, f, axes, blocks_of_one=False)
    if f.owed and f.kind == FOLD[kind]:  # the blocks a psum added together, now reduced over
        owed = f.owed - _split_axes(p, eqn, f, axes)
        return [f.derived(kept, prim_name(eqn), owed, kind=f.kind if owed else Owed.SUM)]
    if f.owed and f.kind == Owed.PREFIX:
        return fact_of(p, eqn, ins, kept)  # (a sum of prefixes is not a prefix, nor a block's total)
    if f.owed and f.kind != kind:  # (a sum of maxima, say: neither is paid by what pays the other)
        p.nonlinear(prim_name(eqn), f)
    if not summed:
        return _rank_dropped(f, fact_of(p, eqn, ins, kept))
    dims = ", ".join(str(i) for i in sorted(axes) if d[i])
    call = {Owed.SUM: "a sum (jnp.sum)", Owed.MAX: "a max (jnp.max)", Owed.MIN: "a min (jnp.min)"}[kind]
    vary = None if ins[0].vary is None else ins[0].vary | summed
    if ins[0].owed and ins[0].kind == kind:
        return fact_of(p, eqn, ins, kept, ins[0].owed | summed, ins[0].owed_by, vary=vary)
    by = say.sum_by(call, dims, summed, ins[0].origin)
    count = 1  # (how many local elements each device added: a mean divides by it)
    for i in axes:
        count *= shape(invars(eqn)[0])[i]
    return fact_of(p, eqn, ins, kept, summed, by, kind=kind, vary=vary, count=count if kind == Owed.SUM else 0)


@implements(Part.PASS, Family.CUMULATIVE)
def _cumulative(p: Any, eqn: Any, ins: list[Fact]) -> list[Fact]:
    """cumsum, cummax...: along a split dim, each block's prefix still needs the blocks before."""
    d = ins[0].dims
    if d is None:
        return fact_of(p, eqn, ins, None)
    axis = param(eqn, "axis")
    split = _split_axes(p, eqn, ins[0], (axis,))
    if split and ins[0].owed and ins[0].kind == Owed.PREFIX:  # (one carry added later pays one prefix)
        p.nonlinear(f"{prim_name(eqn)} (a prefix of a prefix)", ins[0])
    if not split or ins[0].owed:
        return fact_of(p, eqn, ins, d)
    by = say.cumulative_by(prim_name(eqn), axis, split, ins[0].origin)
    return fact_of(p, eqn, ins, d, split, by, kind=Owed.PREFIX)


@implements(Part.PASS, Family.CONTRACTION)
def _dot_general(p: Any, eqn: Any, ins: list[Fact]) -> list[Fact]:
    """A contraction (``dot_general``; ``ragged_dot_general``, whose rhs's group dim selects a
    matrix per row group and leaves the result): batch and free dims keep their layout; a
    contracting dim split over mesh axes leaves a sum owed over them."""
    spec = contraction(eqn)
    (lc, rc), (lb, rb) = spec.dimension_numbers
    lhs, rhs = ins[0], ins[1]
    if rhs.dims is not None and spec.rhs_dropped:  # (the group dim: not in the result)
        rhs = rhs.evolve(dims=tuple(None if i in spec.rhs_dropped else a for i, a in enumerate(rhs.dims)))
    owing = [f for f in (lhs, rhs) if f.owed]
    for f in ins[2:]:  # (group sizes: which rows go to which group)
        if f.owed:
            p.nonlinear(f"{prim_name(eqn)} (group sizes that are a partial sum)", f)
    owed, by, _ = p.linear_owed(primitive_of(eqn), eqn, ins[:2], owing) if owing else (frozenset(), "", Owed.SUM)
    contracted: set = set()
    where = []
    lost: list = []
    for i, j in zip(lc, rc):
        a = lhs.dims[i] if lhs.dims is not None else None
        b = rhs.dims[j] if rhs.dims is not None else None
        if a is not None and b is not None and a != b:
            # Each device multiplies blocks of different parts of the dim: its own product, right
            # only kept per device (``Fact.lost``).
            apart = frozenset(x for x in (*a, *b) if x in p.manual)
            lost.append((apart, say.contracted_apart(p.head, i, j, lhs, rhs, a, b)))
            continue
        axes = {x for x in (a or b or ()) if x in p.manual}
        if axes:
            where.append(f"dim {i}")
        contracted |= axes
    if contracted and not by:
        by = say.contraction_by(where, contracted, lhs.origin, primitive_of(eqn))
    kind = Owed.SUM
    for f in owing:  # (a prefix, or blocks a psum added together, contracted: still wrong)
        if f.kind != Owed.SUM:
            kind = f.kind
    owed = owed | frozenset(contracted)
    dims = None
    if lhs.dims is not None or rhs.dims is not None:
        ld = lhs.dims or (None,) * ndim(invars(eqn)[0])
        rd = rhs.dims or (None,) * ndim(invars(eqn)[1])
        batch = tuple(ld[i] if ld[i] == rd[j] or rd[j] is None else (rd[j] if ld[i] is None else None)
                      for i, j in zip(lb, rb))
        free_l = tuple(a for i, a in enumerate(ld) if i not in lc and i not in lb)
        free_r = tuple(a for i, a in enumerate(rd) if i not in rc and i not in rb and i not in spec.rhs_dropped)
        dims = batch + free_l + free_r
    vary = union(lhs, rhs)
    apart = frozenset(a for axes, _ in lost for a in axes)
    if vary is not None:
        vary = vary | apart
    rel = rel_mul(lhs.rel, rhs.rel)
    base = lhs if lhs.dims is not None or lhs.owed else rhs
    if dims is None and not owed and vary is None and not lost:
        return [UNKNOWN]
    return [base.derived(dims, prim_name(eqn), owed, by, kind=kind, vary=vary, rel=rel,
                         counted=lhs.counted | rhs.counted, mark=lhs.mark or rhs.mark,
                         lost=joined_lost(lhs, rhs) + tuple(lost), copies=lhs.copies | rhs.copies)]


@implements(Part.PASS, Family.IOTA)
def _iota(p: Any, eqn: Any, ins: list[Fact]) -> list[Fact]:
    """The same on every device; but which global array it is a block of depends on what it is
    combined with (compared with ``ids - axis_index('t') * n`` it indexes a split dim's block):
    its layout is left unknown."""
    return [Fact(None, origin="jax.lax.iota", vary=frozenset())]


@implements(Part.PASS, Family.SPLIT)
def _cut(p: Any, eqn: Any, ins: list[Fact]) -> list[Fact]:
    """jnp.split: each piece keeps the layout, but along the dim it is cut."""
    d = ins[0].dims
    axis = param(eqn, "axis")
    if d is None:
        return fact_of(p, eqn, ins, None) * len(outvars(eqn))
    dims = tuple(None if i == axis else a for i, a in enumerate(d))
    return fact_of(p, eqn, ins, dims) * len(outvars(eqn))


@implements(Part.PASS, Family.RESHARD, Family.CONSTRAINT, Family.IDENTITY)
def _keep(p: Any, eqn: Any, ins: list[Fact]) -> list[Fact]:
    return fact_of(p, eqn, ins, ins[0].dims)


@implements(Part.PASS, Family.EACH)
def _each(p: Any, eqn: Any, ins: list[Fact]) -> list[Fact]:
    """optimization_barrier and the like: each operand's fact goes to its result."""
    return list(ins)


@implements(Part.PASS, Family.OPAQUE, Family.CONVOLUTION)
def _unknown_linear(p: Any, eqn: Any, ins: list[Fact]) -> list[Fact]:
    """Each result: layout unknown, varying where the operands do (what they owe carried); with
    no operands (``dim_as_value``, random seeds from constants), the same on every device."""
    if not ins:
        return [Fact(None, origin=f"JAX's {prim_name(eqn)!r}", vary=frozenset())] * len(outvars(eqn))
    return fact_of(p, eqn, ins, None, vary=union(*ins)) * len(outvars(eqn))


@implements(Part.PASS, Family.EFFECT)
def _no_value(p: Any, eqn: Any, ins: list[Fact]) -> list[Fact]:
    """Effects (and a debug callback): no value the pass follows."""
    return [UNKNOWN] * len(outvars(eqn))


