"""A corpus of shard_map kernels, each correct one paired with realistic mistaken variants.

Every kernel is a ``typed_shard_map`` kernel written against the *global* meaning of its
annotations, in the style of the public codebases that use these patterns (ring attention,
DeepSpeed-Ulysses, collective matmuls, Megatron tensor and sequence parallelism, ZeRO, MoE
expert parallelism, GPipe, ...). The code is our own. A correct kernel gives the same global
result on every mesh of its axis names (sizes 1 allowed, product <= 8), except along the axes
in ``keep``, whose size is part of what it means. A mistake usually does not: it is what
``shardtypes.testing.assert_same_on_every_mesh`` is measured on.

``CASES`` lists them. A case's ``correct`` names the correct case it is a mistake of (None for
correct kernels), and ``kind`` says what kind of mistake it is. Inputs come from the
annotations with the sizes in ``dims``, or from ``make_args`` (global numpy arrays) where random
floats would not do (integer ids in range, labels on shard boundaries).

Some mistakes are invisible to a comparison across meshes by construction (their ``note`` says
so): the mistake lives on an axis whose size is held (a pipeline's stages), so every mesh
computes the same wrong numbers.
"""

import dataclasses
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np

from shardtypes import f32, i32, ops, typed_shard_map


@dataclasses.dataclass(frozen=True)
class Case:
    name: str
    kernel: Callable
    correct: str | None
    kind: str | None
    axes: tuple[str, ...]
    dims: dict[str, int]
    keep: dict[str, int] | None = None
    make_args: Callable[[], tuple] | None = None
    source: str = ""
    note: str = ""


NEG = -1e30  # a large negative score for masked attention entries (no -inf: no nan rows)


def _ring(n: int, shift: int) -> list[tuple[int, int]]:
    """A ring over an axis of ``n`` devices: device j sends to j + shift (mod n)."""
    return [(j, (j + shift) % n) for j in range(n)]


def _chain(n: int, shift: int) -> list[tuple[int, int]]:
    """Device j sends to j + shift, no wraparound: the devices at the end receive zeros."""
    return [(j, j + shift) for j in range(n) if 0 <= j + shift < n]


# =============================================================================================
# 1. Causal ring attention over a sequence split over 'd' (heads split over 't').
#    k and v travel round the ring; each step attends to the block held, with an online softmax.
#    The causal mask needs to know which block of keys this device holds at step i.

def _ring_attention(q, k, v, *, send: int, held: int, rescale: bool = True):
    n = jax.lax.axis_size("d")
    idx = jax.lax.axis_index("d")
    length = q.shape[1]
    scale = q.shape[-1] ** -0.5
    q_pos = idx * length + jnp.arange(length)
    perm = _ring(n, send)

    def step(i, carry):
        o, m, l, k, v = carry
        block = (idx + held * i) % n  # which block of keys this device holds at step i
        k_pos = block * length + jnp.arange(length)
        s = jnp.einsum("hqc,hkc->hqk", q, k) * scale
        s = jnp.where(q_pos[:, None] >= k_pos[None, :], s, NEG)
        m_new = jnp.maximum(m, s.max(-1))
        p = jnp.exp(s - m_new[..., None])
        c = jnp.exp(m - m_new)
        l = l * c + p.sum(-1)
        pv = jnp.einsum("hqk,hkc->hqc", p, v)
        o = o * c[..., None] + pv if rescale else o + pv
        k = jax.lax.ppermute(k, "d", perm)
        v = jax.lax.ppermute(v, "d", perm)
        return o, m_new, l, k, v

    init = (jnp.zeros_like(q), jnp.full_like(q[..., 0], NEG), jnp.zeros_like(q[..., 0]), k, v)
    o, _, l, _, _ = jax.lax.fori_loop(0, n, step, init)
    return o / l[..., None]


@typed_shard_map
def ring_attention(q: f32[b"heads/t seq/d hdim"], k: f32[b"heads/t seq/d hdim"],
                   v: f32[b"heads/t seq/d hdim"]) -> f32[b"heads/t seq/d hdim"]:
    # sends to the next device, so at step i it holds the keys of device idx - i
    return _ring_attention(q, k, v, send=+1, held=-1)


@typed_shard_map
def ring_attention_wrong_direction(q: f32[b"heads/t seq/d hdim"], k: f32[b"heads/t seq/d hdim"],
                                   v: f32[b"heads/t seq/d hdim"]) -> f32[b"heads/t seq/d hdim"]:
    return _ring_attention(q, k, v, send=-1, held=-1)  # sends backwards: holds idx + i


@typed_shard_map
def ring_attention_block_index(q: f32[b"heads/t seq/d hdim"], k: f32[b"heads/t seq/d hdim"],
                               v: f32[b"heads/t seq/d hdim"]) -> f32[b"heads/t seq/d hdim"]:
    return _ring_attention(q, k, v, send=+1, held=+1)  # (idx + i) % n where (idx - i) % n is held


@typed_shard_map
def ring_attention_no_rescale(q: f32[b"heads/t seq/d hdim"], k: f32[b"heads/t seq/d hdim"],
                              v: f32[b"heads/t seq/d hdim"]) -> f32[b"heads/t seq/d hdim"]:
    return _ring_attention(q, k, v, send=+1, held=-1, rescale=False)  # o not rescaled to the new max


# =============================================================================================
# 2. DeepSpeed-Ulysses sequence parallelism: all_to_all from sequence-split to head-split,
#    full causal attention over the whole sequence for a slice of the heads, and back.

def _causal_attention(q, k, v):
    s = jnp.einsum("bqhc,bkhc->bhqk", q, k) * q.shape[-1] ** -0.5
    t = q.shape[1]
    s = jnp.where(jnp.tril(jnp.ones((t, t), bool)), s, NEG)
    return jnp.einsum("bhqk,bkhc->bqhc", jax.nn.softmax(s, axis=-1), v)


def _ulysses(q, k, v, *, head_axis: int):
    def to_heads(a):
        return jax.lax.all_to_all(a, "d", split_axis=head_axis, concat_axis=1, tiled=True)

    o = _causal_attention(to_heads(q), to_heads(k), to_heads(v))
    return jax.lax.all_to_all(o, "d", split_axis=1, concat_axis=head_axis, tiled=True)


@typed_shard_map
def ulysses_attention(q: f32[b"batch/t seq/d heads hdim"], k: f32[b"batch/t seq/d heads hdim"],
                      v: f32[b"batch/t seq/d heads hdim"]) -> f32[b"batch/t seq/d heads hdim"]:
    return _ulysses(q, k, v, head_axis=2)


@typed_shard_map
def ulysses_attention_split_hdim(q: f32[b"batch/t seq/d heads hdim"], k: f32[b"batch/t seq/d heads hdim"],
                                 v: f32[b"batch/t seq/d heads hdim"]) -> f32[b"batch/t seq/d heads hdim"]:
    return _ulysses(q, k, v, head_axis=3)  # splits head_dim, not heads: each device sees all heads


# =============================================================================================
# 3. All-gather matmul as a ppermute ring (the collective matmul of JAX's shard_map docs): the
#    rows of x are split over 't', w's columns too; each device computes all rows for its
#    columns, one block of rows per step, while the blocks travel round the ring.

def _allgather_matmul(x, w, *, send: int, held: int, offset: bool = True):
    n = jax.lax.axis_size("t")
    idx = jax.lax.axis_index("t")
    length = x.shape[1]
    out = jnp.zeros((x.shape[0], length * n, w.shape[1]), x.dtype)
    chunk = x
    for i in range(n):
        block = (idx + held * i) % n if offset else i  # whose rows this device holds now
        out = jax.lax.dynamic_update_slice_in_dim(out, chunk @ w, block * length, axis=1)
        if i < n - 1:
            chunk = jax.lax.ppermute(chunk, "t", _ring(n, send))
    return out


@typed_shard_map
def allgather_matmul(x: f32[b"batch/d seq/t embed"], w: f32[b"embed hidden/t"]) -> f32[b"batch/d seq hidden/t"]:
    # sends to the previous device, so at step i it holds the rows of device idx + i
    return _allgather_matmul(x, w, send=-1, held=+1)


@typed_shard_map
def allgather_matmul_wrong_direction(x: f32[b"batch/d seq/t embed"],
                                     w: f32[b"embed hidden/t"]) -> f32[b"batch/d seq hidden/t"]:
    return _allgather_matmul(x, w, send=+1, held=+1)


@typed_shard_map
def allgather_matmul_block_index(x: f32[b"batch/d seq/t embed"],
                                 w: f32[b"embed hidden/t"]) -> f32[b"batch/d seq hidden/t"]:
    return _allgather_matmul(x, w, send=-1, held=-1)


@typed_shard_map
def allgather_matmul_no_axis_index(x: f32[b"batch/d seq/t embed"],
                                   w: f32[b"embed hidden/t"]) -> f32[b"batch/d seq hidden/t"]:
    return _allgather_matmul(x, w, send=-1, held=+1, offset=False)  # block i, not idx + i


# =============================================================================================
# 4. Matmul + reduce-scatter as a ppermute ring (Megatron sequence parallelism's row-parallel
#    layer, overlapped): each device's h @ w is a partial sum over 't'; the partial sums of one
#    block of the sequence travel round the ring, each device adding its own, until the block
#    reaches its owner complete.

def _matmul_reduce_scatter(h, w, *, send: int, first: int):
    n = jax.lax.axis_size("t")
    idx = jax.lax.axis_index("t")
    length = h.shape[1] // n
    acc = None
    for i in range(n):
        block = (idx - send * (i + first)) % n
        part = jax.lax.dynamic_slice_in_dim(h, block * length, length, axis=1) @ w
        # the ring completes the sum, block by block: the kernel pass cannot follow that (each
        # device adds a different block, picked with axis_index) and refuses the result as a
        # partial sum still owed over 't' without this mark
        part = ops.per_device(part, "t")
        acc = part if acc is None else acc + part
        if i < n - 1:
            acc = jax.lax.ppermute(acc, "t", _ring(n, send))
    return acc


@typed_shard_map
def matmul_reduce_scatter(h: f32[b"batch/d seq hidden/t"], w: f32[b"hidden/t embed"]) -> f32[b"batch/d seq/t embed"]:
    # at step i device idx adds block idx - i - 1: after n - 1 hops to idx + 1, ... it is block idx
    return _matmul_reduce_scatter(h, w, send=+1, first=1)


@typed_shard_map
def matmul_reduce_scatter_wrong_direction(h: f32[b"batch/d seq hidden/t"],
                                          w: f32[b"hidden/t embed"]) -> f32[b"batch/d seq/t embed"]:
    n = jax.lax.axis_size("t")
    idx = jax.lax.axis_index("t")
    length = h.shape[1] // n
    acc = None
    for i in range(n):
        block = (idx - i - 1) % n
        part = ops.per_device(jax.lax.dynamic_slice_in_dim(h, block * length, length, axis=1) @ w, "t")
        acc = part if acc is None else acc + part
        if i < n - 1:
            acc = jax.lax.ppermute(acc, "t", _ring(n, -1))  # block indices are for the other way
    return acc


@typed_shard_map
def matmul_reduce_scatter_off_by_one(h: f32[b"batch/d seq hidden/t"],
                                     w: f32[b"hidden/t embed"]) -> f32[b"batch/d seq/t embed"]:
    return _matmul_reduce_scatter(h, w, send=+1, first=0)  # starts at block idx: ends at idx + 1


# =============================================================================================
# 5. ZeRO-style gradient reduce-scatter: the batch is split over ('d', 't'), the gradient of the
#    replicated weight is summed over both and each device keeps its block of rows (feat/d/t),
#    divided by the number of devices (the mean of the per-device mean gradients).

def _local_grad(x, y, w):
    r = x @ w - y
    return 2.0 * x.T @ r / (x.shape[0] * y.shape[1])  # gradient of this block's mean squared error


@typed_shard_map
def zero_grad_scatter(x: f32[b"batch/d/t feat"], y: f32[b"batch/d/t out"],
                      w: f32[b"feat out"]) -> f32[b"feat/d/t out"]:
    g = jax.lax.psum_scatter(_local_grad(x, y, w), ("d", "t"), scatter_dimension=0, tiled=True)
    return g / jax.lax.axis_size(("d", "t"))


@typed_shard_map
def zero_grad_scatter_axis_order(x: f32[b"batch/d/t feat"], y: f32[b"batch/d/t out"],
                                 w: f32[b"feat out"]) -> f32[b"feat/d/t out"]:
    g = jax.lax.psum_scatter(_local_grad(x, y, w), ("t", "d"), scatter_dimension=0, tiled=True)
    return g / jax.lax.axis_size(("d", "t"))


@typed_shard_map
def zero_grad_scatter_sum(x: f32[b"batch/d/t feat"], y: f32[b"batch/d/t out"],
                          w: f32[b"feat out"]) -> f32[b"feat/d/t out"]:
    return jax.lax.psum_scatter(_local_grad(x, y, w), ("d", "t"), scatter_dimension=0, tiled=True)


@typed_shard_map
def zero_grad_scatter_dim(x: f32[b"batch/d/t feat"], y: f32[b"batch/d/t out"],
                          w: f32[b"feat out"]) -> f32[b"feat/d/t out"]:
    g = jax.lax.psum_scatter(_local_grad(x, y, w), ("d", "t"), scatter_dimension=1, tiled=True)
    return g / jax.lax.axis_size(("d", "t"))


# =============================================================================================
# 6. A data-parallel SGD step with jax.grad inside the kernel: the batch over 'd', the output
#    columns of the weight over 't'. The loss is the global mean: per-example squared error
#    summed over 't', meaned over the batch and over 'd'.

def _dp_sgd(w, x, y, *, over_d, over_t):
    def loss(w):
        per_example = over_t(jnp.sum((x @ w - y) ** 2, axis=-1), "t") / (y.shape[1] * jax.lax.axis_size("t"))
        return over_d(jnp.mean(per_example), "d")

    return w - 0.1 * jax.grad(loss)(w)


@typed_shard_map
def dp_sgd_step(w: f32[b"feat out/t"], x: f32[b"batch/d feat"], y: f32[b"batch/d out/t"]) -> f32[b"feat out/t"]:
    return _dp_sgd(w, x, y, over_d=jax.lax.pmean, over_t=jax.lax.psum)


@typed_shard_map
def dp_sgd_step_loss_psum(w: f32[b"feat out/t"], x: f32[b"batch/d feat"],
                          y: f32[b"batch/d out/t"]) -> f32[b"feat out/t"]:
    return _dp_sgd(w, x, y, over_d=jax.lax.psum, over_t=jax.lax.psum)


@typed_shard_map
def dp_sgd_step_pmean_t(w: f32[b"feat out/t"], x: f32[b"batch/d feat"],
                        y: f32[b"batch/d out/t"]) -> f32[b"feat out/t"]:
    return _dp_sgd(w, x, y, over_d=jax.lax.pmean, over_t=jax.lax.pmean)


# =============================================================================================
# 7. MoE with expert parallelism over 'd' (tokens over 'd' too), top-1 routing with a capacity of
#    every local token (nothing dropped, so the result does not depend on the mesh): dispatch to
#    a [experts, capacity, model] buffer, all_to_all so each device gets its experts' tokens from
#    every device, apply the experts, all_to_all back, combine.

def _route(x, router):
    logits = x @ router
    expert = jnp.argmax(logits, axis=-1)
    gate = jnp.max(jax.nn.softmax(logits, axis=-1), axis=-1)
    return expert, gate


def _moe_alltoall(x, router, w_in, w_out, *, dispatch_concat: int, combine_split: int):
    n = jax.lax.axis_size("d")
    tokens, model = x.shape
    experts = router.shape[1]
    local_experts = w_in.shape[0]
    capacity = tokens
    expert, gate = _route(x, router)
    onehot = jax.nn.one_hot(expert, experts, dtype=x.dtype)                       # [T, E]
    # each token's slot in its expert's buffer: a cumsum over this device's tokens only, by design
    # (every device fills its own dispatch buffer), which the kernel pass must be told
    slot = ops.per_device(jnp.cumsum(onehot, axis=0), "d")
    slot = jnp.sum((slot - 1) * onehot, axis=-1).astype(jnp.int32)
    dispatch = onehot[:, :, None] * jax.nn.one_hot(slot, capacity, dtype=x.dtype)[:, None, :]  # [T, E, C]
    # a one-hot matmul that places this device's tokens in its own buffer (a scatter, not a sum
    # over the devices' tokens): the kernel pass reads the contraction over tokens/d as a partial
    # sum owed over 'd' and needs this mark too
    buf = ops.per_device(jnp.einsum("tec,tm->ecm", dispatch, x), "d")
    buf = jax.lax.all_to_all(buf, "d", split_axis=0, concat_axis=dispatch_concat, tiled=True)
    buf = buf.reshape(local_experts, n * capacity, model)                         # [E/n, n*C, M]
    h = jax.nn.relu(jnp.einsum("ecm,emh->ech", buf, w_in))
    out = jnp.einsum("ech,ehm->ecm", h, w_out)
    out = jax.lax.all_to_all(out, "d", split_axis=combine_split, concat_axis=0, tiled=True)
    out = out.reshape(experts, capacity, model)                                   # [E, C, M]
    return jnp.einsum("tec,ecm->tm", dispatch, out) * gate[:, None]


@typed_shard_map
def moe_alltoall(x: f32[b"tokens/d model"], router: f32[b"model experts"], w_in: f32[b"experts/d model hidden"],
                 w_out: f32[b"experts/d hidden model"]) -> f32[b"tokens/d model"]:
    return _moe_alltoall(x, router, w_in, w_out, dispatch_concat=1, combine_split=1)


@typed_shard_map
def moe_alltoall_dispatch_concat(x: f32[b"tokens/d model"], router: f32[b"model experts"],
                                 w_in: f32[b"experts/d model hidden"],
                                 w_out: f32[b"experts/d hidden model"]) -> f32[b"tokens/d model"]:
    # concatenates the received blocks along experts; the reshape hides it
    return _moe_alltoall(x, router, w_in, w_out, dispatch_concat=0, combine_split=1)


@typed_shard_map
def moe_alltoall_combine_split(x: f32[b"tokens/d model"], router: f32[b"model experts"],
                               w_in: f32[b"experts/d model hidden"],
                               w_out: f32[b"experts/d hidden model"]) -> f32[b"tokens/d model"]:
    # the combine splits the local experts instead of the capacity; the reshape hides it
    return _moe_alltoall(x, router, w_in, w_out, dispatch_concat=1, combine_split=0)


# =============================================================================================
# 8. MoE with the experts split over 't' and the tokens over 'd' (replicated over 't'): each
#    t-device applies its experts to the tokens routed to them, and a psum over 't' combines.
#    A token's expert id is global: this device's experts start at axis_index('t') * E_local.

def _moe_masked(x, router, w_in, w_out, *, offset: bool):
    local_experts = w_in.shape[0]
    expert, gate = _route(x, router)
    first = jax.lax.axis_index("t") * local_experts if offset else 0
    mine = jax.nn.one_hot(expert - first, local_experts, dtype=x.dtype)           # [T, E_local]
    h = jax.nn.relu(jnp.einsum("tm,emh->teh", x, w_in))
    y = jnp.einsum("teh,ehm,te->tm", h, w_out, mine) * gate[:, None]
    return y


@typed_shard_map
def moe_expert_sharded(x: f32[b"tokens/d model"], router: f32[b"model experts"], w_in: f32[b"experts/t model hidden"],
                       w_out: f32[b"experts/t hidden model"]) -> f32[b"tokens/d model"]:
    return jax.lax.psum(_moe_masked(x, router, w_in, w_out, offset=True), "t")


@typed_shard_map
def moe_expert_sharded_no_offset(x: f32[b"tokens/d model"], router: f32[b"model experts"],
                                 w_in: f32[b"experts/t model hidden"],
                                 w_out: f32[b"experts/t hidden model"]) -> f32[b"tokens/d model"]:
    return jax.lax.psum(_moe_masked(x, router, w_in, w_out, offset=False), "t")


@typed_shard_map
def moe_expert_sharded_pmean(x: f32[b"tokens/d model"], router: f32[b"model experts"],
                             w_in: f32[b"experts/t model hidden"],
                             w_out: f32[b"experts/t hidden model"]) -> f32[b"tokens/d model"]:
    return jax.lax.pmean(_moe_masked(x, router, w_in, w_out, offset=True), "t")


# =============================================================================================
# 9. Rotary position embedding on a sequence split over 't' (context parallelism): a token's
#    position is its global one, axis_index('t') * local_len + its local index.

def _rope(x, pos):
    half = x.shape[-1] // 2
    freqs = 1.0 / (10000.0 ** (jnp.arange(half, dtype=x.dtype) / half))
    angle = pos.astype(x.dtype)[:, None, None] * freqs                            # [L, 1, half]
    cos, sin = jnp.cos(angle), jnp.sin(angle)
    x1, x2 = x[..., :half], x[..., half:]
    return jnp.concatenate([x1 * cos - x2 * sin, x1 * sin + x2 * cos], axis=-1)


@typed_shard_map
def rope_context_parallel(x: f32[b"batch/d seq/t heads hdim"]) -> f32[b"batch/d seq/t heads hdim"]:
    length = x.shape[1]
    return _rope(x, jax.lax.axis_index("t") * length + jnp.arange(length))


@typed_shard_map
def rope_context_parallel_no_offset(x: f32[b"batch/d seq/t heads hdim"]) -> f32[b"batch/d seq/t heads hdim"]:
    return _rope(x, jnp.arange(x.shape[1]))


@typed_shard_map
def rope_context_parallel_wrong_axis(x: f32[b"batch/d seq/t heads hdim"]) -> f32[b"batch/d seq/t heads hdim"]:
    length = x.shape[1]
    return _rope(x, jax.lax.axis_index("d") * length + jnp.arange(length))


# =============================================================================================
# 10. Megatron tensor-parallel MLP: column-parallel up projection, row-parallel down projection
#     whose partial sums are added with a psum over 't'; the down projection's bias after it.

@typed_shard_map
def tp_mlp(x: f32[b"batch/d embed"], w1: f32[b"embed hidden/t"], b1: f32[b"hidden/t"],
           w2: f32[b"hidden/t embed"], b2: f32[b"embed"]) -> f32[b"batch/d embed"]:
    h = jax.nn.gelu(x @ w1 + b1)
    return jax.lax.psum(h @ w2, "t") + b2


@typed_shard_map
def tp_mlp_bias_in_psum(x: f32[b"batch/d embed"], w1: f32[b"embed hidden/t"], b1: f32[b"hidden/t"],
                        w2: f32[b"hidden/t embed"], b2: f32[b"embed"]) -> f32[b"batch/d embed"]:
    h = jax.nn.gelu(x @ w1 + b1)
    return jax.lax.psum(h @ w2 + b2, "t")


@typed_shard_map
def tp_mlp_pmean(x: f32[b"batch/d embed"], w1: f32[b"embed hidden/t"], b1: f32[b"hidden/t"],
                 w2: f32[b"hidden/t embed"], b2: f32[b"embed"]) -> f32[b"batch/d embed"]:
    h = jax.nn.gelu(x @ w1 + b1)
    return jax.lax.pmean(h @ w2, "t") + b2


# =============================================================================================
# 11. Megatron vocab-parallel cross entropy: logits split over the vocabulary ('t'), the batch
#     over 'd'; the mean loss over the global batch.

def _vocab_xent(logits, labels, *, offset: bool = True, inclusive: bool = False, over_d=jax.lax.pmean):
    v_local = logits.shape[1]
    # (the stop_gradient after the pmax: stop_gradient(logits.max(-1)) before it is refused by the
    # kernel pass as a partial maximum, a false positive; see the report with this corpus)
    m = jax.lax.stop_gradient(jax.lax.pmax(logits.max(-1), "t"))
    z = logits - m[:, None]
    sum_exp = jax.lax.psum(jnp.exp(z).sum(-1), "t")
    local = labels - jax.lax.axis_index("t") * v_local if offset else labels
    mine = (local >= 0) & ((local <= v_local) if inclusive else (local < v_local))
    picked = jnp.take_along_axis(z, jnp.clip(local, 0, v_local - 1)[:, None], axis=-1)[:, 0]
    picked = jax.lax.psum(jnp.where(mine, picked, 0.0), "t")
    return over_d(jnp.mean(jnp.log(sum_exp) - picked), "d")


@typed_shard_map
def vocab_parallel_xent(logits: f32[b"batch/d vocab/t"], labels: i32[b"batch/d"]) -> f32[b""]:
    return _vocab_xent(logits, labels)


@typed_shard_map
def vocab_parallel_xent_no_offset(logits: f32[b"batch/d vocab/t"], labels: i32[b"batch/d"]) -> f32[b""]:
    return _vocab_xent(logits, labels, offset=False)


@typed_shard_map
def vocab_parallel_xent_boundary(logits: f32[b"batch/d vocab/t"], labels: i32[b"batch/d"]) -> f32[b""]:
    return _vocab_xent(logits, labels, inclusive=True)  # local <= v_local: a boundary label counted twice


@typed_shard_map
def vocab_parallel_xent_psum(logits: f32[b"batch/d vocab/t"], labels: i32[b"batch/d"]) -> f32[b""]:
    return _vocab_xent(logits, labels, over_d=jax.lax.psum)


def _xent_args():
    rng = np.random.default_rng(11)
    logits = rng.standard_normal((16, 32)).astype(np.float32)
    # half the labels on a shard boundary for some number of shards (multiples of 4)
    labels = np.concatenate([np.arange(4, 32, 4), rng.integers(0, 32, 9)]).astype(np.int32)
    return logits, labels


# =============================================================================================
# 12. A sharded, weighted histogram update (bincount): items over 'd', bins over 't'. Each
#     device counts its items into its own range of bins, which starts at axis_index('t') * B_local.

def _histogram(hist, values, weights, *, offset: bool = True, inclusive: bool = False):
    b_local = hist.shape[0]
    local = values - jax.lax.axis_index("t") * b_local if offset else values
    mine = (local >= 0) & ((local <= b_local) if inclusive else (local < b_local))
    counts = jax.nn.one_hot(jnp.clip(local, 0, b_local - 1), b_local, dtype=hist.dtype)
    counts = counts * (mine * weights)[:, None]
    return hist + jax.lax.psum(counts.sum(0), "d")


@typed_shard_map
def sharded_histogram(hist: f32[b"bins/t"], values: i32[b"items/d"], weights: f32[b"items/d"]) -> f32[b"bins/t"]:
    return _histogram(hist, values, weights)


@typed_shard_map
def sharded_histogram_no_offset(hist: f32[b"bins/t"], values: i32[b"items/d"],
                                weights: f32[b"items/d"]) -> f32[b"bins/t"]:
    return _histogram(hist, values, weights, offset=False)


@typed_shard_map
def sharded_histogram_boundary(hist: f32[b"bins/t"], values: i32[b"items/d"],
                               weights: f32[b"items/d"]) -> f32[b"bins/t"]:
    return _histogram(hist, values, weights, inclusive=True)


def _histogram_args():
    rng = np.random.default_rng(12)
    hist = rng.standard_normal(16).astype(np.float32)
    values = np.concatenate([np.arange(0, 16, 2), rng.integers(0, 16, 24)]).astype(np.int32)
    weights = rng.uniform(0.5, 1.5, 32).astype(np.float32)
    return hist, values, weights


# =============================================================================================
# 13. GPipe over a 'stage' axis (held at 4 stages: one layer per stage), data parallel over 'd'.
#     The batch enters at stage 0, each stage applies its layer and sends the activations to
#     the next stage; the last stage's output is broadcast with a psum.

def _gpipe(x, w, *, send: int):
    n = jax.lax.axis_size("stage")
    stage = jax.lax.axis_index("stage")
    h = jnp.where(stage == 0, x, 0.0)
    for i in range(n):
        h = jnp.tanh(h @ w[0])
        if i < n - 1:
            h = jax.lax.ppermute(h, "stage", _chain(n, send))
    return jax.lax.psum(jnp.where(stage == n - 1, h, 0.0), "stage")


@typed_shard_map
def gpipe(x: f32[b"batch/d feat"], w: f32[b"layers/stage feat feat"]) -> f32[b"batch/d feat"]:
    return _gpipe(x, w, send=+1)


@typed_shard_map
def gpipe_wrong_direction(x: f32[b"batch/d feat"], w: f32[b"layers/stage feat feat"]) -> f32[b"batch/d feat"]:
    return _gpipe(x, w, send=-1)


# A microbatched GPipe schedule (praxis / the JAX pipelining tutorial): M microbatches of the
# local batch, M + stages - 1 ticks, a circular shift of the state after every tick.

def _gpipe_micro(x, w, *, send: int, lag: int):
    n = jax.lax.axis_size("stage")
    stage = jax.lax.axis_index("stage")
    micro = 4
    mb = x.reshape(micro, x.shape[0] // micro, x.shape[1])
    state = jnp.zeros_like(mb[0])
    outs = jnp.zeros_like(mb)
    for tick in range(micro + n - 1):
        if tick < micro:
            state = jnp.where(stage == 0, mb[tick], state)
        state = jnp.tanh(state @ w[0])
        done = tick - lag  # the microbatch the last stage finishes at this tick
        if 0 <= done < micro:
            outs = outs.at[done].set(jnp.where(stage == n - 1, state, 0.0))
        state = jax.lax.ppermute(state, "stage", _ring(n, send))
    return jax.lax.psum(outs, "stage").reshape(x.shape)


@typed_shard_map
def gpipe_microbatched(x: f32[b"batch/d feat"], w: f32[b"layers/stage feat feat"]) -> f32[b"batch/d feat"]:
    return _gpipe_micro(x, w, send=+1, lag=jax.lax.axis_size("stage") - 1)


@typed_shard_map
def gpipe_microbatched_wrong_direction(x: f32[b"batch/d feat"],
                                       w: f32[b"layers/stage feat feat"]) -> f32[b"batch/d feat"]:
    return _gpipe_micro(x, w, send=-1, lag=jax.lax.axis_size("stage") - 1)


@typed_shard_map
def gpipe_microbatched_lag(x: f32[b"batch/d feat"], w: f32[b"layers/stage feat feat"]) -> f32[b"batch/d feat"]:
    return _gpipe_micro(x, w, send=+1, lag=jax.lax.axis_size("stage"))  # one tick late: last microbatch lost


# =============================================================================================
# 14. seqax-style FSDP matmul: the weight's rows split over ('d', 't') in that order (d major),
#     gathered over both just before use.

@typed_shard_map
def fsdp_matmul(x: f32[b"batch/d/t embed"], w: f32[b"embed/d/t hidden"]) -> f32[b"batch/d/t hidden"]:
    return x @ jax.lax.all_gather(w, ("d", "t"), axis=0, tiled=True)


@typed_shard_map
def fsdp_matmul_gather_order(x: f32[b"batch/d/t embed"], w: f32[b"embed/d/t hidden"]) -> f32[b"batch/d/t hidden"]:
    return x @ jax.lax.all_gather(w, ("t", "d"), axis=0, tiled=True)


# =============================================================================================
# 15. RMSNorm with the embedding split over 't' (Megatron sequence/tensor parallel norms): the
#     mean square is over the whole embedding.

@typed_shard_map
def rmsnorm_tp(x: f32[b"batch/d embed/t"], scale: f32[b"embed/t"]) -> f32[b"batch/d embed/t"]:
    embed = x.shape[1] * jax.lax.axis_size("t")
    ms = jax.lax.psum(jnp.sum(x * x, axis=-1, keepdims=True), "t") / embed
    return x * jax.lax.rsqrt(ms + 1e-6) * scale


@typed_shard_map
def rmsnorm_tp_psum_of_means(x: f32[b"batch/d embed/t"], scale: f32[b"embed/t"]) -> f32[b"batch/d embed/t"]:
    ms = jax.lax.psum(jnp.mean(x * x, axis=-1, keepdims=True), "t")
    return x * jax.lax.rsqrt(ms + 1e-6) * scale


@typed_shard_map
def rmsnorm_tp_local(x: f32[b"batch/d embed/t"], scale: f32[b"embed/t"]) -> f32[b"batch/d embed/t"]:
    ms = jnp.mean(x * x, axis=-1, keepdims=True)  # this device's slice of the embedding only
    return x * jax.lax.rsqrt(ms + 1e-6) * scale


# =============================================================================================
# 16. A causal depthwise conv1d over a sequence split over 'd' (Mamba-style context parallel):
#     each device needs the last taps - 1 steps of the previous device (a halo), and the first
#     device zeros.

def _causal_conv(x, kernel, *, perm_of):
    taps = kernel.shape[0]
    n = jax.lax.axis_size("d")
    halo = jax.lax.ppermute(x[:, x.shape[1] - (taps - 1):, :], "d", perm_of(n))
    xp = jnp.concatenate([halo, x], axis=1)
    return sum(xp[:, k:k + x.shape[1], :] * kernel[k] for k in range(taps))


@typed_shard_map
def causal_conv_halo(x: f32[b"batch/t seq/d chan"], kernel: f32[b"taps chan"]) -> f32[b"batch/t seq/d chan"]:
    return _causal_conv(x, kernel, perm_of=lambda n: _chain(n, +1))


@typed_shard_map
def causal_conv_halo_wrong_direction(x: f32[b"batch/t seq/d chan"],
                                     kernel: f32[b"taps chan"]) -> f32[b"batch/t seq/d chan"]:
    return _causal_conv(x, kernel, perm_of=lambda n: _chain(n, -1))  # the halo of the next device


@typed_shard_map
def causal_conv_halo_wraparound(x: f32[b"batch/t seq/d chan"],
                                kernel: f32[b"taps chan"]) -> f32[b"batch/t seq/d chan"]:
    return _causal_conv(x, kernel, perm_of=lambda n: _ring(n, +1))  # device 0 gets the sequence's end


# =============================================================================================

_DT = ("d", "t")
_RING = dict(heads=8, seq=32, hdim=4)
_ULYSSES = dict(batch=8, seq=16, heads=8, hdim=8)
_AGMM = dict(batch=8, seq=16, embed=8, hidden=16)
_RSMM = dict(batch=8, seq=16, hidden=16, embed=8)
_ZERO = dict(batch=32, feat=16, out=16)
_SGD = dict(batch=16, feat=8, out=16)
_MOE = dict(tokens=16, model=8, hidden=8, experts=64)
_ROPE = dict(batch=8, seq=16, heads=2, hdim=8)
_MLP = dict(batch=16, embed=8, hidden=16)
_XENT = dict(batch=16, vocab=32)
_HIST = dict(bins=16, items=32)
_PIPE = dict(batch=16, feat=8, layers=4)
_FSDP = dict(batch=16, embed=16, hidden=8)
_NORM = dict(batch=16, embed=16)
_CONV = dict(batch=8, seq=32, taps=3, chan=4)
_STAGES = {"stage": 4}

_RING_SRC = "ring attention (Liu et al.; MaxText / EasyDeL context-parallel attention)"
_MOE_SRC = "praxis / flaxformer expert-parallel MoE (all_to_all dispatch and combine)"

CASES: list[Case] = [
    # 1. ring attention
    Case("ring_attention", ring_attention, None, None, _DT, _RING, source=_RING_SRC,
         note="causal ring attention: k, v sent to device idx + 1, so step i holds block (idx - i) % n"),
    Case("ring_attention/wrong_direction", ring_attention_wrong_direction, "ring_attention", "ring direction",
         _DT, _RING, source=_RING_SRC,
         note="k, v sent to idx - 1 but the causal mask assumes block (idx - i) % n is held "
              "(on 2 devices both directions are one ring: it shows with d >= 4)"),
    Case("ring_attention/block_index", ring_attention_block_index, "ring_attention", "offset", _DT, _RING,
         source=_RING_SRC, note="held block computed as (idx + i) % n instead of (idx - i) % n"),
    Case("ring_attention/no_rescale", ring_attention_no_rescale, "ring_attention", "online softmax", _DT, _RING,
         source=_RING_SRC, note="the output accumulator is not rescaled by exp(m_old - m_new) when the max grows"),
    # 2. Ulysses
    Case("ulysses_attention", ulysses_attention, None, None, _DT, _ULYSSES,
         source="DeepSpeed-Ulysses sequence parallelism", note="all_to_all seq <-> heads around full causal attention"),
    Case("ulysses_attention/split_hdim", ulysses_attention_split_hdim, "ulysses_attention", "all_to_all axes",
         _DT, _ULYSSES, source="DeepSpeed-Ulysses sequence parallelism",
         note="all_to_all split_axis is head_dim (3) instead of heads (2): every device attends over a slice of head_dim"),
    # 3. all-gather matmul
    Case("allgather_matmul", allgather_matmul, None, None, _DT, _AGMM, source="jax docs collective matmul (shard_map)",
         note="rows travel to idx - 1, so step i holds the rows of device (idx + i) % n"),
    Case("allgather_matmul/wrong_direction", allgather_matmul_wrong_direction, "allgather_matmul", "ring direction",
         _DT, _AGMM, source="jax docs collective matmul (shard_map)",
         note="rows sent to idx + 1 while the output block index assumes they come from idx + 1 "
              "(on 2 devices both directions are one ring: it shows with t >= 4)"),
    Case("allgather_matmul/block_index", allgather_matmul_block_index, "allgather_matmul", "offset", _DT, _AGMM,
         source="jax docs collective matmul (shard_map)", note="output block (idx - i) % n instead of (idx + i) % n"),
    Case("allgather_matmul/no_axis_index", allgather_matmul_no_axis_index, "allgather_matmul", "offset", _DT, _AGMM,
         source="jax docs collective matmul (shard_map)",
         note="output block i, without the device's own axis_index('t')"),
    # 4. matmul reduce-scatter
    Case("matmul_reduce_scatter", matmul_reduce_scatter, None, None, _DT, _RSMM,
         source="Megatron sequence-parallel row-parallel linear, overlapped (jax docs collective matmul)",
         note="partial sums of block (idx - i - 1) % n travel to idx + 1"),
    Case("matmul_reduce_scatter/wrong_direction", matmul_reduce_scatter_wrong_direction, "matmul_reduce_scatter",
         "ring direction", _DT, _RSMM, source="Megatron sequence-parallel row-parallel linear, overlapped",
         note="accumulator sent to idx - 1 with block indices meant for sending to idx + 1 "
              "(on 2 devices both directions are one ring: it shows with t >= 4)"),
    Case("matmul_reduce_scatter/off_by_one", matmul_reduce_scatter_off_by_one, "matmul_reduce_scatter", "offset",
         _DT, _RSMM, source="Megatron sequence-parallel row-parallel linear, overlapped",
         note="block (idx - i) % n instead of (idx - i - 1) % n: each device ends with its neighbour's block"),
    # 5. ZeRO gradient reduce-scatter
    Case("zero_grad_scatter", zero_grad_scatter, None, None, _DT, _ZERO, source="ZeRO / FSDP gradient reduce-scatter",
         note="psum_scatter over ('d', 't') on dim 0, divided by the device count"),
    Case("zero_grad_scatter/axis_order", zero_grad_scatter_axis_order, "zero_grad_scatter", "scatter axis", _DT, _ZERO,
         source="ZeRO / FSDP gradient reduce-scatter",
         note="psum_scatter over ('t', 'd'): the blocks land t-major where the layout is d-major"),
    Case("zero_grad_scatter/sum", zero_grad_scatter_sum, "zero_grad_scatter", "sum for mean", _DT, _ZERO,
         source="ZeRO / FSDP gradient reduce-scatter", note="the summed per-device mean gradients, not divided by the device count"),
    Case("zero_grad_scatter/scatter_dim", zero_grad_scatter_dim, "zero_grad_scatter", "scatter axis", _DT, _ZERO,
         source="ZeRO / FSDP gradient reduce-scatter",
         note="scatter_dimension=1 (out) instead of 0 (feat); feat == out, so only the block shapes differ"),
    # 6. data-parallel SGD
    Case("dp_sgd_step", dp_sgd_step, None, None, _DT, _SGD, source="jax shard_map data-parallel training step (pmean loss)",
         note="loss psum over 't' (output columns), pmean over 'd' (batch); jax.grad inside the kernel"),
    Case("dp_sgd_step/loss_psum", dp_sgd_step_loss_psum, "dp_sgd_step", "sum for mean", _DT, _SGD,
         source="jax shard_map data-parallel training step", note="loss psum over 'd' instead of pmean: gradient scaled by the d size"),
    Case("dp_sgd_step/pmean_t", dp_sgd_step_pmean_t, "dp_sgd_step", "mean for sum", _DT, _SGD,
         source="jax shard_map data-parallel training step",
         note="per-example error pmean over 't' instead of psum (and the normaliser still counts every column)"),
    # 7. MoE with all_to_all
    Case("moe_alltoall", moe_alltoall, None, None, ("d",), _MOE, source=_MOE_SRC,
         note="top-1, capacity = local tokens (no drops); all_to_all(split 0, concat 1) and back (split 1, concat 0)"),
    Case("moe_alltoall/dispatch_concat", moe_alltoall_dispatch_concat, "moe_alltoall", "all_to_all axes", ("d",), _MOE,
         source=_MOE_SRC, note="dispatch all_to_all concat_axis=0 instead of 1; the reshape to [E/n, n*C, M] hides it"),
    Case("moe_alltoall/combine_split", moe_alltoall_combine_split, "moe_alltoall", "all_to_all axes", ("d",), _MOE,
         source=_MOE_SRC, note="combine all_to_all split_axis=0 instead of 1; the reshape to [E, C, M] hides it"),
    # 8. MoE with experts over t
    Case("moe_expert_sharded", moe_expert_sharded, None, None, _DT, _MOE,
         source="Megatron / praxis MoE with experts sharded over the tensor axis",
         note="global expert id compared with axis_index('t') * E_local + local expert"),
    Case("moe_expert_sharded/no_offset", moe_expert_sharded_no_offset, "moe_expert_sharded", "offset", _DT, _MOE,
         source="Megatron / praxis MoE with experts sharded over the tensor axis",
         note="expert id compared with the local expert index, without axis_index('t') * experts_per_shard"),
    Case("moe_expert_sharded/pmean", moe_expert_sharded_pmean, "moe_expert_sharded", "mean for sum", _DT, _MOE,
         source="Megatron / praxis MoE with experts sharded over the tensor axis",
         note="the experts' outputs combined with pmean over 't' instead of psum"),
    # 9. rotary
    Case("rope_context_parallel", rope_context_parallel, None, None, _DT, _ROPE,
         source="RoPE under context parallelism (Megatron-LM / MaxText)",
         note="position = axis_index('t') * local_len + local index"),
    Case("rope_context_parallel/no_offset", rope_context_parallel_no_offset, "rope_context_parallel", "offset",
         _DT, _ROPE, source="RoPE under context parallelism", note="positions restart at 0 on every shard of the sequence"),
    Case("rope_context_parallel/wrong_axis", rope_context_parallel_wrong_axis, "rope_context_parallel", "offset",
         _DT, _ROPE, source="RoPE under context parallelism",
         note="the shard offset uses axis_index('d') (the batch axis) instead of 't'"),
    # 10. TP MLP
    Case("tp_mlp", tp_mlp, None, None, _DT, _MLP, source="Megatron-LM column/row parallel MLP",
         note="psum of the row-parallel partial sums, then the bias"),
    Case("tp_mlp/bias_in_psum", tp_mlp_bias_in_psum, "tp_mlp", "bias in psum", _DT, _MLP,
         source="Megatron-LM RowParallelLinear", note="the replicated bias added before the psum: counted once per t-device"),
    Case("tp_mlp/pmean", tp_mlp_pmean, "tp_mlp", "mean for sum", _DT, _MLP, source="Megatron-LM RowParallelLinear",
         note="row-parallel partial sums combined with pmean instead of psum"),
    # 11. vocab-parallel cross entropy
    Case("vocab_parallel_xent", vocab_parallel_xent, None, None, _DT, _XENT, make_args=_xent_args,
         source="Megatron-LM vocab_parallel_cross_entropy", note="label offset axis_index('t') * v_local; pmean over 'd'"),
    Case("vocab_parallel_xent/no_offset", vocab_parallel_xent_no_offset, "vocab_parallel_xent", "offset", _DT, _XENT,
         make_args=_xent_args, source="Megatron-LM vocab_parallel_cross_entropy",
         note="labels compared with local vocab indices without the shard's offset"),
    Case("vocab_parallel_xent/boundary", vocab_parallel_xent_boundary, "vocab_parallel_xent", "off by one", _DT, _XENT,
         make_args=_xent_args, source="Megatron-LM vocab_parallel_cross_entropy",
         note="range check local <= v_local: a label on a shard boundary also picks the previous shard's last logit"),
    Case("vocab_parallel_xent/psum", vocab_parallel_xent_psum, "vocab_parallel_xent", "sum for mean", _DT, _XENT,
         make_args=_xent_args, source="Megatron-LM vocab_parallel_cross_entropy",
         note="the per-device mean losses summed over 'd' instead of averaged"),
    # 12. histogram
    Case("sharded_histogram", sharded_histogram, None, None, _DT, _HIST, make_args=_histogram_args,
         source="sharded bincount (bins over one axis, items over the other)",
         note="items counted into bins [axis_index('t') * B_local, +B_local), psum over 'd'"),
    Case("sharded_histogram/no_offset", sharded_histogram_no_offset, "sharded_histogram", "offset", _DT, _HIST,
         make_args=_histogram_args, source="sharded bincount", note="bin index not shifted by the shard's first bin"),
    Case("sharded_histogram/boundary", sharded_histogram_boundary, "sharded_histogram", "off by one", _DT, _HIST,
         make_args=_histogram_args, source="sharded bincount",
         note="range check local <= B_local: the next shard's first bin is also counted in this shard's last"),
    # 13. pipelines (stage axis held at 4)
    Case("gpipe", gpipe, None, None, ("stage", "d"), _PIPE, keep=_STAGES, source="GPipe (jax pipelining tutorial)",
         note="stage i sends to i + 1; the last stage's output broadcast with psum"),
    Case("gpipe/wrong_direction", gpipe_wrong_direction, "gpipe", "stage direction", ("stage", "d"), _PIPE,
         keep=_STAGES, source="GPipe (jax pipelining tutorial)",
         note="stage i sends to i - 1; invisible to a mesh comparison: the stage axis is held, every mesh gives the same zeros"),
    Case("gpipe_microbatched", gpipe_microbatched, None, None, ("stage", "d"), _PIPE, keep=_STAGES,
         source="praxis / jax pipelining tutorial microbatched GPipe",
         note="4 microbatches, circular shift to stage i + 1 after each tick, output at tick m + stages - 1"),
    Case("gpipe_microbatched/wrong_direction", gpipe_microbatched_wrong_direction, "gpipe_microbatched",
         "stage direction", ("stage", "d"), _PIPE, keep=_STAGES, source="praxis microbatched GPipe",
         note="circular shift to stage i - 1; the stage axis is held, but it shows across 'd': microbatches are cut "
              "from the local batch, so which rows get which wrong schedule depends on the d size"),
    Case("gpipe_microbatched/lag", gpipe_microbatched_lag, "gpipe_microbatched", "off by one", ("stage", "d"), _PIPE,
         keep=_STAGES, source="praxis microbatched GPipe",
         note="output collected one tick late (lag = stages, not stages - 1): the last microbatch is zeros; it shows "
              "across 'd' only because the microbatches are cut from the local batch (which rows are lost depends on d)"),
    # 14. FSDP
    Case("fsdp_matmul", fsdp_matmul, None, None, _DT, _FSDP, source="seqax FSDP x TP weight gather",
         note="all_gather over ('d', 't'), the order of the weight's layout"),
    Case("fsdp_matmul/gather_order", fsdp_matmul_gather_order, "fsdp_matmul", "gather axis order", _DT, _FSDP,
         source="seqax FSDP x TP weight gather", note="all_gather over ('t', 'd'): the rows come back in the wrong order"),
    # 15. RMSNorm
    Case("rmsnorm_tp", rmsnorm_tp, None, None, _DT, _NORM, source="Megatron-LM / MaxText RMSNorm over a sharded embedding",
         note="psum of the local sums of squares over 't', divided by the global embedding size"),
    Case("rmsnorm_tp/psum_of_means", rmsnorm_tp_psum_of_means, "rmsnorm_tp", "sum for mean", _DT, _NORM,
         source="Megatron-LM / MaxText RMSNorm", note="psum of the local means (pmean meant): t times the mean square"),
    Case("rmsnorm_tp/local", rmsnorm_tp_local, "rmsnorm_tp", "missing reduction", _DT, _NORM,
         source="Megatron-LM / MaxText RMSNorm", note="the mean square of this device's slice of the embedding only"),
    # 16. halo exchange
    Case("causal_conv_halo", causal_conv_halo, None, None, _DT, _CONV,
         source="Mamba causal_conv1d under context parallelism (halo exchange)",
         note="the last taps - 1 steps sent to device idx + 1; device 0 gets zeros"),
    Case("causal_conv_halo/wrong_direction", causal_conv_halo_wrong_direction, "causal_conv_halo", "ring direction",
         _DT, _CONV, source="Mamba causal_conv1d under context parallelism",
         note="the halo sent to idx - 1: each device pads with the end of the next device's block"),
    Case("causal_conv_halo/wraparound", causal_conv_halo_wraparound, "causal_conv_halo", "boundary", _DT, _CONV,
         source="Mamba causal_conv1d under context parallelism",
         note="a ring instead of a chain: device 0 pads with the end of the sequence; invisible to a mesh comparison: "
              "on one device the ring sends the block to itself, so every mesh computes the same circular convolution"),
]

BY_NAME: dict[str, Case] = {case.name: case for case in CASES}
