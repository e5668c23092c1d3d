"""Annotations are classes: cached, pickled to themselves, with a repr of what was written and an
``isinstance`` that checks; the static spelling ``f32[jax.Array, b'...']`` and ``Stacked``."""

import pickle
import typing
from typing import Annotated

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import typeguard

import shardtypes
from shardtypes import (
    Array,
    Scope,
    Stacked,
    TypeCheckError,
    check,
    dims,
    f32,
    floating,
    i32,
    make_partition_specs,
    make_shape_dtype_structs,
    number,
    pytree_dataclass,
    typechecked,
)

from conftest import make_mesh, put


@pytree_dataclass
class Layer:
    w: f32[jax.Array, b"embed hidden"]
    b: f32[jax.Array, b"hidden"]


@pytree_dataclass
class HostLayer:
    w: f32[np.ndarray, b"embed hidden"]


# ---------------------------------------------------------------------------------------------
# Classes, cached.


def test_subscripts_are_cached_classes():
    assert f32["a b"] is f32[b"a b"]
    assert f32[jax.Array, "a b"] is f32[jax.Array, b"a b"]
    assert f32[jax.Array, b"a b"] is not f32[b"a b"]
    assert f32[np.ndarray, b"a b"] is not f32[jax.Array, b"a b"]
    for ann in (f32[b"a b"], f32[jax.Array, b"a b"], floating[b"a"]):
        assert isinstance(ann, type) and issubclass(ann, number)
    static = f32[jax.Array, b"batch/d embed"]
    assert issubclass(static, f32) and static.dtype_class is f32 and static.array_type is jax.Array
    assert static.shape_string == b"batch/d embed" and str(static.spec) == "batch/d embed"
    assert f32.shape_string is None and f32.array_type is None and f32.dtype_class is f32
    assert typing.get_origin(static) is None  # a class, so typing sees no alias


@pytest.mark.parametrize(
    "ann, text",
    [
        (f32[jax.Array, b"batch/d embed"], "shardtypes.f32[jax.Array, b'batch/d embed']"),
        (f32[jax.Array, "batch/d embed"], "shardtypes.f32[jax.Array, b'batch/d embed']"),
        (i32[np.ndarray, b"rows"], "shardtypes.i32[numpy.ndarray, b'rows']"),
        (floating[b"*lead n"], "shardtypes.floating[b'*lead n']"),
    ],
)
def test_repr_is_what_was_written(ann, text):
    assert repr(ann) == text


@pytest.mark.parametrize(
    "ann", [f32[b"a b"], f32[jax.Array, b"a/d b"], i32[np.ndarray, b""], floating[jax.Array, b"*x n"]]
)
def test_pickles_to_the_same_class(ann):
    assert pickle.loads(pickle.dumps(ann)) is ann
    assert pickle.loads(pickle.dumps({"x": [ann]})) == {"x": [ann]}


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda: f32[3, b"a"], r"array_type must be a class such as jax.Array"),
        (lambda: f32["a", "b"], r"f32\[\.\.\.\] takes a shape string"),
        (lambda: f32[jax.Array, b"a", b"b"], r"takes a shape string"),
        (lambda: f32[jax.Array, b"a"][b"b"], r"already has a shape"),
        (lambda: number[jax.Array, b"a"], r"number is the base class"),
    ],
)
def test_bad_subscripts(make, message):
    with pytest.raises(TypeError, match=message):
        make()


def test_bad_shape_in_static_spelling():
    with pytest.raises(shardtypes.ShapeSpecError, match=r"empty mesh axis name"):
        f32[jax.Array, b"batch/"]


def test_check_rejects_an_annotation_as_dtype():
    with pytest.raises(TypeError, match=r"has a shape of its own; pass the dtype class \(f32\)"):
        check(f32[jax.Array, b"a"], "a", jnp.zeros(2))


# ---------------------------------------------------------------------------------------------
# isinstance.


def test_isinstance_checks_dtype_rank_and_sizes():
    x = jnp.zeros((2, 3), jnp.float32)
    assert isinstance(x, f32[b"a b"]) and isinstance(x, f32[jax.Array, b"a b"])
    assert not isinstance(x, i32[b"a b"])
    assert not isinstance(x, f32[b"a"])
    assert not isinstance(x, f32[b"a 4"])
    assert not isinstance(x, f32[np.ndarray, b"a b"])  # the array type is checked too
    assert isinstance(np.zeros((2, 3), np.float32), f32[np.ndarray, b"a b"])
    assert not isinstance(np.zeros((2, 3), np.float32), f32[jax.Array, b"a b"])
    assert not isinstance("not an array", f32[b"a b"])
    assert isinstance(x, floating[b"..."])


def test_isinstance_of_a_dtype_class_means_any_shape():
    assert isinstance(jnp.zeros((2, 3)), f32) and isinstance(jnp.zeros(()), f32)
    assert not isinstance(jnp.zeros(3, jnp.int32), f32)
    assert isinstance(jnp.zeros(3, jnp.int32), shardtypes.integer)
    assert not isinstance(jnp.zeros(3), number)  # the base class is a plain class


def test_isinstance_uses_the_current_table():
    with Scope(a=2):
        assert isinstance(jnp.zeros((2, 3)), f32[b"a b"])
        assert dims() == {"a": 2, "b": 3}  # bound, as check() binds
        assert isinstance(jnp.zeros((3,)), f32[b"b"])  # b is 3
        assert not isinstance(jnp.zeros((4,)), f32[b"b"])
    # Outside any table, each isinstance has a fresh one.
    assert isinstance(jnp.zeros(2), f32[b"n"]) and isinstance(jnp.zeros(5), f32[b"n"])
    assert dims() == {}


def test_isinstance_checks_sharding(mesh):
    x = put(mesh, jnp.zeros((8, 4)), "d")
    assert isinstance(x, f32[jax.Array, b"batch/d embed"])
    assert not isinstance(x, f32[jax.Array, b"batch embed/d"])
    assert not isinstance(x, f32[jax.Array, b"batch embed"])  # sharded where the annotation is not


def test_isinstance_under_jit():
    @jax.jit
    def f(x):
        return jnp.array([isinstance(x, f32[b"n"]), isinstance(x, i32[b"n"]), isinstance(x, f32[b"n m"])])

    assert f(jnp.zeros(3)).tolist() == [True, False, False]


def test_isinstance_ignores_config_checks():
    shardtypes.config.checks = False
    try:
        assert not isinstance(jnp.zeros(3, jnp.int32), f32[b"n"])
    finally:
        shardtypes.config.checks = True


def test_beartype_uses_isinstance():
    beartype = pytest.importorskip("beartype").beartype

    @beartype
    def f(x: f32[jax.Array, b"a b"]) -> f32[jax.Array, b"a"]:
        return x.sum(-1)

    assert f(jnp.zeros((2, 3))).shape == (2,)
    with pytest.raises(Exception, match=r"f32\[jax.Array, b'a b'\]"):
        f(jnp.zeros((2, 3), jnp.int32))


# ---------------------------------------------------------------------------------------------
# The static spelling is checked like the one-argument one, plus its array type.


@typechecked
def on_device(x: f32[jax.Array, b"n"]) -> f32[jax.Array, b"n"]:
    return x


@typechecked
def on_host(x: f32[np.ndarray, b"n"]) -> int:
    return len(x)


def test_static_spelling_in_typechecked():
    for _ in range(3):  # the fast path too
        on_device(jnp.zeros(3))
        assert on_host(np.zeros(3, np.float32)) == 3
    with pytest.raises(TypeCheckError, match=r"is not f32\[jax.Array, b'n'\]: the annotation wants a "
                       r"jax.Array, not a numpy.ndarray"):
        on_device(np.zeros(3, np.float32))
    for _ in range(2):  # a concrete jax.Array never takes the fast path past f32[np.ndarray, ...]
        with pytest.raises(TypeCheckError, match=r"the annotation wants a numpy.ndarray, not a jax.Array"):
            on_host(jnp.zeros(3))


def test_static_spelling_in_trees():
    @typechecked
    def device_tree(layer: Layer) -> None:
        pass

    @typechecked
    def host_tree(layer: HostLayer) -> None:
        pass

    for _ in range(3):
        device_tree(Layer(jnp.zeros((2, 3)), jnp.zeros(3)))
        host_tree(HostLayer(np.zeros((2, 3), np.float32)))
    with pytest.raises(TypeCheckError, match=r"layer.w .*wants a jax.Array, not a numpy.ndarray"):
        device_tree(Layer(np.zeros((2, 3), np.float32), jnp.zeros(3)))
    for _ in range(2):
        with pytest.raises(TypeCheckError, match=r"layer.w .*wants a numpy.ndarray, not a jax.Array"):
            host_tree(HostLayer(jnp.zeros((2, 3))))


def test_static_spelling_with_typeguard_and_annotated():
    typeguard.check_type(jnp.zeros(2), f32[jax.Array, b"n"])
    with pytest.raises(TypeCheckError, match=r"wants a jax.Array"):
        typeguard.check_type(np.zeros(2, np.float32), f32[jax.Array, b"n"])
    typeguard.check_type(jnp.zeros(2), Annotated[jax.Array, f32[jax.Array, b"n"]])
    with pytest.raises(TypeCheckError):
        typeguard.check_type(jnp.zeros(2, jnp.int32), Annotated[jax.Array, f32[jax.Array, b"n"]])


def test_a_bare_dtype_class_is_a_malformed_annotation():
    with pytest.raises(TypeCheckError, match=r"malformed annotation f32"):
        typeguard.check_type(jnp.zeros(2), f32)


def test_static_spelling_in_derivation():
    mesh = make_mesh("explicit")
    assert make_partition_specs(f32[jax.Array, b"a/d b"]) == jax.sharding.PartitionSpec("d", None)
    struct = make_shape_dtype_structs(f32[jax.Array, b"a/d b"], {"a": 8, "b": 2}, mesh)
    assert struct.shape == (8, 2) and struct.sharding.spec == jax.sharding.PartitionSpec("d", None)


# ---------------------------------------------------------------------------------------------
# Stacked.


def test_stacked_is_array_with_the_arguments_swapped():
    assert Stacked[Layer, b"layers"] is Array["layers", Layer]
    assert Stacked[Layer, "layers/p"] is Array["layers/p", Layer]
    assert Stacked[f32[jax.Array, b"e"], b"layers"] is f32[jax.Array, b"layers e"]
    assert Stacked[f32[b"e"], b"layers"] is f32[b"layers e"]
    stacked = Stacked[Layer, b"layers"]
    assert typing.get_type_hints(stacked)["w"] is f32[jax.Array, b"layers embed hidden"]


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda: Stacked[Layer], r"write Stacked\[cls, axes\]"),
        (lambda: Stacked["layers", Layer], r"takes the class first"),
        (lambda: Stacked[Layer, b"*x"], r"cannot be variadic"),
    ],
)
def test_stacked_errors(make, message):
    with pytest.raises(TypeError, match=message):
        make()


def test_stacked_field_checks_a_slice_as_the_layer():
    @pytree_dataclass
    class Model:
        layers: Stacked[Layer, b"layers"]

    @typechecked
    def step(model: Model) -> f32[jax.Array, b"hidden"]:
        def body(carry, layer: Layer):
            return carry + checked_layer(layer), None

        out, _ = jax.lax.scan(body, jnp.zeros(3), model.layers)
        return out

    @typechecked
    def checked_layer(layer: Layer) -> f32[jax.Array, b"hidden"]:
        return layer.b

    model = Model(Array["layers", Layer](jnp.zeros((2, 4, 3)), jnp.ones((2, 3))))
    assert step(model).tolist() == [2.0, 2.0, 2.0]


# --- issue 19, item 8: an annotation as the array type (jaxtyping's nesting) ---------------------


def test_an_annotation_as_the_array_type_prepends_the_outer_dims():
    assert floating[floating[jax.Array, b"a"], b"b"] is floating[jax.Array, b"b a"]
    assert floating[f32[jax.Array, b"embed/t"], b"batch/d"] is f32[jax.Array, b"batch/d embed/t"]
    assert f32[floating[b"a"], "b"] is f32[b"b a"]  # no array type inside: none outside
    assert f32[f32[np.ndarray, b"*rest"], b"lead"] is f32[np.ndarray, b"lead *rest"]
    assert floating[f32[jax.Array, b"a"], b""] is f32[jax.Array, b"a"]
    nested = floating[floating[jax.Array, b"a"], b"b"]
    assert pickle.loads(pickle.dumps(nested)) is nested


def test_a_nested_annotation_checks_the_whole_shape(mesh):
    """A rank-1 value passed floating[floating[jax.Array, b'a'], b'b'] before."""
    nested = floating[f32[jax.Array, b"embed/t"], b"batch/d"]

    @typechecked
    def f(x: nested) -> f32[b"batch/d"]:
        return x.sum(-1)

    x = put(mesh, jnp.zeros((8, 4)), "d", "t")
    assert f(x).shape == (8,)
    assert jax.jit(f)(x).shape == (8,)
    with pytest.raises(TypeCheckError, match=r"is not f32\[jax.Array, b'batch/d embed/t'\]: has 1 dim"):
        f(jnp.zeros(8))
    with pytest.raises(TypeCheckError, match=r"is not f32\[jax.Array, b'batch/d embed/t'\]"):
        f(put(mesh, jnp.zeros((8, 4)), "d", None))  # embed not sharded over t
    assert make_partition_specs(nested) == jax.sharding.PartitionSpec("d", "t")


@pytest.mark.parametrize("make, message", [
    (lambda: f32[i32[b"a"], b"b"], r"f32\[i32\[b'a'\], b'b'\]: no dtype is both f32 and i32"),
    (lambda: floating[shardtypes.integer[jax.Array, b"a"], b"b"], r"no dtype is both floating and integer"),
    (lambda: f32[f32[b"a/d"], b"b/d"], r"means shape 'b/d a/d' \(the outer dims first\), which is not a shape: .*mesh axis 'd' shards both"),
    (lambda: f32[f32[b"..."], b"*lead"], r"means shape '\*lead \.\.\.' .*second variadic dim"),
    (lambda: floating[f32, b"a"], r"array_type is the dtype class f32, which has no shape; write floating\[jax.Array, shape\]"),
])
def test_a_nested_annotation_that_cannot_mean_anything_is_refused(make, message):
    with pytest.raises(TypeError, match=message):
        make()
