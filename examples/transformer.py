"""A sharded decoder-only transformer, trained, with every array's layout in its type.

    python examples/transformer.py           # Explicit mesh axes (jax.make_mesh's default)
    python examples/transformer.py --auto    # Auto mesh axes

The model: token embedding, RMSNorm, causal multi-head attention with RoPE, a SwiGLU MLP and an
unembedding, on a (d=4, t=2) mesh of 8 simulated CPU devices. Mesh axis ``d`` carries FSDP (the
batch, and one dim of every weight), axis ``t`` tensor parallelism (heads, MLP hidden units,
vocabulary). Each weight is a field of a pytree dataclass annotated with its dtype, dims and
sharding, and that annotation is the only place its layout is written: the initialiser, the
``shard_map`` specs of the training step, the memory table and the checks at call time all derive
from it.

The training step is one jitted ``typed_shard_map`` kernel in the style of seqax: inside it every
array is a local block, each weight is all-gathered over ``d`` just before its layer uses it,
matmuls are local (``einsum_unreduced``) and partial sums are reduced over ``t``
(``psum_scatter``). ``jax.value_and_grad`` of the loss runs inside the kernel; the gradient of an
``all_gather`` over ``d`` is a ``psum_scatter`` over ``d``, so each gradient comes back with its
weight's own layout (checked) and the Adam update needs no communication.

It trains on a synthetic repeating sequence, prints the loss falling, a table of every parameter's
layout and per-device bytes, and finally makes a deliberate mistake.
"""

import argparse
import dataclasses
import math
import time
import typing

import jax

if jax.config.jax_num_cpu_devices != 8:  # tests set it already; it must precede device use
    jax.config.update("jax_num_cpu_devices", 8)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P  # noqa: E402

from shardtypes import (  # noqa: E402
    Array,
    TypeCheckError,
    dims,
    f32,
    i32,
    is_fully_sharded,
    make_partition_specs,
    make_shape_dtype_structs,
    ops,
    pytree_dataclass,
    shard,
    typechecked,
    typed_shard_map,
)

# Sizes. Each sharded dim divides its mesh axes: embed/t/d = 32/8, heads/t = 4/2, batch/d = 8/4.
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


# ---------------------------------------------------------------------------------------------
# Parameters: where every weight lives is part of its type.


@pytree_dataclass
class Layer:
    ln1: f32[b"embed/t/d"]  # small vectors are split over both axes: fully sharded
    w_q: f32[b"embed/d heads/t head_dim"]
    w_k: f32[b"embed/d heads/t head_dim"]
    w_v: f32[b"embed/d heads/t head_dim"]
    w_o: f32[b"heads/t head_dim embed/d"]
    ln2: f32[b"embed/t/d"]
    w_gate: f32[b"embed/d hidden/t"]
    w_up: f32[b"embed/d hidden/t"]
    w_down: f32[b"hidden/t embed/d"]


@pytree_dataclass
class Weights:
    embed: f32[b"vocab/t embed/d"]
    layers: Array["layers", Layer]  # every Layer field with a leading 'layers' dim, for lax.scan
    ln_f: f32[b"embed/t/d"]
    unembed: f32[b"vocab/t embed/d"]


@pytree_dataclass
class State:
    weights: Weights
    adam_mu: Weights  # Adam's moments have the weights' type, so the weights' layout
    adam_nu: Weights
    step: i32[b""]


@pytree_dataclass
class Batch:
    inputs: i32[b"batch/d seq"]
    targets: i32[b"batch/d seq"]


@pytree_dataclass
class Metrics:
    loss: f32[b""]
    grad_norm: f32[b""]


@pytree_dataclass
class Rope:
    sin: f32[b"seq head_dim//2"]
    cos: f32[b"seq head_dim//2"]


# ---------------------------------------------------------------------------------------------
# The model, as shard_map code. Inside the kernel each array is this device's block; annotations
# still speak in global sizes, and shardtypes checks local size x mesh axes against them.


@typechecked
def rms_norm(x: f32[b"batch/d seq embed"], scale: f32[b"embed"]) -> f32[b"batch/d seq embed"]:
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
    x: f32[b"batch/d seq heads/t head_dim"], rope: Rope
) -> f32[b"batch/d seq heads/t head_dim"]:
    x1, x2 = jnp.split(x, 2, axis=-1)
    sin, cos = rope.sin[None, :, None, :], rope.cos[None, :, None, :]
    return jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)


@typechecked
def attention(nx: f32[b"batch/d seq embed"], layer: Layer, rope: Rope) -> f32[b"batch/d seq embed/t"]:
    # FSDP: gather each weight over d just before use; its heads stay split over t.
    w_q = ops.all_gather("embed/d heads/t head_dim -> embed heads/t head_dim", layer.w_q)
    w_k = ops.all_gather("embed/d heads/t head_dim -> embed heads/t head_dim", layer.w_k)
    w_v = ops.all_gather("embed/d heads/t head_dim -> embed heads/t head_dim", layer.w_v)
    project = "batch/d seq embed, embed heads/t head_dim -> batch/d seq heads/t head_dim"
    q = apply_rope(ops.einsum_unreduced(project, nx, w_q), rope)
    k = apply_rope(ops.einsum_unreduced(project, nx, w_k), rope)
    v = ops.einsum_unreduced(project, nx, w_v)

    scores = ops.einsum_unreduced(
        "batch/d seq heads/t head_dim, batch/d kseq heads/t head_dim -> batch/d heads/t seq kseq", q, k
    ) / math.sqrt(dims()["head_dim"])
    causal = jnp.tril(jnp.ones((dims()["seq"], dims()["kseq"]), dtype=bool))
    probs: f32[b"batch/d heads/t seq kseq"] = jax.nn.softmax(jnp.where(causal, scores, -1e9), axis=-1)
    out = ops.einsum_unreduced(
        "batch/d heads/t seq kseq, batch/d kseq heads/t head_dim -> batch/d seq heads/t head_dim",
        probs, v,
    )
    w_o = ops.all_gather("heads/t head_dim embed/d -> heads/t head_dim embed", layer.w_o)
    out = ops.einsum_unreduced(
        "batch/d seq heads/t head_dim, heads/t head_dim embed -> batch/d seq embed", out, w_o
    )
    # The heads were split over t, so each device holds a partial sum: reduce it over t, leaving
    # the residual stream's embed dim scattered over t.
    return ops.psum_scatter("batch/d seq embed -> batch/d seq embed/t", out)


@typechecked
def mlp(nx: f32[b"batch/d seq embed"], layer: Layer) -> f32[b"batch/d seq embed/t"]:
    w_gate = ops.all_gather("embed/d hidden/t -> embed hidden/t", layer.w_gate)
    w_up = ops.all_gather("embed/d hidden/t -> embed hidden/t", layer.w_up)
    gate = ops.einsum_unreduced("batch/d seq embed, embed hidden/t -> batch/d seq hidden/t", nx, w_gate)
    up = ops.einsum_unreduced("batch/d seq embed, embed hidden/t -> batch/d seq hidden/t", nx, w_up)
    h: f32[b"batch/d seq hidden/t"] = jax.nn.silu(gate) * up  # SwiGLU
    w_down = ops.all_gather("hidden/t embed/d -> hidden/t embed", layer.w_down)
    out = ops.einsum_unreduced("batch/d seq hidden/t, hidden/t embed -> batch/d seq embed", h, w_down)
    return ops.psum_scatter("batch/d seq embed -> batch/d seq embed/t", out)


@typechecked
def block(x: f32[b"batch/d seq embed/t"], layer: Layer, rope: Rope) -> f32[b"batch/d seq embed/t"]:
    """One pre-norm transformer layer. ``layer`` is the slice of the stacked weights that
    ``lax.scan`` hands over: it type-checks against ``Layer``."""
    gathered = "batch/d seq embed/t -> batch/d seq embed"
    ln1 = ops.all_gather("embed/t/d -> embed", layer.ln1)
    x = x + attention(rms_norm(ops.all_gather(gathered, x), ln1), layer, rope)
    ln2 = ops.all_gather("embed/t/d -> embed", layer.ln2)
    return x + mlp(rms_norm(ops.all_gather(gathered, x), ln2), layer)


@typechecked
def cross_entropy(logits: f32[b"batch/d seq vocab/t"], targets: i32[b"batch/d seq"]) -> f32[b""]:
    """Mean next-token loss over the global batch, with the vocabulary split over t."""
    top = jax.lax.pmax(jnp.max(jax.lax.stop_gradient(logits), axis=-1, keepdims=True), "t")
    shifted = logits - top
    log_z = jnp.log(jax.lax.psum(jnp.sum(jnp.exp(shifted), axis=-1, keepdims=True), "t"))
    logprobs: f32[b"batch/d seq vocab/t"] = shifted - log_z
    # This device holds vocabulary rows [start, start + local): one-hot against those only.
    local = logits.shape[-1]
    start = jax.lax.axis_index("t") * local
    onehot: f32[b"batch/d seq vocab/t"] = jax.nn.one_hot(targets - start, local, dtype=jnp.float32)
    picked = ops.einsum_unreduced(
        "batch/d seq vocab/t, batch/d seq vocab/t -> batch/d seq", logprobs, onehot
    )
    picked = jax.lax.psum(picked, "t")
    tokens = dims()["batch"] * dims()["seq"]
    return -jax.lax.psum(jnp.sum(picked), "d") / tokens


@typechecked
def loss_fn(weights: Weights, batch: Batch) -> f32[b""]:
    # Embedding lookup: the table's rows are split over t; each device looks up the ids in its
    # rows (zeros elsewhere), and the psum_scatter over t completes the sum.
    table = ops.all_gather("vocab/t embed/d -> vocab/t embed", weights.embed)
    x = ops.index_unreduced("[vocab/t] embed, batch/d seq -> batch/d seq embed", table, batch.inputs)
    x = ops.psum_scatter("batch/d seq embed -> batch/d seq embed/t", x)

    rope = make_rope()
    x, _ = jax.lax.scan(lambda x, layer: (block(x, layer, rope), None), x, weights.layers)

    ln_f = ops.all_gather("embed/t/d -> embed", weights.ln_f)
    nx = rms_norm(ops.all_gather("batch/d seq embed/t -> batch/d seq embed", x), ln_f)
    unembed = ops.all_gather("vocab/t embed/d -> vocab/t embed", weights.unembed)
    logits = ops.einsum_unreduced(
        "batch/d seq embed, vocab/t embed -> batch/d seq vocab/t", nx, unembed
    )
    return cross_entropy(logits, batch.targets)


# ---------------------------------------------------------------------------------------------
# The training step: one shard_map kernel whose specs are the annotations of its signature.


@typed_shard_map
def training_kernel(state: State, batch: Batch) -> tuple[State, Metrics]:
    # The loss is the global mean (reduced over d and t inside loss_fn). shard_map tracks which
    # values vary over which axes (check_vma, on by default), so autodiff inserts the right
    # reductions: the gradient of an all_gather over d is a psum_scatter over d, and that of a
    # value replicated over an axis is a psum over it. Each gradient is therefore this device's
    # block of the gradient of the global loss, laid out like its weight:
    loss, grads = jax.value_and_grad(loss_fn)(state.weights, batch)
    grads: Weights = grads  # checked: every gradient has its weight's own layout

    # Global gradient norm for clipping: a psum of local sums is right only because every
    # weight is fully sharded (no element is held by two devices).
    specs = jax.tree.leaves(make_partition_specs(Weights), is_leaf=lambda s: isinstance(s, P))
    assert all(is_fully_sharded(spec) for spec in specs), "clipping needs fully sharded weights"
    squares = sum(jnp.sum(g * g) for g in jax.tree.leaves(grads))
    grad_norm = jnp.sqrt(jax.lax.psum(squares, ("d", "t")))
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


compiled_kernel = jax.jit(training_kernel)


@typechecked
def train_step(state: State, batch: Batch) -> tuple[State, Metrics]:
    """The checked entry point: the dtype, shape and real sharding of every array going in and
    coming out are checked on each call, on Explicit and Auto mesh axes alike. (It runs
    outside jit on purpose: eagerly the check sees each array's actual sharding.)"""
    return compiled_kernel(state, batch)


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
    """Random weights and zero moments, created inside jit and laid out by ``shard``."""
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
        weights = treedef.unflatten([init_leaf(p, s, k) for (p, s), k in zip(leaves, keys)])
        zeros = jax.tree.map(jnp.zeros_like, weights)
        state = State(weights=weights, adam_mu=zeros, adam_nu=zeros, step=jnp.zeros((), jnp.int32))
        return shard(state, State)

    with jax.set_mesh(mesh):
        return init(key)


def make_batch(rng: np.random.Generator, pattern: np.ndarray, mesh) -> Batch:
    """Windows of a repeating token pattern at random phases; targets are the next tokens."""
    phases = rng.integers(0, len(pattern), size=(DIMS["batch"], 1))
    positions = phases + np.arange(DIMS["seq"] + 1)[None, :]
    tokens = pattern[positions % len(pattern)].astype(np.int32)
    batch = Batch(inputs=tokens[:, :-1], targets=tokens[:, 1:])
    return shard(batch, Batch, mesh)  # host data onto the mesh, as annotated


# ---------------------------------------------------------------------------------------------
# Reporting.


def annotations_by_path(cls: type, prefix: str = "") -> dict[str, typing.Any]:
    """Path (as ``jax.tree_util.keystr`` writes it) -> the array annotation of each field."""
    out = {}
    for name, annotation in typing.get_type_hints(cls).items():
        if dataclasses.is_dataclass(annotation):
            out.update(annotations_by_path(annotation, f"{prefix}.{name}"))
        else:
            out[f"{prefix}.{name}"] = annotation
    return out


def parameter_table(mesh) -> list[tuple[str, str, str, str, int]]:
    """(path, annotation, PartitionSpec, global shape, bytes per device) for every weight."""
    annotations = annotations_by_path(Weights)
    rows = []
    structs = make_shape_dtype_structs(Weights, DIMS, mesh)
    for path, struct in jax.tree_util.tree_flatten_with_path(structs)[0]:
        key = jax.tree_util.keystr(path)
        (shape,) = typing.get_args(annotations[key])
        annotation = f"{typing.get_origin(annotations[key]).__name__}[{shape.decode()!r}]"
        local = struct.sharding.shard_shape(struct.shape)
        nbytes = math.prod(local) * struct.dtype.itemsize
        rows.append(("weights" + key, annotation, str(struct.sharding.spec), str(struct.shape), nbytes))
    return rows


def print_parameter_table(mesh) -> None:
    rows = parameter_table(mesh)
    header = ("path", "annotation", "PartitionSpec", "shape", "bytes/device")
    widths = [max(len(str(r[i])) for r in rows + [header]) for i in range(len(header))]
    line = "  ".join(f"{{:<{w}}}" for w in widths[:-1]) + f"  {{:>{widths[-1]}}}"
    print(line.format(*header))
    for row in rows:
        print(line.format(*row))
    total = sum(r[-1] for r in rows)
    print(f"weights: {total} bytes per device ({total * len(mesh.devices.flat)} in all); "
          f"with Adam's two moments: {3 * total} bytes per device")


# ---------------------------------------------------------------------------------------------
# A deliberate mistake.


def wrongly_sharded(state: State, mesh) -> State:
    """``state`` with one stacked layer weight, ``w_up``, laid out over the wrong mesh axes: its
    embed dim over t and its hidden dim over d (the annotation says embed/d hidden/t)."""
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


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--auto", action="store_true", help="use Auto mesh axes")
    parser.add_argument("--steps", type=int, default=40, help="training steps")
    parser.add_argument("--every", type=int, default=5, help="print the loss every this many steps")
    args = parser.parse_args(argv)

    kind = AxisType.Auto if args.auto else AxisType.Explicit
    mesh = jax.make_mesh((4, 2), ("d", "t"), axis_types=(kind, kind))
    print(f"mesh: {dict(mesh.shape)} with {kind.name} axes on {len(jax.devices())} CPU devices")
    print("dims: " + ", ".join(f"{k}={v}" for k, v in DIMS.items()) + "\n")
    print_parameter_table(mesh)

    state = init_state(jax.random.key(0), mesh)
    rng = np.random.default_rng(0)
    pattern = rng.permutation(DIMS["vocab"])[:PATTERN_LENGTH]
    print(f"\ntraining on windows of a repeating sequence of {PATTERN_LENGTH} tokens "
          f"(chance loss ln({DIMS['vocab']}) = {math.log(DIMS['vocab']):.2f})")

    losses = []
    start = time.perf_counter()
    with jax.set_mesh(mesh):
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

    print("\nA deliberate mistake: layer weight w_up laid out as P(None, 't', 'd') instead of "
          "embed/d hidden/t")
    mistake = deliberate_mistake(state, make_batch(rng, pattern, mesh), mesh)
    print(f"  TypeCheckError: {mistake}")
    return {"losses": losses, "mistake": mistake}


if __name__ == "__main__":
    main()
