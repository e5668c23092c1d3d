"""The array class of an annotation may be a union of array classes (host-or-device,
``f32[jax.Array | np.ndarray, b'...']``): one class whatever the spelling, pickled to itself,
and every member a class of arrays, checked where the annotation is written. The check itself
is in tests/checking/test_host_or_device.py."""

import pickle
from typing import Union

import jax
import numpy as np
import pytest

import shardtypes
from shardtypes import HostOrDevice, f32

HOST_OR_DEVICE = f32[jax.Array | np.ndarray, b"batch/d embed"]


def test_the_union_is_one_annotation_whatever_its_spelling():
    assert HOST_OR_DEVICE is f32[Union[jax.Array, np.ndarray], b"batch/d embed"]
    assert HOST_OR_DEVICE is f32[np.ndarray | jax.Array, "batch/d embed"]
    assert HOST_OR_DEVICE is f32[HostOrDevice, b"batch/d embed"]
    assert repr(HOST_OR_DEVICE) == "shardtypes.f32[jax.Array | numpy.ndarray, b'batch/d embed']"
    assert pickle.loads(pickle.dumps(HOST_OR_DEVICE)) is HOST_OR_DEVICE
    assert f32[jax.Array | jax.Array, b"a"] is f32[jax.Array, b"a"]  # a union of one is the class


@pytest.mark.parametrize("array_type, member", [
    (int | np.ndarray, "int"),
    (jax.Array | str, "str"),
    (Union[jax.Array, list], "list"),
])
def test_a_union_with_a_class_that_is_not_of_arrays_is_an_error(array_type, member):
    with pytest.raises(TypeError, match=rf"f32\[.* \| .*, b'batch embed'\]: each member of the union of array "
                                         rf"classes must be a class of arrays .*got {member}"):
        f32[array_type, b"batch embed"]


def test_an_optional_array_class_points_to_the_optional_annotation():
    with pytest.raises(TypeError, match=r"f32\[jax.Array \| None, b'a'\]: None is not an array class; an "
                                         r"optional array is f32\[array_type, shape\] \| None"):
        f32[jax.Array | None, b"a"]


def test_the_alias_is_public():
    assert shardtypes.HostOrDevice == Union[jax.Array, np.ndarray]
    assert "HostOrDevice" in shardtypes.__all__ and "is_instance" in shardtypes.__all__
