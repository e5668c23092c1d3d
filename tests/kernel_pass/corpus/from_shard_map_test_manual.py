"""Corpus entries from JAX's ``tests/shard_map_test.py``, ``ShardMapTest``, second part:
partial-manual kernels (``axis_names``), unmapped (``None``) inputs, the varying-manual-axes
types (``pvary``/``pcast`` errors, vma in types), vmap with ``spmd_axis_name``, and the TPU-only
tests of a lowering option (rgv3), whose kernels run here without the option.
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
    IJ,
    X2,
    XY,
    XYZ,
    T,
    add,
    compose,
    grad_sum,
    ints,
    jax_at_least,
    keys,
    needs_invariant_gather,
    normal,
    ramp,
    remat,
    vary,
    vmapped,
)

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


def swap_carry(x, y):
    (x_, y_), _ = lax.scan(lambda c, _: ((c[1], c[0]), ()), (x, y), (), length=2)
    return x_, y_


def _swap_carry_fixed(x, y):
    return swap_carry(x, vary(y, "i"))


def _rotate3(x, y, z):
    carry, _ = lax.scan(lambda c, _: ((c[2], c[0], c[1]), ()), (x, y, z), (), length=2)
    return carry


add("scan_pvary_errors", T + "test_scan_pvary_errors", (1, 1), ("i", "j"), (P("i"), P()), P("i"), swap_carry,
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
