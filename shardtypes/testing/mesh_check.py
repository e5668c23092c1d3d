"""``assert_same_on_every_mesh``: a function's annotations state a global function, so a correct
kernel or step gives the same global numbers whatever the sizes of the mesh's axes. Run it on a
one-device reference mesh and on a covering set of other shapes, from the same global inputs laid
out as annotated, and compare; a difference is a ``MeshMismatch`` that names the mesh, the output,
the first differing block and, where one fits, the likely mistake.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
from typing import Any, Callable

import jax
import numpy as np
from typeguard import TypeCheckError

from ..kernels import PER_DEVICE_CALLS
from ..layout import named_mesh_axes, shard
from ..model import holds_shardtypes, homogeneous_item, resolve_hints, walk_leaves
from .comparison import (
    LeafComparison,
    Tolerance,
    compare_leaf,
    float_eps,
    needs_tolerance,
    perturbed,
)
from .made_inputs import input_sizes, integer_valued, made_inputs, undivided_input
from .mesh_shapes import (
    MeshShape,
    axis_types_arg,
    check_axes,
    check_keep,
    check_meshes,
    concrete_mesh,
    covering_meshes,
    current_mesh_shape,
    fmt_mesh,
)
from .mismatch import mismatch, output_name

__all__ = ["assert_same_on_every_mesh", "MeshReport"]

_WHAT = "assert_same_on_every_mesh"


@dataclasses.dataclass(frozen=True)
class MeshReport:
    """What ``assert_same_on_every_mesh`` ran: the meshes it ran (the reference first) and those it
    skipped with why, the sizes of the inputs it made (None when they were given), and for each
    output its path, how it was compared, and the largest absolute difference from the reference
    over every mesh."""

    function: str
    axes: tuple[str, ...]
    reference: MeshShape
    ran: tuple[MeshShape, ...]
    skipped: tuple[tuple[MeshShape, str], ...]
    sizes: dict[str, Any] | None
    compared: dict[str, str]
    largest_difference: dict[str, float]

    def __str__(self) -> str:
        lines = [f"{self.function}() gives the same numbers on {len(self.ran)} meshes over {', '.join(self.axes)} "
                 f"(reference {fmt_mesh(self.reference)}): {', '.join(fmt_mesh(m) for m in self.ran[1:])}"]
        if self.sizes is not None:
            made = ", ".join(f"{k}={v}" for k, v in self.sizes.items())
            lines.append(f"  inputs made from the annotations, sizes {made}")
        for path, how in self.compared.items():
            lines.append(f"  {path}: compared {how}; largest difference {self.largest_difference[path]:.3g}")
        for shape, why in self.skipped:
            lines.append(f"  skipped {fmt_mesh(shape)}: {why}")
        return "\n".join(lines)


def _lays_out(annotation: Any) -> bool:
    if annotation is None:
        return False
    try:
        walk_leaves(annotation, lambda leaf: None)
    except TypeError:
        return False
    return True


def _place(value: Any, annotation: Any, name: str) -> Any:
    """``value`` laid out as ``annotation`` says on the current mesh: ``shard`` where the
    annotation is an array tree, item by item for ``list[X]`` (a value ``shard`` has no one layout
    for), as it is where the annotation holds no layout (an int, a config, ``Any``)."""
    if _lays_out(annotation):
        return shard(value, annotation)
    item = homogeneous_item(annotation) if annotation is not None else None
    if item is not None and item[1] == "sequence" and isinstance(value, (list, tuple)):
        return type(value)(_place(v, item[0], name) for v in value)
    if annotation is not None and holds_shardtypes(annotation):
        raise TypeError(f"{_WHAT}: parameter {name!r} is annotated {annotation!r}, which holds layouts the check "
                        "cannot lay a value out by; annotate it with a tuple, a dataclass or list[X]")
    return value


def _layout_of(annotation: Any) -> Any:
    """The annotation whose layout a value takes: ``X`` for ``list[X]`` (see ``_place``)."""
    item = None if _lays_out(annotation) else homogeneous_item(annotation)
    return _layout_of(item[0]) if item is not None and item[1] == "sequence" else annotation


def _undivided(value: Any, annotation: Any, mesh: Any) -> str | None:
    """Why ``value`` cannot be laid out as ``annotation`` on ``mesh``, or None (see ``_place``)."""
    if _lays_out(annotation):
        return undivided_input(value, annotation, mesh)
    item = homogeneous_item(annotation) if annotation is not None else None
    if item is not None and item[1] == "sequence" and isinstance(value, (list, tuple)):
        return next((f"item {i}: {w}" for i, v in enumerate(value) if (w := _undivided(v, item[0], mesh))), None)
    return None


# JAX's words for a size a collective or a split cannot divide on some mesh (inside the body,
# where the inputs' layouts divide): that mesh cannot run the function, like one the inputs do
# not divide.
_CANNOT_DIVIDE = ("divisible", "does not divide", "must divide", "evenly")


def _cannot_run(e: Exception) -> str | None:
    text = str(e).strip().splitlines()[0] if str(e).strip() else ""
    if isinstance(e, (ValueError, TypeError)) and any(w in text for w in _CANNOT_DIVIDE):
        return f"{type(e).__name__}: {text[:200]}"
    return None


def _target(fn: Callable) -> Callable:
    while isinstance(fn, functools.partial):
        fn = fn.func
    return inspect.unwrap(fn)


def _float_arg(value: Any, name: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
        raise TypeError(f"{_WHAT}: {name} must be a number >= 0 (or None for a tolerance derived from the dtype), "
                        f"got {value!r}")
    return float(value)


def _reduction(values: list) -> tuple[int, float | None]:
    """The largest dim of the inputs (the longest reduction a kernel can make of them) and the
    coarsest float epsilon among them."""
    longest, eps = 1, None
    for leaf in jax.tree.leaves(values):
        shape = np.shape(leaf)
        if shape:
            longest = max(longest, max(shape))
        e = float_eps(getattr(leaf, "dtype", None)) if hasattr(leaf, "dtype") else None
        if e is not None:
            eps = e if eps is None else max(eps, e)
    return longest, eps


def assert_same_on_every_mesh(fn: Callable, *args: Any, axes: Any = None, meshes: Any = None, keep: Any = None,
                              dims: Any = None, rtol: float | None = None, atol: float | None = None, seed: int = 0,
                              axis_types: Any = None) -> MeshReport:
    """Runs ``fn`` on a one-device reference mesh and on other mesh shapes, from the same global
    inputs laid out as its annotations say, and raises ``MeshMismatch`` where a global result
    differs; returns a ``MeshReport`` otherwise.

    ``fn`` is a ``typed_shard_map`` kernel or any function with annotated parameters (a jitted
    ``@typechecked`` step too); it is called under ``jax.set_mesh(mesh)`` for each mesh. ``args``
    are the global inputs (numpy or JAX arrays, trees of them); without them, inputs are made from
    the annotations (sizes from ``dims``, the rest chosen so every mesh tried divides them; small
    integers, so sums and matmuls are exact). ``axes``: the mesh axes to vary (default: the current
    mesh's, and those the annotations name). ``meshes``: the shapes to try, as ``[{'d': 2, 't': 4}]``
    (default: each axis alone at 2 and at its largest, the current mesh, pairs of axes, within
    ``jax.device_count()``). ``keep={'stage': 4}`` holds an axis at a size on every mesh (the
    reference too), for a kernel whose meaning depends on it. ``rtol``/``atol`` replace the derived
    tolerance (exact where the inputs made it exact, else from the dtype and the reduction size).
    ``axis_types``: 'explicit' or 'auto' (default: the current mesh's, else Explicit). A mesh whose
    sizes do not divide the inputs is skipped and reported, never counted as agreeing; a
    ``TypeCheckError`` from fn's checks passes through unchanged.
    """
    if isinstance(fn, type) or not callable(fn):
        raise TypeError(f"{_WHAT}: fn must be a function (a typed_shard_map kernel, a checked step), got {fn!r:.80}")
    name = getattr(_target(fn), "__qualname__", repr(fn))
    rtol, atol = _float_arg(rtol, "rtol"), _float_arg(atol, "atol")
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise TypeError(f"{_WHAT}: seed must be an int, got {seed!r}")
    names, values, annotations, returns = _parameters(fn, args, name)
    named = named_mesh_axes([_layout_of(a) for a in annotations + [returns] if a is not None])
    current = current_mesh_shape()
    axes = check_axes(axes, named, current, _WHAT)
    keep, shapes = _mesh_shapes(axes, meshes, keep, current)
    runner = _Runner(fn, name, names, annotations, axis_types_arg(axis_types, _WHAT))
    sizes = None
    if not args:
        missing = [n for n, a in zip(names, annotations) if a is None]
        if missing:
            raise TypeError(f"{_WHAT}: parameter {missing[0]!r} of {name}() has no annotation, so no input can be "
                            "made for it: pass the inputs (args), or bind it with functools.partial")
        sizes = input_sizes(annotations, shapes, dims, _WHAT)
        values = made_inputs(annotations, names, sizes, concrete_mesh(shapes[0], runner.axis_type), seed, _WHAT)
    elif dims is not None:
        raise ValueError(f"{_WHAT}: dims= sizes the inputs made from the annotations; with the inputs given (args) "
                         "it would be unused: leave it out")
    longest, input_eps = _reduction(values)
    tol = Tolerance(rtol, atol, integer_valued(values), input_eps, longest)
    results, skipped = runner.run_all(shapes, values)
    sensitivity = _sensitivity(results[0][1], tol, lambda k: runner.run(shapes[0], perturbed(values, seed + 1 + k)))
    return _compare(name, tuple(axes), results, skipped, sizes, tol, keep, sensitivity, runner.per_device)


def _parameters(fn: Callable, args: tuple, name: str) -> tuple[list[str], list, list, Any]:
    """The parameters the check gives values: (names, the values given or [] to make, their
    annotations, the return annotation)."""
    hints = resolve_hints(_target(fn), _WHAT)
    signature = inspect.signature(fn)
    params = [p for p in signature.parameters.values() if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    if not params:
        raise TypeError(f"{_WHAT}: {name}() takes no arguments, so no input's layout changes from mesh to mesh: "
                        "there is nothing to compare")
    if not any(hints.get(p.name) is not None for p in params):
        raise TypeError(f"{_WHAT}: {name}() has no annotated parameters, so it states no global function to "
                        "compare: annotate its arrays (f32[b'batch/d embed'])")
    if args:
        try:
            bound = signature.bind(*args)
        except TypeError as e:
            raise TypeError(f"{_WHAT}: the args do not fit {name}{signature}: {e}") from None
        names, values = list(bound.arguments), list(bound.arguments.values())
    else:
        names, values = [p.name for p in params if p.default is p.empty], []
    return names, values, [hints.get(n) for n in names], hints.get("return")


def _mesh_shapes(axes: tuple[str, ...], meshes: Any, keep: Any,
                 current: dict | None) -> tuple[dict[str, int], list[MeshShape]]:
    """``keep`` validated, and the shapes to run, the reference first."""
    devices = jax.device_count()
    if devices < 2:
        raise ValueError(f"{_WHAT}: JAX has {devices} device, so there is no mesh to compare with the reference: "
                         "call shardtypes.testing.use_cpu_devices(8) before JAX starts (in conftest.py)")
    keep = check_keep(keep, axes, devices, _WHAT)
    reference = {a: keep.get(a, 1) for a in axes}
    if meshes is None:
        shapes = covering_meshes(axes, keep, devices, current)
    else:
        shapes = [reference] + [s for s in check_meshes(meshes, axes, keep, devices, _WHAT) if s != reference]
    if len(shapes) < 2:
        raise ValueError(f"{_WHAT}: with keep={keep} and {devices} devices, no mesh but the reference "
                         f"{fmt_mesh(reference)} is left to try")
    return keep, shapes


class _Runner:
    """Runs the function on one mesh shape (its inputs laid out there), and on all of them."""

    def __init__(self, fn: Callable, name: str, names: list[str], annotations: list, axis_type: Any):
        self.fn, self.name, self.names, self.annotations, self.axis_type = fn, name, names, annotations, axis_type
        self.per_device: list[str] = []  # the axes the function says it is per-device along (ops.per_device)

    def run(self, shape: MeshShape, inputs: list) -> Any:
        mesh = concrete_mesh(shape, self.axis_type)
        listening = PER_DEVICE_CALLS.set(self.per_device)
        with jax.set_mesh(mesh):
            placed = [_place(v, a, n) for v, a, n in zip(inputs, self.annotations, self.names)]
            try:
                out = self.fn(*placed)
                jax.block_until_ready(out)
            except TypeCheckError:
                raise
            except Exception as e:
                e.add_note(f"({_WHAT}: {self.name}() on mesh {fmt_mesh(shape)})")
                raise
            finally:
                PER_DEVICE_CALLS.reset(listening)
        _on_the_mesh(out, mesh, shape, self.name)
        return out

    def run_all(self, shapes: list[MeshShape], values: list) -> tuple[list, list]:
        """(the results, the reference's first; the shapes skipped, with why). The reference runs
        last: a mistake the kernel pass refuses is refused on a mesh whose axes are larger than 1
        (on a one-device mesh there is nothing to sum, and JAX's own error says less)."""
        reference = shapes[0]
        results: list[tuple[MeshShape, Any]] = []
        skipped: list[tuple[MeshShape, str]] = []
        for shape in shapes[1:] + shapes[:1]:
            mesh = concrete_mesh(shape, self.axis_type)
            why = next((f"parameter {n!r}: {w}" for n, v, a in zip(self.names, values, self.annotations)
                        if (w := _undivided(v, a, mesh)) is not None), None)
            if why is None:
                try:
                    results.append((shape, self.run(shape, values)))
                    continue
                except (ValueError, TypeError) as e:
                    why = _cannot_run(e)
                    if why is None or shape == reference:
                        raise
                    why = f"it cannot run there: {why}"
            if shape == reference:
                raise ValueError(f"{_WHAT}: the inputs cannot be laid out on the reference mesh "
                                 f"{fmt_mesh(reference)}: {why}")
            skipped.append((shape, why))
        if len(results) < 2:
            raise ValueError(f"{_WHAT}: only the reference mesh could run {self.name}(); every other mesh was "
                             "skipped: " + "; ".join(f"{fmt_mesh(s)}: {w}" for s, w in skipped))
        return results[-1:] + results[:-1], skipped


def _sensitivity(ref_out: Any, tol: Tolerance, rerun: Callable[[int], Any]) -> dict[str, np.ndarray]:
    """For each output compared within a tolerance, how far it moves on the reference mesh when
    every float input moves by one epsilon: the scale of the round-off a correct kernel's other
    order of sums gives (a deep step, an optimizer's normalised update, amplify it)."""
    leaves = jax.tree_util.tree_flatten_with_path(ref_out)[0]
    if not any(needs_tolerance(leaf, tol) for _, leaf in leaves):
        return {}
    out: dict[str, np.ndarray] = {}
    for k in range(2):  # two draws: a tie one of them leaves alone, the other may flip
        moved = jax.tree_util.tree_flatten_with_path(rerun(k))[0]
        for (path, leaf), (_, other) in zip(leaves, moved):
            if needs_tolerance(leaf, tol):
                diff = np.abs(np.asarray(other, np.float64) - np.asarray(leaf, np.float64))
                diff = np.where(np.isfinite(diff), diff, 0.0)
                key = output_name(path)
                out[key] = np.maximum(out[key], diff) if key in out else diff
    return out


def _on_the_mesh(out: Any, mesh: Any, shape: MeshShape, name: str) -> None:
    """Every array of ``out`` lives on ``mesh``'s devices: a function that runs on a mesh of its
    own would give the same numbers on every mesh tried, and the check would prove nothing."""
    devices = set(mesh.devices.flat)
    for path, leaf in jax.tree_util.tree_flatten_with_path(out)[0]:
        sharding = getattr(leaf, "sharding", None)
        if isinstance(leaf, jax.Array) and sharding is not None and not sharding.device_set <= devices:
            raise ValueError(
                f"{_WHAT}: {name}() returned {output_name(path)} on {len(sharding.device_set)} devices, not on the "
                f"{len(devices)} of the mesh set for it ({fmt_mesh(shape)}): it runs on a mesh of its own "
                "(typed_shard_map(..., mesh=...), a mesh made inside it), so every mesh tried would give the same "
                "numbers; pass it without a fixed mesh, so that it takes the current one")


def _compare(name: str, axes: tuple[str, ...], results: list, skipped: list, sizes: Any, tol: Tolerance,
             keep: dict, sensitivity: dict[str, np.ndarray], per_device: list[str]) -> MeshReport:
    (reference, ref_out), others = results[0], results[1:]
    ref_leaves, ref_tree = jax.tree_util.tree_flatten_with_path(ref_out)
    if not ref_leaves:
        raise ValueError(f"{_WHAT}: {name}() returned no arrays ({type(ref_out).__name__}), so there is nothing to "
                         "compare: check a function that returns its results")
    compared = {output_name(p): "" for p, _ in ref_leaves}
    largest = {k: 0.0 for k in compared}
    failures: list[tuple[MeshShape, str, LeafComparison | None, Any, Any]] = []
    for shape, out in others:
        leaves, tree = jax.tree_util.tree_flatten_with_path(out)
        if str(tree) != str(ref_tree):  # (PyTreeDefs compare by their text too; mypy sees no __ne__)
            failures.append((shape, "result", None, f"its tree is {tree} here but {ref_tree} on the reference", None))
            continue
        first = None
        for (path, ref_leaf), (_, leaf) in zip(ref_leaves, leaves):
            key = output_name(path)
            c = compare_leaf(ref_leaf, leaf, tol, sensitivity.get(key, 0.0))
            compared[key] = compared[key] or c.how
            largest[key] = max(largest[key], c.max_abs)
            if not c.ok and first is None:
                first = (shape, key, c, ref_leaf, leaf)
        if first is not None:
            failures.append(first)
    if failures:
        raise mismatch(name, reference, failures, [s for s, _ in others], keep, per_device)
    return MeshReport(name, axes, reference, tuple(s for s, _ in results), tuple(skipped), sizes,
                      {k: v for k, v in compared.items()}, largest)
