"""Plans and the fast path. A ``Plan`` is everything a check needs that depends only on the
annotation, made once per annotation class (``plan_of``); ``fast_check`` checks a concrete
``jax.Array`` against a simple plan with no message work, from a memo per (shape, dtype,
sharding, rules), and leaves every other case (and every failure) to the full check in
``_check``, which explains it.
"""

from __future__ import annotations

from typing import Any

import jax
from jax.sharding import NamedSharding
from typeguard import TypeCheckError

from ._dtypes import annotation_class, number
from ._rules import _ACTIVE as _ACTIVE_RULES
from ._shape import ANY, FIXED, NAMED, ShapeSpec
from ._sharding_check import _named_sharding_problem

__all__ = ["Plan", "plan_of", "plan_for", "fast_check", "leaf_memo"]


_MISSING = object()
_NOTHING_NEW: dict = {}  # shared: never mutated

# Concrete (non-tracer) jax.Array classes seen so far; lets the fast path skip ABC isinstance.
_ARRAY_TYPES: set[type] = set()
_CACHE_LIMIT = 512


class Plan:
    """What one annotation needs at check time, computed once per annotation.

    ``names`` is set for the common shapes made only of names, integers and ``_``: one entry per
    dim (a name, an int, or None). ``seen`` memoises, per (shape, dtype, sharding) that passed,
    the (name, size) pairs left to check against the dimension table.
    """

    __slots__ = ("dtype_cls", "spec", "text", "array_type", "strict_type", "names", "ndim", "seen",
                 "by_id", "agreed")

    def __init__(self, dtype_cls: type[number], spec: ShapeSpec, text: str, array_type: type | None = None):
        self.dtype_cls = dtype_cls
        self.spec = spec
        self.text = text
        # The class a value must be an instance of (f32[jax.Array, b'...']), or None; and the
        # same where a concrete jax.Array might not be one (the fast paths then step aside).
        self.array_type = array_type
        self.strict_type = array_type if array_type not in (None, jax.Array, object) else None
        self.ndim = len(spec.dims)
        simple = all(d.kind in (NAMED, FIXED, ANY) for d in spec.dims)
        self.names = (
            tuple(d.shape if d.kind == NAMED else d.expr for d in spec.dims) if simple else None
        )
        self.seen: dict = {}  # (shape, dtype, sharding, rules) -> pairs
        self.by_id: dict = {}  # id(sharding) -> memo (see leaf_memo)
        # (sizes, memo) of the last table found to hold all of a memo's pairs already.
        self.agreed: tuple = (None, None)


def fast_check(value: Any, plan: Plan, sizes: dict) -> dict | None:
    """The check of a concrete jax.Array against a simple annotation, with no message work.

    Everything but the dimension table is a function of (shape, dtype, sharding), so it is
    memoised per annotation as the list of (name, size) pairs to bind or compare. Returns the new
    bindings, or None when the value needs the full check (which also explains any failure).
    """
    if type(value) not in _ARRAY_TYPES or plan.strict_type is not None:
        return None
    sharding = value.sharding
    memo = plan.by_id.get(id(sharding))
    if (memo is None or memo[0] is not sharding or memo[2] != value.shape
            or memo[1] is not value.dtype or memo[3] is not _ACTIVE_RULES.get()):
        memo = _new_memo(value, plan, sharding)
        if memo is None:
            return None
    if not sizes:  # the first value of a call: its bindings are exactly the (consistent) pairs
        return memo[5]
    agreed = plan.agreed
    if agreed[0] is sizes and agreed[1] is memo:
        return _NOTHING_NEW  # this table already holds every pair (tables never change)
    new: dict = {}
    for name, size in memo[4]:
        bound = sizes.get(name, _MISSING)
        if bound is _MISSING:
            bound = new.get(name, _MISSING)
            if bound is _MISSING:
                new[name] = size
                continue
        if bound != size:
            return None
    if not new:
        plan.agreed = (sizes, memo)
    return new


def leaf_memo(value: Any, plan: Plan, active: Any) -> tuple | None:
    """For a concrete jax.Array that passes ``plan`` apart from the table: its memo
    ``(sharding, dtype, shape, rules, pairs, first)``, where ``pairs`` are the (name, size)
    pairs to bind or compare and ``first`` the same as a dict (never mutated: tables copy on
    bind). None if the annotation is not simple or the value fails (the full check explains)."""
    sharding = value.sharding
    memo = plan.by_id.get(id(sharding))
    if (memo is None or memo[0] is not sharding or memo[2] != value.shape
            or memo[1] is not value.dtype or memo[3] is not active):
        return _new_memo(value, plan, sharding)
    return memo


def _new_memo(value: Any, plan: Plan, sharding: Any) -> tuple | None:
    """The memo of a (shape, dtype, sharding, rules) not met with this sharding object before.
    Kept per id(sharding): arrays laid out alike share their sharding object, so the next
    lookup needs no hash of the sharding, which costs more than the rest of the check."""
    shape, dtype, active = value.shape, value.dtype, _ACTIVE_RULES.get()
    key = (shape, dtype, sharding, active)
    pairs = plan.seen.get(key)
    if pairs is None:
        pairs = _simple_pairs(plan, key)
        if pairs is None:
            return None
    memo = (sharding, dtype, shape, active, pairs, dict(pairs))
    if len(plan.by_id) > _CACHE_LIMIT:
        plan.by_id.clear()
    plan.by_id[id(sharding)] = memo
    return memo


def _simple_pairs(plan: Plan, key: tuple) -> tuple | None:
    names = plan.names
    shape, dtype, sharding, active = key
    if names is None or len(shape) != plan.ndim or not plan.dtype_cls.accepts(dtype):
        return None
    if isinstance(sharding, NamedSharding):
        if _named_sharding_problem(sharding, plan.spec, plan.ndim, active, shape) is not None:
            return None
    elif plan.spec.is_sharded or active is not None or not sharding.is_fully_replicated:
        return None  # compared against the current mesh, so not memoised
    # else: an unsharded annotation and a replicated array (a plain jnp array): always fine.
    pairs = []
    seen: dict = {}
    for name, size in zip(names, shape):
        if name is None:
            continue
        if name.__class__ is int:
            if size != name:
                return None
            continue
        if name in seen:  # a name used twice in one annotation: sizes must agree, keep one pair
            if seen[name] != size:
                return None
            continue
        seen[name] = size
        pairs.append((name, size))
    if len(plan.seen) > _CACHE_LIMIT:
        plan.seen.clear()
    result = plan.seen[key] = tuple(pairs)
    return result


def annotation_text(origin: type, shape: bytes) -> str:
    return f"{origin.__name__}[{shape!r}]"


_PLANS: dict[type, Plan] = {}


def malformed(origin: type, args: tuple) -> TypeCheckError:
    """The error for a dtype class used bare (``x: f32``) or subscripted by hand
    (``types.GenericAlias(f32, (3,))``)."""
    return TypeCheckError(
        f"has a malformed annotation {origin.__name__}{list(args)}; write "
        f"{origin.__name__}[jax.Array, b'batch embed'] or {origin.__name__}[b'batch embed']"
    )


def plan_of(annotation: type[number]) -> Plan:
    """The plan of a subscripted annotation class (made once, then kept)."""
    plan = _PLANS.get(annotation)
    if plan is None:
        spec, shape = annotation.spec, annotation.shape_string
        if spec is None or shape is None:
            raise malformed(annotation, ())
        text = repr(annotation).removeprefix("shardtypes.")
        plan = _PLANS[annotation] = Plan(annotation.dtype_class, spec, text, annotation.array_type)
    return plan


def plan_for(annotation: Any) -> Plan | None:
    """The plan of a shardtypes array annotation, or None for any other annotation."""
    plan = _PLANS.get(annotation) if isinstance(annotation, type) else None
    if plan is not None:
        return plan
    found = annotation_class(annotation)
    return plan_of(found) if found is not None else None
