"""What a kernel's spec strings say about layouts, apart from any trace: the mesh axes of each dim
of a spec (through the active rules), how two layouts differ (naming swapped same-size axes),
and the axes an ``einsum_unreduced`` leaves owed. ``kernel_layouts`` compares values with them.
"""

from __future__ import annotations

import jax

from ..context import layout as rules_layout
from ..language import ShapeSpec, ShapeSpecError
from ..model import Layout
from .kernel_pass.messages import split_text

__all__ = ["Layout", "layout_of", "differences", "einsum_owed"]


def layout_of(spec: ShapeSpec, ndim: int) -> Layout:
    """The mesh axes of each of ``ndim`` dims laid out as ``spec`` (through active rules)."""
    mesh = jax.sharding.get_abstract_mesh()
    return rules_layout(spec, ndim, None if mesh.empty else dict(mesh.shape))


def differences(have: Layout, want: Layout, there: str) -> str:
    """``dim 0 is split over 'd' here but over 't' in the spec; ...``, and a word on swapped
    axes."""
    parts = []
    for i, (h, w) in enumerate(zip(have, want)):
        if h != w:
            parts.append(f"dim {i} is {_split(h)} here but {_split(w)} in {there}")
    text = "; ".join(parts)
    moved = [(h, w) for h, w in zip(have, want) if h != w]
    had = sorted({a for h, _ in moved for a in h})
    if had and had == sorted({a for _, w in moved for a in w}):
        mesh = jax.sharding.get_abstract_mesh()
        sizes = {mesh.shape.get(a) for a in had} if not mesh.empty else set()
        if len(had) > 1:
            text += f" (mesh axes {', '.join(repr(a) for a in had)} are swapped between dims"
        else:
            text += f" (mesh axis {had[0]!r} is on another dim"
        if len(sizes) == 1 and None not in sizes:
            text += f"; all of size {sizes.pop()}, so every block has the shape {there} expects"
        text += ")"
    return text


def _split(axes: tuple[str, ...]) -> str:
    return f"split over {split_text(axes)}" if axes else "not split"


def einsum_owed(spec_text: str, inputs: tuple[ShapeSpec, ...], output: ShapeSpec) -> frozenset:
    """The mesh axes an ``einsum_unreduced`` leaves unreduced: those of its contracted dims.
    Every dim name must be laid out alike wherever the spec names it (else ShapeSpecError: a
    result said to be split over another axis than its operand is a silent wrong block)."""

    seen: dict[str, tuple[str, tuple]] = {}
    for where, s in [(f"operand {i}", s) for i, s in enumerate(inputs)] + [("the output", output)]:
        for dim, axes in zip(s.dims, layout_of(s, len(s.dims))):
            first = seen.setdefault(dim.shape, (where, axes))
            if first[1] != axes:
                raise ShapeSpecError(
                    spec_text, f"shardtypes.ops.einsum_unreduced: dim {dim.shape!r} is split over "
                    f"{split_text(first[1])} in {first[0]} but over {split_text(axes)} in {where}; a dim is laid "
                    "out alike everywhere in an einsum (move mesh axes with the collectives)")
    out = {d.shape for d in output.dims}
    return frozenset(a for name, (_, axes) in seen.items() if name not in out for a in axes)
