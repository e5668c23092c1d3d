"""What differs between the JAX versions shardtypes supports, in one place.

shardtypes supports JAX from ``OLDEST_JAX`` to the newest release; ``.ci/run`` runs the whole
suite on both ends. Everything that depends on the version lives here, so the rest of the package
is written against one API.

Three things differ. The varying manual axes of a value inside ``shard_map`` (``varying_axes``):
``jax.typeof(x).vma`` on JAX 0.9, ``jax.typeof(x).mat.varying`` from 0.10. And a value that is part of ``jax.jit``'s cache key
(``jax.make_user_context``). JAX 0.10 can set its process-wide value (``set_global``); older
JAX can only set it inside a ``with`` block. There, a process-wide setting that tracing depends
on (``shardtypes.config``) empties jit's caches when it changes (``jax.clear_caches``), so no
trace made under the old setting is reused. And a gather whose result JAX types as invariant
(``all_gather_invariant``): ``jax.lax.all_gather(..., to='invarying')`` from JAX 0.10; before,
a ``psum`` of the block placed in a zero-padded array (an all-reduce of the whole array).
"""

from __future__ import annotations

import contextlib
import functools
import threading
from typing import Any

import jax
import jax.numpy as jnp
import jax.extend.core
import jax.core

__all__ = ["OLDEST_JAX", "JitKey", "all_gather_invariant", "invariant_gather_native", "jax_version", "trace_state",
           "varying_axes"]

OLDEST_JAX = "0.9.2"


def jax_version() -> tuple[int, ...]:
    """The running JAX's version as numbers, e.g. ``(0, 10, 2)``."""
    parts = []
    for part in jax.__version__.split(".")[:3]:
        digits = "".join(c for c in part if c.isdigit())
        parts.append(int(digits) if digits else 0)
    return tuple(parts)


class JitKey:
    """A value that is part of jit's cache key: a jitted function traced under one value is traced
    again under another.

    ``key(value)`` is a context manager that holds ``value`` inside its block;
    ``key.set_global(value)`` sets it for the whole process.
    """

    __slots__ = ("_context", "_global", "_default")

    def __init__(self, default: Any) -> None:
        self._context = jax.make_user_context(default_value=default)
        self._default = default
        self._global = default

    def __call__(self, value: Any) -> contextlib.AbstractContextManager[Any]:
        return self._context(value)

    @property
    def global_value(self) -> Any:
        """The process-wide value last set (the default until ``set_global``)."""
        return self._global

    def set_global(self, value: Any) -> None:
        """Sets the process-wide value. Where JAX cannot key on it, jit's caches are emptied
        when it changes instead, so no trace made under the old value is reused."""
        if value == self._global:
            return
        setter = getattr(self._context, "set_global", None)
        if setter is not None:
            setter(value)
        else:
            jax.clear_caches()
        self._global = value


def _varying_0_10(aval: Any) -> frozenset:
    mat = getattr(aval, "mat", None)
    return frozenset(mat.varying) if mat is not None else frozenset()


def _varying_0_9(aval: Any) -> frozenset:
    return frozenset(getattr(aval, "vma", None) or ())


_VARYING = _varying_0_10 if jax_version() >= (0, 10) else _varying_0_9


def varying_axes(aval: Any) -> frozenset:
    """The manual mesh axes a value inside ``shard_map`` varies over (``{V:d}`` in
    ``jax.typeof(x)``), from its aval; empty where JAX does not track them (``check_vma=False``,
    outside ``shard_map``)."""
    return _VARYING(aval)


@functools.cache
def invariant_gather_native() -> bool:
    """Whether ``jax.lax.all_gather`` takes ``to='invarying'`` (JAX 0.10 and later): tried once on
    a one-device abstract mesh, not read from the version string. The try runs in a thread of its
    own, which starts with no mesh set and no trace running (both are per thread in JAX), so the
    caller's mesh or kernel trace cannot make it fail."""
    found: list[bool] = []
    thread = threading.Thread(target=lambda: found.append(_gathers_invariant()))
    thread.start()
    thread.join()
    return found[0] if found else jax_version() >= (0, 10)


def _gathers_invariant() -> bool:
    mesh = jax.sharding.AbstractMesh((1,), ("_shardtypes_probe",))
    probe = jax.shard_map(
        lambda x: jax.lax.all_gather(x, "_shardtypes_probe", tiled=True, to="invarying"),
        mesh=mesh, in_specs=jax.sharding.PartitionSpec("_shardtypes_probe"),
        out_specs=jax.sharding.PartitionSpec(),
    )
    try:
        jax.eval_shape(probe, jax.ShapeDtypeStruct((1,), jnp.float32))
    except ValueError as e:
        if "`to`" in str(e):  # "Allowed `to` values are: {'reduced', 'varying'}"
            return False
        raise  # any other failure: the thread's caller falls back on the version
    return True


def all_gather_invariant(x: Any, axis_name: str | tuple[str, ...], axis: int, count: int) -> Any:
    """``jax.lax.all_gather(x, axis_name, axis=axis, tiled=True)`` typed invariant over
    ``axis_name`` (``count`` devices together), inside a ``shard_map`` with check_vma on.

    JAX 0.10+: ``to='invarying'``, one all-gather. Before: each device puts its block at its
    place in zeros and the blocks are summed with ``psum`` (invariant), an all-reduce of the whole
    array. The gradient is the same: each device's block gets its slice of the cotangent."""
    if invariant_gather_native():
        return jax.lax.all_gather(x, axis_name, axis=axis, tiled=True, to="invarying")
    n = x.shape[axis]
    full = jnp.zeros(x.shape[:axis] + (n * count,) + x.shape[axis + 1:], x.dtype)
    start = [0] * x.ndim
    start[axis] = jax.lax.axis_index(axis_name) * n  # major axis first, as all_gather orders blocks
    # One term of each sum is the block, the others zeros: exact (but -0.0 comes back as 0.0).
    # psum adds bools as ints: cast back.
    return jax.lax.psum(jax.lax.dynamic_update_slice(full, x, start), axis_name).astype(x.dtype)


def _trace_state_getter() -> Any:
    extend = getattr(jax.extend.core, "get_opaque_trace_state", None)  # JAX 0.10+
    if extend is not None:
        return extend
    return getattr(jax.core, "get_opaque_trace_state")  # JAX 0.9 (moved to jax.extend.core in 0.10)


_TRACE_STATE = _trace_state_getter()


def trace_state() -> Any:
    """An opaque token of the trace values are being made in now: equal tokens, same trace
    (``get_opaque_trace_state``: ``jax.extend.core`` from JAX 0.10, ``jax.core`` before)."""
    return _TRACE_STATE(convention="shardtypes")
