"""``typed_shard_map``: ``jax.shard_map`` whose specs come from the function's annotations.

>>> @typed_shard_map
... def matmul(x: f32[b'batch/d embed'], w: f32[b'embed hidden/t']) -> f32[b'batch/d hidden/t']:
...     return x @ w          # x is the local (batch/4, embed) block on a (d=4, t=2) mesh

The body is checked with local shapes against the global sizes in its annotations (see
``checking.value``); the global arguments are checked at the boundary, under ``jax.jit`` on Auto mesh
axes at compile time (``shardtypes.config.auto_sharding_check``). Parameters whose annotation
has no layout (ints, configs, unannotated) are passed through as static values, closed over by
the mapped function.
"""

from __future__ import annotations

import collections.abc
import functools
import inspect
import sys
import warnings
import weakref
from typing import Any, Callable, Iterable, ParamSpec, TypeVar, overload

import jax
from jax.sharding import AbstractMesh, Mesh, PartitionSpec
from typeguard import TypeCheckError

from ..checking import (
    COMPILE_TIME_CHECKS,
    KernelPassWarning,
    flows,
    in_facts,
    is_staged,
    known_bug,
    returned,
    traced,
    tracking,
)
from ..context import axis_rules, current_rules, filter_traceback, no_mesh_error, scope
from ..integrations import typecheck_target
from ..language import axes_entry, entry_axes
from ..layout import partition_specs as derive_specs
from ..model import holds_pytree, holds_shardtypes, homogeneous_item, in_kernel, resolve_hints, tree_info
from .params import (
    Each,
    as_tuples,
    bare_array_annotation,
    check_kernel,
    check_static,
    conform_result,
    conform_specs,
    tuple_parameters,
)

__all__ = ["typed_shard_map"]

_P = ParamSpec("_P")
_R = TypeVar("_R")


@overload
def typed_shard_map(
    f: Callable[_P, _R],
    /,
    *,
    mesh: Mesh | AbstractMesh | None = None,
    axis_names: Iterable[str] | None = None,
    check_vma: bool | None = None,
    check_rep: bool | None = None,
) -> Callable[_P, _R]: ...


@overload
def typed_shard_map(
    f: None = None,
    /,
    *,
    mesh: Mesh | AbstractMesh | None = None,
    axis_names: Iterable[str] | None = None,
    check_vma: bool | None = None,
    check_rep: bool | None = None,
) -> Callable[[Callable[_P, _R]], Callable[_P, _R]]: ...


def typed_shard_map(
    f: Callable[_P, _R] | None = None,
    /,
    *,
    mesh: Mesh | AbstractMesh | None = None,
    axis_names: Iterable[str] | None = None,
    check_vma: bool | None = None,
    check_rep: bool | None = None,
) -> Callable[_P, _R] | Callable[[Callable[_P, _R]], Callable[_P, _R]]:
    """``jax.shard_map`` with ``in_specs`` and ``out_specs`` derived from ``f``'s annotations.

    Use as ``@typed_shard_map`` or ``@partial(typed_shard_map, check_vma=False)``. ``mesh``
    defaults to the mesh current at each call (``jax.set_mesh``); ``axis_names`` makes only those
    axes manual (the specs then keep only them); ``check_rep`` is the older name of
    ``check_vma``.
    """
    for name, flag in (("check_vma", check_vma), ("check_rep", check_rep)):
        if flag is not None and not isinstance(flag, bool):
            raise TypeError(f"typed_shard_map: {name} must be True, False or None, got {flag!r}")
    if check_rep is not None:
        if check_vma is not None and check_vma != check_rep:
            raise TypeError("typed_shard_map: check_rep is the old name of check_vma; pass one of them")
        check_vma = check_rep
    if mesh is not None and not isinstance(mesh, (Mesh, AbstractMesh)):
        raise TypeError(f"typed_shard_map: mesh must be a Mesh or AbstractMesh (or None for the current "
                        f"mesh), got {mesh!r}")
    if axis_names is not None:
        if isinstance(axis_names, str) or not isinstance(axis_names, collections.abc.Iterable):
            raise TypeError(f"typed_shard_map: axis_names must be a collection of mesh axis names "
                            f"(a set of str), got {axis_names!r}")
        axis_names = frozenset(axis_names)
        bad = sorted(repr(a) for a in axis_names if not isinstance(a, str))
        if bad:
            raise TypeError(f"typed_shard_map: axis_names must hold mesh axis names (str), got {', '.join(bad)}")
    if f is None:
        def decorate(f: Callable[_P, _R]) -> Callable[_P, _R]:
            return typed_shard_map(f, mesh=mesh, axis_names=axis_names, check_vma=check_vma)

        return decorate
    # Annotations may name variables of the scope the decorator is applied in (as typechecked).
    return _typed_shard_map(f, mesh, axis_names, check_vma, sys._getframe(1).f_locals)


def _typed_shard_map(f: Callable[_P, _R], mesh: Mesh | AbstractMesh | None, axis_names: Iterable[str] | None,
                     check_vma: bool | None, scope_vars: dict[str, Any]) -> Callable[_P, _R]:
    if not callable(f):
        raise TypeError(f"typed_shard_map expects a function, got {f!r}")
    check_kernel(inspect.unwrap(f), getattr(f, "__qualname__", repr(f)))
    if getattr(f, "__shardtypes_scope__", False):
        # typed_shard_map(scope(f)): the kernel's checks, outside and inside, get a fresh table.
        return scope(_typed_shard_map(getattr(f, "__wrapped__"), mesh, axis_names, check_vma, scope_vars))
    # The global arguments and result are checked too (so a wrongly laid out input is a
    # TypeCheckError naming it, not JAX's spec mismatch); the body checks the local blocks.
    # Under jax.jit on Auto axes an argument's layout is only known once XLA has partitioned the
    # program, so its check is the compile-time one (jax.debug.inspect_array_sharding): a
    # replicated weight whose annotation shards it fails compilation instead of being resharded
    # by shard_map on every call. The result is laid out by out_specs, which come from the same
    # annotation: the wrapper turns the compile-time check off for it (see _make_wrapper).
    state = _TypedShardMap(f, mesh, axis_names, check_vma, scope_vars)
    checked = typecheck_target(state.wrapper, scope_vars)

    @functools.wraps(checked)
    def entry(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        token = COMPILE_TIME_CHECKS.set(True)
        try:
            tuples = state.tuple_params
            if tuples is None:
                if state.arrays is None:
                    state._resolve()
                tuples = state.tuple_params
            if tuples:  # a list given for a tuple[...] (JAX's specs take lists): as annotated
                given, named = as_tuples(tuples, args, kwargs)
                return checked(*given, **named)
            return checked(*args, **kwargs)
        except TypeCheckError as e:
            filter_traceback(e)  # the user's frames only (config.traceback_filtering)
            raise
        finally:
            COMPILE_TIME_CHECKS.reset(token)  # also undoes the wrapper's setting for the result

    setattr(entry, "__shardtypes_checked__", True)  # typechecked(entry) is entry
    return entry


class _TypedShardMap:
    def __init__(self, f: Callable, mesh: Any, axis_names: Any, check_vma: bool | None,
                 scope_vars: dict):
        self.f = f
        self.body = typecheck_target(f, scope_vars)  # f itself when f is already checked
        self.scope_vars: dict | None = scope_vars
        self.mesh = mesh
        self.axis_names = frozenset(axis_names) if axis_names is not None else None
        self.check_vma = check_vma
        self.signature = inspect.signature(f)
        self.name = getattr(f, "__qualname__", repr(f))
        # Resolved at the first call (annotations may name things defined after f), then kept.
        self.arrays: list[str] | None = None
        self.in_specs: tuple | None = None
        self.out_specs: Any = None
        self.annotations: tuple = ()
        # (position, name, annotation) of each parameter annotated tuple[...] (resolved with the rest)
        self.tuple_params: tuple | None = None
        # Under axis rules the specs depend on the rules too: (rules, mode) -> (in, out).
        self.rule_specs: dict = {}
        self.wrapper = self._make_wrapper()

    def _resolve(self) -> list[str]:
        """Reads the annotations (at the first call); returns the array parameters' names."""
        hints = resolve_hints(self.f, "typed_shard_map", self.scope_vars)
        self.scope_vars = None  # resolved: stop holding the defining scope's objects
        with axis_rules(None):  # these are the specs without rules; rule sets get their own
            return self._resolve_specs(hints)

    def _resolve_specs(self, hints: dict[str, Any]) -> list[str]:
        arrays, specs, annotations = [], [], []
        for p in self.signature.parameters.values():
            if p.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD):
                stars = "*" if p.kind is inspect.Parameter.VAR_POSITIONAL else "**"
                raise TypeError(
                    f"typed_shard_map: {self.name} has {stars}{p.name}; annotate each array "
                    "parameter instead"
                )
            bare_array_annotation(hints.get(p.name), f'argument "{p.name}"', self.name)
            spec = self._specs_of(hints.get(p.name), f'argument "{p.name}"', static_ok=True)
            if spec is not None:
                arrays.append(p.name)
                specs.append(spec)
                annotations.append((hints[p.name], f'argument "{p.name}"'))
        if "return" not in hints:
            raise TypeError(f"typed_shard_map: {self.name} needs a return annotation for its out_specs")
        self.out_specs = self._specs_of(hints["return"], "the return value", static_ok=False)
        self.in_specs = tuple(specs)
        self.annotations = (tuple(annotations), hints["return"])
        self.tuple_params = tuple_parameters(self.signature, hints)
        self.arrays = arrays
        return arrays

    def specs(self) -> tuple[tuple, Any]:
        """(in_specs, out_specs) under the active axis rules."""
        active = current_rules()
        if active is None:
            if self.in_specs is None:  # (the first call resolves before it asks)
                self._resolve()
                return self.specs()
            return self.in_specs, self.out_specs
        found = self.rule_specs.get(active)
        if found is None:
            params, ret = self.annotations
            found = (
                tuple(self._specs_of(a, what, static_ok=False) for a, what in params),
                self._specs_of(ret, "the return value", static_ok=False),
            )
            if len(self.rule_specs) > 32:
                self.rule_specs.clear()
            self.rule_specs[active] = found
        return found

    def _specs_of(self, annotation: Any, what: str, static_ok: bool) -> Any:
        if annotation is None:
            if static_ok:
                return None
        if static_ok and not _has_arrays(annotation):
            return None  # no array annotation anywhere in it: a static parameter
        if holds_pytree(annotation):
            raise TypeError(
                f"typed_shard_map: {what} of {self.name} is annotated {annotation!r}, which fixes no tree "
                "structure, so it has no in_specs/out_specs; annotate the structure (a pytree_dataclass, "
                "tuple[...]) or use jax.shard_map with make_partition_specs(value, like=...)"
            )
        each = homogeneous_item(annotation)
        if each is not None:  # list[X], dict[str, X]...: X's specs, laid out per value at each call
            item = self._specs_of(each[0], f"{what} (each item)", static_ok=False)
            if what == "the return value":
                if not isinstance(item, PartitionSpec):
                    raise TypeError(
                        f"typed_shard_map: the return value of {self.name} is annotated {annotation!r}: a "
                        "container of any length whose items are trees has no out_specs before the body "
                        "runs; return a tuple[...] of fixed length, a pytree dataclass, or a container "
                        "of arrays (list[f32[b'...']])")
                return item  # (one spec: shard_map applies it to every item, as a prefix)
            return Each(item, each[1])
        try:
            specs = derive_specs(annotation)
        except (TypeError, ValueError) as e:
            raise TypeError(f"typed_shard_map: {what} of {self.name}: {e}") from None
        leaves = jax.tree_util.tree_flatten_with_path(specs, is_leaf=lambda x: isinstance(x, PartitionSpec))[0]
        for path, spec in leaves:
            if isinstance(spec, PartitionSpec) and PartitionSpec.UNCONSTRAINED in tuple(spec):
                raise TypeError(
                    f"typed_shard_map: {what} of {self.name}{jax.tree_util.keystr(path)}: dim "
                    f"{tuple(spec).index(PartitionSpec.UNCONSTRAINED)} is UNCONSTRAINED ({spec}), but "
                    "shard_map splits every dim of its operands as its specs say: give the dim mesh "
                    "axes (or replicate it) in the kernel's annotation")
        if self.axis_names is not None:
            specs = jax.tree.map(self._manual_only, specs, is_leaf=lambda x: isinstance(x, PartitionSpec))
        return specs

    def _manual_only(self, spec: PartitionSpec) -> PartitionSpec:
        """Partial-manual shard_map specs name only the manual axes; the others stay in the
        annotation and are checked inside the body."""
        entries = []
        manual = self.axis_names or frozenset()
        for entry in spec:
            kept = tuple(a for a in entry_axes(entry) if a in manual)
            entries.append(axes_entry(kept))
        return PartitionSpec(*entries)

    def _make_wrapper(self) -> Callable:
        state = self
        body = self.body
        parameters = list(self.signature.parameters.values())

        @functools.wraps(self.f)
        def wrapper(*args, **kwargs):
            array_names = state.arrays
            if array_names is None:
                array_names = state._resolve()
            bound = state.signature.bind(*args, **kwargs)
            bound.apply_defaults()
            values = bound.arguments
            static = {n: v for n, v in values.items() if n not in array_names}
            check_static(static, state.name)
            staged = is_staged([values[n] for n in array_names])
            restore: list = []  # the body's result tree, where shard_map's is out_specs' (stacked)

            def run(*arrays):
                given = dict(static)
                given.update(zip(array_names, arrays))
                positional = [given.pop(p.name) for p in parameters
                              if p.kind is inspect.Parameter.POSITIONAL_ONLY]
                result = body(*positional, **given)
                result, treedef = conform_result(out_specs, result)
                returned(result, out_specs)  # before shard_map's own out_specs check
                restore.append(treedef)
                return result

            in_specs, out_specs = state.specs()
            in_specs = conform_specs(in_specs, [values[n] for n in array_names], array_names, state.name)
            mapped = _mapped_body(state, run, in_specs, array_names, staged)
            options = _shard_map_options(state, in_specs, out_specs)
            token = COMPILE_TIME_CHECKS.set(True)  # the body's checks are the ordinary kind
            try:
                out = jax.shard_map(mapped, **options)(*(values[n] for n in array_names))
            except (ValueError, TypeError, NotImplementedError) as e:
                bug = known_bug(e)
                if bug is None:
                    raise
                raise TypeCheckError(f"{in_kernel(state.name)}, {bug}") from e
            finally:
                COMPILE_TIME_CHECKS.reset(token)
            if restore and restore[-1] is not None:
                out = jax.tree.unflatten(restore[-1], jax.tree.leaves(out))
            # The global result is checked next, by ``checked``, still inside ``entry`` (whose
            # reset undoes this; the wrapper is only ever called there). shard_map lays it out
            # over the manual axes as out_specs say, and out_specs are this annotation: at trace
            # time only (dtype, sizes, Explicit axes), unless the kernel leaves Auto axes to XLA
            # (axis_names), whose layout of the result over them is XLA's choice: checked at
            # compile time like an argument's (inside the region JAX's inspection misreads it).
            COMPILE_TIME_CHECKS.set(_leaves_auto(state))
            return out

        setattr(wrapper, "__shardtypes_shard_map__", state)
        return wrapper


def _mapped_body(state: _TypedShardMap, run: Callable, in_specs: Any, array_names: list[str],
                 staged: bool) -> Callable:
    """The function ``jax.shard_map`` maps: ``run`` (the kernel's body on the local blocks),
    followed by the kernel pass where the body can be staged."""

    def mapped(*arrays):
        with tracking(state.name, state.check_vma is not False, staged):  # layouts follow values
            if not flows():
                return run(*arrays)
            manual = jax.sharding.get_abstract_mesh().manual_axes
            facts = in_facts(in_specs, arrays, array_names)
            try:
                return traced(state.name, run, arrays, facts, frozenset(manual), state.f)
            except _CONCRETE as e:
                if staged:
                    raise  # (under jit JAX cannot run it either: its own error says why)
                branching = e
        # An eager call whose body reads values in Python (`if x.sum() > 0:`): JAX runs an
        # eager shard_map's body op by op, so it runs here too, checked at its boundary and
        # by the side table, not by the pass (which needs the body staged).
        stepped_aside(state.name, state.f, branching)
        with tracking(state.name, state.check_vma is not False, staged):
            return run(*arrays)

    # JAX's own errors name the function it maps ("shard_map applied to the function ..."):
    # the user's kernel, not this wrapper.
    mapped.__name__ = getattr(state.f, "__name__", state.name)
    mapped.__qualname__ = getattr(state.f, "__qualname__", state.name)
    return mapped


def _shard_map_options(state: _TypedShardMap, in_specs: Any, out_specs: Any) -> dict:
    """The keyword arguments of the kernel's ``jax.shard_map``: its specs, and its mesh, axis
    names and ``check_vma`` where the decorator was given them (no mesh at all is an error)."""
    options: dict = {"in_specs": in_specs, "out_specs": out_specs}
    if state.mesh is not None:
        options["mesh"] = state.mesh
    elif jax.sharding.get_abstract_mesh().empty:
        raise no_mesh_error(f"typed_shard_map: calling {state.name}")
    if state.axis_names is not None:
        options["axis_names"] = set(state.axis_names)
    if state.check_vma is not None:
        options["check_vma"] = state.check_vma
    return options


_CONCRETE = (jax.errors.ConcretizationTypeError, jax.errors.TracerArrayConversionError,
             jax.errors.TracerIntegerConversionError)


_STEPPED_ASIDE: weakref.WeakSet = weakref.WeakSet()  # the kernels (functions) already warned of


def stepped_aside(kernel: str, f: Any, error: BaseException) -> None:
    """Says once per kernel that its eager body reads values in Python, so the pass cannot stage it."""
    try:
        if f in _STEPPED_ASIDE:
            return
        _STEPPED_ASIDE.add(f)
    except TypeError:  # (a callable that takes no weak reference: said each time)
        pass
    first = (str(error).strip().splitlines() or [type(error).__name__])[0]
    warnings.warn(
        f"typed_shard_map: the body of kernel {kernel}() reads the values of arrays in Python "
        f"({type(error).__name__}: {first[:160]}), which an eager call allows: it runs as jax.shard_map "
        "runs it, op by op, with its arguments and result checked against their annotations, but shardtypes' "
        "kernel pass, which needs the body staged, does not follow it (layouts and partial sums inside are "
        f"not checked; JAX {jax.__version__}). Under jax.jit, write the branch with jax.lax.cond or jnp.where.",
        KernelPassWarning, stacklevel=4)


def _leaves_auto(state: _TypedShardMap) -> bool:
    """Whether a partial-manual kernel leaves Auto mesh axes (of more than one device) to XLA."""
    if state.axis_names is None:
        return False
    mesh = state.mesh if state.mesh is not None else jax.sharding.get_abstract_mesh()
    return any(t == jax.sharding.AxisType.Auto and n > 1 and a not in state.axis_names
               for a, t, n in zip(mesh.axis_names, mesh.axis_types, mesh.axis_sizes))


def _has_arrays(annotation: Any) -> bool:
    """Whether an annotation holds a shardtypes array annotation or pytree dataclass anywhere:
    only a parameter without any is static."""
    if tree_info(annotation) is not None:
        return True
    return holds_shardtypes((annotation,))
