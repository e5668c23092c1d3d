"""Silent wrong numbers the kernel oracle's extended grammar found (issue 34, item 5), each the
smallest kernel that shows it, with the right kernel beside it: the mistake is refused naming
what it contradicts, the right kernel runs and gives ``jax.shard_map``'s numbers."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from typeguard import TypeCheckError

from shardtypes import f32, typed_shard_map

from conftest import AXIS_TYPES, make_mesh, put

KINDS = sorted(AXIS_TYPES)
X = np.arange(16, dtype=np.float32).reshape(8, 2)


# -- psum_scatter of a value the same on every device ---------------------------------------

@pytest.mark.parametrize("check_vma", [True, False], ids=["vma", "no_vma"])
@pytest.mark.parametrize("kind", KINDS)
def test_a_psum_scatter_of_a_replicated_value_is_refused(kind, check_vma):
    """Each device holds the whole value; the scatter adds the four copies: 4x the block the
    annotation claims. (JAX computes it without complaint on either setting.)"""

    def scatter(x: f32[b"rows cols"]) -> f32[b"rows/d cols"]:
        return jax.lax.psum_scatter(x, "d", scatter_dimension=0, tiled=True)

    mesh = make_mesh(kind)
    with jax.set_mesh(mesh):
        x = put(mesh, X, None, None)
        with pytest.raises(TypeCheckError, match=(
                r"in kernel .*scatter\(\), the return value of .*scatter\(\), annotated f32\[b'rows/d cols'\]: a psum "
                r"\(or psum_scatter\) over mesh axis 'd' added up a value that is already the same on every device "
                r"along it \(argument \"x\" of .*scatter\(\), annotated f32\[b'rows cols'\], through reduce_scatter\), "
                r"counting it once per device; leave that sum out \(for a psum_scatter, take this device's block")):
            jax.jit(typed_shard_map(scatter, check_vma=check_vma))(x)


@pytest.mark.parametrize("kind", KINDS)
def test_a_psum_scatter_of_a_partial_sum_and_its_own_block_of_a_replicated_value_run(kind):
    def scatter(x: f32[b"rows/d cols"]) -> f32[b"cols/d"]:
        return jax.lax.psum_scatter(jnp.sum(x, axis=0), "d", scatter_dimension=0, tiled=True)

    def own_block(x: f32[b"rows cols"]) -> f32[b"rows/d cols"]:
        i = jax.lax.axis_index("d")
        return jax.lax.dynamic_slice_in_dim(x, i * 2, 2, axis=0)

    mesh = make_mesh(kind, (2, 4))
    with jax.set_mesh(mesh):
        x = put(mesh, X[:, :1].repeat(2, 1), "d", None)
        got = jax.jit(typed_shard_map(scatter))(x)
        np.testing.assert_allclose(np.asarray(got), X[:, :1].repeat(2, 1).sum(0))
    mesh = make_mesh(kind)
    with jax.set_mesh(mesh):
        got = jax.jit(typed_shard_map(own_block))(put(mesh, X, None, None))
        np.testing.assert_allclose(np.asarray(got), X)
