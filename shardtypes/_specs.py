"""Deriving layouts from annotations: PartitionSpecs, NamedShardings, ShapeDtypeStructs, and
laying values out (``shard``).

Every function here walks an *annotation tree*: an array annotation (``f32[b'b/d e']``), a pytree
dataclass class (including ``Array[axes, cls]``), ``tuple[...]``, ``Optional[X]``, a NamedTuple
class, or plain Python tuples, lists and dicts whose leaves are annotations. The result has the
shape of the value the annotation describes:

>>> make_partition_specs(Layer)          # doctest: +SKIP
Layer(w_up=P('d', 't'), w_down=P('t', 'd'))
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from typing import Any, Callable, Mapping, Union

import jax
import jax.core
from jax.sharding import NamedSharding, PartitionSpec

from ._mesh import current_mesh, no_mesh_error
from ._dtypes import annotation_class, is_annotation, number
from ._shape import (
    ANY, BROADCAST, ELLIPSIS, EXPR, FIXED, NAMED, VARIADIC, ShapeSpec, axes_entry, divides, entry_axes, evaluate,
)
from ._check import axis_hint, plan_of
from ._rules import AxisRulesError, choices as rules_choices, current_rules, layout as rules_layout
from ._model import ArrayNode, ClassNode, follow, model
from ._trees import tree_info

__all__ = [
    "make_partition_specs",
    "make_shardings",
    "make_shape_dtype_structs",
    "shard",
    "is_fully_sharded",
    "current_mesh",
]


class _Leaf(typing.NamedTuple):
    path: str
    dtype_cls: type[number]
    spec: ShapeSpec
    text: str
    annotation: Any


def _leaf_of(annotation: type[number], path: str) -> _Leaf:
    plan = plan_of(annotation)
    return _Leaf(path, plan.dtype_cls, plan.spec, plan.text, annotation)


def _walk(
    annotation: Any,
    leaf: Callable[[_Leaf], Any],
    path: str | None = None,
    fast: Callable[[Any], Any] | None = None,
) -> Any:
    """Maps ``leaf`` over the array annotations of an annotation tree, keeping its shape.
    ``path`` names where a leaf sits, from the root's name (``Layer.w_up``, ``[0]['x']``).
    ``fast(annotation)``, if given, is tried first and may answer from a cache (None: no answer).
    """
    if path is None:
        path = _root_name(annotation)
    if fast is not None and is_annotation(annotation):
        hit = fast(annotation)
        if hit is not None:
            return hit
    where = path or "the annotation"
    if isinstance(annotation, str):
        raise TypeError(
            f"{where} is the string {annotation!r}: pass the annotation itself (with PEP 563, "
            "resolve it with typing.get_type_hints first)"
        )
    array = annotation_class(annotation)
    if array is not None:
        return leaf(_leaf_of(array, path))
    origin = typing.get_origin(annotation)
    info = tree_info(annotation)
    if info is not None:
        field_types = info.field_types
        static = info.static_fields
        values = {}
        for f in annotation.__dataclass_fields__.values():
            if f.name in static:
                if f.default is not dataclasses.MISSING:
                    values[f.name] = f.default
                elif f.default_factory is not dataclasses.MISSING:
                    values[f.name] = f.default_factory()
                else:
                    values[f.name] = None
            else:
                values[f.name] = _walk(field_types[f.name], leaf, f"{path}.{f.name}", fast)
        return annotation(**values)
    if origin is Union:
        members = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(members) == 1:
            return _walk(members[0], leaf, path, fast)
        raise TypeError(f"{where}: a Union of several types {annotation!r} has no single layout")
    if origin is tuple:
        args = typing.get_args(annotation)
        if len(args) == 2 and args[1] is Ellipsis:
            raise TypeError(f"{where}: {annotation!r} has no fixed length, so no layout tree")
        return tuple(_walk(a, leaf, f"{path}[{i}]", fast) for i, a in enumerate(args))
    built = _model_class_or_instance(annotation, leaf, path, fast)
    if built is not _NOT_A_MODEL:
        return built
    fields = getattr(annotation, "_fields", None) if isinstance(annotation, type) and issubclass(annotation, tuple) else None
    if fields is not None:  # a NamedTuple
        hints = typing.get_type_hints(annotation)
        return annotation(*(_walk(hints[n], leaf, f"{path}.{n}", fast) for n in fields))
    if isinstance(annotation, (tuple, list)):
        return type(annotation)(_walk(a, leaf, f"{path}[{i}]", fast) for i, a in enumerate(annotation))
    if isinstance(annotation, dict):
        return {k: _walk(a, leaf, f"{path}[{k!r}]", fast) for k, a in annotation.items()}
    raise TypeError(
        f"{where} is {annotation!r}, which has no layout: use array annotations (f32[b'...']), "
        "pytree dataclasses, tuple[...], Optional[...], NamedTuples, or tuples, lists and dicts "
        "of them"
    )


_NOT_A_MODEL = object()


def _model_class_or_instance(annotation: Any, leaf: Callable[[_Leaf], Any], path: str,
                             fast: Callable[[Any], Any] | None) -> Any:
    """A dataclass of a model library (an ``eqx.Module``, a ``flax.struct.dataclass``, a
    ``register_dataclass`` class, a plain dataclass) given as its class, built from its field
    annotations without running its ``__init__``; or an instance of one, or of a NamedTuple, real
    or abstract (``jax.eval_shape``, ``eqx.filter_eval_shape``), mapped leaf by leaf through the
    annotations on its classes. ``_NOT_A_MODEL`` for anything else."""
    if isinstance(annotation, type):
        if not dataclasses.is_dataclass(annotation):
            return _NOT_A_MODEL
        node = model(annotation)
        if not isinstance(node, ClassNode) or not node.has_arrays:
            return _NOT_A_MODEL
        built = object.__new__(annotation)
        hints = typing.get_type_hints(annotation)
        for f in dataclasses.fields(annotation):
            if f.name in node.fields:
                value = _walk(hints[f.name], leaf, f"{path}.{f.name}", fast)
            elif f.default is not dataclasses.MISSING:
                value = f.default
            elif f.default_factory is not dataclasses.MISSING:
                value = f.default_factory()
            else:
                value = None
            object.__setattr__(built, f.name, value)
        return built
    cls = type(annotation)
    if not (dataclasses.is_dataclass(cls) or (issubclass(cls, tuple) and hasattr(cls, "_fields"))):
        return _NOT_A_MODEL
    node = model(cls)
    if not isinstance(node, ClassNode) or not node.has_arrays:
        return _NOT_A_MODEL
    root = path or cls.__qualname__

    def one(key_path: tuple, _: Any) -> Any:
        where = f"{root}{jax.tree_util.keystr(key_path)}"
        target = follow(node, key_path)
        if not isinstance(target, ArrayNode):
            raise TypeError(
                f"{where} has no shardtypes annotation on {cls.__qualname__}, so no layout; "
                "annotate the field (w: f32[b'embed/d hidden/t'])"
            )
        return _walk(target.annotation, leaf, where, fast)

    return jax.tree_util.tree_map_with_path(one, annotation)


# ---------------------------------------------------------------------------------------------


def _root_name(annotation: Any) -> str:
    if tree_info(annotation) is not None:
        return repr(annotation).replace("shardtypes.", "") if type(annotation) is not type else annotation.__qualname__
    if isinstance(annotation, type) and issubclass(annotation, tuple) and hasattr(annotation, "_fields"):
        return annotation.__qualname__
    return ""


def make_partition_specs(annotation: Any) -> Any:
    """The tree of ``PartitionSpec`` an annotation describes.

    >>> make_partition_specs(f32[b'batch/d seq embed/t'])
    P('d', None, 't')
    """
    return _walk(annotation, lambda leaf: _partition_spec(leaf))


def _partition_spec(leaf: _Leaf, ndim: int | None = None, mesh_sizes: Mapping[str, int] | None = None,
                    shape: tuple | None = None) -> PartitionSpec:
    """The leaf's PartitionSpec: its mesh axes as written or, with axis rules active, resolved
    through them (over ``mesh_sizes`` and ``shape`` where known)."""
    where = leaf.path or "the annotation"
    try:
        if current_rules() is None:
            return leaf.spec.partition_spec(ndim)
        if ndim is None:
            leaf.spec.partition_spec(None)  # a variadic before sharded dims needs a rank: say so
            ndim = len(leaf.spec.dims) - (leaf.spec.variadic_index is not None)
        axes = rules_layout(leaf.spec, ndim, mesh_sizes, shape)
    except AxisRulesError as e:
        raise AxisRulesError(f"{where} ({leaf.text}): {e}") from None
    except ValueError as e:  # ShapeSpecError: a variadic dim before sharded ones
        raise ValueError(f"{where} ({leaf.text}): {e}") from None
    return PartitionSpec(*(axes_entry(a) for a in axes))


def _resolved_spec(leaf: _Leaf, mesh: Any, sizes: Mapping[str, Any] | None = None,
                   ndim: int | None = None) -> PartitionSpec:
    """The leaf's PartitionSpec on ``mesh``, checked: every axis is in the mesh, and every dim
    whose size ``sizes`` gives divides over its axes."""
    mesh_sizes = dict(mesh.shape)
    where = leaf.path or "the annotation"
    known = [_dim_size(dim, sizes or {}, leaf, i, required=False) if not dim.is_variadic else None
             for i, dim in enumerate(leaf.spec.dims)]
    shape = tuple(known) if leaf.spec.variadic_index is None else None
    spec = _partition_spec(leaf, ndim, mesh_sizes, shape)
    var = leaf.spec.variadic_index
    for i, entry in enumerate(spec):
        axes = entry_axes(entry)
        if var is not None and i >= var:
            break  # positions after a variadic dim: their sizes are not known here
        text = str(leaf.spec.dims[i]) if i < len(leaf.spec.dims) else ""
        missing = [a for a in axes if a not in mesh_sizes]
        if missing:
            raise ValueError(
                f"{where} ({leaf.text}): dim {i} {text!r} is sharded over mesh axis "
                f"{missing[0]!r}, which the mesh does not have (axes: {tuple(mesh_sizes)})"
                f"{axis_hint(missing, tuple(mesh_sizes))}"
            )
        size = known[i] if i < len(known) else None
        if not axes or size is None:
            continue
        parts = math.prod(mesh_sizes[a] for a in axes)
        if not divides(size, parts):
            raise ValueError(
                f"{where} ({leaf.text}): dim {i} {text!r} has size {size}, which does not "
                f"divide over mesh axes {axes} of total size {parts}"
            )
    return spec


def _dim_size(dim, sizes: Mapping[str, Any], leaf: _Leaf, index: int, required: bool) -> Any:
    where = leaf.path or "the annotation"
    kind = dim.kind
    if kind == FIXED:
        return dim.expr
    if kind in (NAMED, BROADCAST):
        name = dim.name
        if name in sizes:
            return sizes[name]
    elif kind == EXPR:
        missing = sorted(n for n in dim.names if n not in sizes)
        if not missing:
            return evaluate(dim.expr, sizes.__getitem__)
        name = missing[0]
    elif kind == ANY:
        if required:
            raise ValueError(f"{where} ({leaf.text}): dim {index} is '_' (any size), so it has no shape")
        return None
    else:  # ELLIPSIS / VARIADIC are handled by the caller
        return None
    if required:
        raise ValueError(
            f"{where} ({leaf.text}): dim {index} {str(dim)!r} needs the size of {name!r}; "
            f"pass it in dims (given: {sorted(sizes)})"
        )
    return None


def make_shardings(annotation: Any, mesh: Any = None) -> Any:
    """The tree of ``NamedSharding`` an annotation describes, over ``mesh`` or the current mesh.

    An axis the mesh lacks, or a fixed-size dim that its axes do not divide, is an error naming
    the path.
    """
    mesh = current_mesh(mesh, "make_shardings")
    key = (mesh, current_rules())
    cache = _SHARDINGS.get(key)
    if cache is None:
        if len(_SHARDINGS) > 64:
            _SHARDINGS.clear()
        cache = _SHARDINGS[key] = {}

    def leaf(leaf: _Leaf) -> NamedSharding:
        sharding = NamedSharding(mesh, _resolved_spec(leaf, mesh))
        cache[leaf.annotation] = sharding
        return sharding

    return _walk(annotation, leaf, fast=cache.get)


# (mesh, active rules) -> {array annotation -> NamedSharding}: a sharding is a function of these
# alone, and parameter trees repeat a few annotations many times (every layer, every moment).
_SHARDINGS: dict = {}



def make_shape_dtype_structs(annotation: Any, dims: Mapping[str, Any], mesh: Any = None) -> Any:
    """The tree of ``jax.ShapeDtypeStruct`` (with shardings) an annotation describes, with the
    sizes of its named dims taken from ``dims``. For ``jax.eval_shape``, AOT lowering and memory
    planning. ``mesh`` defaults to the current mesh; with no mesh at all the structs have no
    sharding.

    >>> make_shape_dtype_structs(f32[b'batch/d embed'], {'batch': 8, 'embed': 16}, mesh)  # doctest: +SKIP
    ShapeDtypeStruct(shape=(8, 16), dtype=float32, sharding=NamedSharding(..., P('d', None)))
    """
    if not isinstance(dims, Mapping):
        raise TypeError(f"make_shape_dtype_structs: dims must be a mapping of name to size, got {dims!r}")
    try:
        mesh = current_mesh(mesh, "make_shape_dtype_structs")
    except ValueError:
        mesh = None

    def leaf(leaf: _Leaf) -> jax.ShapeDtypeStruct:
        where = leaf.path or "the annotation"
        if leaf.dtype_cls.dtype is None:
            raise ValueError(
                f"{where} ({leaf.text}): {leaf.dtype_cls.__name__} is a category of dtypes; a "
                "ShapeDtypeStruct needs one dtype (f32, bf16, ...)"
            )
        shape: list = []
        for i, dim in enumerate(leaf.spec.dims):
            if dim.kind == ELLIPSIS:
                raise ValueError(f"{where} ({leaf.text}): dim {i} is '...', which has no shape")
            if dim.kind == VARIADIC and dim.name is not None:
                if dim.name not in dims:
                    raise ValueError(
                        f"{where} ({leaf.text}): dim {i} {str(dim)!r} needs dims[{dim.name!r}], a "
                        "tuple of sizes"
                    )
                sizes = dims[dim.name]
                if not isinstance(sizes, tuple):
                    raise ValueError(
                        f"{where} ({leaf.text}): dim {i} {str(dim)!r} stands for several dims, so "
                        f"dims[{dim.name!r}] must be a tuple of sizes, not {sizes!r}"
                    )
                shape.extend(sizes)
                continue
            shape.append(_dim_size(dim, dims, leaf, i, required=True))
        sharding = None
        if mesh is not None:
            sharding = NamedSharding(mesh, _resolved_spec(leaf, mesh, dims, len(shape)))
        return jax.ShapeDtypeStruct(tuple(shape), leaf.dtype_cls.dtype, sharding=sharding)

    return _walk(annotation, leaf)


def shard(value: Any, annotation: Any, mesh: Any = None) -> Any:
    """Lays ``value`` (an array or a tree) out as ``annotation`` says.

    Eagerly this is ``jax.device_put``; under jit, ``jax.sharding.reshard`` on Explicit mesh axes
    and ``jax.lax.with_sharding_constraint`` on Auto ones.
    """
    mesh = current_mesh(mesh, "shard")
    shardings = make_shardings(annotation, mesh)
    # None in the value is an Optional left empty: a leaf here, so it lines up with the
    # annotation's leaf, and it stays None.
    value_leaves, value_def = jax.tree_util.tree_flatten_with_path(value, is_leaf=lambda x: x is None)
    sharding_leaves = jax.tree_util.tree_flatten_with_path(shardings)[0]
    value_keys = [jax.tree_util.keystr(p) for p, _ in value_leaves]
    sharding_keys = [jax.tree_util.keystr(p) for p, _ in sharding_leaves]
    if value_keys != sharding_keys:
        raise ValueError(
            "shard: the value's leaves do not match the annotation's: value has "
            f"{value_keys[:6]}{'...' if len(value_keys) > 6 else ''}, annotation has "
            f"{sharding_keys[:6]}{'...' if len(sharding_keys) > 6 else ''}"
        )
    texts = jax.tree.leaves(_walk(annotation, lambda leaf: leaf.text))  # aligned with shardings
    placed = []
    for (path, x), (_, sharding), text in zip(value_leaves, sharding_leaves, texts):
        where = f"{jax.tree_util.keystr(path) or 'the value'} ({text})"
        placed.append(None if x is None else _place(x, sharding, where))
    return jax.tree_util.tree_unflatten(value_def, placed)



def _place(x: Any, sharding: NamedSharding, path: str) -> Any:
    sizes = dict(sharding.mesh.shape)
    shape = getattr(x, "shape", ())
    for i, entry in enumerate(sharding.spec):
        axes = entry_axes(entry)
        parts = math.prod(sizes[a] for a in axes)
        if i < len(shape) and parts > 1 and not divides(shape[i], parts):
            raise ValueError(
                f"shard: {path}: dim {i} has size {shape[i]}, which does not divide "
                f"over mesh axes {axes} ({parts} devices) as {sharding.spec} asks"
            )
    if not isinstance(x, jax.core.Tracer):
        return jax.device_put(x, sharding)
    mesh = sharding.mesh
    types = dict(zip(mesh.axis_names, mesh.axis_types))
    used = [a for entry in sharding.spec for a in entry_axes(entry)]
    explicit = any(types.get(a) == jax.sharding.AxisType.Explicit for a in used)
    all_explicit = all(t == jax.sharding.AxisType.Explicit for t in types.values())
    if explicit or (all_explicit and not used):
        return jax.sharding.reshard(x, sharding.spec)
    return jax.lax.with_sharding_constraint(x, sharding)


def is_fully_sharded(spec: PartitionSpec, mesh: Any = None) -> bool:
    """Whether ``spec`` uses every axis of ``mesh`` (default: the current mesh; inside shard_map,
    its manual axes)."""
    if mesh is None:
        abstract = jax.sharding.get_abstract_mesh()
        if abstract.empty:
            raise no_mesh_error("is_fully_sharded")
        manual = abstract.manual_axes
        names = tuple(manual) if manual else abstract.axis_names
    else:
        names = mesh.axis_names
    used: list[str] = []
    for entry in spec:
        if entry is None or entry is PartitionSpec.UNCONSTRAINED:
            continue
        if isinstance(entry, str):
            used.append(entry)
        elif isinstance(entry, tuple):
            used.extend(entry)
        else:
            raise ValueError(f"is_fully_sharded: unexpected entry {entry!r} in {spec}")
    return set(used) >= set(names)



def explain_tree(annotation: Any, mesh: Any = None, dims: Mapping[str, Any] | None = None) -> str:
    """The text of ``explain``: for each array of the annotation tree, each dim's mesh axes and
    the rule that put them there (or why none did)."""
    if mesh is None:
        try:
            mesh = current_mesh(None, "explain")
        except ValueError:
            mesh = None
    mesh_sizes = dict(mesh.shape) if mesh is not None else None
    active = current_rules()
    lines = []
    if active is None:
        lines.append("no axis rules are active: the names after '/' are mesh axes")
    else:
        rules, mode = active
        lines.append(f"under {rules!r}" + (f" in mode {mode!r}" if mode else ""))

    def leaf(leaf: _Leaf) -> None:
        spec = leaf.spec
        known = [_dim_size(d, dims or {}, leaf, i, required=False) if not d.is_variadic else None
                 for i, d in enumerate(spec.dims)]
        ndim = len(spec.dims) - (spec.variadic_index is not None)
        lines.append(f"{leaf.path or 'the annotation'}: {leaf.text}")
        try:
            story = rules_choices(spec, ndim, mesh_sizes, tuple(known) if spec.variadic_index is None else None)
        except AxisRulesError as e:
            lines.append(f"  error: {e}")
            return
        for choice in story:
            axes = ", ".join(choice.axes) if choice.axes else "replicated"
            notes = "; ".join(choice.notes)
            lines.append(f"  dim {choice.index} {choice.dim!r}: {axes}" + (f"  ({notes})" if notes else ""))

    _walk(annotation, leaf)
    return "\n".join(lines)
