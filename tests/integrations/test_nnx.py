"""shardtypes.nnx: Flax NNX modules checked against the annotations on their classes, and the
shardings of nnx.state(model) derived from them."""

import jax
import jax.numpy as jnp
import pytest
from jax.sharding import PartitionSpec as P

from shardtypes import TypeCheckError, f32, i32

from conftest import make_mesh

nnx = pytest.importorskip("flax.nnx")
import shardtypes.nnx as st_nnx  # noqa: E402


class Block(nnx.Module):
    w: nnx.Param[f32[b"embed/d hidden/t"]]
    b: nnx.Param[f32[b"hidden/t"]]

    def __init__(self, embed: int, hidden: int, rngs: nnx.Rngs):
        self.w = nnx.Param(jax.random.normal(rngs.params(), (embed, hidden)))
        self.b = nnx.Param(jnp.zeros((hidden,)))


class Model(nnx.Module):
    embed: nnx.Param[f32[b"vocab/t embed/d"]]
    blocks: nnx.List[Block]
    steps: nnx.BatchStat[i32[b""]]

    def __init__(self, rngs: nnx.Rngs, hidden=(4, 4)):
        self.embed = nnx.Param(jnp.zeros((16, 8)))
        self.blocks = nnx.List([Block(8, h, rngs) for h in hidden])
        self.steps = nnx.BatchStat(jnp.zeros((), jnp.int32))


@pytest.fixture(scope="module")
def mesh():
    return make_mesh("explicit")


def sharded(mesh, **kw):
    model = Model(nnx.Rngs(0), **kw)
    state = jax.device_put(nnx.state(model), st_nnx.shardings(model, mesh))
    nnx.update(model, state)
    return model


def test_partition_specs_follow_the_state():
    model = Model(nnx.Rngs(0))
    specs = st_nnx.partition_specs(model, nnx.Param)
    flat = {jax.tree_util.keystr(p): s for p, s in jax.tree_util.tree_flatten_with_path(specs)[0]}
    assert flat == {
        "['blocks'][0]['b'].value": P("t"), "['blocks'][0]['w'].value": P("d", "t"),
        "['blocks'][1]['b'].value": P("t"), "['blocks'][1]['w'].value": P("d", "t"),
        "['embed'].value": P("t", "d"),
    }
    # the same structure as nnx.state, so jax.device_put and nnx.update take it
    assert jax.tree.structure(specs) == jax.tree.structure(
        jax.tree.map(lambda _: P(), nnx.state(model, nnx.Param)))


def test_device_put_update_then_check(mesh):
    model = sharded(mesh)
    assert model.blocks[1].w.get_value().sharding.spec == P("d", "t")
    st_nnx.check(model)
    st_nnx.check(model, nnx.Param)


def test_abstract_model(mesh):
    abstract = nnx.eval_shape(lambda: Model(nnx.Rngs(0)))
    shardings = st_nnx.shardings(abstract, mesh, nnx.Param)
    leaves = jax.tree.leaves(shardings)
    assert len(leaves) == 5 and all(s.mesh == mesh for s in leaves)
    with jax.set_mesh(mesh):
        assert jax.tree.leaves(st_nnx.shardings(abstract))[0].mesh == mesh


def test_check_catches_with_the_path(mesh):
    model = Model(nnx.Rngs(0))  # not laid out yet
    with pytest.raises(TypeCheckError, match=r"shardtypes.nnx.check: Model.blocks\[0\].b is not "
                                             r"f32\[b'hidden/t'\]: the array has a SingleDeviceSharding"):
        st_nnx.check(model, nnx.Param)
    mixed = sharded(mesh, hidden=(4, 6))
    with pytest.raises(TypeCheckError, match=r"Model.blocks\[1\].b is not f32\[b'hidden/t'\]: "
                                             r"dimension 'hidden' is 6 here .*bound to 4 by Model.blocks\[0\].b"):
        st_nnx.check(mixed)
    model = sharded(mesh)
    model.steps = nnx.BatchStat(jnp.zeros((), jnp.float32))
    with pytest.raises(TypeCheckError, match=r"Model.steps is not i32\[b''\]: has dtype float32"):
        st_nnx.check(model)


def test_unannotated_and_mistyped_variables_are_errors(mesh):
    class Loose(nnx.Module):
        w: nnx.Param[f32[b"a"]]

        def __init__(self):
            self.w = nnx.Param(jnp.zeros(3))
            self.extra = nnx.Param(jnp.zeros(2))

    with pytest.raises(TypeError, match=r"shardtypes.nnx: no shardtypes annotation for Loose.extra; annotate"):
        st_nnx.shardings(Loose(), mesh)

    class Mistyped(nnx.Module):
        w: nnx.BatchStat[f32[b"a"]]

        def __init__(self):
            self.w = nnx.Param(jnp.zeros(3))

    with pytest.raises(TypeError, match="Mistyped.w is an nnx.Param but its annotation says BatchStat"):
        st_nnx.partition_specs(Mistyped())
    with pytest.raises(TypeError, match="model must be an nnx.Module, got dict"):
        st_nnx.check({})
