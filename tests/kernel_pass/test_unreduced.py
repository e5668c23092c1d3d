"""Partial sums typed unreduced for JAX too (issue 17), and kernels returning stacked classes.

Where JAX can type a partial sum (check_vma on, the kernel body staged into a jaxpr under
jax.jit), ``ops.einsum_unreduced`` and ``ops.index_unreduced`` mark their result with
``jax.lax.pcast(..., to='unreduced')``: JAX then refuses nonlinear ops on it, and the kernel says
so in shardtypes' words. Linear code JAX has a rule for keeps working, with the same numbers,
gradients included; eager calls and check_vma=False keep the side table alone.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from typeguard import TypeCheckError

from shardtypes import Array, f32, ops, pytree_dataclass, typed_shard_map
from shardtypes.context import jax_version

from conftest import AXIS_TYPES, make_mesh, put

KINDS = sorted(AXIS_TYPES)
RNG = np.random.default_rng(1717)
X = RNG.standard_normal((4, 8)).astype(np.float32)
W = RNG.standard_normal((8, 8)).astype(np.float32)
EINSUM = "b f/mlp, f/mlp m -> b m"


def square(kind):
    return make_mesh(kind, (2, 2), ("embed", "mlp"))


def close(a, b, tol=1e-5):
    np.testing.assert_allclose(np.asarray(a), b, rtol=tol, atol=tol)


def kernel_of(between, name):
    """A kernel that applies ``between`` to the partial sum before ops.psum pays it."""

    def kernel(x: f32[b"b f/mlp"], w: f32[b"f/mlp m"]) -> f32[b"b m"]:
        u = ops.einsum_unreduced(EINSUM, x, w)
        return ops.psum("b m", between(u), "mlp")

    kernel.__qualname__ = kernel.__name__ = name
    return kernel


def args(mesh):
    return put(mesh, X, None, "mlp"), put(mesh, W, "mlp")


NONLINEAR = {"tanh": jnp.tanh, "exp": jnp.exp}


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("op", sorted(NONLINEAR))
def test_nonlinear_op_on_a_partial_sum_is_a_type_error(kind, op):
    mesh = square(kind)
    with jax.set_mesh(mesh):
        f = jax.jit(typed_shard_map(kernel_of(NONLINEAR[op], f"{op}_then_psum")))
        with pytest.raises(TypeCheckError, match=(
                rf"in kernel {op}_then_psum\(\), a partial sum reached JAX's '{op}', which JAX refuses on it: "
                r"shardtypes.ops.einsum_unreduced\('b f/mlp, f/mlp m -> b m'\) made a partial sum owing a sum "
                r"over mesh axis 'mlp', .*reduce it with shardtypes.ops.psum or shardtypes.ops.psum_scatter "
                r"first")) as caught:
            f(*args(mesh))
        # Chained from JAX's refusal: NotImplementedError up to 0.11, its ShardingTypeError from 0.12.
        cause = caught.value.__cause__
        assert isinstance(cause, Exception) and not isinstance(cause, TypeCheckError)
        assert "unreduced" in str(cause)


def typeof_inside(x: f32[b"b f/mlp"], w: f32[b"f/mlp m"]) -> f32[b"b m"]:
    u = ops.einsum_unreduced(EINSUM, x, w)
    SEEN.append(str(jax.typeof(u)))
    return ops.psum("b m", u, "mlp")


SEEN: list = []


@pytest.mark.parametrize("kind", KINDS)
def test_jax_types_the_partial_sum_unreduced_only_where_it_can(kind):
    mesh = square(kind)
    with jax.set_mesh(mesh):
        for run, check_vma, unreduced in ((jax.jit, True, True), (jax.jit, False, False),
                                          (lambda f: f, True, False)):
            SEEN.clear()
            close(run(typed_shard_map(typeof_inside, check_vma=check_vma))(*args(mesh)), X @ W)
            assert ("{U:mlp}" in SEEN[0]) is unreduced, (check_vma, SEEN)


LINEAR = {
    "u + u": (lambda u: u + u, lambda y: 2 * y, 1e-5),
    "astype": (lambda u: u.astype(jnp.bfloat16).astype(jnp.float32), lambda y: y, 0.1),
    "transpose and reshape": (lambda u: u.T.reshape(2, 16).reshape(8, 4).T, lambda y: y, 1e-5),
}


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("jitted", [True, False], ids=["jit", "eager"])
@pytest.mark.parametrize("name", sorted(LINEAR))
def test_linear_code_on_a_partial_sum_keeps_its_numbers(kind, jitted, name):
    between, expect, tol = LINEAR[name]
    mesh = square(kind)
    with jax.set_mesh(mesh):
        f = typed_shard_map(kernel_of(between, "linear"))
        close((jax.jit(f) if jitted else f)(*args(mesh)), expect(X @ W), tol)


def scatters(x: f32[b"b f/mlp"], w: f32[b"f/mlp m"]) -> f32[b"b m/mlp"]:
    return ops.psum_scatter("b m -> b m/mlp", ops.einsum_unreduced(EINSUM, x, w))


def reduces(x: f32[b"b f/mlp"], w: f32[b"f/mlp m"]) -> f32[b"b m"]:
    return ops.psum("b m", ops.einsum_unreduced(EINSUM, x, w), "mlp")


def looks_up(table: f32[b"V/mlp M"], ids: f32[b"B L"]) -> f32[b"B L M"]:
    found = ops.index_unreduced("[V/mlp] M, B L -> B L M", table, ids.astype(jnp.int32))
    return ops.psum("B L M", found, "mlp")


def looks_up_tanh(table: f32[b"V/mlp M"], ids: f32[b"B L"]) -> f32[b"B L M"]:
    found = ops.index_unreduced("[V/mlp] M, B L -> B L M", table, ids.astype(jnp.int32))
    return ops.psum("B L M", jnp.tanh(found), "mlp")


@pytest.mark.parametrize("kind", KINDS)
def test_reductions_values_and_gradients_are_unchanged(kind):
    mesh = square(kind)
    with jax.set_mesh(mesh):
        x, w = args(mesh)
        close(jax.jit(typed_shard_map(reduces))(x, w), X @ W)
        close(jax.jit(typed_shard_map(scatters))(x, w), X @ W)
        grad = jax.jit(jax.grad(lambda x, w: (typed_shard_map(reduces)(x, w) ** 2).sum(), argnums=(0, 1)))
        gx, gw = grad(x, w)
        close(gx, 2 * (X @ W) @ W.T, 1e-4)
        close(gw, X.T @ (2 * (X @ W)), 1e-4)
        eager = jax.grad(lambda x, w: (typed_shard_map(reduces)(x, w) ** 2).sum())(x, w)  # not staged
        close(eager, 2 * (X @ W) @ W.T, 1e-4)
        table = RNG.standard_normal((8, 4)).astype(np.float32)
        ids = RNG.integers(0, 8, (4, 3))
        t, i = put(mesh, table, "mlp"), put(mesh, ids.astype(np.float32))
        close(jax.jit(typed_shard_map(looks_up))(t, i), table[ids])
        with pytest.raises(TypeCheckError, match=(
                r"in kernel looks_up_tanh\(\), a partial sum reached JAX's 'tanh', .*"
                r"shardtypes.ops.index_unreduced\('\[V/mlp\] M, B L -> B L M'\) made a partial sum owing a "
                r"sum over mesh axis 'mlp'")):
            jax.jit(typed_shard_map(looks_up_tanh))(t, i)


REFUSED_LINEAR = {"scale": (lambda u: u * 2.0, r"a JAX operation \(RHS should be reduced"),
                  "matmul": (lambda u: u @ jnp.eye(8, dtype=u.dtype), r"JAX's 'dot_general'"),
                  "negate": (lambda u: -u, r"JAX's 'neg'")}


def jax_refuses(between, mesh) -> bool:
    """Whether JAX itself refuses ``between`` on a value it types unreduced (asked of JAX, not
    assumed: JAX 0.12 takes -u, which 0.9.2 to 0.11.2 refuse)."""
    def plain(x, w):
        u = jax.lax.pcast(jnp.einsum("bf,fm->bm", x, w), "mlp", to="unreduced")
        return jax.lax.psum(between(u), "mlp")

    spec = jax.sharding.PartitionSpec
    try:
        jax.jit(jax.shard_map(plain, mesh=mesh, in_specs=(spec(None, "mlp"), spec("mlp")),
                              out_specs=spec()))(*args(mesh))
    except Exception:  # noqa: BLE001 - which exception JAX raises differs by release
        return True
    return False


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("name", sorted(REFUSED_LINEAR))
def test_linear_ops_jax_has_no_unreduced_rule_for_are_refused_too(kind, name):
    """Where JAX refuses -u, u * 2.0 or u @ w on an unreduced value (all three on JAX 0.9.2 to
    0.11.2; u * 2.0 and u @ w on 0.12), the message says to reduce first; where JAX takes it (-u
    on 0.12), the kernel runs and gives JAX's numbers. Eager calls run either way."""
    between, reached = REFUSED_LINEAR[name]
    mesh = square(kind)
    expected = np.asarray(between(jnp.asarray(X @ W)))
    with jax.set_mesh(mesh):
        if jax_refuses(between, mesh):
            with pytest.raises(TypeCheckError, match=rf"in kernel {name}\(\), a partial sum reached {reached}"):
                jax.jit(typed_shard_map(kernel_of(between, name)))(*args(mesh))
        else:
            close(jax.jit(typed_shard_map(kernel_of(between, name)))(*args(mesh)), expected, 1e-4)
        close(typed_shard_map(kernel_of(between, name))(*args(mesh)), expected, 1e-4)


def test_what_jax_refuses_on_an_unreduced_value_by_release():
    """What the test above meets, stated per release: JAX 0.12 takes negation of an unreduced
    value (its _neg_ur_rule), earlier releases refuse it; all refuse a product with a constant."""
    mesh = square("explicit")
    with jax.set_mesh(mesh):
        assert jax_refuses(lambda u: u * 2.0, mesh)
        assert jax_refuses(lambda u: -u, mesh) == (jax_version() < (0, 12))


@pytest.mark.parametrize("kind", KINDS)
def test_where_jax_cannot_type_it_the_jaxpr_pass_catches_the_nonlinear_misuse(kind):
    """Eager, or check_vma=False (JAX types nothing unreduced there): psum(tanh(partial)) is
    caught by shardtypes' pass over the body's jaxpr, naming the op that made the partial sum."""
    mesh = square(kind)
    message = (r"in kernel tanh_unchecked\(\), a value that is a partial sum still owing a sum over mesh axis "
               r"'mlp' \(made by shardtypes.ops.einsum_unreduced\('b f/mlp, f/mlp m -> b m'\)\) reaches JAX's 'tanh', "
               r"which is not linear")
    with jax.set_mesh(mesh):
        f = kernel_of(jnp.tanh, "tanh_unchecked")
        with pytest.raises(TypeCheckError, match=message):
            jax.jit(typed_shard_map(f, check_vma=False))(*args(mesh))
        with pytest.raises(TypeCheckError, match=message):
            typed_shard_map(f)(*args(mesh))
        with pytest.raises(TypeCheckError, match=message):
            typed_shard_map(f, check_vma=False)(*args(mesh))


# Stacked kernel returns.


@pytree_dataclass
class Layer:
    w: f32[b"M F/t"]
    b: f32[b"F/t"]


def doubled(layers: Array["layers", Layer]) -> Array["layers", Layer]:
    return Layer(w=layers.w * 2, b=layers.b + 1)


def wrong_layer(layers: Array["layers", Layer]) -> Array["layers", Layer]:
    return Layer(w=layers.w[0], b=layers.b)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("jitted", [True, False], ids=["jit", "eager"])
def test_a_kernel_returns_stacked_layers(kind, jitted):
    mesh = make_mesh(kind)
    w = RNG.standard_normal((3, 4, 8)).astype(np.float32)
    b = RNG.standard_normal((3, 8)).astype(np.float32)
    with jax.set_mesh(mesh):
        layers = Layer(w=put(mesh, w, None, None, "t"), b=put(mesh, b, None, "t"))
        f = typed_shard_map(doubled)
        out = (jax.jit(f) if jitted else f)(layers)
        assert isinstance(out, Layer)
        close(out.w, 2 * w)
        close(out.b, b + 1)
        assert out.w.sharding.spec == jax.sharding.PartitionSpec(None, None, "t")
        with pytest.raises(TypeCheckError, match=r"wrong_layer\(\).*w"):
            (jax.jit(typed_shard_map(wrong_layer)) if jitted else typed_shard_map(wrong_layer))(layers)


def returns_partial(x: f32[b"b f/mlp"], w: f32[b"f/mlp m"]) -> f32[b"b m"]:
    return ops.einsum_unreduced(EINSUM, x, w)


@pytest.mark.parametrize("kind", KINDS)
def test_shardtypes_own_errors_on_a_jax_typed_partial_sum_stay_as_they_are(kind):
    mesh = square(kind)
    with jax.set_mesh(mesh):
        with pytest.raises(TypeCheckError) as caught:
            jax.jit(typed_shard_map(returns_partial))(*args(mesh))
    assert str(caught.value).startswith("the return value"), str(caught.value)
    assert "owing a sum over mesh axis 'mlp'" in str(caught.value) and "reached" not in str(caught.value)
