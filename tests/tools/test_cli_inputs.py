"""``shardtypes verify ... --inputs NAME=MODULE:OBJECT``: a step whose state holds an optax state is
verified from the command line, as ``verify(inputs=...)`` does in Python; each bad use is an error
naming the option and the parameter."""

from __future__ import annotations

import sys
import textwrap

import pytest

from shardtypes.__main__ import main

MODULE = "cli_inputs_model"
SOURCE = textwrap.dedent('''
    from typing import Any
    import jax, jax.numpy as jnp, optax
    from shardtypes import f32, pytree_dataclass, typechecked

    @pytree_dataclass
    class Params:
        w: f32[b"embed/d hidden"]

    @pytree_dataclass
    class State:
        params: Params
        opt_state: Any

    OPT = optax.adam(1e-3)

    @typechecked
    def train_step(state: State, x: f32[b"batch/d embed"]) -> State:
        grads = jax.grad(lambda p: jnp.sum(x @ p.w))(state.params)
        updates, opt_state = OPT.update(grads, state.opt_state, state.params)
        return State(optax.apply_updates(state.params, updates), opt_state)

    def abstract_state():
        params = Params(jax.ShapeDtypeStruct((16, 32), jnp.float32))
        return State(params, jax.eval_shape(OPT.init, params))

    STATE = abstract_state()

    def broken():
        raise RuntimeError("no checkpoint here")

    NOT_A_TREE = "a string"

    def small_state():
        params = Params(jax.ShapeDtypeStruct((12, 32), jnp.float32))  # 12 rows: not over d=8
        return State(params, jax.eval_shape(OPT.init, params))

    def not_a_state():
        return "a string"
''')


@pytest.fixture
def here(tmp_path, monkeypatch):
    pytest.importorskip("optax")
    (tmp_path / f"{MODULE}.py").write_text(SOURCE)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    sys.modules.pop(MODULE, None)


def run(capsys, *argv):
    try:
        code = main(list(argv))
    except SystemExit as e:
        code = e.code
    out, err = capsys.readouterr()
    return code, out, err


STEP = [f"{MODULE}:train_step", "--mesh", "d=8", "--dims", "batch=64"]


@pytest.mark.parametrize("given", ["abstract_state", "STATE"])
def test_a_step_over_an_optax_state_verifies_from_the_command_line(here, capsys, given):
    code, out, err = run(capsys, "verify", *STEP, "--inputs", f"state={MODULE}:{given}")
    assert code == 0, out + err
    assert "ok" in out


def test_without_inputs_it_says_what_to_give(here, capsys):
    code, out, err = run(capsys, "verify", *STEP)
    assert code == 1
    assert "inputs" in out


@pytest.mark.parametrize(("inputs", "message"), [
    ("states=" + MODULE + ":STATE", "--inputs states=cli_inputs_model:STATE: the function has no parameter 'states' "
                                    "(its parameters: ['state', 'x'])"),
    ("state", "--inputs state: expected NAME=MODULE:OBJECT"),
    ("state=" + MODULE + ":NOT_A_TREE", "--inputs state=cli_inputs_model:NOT_A_TREE: expected a tree of arrays or "
                                        "jax.ShapeDtypeStructs (or a function of no arguments returning one), found str"),
    ("state=" + MODULE + ":broken", "--inputs state=cli_inputs_model:broken: calling cli_inputs_model:broken() raised "
                                    "RuntimeError: no checkpoint here"),
])
def test_bad_inputs_name_the_option_and_the_parameter(here, capsys, inputs, message):
    code, out, err = run(capsys, "verify", *STEP, "--inputs", inputs)
    assert code == 2
    assert message in err


def test_a_parameter_given_twice_is_an_error(here, capsys):
    code, out, err = run(capsys, "verify", *STEP, "--inputs", f"state={MODULE}:STATE", "--inputs",
                         f"state={MODULE}:abstract_state")
    assert code == 2 and "'state' is given twice" in err


@pytest.mark.parametrize("given", ["abstract_state", "STATE"])
def test_plan_takes_the_same_state_or_the_function_making_it(here, capsys, given):
    code, out, err = run(capsys, "plan", f"{MODULE}:{given}", "--mesh", "d=8")
    assert code == 0, out + err
    assert ".params.w" in out


def test_plan_of_a_function_that_fails_or_returns_no_tree(here, capsys):
    code, _, err = run(capsys, "plan", f"{MODULE}:broken", "--mesh", "d=8")
    assert code == 2 and "cli_inputs_model:broken: calling cli_inputs_model:broken() raised RuntimeError" in err
    code, _, err = run(capsys, "plan", f"{MODULE}:not_a_state", "--mesh", "d=8")
    assert code == 2 and "not_a_state() returned str, not a tree of arrays or jax.ShapeDtypeStructs" in err


def test_inputs_whose_sizes_do_not_divide_the_mesh_are_a_finding(here, capsys):
    """As for inputs made from annotations: the report says so, and the exit status is 1."""
    code, out, err = run(capsys, "verify", *STEP, "--inputs", f"state={MODULE}:small_state")
    assert code == 1, out + err
    assert "[dims]" in out and "dim 0 of size 12" in out
