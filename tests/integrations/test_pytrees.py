"""``PyTree[X]`` checked everywhere annotations go: ``typechecked`` arguments and returns (eager
and under jit, on Explicit and Auto meshes), plain typeguard, annotated locals, ``isinstance``,
dataclass fields; dim names bound across leaves; messages with the leaves' key paths."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import typeguard
from hypothesis import given, settings, strategies as st

from shardtypes import (
    Array,
    PyTree,
    Scope,
    TypeCheckError,
    dims,
    f32,
    i32,
    pytree_dataclass,
    typechecked,
)
from shardtypes.model import model

from conftest import put

Tree = PyTree[f32[b"batch embed"]]
Sharded = PyTree[f32[b"batch/d embed"]]


def z(*shape, dtype=np.float32):
    return np.zeros(shape, dtype)


@pytree_dataclass
class Layer:
    w: f32[b"embed hidden"]
    b: f32[b"hidden"]


@typechecked
def total(tree: Tree) -> f32[b"batch"]:
    return sum(jnp.sum(x, axis=1) for x in jax.tree.leaves(tree))


def test_any_structure_passes_and_binds_across_leaves():
    tree = {"a": z(2, 3), "b": [z(2, 3), None, (z(2, 3),)]}
    assert total(tree).shape == (2,)
    assert total(z(2, 3)).shape == (2,)  # a single array is a tree of one leaf
    with pytest.raises(TypeCheckError, match=r"x\['b'\]\[1\] is not f32\[b'batch embed'\]: dimension 'batch' is 5 "
                                             r"here \(dim 0\) but was bound to 2 by x\['a'\]"):
        check_args({"a": z(2, 3), "b": [z(2, 3), z(5, 3)]})


@typechecked
def check_args(x: Tree) -> None:
    pass


def test_failure_names_the_leaf_and_what_was_found():
    with pytest.raises(TypeCheckError, match=r"argument \"x\" \(dict\) of check_args\(\): x\['w'\]\.?\S* is not "
                                             r"f32\[b'batch embed'\]: has dtype int32.*found int32\[2,3\]"):
        check_args({"w": z(2, 3, dtype=np.int32)})
    with pytest.raises(TypeCheckError, match=r"x\[0\] is not f32\[b'batch embed'\]: has 1 dim \[3\] but the annotation has 2"):
        check_args([z(3)])
    with pytest.raises(TypeCheckError, match=r"x\['s'\] is not f32\[b'batch embed'\]: found a str, which is not an array"):
        check_args({"s": "text"})
    with pytest.raises(TypeCheckError, match=r"argument \"x\" \(jax.Array\) of check_args\(\) is not f32\[b'batch embed'\]"):
        check_args(jnp.zeros(3))  # the value itself is the one leaf: no path


def test_none_and_empty_trees_pass():
    check_args(None)
    check_args({})
    check_args([None, {}])


def test_dims_bound_by_leaves_reach_the_rest_of_the_call():
    @typechecked
    def f(tree: Tree, y: f32[b"batch"]) -> None:
        assert dims() == {"batch": 2, "embed": 3}

    f({"a": z(2, 3)}, z(2))
    with pytest.raises(TypeCheckError, match=r"argument \"y\".*dimension 'batch' is 4 here.*bound to 2 by tree\['a'\]"):
        f({"a": z(2, 3)}, z(4))


def test_a_failed_tree_binds_nothing():
    with Scope():
        with pytest.raises(TypeCheckError):
            typeguard.check_type({"a": z(2, 3), "b": z(7, 3, dtype=np.int32)}, Tree)
        assert dict(dims()) == {}


def test_fast_path_still_checks_every_leaf():
    good = {"a": jnp.zeros((2, 3)), "b": jnp.zeros((2, 3))}
    for _ in range(3):
        check_args(good)  # the structure is learnt after the first call
    assert model(Tree).layouts  # the fast path for trees knows this structure now
    with pytest.raises(TypeCheckError, match=r"x\['b'\].*dimension 'batch' is 4 here"):
        check_args({"a": jnp.zeros((2, 3)), "b": jnp.zeros((4, 3))})
    with pytest.raises(TypeCheckError, match=r"x\['b'\].*has dtype int32"):
        check_args({"a": jnp.zeros((2, 3)), "b": jnp.zeros((2, 3), jnp.int32)})


def test_sharding_is_checked_per_leaf(mesh):
    @typechecked
    def f(tree: Sharded) -> None:
        pass

    good = {"a": put(mesh, z(8, 2), "d"), "b": [put(mesh, z(8, 2), "d")]}
    f(good)
    bad = {"a": put(mesh, z(8, 2), "d"), "b": [put(mesh, z(8, 2), None)]}
    with pytest.raises(TypeCheckError, match=r"tree\['b'\]\[0\] is not f32\[b'batch/d embed'\]"):
        f(bad)


def test_under_jit_on_both_mesh_kinds(mesh):
    @jax.jit
    @typechecked
    def f(tree: Sharded) -> PyTree[f32[b"batch/d embed"]]:
        return jax.tree.map(lambda x: x * 2, tree)

    with jax.set_mesh(mesh):
        good = {"a": put(mesh, z(8, 2), "d"), "b": put(mesh, z(8, 2), "d")}
        assert jax.tree.leaves(f(good))[0].shape == (8, 2)
        with pytest.raises(TypeCheckError, match=r"tree\['b'\].*dimension 'batch' is 16 here.*bound to 8 by tree\['a'\]"):
            f({"a": put(mesh, z(8, 2), "d"), "b": put(mesh, z(16, 2), "d")})
        with pytest.raises(TypeCheckError, match=r"tree\['b'\].*f32\[b'batch/d embed'\]"):
            f({"a": put(mesh, z(8, 2), "d"), "b": put(mesh, z(8, 2), None)})


def test_return_value_and_annotated_locals():
    @typechecked
    def f(x: f32[b"n"]) -> PyTree[f32[b"n"]]:
        pairs: PyTree[f32[b"n"]] = {"x": x, "y": x + 1}
        return [pairs, x[:1]]

    with pytest.raises(TypeCheckError, match=r"the return value.*of .*f\(\): \[1\] is not f32\[b'n'\]: dimension 'n' is 1"):
        f(z(3))

    @typechecked
    def g(x: f32[b"n"]) -> None:
        local: PyTree[f32[b"n"]] = {"bad": x[:2]}
        del local

    with pytest.raises(TypeCheckError, match=r"local.*\['bad'\] is not f32\[b'n'\]"):
        g(z(3))


def test_plain_typeguard_and_check_type():
    @typeguard.typechecked
    def f(tree: Tree) -> None:
        pass

    f({"a": z(2, 3)})
    with pytest.raises(TypeCheckError, match=r"argument \"tree\" \(dict\) of .*f\(\): tree\['b'\] is not .*dimension 'batch' is 1"):
        f({"a": z(2, 3), "b": z(1, 3)})
    typeguard.check_type([z(2, 3), z(2, 3)], Tree)
    with pytest.raises(TypeCheckError, match=r"\[1\] is not f32\[b'batch embed'\]: dimension 'batch' is 1 here.*bound to 2 by \[0\]"):
        typeguard.check_type([z(2, 3), z(1, 3)], Tree)


def test_isinstance():
    assert isinstance({"a": z(2, 3), "b": [z(2, 3)]}, Tree)
    assert not isinstance({"a": z(2, 3), "b": [z(4, 3)]}, Tree)  # names bind across leaves
    assert not isinstance({"a": "text"}, Tree)
    assert isinstance(None, Tree)
    with Scope(batch=4):
        assert not isinstance([z(2, 3)], Tree)
    with pytest.raises(TypeError, match=r"isinstance\(x, PyTree\): say what the leaves are"):
        isinstance([], PyTree)


def test_leaves_that_are_annotated_classes():
    @typechecked
    def f(layers: PyTree[Layer]) -> None:
        assert dims()["hidden"] == 4

    layer = Layer(z(3, 4), z(4))
    f({"enc": [layer, layer], "dec": layer})
    with pytest.raises(TypeCheckError, match=r"layers\['enc'\]\[0\]\.w is not f32\[b'embed hidden'\]: dimension "
                                             r"'hidden' is 5 here \(dim 1\) but was bound to 4 by layers\['dec'\]\.w"):
        f({"dec": layer, "enc": [Layer(z(3, 5), z(5))]})
    with pytest.raises(TypeCheckError, match=r"layers\['enc'\] is not an instance of .*Layer \(found jax.Array\)"):
        f({"enc": jnp.zeros(3)})


def test_stacked_class_leaves():
    Stacked = Array["layers", Layer]
    layer = Layer(z(3, 4), z(4))
    stacked = jax.tree.map(lambda a: np.stack([a, a]), layer)
    typeguard.check_type({"s": Stacked(stacked.w, stacked.b)}, PyTree[Stacked])


def test_dataclass_fields():
    @pytree_dataclass
    class State:
        params: PyTree[f32[b"batch embed"]]
        step: i32[b""]

    @typechecked
    def f(state: State) -> None:
        pass

    f(State({"w": z(2, 3)}, np.int32(0)))
    with pytest.raises(TypeCheckError, match=r"state\.params\['w'\]\[1\] is not f32\[b'batch embed'\]: dimension 'batch' is 9"):
        f(State({"w": [z(2, 3), z(9, 3)]}, np.int32(0)))


# Random trees: the verdict of PyTree[X] is that of checking each leaf with X in one table.
_leaf_shapes = st.tuples(st.sampled_from([1, 2, 3]), st.sampled_from([2, 3]))
_trees = st.recursive(
    _leaf_shapes,
    lambda children: st.one_of(
        st.lists(children, max_size=3),
        st.dictionaries(st.sampled_from("abc"), children, max_size=3),
        st.tuples(children, st.none()),
    ),
    max_leaves=6,
)


def _arrays(shapes):
    return jax.tree.map(lambda s: np.zeros(s, np.float32), shapes, is_leaf=lambda s: isinstance(s, tuple) and
                        len(s) == 2 and all(isinstance(i, int) for i in s))


@settings(max_examples=60, deadline=None)
@given(_trees)
def test_verdict_is_each_leaf_in_one_table(shapes):
    tree = _arrays(shapes)
    expected = True
    with Scope():
        for leaf in jax.tree.leaves(tree):
            try:
                typeguard.check_type(leaf, f32[b"batch embed"])
            except TypeCheckError:
                expected = False
                break
    with Scope():
        try:
            typeguard.check_type(tree, Tree)
            verdict = True
        except TypeCheckError:
            verdict = False
        if not verdict:
            assert dict(dims()) == {}  # a failed tree leaves nothing behind
    assert verdict == expected
    assert isinstance(tree, Tree) == expected


def test_optional_and_containers_of_a_pytree():
    from typing import Optional

    @typechecked
    def takes(a: Optional[Tree], b: list[Tree], c: tuple[Tree, ...]) -> None:
        pass

    takes(None, [{"w": z(2, 3)}], ({"w": z(2, 3)}, [z(2, 3)]))
    with pytest.raises(TypeCheckError, match=r"is not f32\[b'batch embed'\]: has 1 dim \[3\] but the annotation has 2"):
        takes({"w": z(3)}, [], ())
    with pytest.raises(TypeCheckError, match=r"\['w'\] is not f32\[b'batch embed'\]: has 1 dim"):
        takes(None, [{"w": z(3)}], ())
    with pytest.raises(TypeCheckError, match=r"dimension 'batch' is 5 here"):
        takes(None, [{"w": z(2, 3)}], ({"w": z(5, 3)},))  # batch binds across the arguments
