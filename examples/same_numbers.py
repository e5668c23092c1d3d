"""Same numbers on every mesh: a collective matmul, a loss and rotary positions, each correct and
with the mistake people make in it, checked with shardtypes.testing.assert_same_on_every_mesh.

    python examples/same_numbers.py

Each kernel's annotations state a global function; the check runs it on a one-device mesh and on
other shapes of the same axes, from the same global inputs, and compares. The three mistakes
below give no error anywhere else: the kernel pass sees layouts, not values.
"""

import jax

jax.config.update("jax_num_cpu_devices", 8)

import jax.numpy as jnp  # noqa: E402

from shardtypes import f32, typed_shard_map  # noqa: E402
from shardtypes.testing import MeshMismatch, assert_same_on_every_mesh  # noqa: E402


def all_gather_matmul(x, w, direction):
    """x @ w with x's rows gathered over 't' one block at a time, each step's block from the
    neighbour (the collective matmul of JAX's shard_map tutorial, the ring overlapping the matmul)."""
    n = jax.lax.axis_size("t")
    me = jax.lax.axis_index("t")
    rows = x.shape[0]
    out = jnp.zeros((rows * n, w.shape[1]), x.dtype)
    block = x
    for step in range(n):
        source = (me + direction * step) % n  # whose block this device holds at this step
        out = jax.lax.dynamic_update_slice_in_dim(out, block @ w, source * rows, axis=0)
        # pass the block on: to the previous device, so that the next one's block arrives here
        block = jax.lax.ppermute(block, "t", [(i, (i - direction) % n) for i in range(n)])
    return out


@typed_shard_map
def collective_matmul(
    x: f32[jax.Array, b"rows/t embed"], w: f32[jax.Array, b"embed hidden/t"]
) -> f32[jax.Array, b"rows hidden/t"]:
    return all_gather_matmul(x, w, direction=1)


@typed_shard_map
def collective_matmul_wrong_ring(
    x: f32[jax.Array, b"rows/t embed"], w: f32[jax.Array, b"embed hidden/t"]
) -> f32[jax.Array, b"rows hidden/t"]:
    n = jax.lax.axis_size("t")
    me = jax.lax.axis_index("t")
    rows = x.shape[0]
    out = jnp.zeros((rows * n, w.shape[1]), x.dtype)
    block = x
    for step in range(n):
        source = (me + step) % n
        out = jax.lax.dynamic_update_slice_in_dim(out, block @ w, source * rows, axis=0)
        block = jax.lax.ppermute(block, "t", [(i, (i + 1) % n) for i in range(n)])  # the ring turns the wrong way
    return out


@typed_shard_map
def mean_loss(x: f32[jax.Array, b"batch/d embed"], w: f32[jax.Array, b"embed"]) -> f32[jax.Array, b""]:
    return jax.lax.pmean(jnp.mean((x @ w) ** 2), "d")


@typed_shard_map
def mean_loss_summed(x: f32[jax.Array, b"batch/d embed"], w: f32[jax.Array, b"embed"]) -> f32[jax.Array, b""]:
    return jax.lax.psum(jnp.mean((x @ w) ** 2), "d")  # a sum of the devices' means


@typed_shard_map
def rotary_positions(x: f32[jax.Array, b"seq/t head_dim"]) -> f32[jax.Array, b"seq/t head_dim"]:
    offset = jax.lax.axis_index("t") * x.shape[0]  # where this device's rows start
    positions = (offset + jnp.arange(x.shape[0]))[:, None].astype(x.dtype)
    return x + positions


@typed_shard_map
def rotary_positions_no_offset(x: f32[jax.Array, b"seq/t head_dim"]) -> f32[jax.Array, b"seq/t head_dim"]:
    positions = jnp.arange(x.shape[0])[:, None].astype(x.dtype)  # each device counts from 0
    return x + positions


def main() -> None:
    for kernel in (collective_matmul, mean_loss, rotary_positions):
        print(assert_same_on_every_mesh(kernel), end="\n\n")
    for kernel in (collective_matmul_wrong_ring, mean_loss_summed, rotary_positions_no_offset):
        try:
            assert_same_on_every_mesh(kernel)
        except MeshMismatch as e:
            print(f"MeshMismatch: {e}", end="\n\n")
        else:
            raise SystemExit(f"{kernel.__name__}: the mistake was not found")


if __name__ == "__main__":
    main()
