"""A sharded decoder-only transformer, trained and then decoded, with every array's layout in its type.

    python examples/transformer.py           # Explicit mesh axes (jax.make_mesh's default)
    python examples/transformer.py --auto    # Auto mesh axes

The model: token embedding, RMSNorm, causal multi-head attention with RoPE, a SwiGLU MLP and an
unembedding, on a (d=4, t=2) mesh of 8 simulated CPU devices. Each weight is a field of a pytree
dataclass annotated with its dtype, dims and sharding, and that annotation is the only place its
layout is written: the initialiser, the ``shard_map`` specs, the memory table and the checks at
call time all derive from it.

The names after ``/`` are *logical* axes, and one rule set, ``RULES``, maps them onto the mesh:

- ``dp``, the batch's axis, and ``fsdp``, one dim of every weight, are mesh axis ``d`` in
  training (data parallelism with FSDP);
- ``tp``, the heads, the MLP's hidden units, the vocabulary and the residual stream's embed
  dim, is mesh axis ``t`` (tensor parallelism);
- in ``decode`` mode, a couple of prompts are replicated (``dp -> None``) and the weights are
  gathered once for serving instead of at every layer (``fsdp -> None``).

The training step is one jitted ``typed_shard_map`` kernel in the style of seqax: inside it every
array is a local block, each weight is all-gathered over its ``fsdp`` axes just before its layer
uses it, matmuls are local (``einsum_unreduced``) and partial sums are reduced over ``tp``
(``psum_scatter``). ``jax.value_and_grad`` of the loss runs inside the kernel; the gradient of an
``all_gather`` over ``d`` is a ``psum_scatter`` over ``d``, so each gradient comes back with its
weight's own layout (checked) and the Adam update needs no communication.

After training on a synthetic repeating sequence, it greedily decodes a continuation with the
same model code and the same annotations under the decode rules: there the ``fsdp`` gathers have
nothing to gather, and the batch is replicated. It prints the rules, the loss falling, a table of
every parameter's layout in both modes, the decoded tokens, and finally makes a deliberate mistake.
"""

import argparse
import dataclasses
import math
import os
import tempfile
import time
import typing

import jax

if getattr(jax.config, "jax_num_cpu_devices") != 8:  # tests set it already; it must precede device use
    jax.config.update("jax_num_cpu_devices", 8)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P  # noqa: E402

from shardtypes import (  # noqa: E402
    AxisRules,
    AxisRulesError,
    Stacked,
    TypeCheckError,
    axis_rules,
    config,
    dims,
    explain,
    f32,
    i32,
    is_fully_sharded,
    make_partition_specs,
    make_shape_dtype_structs,
    ops,
    plan,
    plan_html,
    pytree_dataclass,
    search,
    shard,
    typechecked,
    typed_shard_map,
    verify,
)

# Logical axis -> mesh axes. Training (no mode) is FSDP over d and tensor parallelism over t; the
# decode mode overrides the names it mentions.
RULES = AxisRules(
    [
        ("dp", "d"),  # the batch
        ("fsdp", "d"),  # one dim of every weight, gathered just before use
        ("tp", "t"),  # heads, MLP hidden units, vocabulary, the residual stream's embed dim
    ],
    modes={
        "decode": [
            ("dp", None),  # a couple of prompts: replicated
            ("fsdp", None),  # serving: weights gathered once, not at every layer of every token
        ],
    },
    name="transformer",
)

# Sizes. Each sharded dim divides its mesh axes: embed/tp/fsdp = 32/8, heads/tp = 4/2, batch/dp = 8/4.
DIMS = {
    "vocab": 64,
    "embed": 32,
    "heads": 4,
    "head_dim": 8,
    "hidden": 64,
    "layers": 2,
    "seq": 16,
    "batch": 8,
}
LEARNING_RATE = 1e-2
ADAM_B1, ADAM_B2, ADAM_EPS = 0.9, 0.95, 1e-8
MAX_GRAD_NORM = 1.0
PATTERN_LENGTH = 12  # the period of the synthetic token sequence
PROMPTS, DECODE_TOKENS = 2, 8  # greedy decoding: this many prompts, this many new tokens each


# ---------------------------------------------------------------------------------------------
# Parameters: where every weight lives is part of its type.


@pytree_dataclass
class Layer:
    ln1: f32[jax.Array, b"embed/tp/fsdp"]  # small vectors are split over both axes: fully sharded
    w_q: f32[jax.Array, b"embed/fsdp heads/tp head_dim"]
    w_k: f32[jax.Array, b"embed/fsdp heads/tp head_dim"]
    w_v: f32[jax.Array, b"embed/fsdp heads/tp head_dim"]
    w_o: f32[jax.Array, b"heads/tp head_dim embed/fsdp"]
    ln2: f32[jax.Array, b"embed/tp/fsdp"]
    w_gate: f32[jax.Array, b"embed/fsdp hidden/tp"]
    w_up: f32[jax.Array, b"embed/fsdp hidden/tp"]
    w_down: f32[jax.Array, b"hidden/tp embed/fsdp"]


@pytree_dataclass
class Weights:
    embed: f32[jax.Array, b"vocab/tp embed/fsdp"]
    layers: Stacked[Layer, b"layers"]  # every Layer field with a leading 'layers' dim, for lax.scan
    ln_f: f32[jax.Array, b"embed/tp/fsdp"]
    unembed: f32[jax.Array, b"vocab/tp embed/fsdp"]


@pytree_dataclass
class State:
    weights: Weights
    adam_mu: Weights  # Adam's moments have the weights' type, so the weights' layout
    adam_nu: Weights
    step: i32[jax.Array, b""]


@pytree_dataclass
class Batch:
    inputs: i32[jax.Array, b"batch/dp seq"]
    targets: i32[jax.Array, b"batch/dp seq"]


@pytree_dataclass
class Metrics:
    loss: f32[jax.Array, b""]
    grad_norm: f32[jax.Array, b""]


@pytree_dataclass
class Rope:
    sin: f32[jax.Array, b"seq head_dim//2"]
    cos: f32[jax.Array, b"seq head_dim//2"]


RESIDUAL = f32[jax.Array, b"batch/dp seq embed/tp"]  # the residual stream between layers (shown in the report)


# ---------------------------------------------------------------------------------------------
# The model, as shard_map code. Inside a kernel each array is this device's block; annotations
# still speak in global sizes, and shardtypes checks local size x mesh axes against them. The
# same code runs under the train and the decode rules: where the rules put no mesh axis on a
# logical one, its gathers and scatters have nothing to do.


@typechecked
def rms_norm(
    x: f32[jax.Array, b"batch/dp seq embed"], scale: f32[jax.Array, b"embed"]
) -> f32[jax.Array, b"batch/dp seq embed"]:
    return x * jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + 1e-6) * scale


@typechecked
def make_rope() -> Rope:
    """Rotary position tables for the sizes bound by the caller ('seq', 'head_dim')."""
    seq, half = dims()["seq"], dims()["head_dim"] // 2
    timescale = 10_000.0 ** (jnp.arange(half, dtype=jnp.float32) / half)
    angle = jnp.arange(seq, dtype=jnp.float32)[:, None] / timescale[None, :]
    return Rope(sin=jnp.sin(angle), cos=jnp.cos(angle))


@typechecked
def apply_rope(
    x: f32[jax.Array, b"batch/dp seq heads/tp head_dim"], rope: Rope
) -> f32[jax.Array, b"batch/dp seq heads/tp head_dim"]:
    x1, x2 = jnp.split(x, 2, axis=-1)
    sin, cos = rope.sin[None, :, None, :], rope.cos[None, :, None, :]
    return jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)


@typechecked
def attention(
    nx: f32[jax.Array, b"batch/dp seq embed"], layer: Layer, rope: Rope
) -> f32[jax.Array, b"batch/dp seq embed/tp"]:
    # FSDP: gather each weight over its fsdp axes just before use; its heads stay split over tp.
    w_q = ops.all_gather("embed/fsdp heads/tp head_dim -> embed heads/tp head_dim", layer.w_q)
    w_k = ops.all_gather("embed/fsdp heads/tp head_dim -> embed heads/tp head_dim", layer.w_k)
    w_v = ops.all_gather("embed/fsdp heads/tp head_dim -> embed heads/tp head_dim", layer.w_v)
    project = "batch/dp seq embed, embed heads/tp head_dim -> batch/dp seq heads/tp head_dim"
    q = apply_rope(ops.einsum_unreduced(project, nx, w_q), rope)
    k = apply_rope(ops.einsum_unreduced(project, nx, w_k), rope)
    v = ops.einsum_unreduced(project, nx, w_v)

    scores: jax.Array = ops.einsum_unreduced(
        "batch/dp seq heads/tp head_dim, batch/dp kseq heads/tp head_dim -> batch/dp heads/tp seq kseq",
        q, k,
    ) / math.sqrt(dims()["head_dim"])
    causal = jnp.tril(jnp.ones((dims()["seq"], dims()["kseq"]), dtype=bool))
    probs: f32[jax.Array, b"batch/dp heads/tp seq kseq"] = jax.nn.softmax(jnp.where(causal, scores, -1e9), axis=-1)
    out = ops.einsum_unreduced(
        "batch/dp heads/tp seq kseq, batch/dp kseq heads/tp head_dim -> batch/dp seq heads/tp head_dim",
        probs, v,
    )
    w_o = ops.all_gather("heads/tp head_dim embed/fsdp -> heads/tp head_dim embed", layer.w_o)
    out = ops.einsum_unreduced(
        "batch/dp seq heads/tp head_dim, heads/tp head_dim embed -> batch/dp seq embed", out, w_o
    )
    # The heads were split over tp, so each device holds a partial sum: reduce it over tp,
    # leaving the residual stream's embed dim scattered over tp.
    return ops.psum_scatter("batch/dp seq embed -> batch/dp seq embed/tp", out)


@typechecked
def mlp(nx: f32[jax.Array, b"batch/dp seq embed"], layer: Layer) -> f32[jax.Array, b"batch/dp seq embed/tp"]:
    w_gate = ops.all_gather("embed/fsdp hidden/tp -> embed hidden/tp", layer.w_gate)
    w_up = ops.all_gather("embed/fsdp hidden/tp -> embed hidden/tp", layer.w_up)
    gate = ops.einsum_unreduced("batch/dp seq embed, embed hidden/tp -> batch/dp seq hidden/tp", nx, w_gate)
    up = ops.einsum_unreduced("batch/dp seq embed, embed hidden/tp -> batch/dp seq hidden/tp", nx, w_up)
    h: f32[jax.Array, b"batch/dp seq hidden/tp"] = jax.nn.silu(gate) * up  # SwiGLU
    w_down = ops.all_gather("hidden/tp embed/fsdp -> hidden/tp embed", layer.w_down)
    out = ops.einsum_unreduced("batch/dp seq hidden/tp, hidden/tp embed -> batch/dp seq embed", h, w_down)
    return ops.psum_scatter("batch/dp seq embed -> batch/dp seq embed/tp", out)


@typechecked
def block(
    x: f32[jax.Array, b"batch/dp seq embed/tp"], layer: Layer, rope: Rope
) -> f32[jax.Array, b"batch/dp seq embed/tp"]:
    """One pre-norm transformer layer. ``layer`` is the slice of the stacked weights that
    ``lax.scan`` hands over: it type-checks against ``Layer``."""
    gathered = "batch/dp seq embed/tp -> batch/dp seq embed"
    ln1 = ops.all_gather("embed/tp/fsdp -> embed", layer.ln1)
    x = x + attention(rms_norm(ops.all_gather(gathered, x), ln1), layer, rope)
    ln2 = ops.all_gather("embed/tp/fsdp -> embed", layer.ln2)
    return x + mlp(rms_norm(ops.all_gather(gathered, x), ln2), layer)


@typechecked
def forward(weights: Weights, inputs: i32[jax.Array, b"batch/dp seq"]) -> f32[jax.Array, b"batch/dp seq vocab/tp"]:
    """Next-token logits at every position; the vocabulary stays split over tp."""
    # Embedding lookup: the table's rows are split over tp; each device looks up the ids in its
    # rows (zeros elsewhere), and the psum_scatter over tp completes the sum.
    table = ops.all_gather("vocab/tp embed/fsdp -> vocab/tp embed", weights.embed)
    x = ops.index_unreduced("[vocab/tp] embed, batch/dp seq -> batch/dp seq embed", table, inputs)
    x = ops.psum_scatter("batch/dp seq embed -> batch/dp seq embed/tp", x)

    rope = make_rope()
    x, _ = jax.lax.scan(lambda x, layer: (block(x, layer, rope), None), x, weights.layers)

    ln_f = ops.all_gather("embed/tp/fsdp -> embed", weights.ln_f)
    nx = rms_norm(ops.all_gather("batch/dp seq embed/tp -> batch/dp seq embed", x), ln_f)
    unembed = ops.all_gather("vocab/tp embed/fsdp -> vocab/tp embed", weights.unembed)
    return ops.einsum_unreduced("batch/dp seq embed, vocab/tp embed -> batch/dp seq vocab/tp", nx, unembed)


def mesh_axes(annotation: typing.Any) -> tuple[str, ...]:
    """The mesh axes the active rules give a one-dim annotation, for the few raw ``jax.lax``
    collectives: ``mesh_axes(f32[jax.Array, b'vocab/tp'])`` is ``('t',)`` under RULES."""
    (entry,) = make_partition_specs(annotation)
    return () if entry is None else (entry,) if isinstance(entry, str) else tuple(entry)


@typechecked
def cross_entropy(
    logits: f32[jax.Array, b"batch/dp seq vocab/tp"], targets: i32[jax.Array, b"batch/dp seq"]
) -> f32[jax.Array, b""]:
    """Mean next-token loss over the global batch, with the vocabulary split over tp."""
    vocab_axes, batch_axes = mesh_axes(f32[jax.Array, b"vocab/tp"]), mesh_axes(f32[jax.Array, b"batch/dp"])

    def over_vocab(collective, x):  # rules that put no mesh axis on tp leave it nothing to do
        return collective(x, vocab_axes) if vocab_axes else x

    top = over_vocab(jax.lax.pmax, jnp.max(jax.lax.stop_gradient(logits), axis=-1, keepdims=True))
    shifted = logits - top
    log_z = jnp.log(over_vocab(jax.lax.psum, jnp.sum(jnp.exp(shifted), axis=-1, keepdims=True)))
    logprobs: f32[jax.Array, b"batch/dp seq vocab/tp"] = shifted - log_z
    # This device holds vocabulary rows [start, start + local): one-hot against those only.
    local = logits.shape[-1]
    start = jax.lax.axis_index(vocab_axes) * local if vocab_axes else 0
    onehot: f32[jax.Array, b"batch/dp seq vocab/tp"] = jax.nn.one_hot(targets - start, local, dtype=jnp.float32)
    picked = ops.einsum_unreduced(
        "batch/dp seq vocab/tp, batch/dp seq vocab/tp -> batch/dp seq", logprobs, onehot
    )
    picked = over_vocab(jax.lax.psum, picked)
    tokens = dims()["batch"] * dims()["seq"]
    return -jax.lax.psum(jnp.sum(picked), batch_axes) / tokens


@typechecked
def loss_fn(weights: Weights, batch: Batch) -> f32[jax.Array, b""]:
    return cross_entropy(forward(weights, batch.inputs), batch.targets)


# ---------------------------------------------------------------------------------------------
# The training step: one shard_map kernel whose specs are the annotations of its signature,
# resolved through the rules active when it is traced (train mode).


@typed_shard_map
def training_kernel(state: State, batch: Batch) -> tuple[State, Metrics]:
    # The loss is the global mean (reduced over dp and tp inside loss_fn). shard_map tracks which
    # values vary over which axes (check_vma, on by default), so autodiff inserts the right
    # reductions: the gradient of an all_gather over d is a psum_scatter over d, and that of a
    # value replicated over an axis is a psum over it. Each gradient is therefore this device's
    # block of the gradient of the global loss, laid out like its weight:
    loss, raw_grads = jax.value_and_grad(loss_fn)(state.weights, batch)
    grads: Weights = raw_grads  # checked: every gradient has its weight's own layout

    # Global gradient norm for clipping: a psum of local sums is right only because every
    # weight is fully sharded (no element is held by two devices).
    specs = jax.tree.leaves(make_partition_specs(Weights), is_leaf=lambda s: isinstance(s, P))
    assert all(is_fully_sharded(spec) for spec in specs), "clipping needs fully sharded weights"
    squares = sum(jnp.sum(g * g) for g in jax.tree.leaves(grads))
    grad_norm = jnp.sqrt(jax.lax.psum(squares, tuple(jax.sharding.get_abstract_mesh().axis_names)))
    grads = jax.tree.map(lambda g: g * jnp.minimum(1.0, MAX_GRAD_NORM / grad_norm), grads)

    # Adam: elementwise on local blocks, no communication.
    count = (state.step + 1).astype(jnp.float32)
    mu = jax.tree.map(lambda m, g: ADAM_B1 * m + (1 - ADAM_B1) * g, state.adam_mu, grads)
    nu = jax.tree.map(lambda v, g: ADAM_B2 * v + (1 - ADAM_B2) * g * g, state.adam_nu, grads)
    mu_scale, nu_scale = 1 / (1 - ADAM_B1**count), 1 / (1 - ADAM_B2**count)
    weights = jax.tree.map(
        lambda w, m, v: w - LEARNING_RATE * m * mu_scale / (jnp.sqrt(v * nu_scale) + ADAM_EPS),
        state.weights, mu, nu,
    )
    new_state = State(weights=weights, adam_mu=mu, adam_nu=nu, step=state.step + 1)
    return new_state, Metrics(loss=loss, grad_norm=grad_norm)


# jax.jit caches a trace per argument types and mesh, not per axis rules: the rules are read while
# tracing. So each jitted function here is only ever called in one mode.
compiled_kernel = jax.jit(training_kernel)


@typechecked
def train_step(state: State, batch: Batch) -> tuple[State, Metrics]:
    """The checked entry point: the dtype, shape and real sharding of every array going in and
    coming out are checked on each call, on Explicit and Auto mesh axes alike. (It runs
    outside jit on purpose: eagerly the check sees each array's actual sharding.)"""
    return compiled_kernel(state, batch)


# ---------------------------------------------------------------------------------------------
# Greedy decoding: the same forward pass, the same annotations, under the decode rules.


@typed_shard_map
def decode_kernel(weights: Weights, context: i32[jax.Array, b"batch/dp seq"]) -> f32[jax.Array, b"batch/dp vocab/tp"]:
    """The logits of the token after each context window."""
    return forward(weights, context)[:, -1]


@jax.jit
def greedy_kernel(weights: Weights, context: jax.Array) -> jax.Array:
    """The argmax of the kernel's logits, laid out as the checked ``decode_step`` promises."""
    logits = shard(decode_kernel(weights, context), f32[jax.Array, b"batch/dp vocab"])  # gather the vocabulary
    return shard(jnp.argmax(logits, axis=-1).astype(jnp.int32), i32[jax.Array, b"batch/dp"])


@typechecked
def decode_step(weights: Weights, context: i32[jax.Array, b"batch/dp seq"]) -> i32[jax.Array, b"batch/dp"]:
    """The greedy next token of each context window (checked eagerly, as ``train_step``)."""
    return greedy_kernel(weights, context)


def greedy_decode(weights: Weights, prompts: np.ndarray, steps: int, mesh) -> np.ndarray:
    """``steps`` tokens after each prompt (a window of ``seq`` tokens). The model attends to a
    window of ``seq`` tokens, so each step recomputes the forward pass over the last ``seq``
    tokens: one compiled shape, no KV cache."""
    tokens = np.asarray(prompts, dtype=np.int32)
    for _ in range(steps):
        context = shard(tokens[:, -DIMS["seq"]:], i32[jax.Array, b"batch/dp seq"], mesh)
        tokens = np.concatenate([tokens, np.asarray(decode_step(weights, context))[:, None]], axis=1)
    return tokens[:, prompts.shape[1]:]


# ---------------------------------------------------------------------------------------------
# Initialisation and data, from the annotations.


def init_scale(path: str) -> float:
    """Standard deviation of a weight's initial values: 1/sqrt(fan-in)."""
    if path == ".embed":
        return 1.0
    if path == ".unembed":
        return 0.1 / math.sqrt(DIMS["embed"])  # small, so the first predictions are near uniform
    if path.endswith(".w_o"):
        return 1 / math.sqrt(DIMS["heads"] * DIMS["head_dim"])
    if path.endswith(".w_down"):
        return 1 / math.sqrt(DIMS["hidden"])
    return 1 / math.sqrt(DIMS["embed"])


def init_state(key: jax.Array, mesh: jax.sharding.Mesh) -> State:
    """Random weights and zero moments, created inside jit and laid out by ``shard`` (under the
    active axis rules)."""
    structs = make_shape_dtype_structs(Weights, DIMS, mesh)  # shapes (and shardings) from types

    def init_leaf(path, struct, key):
        name = jax.tree_util.keystr(path)
        if ".ln" in name:
            return jnp.ones(struct.shape, struct.dtype)
        return init_scale(name) * jax.random.normal(key, struct.shape, struct.dtype)

    @jax.jit
    def init(key):
        leaves, treedef = jax.tree_util.tree_flatten_with_path(structs)
        keys = jax.random.split(key, len(leaves))
        weights = jax.tree_util.tree_unflatten(treedef, [init_leaf(p, s, k) for (p, s), k in zip(leaves, keys)])
        zeros = jax.tree.map(jnp.zeros_like, weights)
        state = State(weights=weights, adam_mu=zeros, adam_nu=zeros, step=jnp.zeros((), jnp.int32))
        return shard(state, State)

    with jax.set_mesh(mesh):
        return init(key)


def windows(rng: np.random.Generator, pattern: np.ndarray, count: int, length: int) -> np.ndarray:
    """``count`` windows of ``length`` tokens of the repeating ``pattern``, at random phases."""
    phases = rng.integers(0, len(pattern), size=(count, 1))
    return pattern[(phases + np.arange(length)[None, :]) % len(pattern)].astype(np.int32)


def make_batch(rng: np.random.Generator, pattern: np.ndarray, mesh) -> Batch:
    """Windows of a repeating token pattern at random phases; targets are the next tokens."""
    tokens = jnp.asarray(windows(rng, pattern, DIMS["batch"], DIMS["seq"] + 1))
    batch = Batch(inputs=tokens[:, :-1], targets=tokens[:, 1:])
    return shard(batch, Batch, mesh)  # host data onto the mesh, as annotated


def continuation(pattern: np.ndarray, prompts: np.ndarray, steps: int) -> np.ndarray:
    """What follows each prompt in the repeating pattern."""
    where = {int(token): i for i, token in enumerate(pattern)}
    last = np.array([where[int(t)] for t in prompts[:, -1]])
    return pattern[(last[:, None] + 1 + np.arange(steps)[None, :]) % len(pattern)].astype(np.int32)


# ---------------------------------------------------------------------------------------------
# Reporting.


def annotations_by_path(cls: type, prefix: str = "") -> dict[str, typing.Any]:
    """Path (as ``jax.tree_util.keystr`` writes it) -> the array annotation of each field."""
    out = {}
    for name, annotation in typing.get_type_hints(cls).items():
        if isinstance(annotation, type) and dataclasses.is_dataclass(annotation):
            out.update(annotations_by_path(annotation, f"{prefix}.{name}"))
        else:
            out[f"{prefix}.{name}"] = annotation
    return out


def short_text(annotation: typing.Any) -> str:
    """``f32['batch/dp seq']``: an annotation class's dtype and shape string, as a table shows it."""
    return f"{annotation.dtype_class.__name__}[{annotation.shape_string.decode()!r}]"


def parameter_table(mesh) -> list[tuple[str, str, str, str, str, int]]:
    """(path, logical annotation, PartitionSpec in train mode, PartitionSpec in decode mode,
    global shape, bytes per device in train mode) for every weight."""
    annotations = annotations_by_path(Weights)
    structs = {}
    for mode in (None, "decode"):
        with axis_rules(RULES, mode=mode):
            tree = make_shape_dtype_structs(Weights, DIMS, mesh)
        structs[mode] = jax.tree_util.tree_flatten_with_path(tree)[0]
    rows = []
    for (path, train), (_, decode) in zip(structs[None], structs["decode"]):
        key = jax.tree_util.keystr(path)
        annotation = short_text(annotations[key])
        nbytes = math.prod(train.sharding.shard_shape(train.shape)) * train.dtype.itemsize
        rows.append(("weights" + key, annotation, str(train.sharding.spec), str(decode.sharding.spec),
                     str(train.shape), nbytes))
    return rows


def print_parameter_table(mesh) -> None:
    rows = parameter_table(mesh)
    header = ("path", "annotation (logical axes)", "train spec", "decode spec", "shape", "bytes/device")
    widths = [max(len(str(r[i])) for r in rows + [header]) for i in range(len(header))]
    line = "  ".join(f"{{:<{w}}}" for w in widths[:-1]) + f"  {{:>{widths[-1]}}}"
    print(line.format(*header))
    for row in rows:
        print(line.format(*row))
    total = sum(r[-1] for r in rows)
    print(f"weights in training: {total} bytes per device ({total * len(mesh.devices.flat)} in all); "
          f"with Adam's two moments: {3 * total} bytes per device")


def print_rules(mesh) -> None:
    train, decode = RULES.table(), RULES.table("decode")

    def fmt(targets) -> str:
        return " or ".join("None" if not t else "/".join(t) for t in targets)

    print(f"axis rules {RULES.name!r}, logical axis -> mesh axes:")
    for name in train:
        print(f"  {name:<5} train: {fmt(train[name]):<5} decode: {fmt(decode[name])}")
    # explain() says which rule each dim took; one layer weight as an example.
    with axis_rules(RULES):
        story = explain(Weights, mesh, DIMS).splitlines()
    first = next(i for i, text in enumerate(story) if text.startswith("Weights.layers.w_q:"))
    print("explain(Weights, mesh, DIMS) in train mode, for one layer weight:")
    print("\n".join("  " + text for text in story[first: first + 5]))


def layout_report(mesh) -> dict[str, tuple[str, str]]:
    """The PartitionSpecs of an activation, the decode context and a weight in train and decode
    mode, by what they are and their annotation."""
    report: dict[str, tuple[str, str]] = {}
    for what, annotation in [("residual stream", RESIDUAL), ("decode context", i32[jax.Array, b"batch/dp seq"]),
                             ("layer weight w_q", annotations_by_path(Weights)[".layers.w_q"])]:
        with axis_rules(RULES):
            train = str(make_partition_specs(annotation))
        with axis_rules(RULES, mode="decode"):
            decode = str(make_partition_specs(annotation))
        report[f"{what} {annotation.dtype_class.__name__}[{annotation.shape_string!r}]"] = (train, decode)
    return report


# ---------------------------------------------------------------------------------------------
# A deliberate mistake.


def wrongly_sharded(state: State, mesh) -> State:
    """``state`` with one stacked layer weight, ``w_up``, laid out over the wrong mesh axes: its
    embed dim over t and its hidden dim over d (the train rules say embed/fsdp hidden/tp is
    P(None, 'd', 't'))."""
    w_up = jax.device_put(state.weights.layers.w_up, NamedSharding(mesh, P(None, "t", "d")))
    layers = dataclasses.replace(state.weights.layers, w_up=w_up)
    return dataclasses.replace(state, weights=dataclasses.replace(state.weights, layers=layers))


def deliberate_mistake(state: State, batch: Batch, mesh) -> str:
    """Passes a wrongly sharded weight to the checked training step; returns the error."""
    try:
        with jax.set_mesh(mesh):
            train_step(wrongly_sharded(state, mesh), batch)
    except TypeCheckError as e:
        return str(e)
    raise AssertionError("the wrongly sharded weight was not caught")


# ---------------------------------------------------------------------------------------------


# ---------------------------------------------------------------------------------------------
# At scale: the same training step, checked abstractly for 4,096 chips with 70B-class sizes.

LARGE = {"vocab": 128256, "embed": 8192, "heads": 64, "head_dim": 128, "hidden": 28672,
         "layers": 80, "seq": 4096, "batch": 256}
LARGE_MESH = {"d": 64, "t": 64}


@typed_shard_map
def training_kernel_with_a_mistake(state: State, batch: Batch) -> tuple[State, Metrics]:
    """A copy of the training step's start with one wrong annotation, for verify to find."""
    loss, grads = jax.value_and_grad(loss_fn)(state.weights, batch)
    # (An annotated local is checked: unused otherwise.)
    w_down: f32[jax.Array, b"layers hidden embed/fsdp"] = grads.layers.w_down  # noqa: F841  # wrong: tp splits hidden
    return state, Metrics(loss=loss, grad_norm=loss)


def at_scale() -> dict:
    """verify and plan of the training step on a 64x64 abstract mesh: no device is used."""
    with axis_rules(RULES):
        start = time.perf_counter()
        report = verify(training_kernel, LARGE_MESH, LARGE)
        seconds = time.perf_counter() - start
        weights = plan(Weights, LARGE_MESH, LARGE)
        state = plan(State, LARGE_MESH, LARGE)
        wrong = verify(training_kernel_with_a_mistake, LARGE_MESH, LARGE)
    with axis_rules(RULES, mode="decode"):
        decode = plan(Weights, LARGE_MESH, LARGE)
    return {"report": report, "seconds": seconds, "weights": weights, "state": state, "wrong": wrong,
            "decode": decode}


# Two layouts of the same step compared, as a team choosing one would: FSDP x TP (RULES: weights
# split over d and gathered per layer, heads and hidden units split over t) against pure FSDP
# (every weight and the batch split over all 4,096 chips, no tensor parallelism). Pure FSDP
# needs a batch that splits over every chip, so both are compared at 4,096 sequences of 1,024
# tokens (4M tokens a step), with the step's time per chip on H100s: on a 64x64 mesh t spans 8
# nodes of 8 GPUs, so by default both axes run over the network (docs/chips.md).
FSDP_RULES = AxisRules([("dp", ("d", "t")), ("fsdp", ("d", "t")), ("tp", None)], name="fsdp")
COMPARED = {**LARGE, "batch": 4096, "seq": 1024}
CHIP = "h100"


def layouts_at_scale(chip: str = CHIP) -> dict:
    """The training step verified under each rule set on the 64x64 abstract mesh, with its time
    per step on ``chip`` (a lower bound at peak rates): layout name -> VerifyReport."""
    reports = {}
    for name, rules in (("fsdp x tp", RULES), ("fsdp", FSDP_RULES)):
        with axis_rules(rules):
            reports[name] = verify(training_kernel, LARGE_MESH, COMPARED, chip=chip)
    return reports


# Which layout should the step use? Every shape of 4,096 chips over (d, t), under three rule sets:
# FSDP x TP (RULES), pure FSDP, and FSDP x TP with the axes' roles swapped (tensor parallelism over
# d, the first axis, whose chips are not in one node by default), each verified and ranked by its
# time per step on H100s, those whose state and activations do not fit in 80 GB marked. At
# 512K tokens a step (4,096 sequences of 128): the demo's step keeps every layer's activations for
# the backward pass (no rematerialization), so more tokens per chip do not fit.
TP_OVER_D = AxisRules([("dp", "t"), ("fsdp", "t"), ("tp", "d")], name="tp over d")
SEARCHED = {**LARGE, "batch": 4096, "seq": 128}


def search_at_scale(chip: str = CHIP) -> typing.Any:
    """The training step searched over every (d, t) with d x t = 4,096 and three rule sets: a
    SearchReport, best first."""
    return search(training_kernel, 4096, SEARCHED, axes=("d", "t"),
                  rules={"fsdp x tp": RULES, "fsdp": FSDP_RULES, "tp over d": TP_OVER_D}, chip=chip, hbm=chip)


def _auto_check_cost(state: State, batch: Batch, calls: int = 10) -> str:
    """On Auto axes the step's arguments are checked while XLA compiles it; a cached call runs
    no Python of shardtypes (it enters the same Python frames as the unchecked step: only the
    output dataclasses' __init__) and costs what the unchecked step costs."""
    import sys

    def measure() -> tuple[float, int]:
        jax.block_until_ready(compiled_kernel(state, batch))  # compiled (and checked) once
        times = []
        for _ in range(calls):
            begin = time.perf_counter()
            jax.block_until_ready(compiled_kernel(state, batch))
            times.append(time.perf_counter() - begin)
        frames = []
        sys.setprofile(lambda frame, event, arg: frames.append(frame) if event == "call" else None)
        try:
            compiled_kernel(state, batch)
        finally:
            sys.setprofile(None)
        return min(times), len(frames)

    checked, checked_frames = measure()
    config.auto_sharding_check = "off"
    try:
        unchecked, unchecked_frames = measure()
    finally:
        config.auto_sharding_check = "compile"
    return (f"Auto axes, a cached call of the step: {checked * 1e3:.1f} ms checked, "
            f"{unchecked * 1e3:.1f} ms with the check off (ratio {checked / unchecked:.2f}); "
            f"{checked_frames} Python frames entered checked, {unchecked_frames} unchecked")


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=(__doc__ or "").partition("\n")[0])
    parser.add_argument("--auto", action="store_true", help="use Auto mesh axes")
    parser.add_argument("--steps", type=int, default=40, help="training steps")
    parser.add_argument("--every", type=int, default=5, help="print the loss every this many steps")
    parser.add_argument("--no-search", action="store_true",
                        help="leave out the search over layouts at 4,096 chips (about 30 s on two cores)")
    parser.add_argument("--html", default=os.path.join(tempfile.gettempdir(), "shardtypes-demo-plan.html"),
                        help="where to write the 64x64 plan as a page (default: %(default)s)")
    args = parser.parse_args(argv)

    kind = AxisType.Auto if args.auto else AxisType.Explicit
    mesh = jax.make_mesh((4, 2), ("d", "t"), axis_types=(kind, kind))
    print(f"mesh: {dict(mesh.shape)} with {kind.name} axes on {len(jax.devices())} CPU devices")
    print("dims: " + ", ".join(f"{k}={v}" for k, v in DIMS.items()) + "\n")
    print_rules(mesh)
    print()
    print_parameter_table(mesh)

    rng = np.random.default_rng(0)
    pattern = rng.permutation(DIMS["vocab"])[:PATTERN_LENGTH]
    print(f"\ntraining on windows of a repeating sequence of {PATTERN_LENGTH} tokens "
          f"(chance loss ln({DIMS['vocab']}) = {math.log(DIMS['vocab']):.2f}), under the train rules")

    losses = []
    with axis_rules(RULES, mode=None), jax.set_mesh(mesh):  # train mode
        state = init_state(jax.random.key(0), mesh)
        start = compiled = time.perf_counter()
        for step in range(args.steps):
            state, metrics = train_step(state, make_batch(rng, pattern, mesh))
            losses.append(float(metrics.loss))
            if step == 0:
                compiled = time.perf_counter()
            if step % args.every == 0 or step == args.steps - 1:
                grad_norm = float(metrics.grad_norm)
                print(f"  step {step:3d}  loss {losses[-1]:.4f}  grad norm {grad_norm:.3f}")
        end = time.perf_counter()
    print(f"loss {losses[0]:.3f} -> {losses[-1]:.3f} in {args.steps} steps "
          f"({compiled - start:.1f} s first step with compilation, "
          f"{(end - compiled) / max(args.steps - 1, 1) * 1e3:.0f} ms per step after)")
    if kind == AxisType.Auto:
        with axis_rules(RULES, mode=None), jax.set_mesh(mesh):
            print(_auto_check_cost(state, make_batch(rng, pattern, mesh)))

    print(f"\nGreedy decoding of {DECODE_TOKENS} tokens after {PROMPTS} prompts under the decode rules: "
          "the same model code and annotations, other layouts:")
    layouts = layout_report(mesh)
    for what, (train, decode) in layouts.items():
        print(f"  {what}: train {train}, decode {decode}")
    prompts = windows(rng, pattern, PROMPTS, DIMS["seq"])
    with axis_rules(RULES):  # the train rules cannot lay out two prompts over d=4, and say so:
        try:
            make_shape_dtype_structs(i32[jax.Array, b"batch/dp seq"], {"batch": PROMPTS, "seq": DIMS["seq"]}, mesh)
        except AxisRulesError as e:
            print(f"  (the train rules would not do: AxisRulesError: {e})")
    with axis_rules(RULES, mode="decode"), jax.set_mesh(mesh):
        weights = shard(state.weights, Weights)  # re-laid out for serving: no fsdp axis
        start = time.perf_counter()
        decoded = greedy_decode(weights, prompts, DECODE_TOKENS, mesh)
        elapsed = time.perf_counter() - start
    expected = continuation(pattern, prompts, DECODE_TOKENS)
    for prompt, got, want in zip(prompts, decoded, expected):
        verdict = "continues the pattern" if np.array_equal(got, want) else f"expected {_words(want)}"
        print(f"  ... {_words(prompt[-6:])} -> {_words(got)}  ({verdict})")
    print(f"decoded {DECODE_TOKENS} tokens in {elapsed:.1f} s (one compilation)")

    mistake = None
    if config.checks:
        print("\nA deliberate mistake: layer weight w_up laid out as P(None, 't', 'd') instead of "
              "embed/fsdp hidden/tp")
        with axis_rules(RULES):
            mistake = deliberate_mistake(state, make_batch(rng, pattern, mesh), mesh)
        print(f"  TypeCheckError: {mistake}")
    else:  # SHARDTYPES_DISABLE=1: the same program, unchecked (verify below checks regardless)
        print("\nChecks are off (SHARDTYPES_DISABLE=1), so the deliberate mistake is left out")

    print("\nAt scale: the same training step verified on a 64x64 abstract mesh (4,096 chips) with "
          "70B-class sizes, on this machine, without compiling:")
    scale = at_scale()
    head, *rest = str(scale["report"]).splitlines()
    print("\n".join([f"  {head}  ({scale['seconds']:.1f} s)", *(f"  {line}" for line in rest)]))
    print("\n" + "\n".join("  " + line for line in str(scale["weights"]).splitlines()))
    state_plan = scale["state"]
    print(f"  with Adam's two moments: {state_plan.bytes_per_device / 2**30:.2f} GiB per chip "
          f"({state_plan.global_bytes / 2**40:.2f} TiB in all)")
    print("\n  and a copy of the step with one wrong annotation:")
    print("\n".join("  " + line for line in str(scale["wrong"]).splitlines()))
    # Training holds the state (weights and Adam's two moments); decoding the weights alone, whose
    # rows take the paths they have in State so that the page sets each weight's two layouts side
    # by side.
    decode = scale["decode"]
    decode = dataclasses.replace(decode, rows=tuple(
        dataclasses.replace(row, path="State.weights" + row.path.removeprefix("Weights")) for row in decode.rows))
    page = plan_html({"train": state_plan, "decode": decode}, "h100",
                     activations={"train": scale["report"].activations},
                     title="The demo's training state and decode weights at 70B-class sizes on 64x64 chips")
    with open(args.html, "w", encoding="utf-8") as f:
        f.write(page)
    print(f"\nThe plan as a page (train: weights and Adam's moments; decode: the weights; side by side, "
          f"against an H100's memory): {args.html}")

    print(f"\nTwo layouts of the step at {COMPARED['batch']:,} x {COMPARED['seq']:,} tokens, their time per step "
          f"on {CHIP} (a lower bound per chip: peak rates, no latency; perfect overlap / none):")
    compared = layouts_at_scale()
    for name, report in compared.items():
        t = report.step_time
        print(f"  {name:9s}  {t.perfect_overlap:.2f} s / {t.no_overlap:.2f} s: compute {t.compute:.2f} s, memory "
              f"{t.memory:.2f} s, communication "
              + ", ".join(f"{' x '.join(axes)} {sec:.2f} s" for axes, sec in t.communication.items()))
        print(f"             bound by {t.bound}")
    stem, ext = os.path.splitext(args.html)
    layouts_page = f"{stem}-layouts{ext or '.html'}"
    with open(layouts_page, "w", encoding="utf-8") as f:
        f.write(plan_html(compared, CHIP, title=f"FSDP x TP against pure FSDP on {CHIP}, 64x64 chips"))
    print(f"The two side by side as a page (memory and time per step): {layouts_page}")
    searched = None
    if not args.no_search:
        print(f"\nWhich layout? Every mesh shape of 4,096 chips over (d, t) under three rule sets, at "
              f"{SEARCHED['batch']:,} x {SEARCHED['seq']} tokens, ranked by the step's time on {CHIP}:")
        start = time.perf_counter()
        searched = search_at_scale()
        seconds = time.perf_counter() - start
        lines = str(searched).splitlines()
        best_line = lines[len(searched.candidates) + 2]
        shown = [*lines[:12], f"  ... ({len(searched.candidates) - 10} more ranked)", best_line]
        print("\n".join("  " + line for line in shown))
        reasons = sorted({"a dim its mesh axes do not divide" if "does not divide" in r.reason else r.reason
                          for r in searched.rejected})
        print(f"  ({len(searched.rejected)} layouts rejected ({'; '.join(reasons)}); "
              f"{searched.considered} verified in {seconds:.0f} s)")
    return {"losses": losses, "decoded": decoded, "expected": expected, "layouts": layouts,
            "mistake": mistake, "at_scale": scale, "compared": compared, "layouts_page": layouts_page,
            "searched": searched}


def _words(tokens) -> str:
    return " ".join(str(int(t)) for t in tokens)


if __name__ == "__main__":
    main()
