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

import contextlib
import dataclasses
import math
import types
import typing
from typing import Any, Callable, Iterator, Mapping, Union

import jax
import jax.core
import numpy as np
from jax.sharding import AbstractMesh, Mesh, NamedSharding, PartitionSpec

from ._mesh import current_mesh, no_mesh_error
from ._dtypes import annotation_class, is_annotation, number
from ._shape import ANY, BROADCAST, ELLIPSIS, EXPR, FIXED, NAMED, VARIADIC, ShapeSpec, axes_entry, entry_axes
from ._sizes import check_dims, divides, evaluate, unused_dims_error
from ._describe import axis_hint
from ._plans import plan_of
from ._rule_resolution import layout as rules_layout
from ._rules import AxisRulesError, current_rules
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
    optional: bool = False  # reached through Optional[...]: a value may leave it None


def _leaf_of(annotation: type[number], path: str, optional: bool = False) -> _Leaf:
    plan = plan_of(annotation)
    return _Leaf(path, plan.dtype_cls, plan.spec, plan.text, annotation, optional)


# An annotation tree deeper than this is an error (a tree built by mistake, or a cycle).
_MAX_DEPTH = 64


def _brief(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _walk(
    annotation: Any,
    leaf: Callable[[_Leaf], Any],
    path: str | None = None,
    fast: Callable[[Any], Any] | None = None,
    *,
    _stack: tuple = (),
    _optional: bool = False,
) -> Any:
    """Maps ``leaf`` over the array annotations of an annotation tree, keeping its shape.
    ``path`` names where a leaf sits, from the root's name (``Layer.w_up``, ``[0]['x']``).
    ``fast(annotation)``, if given, is tried first and may answer from a cache (None: no answer).
    A tree that contains itself, or is nested more than ``_MAX_DEPTH`` deep, is a ValueError.
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
            f"{_brief(where)} is the string {_brief(repr(annotation))}: pass the annotation itself (with "
            "PEP 563, resolve it with typing.get_type_hints first)"
        )
    array = annotation_class(annotation)
    if array is not None:
        return leaf(_leaf_of(array, path, _optional))
    if any(a is annotation for a in _stack):
        raise ValueError(
            f"{_brief(where)} contains itself (a {type(annotation).__name__} that holds itself): an "
            "annotation tree must be finite"
        )
    if len(_stack) >= _MAX_DEPTH:
        raise ValueError(f"{_brief(where)}: the annotation tree is nested more than {_MAX_DEPTH} levels deep")
    stack = (*_stack, annotation)

    def walk(a: Any, at: str, optional: bool = _optional) -> Any:
        return _walk(a, leaf, at, fast, _stack=stack, _optional=optional)

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
                values[f.name] = walk(field_types[f.name], f"{path}.{f.name}")
        return annotation(**values)
    if origin is Union:
        members = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(members) == 1:
            return walk(members[0], path, True)
        raise TypeError(f"{where}: a Union of several types {annotation!r} has no single layout")
    if origin is tuple:
        args = typing.get_args(annotation)
        if len(args) == 2 and args[1] is Ellipsis:
            raise TypeError(f"{where}: {annotation!r} has no fixed length, so no layout tree")
        return tuple(walk(a, f"{path}[{i}]") for i, a in enumerate(args))
    built = _model_class_or_instance(annotation, walk, path)
    if built is not _NOT_A_MODEL:
        return built
    fields = getattr(annotation, "_fields", None) if isinstance(annotation, type) and issubclass(annotation, tuple) else None
    if fields is not None:  # a NamedTuple
        hints = typing.get_type_hints(annotation)
        return annotation(*(walk(hints[n], f"{path}.{n}") for n in fields))
    if isinstance(annotation, (tuple, list)):
        return type(annotation)(walk(a, f"{path}[{i}]") for i, a in enumerate(annotation))
    if isinstance(annotation, dict):
        return {k: walk(a, f"{path}[{k!r}]") for k, a in annotation.items()}
    raise TypeError(
        f"{_brief(where)} is {_brief(repr(annotation))}, which has no layout: use array annotations (f32[b'...']), "
        "pytree dataclasses, tuple[...], Optional[...], NamedTuples, or tuples, lists and dicts "
        "of them"
    )


_NOT_A_MODEL = object()


def _model_class_or_instance(annotation: Any, walk: Callable[[Any, str], Any], path: str) -> Any:
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
                value = walk(hints[f.name], f"{path}.{f.name}")
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
        return walk(target.annotation, where)

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
            return _evaluate(dim, sizes, leaf, index)
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


def _evaluate(dim, sizes: Mapping[str, Any], leaf: _Leaf, index: int) -> Any:
    """The size of an expression dim (``seq+1``, ``heads//kv``) with ``sizes``; a division by
    zero or a negative result is a ValueError naming the dim and the sizes."""
    where = f"{leaf.path or 'the annotation'} ({leaf.text}): dim {index} {str(dim)!r}"
    given = ", ".join(f"{n}={sizes[n]}" for n in sorted(dim.names))
    try:
        value = evaluate(dim.expr, sizes.__getitem__)
    except ZeroDivisionError:
        raise ValueError(f"{where} has a division by zero with {given}") from None
    except Exception as e:  # symbolic sizes that JAX cannot combine
        raise ValueError(f"{where} cannot be computed with {given}: {type(e).__name__}: {e}") from None
    try:
        negative = bool(value < 0)
    except Exception:  # a symbolic size: its sign is not known here
        negative = False
    if negative:
        raise ValueError(f"{where} is {value} with {given}; a size cannot be negative")
    return value


_MAX_TREE_DEPTH = 256


def _too_deep(what: str, arg: str) -> ValueError:
    return ValueError(
        f"{what}: {arg} is nested too deeply (more than {_MAX_TREE_DEPTH} levels), or contains itself"
    )


@contextlib.contextmanager
def tree_guard(what: str, arg: str, *trees: Any) -> Iterator[None]:
    """Around JAX's pytree functions on a user's trees: one nested too deeply, or that contains
    itself, is a ValueError naming the argument. Lists, tuples and dicts in ``trees`` are measured
    first, without recursion: JAX's C++ flatten would run out of Python stack, in a callback such
    as ``is_leaf`` even, where the interpreter cannot recover; what is left raises a SystemError
    from C++, turned into the same ValueError."""
    for tree in trees:
        stack = [(tree, 0)]
        while stack:
            node, depth = stack.pop()
            if isinstance(node, (list, tuple, dict)):
                if depth >= _MAX_TREE_DEPTH:
                    raise _too_deep(what, arg)
                stack.extend((child, depth + 1) for child in (node.values() if isinstance(node, dict) else node))
    try:
        yield
    except (RecursionError, SystemError) as e:
        if isinstance(e, RecursionError) or isinstance(e.__cause__, RecursionError) or isinstance(
                e.__context__, RecursionError):
            raise _too_deep(what, arg) from None
        raise


def mesh_arg(mesh: Any, what: str) -> Mesh | AbstractMesh:
    """``mesh`` if it is a mesh, the current mesh if it is None; anything else is a TypeError
    naming the argument."""
    if mesh is not None and not isinstance(mesh, (Mesh, AbstractMesh)):
        raise TypeError(
            f"{what}: mesh must be a Mesh or an AbstractMesh (or None, for the current mesh), got "
            f"{type(mesh).__name__} {_brief(repr(mesh))}"
        )
    return current_mesh(mesh, what)


def dims_used(annotation: Any) -> tuple[set[str], set[str]]:
    """The dim names an annotation tree uses: (single dims, ``*name`` dims)."""
    single: set[str] = set()
    variadic: set[str] = set()

    def leaf(leaf: _Leaf) -> None:
        for dim in leaf.spec.dims:
            if dim.kind == VARIADIC:
                variadic.add(dim.shape[1:])
            else:
                single.update(dim.names)

    _walk(annotation, leaf)
    return single, variadic


def check_dims_for(dims: Any, single: set[str], variadic: set[str], what: str, strict: bool = True) -> dict[str, Any]:
    """``dims`` validated (``check_dims``) against the names the annotations use: a tuple is the
    size of a ``*name`` dim and of nothing else; with ``strict``, a name no annotation uses is an
    error, else only one close to a name they use is (a typo, as ``hiden``): one table of sizes
    for a whole model may hold names a part of it does not use."""
    dims = check_dims(dims, what)
    used = single | variadic
    for name, size in dims.items():
        if name in variadic and not isinstance(size, tuple):
            raise TypeError(
                f"{what}: dims[{name!r}] must be a tuple of sizes, since '*{name}' stands for "
                f"several dims, got {size!r}"
            )
        if name in single and name not in variadic and isinstance(size, tuple):
            raise TypeError(
                f"{what}: dims[{name!r}] is the tuple {size!r}, but {name!r} is one dim here; a "
                f"tuple is the size of a '*{name}' dim"
            )
    unused = [n for n in dims if n not in used]
    if not strict:
        from ._sizes import close_name

        unused = [n for n in unused if close_name(n, used) is not None]
    if unused:
        raise unused_dims_error(unused, used, what)
    return dims


def make_shardings(annotation: Any, mesh: Any = None) -> Any:
    """The tree of ``NamedSharding`` an annotation describes, over ``mesh`` or the current mesh.

    An axis the mesh lacks, or a fixed-size dim that its axes do not divide, is an error naming
    the path.
    """
    mesh = mesh_arg(mesh, "make_shardings")
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
    sharding. A size that is not an int >= 0 (a tuple of them for a ``*name`` dim), and a key of
    ``dims`` that no annotation uses but is close to one they do (a typo, as ``hiden``: the error
    names the close name), are errors naming the key. Other keys are allowed, so one table of
    sizes serves every part of a model.

    >>> make_shape_dtype_structs(f32[b'batch/d embed'], {'batch': 8, 'embed': 16}, mesh)  # doctest: +SKIP
    ShapeDtypeStruct(shape=(8, 16), dtype=float32, sharding=NamedSharding(..., P('d', None)))
    """
    what = "make_shape_dtype_structs"
    dims = check_dims(dims, what)
    if mesh is not None:
        mesh_arg(mesh, what)  # a wrong type is an error whatever else is wrong
    single, variadic = dims_used(annotation)
    dims = check_dims_for(dims, single, variadic, what, strict=False)
    return structs(annotation, dims, mesh)


def structs(annotation: Any, dims: Mapping[str, Any], mesh: Any = None) -> Any:
    """``make_shape_dtype_structs`` with ``dims`` taken as they are (validated by the caller,
    and possibly holding sizes of names other annotations use)."""
    try:
        mesh = mesh_arg(mesh, "make_shape_dtype_structs")
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
    mesh = mesh_arg(mesh, "shard")
    shardings = make_shardings(annotation, mesh)
    # None in the value is an Optional left empty: a leaf here, so it lines up with the
    # annotation's leaf, and it stays None.
    with tree_guard("shard", "value", value):
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
    infos = jax.tree.leaves(_walk(annotation, _ShardLeaf))  # aligned with shardings
    placed: list[Any] = []
    for (path, x), (_, sharding), info in zip(value_leaves, sharding_leaves, infos):
        at = f"value{jax.tree_util.keystr(path)}"
        if x is None:
            if not info.leaf.optional:
                raise TypeError(f"shard: {at} is None, but its annotation {info.leaf.text} is not Optional[...]")
            placed.append(None)
            continue
        if not (hasattr(x, "shape") and hasattr(x, "dtype")) and not isinstance(x, (int, float, complex, np.generic)):
            raise TypeError(
                f"shard: {at} is {type(x).__name__} {_brief(repr(x), 60)}, not an array (its annotation "
                f"is {info.leaf.text})"
            )
        spec = info.leaf.spec
        ndim, fixed = len(np.shape(x)), len(spec.dims) - (spec.variadic_index is not None)
        if ndim < fixed or (spec.variadic_index is None and ndim != fixed):
            raise ValueError(
                f"shard: {at} has rank {ndim}, but its annotation {info.leaf.text} has {fixed} dims"
                + (" and a variadic one" if spec.variadic_index is not None else "")
            )
        placed.append(_place(x, sharding, f"{jax.tree_util.keystr(path) or 'the value'} ({info.leaf.text})"))
    return jax.tree_util.tree_unflatten(value_def, placed)


class _ShardLeaf:
    """A leaf of the annotation tree for ``shard`` (an object, so a tree of them keeps the
    annotation's leaves one for one)."""

    __slots__ = ("leaf",)

    def __init__(self, leaf: _Leaf):
        self.leaf = leaf



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
    if not isinstance(spec, PartitionSpec):
        raise TypeError(f"is_fully_sharded: spec must be a PartitionSpec, as P('d', 't'), got {spec!r}")
    if mesh is None:
        abstract = jax.sharding.get_abstract_mesh()
        if abstract.empty:
            raise no_mesh_error("is_fully_sharded")
        manual = abstract.manual_axes
        names = tuple(manual) if manual else abstract.axis_names
        every = tuple(abstract.axis_names)
    else:
        mesh = mesh_arg(mesh, "is_fully_sharded")
        names = every = tuple(mesh.axis_names)
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
    unknown = [a for a in used if a not in every]
    if unknown:
        raise ValueError(f"is_fully_sharded: {spec} names mesh axis {unknown[0]!r}, which is not in the mesh (axes: {every})")
    return set(used) >= set(names)
