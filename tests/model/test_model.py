"""The annotation model, and the fast path of trees it gives checking.

The fast path must never change a verdict: every test here runs a checked call once to teach it a
structure, then calls again with something wrong and expects the full check's message.
"""

from typing import NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from shardtypes import Array, Scope, TypeCheckError, f32, i32, pytree_dataclass, typechecked
from shardtypes.model import ArrayNode, ClassNode, DictNode, OtherNode, SeqNode, UnionNode, model

from conftest import make_mesh, put


@pytree_dataclass
class Layer:
    w: f32[b"embed/d hidden/t"]
    b: f32[b"hidden/t"]


@pytree_dataclass
class Params:
    embed: f32[b"vocab/t embed/d"]
    layers: list[Layer]
    norm: Optional[f32[b"embed"]] = None


class Pair(NamedTuple):
    a: f32[b"n"]
    b: f32[b"n"]


def test_model_nodes():
    assert isinstance(model(f32[b"a b"]), ArrayNode)
    node = model(Params)
    assert isinstance(node, ClassNode) and node.has_arrays
    assert set(node.fields) == {"embed", "layers", "norm"}
    assert isinstance(node.fields["layers"], SeqNode)
    assert isinstance(node.fields["norm"], UnionNode) and node.fields["norm"].optional
    assert isinstance(model(dict[str, Layer]), DictNode)
    assert isinstance(model(Pair), ClassNode)
    assert isinstance(model(int), OtherNode) and not model(int).has_arrays
    stacked = model(Array["layers", Layer])
    assert isinstance(stacked, ClassNode) and stacked.base is Layer


@pytest.fixture(scope="module")
def mesh():
    return make_mesh("explicit")


def layer(mesh, hidden=4, b_spec=("t",)):
    return Layer(put(mesh, jnp.zeros((8, hidden)), "d", "t"), put(mesh, jnp.zeros(hidden), *b_spec))


def params(mesh, n=3, **kw):
    return Params(put(mesh, jnp.zeros((16, 8)), "t", "d"), [layer(mesh) for _ in range(n)], **kw)


@typechecked
def step(p: Params, x: f32[b"batch/d embed"]) -> f32[b"batch/d embed"]:
    return x


def x_of(mesh, embed=8):
    return put(mesh, jnp.zeros((8, embed)), "d")


def test_fast_path_then_every_mistake_is_caught(mesh):
    good = params(mesh)
    step(good, x_of(mesh))
    step(good, x_of(mesh))  # the fast path
    wrong_layers = [layer(mesh), layer(mesh, b_spec=(None,)), layer(mesh)]
    with pytest.raises(TypeCheckError, match=r"p\.layers.*b is not f32\[b'hidden/t'\]: sharding is P\(None\)"):
        step(Params(good.embed, wrong_layers), x_of(mesh))
    wrong_size = [layer(mesh), layer(mesh), layer(mesh, hidden=6)]
    with pytest.raises(TypeCheckError, match="dimension 'hidden' is 6 here .*but was bound to 4"):
        step(Params(good.embed, wrong_size), x_of(mesh))
    wrong_dtype = [layer(mesh), Layer(good.layers[0].w, put(mesh, jnp.zeros(4, jnp.bfloat16), "t"))]
    with pytest.raises(TypeCheckError, match="has dtype bfloat16"):
        step(Params(good.embed, wrong_dtype), x_of(mesh))
    numpy_leaf = [Layer(good.layers[0].w, np.zeros(4, np.float32))]
    with pytest.raises(TypeCheckError, match="numpy array"):
        step(Params(good.embed, numpy_leaf), x_of(mesh))
    with pytest.raises(TypeCheckError, match=r"argument \"x\".*dimension 'embed' is 4 here .*bound to 8 by p\.embed"):
        step(good, x_of(mesh, embed=4))  # the clash names the leaf that bound the size
    step(good, x_of(mesh))  # and the good call still passes


def test_structures_are_told_apart(mesh):
    good = params(mesh)
    step(good, x_of(mesh))
    step(params(mesh, n=5), x_of(mesh))  # another structure: its own layout
    step(params(mesh, norm=put(mesh, jnp.zeros(8))), x_of(mesh))
    with pytest.raises(TypeCheckError, match="is not f32"):
        step(params(mesh, norm=put(mesh, jnp.zeros(5))), x_of(mesh))

    @pytree_dataclass
    class Impostor:  # the same field names, another class
        w: f32[b"embed/d hidden/t"]
        b: f32[b"hidden/t"]

    fake = Params(good.embed, [Impostor(good.layers[0].w, good.layers[0].b)])
    with pytest.raises(TypeCheckError, match="Impostor"):
        step(fake, x_of(mesh))


def test_fast_path_respects_the_callers_table(mesh):
    good = params(mesh)
    step(good, x_of(mesh))
    with Scope(hidden=5), pytest.raises(TypeCheckError, match="bound to 5 by Scope"):
        step(good, x_of(mesh))


def test_namedtuple_and_dict_and_tuple_trees(mesh):
    @typechecked
    def f(p: Pair, d: dict[str, f32[b"n"]], t: tuple[f32[b"n"], ...]) -> f32[b""]:
        return jnp.sum(p.a)

    v = jnp.zeros(3)
    for _ in range(2):
        f(Pair(v, v), {"a": v, "b": v}, (v, v))
    with pytest.raises(TypeCheckError, match="dimension 'n' is 4 here"):
        f(Pair(v, jnp.zeros(4)), {"a": v}, (v,))
    with pytest.raises(TypeCheckError):
        f(Pair(v, v), {"a": v, "b": jnp.zeros(2)}, (v,))
    with pytest.raises(TypeCheckError):
        f(Pair(v, v), {"a": v}, (v, jnp.zeros(5, jnp.int32)))


def test_tracers_take_the_full_check(mesh):
    good = params(mesh)
    step(good, x_of(mesh))
    with jax.set_mesh(mesh):
        jax.jit(step)(good, x_of(mesh))
        bad = Params(good.embed, [layer(mesh, hidden=6)])
        with pytest.raises(TypeCheckError, match="is not f32"):
            jax.jit(step)(bad, x_of(mesh, embed=4))


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(1, 4),
    hidden=st.lists(st.sampled_from([4, 4, 4, 6]), min_size=4, max_size=4),
    b_sharded=st.lists(st.booleans(), min_size=4, max_size=4),
    dtype=st.sampled_from([jnp.float32, jnp.float32, jnp.bfloat16]),
)
def test_fast_and_full_checks_agree(n, hidden, b_sharded, dtype):
    """Differential: a warm function (fast path) and a fresh one (full check) give one verdict."""
    mesh = make_mesh("explicit")
    layers = [
        Layer(put(mesh, jnp.zeros((8, hidden[i]), dtype if i == 0 else jnp.float32), "d", "t"),
              put(mesh, jnp.zeros(hidden[i]), "t" if b_sharded[i] else None))
        for i in range(n)
    ]
    value = Params(put(mesh, jnp.zeros((16, 8)), "t", "d"), layers)

    def verdict(fn):
        try:
            fn(value, x_of(mesh))
            return "ok"
        except TypeCheckError as e:
            return str(e)

    warm = step  # has seen many structures
    warm(params(mesh, n=n), x_of(mesh))

    @typechecked
    def fresh(p: Params, x: f32[b"batch/d embed"]) -> f32[b"batch/d embed"]:
        return x

    assert verdict(warm).replace("step()", "F()") == verdict(fresh).replace(
        "test_fast_and_full_checks_agree.<locals>.fresh()", "F()")


def test_other_annotations_in_a_tree_take_the_full_check(mesh):
    @pytree_dataclass
    class WithCount:
        w: f32[b"n"]
        count: i32[b""]

    @typechecked
    def f(s: WithCount) -> None:
        pass

    for _ in range(2):
        f(WithCount(jnp.zeros(3), jnp.int32(1)))
    with pytest.raises(TypeCheckError, match="has dtype float32"):
        f(WithCount(jnp.zeros(3), jnp.float32(1)))
