"""Memory plans: the layout and bytes per device of every array of a model on a mesh, without
devices.

``plan(annotation, mesh, dims)`` takes an annotation tree (or a tree of arrays or
ShapeDtypeStructs with shardings) and a mesh, which may be given by its axis sizes
(``{'d': 64, 't': 64}``), and returns a ``PlanReport``: one ``PlanRow`` per array with its path,
annotation, dtype, global shape, PartitionSpec, per-device shape and bytes; totals, the fraction
of device memory holding replicated copies, warnings (large replicated arrays, padding) and
errors (dims that do not divide their mesh axes, sizes the dims make impossible). The report
prints as a table and serialises to JSON. Nothing is compiled and no device is touched; whether
a function's annotations are met on that mesh is ``verify``'s job (``_verify``).
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from typing import Any, Mapping

import jax
import numpy as np
from jax.sharding import NamedSharding

from ..context import AxisRulesError, abstract_mesh
from ..language import (
    ELLIPSIS,
    VARIADIC,
    check_dims,
    entry_axes,
    fmt_bytes as fmt_bytes,  # (re-exported: step_cost and activations still import it from here)
    mapping_of_sizes,
)
from ..layout import check_dims_for, dim_size, dims_used, partition_spec, per_device_shape, spec_entries, spec_parts
from ..model import Leaf, axis_hint, holds_annotated_class, is_value_tree, walk_leaves
from .chips import DEVICE_KINDS, step_time
from .html_page import render_page
from .html_parts import parse_capacity

__all__ = ["plan", "plan_html", "PlanReport", "PlanRow", "parse_fraction", "replicated_problem"]


@dataclasses.dataclass(frozen=True)
class PlanRow:
    path: str
    annotation: str
    dtype: str
    shape: tuple
    spec: str
    device_shape: tuple
    bytes_per_device: int
    replicas: int
    global_bytes: int
    dim_axes: tuple = ()  # per dim, the mesh axes that split it: (('t',), ('d',)) for P('t', 'd')


@dataclasses.dataclass(frozen=True)
class PlanReport:
    """Per-array layout and memory of an annotation tree on a mesh (see ``plan``)."""

    mesh: Mapping[str, int]
    rows: tuple[PlanRow, ...]
    warnings: tuple[str, ...]
    errors: tuple[str, ...]

    def __post_init__(self) -> None:
        mapping_of_sizes(self.mesh, "PlanReport", "mesh")
        if not isinstance(self.rows, tuple) or not all(isinstance(r, PlanRow) for r in self.rows):
            raise TypeError(f"PlanReport: rows must be a tuple of PlanRow, got {self.rows!r}")
        for arg in ("warnings", "errors"):
            value = getattr(self, arg)
            if not isinstance(value, tuple) or not all(isinstance(m, str) for m in value):
                raise TypeError(f"PlanReport: {arg} must be a tuple of str, got {value!r}")

    @property
    def devices(self) -> int:
        return math.prod(self.mesh.values())

    @property
    def bytes_per_device(self) -> int:
        return sum(r.bytes_per_device for r in self.rows)

    @property
    def global_bytes(self) -> int:
        return sum(r.global_bytes for r in self.rows)

    @property
    def replicated_fraction(self) -> float:
        """The fraction of all device memory the tree takes that holds duplicate copies."""
        held = self.bytes_per_device * self.devices
        return 0.0 if held == 0 else max(0.0, 1.0 - self.global_bytes / held)

    @property
    def ok(self) -> bool:
        return not self.errors

    def __str__(self) -> str:
        headers = ("path", "annotation", "dtype", "shape", "PartitionSpec", "per device", "bytes/device")
        table = [headers] + [
            (r.path, r.annotation, r.dtype, _fmt_shape(r.shape), r.spec, _fmt_shape(r.device_shape),
             fmt_bytes(r.bytes_per_device))
            for r in self.rows
        ]
        widths = [max(len(row[i]) for row in table) for i in range(len(headers))]
        lines = ["  ".join(c.ljust(w) if i < 6 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths)))
                 for row in table]
        lines.insert(1, "  ".join("-" * w for w in widths))
        mesh = " x ".join(f"{k}={v}" for k, v in self.mesh.items())
        lines.append("")
        lines.append(f"{len(self.rows)} array{'' if len(self.rows) == 1 else 's'} "
                     f"on a {mesh} mesh ({self.devices:,} devices): "
                     f"{fmt_bytes(self.bytes_per_device)} per device, {fmt_bytes(self.global_bytes)} in all; "
                     f"{self.replicated_fraction:.1%} of the memory they take holds replicated copies")
        for w in self.warnings:
            lines.append(f"warning: {w}")
        for e in self.errors:
            lines.append(f"error: {e}")
        return "\n".join(lines)

    def to_html(self, hbm: int | str | None = None, *, title: str | None = None) -> str:
        """The plan as one self-contained HTML page (see ``plan_html``)."""
        return plan_html(self, hbm, title=title)

    def _repr_html_(self) -> str:  # Jupyter and Colab show a report as its page
        return self.to_html()

    def to_json(self) -> str:
        return json.dumps({
            "mesh": dict(self.mesh), "devices": self.devices,
            "bytes_per_device": self.bytes_per_device, "global_bytes": self.global_bytes,
            "replicated_fraction": self.replicated_fraction,
            "rows": [{k: v for k, v in dataclasses.asdict(r).items() if k != "dim_axes"}  # the spec says it
                     | {"shape": list(map(str, r.shape)), "device_shape": list(map(str, r.device_shape))}
                     for r in self.rows],
            "warnings": list(self.warnings), "errors": list(self.errors), "ok": self.ok,
        }, indent=2)


def plan_html(reports: Any, hbm: int | str | None = None, *, title: str | None = None,
              activations: Any = None) -> str:
    """One self-contained HTML page (inline CSS and SVG; no scripts, nothing loaded) of a plan:
    the mesh, memory per device as a bar by group (parameters, optimizer state, the step's
    arrays) against ``hbm`` (a size such as ``'80GiB'``, a device kind such as ``'h100'`` or
    ``'tpu-v5p'``, or bytes), the largest and the replicated arrays, and each array's layout.
    ``reports`` is a ``PlanReport`` or a mapping of mode name to ``PlanReport`` over one mesh,
    shown side by side (the same annotations under train and decode rules). ``activations``
    adds the step's intermediates as a band of their own: verify's ``report.activations`` (an
    ``ActivationEstimate``), or a mapping of mode name to one:

    >>> with axis_rules(RULES):                                        # doctest: +SKIP
    ...     train = plan(State, {'d': 64, 't': 64}, DIMS)
    >>> with axis_rules(RULES, mode='decode'):                         # doctest: +SKIP
    ...     decode = plan(State, {'d': 64, 't': 64}, DIMS)
    >>> open('plan.html', 'w').write(plan_html({'train': train, 'decode': decode}, 'h100'))  # doctest: +SKIP

    A mode may also be a ``VerifyReport``: its arguments are planned, its activations drawn, and
    its time per step (``report.step_time``; or, where verify was given no chip and ``hbm`` names
    one, the step's cost on that chip over the default links) drawn beside its memory. Two
    layouts of one step compared, the rules that choose them side by side:

    >>> with axis_rules(FSDP_X_TP):                                    # doctest: +SKIP
    ...     a = verify(train_step, {'d': 64, 't': 64}, DIMS, chip='h100')
    >>> with axis_rules(FSDP):                                         # doctest: +SKIP
    ...     b = verify(train_step, {'d': 64, 't': 64}, DIMS, chip='h100')
    >>> page = plan_html({'fsdp x tp': a, 'fsdp': b}, 'h100')          # doctest: +SKIP
    """
    if isinstance(reports, PlanReport) or _is_verify_report(reports):
        reports = {"": reports}
    if not isinstance(reports, Mapping) or not reports:
        raise TypeError(f"plan_html: reports must be a PlanReport or a non-empty mapping of mode name to "
                        f"PlanReport or VerifyReport, got {type(reports).__name__} {reports!r:.80}")
    for mode, report in reports.items():
        if not isinstance(mode, str) or not (isinstance(report, PlanReport) or _is_verify_report(report)):
            raise TypeError(f"plan_html: reports[{mode!r}] must be a PlanReport or a VerifyReport under a str "
                            f"mode name, got {type(report).__name__}")
    if len({tuple(dict(r.mesh)) for r in reports.values()}) > 1:
        meshes = [dict(r.mesh) for r in reports.values()]
        raise ValueError(f"plan_html: the reports are on meshes of different axes {meshes}; "
                         "side by side they must share the axis names (their sizes may differ)")
    if title is not None and not isinstance(title, str):
        raise TypeError(f"plan_html: title must be a str, got {title!r:.60}")
    capacity = None if hbm is None else parse_capacity(hbm, "plan_html: hbm")
    verified = {m: r for m, r in reports.items() if not isinstance(r, PlanReport)}
    times = {m: _step_time_of(r, hbm) for m, r in verified.items()}
    if activations is None and verified:
        activations = {m: r.activations for m, r in verified.items() if r.activations is not None} or None
    reports = {m: r if isinstance(r, PlanReport) else r.arguments_plan() for m, r in reports.items()}
    activations = _activations_by_mode(activations, reports)
    rows = next(iter(reports.values())).rows
    name = rows[0].path.split(".")[0].split("[")[0] if rows else ""
    if not title and verified:
        title = "verify " + " vs ".join(dict.fromkeys(r.function for r in verified.values()))
    return render_page(reports, title=title or f"Plan{' of ' + name if name else ''}", capacity=capacity,
                       activations=activations, times=times)


def _is_verify_report(report: Any) -> bool:
    # (VerifyReport is verify's, a module above this one; it is known by what it offers)
    return callable(getattr(report, "arguments_plan", None)) and hasattr(report, "step_time")


def _step_time_of(report: Any, hbm: Any) -> Any:
    """A verify report's time per step: its own, or its cost on the chip ``hbm`` names (default
    links); None where it has neither."""
    if report.step_time is not None or report.cost is None or not isinstance(hbm, str):
        return report.step_time
    key = hbm.strip().lower()
    if key not in DEVICE_KINDS:
        return None
    return step_time(report.cost, dict(report.mesh), key, chip_option="plan_html: hbm",
                     links_option="verify(links=...)")


def _activations_by_mode(activations: Any, reports: Mapping[str, Any]) -> dict:
    if activations is None:
        return {}
    if not isinstance(activations, Mapping):
        if len(reports) > 1:
            raise TypeError("plan_html: with several modes, activations must be a mapping of mode name to "
                            f"verify's report.activations, got {type(activations).__name__}")
        activations = {next(iter(reports)): activations}
    for mode, estimate in activations.items():
        if mode not in reports:
            raise ValueError(f"plan_html: activations[{mode!r}]: no such mode (modes: {list(reports)})")
        if not isinstance(getattr(estimate, "bytes_per_device", None), int) or not hasattr(estimate, "largest"):
            raise TypeError(f"plan_html: activations[{mode!r}] must be verify's report.activations (an "
                            f"ActivationEstimate), got {type(estimate).__name__} {estimate!r:.60}")
    return dict(activations)


def _fmt_shape(shape: tuple) -> str:
    return "(" + ", ".join(str(s) for s in shape) + ("," if len(shape) == 1 else "") + ")"


def plan(
    annotation: Any,
    mesh: Any,
    dims: Mapping[str, Any] | None = None,
    *,
    large_replicated_bytes: int = 64 * 2**20,
    like: Any = None,
    max_replicated: float | str | None = None,
) -> PlanReport:
    """One row per array of ``annotation`` (an annotation tree, or a tree of arrays or
    ShapeDtypeStructs with shardings) on ``mesh``: path, annotation, dtype, global shape,
    PartitionSpec, per-device shape and bytes. Dims that do not divide their axes are errors
    (the array would be padded), as are sizes the dims make impossible (``a//b`` with ``b=0``);
    large replicated arrays and padding waste are warnings. A size in ``dims`` that is not an
    int >= 0, and a name no annotation uses but close to one they do (a typo), raise an error
    naming it; other names are allowed (one table of sizes for the whole model).
    ``max_replicated`` (a fraction, ``0.05``, or a percentage, ``'5%'``): more of the memory per
    device than that held by replicated copies is an error naming the arrays whose copies cost
    most (MaxText's ``assert_params_sufficiently_sharded``).

    A tree of values that holds annotated classes (an optax state, abstract or real), or any
    value tree with ``like`` (``make_shardings``'), is planned with the values' own shapes and the
    layout the annotations give (a value's own NamedSharding, where it has one, wins).

    >>> sizes = {'layers': 80, 'embed': 8192, 'hidden': 28672}
    >>> print(plan(Array['layers', Layer], {'d': 64, 't': 64}, sizes))  # doctest: +SKIP
    """
    tolerance = None if max_replicated is None else parse_fraction(max_replicated, "plan: max_replicated")
    mesh = abstract_mesh(mesh)
    dims = check_dims({} if dims is None else dims, "plan")
    if isinstance(large_replicated_bytes, bool) or not isinstance(large_replicated_bytes, (int, float)):
        raise TypeError(f"plan: large_replicated_bytes must be a number of bytes, got {large_replicated_bytes!r}")
    if not large_replicated_bytes >= 0:
        raise ValueError(f"plan: large_replicated_bytes must be non-negative, got {large_replicated_bytes!r}")
    planned = _Planned(dict(mesh.shape), large_replicated_bytes)
    if is_value_tree(annotation) and (like is not None or holds_annotated_class(annotation)):
        _plan_annotated_values(annotation, like, dims, planned)
    elif _is_value_tree(annotation):
        _plan_values(annotation, dims, planned)
    else:
        _plan_annotation(annotation, dims, planned)
    report = PlanReport(planned.mesh_sizes, tuple(planned.rows), tuple(planned.warnings), tuple(planned.errors))
    problem = None if tolerance is None else replicated_problem(report, tolerance)
    return report if problem is None else dataclasses.replace(report, errors=report.errors + (problem,))


@dataclasses.dataclass(frozen=True)
class _Planned:
    """A plan being made: its rows, warnings and errors so far, on a mesh of ``mesh_sizes``."""

    mesh_sizes: dict[str, int]
    large_replicated_bytes: float
    rows: list[PlanRow] = dataclasses.field(default_factory=list)
    warnings: list[str] = dataclasses.field(default_factory=list)
    errors: list[str] = dataclasses.field(default_factory=list)

    def add(self, path: str, text: str, dtype: Any, shape: tuple, spec: Any) -> None:
        """The row of one array of ``shape`` laid out as ``spec``: its block on each device, its
        copies and bytes. An axis the mesh lacks or a dim its axes do not divide is an error; a
        large array replicated on every device, or padding, a warning."""
        sizes = self.mesh_sizes
        entries = spec_entries(spec)
        missing = [a for entry in entries for a in entry_axes(entry) if a not in sizes]
        if missing:
            self.errors.append(f"{path} ({text}): mesh axis {missing[0]!r} is not in the mesh (axes: {tuple(sizes)})"
                               + axis_hint(missing[:1], sizes))
            return
        parts = spec_parts(spec, len(shape), sizes)
        device_shape = per_device_shape(shape, parts)
        if device_shape is None:
            self.errors.append(f"{path} ({text}): shape {tuple(shape)} has a symbolic size; plan needs every size")
            return
        dim_axes = tuple(entry_axes(entries[i] if i < len(entries) else None) for i in range(len(shape)))
        for i, (size, n, local) in enumerate(zip(shape, parts, device_shape)):
            if size % n:
                self.errors.append(f"{path} ({text}): dim {i} of size {size} does not divide over {dim_axes[i]} "
                                   f"({n} devices); it would be padded to {local * n}")
        itemsize = np.dtype(dtype).itemsize
        per_device = int(math.prod(device_shape)) * itemsize
        global_bytes = int(math.prod(shape)) * itemsize
        devices = math.prod(sizes.values())
        replicas = devices // math.prod(parts)
        if replicas == devices and per_device > self.large_replicated_bytes and devices > 1:
            self.warnings.append(f"{path} ({text}) is replicated on all {devices:,} devices: "
                                 f"{fmt_bytes(per_device)} on each")
        padded = per_device * math.prod(parts) - global_bytes
        if padded > 0:
            self.warnings.append(f"{path} ({text}): {fmt_bytes(padded)} of padding across its shards")
        self.rows.append(PlanRow(path, text, np.dtype(dtype).name, tuple(shape), str(spec), device_shape,
                                 per_device, replicas, global_bytes, dim_axes))


def _plan_annotated_values(values: Any, like: Any, dims: Mapping[str, Any], planned: _Planned) -> None:
    """The rows of a tree of values holding annotated classes (or given ``like``): the values'
    own shapes, laid out as their annotations say (a value's own NamedSharding wins)."""
    check_dims_for(dims, set(), set(), "plan")  # the values have the sizes
    boxes = walk_leaves(values, _PlanLeaf, like=like)
    flat = jax.tree_util.tree_flatten_with_path(values)[0]
    for (path, value), box in zip(flat, jax.tree.leaves(boxes)):
        sharding = getattr(value, "sharding", None)
        shape = tuple(value.shape)
        try:
            spec = sharding.spec if isinstance(sharding, NamedSharding) else \
                partition_spec(box.leaf, len(shape), planned.mesh_sizes, shape)
        except (ValueError, AxisRulesError) as e:
            planned.errors.append(str(e))
            continue
        planned.add(jax.tree_util.keystr(path), box.leaf.text, value.dtype, shape, spec)


def _plan_values(values: Any, dims: Mapping[str, Any], planned: _Planned) -> None:
    """The rows of a tree of arrays or ShapeDtypeStructs: each laid out as its own NamedSharding
    says, replicated where it has none."""
    check_dims_for(dims, set(), set(), "plan")  # sizes have no use here
    for path, value in jax.tree_util.tree_flatten_with_path(values)[0]:
        sharding = getattr(value, "sharding", None)
        spec = sharding.spec if isinstance(sharding, NamedSharding) else jax.sharding.PartitionSpec()
        planned.add(jax.tree_util.keystr(path), "-", value.dtype, tuple(value.shape), spec)


def _plan_annotation(annotation: Any, dims: Mapping[str, Any], planned: _Planned) -> None:
    """The rows of an annotation tree, each leaf at the sizes ``dims`` gives; a leaf without a
    dtype or a size is an error."""
    single, variadic = dims_used(annotation)
    dims = check_dims_for(dims, single, variadic, "plan", strict=False)

    def leaf(leaf: Leaf) -> None:
        where = leaf.path or "the annotation"
        if leaf.dtype_cls.dtype is None:
            planned.errors.append(f"{where} ({leaf.text}): {leaf.dtype_cls.__name__} is a category; plan needs a dtype")
            return
        try:
            shape = _leaf_shape(leaf, dims, where)
            known = tuple(shape) if leaf.spec.variadic_index is None else None
            spec = partition_spec(leaf, len(shape), planned.mesh_sizes, known)
        except (ValueError, KeyError) as e:
            planned.errors.append(str(e) if isinstance(e, ValueError) else f"{where} ({leaf.text}): dims has no {e}")
            return
        planned.add(where, leaf.text, leaf.dtype_cls.dtype, tuple(shape), spec)

    walk_leaves(annotation, leaf)


def _leaf_shape(leaf: Leaf, dims: Mapping[str, Any], where: str) -> list:
    """The shape of an annotation's leaf at the sizes ``dims`` gives ('*name' dims from a tuple);
    a '...' dim or a size that cannot be known raises."""
    shape = []
    for i, dim in enumerate(leaf.spec.dims):
        if dim.kind == VARIADIC and dim.name is not None:
            shape.extend(dims[dim.name])
        elif dim.kind == ELLIPSIS:
            raise ValueError(f"{where} ({leaf.text}): dim {i} is '...', which has no size; "
                             "write '*name' and give dims[name] as a tuple")
        else:
            shape.append(dim_size(dim, dims, leaf, i, required=True))
    return shape


# ---------------------------------------------------------------------------------------------
# Replicated memory as a check (``max_replicated``), as MaxText's
# ``assert_params_sufficiently_sharded`` does for parameters. A tree's replicated share is the
# part of the memory its arrays take on each device that holds copies of what another device holds
# too: ``1 - global bytes / (bytes per device x devices)`` (``PlanReport.replicated_fraction``).

_PERCENT = re.compile(r"\s*([0-9]*\.?[0-9]+)\s*%\s*\Z")
_COSTLIEST = 3


def parse_fraction(value: Any, what: str) -> float:
    """A tolerance as a fraction in [0, 1]: a number (``0.05``) or a percentage string (``'5%'``,
    or ``'0.05'``). Anything else is an error naming ``what`` (the argument or the flag)."""
    if isinstance(value, str):
        match = _PERCENT.match(value)
        try:
            fraction = float(match.group(1)) / 100 if match else float(value)
        except ValueError:
            raise ValueError(f"{what}: {value!r} is not a share; write a percentage such as 5% "
                             "or a fraction such as 0.05") from None
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        fraction = float(value)
    else:
        raise TypeError(f"{what} must be a fraction (0.05) or a percentage string ('5%'), "
                        f"got {type(value).__name__} {value!r:.60}")
    if not 0.0 <= fraction <= 1.0 or math.isnan(fraction):
        raise ValueError(f"{what}: {value!r} is not between 0% and 100%")
    return fraction


def copies_per_device(row: PlanRow, devices: int) -> float:
    """The bytes of ``row``'s array on each device beyond its share of one copy."""
    return max(0.0, row.bytes_per_device - row.global_bytes / devices)


def replicated_problem(report: PlanReport, tolerance: float, what: str = "the arrays") -> str | None:
    """The problem when more than ``tolerance`` of the memory ``report``'s arrays take per device
    is replicated copies, naming the arrays whose copies cost most; None within it."""
    share = report.replicated_fraction
    if share <= tolerance or not report.rows:
        return None
    devices = report.devices
    costly = sorted(report.rows, key=lambda r: copies_per_device(r, devices), reverse=True)
    costly = [r for r in costly[:_COSTLIEST] if copies_per_device(r, devices) > 0]
    named = "; ".join(
        f"{r.path} ({r.annotation}, {r.spec}): {fmt_bytes(copies_per_device(r, devices))} of copies per "
        f"device ({r.replicas:,} copies)" for r in costly)
    copies = share * report.bytes_per_device
    return (f"{share:.1%} of the memory {what} take per device is replicated copies "
            f"({fmt_bytes(copies)} of {fmt_bytes(report.bytes_per_device)}), more than the "
            f"{tolerance:.1%} allowed (max_replicated); costliest: {named}. Shard these over more "
            "mesh axes (a logical axis with a rule, or a mesh axis in the annotation)")


class _PlanLeaf:
    """A leaf of the walked tree (an object, so the tree keeps the value's leaves one for one)."""

    __slots__ = ("leaf",)

    def __init__(self, leaf: Leaf):
        self.leaf = leaf


def _is_value_tree(tree: Any) -> bool:
    try:
        leaves = jax.tree.leaves(tree)
    except Exception:  # a tree JAX cannot flatten (nested too deeply): walked as an annotation
        return False
    return (bool(leaves) and all(hasattr(x, "shape") and hasattr(x, "dtype") for x in leaves)
            and not isinstance(tree, type))

