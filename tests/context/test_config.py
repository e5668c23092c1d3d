"""shardtypes.config: the switch that turns every check off, and its environment variable."""

import os
import subprocess
import sys
import textwrap
import typing

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import typeguard
from jax.sharding import PartitionSpec as P

import shardtypes
from shardtypes import (
    Scope,
    TypeCheckError,
    check,
    dims,
    f32,
    make_partition_specs,
    pytree_dataclass,
    typechecked,
    typed_shard_map,
    verify,
)

from conftest import make_mesh, put


@pytest.fixture
def checks_off():
    assert shardtypes.config.checks is True  # the default in the test run
    shardtypes.config.checks = False
    try:
        yield
    finally:
        shardtypes.config.checks = True


def bf16_array(*shape):
    return jnp.zeros(shape, jnp.bfloat16)


@typechecked
def double(x: f32[b"batch embed"]) -> f32[b"batch embed"]:
    return x * 2


@pytree_dataclass
class Weights:
    w: f32["embed hidden"]


def test_default_is_on_and_repr():
    assert shardtypes.config.checks is True
    assert repr(shardtypes.config) == ("shardtypes.Config(checks=True, auto_sharding_check='compile', "
                                       "traceback_filtering='on')")


def test_checked_function_off_then_on(checks_off):
    assert double(bf16_array(2, 3)).dtype == jnp.bfloat16  # off: not checked
    shardtypes.config.checks = True
    with pytest.raises(TypeCheckError, match='argument "x" .* of double\\(\\)'):
        double(bf16_array(2, 3))


def test_jit_cache_keeps_no_unchecked_trace(checks_off):
    f = jax.jit(double)
    wrong = bf16_array(2, 3)
    f(wrong)  # traced with checks off
    shardtypes.config.checks = True
    with pytest.raises(TypeCheckError, match="has dtype bfloat16"):
        f(wrong)  # traced again: the switch is part of jit's cache key


def test_off_dims_come_from_the_arguments_when_read(checks_off):
    # The seed's idiom (a body reads dims()) runs the same with checks off: the sizes are worked
    # out from the call's arguments when dims() is read, and nothing is compared.
    seen = {}

    @typechecked
    def f(x: f32[b"batch embed"]) -> f32[b"batch embed"]:
        seen.update(dims())
        return x

    f(jnp.zeros((2, 3)))
    assert seen == {"batch": 2, "embed": 3}
    seen.clear()
    f(bf16_array(2, 3))  # a wrong dtype binds its sizes all the same: nothing is checked
    assert seen == {"batch": 2, "embed": 3}
    seen.clear()
    f(jnp.zeros((4,)))  # a wrong rank binds nothing, and does not raise
    assert seen == {}
    with Scope(batch=2, other=5):  # what Scope binds stays visible beside the arguments' sizes
        f(jnp.zeros((2, 3)))
    assert seen == {"batch": 2, "embed": 3, "other": 5}
    assert dict(dims()) == {}  # outside any call


def test_off_dims_of_nested_calls_jit_and_locals(checks_off):
    seen = []

    @typechecked
    def inner(h: f32[b"batch hidden"]) -> f32[b"batch hidden"]:
        seen.append(("inner", dict(dims())))
        return h

    @typechecked
    def outer(x: f32[b"batch embed"], w: f32[b"embed hidden"]) -> f32[b"batch hidden"]:
        local: f32[b"batch hidden"] = inner(x @ w)  # (annotated locals: typeguard's instrumentation)
        seen.append(("outer", dict(dims())))
        return local

    x, w = jnp.ones((2, 3)), jnp.ones((3, 5))
    outer(x, w)
    jax.jit(outer)(x, w)
    want = [("inner", {"batch": 2, "embed": 3, "hidden": 5}), ("outer", {"batch": 2, "embed": 3, "hidden": 5})]
    assert seen == want + want


def test_off_an_unbound_name_says_the_checks_are_off(checks_off):
    @typechecked
    def f(x: f32[b"batch embed"]) -> f32[b"batch embed"]:
        return x * dims()["seq"]

    with pytest.raises(KeyError) as info:
        f(jnp.zeros((2, 3)))
    message = info.value.args[0]
    assert message.startswith("dims()['seq']: no size is bound to 'seq' here, and shardtypes' checks are off")
    assert "SHARDTYPES_DISABLE=1" in message and "bound here: ['batch', 'embed']" in message
    with pytest.raises(KeyError, match="checks are off"):
        dims()["batch"]  # outside any call: nothing bound, and the message says why


def test_off_reading_dims_leaves_the_program_as_traced(checks_off):
    # Working the sizes out runs the checks once, quietly: nothing is added to the traced program
    # (no compile-time check of Auto axes), no warning, and a mismatch raises nothing.
    mesh = make_mesh("auto")

    @typechecked
    def f(x: f32[b"batch/t embed"]) -> f32[b"batch/t embed"]:
        return x * dims()["embed"]

    def bare(x):
        return x * x.shape[1]

    x = put(mesh, jnp.ones((8, 4)), "d")  # laid out over d, annotated over t: not compared
    with jax.set_mesh(mesh):
        assert str(jax.make_jaxpr(f)(x)) == str(jax.make_jaxpr(bare)(x))
        np.testing.assert_array_equal(np.asarray(jax.jit(f)(x)), np.full((8, 4), 4.0))


def test_off_typed_ops_bind_what_they_name(checks_off):
    mesh = make_mesh("explicit")

    @typed_shard_map
    def kernel(q: f32[b"batch/d seq head"], k: f32[b"batch/d kseq head"]) -> f32[b"batch/d seq kseq"]:
        scores = shardtypes.ops.einsum_unreduced("batch/d seq head, batch/d kseq head -> batch/d seq kseq", q, k)
        return scores * (dims()["seq"] + dims()["kseq"])

    q, k = put(mesh, jnp.ones((8, 3, 2)), "d"), put(mesh, jnp.ones((8, 5, 2)), "d")
    with jax.set_mesh(mesh):
        out = kernel(q, k)
    np.testing.assert_array_equal(np.asarray(out), np.full((8, 3, 5), 2.0 * 8))


def test_off_dims_in_generators_is_the_clear_error(checks_off):
    @typechecked
    def gen(x: f32[b"a"]) -> typing.Iterator[int]:
        yield dims()["a"]

    with pytest.raises(KeyError, match="checks are off"):
        next(gen(jnp.zeros(3)))


def test_instrumented_generator_and_async_off(checks_off):
    @typechecked
    def with_local(x: f32[b"a"]) -> f32[b"a"]:
        y: f32[b"a b"] = x  # wrong rank: caught only when checks are on
        return y

    @typechecked
    def gen(x: f32[b"a"]) -> typing.Iterator[f32[b"a"]]:
        yield x

    @typechecked
    async def coro(x: f32[b"a"]) -> f32[b"a"]:
        return x

    import asyncio

    wrong = bf16_array(3)
    with_local(wrong)
    assert list(gen(wrong))[0].dtype == jnp.bfloat16
    asyncio.run(coro(wrong))
    shardtypes.config.checks = True
    for call in (lambda: with_local(jnp.zeros(3)), lambda: list(gen(wrong)), lambda: asyncio.run(coro(wrong))):
        with pytest.raises(TypeCheckError):
            call()


def test_plain_typeguard_off_still_checks_other_types(checks_off):
    typeguard.check_type(bf16_array(3), f32[b"a"])
    typeguard.check_type(Weights(bf16_array(2, 3)), Weights)
    # typeguard's own checks of the rest of a container still run
    with pytest.raises(TypeCheckError, match="is not an instance of int"):
        typeguard.check_type((bf16_array(3), "x"), tuple[f32[b"a"], int])
    shardtypes.config.checks = True
    with pytest.raises(TypeCheckError, match="has dtype bfloat16"):
        typeguard.check_type(bf16_array(3), f32[b"a"])


def test_check_function_off(checks_off):
    check(f32, "a b", bf16_array(3))
    shardtypes.config.checks = True
    with pytest.raises(TypeCheckError, match="check\\(\\)"):
        check(f32, "a b", bf16_array(3))


def test_derivation_and_shard_map_work_off(checks_off):
    assert make_partition_specs(f32[b"batch/d embed/t"]) == P("d", "t")
    mesh = make_mesh("explicit")

    @typed_shard_map
    def local_sum(x: f32[b"batch/d embed"]) -> f32[b"batch/d embed"]:
        return x + 1

    with jax.set_mesh(mesh):
        out = local_sum(put(mesh, jnp.zeros((8, 4)), "d"))
    assert out.sharding.spec == P("d", None)
    np.testing.assert_array_equal(np.asarray(out), np.ones((8, 4)))


def test_verify_checks_whatever_the_switch(checks_off):
    def step(x: f32[b"batch/d embed"]) -> f32[b"batch/d embed/t"]:
        return x

    report = verify(step, {"d": 4, "t": 2}, dims={"batch": 8, "embed": 4})
    assert not report.ok
    assert "the return value" in str(report)


def test_invalid_values():
    with pytest.raises(TypeError, match="shardtypes.config.checks must be True or False, got 0"):
        shardtypes.config.checks = 0
    with pytest.raises(ValueError, match="auto_sharding_check must be one of"):
        shardtypes.config.auto_sharding_check = None
    with pytest.raises(AttributeError):
        shardtypes.config.check = False  # a typo is not silently a new setting
    assert shardtypes.config.checks is True


def _run(code: str, value: str | None) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env.pop("SHARDTYPES_DISABLE", None)
    if value is not None:
        env["SHARDTYPES_DISABLE"] = value
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env,
                          capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("value, on", [("1", False), ("true", False), ("0", True), ("", True), (None, True)])
def test_environment_variable(value, on):
    code = """
        import jax.numpy as jnp, shardtypes
        from shardtypes import f32, typechecked
        @typechecked
        def f(x: f32[b'a']) -> f32[b'a']:
            return x
        try:
            f(jnp.zeros(3, jnp.bfloat16))
            print('passed', shardtypes.config.checks)
        except shardtypes.TypeCheckError:
            print('rejected', shardtypes.config.checks)
    """
    result = _run(code, value)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == (["rejected", "True"] if on else ["passed", "False"])


def test_environment_variable_not_understood():
    result = _run("import shardtypes", "maybe")
    assert result.returncode != 0
    assert "SHARDTYPES_DISABLE='maybe' is not understood; use 1 (checks off) or 0 (checks on)" in result.stderr


def test_off_typed_ops_compare_nothing(checks_off):
    # An operand laid out otherwise than its spec says is refused with checks on; off, the op
    # computes (JAX's own checks still run).
    mesh = make_mesh("explicit")

    @typed_shard_map
    def kernel(x: f32[b"batch/d embed"]) -> f32[b"batch/d"]:
        return shardtypes.ops.einsum_unreduced("batch/d embed/t, embed/t -> batch/d", x, jnp.ones((4,)))

    x = put(mesh, jnp.ones((8, 4)), "d")
    with jax.set_mesh(mesh):
        np.testing.assert_array_equal(np.asarray(kernel(x)), np.full((8,), 4.0))
        shardtypes.config.checks = True
        with pytest.raises(TypeCheckError, match="operand 0 .* is laid out P\\('d', None\\)"):
            kernel(x)


def test_off_nnx_check_is_off_too(checks_off):
    nnx = pytest.importorskip("flax.nnx")

    class Model(nnx.Module):
        w: f32[jax.Array, b"embed hidden"]

        def __init__(self):
            self.w = nnx.Param(jnp.zeros((3, 4), jnp.bfloat16))

    shardtypes.nnx.check(Model(), nnx.Param)  # a wrong dtype, not checked
    shardtypes.config.checks = True
    with pytest.raises(TypeCheckError, match="shardtypes.nnx.check: Model.w"):
        shardtypes.nnx.check(Model(), nnx.Param)


def test_off_a_jitted_call_inside_an_eager_one_sees_only_its_own_sizes(checks_off):
    # As with checks on: jit's cache does not key on the eager caller's sizes, so the outermost
    # traced call does not see them (its own arguments' sizes it does).
    @typechecked
    def inner(h: f32[b"batch hidden"]) -> f32[b"batch hidden"]:
        assert dims()["hidden"] == 5
        return h * dims()["embed"]

    @typechecked
    def outer(x: f32[b"batch embed"], w: f32[b"embed hidden"]) -> f32[b"batch hidden"]:
        return jax.jit(inner)(x @ w)

    with pytest.raises(KeyError, match=r"dims\(\)\['embed'\]: no size is bound to 'embed' here, and shardtypes' "
                                       r"checks are off .* bound here: \['batch', 'hidden'\]"):
        outer(jnp.ones((2, 3)), jnp.ones((3, 5)))


def test_off_the_innermost_call_wins_and_ops_alone_bind_too(checks_off):
    seen = []

    @typechecked
    def inner(y: f32[b"n"]) -> f32[b"n"]:
        seen.append(("inner", dims()["n"]))
        return y

    @typechecked
    def outer(x: f32[b"n"]) -> f32[b"n"]:
        inner(jnp.ones(5))  # another size for 'n': with checks off nothing is compared
        seen.append(("outer", dims()["n"]))
        return x

    outer(jnp.ones(3))
    assert seen == [("inner", 5), ("outer", 3)]

    mesh = make_mesh("explicit")

    @typed_shard_map
    def kernel(q: f32[b"batch/d seq h"], k: f32[b"batch/d kseq h"]) -> f32[b"batch/d seq kseq"]:
        # 'head' is named by the op's spec alone: only the op binds it
        scores = shardtypes.ops.einsum_unreduced("batch/d seq head, batch/d kseq head -> batch/d seq kseq", q, k)
        return scores * dims()["head"]

    q, k = put(mesh, jnp.ones((8, 3, 2)), "d"), put(mesh, jnp.ones((8, 5, 2)), "d")
    with jax.set_mesh(mesh):
        np.testing.assert_array_equal(np.asarray(kernel(q, k)), np.full((8, 3, 5), 2.0 * 2))


def test_off_dims_in_a_coroutine_is_the_clear_error_and_sizing_warns_nothing(checks_off):
    import asyncio
    import warnings

    @typechecked
    async def coro(x: f32[b"a"]) -> int:
        return dims()["a"]

    with pytest.raises(KeyError, match="checks are off"):
        asyncio.run(coro(jnp.zeros(3)))

    @typechecked
    def f(x: f32[b"batch/t embed"]) -> f32[b"batch/t embed"]:  # laid out otherwise: not compared
        return x * dims()["embed"]

    mesh = make_mesh("auto")
    with warnings.catch_warnings(), jax.set_mesh(mesh):
        warnings.simplefilter("error")  # working the sizes out says nothing: the checks are off
        np.testing.assert_array_equal(np.asarray(f(put(mesh, jnp.ones((8, 4)), "d"))), np.full((8, 4), 4.0))
