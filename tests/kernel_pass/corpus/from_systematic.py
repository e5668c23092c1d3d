"""Corpus entries from JAX's ``tests/shard_map_test.py``, ``ShardMapSystematicTest``: its function
specs drawn over its meshes, with this corpus' own chooser (jit, eager, grads, vmap).
"""

from __future__ import annotations

import functools
import itertools
import math
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec as P

from corpus_kit import (
    ENTRIES,
    add,
    grad_sum,
)
from harness import Entry

# For each function spec and mesh shape: block shapes the function accepts, in_specs drawn over
# the mesh axes, out_specs that name every axis an output may vary over (and maybe more), the
# global arguments ``arange(n) / n`` of the dilated shapes. Drawn with this corpus' own chooser.

_SYS = "shard_map_test.py::ShardMapSystematicTest::"
_MESH_SHAPES = [(1,), (1, 1), (1, 2), (2, 2), (2, 4), (4, 2)]


def _dot_ok(a: tuple, b: tuple) -> bool:
    return bool(a) and bool(b) and a[-1] == b[-2 if len(b) > 1 else 0]


_FUNS: dict[str, tuple[int, Callable, Callable, Callable | None]] = {
    # name: (inputs, function, which mesh axes each output may stay replicated over, valid block shapes)
    "id": (1, lambda x: x, lambda r: r, None),
    "flip": (2, lambda x, y: (y, x), lambda rx, ry: (ry, rx), None),
    "transpose": (1, lambda x: x.T, lambda r: r, None),
    "ravel": (1, lambda x: x.ravel(), lambda r: r, None),
    "dot": (2, jnp.dot, lambda r1, r2: r1 & r2, _dot_ok),
    "sin_dot_sin": (2, lambda x1, x2: jnp.sin(jnp.dot(jnp.sin(x1), x2)), lambda r1, r2: r1 & r2, _dot_ok),
    "relu": (1, lambda x: jax.nn.relu(x + 1) - 1, lambda r: r, None),
}


def _block_shapes() -> list[tuple]:
    shapes = []
    for rank in (1, 2, 3):
        for shape in itertools.permutations((1, 2, 3), rank):
            shapes.append(shape)
    return shapes


def _spec_over(rng: np.random.Generator, axes: list[str], rank: int, must: set[str] = frozenset(),
               may: bool = True) -> P:
    """A spec of ``rank`` entries naming every axis of ``must`` and, if ``may``, some others."""
    chosen = [a for a in axes if a in must or (may and rng.random() < 0.5)]
    if rank == 0:
        return P()
    entries: list[list[str]] = [[] for _ in range(rank)]
    for a in chosen:
        entries[int(rng.integers(rank))].append(a)
    return P(*(tuple(e) if len(e) > 1 else (e[0] if e else None) for e in entries))


def _named(spec: P) -> set[str]:
    out: set[str] = set()
    for e in spec:
        out.update(e if isinstance(e, tuple) else ((e,) if e else ()))
    return out


def _dilate(shape: tuple, spec: P, sizes: dict) -> tuple:
    out = list(shape)
    for i, e in enumerate(spec):
        for a in (e if isinstance(e, tuple) else ((e,) if e else ())):
            out[i] *= sizes[a]
    return tuple(out)


def _systematic(fun: str, mesh_shape: tuple, seed: int, extra: dict) -> None:
    n_in, f, out_rep, valid = _FUNS[fun]
    rng = np.random.default_rng(seed)
    axes = ["i", "j", "k", "l"][: len(mesh_shape)]
    sizes = dict(zip(axes, mesh_shape))
    shapes = _block_shapes()
    while True:  # draw until every output that varies over an axis has a dim to be split over it
        blocks = [shapes[int(rng.integers(len(shapes)))] for _ in range(n_in)]
        if valid is not None and not valid(*blocks):
            continue
        in_specs = tuple(_spec_over(rng, axes, len(b)) for b in blocks)
        reps = out_rep(*(set(axes) - _named(s) for s in in_specs))
        body_out = jax.eval_shape(f, *(jax.ShapeDtypeStruct(b, jnp.float32) for b in blocks))
        outs, out_reps = (body_out, reps) if isinstance(body_out, tuple) else ((body_out,), (reps,))
        if any(len(o.shape) == 0 and set(axes) - r for o, r in zip(outs, out_reps)):
            continue
        specs = tuple(_spec_over(rng, axes, len(o.shape), must=set(axes) - r) for o, r in zip(outs, out_reps))
        out_specs: Any = specs if isinstance(body_out, tuple) else specs[0]
        break
    globals_ = [_dilate(b, s, sizes) for b, s in zip(blocks, in_specs)]
    made = functools.partial(lambda gs: tuple((np.arange(math.prod(g)) / max(math.prod(g), 1))
                                              .astype(np.float32).reshape(g) for g in gs), globals_)
    tag = "x".join(map(str, mesh_shape))
    add(f"systematic/{fun}/{tag}{extra.pop('suffix', '')}", _SYS + extra.pop("which", "test_jit_against_ref"),
        mesh_shape, tuple(axes), in_specs, out_specs, f, made, **extra)


for _fi, _fun in enumerate(_FUNS):
    for _mi, _ms in enumerate(_MESH_SHAPES):
        _seed = 1000 + 10 * _fi + _mi
        _mode = ("eager",) if _mi == (_fi % len(_MESH_SHAPES)) else ("jit",)  # one eager draw per mesh shape
        _systematic(_fun, _ms, _seed, {"modes": _mode,
                                      "which": "test_jit_against_ref" if _mode == ("jit",) else "test_eager_against_ref"})

for _fi, _fun in enumerate(_FUNS):
    for _ms, _vma in (((2, 2), True), ((4, 2), False)):
        _systematic(_fun, _ms, 2000 + 10 * _fi + len(_ms) + int(_vma),
                    {"suffix": f"/grad_vma={_vma}", "which": "test_grads", "check_vma": _vma,
                     "outer": grad_sum(tuple(range(_FUNS[_fun][0])))})

for _fi, _fun in enumerate(_FUNS):
    _systematic(_fun, (2, 4), 3000 + _fi,
                {"suffix": "/vmap", "which": "test_vmap",
                 "outer": (lambda n: (lambda f: jax.vmap(f, in_axes=(0,) + (None,) * (n - 1))))(_FUNS[_fun][0])})


def _batched_args(entry: Entry) -> Callable[[], tuple]:
    """The vmap entries' arguments: the first one stacked 3 times (scaled by 1, 2, 3)."""
    base = entry.make_args

    def make() -> tuple:
        args = base()
        first = np.stack([args[0] * k for k in (1, 2, 3)])
        return (first, *args[1:])

    return make


for _k, _e in enumerate(ENTRIES):
    if _e.name.endswith("/vmap") and _e.name.startswith("systematic/"):
        ENTRIES[_k] = __import__("dataclasses").replace(_e, make_args=_batched_args(_e),
                                                        put=(P(None, *_e.in_specs[0]),) + tuple(_e.in_specs[1:]))
