"""Logical axis rules (shardtypes.context.rules) and everything that resolves through them (issue 4,
items 1-4): AxisRules, axis_rules, current_rules, merging, strictness and its relaxations,
modes (train / prefill / decode, auto_mode), the T5X and eFormer presets, explain, and the
"one language" guarantee: the same annotation is checked, turned into specs and shardings, laid
out with ``shard`` and mapped with ``typed_shard_map`` through whichever rules are active.

Rule resolution is tested on AbstractMeshes (no devices); the checks and kernels use small
meshes of the 8 simulated CPU devices, with few jit compiles.
"""

import math
import re
import threading

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from jax.sharding import AbstractMesh, NamedSharding, PartitionSpec as P
from typeguard import TypeCheckError

from shardtypes import (
    AxisRules,
    AxisRulesError,
    axis_rules,
    current_rules,
    eformer_rules,
    explain,
    f32,
    make_partition_specs,
    make_shape_dtype_structs,
    make_shardings,
    ops,
    pytree_dataclass,
    shard,
    t5x_rules,
    typechecked,
    typed_shard_map,
)

from conftest import make_mesh, put

KINDS = ("explicit", "auto")
MESH3 = AbstractMesh((2, 2, 2), ("data", "fsdp", "model"))
EFORMER_MESH = AbstractMesh((1, 2, 2, 2, 1), ("dp", "fsdp", "tp", "sp", "ep"))
ATTN = f32[b"b/batch q/query h/heads d/head_dim"]

RNG = np.random.default_rng(0)
X = RNG.standard_normal((8, 4)).astype(np.float32)
W = RNG.standard_normal((4, 8)).astype(np.float32)


@pytree_dataclass  # two weights annotated with logical names only
class Mlp:
    w_in: f32["embed/fsdp mlp/tp"]
    w_out: f32["mlp/tp embed/fsdp"]


def mesh3(kind):
    return make_mesh(kind, (2, 2, 2), ("data", "fsdp", "model"))


def spec_under(rules, annotation, mode=None):
    with axis_rules(rules, mode=mode):
        return make_partition_specs(annotation)


def struct_spec(rules, annotation, dims, mesh=MESH3, mode=None):
    with axis_rules(rules, mode=mode):
        return make_shape_dtype_structs(annotation, dims, mesh).sharding.spec


def same_layout(array, mesh, *spec):
    return array.sharding.is_equivalent_to(NamedSharding(mesh, P(*spec)), array.ndim)


# ---------------------------------------------------------------------------------------------
# Construction.


def test_rules_from_flax_style_pairs():
    rules = AxisRules([("batch", "data"), ("embed", None), ("heads", ("data", "model"))])
    assert list(rules) == [("batch", "data"), ("embed", None), ("heads", ("data", "model"))]
    assert len(rules) == 3
    assert repr(rules) == "AxisRules([('batch', 'data'), ('embed', None), ('heads', ('data', 'model'))])"
    # Tuples of pairs, list pairs, and a repeated name (a fallback) are fine too.
    again = AxisRules((["batch", "data"], ("mlp", "model"), ("mlp", "data")), name="mine")
    assert list(again) == [("batch", "data"), ("mlp", "model"), ("mlp", "data")]
    assert len(again) == 3
    assert repr(again).startswith("AxisRules(name='mine', [('batch', 'data')")
    assert len(AxisRules()) == 0 and list(AxisRules([])) == []
    # Built from another rule set (its pairs), e.g. to change a policy.
    assert list(AxisRules(rules, on_missing="replicate")) == list(rules)


@pytest.mark.parametrize(
    "rules, error, message",
    [
        ([("1batch", "data")], TypeError, "a logical axis name must be an identifier, got '1batch'"),
        ([("batch size", "data")], TypeError, "a logical axis name must be an identifier, got 'batch size'"),
        ([(3, "data")], TypeError, "a logical axis name must be an identifier, got 3"),
        ([("batch", ("data", 3))], TypeError,
         "rule for 'batch': the target must be a mesh axis name, a tuple or list of them, None "
         "(or () or []) for replicated, or shardtypes.UNCONSTRAINED for 'XLA decides', got ('data', 3)"),
        ([("batch", 3)], TypeError, "rule for 'batch': the target must be a mesh axis name"),
        ([("batch", "not an axis")], TypeError, "rule for 'batch': the target must be a mesh axis name"),
        ([("batch", ["data", None])], TypeError, "rule for 'batch': the target must be a mesh axis name"),
        ([("batch", ("data", "data"))], TypeError, "rule for 'batch': mesh axis named twice in ('data', 'data')"),
        ([("batch", "data", "model")], TypeError,
         "each rule is a (logical name, mesh axes) pair, got ('batch', 'data', 'model')"),
        ([("batch",)], TypeError, "each rule is a (logical name, mesh axes) pair, got ('batch',)"),
        (["bd"], TypeError, "each rule is a (logical name, mesh axes) pair, got 'bd'"),
        ("batch", TypeError, "rules are a sequence of (logical name, mesh axes) pairs, got 'batch'"),
        (b"batch", TypeError, "rules are a sequence of (logical name, mesh axes) pairs"),
        (5, TypeError, "rules are a sequence of (logical name, mesh axes) pairs, got 5"),
    ],
)
def test_bad_rules(rules, error, message):
    with pytest.raises(error, match=re.escape(message)):
        AxisRules(rules)


@pytest.mark.parametrize(
    "policy, value",
    [("on_missing", "drop"), ("on_unknown_axis", "replicate"), ("on_conflict", "ignore"),
     ("on_indivisible", "replicate"), ("on_missing", None)],
)
def test_bad_policy(policy, value):
    allowed = {"on_missing": "('error', 'replicate')", "on_unknown_axis": "('error', 'drop')",
               "on_conflict": "('error', 'drop')", "on_indivisible": "('error', 'drop')"}[policy]
    with pytest.raises(ValueError, match=re.escape(f"{policy} must be one of {allowed}, got {value!r}")):
        AxisRules([("batch", "data")], **{policy: value})


@pytest.mark.parametrize(
    "auto_mode, modes",
    [
        (("query", 1, "decode"), None),                       # no such mode
        (("query", 1, "decode"), {"prefill": []}),
        (("query", "1", "decode"), {"decode": []}),            # size not an int
        ((1, 1, "decode"), {"decode": []}),                    # dim name not a str
        (("query", 1), {"decode": []}),                        # not a triple
        (["query", 1, "decode"], {"decode": []}),              # not a tuple
    ],
)
def test_bad_auto_mode(auto_mode, modes):
    expected = "auto_mode is (dim name, size, mode) with a mode from modes"
    with pytest.raises(TypeError, match=re.escape(expected)) as info:
        AxisRules([("query", "model")], modes=modes, auto_mode=auto_mode)
    assert repr(auto_mode) in str(info.value)


def test_bad_mode_rules_name_the_mode():
    with pytest.raises(TypeError, match=re.escape("mode 'decode': each rule is a (logical name, mesh axes) pair")):
        AxisRules([("batch", "data")], modes={"decode": [("batch",)]})
    with pytest.raises(TypeError, match=re.escape("rule for 'batch': the target must be")):
        AxisRules([("batch", "data")], modes={"decode": [("batch", (3,))]})


# ---------------------------------------------------------------------------------------------
# Resolution (Flax linen semantics).


def test_repeated_name_is_a_fallback():
    rules = AxisRules([("a", "model"), ("b", "model"), ("b", "data")])
    assert spec_under(rules, f32[b"x/a y/b"]) == P("model", "data")
    # With nothing in the way, the first rule for a name wins.
    assert spec_under(rules, f32[b"y/b"]) == P("model")
    assert spec_under(rules, f32[b"y/b z"]) == P("model", None)
    with axis_rules(rules):
        text = explain(f32[b"x/a y/b"], MESH3)
    assert "dim 1 'y/b': data" in text
    assert "passed over rule 'b' -> 'model': mesh axis 'model' is already used by dim 0 'x/a'" in text
    assert "b -> 'data' (rule 2 for 'b')" in text


def test_rule_order_has_priority_over_dim_order():
    # flax.linen.logical_to_mesh_axes(('a', 'b'), rules) == P('data', 'model'): the rule
    # ('b', 'model') comes first, so 'a' falls back to 'data'.
    rules = AxisRules([("b", "model"), ("a", "model"), ("a", "data")])
    assert spec_under(rules, f32[b"x/a y/b"]) == P("data", "model")


def test_none_rule_replicates_on_purpose():
    rules = AxisRules([("batch", "data"), ("embed", None), ("embed", "model")])
    assert spec_under(rules, f32[b"b/batch e/embed"]) == P("data", None)
    with axis_rules(rules):
        assert "embed -> None (replicated by its rule)" in explain(f32[b"b/batch e/embed"], MESH3)


def test_multi_axis_targets():
    rules = AxisRules([("dp", ("data", "fsdp")), ("tp", "model")])
    assert spec_under(rules, f32[b"batch/dp embed/tp"]) == P(("data", "fsdp"), "model")
    assert spec_under(rules, f32[b"batch/dp/tp embed"]) == P(("data", "fsdp", "model"), None)
    # Two logical names on one dim that resolve to overlapping axes: the second passes over.
    partial = AxisRules([("a", "data"), ("b", ("data", "model")), ("b", "model")])
    assert spec_under(partial, f32[b"x/a y/b"]) == P("data", "model")
    assert spec_under(partial, f32[b"x/a/b"]) == P(("data", "model"))


def test_axis_taken_by_another_dim_is_skipped():
    rules = AxisRules([("heads", "model"), ("mlp", "model"), ("mlp", ("data", "fsdp"))])
    assert spec_under(rules, f32[b"h/heads m/mlp"]) == P("model", ("data", "fsdp"))
    assert spec_under(rules, f32[b"m/mlp"]) == P("model")


def test_resolution_with_a_variadic_dim():
    rules = AxisRules([("tp", "model")])
    m = mesh3("explicit")

    @typechecked
    def last(x: f32[b"... e/tp"]) -> f32[b"... e/tp"]:
        return x

    with axis_rules(rules):
        assert last(put(m, np.ones((2, 3, 4), np.float32), None, None, "model")).shape == (2, 3, 4)
        with pytest.raises(TypeCheckError, match=re.escape(
                "sharding is P('model', None, None) but the annotation says P(None, None, 'model')")):
            last(put(m, np.ones((2, 3, 4), np.float32), "model"))


# ---------------------------------------------------------------------------------------------
# Strict by default, and each relaxed policy.


def test_missing_rule_is_an_error():
    rules = AxisRules([("a", "model")])
    assert issubclass(AxisRulesError, ValueError)
    with pytest.raises(AxisRulesError) as info:
        spec_under(rules, f32[b"x/a y/c"])
    message = str(info.value)
    assert "f32[b'x/a y/c']" in message
    assert "dim 1 'y/c': logical axis 'c' has no rule in the axis rules (rules exist for ['a'])" in message
    relaxed = AxisRules([("a", "model")], on_missing="replicate")
    assert spec_under(relaxed, f32[b"x/a y/c"]) == P("model", None)
    with axis_rules(relaxed):
        assert "c: no rule, replicated (on_missing='replicate')" in explain(f32[b"x/a y/c"], MESH3)


def test_missing_rule_names_the_path_in_a_tree():
    with axis_rules(AxisRules([("fsdp", "data")], name="partial")):
        with pytest.raises(AxisRulesError) as info:
            make_partition_specs(Mlp)
    message = str(info.value)
    assert message.startswith("Mlp.w_in (f32[b'embed/fsdp mlp/tp']): dim 1 'mlp/tp'")
    assert "logical axis 'tp' has no rule in AxisRules 'partial'" in message


def test_unknown_mesh_axis_is_an_error():
    m = mesh3("explicit")
    rules = AxisRules([("a", "data"), ("b", "modle")])
    with axis_rules(rules):
        with pytest.raises(AxisRulesError) as info:
            make_shardings(f32[b"x/a y/b"], m)
        # Without a mesh the axis cannot be judged, so the spec names it as written.
        assert make_partition_specs(f32[b"x/a y/b"]) == P("data", "modle")
    assert str(info.value) == (
        "the annotation (f32[b'x/a y/b']): dim 1 'y/b': rule 'b' -> 'modle' names mesh axis 'modle', "
        "which the mesh does not have (axes: ('data', 'fsdp', 'model')); did you mean 'model'?"
    )
    # Dropped: a later rule for the name is used, or the dim is replicated.
    with axis_rules(AxisRules([("a", "data"), ("b", "modle"), ("b", "model")], on_unknown_axis="drop")):
        assert make_shardings(f32[b"x/a y/b"], m).spec == P("data", "model")
        text = explain(f32[b"x/a y/b"], m)
        assert "passed over rule 'b' -> 'modle' names mesh axis 'modle', which the mesh does not have" in text
    with axis_rules(AxisRules(rules, on_unknown_axis="drop")):
        assert make_shardings(f32[b"x/a y/b"], m).spec == P("data", None)


def test_unknown_mesh_axis_through_a_check():
    m = mesh3("explicit")

    @typechecked
    def f(x: f32[b"x/a y/b"]):
        return x

    with axis_rules(AxisRules([("a", "data"), ("b", "modle")])):
        with pytest.raises(TypeCheckError) as info:
            f(put(m, X, "data"))
    assert "rule 'b' -> 'modle' names mesh axis 'modle', which the mesh does not have" in str(info.value)
    assert 'argument "x"' in str(info.value)


def test_conflict_is_an_error():
    rules = AxisRules([("a", "model"), ("b", "model")])
    with pytest.raises(AxisRulesError) as info:
        spec_under(rules, f32[b"x/a y/b"])
    assert str(info.value) == (
        "the annotation (f32[b'x/a y/b']): dim 1 'y/b': no rule for 'b' applies: rule 'b' -> 'model': "
        "mesh axis 'model' is already used by dim 0 'x/a'"
    )
    relaxed = AxisRules([("a", "model"), ("b", "model")], on_conflict="drop")
    assert spec_under(relaxed, f32[b"x/a y/b"]) == P("model", None)
    with axis_rules(relaxed):
        text = explain(f32[b"x/a y/b"], MESH3)
    assert "dim 1 'y/b': replicated" in text
    assert "b: replicated (no rule applies)" in text


def test_indivisible_is_an_error_for_structs():
    rules = AxisRules([("dp", ("data", "fsdp")), ("dp", "data"), ("tp", "model")])
    with pytest.raises(AxisRulesError) as info:
        struct_spec(rules, f32[b"batch/dp embed/tp"], {"batch": 6, "embed": 4})
    assert str(info.value) == (
        "the annotation (f32[b'batch/dp embed/tp']): dim 0 'batch/dp': rule 'dp' -> ('data', 'fsdp'): "
        "size 6 does not divide over 4 devices"
    )
    assert struct_spec(rules, f32[b"batch/dp embed/tp"], {"batch": 8, "embed": 4}) == P(("data", "fsdp"), "model")
    relaxed = AxisRules(rules, on_indivisible="drop")
    # The fallback that divides is taken; a dim nothing divides is replicated.
    assert struct_spec(relaxed, f32[b"batch/dp embed/tp"], {"batch": 6, "embed": 4}) == P("data", "model")
    assert struct_spec(relaxed, f32[b"batch/dp embed/tp"], {"batch": 3, "embed": 5}) == P(None, None)
    with axis_rules(relaxed):
        text = explain(f32[b"batch/dp embed/tp"], MESH3, {"batch": 6, "embed": 4})
    assert "passed over rule 'dp' -> ('data', 'fsdp'): size 6 does not divide over 4 devices" in text


@pytest.mark.parametrize("kind", KINDS)
def test_indivisible_is_an_error_for_arrays(kind):
    m = mesh3(kind)

    @typechecked
    def f(x: f32[b"a/dp b"]):
        return x

    x3 = put(m, np.ones((3, 4), np.float32))
    with axis_rules(AxisRules([("dp", ("data", "fsdp"))])):
        with pytest.raises(TypeCheckError) as info:
            f(x3)
    message = str(info.value)
    assert 'argument "x"' in message and "f32[b'a/dp b']" in message
    assert "dim 0 'a/dp': rule 'dp' -> ('data', 'fsdp'): size 3 does not divide over 4 devices" in message
    with axis_rules(AxisRules([("dp", ("data", "fsdp"))], on_indivisible="drop")):
        assert f(x3) is x3


# ---------------------------------------------------------------------------------------------
# The axis_rules context.

A = AxisRules([("dp", "data"), ("tp", "model")], name="A")
B = AxisRules([("dp", ("data", "fsdp")), ("tp", None)], name="B")
ANN = f32[b"batch/dp embed/tp"]


def test_axis_rules_nest_and_restore():
    assert current_rules() is None
    assert make_partition_specs(ANN) == P("dp", "tp")  # no rules: the names are mesh axes
    with axis_rules(A) as active:
        assert active is A
        assert current_rules() == (A, None)
        assert make_partition_specs(ANN) == P("data", "model")
        with axis_rules(B):
            assert current_rules() == (B, None)
            assert make_partition_specs(ANN) == P(("data", "fsdp"), None)
            with axis_rules(None) as off:
                assert off is None
                assert current_rules() is None
                assert make_partition_specs(ANN) == P("dp", "tp")
            assert current_rules() == (B, None)
        assert current_rules() == (A, None)
        assert make_partition_specs(ANN) == P("data", "model")
    assert current_rules() is None


def test_axis_rules_restore_after_an_exception():
    with axis_rules(A):
        with pytest.raises(RuntimeError, match="boom"):
            with axis_rules(B):
                raise RuntimeError("boom")
        assert current_rules() == (A, None)
    assert current_rules() is None


def test_axis_rules_accepts_a_list_of_pairs():
    with axis_rules([("dp", "data"), ("tp", None)]) as rules:
        assert isinstance(rules, AxisRules)
        assert list(rules) == [("dp", "data"), ("tp", None)]
        assert current_rules() == (rules, None)
        assert make_partition_specs(ANN) == P("data", None)


def test_axis_rules_mode_errors():
    with pytest.raises(AxisRulesError, match=re.escape("AxisRules 'A' has no mode 'decode' (modes: none)")):
        with axis_rules(A, mode="decode"):
            pass
    with pytest.raises(AxisRulesError, match=re.escape("has no mode 'train' (modes: ['decode', 'prefill'])")):
        with axis_rules(eformer_rules(), mode="train"):
            pass
    with pytest.raises(TypeError, match=re.escape("axis_rules(None, mode=...): a mode needs rules")):
        with axis_rules(None, mode="decode"):
            pass
    with pytest.raises(TypeError, match="rules are a sequence"):
        with axis_rules("dp"):
            pass
    assert current_rules() is None


def test_axis_rules_mode_is_current():
    rules = eformer_rules()
    with axis_rules(rules, mode="decode"):
        assert current_rules() == (rules, "decode")
        with axis_rules(rules):
            assert current_rules() == (rules, None)
        assert current_rules() == (rules, "decode")


def test_axis_rules_are_per_thread():
    seen = {}
    barrier = threading.Barrier(2, timeout=20)

    def worker():
        try:
            seen["start"] = current_rules()
            with axis_rules(B):
                barrier.wait()  # the main thread is inside A now
                seen["inside"] = current_rules()
                seen["spec"] = make_partition_specs(ANN)
                barrier.wait()
            seen["end"] = current_rules()
        except Exception as e:  # pragma: no cover - reported below
            seen["error"] = e
            barrier.abort()

    thread = threading.Thread(target=worker)
    with axis_rules(A):
        thread.start()
        barrier.wait()
        assert current_rules() == (A, None)
        assert make_partition_specs(ANN) == P("data", "model")
        barrier.wait()
        assert current_rules() == (A, None)
    thread.join(20)
    assert "error" not in seen, seen
    assert seen["start"] is None
    assert seen["inside"] == (B, None)
    assert seen["spec"] == P(("data", "fsdp"), None)
    assert seen["end"] is None
    assert current_rules() is None


# ---------------------------------------------------------------------------------------------
# Merging.


def test_merge_is_a_union():
    one = AxisRules([("batch", "data"), ("mlp", "model"), ("mlp", "data")], name="one")
    two = AxisRules([("batch", "data"), ("heads", "model")], name="two")
    merged = one + two
    assert list(merged) == [("batch", "data"), ("mlp", "model"), ("mlp", "data"), ("heads", "model")]
    assert merged.name == "one+two"
    assert list(one.merge(two)) == list(merged)
    with axis_rules(merged):
        assert make_partition_specs(f32[b"b/batch m/mlp"]) == P("data", "model")
        assert make_partition_specs(f32[b"b/batch h/heads"]) == P("data", "model")
        # Flax's order: the earlier 'mlp' -> 'model' rule takes 'model', so 'heads' has none left.
        with pytest.raises(AxisRulesError, match="no rule for 'heads' applies"):
            make_partition_specs(f32[b"h/heads m/mlp"])


def test_merge_keeps_none_rules():
    merged = AxisRules([("batch", "data"), ("embed", None)]) + AxisRules([("mlp", "model")])
    assert list(merged) == [("batch", "data"), ("embed", None), ("mlp", "model")]
    extended = t5x_rules() + AxisRules([("expert", "data")])
    assert list(extended)[-1] == ("expert", "data")
    in_mode = AxisRules([("seq", "model")], modes={"decode": [("seq", None)]}) + AxisRules([("b", "data")])
    assert spec_under(in_mode, f32[b"s/seq"], mode="decode") == P(None)


def test_merge_conflict_names_the_name_and_both_targets():
    one = AxisRules([("batch", "data"), ("mlp", "model")], name="one")
    two = AxisRules([("mlp", ("data", "model"))], name="two")
    with pytest.raises(AxisRulesError) as info:
        one + two
    assert str(info.value) == (
        "cannot merge AxisRules 'one' and AxisRules 'two': they map mlp: 'model' vs ('data', 'model') differently"
    )
    # A fallback on one side only is a different mapping too.
    with pytest.raises(AxisRulesError, match=re.escape("mlp: 'model' or 'data' vs 'model'")):
        AxisRules([("mlp", "model"), ("mlp", "data")]) + AxisRules([("mlp", "model")])
    with pytest.raises(TypeError, match="AxisRules.merge expects AxisRules"):
        one.merge([("mlp", "model")])


def test_merge_merges_modes():
    one = AxisRules([("batch", "data")], modes={"decode": [("batch", ("data", "model"))]}, name="one")
    two = AxisRules([("seq", "model")],
                    modes={"decode": [("seq", "fsdp")], "prefill": [("seq", ("fsdp", "model"))]},
                    auto_mode=("seq", 2, "decode"), name="two")
    merged = one + two
    assert sorted(merged.modes) == ["decode", "prefill"]
    assert merged.auto_mode == ("seq", 2, "decode")
    annotation = f32[b"b/batch s/seq"]
    assert spec_under(merged, annotation) == P("data", "model")
    assert spec_under(merged, annotation, mode="decode") == P(("data", "model"), "fsdp")
    assert spec_under(merged, annotation, mode="prefill") == P("data", ("fsdp", "model"))
    # auto_mode carried over: seq of size 2 picks the decode rules.
    assert struct_spec(merged, annotation, {"b": 8, "s": 2}) == P(("data", "model"), "fsdp")
    assert struct_spec(merged, annotation, {"b": 8, "s": 4}) == P("data", "model")
    with axis_rules(merged):
        text = explain(annotation, MESH3, {"b": 8, "s": 2})
    assert "mode 'decode', as dim 's/seq' has size 2" in text


def test_merge_mode_conflict_names_both_targets():
    one = AxisRules([("seq", "model")], modes={"decode": [("seq", None)]}, name="one")
    two = AxisRules([("seq", "model")], modes={"decode": [("seq", "data")]}, name="two")
    with pytest.raises(AxisRulesError) as info:
        one + two
    message = str(info.value)
    assert "seq" in message and "decode" in message
    assert "None vs 'data'" in message


def test_merge_policies_keep_the_strict_one():
    lax = dict(on_missing="replicate", on_conflict="drop")
    both_lax = AxisRules([("a", "data")], **lax) + AxisRules([("b", "model")], **lax)
    assert spec_under(both_lax, f32[b"x/a y/c"]) == P("data", None)
    one_strict = AxisRules([("a", "data")], **lax) + AxisRules([("b", "model")])
    with pytest.raises(AxisRulesError, match="logical axis 'c' has no rule"):
        spec_under(one_strict, f32[b"x/a y/c"])


# ---------------------------------------------------------------------------------------------
# Modes.


def test_eformer_train_prefill_decode():
    rules = eformer_rules()
    dims = {"b": 8, "q": 4, "h": 4, "d": 2}
    train = P(("fsdp", "dp"), "sp", "tp", None)
    decode = P(("fsdp", "dp", "sp"), None, "tp", None)
    assert spec_under(rules, ATTN) == train
    assert spec_under(rules, ATTN, mode="prefill") == train
    assert spec_under(rules, ATTN, mode="decode") == decode
    assert struct_spec(rules, ATTN, dims, EFORMER_MESH) == train
    assert struct_spec(rules, ATTN, dims, EFORMER_MESH, mode="prefill") == train
    assert struct_spec(rules, ATTN, dims, EFORMER_MESH, mode="decode") == decode
    with axis_rules(rules, mode="decode"):
        struct = make_shape_dtype_structs(ATTN, dims, EFORMER_MESH)
    assert struct.shape == (8, 4, 4, 2) and struct.dtype == jnp.float32


def test_eformer_auto_mode_from_dims():
    rules = eformer_rules()
    assert rules.auto_mode == ("query", 1, "decode")
    one = {"b": 8, "q": 1, "h": 4, "d": 2}
    assert struct_spec(rules, ATTN, one, EFORMER_MESH) == P(("fsdp", "dp", "sp"), None, "tp", None)
    # An explicit mode wins over auto_mode: prefill shards the length-1 query over sp, which
    # does not divide it.
    message = "dim 1 'q/query': rule 'query' -> 'sp': size 1 does not divide over 2 devices"
    with pytest.raises(AxisRulesError, match=re.escape(message)):
        struct_spec(rules, ATTN, one, EFORMER_MESH, mode="prefill")
    with axis_rules(rules):
        text = explain(ATTN, EFORMER_MESH, one)
    assert "mode 'decode', as dim 'q/query' has size 1" in text
    assert "dim 0 'b/batch': fsdp, dp, sp" in text


@pytest.mark.parametrize("kind", KINDS)
def test_eformer_auto_mode_from_a_real_array(kind):
    m = make_mesh(kind, (1, 2, 2, 2, 1), ("dp", "fsdp", "tp", "sp", "ep"))

    @typechecked
    def attend(x: f32[b"b/batch q/query h/heads d/head_dim"]):
        return x

    decode_x = put(m, np.ones((8, 1, 4, 2), np.float32), ("fsdp", "dp", "sp"), None, "tp")
    train_x = put(m, np.ones((8, 4, 4, 2), np.float32), ("fsdp", "dp"), "sp", "tp")
    wrong = put(m, np.ones((8, 1, 4, 2), np.float32), ("fsdp", "dp"), None, "tp")
    with axis_rules(eformer_rules()):
        assert attend(decode_x) is decode_x
        assert attend(train_x) is train_x
        with pytest.raises(TypeCheckError) as info:
            attend(wrong)
    assert ("sharding is P('fsdp', None, 'tp', None) but the annotation says "
            "P(('fsdp', 'sp'), None, 'tp', None)") in str(info.value)


def test_explicit_replicate_in_a_mode():
    rules = eformer_rules()
    dims = {"b": 8, "q": 4, "h": 4, "d": 2}
    # query divides over sp, but the decode rules replicate it on purpose.
    assert struct_spec(rules, ATTN, dims, EFORMER_MESH, mode="decode")[1] is None
    with axis_rules(rules, mode="decode"):
        text = explain(ATTN, EFORMER_MESH, dims)
    assert "in mode 'decode'" in text
    assert "dim 1 'q/query': replicated  (query -> None (replicated by its rule))" in text
    # A mode's (name, None) is a rule, not a missing one, under strict rules.
    decode = [("seq", None), ("batch", ("data", "model")), ("batch", "data")]
    custom = AxisRules([("heads", "model"), ("seq", "model"), ("batch", "data")], modes={"decode": decode})
    assert spec_under(custom, f32[b"b/batch s/seq"]) == P("data", "model")
    assert spec_under(custom, f32[b"b/batch s/seq"], mode="decode") == P(("data", "model"), None)
    # A mode's rules come first (Flax's order): in decode 'batch' takes ('data', 'model') before
    # the base rule 'heads' -> 'model' is tried, so heads has no axis left: strictly an error.
    with pytest.raises(AxisRulesError, match="no rule for 'heads' applies"):
        spec_under(custom, f32[b"h/heads b/batch"], mode="decode")
    assert spec_under(custom, f32[b"h/heads b/batch"]) == P("model", "data")
    message = "logical axis 'vocab' has no rule in the axis rules (mode 'decode')"
    with pytest.raises(AxisRulesError, match=re.escape(message)):
        spec_under(custom, f32[b"v/vocab"], mode="decode")


def test_eformer_rules_axis_names():
    rules = eformer_rules(dp="data", fsdp="fsdp", tp="model", sp="seq", ep="expert")
    assert spec_under(rules, ATTN) == P(("fsdp", "data"), "seq", "model", None)
    assert spec_under(rules, ATTN, mode="decode") == P(("fsdp", "data", "seq"), None, "model", None)


# ---------------------------------------------------------------------------------------------
# Presets: T5X's standard rules, as flax.linen.logical_to_mesh_axes resolves them.

T5X_CASES = {
    # annotation: {(activation dims, parameter dims): T5X's spec}
    "b/batch l/length e/embed": {(1, 1): P("data", None, None), (1, 2): P("data", None, None),
                                 (2, 1): P("data", None, "model"), (2, 2): P("data", None, "model")},
    "b/batch l/length m/mlp": {s: P("data", None, "model") for s in [(1, 1), (1, 2), (2, 1), (2, 2)]},
    "b/batch l/length h/heads k/kv": {s: P("data", None, "model", None) for s in [(1, 1), (1, 2), (2, 1), (2, 2)]},
    "b/batch l/length e/embed m/mlp": {s: P("data", None, None, "model")
                                       for s in [(1, 1), (1, 2), (2, 1), (2, 2)]},
    "e/embed m/mlp": {(1, 1): P(None, "model"), (1, 2): P("data", "model"),
                      (2, 1): P(None, "model"), (2, 2): P("data", "model")},
    "m/mlp e/embed": {(1, 1): P("model", None), (1, 2): P("model", "data"),
                      (2, 1): P("model", None), (2, 2): P("model", "data")},
    "v/vocab e/embed": {(1, 1): P("model", None), (1, 2): P("model", "data"),
                        (2, 1): P("model", None), (2, 2): P("model", "data")},
    "e/embed h/heads k/kv": {(1, 1): P(None, "model", None), (1, 2): P("data", "model", None),
                             (2, 1): P(None, "model", None), (2, 2): P("data", "model", None)},
    "e/embed j/joined_kv": {(1, 1): P(None, "model"), (1, 2): P("data", "model"),
                            (2, 1): P(None, "model"), (2, 2): P("data", "model")},
    "n/layers e/embed m/mlp": {(1, 1): P(None, None, "model"), (1, 2): P(None, "data", "model"),
                               (2, 1): P(None, None, "model"), (2, 2): P(None, "data", "model")},
}

# T5X relies on Flax's rule priority (earlier rules take their axes first) and on a dim with no
# free axis being replicated. Cases the presets get wrong:
_STRICT = "BUG: t5x_rules is strict on conflicts, but T5X replicates a dim whose axes are taken"
_ORDER = ("BUG: rules are applied in dim order, not Flax's rule order (the earlier 'mlp'/'heads'/"
          "'vocab' -> 'model' rule should win over 'embed' -> 'model')")
T5X_BUGS = {
    ("b/batch l/length e/embed", (1, 2)): _STRICT,
    ("b/batch l/length e/embed m/mlp", (1, 2)): _STRICT,
    ("b/batch l/length e/embed m/mlp", (2, 1)): _ORDER + "; " + _STRICT,
    ("b/batch l/length e/embed m/mlp", (2, 2)): _ORDER + "; " + _STRICT,
    ("e/embed m/mlp", (2, 1)): _ORDER + "; " + _STRICT,
    ("e/embed m/mlp", (2, 2)): _ORDER,
    ("m/mlp e/embed", (2, 1)): _STRICT,
    ("v/vocab e/embed", (2, 1)): _STRICT,
    ("e/embed h/heads k/kv", (2, 1)): _ORDER + "; " + _STRICT,
    ("e/embed h/heads k/kv", (2, 2)): _ORDER,
    ("e/embed j/joined_kv", (2, 1)): _ORDER + "; " + _STRICT,
    ("e/embed j/joined_kv", (2, 2)): _ORDER,
    ("n/layers e/embed m/mlp", (2, 1)): _ORDER + "; " + _STRICT,
    ("n/layers e/embed m/mlp", (2, 2)): _ORDER,
}


def _t5x_params():
    for text, by_shape in T5X_CASES.items():
        for shape, spec in by_shape.items():
            yield pytest.param(text, shape, spec, id=f"{shape[0]}x{shape[1]}-{text}")


@pytest.mark.parametrize("text, shape, spec", list(_t5x_params()))
def test_t5x_standard_specs(text, shape, spec):
    assert spec_under(t5x_rules(*shape), f32[text]) == spec


def test_t5x_rules_tables():
    one = t5x_rules()
    assert one.name == "t5x1x1"
    assert list(one)[:7] == [("batch", "data"), ("vocab", "model"), ("embed", None), ("mlp", "model"),
                             ("heads", "model"), ("kv", None), ("joined_kv", "model")]
    assert list(one)[7:] == [("relpos_buckets", None), ("abspos_buckets", None), ("length", None),
                             ("layers", None), ("stack", None), ("mlp_activations", None)]
    assert ("embed", "data") in list(t5x_rules(1, 2)) and ("embed", None) not in list(t5x_rules(1, 2))
    assert [r for r in t5x_rules(2, 2) if r[0] == "embed"] == [("embed", "model"), ("embed", "data")]
    assert [r for r in t5x_rules(2, 1) if r[0] == "embed"] == [("embed", "model")]
    extra = t5x_rules(1, 1, additional_rules=[("expert", "data")])
    assert list(extra)[-1] == ("expert", "data")
    assert spec_under(extra, f32[b"x/expert e/embed"]) == P("data", None)
    # 2-D parameter partitioning: embed goes to 'data' when that is free.
    assert struct_spec(t5x_rules(1, 2), f32[b"e/embed m/mlp"], {"e": 8, "m": 8}) == P("data", "model")


@pytest.mark.parametrize("shape", [(3, 1), (1, 3), (0, 1), (2, 0)])
def test_t5x_rules_bad_dims(shape):
    with pytest.raises(ValueError, match=re.escape(f"are 1 or 2, got {shape}")):
        t5x_rules(*shape)


# ---------------------------------------------------------------------------------------------
# One language: the same annotation through rules, or naming mesh axes.

TRAIN = AxisRules([("dp", ("data", "fsdp")), ("tp", "model")], name="train")


@typechecked
def scale(x: f32[b"batch/dp embed/tp"]) -> f32[b"batch/dp embed/tp"]:
    return x * 2


@typechecked
def scale_plain(x: f32[b"batch/dp embed/tp"]) -> f32[b"batch/dp embed/tp"]:
    return x * 2


JIT_SCALE = jax.jit(scale)
JIT_SCALE_PLAIN = jax.jit(scale_plain)
LAYOUT_MISMATCH = "sharding is P('data', 'model') but the annotation says P(('data', 'fsdp'), 'model')"
NO_RULES_HINT = "(if these are logical axis names, activate rules with shardtypes.axis_rules)"


@pytest.mark.parametrize("kind", KINDS)
def test_one_language_eager(kind):
    m = mesh3(kind)
    good = put(m, X, ("data", "fsdp"), "model")
    bad = put(m, X, "data", "model")
    with axis_rules(TRAIN):
        out = scale(good)
        assert same_layout(out, m, ("data", "fsdp"), "model")
        np.testing.assert_allclose(np.asarray(out), 2 * X)
        with pytest.raises(TypeCheckError) as info:
            scale(bad)
    message = str(info.value)
    assert 'argument "x"' in message and "of scale()" in message
    assert "f32[b'batch/dp embed/tp']" in message
    assert LAYOUT_MISMATCH in message
    # Without rules, 'dp' and 'tp' are mesh axes, which this mesh does not have.
    with pytest.raises(TypeCheckError) as info:
        scale(good)
    message = str(info.value)
    assert "mesh axes 'dp', 'tp' are not in the array's mesh, which has axes ('data', 'fsdp', 'model')" in message
    assert NO_RULES_HINT in message
    # ... and on a mesh that has them, the same annotation names them directly.
    direct = make_mesh(kind, (4, 2), ("dp", "tp"))
    x = put(direct, X, "dp", "tp")
    assert same_layout(scale(x), direct, "dp", "tp")


@pytest.mark.parametrize("kind", KINDS)
def test_one_language_under_jit(kind):
    m = mesh3(kind)
    good = put(m, X, ("data", "fsdp"), "model")
    bad = put(m, X, "data", "model")
    with jax.set_mesh(m), axis_rules(TRAIN):
        out = JIT_SCALE(good)
        assert same_layout(out, m, ("data", "fsdp"), "model")
        np.testing.assert_allclose(np.asarray(out), 2 * X)
        if kind == "explicit":
            with pytest.raises(TypeCheckError) as info:
                JIT_SCALE(bad)
            message = str(info.value)
            assert ("sharding over Explicit axes is P('data', 'model') but the annotation says "
                    "P(('data', 'fsdp'), 'model')") in message
        else:
            with pytest.raises(TypeCheckError) as info:
                JIT_SCALE(bad)
            message = str(info.value)
            assert "shardtypes (compile-time check)" in message
            assert LAYOUT_MISMATCH in message
        assert 'argument "x"' in message and "f32[b'batch/dp embed/tp']" in message
    with jax.set_mesh(m), pytest.raises(TypeCheckError) as info:
        JIT_SCALE_PLAIN(good)
    message = str(info.value)
    assert "mesh axes 'dp', 'tp' are not in the mesh" in message
    assert NO_RULES_HINT in message


def test_one_jitted_function_under_two_rule_sets():
    m = mesh3("explicit")

    @typechecked
    def double(x: f32[b"batch/dp embed/tp"]) -> f32[b"batch/dp embed/tp"]:
        return x * 2

    jitted = jax.jit(double)
    x = put(m, X, "data", "model")
    with jax.set_mesh(m):
        with axis_rules(A):  # dp -> data, tp -> model: x is laid out as annotated
            assert same_layout(jitted(x), m, "data", "model")
        with axis_rules(B):  # dp -> (data, fsdp), tp -> None: x is not
            with pytest.raises(TypeCheckError, match="but the annotation says"):
                jitted(x)


@pytest.mark.parametrize("kind", KINDS)
def test_same_function_under_two_rule_sets_eagerly(kind):
    m = mesh3(kind)
    x = put(m, X, "data", "model")
    with axis_rules(A):
        assert same_layout(scale(x), m, "data", "model")
    with axis_rules(B), pytest.raises(TypeCheckError) as info:
        scale(x)
    assert "sharding is P('data', 'model') but the annotation says P(('data', 'fsdp'), None)" in str(info.value)
    y = put(m, X, ("data", "fsdp"))
    with axis_rules(B):
        assert same_layout(scale(y), m, ("data", "fsdp"), None)
    with axis_rules(A), pytest.raises(TypeCheckError, match=re.escape(
            "sharding is P(('data', 'fsdp'), None) but the annotation says P('data', 'model')")):
        scale(y)


FSDP_TP = AxisRules([("fsdp", "data"), ("tp", "model")], name="fsdp_tp")
WIDE_FSDP = AxisRules([("fsdp", ("data", "fsdp")), ("tp", None)], name="wide_fsdp")
MLP_SPECS = {
    "fsdp_tp": (P("data", "model"), P("model", "data")),
    "wide_fsdp": (P(("data", "fsdp"), None), P(None, ("data", "fsdp"))),
}


@typechecked
def takes_mlp(p: Mlp) -> Mlp:
    return p


def _fmt(spec):
    """A PartitionSpec as shardtypes' messages print it: P('data', None), P(('data', 'fsdp'), None)."""
    entries = ["None" if e is None else repr(e) if isinstance(e, str) else "(" + ", ".join(map(repr, e)) + ")"
               for e in spec]
    return "P(" + ", ".join(entries) + ")"


@pytest.mark.parametrize("rules", [FSDP_TP, WIDE_FSDP], ids=lambda r: r.name)
def test_specs_and_shardings_through_rules(rules):
    w_in, w_out = MLP_SPECS[rules.name]
    m = mesh3("explicit")
    with axis_rules(rules):
        specs = make_partition_specs(Mlp)
        shardings = make_shardings(Mlp, m)
        structs = make_shape_dtype_structs(Mlp, {"embed": 8, "mlp": 4}, m)
        with jax.set_mesh(m):
            current = make_shardings(Mlp)
    assert (specs.w_in, specs.w_out) == (w_in, w_out)
    assert (shardings.w_in.spec, shardings.w_out.spec) == (w_in, w_out)
    assert shardings.w_in.mesh == m
    assert (current.w_in.spec, current.w_out.spec) == (w_in, w_out)
    assert structs.w_in.shape == (8, 4) and structs.w_out.shape == (4, 8)
    assert (structs.w_in.sharding.spec, structs.w_out.sharding.spec) == (w_in, w_out)
    # The structs check against the same annotation under these rules, and not under the others.
    with axis_rules(rules):
        assert takes_mlp(structs) is structs
    other = WIDE_FSDP if rules is FSDP_TP else FSDP_TP
    with axis_rules(other), pytest.raises(TypeCheckError) as info:
        takes_mlp(structs)
    assert 'argument "p"' in str(info.value) and ".w_in" in str(info.value)
    assert f"but the annotation says {_fmt(MLP_SPECS[other.name][0])}" in str(info.value)
    # Without rules the names are mesh axes: the spec says so, and the mesh lacks them.
    assert make_partition_specs(Mlp).w_in == P("fsdp", "tp")
    with pytest.raises(ValueError, match=re.escape("Mlp.w_in (f32[b'embed/fsdp mlp/tp']): dim 1 'mlp/tp' is "
                                                   "sharded over mesh axis 'tp', which the mesh does not have")):
        make_shardings(Mlp, m)


@pytest.mark.parametrize("kind", KINDS)
def test_shard_through_rules(kind):
    m = mesh3(kind)
    value = Mlp(np.ones((8, 4), np.float32), np.ones((4, 8), np.float32))
    for rules in (FSDP_TP, WIDE_FSDP):
        w_in, w_out = MLP_SPECS[rules.name]
        with axis_rules(rules):
            placed = shard(value, Mlp, m)
        assert same_layout(placed.w_in, m, *w_in)
        assert same_layout(placed.w_out, m, *w_out)


@pytest.mark.parametrize("kind", KINDS)
def test_shard_through_rules_under_jit(kind):
    m = mesh3(kind)

    def lay_out(x):
        return shard(x, f32[b"batch/dp embed/tp"])

    with jax.set_mesh(m), axis_rules(TRAIN):
        out = jax.jit(lay_out)(put(m, X))
    assert same_layout(out, m, ("data", "fsdp"), "model")
    np.testing.assert_allclose(np.asarray(out), X)


# typed_shard_map and ops under rules.

@typed_shard_map
def rules_matmul(x: f32[b"B/dp M"], w: f32[b"M F/tp"]) -> f32[b"B/dp F/tp"]:
    return jnp.tanh(x @ w)


@typed_shard_map
def rules_scatter(x: f32[b"B/dp M"]) -> f32[b"B/dp M/tp"]:
    return ops.psum_scatter("B/dp M -> B/dp M/tp", x)


@typed_shard_map(check_vma=False)
def rules_gather(x: f32[b"B/dp M/tp"]) -> f32[b"B/dp M"]:
    return ops.all_gather("B/dp M/tp -> B/dp M", x)


@pytest.mark.parametrize("kind", KINDS)
def test_typed_shard_map_under_two_rule_sets(kind):
    m = mesh3(kind)
    ref = np.tanh(X @ W)
    with jax.set_mesh(m):
        with axis_rules(A):  # dp -> data, tp -> model
            out = rules_matmul(put(m, X, "data"), put(m, W, None, "model"))
            assert same_layout(out, m, "data", "model")
            np.testing.assert_allclose(np.asarray(out), ref, rtol=1e-5, atol=1e-5)
        with axis_rules(B):  # dp -> (data, fsdp), tp -> None
            out = rules_matmul(put(m, X, ("data", "fsdp")), put(m, W))
            assert same_layout(out, m, ("data", "fsdp"), None)
            np.testing.assert_allclose(np.asarray(out), ref, rtol=1e-5, atol=1e-5)
            with pytest.raises(TypeCheckError) as info:
                rules_matmul(put(m, X, "data"), put(m, W))
    message = str(info.value)
    assert 'argument "x"' in message and "of rules_matmul()" in message
    assert "sharding is P('data', None) but the annotation says P(('data', 'fsdp'), None)" in message


@pytest.mark.parametrize("kind", KINDS)
def test_ops_resolve_logical_names(kind):
    m = mesh3(kind)
    tp_fsdp = AxisRules([("dp", "data"), ("tp", "fsdp")], name="tp_fsdp")
    with jax.set_mesh(m):
        for rules, tp in ((A, "model"), (tp_fsdp, "fsdp")):
            with axis_rules(rules):
                scattered = rules_scatter(put(m, X, "data"))
                gathered = rules_gather(put(m, X, "data", tp))
            # psum_scatter sums the two equal copies over tp's axis, leaving M scattered over it.
            assert same_layout(scattered, m, "data", tp)
            np.testing.assert_allclose(np.asarray(scattered), 2 * X, rtol=1e-6)
            assert same_layout(gathered, m, "data", None)
            np.testing.assert_allclose(np.asarray(gathered), X)


# ---------------------------------------------------------------------------------------------
# explain.


def test_explain_without_rules():
    text = explain(f32[b"batch/d embed"])
    assert text.splitlines()[0] == "no axis rules are active: the names after '/' are mesh axes"
    assert "the annotation: f32[b'batch/d embed']" in text
    assert "dim 0 'batch/d': d" in text
    assert "dim 1 'embed': replicated" in text


def test_explain_under_rules():
    rules = AxisRules([("dp", ("data", "fsdp")), ("tp", "model"), ("heads", "model"), ("heads", "fsdp")],
                      name="demo")
    with axis_rules(rules):
        text = explain(Mlp, MESH3, {"embed": 8, "mlp": 4})
        two = explain(f32[b"b/dp h/heads"], MESH3)
        three = explain(f32[b"b/dp h/heads e/tp"], MESH3)
        failing = explain(f32[b"b/dp e/zz"], MESH3)
    lines = text.splitlines()
    assert lines[0].startswith("under AxisRules(name='demo', [")
    assert "Mlp.w_in: f32[b'embed/fsdp mlp/tp']" in lines
    assert "  error: dim 0 'embed/fsdp': logical axis 'fsdp' has no rule in AxisRules 'demo'" in text
    assert "dim 0 'b/dp': data, fsdp  (dp -> ('data', 'fsdp'))" in two
    assert "dim 1 'h/heads': model  (heads -> 'model')" in two
    # Rules in order (Flax's): 'tp' -> 'model' comes first, so 'heads' finds 'model' and then
    # 'fsdp' taken.
    assert ("error: dim 1 'h/heads': no rule for 'heads' applies: rule 'heads' -> 'model': mesh axis "
            "'model' is already used by dim 2 'e/tp'; rule 'heads' -> 'fsdp': mesh axis 'fsdp' is "
            "already used by dim 0 'b/dp'") in three
    assert "error: dim 1 'e/zz': logical axis 'zz' has no rule in AxisRules 'demo'" in failing


def test_explain_names_the_mode_and_passed_over_rules():
    with axis_rules(eformer_rules()):
        text = explain(ATTN, EFORMER_MESH, {"b": 8, "q": 1, "h": 4, "d": 2})
    assert ("dim 0 'b/batch': fsdp, dp, sp  (mode 'decode', as dim 'q/query' has size 1; "
            "batch -> ('fsdp', 'dp', 'sp'))") in text
    assert "dim 2 'h/heads': tp  (heads -> 'tp')" in text
    rules = AxisRules([("a", "model"), ("b", "model"), ("b", "data")])
    with axis_rules(rules):
        text = explain({"w": f32[b"x/a y/b"]}, MESH3, {"x": 3, "y": 4})
        ok = explain({"w": f32[b"x/a y/b"]}, MESH3, {"x": 4, "y": 4})
    assert "['w']: f32[b'x/a y/b']" in text
    assert "error: dim 0 'x/a': rule 'a' -> 'model': size 3 does not divide over 2 devices" in text
    assert ("dim 1 'y/b': data  (passed over rule 'b' -> 'model': mesh axis 'model' is already used by "
            "dim 0 'x/a'; b -> 'data' (rule 2 for 'b'))") in ok


# ---------------------------------------------------------------------------------------------
# Property: relaxed rules never give an impossible spec.

MESH_AXES = ("m0", "m1", "m2", "m3")
LOGICAL = ("la", "lb", "lc", "ld", "le")


@st.composite
def meshes(draw):
    names = draw(st.lists(st.sampled_from(MESH_AXES), min_size=1, max_size=4, unique=True))
    sizes = []
    for _ in names:
        room = 8 // math.prod(sizes)
        sizes.append(draw(st.sampled_from([s for s in (1, 2, 4) if s <= room])))
    return AbstractMesh(tuple(sizes), tuple(names))


@st.composite
def rule_sets(draw, mesh_names):
    axis = st.sampled_from(tuple(mesh_names) + ("zz",))  # 'zz' is not in the mesh
    target = st.one_of(st.none(), axis, st.lists(axis, min_size=1, max_size=3, unique=True).map(tuple))
    pairs = draw(st.lists(st.tuples(st.sampled_from(LOGICAL), target), max_size=10))
    return AxisRules(pairs, on_conflict="drop", on_indivisible="drop", on_missing="replicate",
                     on_unknown_axis="drop")


@st.composite
def annotations(draw):
    ndim = draw(st.integers(1, 4))
    names = list(draw(st.permutations(LOGICAL)))
    dims, sizes = [], {}
    for i in range(ndim):
        k = draw(st.integers(0, 2))
        logical, names = names[:k], names[k:]
        dims.append("/".join([f"d{i}"] + logical))
        sizes[f"d{i}"] = draw(st.sampled_from([1, 2, 3, 4, 6, 8, 16]))
    return " ".join(dims), sizes


def _entries(spec):
    return [() if e is None else (e,) if isinstance(e, str) else tuple(e) for e in spec]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_relaxed_rules_give_valid_specs(data):
    mesh = data.draw(meshes())
    rules = data.draw(rule_sets(mesh.axis_names))
    text, sizes = data.draw(annotations())
    annotation = f32[text]
    mesh_sizes = dict(mesh.shape)
    with axis_rules(rules):
        without_dims = make_shardings(annotation, mesh).spec
        with_dims = make_shape_dtype_structs(annotation, sizes, mesh).sharding.spec
    for spec in (without_dims, with_dims):
        used = [a for axes in _entries(spec) for a in axes]
        assert len(used) == len(set(used)), (spec, list(rules), text)
        assert set(used) <= set(mesh.axis_names), (spec, list(rules), text)
    for i, axes in enumerate(_entries(with_dims)):
        parts = math.prod(mesh_sizes[a] for a in axes)
        assert sizes[f"d{i}"] % parts == 0, (with_dims, list(rules), text, sizes)


# ---------------------------------------------------------------------------------------------
# Value equality: rules written afresh are the same rules (jit does not retrace for them).


def test_axis_rules_compare_and_hash_by_value():
    def make(**kw):
        return AxisRules([("batch", "d"), ("embed", ("d", "t"))], modes={"decode": [("batch", None)]}, **kw)

    a, b = make(), make()
    assert a == b and hash(a) == hash(b) and a is not b
    assert len({a, b}) == 1
    assert a != make(name="other")
    assert a != make(on_missing="replicate")
    assert a != AxisRules([("batch", "d")])
    assert AxisRules([("a", "d"), ("b", "t")]) != AxisRules([("b", "t"), ("a", "d")])  # order matters
    assert a != [("batch", "d"), ("embed", ("d", "t"))]
    assert AxisRules([], modes={"x": [], "y": []}) == AxisRules([], modes={"y": [], "x": []})


def test_axis_rules_key_is_kept_and_follows_a_reassigned_field():
    """The key jit's cache hashes is built once; modes are read-only, and a field assigned anew
    is a new key (so a kept key never goes stale)."""
    rules = AxisRules([("batch", "d")], modes={"decode": [("batch", None)]})
    before = hash(rules)
    assert rules._key() is rules._key()
    with pytest.raises(TypeError):
        rules.modes["decode"] = ()  # type: ignore[index]
    rules.name = "renamed"
    assert hash(rules) != before and rules == AxisRules([("batch", "d")], modes={"decode": [("batch", None)]},
                                                       name="renamed")


def test_axis_rules_pickle_and_copy_to_equal_rules():
    import copy
    import pickle

    rules = eformer_rules()
    rules.table("decode")  # a filled cache does not travel
    for back in (pickle.loads(pickle.dumps(rules)), copy.deepcopy(rules), copy.copy(rules)):
        assert back == rules and hash(back) == hash(rules)
        assert back.table("decode") == rules.table("decode")


def test_list_rules_do_not_retrace_jit():
    traces = []

    @jax.jit
    def double(x):
        traces.append(None)
        return x * 2

    x = jnp.zeros(4)
    for _ in range(3):
        with axis_rules([("batch", "d"), ("embed", "t")]):  # a new AxisRules each time
            double(x)
    assert len(traces) == 1
    with axis_rules([("batch", "t")]):  # other rules: traced again
        double(x)
    assert len(traces) == 2


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        (dict(modes=[("decode", [])]), TypeError, "AxisRules: modes must be a mapping of mode name to rules"),
        (dict(modes={3: []}), TypeError, "AxisRules: each mode name must be a non-empty str, got 3 in modes"),
        (dict(name=3), TypeError, "AxisRules: name must be a str or None, got 3"),
        (dict(name=""), ValueError, "AxisRules: name must be a non-empty str or None, got ''"),
        (dict(modes={"decode": []}, auto_mode=("query", -1, "decode")), ValueError,
         "the size in auto_mode ('query', -1, 'decode') must be non-negative, got -1"),
        (dict(modes={"decode": []}, auto_mode=("query", True, "decode")), TypeError, "auto_mode is (dim name, size, mode)"),
    ],
)
def test_bad_constructor_arguments_are_named(kwargs, error, message):
    with pytest.raises(error, match=re.escape(message)):
        AxisRules([("batch", "d")], **kwargs)


def test_preset_arguments_are_checked():
    with pytest.raises(TypeError, match=re.escape("t5x_rules: activation_partitioning_dims must be the int 1 or 2, got True")):
        t5x_rules(True, 1)
    with pytest.raises(TypeError, match=re.escape("t5x_rules: additional_rules: rules are a sequence")):
        t5x_rules(additional_rules=3)
    with pytest.raises(TypeError, match=re.escape("eformer_rules: dp must be a mesh axis name (an identifier), got 3")):
        eformer_rules(dp=3)
    with pytest.raises(ValueError, match=re.escape("eformer_rules: dp and fsdp name mesh axis 'x' twice")):
        eformer_rules(dp="x", fsdp="x")
    with pytest.raises(TypeError, match=re.escape("axis_rules: mode must be a str or None, got 3")):
        with axis_rules(t5x_rules(), mode=3):
            pass


def test_explain_checks_mesh_and_dims():
    with pytest.raises(TypeError, match=re.escape("explain: mesh must be a Mesh or an AbstractMesh")):
        explain(f32[b"batch/d"], "d")
    with pytest.raises(ValueError, match=re.escape("explain: dims['batch'] is -8; a size cannot be negative")):
        explain(f32[b"batch/d"], dims={"batch": -8})
