"""What each JAX release puts in a kernel's jaxpr, followed by the kernel pass on every CI JAX.

Every public ``jax.lax`` collective, and every ``jax.numpy``/``jax.nn`` function the docs' kernels
use, is traced inside a typed kernel, under ``jax.jit`` and ``jax.grad``, on both axis types; a
``KernelPassWarning`` (the pass stepping aside on a primitive or a params layout it does not know)
fails the test. A release that renames a primitive or adds one turns this red in CI, the day CI
runs on it. Features a release lacks (``jax.lax.psum_scatter_start`` before 0.12, ``pcast`` before
0.10) are asked of JAX, never read from its version string.

Also here: JAX 0.12's regression on an exact GELU under ``jax.grad`` inside ``shard_map``, said in
shardtypes' words with what works, and shown to run on the releases without it.
"""

import warnings
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from typeguard import TypeCheckError

from shardtypes import KernelPassWarning, f32, i32, typed_shard_map
from shardtypes.context import jax_version
from shardtypes.context.compat import invariant_gather_native

from conftest import AXIS_TYPES, make_mesh, put

KINDS = sorted(AXIS_TYPES)
N, M = 16, 8  # x: f32[b'n/d m'] on a (d=4, t=2) mesh: local blocks of (4, 8)
X = np.random.default_rng(33).standard_normal((N, M)).astype(np.float32)


def collective_cases() -> dict:
    """name -> (kernel body over x, the result's annotation, differentiable; None: traced only)."""
    lax = jax.lax
    cases = {
        "psum": (lambda x: lax.psum(jnp.sum(x, 0), "d"), f32[b"m"], True),
        "pmax": (lambda x: lax.pmax(jnp.max(x, 0), "d"), f32[b"m"], False),  # (JAX has no derivative)
        "pmin": (lambda x: lax.pmin(jnp.min(x, 0), "d"), f32[b"m"], False),
        "pmean": (lambda x: lax.pmean(jnp.mean(x, 0), "d"), f32[b"m"], True),
        "all_gather tiled": (lambda x: lax.all_gather(x, "d", axis=0, tiled=True), f32[b"n m"], True),
        "all_gather stacked": (lambda x: lax.all_gather(x, "d"), f32[b"g k m"], True),
        "psum_scatter": (lambda x: lax.psum_scatter(x.T @ x, "d", scatter_dimension=0, tiled=True),
                         f32[b"m/d m"], True),
        "all_to_all": (lambda x: lax.all_to_all(x, "d", 1, 0, tiled=True), f32[b"n m/d"], True),
        "ppermute": (lambda x: lax.ppermute(x, "d", [(i, (i + 1) % 4) for i in range(4)]), f32[b"r/d m"], True),
        "pshuffle": (lambda x: lax.pshuffle(x, "d", [1, 2, 3, 0]), f32[b"r/d m"], True),
        "axis_index": (lambda x: x + lax.axis_index("d"), f32[b"n/d m"], True),
        "axis_size": (lambda x: x * lax.axis_size("d"), f32[b"n/d m"], True),
    }
    if hasattr(lax, "pbroadcast"):  # (traced only: XLA's CPU backend has no lowering for it)
        cases["pbroadcast"] = (lambda x: lax.pbroadcast(x, "d", source=1), f32[b"r/d m"], None)
    if invariant_gather_native():  # JAX 0.10 on: a gather JAX types invariant
        cases["all_gather invariant"] = (lambda x: lax.all_gather(x, "d", axis=0, tiled=True, to="invarying"),
                                         f32[b"n m"], True)
    if hasattr(lax, "pcast"):
        cases["pcast to varying"] = (lambda x: x + lax.pcast(jnp.ones((M,), x.dtype), "d", to="varying"),
                                     f32[b"n/d m"], True)
    if hasattr(lax, "psum_scatter_start"):  # JAX 0.12's async reduce-scatter
        def scatter_async(x):
            future = lax.psum_scatter_start(x.T @ x, "d", scatter_dimension=0, tiled=True)
            return future.done() if hasattr(future, "done") else lax.psum_scatter_done(future)

        cases["psum_scatter_start"] = (scatter_async, f32[b"m/d m"], False)
    return cases


def numpy_cases() -> dict:
    """The jax.numpy and jax.nn functions of the docs' kernels, on a block with its own dims."""
    return {
        "elementwise": (lambda x: jnp.tanh(jnp.exp(-x * x)) + jnp.sqrt(jnp.abs(x)) * jnp.sin(x) - jnp.cos(x)
                        + jnp.log(1 + x * x) + jnp.reciprocal(2 + x * x) + jax.lax.rsqrt(1 + x * x), f32[b"n/d m"]),
        "activations": (lambda x: jax.nn.gelu(x, approximate=True) + jax.nn.relu(x) + jax.nn.silu(x)
                        + jax.nn.swish(x) + jnp.minimum(x, 0.0) + jnp.where(x > 0, x, 0.0), f32[b"n/d m"]),
        "softmax": (lambda x: jax.nn.softmax(x, axis=-1), f32[b"n/d m"]),
        "einsum, dot, matmul": (lambda x: jnp.einsum("nm,mk->nk", x, jnp.eye(M) * 2) + jnp.dot(x, jnp.eye(M))
                                + jnp.matmul(x, jnp.ones((M, M))), f32[b"n/d k"]),
        "stop_gradient": (lambda x: x * jax.lax.stop_gradient(x), f32[b"n/d m"]),
        "cumsum, tril": (lambda x: jnp.cumsum(x, axis=1) + jnp.tril(jnp.ones((4, M)), 0) * x, f32[b"n/d m"]),
        "concatenate, split, stack": (lambda x: jnp.concatenate(jnp.split(x, 2, axis=1), axis=1)
                                      + jnp.stack([x, x]).sum(0), f32[b"n/d m"]),
        "pad, tile, take": (lambda x: jnp.pad(x, ((0, 0), (0, 2)))[:, :M] + jnp.tile(x[:, :4], (1, 2))
                            + jnp.take(x, jnp.arange(M)[::-1], axis=1), f32[b"n/d m"]),
        "sort, argmax": (lambda x: jnp.sort(x, axis=1) + jnp.argmax(x, axis=1)[:, None].astype(x.dtype),
                         f32[b"n/d m"]),
        "one_hot, zeros_like": (lambda x: jax.nn.one_hot(jnp.argmax(x, axis=1), M) + jnp.zeros_like(x),
                                f32[b"n/d m"]),
        "dot_product_attention": (lambda x: jax.nn.dot_product_attention(
            x.reshape(1, 4, 2, 4), x.reshape(1, 4, 2, 4), x.reshape(1, 4, 2, 4)).reshape(4, M), f32[b"n/d m"]),
    }


def kernel(body, result, check_vma=True):
    def k(x: f32[b"n/d m"]):
        return body(x)

    k.__annotations__["return"] = result
    return typed_shard_map(k, check_vma=check_vma)


def run_strictly(fn, *args):
    """``fn(*args)``, a KernelPassWarning an error (whatever the suite's filters say)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", KernelPassWarning)
        return fn(*args)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("name", sorted(collective_cases()))
def test_each_public_collective_is_followed(kind, name):
    body, result, differentiable = collective_cases()[name]
    mesh = make_mesh(kind, (4, 2), ("d", "t"))
    with jax.set_mesh(mesh):
        x = put(mesh, X, "d")
        if differentiable is None:
            for check_vma in (True, False):
                run_strictly(jax.jit(kernel(body, result, check_vma)).trace, x)
            return
        for check_vma in (True, False):
            plain = jax.shard_map(body, mesh=mesh, in_specs=jax.P("d"), out_specs=_spec(result), check_vma=check_vma)
            f = kernel(body, result, check_vma)
            try:
                reference = jax.jit(plain)(x)
            except ValueError as e:  # JAX refuses it (a gathered value typed varying under P()): so do we
                assert "out_specs" in str(e)
                with pytest.raises(ValueError, match="out_specs"):
                    run_strictly(jax.jit(f), x)
                continue
            np.testing.assert_allclose(np.asarray(run_strictly(jax.jit(f), x)), np.asarray(reference), rtol=1e-5)
            if differentiable:
                run_strictly(jax.jit(jax.grad(lambda x: f(x).sum())), x)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("name", sorted(numpy_cases()))
def test_the_docs_numpy_functions_are_followed(kind, name):
    body, result = numpy_cases()[name]
    mesh = make_mesh(kind, (4, 2), ("d", "t"))
    with jax.set_mesh(mesh):
        x = put(mesh, X, "d")
        f = kernel(body, result)
        out = run_strictly(jax.jit(f), x)
        expected = np.concatenate([np.asarray(body(jnp.asarray(X[i * 4:(i + 1) * 4]))) for i in range(4)])
        np.testing.assert_allclose(np.asarray(out), expected, rtol=1e-4, atol=1e-5)
        if name not in ("sort, argmax", "one_hot, zeros_like"):
            run_strictly(jax.jit(jax.grad(lambda x: f(x).sum())), x)


def test_integer_arrays_and_cumsum_under_scan_are_followed():
    """A scan carrying a running total, with an integer argument: scan's params by release."""
    mesh = make_mesh("explicit", (4, 2), ("d", "t"))

    @partial(typed_shard_map, check_vma=False)  # (a carry from zeros: JAX would want it pcast)
    def running(x: f32[b"n/d m"], k: i32[b"n/d"]) -> f32[b"n/d m"]:
        def step(c, row):
            return c + row, c + row

        _, out = jax.lax.scan(step, jnp.zeros((M,), x.dtype), x)
        return out + k[:, None]

    with jax.set_mesh(mesh):
        out = run_strictly(jax.jit(running), put(mesh, X, "d"), put(mesh, np.arange(N, dtype=np.int32), "d"))
    expected = np.concatenate([np.cumsum(X[i * 4:(i + 1) * 4], 0) for i in range(4)]) + np.arange(N)[:, None]
    np.testing.assert_allclose(np.asarray(out), expected, rtol=1e-5)


def _spec(result):
    from shardtypes import make_partition_specs

    return make_partition_specs(result)


# -- JAX 0.12's GELU regression --------------------------------------------------------------

def exact_gelu(x: f32[b"n/d m"]) -> f32[b"n/d m"]:
    return jax.nn.gelu(x, approximate=False)


def jax_differentiates_exact_gelu(mesh) -> bool:
    """Whether JAX itself takes jax.grad of an exact GELU inside shard_map with check_vma on."""
    plain = jax.shard_map(lambda x: jax.nn.gelu(x, approximate=False), mesh=mesh, in_specs=jax.P("d"),
                          out_specs=jax.P("d"))
    try:
        jax.grad(lambda x: plain(x).sum())(put(mesh, X, "d"))
    except ValueError:
        return False
    return True


@pytest.mark.parametrize("kind", KINDS)
def test_exact_gelu_under_grad_says_what_works_where_jax_cannot(kind):
    mesh = make_mesh(kind, (4, 2), ("d", "t"))
    expected = jax.grad(lambda x: jax.nn.gelu(x, approximate=False).sum())(jnp.asarray(X))
    with jax.set_mesh(mesh):
        x = put(mesh, X, "d")
        checked = typed_shard_map(exact_gelu)
        if jax_differentiates_exact_gelu(mesh):
            np.testing.assert_allclose(np.asarray(jax.grad(lambda x: checked(x).sum())(x)), expected, rtol=1e-5)
        else:
            with pytest.raises(TypeCheckError, match=(
                    rf"in kernel exact_gelu\(\), JAX {jax.__version__} cannot differentiate an exact GELU .*"
                    r"This is JAX's bug, not the kernel's. What works: jax.nn.gelu\(x, approximate=True\) "
                    r"\(the tanh form\), or typed_shard_map\(..., check_vma=False\)")) as caught:
                jax.grad(lambda x: checked(x).sum())(x)
            assert "requires varying manual axes" in str(caught.value.__cause__)  # JAX's own, chained
        # Both ways out run, on every release.
        unchecked_vma = typed_shard_map(exact_gelu, check_vma=False)
        np.testing.assert_allclose(np.asarray(jax.grad(lambda x: unchecked_vma(x).sum())(x)), expected, rtol=1e-5)

        def tanh_gelu(x: f32[b"n/d m"]) -> f32[b"n/d m"]:
            return jax.nn.gelu(x, approximate=True)

        approx = typed_shard_map(tanh_gelu)
        close_to = jax.grad(lambda x: jax.nn.gelu(x, approximate=True).sum())(jnp.asarray(X))
        np.testing.assert_allclose(np.asarray(jax.grad(lambda x: approx(x).sum())(x)), close_to, rtol=1e-5)


def test_which_releases_have_the_gelu_regression():
    """Stated, not assumed: JAX 0.12 has it; 0.9.2 to 0.11.2 differentiate an exact GELU."""
    mesh = make_mesh("explicit", (4, 2), ("d", "t"))
    with jax.set_mesh(mesh):
        has_it = not jax_differentiates_exact_gelu(mesh)
    if jax_version() < (0, 12):
        assert not has_it
    elif jax_version()[:2] == (0, 12):
        assert has_it
