"""Building and judging one generated kernel: its inputs from its annotations, the run with
checks off (the numbers, against the numpy reference), the trace with checks on (the pass's
verdict), and the texts the oracle prints when they disagree."""

import dataclasses
import functools
import inspect
import itertools
import linecache
import re
import typing
import warnings
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P
from typeguard import TypeCheckError

import shardtypes
from shardtypes import ShapeSpec, bool_, f32, make_partition_specs, typed_shard_map

AXIS_TYPES = {"explicit": AxisType.Explicit, "auto": AxisType.Auto}
SIZES = {"r": 16, "c": 16, "l": 2}  # global sizes of the dim names; n1..n9 are 8, a literal is itself
TOL = dict(rtol=1e-4, atol=1e-4)
NAMESPACE = {"jax": jax, "jnp": jnp, "np": np, "f32": f32, "bool_": bool_, "P": P}
ITEMS = 2  # the length of a list argument
KEYS = ("u", "w")  # the keys of a dict argument
CLOSED = 0.75  # the value of each closed-over scalar ``s*``


@dataclasses.dataclass(frozen=True)
class Program:
    """One generated kernel: the mesh, how it is called, the kernel's source and the reference's
    (numpy, on the global arrays, with the same parameters). With ``closed`` names the source
    defines ``make(*closed)`` returning the kernel, which closes over them (jit arguments, or
    concrete scalars when ``eager``); with ``axis_names`` the kernel is manual over those axes only
    (an inner ``jax.shard_map`` takes the others)."""

    mesh: tuple  # (('a', 2), ('b', 4))
    axis_type: str  # 'explicit' | 'auto'
    check_vma: bool
    kernel: str
    reference: str
    eager: bool = False
    closed: tuple = ()
    axis_names: tuple | None = None
    # The grammar's choices that depart from the right kernel (wrong collectives, a cumsum over
    # a split dim, a perturbed return annotation...): not part of the program, a reading aid.
    choices: tuple = dataclasses.field(default=(), compare=False)

    def call(self) -> dict:
        return dict(eager=self.eager, closed=self.closed, axis_names=self.axis_names)

    def text(self) -> str:
        mesh = ", ".join(f"{n}={s}" for n, s in self.mesh)
        how = "called eagerly" if self.eager else "called under jax.jit"
        if self.closed:
            how += f", closing over {', '.join(self.closed)} = {CLOSED}" + (" (concrete)" if self.eager else
                                                                           " (jit arguments)")
        if self.axis_names:
            how += f", axis_names={set(self.axis_names)}"
        choices = "".join(f"\n  - {c}" for c in self.choices) or " none"
        return (f"mesh ({mesh}), {self.axis_type} axes, check_vma={self.check_vma}, {how}\n\n{self.kernel}\n"
                f"{self.reference}\ngrammar choices departing from the right kernel:{choices}\n")


def size_of(name: str) -> int:
    return int(name) if name.isdigit() else SIZES.get(name, 8)


@functools.lru_cache(maxsize=None)
def mesh_of(shape: tuple, names: tuple, axis_type: str) -> jax.sharding.Mesh:
    return jax.make_mesh(shape, names, axis_types=(AXIS_TYPES[axis_type],) * len(names))


_SOURCES = itertools.count()


def build(source: str, name: str) -> Callable:
    """The function ``name`` that ``source`` defines; its source is kept in ``linecache`` (so
    ``inspect.getsource`` works, as for a function in a file)."""
    filename = f"<oracle-kernel-{next(_SOURCES)}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    namespace = dict(NAMESPACE)
    exec(compile(source, filename, "exec", dont_inherit=True), namespace)
    return namespace[name]


def _leaf(name: str, ann: Any, rng: np.random.Generator, trend: float) -> np.ndarray:
    shape = tuple(size_of(d.shape) for d in ShapeSpec.parse(ann.shape_string).dims)
    if name.startswith("p"):
        return np.bool_(True)
    host = rng.standard_normal(shape).astype(np.float32) * (0.25 if name.startswith("w") else 1.0)
    if name.startswith("zs"):  # (small: a max with them never hides a device's part)
        host = host * 0.1
    elif name.startswith("x"):  # (rising or falling: a prefix's max or min is not in block 0)
        host = host + np.float32(trend)
    return host


def inputs_of(kernel: Callable, mesh: jax.sharding.Mesh, trend: float = 0.0) -> tuple[list[str], list[Any], list[Any]]:
    """(parameter names, global numpy arrays, laid out jax arrays) for the kernel's parameters,
    from their annotations: random normal floats (weights ``w*`` scaled by 1/4, scanned ``zs*``
    by 1/10), predicates ``p*`` (True, replaced by each value in turn when run), and lists
    (``list[X]``, ``ITEMS`` items) and dicts (``dict[str, X]``, keys ``KEYS``) of such arrays."""
    rng = np.random.default_rng(0)
    names, hosts, arrays = [], [], []
    for p in inspect.signature(kernel).parameters.values():
        ann = kernel.__annotations__[p.name]
        origin, args = typing.get_origin(ann), typing.get_args(ann)
        if origin is list:
            host: Any = [_leaf(p.name, args[0], rng, trend) for _ in range(ITEMS)]
            put: Any = [jax.device_put(h, NamedSharding(mesh, make_partition_specs(args[0]))) for h in host]
        elif origin is dict:
            host = {k: _leaf(p.name, args[1], rng, trend) for k in KEYS}
            put = {k: jax.device_put(h, NamedSharding(mesh, make_partition_specs(args[1]))) for k, h in host.items()}
        else:
            host = _leaf(p.name, ann, rng, trend)
            put = jax.device_put(host, NamedSharding(mesh, make_partition_specs(ann)))
        names.append(p.name)
        hosts.append(host)
        arrays.append(put)
    return names, hosts, arrays


def as_reference_input(host: Any) -> Any:
    if isinstance(host, list):
        return [as_reference_input(h) for h in host]
    if isinstance(host, dict):
        return {k: as_reference_input(h) for k, h in host.items()}
    return bool(host) if host.dtype == np.bool_ else np.asarray(host, np.float64)


def close(out: Any, expected: np.ndarray) -> bool:
    """The result equals the unsharded one on every device: each device's block of it (a value
    returned replicated must be the same everywhere, not only on the device JAX reads it from)."""
    whole = np.asarray(out)
    if whole.shape != expected.shape or not np.allclose(whole, expected, equal_nan=True, **TOL):
        return False
    return all(np.allclose(np.asarray(shard.data), expected[shard.index], equal_nan=True, **TOL)
               for shard in getattr(out, "addressable_shards", ()))


# XLA's CPU backend compiles about twice as fast unoptimised; the numbers are the same (to the
# tolerance), and compiling is most of the cost of a kernel.
_FAST_COMPILE = {"xla_backend_optimization_level": 0, "xla_cpu_parallel_codegen_split_count": 1}


def compiled(jitted: Any, args: list) -> Callable:
    lowered = jitted.lower(*args)
    try:
        return lowered.compile(compiler_options=_FAST_COMPILE)
    except Exception:  # noqa: BLE001 - an XLA without these options: compile as usual
        return lowered.compile()


_VMA_ERRORS = re.compile(r"vma|varying|out_specs|check_vma|check_rep|invariant", re.IGNORECASE)


@dataclasses.dataclass
class Verdicts:
    correct: bool
    accepted: bool
    error: str  # the TypeCheckError's text when refused
    numbers: str  # what went wrong with the numbers when not correct
    stepped_aside: list = dataclasses.field(default_factory=list)  # the pass's KernelPassWarnings


# The pass warns where it cannot follow a primitive (and takes what it computes as unknown): every
# primitive of the grammar is an ordinary one, so that is a bug here too.
_PASS_WARNING = getattr(shardtypes, "KernelPassWarning", UserWarning)


class Unrunnable(Exception):
    """JAX refused the kernel with checks off (check_vma): it cannot run at all."""


def _difference(out: Any, expected: np.ndarray) -> str:
    out = np.asarray(out)
    if out.shape != expected.shape:
        return f"shape {out.shape}, reference {expected.shape}"
    return f"max |difference| {np.max(np.abs(out - expected)):.3g}"


def judge(kernel_src: Callable | str, reference_src: Callable | str, mesh: tuple, axis_type: str,
          check_vma: bool, *, eager: bool = False, closed: tuple = (), axis_names: tuple | None = None) -> Verdicts:
    """Both verdicts of one kernel. ``kernel_src`` and ``reference_src``: the source defining
    ``kernel`` (``make`` when it closes over ``closed``) and ``reference`` (or the functions
    themselves). The numbers come from the kernel compiled under jit with checks off (the same
    computation an eager call makes, which is also checked when the pass accepts it); the pass's
    verdict from the call with checks on, eager or under jit as the program says."""
    make = build(kernel_src, "make" if closed else "kernel") if isinstance(kernel_src, str) else kernel_src
    reference = build(reference_src, "reference") if isinstance(reference_src, str) else reference_src
    kernel = make(*[CLOSED] * len(closed)) if closed else make
    m = mesh_of(tuple(s for _, s in mesh), tuple(n for n, _ in mesh), axis_type)
    names, hosts, arrays = inputs_of(kernel, m)  # (run below on two draws: x rising, then falling)
    preds = [i for i, n in enumerate(names) if n.startswith("p")]
    options: dict = dict(check_vma=check_vma)
    if axis_names:
        options["axis_names"] = set(axis_names)
    n = len(closed)

    def whole(*args: Any) -> Any:  # the closed-over values are the first arguments (jit's tracers)
        return typed_shard_map(make(*args[:n]) if closed else make, **options)(*args[n:])

    scalars = [np.float32(CLOSED)] * n
    refs: list = []
    with jax.set_mesh(m):
        # (a) checks off: run it, for every value of the predicates.
        correct, numbers = True, ""
        was = shardtypes.config.checks
        shardtypes.config.checks = False
        try:
            try:
                run = compiled(jax.jit(whole), scalars + arrays)
            except TypeCheckError:
                raise
            except Exception as e:  # noqa: BLE001 - JAX's own refusal, read below
                if check_vma and _VMA_ERRORS.search(str(e)):
                    raise Unrunnable(f"{type(e).__name__}: {e}") from e
                raise
            draws = [inputs_of(kernel, m, trend)[1:] for trend in (0.5, -0.5)]
            for (hosts, arrays), values in itertools.product(draws, itertools.product((True, False), repeat=len(preds))):
                args, host_args = list(arrays), list(hosts)
                for i, value in zip(preds, values):
                    host_args[i] = np.bool_(value)
                    args[i] = jax.device_put(host_args[i], NamedSharding(m, P()))
                out = run(*scalars, *args)
                expected = np.asarray(reference(*[as_reference_input(h) for h in host_args],
                                                *[float(CLOSED)] * n))
                refs.append((args, expected))
                if not np.all(np.abs(expected) < 1e30):  # (past float32's range: no verdict from the numbers)
                    raise Unrunnable("the unsharded result overflows float32")
                if correct and not close(out, expected):
                    correct = False
                    where = dict(zip((names[i] for i in preds), values))
                    numbers = (f"with {where}: " if where else "") + _difference(out, expected)
        finally:
            shardtypes.config.checks = was
        # (b) checks on: call it (eagerly, with concrete values closed over) or trace it.
        shardtypes.config.checks = True
        try:
            with warnings.catch_warnings(record=True) as warned:
                warnings.simplefilter("always", _PASS_WARNING)
                if eager:
                    args, expected = refs[0]
                    values = [jnp.float32(CLOSED) for _ in closed]
                    out = typed_shard_map(make(*values) if closed else make, **options)(*args)
                    if correct and not close(out, expected):  # (the same numbers as under jit, so far)
                        correct, numbers = False, "called eagerly: " + _difference(out, expected)
                else:
                    jax.jit(whole).trace(*scalars, *arrays)
            accepted, error = True, ""
        except TypeCheckError as e:
            accepted, error = False, f"{type(e).__name__}: {e}"
        finally:
            shardtypes.config.checks = was
    stepped_aside = [str(w.message) for w in warned if issubclass(w.category, _PASS_WARNING)]
    return Verdicts(correct, accepted, error, numbers, stepped_aside)


def stepped_aside(program_text: str, v: Verdicts) -> str:
    return (f"the kernel pass stepped aside (KernelPassWarning) on a kernel of ordinary primitives:\n\n"
            f"{program_text}\n" + "\n".join(v.stepped_aside))


def report(program_text: str, v: Verdicts) -> str:
    what = ("accepted, but its numbers are wrong (a silent wrong number)" if v.accepted else
            "refused, but its numbers are right (a false error)")
    return (f"the kernel pass and the numbers disagree: the kernel is {what}\n\n{program_text}\n"
            f"correct: {v.correct}{' (' + v.numbers + ')' if v.numbers else ''}\n"
            f"accepted: {v.accepted}\n{v.error}")


def assert_agrees(kernel: Callable | str, reference: Callable | str, mesh: tuple, axis_type: str = "explicit",
                  check_vma: bool = False, **call: Any) -> None:
    """``accepted == correct`` for one kernel (``call``: ``eager``, ``closed``, ``axis_names``, as
    for ``judge``), with the oracle's message when not."""
    v = judge(kernel, reference, mesh, axis_type, check_vma, **call)
    if v.accepted != v.correct or v.stepped_aside:
        if isinstance(kernel, str):
            body = kernel + "\n" + reference
        else:
            body = inspect.getsource(kernel) + "\n" + inspect.getsource(reference)  # type: ignore[arg-type]
        m = ", ".join(f"{n}={s}" for n, s in mesh)
        text = f"mesh ({m}), {axis_type} axes, check_vma={check_vma}, {call or 'under jax.jit'}\n\n{body}"
        raise AssertionError(stepped_aside(text, v) if v.stepped_aside else report(text, v))
