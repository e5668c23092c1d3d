"""Annotation classes: one per dtype, plus the categories ``floating``, ``integer`` and ``anydtype``.

``f32[b'batch/d embed']`` is a ``types.GenericAlias`` whose origin is the class ``f32`` and whose
single argument is the shape string as bytes. The shape string is parsed (and so validated) when
the annotation is written, and the parse is cached, so checks never re-parse.
"""

from __future__ import annotations

import types

import jax
import jax.numpy as jnp
import numpy as np

from ._shape import ShapeSpec

__all__ = ["number", "dtype_names"]


# Typeguard re-evaluates annotation expressions on every call, so subscription must be cheap.
_ALIASES: dict[tuple[type, object], types.GenericAlias] = {}


class number:
    """Base class of every shardtypes array annotation. Subscript a subclass: ``f32[b'b e']``.

    Subclasses say which dtypes they accept with ``dtype`` (exactly one) or ``accepts`` (a test).
    """

    dtype: np.dtype | None = None
    description: str = "number"

    def __class_getitem__(cls, shape):
        try:
            return _ALIASES[cls, shape]
        except (KeyError, TypeError):  # TypeError: an unhashable "shape", rejected below
            pass
        if cls is number:
            raise TypeError(
                "number is the base class of shardtypes annotations; subscript a dtype class "
                "such as f32[b'batch embed'] or a category such as floating[b'batch embed']"
            )
        if isinstance(shape, tuple) and len(shape) == 1:  # typing re-subscripts with args tuples
            return cls[shape[0]]
        if isinstance(shape, tuple):
            raise TypeError(
                f"{cls.__name__}[...] takes one shape string, as in {cls.__name__}[b'batch embed'];"
                f" got {len(shape)} arguments {shape!r}"
            )
        spec = ShapeSpec.parse(shape)  # validate now: a bad annotation fails where it is written
        key = shape
        if isinstance(shape, str):
            shape = shape.encode("utf-8")
        alias = _ALIASES[cls, key] = types.GenericAlias(cls, shape)
        del spec
        return alias

    @classmethod
    def accepts(cls, dtype) -> bool:
        if _is_extended(dtype):  # PRNG keys and other JAX-only dtypes numpy cannot interpret
            return False
        return dtype == cls.dtype


def _is_extended(dtype) -> bool:
    return bool(jax.dtypes.issubdtype(dtype, jax.dtypes.extended))


def dtype_name(dtype) -> str:
    """``float32``, or ``key<fry>`` for dtypes numpy cannot interpret."""
    return str(dtype) if _is_extended(dtype) else np.dtype(dtype).name


def _category(name: str, test, description: str):
    def accepts(cls, dtype) -> bool:
        if _is_extended(dtype):
            return name == "anydtype"
        return test(np.dtype(dtype))

    return type(name, (number,), {"accepts": classmethod(accepts), "description": description})


def _is_float(dt: np.dtype) -> bool:
    return bool(jnp.issubdtype(dt, jnp.floating))


def _is_int(dt: np.dtype) -> bool:
    return bool(jnp.issubdtype(dt, jnp.integer))


floating = _category("floating", _is_float, "any floating dtype")
integer = _category("integer", _is_int, "any integer dtype")
anydtype = _category("anydtype", lambda dt: True, "any dtype")


# One class per dtype. The class body holds the exact dtype it accepts.

class bool_(number):
    dtype = np.dtype(jnp.bool_)
    description = "bool_"

class bf16(number):
    dtype = np.dtype(jnp.bfloat16)
    description = "bfloat16"

class f16(number):
    dtype = np.dtype(jnp.float16)
    description = "float16"

class f32(number):
    dtype = np.dtype(jnp.float32)
    description = "float32"

class f64(number):
    dtype = np.dtype(jnp.float64)
    description = "float64"

class i4(number):
    dtype = np.dtype(jnp.int4)
    description = "int4"

class i8(number):
    dtype = np.dtype(jnp.int8)
    description = "int8"

class i16(number):
    dtype = np.dtype(jnp.int16)
    description = "int16"

class i32(number):
    dtype = np.dtype(jnp.int32)
    description = "int32"

class i64(number):
    dtype = np.dtype(jnp.int64)
    description = "int64"

class u4(number):
    dtype = np.dtype(jnp.uint4)
    description = "uint4"

class u8(number):
    dtype = np.dtype(jnp.uint8)
    description = "uint8"

class u16(number):
    dtype = np.dtype(jnp.uint16)
    description = "uint16"

class u32(number):
    dtype = np.dtype(jnp.uint32)
    description = "uint32"

class u64(number):
    dtype = np.dtype(jnp.uint64)
    description = "uint64"

class c64(number):
    dtype = np.dtype(jnp.complex64)
    description = "complex64"

class c128(number):
    dtype = np.dtype(jnp.complex128)
    description = "complex128"

class f8e3m4(number):
    dtype = np.dtype(jnp.float8_e3m4)
    description = "float8_e3m4"

class f8e4m3(number):
    dtype = np.dtype(jnp.float8_e4m3)
    description = "float8_e4m3"

class f8e4m3b11fnuz(number):
    dtype = np.dtype(jnp.float8_e4m3b11fnuz)
    description = "float8_e4m3b11fnuz"

class f8e4m3fn(number):
    dtype = np.dtype(jnp.float8_e4m3fn)
    description = "float8_e4m3fn"

class f8e4m3fnuz(number):
    dtype = np.dtype(jnp.float8_e4m3fnuz)
    description = "float8_e4m3fnuz"

class f8e5m2(number):
    dtype = np.dtype(jnp.float8_e5m2)
    description = "float8_e5m2"

class f8e5m2fnuz(number):
    dtype = np.dtype(jnp.float8_e5m2fnuz)
    description = "float8_e5m2fnuz"

class f8e8m0fnu(number):
    dtype = np.dtype(jnp.float8_e8m0fnu)
    description = "float8_e8m0fnu"


dtype_classes: dict[str, type] = {
    cls.__name__: cls for cls in number.__subclasses__() if cls.dtype is not None
}
for _cls in (*dtype_classes.values(), floating, integer, anydtype):
    _cls.__module__ = "shardtypes"  # reprs read shardtypes.f32[b'...']
del _cls


def dtype_names() -> list[str]:
    """The names of the dtype classes, e.g. ``['bool_', 'bf16', ...]``."""
    return list(dtype_classes)
