"""A kernel's result dims: named like a dim of its arguments, a dim claims that dim's global value
and is held to it; named otherwise (a name of its own, or a fixed size), it is what the
annotation declares: out_specs put the devices' blocks side by side along it, whatever each block
holds (a copy, a per-device sum, a sum of blocks). What contradicts an annotation is refused either
way: a partial sum returned as replicated over the axis it owes, a value differing along an axis the
annotation does not name."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from typeguard import TypeCheckError

from shardtypes import f32, typed_shard_map

from conftest import AXIS_TYPES, make_mesh, put

KINDS = sorted(AXIS_TYPES)
X = np.arange(16, dtype=np.float32).reshape(8, 2)


def run(kind, kernel, *, check_vma=True):
    mesh = make_mesh(kind, (4, 2), ("i", "j"))
    with jax.set_mesh(mesh):
        x = put(mesh, X, "i", None)
        return np.asarray(jax.jit(typed_shard_map(kernel, check_vma=check_vma))(x))


def reference(body, in_spec, out_spec, kind="auto", check_vma=True):
    mesh = make_mesh(kind, (4, 2), ("i", "j"))
    with jax.set_mesh(mesh):
        x = put(mesh, X, *in_spec)
        return np.asarray(jax.jit(jax.shard_map(body, in_specs=jax.P(*in_spec), out_specs=jax.P(*out_spec),
                                                check_vma=check_vma))(x))


@pytest.mark.parametrize("kind", KINDS)
def test_a_psum_of_a_split_dims_blocks_into_a_dim_of_its_own_runs(kind):
    """The tutorial's first psum: each device's block of rows added to the others'."""

    def block_sum(x: f32[b"rows/i cols"]) -> f32[b"block cols"]:
        return jax.lax.psum(x, "i")

    got = run(kind, block_sum)
    np.testing.assert_allclose(got, reference(lambda x: jax.lax.psum(x, "i"), ("i", None), (None, None)))
    np.testing.assert_allclose(got, X.reshape(4, 2, 2).sum(0))


@pytest.mark.parametrize("kind", KINDS)
def test_a_psum_of_a_split_dims_blocks_named_like_an_arguments_dim_is_refused(kind):
    """Named like a dim of the arguments (here one of the same size, so the size check passes),
    the result claims that dim's global value, which a sum of blocks is not."""

    def block_sum(x: f32[b"rows/i cols"], y: f32[b"n cols"]) -> f32[b"n cols"]:
        return jax.lax.psum(x, "i")

    mesh = make_mesh(kind, (4, 2), ("i", "j"))
    with jax.set_mesh(mesh):
        x, y = put(mesh, X, "i", None), put(mesh, X[:2], None, None)
        with pytest.raises(TypeCheckError, match=r"the return value of .*block_sum\(\), annotated "
                                                 r"f32\[b'n cols'\]: it is a sum of different blocks of a dim"):
            jax.jit(typed_shard_map(block_sum))(x, y)


@pytest.mark.parametrize("kind", KINDS)
def test_per_device_sums_side_by_side_in_a_dim_of_their_own_run(kind):
    def local_sums(x: f32[b"rows/i cols"]) -> f32[b"device/i cols"]:
        return jnp.sum(x, axis=0, keepdims=True)

    got = run(kind, local_sums)
    np.testing.assert_allclose(got, X.reshape(4, 2, 2).sum(1))


@pytest.mark.parametrize("kind", KINDS)
def test_a_partial_sum_returned_replicated_over_the_axis_it_owes_is_refused(kind):
    """Names of its own do not excuse a contradiction: nothing in the annotation is split over
    'i', so each device's part would be taken for the whole (device 0's, with check_vma off)."""

    def local_total(x: f32[b"rows/i cols"]) -> f32[b"total"]:
        return jnp.sum(x, axis=0)

    for check_vma in (True, False):
        with pytest.raises(TypeCheckError, match=r"local_total\(\), annotated f32\[b'total'\]: it is a partial sum "
                                                 r"still owing a sum over mesh axis 'i'"):
            run(kind, local_total, check_vma=check_vma)


@pytest.mark.parametrize("kind", KINDS)
def test_a_cumsum_over_a_split_dim(kind):
    """Per-device prefixes side by side in a dim of their own are what the annotation says; the
    same prefixes returned as the split dim itself still owe the blocks before them."""

    def own(x: f32[b"rows/i cols"]) -> f32[b"prefix/i cols"]:
        return jnp.cumsum(x, axis=0)

    def same(x: f32[b"rows/i cols"]) -> f32[b"rows/i cols"]:
        return jnp.cumsum(x, axis=0)

    np.testing.assert_allclose(run(kind, own), np.cumsum(X.reshape(4, 2, 2), axis=1).reshape(8, 2))
    with pytest.raises(TypeCheckError, match=r"same\(\), annotated f32\[b'rows/i cols'\]: it is a prefix over a "
                                             r"split dim still owing the total of the blocks before it"):
        run(kind, same)


@pytest.mark.parametrize("kind", KINDS)
def test_copies_side_by_side(kind):
    """A gathered (replicated) value put side by side along a dim of its own is the copies JAX
    returns; named like the gathered dim, the annotation claims each device holds a block of it."""

    def tiled(x: f32[b"rows/i cols"]) -> f32[b"copies/i cols"]:
        return jax.lax.all_gather(x, "i", tiled=True)

    def claimed(x: f32[b"rows/i cols"]) -> f32[b"rows/i cols"]:
        return jax.lax.all_gather(x, "i", tiled=True)

    np.testing.assert_allclose(run(kind, tiled), np.concatenate([X] * 4))
    with pytest.raises(TypeCheckError, match=r"claimed\(\) is not f32\[b'rows/i cols'\]: dimension 'rows' is 32 "
                                             r"here \(dim 0\) but was bound to 8 by argument \"x\""):
        run(kind, claimed)


@pytest.mark.parametrize("kind", KINDS)
def test_a_value_differing_along_an_axis_the_annotation_does_not_name_is_refused(kind):
    """The block of 'rows' returned where no dim is split over 'i' (check_vma off, where JAX
    would return device 0's block)."""

    def dropped(x: f32[b"rows/i cols"]) -> f32[b"mine cols"]:
        return x

    with pytest.raises(TypeCheckError, match=r"dropped\(\) is not f32\[b'mine cols'\]: it is laid out P\('i', None\) "
                                             r"\(as argument \"x\""):
        run(kind, dropped, check_vma=False)


@pytest.mark.parametrize("kind", KINDS)
def test_an_argument_returned_along_other_dims_of_its_own(kind):
    """JAX's systematic 'id' kernels: the blocks re-assembled along another dim."""

    def moved(x: f32[b"rows/i cols"]) -> f32[b"r c/i"]:
        return x

    got = run(kind, moved)
    np.testing.assert_allclose(got, reference(lambda x: x, ("i", None), (None, "i")))


@pytest.mark.parametrize("kind", KINDS)
def test_a_nonlinear_function_of_a_per_device_sum_kept_per_device_runs(kind):
    """JAX's remat test: sin of each device's own sum, the values side by side in the result."""

    def per_device(x: f32[b"rows/i cols"]) -> f32[b"device/i"]:
        return jnp.sin(jnp.sum(x))[None]

    np.testing.assert_allclose(run(kind, per_device), np.sin(X.reshape(4, 4).sum(1)), rtol=1e-6)


@pytest.mark.parametrize("kind", KINDS)
def test_a_nonlinear_function_of_a_partial_sum_combined_or_returned_whole_is_refused(kind):
    """sin of each part, then added up (or returned as if it were the whole): not sin of the sum."""

    def summed_after(x: f32[b"rows/i cols"]) -> f32[b""]:
        return jax.lax.psum(jnp.sin(jnp.sum(x)), "i")

    def returned_whole(x: f32[b"rows/i cols"]) -> f32[b""]:
        return jnp.sin(jnp.sum(x))

    with pytest.raises(TypeCheckError, match=r"summed_after\(\), a value that is a partial sum still owing a sum "
                                             r"over mesh axis 'i' .* reaches JAX's 'sin', which is not linear.*; the "
                                             r"per-device values are then combined over mesh axis 'i'"):
        run(kind, summed_after)
    for check_vma in (True, False):
        with pytest.raises(TypeCheckError, match=r"reaches JAX's 'sin', which is not linear.*the per-device values "
                                                 r"then reach the return value of .*returned_whole\(\)"):
            run(kind, returned_whole, check_vma=check_vma)


@pytest.mark.parametrize("kind", KINDS)
def test_blocks_of_different_parts_multiplied(kind):
    """JAX's systematic dot test contracts a dim split over 'i' in one operand and over 'j' in
    the other: each device's product is its own; kept per device it runs, added up it is refused."""
    mesh = make_mesh(kind, (4, 2), ("i", "j"))
    a = np.arange(32, dtype=np.float32).reshape(4, 8)
    b = np.arange(8, dtype=np.float32).reshape(4, 2)

    def per_device(x: f32[b"m k/i"], y: f32[b"k2/j n"]) -> f32[b"p/i q/j"]:
        return x @ y

    def added(x: f32[b"m k/i"], y: f32[b"k2/j n"]) -> f32[b"m n"]:
        return jax.lax.psum(x @ y, ("i", "j"))

    with jax.set_mesh(mesh):
        x, y = put(mesh, a, None, "i"), put(mesh, b, "j", None)
        ref = jax.jit(jax.shard_map(lambda x, y: x @ y, in_specs=(jax.P(None, "i"), jax.P("j", None)),
                                    out_specs=jax.P("i", "j")))(x, y)
        np.testing.assert_allclose(np.asarray(jax.jit(typed_shard_map(per_device))(x, y)), np.asarray(ref))
        with pytest.raises(TypeCheckError, match=r"contracts dim 1 of an operand laid out P\(None, 'i'\) .* with dim 0 "
                                                 r"of one laid out P\('j', None\) .*each device multiplies blocks of "
                                                 r"different parts of the dim; the per-device values are then combined"):
            jax.jit(typed_shard_map(added))(x, y)


@pytest.mark.parametrize("kind", KINDS)
def test_a_gather_after_blocks_were_combined_is_refused(kind):
    """Found by the oracle's extended grammar: pmax over the axis the rows are split over combines
    different rows' blocks; gathering them back along the rows does not make them the rows' maxima."""

    def gathered(x: f32[b"rows/i cols"]) -> f32[b"rows one"]:
        folded = jax.lax.pmax(jnp.max(x, axis=1, keepdims=True), "i")
        return jax.lax.all_gather(folded, "i", axis=0, tiled=True)

    with pytest.raises(TypeCheckError, match=r"gathered\(\), annotated f32\[b'rows one'\]: it is a maximum of "
                                             r"different blocks of a dim"):
        run(kind, gathered)
