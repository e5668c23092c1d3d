"""What differs between the JAX versions shardtypes supports, in one place.

shardtypes supports JAX from ``OLDEST_JAX`` to the newest release; ``.ci/run`` runs the whole
suite on both ends. Everything that depends on the version lives here, so the rest of the package
is written against one API.

Each difference is told by trying the feature, never by reading the version string; a try that
cannot tell says so (a ``JaxFeatureWarning``) and takes the path that works on every version.

Three things differ. The varying manual axes of a value inside ``shard_map`` (``varying_axes``):
``jax.typeof(x).vma`` on JAX 0.9, ``jax.typeof(x).mat.varying`` from 0.10. And a value that is
part of ``jax.jit``'s cache key (``jax.make_user_context``). JAX 0.10 can set its process-wide
value (``set_global``); older
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
import warnings
from typing import Any

import jax
import jax.core
import jax.extend.core
import jax.numpy as jnp

__all__ = ["OLDEST_JAX", "JaxFeatureWarning", "JitKey", "all_gather_invariant", "invariant_gather_native",
           "jax_version", "trace_state", "varying_axes"]

OLDEST_JAX = "0.9.2"


class JaxFeatureWarning(UserWarning):
    """A try of a JAX feature could not tell whether the running JAX has it: shardtypes takes the
    path that works without it, and the message names the JAX version."""


def jax_version() -> tuple[int, ...]:
    """The running JAX's version as numbers, e.g. ``(0, 10, 2)``: for messages and the supported
    range, never to pick a code path (the features are tried instead)."""
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


def varying_axes(aval: Any) -> frozenset:
    """The manual mesh axes a value inside ``shard_map`` varies over (``{V:d}`` in
    ``jax.typeof(x)``), from its aval; empty where JAX does not track them (``check_vma=False``,
    outside ``shard_map``). Read from what the aval has: ``aval.mat.varying`` (JAX 0.10+) or
    ``aval.vma`` (JAX 0.9)."""
    mat = getattr(aval, "mat", None)
    if mat is not None:
        return frozenset(mat.varying)
    return frozenset(getattr(aval, "vma", None) or ())


@functools.cache
def invariant_gather_native() -> bool:
    """Whether ``jax.lax.all_gather`` takes ``to='invarying'`` (JAX 0.10 and later): tried once on
    a one-device abstract mesh, not read from the version string. The try runs in a thread of its
    own, which starts with no mesh set and no trace running (both are per thread in JAX), so the
    caller's mesh or kernel trace cannot make it fail. A try that cannot tell warns
    (``JaxFeatureWarning``) and answers False: the ``psum`` gather works on every JAX."""
    found: list[bool | BaseException] = []

    def attempt() -> None:
        try:
            found.append(_gathers_invariant())
        except BaseException as e:  # noqa: BLE001 - reported below, in the caller's thread
            found.append(e)

    thread = threading.Thread(target=attempt, name="shardtypes-jax-probe")
    thread.start()
    thread.join()
    answer = found[0] if found else RuntimeError("the probe's thread ended without an answer")
    if isinstance(answer, bool):
        return answer
    warnings.warn(
        f"shardtypes could not tell whether jax.lax.all_gather takes to='invarying' on JAX "
        f"{jax.__version__}: the try failed with {type(answer).__name__}: {_first_line(answer)}. "
        "Invariant gathers (shardtypes.ops.all_gather) use the psum of zero-padded blocks instead, "
        "which is correct on every JAX but moves the whole array. Please report it with the JAX "
        "version.", JaxFeatureWarning, stacklevel=2)
    return False


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else "(no message)"


_PROBE_AXIS = "_shardtypes_probe"


def _gathers_invariant() -> bool:
    """True where ``to='invarying'`` is taken, False where JAX names ``to`` as the problem; any
    other failure is raised (the try could not tell). The operand is replicated (``in_specs=P()``):
    JAX 0.11's shard_map asserts its inputs' sharding instead of resharding them, and an abstract
    input has no sharding but the replicated one, so this is the one spec every version accepts."""
    mesh = jax.sharding.AbstractMesh((1,), (_PROBE_AXIS,))
    probe = jax.shard_map(
        lambda x: jax.lax.all_gather(x, _PROBE_AXIS, tiled=True, to="invarying"),
        mesh=mesh, in_specs=jax.sharding.PartitionSpec(), out_specs=jax.sharding.PartitionSpec(),
    )
    try:
        jax.eval_shape(probe, jax.ShapeDtypeStruct((1,), jnp.float32))
    except (ValueError, TypeError) as e:
        if "`to`" in str(e):  # "Got unexpected `to` value ... Allowed `to` values are: ..."
            return False
        raise
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
