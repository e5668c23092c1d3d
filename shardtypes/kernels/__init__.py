"""Layer 7, kernels: ``typed_shard_map`` and the typed collectives of ``shardtypes.ops``.

``jax.shard_map`` whose in_specs and out_specs come from the kernel's annotations, and
collectives written as seqax's spec strings (``'embed/d hidden/t -> embed hidden/t'``), checked
against the dimension table and the mesh.

May import: every layer below (language, context, model, checking, layout, integrations).
"""

from .ops import PER_DEVICE_CALLS as PER_DEVICE_CALLS
from .shard_map import typed_shard_map as typed_shard_map

__all__ = [
    "PER_DEVICE_CALLS",
    "typed_shard_map",
]

# What the layer offers the layers above, in its docstring, made from __all__ so that it cannot go stale.
__doc__ = f"{__doc__ or ''}\nOffers the layers above: {', '.join(__all__)}.\n"
