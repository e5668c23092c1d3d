"""Which mesh shape and which rule set? ``search`` verifies a step under every candidate layout
and ranks them by its time per step on a chip.

A candidate is a mesh shape (sizes for the given axes whose product is the device count) and a
rule set (an ``AxisRules``, under its label). Each is ``verify``'d with the chip (the step's cost
in seconds, a lower bound at peak rates: ``docs/chips.md``) and, where ``hbm`` is given, its
memory per device (the arguments' bytes and the activation estimate) against that capacity.
Candidates rank by ``step_seconds``, those that fit first; a candidate whose step fails for
another reason (a dim its mesh axes do not divide, a check that fails under those rules) is
rejected with its reason, never ranked.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import math
from typing import Any, Callable, Iterator, Mapping, Sequence

import jax

from ..context import AxisRules, abstract_mesh, axis_rules
from ..language import fmt_bytes
from .chips import Bound, Chip, chip_named, fmt_seconds
from .html_parts import parse_capacity
from .memory_checks import arguments_plan
from .verification import VerifyReport, verify

__all__ = ["Candidate", "Rejected", "SearchReport", "search", "mesh_shapes"]

_AXIS_TYPES = {"explicit": jax.sharding.AxisType.Explicit, "auto": jax.sharding.AxisType.Auto}


@dataclasses.dataclass(frozen=True)
class Candidate:
    """One layout ``search`` ranked: ``mesh`` (axis -> size), ``rules`` (the rule set's label),
    ``report`` (its ``VerifyReport``, with ``step_time``), ``step_seconds`` (the step's time per
    device, perfect overlap: a lower bound), ``memory_bytes`` (per device: the arguments and the
    activation estimate; None where some size is symbolic) and ``fits`` (in ``hbm``; True where
    no ``hbm`` was given)."""

    mesh: Mapping[str, int]
    rules: str
    report: VerifyReport
    step_seconds: float
    memory_bytes: int | None
    fits: bool

    @property
    def label(self) -> str:
        """'rules, d=512 x t=8': the candidate in a table or a page's column."""
        return f"{self.rules}, {_mesh_text(self.mesh)}"

    @property
    def bound(self) -> str:
        """What bounds the step, in a few words ('communication over d', 'compute', 'memory')."""
        b = self.report.step_time.bound if self.report.step_time is not None else None
        if b is None:
            return ""
        if b.kind is Bound.COMMUNICATION:
            return "communication over " + " x ".join(b.axes)
        return b.kind.value

    def to_dict(self) -> dict[str, Any]:
        t = self.report.step_time
        return {"mesh": dict(self.mesh), "rules": self.rules, "step_seconds": self.step_seconds,
                "no_overlap_seconds": None if t is None else t.no_overlap, "memory_bytes": self.memory_bytes,
                "fits": self.fits, "bound": self.bound,
                "communication_bytes": self.report.communication_bytes_per_device,
                "flops": self.report.flops_per_device}


@dataclasses.dataclass(frozen=True)
class Rejected:
    """A layout whose step fails (not for memory): ``mesh``, ``rules`` and ``reason`` (the first
    of its report's problems); ``report`` has them all."""

    mesh: Mapping[str, int]
    rules: str
    reason: str
    report: VerifyReport


@dataclasses.dataclass(frozen=True)
class SearchReport:
    """What ``search`` found: ``candidates`` best first (those that fit ``hbm``, fastest first,
    then those that do not, marked), ``rejected`` (layouts whose step fails, with the reason),
    ``considered`` (how many layouts were verified), the ``chip`` and ``hbm`` it ranked against.
    ``best`` is the fastest candidate that fits (None where none does)."""

    function: str
    devices: int
    chip: str
    hbm: int | str | None  # as given: 'h100', '80GiB', bytes
    candidates: tuple[Candidate, ...]
    rejected: tuple[Rejected, ...]
    considered: int

    def __post_init__(self) -> None:
        if isinstance(self.devices, bool) or not isinstance(self.devices, int) or self.devices < 1:
            raise TypeError(f"SearchReport: devices must be a positive int, got {self.devices!r}")
        for field, kind in (("candidates", Candidate), ("rejected", Rejected)):
            value = getattr(self, field)
            if not isinstance(value, tuple) or not all(isinstance(v, kind) for v in value):
                raise TypeError(f"SearchReport: {field} must be a tuple of {kind.__name__}, got {value!r:.80}")

    @property
    def hbm_label(self) -> str | None:
        """The device memory ranked against, in words ('h100 (80.0 GiB)'), or None."""
        return None if self.hbm is None else parse_capacity(self.hbm, "SearchReport: hbm")[1]

    @property
    def best(self) -> Candidate | None:
        return next((c for c in self.candidates if c.fits), None)

    def __str__(self) -> str:
        head = (f"search {self.function} over {self.devices:,} devices on {self.chip}: {self.considered} layouts, "
                f"{len(self.candidates)} ranked" + (f", {len(self.rejected)} rejected" if self.rejected else ""))
        if self.hbm is not None:
            head += f"; memory against {self.hbm_label}"
        rows = [("#", "mesh", "rules", "memory/device", "fits", "step time", "no overlap", "bound by")]
        for i, c in enumerate(self.candidates, 1):
            t = c.report.step_time
            rows.append((str(i), _mesh_text(c.mesh), c.rules,
                         "?" if c.memory_bytes is None else fmt_bytes(c.memory_bytes),
                         "yes" if c.fits else "NO", fmt_seconds(c.step_seconds),
                         fmt_seconds(t.no_overlap) if t is not None else "", c.bound))
        widths = [max(len(r[k]) for r in rows) for k in range(len(rows[0]))]
        lines = [head, *("  " + "  ".join(cell.ljust(w) for cell, w in zip(r, widths)).rstrip() for r in rows)]
        best = self.best
        lines.append(f"best: {best.label} at {fmt_seconds(best.step_seconds)} per step (a lower bound)" if best else
                     f"best: none fits in {self.hbm_label}")
        for r in self.rejected:
            lines.append(f"rejected: {r.rules}, {_mesh_text(r.mesh)}: {r.reason}")
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        best = self.best
        return {"function": self.function, "devices": self.devices, "chip": self.chip, "hbm": self.hbm_label,
                "considered": self.considered, "best": None if best is None else best.to_dict(),
                "candidates": [c.to_dict() for c in self.candidates],
                "rejected": [{"mesh": dict(r.mesh), "rules": r.rules, "reason": r.reason} for r in self.rejected]}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)

    def to_html(self, top: int = 3, *, title: str | None = None) -> str:
        """The plan page (``plan_html``) of the best ``top`` candidates side by side: memory per
        device against ``hbm`` (or the chip's memory), time per step, each array's layout."""
        from .memory_plan import plan_html

        if isinstance(top, bool) or not isinstance(top, int) or top < 1:
            raise ValueError(f"SearchReport.to_html: top must be a positive int, got {top!r}")
        if not self.candidates:
            raise ValueError("SearchReport.to_html: no candidate was ranked, so there is nothing to draw")
        shown = {c.label: c.report for c in self.candidates[:top]}
        return plan_html(shown, self.hbm or self.chip,
                         title=title or f"search {self.function}: the best {len(shown)} of {self.considered} "
                                        f"layouts on {self.devices:,} {self.chip}")

    def _repr_html_(self) -> str:
        return self.to_html()


def mesh_shapes(devices: int, axes: Sequence[str]) -> list[dict[str, int]]:
    """Every assignment of sizes to ``axes`` whose product is ``devices``, in order (the first
    axis's size ascending): ``mesh_shapes(4, ('d', 't'))`` is d=1 x t=4, d=2 x t=2, d=4 x t=1."""
    def split(n: int, k: int) -> Iterator[tuple[int, ...]]:
        if k == 1:
            yield (n,)
            return
        for first in range(1, n + 1):
            if n % first == 0:
                for rest in split(n // first, k - 1):
                    yield (first, *rest)

    return [dict(zip(axes, sizes)) for sizes in split(devices, len(axes))]


def search(
    fn: Callable,
    devices: int,
    dims: Mapping[str, Any] | None = None,
    *,
    axes: Sequence[str],
    rules: Mapping[str, AxisRules],
    chip: str | Chip,
    hbm: int | str | None = None,
    inputs: Mapping[str, Any] | None = None,
    static: Mapping[str, Any] | None = None,
    top: int | None = None,
    meshes: Sequence[Mapping[str, int]] | None = None,
    axis_types: str = "explicit",
    links: Mapping[str, Any] | None = None,
) -> SearchReport:
    """Verifies ``fn`` under every layout (a mesh shape of ``devices`` over ``axes``, times a
    rule set of ``rules``, label -> ``AxisRules``) and ranks them by the step's time per device
    on ``chip`` (``verify(..., chip=chip)``'s ``step_seconds``, a lower bound), those whose
    arguments and activations do not fit in ``hbm`` last and marked.

    Mesh shapes are every assignment of sizes to ``axes`` whose product is ``devices``, or the
    ``meshes`` given (each over ``axes``, of ``devices`` devices). ``dims``, ``inputs`` and
    ``static`` are verify's; ``axis_types`` is 'explicit' or 'auto' (the step then runs as XLA
    lays it out, which the cost model follows: docs/search.md); ``links`` as verify's, for every
    mesh. ``top`` keeps the best ``top`` candidates in the report. A rule set under which the step
    fails on every mesh is an error listing each candidate's reason.

    >>> found = search(train_step, 4096, DIMS, axes=('d', 't'), rules={'fsdp x tp': RULES, 'fsdp': FSDP},
    ...                chip='h100', hbm='h100')                                     # doctest: +SKIP
    >>> print(found); found.best.mesh, found.best.rules                              # doctest: +SKIP
    """
    options = _checked(fn, devices, axes, rules, chip, hbm, top, meshes, axis_types)
    shapes, capacity, device = options
    kind = _AXIS_TYPES[axis_types]
    name = getattr(fn, "__qualname__", repr(fn))
    ranked: list[Candidate] = []
    rejected: list[Rejected] = []
    for label, rule_set in rules.items():
        for shape in shapes:
            with axis_rules(rule_set):
                report = verify(fn, abstract_mesh(shape, kind), dims, static=static, inputs=inputs,
                                chip=device.name, links=links)
            found = _candidate(shape, label, report, capacity)
            if isinstance(found, Candidate):
                ranked.append(found)
            else:
                rejected.append(found)
    _refuse_failing_rules(name, rules, rejected, len(shapes))
    ranked.sort(key=lambda c: (not c.fits, c.step_seconds))
    kept = tuple(ranked if top is None else ranked[:top])
    return SearchReport(name, math.prod(shapes[0].values()), device.name, hbm, kept, tuple(rejected),
                        len(shapes) * len(rules))


def _candidate(shape: dict[str, int], label: str, report: VerifyReport,
               capacity: tuple[int, str] | None) -> Candidate | Rejected:
    if report.problems or report.step_seconds is None:
        reason = report.problems[0].message if report.problems else "the step was not costed"
        return Rejected(shape, label, reason.splitlines()[0], report)
    memory = _memory_per_device(report)
    fits = capacity is None or (memory is not None and memory <= capacity[0])
    return Candidate(shape, label, report, report.step_seconds, memory, fits)


def _memory_per_device(report: VerifyReport) -> int | None:
    """The arguments' bytes per device and the activation estimate; None where a size is symbolic."""
    plan, symbolic = arguments_plan(report.inputs, dict(report.mesh))
    if symbolic:
        return None
    return plan.bytes_per_device + (report.activation_bytes_per_device or 0)


def _refuse_failing_rules(name: str, rules: Mapping[str, AxisRules], rejected: list[Rejected], shapes: int) -> None:
    for label in rules:
        failed = [r for r in rejected if r.rules == label]
        if len(failed) == shapes:
            reasons = "\n".join(f"  {_mesh_text(r.mesh)}: {r.reason}" for r in failed)
            raise ValueError(f"search: under rules[{label!r}] {name}() fails on every mesh:\n{reasons}")


def _checked(fn: Any, devices: Any, axes: Any, rules: Any, chip: Any, hbm: Any, top: Any, meshes: Any,
             axis_types: Any) -> tuple[list[dict[str, int]], tuple[int, str] | None, Chip]:
    """search's arguments checked, in the order of its signature: the first wrong one raises."""
    if isinstance(fn, type) or not callable(fn):
        raise TypeError(f"search: fn must be a function (such as a checked train_step), got {fn!r:.60}")
    if isinstance(devices, bool) or not isinstance(devices, int) or devices < 1:
        raise ValueError(f"search: devices must be a positive int (the chips to lay the step over), got {devices!r}")
    if isinstance(axes, str) or not isinstance(axes, Sequence) or not axes or \
            not all(isinstance(a, str) and a.isidentifier() for a in axes):
        raise ValueError(f"search: axes must be a non-empty sequence of mesh axis names, as ('d', 't'), got {axes!r}")
    if len(set(axes)) < len(axes):
        raise ValueError(f"search: axes names a mesh axis twice: {list(axes)}")
    if not isinstance(rules, Mapping) or not rules:
        raise ValueError("search: rules must be a non-empty mapping of label to AxisRules, as "
                         f"{{'fsdp': FSDP_RULES, 'fsdp x tp': RULES}}, got {rules!r:.80}")
    for label, rule_set in rules.items():
        if not isinstance(label, str) or not isinstance(rule_set, AxisRules):
            raise TypeError(f"search: rules[{label!r}] must be an AxisRules under a str label, got "
                            f"{type(rule_set).__name__}")
    device = chip_named(chip, "search(chip=...)")
    capacity = None if hbm is None else parse_capacity(hbm, "search: hbm")
    if top is not None and (isinstance(top, bool) or not isinstance(top, int) or top < 1):
        raise ValueError(f"search: top must be a positive int or None, got {top!r}")
    if axis_types not in _AXIS_TYPES:
        close = difflib.get_close_matches(str(axis_types), list(_AXIS_TYPES), n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ValueError(f"search: axis_types must be 'explicit' or 'auto', got {axis_types!r}{hint}")
    return _shapes(devices, tuple(axes), meshes), capacity, device


def _shapes(devices: int, axes: tuple[str, ...], meshes: Any) -> list[dict[str, int]]:
    if meshes is None:
        return mesh_shapes(devices, axes)
    if isinstance(meshes, Mapping) or not isinstance(meshes, Sequence) or not meshes:
        raise ValueError(f"search: meshes must be a non-empty list of mesh shapes (axis -> size), got {meshes!r:.80}")
    out = []
    for shape in meshes:
        if not isinstance(shape, Mapping) or tuple(shape) != axes or not all(
                isinstance(n, int) and not isinstance(n, bool) and n > 0 for n in shape.values()):
            raise ValueError(f"search: each of meshes must give a positive size to each of axes {list(axes)} in "
                             f"order, got {shape!r}")
        if math.prod(shape.values()) != devices:
            raise ValueError(f"search: meshes has {_mesh_text(shape)}, {math.prod(shape.values()):,} devices, "
                             f"not devices={devices:,}")
        out.append(dict(shape))
    return out


def _mesh_text(mesh: Mapping[str, int]) -> str:
    return " x ".join(f"{a}={n}" for a, n in mesh.items())
