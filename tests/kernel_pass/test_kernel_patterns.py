"""What the kernel pass must do with kernels written the way real codebases write them.

Each kernel below is a ``typed_shard_map`` body in plain ``jax.lax`` collectives and ``jnp``
(seqax's FSDP x TP step, ring attention, flash-decoding's log-sum-exp combine, a blocked
cumsum, vocab-parallel cross entropy and embedding, a GPipe stage broadcast, an MoE auxiliary
loss), run on real arrays over the 8 simulated CPU devices, on Explicit and Auto mesh axes.

For every kernel:

1. With shardtypes' checks off, its numbers are compared with the same computation on the
   global arrays (numpy): a *correct* kernel matches, a *mistake* does not. This proves each
   kernel is what the test says it is, independently of the pass. (With ``check_vma`` on,
   JAX's own ``out_specs`` check refuses the mistakes that return a varying value replicated,
   before they give any numbers; those give their numbers with ``check_vma`` off.)
2. With checks on, jitted, with ``check_vma`` on and off: a correct kernel runs and gives the
   same numbers; a mistake raises ``TypeCheckError`` whose message names what is wrong.

A few kernels also run eagerly. ``shardtypes.ops.per_device(value, axes)`` (item j, k) is the
mark that says a value is per-device over mesh axes by intent; it returns the value unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import AxisType
from typeguard import TypeCheckError

import shardtypes
from shardtypes import f32, i32, ops, typed_shard_map

from conftest import make_mesh, put

VMA = [True, False]
VMA_IDS = ["vma", "novma"]
TOL = dict(rtol=2e-4, atol=2e-4)
RNG = np.random.default_rng(2024)


def normal(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def kind_of(mesh):
    return "explicit" if mesh.axis_types[0] == AxisType.Explicit else "auto"


def per_device(x, axes):
    """``shardtypes.ops.per_device(x, axes)``: the value, unchanged, marked per-device over
    ``axes`` by intent. Until the API exists, the kernels' numbers are still checked (checks off:
    the value unchanged); with checks on its absence fails the test plainly."""
    mark = getattr(ops, "per_device", None)
    if mark is not None:
        return mark(x, axes)
    if shardtypes.config.checks:
        raise AttributeError("shardtypes.ops.per_device does not exist yet")
    return x


def run(f, mesh, args, *, check_vma, jitted=True, checks=True):
    """``f`` as a ``typed_shard_map`` kernel on ``mesh``, with shardtypes' checks on or off; the
    result as numpy. The setting is restored afterwards, whatever happens."""
    before = shardtypes.config.checks
    shardtypes.config.checks = checks
    try:
        with jax.set_mesh(mesh):
            kernel = typed_shard_map(f, check_vma=check_vma)
            out = (jax.jit(kernel) if jitted else kernel)(*args)
            return np.asarray(out)
    finally:
        shardtypes.config.checks = before


def assert_wrong(out, reference):
    out, reference = np.asarray(out), np.asarray(reference)
    assert out.shape == reference.shape
    assert not np.allclose(out, reference, rtol=1e-3, atol=1e-3), "the mistake computes the right numbers"


# =============================================================================================
# Correct kernels.

# 1. seqax's FSDP x TP step: one weight dim split over two mesh axes, gathered over both ...
def fsdp_gather_both(x: f32[b"batch/d/t embed"], w: f32[b"embed/d/t hidden"]) -> f32[b"batch/d/t hidden"]:
    w = jax.lax.all_gather(w, ("d", "t"), axis=0, tiled=True)
    return x @ w


# ... or over its last axis only ('t'), leaving embed split over 'd': the matmul then contracts
# a dim split over 'd' on both sides, and its partial sum is paid by the psum.
def fsdp_gather_suffix(x: f32[b"batch/t embed/d"], w: f32[b"embed/d/t hidden"]) -> f32[b"batch/t hidden"]:
    w = jax.lax.all_gather(w, "t", axis=0, tiled=True)
    return jax.lax.psum(x @ w, "d")


# 2. Ring attention (non-causal): k and v go round the ring over 'd'; online softmax.
def ring_attention(q: f32[b"seq/d head"], k: f32[b"seq/d head"], v: f32[b"seq/d head"]) -> f32[b"seq/d head"]:
    n = jax.lax.axis_size("d")
    perm = [(i, (i + 1) % n) for i in range(n)]
    scale = 1.0 / np.sqrt(q.shape[-1])

    def step(_, carry):
        o, m, l, k, v = carry
        s = (q @ k.T) * scale
        m_new = jnp.maximum(m, s.max(-1))
        p = jnp.exp(s - m_new[:, None])
        correction = jnp.exp(m - m_new)
        l = l * correction + p.sum(-1)
        o = o * correction[:, None] + p @ v
        k = jax.lax.ppermute(k, "d", perm)
        v = jax.lax.ppermute(v, "d", perm)
        return o, m_new, l, k, v

    init = (jnp.zeros_like(q), jnp.full_like(q[:, 0], -jnp.inf), jnp.zeros_like(q[:, 0]), k, v)
    o, _, l, _, _ = jax.lax.fori_loop(0, n, step, init)
    return o / l[:, None]


# 3. Flash-decoding: each device attends to its block of the KV cache; the blocks' results are
# combined with their log-sum-exp (local max rescaled to the global one before the sums).
def flash_decoding(q: f32[b"batch head"], k: f32[b"batch kv/d head"], v: f32[b"batch kv/d head"]) -> f32[b"batch head"]:
    s = jnp.einsum("bh,bkh->bk", q, k) / np.sqrt(q.shape[-1])
    m = s.max(-1)
    p = jnp.exp(s - m[:, None])
    l = p.sum(-1)
    o = jnp.einsum("bk,bkh->bh", p, v)
    big_m = jax.lax.pmax(m, "d")
    c = jnp.exp(m - big_m)
    l = jax.lax.psum(l * c, "d")
    o = jax.lax.psum(o * c[:, None], "d")
    return o / l[:, None]


# 4. A cumsum over a sequence split over 'd': local cumsum plus the totals of the earlier blocks.
def cumsum_inclusive(x: f32[b"seq/d feat"]) -> f32[b"seq/d feat"]:
    c = jnp.cumsum(x, axis=0)
    totals = jax.lax.all_gather(x.sum(0), "d")  # [blocks, feat], untiled
    earlier = jnp.arange(totals.shape[0]) < jax.lax.axis_index("d")
    return c + jnp.sum(jnp.where(earlier[:, None], totals, 0.0), axis=0)


def cumsum_exclusive(x: f32[b"seq/d feat"]) -> f32[b"seq/d feat"]:
    c = jnp.cumsum(x, axis=0)
    totals = jax.lax.all_gather(c[-1], "d")
    earlier = jnp.arange(totals.shape[0]) < jax.lax.axis_index("d")
    return c - x + jnp.sum(jnp.where(earlier[:, None], totals, 0.0), axis=0)


# 5. A data-parallel loss: the mean of the per-device means, with the typed or the plain pmean.
def dp_loss_ops(x: f32[b"batch/d feat"], w: f32[b"feat"], y: f32[b"batch/d"]) -> f32[b""]:
    local_loss = (x @ w - y) ** 2
    return ops.pmean("", jnp.mean(local_loss), "d")


def dp_loss_lax(x: f32[b"batch/d feat"], w: f32[b"feat"], y: f32[b"batch/d"]) -> f32[b""]:
    local_loss = (x @ w - y) ** 2
    return jax.lax.pmean(jnp.mean(local_loss), "d")


# 6. Vocab-parallel cross entropy (Megatron's), per example.
def vocab_xent(logits: f32[b"batch vocab/t"], labels: i32[b"batch"]) -> f32[b"batch"]:
    return _xent_rows(logits, labels)  # (defined with the mistakes below, which reuse it)


# The right versions of some of the mistakes below.
def fp8_scale_right(x: f32[b"batch feat/d"]) -> f32[b"batch feat/d"]:
    amax = jax.lax.pmax(jnp.abs(x).max(-1, keepdims=True), "d")
    return x / amax


def vocab_embed(table: f32[b"vocab/t embed"], ids: i32[b"batch/d"]) -> f32[b"batch/d embed"]:
    v_local = table.shape[0]
    local = ids - jax.lax.axis_index("t") * v_local
    mine = (local >= 0) & (local < v_local)
    rows = jnp.take(table, jnp.clip(local, 0, v_local - 1), axis=0) * mine[:, None]
    return jax.lax.psum(rows, "t")


def _pipeline_last_stage(x, w):
    """GPipe without microbatches: the batch enters at stage 0, each stage applies its layer
    and passes the activations on; the output is on the last stage only."""
    n = jax.lax.axis_size("p")
    stage = jax.lax.axis_index("p")
    h = jnp.where(stage == 0, x, 0.0)
    for i in range(n):
        h = jnp.tanh(h @ w[0])
        if i < n - 1:
            h = jax.lax.ppermute(h, "p", [(j, j + 1) for j in range(n - 1)])
    return jnp.where(stage == n - 1, h, 0.0)


def pipeline(x: f32[b"batch/d feat"], w: f32[b"stage/p feat feat2"]) -> f32[b"batch/d feat2"]:
    return jax.lax.psum(_pipeline_last_stage(x, w), "p")  # broadcast from the last stage


def bias_after_psum(x: f32[b"batch/d feat"], bias: f32[b""]) -> f32[b""]:
    return jax.lax.psum(x.sum(), "d") + bias


def block_by_axis_index(table: f32[b"n feat"]) -> f32[b"n/d feat"]:
    k = table.shape[0] // jax.lax.axis_size("d")
    return jax.lax.dynamic_slice_in_dim(table, jax.lax.axis_index("d") * k, k)


# =============================================================================================
# Mistakes.

# a. amax scaling with a local max over a split dim, gathered and returned replicated over 'd'.
def fp8_scale_local_amax(x: f32[b"batch feat/d"]) -> f32[b"batch feat"]:
    amax = jnp.abs(x).max(-1, keepdims=True)  # only this device's columns
    return jax.lax.all_gather(x, "d", axis=1, tiled=True) / amax


# b. log-sum-exp with each device's own max and no rescale.
def lse_local_max(s: f32[b"batch vocab/d"]) -> f32[b"batch"]:
    m = s.max(-1)
    l = jax.lax.psum(jnp.exp(s - m[:, None]).sum(-1), "d")
    return jnp.log(l) + m


# c. vocab-parallel cross entropy without the psum of the exp sum.
def vocab_xent_no_psum(logits: f32[b"batch vocab/t"], labels: i32[b"batch"]) -> f32[b"batch"]:
    m = jax.lax.pmax(logits.max(-1), "t")
    z = logits - m[:, None]
    sum_exp = jnp.exp(z).sum(-1)  # forgot: jax.lax.psum(..., 't')
    v_local = logits.shape[-1]
    local = labels - jax.lax.axis_index("t") * v_local
    mine = (local >= 0) & (local < v_local)
    picked = jnp.take_along_axis(z, jnp.clip(local, 0, v_local - 1)[:, None], axis=-1)[:, 0]
    picked = jax.lax.psum(jnp.where(mine, picked, 0.0), "t")
    return jnp.log(sum_exp) - picked


# d. vocab-parallel embedding without the psum.
def vocab_embed_no_psum(table: f32[b"vocab/t embed"], ids: i32[b"batch/d"]) -> f32[b"batch/d embed"]:
    v_local = table.shape[0]
    local = ids - jax.lax.axis_index("t") * v_local
    mine = (local >= 0) & (local < v_local)
    return jnp.take(table, jnp.clip(local, 0, v_local - 1), axis=0) * mine[:, None]


# e. the pipeline's output returned replicated over 'p' without the broadcast.
def pipeline_no_broadcast(x: f32[b"batch/d feat"], w: f32[b"stage/p feat feat2"]) -> f32[b"batch/d feat2"]:
    return _pipeline_last_stage(x, w)


# f. a replicated bias added inside the psum: counted once per device.
def bias_inside_psum(x: f32[b"batch/d feat"], bias: f32[b""]) -> f32[b""]:
    return jax.lax.psum(x.sum() + bias, "d")


# g. a psum of a value already summed: the same on every device, so summed 4 times over.
def psum_twice(x: f32[b"batch/d feat"]) -> f32[b"feat"]:
    return jax.lax.psum(jax.lax.psum(x.sum(0), "d"), "d")


# h. a cumsum over a split dim with no carry from the earlier blocks.
def cumsum_no_carry(x: f32[b"seq/d feat"]) -> f32[b"seq/d feat"]:
    return jnp.cumsum(x, axis=0)


# i. a block picked with the index of the wrong (same-size) mesh axis.
def block_by_wrong_axis_index(table: f32[b"n feat"]) -> f32[b"n/d feat"]:
    k = table.shape[0] // jax.lax.axis_size("d")
    return jax.lax.dynamic_slice_in_dim(table, jax.lax.axis_index("t") * k, k)


# k. a per-device value returned replicated without any collective.
def per_device_returned_replicated(x: f32[b"batch/d feat"]) -> f32[b"feat"]:
    return per_device(x.sum(0), "d")


# l. vocab-parallel cross entropy, batch split too, averaged over this device's batch only.
def vocab_xent_local_batch_mean(logits: f32[b"batch/d vocab/t"], labels: i32[b"batch/d"]) -> f32[b""]:
    return jnp.mean(_xent_rows(logits, labels))  # forgot: jax.lax.pmean(..., 'd')


def _xent_rows(logits, labels):
    m = jax.lax.pmax(logits.max(-1), "t")
    z = logits - m[:, None]
    sum_exp = jax.lax.psum(jnp.exp(z).sum(-1), "t")
    v_local = logits.shape[-1]
    local = labels - jax.lax.axis_index("t") * v_local
    mine = (local >= 0) & (local < v_local)
    picked = jnp.take_along_axis(z, jnp.clip(local, 0, v_local - 1)[:, None], axis=-1)[:, 0]
    return jnp.log(sum_exp) - jax.lax.psum(jnp.where(mine, picked, 0.0), "t")


# m. a block picked with the index of the wrong mesh axis, on a 2x2x2 mesh (all the same size).
def block_by_wrong_axis_index_cube(table: f32[b"n feat"]) -> f32[b"n/d feat"]:
    k = table.shape[0] // jax.lax.axis_size("d")
    return jax.lax.dynamic_slice_in_dim(table, jax.lax.axis_index("p") * k, k)


# j. the Switch Transformer's load-balancing loss, per group of tokens (a group is one device's
# tokens): the mean router probability times the fraction of tokens routed, per expert.
def _moe_statistics(x, w):
    probs = jax.nn.softmax(x @ w, axis=-1)
    routed = jax.nn.one_hot(jnp.argmax(probs, -1), probs.shape[-1])
    return routed.mean(0), probs.mean(0)


def moe_aux_unmarked(x: f32[b"tokens/d model"], w: f32[b"model experts"]) -> f32[b""]:
    fraction, prob = _moe_statistics(x, w)
    aux = fraction.shape[0] * jnp.sum(fraction * prob)
    return jax.lax.pmean(aux, "d")


def moe_aux_marked(x: f32[b"tokens/d model"], w: f32[b"model experts"]) -> f32[b""]:
    fraction, prob = _moe_statistics(x, w)
    fraction, prob = per_device(fraction, "d"), per_device(prob, "d")
    aux = fraction.shape[0] * jnp.sum(fraction * prob)
    return jax.lax.pmean(aux, "d")


# =============================================================================================
# Data and references (float64 numpy on the global arrays).

X16, W16 = normal(16, 16), normal(16, 6)
X8_16 = normal(8, 16)
Q, K, V = normal(16, 8), normal(16, 8), normal(16, 8)
QD, KD, VD = normal(4, 8), normal(4, 16, 8), normal(4, 16, 8)
SEQ = normal(16, 3)
XB, WB, YB = normal(8, 4), normal(4), normal(8)
LOGITS, LABELS = 3 * normal(4, 16), np.array([0, 7, 8, 15], np.int32)
AMAX_X = normal(4, 16)
TABLE, IDS = normal(16, 4), np.array([0, 3, 8, 15, 9, 4, 12, 1], np.int32)
PX, PW = normal(4, 4), normal(4, 4, 4)
BX, BIAS = normal(8, 4), np.float32(1.5)
SMALL_TABLE = normal(8, 3)
MOE_X, MOE_W = normal(16, 4), 2 * normal(4, 4)


def f64(a):
    return np.asarray(a, np.float64)


def softmax(s):
    e = np.exp(s - s.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def ring_reference():
    q, k, v = f64(Q), f64(K), f64(V)
    return softmax(q @ k.T / np.sqrt(q.shape[-1])) @ v


def decode_reference():
    s = np.einsum("bh,bkh->bk", f64(QD), f64(KD)) / np.sqrt(QD.shape[-1])
    return np.einsum("bk,bkh->bh", softmax(s), f64(VD))


def xent_reference():
    z = f64(LOGITS) - f64(LOGITS).max(-1, keepdims=True)
    return np.log(np.exp(z).sum(-1)) - z[np.arange(len(LABELS)), LABELS]


def pipeline_reference():
    h = f64(PX)
    for w in PW:
        h = np.tanh(h @ w)
    return h


def moe_aux(x, w):
    probs = softmax(f64(x) @ f64(w))
    routed = np.eye(probs.shape[-1])[probs.argmax(-1)]
    return probs.shape[-1] * np.sum(routed.mean(0) * probs.mean(0))


def moe_per_group_reference(groups=4):
    return np.mean([moe_aux(x, MOE_W) for x in np.split(MOE_X, groups)])


def default_mesh(kind):
    return make_mesh(kind)


def pipeline_mesh(kind):
    return make_mesh(kind, (4, 2), ("p", "d"))


def square_mesh(kind):
    return make_mesh(kind, (2, 2), ("d", "t"))


def cube_mesh(kind):
    return make_mesh(kind, (2, 2, 2), ("d", "t", "p"))


@dataclass(frozen=True)
class Case:
    f: Callable
    args: Callable  # mesh -> the global arguments, laid out
    reference: Callable  # () -> the global result
    mesh: Callable = default_mesh  # kind -> mesh


CORRECT = {
    "fsdp_gather_both": Case(fsdp_gather_both, lambda m: (put(m, X16, ("d", "t")), put(m, W16, ("d", "t"))),
                             lambda: f64(X16) @ f64(W16)),
    "fsdp_gather_suffix": Case(fsdp_gather_suffix, lambda m: (put(m, X8_16, "t", "d"), put(m, W16, ("d", "t"))),
                               lambda: f64(X8_16) @ f64(W16)),
    "ring_attention": Case(ring_attention, lambda m: (put(m, Q, "d"), put(m, K, "d"), put(m, V, "d")),
                           ring_reference),
    "flash_decoding": Case(flash_decoding, lambda m: (put(m, QD), put(m, KD, None, "d"), put(m, VD, None, "d")),
                           decode_reference),
    "cumsum_inclusive": Case(cumsum_inclusive, lambda m: (put(m, SEQ, "d"),), lambda: np.cumsum(f64(SEQ), 0)),
    "cumsum_exclusive": Case(cumsum_exclusive, lambda m: (put(m, SEQ, "d"),),
                             lambda: np.cumsum(f64(SEQ), 0) - f64(SEQ)),
    "vocab_xent": Case(vocab_xent, lambda m: (put(m, LOGITS, None, "t"), put(m, LABELS)), xent_reference),
    "fp8_scale_right": Case(fp8_scale_right, lambda m: (put(m, AMAX_X, None, "d"),),
                            lambda: f64(AMAX_X) / np.abs(f64(AMAX_X)).max(-1, keepdims=True)),
    "vocab_embed": Case(vocab_embed, lambda m: (put(m, TABLE, "t"), put(m, IDS, "d")), lambda: f64(TABLE)[IDS]),
    "pipeline": Case(pipeline, lambda m: (put(m, PX, "d"), put(m, PW, "p")), pipeline_reference, pipeline_mesh),
    "bias_after_psum": Case(bias_after_psum, lambda m: (put(m, BX, "d"), put(m, BIAS)),
                            lambda: f64(BX).sum() + BIAS),
    "block_by_axis_index": Case(block_by_axis_index, lambda m: (put(m, SMALL_TABLE),), lambda: f64(SMALL_TABLE),
                                square_mesh),
}

NO_T = "varies over (manual )?mesh axis 't'|partial sum"
MISTAKES = {
    "a_fp8_scale_local_amax": (
        Case(fp8_scale_local_amax, lambda m: (put(m, AMAX_X, None, "d"),),
             lambda: f64(AMAX_X) / np.abs(f64(AMAX_X)).max(-1, keepdims=True)),
        "(?i)partial maximum"),
    "b_lse_local_max": (
        Case(lse_local_max, lambda m: (put(m, LOGITS, None, "d"),),
             lambda: np.log(np.exp(f64(LOGITS)).sum(-1))),
        "(?i)(partial )?maximum"),
    "c_vocab_xent_no_psum": (
        Case(vocab_xent_no_psum, lambda m: (put(m, LOGITS, None, "t"), put(m, LABELS)), xent_reference),
        NO_T),
    "d_vocab_embed_no_psum": (
        Case(vocab_embed_no_psum, lambda m: (put(m, TABLE, "t"), put(m, IDS, "d")), lambda: f64(TABLE)[IDS]),
        NO_T),
    "e_pipeline_no_broadcast": (
        Case(pipeline_no_broadcast, lambda m: (put(m, PX, "d"), put(m, PW, "p")), pipeline_reference,
             pipeline_mesh),
        "varies over (manual )?mesh axis 'p'"),
    "f_bias_inside_psum": (
        Case(bias_inside_psum, lambda m: (put(m, BX, "d"), put(m, BIAS)), lambda: f64(BX).sum() + BIAS),
        "(?i)owes none|counted once per device"),
    "g_psum_twice": (
        Case(psum_twice, lambda m: (put(m, BX, "d"),), lambda: f64(BX).sum(0)),
        "(?i)same on every device|invariant"),
    "h_cumsum_no_carry": (
        Case(cumsum_no_carry, lambda m: (put(m, SEQ, "d"),), lambda: np.cumsum(f64(SEQ), 0)),
        "(?i)cumsum"),
    "i_block_by_wrong_axis_index": (
        Case(block_by_wrong_axis_index, lambda m: (put(m, SMALL_TABLE),), lambda: f64(SMALL_TABLE), square_mesh),
        "(?i)axis_index|varies over (manual )?mesh axis"),
    "l_vocab_xent_local_batch_mean": (
        Case(vocab_xent_local_batch_mean, lambda m: (put(m, LOGITS, "d", "t"), put(m, LABELS, "d")),
             lambda: xent_reference().mean()),
        "varies over (manual )?mesh axis 'd'|partial sum still owing a sum over mesh axis 'd'"),
    "m_block_by_wrong_axis_index_cube": (
        Case(block_by_wrong_axis_index_cube, lambda m: (put(m, SMALL_TABLE),), lambda: f64(SMALL_TABLE), cube_mesh),
        "varies over (manual )?mesh axis 'p'"),
    "k_per_device_returned_replicated": (
        Case(per_device_returned_replicated, lambda m: (put(m, BX, "d"),), lambda: f64(BX).sum(0)),
        "per_device"),
}

EAGER_CORRECT = ["ring_attention", "flash_decoding", "cumsum_exclusive"]
EAGER_MISTAKES = ["f_bias_inside_psum", "h_cumsum_no_carry"]


# =============================================================================================
# Tests.


def check_correct(case, kind, check_vma, jitted):
    mesh = case.mesh(kind)
    reference = case.reference()
    unchecked = run(case.f, mesh, case.args(mesh), check_vma=check_vma, jitted=jitted, checks=False)
    np.testing.assert_allclose(unchecked, reference, **TOL)
    checked = run(case.f, mesh, case.args(mesh), check_vma=check_vma, jitted=jitted)
    np.testing.assert_allclose(checked, reference, **TOL)


def unchecked_mistake(case, mesh, check_vma, jitted):
    """The mistake's numbers with shardtypes' checks off. With check_vma on, JAX's own out_specs
    check refuses the mistakes that return a varying value replicated (a ValueError, before any
    numbers); those give their numbers with check_vma off."""
    if check_vma:
        try:
            return run(case.f, mesh, case.args(mesh), check_vma=True, jitted=jitted, checks=False)
        except ValueError as e:
            if "out_specs" not in str(e):
                raise
    return run(case.f, mesh, case.args(mesh), check_vma=False, jitted=jitted, checks=False)


def check_mistake(case, message, kind, check_vma, jitted):
    mesh = case.mesh(kind)
    assert_wrong(unchecked_mistake(case, mesh, check_vma, jitted), case.reference())
    with pytest.raises(TypeCheckError, match=message):
        run(case.f, mesh, case.args(mesh), check_vma=check_vma, jitted=jitted)


@pytest.mark.parametrize("check_vma", VMA, ids=VMA_IDS)
@pytest.mark.parametrize("name", sorted(CORRECT))
def test_a_correct_kernel_passes_and_computes_the_reference(mesh, name, check_vma):
    check_correct(CORRECT[name], kind_of(mesh), check_vma, jitted=True)


@pytest.mark.parametrize("check_vma", VMA, ids=VMA_IDS)
@pytest.mark.parametrize("name", EAGER_CORRECT)
def test_a_correct_kernel_passes_eagerly(mesh, name, check_vma):
    check_correct(CORRECT[name], kind_of(mesh), check_vma, jitted=False)


@pytest.mark.parametrize("check_vma", VMA, ids=VMA_IDS)
def test_the_typed_and_the_plain_pmean_of_a_loss_get_the_same_verdict(mesh, check_vma):
    args = (put(mesh, XB, "d"), put(mesh, WB), put(mesh, YB, "d"))
    reference = np.mean((f64(XB) @ f64(WB) - f64(YB)) ** 2)
    for f in (dp_loss_ops, dp_loss_lax):
        np.testing.assert_allclose(run(f, mesh, args, check_vma=check_vma, checks=False), reference, **TOL)
    typed = run(dp_loss_ops, mesh, args, check_vma=check_vma)
    plain = run(dp_loss_lax, mesh, args, check_vma=check_vma)
    np.testing.assert_allclose(typed, reference, **TOL)
    np.testing.assert_allclose(plain, typed, **TOL)


@pytest.mark.parametrize("check_vma", VMA, ids=VMA_IDS)
@pytest.mark.parametrize("name", sorted(MISTAKES))
def test_a_mistake_is_refused(mesh, name, check_vma):
    case, message = MISTAKES[name]
    check_mistake(case, message, kind_of(mesh), check_vma, jitted=True)


@pytest.mark.parametrize("check_vma", VMA, ids=VMA_IDS)
@pytest.mark.parametrize("name", EAGER_MISTAKES)
def test_a_mistake_is_refused_eagerly(mesh, name, check_vma):
    case, message = MISTAKES[name]
    check_mistake(case, message, kind_of(mesh), check_vma, jitted=False)


def moe_args(mesh):
    return put(mesh, MOE_X, "d"), put(mesh, MOE_W)


@pytest.mark.parametrize("check_vma", VMA, ids=VMA_IDS)
def test_a_per_group_statistic_runs_without_a_mark(mesh, check_vma):
    """The per-group load-balancing loss is right by intent (each group's statistics are
    per-device): two local sums over the same split, each divided by the count it added, are
    this group's means, and their product is a per-group statistic the pmean averages."""
    reference = moe_per_group_reference()
    assert not np.isclose(reference, moe_aux(MOE_X, MOE_W), rtol=1e-3)  # per group is not global
    np.testing.assert_allclose(run(moe_aux_unmarked, mesh, moe_args(mesh), check_vma=check_vma), reference, **TOL)


@pytest.mark.parametrize("check_vma", VMA, ids=VMA_IDS)
def test_a_per_group_statistic_marked_per_device_passes(mesh, check_vma):
    reference = moe_per_group_reference()
    np.testing.assert_allclose(run(moe_aux_marked, mesh, moe_args(mesh), check_vma=check_vma, checks=False),
                               reference, **TOL)
    np.testing.assert_allclose(run(moe_aux_marked, mesh, moe_args(mesh), check_vma=check_vma),
                               reference, **TOL)
