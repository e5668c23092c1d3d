"""typed_shard_map (shardtypes.kernels), and is_fully_sharded inside it.

Specs derived from the signature, resolved once; the mesh current at each call (or ``mesh=``);
keyword arguments; partial manual axes; check_vma / check_rep; the body checked with local shapes;
composition with jax.jit, scope and typechecked; static (non-array) parameters; pytree dataclass
parameters; the errors; the arguments' layout at the boundary under jax.jit (at trace time on
Explicit axes, at compile time on Auto axes, off with auto_sharding_check='off').

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

import shardtypes
import shardtypes.kernels.shard_map as shard_map_module  # spied on: which specs it derives
from shardtypes import (
    Scope,
    dims,
    f32,
    i32,
    is_fully_sharded,
    pytree_dataclass,
    scope,
    shard,
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
def auto_check():
    """Sets ``shardtypes.config.auto_sharding_check`` for one test, then restores it."""
    old = shardtypes.config.auto_sharding_check

    def set_mode(mode: str) -> None:
        shardtypes.config.auto_sharding_check = mode

    try:
        yield set_mode
    finally:
        shardtypes.config.auto_sharding_check = old


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


def _lowered(f, *args) -> str:
    return re.sub(r"module @\S+", "module @M", jax.jit(f).lower(*args).as_text())


def _compiled(f, *args) -> str:
    """The optimised HLO without what only names the source: the module name, metadata and the
    tables of source files and frames (as benchmarks/_common.py's program_text)."""
    lines, skipping = [], False
    for line in jax.jit(f).lower(*args).compile().as_text().splitlines():
        if line.startswith("HloModule "):
            line = "HloModule " + line.split(",", 1)[1]
        if line in ("FileNames", "FunctionNames", "FileLocations", "StackFrames"):
            skipping = True
        if skipping:
            skipping = line.strip() != ""
            continue
        lines.append(re.sub(r",? ?metadata=\{[^}]*\}", "", line))
    return "\n".join(lines)


def test_same_lowering_as_hand_written_shard_map(mesh, auto_check):
    """The body is staged once with jax.jit for the layout pass and inlined into the manual
    computation from jit's cache: the lowered module is the hand-written one."""
    with jax.set_mesh(mesh):
        xs, ws = put(mesh, X, "d"), put(mesh, W, None, "t")
        hand = jax.shard_map(body, in_specs=(P("d"), P(None, "t")), out_specs=P("d", "t"))
        typed = _lowered(matmul, xs, ws)
        assert "manual_computation" in typed
        if mesh.axis_types[0] == jax.sharding.AxisType.Explicit:
            assert typed == _lowered(hand, xs, ws)  # checked at trace time: nothing added
            return
        # Auto axes: each argument gets a compile-time inspection, the result none (out_specs
        # lay it out). The partitioner removes them: the compiled program is the same.
        assert typed.count("@InspectSharding") == 2
        assert _compiled(matmul, xs, ws) == _compiled(hand, xs, ws)
        auto_check("off")
        assert _lowered(matmul, xs, ws) == _lowered(hand, xs, ws)


def test_specs_come_from_the_signature(mesh, spy_shard_map):
    with jax.set_mesh(mesh):
        matmul(put(mesh, X, "d"), put(mesh, W, None, "t"))
    (kwargs,) = spy_shard_map
    assert kwargs["in_specs"] == (P("d", None), P(None, "t"))
    assert kwargs["out_specs"] == P("d", "t")
    assert "axis_names" not in kwargs and "check_vma" not in kwargs


def test_specs_are_resolved_once_not_per_call(mesh, monkeypatch):
    spec_calls: list = []
    real_specs = shard_map_module.derive_specs

    def spy_specs(annotation):
        spec_calls.append(str(annotation))
        return real_specs(annotation)

    hint_calls: list = []
    real_hints = typing.get_type_hints

    def spy_hints(obj, *args, **kwargs):
        hint_calls.append(getattr(obj, "__qualname__", obj))
        return real_hints(obj, *args, **kwargs)

    monkeypatch.setattr(shard_map_module, "derive_specs", spy_specs)
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
        "typed_shard_map: calling matmul: no mesh; pass mesh=... or set one with "
        "`with jax.set_mesh(mesh):`. If you opened JAX's legacy `with Mesh(...):` context"
    )
    with pytest.raises(ValueError, match=re.escape(message)):
        matmul(xs, ws)
    with pytest.raises(ValueError, match=re.escape(message)):
        jax.jit(matmul)(xs, ws)


def test_legacy_mesh_context_is_named_as_the_likely_cause():
    # seqax's main_contained opens `with Mesh(...)`: invisible to get_abstract_mesh().
    import warnings

    mesh = make_mesh("auto")
    xs, ws = put(mesh, X, "d"), put(mesh, W, None, "t")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        with jax.sharding.Mesh(mesh.devices, mesh.axis_names):
            with pytest.raises(ValueError, match=re.escape("use `with jax.set_mesh(mesh):` instead")):
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


@pytest.mark.parametrize("kind", KINDS)
def test_partial_manual_still_checks_the_non_manual_axis(kind):
    mesh = make_mesh(kind)
    with jax.set_mesh(mesh):
        wrong = put(mesh, X, "d")  # the annotation also shards M over the non-manual axis t
        message = boundary_error(kind, jax.jit(partial_manual), wrong)
    assert 'argument "x"' in message and "partial_manual()" in message
    assert "f32[b'B/d M/t']" in message
    if kind == "explicit":  # caught at the boundary, on the global array, at trace time
        assert "is P('d', None) but the annotation says P('d', 't')" in message
    else:  # at compile time, at the boundary or on the body's block (without the manual axis d)
        assert ("is P('d', None) but the annotation says P('d', 't')" in message
                or "is P(None, None) but the annotation says P(None, 't')" in message), message


# ---------------------------------------------------------------------------------------------
# check_vma and its old name check_rep.


def unreplicated(x: f32[b"B/d M"]) -> f32[b"M"]:
    return x.sum(0)  # varies over d, but the return annotation says replicated


def test_check_vma_default_is_on(mesh):
    # The kernel pass sees the partial sum (before JAX's out_specs check would); JAX types the
    # body's values varying (check_vma on) unless told otherwise.
    seen = []

    def typed(x: f32[b"B/d M"]) -> f32[b"B/d M"]:
        seen.append(str(jax.typeof(x)))
        return x

    with jax.set_mesh(mesh):
        with pytest.raises(TypeCheckError, match="unreplicated.*partial sum still owing a sum over mesh axis 'd'"):
            typed_shard_map(unreplicated)(put(mesh, X, "d"))
        with pytest.raises(TypeCheckError, match="unreplicated.*partial sum still owing a sum over mesh axis 'd'"):
            typed_shard_map(unreplicated, check_rep=True)(put(mesh, X, "d"))
        typed_shard_map(typed)(put(mesh, X, "d"))
        typed_shard_map(typed, check_rep=True)(put(mesh, X, "d"))
        typed_shard_map(typed, check_vma=False)(put(mesh, X, "d"))
    assert ["V:d" in s for s in seen] == [True, True, False], seen


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
    kernel = make(reduced_sum)
    with jax.set_mesh(mesh):
        out = kernel(put(mesh, X, "d"))
    assert spy_shard_map[0]["check_vma"] is False
    np.testing.assert_allclose(np.asarray(out), X.sum(0), rtol=1e-5, atol=1e-5)
    assert_layout(out, mesh)


def reduced_sum(x: f32[b"B/d M"]) -> f32[b"M"]:
    return jax.lax.psum(x.sum(0), "d")


def test_a_forgotten_reduction_is_caught_with_check_vma_off(mesh):
    """With check_vma off JAX returned device 0's partial sum silently; shardtypes' pass over the
    body's jaxpr sees jnp.sum over a dim split over 'd' and the return annotation replicating it."""
    message = (r"in kernel unreplicated\(\), the return value of unreplicated\(\), annotated f32\[b'M'\]: "
               r"it is a partial sum still owing a sum over mesh axis 'd' \(made by a sum \(jnp.sum\) over "
               r"dim 0 of a value split over mesh axis 'd' \(argument \"x\" of unreplicated\(\)")
    with jax.set_mesh(mesh):
        for call in (typed_shard_map(unreplicated, check_vma=False),
                     jax.jit(typed_shard_map(unreplicated, check_vma=False))):
            with pytest.raises(TypeCheckError, match=message):
                call(put(mesh, X, "d"))


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


# ---------------------------------------------------------------------------------------------
# The boundary under jax.jit: the arguments' layout is checked on Explicit axes at trace time and
# on Auto axes at compile time (jax.debug.inspect_array_sharding), so that a wrongly laid out
# input is reported instead of being resharded by shard_map on every call.


def compile_error(info) -> str:
    """The message of a compile-time failure: shardtypes' own TypeCheckError, its text first."""
    message = str(info.value)
    assert message.startswith("shardtypes (compile-time check)"), message
    return message


def boundary_error(kind: str, f, *args) -> str:
    """The message for a wrongly laid out argument of a jitted kernel: a TypeCheckError at trace
    time on Explicit axes, a failed compilation on Auto axes."""
    if kind == "explicit":
        with pytest.raises(TypeCheckError) as info:
            f(*args)
        return str(info.value)
    with pytest.raises(TypeCheckError) as info:
        f(*args)
    return compile_error(info)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(
    "x_spec, w_spec, name, annotation, problem",
    [
        ((), (None, "t"), "x", "f32[b'B/d M']", "is P(None, None) but the annotation says P('d', None)"),
        (("t",), (None, "t"), "x", "f32[b'B/d M']", "is P('t', None) but the annotation says P('d', None)"),
        (("d",), ("t",), "w", "f32[b'M F/t']", "is P('t', None) but the annotation says P(None, 't')"),
    ],
    ids=["x replicated", "x over t", "w transposed"],
)
def test_wrongly_laid_out_argument_of_a_jitted_kernel(kind, x_spec, w_spec, name, annotation,
                                                       problem):
    mesh = make_mesh(kind)
    with jax.set_mesh(mesh):
        message = boundary_error(kind, matmul_jit, put(mesh, X, *x_spec), put(mesh, W, *w_spec))
        # The same jitted function still runs correctly laid out inputs.
        out = matmul_jit(put(mesh, X, "d"), put(mesh, W, None, "t"))
    assert f'argument "{name}"' in message and "matmul()" in message, message
    assert annotation in message and problem in message, message
    np.testing.assert_allclose(np.asarray(out), REF, rtol=1e-5, atol=1e-5)


@pytree_dataclass
class Weights:
    embed: f32[b"V/t D/d"]
    unembed: f32[b"D/d V/t"]


@pytree_dataclass
class TrainState:
    weights: Weights
    step: i32[b""]


@typed_shard_map
def sgd_step(state: TrainState, lr: f32[b""]) -> TrainState:
    w = state.weights
    return TrainState(Weights(w.embed * (1 - lr), w.unembed * (1 - lr)), state.step + 1)


sgd_step_jit = jax.jit(sgd_step)
V, D = 16, 8


def train_state(mesh, embed=("t", "d")) -> TrainState:
    embed_w = RNG.standard_normal((V, D)).astype(np.float32)
    return TrainState(
        Weights(put(mesh, embed_w, *embed), put(mesh, embed_w.T.copy(), "d", "t")),
        put(mesh, np.int32(3)),
    )


@pytest.mark.parametrize("kind", KINDS)
def test_a_replicated_weight_in_a_pytree_dataclass_names_its_path(kind):
    """The issue's case: a replicated embed, annotated vocab/t d_model/d, given to the jitted
    training step whose body is a typed_shard_map kernel."""
    mesh = make_mesh(kind)
    with jax.set_mesh(mesh):
        lr = put(mesh, np.float32(0.5))
        good = train_state(mesh)
        new = sgd_step_jit(good, lr)
        message = boundary_error(kind, sgd_step_jit, train_state(mesh, embed=()), lr)
        lowered = jax.jit(sgd_step).lower(good, lr).as_text()
    np.testing.assert_allclose(np.asarray(new.weights.embed), 0.5 * np.asarray(good.weights.embed))
    assert int(new.step) == 4
    assert_layout(new.weights.embed, mesh, "t", "d")
    assert "state.weights.embed" in message and 'argument "state"' in message, message
    assert "sgd_step()" in message and "f32[b'V/t D/d']" in message, message
    assert "P(None, None) but the annotation says P('t', 'd')" in message, message
    # One compile-time inspection per array leaf of the arguments (4), none for the result.
    assert lowered.count("@InspectSharding") == (4 if kind == "auto" else 0)


@typed_shard_map
def double(x: f32[b"B/d M"]) -> f32[b"B/d M"]:
    return x * 2


def _fed(x, w):
    """Kernel inputs computed inside the jit, by kind of value (x is laid out P('d')). Each case
    uses x, a laid out argument: see test_a_jit_with_no_laid_out_input for why."""
    key = jax.random.key(1)
    return {
        "x * 2": lambda: double(x * 2),
        "shard() of a replicated product": lambda: double(shard(jnp.tanh(x) * 1.0, f32[b"B/d M"])),
        "shard() of jnp.zeros": lambda: double(shard(jnp.zeros((8, 4)), f32[b"B/d M"])) + x,
        "another kernel's result": lambda: double(double(x)),
        "a matmul of laid out inputs": lambda: matmul(x @ jnp.eye(4), w),
        "scan carry": lambda: jax.lax.scan(lambda c, _: (double(c), None), x, None, length=3)[0],
        "grad through the kernel": lambda: jax.grad(lambda v: matmul(v, w).sum())(x),
        "remat": lambda: jax.checkpoint(double)(x),
        "cond": lambda: jax.lax.cond(jnp.sum(x) > 0, double, lambda v: v, x),
        "random bits": lambda: double(jax.random.normal(key, (8, 4))) + x,
    }


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("case", sorted(_fed(None, None)))
def test_values_computed_inside_the_jit_are_not_falsely_rejected(kind, case):
    """XLA settles the layout of a value computed inside the jit; where the kernel's in_specs
    decide it (or a constraint does), the compile-time check sees the annotated layout."""
    if kind == "explicit" and case == "random bits":
        pytest.skip("on Explicit axes jax.random gives a replicated value (no out_sharding)")
    mesh = make_mesh(kind)
    step = jax.jit(lambda x, w: _fed(x, w)[case]())
    with jax.set_mesh(mesh):
        xs, ws = put(mesh, X, "d"), put(mesh, W, None, "t")
        out = step(xs, ws)
        inspections = step.lower(xs, ws).as_text().count("@InspectSharding")
    assert out.shape in ((8, 4), (8, 8))
    assert (inspections > 0) == (kind == "auto")  # the check was there, and passed


def test_a_product_of_a_replicated_argument_is_laid_out_by_the_kernel():
    """On Auto axes XLA computes ``x * 2`` in the layout the kernel wants even from a replicated
    ``x`` (a local slice, no communication), so the program is correct and is not rejected; a
    constraint to the annotated layout is fine too. (On Explicit axes ``x * 2`` has x's layout.)"""
    mesh = make_mesh("auto")
    with jax.set_mesh(mesh):
        xr = put(mesh, X)
        for f in (lambda x: double(x * 2),
                  lambda x: double(jax.lax.with_sharding_constraint(x, P("d")))):
            out = jax.jit(f)(xr)
            assert_layout(out, mesh, "d", None)
        np.testing.assert_allclose(np.asarray(out), 2 * X)


@pytest.mark.parametrize("kind", KINDS)
def test_a_value_pinned_to_another_layout_is_reported_as_on_explicit_axes(kind):
    """What XLA cannot lay out for the kernel (a constant made inside the jit, a value constrained
    to another layout) is reported on Auto axes as it is on Explicit ones: lay it out with
    ``shard(value, annotation)``."""
    mesh = make_mesh(kind)
    with jax.set_mesh(mesh):
        xs = put(mesh, X, "d")
        message = boundary_error(kind, jax.jit(lambda x: double(jnp.zeros((8, 4))) + x), xs)
        assert "P(None, None) but the annotation says P('d', None)" in message
        if kind == "auto":
            pinned = jax.jit(lambda x: double(jax.lax.with_sharding_constraint(x, P(None, "d"))))
            message = boundary_error(kind, pinned, put(mesh, X, None, "d"))
            assert "P(None, 'd') but the annotation says P('d', None)" in message


@pytest.mark.parametrize("kind", KINDS)
def test_auto_sharding_check_off_turns_the_boundary_check_off_on_auto_axes(kind, auto_check):
    mesh = make_mesh(kind)
    step = jax.jit(matmul)
    with jax.set_mesh(mesh):
        xr, ws = put(mesh, X), put(mesh, W, None, "t")
        auto_check("off")
        assert jax.jit(matmul).lower(put(mesh, X, "d"), ws).as_text().count("@InspectSharding") == 0
        if kind == "explicit":  # Explicit axes are checked at trace time whatever the setting
            boundary_error(kind, step, xr, ws)
            return
        out = step(xr, ws)  # resharded by shard_map, unchecked
        np.testing.assert_allclose(np.asarray(out), REF, rtol=1e-5, atol=1e-5)
        assert_layout(out, mesh, "d", "t")
        with pytest.raises(TypeCheckError, match=r'argument "x" \(jax.Array\) of matmul\(\)'):
            matmul(xr, ws)  # eager calls check the real layout whatever the setting
        auto_check("compile")  # the setting is part of jit's cache key: traced again, checked
        message = boundary_error(kind, step, xr, ws)
    assert 'argument "x" of matmul()' in message


@pytest.mark.parametrize("kind", KINDS)
def test_eager_calls_check_the_real_layout(kind):
    mesh = make_mesh(kind)
    with jax.set_mesh(mesh):
        xr, ws = put(mesh, X), put(mesh, W, None, "t")
        with pytest.raises(TypeCheckError) as info:
            matmul(xr, ws)
        # Under a transformation outside jit (here grad), the argument is a tracer whose real
        # layout is inspected at once.
        with pytest.raises(TypeCheckError) as traced:
            jax.grad(lambda x: matmul(x, ws).sum())(xr)
        grad = jax.grad(lambda x: matmul(x, ws).sum())(put(mesh, X, "d"))
    message = str(info.value)
    assert 'argument "x" (jax.Array) of matmul()' in message
    assert "sharding is P(None, None) but the annotation says P('d', None)" in message
    message = str(traced.value)
    assert 'argument "x"' in message and "matmul()" in message
    assert "P(None, None) but the annotation says P('d', None)" in message
    np.testing.assert_allclose(np.asarray(grad), (1 - REF**2) @ W.T, rtol=1e-4, atol=1e-4)


def test_mixed_axis_types_check_explicit_axes_at_trace_time_and_auto_at_compile_time():
    mesh = jax.make_mesh((4, 2), ("d", "t"), axis_types=(jax.sharding.AxisType.Explicit,
                                                          jax.sharding.AxisType.Auto))
    step = jax.jit(record)
    with jax.set_mesh(mesh):
        out = step(put(mesh, X, "d", "t"))
        assert_layout(out, mesh, "d", "t")
        explicit = r"Explicit axes is P\(None, None\) but the annotation says P\('d', None\)"
        with pytest.raises(TypeCheckError, match=explicit):
            step(put(mesh, X, None, "t"))  # d is Explicit: trace time
        with pytest.raises(TypeCheckError) as info:
            step(put(mesh, X, "d"))  # t is Auto: compile time
    message = compile_error(info)
    assert 'argument "x" of record()' in message
    assert "but the annotation says P('d', 't')" in message


def test_a_jit_with_no_laid_out_input():
    """Nothing names a concrete mesh, so XLA's sharding names no axes (a GSPMDSharding): it is
    compared through the blocks each device holds."""
    mesh = make_mesh("auto")
    with jax.set_mesh(mesh):
        out = jax.jit(lambda: double(shard(jnp.ones((8, 4)), f32[b"B/d M"])))()
    np.testing.assert_allclose(np.asarray(out), 2 * np.ones((8, 4)))


def test_vmap_of_a_jitted_kernel_on_auto_axes():
    """vmap's batch dims are told apart from the annotated ones (JAX's spec of the batched array
    drops its trailing unsharded dims, so they are counted through custom_vmap)."""
    mesh = make_mesh("auto")
    with jax.set_mesh(mesh):
        xs = put(mesh, np.stack([X] * 3), None, "d")
        out = jax.jit(jax.vmap(double))(xs)
    np.testing.assert_allclose(np.asarray(out), 2 * np.stack([X] * 3))


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
    """A list[X] parameter is mapped, each item laid out as X says (not closed over as static)."""
    def kernel(xs: list[f32[b"B/d M"]]) -> f32[b"B/d M"]:
        return xs[0] + xs[1]

    with jax.set_mesh(mesh):
        out = typed_shard_map(kernel)([put(mesh, X, "d"), put(mesh, X, "d")])
        np.testing.assert_allclose(np.asarray(out), 2 * X)
        with pytest.raises(TypeCheckError, match=r'argument "xs"'):
            typed_shard_map(kernel)([put(mesh, X, "d"), put(mesh, X)])


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
