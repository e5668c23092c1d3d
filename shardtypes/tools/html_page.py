"""One self-contained HTML page of a plan: the mesh, memory per device against a capacity, the
largest and the replicated arrays, and every array's layout, under one or several modes side by
side; for ``verify``, its problems first, each linked to the arrays it names.

The page has no scripts and loads nothing (inline CSS and SVG), so it opens offline, in any
browser, as a CI artifact or inline in Jupyter. Its size grows with the arrays (a few hundred
bytes each) and is bounded: past ``MAX_ROWS`` arrays the table says how many it leaves out.
This module reads reports by their fields (``mesh``, ``rows``, ``warnings``, ``errors``) and
knows nothing of how they are made.
"""

from __future__ import annotations

import math
import re
from typing import Any, Mapping, Sequence

from ..language import fmt_bytes
from .chips import fmt_seconds
from .html_parts import (
    GROUPS,
    axis_colour,
    esc,
    group_of,
    memory_bar,
    mesh_svg,
    split_html,
    time_bar,
)

__all__ = ["render_page", "MAX_ROWS"]

MAX_ROWS = 5000

CSS = """
:root{--fg:#1d2733;--mut:#5b6877;--line:#dde3ea;--bg:#f6f8fa;--card:#fff;--acc:#1f3b63}
*{box-sizing:border-box}
body{margin:0;background:var(--bg);color:var(--fg);
font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"Helvetica Neue",Arial,sans-serif}
main{max-width:1500px;margin:0 auto;padding:24px 28px 48px}
h1{font-size:22px;margin:0 0 4px}h2{font-size:16px;margin:0 0 10px}
.meta{color:var(--mut);margin:0 0 18px}
code,.mono{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,"DejaVu Sans Mono",monospace;font-size:12px}
.cards{display:flex;flex-wrap:wrap;gap:16px;margin-bottom:16px}
.card{background:var(--card);border:1px solid var(--line);border-radius:8px;padding:14px 16px;min-width:280px;
flex:1 1 300px}
.card.mesh-card{flex:0 0 auto}
svg.mesh text{font:12px system-ui,sans-serif;fill:var(--fg)}
svg.mesh .ax{font-weight:600}svg.mesh .sub{fill:var(--mut);font-size:11px}
.mem .track{position:relative;height:22px;background:#eef1f4;border-radius:4px;overflow:visible;display:flex;
margin:6px 0 10px}
.mem .seg{height:100%;display:block}.mem .seg:first-child{border-radius:4px 0 0 4px}
.mem .cap{position:absolute;top:-5px;bottom:-5px;width:0;border-left:2px dashed #1d2733}
.mem .cap.over{border-color:#c62828}
table{border-collapse:collapse}
.legend td{padding:1px 8px 1px 0}.legend .tot td{border-top:1px solid var(--line);font-weight:600}
.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
.ok{color:#2e7d32}.bad{color:#c62828;font-weight:600}
.sw{display:inline-block;width:10px;height:10px;border-radius:2px;margin-right:6px;vertical-align:-1px}
ol.top,ul.msgs{margin:0;padding-left:20px}ol.top li,ul.msgs li{margin:2px 0}
.list{min-width:60%}.list td{padding:2px 6px 2px 0;vertical-align:top}
.wide{max-width:100%}
@media (max-width:900px){.wide{overflow-x:auto}}
.arrays{width:100%;background:var(--card);border:1px solid var(--line);border-radius:8px}
.arrays th{position:sticky;top:0;background:#eef2f6;text-align:left;font-weight:600;padding:6px 10px;
border-bottom:1px solid var(--line);white-space:nowrap}
.arrays th.mode{text-align:center;border-left:2px solid var(--line)}
.arrays td{padding:6px 10px;border-top:1px solid var(--line);vertical-align:top}
.arrays td.m0{border-left:2px solid var(--line)}
.arrays tr:target td{background:#fff6d6}
.path{font-weight:600;word-break:break-all}.ann{color:var(--mut)}
.split{display:grid;grid-template-columns:90px auto;gap:2px 6px;align-items:center;margin-top:4px}
.bar{display:block;height:9px;border:1px solid #9aa7b4;border-radius:2px;position:relative;
background:repeating-linear-gradient(90deg,#f4f6f8 0,#f4f6f8 calc(100%/var(--p) - 1px),
#9aa7b4 calc(100%/var(--p) - 1px),#9aa7b4 calc(100%/var(--p)))}
.bar.fine{background:#f4f6f8}
.bar::before{content:"";position:absolute;left:0;top:0;bottom:0;width:max(2px,calc(100%/var(--p)));background:var(--c)}
.dl{font-family:ui-monospace,Menlo,Consolas,monospace;font-size:11px;color:var(--mut);white-space:nowrap}
.rep{grid-column:1/3;font-size:11px;color:#8a5a00}
.badge{display:inline-block;padding:0 6px;border-radius:9px;font-size:11px;font-weight:600;background:#eef1f4;
color:var(--mut)}
.badge.err{background:#fde2e1;color:#a61b1b}.badge.warn{background:#fff1d6;color:#8a5a00}
.badge.okb{background:#e2f3e5;color:#2e7d32}
.problems li{margin:6px 0}.links a{margin-right:8px}
a{color:#1a5fb4;text-decoration:none}a:hover{text-decoration:underline}
.note{color:var(--mut);font-size:12px;margin-top:6px}
.mem .cap.olap{border-color:#c62828}
.compare td,.compare th{padding:3px 10px 3px 0;text-align:left;vertical-align:top}
.compare .best{font-weight:600}
"""


def render_page(
    reports: Mapping[str, Any],
    *,
    title: str,
    subtitle: str = "",
    capacity: tuple[int, str] | None = None,
    problems: Sequence[tuple[str, str]] = (),
    notes: Sequence[str] = (),
    verify: bool = False,
    activations: Mapping[str, Any] | None = None,
    times: Mapping[str, Any] | None = None,
) -> str:
    """The page of ``reports`` (mode name -> a plan's report; one entry for a single plan, whose
    name is then not shown) with the device memory ``capacity`` (bytes, label), and
    ``problems`` ((kind, message) pairs, as verify's; ``verify=True`` says "no problems" when
    there are none) listed first with links to their arrays. ``activations`` (mode name -> an
    ``ActivationEstimate``) adds each mode's step intermediates as a band of its own; ``times``
    (mode name -> a ``StepTime``) each mode's time per step beside its memory, on one scale,
    and with several, a table comparing them."""
    activations = activations or {}
    times = {m: t for m, t in (times or {}).items() if t is not None}
    modes = list(reports)
    first = reports[modes[0]]
    mesh = dict(first.mesh)
    paths: list[str] = []
    seen: set[str] = set()
    for r in reports.values():
        for row in r.rows:
            if row.path not in seen:
                seen.add(row.path)
                paths.append(row.path)
    ids = {p: f"a{i}" for i, p in enumerate(paths)}
    devices = math.prod(mesh.values())
    shapes = list(dict.fromkeys(tuple(dict(r.mesh).items()) for r in reports.values()))
    mesh_text = ", ".join(" × ".join(f"{esc(a)}={n}" for a, n in shape) for shape in shapes)
    meta = [f"{len(paths):,} array{'s' if len(paths) != 1 else ''}",
            f"mesh{'es' if len(shapes) > 1 else ''} {mesh_text} ({devices:,} devices)"]
    if len(modes) > 1:
        meta.append("modes " + ", ".join(esc(m) for m in modes))
    if capacity:
        meta.append(f"capacity {esc(capacity[1])} per device")
    chips_named = sorted({t.chip for t in times.values()})
    if chips_named:
        meta.append(f"time per step on {esc(', '.join(chips_named))}")
    out = ['<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">',
           '<meta name="viewport" content="width=device-width, initial-scale=1">',
           f"<title>{esc(title)}</title><style>{CSS}</style></head><body><main>",
           f"<h1>{esc(title)}</h1>"]
    if subtitle:
        out.append(f'<p class="meta">{esc(subtitle)}</p>')
    out.append(f'<p class="meta">{" · ".join(meta)}</p>')
    if verify or problems or notes:
        out.append(_problems(problems, notes, ids))
    if len(times) > 1:
        out.append(_compare(times))
    out.append('<div class="cards">')
    if len(shapes) == 1:  # (layouts on meshes of other shapes: each column names its own)
        out.append(f'<div class="card mesh-card"><h2>Mesh</h2>{mesh_svg(mesh)}</div>')
    totals = {m: r.bytes_per_device + _bytes_of(activations.get(m)) for m, r in reports.items()}
    scale = max([capacity[0] if capacity else 0, *totals.values()])
    seconds = max([t.no_overlap for t in times.values()], default=0.0)
    for m, r in reports.items():
        out.append(_memory_card(m if len(modes) > 1 else "", r, capacity, scale, ids, activations.get(m),
                                times.get(m), seconds, list(mesh)))
    out.append("</div>")
    out.append(_table(reports, paths, ids, mesh))
    out.append("</main></body></html>")
    return "".join(out)


def _bytes_of(estimate: Any) -> int:
    return 0 if estimate is None else int(estimate.bytes_per_device)


def _compare(times: Mapping[str, Any]) -> str:
    """The modes' step times in a table, fastest (by the lower bound) first in bold."""
    best = min(times, key=lambda m: times[m].perfect_overlap)
    rows = "".join(
        f'<tr class="{"best" if m == best else ""}"><td>{esc(m)}</td><td>{esc(t.chip)}</td>'
        f'<td class="num">{fmt_seconds(t.perfect_overlap)}</td><td class="num">{fmt_seconds(t.no_overlap)}</td>'
        f"<td>{esc(t.bound)}</td></tr>" for m, t in sorted(times.items(), key=lambda kv: kv[1].perfect_overlap))
    return ('<div class="card" style="margin-bottom:16px"><h2>Time per step, side by side</h2>'
            '<table class="compare"><tr><th>layout</th><th>chip</th><th class="num">perfect overlap</th>'
            f'<th class="num">no overlap</th><th>bound by</th></tr>{rows}</table>'
            '<p class="note">A lower bound per device at the chip\'s peak rates, without latency: to compare '
            "layouts, not to predict the step (see docs/chips.md).</p></div>")


def _memory_card(mode: str, report: Any, capacity: tuple[int, str] | None, scale: int,
                 ids: Mapping[str, str], estimate: Any = None, step_time: Any = None, seconds: float = 0.0,
                 mesh: Sequence[str] = ()) -> str:
    by_group: dict[str, int] = dict.fromkeys(GROUPS, 0)
    for row in report.rows:
        by_group[group_of(row.path, row.annotation)] += row.bytes_per_device
    by_group["activations"] = _bytes_of(estimate)
    head = f"Memory per device{' — ' + esc(mode) if mode else ''}"
    parts = [f'<div class="card"><h2>{head}</h2>',
             memory_bar(by_group, capacity[0] if capacity else None, scale, capacity[1] if capacity else ""),
             f'<p class="note">{fmt_bytes(report.global_bytes, "figures")} in all over the mesh; '
             f"{report.replicated_fraction:.1%} of what the devices hold are replicated copies</p>"]
    if estimate is not None:
        parts.append(f'<p class="note">activations: the step\'s peak intermediate memory, estimated by verify: '
                     f"{esc(estimate)}</p>")
    if step_time is not None:
        parts.append(f'<h2 style="margin-top:12px">Time per step on {esc(step_time.chip)}</h2>'
                     f"{time_bar(step_time, seconds, mesh)}")
    largest = sorted(report.rows, key=lambda r: -r.bytes_per_device)[:5]
    if largest:
        parts.append('<h2 style="margin-top:12px">Largest per device</h2><table class="list">')
        parts += [f'<tr><td><a href="#{ids[r.path]}" class="mono">{esc(r.path)}</a></td>'
                  f'<td class="num">{fmt_bytes(r.bytes_per_device, "figures")}</td></tr>' for r in largest]
        parts.append("</table>")
    copies = sorted((r for r in report.rows if r.replicas > 1 and r.bytes_per_device > 0),
                    key=lambda r: -r.bytes_per_device * r.replicas)
    if copies:
        parts.append('<h2 style="margin-top:12px">Replicated copies</h2><table class="list">')
        parts += [f'<tr><td><a href="#{ids[r.path]}" class="mono">{esc(r.path)}</a></td>'
                  f'<td class="num">{fmt_bytes(r.bytes_per_device, "figures")} × {r.replicas:,}</td></tr>'
                  for r in copies[:6]]
        parts.append("</table>")
        if len(copies) > 6:
            parts.append(f'<p class="note">and {len(copies) - 6:,} more arrays with copies</p>')
    issues = [("error", e) for e in report.errors] + [("warning", w) for w in report.warnings]
    if issues:
        parts.append('<h2 style="margin-top:12px">Errors and warnings</h2><ul class="msgs">')
        parts += [f'<li><span class="badge {"err" if k == "error" else "warn"}">{k}</span> {esc(m)}'
                  f"{_links(m, ids)}</li>" for k, m in issues[:50]]
        parts.append("</ul>")
        if len(issues) > 50:
            parts.append(f'<p class="note">and {len(issues) - 50:,} more</p>')
    parts.append("</div>")
    return "".join(parts)


def _problems(problems: Sequence[tuple[str, str]], notes: Sequence[str], ids: Mapping[str, str]) -> str:
    out = ['<div class="card problems" style="margin-bottom:16px">']
    if problems:
        out.append(f'<h2>{len(problems)} problem{"s" if len(problems) != 1 else ""}</h2><ol>')
        out += [f'<li id="p{i}"><span class="badge err">{esc(kind)}</span> <span class="mono">{esc(message)}</span>'
                f"{_links(message, ids)}</li>" for i, (kind, message) in enumerate(problems)]
        out.append("</ol>")
    else:
        out.append('<h2><span class="badge okb">ok</span> no problems</h2>')
    out += [f'<p class="note">{esc(n)}</p>' for n in notes]
    out.append("</div>")
    return "".join(out)


def _links(message: str, ids: Mapping[str, str]) -> str:
    """Links to the arrays ``message`` names: those whose whole path it holds, else those whose
    last field it names as a word (a local or argument of that name), at most 8."""
    found = [p for p in ids if p in message]
    if not found:
        # Words outside annotations, shapes and quotes ('hidden' in f32[b'layers hidden'] is a dim)
        bare = re.sub(r"\w+\[[^\]]*\]|\w*\([^)]*\)|'[^']*'|\"[^\"]*\"", " ", message)
        words = set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", bare))
        found = [p for p in ids if re.split(r"[.\[\]'\"]+", p.rstrip("]'\""))[-1] in words]
    if not found:
        return ""
    links = "".join(f'<a href="#{ids[p]}" class="mono">{esc(p)}</a>' for p in found[:8])
    more = f" and {len(found) - 8} more" if len(found) > 8 else ""
    return f'<div class="links">→ {links}{more}</div>'


def _table(reports: Mapping[str, Any], paths: list[str], ids: Mapping[str, str], mesh: Mapping[str, int]) -> str:
    modes = list(reports)
    by_mode = [{row.path: row for row in r.rows} for r in reports.values()]
    meshes = [dict(r.mesh) for r in reports.values()]
    many = len(modes) > 1
    # On a narrow screen the table scrolls sideways in its own box, not the whole page (a wide one
    # keeps its header sticky to the window, which a scrolling box would not).
    out = ['<h2 style="margin:8px 0">Arrays</h2><div class="wide"><table class="arrays"><thead>']
    if many:
        out.append('<tr><th colspan="3"></th>' + "".join(
            f'<th class="mode" colspan="3">{esc(m)}</th>' for m in modes) + "</tr>")
    out.append("<tr><th>array</th><th>dtype</th><th class=\"num\">shape</th>"
               + ('<th class="m0">layout (device 0\'s block)</th><th class="num">per device</th>'
                  '<th class="num">copies</th>') * len(modes)
               + "</tr></thead><tbody>")
    for path in paths[:MAX_ROWS]:
        rows = [m.get(path) for m in by_mode]
        cells = zip(rows, meshes)
        some = next(r for r in rows if r is not None)
        ann = f'<div class="ann mono">{esc(some.annotation)}</div>' if some.annotation != "-" else ""
        out.append(f'<tr id="{ids[path]}"><td><div class="path mono">{esc(path)}</div>{ann}</td>'
                   f'<td class="mono">{esc(some.dtype)}</td><td class="num mono">{esc(_shape(some.shape))}</td>')
        for row, own in cells:
            if row is None:
                out.append('<td class="m0">—</td><td></td><td></td>')
                continue
            out.append(f'<td class="m0"><code>{esc(row.spec)}</code> → <code>{esc(_shape(row.device_shape))}</code>'
                       f"{split_html(row.shape, row.device_shape, row.dim_axes, own)}</td>"
                       f'<td class="num">{fmt_bytes(row.bytes_per_device, "figures")}</td>'
                       f'<td class="num">{"×" + format(row.replicas, ",") if row.replicas > 1 else "—"}</td>')
        out.append("</tr>")
    out.append("</tbody></table></div>")
    if len(paths) > MAX_ROWS:
        out.append(f'<p class="note">{len(paths) - MAX_ROWS:,} more arrays are left out of this page '
                   f"(it shows the first {MAX_ROWS:,}); the report's to_json() has them all.</p>")
    if not paths:
        out.append('<p class="note">The plan has no arrays.</p>')
    legend = " ".join(f'<span class="sw" style="background:{axis_colour(list(mesh), a)}"></span>{esc(a)}'
                      for a in mesh)
    out.append(f'<p class="note">Each dim is a bar cut into the blocks its mesh axes make; the filled '
               f"block is device 0's. Axis colours: {legend}. A dim no axis splits is held whole (grey); "
               "mesh axes that split no dim hold copies.</p>")
    return "".join(out)


def _shape(shape: Sequence[Any]) -> str:
    return "(" + ", ".join(str(s) for s in shape) + ("," if len(shape) == 1 else "") + ")"


def _umask() -> int:
    """The process's umask, read without setting it where the system says it (Linux), since
    ``os.umask`` can only read it by changing it for every thread a moment."""
    import os

    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def write_html(path: str, text: str, where: str) -> None:
    """Writes ``text`` to ``path`` whole or not at all (a temporary file beside it, then renamed);
    a path that cannot be written raises OSError with ``where`` and the reason."""
    import os
    import tempfile

    folder = os.path.dirname(os.path.abspath(path))
    try:
        fd, tmp = tempfile.mkstemp(prefix=".shardtypes-", suffix=".html", dir=folder)
    except OSError as e:
        raise OSError(f"{where}: cannot write {path!r}: {e.strerror or e}") from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        # mkstemp makes the file 0600; the page is a file like any the user makes (a CI artifact,
        # a page to share): the mode their umask gives a new file.
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except OSError as e:
        os.unlink(tmp)
        raise OSError(f"{where}: cannot write {path!r}: {e.strerror or e}") from None
