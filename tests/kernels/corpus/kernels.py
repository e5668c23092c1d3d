"""The corpus: the shard_map kernels that JAX's own tests and tutorial check, written anew.

Sources (JAX jax-v0.11.0): ``tests/shard_map_test.py`` (the named tests of ``ShardMapTest`` and
``SdyIntegrationTest``, and the function specs of ``ShardMapSystematicTest`` over its meshes) and
``docs/notebooks/shard_map.md`` (the tutorial). Each entry computes what its source computes:
the same mesh, specs, ``check_vma``, ``axis_names`` and body, on small deterministic inputs. The
code is this corpus' own. Where the source closes over a value of its caller, the entry closes
over a constant; where it wraps the kernel (``jax.grad``, ``jax.vmap``, ``jax.jvp``,
``jax.remat``), so does ``outer``. Tests about what is not a shard_map kernel over arrays are
listed in ``NOT_INCLUDED`` with the reason.
"""

from __future__ import annotations

import functools
import itertools
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

def _total(out: Any) -> Any:
    leaves = [jnp.sum(x) for x in jax.tree.leaves(out) if jnp.issubdtype(x.dtype, jnp.inexact)]
    return functools.reduce(lambda a, b: a + b, leaves)


def grad_sum(argnums: Any = 0, pick: Callable | None = None) -> Callable:
    """``jax.grad`` of the sum of the outputs (of ``pick(outputs)``)."""
    def outer(f: Callable) -> Callable:
        return lambda *a: jax.grad(lambda *b: _total(pick(f(*b)) if pick else f(*b)), argnums)(*a)
    return outer


def value_and_grad_sum(argnums: Any = 0) -> Callable:
    def outer(f: Callable) -> Callable:
        return lambda *a: jax.value_and_grad(lambda *b: _total(f(*b)), argnums)(*a)
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
def _probe(what: str) -> str | None:
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
    return _probe("invariant gather")


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


# =============================================================================================
# shard_map_test.py :: ShardMapTest
# =============================================================================================

add("identity", T + "test_identity", *XYZ, (P("z", ("x", "y")),), P("z", ("x", "y")),
    lambda a: a, lambda: (ints(8, 8),))

add("all_gather", T + "test_all_gather", *XYZ, (P("z", ("x", "y")),), P("z", ("x", "y")),
    lambda a: (lax.all_gather(a, "z", axis=0, tiled=True), lax.all_gather(a, ("x", "y"), axis=-1, tiled=True)),
    lambda: (ints(8, 8),))

add("all_gather_invariant_basic", T + "test_all_gather_invariant_basic", *X4, (P("x"),), P(),
    lambda a: lax.all_gather(a, "x", tiled=True, to="invarying"), lambda: (ramp(8),),
    needs=needs_invariant_gather)
add("all_gather_invariant_basic/grad", T + "test_all_gather_invariant_basic", *X4, (P("x"),), P(),
    lambda a: lax.all_gather(a, "x", tiled=True, to="invarying"), lambda: (ramp(8),),
    outer=grad_sum(), needs=needs_invariant_gather)


def _gather_invariant_two(a):
    c = lax.all_gather(a, "z", axis=0, tiled=True, to="invarying")
    d = lax.all_gather(a, ("x", "y"), axis=-1, tiled=True, to="invarying")
    return c, d


add("all_gather_invariant_complex", T + "test_all_gather_invariant_complex", *XYZ, (P("z", ("x", "y")),),
    (P(None, ("x", "y")), P("z")), _gather_invariant_two, lambda: (ramp(8, 8),), needs=needs_invariant_gather)
add("all_gather_invariant_complex/grad", T + "test_all_gather_invariant_complex", *XYZ, (P("z", ("x", "y")),),
    (P(None, ("x", "y")), P("z")), _gather_invariant_two, lambda: (ramp(8, 8),),
    outer=grad_sum(pick=lambda o: o[0]), modes=("eager", "jit"), needs=needs_invariant_gather)

add("all_gather_with_axis_index_groups", T + "test_all_gather_with_axis_index_groups", *XYZ,
    (P("x", ("y", "z")),), P("x", ("y", "z")),
    lambda a: lax.all_gather(a, ("y", "z"), axis_index_groups=((0, 1), (2, 3)), axis=-1, tiled=True),
    lambda: (ints(8, 8),))

add("with_static_arg", T + "test_with_static_arg", *XYZ, (P("x", "y"), None), P("x", "y"),
    lambda x, shape: x + jnp.ones(shape, dtype=x.dtype), lambda: (ints(8, 8), (4, 4)))

add("matmul_reduce_scatter", T + "test_matmul_reduce_scatter", *XYZ, (P("z", "y"), P("y", None)),
    P(("z", "y"), None),
    lambda a, b: (lax.psum_scatter(a @ b, "y", scatter_dimension=0, tiled=True),
                  lax.psum_scatter(a @ b, ("z", "y"), scatter_dimension=0, tiled=True)),
    lambda: (ramp(8, 8, scale=0.1), ramp(8, 8, scale=0.01)))

add("reduce_scatter_with_axis_index_groups", T + "test_reduce_scatter_with_axis_index_groups", *XYZ,
    (P(None, ("x", "y", "z")),), P(None, ("x", "y", "z")),
    lambda a: lax.psum_scatter(a, ("x", "y", "z"), scatter_dimension=0,
                               axis_index_groups=((0, 2, 4, 6), (1, 3, 5, 7)), tiled=True),
    lambda: (ints(8, 8),))


def _ring(x, axis):
    n = lax.axis_size(axis)
    return lax.ppermute(x, axis, perm=[(j, (j + 1) % n) for j in range(n)])


add("collective_permute", T + "test_collective_permute", *X8, (P("x", None),), P("x", None),
    lambda a: _ring(a, "x"), lambda: (ints(8, 8),))
add("shardy_collective_permute", "shard_map_test.py::SdyIntegrationTest::test_shardy_collective_permute",
    *X2, (P("x", None),), P("x", None), lambda a: _ring(a, "x"), lambda: (ints(8, 8),))

add("collective_permute_with_multiple_axis_names", T + "test_collective_permute_with_multiple_axis_names",
    *XYZ, (P("x", ("y", "z")),), P("x", ("y", "z")),
    lambda a: (_ring(a, ("x", "y")), _ring(a, ("y", "z"))), lambda: (ints(4, 16),))

add("all_to_all_single_axis_name", T + "test_all_to_all_single_axis_name", *X8, (P("x", None),),
    P(None, "x"), lambda a: lax.all_to_all(a, "x", split_axis=1, concat_axis=1, tiled=True),
    lambda: (ints(8, 8),))
add("all_to_all_multiple_axis_names", T + "test_all_to_all_multiple_axis_names", (4, 2), ("x", "y"),
    (P(("x", "y"), None),), P(None, ("x", "y")),
    lambda a: lax.all_to_all(a, ("x", "y"), split_axis=1, concat_axis=1, tiled=True), lambda: (ints(8, 8),))

add("all_to_all_with_axis_index_groups", T + "test_all_to_all_with_axis_index_groups", *X4,
    (P("x", None),), P(None, "x"),
    lambda a: lax.all_to_all(a, "x", split_axis=1, concat_axis=0, axis_index_groups=((0, 1), (2, 3)),
                             tiled=True),
    lambda: (ints(4, 4),))

_a2a = lambda x: lax.all_to_all(x, "x", split_axis=1, concat_axis=0, tiled=True)  # noqa: E731
add("all_to_all_grad", T + "test_all_to_all_grad", *X4, (P("x", None),), P(None, "x"), _a2a,
    lambda: (ramp(8, 8),))
add("all_to_all_grad/grad", T + "test_all_to_all_grad", *X4, (P("x", None),), P(None, "x"), _a2a,
    lambda: (ramp(8, 8),), outer=lambda f: jax.grad(lambda x: f(x).sum() * 2))

_sincos = lambda x: jnp.sin(jnp.cos(x))  # noqa: E731
add("jvp_basic", T + "test_jvp_basic", *XY, (P("x", "y"),), P("x", "y"), _sincos,
    lambda: (ramp(4, 4),), outer=jvp_self, modes=("eager", "jit"))
add("linearize_basic", T + "test_linearize_basic", *XY, (P("x", "y"),), P("x", "y"), _sincos,
    lambda: (ramp(4, 4),), outer=linearize_self, modes=("eager",))
add("linearize_basic_repres", T + "test_linearize_basic_repres", *XY, (P("x"),), P("x"),
    lambda x: lax.sin(lax.cos(x)), lambda: (ramp(4),), outer=linearize_self, modes=("eager",))
add("linearize_basic_repres_jit", T + "test_linearize_basic_repres_jit", *XY, (P("x"),), P("x"),
    _sincos, lambda: (ramp(4),), outer=jvp_self, modes=("eager",))

add("replication_checker_eager/refused", T + "test_replication_checker_eager", *XY, (P("x", "y"),),
    P(None, "y"), lambda x: 2 * x, lambda: (ramp(8, 8),), modes=("eager",),
    jax_refuses=(ValueError, "statically inferred"))
add("replication_checker_eager/psum", T + "test_replication_checker_eager", *XY, (P("x", "y"),),
    P(None, "y"), lambda x: lax.psum(x, "x"), lambda: (ramp(8, 8),), modes=("eager",))
add("replication_checker_jit/refused", T + "test_replication_checker_jit", *XY, (P("x", "y"),),
    P(None, "y"), lambda x: x * 2, lambda: (ramp(8, 8),), jax_refuses=(ValueError, "statically inferred"))
add("replication_checker_jit/psum", T + "test_replication_checker_jit", *XY, (P("x", "y"),),
    P(None, "y"), lambda x: lax.psum(x, "x"), lambda: (ramp(8, 8),))

_Y_PROCESS = np.float32(3 * np.arange(8.0).sum())
add("process_env_traces", T + "test_process_env_traces", *X4, (P("x"),), P("x"),
    lambda x: 2 * x * _Y_PROCESS, lambda: (ramp(8),), outer=jvp_self, modes=("eager",),
    note="the caller's value y is a closed-over constant")


def _eager_control_flow(x):
    y = lax.psum(x, ("x", "y"))
    return x if y < 0 else -x


add("eager_control_flow", T + "test_eager_control_flow", *XY, (P("x", "y"),), P("x", "y"),
    _eager_control_flow, lambda: (ramp(2, 2),), modes=("eager",))

add("outer_jit_detects_shard_map_mesh", T + "test_outer_jit_detects_shard_map_mesh", *XY, (P(),), P("x"),
    lambda x: x.reshape(1, *x.shape), lambda: (np.float32(2.0),))

for _suffix, _kw in [("", {}), ("_axis_name", {"axis_name": "i"}), ("_axis_name_reuse_mesh_name", {"axis_name": "x"})]:
    add(f"vmap_basic{_suffix}", T + f"test_vmap_basic{_suffix}", *XY, (P("y"),), P("y"), lambda x: 2.0 * x,
        lambda: (ramp(8, 8),), outer=vmapped(**_kw), put=(P(None, "y"),), modes=("eager",))

add("rank_errors/out", T + "test_rank_errors", *XY, (), {"hi": P("x")}, lambda: {"hi": [jnp.float32(3.0)]},
    lambda: (), modes=("eager", "jit"), jax_refuses=(ValueError, "which has length 1"))
add("rank_errors/in_scalar", T + "test_rank_errors", *XY, (P(None),), (), lambda x: (),
    lambda: (np.float32(3.0),), modes=("eager",), put=(P(),),
    jax_refuses=(ValueError, r"consider using an in_specs entry of `P\(\)`"))

_reverse_ad = lambda x, y: jnp.sin(x) + 3 + jnp.tan(2.0) * jnp.cos(x) + y  # noqa: E731
add("reverse_mode_ad", T + "test_reverse_mode_ad", *XY, (P("x"), P(None)), P("x"), _reverse_ad,
    lambda: (ramp(8, scale=0.1), ramp(4, scale=0.1)))
add("reverse_mode_ad/grad", T + "test_reverse_mode_ad", *XY, (P("x"), P(None)), P("x"), _reverse_ad,
    lambda: (ramp(8, scale=0.1), ramp(4, scale=0.1)), outer=grad_sum((0, 1)))
add("reverse_mode_ad/jvp", T + "test_reverse_mode_ad", *XY, (P("x"), P(None)), P("x"), _reverse_ad,
    lambda: (ramp(8, scale=0.1), ramp(4, scale=0.1)), outer=jvp_self)

add("post_process", T + "test_post_process", *XY, (P("x"), P()), P("x"),
    lambda y, x: jnp.sin(y) * jnp.sin(x).sum(), lambda: (ramp(8), ramp(8)), outer=linearize_self,
    modes=("eager",), note="the caller's x, closed over in the source, is a replicated argument")

for _jit in (False, True):
    _f = (lambda: lax.axis_index("x")[None])  # noqa: E731
    add(f"axis_index_basic/jit={_jit}", T + "test_axis_index_basic", *X4, (), P("x"),
        jax.jit(_f) if _jit else _f, lambda: (), modes=("eager",))


@jax.custom_vjp
def _tan_psum_fwd(x):
    return jnp.tan(x)


_tan_psum_fwd.defvjp(lambda x: (lax.psum(x, "x"), (x,)), lambda res, g: (jnp.cos(res[0]) * g,),
                     optimize_remat=True)
add("optimize_remat", T + "test_optimize_remat", *X4, (P(),), P(),
    lambda x: jax.checkpoint(_tan_psum_fwd)(x) ** 2, lambda: (ramp(4),), outer=grad_sum(), modes=("eager",))

_sinsin = lambda x: jnp.sin(jnp.sin(x))  # noqa: E731
add("remat_basic", T + "test_remat_basic", *X4, (P("x"),), P("x"), _sinsin, lambda: (ramp(4),),
    outer=compose(grad_sum(), remat()), modes=("eager",))
add("remat_basic/everything_saveable", T + "test_remat_basic", *X4, (P("x"),), P("x"), _sinsin,
    lambda: (ramp(4),), outer=compose(grad_sum(), remat(SAVE_ALL)), modes=("eager",))
add("shmap_of_remat_basic", T + "test_shmap_of_remat_basic", *X4, (P("x"),), P("x"),
    jax.checkpoint(jnp.sin, policy=SAVE_ALL), lambda: (ramp(4),), outer=grad_sum(), modes=("eager",))
add("remat_scalar_residuals", T + "test_remat_scalar_residuals", *X4, (P("x"),), P("x"),
    lambda x: jnp.sin(jnp.sin(jnp.sin(x.sum())))[None], lambda: (ramp(8),),
    outer=compose(grad_sum(), remat(SAVE_ALL)), modes=("eager",))
add("collectives_not_saved", T + "test_collectives_not_saved", *X4, (P("x"),), P("x"),
    lambda x: lax.all_gather(x, "x") * lax.all_gather(x, "x"), lambda: (np.ones(4, np.float32),),
    outer=compose(grad_sum(), remat()))

add("multiple_result_primitive_with_none_sharding", T + "test_multiple_result_primitive_with_none_sharding",
    (2,), ("i",), (None,), P("i"), lambda x: jnp.split(x.squeeze(), 2), lambda: (ints(2, 10),),
    modes=("eager",))

add("vmap_spmd_axis_name", T + "test_vmap_spmd_axis_name", *XY, (P("x"),), P("x"), lambda x: x,
    lambda: (ints(4, 4),), outer=vmapped(spmd_axis_name="y"), put=(P("y", "x"),))
add("vmap_explicit_mesh_axis", T + "test_vmap_explicit_mesh_axis", (1, 2, 2), ("z", "x", "y"), (P("y"),),
    P("y"), lambda x: x, lambda: (ints(4, 4),), outer=vmapped(), put=(P(("z", "x"), "y"),))
add("vmap_explicit_mesh_axis_single_axis", T + "test_vmap_explicit_mesh_axis_single_axis", (2, 2),
    ("data", "model"), (P("model"),), P("model"), lambda x: x, lambda: (ints(4, 4),), outer=vmapped(),
    put=(P("data", "model"),))
add("vmap_explicit_mesh_axis_error/axis_names", T + "test_vmap_explicit_mesh_axis_error", *XY, (P("x"),),
    P("x"), lambda x: x, lambda: (ints(4, 4),), axis_names=frozenset({"x", "y"}), outer=vmapped(),
    put=(P("x", "y"),), kinds=("explicit",), jax_refuses=(ValueError, "requires axis_names.*subset of"))
add("vmap_of_grad_spmd_axis_name", T + "test_vmap_of_grad_spmd_axis_name", *XY, (P("y"),), P(),
    lambda x: jnp.sin(jnp.sum(x)), lambda: (ramp(4, 4),), check_vma=False,
    outer=lambda f: jax.vmap(jax.grad(f), spmd_axis_name="x"), put=(P("x", "y"),), modes=("eager",))
add("vmap_spmd_axis_name_pair", T + "test_vmap_spmd_axis_name_pair", *XY, (P(),), P(), lambda x: x,
    lambda: (ints(4, 4),), outer=vmapped(spmd_axis_name=("x", "y")), put=(P(("x", "y")),))

add("shard_map_abstract_mesh", T + "test_shard_map_abstract_mesh", *XY, (P("x"),), P("x"), lambda x: x,
    lambda: (ints(8, 2),), abstract_mesh=True, modes=("eager", "jit"))


def _host_kernel(arr):
    return arr + 1, arr * 2.0


def _per_shard_callback(x):
    spec = jax.ShapeDtypeStruct(x.shape, x.dtype)
    return jax.pure_callback(_host_kernel, (spec, spec), x)


add("pure_callback_return_multiple_arrays", T + "test_pure_callback_return_multiple_arrays", *X2,
    (P("x"),), (P("x"), P("x")), _per_shard_callback, lambda: (ramp(16, 2),), modes=("eager",))

_x_and_psum = lambda x: (x, lax.psum(x, axis_name="x"))  # noqa: E731
add("psum_transpose_non_zero_cts", T + "test_psum_transpose_non_zero_cts", *X8, (P("x"),), (P("x"), P()),
    _x_and_psum, lambda: (ramp(16),), modes=("eager",))
add("psum_transpose_non_zero_cts/grad", T + "test_psum_transpose_non_zero_cts", *X8, (P("x"),),
    (P("x"), P()), _x_and_psum, lambda: (ramp(16),), outer=grad_sum(pick=lambda o: o[0]),
    modes=("eager", "jit"))

add("partial_auto_axis_index_eager", T + "test_partial_auto_axis_index_eager", (2, 2, 1), ("i", "j", "k"),
    (), P("i"), lambda: lax.axis_index("i").reshape((1,)), lambda: (), axis_names=frozenset({"i"}),
    check_vma=False, modes=("eager", "jit"))


def _scan_axis_index(_):
    _, idx = lax.scan(lambda c, __: (c, lax.axis_index("i")), None, None, length=1)
    return idx


add("partial_eval_custom_axis_env", T + "test_partial_eval_custom_axis_env", (8,), ("i",), (P("i"),),
    P("i"), _scan_axis_index, lambda: (ramp(16),))

add("prngkeyarray_eager", T + "test_prngkeyarray_eager", *X4, (P("x", None),), P("x", None),
    lambda k: jax.random.randint(k[0], shape=(1, 16), minval=0, maxval=16, dtype=jnp.int32),
    lambda: (jax.random.split(jax.random.PRNGKey(0), 4),), modes=("eager",), slow=True,
    note="raw uint32 keys (jax.random.PRNGKey)")

for _impl in ("threefry2x32", "rbg", "unsafe_rbg"):
    add(f"sharded_random_bits/{_impl}", T + "test_sharded_random_bits", *X4, (P("x"),), P("x"),
        lambda k: jax.random.bits(k[0], shape=(4,), dtype=jnp.uint8),
        functools.partial(lambda impl: (keys(4, impl),), _impl), modes=("eager",))

add("vma_out_specs_error_check", T + "test_vma_out_specs_error_check", *XYZ, (P("x", "y", "z"),), P("x"),
    lambda x: x * 2, lambda: (ints(4, 2, 2),), modes=("eager",),
    jax_refuses=(ValueError, r"out_specs is P\('x',\) which implies"))
add("functools_partial_rank_error", T + "test_functools_partial_rank_error", *X4, (P("x", None),), P("x"),
    functools.partial(lambda x: x), lambda: (ints(4),), modes=("eager",), put=(P("x"),),
    jax_refuses=(ValueError, ""))

add("in_specs_none_error/none", T + "test_in_specs_none_error", *X4, (None,), P(), lambda x: x,
    lambda: (3.0,), modes=("eager",))
add("in_specs_none_error/P()", T + "test_in_specs_none_error", *X4, (P(),), P(), lambda x: x,
    lambda: (np.float32(3.0),), modes=("eager",))


# scan / while / cond / switch replication rules ------------------------------------------------

def _scan_rotate(x, y, z):
    x, y, z = x.sum(), y.sum(), z.sum()

    def body(c, _):
        c, *cs = c
        return (*cs, c), None

    x = vary(x, ("x", "y"))
    y = vary(y, "y")
    out, _ = lax.scan(body, (x, y, z), None, length=3)
    return [jnp.expand_dims(a, 0) for a in out]


def _scan_keep(x, y, z):
    x, y, z = x.sum(), y.sum(), z.sum()
    out, _ = lax.scan(lambda c, _: (c, None), (x, y, z), None, length=1)
    return [jnp.expand_dims(a, 0) for a in out]


def _while_rotate(x, y, z):
    x, y, z = x.sum(), y.sum(), z.sum()

    def body(c):
        i, c, *cs = c
        return (i + 1, *cs, c)

    x = vary(x, ("x", "y"))
    y = vary(y, "y")
    _, *out = lax.while_loop(lambda c: c[0] < 5, body, (0, x, y, z))
    return [jnp.expand_dims(a, 0) for a in out]


def _while_keep(x, y, z):
    x, y, z = x.sum(), y.sum(), z.sum()

    def body(c):
        i, *cs = c
        return (i + 1, *cs)

    _, *out = lax.while_loop(lambda c: c[0] < 1, body, (0, x, y, z))
    return [jnp.expand_dims(a, 0) for a in out]


_REP_IN = (P(None), P("x"), P(("x", "y")))
_rep_args = lambda: (ints(4), ints(4), ints(4))  # noqa: E731
_REQ = (ValueError, "require replication")
for _loop, _rot, _keep in (("scan", _scan_rotate, _scan_keep), ("while", _while_rotate, _while_keep)):
    _src = T + f"test_{_loop}_rep_rule"
    add(f"{_loop}_rep_rule/rotate", _src, *XY, _REP_IN, P(("x", "y")), _rot, _rep_args, modes=("eager",))
    for _o in (P("x"), P("y"), P(None)):
        add(f"{_loop}_rep_rule/rotate_out_{tag(_o)}", _src, *XY, _REP_IN, _o, _rot, _rep_args, modes=("eager",),
            jax_refuses=_REQ)
    add(f"{_loop}_rep_rule/keep", _src, *XY, _REP_IN, [P(None), P("x"), P(("x", "y"))], _keep, _rep_args,
        modes=("eager",))
    add(f"{_loop}_rep_rule/keep_wrong", _src, *XY, _REP_IN, [P(None), P(None), P(("x", "y"))], _keep,
        _rep_args, modes=("eager",), jax_refuses=_REQ)

_cond_src = T + "test_cond_rep_rule"
_cond_plus = lambda x, y: lax.cond(True, lambda x, y: x, lambda x, y: x + 1, x, y)  # noqa: E731
_cond_pcast = lambda x, y: lax.cond(True, lambda x, y: vary(x, "y"), lambda x, y: vary(y, "x"), x, y)  # noqa: E731
_cond_x = lambda x, y: lax.cond(jnp.any(x > 0), lambda x, y: x, lambda x, y: x + 1, x, y)  # noqa: E731
_cond_y = lambda x, y: lax.cond(jnp.any(y > 0), lambda x, y: x, lambda x, y: x + 1, x, y)  # noqa: E731
_two = lambda: (ints(4), ints(4))  # noqa: E731
for _name, _body, _ok, _bad in (("const_pred", _cond_plus, P("x"), P(None)),
                                 ("pcast_branches", _cond_pcast, P(("x", "y")), P("x")),
                                 ("pred_of_x", _cond_x, P("x"), P(None))):
    add(f"cond_rep_rule/{_name}", _cond_src, *XY, (P("x"), P("y")), _ok, _body, _two, modes=("eager",))
    add(f"cond_rep_rule/{_name}_out_{tag(_bad)}", _cond_src, *XY, (P("x"), P("y")), _bad, _body, _two,
        modes=("eager",), jax_refuses=_REQ)
add("cond_rep_rule/pred_of_y", _cond_src, *XY, (P("x"), P("y")), P(("x", "y")), _cond_y, _two, modes=("eager",))
add("cond_rep_rule/pred_of_y_out_x", _cond_src, *XY, (P("x"), P("y")), P("x"), _cond_y, _two, modes=("eager",),
    note="JAX accepts: the predicate varies over y, the value returned replicated over y")
add("cond_rep_rule/any_reshape", _cond_src, *X2, (P("x"),), P("x"),
    lambda a: jnp.reshape(lax.cond(jnp.any(a), lambda: 1, lambda: 0), a.shape),
    lambda: (np.array([True, False]),), modes=("eager",))

add("switch_rep_rule", T + "test_switch_rep_rule", *XY, (P(), P("x"), P("y")), P("x"),
    lambda n, x, y: lax.switch(n, [lambda x, _: x, lambda x, _: x + 1, lambda x, _: x + 2], x, y),
    lambda: (np.int32(1), ints(4), ints(4)), modes=("eager",))


@jax.custom_jvp
def _twice_jvp3(x):
    return 2.0 * x


_twice_jvp3.defjvp(lambda p, t: (_twice_jvp3(p[0]), 3.0 * t[0]))


@jax.custom_vjp
def _twice_vjp3(x):
    return 2.0 * x


_twice_vjp3.defvjp(lambda x: (_twice_vjp3(x), None), lambda _, g: (3.0 * g,))

add("eager_custom_jvp_basic", T + "test_eager_custom_jvp_basic", *X4, (P("x"),), P("x"), _twice_jvp3,
    lambda: (ramp(4),), outer=value_and_grad_sum(), modes=("eager",))
add("eager_custom_vjp_basic", T + "test_eager_custom_vjp_basic", *X4, (P("x"),), P("x"), _twice_vjp3,
    lambda: (ramp(4),), outer=value_and_grad_sum(), modes=("eager",))


def _three_indices():
    return (lax.axis_index("i")[None, None], lax.axis_index("j")[None, None],
            lax.axis_index(("i", "j"))[None, None])


for _jit in (False, True):
    add(f"axis_index_twoaxes/jit={_jit}", T + "test_axis_index_twoaxes", (4, 2), ("i", "j"), (), P("i", "j"),
        jax.jit(_three_indices) if _jit else _three_indices, lambda: (), modes=("eager",))


def _axis_index_eager():
    val = lax.psum(lax.axis_index("x"), "x")
    return 1.0 if val > 0 else -1.0


add("axis_index_eager", T + "test_axis_index_eager", *X4, (), P(), _axis_index_eager, lambda: (),
    modes=("eager",))

add("jaxpr_shardings_with_no_outputs/iota", T + "test_jaxpr_shardings_with_no_outputs", *I4, (), P("i"),
    lambda: lax.iota(jnp.dtype("int32"), 4), lambda: ())
add("jaxpr_shardings_with_no_outputs/arange", T + "test_jaxpr_shardings_with_no_outputs", *I4, (P("i"),),
    P("i"), lambda a: jnp.arange(a.shape[0]) + a, lambda: (ints(32),), modes=("eager",))

add("device_put", T + "test_device_put", *I4, (P("i"),), P("i"), lambda x: x + jax.device_put(1),
    lambda: (ramp(32),), modes=("eager", "jit"))
add("device_put/to_device/eager", T + "test_device_put", *I4, (P("i"),), P("i"),
    lambda x: x + jax.device_put(1, jax.devices()[0]), lambda: (ramp(32),), modes=("eager",),
    eager_point=True, jax_refuses=(ValueError, "got device"))
add("device_put/to_device/jit", T + "test_device_put", *I4, (P("i"),), P("i"),
    lambda x: x + jax.device_put(1, jax.devices()[0]), lambda: (ramp(32),))

add("key_array_with_replicated_last_tile_dim", T + "test_key_array_with_replicated_last_tile_dim", (2, 4),
    ("i", "j"), (P("i"),), P("i"), lambda rng: jnp.array([jax.random.normal(rng[0])]), lambda: (keys(4),),
    check_vma=False)

add("returned_out_sharding", T + "test_returned_out_sharding", (1, 2), ("x", "y"), (P("x", "y"),),
    P("x", "y"), lambda x: x, lambda: (np.zeros((2, 2), np.float32),), modes=("eager",))

_DCE_X = normal(4, 4, seed=1) * 0.5
add("dce", T + "test_dce", (4, 2), ("i", "j"), (P("i", "j"), P(None, "i")),
    (P(None, None), P(None, "i"), P("i", "j")),
    lambda y, z: (jnp.sin(_DCE_X), jnp.cos(z), jnp.tan(y)),
    lambda: (normal(8, 8, seed=2) * 0.5, normal(16, 16, seed=3)), note="the caller's x is a closed-over constant")

_Y3 = np.array([3.0], np.float32)
add("sharding_metadata_in_hlo_attrs", T + "test_sharding_metadata_in_hlo_attrs", (8,), ("i",), (P("i"),),
    P("i"), lambda x: jnp.cos(x * _Y3), lambda: (np.sin(ramp(8)),))


@jax.custom_jvp
def _twice_jvp2(x):
    return 2.0 * x


_twice_jvp2.defjvp(lambda p, t: (_twice_jvp2(p[0]), 2.0 * t[0]))


@jax.custom_vjp
def _twice_vjp2(x):
    return 2.0 * x


_twice_vjp2.defvjp(lambda x: (_twice_vjp2(x), None), lambda _, g: (2.0 * g,))


@jax.custom_vjp
def _twice_vjp_ones(x):
    return 2.0 * x


_twice_vjp_ones.defvjp(lambda x: (_twice_vjp_ones(x), None), lambda _, g: (jnp.ones_like(g),))

add("rewrite_process_custom_jvp_call", T + "test_rewrite_process_custom_jvp_call", *X4, (P("x"),), P("x"),
    lambda x: _twice_jvp2(x) * x, lambda: (ramp(4),), modes=("eager", "jit"))
add("rewrite_process_custom_jvp_call/jvp", T + "test_rewrite_process_custom_jvp_call", *X4, (P("x"),),
    P("x"), lambda x: _twice_jvp2(x) * x, lambda: (ramp(4),), outer=jvp_self, modes=("eager", "jit"))
add("rewrite_process_custom_vjp_call", T + "test_rewrite_process_custom_vjp_call", *X4, (P("x"),), P("x"),
    lambda x: _twice_vjp2(x) * x, lambda: (ramp(4),), outer=value_and_grad_sum(), modes=("eager", "jit"))
add("rewrite_process_custom_vjp_call_match_more_replicated",
    T + "test_rewrite_process_custom_vjp_call_match_more_replicated", *X4, (P("x"),), P("x"),
    lambda x: _twice_vjp_ones(x) * x, lambda: (ramp(4),), outer=value_and_grad_sum(), modes=("eager", "jit"))
add("same_pspec_eager_shard_map", T + "test_same_pspec_eager_shard_map", (1, 4, 1), ("data", "seq", "model"),
    (P("data", "seq", "model"),), P("data", "seq", "model"), lambda x: x * x + 2,
    lambda: (np.ones((2, 16, 4), np.float32),), modes=("eager",))
add("rewrite_custom_vjp_call_jaxpr", T + "test_rewrite_custom_vjp_call_jaxpr", *X4, (P("x"),), P("x"),
    lambda x: lax.scan(lambda c, _: (_twice_vjp2(c), None), x, None, length=1)[0] * x, lambda: (ramp(4),),
    outer=value_and_grad_sum(), modes=("eager", "jit"))

add("transpose_identity", T + "test_transpose_identity", *X4, (P(),), P(), lambda x: x,
    lambda: (np.float32(1.0), np.float32(1.0)), outer=vjp_with, put=(P(), P()), modes=("eager",))
add("transpose_identity/jit_body", T + "test_transpose_identity", *X4, (P(),), P(),
    lambda x: jax.jit(lambda x: 1.0 * x)(x), lambda: (np.float32(1.0), np.float32(1.0)), outer=vjp_with,
    put=(P(), P()), modes=("eager",))
add("fanout_specs_transpose_to_psum", T + "test_fanout_specs_transpose_to_psum", *X4, (P(),), P("x"),
    lambda x: x, lambda: (ramp(1), ramp(4)), outer=vjp_with, put=(P(), P("x")), modes=("eager",))
add("fanin_psum_transposes_to_fanout", T + "test_fanin_psum_transposes_to_fanout", *X4, (P("x"),), P(),
    lambda x: lax.psum(x, "x"), lambda: (ramp(4), np.array([1.0], np.float32)), outer=vjp_with,
    put=(P("x"), P()), modes=("eager",))
add("psum_with_implicit_fanout_self_transposes", T + "test_psum_with_implicit_fanout_self_transposes", *X4,
    (P("x"),), P("x"), lambda x: lax.psum(x, "x"), lambda: (ramp(4), ramp(4)), outer=vjp_with,
    put=(P("x"), P("x")), modes=("eager",))

add("pvary", T + "test_pvary", *X4, (P(),), P("x"), lambda x: vary(x, "x"), lambda: (ramp(8),),
    modes=("eager",))
add("pvary/grad", T + "test_pvary", *X4, (P(),), P("x"), lambda x: vary(x, "x"), lambda: (ramp(8),),
    outer=grad_sum(), modes=("eager",))
add("rewrite_binops", T + "test_rewrite_binops", *X4, (P(), P("x")), P("x"), lambda x, y: x * y,
    lambda: (ramp(1), ramp(4)))
add("rewrite_scan", T + "test_rewrite_scan", *X4, (P("x"),), P("x"),
    lambda x: lax.scan(lambda c, _: (vary(lax.psum(c, "x"), "x"), None), x, None, length=2)[0],
    lambda: (ramp(4),))

add("check_rep_false_grads", T + "test_check_rep_false_grads", (4,), ("heads",),
    (P("heads", None), P(None), P(None)), P("heads", None), lambda q, k, v: q * k[None, :] + v[None, :],
    lambda: (ramp(4, 8), ramp(8), ramp(8)), check_vma=False, outer=grad_sum((0, 1, 2)), modes=("eager",))

add("axis_env_extension_regression", T + "test_axis_env_extension_regression", *X8, (P("x"),), P("x"),
    lambda x: jnp.exp(x) + lax.axis_index("x").astype(x.dtype), lambda: (ramp(8, scale=0.1),),
    check_vma=False, outer=compose(grad_sum(), remat(lambda *a, **k: True)))

for _remat in (False, True):
    add(f"res_forwarding_optimization/remat={_remat}", T + "test_res_forwarding_optimization", *I4, (P("i"),),
        P("i"), lax.exp, lambda: (ramp(16, scale=0.1),),
        outer=compose(grad_sum(), remat(SAVE_ALL)) if _remat else grad_sum(), modes=("eager", "jit"))
add("res_forwarding_optimization_2", T + "test_res_forwarding_optimization_2", *I4, (P("i"),), P("i"),
    lambda x: (lax.exp(x), lax.exp(x)), lambda: (ramp(16, scale=0.1),),
    outer=lambda f: jax.grad(jax.checkpoint(lambda x: f(x)[1].sum(), policy=SAVE_ALL)), modes=("eager",),
    needs=jax_at_least(0, 10))
_res_complex = lambda x: (lax.exp(x.sum()) + x, lax.exp(x))  # noqa: E731
add("res_forwarding_optimization_complex", T + "test_res_forwarding_optimization_complex", *I4, (P("i"),),
    P("i"), _res_complex, lambda: (ramp(16, scale=0.01),), modes=("eager", "jit"))
add("res_forwarding_optimization_complex/grad", T + "test_res_forwarding_optimization_complex", *I4,
    (P("i"),), P("i"), _res_complex, lambda: (ramp(16, scale=0.01),),
    outer=lambda f: jax.grad(lambda x: sum(f(x)).sum()), modes=("eager", "jit"))

_w_psum = lambda w, x: lax.psum(((w * x) ** 2).sum(), "i")  # noqa: E731
add("check_rep_failure_inside_rule", T + "test_check_rep_failure_inside_rule", *I4, (P(), P("i")), P(),
    _w_psum, lambda: (np.float32(3.0), ramp(8)), outer=grad_sum(0), modes=("eager", "jit"))

_dot_conv = functools.partial(lax.conv_general_dilated, window_strides=(), padding="VALID",
                              dimension_numbers=("NC", "IO", "NC"))
add("conv_general_dilated", T + "test_conv_general_dilated", *I4, (P(None, "i"), P("i", None)),
    P(None, None), lambda x, y: lax.psum(_dot_conv(x, y), "i"),
    lambda: (normal(8, 16, seed=4), normal(16, 4, seed=5)), modes=("eager",))
add("cumsum", T + "test_cumsum", *I4, (P("i"),), P("i"), jnp.cumsum, lambda: (ramp(8),), modes=("eager",))
add("custom_jvp_inside_jit", T + "test_custom_jvp_inside_jit", (4,), ("batch",), (P("batch"),), P("batch"),
    jax.jit(jax.nn.relu), lambda: (ramp(16) - 8,), modes=("eager",))
add("random_normal_rules", T + "test_random_normal_rules", *I4, (P("i"),), P("i"),
    lambda k: jax.random.normal(k[0], (1,)), lambda: (keys(4),), modes=("eager",))
add("erf_rules", T + "test_erf_rules", *I4, (P("i"),), P("i"), lax.erf, lambda: (ramp(16, scale=1 / 16),),
    modes=("eager",))


@jax.custom_vjp
def _psum_vjp_both(x):
    return lax.psum(x, "i")


_psum_vjp_both.defvjp(lambda x: (_psum_vjp_both(x), None), lambda _, g: (lax.psum(g, "i"),))
add("custom_vjp_replication_error_message_hint", T + "test_custom_vjp_replication_error_message_hint", *I4,
    (P("i"),), P(), lambda x: _psum_vjp_both(_psum_vjp_both(x)), lambda: (np.ones(4, np.float32),),
    outer=value_and_grad_sum(), modes=("eager",),
    jax_refuses=(ValueError, "bwd rule produced an output|Custom VJP bwd rule must produce"))
add("repeated_psum_allowed", T + "test_repeated_psum_allowed", *I4, (P("i"),), P(),
    lambda x: lax.psum(lax.psum(x, "i"), "i"), lambda: (ramp(4),), modes=("eager",))
add("approx_top_k", T + "test_approx_top_k", (2,), ("i",), (P("i"),), P("i"), lambda x: lax.approx_max_k(x, 2),
    lambda: (np.array([3.0, 1.0, 4.0, 2.0], np.float32),), modes=("eager",))


def _under_disable_jit(f):
    def g(*a):
        with jax.disable_jit():
            return f(*a)
    return g


add("disable_jit", T + "test_disable_jit", (2,), ("i",), (P("i"),), P("i"), lambda x: x, lambda: (ramp(8),),
    outer=_under_disable_jit, modes=("eager",), eager_point=True)

_jac_f = lambda w, x: jnp.sum(x @ w, axis=-1)  # noqa: E731
add("jacrev_explicit", T + "test_jacrev_explicit", *X2, (P(), P("x", None)), P("x", None),
    lambda w, x: jax.jacrev(_jac_f, argnums=1)(w, x), lambda: (ramp(6, 8, scale=0.01), ramp(8, 6, scale=0.01)))


def _jacrev_pair(w, x, y):
    f = lambda w, xs: jax.tree.map(lambda z: jnp.sum(z @ w, axis=-1), xs)  # noqa: E731
    ret = jax.jacrev(f, argnums=1)(w, (x, y))
    return ret[0][0], ret[0][1], ret[1][0], ret[1][1]


add("jacrev_explicit_complex", T + "test_jacrev_explicit_complex", *XY, (P(), P("x"), P("y")),
    (P("x"), P("y"), P("x"), P("y")), _jacrev_pair,
    lambda: (ramp(6, 8, scale=0.01), ramp(8, 6, scale=0.01), ramp(8, 6, scale=0.02)))


@jax.vmap
def _update_samples(key, hoppable):
    return jax.random.choice(key, a=jnp.arange(3), p=hoppable, replace=True)


add("random_choice_pvary", T + "test_random_choice_pvary", *X2, (P("x"), P("x")), P("x"), _update_samples,
    lambda: (keys(8), (np.arange(24).reshape(8, 3) % 3 != 1)), modes=("eager",))


def _forwarding(inputs):
    inputs = [inputs[i] for i in (2, 0, 1)]
    outputs = inputs[:1] + [jnp.exp(inputs[i]) if i < 2 else jnp.sin(inputs[i]) for i in range(2)]
    return [outputs[i] for i in (1, 2, 0)]


add("forwarding_correctness", T + "test_forwarding_correctness", (1,), ("i",), (P("i"),), P("i"), _forwarding,
    lambda: ([ramp(1) + k for k in range(3)],), outer=grad_sum(), modes=("eager",),
    note="one of the 64 parameter combinations (num_input_fwd=1, num_output_fwd=2, fixed permutations)")


def _eval_shape_vma(p, x):
    f = lambda p, x: jnp.einsum("i,i->", x, p)  # noqa: E731

    def one_row(x):
        _, vjp_fun = jax.vjp(f, p, x)
        y = jax.eval_shape(f, p, x)
        return vjp_fun(lax.full_like(y, 1))

    return lax.map(one_row, x)


add("eval_shape_vma", T + "test_eval_shape_vma", *X2, (P(), P("x")), P("x"), _eval_shape_vma,
    lambda: (normal(5, seed=6), normal(16, 5, seed=7)), modes=("eager", "jit"))
add("psum_not_under_shmap_error", T + "test_psum_not_under_shmap_error", *X2, (P("x"),), P(),
    jax.jit(lambda x: lax.psum(x, "x")), lambda: (ramp(8),),
    note="the source only builds it; here it is called")


# partial-manual (axis_names) ------------------------------------------------------------------

def _wsc_then_square(x):
    x = lax.with_sharding_constraint(x, P(None, "j"))
    return x * x


def _wsc_ij_then_square(mesh):
    def body(x):
        x = lax.with_sharding_constraint(x, jax.sharding.NamedSharding(mesh, P("i", "j")))
        return x * x
    return body


add("partial_auto", T + "test_partial_auto", *IJ, (P("i", None),), P("i", None), _wsc_then_square,
    lambda: (ramp(4, 8),), axis_names=frozenset({"i"}), arg_layouts=(P("i", "j"),), out_layouts=P("i", "j"),
    kinds=("auto",))
add("partial_auto_explicit_no_set_mesh", T + "test_partial_auto_explicit_no_set_mesh", *IJ, (P("i", None),),
    P("i", None), lambda x: x * x, lambda: (ramp(4, 8),), axis_names=frozenset({"i"}),
    arg_layouts=(P("i", "j"),), out_layouts=P("i", "j"), context_mesh=False)
add("partial_auto_explicit", T + "test_partial_auto_explicit", *IJ, (P("i", None),), P("i", None),
    lambda x: x * x, lambda: (ramp(4, 8),), axis_names=frozenset({"i"}), arg_layouts=(P("i", "j"),),
    out_layouts=P("i", "j"), outer=grad_sum(), modes=("eager", "jit"))
add("partial_auto_explicit_multi_explicit", T + "test_partial_auto_explicit_multi_explicit", (2, 1, 2, 2),
    ("i", "j", "k", "l"), (P("i", "j", None, None),), P("i", "j", None, None), lambda x: x.T,
    lambda: (ramp(4, 2, 2, 4),), axis_names=frozenset({"i", "j"}), arg_layouts=(P("i", "j", "k", "l"),),
    out_layouts=P(("i", "l"), ("j", "k"), None, None))
add("partial_auto_propagate_through", T + "test_partial_auto_propagate_through", (2, 2, 2), ("i", "j", "k"),
    (P(),), P(), lambda x: lax.with_sharding_constraint(x * x, P("i")), lambda: (ramp(4, 8),),
    axis_names=frozenset({"j", "k"}), check_vma=False, arg_layouts=(P("i"),), out_layouts=P("i"), kinds=("auto",))


def _grad_of_unused_params(batch):
    return jax.value_and_grad(lambda _, b: jnp.sum(b))(_PARAMS48, batch)


_PARAMS48 = ramp(4, 8)
add("shmap_close_over_unused_params", T + "test_shmap_close_over_unused_params", (2,), ("data",),
    (P("data"),), P(), _grad_of_unused_params, lambda: (ramp(4, 8),), check_vma=False)
add("close_over_input_explict_ctx_mesh/args", T + "test_close_over_input_explict_ctx_mesh", *X2,
    (P(), P("x")), P("x"), lambda w, x: jnp.sum(w * x, axis=-1),
    lambda: (np.ones((2, 4), np.float32), np.ones((4, 4), np.float32)), modes=("eager",))
_W24 = np.ones((2, 4), np.float32)
add("close_over_input_explict_ctx_mesh/closure", T + "test_close_over_input_explict_ctx_mesh", *X2, (P("x"),),
    P("x"), lambda xi: jnp.sum(_W24 * xi, axis=-1), lambda: (np.ones((4, 4), np.float32),), modes=("eager",))
add("shmap_close_over_unused_params_vmap", T + "test_shmap_close_over_unused_params_vmap", (2,), ("data",),
    (P("data"),), P("data"),
    jax.vmap(lambda b: jax.value_and_grad(lambda p, b: jnp.sum(p) + jnp.sum(b))(_PARAMS48, b)),
    lambda: (ramp(4, 8),), check_vma=False)
add("sharded_prng_with_abstract_mesh", T + "test_sharded_prng_with_abstract_mesh", *XYZ, (P(),), P(),
    lambda k: k, lambda: (jax.random.wrap_key_data(ramp(8, 2, 2, 2, dtype=np.uint32)),), abstract_mesh=True)

add("partial_auto_error_wsc_manual", T + "test_partial_auto_error_wsc_manual", *IJ, (P("i", None),),
    P("i", None), _wsc_ij_then_square, lambda: (ramp(4, 8),), mesh_body=True,
    axis_names=frozenset({"i"}), check_vma=False, arg_layouts=(P("i", "j"),), out_layouts=P("i", "j"),
    kinds=("auto",), jax_refuses=(ValueError, "manual"))
add("partial_auto_error_invalid_auto", T + "test_partial_auto_error_invalid_auto", *IJ, (P("i", None),),
    P("i", None), _wsc_ij_then_square, lambda: (ramp(4, 8),), mesh_body=True,
    axis_names=frozenset({"i", "j"}), check_vma=False, kinds=("auto",),
    jax_refuses=(ValueError, "manual"))
add("partial_auto_error_wrong_in_specs", T + "test_partial_auto_error_wrong_in_specs", *IJ, (P("i", "j"),),
    P("i", None), _wsc_ij_then_square, lambda: (ramp(4, 8),), mesh_body=True,
    axis_names=frozenset({"i"}), check_vma=False, out_layouts=P("i", "j"), kinds=("auto",),
    jax_refuses=(ValueError, "refers to 'j'"))


def _inner_with_mesh(mesh):
    return lambda x: jax.shard_map(lambda y: y * y, mesh=mesh, in_specs=P(None, "j"), out_specs=P(None, "j"))(x)


add("partial_auto_mismatch_mesh_error", T + "test_partial_auto_mismatch_mesh_error", *IJ, (P("i", None),),
    P("i", None), _inner_with_mesh, lambda: (ramp(4, 8),), mesh_body=True, axis_names=frozenset({"i"}),
    check_vma=False, arg_layouts=(P("i", "j"),), out_layouts=P("i", "j"), kinds=("auto",),
    jax_refuses=(ValueError, r"context mesh.*should match the mesh passed to shard_map"))


def _inner_context(f, spec):
    return lambda x: jax.shard_map(f, in_specs=spec, out_specs=spec)(x)


add("nested_partial_auto", T + "test_nested_partial_auto", *IJ, (P("i", None),), P("i", None),
    _inner_context(lambda y: y * y, P(None, "j")), lambda: (ramp(4, 8),), axis_names=frozenset({"i"}),
    check_vma=False, arg_layouts=(P("i", "j"),), out_layouts=P("i", "j"))
for _n, (_d1, _d2) in enumerate((("x", "y"), (None, "y"), ("x", None), (None, None))):
    add(f"nested_partial_auto_1d/{_n}", T + "test_nested_partial_auto_1d", *XYZ, (P(_d1, None),), P(_d1, None),
        functools.partial(lambda d2, x: jax.shard_map(lambda y: y * y, in_specs=P(None, d2), out_specs=P(None, d2),
                                                      axis_names={"y"})(x), _d2),
        lambda: (ramp(4, 8),), axis_names=frozenset({"x"}), arg_layouts=(P(_d1, _d2),),
        out_layouts=P(_d1, _d2))
add("grad_nested_partial_auto", T + "test_grad_nested_partial_auto", *IJ, (P("i", None),), P("i", None),
    _inner_context(lambda y: y * y, P(None, "j")), lambda: (ramp(4, 8),), axis_names=frozenset({"i"}),
    check_vma=False, arg_layouts=(P("i", "j"),), out_layouts=P("i", "j"), outer=grad_sum())
add("grad_nested_partial_auto_with_residuals", T + "test_grad_nested_partial_auto_with_residuals", *IJ,
    (P("i", None),), P("i", None), _inner_context(lambda y: y * y * y, P(None, "j")), lambda: (ramp(4, 8),),
    axis_names=frozenset({"i"}), check_vma=False, arg_layouts=(P("i", "j"),), out_layouts=P("i", "j"),
    outer=grad_sum())
add("axis_size_1_partial_auto", T + "test_axis_size_1_partial_auto", (1, 2, 2), ("i", "j", "k"),
    (P("i", None),), P("i", None), lambda x: x * x, lambda: (ramp(4, 8),), axis_names=frozenset({"i"}),
    check_vma=False, arg_layouts=(P("i", "j"),), out_layouts=P("i", "j"))


def _zeros_by_jit(mesh):
    def h():
        y = jax.jit(lambda: jnp.zeros(()), out_shardings=jax.sharding.NamedSharding(mesh, P()))()
        return y.reshape((1,))
    return h


add("partial_auto_of_pjit", T + "test_partial_auto_of_pjit", *IJ, (), P("i"), _zeros_by_jit, lambda: (),
    mesh_body=True, axis_names=frozenset({"i"}), check_vma=False)
add("partial_auto_axis_index", T + "test_partial_auto_axis_index", (4, 2), ("i", "j"), (), P("i", None),
    lambda: lax.axis_index("i").reshape(1, 1), lambda: (), axis_names=frozenset({"i"}), check_vma=False)
add("partial_auto_axis_index_degenerated_axis", T + "test_partial_auto_axis_index_degenerated_axis", (1, 2),
    ("i", "j"), (), P("i", None), lambda: lax.axis_index("i").reshape(1, 1), lambda: (),
    axis_names=frozenset({"i"}), check_vma=False)
add("partial_auto_ppermute", T + "test_partial_auto_ppermute", (4, 2), ("i", "j"), (P("i"),), P("i"),
    lambda x: lax.ppermute(lax.with_sharding_constraint(x, P("j")), "i", [(0, 1), (1, 2), (2, 3), (3, 0)]),
    lambda: (ramp(8),), axis_names=frozenset({"i"}), check_vma=False, kinds=("auto",))
add("partial_auto_of_random_keys", T + "test_partial_auto_of_random_keys", (4, 2), ("i", "j"), (P("i"),),
    P("i"), lambda k: k, lambda: (keys(8),), axis_names=frozenset({"i"}), check_vma=False)
add("partial_auto_of_random_keys_slice", T + "test_partial_auto_of_random_keys_slice", (4, 2), ("i", "j"),
    (P("i"),), P("i"), lambda k: k[0], lambda: (keys(8).reshape(4, 2),), axis_names=frozenset({"i"}),
    check_vma=False)

add("grad_remat", T + "test_grad_remat", (1, 1), ("i", "j"), (P("j"), P("i")), P("i", "j"), jnp.dot,
    lambda: (ramp(3, 2), ramp(3, 2, 1)), outer=compose(grad_sum((0, 1)), remat(lambda *_, **__: True)),
    modes=("eager",))
add("vmap_grad_shmap_spmd_axis_name_residuals", T + "test_vmap_grad_shmap_spmd_axis_name_residuals", (4, 2),
    ("i", "j"), (P("j"),), P("j"), jnp.sin, lambda: (ramp(4, 16),),
    outer=lambda f: jax.vmap(jax.grad(lambda x: f(x).sum()), spmd_axis_name="i"), put=(P("i", "j"),),
    modes=("eager",))
add("vmap_grad_remat_shmap_spmd_axis_name_residuals", T + "test_vmap_grad_remat_shmap_spmd_axis_name_residuals",
    (4, 2), ("i", "j"), (P("j"),), P("j"), jnp.sin, lambda: (ramp(4, 16),),
    outer=lambda f: jax.vmap(jax.grad(lambda x: jax.checkpoint(f, policy=lambda *_, **__: True)(x).sum()),
                             spmd_axis_name="i"),
    put=(P("i", "j"),), modes=("eager",))
add("grad_shmap_residuals_axis_names_in_mesh_order", T + "test_grad_shmap_residuals_axis_names_in_mesh_order",
    (4, 2, 1, 1), ("i", "j", "k", "a"), (P(("i", "k")),), P(("i", "k")), jnp.sin, lambda: (ramp(16),),
    outer=grad_sum())

_dyn_slice = lambda x: lax.dynamic_slice_in_dim(x, jnp.array(1, dtype=np.int32), 2)  # noqa: E731
add("dynamic_slice_transpose", T + "test_dynamic_slice_transpose", *X2, (P("x"),), P("x"), _dyn_slice,
    lambda: (ramp(16),), modes=("eager", "jit"))
add("dynamic_slice_transpose/grad", T + "test_dynamic_slice_transpose", *X2, (P("x"),), P("x"), _dyn_slice,
    lambda: (ramp(16),), outer=grad_sum(), modes=("eager", "jit"))

add("vmap_spmd_axis_name_error/in_spec", T + "test_vmap_spmd_axis_name_error", (4, 2), ("i", "j"), (P("i"),),
    P("i"), jnp.sin, lambda: (ramp(4, 16),), outer=vmapped(spmd_axis_name="i"), put=(P(),), modes=("eager",),
    kinds=("auto",), jax_refuses=(ValueError, "spmd_axis_name cannot appear"))
add("vmap_spmd_axis_name_error/out_spec", T + "test_vmap_spmd_axis_name_error", (4, 2), ("i", "j"), (P("j"),),
    P(("i", "j")), jnp.sin, lambda: (ramp(4, 16),), check_vma=False, outer=vmapped(spmd_axis_name="i"),
    put=(P(),), modes=("eager",), kinds=("auto",), jax_refuses=(ValueError, "spmd_axis_name cannot appear"))

_OBJ = object()
_sin2 = lambda o, x: jnp.sin(x)  # noqa: E731
add("in_spec_none/object", T + "test_in_spec_none", (4, 2), ("i", "j"), (None, P("i")), P("i"), _sin2,
    lambda: (_OBJ, ints(4, 2)), modes=("eager",))
add("in_spec_none/None", T + "test_in_spec_none", (4, 2), ("i", "j"), (None, P("i")), P("i"), _sin2,
    lambda: (None, ints(4, 2)), modes=("eager",))
add("in_spec_none/dict", T + "test_in_spec_none", (4, 2), ("i", "j"), ({"a": None}, P("i")), P("i"), _sin2,
    lambda: ({"a": _OBJ}, ints(4, 2)), modes=("eager",))
add("in_spec_none/last", T + "test_in_spec_none", (4, 2), ("i", "j"), (P("i"), None), P("i"),
    lambda x, o: jnp.sin(x), lambda: (ints(4, 2), _OBJ), modes=("eager",))
add("in_spec_none/four", T + "test_in_spec_none", (4, 2), ("i", "j"), (None, None, P("i"), None), P("i"),
    lambda o1, o2, x, o3: jnp.sin(x), lambda: (_OBJ, (object(), object()), ints(4, 2), _OBJ), modes=("eager",))
add("in_spec_none_divisibility_errors", T + "test_in_spec_none_divisibility_errors", (4, 2), ("i", "j"),
    (None, P("i")), (), lambda o, x: (), lambda: (_OBJ, ints(2, 2)), modes=("eager",), put=(None, P()),
    jax_refuses=(ValueError, "divisible"))
add("in_spec_none_rank_errors", T + "test_in_spec_none_rank_errors", (4, 2), ("i", "j"), (None, P("i", "j")),
    (), lambda o, x: (), lambda: (_OBJ, ints(4)), modes=("eager",), put=(None, P()),
    jax_refuses=(ValueError, "rank"))
add("custom_linear_solve_rep_rules", T + "test_custom_linear_solve_rep_rules", (1,), ("i",), (P("i"), P("i")),
    P("i"), jnp.linalg.solve, lambda: (np.array([[1.0]], np.float32), np.array([1.0], np.float32)),
    modes=("eager",))
add("temporary_error_suppression_flag", T + "test_temporary_error_suppression_flag", (2,), ("i",),
    (P(None), P("i")), P(None), lambda x, y: x + lax.all_gather(y, "i", tiled=True),
    lambda: (ints(4, 8), ints(8)), check_vma=False, outer=vmapped(in_axes=(0, None), spmd_axis_name="i"),
    put=(P(), P()), modes=("eager",), kinds=("auto",),
    jax_refuses=(ValueError, "vmap spmd_axis_name cannot appear in"))


class _Unhashable:
    def __hash__(self):
        raise Exception("unhashable")


add("in_spec_none_hashability", T + "test_in_spec_none_hashability", (2,), ("i",), (None,), (),
    lambda a: (), lambda: (_Unhashable(),), modes=("eager",))

for _names in (True, False):
    add(f"explicit_vmap_grad_shmap/axis_names={_names}", T + "test_explicit_vmap_grad_shmap", *XY, (P("y"),),
        P("y"), jnp.cos, lambda: (ramp(6, 24, scale=0.01),), axis_names=frozenset({"y"}) if _names else None,
        outer=lambda f: jax.vmap(jax.grad(lambda x: f(jax.reshard(x, P("y"))).sum())), put=(P("x", None),),
        kinds=("explicit",))

for _along in (("y",), ("x",), ("x", "y")):
    add(f"get_check_rep/{'+'.join(_along)}", T + "test_get_check_rep", *XY, (P("x", "y"),),
        P(*(n for n in ("x", "y") if n not in _along)),
        functools.partial(lambda along, x: lax.psum(x, axis_name=along), _along), lambda: (normal(8, 8),),
        modes=("eager", "jit"))

add("pmin", T + "test_pmin", *I4, (P("i"),), P(), lambda x: lax.pmin(x, "i"), lambda: (ramp(8),),
    modes=("eager",))
add("pmax", T + "test_pmax", *I4, (P("i"),), P(), lambda x: lax.pmax(x, "i"), lambda: (ramp(8),),
    modes=("eager",))
add("pmax_vma_in_types", T + "test_pmax_vma_in_types", *I4, (P(),), P(), lambda x: lax.pmax(x, "i"),
    lambda: (ramp(8),))
add("mul_with_vma_in_types", T + "test_mul_with_vma_in_types", *X2, (P("x"),), P("x"), lambda x: x * 2,
    lambda: (ramp(8),))
add("all_gather_with_vma_in_types", T + "test_all_gather_with_vma_in_types", *X2, (P(),), P("x"),
    lambda x: lax.all_gather(x, "x"), lambda: (ramp(8),))
add("rep_none_canonicalization_again", T + "test_rep_none_canonicalization_again", (2,), ("i",), (P("i"),),
    P("i"), lambda x: jnp.insert(x, 0, 0)[None], lambda: (np.zeros(10, np.float32),), note="eager in the source; under jax.jit here (eager op-by-op dispatch takes seconds)")


@jax.custom_jvp
def _add_symbolic(a, b):
    return a + b


@functools.partial(_add_symbolic.defjvp, symbolic_zeros=True)
def _add_symbolic_jvp(primals, tangents):
    a, b = primals
    a_dot, b_dot = tangents
    y = _add_symbolic(a, b)
    y_dot = jnp.zeros_like(y)
    if not isinstance(a_dot, jax.custom_derivatives.SymbolicZero):
        y_dot += a_dot
    if not isinstance(b_dot, jax.custom_derivatives.SymbolicZero):
        y_dot += b_dot
    return y, y_dot


add("custom_jvp_symbolic_zeros", T + "test_custom_jvp_symbolic_zeros", *I4, (P("i"), P("i")), P("i"),
    _add_symbolic, lambda: (normal(8, 20, seed=8), normal(8, 20, seed=9)),
    outer=lambda f: lambda x, a: jax.jvp(lambda x: f(x, a), (x,), (x,)), modes=("eager",))

_TYPE_PCAST = (TypeError, r"applying `jax.lax.pcast\(..., \('y',\)")
add("cond_pvary_errors", T + "test_cond_pvary_errors", (1, 1), ("x", "y"), (P("x"), P("y")), P(("x", "y")),
    lambda x, y: lax.cond(True, lambda x, y: x, lambda x, y: y, x, y), lambda: (ramp(4), ramp(4)),
    modes=("eager",), jax_refuses=_TYPE_PCAST)
add("cond_pvary_errors_pytree", T + "test_cond_pvary_errors_pytree", (1, 1), ("x", "y"), (P("x"), P("y")),
    P(("x", "y")), lambda x, y: lax.cond(True, lambda x, y: (x, y), lambda x, y: (y, x), x, y),
    lambda: (ramp(4), ramp(4)), modes=("eager",), jax_refuses=_TYPE_PCAST)


def _swap_carry(x, y):
    (x_, y_), _ = lax.scan(lambda c, _: ((c[1], c[0]), ()), (x, y), (), length=2)
    return x_, y_


def _swap_carry_fixed(x, y):
    return _swap_carry(x, vary(y, "i"))


def _rotate3(x, y, z):
    carry, _ = lax.scan(lambda c, _: ((c[2], c[0], c[1]), ()), (x, y, z), (), length=2)
    return carry


add("scan_pvary_errors", T + "test_scan_pvary_errors", (1, 1), ("i", "j"), (P("i"), P()), P("i"), _swap_carry,
    lambda: (ramp(3), ramp(3)), modes=("eager",),
    jax_refuses=(TypeError, r"This might be fixed by applying `jax.lax.pcast\(..., \('i',\)"))
add("scan_pvary_errors/fixed", T + "test_scan_pvary_errors", (1, 1), ("i", "j"), (P("i"), P()), P("i"),
    _swap_carry_fixed, lambda: (ramp(3), ramp(3)), modes=("eager",))
add("scan_pvary_errors2", T + "test_scan_pvary_errors2", (1, 1), ("i", "j"), (P("i"), P(), P(("i", "j"))),
    P(("i", "j")), _rotate3, lambda: (ramp(3), ramp(3), ramp(3)), modes=("eager",),
    jax_refuses=(TypeError, r"This might be fixed by:\n  \* applying `jax.lax.pcast\(..., \('j',\)"))
add("scan_pvary_errors2/fixed", T + "test_scan_pvary_errors2", (1, 1), ("i", "j"), (P("i"), P(), P(("i", "j"))),
    P(("i", "j")), lambda x, y, z: _rotate3(vary(x, "j"), vary(y, ("i", "j")), z),
    lambda: (ramp(3), ramp(3), ramp(3)), modes=("eager",))

add("shmap_full_manual_context", T + "test_shmap_full_manual_context_explicit (and _auto)", *XY,
    (P("x", "y"),), P("x", "y"), lambda x: x * 2, lambda: (ints(8, 2),), modes=("eager", "jit"))
add("shmap_partial_manual", T + "test_shmap_partial_manual_explicit (and _auto)", *XY, (P("x"),), P("x"),
    lambda x: x * 2, lambda: (ints(8, 2),), axis_names=frozenset({"x"}), arg_layouts=(P("x", "y"),),
    out_layouts=P("x", "y"))


def _val_and_grad_inside(x):
    val, grad = jax.value_and_grad(lambda x: jnp.mean(x ** 2))(x)
    return jnp.atleast_1d(val), jnp.atleast_1d(grad)


add("pvary_in_shmap_of_grad", T + "test_pvary_in_shmap_of_grad", *X2, (P("x"),), P("x"), _val_and_grad_inside,
    lambda: (np.ones(2, np.float32),), modes=("eager",))

_HIST_X = ints(8, 4, 2)
add("jnp_histogram", T + "test_jnp_histogram", (2,), ("data",), (P("data"), P()), P("data"),
    lambda x, edges: jax.vmap(lambda q: jnp.histogram(q, bins=edges))(x)[0],
    lambda: (_HIST_X, np.histogram_bin_edges(_HIST_X, bins=100).astype(np.float32)),
    note="eager and jitted in the source; jitted here (eager takes seconds)")


def _lin_transpose(p, t):
    f = lambda x: jnp.mean(x ** 2)  # noqa: E731
    _, fwd = jax.linearize(f, p)
    return jax.linear_transpose(fwd, p)(fwd(t))


_P1 = np.array([1.0], np.float32)
add("shmap_linearize_and_linearize_transpose_error", T + "test_shmap_linearize_and_linearize_transpose_error",
    *X2, (P("x"),), P("x"), lambda t: _lin_transpose(_P1, t), lambda: (np.ones(2, np.float32),),
    modes=("eager",), jax_refuses=(ValueError, r"applying `jax.lax.pcast\(..., \('x',\)"))
add("shmap_linearize_and_linearize_transpose_error/fixed",
    T + "test_shmap_linearize_and_linearize_transpose_error", *X2, (P("x"),), P("x"),
    lambda t: _lin_transpose(vary(jnp.asarray(_P1), "x"), t), lambda: (np.ones(2, np.float32),), modes=("eager",))
add("argmax_pvary", T + "test_argmax_pvary", *XY, (P("x", "y"),), P("x", "y"),
    lambda x: x.argmax(axis=-1, keepdims=1), lambda: (normal(8, 8, seed=10),), modes=("eager",))
add("linalg_inv", T + "test_linalg_inv", *X2, (P("x"),), P("x"), lambda x: lax.map(jnp.linalg.inv, x),
    lambda: (normal(4, 5, 5, seed=11) * 0.1 + np.eye(5, dtype=np.float32),), modes=("eager",))

_ONES81 = lambda: np.ones((8, 1), np.float32)  # noqa: E731
add("random_beta_vma/pcast_key", T + "test_random_beta_vma", (2,), ("dp",), (P(), P("dp"), P("dp")), P("dp"),
    lambda k, a, b: jax.random.beta(vary(k, ("dp",)), a, b), lambda: (jax.random.key(42), _ONES81(), _ONES81()),
    slow=True, note="eager in the source; under jax.jit here (eager op-by-op dispatch takes seconds)")
add("random_beta_vma/split_keys", T + "test_random_beta_vma", (2,), ("dp",), (P("dp"), P("dp"), P("dp")),
    P("dp"), lambda k, a, b: jax.random.beta(k[0], a, b),
    lambda: (jax.random.split(jax.random.key(42), 2), _ONES81(), _ONES81()), slow=True,
    note="eager in the source; under jax.jit here (eager op-by-op dispatch takes seconds)")
add("random_beta_vma/replicated_params", T + "test_random_beta_vma", (2,), ("dp",), (P("dp"), P(), P()),
    P("dp"), lambda k, a, b: jax.random.beta(k[0], a, b),
    lambda: (jax.random.split(jax.random.key(42), 2), _ONES81(), _ONES81()), slow=True,
    note="eager in the source; under jax.jit here (eager op-by-op dispatch takes seconds)")

for _out, _axis, _inspec in ((P("x"), "x", P("x")), (P(None, "y"), "y", P(None, "y"))):
    add(f"partial_manual_explicit_shmap/{_axis}", T + "test_partial_manual_explicit_shmap", *XY, (_inspec,), _out,
        lambda x: x * 2, lambda: (ints(8, 2),), axis_names=frozenset({_axis}), arg_layouts=(P("x", "y"),),
        out_layouts=P("x", "y"), modes=("eager", "jit"))

_three_axis_indices = lambda: jnp.array([lax.axis_index(n) for n in ("x", "y", "z")])  # noqa: E731
add("axis_index_explicit_mesh_eager_shmap", T + "test_axis_index_explicit_mesh_eager_shmap", (1, 2, 2),
    ("x", "y", "z"), (), P(("x", "y", "z")), _three_axis_indices, lambda: (), modes=("eager", "jit"))
add("axis_index_explicit_mesh_eager_shmap/no_vma", T + "test_axis_index_explicit_mesh_eager_shmap", (1, 2, 2),
    ("x", "y", "z"), (), P(), _three_axis_indices, lambda: (), check_vma=False, modes=("eager", "jit"))

add("split_with_unused_result_in_shardmap", T + "test_split_with_unused_result_in_shardmap", *X2, (P("x"),),
    P("x"), lambda x: jnp.split(x, 2, axis=0)[0], lambda: (np.ones(8, np.float32),),
    outer=lambda f: jax.grad(lambda x: (0.1 * f(x).mean(keepdims=True)).squeeze(0)))
add("shmap_primal_type_match_ct_type", T + "test_shmap_primal_type_match_ct_type", *X2, (P("x"),), P("x"),
    lambda x: x * 2, lambda: (ramp(8),), outer=grad_sum())
add("mix_manual_explicit_partial", T + "test_mix_manual_explicit_partial", *XY, (P("x"),), P("x"),
    lambda x: x * 2, lambda: (ints(8, 2),), axis_names=frozenset({"x"}), arg_layouts=(P(("x", "y"), None),),
    out_layouts=P(("x", "y"), None))


@jax.custom_vjp
def _no_cotangent(x):
    return x


_no_cotangent.defvjp(lambda x: (x, None), lambda _, g: (None,))
add("zero_cotangent_sharding", T + "test_zero_cotangent_sharding", *X2, (P("x"),), P("x"), _no_cotangent,
    lambda: (ramp(8),), check_vma=False, outer=grad_sum(), modes=("eager", "jit"))
add("vmap_shmap_psum", T + "test_vmap_shmap_psum", *XY, (P("y"),), P(None), lambda x: lax.psum(x, axis_name="y"),
    lambda: (ints(2, 8),), outer=vmapped(), put=(P("x", "y"),), modes=("eager", "jit"))
add("axis_index_unmapped", T + "test_axis_index_unmapped", *X2, (P(),), P(),
    jax.vmap(lambda x: lax.axis_index("x")), lambda: (ints(8),), check_vma=False)
add("pvary_eager", T + "test_pvary_eager", *X2, (P(),), P("x"), lambda x: vary(x, "x"), lambda: (ramp(8),),
    modes=("eager",))
add("pvary_eager/grad", T + "test_pvary_eager", *X2, (P(),), P("x"), lambda x: vary(x, "x"), lambda: (ramp(8),),
    outer=grad_sum())
add("pvary_explicit_axes_error", T + "test_pvary_explicit_axes_error", *XY, (P(),), P("x"),
    lambda x: vary(x, "y"), lambda: (ints(8),), axis_names=frozenset({"x"}), check_vma=False,
    jax_refuses=(NameError, "Found an unbound axis name"))
add("slice_oob_shmap", T + "test_slice_oob_shmap", *X2, (P(None, "x"),), P(None, "x"), lambda x: x[:, 100:116],
    lambda: (np.ones((8, 8), np.float32),))
add("vmap_shmap_spmd_axis_name_scalar/two_args", T + "test_vmap_shmap_spmd_axis_name_scalar", *XY,
    (P("y"), P()), P("y"), lambda x, y: x * y, lambda: (np.ones((2, 4), np.float32), np.ones(2, np.float32)),
    outer=vmapped(in_axes=(0, None), spmd_axis_name="x"), put=(P("x", "y"), P()))
add("vmap_shmap_spmd_axis_name_scalar/one_arg", T + "test_vmap_shmap_spmd_axis_name_scalar", *XY, (P("y"),),
    P("y"), lambda x: x * 2, lambda: (np.ones((2, 4), np.float32),), outer=vmapped(spmd_axis_name="x"),
    put=(P("x", "y"),), needs=jax_at_least(0, 10))
add("repeat_shmap_vmap_spmd_axis_names", T + "test_repeat_shmap_vmap_spmd_axis_names", (4, 2), ("x", "y"),
    (P("y"), P("y")), P("y"), lambda x, y: jnp.repeat(x, y, total_repeat_length=10),
    lambda: (ints(4, 2), ints(4, 2)), outer=vmapped(spmd_axis_name="x"), put=(P("x", "y"), P("x", "y")),
    needs=jax_at_least(0, 10))
add("nested_shmap_innermost_no_axis_names", T + "test_nested_shmap_innermost_no_axis_names", *XYZ, (P(),), P(),
    lambda x: jax.shard_map(lambda v: jax.shard_map(lambda y: y * 2, in_specs=P(), out_specs=P())(v),
                            in_specs=P(), out_specs=P(), axis_names={"y"})(x),
    lambda: (np.ones(4, np.float32),), axis_names=frozenset({"x"}), kinds=("auto",), needs=jax_at_least(0, 10))

# The TPU-only tests of a lowering option (rgv3): their kernels, without the option.
add("all_reduce_rgv3", T + "test_all_reduce_rgv3", *XY, (P("x", "y"),), P("x", "y"),
    lambda x: lax.psum(x, "x"), lambda: (ramp(4, 4),))
for _tag, _mesh, _axes, _spec, _axis, _dim, _shape in (
        ("simple", (2, 2), ("x", "y"), P("x", "y"), "x", 0, (4, 2)),
        ("multidim_mesh", (1, 1, 2, 1), ("replica", "data", "seq", "model"), P(None, "seq", None), "seq", 1,
         (1, 4, 8)),
        ("multidim_mesh_tuple_sharding", (1, 1, 2, 1), ("replica", "data", "seq", "model"),
         P(("replica", "data"), "seq", None), "seq", 1, (1, 4, 8))):
    add(f"reduce_scatter_rgv3/{_tag}", T + "test_reduce_scatter_rgv3", _mesh, _axes, (_spec,), _spec,
        functools.partial(lambda axis, dim, x: lax.psum_scatter(x, axis, scatter_dimension=dim, tiled=True),
                          _axis, _dim),
        functools.partial(lambda shape: (np.ones(shape, np.float32),), _shape))
add("all_gather_rgv3", T + "test_all_gather_rgv3", *XY, (P("x", "y"),), P(None, "y"),
    lambda x: lax.all_gather(x, "x", tiled=True, to="invarying"), lambda: (ramp(4, 4),),
    needs=needs_invariant_gather)
add("all_to_all_rgv3", T + "test_all_to_all_rgv3", *X2, (P("x", None),), P(None, "x"),
    lambda x: lax.all_to_all(x, "x", split_axis=1, concat_axis=1, tiled=True), lambda: (ramp(4, 4),))


# =============================================================================================
# shard_map_test.py :: ShardMapSystematicTest, its function specs over its meshes
# =============================================================================================
#
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


# =============================================================================================
# docs/notebooks/shard_map.md (the tutorial)
# =============================================================================================

add("matmul_basic", MD + "So, let's see a shard_map! (matmul_basic)", (4, 2), ("x", "y"),
    (P("x", "y"), P("y", None)), P("x", None), lambda a, b: lax.psum(jnp.dot(a, b), "y"),
    lambda: (ramp(8, 16, scale=0.01), ramp(16, 4, scale=0.01)), modes=("eager",))
add("check_shmap", MD + "Rank-reducing vs rank-preserving maps (check_shmap)", (4,), ("i",), (P("i"),), P("i"),
    lambda x: x.T @ x, lambda: (ramp(8, 4, scale=0.1),), modes=("eager",))
add("f1_in_specs", MD + "Controlling how each input is split (f1)", (4, 2), ("i", "j"), (P("i", None),),
    P("i", "j"), lambda x: x, lambda: (ints(12, 12),), modes=("eager",))
add("f2_in_specs", MD + "Controlling how each input is split (f2)", (4, 2), ("i", "j"), (P("i", "j"),),
    P("i", "j"), lambda x: x, lambda: (ints(12, 12),), modes=("eager",))
_X33 = np.array([[3.0]], np.float32)
for _tag, _out in (("ij", P("i", "j")), ("i", P("i", None)), ("none", P(None, None))):
    add(f"untile_closure/{_tag}", MD + "Controlling how each output is assembled (closure over x)", (4, 2),
        ("i", "j"), (), _out, lambda: jnp.asarray(_X33), lambda: (), modes=("eager",), kinds=("auto",),
        note="the closed-over jax.Array of the source is made by jnp.asarray of a numpy constant")
add("f3_psum_j", MD + "out_specs (f3)", (4, 2), ("i", "j"), (P("i", "j"),), P("i", None),
    lambda x: lax.psum(x, "j"), lambda: (ints(12, 12),), modes=("eager",))
add("f4_psum_i", MD + "out_specs (f4)", (4, 2), ("i", "j"), (P("i", "j"),), P(None, "j"),
    lambda x: lax.psum(x, "i"), lambda: (ints(12, 12),), modes=("eager",))
add("f5_psum_ij", MD + "out_specs (f5)", (4, 2), ("i", "j"), (P("i", "j"),), P(None, None),
    lambda x: lax.psum(x, ("i", "j")), lambda: (ints(12, 12),), modes=("eager",))
add("vma_varying", MD + "Tracking how values vary (2 * x, in P('i'))", (2,), ("i",), (P("i"),), P("i"),
    lambda x: 2 * x, lambda: (ramp(6),), modes=("eager",))
add("vma_invariant", MD + "Tracking how values vary (2 * x, in P())", (2,), ("i",), (P(),), P(),
    lambda x: 2 * x, lambda: (ramp(6),), modes=("eager",))
add("vma_psum", MD + "Tracking how values vary (psum)", (2,), ("i",), (P("i"),), P(),
    lambda x: lax.psum(x, "i"), lambda: (ramp(6),), modes=("eager",))
add("vma_psum_j", MD + "Tracking how values vary (psum over j, out P('i'))", (4, 2), ("i", "j"), (P("i", "j"),),
    P("i"), lambda x: lax.psum(x, "j"), lambda: (ramp(8, 4),), modes=("eager",))
add("vma_out_specs_bug", MD + "out_specs bug caught with check_vma", (2,), ("i",), (P("i"),), P(), lambda x: x,
    lambda: (ramp(6),), modes=("eager",), jax_refuses=(ValueError, ""))
add("vma_implicit_pvary", MD + "implicit pcast for binary ops (x * y)", (2,), ("i",), (P("i"), P()), P("i"),
    lambda x, y: x * y, lambda: (ramp(6), ramp(3)), modes=("eager",))
add("scan_vma_error", MD + "scan needs pcast (raises)", (2,), ("i",), (P("i"), P()), P("i"), _swap_carry,
    lambda: (ramp(6), ramp(3)), modes=("eager",), jax_refuses=(TypeError, "pcast"))
add("scan_vma_fixed", MD + "scan needs pcast (fixed)", (2,), ("i",), (P("i"), P()), P("i"),
    lambda x, y: _swap_carry(x, vary(y, "i")), lambda: (ramp(6), ramp(3)), modes=("eager",))

_X16 = lambda: (np.array([3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 1, 2], np.int32),)  # noqa: E731
add("collectives/psum_f1", MD + "Collectives tutorial: psum (f1)", (4,), ("i",), (P("i"),), P(None),
    lambda x: lax.psum(x, "i"), _X16, modes=("eager",))
add("collectives/psum_f2", MD + "Collectives tutorial: psum over i (f2)", (2, 2), ("i", "j"), (P("i", "j"),),
    P(None, "j"), lambda x: lax.psum(x, "i"), lambda: (ints(4, 4),), modes=("eager",))
add("collectives/psum_f3", MD + "Collectives tutorial: psum over i and j (f3)", (2, 2), ("i", "j"),
    (P("i", "j"),), P(None, None), lambda x: lax.psum(x, ("i", "j")), lambda: (ints(4, 4),), modes=("eager",))
add("collectives/all_gather_tiled_f4", MD + "Collectives tutorial: all_gather (f4)", (4,), ("i",), (P("i"),),
    P("i"), lambda x: lax.all_gather(x, "i", tiled=True), lambda: (np.array([3, 9, 5, 2], np.int32),),
    modes=("eager",))
add("collectives/all_gather_stacked_f5", MD + "Collectives tutorial: all_gather, tiled=False (f5)", (4,), ("i",),
    (P("i"),), P("i"), lambda x: lax.all_gather(x, "i", tiled=False), lambda: (np.array([3, 9, 5, 2], np.int32),),
    modes=("eager",))
add("collectives/psum_scatter_f6", MD + "Collectives tutorial: psum_scatter (f6)", (4,), ("i",), (P("i"),),
    P("i"), lambda x: lax.psum_scatter(x, "i", tiled=True), _X16, modes=("eager",))
add("collectives/ppermute_f7", MD + "Collectives tutorial: ppermute (f7)", (4,), ("i",), (P("i"),), P("i"),
    lambda x: _ring(x, "i"), lambda: (ints(8),), modes=("eager",))


def _shift(x, axis, step):
    """Each device's ``x`` to the device ``step`` places further along ``axis`` (a ring)."""
    n = lax.axis_size(axis)
    return lax.ppermute(x, axis, perm=[(d, (d + step) % n) for d in range(n)])


def _ring_reduce_scatter(x, axis):
    """The tiled psum_scatter of ``x`` over ``axis`` along dim 0, as a ring of ppermutes: the running
    sum for a chunk travels one device down per step, each device adding its own part of it, and
    ends on the device that owns the chunk."""
    n, me = lax.axis_size(axis), lax.axis_index(axis)
    chunks = x.reshape(n, x.shape[0] // n, *x.shape[1:])
    running = chunks[(me + 1) % n]
    for step in range(1, n):
        running = _shift(running, axis, -1) + chunks[(me + 1 + step) % n]
    return running


add("collectives/psum_scatter_by_ppermute_f8", MD + "Collectives tutorial: psum_scatter from ppermutes (f8)",
    (4,), ("i",), (P("i"),), P("i"), lambda x: _ring_reduce_scatter(x, "i"), _X16,
    note="eager in the source; under jax.jit here (eager op-by-op dispatch takes seconds)")
add("collectives/all_to_all_f9", MD + "Collectives tutorial: all_to_all (f9)", (4,), ("i",), (P("i"),), P("i"),
    lambda x: lax.all_to_all(x, "i", split_axis=0, concat_axis=0, tiled=True), _X16, modes=("eager",))


# Matrix multiplies: lhs @ rhs with the communication spelled out ---------------------------------

def _cols(x, j, width):
    return lax.dynamic_slice_in_dim(x, j * width, width, 1)


def _rows(x, j, height):
    return lax.dynamic_slice_in_dim(x, j * height, height, 0)


def _matmul_allgather(lhs, rhs):
    return lhs @ lax.all_gather(rhs, "i", tiled=True)


def _matmul_allgather_overlapped(lhs, rhs):
    """rhs's row blocks travel round the ring; each meets the columns of lhs it multiplies."""
    n, me = lax.axis_size("i"), lax.axis_index("i")
    width = lhs.shape[1] // n
    held = rhs
    total = _cols(lhs, me, width) @ held
    for step in range(1, n):
        held = _shift(held, "i", +1)  # now the block of device me - step
        total = total + _cols(lhs, (me - step) % n, width) @ held
    return total


def _matmul_allgather_overlapped_bidi(lhs, rhs):
    """As above, with each block's two halves going round the ring in opposite directions."""
    n, me = lax.axis_size("i"), lax.axis_index("i")
    half = lhs.shape[1] // n // 2
    up, down = jnp.split(rhs, 2, axis=0)
    total = _cols(lhs, 2 * me, half) @ up + _cols(lhs, 2 * me + 1, half) @ down
    for step in range(1, n):
        up, down = _shift(up, "i", +1), _shift(down, "i", -1)
        total = total + _cols(lhs, 2 * ((me - step) % n), half) @ up
        total = total + _cols(lhs, 2 * ((me + step) % n) + 1, half) @ down
    return total


def _matmul_psumscatter(lhs, rhs):
    return lax.psum_scatter(lhs @ rhs, "i", tiled=True)


def _matmul_psumscatter_overlapped(lhs, rhs):
    """The running sum of a row block of the product goes round the ring, each device adding the
    product of its columns; it ends on the device whose rows it is."""
    n, me = lax.axis_size("i"), lax.axis_index("i")
    height = lhs.shape[0] // n
    running = _rows(lhs, (me + 1) % n, height) @ rhs
    for step in range(1, n):
        running = _shift(running, "i", -1) + _rows(lhs, (me + 1 + step) % n, height) @ rhs
    return running


def _matmul_psumscatter_overlapped_bidi(lhs, rhs):
    """As above, each row block in two halves whose running sums go round in opposite directions."""
    n, me = lax.axis_size("i"), lax.axis_index("i")
    half = lhs.shape[0] // n // 2
    first = _rows(lhs, 2 * ((me - 1) % n), half) @ rhs
    second = _rows(lhs, 2 * ((me + 1) % n) + 1, half) @ rhs
    for step in range(1, n):
        first = _shift(first, "i", +1) + _rows(lhs, 2 * ((me - 1 - step) % n), half) @ rhs
        second = _shift(second, "i", -1) + _rows(lhs, 2 * ((me + 1 + step) % n) + 1, half) @ rhs
    return jnp.concatenate([first, second])


_lhs_rhs = lambda: (normal(8, 8, seed=12), normal(8, 4, seed=13))  # noqa: E731
for _name, _f in (("matmul_allgather", _matmul_allgather), ("matmul_allgather_overlapped", _matmul_allgather_overlapped),
                  ("matmul_allgather_overlapped_bidi", _matmul_allgather_overlapped_bidi)):
    add(f"matmul/{_name}", MD + f"Matrix multiplies, Example 1 ({_name})", (4,), ("i",), (P("i", None), P("i", None)),
        P("i", None), _f, _lhs_rhs)
for _name, _f in (("matmul_psumscatter", _matmul_psumscatter),
                  ("matmul_psumscatter_overlapped", _matmul_psumscatter_overlapped),
                  ("matmul_psumscatter_overlapped_bidi", _matmul_psumscatter_overlapped_bidi)):
    add(f"matmul/{_name}", MD + f"Matrix multiplies, Example 2 ({_name})", (4,), ("i",), (P(None, "i"), P("i", None)),
        P("i", None), _f, _lhs_rhs, note="eager in the source; under jax.jit here (eager op-by-op dispatch takes seconds)")


# Neural networks: a small MLP (the tutorial's shape, smaller), its squared-error loss ---------------

_WIDTHS = [16, 8, 8, 8, 8, 8]
_BATCH = 16


def _mse(predictions, targets):
    return jnp.mean(jnp.sum(jnp.square(predictions - targets), axis=-1))


def _mlp(layers, x, dense=lambda x, w, b: x @ w + b, weights=lambda w, b: (w, b)):
    """relu between the layers, none after the last; ``weights`` prepares a layer's (w, b) (a gather
    for FSDP), ``dense`` applies it (a reduce-scatter for tensor parallelism)."""
    for k, (w, b) in enumerate(layers):
        x = dense(x, *weights(w, b))
        if k + 1 < len(layers):
            x = jax.nn.relu(x)
    return x


def _mlp_layers():
    rng = np.random.default_rng(14)
    return [((rng.standard_normal((a, b)) / np.sqrt(a)).astype(np.float32), rng.standard_normal(b).astype(np.float32))
            for a, b in zip(_WIDTHS[:-1], _WIDTHS[1:])]


def _mlp_batch():
    rng = np.random.default_rng(15)
    return (rng.standard_normal((_BATCH, _WIDTHS[0])).astype(np.float32),
            rng.standard_normal((_BATCH, _WIDTHS[-1])).astype(np.float32))


def _loss_dp(layers, batch):
    x, y = batch
    return lax.pmean(_mse(_mlp(layers, x), y), "batch")


def _gather_layer(w, b):
    return lax.all_gather(w, "batch", tiled=True), lax.all_gather(b, "batch", tiled=True)


_no_saved_gathers = functools.partial(jax.checkpoint, policy=lambda prim, *_, **__: str(prim) != "all_gather")


def _loss_fsdp(layers, batch):
    x, y = batch
    forward = _no_saved_gathers(lambda layers, x: _mlp(layers, x, weights=_gather_layer))
    return lax.pmean(_mse(forward(layers, x), y), "batch")


def _dense_tp(x, w, b):
    return lax.psum_scatter(x @ w, "feats", scatter_dimension=1, tiled=True) + b


def _loss_fsdp_tp(layers, batch):
    x, y = batch
    forward = _no_saved_gathers(lambda layers, x: _mlp(layers, x, dense=_dense_tp, weights=_gather_layer))
    errors = lax.psum(jnp.sum(jnp.square(forward(layers, x) - y), axis=-1), "feats")
    return lax.pmean(jnp.mean(errors), "batch")


for _g in (False, True):
    _sfx = "/grad" if _g else ""
    _o = grad_sum() if _g else None
    add(f"nn/loss_dp{_sfx}", MD + "8-way batch data parallelism (loss_dp)", (8,), ("batch",), (P(), P("batch")), P(),
        _loss_dp, lambda: (_mlp_layers(), _mlp_batch()), outer=_o)
    add(f"nn/loss_fsdp{_sfx}", MD + "8-way fully sharded data parallelism (loss_fsdp)", (4,), ("batch",),
        (P("batch"), P("batch")), P(), _loss_fsdp, lambda: (_mlp_layers(), _mlp_batch()), outer=_o)
    add(f"nn/loss_fsdp_tp{_sfx}", MD + "FSDP + TP, shard_map at the top level (loss_fsdp_tp)", (4, 2),
        ("batch", "feats"), (P(("feats", "batch")), P("batch", "feats")), P(), _loss_fsdp_tp,
        lambda: (_mlp_layers(), _mlp_batch()), outer=_o)
for _name, _loss, _mesh, _axes, _specs in (
        ("loss_dp", _loss_dp, (8,), ("batch",), (P(), P("batch"))),
        ("loss_fsdp", _loss_fsdp, (4,), ("batch",), (P("batch"), P("batch"))),
        ("loss_fsdp_tp", _loss_fsdp_tp, (4, 2), ("batch", "feats"), (P(("feats", "batch")), P("batch", "feats")))):
    add(f"nn/{_name}/layers_as_tuple", MD + f"{_name}, its list of layers passed as a tuple", _mesh, _axes, _specs,
        P(), _loss, lambda: (tuple(_mlp_layers()), _mlp_batch()),
        note="not in the source: the same kernel with its layers in a tuple, which shardtypes can annotate")
add("nn/gemm_tp", MD + "8-way tensor parallelism (gemm_tp)", (8,), ("feats",),
    (P(None, "feats"), P("feats", None), P("feats")), P(None, "feats"), _dense_tp,
    lambda: (normal(16, 16, seed=16), normal(16, 8, seed=17), normal(8, seed=18)))


# SPMD pipeline parallelism (loss_pp): 2 stages of 2 layers each between a first and a last layer,
# 4 microbatches of 2. A GPipe schedule of this corpus' own: every stage sees all microbatches
# (all_gather), activations move one stage on per tick (ppermute), and the last stage's outputs
# are handed back to the stage that holds each microbatch's targets (psum of masked values).
_PP_STAGES, _PP_LAYERS, _PP_MICRO, _PP_FEATS, _PP_N = 2, 4, 2, 8, 8


def _gpipe(layer, stage_layers, local_microbatches):
    stage, stages = lax.axis_index("stages"), lax.axis_size("stages")
    feed = lax.all_gather(local_microbatches, "stages", tiled=True)  # every microbatch, in order
    count = feed.shape[0]
    carried = jnp.zeros_like(feed[0])
    finished = []
    for tick in range(count + stages - 1):
        x = jnp.where(stage == 0, feed[min(tick, count - 1)], carried)
        for k in range(stage_layers[0].shape[0]):
            x = layer(stage_layers[0][k], stage_layers[1][k], x)
        if tick >= stages - 1:
            finished.append(x)  # microbatch tick - (stages - 1), complete on the last stage
        carried = lax.ppermute(x, "stages", [(s, s + 1) for s in range(stages - 1)])
    done = lax.psum(jnp.where(stage == stages - 1, jnp.stack(finished), 0.0), "stages")
    mine = count // stages
    return lax.dynamic_slice_in_dim(done, stage * mine, mine, 0)


def _loss_pp(params, batch):
    x, y = batch
    (w_in, b_in), inner, (w_out, b_out) = params
    micro = x.reshape(-1, _PP_MICRO, x.shape[-1])
    h = jax.nn.relu(micro @ w_in + b_in)
    h = _gpipe(lambda w, b, h: jax.nn.relu(h @ w + b), inner, h)
    predictions = (h @ w_out + b_out).reshape(-1, w_out.shape[-1])
    return lax.pmean(_mse(predictions, y), "stages")


def _pp_args():
    rng = np.random.default_rng(19)
    mk = lambda *s: (rng.standard_normal(s) / np.sqrt(s[0])).astype(np.float32)  # noqa: E731
    first = (mk(6, _PP_FEATS), mk(_PP_FEATS))
    inner = (np.stack([mk(_PP_FEATS, _PP_FEATS) for _ in range(_PP_LAYERS)]),
             np.stack([mk(_PP_FEATS) for _ in range(_PP_LAYERS)]))
    last = (mk(_PP_FEATS, 3), mk(3))
    batch = (rng.standard_normal((_PP_N, 6)).astype(np.float32), rng.standard_normal((_PP_N, 3)).astype(np.float32))
    return (first, inner, last), batch


for _g in (False, True):
    add("nn/loss_pp" + ("/grad" if _g else ""), MD + "SPMD pipeline parallelism (loss_pp)", (2,), ("stages",),
        ((P(), P("stages"), P()), P("stages")), P(), _loss_pp, _pp_args, outer=grad_sum() if _g else None,
        slow=_g)


# =============================================================================================
# Not included, and why.
# =============================================================================================

NOT_INCLUDED: dict[str, str] = {
    **{T + t: "unreduced/reduced specs (P(unreduced=...), to='reduced'): not expressible in shardtypes annotations"
       for t in ("test_matmul_unreduced", "test_matmul_full_unreduced_out", "test_matmul_unreduced_error",
                 "test_shmap_bwd_rep_to_unreduced_check_vma_true", "test_shmap_unreduced_fsdp_custom_vjp_bwd",
                 "test_shmap_unreduced_fsdp_grad", "test_unreduced_psum_fwd_preduced_bwd",
                 "test_preduced_fwd_unreduced_psum_bwd", "test_all_gather_reduced_fwd_unreduced_psum_scatter_bwd",
                 "test_unreduced_psum_scatter_fwd_all_gather_reduced_bwd", "test_sin_unreduced_error",
                 "test_shmap_auto_unreduced_error", "test_eager_reduced_out", "test_eager_reduced_in",
                 "test_eager_unreduced_out", "test_eager_unreduced_in", "test_pcast_to_unreduced",
                 "test_reduced_vary_automatically_inserted", "test_reduced_vary_automatically_inserted_psum",
                 "test_astype_reduced_fwd_unreduced_bwd_shmap", "test_transpose_unreduced_shmap",
                 "test_one_input_sharded_another_reduced_shmap", "test_reduced_pcast_fwd_unreduced_bwd",
                 "test_one_input_sharded_another_reduced_shmap_no_psum", "test_psum_reduced_input",
                 "test_replicated_unreduced_bitcast_check_vma_false", "test_unreduced_replicated_bitcast",
                 "test_sharded_unreduced_roundtrip_check_vma_false", "test_zero_unreduced",
                 "test_unreduced_bwd_manual_reshard_op_shardy", "test_mul_shmap_unreduced",
                 "test_residual_reduced_preserved_via_nospec", "test_reshape_reduced_fwd_unreduced_bwd",
                 "test_check_vma_false_reduced_fwd_no_psum_on_bwd", "test_check_vma_false_unreduced_fwd_psum_on_bwd")},
    **{T + t: "GPU only (psend/precv, pbroadcast has no CPU lowering)"
       for t in ("test_psend_precv_basic_two_gpus", "test_psend_precv_basic_with_no_deadlock_cycle",
                 "test_psend_precv_basic_with_deadlock_cycle", "test_psend_precv_basic_with_dangling_recv",
                 "test_psend_precv_basic_with_non_matching_source_target_pairs",
                 "test_psend_precv_basic_with_duplicate_source_target_pairs", "test_psend_precv_reverse_two_gpus",
                 "test_pbroadcast_partial_replicated", "test_pbroadcast_fully_replicated")},
    **{T + t: "debugging prints / printing values"
       for t in ("test_eager_repr", "test_debug_print_jit", "test_debug_print_jit_partial_auto",
                 "test_debug_print_eager", "test_partial_auto_debug_print", "test_print_inside_shard_map")},
    **{T + t: "internals (jaxpr shape, DCE, residuals, custom primitives, tracing caches, HLO text)"
       for t in ("test_remat_transform", "test_check_rep_false_doesnt_hit_rep_rules",
                 "test_different_devices_shmap_abstract_mesh_cache_hit", "test_rewrite_process_call",
                 "test_rewrite_post_process_call", "test_transpose_float0", "test_pcast_axis_name_is_not_set",
                 "test_post_process_partial_eval_with_scalar_res", "test_pvary_no_op_one_sized_mesh_axis",
                 "test_mat_invarying", "test_mutable_array_arg_basic", "test_mutable_array_internal_basic",
                 "test_eager_shmap_new_ref", "test_full_like_pvary_existing")},
    **{T + t: "errors about shard_map's own calling convention that annotations cannot express (spec trees "
              "that do not match the arguments, *args, empty or abstract meshes without a NamedSharding, "
              "no mesh)"
       for t in ("test_tree_prefix_error", "test_error_for_variable_num_args", "test_varargs_error",
                 "test_shmap_abstract_mesh_errors", "test_no_mesh_context_error", "test_shmap_empty_mesh_error",
                 "test_close_over_explicit_sharded_input_error")},
    **{T + t: "jax.smap (another API; not a shard_map with specs)"
       for t in ("test_smap", "test_smap_explicit", "test_smap_replicated", "test_smap_replicated_sharded",
                 "test_smap_auto_error", "test_smap_auto_explicit", "test_smap_auto_explicit_nest",
                 "test_smap_auto_explicit_nest_inner_none", "test_smap_auto_explicit_nest_mesh_call_time",
                 "test_smap_nested_psum", "test_no_auto_pcast_config")},
    T + "test_partial_auto_of_pjit_different_mesh": "skipped by JAX under Shardy (the default)",
    T + "test_vmap_explicit_mesh_axis_error (second half)": "jax.vmap refuses spmd_axis_name with Explicit-sharded "
        "arguments before it calls the kernel (the first half is included)",
    T + "test_rep_none_canonicalization": "skipped by JAX under Shardy (complex values)",
    T + "test_remove_one_sized_mesh_axis_from_vma": "needs the jax_remove_size_one_mesh_axis_from_type flag",
    T + "test_all_reduce_rgv3_multiple_meshes": "two meshes in one program, TPU-only lowering option",
    "shard_map_test.py::CustomPartitionerTest": "custom partitioning",
    "shard_map_test.py::SmapSystematicTest": "jax.smap",
    "shard_map_test.py::ShardMapSystematicTest::test_grads_closure/test_vmap_closure":
        "closures over the caller's traced values (their function specs are covered by the other draws)",
    MD + "pcast example (out_specs=None)": "returns nothing",
    MD + "loss_tp": "a jit-level loss around gemm_tp, which is included",
}
