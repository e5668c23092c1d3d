"""What the checker's tests (test_check.py, test_check_values.py, test_check_messages.py) share: small
array makers, ``ct`` (check_type in a frame of its own), the compile-time message reader, and the
checked functions most tests call. The functions are defined once, here, so that jax.jit caches
their traces and compilations across the three files, which keeps them fast.
"""

import jax
import jax.numpy as jnp
import numpy as np
import typeguard
from typeguard import check_type

from shardtypes import f32, i32, typechecked

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


@typechecked
def host(x: f32[b"b 4"]) -> f32[b"b 4"]:
    return x
