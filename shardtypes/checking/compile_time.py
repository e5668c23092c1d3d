"""The compile-time check: under ``jax.jit`` on Auto mesh axes XLA chooses the sharding, so the
checker registers a check on the value (``_sharding_primitive``'s effect-free primitive, or
``jax.debug.inspect_array_sharding`` where its self-test fails), which reports the sharding XLA
chose while the program compiles and costs nothing after: cached calls stay on jit's C++ fast
path. A failure reaches the user as a ``TypeCheckError`` (``_compile_errors``). See
``shardtypes.config.auto_sharding_check``.
"""

from __future__ import annotations

import contextvars
import linecache
import math
import os
import sys
import types
from typing import Any, Callable

import jax
import typeguard
from jax.sharding import NamedSharding, PartitionSpec
from typeguard import TypeCheckError

from ..context import config
from ..language import COMPILE_TIME, ShapeSpec, is_unconstrained, linked
from ..model import Layout, adopt, fmt_layout, fmt_shape, layout_problem, missing_axes_problem, normalise
from .compile_errors import failed
from .sharding import drop_size_one, missing_axes, unnamed_sharding_problem
from .sharding_primitive import compile_time_check

__all__ = ["COMPILE_TIME_CHECKS"]


# False while typed_shard_map checks its global result: out_specs come from the same annotation,
# so shard_map lays it out as annotated (its arguments are checked at compile time, as elsewhere).
COMPILE_TIME_CHECKS: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "shardtypes.compile_time_checks", default=True
)


def check_at_compile_time(value, spec: ShapeSpec, ndim: int, manual: frozenset, context,
                           expected: Layout, sizes: dict) -> None:
    """Registers a check of the sharding XLA chooses; runs during compilation, costs nothing after.
    ``expected`` is resolved now, at trace time, under the axis rules active now; ``sizes`` are
    the mesh's axis sizes now (for a sharding that names no mesh axes)."""
    where = context() + _call_site()

    def report(sharding, shape: tuple, order: tuple = ()) -> None:
        """``shape`` is the inspected array's: under vmap, its leading dims are vmap's, and
        ``order`` (when not empty) says where they were in the array the sharding describes."""
        if config.auto_sharding_check == "off":  # read now: the setting may change after tracing
            return
        batch = len(shape) - ndim
        if isinstance(sharding, NamedSharding):
            mesh_sizes = dict(sharding.mesh.shape)
            missing = missing_axes(expected, sharding.mesh.axis_names)
            found = tuple(sharding.spec) + (None,) * (len(shape) - len(sharding.spec))
            actual = normalise(PartitionSpec(*found[batch:]), ndim, mesh_sizes)
            want = tuple(axes if is_unconstrained(axes) else tuple(a for a in axes if a not in manual)
                         for axes in drop_size_one(expected, mesh_sizes))
            problem: str | None
            if missing:
                problem = missing_axes_problem(missing, sharding.mesh.axis_names, "the array's mesh")
            else:
                problem = None if actual == adopt(actual, want) else layout_problem(actual, want)
        else:
            problem = _unnamed_block_problem(sharding, shape, batch, expected, sizes, spec, ndim,
                                             order)
        if problem is not None:
            fix = fmt_layout(tuple(axes if is_unconstrained(axes) else tuple(a for a in axes if a not in manual)
                                    for axes in expected))
            raise failed(TypeCheckError(linked(
                f"shardtypes (compile-time check): {where}: {problem} (the sharding XLA chose "
                f"under jax.jit on Auto mesh axes). Fix: lay the value out as annotated, with "
                f"shardtypes.shard(value, annotation) or jax.lax.with_sharding_constraint(value, "
                f"{fix}), or set shardtypes.config.auto_sharding_check = 'off'", COMPILE_TIME
            )))

    compile_time_check(value, report, lambda v, r: _inspect(v, r, 0))


_JAX = os.path.dirname(os.path.abspath(jax.__file__)) + os.sep
_OURS = (os.path.dirname(os.path.abspath(typeguard.__file__)) + os.sep,
         os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep)
_STDLIB = os.path.dirname(os.path.abspath(contextvars.__file__)) + os.sep


def _call_site() -> str:
    """`` (at model.py:15 in step(): return layer(y))``: where the user's code that JAX is
    tracing called the checked function, so that a function called twice in a step says which
    call it was (the check reports later, while the program compiles, from no frame of the
    user's). Nothing for a check JAX's own frames stand between (the function jitted itself:
    its trace may be compiled again for another caller)."""
    frame: types.FrameType | None = sys._getframe(2)
    while frame is not None:
        filename = frame.f_code.co_filename
        path = os.path.abspath(filename)
        if path.startswith(_JAX):
            return ""
        library = filename.startswith("<frozen") or path.startswith(_OURS) or (
            path.startswith(_STDLIB) and f"{os.sep}site-packages{os.sep}" not in path[len(_STDLIB) - 1:])
        if not library:
            line = linecache.getline(filename, frame.f_lineno).strip()
            return (f" (at {os.path.basename(filename)}:{frame.f_lineno} in {frame.f_code.co_name}()"
                    + (f": {line}" if line else "") + ")")
        frame = frame.f_back
    return ""


def _unnamed_block_problem(sharding: Any, shape: tuple, batch: int, expected: Layout, sizes: dict,
                           spec: ShapeSpec, ndim: int, order: tuple = ()) -> str | None:
    """A sharding that names no mesh axes (GSPMDSharding, when nothing in the program was laid out
    over a mesh): compared through the block each device holds, which the axis sizes fix.
    ``order``: where each dim of ``shape`` is in the array ``sharding`` describes (vmap's)."""
    if not sizes or sharding.is_fully_replicated:
        return unnamed_sharding_problem(sharding, spec, ndim, expected=expected)
    want = drop_size_one(expected, sizes)
    if order:
        original = [0] * len(shape)
        for position, dim in enumerate(order):
            original[dim] = shape[position]
        blocks = tuple(sharding.shard_shape(tuple(original)))
        block = tuple(blocks[dim] for dim in order)[batch:]
    else:
        block = tuple(sharding.shard_shape(shape))[batch:]
    wanted = tuple(got if is_unconstrained(axes) else size // math.prod(sizes[a] for a in axes)
                   for size, axes, got in zip(shape[batch:], want, block))  # UNCONSTRAINED: any block
    if block == wanted:
        return None
    return (f"the array's blocks are {fmt_shape(block)} but the annotation's layout "
            f"{fmt_layout(want)} gives blocks of {fmt_shape(wanted)}")


def _inspect(value: Any, report: Callable, batch: int) -> None:
    """The fallback (effectful: every cached call of the jitted function runs in Python), used
    where ``_sharding_primitive``'s self-test fails. ``report(sharding, shape)`` with the sharding
    XLA gives ``value`` (at compile time under jit) and the inspected array's shape, whose first
    ``batch`` dims are vmap's.

    * ``custom_vmap`` tells how many dims vmap adds (its rule sees the batched value with the
      batch dim first); JAX's spec of the batched array drops trailing unsharded dims, so the
      count cannot be read from the spec.
    * ``stop_gradient``: the inspection is no part of any derivative (custom_vmap has none).
    * ``device_put``: outside jit a transformation evaluates the inspection on the value it
      traces, which for a numpy array or Python scalar has no sharding; under jit it lowers to
      nothing, like the other two: the compiled program is the same.
    """

    @jax.custom_batching.custom_vmap
    def inspect(x):
        jax.debug.inspect_array_sharding(
            jax.device_put(x), callback=lambda sharding: report(sharding, tuple(x.shape)))
        return x

    @inspect.def_vmap
    def _batched(axis_size, in_batched, x):
        (batched,) = in_batched
        _inspect(x, report, batch + 1 if batched else batch)
        return x, batched

    inspect(jax.lax.stop_gradient(value))
