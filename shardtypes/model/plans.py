"""Plans: a ``Plan`` is everything a check needs that depends only on the annotation, made once
per annotation class (``plan_of``). The checker's fast path (``shardtypes.checking.fast_path``)
keeps its memos on it.
"""

from __future__ import annotations

import types
from typing import Any

import jax
from typeguard import TypeCheckError

from ..language import ANY, FIXED, MALFORMED, NAMED, ShapeSpec, linked
from .annotations import annotation_class, number
from .array_classes import union_members

__all__ = ["Plan", "plan_of", "plan_for", "malformed", "annotation_text"]




class Plan:
    """What one annotation needs at check time, computed once per annotation.

    ``names`` is set for the common shapes made only of names, integers and ``_``: one entry per
    dim (a name, an int, or None). ``seen`` memoises, per (shape, dtype, sharding) that passed,
    the (name, size) pairs left to check against the dimension table.
    """

    __slots__ = ("dtype_cls", "spec", "text", "array_type", "strict_type", "names", "ndim", "seen",
                 "by_id", "agreed")

    def __init__(self, dtype_cls: type[number], spec: ShapeSpec, text: str,
                 array_type: type | types.UnionType | None = None):
        self.dtype_cls = dtype_cls
        self.spec = spec
        self.text = text
        # The class a value must be an instance of (f32[jax.Array, b'...']), or None; and the
        # same where a concrete jax.Array might not be one (the fast paths then step aside).
        self.array_type = array_type
        # A union with jax.Array among its members (host-or-device) takes every concrete jax.Array,
        # the only values the fast paths see: they need not step aside for it.
        members = union_members(array_type) or (array_type,)
        self.strict_type = None if any(m in (None, jax.Array, object) for m in members) else array_type
        self.ndim = len(spec.dims)
        simple = all(d.kind in (NAMED, FIXED, ANY) for d in spec.dims)
        self.names = (
            tuple(d.shape if d.kind == NAMED else d.expr for d in spec.dims) if simple else None
        )
        self.seen: dict = {}  # (shape, dtype, sharding, rules) -> pairs
        self.by_id: dict = {}  # id(sharding) -> memo (see leaf_memo)
        # (sizes, memo) of the last table found to hold all of a memo's pairs already.
        self.agreed: tuple = (None, None)


def annotation_text(origin: type, shape: bytes) -> str:
    return f"{origin.__name__}[{shape!r}]"


PLANS: dict[type, Plan] = {}


def malformed(origin: type, args: tuple) -> TypeCheckError:
    """The error for a dtype class used bare (``x: f32``) or subscripted by hand
    (``types.GenericAlias(f32, (3,))``)."""
    return TypeCheckError(linked(
        f"has a malformed annotation {origin.__name__}{list(args)}; write "
        f"{origin.__name__}[jax.Array, b'batch embed'] or {origin.__name__}[b'batch embed']", MALFORMED
    ))


def plan_of(annotation: type[number]) -> Plan:
    """The plan of a subscripted annotation class (made once, then kept)."""
    plan = PLANS.get(annotation)
    if plan is None:
        spec, shape = annotation.spec, annotation.shape_string
        if spec is None or shape is None:
            raise malformed(annotation, ())
        text = repr(annotation).removeprefix("shardtypes.")
        plan = PLANS[annotation] = Plan(annotation.dtype_class, spec, text, annotation.array_type)
    return plan


def plan_for(annotation: Any) -> Plan | None:
    """The plan of a shardtypes array annotation, or None for any other annotation."""
    plan = PLANS.get(annotation) if isinstance(annotation, type) else None
    if plan is not None:
        return plan
    found = annotation_class(annotation)
    return plan_of(found) if found is not None else None
