"""verify's dims: a name that no check of the run uses is an error naming the nearest one
(issue 43, item 8); names read through dims() and names only nested checked calls use count."""

import re

import jax.numpy as jnp
import pytest

from shardtypes import dims, f32, typechecked, verify

MESH = {"d": 64, "t": 64}


def test_verify_takes_names_only_its_body_uses():
    """A name no annotation uses is fine where the body reads it with dims()."""

    @typechecked
    def reads_vocabulary(x: f32[b"batch/d embed"], w: f32[b"embed hidden"]) -> f32[b"batch/d hidden"]:
        return x @ w * dims()["vocabulary"]

    assert verify(reads_vocabulary, MESH, dims={"batch": 128, "embed": 128, "hidden": 256, "vocabulary": 3}).ok


@typechecked
def _inner_mlp(x: f32[b"batch embed"], w: f32[b"embed hidden"]) -> f32[b"batch hidden"]:
    return x @ w


@typechecked
def _outer_step(x: f32[b"batch d"], w: f32[b"d hidden"]) -> f32[b""]:
    return jnp.sum(_inner_mlp(x, w))


def test_verify_refuses_a_name_no_check_of_the_step_uses():
    """Names used by the checked calls a step makes count (here 'embed', which only _inner_mlp's
    annotations name); a name nothing uses is a typo or a leftover, and says the nearest one."""
    sizes = {"batch": 8, "d": 4, "hidden": 8}
    assert verify(_outer_step, {"d": 2}, dims={**sizes, "embed": 4}).ok
    with pytest.raises(ValueError, match=re.escape(
            "verify: dims gives 'embd' (did you mean 'embed'?), which no annotation of _outer_step() or of "
            "the checked calls it makes uses, and which its body never reads through dims() (the names "
            "used: ['batch', 'd', 'embed', 'hidden'])")):
        verify(_outer_step, {"d": 2}, dims={**sizes, "embd": 8192})
    with pytest.raises(ValueError, match=r"dims gives 'vocabulary', which no annotation"):
        verify(_outer_step, {"d": 2}, dims={**sizes, "vocabulary": 3})


def test_verify_does_not_judge_names_when_the_step_stops_early():
    """A step JAX stops in the middle may not have reached the checks that use a name: its
    problem is reported, and no name is called unused."""

    @typechecked
    def fails(x: f32[b"batch d"]) -> f32[b"batch"]:
        jnp.zeros((3,)) + jnp.zeros((4,))  # JAX refuses this before any nested check runs
        return x[:, 0]

    report = verify(fails, {"d": 2}, dims={"batch": 8, "d": 4, "embed": 4})
    assert not report.ok and "fails under jax.eval_shape" in str(report)
