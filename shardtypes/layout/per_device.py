"""One array's block on one device: how many parts each dim is split into, and the block's shape.

The one place shardtypes computes a per-device shape (the step cost, the activation estimate,
the memory plan and ``validate_shardings`` all ask it), so that a PartitionSpec unreduced over
some axes, an axis not in the mesh, or a symbolic dim mean the same thing everywhere.
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

from ..language import entry_axes

__all__ = ["spec_entries", "spec_parts", "per_device_shape"]


def spec_entries(spec: Any) -> tuple:
    """A PartitionSpec's entries, one per dim it names (``()`` for None or a non-spec). JAX
    refuses ``tuple(spec)`` of a spec unreduced over some axes; its ``partitions`` are the
    entries there, and the unreduced axes split no dim."""
    if spec is None:
        return ()
    partitions = getattr(spec, "partitions", None)
    if isinstance(partitions, tuple):
        return partitions
    try:
        return tuple(spec)
    except (TypeError, ValueError):  # (not a spec)
        return ()


def spec_parts(spec: Any, ndim: int, sizes: Mapping[str, int]) -> tuple[int, ...]:
    """Per dim of an array of rank ``ndim``, into how many parts ``spec`` splits it over the mesh
    axes in ``sizes`` (name -> size; an axis not there counts as one part: an axis of another
    kind, or of size 1)."""
    entries = spec_entries(spec)
    return tuple(math.prod(sizes.get(a, 1) for a in entry_axes(entries[i] if i < len(entries) else None))
                 for i in range(ndim))


def per_device_shape(shape: Sequence[Any], *parts: Sequence[int] | None) -> tuple[int, ...] | None:
    """The shape of one device's block of an array of global ``shape`` split into ``parts`` per
    dim (several sequences multiply: a spec's own parts times more splits; a missing entry or
    None is one part). A dim that does not divide is rounded up, as XLA pads it. None where a
    dim is not an int (a symbolic size)."""
    out = []
    for i, size in enumerate(shape):
        if not isinstance(size, int):
            return None
        n = 1
        for p in parts:
            if p is not None and i < len(p):
                n *= int(p[i])
        out.append(-(-size // n) if n > 1 else size)
    return tuple(out)
