"""How each structural and collective primitive moves layouts, varying axes and what is owed
(``kernel_flow``'s rules, one function per primitive kind; ``p`` is the running pass). Params are
read through ``kernel_jax``, which raises ``Unreadable`` for a shape it does not know."""

from __future__ import annotations

from typing import Any, Callable

from .kernel_facts import Dims, Fact, UNKNOWN, axes_text, fmt, split_text
from .kernel_algebra import fact_of as _one, ndim as _ndim, rel_mul, union as _union
from .kernel_collectives import COLLECTIVES
from .kernel_jax import name as prim_name, optional_param, param, shape

__all__ = ["RULES"]


def _rank_dropped(fact: Fact, out: list[Fact]) -> list[Fact]:
    """A prefix whose rank drops (its last row taken, summed over) is a partial sum: each block's
    total."""
    if fact.owed and fact.kind == "prefix":
        for f in out:
            if f.owed:
                f.kind = "sum"
    return out


def _transpose(p: Any, eqn: Any, ins: list[Fact]) -> list[Fact]:
    d = ins[0].dims
    return _one(p, eqn, ins, None if d is None else tuple(d[i] for i in param(eqn, "permutation")))


def _squeeze(p: Any, eqn: Any, ins: list[Fact]) -> list[Fact]:
    d = ins[0].dims
    drop = {i % max(_ndim(eqn.invars[0]), 1) for i in param(eqn, "dimensions")}
    out = _one(p, eqn, ins, None if d is None else tuple(a for i, a in enumerate(d) if i not in drop))
    return _rank_dropped(ins[0], out)


def _broadcast(p: Any, eqn: Any, ins: list[Fact]) -> list[Fact]:
    d = ins[0].dims
    to = param(eqn, "shape")
    if d is None:
        return _one(p, eqn, ins, None)
    out: list = [None] * len(to)
    in_shape = shape(eqn.invars[0])
    for i, o in enumerate(param(eqn, "broadcast_dimensions")):
        out[o] = d[i] if in_shape[i] == to[o] else None
    return _one(p, eqn, ins, tuple(out))


def _reshape(p: Any, eqn: Any, ins: list[Fact]) -> list[Fact]:
    d = ins[0].dims
    if d is None or optional_param(eqn, "dimensions") is not None:
        return _one(p, eqn, ins, None)
    old, new = tuple(shape(eqn.invars[0])), tuple(param(eqn, "new_sizes"))
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
                return _one(p, eqn, ins, None)
        split_in = [k for k in gi if d[k] is None or d[k]]
        if len(gi) == 1 and len(gj) == 1:
            out[gj[0]] = d[gi[0]]
        elif not split_in:  # dims that are not split merge or split into dims that are not
            for k in gj:
                out[k] = ()
        i, j = i + 1, j + 1
    return _one(p, eqn, ins, tuple(out))


def _same_size(p: Any, eqn: Any, ins: list[Fact]) -> list[Fact]:
    """slice, pad, rev, dynamic_slice, dynamic_update_slice, gather...: dims keeping their size
    keep their axes; indices may not owe a sum; indices that vary make the result vary."""
    name = prim_name(eqn)
    for f in ins[1:]:
        if f.owed and name != "dynamic_update_slice":
            p.nonlinear(f"{name} (indexing with a partial sum)", f)
    d = ins[0].dims
    out_shape = shape(eqn.outvars[0])
    in_shape = shape(eqn.invars[0])
    vary = _union(*ins)
    if d is None or len(out_shape) != len(in_shape):
        return _rank_dropped(ins[0], _one(p, eqn, ins, None, vary=vary))
    owed = frozenset().union(*(f.owed for f in ins[:2])) if name == "dynamic_update_slice" else None
    out = _one(p, eqn, ins, tuple(a if o == s else None for a, o, s in zip(d, out_shape, in_shape)), owed,
               vary=vary)
    cut = {a for a, o, s in zip(d, out_shape, in_shape) if o != s for a in (a or ())}
    if ins[0].kind == "prefix" and cut & ins[0].owed:  # rows of a prefix (its last: the block's total)
        return _rank_dropped(ins[0], out)
    return out


def _concatenate(p: Any, eqn: Any, ins: list[Fact]) -> list[Fact]:
    fact = p.elementwise(eqn, ins)
    if fact.dims is not None:
        k = param(eqn, "dimension")
        fact.dims = tuple(None if i == k else a for i, a in enumerate(fact.dims))
    return [fact]


def _split_axes(p: Any, eqn: Any, fact: Fact, dims: Any, blocks_of_one: bool = True) -> frozenset:
    """The manual axes (of more than one device) of ``dims`` of ``fact`` (``blocks_of_one``:
    also of dims with one element per device)."""
    have, sizes = fact.dims or (), shape(eqn.invars[0])
    return frozenset(a for i in dims if i < len(have) and (blocks_of_one or sizes[i] != 1)
                     for a in (have[i] or ()) if a in p.manual)


_REDUCE_KIND = {"reduce_sum": "sum", "reduce_max": "max", "reduce_min": "min"}


def _reduce(p: Any, eqn: Any, ins: list[Fact]) -> list[Fact]:
    d = ins[0].dims
    axes = set(param(eqn, "axes"))
    kept = None if d is None else tuple(a for i, a in enumerate(d) if i not in axes)
    kind = _REDUCE_KIND.get(prim_name(eqn))
    if all(shape(eqn.invars[0])[i] == 1 for i in axes):  # over dims of one element: the value
        return _one(p, eqn, ins, kept)
    if kind is None or d is None:
        return _rank_dropped(ins[0], _one(p, eqn, ins, kept))
    f = ins[0]
    # A dim of one element per device is taken as that element, not as a part the mesh still
    # owes: jnp.einsum and JAX's AD sum over such dims to drop them (the transpose of a
    # broadcast), as with heads/tp and as many heads as tp devices. (A sum over a dim split into
    # one-element blocks is not followed: docs/shard-map.md.)
    summed = _split_axes(p, eqn, f, axes, blocks_of_one=False)
    if f.owed and f.kind == "fold" + kind:  # the blocks a psum added together, now reduced over
        owed = f.owed - _split_axes(p, eqn, f, axes)
        return [f.derived(kept, prim_name(eqn), owed, kind=f.kind if owed else "sum")]
    if f.owed and f.kind == "prefix":
        return _one(p, eqn, ins, kept)  # (a sum of prefixes is not a prefix, nor a block's total)
    if f.owed and f.kind != kind:  # (a sum of maxima, say: neither is paid by what pays the other)
        p.nonlinear(prim_name(eqn), f)
    if not summed:
        return _rank_dropped(f, _one(p, eqn, ins, kept))
    dims = ", ".join(str(i) for i in sorted(axes) if d[i])
    call = {"sum": "a sum (jnp.sum)", "max": "a max (jnp.max)", "min": "a min (jnp.min)"}[kind]
    vary = None if ins[0].vary is None else ins[0].vary | summed
    if ins[0].owed and ins[0].kind == kind:
        return _one(p, eqn, ins, kept, ins[0].owed | summed, ins[0].owed_by, vary=vary)
    by = f"{call} over dim {dims} of a value split over {axes_text(summed)} ({ins[0].origin})"
    return _one(p, eqn, ins, kept, summed, by, kind=kind, vary=vary)


def _cumulative(p: Any, eqn: Any, ins: list[Fact]) -> list[Fact]:
    """cumsum, cummax...: along a split dim, each block's prefix still needs the blocks before."""
    d = ins[0].dims
    if d is None:
        return _one(p, eqn, ins, None)
    axis = param(eqn, "axis")
    split = _split_axes(p, eqn, ins[0], (axis,))
    if split and ins[0].owed and ins[0].kind == "prefix":  # (one carry added later pays one prefix)
        p.nonlinear(f"{prim_name(eqn)} (a prefix of a prefix)", ins[0])
    if not split or ins[0].owed:
        return _one(p, eqn, ins, d)
    by = f"JAX's {prim_name(eqn)!r} along dim {axis} of a value split over {axes_text(split)} ({ins[0].origin})"
    return _one(p, eqn, ins, d, split, by, kind="prefix")


def _dot_general(p: Any, eqn: Any, ins: list[Fact]) -> list[Fact]:
    (lc, rc), (lb, rb) = param(eqn, "dimension_numbers")
    lhs, rhs = ins[0], ins[1]
    owing = [f for f in (lhs, rhs) if f.owed]
    owed, by, _ = p.linear_owed("dot_general", eqn, ins, owing) if owing else (frozenset(), "", "sum")
    contracted: set = set()
    where = []
    for i, j in zip(lc, rc):
        a = lhs.dims[i] if lhs.dims is not None else None
        b = rhs.dims[j] if rhs.dims is not None else None
        if a is not None and b is not None and a != b:
            p.fail(
                f"{p.head}, JAX's 'dot_general' (jnp.einsum, @, jnp.dot) contracts dim {i} of an operand "
                f"laid out {fmt(lhs.dims)} ({lhs.origin}) with dim {j} of one laid out {fmt(rhs.dims)} "
                f"({rhs.origin}): the dim is split over {split_text(a)} in the first but over {split_text(b)} in the second "
                "(move mesh axes with the collectives first); each device would "
                "multiply blocks of different parts of the dim")
        axes = {x for x in (a or b or ()) if x in p.manual}
        if axes:
            where.append(f"dim {i}")
        contracted |= axes
    if contracted and not by:
        by = (f"a dot_general (jnp.einsum, @, jnp.dot) contracting {', '.join(where)} split over "
              f"{axes_text(contracted)} ({lhs.origin})")
    kind = "sum"
    for f in owing:  # (a prefix, or blocks a psum added together, contracted: still wrong)
        if f.kind != "sum":
            kind = f.kind
    owed = owed | frozenset(contracted)
    dims = None
    if lhs.dims is not None or rhs.dims is not None:
        ld = lhs.dims or (None,) * _ndim(eqn.invars[0])
        rd = rhs.dims or (None,) * _ndim(eqn.invars[1])
        batch = tuple(ld[i] if ld[i] == rd[j] or rd[j] is None else (rd[j] if ld[i] is None else None)
                      for i, j in zip(lb, rb))
        free_l = tuple(a for i, a in enumerate(ld) if i not in lc and i not in lb)
        free_r = tuple(a for i, a in enumerate(rd) if i not in rc and i not in rb)
        dims = batch + free_l + free_r
    vary = _union(lhs, rhs)
    rel = rel_mul(lhs.rel, rhs.rel)
    base = lhs if lhs.dims is not None or lhs.owed else rhs
    if dims is None and not owed and vary is None:
        return [UNKNOWN]
    return [base.derived(dims, "dot_general", owed, by, kind=kind, vary=vary, rel=rel,
                         counted=lhs.counted | rhs.counted, mark=lhs.mark or rhs.mark)]


def _iota(p: Any, eqn: Any, ins: list[Fact]) -> list[Fact]:
    """The same on every device; but which global array it is a block of depends on what it is
    combined with (compared with ``ids - axis_index('t') * n`` it indexes a split dim's block):
    its layout is left unknown."""
    return [Fact(None, origin="jax.lax.iota", vary=frozenset())]


def _cut(p: Any, eqn: Any, ins: list[Fact]) -> list[Fact]:
    """jnp.split: each piece keeps the layout, but along the dim it is cut."""
    d = ins[0].dims
    axis = param(eqn, "axis")
    if d is None:
        return _one(p, eqn, ins, None) * len(eqn.outvars)
    dims = tuple(None if i == axis else a for i, a in enumerate(d))
    return _one(p, eqn, ins, dims) * len(eqn.outvars)


def _keep(p: Any, eqn: Any, ins: list[Fact]) -> list[Fact]:
    return _one(p, eqn, ins, ins[0].dims)


def _each(p: Any, eqn: Any, ins: list[Fact]) -> list[Fact]:
    """optimization_barrier and the like: each operand's fact goes to its result."""
    return list(ins)


def _unknown_linear(p: Any, eqn: Any, ins: list[Fact]) -> list[Fact]:
    """Each result: layout unknown, varying where the operands do (what they owe carried); with
    no operands (``dim_as_value``, random seeds from constants), the same on every device."""
    if not ins:
        return [Fact(None, origin=f"JAX's {prim_name(eqn)!r}", vary=frozenset())] * len(eqn.outvars)
    return _one(p, eqn, ins, None, vary=_union(*ins)) * len(eqn.outvars)


def _no_value(p: Any, eqn: Any, ins: list[Fact]) -> list[Fact]:
    return [UNKNOWN] * len(eqn.outvars)


# Primitives whose results the pass does not follow (linear algebra, FFT, scatters other than
# add, random bits, callbacks...): their layout is unknown, they vary where their operands do.
_OPAQUE = frozenset({
    "approx_top_k", "broadcast_to", "cholesky", "cholesky_update", "eig", "eigh", "fft", "lu",
    "lu_pivots_to_permutation", "qr", "svd", "triangular_solve", "tridiagonal", "tridiagonal_solve",
    "householder_product", "hessenberg", "schur", "geqrf", "geqp3", "ormqr", "symmetric_product",
    "ragged_dot_general", "reduce", "reduce_window_min", "reduce_xor", "scatter-max", "scatter-min",
    "scatter-mul", "scatter-sub", "select_and_gather_add", "select_and_scatter", "random_gamma",
    "random_clone", "philox2x32", "philox4x32", "threefry4x32", "iota_2x32_shape", "tile", "stack",
    "unstack", "zeros_like", "dim_as_value", "dimension_size", "pure_callback", "io_callback", "ffi_call",
    "scaled_dot", "scaled_matmul", "scaled_matmul_wrapper", "dot_product_attention_fwd",
    "dot_product_attention_fwd_wrapper", "dot_product_attention_bwd", "dot_product_attention_bwd_wrapper",
    "custom_partitioning", "custom_linear_solve", "linear_call", "custom_lin", "platform_index",
})
# Primitives that hand their operand on unchanged (layout hints, names).
_IDENTITY = frozenset({"layout_constraint", "relayout", "with_memory_space_constraint", "name", "pin", "unpin",
                       "program_order"})
# Effects with no value of their own.
_EFFECTS = frozenset({"debug_print", "check", "shape_assertion", "dce_sink", "after_all", "create_token"})


RULES: dict[str, Callable[[Any, Any, list[Fact]], list[Fact]]] = {**COLLECTIVES,
    "transpose": _transpose, "squeeze": _squeeze, "broadcast_in_dim": _broadcast, "reshape": _reshape,
    "slice": _same_size, "pad": _same_size, "rev": _same_size, "dynamic_slice": _same_size,
    "dynamic_update_slice": _same_size, "gather": _same_size, "concatenate": _concatenate,
    "reduce_sum": _reduce, "reduce_max": _reduce, "reduce_min": _reduce, "reduce_prod": _reduce,
    "argmax": _reduce, "argmin": _reduce, "reduce_and": _reduce, "reduce_or": _reduce,
    "dot_general": _dot_general,
    "cumsum": _cumulative, "cummax": _cumulative, "cummin": _cumulative, "cumprod": _cumulative,
    "cumlogsumexp": _cumulative, "iota": _iota,
    "sort": _unknown_linear, "optimization_barrier": _each, "scatter-add": _unknown_linear,
    "scatter_add": _unknown_linear, "scatter": _unknown_linear, "top_k": _unknown_linear,
    "split": _cut, "select_and_scatter_add": _unknown_linear, "reduce_window_sum": _unknown_linear,
    "reduce_window_max": _unknown_linear, "reduce_window": _unknown_linear, "conv_general_dilated": _unknown_linear,
    "random_bits": _unknown_linear, "random_seed": _unknown_linear, "random_wrap": _unknown_linear,
    "random_unwrap": _unknown_linear, "random_fold_in": _unknown_linear, "random_split": _unknown_linear,
    "threefry2x32": _unknown_linear, "rng_bit_generator": _unknown_linear, "rng_uniform": _unknown_linear,
    "argsort": _unknown_linear, "sharding_constraint": _keep, "mesh_cast": _keep,
    **{name: _unknown_linear for name in _OPAQUE}, **{name: _keep for name in _IDENTITY},
    **{name: _no_value for name in _EFFECTS},
    "reshard": _keep, "device_put": _each, "debug_callback": lambda p, eqn, ins: [UNKNOWN] * len(eqn.outvars), "copy_p": _keep, "copy": _keep,
}
