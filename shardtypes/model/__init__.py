"""Layer 3, the annotation model: the one place that takes an annotation apart.

The annotation classes (``f32[b'batch/d embed']``, the static spelling ``f32[jax.Array, ...]``,
the categories ``floating``, ``integer``, ``key``, ``anydtype`` and the rest), trees (``pytree_dataclass``,
``Array[axes, cls]``, ``Stacked``, ``PyTree[X]``), and ``model(annotation)``: the node tree every other layer
walks (array annotations with their ``Plan``, dataclass-likes of every model library, tuples,
lists, dicts, NamedTuples, unions, ``Annotated``), and trees of values whose annotated classes
give the layout (optimizer states: ``value_trees``). ``typing.get_origin``/``get_args`` appear
nowhere else in the package. The errors a check raises (``FieldError``, ``ArrayError``) and the
descriptions of values in messages live here too, so every layer above can raise them.

May import: ``shardtypes.language``, ``shardtypes.context``.
Offers the layers above: ``model``, the node classes, ``walk`` (a function over the array
annotations of an annotation tree), ``plan_of``/``plan_for``, ``tree_info``, the annotation
classes, ``describe``/``Mismatch`` and the error classes.
"""

from . import nesting as _nesting  # noqa: F401  (imported to install f32[floating[jax.Array, b'a'], b'b'])
from .annotations import (
    annotation_class as annotation_class,
    dtype_names as dtype_names,
    is_annotation as is_annotation,
    is_dtype_class as is_dtype_class,
    number as number,
    subscript as subscript,
    type_name as type_name,
)
from .array_classes import HostOrDevice as HostOrDevice, accepts_host as accepts_host
from .describe import (
    Mismatch as Mismatch,
    axis_hint as axis_hint,
    describe as describe,
)
from .errors import (
    COLLECTED as COLLECTED,
    ArrayError as ArrayError,
    FieldError as FieldError,
    ShardtypesWarning as ShardtypesWarning,
    in_function as in_function,
    public_names as public_names,
)
from .hints import resolve_hints as resolve_hints
from .linen_boxes import box_annotation as box_annotation, is_box as is_box
from .nodes import (
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
from .plans import (
    Plan as Plan,
    plan_for as plan_for,
    plan_of as plan_of,
)
from .pytrees import (
    PyTree as PyTree,
    holds_pytree as holds_pytree,
    install_pytree_instance_check as install_pytree_instance_check,
    is_pytree as is_pytree,
    pytree_leaf as pytree_leaf,
)
from .trees import (
    Array as Array,
    Stacked as Stacked,
    pytree_dataclass as pytree_dataclass,
    stack_annotation as stack_annotation,
    tree_info as tree_info,
)
from .value_trees import (
    Like as Like,
    annotated_instances as annotated_instances,
    holds_annotated_class as holds_annotated_class,
    is_value_tree as is_value_tree,
    walk_value as walk_value,
)

__all__ = [
    "Array",
    "ArrayError",
    "ArrayNode",
    "COLLECTED",
    "ClassNode",
    "DictNode",
    "FieldError",
    "Like",
    "Mismatch",
    "Node",
    "OtherNode",
    "Plan",
    "PyTree",
    "PyTreeNode",
    "SeqNode",
    "ShardtypesWarning",
    "Stacked",
    "UnionNode",
    "annotated_instances",
    "annotation_class",
    "box_annotation",
    "axis_hint",
    "describe",
    "dtype_names",
    "follow",
    "holds_annotated_class",
    "holds_pytree",
    "in_function",
    "install_pytree_instance_check",
    "is_annotation",
    "is_box",
    "is_pytree",
    "is_dtype_class",
    "is_value_tree",
    "model",
    "number",
    "plan_for",
    "plan_of",
    "public_names",
    "pytree_dataclass",
    "pytree_leaf",
    "resolve_hints",
    "stack_annotation",
    "subscript",
    "tree_info",
    "type_name",
    "walk_value",
]
