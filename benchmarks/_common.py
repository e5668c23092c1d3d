"""Helpers shared by the benchmark scripts (not part of the package)."""

from __future__ import annotations

import re
import timeit
from typing import Callable


def program_text(jitted, *args) -> str:
    """The optimised HLO of ``jitted`` without what only names the source: the module name and
    source-location metadata (file and function names differ between two functions by design)."""
    text = jitted.lower(*args).compile().as_text()
    lines = []
    skipping = False
    for line in text.splitlines():
        if line.startswith("HloModule "):
            line = "HloModule " + line.split(",", 1)[1]
        if line in ("FileNames", "FunctionNames", "FileLocations", "StackFrames"):
            skipping = True
            continue
        if skipping:
            if line.strip() == "":
                skipping = False
            continue
        lines.append(re.sub(r",? ?metadata=\{[^}]*\}", "", line))
    return "\n".join(lines)


def measure(fns: dict[str, Callable[[], object]], number: int, repeat: int) -> dict[str, float]:
    """Best µs per call of each zero-argument function; they take turns so drift hits all alike."""
    best = {name: float("inf") for name in fns}
    for _ in range(repeat):
        for name, fn in fns.items():
            seconds = timeit.timeit(fn, number=number)
            best[name] = min(best[name], seconds / number * 1e6)
    return best
