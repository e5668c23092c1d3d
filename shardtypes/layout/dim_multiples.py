"""How many parts each named dim is split into on a mesh: a dim named ``batch`` sharded over axes
``d`` and ``t`` of a ``{'d': 4, 't': 2}`` mesh must be a multiple of 8. ``verify`` makes symbolic
sizes of that multiple; ``shardtypes.testing`` sizes the inputs it makes so that every mesh it
tries divides them. The mesh axes the annotations name (axis rules resolved) come from here too.
"""

from __future__ import annotations

import math
from typing import Any, Iterable, Mapping

from ..context import AxisRulesError
from ..language import BROADCAST, NAMED, VARIADIC, entry_axes
from ..model import Leaf, walk_leaves
from .specs import partition_spec

__all__ = ["dim_multiples", "named_mesh_axes"]


def _each_leaf(annotations: Iterable[Any], visit: Any) -> None:
    for annotation in annotations:
        try:
            walk_leaves(annotation, visit)
        except TypeError:
            pass  # not an array tree: a static parameter


def _spec_of(leaf: Leaf, mesh_sizes: Mapping[str, int] | None) -> Any:
    spec = leaf.spec
    try:
        return partition_spec(leaf, None if spec.variadic_index is not None else len(spec.dims), mesh_sizes)
    except (ValueError, AxisRulesError):
        return None


def dim_multiples(annotations: Iterable[Any], mesh_sizes: Mapping[str, int]) -> tuple[dict[str, int], set[str]]:
    """Every dim name the annotations use, with the product of mesh axis sizes each plain named
    dim is sharded over on a mesh of ``mesh_sizes`` (lcm across uses), and the names of variadic
    ``*name`` dims. Annotations that are not array trees (static parameters) are passed over."""
    multiples: dict[str, int] = {}
    variadic: set[str] = set()

    def leaf(leaf: Leaf) -> None:
        spec = leaf.spec
        pspec = _spec_of(leaf, mesh_sizes)
        for i, dim in enumerate(spec.dims):
            bound = dim.name
            if dim.kind == VARIADIC:
                if bound is not None:
                    variadic.add(bound)
                continue
            for name in dim.names:
                multiples.setdefault(name, 1)
            if (bound is not None and dim.kind in (NAMED, BROADCAST) and pspec is not None
                    and spec.variadic_index is None and i < len(pspec)):
                parts = math.prod(mesh_sizes.get(a, 1) for a in entry_axes(pspec[i]))
                multiples[bound] = math.lcm(multiples[bound], parts)

    _each_leaf(annotations, leaf)
    return multiples, variadic


def named_mesh_axes(annotations: Iterable[Any], mesh_sizes: Mapping[str, int] | None = None) -> list[str]:
    """The mesh axes the annotations shard a dim over (axis rules resolved with ``mesh_sizes``
    where given), in the order they first appear."""
    found: dict[str, None] = {}

    def leaf(leaf: Leaf) -> None:
        pspec = _spec_of(leaf, mesh_sizes)
        for entry in pspec or ():
            for axis in entry_axes(entry):
                found.setdefault(axis, None)

    _each_leaf(annotations, leaf)
    return list(found)
