"""What a failed check says: ``Mismatch`` (the problem, before the caller adds where the value
sits), and descriptions of values, shapes, sizes and layouts for messages.

>>> describe(np.zeros((8, 16), np.float32))
'float32[8,16] (numpy, on the host)'

A layout is one tuple of mesh axes per dim; ``normalise`` makes one of a ``PartitionSpec``.
"""

from __future__ import annotations

import difflib
from typing import Any, Iterable

import jax
import jax.core
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec

from ..context import ACTIVE as _ACTIVE_RULES, RULES_HINT, config
from ..language import entry_axes, is_unconstrained
from .annotations import dtype_name, type_name

__all__ = ["Mismatch", "describe", "axis_hint"]


# A per-dim sharding: one tuple of mesh axis names per array dim.
Layout = tuple[tuple[str, ...], ...]


class Mismatch(Exception):
    """A check failed; ``problem`` says how. Turned into a TypeCheckError with full context."""

    def __init__(self, problem: str):
        super().__init__(problem)
        self.problem = problem


def mesh_axes(axes: Iterable[str], *, sort: bool = True) -> str:
    """Mesh axes in a message, worded for how many: ``mesh axis 'd'``, ``mesh axes 'd', 't'``
    (sorted unless ``sort=False``: then in the order given)."""
    axes = sorted(axes) if sort else list(axes)
    return f"mesh {'axes' if len(axes) > 1 else 'axis'} {', '.join(repr(a) for a in axes)}"


def in_kernel(name: str) -> str:
    """How a message names the kernel it happened in: ``in kernel f()``."""
    return f"in kernel {name}()"


def n_dims(n: int) -> str:
    return "1 dim" if n == 1 else f"{n} dims"


def fmt_shape(shape) -> str:
    return "[" + ",".join(str(d) for d in shape) + "]"


def fmt_layout(layout: Layout) -> str:
    entries = []
    for axes in layout:
        if axes is None:  # a dim whose layout is not known (the kernel pass's facts)
            entries.append("?")
        elif is_unconstrained(axes):
            entries.append("UNCONSTRAINED")
        elif not axes:
            entries.append("None")
        elif len(axes) == 1:
            entries.append(repr(axes[0]))
        else:
            entries.append("(" + ", ".join(repr(a) for a in axes) + ")")
    return "P(" + ", ".join(entries) + ")"


def describe(value: Any) -> str:
    """A short description of what was found: ``float32[8,16] sharded P('d', None)``."""
    shape = getattr(value, "shape", None)
    dtype = getattr(value, "dtype", None)
    if shape is None or dtype is None:
        return type(value).__name__
    text = f"{dtype_name(dtype)}{fmt_shape(shape)}"
    if isinstance(value, (np.ndarray, np.generic)):
        return text + " (numpy, on the host)"
    try:
        manual = ()
        if isinstance(value, jax.core.Tracer):
            sharding = jax.typeof(value).sharding
            manual = jax.sharding.get_abstract_mesh().manual_axes
        else:
            sharding = getattr(value, "sharding", None)
    except Exception:  # describing must never hide the real error
        return text
    if manual:  # inside shard_map the shape is this device's block
        text += f", a local block under manual axes {tuple(manual)}"
    sep = "," if manual else ""
    if isinstance(value, jax.core.Tracer):
        unknown = _unknown_at_trace_time(sharding, len(shape))
        if unknown:
            return text + f", {unknown}"
    if isinstance(sharding, NamedSharding):
        return text + f"{sep} sharded {fmt_layout(normalise(sharding.spec, len(shape), None))}"
    if sharding is not None:
        return text + f"{sep} with {type(sharding).__name__}"
    return text


def _unknown_at_trace_time(sharding: Any, ndim: int) -> str | None:
    """For a traced value whose layout XLA has not chosen yet (no mesh, or Auto axes), what a
    message can say about it instead of the placeholder ``P(None, ...)`` the type carries."""
    mesh = sharding.mesh if isinstance(sharding, NamedSharding) else None
    if mesh is None or mesh.empty:
        mesh = jax.sharding.get_abstract_mesh()
    when = (
        "where shardtypes checks it" if config.auto_sharding_check == "compile"
        else "not checked: shardtypes.config.auto_sharding_check is 'off'"
    )
    if mesh.empty:
        return f"traced with no mesh, so its sharding is unknown until compiled, {when}"
    sizes = dict(mesh.shape)
    auto = [a for a, t in zip(mesh.axis_names, mesh.axis_types)
            if t == jax.sharding.AxisType.Auto and sizes[a] != 1]
    if not auto:
        return None
    explicit = {a for a, t in zip(mesh.axis_names, mesh.axis_types) if t == jax.sharding.AxisType.Explicit}
    known = ""
    if explicit and isinstance(sharding, NamedSharding):
        layout = tuple(tuple(a for a in axes if a in explicit)
                       for axes in normalise(sharding.spec, ndim, None))
        known = f"sharded {fmt_layout(layout)} over Explicit axes, "
    axes = ", ".join(repr(a) for a in auto)
    return f"{known}its layout over Auto axes {axes} unknown until compiled, {when}"


def normalise(spec: PartitionSpec, ndim: int, axis_sizes: dict | None) -> Layout:
    """A PartitionSpec as one tuple of axes per dim, padded to ``ndim``; axes of size 1 dropped."""
    out = []
    for i in range(ndim):
        axes = entry_axes(spec[i]) if i < len(spec) else ()  # UNCONSTRAINED: no axes
        if axis_sizes is not None:
            axes = tuple(a for a in axes if axis_sizes.get(a, 2) != 1)
        out.append(axes)
    return tuple(out)


def missing_axes_problem(missing: list[str], axis_names, where: str) -> str:
    names = ", ".join(repr(a) for a in missing)
    text = (
        f"mesh axis {names} is not in {where}, which has axes {tuple(axis_names)}"
        if len(missing) == 1
        else f"mesh axes {names} are not in {where}, which has axes {tuple(axis_names)}"
    )
    return text + axis_hint(missing, axis_names)


def axis_hint(missing: list[str], axis_names) -> str:
    """What to say after "axis 'x' is not in the mesh": a close axis name, and the rules."""
    text = ""
    close = [m for a in missing for m in difflib.get_close_matches(a, list(axis_names), n=1, cutoff=0.75)]
    if close:
        text += f"; did you mean {' / '.join(repr(c) for c in close)}?"
    if _ACTIVE_RULES.get() is None:
        text += f" (if these are logical axis names, {RULES_HINT.get()})"
    return text


def adopt(actual: Layout, expected: Layout) -> Layout:
    """``expected`` with each UNCONSTRAINED dim (XLA decides) taking the axes ``actual`` has
    there: any split of such a dim passes (an array's spec never names a mesh axis twice)."""
    if not any(is_unconstrained(axes) for axes in expected):
        return expected
    return tuple(found if is_unconstrained(want) else want
                 for found, want in zip(actual + ((),) * (len(expected) - len(actual)), expected))


def layout_problem(actual: Layout, expected: Layout) -> str:
    return f"sharding is {fmt_layout(actual)} but the annotation says {fmt_layout(expected)}"


def fmt_size(size) -> str:
    if isinstance(size, tuple):
        return fmt_shape(size)
    return str(size)


def type_of(value: Any) -> str:
    """``jax.Array`` (for every concrete or traced array class), ``numpy.ndarray``, ``str``."""
    return "jax.Array" if isinstance(value, jax.Array) else type_name(type(value))
