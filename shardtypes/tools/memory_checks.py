"""The memory checks of ``verify``: the plan of the arguments it built (for its page and its
checks), the step's activation estimate (``activations``), and whether the two fit in a device's
memory (``hbm``). The replicated share against ``max_replicated`` is ``memory_plan``'s.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

import jax

from ..checking import jaxprs
from ..language import fmt_bytes
from .activations import ActivationEstimate, alike, estimate
from .html_parts import GROUPS, group_of
from .memory_plan import PlanReport, plan, replicated_problem

__all__ = ["arguments_plan", "step_activations", "memory_problems"]


def arguments_plan(inputs: Mapping[str, Any] | None, mesh: Mapping[str, int],
                   annotations: Mapping[str, Any] | None = None) -> tuple[PlanReport, list[str]]:
    """The plan of the arguments ``verify`` built (``VerifyReport.inputs``), paths led by the
    parameter's name; and the parameters left out because some size is symbolic (no bytes yet).
    ``annotations`` (parameter name -> annotation, where known) give the rows their annotations,
    so that a batch argument (``x: f32[b'batch/d embed']``) counts as one, not as parameters."""
    rows: list = []
    symbolic: list[str] = []
    warnings: list[str] = []
    errors: list[str] = []
    for name, value in (inputs or {}).items():
        leaves = jax.tree.leaves(value)
        if not all(all(isinstance(d, int) for d in leaf.shape) for leaf in leaves):
            symbolic.append(name)
            continue
        if not leaves:
            continue
        part, known = None, (annotations or {}).get(name)
        if known is not None:
            try:
                part = plan(value, dict(mesh), like=known)
            except (TypeError, ValueError):
                part = None  # (a value the annotation does not describe: planned from its own layout)
        if part is None:
            part = plan(value, dict(mesh))
        rows += [dataclasses.replace(r, path=name + r.path if r.path.startswith((".", "[")) or not r.path
                                     else f"{name}.{r.path}") for r in part.rows]
        warnings += [f"{name}: {w}" for w in part.warnings]
        errors += [f"{name}: {e}" for e in part.errors]
    return PlanReport(dict(mesh), tuple(rows), tuple(warnings), tuple(errors)), symbolic


def step_activations(closed: Any, leaves: list, mesh: Any) -> ActivationEstimate:
    """The activation estimate of a traced step on ``mesh`` (an AbstractMesh). Where the walk
    cannot follow the step (params in no shape the release reader knows: ``jaxprs.Unreadable``),
    that is said in the estimate (a lower bound of nothing); any other failure is a bug of
    shardtypes' and is raised."""
    auto = {a: n for a, n, t in zip(mesh.axis_names, mesh.axis_sizes, mesh.axis_types)
            if t == jax.sharding.AxisType.Auto}
    try:
        return estimate(closed, leaves, auto)
    except jaxprs.Unreadable as e:
        return ActivationEstimate(0, (), (f"the estimate could not follow this step ({e}); nothing was counted",))


def memory_problems(args: dict, mesh: Mapping[str, int], name: str, tolerance: float | None,
                    capacity: tuple[int, str] | None, activations: ActivationEstimate | None,
                    annotations: Mapping[str, Any] | None = None) -> list[tuple[str, str]]:
    """``(kind, message)`` of verify's memory problems: more than ``tolerance`` of the memory
    ``name()``'s arguments take per device held by replicated copies, and arguments plus
    activations over ``capacity``; a 'setup' problem where some size is symbolic. The arguments
    are planned once for both."""
    asked = [option for option, given in (("max_replicated", tolerance), ("hbm", capacity)) if given is not None]
    if not asked:
        return []
    arguments, symbolic = arguments_plan(args, mesh, annotations)
    if symbolic:
        return [("setup", f"{' and '.join(asked)}: the memory of {name}()'s arguments {symbolic} is not known, "
                          "since some of their sizes are symbolic; give every dim in dims=...")]
    found = []
    if tolerance is not None:
        problem = replicated_problem(arguments, tolerance, f"{name}()'s arguments")
        found += [] if problem is None else [("memory", problem)]
    if capacity is not None:
        found += _fit_problems(arguments, activations, capacity, name)
    return found


def _fit_problems(arguments: PlanReport, activations: ActivationEstimate | None, capacity: tuple[int, str],
                  name: str) -> list[tuple[str, str]]:
    """A 'memory' problem when the arguments (parameters, optimizer state, step arrays) and the
    activation estimate take more than ``capacity`` per device, naming the largest parts."""
    if activations is None:
        return [("setup", f"hbm: {name}() was not traced, so its activations are not known")]
    parts: dict[str, int] = {}
    for row in arguments.rows:
        group = group_of(row.path, row.annotation)
        parts[group] = parts.get(group, 0) + row.bytes_per_device
    parts["activations"] = activations.bytes_per_device
    total = sum(parts.values())
    limit, label = capacity
    if total <= limit:
        return []
    some = "at least " if activations.lower_bound else ""
    split = " + ".join(f"{group} {fmt_bytes(parts[group])}" for group in GROUPS if parts.get(group))
    largest = sorted(arguments.rows, key=lambda r: -r.bytes_per_device)[:3]
    named = [f"{r.path} ({r.spec}) {fmt_bytes(r.bytes_per_device)}" for r in largest]
    named += [f"the activation {v}" if n == 1 else f"{n} activations of {v}" for n, v in alike(activations.largest)[:2]]
    return [("memory", f"{name}() does not fit in {label}: {some}{fmt_bytes(total)} per device "
                              f"({split}), {fmt_bytes(total - limit)} over; the largest parts: {'; '.join(named)}")]
