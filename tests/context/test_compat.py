"""shardtypes.context.compat: what differs between the supported JAX versions."""

from __future__ import annotations

import pathlib
import re

import jax
import jax.numpy as jnp

from shardtypes.context import OLDEST_JAX, JitKey, jax_version

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split("."))


def test_oldest_jax_is_what_pyproject_requires():
    pyproject = (ROOT / "pyproject.toml").read_text()
    required = re.search(r'"jax>=([0-9.]+)"', pyproject)
    assert required is not None, "pyproject.toml states no lower bound for jax"
    assert required.group(1) == OLDEST_JAX


def test_running_jax_is_supported():
    assert jax_version() >= _version(OLDEST_JAX)


def _traces(fn):
    """A jitted fn that counts its traces."""
    count = []

    @jax.jit
    def jitted(x):
        count.append(1)
        return fn(x)

    return jitted, count


def test_a_jit_key_in_a_block_is_part_of_the_cache_key():
    key = JitKey(default=None)
    f, traces = _traces(lambda x: x + 1)
    x = jnp.ones(3)
    f(x)
    with key("a"):
        f(x)
        f(x)
    with key("b"):
        f(x)
    with key("a"):
        f(x)
    f(x)
    assert len(traces) == 3  # None, "a", "b": each traced once, whatever came between


def test_set_global_retraces_and_setting_the_same_value_does_not():
    key = JitKey(default=0)
    f, traces = _traces(lambda x: x * 2)
    x = jnp.ones(3)
    try:
        f(x)
        key.set_global(0)      # unchanged: the cached trace stands
        f(x)
        assert len(traces) == 1
        key.set_global(1)      # changed: never the trace made under 0
        f(x)
        assert len(traces) == 2
        assert key.global_value == 1
    finally:
        key.set_global(0)
    f(x)
    assert key.global_value == 0
    assert 2 <= len(traces) <= 3  # back under 0: cached (JAX 0.10) or traced again (older JAX)
