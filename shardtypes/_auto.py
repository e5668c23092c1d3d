"""Automatic specs: PartitionSpecs for arrays that carry no annotation, checked, budgeted and
carried from one mesh to another.

Annotations are the source of truth for a model's own arrays, but checkpoints, optimizer states
and third-party trees arrive without them. For those, this module derives specs from shapes
alone, following eFormer's rule: the largest dims take the largest mesh axes that divide them.

>>> import jax, jax.numpy as jnp
>>> mesh = jax.make_mesh((4, 2), ('d', 't'))
>>> auto_partition_spec(jnp.zeros((1024, 512)), mesh)
P('d', 't')

What eFormer's users met silently is loud here:

- ``partition_specs_for_budget`` really checks the per-device byte budget, and names every leaf
  that cannot meet it, with the best it could do;
- ``validate_shardings`` returns a ``ShardingProblem`` for every dim its axes do not divide, axis
  the mesh lacks, axis used twice, spec longer than the array, and large array left replicated
  although an axis could split it;
- ``convert_specs`` carries a whole spec tree from one mesh to another, keeping each leaf's
  parallelism.

A mesh axis of size 1 is never chosen (it shards nothing), and no axis is used twice in one spec.
Every dim a result shards is divisible by the product of its axes, so per-device sizes are exact.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import math
from typing import Any, Iterable, Sequence

import jax
import numpy as np
from jax.sharding import AbstractMesh, Mesh, NamedSharding, PartitionSpec

from ._shard import tree_guard
from ._specs import mesh_arg

__all__ = [
    "auto_partition_spec",
    "auto_partition_specs",
    "partition_specs_for_budget",
    "validate_shardings",
    "ShardingProblem",
    "convert_specs",
]

# A leaf whose per-device bytes exceed this while a mesh axis could still split it is reported by
# validate_shardings as 'large_replicated'.
LARGE_REPLICATED_BYTES = 64 * 2**20

CONVERT_STRATEGIES = ("preserve_balance", "same_axes")


#### Units: what may shard one dim


@dataclasses.dataclass(frozen=True)
class _Unit:
    """One candidate for a dim: a mesh axis, or several used together (``names=[('d', 't')]``)."""

    axes: tuple[str, ...]
    size: int


def _axis_sizes(mesh: Any) -> dict[str, int]:
    return {name: int(size) for name, size in dict(mesh.shape).items()}


def _units(mesh: Any, names: Sequence[str | tuple[str, ...]] | None, what: str) -> tuple[_Unit, ...]:
    """The candidates in priority order: ``names`` as given, or every mesh axis by size,
    largest first (ties in mesh order). Size-1 axes are dropped: they shard nothing."""
    sizes = _axis_sizes(mesh)
    if names is None:
        order = sorted(sizes, key=lambda a: -sizes[a])  # stable: ties keep mesh order
        return tuple(_Unit((a,), sizes[a]) for a in order if sizes[a] > 1)
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
            units.append(_Unit(kept, math.prod(sizes[a] for a in kept)))
    return tuple(units)


def _entry(units: Sequence[_Unit]) -> str | tuple[str, ...] | None:
    axes = tuple(a for u in units for a in u.axes)
    if not axes:
        return None
    return axes[0] if len(axes) == 1 else axes


def _spec(per_dim: Sequence[Sequence[_Unit]]) -> PartitionSpec:
    """Full-rank spec, or ``P()`` when nothing is sharded (replicated is always ``P()``)."""
    entries = [_entry(units) for units in per_dim]
    if all(e is None for e in entries):
        return PartitionSpec()
    return PartitionSpec(*entries)


#### Shapes


def _where(path: str) -> str:
    return path or "the array"


def _shape_of(x: Any, path: str, what: str) -> tuple:
    shape = getattr(x, "shape", None)
    if shape is None or isinstance(x, type):
        raise TypeError(
            f"{what}: {_where(path)} is {type(x).__name__} {x!r:.60}, not an array; pass arrays, "
            "numpy arrays or jax.ShapeDtypeStruct (anything with .shape)"
        )
    return tuple(shape)


def _concrete(shape: tuple) -> tuple[int | None, ...]:
    """Sizes as ints; a symbolic size (jax.export) is None: its divisibility is unknown, so it is
    never chosen for sharding."""
    return tuple(int(d) if isinstance(d, (int, np.integer)) else None for d in shape)


def _itemsize(x: Any, path: str, what: str) -> int:
    dtype = getattr(x, "dtype", None)
    if dtype is None:
        raise TypeError(f"{what}: {_where(path)} has no dtype, so its bytes are unknown")
    return np.dtype(dtype).itemsize


#### The auto rule


@functools.lru_cache(maxsize=4096)
def _auto_assign(sizes: tuple[int | None, ...], units: tuple[_Unit, ...], reverse: bool) -> PartitionSpec:
    """eFormer's rule: dims by size (descending, or ascending with ``reverse``), each takes the
    first unit not yet used whose size divides it."""
    known = {i: s for i, s in enumerate(sizes) if s is not None}
    order = sorted(known, key=lambda i: (known[i] if reverse else -known[i], i))
    used: set[str] = set()
    per_dim: list[list[_Unit]] = [[] for _ in sizes]
    for i in order:
        for unit in units:
            if used.isdisjoint(unit.axes) and known[i] % unit.size == 0:
                per_dim[i].append(unit)
                used.update(unit.axes)
                break
    return _spec(per_dim)


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
    units = _units(mesh, names, what)
    _check_options(min_sharding_size, reverse, what)
    return _auto_one(x, "", mesh, units, min_sharding_size, reverse, what)


def _check_options(min_sharding_size: Any, reverse: Any, what: str) -> None:
    if min_sharding_size is not None:
        if isinstance(min_sharding_size, bool) or not isinstance(min_sharding_size, (int, np.integer)):
            raise TypeError(f"{what}: min_sharding_size must be an int number of elements or None, got {min_sharding_size!r}")
        if min_sharding_size < 0:
            raise ValueError(f"{what}: min_sharding_size must be non-negative, got {min_sharding_size!r}")
    if not isinstance(reverse, (bool, np.bool_)):
        raise TypeError(f"{what}: reverse must be True or False, got {reverse!r}")


def _threshold(value: Any, what: str) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer)):
        raise TypeError(f"{what}: large_replicated_bytes must be a number of bytes, got {value!r}")
    if not value >= 0:
        raise ValueError(f"{what}: large_replicated_bytes must be non-negative, got {value!r}")


def _auto_one(x: Any, path: str, mesh: Mesh | AbstractMesh, units: tuple[_Unit, ...],
              min_sharding_size: int | None, reverse: bool, what: str) -> PartitionSpec:
    sizes = _concrete(_shape_of(x, path, what))
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
    units = _units(mesh, names, what)
    _check_options(min_sharding_size, reverse, what)
    with tree_guard(what, "tree", tree):
        return jax.tree_util.tree_map_with_path(
            lambda p, x: _auto_one(x, jax.tree_util.keystr(p), mesh, units, min_sharding_size, reverse, what),
            tree,
        )


#### Least sharding: the fewest devices per array that reach a parallelism target


def _place(sizes: tuple[int | None, ...], chosen: Sequence[_Unit]) -> list[list[_Unit]] | None:
    """Puts every unit of ``chosen`` on a dim that it divides (several may share one dim), or
    None if no placement exists. Units go, in priority order, to the dim with the largest
    remaining local size first (ties: the dim with fewer units); backtracking makes the search
    exhaustive."""
    rest = {i: s for i, s in enumerate(sizes) if s is not None}  # dims of known size
    per_dim: list[list[_Unit]] = [[] for _ in sizes]

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
    sizes: tuple[int | None, ...], units: tuple[_Unit, ...], needed: int
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
            return _spec(per_dim), product, True
    for product, combo in sorted(subsets, key=lambda pc: (-pc[0], pc[1])):
        per_dim = _place(sizes, [units[k] for k in combo])
        if per_dim is not None:
            return _spec(per_dim), product, False
    return PartitionSpec(), 1, False


def _fmt_bytes(n: float) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:.3g} {unit} ({int(n)} bytes)"
    return f"{int(n)} bytes"


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
    units = _units(mesh, names, what)
    budget = max_bytes_per_device
    failures: list[str] = []

    def leaf(p, x) -> PartitionSpec:
        path = jax.tree_util.keystr(p)
        shape = _shape_of(x, path, what)
        sizes = _concrete(shape)
        itemsize = _itemsize(x, path, what)
        known = [s for s in sizes if s is not None]
        if len(known) != len(sizes):
            raise ValueError(f"{what}: {_where(path)} has symbolic shape {shape}, so its bytes are unknown")
        total = math.prod(known) * itemsize
        if total <= budget:
            return PartitionSpec()
        needed = -(-total // int(budget)) if float(budget).is_integer() else math.ceil(total / budget)
        spec, parallelism, reached = _least_sharding(sizes, units, int(needed))
        if not reached:
            failures.append(
                f"  {_where(path)}: shape {shape}, dtype {np.dtype(x.dtype).name}, "
                f"{_fmt_bytes(total)} in all; at best {_fmt_bytes(total // parallelism)} per device "
                f"with {spec} over {parallelism} device{'' if parallelism == 1 else 's'}"
            )
        return spec

    with tree_guard(what, "tree", tree):
        specs = jax.tree_util.tree_map_with_path(leaf, tree)
    if failures:
        axes = {u.axes[0] if len(u.axes) == 1 else u.axes: u.size for u in units}
        raise ValueError(
            f"{what}: {len(failures)} {'leaf' if len(failures) == 1 else 'leaves'} cannot fit in {_fmt_bytes(budget)} per device "
            f"on this mesh (usable axes and sizes: {axes}):\n" + "\n".join(failures) + "\n"
            "Raise the budget, use a larger mesh, or pad the dims so that more axes divide them."
        )
    return specs


#### Validation


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


def _is_spec_leaf(s: Any) -> bool:
    return s is None or isinstance(s, (PartitionSpec, NamedSharding))


def _pair_leaves(specs: Any, tree: Any, what: str) -> list[tuple[str, Any, Any]]:
    """(path, spec, array) for every array leaf of ``tree``; ``specs`` may be a prefix of it, as
    with ``jax.tree.map``. A None spec means replicated."""
    out: list[tuple[str, Any, Any]] = []

    def pair(p, spec, subtree):
        for q, x in jax.tree_util.tree_flatten_with_path(subtree)[0]:
            out.append((jax.tree_util.keystr(tuple(p) + tuple(q)), spec, x))

    try:
        jax.tree_util.tree_map_with_path(pair, specs, tree, is_leaf=_is_spec_leaf)
    except ValueError as e:
        raise ValueError(
            f"{what}: the specs tree does not match the array tree (it must have the same "
            f"structure, or be a prefix of it): {e}"
        ) from None
    bad = [
        (jax.tree_util.keystr(p), s)
        for p, s in jax.tree_util.tree_flatten_with_path(specs, is_leaf=_is_spec_leaf)[0]
        if not _is_spec_leaf(s)
    ]
    if bad:
        path, s = bad[0]
        raise TypeError(f"{what}: the spec at {_where(path)} is {s!r}, not a PartitionSpec")
    return out


def _entry_axes(entry: Any) -> tuple[str, ...]:
    if entry is None or entry is PartitionSpec.UNCONSTRAINED:
        return ()
    if isinstance(entry, str):
        return (entry,)
    return tuple(entry)


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
    shape = _shape_of(x, path, what)
    sizes = _concrete(shape)
    axis_sizes = _axis_sizes(mesh)
    where = f"{_where(path)} (shape {shape}, spec {spec})"
    found: list[ShardingProblem] = []

    def add(kind: str, message: str) -> None:
        found.append(ShardingProblem(path, kind, message))

    if len(spec) > len(shape):
        add("rank", f"{where}: the spec has {len(spec)} entries but the array has only {len(shape)} dims.")
    seen: dict[str, int] = {}
    parts = [1] * len(shape)
    for i, entry in enumerate(spec):
        axes = _entry_axes(entry)
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
        total = math.prod(axis_sizes[a] for a in known)
        parts[i] = total
        size = sizes[i]
        if known and size is not None and size % total != 0:
            add(
                "indivisible",
                f"{where}: dim {i} has size {size}, which mesh axes {known} of total size "
                f"{total} do not divide.",
            )
    dtype = getattr(x, "dtype", None)
    concrete = [s for s in sizes if s is not None]
    if dtype is not None and len(concrete) == len(sizes):
        local = math.prod(-(-s // p) for s, p in zip(concrete, parts))
        per_device = local * np.dtype(dtype).itemsize
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
                    f"{where}: holds {_fmt_bytes(per_device)} per device, over the "
                    f"{_fmt_bytes(threshold)} threshold, while mesh axes {tuple(free)} are "
                    f"unused; e.g. dim {i} (size {concrete[i]}) could also be sharded over {a!r}.",
                )
    return found


#### Converting between meshes


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
            raise TypeError(f"{what}: {arg} must be a Mesh or an AbstractMesh, got {type(value).__name__} {value!r:.60}")
    old_sizes = _axis_sizes(old_mesh)
    new_sizes = _axis_sizes(new_mesh)
    units = _units(new_mesh, None, what)

    def leaf(p, spec, x):
        path = jax.tree_util.keystr(p)
        if isinstance(spec, NamedSharding):
            spec = spec.spec
        if spec is None:
            spec = PartitionSpec()
        if not isinstance(spec, PartitionSpec):
            raise TypeError(f"{what}: the spec at {_where(path)} is {spec!r}, not a PartitionSpec")
        inner = jax.tree_util.tree_leaves(x)
        if len(inner) != 1 or inner[0] is not x:
            raise ValueError(
                f"{what}: the spec at {_where(path)} ({spec}) stands for {len(inner)} arrays in "
                "shapes; give one spec per array"
            )
        shape = _shape_of(x, path, what)
        sizes = _concrete(shape)
        axes = [a for e in spec for a in _entry_axes(e)]
        missing = [a for a in axes if a not in old_sizes]
        if missing:
            raise ValueError(
                f"{what}: {_where(path)} (shape {shape}, spec {spec}) uses mesh axis "
                f"{missing[0]!r}, which old_mesh does not have (axes: {tuple(old_sizes)})"
            )
        if len(set(axes)) != len(axes):
            raise ValueError(f"{what}: {_where(path)} (shape {shape}, spec {spec}) uses a mesh axis twice")
        if strategy == "same_axes" and _transfers(spec, sizes, new_sizes):
            return spec
        factor = math.prod(old_sizes[a] for a in axes)
        return _least_sharding(sizes, units, factor)[0]

    try:
        with tree_guard(what, "specs or shapes", specs, shapes):
            return jax.tree_util.tree_map_with_path(leaf, specs, shapes, is_leaf=_is_spec_leaf)
    except ValueError as e:
        if str(e).startswith(what):
            raise
        raise ValueError(
            f"{what}: the specs tree does not match the shapes tree (same structure needed): {e}"
        ) from None


def _transfers(spec: PartitionSpec, sizes: tuple[int | None, ...], new_sizes: dict[str, int]) -> bool:
    if len(spec) > len(sizes):
        return False
    for entry, size in zip(spec, sizes):
        axes = _entry_axes(entry)
        if not axes:
            continue
        if any(a not in new_sizes for a in axes) or size is None:
            return False
        if size % math.prod(new_sizes[a] for a in axes) != 0:
            return False
    return True
