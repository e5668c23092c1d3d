"""An annotation as the array type of another, as jaxtyping users write it:
``floating[f32[jax.Array, b'a'], b'b']`` is ``f32[jax.Array, b'b a']``. The outer shape's dims
go before the inner's (jaxtyping's meaning), the dtype is the narrower of the two, and the array
type is the inner one's. Two dtypes with nothing in common, or dims that make no shape together
(two variadics, a mesh axis on both), are a TypeError where the annotation is written.
"""

from __future__ import annotations

from typing import Any

from ..language import ShapeSpec
from .annotations import dtype_classes, install_nested, number, subscript

__all__: list[str] = []


def prepend(cls: type[number], inner: type[number], shape: Any) -> type[number]:
    """``floating[f32[jax.Array, b'a'], b'b']`` is ``f32[jax.Array, b'b a']``, as in jaxtyping: the
    outer shape's dims go before the inner's, and the dtype is the narrower of the two."""
    outer_spec = ShapeSpec.parse(shape)
    written = f"{cls.dtype_class.__name__}[{inner!r}, {shape!r}]".replace("shardtypes.", "")
    dtype_class = _narrower(cls.dtype_class, inner.dtype_class)
    if dtype_class is None:
        raise TypeError(
            f"{written}: no dtype is both {cls.dtype_class.__name__} and {inner.dtype_class.__name__}, "
            "so nothing could pass; an annotation as the array type adds its dims after the outer "
            "ones and keeps the dtypes both accept"
        )
    combined = " ".join(part for part in (str(outer_spec), str(inner.spec)) if part)
    try:
        ShapeSpec.parse(combined)
    except ValueError as e:
        raise TypeError(f"{written} means shape {combined!r} (the outer dims first), "
                        f"which is not a shape: {e}") from None
    data = combined.encode("utf-8")
    return subscript(dtype_class, data if inner.array_type is None else (inner.array_type, data))


def _narrower(a: type[number], b: type[number]) -> type[number] | None:
    """Of two dtype classes or categories, the one whose dtypes the other accepts too; None if
    neither (the dtypes both accept are no class of ours, or there are none)."""
    if a is b:
        return a
    known = [c.dtype for c in dtype_classes.values()]
    in_a = {d for d in known if a.accepts(d)}
    in_b = {d for d in known if b.accepts(d)}
    if in_a and in_a <= in_b:
        return a
    if in_b and in_b <= in_a:
        return b
    return None

install_nested(prepend)
