"""Annotations from other libraries never stop a function from being decorated: a forward
reference inside a third-party alias that cannot be resolved here (optax's ``OptState``, whose
``ArrayTree`` lives in optax's own module) is read as Any, without a warning (it is not the user's to
fix: once per process at debug level, on the "shardtypes" logger); a name the user wrote that does
not resolve is still a NameError naming the function."""

from __future__ import annotations

import logging
import typing
import warnings

import jax.numpy as jnp
import numpy as np
import pytest

import shardtypes
from shardtypes import f32, typechecked

optax = pytest.importorskip("optax")

# What optax.OptState is: an alias whose forward reference only optax's module resolves.
ThirdParty = typing.Union[int, typing.Iterable["NotDefinedHere"], typing.Mapping[str, "NotDefinedHere"]]  # noqa: F821


def test_an_optax_opt_state_annotation_decorates_and_checks(caplog):
    caplog.set_level(logging.DEBUG, logger="shardtypes")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no warning the user did not cause
        @typechecked
        def step(opt_state: optax.OptState, x: f32[b"n"]) -> f32[b"n"]:
            return x * 2

        state = optax.adam(1e-3).init(jnp.ones(3))
        np.testing.assert_allclose(np.asarray(step(state, jnp.ones(3))), 2.0)
    with pytest.raises(shardtypes.TypeCheckError, match=r'argument "x" .* is not f32\[b\'n\'\]'):
        step(state, jnp.ones((3, 2)))
    said = [r.getMessage() for r in caplog.records if "'ArrayTree'" in r.getMessage()]
    assert len(said) <= 1  # once per process (another test may have said it first)
    assert all("comes from another library and cannot be resolved here; it is read as Any" in m for m in said)


def test_a_third_party_alias_is_read_as_any_and_still_looked_into():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        @typechecked
        def f(state: ThirdParty, x: f32[b"n"]) -> int:
            return 1

        assert f({"a": 1}, jnp.ones(2)) == 1
    with pytest.raises(shardtypes.TypeCheckError, match=r'argument "x"'):
        f(3, jnp.ones((2, 2)))


def user_wrote_a_name(x: "Undefined123") -> int:  # noqa: F821
    return 1


def user_wrote_a_nested_name(x: list["Undefined456"]) -> int:  # noqa: F821 - (a string under PEP 563: the user's own)
    return 1


def test_a_name_the_user_wrote_that_does_not_resolve_is_still_an_error():
    with pytest.raises(NameError, match=r"shardtypes.typechecked cannot resolve the annotations of .*user_wrote_a_name: "
                       r"NameError: name 'Undefined123' is not defined"):
        typechecked(user_wrote_a_name)(1)
    with pytest.raises(NameError, match="Undefined456"):
        typechecked(user_wrote_a_nested_name)([1])


# A library's unresolved name that is part of a longer name the user wrote (the user's own class
# NotDefinedAsWell) is still the library's: only a whole name the user wrote is the user's.
Longer = typing.Union[int, typing.Mapping[str, "NotDefined"]]  # noqa: F821


class NotDefinedAsWell:
    pass


def test_only_a_whole_name_the_user_wrote_is_the_users_and_the_note_comes_once(recwarn, caplog):
    caplog.set_level(logging.DEBUG, logger="shardtypes")

    def h(state: Longer | NotDefinedAsWell, x: f32[b"n"]) -> int:
        return 1

    for _ in range(2):
        assert typechecked(h)(1, jnp.ones(2)) == 1
    assert not [w for w in recwarn if "'NotDefined'" in str(w.message)]
    notes = [r for r in caplog.records if "'NotDefined'" in r.getMessage()]
    assert len(notes) == 1
