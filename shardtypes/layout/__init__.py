"""Layer 5, layout: deriving how values are laid out from their annotations.

PartitionSpecs, NamedShardings and ShapeDtypeStructs of annotation trees, ``shard`` (laying
values out as annotated), automatic specs for unannotated arrays, ``validate_shardings``,
``explain`` (which rule each dim took) and the host data layout of multi-host jobs.

May import: ``shardtypes.language``, ``shardtypes.context``, ``shardtypes.model``,
``shardtypes.checking``.
"""

from .auto import auto_partition_spec as auto_partition_spec, auto_partition_specs as auto_partition_specs
from .data_layout import (
    DataLayout as DataLayout,
    data_layout as data_layout,
    make_global_array as make_global_array,
)
from .dim_multiples import dim_multiples as dim_multiples, named_mesh_axes as named_mesh_axes
from .dim_sizes import (
    check_dims_for as check_dims_for,
    dim_size as dim_size,
    dims_used as dims_used,
    undivided as undivided,
)
from .explanations import explain as explain
from .least_sharding import convert_specs as convert_specs, partition_specs_for_budget as partition_specs_for_budget
from .per_device import per_device_shape as per_device_shape, spec_entries as spec_entries, spec_parts as spec_parts
from .placement import shard as shard, tree_guard as tree_guard
from .specs import (
    PartitionSpecTree as PartitionSpecTree,
    ShardingTree as ShardingTree,
    StructTree as StructTree,
    is_fully_sharded as is_fully_sharded,
    make_partition_specs as make_partition_specs,
    make_shape_dtype_structs as make_shape_dtype_structs,
    make_shardings as make_shardings,
    mesh_arg as mesh_arg,
    partition_spec as partition_spec,
    partition_specs as partition_specs,
    shardings as shardings,
    structs as structs,
)
from .validate import ShardingProblem as ShardingProblem, validate_shardings as validate_shardings
from .value_structs import structs_of_values as structs_of_values

__all__ = [
    "DataLayout",
    "PartitionSpecTree",
    "ShardingProblem",
    "ShardingTree",
    "StructTree",
    "auto_partition_spec",
    "auto_partition_specs",
    "check_dims_for",
    "convert_specs",
    "data_layout",
    "dim_multiples",
    "dim_size",
    "dims_used",
    "explain",
    "is_fully_sharded",
    "make_global_array",
    "make_partition_specs",
    "make_shape_dtype_structs",
    "make_shardings",
    "named_mesh_axes",
    "mesh_arg",
    "partition_spec",
    "partition_specs",
    "partition_specs_for_budget",
    "per_device_shape",
    "shard",
    "shardings",
    "spec_entries",
    "spec_parts",
    "structs",
    "structs_of_values",
    "tree_guard",
    "undivided",
    "validate_shardings",
]

# What the layer offers the layers above, in its docstring, made from __all__ so that it cannot go stale.
__doc__ = f"{__doc__ or ''}\nOffers the layers above: {', '.join(__all__)}.\n"
