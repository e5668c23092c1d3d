"""Layer 5, layout: deriving how values are laid out from their annotations.

PartitionSpecs, NamedShardings and ShapeDtypeStructs of annotation trees, ``shard`` (laying
values out as annotated), automatic specs for unannotated arrays, ``validate_shardings``,
``explain`` (which rule each dim took) and the host data layout of multi-host jobs.

May import: ``shardtypes.language``, ``shardtypes.context``, ``shardtypes.model``,
``shardtypes.checking``.
Offers the layers above: ``make_partition_specs``, ``make_shardings``,
``make_shape_dtype_structs``, ``shard``, ``tree_guard``, ``explain`` and the auto-spec tools.
"""

from .auto import auto_partition_spec as auto_partition_spec, auto_partition_specs as auto_partition_specs
from .data_layout import (
    DataLayout as DataLayout,
    data_layout as data_layout,
    make_global_array as make_global_array,
)
from .explanations import explain as explain
from .least_sharding import convert_specs as convert_specs, partition_specs_for_budget as partition_specs_for_budget
from .placement import shard as shard, tree_guard as tree_guard
from .specs import (
    PartitionSpecTree as PartitionSpecTree,
    ShardingTree as ShardingTree,
    StructTree as StructTree,
    is_fully_sharded as is_fully_sharded,
    make_partition_specs as make_partition_specs,
    make_shape_dtype_structs as make_shape_dtype_structs,
    make_shardings as make_shardings,
)
from .validate import ShardingProblem as ShardingProblem, validate_shardings as validate_shardings

__all__ = [
    "DataLayout",
    "PartitionSpecTree",
    "ShardingTree",
    "StructTree",
    "ShardingProblem",
    "auto_partition_spec",
    "auto_partition_specs",
    "convert_specs",
    "data_layout",
    "explain",
    "is_fully_sharded",
    "make_global_array",
    "make_partition_specs",
    "make_shape_dtype_structs",
    "make_shardings",
    "partition_specs_for_budget",
    "shard",
    "tree_guard",
    "validate_shardings",
]
