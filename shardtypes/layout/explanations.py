"""``explain``: which axis rule each dim of each array took, and why others were passed over.

The rules resolve one array at a time; ``explain`` walks a whole annotation tree, as the
derivation does, so it sits on the derivation side, above both.
"""

from __future__ import annotations

from typing import Any, Mapping

from ..context import AxisRulesError, choices as rules_choices, current_mesh, current_rules
from ..language import check_dims, is_unconstrained
from ..model import Leaf, walk_leaves
from .dim_sizes import dim_size
from .specs import mesh_arg

__all__ = ["explain"]


def explain(annotation: Any, mesh: Any = None, dims: Mapping[str, Any] | None = None) -> str:
    """Which rule each dim of each array in ``annotation`` took, and why others were passed over,
    under the active rules (and ``mesh``/``dims`` when given, for axis and divisibility checks)."""
    return explain_tree(annotation, mesh, dims)


def explain_tree(annotation: Any, mesh: Any = None, dims: Mapping[str, Any] | None = None) -> str:
    """The text of ``explain``: for each array of the annotation tree, each dim's mesh axes and
    the rule that put them there (or why none did)."""
    if mesh is None:
        try:
            mesh = current_mesh(None, "explain")
        except ValueError:
            mesh = None
    else:
        mesh = mesh_arg(mesh, "explain")
    if dims is not None:
        dims = check_dims(dims, "explain")
    mesh_sizes = dict(mesh.shape) if mesh is not None else None
    active = current_rules()
    lines = []
    if active is None:
        lines.append("no axis rules are active: the names after '/' are mesh axes")
    else:
        rules, mode = active
        lines.append(f"under {rules!r}" + (f" in mode {mode!r}" if mode else ""))

    def leaf(leaf: Leaf) -> None:
        spec = leaf.spec
        known = [dim_size(d, dims or {}, leaf, i, required=False) if not d.is_variadic else None
                 for i, d in enumerate(spec.dims)]
        ndim = len(spec.dims) - (spec.variadic_index is not None)
        lines.append(f"{leaf.path or 'the annotation'}: {leaf.text}")
        try:
            story = rules_choices(spec, ndim, mesh_sizes, tuple(known) if spec.variadic_index is None else None)
        except AxisRulesError as e:
            lines.append(f"  error: {e}")
            return
        for choice in story:
            axes = ("XLA decides" if is_unconstrained(choice.axes) else
                    ", ".join(choice.axes) if choice.axes else "replicated")
            notes = "; ".join(choice.notes)
            lines.append(f"  dim {choice.index} {choice.dim!r}: {axes}" + (f"  ({notes})" if notes else ""))

    walk_leaves(annotation, leaf)
    return "\n".join(lines)
