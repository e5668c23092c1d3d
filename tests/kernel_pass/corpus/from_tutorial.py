"""Corpus entries from JAX's ``docs/notebooks/shard_map.md`` (the tutorial): the first examples,
the varying-manual-axes section, the collectives, the matrix multiplies with their communication
spelled out, and the neural networks (data, FSDP, tensor and pipeline parallelism).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import PartitionSpec as P

from corpus_kit import (
    MD,
    add,
    grad_sum,
    ints,
    normal,
    ramp,
    vary,
)
from from_shard_map_test import ring
from from_shard_map_test_manual import swap_carry

add("matmul_basic", MD + "So, let's see a shard_map! (matmul_basic)", (4, 2), ("x", "y"),
    (P("x", "y"), P("y", None)), P("x", None), lambda a, b: lax.psum(jnp.dot(a, b), "y"),
    lambda: (ramp(8, 16, scale=0.01), ramp(16, 4, scale=0.01)), modes=("eager",))
add("check_shmap", MD + "Rank-reducing vs rank-preserving maps (check_shmap)", (4,), ("i",), (P("i"),), P("i"),
    lambda x: x.T @ x, lambda: (ramp(8, 4, scale=0.1),), modes=("eager",))
add("f1_in_specs", MD + "Controlling how each input is split (f1)", (4, 2), ("i", "j"), (P("i", None),),
    P("i", "j"), lambda x: x, lambda: (ints(12, 12),), modes=("eager",))
add("f2_in_specs", MD + "Controlling how each input is split (f2)", (4, 2), ("i", "j"), (P("i", "j"),),
    P("i", "j"), lambda x: x, lambda: (ints(12, 12),), modes=("eager",))
_X33 = np.array([[3.0]], np.float32)
for _tag, _out in (("ij", P("i", "j")), ("i", P("i", None)), ("none", P(None, None))):
    add(f"untile_closure/{_tag}", MD + "Controlling how each output is assembled (closure over x)", (4, 2),
        ("i", "j"), (), _out, lambda: jnp.asarray(_X33), lambda: (), modes=("eager",), kinds=("auto",),
        note="the closed-over jax.Array of the source is made by jnp.asarray of a numpy constant")
add("f3_psum_j", MD + "out_specs (f3)", (4, 2), ("i", "j"), (P("i", "j"),), P("i", None),
    lambda x: lax.psum(x, "j"), lambda: (ints(12, 12),), modes=("eager",))
add("f4_psum_i", MD + "out_specs (f4)", (4, 2), ("i", "j"), (P("i", "j"),), P(None, "j"),
    lambda x: lax.psum(x, "i"), lambda: (ints(12, 12),), modes=("eager",))
add("f5_psum_ij", MD + "out_specs (f5)", (4, 2), ("i", "j"), (P("i", "j"),), P(None, None),
    lambda x: lax.psum(x, ("i", "j")), lambda: (ints(12, 12),), modes=("eager",))
add("vma_varying", MD + "Tracking how values vary (2 * x, in P('i'))", (2,), ("i",), (P("i"),), P("i"),
    lambda x: 2 * x, lambda: (ramp(6),), modes=("eager",))
add("vma_invariant", MD + "Tracking how values vary (2 * x, in P())", (2,), ("i",), (P(),), P(),
    lambda x: 2 * x, lambda: (ramp(6),), modes=("eager",))
add("vma_psum", MD + "Tracking how values vary (psum)", (2,), ("i",), (P("i"),), P(),
    lambda x: lax.psum(x, "i"), lambda: (ramp(6),), modes=("eager",))
add("vma_psum_j", MD + "Tracking how values vary (psum over j, out P('i'))", (4, 2), ("i", "j"), (P("i", "j"),),
    P("i"), lambda x: lax.psum(x, "j"), lambda: (ramp(8, 4),), modes=("eager",))
add("vma_out_specs_bug", MD + "out_specs bug caught with check_vma", (2,), ("i",), (P("i"),), P(), lambda x: x,
    lambda: (ramp(6),), modes=("eager",), jax_refuses=(ValueError, ""))
add("vma_implicit_pvary", MD + "implicit pcast for binary ops (x * y)", (2,), ("i",), (P("i"), P()), P("i"),
    lambda x, y: x * y, lambda: (ramp(6), ramp(3)), modes=("eager",))
add("scan_vma_error", MD + "scan needs pcast (raises)", (2,), ("i",), (P("i"), P()), P("i"), swap_carry,
    lambda: (ramp(6), ramp(3)), modes=("eager",), jax_refuses=(TypeError, "pcast"))
add("scan_vma_fixed", MD + "scan needs pcast (fixed)", (2,), ("i",), (P("i"), P()), P("i"),
    lambda x, y: swap_carry(x, vary(y, "i")), lambda: (ramp(6), ramp(3)), modes=("eager",))

_X16 = lambda: (np.array([3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 1, 2], np.int32),)  # noqa: E731
add("collectives/psum_f1", MD + "Collectives tutorial: psum (f1)", (4,), ("i",), (P("i"),), P(None),
    lambda x: lax.psum(x, "i"), _X16, modes=("eager",))
add("collectives/psum_f2", MD + "Collectives tutorial: psum over i (f2)", (2, 2), ("i", "j"), (P("i", "j"),),
    P(None, "j"), lambda x: lax.psum(x, "i"), lambda: (ints(4, 4),), modes=("eager",))
add("collectives/psum_f3", MD + "Collectives tutorial: psum over i and j (f3)", (2, 2), ("i", "j"),
    (P("i", "j"),), P(None, None), lambda x: lax.psum(x, ("i", "j")), lambda: (ints(4, 4),), modes=("eager",))
add("collectives/all_gather_tiled_f4", MD + "Collectives tutorial: all_gather (f4)", (4,), ("i",), (P("i"),),
    P("i"), lambda x: lax.all_gather(x, "i", tiled=True), lambda: (np.array([3, 9, 5, 2], np.int32),),
    modes=("eager",))
add("collectives/all_gather_stacked_f5", MD + "Collectives tutorial: all_gather, tiled=False (f5)", (4,), ("i",),
    (P("i"),), P("i"), lambda x: lax.all_gather(x, "i", tiled=False), lambda: (np.array([3, 9, 5, 2], np.int32),),
    modes=("eager",))
add("collectives/psum_scatter_f6", MD + "Collectives tutorial: psum_scatter (f6)", (4,), ("i",), (P("i"),),
    P("i"), lambda x: lax.psum_scatter(x, "i", tiled=True), _X16, modes=("eager",))
add("collectives/ppermute_f7", MD + "Collectives tutorial: ppermute (f7)", (4,), ("i",), (P("i"),), P("i"),
    lambda x: ring(x, "i"), lambda: (ints(8),), modes=("eager",))


def _shift(x, axis, step):
    """Each device's ``x`` to the device ``step`` places further along ``axis`` (a ring)."""
    n = lax.axis_size(axis)
    return lax.ppermute(x, axis, perm=[(d, (d + step) % n) for d in range(n)])


def _ring_reduce_scatter(x, axis):
    """The tiled psum_scatter of ``x`` over ``axis`` along dim 0, as a ring of ppermutes: the running
    sum for a chunk travels one device down per step, each device adding its own part of it, and
    ends on the device that owns the chunk."""
    n, me = lax.axis_size(axis), lax.axis_index(axis)
    chunks = x.reshape(n, x.shape[0] // n, *x.shape[1:])
    running = chunks[(me + 1) % n]
    for step in range(1, n):
        running = _shift(running, axis, -1) + chunks[(me + 1 + step) % n]
    return running


add("collectives/psum_scatter_by_ppermute_f8", MD + "Collectives tutorial: psum_scatter from ppermutes (f8)",
    (4,), ("i",), (P("i"),), P("i"), lambda x: _ring_reduce_scatter(x, "i"), _X16,
    note="eager in the source; under jax.jit here (eager op-by-op dispatch takes seconds)")
add("collectives/all_to_all_f9", MD + "Collectives tutorial: all_to_all (f9)", (4,), ("i",), (P("i"),), P("i"),
    lambda x: lax.all_to_all(x, "i", split_axis=0, concat_axis=0, tiled=True), _X16, modes=("eager",))


# Matrix multiplies: lhs @ rhs with the communication spelled out ---------------------------------

def _cols(x, j, width):
    return lax.dynamic_slice_in_dim(x, j * width, width, 1)


def _rows(x, j, height):
    return lax.dynamic_slice_in_dim(x, j * height, height, 0)


def _matmul_allgather(lhs, rhs):
    return lhs @ lax.all_gather(rhs, "i", tiled=True)


def _matmul_allgather_overlapped(lhs, rhs):
    """rhs's row blocks travel round the ring; each meets the columns of lhs it multiplies."""
    n, me = lax.axis_size("i"), lax.axis_index("i")
    width = lhs.shape[1] // n
    held = rhs
    total = _cols(lhs, me, width) @ held
    for step in range(1, n):
        held = _shift(held, "i", +1)  # now the block of device me - step
        total = total + _cols(lhs, (me - step) % n, width) @ held
    return total


def _matmul_allgather_overlapped_bidi(lhs, rhs):
    """As above, with each block's two halves going round the ring in opposite directions."""
    n, me = lax.axis_size("i"), lax.axis_index("i")
    half = lhs.shape[1] // n // 2
    up, down = jnp.split(rhs, 2, axis=0)
    total = _cols(lhs, 2 * me, half) @ up + _cols(lhs, 2 * me + 1, half) @ down
    for step in range(1, n):
        up, down = _shift(up, "i", +1), _shift(down, "i", -1)
        total = total + _cols(lhs, 2 * ((me - step) % n), half) @ up
        total = total + _cols(lhs, 2 * ((me + step) % n) + 1, half) @ down
    return total


def _matmul_psumscatter(lhs, rhs):
    return lax.psum_scatter(lhs @ rhs, "i", tiled=True)


def _matmul_psumscatter_overlapped(lhs, rhs):
    """The running sum of a row block of the product goes round the ring, each device adding the
    product of its columns; it ends on the device whose rows it is."""
    n, me = lax.axis_size("i"), lax.axis_index("i")
    height = lhs.shape[0] // n
    running = _rows(lhs, (me + 1) % n, height) @ rhs
    for step in range(1, n):
        running = _shift(running, "i", -1) + _rows(lhs, (me + 1 + step) % n, height) @ rhs
    return running


def _matmul_psumscatter_overlapped_bidi(lhs, rhs):
    """As above, each row block in two halves whose running sums go round in opposite directions."""
    n, me = lax.axis_size("i"), lax.axis_index("i")
    half = lhs.shape[0] // n // 2
    first = _rows(lhs, 2 * ((me - 1) % n), half) @ rhs
    second = _rows(lhs, 2 * ((me + 1) % n) + 1, half) @ rhs
    for step in range(1, n):
        first = _shift(first, "i", +1) + _rows(lhs, 2 * ((me - 1 - step) % n), half) @ rhs
        second = _shift(second, "i", -1) + _rows(lhs, 2 * ((me + 1 + step) % n) + 1, half) @ rhs
    return jnp.concatenate([first, second])


_lhs_rhs = lambda: (normal(8, 8, seed=12), normal(8, 4, seed=13))  # noqa: E731
for _name, _f in (("matmul_allgather", _matmul_allgather), ("matmul_allgather_overlapped", _matmul_allgather_overlapped),
                  ("matmul_allgather_overlapped_bidi", _matmul_allgather_overlapped_bidi)):
    add(f"matmul/{_name}", MD + f"Matrix multiplies, Example 1 ({_name})", (4,), ("i",), (P("i", None), P("i", None)),
        P("i", None), _f, _lhs_rhs)
for _name, _f in (("matmul_psumscatter", _matmul_psumscatter),
                  ("matmul_psumscatter_overlapped", _matmul_psumscatter_overlapped),
                  ("matmul_psumscatter_overlapped_bidi", _matmul_psumscatter_overlapped_bidi)):
    add(f"matmul/{_name}", MD + f"Matrix multiplies, Example 2 ({_name})", (4,), ("i",), (P(None, "i"), P("i", None)),
        P("i", None), _f, _lhs_rhs, note="eager in the source; under jax.jit here (eager op-by-op dispatch takes seconds)")


# Neural networks: a small MLP (the tutorial's shape, smaller), its squared-error loss ---------------

_WIDTHS = [16, 8, 8, 8, 8, 8]
_BATCH = 16


def _mse(predictions, targets):
    return jnp.mean(jnp.sum(jnp.square(predictions - targets), axis=-1))


def _mlp(layers, x, dense=lambda x, w, b: x @ w + b, weights=lambda w, b: (w, b)):
    """relu between the layers, none after the last; ``weights`` prepares a layer's (w, b) (a gather
    for FSDP), ``dense`` applies it (a reduce-scatter for tensor parallelism)."""
    for k, (w, b) in enumerate(layers):
        x = dense(x, *weights(w, b))
        if k + 1 < len(layers):
            x = jax.nn.relu(x)
    return x


def _mlp_layers():
    rng = np.random.default_rng(14)
    return [((rng.standard_normal((a, b)) / np.sqrt(a)).astype(np.float32), rng.standard_normal(b).astype(np.float32))
            for a, b in zip(_WIDTHS[:-1], _WIDTHS[1:])]


def _mlp_batch():
    rng = np.random.default_rng(15)
    return (rng.standard_normal((_BATCH, _WIDTHS[0])).astype(np.float32),
            rng.standard_normal((_BATCH, _WIDTHS[-1])).astype(np.float32))


def _loss_dp(layers, batch):
    x, y = batch
    return lax.pmean(_mse(_mlp(layers, x), y), "batch")


def _gather_layer(w, b):
    return lax.all_gather(w, "batch", tiled=True), lax.all_gather(b, "batch", tiled=True)


_no_saved_gathers = functools.partial(jax.checkpoint, policy=lambda prim, *_, **__: str(prim) != "all_gather")


def _loss_fsdp(layers, batch):
    x, y = batch
    forward = _no_saved_gathers(lambda layers, x: _mlp(layers, x, weights=_gather_layer))
    return lax.pmean(_mse(forward(layers, x), y), "batch")


def _dense_tp(x, w, b):
    return lax.psum_scatter(x @ w, "feats", scatter_dimension=1, tiled=True) + b


def _loss_fsdp_tp(layers, batch):
    x, y = batch
    forward = _no_saved_gathers(lambda layers, x: _mlp(layers, x, dense=_dense_tp, weights=_gather_layer))
    errors = lax.psum(jnp.sum(jnp.square(forward(layers, x) - y), axis=-1), "feats")
    return lax.pmean(jnp.mean(errors), "batch")


for _g in (False, True):
    _sfx = "/grad" if _g else ""
    _o = grad_sum() if _g else None
    add(f"nn/loss_dp{_sfx}", MD + "8-way batch data parallelism (loss_dp)", (8,), ("batch",), (P(), P("batch")), P(),
        _loss_dp, lambda: (_mlp_layers(), _mlp_batch()), outer=_o)
    add(f"nn/loss_fsdp{_sfx}", MD + "8-way fully sharded data parallelism (loss_fsdp)", (4,), ("batch",),
        (P("batch"), P("batch")), P(), _loss_fsdp, lambda: (_mlp_layers(), _mlp_batch()), outer=_o)
    add(f"nn/loss_fsdp_tp{_sfx}", MD + "FSDP + TP, shard_map at the top level (loss_fsdp_tp)", (4, 2),
        ("batch", "feats"), (P(("feats", "batch")), P("batch", "feats")), P(), _loss_fsdp_tp,
        lambda: (_mlp_layers(), _mlp_batch()), outer=_o)
for _name, _loss, _mesh, _axes, _specs in (
        ("loss_dp", _loss_dp, (8,), ("batch",), (P(), P("batch"))),
        ("loss_fsdp", _loss_fsdp, (4,), ("batch",), (P("batch"), P("batch"))),
        ("loss_fsdp_tp", _loss_fsdp_tp, (4, 2), ("batch", "feats"), (P(("feats", "batch")), P("batch", "feats")))):
    add(f"nn/{_name}/layers_as_tuple", MD + f"{_name}, its list of layers passed as a tuple", _mesh, _axes, _specs,
        P(), _loss, lambda: (tuple(_mlp_layers()), _mlp_batch()),
        note="not in the source: the same kernel with its layers in a tuple, which shardtypes can annotate")
add("nn/gemm_tp", MD + "8-way tensor parallelism (gemm_tp)", (8,), ("feats",),
    (P(None, "feats"), P("feats", None), P("feats")), P(None, "feats"), _dense_tp,
    lambda: (normal(16, 16, seed=16), normal(16, 8, seed=17), normal(8, seed=18)))


# SPMD pipeline parallelism (loss_pp): 2 stages of 2 layers each between a first and a last layer,
# 4 microbatches of 2. A GPipe schedule of this corpus' own: every stage sees all microbatches
# (all_gather), activations move one stage on per tick (ppermute), and the last stage's outputs
# are handed back to the stage that holds each microbatch's targets (psum of masked values).
_PP_STAGES, _PP_LAYERS, _PP_MICRO, _PP_FEATS, _PP_N = 2, 4, 2, 8, 8


def _gpipe(layer, stage_layers, local_microbatches):
    stage, stages = lax.axis_index("stages"), lax.axis_size("stages")
    feed = lax.all_gather(local_microbatches, "stages", tiled=True)  # every microbatch, in order
    count = feed.shape[0]
    carried = jnp.zeros_like(feed[0])
    finished = []
    for tick in range(count + stages - 1):
        x = jnp.where(stage == 0, feed[min(tick, count - 1)], carried)
        for k in range(stage_layers[0].shape[0]):
            x = layer(stage_layers[0][k], stage_layers[1][k], x)
        if tick >= stages - 1:
            finished.append(x)  # microbatch tick - (stages - 1), complete on the last stage
        carried = lax.ppermute(x, "stages", [(s, s + 1) for s in range(stages - 1)])
    done = lax.psum(jnp.where(stage == stages - 1, jnp.stack(finished), 0.0), "stages")
    mine = count // stages
    return lax.dynamic_slice_in_dim(done, stage * mine, mine, 0)


def _loss_pp(params, batch):
    x, y = batch
    (w_in, b_in), inner, (w_out, b_out) = params
    micro = x.reshape(-1, _PP_MICRO, x.shape[-1])
    h = jax.nn.relu(micro @ w_in + b_in)
    h = _gpipe(lambda w, b, h: jax.nn.relu(h @ w + b), inner, h)
    predictions = (h @ w_out + b_out).reshape(-1, w_out.shape[-1])
    return lax.pmean(_mse(predictions, y), "stages")


def _pp_args():
    rng = np.random.default_rng(19)
    mk = lambda *s: (rng.standard_normal(s) / np.sqrt(s[0])).astype(np.float32)  # noqa: E731
    first = (mk(6, _PP_FEATS), mk(_PP_FEATS))
    inner = (np.stack([mk(_PP_FEATS, _PP_FEATS) for _ in range(_PP_LAYERS)]),
             np.stack([mk(_PP_FEATS) for _ in range(_PP_LAYERS)]))
    last = (mk(_PP_FEATS, 3), mk(3))
    batch = (rng.standard_normal((_PP_N, 6)).astype(np.float32), rng.standard_normal((_PP_N, 3)).astype(np.float32))
    return (first, inner, last), batch


for _g in (False, True):
    add("nn/loss_pp" + ("/grad" if _g else ""), MD + "SPMD pipeline parallelism (loss_pp)", (2,), ("stages",),
        ((P(), P("stages"), P()), P("stages")), P(), _loss_pp, _pp_args, outer=grad_sum() if _g else None,
        slow=_g)
