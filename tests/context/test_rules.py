"""Logical axis rules (shardtypes.context.rules), the rule sets themselves (issue 4, items 1-4):
AxisRules and its construction errors, resolution (Flax linen semantics), strictness and its
relaxations, the axis_rules context (nesting, threads), merging, explain, value equality, and the
property that relaxed rules never give an impossible spec.

Modes and the presets are in test_rules_modes_and_presets.py; the "one language" guarantee (the
same annotation checked, laid out and mapped through whichever rules are active) in
test_rules_one_language.py. Rule resolution is tested on AbstractMeshes (no devices).
"""

import math
import re
import threading

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from jax.sharding import AbstractMesh, PartitionSpec as P
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
    t5x_rules,
    typechecked,
)
from shardtypes.language import AXIS_RULES

from conftest import put
from rules_kit import ATTN, EFORMER_MESH, KINDS, MESH3, A, B, Mlp, X, mesh3, spec_under, struct_spec

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
    ) + f"\n{AXIS_RULES.line}"  # the docs link, last (tests/package/test_error_docs.py)
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
    ) + f"\n{AXIS_RULES.line}"  # the docs link, last (tests/package/test_error_docs.py)
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
    ) + f"\n{AXIS_RULES.line}"  # the docs link, last (tests/package/test_error_docs.py)
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
    ) + f"\n{AXIS_RULES.line}"  # the docs link, last (tests/package/test_error_docs.py)
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
