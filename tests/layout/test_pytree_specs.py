"""Layouts for ``PyTree[X]``: the annotation alone has no structure (an error naming the fix); a
value tree with ``like=PyTree[X]`` gets X's layout at each leaf."""

import jax
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec as P

from shardtypes import PyTree, f32, make_partition_specs, make_shape_dtype_structs, make_shardings, pytree_dataclass

Grads = PyTree[f32[b"batch/d embed/t"]]


@pytree_dataclass
class Layer:
    w: f32[b"embed/d hidden/t"]


def z(*shape):
    return np.zeros(shape, np.float32)


def test_the_annotation_alone_names_the_fix():
    with pytest.raises(TypeError, match=r"make_partition_specs: the annotation is shardtypes.PyTree\[f32\[b'batch/d embed/t'\]\], "
                                        r"whose structure is the value's.*make_partition_specs\(params, like="):
        make_partition_specs(Grads)
    with pytest.raises(TypeError, match=r"whose structure is the value's"):
        make_partition_specs({"a": Grads})


def test_value_tree_with_like_gets_x_at_each_leaf(mesh):
    values = {"a": z(8, 2), "b": [z(8, 2), None]}
    assert make_partition_specs(values, like=Grads) == {"a": P("d", "t"), "b": [P("d", "t"), None]}
    shardings = make_shardings(values, mesh, like=Grads)
    assert shardings["b"][0] == NamedSharding(mesh, P("d", "t"))
    structs = make_shape_dtype_structs(values, {"batch": 8, "embed": 4}, mesh, like=Grads)
    assert structs["a"].shape == (8, 4) and structs["b"][1] is None
    # The result lays the values out as annotated:
    placed = jax.device_put({"a": z(8, 2), "b": [z(8, 2), None]}, shardings)
    assert placed["a"].sharding == NamedSharding(mesh, P("d", "t"))


def test_class_leaves():
    layer = Layer(z(8, 2))
    specs = make_partition_specs({"enc": [layer, layer]}, like=PyTree[Layer])
    assert specs == {"enc": [Layer(P("d", "t")), Layer(P("d", "t"))]}


def test_leaves_that_do_not_fit():
    with pytest.raises(TypeError, match=r"make_partition_specs: \['a'\]\[0\] is int, not an array; like= "
                                        r"shardtypes.PyTree\[f32\[b'batch/d embed/t'\]\] wants a tree of arrays"):
        make_partition_specs({"a": [3]}, like=Grads)
    with pytest.raises(TypeError, match=r"\['a'\] is jax.Array, not a Layer; like= shardtypes.PyTree\[Layer\] wants a tree of them"):
        make_partition_specs({"a": jax.numpy.zeros(3)}, like=PyTree[Layer])
