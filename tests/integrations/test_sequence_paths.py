"""A model's layers in a tuple or a list (``blocks: tuple[Block, ...]``): errors and "bound by"
phrases name the layer by its index (``p.blocks[1].w_out``, bound ``by p.blocks[0].w_in``), eagerly,
under jit, and for a list argument; array items keep typeguard's ``item 1`` wording."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest
import typeguard
from jax.sharding import AxisType, Mesh

from shardtypes import TypeCheckError, f32, pytree_dataclass, typechecked


@pytree_dataclass
class Block:
    w_in: f32[b"embed mlp"]
    w_out: f32[b"mlp embed"]


@pytree_dataclass
class Params:
    blocks: tuple[Block, ...]


@pytree_dataclass
class Pair:
    blocks: tuple[Block, Block]


@typechecked
def step(p: Params) -> f32[b""]:
    return sum(jnp.sum(b.w_in) for b in p.blocks)


@typechecked
def pair_step(p: Pair) -> f32[b""]:
    return jnp.sum(p.blocks[0].w_in)


@typechecked
def list_step(blocks: list[Block]) -> f32[b""]:
    return jnp.sum(blocks[0].w_in)


@typechecked
def arrays(xs: list[f32[b"n"]]) -> f32[b"n"]:
    return xs[0]


GOOD = Block(jnp.zeros((4, 8)), jnp.zeros((8, 4)))
BAD = Block(jnp.zeros((4, 8)), jnp.zeros((4, 4)))
MESSAGE = ("p.blocks[1].w_out is not f32[b'mlp embed']: dimension 'mlp' is 4 here (dim 0) but was bound to 8 by "
           "p.blocks[0].w_in")


@pytest.mark.parametrize("jit", [False, True])
def test_a_layer_in_a_tuple_is_named_by_its_index(jit):
    with pytest.raises(TypeCheckError) as info:
        (jax.jit(step) if jit else step)(Params((GOOD, BAD)))
    assert MESSAGE in str(info.value)


def test_a_fixed_length_tuple_of_layers_too():
    with pytest.raises(TypeCheckError) as info:
        pair_step(Pair((GOOD, BAD)))
    assert MESSAGE in str(info.value)


def test_a_list_argument_of_layers_is_named_by_its_index():
    with pytest.raises(TypeCheckError) as info:
        list_step([GOOD, GOOD, BAD])
    assert str(info.value).startswith('argument "blocks" (list) of list_step(): blocks[2].w_out is not ')
    assert "bound to 8 by blocks[0].w_in" in str(info.value)


def test_under_jit_on_auto_axes_the_index_is_named_at_compile_time():
    mesh = Mesh(jax.devices()[:1], ("d",), axis_types=(AxisType.Auto,))
    with jax.set_mesh(mesh), pytest.raises(TypeCheckError) as info:
        jax.jit(step)(Params((GOOD, GOOD, BAD)))
    assert "p.blocks[2].w_out" in str(info.value)


def test_array_items_keep_typeguards_wording_and_a_good_tree_passes():
    with pytest.raises(TypeCheckError, match=r'item 1 of argument "xs" \(list\) of arrays\(\)'):
        arrays([jnp.zeros(3), jnp.zeros(4)])
    assert step(Params((GOOD, GOOD))).shape == ()
    with pytest.raises(TypeCheckError, match=r"Pair.blocks has wrong number of elements \(expected 2, got 3 instead\)"):
        typeguard.check_type(Pair((GOOD, GOOD, GOOD)), Pair)
