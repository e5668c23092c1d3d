"""The pieces of a plan's HTML page, each a pure function of numbers and strings.

A device's memory from ``--hbm`` (``parse_capacity('80GiB')``, ``parse_capacity('h100')``), the
group an array's memory belongs to (parameters, optimizer state, the step's arrays), and the
drawings: the mesh as a grid of its axes, one array's dims split over mesh axes, and memory per
device as a stacked bar. Sizes are written in ``fmt_bytes``'s "figures" style (``'3.00 GiB'``).
Every string that comes from the user (paths, annotations, axis names) goes through ``esc``.
``html_page`` puts them together.
"""

from __future__ import annotations

import functools
import html
import math
import re
from typing import Any, Mapping, Sequence

from ..language import fmt_bytes
from .chips import DEVICE_KINDS, fmt_seconds

__all__ = ["DEVICE_KINDS", "parse_capacity", "group_of", "GROUPS", "esc"]


def esc(value: Any) -> str:
    """``value`` as text safe inside HTML elements and quoted attributes."""
    return html.escape(str(value), quote=True)


_UNITS = {"B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12,
          "KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "TIB": 2**40}
_SIZE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([A-Za-z]+)\s*")


def parse_capacity(value: Any, where: str = "hbm") -> tuple[int, str]:
    """``(bytes, label)`` of a device's memory: a size with a unit (``'80GiB'``, ``'16 GB'``,
    ``'512MiB'``; GB is 10**9 bytes, GiB 2**30), a device kind (``'h100'``, ``'tpu-v5p'``: the
    chips table's, ``chips.DEVICE_KINDS``) or a positive int of bytes. Anything else raises a ValueError naming
    ``where`` and what it accepts.

    >>> parse_capacity('tpu-v5p')
    (102005473280, 'tpu-v5p (95.00 GiB)')
    """
    known = ", ".join(DEVICE_KINDS)
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise TypeError(f"{where}: expected a size such as '80GiB', a device kind ({known}) or a "
                        f"number of bytes, got {type(value).__name__} {value!r:.60}")
    if isinstance(value, int):
        if value <= 0:
            raise ValueError(f"{where}: a device's memory must be positive, got {value}")
        return value, fmt_bytes(value, "figures")
    kind = DEVICE_KINDS.get(value.strip().lower())
    if kind is not None:
        return kind[0], f"{value.strip().lower()} ({fmt_bytes(kind[0], 'figures')})"
    match = _SIZE.fullmatch(value)
    if match is None or match.group(2).upper() not in _UNITS:
        raise ValueError(f"{where}: {value!r} is neither a size with a unit (as 80GiB or 16GB; units "
                         f"B, KB, MB, GB, TB, KiB, MiB, GiB, TiB) "
                         f"nor a known device kind ({known})")
    size = int(float(match.group(1)) * _UNITS[match.group(2).upper()])
    if size <= 0:
        raise ValueError(f"{where}: a device's memory must be positive, got {value!r}")
    return size, fmt_bytes(size, "figures")


# Groups of memory, in the bar's order, with their colours; an array's group comes from its path.
# "activations" is the step's own intermediate memory (verify's estimate), never an array's group.
GROUPS = ("parameters", "optimizer state", "step arrays", "activations")
GROUP_COLOURS = {"parameters": "#3b6fb6", "optimizer state": "#e08a2c", "step arrays": "#4f9d69",
                 "activations": "#8e5bb5"}
_OPTIMIZER = re.compile(r"^(opt|optim|optimizer|opt_state|adam\w*|mu|nu|momentum|velocity|moments?|ema\w*|"
                        r"exp_avg\w*|state_m|state_v)$", re.IGNORECASE)
_STEP = re.compile(r"^(batch|inputs?|targets?|tokens|labels|activations?|acts|cache|kv_cache|kv|"
                   r"residual|logits|outputs?|carry|grads?|gradients?)$", re.IGNORECASE)
_BATCH_DIM = re.compile(r"^(micro_?)?batch\w*$", re.IGNORECASE)


def group_of(path: str, annotation: str = "") -> str:
    """'optimizer state' when a part of ``path`` names one (``adam_mu``, ``opt_state``, ``mu``),
    'step arrays' for a batch, activations, a cache or gradients, else 'parameters'. Where the
    path says nothing (an argument ``x``), an ``annotation`` with a batch dim
    (``f32[b'batch/d embed']``) is a step array: parameters have no batch dim."""
    parts = [p for p in re.split(r"[.\[\]'\"/]+", path) if p]
    if any(_OPTIMIZER.match(p) for p in parts):
        return "optimizer state"
    if any(_STEP.match(p) for p in parts):
        return "step arrays"
    shape = re.search(r"""\bb(?:'([^']*)'|"([^"]*)")""", annotation)
    dims = (shape.group(1) or shape.group(2) or "").split() if shape else []
    if any(_BATCH_DIM.match(d.split("/")[0].lstrip("#*")) for d in dims):
        return "step arrays"
    return "parameters"


# Colours for mesh axes, in mesh order (a colour-blind-safe palette).
AXIS_COLOURS = ("#0072b2", "#d55e00", "#009e73", "#cc79a7", "#e69f00", "#56b4e9", "#7f7f7f", "#b2912f")


def axis_colour(mesh: Sequence[str], axis: str) -> str:
    return AXIS_COLOURS[list(mesh).index(axis) % len(AXIS_COLOURS)] if axis in mesh else "#999"


def mesh_svg(mesh: Mapping[str, int]) -> str:
    """The mesh as a grid of its axes (axes 0, 2, .. down, 1, 3, .. across), at most 16 cells a
    side whatever the sizes (a 64x64 mesh is 16x16 cells of 4x4 devices), with device 0's cell
    marked."""
    names = list(mesh)
    down = names[0::2] if len(names) > 1 else []
    across = names[1::2] if len(names) > 1 else names
    rows, cols = math.prod(mesh[a] for a in down), math.prod(mesh[a] for a in across)
    r_cells, c_cells = min(rows, 16), min(cols, 16)
    cell = 14
    left, top = 70, 34
    w, h = left + c_cells * cell + 12, top + r_cells * cell + 26
    out = [f'<svg class="mesh" width="{w}" height="{h}" viewBox="0 0 {w} {h}" role="img" '
           f'aria-label="mesh {esc(_mesh_text(mesh))}">']
    for i in range(r_cells):
        for j in range(c_cells):
            fill = "#1f3b63" if i == 0 and j == 0 else "#e3eaf3"
            out.append(f'<rect x="{left + j * cell}" y="{top + i * cell}" width="{cell - 2}" '
                       f'height="{cell - 2}" rx="2" fill="{fill}"/>')
    out.append(f'<text x="{left}" y="{top - 20}" class="ax">{_axes_label(across, mesh)} →</text>')
    if cols > c_cells:
        per_column = cols // c_cells if cols % c_cells == 0 else f"~{cols / c_cells:.1f}"
        out.append(f'<text x="{left}" y="{top - 6}" class="sub">each column: {per_column} devices</text>')
    if down:
        out.append(f'<text x="{left - 6}" y="{top + 10}" class="ax" text-anchor="end">{_axes_label(down, mesh)}</text>')
        out.append(f'<text x="{left - 6}" y="{top + 24}" class="ax" text-anchor="end">↓</text>')
        if rows > r_cells:
            per_row = rows // r_cells if rows % r_cells == 0 else f"~{rows / r_cells:.1f}"
            out.append(f'<text x="{left - 6}" y="{top + 40}" class="sub" text-anchor="end">row: {per_row}</text>')
    out.append(f'<text x="{left}" y="{h - 8}" class="sub">■ device 0</text>')
    out.append("</svg>")
    return "".join(out)


def _axes_label(axes: Sequence[str], mesh: Mapping[str, int]) -> str:
    return " × ".join(f'<tspan fill="{axis_colour(list(mesh), a)}">{esc(a)}</tspan>={mesh[a]}' for a in axes)


def _mesh_text(mesh: Mapping[str, int]) -> str:
    return " × ".join(f"{a}={n}" for a, n in mesh.items())


def split_html(shape: Sequence[Any], device_shape: Sequence[Any], dim_axes: Sequence[Sequence[str]],
               mesh: Mapping[str, int]) -> str:
    """How an array's dims split over mesh axes (see ``_split_html``; the same layouts recur
    across a model, so each is drawn once)."""
    return _split_html(tuple(shape), tuple(device_shape), tuple(map(tuple, dim_axes)), tuple(mesh.items()))


@functools.lru_cache(maxsize=4096)
def _split_html(shape: tuple, device_shape: tuple, dim_axes: tuple, mesh_items: tuple) -> str:
    """How an array's dims split over mesh axes: per dim, a bar cut into as many blocks as the
    dim's mesh axes make, device 0's block filled in the first axis's colour (a dim no axis
    splits is filled whole, grey); then the mesh axes no dim uses, which hold copies."""
    mesh = dict(mesh_items)
    names = list(mesh)
    out = ['<div class="split">']
    for size, local, axes in zip(shape, device_shape, list(dim_axes) + [()] * (len(shape) - len(dim_axes))):
        parts = math.prod(mesh.get(a, 1) for a in axes)
        colour = axis_colour(names, axes[0]) if axes else "#b8c2cc"
        cls = "bar fine" if parts > 48 else "bar"
        label = "×".join(esc(a) for a in axes)
        text = f"{esc(size)} ÷ {label} {parts:,} → {esc(local)}" if axes else f"{esc(size)} whole"
        out.append(f'<span class="{cls}" style="--p:{parts};--c:{colour}"></span><span class="dl">{text}</span>')
    used = {a for axes in dim_axes for a in axes}
    copies = [a for a in names if a not in used and mesh[a] > 1]
    if copies:
        out.append('<span class="rep" title="replicated over these mesh axes">copies over '
                   + ", ".join(f"{esc(a)} ×{mesh[a]}" for a in copies) + "</span>")
    if not shape:
        out.append('<span class="dl">scalar</span>')
    out.append("</div>")
    return "".join(out)


def memory_bar(by_group: Mapping[str, int], capacity: int | None, scale: int, capacity_label: str = "") -> str:
    """A stacked bar of one device's bytes by group, drawn on a scale of ``scale`` bytes, with a
    mark at ``capacity`` when given."""
    total = sum(by_group.values())
    scale = max(scale, 1)
    out = ['<div class="mem"><div class="track">']
    for g in GROUPS:
        n = by_group.get(g, 0)
        if n:
            out.append(f'<span class="seg" style="width:{100 * n / scale:.3f}%;background:{GROUP_COLOURS[g]}" '
                       f'title="{esc(g)}: {fmt_bytes(n, "figures")}"></span>')
    if capacity:
        over = " over" if total > capacity else ""
        out.append(f'<span class="cap{over}" style="left:{min(100.0, 100 * capacity / scale):.3f}%" '
                   f'title="capacity {esc(capacity_label)}"></span>')
    out.append("</div>")
    rows = "".join(f'<tr><td><span class="sw" style="background:{GROUP_COLOURS[g]}"></span>{g}</td>'
                   f'<td class="num">{fmt_bytes(by_group.get(g, 0), "figures")}</td></tr>'
                   for g in GROUPS if by_group.get(g))
    rows += f'<tr class="tot"><td>per device</td><td class="num">{fmt_bytes(total, "figures")}</td></tr>'
    if capacity:
        free = capacity - total
        share = _percent(total / capacity)
        verdict = (f'<td class="num ok">{fmt_bytes(free, "figures")} free ({share} used)</td>' if free >= 0
                   else f'<td class="num bad">{fmt_bytes(-free, "figures")} over ({share})</td>')
        rows += f'<tr><td>capacity {esc(capacity_label)}</td>{verdict}</tr>'
    out.append(f'<table class="legend">{rows}</table></div>')
    return "".join(out)


def _percent(x: float) -> str:
    return f"{x:.0%}" if x >= 0.1 else f"{x:.1%}" if x >= 0.001 else "<0.1%"


# Time per step (verify's ``report.step_time``): compute, memory, and communication per group of
# mesh axes, one after the other on a scale shared by the modes side by side, with a mark where
# they would end overlapped perfectly.
TIME_COLOURS = {"compute": "#3d4a59", "memory": "#8fa3b8"}


def time_bar(step_time: Any, scale: float, mesh: Sequence[str]) -> str:
    """A stacked bar of ``step_time``'s parts (seconds) drawn on a scale of ``scale`` seconds, a
    legend with each part and the link it runs over, the two totals and what bounds the step."""
    scale = scale if scale > 0 else 1.0
    parts = [("compute", step_time.compute, TIME_COLOURS["compute"]),
             ("memory", step_time.memory, TIME_COLOURS["memory"])]
    for axes, seconds in step_time.communication.items():
        slowest = min(axes, key=lambda a: step_time.links[a].bytes_per_second)
        label = f"communication over {' × '.join(axes)} ({step_time.links[slowest]})"
        colours = [axis_colour(list(mesh), a) for a in axes]
        # a group of axes: its axes' colours in stripes
        fill = colours[0] if len(colours) == 1 else "repeating-linear-gradient(135deg," + ",".join(
            f"{c} {i * 6}px,{c} {(i + 1) * 6}px" for i, c in enumerate(colours)) + ")"
        parts.append((label, seconds, fill))
    out = ['<div class="mem time"><div class="track">']
    for label, seconds, colour in parts:
        if seconds > 0:
            out.append(f'<span class="seg" style="width:{100 * seconds / scale:.3f}%;background:{colour}" '
                       f'title="{esc(label)}: {fmt_seconds(seconds)}"></span>')
    out.append(f'<span class="cap olap" style="left:{min(100.0, 100 * step_time.perfect_overlap / scale):.3f}%" '
               f'title="perfect overlap: {fmt_seconds(step_time.perfect_overlap)}"></span></div>')
    rows = "".join(f'<tr><td><span class="sw" style="background:{colour}"></span>{esc(label)}</td>'
                   f'<td class="num">{fmt_seconds(seconds)}</td></tr>' for label, seconds, colour in parts)
    rows += (f'<tr class="tot"><td>perfect overlap (the lower bound)</td>'
             f'<td class="num">{fmt_seconds(step_time.perfect_overlap)}</td></tr>'
             f'<tr><td>no overlap</td><td class="num">{fmt_seconds(step_time.no_overlap)}</td></tr>')
    out.append(f'<table class="legend">{rows}</table>')
    out.append(f'<p class="note">bound by {esc(step_time.bound)}</p>')
    out += [f'<p class="note">assumed: {esc(a)}</p>' for a in step_time.assumptions[:4]]
    if len(step_time.assumptions) > 4:
        out.append(f'<p class="note">and {len(step_time.assumptions) - 4} more assumptions</p>')
    out.append("</div>")
    return "".join(out)
