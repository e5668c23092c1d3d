"""Automatic specs: PartitionSpecs for arrays that carry no annotation, checked, budgeted and
carried from one mesh to another.

Annotations are the source of truth for a model's own arrays, but checkpoints, optimizer states
and third-party trees arrive without them. For those, this module derives specs from shapes
alone, following eFormer's rule: the largest dims take the largest mesh axes that divide them.

>>> import jax, jax.numpy as jnp
>>> mesh = jax.make_mesh((4, 2), ('d', 't'))
>>> auto_partition_spec(jnp.zeros((1024, 512)), mesh)
P('d', 't')

What eFormer's users met silently is loud in the modules beside this one, which share its
candidates (``Unit``) and shapes:

- ``partition_specs_for_budget`` (``layout.least_sharding``) really checks the per-device byte budget, and names
  every leaf that cannot meet it, with the best it could do;
- ``validate_shardings`` (``layout.validate``) returns a ``ShardingProblem`` for every dim its axes do not divide, axis
  the mesh lacks, axis used twice, spec longer than the array, and large array left replicated
  although an axis could split it;
- ``convert_specs`` (``layout.least_sharding``) carries a whole spec tree from one mesh to another, keeping each leaf's
  parallelism.

A mesh axis of size 1 is never chosen (it shards nothing), and no axis is used twice in one spec.
Every dim a result shards is divisible by the product of its axes, so per-device sizes are exact.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any, Iterable, Sequence

import jax
import numpy as np
from jax.sharding import AbstractMesh, Mesh, NamedSharding, PartitionSpec

from .placement import tree_guard
from .specs import mesh_arg

__all__ = ["auto_partition_spec", "auto_partition_specs"]


#### Units: what may shard one dim


@dataclasses.dataclass(frozen=True)
class Unit:
    """One candidate for a dim: a mesh axis, or several used together (``names=[('d', 't')]``)."""

    axes: tuple[str, ...]
    size: int


def mesh_axis_sizes(mesh: Any) -> dict[str, int]:
    return {name: int(size) for name, size in dict(mesh.shape).items()}


def candidate_units(mesh: Any, names: Sequence[str | tuple[str, ...]] | None, what: str) -> tuple[Unit, ...]:
    """The candidates in priority order: ``names`` as given, or every mesh axis by size,
    largest first (ties in mesh order). Size-1 axes are dropped: they shard nothing."""
    sizes = mesh_axis_sizes(mesh)
    if names is None:
        order = sorted(sizes, key=lambda a: -sizes[a])  # stable: ties keep mesh order
        return tuple(Unit((a,), sizes[a]) for a in order if sizes[a] > 1)
    if isinstance(names, (str, bytes)) or not isinstance(names, Iterable):
        raise TypeError(
            f"{what}: names must be a list of mesh axis names or tuples of them, got {names!r} "
            f"(for one axis write names=[{names!r}])"
        )
    units = []
    for entry in names:
        axes = (entry,) if isinstance(entry, str) else entry
        if not isinstance(axes, tuple) or not axes or not all(isinstance(a, str) for a in axes):
            raise TypeError(
                f"{what}: each entry of names must be a mesh axis name or a non-empty tuple of "
                f"them, got {entry!r} in {names!r}"
            )
        for a in axes:
            if a not in sizes:
                raise ValueError(
                    f"{what}: names has {a!r}, which is not an axis of the mesh (axes: "
                    f"{tuple(sizes)}, sizes {tuple(sizes.values())})"
                )
        if len(set(axes)) != len(axes):
            raise ValueError(f"{what}: names entry {entry!r} repeats a mesh axis")
        kept = tuple(a for a in axes if sizes[a] > 1)
        if kept:
            units.append(Unit(kept, math.prod(sizes[a] for a in kept)))
    return tuple(units)


def _entry(units: Sequence[Unit]) -> str | tuple[str, ...] | None:
    axes = tuple(a for u in units for a in u.axes)
    if not axes:
        return None
    return axes[0] if len(axes) == 1 else axes


def spec_of_units(per_dim: Sequence[Sequence[Unit]]) -> PartitionSpec:
    """Full-rank spec, or ``P()`` when nothing is sharded (replicated is always ``P()``)."""
    entries = [_entry(units) for units in per_dim]
    if all(e is None for e in entries):
        return PartitionSpec()
    return PartitionSpec(*entries)


#### Shapes


def path_or_array(path: str) -> str:
    return path or "the array"


def shape_of(x: Any, path: str, what: str) -> tuple:
    shape = getattr(x, "shape", None)
    if shape is None or isinstance(x, type):
        raise TypeError(
            f"{what}: {path_or_array(path)} is {type(x).__name__} {x!r:.60}, not an array; pass arrays, "
            "numpy arrays or jax.ShapeDtypeStruct (anything with .shape)"
        )
    return tuple(shape)


def concrete_sizes(shape: tuple) -> tuple[int | None, ...]:
    """Sizes as ints; a symbolic size (jax.export) is None: its divisibility is unknown, so it is
    never chosen for sharding."""
    return tuple(int(d) if isinstance(d, (int, np.integer)) else None for d in shape)


def itemsize_of(x: Any, path: str, what: str) -> int:
    dtype = getattr(x, "dtype", None)
    if dtype is None:
        raise TypeError(f"{what}: {path_or_array(path)} has no dtype, so its bytes are unknown")
    return np.dtype(dtype).itemsize


#### The auto rule


@functools.lru_cache(maxsize=4096)
def _auto_assign(sizes: tuple[int | None, ...], units: tuple[Unit, ...], reverse: bool) -> PartitionSpec:
    """eFormer's rule: dims by size (descending, or ascending with ``reverse``), each takes the
    first unit not yet used whose size divides it."""
    known = {i: s for i, s in enumerate(sizes) if s is not None}
    order = sorted(known, key=lambda i: (known[i] if reverse else -known[i], i))
    used: set[str] = set()
    per_dim: list[list[Unit]] = [[] for _ in sizes]
    for i in order:
        for unit in units:
            if used.isdisjoint(unit.axes) and known[i] % unit.size == 0:
                per_dim[i].append(unit)
                used.update(unit.axes)
                break
    return spec_of_units(per_dim)


def auto_partition_spec(
    x: Any,
    mesh: Any = None,
    names: Sequence[str | tuple[str, ...]] | None = None,
    min_sharding_size: int | None = None,
    reverse: bool = False,
) -> PartitionSpec:
    """A ``PartitionSpec`` for ``x`` from its shape alone: the largest dims take the largest mesh
    axes that divide them (eFormer's rule).

    Dims are taken by size, largest first (smallest first with ``reverse=True``); each takes the
    first unused candidate whose size divides it. Candidates are the mesh axes by size, largest
    first, or ``names`` in the order given; an entry of ``names`` may be a tuple of axes used
    together on one dim. Size-1 axes are never used and no axis is used twice. An array with fewer
    elements than ``min_sharding_size`` (default: the number of devices in the mesh) is
    replicated, as is one no candidate divides: both give ``P()``.

    ``x`` is anything with ``.shape`` (``jax.Array``, ``np.ndarray``, ``jax.ShapeDtypeStruct``);
    ``mesh`` a ``Mesh`` or ``AbstractMesh``, by default the current one (``jax.set_mesh``).

    >>> import jax, jax.numpy as jnp
    >>> mesh = jax.make_mesh((4, 2), ('d', 't'))
    >>> auto_partition_spec(jnp.zeros((512, 1024)), mesh)
    P('t', 'd')
    >>> auto_partition_spec(jnp.zeros((512, 1024)), mesh, names=[('d', 't')])
    P(None, ('d', 't'))
    >>> auto_partition_spec(jnp.zeros((3,)), mesh)
    P()
    """
    what = "auto_partition_spec"
    mesh = mesh_arg(mesh, what)
    units = candidate_units(mesh, names, what)
    _check_options(min_sharding_size, reverse, what)
    return _auto_one(x, "", mesh, units, min_sharding_size, reverse, what)


def _check_options(min_sharding_size: Any, reverse: Any, what: str) -> None:
    if min_sharding_size is not None:
        if isinstance(min_sharding_size, bool) or not isinstance(min_sharding_size, (int, np.integer)):
            raise TypeError(f"{what}: min_sharding_size must be an int number of elements or None, "
                            f"got {min_sharding_size!r}")
        if min_sharding_size < 0:
            raise ValueError(f"{what}: min_sharding_size must be non-negative, got {min_sharding_size!r}")
    if not isinstance(reverse, (bool, np.bool_)):
        raise TypeError(f"{what}: reverse must be True or False, got {reverse!r}")


def _auto_one(x: Any, path: str, mesh: Mesh | AbstractMesh, units: tuple[Unit, ...],
              min_sharding_size: int | None, reverse: bool, what: str) -> PartitionSpec:
    sizes = concrete_sizes(shape_of(x, path, what))
    if min_sharding_size is None:
        min_sharding_size = int(mesh.size)
    known = [s for s in sizes if s is not None]
    if len(known) == len(sizes) and math.prod(known) < min_sharding_size:
        return PartitionSpec()
    return _auto_assign(sizes, units, bool(reverse))


def auto_partition_specs(
    tree: Any,
    mesh: Any = None,
    names: Sequence[str | tuple[str, ...]] | None = None,
    min_sharding_size: int | None = None,
    reverse: bool = False,
) -> Any:
    """``auto_partition_spec`` over every leaf of ``tree``: a tree of ``PartitionSpec`` of the same
    structure. A leaf without ``.shape`` is a ``TypeError`` naming its path.

    >>> import jax, jax.numpy as jnp
    >>> mesh = jax.make_mesh((4, 2), ('d', 't'))
    >>> auto_partition_specs({'w': jnp.zeros((64, 32)), 'b': jnp.zeros(3)}, mesh)
    {'b': P(), 'w': P('d', 't')}
    """
    what = "auto_partition_specs"
    mesh = mesh_arg(mesh, what)
    units = candidate_units(mesh, names, what)
    _check_options(min_sharding_size, reverse, what)
    with tree_guard(what, "tree", tree):
        return jax.tree_util.tree_map_with_path(
            lambda p, x: _auto_one(x, jax.tree_util.keystr(p), mesh, units, min_sharding_size, reverse, what),
            tree,
        )


#### Bytes and spec trees (for the budget, validation and conversion too)


def is_spec_leaf(s: Any) -> bool:
    return s is None or isinstance(s, (PartitionSpec, NamedSharding))


