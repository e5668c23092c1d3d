"""The checker (shardtypes.checking) reached through typeguard (shardtypes.integrations), in every
context a value is checked in: eager jax.Array, jit on Explicit axes (trace time), jit on Auto axes
(compile time, and ``auto_sharding_check``), inside shard_map (manual axes), and what a message
says about a traced value whose layout XLA has not chosen yet.

The values other than eager arrays and the dim kinds are in test_check_values.py, the texts of
the error messages in test_check_messages.py; the checked functions they share in check_kit.py.
"""

import re

import jax
import jax.numpy as jnp
import pytest
from jax.sharding import AxisType, PartitionSpec as P
from typeguard import TypeCheckError

import shardtypes
from shardtypes import anydtype, bf16, dims, f32, floating, i32, integer, typechecked

from check_kit import (
    JIT,
    JIT_LOCAL,
    JIT_RETURN,
    KINDS,
    as_int,
    both,
    center,
    compile_error,
    ct,
    fixed,
    host,
    multi,
    multi_rev,
    ones,
    plain_add,
    rank3,
    unknown_axis,
    unsharded,
)
from conftest import make_mesh, put


@pytest.fixture
def auto_check_off():
    old = shardtypes.config.auto_sharding_check
    shardtypes.config.auto_sharding_check = "off"
    try:
        yield
    finally:
        shardtypes.config.auto_sharding_check = old


# ---------------------------------------------------------------------------------------------
# Eager jax.Array.


def test_eager_exact_sharding_passes(mesh):
    x = put(mesh, ones(8, 16), "d")
    assert center(x) is x
    assert center(put(mesh, ones(8, 16), "d", None)) is not None  # P('d') == P('d', None)
    assert both(put(mesh, ones(8, 16), "d", "t")) is not None


def test_eager_transposed_sharding_fails(mesh):
    x = put(mesh, ones(8, 16), None, "d")
    with pytest.raises(
        TypeCheckError, match=re.escape("sharding is P(None, 'd') but the annotation says P('d', None)")
    ):
        center(x)
    with pytest.raises(TypeCheckError, match=re.escape("sharding is P(None, 'd')")):
        ct(x, f32[b"batch/d embed"])


def test_eager_partially_matching_sharding_fails(mesh):
    # Not only "sharded vs replicated": one missing axis is a mismatch.
    with pytest.raises(TypeCheckError, match=re.escape("annotation says P('d', 't')")):
        both(put(mesh, ones(8, 16), "d"))
    with pytest.raises(TypeCheckError, match=re.escape("sharding is P('d', 't')")):
        center(put(mesh, ones(8, 16), "d", "t"))


def test_eager_replicated_array_with_sharded_annotation_fails(mesh):
    with pytest.raises(TypeCheckError, match=re.escape("sharding is P(None, None)")):
        center(put(mesh, ones(8, 16)))


def test_eager_replicated_named_sharding_with_unsharded_annotation_passes(mesh):
    assert unsharded(put(mesh, ones(8, 16))) is not None
    assert unsharded(put(mesh, ones(8, 16), None, None)) is not None
    ct(put(mesh, ones(8, 16)), f32[b"batch embed"])
    with pytest.raises(TypeCheckError, match=re.escape("sharding is P('d', None)")):
        unsharded(put(mesh, ones(8, 16), "d"))


def test_eager_dtype_rank_and_size(mesh):
    x = put(mesh, ones(8, 16), "d")
    with pytest.raises(TypeCheckError, match="has dtype float32, the annotation wants int32"):
        as_int(x)
    assert as_int(put(mesh, ones(8, 16, dtype=jnp.int32), "d")) is not None
    with pytest.raises(TypeCheckError, match=re.escape("has 2 dims [8,16] but the annotation has 3")):
        rank3(x)
    assert fixed(x) is x
    with pytest.raises(TypeCheckError, match="dim '16' is 12, but the annotation fixes it to 16"):
        fixed(put(mesh, ones(8, 12), "d"))


def test_eager_multi_axis(mesh):
    x = put(mesh, ones(8, 16), ("d", "t"))
    assert multi(x) is x
    with pytest.raises(TypeCheckError, match=re.escape("annotation says P(('t', 'd'), None)")):
        multi_rev(x)  # the order of the axes matters
    with pytest.raises(TypeCheckError, match=re.escape("sharding is P('d', None)")):
        multi(put(mesh, ones(8, 16), "d"))
    with pytest.raises(TypeCheckError, match=re.escape("sharding is P(('d', 't'), None)")):
        center(x)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(
    "annotation, spec",
    [
        (f32[b"b/d e/t"], ("d",)),  # t has size 1: P('d', 't') is P('d')
        (f32[b"b/d e"], ("d", "t")),
        (f32[b"b/d/t e"], ("d",)),
        (f32[b"b/d e"], (("t", "d"),)),
        (f32[b"b/t e"], ()),
        (f32[b"b e"], ("t",)),
    ],
)
def test_eager_size_one_mesh_axes_no_false_alarm(kind, annotation, spec):
    m = make_mesh(kind, (8, 1), ("d", "t"))
    ct(put(m, ones(8, 16), *spec), annotation)


@pytest.mark.parametrize("kind", KINDS)
def test_eager_size_one_mesh_axes_still_check_the_others(kind):
    m = make_mesh(kind, (8, 1), ("d", "t"))
    with pytest.raises(TypeCheckError, match=re.escape("sharding is P(None, 'd')")):
        ct(put(m, ones(8, 16), "t", "d"), f32[b"b/d e"])
    with pytest.raises(TypeCheckError, match=re.escape("sharding is P('d', None)")):
        ct(put(m, ones(8, 16), "d", "t"), f32[b"b e/t"])


def test_eager_axis_not_in_mesh_fails_naming_it(mesh):
    for x in (put(mesh, ones(8, 16), "d"), put(mesh, ones(8, 16))):
        with pytest.raises(TypeCheckError, match=r"mesh axis 'q' is not in the array's mesh.*\('d', 't'\)"):
            unknown_axis(x)
    with pytest.raises(TypeCheckError, match="'q'"):
        ct(put(mesh, ones(8, 16), "d"), f32[b"batch/d embed/q"])


def test_eager_single_device_array_with_sharded_annotation_fails():
    x = jnp.ones((8, 16))
    with pytest.raises(TypeCheckError, match="SingleDeviceSharding.*jax.device_put"):
        center(x)
    with pytest.raises(TypeCheckError, match="SingleDeviceSharding"):
        ct(x, f32[b"batch embed/t"])


def test_eager_single_device_array_with_unsharded_annotation_passes():
    x = jnp.ones((8, 16))
    assert unsharded(x) is x
    ct(x, f32[b"batch embed"])


def test_eager_plain_typeguard_typechecked(mesh):
    x = put(mesh, ones(8, 16), "d")
    assert plain_add(x, x) is x
    with pytest.raises(TypeCheckError, match="dimension 'e' is 12 here"):
        plain_add(x, put(mesh, ones(8, 12), "d"))
    with pytest.raises(TypeCheckError, match=re.escape("sharding is P(None, 'd')")):
        plain_add(x, put(mesh, ones(8, 16), None, "d"))


@pytest.mark.parametrize(
    "annotation, dtype, ok",
    [
        (f32[b"n"], jnp.float32, True),
        (f32[b"n"], jnp.float16, False),
        (bf16[b"n"], jnp.bfloat16, True),
        (bf16[b"n"], jnp.float32, False),
        (i32[b"n"], jnp.int32, True),
        (i32[b"n"], jnp.uint32, False),
        (floating[b"n"], jnp.bfloat16, True),
        (floating[b"n"], jnp.float32, True),
        (floating[b"n"], jnp.int32, False),
        (integer[b"n"], jnp.uint8, True),
        (integer[b"n"], jnp.int32, True),
        (integer[b"n"], jnp.float32, False),
        (anydtype[b"n"], jnp.bool_, True),
    ],
)
def test_dtypes(annotation, dtype, ok):
    x = jnp.ones((4,), dtype)
    if ok:
        ct(x, annotation)
    else:
        with pytest.raises(TypeCheckError, match="has dtype"):
            ct(x, annotation)


# ---------------------------------------------------------------------------------------------
# Under jax.jit, Explicit axes: checked at trace time from jax.typeof.


@pytest.mark.parametrize("set_mesh", [True, False], ids=["set_mesh", "no_mesh"])
def test_jit_explicit_wrong_sharding_caught_at_trace_time(set_mesh):
    m = make_mesh("explicit")
    x = put(m, ones(8, 16), None, "d")
    expected = re.escape("sharding over Explicit axes is P(None, 'd') but the annotation says P('d', None)")
    if set_mesh:
        with jax.set_mesh(m):
            with pytest.raises(TypeCheckError, match=expected):
                JIT["center"].trace(x)  # tracing alone finds it
            with pytest.raises(TypeCheckError, match='argument "x".* of center\\(\\)'):
                JIT["center"](x)
    else:
        with pytest.raises(TypeCheckError, match=expected):
            JIT["center"](x)


@pytest.mark.parametrize(
    "name, spec",
    [
        ("center", ("d",)),
        ("center", ("d", None)),
        ("both", ("d", "t")),
        ("multi", (("d", "t"),)),
        ("unsharded", ()),
    ],
)
def test_jit_explicit_correct_sharding_passes(name, spec):
    m = make_mesh("explicit")
    x = put(m, ones(8, 16), *spec)
    with jax.set_mesh(m):
        assert JIT[name](x).shape == (8, 16)


@pytest.mark.parametrize(
    "name, spec, message",
    [
        ("center", (), "is P(None, None) but the annotation says P('d', None)"),
        ("both", ("d",), "annotation says P('d', 't')"),
        ("multi", ("d",), "annotation says P(('d', 't'), None)"),
        ("multi_rev", (("d", "t"),), "annotation says P(('t', 'd'), None)"),
        ("unsharded", ("d",), "is P('d', None) but the annotation says P(None, None)"),
        ("unknown_axis", ("d",), "mesh axis 'q' is not in the mesh"),
        ("as_int", ("d",), "has dtype float32, the annotation wants int32"),
        ("rank3", ("d",), "has 2 dims"),
    ],
)
def test_jit_explicit_mismatches(name, spec, message):
    m = make_mesh("explicit")
    with jax.set_mesh(m):
        with pytest.raises(TypeCheckError, match=re.escape(message)):
            JIT[name](put(m, ones(8, 16), *spec))


def test_jit_explicit_return_value_and_local():
    m = make_mesh("explicit")
    x = put(m, ones(8, 16), "d")
    with jax.set_mesh(m):
        with pytest.raises(TypeCheckError, match=r"the return value .*of transposed_return\(\)"):
            JIT_RETURN(x)
        with pytest.raises(TypeCheckError, match=r"value assigned to y .*of transposed_local\(\)"):
            JIT_LOCAL(x)


@pytest.mark.parametrize("kind", KINDS)
def test_jit_size_one_mesh_axes_no_false_alarm(kind):
    m = make_mesh(kind, (8, 1), ("d", "t"))
    with jax.set_mesh(m):
        assert JIT["both"](put(m, ones(8, 16), "d")).shape == (8, 16)
        assert JIT["center"](put(m, ones(8, 16), "d", "t")).shape == (8, 16)
        assert JIT["multi"](put(m, ones(8, 16), "d")).shape == (8, 16)


def test_jit_dims_are_global_sizes(mesh):
    seen = {}

    @typechecked
    def record(x: f32[b"b/d e/t"]) -> f32[b"b/d e/t"]:
        seen.update(dims())
        return x

    with jax.set_mesh(mesh):
        jax.jit(record)(put(mesh, ones(8, 16), "d", "t"))
    assert seen == {"b": 8, "e": 16}


# ---------------------------------------------------------------------------------------------
# Under jax.jit, Auto axes: checked at compile time, with the shardtypes message.


@pytest.mark.parametrize("set_mesh", [True, False], ids=["set_mesh", "no_mesh"])
def test_jit_auto_wrong_sharding_caught_at_compile_time(set_mesh):
    m = make_mesh("auto")
    x = put(m, ones(8, 16), None, "d")

    def run():
        lowered = JIT["center"].lower(x)  # tracing and lowering cannot know XLA's choice
        lowered.compile()

    if set_mesh:
        with jax.set_mesh(m), pytest.raises(TypeCheckError) as info:
            run()
    else:
        with pytest.raises(TypeCheckError) as info:
            run()
    message = compile_error(info)
    assert 'argument "x" of center()' in message
    assert "annotated f32[b'batch/d embed']" in message
    assert "sharding is P(None, 'd') but the annotation says P('d', None)" in message


@pytest.mark.parametrize(
    "name, spec, message",
    [
        ("center", (), "sharding is P(None, None) but the annotation says P('d', None)"),
        ("both", ("d",), "sharding is P('d', None) but the annotation says P('d', 't')"),
        ("multi_rev", (("d", "t"),), "annotation says P(('t', 'd'), None)"),
        ("unsharded", ("d",), "sharding is P('d', None) but the annotation says P(None, None)"),
    ],
)
def test_jit_auto_mismatches(name, spec, message):
    m = make_mesh("auto")
    with jax.set_mesh(m), pytest.raises(TypeCheckError) as info:
        JIT[name](put(m, ones(8, 16), *spec))
    text = compile_error(info)
    assert message in text
    assert f"of {name}()" in text


def test_jit_auto_return_value_and_local():
    m = make_mesh("auto")
    x = put(m, ones(8, 16), "d")
    with jax.set_mesh(m):
        with pytest.raises(TypeCheckError) as info:
            JIT_RETURN(x)
        assert "the return value of transposed_return()" in compile_error(info)
        with pytest.raises(TypeCheckError) as info:
            JIT_LOCAL(x)
        assert "the value assigned to y of transposed_local()" in compile_error(info)


def test_jit_auto_trace_time_errors_stay_trace_time():
    m = make_mesh("auto")
    with jax.set_mesh(m):
        with pytest.raises(TypeCheckError, match="mesh axis 'q' is not in the mesh"):
            JIT["unknown_axis"](put(m, ones(8, 16), "d"))
        with pytest.raises(TypeCheckError, match="has dtype float32"):
            JIT["as_int"](put(m, ones(8, 16), "d"))


@pytest.mark.parametrize(
    "name, spec",
    [
        ("center", ("d",)),
        ("center", ("d", None)),
        ("both", ("d", "t")),
        ("multi", (("d", "t"),)),
        ("unsharded", ()),
    ],
)
@pytest.mark.parametrize("set_mesh", [True, False], ids=["set_mesh", "no_mesh"])
def test_jit_auto_correct_sharding_passes(name, spec, set_mesh):
    m = make_mesh("auto")
    x = put(m, ones(8, 16), *spec)
    if set_mesh:
        with jax.set_mesh(m):
            out = JIT[name](x)
    else:
        out = JIT[name](x)
    assert out.shape == (8, 16)


def test_jit_no_mesh_single_device_input_unsharded_annotation_passes():
    assert JIT["unsharded"](jnp.ones((8, 16))).shape == (8, 16)
    assert jax.jit(host)(jnp.ones((3, 4))).shape == (3, 4)


def test_jit_no_mesh_single_device_input_sharded_annotation_fails():
    with pytest.raises(TypeCheckError) as info:
        JIT["center"](jnp.ones((8, 16)))
    assert "not sharded over any named mesh axis" in str(info.value)
    assert 'argument "x" of center()' in str(info.value)


@typechecked
def center_for_off(x: f32[b"batch/d embed"]) -> f32[b"batch/d embed"]:
    return x * 2


def test_auto_sharding_check_off_disables_compile_time_check(auto_check_off):
    m = make_mesh("auto")
    with jax.set_mesh(m):
        out = jax.jit(center_for_off)(put(m, ones(8, 16), None, "d"))
    assert out.shape == (8, 16)


def test_auto_sharding_check_off_keeps_explicit_checks(auto_check_off):
    m = make_mesh("explicit")
    with jax.set_mesh(m), pytest.raises(TypeCheckError, match="sharding over Explicit axes"):
        jax.jit(center_for_off)(put(m, ones(8, 16), None, "d"))


@typechecked
def center_traced_then_off(x: f32[b"batch/d embed"]) -> f32[b"batch/d embed"]:
    return x * 3


def test_auto_sharding_check_off_applies_to_functions_traced_before(auto_check_off):
    m = make_mesh("auto")
    f = jax.jit(center_traced_then_off)
    shardtypes.config.auto_sharding_check = "compile"
    with jax.set_mesh(m):
        f(put(m, ones(8, 16), "d"))  # traced (and compiled) with the check on
        shardtypes.config.auto_sharding_check = "off"
        f(put(m, ones(8, 16), None, "d"))  # same trace, new compile: must not be checked


def test_auto_sharding_check_invalid_value():
    old = shardtypes.config.auto_sharding_check
    assert old == "compile"  # the default
    with pytest.raises(ValueError, match="auto_sharding_check"):
        shardtypes.config.auto_sharding_check = "sometimes"
    assert shardtypes.config.auto_sharding_check == old


def test_jit_mixed_axis_types():
    m = jax.make_mesh((4, 2), ("d", "t"), axis_types=(AxisType.Explicit, AxisType.Auto))
    with jax.set_mesh(m):
        assert JIT["both"](put(m, ones(8, 16), "d", "t")).shape == (8, 16)
        with pytest.raises(TypeCheckError, match="sharding over Explicit axes"):
            JIT["both"](put(m, ones(8, 16), None, "t"))  # d is Explicit: trace time
        with pytest.raises(TypeCheckError) as info:
            JIT["both"](put(m, ones(8, 16), "d"))  # t is Auto: compile time
        assert "annotation says P('d', 't')" in compile_error(info)


# ---------------------------------------------------------------------------------------------
# Inside jax.shard_map (manual axes): global size = local size x annotated manual axes.

_SEEN: dict = {}


@typechecked
def sm_full(x: f32[b"b/d e/t"]) -> f32[b"b/d e/t"]:
    _SEEN["full"] = (dict(dims()), x.shape)
    return x


@typechecked
def sm_fixed(x: f32[b"8/d 16/t"]) -> f32[b"8/d 16/t"]:
    return x


@typechecked
def sm_fixed_wrong(x: f32[b"8/d 8/t"]) -> f32[b"8/d 8/t"]:
    return x


@typechecked
def sm_unknown(x: f32[b"b/d e/q"]) -> f32[b"b/d e/q"]:
    return x


@typechecked
def sm_partial(x: f32[b"b/d e"]) -> f32[b"b/d e"]:
    _SEEN["partial"] = (dict(dims()), x.shape)
    return x


@typechecked
def sm_partial_t(x: f32[b"b/d e/t"]) -> f32[b"b/d e/t"]:
    _SEEN["partial_t"] = (dict(dims()), x.shape)
    return x


def full_manual(body):
    return jax.jit(jax.shard_map(body, in_specs=P("d", "t"), out_specs=P("d", "t")))


def partial_manual(body, spec=P("d")):
    return jax.jit(jax.shard_map(body, in_specs=spec, out_specs=spec, axis_names={"d"}))


def test_shard_map_full_manual_global_sizes(mesh):
    _SEEN.clear()
    x = put(mesh, ones(8, 16), "d", "t")
    with jax.set_mesh(mesh):
        assert full_manual(sm_full)(x).shape == (8, 16)
        assert full_manual(sm_fixed)(x).shape == (8, 16)
    assert _SEEN["full"] == ({"b": 8, "e": 16}, (2, 8))


def test_shard_map_full_manual_wrong_global_size_fails(mesh):
    x = put(mesh, ones(8, 16), "d", "t")
    with jax.set_mesh(mesh), pytest.raises(TypeCheckError, match="dim '8/t' is 16"):
        full_manual(sm_fixed_wrong)(x)


def test_shard_map_partial_manual_global_sizes(mesh):
    _SEEN.clear()
    with jax.set_mesh(mesh):
        assert partial_manual(sm_partial)(put(mesh, ones(8, 16), "d")).shape == (8, 16)
    assert _SEEN["partial"] == ({"b": 8, "e": 16}, (2, 16))


def test_shard_map_partial_manual_non_manual_axis_not_scaled(mesh, auto_check_off):
    # t is not manual: the body sees the full e=16 and e/t must not multiply it by |t|.
    # (On Auto axes XLA picks t's layout inside the body; the check is off for that case.)
    _SEEN.clear()
    with jax.set_mesh(mesh):
        partial_manual(sm_partial_t)(put(mesh, ones(8, 16), "d", "t"))
    assert _SEEN["partial_t"] == ({"b": 8, "e": 16}, (2, 16))


def test_shard_map_partial_manual_explicit_axis_checked():
    m = make_mesh("explicit")
    with jax.set_mesh(m), pytest.raises(TypeCheckError, match=re.escape("annotation says P(None, None)")):
        partial_manual(sm_partial)(put(m, ones(8, 16), "d", "t"))


@pytest.mark.parametrize("manual", ["full", "partial"])
def test_shard_map_unknown_axis_fails(mesh, manual):
    wrap = full_manual if manual == "full" else partial_manual
    with jax.set_mesh(mesh), pytest.raises(TypeCheckError, match="mesh axis 'q' is not in the mesh"):
        wrap(sm_unknown)(put(mesh, ones(8, 16), "d", "t" if manual == "full" else None))


def test_switching_the_auto_check_on_makes_jit_trace_again():
    mesh = make_mesh("auto")

    @typechecked
    def g(x: f32[b"a/d b"]) -> f32[b"a/d b"]:
        return x * 2

    jitted = jax.jit(g)
    wrong = put(mesh, jnp.ones((8, 4)), None, "d")
    try:
        with jax.set_mesh(mesh):
            shardtypes.config.auto_sharding_check = "off"
            jitted(wrong)  # traced without the compile-time check
            shardtypes.config.auto_sharding_check = "compile"
            with pytest.raises(TypeCheckError, match="shardtypes \\(compile-time check\\)"):
                jitted(wrong)  # traced again, now with it
    finally:
        shardtypes.config.auto_sharding_check = "compile"


# ---------------------------------------------------------------------------------------------
# What a message says about a traced value whose layout XLA has not chosen yet.


@pytest.mark.parametrize("types, found", [
    ((AxisType.Auto, AxisType.Auto),
     "(found bfloat16[8,4], its layout over Auto axes 'd', 't' unknown until compiled, where "
     "shardtypes checks it)"),
    ((AxisType.Explicit, AxisType.Auto),
     "(found bfloat16[8,4], sharded P('d', None) over Explicit axes, its layout over Auto axes 't' "
     "unknown until compiled, where shardtypes checks it)"),
])
def test_traced_message_says_auto_layout_is_unknown(types, found):
    m = jax.make_mesh((4, 2), ("d", "t"), axis_types=types)

    @jax.jit
    @typechecked
    def f(x: f32[b"a/d b/t"]) -> f32[b"a/d b/t"]:
        return x

    with jax.set_mesh(m), pytest.raises(TypeCheckError) as info:
        f(put(m, jnp.zeros((8, 4), jnp.bfloat16), "d"))
    assert found in str(info.value)
    assert "P(None, None)" not in str(info.value)


def test_traced_message_without_mesh_and_with_auto_check_off(auto_check_off):
    @jax.jit
    @typechecked
    def f(x: f32[b"a b"]) -> f32[b"a b"]:
        return x

    with pytest.raises(TypeCheckError) as info:
        f(jnp.zeros(3))
    assert ("(found float32[3], traced with no mesh, so its sharding is unknown until compiled, not "
            "checked: shardtypes.config.auto_sharding_check is 'off')") in str(info.value)
