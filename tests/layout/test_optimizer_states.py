"""Optimizer states follow the parameters: optax states (annotated parameter classes inside
unannotated NamedTuples, tuples and empty states) through make_partition_specs, make_shardings,
make_shape_dtype_structs, shard, plan and checks, and ``like=`` for states of plain parameters."""

from typing import Any

import flax.struct
import jax
import jax.numpy as jnp
import optax
import pytest
from jax.sharding import NamedSharding, PartitionSpec as P
from typeguard import TypeCheckError

from shardtypes import (
    f32,
    i32,
    make_partition_specs,
    make_shape_dtype_structs,
    make_shardings,
    plan,
    pytree_dataclass,
    shard,
    typechecked,
)


@pytree_dataclass
class Layer:
    w: f32[b"embed/d hidden/t"]
    b: f32[b"hidden/t"]


@pytree_dataclass
class Params:
    embed: f32[b"vocab embed/d"]
    layer: Layer


DIMS = {"vocab": 16, "embed": 8, "hidden": 4}
LAYOUT = {".embed": P(None, "d"), ".layer.w": P("d", "t"), ".layer.b": P("t")}


def real_params(mesh):
    value = Params(jnp.ones((16, 8)), Layer(jnp.ones((8, 4)), jnp.ones(4)))
    return shard(value, Params, mesh)


OPTIMIZERS = {
    "adamw": lambda: optax.adamw(1e-3),
    "sgd-momentum": lambda: optax.sgd(1e-2, momentum=0.9),
    "chain-clip": lambda: optax.chain(optax.clip_by_global_norm(1.0), optax.adam(1e-3)),
    "multisteps": lambda: optax.MultiSteps(optax.adam(1e-3), every_k_schedule=4),
    "masked": lambda: optax.masked(optax.adam(1e-3), Params(True, Layer(True, False))),
}


def spec_of(path: str) -> P:
    """The layout a leaf of the state takes: the parameter's, by the end of its path; a scalar
    replicated."""
    for suffix, spec in LAYOUT.items():
        if path.endswith(suffix):
            return spec
    return P()


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_optax_state_takes_the_parameters_layout(name, mesh):
    tx = OPTIMIZERS[name]()
    params = real_params(mesh)
    abstract = jax.eval_shape(tx.init, params)
    specs = make_partition_specs(abstract)
    assert jax.tree.structure(specs, is_leaf=lambda x: isinstance(x, P)) == jax.tree.structure(abstract)
    shardings = make_shardings(abstract, mesh)
    state = jax.jit(tx.init, out_shardings=shardings)(params)
    leaves = jax.tree_util.tree_flatten_with_path(state)[0]
    assert leaves
    for path, leaf in leaves:
        where = jax.tree_util.keystr(path)
        assert leaf.sharding.is_equivalent_to(NamedSharding(mesh, spec_of(where)), leaf.ndim), where
    if name == "masked":  # the masked-out bias keeps optax's hole
        assert isinstance(state.inner_state[0].mu.layer.b, optax.MaskedNode)
    # an update step keeps the layout, and shard() lays a host-made state out the same way
    updates, new_state = jax.jit(tx.update)(params, state, params)
    assert jax.tree.structure(new_state) == jax.tree.structure(state)
    placed = shard(tx.init(params), abstract, mesh)
    for (path, a), b in zip(leaves, jax.tree.leaves(placed)):
        assert b.sharding.is_equivalent_to(a.sharding, a.ndim), jax.tree_util.keystr(path)


def test_state_specs_spelled_out():
    abstract = jax.eval_shape(optax.adamw(1e-3).init, jax.eval_shape(lambda: Params(
        jnp.ones((16, 8)), Layer(jnp.ones((8, 4)), jnp.ones(4)))))
    adam, *rest = make_partition_specs(abstract)
    assert adam.count == P()
    assert adam.mu == Params(P(None, "d"), Layer(P("d", "t"), P("t")))
    assert adam.nu == adam.mu
    assert rest == [optax.EmptyState(), optax.EmptyState()]


def test_shape_dtype_structs_and_plan_of_a_state(mesh):
    abstract = jax.eval_shape(optax.adamw(1e-3).init, real_params(mesh))
    structs = make_shape_dtype_structs(abstract, DIMS, mesh)
    assert structs[0].count.shape == () and structs[0].count.dtype == jnp.int32
    assert structs[0].mu.layer.w.shape == (8, 4)
    assert structs[0].mu.layer.w.sharding.spec == P("d", "t")
    report = plan(abstract, mesh)
    rows = {row.path: row for row in report.rows}
    assert rows["[0].count"].spec == "P()" and rows["[0].count"].annotation == "i32[b'']"
    assert rows["[0].nu.layer.w"].device_shape == (2, 2)
    assert report.ok


# like=: a state of plain (unannotated) parameters takes the layout of an annotation tree.

LIKE = {"embed": f32[b"vocab embed/d"], "layer": {"w": f32[b"embed/d hidden/t"], "b": f32[b"hidden/t"]}}


def dict_params():
    return {"embed": jnp.ones((16, 8)), "layer": {"w": jnp.ones((8, 4)), "b": jnp.ones(4)}}


@pytest.mark.parametrize("name", ["adamw", "sgd-momentum", "chain-clip", "multisteps"])
def test_like_gives_a_plain_state_the_layout(name, mesh):
    tx = OPTIMIZERS[name]()
    params = shard(dict_params(), LIKE, mesh)
    abstract = jax.eval_shape(tx.init, params)
    state = jax.jit(tx.init, out_shardings=make_shardings(abstract, mesh, like=LIKE))(params)
    for path, leaf in jax.tree_util.tree_flatten_with_path(state)[0]:
        where = jax.tree_util.keystr(path)
        want = {"['embed']": P(None, "d"), "['w']": P("d", "t"), "['b']": P("t")}
        spec = next((s for k, s in want.items() if where.endswith(k)), P())
        assert leaf.sharding.is_equivalent_to(NamedSharding(mesh, spec), leaf.ndim), where


def test_like_with_masked_holes(mesh):
    tx = optax.masked(optax.adam(1e-3), {"embed": True, "layer": {"w": True, "b": False}})
    abstract = jax.eval_shape(tx.init, dict_params())
    specs = make_partition_specs(abstract, like=LIKE)
    mu = specs.inner_state[0].mu
    assert mu["layer"]["w"] == P("d", "t") and isinstance(mu["layer"]["b"], optax.MaskedNode)
    placed = shard(tx.init(dict_params()), abstract, mesh, like=LIKE)
    assert placed.inner_state[0].nu["embed"].sharding.spec == P(None, "d")


def test_like_and_plan(mesh):
    abstract = jax.eval_shape(optax.sgd(1e-2, momentum=0.9).init, dict_params())
    rows = {row.path: row for row in plan(abstract, mesh, like=LIKE).rows}
    assert rows["[0].trace['layer']['w']"].spec == "P('d', 't')"


def test_like_as_a_class_matches_a_state_of_its_instances():
    abstract = jax.eval_shape(optax.adam(1e-3).init, jax.eval_shape(real_params_host))
    assert make_partition_specs(abstract, like=Params)[0].mu.layer.w == P("d", "t")


def real_params_host():
    return Params(jnp.ones((16, 8)), Layer(jnp.ones((8, 4)), jnp.ones(4)))


# Bad input: a clear error naming the path, and nothing placed.


def test_a_plain_state_without_like_is_an_error():
    abstract = jax.eval_shape(optax.adamw(1e-3).init, dict_params())
    with pytest.raises(TypeError, match=r"\[0\]\.mu\['embed'\] \(float32\[16,8\]\) has no shardtypes annotation "
                                        r"anywhere above it, so no layout.*like="):
        make_shardings(abstract, jax.make_mesh((4, 2), ("d", "t")))


def test_like_from_other_parameters_names_the_difference():
    missing = {"embed": jnp.ones((16, 8))}  # a state without the layer
    abstract = jax.eval_shape(optax.adam(1e-3).init, missing)
    with pytest.raises(TypeError, match=r"\[0\]\.mu\['embed'\] .* and \[0\]\.mu does not have the structure of "
                                        r"like= .*: missing \[\['layer'\]\['b'\], \['layer'\]\['w'\]\]"):
        make_partition_specs(abstract, like=LIKE)
    renamed = {"embed": jnp.ones((16, 8)), "layer": {"w": jnp.ones((8, 4)), "bias": jnp.ones(4)}}
    abstract = jax.eval_shape(optax.adam(1e-3).init, renamed)
    with pytest.raises(TypeError, match=r"missing \[\['layer'\]\['b'\]\]; has \[\['layer'\]\['bias'\]\], which "
                                        r"like= does not"):
        make_shardings(abstract, jax.make_mesh((4, 2), ("d", "t")), like=LIKE)


def test_like_of_another_structure_is_an_error():
    abstract = jax.eval_shape(optax.adam(1e-3).init, dict_params())
    with pytest.raises(TypeError, match=r"\[0\]\.mu\['embed'\] .* no subtree holding it has the structure of "
                                        r"like= \(tuple with leaves \[\[0\], \[1\]\]\)"):
        make_partition_specs(abstract, like=(f32[b"a"], f32[b"b"]))


def test_like_must_be_an_annotation_tree():
    abstract = jax.eval_shape(optax.adam(1e-3).init, dict_params())
    with pytest.raises(TypeError, match=r"like= must be an annotation tree .*: .*3.*which has no layout"):
        make_partition_specs(abstract, like=3)


def test_state_from_other_parameters_is_not_half_placed(mesh):
    tx = optax.adam(1e-3)
    state = tx.init(real_params_host())
    other = jax.eval_shape(tx.init, {"embed": jnp.ones((16, 8))})
    with pytest.raises(TypeError, match=r"has no shardtypes annotation anywhere above it"):
        shard(state, other, mesh)
    with pytest.raises(ValueError, match=r"shard: the value's leaves do not match the annotation's"):
        shard(state, jax.eval_shape(tx.init, real_params_host())[0].mu, mesh)


def test_unannotated_array_field_of_an_annotated_class_is_named():
    @flax.struct.dataclass
    class Half:
        w: f32[b"a/d"]
        extra: jax.Array

    with pytest.raises(TypeError, match=r"\[1\]\.extra has no shardtypes annotation on .*Half, so no layout"):
        make_partition_specs((optax.EmptyState(), Half(jnp.zeros(8), jnp.zeros(2))))
    # a scalar is replicated
    specs = make_partition_specs(Half(jnp.zeros(8), jnp.zeros(())))
    assert specs.extra == P() and specs.w == P("d")


def test_array_annotation_on_a_subtree_is_an_error():
    @flax.struct.dataclass
    class Wrong:
        w: f32[b"a/d"]

    with pytest.raises(TypeError, match=r"Wrong\.w is annotated f32\[b'a/d'\], but holds a dict tree of 2 leaves"):
        make_partition_specs(Wrong({"x": jnp.zeros(8), "y": jnp.zeros(8)}))


# Checks: a TrainState whose opt_state is annotated Any still checks the parameter classes inside.


@flax.struct.dataclass
class TrainState:
    params: Params
    opt_state: Any
    step: i32[b""]


@typechecked
def train_step(state: TrainState) -> TrainState:
    return state.replace(step=state.step + 1)


def test_checked_train_state_with_an_optax_state(mesh):
    tx = optax.adamw(1e-3)
    params = real_params(mesh)
    state = TrainState(params, tx.init(params), jnp.zeros((), jnp.int32))
    state = shard(state, jax.eval_shape(lambda: state), mesh)
    assert make_shardings(state, mesh).opt_state[0].mu.layer.w.spec == P("d", "t")
    assert int(train_step(state).step) == 1
    assert int(jax.jit(train_step)(state).step) == 1
    replicated = jax.device_put(state.opt_state[0].nu, NamedSharding(mesh, P()))
    bad = state.replace(opt_state=(state.opt_state[0]._replace(nu=replicated), *state.opt_state[1:]))
    with pytest.raises(TypeCheckError, match=r'argument "state" .* of .*train_step\(\): state\.opt_state\[0\]\.nu\.embed '
                                        r"is not f32\[b'vocab embed/d'\]: sharding is P\(None, None\)"):
        train_step(bad)


def test_like_changed_in_place_is_taken_apart_again():
    # like= trees are kept between calls; one changed in place must not answer from the old one.
    like = {"embed": f32[b"vocab embed/d"], "layer": {"w": f32[b"embed/d hidden/t"], "b": f32[b"hidden/t"]}}
    abstract = jax.eval_shape(optax.adam(1e-3).init, dict_params())
    assert make_partition_specs(abstract, like=like)[0].mu["layer"]["w"] == P("d", "t")
    like["layer"]["w"] = f32[b"embed/t hidden/d"]
    assert make_partition_specs(abstract, like=like)[0].mu["layer"]["w"] == P("t", "d")
    like["layer"]["extra"] = f32[b"hidden"]
    with pytest.raises(TypeError, match=r"missing \[\['layer'\]\['extra'\]\]"):
        make_partition_specs(abstract, like=like)


def test_like_with_a_hole_for_a_whole_subtree(mesh):
    # optax.masked leaves a MaskedNode where a whole dict of parameters was masked out: the
    # structure differs from like='s, and the slow match (holes as leaves) still finds it.
    tx = optax.masked(optax.adam(1e-3), {"embed": True, "layer": {"w": False, "b": True}})
    specs = make_partition_specs(jax.eval_shape(tx.init, dict_params()), like=LIKE)
    assert specs.inner_state[0].mu["layer"]["b"] == P("t")
    assert isinstance(specs.inner_state[0].mu["layer"]["w"], optax.MaskedNode)
