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
    linked,
    mapping_of_sizes,
    unlinked,
    unused_dims_error,
)
from ..layout import check_dims_for, dim_multiples, structs
from ..model import COLLECTED, holds_shardtypes, resolve_hints, type_text
from .activations import SYMBOLIC, ActivationEstimate, trace_step
from .chips import StepTime, axis_links, chip_named, step_time
from .cost_model import step_cost
from .html_parts import parse_capacity
from .memory_checks import arguments_plan, memory_problems, step_activations
from .memory_plan import fmt_bytes, parse_fraction
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
    """The cost in a line, with the largest collective's line where there is one."""
    largest = cost.communication.collectives[:1]
    axes = sorted(cost.communication.by_axes.items(), key=lambda t: -t[1])
    named = ", ".join(f"{','.join(a) or '-'} {fmt_bytes(b)}" for a, b in axes)
    per_axes = f" (over {named})" if axes else ""
    return str(cost).replace(" sent,", f" sent{per_axes},", 1) + (f"; the most by {largest[0]}" if largest else "")


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
    static = dict(static)
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
    target = inspect.unwrap(fn)
    name = getattr(target, "__qualname__", repr(fn))
    problems: list[Problem] = []
    report_dims: dict[str, Any] = dict(dims)
    args: dict[str, Any] = {}

    estimated = None
    costed = None

    def finish(outputs: Any = None) -> VerifyReport:
        timed = None if costed is None or device is None else step_time(
            costed, dict(mesh.shape), device, links, chip_option="verify(chip=...)", links_option="verify(links=...)")
        report = VerifyReport(name, dict(mesh.shape), report_dims, tuple(problems), outputs, dict(args) or None,
                              estimated, costed, timed)
        if raise_on_error and problems:
            raise VerificationError(report)
        return report

    try:
        hints = resolve_hints(target, "verify")
    except NameError as e:
        problems.append(Problem("setup", str(e)))
        return finish()
    signature = inspect.signature(target)
    inputs = check_inputs_arg(inputs, signature.parameters, static, name)
    laid_out = {}
    for key, tree in inputs.items():
        try:
            laid_out[key] = lay_out_input(key, tree, mesh)
        except ValueError as e:  # its sizes do not divide the mesh, a rule that cannot apply: a finding
            problems.append(Problem("dims", str(e)))
    if len(laid_out) < len(inputs):
        return finish()  # (the step cannot run without its input)
    unknown = sorted(set(static) - set(signature.parameters))
    if unknown:
        problems.append(Problem("setup", f"static values given for {unknown}, which {name}() does not take"))

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
    returns = hints.get("return")
    inferred: dict[str, Any] = {}
    for key, tree in laid_out.items():
        args[key] = tree
        if hints.get(key) is not None:
            try:
                inferred.update(sizes_of_input(key, tree, hints[key], mesh, {**dims, **inferred}, name))
            except TypeCheckError as e:
                problems.append(Problem("check", str(e)))
    report_dims.update(inferred)

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
            report_dims[n] = sizes[n]

    for pname, annotation in array_params.items():
        try:
            # an UNCONSTRAINED dim (embed/?) accepts any split: its input is laid out replicated
            args[pname] = structs(annotation, sizes, mesh, unconstrained="replicate")
        except TypeError as e:
            p = signature.parameters[pname]
            if p.default is not inspect.Parameter.empty:
                continue
            why = str(e).removeprefix("make_shape_dtype_structs: ")
            if holds_shardtypes((annotation,)) and "no fixed length" in why:
                # It holds arrays, but not in a form with one layout tree: say which field and
                # the ways out (its values, a fixed length, one stacked layer).
                problems.append(Problem("setup", f'argument "{pname}" of {name}() is annotated '
                                                 f"{type_text(annotation)}, which has no layout tree to build it "
                                                 f"from ({why}): give its values in "
                                                 f'inputs={{"{pname}": jax.eval_shape(init, key)}}, or '
                                                 "annotate the field as a fixed-length tuple or one stacked layer "
                                                 "(Stacked[Block, b'layers'])"))
            else:
                problems.append(Problem("setup", f'argument "{pname}" of {name}() is annotated {annotation!r}, '
                                                 "which is not an array tree: give it in static={...}"))
        except ValueError as e:
            problems.append(Problem("dims", f'argument "{pname}" of {name}(): {e}'))
    for pname, value in args.items():
        plain = [leaf for leaf in jax.tree.leaves(value) if dataclasses.is_dataclass(leaf)]
        if plain:  # (JAX would say "Error interpreting argument ... as an abstract array")
            cls = type(plain[0])
            problems.append(Problem("setup", f'argument "{pname}" of {name}() holds '
                                    f"{cls.__module__}.{cls.__qualname__}, "
                                    "a plain dataclass JAX does not know as a pytree, so jax.eval_shape cannot "
                                    "trace it: register the class (shardtypes.pytree_dataclass, "
                                    "jax.tree_util.register_dataclass, flax.struct.dataclass or an equinox.Module)"))
    if problems:
        return finish()

    checked = typechecked(fn) if not getattr(fn, "__shardtypes_checked__", False) else fn
    collected: list = []
    token = COLLECTED.set(collected)
    used: set[str] = set(multiples)
    names_token = NAMES_USED.set(used)
    outputs = traced = None
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
                problems.append(Problem("jax", f"{name}() fails under jax.eval_shape{_user_frame(e)}: "
                                                 f"{type(e).__name__}: {_first_lines(e)}"))
    finally:
        NAMES_USED.reset(names_token)
        COLLECTED.reset(token)
    if traced is not None:  # the whole step ran: every name it uses was seen
        _refuse_unused_dims(dims, used, name)
    problems[:0] = [Problem("check", str(e)) for e in collected]
    if traced is not None and activations:
        estimated = step_activations(*traced, mesh)
    if traced is not None and cost:
        costed = step_cost(*traced, mesh)
    problems.extend(Problem(kind, text) for kind, text in memory_problems(
        args, dict(mesh.shape), name, tolerance, capacity, estimated, hints))
    return finish(outputs)


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
