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
from conftest import make_mesh, put

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
from jax.sharding import PartitionSpec as P


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


def test_off_does_not_bind_dims(checks_off):
    seen = {}

    @typechecked
    def f(x: f32[b"batch embed"]) -> f32[b"batch embed"]:
        seen.update(dims())
        return x

    f(jnp.zeros((2, 3)))
    assert seen == {}
    with Scope(batch=2):  # what Scope binds stays visible
        f(jnp.zeros((2, 3)))
    assert seen == {"batch": 2}


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
