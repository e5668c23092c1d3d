"""Helpers shared by the benchmark scripts (not part of the package)."""

from __future__ import annotations

import importlib.util
import os
import re
import sys
import timeit
from types import ModuleType
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


def without_names(program: str) -> str:
    """``program`` (from ``program_text``) with instruction and computation names replaced:
    two programs equal here run the same instructions in the same order. (JAX names the
    reductions of values it types unreduced ``unreduced_reduce_scatter.4`` where it would
    otherwise say ``reduce_scatter.23``.)"""
    text = re.sub(r"%[\w.\-]+", "%v", program)
    text = re.sub(r"\b[A-Za-z_][\w\-]*\.\d+\b", "v", text)
    return re.sub(r"region_[\d.]+", "region", text)


def measure(fns: dict[str, Callable[[], object]], number: int, repeat: int) -> dict[str, float]:
    """Best µs per call of each zero-argument function; they take turns so drift hits all alike."""
    best = {name: float("inf") for name in fns}
    for _ in range(repeat):
        for name, fn in fns.items():
            seconds = timeit.timeit(fn, number=number)
            best[name] = min(best[name], seconds / number * 1e6)
    return best


def load_demo(name: str) -> ModuleType:
    """examples/transformer.py imported as module ``name`` (typeguard reads its source by name)."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples", "transformer.py")
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
