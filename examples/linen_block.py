"""A Flax Linen transformer block laid out from its logical partitioning boxes, on a simulated
8-device mesh.

    python examples/linen_block.py [--auto]

The block declares its layout the Linen way (``nn.with_logical_partitioning``). ``shardtypes.linen``
reads the boxes of ``jax.eval_shape(model.init, ...)`` as annotations, resolves their logical
names through shardtypes' ``AxisRules`` (strictly: a name no rule maps is an error), initialises
the variables sharded under ``jax.jit(..., out_shardings=...)``, and checks them. The last part
shows a rule table that forgot ``'heads'``: Flax replicates those weights without a word;
shardtypes names them.
"""

from __future__ import annotations

import argparse

import jax

jax.config.update("jax_num_cpu_devices", 8)

import flax.linen as nn  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from flax.linen.spmd import logical_to_mesh_sharding  # noqa: E402
from jax.sharding import AxisType, PartitionSpec  # noqa: E402

import shardtypes.linen  # noqa: E402
from shardtypes import AxisRules, AxisRulesError, axis_rules, f32, plan  # noqa: E402

EMBED, HEADS, HEAD_DIM, MLP = 16, 4, 8, 64


def logical(init, *names):
    return nn.with_logical_partitioning(init, names)


class Block(nn.Module):
    """Pre-norm attention and MLP, every kernel boxed with its logical axes."""

    @nn.compact
    def __call__(self, x):
        dense = nn.initializers.lecun_normal()
        h = nn.LayerNorm(use_bias=False, scale_init=logical(nn.initializers.ones, "embed"))(x)
        attn = nn.MultiHeadDotProductAttention(
            num_heads=HEADS, qkv_features=HEADS * HEAD_DIM, use_bias=False,
            kernel_init=logical(dense, "embed", "heads", "head_dim"),
            out_kernel_init=logical(dense, "heads", "head_dim", "embed"),
        )
        x = x + attn(h, h)
        h = nn.LayerNorm(use_bias=False, scale_init=logical(nn.initializers.ones, "embed"))(x)
        h = nn.Dense(MLP, use_bias=False, kernel_init=logical(dense, "embed", "mlp"))(h)
        return x + nn.Dense(EMBED, use_bias=False, kernel_init=logical(dense, "mlp", "embed"))(nn.gelu(h))


# FSDP over d, tensor parallelism over t. head_dim stays whole.
RULES = AxisRules([("embed", "d"), ("heads", "t"), ("mlp", "t"), ("head_dim", None)], name="train")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--auto", action="store_true", help="Auto mesh axes instead of Explicit")
    args = parser.parse_args()
    kind = AxisType.Auto if args.auto else AxisType.Explicit
    mesh = jax.make_mesh((4, 2), ("d", "t"), axis_types=(kind, kind))
    print(f"Linen block with {kind.name} axes on {len(jax.devices())} CPU devices")

    model = Block()
    x = jnp.ones((2, 8, EMBED))
    abstract = jax.eval_shape(model.init, jax.random.key(0), x)
    with jax.set_mesh(mesh), axis_rules(RULES):
        shardings = shardtypes.linen.shardings(abstract)
        variables = jax.jit(model.init, out_shardings=shardings)(jax.random.key(0), x)
        shardtypes.linen.check(variables)  # dtype, shape and sharding of every boxed variable
        params = shardtypes.linen.unbox(variables)["params"]
        query = params["MultiHeadDotProductAttention_0"]["query"]["kernel"]
        print("query kernel:", query.shape, query.sharding.spec)
        print("mlp kernel:", params["Dense_0"]["kernel"].sharding.spec)
        if args.auto:  # Linen's layers pass no out_sharding, which Explicit axes need for FSDP matmuls
            y = jax.jit(model.apply)(variables, x)
            print("output:", y.shape)
        report = plan(abstract, mesh)
        print(f"plan: {len(report.rows)} arrays, {report.bytes_per_device} B per device, ok={report.ok}")

    # A rule table that forgot 'heads': Flax replicates every attention kernel silently...
    forgot = [("embed", "d"), ("mlp", "t"), ("head_dim", None)]
    flax_specs = logical_to_mesh_sharding(nn.get_partition_spec(abstract), mesh, forgot)
    flax_query = flax_specs["params"]["MultiHeadDotProductAttention_0"]["query"]["kernel"].spec
    print("flax, 'heads' forgotten:", flax_query)
    assert flax_query == PartitionSpec("d", None, None)
    # ...shardtypes names the first variable it cannot lay out.
    try:
        with axis_rules(AxisRules(forgot, name="forgot")):
            shardtypes.linen.shardings(abstract, mesh)
    except AxisRulesError as e:
        print(f"caught: {str(e).splitlines()[0]}")
    # A Linen params tree checked against annotations written by hand.
    written = {"kernel": f32[jax.Array, b"embed/embed mlp/mlp"]}
    with axis_rules(RULES):
        shardtypes.linen.check({"kernel": params["Dense_0"]["kernel"]}, written)
    print("checked Dense_0 against a written annotation")


if __name__ == "__main__":
    main()
