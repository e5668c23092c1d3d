"""A training step with Flax NNX and ``nnx.Optimizer`` (optax AdamW), the model and the optimizer
state laid out from the annotations on the module classes, on a simulated 8-device mesh.

    python examples/nnx_training.py [--auto]

The variables are annotated on their module's class (``w_up: nnx.Param[f32[...]]``). The model and
its optimizer are split into one ``nnx.State``; ``make_shardings(state, like=annotations)`` lays
out the parameters and every optimizer moment that mirrors them (``mu``, ``nu``) from those
annotations, and replicates the step counters. The state is initialised sharded, on device, under
``jax.jit(..., out_shardings=...)``; the step is jitted and checks the model's variables and the
batch; the trained state is saved with Orbax and restored onto the derived shardings.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path
from typing import Any

import jax

jax.config.update("jax_num_cpu_devices", 8)

import jax.numpy as jnp  # noqa: E402
import optax  # noqa: E402
from flax import nnx  # noqa: E402
from jax.sharding import AxisType, NamedSharding, PartitionSpec  # noqa: E402

import shardtypes  # noqa: E402
import shardtypes.nnx  # noqa: E402
from shardtypes import f32, make_shape_dtype_structs, make_shardings, typechecked  # noqa: E402

BATCH, EMBED, HIDDEN = 8, 16, 32
TX = optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(1e-2))


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


def batch_layout() -> PartitionSpec | None:
    """The layout of a ``batch/d embed`` result where JAX asks for one: on Explicit axes."""
    mesh = jax.sharding.get_abstract_mesh()
    explicit = dict(zip(mesh.axis_names, mesh.axis_types)).get("d") == AxisType.Explicit
    return PartitionSpec("d", None) if explicit else None


def create() -> tuple[Model, nnx.Optimizer]:
    model = Model(EMBED, HIDDEN, depth=2, rngs=nnx.Rngs(0))
    return model, nnx.Optimizer(model, TX, wrt=nnx.Param)


def loss_fn(model: Model, x: jax.Array) -> jax.Array:
    return jnp.mean((model(x) - x) ** 2)


@typechecked
def train_step(model: Model, optimizer: nnx.Optimizer, x: f32[jax.Array, b"batch/d embed"]) -> f32[jax.Array, b""]:
    shardtypes.nnx.check(model, nnx.Param)  # every parameter's dtype, sizes and layout
    loss, grads = nnx.value_and_grad(loss_fn)(model, x)
    optimizer.update(model, grads)
    return loss


def spec_of(x: Any) -> PartitionSpec:
    sharding = x.sharding
    return sharding.spec if isinstance(sharding, NamedSharding) else PartitionSpec()


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--auto", action="store_true", help="Auto mesh axes (default Explicit)")
    args = parser.parse_args()
    kind = AxisType.Auto if args.auto else AxisType.Explicit
    mesh = jax.make_mesh((4, 2), ("d", "t"), axis_types=(kind, kind))
    print(f"nnx.Optimizer (optax AdamW) with {kind.name} axes on {len(jax.devices())} CPU devices")

    with jax.set_mesh(mesh):
        # The layout of the model and its optimizer state, from the annotations on the classes.
        abstract_model, abstract_optimizer = nnx.eval_shape(create)
        graphdef, abstract = nnx.split((abstract_model, abstract_optimizer))
        annotations = shardtypes.nnx.annotations(abstract_model, nnx.Param)
        shardings = make_shardings(abstract, like=annotations)

        # Initialised sharded, on device: no host round trip.
        state = jax.jit(lambda: nnx.split(create())[1], out_shardings=shardings)()
        model, optimizer = nnx.merge(graphdef, state)
        shardtypes.nnx.check(model, nnx.Param)
        adam = optimizer.opt_state[1][0]
        print("mu.blocks[0].w_up:", spec_of(adam.mu["blocks"][0]["w_up"][...]),
              "count:", spec_of(adam.count[...]))

        x = shardtypes.shard(jax.random.normal(jax.random.key(1), (BATCH, EMBED)), f32[jax.Array, b"batch/d embed"])
        step = nnx.jit(train_step)
        loss = jnp.zeros(())
        for _ in range(5):
            loss = step(model, optimizer, x)
        print(f"step {int(optimizer.step[...])}: loss {float(loss):.4f}")
        print("nu.blocks[1].w_down after training:", spec_of(adam.nu["blocks"][1]["w_down"][...]))

        checkpoint_round_trip(nnx.state((model, optimizer)), abstract, annotations)

        # A deliberate mistake: a parameter laid out replicated.
        replicated = NamedSharding(mesh, PartitionSpec())
        model.blocks[1].w_up = nnx.Param(jax.device_put(model.blocks[1].w_up[...], replicated))
        try:
            step(model, optimizer, x)
        except shardtypes.TypeCheckError as e:
            print("caught:", str(e).splitlines()[0])


def checkpoint_round_trip(state: Any, abstract: Any, annotations: Any) -> None:
    """Saves the sharded state with Orbax and restores it onto the layout the annotations give:
    the restore target is ``make_shape_dtype_structs`` of the abstract state."""
    try:
        import orbax.checkpoint as ocp  # type: ignore[import-untyped]
    except ImportError:
        print("checkpoint: orbax-checkpoint is not installed; skipped")
        return
    target = make_shape_dtype_structs(abstract, like=annotations)
    with tempfile.TemporaryDirectory() as directory, ocp.StandardCheckpointer() as checkpointer:
        path = Path(directory) / "state"
        checkpointer.save(path, state)
        checkpointer.wait_until_finished()
        restored = checkpointer.restore(path, target)
    same = all(bool(jnp.array_equal(a, b)) and a.sharding == t.sharding
               for a, b, t in zip(jax.tree.leaves(restored), jax.tree.leaves(state), jax.tree.leaves(target)))
    print(f"checkpoint: restored {len(jax.tree.leaves(restored))} arrays, values and derived shardings equal: {same}")


if __name__ == "__main__":
    main()
