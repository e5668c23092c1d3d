"""Communication and compute per device: what one device sends, computes and moves through its
memory in one run of a step, from the jaxpr ``verify`` traces (``activations.trace_step``); no
compilation, no device, flat in the number of devices.

**Collectives** (``Collective``), with the ring costs of the scaling literature: what ONE device
sends per run, ``n`` the product of the sizes of the collective's mesh axes:

- all-gather: (n-1)/n of the gathered result; reduce-scatter: (n-1)/n of the operand;
- all-reduce: 2(n-1)/n of the operand; all-to-all: (n-1)/n of the operand; a permute: its operand.

Each is found in one of three ways (its ``source``):

- 'kernel': a collective primitive inside ``shard_map`` (psum, all_gather, psum_scatter,
  all_to_all, ppermute and their variants); shapes there are local, so sizes are exact;
- 'explicit': on Explicit mesh axes, from the shardings JAX's types give each value: a
  ``reshard`` (all-gather of an axis dropped, all-to-all of an axis moved, a slice for an axis
  added, an all-reduce or reduce-scatter of an unreduced value), a ``dot_general`` over
  contracted dims split over the same axis (a partial sum, then an all-reduce or, where the
  result is split over that axis, a reduce-scatter; none where the result is typed unreduced),
  a reduction over a split dim;
- 'auto': on Auto mesh axes XLA chooses layouts; each value is assumed split as its operands are
  (``activation_rules.auto_splits``, the activation estimate's propagation), and a contraction or
  a reduction over split dims assumed to end in an all-reduce. The axes are named by their size
  (several axes of one size: the first of them). Said in ``Communication.assumptions``.

A collective in a ``scan`` runs ``length`` times per step (nested loops multiply); one in a
``while`` loop runs its trip count where the loop counts (``i < n`` of a counter that starts at
a literal and steps by one, ``n`` a literal: a ``fori_loop`` with traced bounds made concrete);
any other while loop's body is counted once and the figure named a lower bound; a ``cond``
counts its costliest branch.

**FLOPs**: a ``dot_general`` (and a convolution) is 2 x result elements x contracted size, from
local (per-device) shapes; an elementwise op one per result element, a reduction one per operand
element; moves (reshape, transpose, slices, gathers) none. By dtype: a matmul's operands' dtype,
an elementwise op's result's.

**Memory bytes** (the convention): each equation XLA runs as an operation of its own reads each
of its operands and writes each of its results, per device, once per run; values XLA fuses away
(an elementwise op read only by elementwise ops and reductions, ``activation_rules.fused``),
casts and layout hints (no data moved) and calls, loops and kernels themselves (their bodies
count) are not counted. A value whose size is symbolic (a dim verify was not given), a host
callback: every figure is then named a lower bound, never a silent zero.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from typing import Any, Mapping

import jax

from ..checking import jaxprs, primitives
from ..language import entry_axes
from . import fields
from .activation_rules import auto_splits, dead, fused, ones, spec_parts
from .activations import SYMBOLIC, user_frame
from .memory_plan import fmt_bytes

__all__ = ["Collective", "Communication", "StepCost", "KINDS", "SOURCES", "step_cost", "cost_of"]

KINDS = ("all-gather", "reduce-scatter", "all-reduce", "all-to-all", "permute")
SOURCES = ("kernel", "explicit", "auto")


@dataclasses.dataclass(frozen=True)
class Collective:
    """One collective the step runs: ``kind`` (one of ``KINDS``), the mesh ``axes`` it runs over,
    the ``bytes`` one device sends per run (ring costs, see the module), how many ``times`` it runs
    per step, ``where`` in the user's code (``model.py:42 (mlp)``, '' if not known) and how it was
    found (``source``: 'kernel', 'explicit' or 'auto')."""

    kind: str
    axes: tuple[str, ...]
    bytes: int
    times: int = 1
    where: str = ""
    source: str = "explicit"

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"Collective: kind must be one of {KINDS}, got {self.kind!r}")
        if self.source not in SOURCES:
            raise ValueError(f"Collective: source must be one of {SOURCES}, got {self.source!r}")
        fields.texts("Collective", "axes", self.axes)
        fields.amount("Collective", "bytes", self.bytes)
        fields.count("Collective", "times", self.times, least=1)
        fields.text("Collective", "where", self.where)

    @property
    def total(self) -> int:
        """Bytes one device sends per step through this collective: ``bytes * times``."""
        return self.bytes * self.times

    def __str__(self) -> str:
        axes = ",".join(self.axes) or "-"
        times = f" x {self.times:,}" if self.times != 1 else ""
        return f"{self.kind} over {axes}: {fmt_bytes(self.bytes)}{times}" + (f" at {self.where}" if self.where else "")


@dataclasses.dataclass(frozen=True)
class Communication:
    """Every collective a step runs (``Collective``), largest total first; ``lower_bound`` says
    why the figure is only a lower bound (empty: it is not), ``assumptions`` what was assumed
    (Auto axes)."""

    collectives: tuple[Collective, ...] = ()
    lower_bound: tuple[str, ...] = ()
    assumptions: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        fields.items("Communication", "collectives", self.collectives, Collective)
        fields.texts("Communication", "lower_bound", self.lower_bound)
        fields.texts("Communication", "assumptions", self.assumptions)

    @property
    def bytes_per_device(self) -> int:
        """Bytes one device sends per step: the sum of ``bytes * times``."""
        return sum(c.total for c in self.collectives)

    @property
    def by_axes(self) -> dict[tuple[str, ...], int]:
        """Bytes one device sends per step, by the mesh axes of the collectives."""
        found: dict[tuple[str, ...], int] = {}
        for c in self.collectives:
            found[c.axes] = found.get(c.axes, 0) + c.total
        return found

    def __str__(self) -> str:
        some = "at least " if self.lower_bound else ""
        if not self.collectives:
            head = "no collectives" if not self.lower_bound else "none counted"
        else:
            per_axes = ", ".join(f"{','.join(a) or '-'} {fmt_bytes(b)}" for a, b in
                                 sorted(self.by_axes.items(), key=lambda t: -t[1]))
            head = f"{some}{fmt_bytes(self.bytes_per_device)} sent per device per step ({per_axes})"
        lines = [head]
        if self.collectives:
            lines.append(f"  {'per step':>10s}  {'kind':14s} {'axes':8s} {'per run':>10s} {'runs':>8s}  "
                         "where (how found)")
        for c in self.collectives[:_ROWS]:
            times = f"x {c.times:,}" if c.times != 1 else ""
            lines.append(f"  {fmt_bytes(c.total):>10s}  {c.kind:14s} {','.join(c.axes) or '-':8s} "
                         f"{fmt_bytes(c.bytes):>10s} {times:>8s}  {c.where or '?'} ({c.source})")
        if len(self.collectives) > _ROWS:
            lines.append(f"  ... and {len(self.collectives) - _ROWS} more")
        lines += [f"  a lower bound: {why}" for why in self.lower_bound]
        lines += [f"  assumed: {what}" for what in self.assumptions]
        return "\n".join(lines)

    def to_dict(self) -> dict:
        return {"bytes_per_device": self.bytes_per_device,
                "by_axes": {",".join(a): b for a, b in self.by_axes.items()},
                "collectives": [{**dataclasses.asdict(c), "axes": list(c.axes)} for c in self.collectives],
                "lower_bound": list(self.lower_bound), "assumptions": list(self.assumptions)}


@dataclasses.dataclass(frozen=True)
class StepCost:
    """What one device sends (``communication``), computes (``flops_per_device``, and by dtype
    name in ``flops_by_dtype``; the matmuls' and convolutions' share in ``matmul_flops_per_device``)
    and reads and writes in memory (``memory_bytes_per_device``) per step; ``lower_bound`` says
    why the figures are only lower bounds (empty: they are not). See the module for conventions."""

    communication: Communication
    flops_per_device: int
    flops_by_dtype: Mapping[str, int]
    memory_bytes_per_device: int
    lower_bound: tuple[str, ...] = ()
    matmul_flops_per_device: int = 0

    def __post_init__(self) -> None:
        if not isinstance(self.communication, Communication):
            raise TypeError(f"StepCost: communication must be a Communication, got "
                            f"{type(self.communication).__name__}")
        fields.amount("StepCost", "flops_per_device", self.flops_per_device)
        fields.mapping("StepCost", "flops_by_dtype", self.flops_by_dtype, "str", fields.amount)
        fields.amount("StepCost", "memory_bytes_per_device", self.memory_bytes_per_device)
        fields.texts("StepCost", "lower_bound", self.lower_bound)
        fields.amount("StepCost", "matmul_flops_per_device", self.matmul_flops_per_device)

    def __str__(self) -> str:
        some = "at least " if self.lower_bound else ""
        comm = self.communication
        sent = f"{some}{fmt_bytes(comm.bytes_per_device)} sent" if comm.collectives or comm.lower_bound else \
            "no collectives"
        return (f"{sent}, {some}{_flops(self.flops_per_device)} "
                f"({_flops(self.matmul_flops_per_device)} in matmuls), {some}"
                f"{fmt_bytes(self.memory_bytes_per_device)} read and written per device per step")

    def to_dict(self) -> dict:
        return {"communication": self.communication.to_dict(), "flops_per_device": self.flops_per_device,
                "matmul_flops_per_device": self.matmul_flops_per_device,
                "flops_by_dtype": dict(self.flops_by_dtype),
                "memory_bytes_per_device": self.memory_bytes_per_device, "lower_bound": list(self.lower_bound)}


_ROWS = 8


def _flops(n: int) -> str:
    for unit, size in (("PFLOP", 1e15), ("TFLOP", 1e12), ("GFLOP", 1e9), ("MFLOP", 1e6), ("kFLOP", 1e3)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} FLOP"


# -- the walk --------------------------------------------------------------------------------------

# Collective primitives inside kernels, by what they do (variants and async starts too).
_KERNEL_KINDS = {"psum": "all-reduce", "pmax": "all-reduce", "pmin": "all-reduce", "all_gather": "all-gather",
                 "reduce_scatter": "reduce-scatter", "all_to_all": "all-to-all", "ppermute": "permute",
                 "pbroadcast": "permute"}
_BASE = {**{n: b for n, (b, _) in primitives.VARIANTS.items()},
         **{n: b for n, (b, _) in primitives.ASYNC_STARTS.items()}}
# Primitives that move no data (casts of the varying type, identities, layout hints).
_NO_DATA = frozenset({*primitives.CASTS, *primitives.IDENTITY, "pbroadcast", "stop_gradient", "device_put",
                      "reshape", "squeeze", "expand_dims", "bitcast_convert_type", *primitives.ASYNC_DONES})
_RESHARDS = frozenset({"reshard", "mesh_cast", "sharding_cast", "sharding_constraint"})
_REDUCTIONS = frozenset({"reduce_sum", "reduce_max", "reduce_min", "reduce_prod", "reduce_and", "reduce_or",
                         "argmax", "argmin", "reduce_xor"})
_ELEMENTWISE = primitives.ELEMENTWISE | frozenset({"integer_pow", "square", "clamp", "select_n"})
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


class _Cost:
    """One walk of a step's jaxpr and the jaxprs inside it."""

    def __init__(self, sizes: dict[str, int], auto: dict[str, int]):
        self.sizes = sizes
        self.auto = {a: n for a, n in auto.items() if n > 1}
        self.unknown: dict[str, set] = {}
        self.walked: dict = {}

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

    def local_shape(self, aval: Any, splits: tuple | None) -> tuple | None:
        """The per-device shape: the aval's own sharding (Explicit axes; local already under
        manual axes), times the Auto-axes splits; None where a dim is symbolic."""
        shape = tuple(getattr(aval, "shape", ()))
        sharding = getattr(aval, "sharding", None)
        try:
            sizes = dict(sharding.mesh.shape) if sharding is not None else {}
        except Exception:  # (a sharding without a mesh)
            sizes = {}
        spec = getattr(sharding, "spec", None)
        split = spec_parts(_entries(spec) if spec is not None else (), len(shape), sizes)
        local = []
        for i, size in enumerate(shape):
            if not isinstance(size, int):
                return None
            parts = split[i] * (splits[i] if splits is not None and i < len(splits) else 1)
            local.append(-(-size // parts) if parts > 1 else size)
        return tuple(local)

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
        eqns = jaxprs.eqns(jaxpr)
        outs = {v for v in jaxprs.outvars(jaxpr) if not jaxprs.is_literal(v)}
        gone = dead(eqns, outs)
        eqns = [e for i, e in enumerate(eqns) if i not in gone]
        away = fused(eqns, outs)
        splits: dict = dict(zip(jaxprs.invars(jaxpr), ins))
        tally = _Tally()
        for eqn in eqns:
            operands = jaxprs.invars(eqn)
            in_splits = [splits.get(v) if not jaxprs.is_literal(v) else None for v in operands]
            out_splits = self.equation(tally, eqn, in_splits, manual, away)
            splits.update(zip(jaxprs.outvars(eqn), out_splits))
        result = (tally, [splits.get(v) if not jaxprs.is_literal(v) else None for v in jaxprs.outvars(jaxpr)])
        self.walked[key] = (*result, jaxpr)  # (the jaxpr kept: its id stays its own)
        return result

    def equation(self, tally: _Tally, eqn: Any, ins: list, manual: frozenset, away: set) -> list:
        name = jaxprs.name(eqn)
        outs = jaxprs.outvars(eqn)
        if "callback" in name and name != "debug_callback":
            where = user_frame(jaxprs.frames(eqn))
            self.unknown.setdefault(f"the host callback {name}{' at ' + where if where else ''}, whose own "
                                    "cost is not known,", set())
        if jaxprs.sub_jaxprs(eqn):
            try:
                found = self.inner(tally, eqn, ins, manual)
            except jaxprs.Unreadable:
                found = None
            if found is not None:
                return found
        auto = bool(self.auto) and not self.auto.keys() <= manual
        out_splits = self.rule(eqn, ins) if auto else [None] * len(outs)
        if auto and name == "sharding_constraint":
            out_splits = self.constrained(tally, eqn, ins)
        base = _BASE.get(name, name)
        if base in _KERNEL_KINDS and manual:
            self.kernel_collective(tally, eqn, base, ins)
        elif name in _RESHARDS:
            self.reshard(tally, eqn, ins)
        elif name == "dot_general":
            self.dot(tally, eqn, ins, out_splits, auto)
        elif name in _REDUCTIONS:
            self.reduction(tally, eqn, ins, out_splits, auto)
        self.compute(tally, eqn, name, ins, out_splits, away)
        return out_splits

    def inner(self, tally: _Tally, eqn: Any, ins: list, manual: frozenset) -> list | None:
        """The cost of the jaxprs inside an equation, times the runs; its results' Auto splits
        (None where this equation is not a call, loop or kernel this knows)."""
        name = jaxprs.name(eqn)
        subs = jaxprs.sub_jaxprs(eqn)
        if name == "shard_map":
            _, _, _, axes = jaxprs.nested_map(eqn)
            body = subs[0]
            found, _ = self.jaxpr(body, [None] * len(jaxprs.invars(body)), manual | frozenset(axes))
            tally.add(found)
            return self.shard_map_outs(eqn)
        if name == "scan":
            consts, carries = jaxprs.scan_groups(eqn)
            length = jaxprs.param(eqn, "length")
            xs = [s[1:] if s is not None else None for s in ins[consts + carries:]]
            found, outs = self.jaxpr(subs[0], ins[:consts + carries] + xs, manual)
            tally.add(found, int(length) if isinstance(length, int) else 1)
            if not isinstance(length, int):
                self.unknown.setdefault(f"a scan of symbolic length is counted once ({user_frame(jaxprs.frames(eqn))})",
                                        set())
            return outs[:carries] + [(1, *s) if s is not None else None for s in outs[carries:]]
        if name == "while":
            cond_n, body_n = jaxprs.while_groups(eqn)
            carry = ins[cond_n + body_n:]
            trips = _trip_count(eqn, subs[0], subs[1], cond_n, body_n)
            for j in subs[:2]:
                found, _ = self.jaxpr(j, (ins[:cond_n] if j is subs[0] else ins[cond_n:cond_n + body_n]) + carry,
                                      manual)
                tally.add(found, 1 if trips is None else trips + (j is subs[0]))
            if trips is None:
                where = user_frame(jaxprs.frames(eqn))
                self.unknown.setdefault(WHILE_ONCE + (f" (at {where})" if where else ""), set())
            return list(carry)
        if name == "cond":
            branches = [self.jaxpr(j, ins[1:], manual) for j in subs]
            costly, outs = max(branches, key=lambda f: f[0].weight())
            tally.add(costly)
            return outs
        call = jaxprs.call_jaxpr(eqn)
        if call is not None:
            found, outs = self.jaxpr(call, ins, manual)
            tally.add(found)
            return outs
        return None

    def shard_map_outs(self, eqn: Any) -> list:
        specs = jaxprs.optional_param(eqn, "out_specs")
        outs = jaxprs.outvars(eqn)
        if not self.auto or not isinstance(specs, (tuple, list)) or len(specs) != len(outs):
            return [None] * len(outs)
        return [spec_parts(_entries(spec), len(jaxprs.shape(v)), self.auto) for spec, v in zip(specs, outs)]

    def rule(self, eqn: Any, ins: list) -> list:
        try:
            return auto_splits(eqn, ins)
        except Exception:  # a param of another shape: the results taken as not split
            return [ones(jaxprs.aval(v)) for v in jaxprs.outvars(eqn)]

    # -- the rules --------------------------------------------------------------------------------

    def kernel_collective(self, tally: _Tally, eqn: Any, base: str, ins: list) -> None:
        """A collective inside ``shard_map``: local shapes, exact sizes."""
        try:
            axes = jaxprs.axis_names(eqn)
        except jaxprs.Unreadable as e:
            self.unknown.setdefault(f"a {jaxprs.name(eqn)} the walk cannot read ({e}) is not counted", set())
            return
        kind = _KERNEL_KINDS[base]
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
        entries = _entries(spec)
        dims = [tuple(a for a in entry_axes(entries[i] if i < len(entries) else None) if self.sizes.get(a, 1) > 1)
                for i in range(ndim)]
        return dims, frozenset(getattr(spec, "unreduced", ()) or ())

    def bytes_as(self, v: Any, dims: list, eqn: Any) -> int:
        """The bytes per device of ``v`` laid out with ``dims`` (per dim, its mesh axes)."""
        aval = jaxprs.aval(v)
        shape = tuple(getattr(aval, "shape", ()))
        itemsize = getattr(getattr(aval, "dtype", None), "itemsize", None)
        if not all(isinstance(d, int) for d in shape) or not isinstance(itemsize, int):
            self.unknown.setdefault(SYMBOLIC, set()).add(jaxprs.name(eqn))
            return 0
        parts = [math.prod(self.sizes.get(a, 1) for a in axes) for axes in dims]
        return math.prod(-(-d // p) for d, p in zip(shape, parts)) * itemsize

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
        (lc, rc), (lb, rb) = jaxprs.param(eqn, "dimension_numbers")
        ls, rs, out = self.spec(lhs), self.spec(rhs), self.spec(result)
        if ls is not None and rs is not None and out is not None:
            lfree = [d for d in range(len(ls[0])) if d not in lc and d not in lb]
            rfree = [d for d in range(len(rs[0])) if d not in rc and d not in rb]
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
        out = spec_parts(_entries(spec), ndim, self.auto)
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

    def compute(self, tally: _Tally, eqn: Any, name: str, ins: list, out_splits: list, away: set) -> None:
        """The equation's FLOPs and memory bytes (see the module's conventions)."""
        if name in _NO_DATA or name in _RESHARDS or name in primitives.CALLS or name in primitives.LOOPS \
                or name == "shard_map":
            return
        operands, results = jaxprs.invars(eqn), jaxprs.outvars(eqn)
        if name == "dot_general":
            (lc, rc), _ = jaxprs.param(eqn, "dimension_numbers")
            lhs = self.local(operands[0], ins[0], eqn)
            rhs = self.local(operands[1], ins[1], eqn)
            out = self.local(results[0], out_splits[0], eqn)
            if lhs is not None and rhs is not None and out is not None:
                contracted = math.prod(min(lhs[a], rhs[b]) for a, b in zip(lc, rc))
                flops = 2 * math.prod(out) * contracted
                tally.flop(_dtype(operands[0]), flops)
                tally.matmul += flops
        elif name == "conv_general_dilated":
            rhs = self.local(operands[1], ins[1], eqn)
            out = self.local(results[0], out_splits[0], eqn)
            numbers = jaxprs.optional_param(eqn, "dimension_numbers")
            o = getattr(numbers, "rhs_spec", (0,))[0]
            if rhs is not None and out is not None and rhs[o]:
                flops = 2 * math.prod(out) * (math.prod(rhs) // rhs[o])
                tally.flop(_dtype(operands[0]), flops)
                tally.matmul += flops
        elif name in _ELEMENTWISE:
            for v, s in zip(results, out_splits):
                shape = self.local(v, s, eqn)
                tally.flop(_dtype(v), math.prod(shape) if shape is not None else 0)
        elif name in _REDUCTIONS or name.startswith("cum"):
            shape = self.local(operands[0], ins[0], eqn)
            tally.flop(_dtype(operands[0]), math.prod(shape) if shape is not None else 0)
        read = sum(self.nbytes(v, s, eqn) for v, s in zip(operands, ins) if jaxprs.is_literal(v) or v not in away)
        written = sum(self.nbytes(v, s, eqn) for v, s in zip(results, out_splits) if v not in away)
        tally.memory += read + written


def _trip_count(eqn: Any, cond: Any, body: Any, cond_n: int, body_n: int) -> int | None:
    """The trip count of a while loop that counts: its condition ``i < n`` (or ``n > i``) of a
    carry ``i`` that starts at a literal and that the body adds a literal step to, ``n`` a literal
    (a ``fori_loop`` whose bounds are not Python ints); None for any other loop."""
    eqns = jaxprs.eqns(cond)
    if len(eqns) != 1 or jaxprs.name(eqns[0]) not in ("lt", "gt") or len(jaxprs.invars(eqns[0])) != 2:
        return None
    left, right = jaxprs.invars(eqns[0])
    counter, bound = (left, right) if jaxprs.name(eqns[0]) == "lt" else (right, left)
    carries = jaxprs.invars(cond)[cond_n:]
    if counter not in carries or jaxprs.literal_number(bound) is None:
        return None
    k = carries.index(counter)
    start = jaxprs.literal_number(jaxprs.invars(eqn)[cond_n + body_n + k])
    produced = jaxprs.outvars(body)[k]
    stepped = [e for e in jaxprs.eqns(body) if produced in jaxprs.outvars(e)]
    if start is None or len(stepped) != 1 or jaxprs.name(stepped[0]) != "add":
        return None
    ins = jaxprs.invars(stepped[0])
    own = jaxprs.invars(body)[body_n + k]
    step = jaxprs.literal_number(ins[1]) if ins[0] is own else jaxprs.literal_number(ins[0]) if ins[1] is own else None
    limit = jaxprs.literal_number(bound)
    if not step or step <= 0 or limit is None:
        return None
    return max(0, math.ceil((limit - start) / step))


def _entries(spec: Any) -> tuple:
    """A PartitionSpec's entries, one per dim (JAX refuses ``tuple(spec)`` of one that is
    unreduced over some axes; its ``partitions`` are the entries there)."""
    partitions = getattr(spec, "partitions", None)
    if isinstance(partitions, tuple):
        return partitions
    try:
        return tuple(spec)
    except (TypeError, ValueError):  # (not a spec)
        return ()


def _dtype(v: Any) -> str:
    return getattr(getattr(jaxprs.aval(v), "dtype", None), "name", "?")


def cost_of(closed: Any, leaves: list, sizes: Mapping[str, int], auto: Mapping[str, int]) -> StepCost:
    """The ``StepCost`` of a traced step (``activations.trace_step``'s closed jaxpr and argument
    leaves), the mesh's axes of ``sizes`` (name -> size), of which ``auto`` are Auto axes."""
    walk = _Cost(dict(sizes), dict(auto))
    jaxpr = jaxprs.inner_jaxpr(closed)
    specs = [getattr(getattr(leaf, "sharding", None), "spec", None) for leaf in leaves]
    ins = [spec_parts(_entries(spec) if spec is not None else (), len(getattr(leaf, "shape", ())), walk.auto)
           if walk.auto else None for spec, leaf in zip(specs, leaves)]
    tally, _ = walk.jaxpr(jaxpr, ins, frozenset())
    collectives = tuple(sorted((Collective(kind, axes, sent, times, where, source)
                                for (kind, axes, sent, where, source), times in tally.collectives.items()),
                               key=lambda c: (-c.total, c.kind, c.axes, c.where)))
    lower = tuple(f"{why} are not counted (in {', '.join(sorted(names))})" if names else why
                  for why, names in walk.unknown.items())
    assumed: tuple[str, ...] = ()
    if walk.auto and any(c.source == "auto" for c in collectives):
        named = ", ".join(f"{a}={n}" for a, n in walk.auto.items())
        assumed = (f"on Auto axes ({named}) XLA chooses layouts: each value was assumed split as its operands "
                   "are (a sharding constraint as it says: what it drops all-gathered), and a contraction or reduction "
                   "over split dims to end in an all-reduce "
                   "(axes named by their size)",)
    communication = Communication(collectives, lower, assumed)
    flops = dict(sorted(tally.flops.items(), key=lambda t: -t[1]))
    return StepCost(communication, sum(flops.values()), flops, tally.memory, lower, tally.matmul)


def step_cost(closed: Any, leaves: list, mesh: Any) -> StepCost:
    """``cost_of`` on ``mesh`` (an AbstractMesh or Mesh). A failure of the walk's own is said in
    the cost (a lower bound of nothing), never raised."""
    sizes = dict(zip(mesh.axis_names, mesh.axis_sizes))
    auto = {a: n for a, n, t in zip(mesh.axis_names, mesh.axis_sizes, mesh.axis_types)
            if t == jax.sharding.AxisType.Auto}
    try:
        return cost_of(closed, leaves, sizes, auto)
    except Exception as e:  # the walk's own machinery: say so, do not break verify
        why = (f"the cost walk could not follow this step ({type(e).__name__}: {e}); nothing was counted",)
        return StepCost(Communication((), why), 0, {}, 0, why)
