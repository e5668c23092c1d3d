"""Where the kernel pass meets the side table (``kernel_layouts``): a value the library declared
(an op's result, laid out as its spec string says), checked (an annotation, an op's operand:
compared with what the pass inferred, in program order) or marked (``ops.per_device``).
``PointChecks`` is the part of ``interpreter.Pass`` that does it.

Imports: the facts and the spec comparisons.
"""

from __future__ import annotations

from typing import Sequence

from typeguard import TypeCheckError

from .facts import Fact, Owed, Point, axes_text, fmt, folded, owed_text, pay_text
from ..kernel_specs import differences

__all__ = ["PointChecks", "PER_DEVICE"]

PER_DEVICE = ("if each device's part is meant to stay its own (a per-device statistic), say so with "
              "shardtypes.ops.per_device(value, axes)")


class PointChecks:
    head: str
    manual: frozenset

    def fail(self, message: str) -> None:  # (the pass's: quiet while loop carries settle)
        raise TypeCheckError(message)

    def meet(self, fact: Fact, points: Sequence[Point]) -> Fact:
        """Takes what the side table declared of a value (an op's result is laid out as its spec
        string says), then, in program order, compares the inferred fact with its checks and
        applies its ``ops.per_device`` marks."""
        for point in points:
            if point.declared is not None:
                fact = self.declare(fact, point.declared)
        for point in points:
            if point.mark is not None:
                fact = self.marked(fact, *point.mark)
            elif point.what:
                self.compare(fact, point)
                fact = self.adopt(fact, point)
        return fact

    def declare(self, fact: Fact, declared: Fact) -> Fact:
        dims = declared.dims
        if dims is not None:
            dims = tuple(tuple(a for a in axes if a in self.manual) for axes in dims)
        vary = fact.vary
        if vary is None and dims is not None:
            vary = frozenset(a for axes in dims for a in axes) | (declared.owed & self.manual)
        return declared.same_origin(dims, declared.owed & self.manual, declared.owed_by, vary=vary,
                                    rel=fact.rel, counted=fact.counted, mark=fact.mark)

    def marked(self, fact: Fact, axes: frozenset, call: str) -> Fact:
        """``shardtypes.ops.per_device(value, axes)``: what is owed over ``axes`` is the value's
        own by intent; it varies over them."""
        owed = fact.owed - axes
        rel = None if fact.rel is None else tuple(e for e in fact.rel if not set(e[1]) & axes)
        vary = (fact.vary or frozenset()) | (axes & self.manual)
        return fact.same_origin(fact.dims, owed, fact.owed_by if owed else "", kind=fact.kind if owed else Owed.SUM,
                                vary=vary, rel=rel, mark=call)

    def adopt(self, fact: Fact, point: Point) -> Fact:
        """A value checked against an annotation or a spec is laid out so from there on (the dims
        the pass did not know)."""
        want = tuple(tuple(a for a in axes if a in self.manual) for axes in point.expected)
        vary = fact.vary
        if vary is None:
            vary = frozenset(a for axes in want for a in axes) | fact.owed
        if fact.dims is None:
            return fact.same_origin(want, fact.owed, fact.owed_by, vary=vary) if fact.known else \
                Fact(want, origin=point.what, vary=vary)
        if len(fact.dims) != len(want) or None not in fact.dims:
            return fact.same_origin(fact.dims, fact.owed, fact.owed_by, vary=vary)
        return fact.same_origin(tuple(w if h is None else h for h, w in zip(fact.dims, want)), fact.owed,
                                fact.owed_by, vary=vary)

    def owned(self, fact: Fact, point: Point, axes: frozenset) -> bool:
        """Whether the kernel's return annotation takes what ``fact`` owes (or is relative to)
        over ``axes`` as each device's own: out_specs put the devices' values side by side along
        a dim of the result's own (``Point.own``) split over each of them (per-device sums,
        prefixes, maxima). Blocks a psum added together (``fold``) are the result's own where
        the dims they were split along are."""
        own = point.own
        if own is None or len(own) != len(point.expected) or not axes:
            return False
        if folded(fact.kind) and axes == fact.owed:
            return fact.dims is not None and len(fact.dims) == len(own) and all(
                mine for dim, mine in zip(fact.dims, own) if set(dim or ()) & axes)
        return all(any(a in want for want, mine in zip(point.expected, own) if mine) for a in axes)

    def laid_out_ok(self, fact: Fact, point: Point, have: tuple, want: tuple) -> bool:
        """A returned value laid out otherwise than its annotation only along the result's own
        dims, split over no mesh axis the annotation does not name (blocks a psum added
        together aside): the devices' blocks put side by side are what the annotation declares."""
        own = point.own
        if own is None or len(own) != len(want):
            return False
        named = {a for axes in want for a in axes}
        combined = fact.owed if folded(fact.kind) else frozenset()
        for h, w, mine in zip(have, want, own):
            if h != w and not mine:
                return False
            if set(h) - named - combined:
                return False
        return True

    def relative_text(self, fact: Fact, where: str) -> str:
        made = "; ".join(dict.fromkeys(t for t, _, _ in fact.rel or ()))
        return (f"{self.head}, {where}, but it is computed from a partial maximum or minimum (each device's "
                f"own, not the global one: {made}) ({fact.origin})")

    def compare(self, fact: Fact, point: Point) -> None:
        spec = "ops." in point.what
        for apart, finding in fact.lost:
            if not self.owned(fact, point, apart):
                self.fail(f"{finding}; the per-device values then reach {point.what}, which does not keep them "
                          f"apart along {axes_text(apart)}")
        if fact.owed and not (point.sums_ok and fact.kind == Owed.SUM) and not self.owned(fact, point, fact.owed):
            self.fail(f"{self.head}, {point.what}: it {owed_text(fact)}; {pay_text(fact)} "
                      f"({PER_DEVICE})")
        if fact.rel and not spec and not self.owned(fact, point, frozenset(a for e in fact.rel for a in e[1])):
            self.fail(self.relative_text(fact, point.what) + "; take the global one with jax.lax.pmax (or pmin) "
                      f"first, or rescale by exp(m_local - jax.lax.pmax(m_local, axes)) ({PER_DEVICE})")
        if fact.counted and not spec:
            self.fail(f"{self.head}, {point.what}: a psum over {axes_text(fact.counted)} added up a value "
                      f"that is already the same on every device along {'them' if len(fact.counted) > 1 else 'it'} "
                      f"({fact.origin}), counting it once per device; leave that psum out (or use jax.lax.pmean)")
        if fact.dims is None or len(fact.dims) != len(point.expected):
            want = None
        else:
            want = tuple(tuple(a for a in axes if a in self.manual) for axes in point.expected)
            have = tuple(w if h is None else h for h, w in zip(fact.dims, want))
            if have != want and not self.laid_out_ok(fact, point, have, want):
                self.fail(
                    f"{self.head}, {point.what}: it is laid out {fmt(fact.dims)} ({fact.origin}), but "
                    f"{'the spec string' if spec else 'the annotation'} says {fmt(want)}: "
                    f"{differences(have, want, 'the spec' if spec else 'the annotation')}")
        if fact.vary is None and point.fallback:
            self.fail(f"{self.head}, {point.what}: {point.fallback}")
        if fact.vary is None or spec or point.sums_ok:
            return
        named = {a for axes in point.expected for a in axes}
        extra = sorted(a for a in fact.vary if a in self.manual and a not in named)
        if extra:
            why = (f"marked so by {fact.mark}" if fact.mark else fact.origin)
            self.fail(
                f"{self.head}, {point.what}: it varies over {axes_text(extra)} (it differs from device to device "
                f"along {'them' if len(extra) > 1 else 'it'}: {why}), but the annotation says it is the same on "
                f"every device there ({fmt(point.expected)}); sum it with jax.lax.psum, gather it, or annotate a "
                "dim split over that axis")

