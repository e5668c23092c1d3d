"""A step's time on a named chip through verify, the plan page and the command line (issue 36
items 4 and 5): ``verify(..., chip=, links=)`` gives ``report.step_time`` and ``step_seconds``;
``plan_html`` draws two layouts' memory and time side by side; ``shardtypes verify --chip
--links --rules A --rules B`` compares rule sets. Bad chips and links are errors naming the
option and the value, raised before anything is traced."""

import json
import shutil
import subprocess
import textwrap

import jax
import pytest

from shardtypes import AxisRules, axis_rules, f32, plan, plan_html, shard, typechecked, verify
from shardtypes.__main__ import main
from shardtypes.tools import chips

from conftest import make_mesh

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")

TP = AxisRules([("dp", "d"), ("fsdp", "d"), ("tp", "t")], name="tp")
FSDP = AxisRules([("dp", ("d", "t")), ("fsdp", ("d", "t")), ("tp", None)], name="fsdp")
DIMS = {"batch": 64, "embed": 1024, "hidden": 4096}


@typechecked
def step(x: f32[jax.Array, b"batch/dp embed"], w: f32[jax.Array, b"embed/fsdp hidden/tp"]
         ) -> f32[jax.Array, b"batch/dp hidden/tp"]:
    full = shard(w, f32[jax.Array, b"embed hidden/tp"])  # FSDP: the weight gathered before use
    return x @ full


def verified(rules, mesh=None, **kwargs):
    with axis_rules(rules):
        return verify(step, mesh if mesh is not None else {"d": 4, "t": 2}, DIMS, **kwargs)


# ---------------------------------------------------------------------------------------------
# verify


@pytest.mark.parametrize("kind", ["explicit", "auto"])
def test_verify_gives_the_step_time_of_its_cost(kind):
    mesh = make_mesh(kind).abstract_mesh
    report = verified(TP, mesh, chip="h100")
    assert report.ok, str(report)
    assert report.cost is not None and report.flops_per_device > 0
    expected = chips.step_time(report.cost, {"d": 4, "t": 2}, "h100")
    assert report.step_time == expected
    assert report.step_seconds == expected.perfect_overlap > 0
    assert report.step_time.compute == pytest.approx(report.cost.flops_by_dtype["float32"] / 494.5e12)
    assert report.step_time.memory == pytest.approx(report.memory_bytes_per_device / 3.35e12)
    assert set(report.step_time.links) == {"d", "t"}  # 8 GPUs: one node, NVLink
    assert all(link.name == "nvlink" for link in report.step_time.links.values())
    assert f"\n  step time: {report.step_time}" in str(report)
    data = json.loads(report.to_json())
    assert data["step_time"]["chip"] == "h100" and data["step_time"]["bound"] == str(report.step_time.bound)


def test_verify_on_explicit_axes_times_the_gather_over_its_link():
    report = verified(TP, chip="h100", links={"d": "25GB/s", "t": "nvlink"})
    gathered = report.communication.by_axes[("d",)]
    assert gathered == 1024 * 4096 * 4 // 2 * 3 // 4  # (n-1)/n of the gathered block, t split in 2
    assert report.step_time.communication[("d",)] == pytest.approx(gathered / 25e9)
    assert str(report.step_time.bound).startswith("communication over 'd' (25GB/s, 25 GB/s): the all-gathers, 6 MiB")
    assert "test_step_time.py" in report.step_time.bound.where  # where in the user's code


def test_without_a_chip_there_is_no_step_time():
    report = verified(TP)
    assert report.step_time is None and report.step_seconds is None
    assert "step time" not in str(report) and json.loads(report.to_json())["step_time"] is None


@pytest.mark.parametrize("kwargs, error, message", [
    ({"chip": "h1000"}, ValueError, r"^verify\(chip=\.\.\.\): 'h1000' is not a known chip \(did you mean 'h100'\?\); "
                                    r"known chips: h100, h200, a100"),
    ({"chip": 100}, TypeError, r"^verify\(chip=\.\.\.\): expected a chip name"),
    ({"links": {"d": "nvlink"}}, ValueError, r"^verify: links= says which link each mesh axis runs over on a chip; "
                                             r"give chip= too$"),
    ({"chip": "h100", "links": {"d": "nvlink"}}, ValueError,
     r"^verify\(links=\.\.\.\): mesh axis 't' \(2 devices\) is mapped to no link; give every mesh axis one of "
     r"h100's links \(nvlink, network\)"),
    ({"chip": "h100", "links": {"d": "nvlink", "t": "nvlink", "x": "network"}}, ValueError,
     r"^verify\(links=\.\.\.\): 'x' is not a mesh axis; the mesh's axes are d, t$"),
    ({"chip": "h100", "links": {"d": "nvlink", "t": "40 gigs"}}, ValueError,
     r"^verify\(links=\.\.\.\)\['t'\]: '40 gigs' is not a bandwidth"),
    ({"chip": "tpu-v5e", "links": {"d": "nvlink", "t": "ici"}}, ValueError,
     r"^verify\(links=\.\.\.\)\['d'\]: 'nvlink' is neither one of tpu-v5e's links \(ici, dcn\)"),
    ({"chip": "tpu-v4"}, ValueError, r"^verify\(chip=\.\.\.\): tpu-v4 publishes no ici bandwidth, the link mesh axis "
                                     r"'d' runs over by default; give verify\(links=\.\.\.\) bandwidths"),
    ({"chip": "h100", "cost": False}, ValueError, r"^verify: chip= needs the step's cost; leave cost=True$"),
])
def test_bad_chips_and_links_are_refused_before_tracing(kwargs, error, message):
    traced = []

    def body(x: f32[jax.Array, b"batch/d"]) -> f32[jax.Array, b"batch/d"]:
        traced.append(x)
        return x

    with pytest.raises(error, match=message):
        verify(body, {"d": 4, "t": 2}, {"batch": 8}, **kwargs)
    assert not traced


# ---------------------------------------------------------------------------------------------
# The plan page: two layouts side by side


@pytest.fixture(scope="module")
def layouts():
    return {"fsdp x tp": verified(TP, chip="h100", links={"d": "network", "t": "nvlink"}),
            "fsdp": verified(FSDP, chip="h100", links={"d": "network", "t": "nvlink"})}


def test_two_layouts_side_by_side(layouts):
    page = plan_html(layouts, "h100")
    assert "Time per step, side by side" in page and "Time per step on h100" in page
    assert "Memory per device — fsdp x tp" in page and "Memory per device — fsdp" in page
    for report in layouts.values():
        assert chips.fmt_seconds(report.step_time.perfect_overlap) in page
        assert chips.fmt_seconds(report.step_time.no_overlap) in page
        for row in report.arguments_plan().rows:
            assert row.path in page
    # the faster layout (by the lower bound) first, in bold
    fast = min(layouts, key=lambda m: layouts[m].step_seconds)
    assert page.index(f'<tr class="best"><td>{fast}</td>') < page.index("<tr class=\"\"><td>")
    assert "communication over d × t (network, 50 GB/s)" in page  # FSDP's group, at its slowest link
    assert "communication over d (network, 50 GB/s)" in page
    assert "verify step" in page  # the title names the step


def test_the_page_times_reports_verified_without_a_chip_on_the_hbm_chip():
    plain = {"fsdp x tp": verified(TP), "fsdp": verified(FSDP)}
    page = plan_html(plain, "tpu-v5e")
    assert "time per step on tpu-v5e" in page and "Time per step, side by side" in page
    assert "communication over d × t (ici, 200 GB/s)" in page
    sized = plan_html(plain, "80GiB")  # a size names no chip: no time band
    assert "Time per step" not in sized and "capacity 80.0 GiB" in sized
    with pytest.raises(ValueError, match=r"^plan_html: hbm: tpu-v4 publishes no ici bandwidth, the link mesh axis 'd' "
                                         r"runs over by default; give verify\(links=\.\.\.\) bandwidths"):
        plan_html(plain, "tpu-v4")


def test_plan_and_verify_reports_mix_and_are_checked(layouts):
    with axis_rules(TP):
        planned = plan({"x": f32[b"batch/dp embed"]}, {"d": 4, "t": 2}, DIMS)
    page = plan_html({"planned": planned, "verified": layouts["fsdp"]}, "h100")
    assert "Time per step on h100" in page and "Time per step, side by side" not in page  # one time only
    with pytest.raises(TypeError, match=r"^plan_html: reports\['a'\] must be a PlanReport or a VerifyReport under a "
                                        r"str mode name, got StepTime$"):
        plan_html({"a": layouts["fsdp"].step_time})
    other = verified(TP, {"d": 8, "t": 1}, chip="h100")  # another shape of the same axes: side by side
    page = plan_html({"a": layouts["fsdp"], "b": other})
    assert "meshes d=4 × t=2, d=8 × t=1 (8 devices)" in page and "Time per step, side by side" in page


def test_verify_page_has_the_time_band(layouts):
    page = layouts["fsdp x tp"].to_html("h100")
    assert "Time per step on h100" in page and "perfect overlap (the lower bound)" in page
    assert "bound by " in page


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install -y chromium)")
def test_two_layouts_in_chromium(layouts, tmp_path):
    html = tmp_path / "layouts.html"
    html.write_text(plan_html(layouts, "h100"), encoding="utf-8")
    flags = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
             f"--user-data-dir={tmp_path / 'profile'}", "--window-size=1400,1400", "--dump-dom", html.as_uri()]
    dom = subprocess.run(flags, capture_output=True, text=True, timeout=120)
    assert dom.returncode == 0, dom.stderr[-2000:]
    text = dom.stdout
    assert "Time per step, side by side" in text and "perfect overlap (the lower bound)" in text
    for name, report in layouts.items():
        assert f"Memory per device — {name}" in text
        assert str(report.step_time.bound).split(",")[0] in text.replace("&#x27;", "'").replace("&amp;", "&")


# ---------------------------------------------------------------------------------------------
# The command line


MODEL = textwrap.dedent('''
    import jax
    from shardtypes import AxisRules, f32, shard, typechecked

    TP = AxisRules([("dp", "d"), ("fsdp", "d"), ("tp", "t")])
    FSDP = AxisRules([("dp", ("d", "t")), ("fsdp", ("d", "t")), ("tp", None)])
    WEIGHTS = {"w": f32[jax.Array, b"embed/fsdp hidden/tp"]}

    @typechecked
    def step(x: f32[jax.Array, b"batch/dp embed"], w: f32[jax.Array, b"embed/fsdp hidden/tp"]
             ) -> f32[jax.Array, b"batch/dp hidden/tp"]:
        return x @ shard(w, f32[jax.Array, b"embed hidden/tp"])
''')
BASE = ["verify", "chips_cli_model:step", "--mesh", "d=4,t=2", "--dims", "batch=64,embed=1024,hidden=4096"]


@pytest.fixture
def here(tmp_path, monkeypatch):
    (tmp_path / "chips_cli_model.py").write_text(MODEL)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


def run(capsys, *argv):
    try:
        code = main(list(argv))
    except SystemExit as e:
        code = e.code
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_step_time_on_a_chip(here, capsys):
    code, out, err = run(capsys, *BASE, "--rules", "chips_cli_model:TP", "--chip", "H100")
    assert code == 0, err
    assert "\n  step time: " in out and "per step on h100 (perfect overlap to none)" in out
    code, out, err = run(capsys, *BASE, "--rules", "chips_cli_model:TP", "--chip", "h100", "--links",
                         "d=10GB/s,t=nvlink", "--json")
    assert code == 0, err
    data = json.loads(out)
    assert data["step_time"]["links"]["d"] == {"link": "10GB/s", "bytes_per_second": 1e10}
    assert data["step_time"]["bound"].startswith("communication over 'd' (10GB/s, 10 GB/s): the all-gathers")
    assert data["step_time"]["bound_kind"] == "communication"


def test_cli_compares_rule_sets(here, capsys):
    page = here / "layouts.html"
    code, out, err = run(capsys, *BASE, "--chip", "h100", "--links", "d=network,t=nvlink", "--rules",
                         "chips_cli_model:TP", "--rules", "pure fsdp=chips_cli_model:FSDP", "--html", str(page))
    assert code == 0, err
    assert out.startswith("rules TP:\nverify step on a d=4 x t=2 mesh") and "\n\nrules pure fsdp:\nverify step" in out
    assert "step time on h100, a lower bound per device (perfect overlap / none):" in out
    table = out[out.index("step time on h100, a lower bound"):].splitlines()[1:]
    assert [line.split()[0] for line in table] == ["TP", "pure"]  # fastest first
    text = page.read_text()
    assert "Time per step, side by side" in text and "Memory per device — pure fsdp" in text
    assert f"wrote {page}" in err
    code, out, err = run(capsys, *BASE, "--chip", "h100", "--rules", "chips_cli_model:TP", "--rules",
                         "chips_cli_model:FSDP", "--json")
    assert code == 0, err
    both = json.loads(out)
    assert set(both) == {"TP", "FSDP"} and both["FSDP"]["step_time"]["chip"] == "h100"


@pytest.mark.parametrize("extra, message", [
    (["--chip", "h1000"], "argument --chip: 'h1000' is not a known chip (did you mean 'h100'?); known chips: h100, "
                          "h200, a100, a100-40gb, a100-80gb, tpu-v4, tpu-v5e, tpu-v5p, tpu-v6e"),
    (["--links", "d=nvlink,t=nvlink"], "--links needs --chip"),
    (["--chip", "h100", "--links", "d=nvlink"], "--links: mesh axis 't' (2 devices) is mapped to no link; give "
                                               "every mesh axis one of h100's links (nvlink, network) or a bandwidth "
                                               "such as '50GB/s', e.g. d=network,t=nvlink"),
    (["--chip", "h100", "--links", "d=nvlink,t=nvlink,e=nvlink"], "--links: 'e' is not a mesh axis"),
    (["--chip", "h100", "--links", "d=nvlink,t=40"], "--links['t']: '40' is not a bandwidth"),
    (["--chip", "tpu-v4"], "--chip: tpu-v4 publishes no ici bandwidth, the link mesh axis 'd' runs over by "
                           "default; give --links bandwidths, e.g. d=50GB/s,t=50GB/s"),
    (["--rules", "chips_cli_model:TP", "--rules", "chips_cli_model:TP"], "--rules: 'chips_cli_model:TP' is given twice"),
    (["--rules", "chips_cli_model:TP", "--rules", "chips_cli_model:FSDP", "--mode", "a", "--mode", "b"],
     "--mode: verify takes one mode"),
])
def test_cli_bad_chip_links_and_rules_are_bad_usage(here, capsys, extra, message):
    code, out, err = run(capsys, *BASE, *extra)
    assert code == 2 and message in err, err
    assert out == ""


def test_plan_compares_rule_sets_too(here, capsys):
    plan_argv = ["plan", "chips_cli_model:WEIGHTS", "--mesh", "d=4,t=2", "--dims", "embed=1024,hidden=4096",
                 "--rules", "chips_cli_model:TP", "--rules", "chips_cli_model:FSDP"]
    code, out, err = run(capsys, *plan_argv)
    assert code == 0, err
    assert out.startswith("rules TP:\n") and "\n\nrules FSDP:\n" in out
    assert "P('d', 't')" in out and "P(('d', 't'), None)" in out
    code, out, err = run(capsys, *plan_argv, "--mode", "a", "--mode", "b")
    assert code == 2 and "--mode: with --rules given several times (rule sets compared), give one mode" in err


# ---------------------------------------------------------------------------------------------
# The demo's 64x64 comparison


def test_the_demo_compares_fsdp_x_tp_with_pure_fsdp():
    import importlib.util
    import sys
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "examples" / "transformer.py"
    spec = importlib.util.spec_from_file_location("examples_transformer_chips", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    try:
        spec.loader.exec_module(module)
        compared = module.layouts_at_scale("h100")
    finally:
        del sys.modules[spec.name]
    assert set(compared) == {"fsdp x tp", "fsdp"}
    tp, fsdp = compared["fsdp x tp"], compared["fsdp"]
    assert tp.ok and fsdp.ok, (str(tp), str(fsdp))
    assert tp.mesh == fsdp.mesh == {"d": 64, "t": 64}
    # pure FSDP sends every byte over both axes; FSDP x TP mostly over t
    assert set(fsdp.communication.by_axes) == {("d", "t")}
    assert max(tp.communication.by_axes, key=tp.communication.by_axes.get) == ("t",)
    # the same model: the same matmul FLOPs per device within 1%
    assert fsdp.cost.matmul_flops_per_device == pytest.approx(tp.cost.matmul_flops_per_device, rel=0.01)
    # on H100s 64 devices of t span 8 nodes: both axes over the network, and TP's gathers bound it
    assert {link.name for link in tp.step_time.links.values()} == {"network"}
    assert str(tp.step_time.bound).startswith("communication over 't' (network, 50 GB/s): the all-gathers")
    assert fsdp.step_seconds < tp.step_seconds
    page = plan_html(compared, "h100")
    assert "Time per step, side by side" in page and "Memory per device — fsdp x tp" in page
