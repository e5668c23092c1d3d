"""The checker on values other than an eager jax.Array, and on what an annotation may say: numpy
arrays (host data), Python scalars, jax.ShapeDtypeStruct with symbolic dims and AbstractMesh, the
dim kinds within one value and across arguments, PRNG keys, abstract numpy dtypes, and
annotations that are variables of an enclosing function (also under PEP 563).
"""

import importlib
import re
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import typeguard
from hypothesis import given, settings, strategies as st
from jax.sharding import AbstractMesh, AxisType, NamedSharding, PartitionSpec as P
from typeguard import TypeCheckError, check_type

import shardtypes
from shardtypes import Scope, anydtype, f32, floating, i32, integer, typechecked

from check_kit import S, both, center, ct, host, npz, unknown_axis

# ---------------------------------------------------------------------------------------------
# numpy.ndarray: host data.


def test_numpy_shape_and_dtype():
    assert host(npz(3, 4)).shape == (3, 4)
    with pytest.raises(TypeCheckError, match="dim '4' is 5"):
        host(npz(3, 5))
    with pytest.raises(TypeCheckError, match="has dtype float64"):
        host(npz(3, 4, dtype=np.float64))
    with pytest.raises(TypeCheckError, match="has 1 dim"):
        host(npz(4))
    ct(np.float32(1.0), f32[b""])


def test_numpy_sharded_annotation_fails():
    with pytest.raises(TypeCheckError, match=r"numpy array.*jax\.device_put\(x, NamedSharding\(mesh, P\('d', None\)\)\)"):
        center(npz(8, 16))
    with pytest.raises(TypeCheckError, match="jax.device_put"):
        ct(npz(8, 16), f32[b"b e/t"])


# ---------------------------------------------------------------------------------------------
# jax.ShapeDtypeStruct, symbolic dims, AbstractMesh.


def test_shape_dtype_struct_without_sharding():
    ct(S((8, 16), jnp.float32), f32[b"b e"])
    ct(S((8, 16), jnp.float32), f32[b"b/d e"])  # no sharding: unspecified, not checked
    with pytest.raises(TypeCheckError, match="dim '4' is 16"):
        ct(S((8, 16), jnp.float32), f32[b"b 4"])
    with pytest.raises(TypeCheckError, match="has dtype int32"):
        ct(S((8, 16), jnp.int32), f32[b"b e"])


def test_shape_dtype_struct_with_sharding(mesh):
    def struct(*spec):
        return S((8, 16), jnp.float32, sharding=NamedSharding(mesh, P(*spec)))

    ct(struct("d"), f32[b"b/d e"])
    ct(struct("d", "t"), f32[b"b/d e/t"])
    with pytest.raises(TypeCheckError, match=re.escape("sharding is P(None, 'd')")):
        ct(struct(None, "d"), f32[b"b/d e"])
    with pytest.raises(TypeCheckError, match="mesh axis 'q'"):
        ct(struct("d"), f32[b"b/d e/q"])


@pytest.mark.parametrize("axis_type", [AxisType.Explicit, AxisType.Auto], ids=["explicit", "auto"])
def test_shape_dtype_struct_abstract_mesh(axis_type):
    am = AbstractMesh((64, 64), ("d", "t"), axis_types=(axis_type,) * 2)

    def struct(*spec):
        return S((128, 256), jnp.float32, sharding=NamedSharding(am, P(*spec)))

    ct(struct("d", "t"), f32[b"b/d e/t"])
    ct(struct("d"), f32[b"b/d e"])
    with pytest.raises(TypeCheckError, match=re.escape("sharding is P('t', 'd') but the annotation says P('d', 't')")):
        ct(struct("t", "d"), f32[b"b/d e/t"])
    with pytest.raises(TypeCheckError, match="mesh axis 'x' is not in"):
        ct(struct("d"), f32[b"b/d e/x"])
    with pytest.raises(TypeCheckError, match="mesh axis 'q' is not in the mesh"):
        jax.eval_shape(unknown_axis, struct("d", "t"))


def test_eval_shape_abstract_mesh_explicit():
    am = AbstractMesh((64, 64), ("d", "t"), axis_types=(AxisType.Explicit,) * 2)
    s = S((128, 256), jnp.float32, sharding=NamedSharding(am, P("d", "t")))
    out = jax.eval_shape(both, s)
    assert out.shape == (128, 256)
    with pytest.raises(TypeCheckError, match=re.escape("sharding over Explicit axes is P('d', 't')")):
        jax.eval_shape(center, s)


@typechecked
def add_sym(x: f32[b"n m"], y: f32[b"n m"]) -> f32[b"n m"]:
    return x + y


@typechecked
def concat_sym(x: f32[b"n m"], y: f32[b"n k"]) -> f32[b"n m+k"]:
    return jnp.concatenate([x, y], axis=1)


@typechecked
def grow_sym(x: f32[b"n m"]) -> f32[b"n m+1"]:
    return x


def test_symbolic_dims_eval_shape():
    a, b = jax.export.symbolic_shape("a, b")
    out = jax.eval_shape(add_sym, S((a, b), jnp.float32), S((a, b), jnp.float32))
    assert out.shape == (a, b)
    out = jax.eval_shape(concat_sym, S((a, b), jnp.float32), S((a, 3), jnp.float32))
    assert out.shape == (a, b + 3)
    with pytest.raises(
        TypeCheckError,
        match=re.escape("dimension 'n' is b here (dim 0) but was bound to a by argument \"x\" of add_sym()"),
    ):
        jax.eval_shape(add_sym, S((a, b), jnp.float32), S((b, a), jnp.float32))
    with pytest.raises(TypeCheckError, match="dimension 'm' is a here"):
        jax.eval_shape(add_sym, S((a, b), jnp.float32), S((a, a), jnp.float32))
    with pytest.raises(TypeCheckError, match=re.escape("dim 'm+1' is b, but m+1 = b + 1")):
        jax.eval_shape(grow_sym, S((a, b), jnp.float32))


def test_symbolic_dims_check_type():
    a, b = jax.export.symbolic_shape("a, b")
    ok = [
        (f32[b"n m"], (a, b)),
        (f32[b"n n"], (a, a)),
        (f32[b"n 2*n"], (a, 2 * a)),
        (f32[b"n n//2"], (2 * a, a)),
        (f32[b"n n+1"], (a, a + 1)),
        (f32[b"n #n"], (a, 1)),
        (f32[b"n #n"], (a, a)),
        (f32[b"*v w"], (a, b, 3)),
        (f32[b"n 3"], (a, 3)),
    ]
    for annotation, shape in ok:
        ct(S(shape, jnp.float32), annotation)
    bad = [
        (f32[b"n n"], (a, b)),
        (f32[b"n 2*n"], (a, 2 * b)),
        (f32[b"n n+1"], (a, a)),
        (f32[b"n #n"], (a, b)),
        (f32[b"n 3"], (a, b)),
    ]
    for annotation, shape in bad:
        with pytest.raises(TypeCheckError):
            ct(S(shape, jnp.float32), annotation)


def test_symbolic_dims_with_abstract_mesh():
    a, b = jax.export.symbolic_shape("a, b")
    am = AbstractMesh((64, 64), ("d", "t"), axis_types=(AxisType.Explicit,) * 2)
    s = S((a, b), jnp.float32, sharding=NamedSharding(am, P("d", "t")))
    ct(s, f32[b"x/d y/t"])
    with pytest.raises(TypeCheckError, match=re.escape("annotation says P('t', 'd')")):
        ct(s, f32[b"x/t y/d"])


# ---------------------------------------------------------------------------------------------
# Dim kinds inside one value.


@pytest.mark.parametrize(
    "annotation, shape",
    [
        (f32[b"n #n"], (3, 1)),
        (f32[b"n #n"], (3, 3)),
        (f32[b"#n n"], (1, 3)),
        (f32[b"#n n"], (3, 3)),
        (f32[b"#n"], (5,)),
        (f32[b"*batch n"], (2, 3, 4)),
        (f32[b"*batch n"], (4,)),
        (f32[b"n *batch"], (4, 2, 3)),
        (f32[b"... n"], (2, 3, 4)),
        (f32[b"... n"], (4,)),
        (f32[b"n ... n"], (4, 7, 4)),
        (f32[b"n ... n"], (4, 4)),
        (f32[b"_ _"], (2, 3)),
        (f32[b"_ n n"], (2, 3, 3)),
        (f32[b"3 4"], (3, 4)),
        (f32[b""], ()),
        (f32[b"n n+1"], (3, 4)),
        (f32[b"m+1 m"], (4, 3)),
        (f32[b"n n-1"], (3, 2)),
        (f32[b"n 2*n"], (3, 6)),
        (f32[b"n n//2"], (7, 3)),
        (f32[b"n (n+1)*2"], (3, 8)),
        (f32[b"n m n*m"], (2, 3, 6)),
    ],
)
def test_dim_kinds_pass(annotation, shape):
    ct(npz(*shape), annotation)
    ct(jnp.zeros(shape), annotation)


@pytest.mark.parametrize(
    "annotation, shape, message",
    [
        (f32[b"n #n"], (3, 2), "dim '#n' is 2, but must be 1 or n=3"),
        (f32[b"#n n"], (2, 3), "dim '#n' is 2, but must be 1 or n=3"),
        (f32[b"*b n"], (), "needs at least 1"),
        (f32[b"... n"], (), "needs at least 1"),
        (f32[b"n ... n"], (4, 7, 5), "dimension 'n' is 5 here"),
        (f32[b"_ _"], (2, 3, 4), "has 3 dims"),
        (f32[b"_ n n"], (2, 3, 4), "dimension 'n' is 4 here"),
        (f32[b"3 4"], (3, 5), "dim '4' is 5, but the annotation fixes it to 4"),
        (f32[b""], (1,), "has 1 dim"),
        (f32[b"n n+1"], (3, 5), "dim 'n+1' is 5, but n+1 = 4 (n=3)"),
        (f32[b"n 2*n"], (3, 5), "dim '2*n' is 5, but 2*n = 6 (n=3)"),
        (f32[b"n n//2"], (7, 4), "dim 'n//2' is 4, but n//2 = 3 (n=7)"),
        (f32[b"n m n*m"], (2, 3, 5), "n*m = 6"),
    ],
)
def test_dim_kinds_fail(annotation, shape, message):
    with pytest.raises(TypeCheckError, match=re.escape(message)):
        ct(npz(*shape), annotation)
    with pytest.raises(TypeCheckError, match=re.escape(message)):
        ct(jnp.zeros(shape), annotation)


def test_expression_over_unbound_name_fails_helpfully():
    with pytest.raises(
        TypeCheckError,
        match=re.escape("dim 'm+1' uses 'm', which no argument has bound yet; bind it in an earlier dim or with Scope(name=size)"),
    ):
        ct(npz(3, 4), f32[b"n m+1"])
    with Scope(m=3):
        ct(npz(3, 4), f32[b"n m+1"])


@typechecked
def variadic_pair(x: f32[b"*b n"], y: f32[b"*b n"]) -> f32[b"*b n"]:
    return x


@typechecked
def broadcast_pair(x: f32[b"n e"], y: f32[b"#n e"]) -> f32[b"n e"]:
    return x


@typechecked
def grow(x: f32[b"n"]) -> f32[b"k+1"]:
    return x


def test_variadic_binding_across_arguments():
    assert variadic_pair(npz(2, 3, 4), npz(2, 3, 4)).shape == (2, 3, 4)
    with pytest.raises(
        TypeCheckError,
        match=re.escape("dimension 'b' is [2,5] here (dims 0..1) but was bound to [2,3] by argument \"x\" of variadic_pair()"),
    ):
        variadic_pair(npz(2, 3, 4), npz(2, 5, 4))
    with pytest.raises(TypeCheckError, match=re.escape("dimension 'b' is [3] here")):
        variadic_pair(npz(2, 3, 4), npz(3, 4))


def test_broadcast_binding_across_arguments():
    assert broadcast_pair(npz(3, 4), npz(1, 4)).shape == (3, 4)
    assert broadcast_pair(npz(3, 4), npz(3, 4)).shape == (3, 4)
    with pytest.raises(TypeCheckError, match=re.escape('must be 1 or n=3 (bound by argument "x" of broadcast_pair())')):
        broadcast_pair(npz(3, 4), npz(2, 4))


def test_expression_in_return_over_name_bound_nowhere():
    with pytest.raises(TypeCheckError, match=r"the return value .*of grow\(\).*uses 'k', which no argument has bound yet"):
        grow(npz(3))
    with Scope(k=2):
        assert grow(npz(3)).shape == (3,)


@settings(max_examples=25, deadline=None, database=None)
@given(n=st.integers(2, 40), off=st.integers(1, 3))
def test_arithmetic_dims_property(n, off):
    annotation = f32[b"n 2*n n+1 n//2 n-1"]
    ct(npz(n, 2 * n, n + 1, n // 2, n - 1), annotation)
    with pytest.raises(TypeCheckError, match=re.escape(f"dim '2*n' is {2 * n + off}, but 2*n = {2 * n}")):
        ct(npz(n, 2 * n + off, n + 1, n // 2, n - 1), annotation)
    with pytest.raises(TypeCheckError, match=re.escape(f"dim 'n//2' is {n // 2 + off}")):
        ct(npz(n, 2 * n, n + 1, n // 2 + off, n - 1), annotation)


# ---------------------------------------------------------------------------------------------
# Annotations that are variables of an enclosing function; check_type from a plain function.


def _checked_with_closure_annotation(annotation):
    @typechecked
    def inner(x: annotation) -> annotation:
        return x

    return inner


def _checked_with_closure_annotation_and_local(annotation):
    @typechecked
    def inner(x: annotation) -> annotation:
        y: annotation = x
        return y

    return inner


def _plain_with_closure_annotation(annotation):
    @typeguard.typechecked
    def inner(x: annotation) -> annotation:
        return x

    return inner


@pytest.mark.parametrize(
    "make",
    [_plain_with_closure_annotation, _checked_with_closure_annotation, _checked_with_closure_annotation_and_local],
)
def test_closure_annotations_are_checked(make):
    f = make(f32[b"b e f"])
    assert f(npz(2, 3, 4)).shape == (2, 3, 4)
    with pytest.raises(TypeCheckError, match="has 2 dims"):
        f(npz(2, 3))


_PEP563_SOURCE = """
from __future__ import annotations
import typeguard
from shardtypes import typechecked

def make(annotation):
    @typechecked
    def inner(x: annotation) -> annotation:
        return x
    return inner

def make_plain(annotation):
    @typeguard.typechecked
    def inner(x: annotation) -> annotation:
        return x
    return inner
"""

@pytest.fixture
def pep563_module(tmp_path, monkeypatch):
    name = "shardtypes_test_pep563_closure"
    (tmp_path / f"{name}.py").write_text(_PEP563_SOURCE)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, name, raising=False)
    module = importlib.import_module(name)
    yield module
    sys.modules.pop(name, None)


def test_closure_annotation_with_postponed_evaluation_plain_typeguard(pep563_module):
    f = pep563_module.make_plain(f32[b"b e f"])
    with pytest.raises(TypeCheckError, match="has 2 dims"):
        f(npz(2, 3))


def test_closure_annotation_with_postponed_evaluation_typechecked(pep563_module):
    f = pep563_module.make(f32[b"b e f"])
    with pytest.raises(TypeCheckError, match="has 2 dims"):
        f(npz(2, 3))


def test_check_type_calls_in_one_plain_function_do_not_share_a_table():
    for n in (3, 4):
        check_type(npz(n), f32[b"n"])
    check_type(npz(5), f32[b"n"])


def test_prng_keys_are_anydtype_and_nothing_else():
    key = jax.random.key(0)
    typeguard.check_type(key, anydtype[b""])
    with pytest.raises(TypeCheckError, match=re.escape("has dtype key<fry>, the annotation wants float32")):
        typeguard.check_type(key, f32[b""])
    with pytest.raises(TypeCheckError, match=re.escape("has dtype key<fry>, the annotation wants any floating dtype")):
        typeguard.check_type(key, floating[b""])


def test_python_scalars_are_rank_0_host_data_of_their_kind():
    """A Python scalar is weakly typed, as in JAX: it passes a rank-0 annotation of its kind."""
    ct(1.0, f32[b""])
    ct(1.0, floating[b""])
    ct(3, i32[b""])
    ct(True, shardtypes.bool_[b""])
    with pytest.raises(TypeCheckError, match=r"has 0 dims \[\] but the annotation has 2 \(found float\)"):
        center(1.0)
    for value, kind in ((3, "int32"), (True, "bool"), (1j, "complex64")):
        with pytest.raises(TypeCheckError, match=f"has dtype {kind}, the annotation wants float32"):
            ct(value, f32[b""])
    with pytest.raises(TypeCheckError, match="has dtype float32, the annotation wants any integer dtype"):
        ct(1.0, integer[b""])


# --- issue 19: silent accepts and private names ------------------------------------------------


@pytest.mark.parametrize("shape", [(-2, 3), (2, -1)])
def test_a_shape_dtype_struct_with_a_negative_dim_is_refused(shape):
    """Issue 19, item 6: a ShapeDtypeStruct JAX lets one build with a negative dim passed."""
    bad = S(shape, jnp.float32)
    with pytest.raises(TypeCheckError, match=r"check\(\): value is not f32\[b'a b'\]: is a ShapeDtypeStruct of shape .*, whose dim \d is negative"):
        shardtypes.check(f32, "a b", bad)
    with pytest.raises(TypeCheckError, match="whose dim . is negative"):
        shardtypes.check(f32, "...", bad)

    @typechecked
    def f(x: f32[b"a b"]) -> int:
        return 1

    with pytest.raises(TypeCheckError, match=r'argument "x" \(jax.ShapeDtypeStruct\) of .*f\(\) is not f32'):
        f(bad)
    assert not isinstance(bad, f32[b"a b"])
    assert f(S((0, 3), jnp.float32)) == 1  # a size of 0 is a size


@pytest.mark.parametrize("abstract", [np.number, np.inexact, np.signedinteger, np.unsignedinteger,
                                      np.complexfloating, np.character])
def test_an_abstract_numpy_type_no_category_means_is_refused_as_check_dtype(abstract):
    """Issue 19, item 6: np.number was read as anydtype (so bool passed), np.inexact as floating."""
    with pytest.raises(TypeError, match=rf"check\(\): dtype numpy.{abstract.__name__} is an abstract numpy type"):
        shardtypes.check(abstract, "a", jnp.zeros(3, jnp.bool_))


def test_the_abstract_numpy_types_a_category_means_stay_that_category():
    shardtypes.check(np.floating, "a", jnp.zeros(3, jnp.bfloat16))
    shardtypes.check(np.integer, "a", jnp.zeros(3, jnp.uint8))
    with pytest.raises(TypeCheckError, match="has dtype int32, the annotation wants any floating"):
        shardtypes.check(np.floating, "a", jnp.zeros(3, jnp.int32))
