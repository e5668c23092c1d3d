"""The typed collectives of shardtypes.ops, inside typed_shard_map kernels under jax.jit.

all_gather, psum_scatter, einsum_unreduced, index_unreduced and axis_size: the numbers against
unsharded references, on Explicit and Auto meshes; operands that do not match their spec
(TypeCheckError naming the op, the operand and the spec); malformed spec strings (ShapeSpecError).

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
# varying over them, so kernels that return one directly turn off the vma check (as seqax does).


@kernel(check_vma=False)
def gather_one(x: f32[b"V/t M/d"]) -> f32[b"V/t M"]:
    return ops.all_gather("V/t M/d -> V/t M", x)


@kernel(check_vma=False)
def gather_two(x: f32[b"M/d/t"]) -> f32[b"M"]:
    return ops.all_gather("M/d/t -> M", x)


@kernel(check_vma=False)
def gather_two_reversed(x: f32[b"M/t/d"]) -> f32[b"M"]:
    return ops.all_gather("M/t/d -> M", x)


@kernel(check_vma=False)
def gather_trailing(x: f32[b"M/d/t"]) -> f32[b"M/d"]:
    return ops.all_gather("M/d/t -> M/d", x)


@kernel(check_vma=False)
def gather_both_dims(x: f32[b"V/t M/d"]) -> f32[b"V M"]:
    return ops.all_gather("V/t M/d -> V M", x)


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


@kernel
def lookup_unreduced(table: f32[b"V/t M"], ids: i32[b"B/d L"]) -> f32[b"B/d L M"]:
    # Without the psum each t-block holds only its own rows: return the t=0 one.
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
        lambda x, w, table, ids, y: ops.einsum_unreduced("B/d F, M F/t -> B/d F/t", x, w),
        "shardtypes.ops.einsum_unreduced('B/d F, M F/t -> B/d F/t'): operand 0 is not 'B/d F': "
        "dimension 'F' is 4 here (dim 1) but was bound to 6",
    ),
    "einsum-operand-1": (
        lambda x, w, table, ids, y: ops.einsum_unreduced("B/d M, F M/t -> B/d F/t", x, w),
        "shardtypes.ops.einsum_unreduced('B/d M, F M/t -> B/d F/t'): operand 1 is not 'F M/t': "
        "dimension 'F' is 4 here (dim 0) but was bound to 6",
    ),
    "einsum-result": (
        lambda x, w, table, ids, y: ops.einsum_unreduced("B/d M, M F/t -> B/d F", x, w),
        "shardtypes.ops.einsum_unreduced('B/d M, M F/t -> B/d F'): result is not 'B/d F': "
        "dimension 'F' is 3 here (dim 1) but was bound to 6",
    ),
    "index-table": (
        lambda x, w, table, ids, y: ops.index_unreduced("[V/t] F, B/d L -> B/d L F", table, ids),
        "shardtypes.ops.index_unreduced('[V/t] F, B/d L -> B/d L F'): table is not 'V/t F': "
        "dimension 'F' is 4 here (dim 1) but was bound to 6",
    ),
    "index-ids": (
        lambda x, w, table, ids, y: ops.index_unreduced("[V/t] M, B/d M -> B/d M M", table, ids),
        "shardtypes.ops.index_unreduced('[V/t] M, B/d M -> B/d M M'): ids is not 'B/d M': "
        "dimension 'M' is 3 here (dim 1) but was bound to 4 by argument \"x\"",
    ),
    "wrong-sharding": (
        lambda x, w, table, ids, y: ops.all_gather("B/t M -> B M", x),
        "shardtypes.ops.all_gather('B/t M -> B M'): operand is not 'B/t M': dimension 'B' is 4 "
        "here (dim 0) but was bound to 8",
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
        "shardtypes.ops.psum_scatter: exactly one dim must gain mesh axes",
    ),
    "psum_scatter-two-changes": (
        lambda x, w, table, ids, y: ops.psum_scatter("B M -> B/d M/t", jnp.zeros((8, 4))),
        "shardtypes.ops.psum_scatter: exactly one dim must gain mesh axes",
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
        "shardtypes.ops.index_unreduced wants '[V/t] M, B L -> B L M': the table's first dim in "
        "brackets",
    ),
    "index-brackets-not-first": (
        lambda x, w, table, ids, y: ops.index_unreduced("V/t [M], B/d L -> B/d L M", table, ids),
        "the table's first dim in brackets",
    ),
    "index-wrong-output-order": (
        lambda x, w, table, ids, y: ops.index_unreduced("[V/t] M, B/d L -> B/d M L", table, ids),
        "shardtypes.ops.index_unreduced: the output must be the ids' dims then the table's other "
        "dims: 'B/d L M'",
    ),
    "index-output-missing-dim": (
        lambda x, w, table, ids, y: ops.index_unreduced("[V/t] M, B/d L -> B/d L", table, ids),
        "the output must be the ids' dims then the table's other dims: 'B/d L M'",
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
