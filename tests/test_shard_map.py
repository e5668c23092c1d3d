"""typed_shard_map (shardtypes._shard_map), and is_fully_sharded inside it.

Specs derived from the signature, resolved once; the mesh current at each call (or ``mesh=``);
keyword arguments; partial manual axes; check_vma / check_rep; the body checked with local shapes;
composition with jax.jit, scope and typechecked; static (non-array) parameters; pytree dataclass
parameters; the errors.

Kernels are defined once at module level where possible, so that jax.jit caches their traces and
compilations and the file stays fast.
"""

import dataclasses
import functools
import re
import typing

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec as P
from typeguard import TypeCheckError

import shardtypes._shard_map as shard_map_module
from shardtypes import (
    Scope,
    dims,
    f32,
    is_fully_sharded,
    pytree_dataclass,
    scope,
    typechecked,
    typed_shard_map,
)

from conftest import make_mesh, put

KINDS = ("explicit", "auto")

RNG = np.random.default_rng(0)
X = RNG.standard_normal((8, 4)).astype(np.float32)  # B=8, M=4
W = RNG.standard_normal((4, 8)).astype(np.float32)  # M=4, F=8
REF = np.tanh(X @ W)


def body(x, w):
    return jnp.tanh(x @ w)


@typed_shard_map
def matmul(x: f32[b"B/d M"], w: f32[b"M F/t"]) -> f32[b"B/d F/t"]:
    return body(x, w)


matmul_jit = jax.jit(matmul)

# What kernel bodies saw at trace time: (name, local shape, dims(), extra).
SEEN: list = []


@typed_shard_map
def record(x: f32[b"B/d M/t"]) -> f32[b"B/d M/t"]:
    SEEN.append(("record", x.shape, dict(dims())))
    return x * 2


def assert_layout(out, mesh, *spec):
    """``out`` is laid out on ``mesh`` as ``P(*spec)``."""
    assert isinstance(out.sharding, NamedSharding), out.sharding
    assert out.sharding.mesh.shape == mesh.shape, (out.sharding.mesh, mesh)
    assert out.sharding.mesh.axis_types == mesh.axis_types
    assert out.sharding.is_equivalent_to(NamedSharding(mesh, P(*spec)), out.ndim), (out.sharding, spec)


@pytest.fixture
def spy_shard_map(monkeypatch):
    """Records the keyword arguments every ``jax.shard_map`` call gets."""
    calls: list = []
    real = jax.shard_map

    def spy(f, **kwargs):
        calls.append(kwargs)
        return real(f, **kwargs)

    monkeypatch.setattr(jax, "shard_map", spy)
    return calls


# ---------------------------------------------------------------------------------------------
# Specs from the signature, and the same result as a hand-written jax.shard_map.


def test_same_numbers_and_sharding_as_hand_written_shard_map(mesh):
    with jax.set_mesh(mesh):
        xs, ws = put(mesh, X, "d"), put(mesh, W, None, "t")
        hand = jax.shard_map(body, in_specs=(P("d"), P(None, "t")), out_specs=P("d", "t"))
        expected = hand(xs, ws)
        for out in (matmul(xs, ws), matmul_jit(xs, ws)):
            np.testing.assert_allclose(np.asarray(out), np.asarray(expected), rtol=1e-6, atol=1e-6)
            np.testing.assert_allclose(np.asarray(out), REF, rtol=1e-5, atol=1e-5)
            assert out.sharding.is_equivalent_to(expected.sharding, 2)
            assert_layout(out, mesh, "d", "t")


def test_same_lowering_as_hand_written_shard_map(mesh):
    def text(f, *args):
        return re.sub(r"module @\S+", "module @M", jax.jit(f).lower(*args).as_text())

    with jax.set_mesh(mesh):
        xs, ws = put(mesh, X, "d"), put(mesh, W, None, "t")
        hand = jax.shard_map(body, in_specs=(P("d"), P(None, "t")), out_specs=P("d", "t"))
        typed = text(matmul, xs, ws)
        assert "manual_computation" in typed
        assert typed == text(hand, xs, ws)


def test_specs_come_from_the_signature(mesh, spy_shard_map):
    with jax.set_mesh(mesh):
        matmul(put(mesh, X, "d"), put(mesh, W, None, "t"))
    (kwargs,) = spy_shard_map
    assert kwargs["in_specs"] == (P("d", None), P(None, "t"))
    assert kwargs["out_specs"] == P("d", "t")
    assert "axis_names" not in kwargs and "check_vma" not in kwargs


def test_specs_are_resolved_once_not_per_call(mesh, monkeypatch):
    spec_calls: list = []
    real_specs = shard_map_module.make_partition_specs

    def spy_specs(annotation):
        spec_calls.append(str(annotation))
        return real_specs(annotation)

    hint_calls: list = []
    real_hints = typing.get_type_hints

    def spy_hints(obj, *args, **kwargs):
        hint_calls.append(getattr(obj, "__qualname__", obj))
        return real_hints(obj, *args, **kwargs)

    monkeypatch.setattr(shard_map_module, "make_partition_specs", spy_specs)
    monkeypatch.setattr(typing, "get_type_hints", spy_hints)

    def fresh(x: f32[b"B/d M"], w: f32[b"M F/t"]) -> f32[b"B/d F/t"]:
        return x @ w

    kernel = typed_shard_map(fresh)
    assert spec_calls == []  # no spec derived before the first call
    with jax.set_mesh(mesh):
        xs, ws = put(mesh, X, "d"), put(mesh, W, None, "t")
        counts = []
        for _ in range(3):
            out = kernel(xs, ws)
            np.testing.assert_allclose(np.asarray(out), X @ W, rtol=1e-5, atol=1e-5)
            counts.append((len(spec_calls), len(hint_calls)))
    assert len(spec_calls) == 3, spec_calls  # x, w and the return value, once each
    assert "B/d M" in spec_calls[0] and "M F/t" in spec_calls[1] and "B/d F/t" in spec_calls[2]
    assert counts[0] == counts[1] == counts[2], counts
    assert counts[0][1] >= 1


# ---------------------------------------------------------------------------------------------
# The mesh: the one current at each call, or mesh=; none at all is an error.


@pytest.mark.parametrize("kind", KINDS)
def test_mesh_is_the_one_current_at_each_call(kind):
    SEEN.clear()
    x_in = X  # M=4 divides t in every mesh below
    for shape in ((4, 2), (2, 4), (8, 1)):
        mesh = make_mesh(kind, shape)
        with jax.set_mesh(mesh):
            xs, ws = put(mesh, X, "d"), put(mesh, W, None, "t")
            for out in (matmul(xs, ws), matmul_jit(xs, ws)):
                np.testing.assert_allclose(np.asarray(out), REF, rtol=1e-5, atol=1e-5)
                assert_layout(out, mesh, "d", "t")
                assert out.sharding.mesh.shape == dict(zip(("d", "t"), shape))
            out = record(put(mesh, x_in, "d", "t"))
            np.testing.assert_allclose(np.asarray(out), 2 * x_in)
            assert_layout(out, mesh, "d", "t")
    d_t = [(8 // d, 4 // t) for d, t in ((4, 2), (2, 4), (8, 1))]
    assert [s[1] for s in SEEN] == d_t
    assert all(s[2] == {"B": 8, "M": 4} for s in SEEN)


@pytest.mark.parametrize("kind", KINDS)
def test_mesh_argument_needs_no_set_mesh(kind):
    mesh = make_mesh(kind)
    kernel = typed_shard_map(mesh=mesh)(_annotated_body)
    kernel2 = typed_shard_map(_annotated_body, mesh=mesh)
    xs, ws = put(mesh, X, "d"), put(mesh, W, None, "t")
    assert jax.sharding.get_abstract_mesh().empty
    for k in (kernel, kernel2, jax.jit(kernel)):
        out = k(xs, ws)
        np.testing.assert_allclose(np.asarray(out), REF, rtol=1e-5, atol=1e-5)
        assert_layout(out, mesh, "d", "t")


def _annotated_body(x: f32[b"B/d M"], w: f32[b"M F/t"]) -> f32[b"B/d F/t"]:
    return body(x, w)


@pytest.mark.parametrize("kind", KINDS)
def test_no_mesh_is_a_helpful_value_error(kind):
    mesh = make_mesh(kind)
    xs, ws = put(mesh, X, "d"), put(mesh, W, None, "t")
    assert jax.sharding.get_abstract_mesh().empty
    message = (
        "typed_shard_map: calling matmul with no mesh; pass mesh=... or call it inside "
        "`with jax.set_mesh(mesh):`"
    )
    with pytest.raises(ValueError, match=re.escape(message)):
        matmul(xs, ws)
    with pytest.raises(ValueError, match=re.escape(message)):
        jax.jit(matmul)(xs, ws)


# ---------------------------------------------------------------------------------------------
# Keyword arguments.


@typed_shard_map
def keyword_only(x: f32[b"B/d M"], /, *, w: f32[b"M F/t"], scale: float = 1.0) -> f32[b"B/d F/t"]:
    return body(x, w) * scale


def test_keyword_arguments(mesh):
    with jax.set_mesh(mesh):
        xs, ws = put(mesh, X, "d"), put(mesh, W, None, "t")
        for out in (
            matmul(xs, w=ws),
            matmul(x=xs, w=ws),
            matmul(w=ws, x=xs),
            matmul_jit(w=ws, x=xs),
            keyword_only(xs, w=ws),
            keyword_only(xs, scale=2.0, w=ws),
        ):
            assert_layout(out, mesh, "d", "t")
        np.testing.assert_allclose(np.asarray(matmul(w=ws, x=xs)), REF, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(
            np.asarray(keyword_only(xs, scale=2.0, w=ws)), 2 * REF, rtol=1e-5, atol=1e-5
        )
        with pytest.raises(TypeError):
            keyword_only(xs, ws)  # w is keyword-only


# ---------------------------------------------------------------------------------------------
# Partial manual: axis_names.


@typed_shard_map(axis_names={"d"})
def partial_manual(x: f32[b"B/d M/t"]) -> f32[b"B/d M/t"]:
    SEEN.append(
        (
            "partial",
            x.shape,
            dict(dims()),
            tuple(jax.sharding.get_abstract_mesh().manual_axes),
            is_fully_sharded(P("d")),
            is_fully_sharded(P("t")),
        )
    )
    return x * 2


def test_partial_manual_axis_names(mesh, spy_shard_map):
    SEEN.clear()
    with jax.set_mesh(mesh):
        xs = put(mesh, X, "d", "t")
        for out in (partial_manual(xs), jax.jit(partial_manual)(xs)):
            np.testing.assert_allclose(np.asarray(out), 2 * X)
            assert_layout(out, mesh, "d", "t")  # 't' stays in the layout though not manual
    # Only d is manual: the body sees B in blocks of 8/4 and M (sharded over the automatic or
    # explicit axis t) at its global size; dims() holds the global sizes.
    assert SEEN == [("partial", (2, 4), {"B": 8, "M": 4}, ("d",), True, False)] * 2
    kwargs = spy_shard_map[0]
    assert kwargs["axis_names"] == {"d"}
    assert kwargs["in_specs"] == (P("d", None),)  # the specs keep only the manual axes
    assert kwargs["out_specs"] == P("d", None)


def test_partial_manual_still_checks_the_non_manual_axis():
    mesh = make_mesh("explicit")
    with jax.set_mesh(mesh):
        wrong = put(mesh, X, "d")  # the annotation also shards M over the explicit axis t
        with pytest.raises(TypeCheckError) as info:
            jax.jit(partial_manual)(wrong)
    message = str(info.value)
    # Caught at the kernel's boundary, on the global array, before shard_map sees it.
    assert 'argument "x"' in message and "partial_manual()" in message
    assert "f32[b'B/d M/t']" in message
    assert "is P('d', None) but the annotation says P('d', 't')" in message


# ---------------------------------------------------------------------------------------------
# check_vma and its old name check_rep.


def unreplicated(x: f32[b"B/d M"]) -> f32[b"M"]:
    return x.sum(0)  # varies over d, but the return annotation says replicated


def test_check_vma_default_is_on(mesh):
    with jax.set_mesh(mesh):
        with pytest.raises(ValueError, match="out_specs"):
            typed_shard_map(unreplicated)(put(mesh, X, "d"))
        with pytest.raises(ValueError, match="out_specs"):
            typed_shard_map(unreplicated, check_rep=True)(put(mesh, X, "d"))


@pytest.mark.parametrize(
    "make",
    [
        lambda f: typed_shard_map(f, check_vma=False),
        lambda f: functools.partial(typed_shard_map, check_vma=False)(f),
        lambda f: typed_shard_map(check_vma=False)(f),
        lambda f: functools.partial(typed_shard_map, check_rep=False)(f),
        lambda f: typed_shard_map(f, check_rep=False),
        lambda f: typed_shard_map(f, check_rep=False, check_vma=False),
    ],
    ids=["vma", "partial-vma", "factory-vma", "partial-rep", "rep", "both"],
)
def test_check_vma_false_and_check_rep_alias(mesh, make, spy_shard_map):
    kernel = make(unreplicated)
    with jax.set_mesh(mesh):
        out = kernel(put(mesh, X, "d"))
    assert spy_shard_map[0]["check_vma"] is False
    np.testing.assert_allclose(np.asarray(out), X[:2].sum(0), rtol=1e-6)  # device 0's block
    assert_layout(out, mesh)


def test_conflicting_check_rep_and_check_vma_is_a_type_error():
    message = "typed_shard_map: check_rep is the old name of check_vma; pass one of them"
    with pytest.raises(TypeError, match=re.escape(message)):
        typed_shard_map(unreplicated, check_rep=True, check_vma=False)
    with pytest.raises(TypeError, match=re.escape(message)):
        functools.partial(typed_shard_map, check_rep=False, check_vma=True)(unreplicated)
    with pytest.raises(TypeError, match=re.escape(message)):
        typed_shard_map(check_rep=False, check_vma=True)


# ---------------------------------------------------------------------------------------------
# The body is checked with local shapes against global sizes.


@typed_shard_map
def wrong_return(x: f32[b"B/d M"]) -> f32[b"B/d M M"]:
    return x


@typed_shard_map
def extra_dim(x: f32[b"B/d M"]) -> f32[b"B/d M"]:
    return x[..., None]


@typed_shard_map
def two_batches(x: f32[b"B/d M"], y: f32[b"B/d M"]) -> f32[b"B/d M"]:
    return x + y[: x.shape[0]]


def test_body_sees_local_blocks_and_global_dims(mesh):
    SEEN.clear()
    with jax.set_mesh(mesh):
        record(put(mesh, X, "d", "t"))
    assert SEEN == [("record", (2, 2), {"B": 8, "M": 4})]


def test_body_return_annotation_is_checked(mesh):
    with jax.set_mesh(mesh):
        with pytest.raises(TypeCheckError) as info:
            wrong_return(put(mesh, X, "d"))
    message = str(info.value)
    assert "the return value" in message and "wrong_return()" in message
    assert "f32[b'B/d M M']" in message
    assert "has 2 dims [2,4] but the annotation has 3" in message


def test_body_arguments_share_one_table_of_global_sizes(mesh):
    with jax.set_mesh(mesh):
        x, y = put(mesh, X, "d"), put(mesh, np.concatenate([X, X]), "d")  # B=8 vs B=16
        with pytest.raises(TypeCheckError) as info:
            two_batches(x, y)
    message = str(info.value)
    assert 'argument "y"' in message and "two_batches()" in message
    assert "dimension 'B' is 16 here (dim 0) but was bound to 8 by argument \"x\"" in message


def test_body_value_with_extra_dim_reports_rank(mesh):
    with jax.set_mesh(mesh):
        with pytest.raises(TypeCheckError) as info:
            extra_dim(put(mesh, X, "d"))
    message = str(info.value)
    assert "the return value" in message and "extra_dim()" in message
    assert "has 3 dims" in message and "the annotation has 2" in message


# ---------------------------------------------------------------------------------------------
# Composition with jax.jit, scope and typechecked.


def _kernel(x: f32[b"B/d M/t"]) -> f32[b"B/d M/t"]:
    SEEN.append(("kernel", x.shape, dict(dims())))
    return x * 2


COMPOSED = {
    "typechecked(typed_shard_map(f))": typechecked(typed_shard_map(_kernel)),
    "typed_shard_map(typechecked(f))": typed_shard_map(typechecked(_kernel)),
    "typed_shard_map(scope(f))": typed_shard_map(scope(_kernel)),
    "scope(typed_shard_map(f))": scope(typed_shard_map(_kernel)),
    "typechecked(scope(typed_shard_map(f)))": typechecked(scope(typed_shard_map(_kernel))),
}
COMPOSED_JIT = {name: jax.jit(f) for name, f in COMPOSED.items()}


@pytest.mark.parametrize("name", sorted(COMPOSED))
def test_composes_with_jit_scope_and_typechecked(mesh, name):
    SEEN.clear()
    with jax.set_mesh(mesh):
        xs = put(mesh, X, "d", "t")
        for f in (COMPOSED[name], COMPOSED_JIT[name]):
            out = f(xs)
            np.testing.assert_allclose(np.asarray(out), 2 * X)
            assert_layout(out, mesh, "d", "t")
        # A wrong dtype is caught as a TypeCheckError, by the outer check or in the body.
        with pytest.raises(TypeCheckError, match=r'argument "x" .*int32'):
            COMPOSED_JIT[name](put(mesh, X.astype(np.int32), "d", "t"))
    assert [s[1] for s in SEEN] == [(2, 2), (2, 2)]


def test_typechecked_outside_shares_the_callers_table(mesh):
    with jax.set_mesh(mesh):
        with Scope(B=16):
            with pytest.raises(TypeCheckError, match=r"dimension 'B' is 8 here \(dim 0\) but was bound to 16 by Scope\(B=16\)"):
                COMPOSED["typechecked(typed_shard_map(f))"](put(mesh, X, "d", "t"))


def test_scope_outside_gives_the_kernel_a_fresh_table(mesh):
    SEEN.clear()
    with jax.set_mesh(mesh):
        with Scope(B=16):
            out = COMPOSED["scope(typed_shard_map(f))"](put(mesh, X, "d", "t"))
            assert dict(dims()) == {"B": 16}
    np.testing.assert_allclose(np.asarray(out), 2 * X)
    assert SEEN == [("kernel", (2, 2), {"B": 8, "M": 4})]


def test_scope_inside_gives_the_kernel_a_fresh_table(mesh):
    SEEN.clear()
    with jax.set_mesh(mesh):
        with Scope(B=16):
            out = COMPOSED["typed_shard_map(scope(f))"](put(mesh, X, "d", "t"))
            assert dict(dims()) == {"B": 16}
    np.testing.assert_allclose(np.asarray(out), 2 * X)
    assert SEEN == [("kernel", (2, 2), {"B": 8, "M": 4})]


# ---------------------------------------------------------------------------------------------
# Parameters: static (non-array) values and pytree dataclasses.


@dataclasses.dataclass(frozen=True)
class Config:  # a plain (hashable) dataclass, NOT a pytree
    scale: float
    name: str = "cfg"


@typed_shard_map
def with_statics(x: f32[b"B/d M"], n: int, config: Config, offset) -> f32[b"B/d M"]:
    SEEN.append(("statics", type(n), n, config, offset))
    return x * (n * config.scale) + offset


def test_non_array_parameters_pass_through_as_static_values(mesh, spy_shard_map):
    SEEN.clear()
    config = Config(0.5)
    with jax.set_mesh(mesh):
        xs = put(mesh, X, "d")
        outs = [
            with_statics(xs, 3, config, 1.0),
            with_statics(xs, offset=1.0, config=config, n=3),
            jax.jit(with_statics, static_argnames=("n", "config", "offset"))(xs, 3, config, 1.0),
        ]
    for out in outs:
        np.testing.assert_allclose(np.asarray(out), X * 1.5 + 1.0, rtol=1e-5, atol=1e-6)
        assert_layout(out, mesh, "d", None)
    assert SEEN == [("statics", int, 3, config, 1.0)] * 3
    assert all(kwargs["in_specs"] == (P("d", None),) for kwargs in spy_shard_map)


@pytree_dataclass
class Layer:
    w_up: f32[b"M F/t"]
    w_down: f32[b"F/t M"]


@typed_shard_map
def mlp(x: f32[b"B/d M"], layer: Layer) -> f32[b"B/d M"]:
    return jax.lax.psum(jnp.tanh(x @ layer.w_up) @ layer.w_down, "t")


@typed_shard_map
def scale_layer(layer: Layer, s: float) -> tuple[Layer, f32[b"M"]]:
    return Layer(layer.w_up * s, layer.w_down * s), jax.lax.psum(layer.w_down.sum(0), "t")


def test_pytree_dataclass_parameters_get_tree_specs(mesh, spy_shard_map):
    with jax.set_mesh(mesh):
        xs = put(mesh, X, "d")
        layer = Layer(put(mesh, W, None, "t"), put(mesh, W.T.copy(), "t"))
        for out in (mlp(xs, layer), jax.jit(mlp)(xs, layer)):
            np.testing.assert_allclose(np.asarray(out), np.tanh(X @ W) @ W.T, rtol=1e-4, atol=1e-4)
            assert_layout(out, mesh, "d", None)
        new, col = scale_layer(layer, 2.0)
    assert spy_shard_map[0]["in_specs"] == (P("d", None), Layer(P(None, "t"), P("t", None)))
    assert spy_shard_map[-1]["in_specs"] == (Layer(P(None, "t"), P("t", None)),)
    assert spy_shard_map[-1]["out_specs"] == (Layer(P(None, "t"), P("t", None)), P(None))
    assert isinstance(new, Layer)
    np.testing.assert_allclose(np.asarray(new.w_up), 2 * W, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(new.w_down), 2 * W.T, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(col), W.T.sum(0), rtol=1e-5)
    assert_layout(new.w_up, mesh, None, "t")
    assert_layout(new.w_down, mesh, "t", None)


# ---------------------------------------------------------------------------------------------
# Errors.


def test_missing_return_annotation_is_a_type_error(mesh):
    def no_return(x: f32[b"B/d M"]):
        return x

    kernel = typed_shard_map(no_return)
    with jax.set_mesh(mesh):
        with pytest.raises(TypeError, match=re.escape("no_return needs a return annotation for its out_specs")):
            kernel(put(mesh, X, "d"))


def test_var_positional_is_a_type_error(mesh):
    def star(*xs: f32[b"B/d M"]) -> f32[b"B/d M"]:
        return xs[0]

    def star_star(x: f32[b"B/d M"], **rest: f32[b"B/d M"]) -> f32[b"B/d M"]:
        return x

    with jax.set_mesh(mesh):
        with pytest.raises(TypeError, match=r"star has \*xs; annotate each array parameter instead"):
            typed_shard_map(star)(put(mesh, X, "d"))
        with pytest.raises(TypeError, match=r"star_star has \*{1,2}rest; annotate each array parameter"):
            typed_shard_map(star_star)(put(mesh, X, "d"))


def test_not_a_function_is_a_type_error():
    with pytest.raises(TypeError, match="typed_shard_map expects a function, got 3"):
        typed_shard_map(3)


def test_wrong_dtype_is_caught_in_the_body(mesh):
    with jax.set_mesh(mesh):
        with pytest.raises(TypeCheckError) as info:
            matmul_jit(put(mesh, X.astype(np.int32), "d"), put(mesh, W, None, "t"))
    message = str(info.value)
    assert 'argument "x"' in message and "matmul()" in message and "int32" in message


def test_wrongly_sharded_input_under_jit_on_explicit_mesh():
    mesh = make_mesh("explicit")
    with jax.set_mesh(mesh):
        with pytest.raises(TypeCheckError) as info:
            matmul_jit(put(mesh, X, "t"), put(mesh, W, None, "t"))
    message = str(info.value)
    assert 'argument "x"' in message and "matmul" in message
    assert "f32[b'B/d M']" in message


# ---------------------------------------------------------------------------------------------
# is_fully_sharded: inside a kernel it counts the manual axes.


@typed_shard_map
def fully_sharded_inside(x: f32[b"B/d M/t"]) -> f32[b"B/d M/t"]:
    SEEN.append(
        (
            "fully",
            is_fully_sharded(P("d", "t")),
            is_fully_sharded(P("d")),
            is_fully_sharded(P(("d", "t"))),
            is_fully_sharded(P(None, "t")),
            is_fully_sharded(P(("t", "d"), None)),
        )
    )
    return x


def test_is_fully_sharded_inside_a_kernel(mesh):
    SEEN.clear()
    with jax.set_mesh(mesh):
        fully_sharded_inside(put(mesh, X, "d", "t"))
    assert SEEN == [("fully", True, False, True, False, True)]


def test_is_fully_sharded_outside_a_kernel(mesh):
    assert is_fully_sharded(P("d", "t"), mesh)
    assert not is_fully_sharded(P("d"), mesh)
    assert not is_fully_sharded(P(), mesh)
    with jax.set_mesh(mesh):
        assert is_fully_sharded(P(None, ("d", "t")))
        assert not is_fully_sharded(P("t", None))
    with pytest.raises(ValueError, match="is_fully_sharded: no mesh"):
        is_fully_sharded(P("d"))


def test_a_list_of_arrays_is_not_taken_for_a_static_parameter(mesh):
    def kernel(xs: list[f32[b"B/d M"]]) -> f32[b"B/d M"]:
        return xs[0]

    with jax.set_mesh(mesh):
        with pytest.raises(TypeError, match=r"typed_shard_map: argument \"xs\" of .*kernel: the annotation is list\[.*\], which has no layout"):
            typed_shard_map(kernel)([put(mesh, X, "d")])


def test_annotations_may_name_locals_of_the_defining_scope(tmp_path, mesh):
    """With PEP 563 the annotations are strings; a local alias of the function that applies the
    decorator resolves, as it does for typechecked."""
    import importlib.util

    (tmp_path / "local_alias.py").write_text(
        "from __future__ import annotations\n"
        "from shardtypes import f32, typed_shard_map\n"
        "def make():\n"
        "    Block = f32[b'B/d M']\n"
        "    @typed_shard_map\n"
        "    def double(x: Block) -> Block:\n"
        "        return 2 * x\n"
        "    return double\n"
    )
    spec = importlib.util.spec_from_file_location("local_alias", tmp_path / "local_alias.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    with jax.set_mesh(mesh):
        out = module.make()(put(mesh, X, "d"))
    np.testing.assert_allclose(np.asarray(out), 2 * X)


def test_specs_without_rules_are_not_those_of_the_first_rule_set(mesh):
    from shardtypes import AxisRules, axis_rules

    @typed_shard_map
    def ident(x: f32[b"B/d M"]) -> f32[b"B/d M"]:
        return x

    with jax.set_mesh(mesh):
        with axis_rules(AxisRules([("d", "t")])):  # first call under rules: 'd' means mesh axis t
            assert ident(put(mesh, X, "t")).sharding.spec == P("t", None)
        assert ident(put(mesh, X, "d")).sharding.spec == P("d", None)  # no rules: 'd' is d
