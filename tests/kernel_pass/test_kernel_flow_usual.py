"""No false errors from the kernel pass (checking/kernel_pass/): kernels written the way
people write them (vocab-parallel cross entropy, layer norm, a tensor-parallel MLP and attention,
RMSNorm over a split embedding, a scan over stacked layers, remat, a gradient step inside the
kernel) run with check_vma on and off, eager and jitted, and give the numbers of the same
computation without shard_map.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from shardtypes import f32, i32, typed_shard_map

from conftest import AXIS_TYPES, make_mesh, put

KINDS = sorted(AXIS_TYPES)
RNG = np.random.default_rng(5)
MODES = [(True, True), (True, False), (False, True), (False, False)]
MODE_IDS = ["jit-vma", "jit-novma", "eager-vma", "eager-novma"]


def normal(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


# Vocab-parallel cross entropy: max, sum and the picked logit each reduced over 't'.
def xent(logits: f32[b"b/d v/t"], labels: i32[b"b/d"]) -> f32[b""]:
    m = jax.lax.pmax(jnp.max(logits, axis=-1), "t")
    z = logits - m[:, None]
    s = jax.lax.psum(jnp.sum(jnp.exp(z), axis=-1), "t")
    v_local = logits.shape[-1]
    start = jax.lax.axis_index("t") * v_local
    local = labels - start
    ok = (local >= 0) & (local < v_local)
    picked = jnp.take_along_axis(z, jnp.clip(local, 0, v_local - 1)[:, None], axis=-1)[:, 0]
    picked = jax.lax.psum(jnp.where(ok, picked, 0.0), "t")
    loss = jnp.mean(jnp.log(s) - picked)
    return jax.lax.pmean(loss, "d")

# Layer norm over an embedding that is not split.
def layernorm(x: f32[b"b/d e"], g: f32[b"e"]) -> f32[b"b/d e"]:
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) * jax.lax.rsqrt(var + 1e-5) * g

# A tensor-parallel MLP: the second matmul's partial sum paid by psum.
def mlp(x: f32[b"b/d e"], w1: f32[b"e h/t"], w2: f32[b"h/t e"]) -> f32[b"b/d e"]:
    h = jax.nn.gelu(x @ w1)
    return jax.lax.psum(h @ w2, "t")

# A gradient step inside the kernel.
def sgd(x: f32[b"b/d e"], w: f32[b"e h"]) -> f32[b"e h"]:
    g = jax.grad(lambda w: jnp.mean(jnp.tanh(x @ w) ** 2))(w)
    return w - 0.1 * jax.lax.pmean(g, "d")

# RMSNorm over an embedding split over 't': the sum of squares psummed.
def rmsnorm_tp(x: f32[b"b/d e/t"]) -> f32[b"b/d e/t"]:
    ss = jax.lax.psum(jnp.sum(x * x, -1, keepdims=True), "t")
    return x * jax.lax.rsqrt(ss / (x.shape[-1] * 2) + 1e-6)

# Attention with heads split over 't'; the output projection's partial sum paid.
def attn(q: f32[b"b/d h/t s k"], kk: f32[b"b/d h/t s k"], v: f32[b"b/d h/t s k"], wo: f32[b"h/t k e"]) -> f32[b"b/d s e"]:
    s = jnp.einsum("bhqk,bhsk->bhqs", q, kk) / 4.0
    p = jax.nn.softmax(s, axis=-1)
    o = jnp.einsum("bhqs,bhsk->bhqk", p, v)
    return jax.lax.psum(jnp.einsum("bhqk,hke->bqe", o, wo), "t")

# A scan over stacked layers.
def stack(x: f32[b"b/d e"], ws: f32[b"l e e2"]) -> f32[b"b/d e2"]:
    def body(h, w):
        return jnp.tanh(h @ w), None
    h, _ = jax.lax.scan(body, x, ws)
    return h

# A rematerialised block.
def remat_block(x: f32[b"b/d e"], w: f32[b"e e"]) -> f32[b"b/d e"]:
    return jax.checkpoint(lambda x: jnp.tanh(x @ w))(x)


def reference_xent(logits, labels):
    z = logits - logits.max(-1, keepdims=True)
    return np.mean(np.log(np.exp(z).sum(-1)) - z[np.arange(len(labels)), labels])


def gelu(x):
    return np.asarray(jax.nn.gelu(jnp.asarray(x)))


LOGITS, LABELS = normal(8, 16), RNG.integers(0, 16, 8).astype(np.int32)
X, G, W1, W2, W, WS = normal(8, 8), normal(8), normal(8, 16), normal(16, 8), normal(8, 8), normal(3, 8, 8)
Q, K, V = (normal(4, 2, 6, 4) for _ in range(3))
WO = normal(2, 4, 8)


def softmax(s):
    e = np.exp(s - s.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def stacked(x):
    for w in WS:
        x = np.tanh(x @ w)
    return x


CASES = {
    "xent": (xent, lambda m: (put(m, LOGITS, "d", "t"), put(m, LABELS, "d")), lambda: reference_xent(LOGITS, LABELS)),
    "layernorm": (layernorm, lambda m: (put(m, X, "d"), put(m, G)),
                  lambda: (X - X.mean(-1, keepdims=True)) / np.sqrt(X.var(-1, keepdims=True) + 1e-5) * G),
    "mlp": (mlp, lambda m: (put(m, X, "d"), put(m, W1, None, "t"), put(m, W2, "t")), lambda: gelu(X @ W1) @ W2),
    "rmsnorm_tp": (rmsnorm_tp, lambda m: (put(m, X, "d", "t"),),
                   lambda: X / np.sqrt((X * X).mean(-1, keepdims=True) + 1e-6)),
    "attn": (attn, lambda m: (put(m, Q, "d", "t"), put(m, K, "d", "t"), put(m, V, "d", "t"), put(m, WO, "t")),
             lambda: np.einsum("bhqk,hke->bqe", softmax(np.einsum("bhqk,bhsk->bhqs", Q, K) / 4.0) @ V, WO)),
    "stack": (stack, lambda m: (put(m, X, "d"), put(m, WS)), lambda: stacked(X)),
    "remat": (remat_block, lambda m: (put(m, X, "d"), put(m, W)), lambda: np.tanh(X @ W)),
}


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("jitted,check_vma", MODES, ids=MODE_IDS)
@pytest.mark.parametrize("name", sorted(CASES))
def test_a_kernel_written_as_usual_passes_and_computes_the_same(kind, jitted, check_vma, name):
    f, args, reference = CASES[name]
    mesh = make_mesh(kind, (4, 2), ("d", "t"))
    with jax.set_mesh(mesh):
        kernel = typed_shard_map(f, check_vma=check_vma)
        out = (jax.jit(kernel) if jitted else kernel)(*args(mesh))
    np.testing.assert_allclose(np.asarray(out), reference(), rtol=2e-4, atol=2e-4)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("jitted", [True, False], ids=["jit", "eager"])
def test_a_gradient_step_inside_a_kernel(kind, jitted):
    """With check_vma on, JAX sums the gradient of the replicated weight over the batch blocks
    itself (the transpose of pvary); the kernel's pmean of equal values changes nothing, and the
    pass sees every sum paid: the step is w - 0.1 * (sum of the 4 blocks' gradients)."""
    mesh = make_mesh(kind, (4, 2), ("d", "t"))
    w = normal(8, 4)
    with jax.set_mesh(mesh):
        kernel = typed_shard_map(sgd)
        out = (jax.jit(kernel) if jitted else kernel)(put(mesh, X, "d"), put(mesh, w))
    grad = jax.grad(lambda w: jnp.mean(jnp.tanh(jnp.asarray(X) @ w) ** 2))(jnp.asarray(w))
    np.testing.assert_allclose(np.asarray(out), w - 0.1 * 4 * np.asarray(grad), rtol=2e-4, atol=2e-4)
