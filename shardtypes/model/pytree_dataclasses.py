"""Trees: pytree dataclasses and stacked layers (``Array[axes, cls]``, ``Stacked[cls, axes]``).

>>> @pytree_dataclass
... class Layer:
...     w_up: f32[jax.Array, b'embed/d hidden/t']
...     w_down: f32[jax.Array, b'hidden/t embed/d']
>>> Layers = Array['layers', Layer]     # every field gets a leading 'layers' dim
>>> Stacked[Layer, b'layers'] is Layers  # the same, in the spelling static checkers read as Layer
True

A value of ``Array['layers', Layer]`` is an instance of that (generated, cached) dataclass. The
slice ``lax.scan`` hands its body is an instance of the same class holding one layer's arrays; it
type-checks against ``Layer``, because a check of a pytree dataclass accepts any stacking of the
same base class and checks the fields against the annotation's own field types.
"""

from __future__ import annotations

import copyreg
import dataclasses
import functools
import inspect
import types
import typing
from typing import Any, Callable, TypeVar, Union, dataclass_transform, overload

import jax

from ..language import FIXED, NAMED, ShapeSpec
from .annotations import annotation_class, subscript
from .hints import resolve_hints

__all__ = ["pytree_dataclass", "Array", "Stacked", "tree_info", "stack_annotation"]

_T = TypeVar("_T")

# typing.Union subscripted with a tuple of members built at run time.
_Union: Any = Union


class TreeInfo:
    """What shardtypes knows of a registered pytree dataclass: the unstacked class it stacks
    (``base``, itself when not stacked), the leading axes it adds, and its field types."""

    __slots__ = ("cls", "base", "axes", "_types", "data_fields", "static_fields", "field_names")

    def __init__(self, cls: type, base: type, axes: str, data: tuple[str, ...] | None = None):
        self.cls = cls
        self.base = base
        self.axes = axes
        self._types: dict[str, Any] | None = None
        fields = dataclasses.fields(cls)
        if data is None:
            data = tuple(f.name for f in fields if not _is_static(f))
        self.data_fields: tuple[str, ...] = data
        self.static_fields: frozenset[str] = frozenset(f.name for f in fields if f.name not in data)
        self.field_names: tuple[str, ...] = tuple(f.name for f in fields)

    @property
    def field_types(self) -> dict[str, Any]:
        """Field name -> resolved annotation, for every field (PEP 563 strings resolved)."""
        if self._types is None:
            hints = resolve_hints(self.cls, "pytree_dataclass")
            self._types = {f.name: hints.get(f.name, Any) for f in dataclasses.fields(self.cls)}
        return self._types


INFO: dict[type, TreeInfo] = {}


def tree_info(cls: Any) -> TreeInfo | None:
    return INFO.get(cls) if isinstance(cls, type) else None


def _is_static(field: dataclasses.Field[Any]) -> bool:
    return bool(field.metadata.get("static", False))


@overload
def pytree_dataclass(cls: type[_T], /) -> type[_T]: ...


@overload
def pytree_dataclass(
    cls: None = None,
    /,
    *,
    init: bool = True,
    repr: bool = True,
    eq: bool = True,
    order: bool = False,
    unsafe_hash: bool = False,
    frozen: bool = False,
    match_args: bool = True,
    kw_only: bool = False,
    slots: bool = False,
    weakref_slot: bool = False,
) -> Callable[[type[_T]], type[_T]]: ...


@dataclass_transform(field_specifiers=(dataclasses.field, dataclasses.Field))
def pytree_dataclass(
    cls: type[_T] | None = None, /, **dataclass_options: Any
) -> type[_T] | Callable[[type[_T]], type[_T]]:
    """A dataclass registered as a JAX pytree with attribute keys (``keystr`` gives ``.w_q``).

    Fields with ``field(metadata={'static': True})`` are static (part of the tree structure, not
    leaves). Takes the options of ``dataclasses.dataclass`` (``frozen=True``, ...); an existing
    dataclass is registered as it is. Passed to a checked function, it is checked field by
    field, and a failure names the path (``state.weights.w_q``).

    >>> @pytree_dataclass
    ... class Attention:
    ...     w_q: f32[b'embed/d heads/t head_dim']
    ...     heads: int = field(default=8, metadata={'static': True})
    """
    if cls is None:
        def decorate(cls: type[_T]) -> type[_T]:
            return _pytree_dataclass(cls, **dataclass_options)

        return decorate
    return _pytree_dataclass(cls, **dataclass_options)


# The options dataclasses.dataclass takes (all keyword-only).
_DATACLASS_OPTIONS = frozenset(inspect.signature(dataclasses.dataclass).parameters) - {"cls"}


def _pytree_dataclass(cls: type[_T], **dataclass_options: Any) -> type[_T]:
    if not isinstance(cls, type):
        raise TypeError(f"pytree_dataclass expects a class, got {cls!r}")
    unknown = sorted(set(dataclass_options) - _DATACLASS_OPTIONS)
    if unknown:
        raise TypeError(
            f"pytree_dataclass({cls.__qualname__}): unknown options {unknown}; it takes the "
            f"dataclass options {sorted(_DATACLASS_OPTIONS)}"
        )
    if "__dataclass_fields__" not in cls.__dict__:
        cls = dataclasses.dataclass(cls, **dataclass_options)
    elif dataclass_options:
        raise TypeError(
            f"{cls.__qualname__} is already a dataclass; pass options to @dataclass or to "
            "@pytree_dataclass, not both"
        )
    return _register(cls, cls, "")


def _register(cls: type[_T], base: type, axes: str) -> type[_T]:
    if cls in INFO:
        return cls
    if not dataclasses.is_dataclass(cls):
        raise TypeError(f"pytree_dataclass: {cls.__qualname__} is not a dataclass")
    no_init = [f.name for f in dataclasses.fields(cls) if not f.init]
    if no_init:
        raise TypeError(
            f"pytree_dataclass {cls.__qualname__}: fields {no_init} have init=False; a pytree "
            "dataclass is rebuilt from its fields, so every field must be an __init__ argument"
        )
    registered = _registered_data_fields(cls)
    if registered is not None:
        # Already a pytree (jax.tree_util.register_dataclass, flax.struct.dataclass, an
        # eqx.Module): registering again is JAX's error; it keeps its own registration, and
        # shardtypes reads which fields are leaves from it.
        INFO[cls] = TreeInfo(cls, base, axes, registered)
        return cls
    data = [f.name for f in dataclasses.fields(cls) if not _is_static(f)]
    meta = [f.name for f in dataclasses.fields(cls) if _is_static(f)]
    jax.tree_util.register_dataclass(cls, data_fields=data, meta_fields=meta)
    INFO[cls] = TreeInfo(cls, base, axes)
    return cls


class _Probe:
    """A field value that flattening shows as a leaf, or keeps in the tree structure."""

    __slots__ = ("name",)

    def __init__(self, name: str):
        self.name = name


def _registered_data_fields(cls: type) -> tuple[str, ...] | None:
    """The fields a class already registered as a pytree flattens to leaves (in field order);
    None if it is not registered. Read by flattening an instance whose fields are probes (no
    __init__ runs)."""
    probe: Any = object.__new__(cls)
    fields = dataclasses.fields(cls)
    for f in fields:
        object.__setattr__(probe, f.name, _Probe(f.name))
    try:
        leaves, treedef = jax.tree_util.tree_flatten(probe)
    except Exception as e:  # a registration whose flatten needs more than the fields
        raise TypeError(
            f"pytree_dataclass: {cls.__qualname__} is already registered as a pytree, and its "
            f"fields could not be read from its registration ({type(e).__name__}: {e}); use the "
            "class as it is registered (shardtypes checks it field by field)"
        ) from None
    if jax.tree_util.treedef_is_leaf(treedef):
        return None
    found = {leaf.name for leaf in leaves if isinstance(leaf, _Probe)}
    return tuple(f.name for f in fields if f.name in found)


# ---------------------------------------------------------------------------------------------
# Stacking.


class _StackedMeta(type):
    """The metaclass of ``Array[axes, cls]`` classes: a readable repr, and pickling by recipe
    (such a class is made on demand, so it cannot be found by module and name)."""

    def __repr__(cls) -> str:
        info = INFO.get(cls)
        if info is None:
            return super().__repr__()
        return f"shardtypes.Array[{info.axes!r}, {info.base.__module__}.{info.base.__qualname__}]"


def _reduce_stacked(cls: _StackedMeta) -> tuple[Callable[..., Any], tuple[str, type]]:
    info = INFO[cls]
    return (_stacked_dataclass, (info.axes, info.base))


copyreg.pickle(_StackedMeta, _reduce_stacked)


def _normalise_axes(axes: Any) -> str:
    if not isinstance(axes, (str, bytes)):
        raise TypeError(f"Array[axes, cls]: axes must be a str or bytes shape string, got {axes!r}")
    spec = ShapeSpec.parse(axes)  # bytes that are not UTF-8 are a ShapeSpecError there
    if isinstance(axes, bytes):
        axes = axes.decode("utf-8")
    if not spec.dims:
        raise TypeError("Array[axes, cls]: axes must name at least one dim, as in Array['layers', Layer]")
    if spec.variadic_index is not None:
        raise TypeError(f"Array[{axes!r}, cls]: stacked axes cannot be variadic ('...' or '*name')")
    for dim in spec.dims:
        if dim.kind not in (NAMED, FIXED):
            raise TypeError(
                f"Array[{axes!r}, cls]: stacking dims must be names or integers (optionally sharded, "
                f"as 'layers' or 'layers/p'), not {dim.shape!r}"
            )
    return str(spec)


def stack_annotation(axes: str, annotation: Any, where: str = "") -> Any:
    """``annotation`` with leading dims ``axes``: array annotations, pytree dataclasses, and
    Optional/tuple of those."""
    array = annotation_class(annotation)
    if array is not None:
        shape = (axes + " " + (array.shape_string or b"").decode("utf-8")).strip()
        return subscript(array.dtype_class, shape if array.array_type is None else (array.array_type, shape))
    info = tree_info(annotation)
    if info is not None:
        full = (axes + " " + info.axes).strip()
        return _stacked_dataclass(_normalise_axes(full), info.base)
    origin = typing.get_origin(annotation)
    if origin is Union:
        return _Union[tuple(
            a if a is type(None) else stack_annotation(axes, a, where) for a in typing.get_args(annotation)
        )]
    if origin is tuple:
        args = typing.get_args(annotation)
        if len(args) == 2 and args[1] is Ellipsis:
            return types.GenericAlias(tuple, (stack_annotation(axes, args[0], where), ...))
        return types.GenericAlias(tuple, tuple(stack_annotation(axes, a, where) for a in args))
    raise TypeError(
        f"Array[{axes!r}, ...]: cannot stack {where or 'an annotation'} of type {annotation!r}; "
        "stack array annotations, pytree dataclasses, Optional and tuple of them, or mark the "
        "field static with field(metadata={'static': True})"
    )


@functools.lru_cache(maxsize=None)
def _stacked_dataclass(axes: str, base: type) -> type:
    info = INFO[base]
    fields: list[tuple[str, Any, dataclasses.Field[Any]]] = []
    for f in dataclasses.fields(base):
        ftype = info.field_types[f.name]
        metadata: Any = f.metadata
        if f.name not in info.static_fields:
            ftype = stack_annotation(axes, ftype, f"field {base.__qualname__}.{f.name}")
        elif not _is_static(f):  # static in the base's own registration (flax's pytree_node=False)
            metadata = {**f.metadata, "static": True}
        kwargs: dict[str, Any] = {"metadata": metadata, "repr": f.repr, "compare": f.compare, "kw_only": f.kw_only}
        if f.default is not dataclasses.MISSING:
            kwargs["default"] = f.default
        if f.default_factory is not dataclasses.MISSING:
            kwargs["default_factory"] = f.default_factory
        fields.append((f.name, ftype, dataclasses.field(**kwargs)))
    params = getattr(base, "__dataclass_params__")
    name = f"{base.__name__}_stacked"
    namespace = {"__module__": base.__module__, "__qualname__": f"Array[{axes!r}, {base.__qualname__}]"}
    cls = types.new_class(name, (), {"metaclass": _StackedMeta}, lambda ns: ns.update(namespace))
    for fname, ftype, fobj in fields:
        setattr(cls, fname, fobj)
    cls.__annotations__ = {fname: ftype for fname, ftype, _ in fields}
    cls = dataclasses.dataclass(cls, frozen=params.frozen, eq=params.eq, order=params.order,
                                unsafe_hash=params.unsafe_hash)
    _register(cls, base, axes)
    # The field types are already resolved objects; record them so no string lookup happens.
    INFO[cls]._types = {fname: ftype for fname, ftype, _ in fields}
    return cls


class Array:
    """``Array[axes, cls]``: ``cls`` with leading dims ``axes`` prepended (run time only; static
    checkers read ``Stacked[cls, axes]``, the same class, as ``cls``).

    ``cls`` is an array annotation (``Array['layers', f32[b'embed hidden']]`` is
    ``f32[b'layers embed hidden']``) or a pytree dataclass (every data field stacked; static
    fields, defaults and frozenness kept). Several axes and sharded axes work:
    ``Array['stages layers', Layer]``, ``Array['layers/p', Layer]``. The same arguments give the
    same class, which pickles and whose repr says what it is.
    """

    def __class_getitem__(cls, key: Any) -> Any:
        if not isinstance(key, tuple) or len(key) != 2:
            raise TypeError(f"write Array[axes, cls], as in Array['layers', Layer]; got Array[{key!r}]")
        axes, inner = key
        axes = _normalise_axes(axes)
        return stack_annotation(axes, inner)


class Stacked:
    """``Stacked[Layer, b'layers']`` is ``Array['layers', Layer]``: ``cls`` with leading dims
    ``axes``. Static checkers read it as ``Layer`` (``shardtypes`` binds ``Stacked`` to
    ``typing.Annotated`` for them), which is what ``lax.scan`` hands its body."""

    def __class_getitem__(cls, key: Any) -> Any:
        if not isinstance(key, tuple) or len(key) != 2:
            raise TypeError(f"write Stacked[cls, axes], as in Stacked[Layer, b'layers']; got Stacked[{key!r}]")
        inner, axes = key
        if isinstance(inner, (str, bytes)) and not isinstance(axes, (str, bytes)):
            raise TypeError(
                f"Stacked[cls, axes] takes the class first, as in Stacked[Layer, b'layers']; got "
                f"Stacked[{inner!r}, {axes!r}] (Array takes the axes first)"
            )
        return stack_annotation(_normalise_axes(axes), inner)
