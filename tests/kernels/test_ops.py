"""The typed collectives of shardtypes.ops, inside typed_shard_map kernels under jax.jit.

all_gather, psum_scatter, all_to_all, psum, pmean, ppermute, einsum_unreduced, index_unreduced
(both seqax forms: the table's first dim in brackets with a cross product, and the general one
with the bracketed dim anywhere and shared dims batched), axis_index and axis_size: the numbers
against unsharded references, on Explicit and Auto meshes; operands that do not match their spec
(TypeCheckError naming the op, the operand and the spec); malformed spec strings
(ShapeSpecError); wrong axis arguments, and mesh axes used outside a shard_map or not manual in
it (TypeError / ValueError naming the op and the argument).

Kernels are defined once at module level and jitted, so each compiles once per mesh.
"""

import functools
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec as P
from typeguard import TypeCheckError

from shardtypes import ShapeSpecError, bf16, dims, f32, i32, ops, typed_shard_map

from conftest import make_mesh, put

RNG = np.random.default_rng(0)
V, M, B, L, F = 10, 4, 8, 3, 6
MAT = RNG.standard_normal((8, 16)).astype(np.float32)  # 'V/t M/d' with V=8, M=16
VEC = RNG.standard_normal(16).astype(np.float32)
ACT = RNG.standard_normal((B, L, M)).astype(np.float32)
WEIGHT = RNG.standard_normal((M, F)).astype(np.float32)
TABLE = RNG.standard_normal((V, M)).astype(np.float32)
IDS = RNG.integers(0, V, (B, L)).astype(np.int32)
TABLE16 = RNG.standard_normal((16, M)).astype(np.float32)
IDS16 = RNG.integers(0, 16, (B, L)).astype(np.int32)

def kernel(f=None, **kwargs):
    """``jax.jit(typed_shard_map(f, **kwargs))``."""
    if f is None:
        return functools.partial(kernel, **kwargs)
    return jax.jit(typed_shard_map(f, **kwargs))


def close(actual, expected, tol=1e-5):
    np.testing.assert_allclose(np.asarray(actual), expected, rtol=tol, atol=tol)


def assert_layout(out, mesh, *spec):
    assert out.sharding.is_equivalent_to(NamedSharding(mesh, P(*spec)), out.ndim), out.sharding


# ---------------------------------------------------------------------------------------------
# all_gather
#
# A gathered result is replicated over the gathered axes, but jax.lax.all_gather types it as
# varying over them: kernels that return one replicated gather with invariant=True, with the vma
# check on (tests/kernels/test_invariant_gather.py covers gradients and errors).


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

LOGP = RNG.standard_normal((B, 4, 16)).astype(np.float32)  # 'batch/d len V/t', V=16
TARGETS = RNG.integers(0, 16, (B, 4)).astype(np.int32)
CUBE = RNG.standard_normal((B, 16, M)).astype(np.float32)  # 'B/d V/t M'


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


INDEX_MALFORMED = {
    "two-brackets": ("[V/t] [M], B/d L -> B/d L", "put exactly one dim of the table in brackets"),
    "unclosed": ("[V/t M, B/d L -> B/d L M", "found 1 '[' and 0 ']'"),
    "spanning-two-dims": ("[V/t M], B/d L -> B/d L", "the brackets must enclose one whole dim of the table"),
    "in-the-ids": ("V/t M, [B/d] L -> L M", "the brackets must enclose one whole dim of the table"),
    "key-in-ids": ("[V/t] M, B/d V -> B/d M", "the bracketed dim 'V' is the one looked up, so it cannot also be in the ids"),
    "key-in-output": ("[V/t] M, B/d L -> B/d L M V/t", "cannot also be in the output"),
    "output-neither": ("[V/t] M, B/d L -> B/d L M K", "output dim 'K' is in neither the table nor the ids"),
    "table-dim-dropped": ("[V/t] M, B/d L -> B/d L", "table dim 'M' is missing from the output"),
    "ids-dim-dropped": ("[V/t] M, B/d L -> B/d M", "ids dim 'L' is missing from the output"),
    "shared-layouts-differ": ("B/d [V/t], B L -> B L", "dim 'B' is 'B/d' in the table but 'B' in the ids"),
    "output-layout-differs": ("[V/t] M, B/d L -> B L M", "dim 'B' is 'B/d' in the ids but 'B' in the output"),
    "dim-twice": ("[V/t] M M, B/d L -> B/d L M", "dim 'M' appears twice in the table"),
    "key-twice": ("[V/t] V, B/d L -> B/d L V", "dim 'V' appears twice in the table"),
    "in-the-output": ("V/t M, B/d L -> B/d L [M]", "the brackets must enclose one whole dim of the table"),
    "bad-dim": ("[V/t] M/, B/d L -> B/d L M", "in the table: dim 1: dim 'M/' has an empty mesh axis name"),
    "ellipsis": ("[V/t] ..., B/d L -> B/d L", "table dim '...' must be a plain name or an integer"),
    "variadic-key": ("[*V], B/d L -> B/d L", "the bracketed dim '*V' must be one dim"),
    "two-arrows": ("[V/t] M, B/d L -> B/d L -> M", "wants 'inputs -> output'"),
    "three-inputs": ("[V/t] M, B/d L, L -> B/d L M", "takes 2 input spec(s), found 3"),
}


@pytest.mark.parametrize("case", sorted(INDEX_MALFORMED))
def test_index_unreduced_malformed_spec(case):
    spec, message = INDEX_MALFORMED[case]
    with pytest.raises(ShapeSpecError) as info:
        run_op(make_mesh("explicit"), lambda x, w, table, ids, y: ops.index_unreduced(spec, table, ids))
    assert message in str(info.value), str(info.value)
    assert repr(spec) in str(info.value)


def test_index_unreduced_spec_must_be_a_string():
    with pytest.raises(ShapeSpecError, match="wants a str spec.*not a bytes"):
        ops.index_unreduced(b"[V] M, B -> B M", jnp.zeros((8, 4)), jnp.zeros((8,), jnp.int32))
    with pytest.raises(ShapeSpecError, match="not a list"):
        ops.index_unreduced(["[V] M, B -> B M"], jnp.zeros((8, 4)), jnp.zeros((8,), jnp.int32))


def test_index_unreduced_sharded_key_outside_shard_map():
    with pytest.raises(ValueError) as info:
        ops.index_unreduced("[V/t] M, B -> B M", jnp.zeros((8, 4)), jnp.zeros((8,), jnp.int32))
    message = str(info.value)
    assert "shardtypes.ops.index_unreduced('[V/t] M, B -> B M'): the bracketed dim names mesh axis 't'" in message
    assert "no shard_map is running here" in message
    # An unsharded key needs no shard_map: the lookup is plain.
    out = ops.index_unreduced("B [V], B -> B", jnp.asarray(LOGP[:, 0]), jnp.asarray(TARGETS[:, 0]))
    close(out, LOGP[np.arange(B), 0, TARGETS[:, 0]], 0)


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
# Operands that do not match their spec: TypeCheckError naming the op, the operand and the spec.


def run_op(mesh, op):
    """Runs ``op(x, w, table, ids, y)`` in a fresh kernel (the errors come at trace time, before
    anything compiles), with x: 'B/d M' (8, 4), w: 'M F/t' (4, 6), table: 'V/t M' (10, 4),
    ids: 'B/d L' (8, 3), y: 'B/d/t M'."""

    @kernel(check_vma=False)
    def k(
        x: f32[b"B/d M"],
        w: f32[b"M F/t"],
        table: f32[b"V/t M"],
        ids: i32[b"B/d L"],
        y: f32[b"B/d/t M"],
    ) -> f32[b"B/d M"]:
        op(x, w, table, ids, y)
        return x

    with jax.set_mesh(mesh):
        return k(
            put(mesh, ACT[:, 0, :], "d"),
            put(mesh, WEIGHT, None, "t"),
            put(mesh, TABLE, "t"),
            put(mesh, IDS, "d"),
            put(mesh, ACT[:, 0, :], ("d", "t")),
        )


WRONG_OPERANDS = {
    "all_gather-rank": (
        lambda x, w, table, ids, y: ops.all_gather("B/d M L -> B M L", x),
        "shardtypes.ops.all_gather('B/d M L -> B M L'): operand is not 'B/d M L': "
        "has 2 dims [2,4] but the annotation has 3",
    ),
    "all_gather-size": (
        lambda x, w, table, ids, y: ops.all_gather("B/d F -> B F", x),
        "shardtypes.ops.all_gather('B/d F -> B F'): operand is not 'B/d F': dimension 'F' is 4 "
        "here (dim 1) but was bound to 6 by argument \"w\"",
    ),
    "psum_scatter": (
        lambda x, w, table, ids, y: ops.psum_scatter("B/d M L -> B/d M L/t", x),
        "shardtypes.ops.psum_scatter('B/d M L -> B/d M L/t'): operand is not 'B/d M L': "
        "has 2 dims [2,4] but the annotation has 3",
    ),
    "einsum-operand-0": (
        lambda x, w, table, ids, y: ops.einsum_unreduced("B/d F, F M/t -> B/d M/t", x, w),
        "shardtypes.ops.einsum_unreduced('B/d F, F M/t -> B/d M/t'): operand 0 is not 'B/d F': "
        "dimension 'F' is 4 here (dim 1) but was bound to 6",
    ),
    "einsum-operand-1": (
        lambda x, w, table, ids, y: ops.einsum_unreduced("B/d L, F M/t -> B/d L F M/t", ids, w),
        "shardtypes.ops.einsum_unreduced('B/d L, F M/t -> B/d L F M/t'): operand 1 is not 'F M/t': "
        "dimension 'F' is 4 here (dim 0) but was bound to 6",
    ),
    "index-table": (
        lambda x, w, table, ids, y: ops.index_unreduced("[V/t] F, B/d L -> B/d L F", table, ids),
        "shardtypes.ops.index_unreduced('[V/t] F, B/d L -> B/d L F'): table is not 'V/t F': "
        "dimension 'F' is 4 here (dim 1) but was bound to 6",
    ),
    "index-ids": (
        lambda x, w, table, ids, y: ops.index_unreduced("[V/t] M, B/d F -> B/d F M", table, ids),
        "shardtypes.ops.index_unreduced('[V/t] M, B/d F -> B/d F M'): ids is not 'B/d F': "
        "dimension 'F' is 3 here (dim 1) but was bound to 6 by argument \"w\"",
    ),
    "index-ids-dtype": (
        lambda x, w, table, ids, y: ops.index_unreduced("[V/t] M, B/d L -> B/d L M", table, ids * 1.0),
        "shardtypes.ops.index_unreduced('[V/t] M, B/d L -> B/d L M'): ids is not 'B/d L': has "
        "dtype float32, the annotation wants any integer dtype",
    ),
    "wrong-sharding": (
        lambda x, w, table, ids, y: ops.all_gather("B/t M -> B M", x),
        "shardtypes.ops.all_gather('B/t M -> B M'): operand (argument \"x\" of run_op.<locals>.k(), "
        "annotated f32[b'B/d M']) is laid out P('d', None), but the spec string's input 'B/t M' "
        "says P('t', None): dim 0 is split over 'd' here but split over 't' in the spec",
    ),
}


@pytest.mark.parametrize("case", sorted(WRONG_OPERANDS))
def test_wrong_operand_names_op_operand_and_spec(mesh, case):
    op, message = WRONG_OPERANDS[case]
    with pytest.raises(TypeCheckError) as info:
        run_op(mesh, op)
    assert message in str(info.value), str(info.value)


def test_ops_bind_new_dims_into_the_kernels_table(mesh):
    seen = []

    def op(x, w, table, ids, y):
        ops.all_gather("B/d K -> B K", x)  # K is new: bound to the global size 4
        seen.append(dict(dims()))
        ops.einsum_unreduced("B/d K, K F/t -> B/d F/t", x, w)

    run_op(mesh, op)
    assert seen == [{"B": 8, "M": 4, "F": 6, "V": 10, "L": 3, "K": 4}]
    with pytest.raises(TypeCheckError, match=r"operand 0 is not 'B/d K'.*dimension 'K' is 4 here \(dim 1\) but was bound to 6"):
        run_op(mesh, lambda x, w, table, ids, y: (
            ops.all_gather("B/d K -> B K", jnp.zeros((2, 6))),
            ops.einsum_unreduced("B/d K, K F/t -> B/d F/t", x, w),
        ))


def test_operands_of_one_op_share_a_table_outside_typed_kernels(mesh):
    def f(x, w):
        return ops.einsum_unreduced("B/d M, M F/t -> B/d F/t", x, w)

    with jax.set_mesh(mesh):
        plain = jax.shard_map(f, in_specs=(P("d"), P(None, "t")), out_specs=P("d", "t"))
        with pytest.raises(TypeCheckError) as info:
            plain(put(mesh, ACT[:, 0, :], "d"), put(mesh, np.ones((6, 6), np.float32), None, "t"))
    message = str(info.value)
    assert "shardtypes.ops.einsum_unreduced('B/d M, M F/t -> B/d F/t'): operand 1" in message
    assert "dimension 'M' is 6 here" in message


def test_operand_with_extra_dim_reports_rank(mesh):
    with pytest.raises(TypeCheckError) as info:
        run_op(mesh, lambda x, w, table, ids, y: ops.index_unreduced("[V/t] M, B/d -> B/d M", table, ids))
    message = str(info.value)
    assert "shardtypes.ops.index_unreduced('[V/t] M, B/d -> B/d M'): ids is not 'B/d'" in message
    assert "has 2 dims" in message and "the annotation has 1" in message


# ---------------------------------------------------------------------------------------------
# Malformed spec strings: ShapeSpecError.


MALFORMED = {
    "no-arrow": (
        lambda x, w, table, ids, y: ops.all_gather("B/d M", x),
        "shardtypes.ops.all_gather wants 'inputs -> output'",
    ),
    "two-arrows": (
        lambda x, w, table, ids, y: ops.psum_scatter("B/d M -> B/d M -> B/d M/t", x),
        "shardtypes.ops.psum_scatter wants 'inputs -> output'",
    ),
    "all_gather-two-inputs": (
        lambda x, w, table, ids, y: ops.all_gather("B/d M, M F/t -> B M", x),
        "shardtypes.ops.all_gather takes 1 input spec(s), found 2",
    ),
    "einsum-one-input-for-two-operands": (
        lambda x, w, table, ids, y: ops.einsum_unreduced("B/d M -> B/d M", x, w),
        "shardtypes.ops.einsum_unreduced takes 2 input spec(s), found 1",
    ),
    "index-one-input": (
        lambda x, w, table, ids, y: ops.index_unreduced("[V/t] M -> V/t M", table, ids),
        "shardtypes.ops.index_unreduced takes 2 input spec(s), found 1",
    ),
    "all_gather-adds-axis": (
        lambda x, w, table, ids, y: ops.all_gather("B/d M -> B/d M/t", x),
        "shardtypes.ops.all_gather: dim 1 goes from 'M' to 'M/t'; all_gather can only remove "
        "trailing mesh axes of a dim",
    ),
    "all_gather-not-trailing": (
        lambda x, w, table, ids, y: ops.all_gather("B/d/t M -> B/t M", y),
        "shardtypes.ops.all_gather: dim 0 goes from 'B/d/t' to 'B/t'; all_gather can only "
        "remove trailing mesh axes of a dim",
    ),
    "all_gather-other-dims": (
        lambda x, w, table, ids, y: ops.all_gather("B/d M -> B F", x),
        "shardtypes.ops.all_gather: both sides must have the same dims, differing only in sharding",
    ),
    "psum_scatter-no-change": (
        lambda x, w, table, ids, y: ops.psum_scatter("B/d M -> B/d M", x),
        "shardtypes.ops.psum_scatter: at least one dim must gain mesh axes",
    ),
    "psum_scatter-two-changes-one-removes": (
        lambda x, w, table, ids, y: ops.psum_scatter("B/d M -> B M/t", x),
        "shardtypes.ops.psum_scatter: dim 0 goes from 'B/d' to 'B'; psum_scatter can only gain ",
    ),
    "psum_scatter-removes-axis": (
        lambda x, w, table, ids, y: ops.psum_scatter("B/d M -> B M", x),
        "shardtypes.ops.psum_scatter: dim 0 goes from 'B/d' to 'B'; psum_scatter can only gain "
        "trailing mesh axes of a dim",
    ),
    "psum_scatter-other-dims": (
        lambda x, w, table, ids, y: ops.psum_scatter("B/d M -> B/d F/t", x),
        "shardtypes.ops.psum_scatter: both sides must have the same dims",
    ),
    "einsum-underscore": (
        lambda x, w, table, ids, y: ops.einsum_unreduced("B/d _, M F/t -> B/d F/t", x, w),
        "shardtypes.ops.einsum_unreduced: dim '_' must be a plain name",
    ),
    "einsum-literal": (
        lambda x, w, table, ids, y: ops.einsum_unreduced("B/d 4, 4 F/t -> B/d F/t", x, w),
        "shardtypes.ops.einsum_unreduced: dim '4' must be a plain name",
    ),
    "index-no-brackets": (
        lambda x, w, table, ids, y: ops.index_unreduced("V/t M, B/d L -> B/d L M", table, ids),
        "shardtypes.ops.index_unreduced: put exactly one dim of the table in brackets, as in "
        "'batch len [V/t], batch len -> batch len' or '[V/t] M, B L -> B L M'; found no brackets",
    ),
    "bad-dim": (
        lambda x, w, table, ids, y: ops.all_gather("B/d M/ -> B M", x),
        "has an empty mesh axis name",
    ),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_spec_is_a_shape_spec_error(case):
    op, message = MALFORMED[case]
    with pytest.raises(ShapeSpecError) as info:
        run_op(make_mesh("explicit"), op)
    assert isinstance(info.value, ValueError)
    assert message in str(info.value), str(info.value)


def test_malformed_spec_quotes_the_string():
    with pytest.raises(ShapeSpecError, match=re.escape("invalid shape string 'B/d M'")):
        ops.all_gather("B/d M", jnp.zeros((8, 4)))
    with pytest.raises(ShapeSpecError, match=re.escape("'V/t M, B/d L -> B/d L M'")):
        ops.index_unreduced("V/t M, B/d L -> B/d L M", jnp.zeros((8, 4)), jnp.zeros((8, 3), jnp.int32))


def test_einsum_output_dim_not_in_inputs_is_a_shape_spec_error():
    with pytest.raises(ShapeSpecError) as info:
        run_op(
            make_mesh("explicit"),
            lambda x, w, table, ids, y: ops.einsum_unreduced("B/d M, M F/t -> B/d G/t", x, w),
        )
    assert "G" in str(info.value)
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


RING = [(i, (i + 1) % 4) for i in range(4)]


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


# ---------------------------------------------------------------------------------------------
# Wrong arguments to the new collectives: errors naming the op and the argument.


AXIS_ERRORS = {
    "psum-unknown-axis": (
        lambda x, w, table, ids, y: ops.psum("B/d M", x, "x"),
        ValueError, "shardtypes.ops.psum('B/d M'): argument 'axes': mesh axis 'x' is not in the "
        "mesh (its axes: 'd', 't')",
    ),
    "psum-axes-type": (
        lambda x, w, table, ids, y: ops.psum("B/d M", x, 1),
        TypeError, "shardtypes.ops.psum('B/d M'): argument 'axes' must be a mesh axis name or a "
        "non-empty tuple of them, not 1",
    ),
    "psum-no-axes": (
        lambda x, w, table, ids, y: ops.psum("B/d M", x, ()),
        TypeError, "argument 'axes' must be a mesh axis name or a non-empty tuple",
    ),
    "pmean-axis-twice": (
        lambda x, w, table, ids, y: ops.pmean("B/d M", x, ("t", "t")),
        ValueError, "shardtypes.ops.pmean('B/d M'): argument 'axes' names a mesh axis twice",
    ),
    "psum-over-a-split-dim": (
        lambda x, w, table, ids, y: ops.psum("B/d M", x, "d"),
        ValueError, "shardtypes.ops.psum('B/d M'): argument 'axes' reduces over mesh axis 'd', "
        "but dim 0 ('B/d') is split over it",
    ),
    "psum-operand": (
        lambda x, w, table, ids, y: ops.psum("B/d F", x, "t"),
        TypeCheckError, "shardtypes.ops.psum('B/d F'): operand is not 'B/d F': dimension 'F' is 4 "
        "here (dim 1) but was bound to 6",
    ),
    "ppermute-unknown-axis": (
        lambda x, w, table, ids, y: ops.ppermute("B/d M", x, "e", [(0, 1)]),
        ValueError, "shardtypes.ops.ppermute('B/d M'): argument 'axis': mesh axis 'e' is not in the mesh",
    ),
    "ppermute-perm-type": (
        lambda x, w, table, ids, y: ops.ppermute("B/d M", x, "d", [(0, 1, 2)]),
        TypeError, "shardtypes.ops.ppermute('B/d M'): argument 'perm' must be a list of "
        "(source, destination) pairs of ints",
    ),
    "ppermute-perm-not-a-list": (
        lambda x, w, table, ids, y: ops.ppermute("B/d M", x, "d", 3),
        TypeError, "argument 'perm' must be a list of (source, destination) pairs of ints, not 3",
    ),
    "ppermute-out-of-range": (
        lambda x, w, table, ids, y: ops.ppermute("B/d M", x, "t", [(0, 2)]),
        ValueError, "argument 'perm': pair (0, 2) is out of range: the axis has 2 devices",
    ),
    "ppermute-destination-twice": (
        lambda x, w, table, ids, y: ops.ppermute("B/d M", x, "d", [(0, 1), (2, 1)]),
        ValueError, "argument 'perm': device 1 is a destination twice",
    ),
    "ppermute-operand": (
        lambda x, w, table, ids, y: ops.ppermute("B/t M", x, "d", RING),
        TypeCheckError, "shardtypes.ops.ppermute('B/t M'): operand (argument \"x\" of run_op.<locals>.k(), "
        "annotated f32[b'B/d M']) is laid out P('d', None), but the spec string's input 'B/t M' says P('t', None)",
    ),
    "all_to_all-operand": (
        lambda x, w, table, ids, y: ops.all_to_all("B/d F -> B F/d", x),
        TypeCheckError, "shardtypes.ops.all_to_all('B/d F -> B F/d'): operand is not 'B/d F'",
    ),
    "all_to_all-does-not-split": (
        lambda x, w, table, ids, y: ops.all_to_all("B/d L -> B L/d", ids),
        TypeCheckError, "shardtypes.ops.all_to_all('B/d L -> B L/d'): result is not 'B L/d': dim 1 "
        "has local size 3, which does not split over mesh axes d (4 devices)",
    ),
    "all_to_all-unknown-axis": (
        lambda x, w, table, ids, y: ops.all_to_all("B/d M/x -> B/d/x M", x),
        ValueError, "shardtypes.ops.all_to_all('B/d M/x -> B/d/x M'): the spec: mesh axis 'x' is "
        "not in the mesh",
    ),
    "axis_index-unknown": (
        lambda x, w, table, ids, y: ops.axis_index("x"),
        ValueError, "shardtypes.ops.axis_index('x'): argument 'name': mesh axis 'x' is not in the mesh",
    ),
    "axis_index-type": (
        lambda x, w, table, ids, y: ops.axis_index(0),
        TypeError, "shardtypes.ops.axis_index(0): argument 'name' must be a mesh axis name",
    ),
    "axis_size-unknown": (
        lambda x, w, table, ids, y: ops.axis_size("x"),
        ValueError, "shardtypes.ops.axis_size('x'): argument 'name': mesh axis 'x' is not in the mesh",
    ),
}


@pytest.mark.parametrize("case", sorted(AXIS_ERRORS))
def test_collective_argument_errors(mesh, case):
    op, error, message = AXIS_ERRORS[case]
    with pytest.raises(error) as info:
        run_op(mesh, op)
    assert type(info.value) is error or error is TypeCheckError, type(info.value)
    assert message in str(info.value), str(info.value)


OUTSIDE = {
    "psum": (lambda x: ops.psum("B M", x, "t"), "shardtypes.ops.psum('B M'): argument 'axes' names mesh axis 't'"),
    "pmean": (lambda x: ops.pmean("B M", x, "d"), "shardtypes.ops.pmean('B M'): argument 'axes' names mesh axis 'd'"),
    "ppermute": (lambda x: ops.ppermute("B M", x, "d", RING), "shardtypes.ops.ppermute('B M'): argument 'axis'"),
    "all_to_all": (lambda x: ops.all_to_all("B/d M -> B M/d", x), "shardtypes.ops.all_to_all('B/d M -> B M/d'): the spec names mesh axis 'd'"),
    "all_gather": (lambda x: ops.all_gather("B/d M -> B M", x), "shardtypes.ops.all_gather('B/d M -> B M'): the spec names mesh axis 'd'"),
    "psum_scatter": (lambda x: ops.psum_scatter("B M -> B M/t", x), "shardtypes.ops.psum_scatter('B M -> B M/t'): the spec names mesh axis 't'"),
    "axis_index": (lambda x: ops.axis_index("d"), "shardtypes.ops.axis_index('d'): argument 'name' names mesh axis 'd'"),
    "axis_size": (lambda x: ops.axis_size("t"), "shardtypes.ops.axis_size('t'): argument 'name' names mesh axis 't'"),
}


@pytest.mark.parametrize("case", sorted(OUTSIDE))
@pytest.mark.parametrize("jitted", [False, True])
def test_collectives_outside_shard_map(mesh, case, jitted):
    op, message = OUTSIDE[case]
    x = put(mesh, ACT[:, 0, :], "d")
    with jax.set_mesh(mesh), pytest.raises(ValueError) as info:
        (jax.jit(op) if jitted else op)(x)
    assert message in str(info.value), str(info.value)
    assert "no shard_map is running here" in str(info.value)
    with pytest.raises(ValueError, match="no shard_map is running here"):
        op(ACT[:, 0, :])  # no mesh at all


def test_collective_over_an_axis_the_shard_map_leaves_automatic(mesh):
    def f(x):
        return ops.psum("B/d M", x, "t")

    g = jax.jit(jax.shard_map(f, mesh=mesh, in_specs=P("d"), out_specs=P("d"), axis_names={"d"}))
    with pytest.raises(ValueError) as info:
        g(put(mesh, ACT[:, 0, :], "d"))
    message = str(info.value)
    assert "shardtypes.ops.psum('B/d M'): argument 'axes': mesh axis 't' is not manual in this shard_map" in message
    assert "(manual axes: 'd')" in message


COLLECTIVE_MALFORMED = {
    "psum-arrow": (
        lambda x, w, table, ids, y: ops.psum("B/d M -> B/d M", x, "t"),
        "shardtypes.ops.psum keeps the layout: write one shape, as in psum('B/d L M', x, 't')",
    ),
    "psum-spec-type": (
        lambda x, w, table, ids, y: ops.psum(None, x, "t"),
        "shardtypes.ops.psum wants a shape string, as in psum('B/d L M', x, 't'), not a NoneType",
    ),
    "pmean-bad-dim": (lambda x, w, table, ids, y: ops.pmean("B/d M/", x, "t"), "has an empty mesh axis name"),
    "ppermute-arrow": (
        lambda x, w, table, ids, y: ops.ppermute("B/d M -> B/d M", x, "d", RING),
        "shardtypes.ops.ppermute keeps the layout",
    ),
    "all_to_all-spec-type": (
        lambda x, w, table, ids, y: ops.all_to_all(3, x),
        "shardtypes.ops.all_to_all wants a str spec 'inputs -> output', as in 'B/d M -> B M', not a int",
    ),
    "all_to_all-no-change": (
        lambda x, w, table, ids, y: ops.all_to_all("B/d M -> B/d M", x),
        "shardtypes.ops.all_to_all: exactly two dims must change: one gives mesh axes to the other (found 0 changed)",
    ),
    "all_to_all-one-change": (
        lambda x, w, table, ids, y: ops.all_to_all("B/d M -> B M", x),
        "(found 1 changed)",
    ),
    "all_to_all-different-axes": (
        lambda x, w, table, ids, y: ops.all_to_all("B/d M -> B M/t", x),
        "shardtypes.ops.all_to_all: dim 0 gives up d but dim 1 gains t: the same mesh axes, in the "
        "same order, must move",
    ),
    "all_to_all-not-trailing": (
        lambda x, w, table, ids, y: ops.all_to_all("B/d/t M -> B/t M/d", y),
        "shardtypes.ops.all_to_all: dim 0 goes from 'B/d/t' to 'B/t'; all_to_all can only move "
        "trailing mesh axes of a dim",
    ),
    "all_to_all-other-dims": (
        lambda x, w, table, ids, y: ops.all_to_all("B/d M -> B F/d", x),
        "shardtypes.ops.all_to_all: both sides must have the same dims",
    ),
}


@pytest.mark.parametrize("case", sorted(COLLECTIVE_MALFORMED))
def test_collective_malformed_spec(case):
    op, message = COLLECTIVE_MALFORMED[case]
    with pytest.raises(ShapeSpecError) as info:
        run_op(make_mesh("explicit"), op)
    assert message in str(info.value), str(info.value)

