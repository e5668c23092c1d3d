"""Flax Linen: layouts from the ``nn.Partitioned`` / ``nn.LogicallyPartitioned`` boxes that
``nn.with_logical_partitioning`` puts on a Linen model's variables, and checks of a params
tree against those boxes or against an annotation tree you wrote.

    class Block(nn.Module):
        @nn.compact
        def __call__(self, x):
            init = nn.with_logical_partitioning(nn.initializers.lecun_normal(), ('embed', 'mlp'))
            return nn.Dense(32, kernel_init=init, use_bias=False)(x)

    abstract = jax.eval_shape(Block().init, jax.random.key(0), x)     # boxes of ShapeDtypeStructs
    with axis_rules(AxisRules([('embed', 'd'), ('mlp', 't')])):
        shardings = shardtypes.linen.shardings(abstract, mesh)         # a NamedSharding per box
        variables = jax.jit(Block().init, out_shardings=shardings)(jax.random.key(0), x)
        shardtypes.linen.check(variables)                              # dtype, shape, sharding

A box reads as an annotation with one dim per axis, its size fixed and its name after the
``/``: ``nn.LogicallyPartitioned`` names are logical axes, resolved through the active
``AxisRules`` (strictly: a name no rule maps is an error, never a silent replication);
``nn.Partitioned`` names are mesh axes (derive those with no rules active).
``make_shardings``, ``make_partition_specs``, ``shard`` and ``plan`` also take a boxed tree
directly. See docs/linen.md for where Flax's ``nn.logical_to_mesh_sharding`` and shardtypes
disagree.
"""

from . import _public
from .integrations.linen import (
    annotations as annotations,
    check as check,
    partition_specs as partition_specs,
    shardings as shardings,
    unbox as unbox,
)

__all__ = ["annotations", "partition_specs", "shardings", "unbox", "check"]

_public.rehome(__name__, (globals()[name] for name in __all__))
