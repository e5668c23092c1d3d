"""Static verification: check a sharding plan for thousands of devices on a laptop.

``verify(fn, {'d': 64, 't': 64}, dims={'d_model': 8192})`` builds abstract inputs from ``fn``'s
annotations (``make_shape_dtype_structs`` over an ``AbstractMesh``; dims not given are symbolic),
evaluates ``fn`` with ``jax.eval_shape`` with every check on, and reports every problem it meets:
a shape, dtype or sharding that differs from an annotation (in nested checked calls, in
``typed_shard_map`` kernels and typed collectives too), JAX's own errors (an ambiguous sharding
on Explicit axes, a shape error), and dims that cannot divide their mesh axes for the sizes given.
Nothing is compiled and no device is touched.

The report is a ``VerifyReport`` of ``Problem``s (text and JSON); ``raise_on_error=True`` raises a
``VerificationError`` instead. The memory side of a plan (bytes per device) is ``plan``, in
``_memory_plan``.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import json
import math
from typing import Any, Callable, Mapping

import jax
from typeguard import TypeCheckError

from ..context import NAMES_USED, Scope, abstract_mesh, forced_checks
from ..integrations import typechecked
from ..language import (
    VERIFY_PROBLEMS,
    check_dims,
    fmt_bytes,
    fmt_flops,
    linked,
    mapping_of_sizes,
    unlinked,
    unused_dims_error,
)
from ..layout import check_dims_for, dim_multiples, structs
from ..model import COLLECTED, holds_shardtypes, resolve_hints, type_text
from .activations import SYMBOLIC, ActivationEstimate, trace_step
from .chips import Chip, StepTime, axis_links, chip_named, step_time
from .cost_model import step_cost
from .html_parts import parse_capacity
from .memory_checks import arguments_plan, memory_problems, step_activations
from .memory_plan import parse_fraction
from .step_cost import Communication, StepCost
from .verify_inputs import check_inputs_arg, lay_out_input, sizes_of_input

__all__ = ["verify", "VerifyReport", "Problem", "VerificationError"]


@dataclasses.dataclass(frozen=True)
class Problem:
    """One problem ``verify`` found: ``kind`` is 'check' (an annotation not met), 'jax' (an
    error JAX raised while evaluating), 'dims' (sizes that cannot be laid out), 'memory' (more
    than ``max_replicated`` of the arguments' memory is replicated copies) or 'setup'."""

    kind: str
    message: str

    def __post_init__(self) -> None:
        if self.kind not in PROBLEM_KINDS:
            raise ValueError(f"Problem: kind must be one of {PROBLEM_KINDS}, got {self.kind!r}")
        if not isinstance(self.message, str):
            raise TypeError(f"Problem: message must be a str, got {self.message!r}")
        # A report's problems hold no docs links (a collected error's words without its link):
        # a VerificationError adds one, for them all.
        object.__setattr__(self, "message", unlinked(self.message))

    def __str__(self) -> str:
        return self.message


PROBLEM_KINDS = ("check", "jax", "dims", "setup", "memory")


@dataclasses.dataclass(frozen=True)
class VerifyReport:
    """What ``verify`` found. ``ok`` is True when there are no problems."""

    function: str
    mesh: Mapping[str, int]
    dims: Mapping[str, Any]
    problems: tuple[Problem, ...]
    outputs: Any = None
    inputs: Any = None  # the abstract arguments verify built, by parameter name
    activations: ActivationEstimate | None = None  # the step's peak intermediate memory, if traced
    cost: StepCost | None = None  # what one device sends, computes and moves per step, if traced
    step_time: StepTime | None = None  # the cost in seconds on verify's chip=, if given


    def __post_init__(self) -> None:
        mapping_of_sizes(self.mesh, "VerifyReport", "mesh")
        mapping_of_sizes(self.dims, "VerifyReport", "dims")
        if not isinstance(self.problems, tuple) or not all(isinstance(p, Problem) for p in self.problems):
            raise TypeError(f"VerifyReport: problems must be a tuple of Problem, got {self.problems!r}")

    @property
    def ok(self) -> bool:
        return not self.problems

    @property
    def activation_bytes_per_device(self) -> int | None:
        """The step's peak intermediate memory per device (bytes; a lower bound where
        ``activations.lower_bound`` says why), or None where the step was not traced."""
        return None if self.activations is None else self.activations.bytes_per_device

    @property
    def communication(self) -> Communication | None:
        """Every collective the step runs, with the bytes one device sends (see ``step_cost``),
        or None where the step was not traced."""
        return None if self.cost is None else self.cost.communication

    @property
    def communication_bytes_per_device(self) -> int | None:
        """Bytes one device sends per step (a lower bound where ``cost.lower_bound`` says why),
        or None where the step was not traced."""
        return None if self.cost is None else self.cost.communication.bytes_per_device

    @property
    def flops_per_device(self) -> int | None:
        """FLOPs one device runs per step (matmuls, convolutions, elementwise ops), or None."""
        return None if self.cost is None else self.cost.flops_per_device

    @property
    def memory_bytes_per_device(self) -> int | None:
        """Bytes one device reads and writes in its memory per step (see ``step_cost``), or None."""
        return None if self.cost is None else self.cost.memory_bytes_per_device

    @property
    def step_seconds(self) -> float | None:
        """The step's time per device on verify's ``chip`` (seconds): a lower bound, with
        compute, memory and communication overlapped perfectly (``step_time`` has the rest), or
        None where verify was given no chip or the step was not traced."""
        return None if self.step_time is None else self.step_time.perfect_overlap

    def arguments_plan(self) -> Any:
        """The plan (a ``PlanReport``) of the arguments verify built: their layout and bytes per
        device (those whose sizes are symbolic left out), as ``to_html`` and ``plan_html`` draw it."""
        return arguments_plan(self.inputs, dict(self.mesh))[0]

    def __str__(self) -> str:
        mesh = " x ".join(f"{k}={v}" for k, v in self.mesh.items())
        devices = math.prod(self.mesh.values())
        dims = ", ".join(f"{k}={v}" for k, v in self.dims.items()) or "none"
        head = f"verify {self.function} on a {mesh} mesh ({devices:,} devices), dims {dims}"
        memory = f"\n  activations: {self.activations}" if _worth_saying(self.activations) else ""
        if self.cost is not None and _cost_worth_saying(self.cost):
            memory += f"\n  cost: {_cost_line(self.cost)}"
        memory += f"\n  step time: {self.step_time}" if self.step_time is not None else ""
        if self.ok:
            return f"{head}: ok, no problems{memory}"
        lines = [f"{head}: {len(self.problems)} problem{'s' if len(self.problems) > 1 else ''}"]
        for i, p in enumerate(self.problems, 1):
            lines.append(f"  {i}. [{p.kind}] {p.message}")
        return "\n".join(lines) + memory

    def to_json(self) -> str:
        return json.dumps({
            "function": self.function, "mesh": dict(self.mesh),
            "dims": {k: str(v) for k, v in self.dims.items()}, "ok": self.ok,
            "problems": [{"kind": p.kind, "message": p.message} for p in self.problems],
            "activations": None if self.activations is None else self.activations.to_dict(),
            "cost": None if self.cost is None else self.cost.to_dict(),
            "step_time": None if self.step_time is None else self.step_time.to_dict(),
        }, indent=2)

    def to_html(self, hbm: int | str | None = None, *, title: str | None = None) -> str:
        """One self-contained HTML page: the problems, each linked to the arrays it names, and
        the plan of the arguments verify built (memory per device against ``hbm``, a size such
        as ``'80GiB'`` or a device kind such as ``'h100'``; see ``plan_html``)."""
        from .verify_page import verify_html

        return verify_html(self, hbm, title=title)

    def _repr_html_(self) -> str:  # Jupyter and Colab show a report as its page
        return self.to_html()


def _worth_saying(estimate: ActivationEstimate | None) -> bool:
    """Whether the report's text shows the estimate: not where there is none, nor where every
    size is symbolic (no dims given, so no bytes to say; ``to_json`` and the field have it)."""
    if estimate is None:
        return False
    symbolic = all(why.startswith(SYMBOLIC) for why in estimate.lower_bound)
    return estimate.bytes_per_device > 0 or not symbolic


def _cost_worth_saying(cost: StepCost | None) -> bool:
    """Whether the report's text shows the cost: not where there is none, nor where nothing was
    counted because every size is symbolic (``to_json`` and the field have it)."""
    if cost is None:
        return False
    if cost.lower_bound and all(why.startswith(SYMBOLIC) for why in cost.lower_bound):
        return bool(cost.matmul_flops_per_device)  # (not a scalar's psum alone)
    return True


def _cost_line(cost: StepCost) -> str:
    """The cost in a line: the bytes one device sends (and over which mesh axes, the most first),
    its FLOPs (those in matmuls), the bytes it reads and writes; and the largest collective."""
    some = "at least " if cost.lower_bound else ""
    communication = cost.communication
    if communication.collectives or communication.lower_bound:
        axes = sorted(communication.by_axes.items(), key=lambda t: -t[1])
        named = ", ".join(f"{','.join(a) or '-'} {fmt_bytes(b)}" for a, b in axes)
        sent = f"{some}{fmt_bytes(communication.bytes_per_device)} sent" + (f" (over {named})" if axes else "")
    else:
        sent = "no collectives"
    largest = f"; the most by {communication.collectives[0]}" if communication.collectives else ""
    return (f"{sent}, {some}{fmt_flops(cost.flops_per_device)} ({fmt_flops(cost.matmul_flops_per_device)} in "
            f"matmuls), {some}{fmt_bytes(cost.memory_bytes_per_device)} read and written per device per step"
            f"{largest}")


class VerificationError(TypeCheckError):
    """``verify(..., raise_on_error=True)`` found problems; ``report`` has them all."""

    def __init__(self, report: VerifyReport):
        super().__init__(str(report))
        self.report = report

    def __str__(self) -> str:
        return linked(super().__str__(), VERIFY_PROBLEMS)  # docs/verify.md, "Problems"

    def __reduce__(self) -> tuple[Any, ...]:
        # The report without its outputs (abstract values that need not pickle): every problem.
        return (type(self), (dataclasses.replace(self.report, outputs=None, inputs=None),))


def verify(
    fn: Callable,
    mesh: Any,
    dims: Mapping[str, Any] | None = None,
    *,
    static: Mapping[str, Any] | None = None,
    inputs: Mapping[str, Any] | None = None,
    raise_on_error: bool = False,
    max_replicated: float | str | None = None,
    hbm: int | str | None = None,
    activations: bool = True,
    cost: bool = True,
    chip: str | None = None,
    links: Mapping[str, Any] | None = None,
) -> VerifyReport:
    """Checks ``fn`` abstractly on ``mesh`` (an AbstractMesh, or a mapping such as
    ``{'d': 64, 't': 64}`` for Explicit axes) and returns a report of every problem found.

    Inputs come from ``fn``'s annotations; sizes from ``dims``, symbolic for the names it does not
    give (a multiple of the mesh axes that shard them). Parameters that are not arrays are given
    in ``static``. A parameter whose annotation cannot be built into structs (a TrainState whose
    ``opt_state`` is ``Any``) is given in ``inputs`` as a tree of values, abstract or real
    (``inputs={'state': jax.eval_shape(init, key)}``): it is laid out over ``mesh`` from the
    annotated classes inside it (optimizer moments take the parameters' layout) and checked
    against its annotation, whose named dims it sizes. ``raise_on_error=True`` raises a
    VerificationError (a TypeCheckError) instead.
    A size in ``dims`` that is not an int >= 0 is an error naming it, and so is a name close to
    one ``fn``'s annotations use that they do not (a typo, as ``hiden``); other names are bound
    too, for the body (``dims()``) and nested checked calls. ``max_replicated`` (``0.05`` or
    ``'5%'``): more of the memory ``fn``'s arguments take per device than that held by replicated
    copies is a 'memory' problem naming the costliest arrays (every size must then be known).
    The report estimates the step's peak intermediate memory per device
    (``activation_bytes_per_device``, from the traced step; ``activations=False`` skips it), and
    ``hbm`` (``'h100'``, ``'80GiB'``, bytes) makes it a 'memory' problem when the arguments
    (parameters, optimizer state, batch) and that estimate do not fit in a device's memory.
    It also says what one device sends (``communication``, every collective with its mesh axes,
    bytes, trip count and line; ``communication_bytes_per_device``), computes
    (``flops_per_device``) and reads and writes in memory (``memory_bytes_per_device``) per step,
    from the same trace (``report.cost``, a ``StepCost``; ``cost=False`` skips it). ``chip``
    (``'h100'``, ``'tpu-v5p'``, ...) turns that cost into seconds per step on the chip
    (``report.step_time``, ``report.step_seconds``: a lower bound at its peak rates), with each
    mesh axis over the link ``links`` gives it (``{'t': 'nvlink', 'd': 'network'}``, or
    bandwidths such as ``{'d': '50GB/s'}``; by default the trailing axes that fit in a node of 8
    GPUs or a TPU slice over the fast link, the rest over the slow one; see docs/chips.md).

    >>> report = verify(train_step, {'d': 64, 't': 64}, dims={'embed': 8192, 'layers': 80})  # doctest: +SKIP
    >>> report.ok, report.problems                                                          # doctest: +SKIP
    """
    options = _checked_options(fn, mesh, dims, static, raise_on_error, max_replicated, hbm, activations, cost,
                               chip, links)
    target = inspect.unwrap(fn)
    name = getattr(target, "__qualname__", repr(fn))
    found = _Found([], dict(options.dims), {})
    try:
        hints = resolve_hints(target, "verify")
    except NameError as e:
        found.problems.append(Problem("setup", str(e)))
        return _report(name, options, links, raise_on_error, found)
    multiples = _abstract_arguments(name, inspect.signature(target), hints, inputs, options, found)
    if multiples is None or found.problems:
        return _report(name, options, links, raise_on_error, found)

    mesh = options.mesh
    outputs, traced, problems = _traced_step(fn, options.static, found.args, options.dims, multiples, mesh, name)
    found.problems.extend(problems)
    estimated = step_activations(*traced, mesh) if traced is not None and activations else None
    costed = step_cost(*traced, mesh) if traced is not None and cost else None
    found.problems.extend(Problem(kind, text) for kind, text in memory_problems(
        found.args, dict(mesh.shape), name, options.tolerance, options.capacity, estimated, hints))
    return _report(name, options, links, raise_on_error, found, outputs, estimated, costed)


@dataclasses.dataclass(frozen=True)
class _Found:
    """What a verify run has found so far: its problems, the dims as its report shows them (those
    given, then those the inputs sized, then the symbolic ones) and the abstract arguments it
    built, by parameter name."""

    problems: list[Problem]
    dims: dict[str, Any]
    args: dict[str, Any]


@dataclasses.dataclass(frozen=True)
class _Options:
    """verify's arguments, checked: the abstract mesh, the dims and static values as dicts, the
    replicated share allowed, the device memory and the chip (None where not given)."""

    mesh: jax.sharding.AbstractMesh
    dims: dict[str, Any]
    static: dict[str, Any]
    tolerance: float | None
    capacity: tuple[int, str] | None
    device: Chip | None


def _checked_options(fn: Any, mesh: Any, dims: Mapping[str, Any] | None, static: Mapping[str, Any] | None,
                     raise_on_error: Any, max_replicated: Any, hbm: Any, activations: Any, cost: Any, chip: Any,
                     links: Any) -> _Options:
    """verify's arguments checked, in the order of its signature: the first wrong one raises."""
    if isinstance(fn, type) or not callable(fn):
        got = f"the class {fn.__qualname__}" if isinstance(fn, type) else f"{type(fn).__name__} {fn!r:.60}"
        raise TypeError(f"verify: fn must be a function (such as a checked train_step), got {got}")
    mesh = abstract_mesh(mesh)
    if isinstance(mesh, jax.sharding.Mesh):
        mesh = mesh.abstract_mesh  # verify never touches devices
    dims = check_dims({} if dims is None else dims, "verify")
    if static is None:
        static = {}
    if not isinstance(static, Mapping) or not all(isinstance(k, str) for k in static):
        raise TypeError(f"verify: static must be a mapping of parameter name to value, got {static!r}")
    if not isinstance(raise_on_error, bool):
        raise TypeError(f"verify: raise_on_error must be True or False, got {raise_on_error!r}")
    tolerance = None if max_replicated is None else parse_fraction(max_replicated, "verify: max_replicated")
    capacity = None if hbm is None else parse_capacity(hbm, "verify: hbm")
    if not isinstance(activations, bool):
        raise TypeError(f"verify: activations must be True or False, got {activations!r}")
    if not isinstance(cost, bool):
        raise TypeError(f"verify: cost must be True or False, got {cost!r}")
    if capacity is not None and not activations:
        raise ValueError("verify: hbm needs the activation estimate; leave activations=True")
    if links is not None and chip is None:
        raise ValueError("verify: links= says which link each mesh axis runs over on a chip; give chip= too")
    device = None if chip is None else chip_named(chip, "verify(chip=...)")
    if device is not None:
        if not cost:
            raise ValueError("verify: chip= needs the step's cost; leave cost=True")
        axis_links(dict(mesh.shape), device, links, chip_option="verify(chip=...)", links_option="verify(links=...)")
    return _Options(mesh, dims, dict(static), tolerance, capacity, device)


def _report(name: str, options: _Options, links: Mapping[str, Any] | None, raise_on_error: bool, found: _Found,
            outputs: Any = None, estimated: ActivationEstimate | None = None,
            costed: StepCost | None = None) -> VerifyReport:
    """The report of what verify found, with the step's time on its chip where it has one and the
    step was costed; raised as a VerificationError where asked and there are problems."""
    mesh = dict(options.mesh.shape)
    timed = None if costed is None or options.device is None else step_time(
        costed, mesh, options.device, links, chip_option="verify(chip=...)", links_option="verify(links=...)")
    report = VerifyReport(name, mesh, dict(found.dims), tuple(found.problems), outputs, dict(found.args) or None,
                          estimated, costed, timed)
    if raise_on_error and found.problems:
        raise VerificationError(report)
    return report


def _abstract_arguments(name: str, signature: inspect.Signature, hints: Mapping[str, Any],
                        inputs: Mapping[str, Any] | None, options: _Options, found: _Found) -> dict[str, int] | None:
    """Builds ``fn``'s abstract arguments into ``found.args``: the trees given in ``inputs=``, laid
    out over the mesh, and the others from their annotations, at the sizes given, sized by the
    inputs or symbolic (``found.dims``); every problem met goes to ``found.problems``. Returns
    the multiple of the mesh axes each named dim the annotations use must be, or None where an
    input could not be laid out (the step cannot run without it)."""
    mesh, dims, static = options.mesh, options.dims, options.static
    inputs = check_inputs_arg(inputs, signature.parameters, static, name)
    laid_out = _laid_out_inputs(inputs, mesh, found.problems)
    if len(laid_out) < len(inputs):
        return None
    unknown = sorted(set(static) - set(signature.parameters))
    if unknown:
        found.problems.append(Problem("setup", f"static values given for {unknown}, which {name}() does not take"))
    array_params = _array_parameters(signature, hints, static, inputs, name, found.problems)
    found.args.update(laid_out)
    inferred = _sizes_of_inputs(laid_out, hints, mesh, dims, name, found.problems)
    found.dims.update(inferred)
    sizes, multiples = _sizes_to_build(array_params, hints.get("return"), mesh, dims, inferred, found.problems)
    found.dims.update(sizes)  # (the symbolic sizes, after those given and inferred)
    found.args.update(_built_arguments(array_params, sizes, mesh, signature, name, found.problems))
    found.problems.extend(_plain_dataclass_problems(found.args, name))
    return multiples


def _laid_out_inputs(inputs: Mapping[str, Any], mesh: Any, problems: list[Problem]) -> dict[str, Any]:
    """The trees of values given in ``inputs=``, laid out over ``mesh``; one that cannot be (its
    sizes do not divide the mesh, a rule that cannot apply) is a 'dims' problem, and left out."""
    laid_out = {}
    for key, tree in inputs.items():
        try:
            laid_out[key] = lay_out_input(key, tree, mesh)
        except ValueError as e:  # a finding, not bad usage
            problems.append(Problem("dims", str(e)))
    return laid_out


def _array_parameters(signature: inspect.Signature, hints: Mapping[str, Any], static: Mapping[str, Any],
                      inputs: Mapping[str, Any], name: str, problems: list[Problem]) -> dict[str, Any]:
    """The parameters verify builds from their annotations (not given in ``static`` or
    ``inputs``), by name; one with neither an annotation nor a default is a 'setup' problem."""
    array_params = {}
    for p in signature.parameters.values():
        if p.name in static or p.name in inputs:
            continue
        annotation = hints.get(p.name)
        if annotation is None:
            if p.default is inspect.Parameter.empty:
                problems.append(Problem("setup", f'argument "{p.name}" of {name}() has no annotation: '
                                                 "give it in static={...}"))
            continue
        array_params[p.name] = annotation
    return array_params


def _sizes_of_inputs(laid_out: Mapping[str, Any], hints: Mapping[str, Any], mesh: Any, dims: Mapping[str, Any],
                     name: str, problems: list[Problem]) -> dict[str, Any]:
    """The sizes the given input trees bind through their annotations (``inputs=`` sizes named
    dims); an input its annotation does not accept is a 'check' problem."""
    inferred: dict[str, Any] = {}
    for key, tree in laid_out.items():
        if hints.get(key) is not None:
            try:
                inferred.update(sizes_of_input(key, tree, hints[key], mesh, {**dims, **inferred}, name))
            except TypeCheckError as e:
                problems.append(Problem("check", str(e)))
    return inferred


def _sizes_to_build(array_params: Mapping[str, Any], returns: Any, mesh: Any, dims: Mapping[str, Any],
                    inferred: Mapping[str, Any], problems: list[Problem]) -> tuple[dict[str, Any], dict[str, int]]:
    """The size of every named dim the annotations use (given, inferred from the inputs, or
    symbolic: a multiple of the mesh axes that split it), and those multiples; a '*name' dim not
    given is a 'setup' problem."""
    annotated = list(array_params.values()) + ([returns] if returns is not None else [])
    multiples, variadic = dim_multiples(annotated, dict(mesh.shape))
    # A name no annotation of fn uses may still be read by its body (dims()) or bound by a nested
    # checked call, so only one close to a name fn's annotations use is an error (a typo).
    check_dims_for(dims, set(multiples) - variadic, variadic, "verify", strict=False)
    missing_variadic = sorted(n for n in variadic if n not in dims)
    if missing_variadic:
        problems.append(Problem("setup", f"dims {missing_variadic} stand for several dims ('*name'): "
                                         "give each as a tuple in dims"))
    symbolic = sorted(n for n in multiples if n not in dims and n not in inferred and n not in variadic)
    sizes: dict[str, Any] = {**dims, **inferred}
    if symbolic:
        symbols = jax.export.symbolic_shape(",".join(symbolic))
        for n, sym in zip(symbolic, symbols):
            sizes[n] = multiples[n] * sym if multiples[n] > 1 else sym
    return sizes, multiples


def _built_arguments(array_params: Mapping[str, Any], sizes: Mapping[str, Any], mesh: Any,
                     signature: inspect.Signature, name: str, problems: list[Problem]) -> dict[str, Any]:
    """Abstract arguments (ShapeDtypeStructs laid out over ``mesh``) built from the annotations;
    one that cannot be built is a 'setup' problem (not an array tree) or a 'dims' one (sizes that
    cannot be laid out), unless the parameter has a default."""
    built = {}
    for pname, annotation in array_params.items():
        try:
            # an UNCONSTRAINED dim (embed/?) accepts any split: its input is laid out replicated
            built[pname] = structs(annotation, sizes, mesh, unconstrained="replicate")
        except TypeError as e:
            if signature.parameters[pname].default is not inspect.Parameter.empty:
                continue
            problems.append(_unbuildable(pname, annotation, e, name))
        except ValueError as e:
            problems.append(Problem("dims", f'argument "{pname}" of {name}(): {e}'))
    return built


def _unbuildable(pname: str, annotation: Any, error: TypeError, name: str) -> Problem:
    """The 'setup' problem of a parameter whose annotation builds no structs, and the way out."""
    why = str(error).removeprefix("make_shape_dtype_structs: ")
    if holds_shardtypes((annotation,)) and "no fixed length" in why:
        # It holds arrays, but not in a form with one layout tree: say which field and
        # the ways out (its values, a fixed length, one stacked layer).
        return Problem("setup", f'argument "{pname}" of {name}() is annotated '
                                f"{type_text(annotation)}, which has no layout tree to build it "
                                f"from ({why}): give its values in "
                                f'inputs={{"{pname}": jax.eval_shape(init, key)}}, or '
                                "annotate the field as a fixed-length tuple or one stacked layer "
                                "(Stacked[Block, b'layers'])")
    return Problem("setup", f'argument "{pname}" of {name}() is annotated {annotation!r}, '
                            "which is not an array tree: give it in static={...}")


def _plain_dataclass_problems(args: Mapping[str, Any], name: str) -> list[Problem]:
    """A 'setup' problem for each argument holding a dataclass JAX does not know as a pytree
    (JAX would say "Error interpreting argument ... as an abstract array")."""
    found = []
    for pname, value in args.items():
        plain = [leaf for leaf in jax.tree.leaves(value) if dataclasses.is_dataclass(leaf)]
        if plain:
            cls = type(plain[0])
            found.append(Problem("setup", f'argument "{pname}" of {name}() holds '
                                 f"{cls.__module__}.{cls.__qualname__}, "
                                 "a plain dataclass JAX does not know as a pytree, so jax.eval_shape cannot "
                                 "trace it: register the class (shardtypes.pytree_dataclass, "
                                 "jax.tree_util.register_dataclass, flax.struct.dataclass or an equinox.Module)"))
    return found


def _traced_step(fn: Callable, static: Mapping[str, Any], args: dict[str, Any], dims: Mapping[str, Any],
                 multiples: Mapping[str, int], mesh: Any,
                 name: str) -> tuple[Any, tuple[Any, list] | None, list[Problem]]:
    """``fn`` checked and traced on ``args`` under ``mesh``, with every check on and collected:
    its outputs, the traced step ((jaxpr, leaves), None where it did not run through) and the
    problems met (the checks that failed first, then JAX's own error). A name in ``dims`` that
    no check of the whole step used is an error (a typo)."""
    checked = typechecked(fn) if not getattr(fn, "__shardtypes_checked__", False) else fn
    collected: list = []
    found: list[Problem] = []
    token = COLLECTED.set(collected)
    used: set[str] = set(multiples)
    names_token = NAMES_USED.set(used)
    outputs: Any = None
    traced: tuple[Any, list] | None = None
    try:
        # The sizes given are bound while fn runs (dims() sees them; symbolic ones are bound by
        # the arguments, which say so in messages); its checks, return value included, report
        # into `collected` instead of raising.
        given = Scope(**dims)
        given._origin = "verify(dims=...)"
        with jax.sharding.use_abstract_mesh(mesh), given, forced_checks():
            try:
                outputs, closed, leaves = trace_step(functools.partial(checked, **static), args)
                traced = (closed, leaves)
            except TypeCheckError as e:
                collected.append(e)
            except Exception as e:  # JAX's own errors: shapes, ambiguous shardings, ...
                found.append(Problem("jax", f"{name}() fails under jax.eval_shape{_user_frame(e)}: "
                                            f"{type(e).__name__}: {_first_lines(e)}"))
    finally:
        NAMES_USED.reset(names_token)
        COLLECTED.reset(token)
    if traced is not None:  # the whole step ran: every name it uses was seen
        _refuse_unused_dims(dims, used, name)
    return outputs, traced, [Problem("check", str(e)) for e in collected] + found


def _refuse_unused_dims(dims: Mapping[str, Any], used: set[str], name: str) -> None:
    """A ``dims`` name that no check made while ``name`` ran compared or bound, and that its body
    never read through ``dims()``, is a typo (``'embd'`` for ``'embed'``): an error naming the
    nearest name used."""
    unused = [n for n in dims if n not in used]
    if unused:
        raise unused_dims_error(unused, used, "verify", users=(
            f"no annotation of {name}() or of the checked calls it makes uses, and which its body "
            "never reads through dims() (the names used:"))


def _user_frame(e: BaseException) -> str:
    """`` at file:line (function)`` of the innermost frame outside JAX and shardtypes."""
    import os
    import traceback

    skip = (os.path.dirname(jax.__file__), os.path.dirname(__file__), f"{os.sep}jaxlib{os.sep}",
            f"{os.sep}typeguard{os.sep}", f"{os.sep}contextlib.py", f"{os.sep}functools.py")
    frames = [f for f in traceback.extract_tb(e.__traceback__) if not any(s in f.filename for s in skip)]
    if not frames:
        return ""
    f = frames[-1]
    return f" at {os.path.basename(f.filename)}:{f.lineno} ({f.name}: {(f.line or '').strip()})"


def _first_lines(e: Exception, n: int = 3) -> str:
    lines = [line for line in str(e).splitlines() if line.strip()]
    return " ".join(lines[:n])
