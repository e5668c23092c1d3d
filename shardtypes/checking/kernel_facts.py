"""What the jaxpr pass over a kernel body (``kernel_flow``) knows of a value (``Fact``), what the
side table asks it to compare (``Point``), and which primitives are elementwise or nonlinear."""

from __future__ import annotations

from typing import Iterable

from ..model.describe import _fmt_layout

__all__ = ["Dims", "Fact", "Point", "UNKNOWN", "NONLINEAR", "ELEMENTWISE", "fmt", "axes_text", "owed_text"]

Dims = tuple  # per dim: a tuple of mesh axes, or None (unknown)

# Primitives that are not linear in any operand: a partial sum may not reach them.
NONLINEAR = frozenset({
    "exp", "exp2", "log", "log1p", "expm1", "tanh", "logistic", "sin", "cos", "tan", "asin", "acos",
    "atan", "sinh", "cosh", "asinh", "acosh", "atanh", "sqrt", "rsqrt", "cbrt", "pow", "integer_pow",
    "square", "abs", "sign", "floor", "ceil", "round", "max", "min", "erf", "erfc", "erf_inv", "lgamma",
    "digamma", "atan2", "rem", "lt", "le", "gt", "ge", "eq", "ne", "is_finite", "clamp", "nextafter",
    "reduce_max", "reduce_min", "reduce_prod", "argmax", "argmin", "cummax", "cummin", "cumprod",
    "cumlogsumexp", "sort", "top_k", "pmax", "pmin", "reduce_and", "reduce_or", "and", "or", "not",
    "xor", "population_count", "shift_left", "shift_right_logical", "shift_right_arithmetic",
})
# Primitives applied element by element (all operands of the result's shape, or scalars).
ELEMENTWISE = NONLINEAR - {
    "reduce_max", "reduce_min", "reduce_prod", "argmax", "argmin", "cummax", "cummin", "cumprod",
    "cumlogsumexp", "sort", "top_k", "pmax", "pmin", "reduce_and", "reduce_or",
} | {"add", "sub", "mul", "div", "neg", "add_any", "convert_element_type", "copy", "copy_p", "real",
     "imag", "conj", "select_n", "pvary", "vary_unreduced_cast_p", "cumsum", "reduce_precision"}

# What JAX inserts itself (check_vma's casts): not named in where a value comes from.
_UNSEEN = frozenset({"pvary", "vary_unreduced_cast_p"})


class Fact:
    """What the pass knows of one value: its layout (or None), the mesh axes it owes a sum over,
    and where both come from (``origin``: the value it was computed from, and the last few
    primitives on the way, kept as names and only spelled out for a message)."""

    __slots__ = ("dims", "owed", "base", "chain", "owed_by")

    def __init__(self, dims: Dims | None, owed: frozenset = frozenset(), origin: str = "",
                 owed_by: str = "", chain: tuple = ()):
        self.dims = dims
        self.owed = owed
        self.base = origin
        self.chain = chain
        self.owed_by = owed_by

    @property
    def origin(self) -> str:
        if not self.chain:
            return self.base
        steps = ", ".join(self.chain)
        return f"{self.base}, through {'..., ' if len(self.chain) >= _CHAIN else ''}{steps}"

    def derived(self, dims: Dims | None, prim: str, owed: frozenset | None = None, owed_by: str = "") -> Fact:
        chain = self.chain
        if prim not in _UNSEEN and not prim.endswith("cast_p") and (not chain or chain[-1] != prim):
            chain = chain[1 - _CHAIN:] + (prim,) if len(chain) >= _CHAIN - 1 else chain + (prim,)
        owed = self.owed if owed is None else owed
        return Fact(dims, owed, self.base, owed_by or self.owed_by if owed else "", chain)

    def same_origin(self, dims: Dims | None, owed: frozenset, owed_by: str) -> Fact:
        """This fact's origin with another layout and sum."""
        return Fact(dims, owed, self.base, owed_by, self.chain)


_CHAIN = 6  # primitives named in an origin at most (the last ones)


class Point:
    """A value the side table met: ``declared`` (its layout and owed sum, known there) and/or
    ``check`` (compared with ``expected``: ``what`` says what was checked, ``sums_ok`` whether a
    partial sum may go there)."""

    __slots__ = ("expected", "what", "sums_ok", "declared")

    def __init__(self, expected: Dims, what: str, sums_ok: bool = False, declared: Fact | None = None):
        self.expected = expected
        self.what = what
        self.sums_ok = sums_ok
        self.declared = declared


UNKNOWN = Fact(None)


def fmt(dims: Dims | None) -> str:
    if dims is None:
        return "(layout unknown)"
    return _fmt_layout(dims)


def axes_text(axes: Iterable[str]) -> str:
    axes = sorted(axes)
    return f"mesh {'axes' if len(axes) > 1 else 'axis'} {', '.join(repr(a) for a in axes)}"


def owed_text(fact: Fact) -> str:
    return f"is a partial sum still owing a sum over {axes_text(fact.owed)} (made by {fact.owed_by})"
