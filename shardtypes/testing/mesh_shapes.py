"""Which meshes ``assert_same_on_every_mesh`` tries: the axes, the sizes held (``keep``), the
covering set of shapes tried by default, the shapes a user gives, and the concrete meshes over the
first devices of the process.

A mesh shape is a dict ``{axis: size}`` over every axis of the check, in the check's axis order.
The reference is the shape with every axis at 1 except the held ones (at their size).
"""

from __future__ import annotations

import math
from typing import Any, Iterable, Mapping, Sequence

import jax
import numpy as np
from jax.sharding import AxisType, Mesh

__all__ = ["MeshShape", "check_axes", "check_keep", "check_meshes", "covering_meshes", "fmt_mesh",
           "axis_types_arg", "concrete_mesh", "current_mesh_shape"]

MeshShape = dict  # {axis name: size}, every axis of the check, in its order

_KINDS = {"explicit": AxisType.Explicit, "auto": AxisType.Auto}


def fmt_mesh(shape: Mapping[str, int]) -> str:
    """``{d: 2, t: 4}``: how a mesh shape reads in messages and reports."""
    return "{" + ", ".join(f"{a}: {n}" for a, n in shape.items()) + "}"


def current_mesh_shape() -> dict[str, int] | None:
    """The shape of the mesh set with ``jax.set_mesh`` (None when there is none)."""
    mesh = jax.sharding.get_abstract_mesh()
    if mesh is None or not getattr(mesh, "axis_names", ()):
        return None
    return dict(mesh.shape)


def check_axes(axes: Any, named: Sequence[str], current: Mapping[str, int] | None, what: str) -> tuple[str, ...]:
    """The mesh axes of the check: ``axes`` as given (validated), or the axes of the current mesh,
    or those the annotations name (``named``). A given axis that no annotation names and the
    current mesh does not have is an error, and so is an axis the annotations name that is left out."""
    if axes is None:
        chosen = list(current) if current else []
        chosen += [a for a in named if a not in chosen]
        if not chosen:
            raise ValueError(f"{what}: the annotations name no mesh axis and no mesh is set (jax.set_mesh): "
                             "give the axes to vary, axes=('d', 't')")
        return tuple(chosen)
    if isinstance(axes, str):
        axes = (axes,)
    if not isinstance(axes, Iterable):
        raise TypeError(f"{what}: axes must be a sequence of mesh axis names, as ('d', 't'), got {axes!r}")
    axes = tuple(axes)
    bad = [a for a in axes if not isinstance(a, str) or not a.isidentifier()]
    if bad:
        raise TypeError(f"{what}: axes must hold mesh axis names (identifiers), got {bad[0]!r}")
    if len(set(axes)) != len(axes):
        raise ValueError(f"{what}: axes names an axis twice: {axes!r}")
    if not axes:
        raise ValueError(f"{what}: axes is empty; give the mesh axes to vary, as ('d', 't')")
    known = set(named) | set(current or ())
    unknown = [a for a in axes if a not in known]
    if unknown:
        raise ValueError(f"{what}: axes names {unknown[0]!r}, which no annotation of the function names"
                         + (f" and the current mesh does not have (its axes: {list(current)})" if current else "")
                         + f" (the annotations name {list(named) or 'no mesh axis'}): leave it out of axes, or set a "
                         "mesh that has it (jax.set_mesh)")
    missing = [a for a in named if a not in axes]
    if missing:
        raise ValueError(f"{what}: the annotations name mesh axis {missing[0]!r}, which axes={axes!r} leaves "
                         "out; every mesh tried must have it")
    return axes


def _size(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{where} must be an int mesh axis size, got {value!r}")
    if value < 1:
        raise ValueError(f"{where} is {value}; a mesh axis size is at least 1")
    return int(value)


def check_keep(keep: Any, axes: Sequence[str], devices: int, what: str) -> dict[str, int]:
    """``keep`` validated: axes of the check held at a size that divides the device count."""
    if keep is None:
        return {}
    if not isinstance(keep, Mapping):
        raise TypeError(f"{what}: keep must be a mapping of mesh axis to the size it is held at, as "
                        f"{{'stage': 4}}, got {keep!r}")
    out = {}
    for axis, size in keep.items():
        if axis not in axes:
            raise ValueError(f"{what}: keep names {axis!r}, which is not an axis of the check (axes: {list(axes)})")
        size = _size(size, f"{what}: keep[{axis!r}]")
        if devices % size:
            raise ValueError(f"{what}: keep[{axis!r}] is {size}, which does not divide the {devices} devices "
                             f"(jax.device_count())")
        out[axis] = size
    if math.prod(out.values()) > devices:
        raise ValueError(f"{what}: keep={out} needs {math.prod(out.values())} devices, and there are {devices}")
    return out


def check_meshes(meshes: Any, axes: Sequence[str], keep: Mapping[str, int], devices: int,
                 what: str) -> list[MeshShape]:
    """``meshes`` validated: mappings of axis to size over the check's axes (an axis left out is
    1, a held axis is at its held size), each within the devices present."""
    if isinstance(meshes, Mapping) or not isinstance(meshes, Iterable) or isinstance(meshes, str):
        raise TypeError(f"{what}: meshes must be a list of mesh shapes, as [{{'d': 2, 't': 4}}], got {meshes!r}")
    out: list[MeshShape] = []
    for i, shape in enumerate(meshes):
        where = f"{what}: meshes[{i}]"
        if not isinstance(shape, Mapping):
            raise TypeError(f"{where} must be a mapping of mesh axis to size, as {{'d': 2, 't': 4}}, got {shape!r}")
        for axis in shape:
            if axis not in axes:
                raise ValueError(f"{where} names {axis!r}, which is not an axis of the check (axes: {list(axes)})")
        full = {a: _size(shape[a], f"{where}[{a!r}]") if a in shape else keep.get(a, 1) for a in axes}
        for axis, size in keep.items():
            if full[axis] != size:
                raise ValueError(f"{where} has {axis}={full[axis]}, but keep holds {axis!r} at {size}")
        if math.prod(full.values()) > devices:
            raise ValueError(f"{where} is {fmt_mesh(full)}, {math.prod(full.values())} devices, and there are "
                             f"{devices} (jax.device_count()); for 8 CPU devices call "
                             "shardtypes.testing.use_cpu_devices(8) before JAX starts")
        out.append(full)
    return out


def covering_meshes(axes: Sequence[str], keep: Mapping[str, int], devices: int,
                    current: Mapping[str, int] | None) -> list[MeshShape]:
    """The default shapes, reference first: every axis at 1 (held axes at their size); each free
    axis alone at 2 and at its largest (one free axis: at every size that divides the devices);
    the current mesh; each pair of free axes at (2, largest/2)
    both ways; every free axis at 2. Only shapes within ``devices``, each once, smallest first."""
    reference = {a: keep.get(a, 1) for a in axes}
    room = devices // math.prod(reference.values())
    free = [a for a in axes if a not in keep]
    shapes: list[MeshShape] = [reference]

    def add(**sizes: int) -> None:
        shape = {**reference, **sizes}
        if math.prod(shape.values()) <= devices and shape not in shapes:
            shapes.append(shape)

    for axis in free:
        if room >= 2:
            add(**{axis: 2})
            add(**{axis: room})
    if len(free) == 1:  # one axis: every size that divides the devices left
        for size in range(3, room):
            if room % size == 0:
                add(**{free[0]: size})
    if current and set(current) == set(axes):
        held = all(current[a] == n for a, n in keep.items())
        if held:
            add(**{a: current[a] for a in free})
    for i, a in enumerate(free):
        for b in free[i + 1:]:
            if room >= 4:
                add(**{a: 2, b: room // 2})
                add(**{a: room // 2, b: 2})
    if len(free) > 2 and 2 ** len(free) <= room:
        add(**{a: 2 for a in free})
    return shapes[:1] + sorted(shapes[1:], key=lambda s: math.prod(s.values()))


def axis_types_arg(axis_types: Any, what: str) -> Any:
    """``'explicit'``, ``'auto'`` or an ``AxisType``; None: the current mesh's first axis type, else Explicit."""
    if axis_types is None:
        mesh = jax.sharding.get_abstract_mesh()
        types = getattr(mesh, "axis_types", ()) if mesh is not None else ()
        return types[0] if types else AxisType.Explicit
    if isinstance(axis_types, AxisType):
        if axis_types not in (AxisType.Explicit, AxisType.Auto):
            raise ValueError(f"{what}: axis_types must be Explicit or Auto (all axes are varied), got {axis_types}")
        return axis_types
    if isinstance(axis_types, str) and axis_types.lower() in _KINDS:
        return _KINDS[axis_types.lower()]
    raise TypeError(f"{what}: axis_types must be 'explicit', 'auto' or a jax.sharding.AxisType, got {axis_types!r}")


def concrete_mesh(shape: Mapping[str, int], axis_type: Any) -> Mesh:
    """A mesh of ``shape`` over the first devices of the process."""
    n = math.prod(shape.values())
    devices = np.array(jax.devices()[:n]).reshape(tuple(shape.values()))
    return Mesh(devices, tuple(shape), axis_types=(axis_type,) * len(shape))
