"""Layouts and owed sums inferred over a kernel body's jaxpr, from JAX's primitives themselves.

The side table (``kernel_layouts``) knows the values the library touches: arguments, the results
of ``shardtypes.ops`` calls, values checked against annotations. What the user computes between
them with ``jnp`` is staged into a jaxpr, and this pass follows it, whatever the mesh and with
``check_vma`` on or off:

* the body's inputs have the layouts of their in_specs (per dim, the manual mesh axes it is split
  over); values the side table knows have its layout and owed sum (they override what the pass
  infers: an op's spec string says what its result is);
* elementwise primitives keep the layout their operands agree on (a dim the operands disagree on
  becomes unknown); transpose, broadcast, reshape (dims it keeps), squeeze, slices and the other
  structural primitives move it; collectives move mesh axes (``all_gather``, ``all_to_all``,
  ``reduce_scatter``) and pay sums (``psum``, ``reduce_scatter``);
* ``dot_general`` contracting, and ``reduce_sum`` over, a dim split over mesh axes leave a sum
  owed over them (each device holds a partial sum);
* call-like primitives (``jit``, ``remat``, ``custom_jvp_call``, ``custom_vjp_call``) and
  control flow (``scan``, ``while``, ``cond``: ``kernel_loops``) are followed inside; any other
  primitive's results have an unknown layout (and owe what its inputs owed).

The body is traced once (``traced``): staged with ``jax.jit(body, inline=True).trace``, whose
jaxpr the pass reads, then called through that ``jax.jit`` in the shard_map's trace, which
inlines the jaxpr from jit's cache without tracing the body again.

Errors (``TypeCheckError`` naming the kernel, what was checked, both layouts, the primitive and
what made a partial sum): a check the side table deferred (an annotated local or checked
argument, an ops operand, whose layout it did not know) that the inferred layout contradicts; a
partial sum reaching a nonlinear primitive, an annotation, an op other than a reduction, or the
kernel's return; a ``dot_general`` contracting dims split over different axes; a tiled
``all_gather``/``all_to_all`` over axes its dim is not split over last.

Imports: jax, the shape language, the side table and the facts; nothing above the checker.
"""


from __future__ import annotations

from typing import Any, Callable, Sequence

import jax
import jax.extend.core as jex
from jax.sharding import PartitionSpec
from typeguard import TypeCheckError

from ..language.shape import entry_axes
from .kernel_layouts import flow_points, flow_start

from .kernel_facts import ELEMENTWISE, NONLINEAR, UNKNOWN, Fact, Point, fmt, owed_text
from .kernel_loops import LOOPS
from .kernel_prims import RULES
from .kernel_specs import differences

__all__ = ["infer", "traced", "in_facts"]

_CALLS = ("jaxpr", "call_jaxpr", "fun_jaxpr")
_CALL_PRIMITIVES = frozenset({"jit", "pjit", "closed_call", "core_call", "remat", "remat2", "checkpoint",
                              "custom_jvp_call", "custom_vjp_call", "custom_vjp_call_jaxpr", "named_call"})



class _Pass:
    def __init__(self, kernel: str, manual: frozenset, points: dict):
        self.kernel = kernel
        self.manual = manual
        self.points = points  # Var -> [Point]
        self.head = f"in kernel {kernel}()"

    # -- values ----------------------------------------------------------------------------

    def read(self, env: dict, v: Any) -> Fact:
        if isinstance(v, jex.Literal):
            return UNKNOWN
        fact = env.get(v, UNKNOWN)
        if fact.dims is not None and len(fact.dims) != len(getattr(v.aval, "shape", ())):
            return fact.same_origin(None, fact.owed, fact.owed_by)  # (a rule's slip: never compare it)
        return fact

    def write(self, env: dict, v: Any, fact: Fact) -> None:
        if not isinstance(v, jex.Var) or isinstance(v, _DROP):
            return
        points = self.points.get(v)
        if points:
            fact = self.meet(fact, points)
        env[v] = fact

    def meet(self, fact: Fact, points: Sequence[Point]) -> Fact:
        """Compares an inferred fact with the side table's checks of that value, then takes what
        the table declared of it."""
        declared = None
        for point in points:
            if point.what:
                self.compare(fact, point)
                fact = self.adopt(fact, point)
            if point.declared is not None:
                declared = point.declared
        if declared is None:
            return fact
        dims = declared.dims
        if dims is not None:
            dims = tuple(tuple(a for a in axes if a in self.manual) for axes in dims)
        return declared.same_origin(dims, declared.owed & self.manual, declared.owed_by)

    def adopt(self, fact: Fact, point: Point) -> Fact:
        """A value checked against an annotation or a spec is laid out so from there on (the dims
        the pass did not know)."""
        want = tuple(tuple(a for a in axes if a in self.manual) for axes in point.expected)
        if fact.dims is None:
            return Fact(want, fact.owed, point.what, fact.owed_by)
        if len(fact.dims) != len(want) or None not in fact.dims:
            return fact
        return fact.same_origin(tuple(w if h is None else h for h, w in zip(fact.dims, want)), fact.owed,
                    fact.owed_by)

    def compare(self, fact: Fact, point: Point) -> None:
        if fact.owed and not point.sums_ok:
            raise TypeCheckError(
                f"{self.head}, {point.what}: it {owed_text(fact)}; reduce it with shardtypes.ops.psum or "
                "shardtypes.ops.psum_scatter first")
        if fact.dims is None or len(fact.dims) != len(point.expected):
            return
        want = tuple(tuple(a for a in axes if a in self.manual) for axes in point.expected)
        have = tuple(w if h is None else h for h, w in zip(fact.dims, want))
        if have != want:
            raise TypeCheckError(
                f"{self.head}, {point.what}: it is laid out {fmt(fact.dims)} ({fact.origin}), but "
                f"{'the spec string' if 'ops.' in point.what else 'the annotation'} says {fmt(want)}: "
                f"{differences(have, want, 'the spec' if 'ops.' in point.what else 'the annotation')}")

    # -- the jaxpr -------------------------------------------------------------------------

    def run(self, jaxpr: Any, facts: Sequence[Fact]) -> list[Fact]:
        env: dict = {}
        for v in jaxpr.constvars:
            self.write(env, v, UNKNOWN)
        for v, fact in zip(jaxpr.invars, facts):
            self.write(env, v, fact)
        for eqn in jaxpr.eqns:
            ins = [self.read(env, v) for v in eqn.invars]
            outs = self.eqn(eqn, ins)
            for v, fact in zip(eqn.outvars, outs):
                self.write(env, v, fact)
        return [self.read(env, v) for v in jaxpr.outvars]

    def eqn(self, eqn: Any, ins: list[Fact]) -> list[Fact]:
        name = eqn.primitive.name
        n_out = len(eqn.outvars)
        owing = [f for f in ins if f.owed]
        if owing and name in NONLINEAR:
            self.nonlinear(name, owing[0])
        rule = _RULE_OF.get(name, _MISSING)
        if rule is _MISSING:
            rule = _RULE_OF[name] = RULES.get(name) or _variant(name)
        if rule is not None:
            return rule(self, eqn, ins)
        loop = LOOPS.get(name)
        if loop is not None:
            outs = list(loop(self, eqn, ins))
            if len(outs) == n_out:
                return outs
        inner = _sub_jaxpr(eqn)
        if inner is not None:
            return self.run(inner, ins)
        if name in ELEMENTWISE or _is_cast(name):
            return [self.elementwise(eqn, ins)] * n_out
        owed = frozenset().union(*(f.owed for f in ins))
        if not owed:
            return [UNKNOWN] * n_out
        first = owing[0]
        return [first.derived(None, name, owed, first.owed_by)] * n_out

    def nonlinear(self, name: str, fact: Fact) -> None:
        raise TypeCheckError(
            f"{self.head}, a value that {owed_text(fact)} reaches JAX's {name!r}, which is not linear, so "
            f"applying it to each device's part and summing afterwards is not applying it to the sum"
            f"{'' if fact.owed_by in fact.origin else f' ({fact.origin})'}; reduce it with shardtypes.ops.psum or shardtypes.ops.psum_scatter first "
            "(see \"Sums still owed\" in docs/shard-map.md)")

    def elementwise(self, eqn: Any, ins: list[Fact]) -> Fact:
        ndim = len(eqn.outvars[0].aval.shape)
        name = eqn.primitive.name
        shaped = [(v, f) for v, f in zip(eqn.invars, ins) if len(getattr(v.aval, "shape", ())) == ndim and ndim]
        dims: list = [None] * ndim
        seen = [False] * ndim
        first = None
        for _, f in shaped:
            if f.dims is None or len(f.dims) != ndim:
                continue
            first = first or f
            for i, axes in enumerate(f.dims):
                if axes is None:
                    continue
                if not seen[i]:
                    dims[i], seen[i] = axes, True
                elif dims[i] != axes:
                    dims[i] = None  # operands disagree: unknown from here
        owing = [f for f in ins if f.owed]
        owed: frozenset = frozenset()
        by = ""
        if owing:
            owed, by = self.linear_owed(name, eqn, ins, owing)
        base = first or (owing[0] if owing else None)
        if base is None:
            return UNKNOWN
        return base.derived(tuple(dims) if first is not None else None, name, owed, by)

    def linear_owed(self, name: str, eqn: Any, ins: list[Fact], owing: list[Fact]) -> tuple[frozenset, str]:
        if name in ("mul", "dot_general") and len(owing) > 1:
            raise TypeCheckError(
                f"{self.head}, JAX's {name!r} multiplies two partial sums ({owing[0].owed_by}; "
                f"{owing[1].owed_by}): the product of sums is not the sum of products; reduce them "
                "with shardtypes.ops.psum first")
        if name == "div" and ins[1].owed:
            self.nonlinear("div (by a partial sum)", ins[1])
        if name == "select_n" and ins[0].owed:
            self.nonlinear("select_n (choosing by a partial sum)", ins[0])
        # (Not add_any, which only JAX's AD emits, to add up cotangents: each is one device's
        # contribution to a sum that the transpose of a pvary pays after, owed or not here.)
        if name in ("add", "sub"):
            other = [f for f in ins if not f.owed and f.dims is not None]
            if other:
                raise TypeCheckError(
                    f"{self.head}, JAX's {name!r} adds a value that {owed_text(owing[0])} and one that "
                    f"owes none ({other[0].origin}): after the sum over the mesh the second is counted once "
                    "per device; reduce the partial sum with shardtypes.ops.psum first (or add the other "
                    "value on one device only)")
        owed = frozenset().union(*(f.owed for f in owing))
        return owed, owing[0].owed_by


_RULE_OF: dict[str, Any] = {}  # a primitive's name -> its rule (or None), once looked up
_MISSING = object()
_DROP = getattr(jex, "DropVar", ())


def _is_cast(name: str) -> bool:
    """check_vma's casts between varying, unreduced and reduced types (``pvary``,
    ``vary_unreduced_cast_p``, ``reduced_vary_cast_p``...): the value itself is unchanged."""
    return name.startswith(("pvary", "pcast")) or name.endswith("cast_p")


def _variant(name: str) -> Any:
    """The rule of a collective's variant (``unreduced_psum``, ``psum_invariant``...)."""
    for base in ("psum_scatter", "reduce_scatter", "psum", "all_gather", "all_to_all", "ppermute"):
        if base in name:
            return RULES.get("reduce_scatter" if base == "psum_scatter" else base)
    return None


def _sub_jaxpr(eqn: Any) -> Any:
    """The jaxpr a call-like primitive runs on its operands as they are (not a loop's body,
    whose operands are slices or carries)."""
    if eqn.primitive.name not in _CALL_PRIMITIVES:
        return None
    for key in _CALLS:
        inner = eqn.params.get(key)
        if inner is None:
            continue
        jaxpr = getattr(inner, "jaxpr", inner)
        if isinstance(jaxpr, jex.Jaxpr) and len(jaxpr.invars) == len(eqn.invars) \
                and len(jaxpr.outvars) == len(eqn.outvars):
            return jaxpr
    return None



def infer(jaxpr: Any, facts: Sequence[Fact], points: dict, kernel: str, manual: frozenset) -> list[Fact]:
    """Runs the pass over ``jaxpr`` (a kernel body's, inputs laid out as ``facts``), comparing at
    ``points`` (jaxpr Var -> [Point]); returns the outputs' facts. Raises TypeCheckError."""
    return _Pass(kernel, manual, points).run(jaxpr, facts)


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
                facts.append(Fact(dims, origin=f'{name}{where} (argument "{name}")' if where else f'argument "{name}"'))
    return facts


def traced(kernel: str, run: Callable[..., Any], arrays: tuple, facts: list[Fact], manual: frozenset,
           source: Callable[..., Any] | None = None) -> Any:
    """``run(*arrays)``, a kernel's body, traced once into a jaxpr, checked by the pass (inputs
    laid out as ``facts``; the side table's values as its points), then bound in the caller's
    trace (the shard_map's), inlined from jit's cache: the body's result. ``source``: the user's
    function, which JAX's own errors name. Raises TypeCheckError."""
    leaves, tree = jax.tree.flatten(arrays)
    met: list = []

    def staged(*flat: Any) -> Any:
        flow_start(flat)
        result = run(*jax.tree.unflatten(tree, flat))
        values, points = flow_points()
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
    for var, point in zip(closed.jaxpr.outvars[n:], met[-1]):
        if isinstance(var, jex.Var):
            points.setdefault(var, []).append(point)
    # (A result still owing a sum fails the return annotation's check, deferred here if unknown.)
    infer(closed.jaxpr, facts, points, kernel, manual)
    values = jitted(*leaves)
    return jax.tree.unflatten(results[1], jax.tree.leaves(values[0]))
