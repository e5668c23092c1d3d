"""shardtypes' own compile-time sharding check: a JAX primitive with no JAX effect.

``jax.debug.inspect_array_sharding`` reports the sharding XLA chose, but it declares a debug
effect so that jaxpr dead-code elimination keeps it, and any effect in an executable takes
``jax.jit`` off its C++ fast path: every cached call then goes through Python. The primitive here,
``check_sharding_p``, lowers to the same ``InspectSharding`` custom call (side-effecting for XLA,
replaced by its operand once the SPMD partitioner has called back, so the compiled program is the
unchecked one) but declares no effect. Instead:

* a DCE rule keeps its equation although nothing uses its result;
* a partial-eval rule keeps it reachable where the old-style partial evaluator stages it (a check
  inside ``lax.scan`` under ``grad`` would otherwise vanish);
* it carries, as a parameter, a tiny jaxpr holding an ``inspect_sharding`` equation, so that jit
  hands the device assignment to lowering (which the lowering needs);
* its batching rule records where vmap put its dims (nothing moves in the program) and its JVP
  rule checks the primal only.

This is JAX's documented way to write a primitive (``jax.extend.core.Primitive`` and
``jax.interpreters.{mlir, ad, batching, partial_eval}``), the one place shardtypes does so, but
three behaviours it relies on are not documented. So ``self_test()`` proves them at first use, on a
tiny program, in a thread of its own (no mesh, trace or profiler of the caller's is disturbed):
the check fires at compile time and its error reaches the caller, it survives DCE and scan under
grad, and a cached call enters no Python frame. If any of that fails, shardtypes falls back to
the effectful ``inspect_array_sharding`` (slow but correct) with a ``ShardtypesWarning``.
"""

from __future__ import annotations

import sys
import threading
import warnings
from typing import Any, Callable

import jax
import numpy as np

# JAX's documented way to write a primitive (present in every supported JAX); whether JAX still
# treats it as this module needs is what the self-test proves.
from jax.extend.core import Primitive
from jax.interpreters import ad, batching, mlir, partial_eval as pe
from jax.sharding import NamedSharding, PartitionSpec

from ..model import ShardtypesWarning
from .compile_errors import failed, install

__all__ = ["compile_time_check", "primitive_available", "self_test"]

_inspect_array_sharding = jax.debug.inspect_array_sharding  # the original, captured at import


class _Callback:
    """What the ``InspectSharding`` callback runs: ``report(sharding, shape, order)``, where
    ``shape`` has vmap's dims first and ``order`` maps its positions to the inspected array's
    (empty when nothing moved); a ``NamedSharding``'s spec is reordered the same way."""

    __slots__ = ("report", "batch_dims", "shape", "__weakref__")  # JAX keeps a weak reference

    def __init__(self, report: Callable, batch_dims: tuple, shape: tuple) -> None:
        self.report, self.batch_dims, self.shape = report, batch_dims, shape

    def __call__(self, sharding: Any) -> None:
        shape: tuple = self.shape
        order: tuple[int, ...] = ()
        if self.batch_dims:
            order = tuple(self.batch_dims) + tuple(
                i for i in range(len(shape)) if i not in self.batch_dims)
            if isinstance(sharding, NamedSharding):
                spec = tuple(sharding.spec) + (None,) * (len(shape) - len(sharding.spec))
                sharding = NamedSharding(sharding.mesh, PartitionSpec(*(spec[i] for i in order)),
                                         memory_kind=sharding.memory_kind)
            shape = tuple(shape[i] for i in order)
        self.report(sharding, shape, order)


check_sharding_p = Primitive("shardtypes_check_sharding")  # identity; result never used

_MARKER: list = []


def _needs_devices() -> Any:
    """One closed jaxpr holding an ``inspect_sharding`` equation, made once: jit looks into
    equation parameters for primitives that need the devices during lowering."""
    if not _MARKER:
        def marker(v):
            _inspect_array_sharding(v, callback=lambda sharding: None)
            return []

        _MARKER.append(jax.make_jaxpr(marker)(jax.ShapeDtypeStruct((), np.float32)))
    return _MARKER[0]


def _bind(x: Any, report: Callable, batch_dims: tuple = ()) -> Any:
    return check_sharding_p.bind(x, needs_devices=_needs_devices(), report=report,
                                 batch_dims=tuple(batch_dims))


def _impl(x, *, needs_devices, report, batch_dims):
    # Evaluated eagerly (a transformation of a concrete value): numpy and Python scalars have no
    # sharding until placed.
    if not isinstance(x, jax.Array):
        x = jax.device_put(x)
    _Callback(report, batch_dims, tuple(x.shape))(x.sharding)
    return x


def _abstract_eval(aval, **_):
    return aval  # identity, and no effects


def _dce(used_outputs: Any, *rest: Any) -> tuple[list[bool], Any]:
    """Never dropped, though nothing uses the result. JAX calls a DCE rule with the equation last:
    ``rule(used_outputs, eqn)`` up to 0.11, ``rule(used_outputs, live_inputs, eqn)`` from 0.12; the
    rule takes whatever comes before the equation, so it is one rule for both."""
    eqn = rest[-1]
    return [True] * len(eqn.invars), eqn


def _partial_eval(trace, *tracers, **params):
    known = all(t.pval.is_known() for t in tracers)
    out = trace.default_process_primitive(check_sharding_p, tracers, params)
    if not known:
        # Staged: keep the equation reachable from the trace's roots, as an effect would be.
        trace.effect_handles.append(out)
    return out


def _lower(x, *, needs_devices, report, batch_dims):
    _inspect_array_sharding(x, callback=_Callback(report, batch_dims, tuple(x.shape)))
    return x


def _batch(args, dims, *, needs_devices, report, batch_dims):
    (x,), (d,) = args, dims
    if d is None:  # not batched by this vmap
        return _bind(x, report, batch_dims), d
    # The new dim sits at d: recorded positions at or after it move one along.
    moved = tuple(p + (p >= d) for p in batch_dims)
    return _bind(x, report, moved + (d,)), d


def _jvp(primals, tangents, **params):
    return check_sharding_p.bind(*primals, **params), tangents[0]  # the primal only


check_sharding_p.def_impl(_impl)
check_sharding_p.def_abstract_eval(_abstract_eval)
pe.dce_rules[check_sharding_p] = _dce
pe.custom_partial_eval_rules[check_sharding_p] = _partial_eval
mlir.register_lowering(check_sharding_p, mlir.lower_fun(_lower, multiple_results=False))
batching.primitive_batchers[check_sharding_p] = _batch
ad.primitive_jvps[check_sharding_p] = _jvp


# ---------------------------------------------------------------------------------------------
# The self-test and the choice between the primitive and the fallback.

_STATE: dict = {}  # "ok": bool once decided; "why": what failed
_LOCK = threading.Lock()


_SELF_TEST_FAILURE = "shardtypes self-test: this check fails on purpose"


def _self_test_program() -> str | None:
    """Runs the tiny programs; returns what failed, or None."""
    devices = jax.devices()[:2]
    mesh = jax.sharding.Mesh(np.array(devices), ("shardtypes_selftest",))
    sharding = NamedSharding(mesh, PartitionSpec("shardtypes_selftest"))
    seen: list = []

    def report(sharding, shape, order):
        seen.append(sharding)

    def body(c, _):
        _bind(c, report)  # fires only if the scan-under-grad partial evaluation keeps it
        return jax.numpy.sin(c), None

    def loss(x):
        _bind(x * 3.0, report)  # a value nothing else uses: must survive DCE
        return jax.lax.scan(body, x, None, length=2)[0].sum()

    step = jax.jit(jax.grad(loss))
    x = jax.device_put(np.arange(2 * len(devices), dtype=np.float32), sharding)
    if step.trace(x).jaxpr.effects:
        return "the check's jaxpr has a JAX effect"
    step(x).block_until_ready()
    if len(seen) < 2:
        return f"{2 - len(seen)} of 2 checks were dropped (dead value, scan under grad)"
    if sys.getprofile() is None:  # this thread's profiler: never the caller's
        calls: list = []
        step(x).block_until_ready()
        sys.setprofile(lambda frame, event, arg: calls.append(event) if event == "call" else None)
        try:
            step(x)
        finally:
            sys.setprofile(None)
        if calls:
            return f"a cached call entered {len(calls)} Python frames (not jit's fast path)"

    sentinel = RuntimeError(_SELF_TEST_FAILURE)

    def failing(sharding, shape, order):
        raise failed(sentinel)

    def bad(x):
        _bind(x, failing)
        return x + 1.0

    try:
        jax.jit(bad).lower(x).compile()
    except Exception as e:  # noqa: BLE001 - only the check's own error may arrive
        if e is sentinel:
            return None
        return f"a failing check raised {type(e).__name__}, not its own error"
    return "a failing check did not fail compilation"


def self_test() -> str | None:
    """Proves the undocumented behaviours in a thread of its own; returns what failed or None."""
    result: list = []

    def run() -> None:
        try:
            result.append(_self_test_program())
        except Exception as e:  # noqa: BLE001 - any failure means: use the fallback
            result.append(f"{type(e).__name__}: {e}")

    thread = threading.Thread(target=run, name="shardtypes-self-test", daemon=True)
    thread.start()
    thread.join()
    return result[0] if result else "the self-test did not finish"


def forget_self_test() -> None:
    """Test-facing: forgets the self-test's answer, so that the next use runs it again (a test
    that makes the self-test fail calls this before and after)."""
    _STATE.clear()


def primitive_available() -> bool:
    """Whether the effect-free primitive is used (the self-test runs once, at first use)."""
    ok = _STATE.get("ok")
    if ok is None:
        with _LOCK:
            ok = _STATE.get("ok")
            if ok is None:
                install()
                why = self_test()
                ok = why is None
                _STATE["why"] = why
                _STATE["ok"] = ok
                if not ok:
                    warnings.warn(
                        "shardtypes: the compile-time sharding check on Auto mesh axes cannot use "
                        f"its effect-free primitive with JAX {jax.__version__} ({why}); it falls back to "
                        "jax.debug.inspect_array_sharding, which checks the same but takes every "
                        "call of a checked jitted function off jit's C++ fast path",
                        ShardtypesWarning, stacklevel=2)
    return ok


def compile_time_check(value: Any, report: Callable, fallback: Callable) -> None:
    """Registers ``report(sharding, shape, order)`` on ``value``, run when XLA has chosen the
    sharding (at compile time under jit). ``fallback(value, report)`` registers it the effectful
    way where the primitive cannot be trusted."""
    if primitive_available():
        _bind(value, report)
    else:
        fallback(value, report)
