"""shardtypes annotations for a corpus kernel, made from its specs and the shapes it is called with.

Every array leaf of every argument and of the result gets a dim name of its own per dim
(``a0d0``, ``a1l2d0``, ``r0d1``), so no size constraint between arguments (or between an
argument and the result) is invented; a dim the layout splits gets ``/axis`` for each mesh axis
it is split over, in order (``P(('i', 'j'))`` gives ``a0d0/i/j``). The dtype is ``anydtype``,
or ``key`` for a typed PRNG key. Trees are mirrored as shardtypes documents them:
a tuple as ``tuple[...]``, a list or dict whose items are alike (the same specs and ranks) as
``list[X]`` or ``dict[str, X]`` with anonymous dims (``_/i _``), any other as a Python list (dict)
of annotations, which shardtypes refuses with the form to write instead.

The layout of an argument is the global layout the entry lays it out with (``arg_layouts``,
by default ``in_specs``); under ``axis_names`` it may name automatic axes too, and
``typed_shard_map`` keeps only the manual ones for ``jax.shard_map``. The result's layout is
``out_layouts`` (by default ``out_specs``).

A parameter whose spec is ``None`` (JAX's "not mapped") is left unannotated: a static parameter.
"""

from __future__ import annotations

import itertools
import linecache
from typing import Any, Callable, Sequence

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P

from shardtypes import anydtype, key

__all__ = ["annotations_for", "make_kernel", "spec_leaves", "broadcast_prefix"]

_COUNTER = itertools.count()


def is_spec(x: Any) -> bool:
    return isinstance(x, P)


def _is_spec_or_none(x: Any) -> bool:
    return x is None or isinstance(x, P)


def broadcast_prefix(prefix: Any, tree: Any) -> list:
    """The spec of each leaf of ``tree``, where ``prefix`` is a tree prefix of it whose leaves are
    PartitionSpecs or None (as JAX reads ``in_specs`` and ``out_specs``)."""
    out: list = []

    def go(p: Any, t: Any) -> None:
        if _is_spec_or_none(p):
            out.extend([p] * len(jax.tree.leaves(t)))
            return
        if isinstance(p, (tuple, list)):
            assert isinstance(t, (tuple, list)) and len(t) == len(p), (p, t)
            for a, b in zip(p, t):
                go(a, b)
            return
        if isinstance(p, dict):
            assert isinstance(t, dict) and set(p) == set(t), (p, t)
            for k in sorted(p):
                go(p[k], t[k])
            return
        raise TypeError(f"not a spec tree: {p!r}")

    go(prefix, tree)
    return out


def spec_leaves(spec_tree: Any) -> list:
    return jax.tree.leaves(spec_tree, is_leaf=_is_spec_or_none)


def _entry_axes(entry: Any) -> tuple[str, ...]:
    if entry is None:
        return ()
    if isinstance(entry, tuple):
        return tuple(entry)
    return (entry,)


def _leaf_annotation(prefix: str, shape: tuple, dtype: Any, spec: P | None) -> Any:
    """``anydtype[b'a0d0/i a0d1']`` for one array leaf. A spec longer than the value's rank gets
    as many dims as the spec has (the annotation says what the spec says; JAX refuses such
    kernels, and so must shardtypes)."""
    entries = tuple(spec) if spec is not None else ()
    rank = max(len(shape), len(entries))
    dims = []
    for d in range(rank):
        axes = _entry_axes(entries[d]) if d < len(entries) else ()
        dims.append("/".join(("_" if prefix == "_" else f"{prefix}d{d}", *axes)))  # ("_": anonymous)
    cls = key if jnp.issubdtype(dtype, jax.dtypes.prng_key) else anydtype
    return cls[" ".join(dims).encode()]


def _tree_annotation(prefix: str, tree: Any, specs: list, shapes: Callable[[Any], tuple]) -> Any:
    """The annotation tree for a value ``tree`` whose leaves' specs are ``specs`` (in leaf order)."""
    leaves = jax.tree.leaves(tree)
    if len(leaves) != len(specs):
        raise ValueError(f"{len(leaves)} leaves but {len(specs)} specs")
    single = not isinstance(tree, (tuple, list, dict))
    pos = [0]  # the next leaf's index

    def go(t: Any, anonymous: bool = False) -> Any:
        if isinstance(t, tuple) and not hasattr(t, "_fields"):
            return tuple[tuple(go(x, anonymous) for x in t)] if t else tuple[()]
        if isinstance(t, (list, dict)):
            return container(t, anonymous)
        j = pos[0]
        pos[0] += 1
        name = "_" if anonymous else prefix if single else f"{prefix}l{j}"
        shape, dtype = shapes(t)
        return _leaf_annotation(name, shape, dtype, specs[j])

    def container(t: Any, anonymous: bool) -> Any:
        """``list[X]`` (``dict[str, X]``) where every item has the same annotation with anonymous
        dims (shardtypes' form for a container of any length); else the literal, which
        shardtypes refuses with the form to write instead."""
        keys = sorted(t) if isinstance(t, dict) else range(len(t))
        start = pos[0]
        anon = [go(t[k], True) for k in keys]
        if anon and all(a == anon[0] for a in anon):
            return list[anon[0]] if isinstance(t, list) else dict[str, anon[0]]
        pos[0] = start
        out = [go(t[k], anonymous) for k in keys]
        return out if isinstance(t, list) else dict(zip(keys, out))

    return go(tree)


def _shape_dtype(x: Any) -> tuple[tuple, Any]:
    if hasattr(x, "shape") and hasattr(x, "dtype"):
        return tuple(x.shape), x.dtype
    arr = jnp.asarray(x)
    return tuple(arr.shape), arr.dtype


def annotations_for(args: Sequence[Any], arg_layouts: Sequence[Any], result: Any, out_layouts: Any
                    ) -> tuple[list[Any], Any]:
    """(one annotation per argument, None for a static one; the return annotation).

    ``args`` are the values the kernel is called with (arrays, tracers or ShapeDtypeStructs) and
    ``result`` the value it returns; ``arg_layouts[i]`` is a spec-tree prefix of ``args[i]``
    (None: static) and ``out_layouts`` one of ``result``."""
    params = []
    for i, (a, lay) in enumerate(zip(args, arg_layouts)):
        if all(s is None for s in spec_leaves(lay)):
            params.append(None)
            continue
        specs = broadcast_prefix(lay, a)
        params.append(_tree_annotation(f"a{i}", a, specs, _shape_dtype))
    specs = broadcast_prefix(out_layouts, result)
    ret = _tree_annotation("r", result, specs, _shape_dtype)
    return params, ret


def make_kernel(body: Callable, params: Sequence[Any], ret: Any, name: str = "kernel") -> Callable:
    """A function ``name(a0, a1, ...)`` calling ``body`` with the given annotations (None: left
    unannotated). It is compiled from source registered with ``linecache``, so that
    ``typechecked`` can instrument it like a function written in a file."""
    n = len(params)
    arglist = ", ".join(f"a{i}" for i in range(n))
    src = f"def {name}({arglist}):\n    return __corpus_body({arglist})\n"
    filename = f"<shardtypes corpus kernel {next(_COUNTER)}: {name}>"
    linecache.cache[filename] = (len(src), None, src.splitlines(True), filename)
    namespace: dict = {"__corpus_body": body, "__name__": "corpus_kernels"}
    exec(compile(src, filename, "exec"), namespace)
    fn = namespace[name]
    annotations = {f"a{i}": p for i, p in enumerate(params) if p is not None}
    annotations["return"] = ret
    fn.__annotations__ = annotations
    return fn
