"""A training step with optax, its state laid out from the parameters' annotations, on a
simulated 8-device mesh.

    python examples/optax_training.py [--auto]

``TrainState`` is a pytree dataclass holding the annotated parameters and an optax AdamW state.
The optimizer state needs no annotation of its own: its ``mu`` and ``nu`` are ``Params``
instances, so ``make_shardings`` of the abstract state gives them the parameters' layout (and
the step counter is replicated). The state is initialised sharded, on device, under
``jax.jit(..., out_shardings=...)``; the step is jitted and checked; the trained state is saved
with Orbax and restored onto the shardings derived from the annotations.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path
from typing import Any, cast

import jax

jax.config.update("jax_num_cpu_devices", 8)

import jax.numpy as jnp  # noqa: E402
import optax  # noqa: E402
from jax.sharding import AxisType, PartitionSpec  # noqa: E402

from shardtypes import (  # noqa: E402
    TypeCheckError,
    f32,
    i32,
    make_shape_dtype_structs,
    make_shardings,
    pytree_dataclass,
    shard,
    typechecked,
)

BATCH, EMBED, HIDDEN = 8, 16, 32


@pytree_dataclass
class Params:
    w_up: f32[jax.Array, b"embed/d hidden/t"]
    w_down: f32[jax.Array, b"hidden/t embed/d"]


@pytree_dataclass
class TrainState:
    params: Params
    opt_state: Any  # optax's: the Params inside it are still checked against Params
    step: i32[jax.Array, b""]


OPTIMIZER = optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(1e-2))


def init(key: jax.Array) -> TrainState:
    k1, k2 = jax.random.split(key)
    params = Params(jax.random.normal(k1, (EMBED, HIDDEN)) / EMBED**0.5,
                    jax.random.normal(k2, (HIDDEN, EMBED)) / HIDDEN**0.5)
    # optax types its trees as arrays, lists and dicts; a pytree dataclass is a tree too.
    return TrainState(params, OPTIMIZER.init(cast(Any, params)), jnp.zeros((), jnp.int32))


def batch_layout() -> PartitionSpec | None:
    """The layout of a ``batch/d embed`` result where JAX asks for one: on Explicit axes."""
    mesh = jax.sharding.get_abstract_mesh()
    explicit = dict(zip(mesh.axis_names, mesh.axis_types)).get("d") == AxisType.Explicit
    return PartitionSpec("d", None) if explicit else None


def loss_fn(params: Params, x: jax.Array) -> jax.Array:
    h = jax.nn.gelu(x @ params.w_up)
    # The contraction over the sharded hidden dim needs its output layout (on Explicit axes).
    y = jnp.einsum("bh,he->be", h, params.w_down, out_sharding=batch_layout())
    return jnp.mean((y - x) ** 2)


@typechecked
def train_step(state: TrainState, x: f32[jax.Array, b"batch/d embed"]) -> tuple[TrainState, f32[jax.Array, b""]]:
    params: Any = state.params  # (optax types its trees as arrays, lists and dicts)
    loss, grads = jax.value_and_grad(loss_fn)(params, x)
    updates, opt_state = OPTIMIZER.update(grads, state.opt_state, params)
    return TrainState(cast(Params, optax.apply_updates(params, updates)), opt_state, state.step + 1), loss


def checkpoint_round_trip(state: TrainState, abstract: TrainState) -> None:
    """Saves the sharded state with Orbax and restores it onto the layout the annotations give:
    the restore target is ``make_shape_dtype_structs`` of the abstract state (each array's shape
    and dtype, with its derived sharding)."""
    try:
        import orbax.checkpoint as ocp  # type: ignore[import-untyped]
    except ImportError:
        print("checkpoint: orbax-checkpoint is not installed; skipped")
        return
    target = make_shape_dtype_structs(abstract)
    with tempfile.TemporaryDirectory() as directory, ocp.StandardCheckpointer() as checkpointer:
        path = Path(directory) / "state"
        checkpointer.save(path, state)
        checkpointer.wait_until_finished()
        restored = checkpointer.restore(path, target)
    same = all(bool(jnp.array_equal(a, b)) and a.sharding == t.sharding
               for a, b, t in zip(jax.tree.leaves(restored), jax.tree.leaves(state), jax.tree.leaves(target)))
    print(f"checkpoint: restored {len(jax.tree.leaves(restored))} arrays, values and derived shardings equal: {same};",
          "mu.w_up:", restored.opt_state[1][0].mu.w_up.sharding.spec)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--auto", action="store_true", help="Auto mesh axes instead of Explicit")
    args = parser.parse_args()
    kind = AxisType.Auto if args.auto else AxisType.Explicit
    mesh = jax.make_mesh((4, 2), ("d", "t"), axis_types=(kind, kind))
    print(f"optax AdamW with {kind.name} axes on {len(jax.devices())} CPU devices")
    with jax.set_mesh(mesh):
        # The layout of the whole state, optimizer moments included, from the annotations.
        abstract = jax.eval_shape(init, jax.random.key(0))
        shardings = make_shardings(abstract)
        state = jax.jit(init, out_shardings=shardings)(jax.random.key(0))  # no host round trip
        adam = state.opt_state[1][0]
        print("mu.w_up:", adam.mu.w_up.sharding.spec, "count:", adam.count.sharding.spec)
        x = shard(jax.random.normal(jax.random.key(1), (BATCH, EMBED)), f32[jax.Array, b"batch/d embed"])
        step = jax.jit(train_step, donate_argnums=0)
        loss = jnp.zeros(())
        for _ in range(5):
            state, loss = step(state, x)
        print(f"step {int(state.step)}: loss {float(loss):.4f}")
        print("nu.w_down after training:", state.opt_state[1][0].nu.w_down.sharding.spec)
        checkpoint_round_trip(state, abstract)

        # A deliberate mistake: an optimizer state laid out replicated.
        replicated = jax.device_put(state.opt_state, jax.sharding.NamedSharding(mesh, PartitionSpec()))
        bad = TrainState(state.params, replicated, state.step)
        try:
            train_step(bad, x)
        except TypeCheckError as e:
            print(f"caught: {e}")


if __name__ == "__main__":
    main()
