"""The least sharding that reaches a target: ``partition_specs_for_budget`` (each leaf within a
per-device byte budget, sharded as little as that allows) and ``convert_specs`` (a spec tree made
for one mesh carried to another, keeping each leaf's parallelism).

Both search the assignments of mesh axes to dims for the one with the smallest product that
reaches the target; only dividing assignments are used, so per-device sizes are exact.
"""

from __future__ import annotations

import functools
import itertools
import math
from typing import Any, Sequence

import jax
import numpy as np
from jax.sharding import AbstractMesh, Mesh, NamedSharding, PartitionSpec

from ..language import entry_axes, fmt_bytes
from ..model import public_names
from .auto import (
    Unit,
    candidate_units,
    concrete_sizes,
    is_spec_leaf,
    itemsize_of,
    mesh_axis_sizes,
    path_or_array,
    shape_of,
    spec_of_units,
)
from .placement import tree_guard
from .specs import mesh_arg

__all__ = ["partition_specs_for_budget", "convert_specs"]

CONVERT_STRATEGIES = ("preserve_balance", "same_axes")


#### Least sharding: the fewest devices per array that reach a parallelism target


def _place(sizes: tuple[int | None, ...], chosen: Sequence[Unit]) -> list[list[Unit]] | None:
    """Puts every unit of ``chosen`` on a dim that it divides (several may share one dim), or
    None if no placement exists. Units go, in priority order, to the dim with the largest
    remaining local size first (ties: the dim with fewer units); backtracking makes the search
    exhaustive."""
    rest = {i: s for i, s in enumerate(sizes) if s is not None}  # dims of known size
    per_dim: list[list[Unit]] = [[] for _ in sizes]

    def go(k: int) -> bool:
        if k == len(chosen):
            return True
        unit = chosen[k]
        for i in sorted(rest, key=lambda i: (-rest[i], len(per_dim[i]), i)):
            if rest[i] % unit.size == 0:
                rest[i] //= unit.size
                per_dim[i].append(unit)
                if go(k + 1):
                    return True
                per_dim[i].pop()
                rest[i] *= unit.size
        return False

    return per_dim if go(0) else None


@functools.lru_cache(maxsize=4096)
def _least_sharding(
    sizes: tuple[int | None, ...], units: tuple[Unit, ...], needed: int
) -> tuple[PartitionSpec, int, bool]:
    """The spec with the smallest parallelism (product of its axis sizes) that is at least
    ``needed``; if none reaches it, the one with the largest. Returns (spec, parallelism,
    reached). Ties go to the candidates earlier in priority order."""
    if needed <= 1:
        return PartitionSpec(), 1, True
    subsets = []
    for r in range(1, len(units) + 1):
        for combo in itertools.combinations(range(len(units)), r):
            axes = [a for k in combo for a in units[k].axes]
            if len(set(axes)) == len(axes):
                subsets.append((math.prod(units[k].size for k in combo), combo))
    subsets.sort()  # by parallelism, then by priority (lexicographic indices)
    for product, combo in subsets:
        if product < needed:
            continue
        per_dim = _place(sizes, [units[k] for k in combo])
        if per_dim is not None:
            return spec_of_units(per_dim), product, True
    for product, combo in sorted(subsets, key=lambda pc: (-pc[0], pc[1])):
        per_dim = _place(sizes, [units[k] for k in combo])
        if per_dim is not None:
            return spec_of_units(per_dim), product, False
    return PartitionSpec(), 1, False


def partition_specs_for_budget(
    tree: Any,
    max_bytes_per_device: int,
    mesh: Any = None,
    names: Sequence[str | tuple[str, ...]] | None = None,
) -> Any:
    """A tree of ``PartitionSpec`` in which every leaf holds at most ``max_bytes_per_device``
    bytes on each device, sharding each leaf as little as that allows.

    A leaf already within the budget stays replicated (``P()``). A larger one gets the
    assignment of mesh axes (or ``names`` entries) with the smallest product that brings it within
    the budget; several axes may share a dim, only dividing assignments are used, so the
    per-device bytes are exact. If some leaves cannot meet the budget even sharded over every
    usable axis, the ``ValueError`` names every one of them with its shape, dtype and the best
    bytes per device it could reach.

    >>> import jax, jax.numpy as jnp
    >>> mesh = jax.make_mesh((4, 2), ('d', 't'))
    >>> params = {'w': jnp.zeros((1024, 1024)), 'b': jnp.zeros(1024)}   # 4 MiB and 4 KiB
    >>> partition_specs_for_budget(params, 2**20, mesh)                # 1 MiB per device
    {'b': P(), 'w': P('d', None)}
    """
    what = "partition_specs_for_budget"
    if isinstance(max_bytes_per_device, bool) or not isinstance(max_bytes_per_device, (int, float, np.integer)):
        raise TypeError(f"{what}: max_bytes_per_device must be a number of bytes, got {max_bytes_per_device!r}")
    if not max_bytes_per_device > 0:
        raise ValueError(f"{what}: max_bytes_per_device must be positive, got {max_bytes_per_device!r}")
    mesh = mesh_arg(mesh, what)
    units = candidate_units(mesh, names, what)
    budget = max_bytes_per_device
    failures: list[str] = []

    def leaf(p, x) -> PartitionSpec:
        path = jax.tree_util.keystr(p)
        shape = shape_of(x, path, what)
        sizes = concrete_sizes(shape)
        itemsize = itemsize_of(x, path, what)
        known = [s for s in sizes if s is not None]
        if len(known) != len(sizes):
            raise ValueError(f"{what}: {path_or_array(path)} has symbolic shape {shape}, so its bytes are unknown")
        total = math.prod(known) * itemsize
        if total <= budget:
            return PartitionSpec()
        needed = -(-total // int(budget)) if float(budget).is_integer() else math.ceil(total / budget)
        spec, parallelism, reached = _least_sharding(sizes, units, int(needed))
        if not reached:
            failures.append(
                f"  {path_or_array(path)}: shape {shape}, dtype {np.dtype(x.dtype).name}, "
                f"{fmt_bytes(total, 'exact')} in all; at best {fmt_bytes(total // parallelism, 'exact')} per device "
                f"with {spec} over {parallelism} device{'' if parallelism == 1 else 's'}"
            )
        return spec

    with tree_guard(what, "tree", tree):
        specs = jax.tree_util.tree_map_with_path(leaf, tree)
    if failures:
        axes = {u.axes[0] if len(u.axes) == 1 else u.axes: u.size for u in units}
        raise ValueError(
            f"{what}: {len(failures)} {'leaf' if len(failures) == 1 else 'leaves'} "
            f"cannot fit in {fmt_bytes(budget, 'exact')} per device "
            f"on this mesh (usable axes and sizes: {axes}):\n" + "\n".join(failures) + "\n"
            "Raise the budget, use a larger mesh, or pad the dims so that more axes divide them."
        )
    return specs


def convert_specs(
    specs: Any,
    old_mesh: Any,
    new_mesh: Any,
    shapes: Any,
    strategy: str = "preserve_balance",
) -> Any:
    """A spec tree for ``new_mesh`` from one made for ``old_mesh`` (eFormer's
    ``convert_sharding_strategy``, for a whole tree). ``shapes`` is the matching tree of arrays or
    ``jax.ShapeDtypeStruct`` (one per spec).

    Strategies:

    - ``"preserve_balance"``: each leaf's parallelism on the old mesh (the product of its spec's
      axis sizes there) is the least it must reach on the new mesh; the new spec is the smallest
      assignment of new mesh axes (largest dims and axes first) that reaches it, or the largest
      one the new mesh allows if it cannot. A replicated leaf stays replicated.
    - ``"same_axes"``: a leaf keeps its spec if the new mesh has all its axes and they still
      divide the dims; otherwise it is converted as by ``"preserve_balance"``.

    >>> import jax, jax.numpy as jnp
    >>> from jax.sharding import PartitionSpec as P
    >>> old = jax.make_mesh((4, 2), ('d', 't'))
    >>> new = jax.make_mesh((2, 2, 2), ('x', 'y', 'z'))
    >>> convert_specs({'w': P('d', 't')}, old, new, {'w': jnp.zeros((64, 32))})
    {'w': P(('x', 'z'), 'y')}
    """
    what = "convert_specs"
    if strategy not in CONVERT_STRATEGIES:
        raise ValueError(f"{what}: unknown strategy {strategy!r}; use one of {CONVERT_STRATEGIES}")
    for arg, value in (("old_mesh", old_mesh), ("new_mesh", new_mesh)):
        if not isinstance(value, (Mesh, AbstractMesh)):
            raise TypeError(f"{what}: {arg} must be a Mesh or an AbstractMesh, "
                            f"got {type(value).__name__} {value!r:.60}")
    old_sizes = mesh_axis_sizes(old_mesh)
    new_sizes = mesh_axis_sizes(new_mesh)
    units = candidate_units(new_mesh, None, what)

    def leaf(p, spec, x):
        path = jax.tree_util.keystr(p)
        if isinstance(spec, NamedSharding):
            spec = spec.spec
        if spec is None:
            spec = PartitionSpec()
        if not isinstance(spec, PartitionSpec):
            raise TypeError(f"{what}: the spec at {path_or_array(path)} is {spec!r}, not a PartitionSpec")
        inner = jax.tree_util.tree_leaves(x)
        if len(inner) != 1 or inner[0] is not x:
            raise ValueError(
                f"{what}: the spec at {path_or_array(path)} ({spec}) stands for {len(inner)} arrays in "
                "shapes; give one spec per array"
            )
        shape = shape_of(x, path, what)
        sizes = concrete_sizes(shape)
        axes = [a for e in spec for a in entry_axes(e)]
        missing = [a for a in axes if a not in old_sizes]
        if missing:
            raise ValueError(
                f"{what}: {path_or_array(path)} (shape {shape}, spec {spec}) uses mesh axis "
                f"{missing[0]!r}, which old_mesh does not have (axes: {tuple(old_sizes)})"
            )
        if len(set(axes)) != len(axes):
            raise ValueError(f"{what}: {path_or_array(path)} (shape {shape}, spec {spec}) uses a mesh axis twice")
        if strategy == "same_axes" and _transfers(spec, sizes, new_sizes):
            return spec
        factor = math.prod(old_sizes[a] for a in axes)
        return _least_sharding(sizes, units, factor)[0]

    try:
        with tree_guard(what, "specs or shapes", specs, shapes):
            return jax.tree_util.tree_map_with_path(leaf, specs, shapes, is_leaf=is_spec_leaf)
    except ValueError as e:
        if str(e).startswith(what):
            raise
        raise ValueError(
            f"{what}: the specs tree does not match the shapes tree (same structure needed): {public_names(str(e))}"
        ) from None


def _transfers(spec: PartitionSpec, sizes: tuple[int | None, ...], new_sizes: dict[str, int]) -> bool:
    if len(spec) > len(sizes):
        return False
    for entry, size in zip(spec, sizes):
        axes = entry_axes(entry)
        if not axes:
            continue
        if any(a not in new_sizes for a in axes) or size is None:
            return False
        if size % math.prod(new_sizes[a] for a in axes) != 0:
            return False
    return True
