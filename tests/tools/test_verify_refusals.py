"""verify says why it cannot build an input, and the ways out: a tree whose layers have no fixed
length (``tuple[Block, ...]``) names the field, ``inputs=``, a fixed-length tuple and ``Stacked``;
a parameter with no layout at all (an int) is still given in ``static=``."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from shardtypes import f32, pytree_dataclass, typechecked, verify


@pytree_dataclass
class Block:
    w_in: f32[b"embed mlp"]
    w_out: f32[b"mlp embed"]


@pytree_dataclass
class Params:
    blocks: tuple[Block, ...]


@typechecked
def step(params: Params, x: f32[b"batch embed"]) -> f32[b""]:
    return sum(jnp.sum(x @ b.w_in @ b.w_out) for b in params.blocks)


def test_a_tree_without_a_fixed_length_names_the_field_and_the_ways_out():
    report = verify(step, {"d": 2}, dims={"embed": 4, "mlp": 8, "batch": 2})
    (problem,) = report.problems
    assert problem.kind == "setup"
    assert problem.message == (
        'argument "params" of step() is annotated Params, which has no layout tree to build it from '
        f"(Params.blocks: tuple[{Block.__module__}.Block, ...] has no fixed length, so no layout tree): give its "
        'values in inputs={"params": jax.eval_shape(init, key)}, or annotate the field as a fixed-length tuple '
        "or one stacked layer (Stacked[Block, b'layers'])")


def test_the_way_out_it_names_works():
    blocks = tuple(Block(jax.ShapeDtypeStruct((4, 8), jnp.float32), jax.ShapeDtypeStruct((8, 4), jnp.float32))
                   for _ in range(3))
    report = verify(step, {"d": 2}, dims={"batch": 2}, inputs={"params": Params(blocks)})
    assert report.ok, report
