"""What ``typed_shard_map`` checks of a kernel and its parameters before JAX sees them, so that a
kernel never fails with JAX's own error about shardtypes' input:

* a generator (or async) function cannot be a kernel: a kernel returns its arrays;
* a parameter annotated with a bare array type (``jax.Array``, ``numpy.ndarray``) gives no
  ``in_specs``: its annotation must say dtype, dims and sharding;
* an array passed to a parameter that takes static values (unannotated, or annotated with no
  array type) would be closed over by the mapped function, unchecked;
* a dataclass argument whose annotation is a stacked class (``Array['layers', Layer]``) is a
  ``Layer`` value: its ``in_specs`` are laid out in the value's own tree structure; a returned
  one is handed to ``shard_map`` in its ``out_specs``' structure and back (``conform_result``).
"""

from __future__ import annotations

import collections.abc
import inspect
from typing import Any

import jax
import numpy as np
from jax.sharding import PartitionSpec

from ..model import tuple_items

__all__ = ["Each", "check_kernel", "bare_array_annotation", "check_static", "conform_specs", "conform_result",
           "tuple_parameters", "as_tuples"]

_BARE = (jax.Array, np.ndarray)
_NAMES = {jax.Array: "jax.Array", np.ndarray: "numpy.ndarray"}


def check_kernel(f: Any, name: str) -> None:
    """A kernel must be a plain function that returns its arrays."""
    kind = ("a generator function" if inspect.isgeneratorfunction(f)
            else "an async generator function" if inspect.isasyncgenfunction(f)
            else "a coroutine function" if inspect.iscoroutinefunction(f) else None)
    if kind is not None:
        raise TypeError(f"typed_shard_map: {name} is {kind}; a kernel must return its arrays "
                        "(jax.shard_map traces it once and maps what it returns)")


def bare_array_annotation(annotation: Any, what: str, name: str) -> None:
    """A parameter annotated ``jax.Array`` (or ``numpy.ndarray``) alone: no layout to map it by."""
    if annotation in _BARE:
        raise TypeError(
            f"typed_shard_map: {what} of {name} is annotated {_NAMES[annotation]}, "
            "which says nothing of its dtype, dims or sharding, so no in_specs can come from it; "
            "annotate it with them, as f32[b'batch/d embed'] (or f32[jax.Array, b'batch/d embed'])"
        )


def check_static(static: dict, name: str) -> None:
    """Static parameters are closed over by the mapped function: an array there would enter the
    kernel unchecked (and on Explicit axes JAX refuses to close over it)."""
    for pname, value in static.items():
        if isinstance(value, jax.Array) or any(isinstance(v, jax.Array) for v in _leaves(value)):
            raise TypeError(
                f"typed_shard_map: argument {pname!r} of {name} is given an array, but its "
                "annotation has no array type in it, so it is a static parameter that the kernel "
                "would close over unchecked; annotate it with its dtype, dims and sharding "
                "(f32[b'batch/d embed'])"
            )


def _leaves(value: Any) -> list:
    if isinstance(value, (list, tuple, dict)) and value:
        try:
            return jax.tree.leaves(value)
        except Exception:
            return []
    return []


def _is_spec(x: Any) -> bool:
    return isinstance(x, PartitionSpec)


class Each:
    """The specs of a parameter annotated as a container of any length whose items share one
    annotation (``list[X]``, ``tuple[X, ...]``, ``Sequence[X]``, ``dict[str, X]``,
    ``Mapping[str, X]``): ``item`` is X's spec tree, laid out per value by ``conform_specs``."""

    __slots__ = ("item", "container")

    def __init__(self, item: Any, container: str) -> None:
        self.item, self.container = item, container

    def __repr__(self) -> str:
        return f"Each({self.item!r}, {self.container})"


def _expand(spec: Each, value: Any, pname: str, kernel: str) -> Any:
    """An ``Each`` laid out as ``value`` is: one item spec per element (per value of a mapping)."""
    if spec.container == "mapping":
        if not isinstance(value, collections.abc.Mapping):
            raise TypeError(f"typed_shard_map: argument {pname!r} of {kernel} is annotated as a mapping, "
                            f"but was given a {type(value).__name__}")
        return {k: spec.item for k in value}
    if not isinstance(value, (list, tuple)):
        raise TypeError(f"typed_shard_map: argument {pname!r} of {kernel} is annotated as a sequence, "
                        f"but was given a {type(value).__name__}")
    return type(value)(spec.item for _ in value) if type(value) in (list, tuple) else [spec.item for _ in value]


_CONFORMED: dict = {}  # (id(spec), value treedef) -> (spec, spec in the value's structure)


def conform_specs(specs: tuple, values: list, names: list, kernel: str) -> tuple:
    """``specs`` (one tree per array parameter), each in its value's tree structure where only
    the node types differ (a stacked class's specs for a value of the unstacked class: JAX's
    treedefs compare equal, but shard_map's prefix check compares node types)."""
    out = []
    for spec, value, pname in zip(specs, values, names):
        if isinstance(spec, Each):
            spec = _expand(spec, value, pname, kernel)
        if _is_spec(spec):
            out.append(spec)
            continue
        value_def = jax.tree.structure(value)
        count: int = getattr(value_def, "num_leaves")
        key = (id(spec), value_def)
        found = _CONFORMED.get(key)
        if found is None or found[0] is not spec:
            leaves = jax.tree.leaves(spec, is_leaf=_is_spec)
            if count != len(leaves):
                spec_def = jax.tree.structure(spec, is_leaf=_is_spec)
                raise TypeError(
                    f"typed_shard_map: argument {pname!r} of {kernel} has {count} "
                    f"array leaves ({value_def}), but its annotation has {len(leaves)} ({spec_def})"
                )
            if len(_CONFORMED) > 256:
                _CONFORMED.clear()
            found = _CONFORMED[key] = (spec, jax.tree.unflatten(value_def, leaves))
        out.append(found[1])
    return tuple(out)


def conform_result(out_specs: Any, result: Any) -> tuple[Any, Any]:
    """The body's ``result`` in ``out_specs``' tree structure, and the treedef to restore after
    ``shard_map`` (None where nothing changes): out_specs derived from a stacked class
    (``Array['layers', Layer]``) have that class's nodes where the value has ``Layer``'s, and
    shard_map's prefix check compares node types. Left as it is where the leaves do not match
    one to one (JAX then says what differs)."""
    if _is_spec(out_specs):
        return result, None
    leaves, value_def = jax.tree.flatten(result)
    spec_def = jax.tree.structure(out_specs, is_leaf=_is_spec)
    if getattr(spec_def, "num_leaves") != len(leaves) or str(spec_def) == str(value_def):
        return result, None
    return jax.tree.unflatten(spec_def, leaves), value_def


# A list given for a parameter annotated tuple[...]: JAX's in_specs and the trees of JAX's own
# examples hold lists ([(W1, b1), (W2, b2)], one pair per layer, each layer its own sizes, which
# list[X] cannot give: its items share X's names). The value is passed on as the tuple the
# annotation names (the body and its checks see a tuple), lists inside it as the annotation says.


def tuple_parameters(signature: inspect.Signature, hints: dict) -> tuple:
    """``(position or None, name, annotation)`` of each parameter annotated ``tuple[...]``;
    empty when there is none (the common case: nothing to do)."""
    found = []
    for position, p in enumerate(signature.parameters.values()):
        annotation = hints.get(p.name)
        if tuple_items(annotation, None) is not None:
            positional = p.kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
            found.append((position if positional else None, p.name, annotation))
    return tuple(found)


def _as_annotated(value: Any, annotation: Any) -> Any:
    """``value`` with each list where ``annotation`` has a ``tuple[...]`` of its length (or
    ``tuple[X, ...]``) made that tuple; anything else as it is (its check then says what differs)."""
    if not isinstance(value, (list, tuple)):
        return value
    items = tuple_items(annotation, len(value))
    if items is None:
        return value
    if len(items) != len(value):  # (the check says how many items the annotation wants)
        return tuple(value)
    converted = tuple(_as_annotated(v, a) for v, a in zip(value, items))
    if isinstance(value, tuple) and all(c is v for c, v in zip(converted, value)):
        return value
    return converted


def as_tuples(params: tuple, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """``args`` and ``kwargs`` with lists given for ``tuple[...]`` parameters made tuples."""
    new_args = list(args)
    for position, name, annotation in params:
        if position is not None and position < len(new_args):
            new_args[position] = _as_annotated(new_args[position], annotation)
        elif name in kwargs:
            kwargs = {**kwargs, name: _as_annotated(kwargs[name], annotation)}
    return tuple(new_args), kwargs
