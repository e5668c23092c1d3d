"""Logical axis rules' modes (train / prefill / decode, auto_mode, a replicate in one mode) and the
presets: eFormer's rules, and T5X's standard rules as flax.linen.logical_to_mesh_axes resolves
them (with the cases the preset gets wrong marked).
"""

import re

import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P
from typeguard import TypeCheckError

from shardtypes import (
    AxisRules,
    AxisRulesError,
    axis_rules,
    eformer_rules,
    explain,
    f32,
    make_shape_dtype_structs,
    t5x_rules,
    typechecked,
)

from conftest import make_mesh, put
from rules_kit import ATTN, EFORMER_MESH, KINDS, spec_under, struct_spec

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
