"""Corpus entries from JAX's ``tests/shard_map_test.py``, ``ShardMapTest`` (and one test of
``SdyIntegrationTest``): full-manual kernels. Collectives, the replication rules of scan, while,
cond and switch, eager execution, PRNG keys, custom derivatives, transposes and residuals.

The partial-manual kernels of the same class are in ``from_shard_map_test_manual``.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import PartitionSpec as P

from corpus_kit import (
    I4,
    SAVE_ALL,
    X2,
    X4,
    X8,
    XY,
    XYZ,
    T,
    add,
    compose,
    grad_sum,
    ints,
    jax_at_least,
    jvp_self,
    keys,
    linearize_self,
    needs_invariant_gather,
    normal,
    ramp,
    remat,
    tag,
    value_and_grad_sum,
    vary,
    vjp_with,
    vmapped,
)

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


def ring(x, axis):
    n = lax.axis_size(axis)
    return lax.ppermute(x, axis, perm=[(j, (j + 1) % n) for j in range(n)])


add("collective_permute", T + "test_collective_permute", *X8, (P("x", None),), P("x", None),
    lambda a: ring(a, "x"), lambda: (ints(8, 8),))
add("shardy_collective_permute", "shard_map_test.py::SdyIntegrationTest::test_shardy_collective_permute",
    *X2, (P("x", None),), P("x", None), lambda a: ring(a, "x"), lambda: (ints(8, 8),))

add("collective_permute_with_multiple_axis_names", T + "test_collective_permute_with_multiple_axis_names",
    *XYZ, (P("x", ("y", "z")),), P("x", ("y", "z")),
    lambda a: (ring(a, ("x", "y")), ring(a, ("y", "z"))), lambda: (ints(4, 16),))

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
