"""verify(..., inputs={...}): a step whose TrainState holds an optax state (``opt_state: Any``)
verified on a 64x64 abstract mesh from ``jax.eval_shape(init, key)``; bad inputs are errors."""

import re
from typing import Any

import jax
import jax.numpy as jnp
import optax
import pytest
from jax.sharding import PartitionSpec as P

from shardtypes import f32, i32, pytree_dataclass, typechecked, verify

EMBED, HIDDEN = 8192, 32768
TX = optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(1e-3))


@pytree_dataclass
class Params:
    w_up: f32[b"embed/d hidden/t"]
    w_down: f32[b"hidden/t embed/d"]


@pytree_dataclass
class TrainState:
    params: Params
    opt_state: Any
    step: i32[b""]


def init(key, embed=EMBED):
    k1, k2 = jax.random.split(key)
    params = Params(jax.random.normal(k1, (embed, HIDDEN)), jax.random.normal(k2, (HIDDEN, embed)))
    return TrainState(params, TX.init(params), jnp.zeros((), jnp.int32))


def loss_fn(params, x):
    h = x @ params.w_up
    # The contraction over the sharded hidden dim needs its output layout (Explicit axes).
    y = jnp.einsum("bh,he->be", h, params.w_down, out_sharding=P("d", None))
    return jnp.mean((y - x) ** 2)


@typechecked
def train_step(state: TrainState, x: f32[b"batch/d embed"]) -> tuple[TrainState, f32[b""]]:
    loss, grads = jax.value_and_grad(loss_fn)(state.params, x)
    updates, opt_state = TX.update(grads, state.opt_state, state.params)
    return TrainState(optax.apply_updates(state.params, updates), opt_state, state.step + 1), loss


MESH = {"d": 64, "t": 64}


def test_a_train_state_with_an_optax_state_verifies_on_a_large_mesh():
    abstract = jax.eval_shape(init, jax.random.key(0))
    report = verify(train_step, MESH, {"batch": 1024}, inputs={"state": abstract})
    assert report.ok, str(report)
    assert report.dims["embed"] == EMBED and report.dims["hidden"] == HIDDEN
    state = report.inputs["state"]
    adam = state.opt_state[1][0]
    assert adam.mu.w_up.sharding.spec == P("d", "t") and adam.nu.w_down.sharding.spec == P("t", "d")
    assert adam.count.sharding.spec == P() and adam.mu.w_up.shape == (EMBED, HIDDEN)
    assert report.inputs["x"].shape == (1024, EMBED)
    assert report.outputs[0].opt_state[1][0].mu.w_up.shape == (EMBED, HIDDEN)


def test_an_input_that_does_not_meet_its_annotation_is_a_check_problem():
    abstract = jax.eval_shape(init, jax.random.key(0))
    report = verify(train_step, MESH, {"embed": 4096}, inputs={"state": abstract})
    assert not report.ok
    assert report.problems[0].kind == "check"
    assert str(report.problems[0]).startswith(
        "argument \"state\" (test_verify_inputs.TrainState) of train_step(): state.params.w_up is not "
        "f32[b'embed/d hidden/t']: dimension 'embed' is 8192 here (dim 0) but was bound to 4096 by verify(dims=...)")


def test_bad_inputs_are_errors_naming_them():
    abstract = jax.eval_shape(init, jax.random.key(0))
    with pytest.raises(ValueError, match=r"verify: inputs given for \['stat'\], which train_step\(\) does not take "
                                         r"\(its parameters: \['state', 'x'\]\)"):
        verify(train_step, MESH, inputs={"stat": abstract})
    with pytest.raises(ValueError, match=r"verify: \['state'\] given in both inputs and static"):
        verify(train_step, MESH, inputs={"state": abstract}, static={"state": abstract})
    with pytest.raises(TypeError, match=r'verify: inputs\["state"\] is type, not a tree of values'):
        verify(train_step, MESH, inputs={"state": TrainState})
    with pytest.raises(TypeError, match=r"verify: inputs must be a mapping of parameter name"):
        verify(train_step, MESH, inputs=[abstract])
    small = jax.eval_shape(lambda k: init(k, embed=96), jax.random.key(0))
    # Sizes that do not divide the mesh are a finding of the report (as for inputs made from
    # annotations), not a usage error: the CLI exits 1 for both.
    report = verify(train_step, MESH, inputs={"state": small})
    assert not report.ok and [p.kind for p in report.problems] == ["dims"]
    assert re.search(r'verify: inputs\["state"\]: TrainState\.params\.w_up is float32\[96, 32768\]: '
                     r"dim 0 of size 96 cannot be split over mesh axes \('d',\) \(64 ways\)", report.problems[0].message)
    unannotated = {"w": jax.ShapeDtypeStruct((8, 8), jnp.float32)}
    with pytest.raises(TypeError, match=r"verify: inputs\[\"state\"\]: .*\['w'\] .*has no shardtypes annotation"):
        verify(train_step, MESH, inputs={"state": unannotated})
