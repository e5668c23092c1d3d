"""The errors of shardtypes.ops' typed collectives: operands that do not match their spec
(TypeCheckError naming the op, the operand and the spec); malformed spec strings
(ShapeSpecError); wrong axis arguments, and mesh axes used outside a shard_map or not manual in
it (TypeError / ValueError naming the op and the argument).
"""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P
from typeguard import TypeCheckError

from shardtypes import ShapeSpecError, dims, ops

from conftest import make_mesh, put
from ops_kit import ACT, LOGP, RING, TARGETS, B, close, run_op

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
# Operands that do not match their spec: TypeCheckError naming the op, the operand and the spec.


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
