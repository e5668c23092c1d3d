"""``validate_shardings``: every problem of laying a tree of arrays out as a tree of specs on a
mesh, as ``ShardingProblem``s: a dim its axes do not divide, an axis the mesh lacks, an axis used
twice, a spec longer than the array, and a large array left replicated although an axis could
split it.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import jax
import numpy as np
from jax.sharding import AbstractMesh, Mesh, NamedSharding, PartitionSpec

from ..language import entry_axes, fmt_bytes
from ..model import public_names
from .auto import concrete_sizes, is_spec_leaf, mesh_axis_sizes, path_or_array, shape_of
from .per_device import per_device_shape, spec_entries, spec_parts
from .placement import tree_guard
from .specs import mesh_arg

__all__ = ["validate_shardings", "ShardingProblem"]


# A leaf whose per-device bytes exceed this while a mesh axis could still split it is reported by
# validate_shardings as 'large_replicated'.
LARGE_REPLICATED_BYTES = 64 * 2**20


def _threshold(value: Any, what: str) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer)):
        raise TypeError(f"{what}: large_replicated_bytes must be a number of bytes, got {value!r}")
    if not value >= 0:
        raise ValueError(f"{what}: large_replicated_bytes must be non-negative, got {value!r}")


@dataclasses.dataclass(frozen=True)
class ShardingProblem:
    """One problem ``validate_shardings`` found.

    ``path`` is the leaf's ``jax.tree_util.keystr`` path (``''`` for a bare array); ``kind`` is
    one of ``'indivisible'``, ``'unknown_axis'``, ``'duplicate_axis'``, ``'rank'``,
    ``'large_replicated'``; ``message`` says what is wrong in a full sentence.
    """

    path: str
    kind: str
    message: str

    def __post_init__(self) -> None:
        for arg in ("path", "message"):
            if not isinstance(getattr(self, arg), str):
                raise TypeError(f"ShardingProblem: {arg} must be a str, got {getattr(self, arg)!r}")
        if self.kind not in PROBLEM_KINDS:
            raise ValueError(f"ShardingProblem: kind must be one of {PROBLEM_KINDS}, got {self.kind!r}")

    def __str__(self) -> str:
        return self.message


PROBLEM_KINDS = ("indivisible", "unknown_axis", "duplicate_axis", "rank", "large_replicated")


def _pair_leaves(specs: Any, tree: Any, what: str) -> list[tuple[str, Any, Any]]:
    """(path, spec, array) for every array leaf of ``tree``; ``specs`` may be a prefix of it, as
    with ``jax.tree.map``. A None spec means replicated."""
    out: list[tuple[str, Any, Any]] = []

    def pair(p, spec, subtree):
        for q, x in jax.tree_util.tree_flatten_with_path(subtree)[0]:
            out.append((jax.tree_util.keystr(tuple(p) + tuple(q)), spec, x))

    try:
        jax.tree_util.tree_map_with_path(pair, specs, tree, is_leaf=is_spec_leaf)
    except ValueError as e:
        raise ValueError(
            f"{what}: the specs tree does not match the array tree (it must have the same "
            f"structure, or be a prefix of it): {public_names(str(e))}"
        ) from None
    bad = [
        (jax.tree_util.keystr(p), s)
        for p, s in jax.tree_util.tree_flatten_with_path(specs, is_leaf=is_spec_leaf)[0]
        if not is_spec_leaf(s)
    ]
    if bad:
        path, s = bad[0]
        raise TypeError(f"{what}: the spec at {path_or_array(path)} is {s!r}, not a PartitionSpec")
    return out


def validate_shardings(
    tree: Any,
    specs: Any,
    mesh: Any = None,
    large_replicated_bytes: int = LARGE_REPLICATED_BYTES,
) -> list[ShardingProblem]:
    """Every problem of laying ``tree`` out as ``specs`` on ``mesh``; ``[]`` means none.

    ``tree`` holds arrays or ``jax.ShapeDtypeStruct``; ``specs`` is a tree of ``PartitionSpec``
    (or ``NamedSharding``, checked on its own mesh) of the same structure or a prefix of it.
    ``mesh`` defaults to the current one. The problems, by ``kind``:

    - ``'indivisible'``: a dim whose size the product of its axes does not divide;
    - ``'unknown_axis'``: an axis the mesh does not have;
    - ``'duplicate_axis'``: one mesh axis used more than once in a spec;
    - ``'rank'``: a spec with more entries than the array has dims;
    - ``'large_replicated'``: a leaf holding more than ``large_replicated_bytes`` per device
      while an unused mesh axis could still split one of its dims.

    >>> import jax, jax.numpy as jnp
    >>> from jax.sharding import PartitionSpec as P
    >>> mesh = jax.make_mesh((4, 2), ('d', 't'))
    >>> for problem in validate_shardings({'w': jnp.zeros((6, 8))}, {'w': P('d', 'd')}, mesh):
    ...     print(problem.kind)
    indivisible
    duplicate_axis
    """
    what = "validate_shardings"
    if mesh is not None:
        mesh_arg(mesh, what)
    _threshold(large_replicated_bytes, what)
    with tree_guard(what, "tree or specs", tree, specs):
        pairs = _pair_leaves(specs, tree, what)
    problems: list[ShardingProblem] = []
    for path, spec, x in pairs:
        leaf_mesh: Mesh | AbstractMesh
        if isinstance(spec, NamedSharding):
            leaf_mesh, spec = spec.mesh, spec.spec
        else:  # the mesh given, else the current one
            leaf_mesh, spec = mesh_arg(mesh, what), PartitionSpec() if spec is None else spec
        problems.extend(_leaf_problems(path, x, spec, leaf_mesh, large_replicated_bytes, what))
    return problems


def _leaf_problems(path: str, x: Any, spec: PartitionSpec, mesh: Mesh | AbstractMesh, threshold: int,
                   what: str) -> list[ShardingProblem]:
    shape = shape_of(x, path, what)
    sizes = concrete_sizes(shape)
    axis_sizes = mesh_axis_sizes(mesh)
    where = f"{path_or_array(path)} (shape {shape}, spec {spec})"
    found: list[ShardingProblem] = []

    def add(kind: str, message: str) -> None:
        found.append(ShardingProblem(path, kind, message))

    entries = spec_entries(spec)
    if len(entries) > len(shape):
        add("rank", f"{where}: the spec has {len(entries)} entries but the array has only {len(shape)} dims.")
    seen: dict[str, int] = {}
    parts = spec_parts(spec, len(shape), axis_sizes)  # (an axis the mesh lacks splits nothing)
    for i, entry in enumerate(entries):
        axes = entry_axes(entry)
        for a in axes:
            if a not in axis_sizes:
                add(
                    "unknown_axis",
                    f"{where}: dim {i} is sharded over mesh axis {a!r}, which the mesh does not "
                    f"have (axes: {tuple(axis_sizes)}).",
                )
            elif a in seen:
                add(
                    "duplicate_axis",
                    f"{where}: mesh axis {a!r} is used by dim {seen[a]} and again by dim {i}; an "
                    "axis can shard only one dim once.",
                )
            else:
                seen[a] = i
        if i >= len(shape):
            continue
        known = tuple(a for a in axes if a in axis_sizes)
        size = sizes[i]
        if known and size is not None and size % parts[i] != 0:
            add(
                "indivisible",
                f"{where}: dim {i} has size {size}, which mesh axes {known} of total size "
                f"{parts[i]} do not divide.",
            )
    dtype = getattr(x, "dtype", None)
    block = per_device_shape(sizes, parts)  # (None where a size is symbolic)
    if dtype is not None and block is not None:
        concrete = [int(s) for s in sizes if s is not None]
        per_device = math.prod(block) * np.dtype(dtype).itemsize
        if per_device > threshold:
            free = [a for a, n in axis_sizes.items() if n > 1 and a not in seen]
            hint = next(
                ((a, i) for a in sorted(free, key=lambda a: -axis_sizes[a])
                 for i in sorted(range(len(concrete)), key=lambda i: -concrete[i])
                 if (concrete[i] // parts[i]) % axis_sizes[a] == 0 and concrete[i] % parts[i] == 0),
                None,
            )
            if hint is not None:
                a, i = hint
                add(
                    "large_replicated",
                    f"{where}: holds {fmt_bytes(per_device, 'exact')} per device, over the "
                    f"{fmt_bytes(threshold, 'exact')} threshold, while mesh axes {tuple(free)} are "
                    f"unused; e.g. dim {i} (size {concrete[i]}) could also be sharded over {a!r}.",
                )
    return found
