"""The sizes an annotation's dims take from a ``dims`` table: each dim's size (``dim_size``, with
size expressions evaluated), the names an annotation tree uses, and a ``dims`` table checked
against them. ``make_shape_dtype_structs``, ``verify`` and ``plan`` size their arrays with these.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

from ..language import (
    ANY,
    BROADCAST,
    EXPR,
    FIXED,
    NAMED,
    VARIADIC,
    check_dims,
    divides,
    entry_axes,
    evaluate,
    unused_dims_error,
)
from ..model import Leaf, walk_leaves

__all__ = ["check_dims_for", "dims_used", "undivided"]


def dim_size(dim, sizes: Mapping[str, Any], leaf: Leaf, index: int, required: bool) -> Any:
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


def _evaluate(dim, sizes: Mapping[str, Any], leaf: Leaf, index: int) -> Any:
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


def dims_used(annotation: Any, like: Any = None) -> tuple[set[str], set[str]]:
    """The dim names an annotation tree uses: (single dims, ``*name`` dims)."""
    single: set[str] = set()
    variadic: set[str] = set()

    def leaf(leaf: Leaf) -> None:
        for dim in leaf.spec.dims:
            if dim.kind == VARIADIC:
                variadic.add(dim.shape[1:])
            else:
                single.update(dim.names)

    walk_leaves(annotation, leaf, like=like)
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
        from ..language import close_name

        unused = [n for n in unused if close_name(n, used) is not None]
    if unused:
        raise unused_dims_error(unused, used, what)
    return dims


def undivided(shape: tuple, sharding: Any) -> tuple[int, tuple[str, ...], int] | None:
    """``(dim, mesh axes, ways)`` of the first dim of ``shape`` that ``sharding`` (a
    NamedSharding) splits more ways than its size divides into; None if every dim divides."""
    sizes = dict(sharding.mesh.shape)
    for i, entry in enumerate(sharding.spec):
        axes = entry_axes(entry)
        parts = math.prod(sizes[a] for a in axes)
        if i < len(shape) and parts > 1 and not divides(shape[i], parts):
            return i, axes, parts
    return None
