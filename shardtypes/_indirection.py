"""What static checkers see for the annotation names (never imported at run time).

``shardtypes/__init__.py`` imports these names from here under ``TYPE_CHECKING`` only, so that
pyright and mypy read ``f32[jax.Array, b'batch/d embed']`` as ``Annotated[jax.Array, b'...']``,
that is as ``jax.Array`` (``f32[jax.Array | np.ndarray, b'...']`` as the union),
``Stacked[Layer, b'layers']`` as ``Layer``, ``PyTree[X]`` as ``X | Any`` (the approach of
jaxtyping's ``_indirection.py``). It has to be an import: ``f32 = Annotated`` is an assignment,
which checkers do not accept as a type alias of a special form. At run time the names are the
classes of ``model.annotations`` and ``model.pytree_dataclasses``; the one-argument
``f32[b'...']`` and ``Array[axes, cls]`` are run-time only spellings, which checkers reject.
"""

from typing import (
    TYPE_CHECKING,
    Annotated as Stacked,
    Annotated as anydtype,
    Annotated as bf16,
    Annotated as bool_,
    Annotated as c64,
    Annotated as c128,
    Annotated as complexfloating,
    Annotated as f8e3m4,
    Annotated as f8e4m3,
    Annotated as f8e4m3b11fnuz,
    Annotated as f8e4m3fn,
    Annotated as f8e4m3fnuz,
    Annotated as f8e5m2,
    Annotated as f8e5m2fnuz,
    Annotated as f8e8m0fnu,
    Annotated as f16,
    Annotated as f32,
    Annotated as f64,
    Annotated as floating,
    Annotated as i4,
    Annotated as i8,
    Annotated as i16,
    Annotated as i32,
    Annotated as i64,
    Annotated as inexact,
    Annotated as integer,
    Annotated as key,
    Annotated as numeric,
    Annotated as real,
    Annotated as signed,
    Annotated as u4,
    Annotated as u8,
    Annotated as u16,
    Annotated as u32,
    Annotated as u64,
    Annotated as unsigned,
)

if not TYPE_CHECKING:
    raise ImportError("shardtypes._indirection is for static checkers only")

from typing import Any, TypeAlias, TypeVar, Union

_Leaf = TypeVar("_Leaf")

# PyTree[X] accepts any value to static checkers, as jaxtyping's PyTree does (its structure is
# the value's, which no static type says): ``X | Any``.
PyTree: TypeAlias = Union[_Leaf, Any]

__all__ = [
    "PyTree", "Stacked", "anydtype", "bf16", "bool_", "c64", "c128", "f8e3m4", "f8e4m3", "f8e4m3b11fnuz",
    "f8e4m3fn", "f8e4m3fnuz", "f8e5m2", "f8e5m2fnuz", "f8e8m0fnu", "f16", "f32", "f64", "floating",
    "i4", "i8", "i16", "i32", "i64", "integer", "u4", "u8", "u16", "u32", "u64",
    "complexfloating", "inexact", "key", "numeric", "real", "signed", "unsigned",
]
