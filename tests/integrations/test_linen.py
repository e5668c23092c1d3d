"""Flax Linen: layouts from nn.Partitioned / nn.LogicallyPartitioned boxes, and checks of Linen
variables against their boxes or a user-written annotation tree."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import pytest
from jax.sharding import NamedSharding, PartitionSpec as P
from typeguard import TypeCheckError

import shardtypes.linen
from shardtypes import AxisRules, AxisRulesError, axis_rules, f32, make_shardings, plan, shard

RULES = AxisRules([("embed", "d"), ("mlp", "t")])


def boxed(init, names):
    return nn.with_logical_partitioning(init, names)


class Block(nn.Module):
    @nn.compact
    def __call__(self, x):
        h = nn.Dense(32, kernel_init=boxed(nn.initializers.lecun_normal(), ("embed", "mlp")),
                     bias_init=boxed(nn.initializers.zeros, ("mlp",)))(x)
        return nn.Dense(8, kernel_init=boxed(nn.initializers.lecun_normal(), ("mlp", "embed")), use_bias=False)(h)


X = jnp.ones((4, 8))
WANT = {"['params']['Dense_0']['bias']": P("t"), "['params']['Dense_0']['kernel']": P("d", "t"),
        "['params']['Dense_1']['kernel']": P("t", "d")}


def abstract():
    return jax.eval_shape(Block().init, jax.random.key(0), X)


def test_annotations_from_boxes():
    anns = shardtypes.linen.annotations(abstract())
    assert anns["params"]["Dense_0"]["kernel"] is f32[b"8/embed 32/mlp"]
    assert anns["params"]["Dense_0"]["bias"] is f32[b"32/mlp"]


def test_init_sharded_under_the_rules_and_checked(mesh):
    with axis_rules(RULES):
        shardings = shardtypes.linen.shardings(abstract(), mesh)
        variables = jax.jit(Block().init, out_shardings=shardings)(jax.random.key(0), X)
        for path, leaf in jax.tree_util.tree_flatten_with_path(shardtypes.linen.unbox(variables))[0]:
            where = jax.tree_util.keystr(path)
            assert leaf.sharding.is_equivalent_to(NamedSharding(mesh, WANT[where]), leaf.ndim), where
        shardtypes.linen.check(variables)
        # the boxed tree works directly with make_shardings and plan, and agrees with Flax here
        assert make_shardings(abstract(), mesh)["params"]["Dense_1"]["kernel"].spec == P("t", "d")
        flax_shardings = nn.logical_to_mesh_sharding(nn.get_partition_spec(abstract()), mesh,
                                                     [("embed", "d"), ("mlp", "t")])
        assert jax.tree.leaves(flax_shardings)[0].spec == P("t")
        assert plan(abstract(), mesh).ok
        # shard lays host values out as the boxes say
        host = shardtypes.linen.unbox(Block().init(jax.random.key(0), X))
        placed = shard(host, shardtypes.linen.annotations(abstract()), mesh)
        assert placed["params"]["Dense_0"]["kernel"].sharding.spec == P("d", "t")


def test_check_against_a_user_written_annotation_tree(mesh):
    written = {"params": {"Dense_0": {"kernel": f32[b"embed/embed mlp/mlp"], "bias": f32[b"mlp/mlp"]},
                          "Dense_1": {"kernel": f32[b"mlp/mlp embed/embed"]}}}
    with axis_rules(RULES):
        variables = jax.jit(Block().init, out_shardings=shardtypes.linen.shardings(abstract(), mesh))(
            jax.random.key(0), X)
        shardtypes.linen.check(variables, written)
        wrong = {"params": {**written["params"], "Dense_1": {"kernel": f32[b"mlp/embed embed/mlp"]}}}
        with pytest.raises(TypeCheckError, match=r"shardtypes.linen.check: .*\['Dense_1'\]\['kernel'\].*mlp"):
            shardtypes.linen.check(variables, wrong)
        renamed = {"params": {"Dense_0": written["params"]["Dense_0"], "Dense_2": written["params"]["Dense_1"]}}
        with pytest.raises(TypeError, match=r"the annotation has \[\"\['params'\]\['Dense_2'\]\['kernel'\]\"\], "
                                            r"which the variables lack; the variables have .*Dense_1"):
            shardtypes.linen.check(variables, renamed)


def test_check_finds_a_wrong_layout(mesh):
    with axis_rules(RULES):
        host = Block().init(jax.random.key(0), X)
        with pytest.raises(TypeCheckError, match=r"\['params'\]\['Dense_0'\]\['bias'\].*f32\[b'32/mlp'\]"):
            shardtypes.linen.check(jax.device_put(host, NamedSharding(mesh, P())))


def test_a_logical_name_no_rule_maps_is_an_error(mesh):
    with axis_rules(AxisRules([("embed", "d")])):
        with pytest.raises(AxisRulesError, match=r"\['params'\]\['Dense_0'\]\['bias'\] \(f32\[b'32/mlp'\]\).*'mlp'"):
            shardtypes.linen.shardings(abstract(), mesh)


def test_partitioned_boxes_name_mesh_axes(mesh):
    class Mesh_(nn.Module):
        @nn.compact
        def __call__(self, x):
            init = nn.with_partitioning(nn.initializers.lecun_normal(), (None, ("d", "t")))
            return nn.Dense(16, kernel_init=init, use_bias=False)(x)

    abstract_ = jax.eval_shape(Mesh_().init, jax.random.key(0), X)
    assert shardtypes.linen.partition_specs(abstract_)["params"]["Dense_0"]["kernel"] == P(None, ("d", "t"))
    variables = jax.jit(Mesh_().init, out_shardings=shardtypes.linen.shardings(abstract_, mesh))(jax.random.key(0), X)
    shardtypes.linen.check(variables)


def test_bad_input_is_named():
    plain = jax.eval_shape(nn.Dense(4).init, jax.random.key(0), X)
    with pytest.raises(TypeError, match=r"\['params'\]\['bias'\], \['params'\]\['kernel'\] is in no nn.Partitioned box"):
        shardtypes.linen.annotations(plain)
    with pytest.raises(TypeError, match=r"shardtypes.linen.annotations: variables must be a Linen variables tree"):
        shardtypes.linen.annotations(None)
    with pytest.raises(ValueError, match=r"\['w'\]: the LogicallyPartitioned box names 1 axes \('embed',\) for a value "
                                         r"of shape \(2, 2\)"):
        shardtypes.linen.annotations({"w": nn.LogicallyPartitioned(jnp.ones((2, 2)), ("embed",))})


def test_each_distinct_box_reads_as_its_own_annotation():
    # Annotations are kept per (box class, shape, dtype, names): equal boxes share one, and a
    # box that differs in any of these gets its own.
    def box(shape=(8, 4), dtype=jnp.float32, names=("embed", "mlp"), cls=nn.LogicallyPartitioned):
        return cls(jax.ShapeDtypeStruct(shape, dtype), names)

    tree = {"a": box(), "b": box(), "c": box(dtype=jnp.bfloat16), "d": box(names=("mlp", "embed")),
            "e": box(shape=(4, 8)), "f": box(cls=nn.Partitioned)}
    got = shardtypes.linen.annotations(tree)
    assert got["a"] is got["b"]
    assert repr(got["a"]) == "shardtypes.f32[b'8/embed 4/mlp']"
    assert repr(got["c"]) == "shardtypes.bf16[b'8/embed 4/mlp']"
    assert repr(got["d"]) == "shardtypes.f32[b'8/mlp 4/embed']"
    assert repr(got["e"]) == "shardtypes.f32[b'4/embed 8/mlp']"
    assert repr(got["f"]) == "shardtypes.f32[b'8/embed 4/mlp']"


class WithNorm(nn.Module):
    """A model as Flax writes it: a kernel in an nn.with_partitioning box, a LayerNorm's scale
    and bias in none (Flax replicates them)."""

    @nn.compact
    def __call__(self, x):
        x = nn.Dense(16, kernel_init=nn.with_partitioning(nn.initializers.lecun_normal(), (None, "d")),
                     use_bias=False)(x)
        return nn.LayerNorm()(x)


def test_unboxed_variables_are_replicated_as_flax_does_when_asked(mesh):
    abstract_ = jax.eval_shape(WithNorm().init, jax.random.key(0), X)
    with pytest.raises(TypeError, match=r"\['params'\]\['LayerNorm_0'\]\['bias'\], \['params'\]\['LayerNorm_0'\]"
                                        r"\['scale'\] is in no nn.Partitioned box, so it has no layout; replicate "
                                        r"what is in no box, as Flax does, with unboxed='replicate', or wrap its "
                                        r"initializer in nn.with_partitioning\(init, \('fsdp', None\)\)"):
        shardtypes.linen.shardings(abstract_, mesh)
    specs = shardtypes.linen.partition_specs(abstract_, unboxed="replicate")
    assert specs["params"]["LayerNorm_0"]["scale"] == P(None)
    assert specs["params"]["Dense_0"]["kernel"] == P(None, "d")
    shardings = shardtypes.linen.shardings(abstract_, mesh, unboxed="replicate")
    variables = jax.jit(WithNorm().init, out_shardings=shardings)(jax.random.key(0), X)
    assert variables["params"]["LayerNorm_0"]["scale"].sharding.is_fully_replicated
    with pytest.raises(ValueError, match="unboxed must be 'error' or 'replicate', got 'drop'"):
        shardtypes.linen.annotations(abstract_, unboxed="drop")
