"""Layer 1, the shape language: what an annotation's shape string says.

Parsing and printing shape strings (``ShapeSpec``, ``DimSpec``, ``ShapeSpecError``), the
PartitionSpec a spec names, size expressions (``seq+1``, ``heads//kv``) and the sizes users give
(``dims={'batch': 8}``), and the names static checkers see for the annotation classes.

May import: nothing of shardtypes; no JAX at import (pure Python).
Offers the layers above: ``ShapeSpec``, ``DimSpec``, ``ShapeSpecError``, the dim kinds and
``entry_axes``/``axes_entry`` (``shape``); ``is_size``, ``evaluate`` and friends (``sizes``).
"""

from .shape import (
    DimSpec as DimSpec,
    ShapeSpec as ShapeSpec,
    ShapeSpecError as ShapeSpecError,
    axes_entry as axes_entry,
    entry_axes as entry_axes,
)
from .sizes import (
    check_dims as check_dims,
    divides as divides,
    evaluate as evaluate,
    size_equal as size_equal,
)

__all__ = [
    "DimSpec",
    "ShapeSpec",
    "ShapeSpecError",
    "axes_entry",
    "check_dims",
    "divides",
    "entry_axes",
    "evaluate",
    "size_equal",
]
