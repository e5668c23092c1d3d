"""Layer 1, the shape language: what an annotation's shape string says.

Parsing and printing shape strings (``ShapeSpec``, ``DimSpec``, ``ShapeSpecError``), the
PartitionSpec a spec names, size expressions (``seq+1``, ``heads//kv``) and the sizes users give
(``dims={'batch': 8}``), the names static checkers see for the annotation classes, and byte and
FLOP counts as every layer writes them (``fmt_bytes``, ``fmt_flops``).

May import: nothing of shardtypes; no JAX at import (pure Python).
"""

from .doc_links import (
    AXIS_RULES as AXIS_RULES,
    CHECK_FAILED as CHECK_FAILED,
    COMPILE_TIME as COMPILE_TIME,
    DOCS_URL as DOCS_URL,
    FAMILIES as FAMILIES,
    FIELD_FAILED as FIELD_FAILED,
    INVARIANT_GATHER as INVARIANT_GATHER,
    KERNEL_OPS as KERNEL_OPS,
    KERNEL_PASS as KERNEL_PASS,
    MALFORMED as MALFORMED,
    MESH_MISMATCH as MESH_MISMATCH,
    SHAPE_STRING as SHAPE_STRING,
    VERIFY_PROBLEMS as VERIFY_PROBLEMS,
    DocLink as DocLink,
    link_of as link_of,
    linked as linked,
    unlinked as unlinked,
)
from .shape import (
    ANY as ANY,
    BROADCAST as BROADCAST,
    ELLIPSIS as ELLIPSIS,
    EXPR as EXPR,
    FIXED as FIXED,
    LOGICAL_NAME as LOGICAL_NAME,
    NAMED as NAMED,
    UNCONSTRAINED_AXES as UNCONSTRAINED_AXES,
    VARIADIC as VARIADIC,
    DimSpec as DimSpec,
    ShapeSpec as ShapeSpec,
    ShapeSpecError as ShapeSpecError,
    axes_entry as axes_entry,
    entry_axes as entry_axes,
    is_unconstrained as is_unconstrained,
)
from .sizes import (
    IDENT as IDENT,
    check_dims as check_dims,
    close_name as close_name,
    divides as divides,
    evaluate as evaluate,
    is_size as is_size,
    mapping_of_sizes as mapping_of_sizes,
    size_equal as size_equal,
    unused_dims_error as unused_dims_error,
)
from .units import (
    BYTE_STYLES as BYTE_STYLES,
    FLOP_STYLES as FLOP_STYLES,
    fmt_bytes as fmt_bytes,
    fmt_flops as fmt_flops,
)

__all__ = [
    "AXIS_RULES",
    "CHECK_FAILED",
    "DOCS_URL",
    "FAMILIES",
    "FIELD_FAILED",
    "INVARIANT_GATHER",
    "COMPILE_TIME",
    "KERNEL_OPS",
    "KERNEL_PASS",
    "MALFORMED",
    "SHAPE_STRING",
    "VERIFY_PROBLEMS",
    "MESH_MISMATCH",
    "DocLink",
    "link_of",
    "linked",
    "unlinked",
    "LOGICAL_NAME",
    "ANY",
    "BROADCAST",
    "DimSpec",
    "ELLIPSIS",
    "EXPR",
    "FIXED",
    "IDENT",
    "NAMED",
    "ShapeSpec",
    "ShapeSpecError",
    "UNCONSTRAINED_AXES",
    "VARIADIC",
    "axes_entry",
    "check_dims",
    "close_name",
    "divides",
    "entry_axes",
    "evaluate",
    "is_size",
    "is_unconstrained",
    "mapping_of_sizes",
    "size_equal",
    "unused_dims_error",
    "BYTE_STYLES",
    "FLOP_STYLES",
    "fmt_bytes",
    "fmt_flops",
]

# What the layer offers the layers above, in its docstring, made from __all__ so that it cannot go stale.
__doc__ = f"{__doc__ or ''}\nOffers the layers above: {', '.join(__all__)}.\n"
