"""A seqax-style training step, written the way seqax's train.py writes it (docs/seqax.md).

String shapes in pytree dataclass fields, bytes in signatures, ``Array['layers', Layer]`` run
with ``lax.scan`` and ``jax.checkpoint``, one ``typed_shard_map`` kernel with ``check_rep=False``
built from ``all_gather``, ``psum_scatter``, ``einsum_unreduced`` and seqax's loss
``index_unreduced('batch/d len [V/t], batch/d len -> batch/d len', ...)``; Adam, as seqax does it.
It runs jitted on a (d=4, t=2) mesh with Explicit and with Auto axes, the loss falls and agrees
with an unsharded reference, and four seeded mistakes are caught with their paths.
"""

import dataclasses
import math
from dataclasses import dataclass
from functools import partial
from typing import Tuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P
from typeguard import TypeCheckError, typechecked  # seqax checks with plain typeguard

import shardtypes
import shardtypes.ops as shardops  # seqax: import shardlib.shardops as shardops
from shardtypes import (
    Array,
    Scope,
    bool_,
    f32,
    is_fully_sharded,
    make_partition_specs,
    make_shardings,
    pytree_dataclass,
    shard,
    typed_shard_map,
    u32,
)

shardtypes.register_with_typeguard()  # seqax's first line; importing shardtypes already did it


@dataclass(frozen=True)
class Hparams:
    d_model: int
    d_ff: int
    layers: int
    vocab: int


@dataclass(frozen=True)
class TrainingHparams:
    learning_rate: float
    adam_b1: float
    adam_b2: float
    adam_eps: float


H = Hparams(d_model=16, d_ff=32, layers=2, vocab=16)
TH = TrainingHparams(learning_rate=3e-2, adam_b1=0.9, adam_b2=0.99, adam_eps=1e-8)
BATCH, LEN = 8, 8


# ------------------------------------------------------------------------------------------
# Types: string shapes in dataclass fields, as seqax writes them.


@pytree_dataclass
class TransformerLayer:
    ln: f32['d_model/t/d']
    w_up: f32['d_model/d d_ff/t']
    w_down: f32['d_model/d d_ff/t']


Transformer = Array['layers', TransformerLayer]


@pytree_dataclass
class TokenBatch:
    targets: u32['batch/d len']
    is_seq_start: bool_['batch/d len']


@typechecked
def rms_norm(x: f32[b'batch/d len M']) -> f32[b'batch/d len M']:
    return x * lax.rsqrt(jnp.mean(lax.square(x), axis=-1, keepdims=True) + 1e-6)


@pytree_dataclass
class Model:
    embed: f32['vocab/t d_model/d']
    unembed: f32['vocab/t d_model/d']
    transformer: Transformer
    final_layer_norm: f32['d_model/d/t']

    @staticmethod
    @typechecked
    def init(h: Hparams, rng: jax.Array) -> 'Model':
        k = jax.random.split(rng, 4)
        scale = 1 / math.sqrt(h.d_model)
        ff_shape = (h.layers, h.d_model, h.d_ff)
        arrays = Model(
            embed=jax.random.normal(k[0], (h.vocab, h.d_model), jnp.float32),
            unembed=scale * jax.random.normal(k[1], (h.vocab, h.d_model), jnp.float32),
            transformer=Transformer(
                ln=jnp.ones((h.layers, h.d_model), jnp.float32),
                w_up=scale * jax.random.normal(k[2], ff_shape, jnp.float32),
                w_down=jax.random.normal(k[3], ff_shape, jnp.float32) / math.sqrt(h.d_ff),
            ),
            final_layer_norm=jnp.ones((h.d_model,), jnp.float32),
        )
        # seqax: jax.tree.map(lax.with_sharding_constraint, arrays, make_shardings(Model)),
        # which asserts on Explicit mesh axes; shard() lays the tree out on either kind.
        return shard(arrays, Model)

    @typechecked
    def forward_pass(self, h: Hparams, ids: u32[b'B/d L']) -> f32[b'B/d L V/t']:
        embed = shardops.all_gather('V/t M/d -> V/t M', self.embed)
        x = shardops.index_unreduced('[V/t] M, B/d L -> B/d L M', embed, ids)
        x = shardops.psum_scatter('B/d L M -> B/d L M/t', x)

        @jax.checkpoint  # seqax: jax_extra.explicit_activation_checkpointing
        @typechecked
        def loop_body(x: f32[b'B/d L M/t'], layer_weights: TransformerLayer) -> Tuple[f32[b'B/d L M/t'], Tuple[()]]:
            ln = shardops.all_gather('M/t/d -> M', layer_weights.ln)
            gx = shardops.all_gather('B/d L M/t -> B/d L M', x)
            nx = rms_norm(gx) * ln
            w_up = shardops.all_gather('M/d F/t -> M F/t', layer_weights.w_up)
            up = shardops.einsum_unreduced('B/d L M, M F/t -> B/d L F/t', nx, w_up)
            y = jax.nn.swish(up)
            w_down = shardops.all_gather('M/d F/t -> M F/t', layer_weights.w_down)
            ffn_out = shardops.einsum_unreduced('B/d L F/t, M F/t -> B/d L M', y, w_down)
            ffn_out = shardops.psum_scatter('B/d L M -> B/d L M/t', ffn_out)
            return x + ffn_out, ()

        x, () = lax.scan(loop_body, x, self.transformer)

        x = shardops.all_gather('B/d L M/t -> B/d L M', x)
        ln = shardops.all_gather('M/d/t -> M', self.final_layer_norm)
        x = rms_norm(x) * ln
        unembed = shardops.all_gather('V/t M/d -> V/t M', self.unembed)
        return shardops.einsum_unreduced('B/d L M, V/t M -> B/d L V/t', x, unembed)

    @typechecked
    def loss(self, h: Hparams, batch: TokenBatch) -> f32[b'']:
        inputs = jnp.pad(batch.targets[:, :-1], pad_width=((0, 0), (1, 0)))
        is_seq_start: bool_[b'batch/d len'] = batch.is_seq_start
        inputs: u32[b'batch/d len'] = jnp.where(is_seq_start, jnp.uint32(0), inputs)

        logits: f32[b'batch/d len V/t'] = self.forward_pass(h, inputs)
        max_logits: f32[b'batch/d len 1'] = lax.pmax(jnp.max(lax.stop_gradient(logits), axis=-1, keepdims=True), 't')
        logits = logits - max_logits
        sum_logits = lax.psum(jnp.sum(jnp.exp(logits), axis=-1, keepdims=True), 't')
        logprobs: f32[b'batch/d len V/t'] = logits - jnp.log(sum_logits)
        logprobs_at_targets = shardops.index_unreduced(
            'batch/d len [V/t], batch/d len -> batch/d len', logprobs, batch.targets)
        logprobs_at_targets = shardops.psum_scatter('batch/d len -> batch/d len/t', logprobs_at_targets)
        tokens_in_global_batch = logprobs_at_targets.size * lax.psum(1, ('d', 't'))
        return -jnp.sum(logprobs_at_targets) / jnp.float32(tokens_in_global_batch)


@pytree_dataclass
class State:
    weights: Model
    adam_mu: Model
    adam_nu: Model

    @staticmethod
    def init(h: Hparams, rng: jax.Array) -> 'State':
        weights = Model.init(h, rng)
        adam_mu = jax.tree.map(lambda p: p * 0.0, weights)
        adam_nu = jax.tree.map(lambda p: p * 0.0, weights)
        return State(weights=weights, adam_mu=adam_mu, adam_nu=adam_nu)


@pytree_dataclass
class Metrics:
    loss: f32['']
    grad_norm: f32['']


@partial(jax.jit, static_argnums=(2, 3))
def training_step(state: State, step: u32[b''], h: Hparams, hparams: TrainingHparams,
                  batch: TokenBatch) -> Tuple[State, Metrics]:
    @partial(typed_shard_map, check_rep=False)
    def sharded_step(state: State, step: u32[b''], batch: TokenBatch) -> Tuple[State, Metrics]:
        loss, grad = jax.value_and_grad(lambda weights: weights.loss(h, batch))(state.weights)
        # The gradient of an all_gather is a psum_scatter: grads are reduced and laid out like
        # their weights. The loss is reduced outside the autodiff.
        loss = lax.psum(loss, ('d', 't'))
        grad: Model = grad  # checked: each gradient has its weight's layout

        grad_leaves, grad_treedef = jax.tree_util.tree_flatten(grad)
        global_norm = jnp.sqrt(lax.psum(sum(jnp.sum(lax.square(g)) for g in grad_leaves), ('d', 't')))
        rescale = jnp.minimum(1.0, 1.0 / global_norm)
        specs = jax.tree.leaves(make_partition_specs(Model), is_leaf=lambda s: isinstance(s, P))
        new_ps, new_mus, new_nus = [], [], []
        for p, g, mu, nu, spec in zip(jax.tree.leaves(state.weights), grad_leaves,
                                      jax.tree.leaves(state.adam_mu), jax.tree.leaves(state.adam_nu), specs):
            assert is_fully_sharded(spec), 'the update is only correctly scaled for fully sharded weights'
            g = g * rescale
            mu = (1 - hparams.adam_b1) * g + hparams.adam_b1 * mu
            nu = (1 - hparams.adam_b2) * lax.square(g) + hparams.adam_b2 * nu
            completed_steps = step + 1
            mu_hat = mu / (1 - jnp.float32(hparams.adam_b1) ** completed_steps)
            nu_hat = nu / (1 - jnp.float32(hparams.adam_b2) ** completed_steps)
            new_ps.append(p - hparams.learning_rate * mu_hat / (jnp.sqrt(nu_hat) + hparams.adam_eps))
            new_mus.append(mu)
            new_nus.append(nu)
        new_state = State(
            weights=jax.tree_util.tree_unflatten(grad_treedef, new_ps),
            adam_mu=jax.tree_util.tree_unflatten(grad_treedef, new_mus),
            adam_nu=jax.tree_util.tree_unflatten(grad_treedef, new_nus),
        )
        return new_state, Metrics(loss=loss, grad_norm=global_norm)

    return sharded_step(state, step, batch)


# ------------------------------------------------------------------------------------------
# Data and an unsharded reference.

PERM = np.random.default_rng(1).permutation(H.vocab).astype(np.uint32)


def make_batch(rng: np.random.Generator) -> TokenBatch:
    """Sequences that follow a fixed permutation of the vocabulary from a random first token."""
    tokens = np.empty((BATCH, LEN), np.uint32)
    tokens[:, 0] = rng.integers(0, H.vocab, BATCH)
    for i in range(1, LEN):
        tokens[:, i] = PERM[tokens[:, i - 1]]
    is_seq_start = np.zeros((BATCH, LEN), bool)
    is_seq_start[:, 0] = True
    return shard(TokenBatch(targets=tokens, is_seq_start=is_seq_start), TokenBatch)


def host(tree):
    return jax.tree.map(np.asarray, tree)


def reference_loss(w: Model, batch: TokenBatch):
    """The same model on whole arrays (host copies), with no shardtypes, no collectives."""
    def norm(x):
        return x * lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + 1e-6)

    targets = jnp.asarray(batch.targets)
    inputs = jnp.pad(targets[:, :-1], ((0, 0), (1, 0)))
    inputs = jnp.where(jnp.asarray(batch.is_seq_start), 0, inputs)
    x = jnp.asarray(w.embed)[inputs]
    for i in range(H.layers):
        nx = norm(x) * w.transformer.ln[i]
        x = x + jax.nn.swish(nx @ w.transformer.w_up[i]) @ w.transformer.w_down[i].T
    logits = (norm(x) * w.final_layer_norm) @ jnp.asarray(w.unembed).T
    logprobs = jax.nn.log_softmax(logits)
    return -jnp.mean(jnp.take_along_axis(logprobs, targets[..., None].astype(jnp.int32), -1))


reference_value_and_grad = jax.jit(jax.value_and_grad(reference_loss))


# ------------------------------------------------------------------------------------------
# Tests.

KINDS = {"explicit": AxisType.Explicit, "auto": AxisType.Auto}


def make_mesh(kind: str):
    if kind == "explicit":
        return jax.make_mesh((4, 2), ('d', 't'))  # Explicit: jax.make_mesh's default
    return jax.make_mesh((4, 2), ('d', 't'), axis_types=(AxisType.Auto,) * 2)


@pytest.fixture(scope="module", params=sorted(KINDS))
def fresh(request):
    """(mesh, initial state, a batch), per mesh kind; the state is made as seqax makes it."""
    mesh = make_mesh(request.param)
    assert all(t == KINDS[request.param] for t in mesh.axis_types)
    with jax.set_mesh(mesh):
        state = jax.jit(partial(State.init, H))(jax.random.key(0))
        batch = make_batch(np.random.default_rng(0))
    return mesh, state, batch


@pytest.fixture(scope="module")
def trained(fresh):
    """(mesh, initial state, the batch, losses of a few steps, state after them)."""
    mesh, state, batch = fresh
    losses = []
    with jax.set_mesh(mesh):
        for step in range(6):
            state, metrics = training_step(state, jnp.uint32(step), H, TH, batch)
            losses.append(float(metrics.loss))
    return mesh, fresh[1], batch, losses, state


def test_state_is_laid_out_as_annotated(trained):
    mesh, initial, _, _, state = trained
    specs = make_partition_specs(State)
    assert specs.weights.transformer.w_up == P(None, 'd', 't')
    assert specs.weights.final_layer_norm == P(('d', 't'))
    with jax.set_mesh(mesh):
        shardings = make_shardings(State)
    for tree in (initial, state):
        for x, s in zip(jax.tree.leaves(tree), jax.tree.leaves(shardings)):
            assert x.sharding.is_equivalent_to(s, x.ndim), (x.sharding, s)


def test_loss_falls_and_matches_unsharded_reference(trained):
    mesh, initial, batch, losses, _ = trained
    assert losses[-1] < losses[0] - 0.5, losses
    assert all(b < a for a, b in zip(losses, losses[1:])), losses
    # The first step's loss is the loss of the initial weights, computed without shardtypes.
    loss, _ = reference_value_and_grad(host(initial.weights), host(batch))
    assert np.isclose(losses[0], float(loss), rtol=1e-4), (losses[0], float(loss))


def test_gradients_match_unsharded_reference(trained):
    """check_rep=False with seqax's loss (a psum inside the autodiff, the loss reduced outside
    it): the kernel's gradients are those of the global loss. Adam's first moment after one
    step is (1 - b1) * rescale * grad, so its direction is the reference gradient's."""
    mesh, initial, batch, _, _ = trained
    _, grads = reference_value_and_grad(host(initial.weights), host(batch))
    with jax.set_mesh(mesh):
        state, _ = training_step(initial, jnp.uint32(0), H, TH, batch)
    for got, want in zip(jax.tree.leaves(host(state.adam_mu)), jax.tree.leaves(host(grads))):
        np.testing.assert_allclose(got / np.linalg.norm(got), want / np.linalg.norm(want), atol=1e-4)


# ------------------------------------------------------------------------------------------
# Seeded mistakes, each caught at the kernel's boundary with the path of the weight.


def replace_leaf(state: State, path: str, f) -> State:
    """``state`` with the leaf at ``path`` (as ``jax.tree_util.keystr`` writes it) replaced by
    ``f(leaf)``."""
    leaves, treedef = jax.tree_util.tree_flatten_with_path(state)
    paths = [jax.tree_util.keystr(p) for p, _ in leaves]
    assert path in paths, paths
    return jax.tree_util.tree_unflatten(treedef, [f(x) if p == path else x for p, (_, x) in zip(paths, leaves)])


def rebuilt(f):
    """A weight rebuilt on the host by ``f`` and put back with the original's layout."""
    return lambda x: jax.device_put(f(np.asarray(x)), x.sharding)


def replicated(x):
    return jax.device_put(x, NamedSharding(x.sharding.mesh, P()))


MISTAKES = {
    # name: (path in State, how the weight is spoilt, what the message says about it)
    "bf16 weight": (
        ".weights.unembed", lambda x: x.astype(jnp.bfloat16),
        ["has dtype bfloat16, the annotation wants float32"],
    ),
    "one more layer": (
        ".weights.transformer.w_up", rebuilt(lambda w: np.concatenate([w, w[:1]])),
        ["dimension 'layers' is 3 here", "bound to 2 by state.weights.transformer.ln"],
    ),
    "another d_ff": (
        ".weights.transformer.w_down", rebuilt(lambda w: np.concatenate([w, w[:, :, :16]], axis=2)),
        ["dimension 'd_ff' is 48 here", "bound to 32 by state.weights.transformer.w_up"],
    ),
    "replicated weight": (
        ".weights.embed", replicated,
        ["sharding", "is P(None, None) but the annotation says P('t', 'd')"],
    ),
}


@pytest.mark.parametrize("mistake", list(MISTAKES))
def test_seeded_mistake_is_caught_with_its_path(fresh, mistake):
    mesh, initial, batch = fresh
    path, spoil, fragments = MISTAKES[mistake]
    bad = replace_leaf(initial, path, spoil)
    auto = mesh.axis_types[0] == AxisType.Auto
    with jax.set_mesh(mesh):
        if mistake == "replicated weight" and auto:
            # On Auto axes the layout is only known once XLA has partitioned the program: the
            # check runs at compile time, and its TypeCheckError ends the compilation.
            with pytest.raises(TypeCheckError) as info:
                training_step(bad, jnp.uint32(0), H, TH, batch)
            message = str(info.value)
            assert "shardtypes (compile-time check)" in message, message
            assert 'state.weights.embed (argument "state" of training_step.<locals>.sharded_step())' in message
            assert "annotated f32[b'vocab/t d_model/d']" in message
        else:
            with pytest.raises(TypeCheckError) as info:
                training_step(bad, jnp.uint32(0), H, TH, batch)
            message = str(info.value)
            assert message.startswith(f'argument "state" ({State.__module__}.State) of '
                                      f"training_step.<locals>.sharded_step(): state{path} is not "), message
            assert info.value.fields == path.split(".")[1:]
    for fragment in fragments:
        assert fragment in message, message


def test_whole_stack_of_the_wrong_count_is_caught_under_scope(fresh):
    """Nothing binds 'layers' before the stack itself, so a stack of three layers is a model of
    three layers, unless the size is pre-bound from the hyperparameters with Scope."""
    mesh, initial, batch = fresh
    three = dataclasses.replace(initial, weights=dataclasses.replace(
        initial.weights, transformer=jax.tree.map(rebuilt(lambda w: np.concatenate([w, w[:1]])),
                                                  initial.weights.transformer)))
    with jax.set_mesh(mesh), Scope(layers=H.layers):
        with pytest.raises(TypeCheckError) as info:
            training_step(three, jnp.uint32(0), H, TH, batch)
    message = str(info.value)
    assert "state.weights.transformer.ln is not f32[b'layers d_model/t/d']" in message, message
    assert "dimension 'layers' is 3 here (dim 0) but was bound to 2 by Scope(layers=2)" in message


def test_the_guide_runs_and_prints_what_it_shows(tmp_path):
    """docs/seqax.md says every block runs, in order, and prints what the block after it shows:
    run its Python blocks as one script (so typeguard can read their source) and compare."""
    import pathlib
    import re
    import subprocess
    import sys

    text = (pathlib.Path(__file__).resolve().parents[2] / "docs" / "seqax.md").read_text()
    pairs = re.findall(r"```python\n(.*?)```(?:\n\n```text\n(.*?)```)?", text, re.S)
    assert len(pairs) >= 10 and sum(1 for _, out in pairs if out) >= 10
    script = tmp_path / "guide.py"
    script.write_text("\n".join(f"print('<<<block {i}>>>')\n{code}" for i, (code, _) in enumerate(pairs)))
    run = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "Warning" not in run.stderr, run.stderr[-3000:]
    parts = re.split(r"<<<block (\d+)>>>\n", run.stdout)[1:]
    printed = {int(parts[k]): parts[k + 1] for k in range(0, len(parts), 2)}
    # Decimals to float32's precision: XLA may add in another order on another JAX (a loss's last bits).
    decimal = r"-?\d+\.\d+(?:e[-+]?\d+)?"
    for i, (code, shown) in enumerate(pairs):
        if shown:
            got, want = printed[i].strip(), shown.strip()
            assert re.sub(decimal, "#", got) == re.sub(decimal, "#", want) and all(
                math.isclose(float(a), float(b), rel_tol=1e-5)
                for a, b in zip(re.findall(decimal, got), re.findall(decimal, want))
            ), f"block {i}:\n{code}\nprinted:\n{printed[i]}"
