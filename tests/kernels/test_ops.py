"""The typed collectives of shardtypes.ops, inside typed_shard_map kernels under jax.jit: what they
compute. all_gather, psum_scatter, all_to_all, psum, pmean, ppermute, einsum_unreduced,
index_unreduced (both seqax forms: the table's first dim in brackets with a cross product, and
the general one with the bracketed dim anywhere and shared dims batched), axis_index and
axis_size: the numbers against unsharded references, on Explicit and Auto meshes.

The errors (operands that do not match their spec, malformed spec strings, wrong axis
arguments, mesh axes outside a shard_map) are in test_ops_errors.py. Kernels are defined once
at module level and jitted, so each compiles once per mesh.
"""

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec as P

from shardtypes import bf16, f32, i32, ops, typed_shard_map

from conftest import make_mesh, put
from ops_kit import (
    ACT,
    CUBE,
    IDS,
    IDS16,
    LOGP,
    MAT,
    RING,
    RNG,
    TABLE,
    TABLE16,
    TARGETS,
    VEC,
    WEIGHT,
    B,
    V,
    assert_layout,
    close,
    kernel,
    run_op,
)

# ---------------------------------------------------------------------------------------------
# all_gather
#
# A gathered result is replicated over the gathered axes, but jax.lax.all_gather types it as
# varying over them: kernels that return one replicated gather with invariant=True, with the vma
# check on (tests/kernel_pass/test_invariant_gather.py covers gradients and errors).


@kernel
def gather_one(x: f32[b"V/t M/d"]) -> f32[b"V/t M"]:
    return ops.all_gather("V/t M/d -> V/t M", x, invariant=True)


@kernel
def gather_two(x: f32[b"M/d/t"]) -> f32[b"M"]:
    return ops.all_gather("M/d/t -> M", x, invariant=True)


@kernel
def gather_two_reversed(x: f32[b"M/t/d"]) -> f32[b"M"]:
    return ops.all_gather("M/t/d -> M", x, invariant=True)


@kernel
def gather_trailing(x: f32[b"M/d/t"]) -> f32[b"M/d"]:
    return ops.all_gather("M/d/t -> M/d", x, invariant=True)


@kernel
def gather_both_dims(x: f32[b"V/t M/d"]) -> f32[b"V M"]:
    return ops.all_gather("V/t M/d -> V M", x, invariant=True)


def test_all_gather_one_axis(mesh):
    with jax.set_mesh(mesh):
        out = gather_one(put(mesh, MAT, "t", "d"))
    close(out, MAT, 0)
    assert_layout(out, mesh, "t", None)


def test_all_gather_two_axes_on_one_dim(mesh):
    with jax.set_mesh(mesh):
        out = gather_two(put(mesh, VEC, ("d", "t")))
        reversed_out = gather_two_reversed(put(mesh, VEC, ("t", "d")))
        trailing = gather_trailing(put(mesh, VEC, ("d", "t")))
    close(out, VEC, 0)
    close(reversed_out, VEC, 0)
    close(trailing, VEC, 0)
    assert_layout(out, mesh, None)
    assert_layout(trailing, mesh, "d")


def test_all_gather_two_dims(mesh):
    with jax.set_mesh(mesh):
        out = gather_both_dims(put(mesh, MAT, "t", "d"))
    close(out, MAT, 0)
    assert_layout(out, mesh, None, None)


# ---------------------------------------------------------------------------------------------
# psum_scatter


@kernel
def scatter_copies(x: f32[b"B/d L M"]) -> f32[b"B/d L M/t"]:
    return ops.psum_scatter("B/d L M -> B/d L M/t", x)


@kernel
def scatter_varying(x: f32[b"B/d L M"]) -> f32[b"B/d L M/t"]:
    # Device t=i contributes (i+1) * x: the sum over t is 3 * x.
    x = x * (jax.lax.axis_index("t") + 1).astype(x.dtype)
    return ops.psum_scatter("B/d L M -> B/d L M/t", x)


@kernel
def scatter_two_axes(x: f32[b"L M"]) -> f32[b"L M/d/t"]:
    return ops.psum_scatter("L M -> L M/d/t", x)


@kernel
def scatter_two_dims(x: f32[b"A C"]) -> f32[b"A/d C/t"]:
    # Device (d=i, t=j) contributes (1 + i + 10 j) * x: the sum over both axes is 88 * x.
    weight = 1 + jax.lax.axis_index("d") + 10 * jax.lax.axis_index("t")
    return ops.psum_scatter("A C -> A/d C/t", x * weight.astype(x.dtype))


@kernel
def matmul_scatter(x: f32[b"B/d L M/t"], w: f32[b"M/t F"]) -> f32[b"B/d L F/t"]:
    partial = ops.einsum_unreduced("B/d L M/t, M/t F -> B/d L F", x, w)
    return ops.psum_scatter("B/d L F -> B/d L F/t", partial)


def test_psum_scatter_sums_over_the_new_axis(mesh):
    with jax.set_mesh(mesh):
        copies = scatter_copies(put(mesh, ACT, "d"))
        varying = scatter_varying(put(mesh, ACT, "d"))
    close(copies, 2 * ACT)  # the sum of the two (equal) copies over t
    close(varying, 3 * ACT)
    assert_layout(copies, mesh, "d", None, "t")
    assert_layout(varying, mesh, "d", None, "t")


def test_psum_scatter_over_two_axes(mesh):
    x = ACT[0, :, :].repeat(2, axis=1)  # L=3, M=8 divides d*t
    with jax.set_mesh(mesh):
        out = scatter_two_axes(put(mesh, x))
    close(out, 8 * x)
    assert_layout(out, mesh, None, ("d", "t"))


def test_psum_scatter_over_two_dims_sums_over_every_axis(mesh):
    """seqax's 'A B -> A/d B/t': each dim scattered over the axes it gains, summed over all."""
    x = MAT[:, :8]
    with jax.set_mesh(mesh):
        out = scatter_two_dims(put(mesh, x))
    d, t = mesh.shape["d"], mesh.shape["t"]
    total = sum(1 + i + 10 * j for i in range(d) for j in range(t))
    close(out, total * x)
    assert_layout(out, mesh, "d", "t")


def test_psum_scatter_reduces_unreduced_einsum(mesh):
    with jax.set_mesh(mesh):
        out = matmul_scatter(put(mesh, ACT, "d", None, "t"), put(mesh, WEIGHT, "t"))
    close(out, np.einsum("blm,mf->blf", ACT, WEIGHT))
    assert_layout(out, mesh, "d", None, "t")


# ---------------------------------------------------------------------------------------------
# einsum_unreduced


@kernel
def project(x: f32[b"B/d L M"], w: f32[b"M F/t"]) -> f32[b"B/d L F/t"]:
    return ops.einsum_unreduced("B/d L M, M F/t -> B/d L F/t", x, w)


@kernel
def project_sharded_contraction(x: f32[b"B/d L M/t"], w: f32[b"M/t F"]) -> f32[b"B/d L F"]:
    return jax.lax.psum(ops.einsum_unreduced("B/d L M/t, M/t F -> B/d L F", x, w), "t")


@kernel
def project_bf16(x: bf16[b"B/d L M"], w: bf16[b"M F/t"]) -> f32[b"B/d L F/t"]:
    return ops.einsum_unreduced(
        "B/d L M, M F/t -> B/d L F/t", x, w, preferred_element_type=jnp.float32
    )


def test_einsum_unreduced(mesh):
    with jax.set_mesh(mesh):
        out = project(put(mesh, ACT, "d"), put(mesh, WEIGHT, None, "t"))
    close(out, np.einsum("blm,mf->blf", ACT, WEIGHT))
    assert_layout(out, mesh, "d", None, "t")


def test_einsum_unreduced_sharded_contraction_then_psum(mesh):
    with jax.set_mesh(mesh):
        out = project_sharded_contraction(put(mesh, ACT, "d", None, "t"), put(mesh, WEIGHT, "t"))
    close(out, np.einsum("blm,mf->blf", ACT, WEIGHT))
    assert_layout(out, mesh, "d", None, None)


def test_einsum_unreduced_passes_keyword_arguments(mesh):
    x, w = ACT.astype(jnp.bfloat16), WEIGHT.astype(jnp.bfloat16)
    with jax.set_mesh(mesh):
        out = project_bf16(put(mesh, x, "d"), put(mesh, w, None, "t"))
    assert out.dtype == jnp.float32  # without preferred_element_type it would be bf16
    expected = np.einsum("blm,mf->blf", np.asarray(x, np.float32), np.asarray(w, np.float32))
    close(out, expected, 1e-2)


# ---------------------------------------------------------------------------------------------
# index_unreduced


@kernel
def lookup(table: f32[b"V/t M"], ids: i32[b"B/d L"]) -> f32[b"B/d L M"]:
    return jax.lax.psum(ops.index_unreduced("[V/t] M, B/d L -> B/d L M", table, ids), "t")


@kernel(check_vma=False)
def lookup_unreduced(table: f32[b"V/t M"], ids: i32[b"B/d L"]) -> f32[b"B/d L M"]:
    # Without the psum each t-block holds only its own rows: return the t=0 one. (check_vma off:
    # with it on, JAX types the partial sum unreduced and 0.9.2 refuses jnp.where on it.)
    part = ops.index_unreduced("[V/t] M, B/d L -> B/d L M", table, ids)
    return jax.lax.psum(jnp.where(jax.lax.axis_index("t") == 0, part, 0), "t")


@kernel
def lookup_1d(table: f32[b"V/t"], ids: i32[b"B/d"]) -> f32[b"B/d"]:
    return jax.lax.psum(ops.index_unreduced("[V/t], B/d -> B/d", table, ids), "t")


@kernel
def lookup_two_axes(table: f32[b"V/d/t M"], ids: i32[b"B L"]) -> f32[b"B L M"]:
    return jax.lax.psum(ops.index_unreduced("[V/d/t] M, B L -> B L M", table, ids), ("d", "t"))


@kernel
def lookup_two_axes_reversed(table: f32[b"V/t/d M"], ids: i32[b"B L"]) -> f32[b"B L M"]:
    return jax.lax.psum(ops.index_unreduced("[V/t/d] M, B L -> B L M", table, ids), ("d", "t"))


def test_index_unreduced_then_psum(mesh):
    with jax.set_mesh(mesh):
        out = lookup(put(mesh, TABLE, "t"), put(mesh, IDS, "d"))
        first_half = lookup_unreduced(put(mesh, TABLE, "t"), put(mesh, IDS, "d"))
    close(out, TABLE[IDS], 0)
    assert_layout(out, mesh, "d", None, None)
    # Rows 0..4 live on t=0; the other rows are zero there.
    expected = np.where((IDS < V // 2)[..., None], TABLE[IDS], 0)
    close(first_half, expected, 0)


def test_index_unreduced_one_dim_table(mesh):
    with jax.set_mesh(mesh):
        out = lookup_1d(put(mesh, TABLE[:, 0], "t"), put(mesh, IDS[:, 0], "d"))
    close(out, TABLE[IDS[:, 0], 0], 0)
    assert_layout(out, mesh, "d")


def test_index_unreduced_table_over_two_axes(mesh):
    with jax.set_mesh(mesh):
        out = lookup_two_axes(put(mesh, TABLE16, ("d", "t")), put(mesh, IDS16))
        out_reversed = lookup_two_axes_reversed(put(mesh, TABLE16, ("t", "d")), put(mesh, IDS16))
    close(out, TABLE16[IDS16], 0)
    close(out_reversed, TABLE16[IDS16], 0)


# The general form (seqax's): the bracketed dim anywhere in the table; dims in both the table
# and the ids batched element-wise, the others crossed, the output in any order.


@kernel
def pick_targets(logp: f32[b"batch/d len V/t"], targets: i32[b"batch/d len"]) -> f32[b"batch/d len"]:
    picked = ops.index_unreduced("batch/d len [V/t], batch/d len -> batch/d len", logp, targets)
    return ops.psum("batch/d len", picked, "t")


@kernel
def seqax_loss(logp: f32[b"batch/d len V/t"], targets: i32[b"batch/d len"]) -> f32[b"batch/d len/t"]:
    # seqax's train.py, line for line: partial sums over t, summed and scattered over t.
    picked = ops.index_unreduced("batch/d len [V/t], batch/d len -> batch/d len", logp, targets)
    return ops.psum_scatter("batch/d len -> batch/d len/t", picked)


@kernel
def pick_middle(cube: f32[b"B/d V/t M"], ids: i32[b"B/d L"]) -> f32[b"M B/d L"]:
    return ops.psum("M B/d L", ops.index_unreduced("B/d [V/t] M, B/d L -> M B/d L", cube, ids), "t")


@kernel
def pick_reordered(table: f32[b"V/t M"], ids: i32[b"B/d L"]) -> f32[b"L M B/d"]:
    return ops.psum("L M B/d", ops.index_unreduced("[V/t] M, B/d L -> L M B/d", table, ids), "t")


@kernel
def pick_unsharded_key(logp: f32[b"B/d L V"], targets: i32[b"B/d L"]) -> f32[b"L B/d"]:
    return ops.index_unreduced("B/d L [V], B/d L -> L B/d", logp, targets)  # no partial sums


@kernel
def pick_over_two_axes(cube: f32[b"B V/d/t M"], ids: i32[b"B"]) -> f32[b"B M"]:
    return ops.psum("B M", ops.index_unreduced("B [V/d/t] M, B -> B M", cube, ids), ("d", "t"))


def test_index_unreduced_batched_like_seqax_loss(mesh):
    expected = np.take_along_axis(LOGP, TARGETS[..., None], axis=-1)[..., 0]
    with jax.set_mesh(mesh):
        out = pick_targets(put(mesh, LOGP, "d", None, "t"), put(mesh, TARGETS, "d"))
        loss = seqax_loss(put(mesh, LOGP, "d", None, "t"), put(mesh, TARGETS, "d"))
    close(out, expected, 0)
    assert_layout(out, mesh, "d", None)
    close(loss, expected, 0)
    assert_layout(loss, mesh, "d", "t")


def test_index_unreduced_key_in_the_middle_output_in_any_order(mesh):
    with jax.set_mesh(mesh):
        middle = pick_middle(put(mesh, CUBE, "d", "t"), put(mesh, TARGETS, "d"))
        reordered = pick_reordered(put(mesh, TABLE, "t"), put(mesh, IDS, "d"))
    close(middle, np.take_along_axis(CUBE, TARGETS[..., None], axis=1).transpose(2, 0, 1), 0)
    assert_layout(middle, mesh, None, "d", None)
    close(reordered, TABLE[IDS].transpose(1, 2, 0), 0)
    assert_layout(reordered, mesh, None, None, "d")


def test_index_unreduced_unsharded_and_two_axis_keys(mesh):
    ids = TARGETS[:, 0]
    with jax.set_mesh(mesh):
        local = pick_unsharded_key(put(mesh, LOGP, "d"), put(mesh, TARGETS, "d"))
        two = pick_over_two_axes(put(mesh, CUBE, None, ("d", "t")), put(mesh, ids))
    close(local, np.take_along_axis(LOGP, TARGETS[..., None], axis=-1)[..., 0].T, 0)
    close(two, CUBE[np.arange(B), ids], 0)


def test_index_unreduced_in_a_plain_shard_map(mesh):
    def f(logp, targets):
        return ops.index_unreduced("B/d L [V/t], B/d L -> B/d L", logp, targets)

    with jax.set_mesh(mesh):
        g = jax.jit(jax.shard_map(f, in_specs=(P("d", None, "t"), P("d")), out_specs=P("d", "t")))
        parts = np.asarray(g(put(mesh, LOGP, "d", None, "t"), put(mesh, TARGETS, "d")))
    # The t blocks side by side: each holds its own half of the vocabulary, zeros elsewhere.
    expected = np.take_along_axis(LOGP, TARGETS[..., None], axis=-1)[..., 0]
    close(parts[:, :4], np.where(TARGETS < 8, expected, 0), 0)
    close(parts[:, 4:], np.where(TARGETS >= 8, expected, 0), 0)


def test_index_unreduced_ids_out_of_range_give_zeros(mesh):
    ids = np.where(IDS % 3 == 0, -1, np.where(IDS % 3 == 1, V + 2, IDS)).astype(np.int32)
    with jax.set_mesh(mesh):
        out = lookup(put(mesh, TABLE, "t"), put(mesh, ids, "d"))
    inside = (ids >= 0) & (ids < V)
    close(out, np.where(inside[..., None], TABLE[np.clip(ids, 0, V - 1)], 0), 0)


# ---------------------------------------------------------------------------------------------
# axis_size


SIZES: list = []


@typed_shard_map
def record_axis_sizes(x: f32[b"V/t M/d"]) -> f32[b"V/t M/d"]:
    SIZES.append((ops.axis_size("d"), ops.axis_size("t")))
    return x


def test_axis_size(mesh):
    SIZES.clear()
    with jax.set_mesh(mesh):
        jax.jit(record_axis_sizes)(put(mesh, MAT, "t", "d"))
    assert SIZES == [(4, 2)]
    assert all(type(s) is int for s in SIZES[0])
    SIZES.clear()
    other = make_mesh("explicit", (8, 1))
    with jax.set_mesh(other):
        record_axis_sizes(put(other, MAT, "t", "d"))
    assert SIZES == [(8, 1)]


# ---------------------------------------------------------------------------------------------
# psum and pmean: one shape (the layout is the same before and after) and the axes, as in JAX.


def device_number(x):
    """1..8: this device's number over (d, t), d major, in x's dtype."""
    return (ops.axis_index(("d", "t")) + 1).astype(x.dtype)


@kernel
def sum_partials(x: f32[b"B/d L M/t"], w: f32[b"M/t F"]) -> f32[b"B/d L F"]:
    return ops.psum("B/d L F", ops.einsum_unreduced("B/d L M/t, M/t F -> B/d L F", x, w), "t")


@kernel
def sum_and_mean_over_all(x: f32[b"L M"]) -> tuple[f32[b"L M"], f32[b"L M"]]:
    scaled = x * device_number(x)  # device k holds k * x
    return ops.psum("L M", scaled, ("d", "t")), ops.pmean("L M", scaled, ["t", "d"])


def test_psum_adds_partial_sums(mesh):
    with jax.set_mesh(mesh):
        out = sum_partials(put(mesh, ACT, "d", None, "t"), put(mesh, WEIGHT, "t"))
    close(out, np.einsum("blm,mf->blf", ACT, WEIGHT))
    assert_layout(out, mesh, "d", None, None)


def test_psum_and_pmean_over_two_axes(mesh):
    with jax.set_mesh(mesh):
        total, mean = sum_and_mean_over_all(put(mesh, ACT[0]))
    close(total, 36 * ACT[0])  # 1 + 2 + ... + 8
    close(mean, 4.5 * ACT[0])


# ---------------------------------------------------------------------------------------------
# ppermute


@kernel
def rotate(x: f32[b"B/d M"]) -> f32[b"B/d M"]:
    return ops.ppermute("B/d M", x, "d", RING)


@kernel
def rotate_over_both(x: f32[b"B/d/t M"]) -> f32[b"B/d/t M"]:
    return ops.ppermute("B/d/t M", x, ("d", "t"), [(i, (i + 3) % 8) for i in range(8)])


@kernel
def send_one_block(x: f32[b"B/d M"]) -> f32[b"B/d M"]:
    return ops.ppermute("B/d M", x, "d", [(0, 2)])  # devices no pair sends to get zeros


def test_ppermute_rotates_blocks(mesh):
    x = ACT[:, 0, :]
    with jax.set_mesh(mesh):
        ring = rotate(put(mesh, x, "d"))
        both = rotate_over_both(put(mesh, x, ("d", "t")))
        one = send_one_block(put(mesh, x, "d"))
    close(ring, np.roll(x, 2, axis=0), 0)  # blocks of 2 rows move one device along d
    assert_layout(ring, mesh, "d", None)
    close(both, np.roll(x, 3, axis=0), 0)  # blocks of 1 row move three devices along (d, t)
    expected = np.zeros_like(x)
    expected[4:6] = x[0:2]
    close(one, expected, 0)


# ---------------------------------------------------------------------------------------------
# all_to_all


@kernel
def batch_to_features(x: f32[b"B/d L M"]) -> f32[b"B L M/d"]:
    return ops.all_to_all("B/d L M -> B L M/d", x)


@kernel
def features_to_batch(x: f32[b"B L M/d"]) -> f32[b"B/d L M"]:
    return ops.all_to_all("B L M/d -> B/d L M", x)


@kernel
def move_trailing(x: f32[b"B/d/t M"]) -> f32[b"B/d M/t"]:
    return ops.all_to_all("B/d/t M -> B/d M/t", x)


@kernel
def move_two_axes(x: f32[b"B/d/t M"]) -> f32[b"B M/d/t"]:
    return ops.all_to_all("B/d/t M -> B M/d/t", x)


@kernel
def move_onto_sharded(x: f32[b"B/t M/d"]) -> f32[b"B M/d/t"]:
    return ops.all_to_all("B/t M/d -> B M/d/t", x)


def test_all_to_all_moves_an_axis(mesh):
    wide = RNG.standard_normal((8, 16)).astype(np.float32)
    with jax.set_mesh(mesh):
        out = batch_to_features(put(mesh, ACT, "d"))
        back = features_to_batch(put(mesh, ACT, None, None, "d"))
        trailing = move_trailing(put(mesh, wide, ("d", "t")))
        two = move_two_axes(put(mesh, wide, ("d", "t")))
        onto = move_onto_sharded(put(mesh, wide, "t", "d"))
    close(out, ACT, 0)
    assert_layout(out, mesh, None, None, "d")
    close(back, ACT, 0)
    assert_layout(back, mesh, "d", None, None)
    for got, spec in ((trailing, ("d", "t")), (two, (None, ("d", "t"))), (onto, (None, ("d", "t")))):
        close(got, wide, 0)
    assert_layout(trailing, mesh, "d", "t")
    assert_layout(two, mesh, None, ("d", "t"))
    assert_layout(onto, mesh, None, ("d", "t"))


# ---------------------------------------------------------------------------------------------
# axis_index


@kernel
def number_blocks(x: f32[b"B/d M/t"]) -> tuple[f32[b"B/d M/t"], i32[b"B/d M/t"]]:
    d, t = ops.axis_index("d"), ops.axis_index("t")
    both = ops.axis_index(("d", "t"))
    return x * 0 + (10 * d + t).astype(x.dtype), jnp.zeros(x.shape, jnp.int32) + both


def test_axis_index(mesh):
    with jax.set_mesh(mesh):
        tens, linear = number_blocks(put(mesh, MAT, "d", "t"))
    rows, cols = np.arange(8)[:, None] // 2, np.arange(16)[None, :] // 8  # d and t of each entry
    close(tens, np.broadcast_to(10 * rows + cols, (8, 16)).astype(np.float32), 0)
    np.testing.assert_array_equal(np.asarray(linear), np.broadcast_to(2 * rows + cols, (8, 16)))


def test_axis_size_of_a_tuple(mesh):
    seen = []

    def op(x, w, table, ids, y):
        seen.append(ops.axis_size(("d", "t")))

    run_op(mesh, op)
    assert seen == [8] and type(seen[0]) is int
