"""Layer 3, the annotation model: the one place that takes an annotation apart.

The annotation classes (``f32[b'batch/d embed']``, the static spelling ``f32[jax.Array, ...]``,
the categories ``floating``, ``integer``, ``key``, ``anydtype`` and the rest), trees (``pytree_dataclass``,
``Array[axes, cls]``, ``Stacked``, ``PyTree[X]``), and ``model(annotation)``: the node tree every other layer
walks (array annotations with their ``Plan``, dataclass-likes of every model library, tuples,
lists, dicts, NamedTuples, unions, ``Annotated``), and trees of values whose annotated classes
give the layout (optimizer states: ``optimizer_states``). ``typing.get_origin``/``get_args`` appear
nowhere else in the package. The errors a check raises (``FieldError``, ``ArrayError``) and the
descriptions of values in messages live here too, so every layer above can raise them.

May import: ``shardtypes.language``, ``shardtypes.context``.
"""

from . import nesting as _nesting  # noqa: F401  (imported to install f32[floating[jax.Array, b'a'], b'b'])
from .annotation_leaves import Leaf as Leaf, brief as brief, walk_leaves as walk_leaves
from .annotation_nodes import (
    PYTREES as PYTREES,
    ArrayNode as ArrayNode,
    ClassNode as ClassNode,
    DictNode as DictNode,
    Node as Node,
    OtherNode as OtherNode,
    PyTreeNode as PyTreeNode,
    SeqNode as SeqNode,
    UnionNode as UnionNode,
    follow as follow,
    model as model,
)
from .annotations import (
    annotation_class as annotation_class,
    dtype_classes as dtype_classes,
    dtype_name as dtype_name,
    dtype_names as dtype_names,
    install_instance_check as install_instance_check,
    is_annotation as is_annotation,
    is_dtype_class as is_dtype_class,
    number as number,
    subscript as subscript,
    type_name as type_name,
)
from .array_classes import HostOrDevice as HostOrDevice, accepts_host as accepts_host, union_members as union_members
from .categories import anydtype as anydtype, floating as floating, integer as integer
from .describe import (
    Layout as Layout,
    Mismatch as Mismatch,
    adopt as adopt,
    axis_hint as axis_hint,
    describe as describe,
    fmt_layout as fmt_layout,
    fmt_shape as fmt_shape,
    fmt_size as fmt_size,
    layout_problem as layout_problem,
    missing_axes_problem as missing_axes_problem,
    n_dims as n_dims,
    normalise as normalise,
    type_of as type_of,
)
from .errors import (
    COLLECTED as COLLECTED,
    ArrayError as ArrayError,
    FieldError as FieldError,
    ShardtypesWarning as ShardtypesWarning,
    collect as collect,
    field_path as field_path,
    found_text as found_text,
    in_function as in_function,
    public_names as public_names,
    qualified as qualified,
)
from .forms import (
    generator_types as generator_types,
    holds_shardtypes as holds_shardtypes,
    homogeneous_item as homogeneous_item,
    is_checked_class as is_checked_class,
    item_annotation as item_annotation,
    literal_container as literal_container,
    safe_is_checked_class as safe_is_checked_class,
    type_text as type_text,
    variable_annotation as variable_annotation,
)
from .hints import resolve_hints as resolve_hints
from .linen_boxes import box_annotation as box_annotation, is_box as is_box
from .optimizer_states import (
    Like as Like,
    annotated_instances as annotated_instances,
    holds_annotated_class as holds_annotated_class,
    is_array_value as is_array_value,
    is_value_tree as is_value_tree,
    walk_value as walk_value,
)
from .plans import (
    PLANS as PLANS,
    Plan as Plan,
    annotation_text as annotation_text,
    malformed as malformed,
    plan_for as plan_for,
    plan_of as plan_of,
)
from .pytree_annotation import (
    PyTree as PyTree,
    holds_pytree as holds_pytree,
    install_pytree_instance_check as install_pytree_instance_check,
    is_pytree as is_pytree,
    pytree_leaf as pytree_leaf,
)
from .pytree_dataclasses import (
    INFO as INFO,
    Array as Array,
    Stacked as Stacked,
    pytree_dataclass as pytree_dataclass,
    stack_annotation as stack_annotation,
    tree_info as tree_info,
)

__all__ = [
    "Array",
    "ArrayError",
    "ArrayNode",
    "COLLECTED",
    "ClassNode",
    "DictNode",
    "FieldError",
    "INFO",
    "Layout",
    "Leaf",
    "Like",
    "Mismatch",
    "Node",
    "OtherNode",
    "PLANS",
    "PYTREES",
    "Plan",
    "PyTree",
    "PyTreeNode",
    "SeqNode",
    "ShardtypesWarning",
    "Stacked",
    "UnionNode",
    "accepts_host",
    "adopt",
    "annotated_instances",
    "annotation_class",
    "annotation_text",
    "anydtype",
    "axis_hint",
    "box_annotation",
    "brief",
    "collect",
    "describe",
    "dtype_classes",
    "dtype_name",
    "dtype_names",
    "field_path",
    "floating",
    "fmt_layout",
    "fmt_shape",
    "fmt_size",
    "follow",
    "found_text",
    "generator_types",
    "holds_annotated_class",
    "holds_pytree",
    "holds_shardtypes",
    "homogeneous_item",
    "in_function",
    "install_instance_check",
    "install_pytree_instance_check",
    "integer",
    "is_annotation",
    "is_array_value",
    "is_box",
    "is_checked_class",
    "is_dtype_class",
    "is_pytree",
    "is_value_tree",
    "item_annotation",
    "layout_problem",
    "literal_container",
    "malformed",
    "missing_axes_problem",
    "model",
    "n_dims",
    "normalise",
    "number",
    "plan_for",
    "plan_of",
    "public_names",
    "pytree_dataclass",
    "pytree_leaf",
    "qualified",
    "resolve_hints",
    "safe_is_checked_class",
    "stack_annotation",
    "subscript",
    "tree_info",
    "type_name",
    "type_of",
    "type_text",
    "union_members",
    "variable_annotation",
    "walk_leaves",
    "walk_value",
]

# What the layer offers the layers above, in its docstring, made from __all__ so that it cannot go stale.
__doc__ = f"{__doc__ or ''}\nOffers the layers above: {', '.join(__all__)}.\n"
