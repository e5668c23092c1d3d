"""The step cost's model: one walk over a traced step's jaxpr (``checking.jaxpr_walk.Walk``)
that counts what one device sends, computes and moves through its memory per run, by the
registry's records (``checking.primitives``): each family's rule (collectives, reshards,
contractions, reductions), its FLOPs (``_FLOPS``), and the jaxprs a call, loop, cond or kernel
runs (``_NESTED``, times their runs). The figures and their conventions, and how they are
shown, are ``step_cost``'s (a report: ``StepCost``, ``Communication``, ``Collective``).

A primitive the registry has no record of is counted as elementwise (one FLOP per result element,
its operands and results as bytes moved) and named in the cost's assumptions.

On Auto mesh axes the jaxpr carries no shardings: each value's splits are followed from the
arguments' (``Split``: how many ways, over which mesh axes), and what XLA's partitioner does where
the types do not say is modelled, each assumption named in the cost (``AUTO_*``): a contraction
whose operands disagree takes the cheaper of gathering an operand and reducing partial sums; a
gathered operand is gathered again by each contraction that reads it; a partial sum (``Owed``)
is reduced where it is first used whole, as a reduce-scatter where that use splits it.
"""

from __future__ import annotations

import itertools
import math
from typing import Any, Callable, Mapping

import jax

from ..checking import jaxpr_walk, jaxprs, primitives
from ..language import entry_axes
from ..layout import per_device_shape, spec_entries
from .activation_rules import auto_splits, dead, fused, local_shape, ones
from .activations import SYMBOLIC, user_frame
from .step_cost import Collective, Communication, StepCost

Arith = primitives.Arith
Data = primitives.Data
Family = primitives.Family
Part = primitives.Part
Primitive = primitives.Primitive
implements = primitives.implements
rule_of = primitives.rule_of

__all__ = ["cost_of", "step_cost", "WHILE_ONCE", "AUTO_LAYOUT", "AUTO_CONTRACTION", "AUTO_REGATHER", "AUTO_PARTIAL"]

WHILE_ONCE = "a while loop's body (its trip count is not known from the jaxpr) is counted once"
AUTO_LAYOUT = ("on Auto axes ({named}) XLA chooses layouts: each value was assumed split as its operands are, over "
               "the same mesh axes (a sharding constraint as it says: what it drops all-gathered)")
AUTO_CONTRACTION = ("at a contraction whose operands' splits disagree (a contracted dim split on one operand only, or "
                    "one mesh axis on two dims of the result), the cheaper in bytes of all-gathering an operand and "
                    "computing partial sums to reduce was assumed, as GSPMD's dot handler weighs them; where the "
                    "result would split two dims over one axis, the left operand (the activation of x @ w) keeps "
                    "its split and the right one is gathered")
AUTO_REGATHER = ("an operand gathered for a contraction was assumed gathered again by every other contraction that "
                 "reads it (the backward pass's second gather of FSDP weights), not kept live between them")
AUTO_PARTIAL = ("a partial sum (of a contraction or reduction over split dims) was assumed reduced where it is first "
                "used whole: by a reduce-scatter where that use splits it over the summed axes (what a GPU or TPU "
                "backend makes of an all-reduce whose every use takes a 1/n slice; XLA on CPU keeps the "
                "all-reduce), else by an all-reduce; transposes, reshapes, sharding constraints, scalings and "
                "sums of partial sums pass it on unreduced, and a loop's stacked results are reduced where they "
                "are used")


class Split(int):
    """How many ways a dim is split over Auto axes (an int, as ``activation_rules`` reads
    splits), and over which mesh axes (``axes``): the rules there pass it on as it is."""

    axes: tuple

    def __new__(cls, n: int, axes: tuple) -> Split:
        made = super().__new__(cls, n)
        made.axes = axes
        return made

    def __repr__(self) -> str:
        return f"{int(self)}/{'/'.join(self.axes)}"


def _axes(split: Any) -> tuple:
    return getattr(split, "axes", ())


class Owed(tuple):
    """A value's Auto splits while it is still a partial sum over the mesh axes ``axes``:
    ``nbytes`` its bytes per device, ``eqn`` what made it, ``times`` how often a run makes it (a
    loop's stacked result: its trips); ``settled`` its splits once reduced (None before)."""

    axes: tuple
    nbytes: int
    eqn: Any
    times: int
    settled: tuple | None

    def __new__(cls, splits: tuple, axes: tuple, nbytes: int, eqn: Any, times: int = 1) -> Owed:
        made = super().__new__(cls, splits)
        made.axes, made.nbytes, made.eqn, made.times, made.settled = axes, nbytes, eqn, times, None
        return made

    def again(self, splits: tuple | None = None, times: int = 1) -> Owed:
        return Owed(tuple(self) if splits is None else splits, self.axes, self.nbytes, self.eqn, self.times * times)


def _owing(splits: Any) -> bool:
    return isinstance(splits, Owed) and splits.settled is None


def _key(ins: list) -> tuple:
    """Splits as a cache key: the axes of each split, and what a partial sum still owes."""
    return tuple(None if s is None else (tuple((int(x), _axes(x)) for x in s), s.axes if _owing(s) else None)
                 for s in ins)


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
        self.assumed: set = set()  # the Auto-axes assumptions the walk made (AUTO_*)

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

    def collective(self, tally: _Tally, kind: str, axes: tuple, operand: int, eqn: Any, source: str,
                   times: int = 1) -> None:
        """Counts a collective over ``axes`` whose operand (for an all-gather: whose result) one
        device holds ``operand`` bytes of (``times`` times)."""
        n = math.prod(self.sizes.get(a, 1) for a in axes)
        if n <= 1:
            return
        sent = {"all-gather": operand * (n - 1) // n, "reduce-scatter": operand * (n - 1) // n,
                "all-reduce": 2 * operand * (n - 1) // n, "all-to-all": operand * (n - 1) // n,
                "permute": operand}[kind]
        if sent or operand == 0:
            key = (kind, tuple(axes), sent, user_frame(jaxprs.frames(eqn)), source)
            tally.collectives[key] = tally.collectives.get(key, 0) + times

    # -- the walk ---------------------------------------------------------------------------------

    def jaxpr(self, jaxpr: Any, ins: list, manual: frozenset, keep: Callable[[int], bool] = lambda i: False
              ) -> tuple[_Tally, list]:
        """(the cost of one run of ``jaxpr``, its outputs' Auto splits); ``ins`` its inputs'
        Auto splits (None: not split), ``manual`` the mesh axes made manual around it. A partial
        sum it returns is reduced inside it, unless ``keep`` (its index) says the caller does."""
        key = (id(jaxpr), _key(ins), manual, tuple(keep(i) for i in range(len(jaxprs.outvars(jaxpr)))))
        if key in self.walked:
            tally, outs = self.walked[key][:2]
            return tally, [s.again() if _owing(s) else s for s in outs]
        held = self.tally, self.manual, self.away, self.gone
        outs = {v for v in jaxprs.outvars(jaxpr) if not jaxprs.is_literal(v)}
        eqns = jaxprs.eqns(jaxpr)
        dropped = dead(eqns, outs)
        self.gone = {id(e) for i, e in enumerate(eqns) if i in dropped}
        self.tally, self.manual = _Tally(), manual
        self.away = fused([e for i, e in enumerate(eqns) if i not in dropped], outs)
        try:
            outs = self.run(jaxpr, ins)
            result = (self.tally, [self.pay(s, None) if _owing(s) and not keep(i) else s for i, s in enumerate(outs)])
        finally:
            self.tally, self.manual, self.away, self.gone = held
        self.walked[key] = (*result, jaxpr)  # (the jaxpr kept: its id stays its own)
        return result

    def read(self, env: dict, v: Any) -> Any:
        found = None if jaxprs.is_literal(v) else env.get(v)
        return found.settled if isinstance(found, Owed) and found.settled is not None else found

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
                return _NESTED[prim.family](self, eqn, inside, [self.pay(s, None) if _owing(s) else s for s in ins])
        elif prim.family is Family.UNKNOWN and jaxprs.call_jaxpr(eqn) is not None:
            # (a primitive no record knows that runs a jaxpr of its operands: followed as a call)
            self.unrecorded.add(prim.name)
            return _call(self, eqn, jaxpr_walk.Nesting(Family.CALL, (jaxprs.call_jaxpr(eqn),)), ins)
        auto = bool(self.auto) and not self.auto.keys() <= self.manual
        through = auto and self.passes_on(eqn, prim, ins)
        if auto and not through:
            ins = self.settle(eqn, ins)
        out_splits = self.rule(eqn, ins) if auto else [None] * len(jaxprs.outvars(eqn))
        found = rule_of(Part.COST, prim)
        if found is not None:
            out_splits = found(self, eqn, ins, out_splits, auto) or out_splits
        elif prim.family is Family.UNKNOWN:
            self.unrecorded.add(prim.name)
        self.compute(eqn, prim, ins, out_splits)
        if through:
            owed = next(s for s in ins if _owing(s))
            out_splits = [Owed(tuple(out_splits[0] or ()), owed.axes, owed.nbytes, owed.eqn, owed.times)]
        return out_splits

    # -- partial sums on Auto axes ----------------------------------------------------------------

    def passes_on(self, eqn: Any, prim: Primitive, ins: list) -> bool:
        """Whether ``eqn`` passes a partial sum on unreduced (XLA reduces it after, where a GPU
        or TPU backend sees the slice its use takes): a transpose, reshape, cast or sharding
        constraint of it, a scaling of it (its other operands scalars), a sum of partial sums over
        the same axes."""
        owed = [s for s in ins if _owing(s)]
        if not owed or len(jaxprs.outvars(eqn)) != 1:
            return False
        if prim.family in (Family.TRANSPOSE, Family.RESHAPE, Family.SQUEEZE, Family.CAST, Family.CONSTRAINT):
            return True
        if prim.family is not Family.ELEMENTWISE or not prim.linear:
            return False
        others = [v for v, s in zip(jaxprs.invars(eqn), ins) if not _owing(s) and not jaxprs.is_literal(v)
                  and jaxprs.shape(v) != ()]
        if prim.arith in (Arith.MUL, Arith.DIV, Arith.NEG, Arith.CONVERT):
            return not others and len(owed) == 1 and (prim.arith is not Arith.DIV or _owing(ins[0]))
        if prim.arith in (Arith.ADD, Arith.ADD_ANY, Arith.SUB):
            return not others and len({o.axes for o in owed}) == 1 and all(_owing(s) for s in ins
                                                                            if s is not None)
        return False

    def settle(self, eqn: Any, ins: list) -> list:
        """The partial sums ``eqn`` reads, reduced (a reduce-scatter over the summed axes its
        result splits, where it is of their shape)."""
        if not any(_owing(s) for s in ins):
            return ins
        plain = [tuple(s) if _owing(s) else s for s in ins]
        result = self.rule(eqn, plain)[0] if jaxprs.outvars(eqn) else None
        shape = jaxprs.shape(jaxprs.outvars(eqn)[0]) if jaxprs.outvars(eqn) else None
        return [self.pay(s, result if jaxprs.shape(v) == shape else None) if _owing(s) else s
                for v, s in zip(jaxprs.invars(eqn), ins)]

    def pay(self, owed: Owed, target: tuple | None) -> tuple:
        """Reduces ``owed`` into the tally: a reduce-scatter over the summed axes ``target`` (the
        splits it is used with) splits it over, an all-reduce over the rest; its splits then."""
        mine = {a for x in owed for a in _axes(x)}
        split = {a for x in (target or ()) for a in _axes(x)}
        scatter = tuple(a for a in owed.axes if a in split and a not in mine)
        reduce = tuple(a for a in owed.axes if a not in scatter)
        nbytes = owed.nbytes
        self.assumed.add(AUTO_PARTIAL)
        if scatter:
            self.collective(self.tally, "reduce-scatter", scatter, nbytes, owed.eqn, "auto", owed.times)
            nbytes //= math.prod(self.sizes[a] for a in scatter)
        if reduce:
            self.collective(self.tally, "all-reduce", reduce, nbytes, owed.eqn, "auto", owed.times)
        settled = tuple(t if set(_axes(t)) & set(scatter) else x for x, t in zip(owed, target or ())) if scatter else \
            tuple(owed)
        owed.settled = settled
        return settled

    def layout(self, spec: Any, ndim: int) -> tuple:
        """A PartitionSpec's Auto splits (``Split`` per dim, 1 where not split)."""
        entries = spec_entries(spec)
        out = []
        for i in range(ndim):
            axes = tuple(a for a in entry_axes(entries[i] if i < len(entries) else None) if a in self.auto)
            n = math.prod(self.auto[a] for a in axes)
            out.append(Split(n, axes) if n > 1 else 1)
        return tuple(out)

    def shard_map_outs(self, eqn: Any, inside: jaxpr_walk.Nesting) -> list:
        outs = jaxprs.outvars(eqn)
        if not self.auto:
            return [None] * len(outs)
        return [self.layout(spec, len(jaxprs.shape(v))) for spec, v in zip(inside.out_specs, outs)]

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

    def dot(self, tally: _Tally, eqn: Any, ins: list, out_splits: list, auto: bool) -> list | None:
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
        return self.auto_dot(tally, eqn, ins) if auto else None

    def auto_dot(self, tally: _Tally, eqn: Any, ins: list) -> list:
        """A contraction on Auto axes, as XLA's partitioner does it (``AUTO_CONTRACTION``): batch
        dims split as the more split operand; a right free dim split over an axis the left
        operand's result dims use, gathered; each contracted pair split as one operand, the other
        or neither, whichever sends the fewest bytes (an operand's gathers, and the result's
        all-reduce where the pair stays split: a partial sum, ``Owed``). ``ins`` becomes the
        operands' splits as computed (the FLOPs and bytes read follow)."""
        operands = jaxprs.invars(eqn)[:2]
        start = [tuple(s) if s is not None else ones(jaxprs.aval(v)) for s, v in zip(ins[:2], operands)]
        spec = jaxprs.contraction(eqn)
        (lc, rc), (lb, rb) = spec.dimension_numbers
        lhs, rhs = list(start[0]), list(start[1])
        for a, b in zip(lb, rb):
            if _axes(lhs[a]) != _axes(rhs[b]):
                lhs[a] = rhs[b] = max(lhs[a], rhs[b])
        lfree = [d for d in range(len(lhs)) if d not in lc and d not in lb]
        rfree = [d for d in range(len(rhs)) if d not in rc and d not in rb and d not in spec.rhs_dropped]
        used = {a for d in [*lb, *lfree] for a in _axes(lhs[d])}
        for d in rfree:
            if used & set(_axes(rhs[d])):
                rhs[d] = 1
        pairs = list(zip(lc, rc))
        options = [[lhs[a]] if _axes(lhs[a]) == _axes(rhs[b]) else [x for x in (lhs[a], rhs[b]) if x != 1] + [1]
                   for a, b in pairs]
        made = [self.contracted(eqn, start, lhs, rhs, pairs, choice) for choice in itertools.product(*options)]
        _, new, owed = min(made, key=lambda m: m[0])  # (the first of the cheapest)
        if any(len(o) > 1 for o in options) or new[1] != start[1]:
            self.assumed.add(AUTO_CONTRACTION)
        for v, before, after in zip(operands, start, new):
            self.gather(tally, eqn, v, before, after)
        ins[0], ins[1] = new
        out = auto_splits(eqn, list(new))[0]
        if not owed:
            return [out]
        return [Owed(out, self.ordered(owed), self.nbytes(jaxprs.outvars(eqn)[0], out, eqn), eqn)]

    def contracted(self, eqn: Any, start: list, lhs: list, rhs: list, pairs: list, choice: tuple) -> tuple:
        """(bytes sent, the operands' splits, the axes summed over) of contracting each pair of
        ``pairs`` split as ``choice`` says: another dim of an operand split over those axes is
        gathered."""
        sides: list[list] = [list(lhs), list(rhs)]
        owed: set = set()
        for (a, b), split in zip(pairs, choice):
            axes = set(_axes(split))
            owed |= axes
            for side, d in ((0, a), (1, b)):
                sides[side] = [1 if i != d and axes & set(_axes(x)) else x for i, x in enumerate(sides[side])]
                sides[side][d] = split
        new = [tuple(x) for x in sides]
        operands = jaxprs.invars(eqn)[:2]
        sent = sum(self.gathered_bytes(v, s, n, eqn) for v, s, n in zip(operands, start, new))
        if owed:
            out = auto_splits(eqn, list(new))[0]
            n = math.prod(self.sizes[a] for a in owed)
            sent += 2 * self.nbytes(jaxprs.outvars(eqn)[0], out, eqn) * (n - 1) // n
        return sent, new, owed

    @staticmethod
    def gathering(before: tuple, after: tuple) -> tuple[tuple, tuple]:
        """(the mesh axes gathered to take splits ``before`` to ``after``, the splits once
        gathered: a dim that loses an axis is gathered whole; adding one is a slice)."""
        whole = tuple(b if set(_axes(b)) <= set(_axes(x)) else 1 for b, x in zip(before, after))
        return tuple(a for b, w in zip(before, whole) for a in _axes(b) if w == 1), whole

    def gathered_bytes(self, v: Any, before: tuple, after: tuple, eqn: Any) -> int:
        axes, whole = self.gathering(before, after)
        if not axes:
            return 0
        n = math.prod(self.sizes[a] for a in axes)
        return self.nbytes(v, whole, eqn) * (n - 1) // n

    def gather(self, tally: _Tally, eqn: Any, v: Any, before: tuple, after: tuple) -> None:
        """The all-gather that takes operand ``v`` of a contraction from ``before`` to ``after``
        (each contraction its own: ``AUTO_REGATHER``)."""
        axes, whole = self.gathering(before, after)
        if not axes:
            return
        self.assumed.add(AUTO_REGATHER)
        self.collective(tally, "all-gather", self.ordered(axes), self.nbytes(v, whole, eqn), eqn, "auto")

    def reduction(self, tally: _Tally, eqn: Any, ins: list, out_splits: list, auto: bool) -> list | None:
        axes = jaxprs.optional_param(eqn, "axes")
        if axes is None:
            return None
        operand, result = jaxprs.invars(eqn)[0], jaxprs.outvars(eqn)[0]
        src, dst = self.spec(operand), self.spec(result)
        if src is not None and dst is not None:
            partial = {a for d in axes for a in src[0][d]}
            natural = [dims for d, dims in enumerate(src[0]) if d not in axes]
            if partial or natural != dst[0]:
                self.move(tally, eqn, natural, partial, dst[0], dst[1], self.bytes_as(result, natural, eqn))
        if auto and ins[0] is not None:
            summed = self.ordered([a for d in axes if d < len(ins[0]) for a in _axes(ins[0][d])])
            if summed:
                return [Owed(out_splits[0], summed, self.nbytes(result, out_splits[0], eqn), eqn)]
        return None

    def constrained(self, tally: _Tally, eqn: Any, ins: list) -> list:
        """A sharding constraint on Auto axes: its result split as it says; the ways the operand
        was split more than that are gathered (an all-gather of the result)."""
        result = jaxprs.outvars(eqn)[0]
        spec = getattr(jaxprs.optional_param(eqn, "sharding"), "spec", None)
        ndim = len(jaxprs.shape(result))
        if spec is None:
            return [ins[0]]
        out = self.layout(spec, ndim)
        before = ins[0] if ins[0] is not None else (1,) * ndim
        dropped = [a for b, o in zip(before, out) for a in _axes(b) if a not in _axes(o)]
        if dropped:
            self.collective(tally, "all-gather", self.ordered(dropped), self.nbytes(result, out, eqn), eqn, "auto")
        return [out]

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
def _contraction(walk: _Cost, eqn: Any, ins: list, out_splits: list, auto: bool) -> list | None:
    return walk.dot(walk.tally, eqn, ins, out_splits, auto)


@implements(Part.COST, Family.REDUCE)
def _reduction(walk: _Cost, eqn: Any, ins: list, out_splits: list, auto: bool) -> list | None:
    return walk.reduction(walk.tally, eqn, ins, out_splits, auto)


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
    found, outs = walk.jaxpr(inside.bodies[0], ins[:consts + carries] + xs, walk.manual, lambda i: i >= carries)
    trips = length if length is not None else 1
    walk.tally.add(found, trips)
    if length is None:
        walk.unknown.setdefault(f"a scan of symbolic length is counted once ({user_frame(jaxprs.frames(eqn))})", set())
    return outs[:carries] + [s.again((1, *s), trips) if _owing(s) else (1, *s) if s is not None else None
                             for s in outs[carries:]]


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
    found, outs = walk.jaxpr(inside.bodies[0], ins, walk.manual, lambda i: True)
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
    ins = [walk.layout(spec, len(getattr(leaf, "shape", ()))) if walk.auto else None
           for spec, leaf in zip(specs, leaves)]
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
        assumed += (AUTO_LAYOUT.format(named=", ".join(f"{a}={n}" for a, n in walk.auto.items())),)
        assumed += tuple(a for a in (AUTO_CONTRACTION, AUTO_REGATHER, AUTO_PARTIAL) if a in walk.assumed)
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
