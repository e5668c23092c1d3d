"""Rules as Flax, T5X, MaxText and eFormer users write them: () and list targets, eFormer's
defaults, T5X's ``additional_rules=None``, the reverse lookup, and messages that say what the
rules did (a repeated logical name, a mode that auto_mode chose)."""

import re

import numpy as np
import pytest
from jax.sharding import AbstractMesh, PartitionSpec as P

from shardtypes import (
    AxisRules,
    AxisRulesError,
    ShapeSpecError,
    axis_rules,
    eformer_rules,
    f32,
    make_partition_specs,
    make_shape_dtype_structs,
    t5x_rules,
    typechecked,
)

from conftest import make_mesh, put

EFORMER_MESH = AbstractMesh((2, 2, 2, 2, 1), ("dp", "fsdp", "tp", "sp", "ep"))


def test_empty_tuple_and_list_targets_as_maxtext_writes_them():
    # MaxText's rule sets: ['layers', ()] replicates, list targets split a dim over several axes.
    rules = AxisRules([["layers", ()], ["mlp", ["fsdp", "tensor"]], ["embed", []], ("batch", "data")])
    assert rules.table() == {"layers": ((),), "mlp": (("fsdp", "tensor"),), "embed": ((),), "batch": (("data",),)}
    assert list(rules) == [("layers", None), ("mlp", ("fsdp", "tensor")), ("embed", None), ("batch", "data")]
    with axis_rules(rules):
        assert make_partition_specs(f32[b"l/layers e/embed m/mlp"]) == P(None, None, ("fsdp", "tensor"))
    assert AxisRules([("a", ["x"])]) == AxisRules([("a", "x")])


@pytest.mark.parametrize("target, shown", [(["x", 3], "['x', 3]"), (("x", None), "('x', None)"), ({"x"}, "{'x'}")])
def test_bad_list_targets_are_named(target, shown):
    with pytest.raises(TypeError, match=re.escape(f"rule for 'a': the target must be a mesh axis name, a tuple "
                                                  f"or list of them, None (or () or []) for replicated, or shardtypes.UNCONSTRAINED for "
                                                  f"'XLA decides', got {shown}")):
        AxisRules([("a", target)])
    with pytest.raises(TypeError, match=re.escape("rule for 'a': mesh axis named twice in ['x', 'x']")):
        AxisRules([("a", ["x", "x"])])


def test_eformer_defaults_are_eformers():
    rules = eformer_rules()
    assert rules.table()["batch"] == (("fsdp", "dp"),)
    assert rules.table()["embed"] == (("tp",), ("fsdp",))
    with axis_rules(rules):
        # The ordinary hidden state lays out under the preset's own default (it raised before).
        assert make_partition_specs(f32[b"b/batch q/query e/embed"]) == P(("fsdp", "dp"), "sp", "tp")
        # Weights: tp goes to heads/mlp/vocab, embed falls back to fsdp.
        assert make_partition_specs(f32[b"e/embed h/heads"]) == P("fsdp", "tp")
        assert make_partition_specs(f32[b"m/mlp e/embed"]) == P("tp", "fsdp")
        assert make_partition_specs(f32[b"e/embed"]) == P("tp")
    with axis_rules(rules, mode="decode"):
        assert make_partition_specs(f32[b"b/batch q/query e/embed"]) == P(("fsdp", "dp", "sp"), None, "tp")


@pytest.mark.parametrize("kind", ["explicit", "auto"])
def test_eformer_hidden_state_on_a_real_array(kind):
    m = make_mesh(kind, (1, 2, 2, 2, 1), ("dp", "fsdp", "tp", "sp", "ep"))

    @typechecked
    def block(x: f32[b"b/batch q/query e/embed"]) -> f32[b"b/batch q/query e/embed"]:
        return x * 2

    x = put(m, np.ones((4, 4, 4), np.float32), ("fsdp", "dp"), "sp", "tp")
    with axis_rules(eformer_rules()):
        block(x)


def test_t5x_additional_rules_none_as_t5x_defaults_it():
    assert t5x_rules(additional_rules=None) == t5x_rules()
    assert t5x_rules(1, 1, None).table()["batch"] == (("data",),)
    assert t5x_rules(additional_rules=[("extra", ["data", "model"])]).table()["extra"] == (("data", "model"),)
    with pytest.raises(TypeError, match=re.escape("t5x_rules: additional_rules: rules are a sequence of "
                                                  "(logical name, mesh axes) pairs, got 3")):
        t5x_rules(additional_rules=3)


def test_reverse_lookup_names_the_logical_axes_on_a_mesh_axis():
    rules = eformer_rules()
    assert rules.logical_axes_on("tp") == ("heads", "kv_heads", "mlp", "vocab", "embed")
    assert rules.logical_axes_on("fsdp") == ("batch", "embed")
    assert rules.logical_axes_on("sp") == ("length", "query", "kv_length")
    assert rules.logical_axes_on("sp", mode="decode") == ("batch",)
    assert rules.logical_axes_on("nowhere") == ()
    assert AxisRules([("a", ("x", "y")), ("b", None), ("a", "y")]).logical_axes_on("y") == ("a",)


def test_reverse_lookup_validates_its_arguments():
    rules = eformer_rules()
    with pytest.raises(TypeError, match=re.escape("AxisRules.logical_axes_on: mesh_axis must be a mesh axis "
                                                  "name (an identifier), got 3")):
        rules.logical_axes_on(3)
    with pytest.raises(TypeError, match=re.escape("AxisRules.logical_axes_on: mode must be a str or None, got 1")):
        rules.logical_axes_on("tp", mode=1)
    with pytest.raises(AxisRulesError, match=re.escape("AxisRules 'eformer' has no mode 'serve'")):
        rules.logical_axes_on("tp", mode="serve")


def test_a_repeated_logical_name_is_explained_as_one():
    with pytest.raises(ShapeSpecError, match=re.escape(
            "mesh axis 'embed' shards both 'a/embed' and 'b/embed'; a mesh axis can shard at most one dim "
            "(under axis rules 'embed' is a logical axis name, and one of those also names at most one "
            "dim of an array: give the other dim a logical name of its own, with its own rule)")):
        f32[b"a/embed b/embed"]
    # Under rules that name 'embed' a logical axis, the message says so first.
    with axis_rules(AxisRules([("embed", "d"), ("hidden", "t")])):
        with pytest.raises(ShapeSpecError, match=re.escape(
                "logical axis 'embed' names both 'a/embed' and 'b/hidden/embed'; under the active axis rules a "
                "logical axis names at most one dim of an array (the mesh axes its rule gives can shard only "
                "one): give the other dim a logical name of its own, with its own rule")):
            f32[b"a/embed b/hidden/embed"]
        with pytest.raises(ShapeSpecError, match=re.escape("mesh axis 'x' shards both 'a/x' and 'b/x'")):
            f32[b"a/x b/x"]


def test_a_conflict_after_auto_mode_says_the_mode_was_chosen():
    rules = AxisRules([("batch", "x"), ("q", None), ("h", "x")],
                      modes={"decode": [("batch", "x")]}, auto_mode=("q", 1, "decode"))
    mesh = AbstractMesh((2,), ("x",))
    with axis_rules(rules):
        with pytest.raises(AxisRulesError, match=re.escape(
                "dim 2 'h/h': no rule for 'h' applies: rule 'h' -> 'x': mesh axis 'x' is already used by dim 0 "
                "'b/batch' (mode 'decode' was chosen by auto_mode=('q', 1, 'decode'), as dim 'q/q' has size 1)")):
            make_shape_dtype_structs(f32[b"b/batch q/q h/h"], {"b": 8, "q": 1, "h": 4}, mesh)
    missing = AxisRules([("batch", "x"), ("q", None)], modes={"decode": [("batch", "x")]},
                        auto_mode=("q", 1, "decode"))
    with axis_rules(missing):
        with pytest.raises(AxisRulesError, match=re.escape("logical axis 'v' has no rule in the axis rules "
                                                           "(mode 'decode')")) as info:
            make_shape_dtype_structs(f32[b"q/q v/v"], {"q": 1, "v": 4}, mesh)
    assert "chosen by auto_mode=('q', 1, 'decode')" in str(info.value)
