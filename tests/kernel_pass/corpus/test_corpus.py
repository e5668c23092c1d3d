"""The shard_map kernels of JAX's own tests and tutorial, as typed_shard_map kernels.

For every entry of ``kernels.ENTRIES`` (gathered from one module per source, ``from_*.py``) and
each axis type, ``harness.run`` runs JAX's ``jax.shard_map`` (the reference) and the same body under
``typed_shard_map`` with annotations made from the entry's specs (``annotate.py``), and compares.
An entry JAX accepts must *agree* (same numbers, no error, no ``KernelPassWarning``); one JAX
refuses must be refused by shardtypes too (any exception; which one is recorded by ``report.py``).
To keep the run short, an entry runs under ``jax.jit`` only, unless eager execution is what its
source tests (``harness.quick_modes``), and the few entries marked ``slow`` (seconds of XLA compile
each) are skipped; ``CORPUS_FULL=1`` runs every entry in every mode its source runs.

``KNOWN`` records today's entries that do not agree (16 of 348 on JAX 0.12), each
``xfail(strict=True)``: when shardtypes changes so that one agrees, it XPASSes and fails, and
``KNOWN`` must be updated. Keys are entry
names, or ``name[explicit]``/``name[auto]`` for one axis type; ``KNOWN_BY_JAX`` holds what only
some JAX releases do (its value None: agrees on that release).

``python tests/kernel_pass/corpus/report.py`` prints every outcome and message.
"""

from __future__ import annotations

import pytest

import harness
import kernels

# Why an entry does not agree today (outcome, reason); report.py groups its messages the same way.
# docs/shard-map.md lists each with the one-line change that makes it run.
_GROUPS = ("stepped aside", "a collective over axis_index_groups is not followed by the pass (one "
           "KernelPassWarning); the kernel runs")
_PARTIAL_RETURNED = ("refused", "a partial sum (or sin of one) returned as the whole with check_vma=False, where JAX "
                     "returns device 0's part: 'a partial sum still owing a sum'")
_VARYING_REPLICATED = ("refused", "a value varying over a manual axis returned replicated where JAX does not check "
                       "(check_vma=False, or a cond predicate): 'it varies over mesh axis'")
_LIST_ANNOTATION = ("annotation refused", "a list of unlike arrays returned (each with its own spec): shardtypes takes list[X] "
                    "for alike items and refuses the literal list annotation, naming tuple[...] (the body must "
                    "return a tuple)")
_EAGER_BRANCH = ("stepped aside", "Python control flow on a value in an eager kernel: the body runs eagerly, as "
                 "JAX runs it, with one KernelPassWarning (the pass follows staged bodies)")
_STAGED_EAGER = ("accepted", "JAX refuses jax.device_put(x, device) only in an eager shard_map body; typed_shard_map "
                 "stages the body, as under jax.jit")
_AUTO_RESULT = ("refused", "a partial-manual kernel whose body lays its result out over an Auto axis the annotation "
                "made from out_specs does not name (with_sharding_constraint(x, P('j'))): the compile-time check "
                "of the result's layout over the axes left to XLA says so")
_CALL_HI = ("stepped aside", "JAX 0.12's 'call_hi_primitive' (jnp.histogram, jnp.insert, jax.random.choice): no "
            "rule (KernelPassWarning)")

# Entries that do not agree today, on JAX 0.12.0.1, 0.10.2 and 0.9.2 alike (measured with report.py).
KNOWN: dict[str, tuple[str, str]] = {
    "all_to_all_with_axis_index_groups": _GROUPS,
    "all_gather_with_axis_index_groups": _GROUPS,
    "reduce_scatter_with_axis_index_groups": _GROUPS,
    "shmap_close_over_unused_params": _PARTIAL_RETURNED,
    "vmap_of_grad_spmd_axis_name": _PARTIAL_RETURNED,
    "axis_index_explicit_mesh_eager_shmap/no_vma": _VARYING_REPLICATED,
    "axis_index_unmapped": _VARYING_REPLICATED,
    "cond_rep_rule/pred_of_y_out_x": _VARYING_REPLICATED,
    "scan_rep_rule/keep": _LIST_ANNOTATION,
    "while_rep_rule/keep": _LIST_ANNOTATION,
    "axis_index_eager": _EAGER_BRANCH,
    "eager_control_flow": _EAGER_BRANCH,
    "device_put/to_device/eager": _STAGED_EAGER,
    "partial_auto_ppermute[auto]": _AUTO_RESULT,
}

KNOWN_BY_JAX: dict[str, dict[str, tuple[str, str] | None]] = {
    "0.12": {  # JAX 0.12.0.1; agree on 0.10.2 and 0.9.2
        "jnp_histogram": _CALL_HI,
        "random_choice_pvary": _CALL_HI,
        "rep_none_canonicalization_again": _CALL_HI,
    },
}


def known(name: str, kind: str) -> tuple[str, str] | None:
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
        assert result.outcome in (harness.REFUSED, harness.JAX_ERROR, harness.ANNOTATION, harness.CRASH), result.short()
    else:
        assert result.outcome == harness.AGREE, result.short()


def test_corpus_is_wide() -> None:
    """Over 100 kernels, with unique names, and every KNOWN key names one."""
    names = {e.name for e in kernels.ENTRIES}
    assert len(names) == len(kernels.ENTRIES) > 100
    keys = set(KNOWN) | {k for table in KNOWN_BY_JAX.values() for k in table}
    stray = sorted(k for k in keys if k.split("[")[0] not in names and k not in names)
    assert not stray, stray
