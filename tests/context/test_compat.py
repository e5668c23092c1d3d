"""shardtypes.context.compat: what differs between the supported JAX versions."""

from __future__ import annotations

import pathlib
import re
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

from shardtypes.context import OLDEST_JAX, JitKey, compat, jax_version

from conftest import make_mesh, put

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


# ---------------------------------------------------------------------------------------------
# The probe for jax.lax.all_gather(..., to='invarying'): decided by trying it, on every version


@pytest.fixture
def fresh_probe():
    """The probe's cached answer forgotten before and after the test."""
    compat.invariant_gather_native.cache_clear()
    yield compat.invariant_gather_native
    compat.invariant_gather_native.cache_clear()


def _gathers_to_invarying_on_a_real_mesh() -> bool:
    """What the probe must find, tried the way a kernel uses it: blocks of an array really split
    over 'd' (8 CPU devices), gathered inside shard_map."""
    mesh = make_mesh("explicit")
    x = put(mesh, jnp.arange(8.0), "d")
    gather = jax.shard_map(lambda b: jax.lax.all_gather(b, "d", tiled=True, to="invarying"),
                           mesh=mesh, in_specs=P("d"), out_specs=P())
    try:
        out = jax.jit(gather)(x)
    except ValueError as e:
        assert "`to`" in str(e), e
        return False
    np.testing.assert_array_equal(np.asarray(out), np.arange(8.0))
    return True


def test_the_probe_decides_on_this_jax_and_matches_what_a_kernel_sees(fresh_probe):
    with warnings.catch_warnings():
        warnings.simplefilter("error", compat.JaxFeatureWarning)
        native = fresh_probe()  # decided: a probe that could not tell would warn, an error here
    assert native is _gathers_to_invarying_on_a_real_mesh()


def test_the_probe_answers_the_same_under_a_mesh_and_inside_a_trace(fresh_probe):
    truth = _gathers_to_invarying_on_a_real_mesh()
    seen = []

    @jax.jit
    def traced(x):
        seen.append(fresh_probe())
        return x + 1

    with warnings.catch_warnings():
        warnings.simplefilter("error", compat.JaxFeatureWarning)
        with jax.set_mesh(make_mesh("explicit")):
            traced(jnp.ones(8))
    assert seen == [truth]


def test_a_jax_that_names_to_as_the_problem_has_no_native_gather(fresh_probe, monkeypatch):
    def old_all_gather(*args, to=None, **kwargs):  # what JAX 0.9 answers
        raise ValueError("Got unexpected `to` value for `jax.lax.all_gather`. "
                         "Allowed `to` values are: {'varying', 'reduced'}")

    monkeypatch.setattr(jax.lax, "all_gather", old_all_gather)
    with warnings.catch_warnings():
        warnings.simplefilter("error", compat.JaxFeatureWarning)
        assert fresh_probe() is False


@pytest.mark.parametrize("error", [ValueError("in_specs passed to shard_map: P('p',) does not match"),
                                   RuntimeError("something else")])
def test_a_probe_that_cannot_tell_warns_naming_the_jax_version(fresh_probe, monkeypatch, error):
    def failing(*args, **kwargs):
        raise error

    monkeypatch.setattr(jax.lax, "all_gather", failing)
    with pytest.warns(compat.JaxFeatureWarning, match=re.escape(f"on JAX {jax.__version__}")) as record:
        assert fresh_probe() is False  # the psum gather, which works on every JAX
    message = str(record[0].message)
    assert type(error).__name__ in message and str(error) in message
    with warnings.catch_warnings():
        warnings.simplefilter("error", compat.JaxFeatureWarning)
        assert fresh_probe() is False  # decided once: no second warning


def test_varying_axes_reads_whichever_field_the_aval_has():
    class New:
        class mat:
            varying = ("d",)

    class Old:
        vma = {"t"}

    assert compat.varying_axes(New()) == frozenset({"d"})
    assert compat.varying_axes(Old()) == frozenset({"t"})
    assert compat.varying_axes(jax.typeof(jnp.ones(2))) == frozenset()
