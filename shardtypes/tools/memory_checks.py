"""The memory checks of ``verify``: the plan of the arguments it built (for its page and its
checks), and their replicated share against ``max_replicated`` (``memory_plan.replicated_problem``).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

import jax

from .memory_plan import PlanReport, plan

__all__ = ["arguments_plan"]


def arguments_plan(inputs: Mapping[str, Any] | None, mesh: Mapping[str, int]) -> tuple[PlanReport, list[str]]:
    """The plan of the arguments ``verify`` built (``VerifyReport.inputs``), paths led by the
    parameter's name; and the parameters left out because some size is symbolic (no bytes yet)."""
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
        part = plan(value, dict(mesh))
        rows += [dataclasses.replace(r, path=name + r.path if r.path.startswith((".", "[")) else f"{name}.{r.path}")
                 for r in part.rows]
        warnings += [f"{name}: {w}" for w in part.warnings]
        errors += [f"{name}: {e}" for e in part.errors]
    return PlanReport(dict(mesh), tuple(rows), tuple(warnings), tuple(errors)), symbolic
