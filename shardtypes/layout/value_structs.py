"""ShapeDtypeStructs of a tree of values: each value's shape and dtype, with the sharding its
annotation gives (``make_shape_dtype_structs(jax.eval_shape(init, key))``). The restore target
of a checkpoint (Orbax's ``StandardRestore``) and the abstract inputs of AOT lowering, for trees
such as a TrainState whose optimizer state has no annotation of its own.

The shardings come from ``specs.shardings`` (the caller passes them in); here each one is checked
against its value's shape before a struct is made, so a derived layout that does not fit the
value (a spec longer than the value's rank, a dim its mesh axes do not divide) is an error naming
the path, not a struct that fails later inside a restore or a compile.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
from jax.sharding import NamedSharding

from ..model import is_array_value
from .dim_sizes import undivided

__all__ = ["structs_of_values"]


def structs_of_values(values: Any, shardings: Any, what: str) -> Any:
    """A tree like ``values`` whose array leaves are ``jax.ShapeDtypeStruct(value.shape,
    value.dtype, sharding=...)``, the shardings taken leaf for leaf from ``shardings`` (the
    tree ``make_shardings(values)`` gave)."""
    flat, treedef = jax.tree_util.tree_flatten_with_path(values)
    flat_shardings = jax.tree.leaves(shardings)  # one per array leaf: the same structure
    if len(flat_shardings) != len(flat):  # pragma: no cover - the derivation maps every leaf
        raise ValueError(f"{what}: {len(flat)} arrays but {len(flat_shardings)} shardings were derived")
    # Paths as the derivation's errors write them: from the root's class name for an instance.
    root = type(values).__qualname__ if dataclasses.is_dataclass(values) else ""
    out = []
    for (path, value), sharding in zip(flat, flat_shardings):
        where = root + jax.tree_util.keystr(path) or "the value"
        if not is_array_value(value):
            raise TypeError(f"{what}: {where} is {type(value).__qualname__}, not an array or ShapeDtypeStruct")
        if isinstance(sharding, NamedSharding):
            _check_fits(value, sharding, where, what)
        out.append(jax.ShapeDtypeStruct(tuple(value.shape), value.dtype, sharding=sharding))
    return jax.tree_util.tree_unflatten(treedef, out)


def _check_fits(value: Any, sharding: NamedSharding, where: str, what: str) -> None:
    shape = tuple(value.shape)
    spec = tuple(sharding.spec)
    found = f"{value.dtype}{list(shape)}"
    if len(spec) > len(shape):
        raise ValueError(f"{what}: {where} is {found}, of rank {len(shape)}, but its annotation lays it "
                         f"out as {sharding.spec}, which has {len(spec)} entries")
    bad = undivided(shape, sharding)
    if bad is not None:
        i, axes, parts = bad
        raise ValueError(f"{what}: {where} is {found}: dim {i} of size {shape[i]} cannot be split "
                         f"over mesh axes {axes} ({parts} ways), as its annotation's layout "
                         f"{sharding.spec} asks")
