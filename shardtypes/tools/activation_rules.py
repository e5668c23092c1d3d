"""The rules of the activation estimate (``activations``), one primitive at a time: which values
XLA fuses away (``fused``), which results are their operands (``passed_through``), a value's
per-device shape (``local_shape``), whether a matmul leaves each device a partial sum
(``partial_sum``), a loop's carries (``loop_carries``) and, on Auto axes, how its operands'
splits carry over to it (``auto_splits``, ``backward_splits``).

Reads JAX's equations through ``checking.jaxprs``.
"""

from __future__ import annotations

import math
from typing import Any

from ..checking import jaxprs, primitives
from ..language import entry_axes

__all__ = ["fused", "dead", "passed_through", "local_shape", "auto_splits", "backward_splits", "spec_parts", "ones",
           "partial_sum", "loop_carries", "FUSING"]


# Elementwise primitives (and broadcasts), which XLA fuses into their consumers: a value one of
# them makes is not written to memory when every use of it is another of them, in a fusion.
_ELEMENTWISE = frozenset("""
    abs acos acosh add add_any and asin asinh atan atan2 atanh broadcast_in_dim cbrt ceil clamp
    convert_element_type copy copy_p cos cosh div eq erf erf_inv erfc exp exp2 expm1 floor ge gt imag
    integer_pow is_finite le lgamma log log1p logistic lt max min mul ne neg nextafter not or pow
    real reduce_precision rem round rsqrt select_n sign sin sinh sqrt square sub tan tanh xor
""".split()) | frozenset(primitives.ELEMENTWISE_ADDED)

# Slices in and out of a window, which XLA computes inside the fusion that reads them (a
# gradient accumulated into one layer of a stacked array, ``zeros.at[i].set(g)`` added to the
# accumulator, is one loop fusion, in place): fused like elementwise ops, though their shapes differ.
_WINDOWS = frozenset({"dynamic_slice", "dynamic_update_slice"})


# What XLA fuses an elementwise producer into: other elementwise ops, slices, and reductions (an
# input fusion reads the producer's values as it reduces them).
FUSING = _ELEMENTWISE | _WINDOWS | frozenset({"reduce_sum", "reduce_max", "reduce_min", "reduce_prod",
                                              "reduce_and", "reduce_or", "argmax", "argmin"})


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
        name = jaxprs.name(eqn)
        for v in jaxprs.invars(eqn):
            if not jaxprs.is_literal(v):
                readers.setdefault(v, []).append(name)
        if name in _ELEMENTWISE or name in _WINDOWS:
            for v in jaxprs.outvars(eqn):
                producer[v] = name
    return {v for v in producer if v not in outs and readers.get(v)
            and all(r in FUSING for r in readers[v])}


def passed_through(eqn: Any) -> dict:
    """The results of a call (jit, remat, custom rules) that are one of its operands as they are,
    or an earlier result again: result -> the operand (or result) it is. (Not a scan's: its
    body's results are slices of its stacked results.)"""
    call = jaxprs.call_jaxpr(eqn) if jaxprs.sub_jaxprs(eqn) and jaxprs.name(eqn) != "scan" else None
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


def spec_parts(spec: Any, ndim: int, sizes: dict) -> tuple:
    """Per dim, into how many parts a PartitionSpec's entry splits it over the mesh axes in
    ``sizes`` (axes not there count as one part)."""
    spec = tuple(spec or ())
    return tuple(math.prod(sizes.get(a, 1) for a in entry_axes(spec[i] if i < len(spec) else None))
                 for i in range(ndim))


def ones(aval: Any) -> tuple:
    return (1,) * len(getattr(aval, "shape", ()))


def local_shape(aval: Any, splits: tuple | None) -> tuple | None:
    """The per-device shape: the aval's own sharding (Explicit axes; local already under manual
    axes), times the Auto-axes splits; None where a dim is symbolic."""
    shape = tuple(getattr(aval, "shape", ()))
    sharding = getattr(aval, "sharding", None)
    try:
        sizes = dict(sharding.mesh.shape) if sharding is not None else {}
    except Exception:
        sizes = {}
    split = spec_parts(getattr(sharding, "spec", ()), len(shape), sizes)
    local = []
    for i, size in enumerate(shape):
        if not isinstance(size, int):
            return None
        parts = split[i]
        if splits is not None and i < len(splits):
            parts *= splits[i]
        local.append(-(-size // parts) if parts > 1 else size)
    return tuple(local)


def auto_splits(eqn: Any, ins: list) -> list:
    """How many ways each result dim is split over Auto axes, following the operands: a
    ``dot_general`` keeps the splits of its batch and free dims (a contracted dim's split leaves a
    sum, which XLA reduces), ``broadcast_in_dim`` and ``transpose`` move them, a reduction drops
    the reduced dims', ``reshape`` moves them with the dims they belong to; any other primitive gives
    each result the splits of the operands of its shape (the most split, dim by dim), or none."""
    name = jaxprs.name(eqn)
    operands = jaxprs.invars(eqn)
    outs = jaxprs.outvars(eqn)
    shapes = [jaxprs.shape(v) for v in operands]
    split = [s if s is not None else (1,) * len(sh) for s, sh in zip(ins, shapes)]
    if name == "dot_general":
        (lc, rc), (lb, rb) = jaxprs.param(eqn, "dimension_numbers")
        lhs, rhs = split[0], split[1]
        lfree = [d for d in range(len(lhs)) if d not in lc and d not in lb]
        rfree = [d for d in range(len(rhs)) if d not in rc and d not in rb]
        return [tuple([max(lhs[a], rhs[b]) for a, b in zip(lb, rb)]
                      + [lhs[d] for d in lfree] + [rhs[d] for d in rfree])]
    if name == "broadcast_in_dim":
        out = [1] * len(jaxprs.shape(outs[0]))
        for i, d in enumerate(jaxprs.param(eqn, "broadcast_dimensions")):
            if shapes[0][i] == jaxprs.shape(outs[0])[d]:
                out[d] = split[0][i]
        return [tuple(out)]
    if name == "transpose":
        return [tuple(split[0][p] for p in jaxprs.param(eqn, "permutation"))]
    if name.startswith(("reduce_", "argmax", "argmin")) and jaxprs.optional_param(eqn, "axes") is not None:
        reduced = set(jaxprs.param(eqn, "axes"))
        kept = tuple(s for d, s in enumerate(split[0]) if d not in reduced)
        return [kept] * len(outs)
    if name in ("reshape", "squeeze"):
        return [reshaped(shapes[0], split[0], jaxprs.shape(outs[0]))]
    if name == "dynamic_slice":  # a dim taken whole keeps its split (one layer of a stacked weight)
        out_shape = jaxprs.shape(outs[0])
        return [tuple(s if n == m else 1 for s, n, m in zip(split[0], shapes[0], out_shape))]
    if name == "dynamic_update_slice":  # the operand's splits, and the update's of the dims it fills
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
    name = jaxprs.name(eqn)
    try:
        if name == "scan":
            consts, carries = jaxprs.scan_groups(eqn)
            return list(zip(jaxprs.invars(eqn)[consts:consts + carries], jaxprs.outvars(eqn)[:carries]))
        if name == "while":
            cond_n, body_n = jaxprs.while_groups(eqn)
            return list(zip(jaxprs.invars(eqn)[cond_n + body_n:], jaxprs.outvars(eqn)))
    except (jaxprs.Unreadable, TypeError, ValueError):
        pass
    return []


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
        name = jaxprs.name(eqn)
        for u, o in loop_carries(eqn):
            start, end = settled.get(u), settled.get(o)
            if not jaxprs.is_literal(u) and start is not None and end is not None and len(start) == len(end):
                settled[u] = tuple(max(a, b) for a, b in zip(start, end))
        if name not in _ELEMENTWISE or len(outs) != 1:
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
            elif name == "broadcast_in_dim":  # an operand dim kept whole in the result
                dims = jaxprs.optional_param(eqn, "broadcast_dimensions") or ()
                operand = jaxprs.shape(v)
                settled[v] = tuple(max(own[i], result[d]) if i < len(operand) and operand[i] == shape[d] else own[i]
                                   for i, d in enumerate(dims))
    return settled


def partial_sum(eqn: Any, ins: list) -> bool:
    """Whether a ``dot_general`` contracts a dim split over the mesh (by its operands' shardings on
    Explicit axes, or by ``ins``, their splits over Auto axes): each device then holds a partial
    sum the size of the result, which XLA all-reduces into a buffer of its own."""
    if jaxprs.name(eqn) != "dot_general":
        return False
    contracted, _ = jaxprs.param(eqn, "dimension_numbers")
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
    try:
        mesh = sharding.mesh
        types = getattr(mesh, "axis_types", None) or ()
        manual = {a for a, t in zip(mesh.axis_names, types) if "Manual" in str(t)}
        return {a: n for a, n in dict(mesh.shape).items() if a not in manual}
    except Exception:
        return {}
