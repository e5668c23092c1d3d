"""JAX's own unreduced type in a kernel: whether a body is staged (``is_staged``), so JAX can
type a partial sum, and JAX's refusal of an op on one said in shardtypes' words
(``jax_refusal``).
"""

from __future__ import annotations

from typing import Any

import jax
from jax.core import Tracer
from typeguard import TypeCheckError

from ..context import checks_on
from ..language import KERNEL_PASS, linked
from ..model import in_kernel, mesh_axes
from .kernel_pass.jaxpr import about_unreduced, refused_op

__all__ = ["is_staged", "jax_refusal"]


def is_staged(values: Any) -> bool:
    """Whether a shard_map of ``values`` is staged into a jaxpr (under ``jax.jit``, or anything
    that traces to one) rather than run eagerly, where JAX's unreduced type is refused (0.9.2)
    or refused on Auto axes (0.10.2). No public API says so; a constant made here is a tracer
    exactly when a staging trace is active (JVP and vmap hand inputs-free ops to the trace below
    them), and a value no jaxpr uses is dropped from it."""
    if not checks_on():
        return False
    if not any(isinstance(v, Tracer) for v in jax.tree.leaves(values)):
        return False  # an eager call (or constants under jit: JAX's type is then left out)
    return isinstance(jax.lax.full((), 0, "int8"), Tracer)





def jax_refusal(trace: Any, error: Exception) -> TypeCheckError | None:
    """JAX's refusal of an op on a partial sum it types unreduced (``mark_unreduced``), said as a
    TypeCheckError naming the kernel, the op that made the partial sum, the axes owed and JAX's
    op; None when ``error`` is something else, or no partial sum was so typed in this trace."""
    if not trace.marked or isinstance(error, TypeCheckError):
        return None  # (shardtypes' own errors say what they mean)
    text = str(error)
    op = refused_op(text)
    if op is None and not about_unreduced(text):
        return None
    reached = f"JAX's {op!r}" if op else f"a JAX operation ({text.splitlines()[0] if text else type(error).__name__})"
    sums = list({(e.owed_by, e.owed): e for e in trace.marked}.values())
    what = "; ".join(f"{e.owed_by} made a partial sum owing a sum over {mesh_axes(e.owed)}" for e in sums)
    return TypeCheckError(linked(
        f"{in_kernel(trace.kernel)}, a partial sum reached {reached}, which JAX refuses on it: {what}, "
        "and JAX types it unreduced, so only the linear operations JAX has a rule for may take it "
        "(+, sum, transpose, reshape, concatenate, astype); reduce it with shardtypes.ops.psum or "
        "shardtypes.ops.psum_scatter first (see \"Sums still owed\" in docs/shard-map.md)", KERNEL_PASS))


