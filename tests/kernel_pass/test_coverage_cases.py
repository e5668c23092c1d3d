"""Issue 44 item 6: kernels the pass got wrong (a false error or a silent miss), each written as
a real codebase writes it, on the 8 simulated CPU devices, on Explicit and Auto axes. A *correct*
kernel must be accepted and compute the unsharded (numpy, float64) result; its *realistic
mistake* must compute another result with shardtypes' checks off (so it is a mistake, whatever
the pass says) and be refused with a ``TypeCheckError`` naming what is wrong. The cases: (1)
flash decoding's log-sum-exp combine; (2) a cumsum carried device to device by ``ppermute`` in a
``scan``; (3) MoE per-group statistics without ``ops.per_device``; (4) nested kernels; (5) a
closed-over constant returned; (6) the compile-time check of a partial-manual kernel's return
over its automatic axes; (7) ``jax.lax.ragged_dot`` contracting a split dim.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P
from typeguard import TypeCheckError

import shardtypes
from shardtypes import f32, i32, typed_shard_map

from conftest import make_mesh, put

KINDS = ["explicit", "auto"]
KIND = pytest.mark.parametrize("kind", KINDS)
BOTH = pytest.mark.parametrize("kind, check_vma", [(k, v) for k in KINDS for v in (True, False)],
                               ids=[f"{k}-{'vma' if v else 'novma'}" for k in KINDS for v in (True, False)])
TOL = dict(rtol=2e-4, atol=2e-4)
RNG = np.random.default_rng(44)


def normal(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def call(f, mesh, args, *, check_vma=True, checks=True, jitted=True, axis_names=None, raw=False):
    """``f`` as a ``typed_shard_map`` kernel on ``mesh`` (shardtypes' checks on or off); the
    result as numpy (``raw``: as JAX gives it). The setting is restored whatever happens."""
    before = shardtypes.config.checks
    shardtypes.config.checks = checks
    try:
        with jax.set_mesh(mesh):
            kernel = typed_shard_map(f, check_vma=check_vma, axis_names=axis_names)
            out = (jax.jit(kernel) if jitted else kernel)(*args)
            return out if raw else jax.tree.map(np.asarray, out)
    finally:
        shardtypes.config.checks = before


def accepted(f, mesh, args, reference, **options):
    """The kernel computes ``reference`` with checks off (plain ``jax.shard_map`` with the
    derived specs), and with checks on it is accepted and computes the same."""
    for checks in (False, True):
        out = call(f, mesh, args, checks=checks, **options)
        for got, want in zip(jax.tree.leaves(out), jax.tree.leaves(reference)):
            np.testing.assert_allclose(got, want, **TOL)


def refused(f, mesh, args, reference, message, *, check_vma=True, **options):
    """The mistake computes something else with checks off (with check_vma off where JAX's own
    out_specs check refuses it first), and is refused, naming what is wrong."""
    try:
        out = call(f, mesh, args, checks=False, check_vma=check_vma, **options)
    except ValueError as e:
        assert "out_specs" in str(e), e
        out = call(f, mesh, args, checks=False, check_vma=False, **options)
    out, reference = np.asarray(out), np.asarray(reference)
    assert out.shape != reference.shape or not np.allclose(out, reference, rtol=1e-3, atol=1e-3), \
        "the mistake computes the right numbers"
    with pytest.raises(TypeCheckError, match=message):
        call(f, mesh, args, check_vma=check_vma, **options)


def f64(a):
    return np.asarray(a, np.float64)


def softmax(s):
    e = np.exp(s - s.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


# =============================================================================================
# 1. Flash decoding (split-KV): each device attends to its block of the KV cache, keeping its
#    block's output normalised by its own sum and its log-sum-exp; the blocks are merged by
#    their log-sum-exp (FlashDecoding's reduction: weights exp(lse - max lse), psum).

def _attend_block(q, k, v):
    s = jnp.einsum("bh,bkh->bk", q, k) / np.sqrt(q.shape[-1])
    m = s.max(-1)                                      # this block's max
    p = jnp.exp(s - m[:, None])
    l = p.sum(-1)                                      # this block's sum of exp
    o = jnp.einsum("bk,bkh->bh", p, v) / l[:, None]    # this block's attention output
    return o, m, l


def flash_decode(q: f32[b"batch head"], k: f32[b"batch kv/d head"], v: f32[b"batch kv/d head"]) -> f32[b"batch head"]:
    o, m, l = _attend_block(q, k, v)
    lse = m + jnp.log(l)
    w = jnp.exp(lse - jax.lax.pmax(lse, "d"))
    return jax.lax.psum(o * w[:, None], "d") / jax.lax.psum(w, "d")[:, None]


def flash_decode_plain_mean(q: f32[b"batch head"], k: f32[b"batch kv/d head"],
                            v: f32[b"batch kv/d head"]) -> f32[b"batch head"]:
    o, _, _ = _attend_block(q, k, v)
    return jax.lax.pmean(o, "d")  # each block's output weighted alike, whatever its share


def flash_decode_max_weights(q: f32[b"batch head"], k: f32[b"batch kv/d head"],
                             v: f32[b"batch kv/d head"]) -> f32[b"batch head"]:
    o, m, _ = _attend_block(q, k, v)
    w = jnp.exp(m - jax.lax.pmax(m, "d"))  # the max's rescale only: o was already divided by l
    return jax.lax.psum(o * w[:, None], "d") / jax.lax.psum(w, "d")[:, None]


QD, KD, VD = normal(4, 8), normal(4, 16, 8), normal(4, 16, 8)


def decode_args(mesh):
    return put(mesh, QD), put(mesh, KD, None, "d"), put(mesh, VD, None, "d")


def decode_reference():
    s = np.einsum("bh,bkh->bk", f64(QD), f64(KD)) / np.sqrt(QD.shape[-1])
    return np.einsum("bk,bkh->bh", softmax(s), f64(VD))


@BOTH
def test_flash_decoding_lse_combine_is_accepted(kind, check_vma):
    accepted(flash_decode, make_mesh(kind), decode_args(make_mesh(kind)), decode_reference(), check_vma=check_vma)


@BOTH
@pytest.mark.parametrize("mistake", [flash_decode_plain_mean, flash_decode_max_weights], ids=lambda f: f.__name__)
def test_flash_decoding_without_the_lse_rescale_is_refused(kind, check_vma, mistake):
    mesh = make_mesh(kind)
    refused(mistake, mesh, decode_args(mesh), decode_reference(), r"JAX's '\w+' adds it up over mesh axis 'd'",
            check_vma=check_vma)


# =============================================================================================
# 2. A cumsum over a sequence split over 'd', the earlier blocks' total carried device to device:
#    each step hands the running total (the offset received plus this block's total) one device
#    on, axis size - 1 times (a sequential prefix, as a pipelined scan does).

def _chain(n, shift):
    return [(j, j + shift) for j in range(n) if 0 <= j + shift < n]


def _ring(n, shift):
    return [(j, (j + shift) % n) for j in range(n)]


def _carried_cumsum(x, *, perm, steps):
    c = jnp.cumsum(x, axis=0)
    total = c[-1]

    def step(offset, _):
        return jax.lax.ppermute(offset + total, "d", perm), None

    offset, _ = jax.lax.scan(step, jnp.zeros_like(total), None, length=steps)
    return c + offset


def cumsum_scan(x: f32[b"seq/d feat"]) -> f32[b"seq/d feat"]:
    n = jax.lax.axis_size("d")
    return _carried_cumsum(x, perm=_chain(n, 1), steps=n - 1)


def cumsum_fori(x: f32[b"seq/d feat"]) -> f32[b"seq/d feat"]:
    n = jax.lax.axis_size("d")
    c = jnp.cumsum(x, axis=0)
    total = c[-1]
    offset = jax.lax.fori_loop(0, n - 1, lambda i, off: jax.lax.ppermute(off + total, "d", _chain(n, 1)),
                               jnp.zeros_like(total))
    return c + offset


def cumsum_backwards(x: f32[b"seq/d feat"]) -> f32[b"seq/d feat"]:
    n = jax.lax.axis_size("d")
    return _carried_cumsum(x, perm=_chain(n, -1), steps=n - 1)  # carries the later blocks' total


def cumsum_one_step_short(x: f32[b"seq/d feat"]) -> f32[b"seq/d feat"]:
    n = jax.lax.axis_size("d")
    return _carried_cumsum(x, perm=_chain(n, 1), steps=n - 2)  # the last block misses the first


def cumsum_round_the_ring(x: f32[b"seq/d feat"]) -> f32[b"seq/d feat"]:
    n = jax.lax.axis_size("d")
    return _carried_cumsum(x, perm=_ring(n, 1), steps=n - 1)  # wraps: every block gets all others


SEQ = normal(16, 3)


@BOTH
@pytest.mark.parametrize("kernel", [cumsum_scan, cumsum_fori], ids=lambda f: f.__name__)
def test_a_cumsum_carried_by_ppermute_is_accepted(kind, check_vma, kernel):
    mesh = make_mesh(kind)
    accepted(kernel, mesh, (put(mesh, SEQ, "d"),), np.cumsum(f64(SEQ), 0), check_vma=check_vma)


@BOTH
@pytest.mark.parametrize("mistake", [cumsum_backwards, cumsum_one_step_short, cumsum_round_the_ring],
                         ids=lambda f: f.__name__)
def test_a_cumsum_carried_wrongly_is_refused(kind, check_vma, mistake):
    mesh = make_mesh(kind)
    refused(mistake, mesh, (put(mesh, SEQ, "d"),), np.cumsum(f64(SEQ), 0), r"prefix over a split dim",
            check_vma=check_vma)


# =============================================================================================
# 3. The Switch Transformer's load-balancing loss per group of tokens (a group: one device's
#    tokens), as MoE codebases write it, with no ops.per_device marks: the fraction of the group's
#    tokens routed to each expert times the group's mean router probability, averaged over groups.

def _router(x, w):
    probs = jax.nn.softmax(x @ w, axis=-1)
    return probs, jax.nn.one_hot(jnp.argmax(probs, -1), probs.shape[-1])


def load_balancing_loss(x: f32[b"tokens/d model"], w: f32[b"model experts"]) -> f32[b""]:
    probs, routed = _router(x, w)
    n_experts, n_tokens = probs.shape[-1], x.shape[0]  # this group's tokens
    fraction = routed.sum(0) / n_tokens
    prob = probs.sum(0) / n_tokens
    return jax.lax.pmean(n_experts * jnp.sum(fraction * prob), "d")


def load_balancing_loss_means(x: f32[b"tokens/d model"], w: f32[b"model experts"]) -> f32[b""]:
    probs, routed = _router(x, w)
    return jax.lax.pmean(probs.shape[-1] * jnp.sum(routed.mean(0) * probs.mean(0)), "d")


def load_balancing_loss_no_pmean(x: f32[b"tokens/d model"], w: f32[b"model experts"]) -> f32[b""]:
    probs, routed = _router(x, w)
    n_experts, n_tokens = probs.shape[-1], x.shape[0]
    return n_experts * jnp.sum(routed.sum(0) / n_tokens * (probs.sum(0) / n_tokens))  # device 0's group


def load_balancing_loss_global_count(x: f32[b"tokens/d model"], w: f32[b"model experts"]) -> f32[b""]:
    probs, routed = _router(x, w)
    n_experts, n_tokens = probs.shape[-1], x.shape[0] * jax.lax.axis_size("d")  # all tokens, local sums
    return jax.lax.pmean(n_experts * jnp.sum(routed.sum(0) / n_tokens * (probs.sum(0) / n_tokens)), "d")


MOE_X, MOE_W = normal(16, 4), 2 * normal(4, 4)


def per_group_reference(groups=4):
    def loss(x):
        probs = softmax(f64(x) @ f64(MOE_W))
        routed = np.eye(probs.shape[-1])[probs.argmax(-1)]
        return probs.shape[-1] * np.sum(routed.mean(0) * probs.mean(0))
    return np.mean([loss(x) for x in np.split(MOE_X, groups)])


@BOTH
@pytest.mark.parametrize("kernel", [load_balancing_loss, load_balancing_loss_means], ids=lambda f: f.__name__)
def test_per_group_statistics_without_marks_are_accepted(kind, check_vma, kernel):
    mesh = make_mesh(kind)
    accepted(kernel, mesh, (put(mesh, MOE_X, "d"), put(mesh, MOE_W)), per_group_reference(), check_vma=check_vma)


@BOTH
@pytest.mark.parametrize("mistake, message", [
    (load_balancing_loss_no_pmean, r"varies over mesh axis 'd'"),
    (load_balancing_loss_global_count, r"multiplies two partial sums"),
], ids=["no_pmean", "global_count"])
def test_per_group_statistics_mistakes_are_refused(kind, check_vma, mistake, message):
    mesh = make_mesh(kind)
    refused(mistake, mesh, (put(mesh, MOE_X, "d"), put(mesh, MOE_W)), per_group_reference(), message,
            check_vma=check_vma)


# =============================================================================================
# 4. Nested kernels: data parallelism over 'd' outside (axis_names={'d'}), a Megatron MLP over 't'
#    inside, as a typed kernel or a hand-written jax.shard_map. Inside a kernel annotations say
#    the whole layout (the outer kernel's 'd' too); the arguments arrive laid out as annotated
#    (on Explicit axes a typed kernel's argument must be, as at the top level).

def tp_mlp(x: f32[b"batch/d embed"], w1: f32[b"embed hidden/t"], w2: f32[b"hidden/t embed"]) -> f32[b"batch/d embed"]:
    return jax.lax.psum(jnp.tanh(x @ w1) @ w2, "t")


def tp_mlp_no_psum(x: f32[b"batch/d embed"], w1: f32[b"embed hidden/t"], w2: f32[b"hidden/t embed"]) -> f32[b"batch/d embed"]:
    return jnp.tanh(x @ w1) @ w2


def dp_loss_typed(x: f32[b"batch/d embed"], w1: f32[b"embed hidden/t"], w2: f32[b"hidden/t embed"]) -> f32[b""]:
    y = typed_shard_map(tp_mlp, axis_names={"t"})(x, w1, w2)
    return jax.lax.pmean(jnp.mean(y ** 2), "d")


def dp_loss_plain(x: f32[b"batch/d embed"], w1: f32[b"embed hidden/t"], w2: f32[b"hidden/t embed"]) -> f32[b""]:
    mlp = lambda x, w1, w2: jax.lax.psum(jnp.tanh(x @ w1) @ w2, "t")  # noqa: E731
    y = jax.shard_map(mlp, in_specs=(P(), P(None, "t"), P("t")), out_specs=P(), axis_names={"t"})(x, w1, w2)
    return jax.lax.pmean(jnp.mean(y ** 2), "d")


def dp_loss_inner_no_psum(x: f32[b"batch/d embed"], w1: f32[b"embed hidden/t"],
                          w2: f32[b"hidden/t embed"]) -> f32[b""]:
    y = typed_shard_map(tp_mlp_no_psum, axis_names={"t"}, check_vma=False)(x, w1, w2)
    return jax.lax.pmean(jnp.mean(y ** 2), "d")


def dp_loss_no_pmean(x: f32[b"batch/d embed"], w1: f32[b"embed hidden/t"], w2: f32[b"hidden/t embed"]) -> f32[b""]:
    return jnp.mean(typed_shard_map(tp_mlp, axis_names={"t"})(x, w1, w2) ** 2)  # this device's batch only


NX, NW1, NW2 = normal(8, 4), normal(4, 6), normal(6, 4)


def nested_args(mesh):
    return put(mesh, NX, "d"), put(mesh, NW1, None, "t"), put(mesh, NW2, "t")


def nested_reference():
    return np.mean((np.tanh(f64(NX) @ f64(NW1)) @ f64(NW2)) ** 2)


@BOTH
@pytest.mark.parametrize("kernel", [dp_loss_typed, dp_loss_plain], ids=lambda f: f.__name__)
def test_a_kernel_nested_in_a_kernel_is_accepted(kind, check_vma, kernel):
    mesh = make_mesh(kind)
    accepted(kernel, mesh, nested_args(mesh), nested_reference(), check_vma=check_vma, axis_names={"d"})


@BOTH
@pytest.mark.parametrize("mistake, message", [
    (dp_loss_inner_no_psum, r"kernel tp_mlp_no_psum\(\).*partial sum still owing a sum over mesh axis 't'"),
    (dp_loss_no_pmean, r"partial sum still owing a sum over mesh axis 'd'|varies over mesh axis 'd'"),
], ids=["inner_no_psum", "outer_no_pmean"])
def test_a_mistake_in_nested_kernels_is_refused(kind, check_vma, mistake, message):
    mesh = make_mesh(kind)
    refused(mistake, mesh, nested_args(mesh), nested_reference(), message, check_vma=check_vma, axis_names={"d"})


# =============================================================================================
# 5. A constant the kernel closes over (a numpy table, a jnp one made at import), returned, or
#    something computed from it, whole on every device (annotated replicated).

NP_SCALE = (np.arange(4, dtype=np.float32) + 1) / 4
JNP_TABLE = jnp.linspace(0.0, 1.0, 4, dtype=jnp.float32)


def returns_numpy_constant(x: f32[b"batch/d feat"]) -> f32[b"feat"]:
    return NP_SCALE


def returns_jnp_constant(x: f32[b"batch/d feat"]) -> f32[b"feat"]:
    return JNP_TABLE


def returns_computed_constant(x: f32[b"batch/d feat"]) -> tuple[f32[b"batch/d feat"], f32[b"feat"]]:
    return x * JNP_TABLE, jnp.cos(JNP_TABLE) * NP_SCALE


def returns_constant_as_split(x: f32[b"batch/d feat"]) -> f32[b"feat/t"]:
    return JNP_TABLE  # the whole table on each device: out_specs put the t-devices' copies side by side


def returns_computed_as_split(x: f32[b"batch/d feat"]) -> f32[b"feat/t"]:
    return jnp.cos(JNP_TABLE)


AS_SPLIT = {"constant": (returns_constant_as_split, lambda: f64(JNP_TABLE)),
            "computed": (returns_computed_as_split, lambda: np.cos(f64(JNP_TABLE)))}


CX = normal(8, 4)
CONSTANTS = {
    "numpy": (returns_numpy_constant, lambda: f64(NP_SCALE)),
    "jnp": (returns_jnp_constant, lambda: f64(JNP_TABLE)),
    "computed": (returns_computed_constant,
                 lambda: (f64(CX) * f64(JNP_TABLE), np.cos(f64(JNP_TABLE)) * f64(NP_SCALE))),
}


@BOTH
@pytest.mark.parametrize("jitted", [True, False], ids=["jit", "eager"])
@pytest.mark.parametrize("name", sorted(CONSTANTS))
def test_a_closed_over_constant_returned_whole_is_accepted(kind, check_vma, jitted, name):
    kernel, reference = CONSTANTS[name]
    mesh = make_mesh(kind)
    accepted(kernel, mesh, (put(mesh, CX, "d"),), reference(), check_vma=check_vma, jitted=jitted)


@KIND
@pytest.mark.parametrize("name", sorted(AS_SPLIT))
def test_a_closed_over_constant_returned_as_split_is_refused(kind, name):
    mistake, reference = AS_SPLIT[name]
    mesh = make_mesh(kind)
    refused(mistake, mesh, (put(mesh, CX, "d"),), reference(),
            r"shards it as P\('t'\)|dimension 'feat' is 8 here|split over mesh axis 't'")


# =============================================================================================
# 6. A partial-manual kernel (axis_names={'d'}) under jax.jit on Auto axes: 't' is left to XLA,
#    and the return value's layout over it is checked at compile time, as an argument's is.

def scaled(x: f32[b"batch/d embed/t"]) -> f32[b"batch/d embed/t"]:
    return x * 2  # XLA keeps embed split over 't'


def zero_cache(x: f32[b"batch/d embed/t"]) -> f32[b"batch/d embed/t"]:
    return jnp.zeros(x.shape, x.dtype) + 1.0  # a constant: XLA keeps it replicated over 't'


def pinned_replicated(x: f32[b"batch/d embed/t"]) -> f32[b"batch/d embed/t"]:
    return jax.lax.with_sharding_constraint(x * 2, P(None, None))  # gathered over 't'


PX = normal(8, 4)


def partial_manual(f, checks=True):
    mesh = make_mesh("auto")
    return call(f, mesh, (put(mesh, PX, "d", "t"),), checks=checks, axis_names={"d"}, raw=True)


def test_a_partial_manual_return_laid_out_as_annotated_passes_the_compile_time_check():
    out = partial_manual(scaled)
    assert out.sharding.spec == P("d", "t")
    np.testing.assert_allclose(np.asarray(out), 2 * PX, **TOL)


@pytest.mark.parametrize("mistake", [zero_cache, pinned_replicated], ids=lambda f: f.__name__)
def test_a_partial_manual_return_laid_out_otherwise_fails_the_compile_time_check(mistake):
    assert partial_manual(mistake, checks=False).sharding.spec != P("d", "t")  # as XLA chose, unchecked
    with pytest.raises(TypeCheckError,
                       match=r"(?s)compile-time check.*the return value.*but the annotation says P\('d', 't'\)"):
        partial_manual(mistake)


# =============================================================================================
# 7. MoE's grouped matmul, jax.lax.ragged_dot, tensor parallel: the tokens (sorted by expert,
#    group sizes per device) split over 'd', the model dim over 't' in the tokens and in every
#    expert's weight. The matmul contracts model, so each t-device holds a partial sum that the
#    reduce-scatter over 't' pays (as for a dot_general).

def _grouped(x, w, sizes):
    return jax.lax.ragged_dot(x, w, sizes[0])


def moe_tp_scatter(x: f32[b"tokens/d model/t"], w: f32[b"experts model/t out"],
                   sizes: i32[b"block/d experts"]) -> f32[b"tokens/d out/t"]:
    return jax.lax.psum_scatter(_grouped(x, w, sizes), "t", scatter_dimension=1, tiled=True)


def moe_tp_psum(x: f32[b"tokens/d model/t"], w: f32[b"experts model/t out"],
                sizes: i32[b"block/d experts"]) -> f32[b"tokens/d out"]:
    dims = jax.lax.RaggedDotDimensionNumbers(dot_dimension_numbers=(((1,), (1,)), ((), ())),
                                             lhs_ragged_dimensions=[0], rhs_group_dimensions=[0])
    return jax.lax.psum(jax.lax.ragged_dot_general(x, w, sizes[0], dims), "t")


def moe_tp_scatter_wrong_axis(x: f32[b"tokens/d model/t"], w: f32[b"experts model/t out"],
                              sizes: i32[b"block/d experts"]) -> f32[b"tokens/d out/t"]:
    # over 'd' (the same size here), not over 't' the contraction is split over
    return jax.lax.psum_scatter(_grouped(x, w, sizes), "d", scatter_dimension=1, tiled=True)


def moe_tp_no_psum(x: f32[b"tokens/d model/t"], w: f32[b"experts model/t out"],
                   sizes: i32[b"block/d experts"]) -> f32[b"tokens/d out"]:
    return _grouped(x, w, sizes)


GX, GW = normal(8, 8), normal(3, 8, 4)
GROUPS = np.array([[2, 0, 2], [1, 3, 0]], np.int32)  # per block of 4 tokens (one per d-device)


def grouped_args(mesh):
    return put(mesh, GX, "d", "t"), put(mesh, GW, None, "t"), put(mesh, GROUPS, "d")


def grouped_reference():
    out = np.zeros((8, 4))
    for block, sizes in enumerate(GROUPS):
        start = 4 * block
        for g, n in enumerate(sizes):
            out[start:start + n] = f64(GX[start:start + n]) @ f64(GW[g])
            start += n
    return out


def square(kind):
    return make_mesh(kind, (2, 2), ("d", "t"))


@BOTH
@pytest.mark.parametrize("kernel", [moe_tp_scatter, moe_tp_psum], ids=lambda f: f.__name__)
def test_a_grouped_matmul_reduced_over_its_split_contraction_is_accepted(kind, check_vma, kernel):
    accepted(kernel, square(kind), grouped_args(square(kind)), grouped_reference(), check_vma=check_vma)


@BOTH
@pytest.mark.parametrize("mistake, message", [
    (moe_tp_scatter_wrong_axis, r"partial sum still owing a sum over mesh axis 't'"),
    # (refused today through the varying axes alone: the result varies over 't')
    (moe_tp_no_psum, r"partial sum still owing a sum over mesh axis 't'|varies over mesh axis 't'"),
], ids=["scatter_over_d", "no_psum"])
def test_a_grouped_matmul_not_reduced_over_its_split_contraction_is_refused(kind, check_vma, mistake, message):
    mesh = square(kind)
    refused(mistake, mesh, grouped_args(mesh), grouped_reference(), message, check_vma=check_vma)
