"""``shardtypes.testing.assert_same_on_every_mesh`` over the corpus of JAX's own shard_map kernels.

For each corpus entry that JAX accepts and that shardtypes runs on the entry's own mesh (the
harness says it *agrees*: the entry is not in ``test_corpus.KNOWN``, ``needs()`` has nothing
against this JAX, and, with ``verify=True``, ``harness.run`` says ``agree`` in this run), the
entry's body is made a ``typed_shard_map`` kernel with no fixed mesh (its annotations from its
specs, as ``harness.run_mode`` makes them) and ``assert_same_on_every_mesh`` runs it, from the
entry's own global arguments (``make_args()``, laid out by the check), over the entry's mesh axis
names, under the entry's own mesh (so that the check also tries it, and takes its axis type).

An entry the source calls through ``outer`` (``jax.grad``, ``jax.vmap``, ``jax.jvp``, ...) is
checked as the source calls it: the function checked is ``outer(kernel)`` with parameters
annotated from the layouts the outer arguments are put in (``Entry.put``), and no return
annotation. The call is staged with ``jax.jit`` as the harness stages it (``harness._runner``:
static arguments closed over), unless the entry is only run eagerly.

Outcomes (``Result.outcome``):

* ``same``: the check passes, unchanged;
* ``needs keep``: a ``MeshMismatch`` whose blame line names one axis (``Result.axis``), where
  JAX's own ``jax.shard_map`` differs on the same two meshes too; it is retried with
  ``keep={axis: its size on the entry's own mesh}`` and ``detail`` says whether that passes
  (``passes with keep``), still differs, or leaves no mesh to compare (a one-axis kernel);
* ``by design``: a ``MeshMismatch`` blaming no single axis (or one after keep= was already held),
  where JAX's own ``jax.shard_map`` of the entry gives other global results on the same two meshes
  too: the kernel's global result depends on the mesh by construction (a per-device value tiled by
  ``out_specs``: its global shape or its values change with several axes);
* ``false alarm``: a ``MeshMismatch`` where JAX's own ``jax.shard_map`` of the entry gives the same
  global results on the two meshes (the check, or shardtypes' kernel, is at fault), or where JAX's
  own cannot be run there and ``BY_DESIGN`` does not list the entry;
* ``skipped``: the check could not compare (fewer than 2 meshes could run), with why;
* ``refused``: a ``typeguard.TypeCheckError`` from the kernel's own checks on some mesh
  (``CHECK_AT_FAULT`` says where that is the check's doing);
* ``error``: any other exception, with its text: mostly JAX's own error on a mesh whose sizes
  divide the inputs but not what the body does with its blocks (a tiled psum_scatter, an
  all_to_all, a block added to a replicated array of the block's size), which the check does not
  skip; ``detail`` says whether JAX's own shard_map raises there too, and what the check says once
  the meshes that raise are left out (``Result.after``);
* ``excluded``: not run (JAX refuses it, the harness does not agree on it, this JAX lacks what it
  needs, a slow entry, an axis type the entry does not run on), with why.

A ``skipped`` also covers the check's refusal of a kernel without annotated parameters (a kernel
of no arguments: nothing to lay out). ``run_corpus(names=None)`` returns one ``Result`` per entry
and axis type run.
"""

from __future__ import annotations

import dataclasses
import itertools
import linecache
import re
import time
import warnings
from typing import Any, Callable, Iterable, Sequence

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P
from typeguard import TypeCheckError

from shardtypes import KernelPassWarning, typed_shard_map
from shardtypes.layout import shard
from shardtypes.model import walk_leaves
from shardtypes.testing import MeshMismatch, assert_same_on_every_mesh

import harness
import kernels
from annotate import annotations_for
from test_corpus import known

__all__ = ["Result", "run_corpus", "run_entry", "OUTCOMES", "BY_DESIGN", "CHECK_AT_FAULT"]

SAME, KEEP, BY_DESIGN_OUTCOME, FALSE_ALARM = "same", "needs keep", "by design", "false alarm"
SKIPPED, REFUSED, ERROR, EXCLUDED = "skipped", "refused", "error", "excluded"
OUTCOMES = (SAME, KEEP, BY_DESIGN_OUTCOME, FALSE_ALARM, SKIPPED, REFUSED, ERROR, EXCLUDED)

# Kernels whose global result depends on the mesh by construction, where the check's blame line
# cannot name one axis (so ``keep`` of one axis is not the answer): why, in a few words.
BY_DESIGN: dict[str, str] = {}

# Outcomes that are the check's fault (not the kernel's): why. (Empty since the check lays out
# list[X] parameters item by item: the five nn/loss_fsdp* and forwarding_correctness entries.)
CHECK_AT_FAULT: dict[str, str] = {}

_BLAME = re.compile(r"it differs exactly where '(\w+)' is larger than (\d+)")
_COUNTER = itertools.count()


@dataclasses.dataclass
class Result:
    """One entry on one axis type: ``outcome`` (one of ``OUTCOMES``), the axis a ``needs keep``
    names, the seconds the check took (the keep= retry included), and what happened in words.
    ``peer_seconds``: the same kernel run once on the entry's own mesh, the same way the check runs
    it on each mesh (placed, called, compiled), in the same run (None where not measured);
    ``meshes``: the meshes the check ran (the reference included), 0 where it raised."""

    name: str
    outcome: str
    axis: str | None
    seconds: float
    detail: str
    kind: str = "explicit"
    peer_seconds: float | None = None
    meshes: int = 0
    diagnosis: str | None = None
    after: str | None = None  # for an error on some mesh: the outcome once the meshes that raise are left out


def _first_line(text: str, limit: int = 300) -> str:
    text = re.sub(r"\s+", " ", text).strip()
    return text[:limit]


_JAX_FILTER = re.compile(r"-{10,}\s*For simplicity, JAX has removed its internal frames.*?to include these\.", re.S)


def _describe(e: BaseException, limit: int = 400) -> str:
    """``Type: message (notes)`` on one line, without JAX's note on traceback filtering."""
    notes = " ".join(getattr(e, "__notes__", ()) or ())
    return _first_line(_JAX_FILTER.sub("", f"{type(e).__name__}: {e} {notes}"), limit)


def _function(name: str, params: Sequence[Any], call: Callable, ret: Any = None) -> Callable:
    """``name(a0, a1, ...)`` returning ``call(a0, a1, ...)``, with parameter ``ai`` annotated
    ``params[i]`` (None: unannotated) and the return annotated ``ret`` (None: not annotated);
    compiled from source registered with ``linecache``, as ``annotate.make_kernel`` does."""
    arglist = ", ".join(f"a{i}" for i in range(len(params)))
    src = f"def {name}({arglist}):\n    return __call({arglist})\n"
    filename = f"<shardtypes same_numbers {next(_COUNTER)}: {name}>"
    linecache.cache[filename] = (len(src), None, src.splitlines(True), filename)
    namespace: dict = {"__call": call, "__name__": "same_numbers"}
    exec(compile(src, filename, "exec"), namespace)
    fn = namespace[name]
    annotations = {f"a{i}": p for i, p in enumerate(params) if p is not None}
    if ret is not None:
        annotations["return"] = ret
    fn.__annotations__ = annotations
    return fn


def _mode(entry: harness.Entry) -> str:
    modes = harness.quick_modes(entry)
    return "jit" if "jit" in modes else modes[0]


def _exclusion(entry: harness.Entry, kind: str, full: bool) -> str | None:
    if kind not in entry.kinds:
        return f"the entry runs on {', '.join(entry.kinds)} axes only"
    if entry.jax_refuses is not None:
        return "JAX refuses it (the source expects an error): no global function to compare"
    if entry.needs is not None:
        reason = entry.needs()
        if reason:
            return reason
    k = known(entry.name, kind)
    if k is not None:
        return f"does not agree with JAX on its own mesh ({k[0]}: {k[1][:120]})"
    if entry.slow and not full:
        return "slow to compile (run with full=True)"
    return None


@dataclasses.dataclass
class Checked:
    """What ``assert_same_on_every_mesh`` is given for an entry: the function, the global
    arguments, the annotations the function's parameters have (for the peer's layout)."""

    fn: Callable
    args: tuple
    params: list


def checked_function(entry: harness.Entry, kind: str) -> Checked:
    """The function the check runs for ``entry`` (see the module's docstring) and its arguments."""
    mesh = harness.make_mesh(entry, kind)
    raw = tuple(entry.make_args())
    mode = _mode(entry)
    seen: dict = {}
    with harness._with_mesh(entry, mesh):
        placed = tuple(harness._lay_out(mesh, a, s) for a, s in zip(raw, harness._put_specs(entry)))
        # The shapes the mapped function is called with and returns (under jax.vmap the unbatched
        # ones): traced only, from JAX's own shard_map, as the harness records them.
        sm = jax.shard_map(entry.body_on(mesh), in_specs=entry.in_specs, out_specs=entry.out_specs,
                           **harness._sm_options(entry, mesh))
        jax.eval_shape(harness._runner(entry, harness._recorder(sm, seen), mode, placed))
    layouts = entry.out_layouts if entry.out_layouts is not None else entry.out_specs
    params, ret = annotations_for(seen["args"], harness._layouts(entry), seen["result"], layouts)
    options: dict = {"check_vma": entry.check_vma}
    if entry.axis_names is not None:
        options["axis_names"] = set(entry.axis_names)
    name = harness.kernel_name(entry)

    def typed_now() -> Callable:
        """The typed kernel, on the current mesh (a ``mesh_body`` entry's body made from it)."""
        body = entry.body
        if entry.mesh_body:
            from shardtypes.testing.mesh_shapes import concrete_mesh
            current = jax.sharding.get_abstract_mesh()
            body = entry.body(concrete_mesh(dict(current.shape), current.axis_types[0]))
        from annotate import make_kernel
        return typed_shard_map(make_kernel(body, params, ret, name), **options)

    if entry.outer is None and mode == "jit" and not entry.mesh_body:
        typed = typed_now()

        def call(*args: Any) -> Any:
            return harness._runner(entry, typed, mode, args)()

        return Checked(_function(name, params, call, ret), raw, params)
    outer_params = params
    if entry.outer is not None:
        structs = tuple(jax.tree.map(harness._struct, a) for a in raw)
        outer_params, _ = annotations_for(structs, harness._put_specs(entry), jax.ShapeDtypeStruct((), jnp.float32), P())

    def call_outer(*args: Any) -> Any:
        return harness._runner(entry, typed_now(), mode, args)()

    return Checked(_function(name, outer_params, call_outer, None if entry.outer is not None else ret), raw,
                   outer_params)


def _peer(entry: harness.Entry, kind: str, checked: Checked) -> float:
    """Seconds to run the checked function once on the entry's own mesh, as the check runs it on
    each mesh: under ``jax.set_mesh``, arguments laid out as annotated, called, waited for."""
    mesh = harness.make_mesh(entry, kind)
    start = time.perf_counter()
    with jax.set_mesh(mesh):
        placed = [shard(v, a) if _lays_out(a) else v for v, a in zip(checked.args, checked.params)]
        jax.block_until_ready(checked.fn(*placed))
    return time.perf_counter() - start


def _lays_out(annotation: Any) -> bool:
    """Whether the check lays an argument out (as ``mesh_check._lays_out``): an annotation with a layout."""
    if annotation is None:
        return False
    try:
        walk_leaves(annotation, lambda leaf: None)
    except TypeError:
        return False
    return True


def _check(entry: harness.Entry, kind: str, checked: Checked, keep: dict | None = None,
           meshes: list | None = None) -> Any:
    with jax.set_mesh(harness.make_mesh(entry, kind)):
        return assert_same_on_every_mesh(checked.fn, *checked.args, axes=entry.axes, keep=keep, meshes=meshes,
                                         axis_types=kind)


_ON_MESH = re.compile(r"\(assert_same_on_every_mesh: .*\(\) on mesh \{([^}]*)\}\)")


def _failing_mesh(e: BaseException) -> dict | None:
    """The mesh an exception from fn was raised on (the note the check adds), or None."""
    for note in getattr(e, "__notes__", ()) or ():
        found = _ON_MESH.search(note)
        if found:
            return {k.strip(): int(v) for k, v in (part.split(":") for part in found.group(1).split(","))}
    return None


def _attempt(entry: harness.Entry, kind: str, checked: Checked, keep: dict | None = None,
             meshes: list | None = None) -> tuple[str, Any]:
    """One call of the check: (SAME, report), ('mismatch', MeshMismatch), (REFUSED, e), (SKIPPED, e)
    or (ERROR, e)."""
    try:
        return SAME, _check(entry, kind, checked, keep, meshes)
    except MeshMismatch as e:
        return "mismatch", e
    except TypeCheckError as e:
        return REFUSED, e
    except ValueError as e:
        return (SKIPPED if "every other mesh was skipped" in str(e) else ERROR), e
    except Exception as e:  # noqa: BLE001
        return ERROR, e


def _jax_on(entry: harness.Entry, kind: str, shape: dict) -> Any:
    """JAX's own ``jax.shard_map`` of the entry (its specs, its body, called as the source calls
    it) on a mesh of ``shape``, from the entry's arguments: the oracle for what depends on the mesh."""
    from shardtypes.testing.mesh_shapes import concrete_mesh
    mesh = concrete_mesh({a: shape[a] for a in entry.axes}, harness.AXIS_TYPES[kind])
    raw = tuple(entry.make_args())
    with harness._with_mesh(entry, mesh):
        args = tuple(harness._lay_out(mesh, a, s) for a, s in zip(raw, harness._put_specs(entry)))
        sm = jax.shard_map(entry.body_on(mesh), in_specs=entry.in_specs, out_specs=entry.out_specs,
                           **harness._sm_options(entry, mesh))
        return harness._block(harness._runner(entry, sm, _mode(entry), args)())


def _jax_says(entry: harness.Entry, kind: str, reference: dict, other: dict) -> str:
    """Whether JAX's own shard_map gives other global results on ``other`` than on ``reference``:
    'differs', 'same', or 'raises: ...' (on either mesh)."""
    try:
        a = _jax_on(entry, kind, reference)
        b = _jax_on(entry, kind, other)
    except Exception as e:  # noqa: BLE001
        return "raises: " + _describe(e, 160)
    same, _, _ = harness.compare(a, b)
    return "same" if same else "differs"


def _jax_runs(entry: harness.Entry, kind: str, shape: dict) -> str:
    """Whether JAX's own shard_map of the entry runs on a mesh of ``shape`` (where the checked
    function raised): 'runs' (then shardtypes' kernel is at fault) or 'raises too: ...'."""
    try:
        _jax_on(entry, kind, shape)
    except Exception as e:  # noqa: BLE001
        return "raises too: " + _describe(e, 100)
    return "runs"


def _robust(entry: harness.Entry, kind: str, checked: Checked, keep: dict | None = None
            ) -> tuple[str, Any, list]:
    """The check (holding ``keep``), and after an error JAX raised on one mesh (a size the inputs
    divide but the body cannot run, which the check does not skip), again without the meshes
    that raise, at most 8 rounds: (status, value, the meshes left out)."""
    from shardtypes.testing.mesh_shapes import covering_meshes
    own = dict(zip(entry.axes, entry.mesh))
    ref = {a: (keep or {}).get(a, 1) for a in entry.axes}
    shapes = covering_meshes(entry.axes, keep or {}, jax.device_count(), own)
    left_out: list = []
    status, value = _attempt(entry, kind, checked, keep)
    for _ in range(8):
        if status != ERROR:
            break
        bad = _failing_mesh(value)
        if bad is None or bad == ref or bad in left_out:
            break
        left_out.append(bad)
        tried = [m for m in shapes if m not in left_out and m != ref]
        if not tried:
            return SKIPPED, ValueError("no mesh is left once those JAX cannot run are left out"), left_out
        status, value = _attempt(entry, kind, checked, keep, tried)
    return status, value, left_out


def _fmt(shape: dict) -> str:
    return "{" + ", ".join(f"{a}: {n}" for a, n in shape.items()) + "}"


def _keep_retry(entry: harness.Entry, kind: str, checked: Checked, keep: dict) -> tuple[str, int]:
    """The check again holding ``keep``: (what happened, the meshes it ran)."""
    status, value, left_out = _robust(entry, kind, checked, keep)
    also = f", leaving out {', '.join(_fmt(m) for m in left_out)} (JAX cannot run them)" if left_out else ""
    if status == SAME:
        return f"passes with keep={keep} ({len(value.ran)} meshes{also})", len(value.ran)
    if status == "mismatch":
        jax_says = _jax_says(entry, kind, value.reference, value.mesh)
        return (f"still differs with keep={keep}{also} (JAX's own shard_map: {jax_says} on {_fmt(value.mesh)}): "
                f"{_first_line(str(value), 300)}"), 0
    return f"with keep={keep}{also}: {_describe(value, 200)}", 0


_NO_PARAMETERS = "has no annotated parameters"


def _classify(entry: harness.Entry, kind: str, checked: Checked, status: str, value: Any, held: dict | None
              ) -> tuple[str, str | None, str, int, str | None]:
    """(outcome, axis, detail, meshes, diagnosis) for what the check said. A ``MeshMismatch`` is
    put to JAX's own ``jax.shard_map`` of the entry on the same two meshes: where JAX gives the
    same global results on both, it is a false alarm (of the check, or of shardtypes' kernel)."""
    if status == SAME:
        skipped = f"; skipped {len(value.skipped)}" if value.skipped else ""
        return SAME, None, f"{len(value.ran)} meshes{skipped}", len(value.ran), None
    if status == ERROR and isinstance(value, TypeError) and _NO_PARAMETERS in str(value):
        return SKIPPED, None, _describe(value, 200), 0, None
    if status != "mismatch":
        fault = CHECK_AT_FAULT.get(entry.name)
        return status, None, (f"{fault} " if fault else "") + _describe(value), 0, None
    text = str(value)
    found = _BLAME.search(text)
    first = _first_line(text.splitlines()[0], 200)
    jax_says = _jax_says(entry, kind, value.reference, value.mesh)
    oracle = f"JAX's own shard_map: {jax_says} on {_fmt(value.mesh)} and {_fmt(value.reference)}"
    why = BY_DESIGN.get(entry.name)
    if jax_says == "same" or (jax_says != "differs" and not why):
        fault = CHECK_AT_FAULT.get(entry.name)
        return FALSE_ALARM, None, (f"{fault} " if fault else "") + f"{oracle}: " + _first_line(text, 700), 0, \
            value.diagnosis
    if found is None or held:
        shape = " here but " in text.splitlines()[1] if len(text.splitlines()) > 1 else False
        reason = why or ("the global shape of a result depends on the mesh" if shape
                         else "the global result depends on more than one axis")
        return BY_DESIGN_OUTCOME, None, f"{reason} ({oracle}) [{_first_line(text, 400)}]", 0, value.diagnosis
    axis = found.group(1)
    detail, count = _keep_retry(entry, kind, checked, {axis: dict(zip(entry.axes, entry.mesh))[axis]})
    return KEEP, axis, (f"{why}; " if why else "") + detail + f" [{first}; {oracle}]", count, value.diagnosis


def run_entry(entry: harness.Entry, kind: str = "explicit", *, peer: bool = False, verify: bool = False,
              full: bool = False) -> Result:
    """``entry`` on one axis type (see the module's docstring for the outcomes)."""
    why = _exclusion(entry, kind, full)
    if why is None and verify:
        agreed = harness.run(entry, kind, harness.quick_modes(entry))
        if agreed.outcome != harness.AGREE:
            why = f"the harness says {agreed.outcome}: {agreed.message[:160]}"
    if why is not None:
        return Result(entry.name, EXCLUDED, None, 0.0, why, kind)
    try:
        checked = checked_function(entry, kind)
    except Exception as e:  # noqa: BLE001
        return Result(entry.name, ERROR, None, 0.0, "building the kernel: " + _describe(e), kind)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = _run_checked(entry, kind, checked, peer)
    stepped = [w for w in caught if issubclass(w.category, KernelPassWarning)]
    if stepped:
        result.detail += f" ({len(stepped)} KernelPassWarning: {_first_line(str(stepped[0].message), 120)})"
    return result


def _run_checked(entry: harness.Entry, kind: str, checked: Checked, peer: bool) -> Result:
    """The peer (if asked), the check, and what it said (see the module's docstring)."""
    peer_seconds = None
    if peer:
        try:
            peer_seconds = _peer(entry, kind, checked)
        except Exception:  # noqa: BLE001  (the check says what goes wrong)
            peer_seconds = None
    start = time.perf_counter()
    status, value = _attempt(entry, kind, checked)
    if status != ERROR or _NO_PARAMETERS in str(value):
        outcome, axis, detail, count, diagnosis = _classify(entry, kind, checked, status, value, None)
        return Result(entry.name, outcome, axis, time.perf_counter() - start, detail, kind, peer_seconds,
                      count, diagnosis)
    # An error on some mesh: what the check says once the meshes that raise are left out (and,
    # where the one-device reference raises, with an axis held at its size on the entry's mesh).
    error = _describe(value, 260)
    bad = _failing_mesh(value)
    if bad is not None:
        error += f" [JAX's own shard_map on {_fmt(bad)}: {_jax_runs(entry, kind, bad)}]"
    status, value, left_out = _robust(entry, kind, checked)
    held = None
    if status == ERROR and _failing_mesh(value) == {a: 1 for a in entry.axes}:
        for axis, size in zip(entry.axes, entry.mesh):
            if size > 1:
                status, value, left_out = _robust(entry, kind, checked, {axis: size})
                held = {axis: size}
                if status != ERROR:
                    break
    how = "; ".join(([f"left out {', '.join(_fmt(m) for m in left_out)}"] if left_out else [])
                    + ([f"keep={held}"] if held else []))
    after, axis, detail, count, diagnosis = _classify(entry, kind, checked, status, value, held)
    tail = (f" || {how}: then {after}" + (f" ({axis!r})" if axis else "") + f": {detail}") if how else ""
    return Result(entry.name, ERROR, axis, time.perf_counter() - start, error + tail, kind, peer_seconds,
                  count, diagnosis, after if how else None)


def run_corpus(names: Iterable[str] | None = None, *, kinds: Sequence[str] = ("explicit",), peer: bool = False,
               verify: bool = False, full: bool = False, progress: Callable[[Result], None] | None = None
               ) -> list[Result]:
    """Every corpus entry (or those named: exact names) on each of ``kinds``; see ``run_entry``."""
    wanted = set(names) if names is not None else None
    results = []
    for entry in kernels.ENTRIES:
        if wanted is not None and entry.name not in wanted:
            continue
        for kind in kinds:
            result = run_entry(entry, kind, peer=peer, verify=verify, full=full)
            results.append(result)
            if progress is not None:
                progress(result)
    return results

