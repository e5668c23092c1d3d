"""Dtype annotation classes: exact dtypes, categories, subscription, repr and pickling."""

import pickle
import typing

import jax.numpy as jnp
import numpy as np
import pytest

import shardtypes
from shardtypes import ShapeSpec, ShapeSpecError, TypeCheckError, anydtype, bf16, check, f32, floating, integer, number
from shardtypes.model import dtype_names

# Every dtype class and the JAX dtype it stands for (written independently of the library).
DTYPES = {
    "bool_": jnp.bool_,
    "bf16": jnp.bfloat16,
    "f16": jnp.float16,
    "f32": jnp.float32,
    "f64": jnp.float64,
    "i4": jnp.int4,
    "i8": jnp.int8,
    "i16": jnp.int16,
    "i32": jnp.int32,
    "i64": jnp.int64,
    "u4": jnp.uint4,
    "u8": jnp.uint8,
    "u16": jnp.uint16,
    "u32": jnp.uint32,
    "u64": jnp.uint64,
    "c64": jnp.complex64,
    "c128": jnp.complex128,
    "f8e3m4": jnp.float8_e3m4,
    "f8e4m3": jnp.float8_e4m3,
    "f8e4m3b11fnuz": jnp.float8_e4m3b11fnuz,
    "f8e4m3fn": jnp.float8_e4m3fn,
    "f8e4m3fnuz": jnp.float8_e4m3fnuz,
    "f8e5m2": jnp.float8_e5m2,
    "f8e5m2fnuz": jnp.float8_e5m2fnuz,
    "f8e8m0fnu": jnp.float8_e8m0fnu,
}
FLOATS = ["bf16", "f16", "f32", "f64"] + [n for n in DTYPES if n.startswith("f8")]
INTS = ["i4", "i8", "i16", "i32", "i64", "u4", "u8", "u16", "u32", "u64"]
OTHERS = ["bool_", "c64", "c128"]
CATEGORIES = ["floating", "integer", "anydtype"]

# docs/design.md's required names.
REQUIRED = [
    "bool_", "bf16", "f16", "f32", "f64", "i8", "i16", "i32", "i64",
    "u8", "u16", "u32", "u64", "c64", "c128", "f8e4m3fn", "f8e5m2",
]  # fmt: skip


def test_required_dtype_classes_exported():
    for name in REQUIRED + CATEGORIES + ["number"]:
        assert isinstance(getattr(shardtypes, name), type), name
    for name in DTYPES:
        cls = getattr(shardtypes, name)
        assert issubclass(cls, number) and cls is not number


def test_dtype_names():
    names = dtype_names()
    assert "f8e4m3fn" in names and "f8e5m2" in names
    assert set(names) == set(DTYPES)
    assert not set(names) & set(CATEGORIES + ["number"])


@pytest.mark.parametrize("name", list(DTYPES))
def test_dtype_class_accepts_exactly_its_dtype(name):
    cls = getattr(shardtypes, name)
    for other, dt in DTYPES.items():
        expected = other == name
        assert cls.accepts(np.dtype(dt)) is expected, (name, other)
        assert cls.accepts(jnp.dtype(dt)) is expected, (name, other)
        assert bool(cls.accepts(dt)) is expected, (name, other)  # scalar type, as jnp.float32


@pytest.mark.parametrize("name", list(DTYPES))
def test_dtype_class_checks_array_dtype(name):
    cls = getattr(shardtypes, name)
    check(cls, b"n", np.zeros((2,), DTYPES[name]))
    wrong = jnp.float32 if name != "f32" else jnp.int32
    with pytest.raises(
        TypeCheckError,
        match=rf"is not {name}\[b'n'\]: has dtype {np.dtype(wrong).name}, "
        rf"the annotation wants {np.dtype(DTYPES[name]).name}",
    ):
        check(cls, b"n", np.zeros((2,), wrong))


@pytest.mark.parametrize("name", list(DTYPES))
def test_categories(name):
    dt = np.dtype(DTYPES[name])
    assert floating.accepts(dt) is (name in FLOATS)
    assert integer.accepts(dt) is (name in INTS)
    assert anydtype.accepts(dt) is True
    assert floating.accepts(DTYPES[name]) is (name in FLOATS)
    assert integer.accepts(DTYPES[name]) is (name in INTS)


def test_category_membership_explicit():
    for dt in [jnp.bfloat16, jnp.float16, jnp.float32, jnp.float64, jnp.float8_e4m3fn, jnp.float8_e5m2]:
        assert floating.accepts(dt), dt
    for dt in [jnp.bool_, jnp.int8, jnp.int32, jnp.uint8, jnp.int4, jnp.complex64]:
        assert not floating.accepts(dt), dt
    for dt in [jnp.int4, jnp.int8, jnp.int64, jnp.uint4, jnp.uint32, jnp.uint64]:
        assert integer.accepts(dt), dt
    for dt in [jnp.bool_, jnp.float32, jnp.bfloat16, jnp.float8_e5m2, jnp.complex128]:
        assert not integer.accepts(dt), dt


def test_categories_through_check():
    check(floating, b"a", np.zeros((1,), jnp.bfloat16))
    check(integer, b"a", np.zeros((1,), jnp.uint4))
    check(anydtype, b"a", np.zeros((1,), np.bool_))
    with pytest.raises(TypeCheckError, match=r"has dtype bool, the annotation wants any integer dtype"):
        check(integer, b"a", np.zeros((1,), np.bool_))
    with pytest.raises(TypeCheckError, match=r"has dtype int8, the annotation wants any floating dtype"):
        check(floating, b"a", np.zeros((1,), np.int8))


# ---------------------------------------------------------------------------------------------
# Subscription


def test_number_cannot_be_subscripted():
    with pytest.raises(TypeError, match=r"number is the base class of shardtypes annotations"):
        number[b"a b"]


@pytest.mark.parametrize("cls", [f32, floating, anydtype])
def test_two_shape_strings_rejected(cls):
    name = cls.__name__
    with pytest.raises(
        TypeError, match=rf"{name}\[\.\.\.\] takes a shape string.*or an array type and a shape "
        rf"string, as in {name}\[jax.Array, b'batch embed'\]; got \(b'a', b'b'\)"
    ):
        cls[b"a", b"b"]


@pytest.mark.parametrize(
    "shape, message",
    [
        (b"batch/", r"invalid shape string 'batch/': .*empty mesh axis name"),
        ("a/d b/d", r"mesh axis 'd' shards both 'a/d' and 'b/d'"),
        (b"... ...", r"second variadic dim"),
        (b"#b *b", r"invalid shape string '#b \*b': dim 1 '\*b' and dim 0 '#b' both name 'b'"),
        (b"x.y", r"unexpected character '\.'"),
        (3, r"a shape string must be str or bytes, not int"),
        (b"\xff", r"bytes are not valid UTF-8"),
    ],
)
def test_bad_shape_at_subscription(shape, message):
    with pytest.raises(ShapeSpecError, match=message):
        f32[shape]


@pytest.mark.parametrize("shape", [["a b"], {"a"}])
def test_unhashable_shape_at_subscription(shape):
    with pytest.raises(
        ShapeSpecError, match=rf"a shape string must be str or bytes, not {type(shape).__name__}"
    ):
        f32[shape]


def test_subscription_form():
    ann = f32[b"batch/d embed"]
    assert isinstance(ann, type) and issubclass(ann, f32) and ann is not f32
    assert ann.dtype_class is f32 and ann.array_type is None
    assert ann.shape_string == b"batch/d embed"
    assert ann.spec == ShapeSpec.parse("batch/d embed")
    assert f32[b"batch/d embed"] is ann  # cached: one class per annotation
    assert typing.get_origin(ann) is None  # a class, not a generic alias


def test_str_shape_converted_to_bytes():
    ann = bf16["batch/d embed"]
    assert ann.shape_string == b"batch/d embed"
    assert ann is bf16[b"batch/d embed"]
    assert ann != f32[b"batch/d embed"]
    assert ann != bf16[b"batch embed"]
    assert ShapeSpec.parse(ann.shape_string) == ShapeSpec.parse("batch/d embed")


def test_scalar_annotation():
    ann = f32[b""]
    assert ann.shape_string == b""
    check(f32, b"", np.float32(1.0))


@pytest.mark.parametrize(
    "ann, text",
    [
        (f32[b"batch/d embed"], "shardtypes.f32[b'batch/d embed']"),
        (f32["batch/d embed"], "shardtypes.f32[b'batch/d embed']"),
        (shardtypes.f8e4m3fn[b""], "shardtypes.f8e4m3fn[b'']"),
        (floating[b"a/d/e"], "shardtypes.floating[b'a/d/e']"),
        (integer[b"*lead n"], "shardtypes.integer[b'*lead n']"),
        (anydtype[b"..."], "shardtypes.anydtype[b'...']"),
    ],
)
def test_repr(ann, text):
    assert repr(ann) == text


@pytest.mark.parametrize("name", list(DTYPES) + CATEGORIES)
def test_pickle_round_trip(name):
    cls = getattr(shardtypes, name)
    ann = cls[b"a b"]
    back = pickle.loads(pickle.dumps(ann))
    assert back is ann
    assert back.dtype_class is cls
    assert pickle.loads(pickle.dumps(cls)) is cls


def test_pickle_f32_example():
    assert pickle.loads(pickle.dumps(f32[b"a b"])) == f32[b"a b"]
    assert pickle.loads(pickle.dumps(f32["batch/d seq+1"])) == f32[b"batch/d seq+1"]
