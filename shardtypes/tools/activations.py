"""Activation memory: the peak bytes per device of a step's intermediate values, from its jaxpr.

``verify`` traces the step once (``trace_step``: ``jax.make_jaxpr``, which gives the outputs
``jax.eval_shape`` would and the jaxpr, the backward pass included where the step takes a
gradient) and ``estimate`` walks the jaxpr in program order: a value is live from the equation
that makes it to the last that reads it; the step's arguments and outputs are not counted (XLA's
``temp_size_in_bytes`` leaves them out too). A loop's body, a call's or a cond's branch adds its
own peak at the equation that runs it, once; a scan's stacked outputs (what a scan over layers
keeps for the backward pass) are counted whole.

What XLA keeps that the jaxpr does not show is counted as XLA does (measured against its buffer
assignment, benchmarks/activations.py): a matmul that contracts a dim split over the mesh holds
each device's partial sum beside the all-reduced result (one more buffer of the result's size, at
that equation); a scan's body copies out the slices of its stacked operands a matmul reads (one
layer's weights, live from the trip's start); a loop's carries are updated in place (an initial
value whose last reader is the loop is the loop's buffer, and one whose carry is a step output is
made in that output's buffer: the zeros gradients are accumulated into). The outputs are taken to
have buffers of their own, as when the step's state is donated; where values alike them are live
at the peak the estimate says what not donating may save.

Each value's bytes per device come from its layout: inside ``shard_map`` kernels its local shape
(exact); on Explicit mesh axes the sharding JAX's types give (exact); on Auto axes, where XLA
chooses, a value is assumed split as its operands are (``activation_rules.auto_splits``: a matmul keeps the splits
of the dims it keeps, a reduction drops those of the dims it reduces, an elementwise op takes its
operands'), and the estimate says so. A value whose size is symbolic (a dim verify was not given)
or whose dtype has no size, and a host callback, make the figure a lower bound, named.

Reads JAX's equations through ``checking.jaxprs``; the rules of single primitives are in
``activation_rules``.
"""

from __future__ import annotations

import dataclasses
import heapq
import math
import os
from typing import Any, Callable

import jax

from ..checking import jaxpr_walk, jaxprs, primitives
from ..language import fmt_bytes
from . import fields
from .activation_rules import (
    auto_splits,
    backward_splits,
    dead,
    fused,
    fusing,
    local_shape,
    loop_carries,
    ones,
    partial_sum,
    passed_through,
    spec_parts,
)

Data = primitives.Data
Family = primitives.Family

__all__ = ["ActivationEstimate", "LiveValue", "alike", "estimate", "trace_step", "SYMBOLIC"]

SYMBOLIC = "values of symbolic size (dims verify was not given)"

_LARGEST = 5

# Primitives whose results take no memory of their own are the records' ``Data.ALIAS``:
# shardtypes' compile-time check (an identity whose result nothing uses; XLA drops it), JAX's
# changes of a value's varying type inside shard_map, and identities under jit (``stop_gradient``,
# a ``device_put`` in a traced step). Their results stand for their operands.


def _free(eqn: Any) -> bool:
    return jaxpr_walk.primitive_of(eqn).data is Data.ALIAS


@dataclasses.dataclass(frozen=True)
class LiveValue:
    """One value live at the peak: its bytes per device, what makes it (the primitive and the
    per-device shape) and where in the user's code (``model.py:42 (mlp)``; '' if not known)."""

    bytes_per_device: int
    what: str
    where: str = ""

    def __post_init__(self) -> None:
        fields.count("LiveValue", "bytes_per_device", self.bytes_per_device)
        fields.text("LiveValue", "what", self.what)
        fields.text("LiveValue", "where", self.where)

    def __str__(self) -> str:
        return f"{fmt_bytes(self.bytes_per_device)} {self.what}" + (f" at {self.where}" if self.where else "")


@dataclasses.dataclass(frozen=True)
class ActivationEstimate:
    """The step's peak intermediate memory per device (see the module's docstring)."""

    bytes_per_device: int
    largest: tuple[LiveValue, ...] = ()
    lower_bound: tuple[str, ...] = ()  # why the figure is only a lower bound (empty: it is not)
    assumed: str = ""  # what was assumed that the step does not say (layouts on Auto axes, donation), or ''

    def __post_init__(self) -> None:
        fields.count("ActivationEstimate", "bytes_per_device", self.bytes_per_device)
        fields.items("ActivationEstimate", "largest", self.largest, LiveValue)
        fields.texts("ActivationEstimate", "lower_bound", self.lower_bound)
        fields.text("ActivationEstimate", "assumed", self.assumed)


    def __str__(self) -> str:
        if not self.bytes_per_device:
            if not self.lower_bound:
                return "none: every value the step makes is one of its outputs (or fused away)"
            return "not known: " + "; ".join(self.lower_bound) + (f" ({self.assumed})" if self.assumed else "")
        head = f"{'at least ' if self.lower_bound else ''}{fmt_bytes(self.bytes_per_device)} per device at the peak"
        parts = [head]
        if self.largest:
            parts.append("largest live then: " + "; ".join(f"{n} x {v}" if n > 1 else str(v)
                                                           for n, v in alike(self.largest)[:3]))
        if self.lower_bound:
            parts.append("a lower bound: " + "; ".join(self.lower_bound))
        if self.assumed:
            parts.append(self.assumed)
        return ", ".join(parts[:2]) + "".join(f" ({p})" for p in parts[2:])

    def to_dict(self) -> dict:
        return {"bytes_per_device": self.bytes_per_device,
                "largest": [dataclasses.asdict(v) for v in self.largest],
                "lower_bound": list(self.lower_bound), "assumed": self.assumed}


def alike(values: tuple[LiveValue, ...]) -> list[tuple[int, LiveValue]]:
    """``values`` with alike ones (same bytes, maker and line: the layers of a scan) counted
    once, ``(count, value)``, in the order of their first."""
    counts: dict[LiveValue, int] = {}
    for v in values:
        counts[v] = counts.get(v, 0) + 1
    return [(n, v) for v, n in counts.items()]


def trace_step(fn: Callable, args: dict) -> tuple[Any, Any, list]:
    """``fn(**args)`` traced once: (its outputs as ``jax.eval_shape`` gives them, its closed
    jaxpr, the argument leaves in the jaxpr's input order)."""
    leaves, tree = jax.tree_util.tree_flatten(args)

    def flat(*xs: Any) -> Any:
        return fn(**jax.tree_util.tree_unflatten(tree, xs))

    closed, outputs = jax.make_jaxpr(flat, return_shape=True)(*leaves)
    return outputs, closed, leaves


_SKIP = (os.path.dirname(jax.__file__), os.path.dirname(os.path.dirname(__file__)), f"{os.sep}jaxlib{os.sep}",
         f"{os.sep}typeguard{os.sep}", f"{os.sep}contextlib.py", f"{os.sep}functools.py", "<frozen ")


def user_frame(frames: list[tuple[str, int, str]]) -> str:
    """``file.py:42 (function)`` of the innermost frame outside JAX, shardtypes and the standard
    library's wrappers; '' when there is none."""
    for file, line, function in frames:
        if not any(s in file for s in _SKIP):
            return f"{os.path.basename(file)}:{line} ({function})"
    return ""


def estimate(closed: Any, leaves: list, auto_axes: dict[str, int]) -> ActivationEstimate:
    """The peak of ``closed``'s intermediate values per device; ``leaves`` are its arguments
    (ShapeDtypeStructs or arrays with shardings), ``auto_axes`` the sizes of the mesh's Auto axes
    (empty: every layout is in the types)."""
    walk = _Walk(auto_axes)
    jaxpr = jaxprs.inner_jaxpr(closed)
    in_splits = [walk.input_splits(leaf) for leaf in leaves] if walk.auto else [None] * len(leaves)
    peak, top, _ = walk.jaxpr(jaxpr, in_splits)
    largest = tuple(walk.label(*entry) for entry in sorted(top, key=lambda t: -t[0]))
    assumed = []
    if walk.auto:
        named = ", ".join(f"{a}={n}" for a, n in auto_axes.items())
        assumed.append(f"on Auto axes ({named}) XLA chooses layouts: each value was assumed split as its "
                       "operands are")
    spare = _alike_outputs(jaxpr, top)
    if spare * 10 >= peak > 0:  # (said where it is a tenth of the figure or more)
        assumed.append(f"the outputs were assumed to have buffers of their own (the state donated: "
                       f"jax.jit(step, donate_argnums=...)); undonated, XLA may put {fmt_bytes(spare)} of these, "
                       "alike outputs, in the outputs' buffers")
    lower = tuple(f"{why} are not counted (from {', '.join(sorted(names))})" if names else f"{why} is not counted"
                  for why, names in walk.unknown.items())
    return ActivationEstimate(int(peak), largest, lower, "; ".join(assumed))


def _alike_outputs(jaxpr: Any, top: list) -> int:
    """The bytes of the values live at the peak (``top``'s entries) of the shape and dtype of
    one of the step's outputs (not one of its arguments passed through): undonated, XLA may
    place them in that output's buffer before writing it."""
    inputs = set(jaxprs.invars(jaxpr))
    outputs = {(jaxprs.shape(v), getattr(jaxprs.aval(v), "dtype", None)) for v in jaxprs.outvars(jaxpr)
               if not jaxprs.is_literal(v) and v not in inputs}
    return sum(nbytes for nbytes, _, _, v, _ in top
               if jaxprs.shape(v) and (jaxprs.shape(v), getattr(jaxprs.aval(v), "dtype", None)) in outputs)


@dataclasses.dataclass
class _Frame:
    """One jaxpr's walk: what XLA does with its values (found before the walk: which equations
    run, ``index``; which values are fused away, aliases, carried in place; each value's last
    reader) and what is live as the walk goes (``live``, ``current``, the ``peak`` and what was
    live at it)."""

    index: dict  # id of an equation that runs -> its position among them
    outs: set  # the jaxpr's outputs (not counted here)
    away: set  # values fused away
    deps: dict  # a fused value (or an alias) -> the materialized values it is computed from
    aliases: set  # results that are their operands (no memory of their own)
    last: dict  # a value -> the position of its last reader
    readers: dict  # a value -> the records of the primitives that read it
    in_place: dict  # the position of a loop -> the carries' buffers it updates
    into_outs: set  # initial values made in an output's buffer
    settled: dict | None
    sliced: tuple | None
    splits: dict = dataclasses.field(default_factory=dict)  # the walk's environment
    live: dict = dataclasses.field(default_factory=dict)  # var -> (bytes, order, eqn, var, splits)
    current: int = 0
    peak: int = 0
    at_peak: list = dataclasses.field(default_factory=list)

    @classmethod
    def of(cls, jaxpr: Any, settled: dict | None, sliced: tuple | None) -> _Frame:
        """What XLA does with ``jaxpr``'s values, found before walking it."""
        eqns = jaxprs.eqns(jaxpr)
        outs = {v for v in jaxprs.outvars(jaxpr) if not jaxprs.is_literal(v)}
        gone = dead(eqns, outs)
        eqns = [e for i, e in enumerate(eqns) if i not in gone]
        away = fused(eqns, outs)
        deps: dict = {}
        aliases: set = set()
        last: dict = {}
        readers: dict = {}
        for i, eqn in enumerate(eqns):
            found: set = set()
            for v in jaxprs.invars(eqn):
                if not jaxprs.is_literal(v):
                    found.update(deps.get(v, (v,)))
                    readers.setdefault(v, set()).add(jaxpr_walk.primitive_of(eqn))
            for u in found:
                last[u] = i
            passed = passed_through(eqn)
            for v in jaxprs.outvars(eqn):
                if v in away or _free(eqn):
                    deps[v] = tuple(found)
                elif v in passed:  # a call's result that is one of its operands: the same buffer
                    source = passed[v]
                    deps[v] = deps.get(source, (source,)) if not jaxprs.is_literal(source) else ()
                    aliases.add(v)
        in_place, into_outs = _carried(eqns, last, deps, outs, set(jaxprs.invars(jaxpr)))
        return cls({id(e): i for i, e in enumerate(eqns)}, outs, away, deps, aliases, last, readers, in_place,
                   into_outs, settled, sliced)

    def counts(self, eqn: Any, v: Any) -> bool:
        """Whether a result of ``eqn`` takes memory of its own here (not an output of the jaxpr,
        an alias, fused away, made in an output's buffer, or an unused effect's)."""
        return not (v in self.outs or _free(eqn) or v in self.away or v in self.aliases or v in self.into_outs
                    or (v not in self.last and jaxprs.has_effects(eqn)))

    def retire(self, i: int, eqn: Any, made: list) -> None:
        """After the equation at ``i``: what it made and is read later is live; what it read for
        the last time is not."""
        for v, entry in made:
            if self.last.get(v, -1) > i:
                self.live[v] = entry
                self.current += entry[0]
        for v in jaxprs.invars(eqn):
            if jaxprs.is_literal(v):
                continue
            for u in self.deps.get(v, (v,)):
                if self.last.get(u) == i and u in self.live:
                    self.current -= self.live.pop(u)[0]


class _Walk(jaxpr_walk.Walk):
    """One walk of a jaxpr and the jaxprs inside it (``jaxpr_walk.Walk``): each value is its
    Auto-axes splits; ``frame`` the jaxpr being walked."""

    part = primitives.Part.LIVE

    def __init__(self, auto_axes: dict[str, int]):
        self.frame: Any = None  # (the _Frame of the jaxpr being walked)
        self.auto_axes = {a: n for a, n in auto_axes.items() if n > 1}
        self.auto = bool(self.auto_axes)
        self.unknown: dict[str, set] = {}  # why the figure is a lower bound -> primitives
        self.order = 0  # a tie-breaker for the heaps
        self.splits: dict = {}  # the splits of the last jaxpr walked
        self.asked: list = []  # the settled splits of its inputs
        self.walked: dict = {}  # (id of a jaxpr, its operands' splits) -> (its result, asked)
        self.demands: dict = {}  # a call's operand -> the splits its body settled it to
        self.kinds: dict = {}  # the order of a value that is not its equation's result -> what it is

    # -- sizes -------------------------------------------------------------------------------

    def input_splits(self, leaf: Any) -> tuple:
        """Per dim, how many ways an argument is split over Auto axes (its own sharding's spec)."""
        return spec_parts(getattr(getattr(leaf, "sharding", None), "spec", None), len(getattr(leaf, "shape", ())),
                          self.auto_axes)

    def bytes(self, v: Any, splits: tuple | None, eqn: Any) -> int:
        aval = jaxprs.aval(v)
        shape = getattr(aval, "shape", None)
        if shape is None:
            return 0  # a token, or no array
        itemsize = getattr(getattr(aval, "dtype", None), "itemsize", None)
        local = local_shape(aval, splits)
        if local is None or not isinstance(itemsize, int):
            why = SYMBOLIC if local is None else \
                f"values of dtype {aval.dtype}, which has no size in bytes,"
            self.unknown.setdefault(why, set()).add(jaxprs.name(eqn))
            return 0
        return math.prod(local) * itemsize

    def label(self, nbytes: int, order: int, eqn: Any, v: Any, splits: tuple | None) -> LiveValue:
        aval = jaxprs.aval(v)
        local: tuple = local_shape(aval, splits) or tuple(getattr(aval, "shape", ()))
        dtype = getattr(getattr(aval, "dtype", None), "name", "?")
        kind = self.kinds.get(order)
        return LiveValue(nbytes, f"{jaxprs.name(eqn)}{' ' + kind if kind else ''} {dtype}[{','.join(map(str, local))}]",
                         user_frame(jaxprs.frames(eqn)))

    def entry(self, v: Any, splits: tuple | None, eqn: Any, kind: str = "") -> tuple:
        """(bytes, order, eqn, var, splits): a value the walk counts, ``kind`` saying what it is
        where it is not the equation's result as such (a partial sum, a slice)."""
        self.order += 1
        if kind:
            self.kinds[self.order] = kind
        return (self.bytes(v, splits, eqn), self.order, eqn, v, splits)

    # -- the walk ----------------------------------------------------------------------------

    def jaxpr(self, jaxpr: Any, in_splits: list, settled: dict | None = None,
              sliced: tuple | None = None) -> tuple[int, list, list]:
        """(peak bytes of the intermediates, the largest values live at the peak, the splits of
        the outputs). On Auto axes the splits are settled first: a walk forward, then back
        through elementwise ops (``activation_rules.backward_splits``), as XLA propagates.
        ``sliced``, ``(a scan's equation, n)``: the inputs from the n-th on are the slices of its
        stacked operands, one per trip, which XLA copies out where a matmul (anything but an
        elementwise op) reads them."""
        key = (id(jaxpr), tuple(in_splits), sliced[1] if sliced else None)
        if settled is None and key in self.walked:  # (a body met again with the same operands)
            result, self.asked = self.walked[key]
            return result
        if self.auto and settled is None:
            self.jaxpr(jaxpr, in_splits, {}, sliced)
            settled = backward_splits(jaxprs.eqns(jaxpr), {**self.splits, **self.demands})
        held = self.frame
        self.frame = frame = _Frame.of(jaxpr, settled, sliced)
        try:
            outputs = self.run(jaxpr, in_splits)
        finally:
            self.frame = held
        # Set last, after the walks of the jaxprs inside: what a caller reads once this returns.
        self.splits = frame.splits
        self.asked = [settled.get(v) for v in jaxprs.invars(jaxpr)] if settled else []
        result = (frame.peak, frame.at_peak, outputs)
        if settled is None or settled:  # (not the forward-only walk of the settling)
            self.walked[key] = (result, self.asked)
        return result

    # -- the walk's steps (``jaxpr_walk.Walk``: one equation at a time, in program order) ----

    def inputs(self, jaxpr: Any, env: dict, ins: Any) -> None:
        """The jaxpr's inputs' splits; the slices of a scan's stacked operands a matmul reads:
        copies, live from the trip's start."""
        super().inputs(jaxpr, env, ins)
        frame = self.frame
        frame.splits = env
        if frame.sliced:
            for v in jaxprs.invars(jaxpr)[frame.sliced[1]:]:
                if v in frame.last and not all(fusing(r) for r in frame.readers.get(v, ())):
                    frame.live[v] = self.entry(v, env.get(v), frame.sliced[0], "slice")
                    frame.current += frame.live[v][0]

    def read(self, env: dict, v: Any) -> Any:
        return None if jaxprs.is_literal(v) else env.get(v)

    def apply(self, eqn: Any, ins: list) -> list:
        """The splits of ``eqn``'s results, and what is live at it: the values it makes (not
        fused away, not outputs, not aliases), the jaxprs it runs (their peak), a matmul's
        partial sum before XLA's all-reduce, less a loop's carries updated in place."""
        frame = self.frame
        i = frame.index.get(id(eqn))
        if i is None:  # (nothing needs it: XLA removes it)
            return [None] * len(jaxprs.outvars(eqn))
        inner_peak, inner_top, out_splits = self.inner(eqn, ins)
        if out_splits is None:
            out_splits = self.rule(eqn, ins) if self.auto else [None] * len(jaxprs.outvars(eqn))
        if frame.settled:
            out_splits = [frame.settled.get(v, s) for v, s in zip(jaxprs.outvars(eqn), out_splits)]
        made = [(v, self.entry(v, s, eqn)) for v, s in zip(jaxprs.outvars(eqn), out_splits) if frame.counts(eqn, v)]
        moment = frame.current + sum(entry[0] for _, entry in made) + inner_peak
        passing = []  # the partial sum of a matmul over a split dim, before XLA's all-reduce
        if partial_sum(eqn, ins):
            v = jaxprs.outvars(eqn)[0]
            passing = [self.entry(v, out_splits[0], eqn, "partial sum")]
            moment += passing[0][0]
        updated = frame.in_place.get(i, ())
        moment -= sum(frame.live[u][0] for u in updated if u in frame.live)  # (a carry's buffer, updated)
        if moment > frame.peak:
            frame.peak = moment
            frame.at_peak = heapq.nlargest(_LARGEST, [*(e for u, e in frame.live.items() if u not in updated),
                                                      *(e for _, e in made), *passing, *inner_top])
        frame.retire(i, eqn, made)
        return out_splits

    def inner(self, eqn: Any, ins: list) -> tuple[int, list, list | None]:
        """What the jaxprs inside an equation add at it: (their peak, its largest values, the
        equation's output splits where they follow from them)."""
        prim = jaxpr_walk.primitive_of(eqn)
        if prim.callback:
            where = user_frame(jaxprs.frames(eqn))
            self.unknown.setdefault(f"the host callback {prim.name}{' at ' + where if where else ''}, whose own "
                                    "memory is not known,", set())
        subs = jaxprs.sub_jaxprs(eqn)
        if not subs or prim.data is Data.ALIAS:
            return 0, [], None
        try:
            inside = jaxpr_walk.nesting(eqn, prim)
        except jaxprs.Unreadable:
            inside = None
        if inside is not None and inside.family in _INNER:
            return _INNER[inside.family](self, eqn, inside, ins)
        # Anything else (shard_map, whose body holds local blocks; a primitive of another
        # library): each jaxpr inside on its own, its operands taken as not split over Auto axes.
        found = [self.jaxpr(j, [ones(jaxprs.aval(v)) if self.auto else None for v in jaxprs.invars(j)]) for j in subs]
        peak, top, _ = max(found, key=lambda f: f[0])
        return peak, top, (self.shard_map_outs(eqn) if prim.family is Family.SHARD_MAP and self.auto else None)

    def call(self, eqn: Any, inside: jaxpr_walk.Nesting, ins: list) -> tuple[int, list, list | None]:
        walked = self.jaxpr(inside.bodies[0], ins)
        for v, asked in zip(jaxprs.invars(eqn), self.asked):  # the body lays them out so
            if asked is not None and not jaxprs.is_literal(v):
                self.demands[v] = asked
        return walked

    def scan(self, eqn: Any, inside: jaxpr_walk.Nesting, ins: list) -> tuple[int, list, list | None]:
        consts, carries = inside.consts, inside.carries
        xs = [s[1:] if s is not None else None for s in ins[consts + carries:]]
        peak, top, outs = self.jaxpr(inside.bodies[0], ins[:consts + carries] + xs, sliced=(eqn, consts + carries))
        ys = [(1, *s) if s is not None else None for s in outs[carries:]]
        return peak, top, outs[:carries] + ys

    def loop(self, eqn: Any, inside: jaxpr_walk.Nesting, ins: list) -> tuple[int, list, list | None]:
        """A while loop: the larger of its condition's and its body's peaks."""
        cond_n, body_n = inside.consts, inside.carries
        carry = ins[cond_n + body_n:]
        cond, body = inside.bodies
        found = [self.jaxpr(cond, ins[:cond_n] + carry), self.jaxpr(body, ins[cond_n:cond_n + body_n] + carry)]
        peak, top, _ = max(found, key=lambda f: f[0])
        return peak, top, carry

    def branches(self, eqn: Any, inside: jaxpr_walk.Nesting, ins: list) -> tuple[int, list, list | None]:
        found = [self.jaxpr(j, ins[1:]) for j in inside.bodies]
        peak, top, outs = max(found, key=lambda f: f[0])
        return peak, top, outs

    def shard_map_outs(self, eqn: Any) -> list | None:
        specs = jaxprs.optional_param(eqn, "out_specs")
        if not isinstance(specs, (tuple, list)) or len(specs) != len(jaxprs.outvars(eqn)):
            return None
        return [spec_parts(spec, len(jaxprs.shape(v)), self.auto_axes) for spec, v in zip(specs, jaxprs.outvars(eqn))]

    def rule(self, eqn: Any, ins: list) -> list:
        """The Auto-axes splits of an equation's results (see ``activation_rules.auto_splits``)."""
        try:
            return auto_splits(eqn, ins)
        except jaxprs.Unreadable:  # a param of another shape: the results taken as not split
            return [ones(jaxprs.aval(v)) for v in jaxprs.outvars(eqn)]


_INNER = {Family.CALL: _Walk.call, Family.SCAN: _Walk.scan, Family.WHILE: _Walk.loop, Family.COND: _Walk.branches}


def _carried(eqns: list, last: dict, deps: dict, outs: set, inputs: set) -> tuple[dict, set]:
    """XLA runs a loop's carries in place: a value whose last reader is a loop, as a carry's
    initial value, is the buffer the loop updates. ``({index of the loop: those values whose
    carry's result is counted (the same buffer again)}, {those whose carry's result is an
    output: made in the output's buffer, not counted})``. An input (an argument of the step)
    is not: XLA copies it, since its buffer is the caller's."""
    in_place: dict = {}
    into_outs: set = set()
    for i, eqn in enumerate(eqns):
        seen: set = set()
        for u, o in loop_carries(eqn):
            if jaxprs.is_literal(u) or u in inputs or u in deps or u in seen or last.get(u) != i:
                continue
            seen.add(u)
            if o in outs:
                into_outs.add(u)
            else:
                in_place.setdefault(i, set()).add(u)
    return in_place, into_outs
