"""Host-or-device annotations, ``f32[jax.Array | np.ndarray, b'...']``: a value of either class
passes; a numpy value is checked for dtype and shape, a jax.Array for its sharding too; the
derivation treats the field like a jax.Array one; ``shardtypes.is_instance``."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import typeguard
from jax.sharding import NamedSharding, PartitionSpec as P

from shardtypes import (
    HostOrDevice,
    TypeCheckError,
    f32,
    i32,
    is_instance,
    make_partition_specs,
    make_shape_dtype_structs,
    make_shardings,
    pytree_dataclass,
    shard,
    typechecked,
)

from conftest import put

HOST_OR_DEVICE = f32[jax.Array | np.ndarray, b"batch/d embed"]


@pytree_dataclass
class Batch:
    x: f32[jax.Array | np.ndarray, b"batch/d embed"]
    ids: i32[HostOrDevice, b"batch/d"]


def host_batch() -> Batch:
    return Batch(x=np.ones((8, 3), np.float32), ids=np.zeros(8, np.int32))


@typechecked
def consume(batch: Batch) -> f32[jax.Array, b"batch/d"]:
    return jnp.sum(jnp.asarray(batch.x), axis=-1) + batch.ids


def test_host_data_is_checked_for_dtype_and_shape_not_sharding(mesh):
    with jax.set_mesh(mesh):
        assert isinstance(np.ones((8, 3), np.float32), HOST_OR_DEVICE)
        assert not isinstance(np.ones((8, 3), np.float64), HOST_OR_DEVICE)  # dtype
        assert not isinstance(np.ones((8,), np.float32), HOST_OR_DEVICE)  # rank
        assert not isinstance(3.0, HOST_OR_DEVICE)
        assert not isinstance([[1.0] * 3] * 8, HOST_OR_DEVICE)
        # A jax.Array's sharding is checked as for f32[jax.Array, ...].
        assert isinstance(put(mesh, jnp.ones((8, 3)), "d"), HOST_OR_DEVICE)
        assert not isinstance(put(mesh, jnp.ones((8, 3))), HOST_OR_DEVICE)


def test_a_dataclass_of_host_data_then_sharded(mesh):
    with jax.set_mesh(mesh):
        batch = host_batch()
        with pytest.raises(TypeCheckError, match=r"batch.x is not f32\[jax.Array \| numpy.ndarray, "
                                                 r"b'batch/d embed'\]: has dtype float64, the annotation wants float32"):
            consume(Batch(x=np.ones((8, 3)), ids=np.zeros(8, np.int32)))
        placed = shard(batch, Batch)
        assert isinstance(placed.x, jax.Array) and placed.x.sharding.spec == P("d", None)
        assert placed.ids.sharding.spec == P("d")
        assert consume(placed).shape == (8,)
        assert jax.jit(consume)(placed).shape == (8,)
        # On the device the sharding counts: a replicated array is not batch/d.
        wrong = Batch(x=put(mesh, jnp.ones((8, 3), jnp.float32)), ids=placed.ids)
        with pytest.raises(TypeCheckError, match=r"batch.x is not f32\[jax.Array \| numpy.ndarray, "
                                                 r"b'batch/d embed'\]: sharding is P\(None, None\)"):
            consume(wrong)


def test_host_data_passes_a_checked_call_eagerly(mesh):
    @typechecked
    def rows(x: f32[jax.Array | np.ndarray, b"batch/d embed"]) -> int:
        return x.shape[0]

    with jax.set_mesh(mesh):
        assert rows(np.ones((8, 3), np.float32)) == 8
        assert rows(put(mesh, jnp.ones((8, 3)), "d")) == 8
        assert rows(put(mesh, jnp.ones((8, 3)), "d")) == 8  # again: the fast path's answer
        with pytest.raises(TypeCheckError, match=r"sharding is P\(None, None\) but the annotation says P\('d', None\)"):
            rows(put(mesh, jnp.ones((8, 3))))
        with pytest.raises(TypeCheckError, match=r"has dtype float64, the annotation wants float32"):
            rows(np.ones((8, 3)))
        with pytest.raises(TypeCheckError, match=r"the annotation wants a jax.Array \| numpy.ndarray, not a int"):
            rows(3)  # type: ignore[arg-type]


def test_under_jit_the_traced_value_is_checked_as_a_jax_array(mesh):
    @jax.jit
    @typechecked
    def double(x: f32[jax.Array | np.ndarray, b"batch/d embed"]) -> f32[jax.Array, b"batch/d embed"]:
        return x * 2

    with jax.set_mesh(mesh):
        out = double(put(mesh, jnp.ones((8, 3)), "d"))
        assert out.sharding.is_equivalent_to(NamedSharding(mesh, P("d", None)), 2)
        # numpy goes in to jit as a replicated array: the check sees a device value.
        with pytest.raises(TypeCheckError, match=r"double\(\).*(annotation says|annotation shards it as) P\('d', None\)"):
            jax.block_until_ready(double(np.ones((8, 3), np.float32)))


def test_derivation_treats_the_field_like_a_jax_array_one(mesh):
    assert make_partition_specs(Batch) == Batch(x=P("d", None), ids=P("d"))
    assert make_partition_specs(HOST_OR_DEVICE) == P("d", None)
    shardings = make_shardings(Batch, mesh)
    assert shardings.x == NamedSharding(mesh, P("d", None))
    structs = make_shape_dtype_structs(Batch, {"batch": 8, "embed": 3}, mesh)
    assert structs.x.shape == (8, 3) and structs.ids.dtype == np.int32


def test_is_instance_narrows_to_the_annotations_array_class(mesh):
    with jax.set_mesh(mesh):
        x = put(mesh, jnp.ones((8, 3)), "d")
        assert is_instance(x, f32[jax.Array, b"batch/d embed"])
        assert not is_instance(np.ones((8, 3), np.float32), f32[jax.Array, b"batch embed"])
        assert is_instance(np.ones(5, np.int32), i32[np.ndarray, b"rows"], np.ndarray)
        assert is_instance(np.ones((8, 3), np.float32), HOST_OR_DEVICE, (jax.Array, np.ndarray))
        assert is_instance(x, HOST_OR_DEVICE, (np.ndarray, jax.Array))
        # The runtime spelling has no class: the one named is required too.
        assert is_instance(x, f32[b"batch/d embed"]) and not is_instance(np.ones((8, 3), np.float32), f32[b"b e"])
        assert is_instance(np.ones((8, 3), np.float32), f32[b"b e"], np.ndarray)
        # The builtin spelling still works at run time.
        assert isinstance(x, f32[jax.Array, b"batch/d embed"])


def test_is_instance_refuses_a_class_the_annotation_does_not_name():
    with pytest.raises(TypeError, match=r"is_instance: shardtypes.i32\[numpy.ndarray, b'rows'\] wants a "
                                         r"numpy.ndarray, but the class to narrow to is jax.Array; pass "
                                         r"is_instance\(value, annotation, numpy.ndarray\)"):
        is_instance(np.ones(5, np.int32), i32[np.ndarray, b"rows"])
    with pytest.raises(TypeError, match=r"wants a jax.Array \| numpy.ndarray, but the class to narrow to is "
                                         r"jax.Array; pass is_instance\(value, annotation, \(jax.Array, numpy.ndarray\)\)"):
        is_instance(np.ones((8, 3), np.float32), HOST_OR_DEVICE)
    with pytest.raises(TypeError, match=r"is_instance: annotation must be an array annotation such as "
                                         r"f32\[jax.Array, b'batch embed'\], got <class 'int'>"):
        is_instance(3, int)
    with pytest.raises(TypeError, match=r"is_instance: array_type must be a class or a tuple of classes, got 'x'"):
        is_instance(3, f32[b"a"], "x")  # type: ignore[call-overload]


def test_plain_typeguard_reads_the_union_too(mesh):
    with jax.set_mesh(mesh):
        typeguard.check_type(np.ones((8, 3), np.float32), HOST_OR_DEVICE)
        typeguard.check_type(put(mesh, jnp.ones((8, 3)), "d"), HOST_OR_DEVICE)
        with pytest.raises(TypeCheckError, match=r"f32\[jax.Array \| numpy.ndarray, b'batch/d embed'\]: "
                                                 r"the annotation wants a jax.Array \| numpy.ndarray, not a list"):
            typeguard.check_type([1.0], HOST_OR_DEVICE)
