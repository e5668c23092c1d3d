"""Data layout: which part of a global array each process of a multi-host job loads, and the
global array built from those parts.

A job on several hosts runs one JAX process per host; each can only put data on its own devices
(``jax.local_devices()``), so an input pipeline reads only the part of the global batch that lands
on them. ``data_layout`` derives that part from the annotation the model is written against
(T5X's ``DataLayout`` and ``LocalChunker``, but from the real device-to-index map of the
sharding, so it is right for any mesh), and ``make_global_array`` assembles the global array from
each process's part::

    layout = data_layout(u32[b'batch/data len'], (global_batch, seq_len), mesh)
    rows = dataset.shard(layout.num_shards, layout.shard_id)   # or read layout.batch_slice
    batch = make_global_array(local_rows, u32[b'batch/data len'], (global_batch, seq_len), mesh)

``batch`` is one ``jax.Array`` of the global shape, laid out as annotated, which a
``@typechecked`` function with the same annotation accepts. A layout no process can load as one
block (a mesh whose processes hold scattered rows) is an error that says how to order the mesh
axes; ``default_mesh`` and ``hybrid_mesh`` (``context.hosts``) build meshes that always fit.
"""

from __future__ import annotations

import collections
import dataclasses
import math
import operator
from typing import Any, Callable, Sequence

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding

from ..checking import check
from ..context import Scope, forced_checks
from ..language import entry_axes
from ..model import annotation_class, number, plan_of
from .specs import mesh_arg, shardings as derive_shardings

__all__ = ["DataLayout", "data_layout", "make_global_array"]


@dataclasses.dataclass(frozen=True)
class DataLayout:
    """What this process loads of a global array laid out as an annotation says.

    ``batch_slice``: the rows of the global batch (dim 0) this process loads.
    ``shard_id`` / ``num_shards``: the distinct batch slices across all processes, numbered in
    row order; this process loads shard ``shard_id`` (for ``dataset.shard(num_shards, shard_id)``
    when the slices are of equal size, as on the meshes of this module).
    ``replica_id`` / ``num_replicas``: the processes that load the same batch slice (a batch not
    sharded over the axes that span processes is replicated across them), numbered by process
    index; ``replica_id == 0`` is the one to write, for example, a checkpoint of that slice.
    ``local_index``: the block of the global array this process holds, one slice per dim (other
    dims too are split when their mesh axes span processes); ``local_shape`` its shape, the shape
    of the data ``make_global_array`` takes. ``sharding``: the annotation's ``NamedSharding``.
    """

    sharding: NamedSharding
    global_shape: tuple[int, ...]
    process_index: int
    batch_slice: slice
    shard_id: int
    num_shards: int
    replica_id: int
    num_replicas: int
    local_index: tuple[slice, ...]
    local_shape: tuple[int, ...]

    @property
    def is_first_in_replica_set(self) -> bool:
        """Whether this process is replica 0 of its batch slice (T5X's name)."""
        return self.replica_id == 0


def data_layout(annotation: Any, global_shape: Sequence[int], mesh: Mesh | None = None) -> DataLayout:
    """The layout for this process of a global array of ``global_shape`` annotated ``annotation``
    (dim 0 is the batch), over ``mesh`` or the current mesh.

    >>> layout = data_layout(u32[b'batch/data len'], (16, 128), default_mesh())  # doctest: +SKIP
    >>> layout.batch_slice, layout.shard_id, layout.num_shards                # process 1 of 2
    (slice(8, 16, None), 1, 2)

    Derived from the sharding's device-to-index map, so any mesh works, provided each process's
    devices hold one contiguous block of the array: a ValueError explains when they do not.
    """
    what = "data_layout"
    _, sharding, global_shape = _sharding(annotation, global_shape, mesh, what)
    return _layout(
        sharding, global_shape, lambda d: d.process_index, jax.process_index(), _text(annotation)
    )


def _text(annotation: Any) -> str:
    array = annotation_class(annotation)
    if array is not None:
        return plan_of(array).text
    return repr(annotation)


def _sharding(annotation: Any, global_shape: Any, mesh: Any, what: str
              ) -> tuple[type[number], NamedSharding, tuple[int, ...]]:
    """The annotation's NamedSharding on a concrete mesh, with ``global_shape`` checked against
    the annotation (rank, sizes, divisibility)."""
    array = annotation_class(annotation)
    if array is None:
        raise TypeError(
            f"{what}: the annotation must be one array annotation such as u32[b'batch/data len'], "
            f"got {annotation!r}"
        )
    text = _text(annotation)
    try:
        if isinstance(global_shape, (str, bytes)):
            raise TypeError
        shape = tuple(operator.index(s) for s in global_shape)
    except TypeError:
        raise TypeError(f"{what}: global_shape must be a tuple of ints, got {global_shape!r}") from None
    if not shape:
        raise ValueError(f"{what}: {text} with global_shape (): a data layout needs a batch dim (dim 0)")
    if any(s < 0 for s in shape):
        raise ValueError(f"{what}: global_shape {shape} has a negative size")
    mesh = mesh_arg(mesh, what)
    if not isinstance(mesh, Mesh):
        raise ValueError(
            f"{what}: needs a mesh with devices, got {mesh!r}; pass mesh=... (outside jit) or set "
            "one with jax.set_mesh"
        )
    sharding = derive_shardings(annotation, mesh)
    origin = array.dtype_class
    dtype = origin.dtype if origin.dtype is not None else _accepted_dtype(origin)
    # The global shape's names must not leak into a caller's dimension table; validating the
    # shape is part of building the layout, so it runs with checks off too.
    with Scope(), forced_checks():
        try:
            check(origin, array.shape_string or b"", jax.ShapeDtypeStruct(shape, dtype, sharding=sharding))
        except Exception as e:
            problem = str(e).removeprefix(f"check(): value is not {text}: ")
            raise ValueError(f"{what}: global_shape {shape} does not fit {text}: {problem}") from None
    for i, (size, entry) in enumerate(zip(shape, sharding.spec)):
        axes = entry_axes(entry)
        parts = math.prod(mesh.shape[a] for a in axes)
        if size % parts:
            raise ValueError(
                f"{what}: {text} with global_shape {shape}: dim {i} has size {size}, which does not "
                f"divide over mesh axes {axes} of total size {parts}"
            )
    return array, sharding, shape


def _accepted_dtype(cls: type[number]) -> np.dtype:
    for dt in (np.float32, np.int32, np.uint32, np.bool_, np.complex64):
        if cls.accepts(np.dtype(dt)):
            return np.dtype(dt)
    return np.dtype(np.float32)


def _bounds(index: slice, size: int) -> tuple[int, int]:
    start, stop, step = index.indices(size)
    if step != 1:  # NamedSharding blocks are contiguous; anything else is a JAX change to handle
        raise ValueError(f"data_layout: a device's block {index} has a stride, which is not supported")
    return start, stop


def _spans(intervals: set[tuple[int, int]]) -> list[tuple[int, int]]:
    """Sorted intervals merged where they touch or overlap."""
    merged: list[list[int]] = []
    for start, stop in sorted(intervals):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], stop)
        else:
            merged.append([start, stop])
    return [(a, b) for a, b in merged]


def _fmt(intervals: Sequence[tuple[int, int]]) -> str:
    return ", ".join(f"{a}:{b}" for a, b in intervals)


def _advice(sharding: NamedSharding, dim: int, process_of: Callable[[Any], int]) -> str:
    """How to make dim ``dim`` contiguous per process: the mesh axes along which the process
    changes must come first (major) among the dim's axes."""
    mesh = sharding.mesh
    entry = sharding.spec[dim]
    axes = entry_axes(entry)
    processes = np.vectorize(process_of, otypes=[int])(mesh.devices)
    spanning = []
    for a in axes:
        k = mesh.axis_names.index(a)
        if (np.diff(processes, axis=k) != 0).any():
            spanning.append(a)
    order = tuple(spanning) + tuple(a for a in axes if a not in spanning)
    where = f"Dim {dim} is sharded over mesh axes {axes} (mesh {dict(mesh.shape)}), and "
    if order != axes:
        return (
            where + f"{tuple(spanning)} span processes: list those first, sharding the dim "
            f"over {order} (b'batch/{'/'.join(order)}' with mesh axes in the annotation; with "
            "logical axes, in the rule), so that each process's devices take one contiguous run"
        )
    return (
        where + "the devices of one process are spread along them: build the mesh with "
        "default_mesh or hybrid_mesh, which keep each process's devices together"
    )


def layout_for_processes(
    sharding: NamedSharding,
    shape: tuple[int, ...],
    process_of: Callable[[Any], int],
    this: int,
    text: str,
) -> DataLayout:
    """Test-facing: the layout ``data_layout`` computes for process ``this``, with the processes
    made up by ``process_of(device)`` (several hosts' layouts, from one host's devices)."""
    return _layout(sharding, shape, process_of, this, text)


def _layout(
    sharding: NamedSharding,
    shape: tuple[int, ...],
    process_of: Callable[[Any], int],
    this: int,
    text: str,
    what: str = "data_layout",
) -> DataLayout:
    """The layout from the sharding's device-to-index map, grouped by ``process_of(device)``.

    Every process computes the same answer for every process, so a layout no process can load
    is an error on all of them alike (none is left waiting in a collective for the others).
    """
    blocks: dict[int, set[tuple[tuple[int, int], ...]]] = collections.defaultdict(set)
    for device, index in sharding.devices_indices_map(shape).items():
        blocks[process_of(device)].add(tuple(_bounds(s, n) for s, n in zip(index, shape)))
    if this not in blocks:
        raise ValueError(
            f"{what}: process {this} has no devices in the mesh (its processes: {sorted(blocks)})"
        )

    boxes: dict[int, tuple[tuple[int, int], ...]] = {}
    for p in sorted(blocks):
        who = f"process {p}" + (" (this process)" if p == this else "")
        per_dim = [{b[i] for b in blocks[p]} for i in range(len(shape))]
        box = []
        for i, intervals in enumerate(per_dim):
            spans = _spans(intervals)
            if len(spans) > 1:
                raise ValueError(
                    f"{what}: {text} with global_shape {shape}: the devices of {who} hold "
                    f"{'batch rows' if i == 0 else f'indices of dim {i}'} {_fmt(spans)}, not one "
                    "contiguous slice, so it cannot load its part as one slice of the global "
                    f"data. {_advice(sharding, i, process_of)}"
                )
            box.append(spans[0])
        if len(blocks[p]) != math.prod(len(s) for s in per_dim):
            raise ValueError(
                f"{what}: {text} with global_shape {shape}: the devices of {who} hold blocks "
                f"{sorted(blocks[p])}, which do not fill the rectangle {_fmt(box)}; a process "
                "must hold one rectangular block of the array"
            )
        boxes[p] = tuple(box)

    slices = sorted({box[0] for box in boxes.values()})
    for (a0, a1), (b0, b1) in zip(slices, slices[1:]):
        if b0 < a1:
            raise ValueError(
                f"{what}: {text} with global_shape {shape}: processes hold overlapping but "
                f"different batch slices {a0}:{a1} and {b0}:{b1}, so no shard numbering "
                "describes the layout; build the mesh with default_mesh/hybrid_mesh"
            )
    mine = boxes[this]
    replicas = [p for p in sorted(boxes) if boxes[p][0] == mine[0]]
    local_index = tuple(slice(a, b) for a, b in mine)
    return DataLayout(
        sharding=sharding,
        global_shape=shape,
        process_index=this,
        batch_slice=local_index[0],
        shard_id=slices.index(mine[0]),
        num_shards=len(slices),
        replica_id=replicas.index(this),
        num_replicas=len(replicas),
        local_index=local_index,
        local_shape=tuple(b - a for a, b in mine),
    )


def make_global_array(
    local_data: Any, annotation: Any, global_shape: Sequence[int], mesh: Mesh | None = None
) -> jax.Array:
    """The global ``jax.Array`` of ``global_shape``, laid out as ``annotation`` says, from this
    process's part of it: ``local_data`` is the block ``data_layout(...).local_index`` of the
    global data (its shape is ``local_shape``; replicas pass identical data).

    >>> layout = data_layout(u32[b'batch/data len'], (16, 4), mesh)             # doctest: +SKIP
    >>> x = make_global_array(all_rows[layout.local_index], u32[b'batch/data len'], (16, 4), mesh)

    Uses ``jax.make_array_from_process_local_data``; the shape and dtype of ``local_data`` are
    checked first, with an error that says what was expected.
    """
    what = "make_global_array"
    if local_data is None or isinstance(local_data, (str, bytes)) or not (
            hasattr(local_data, "shape") or isinstance(local_data, (list, tuple, int, float, complex, np.generic))):
        raise TypeError(
            f"{what}: local_data must be this process's block of the array (a numpy or JAX array), got "
            f"{type(local_data).__name__} {local_data!r:.60}"
        )
    array, sharding, shape = _sharding(annotation, global_shape, mesh, what)
    layout = _layout(sharding, shape, lambda d: d.process_index, jax.process_index(), _text(annotation), what)
    found = tuple(np.shape(local_data))
    if found != layout.local_shape:
        on = sharding.mesh  # a concrete Mesh: _sharding made the sharding on one
        processes = len({d.process_index for d in on.devices.flat}) if isinstance(on, Mesh) else 1
        raise ValueError(
            f"make_global_array: {_text(annotation)} with global_shape {shape}: process "
            f"{layout.process_index} (of {processes}) must pass its block of shape "
            f"{layout.local_shape} (global index {_fmt([(s.start, s.stop) for s in layout.local_index])}), "
            f"found local_data of shape {found}"
        )
    dtype = getattr(local_data, "dtype", None)
    dtype = np.dtype(dtype if dtype is not None else np.asarray(local_data).dtype)
    try:
        canonical = np.dtype(jax.dtypes.canonicalize_dtype(dtype))
    except TypeError:
        raise TypeError(f"{what}: local_data has dtype {dtype}, which a JAX array cannot hold") from None
    origin = array.dtype_class
    if not origin.accepts(canonical):
        raise TypeError(
            f"make_global_array: {_text(annotation)} wants "
            f"{origin.description if origin.dtype is None else origin.dtype}, "
            f"found local_data of dtype {dtype}" + (f" (as {canonical} in JAX)" if canonical != dtype else "")
            + "; convert it first, e.g. local_data.astype(...)"
        )
    return jax.make_array_from_process_local_data(sharding, local_data, shape)
