"""The texts of the checker's error messages: where a clashing dim was bound, the sharding, the
return value, an annotated local, check_type's annotation, a value that is not an array, a
misspelt mesh axis, a failed tuple return, and the public class typeguard raises (issue 19).
"""

import re

import jax
import jax.numpy as jnp
import pytest
import typeguard
from typeguard import TypeCheckError, check_type

import shardtypes
from shardtypes import f32, typechecked
from shardtypes.language import CHECK_FAILED

from check_kit import S, add, center, ct, local_slice, npz, ones, ret_slice
from conftest import make_mesh, put

# ---------------------------------------------------------------------------------------------
# Error messages.


def test_message_argument_clash_names_where_the_dim_was_bound(mesh):
    x, y = put(mesh, ones(8, 16), "d"), put(mesh, ones(8, 12), "d")
    with pytest.raises(TypeCheckError) as info:
        add(x, y)
    message = str(info.value)
    assert message.startswith('argument "y"')
    assert "of add() is not f32[b'b/d e']" in message
    assert "dimension 'e' is 12 here (dim 1) but was bound to 16 by argument \"x\" of add()" in message
    assert "(found float32[8,12] sharded P('d', None))" in message


def test_message_sharding(mesh):
    x = put(mesh, ones(8, 16), "d")
    with pytest.raises(TypeCheckError) as info:
        add(x, put(mesh, ones(8, 16), None, "d"))
    message = str(info.value)
    assert 'argument "y"' in message and "of add()" in message
    assert "f32[b'b/d e']" in message
    assert "sharding is P(None, 'd') but the annotation says P('d', None)" in message
    assert "found float32[8,16] sharded P(None, 'd')" in message


def test_message_return_value(mesh):
    with pytest.raises(
        TypeCheckError,
        match=r"^the return value .*of ret_slice\(\) is not f32\[b'b/d e'\]: "
        + re.escape("dimension 'e' is 12 here (dim 1) but was bound to 16 by argument \"x\" of ret_slice()"),
    ) as info:
        ret_slice(put(mesh, ones(8, 16), "d"))
    assert "float32[8,12]" in str(info.value)


def test_message_annotated_local(mesh):
    with pytest.raises(
        TypeCheckError,
        match=r"value assigned to y .*of local_slice\(\) is not f32\[b'b/d e'\]: "
        + re.escape("dimension 'e' is 12 here (dim 1) but was bound to 16 by argument \"x\" of local_slice()"),
    ):
        local_slice(put(mesh, ones(8, 16), "d"))


def test_message_check_type_names_the_annotation():
    with pytest.raises(TypeCheckError) as info:
        ct(npz(8, 12), f32[b"b 16"])
    message = str(info.value)
    assert "f32[b'b 16']" in message and "float32[8,12]" in message


@pytest.mark.parametrize("value", [[1.0, 2.0], "x", None], ids=["list", "str", "None"])
def test_message_non_array(value):
    with pytest.raises(TypeCheckError, match=r'argument "x" .*of center\(\) is not f32.*is not an array'):
        center(value)
    with pytest.raises(TypeCheckError, match="is not an array"):
        ct(value, f32[b""])


def test_failures_are_type_check_errors_only(mesh):
    # Every failure is a TypeCheckError: no bare AssertionError / KeyError / ValueError escapes.
    values = [put(mesh, ones(8, 16), None, "d"), npz(8, 16), ones(8, 16), object(), S((8,), jnp.float32)]
    for value in values:
        for annotation in (f32[b"b/d e"], f32[b"b/q e"], f32[b"*v n+1"], f32[b"#n n"]):
            with pytest.raises(TypeCheckError):
                ct(value, annotation)


def test_misspelt_mesh_axis_suggests_the_close_one():
    mesh = make_mesh("explicit", (4, 2), ("data", "model"))
    x = put(mesh, jnp.ones((8, 16)), None, "model")
    with pytest.raises(TypeCheckError, match=re.escape(
        "mesh axis 'modle' is not in the array's mesh, which has axes ('data', 'model'); "
        "did you mean 'model'?"
    )):
        typeguard.check_type(x, f32[b"embed hidden/modle"])


@typechecked
def _pair(x: f32[b"a"]) -> tuple[f32[b"a"], f32[b"a"]]:
    return x  # not a tuple


@pytest.mark.parametrize("jit", [False, True])
def test_a_failed_tuple_return_names_the_function_and_public_classes(jit):
    """Issue 19, item 2: 'the return value (jaxlib._jax.ArrayImpl) is not a tuple', no function."""
    call = jax.jit(_pair) if jit else _pair
    found = "traced jax.Array" if jit else "jax.Array"
    with pytest.raises(TypeCheckError) as info:
        call(jnp.zeros(3))
    assert str(info.value) == f"the return value ({found}) of _pair() is not a tuple\n{CHECK_FAILED.line}"
    assert type(info.value) is TypeCheckError


def test_the_array_error_typeguard_raises_has_a_public_name():
    """Issue 19, item 2: tracebacks, pytest and type(e).__name__ said _ArrayError."""
    import traceback

    with pytest.raises(shardtypes.ArrayError) as info:
        check_type(jnp.zeros((2, 3)), f32[b"a"])
    error = info.value
    assert type(error).__name__ == "ArrayError" and isinstance(error, TypeCheckError)
    shown = "".join(traceback.format_exception_only(type(error), error))
    assert shown.startswith("shardtypes.ArrayError: jax.Array is not f32[b'a']: has 2 dims"), shown
