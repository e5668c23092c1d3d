"""Tracing as cheap as unchecked code, and jit's cache never changing a verdict
(context.tables: ``trace_key`` and ``staged_read``).

Every outermost checked call that JAX stages out runs its body under one jit key, shared by all
such calls, so a jitted function that reads no dimension table (jax.numpy's ``mean``, a user's
helper) is traced once, not once per call. Once a trace JAX may cache reads the table there (a
jitted, scanned or checkpointed checked function, ``check``, ``dims()``, ``isinstance``), the key
is stale and the next outermost call gets a new one: each way of reading the table below is run
twice with the same shapes and another table, and must give the second call's verdict.
"""

import jax
import jax.numpy as jnp
import pytest
from typeguard import TypeCheckError

from shardtypes import check, dims, f32, typechecked


def _counting_helper():
    """A jitted helper that reads no table, and the list its traces are counted in."""
    traces = []

    @jax.jit
    def helper(y):
        traces.append(1)
        return jnp.tanh(y) * 2

    return helper, traces


def test_a_helper_is_traced_once_for_many_outermost_checked_calls():
    """A 16-layer step: each layer is an outermost checked call (the step itself is unchecked),
    and calls a nested checked function directly; the jitted helper inside keeps one trace."""
    helper, traces = _counting_helper()

    @typechecked
    def norm(x: f32[b"batch embed"]) -> f32[b"batch embed"]:
        return x / (1 + jnp.abs(x))

    @typechecked
    def layer(x: f32[b"batch embed"], w: f32[b"embed embed"]) -> f32[b"batch embed"]:
        return norm(helper(x @ w))

    def step(ws, x):
        for w in ws:
            x = layer(x, w)
        return jnp.sum(x)

    ws = [jnp.eye(4)] * 16
    for _ in range(2):  # two traces of the step, each with 16 outermost checked calls
        jax.jit(jax.grad(step, argnums=1)).trace(ws, jnp.ones((2, 4)))
    assert len(traces) <= 2  # once inside the checked calls; at most once more outside them


def test_the_same_with_checks_inside_jax_grad_of_an_outermost_call():
    helper, traces = _counting_helper()

    @typechecked
    def layer(x: f32[b"batch embed"]) -> f32[b"batch embed"]:
        return helper(x)

    def loss(x):
        for _ in range(8):
            x = layer(x)
        return jnp.sum(x)

    jax.jit(jax.grad(loss)).trace(jnp.ones((2, 4)))
    jax.jit(jax.grad(loss)).trace(jnp.ones((2, 4)))
    assert len(traces) == 1


# Each way a cached trace can read the table: the first call passes (or gives one number), the
# second call has the same shapes inside and another table, and must be judged by its own.


@jax.jit
def _scaled_by_n(y):
    return y * dims()["n"]


@jax.jit
@typechecked
def _reads_dims(x: f32[b"n"], y: f32[b"m"]) -> f32[b"m"]:
    return _scaled_by_n(y)


def test_dims_read_in_a_jitted_helper_is_read_again_for_each_call():
    assert float(_reads_dims(jnp.zeros(3), jnp.ones(4))[0]) == 3.0
    assert float(_reads_dims(jnp.zeros(5), jnp.ones(4))[0]) == 5.0  # not the first trace's 3


@jax.jit
def _checks_against_n(y):
    check(f32, "n", y)
    return y


@jax.jit
@typechecked
def _inline_check(x: f32[b"n"], y: f32[b"m"]) -> f32[b"m"]:
    return _checks_against_n(y)


def test_an_inline_check_in_a_jitted_helper_is_made_again_for_each_call():
    _inline_check(jnp.zeros(4), jnp.zeros(4))
    with pytest.raises(TypeCheckError, match=r"dimension 'n' is 4 here .*bound to 3"):
        _inline_check(jnp.zeros(3), jnp.zeros(4))


@jax.jit
def _is_n_long(y):
    return y if isinstance(y, f32[b"n"]) else -y


@jax.jit
@typechecked
def _asks_isinstance(x: f32[b"n"], y: f32[b"m"]) -> f32[b"m"]:
    return _is_n_long(y)


def test_isinstance_in_a_jitted_helper_is_asked_again_for_each_call():
    assert float(_asks_isinstance(jnp.zeros(4), jnp.ones(4))[0]) == 1.0
    assert float(_asks_isinstance(jnp.zeros(3), jnp.ones(4))[0]) == -1.0


@typechecked
def _n_long(y: f32[b"n"]) -> f32[b"n"]:
    return y + 1


@jax.jit
@typechecked
def _checkpointed(x: f32[b"n"], y: f32[b"m"]) -> f32[b"m"]:
    return jax.checkpoint(_n_long)(y)


@jax.jit
@typechecked
def _scanned(x: f32[b"n"], ys: f32[b"k m"]) -> f32[b"m"]:
    def body(carry, y):
        return carry, _n_long(y)
    return jax.lax.scan(body, 0.0, ys)[1][0]


@pytest.mark.parametrize("call", [
    lambda n: _checkpointed(jnp.zeros(n), jnp.zeros(4)),
    lambda n: _scanned(jnp.zeros(n), jnp.zeros((2, 4))),
], ids=["checkpoint", "scan"])
def test_a_checked_function_under_a_transformation_is_checked_again_for_each_call(call):
    call(4)
    with pytest.raises(TypeCheckError, match=r"dimension 'n' is 4 here .*bound to 3 by argument \"x\""):
        call(3)
    call(4)


def test_after_a_stale_key_helpers_are_shared_again():
    """A call whose trace read the table through a jitted function costs the next call one new
    trace of each helper; calls after that share it again."""
    helper, traces = _counting_helper()

    def run(n):
        @typechecked
        def plain(x: f32[b"n"]) -> f32[b"n"]:  # a new function each time: jit traces it
            return helper(x)

        jax.jit(plain).trace(jnp.zeros(n))

    @jax.jit
    @typechecked
    def reads_dims(x: f32[b"n"], y: f32[b"m"]) -> f32[b"m"]:
        return _scaled_by_n(y)

    run(4)
    reads_dims(jnp.zeros(3), jnp.ones(4))  # reads the table inside a jitted helper
    before = len(traces)
    for _ in range(4):
        run(4)
    assert len(traces) == before + 1
