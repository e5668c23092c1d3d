"""Runs every corpus entry once per axis type and prints what happened.

    python tests/kernel_pass/corpus/report.py [--full] [--kinds explicit,auto] [NAME_SUBSTRING ...]

Prints the counts of each outcome (for kernels JAX accepts: agree, refused, annotation refused,
crash, differs, stepped aside; for kernels JAX refuses: refused by shardtypes' TypeCheckError, JAX's error passed
through, crash, accepted), then each entry that does not agree with the first 200 characters of
its message (all of it with ``--full``), and where ``KNOWN`` in test_corpus.py says otherwise.
Run from the repository root; it imports the package from this checkout.
"""

from __future__ import annotations

import argparse
import collections
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
sys.path[:0] = [ROOT, os.path.join(ROOT, "tests"), HERE]  # this checkout's shardtypes, conftest, the corpus

import conftest  # noqa: E402,F401  (8 simulated CPU devices, before JAX starts)

# isort: split
import jax  # noqa: E402

import harness  # noqa: E402
import kernels  # noqa: E402
from test_corpus import known  # noqa: E402

# What a message says, in a few words (first match wins): for grouping the report.
CAUSES = [
    (r"unhashable type: '(list|dict)'", "crash: a list/dict in the kernel's arguments or result (shardtypes' "
     "documented literal list/dict annotation fails in typeguard)"),
    (r"TracerBoolConversionError|ConcretizationTypeError", "crash: Python control flow on a value in an eager "
     "kernel (typed_shard_map always stages the body)"),
    (r"sum of different blocks|maximum of different blocks|minimum of different blocks",
     "refused: psum/pmax/pmin over a mesh axis that splits a dim of the operand, result returned"),
    (r"split over '(\w+)'/'\1'|P\(\(('\w+', )*'(\w+)', ('\w+', )*'\3'|(\('[\w', ]+\)), \5",
     "refused: psum_scatter over axes the dim (or another dim) is already split over: the pass makes a layout "
     "naming an axis twice"),
    (r"reaches JAX's '\w+', which is not linear", "refused: a per-device partial sum (jnp.sum over a split dim) "
     "fed to a nonlinear op"),
    (r"is a partial sum still owing a sum", "refused: a per-device partial sum (sum/contraction over a split dim) "
     "returned"),
    (r"contracts dim \d+ of an operand laid out", "refused: dot_general contracting dims split over different "
     "mesh axes"),
    (r"prefix over a split dim", "refused: cumsum along a split dim returned"),
    (r"varies over mesh ax[ie]s .* but the annotation says it is the same on every device",
     "refused: a value varying over a manual axis returned replicated (JAX does not check: check_vma=False, or "
     "a cond predicate)"),
    (r"is laid out P.*but the annotation says P", "refused: the result's blocks are re-assembled by out_specs "
     "along other dims/axes than they are laid out (tiling a replicated or gathered value, moving an axis)"),
    (r"kernel pass cannot follow JAX's '(\w+)'", "stepped aside: no rule for a primitive"),
    (r"shardtypes ran a kernel JAX refuses", "accepted: JAX refuses it eagerly only; typed_shard_map stages "
     "the body"),
    (r"worst \|difference\|", "differs"),
]


def cause(result: harness.Result) -> str:
    import re
    for pattern, label in CAUSES:
        if re.search(pattern, result.message):
            return label
    return f"{result.outcome}: other"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", help="only entries whose name contains one of these")
    parser.add_argument("--full", action="store_true", help="whole messages")
    parser.add_argument("--kinds", default="explicit,auto")
    parser.add_argument("--quick", action="store_true",
                        help="what the test runs (harness.quick_modes, no slow entries), not every mode the "
                             "source runs")
    opts = parser.parse_args()
    kinds = opts.kinds.split(",")
    import shardtypes
    print(f"JAX {jax.__version__}, shardtypes from {os.path.dirname(shardtypes.__file__)}; "
          f"{'the test' if opts.quick else 'the source'}'s modes")
    print(f"{len(kernels.ENTRIES)} entries; {len(kernels.NOT_INCLUDED)} source items not included")
    accepted: collections.Counter = collections.Counter()
    refused_by_jax: collections.Counter = collections.Counter()
    rows = []
    start = time.time()
    for entry in kernels.ENTRIES:
        if opts.names and not any(n in entry.name for n in opts.names):
            continue
        for kind in entry.kinds:
            if kind not in kinds or (opts.quick and entry.slow):
                continue
            result = harness.run(entry, kind, harness.quick_modes(entry) if opts.quick else None)
            (refused_by_jax if entry.jax_refuses is not None else accepted)[result.outcome] += 1
            expected = known(entry.name, kind)
            rows.append((entry, kind, result, expected))
    print(f"({time.time() - start:.0f} s)\n")
    print("Kernels JAX accepts (entry x axis type):")
    for outcome in (harness.AGREE, harness.REFUSED, harness.ANNOTATION, harness.CRASH, harness.DIFFERS, harness.STEPPED):
        print(f"  {outcome:18s} {accepted.pop(outcome, 0)}")
    for outcome, n in sorted(accepted.items()):
        print(f"  {outcome:18s} {n}")
    print("Kernels JAX refuses:")
    for outcome in (harness.REFUSED, harness.JAX_ERROR, harness.ANNOTATION, harness.CRASH, harness.ACCEPTED):
        print(f"  {outcome:18s} {refused_by_jax.pop(outcome, 0)}")
    for outcome, n in sorted(refused_by_jax.items()):
        print(f"  {outcome:18s} {n}")

    print("\nNot agreeing:")
    for entry, kind, result, expected in rows:
        if result.outcome in (harness.AGREE, harness.SKIPPED):
            continue
        if entry.jax_refuses is not None and result.outcome != harness.ACCEPTED:
            continue
        message = result.message if opts.full else result.message[:200]
        print(f"- {entry.name} [{kind}] ({result.mode}) {result.outcome}: {message}")
    print("\nKernels JAX refuses (what shardtypes raised):")
    for entry, kind, result, expected in rows:
        if entry.jax_refuses is None or result.outcome == harness.SKIPPED:
            continue
        message = result.message if opts.full else result.message[:200]
        print(f"- {entry.name} [{kind}] {result.outcome}: {message}")
    groups: dict = collections.defaultdict(list)
    for entry, kind, result, expected in rows:
        if result.outcome in (harness.AGREE, harness.SKIPPED) or entry.jax_refuses is not None:
            continue
        groups[cause(result)].append((entry, kind, result))
    print("\nNot agreeing, by cause (entries, entry x axis type runs):")
    for label, items in sorted(groups.items(), key=lambda kv: -len(kv[1])):
        names = sorted({e.name for e, _, _ in items})
        print(f"* {label}: {len(names)} entries, {len(items)} runs")
        print(f"    {', '.join(names)}")
        first = items[0][2].message
        print(f"    e.g. {first if opts.full else first[:300]}")
    mismatched = []
    for entry, kind, result, expected in rows:
        if result.outcome == harness.SKIPPED:
            continue
        fails = (result.outcome not in (harness.REFUSED, harness.JAX_ERROR, harness.ANNOTATION, harness.CRASH)
                 if entry.jax_refuses is not None else result.outcome != harness.AGREE)
        if fails and expected is None:
            mismatched.append(f"{entry.name} [{kind}]: {result.outcome}, not in KNOWN")
        elif not fails and expected is not None:
            mismatched.append(f"{entry.name} [{kind}]: passes, but KNOWN says {expected[0]}")
        elif fails and expected is not None and expected[0] != result.outcome:
            mismatched.append(f"{entry.name} [{kind}]: {result.outcome}, KNOWN says {expected[0]}")
    print(f"\nKNOWN (test_corpus.py) out of date: {len(mismatched)}")
    for line in mismatched:
        print(f"- {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
