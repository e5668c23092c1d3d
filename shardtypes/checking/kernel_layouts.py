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
``ops.psum_scatter``. A value the table does not know (the result of a ``jnp`` op) is followed by the pass
over the body's jaxpr (``kernel_pass``): the checks of such values made in the body itself are
deferred to it (``trace.deferred``), and it compares them with the layout it infers from the
primitives, in program order. Inside a nested ``grad``/``vmap``/``scan`` body neither sees a
value: the size checks are all there is for it.
A kernel (check_vma on) that returns a value JAX types as varying over axes a plain
``ops.all_gather`` gathered, with out_specs that replicate it over them, is refused by name
(``returned``) before shard_map's own ValueError.

The table is keyed by ``id()`` and holds the value itself, so no id is reused while it lives
(tracers are unhashable, and a bare ``id()`` is reused within one trace once a temporary dies).
It lives for one trace of the body (``tracking``) and is emptied after it, even on failure.
"""

from __future__ import annotations

import contextlib
import contextvars
from typing import Any, Callable, Iterator

import jax
from jax.core import Tracer
from typeguard import TypeCheckError

from ..context import checks_on, trace_state, varying_axes
from ..language import KERNEL_PASS, ShapeSpec, linked
from ..model import Mismatch, fmt_layout, in_kernel
from .kernel_pass.facts import Fact, Point
from .kernel_pass.messages import owed_text
from .kernel_specs import Layout, differences, einsum_owed, layout_of
from .kernel_unreduced import is_staged as is_staged, jax_refusal

__all__ = ["tracking", "is_staged", "mark_unreduced", "known", "record", "record_checked", "operand", "op_operand",
           "op_result", "REDUCERS", "gathered", "kernel_check_vma", "mark_per_device",
           "einsum_owed"]


# The ops that may take a value still owing a sum: they pay (part of) it.
REDUCERS = frozenset({"psum", "psum_scatter", "pmean"})

# Off only for measuring what tracking costs (benchmarks/shard_map.py); FLOW: the jaxpr pass alone.
ENABLED = True
FLOW = True


class Known:
    """What the table knows of one value."""

    __slots__ = ("value", "layout", "origin", "owed", "owed_by", "state")

    def __init__(self, value: Any, layout: Layout, origin: str, owed: frozenset = frozenset(),
                 owed_by: str = ""):
        self.value = value  # held: its id() stays unique while the table lives
        self.layout = layout
        self.origin = origin
        self.owed = owed  # mesh axes it is a partial sum over
        self.owed_by = owed_by  # the op call that left it unreduced
        self.state = _state()  # the trace it was made in (the jaxpr pass's, or another)


class _Trace:
    __slots__ = ("kernel", "entries", "gathered", "check_vma", "staged", "marked", "flow", "flow_state", "deferred",
                 "inputs", "names")

    def __init__(self, kernel: str, check_vma: bool | None = None, staged: bool = False):
        self.kernel = kernel
        self.staged = staged  # the body is staged into a jaxpr: JAX can type partial sums
        self.marked: list[Known] = []  # partial sums JAX types unreduced (see mark_unreduced)
        self.entries: dict[int, Known] = {}
        # Mesh axes a plain ops.all_gather has gathered over in this trace, each with the first
        # op call that did: JAX types its results (and all that is computed from them) as varying
        # over them although they are the same on every device, so varying over them says nothing
        # (see checking/value.py), and a kernel may not return them replicated (``returned``).
        self.gathered: dict[str, str] = {}
        self.check_vma = check_vma  # the kernel's shard_map option (None: not known)
        # The body is traced into a jaxpr for the kernel pass: values the table met there
        # unknown are compared with the layout the pass infers for them (``deferred``).
        self.flow = False
        self.flow_state: Any = None  # the pass's own trace (values made there are in its jaxpr)
        self.inputs: dict[int, Any] = {}  # the body's inputs there (known at once when checked)
        self.deferred: list[tuple[Any, Point, Any]] = []
        # The dim names of the annotations checked in the body before its return (its arguments',
        # its helpers'): a result dim named otherwise is the result's own (``own_dims``).
        self.names: set[str] = set()


_TRACE: contextvars.ContextVar[_Trace | None] = contextvars.ContextVar("shardtypes.kernel_layouts", default=None)
# A kernel body traced with tracking off: nothing is recorded, and varying axes are not compared
# (without the record of what the kernel gathered they would reject gathered values).
_OFF = _Trace("")


@contextlib.contextmanager
def tracking(kernel: str, check_vma: bool | None = None, staged: bool = False) -> Iterator[None]:
    """Layouts are tracked inside: one trace of kernel ``kernel``'s body, a ``shard_map`` with
    ``check_vma`` (None: not known); ``staged``: the body is traced into a jaxpr (``is_staged``),
    so partial sums are typed unreduced for JAX too."""
    if not ENABLED or not checks_on():
        token = _TRACE.set(_OFF)  # an outer kernel's table is not this body's
        try:
            yield
        finally:
            _TRACE.reset(token)
        return
    trace = _Trace(kernel, check_vma, staged)
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
        trace.deferred.clear()
        trace.inputs = {}


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


def gathered(axes: Any, op_call: str) -> None:
    """Mesh axes ``axes`` were gathered by ``op_call`` (a plain, varying gather)."""
    trace = active()
    if trace is not None:
        for axis in axes:
            trace.gathered.setdefault(axis, op_call)


def kernel_check_vma() -> tuple[str, bool | None] | None:
    """``(kernel, check_vma)`` of the typed_shard_map kernel traced here (None outside one, or
    with tracking off)."""
    trace = active()
    return None if trace is None else (trace.kernel, trace.check_vma)


def vma_exempt() -> frozenset | None:
    """The manual axes whose varying says nothing here (gathered by ops.all_gather in this
    kernel trace), or None where varying axes are not compared at all (tracking off)."""
    trace = _TRACE.get()
    if trace is _OFF:
        return None
    return frozenset(trace.gathered) if trace is not None else frozenset()


def _state() -> Any:
    trace = _TRACE.get()
    return trace_state() if trace is not None and trace.flow else None


def flows() -> bool:
    """Whether kernel bodies traced here are followed by the jaxpr pass (tracking on)."""
    return FLOW and active() is not None


def flow_start(inputs: Any) -> None:
    """The body is being traced into a jaxpr for the pass (``kernel_pass``) from here on, with
    ``inputs`` (its arguments' leaves)."""
    trace = active()
    if trace is not None:
        trace.flow = True
        trace.flow_state = trace_state()
        trace.inputs = {id(v): v for v in inputs}


def flow_points() -> tuple[list, list[Point]]:
    """The values this trace's table met in the pass's own trace (made there, so outputs of its
    jaxpr) and, for each, what the pass must compare or take: (values, points)."""
    trace = active()
    if trace is None or not trace.flow:
        return [], []
    here = trace_state()
    values, points = [], []
    for entry in trace.entries.values():
        if entry.state == here and isinstance(entry.value, Tracer):
            values.append(entry.value)
            points.append(Point((), "", declared=Fact(entry.layout, entry.owed, entry.origin, entry.owed_by)))
    for value, point, state in trace.deferred:
        if state == here and isinstance(value, Tracer):
            values.append(value)
            points.append(point)
    return values, points


def active() -> _Trace | None:
    trace = _TRACE.get()
    return None if trace is _OFF else trace


def trace_open() -> bool:
    """Test-facing: whether a kernel body's trace (its side table) is open in this context. Every
    trace closes when the tracing of its body ends, failed or not."""
    return _TRACE.get() is not None


@contextlib.contextmanager
def without_flow() -> Iterator[None]:
    """Test-facing: kernel bodies traced inside are not followed by the jaxpr pass (``FLOW`` off;
    the layouts are still tracked), to compare what a kernel compiles to with and without it."""
    global FLOW
    before, FLOW = FLOW, False
    try:
        yield
    finally:
        FLOW = before


def known(value: Any) -> Known | None:
    trace = active()
    if trace is None:
        return None
    entry = trace.entries.get(id(value))
    return entry if entry is not None and entry.value is value else None


def record(value: Any, layout: Layout, origin: str, owed: frozenset = frozenset(), owed_by: str = "") -> None:
    trace = active()
    if trace is not None and isinstance(value, jax.Array):
        trace.entries[id(value)] = Known(value, tuple(layout), origin, frozenset(owed), owed_by)


# ---------------------------------------------------------------------------------------------
# Annotation checks (the checker calls this for each value it checks inside a shard_map body).


def own_dims(trace: _Trace, names: tuple | None) -> tuple[bool, ...] | None:
    """Per dim of a kernel's return annotation whose dim names are ``names`` (None: a variadic
    annotation), whether the dim is the result's own: named like no dim annotated in the body
    before (or one of a fixed size). Such a dim is what the annotation declares it to be: out_specs put the
    devices' blocks side by side along it, whatever each holds (a copy, a per-device sum). A dim
    named like an argument's claims that dim's global value, and is held to it."""
    if names is None:
        return None
    return tuple(not n & trace.names for n in names)


def _over(layout: Layout, manual: frozenset) -> Layout:
    return tuple(tuple(a for a in axes if a in manual) for axes in layout)


def _returned_ok(entry: Known, layout: Layout, expected: Layout, own: tuple) -> bool:
    """A returned value the table knows, laid out or owing otherwise than ``expected`` only along
    the result's own dims (``own_dims``), with every mesh axis it is split over or owes named by
    the annotation (else it is the same value returned replicated over an axis it differs on)."""
    named = {a for axes in expected for a in axes}
    for have, want, mine in zip(layout, expected, own):
        if have != want and not mine:
            return False
        if not set(have) <= named:
            return False
    return all(any(a in want for want, mine in zip(expected, own) if mine) for a in entry.owed)


def record_checked(value: Any, expected: Layout, context: Callable[[], str], names: tuple | None = None
                   ) -> Known | None:
    """A value checked against an annotation whose layout is ``expected`` (and per dim
    the names it reads, ``names``, None where variadic): a known value must be laid out so and owe no sum (else
    ``Mismatch``), but along the kernel result's own dims (``own_dims``); an unknown one is
    known from now on. Returns the value's entry from before the check (None if it was unknown)."""
    trace = active()
    if trace is None or not isinstance(value, jax.Array):
        return None
    what = context()
    own = None
    if what.startswith(f"the return value of {trace.kernel}()"):
        own = own_dims(trace, names)
    elif names is not None:
        trace.names.update(*names)
    entry = trace.entries.get(id(value))
    if entry is not None and entry.value is value:
        # (Over the axes manual here: a kernel nested in another, over Auto axes of this one, is
        # given values whose layout over those axes is the compiler's, checked at compile time.)
        manual = frozenset(jax.sharding.get_abstract_mesh().manual_axes)
        have, want = _over(entry.layout, manual), _over(tuple(expected), manual)
        if own is not None and len(own) == len(have) == len(want) and _returned_ok(entry, have, want, own):
            return entry
        if entry.owed:
            raise Mismatch(f"it {owed_text(entry)}; reduce it with shardtypes.ops.psum or "
                           "shardtypes.ops.psum_scatter first")
        if have != want and len(have) == len(want):
            raise Mismatch(f"it is laid out {fmt_layout(have)} (as {entry.origin}), but the "
                           f"annotation says {fmt_layout(want)}: {differences(have, want, 'the annotation')}")
        return entry
    if trace.flow and id(value) not in trace.inputs and trace.flow_state == trace_state():
        # The jaxpr pass compares it with the layout it infers, and takes the annotation's
        # layout from there on, in program order (so a later check does not blame this one).
        trace.deferred.append((value, Point(tuple(expected), what, own=own), trace.flow_state))
        return None
    trace.entries[id(value)] = Known(value, tuple(expected), what)
    return None


def defer_varying(value: Any, problem: str) -> bool:
    """JAX types ``value``, just deferred to the pass, varying where its annotation says not: the
    pass reports ``problem`` unless it knows better what the value varies over."""
    trace = active()
    if trace is None or not trace.deferred or trace.deferred[-1][0] is not value:
        return False
    trace.deferred[-1][1].fallback = problem
    return True


def undefer(value: Any) -> None:
    """Drops the pass's comparisons of ``value`` (a check of it failed already)."""
    trace = active()
    if trace is not None and trace.deferred:
        trace.deferred[:] = [d for d in trace.deferred if d[0] is not value]


# ---------------------------------------------------------------------------------------------
# Ops.


def operand(op_call: str, what: str, value: Any, spec: ShapeSpec, op: str) -> frozenset:
    """Compares a known operand's layout with the op's input ``spec`` (``what`` names the
    operand in the op: 'operand', 'operand 1', 'table'); returns the axes it still owes a sum
    over (none if unknown). Raises TypeCheckError on any difference."""
    entry = known(value)
    trace = active()
    if entry is None:
        if trace is not None and trace.flow and isinstance(value, jax.Array):
            trace.deferred.append((value, Point(layout_of(spec, value.ndim), f"{op_call}: {what}",
                                                sums_ok=op in REDUCERS), _state()))
        return frozenset()
    head = f"{in_kernel(trace.kernel)}, {op_call}" if trace is not None else op_call
    if entry.owed and op not in REDUCERS:
        raise TypeCheckError(linked(
            f"{head}: {what} ({entry.origin}) {owed_text(entry)}; reduce it with "
            f"shardtypes.ops.psum or shardtypes.ops.psum_scatter before shardtypes.ops.{op}", KERNEL_PASS
        ))
    ndim = len(entry.layout)
    if spec.variadic_index is None and len(spec.dims) != ndim:
        return entry.owed  # a rank mismatch: the size check says so
    expected = layout_of(spec, ndim)
    if expected != entry.layout:
        raise TypeCheckError(linked(
            f"{head}: {what} ({entry.origin}) is laid out {fmt_layout(entry.layout)}, but the spec "
            f"string's input {str(spec)!r} says {fmt_layout(expected)}: "
            f"{differences(entry.layout, expected, 'the spec')}", KERNEL_PASS
        ))
    return entry.owed


def op_operand(op: str, spec_text: Any, what: str, value: Any, spec: ShapeSpec) -> Known | None:
    """``operand`` for op ``op`` called with ``spec_text``; the operand's entry (None if
    unknown)."""
    if active() is None:
        return None
    operand(f"shardtypes.ops.{op}({spec_text!r})", what, value, spec, op)
    return known(value)


def still_owed(entry: Known | None, paid: Any) -> tuple[frozenset, str]:
    """What a reduction over mesh axes ``paid`` leaves owed of ``direct_checks``'s sum, and who made it."""
    if entry is None or not entry.owed:
        return frozenset(), ""
    return entry.owed - frozenset(paid), entry.owed_by


def op_result(op: str, spec_text: Any, value: Any, spec: ShapeSpec, owed: frozenset = frozenset(),
              owed_by: str = "", jax_typed: bool = False) -> None:
    """Records an op's result as laid out by ``spec``, owing a sum over ``owed`` (``jax_typed``:
    JAX types it unreduced too, see ``mark_unreduced``)."""
    trace = active()
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


def mark_unreduced(value: Any, owed: frozenset) -> Any:
    """``value`` typed unreduced over ``owed`` for JAX too, where JAX can type it: the kernel's
    body is staged and JAX types it as varying over every owed axis (check_vma on)."""
    trace = active()
    if trace is None or not trace.staged or not owed or not isinstance(value, jax.Array):
        return value
    if not owed <= varying_axes(jax.typeof(value)):
        return value  # check_vma off: JAX tracks no unreduced state, the side table does
    return jax.lax.pcast(value, tuple(sorted(owed)), to="unreduced")


def with_op_context(error: Exception, op: str, spec_text: Any) -> Exception:
    """``error`` (an AxisRulesError from an op's spec string) saying the kernel, op and spec."""
    trace = active()
    where = f"{in_kernel(trace.kernel)}, " if trace is not None else ""
    return type(error)(f"{where}shardtypes.ops.{op}({spec_text!r}): the spec string's {error}")


def mark_per_device(values: list, axes: frozenset, call: str) -> None:
    """``shardtypes.ops.per_device``: ``values`` differ per device along ``axes`` by intent; the
    side table forgets what they owe over them, and the pass is told where they are made."""
    trace = active()
    if trace is None:
        return
    for value in values:
        entry = known(value)
        if entry is not None:
            entry.owed = entry.owed - axes
        if trace.flow and isinstance(value, Tracer):
            trace.deferred.append((value, Point((), "", mark=(axes, call)), _state()))
