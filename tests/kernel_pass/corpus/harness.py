"""Runs one corpus entry on one axis type: JAX's own ``jax.shard_map`` (the reference), then the
same body as a ``typed_shard_map`` kernel whose annotations come from the entry's specs, and
says what happened.

Outcomes for an entry JAX accepts:

* ``agree``: the typed kernel runs, no ``KernelPassWarning``, the same numbers (rtol 1e-5,
  atol 1e-6; integers, booleans and PRNG keys exactly);
* ``refused``: shardtypes raised ``typeguard.TypeCheckError`` (its message is kept);
* ``annotation refused``: shardtypes raised its own ``TypeError`` naming an annotation it does not
  take (a list literal of unlike arrays), with what to write instead;
* ``crash``: any other exception from the typed run;
* ``differs``: it ran, but gave other numbers (the worst absolute difference is kept);
* ``stepped aside``: it ran and agreed, but the kernel pass stepped aside
  (``shardtypes.KernelPassWarning``).

For an entry JAX refuses (the source expects an error): ``refused`` (TypeCheckError),
``JAX's error`` (another exception, of the type JAX raised: passed through), ``crash`` (another
exception of another type) or ``accepted`` (no error: a test failure).

``harness: ...`` outcomes say the reference did not do what the entry says (a bug of the entry).
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
import traceback
import warnings
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P
from typeguard import TypeCheckError

from shardtypes import KernelPassWarning, typed_shard_map
from shardtypes.checking.kernel_pass import jaxpr as kernel_jax

from annotate import annotations_for, broadcast_prefix, make_kernel, spec_leaves

AXIS_TYPES = {"explicit": AxisType.Explicit, "auto": AxisType.Auto}
KINDS = ("explicit", "auto")
RTOL, ATOL = 1e-5, 1e-6

AGREE, REFUSED, CRASH, DIFFERS, STEPPED = "agree", "refused", "crash", "differs", "stepped aside"
ANNOTATION = "annotation refused"
JAX_ERROR, ACCEPTED = "JAX's error", "accepted"
SKIPPED = "skipped"


@dataclasses.dataclass(frozen=True)
class Entry:
    """One shard_map kernel of JAX's tests or tutorial.

    ``in_specs`` has one spec tree per argument (``None``: not mapped, passed as it is, a static
    parameter of the typed kernel); ``out_specs`` is JAX's. ``make_args()`` returns the arguments
    (numpy arrays, PRNG keys, or static Python objects), deterministically. ``outer`` wraps the
    mapped function as the source calls it (``jax.grad``, ``jax.vmap``, ...: it takes the mapped
    callable and returns the callable that is run); ``put`` lays the *outer* arguments out (by
    default ``arg_layouts``). ``arg_layouts``/``out_layouts`` are the global layouts the
    annotations say (by default ``in_specs``/``out_specs``; under ``axis_names`` they may name
    automatic axes). ``modes`` say whether the source runs it eagerly, under ``jax.jit``, or
    both. ``jax_refuses`` is ``(exception type, regex)`` when the source expects JAX to refuse
    it. ``needs()`` returns a reason to skip on this JAX, or None."""

    name: str
    source: str
    mesh: tuple
    axes: tuple
    in_specs: tuple
    out_specs: Any
    body: Callable
    make_args: Callable[[], tuple]
    check_vma: bool = True
    axis_names: frozenset | None = None
    modes: tuple = ("jit",)
    outer: Callable | None = None
    put: tuple | None = None
    arg_layouts: tuple | None = None
    out_layouts: Any = None
    jax_refuses: tuple | None = None
    kinds: tuple = KINDS
    abstract_mesh: bool = False
    context_mesh: bool = True
    needs: Callable[[], str | None] | None = None
    mesh_body: bool = False
    eager_point: bool = False
    slow: bool = False
    note: str = ""

    def body_on(self, mesh: Any) -> Callable:
        """The body; ``mesh_body`` entries make it from the concrete mesh (a body that names it)."""
        return self.body(mesh) if self.mesh_body else self.body

    def static(self) -> list[bool]:
        """Which arguments are not mapped (every spec in their spec tree is None)."""
        return [all(s is None for s in spec_leaves(t)) for t in self.in_specs]

    def __post_init__(self) -> None:
        assert isinstance(self.in_specs, tuple), self.name
        assert set(self.modes) <= {"jit", "eager"} and self.modes, self.name
        assert set(self.kinds) <= set(KINDS) and self.kinds, self.name


@dataclasses.dataclass
class Result:
    outcome: str
    message: str = ""
    worst: float = 0.0
    mode: str = ""
    reference: str = ""  # the reference's exception, for entries JAX refuses

    def short(self) -> str:
        return f"{self.outcome} ({self.mode}): {self.message[:200]}"


def make_mesh(entry: Entry, kind: str) -> jax.sharding.Mesh:
    n = math.prod(entry.mesh)
    return jax.make_mesh(entry.mesh, entry.axes, axis_types=(AXIS_TYPES[kind],) * len(entry.axes),
                         devices=jax.devices()[:n])


def _lay_out(mesh: Any, value: Any, spec_tree: Any) -> Any:
    if spec_tree is None:
        return value  # not mapped: passed as it is
    specs = broadcast_prefix(spec_tree, value)
    leaves, tree = jax.tree.flatten(value)
    placed = [leaf if s is None else jax.device_put(leaf, NamedSharding(mesh, s))
              for leaf, s in zip(leaves, specs)]
    return jax.tree.unflatten(tree, placed)


def _layouts(entry: Entry) -> tuple:
    return entry.arg_layouts if entry.arg_layouts is not None else entry.in_specs


def _put_specs(entry: Entry) -> tuple:
    return entry.put if entry.put is not None else _layouts(entry)


def _leaves_np(tree: Any) -> list:
    out = []
    for leaf in jax.tree.leaves(tree):
        if hasattr(leaf, "dtype") and jnp.issubdtype(leaf.dtype, jax.dtypes.prng_key):
            leaf = jax.random.key_data(leaf)
        out.append(np.asarray(leaf))
    return out


def compare(ref: Any, got: Any) -> tuple[bool, float, str]:
    """(same, worst absolute difference, what differs)."""
    if jax.tree.structure(ref) != jax.tree.structure(got):
        return False, math.inf, f"tree {jax.tree.structure(got)} where JAX gives {jax.tree.structure(ref)}"
    worst, same, where = 0.0, True, ""
    for i, (a, b) in enumerate(zip(_leaves_np(ref), _leaves_np(got))):
        if a.shape != b.shape:
            return False, math.inf, f"leaf {i}: shape {b.shape} where JAX gives {a.shape}"
        if a.dtype != b.dtype:
            return False, math.inf, f"leaf {i}: dtype {b.dtype} where JAX gives {a.dtype}"
        if a.dtype == jax.dtypes.float0 or a.size == 0:
            continue
        if np.issubdtype(a.dtype, np.inexact):
            a64, b64 = a.astype(np.float64), b.astype(np.float64)
            both_nan = np.isnan(a64) & np.isnan(b64)
            diff = np.where(both_nan, 0.0, np.abs(a64 - b64))
            ok = bool(np.all(both_nan | (diff <= ATOL + RTOL * np.abs(np.nan_to_num(a64)))))
            w = float(np.nanmax(diff)) if diff.size else 0.0
            if np.any(np.isnan(a64) != np.isnan(b64)):
                ok, w = False, math.inf
        else:
            ok = bool(np.array_equal(a, b))
            w = 0.0 if ok else float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64))))
        worst = max(worst, w)
        if not ok and same:
            same, where = False, f"leaf {i} {a.dtype}{list(a.shape)}: worst |difference| {w:.3g}"
    return same, worst, where


def _describe(e: BaseException) -> str:
    text = str(e)
    if not isinstance(e, TypeCheckError):
        tb = traceback.extract_tb(e.__traceback__)
        last = tb[-1] if tb else None
        where = f" (raised at {last.filename.split('/site-packages/')[-1]}:{last.lineno})" if last else ""
        text = f"{type(e).__name__}: {text}{where}"
    return re.sub(r"\s+", " ", text).strip()


def _recorder(sm: Callable, seen: dict) -> Callable:
    """``sm`` that records the arguments it is called with and what it returns (as shapes and
    dtypes), at each call: these are the ranks and trees the annotations follow (under
    ``jax.vmap`` the unbatched ones)."""

    def rec(*args: Any) -> Any:
        seen["args"] = jax.tree.map(_struct, args)
        out = sm(*args)
        seen["result"] = jax.tree.map(_struct, out)
        return out

    return rec


def _struct(x: Any) -> Any:
    if hasattr(x, "shape") and hasattr(x, "dtype"):
        return jax.ShapeDtypeStruct(x.shape, x.dtype)
    if isinstance(x, (int, float, bool, complex)):
        arr = jnp.asarray(x)
        return jax.ShapeDtypeStruct(arr.shape, arr.dtype)
    return x  # a static object


def _runner(entry: Entry, mapped: Callable, mode: str, args: tuple) -> Callable[[], Any]:
    """The call the source makes: ``outer(mapped)``, jitted or not. Static arguments (spec None)
    are closed over, so that ``jax.jit`` sees only arrays."""
    call = entry.outer(mapped) if entry.outer is not None else mapped
    static = entry.static() if entry.outer is None else [False] * len(args)
    if mode == "eager" or not any(static):
        fn = jax.jit(call) if mode == "jit" else call
        return lambda: fn(*args)
    arrays = [a for a, s in zip(args, static) if not s]

    def merged(*arrs: Any) -> Any:
        it = iter(arrs)
        return call(*(a if s else next(it) for a, s in zip(args, static)))

    fn = jax.jit(merged)
    return lambda: fn(*arrays)


def _sm_options(entry: Entry, mesh: Any, check_vma: bool | None = None) -> dict:
    options: dict = {"mesh": mesh.abstract_mesh if entry.abstract_mesh else mesh,
                     "check_vma": entry.check_vma if check_vma is None else check_vma}
    if entry.axis_names is not None:
        options["axis_names"] = set(entry.axis_names)
    return options


def _with_mesh(entry: Entry, mesh: Any):
    if entry.context_mesh:
        return jax.set_mesh(mesh)
    import contextlib
    return contextlib.nullcontext()


def _block(out: Any) -> Any:
    jax.tree.map(lambda x: x.block_until_ready() if hasattr(x, "block_until_ready") else x, out)
    return out


def _probe_args(entry: Entry, mode: str, args: tuple, seen: dict) -> None:
    """For an entry JAX refuses before it calls the mapped function: the arguments the outer
    transformation would give it, from a stand-in that returns its first argument."""
    def probe(*a: Any) -> Any:
        seen["args"] = jax.tree.map(_struct, a)
        return a[0] if a else jnp.zeros(())
    try:
        _runner(entry, probe, mode, args)()
    except Exception:  # noqa: BLE001
        pass


def _guess_result(entry: Entry, mesh: Any, args: tuple, mode: str) -> Any:
    """The result's structure for an entry JAX refuses: from the same call with ``check_vma`` off
    (most refusals are its check), else from ``out_specs`` (one dim per spec entry)."""
    seen: dict = {}
    try:
        sm = jax.shard_map(entry.body_on(mesh), in_specs=entry.in_specs, out_specs=entry.out_specs,
                           **_sm_options(entry, mesh, check_vma=False))
        _block(_runner(entry, _recorder(sm, seen), mode, args)())
    except Exception:
        pass
    if "result" in seen:
        return seen["result"]
    layouts = entry.out_layouts if entry.out_layouts is not None else entry.out_specs
    return jax.tree.map(lambda s: jax.ShapeDtypeStruct((1,) * len(s), jnp.float32), layouts,
                        is_leaf=lambda x: isinstance(x, P))


def kernel_name(entry: Entry) -> str:
    name = re.sub(r"\W", "_", entry.name)
    return name if name[:1].isalpha() else f"k_{name}"


def full() -> bool:
    """``CORPUS_FULL=1``: the test runs every entry in every mode its source runs."""
    return os.environ.get("CORPUS_FULL", "") not in ("", "0")


def quick_modes(entry: Entry) -> tuple:
    """The modes the test runs by default: the source's own where eager execution is what it
    tests (``eager_point``), else under ``jax.jit`` only. Eager ``shard_map`` compiles every
    operation on its own (a second or more per kernel on CPU), and ``typed_shard_map`` stages
    the body either way; ``CORPUS_FULL=1`` (or ``report.py``) runs the source's modes."""
    if full():
        return entry.modes
    if entry.eager_point:
        return entry.modes
    return ("jit",)


def run(entry: Entry, kind: str, modes: tuple | None = None) -> Result:
    """The entry on one axis type, in each of ``modes`` (by default the source's); the first
    mode that does not agree decides (an error before a difference before a step aside)."""
    if entry.needs is not None:
        reason = entry.needs()
        if reason:
            return Result(SKIPPED, reason)
    results = [run_mode(entry, kind, mode) for mode in (modes or entry.modes)]
    order = [SKIPPED, "harness", CRASH, ANNOTATION, REFUSED, JAX_ERROR, ACCEPTED, DIFFERS, STEPPED, AGREE]
    rank = {o: i for i, o in enumerate(order)}
    return min(results, key=lambda r: rank.get(r.outcome.split(":")[0], 0))


def run_mode(entry: Entry, kind: str, mode: str) -> Result:
    mesh = make_mesh(entry, kind)
    try:
        raw = entry.make_args()  # outside the mesh context: host data and PRNG keys
    except Exception as e:  # noqa: BLE001
        return Result("harness: cannot make the arguments", _describe(e), mode=mode)
    with _with_mesh(entry, mesh):
        try:
            args = tuple(_lay_out(mesh, a, s) for a, s in zip(raw, _put_specs(entry)))
        except Exception as e:  # noqa: BLE001
            return Result("harness: cannot lay out the arguments", _describe(e), mode=mode)
        # 1. the reference
        seen: dict = {}
        ref_error: BaseException | None = None
        ref_out: Any = None
        try:
            sm = jax.shard_map(entry.body_on(mesh), in_specs=entry.in_specs, out_specs=entry.out_specs,
                               **_sm_options(entry, mesh))
            ref_out = _block(_runner(entry, _recorder(sm, seen), mode, args)())
        except Exception as e:  # noqa: BLE001
            ref_error = e
        if entry.jax_refuses is None and ref_error is not None:
            return Result("harness: JAX refuses it", _describe(ref_error), mode=mode)
        if entry.jax_refuses is not None:
            if ref_error is None:
                return Result("harness: JAX accepts it", "", mode=mode)
            etype, pattern = entry.jax_refuses
            if not isinstance(ref_error, etype) or not re.search(pattern, str(ref_error), re.S):
                return Result("harness: JAX refuses it otherwise", _describe(ref_error), mode=mode)
        # 2. the annotations
        if "args" not in seen:
            _probe_args(entry, mode, args, seen)
        if "args" not in seen:
            return Result("harness: no call recorded", "", mode=mode)
        result = seen.get("result")
        if result is None:
            result = _guess_result(entry, mesh, args, mode)
        layouts = entry.out_layouts if entry.out_layouts is not None else entry.out_specs
        try:
            params, ret = annotations_for(seen["args"], _layouts(entry), result, layouts)
        except Exception as e:  # noqa: BLE001
            return Result("harness: no annotations", _describe(e), mode=mode)
        kernel = make_kernel(entry.body_on(mesh), params, ret, kernel_name(entry))
        # 3. the typed kernel
        options: dict = {"mesh": mesh.abstract_mesh if entry.abstract_mesh else mesh,
                         "check_vma": entry.check_vma}
        if entry.axis_names is not None:
            options["axis_names"] = set(entry.axis_names)
        typed_error: BaseException | None = None
        kernel_jax.reset_warnings()  # the pass warns once per primitive: every run gets its warning
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                typed = typed_shard_map(kernel, **options)
                typed_out = _block(_runner(entry, typed, mode, args)())
            except Exception as e:  # noqa: BLE001
                typed_error = e
        stepped = [w for w in caught if issubclass(w.category, KernelPassWarning)]
    reference = _describe(ref_error) if ref_error is not None else ""
    if typed_error is not None:
        if isinstance(typed_error, TypeCheckError):
            outcome = REFUSED
        elif ref_error is not None and type(typed_error) is type(ref_error):
            outcome = JAX_ERROR
        elif isinstance(typed_error, TypeError) and _OWN_ANNOTATION_ERROR.match(str(typed_error)):
            outcome = ANNOTATION
        else:
            outcome = CRASH
        return Result(outcome, _describe(typed_error), mode=mode, reference=reference)
    if ref_error is not None:
        return Result(ACCEPTED, "shardtypes ran a kernel JAX refuses", mode=mode, reference=reference)
    same, worst, where = compare(ref_out, typed_out)
    if not same:
        return Result(DIFFERS, where, worst=worst, mode=mode)
    if stepped:
        return Result(STEPPED, re.sub(r"\s+", " ", str(stepped[0].message)), mode=mode)
    return Result(AGREE, mode=mode)


# shardtypes' own refusal of an annotation it does not take (a literal list of unlike arrays):
# it names the annotation and what to write instead.
_OWN_ANNOTATION_ERROR = re.compile(r"shardtypes\.\w+: .* is annotated with a list literal")


def jax_version() -> str:
    return ".".join(jax.__version__.split(".")[:2])
