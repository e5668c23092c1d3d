"""shardtypes.testing.assert_same_on_every_mesh over the corpus of JAX's own shard_map kernels, and
over the correct kernels and realistic mistakes of tests/testing/mistake_kernels.py, in one run.

    python benchmarks/same_numbers.py [--kinds explicit,auto] [--verify] [--full] [--no-mistakes] [NAME ...]

For each corpus entry that JAX accepts and shardtypes runs on the entry's own mesh
(tests/kernel_pass/corpus/same_numbers.py says how it is made a kernel and what each outcome
means), the check runs over the entry's mesh axis names from the entry's own global arguments,
and the run prints: the count of each outcome (same, needs keep, by design, false alarm, skipped,
refused, error, excluded), the kernels that need keep= with the axis (and whether holding it at its
size on the entry's mesh then passes), every false alarm, every error, and the time per kernel:
median and max, and as a ratio against the peer, the same kernel run once on its own mesh the way
the check runs it on each mesh (laid out, called, compiled), measured in the same run just before
(a check runs 3 to 16 meshes plus a perturbed rerun of the reference: expect ratios of that order).

Then, where tests/testing/mistake_kernels.py exists, each of its cases is checked as its fields
say; for a mistake it prints whether the kernel pass caught it (typeguard.TypeCheckError), the
mesh check did (MeshMismatch, with the first line of its diagnosis) or neither; for a correct
kernel, whether it passes.

``--verify`` also runs the corpus harness (JAX's shard_map against the typed kernel) on each entry
first and leaves out those that do not agree in this run (by default ``test_corpus.KNOWN`` says);
``--full`` includes the entries marked slow. Names are exact corpus entry names.
"""

from __future__ import annotations

import argparse
import collections
import importlib.util
import os
import statistics
import sys
import time
import traceback
import warnings

import jax

jax.config.update("jax_num_cpu_devices", 8)

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
CORPUS = os.path.join(ROOT, "tests", "kernel_pass", "corpus")
sys.path[:0] = [ROOT, os.path.join(ROOT, "tests"), CORPUS]  # this checkout's shardtypes, conftest, the corpus

import conftest  # noqa: E402,F401  (8 simulated CPU devices, as the tests have them)

# isort: split
from typeguard import TypeCheckError  # noqa: E402

from shardtypes.testing import MeshMismatch, assert_same_on_every_mesh  # noqa: E402

import same_numbers_runner as same_numbers  # noqa: E402

MISTAKES = os.path.join(ROOT, "tests", "testing", "mistake_kernels.py")


def _short(text: str, n: int = 220) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= n else text[: n - 3] + "..."


def corpus(opts: argparse.Namespace) -> None:
    kinds = tuple(opts.kinds.split(","))
    start = time.perf_counter()
    count = [0]

    def progress(result: same_numbers.Result) -> None:
        count[0] += 1
        if count[0] % 25 == 0:
            print(f"  ... {count[0]} entries x axis types, {time.perf_counter() - start:.0f} s", flush=True)

    results = same_numbers.run_corpus(opts.names or None, kinds=kinds, peer=True, verify=opts.verify,
                                      full=opts.full, progress=progress)
    total = time.perf_counter() - start
    ran = [r for r in results if r.outcome != same_numbers.EXCLUDED]
    print(f"\nCorpus: {len(results)} entries x axis types ({', '.join(kinds)}), {len(ran)} checked, "
          f"{total:.0f} s in all (the peers and the classification's reruns included)")
    counts = collections.Counter(r.outcome for r in results)
    for outcome in same_numbers.OUTCOMES:
        print(f"  {outcome:12s} {counts.pop(outcome, 0)}")
    for outcome, n in sorted(counts.items()):
        print(f"  {outcome:12s} {n}")

    def rows(outcome: str) -> list[same_numbers.Result]:
        return [r for r in results if r.outcome == outcome]

    keep = rows(same_numbers.KEEP)
    if keep:
        passes = sum("passes with keep" in r.detail for r in keep)
        alone = sum("no mesh but the reference" in r.detail for r in keep)
        print(f"\nNeeding keep= ({len(keep)}; then passing: {passes}; one-axis kernels with nothing left to compare: "
              f"{alone}; still differing or other: {len(keep) - passes - alone}):")
        for r in keep:
            print(f"  {r.name} [{r.kind}] keep {r.axis!r}: {_short(r.detail.split(' [')[0], 160)}")
    design = rows(same_numbers.BY_DESIGN_OUTCOME)
    if design:
        print(f"\nMesh-dependent by design, no single axis to hold ({len(design)}; JAX's own shard_map differs too):")
        for r in design:
            print(f"  {r.name} [{r.kind}]: {_short(r.detail.split(' (JAX')[0], 120)}")
    false = rows(same_numbers.FALSE_ALARM)
    print(f"\nFalse alarms ({len(false)}):" + ("" if false else " none"))
    for r in false:
        print(f"  {r.name} [{r.kind}]: {_short(r.detail, 600)}")
    for outcome, title in ((same_numbers.ERROR, "Errors (then, once the meshes JAX cannot run are left out)"),
                           (same_numbers.REFUSED, "Refused (TypeCheckError on some mesh)"),
                           (same_numbers.SKIPPED, "Skipped (fewer than 2 meshes could run)")):
        group = rows(outcome)
        if group:
            print(f"\n{title} ({len(group)}):")
            for r in group:
                print(f"  {r.name} [{r.kind}]: {_short(r.detail, 400)}")
    after = collections.Counter(r.after for r in rows(same_numbers.ERROR) if r.after)
    if after:
        print("  errors, by what the check says once those meshes are left out: "
              + ", ".join(f"{k} {v}" for k, v in sorted(after.items())))
    if opts.excluded:
        print(f"\nExcluded ({len(rows(same_numbers.EXCLUDED))}):")
        for r in rows(same_numbers.EXCLUDED):
            print(f"  {r.name} [{r.kind}]: {_short(r.detail, 160)}")
    else:
        reasons = collections.Counter(r.detail.split(" (")[0].split(":")[0] for r in rows(same_numbers.EXCLUDED))
        print(f"\nExcluded ({sum(reasons.values())}): " + "; ".join(f"{k}: {v}" for k, v in reasons.most_common()))

    timed = [r for r in ran if r.seconds > 0]
    if timed:
        seconds = [r.seconds for r in timed]
        slowest = max(timed, key=lambda r: r.seconds)
        print(f"\nTime per checked kernel ({len(timed)}): median {statistics.median(seconds):.2f} s, "
              f"max {slowest.seconds:.2f} s ({slowest.name} [{slowest.kind}], {slowest.outcome}), "
              f"sum {sum(seconds):.0f} s")
        same = [r for r in timed if r.outcome == same_numbers.SAME and r.peer_seconds]
        if same:
            ratios = [r.seconds / r.peer_seconds for r in same]
            worst = max(same, key=lambda r: r.seconds / r.peer_seconds)
            meshes = statistics.median(r.meshes for r in same)
            print(f"  against the peer (the kernel once on its own mesh, same run), kernels that pass ({len(same)}): "
                  f"median {statistics.median(ratios):.1f}x, max {max(ratios):.1f}x ({worst.name}), "
                  f"{sum(r.seconds for r in same) / sum(r.peer_seconds for r in same):.1f}x in all; "
                  f"median {meshes:g} meshes run")
            print(f"  peer: median {statistics.median(r.peer_seconds for r in same):.3f} s; check per mesh run: "
                  f"median {statistics.median(r.seconds / r.meshes for r in same):.3f} s")
        other = [r for r in timed if r.outcome != same_numbers.SAME and r.peer_seconds]
        if other:
            ratios = [r.seconds / r.peer_seconds for r in other]
            print(f"  kernels that do not pass ({len(other)}; the keep= retry and JAX's own shard_map reruns "
                  f"included): median {statistics.median(ratios):.1f}x the peer, max {max(ratios):.1f}x")


def _load_mistakes():
    spec = importlib.util.spec_from_file_location("mistake_kernels", MISTAKES)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["mistake_kernels"] = module  # (typeguard reads its source by module name)
    spec.loader.exec_module(module)
    return module


def mistakes() -> None:
    if not os.path.exists(MISTAKES):
        print(f"\nMistake cases: {os.path.relpath(MISTAKES, ROOT)} does not exist (yet); nothing to run")
        return
    try:
        module = _load_mistakes()
        cases = list(getattr(module, "CASES"))
    except Exception as e:  # noqa: BLE001  (another engineer's file, possibly mid-edit)
        print(f"\nMistake cases: cannot load {os.path.relpath(MISTAKES, ROOT)}: {type(e).__name__}: {_short(e, 300)}")
        return
    print(f"\nMistake cases ({len(cases)}, from {os.path.relpath(MISTAKES, ROOT)}):")
    tally: collections.Counter = collections.Counter()
    seconds: list[float] = []
    for case in cases:
        name = getattr(case, "name", repr(case))
        correct = getattr(case, "correct", None)
        make_args = getattr(case, "make_args", None)
        start = time.perf_counter()
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                args = make_args() if make_args else ()
                dims = None if make_args else getattr(case, "dims", None)
                report = assert_same_on_every_mesh(case.kernel, *args, dims=dims, keep=getattr(case, "keep", None),
                                                   axes=getattr(case, "axes", None))
            what, said = "neither", f"passes on {len(report.ran)} meshes"
        except TypeCheckError as e:
            what, said = "kernel pass", _short(str(e).splitlines()[0] if str(e) else type(e).__name__, 200)
        except MeshMismatch as e:
            line = (e.diagnosis or "").splitlines()[0] if e.diagnosis else "(no diagnosis) " + str(e).splitlines()[0]
            what, said = "mesh check", _short(line, 200)
        except Exception as e:  # noqa: BLE001
            what, said = "error", _short(f"{type(e).__name__}: {e}", 300)
            if os.environ.get("SAME_NUMBERS_TRACEBACK"):
                traceback.print_exc()
        seconds.append(time.perf_counter() - start)
        if correct is None:
            verdict = "passes" if what == "neither" else f"DOES NOT PASS ({what})"
            tally[f"correct: {'passes' if what == 'neither' else 'does not pass (' + what + ')'}"] += 1
            print(f"  [correct] {name}: {verdict}: {said}")
        else:
            tally[f"mistake caught by: {what}"] += 1
            note = getattr(case, "note", "")
            tail = f" (note: {_short(note, 120)})" if what == "neither" and note else ""
            print(f"  [mistake of {correct}, {getattr(case, 'kind', '?')}] {name}: {what}: {said}{tail}")
    print("  " + "; ".join(f"{k} {v}" for k, v in sorted(tally.items())))
    if seconds:
        print(f"  time per case: median {statistics.median(seconds):.2f} s, max {max(seconds):.2f} s, "
              f"sum {sum(seconds):.0f} s")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help="only these corpus entries (exact names)")
    parser.add_argument("--kinds", default="explicit", help="axis types: explicit, auto or explicit,auto")
    parser.add_argument("--verify", action="store_true", help="run the corpus harness first on each entry")
    parser.add_argument("--full", action="store_true", help="include the entries marked slow")
    parser.add_argument("--excluded", action="store_true", help="list every excluded entry with why")
    parser.add_argument("--no-mistakes", action="store_true", help="skip tests/testing/mistake_kernels.py")
    parser.add_argument("--no-corpus", action="store_true", help="only the mistake cases")
    opts = parser.parse_args()
    print(f"JAX {jax.__version__}, {jax.device_count()} {jax.devices()[0].platform} devices")
    if not opts.no_corpus:
        corpus(opts)
    if not opts.no_mistakes:
        mistakes()
    return 0


if __name__ == "__main__":
    sys.exit(main())
