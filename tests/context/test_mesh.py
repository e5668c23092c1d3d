"""The current mesh, and the message when there is none (JAX's legacy `with Mesh` included)."""

import re
import warnings

import jax
import numpy as np
import pytest
from jax.sharding import Mesh

from shardtypes import f32, is_fully_sharded, make_shardings
from shardtypes.context import current_mesh

from conftest import make_mesh

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


@pytest.mark.parametrize("entry", ["make_shardings", "make_shape_dtype_structs", "shard", "typed_shard_map"])
def test_every_entry_that_needs_a_mesh_refuses_the_legacy_context_alike(entry):
    """Under `with mesh:` (deprecated, still common) no entry goes on without the mesh:
    make_shape_dtype_structs used to return structs with no sharding there, silently."""
    import jax.numpy as jnp

    from shardtypes import make_shape_dtype_structs, shard, typed_shard_map

    devices = np.array(jax.devices()).reshape(4, 2)
    laid_out = jax.device_put(jnp.zeros(8), jax.sharding.NamedSharding(Mesh(devices, ("d", "t")), jax.sharding.PartitionSpec("d")))
    calls = {
        "make_shardings": lambda: make_shardings(f32[b"a/d"]),
        "make_shape_dtype_structs": lambda: make_shape_dtype_structs(f32[b"a/d"], {"a": 8}),
        "shard": lambda: shard(jnp.zeros(8), f32[b"a/d"]),
        "typed_shard_map": lambda: typed_shard_map(_identity)(laid_out),
    }
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        with Mesh(devices, ("d", "t")):
            with pytest.raises(ValueError, match=rf"^{entry}: (calling \w+: )?no mesh; .*{re.escape(LEGACY)}"):
                calls[entry]()


def test_without_any_mesh_structs_have_no_sharding_and_the_legacy_probe_says_closed():
    from shardtypes import make_shape_dtype_structs
    from shardtypes.context import legacy_mesh_open

    assert not legacy_mesh_open()
    (struct,) = [make_shape_dtype_structs(f32[b"a b"], {"a": 8, "b": 2})]
    assert struct.shape == (8, 2) and struct.sharding is None
    with jax.set_mesh(make_mesh("auto")):
        assert not legacy_mesh_open()  # a mesh JAX's public API reads: nothing to probe


def _identity(x: f32[b"a/d"]) -> f32[b"a/d"]:
    return x
