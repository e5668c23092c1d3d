"""The mesh check over kernels in the style of public model codebases (``mistake_kernels.py``):
every correct kernel passes unchanged (no false alarm), and each realistic mistake is refused by
the kernel pass, caught by the mesh check, or invisible to it by construction, as listed here.

``benchmarks/same_numbers.py`` runs the whole corpus and times it; the suite runs every correct
kernel and one mistake of each kind (every mistake where ``SHARDTYPES_ALL_MISTAKES=1``).
"""

from __future__ import annotations

import os

import jax
import pytest
from typeguard import TypeCheckError

from shardtypes.testing import MeshMismatch, assert_same_on_every_mesh

from mistake_kernels import CASES

# The kernel pass refuses these (a layout or a sum the annotations contradict).
REFUSED = {"ulysses_attention/split_hdim", "zero_grad_scatter/axis_order", "zero_grad_scatter/scatter_dim",
           "tp_mlp/bias_in_psum", "fsdp_matmul/gather_order", "rmsnorm_tp/local"}
# Invisible by construction: the same wrong numbers on every mesh (the mistake lives on a held
# axis, or happens on one device too).
INVISIBLE = {"gpipe/wrong_direction", "causal_conv_halo/wraparound"}


# The suite tries the two meshes where every mistake here shows (four devices along each axis in
# turn: a ring of two turns both ways); the benchmark tries the default covering set.
SUITE_MESHES = [{"d": 2, "t": 4}, {"d": 4, "t": 2}]


def _run(case):
    args = case.make_args() if case.make_args else ()
    meshes = SUITE_MESHES if case.axes == ("d", "t") and os.environ.get("SHARDTYPES_ALL_MISTAKES") != "1" else None
    return assert_same_on_every_mesh(jax.jit(case.kernel), *args, dims=None if case.make_args else case.dims,
                                     keep=case.keep, axes=case.axes, meshes=meshes)


def _sample() -> list:
    if os.environ.get("SHARDTYPES_ALL_MISTAKES") == "1":
        return list(CASES)
    seen: set = set()
    chosen = []
    for case in CASES:
        if case.correct is None or case.name in INVISIBLE or case.kind not in seen:
            chosen.append(case)
            if case.correct is not None:
                seen.add(case.kind)
    return chosen


def test_the_corpus_holds_every_kind_the_issue_names():
    kinds = {c.kind for c in CASES if c.correct is not None}
    assert {"ring direction", "offset", "sum for mean", "scatter axis", "all_to_all axes", "stage direction"} <= kinds
    assert sum(c.correct is not None for c in CASES) >= 24
    names = {c.name for c in CASES}
    assert REFUSED | INVISIBLE <= names


@pytest.mark.parametrize("case", _sample(), ids=lambda c: c.name)
def test_each_case_of_the_corpus(case):
    if case.correct is None or case.name in INVISIBLE:
        report = _run(case)
        assert len(report.ran) >= 2
    elif case.name in REFUSED:
        with pytest.raises(TypeCheckError):
            _run(case)
    else:
        with pytest.raises(MeshMismatch) as info:
            _run(case)
        assert info.value.mesh != info.value.reference
