"""The current mesh, and the message when there is none (JAX's legacy `with Mesh` included)."""

import warnings

import jax
import numpy as np
import pytest
from conftest import make_mesh
from jax.sharding import Mesh

from shardtypes import f32, is_fully_sharded, make_shardings
from shardtypes.context import current_mesh

LEGACY = "If you opened JAX's legacy `with Mesh(...):` context (seqax, older examples), that is why"


def test_current_mesh_given_concrete_and_abstract():
    mesh = make_mesh("explicit")
    assert current_mesh(mesh) is mesh
    with jax.set_mesh(mesh):
        assert current_mesh() == mesh

        @jax.jit
        def under_jit(x):
            assert current_mesh() == mesh.abstract_mesh
            return x

        under_jit(1.0)


@pytest.mark.parametrize("call, what", [
    (lambda: make_shardings(f32[b"a/d"]), "make_shardings"),
    (lambda: current_mesh(None, "shard"), "shard"),
    (lambda: is_fully_sharded(jax.sharding.PartitionSpec("d")), "is_fully_sharded"),
])
def test_no_mesh_names_the_caller_and_the_legacy_context(call, what):
    with pytest.raises(ValueError) as info:
        call()
    message = str(info.value)
    assert message.startswith(f"{what}: no mesh; pass mesh=... or set one with `with jax.set_mesh(mesh):`")
    assert LEGACY in message


def test_legacy_mesh_context_gets_the_hint():
    devices = np.array(jax.devices()).reshape(4, 2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # JAX deprecates `with mesh:`
        with Mesh(devices, ("d", "t")):
            with pytest.raises(ValueError, match="use `with jax.set_mesh\\(mesh\\):` instead"):
                make_shardings(f32[b"a/d"])
