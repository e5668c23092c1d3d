"""The step cost's model: one walk over a traced step's jaxpr (``checking.jaxpr_walk.Walk``)
that counts what one device sends, computes and moves through its memory per run, by the
registry's records (``checking.primitives``): each family's rule (collectives, reshards,
contractions, reductions), its FLOPs (``_FLOPS``), and the jaxprs a call, loop, cond or kernel
runs (``_NESTED``, times their runs). The figures and their conventions, and how they are
shown, are ``step_cost``'s (a report: ``StepCost``, ``Communication``, ``Collective``).

A primitive the registry has no record of is counted as elementwise (one FLOP per result element,
its operands and results as bytes moved) and named in the cost's assumptions.
"""

from __future__ import annotations

import itertools
import math
from typing import Any, Callable, Mapping

import jax

from ..checking import jaxpr_walk, jaxprs, primitives
from ..language import entry_axes
from ..layout import per_device_shape, spec_entries, spec_parts
from .activation_rules import auto_splits, dead, fused, local_shape, ones
from .activations import SYMBOLIC, user_frame
from .step_cost import Collective, Communication, StepCost

Data = primitives.Data
Family = primitives.Family
Part = primitives.Part
Primitive = primitives.Primitive
implements = primitives.implements
rule_of = primitives.rule_of

__all__ = ["cost_of", "step_cost", "WHILE_ONCE"]

WHILE_ONCE = "a while loop's body (its trip count is not known from the jaxpr) is counted once"


class _Tally:
    """What one run of a jaxpr costs: collectives (key -> times), FLOPs by dtype, the matmuls'
    share, memory bytes."""

    __slots__ = ("collectives", "flops", "matmul", "memory")

    def __init__(self) -> None:
        self.collectives: dict[tuple, int] = {}
        self.flops: dict[str, int] = {}
        self.matmul = 0
        self.memory = 0

    def add(self, other: _Tally, times: int = 1) -> None:
        for key, n in other.collectives.items():
            self.collectives[key] = self.collectives.get(key, 0) + n * times
        for dtype, n in other.flops.items():
            self.flops[dtype] = self.flops.get(dtype, 0) + n * times
        self.matmul += other.matmul * times
        self.memory += other.memory * times

    def flop(self, dtype: str, n: int) -> None:
        if n:
            self.flops[dtype] = self.flops.get(dtype, 0) + n

    def weight(self) -> int:
        return sum(self.flops.values()) + self.memory + sum(k[2] * n for k, n in self.collectives.items())


class _Cost(jaxpr_walk.Walk):
    """One walk of a step's jaxpr and the jaxprs inside it (``jaxpr_walk.Walk``): each value is
    its Auto-axes splits (None: not split); ``tally``, ``manual`` and ``away`` are those of the
    jaxpr being walked."""

    part = Part.COST

    def __init__(self, sizes: dict[str, int], auto: dict[str, int]):
        self.sizes = sizes
        self.auto = {a: n for a, n in auto.items() if n > 1}
        self.unknown: dict[str, set] = {}
        self.walked: dict = {}
        self.tally = _Tally()
        self.manual: frozenset = frozenset()
        self.away: set = set()
        self.gone: set = set()  # the equations of the jaxpr walked that nothing needs
        self.unrecorded: set = set()  # primitives no record knows, counted as elementwise

    # -- sizes ------------------------------------------------------------------------------------

    def local(self, v: Any, splits: tuple | None, eqn: Any) -> tuple | None:
        aval = jaxprs.aval(v)
        aval = getattr(aval, "inner_aval", aval)
        if getattr(aval, "shape", None) is None:
            return ()
        found = self.local_shape(aval, splits)
        if found is None:
            self.unknown.setdefault(SYMBOLIC, set()).add(jaxprs.name(eqn))
        return found

    @staticmethod
    def local_shape(aval: Any, splits: tuple | None) -> tuple | None:
        return local_shape(aval, splits)

    def nbytes(self, v: Any, splits: tuple | None, eqn: Any) -> int:
        if jaxprs.is_literal(v):
            return 0
        aval = jaxprs.aval(v)
        aval = getattr(aval, "inner_aval", aval)
        if getattr(aval, "shape", None) is None:
            return 0
        itemsize = getattr(getattr(aval, "dtype", None), "itemsize", None)
        shape = self.local(v, splits, eqn)
        if shape is None:
            return 0
        if not isinstance(itemsize, int):
            self.unknown.setdefault(f"values of dtype {aval.dtype}, which has no size in bytes,", set()).add(
                jaxprs.name(eqn))
            return 0
        return math.prod(shape) * itemsize

    def collective(self, tally: _Tally, kind: str, axes: tuple, operand: int, eqn: Any, source: str) -> None:
        """Counts a collective over ``axes`` whose operand (for an all-gather: whose result) one
        device holds ``operand`` bytes of."""
        n = math.prod(self.sizes.get(a, 1) for a in axes)
        if n <= 1:
            return
        sent = {"all-gather": operand * (n - 1) // n, "reduce-scatter": operand * (n - 1) // n,
                "all-reduce": 2 * operand * (n - 1) // n, "all-to-all": operand * (n - 1) // n,
                "permute": operand}[kind]
        if sent or operand == 0:
            key = (kind, tuple(axes), sent, user_frame(jaxprs.frames(eqn)), source)
            tally.collectives[key] = tally.collectives.get(key, 0) + 1

    # -- the walk ---------------------------------------------------------------------------------

    def jaxpr(self, jaxpr: Any, ins: list, manual: frozenset) -> tuple[_Tally, list]:
        """(the cost of one run of ``jaxpr``, its outputs' Auto splits); ``ins`` its inputs'
        Auto splits (None: not split), ``manual`` the mesh axes made manual around it."""
        key = (id(jaxpr), tuple(ins), manual)
        if key in self.walked:
            return self.walked[key][:2]
        held = self.tally, self.manual, self.away, self.gone
        outs = {v for v in jaxprs.outvars(jaxpr) if not jaxprs.is_literal(v)}
        eqns = jaxprs.eqns(jaxpr)
        dropped = dead(eqns, outs)
        self.gone = {id(e) for i, e in enumerate(eqns) if i in dropped}
        self.tally, self.manual = _Tally(), manual
        self.away = fused([e for i, e in enumerate(eqns) if i not in dropped], outs)
        try:
            result = (self.tally, self.run(jaxpr, ins))
        finally:
            self.tally, self.manual, self.away, self.gone = held
        self.walked[key] = (*result, jaxpr)  # (the jaxpr kept: its id stays its own)
        return result

    def read(self, env: dict, v: Any) -> Any:
        return None if jaxprs.is_literal(v) else env.get(v)

    def apply(self, eqn: Any, ins: list) -> list:
        """An equation's cost, added to the tally: the jaxprs it runs (times their runs), or the
        collectives its family's rule finds and its FLOPs and memory bytes; its results' splits."""
        if id(eqn) in self.gone:  # (nothing needs it: XLA removes it)
            return [None] * len(jaxprs.outvars(eqn))
        prim = jaxpr_walk.primitive_of(eqn)
        if prim.callback:
            where = user_frame(jaxprs.frames(eqn))
            self.unknown.setdefault(f"the host callback {prim.name}{' at ' + where if where else ''}, whose own "
                                    "cost is not known,", set())
        if prim.nested:
            try:
                inside = jaxpr_walk.nesting(eqn, prim)
            except jaxprs.Unreadable as e:
                raise jaxprs.Unreadable(f"{prim.name}'s params ({e})") from None
            if inside is not None:
                return _NESTED[prim.family](self, eqn, inside, ins)
        elif prim.family is Family.UNKNOWN and jaxprs.call_jaxpr(eqn) is not None:
            # (a primitive no record knows that runs a jaxpr of its operands: followed as a call)
            self.unrecorded.add(prim.name)
            return _call(self, eqn, jaxpr_walk.Nesting(Family.CALL, (jaxprs.call_jaxpr(eqn),)), ins)
        auto = bool(self.auto) and not self.auto.keys() <= self.manual
        out_splits = self.rule(eqn, ins) if auto else [None] * len(jaxprs.outvars(eqn))
        found = rule_of(Part.COST, prim)
        if found is not None:
            out_splits = found(self, eqn, ins, out_splits, auto) or out_splits
        elif prim.family is Family.UNKNOWN:
            self.unrecorded.add(prim.name)
        self.compute(eqn, prim, ins, out_splits)
        return out_splits

    def shard_map_outs(self, eqn: Any, inside: jaxpr_walk.Nesting) -> list:
        outs = jaxprs.outvars(eqn)
        if not self.auto:
            return [None] * len(outs)
        return [spec_parts(spec, len(jaxprs.shape(v)), self.auto) for spec, v in zip(inside.out_specs, outs)]

    def rule(self, eqn: Any, ins: list) -> list:
        try:
            return auto_splits(eqn, ins)
        except jaxprs.Unreadable:  # a param of another shape: the results taken as not split
            return [ones(jaxprs.aval(v)) for v in jaxprs.outvars(eqn)]

    # -- the rules --------------------------------------------------------------------------------

    def kernel_collective(self, tally: _Tally, eqn: Any, kind: str) -> None:
        """A collective inside ``shard_map``: local shapes, exact sizes."""
        try:
            axes = jaxprs.axis_names(eqn)
        except jaxprs.Unreadable as e:
            self.unknown.setdefault(f"a {jaxprs.name(eqn)} the walk cannot read ({e}) is not counted", set())
            return
        values = jaxprs.outvars(eqn) if kind == "all-gather" else jaxprs.invars(eqn)
        sizes = [self.nbytes(v, None, eqn) for v in values]
        self.collective(tally, kind, self.ordered(axes), sum(sizes), eqn, "kernel")

    def ordered(self, axes: Any) -> tuple:
        order = list(self.sizes)
        return tuple(sorted(set(axes), key=lambda a: order.index(a) if a in order else len(order)))

    def spec(self, v: Any) -> tuple[list, frozenset] | None:
        """A value's Explicit layout: per dim its mesh axes, and the axes it is unreduced over;
        None where it has no sharding in its type."""
        aval = jaxprs.aval(v)
        sharding = getattr(aval, "sharding", None)
        spec = getattr(sharding, "spec", None)
        if spec is None:
            return None
        ndim = len(getattr(aval, "shape", ()))
        entries = spec_entries(spec)
        dims = [tuple(a for a in entry_axes(entries[i] if i < len(entries) else None) if self.sizes.get(a, 1) > 1)
                for i in range(ndim)]
        return dims, frozenset(getattr(spec, "unreduced", ()) or ())

    def bytes_as(self, v: Any, dims: list, eqn: Any) -> int:
        """The bytes per device of ``v`` laid out with ``dims`` (per dim, its mesh axes)."""
        aval = jaxprs.aval(v)
        itemsize = getattr(getattr(aval, "dtype", None), "itemsize", None)
        parts = [math.prod(self.sizes.get(a, 1) for a in axes) for axes in dims]
        block = per_device_shape(tuple(getattr(aval, "shape", ())), parts)
        if block is None or not isinstance(itemsize, int):
            self.unknown.setdefault(SYMBOLIC, set()).add(jaxprs.name(eqn))
            return 0
        return math.prod(block) * itemsize

    def move(self, tally: _Tally, eqn: Any, src: list, partial: set, dst: list, unreduced: frozenset,
             nbytes: int) -> None:
        """The collectives that take a value laid out ``src`` (per dim its axes), owing a sum
        over ``partial``, to ``dst`` (owing one over ``unreduced``): a partial sum paid where
        the result keeps an axis split (reduce-scatter) or not (all-reduce), axes moved between
        dims (all-to-all), axes dropped (all-gather); an axis added is a slice (nothing sent)."""
        where_src = {a: i for i, axes in enumerate(src) for a in axes}
        where_dst = {a: i for i, axes in enumerate(dst) for a in axes}
        owed = set(partial) - unreduced
        scatter = [a for a in owed if a in where_dst and a not in where_src]
        reduce = [a for a in owed if a not in scatter]
        value = nbytes
        if reduce:
            self.collective(tally, "all-reduce", self.ordered(reduce), value, eqn, "explicit")
        if scatter:
            self.collective(tally, "reduce-scatter", self.ordered(scatter), value, eqn, "explicit")
            value //= math.prod(self.sizes[a] for a in scatter)
        moved = [a for a, i in where_src.items() if a in where_dst and where_dst[a] != i]
        if moved:
            self.collective(tally, "all-to-all", self.ordered(moved), value, eqn, "explicit")
        dropped = [a for a in where_src if a not in where_dst]
        if dropped:
            self.collective(tally, "all-gather", self.ordered(dropped),
                            value * math.prod(self.sizes[a] for a in dropped), eqn, "explicit")

    def reshard(self, tally: _Tally, eqn: Any, ins: list) -> None:
        operand, result = jaxprs.invars(eqn)[0], jaxprs.outvars(eqn)[0]
        src, dst = self.spec(operand), self.spec(result)
        if src is None or dst is None or jaxprs.is_literal(operand):
            return
        if src[0] == dst[0] and not (src[1] - dst[1]):
            return
        self.move(tally, eqn, src[0], set(src[1]), dst[0], dst[1], self.nbytes(operand, ins[0], eqn))

    def dot(self, tally: _Tally, eqn: Any, ins: list, out_splits: list, auto: bool) -> None:
        lhs, rhs = jaxprs.invars(eqn)[:2]
        result = jaxprs.outvars(eqn)[0]
        spec = jaxprs.contraction(eqn)
        (lc, rc), (lb, rb) = spec.dimension_numbers
        ls, rs, out = self.spec(lhs), self.spec(rhs), self.spec(result)
        if ls is not None and rs is not None and out is not None:
            lfree = [d for d in range(len(ls[0])) if d not in lc and d not in lb]
            rfree = [d for d in range(len(rs[0])) if d not in rc and d not in rb and d not in spec.rhs_dropped]
            natural = [ls[0][a] or rs[0][b] for a, b in zip(lb, rb)] + [ls[0][d] for d in lfree] + \
                      [rs[0][d] for d in rfree]
            kept = {a for axes in natural for a in axes}
            partial = {a for d in lc for a in ls[0][d]} | {a for d in rc for a in rs[0][d]}
            partial = (partial | ls[1] | rs[1]) - kept
            if natural != out[0] or partial - out[1]:
                self.move(tally, eqn, natural, partial, out[0], out[1], self.bytes_as(result, natural, eqn))
        if auto:
            splits = [s if s is not None else ones(jaxprs.aval(v)) for s, v in zip(ins[:2], (lhs, rhs))]
            n = math.prod(max(splits[0][a], splits[1][b]) for a, b in zip(lc, rc))
            if n > 1:
                self.auto_collective(tally, eqn, n, self.nbytes(result, out_splits[0], eqn))

    def reduction(self, tally: _Tally, eqn: Any, ins: list, out_splits: list, auto: bool) -> None:
        axes = jaxprs.optional_param(eqn, "axes")
        if axes is None:
            return
        operand, result = jaxprs.invars(eqn)[0], jaxprs.outvars(eqn)[0]
        src, dst = self.spec(operand), self.spec(result)
        if src is not None and dst is not None:
            partial = {a for d in axes for a in src[0][d]}
            natural = [dims for d, dims in enumerate(src[0]) if d not in axes]
            if partial or natural != dst[0]:
                self.move(tally, eqn, natural, partial, dst[0], dst[1], self.bytes_as(result, natural, eqn))
        if auto and ins[0] is not None:
            n = math.prod(ins[0][d] for d in axes if d < len(ins[0]))
            if n > 1:
                self.auto_collective(tally, eqn, n, self.nbytes(result, out_splits[0], eqn))

    def constrained(self, tally: _Tally, eqn: Any, ins: list) -> list:
        """A sharding constraint on Auto axes: its result split as it says; the ways the operand
        was split more than that are gathered (an all-gather of the result)."""
        result = jaxprs.outvars(eqn)[0]
        spec = getattr(jaxprs.optional_param(eqn, "sharding"), "spec", None)
        ndim = len(jaxprs.shape(result))
        if spec is None:
            return [ins[0]]
        out = spec_parts(spec, ndim, self.auto)
        before = ins[0] if ins[0] is not None else (1,) * ndim
        n = math.prod(b // o for b, o in zip(before, out) if b > o and b % o == 0)
        if n > 1:
            self.auto_collective(tally, eqn, n, self.nbytes(result, out, eqn), "all-gather")
        return [out]

    def auto_collective(self, tally: _Tally, eqn: Any, n: int, nbytes: int, kind: str = "all-reduce") -> None:
        """A collective over Auto axes of ``n`` devices in all (named by size)."""
        names = list(self.auto)
        for k in range(1, len(names) + 1):
            for axes in itertools.combinations(names, k):
                if math.prod(self.auto[a] for a in axes) == n:
                    self.collective(tally, kind, axes, nbytes, eqn, "auto")
                    return
        self.collective(tally, kind, tuple(names), nbytes, eqn, "auto")

    def compute(self, eqn: Any, prim: Primitive, ins: list, out_splits: list) -> None:
        """The equation's FLOPs (its family's, ``_FLOPS``) and memory bytes (see the module's
        conventions)."""
        if prim.data is not Data.WRITE or prim.family in _MOVES_NOTHING:
            return
        tally, away = self.tally, self.away
        flops = _FLOPS.get(prim.family)
        if flops is not None:
            flops(self, eqn, ins, out_splits)
        operands, results = jaxprs.invars(eqn), jaxprs.outvars(eqn)
        read = sum(self.nbytes(v, s, eqn) for v, s in zip(operands, ins) if jaxprs.is_literal(v) or v not in away)
        written = sum(self.nbytes(v, s, eqn) for v, s in zip(results, out_splits) if v not in away)
        tally.memory += read + written


# -- each family's rules: the collectives it makes, the jaxprs it runs, its FLOPs -----------------

@implements(Part.COST, Family.PSUM, Family.ALL_GATHER, Family.ALL_TO_ALL, Family.REDUCE_SCATTER, Family.PPERMUTE,
            Family.PBROADCAST)
def _collective(walk: _Cost, eqn: Any, ins: list, out_splits: list, auto: bool) -> None:
    """A collective primitive: counted inside ``shard_map`` (outside one it has no mesh axes of
    its own: vmap's)."""
    kind = jaxpr_walk.primitive_of(eqn).collective
    if walk.manual and kind is not None:
        walk.kernel_collective(walk.tally, eqn, kind)


@implements(Part.COST, Family.RESHARD)
def _reshard(walk: _Cost, eqn: Any, ins: list, out_splits: list, auto: bool) -> None:
    walk.reshard(walk.tally, eqn, ins)


@implements(Part.COST, Family.CONSTRAINT)
def _constraint(walk: _Cost, eqn: Any, ins: list, out_splits: list, auto: bool) -> list | None:
    """A sharding constraint: a reshard on Explicit axes; on Auto axes the splits it says (what
    it drops all-gathered)."""
    found = walk.constrained(walk.tally, eqn, ins) if auto else None
    walk.reshard(walk.tally, eqn, ins)
    return found


@implements(Part.COST, Family.CONTRACTION)
def _contraction(walk: _Cost, eqn: Any, ins: list, out_splits: list, auto: bool) -> None:
    walk.dot(walk.tally, eqn, ins, out_splits, auto)


@implements(Part.COST, Family.REDUCE)
def _reduction(walk: _Cost, eqn: Any, ins: list, out_splits: list, auto: bool) -> None:
    walk.reduction(walk.tally, eqn, ins, out_splits, auto)


def _contraction_flops(walk: _Cost, eqn: Any, ins: list, out_splits: list) -> None:
    """2 x result elements x contracted size, per device (``ragged_dot_general`` too: each row
    multiplies its group's matrix)."""
    operands, results = jaxprs.invars(eqn), jaxprs.outvars(eqn)
    (lc, rc), _ = jaxprs.contraction(eqn).dimension_numbers
    lhs = walk.local(operands[0], ins[0], eqn)
    rhs = walk.local(operands[1], ins[1], eqn)
    out = walk.local(results[0], out_splits[0], eqn)
    if lhs is not None and rhs is not None and out is not None:
        contracted = math.prod(min(lhs[a], rhs[b]) for a, b in zip(lc, rc))
        flops = 2 * math.prod(out) * contracted
        walk.tally.flop(_dtype(operands[0]), flops)
        walk.tally.matmul += flops


def _convolution_flops(walk: _Cost, eqn: Any, ins: list, out_splits: list) -> None:
    operands, results = jaxprs.invars(eqn), jaxprs.outvars(eqn)
    rhs = walk.local(operands[1], ins[1], eqn)
    out = walk.local(results[0], out_splits[0], eqn)
    numbers = jaxprs.optional_param(eqn, "dimension_numbers")
    o = getattr(numbers, "rhs_spec", (0,))[0]
    if rhs is not None and out is not None and rhs[o]:
        flops = 2 * math.prod(out) * (math.prod(rhs) // rhs[o])
        walk.tally.flop(_dtype(operands[0]), flops)
        walk.tally.matmul += flops


def _elementwise_flops(walk: _Cost, eqn: Any, ins: list, out_splits: list) -> None:
    """One per result element (and for a primitive no record knows, named in the cost)."""
    for v, s in zip(jaxprs.outvars(eqn), out_splits):
        shape = walk.local(v, s, eqn)
        walk.tally.flop(_dtype(v), math.prod(shape) if shape is not None else 0)


def _reduction_flops(walk: _Cost, eqn: Any, ins: list, out_splits: list) -> None:
    """One per operand element."""
    shape = walk.local(jaxprs.invars(eqn)[0], ins[0], eqn)
    walk.tally.flop(_dtype(jaxprs.invars(eqn)[0]), math.prod(shape) if shape is not None else 0)


_FLOPS: dict[Family, Callable] = {Family.CONTRACTION: _contraction_flops, Family.CONVOLUTION: _convolution_flops,
                                  Family.ELEMENTWISE: _elementwise_flops, Family.UNKNOWN: _elementwise_flops,
                                  Family.REDUCE: _reduction_flops, Family.CUMULATIVE: _reduction_flops}
# Families that move no data of their own (their bodies count; a reshard's collectives count).
_MOVES_NOTHING = frozenset({Family.CALL, Family.SCAN, Family.WHILE, Family.COND, Family.SHARD_MAP, Family.RESHARD,
                            Family.CONSTRAINT})


def _shard_map(walk: _Cost, eqn: Any, inside: jaxpr_walk.Nesting, ins: list) -> list:
    body = inside.bodies[0]
    found, _ = walk.jaxpr(body, [None] * len(jaxprs.invars(body)), walk.manual | inside.new_axes)
    walk.tally.add(found)
    return walk.shard_map_outs(eqn, inside)


def _scan(walk: _Cost, eqn: Any, inside: jaxpr_walk.Nesting, ins: list) -> list:
    consts, carries, length = inside.consts, inside.carries, inside.trips
    xs = [s[1:] if s is not None else None for s in ins[consts + carries:]]
    found, outs = walk.jaxpr(inside.bodies[0], ins[:consts + carries] + xs, walk.manual)
    walk.tally.add(found, length if length is not None else 1)
    if length is None:
        walk.unknown.setdefault(f"a scan of symbolic length is counted once ({user_frame(jaxprs.frames(eqn))})", set())
    return outs[:carries] + [(1, *s) if s is not None else None for s in outs[carries:]]


def _while(walk: _Cost, eqn: Any, inside: jaxpr_walk.Nesting, ins: list) -> list:
    """The condition runs once more than the body: ``trips + 1`` and ``trips`` times."""
    cond_n, body_n, trips = inside.consts, inside.carries, inside.trips
    carry = ins[cond_n + body_n:]
    cond, body = inside.bodies
    for j, fixed, extra in ((cond, ins[:cond_n], 1), (body, ins[cond_n:cond_n + body_n], 0)):
        found, _ = walk.jaxpr(j, fixed + carry, walk.manual)
        walk.tally.add(found, 1 if trips is None else trips + extra)
    if trips is None:
        where = user_frame(jaxprs.frames(eqn))
        walk.unknown.setdefault(WHILE_ONCE + (f" (at {where})" if where else ""), set())
    return list(carry)


def _cond(walk: _Cost, eqn: Any, inside: jaxpr_walk.Nesting, ins: list) -> list:
    """The costliest branch."""
    branches = [walk.jaxpr(j, ins[1:], walk.manual) for j in inside.bodies]
    costly, outs = max(branches, key=lambda f: f[0].weight())
    walk.tally.add(costly)
    return outs


def _call(walk: _Cost, eqn: Any, inside: jaxpr_walk.Nesting, ins: list) -> list:
    found, outs = walk.jaxpr(inside.bodies[0], ins, walk.manual)
    walk.tally.add(found)
    return outs


_NESTED: dict[Family, Callable] = {Family.SHARD_MAP: _shard_map, Family.SCAN: _scan, Family.WHILE: _while,
                                   Family.COND: _cond, Family.CALL: _call}


def _dtype(v: Any) -> str:
    return getattr(getattr(jaxprs.aval(v), "dtype", None), "name", "?")


def cost_of(closed: Any, leaves: list, sizes: Mapping[str, int], auto: Mapping[str, int]) -> StepCost:
    """The ``StepCost`` of a traced step (``activations.trace_step``'s closed jaxpr and argument
    leaves), the mesh's axes of ``sizes`` (name -> size), of which ``auto`` are Auto axes."""
    walk = _Cost(dict(sizes), dict(auto))
    jaxpr = jaxprs.inner_jaxpr(closed)
    specs = [getattr(getattr(leaf, "sharding", None), "spec", None) for leaf in leaves]
    ins = [spec_parts(spec, len(getattr(leaf, "shape", ())), walk.auto)
           if walk.auto else None for spec, leaf in zip(specs, leaves)]
    tally, _ = walk.jaxpr(jaxpr, ins, frozenset())
    collectives = tuple(sorted((Collective(kind, axes, sent, times, where, source)
                                for (kind, axes, sent, where, source), times in tally.collectives.items()),
                               key=lambda c: (-c.total, c.kind, c.axes, c.where)))
    lower = tuple(f"{why} are not counted (in {', '.join(sorted(names))})" if names else why
                  for why, names in walk.unknown.items())
    assumed: tuple[str, ...] = ()
    if walk.unrecorded:
        assumed += (f"primitives the registry has no record of ({', '.join(sorted(walk.unrecorded))}) were counted "
                    "as elementwise: one FLOP per result element, their operands and results as bytes moved",)
    if walk.auto and any(c.source == "auto" for c in collectives):
        named = ", ".join(f"{a}={n}" for a, n in walk.auto.items())
        assumed += (f"on Auto axes ({named}) XLA chooses layouts: each value was assumed split as its operands "
                   "are (a sharding constraint as it says: what it drops all-gathered), and a contraction or reduction "
                   "over split dims to end in an all-reduce "
                   "(axes named by their size)",)
    communication = Communication(collectives, lower, assumed)
    flops = dict(sorted(tally.flops.items(), key=lambda t: -t[1]))
    return StepCost(communication, sum(flops.values()), flops, tally.memory, lower, tally.matmul)


def step_cost(closed: Any, leaves: list, mesh: Any) -> StepCost:
    """``cost_of`` on ``mesh`` (an AbstractMesh or Mesh). Where the walk cannot follow the step
    (params of a control-flow primitive in a shape this JAX release reader does not know:
    ``jaxprs.Unreadable``), that is said in the cost (a lower bound of nothing); any other failure is a
    bug of shardtypes' and is raised."""
    sizes = dict(zip(mesh.axis_names, mesh.axis_sizes))
    auto = {a: n for a, n, t in zip(mesh.axis_names, mesh.axis_sizes, mesh.axis_types)
            if t == jax.sharding.AxisType.Auto}
    try:
        return cost_of(closed, leaves, sizes, auto)
    except jaxprs.Unreadable as e:
        why = (f"the cost walk could not follow this step ({e}); nothing was counted",)
        return StepCost(Communication((), why), 0, {}, 0, why)
