"""One walk over a jaxpr, for the three readers of the registry (the kernel pass, the step cost,
the activation estimate).

``Walk.run`` is the one interpreter loop: each equation's operands read from an environment,
its primitive's record looked up (``catalogue.record``), the rule the part registered for the
record's family applied (``catalogue.implements``), or the part's one default for a primitive
no record knows, and the results written back. It never branches on a primitive's name.

``nesting`` is the one place that reads how an equation runs jaxprs of its own, whatever the
release: a call's jaxpr on the operands as they are; a ``scan``'s body on its constants, carries
and one slice of each scanned operand, ``length`` times; a ``while``'s condition and body with
their constants, and its trip count where the loop counts (``trip_count``); a ``cond``'s
branches on the operands after the index; a nested ``shard_map``'s body on blocks, with its specs
and the mesh axes it makes manual.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Sequence

from .catalogue import Arith, Family, Part, Primitive, record, rule_of
from .jaxpr import (
    Unreadable,
    branches,
    call_jaxpr,
    eqns,
    inner_jaxpr,
    invars,
    literal_number,
    name,
    nested_map,
    optional_param,
    outvars,
    param,
    scan_groups,
    while_groups,
)

__all__ = ["Walk", "Nesting", "nesting", "trip_count", "primitive_of"]


def primitive_of(eqn: Any) -> Primitive:
    """The registry's record of ``eqn``'s primitive."""
    return record(name(eqn))


@dataclasses.dataclass(frozen=True)
class Nesting:
    """How an equation runs jaxprs of its own (see the module's docstring). ``bodies``: the call's
    jaxpr; the scan's body; the while's condition and body; the cond's branches; the shard_map's
    body. ``consts``/``carries``: a scan's groups, or a while's condition and body constants.
    ``trips``: how many times the body runs (a scan's length, a counting while's trip count),
    None where the jaxpr does not say."""

    family: Family
    bodies: tuple
    consts: int = 0
    carries: int = 0
    trips: int | None = 1
    in_specs: tuple = ()
    out_specs: tuple = ()
    new_axes: frozenset = frozenset()


def nesting(eqn: Any, prim: Primitive | None = None) -> Nesting | None:
    """How ``eqn`` runs jaxprs of its own, or None where it runs none the registry knows how to
    follow (its family is not a call, loop, cond or shard_map). Raises ``Unreadable`` for params
    in no shape this release reader knows."""
    prim = prim or primitive_of(eqn)
    family = prim.family
    if family is Family.CALL:
        inner = call_jaxpr(eqn)
        if inner is None:
            raise Unreadable("no inner jaxpr of the operands' and results' count")
        return Nesting(family, (inner,))
    if family is Family.SCAN:
        consts, carries = scan_groups(eqn)
        length = optional_param(eqn, "length")
        return Nesting(family, (inner_jaxpr(param(eqn, "jaxpr")),), consts, carries,
                       int(length) if isinstance(length, int) else None)
    if family is Family.WHILE:
        cond_n, body_n = while_groups(eqn)
        cond, body = inner_jaxpr(param(eqn, "cond_jaxpr")), inner_jaxpr(param(eqn, "body_jaxpr"))
        return Nesting(family, (cond, body), cond_n, body_n, trip_count(eqn, cond, body, cond_n, body_n))
    if family is Family.COND:
        return Nesting(family, tuple(inner_jaxpr(b) for b in branches(eqn)))
    if family is Family.SHARD_MAP:
        body, in_specs, out_specs, new = nested_map(eqn)
        return Nesting(family, (body,), in_specs=in_specs, out_specs=out_specs, new_axes=new)
    return None


def trip_count(eqn: Any, cond: Any, body: Any, cond_n: int, body_n: int) -> int | None:
    """The trip count of a while loop that counts: its condition ``i < n`` (or ``n > i``) of a
    carry ``i`` that starts at a literal and that the body adds a literal step to, ``n`` a literal
    (a ``fori_loop`` whose bounds are not Python ints); None for any other loop."""
    found = eqns(cond)
    if len(found) != 1 or len(invars(found[0])) != 2:
        return None
    test = primitive_of(found[0]).arith
    if test not in (Arith.LESS, Arith.GREATER):
        return None
    left, right = invars(found[0])
    counter, bound = (left, right) if test is Arith.LESS else (right, left)
    carries = invars(cond)[cond_n:]
    if counter not in carries or literal_number(bound) is None:
        return None
    k = carries.index(counter)
    start = literal_number(invars(eqn)[cond_n + body_n + k])
    produced = outvars(body)[k]
    stepped = [e for e in eqns(body) if produced in outvars(e)]
    if start is None or len(stepped) != 1 or primitive_of(stepped[0]).arith is not Arith.ADD:
        return None
    ins = invars(stepped[0])
    own = invars(body)[body_n + k]
    step = literal_number(ins[1]) if ins[0] is own else literal_number(ins[0]) if ins[1] is own else None
    limit = literal_number(bound)
    if not step or step <= 0 or limit is None:
        return None
    return max(0, math.ceil((limit - start) / step))


class Walk:
    """The one interpreter loop over a jaxpr (see the module's docstring). A part subclasses it,
    names itself (``part``), registers its rules per family with ``catalogue.implements`` (each
    called as ``rule(walk, eqn, ins)`` and returning one value per result), and gives
    ``default`` (a primitive no record knows, or a family it has no rule for) and, where its
    values need it, ``read``/``write`` (literals, side tables) and ``inputs`` (a jaxpr's constants)."""

    part: Part

    def run(self, jaxpr: Any, ins: Sequence[Any]) -> list:
        """Follows ``jaxpr`` from its inputs' values ``ins``: its outputs' values."""
        env: dict = {}
        self.inputs(jaxpr, env, ins)
        for eqn in eqns(jaxpr):
            outs = self.apply(eqn, [self.read(env, v) for v in invars(eqn)])
            for v, value in zip(outvars(eqn), outs):
                self.write(env, v, value)
        return [self.read(env, v) for v in outvars(jaxpr)]

    def apply(self, eqn: Any, ins: list) -> list:
        """The values of ``eqn``'s results: its family's rule, or the default."""
        found = rule_of(self.part, primitive_of(eqn))
        if found is None:
            return self.default(eqn, ins)
        return list(found(self, eqn, ins))

    def inputs(self, jaxpr: Any, env: dict, ins: Sequence[Any]) -> None:
        for v, value in zip(invars(jaxpr), ins):
            self.write(env, v, value)

    def read(self, env: dict, v: Any) -> Any:
        return env.get(v)

    def write(self, env: dict, v: Any, value: Any) -> None:
        env[v] = value

    def default(self, eqn: Any, ins: list) -> list:
        raise NotImplementedError
