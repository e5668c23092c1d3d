"""The global inputs ``assert_same_on_every_mesh`` makes from a function's annotations when none
are given: sizes that every mesh tried divides, and values that make sums and matmuls exact.

Sizes: a dim named in ``dims`` takes that size; any other named dim the smallest multiple of 4
that every mesh tried divides it by (the lcm of the products of the axes that shard it, on each
mesh). Values: integers drawn from a small range, stored in the annotated dtype (floats from
[-2, 2], 16- and 8-bit floats from [-1, 1], integers from [0, 4), booleans at random, PRNG keys
split from ``seed``), so that a sum or a matmul of them is an integer the dtype holds exactly,
whatever order the devices add in.
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from ..layout import check_dims_for, dim_multiples, dims_used, shardings, structs, undivided

__all__ = ["input_sizes", "made_inputs", "integer_valued", "undivided_input"]


def input_sizes(annotations: Sequence[Any], shapes: Sequence[Mapping[str, int]], dims: Any,
                what: str) -> dict[str, Any]:
    """Sizes for every dim name the annotations use: ``dims`` (validated against those names: a
    name none of them uses is an error naming the nearest), the rest multiples of what the
    ``shapes`` split them into."""
    single: set[str] = set()
    variadic: set[str] = set()
    for annotation in annotations:
        try:
            s, v = dims_used(annotation)
        except TypeError:
            continue  # not an array tree
        single |= s
        variadic |= v
    given = check_dims_for({} if dims is None else dims, single, variadic, what)
    missing = sorted(n for n in variadic if n not in given)
    if missing:
        raise ValueError(f"{what}: dims {missing} stand for several dims ('*name'): give each as a tuple in dims=")
    multiples: dict[str, int] = {}
    for shape in shapes:
        found, _ = dim_multiples(annotations, shape)
        for name, m in found.items():
            multiples[name] = math.lcm(multiples.get(name, 1), m)
    sizes = dict(given)
    for name in sorted(single - set(given)):
        m = multiples.get(name, 1)
        sizes[name] = m * max(1, -(-4 // m))
    return sizes


def _values(struct: jax.ShapeDtypeStruct, rng: np.random.Generator, seed: int) -> Any:
    dtype = struct.dtype
    shape = tuple(struct.shape)
    if jnp.issubdtype(dtype, jax.dtypes.prng_key):
        keys = jax.random.split(jax.random.key(seed), max(1, math.prod(shape)))
        return keys.reshape(shape)
    if np.dtype(dtype) == np.bool_:
        return rng.integers(0, 2, shape).astype(bool)
    if jnp.issubdtype(dtype, np.integer):
        return rng.integers(0, 4, shape).astype(dtype)
    if jnp.issubdtype(dtype, np.complexfloating):
        return (rng.integers(-2, 3, shape) + 1j * rng.integers(-2, 3, shape)).astype(dtype)
    bound = 2 if np.dtype(dtype).itemsize >= 4 else 1
    return rng.integers(-bound, bound + 1, shape).astype(dtype)


def made_inputs(annotations: Sequence[Any], names: Sequence[str], sizes: Mapping[str, Any], mesh: Any,
                seed: int, what: str) -> list[Any]:
    """One global input per annotation (numpy arrays, trees shaped as annotated), drawn from
    ``seed``. An annotation with no array layout (an int, a config) cannot be made: an error
    naming the parameter."""
    rng = np.random.default_rng(seed)
    out = []
    for name, annotation in zip(names, annotations):
        try:
            tree = structs(annotation, sizes, mesh)
        except TypeError:
            raise TypeError(f"{what}: parameter {name!r} is annotated {annotation!r}, which is not an array tree, so "
                            "no input can be made for it: pass the inputs (args), or bind it with "
                            "functools.partial") from None
        except ValueError as e:
            raise ValueError(f"{what}: no input can be made for parameter {name!r}: {e}") from None
        out.append(jax.tree.map(lambda s: _values(s, rng, seed), tree))
    return out


def integer_valued(values: Any) -> bool:
    """Whether every floating-point leaf of ``values`` holds only integers (and no inf or nan)."""
    for leaf in jax.tree.leaves(values):
        if not hasattr(leaf, "dtype") or jnp.issubdtype(leaf.dtype, jax.dtypes.prng_key):
            continue
        if jnp.issubdtype(leaf.dtype, np.inexact):
            array = np.asarray(leaf)
            if not np.all(np.isfinite(array)) or not np.array_equal(array, np.round(array)):
                return False
    return True


def undivided_input(value: Any, annotation: Any, mesh: Any) -> str | None:
    """Why ``value`` cannot be laid out as ``annotation`` on ``mesh`` (a dim its axes do not
    divide), or None. Values whose tree does not line up with the annotation are left to
    ``shard``, which says what differs."""
    try:
        tree = shardings(annotation, mesh, unconstrained="auto")
    except (TypeError, ValueError):
        return None
    values = jax.tree.leaves(value)
    layouts = jax.tree.leaves(tree)
    if len(values) != len(layouts):
        return None
    for path_leaf, sharding in zip(jax.tree_util.tree_leaves_with_path(value), layouts):
        path, leaf = path_leaf
        shape = tuple(np.shape(leaf))
        found = undivided(shape, sharding)
        if found is not None:
            dim, axes, ways = found
            where = jax.tree_util.keystr(path)
            return (f"dim {dim} of {where or 'it'} is {shape[dim]}, which {'x'.join(axes)} "
                    f"({ways} ways) does not divide")
    return None
