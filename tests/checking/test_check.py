"""The checker (shardtypes.checking) reached through typeguard (shardtypes.integrations).

One value against one annotation, in every context: eager jax.Array, jit on Explicit axes (trace
time), jit on Auto axes (compile time), inside shard_map (manual axes), numpy, ShapeDtypeStruct
(symbolic dims, AbstractMesh); the dim kinds; and the texts of the error messages.

Most checked functions are defined once at module level, so that jax.jit caches their traces and
compilations and the file stays fast.
"""

import importlib
import re
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import typeguard
from hypothesis import given, settings, strategies as st
from jax.sharding import AbstractMesh, AxisType, NamedSharding, PartitionSpec as P
from typeguard import TypeCheckError, check_type

import shardtypes
from shardtypes import Scope, anydtype, bf16, dims, f32, floating, i32, integer, typechecked

from conftest import make_mesh, put

KINDS = ("explicit", "auto")
S = jax.ShapeDtypeStruct


def ct(value, annotation):
    """``typeguard.check_type`` in a frame of its own, so that every call starts a fresh table."""
    return check_type(value, annotation)


def ones(*shape, dtype=jnp.float32):
    return jnp.ones(shape, dtype)


def npz(*shape, dtype=np.float32):
    return np.zeros(shape, dtype)


def compile_error(info) -> str:
    """The message of a compile-time failure: shardtypes' own TypeCheckError, its text first."""
    message = str(info.value)
    assert message.startswith("shardtypes (compile-time check)"), message
    return message


@pytest.fixture
def auto_check_off():
    old = shardtypes.config.auto_sharding_check
    shardtypes.config.auto_sharding_check = "off"
    try:
        yield
    finally:
        shardtypes.config.auto_sharding_check = old


# ---------------------------------------------------------------------------------------------
# Checked functions shared by the tests (jit caches them, which keeps the file fast).


@typechecked
def center(x: f32[b"batch/d embed"]) -> f32[b"batch/d embed"]:
    return x


@typechecked
def both(x: f32[b"batch/d embed/t"]) -> f32[b"batch/d embed/t"]:
    return x


@typechecked
def multi(x: f32[b"batch/d/t embed"]) -> f32[b"batch/d/t embed"]:
    return x


@typechecked
def multi_rev(x: f32[b"batch/t/d embed"]) -> f32[b"batch/t/d embed"]:
    return x


@typechecked
def unsharded(x: f32[b"batch embed"]) -> f32[b"batch embed"]:
    return x


@typechecked
def unknown_axis(x: f32[b"batch/q embed"]) -> f32[b"batch/q embed"]:
    return x


@typechecked
def as_int(x: i32[b"batch/d embed"]) -> i32[b"batch/d embed"]:
    return x


@typechecked
def rank3(x: f32[b"batch/d embed extra"]) -> f32[b"batch/d embed extra"]:
    return x


@typechecked
def fixed(x: f32[b"8/d 16"]) -> f32[b"8/d 16"]:
    return x


@typechecked
def add(x: f32[b"b/d e"], y: f32[b"b/d e"]) -> f32[b"b/d e"]:
    return x + y


@typechecked
def ret_slice(x: f32[b"b/d e"]) -> f32[b"b/d e"]:
    return x[:, :12]


@typechecked
def local_slice(x: f32[b"b/d e"]) -> f32[b"b/d e"]:
    y: f32[b"b/d e"] = x[:, :12]
    return x


@typechecked
def transposed_return(x: f32[b"b/d e"]) -> f32[b"b e/d"]:
    return x


@typechecked
def transposed_local(x: f32[b"b/d e"]) -> f32[b"b/d e"]:
    y: f32[b"b e/d"] = x
    return x


@typeguard.typechecked
def plain_add(x: f32[b"b/d e"], y: f32[b"b/d e"]) -> f32[b"b/d e"]:
    return x


JIT = {
    f.__name__: jax.jit(f)
    for f in (center, both, multi, multi_rev, unsharded, unknown_axis, as_int, rank3)
}
JIT_RETURN = jax.jit(transposed_return)
JIT_LOCAL = jax.jit(transposed_local)


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


# ---------------------------------------------------------------------------------------------
# numpy.ndarray: host data.


@typechecked
def host(x: f32[b"b 4"]) -> f32[b"b 4"]:
    return x


def test_numpy_shape_and_dtype():
    assert host(npz(3, 4)).shape == (3, 4)
    with pytest.raises(TypeCheckError, match="dim '4' is 5"):
        host(npz(3, 5))
    with pytest.raises(TypeCheckError, match="has dtype float64"):
        host(npz(3, 4, dtype=np.float64))
    with pytest.raises(TypeCheckError, match="has 1 dim"):
        host(npz(4))
    ct(np.float32(1.0), f32[b""])


def test_numpy_sharded_annotation_fails():
    with pytest.raises(TypeCheckError, match=r"numpy array.*jax\.device_put\(x, NamedSharding\(mesh, P\('d', None\)\)\)"):
        center(npz(8, 16))
    with pytest.raises(TypeCheckError, match="jax.device_put"):
        ct(npz(8, 16), f32[b"b e/t"])


# ---------------------------------------------------------------------------------------------
# jax.ShapeDtypeStruct, symbolic dims, AbstractMesh.


def test_shape_dtype_struct_without_sharding():
    ct(S((8, 16), jnp.float32), f32[b"b e"])
    ct(S((8, 16), jnp.float32), f32[b"b/d e"])  # no sharding: unspecified, not checked
    with pytest.raises(TypeCheckError, match="dim '4' is 16"):
        ct(S((8, 16), jnp.float32), f32[b"b 4"])
    with pytest.raises(TypeCheckError, match="has dtype int32"):
        ct(S((8, 16), jnp.int32), f32[b"b e"])


def test_shape_dtype_struct_with_sharding(mesh):
    def struct(*spec):
        return S((8, 16), jnp.float32, sharding=NamedSharding(mesh, P(*spec)))

    ct(struct("d"), f32[b"b/d e"])
    ct(struct("d", "t"), f32[b"b/d e/t"])
    with pytest.raises(TypeCheckError, match=re.escape("sharding is P(None, 'd')")):
        ct(struct(None, "d"), f32[b"b/d e"])
    with pytest.raises(TypeCheckError, match="mesh axis 'q'"):
        ct(struct("d"), f32[b"b/d e/q"])


@pytest.mark.parametrize("axis_type", [AxisType.Explicit, AxisType.Auto], ids=["explicit", "auto"])
def test_shape_dtype_struct_abstract_mesh(axis_type):
    am = AbstractMesh((64, 64), ("d", "t"), axis_types=(axis_type,) * 2)

    def struct(*spec):
        return S((128, 256), jnp.float32, sharding=NamedSharding(am, P(*spec)))

    ct(struct("d", "t"), f32[b"b/d e/t"])
    ct(struct("d"), f32[b"b/d e"])
    with pytest.raises(TypeCheckError, match=re.escape("sharding is P('t', 'd') but the annotation says P('d', 't')")):
        ct(struct("t", "d"), f32[b"b/d e/t"])
    with pytest.raises(TypeCheckError, match="mesh axis 'x' is not in"):
        ct(struct("d"), f32[b"b/d e/x"])
    with pytest.raises(TypeCheckError, match="mesh axis 'q' is not in the mesh"):
        jax.eval_shape(unknown_axis, struct("d", "t"))


def test_eval_shape_abstract_mesh_explicit():
    am = AbstractMesh((64, 64), ("d", "t"), axis_types=(AxisType.Explicit,) * 2)
    s = S((128, 256), jnp.float32, sharding=NamedSharding(am, P("d", "t")))
    out = jax.eval_shape(both, s)
    assert out.shape == (128, 256)
    with pytest.raises(TypeCheckError, match=re.escape("sharding over Explicit axes is P('d', 't')")):
        jax.eval_shape(center, s)


@typechecked
def add_sym(x: f32[b"n m"], y: f32[b"n m"]) -> f32[b"n m"]:
    return x + y


@typechecked
def concat_sym(x: f32[b"n m"], y: f32[b"n k"]) -> f32[b"n m+k"]:
    return jnp.concatenate([x, y], axis=1)


@typechecked
def grow_sym(x: f32[b"n m"]) -> f32[b"n m+1"]:
    return x


def test_symbolic_dims_eval_shape():
    a, b = jax.export.symbolic_shape("a, b")
    out = jax.eval_shape(add_sym, S((a, b), jnp.float32), S((a, b), jnp.float32))
    assert out.shape == (a, b)
    out = jax.eval_shape(concat_sym, S((a, b), jnp.float32), S((a, 3), jnp.float32))
    assert out.shape == (a, b + 3)
    with pytest.raises(
        TypeCheckError,
        match=re.escape("dimension 'n' is b here (dim 0) but was bound to a by argument \"x\" of add_sym()"),
    ):
        jax.eval_shape(add_sym, S((a, b), jnp.float32), S((b, a), jnp.float32))
    with pytest.raises(TypeCheckError, match="dimension 'm' is a here"):
        jax.eval_shape(add_sym, S((a, b), jnp.float32), S((a, a), jnp.float32))
    with pytest.raises(TypeCheckError, match=re.escape("dim 'm+1' is b, but m+1 = b + 1")):
        jax.eval_shape(grow_sym, S((a, b), jnp.float32))


def test_symbolic_dims_check_type():
    a, b = jax.export.symbolic_shape("a, b")
    ok = [
        (f32[b"n m"], (a, b)),
        (f32[b"n n"], (a, a)),
        (f32[b"n 2*n"], (a, 2 * a)),
        (f32[b"n n//2"], (2 * a, a)),
        (f32[b"n n+1"], (a, a + 1)),
        (f32[b"n #n"], (a, 1)),
        (f32[b"n #n"], (a, a)),
        (f32[b"*v w"], (a, b, 3)),
        (f32[b"n 3"], (a, 3)),
    ]
    for annotation, shape in ok:
        ct(S(shape, jnp.float32), annotation)
    bad = [
        (f32[b"n n"], (a, b)),
        (f32[b"n 2*n"], (a, 2 * b)),
        (f32[b"n n+1"], (a, a)),
        (f32[b"n #n"], (a, b)),
        (f32[b"n 3"], (a, b)),
    ]
    for annotation, shape in bad:
        with pytest.raises(TypeCheckError):
            ct(S(shape, jnp.float32), annotation)


def test_symbolic_dims_with_abstract_mesh():
    a, b = jax.export.symbolic_shape("a, b")
    am = AbstractMesh((64, 64), ("d", "t"), axis_types=(AxisType.Explicit,) * 2)
    s = S((a, b), jnp.float32, sharding=NamedSharding(am, P("d", "t")))
    ct(s, f32[b"x/d y/t"])
    with pytest.raises(TypeCheckError, match=re.escape("annotation says P('t', 'd')")):
        ct(s, f32[b"x/t y/d"])


# ---------------------------------------------------------------------------------------------
# Dim kinds inside one value.


@pytest.mark.parametrize(
    "annotation, shape",
    [
        (f32[b"n #n"], (3, 1)),
        (f32[b"n #n"], (3, 3)),
        (f32[b"#n n"], (1, 3)),
        (f32[b"#n n"], (3, 3)),
        (f32[b"#n"], (5,)),
        (f32[b"*batch n"], (2, 3, 4)),
        (f32[b"*batch n"], (4,)),
        (f32[b"n *batch"], (4, 2, 3)),
        (f32[b"... n"], (2, 3, 4)),
        (f32[b"... n"], (4,)),
        (f32[b"n ... n"], (4, 7, 4)),
        (f32[b"n ... n"], (4, 4)),
        (f32[b"_ _"], (2, 3)),
        (f32[b"_ n n"], (2, 3, 3)),
        (f32[b"3 4"], (3, 4)),
        (f32[b""], ()),
        (f32[b"n n+1"], (3, 4)),
        (f32[b"m+1 m"], (4, 3)),
        (f32[b"n n-1"], (3, 2)),
        (f32[b"n 2*n"], (3, 6)),
        (f32[b"n n//2"], (7, 3)),
        (f32[b"n (n+1)*2"], (3, 8)),
        (f32[b"n m n*m"], (2, 3, 6)),
    ],
)
def test_dim_kinds_pass(annotation, shape):
    ct(npz(*shape), annotation)
    ct(jnp.zeros(shape), annotation)


@pytest.mark.parametrize(
    "annotation, shape, message",
    [
        (f32[b"n #n"], (3, 2), "dim '#n' is 2, but must be 1 or n=3"),
        (f32[b"#n n"], (2, 3), "dim '#n' is 2, but must be 1 or n=3"),
        (f32[b"*b n"], (), "needs at least 1"),
        (f32[b"... n"], (), "needs at least 1"),
        (f32[b"n ... n"], (4, 7, 5), "dimension 'n' is 5 here"),
        (f32[b"_ _"], (2, 3, 4), "has 3 dims"),
        (f32[b"_ n n"], (2, 3, 4), "dimension 'n' is 4 here"),
        (f32[b"3 4"], (3, 5), "dim '4' is 5, but the annotation fixes it to 4"),
        (f32[b""], (1,), "has 1 dim"),
        (f32[b"n n+1"], (3, 5), "dim 'n+1' is 5, but n+1 = 4 (n=3)"),
        (f32[b"n 2*n"], (3, 5), "dim '2*n' is 5, but 2*n = 6 (n=3)"),
        (f32[b"n n//2"], (7, 4), "dim 'n//2' is 4, but n//2 = 3 (n=7)"),
        (f32[b"n m n*m"], (2, 3, 5), "n*m = 6"),
    ],
)
def test_dim_kinds_fail(annotation, shape, message):
    with pytest.raises(TypeCheckError, match=re.escape(message)):
        ct(npz(*shape), annotation)
    with pytest.raises(TypeCheckError, match=re.escape(message)):
        ct(jnp.zeros(shape), annotation)


def test_expression_over_unbound_name_fails_helpfully():
    with pytest.raises(
        TypeCheckError,
        match=re.escape("dim 'm+1' uses 'm', which no argument has bound yet; bind it in an earlier dim or with Scope(name=size)"),
    ):
        ct(npz(3, 4), f32[b"n m+1"])
    with Scope(m=3):
        ct(npz(3, 4), f32[b"n m+1"])


@typechecked
def variadic_pair(x: f32[b"*b n"], y: f32[b"*b n"]) -> f32[b"*b n"]:
    return x


@typechecked
def broadcast_pair(x: f32[b"n e"], y: f32[b"#n e"]) -> f32[b"n e"]:
    return x


@typechecked
def grow(x: f32[b"n"]) -> f32[b"k+1"]:
    return x


def test_variadic_binding_across_arguments():
    assert variadic_pair(npz(2, 3, 4), npz(2, 3, 4)).shape == (2, 3, 4)
    with pytest.raises(
        TypeCheckError,
        match=re.escape("dimension 'b' is [2,5] here (dims 0..1) but was bound to [2,3] by argument \"x\" of variadic_pair()"),
    ):
        variadic_pair(npz(2, 3, 4), npz(2, 5, 4))
    with pytest.raises(TypeCheckError, match=re.escape("dimension 'b' is [3] here")):
        variadic_pair(npz(2, 3, 4), npz(3, 4))


def test_broadcast_binding_across_arguments():
    assert broadcast_pair(npz(3, 4), npz(1, 4)).shape == (3, 4)
    assert broadcast_pair(npz(3, 4), npz(3, 4)).shape == (3, 4)
    with pytest.raises(TypeCheckError, match=re.escape('must be 1 or n=3 (bound by argument "x" of broadcast_pair())')):
        broadcast_pair(npz(3, 4), npz(2, 4))


def test_expression_in_return_over_name_bound_nowhere():
    with pytest.raises(TypeCheckError, match=r"the return value .*of grow\(\).*uses 'k', which no argument has bound yet"):
        grow(npz(3))
    with Scope(k=2):
        assert grow(npz(3)).shape == (3,)


@settings(max_examples=25, deadline=None, database=None)
@given(n=st.integers(2, 40), off=st.integers(1, 3))
def test_arithmetic_dims_property(n, off):
    annotation = f32[b"n 2*n n+1 n//2 n-1"]
    ct(npz(n, 2 * n, n + 1, n // 2, n - 1), annotation)
    with pytest.raises(TypeCheckError, match=re.escape(f"dim '2*n' is {2 * n + off}, but 2*n = {2 * n}")):
        ct(npz(n, 2 * n + off, n + 1, n // 2, n - 1), annotation)
    with pytest.raises(TypeCheckError, match=re.escape(f"dim 'n//2' is {n // 2 + off}")):
        ct(npz(n, 2 * n, n + 1, n // 2 + off, n - 1), annotation)


# ---------------------------------------------------------------------------------------------
# Error messages.


def test_message_argument_clash_names_where_the_dim_was_bound(mesh):
    x, y = put(mesh, ones(8, 16), "d"), put(mesh, ones(8, 12), "d")
    with pytest.raises(TypeCheckError) as info:
        add(x, y)
    message = str(info.value)
    assert message.startswith('argument "y"')
    assert "of add() is not f32[b'b/d e']" in message
    assert "dimension 'e' is 12 here (dim 1) but was bound to 16 by argument \"x\" of add()" in message
    assert "(found float32[8,12] sharded P('d', None))" in message


def test_message_sharding(mesh):
    x = put(mesh, ones(8, 16), "d")
    with pytest.raises(TypeCheckError) as info:
        add(x, put(mesh, ones(8, 16), None, "d"))
    message = str(info.value)
    assert 'argument "y"' in message and "of add()" in message
    assert "f32[b'b/d e']" in message
    assert "sharding is P(None, 'd') but the annotation says P('d', None)" in message
    assert "found float32[8,16] sharded P(None, 'd')" in message


def test_message_return_value(mesh):
    with pytest.raises(
        TypeCheckError,
        match=r"^the return value .*of ret_slice\(\) is not f32\[b'b/d e'\]: "
        + re.escape("dimension 'e' is 12 here (dim 1) but was bound to 16 by argument \"x\" of ret_slice()"),
    ) as info:
        ret_slice(put(mesh, ones(8, 16), "d"))
    assert "float32[8,12]" in str(info.value)


def test_message_annotated_local(mesh):
    with pytest.raises(
        TypeCheckError,
        match=r"value assigned to y .*of local_slice\(\) is not f32\[b'b/d e'\]: "
        + re.escape("dimension 'e' is 12 here (dim 1) but was bound to 16 by argument \"x\" of local_slice()"),
    ):
        local_slice(put(mesh, ones(8, 16), "d"))


def test_message_check_type_names_the_annotation():
    with pytest.raises(TypeCheckError) as info:
        ct(npz(8, 12), f32[b"b 16"])
    message = str(info.value)
    assert "f32[b'b 16']" in message and "float32[8,12]" in message


@pytest.mark.parametrize("value", [[1.0, 2.0], "x", None], ids=["list", "str", "None"])
def test_message_non_array(value):
    with pytest.raises(TypeCheckError, match=r'argument "x" .*of center\(\) is not f32.*is not an array'):
        center(value)
    with pytest.raises(TypeCheckError, match="is not an array"):
        ct(value, f32[b""])


def test_failures_are_type_check_errors_only(mesh):
    # Every failure is a TypeCheckError: no bare AssertionError / KeyError / ValueError escapes.
    values = [put(mesh, ones(8, 16), None, "d"), npz(8, 16), ones(8, 16), object(), S((8,), jnp.float32)]
    for value in values:
        for annotation in (f32[b"b/d e"], f32[b"b/q e"], f32[b"*v n+1"], f32[b"#n n"]):
            with pytest.raises(TypeCheckError):
                ct(value, annotation)


# ---------------------------------------------------------------------------------------------
# Annotations that are variables of an enclosing function; check_type from a plain function.


def _checked_with_closure_annotation(annotation):
    @typechecked
    def inner(x: annotation) -> annotation:
        return x

    return inner


def _checked_with_closure_annotation_and_local(annotation):
    @typechecked
    def inner(x: annotation) -> annotation:
        y: annotation = x
        return y

    return inner


def _plain_with_closure_annotation(annotation):
    @typeguard.typechecked
    def inner(x: annotation) -> annotation:
        return x

    return inner


@pytest.mark.parametrize(
    "make",
    [_plain_with_closure_annotation, _checked_with_closure_annotation, _checked_with_closure_annotation_and_local],
)
def test_closure_annotations_are_checked(make):
    f = make(f32[b"b e f"])
    assert f(npz(2, 3, 4)).shape == (2, 3, 4)
    with pytest.raises(TypeCheckError, match="has 2 dims"):
        f(npz(2, 3))


_PEP563_SOURCE = """
from __future__ import annotations
import typeguard
from shardtypes import typechecked

def make(annotation):
    @typechecked
    def inner(x: annotation) -> annotation:
        return x
    return inner

def make_plain(annotation):
    @typeguard.typechecked
    def inner(x: annotation) -> annotation:
        return x
    return inner
"""


@pytest.fixture
def pep563_module(tmp_path, monkeypatch):
    name = "shardtypes_test_pep563_closure"
    (tmp_path / f"{name}.py").write_text(_PEP563_SOURCE)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, name, raising=False)
    module = importlib.import_module(name)
    yield module
    sys.modules.pop(name, None)


def test_closure_annotation_with_postponed_evaluation_plain_typeguard(pep563_module):
    f = pep563_module.make_plain(f32[b"b e f"])
    with pytest.raises(TypeCheckError, match="has 2 dims"):
        f(npz(2, 3))


def test_closure_annotation_with_postponed_evaluation_typechecked(pep563_module):
    f = pep563_module.make(f32[b"b e f"])
    with pytest.raises(TypeCheckError, match="has 2 dims"):
        f(npz(2, 3))


def test_check_type_calls_in_one_plain_function_do_not_share_a_table():
    for n in (3, 4):
        check_type(npz(n), f32[b"n"])
    check_type(npz(5), f32[b"n"])


def test_misspelt_mesh_axis_suggests_the_close_one():
    mesh = make_mesh("explicit", (4, 2), ("data", "model"))
    x = put(mesh, jnp.ones((8, 16)), None, "model")
    with pytest.raises(TypeCheckError, match=re.escape(
        "mesh axis 'modle' is not in the array's mesh, which has axes ('data', 'model'); "
        "did you mean 'model'?"
    )):
        typeguard.check_type(x, f32[b"embed hidden/modle"])


def test_prng_keys_are_anydtype_and_nothing_else():
    key = jax.random.key(0)
    typeguard.check_type(key, anydtype[b""])
    with pytest.raises(TypeCheckError, match=re.escape("has dtype key<fry>, the annotation wants float32")):
        typeguard.check_type(key, f32[b""])
    with pytest.raises(TypeCheckError, match=re.escape("has dtype key<fry>, the annotation wants any floating dtype")):
        typeguard.check_type(key, floating[b""])


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


def test_python_scalars_are_rank_0_host_data_of_their_kind():
    """A Python scalar is weakly typed, as in JAX: it passes a rank-0 annotation of its kind."""
    ct(1.0, f32[b""])
    ct(1.0, floating[b""])
    ct(3, i32[b""])
    ct(True, shardtypes.bool_[b""])
    with pytest.raises(TypeCheckError, match=r"has 0 dims \[\] but the annotation has 2 \(found float\)"):
        center(1.0)
    for value, kind in ((3, "int32"), (True, "bool"), (1j, "complex64")):
        with pytest.raises(TypeCheckError, match=f"has dtype {kind}, the annotation wants float32"):
            ct(value, f32[b""])
    with pytest.raises(TypeCheckError, match="has dtype float32, the annotation wants any integer dtype"):
        ct(1.0, integer[b""])


# --- issue 19: silent accepts and private names ------------------------------------------------


@pytest.mark.parametrize("shape", [(-2, 3), (2, -1)])
def test_a_shape_dtype_struct_with_a_negative_dim_is_refused(shape):
    """Issue 19, item 6: a ShapeDtypeStruct JAX lets one build with a negative dim passed."""
    bad = S(shape, jnp.float32)
    with pytest.raises(TypeCheckError, match=r"check\(\): value is not f32\[b'a b'\]: is a ShapeDtypeStruct of shape .*, whose dim \d is negative"):
        shardtypes.check(f32, "a b", bad)
    with pytest.raises(TypeCheckError, match="whose dim . is negative"):
        shardtypes.check(f32, "...", bad)

    @typechecked
    def f(x: f32[b"a b"]) -> int:
        return 1

    with pytest.raises(TypeCheckError, match=r'argument "x" \(jax.ShapeDtypeStruct\) of .*f\(\) is not f32'):
        f(bad)
    assert not isinstance(bad, f32[b"a b"])
    assert f(S((0, 3), jnp.float32)) == 1  # a size of 0 is a size


@pytest.mark.parametrize("abstract", [np.number, np.inexact, np.signedinteger, np.unsignedinteger,
                                      np.complexfloating, np.character])
def test_an_abstract_numpy_type_no_category_means_is_refused_as_check_dtype(abstract):
    """Issue 19, item 6: np.number was read as anydtype (so bool passed), np.inexact as floating."""
    with pytest.raises(TypeError, match=rf"check\(\): dtype numpy.{abstract.__name__} is an abstract numpy type"):
        shardtypes.check(abstract, "a", jnp.zeros(3, jnp.bool_))


def test_the_abstract_numpy_types_a_category_means_stay_that_category():
    shardtypes.check(np.floating, "a", jnp.zeros(3, jnp.bfloat16))
    shardtypes.check(np.integer, "a", jnp.zeros(3, jnp.uint8))
    with pytest.raises(TypeCheckError, match="has dtype int32, the annotation wants any floating"):
        shardtypes.check(np.floating, "a", jnp.zeros(3, jnp.int32))


@typechecked
def _pair(x: f32[b"a"]) -> tuple[f32[b"a"], f32[b"a"]]:
    return x  # not a tuple


@pytest.mark.parametrize("jit", [False, True])
def test_a_failed_tuple_return_names_the_function_and_public_classes(jit):
    """Issue 19, item 2: 'the return value (jaxlib._jax.ArrayImpl) is not a tuple', no function."""
    call = jax.jit(_pair) if jit else _pair
    found = "traced jax.Array" if jit else "jax.Array"
    with pytest.raises(TypeCheckError) as info:
        call(jnp.zeros(3))
    assert str(info.value) == f"the return value ({found}) of _pair() is not a tuple"
    assert type(info.value) is TypeCheckError


def test_the_array_error_typeguard_raises_has_a_public_name():
    """Issue 19, item 2: tracebacks, pytest and type(e).__name__ said _ArrayError."""
    import traceback

    with pytest.raises(shardtypes.ArrayError) as info:
        check_type(jnp.zeros((2, 3)), f32[b"a"])
    error = info.value
    assert type(error).__name__ == "ArrayError" and isinstance(error, TypeCheckError)
    shown = "".join(traceback.format_exception_only(type(error), error))
    assert shown.startswith("shardtypes.ArrayError: jax.Array is not f32[b'a']: has 2 dims"), shown
