"""UNCONSTRAINED, "XLA decides this dim" (issue 19 item 12): ``embed/?`` in a shape string and
``shardtypes.UNCONSTRAINED`` (JAX's ``PartitionSpec.UNCONSTRAINED``) as an axis-rule target.

Derivation gives ``P.UNCONSTRAINED`` in that dim; checks accept any split of it, on Explicit and
Auto axes; ``shard`` inside ``jax.jit`` on Auto axes passes it to
``jax.lax.with_sharding_constraint``; the entry points that place data refuse it by name.
"""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P
from typeguard import TypeCheckError

import shardtypes
from shardtypes import (
    UNCONSTRAINED,
    AxisRules,
    AxisRulesError,
    DimSpec,
    ShapeSpec,
    ShapeSpecError,
    axis_rules,
    check,
    explain,
    f32,
    make_partition_specs,
    make_shape_dtype_structs,
    make_shardings,
    plan,
    shard,
    typechecked,
    typed_shard_map,
)

from conftest import make_mesh, put

RULES = AxisRules([("batch", "d"), ("act_embed", UNCONSTRAINED), ("embed", "t")])


# ---------------------------------------------------------------------------------------------
# The language


def test_the_spelling_parses_prints_and_derives():
    assert UNCONSTRAINED is P.UNCONSTRAINED
    dim = DimSpec.parse("embed/?")
    assert (dim.shape, dim.kind, dim.unconstrained, tuple(dim.sharding)) == ("embed", "named", True, ())
    assert str(dim) == "embed/?" and dim.name == "embed"
    assert dim != DimSpec.parse("embed") and ShapeSpec.parse("a b/?") != ShapeSpec.parse("a b")
    spec = ShapeSpec.parse("batch/d seq+1/? _/?")
    assert str(spec) == "batch/d seq+1/? _/?"
    assert spec.partition_spec() == P("d", P.UNCONSTRAINED, P.UNCONSTRAINED)
    assert ShapeSpec.parse("... x/?").partition_spec(ndim=3) == P(None, None, P.UNCONSTRAINED)
    assert make_partition_specs(f32[b"batch/d embed/?"]) == P("d", P.UNCONSTRAINED)


@pytest.mark.parametrize("text, message", [
    ("embed/?/d", r"'\?' \(XLA decides the dim's layout\) stands alone after one '/', as in 'embed/\?'"),
    ("embed/d/?", r"'\?' \(XLA decides the dim's layout\) stands alone"),
    (".../?", r"variadic dim '\.\.\./\?' cannot be unconstrained"),
    ("*lead/?", r"variadic dim '\*lead/\?' cannot be unconstrained"),
    ("embed/??", r"mesh axis '\?\?' is not an identifier"),
])
def test_malformed_unconstrained_dims(text, message):
    with pytest.raises(ShapeSpecError, match=message):
        ShapeSpec.parse(f"a {text}")


def test_a_variadic_before_an_unconstrained_dim_needs_the_rank():
    with pytest.raises(ShapeSpecError, match=r"comes before sharded dims.*partition_spec\(ndim=\.\.\.\)"):
        ShapeSpec.parse("... x/?").partition_spec()


# ---------------------------------------------------------------------------------------------
# Rules


def test_unconstrained_as_a_rule_target():
    assert repr(RULES) == "AxisRules([('batch', 'd'), ('act_embed', UNCONSTRAINED), ('embed', 't')])"
    assert list(RULES)[1] == ("act_embed", P.UNCONSTRAINED)
    assert RULES != AxisRules([("batch", "d"), ("act_embed", None), ("embed", "t")])
    assert RULES == AxisRules([("batch", "d"), ("act_embed", P.UNCONSTRAINED), ("embed", "t")])
    assert hash(RULES) == hash(AxisRules(list(RULES)))
    with axis_rules(RULES):
        assert make_partition_specs(f32[b"b/batch e/act_embed"]) == P("d", P.UNCONSTRAINED)
        assert make_partition_specs(f32[b"b/batch e/embed"]) == P("d", "t")
        assert make_partition_specs(f32[b"b/batch e/?"]) == P("d", P.UNCONSTRAINED)
        story = explain(f32[b"b/batch e/act_embed"], make_mesh("auto"), {"b": 8, "e": 4})
    assert "dim 1 'e/act_embed': XLA decides  (act_embed -> UNCONSTRAINED (XLA decides))" in story
    # The same rule with None instead replicates: the two are not confused by the caches.
    with axis_rules(AxisRules([("batch", "d"), ("act_embed", None)])):
        assert make_partition_specs(f32[b"b/batch e/act_embed"]) == P("d", None)


def test_merging_unconstrained_with_replicated_is_a_conflict():
    with pytest.raises(AxisRulesError, match=r"they map act_embed: UNCONSTRAINED vs None differently"):
        RULES.merge(AxisRules([("act_embed", None)]))
    assert list(RULES.merge(AxisRules([("act_embed", UNCONSTRAINED)])))[1] == ("act_embed", P.UNCONSTRAINED)


def test_an_unconstrained_name_beside_a_placed_one_is_an_error():
    with axis_rules(RULES):
        with pytest.raises(AxisRulesError, match=re.escape(
                "dim 1 'e/embed/act_embed': logical axis 'act_embed' is UNCONSTRAINED (XLA decides) but "
                "the dim's other names place it on ('t',): a PartitionSpec entry is either, not both")):
            make_partition_specs(f32[b"b/batch e/embed/act_embed"])


# ---------------------------------------------------------------------------------------------
# Checks: any split of the dim passes, on both mesh kinds


@pytest.mark.parametrize("layout", [("d", "t"), ("d", None), ("d",), ("d", ("t",))])
def test_checks_accept_any_split_of_an_unconstrained_dim(mesh, layout):
    x = put(mesh, jnp.zeros((8, 4)), *layout)
    check(f32, "batch/d embed/?", x)
    with axis_rules(RULES):
        check(f32, "b/batch e/act_embed", x)


def test_checks_still_compare_the_other_dims(mesh):
    x = put(mesh, jnp.zeros((8, 4)), "d", "t")
    with pytest.raises(TypeCheckError, match=re.escape(
            "value is not f32[b'batch embed/?']: sharding is P('d', 't') but the annotation says "
            "P(None, UNCONSTRAINED)")):
        check(f32, "batch embed/?", x)


@typechecked
def double(x: f32[b"batch/d embed/?"]) -> f32[b"batch/d embed/?"]:
    return x * 2


@typechecked
def double_replicated_batch(x: f32[b"batch embed/?"]) -> f32[b"batch embed/?"]:
    return x * 2


def test_a_checked_function_under_jit(mesh):
    for layout in (("d", "t"), ("d", None)):
        x = put(mesh, jnp.ones((8, 4)), *layout)
        with jax.set_mesh(mesh):
            assert np.asarray(jax.jit(double)(x)).sum() == 64
        assert np.asarray(double(x)).sum() == 64
    bad = put(mesh, jnp.ones((8, 4)), "d", "t")
    with jax.set_mesh(mesh):
        # Explicit axes: at trace time; Auto axes: the compile-time check of the layout XLA chose.
        with pytest.raises(TypeCheckError, match=r"double_replicated_batch.*P\(None, UNCONSTRAINED\)"):
            jax.jit(double_replicated_batch)(bad)


# ---------------------------------------------------------------------------------------------
# Placing


def test_shard_inside_jit_on_auto_axes_leaves_the_dim_to_xla():
    mesh = make_mesh("auto")
    x = put(mesh, jnp.ones((8, 4)), "d", "t")
    with jax.set_mesh(mesh):
        text = jax.jit(lambda v: shard(v * 2, f32[b"batch/d embed/?"])).lower(x).as_text()
        out = jax.jit(lambda v: shard(v * 2, f32[b"batch/d embed/?"]))(x)
    assert "unspecified_dims=[1]" in text or "?" in text  # the constraint leaves dim 1 open
    check(f32, "batch/d embed/?", out)
    assert out.sharding.spec[0] == "d"


def test_shard_eagerly_refuses_an_unconstrained_dim():
    mesh = make_mesh("auto")
    with pytest.raises(ValueError, match=re.escape(
            "shard: the value (f32[b'batch/d embed/?']): dim 1 is UNCONSTRAINED (XLA decides its "
            "layout), which only a constraint inside jax.jit can leave open")):
        shard(jnp.zeros((8, 4)), f32[b"batch/d embed/?"], mesh)


def test_shard_on_explicit_axes_refuses_an_unconstrained_dim():
    mesh = make_mesh("explicit")
    message = re.escape(
        "the annotation (f32[b'batch/d embed/?']): dim 1 'embed/?' is UNCONSTRAINED (XLA decides its "
        "layout), which needs Auto mesh axes; the mesh's axes are all Explicit ('d', 't')")
    with pytest.raises(ValueError, match=message):
        shard(jnp.zeros((8, 4)), f32[b"batch/d embed/?"], mesh)
    with jax.set_mesh(mesh), pytest.raises(ValueError, match=message):
        jax.jit(lambda v: shard(v, f32[b"batch/d embed/?"]))(put(mesh, jnp.zeros((8, 4)), "d"))


def test_make_shardings_and_structs_refuse_an_unconstrained_dim(mesh):
    tail = ("dim 1 'embed/?' is UNCONSTRAINED (XLA decides its layout), so it cannot be placed on "
            "devices: give the dim mesh axes (or replicate it)")
    with pytest.raises(ValueError, match=re.escape(f"make_shardings: ['w'] (f32[b'batch/d embed/?']): {tail}")):
        make_shardings({"w": f32[b"batch/d embed/?"]}, mesh)
    with pytest.raises(ValueError, match=re.escape(f"make_shape_dtype_structs: the annotation (f32[b'batch/d embed/?']): {tail}")):
        make_shape_dtype_structs(f32[b"batch/d embed/?"], {"batch": 8, "embed": 4}, mesh)
    with axis_rules(RULES), pytest.raises(ValueError, match=r"make_shardings: .*dim 1 'e/act_embed' is UNCONSTRAINED"):
        make_shardings(f32[b"b/batch e/act_embed"], mesh)
    # make_shardings after shard: shard's sharding (UNCONSTRAINED kept) is not served from the cache
    if mesh.axis_types[0] == jax.sharding.AxisType.Auto:
        with jax.set_mesh(mesh):
            jax.jit(lambda v: shard(v, f32[b"batch/d embed/?"]))(put(mesh, jnp.zeros((8, 4)), "d"))
        with pytest.raises(ValueError, match="make_shardings: the annotation"):
            make_shardings(f32[b"batch/d embed/?"], mesh)


@typed_shard_map
def kernel(x: f32[b"batch/d embed/?"]) -> f32[b"batch/d embed"]:
    return x


def test_typed_shard_map_refuses_an_unconstrained_dim(mesh):
    with jax.set_mesh(mesh), pytest.raises(TypeError, match=re.escape(
            "typed_shard_map: argument \"x\" of kernel: dim 1 is UNCONSTRAINED (P('d', UNCONSTRAINED)), but "
            "shard_map splits every dim of its operands as its specs say")):
        kernel(put(mesh, jnp.zeros((8, 4)), "d"))


@typechecked
def local_helper(y: f32[b"b/d e/?"]) -> f32[b"b/d e/?"]:
    return y * 2


@typed_shard_map
def calls_a_helper(x: f32[b"b/d e/t"]) -> f32[b"b/d e/t"]:
    return local_helper(x)


def test_an_unconstrained_dim_inside_a_kernel_is_an_error(mesh):
    # A local block says nothing of the dim's global size, and the kernel decides the split.
    with jax.set_mesh(mesh), pytest.raises(TypeCheckError, match=re.escape(
            "argument \"y\" (traced jax.Array) of local_helper() is not f32[b'b/d e/?']: it is a local "
            "block inside shard_map, where an UNCONSTRAINED ('/?') dim has no meaning (dim 1)")):
        calls_a_helper(put(mesh, jnp.zeros((8, 4)), "d", "t"))


def test_plan_shows_an_unconstrained_dim():
    report = plan(f32[b"batch/d embed/?"], make_mesh("auto"), {"batch": 8, "embed": 4})
    assert "UNCONSTRAINED" in str(report)


def test_the_public_name():
    assert "UNCONSTRAINED" in shardtypes.__all__ and shardtypes.UNCONSTRAINED is P.UNCONSTRAINED


def test_verify_lays_an_unconstrained_input_dim_out_replicated(mesh):
    from jax.sharding import AbstractMesh

    abstract = AbstractMesh((4, 2), ("d", "t"), axis_types=mesh.axis_types)
    report = shardtypes.verify(double, abstract, {"batch": 8, "embed": 4})
    assert report.ok, report.problems


def test_nnx_shardings_refuse_an_unconstrained_dim():
    nnx = pytest.importorskip("flax.nnx")
    import shardtypes.nnx as st_nnx

    class Block(nnx.Module):
        w: nnx.Param[f32[b"embed/d hidden/?"]]

        def __init__(self):
            self.w = nnx.Param(jnp.zeros((8, 4)))

    block = Block()
    specs = jax.tree.leaves(st_nnx.partition_specs(block, nnx.Param), is_leaf=lambda x: isinstance(x, P))
    assert specs == [P("d", P.UNCONSTRAINED)]
    with pytest.raises(ValueError, match=re.escape(
            "shardtypes.nnx.shardings: ['w'].value is laid out P('d', UNCONSTRAINED): an UNCONSTRAINED dim "
            "(XLA decides) cannot be placed on devices")):
        st_nnx.shardings(block, make_mesh("auto"), nnx.Param)


def test_unconstrained_specs_and_rules_pickle():
    import copy
    import pickle

    spec = ShapeSpec.parse("batch/d embed/?")
    again = pickle.loads(pickle.dumps(spec))
    assert again == spec and again.partition_spec() == P("d", P.UNCONSTRAINED)
    assert copy.deepcopy(spec) == spec
    rules = pickle.loads(pickle.dumps(RULES))
    assert rules == RULES and list(rules)[1] == ("act_embed", P.UNCONSTRAINED)
    with axis_rules(rules):
        assert make_partition_specs(f32[b"b/batch e/act_embed"]) == P("d", P.UNCONSTRAINED)
