"""The rules of the activation estimate (``activations``), one primitive at a time: which values
XLA fuses away (``fused``), which results are their operands (``passed_through``), a value's
per-device shape (``local_shape``), whether a matmul leaves each device a partial sum
(``partial_sum``), a loop's carries (``loop_carries``) and, on Auto axes, how its operands'
splits carry over to it (``auto_splits``, ``backward_splits``).

Reads JAX's equations through ``checking.jaxprs``.
"""

from __future__ import annotations

from typing import Any

from ..checking import jaxpr_walk, jaxprs, primitives
from ..layout import per_device_shape, spec_parts

Family = primitives.Family
Primitive = primitives.Primitive

__all__ = ["fused", "fusing", "dead", "passed_through", "local_shape", "auto_splits", "backward_splits",
           "spec_parts", "ones", "partial_sum", "loop_carries"]


# What XLA fuses into its consumers (the records' ``fuses``): elementwise primitives and
# broadcasts, whose values are not written to memory when every use is another of them in a
# fusion; and the slices in and out of a window (``dynamic_slice``, ``dynamic_update_slice``),
# which XLA computes inside the fusion that reads them (a gradient accumulated into one layer of
# a stacked array, ``zeros.at[i].set(g)`` added to the accumulator, is one loop fusion, in place).


def _window(prim: Primitive) -> bool:
    """A slice in or out of a window (fused though its shapes differ from its operand's)."""
    return prim.family is Family.SAME_SIZE and prim.fuses


def fusing(prim: Primitive) -> bool:
    """What XLA fuses an elementwise producer into: other fusing primitives, and reductions (an
    input fusion reads the producer's values as it reduces them)."""
    return prim.fuses or prim.family is Family.REDUCE


def dead(eqns: list, outs: set) -> set:
    """The indices of the equations nothing needs: no result of theirs reaches an output or an
    equation with effects (XLA removes them; shardtypes' own compile-time checks are such)."""
    needed = set(outs)
    gone: set = set()
    for i in range(len(eqns) - 1, -1, -1):
        eqn = eqns[i]
        if jaxprs.has_effects(eqn) or any(v in needed for v in jaxprs.outvars(eqn)):
            needed.update(v for v in jaxprs.invars(eqn) if not jaxprs.is_literal(v))
        else:
            gone.add(i)
    return gone


def fused(eqns: list, outs: set) -> set:
    """The values an elementwise primitive makes that only elementwise primitives and reductions
    read (and that are not outputs): XLA fuses them away."""
    producer: dict = {}
    readers: dict = {}
    for eqn in eqns:
        prim = jaxpr_walk.primitive_of(eqn)
        for v in jaxprs.invars(eqn):
            if not jaxprs.is_literal(v):
                readers.setdefault(v, []).append(prim)
        if prim.fuses:
            for v in jaxprs.outvars(eqn):
                producer[v] = prim
    return {v for v in producer if v not in outs and readers.get(v)
            and all(fusing(r) for r in readers[v])}


def passed_through(eqn: Any) -> dict:
    """The results of a call (jit, remat, custom rules) that are one of its operands as they are,
    or an earlier result again: result -> the operand (or result) it is. (Not a scan's: its
    body's results are slices of its stacked results.)"""
    if jaxpr_walk.primitive_of(eqn).family is not Family.CALL:
        return {}
    call = jaxprs.call_jaxpr(eqn)
    if call is None:
        return {}
    outer_of = dict(zip(jaxprs.invars(call), jaxprs.invars(eqn)))
    first: dict = {}
    found: dict = {}
    for inner, outer in zip(jaxprs.outvars(call), jaxprs.outvars(eqn)):
        if jaxprs.is_literal(inner):
            continue
        if inner in outer_of:
            found[outer] = outer_of[inner]
        elif inner in first:
            found[outer] = first[inner]
        else:
            first[inner] = outer
    return found


def ones(aval: Any) -> tuple:
    return (1,) * len(getattr(aval, "shape", ()))


def local_shape(aval: Any, splits: tuple | None) -> tuple | None:
    """The per-device shape of a jaxpr value (``layout.per_device_shape``): the aval's own
    sharding (Explicit axes; local already under manual axes), times the Auto-axes splits; None
    where a dim is symbolic. (A future's aval: the value it will hold.)"""
    aval = getattr(aval, "inner_aval", aval)
    shape = tuple(getattr(aval, "shape", ()))
    sharding = getattr(aval, "sharding", None)
    mesh = getattr(sharding, "mesh", None)
    sizes: dict[str, int] = dict(zip(getattr(mesh, "axis_names", ()), getattr(mesh, "axis_sizes", ())))
    return per_device_shape(shape, spec_parts(getattr(sharding, "spec", None), len(shape), sizes), splits)


def auto_splits(eqn: Any, ins: list) -> list:
    """How many ways each result dim is split over Auto axes, following the operands: a
    ``dot_general`` keeps the splits of its batch and free dims (a contracted dim's split leaves a
    sum, which XLA reduces), ``broadcast_in_dim`` and ``transpose`` move them, a reduction drops
    the reduced dims', ``reshape`` moves them with the dims they belong to; any other primitive gives
    each result the splits of the operands of its shape (the most split, dim by dim), or none."""
    prim = jaxpr_walk.primitive_of(eqn)
    family = prim.family
    operands = jaxprs.invars(eqn)
    outs = jaxprs.outvars(eqn)
    shapes = [jaxprs.shape(v) for v in operands]
    split = [s if s is not None else (1,) * len(sh) for s, sh in zip(ins, shapes)]
    if family is Family.CONTRACTION:
        spec = jaxprs.contraction(eqn)
        (lc, rc), (lb, rb) = spec.dimension_numbers
        lhs, rhs = split[0], split[1]
        lfree = [d for d in range(len(lhs)) if d not in lc and d not in lb]
        rfree = [d for d in range(len(rhs)) if d not in rc and d not in rb and d not in spec.rhs_dropped]
        return [tuple([max(lhs[a], rhs[b]) for a, b in zip(lb, rb)]
                      + [lhs[d] for d in lfree] + [rhs[d] for d in rfree])]
    if family is Family.BROADCAST:
        out = [1] * len(jaxprs.shape(outs[0]))
        for i, d in enumerate(jaxprs.param(eqn, "broadcast_dimensions")):
            if shapes[0][i] == jaxprs.shape(outs[0])[d]:
                out[d] = split[0][i]
        return [tuple(out)]
    if family is Family.TRANSPOSE:
        return [tuple(split[0][p] for p in jaxprs.param(eqn, "permutation"))]
    if family is Family.REDUCE and jaxprs.optional_param(eqn, "axes") is not None:
        reduced = set(jaxprs.param(eqn, "axes"))
        kept = tuple(s for d, s in enumerate(split[0]) if d not in reduced)
        return [kept] * len(outs)
    if family in (Family.RESHAPE, Family.SQUEEZE):
        return [reshaped(shapes[0], split[0], jaxprs.shape(outs[0]))]
    if _window(prim) and not prim.writes_into:  # a dim taken whole keeps its split (one layer of a stacked weight)
        out_shape = jaxprs.shape(outs[0])
        return [tuple(s if n == m else 1 for s, n, m in zip(split[0], shapes[0], out_shape))]
    if _window(prim):  # the operand's splits, and the update's of the dims it fills
        update = split[1] if len(split) > 1 else ()
        return [tuple(max(s, update[d]) if d < len(update) and shapes[1][d] == n else s
                      for d, (s, n) in enumerate(zip(split[0], shapes[0])))]
    result = []
    for v in outs:
        out_shape = jaxprs.shape(v)
        same = [s for s, sh in zip(split, shapes) if sh == out_shape]
        result.append(tuple(max(dims) for dims in zip(*same)) if same and out_shape else (1,) * len(out_shape))
    return result


def reshaped(shape: tuple, split: tuple, out_shape: tuple) -> tuple:
    """The splits of a reshape's result: dims of size 1 aside, each group of operand dims that
    makes a group of result dims (one to one, merged or divided) gives its major dim's split to
    the group's major result dim, where it divides."""
    out = [1] * len(out_shape)
    i = j = 0
    while i < len(shape) and j < len(out_shape):
        if shape[i] == 1:
            i += 1
            continue
        if out_shape[j] == 1:
            j += 1
            continue
        first_in, first_out, a, b = i, j, shape[i], out_shape[j]
        while a != b:
            if a < b:
                i += 1
                a *= shape[i]
            else:
                j += 1
                b *= out_shape[j]
        if out_shape[first_out] % split[first_in] == 0:
            out[first_out] = split[first_in]
        i += 1
        j += 1
    return tuple(out)


def loop_carries(eqn: Any) -> list:
    """(initial value, result) of each carry of a scan or while loop; [] for anything else."""
    prim = jaxpr_walk.primitive_of(eqn)
    if prim.family not in (Family.SCAN, Family.WHILE):
        return []
    try:
        inside = jaxpr_walk.nesting(eqn, prim)
    except jaxprs.Unreadable:
        return []
    if inside is None:
        return []
    if prim.family is Family.SCAN:
        consts, carries = inside.consts, inside.carries
        return list(zip(jaxprs.invars(eqn)[consts:consts + carries], jaxprs.outvars(eqn)[:carries]))
    return list(zip(jaxprs.invars(eqn)[inside.consts + inside.carries:], jaxprs.outvars(eqn)))


def backward_splits(eqns: list, splits: dict) -> dict:
    """``splits`` (value -> splits over Auto axes, from a walk forward) with each operand of an
    elementwise op that has the result's shape split at least as the result is, walking back:
    XLA lays out a mask, an ``iota`` or a broadcast counter like the activation it is combined
    with, though nothing before it is split. A loop's carry starts split as it ends (XLA gives
    the initial value the layout of the loop's buffer: a gradient accumulator, zeros, is laid
    out like the gradients added to it)."""
    settled = dict(splits)
    for eqn in reversed(eqns):
        outs = jaxprs.outvars(eqn)
        prim = jaxpr_walk.primitive_of(eqn)
        for u, o in loop_carries(eqn):
            start, end = settled.get(u), settled.get(o)
            if not jaxprs.is_literal(u) and start is not None and end is not None and len(start) == len(end):
                settled[u] = tuple(max(a, b) for a, b in zip(start, end))
        if not prim.fuses or _window(prim) or len(outs) != 1:
            continue
        result = settled.get(outs[0])
        shape = jaxprs.shape(outs[0])
        if result is None or len(result) != len(shape):
            continue
        for v in jaxprs.invars(eqn):
            own = settled.get(v) if not jaxprs.is_literal(v) else None
            if own is None:
                continue
            if jaxprs.shape(v) == shape and len(own) == len(result):
                settled[v] = tuple(max(a, b) for a, b in zip(own, result))
            elif prim.family is Family.BROADCAST:  # an operand dim kept whole in the result
                dims = jaxprs.optional_param(eqn, "broadcast_dimensions") or ()
                operand = jaxprs.shape(v)
                settled[v] = tuple(max(own[i], result[d]) if i < len(operand) and operand[i] == shape[d] else own[i]
                                   for i, d in enumerate(dims))
    return settled


def partial_sum(eqn: Any, ins: list) -> bool:
    """Whether a ``dot_general`` contracts a dim split over the mesh (by its operands' shardings on
    Explicit axes, or by ``ins``, their splits over Auto axes): each device then holds a partial
    sum the size of the result, which XLA all-reduces into a buffer of its own."""
    if jaxpr_walk.primitive_of(eqn).family is not Family.CONTRACTION:
        return False
    contracted, _ = jaxprs.contraction(eqn).dimension_numbers
    for v, dims, auto in zip(jaxprs.invars(eqn)[:2], contracted, ins[:2] if ins else (None, None)):
        aval = jaxprs.aval(v)
        sharding = getattr(aval, "sharding", None)
        split = spec_parts(getattr(sharding, "spec", ()), len(jaxprs.shape(v)), _split_axes(sharding))
        if any(split[d] > 1 or (auto is not None and d < len(auto) and auto[d] > 1) for d in dims):
            return True
    return False


def _split_axes(sharding: Any) -> dict:
    """The sizes of the mesh axes a value's sharding splits it over as a whole array (Explicit
    and Auto; not Manual axes, inside a kernel, where shapes are local)."""
    mesh = getattr(sharding, "mesh", None)
    names, sizes = getattr(mesh, "axis_names", None), getattr(mesh, "axis_sizes", None)
    if names is None or sizes is None:
        return {}
    types = getattr(mesh, "axis_types", None) or ()
    manual = {a for a, t in zip(names, types) if "Manual" in str(t)}
    return {a: n for a, n in zip(names, sizes) if a not in manual}
