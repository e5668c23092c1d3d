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
from typing import Mapping

from ..language import fmt_bytes, fmt_flops
from . import fields

__all__ = ["Collective", "Communication", "StepCost", "KINDS", "SOURCES"]

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
        return (f"{sent}, {some}{fmt_flops(self.flops_per_device)} "
                f"({fmt_flops(self.matmul_flops_per_device)} in matmuls), {some}"
                f"{fmt_bytes(self.memory_bytes_per_device)} read and written per device per step")

    def to_dict(self) -> dict:
        return {"communication": self.communication.to_dict(), "flops_per_device": self.flops_per_device,
                "matmul_flops_per_device": self.matmul_flops_per_device,
                "flops_by_dtype": dict(self.flops_by_dtype),
                "memory_bytes_per_device": self.memory_bytes_per_device, "lower_bound": list(self.lower_bound)}


_ROWS = 8


