"""``VerifyReport.to_html``: verify's problems, each linked to the arrays it names, above the plan
of the arguments verify built from the function's annotations (their layout and memory per
device). Arguments whose sizes are symbolic (dims not given to verify) have no bytes yet: the
page says which, and plans the others.
"""

from __future__ import annotations

import math
from typing import Any

from .html_page import render_page
from .html_parts import parse_capacity
from .memory_checks import arguments_plan

__all__ = ["verify_html"]


def verify_html(report: Any, hbm: int | str | None = None, *, title: str | None = None) -> str:
    if title is not None and not isinstance(title, str):
        raise TypeError(f"VerifyReport.to_html: title must be a str, got {title!r:.60}")
    capacity = None if hbm is None else parse_capacity(hbm, "VerifyReport.to_html: hbm")
    arguments, symbolic = arguments_plan(report.inputs, dict(report.mesh))
    notes: list[str] = []
    if symbolic:
        notes.append(f"No bytes for {', '.join(symbolic)}: some of their sizes are symbolic (dims not given "
                     "to verify); give every dim in dims=... to plan their memory.")
    mesh = dict(report.mesh)
    dims = ", ".join(f"{k}={v}" for k, v in report.dims.items()) or "none"
    verdict = "ok" if report.ok else f"{len(report.problems)} problem{'s' if len(report.problems) != 1 else ''}"
    return render_page(
        {"": arguments},
        title=title or f"verify {report.function}: {verdict}",
        subtitle=f"dims {dims}; the arrays below are {report.function}()'s arguments "
                 f"({math.prod(mesh.values()):,} devices)",
        capacity=capacity,
        problems=[(p.kind, p.message) for p in report.problems] or (),
        notes=notes,
        verify=True,
        activations={"": report.activations} if report.activations is not None else None,
        times={"": report.step_time} if getattr(report, "step_time", None) is not None else None,
    )
