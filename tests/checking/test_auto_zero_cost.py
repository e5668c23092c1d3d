"""The compile-time check on Auto mesh axes (issue 18): no per-call cost, nothing dropped, errors
that read like shardtypes'.

* a cached call of a jitted checked function, and of a jitted ``typed_shard_map`` kernel, enters
  no Python frame (jit's C++ fast path), and the compiled HLO is the unchecked function's;
* a wrong layout is caught under every transformation (grad, vmap, jvp, hessian, checkpoint,
  scan, cond, custom_vjp, nested jit, a checked layer in ``lax.scan`` under ``grad``, a value only
  the backward pass uses), as a ``TypeCheckError`` whose first line is the message;
* where the self-test fails, the effectful fallback warns and still catches;
* bad input gets clear errors, and nothing cached answers for a later call.
"""

import importlib
import os
import re
import sys
import traceback
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

import shardtypes
from shardtypes import ShardtypesWarning, TypeCheckError, f32, typechecked, typed_shard_map

# The module under test's private switch: only the fallback test and the self-test's own tests
# reach into it (they must break the mechanism on purpose).
_primitive = importlib.import_module("shardtypes.checking.sharding_primitive")

FIRST_LINE = "shardtypes (compile-time check): "


@pytest.fixture(scope="module")
def mesh():
    """Auto axes, as ``jax.sharding.Mesh`` (what most JAX code uses) makes them."""
    return Mesh(np.array(jax.devices()[:8]).reshape(4, 2), ("d", "t"))


def put(mesh, array, *spec):
    return jax.device_put(array, NamedSharding(mesh, P(*spec)))


def ones(*shape):
    return jnp.ones(shape, jnp.float32)


def python_calls(fn, *args, allow_jax=False) -> int:
    """Python frames entered by one cached call of ``fn`` (0 on jit's C++ fast path);
    ``allow_jax``: frames of JAX's own mesh comparisons are counted, not refused."""
    jax.block_until_ready(fn(*args))
    jax.block_until_ready(fn(*args))
    calls = []
    sys.setprofile(lambda frame, event, arg: calls.append((frame.f_code.co_name, frame.f_code.co_filename, frame.f_lineno)) if event == "call" else None)  # noqa: E501
    try:
        fn(*args)
    finally:
        sys.setprofile(None)
    if allow_jax:
        assert all(name == "__eq__" and "mesh" in file for name, file, _ in calls), calls[:8]
    else:
        assert not calls, calls[:8]
    return len(calls)


def program(jitted, *args) -> str:
    """The compiled HLO without what names or locates it."""
    text = jitted.lower(*args).compile().as_text()
    text = re.sub(r"^HloModule \S+", "HloModule", text, flags=re.M)
    text = re.sub(r",? ?metadata=\{[^}]*\}", "", text)
    return text.split("\nFileNames")[0]


def first_line(info) -> str:
    # (jax.jit(f)(x) raises TypeCheckError itself; an AOT .lower().compile(), which JAX's
    # traceback filtering does not pass through, a subclass shown by the same name)
    assert issubclass(info.type, TypeCheckError), info.type
    assert f"{info.type.__module__}.{info.type.__qualname__}" == "typeguard.TypeCheckError", info.type
    line = str(info.value).splitlines()[0]
    assert line.startswith(FIRST_LINE), line
    return line


# ---------------------------------------------------------------------------------------------
# No per-call cost.


def scale(x):
    return x * 2.0 + 1.0


@typechecked
def checked_scale(x: f32[b"batch/d embed/t"]) -> f32[b"batch/d embed/t"]:
    return x * 2.0 + 1.0


def test_cached_checked_call_enters_no_python_frame(mesh):
    x = put(mesh, ones(8, 16), "d", "t")
    with jax.set_mesh(mesh):
        checked = jax.jit(checked_scale)
        assert python_calls(checked, x) == 0
        assert python_calls(jax.jit(scale), x) == 0


def test_cached_call_without_set_mesh_enters_no_python_frame_of_ours(mesh):
    """Without ``jax.set_mesh``, JAX 0.9 itself may compare the abstract mesh in Python (one
    ``AbstractMesh.__eq__``) in a cached call, checked or not: the check adds nothing to that."""
    x = put(mesh, ones(8, 16), "d", "t")
    unchecked = python_calls(jax.jit(scale), x, allow_jax=True)
    assert python_calls(jax.jit(checked_scale), x, allow_jax=True) == unchecked


def test_cached_typed_shard_map_kernel_enters_no_python_frame(mesh):
    @typed_shard_map
    def kernel(x: f32[b"batch/d embed/t"], y: f32[b"batch/d embed/t"]) -> f32[b"batch/d embed/t"]:
        return x * y

    x = put(mesh, ones(8, 16), "d", "t")
    with jax.set_mesh(mesh):
        assert python_calls(jax.jit(kernel), x, x) == 0


def test_compiled_program_is_the_unchecked_one(mesh):
    x = put(mesh, ones(8, 16), "d", "t")
    with jax.set_mesh(mesh):
        assert program(jax.jit(checked_scale), x) == program(jax.jit(scale), x)


def test_the_check_ran(mesh):
    """The fast path is not bought by skipping the check: the same jit, given a wrong layout,
    compiles again and fails."""
    jitted = jax.jit(checked_scale)
    with jax.set_mesh(mesh):
        jitted(put(mesh, ones(8, 16), "d", "t"))
        with pytest.raises(TypeCheckError) as info:
            jitted(put(mesh, ones(8, 16), None, "d"))
    assert "sharding is P(None, 'd') but the annotation says P('d', 't')" in first_line(info)


# ---------------------------------------------------------------------------------------------
# Errors that read like shardtypes'.


def test_error_is_a_type_check_error_with_the_message_first_and_a_fix(mesh):
    with jax.set_mesh(mesh), pytest.raises(TypeCheckError) as info:
        jax.jit(checked_scale)(put(mesh, ones(8, 16), None, "d"))
    line = first_line(info)
    assert info.type is TypeCheckError
    assert line == (
        "shardtypes (compile-time check): argument \"x\" of checked_scale(), annotated "
        "f32[b'batch/d embed/t']: sharding is P(None, 'd') but the annotation says P('d', 't') "
        "(the sharding XLA chose under jax.jit on Auto mesh axes). Fix: lay the value out as "
        "annotated, with shardtypes.shard(value, annotation) or "
        "jax.lax.with_sharding_constraint(value, P('d', 't')), or set "
        "shardtypes.config.auto_sharding_check = 'off'"
    )
    # JAX's wrapper is not shown (it would repeat the message after a C++ traceback).
    assert info.value.__cause__ is None and info.value.__suppress_context__


@jax.jit
def _calls_twice(x):
    y = checked_scale(x)
    y = jax.lax.with_sharding_constraint(y, P(None, "d"))
    return checked_scale(y)  # the second call: its argument is laid out otherwise


def test_the_error_says_which_call_and_its_traceback_ends_in_the_users_code(mesh):
    with jax.set_mesh(mesh), pytest.raises(TypeCheckError) as info:
        _calls_twice(put(mesh, ones(8, 16), "d", "t"))
    assert "(at test_auto_zero_cost.py:" in first_line(info)
    assert "in _calls_twice(): " in first_line(info)
    assert "y = checked_scale(x)" in first_line(info) or "return checked_scale(y)" in first_line(info)
    shown = traceback.extract_tb(info.value.__traceback__)
    assert shown[-1].name == "test_the_error_says_which_call_and_its_traceback_ends_in_the_users_code"
    hidden = [f for f in shown if os.sep + "shardtypes" + os.sep in f.filename or "monitoring" in f.filename]
    assert hidden == []
    with jax.set_mesh(mesh), pytest.raises(TypeCheckError) as info:
        shardtypes.config.traceback_filtering = "off"
        try:
            _calls_twice(put(mesh, ones(8, 4 * 16), "d", "t"))  # (a new shape: compiled again)
        finally:
            shardtypes.config.traceback_filtering = "on"
    assert any("monitoring" in f.filename for f in traceback.extract_tb(info.value.__traceback__))


def test_aot_compile_raises_the_same_error(mesh):
    x = put(mesh, ones(8, 16), None, "d")
    with pytest.raises(TypeCheckError) as info:
        jax.jit(checked_scale).lower(x).compile()
    assert 'argument "x" of checked_scale()' in first_line(info)


def test_a_failed_compile_is_not_cached(mesh):
    jitted = jax.jit(checked_scale)
    bad = put(mesh, ones(8, 16), None, "d")
    with jax.set_mesh(mesh):
        for _ in range(2):
            with pytest.raises(TypeCheckError):
                jitted(bad)


def test_fix_named_in_the_error_works(mesh):
    def fixed(x):
        x = jax.lax.with_sharding_constraint(x, NamedSharding(mesh, P("d", "t")))
        return checked_scale(x)

    with jax.set_mesh(mesh):
        jax.jit(fixed)(put(mesh, ones(8, 16), None, "d"))
        jax.jit(checked_scale)(shardtypes.shard(put(mesh, ones(8, 16), None, "d"),
                                                f32[b"batch/d embed/t"]))


# ---------------------------------------------------------------------------------------------
# Nothing silently dropped: a wrong layout is caught in every context.


@typechecked
def layer(h: f32[b"batch/d embed"]) -> f32[b"batch/d embed"]:
    return jnp.tanh(h)


def wrong(mesh, h):
    """``h`` laid out over 'd' on its second dim, against the annotation's first."""
    return jax.lax.with_sharding_constraint(h, NamedSharding(mesh, P(None, "d")))


def right(mesh, h):
    return jax.lax.with_sharding_constraint(h, NamedSharding(mesh, P("d", None)))


def contexts(mesh, lay):
    L = lambda h: layer(lay(mesh, h))  # noqa: E731

    @jax.custom_vjp
    def cv(h):
        return L(h)

    cv.defvjp(lambda h: (L(h), None), lambda r, g: (g,))

    @jax.custom_vjp
    def backward_only(h):
        return h * 2.0

    def bo_fwd(h):
        return h * 2.0, None

    def bo_bwd(_, g):
        return (L(g),)  # only the backward pass computes (and checks) this value

    backward_only.defvjp(bo_fwd, bo_bwd)
    nested = jax.jit(L)

    def scan_body(c, _):
        return L(c) * 0.5, None

    return {
        "jit": lambda x: L(x),
        "grad": jax.grad(lambda x: L(x).sum()),
        "vmap": lambda x: jax.vmap(L)(jnp.stack([x, x])),
        "jvp": lambda x: jax.jvp(L, (x,), (x,))[1],
        "hessian": lambda x: jax.jvp(jax.grad(lambda h: L(h).sum()), (x,), (x,))[1],
        "checkpoint": jax.grad(lambda x: jax.checkpoint(L)(x).sum()),
        "scan": lambda x: jax.lax.scan(scan_body, x, None, length=2)[0],
        "cond": lambda x: jax.lax.cond(x[0, 0] > 0, L, lambda h: h * 2.0, x),
        "custom_vjp": jax.grad(lambda x: cv(x).sum()),
        "nested jit": jax.grad(lambda x: nested(x).sum()),
        "scan under grad": jax.grad(lambda x: jax.lax.scan(scan_body, x, None, length=3)[0].sum()),
        "checkpointed scan under grad": jax.grad(
            lambda x: jax.lax.scan(jax.checkpoint(scan_body), x, None, length=3)[0].sum()),
        "backward pass only": jax.grad(lambda x: backward_only(x).sum()),
    }


CONTEXTS = list(contexts(None, None))


@pytest.mark.parametrize("name", CONTEXTS)
def test_wrong_layout_caught(mesh, name):
    fn = contexts(mesh, wrong)[name]
    x = put(mesh, ones(8, 16), "d")
    with jax.set_mesh(mesh), pytest.raises(TypeCheckError) as info:
        jax.block_until_ready(jax.jit(fn)(x))
    assert "but the annotation says P('d', None)" in first_line(info)


@pytest.mark.parametrize("name", CONTEXTS)
def test_right_layout_passes_on_the_fast_path(mesh, name):
    fn = jax.jit(contexts(mesh, right)[name])
    x = put(mesh, ones(8, 16), "d")
    with jax.set_mesh(mesh):
        assert python_calls(fn, x) == 0


def test_vmap_dims_are_not_the_annotations(mesh):
    """Under vmap the check sees vmap's dim where it is, not at the front."""
    x = put(mesh, ones(16, 8), None, "d")  # vmapped over dim 0: each example is P('d')

    @typechecked
    def row(v: f32[b"e/d"]) -> f32[b"e/d"]:
        return v + 1.0

    with jax.set_mesh(mesh):
        assert python_calls(jax.jit(jax.vmap(row)), x) == 0
        with pytest.raises(TypeCheckError) as info:
            jax.jit(jax.vmap(row, in_axes=1))(x)  # each example unsharded
    assert "annotation says P('d',)" in first_line(info) or "annotation says P('d')" in first_line(info)


# ---------------------------------------------------------------------------------------------
# The self-test, and the fallback where it fails.


def test_self_test_passes_on_this_jax():
    assert _primitive.self_test() is None
    assert _primitive.primitive_available()


@pytest.mark.parametrize("rule", ["dce", "partial_eval"])
def test_self_test_notices_a_missing_rule(monkeypatch, rule):
    from jax.interpreters import partial_eval as pe

    table = pe.dce_rules if rule == "dce" else pe.custom_partial_eval_rules
    monkeypatch.delitem(table, _primitive.check_sharding_p)
    assert "dropped" in _primitive.self_test()


@pytest.fixture
def broken_self_test(monkeypatch):
    """The primitive's self-test fails, as it would on a JAX whose internals changed."""
    monkeypatch.setattr(_primitive, "self_test", lambda: "forced by the test")
    _primitive.forget_self_test()
    jax.clear_caches()  # earlier traces hold the primitive
    yield
    _primitive.forget_self_test()  # the next use runs the real self-test again
    jax.clear_caches()


def test_fallback_warns_and_still_catches(mesh, broken_self_test):
    @typechecked
    def fallback_scale(x: f32[b"batch/d embed"]) -> f32[b"batch/d embed"]:
        return x * 3.0

    with jax.set_mesh(mesh):
        with pytest.warns(ShardtypesWarning, match=rf"with JAX {re.escape(jax.__version__)} \(forced by the test\); it falls back to jax.debug.inspect_array_sharding"):
            with pytest.raises(TypeCheckError) as info:
                jax.jit(fallback_scale)(put(mesh, ones(8, 16), None, "d"))
        assert "annotation says P('d', None)" in first_line(info)
        # Under grad too, and with no second warning.
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            with pytest.raises(TypeCheckError):
                jax.jit(jax.grad(lambda x: fallback_scale(x).sum()))(put(mesh, ones(8, 16), None, "d"))
            assert jax.jit(fallback_scale)(put(mesh, ones(8, 16), "d")).shape == (8, 16)


# ---------------------------------------------------------------------------------------------
# Bad input.


@pytest.mark.parametrize("value", ["sometimes", None, "Compile", 1, True])
def test_unknown_auto_sharding_check_value(value):
    with pytest.raises(ValueError, match=r"auto_sharding_check must be one of \('compile', 'off'\)"):
        shardtypes.config.auto_sharding_check = value
    assert shardtypes.config.auto_sharding_check == "compile"


def test_annotation_with_no_mesh_axes_is_checked_as_replicated(mesh):
    @typechecked
    def replicated(x: f32[b"batch embed"]) -> f32[b"batch embed"]:
        return x

    with jax.set_mesh(mesh):
        assert jax.jit(replicated)(put(mesh, ones(8, 16))).shape == (8, 16)
        with pytest.raises(TypeCheckError) as info:
            jax.jit(replicated)(put(mesh, ones(8, 16), "d"))
    assert "sharding is P('d', None) but the annotation says P(None, None)" in first_line(info)


def test_python_scalar_and_numpy_under_jit(mesh):
    @typechecked
    def takes(s: f32[b""], a: f32[b"n"]) -> f32[b"n"]:
        return a * s

    @typechecked
    def sharded_host(a: f32[b"n/d"]) -> f32[b"n/d"]:
        return a

    with jax.set_mesh(mesh):
        out = jax.jit(lambda: takes(2.0, np.ones(4, np.float32)))()
        assert out.shape == (4,)
        with pytest.raises(TypeCheckError, match="numpy"):
            jax.jit(lambda: sharded_host(np.ones(8, np.float32)))()
