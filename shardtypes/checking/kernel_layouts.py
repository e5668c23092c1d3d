"""Layouts that follow values through a ``typed_shard_map`` kernel, and sums still owed.

While a kernel's body is traced, a side table maps each value whose layout shardtypes knows to
that layout (per dim, the mesh axes it is split over) and to the mesh axes it is still a partial
sum over. Values enter it where the library knows their layout:

* every array the body receives (each argument, each field of a dataclass argument), and every
  value a checked function or annotated local inside the body is checked against: the layout its
  annotation gives (``record_checked``, called by the checker);
* every result of a ``shardtypes.ops`` call: the layout its spec string gives, and, for
  ``einsum_unreduced`` and ``index_unreduced``, the mesh axes of the dims it leaves unreduced.

Each op compares its operands' known layouts with its spec string dim by dim and axis by axis
(``operand``), so two mesh axes of the same size swapped are caught whatever the mesh; an
annotation check compares the same way; a value still owing a sum may only go to ``ops.psum`` or
``ops.psum_scatter``. A value the table does not know (the result of a ``jnp`` op, an argument of
a nested ``grad``/``vmap``/``scan`` body) is unknown: the size checks are all there is for it.

The table is keyed by ``id()`` and holds the value itself, so no id is reused while it lives
(tracers are unhashable, and a bare ``id()`` is reused within one trace once a temporary dies).
It lives for one trace of the body (``tracking``) and is emptied after it, even on failure.

Imports: the shape language, rules, config and descriptions; nothing above the checker.
"""

from __future__ import annotations

import contextlib
import contextvars
import re
from typing import Any, Callable, Iterator

import jax
from jax.core import Tracer
from typeguard import TypeCheckError

from ..context.compat import varying_axes
from ..context.settings import checks_on
from ..model.describe import Mismatch, _fmt_layout
from ..context.rule_resolution import layout as rules_layout
from ..language.shape import ShapeSpec, ShapeSpecError

__all__ = ["tracking", "is_staged", "mark_unreduced", "known", "record", "record_checked", "operand", "op_operand", "op_result", "owed_message",
           "REDUCERS"]

Layout = tuple[tuple[str, ...], ...]

# The ops that may take a value still owing a sum: they pay (part of) it.
REDUCERS = frozenset({"psum", "psum_scatter"})

# Off only for measuring what tracking costs (benchmarks/shard_map.py).
ENABLED = True


class Known:
    """What the table knows of one value."""

    __slots__ = ("value", "layout", "origin", "owed", "owed_by")

    def __init__(self, value: Any, layout: Layout, origin: str, owed: frozenset = frozenset(),
                 owed_by: str = ""):
        self.value = value  # held: its id() stays unique while the table lives
        self.layout = layout
        self.origin = origin
        self.owed = owed  # mesh axes it is a partial sum over
        self.owed_by = owed_by  # the op call that left it unreduced


class _Trace:
    __slots__ = ("kernel", "entries", "gathered", "staged", "marked")

    def __init__(self, kernel: str, staged: bool = False):
        self.kernel = kernel
        self.staged = staged  # the body is staged into a jaxpr: JAX can type partial sums
        self.marked: list[Known] = []  # partial sums JAX types unreduced (see mark_unreduced)
        self.entries: dict[int, Known] = {}
        # Mesh axes ops.all_gather has gathered over in this trace: JAX types its results (and
        # all that is computed from them) as varying over them although they are the same on
        # every device, so varying over them says nothing (see _check._manual_layout).
        self.gathered: set[str] = set()


_TRACE: contextvars.ContextVar[_Trace | None] = contextvars.ContextVar("shardtypes.kernel_layouts", default=None)
# A kernel body traced with tracking off: nothing is recorded, and varying axes are not compared
# (without the record of what the kernel gathered they would reject gathered values).
_OFF = _Trace("")


@contextlib.contextmanager
def tracking(kernel: str, staged: bool = False) -> Iterator[None]:
    """Layouts are tracked inside: one trace of kernel ``kernel``'s body; ``staged``: the body
    is traced into a jaxpr (``is_staged``), so partial sums are typed unreduced for JAX too."""
    if not ENABLED or not checks_on():
        token = _TRACE.set(_OFF)  # an outer kernel's table is not this body's
        try:
            yield
        finally:
            _TRACE.reset(token)
        return
    trace = _Trace(kernel, staged)
    token = _TRACE.set(trace)
    try:
        yield
    except Exception as e:  # JAX's refusals of ops on unreduced values (see jax_refusal)
        refusal = jax_refusal(trace, e)
        if refusal is None:
            raise
        raise refusal from e
    finally:
        _TRACE.reset(token)
        trace.entries.clear()  # drop the tracers now, failed trace or not
        trace.marked.clear()


# Set while an op checks its own operands and result: those checks leave layouts and varying
# axes to the op (a gathered or unreduced result varies over axes its spec does not name).
_IN_OP: contextvars.ContextVar[bool] = contextvars.ContextVar("shardtypes.in_op", default=False)


@contextlib.contextmanager
def op_check() -> Iterator[None]:
    token = _IN_OP.set(True)
    try:
        yield
    finally:
        _IN_OP.reset(token)


def in_op() -> bool:
    return _IN_OP.get()


def gathered(axes: Any) -> None:
    trace = _active()
    if trace is not None:
        trace.gathered.update(axes)


def vma_exempt() -> frozenset | None:
    """The manual axes whose varying says nothing here (gathered by ops.all_gather in this
    kernel trace), or None where varying axes are not compared at all (tracking off)."""
    trace = _TRACE.get()
    if trace is _OFF:
        return None
    return frozenset(trace.gathered) if trace is not None else frozenset()


def _active() -> _Trace | None:
    trace = _TRACE.get()
    return None if trace is _OFF else trace


def known(value: Any) -> Known | None:
    trace = _active()
    if trace is None:
        return None
    entry = trace.entries.get(id(value))
    return entry if entry is not None and entry.value is value else None


def record(value: Any, layout: Layout, origin: str, owed: frozenset = frozenset(), owed_by: str = "") -> None:
    trace = _active()
    if trace is not None and isinstance(value, jax.Array):
        trace.entries[id(value)] = Known(value, tuple(layout), origin, frozenset(owed), owed_by)


# ---------------------------------------------------------------------------------------------
# Annotation checks (the checker calls this for each value it checks inside a shard_map body).


def record_checked(value: Any, expected: Layout, context: Callable[[], str]) -> Known | None:
    """A value checked against an annotation whose layout is ``expected``: a known value must be
    laid out so and owe no sum (else ``Mismatch``); an unknown one is known from now on.
    Returns the value's entry from before the check (None if it was unknown)."""
    trace = _active()
    if trace is None or not isinstance(value, jax.Array):
        return None
    entry = trace.entries.get(id(value))
    if entry is not None and entry.value is value:
        if entry.owed:
            raise Mismatch(f"it {owed_message(entry)}; reduce it with shardtypes.ops.psum or "
                           "shardtypes.ops.psum_scatter first")
        if entry.layout != expected and len(entry.layout) == len(expected):
            raise Mismatch(f"it is laid out {_fmt_layout(entry.layout)} (as {entry.origin}), but the "
                           f"annotation says {_fmt_layout(expected)}: {differences(entry.layout, expected, 'the annotation')}")
        return entry
    trace.entries[id(value)] = Known(value, tuple(expected), context())
    return None


def owed_message(entry: Known) -> str:
    axes = ", ".join(repr(a) for a in sorted(entry.owed))
    plural = "axes" if len(entry.owed) > 1 else "axis"
    return f"is a partial sum still owing a sum over mesh {plural} {axes} (made by {entry.owed_by})"


# ---------------------------------------------------------------------------------------------
# Ops.


def layout_of(spec: ShapeSpec, ndim: int) -> Layout:
    """The mesh axes of each of ``ndim`` dims laid out as ``spec`` (through active rules)."""
    mesh = jax.sharding.get_abstract_mesh()
    return rules_layout(spec, ndim, None if mesh.empty else dict(mesh.shape))


def operand(op_call: str, what: str, value: Any, spec: ShapeSpec, op: str) -> frozenset:
    """Compares a known operand's layout with the op's input ``spec`` (``what`` names the
    operand in the op: 'operand', 'operand 1', 'table'); returns the axes it still owes a sum
    over (none if unknown). Raises TypeCheckError on any difference."""
    entry = known(value)
    if entry is None:
        return frozenset()
    trace = _active()
    head = f"in kernel {trace.kernel}(), {op_call}" if trace is not None else op_call
    if entry.owed and op not in REDUCERS:
        raise TypeCheckError(
            f"{head}: {what} ({entry.origin}) {owed_message(entry)}; reduce it with "
            f"shardtypes.ops.psum or shardtypes.ops.psum_scatter before shardtypes.ops.{op}"
        )
    ndim = len(entry.layout)
    if spec.variadic_index is None and len(spec.dims) != ndim:
        return entry.owed  # a rank mismatch: the size check says so
    expected = layout_of(spec, ndim)
    if expected != entry.layout:
        raise TypeCheckError(
            f"{head}: {what} ({entry.origin}) is laid out {_fmt_layout(entry.layout)}, but the spec "
            f"string's input {str(spec)!r} says {_fmt_layout(expected)}: "
            f"{differences(entry.layout, expected, 'the spec')}"
        )
    return entry.owed


def op_operand(op: str, spec_text: Any, what: str, value: Any, spec: ShapeSpec) -> Known | None:
    """``operand`` for op ``op`` called with ``spec_text``; the operand's entry (None if
    unknown)."""
    if _active() is None:
        return None
    operand(f"shardtypes.ops.{op}({spec_text!r})", what, value, spec, op)
    return known(value)


def still_owed(entry: Known | None, paid: Any) -> tuple[frozenset, str]:
    """What a reduction over mesh axes ``paid`` leaves owed of ``entry``'s sum, and who made it."""
    if entry is None or not entry.owed:
        return frozenset(), ""
    return entry.owed - frozenset(paid), entry.owed_by


def op_result(op: str, spec_text: Any, value: Any, spec: ShapeSpec, owed: frozenset = frozenset(),
              owed_by: str = "", jax_typed: bool = False) -> None:
    """Records an op's result as laid out by ``spec``, owing a sum over ``owed`` (``jax_typed``:
    JAX types it unreduced too, see ``mark_unreduced``)."""
    trace = _active()
    if trace is None or not isinstance(value, jax.Array):
        return
    call = f"shardtypes.ops.{op}({spec_text!r})"
    record(value, layout_of(spec, value.ndim), f"the result of {call}", owed, owed_by or call)
    if jax_typed:
        trace.marked.append(trace.entries[id(value)])


# ---------------------------------------------------------------------------------------------
# JAX's own unreduced type: where JAX can type a partial sum (check_vma on, the body staged into
# a jaxpr), the ops also mark it with jax.lax.pcast(..., to='unreduced'); JAX then refuses
# nonlinear ops on it, and the refusal is said in shardtypes' words (jax_refusal).


def is_staged(values: Any) -> bool:
    """Whether a shard_map of ``values`` is staged into a jaxpr (under ``jax.jit``, or anything
    that traces to one) rather than run eagerly, where JAX's unreduced type is refused (0.9.2)
    or refused on Auto axes (0.10.2). No public API says so; a constant made here is a tracer
    exactly when a staging trace is active (JVP and vmap hand inputs-free ops to the trace below
    them), and a value no jaxpr uses is dropped from it."""
    if not ENABLED or not checks_on():
        return False
    if not any(isinstance(v, Tracer) for v in jax.tree.leaves(values)):
        return False  # an eager call (or constants under jit: JAX's type is then left out)
    return isinstance(jax.lax.full((), 0, "int8"), Tracer)


def mark_unreduced(value: Any, owed: frozenset) -> Any:
    """``value`` typed unreduced over ``owed`` for JAX too, where JAX can type it: the kernel's
    body is staged and JAX types it as varying over every owed axis (check_vma on)."""
    trace = _active()
    if trace is None or not trace.staged or not owed or not isinstance(value, jax.Array):
        return value
    if not owed <= varying_axes(jax.typeof(value)):
        return value  # check_vma off: JAX tracks no unreduced state, the side table does
    return jax.lax.pcast(value, tuple(sorted(owed)), to="unreduced")


# JAX's words for an op it refuses on an unreduced value: a missing rule (NotImplementedError, both
# versions) or a sharding type error (JAX's ShardingTypeError, not public: told by its text).
_RULE = re.compile(r"unreduced(?:/reduced)? rule for ([\w.\-]+) is not implemented")
_PASSED = re.compile(r"passed to ([\w.\-]+) cannot be unreduced")


def jax_refusal(trace: _Trace, error: Exception) -> TypeCheckError | None:
    """JAX's refusal of an op on a partial sum it types unreduced (``mark_unreduced``), said as a
    TypeCheckError naming the kernel, the op that made the partial sum, the axes owed and JAX's
    op; None when ``error`` is something else, or no partial sum was so typed in this trace."""
    if not trace.marked or isinstance(error, TypeCheckError):
        return None  # (shardtypes' own errors say what they mean)
    text = str(error)
    found = _RULE.search(text) or _PASSED.search(text)
    if found is None and ("{U:" not in text and "unreduced={" not in text):
        return None  # not about an unreduced value (JAX prints one as f32[4,8]{U:t})
    reached = f"JAX's {found.group(1)!r}" if found else f"a JAX operation ({text.splitlines()[0]})"
    sums = list({(e.owed_by, e.owed): e for e in trace.marked}.values())
    what = "; ".join(f"{e.owed_by} made a partial sum owing a sum over mesh "
                     f"{'axes' if len(e.owed) > 1 else 'axis'} {', '.join(repr(a) for a in sorted(e.owed))}"
                     for e in sums)
    return TypeCheckError(
        f"in kernel {trace.kernel}(), a partial sum reached {reached}, which JAX refuses on it: {what}, "
        "and JAX types it unreduced, so only the linear operations JAX has a rule for may take it "
        "(+, sum, transpose, reshape, concatenate, astype); reduce it with shardtypes.ops.psum or "
        "shardtypes.ops.psum_scatter first (see \"Sums still owed\" in docs/shard-map.md)")


def differences(have: Layout, want: Layout, there: str) -> str:
    """``dim 0 is split over 'd' here but over 't' in the spec; ...``, and a word on swapped
    axes."""
    parts = []
    for i, (h, w) in enumerate(zip(have, want)):
        if h != w:
            parts.append(f"dim {i} is {_split(h)} here but {_split(w)} in {there}")
    text = "; ".join(parts)
    moved = [(h, w) for h, w in zip(have, want) if h != w]
    had = sorted({a for h, _ in moved for a in h})
    if had and had == sorted({a for _, w in moved for a in w}):
        mesh = jax.sharding.get_abstract_mesh()
        sizes = {mesh.shape.get(a) for a in had} if not mesh.empty else set()
        if len(had) > 1:
            text += f" (mesh axes {', '.join(repr(a) for a in had)} are swapped between dims"
        else:
            text += f" (mesh axis {had[0]!r} is on another dim"
        if len(sizes) == 1 and None not in sizes:
            text += f"; all of size {sizes.pop()}, so every block has the shape {there} expects"
        text += ")"
    return text


def _axes(axes: tuple[str, ...]) -> str:
    if not axes:
        return "no mesh axis"
    return "/".join(repr(a) for a in axes)


def _split(axes: tuple[str, ...]) -> str:
    return f"split over {_axes(axes)}" if axes else "not split"


def einsum_owed(spec_text: str, inputs: tuple[ShapeSpec, ...], output: ShapeSpec) -> frozenset:
    """The mesh axes an ``einsum_unreduced`` leaves unreduced: those of its contracted dims.
    Every dim name must be laid out alike wherever the spec names it (else ShapeSpecError: a
    result said to be split over another axis than its operand is a silent wrong block)."""

    seen: dict[str, tuple[str, tuple]] = {}
    for where, s in [(f"operand {i}", s) for i, s in enumerate(inputs)] + [("the output", output)]:
        for dim, axes in zip(s.dims, layout_of(s, len(s.dims))):
            first = seen.setdefault(dim.shape, (where, axes))
            if first[1] != axes:
                raise ShapeSpecError(
                    spec_text, f"shardtypes.ops.einsum_unreduced: dim {dim.shape!r} is split over "
                    f"{_axes(first[1])} in {first[0]} but over {_axes(axes)} in {where}; a dim is laid "
                    "out alike everywhere in an einsum (move mesh axes with the collectives)")
    out = {d.shape for d in output.dims}
    return frozenset(a for name, (_, axes) in seen.items() if name not in out for a in axes)


def with_op_context(error: Exception, op: str, spec_text: Any) -> Exception:
    """``error`` (an AxisRulesError from an op's spec string) saying the kernel, op and spec."""
    trace = _active()
    where = f"in kernel {trace.kernel}(), " if trace is not None else ""
    return type(error)(f"{where}shardtypes.ops.{op}({spec_text!r}): the spec string's {error}")
