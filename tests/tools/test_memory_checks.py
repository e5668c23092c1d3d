"""Replicated memory as a plan check (issue 28, item 5): ``plan(..., max_replicated=)``,
``verify(..., max_replicated=)`` and the CLI's ``--max-replicated 5%``, as MaxText's
``assert_params_sufficiently_sharded`` does: more than the tolerance of the memory per device held
by replicated copies is an error naming the arrays whose copies cost most."""

import json

import jax
import pytest
from jax.sharding import AbstractMesh, AxisType

from shardtypes import f32, plan, pytree_dataclass, typechecked, verify
from shardtypes.__main__ import main
from shardtypes.tools import VerificationError


@pytree_dataclass
class Weights:
    embed: f32[b"vocab/d embed"]  # sharded: no copies
    norm: f32[b"embed"]  # replicated, small
    proj: f32[b"embed hidden"]  # replicated, the costliest


@pytree_dataclass
class Sharded:
    embed: f32[b"vocab/d embed"]
    proj: f32[b"embed hidden/d"]


DIMS = {"vocab": 64, "embed": 32, "hidden": 64}
MESH = {"d": 8}


def by_hand(report) -> float:
    """The replicated share worked out from the rows: copies beyond each array's 1/devices."""
    devices = report.devices
    per_device = sum(r.bytes_per_device for r in report.rows)
    copies = sum(r.bytes_per_device - r.global_bytes / devices for r in report.rows)
    return copies / per_device


def test_within_the_tolerance_is_no_error():
    report = plan(Sharded, MESH, DIMS, max_replicated="0%")
    assert report.ok and report.replicated_fraction == 0.0
    assert plan(Weights, MESH, DIMS, max_replicated=1.0).ok  # 100%: anything goes


@pytest.mark.parametrize("tolerance", ["5%", "5 %", 0.05, "0.05"])
def test_over_the_tolerance_names_the_costliest_arrays(tolerance):
    report = plan(Weights, MESH, DIMS, max_replicated=tolerance)
    assert not report.ok
    assert report.replicated_fraction == pytest.approx(by_hand(report))
    (error,) = report.errors
    share = f"{report.replicated_fraction:.1%}"
    assert error.startswith(f"{share} of the memory the arrays take per device is replicated copies")
    assert "more than the 5.0% allowed (max_replicated)" in error
    # the costliest first (proj: 8 KiB per device, 7 KiB of them copies), and no sharded array
    assert error.index("Weights.proj (f32[b'embed hidden'], P(None, None)): 7.0 KiB of copies per device "
                       "(8 copies)") < error.index("Weights.norm")
    assert "Weights.embed" not in error
    assert f"error: {error}" in str(report)
    assert json.loads(report.to_json())["errors"] == [error]


def test_a_tree_of_values_is_checked_too():
    structs = jax.eval_shape(lambda: Weights(*(jax.numpy.zeros(s) for s in [(64, 32), (32,), (32, 64)])))
    report = plan(structs, MESH, max_replicated="10%")
    assert not report.ok and "Weights.proj" not in report.errors[0]  # a value tree's paths
    assert ".proj (f32[b'embed hidden']" in report.errors[0]


@pytest.mark.parametrize("bad, error, message", [
    ("5 percent", ValueError, "plan: max_replicated: '5 percent' is not a share; write a percentage such as 5%"),
    ("150%", ValueError, "plan: max_replicated: '150%' is not between 0% and 100%"),
    (-0.1, ValueError, "plan: max_replicated: -0.1 is not between 0% and 100%"),
    (float("nan"), ValueError, "plan: max_replicated: nan is not between 0% and 100%"),
    (True, TypeError, "plan: max_replicated must be a fraction (0.05) or a percentage string ('5%'), got bool"),
    ([5], TypeError, "got list [5]"),
])
def test_a_tolerance_that_does_not_parse(bad, error, message):
    with pytest.raises(error) as info:
        plan(Weights, MESH, DIMS, max_replicated=bad)
    assert message in str(info.value)
    with pytest.raises(error, match="^verify: max_replicated"):
        verify(step, MESH, DIMS, max_replicated=bad)


@typechecked
def step(w: Weights, x: f32[b"batch/d embed"]) -> f32[b"batch/d embed"]:
    return x


@pytest.mark.parametrize("kind", [AxisType.Explicit, AxisType.Auto], ids=["explicit", "auto"])
def test_verify_reports_a_memory_problem(kind):
    mesh = AbstractMesh((8,), ("d",), axis_types=(kind,))
    dims = {**DIMS, "batch": 16}
    assert verify(step, mesh, dims).ok  # no tolerance given: no memory check
    report = verify(step, mesh, dims, max_replicated="5%")
    (problem,) = report.problems
    assert problem.kind == "memory"
    assert problem.message.startswith("75.8% of the memory step()'s arguments take per device is replicated copies")
    assert "costliest: w.proj (f32[b'embed hidden'], P(None, None))" in problem.message
    assert "[memory]" in str(report)
    assert verify(step, mesh, dims, max_replicated="80%").ok
    with pytest.raises(VerificationError, match="replicated copies"):
        verify(step, mesh, dims, max_replicated="5%", raise_on_error=True)


def test_verify_with_symbolic_sizes_says_what_it_needs():
    report = verify(step, MESH, {"vocab": 64, "embed": 32}, max_replicated="5%")
    (problem,) = report.problems
    assert problem.kind == "setup"
    assert problem.message == ("max_replicated: the memory of step()'s arguments ['w', 'x'] is not known, since "
                               "some of their sizes are symbolic; give every dim in dims=...")


def test_the_command_line_flag(tmp_path, monkeypatch, capsys):
    (tmp_path / "replicated_model.py").write_text(
        "from shardtypes import f32, pytree_dataclass\n\n"
        "@pytree_dataclass\nclass W:\n    embed: f32[b'vocab/d embed']\n    proj: f32[b'embed hidden']\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    argv = ["plan", "replicated_model:W", "--mesh", "d=8", "--dims", "vocab=64,embed=32,hidden=64"]

    def run(*extra):
        try:
            code = main([*argv, *extra])
        except SystemExit as e:
            code = e.code
        return (code, *capsys.readouterr())

    code, out, _ = run()
    assert code == 0
    code, out, _ = run("--max-replicated", "5%")
    assert code == 1
    assert "error: 77.8% of the memory the arrays take per device is replicated copies" in out
    assert "costliest: W.proj" in out
    code, out, _ = run("--max-replicated", "0.8")
    assert code == 0
    code, out, _ = run("--max-replicated", "5%", "--json")
    assert code == 1 and json.loads(out)["ok"] is False
    for bad in ("5x", "101%", ""):
        code, _, err = run("--max-replicated", bad)
        assert code == 2
        assert f"error: argument --max-replicated: {bad!r} is not" in err


def test_both_memory_checks_without_sizes_are_one_setup_problem():
    report = verify(step, MESH, {"vocab": 64, "embed": 32}, max_replicated="5%", hbm="h100")
    (problem,) = report.problems
    assert problem.kind == "setup"
    assert problem.message.startswith("max_replicated and hbm: the memory of step()'s arguments ['w', 'x'] is not known")
