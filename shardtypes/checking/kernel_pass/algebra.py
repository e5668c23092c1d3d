"""How facts combine, for the pass's rules (``structural``, ``collectives``,
``loops``): the varying axes of several operands, the offsets of values relative to local
maxima (``Fact.rel``) under products, quotients and sums, and a rule's result derived from its
first operand.
"""

from __future__ import annotations

from typing import Any

from .facts import UNKNOWN, Dims, Fact
from .jaxpr import invars, literal_number, name, optional_param, shape

__all__ = ["ndim", "union", "rel_mul", "rel_neg", "rel_join", "drop_rel", "fact_of", "monotone", "over_ones",
           "zero", "zeros", "ZERO"]


def ndim(v: Any) -> int:
    return len(shape(v))


def union(*facts: Fact) -> frozenset | None:
    out: frozenset = frozenset()
    for f in facts:
        if f.vary is None:
            return None
        out |= f.vary
    return out


# -- values relative to local maxima (``Fact.rel``) ------------------------------------------

def rel_mul(a: tuple | None, b: tuple | None, sign: int = 1) -> tuple | None:
    """The offsets of a product (``sign`` -1: a quotient): powers add."""
    if a is None or b is None:
        return None
    powers: dict = {}
    for token, axes, k in a:
        powers[(token, axes)] = powers.get((token, axes), 0) + k
    for token, axes, k in b:
        powers[(token, axes)] = powers.get((token, axes), 0) + sign * k
    return tuple(sorted((t, ax, k) for (t, ax), k in powers.items() if k))


def rel_neg(a: tuple | None) -> tuple | None:
    return None if a is None else tuple((t, ax, -k) for t, ax, k in a)


def rel_join(a: tuple | None, b: tuple | None) -> tuple | None:
    """The offsets of a sum of two values: theirs if they agree or one has none, else unknown."""
    if a is None or b is None:
        return None
    if a == b or not b:
        return a
    return b if not a else None


def drop_rel(a: tuple | None, axes: frozenset) -> tuple | None:
    """Offsets once the values of every device along ``axes`` are side by side (gathered)."""
    return None if a is None else tuple(e for e in a if not set(e[1]) <= axes)


def fact_of(p: Any, eqn: Any, ins: list[Fact], dims: Dims | None, owed: frozenset | None = None,
         owed_by: str = "", **changes: Any) -> list[Fact]:
    src = ins[0]
    if not src.known and owed is None and not changes:
        return [UNKNOWN]
    return [src.derived(dims if src.dims is not None else None, name(eqn), owed, owed_by, **changes)]


# -- which operands keep what is owed -------------------------------------------------------

def over_ones(eqn: Any) -> bool:
    """A reduction over dims of one element (``jnp.max(v, axis=1)`` of a column): the value."""
    if not name(eqn).startswith("reduce_"):
        return False
    axes, dims = optional_param(eqn, "axes"), shape(invars(eqn)[0])
    return isinstance(axes, tuple) and all(isinstance(i, int) and i < len(dims) and dims[i] == 1 for i in axes)


_INCREASING = frozenset({"exp", "exp2", "log", "log1p", "expm1", "tanh", "logistic", "sqrt", "cbrt", "atan",
                         "asinh", "sinh", "erf", "convert_element_type", "reduce_precision", "copy", "copy_p"})


def monotone(eqn: Any, ins: list[Fact], i: int) -> int:
    """Whether ``eqn`` is increasing (1), decreasing (-1) or neither (0) in operand ``i``, the
    others held: the same on every device (invariant), or a positive or negative literal."""
    prim = name(eqn)
    if prim in _INCREASING:
        return 1
    if prim == "neg":
        return -1
    if len(ins) != 2:
        return 0
    j = 1 - i
    other, var = ins[j], invars(eqn)[j]
    same_everywhere = other.vary is not None and not other.vary and not other.owed
    if prim == "add" and same_everywhere:
        return 1
    if prim == "sub" and same_everywhere:
        return 1 if i == 0 else -1
    sign = _sign(var)
    if prim == "mul" and sign:
        return sign
    if prim == "div" and i == 0 and sign:
        return sign
    return 0


def _sign(v: Any) -> int:
    value = literal_number(v)
    return 0 if value is None else (value > 0) - (value < 0)


ZERO = "the constant 0"


def zeros(fact: Fact) -> bool:
    """A literal 0, or zeros made from it (Python's ``sum`` starts from 0, ``jnp.zeros``): adding
    it to a partial sum changes nothing."""
    return fact.base == ZERO and all(step in ("broadcast_in_dim", "convert_element_type") for step in fact.chain)


def zero(v: Any) -> bool:
    """A literal 0 (Python's ``sum`` starts from one): adding it changes nothing."""
    return literal_number(v) == 0
