"""The dtype categories: classes that accept a family of dtypes rather than one (``floating``,
``integer``, ``signed``, ``unsigned``, ``complexfloating``, ``inexact``, ``real``, ``numeric``,
``key``, ``anydtype``), named as numpy names its abstract dtypes and read as JAX reads them."""

from __future__ import annotations

from typing import Any, Callable, cast

import jax
import jax.numpy as jnp
import numpy as np

from .annotations import AnnotationMeta, is_extended, number

__all__ = ["CATEGORIES", "floating", "integer", "signed", "unsigned", "complexfloating", "inexact",
           "real", "numeric", "key", "anydtype"]


def _category(name: str, test: Callable[[np.dtype], bool], description: str,
              extended: Callable[[Any], bool] | None = None) -> type[number]:
    """A class accepting every dtype ``test`` accepts; ``extended`` decides for JAX's extended
    dtypes (PRNG keys), which numpy cannot interpret and which no test sees."""

    def accepts(cls: type[number], dtype: Any) -> bool:
        if is_extended(dtype):
            return extended is not None and extended(dtype)
        return test(np.dtype(dtype))

    namespace = {"accepts": classmethod(accepts), "description": description}
    return cast("type[number]", AnnotationMeta(name, (number,), namespace))


def _kind(kind: Any) -> Callable[[np.dtype], bool]:
    """A test for numpy's abstract dtype ``kind`` (``jnp.floating``), as JAX reads it: bfloat16,
    the float8 and float4 types are floating, int2 and int4 signed integers."""
    return lambda dt: bool(jnp.issubdtype(dt, kind))


def _is_key(dtype: Any) -> bool:
    return bool(jnp.issubdtype(dtype, jax.dtypes.prng_key))


def _is_real(dt: np.dtype) -> bool:
    return bool(jnp.issubdtype(dt, jnp.integer) or jnp.issubdtype(dt, jnp.floating))


# The categories, by numpy's names for its abstract dtypes (jaxtyping's names in brackets):
# anydtype (Shaped), numeric (Num), real (Real), inexact (Inexact), floating (Float),
# complexfloating (Complex), integer (Int), signed (SInt), unsigned (UInt), key (Key).
floating = _category("floating", _kind(jnp.floating), "any floating dtype")
integer = _category("integer", _kind(jnp.integer), "any integer dtype")
signed = _category("signed", _kind(jnp.signedinteger), "any signed integer dtype")
unsigned = _category("unsigned", _kind(jnp.unsignedinteger), "any unsigned integer dtype")
complexfloating = _category("complexfloating", _kind(jnp.complexfloating), "any complex dtype")
inexact = _category("inexact", _kind(jnp.inexact), "any floating or complex dtype")
real = _category("real", _is_real, "any integer or floating dtype (not bool, not complex)")
numeric = _category("numeric", _kind(jnp.number), "any integer, floating or complex dtype (not bool)")
key = _category("key", lambda dt: False, "a typed PRNG key dtype such as key<fry> (from jax.random.key; "
                "a raw uint32 key from jax.random.PRNGKey is not one)", extended=_is_key)
anydtype = _category("anydtype", lambda dt: True, "any dtype", extended=lambda dt: True)

CATEGORIES: tuple[type[number], ...] = (floating, integer, signed, unsigned, complexfloating, inexact, real,
                                        numeric, key, anydtype)

for _cls in CATEGORIES:
    _cls.__module__ = "shardtypes"  # their public home, where pickle finds them
