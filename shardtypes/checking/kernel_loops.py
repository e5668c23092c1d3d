"""``kernel_flow``'s rules for JAX's control flow: ``lax.scan``, ``lax.while_loop`` (and
``fori_loop``) and ``lax.cond``/``switch``, followed inside.

A loop body runs on the loop's carries, its constants and (``scan``) one slice of each scanned
operand: the slice has the operand's layout without the leading dim, and each result slice is
stacked along a new leading dim that is not split. A carry's layout and owed sum are those of its
initial value, unless the body changes them: then the carry is followed again with what both
agree on (a dim they disagree on unknown, the owed axes of either), until the body keeps it.
A ``cond``'s results are what all its branches agree on.

Imports: the facts only (the pass is handed in as ``p``).
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

from .kernel_facts import Fact, UNKNOWN

__all__ = ["LOOPS"]

_ROUNDS = 4  # carries settle in a round or two; past this they are taken as unknown


def _merge(a: Fact, b: Fact) -> Fact:
    """What two facts of one value agree on."""
    if a.dims is None or b.dims is None or len(a.dims) != len(b.dims):
        dims = None
    else:
        dims = tuple(x if x == y else None for x, y in zip(a.dims, b.dims))
    base = a if a.owed or not b.owed else b
    return base.same_origin(dims, a.owed | b.owed, base.owed_by)


def _same(a: Fact, b: Fact) -> bool:
    return a.dims == b.dims and a.owed == b.owed


def _jaxpr(closed: Any) -> Any:
    return getattr(closed, "jaxpr", closed)


def _settle(p: Any, body: Any, fixed: list[Fact], carries: list[Fact], tail: list[Fact]) -> tuple[list[Fact], list[Fact]]:
    """Runs ``body`` on ``fixed + carries + tail`` until its carries come out as they went in;
    returns (carries, the body's other results)."""
    n = len(carries)
    for _ in range(_ROUNDS):
        outs = p.run(body, fixed + carries + tail)
        merged = [_merge(c, o) for c, o in zip(carries, outs[:n])]
        if all(_same(c, m) for c, m in zip(carries, merged)):
            return carries, outs[n:]
        carries = merged
    carries = [c.same_origin(None, c.owed, c.owed_by) for c in carries]
    return carries, p.run(body, fixed + carries + tail)[n:]


def _slice(fact: Fact) -> Fact:
    if fact.dims is None:
        return fact if fact.owed else UNKNOWN
    return fact.same_origin(fact.dims[1:], fact.owed, fact.owed_by)


def _stack(fact: Fact) -> Fact:
    if fact.dims is None:
        return fact if fact.owed else UNKNOWN
    return fact.same_origin(((),) + tuple(fact.dims), fact.owed, fact.owed_by)


def _scan(p: Any, eqn: Any, ins: list[Fact]) -> list[Fact]:
    consts, carry = eqn.params["num_consts"], eqn.params["num_carry"]
    body = _jaxpr(eqn.params["jaxpr"])
    xs = [_slice(f) for f in ins[consts + carry:]]
    carries, ys = _settle(p, body, list(ins[:consts]), list(ins[consts:consts + carry]), xs)
    return carries + [_stack(f) for f in ys]


def _while(p: Any, eqn: Any, ins: list[Fact]) -> list[Fact]:
    cond_n, body_n = eqn.params["cond_nconsts"], eqn.params["body_nconsts"]
    body = _jaxpr(eqn.params["body_jaxpr"])
    carries, _ = _settle(p, body, list(ins[cond_n:cond_n + body_n]), list(ins[cond_n + body_n:]), [])
    cond = _jaxpr(eqn.params["cond_jaxpr"])
    p.run(cond, list(ins[:cond_n]) + carries)  # a partial sum deciding the loop is an error there
    return carries


def _cond(p: Any, eqn: Any, ins: list[Fact]) -> list[Fact]:
    if ins[0].owed:
        p.nonlinear("cond (choosing a branch by a partial sum)", ins[0])
    results: list[Fact] | None = None
    for branch in eqn.params["branches"]:
        outs = p.run(_jaxpr(branch), list(ins[1:]))
        results = outs if results is None else [_merge(a, b) for a, b in zip(results, outs)]
    return results if results is not None else [UNKNOWN] * len(eqn.outvars)


LOOPS: dict[str, Callable[[Any, Any, list[Fact]], Sequence[Fact]]] = {
    "scan": _scan, "while": _while, "cond": _cond,
}
