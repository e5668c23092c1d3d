"""Deriving layouts from annotations: PartitionSpecs, NamedShardings and ShapeDtypeStructs (laying
values out, ``shard``, is ``layout.placement``'s).

Every function here walks an *annotation tree* (with ``model.annotation_leaves``): an array annotation
(``f32[b'b/d e']``), a pytree dataclass class (including ``Array[axes, cls]``), ``tuple[...]``,
``Optional[X]``, a NamedTuple class, or plain Python tuples, lists and dicts whose leaves are
annotations. The result has the shape of the value the annotation describes:

>>> make_partition_specs(Layer)          # doctest: +SKIP
Layer(w_up=P('d', 't'), w_down=P('t', 'd'))
"""

from __future__ import annotations

import functools
import math
from typing import TYPE_CHECKING, Any, Callable, Generic, Iterator, Mapping, ParamSpec, TypeVar, overload

import jax
from jax.sharding import AbstractMesh, Mesh, NamedSharding, PartitionSpec

from ..context import (
    AxisRulesError,
    current_mesh,
    current_rules,
    filter_traceback,
    layout as rules_layout,
    legacy_mesh_open,
    no_mesh_error,
)
from ..language import ELLIPSIS, VARIADIC, axes_entry, check_dims, divides, entry_axes
from ..model import Leaf, axis_hint, brief, is_value_tree, walk_leaves
from .dim_sizes import check_dims_for, dim_size, dims_used
from .value_structs import structs_of_values

__all__ = [
    "make_partition_specs",
    "make_shardings",
    "make_shape_dtype_structs",
    "is_fully_sharded",
    "current_mesh",
    "PartitionSpecTree",
    "ShardingTree",
    "StructTree",
]

# What the make_* functions return: the annotation's tree (a dataclass instance, tuple, dict,
# optax state, ...) with a PartitionSpec / NamedSharding / ShapeDtypeStruct at each array leaf; a
# single leaf for a single array annotation. Python's type system cannot map a tree type's
# leaves to another type, so for an annotated class checkers see ``ShardingTree[Params]``: not a
# Params (its fields hold shardings, not arrays), not an int (``bad: int = make_shardings(Params,
# mesh)`` is an error to pyright and mypy), with fields of any type (``.w_up.spec``). Checkers
# see an array annotation used as a value as an opaque special form, so for one (and for tuples,
# dicts and value trees) the result is Any: assign it to the type you know (``spec:
# PartitionSpec = make_partition_specs(f32[...])``). At run time the three names are Any.
# shard keeps its input's type.
if TYPE_CHECKING:
    _Shape = TypeVar("_Shape")

    class _Tree(Generic[_Shape]):
        def __getattr__(self, name: str) -> Any: ...
        def __getitem__(self, key: Any) -> Any: ...
        def __iter__(self) -> Iterator[Any]: ...

    class PartitionSpecTree(_Tree[_Shape]):
        """A tree shaped like ``_Shape`` with a ``PartitionSpec`` at each array leaf."""

    class ShardingTree(_Tree[_Shape]):
        """A tree shaped like ``_Shape`` with a ``NamedSharding`` at each array leaf."""

    class StructTree(_Tree[_Shape]):
        """A tree shaped like ``_Shape`` with a ``jax.ShapeDtypeStruct`` at each array leaf."""
else:
    PartitionSpecTree = ShardingTree = StructTree = Any


_P = ParamSpec("_P")
_R = TypeVar("_R")
_Class = TypeVar("_Class")  # an annotated class: the make_* functions give a tree shaped like it


def _entry(name: str) -> Callable[[Callable[_P, _R]], Callable[_P, _R]]:
    """Errors of the annotation walk name the path inside the argument (``[1] is 3``); raised
    through a public entry they name the entry too (``make_partition_specs: [1] is 3``)."""

    def decorate(f: Callable[_P, _R]) -> Callable[_P, _R]:
        @functools.wraps(f)
        def entry(*args: _P.args, **kwargs: _P.kwargs) -> _R:
            try:
                return f(*args, **kwargs)
            except (TypeError, ValueError) as e:  # (AxisRulesError is a ValueError)
                text = e.args[0] if len(e.args) == 1 and isinstance(e.args[0], str) else None
                if type(e) in (TypeError, ValueError) and text is not None and not text.startswith(name):
                    e.args = (f"{name}: {text}",)
                    e.__suppress_context__ = True
                filter_traceback(e)  # the user's frames only (config.traceback_filtering)
                raise

        return entry

    return decorate


# An array annotation (an alias of the static spelling, Acts = f32[jax.Array, b'...'], is
# type[jax.Array] to the checkers) gives a PartitionSpec, Any to them; a class, its tree.
@overload
def make_partition_specs(annotation: type[jax.Array], *, like: Any = None) -> Any: ...
@overload
def make_partition_specs(annotation: type[_Class], *, like: Any = None) -> PartitionSpecTree[_Class]: ...
@overload
def make_partition_specs(annotation: Any, *, like: Any = None) -> Any: ...
@_entry("make_partition_specs")
def make_partition_specs(annotation: Any, *, like: Any = None) -> Any:
    """The tree of ``PartitionSpec`` an annotation describes.

    >>> make_partition_specs(f32[b'batch/d seq embed/t'])
    P('d', None, 't')

    ``annotation`` may also be a tree of values (an optax state, abstract or real): each
    annotated class inside gives its subtree's layout, scalars no annotation covers (``count``)
    are replicated, and ``like`` (an annotation tree, as the parameters' class) gives the layout
    of every subtree with its structure that no annotation covers (an optax state of plain dict
    parameters). Any other leaf is an error naming its path.

    >>> make_partition_specs(jax.eval_shape(optax.adamw(1e-3).init, params))  # doctest: +SKIP
    (ScaleByAdamState(count=P(), mu=Params(w=P('d', 't'), ...), nu=...), EmptyState(), EmptyState())
    """
    return partition_specs(annotation, like=like)


def partition_specs(annotation: Any, *, like: Any = None) -> Any:
    """``make_partition_specs`` for callers that name themselves in its errors."""
    return walk_leaves(annotation, lambda leaf: partition_spec(leaf), like=like)


def partition_spec(leaf: Leaf, ndim: int | None = None, mesh_sizes: Mapping[str, int] | None = None,
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


def _resolved_spec(leaf: Leaf, mesh: Any, sizes: Mapping[str, Any] | None = None,
                   ndim: int | None = None, unconstrained: str = "error") -> PartitionSpec:
    """The leaf's PartitionSpec on ``mesh``, checked: every axis is in the mesh, and every dim
    whose size ``sizes`` gives divides over its axes. An UNCONSTRAINED dim (``embed/?``) is an
    error; with ``unconstrained='auto'`` (``shard``: with_sharding_constraint under jit takes it)
    only on an all-Explicit mesh; with ``'replicate'`` (verify's inputs) it is None."""
    mesh_sizes = dict(mesh.shape)
    where = leaf.path or "the annotation"
    known = [dim_size(dim, sizes or {}, leaf, i, required=False) if not dim.is_variadic else None
             for i, dim in enumerate(leaf.spec.dims)]
    shape = tuple(known) if leaf.spec.variadic_index is None else None
    spec = partition_spec(leaf, ndim, mesh_sizes, shape)
    var = leaf.spec.variadic_index
    for i, entry in enumerate(spec):
        axes = entry_axes(entry)
        if entry is PartitionSpec.UNCONSTRAINED and unconstrained != "replicate":
            _refuse_unconstrained(leaf, mesh, i, var, unconstrained == "auto")
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
    if unconstrained == "replicate":
        return PartitionSpec(*(None if e is PartitionSpec.UNCONSTRAINED else e for e in spec))
    return spec


def _refuse_unconstrained(leaf: Leaf, mesh: Any, i: int, var: int | None, auto_ok: bool) -> None:
    dims = leaf.spec.dims
    head = (f"{leaf.path or 'the annotation'} ({leaf.text}): dim {i}"
            f"{f' {str(dims[i])!r}' if (var is None or i < var) and i < len(dims) else ''}"
            " is UNCONSTRAINED (XLA decides its layout)")
    if not auto_ok:
        raise ValueError(f"{head}, so it cannot be placed on devices: give the dim mesh axes (or replicate it), or "
                         "lay the value out with shardtypes.shard(x, annotation) inside jax.jit on Auto mesh "
                         "axes, which passes PartitionSpec.UNCONSTRAINED to jax.lax.with_sharding_constraint")
    if not any(t == jax.sharding.AxisType.Auto for t in mesh.axis_types):
        raise ValueError(f"{head}, which needs Auto mesh axes; the mesh's axes are all Explicit "
                         f"{tuple(mesh.axis_names)} (JAX refuses PartitionSpec.UNCONSTRAINED there): give the "
                         "dim mesh axes, or use an Auto mesh")


def mesh_arg(mesh: Any, what: str) -> Mesh | AbstractMesh:
    """``mesh`` if it is a mesh, the current mesh if it is None; anything else is a TypeError
    naming the argument."""
    if mesh is not None and not isinstance(mesh, (Mesh, AbstractMesh)):
        raise TypeError(
            f"{what}: mesh must be a Mesh or an AbstractMesh (or None, for the current mesh), got "
            f"{type(mesh).__name__} {brief(repr(mesh))}"
        )
    return current_mesh(mesh, what)


@overload
def make_shardings(annotation: type[jax.Array], mesh: Any = None, *, like: Any = None) -> Any: ...
@overload
def make_shardings(annotation: type[_Class], mesh: Any = None, *, like: Any = None) -> ShardingTree[_Class]: ...
@overload
def make_shardings(annotation: Any, mesh: Any = None, *, like: Any = None) -> Any: ...
@_entry("make_shardings")
def make_shardings(annotation: Any, mesh: Any = None, *, like: Any = None) -> Any:
    """The tree of ``NamedSharding`` an annotation describes, over ``mesh`` or the current mesh.

    An axis the mesh lacks, or a fixed-size dim that its axes do not divide, is an error naming
    the path. ``annotation`` may be a tree of values and ``like`` an annotation tree, as in
    ``make_partition_specs``: ``make_shardings(jax.eval_shape(tx.init, params), mesh)`` gives the
    optimizer state the parameters' layout.
    """
    return shardings(annotation, mesh, like=like)


def shardings(annotation: Any, mesh: Any = None, *, like: Any = None, unconstrained: str = "error") -> Any:
    """``make_shardings`` for callers that name themselves in its errors (``unconstrained``: see
    ``_resolved_spec``)."""
    mesh = mesh_arg(mesh, "make_shardings")
    key = (mesh, current_rules(), unconstrained)
    cache = _SHARDINGS.get(key)
    if cache is None:
        if len(_SHARDINGS) > 64:
            _SHARDINGS.clear()
        cache = _SHARDINGS[key] = {}

    def leaf(leaf: Leaf) -> NamedSharding:
        sharding = NamedSharding(mesh, _resolved_spec(leaf, mesh, unconstrained=unconstrained))
        cache[leaf.annotation] = sharding
        return sharding

    return walk_leaves(annotation, leaf, fast=cache.get, like=like)


# (mesh, active rules) -> {array annotation -> NamedSharding}: a sharding is a function of these
# alone, and parameter trees repeat a few annotations many times (every layer, every moment).
_SHARDINGS: dict = {}


@overload
def make_shape_dtype_structs(annotation: type[jax.Array], dims: Mapping[str, Any] | None = None, mesh: Any = None, *,
                             like: Any = None) -> Any: ...
@overload
def make_shape_dtype_structs(annotation: type[_Class], dims: Mapping[str, Any] | None = None, mesh: Any = None, *,
                             like: Any = None) -> StructTree[_Class]: ...
@overload
def make_shape_dtype_structs(annotation: Any, dims: Mapping[str, Any] | None = None, mesh: Any = None, *,
                             like: Any = None) -> Any: ...
@_entry("make_shape_dtype_structs")
def make_shape_dtype_structs(annotation: Any, dims: Mapping[str, Any] | None = None, mesh: Any = None, *,
                             like: Any = None) -> Any:
    """The tree of ``jax.ShapeDtypeStruct`` (with shardings) an annotation describes, with the
    sizes of its named dims taken from ``dims``. For ``jax.eval_shape``, AOT lowering and memory
    planning. ``mesh`` defaults to the current mesh; with no mesh at all the structs have no
    sharding (but inside JAX's legacy ``with mesh:`` context, which shardtypes cannot read, it is
    the same error as ``make_shardings``'s: use ``jax.set_mesh``). A size that is not an int >= 0
    (a tuple of them for a ``*name`` dim), and a key of
    ``dims`` that no annotation uses but is close to one they do (a typo, as ``hiden``: the error
    names the close name), are errors naming the key. Other keys are allowed, so one table of
    sizes serves every part of a model. ``annotation`` may be a tree of values and ``like`` an
    annotation tree, as in ``make_partition_specs``; for a tree of values ``dims`` may be left out
    (None): each struct then takes its value's shape and dtype, and the sharding its annotation
    gives (``make_shape_dtype_structs(jax.eval_shape(init, key))``: a checkpoint's restore target).

    >>> make_shape_dtype_structs(f32[b'batch/d embed'], {'batch': 8, 'embed': 16}, mesh)  # doctest: +SKIP
    ShapeDtypeStruct(shape=(8, 16), dtype=float32, sharding=NamedSharding(..., P('d', None)))
    """
    what = "make_shape_dtype_structs"
    if dims is None:
        if not is_value_tree(annotation):
            raise TypeError(f"{what}: dims must be a mapping of the sizes of the named dims ({{'batch': 8, ...}}) "
                            "for an annotation tree; only a tree of values (jax.eval_shape's) carries its shapes")
        return structs_of_values(annotation, shardings(annotation, mesh, like=like), what)
    dims = check_dims(dims, what)
    if mesh is not None:
        mesh_arg(mesh, what)  # a wrong type is an error whatever else is wrong
    single, variadic = dims_used(annotation, like)
    dims = check_dims_for(dims, single, variadic, what, strict=False)
    return structs(annotation, dims, mesh, like)


def structs(annotation: Any, dims: Mapping[str, Any], mesh: Any = None, like: Any = None,
            unconstrained: str = "error") -> Any:
    """``make_shape_dtype_structs`` with ``dims`` taken as they are (validated by the caller,
    and possibly holding sizes of names other annotations use)."""
    try:
        mesh = mesh_arg(mesh, "make_shape_dtype_structs")
    except ValueError:
        if legacy_mesh_open():  # structs without shardings would pass for the user's layout
            raise no_mesh_error("make_shape_dtype_structs") from None
        mesh = None

    def leaf(leaf: Leaf) -> jax.ShapeDtypeStruct:
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
            shape.append(dim_size(dim, dims, leaf, i, required=True))
        sharding = None
        if mesh is not None:
            sharding = NamedSharding(mesh, _resolved_spec(leaf, mesh, dims, len(shape), unconstrained=unconstrained))
        return jax.ShapeDtypeStruct(tuple(shape), leaf.dtype_cls.dtype, sharding=sharding)

    return walk_leaves(annotation, leaf, like=like)


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
        raise ValueError(f"is_fully_sharded: {spec} names mesh axis {unknown[0]!r}, "
                         f"which is not in the mesh (axes: {every})")
    return set(used) >= set(names)
