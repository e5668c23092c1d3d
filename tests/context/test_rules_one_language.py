"""The "one language" guarantee of logical axis rules: the same annotation is checked (eagerly and
under jit), turned into specs and shardings, laid out with ``shard`` and mapped with
``typed_shard_map`` and ``ops`` through whichever rules are active, and one jitted function works
under two rule sets. Small meshes of the 8 simulated CPU devices, with few jit compiles.
"""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec as P
from typeguard import TypeCheckError

from shardtypes import (
    AxisRules,
    axis_rules,
    f32,
    make_partition_specs,
    make_shape_dtype_structs,
    make_shardings,
    ops,
    shard,
    typechecked,
    typed_shard_map,
)

from conftest import make_mesh, put
from rules_kit import KINDS, A, B, Mlp, W, X, mesh3


def same_layout(array, mesh, *spec):
    return array.sharding.is_equivalent_to(NamedSharding(mesh, P(*spec)), array.ndim)


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
