"""Hypothesis strategies for property tests of sharded code: ``meshes(axes, devices=8)`` draws a
mesh shape, which hypothesis shrinks towards every axis at 1, so a failing test reports the
smallest mesh that fails."""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

__all__ = ["meshes"]


def meshes(axes: Sequence[str], devices: int = 8, keep: Mapping[str, int] | None = None) -> Any:
    """A hypothesis strategy of mesh shapes ``{axis: size}`` over ``axes``: sizes divide
    ``devices`` and their product is at most ``devices``; axes in ``keep`` are held at their size.
    Use it with ``assert_same_on_every_mesh(fn, meshes=[mesh])``."""
    try:
        from hypothesis import strategies as st
    except ImportError:  # pragma: no cover - hypothesis is a test dependency
        raise ImportError("shardtypes.testing.meshes needs hypothesis: pip install hypothesis") from None
    if isinstance(axes, str):
        axes = (axes,)
    axes = tuple(axes)
    if not axes or not all(isinstance(a, str) and a.isidentifier() for a in axes) or len(set(axes)) != len(axes):
        raise TypeError(f"meshes: axes must be distinct mesh axis names, as ('d', 't'), got {axes!r}")
    if isinstance(devices, bool) or not isinstance(devices, int) or devices < 1:
        raise TypeError(f"meshes: devices must be an int >= 1, got {devices!r}")
    keep = dict(keep or {})
    for axis, size in keep.items():
        if axis not in axes:
            raise ValueError(f"meshes: keep names {axis!r}, which is not one of axes {list(axes)}")
        if isinstance(size, bool) or not isinstance(size, int) or size < 1 or devices % size:
            raise ValueError(f"meshes: keep[{axis!r}] must be an int size that divides devices={devices}, got {size!r}")
    room = devices // math.prod(keep.values()) if keep else devices
    divisors = [d for d in range(1, room + 1) if room % d == 0]

    @st.composite
    def draw(draw: Any) -> dict[str, int]:
        left = room
        shape = {}
        for axis in axes:
            if axis in keep:
                shape[axis] = keep[axis]
                continue
            size = draw(st.sampled_from([d for d in divisors if d <= left and left % d == 0]))
            shape[axis] = size
            left //= size
        return shape

    return draw()
