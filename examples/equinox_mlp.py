"""An Equinox model whose fields carry their layout, on a simulated 8-device mesh.

    python examples/equinox_mlp.py [--auto]

The annotations on the ``eqx.Module`` fields are the layout: shardtypes derives the shardings of
an abstract model (``eqx.filter_eval_shape``), the real model is laid out with them, and every
checked call checks dtype, sizes and sharding field by field.
"""

from __future__ import annotations

import argparse

import jax

jax.config.update("jax_num_cpu_devices", 8)

import equinox as eqx  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from jax.sharding import AxisType, NamedSharding, PartitionSpec  # noqa: E402

import shardtypes  # noqa: E402
from shardtypes import f32, typechecked  # noqa: E402


class MLP(eqx.Module):
    w_up: f32[jax.Array, b"embed/d hidden/t"]
    w_down: f32[jax.Array, b"hidden/t embed/d"]
    activation: str = eqx.field(static=True, default="gelu")

    def __init__(self, embed: int, hidden: int, key: jax.Array):
        k1, k2 = jax.random.split(key)
        self.w_up = jax.random.normal(k1, (embed, hidden)) / embed**0.5
        self.w_down = jax.random.normal(k2, (hidden, embed)) / hidden**0.5


@typechecked
def apply(model: MLP, x: f32[jax.Array, b"batch/d embed"]) -> f32[jax.Array, b"batch/d embed"]:
    h = jax.nn.gelu(x @ model.w_up)
    # The contraction over the sharded hidden dim needs its output layout (on Explicit axes).
    out = jnp.einsum("bh,he->be", h, model.w_down, out_sharding=batch_layout())
    # On Auto axes XLA chooses the layout: constrain it to the annotated one.
    return shardtypes.shard(out, f32[jax.Array, b"batch/d embed"])


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
        abstract = eqx.filter_eval_shape(MLP, 16, 64, jax.random.key(0))
        shardings = shardtypes.make_shardings(abstract)
        print("layout:", {name: getattr(shardings, name).spec for name in ("w_up", "w_down")})
        model = jax.device_put(MLP(16, 64, jax.random.key(0)), shardings)
        x = shardtypes.shard(jnp.ones((8, 16)), f32[jax.Array, b"batch/d embed"])
        y = jax.jit(apply)(model, x)
        print("output:", y.shape, spec_of(y))

        # A mistake: a weight left replicated.
        wrong = eqx.tree_at(lambda m: m.w_up, model, jnp.asarray(jax.device_get(model.w_up)))
        try:
            apply(wrong, x)
        except shardtypes.TypeCheckError as e:
            print("caught:", str(e).splitlines()[0])


if __name__ == "__main__":
    main()
