"""A shard_map inside a kernel, over more mesh axes (JAX's nested_partial_auto tests): the pass
follows its body on each block, with the new axes manual, and its results back out, so what the
inner body gets wrong is still found, and the outer kernel runs with no KernelPassWarning."""

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from typeguard import TypeCheckError

from shardtypes import KernelPassWarning, f32, typed_shard_map

from conftest import make_mesh, put

X = np.arange(32, dtype=np.float32).reshape(8, 4)


def outer_kernel(inner, inner_in, inner_out, ret, check_vma=True):
    def rows(x: f32[b"rows/i cols"]) -> ret:
        return jax.shard_map(inner, in_specs=inner_in, out_specs=inner_out, axis_names={"j"},
                             check_vma=check_vma)(x)

    return typed_shard_map(rows, axis_names={"i"}, check_vma=check_vma)


@pytest.mark.parametrize("kind", ["auto"])  # (JAX nests shard_maps over Auto axes)
def test_a_nested_shard_map_is_followed(kind):
    mesh = make_mesh(kind, (4, 2), ("i", "j"))
    good = outer_kernel(lambda x: jax.lax.psum(jnp.sum(x, axis=1, keepdims=True), "j"), jax.P(None, "j"), jax.P(),
                        f32[b"rows/i one"])
    with jax.set_mesh(mesh), warnings.catch_warnings():
        warnings.simplefilter("error", KernelPassWarning)
        x = put(mesh, X, "i", None)
        np.testing.assert_allclose(np.asarray(jax.jit(good)(x)), X.sum(1, keepdims=True))


@pytest.mark.parametrize("check_vma", [True, False])
def test_a_missing_psum_in_the_nested_body_is_found(check_vma):
    """The inner body sums its block of 'cols' (split over 'j') and returns it replicated over
    'j': each device's part, not the row sums."""
    mesh = make_mesh("auto", (4, 2), ("i", "j"))
    bad = outer_kernel(lambda x: jnp.sum(x, axis=1, keepdims=True), jax.P(None, "j"), jax.P(),
                       f32[b"rows/i one"], check_vma=check_vma)
    with jax.set_mesh(mesh):
        x = put(mesh, X, "i", None)
        with pytest.raises((TypeCheckError, ValueError)) as found:
            jax.jit(bad)(x)
    if check_vma:  # JAX's own check names it first (out_specs replicate a varying value)
        assert "j" in str(found.value)
    else:
        assert found.type is TypeCheckError
        assert "in kernel" in str(found.value) and "partial sum still owing a sum over mesh axis 'j'" in \
            str(found.value)


def test_a_typed_kernel_inside_a_typed_kernel():
    """Inside a kernel, annotations say the whole layout, the outer kernel's manual axes too
    (``r/i``); the inner kernel's specs name only its own axes."""
    mesh = make_mesh("auto", (4, 2), ("i", "j"))

    def cols(x: f32[b"r/i c/j"]) -> f32[b"r/i one"]:
        return jax.lax.psum(jnp.sum(x, axis=1, keepdims=True), "j")

    def rows(x: f32[b"rows/i cols"]) -> f32[b"rows/i one"]:
        return typed_shard_map(cols, axis_names={"j"})(x)

    with jax.set_mesh(mesh), warnings.catch_warnings():
        warnings.simplefilter("error", KernelPassWarning)
        x = put(mesh, X, "i", None)
        got = jax.jit(typed_shard_map(rows, axis_names={"i"}))(x)
        np.testing.assert_allclose(np.asarray(got), X.sum(1, keepdims=True))
