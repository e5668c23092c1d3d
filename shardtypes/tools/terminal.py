"""The plan in a terminal: the page's memory bar as a line of text, and the largest arrays with
their layout and their share of a device's memory; a progress line for slow ``verify`` runs.

Colour comes from rich (the library JAX's own sharding visualiser uses) when the output is a
terminal and rich is installed (``pip install 'shardtypes[cli]'``); piped output, and a terminal
without rich, get the same lines as plain text. Each group of memory also has its own block
character, so the bar reads without colour.

>>> print(render(plan_lines(report, parse_capacity('h100')), colour=False))  # doctest: +SKIP
memory per device  [████████▓▓▓▓▓▓▓▓▓▓▓▓▓▓▓▓··························]  32.0 GiB of h100 (80.0 GiB): 40%
"""

from __future__ import annotations

import io
import sys
import threading
import time
from contextlib import contextmanager
from typing import Any, Iterator, Sequence, TextIO

from ..language import fmt_bytes
from .html_parts import GROUPS, group_of

__all__ = ["plan_lines", "render", "progress"]

# A line is a list of (text, style) segments; style None is plain.
Line = list[tuple[str, Any]]

MARKS = {"parameters": "█", "optimizer state": "▓", "step arrays": "▒", "activations": "░"}
STYLES = {"parameters": "blue", "optimizer state": "dark_orange", "step arrays": "green", "activations": "magenta"}
FREE, OVER = "·", "!"


def plan_lines(report: Any, capacity: tuple[int, str] | None = None, width: int = 48, top: int = 8) -> list[Line]:
    """The memory bar of a ``PlanReport`` (parameters, optimizer state and step arrays stacked,
    against ``capacity`` = ``(bytes, label)`` from ``parse_capacity`` if given) and its ``top``
    largest arrays, as lines of styled segments. Symbolic sizes count for nothing."""
    if not isinstance(width, int) or isinstance(width, bool) or width < 8:
        raise ValueError(f"plan_lines: width must be an int >= 8, got {width!r}")
    if not isinstance(top, int) or isinstance(top, bool) or top < 0:
        raise ValueError(f"plan_lines: top must be an int >= 0, got {top!r}")
    rows = [r for r in report.rows if isinstance(r.bytes_per_device, int)]
    by_group = {g: 0 for g in GROUPS}
    for r in rows:
        by_group[group_of(r.path, r.annotation)] += r.bytes_per_device
    total = sum(by_group.values())
    limit = capacity[0] if capacity is not None else 0
    scale = max(total, limit, 1)
    bar: Line = []
    used = 0
    for g in GROUPS:
        n = round(by_group[g] / scale * width)
        if by_group[g] and not n:
            n = 1  # a group that is there is always seen
        bar.append((MARKS[g] * n, STYLES[g]))
        used += n
    if capacity is not None:
        if total > limit:
            bar.append((OVER, "bold red"))
        else:
            bar.append((FREE * max(width - used, 0), "dim"))
    head: Line = [("memory per device  [", None), *bar, ("]  ", None), (fmt_bytes(total, "figures"), "bold")]
    if capacity is not None:
        share = total / limit
        head.append((f" of {capacity[1]}: {share:.0%}", "bold red" if total > limit else None))
        if total > limit:
            head.append(("  (does not fit)", "bold red"))
    legend: Line = [("  ", None)]
    for g in GROUPS:
        if by_group[g]:
            legend += [(MARKS[g], STYLES[g]), (f" {g} {fmt_bytes(by_group[g], 'figures')}   ", None)]
    if capacity is not None and total <= limit:
        legend += [(FREE, "dim"), (f" free {fmt_bytes(limit - total, 'figures')}", None)]
    legend[-1] = (legend[-1][0].rstrip(), legend[-1][1])
    lines = [head, legend]
    largest = sorted(rows, key=lambda r: -r.bytes_per_device)[:top]
    if largest:
        lines.append([(f"largest arrays (of {len(report.rows)}), per device:", None)])
        path_w = max(len(r.path) for r in largest)
        spec_w = max(len(r.spec) for r in largest)
        for r in largest:
            share = r.bytes_per_device / total if total else 0.0
            copies = f"  {r.replicas} copies" if r.replicas > 1 else ""
            lines.append([
                (f"  {r.path:<{path_w}}  ", None), (f"{r.spec:<{spec_w}}", "cyan"),
                (f"  {fmt_bytes(r.bytes_per_device, 'figures'):>10}  ", None),
                (MARKS[group_of(r.path, r.annotation)] * max(1, round(share * 20)),
                 STYLES[group_of(r.path, r.annotation)]),
                (f" {share:.0%}", None), (copies, "yellow" if copies else None),
            ])
    return lines


def render(lines: Sequence[Line], colour: bool) -> str:
    """The lines as text: with rich's colours if ``colour`` and rich is installed, else plain."""
    plain = "\n".join("".join(text for text, _ in line) for line in lines)
    if not colour:
        return plain
    try:
        from rich.console import Console
        from rich.text import Text
    except ImportError:  # rich is optional (the cli extra): plain text is the same lines
        return plain
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, color_system="standard", width=10_000,
                      highlight=False, soft_wrap=True)
    for line in lines:
        console.print(Text.assemble(*((t, s) if s else t for t, s in line)))
    return out.getvalue().rstrip("\n")


def use_colour(stream: TextIO, choice: str = "auto") -> bool:
    """Whether to colour what goes to ``stream``: ``choice`` 'always' or 'never' (the command
    line's ``--color``), else ('auto') not where ``NO_COLOR`` is set, yes where ``FORCE_COLOR``
    is (CI logs are not terminals), else whether ``stream`` is a terminal."""
    import os

    if choice in ("always", "never"):
        return choice == "always"
    if os.environ.get("NO_COLOR"):
        return False
    if os.environ.get("FORCE_COLOR", "") not in ("", "0"):
        return True
    return bool(getattr(stream, "isatty", lambda: False)())


@contextmanager
def progress(text: str, stream: TextIO | None = None, delay: float = 1.0, every: float = 0.5) -> Iterator[None]:
    """Shows ``text`` and the seconds so far on one line of ``stream`` (standard error by
    default) while the body runs, once it has run ``delay`` seconds, and only on a terminal; the
    line is cleared at the end. Nothing is written for a body that ends sooner, or when piped."""
    out: TextIO = sys.stderr if stream is None else stream
    if not getattr(out, "isatty", lambda: False)():
        yield
        return
    done = threading.Event()
    shown = [0]
    start = time.perf_counter()

    def show() -> None:
        if done.wait(delay):
            return
        while not done.is_set():
            line = f"{text} ({time.perf_counter() - start:.0f} s)"
            out.write("\r" + line)
            out.flush()
            shown[0] = max(shown[0], len(line))
            done.wait(every)

    thread = threading.Thread(target=show, name="shardtypes-progress", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()
        if shown[0]:
            out.write("\r" + " " * shown[0] + "\r")
            out.flush()
