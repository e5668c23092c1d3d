"""A Flax NNX model laid out from the annotations on its classes, on a simulated 8-device mesh.

    python examples/flax_nnx.py [--auto]

Each variable is annotated on its module's class (``w: nnx.Param[f32[jax.Array, b'...']]``).
``shardtypes.nnx`` derives the shardings of ``nnx.state(model)`` from them, the state is laid out
the way NNX users shard (``jax.device_put`` then ``nnx.update``), and ``shardtypes.nnx.check``
checks every variable's dtype, sizes and sharding against its annotation.
"""

from __future__ import annotations

import argparse

import jax

jax.config.update("jax_num_cpu_devices", 8)

import jax.numpy as jnp  # noqa: E402
from flax import nnx  # noqa: E402
from jax.sharding import AxisType, NamedSharding, PartitionSpec  # noqa: E402

import shardtypes  # noqa: E402
import shardtypes.nnx  # noqa: E402
from shardtypes import f32, typechecked  # noqa: E402


class Block(nnx.Module):
    w_up: nnx.Param[f32[jax.Array, b"embed/d hidden/t"]]
    w_down: nnx.Param[f32[jax.Array, b"hidden/t embed/d"]]

    def __init__(self, embed: int, hidden: int, rngs: nnx.Rngs):
        self.w_up = nnx.Param(jax.random.normal(rngs.params(), (embed, hidden)) / embed**0.5)
        self.w_down = nnx.Param(jax.random.normal(rngs.params(), (hidden, embed)) / hidden**0.5)

    def __call__(self, x: jax.Array) -> jax.Array:
        h = jax.nn.gelu(x @ self.w_up[...])
        # The contraction over the sharded hidden dim needs its output layout (on Explicit axes).
        return x + jnp.einsum("bh,he->be", h, self.w_down[...], out_sharding=batch_layout())


class Model(nnx.Module):
    blocks: nnx.List[Block]

    def __init__(self, embed: int, hidden: int, depth: int, rngs: nnx.Rngs):
        self.blocks = nnx.List([Block(embed, hidden, rngs) for _ in range(depth)])

    def __call__(self, x: jax.Array) -> jax.Array:
        for block in self.blocks:
            x = block(x)
        return x


@typechecked
def forward(model: Model, x: f32[jax.Array, b"batch/d embed"]) -> f32[jax.Array, b"batch/d embed"]:
    return shardtypes.shard(model(x), f32[jax.Array, b"batch/d embed"])


def batch_layout() -> PartitionSpec | None:
    """The layout of a ``batch/d embed`` result where JAX asks for one: on Explicit axes."""
    mesh = jax.sharding.get_abstract_mesh()
    explicit = dict(zip(mesh.axis_names, mesh.axis_types)).get("d") == AxisType.Explicit
    return PartitionSpec("d", None) if explicit else None


def spec_of(x: jax.Array) -> PartitionSpec:
    sharding = x.sharding
    return sharding.spec if isinstance(sharding, NamedSharding) else PartitionSpec()


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--auto", action="store_true", help="Auto mesh axes (default Explicit)")
    args = parser.parse_args()
    kind = AxisType.Auto if args.auto else AxisType.Explicit
    mesh = jax.make_mesh((4, 2), ("d", "t"), axis_types=(kind, kind))

    with jax.set_mesh(mesh):
        model = Model(16, 64, depth=2, rngs=nnx.Rngs(0))
        shardings = shardtypes.nnx.shardings(model, mesh, nnx.Param)
        nnx.update(model, jax.device_put(nnx.state(model, nnx.Param), shardings))
        shardtypes.nnx.check(model, nnx.Param)
        print("layout:", spec_of(model.blocks[0].w_up[...]), spec_of(model.blocks[0].w_down[...]))

        x = shardtypes.shard(jnp.ones((8, 16)), f32[jax.Array, b"batch/d embed"])
        print("output:", forward(model, x).shape)

        # A mistake: a block built with another hidden size.
        model.blocks[1] = Block(16, 32, nnx.Rngs(1))
        try:
            shardtypes.nnx.check(model, nnx.Param)
        except shardtypes.TypeCheckError as e:
            print("caught:", str(e).splitlines()[0])


if __name__ == "__main__":
    main()
