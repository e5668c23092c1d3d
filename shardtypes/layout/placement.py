"""Laying values out as annotated: ``shard`` (``jax.device_put`` eagerly; ``reshard`` on Explicit
axes and ``with_sharding_constraint`` on Auto axes under jit), and ``tree_guard``, which turns a
user's tree too deep for JAX's pytree functions into an error naming the argument.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
from typing import Any, Iterator, TypeVar, overload

import jax
import jax.core
import numpy as np
from jax.sharding import NamedSharding
from typeguard import TypeCheckError

from ..context import filter_traceback
from ..language import entry_axes
from ..model import ClassNode, Leaf, brief, describe, model, walk_leaves
from .dim_sizes import undivided
from .specs import mesh_arg, shardings as derive_shardings

__all__ = ["shard", "tree_guard"]

_T = TypeVar("_T")


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


@overload
def shard(value: jax.Array | np.ndarray | np.generic | complex, annotation: Any, mesh: Any = None, *,
          like: Any = None) -> jax.Array: ...
@overload
def shard(value: _T, annotation: Any, mesh: Any = None, *, like: Any = None) -> _T: ...
def shard(value: Any, annotation: Any, mesh: Any = None, *, like: Any = None) -> Any:
    """Lays ``value`` (an array or a tree) out as ``annotation`` says.

    To a checker an array (numpy, a scalar) comes back a ``jax.Array`` and a tree comes back its
    own type: declare a field that holds host data before ``shard`` host-or-device
    (``f32[jax.Array | np.ndarray, b'...']``), as its arrays become ``jax.Array``.

    Eagerly this is ``jax.device_put``; under jit, ``jax.sharding.reshard`` on Explicit mesh axes
    and ``jax.lax.with_sharding_constraint`` on Auto ones. For a tree of values whose annotated
    classes say the layout (an optax state), pass the tree itself, or its abstract form, as the
    annotation: ``shard(opt_state, opt_state)``; ``like`` is ``make_shardings``'. An
    ``AbstractMesh`` has no devices, so eagerly it is an error; under jit on Explicit axes JAX
    needs the mesh set around the call (``with jax.set_mesh(mesh):``), and shard says so.
    """
    try:
        return _shard(value, annotation, mesh, like)
    except (TypeError, ValueError, TypeCheckError) as e:
        filter_traceback(e)  # the user's frames only (config.traceback_filtering)
        raise


def _shard(value: Any, annotation: Any, mesh: Any, like: Any) -> Any:
    mesh = mesh_arg(mesh, "shard")
    if dataclasses.is_dataclass(value) and not isinstance(value, type) and _is_one_leaf(value):
        return _shard_fields(value, annotation, mesh)
    shardings = derive_shardings(annotation, mesh, like=like, unconstrained="auto")
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
    infos = jax.tree.leaves(walk_leaves(annotation, _ShardLeaf, like=like))  # aligned with shardings
    placed: list[Any] = []
    for (path, x), (_, sharding), info in zip(value_leaves, sharding_leaves, infos):
        at = f"value{jax.tree_util.keystr(path)}"
        if not isinstance(info, _ShardLeaf):  # a plain dataclass in the annotation: one leaf to JAX
            raise TypeError(
                f"shard: {at} is {brief(describe(x), 60)}, but its annotation is the dataclass "
                f"{type(info).__qualname__}; pass an instance of it"
            )
        if x is None:
            if not info.leaf.optional:
                raise TypeError(f"shard: {at} is None, but its annotation {info.leaf.text} is not Optional[...]")
            placed.append(None)
            continue
        if not (hasattr(x, "shape") and hasattr(x, "dtype")) and not isinstance(x, (int, float, complex, np.generic)):
            raise TypeError(
                f"shard: {at} is {type(x).__name__} {brief(repr(x), 60)}, not an array (its annotation "
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


def _is_one_leaf(value: Any) -> bool:
    with tree_guard("shard", "value", value):
        return jax.tree_util.treedef_is_leaf(jax.tree_util.tree_structure(value))


def _shard_fields(value: Any, annotation: Any, mesh: Any) -> Any:
    """A plain dataclass (not a pytree: JAX sees it as one leaf) laid out field by field, into a
    copy; its fields without shardtypes annotations are kept as they are."""
    cls = type(value)
    if annotation is not cls and type(annotation) is not cls:
        raise TypeError(
            f"shard: value is a {cls.__qualname__} (a dataclass that is not a pytree), but the "
            f"annotation is {brief(repr(annotation), 60)}; pass its class, shard(value, {cls.__qualname__})"
        )
    node = model(cls)
    if not isinstance(node, ClassNode) or not node.has_arrays:
        raise TypeError(f"shard: {cls.__qualname__} has no shardtypes annotation on its fields, so no layout")
    out = copy.copy(value)
    for name, field in node.fields.items():
        if field.has_arrays:
            object.__setattr__(out, name, _shard(getattr(value, name), field.annotation, mesh, None))
    return out


class _ShardLeaf:
    """A leaf of the annotation tree for ``shard`` (an object, so a tree of them keeps the
    annotation's leaves one for one)."""

    __slots__ = ("leaf",)

    def __init__(self, leaf: Leaf):
        self.leaf = leaf


def _place(x: Any, sharding: NamedSharding, path: str) -> Any:
    shape = getattr(x, "shape", ())
    bad = undivided(shape, sharding)
    if bad is not None:
        i, axes, parts = bad
        raise ValueError(
            f"shard: {path}: dim {i} has size {shape[i]}, which does not divide "
            f"over mesh axes {axes} ({parts} devices) as {sharding.spec} asks"
        )
    if not isinstance(x, jax.core.Tracer):
        free = [i for i, entry in enumerate(sharding.spec) if entry is jax.sharding.PartitionSpec.UNCONSTRAINED]
        if free:
            raise ValueError(
                f"shard: {path}: dim {free[0]} is UNCONSTRAINED (XLA decides its layout), which only "
                "a constraint inside jax.jit can leave open; eagerly shard puts the value on devices "
                "and must place every dim: call it inside jax.jit, or give the dim mesh axes"
            )
        if isinstance(sharding.mesh, jax.sharding.AbstractMesh):
            raise ValueError(
                f"shard: {path}: the mesh is an AbstractMesh, which has no devices to put a value "
                "on; pass a Mesh (jax.make_mesh), or plan without devices with make_shardings or "
                "make_shape_dtype_structs"
            )
        return jax.device_put(x, sharding)
    mesh = sharding.mesh
    types = dict(zip(mesh.axis_names, mesh.axis_types))
    used = [a for entry in sharding.spec for a in entry_axes(entry)]
    explicit = any(types.get(a) == jax.sharding.AxisType.Explicit for a in used)
    all_explicit = all(t == jax.sharding.AxisType.Explicit for t in types.values())
    if explicit or (all_explicit and not used):
        if jax.sharding.get_abstract_mesh().empty:
            raise ValueError(
                f"shard: {path}: under jax.jit on Explicit mesh axes, JAX lays values out only "
                "inside the mesh's context: call the jitted function within `with jax.set_mesh(mesh):`"
            )
        return jax.sharding.reshard(x, sharding)
    return jax.lax.with_sharding_constraint(x, sharding)
