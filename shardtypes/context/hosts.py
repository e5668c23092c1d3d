"""Meshes over hosts: device meshes for the devices present, laid out so that the slow network
joins only the axes meant to cross it.

A job on several hosts runs one JAX process per host (``jax.distributed.initialize``). Each process
sees every device (``jax.devices()``) but can only put data on its own (``jax.local_devices()``).
Devices come in granules joined by the slow network: slices on TPU, processes (hosts) elsewhere.
This module builds the mesh over them:

``default_mesh()`` arranges the devices present as hosts × local devices, so data parallelism
runs across hosts and model parallelism stays inside one; ``hybrid_mesh(ici_shape, dcn_shape,
names)`` says exactly how many ways each axis is split inside a host or slice (ICI: fast links)
and across them (DCN: the data-centre network)::

    mesh = default_mesh()                         # ('data': hosts*local, 'model': 1)
    mesh = default_mesh(model_parallelism=2)      # ('data': hosts*local/2, 'model': 2)
    mesh = hybrid_mesh((4, 2), (2, 1), ('data', 'model'))   # 2 hosts of 8 devices: (8, 2)

Both check the devices, names, shapes and axis types they are given and say what does not fit.
Which rows of a batch each process then loads on such a mesh is ``layout.data_layout``'s job.
"""

from __future__ import annotations

import collections
import math
import operator
from collections.abc import Iterable
from typing import Any, Sequence

import jax
from jax.experimental import mesh_utils
from jax.sharding import AxisType, Mesh

from ..language import IDENT

__all__ = ["default_mesh", "hybrid_mesh"]


def _granules(devices: Sequence[Any]) -> tuple[str, list[list[Any]]]:
    """The devices grouped into the units the slow network joins: slices on TPU, processes
    (hosts) elsewhere. Groups are ordered by their index; each keeps the order the devices were
    given in. (CPU devices of a multi-process job have a ``slice_index`` too, all 0, but nothing
    fast joins two processes there, so only TPU slices count.)"""
    tpu = devices[0].platform == "tpu" and hasattr(devices[0], "slice_index")
    attr = "slice_index" if tpu else "process_index"
    groups: dict[int, list[Any]] = collections.defaultdict(list)
    for d in devices:
        groups[getattr(d, attr)].append(d)
    return attr, [groups[k] for k in sorted(groups)]


def _unit(attr: str) -> str:
    return "slice" if attr == "slice_index" else "process"


def _plural(unit: str) -> str:
    return unit + ("es" if unit.endswith("s") else "s")


def _count(n: int, unit: str) -> str:
    return f"{n} {unit if n == 1 else _plural(unit)}"


def _devices(devices: Sequence[Any] | None, what: str) -> list[Any]:
    if devices is None:
        devices = jax.devices()
    if isinstance(devices, (str, bytes)) or not isinstance(devices, Iterable):
        raise TypeError(f"{what}: devices must be a sequence of JAX devices (as jax.devices()), got {devices!r:.80}")
    devices = list(devices)
    if not devices:
        raise ValueError(f"{what}: no devices")
    if not all(isinstance(d, jax.Device) for d in devices):
        bad = next(d for d in devices if not isinstance(d, jax.Device))
        raise TypeError(
            f"{what}: devices must be a sequence of JAX devices (as jax.devices()), but it holds "
            f"{type(bad).__name__} {bad!r:.60}"
        )
    if len(set(devices)) != len(devices):
        raise ValueError(f"{what}: a device appears twice in devices={devices}")
    return devices


def _names(axis_names: Any, what: str) -> tuple[str, ...]:
    if not isinstance(axis_names, (str, Iterable)) or isinstance(axis_names, bytes):
        raise TypeError(f"{what}: axis_names must be a sequence of mesh axis names, got {axis_names!r}")
    names = (axis_names,) if isinstance(axis_names, str) else tuple(axis_names)
    if not names or not all(isinstance(n, str) for n in names):
        raise ValueError(f"{what}: axis_names must be a non-empty sequence of str, got {axis_names!r}")
    bad = [n for n in names if not IDENT.match(n)]
    if bad:
        raise ValueError(
            f"{what}: axis_names {names} has {bad[0]!r}, which is not an identifier; annotations "
            "name mesh axes by identifiers (as 'data')"
        )
    if len(set(names)) != len(names):
        raise ValueError(f"{what}: axis_names {names} repeat a name")
    return names


def _axis_types(axis_types: Any, n: int, what: str) -> tuple[AxisType, ...]:
    # jax.make_mesh's default: every axis Explicit.
    if axis_types is None:
        return (AxisType.Explicit,) * n
    if isinstance(axis_types, AxisType):
        return (axis_types,) * n
    if not isinstance(axis_types, Iterable) or isinstance(axis_types, (str, bytes)) or not all(
            isinstance(t, AxisType) for t in axis_types):
        raise TypeError(
            f"{what}: axis_types must be a jax.sharding.AxisType or a tuple of them, one per axis, got {axis_types!r}"
        )
    axis_types = tuple(axis_types)
    if len(axis_types) != n:
        raise ValueError(f"{what}: {len(axis_types)} axis_types {axis_types} for {n} axes")
    return axis_types


def _shape(shape: Any, name: str, what: str) -> tuple[int, ...]:
    try:
        if isinstance(shape, (str, bytes)):
            raise TypeError
        shape = tuple(operator.index(s) for s in shape)
    except TypeError:
        raise TypeError(f"{what}: {name} must be a sequence of ints, got {shape!r}") from None
    if any(s < 1 for s in shape):
        raise ValueError(f"{what}: {name} {shape} has a size below 1")
    return shape


def _build(ici: tuple[int, ...], dcn: tuple[int, ...], names, devices, attr, axis_types, what) -> Mesh:
    array = mesh_utils.create_hybrid_device_mesh(
        ici, dcn, devices, process_is_granule=(attr == "process_index")
    )
    return Mesh(array, names, axis_types=_axis_types(axis_types, len(names), what))


def hybrid_mesh(
    ici_shape: Sequence[int],
    dcn_shape: Sequence[int],
    axis_names: Sequence[str],
    *,
    devices: Sequence[Any] | None = None,
    axis_types: Any = None,
) -> Mesh:
    """A mesh over slices or hosts: axis ``i`` has ``ici_shape[i] * dcn_shape[i]`` devices,
    ``ici_shape[i]`` ways inside one slice (TPU) or process (CPU, GPU) and ``dcn_shape[i]`` ways
    across them, the across-part major. So ``prod(dcn_shape)`` must be the number of slices or
    processes and ``prod(ici_shape)`` the devices of each.

    >>> mesh = hybrid_mesh((4, 1), (2, 1), ('data', 'model'))   # doctest: +SKIP
    >>> mesh.shape                                              # 2 processes of 4 devices
    OrderedDict([('data', 8), ('model', 1)])

    Built with ``jax.experimental.mesh_utils.create_hybrid_device_mesh`` (processes are the
    granules on devices without ``slice_index``). ``axis_types`` defaults to Explicit on every
    axis, as ``jax.make_mesh``; pass one ``AxisType`` or a tuple.
    """
    what = "hybrid_mesh"
    names = _names(axis_names, what)
    ici = _shape(ici_shape, "ici_shape", what)
    dcn = _shape(dcn_shape, "dcn_shape", what)
    if not len(ici) == len(dcn) == len(names):
        raise ValueError(
            f"{what}: ici_shape {ici}, dcn_shape {dcn} and axis_names {names} must have one "
            "entry per mesh axis"
        )
    devices = _devices(devices, what)
    attr, granules = _granules(devices)
    unit = _unit(attr)
    counts = sorted({len(g) for g in granules})
    if math.prod(dcn) != len(granules):
        raise ValueError(
            f"{what}: dcn_shape {dcn} splits the mesh over {_count(math.prod(dcn), unit)}, but the "
            f"{len(devices)} devices come from {_count(len(granules), unit)}; the product of "
            f"dcn_shape must be {len(granules)}"
        )
    if len(counts) > 1:
        raise ValueError(
            f"{what}: the {_plural(unit)} have different numbers of devices ({_per_granule(granules, attr)}); "
            "a hybrid mesh needs the same number in each"
        )
    if math.prod(ici) != counts[0]:
        raise ValueError(
            f"{what}: ici_shape {ici} needs {math.prod(ici)} devices per {unit}, but each of the "
            f"{_count(len(granules), unit)} has {counts[0]}; the product of ici_shape must be {counts[0]}"
        )
    return _build(ici, dcn, names, devices, attr, axis_types, what)


def _per_granule(granules: list[list[Any]], attr: str) -> str:
    return ", ".join(f"{_unit(attr)} {getattr(g[0], attr)}: {len(g)}" for g in granules)


def default_mesh(
    axis_names: Sequence[str] = ("data", "model"),
    *,
    model_parallelism: int = 1,
    devices: Sequence[Any] | None = None,
    axis_types: Any = None,
) -> Mesh:
    """A mesh for the devices present (``jax.devices()`` or ``devices``): hosts × local devices.

    With ``P`` processes of ``L`` devices each and ``m = model_parallelism``:

    - two names (default ``('data', 'model')``): ``(P*L/m, m)``. The first axis runs over the
      processes (major) and then the ``L/m`` data-parallel groups of each, so a batch sharded over
      it gives each process one contiguous block of rows; the model axis stays inside a host.
    - three names, e.g. ``('replica', 'data', 'model')``: ``(P, L/m, m)``, processes on the first.
    - one name: ``(P*L,)`` (``model_parallelism`` must be 1).

    ``m`` must divide ``L``, or be a multiple of ``L`` that divides ``P*L``; then the model axis
    spans ``m/L`` hosts (T5X's GPU mesh). On TPU, slices take the place of processes. Axis types
    default to Explicit, as ``jax.make_mesh``.

    >>> default_mesh().shape          # 1 process of 8 devices   # doctest: +SKIP
    OrderedDict([('data', 8), ('model', 1)])
    """
    what = "default_mesh"
    names = _names(axis_names, what)
    if len(names) > 3:
        raise ValueError(
            f"{what}: axis_names {names} has {len(names)} axes; default_mesh knows 1 to 3 "
            "(hosts, data, model). Use hybrid_mesh(ici_shape, dcn_shape, axis_names) for more"
        )
    if not isinstance(model_parallelism, int) or isinstance(model_parallelism, bool):
        raise TypeError(f"{what}: model_parallelism must be a positive int, got {model_parallelism!r}")
    if model_parallelism < 1:
        raise ValueError(f"{what}: model_parallelism must be a positive int, got {model_parallelism!r}")
    devices = _devices(devices, what)
    attr, granules = _granules(devices)
    unit = _unit(attr)
    counts = sorted({len(g) for g in granules})
    if len(counts) > 1:
        raise ValueError(
            f"{what}: the {_plural(unit)} have different numbers of devices ({_per_granule(granules, attr)}); "
            "pass devices= with the same number from each, or build the mesh with jax.sharding.Mesh"
        )
    hosts, local, m = len(granules), counts[0], model_parallelism
    total = hosts * local
    if len(names) == 1 and m != 1:
        raise ValueError(
            f"{what}: one axis name {names} leaves no axis for model_parallelism={m}; "
            "pass two names, e.g. ('data', 'model')"
        )
    if local % m == 0:  # the model axis inside a host
        ici, dcn = (local // m, m), (hosts, 1)
    elif m % local == 0 and hosts % (m // local) == 0:  # the model axis spans m/L hosts
        ici, dcn = (1, local), (hosts // (m // local), m // local)
    else:
        raise ValueError(
            f"{what}: model_parallelism={m} must divide the {local} devices of each {unit}, or be "
            f"a multiple of {local} that divides the {total} devices ({_count(hosts, unit)} x {local})"
        )
    ici_shape: tuple[int, ...] = ici
    dcn_shape: tuple[int, ...] = dcn
    if len(names) == 1:
        ici_shape, dcn_shape = (local,), (hosts,)
    elif len(names) == 3:
        ici_shape, dcn_shape = (1, *ici), (dcn[0], 1, dcn[1])
    return _build(ici_shape, dcn_shape, names, devices, attr, axis_types, what)
