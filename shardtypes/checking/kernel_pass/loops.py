"""the interpreter's rules for JAX's control flow: ``lax.scan``, ``lax.while_loop`` (and
``fori_loop``) and ``lax.cond``/``switch``, followed inside.

A loop body runs on the loop's carries, its constants and (``scan``) one slice of each scanned
operand: the slice has the operand's layout without the leading dim, and each result slice is
stacked along a new leading dim that is not split. A carry's fact is what holds in every
iteration: first its layout and varying axes settle (what the initial value and the body's
result agree on: a block ``ppermute`` rotates round a ring is unknown from the first iteration
on), then, with those layouts, what it owes. The body is followed quietly until its carries come
out as they went in, then once more with findings raised. A short ``scan`` (16 trips at most) that
rotates a partial value with ``ppermute`` is followed trip by trip instead: which devices' parts
a ring has added up grows each trip (``Fact.ring``), which no fixed point says. A ``cond``'s
results are what all its branches agree on.
"""

from __future__ import annotations

from typing import Any

from . import messages as say
from .algebra import RING_OPS, rel_join
from .catalogue import Family, Part, implements
from .facts import UNKNOWN, Fact, Owed, joined_lost
from .jaxpr import eqns, outvars
from .walk import nesting, primitive_of

__all__: list[str] = []  # (its rules register themselves: catalogue.implements)

_ROUNDS = 4  # carries settle in a round or two; past this they are taken as unknown


def _merge(a: Fact, b: Fact, layout_only: bool = False) -> Fact:
    """What two facts of one value agree on (``layout_only``: the layout and varying axes; what
    is owed is ``a``'s)."""
    if a.dims is None or b.dims is None or len(a.dims) != len(b.dims):
        dims = None
    else:
        dims = tuple(x if x == y else None for x, y in zip(a.dims, b.dims))
    vary = None if a.vary is None or b.vary is None else a.vary | b.vary
    if layout_only:
        return a.same_origin(dims, a.owed, a.owed_by, vary=vary)
    base = a if a.owed or not b.owed else b
    kind = base.kind if base.owed else Owed.SUM
    return base.same_origin(dims, a.owed | b.owed, base.owed_by, kind=kind, vary=vary,
                            rel=rel_join(a.rel, b.rel), counted=a.counted | b.counted, mark=a.mark or b.mark,
                            lost=joined_lost(a, b), copies=a.copies | b.copies)


def _same(a: Fact, b: Fact) -> bool:
    return (a.dims, a.owed, a.kind, a.vary, a.rel, a.counted, a.lost) == \
        (b.dims, b.owed, b.kind, b.vary, b.rel, b.counted, b.lost)


def _settle(p: Any, body: Any, fixed: list[Fact], carries: list[Fact],
            tail: list[Fact]) -> tuple[list[Fact], list[Fact]]:
    """Runs ``body`` on ``fixed + carries + tail`` until its carries come out as they went in
    (layouts first, then what is owed), quietly; then once with findings raised, unless the
    last quiet run had the settled carries and found nothing. Returns (carries, the body's other
    results)."""
    n = len(carries)
    outs: list[Fact] = []
    clean = False
    p.quiet += 1
    try:
        for layout_only in (True, False):
            for _ in range(_ROUNDS):
                before = p.failures
                outs = p.run(body, fixed + carries + tail)
                clean = p.failures == before
                if all(_same(c, _merge(c, o)) for c, o in zip(carries, outs[:n])):
                    break  # (what is owed settled too: no second phase)
                merged = [_merge(c, o, layout_only) for c, o in zip(carries, outs[:n])]
                clean = False
                if all(_same(c, m) for c, m in zip(carries, merged)):
                    break
                carries = merged
            else:
                carries = [c.same_origin(None, c.owed, c.owed_by, vary=None, rel=None) for c in carries]
                clean = False
            if clean:
                break
    finally:
        p.quiet -= 1
    if clean:
        return carries, outs[n:]
    return carries, p.run(body, fixed + carries + tail)[n:]


def _slice(fact: Fact) -> Fact:
    if fact.dims is None:
        return fact
    return fact.same_origin(fact.dims[1:], fact.owed, fact.owed_by)


def _stack(fact: Fact) -> Fact:
    if fact.dims is None:
        return fact
    return fact.same_origin(((),) + tuple(fact.dims), fact.owed, fact.owed_by)


_UNROLL = 16  # a scan this short that rotates a partial sum round a ring is followed trip by trip


@implements(Part.PASS, Family.SCAN)
def _scan(p: Any, eqn: Any, ins: list[Fact]) -> list[Fact]:
    inside = nesting(eqn)
    assert inside is not None
    consts, carry, body, length = inside.consts, inside.carries, inside.bodies[0], inside.trips
    xs = [_slice(f) for f in ins[consts + carry:]]
    if isinstance(length, int) and 0 < length <= _UNROLL and _rotates(body) and \
            any(f.owed and f.kind in RING_OPS for f in ins[:consts + carry]):
        carries, ys = _trips(p, body, length, list(ins[:consts]), list(ins[consts:consts + carry]), xs)
    else:
        carries, ys = _settle(p, body, list(ins[:consts]), list(ins[consts:consts + carry]), xs)
    return carries + [_stack(f) for f in ys]


def _rotates(body: Any) -> bool:
    return any(primitive_of(e).family is Family.PPERMUTE for e in eqns(body))


def _trips(p: Any, body: Any, length: int, fixed: list[Fact], carries: list[Fact],
           tail: list[Fact]) -> tuple[list[Fact], list[Fact]]:
    """The body followed once per trip, each on the carries the trip before made: which
    devices' parts a ring has added up (``Fact.ring``) grows trip by trip, so no fixed point
    says it. Returns the last carries and what the trips' other results agree on."""
    n = len(carries)
    ys: list[Fact] | None = None
    for _ in range(length):
        outs = p.run(body, fixed + carries + tail)
        carries = outs[:n]
        ys = outs[n:] if ys is None else [_merge(a, b) for a, b in zip(ys, outs[n:])]
    return carries, ys or []


@implements(Part.PASS, Family.WHILE)
def _while(p: Any, eqn: Any, ins: list[Fact]) -> list[Fact]:
    inside = nesting(eqn)
    assert inside is not None
    cond_n, body_n = inside.consts, inside.carries
    cond, body = inside.bodies
    carries, _ = _settle(p, body, list(ins[cond_n:cond_n + body_n]), list(ins[cond_n + body_n:]), [])
    p.run(cond, list(ins[:cond_n]) + carries)  # a partial sum deciding the loop is an error there
    return carries


@implements(Part.PASS, Family.COND)
def _cond(p: Any, eqn: Any, ins: list[Fact]) -> list[Fact]:
    if ins[0].owed:
        p.nonlinear("cond (choosing a branch by a partial sum)", ins[0])
    results: list[Fact] | None = None
    inside = nesting(eqn)
    assert inside is not None
    for k, branch in enumerate(inside.bodies):
        outs = p.run(branch, list(ins[1:]))
        if results is not None:
            for i, (a, b) in enumerate(zip(results, outs)):
                if (a.owed, a.kind if a.owed else "") != (b.owed, b.kind if b.owed else ""):
                    owing = a if a.owed else b
                    p.fail(say.cond_disagrees(p.head, i, k, owing, b))
        results = outs if results is None else [_merge(a, b) for a, b in zip(results, outs)]
    if results is not None and ins[0].vary:  # a branch chosen per device: the results vary too
        results = [f.same_origin(f.dims, f.owed, f.owed_by, vary=None if f.vary is None else f.vary | ins[0].vary)
                   for f in results]
    return results if results is not None else [UNKNOWN] * len(outvars(eqn))
