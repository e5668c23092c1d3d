"""The plan as a page (issue 21): ``PlanReport.to_html``, ``plan_html`` (modes side by side),
``VerifyReport.to_html``, ``_repr_html_`` and ``shardtypes plan/verify --html FILE --hbm``.

The pure parts (byte sizes, ``--hbm``, groups, escaping) are tested as text; the pages are also
rendered by a real headless Chromium (Debian's ``chromium``; the tests that need it skip, saying
so, where it is not installed): the screenshot is not blank and the page's text holds every
array path, the mesh axes and the per-device total. ``SHARDTYPES_SCREENSHOT=path.png`` keeps the
demo's screenshot (docs/images/plan.png is made this way).
"""

import importlib.util
import os
import re
import shutil
import struct
import subprocess
import sys
import time
import zlib
from pathlib import Path

import jax
import jax.numpy as jnp
import pytest

from shardtypes import axis_rules, f32, plan, plan_html, verify
from shardtypes.__main__ import main
from shardtypes.language import BYTE_STYLES, fmt_bytes
from shardtypes.tools import PlanReport

from conftest import put

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install -y chromium); "
                                    "the pages are then checked as text only")


def parts():
    from shardtypes.tools import html_parts  # the layer's pure helpers

    return html_parts


# ---------------------------------------------------------------------------------------------
# The pure parts


SIZES = (0, 640, 1024, 1002 * 1024, 17.5 * 2**20, 1.09 * 2**30, 80 * 2**30, 3 * 2**40)


def test_bytes_are_written_with_binary_units():
    assert [fmt_bytes(n, "figures") for n in SIZES] == [  # the page's style
        "0 B", "640 B", "1.00 KiB", "1002 KiB", "17.5 MiB", "1.09 GiB", "80.0 GiB", "3.00 TiB"]


@pytest.mark.parametrize("style, written", [
    ("tenths", ["0 B", "640 B", "1.0 KiB", "1002.0 KiB", "17.5 MiB", "1.1 GiB", "80.0 GiB", "3.0 TiB"]),
    ("short", ["0 B", "640 B", "1 KiB", "1002 KiB", "17.5 MiB", "1.09 GiB", "80 GiB", "3 TiB"]),
    ("exact", ["0 bytes", "640 bytes", "1 KiB (1024 bytes)", "1002 KiB (1026048 bytes)",
               "17.5 MiB (18350080 bytes)", "1.09 GiB (1170378588 bytes)", "80 GiB (85899345920 bytes)",
               "3 TiB (3298534883328 bytes)"]),
])
def test_one_byte_formatter_writes_every_style(style, written):
    """One function for every byte count shardtypes prints: the plan's table and the reports
    (tenths), the step time's sentence (short), the layout layer's errors (exact)."""
    assert style in BYTE_STYLES and [fmt_bytes(n, style) for n in SIZES] == written
    assert fmt_bytes(-1536, style).startswith("-1")
    assert fmt_bytes(999.7 * 2**20, style).startswith("1000 MiB") or style == "tenths"  # never '1e+03 MiB'
    with pytest.raises(ValueError, match=r"^fmt_bytes: style must be one of 'tenths', 'figures', 'short', 'exact', "
                                         r"got 'html'$"):
        fmt_bytes(1, "html")


def test_the_old_name_is_the_one_formatter():
    from shardtypes.tools import memory_plan

    assert memory_plan.fmt_bytes is fmt_bytes and parts().fmt_bytes is fmt_bytes and "fmt_bytes" not in parts().__all__


def test_capacity_parses_sizes_and_device_kinds():
    parse = parts().parse_capacity
    assert parse("80GiB") == (80 * 2**30, "80.0 GiB")
    assert parse(" 16 GB ")[0] == 16 * 10**9
    assert parse("1.5TiB")[0] == int(1.5 * 2**40)
    assert parse("512mib")[0] == 512 * 2**20
    assert parse(4096) == (4096, "4.00 KiB")
    assert parse("H100") == (80 * 2**30, "h100 (80.0 GiB)")
    for kind, gib in {"h200": 141, "a100-80gb": 80, "tpu-v4": 32, "tpu-v5e": 16, "tpu-v5p": 95}.items():
        assert parse(kind)[0] == gib * 2**30


@pytest.mark.parametrize("bad", ["80", "80 gigs", "h1000", "", "-5GiB", "0GiB", "GiB"])
def test_capacity_that_does_not_parse_lists_the_units_and_kinds(bad):
    with pytest.raises(ValueError, match=r"hbm: .* (neither a size with a unit .*h100, h200, .*tpu-v5p|must be positive)"):
        parts().parse_capacity(bad)


@pytest.mark.parametrize("bad", [True, 1.5, None, [80]])
def test_capacity_of_the_wrong_type(bad):
    with pytest.raises(TypeError, match=r"hbm: expected a size such as '80GiB', a device kind \(h100"):
        parts().parse_capacity(bad)
    with pytest.raises(ValueError, match=r"hbm: a device's memory must be positive, got 0"):
        parts().parse_capacity(0)


def test_groups_by_path():
    group = parts().group_of
    assert group("State.weights.layers.w_q") == "parameters"
    assert group("State.adam_mu.embed") == "optimizer state"
    assert group("['opt_state'][0].mu['w']") == "optimizer state"
    assert group("batch.inputs") == "step arrays"
    assert group("Layer.w_q") == "parameters"
    # where the path says nothing, a batch dim in the annotation does
    assert group("x", "f32[b'batch/d embed']") == "step arrays"
    assert group("x", "f32[b'*batch seq']") == "step arrays"
    assert group("w", "f32[b'embed hidden/t']") == "parameters"


def test_hostile_names_are_escaped():
    tree = {"<script>alert(1)</script>": jax.ShapeDtypeStruct((8, 4), jnp.float32),
            'a"b&c': jax.ShapeDtypeStruct((2,), jnp.int32)}
    page = plan(tree, {"d": 8}).to_html(title="<b>t</b>")
    assert "<script>" not in page and "<b>t</b>" not in page and "&lt;b&gt;t" in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page and "a&quot;b&amp;c" in page
    one = plan(tree, {"d": 8})
    page = plan_html({"<img src=x onerror=alert(1)>": one, "decode": one})
    assert "<img" not in page and "&lt;img src=x onerror=alert(1)&gt;" in page


# ---------------------------------------------------------------------------------------------
# Pages as text

@pytest.fixture(scope="module")
def demo():
    """The demo's 70B-class plans on a 64x64 abstract mesh, and its verify with a mistake."""
    spec = importlib.util.spec_from_file_location("examples_transformer_html", EXAMPLES / "transformer.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    try:
        spec.loader.exec_module(module)
        with axis_rules(module.RULES):
            train = plan(module.State, module.LARGE_MESH, module.LARGE)
            wrong = verify(module.training_kernel_with_a_mistake, module.LARGE_MESH, module.LARGE)
        with axis_rules(module.RULES, mode="decode"):
            decode = plan(module.State, module.LARGE_MESH, module.LARGE)
    finally:
        del sys.modules[spec.name]
    return {"train": train, "decode": decode, "wrong": wrong}


def test_demo_page_is_fast_and_small(demo):
    start = time.perf_counter()
    page = plan_html({"train": demo["train"], "decode": demo["decode"]}, "h100")
    assert time.perf_counter() - start < 1.0
    assert len(page.encode()) < 2 * 2**20
    assert "http://" not in page.replace("http://www.w3.org", "") and "https://" not in page
    assert "<script" not in page and "<link" not in page and "@import" not in page
    for row in demo["train"].rows:
        assert row.path in page
    assert "Memory per device — train" in page and "Memory per device — decode" in page
    assert "capacity h100 (80.0 GiB)" in page and "14.0 GiB" in page  # decode's total


def test_page_of_real_arrays(mesh):
    tree = {"w": put(mesh, jnp.zeros((8, 4)), "d", "t"), "b": put(mesh, jnp.zeros((4,)), None)}
    report = plan(tree, mesh)
    page = report.to_html("1GiB")
    assert "P(&#x27;d&#x27;, &#x27;t&#x27;)" in page and "(2, 2)" in page
    assert "copies over d ×4, t ×2" in page  # b is replicated on every axis
    assert report._repr_html_() == report.to_html()


def test_zero_arrays_and_zero_sized_dims():
    empty = PlanReport({"d": 8}, (), (), ())
    assert "The plan has no arrays." in empty.to_html()
    page = plan(f32[b"a/d b"], {"d": 8}, {"a": 0, "b": 4}).to_html("80GiB")
    assert "0 ÷ d 8 → 0" in page and "0 B" in page


def test_plan_html_sets_meshes_of_other_sizes_side_by_side():
    """Layouts of one model on meshes of other shapes over the same axes (a search's best few):
    each column's split is drawn over its own mesh, the page names every mesh and draws no one
    mesh's grid."""
    page = plan_html({"d=8": plan(f32[b"a/d"], {"d": 8}, {"a": 8}), "d=4": plan(f32[b"a/d"], {"d": 4}, {"a": 8})})
    assert "meshes d=8, d=4 (8 devices)" in page
    assert "<h2>Mesh</h2>" not in page
    assert "(1,)" in page and "(2,)" in page  # each column's block over its own mesh


def test_plan_html_rejects_what_it_cannot_draw():
    one = plan(f32[b"a/d"], {"d": 8}, {"a": 8})
    with pytest.raises(TypeError, match=r"plan_html: reports must be a PlanReport or a non-empty mapping .* got list"):
        plan_html([one])
    with pytest.raises(TypeError, match=r"plan_html: reports must be a PlanReport .* got dict \{\}"):
        plan_html({})
    with pytest.raises(TypeError, match=r"plan_html: reports\['train'\] must be a PlanReport or a VerifyReport under a str mode name, got str"):
        plan_html({"train": "report"})
    with pytest.raises(ValueError, match=r"plan_html: the reports are on meshes of different axes \[\{'d': 8\}, "
                                         r"\{'e': 8\}\]; side by side they must share the axis names"):
        plan_html({"a": one, "b": plan(f32[b"a/e"], {"e": 8}, {"a": 8})})
    with pytest.raises(ValueError, match=r"plan_html: hbm: '80 gigs' is neither a size with a unit"):
        one.to_html("80 gigs")
    with pytest.raises(TypeError, match=r"plan_html: title must be a str, got 3"):
        one.to_html(title=3)


def test_verify_page_links_problems_to_arrays(demo):
    page = demo["wrong"].to_html("tpu-v5p")
    assert "1 problem" in page and "the value assigned to w_down" in page
    links = page[page.index('class="links"'):].split("</div>")[0]
    assert "state.weights.layers.w_down" in links and "embed" not in links  # 'embed' there is a dim
    target = page.index('href="#') + len('href="#')
    anchor = page[target:page.index('"', target)]
    assert f'<tr id="{anchor}">' in page
    assert "step arrays" in page and "optimizer state" in page  # batch, adam moments


@pytest.mark.parametrize("kind", ["explicit", "auto"])
def test_verify_page_with_symbolic_sizes(kind):
    from conftest import make_mesh

    def step(x: f32[jax.Array, b"batch/d embed"]) -> f32[jax.Array, b"batch/d embed"]:
        return x * 2

    report = verify(step, make_mesh(kind).abstract_mesh)
    page = report.to_html()
    assert report.ok and "no problems" in page and "No bytes for x" in page
    assert report._repr_html_() == page


# ---------------------------------------------------------------------------------------------
# The command line


def test_cli_writes_the_page(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "html_model.py").write_text(
        "import jax\nfrom shardtypes import f32, AxisRules\n"
        "Weights = {'<w>': f32[jax.Array, b'embed/fsdp hidden/tp']}\n"
        "RULES = AxisRules([('fsdp', 'd'), ('tp', 't')], modes={'decode': [('fsdp', None)]})\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    out = tmp_path / "plan.html"
    argv = ["plan", "html_model:Weights", "--mesh", "d=4,t=2", "--dims", "embed=8,hidden=4",
            "--rules", "html_model:RULES", "--mode", "default", "--mode", "decode", "--html", str(out), "--hbm", "tpu-v5e"]
    assert main(argv) == 0
    captured = capsys.readouterr()
    assert f"wrote {out}" in captured.err and "mode default:" in captured.out and "mode decode:" in captured.out
    page = out.read_text()
    assert "&lt;w&gt;" in page and ">default</th>" in page and ">decode</th>" in page and "tpu-v5e" in page
    with pytest.raises(SystemExit):
        main(argv[:-1] + ["80 gigs"])
    assert "argument --hbm: '80 gigs' is neither a size with a unit" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(argv[:-4] + ["--html", str(tmp_path / "nowhere" / "p.html")])
    assert "p.html: no such directory" in capsys.readouterr().err
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        if os.access(locked, os.W_OK):
            pytest.skip("running as a user who can write anywhere (root): no unwritable folder to test")
        assert main(argv[:-4] + ["--html", str(locked / "p.html")]) == 2
        assert "shardtypes plan: --html: cannot write" in capsys.readouterr().err
        assert os.listdir(locked) == []
    finally:
        locked.chmod(0o700)


@pytest.mark.parametrize("umask", [0o022, 0o077, 0o002])
def test_write_html_makes_the_page_as_the_umask_says(tmp_path, umask):
    from shardtypes.tools import html_page

    before = os.umask(umask)
    try:
        html_page.write_html(str(tmp_path / "page.html"), "<p>x</p>", "where")
    finally:
        os.umask(before)
    assert (tmp_path / "page.html").stat().st_mode & 0o777 == 0o666 & ~umask
    assert (tmp_path / "page.html").read_text() == "<p>x</p>"


def test_write_html_leaves_nothing_half_written(tmp_path):
    from shardtypes.tools import html_page

    target = tmp_path / "page.html"
    target.mkdir()  # a folder where the file should go: the rename fails
    with pytest.raises(OSError, match=r"where: cannot write .*page.html"):
        html_page.write_html(str(target), "<p>x</p>", "where")
    assert sorted(os.listdir(tmp_path)) == ["page.html"]


# ---------------------------------------------------------------------------------------------
# In a real browser


def _png_colours(data: bytes) -> int:
    """Distinct colours of an 8-bit RGB/RGBA PNG (what Chromium writes), without Pillow."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, header = 8, b"", None
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        chunk = data[pos + 8:pos + 8 + length]
        header = struct.unpack(">IIBBBBB", chunk) if kind == b"IHDR" else header
        idat += chunk if kind == b"IDAT" else b""
        pos += 12 + length
    width, height, depth, colour, _, _, interlace = header
    assert depth == 8 and colour in (2, 6) and interlace == 0, header
    bpp = 3 if colour == 2 else 4
    raw, stride = zlib.decompress(idat), width * bpp
    prev, colours = bytearray(stride), set()
    for y in range(height):
        f, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b, c = prev[i], prev[i - bpp] if i >= bpp else 0
            if f == 1:
                line[i] = (line[i] + a) & 255
            elif f == 2:
                line[i] = (line[i] + b) & 255
            elif f == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        if y % 4 == 0:
            colours.update(bytes(line[i:i + 3]) for i in range(0, stride, bpp * 2))
        prev = line
    return len(colours)


def render(page: str, tmp_path: Path) -> tuple[str, bytes]:
    """The page's text (Chromium's DOM after layout) and its screenshot."""
    html = tmp_path / "page.html"
    html.write_text(page, encoding="utf-8")
    png = tmp_path / "page.png"
    flags = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
             "--disable-component-update", "--disable-sync", "--no-first-run", f"--user-data-dir={tmp_path / 'profile'}"]
    shot = subprocess.run(flags + [f"--screenshot={png}", "--window-size=1400,2000", html.as_uri()],
                          capture_output=True, text=True, timeout=120)
    assert png.exists(), shot.stderr[-2000:]
    dom = subprocess.run(flags + ["--dump-dom", html.as_uri()], capture_output=True, text=True, timeout=120)
    assert dom.returncode == 0, dom.stderr[-2000:]
    return dom.stdout, png.read_bytes()


@needs_chromium
def test_demo_page_in_chromium(demo, tmp_path):
    report = demo["train"]
    text, png = render(plan_html({"train": report, "decode": demo["decode"]}, "h100"), tmp_path)
    assert _png_colours(png) > 20, "the screenshot is (nearly) blank"
    for row in report.rows:
        assert row.path in text, row.path
    assert ">d</tspan>=64" in text and ">t</tspan>=64" in text
    assert fmt_bytes(report.bytes_per_device, "figures") in text  # 223 MiB per device
    if os.environ.get("SHARDTYPES_SCREENSHOT"):
        Path(os.environ["SHARDTYPES_SCREENSHOT"]).write_bytes(png)


@needs_chromium
def test_repr_html_in_chromium(demo, tmp_path):
    report = demo["wrong"]
    text, png = render(report._repr_html_(), tmp_path)
    assert _png_colours(png) > 20, "the screenshot is (nearly) blank"
    assert "state.weights.layers.w_down" in text and "batch.inputs" in text
    assert "1 problem" in text and "verify training_kernel_with_a_mistake" in text


@needs_chromium
def test_a_narrow_window_scrolls_the_table_not_the_page(demo, tmp_path):
    # At 500 px the arrays table is wider than the window: it scrolls sideways in its own box,
    # and the page itself is no wider than the window.
    page = plan_html({"train": demo["train"], "decode": demo["decode"]}, "h100")
    probe = page.replace("</body>", "<script>const t = document.querySelector('.wide');"
                         "document.body.dataset.page = document.documentElement.scrollWidth;"
                         "document.body.dataset.table = t.scrollWidth; document.body.dataset.box = t.clientWidth;"
                         "</script></body>")
    html = tmp_path / "narrow.html"
    html.write_text(probe, encoding="utf-8")
    flags = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
             f"--user-data-dir={tmp_path / 'profile'}", "--window-size=500,1200", "--dump-dom", html.as_uri()]
    dom = subprocess.run(flags, capture_output=True, text=True, timeout=120).stdout
    found = {k: int(v) for k, v in re.findall(r'data-(page|table|box)="(\d+)"', dom)}
    assert found["page"] <= 500, found
    assert found["table"] > found["box"], found  # the table is wider than its box: it scrolls there
