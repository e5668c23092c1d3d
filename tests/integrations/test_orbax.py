"""A sharded TrainState (parameters and an optax state) saved with Orbax and restored with the
shardings derived from the annotations: ``make_shape_dtype_structs(abstract_state)`` is the
restore target, on Explicit and Auto axes."""

from typing import Any

import flax.struct
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from jax.sharding import PartitionSpec as P

from shardtypes import f32, i32, make_shape_dtype_structs, make_shardings, pytree_dataclass

from conftest import make_mesh

ocp = pytest.importorskip("orbax.checkpoint")

TX = optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(1e-2))


@pytree_dataclass
class Params:
    w_up: f32[b"embed/d hidden/t"]
    w_down: f32[b"hidden/t embed/d"]


@pytree_dataclass
class TrainState:
    params: Params
    opt_state: Any
    step: i32[b""]


@flax.struct.dataclass
class StructState:  # the flax.struct variant
    params: Params
    opt_state: Any
    step: i32[b""]


def init(key, cls=TrainState):
    k1, k2 = jax.random.split(key)
    params = Params(jax.random.normal(k1, (16, 32)), jax.random.normal(k2, (32, 16)))
    return cls(params, TX.init(params), jnp.zeros((), jnp.int32))


@pytest.mark.parametrize("cls", [TrainState, StructState], ids=["pytree_dataclass", "flax_struct"])
def test_orbax_round_trip_restores_the_derived_shardings(mesh, tmp_path, cls):
    with jax.set_mesh(mesh):
        abstract = jax.eval_shape(lambda k: init(k, cls), jax.random.key(0))
        shardings = make_shardings(abstract)
        state = jax.jit(lambda k: init(k, cls), out_shardings=shardings)(jax.random.key(0))
        target = make_shape_dtype_structs(abstract)
        assert target.opt_state[1][0].mu.w_up.sharding.spec == P("d", "t")
        assert target.opt_state[1][0].count.shape == () and target.opt_state[1][0].count.sharding.spec == P()
        with ocp.StandardCheckpointer() as checkpointer:
            checkpointer.save(tmp_path / "state", state)
            checkpointer.wait_until_finished()
            restored = checkpointer.restore(tmp_path / "state", target)
    assert type(restored) is cls
    assert jax.tree.structure(restored) == jax.tree.structure(state)
    for got, want, sharding in zip(jax.tree.leaves(restored), jax.tree.leaves(state), jax.tree.leaves(shardings)):
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
        assert got.sharding == sharding
    assert restored.opt_state[1][0].nu.w_down.sharding.spec == P("t", "d")


def test_structs_of_a_value_tree_take_the_values_shapes(mesh):
    with jax.set_mesh(mesh):
        abstract = jax.eval_shape(init, jax.random.key(0))
        structs = make_shape_dtype_structs(abstract)
    assert structs.params.w_up.shape == (16, 32) and structs.params.w_up.dtype == jnp.float32
    assert structs.params.w_up.sharding.mesh == mesh
    # the same as with dims, for the parameters
    with jax.set_mesh(mesh):
        named = make_shape_dtype_structs(Params, {"embed": 16, "hidden": 32})
    assert named.w_up == structs.params.w_up


def test_structs_without_dims_need_a_value_tree():
    mesh = make_mesh("explicit")
    with pytest.raises(TypeError, match=r"make_shape_dtype_structs: dims must be a mapping of the sizes of the named dims .* for an annotation tree"):
        make_shape_dtype_structs(Params, mesh=mesh)


def test_structs_of_values_whose_layout_does_not_fit():
    mesh = make_mesh("explicit")
    bad = Params(jax.ShapeDtypeStruct((6, 32), jnp.float32), jax.ShapeDtypeStruct((32, 16), jnp.float32))
    with pytest.raises(ValueError, match=r"make_shape_dtype_structs: \[0\]\.w_up is float32\[6, 32\]: dim 0 of size 6 "
                                         r"cannot be split over mesh axes \('d',\) \(4 ways\)"):
        make_shape_dtype_structs((bad,), mesh=mesh)
    flat = Params(jax.ShapeDtypeStruct((16,), jnp.float32), jax.ShapeDtypeStruct((32, 16), jnp.float32))
    with pytest.raises(ValueError, match=r"make_shape_dtype_structs: Params\.w_up is float32\[16\], of rank 1, but its "
                                         r"annotation lays it out as P\('d', 't'\), which has 2 entries"):
        make_shape_dtype_structs(flat, mesh=mesh)
