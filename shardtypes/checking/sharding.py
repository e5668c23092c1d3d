"""A concrete sharding against an annotation's layout: the sharding of an eager ``jax.Array`` or
of a ``jax.ShapeDtypeStruct`` (a ``NamedSharding``, or one that names no mesh axes), compared
after normalising (padded to rank, size-1 mesh axes dropped). The annotation's layout is its
mesh axes as written, or what the active axis rules make of them.
"""

from __future__ import annotations

import functools
from typing import Any

import jax
from jax.sharding import NamedSharding

from ..context import AxisRulesError, layout as rules_layout
from ..language import ShapeSpec, is_unconstrained
from ..model import Layout, Mismatch, adopt, fmt_layout, layout_problem, missing_axes_problem, normalise


def expected_layout(spec: ShapeSpec, ndim: int, mesh_sizes: dict | None = None,
                     shape: tuple | None = None, active: Any = False) -> Layout:
    """The annotation's mesh axes per dim: as written, or through the active axis rules (whose
    errors, such as a logical name with no rule, are mismatches of this value)."""
    try:
        return rules_layout(spec, ndim, mesh_sizes, shape, active=active)
    except AxisRulesError as e:
        raise Mismatch(str(e)) from None


def drop_size_one(layout: Layout, axis_sizes: dict) -> Layout:
    return tuple(axes if is_unconstrained(axes) else tuple(a for a in axes if axis_sizes.get(a, 2) != 1)
                 for axes in layout)


def missing_axes(layout: Layout, axis_names) -> list[str]:
    return [a for axes in layout for a in axes if a not in axis_names]


def named_sharding_problem(sharding: NamedSharding, spec: ShapeSpec, ndim: int,
                            active: Any = None, shape: tuple | None = None) -> str | None:
    """Compares a concrete NamedSharding with the annotation (through ``active`` axis rules,
    with ``shape`` for their divisibility checks)."""
    try:
        return _named_sharding_problem_cached(sharding, spec, ndim, active,
                                              shape if active is not None else None)
    except TypeError:  # unhashable symbolic sizes
        return _named_sharding_problem_cached.__wrapped__(sharding, spec, ndim, active, shape)


@functools.lru_cache(maxsize=2048)
def _named_sharding_problem_cached(sharding, spec, ndim, active, shape) -> str | None:
    mesh = sharding.mesh
    sizes = dict(mesh.shape)
    try:
        expected = expected_layout(spec, ndim, sizes, shape, active)
    except Mismatch as m:
        return m.problem
    missing = missing_axes(expected, mesh.axis_names)
    if missing:
        return missing_axes_problem(missing, mesh.axis_names, "the array's mesh")
    actual = normalise(sharding.spec, ndim, sizes)
    expected = drop_size_one(expected, sizes)
    if actual != adopt(actual, expected):
        return layout_problem(actual, expected)
    return None


def unnamed_sharding_problem(sharding: Any, spec: ShapeSpec, ndim: int, active: Any = None,
                              shape: tuple | None = None, expected: Layout | None = None) -> str | None:
    """A sharding that names no mesh axes (SingleDeviceSharding, GSPMDSharding, ...)."""
    sizes = _current_axis_sizes()
    if expected is None:
        try:
            expected = expected_layout(spec, ndim, sizes or None, shape, active)
        except Mismatch as m:
            return m.problem
    if sizes:
        expected = drop_size_one(expected, sizes)
    wanted = [a for axes in expected for a in axes]
    if not wanted and sharding.is_fully_replicated:
        return None
    kind = type(sharding).__name__
    if wanted:
        return (
            f"the array has a {kind} (not sharded over any named mesh axis) but the annotation "
            f"shards it as {fmt_layout(expected)}; lay it out with "
            f"jax.device_put(x, NamedSharding(mesh, {fmt_layout(expected)}))"
        )
    return (
        f"the array has a {kind} that is not fully replicated, so its layout cannot be compared "
        f"with the annotation's {fmt_layout(expected)}; use a NamedSharding"
    )


def _current_axis_sizes() -> dict:
    mesh = jax.sharding.get_abstract_mesh()
    return {} if mesh.empty else dict(mesh.shape)
