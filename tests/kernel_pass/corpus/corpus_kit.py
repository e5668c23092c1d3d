"""The corpus' registry and the words its entries are written in.

``ENTRIES`` holds every entry (``add`` appends one and refuses a name twice); the source modules
(``from_shard_map_test``, ``from_shard_map_test_manual``, ``from_systematic``, ``from_tutorial``)
fill it when imported, and ``kernels`` imports them in that order. Here too: the inputs (small and
deterministic), the ``outer`` wrappers (how the source calls the mapped function), the probes of
what this JAX has, and the meshes the sources use.
"""

from __future__ import annotations

import functools
import math
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import PartitionSpec as P

from harness import Entry

ENTRIES: list[Entry] = []
T = "shard_map_test.py::ShardMapTest::"
MD = "shard_map.md: "


def add(name: str, source: str, mesh: tuple, axes: tuple, in_specs: tuple, out_specs: Any,
        body: Callable, args: Callable[[], tuple], **kw: Any) -> Entry:
    assert all(e.name != name for e in ENTRIES), name
    if "eager" in kw.get("modes", ()) and "eager_point" not in kw:
        kw["eager_point"] = "eager" in source.split("::")[-1]  # a test about eager execution
    entry = Entry(name=name, source=source, mesh=tuple(mesh), axes=tuple(axes), in_specs=tuple(in_specs),
                  out_specs=out_specs, body=body, make_args=args, **kw)
    ENTRIES.append(entry)
    return entry


# ---------------------------------------------------------------------------------------------
# Inputs, small and deterministic.

def ramp(*shape: int, dtype: Any = np.float32, scale: float = 1.0) -> np.ndarray:
    return (np.arange(math.prod(shape)).reshape(shape) * scale).astype(dtype)


def ints(*shape: int) -> np.ndarray:
    return ramp(*shape, dtype=np.int32)


def normal(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def keys(n: int, impl: str | None = None) -> jax.Array:
    root = jax.random.key(0, impl=impl) if impl else jax.random.key(0)
    return jax.random.split(root, n)


def tag(spec: P) -> str:
    """``P('x', ('y', 'z'))`` as ``x.y+z`` (for entry names); ``P()`` as ``rep``."""
    parts = ["+".join(e) if isinstance(e, tuple) else (e or "_") for e in spec]
    return ".".join(parts) if parts and any(p != "_" for p in parts) else "rep"


def vary(x: Any, axes: Any) -> Any:
    return lax.pcast(x, axes, to="varying")


# ---------------------------------------------------------------------------------------------
# How the source calls the mapped function (``outer``).

def total_of_outputs(out: Any) -> Any:
    leaves = [jnp.sum(x) for x in jax.tree.leaves(out) if jnp.issubdtype(x.dtype, jnp.inexact)]
    return functools.reduce(lambda a, b: a + b, leaves)


def grad_sum(argnums: Any = 0, pick: Callable | None = None) -> Callable:
    """``jax.grad`` of the sum of the outputs (of ``pick(outputs)``)."""
    def outer(f: Callable) -> Callable:
        return lambda *a: jax.grad(lambda *b: total_of_outputs(pick(f(*b)) if pick else f(*b)), argnums)(*a)
    return outer


def value_and_grad_sum(argnums: Any = 0) -> Callable:
    def outer(f: Callable) -> Callable:
        return lambda *a: jax.value_and_grad(lambda *b: total_of_outputs(f(*b)), argnums)(*a)
    return outer


def jvp_self(f: Callable) -> Callable:
    """``jax.jvp`` with the primals as tangents."""
    return lambda *a: jax.jvp(f, a, a)


def linearize_self(f: Callable) -> Callable:
    def g(*a: Any) -> Any:
        y, lin = jax.linearize(f, *a)
        return y, lin(*a)
    return g


def vjp_with(f: Callable) -> Callable:
    """``jax.vjp(f, x)[1](ct)``: called as ``(x, ct)``."""
    return lambda x, ct: jax.vjp(f, x)[1](ct)


def vmapped(**kw: Any) -> Callable:
    return lambda f: jax.vmap(f, **kw)


def remat(policy: Any = None) -> Callable:
    return lambda f: jax.checkpoint(f, policy=policy)


def compose(*outers: Callable) -> Callable:
    """``compose(a, b)(f) == a(b(f))``."""
    return lambda f: functools.reduce(lambda g, o: o(g), reversed(outers), f)


SAVE_ALL = jax.checkpoint_policies.everything_saveable


# ---------------------------------------------------------------------------------------------
# What this JAX has.

@functools.cache
def probe(what: str) -> str | None:
    mesh = jax.make_mesh((1,), ("q",), axis_types=(jax.sharding.AxisType.Auto,), devices=jax.devices()[:1])
    x = jax.ShapeDtypeStruct((2,), jnp.float32)
    try:
        if what == "invariant gather":
            f = lambda v: lax.all_gather(v, "q", tiled=True, to="invarying")  # noqa: E731
        elif what == "smap":
            return None if hasattr(jax, "smap") else "no jax.smap"
        else:
            raise ValueError(what)
        jax.eval_shape(jax.shard_map(f, mesh=mesh, in_specs=P("q"), out_specs=P()), x)
        return None
    except Exception as e:  # noqa: BLE001
        return f"JAX {jax.__version__} has no {what} ({type(e).__name__})"


def needs_invariant_gather() -> str | None:
    return probe("invariant gather")


def jax_at_least(*version: int) -> Callable[[], str | None]:
    """For a kernel that this JAX itself fails on (fixed in a later release than the oldest one
    shardtypes supports): skipped before ``version``."""
    def needs() -> str | None:
        have = tuple(int(p) for p in jax.__version__.split(".")[:len(version)])
        return None if have >= version else f"JAX {jax.__version__} itself fails on it (fine from {version})"
    return needs


XYZ = ((2, 2, 2), ("x", "y", "z"))
XY = ((2, 2), ("x", "y"))
IJ = ((2, 2), ("i", "j"))
X4 = ((4,), ("x",))
I4 = ((4,), ("i",))
X2 = ((2,), ("x",))
X8 = ((8,), ("x",))
