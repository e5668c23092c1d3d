"""``PyTree[X]`` as an annotation: one class per leaf annotation, its repr, pickling, and the
spellings it refuses (with what to write instead)."""

import pickle

import pytest

from shardtypes import PyTree, f32, pytree_dataclass
from shardtypes.model import PyTreeNode, model

Tree = PyTree[f32[b"batch embed"]]


@pytree_dataclass
class Layer:
    w: f32[b"embed hidden"]


def test_model_node():
    node = model(Tree)
    assert isinstance(node, PyTreeNode) and node.has_arrays and node.leaf_class is None
    assert model(PyTree[Layer]).leaf_class is Layer


def test_nested_pytree_is_the_same_class_and_pickles():
    assert PyTree[Tree] is Tree
    assert PyTree[f32["batch embed"]] is Tree
    assert pickle.loads(pickle.dumps(Tree)) is Tree
    assert pickle.loads(pickle.dumps(PyTree)) is PyTree
    assert repr(Tree) == "shardtypes.PyTree[f32[b'batch embed']]"
    assert repr(PyTree[Layer]) == "shardtypes.PyTree[Layer]"
    with pytest.raises(TypeError, match=r"is an annotation, not a class to instantiate"):
        Tree()


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: PyTree[3], r"PyTree\[3\]: the leaf annotation must be a shardtypes annotation: an array annotation"),
        (lambda: PyTree[int], r"PyTree\[int\]: the leaf annotation must be a shardtypes annotation.*got int"),
        (lambda: PyTree[f32], r"PyTree\[f32\]: f32 has no shape; write f32\[b'...'\] for any shape"),
        (lambda: PyTree[f32[b"a"], "T"], r"PyTree\[f32\[b'a'\], 'T'\]: shardtypes' PyTree takes one leaf annotation.*"
                                          r"jaxtyping's structure argument \(PyTree\[X, 'T'\]\) is not supported"),
        (lambda: PyTree[tuple[f32[b"a"], f32[b"b"]]], r"JAX flattens tuples, lists and dicts, so they are never leaves"),
        (lambda: PyTree["f32[b'a']"], r"the leaf annotation is a string"),
        (lambda: PyTree[PyTree], r"PyTree\[PyTree\]: say what the leaves are"),
    ],
)
def test_bad_spellings(make, message):
    with pytest.raises(TypeError, match=message):
        make()
