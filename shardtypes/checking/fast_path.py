"""The fast path: a concrete ``jax.Array``, or a tree of them, checked against a simple plan with
no message work, from memos per (shape, dtype, sharding, rules) kept on the plan; every other
case (and every failure) goes to the full check (``check``), which explains it.

For trees: a tree value is flattened by JAX (in C++) and each leaf is checked against the plan
its path leads to, with no typeguard machinery per leaf. Which plan each leaf gets depends only
on the value's tree structure, so it is worked out once per ``PyTreeDef`` (after a full check of
a value of that structure has passed) and kept on the model's node.
"""

from __future__ import annotations

from typing import Any, Union

import jax
from jax.sharding import NamedSharding

from ..context import ACTIVE as _ACTIVE_RULES
from ..model import ArrayNode, ClassNode, DictNode, Node, Plan, PyTreeNode, SeqNode, follow
from .sharding import named_sharding_problem

__all__ = ["fast_check", "leaf_memo", "fast_tree", "tree_node", "learn_layout"]


MISSING = object()
_NOTHING_NEW: dict = {}  # shared: never mutated

# Concrete (non-tracer) jax.Array classes seen so far; lets the fast path skip ABC isinstance.
ARRAY_TYPES: set[type] = set()
_CACHE_LIMIT = 512


def fast_check(value: Any, plan: Plan, sizes: dict) -> dict | None:
    """The check of a concrete jax.Array against a simple annotation, with no message work.

    Everything but the dimension table is a function of (shape, dtype, sharding), so it is
    memoised per annotation as the list of (name, size) pairs to bind or compare. Returns the new
    bindings, or None when the value needs the full check (which also explains any failure).
    """
    if type(value) not in ARRAY_TYPES or plan.strict_type is not None:
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
        bound = sizes.get(name, MISSING)
        if bound is MISSING:
            bound = new.get(name, MISSING)
            if bound is MISSING:
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
        if named_sharding_problem(sharding, plan.spec, plan.ndim, active, shape) is not None:
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


# The fast path for trees.

# The nodes whose values are trees of several leaves: the fast path learns a layout per structure.
TreeNode = Union[ClassNode, SeqNode, DictNode, PyTreeNode]


def tree_node(node: Node) -> TreeNode | None:
    """``node`` if it is a tree with arrays in it (the fast path of trees applies), else None."""
    return node if isinstance(node, (ClassNode, SeqNode, DictNode, PyTreeNode)) and node.has_arrays else None


def fast_tree(value: Any, node: TreeNode, sizes: dict) -> tuple | None:
    """The check of a tree of concrete jax.Arrays against ``node`` with no message work:
    ``(new bindings, leaf index of each new name, the structure)``, or None when the full check
    must run (a structure not seen before, a leaf that is not a concrete array, or any mismatch,
    which the full check then explains)."""
    leaves, treedef = jax.tree_util.tree_flatten(value)
    layout = node.layouts.get(treedef)
    if layout is None or not set(map(type, leaves)) <= ARRAY_TYPES:
        return None
    plans = layout.plans
    active = _ACTIVE_RULES.get()
    memos: list[tuple] = []
    append = memos.append
    for leaf, plan in zip(leaves, plans):
        sharding = leaf.sharding
        memo = plan.by_id.get(id(sharding))
        if (memo is None or memo[0] is not sharding or memo[2] != leaf.shape
                or memo[1] is not leaf.dtype or memo[3] is not active):
            memo = leaf_memo(leaf, plan, active)
            if memo is None:
                return None
        append(memo)
    last = layout.last
    if last[0] is sizes and last[1] == memos:  # compares by identity first: a C loop
        return last[2]
    found = _merge(memos, sizes, treedef)
    if found is not None:
        layout.last = (sizes, memos, found)
    return found


def _merge(memos: list, sizes: dict, treedef: Any) -> tuple | None:
    """The names the leaves' pairs bind (and the first leaf binding each), or None on a clash."""
    new: dict = {}
    first_leaf: dict = {}
    done: set = set()
    for i, memo in enumerate(memos):
        pairs = memo[4]
        if not pairs or id(pairs) in done:
            continue  # the same pairs as a leaf before: already consistent
        done.add(id(pairs))
        for name, size in pairs:
            bound = sizes.get(name, MISSING)
            if bound is MISSING:
                bound = new.get(name, MISSING)
                if bound is MISSING:
                    new[name] = size
                    first_leaf[name] = i
                    continue
            if bound != size:
                return None
    return new, first_leaf, treedef


class _Layout:
    """The plan of each leaf of one tree structure, and the last call's answer."""

    __slots__ = ("plans", "last")

    def __init__(self, plans: tuple):
        self.plans = plans
        self.last: tuple = (None, None, None)  # (sizes, memos, answer)


def learn_layout(value: Any, node: Node) -> None:
    """After ``value`` passed the full check against ``node``: remember which plan each leaf of
    its structure gets, so the next value of the same structure takes the fast path. Leaves
    whose path leads to no array annotation leave the structure to the full check."""
    layouts = getattr(node, "layouts", None)
    if layouts is None:
        return
    path_leaves, treedef = jax.tree_util.tree_flatten_with_path(value)
    if treedef in layouts:
        return
    plans = []
    for path, _ in path_leaves:
        target = follow(node, path)
        if not isinstance(target, ArrayNode) or target.plan.strict_type is not None:
            return  # (a leaf that must be some other array class: never the fast path)
        plans.append(target.plan)
    if len(layouts) > 64:
        layouts.clear()
    layouts[treedef] = _Layout(tuple(plans))


