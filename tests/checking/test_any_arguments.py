"""An argument or return value annotated ``Any`` (or any annotation with no shardtypes one in
it, as ``tuple``) is looked into the way a dataclass field annotated ``Any`` is: each
annotated class instance inside it (an optax state's ``mu``, a ``Params``) is checked against its
own class, eagerly and under jit, on Explicit and Auto axes."""

from typing import Any

import jax
import jax.numpy as jnp
import optax
import pytest
from jax.sharding import NamedSharding, PartitionSpec as P
from typeguard import TypeCheckError

from shardtypes import FieldError, f32, make_shardings, pytree_dataclass, typechecked


@pytree_dataclass
class Params:
    w1: f32[b"embed/d hidden/t"]
    w2: f32[b"hidden/t embed/d"]


TX = optax.adam(1e-2)


@typechecked
def step(params: Params, opt_state: Any) -> Any:
    return opt_state


@typechecked
def step_tuple(params: Params, opt_state: tuple) -> tuple:
    return opt_state


@pytree_dataclass
class Small:  # unsharded: checked eagerly with no mesh
    w1: f32[b"embed hidden"]
    w2: f32[b"hidden embed"]


@typechecked
def passthrough(x: Any) -> Any:
    return x


def _state(mesh):
    params = Params(jnp.zeros((16, 8)), jnp.zeros((8, 16)))
    params = jax.device_put(params, make_shardings(params, mesh))
    return params, TX.init(params)


def test_a_laid_out_state_passes(mesh):
    with jax.set_mesh(mesh):
        params, state = _state(mesh)
        assert step(params, state) is state
        jax.jit(step)(params, state)
        step_tuple(params, state)
        passthrough(3)
        passthrough("text")
        passthrough(jnp.zeros(3))


@pytest.mark.parametrize("fn", [step, step_tuple], ids=["Any", "tuple"])
def test_a_mislaid_params_inside_an_any_argument_names_its_path(mesh, fn):
    with jax.set_mesh(mesh):
        params, state = _state(mesh)
        bad = jax.device_put(state, NamedSharding(mesh, P()))
        with pytest.raises(FieldError, match=rf'argument "opt_state" \(tuple\) of {fn.__name__}\(\): '
                                             r"opt_state\[0\]\.mu\.w1 is not f32\[b'embed/d hidden/t'\]: sharding "
                                             r".*P\(None, None\) but the annotation says P\('d', 't'\)"):
            fn(params, bad)


def test_under_jit_on_both_kinds(mesh):
    with jax.set_mesh(mesh):
        params, state = _state(mesh)
        bad = jax.device_put(state, NamedSharding(mesh, P()))
        with pytest.raises(TypeCheckError, match=r"opt_state\[0\]\.mu\.w1 .*P\(None, None\) but the annotation "
                                                 r"says P\('d', 't'\)"):
            jax.jit(step)(params, bad)


def test_a_wrong_shape_inside_binds_in_the_call_table():
    @typechecked
    def small_step(params: Small, opt_state: Any) -> None:
        pass

    params = Small(jnp.zeros((16, 8)), jnp.zeros((8, 16)))
    other = Small(jnp.zeros((4, 8)), jnp.zeros((8, 4)))
    # each Small is consistent on its own; the argument's Small bound embed=16 first
    with pytest.raises(TypeCheckError, match=r"opt_state\[0\]\.mu\.w1 is not f32\[b'embed hidden'\]: "
                                             r"dimension 'embed' is 4 here"):
        small_step(params, TX.init(other))


def test_the_return_value_is_looked_into():
    @typechecked
    def make(params: Small) -> Any:
        return (Small(jnp.zeros((16, 8)), jnp.zeros((8, 3))),)

    with pytest.raises(FieldError, match=r"the return value \(tuple\) of .*make\(\): the return value\[0\]\.w2 is not "
                                         r"f32\[b'hidden embed'\]: dimension 'embed' is 3 here"):
        make(Small(jnp.zeros((16, 8)), jnp.zeros((8, 16))))


def test_an_annotated_instance_given_as_any_is_checked_against_its_class():
    with pytest.raises(FieldError, match=r'argument "x" \(.*Small\) of passthrough\(\): x\.w2 is not '
                                         r"f32\[b'hidden embed'\]: dimension 'embed' is 3 here"):
        passthrough(Small(jnp.zeros((16, 8)), jnp.zeros((8, 3))))


@typechecked
def step_with_a_local(params: Params, opt_state: Any) -> Any:
    # An annotated local: typeguard instruments this function, and its code leaves Any out.
    w: f32[b"embed/d hidden/t"] = params.w1
    del w
    return opt_state


def test_a_function_typeguard_instruments_looks_inside_too(mesh):
    with jax.set_mesh(mesh):
        params, state = _state(mesh)
        assert step_with_a_local(params, state) is state
        bad = jax.device_put(state, NamedSharding(mesh, P()))
        with pytest.raises(FieldError, match=r'argument "opt_state" \(tuple\) of step_with_a_local\(\): '
                                             r"opt_state\[0\]\.mu\.w1 is not f32\[b'embed/d hidden/t'\]"):
            step_with_a_local(params, bad)
