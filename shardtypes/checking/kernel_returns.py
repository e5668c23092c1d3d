"""A kernel's return value: a kernel (check_vma on) may not return a value JAX types varying
over mesh axes a plain ``ops.all_gather`` gathered while its out_specs replicate it (``returned``).
"""

from __future__ import annotations

from typing import Any

import jax
from jax.sharding import PartitionSpec
from typeguard import TypeCheckError

from ..context import varying_axes
from ..language import INVARIANT_GATHER, entry_axes, linked
from ..model import in_kernel, mesh_axes
from .kernel_layouts import active

__all__ = ["returned"]


def returned(out: Any, out_specs: Any) -> None:
    """A kernel (check_vma on) may not return a value JAX types as varying over a mesh axis a
    plain ``ops.all_gather`` gathered while its out_specs replicate it over that axis: shard_map
    would reject the out_specs with a ValueError naming neither the value nor the gather. Raises
    TypeCheckError naming them and the fix (``invariant=True``)."""
    trace = active()
    if trace is None or not trace.gathered or trace.check_vma is False:
        return
    def one(path: Any, spec: Any, value: Any) -> None:
        if not isinstance(spec, PartitionSpec) or not isinstance(value, jax.Array):
            return
        aval = jax.typeof(value)
        named = {a for entry in spec for a in entry_axes(entry)}
        axes = sorted(a for a in varying_axes(aval) - named if a in trace.gathered)
        if not axes:
            return
        listed = ", ".join(repr(a) for a in axes)
        calls = ", ".join(dict.fromkeys(trace.gathered[a] for a in axes))
        raise TypeCheckError(linked(
            f"{in_kernel(trace.kernel)}, the return value{jax.tree_util.keystr(path)} varies over "
            f"{mesh_axes(axes, sort=False)} (jax.typeof gives {aval}), gathered by {calls}, but the return "
            f"annotation replicates it over {listed} (out_specs {spec}): JAX types a plain "
            "all_gather's result as varying, so shard_map would reject the out_specs; gather it "
            "with shardtypes.ops.all_gather(..., invariant=True), whose result is invariant", INVARIANT_GATHER
        ))

    try:
        jax.tree_util.tree_map_with_path(one, out_specs, out, is_leaf=lambda x: isinstance(x, PartitionSpec))
    except ValueError:  # out and out_specs differ in structure: shard_map says so
        return
