"""``shardtypes.search`` (issue 45): every mesh shape of a device count over the given axes times
every rule set, each verified on a chip and ranked by its time per step, those over ``hbm``
last and marked; the report as a table, JSON and a page; the ``shardtypes search`` command;
bad input named by option. The oracle for each candidate is ``verify`` called directly on that
mesh under those rules."""

from __future__ import annotations

import json
import textwrap

import jax
import pytest

from shardtypes import AxisRules, SearchReport, axis_rules, f32, search, shard, typechecked, verify
from shardtypes.__main__ import main
from shardtypes.tools.html_parts import parse_capacity
from shardtypes.tools.search import mesh_shapes

TP = AxisRules([("dp", "d"), ("fsdp", "d"), ("tp", "t")], name="tp")
FSDP = AxisRules([("dp", ("d", "t")), ("fsdp", ("d", "t")), ("tp", None)], name="fsdp")
DIMS = {"batch": 64, "embed": 1024, "hidden": 4096}
RULES = {"fsdp x tp": TP, "fsdp": FSDP}


@typechecked
def step(x: f32[jax.Array, b"batch/dp embed"], w: f32[jax.Array, b"embed/fsdp hidden/tp"]
         ) -> f32[jax.Array, b"batch/dp hidden/tp"]:
    return x @ shard(w, f32[jax.Array, b"embed hidden/tp"])  # FSDP: the weight gathered before use


@pytest.fixture(scope="module")
def found() -> SearchReport:
    return search(step, 8, DIMS, axes=("d", "t"), rules=RULES, chip="h100")


# ---------------------------------------------------------------------------------------------
# the candidates and their order


def test_mesh_shapes_are_every_assignment_in_order():
    assert mesh_shapes(4, ("d", "t")) == [{"d": 1, "t": 4}, {"d": 2, "t": 2}, {"d": 4, "t": 1}]
    assert len(mesh_shapes(4096, ("d", "t"))) == 13
    assert len(mesh_shapes(8, ("a", "b", "c"))) == 10  # ordered factorisations of 2**3 into 3 parts
    assert mesh_shapes(7, ("d",)) == [{"d": 7}]


def test_search_ranks_every_layout_by_verifys_step_time(found):
    assert found.considered == 8 and not found.rejected and len(found.candidates) == 8
    assert {(tuple(c.mesh.values()), c.rules) for c in found.candidates} == {
        (s, r) for s in [(1, 8), (2, 4), (4, 2), (8, 1)] for r in RULES}
    times = [c.step_seconds for c in found.candidates]
    assert times == sorted(times) and times[0] > 0
    for c in found.candidates:  # the oracle: verify on that mesh under those rules
        with axis_rules(RULES[c.rules]):
            direct = verify(step, dict(c.mesh), DIMS, chip="h100")
        assert c.step_seconds == direct.step_seconds == c.report.step_seconds
        assert c.report.cost == direct.cost and c.fits and c.memory_bytes > 0
    assert found.best is found.candidates[0]
    # FSDP x TP on a (1, 8) mesh gathers nothing and splits the weight 8 ways: the fastest
    assert (found.best.rules, dict(found.best.mesh)) == ("fsdp x tp", {"d": 1, "t": 8})


def test_the_report_as_a_table_json_and_a_page(found):
    text = str(found)
    lines = text.splitlines()
    assert lines[0] == "search step over 8 devices on h100: 8 layouts, 8 ranked"
    assert lines[1].split() == ["#", "mesh", "rules", "memory/device", "fits", "step", "time", "no", "overlap",
                                "bound", "by"]
    assert lines[2].split()[:4] == ["1", "d=1", "x", "t=8"] and "fsdp x tp" in lines[2]
    assert lines[-1].startswith("best: fsdp x tp, d=1 x t=8 at ")
    data = json.loads(found.to_json())
    assert data["considered"] == 8 and data["best"]["mesh"] == {"d": 1, "t": 8}
    assert [c["step_seconds"] for c in data["candidates"]] == [c.step_seconds for c in found.candidates]
    assert data["candidates"][0]["communication_bytes"] == found.best.report.communication_bytes_per_device
    page = found.to_html(top=2)
    assert page.startswith("<!DOCTYPE html>") and "the best 2 of 8 layouts on 8 h100" in page
    assert all(c.label in page for c in found.candidates[:2]) and found.candidates[2].label not in page
    assert "Time per step, side by side" in page


def test_layouts_that_do_not_fit_rank_last_and_are_marked():
    all_of = search(step, 8, DIMS, axes=("d", "t"), rules=RULES, chip="h100")
    sizes = sorted(c.memory_bytes for c in all_of.candidates)
    limit = sorted(set(sizes))[1]  # the two smallest layouts fit
    found = search(step, 8, DIMS, axes=("d", "t"), rules=RULES, chip="h100", hbm=limit)
    fits = [c.fits for c in found.candidates]
    assert fits == [True, True] + [False] * 6
    assert all(c.fits == (c.memory_bytes <= limit) for c in found.candidates)
    assert found.best.fits and found.best.step_seconds == min(c.step_seconds for c in found.candidates if c.fits)
    assert [c.step_seconds for c in found.candidates[2:]] == sorted(c.step_seconds for c in found.candidates[2:])
    assert "  yes  " in str(found).splitlines()[3] and "  NO  " in str(found).splitlines()[4]
    none = search(step, 8, DIMS, axes=("d", "t"), rules=RULES, chip="h100", hbm=sizes[0] - 1)
    assert none.best is None and none.hbm_label == parse_capacity(sizes[0] - 1)[1]
    assert str(none).splitlines()[-1] == f"best: none fits in {none.hbm_label}"
    assert json.loads(none.to_json())["best"] is None


def test_meshes_given_top_and_auto_axes():
    shapes = [{"d": 2, "t": 4}, {"d": 8, "t": 1}]
    found = search(step, 8, DIMS, axes=("d", "t"), rules={"tp": TP}, chip="h100", meshes=shapes, top=1,
                   axis_types="auto")
    assert found.considered == 2 and len(found.candidates) == 1
    assert found.best.report.cost.communication.collectives  # Auto axes: the cost model's own collectives
    assert all(t is jax.sharding.AxisType.Auto for t in found.best.report.inputs["x"].sharding.mesh.axis_types)


def test_a_layout_whose_step_fails_is_rejected_with_its_reason():
    found = search(step, 8, {**DIMS, "batch": 4}, axes=("d", "t"), rules={"fsdp x tp": TP}, chip="h100")
    # a batch of 4 splits over d=1, 2 and 4, not over d=8: that layout is listed, never ranked
    assert [dict(r.mesh) for r in found.rejected] == [{"d": 8, "t": 1}]
    assert [tuple(c.mesh.values()) for c in found.candidates] == [(1, 8), (2, 4), (4, 2)]
    reason = found.rejected[0].reason
    assert reason == ("argument \"x\" of step(): the annotation (f32[jax.Array, b'batch/dp embed']): dim 0 "
                      "'batch/dp': rule 'dp' -> 'd': size 4 does not divide over 8 devices")
    assert f"rejected: fsdp x tp, d=8 x t=1: {reason}" in str(found)
    assert not found.rejected[0].report.ok
    assert json.loads(found.to_json())["rejected"] == [{"mesh": {"d": 8, "t": 1}, "rules": "fsdp x tp",
                                                        "reason": reason}]


# ---------------------------------------------------------------------------------------------
# bad input


@pytest.mark.parametrize("kwargs, error, message", [
    ({"devices": 0}, ValueError, r"^search: devices must be a positive int \(the chips to lay the step over\), got 0$"),
    ({"devices": True}, ValueError, r"^search: devices must be a positive int"),
    ({"devices": "8"}, ValueError, r"^search: devices must be a positive int .* got '8'$"),
    ({"axes": ()}, ValueError, r"^search: axes must be a non-empty sequence of mesh axis names, as \('d', 't'\), got \(\)$"),
    ({"axes": "dt"}, ValueError, r"^search: axes must be a non-empty sequence"),
    ({"axes": ("d", "d")}, ValueError, r"^search: axes names a mesh axis twice: \['d', 'd'\]$"),
    ({"rules": {}}, ValueError, r"^search: rules must be a non-empty mapping of label to AxisRules"),
    ({"rules": {"tp": [("tp", "t")]}}, TypeError, r"^search: rules\['tp'\] must be an AxisRules under a str label, got list$"),
    ({"chip": "h1000"}, ValueError, r"^search\(chip=\.\.\.\): 'h1000' is not a known chip \(did you mean 'h100'\?\)"),
    ({"hbm": "80 gigs"}, ValueError, r"^search: hbm: '80 gigs' is neither a size with a unit"),
    ({"top": 0}, ValueError, r"^search: top must be a positive int or None, got 0$"),
    ({"axis_types": "explict"}, ValueError, r"^search: axis_types must be 'explicit' or 'auto', got 'explict' "
                                            r"\(did you mean 'explicit'\?\)$"),
    ({"meshes": [{"d": 2, "t": 2}]}, ValueError, r"^search: meshes has d=2 x t=2, 4 devices, not devices=8$"),
    ({"meshes": [{"t": 2, "d": 4}]}, ValueError, r"^search: each of meshes must give a positive size to each of "
                                                 r"axes \['d', 't'\] in order, got \{'t': 2, 'd': 4\}$"),
    ({"meshes": {"d": 8, "t": 1}}, ValueError, r"^search: meshes must be a non-empty list of mesh shapes"),
])
def test_bad_input_names_the_option(kwargs, error, message):
    args = {"devices": 8, "axes": ("d", "t"), "rules": RULES, "chip": "h100", **kwargs}
    devices = args.pop("devices")
    with pytest.raises(error, match=message):
        search(step, devices, DIMS, **args)


def test_a_function_that_is_not_one():
    with pytest.raises(TypeError, match=r"^search: fn must be a function \(such as a checked train_step\), got 3"):
        search(3, 8, axes=("d",), rules=RULES, chip="h100")


def test_a_rule_set_that_fails_on_every_mesh_lists_each_reason():
    wrong = AxisRules([("dp", "d"), ("fsdp", "d"), ("tp", "x")], name="typo")  # no mesh axis 'x'
    with pytest.raises(ValueError) as caught:
        search(step, 8, DIMS, axes=("d", "t"), rules={"ok": TP, "typo": wrong}, chip="h100")
    text = str(caught.value)
    lines = text.splitlines()
    assert lines[0] == "search: under rules['typo'] step() fails on every mesh:"
    assert [line.split(":")[0].strip() for line in lines[1:]] == ["d=1 x t=8", "d=2 x t=4", "d=4 x t=2", "d=8 x t=1"]
    assert all("'x'" in line for line in lines[1:])


# ---------------------------------------------------------------------------------------------
# the command line

MODEL = textwrap.dedent('''
    import jax
    from shardtypes import AxisRules, f32, shard, typechecked

    TP = AxisRules([("dp", "d"), ("fsdp", "d"), ("tp", "t")])
    FSDP = AxisRules([("dp", ("d", "t")), ("fsdp", ("d", "t")), ("tp", None)])
    NOT_RULES = 3

    @typechecked
    def step(x: f32[jax.Array, b"batch/dp embed"], w: f32[jax.Array, b"embed/fsdp hidden/tp"]
             ) -> f32[jax.Array, b"batch/dp hidden/tp"]:
        return x @ shard(w, f32[jax.Array, b"embed hidden/tp"])
''')
BASE = ["search", "search_cli_model:step", "--devices", "8", "--axes", "d,t", "--chip", "h100",
        "--dims", "batch=64,embed=1024,hidden=4096"]


@pytest.fixture
def here(tmp_path, monkeypatch):
    (tmp_path / "search_cli_model.py").write_text(MODEL)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


def test_cli_search_prints_the_ranking(here, capsys):
    code = main([*BASE, "--rules", "fsdp x tp=search_cli_model:TP", "--rules", "search_cli_model:FSDP",
                 "--html", str(here / "best.html")])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert out.startswith("search step over 8 devices on h100: 8 layouts, 8 ranked")
    assert "best: fsdp x tp, d=1 x t=8" in out and "FSDP" in out
    assert "wrote" in err and (here / "best.html").read_text().startswith("<!DOCTYPE html>")
    assert main([*BASE, "--rules", "search_cli_model:TP", "--json", "--top", "2", "--auto"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert len(data["candidates"]) == 2 and data["considered"] == 4


def test_cli_search_exit_1_when_nothing_fits(here, capsys):
    assert main([*BASE, "--rules", "search_cli_model:TP", "--hbm", "1KiB"]) == 1
    assert "best: none fits in 1.00 KiB" in capsys.readouterr().out


@pytest.mark.parametrize("extra, message", [
    (["--rules", "search_cli_model:NOT_RULES"], "--rules NOT_RULES: expected AxisRules, found int"),
    (["--rules", "search_cli_model:TP", "--chip", "h1000"], "'h1000' is not a known chip"),
    (["--rules", "search_cli_model:TP", "--devices", "0"], "search: devices must be a positive int"),
    (["--rules", "search_cli_model:TP", "--axes", "d,d"], "axes names a mesh axis twice"),
])
def test_cli_search_bad_usage(here, capsys, extra, message):
    args = [*BASE, *extra]
    try:
        code = main(args)
    except SystemExit as e:
        code = e.code
    assert code == 2
    assert message in capsys.readouterr().err


def test_cli_search_needs_rules(here, capsys):
    with pytest.raises(SystemExit) as caught:
        main(BASE)
    assert caught.value.code == 2 and "--rules" in capsys.readouterr().err
