"""The kernel oracle's grammar (tests/kernel_pass/test_kernel_oracle.py draws from it): random
typed_shard_map kernels with their numpy meaning, and how one is built and judged.

* ``judging``: a program (mesh, how it is called, kernel and reference source), building it,
  its inputs, the two verdicts (the numbers with checks off, the pass with checks on);
* ``draft``: the value the grammar follows, the kernel under construction, the collectives that
  finish a partial result (psum, pmax, ppermute rings), and ``OPEN_FINDINGS``;
* ``steps``: elementwise ops, reductions, matmuls, psum_scatter, gathers, cumsums, prefix sums,
  cond, scan;
* ``collectives``: all_to_all, psum_scatter over an axis owing nothing, while/fori loops,
  closures, list and dict arguments, nested shard_maps;
* ``programs``: meshes, layouts, the return annotation's perturbations, whole programs.
"""

from .draft import OPEN_FINDINGS, drawn
from .judging import Program, Unrunnable, Verdicts, assert_agrees, judge, report, stepped_aside
from .programs import programs

__all__ = ["OPEN_FINDINGS", "Program", "Unrunnable", "Verdicts", "assert_agrees", "drawn", "judge", "programs",
           "report", "stepped_aside"]
