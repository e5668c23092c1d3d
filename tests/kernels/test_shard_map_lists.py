"""A list given for a ``tuple[...]`` parameter of a typed_shard_map kernel (issue 43, item 9):
JAX's specs take lists, and JAX's shard_map tutorial passes its MLP's parameters as a list of
``(W, b)`` pairs, one per layer, each layer with its own sizes (which ``list[X]`` cannot give:
its items share X's names). The kernel lays each item out by its own annotation, and its body
gets the tuple the annotation names."""

import jax
import numpy as np
import pytest
from typeguard import TypeCheckError

from shardtypes import f32, ops, typed_shard_map

from conftest import put

First = tuple[f32[b"in hid/t"], f32[b"hid/t"]]
Second = tuple[f32[b"hid/t out"], f32[b"out"]]


@typed_shard_map
def predict(params: tuple[First, Second], x: f32[b"b/d in"]) -> f32[b"b/d out"]:
    assert isinstance(params, tuple)  # (the body gets what its annotation says)
    (w1, b1), (w2, b2) = params
    h = jax.nn.relu(x @ w1 + b1)
    return ops.psum("b/d out", h @ w2, "t") + b2


def _reference(params, x):
    (w1, b1), (w2, b2) = params
    return jax.nn.relu(x @ w1 + b1) @ w2 + b2


def _layers(mesh, as_list=True):
    rng = np.random.default_rng(0)
    w1, b1 = rng.normal(size=(16, 8)), rng.normal(size=(8,))
    w2, b2 = rng.normal(size=(8, 4)), rng.normal(size=(4,))
    pairs = [(put(mesh, w1, None, "t"), put(mesh, b1, "t")), (put(mesh, w2, "t", None), put(mesh, b2, None))]
    return pairs if as_list else tuple(pairs)


def test_a_list_of_unlike_layers_is_laid_out_item_by_item(mesh):
    params = _layers(mesh)
    x = put(mesh, np.random.default_rng(1).normal(size=(8, 16)), "d", None)
    expected = _reference(jax.device_get(params), jax.device_get(x))
    with jax.set_mesh(mesh):
        for call in (predict, jax.jit(predict)):
            out = call(params, x)
            np.testing.assert_allclose(np.asarray(out), expected, rtol=1e-5, atol=1e-5)
            assert out.shape == (8, 4)
        out = predict(params=params, x=x)  # (by keyword too)
        np.testing.assert_allclose(np.asarray(out), expected, rtol=1e-5, atol=1e-5)
        assert isinstance(params, list)  # the caller's list is left as it was


def test_lists_inside_the_list_and_a_tuple_work_the_same(mesh):
    params = _layers(mesh)
    x = put(mesh, np.ones((8, 16)), "d", None)
    with jax.set_mesh(mesh):
        nested = [list(pair) for pair in params]
        np.testing.assert_array_equal(np.asarray(predict(nested, x)), np.asarray(predict(tuple(params), x)))


def test_a_list_of_the_wrong_length_or_layout_is_a_clear_error(mesh):
    params = _layers(mesh)
    x = put(mesh, np.ones((8, 16)), "d", None)
    with jax.set_mesh(mesh):
        with pytest.raises(TypeCheckError, match=r'argument "params" \(tuple\) of predict\(\) has wrong number '
                                                 r"of elements \(expected 2, got 1 instead\)"):
            predict(params[:1], x)
        swapped = [params[0], (params[1][0], params[1][1][:2])]  # 'out' is 4 in w2, 2 in b2
        with pytest.raises(TypeCheckError, match=r'item 1 of item 1 of argument "params" \(tuple\) of predict\(\) '
                                                 r"is not f32\[b'out'\]: dimension 'out' is 2 here"):
            predict(swapped, x)


def test_list_x_still_takes_alike_items_as_a_list(mesh):
    @typed_shard_map
    def total(xs: list[f32[b"b/d"]]) -> f32[b"b/d"]:
        assert isinstance(xs, list)
        return sum(xs[1:], xs[0])

    with jax.set_mesh(mesh):
        xs = [put(mesh, np.full(8, float(i)), "d") for i in range(3)]
        np.testing.assert_array_equal(np.asarray(total(xs)), np.full(8, 3.0))
