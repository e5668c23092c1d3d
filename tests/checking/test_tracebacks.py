"""A failed check's traceback (issue 19 item 14): the user's frames only, as JAX leaves its own
out, unless ``config.traceback_filtering = 'off'``, which keeps every frame."""

import os
import traceback

import jax
import jax.numpy as jnp
import pytest
import typeguard
from typeguard import TypeCheckError

import shardtypes
from shardtypes import check, config, f32, shard, typechecked

from conftest import make_mesh

OURS = (os.path.dirname(shardtypes.__file__) + os.sep, os.path.dirname(typeguard.__file__) + os.sep)


@pytest.fixture(params=["on", "off"])
def filtering(request):
    config.traceback_filtering = request.param
    try:
        yield request.param
    finally:
        config.traceback_filtering = "on"


@typechecked
def takes_a_matrix(x: f32[b"a b"]) -> f32[b"a"]:
    return x[:, 0]


@typechecked
def returns_a_matrix(x: f32[b"a"]) -> f32[b"a b"]:
    return x


@typechecked
def calls_a_checked_function(x: f32[b"a"]) -> f32[b"a"]:
    return takes_a_matrix(x)  # the failing call, inside the user's own checked function


def user_code(which: str) -> None:
    mesh = make_mesh("explicit")
    calls = {
        "argument": lambda: takes_a_matrix(jnp.zeros((3,))),
        "return": lambda: returns_a_matrix(jnp.zeros((3,))),
        "nested": lambda: calls_a_checked_function(jnp.zeros((3,))),
        "check": lambda: check(f32, "a b", jnp.zeros((3,))),
        "shard": lambda: shard(jnp.zeros((3,)), f32[b"a/d"], mesh),
    }
    calls[which]()


def frames(error: BaseException) -> list:
    return traceback.extract_tb(error.__traceback__)


@pytest.mark.parametrize("which", ["argument", "return", "nested", "check", "shard"])
def test_a_failed_check_shows_the_users_frames_only(which, filtering):
    with pytest.raises((TypeCheckError, ValueError)) as info:
        user_code(which)
    shown = frames(info.value)
    names = [f.name for f in shown]
    assert "user_code" in names and "<lambda>" in names
    if which == "nested":
        assert "calls_a_checked_function" in names  # the user's function body stays
    ours = [f for f in shown if f.filename.startswith(OURS)]
    if filtering == "on":
        assert ours == [], [f"{f.filename}:{f.lineno} {f.name}" for f in ours]
        assert shown[-1].name in ("<lambda>", "calls_a_checked_function")
    else:
        assert ours and shown[-1].filename.startswith(OURS)  # down to the raise


def test_the_message_is_unchanged():
    with pytest.raises(TypeCheckError, match=r'^argument "x" \(jax.Array\) of takes_a_matrix\(\) is not '
                                            r"f32\[b'a b'\]: has 1 dim \[3\] but the annotation has 2"):
        user_code("argument")


def test_errors_of_the_users_function_keep_every_frame():
    @typechecked
    def fails(x: f32[b"a"]) -> f32[b"a"]:
        raise KeyError("the user's own error")

    with pytest.raises(KeyError) as info:
        fails(jnp.zeros((3,)))
    assert any(f.filename.startswith(OURS) for f in frames(info.value))  # not ours to filter


def test_the_setting_is_validated():
    with pytest.raises(ValueError, match=r"shardtypes.config.traceback_filtering must be one of \('on', 'off'\), got 'no'"):
        config.traceback_filtering = "no"
    with pytest.raises(ValueError, match=r"must be one of \('on', 'off'\), got False"):
        config.traceback_filtering = False
    assert config.traceback_filtering == "on"


def test_a_filtered_error_under_jit_keeps_the_users_frames():
    with pytest.raises(TypeCheckError) as info:
        jax.jit(takes_a_matrix)(jnp.zeros((3,)))
    shown = frames(info.value)
    assert "test_a_filtered_error_under_jit_keeps_the_users_frames" in [f.name for f in shown]
    assert not [f for f in shown if f.filename.startswith(OURS)]


def test_a_failed_kernel_check_shows_no_shardtypes_frame(filtering):
    # typed_shard_map's boundary filters too: a wrong input, and a wrong op inside the body.
    from shardtypes import ops, typed_shard_map

    mesh = make_mesh("explicit")

    @typed_shard_map
    def kernel(x: f32[b"rows/d cols"]) -> f32[b"rows/d cols"]:
        return ops.all_gather("rows/t cols -> rows cols", x)  # the body's own mistake

    with jax.sharding.set_mesh(mesh):
        x = shard(jnp.zeros((8, 4)), f32[b"rows/d cols"])
        for call in (lambda: kernel(jnp.zeros((8, 4))), lambda: kernel(x)):
            with pytest.raises(TypeCheckError) as info:
                call()
            shown = frames(info.value)
            ours = [f"{f.filename}:{f.lineno} {f.name}" for f in shown if f.filename.startswith(OURS)]
            assert "test_a_failed_kernel_check_shows_no_shardtypes_frame" in [f.name for f in shown]
            assert (ours == []) if filtering == "on" else ours


def derivation(which: str) -> None:
    from shardtypes import axis_rules, make_partition_specs, make_shardings

    mesh = make_mesh("explicit")
    if which == "make_shardings":
        make_shardings(f32[b"embed/tensr hidden"], mesh)  # no such mesh axis
    elif which == "rules":
        with axis_rules([("batch", "dd")]):
            make_shardings(f32[b"batch/batch embed"], mesh)
    else:
        make_partition_specs([f32[b"a/d"], 3])  # not an annotation at [1]


@pytest.mark.parametrize("which", ["make_shardings", "rules", "make_partition_specs"])
def test_a_derivation_error_shows_the_users_frames_only(which, filtering):
    with pytest.raises((TypeError, ValueError)) as info:
        derivation(which)
    shown = frames(info.value)
    assert shown[-1].name == "derivation" if filtering == "on" else shown[-1].filename.startswith(OURS)
    ours = [f for f in shown if f.filename.startswith(OURS)]
    assert (ours == []) if filtering == "on" else ours
    assert str(info.value).startswith(("make_shardings: ", "make_partition_specs: ", "the annotation"))
