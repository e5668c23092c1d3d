"""The typeguard integration's error messages (docs/design.md, "Errors"): the function, argument,
annotation, what was found and where a clashing dim was bound; FieldError (a public name, a
message that reads well, it pickles); check()'s argument errors; and JAX's public class names in
failures under plain typeguard too (issue 19).
"""

import re
import types

import jax.numpy as jnp
import numpy as np
import pytest
import typeguard
from typeguard import TypeCheckError

import shardtypes
from shardtypes import (
    Scope,
    f32,
    typechecked,
)
from shardtypes.language import CHECK_FAILED

from typeguard_kit import I, Z

# ---------------------------------------------------------------------------------------------
# Error messages: function, argument, annotation, what was found, where a clashing dim was bound.


@typechecked
def center(x: f32[b"batch embed"], bias: f32[b"embed"]) -> f32[b"batch embed"]:
    return x


def test_message_names_function_argument_annotation_found_and_origin():
    with pytest.raises(TypeCheckError) as info:
        center(Z(8, 16), Z(32))
    assert str(info.value) == (
        'argument "bias" (numpy.ndarray) of center() is not f32[b\'embed\']: '
        "dimension 'embed' is 32 here (dim 0) but was bound to 16 by argument \"x\" of center() "
        "(found float32[32] (numpy, on the host))\n"
        f"{CHECK_FAILED.line}"
    )


def test_message_for_wrong_dtype():
    with pytest.raises(TypeCheckError, match=re.escape(
        'argument "x" (numpy.ndarray) of center() is not f32[b\'batch embed\']: has dtype int32, '
        "the annotation wants float32 (found int32[8,16] (numpy, on the host))"
    )):
        center(I(8, 16), Z(16))


def test_message_for_wrong_rank_with_jax_array():
    with pytest.raises(TypeCheckError, match=re.escape(
        'argument "x" (jax.Array) of center() is not f32[b\'batch embed\']: has 3 dims [2,4,16] '
        "but the annotation has 2 (found float32[2,4,16] with SingleDeviceSharding)"
    )):
        center(jnp.zeros((2, 4, 16)), jnp.zeros((16,)))


def test_message_for_return_value():
    @typechecked
    def shrink(x: f32[b"batch embed"]) -> f32[b"batch embed"]:
        return x[:, :-1]

    with pytest.raises(TypeCheckError, match=re.escape(
        "the return value (numpy.ndarray) of test_message_for_return_value.<locals>.shrink() is not "
        "f32[b'batch embed']: dimension 'embed' is 15 here (dim 1) but was bound to 16 by argument \"x\" of "
        "test_message_for_return_value.<locals>.shrink() (found float32[8,15] (numpy, on the host))"
    )):
        shrink(Z(8, 16))


def test_message_for_local_and_local_origin():
    @typechecked
    def body(k: int) -> None:
        a: f32[b"m"] = Z(3)
        b: f32[b"m"] = Z(k)

    with pytest.raises(TypeCheckError, match=re.escape(
        "value assigned to b (numpy.ndarray) of test_message_for_local_and_local_origin.<locals>.body() "
        "is not f32[b'm']: dimension 'm' is 4 here (dim 0) but was bound to 3 by the value assigned to a of "
        "test_message_for_local_and_local_origin.<locals>.body()"
    )):
        body(4)


def test_message_origin_names_argument_inside_container():
    @typechecked
    def pairs(xs: tuple[f32[b"n"], f32[b"m"]], y: f32[b"n"]) -> None:
        pass

    with pytest.raises(TypeCheckError, match=re.escape(
        "dimension 'n' is 4 here (dim 0) but was bound to 2 by argument \"xs\" of "
        "test_message_origin_names_argument_inside_container.<locals>.pairs()"
    )):
        pairs((Z(2), Z(3)), Z(4))


def test_message_origin_survives_rebinding_the_argument():
    @typechecked
    def rebinds(x: f32[b"n"]) -> f32[b"n"]:
        x0 = x
        x = x * 2
        locals()
        return Z(5)

    with pytest.raises(TypeCheckError, match=re.escape('but was bound to 2 by argument "x" of')):
        rebinds(Z(2))


def test_message_names_caller_as_origin_in_callee_clash():
    @typechecked
    def outer(x: f32[b"batch embed"]) -> f32[b"batch embed"]:
        return center(x, Z(4))

    with pytest.raises(TypeCheckError, match=re.escape(
        'argument "bias" (numpy.ndarray) of center() is not f32[b\'embed\']: dimension \'embed\' is 4 here '
        '(dim 0) but was bound to 16 by argument "x" of '
        "test_message_names_caller_as_origin_in_callee_clash.<locals>.outer()"
    )):
        outer(Z(8, 16))


def test_message_names_scope_as_origin():
    with Scope(embed=8):
        with pytest.raises(TypeCheckError, match=re.escape(
            'argument "x" (numpy.ndarray) of center() is not f32[b\'batch embed\']: dimension \'embed\' is 16 '
            "here (dim 1) but was bound to 8 by Scope(embed=8)"
        )):
            center(Z(8, 16), Z(16))


def test_message_for_check_type_origin():
    with Scope():
        typeguard.check_type(Z(4), f32[b"embed"])
        with pytest.raises(TypeCheckError, match=re.escape(
            "numpy.ndarray is not f32[b'embed']: dimension 'embed' is 5 here (dim 0) but was bound to 4 "
            "by check_type() (found float32[5] (numpy, on the host))"
        )):
            typeguard.check_type(Z(5), f32["embed"])


def test_message_for_malformed_annotation():
    with pytest.raises(TypeCheckError, match=re.escape("has a malformed annotation f32")):
        typeguard.check_type(Z(2), types.GenericAlias(f32, (3,)))  # built around __class_getitem__


def test_shardtypes_exports_typecheckerror():
    assert shardtypes.TypeCheckError is TypeCheckError


def test_unresolvable_annotations_name_the_function(tmp_path):
    """A PEP 563 annotation naming something that never exists: a NameError at the first call
    (not at decoration, where a forward reference may still be defined later), naming who asked."""
    import importlib.util

    import shardtypes

    source = (
        "from __future__ import annotations\n"
        "import shardtypes\n"
        "@shardtypes.typechecked\n"
        "def f(x: Missing) -> None: ...\n"
        "def g(x: Missing) -> None: ...\n"
    )
    path = tmp_path / "unresolvable.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("unresolvable", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    with pytest.raises(NameError, match=r"shardtypes.typechecked cannot resolve the annotations of "
                                        r"unresolvable.f: NameError: name 'Missing' is not defined"):
        module.f(1)
    report = shardtypes.verify(module.g, {"d": 2})
    assert [p.kind for p in report.problems] == ["setup"]
    assert "verify cannot resolve the annotations of unresolvable.g" in str(report.problems[0])


# ---------------------------------------------------------------------------------------------
# FieldError: a public name, a message without a stray space, and it pickles.


@shardtypes.pytree_dataclass
class _Inner:
    embed: shardtypes.f32["vocab d"]


@shardtypes.pytree_dataclass
class _Outer:
    weights: _Inner


def test_field_error_is_public_and_reads_well_under_check_type():
    import copy
    import pickle

    bad = _Outer(_Inner(jnp.zeros((3, 4), jnp.bfloat16)))
    with pytest.raises(shardtypes.FieldError) as info:
        typeguard.check_type(bad, _Outer)
    e = info.value
    assert type(e).__module__ == "shardtypes" and type(e).__qualname__ == "FieldError"
    assert repr(type(e)) == "<class 'shardtypes.FieldError'>"
    assert str(e).startswith(f"{__name__}._Outer.weights.embed is not f32[b'vocab d']: has dtype bfloat16")
    assert e.fields == ["weights", "embed"]
    for again in (pickle.loads(pickle.dumps(e)), copy.deepcopy(e)):
        assert type(again) is shardtypes.FieldError
        assert str(again) == str(e) and again.fields == e.fields and again.core == e.core


def test_field_error_under_typechecked_names_the_argument_path():
    @typechecked
    def step(state: _Outer) -> None:
        pass

    with pytest.raises(shardtypes.FieldError,
                       match=r'argument "state" \(.*_Outer\) of .*step\(\): state\.weights\.embed is not'):
        step(_Outer(_Inner(jnp.zeros((3,), jnp.float32))))


@pytest.mark.parametrize("dtype, shape, message", [
    ("f32", "a", "check(): dtype must be a shardtypes dtype class (f32, floating, ...) or a numpy/JAX dtype"),
    (object, "a", "check(): dtype must be a shardtypes dtype class"),
    (shardtypes.f32[b"a"], "a b", "check(): dtype is the annotation shardtypes.f32[b'a'], which has a shape of its own"),
    (shardtypes.f32, 3, "check(): shape_spec must be a shape string ('batch embed') or a ShapeSpec, got 3"),
    (shardtypes.f32, None, "check(): shape_spec must be a shape string"),
])
def test_check_validates_its_arguments(dtype, shape, message):
    with pytest.raises(TypeError) as info:
        shardtypes.check(dtype, shape, np.zeros(3, np.float32))
    assert message in str(info.value)


def test_check_accepts_dtype_names_and_abstract_numpy_types():
    shardtypes.check("float32", "a", np.zeros(3, np.float32))
    shardtypes.check(np.floating, "a", np.zeros(3, np.float16))
    shardtypes.check(np.integer, "a", np.zeros(3, np.int8))
    with pytest.raises(TypeCheckError, match="the annotation wants any floating dtype"):
        shardtypes.check(np.floating, "a", np.zeros(3, np.int8))


@shardtypes.pytree_dataclass
class _Base:
    w: shardtypes.f32["a"]


@shardtypes.pytree_dataclass
class _Sub(_Base):
    v: shardtypes.f32["a"]


def test_subclass_of_a_pytree_dataclass_is_accepted_and_checked_whole():
    @typechecked
    def g(b: _Base) -> None:
        pass

    g(_Sub(jnp.zeros(3), jnp.zeros(3)))
    with pytest.raises(shardtypes.FieldError, match=r"b\.v is not f32\[b'a'\]: dimension 'a' is 4 here"):
        g(_Sub(jnp.zeros(3), jnp.zeros(4)))

    class Unregistered(_Base):
        pass

    with pytest.raises(TypeCheckError, match="Unregistered subclasses _Base but is not registered as a pytree: "
                                             "decorate it with @pytree_dataclass too"):
        g(Unregistered(jnp.zeros(3)))


# Issue 19: plain typeguard.typechecked names JAX's public classes in failures of shardtypes
# annotations (unions, dataclasses, Annotated's class check), and the function, as ours does.


def test_plain_typeguard_names_public_classes():
    import typing

    import jax
    import jax.numpy as jnp
    import numpy as np

    from shardtypes import f32, pytree_dataclass

    @pytree_dataclass
    class Box:
        w: f32[b"a b"]

    @typeguard.typechecked
    def opt(x: typing.Optional[f32[b"a b"]]) -> None:
        pass

    @typeguard.typechecked
    def bar(x: f32[b"a b"] | int) -> None:
        pass

    @typeguard.typechecked
    def boxed(x: Box) -> None:
        pass

    @typeguard.typechecked
    def annotated(x: typing.Annotated[jax.Array, f32[b"a"]]) -> None:
        pass

    cases = [
        (opt, jnp.ones(3), r"argument \"x\" \(jax\.Array\) of .*opt\(\) did not match any element in the union:\n"
                           r"  f32\[b'a b'\]: is not f32\[b'a b'\]: has 1 dim \[3\]"),
        (bar, jnp.ones(3), r"argument \"x\" \(jax\.Array\) of .*bar\(\) did not match any element in the union:\n"
                           r"  f32\[b'a b'\]: is not"),
        (boxed, jnp.ones(3), r"argument \"x\" \(jax\.Array\) of .*boxed\(\) is not an instance of .*Box \(found jax\.Array\)"),
        (annotated, np.ones(2, np.float32), r"argument \"x\" \(numpy\.ndarray\) of .*annotated\(\) is not an instance of jax\.Array\nSee "
                                            r"https://shardtypes\.github\.io/shardtypes/checking/#reading-an-error-message$"),
    ]
    for fn, value, message in cases:
        with pytest.raises(TypeCheckError, match=message) as info:
            fn(value)
        assert "jaxlib" not in str(info.value) and "<class" not in str(info.value)
