"""How facts combine, for the pass's rules (``kernel_prims``, ``kernel_collectives``,
``kernel_loops``): the varying axes of several operands, the offsets of values relative to local
maxima (``Fact.rel``) under products, quotients and sums, and a rule's result derived from its
first operand.

Imports: the facts only.
"""

from __future__ import annotations

from typing import Any

from .kernel_facts import Dims, Fact, UNKNOWN

__all__ = ["ndim", "union", "rel_mul", "rel_neg", "rel_join", "drop_rel", "fact_of"]


def ndim(v: Any) -> int:
    return len(getattr(v.aval, "shape", ()))


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
    return [src.derived(dims if src.dims is not None else None, eqn.primitive.name, owed, owed_by, **changes)]
