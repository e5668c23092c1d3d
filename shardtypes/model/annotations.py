"""Annotation classes: one per dtype, plus categories of dtypes (``floating``, ``integer``,
``signed``, ``unsigned``, ``complexfloating``, ``inexact``, ``real``, ``numeric``, ``key``,
``anydtype``).

Subscripting one gives a class (cached: the same arguments give the same class)::

    f32[b'batch/d embed']              # seqax's spelling, read at run time only
    f32[jax.Array, b'batch/d embed']   # the static spelling: the value must also be a jax.Array
    f32[jax.Array | np.ndarray, b'b e']  # host-or-device: either class (see array_classes.py)

``f32['a b'] is f32[b'a b']``; the class is a subclass of ``f32`` that says its shape
(``.shape_string``, bytes; ``.spec``, the parsed ``ShapeSpec``) and array type (``.array_type``, or
None). ``isinstance(x, f32[b'batch embed'])`` checks dtype, rank, sizes and sharding (see
``AnnotationMeta.__instancecheck__``); the class pickles to itself and its repr is what was
written. The shape string is parsed (and so validated) when the annotation is written.

Static checkers never see these classes: under ``TYPE_CHECKING`` the package binds the names to
``typing.Annotated`` (``shardtypes/_indirection.py``), so ``f32[jax.Array, b'...']`` reads as
``jax.Array``.
"""

from __future__ import annotations

import copyreg
import types
from typing import Any, Callable, ClassVar, Union, cast

import jax
import jax.numpy as jnp
import numpy as np

from ..language import ShapeSpec
from .array_classes import check_union, union_members, union_of

__all__ = ["number", "dtype_names", "annotation_class", "is_annotation", "is_dtype_class", "subscript", "type_name"]


# Typeguard re-evaluates annotation expressions on every call, so subscription must be cheap: a
# dict lookup keyed on what was written. _CANONICAL holds one class per (dtype class, array type,
# shape bytes), so 'a b' and b'a b' give the same class.
_ANNOTATIONS: dict[tuple[type, object], type[number]] = {}
_CANONICAL: dict[tuple[type, Any, bytes], type[number]] = {}

# isinstance(x, f32[b'...']) needs the checker, which sits in a later layer; it installs itself
# with install_instance_check when shardtypes is imported.
_instance_check: Callable[[type[number], object], bool] | None = None


def install_instance_check(check: Callable[[type[number], object], bool]) -> None:
    global _instance_check
    _instance_check = check


def _refuse_nested(cls: type, inner: type, shape: Any) -> type[number]:
    raise TypeError(f"{cls.__name__}[{inner!r}, ...]: an annotation as the array type needs shardtypes.model")


# f32[floating[jax.Array, b'a'], b'b'] (an annotation as the array type) is nesting.py's, which
# installs itself when the model layer is imported.
_nested: Callable[[type, type, Any], type[number]] = _refuse_nested


def install_nested(nested: Callable[[type, type, Any], type[number]]) -> None:
    global _nested
    _nested = nested


# Classes whose own module and qualname do not lead back to them (jax.Array says it is
# jaxlib._jax.Array in module jax): named, and pickled, by their public name.
_PUBLIC_NAMES: dict[type, str] = {jax.Array: "jax.Array"}
_BY_PUBLIC_NAME: dict[str, type] = {name: cls for cls, name in _PUBLIC_NAMES.items()}


def type_name(cls: type | types.UnionType) -> str:
    """``jax.Array``, ``numpy.ndarray``, ``jax.Array | numpy.ndarray``: how a user names the class."""
    members = union_members(cls)
    if members is not None:
        return " | ".join(type_name(m) for m in members)
    assert isinstance(cls, type)
    public = _PUBLIC_NAMES.get(cls)
    if public is not None:
        return public
    module = getattr(cls, "__module__", "")
    return cls.__qualname__ if module == "builtins" else f"{module}.{cls.__qualname__}"


class AnnotationMeta(type):
    """The metaclass of the dtype classes and of their subscripts: ``isinstance`` checks arrays
    against the annotation, ``repr`` says what was written, pickling goes by recipe (a subscript
    is made on demand, so it cannot be found by module and name)."""

    def __repr__(cls) -> str:
        text = cls.__dict__.get("_text")
        return f"shardtypes.{text}" if isinstance(text, str) else super().__repr__()

    def __instancecheck__(cls, value: object) -> bool:
        """``isinstance(x, f32[b'batch embed'])``: dtype, rank, sizes and sharding, against the
        current dimension table if there is one (new sizes are bound into it, as ``check``
        does), else a fresh one; ``config.checks`` does not turn it off. A bare dtype class
        (``isinstance(x, f32)``) means any shape; ``number`` is a plain class."""
        if cls is number or _instance_check is None:
            return super().__instancecheck__(value)
        annotation = annotation_class(cls) or subscript(cls, b"...")
        return _instance_check(annotation, value)


def _reduce(cls: AnnotationMeta) -> Union[str, tuple[Callable[..., type[number]], tuple[Any, ...]]]:
    annotation = annotation_class(cls)
    if annotation is None:
        return cls.__qualname__  # a dtype class: found by module and name
    array_type = annotation.array_type
    members = union_members(array_type)
    if members is not None:  # a union pickles as its members
        return _subscript, (annotation.dtype_class, tuple(_PUBLIC_NAMES.get(m) or m for m in members),
                            annotation.shape_string)
    named = _PUBLIC_NAMES.get(array_type) if isinstance(array_type, type) else None
    return _subscript, (annotation.dtype_class, named or array_type, annotation.shape_string)


copyreg.pickle(AnnotationMeta, _reduce)


def _subscript(dtype_class: type[number], array_type: Any, shape: bytes) -> type[number]:
    if isinstance(array_type, str):
        array_type = _BY_PUBLIC_NAME[array_type]
    elif isinstance(array_type, tuple):
        array_type = union_of(tuple(_BY_PUBLIC_NAME[m] if isinstance(m, str) else m for m in array_type))
    return subscript(dtype_class, shape if array_type is None else (array_type, shape))


class number(metaclass=AnnotationMeta):
    """Base class of every shardtypes array annotation. Subscript a subclass: ``f32[b'b e']``,
    ``f32[jax.Array, b'b e']``.

    Subclasses say which dtypes they accept with ``dtype`` (exactly one) or ``accepts`` (a test).
    A subscript is a subclass of its dtype class with ``shape_string``, ``spec`` and ``array_type`` set
    (None on the dtype classes themselves) and ``dtype_class`` naming the dtype class.
    """

    dtype: ClassVar[np.dtype | None] = None
    description: ClassVar[str] = "number"
    shape_string: ClassVar[bytes | None] = None
    spec: ClassVar[ShapeSpec | None] = None
    array_type: ClassVar[type | types.UnionType | None] = None
    dtype_class: ClassVar[type[number]]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "dtype_class" not in cls.__dict__:  # a dtype class or category (subscripts set it)
            cls.dtype_class = cls

    def __class_getitem__(cls, key: Any) -> type[number]:
        try:
            return _ANNOTATIONS[cls, key]
        except (KeyError, TypeError):  # TypeError: an unhashable key, explained below
            return _make(cls, key)

    @classmethod
    def accepts(cls, dtype: Any) -> bool:
        if is_extended(dtype):  # PRNG keys and other JAX-only dtypes numpy cannot interpret
            return False
        return bool(dtype == cls.dtype)


def subscript(cls: type, key: Any) -> type[number]:
    """``cls[key]``, for code that holds the class as a plain ``type``."""
    try:
        return _ANNOTATIONS[cls, key]
    except (KeyError, TypeError):
        return _make(cls, key)


def _make(cls: type, key: Any) -> type[number]:
    if cls is number:
        raise TypeError(
            "number is the base class of shardtypes annotations; subscript a dtype class "
            "such as f32[jax.Array, b'batch embed'] or a category such as floating[b'batch embed']"
        )
    if not issubclass(cls, number):
        raise TypeError(f"{cls!r} is not a shardtypes dtype class")
    name = cls.dtype_class.__name__
    if cls.shape_string is not None:
        raise TypeError(f"{cls!r} already has a shape; subscript the dtype class, as in {name}[b'batch embed']")
    array_type: Any = None
    shape = key
    if isinstance(key, tuple):
        if len(key) == 1:  # typing re-subscripts with args tuples
            return subscript(cls, key[0])
        if len(key) != 2 or isinstance(key[0], (str, bytes)):
            raise TypeError(
                f"{name}[...] takes a shape string, as in {name}[b'batch embed'], or an array type "
                f"and a shape string, as in {name}[jax.Array, b'batch embed']; got {_shown(key)}"
            )
        array_type, shape = key
        members = union_members(array_type)
        if members is not None:  # f32[jax.Array | np.ndarray, ...]: normalised to X | Y
            array_type = union_of(check_union(name, shape, members))
        elif not isinstance(array_type, type):
            raise TypeError(
                f"{name}[array_type, shape]: array_type must be a class such as jax.Array or "
                f"numpy.ndarray, or a union of them (jax.Array | np.ndarray), got {array_type!r}"
            )
        inner = annotation_class(array_type)
        if inner is not None:
            nested = _nested(cls, inner, shape)
            _ANNOTATIONS[cls, key] = nested  # (hashable: it has been a dict key above)
            return nested
        if isinstance(array_type, AnnotationMeta):
            raise TypeError(
                f"{name}[array_type, shape]: array_type is the dtype class {array_type.__name__}, which "
                f"has no shape; write {name}[jax.Array, shape] (or {array_type.__name__}[jax.Array, shape])"
            )
    spec = ShapeSpec.parse(shape)  # validate now: a bad annotation fails where it is written
    data = shape.encode("utf-8") if isinstance(shape, str) else shape
    canonical = (cls, array_type, data)
    made = _CANONICAL.get(canonical)
    if made is None:
        text = f"{name}[{data!r}]" if array_type is None else f"{name}[{type_name(array_type)}, {data!r}]"
        namespace = {
            "__module__": "shardtypes",
            "__qualname__": text,
            "__doc__": f"The array annotation {text}.",
            "_text": text,
            "shape_string": data,
            "spec": spec,
            "array_type": array_type,
            "dtype_class": cls,
        }
        # A metaclass call makes the class; checkers cannot tell it is a subclass of cls. Two
        # threads may make one at once: setdefault keeps the first, so there is one class.
        made = _CANONICAL.setdefault(canonical, cast("type[number]", AnnotationMeta(text, (cls,), namespace)))
    try:
        _ANNOTATIONS[cls, key] = made
    except TypeError:
        pass
    return made


def _shown(key: Any) -> str:
    """What was written in a subscript, classes by their public names: ``(jax.Array, 'a', 'b')``."""
    if isinstance(key, tuple):
        return "(" + ", ".join(_shown(k) for k in key) + ("," if len(key) == 1 else "") + ")"
    return type_name(key) if isinstance(key, type) else repr(key)


def is_annotation(obj: object) -> bool:
    """Whether ``obj`` is a subscripted annotation class (``f32[b'...']``)."""
    return isinstance(obj, AnnotationMeta) and "_text" in obj.__dict__


def annotation_class(obj: object) -> type[number] | None:
    """``obj`` itself if it is a subscripted annotation class (``f32[b'...']``), else None."""
    if isinstance(obj, type) and issubclass(obj, number) and obj.shape_string is not None:
        return obj
    return None


def is_dtype_class(obj: object) -> bool:
    """Whether ``obj`` is a dtype class or category (``f32``, ``floating``), not subscripted."""
    return isinstance(obj, type) and issubclass(obj, number) and obj is not number and obj.shape_string is None


def is_extended(dtype: Any) -> bool:
    return bool(jnp.issubdtype(dtype, jax.dtypes.extended))


def dtype_name(dtype: Any) -> str:
    """``float32``, or ``key<fry>`` for dtypes numpy cannot interpret."""
    return str(dtype) if is_extended(dtype) else np.dtype(dtype).name


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


dtype_classes: dict[str, type[number]] = {
    cls.__name__: cls for cls in number.__subclasses__() if cls.dtype is not None
}
for _cls in dtype_classes.values():
    _cls.__module__ = "shardtypes"  # their public home, where pickle finds them


def dtype_names() -> list[str]:
    """The names of the dtype classes, e.g. ``['bool_', 'bf16', ...]``."""
    return list(dtype_classes)
