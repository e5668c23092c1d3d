"""The shard_map kernels of JAX's own tests and tutorial, as typed_shard_map kernels.

For every entry of ``kernels.ENTRIES`` (see ``kernels.py`` for the sources) and each axis type,
``harness.run`` runs JAX's ``jax.shard_map`` (the reference) and the same body under
``typed_shard_map`` with annotations made from the entry's specs (``annotate.py``), and compares.
An entry JAX accepts must *agree* (same numbers, no error, no ``KernelPassWarning``); one JAX
refuses must be refused by shardtypes too (any exception; which one is recorded by ``report.py``).
To keep the run short, an entry runs under ``jax.jit`` only, unless eager execution is what its
source tests (``harness.quick_modes``), and the few entries marked ``slow`` (seconds of XLA compile
each) are skipped; ``CORPUS_FULL=1`` runs every entry in every mode its source runs.

``KNOWN`` records today's entries that do not agree, each ``xfail(strict=True)``: when shardtypes
changes so that one agrees, it XPASSes and fails, and ``KNOWN`` must be updated. Keys are entry
names, or ``name[explicit]``/``name[auto]`` for one axis type; ``KNOWN_BY_JAX`` holds what only
some JAX releases do (its value None: agrees on that release).

``python tests/kernels/corpus/report.py`` prints every outcome and message.
"""

from __future__ import annotations

import pytest

import harness
import kernels

# Why an entry does not agree today (outcome, reason); report.py groups its messages the same way.
_REASSEMBLED = ("refused", "out_specs re-assemble the blocks along other dims or axes than the value is laid out in "
                "(tiling a replicated or gathered value, moving a mesh axis): 'it is laid out P(..) but the "
                "annotation says P(..)'")
_SPLIT_SUM = ("refused", "psum/pmax/pmin over a mesh axis that splits a dim of the operand, result returned: 'a sum "
              "of different blocks of a dim still owing a sum over that dim'")
_AXIS_TWICE = ("refused", "psum_scatter over an axis the dim (or another dim) is already split over: the pass makes "
               "a layout naming one mesh axis twice, e.g. P(('z', 'z', 'y'))")
_CONTRACT = ("refused", "dot_general contracting dims split over different mesh axes (drawn so by JAX's systematic "
             "test): 'each device would multiply blocks of different parts of the dim'")
_PARTIAL_RETURNED = ("refused", "a per-device sum or contraction over a split dim returned: 'a partial sum still "
                     "owing a sum'")
_RING = ("refused", "a collective matmul written with ppermute (the ring adds up every block): the pass sees only "
         "the first block's product, 'a partial sum still owing a sum'")
_PARTIAL_NONLINEAR = ("refused", "a per-device sum over a split dim fed to sin/exp: 'a partial sum ... reaches JAX's "
                      "'sin', which is not linear'")
_VARYING_REPLICATED = ("refused", "a value varying over a manual axis returned replicated where JAX does not check "
                       "(check_vma=False, or a cond predicate): 'it varies over mesh axis'")
_CUMSUM = ("refused", "cumsum along a split dim returned: 'a prefix over a split dim'")
_LIST_ANNOTATION = ("crash", "a list of unlike arrays returned (each with its own spec): shardtypes takes list[X] "
                    "for alike items and refuses the literal list annotation, naming tuple[...] (the body must "
                    "return a tuple)")
_TRACED_BOOL = ("crash", "Python control flow on a value in an eager kernel: typed_shard_map always stages the body "
                "(TracerBoolConversionError)")
_STAGED_EAGER = ("accepted", "JAX refuses jax.device_put(x, device) only in an eager shard_map body; typed_shard_map "
                 "stages the body, as under jax.jit")
_CALL_HI = ("stepped aside", "JAX 0.12's 'call_hi_primitive' (jnp.histogram, jnp.insert, jax.random.choice): no "
            "rule (KernelPassWarning)")

# Entries that do not agree today, on JAX 0.12.0.1, 0.10.2 and 0.9.2 alike (measured with report.py --quick).
KNOWN: dict[str, tuple[str, str]] = {
    "all_to_all_with_axis_index_groups": ("stepped aside", "a collective over axis_index_groups is not followed by "
                                          "the pass (one KernelPassWarning); the kernel runs"),
    "all_gather": _REASSEMBLED,
    "all_gather_with_axis_index_groups": _REASSEMBLED,
    "all_gather_with_vma_in_types": _REASSEMBLED,
    "collectives/all_gather_stacked_f5": _REASSEMBLED,
    "collectives/all_gather_tiled_f4": _REASSEMBLED,
    "collectives_not_saved": _REASSEMBLED,
    "eval_shape_vma": _REASSEMBLED,
    "pvary": _REASSEMBLED,
    "pvary/grad": _REASSEMBLED,
    "pvary_eager": _REASSEMBLED,
    "pvary_eager/grad": _REASSEMBLED,
    "systematic/dot/4x2": _REASSEMBLED,
    "systematic/ravel/2x4/vmap": _REASSEMBLED,
    "systematic/relu/1x2": _REASSEMBLED,
    "systematic/transpose/2x4/vmap": _REASSEMBLED,
    "systematic/transpose/4x2": _REASSEMBLED,
    "collectives/psum_scatter_f6": _AXIS_TWICE,
    "matmul_reduce_scatter": _AXIS_TWICE,
    "reduce_scatter_rgv3/multidim_mesh": _AXIS_TWICE,
    "reduce_scatter_rgv3/multidim_mesh_tuple_sharding": _AXIS_TWICE,
    "reduce_scatter_rgv3/simple": _AXIS_TWICE,
    "reduce_scatter_with_axis_index_groups": _AXIS_TWICE,
    "shmap_close_over_unused_params": _PARTIAL_RETURNED,
    "vmap_of_grad_spmd_axis_name": _PARTIAL_NONLINEAR,
    "axis_index_explicit_mesh_eager_shmap/no_vma": _VARYING_REPLICATED,
    "axis_index_unmapped": _VARYING_REPLICATED,
    "cond_rep_rule/pred_of_y_out_x": _VARYING_REPLICATED,
    "scan_rep_rule/keep": _LIST_ANNOTATION,
    "while_rep_rule/keep": _LIST_ANNOTATION,
    "axis_index_eager": _TRACED_BOOL,
    "eager_control_flow": _TRACED_BOOL,
    "device_put/to_device/eager": _STAGED_EAGER,
}

KNOWN_BY_JAX: dict[str, dict[str, tuple[str, str] | None]] = {
    "0.12": {  # JAX 0.12.0.1; agree on 0.10.2 and 0.9.2
        "jnp_histogram": _CALL_HI,
        "random_choice_pvary": _CALL_HI,
        "rep_none_canonicalization_again": _CALL_HI,
    },
}


# Entries that agree since the kernel pass learnt from this corpus (closed-over values, lists and
# dicts, copies under split annotations, psum_scatter of split values, all_to_all within a dim,
# axis_index_groups): measured on JAX 0.12.0.1; each must agree.
FIXED: frozenset[str] = frozenset({
    'all_gather[auto]',
    'all_gather[explicit]',
    'all_gather_with_vma_in_types[auto]',
    'all_gather_with_vma_in_types[explicit]',
    'collectives/all_gather_stacked_f5[auto]',
    'collectives/all_gather_stacked_f5[explicit]',
    'collectives/all_gather_tiled_f4[auto]',
    'collectives/all_gather_tiled_f4[explicit]',
    'collectives/psum_scatter_f6[auto]',
    'collectives/psum_scatter_f6[explicit]',
    'collectives_not_saved[auto]',
    'collectives_not_saved[explicit]',
    'eval_shape_vma[auto]',
    'eval_shape_vma[explicit]',
    'matmul_reduce_scatter[auto]',
    'matmul_reduce_scatter[explicit]',
    'pvary/grad[auto]',
    'pvary/grad[explicit]',
    'pvary[auto]',
    'pvary[explicit]',
    'pvary_eager/grad[auto]',
    'pvary_eager/grad[explicit]',
    'pvary_eager[auto]',
    'pvary_eager[explicit]',
    'reduce_scatter_rgv3/multidim_mesh[auto]',
    'reduce_scatter_rgv3/multidim_mesh[explicit]',
    'reduce_scatter_rgv3/multidim_mesh_tuple_sharding[auto]',
    'reduce_scatter_rgv3/multidim_mesh_tuple_sharding[explicit]',
    'reduce_scatter_rgv3/simple[auto]',
    'reduce_scatter_rgv3/simple[explicit]',
    'systematic/dot/4x2[auto]',
    'systematic/dot/4x2[explicit]',
    'systematic/ravel/2x4/vmap[auto]',
    'systematic/ravel/2x4/vmap[explicit]',
    'systematic/relu/1x2[auto]',
    'systematic/relu/1x2[explicit]',
    'systematic/transpose/2x4/vmap[auto]',
    'systematic/transpose/2x4/vmap[explicit]',
    'systematic/transpose/4x2[auto]',
    'systematic/transpose/4x2[explicit]',
})


def known(name: str, kind: str) -> tuple[str, str] | None:
    if f"{name}[{kind}]" in FIXED:
        return None
    version = harness.jax_version()
    for key in (f"{name}[{kind}]", name):
        specific = KNOWN_BY_JAX.get(version, {})
        if key in specific:
            return specific[key]
        if key in KNOWN:
            return KNOWN[key]
    return None


def _params() -> list:
    out = []
    for entry in kernels.ENTRIES:
        for kind in entry.kinds:
            k = known(entry.name, kind)
            marks = [pytest.mark.xfail(strict=True, reason=f"{k[0]}: {k[1]}")] if k else []
            out.append(pytest.param(entry, kind, id=f"{entry.name}[{kind}]", marks=marks))
    return out


@pytest.mark.parametrize("entry, kind", _params())
def test_corpus_entry(entry: harness.Entry, kind: str) -> None:
    if entry.slow and not harness.full():
        pytest.skip("slow to compile: run with CORPUS_FULL=1 (report.py runs it)")
    result = harness.run(entry, kind, harness.quick_modes(entry))
    if result.outcome == harness.SKIPPED:
        pytest.skip(result.message)
    assert not result.outcome.startswith("harness"), f"the entry is wrong: {result.outcome}: {result.message}"
    if entry.jax_refuses is not None:
        assert result.outcome in (harness.REFUSED, harness.JAX_ERROR, harness.CRASH), result.short()
    else:
        assert result.outcome == harness.AGREE, result.short()


def test_corpus_is_wide() -> None:
    """Over 100 kernels, with unique names, and every KNOWN key names one."""
    names = {e.name for e in kernels.ENTRIES}
    assert len(names) == len(kernels.ENTRIES) > 100
    keys = set(KNOWN) | {k for table in KNOWN_BY_JAX.values() for k in table}
    stray = sorted(k for k in keys if k.split("[")[0] not in names and k not in names)
    assert not stray, stray
