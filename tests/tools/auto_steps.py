"""Training steps written as a user writes them, for the cost model on Auto mesh axes: plain jnp
code with no sharding constraints, jax.grad and an SGD update, whose arguments carry logical
names (``embed/fsdp``, ``hidden/tp``, ``batch/dp``) that a rule set of ``RULES`` places on a
``(d, t)`` mesh. Between the annotated arguments XLA lays out everything (GSPMD's propagation),
which is what the cost model has to follow there.

- ``mlp_step(params: Params, x)``: a two-matmul MLP;
- ``scan_step(blocks: Blocks, x)``: a ``lax.scan`` over stacked layers (``layers embed/fsdp
  hidden/tp``) under jax.grad;
- ``embed_step(params: Embed, tokens, y)``: an embedding lookup (a gather of rows of a
  ``vocab/tp embed/fsdp`` table by token ids), whose cotangent is a scatter-add. Not in ``STEPS``:
  the cost model does not follow gathers and scatters on Auto axes yet (the primitive registry
  has no record telling a scatter-add from other opaque primitives), so it counts none of the
  table gradient's all-reduce (data parallel) or the all-to-alls XLA makes (vocab split).

``RULES`` (label -> ``AxisRules``): pure FSDP, pure TP, FSDP x TP and data parallel. Each step
runs on every ``(d, t)`` mesh of 8 devices, Auto axes (``jax.make_mesh((d, t), ('d', 't'),
axis_types=(AxisType.Auto,) * 2)``). On Explicit axes only data parallel runs (mlp, scan):
JAX's sharding-in-types refuses plain code whose matmul would need a gather or a reduction the
code does not say (FSDP: "produces an illegally sharded result", a result dim split twice over
('d', 't'); TP and FSDP x TP: "Contracting dimensions are sharded ... specify the output sharding
via out_sharding"; the embedding: "Use .at[...].get(out_sharding=)"). These steps are for Auto
axes, where XLA decides.

``args_for(fn, mesh, dims)`` builds a step's arguments (``make_shape_dtype_structs``, laid out on
``mesh`` by the rules active at the call: ``with shardtypes.axis_rules(RULES[label]):``). Shared
by tests/tools/test_cost_auto.py and benchmarks (step_cost.py, search_ranking.py): keep the names.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from shardtypes import AxisRules, f32, i32, make_shape_dtype_structs, pytree_dataclass, typechecked

__all__ = ["Params", "mlp_step", "Blocks", "scan_step", "Embed", "embed_step", "DIMS", "SCAN_DIMS", "EMBED_DIMS",
           "RULES", "STEPS", "args_for"]

RULES = {
    "fsdp": AxisRules([("dp", ("d", "t")), ("fsdp", ("d", "t")), ("tp", None)], name="fsdp"),
    "tp": AxisRules([("dp", None), ("fsdp", None), ("tp", ("d", "t"))], name="tp"),
    "fsdp x tp": AxisRules([("dp", "d"), ("fsdp", "d"), ("tp", "t")], name="fsdp x tp"),
    "dp": AxisRules([("dp", ("d", "t")), ("fsdp", None), ("tp", None)], name="dp"),
}

DIMS = {"batch": 64, "embed": 128, "hidden": 256}
SCAN_DIMS = {"layers": 6, "batch": 64, "embed": 128, "hidden": 256}
EMBED_DIMS = {"batch": 64, "vocab": 512, "embed": 128}


@pytree_dataclass
class Params:
    w_in: f32[b"embed/fsdp hidden/tp"]
    w_out: f32[b"hidden/tp embed/fsdp"]


@typechecked
def mlp_step(params: Params, x: f32[b"batch/dp embed"]) -> Params:
    def loss(p: Params) -> f32[b""]:
        y = jax.nn.relu(x @ p.w_in) @ p.w_out
        return jnp.mean((y - x) ** 2)

    grads = jax.grad(loss)(params)
    return jax.tree.map(lambda w, g: w - 0.01 * g, params, grads)


@pytree_dataclass
class Blocks:
    w_in: f32[b"layers embed/fsdp hidden/tp"]
    w_out: f32[b"layers hidden/tp embed/fsdp"]


@typechecked
def scan_step(blocks: Blocks, x: f32[b"batch/dp embed"]) -> Blocks:
    def loss(p: Blocks) -> f32[b""]:
        def layer(h, w):
            return h + jax.nn.relu(h @ w[0]) @ w[1], None

        y, _ = jax.lax.scan(layer, x, (p.w_in, p.w_out))
        return jnp.mean(y ** 2)

    grads = jax.grad(loss)(blocks)
    return jax.tree.map(lambda w, g: w - 0.01 * g, blocks, grads)


@pytree_dataclass
class Embed:
    table: f32[b"vocab/tp embed/fsdp"]


@typechecked
def embed_step(params: Embed, tokens: i32[b"batch/dp"], y: f32[b"batch/dp embed"]) -> Embed:
    def loss(p: Embed) -> f32[b""]:
        h = jnp.take(p.table, tokens, axis=0)  # [batch, embed]: a gather; its cotangent a scatter-add
        return jnp.mean((jnp.tanh(h) - y) ** 2)

    grads = jax.grad(loss)(params)
    return jax.tree.map(lambda w, g: w - 0.01 * g, params, grads)


# step name -> (the step, its dims): the steps the cost model is held to on Auto axes
STEPS = {"mlp": (mlp_step, DIMS), "scan": (scan_step, SCAN_DIMS)}

_INPUTS = {
    mlp_step: (Params, f32[b"batch/dp embed"]),
    scan_step: (Blocks, f32[b"batch/dp embed"]),
    embed_step: (Embed, i32[b"batch/dp"], f32[b"batch/dp embed"]),
}


def args_for(fn, mesh, dims) -> tuple:
    """``fn``'s arguments (one of the steps here), ``jax.ShapeDtypeStruct`` trees laid out on
    ``mesh`` by the active rules, in order."""
    return tuple(make_shape_dtype_structs(annotation, dims, mesh) for annotation in _INPUTS[fn])
