"""How each structural and collective primitive moves layouts and owed sums (``kernel_flow``'s
rules, one function per primitive kind; ``p`` is the running pass)."""

from __future__ import annotations

from typing import Any, Callable

from typeguard import TypeCheckError

from .kernel_facts import Dims, Fact, UNKNOWN, axes_text, fmt

__all__ = ["RULES"]

def _ndim(v: Any) -> int:
    return len(getattr(v.aval, "shape", ()))


def _one(p: Any, eqn: Any, ins: list[Fact], dims: Dims | None, owed: frozenset | None = None,
         owed_by: str = "") -> list[Fact]:
    src = ins[0]
    if src.dims is None and not src.owed and owed is None:
        return [UNKNOWN]
    return [src.derived(dims if src.dims is not None else None, eqn.primitive.name, owed, owed_by)]


def _transpose(p: Any, eqn: Any, ins: list[Fact]) -> list[Fact]:
    d = ins[0].dims
    return _one(p, eqn, ins, None if d is None else tuple(d[i] for i in eqn.params["permutation"]))


def _squeeze(p: Any, eqn: Any, ins: list[Fact]) -> list[Fact]:
    d = ins[0].dims
    drop = {i % max(len(d or ()), 1) for i in eqn.params["dimensions"]}
    return _one(p, eqn, ins, None if d is None else tuple(a for i, a in enumerate(d) if i not in drop))


def _broadcast(p: Any, eqn: Any, ins: list[Fact]) -> list[Fact]:
    d = ins[0].dims
    shape = eqn.params["shape"]
    if d is None:
        return _one(p, eqn, ins, None)
    out: list = [None] * len(shape)
    in_shape = eqn.invars[0].aval.shape
    for i, o in enumerate(eqn.params["broadcast_dimensions"]):
        out[o] = d[i] if in_shape[i] == shape[o] else None
    return _one(p, eqn, ins, tuple(out))


def _reshape(p: Any, eqn: Any, ins: list[Fact]) -> list[Fact]:
    d = ins[0].dims
    if d is None or eqn.params.get("dimensions") is not None:
        return _one(p, eqn, ins, None)
    old, new = tuple(eqn.invars[0].aval.shape), tuple(eqn.params["new_sizes"])
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
    keep their axes; indices may not owe a sum."""
    for f in ins[1:]:
        if f.owed and eqn.primitive.name != "dynamic_update_slice":
            p.nonlinear(f"{eqn.primitive.name} (indexing with a partial sum)", f)
    d = ins[0].dims
    out_shape = eqn.outvars[0].aval.shape
    in_shape = eqn.invars[0].aval.shape
    if d is None or len(out_shape) != len(in_shape):
        return _one(p, eqn, ins, None)
    owed = frozenset().union(*(f.owed for f in ins[:2])) if eqn.primitive.name == "dynamic_update_slice" else None
    return _one(p, eqn, ins, tuple(a if o == s else None for a, o, s in zip(d, out_shape, in_shape)), owed)


def _concatenate(p: Any, eqn: Any, ins: list[Fact]) -> list[Fact]:
    fact = p.elementwise(eqn, ins)
    if fact.dims is not None:
        k = eqn.params["dimension"]
        fact.dims = tuple(None if i == k else a for i, a in enumerate(fact.dims))
    return [fact]


def _reduce(p: Any, eqn: Any, ins: list[Fact]) -> list[Fact]:
    d = ins[0].dims
    axes = set(eqn.params["axes"])
    kept = None if d is None else tuple(a for i, a in enumerate(d) if i not in axes)
    if eqn.primitive.name != "reduce_sum" or d is None:
        return _one(p, eqn, ins, kept)
    # A dim of one element per device is taken as that element (jnp and AD sum over such dims to
    # drop them: the transpose of a broadcast), not as a sum the mesh still owes.
    shape = eqn.invars[0].aval.shape
    summed = frozenset(a for i in axes if shape[i] != 1 for a in (d[i] or ()) if a in p.manual)
    if not summed:
        return _one(p, eqn, ins, kept)
    dims = ", ".join(str(i) for i in sorted(axes) if d[i])
    return _one(p, eqn, ins, kept, ins[0].owed | summed,
                ins[0].owed_by or f"a sum (jnp.sum) over dim {dims} of a value split over {axes_text(summed)} "
                f"({ins[0].origin})")


def _dot_general(p: Any, eqn: Any, ins: list[Fact]) -> list[Fact]:
    (lc, rc), (lb, rb) = eqn.params["dimension_numbers"]
    lhs, rhs = ins[0], ins[1]
    owing = [f for f in (lhs, rhs) if f.owed]
    owed, by = p.linear_owed("dot_general", eqn, ins, owing) if owing else (frozenset(), "")
    contracted: set = set()
    where = []
    for i, j in zip(lc, rc):
        a = lhs.dims[i] if lhs.dims is not None else None
        b = rhs.dims[j] if rhs.dims is not None else None
        if a is not None and b is not None and a != b:
            raise TypeCheckError(
                f"{p.head}, JAX's 'dot_general' (jnp.einsum, @, jnp.dot) contracts dim {i} of an operand "
                f"laid out {fmt(lhs.dims)} ({lhs.origin}) with dim {j} of one laid out {fmt(rhs.dims)} "
                f"({rhs.origin}): the dim is split over {_split(a)} in the first but over {_split(b)} in the second "
                "(move mesh axes with the collectives first); each device would "
                "multiply blocks of different parts of the dim")
        axes = {x for x in (a or b or ()) if x in p.manual}
        if axes:
            where.append(f"dim {i}")
        contracted |= axes
    if contracted and not by:
        by = (f"a dot_general (jnp.einsum, @, jnp.dot) contracting {', '.join(where)} split over "
              f"{axes_text(contracted)} ({lhs.origin})")
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
    base = lhs if lhs.dims is not None or lhs.owed else rhs
    if dims is None and not owed:
        return [UNKNOWN]
    return [base.derived(dims, "dot_general", owed, by)]


def _psum(p: Any, eqn: Any, ins: list[Fact]) -> list[Fact]:
    paid = frozenset(a for a in eqn.params["axes"] if isinstance(a, str))
    return [UNKNOWN if f.dims is None and not f.owed else f.derived(f.dims, "psum", f.owed - paid)
            for f in ins]


def _axis_names(eqn: Any) -> tuple:
    names = eqn.params["axis_name"]
    return tuple(names) if isinstance(names, (tuple, list)) else (names,)


def _gathered(p: Any, eqn: Any, fact: Fact, dim: int) -> tuple | None:
    """The axes of ``dim`` once a tiled gather over the eqn's axes has undone them."""
    names = tuple(a for a in _axis_names(eqn) if a in p.manual)
    dims = fact.dims
    axes = dims[dim] if dims is not None else None
    if dims is None or axes is None:
        return None
    if not axes:
        return None  # gathering a dim that is not split: copies side by side
    if tuple(axes[len(axes) - len(names):]) != names:
        raise TypeCheckError(
            f"{p.head}, JAX's {eqn.primitive.name!r} gathers dim {dim} over {axes_text(names)}, but that dim of "
            f"its operand is laid out {fmt(dims)} ({fact.origin}): that dim is split over {_split(axes)}; "
            f"only the last mesh axes a dim is split over can be gathered")
    return tuple(axes[:len(axes) - len(names)])


def _split(axes: tuple) -> str:
    return "/".join(repr(a) for a in axes) if axes else "no mesh axis"


def _all_gather(p: Any, eqn: Any, ins: list[Fact]) -> list[Fact]:
    f = ins[0]
    dim = eqn.params["all_gather_dimension"]
    if f.dims is None:
        return _one(p, eqn, ins, None)
    if not eqn.params.get("tiled", False):
        return _one(p, eqn, ins, f.dims[:dim] + (None,) + f.dims[dim:])
    dims = list(f.dims)
    dims[dim] = _gathered(p, eqn, f, dim)
    return _one(p, eqn, ins, tuple(dims))


def _all_to_all(p: Any, eqn: Any, ins: list[Fact]) -> list[Fact]:
    f = ins[0]
    if f.dims is None or not eqn.params.get("tiled", False):
        return _one(p, eqn, ins, None)
    split, concat = eqn.params["split_axis"], eqn.params["concat_axis"]
    dims = list(f.dims)
    dims[concat] = _gathered(p, eqn, f, concat)
    if dims[split] is not None:
        dims[split] = dims[split] + tuple(a for a in _axis_names(eqn) if a in p.manual)
    return _one(p, eqn, ins, tuple(dims))


def _reduce_scatter(p: Any, eqn: Any, ins: list[Fact]) -> list[Fact]:
    f = ins[0]
    names = tuple(a for a in _axis_names(eqn) if a in p.manual)
    owed = f.owed - frozenset(names)
    if f.dims is None or not eqn.params.get("tiled", False):
        return _one(p, eqn, ins, None, owed)
    dims = list(f.dims)
    k = eqn.params["scatter_dimension"]
    dims[k] = None if dims[k] is None else dims[k] + names
    return _one(p, eqn, ins, tuple(dims), owed)


def _keep(p: Any, eqn: Any, ins: list[Fact]) -> list[Fact]:
    return _one(p, eqn, ins, ins[0].dims)


def _each(p: Any, eqn: Any, ins: list[Fact]) -> list[Fact]:
    """optimization_barrier and the like: each operand's fact goes to its result."""
    return list(ins)


def _unknown_linear(p: Any, eqn: Any, ins: list[Fact]) -> list[Fact]:
    return _one(p, eqn, ins, None)


RULES: dict[str, Callable[[Any, Any, list[Fact]], list[Fact]]] = {
    "transpose": _transpose, "squeeze": _squeeze, "broadcast_in_dim": _broadcast, "reshape": _reshape,
    "slice": _same_size, "pad": _same_size, "rev": _same_size, "dynamic_slice": _same_size,
    "dynamic_update_slice": _same_size, "gather": _same_size, "concatenate": _concatenate,
    "reduce_sum": _reduce, "reduce_max": _reduce, "reduce_min": _reduce, "reduce_prod": _reduce,
    "argmax": _reduce, "argmin": _reduce, "reduce_and": _reduce, "reduce_or": _reduce,
    "dot_general": _dot_general, "psum": _psum, "psum_invariant": _psum, "psum2": _psum,
    "pmax": _psum, "pmin": _psum, "all_gather": _all_gather, "all_gather_invariant": _all_gather,
    "all_to_all": _all_to_all, "reduce_scatter": _reduce_scatter, "ppermute": _keep,
    "cumsum": _keep, "cummax": _keep, "cummin": _keep, "cumprod": _keep, "cumlogsumexp": _keep,
    "sort": _unknown_linear, "optimization_barrier": _each, "scatter-add": _unknown_linear, "scatter_add": _unknown_linear,
}
