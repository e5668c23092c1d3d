"""The kernel pass's driver: a body traced once, its jaxpr followed by ``interpreter.Pass``
from the layouts of its in_specs, then bound in the shard_map's trace (``traced``).
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import jax
from jax.sharding import PartitionSpec

from ...language import entry_axes
from .. import kernel_layouts  # (the side table; it imports facts from here: read at call time)
from . import jaxpr as jaxprs
from .facts import UNKNOWN, Fact
from .interpreter import Pass

__all__ = ["infer", "traced", "in_facts"]


def infer(jaxpr: Any, facts: Sequence[Fact], points: dict, kernel: str, manual: frozenset) -> list[Fact]:
    """Runs the pass over ``jaxpr`` (a kernel body's, inputs laid out as ``facts``), comparing at
    ``points`` (jaxpr Var -> [Point]); returns the outputs' facts. Raises TypeCheckError."""
    mesh = jax.sharding.get_abstract_mesh()
    sizes = {} if mesh.empty else dict(mesh.shape)
    # A mesh axis of one device splits nothing and owes nothing.
    manual = frozenset(a for a in manual if sizes.get(a, 2) != 1)
    return Pass(kernel, manual, points, sizes).run(jaxpr, facts)


def in_facts(in_specs: Sequence[Any], arrays: Sequence[Any], names: Sequence[str]) -> list[Fact]:
    """The layout of each leaf of ``arrays`` (a shard_map's operands, named ``names``) as its
    in_specs give it, in ``jax.tree.leaves`` order."""
    facts = []
    is_spec = lambda s: isinstance(s, PartitionSpec) or s is None  # noqa: E731
    for name, specs, value in zip(names, in_specs, arrays):
        flat, treedef = jax.tree_util.tree_flatten_with_path(specs, is_leaf=is_spec)
        for (path, spec), sub in zip(flat, treedef.flatten_up_to(value)):  # type: ignore[attr-defined]
            for inner, leaf in jax.tree_util.tree_flatten_with_path(sub)[0]:
                ndim = len(getattr(leaf, "shape", ()))
                axes = [entry_axes(e) for e in (spec or ())][:ndim]
                dims = tuple(axes) + ((),) * (ndim - len(axes))
                where = jax.tree_util.keystr(tuple(path) + tuple(inner))
                vary = frozenset(a for d in dims for a in d)
                facts.append(Fact(dims, origin=f'{name}{where} (argument "{name}")' if where else f'argument "{name}"',
                                  vary=vary))
    return facts


def with_closure(jaxpr: Any, leaves: list, facts: list[Fact]) -> list[Fact]:
    """The facts of every input of a body's ``jaxpr``: values the body closes over that are traced
    outside the kernel (a jit argument, anything under ``grad``) are inputs too, staged before the
    arguments; each is the same on every device, as ``shard_map`` hands a closed-over value to
    every device whole. Matched by shape, so an argument's layout never goes to a closed-over value."""
    ins = jaxprs.invars(jaxpr)
    extra = len(ins) - len(facts)
    if extra <= 0:
        return facts
    shapes = [tuple(getattr(leaf, "shape", ())) for leaf in leaves]
    if [jaxprs.shape(v) for v in ins[extra:]] == shapes:
        closure, args = ins[:extra], facts
        return [_closed_over(v) for v in closure] + list(args)
    if [jaxprs.shape(v) for v in ins[:len(facts)]] == shapes:
        return list(facts) + [_closed_over(v) for v in ins[len(facts):]]
    jaxprs.unreadable("the kernel's inputs", f"{len(ins)} inputs for {len(facts)} arguments, in no order this "
                  "pass knows")
    return [UNKNOWN] * len(ins)


def _closed_over(v: Any) -> Fact:
    return Fact(((),) * len(jaxprs.shape(v)), origin="a value the kernel closes over", vary=frozenset())


def traced(kernel: str, run: Callable[..., Any], arrays: tuple, facts: list[Fact], manual: frozenset,
           source: Callable[..., Any] | None = None) -> Any:
    """``run(*arrays)``, a kernel's body, traced once into a jaxpr, checked by the pass (inputs
    laid out as ``facts``; the side table's values as its points), then bound in the caller's
    trace (the shard_map's), inlined from jit's cache: the body's result. ``source``: the user's
    function, which JAX's own errors name. Raises TypeCheckError."""
    leaves, tree = jax.tree.flatten(arrays)
    met: list = []

    def staged(*flat: Any) -> Any:
        kernel_layouts.flow_start(flat)
        result = run(*jax.tree.unflatten(tree, flat))
        values, points = kernel_layouts.flow_points()
        met.append(points)
        return result, values

    if source is not None:  # JAX's errors say "the function staged at <the user's kernel>"
        setattr(staged, "__wrapped__", source)
        staged.__name__ = staged.__qualname__ = getattr(source, "__name__", kernel)
    # One trace: jit's .trace() stages the body and keeps it in jit's cache, so the call below
    # inlines that jaxpr into the shard_map's trace without tracing the body again (inline: the
    # lowered program is the one tracing the body directly gives).
    jitted = jax.jit(staged, inline=True)
    staged_trace = jitted.trace(*leaves)
    closed = staged_trace.jaxpr
    shapes = staged_trace.out_info
    results = jax.tree_util.tree_flatten_with_path(shapes[0])
    n = len(results[0])
    points: dict = {}
    for var, point in zip(jaxprs.outvars(closed.jaxpr)[n:], met[-1]):
        if jaxprs.is_var(var):
            points.setdefault(var, []).append(point)
    # (A result still owing a sum fails the return annotation's check, deferred here if unknown.)
    infer(closed.jaxpr, with_closure(closed.jaxpr, leaves, facts), points, kernel, manual)
    values = jitted(*leaves)
    return jax.tree.unflatten(results[1], jax.tree.leaves(values[0]))
