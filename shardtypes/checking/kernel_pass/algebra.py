"""The algebra of partial values, in one module: how the kinds of what a value owes (``Owed``)
relate (the blocks a collective folds, the kinds a monotone map flips, which primitives keep a
partial maximum one, what a ring of ``ppermute`` calls adds up), how facts combine for the pass's
rules (the varying axes of several operands, the offsets of values relative to local maxima
(``Fact.rel``) under products, quotients and sums, a rule's result derived from its first
operand), and what the registry's records say of monotone maps and zeros.
"""

from __future__ import annotations

from typing import Any

from .catalogue import Arith, Family, Owed, Primitive, record
from .facts import RING_KINDS, START, UNKNOWN, Dims, Fact
from .jaxpr import invars, literal_number, name, optional_param, shape

__all__ = ["FOLD", "folded", "FLIP", "keeps", "linear_only", "RING_OPS", "ring_of", "ndim", "union", "rel_mul",
           "rel_neg", "rel_join", "drop_rel", "fact_of", "monotone", "over_ones", "zero", "zeros", "ZERO"]


# -- the kinds -------------------------------------------------------------------------------

#: The blocks of a split dim combined by the collective that pays a kind.
FOLD = {Owed.SUM: Owed.FOLDSUM, Owed.MAX: Owed.FOLDMAX, Owed.MIN: Owed.FOLDMIN}
_FOLDS = frozenset(FOLD.values())

#: What a decreasing map makes of a partial maximum (minimum).
FLIP = {Owed.MAX: Owed.MIN, Owed.MIN: Owed.MAX, Owed.FOLDMAX: Owed.FOLDMIN, Owed.FOLDMIN: Owed.FOLDMAX}

#: What combines two parts of a partial value into a larger part, by what it owes.
RING_OPS = {Owed.SUM: Arith.ADD, Owed.MAX: Arith.MAX, Owed.MIN: Arith.MIN}
assert frozenset(RING_OPS) == RING_KINDS


def folded(kind: str) -> bool:
    """Whether ``kind`` is blocks of a split dim that a collective combined (``FOLD``)."""
    return kind in _FOLDS


def keeps(prim: Primitive, kind: Owed) -> bool:
    """Whether a partial value of ``kind`` (a maximum, a minimum, blocks maxed) stays one through
    ``prim`` (``max``, ``reduce_max``, ``pmax``, ``cummax``: the record's ``keeps``)."""
    return kind in prim.keeps


def linear_only(kind: Owed) -> bool:
    """Whether what is owed of ``kind`` may only go through linear primitives (and those that
    keep it): sums, prefixes and folded blocks; a partial maximum becomes relative instead."""
    return kind in (Owed.SUM, Owed.PREFIX) or folded(kind)


def ring_of(fact: Fact, axis: str) -> tuple | None:
    """``(axis, token, offsets, how)`` of a partial sum (max, min) owed over ``axis``, among
    others (``Fact.ring``): its own (the value itself, offset 0) unless a ppermute along ``axis``
    or a sum of rotated parts made it; None for any other value. ``how``: 'ring' (cyclic shifts,
    offsets modulo the axis size), 'chain' (shifts that do not wrap round: each device's part
    passed on down the axis) or None (not shifted yet); the two do not mix. (A ring over one axis pays that
    axis; a ring over the next starts afresh from the result.)"""
    if fact.kind not in RING_KINDS or axis not in fact.owed:
        return None
    if fact.ring and fact.ring[0] == axis:
        return fact.ring
    if fact.ring and fact.ring[0] is None:  # (a cast of a value no ring has rotated yet)
        return (axis, fact.ring[1], START, None)
    return (axis, fact.serial, START, None)


# -- facts combined --------------------------------------------------------------------------

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
    prim = record(name(eqn))
    if prim.family is not Family.REDUCE:
        return False
    axes, dims = optional_param(eqn, "axes"), shape(invars(eqn)[0])
    return isinstance(axes, tuple) and all(isinstance(i, int) and i < len(dims) and dims[i] == 1 for i in axes)


def monotone(eqn: Any, ins: list[Fact], i: int) -> int:
    """Whether ``eqn`` is increasing (1), decreasing (-1) or neither (0) in operand ``i``, the
    others held: the same on every device (invariant), or a positive or negative literal. (A
    function of one operand: its record's ``monotone``.)"""
    prim = record(name(eqn))
    if prim.monotone:
        return prim.monotone
    if len(ins) != 2:
        return 0
    j = 1 - i
    other, var = ins[j], invars(eqn)[j]
    same_everywhere = other.vary is not None and not other.vary and not other.owed
    if prim.arith is Arith.ADD and same_everywhere:
        return 1
    if prim.arith is Arith.SUB and same_everywhere:
        return 1 if i == 0 else -1
    sign = _sign(var)
    if prim.arith is Arith.MUL and sign:
        return sign
    if prim.arith is Arith.DIV and i == 0 and sign:
        return sign
    return 0


def _sign(v: Any) -> int:
    value = literal_number(v)
    return 0 if value is None else (value > 0) - (value < 0)


ZERO = "the constant 0"


def zeros(fact: Fact) -> bool:
    """A literal 0, or zeros made from it (Python's ``sum`` starts from 0, ``jnp.zeros``): adding
    it to a partial sum changes nothing."""
    return fact.base == ZERO and all(_keeps_zeros(record(step)) for step in fact.chain)


def _keeps_zeros(prim: Primitive) -> bool:
    """A primitive that makes zeros of zeros without computing (a broadcast, a conversion)."""
    return prim.arith is Arith.CONVERT or prim.family is Family.BROADCAST


def zero(v: Any) -> bool:
    """A literal 0 (Python's ``sum`` starts from one): adding it changes nothing."""
    return literal_number(v) == 0
