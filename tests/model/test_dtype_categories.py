"""The dtype categories beside ``floating``/``integer``/``anydtype``: ``signed``, ``unsigned``,
``complexfloating``, ``inexact``, ``real``, ``numeric`` and ``key`` (typed PRNG keys), as
jaxtyping's ``SInt``, ``UInt``, ``Complex``, ``Inexact``, ``Real``, ``Num`` and ``Key``."""

import pickle

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import shardtypes
from shardtypes import (
    TypeCheckError,
    anydtype,
    check,
    complexfloating,
    floating,
    inexact,
    integer,
    key,
    numeric,
    real,
    signed,
    typechecked,
    u32,
    unsigned,
)

from conftest import put

# Every dtype JAX has, in the family it belongs to (written independently of the library).
SIGNED = [jnp.int2, jnp.int4, jnp.int8, jnp.int16, jnp.int32, jnp.int64]
UNSIGNED = [jnp.uint2, jnp.uint4, jnp.uint8, jnp.uint16, jnp.uint32, jnp.uint64]
FLOATS = [jnp.bfloat16, jnp.float16, jnp.float32, jnp.float64, jnp.float4_e2m1fn, jnp.float8_e3m4,
          jnp.float8_e4m3, jnp.float8_e4m3b11fnuz, jnp.float8_e4m3fn, jnp.float8_e4m3fnuz,
          jnp.float8_e5m2, jnp.float8_e5m2fnuz, jnp.float8_e8m0fnu]
COMPLEX = [jnp.complex64, jnp.complex128]
BOOL = [jnp.bool_]
FAMILIES = {"signed": SIGNED, "unsigned": UNSIGNED, "float": FLOATS, "complex": COMPLEX, "bool": BOOL}

# Which families each category takes.
ACCEPTED = {
    "floating": {"float"},
    "integer": {"signed", "unsigned"},
    "signed": {"signed"},
    "unsigned": {"unsigned"},
    "complexfloating": {"complex"},
    "inexact": {"float", "complex"},
    "real": {"signed", "unsigned", "float"},
    "numeric": {"signed", "unsigned", "float", "complex"},
    "key": set(),
    "anydtype": {"signed", "unsigned", "float", "complex", "bool"},
}
KEY = jax.random.key(0).dtype


@pytest.mark.parametrize("name", sorted(ACCEPTED))
def test_each_category_accepts_exactly_its_families(name):
    cls = getattr(shardtypes, name)
    for family, dtypes in FAMILIES.items():
        for dt in dtypes:
            assert cls.accepts(np.dtype(dt)) is (family in ACCEPTED[name]), (name, dt)
    assert cls.accepts(KEY) is (name in ("key", "anydtype"))


def test_categories_are_public_dtype_classes():
    for name in ACCEPTED:
        cls = getattr(shardtypes, name)
        assert name in shardtypes.__all__
        assert shardtypes.model.is_dtype_class(cls)
        assert cls.__module__ == "shardtypes"
        assert pickle.loads(pickle.dumps(cls[b"a b/d"])) is cls[b"a b/d"]
        assert repr(cls[b"a"]) == f"shardtypes.{name}[b'a']"


@pytest.mark.parametrize("cls, good, bad, wants", [
    (signed, jnp.int8, jnp.uint8, "any signed integer dtype"),
    (unsigned, jnp.uint16, jnp.int16, "any unsigned integer dtype"),
    (complexfloating, jnp.complex64, jnp.float32, "any complex dtype"),
    (inexact, jnp.bfloat16, jnp.int32, "any floating or complex dtype"),
    (real, jnp.int32, jnp.complex64, r"any integer or floating dtype \(not bool, not complex\)"),
    (numeric, jnp.complex64, jnp.bool_, r"any integer, floating or complex dtype \(not bool\)"),
])
def test_category_on_sharded_arrays(mesh, cls, good, bad, wants):
    x = put(mesh, jnp.zeros((8, 2), good), "d")
    check(cls, b"n/d m", x)
    name = cls.__name__
    with pytest.raises(TypeCheckError, match=rf"check\(\): value is not {name}\[b'n/d m'\]: has dtype "
                       rf"{np.dtype(bad).name}, the annotation wants {wants}"):
        check(cls, b"n/d m", put(mesh, jnp.zeros((8, 2), bad), "d"))


def test_key_accepts_typed_keys_only(mesh):
    keys = put(mesh, jax.random.split(jax.random.key(0), 8), "d")
    check(key, b"n/d", keys)
    check(key, b"", jax.random.key(1))
    with pytest.raises(TypeCheckError, match=r"value is not key\[b''\]: has dtype int32, the annotation "
                       r"wants a typed PRNG key dtype such as key<fry> \(from jax.random.key; a raw "
                       r"uint32 key from jax.random.PRNGKey is not one\)"):
        check(key, b"", jnp.array(3))
    with pytest.raises(TypeCheckError, match=r"has dtype uint32, the annotation wants a typed PRNG key"):
        check(key, b"2", jax.random.PRNGKey(0))  # the legacy raw key
    with pytest.raises(TypeCheckError, match=r"has dtype key<fry>, the annotation wants uint32"):
        check(u32, b"n/d", keys)
    with pytest.raises(TypeCheckError, match=r"value is not key\[b'n'\]: sharding is P\('d'\) but the annotation says P\(None\)"):
        check(key, b"n", keys)  # the sharding is checked as for any other array


def test_key_in_checked_functions_eager_and_under_jit(mesh):
    @typechecked
    def draw(k: key[jax.Array, b"n/d"]) -> key[jax.Array, b"n/d"]:
        return k  # the key annotation in and out, eager and under jit

    keys = put(mesh, jax.random.split(jax.random.key(0), 8), "d")
    with jax.set_mesh(mesh):
        draw(keys)
        jax.jit(draw)(keys)
    with pytest.raises(TypeCheckError, match=r'argument "k" .*has dtype int32, the annotation wants a typed PRNG key'):
        draw(put(mesh, jnp.zeros((8,), jnp.int32), "d"))


def test_anydtype_still_takes_keys_and_integer_does_not():
    check(anydtype, b"", jax.random.key(0))
    for cls in (integer, unsigned, numeric, real, floating):
        with pytest.raises(TypeCheckError, match=r"has dtype key<fry>"):
            check(cls, b"", jax.random.key(0))
