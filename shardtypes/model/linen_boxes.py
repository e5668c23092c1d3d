"""Flax Linen's boxes as annotations: ``nn.Partitioned`` (names are mesh axes) and
``nn.LogicallyPartitioned`` (names are logical axes, resolved through the active ``AxisRules``),
as ``jax.eval_shape(model.init, ...)`` returns them. A box reads as the array annotation of its
value's dtype with one dim per axis, each dim its fixed size followed by the box's name for it:

>>> box = nn.LogicallyPartitioned(jax.ShapeDtypeStruct((8, 32), jnp.float32), ('embed', 'mlp'))  # doctest: +SKIP
>>> box_annotation(box)  # doctest: +SKIP
f32[b'8/embed 32/mlp']

Fixed sizes, not the names, say the sizes: a logical name may stand for dims of several sizes
across a model, and a fixed size is also checked to divide over the mesh axes it lands on.
Flax is not imported here: a box exists only if Flax is loaded already.
"""

from __future__ import annotations

import sys
from typing import Any, Callable

from ..language import ShapeSpecError
from .annotations import dtype_classes, subscript
from .categories import anydtype

__all__ = ["is_box", "box_annotation"]


def _box_class() -> type | None:
    meta = sys.modules.get("flax.core.meta")
    return getattr(meta, "Partitioned", None) if meta is not None else None


def is_box(x: Any) -> bool:
    """Whether ``x`` is a Linen ``nn.Partitioned`` or ``nn.LogicallyPartitioned`` box."""
    cls = _box_class()
    return cls is not None and isinstance(x, cls)


# Annotations by (box class, shape, dtype, names): a model's layers repeat a few boxes.
_ANNOTATIONS: dict[tuple, Any] = {}
_ANNOTATIONS_MAX = 4096


def box_annotation(box: Any, where: str | Callable[[], str] = "") -> Any:
    """The shardtypes annotation a Linen box says (see the module); ``where`` (or what it
    returns, called only for an error) names it in errors."""
    value = box.value
    shape, dtype = getattr(value, "shape", None), getattr(value, "dtype", None)
    key: tuple | None = None
    if shape is not None:
        try:
            key = (type(box), tuple(shape), dtype, tuple(box.names))
            hit = _ANNOTATIONS.get(key)
        except TypeError:  # unhashable names: the slow path says what is wrong
            key = None
        else:
            if hit is not None:
                return hit
    annotation = _box_annotation(box, shape, dtype, where() if callable(where) else where)
    if key is not None:
        if len(_ANNOTATIONS) >= _ANNOTATIONS_MAX:
            _ANNOTATIONS.clear()
        _ANNOTATIONS[key] = annotation
    return annotation


def replicated_annotation(value: Any, where: str) -> Any:
    """The annotation of an array in no box, laid out as Flax lays it out: replicated
    (``f32[b'8 32']``: its sizes, no mesh axis)."""
    shape, dtype = getattr(value, "shape", None), getattr(value, "dtype", None)
    if shape is None or dtype is None:
        raise TypeError(f"{where}: {type(value).__name__} is not an array")
    return _annotation_of(tuple(shape), dtype, (None,) * len(shape), where)


def _box_annotation(box: Any, shape: Any, dtype: Any, where: str) -> Any:
    at = where or "the box"
    value = box.value
    if shape is None or dtype is None:
        raise TypeError(f"{at}: a {type(box).__name__} box holds {type(value).__name__}, not an array")
    return _annotation_of(tuple(shape), dtype, tuple(box.names), at, type(box).__name__)


def _annotation_of(shape: tuple, dtype: Any, names: tuple, at: str, box: str = "") -> Any:
    if len(names) != len(shape):
        raise ValueError(
            f"{at}: the {box} box names {len(names)} axes {names} for a value of shape "
            f"{tuple(shape)}, so which dim each name lays out is a guess (Flax itself pads the names "
            "with None at the end and so may shard the wrong dim: a layer that boxes a kernel and "
            "reshapes it, as nn.DenseGeneral does with several out or in dims); give the box one "
            "name per dim of the value (nn.with_logical_partitioning(init, names) with "
            f"{len(shape)} names)"
        )
    dims = []
    for size, name in zip(shape, names):
        axes = name if isinstance(name, tuple) else (name,)
        if not all(a is None or isinstance(a, str) for a in axes):
            raise TypeError(f"{at}: the box's names must be strings, tuples of them or None, got {name!r}")
        dims.append("/".join([str(size), *(a for a in axes if a is not None)]))
    cls = next((c for c in dtype_classes.values() if c.accepts(dtype)), anydtype)
    try:
        return subscript(cls, " ".join(dims))
    except ShapeSpecError as e:
        raise ValueError(f"{at}: the box's names {names} are not axis names shardtypes can write: {e}") from None
