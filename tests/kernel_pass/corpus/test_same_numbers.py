"""``assert_same_on_every_mesh`` on a sample of the corpus (same_numbers.py): no false alarm, and the
kernels whose global result depends on the size of an axis by design are the ones that need keep=.

The sample covers psum, all_gather, psum_scatter, ppermute rings with axis_index offsets,
all_to_all, a pipeline, nested and partial-auto kernels (axis_names), on Explicit axes; the whole
corpus runs with ``python benchmarks/same_numbers.py``. Each outcome that is not ``same`` was put to
JAX's own ``jax.shard_map`` of the entry on the same two meshes by the runner, which gives other
numbers there too (else it would be a false alarm).
"""

from __future__ import annotations

import pytest

import kernels
import same_numbers_runner as same_numbers

# Global functions: the same numbers on every mesh tried.
SAME = (
    "matmul_basic",  # psum of a contraction split over 'y'
    "matmul/matmul_allgather",  # all_gather of the weights
    "matmul/matmul_psumscatter",  # psum_scatter
    "matmul/matmul_psumscatter_overlapped",  # a ppermute ring with axis_index offsets
    "all_to_all_grad",  # all_to_all
    "nested_partial_auto",  # a kernel nested in a kernel, axis_names={'i'}
    "partial_manual_explicit_shmap/x",  # partial-manual over Explicit axes
    "nn/loss_dp",  # data parallelism: pmean of the loss
    "nn/loss_pp",  # a pipeline of ppermutes over 'stages'
)

# Mesh-dependent by design: the axis whose size the result depends on, and whether holding it at its
# size on the entry's own mesh leaves other meshes that then agree (False: a one-axis kernel, nothing
# is left to compare).
KEEP = {
    "f3_psum_j": ("j", True),  # a psum over 'j' returned tiled over 'j' by out_specs
    "collectives/psum_f2": ("i", True),
    "partial_eval_custom_axis_env": ("i", False),  # axis_index as the result: a per-device value
    "collectives/ppermute_f7": ("i", False),  # a ring shift: which block moves where depends on the size
}

# Mesh-dependent by design, over several axes at once (the result's global shape).
BY_DESIGN = ("f5_psum_ij",)

_NAMES = (*SAME, *KEEP, *BY_DESIGN)


@pytest.fixture(scope="module")
def results() -> dict[str, same_numbers.Result]:
    names = {e.name for e in kernels.ENTRIES}
    missing = [n for n in _NAMES if n not in names]
    assert not missing, f"corpus entries renamed or removed: {missing}"
    return {r.name: r for r in same_numbers.run_corpus(_NAMES, kinds=("explicit",))}


def test_no_false_alarm(results: dict[str, same_numbers.Result]) -> None:
    false = {n: r.detail for n, r in results.items() if r.outcome == same_numbers.FALSE_ALARM}
    assert not false, false


@pytest.mark.parametrize("name", SAME)
def test_same(results: dict[str, same_numbers.Result], name: str) -> None:
    r = results[name]
    assert r.outcome == same_numbers.SAME, f"{r.outcome}: {r.detail}"
    assert r.meshes >= 3, r.detail
    assert "KernelPassWarning" not in r.detail, r.detail


@pytest.mark.parametrize("name", sorted(KEEP))
def test_needs_keep(results: dict[str, same_numbers.Result], name: str) -> None:
    axis, passes = KEEP[name]
    r = results[name]
    assert (r.outcome, r.axis) == (same_numbers.KEEP, axis), f"{r.outcome} {r.axis!r}: {r.detail}"
    assert "JAX's own shard_map: differs" in r.detail, r.detail
    if passes:
        assert r.detail.startswith(f"passes with keep={{'{axis}'"), r.detail
    else:
        assert "no mesh but the reference" in r.detail, r.detail


@pytest.mark.parametrize("name", BY_DESIGN)
def test_by_design(results: dict[str, same_numbers.Result], name: str) -> None:
    r = results[name]
    assert r.outcome == same_numbers.BY_DESIGN_OUTCOME, f"{r.outcome}: {r.detail}"
    assert "JAX's own shard_map: differs" in r.detail, r.detail
