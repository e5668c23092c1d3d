"""The ``shardtypes`` command (shardtypes.__main__; issue 5, item 3): ``plan`` and ``verify`` of a
model module written into a temporary directory, in-process through ``main(argv)`` and, a few
times, as a real process (``python -m shardtypes`` and the installed console script).

Reports go to standard output; the exit status is 0 when all is well, 1 when problems are found,
2 for bad usage.
"""

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import textwrap
from pathlib import Path

import pytest

from shardtypes.__main__ import main

MODULE = "shardtypes_cli_model"

MODEL = textwrap.dedent('''
    import jax
    import jax.numpy as jnp
    from jax.sharding import PartitionSpec as P, reshard

    from shardtypes import Array, AxisRules, f32, pytree_dataclass, typechecked


    @pytree_dataclass
    class Layer:
        w_up: f32[b"embed/d hidden/t"]
        w_down: f32[b"hidden/t embed/d"]


    Layers = Array["layers", Layer]

    # 128 MiB replicated on every device for rows=4096, cols=8192: a warning, not an error
    Table = f32[b"rows cols"]


    @typechecked
    def step(x: f32[b"batch/d embed"], layer: Layer, n: int) -> f32[b"batch/d embed"]:
        for _ in range(n):
            h: f32[b"batch/d hidden/t"] = x @ reshard(layer.w_up, P(None, "t"))
            x = x + jnp.einsum("bh,he->be", h, reshard(layer.w_down, P("t", None)), out_sharding=P("d", None))
        return x


    @typechecked
    def step_wrong(x: f32[b"batch/d embed"], layer: Layer) -> f32[b"batch/d embed"]:
        h: f32[b"batch/d hidden"] = x @ reshard(layer.w_up, P(None, "t"))  # wrong: hidden/t
        return x


    @typechecked
    def uses_layer(layer: Layer) -> f32[b""]:
        return inner(Layer(w_up=reshard(layer.w_up, P("t", "d")), w_down=layer.w_down))


    @typechecked
    def inner(layer: Layer) -> f32[b""]:
        return jnp.sum(layer.w_up)


    RULES = AxisRules([("fsdp", "d"), ("tp", "t")], modes={"decode": [("fsdp", None)]})


    @pytree_dataclass
    class Logical:
        w: f32[b"embed/fsdp hidden/tp"]
''')

LAYERS = ["--mesh", "d=4,t=2", "--dims", "layers=2,embed=8,hidden=16"]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("cli")
    (path / f"{MODULE}.py").write_text(MODEL)
    yield path
    sys.modules.pop(MODULE, None)


@pytest.fixture
def here(model_dir, monkeypatch):
    """Runs main() in the model's directory, with sys.path restored afterwards."""
    monkeypatch.chdir(model_dir)
    monkeypatch.syspath_prepend(str(model_dir))
    return model_dir


def run_main(capsys, *argv):
    """(exit status, stdout, stderr) of main(argv); SystemExit counts as its code."""
    try:
        code = main(list(argv))
    except SystemExit as e:
        code = e.code
    out, err = capsys.readouterr()
    return code, out, err


def run_process(cwd, *args, script=False):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(cwd), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    command = [console_script()] if script else [sys.executable, "-m", "shardtypes"]
    return subprocess.run([*command, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


def console_script() -> str:
    path = Path(sysconfig.get_path("scripts")) / "shardtypes"
    if path.exists():
        return str(path)
    found = shutil.which("shardtypes")
    if found is None:
        pytest.skip("the shardtypes console script is not installed")
    return found


# ---------------------------------------------------------------------------------------------
# As a process: python -m shardtypes and the console script.


def test_plan_table_as_a_process_and_console_script(model_dir):
    proc = run_process(model_dir, "plan", f"{MODULE}:Layers", *LAYERS)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].split() == ["path", "annotation", "dtype", "shape", "PartitionSpec", "per", "device",
                                "bytes/device"]
    up = next(line for line in lines if ".w_up" in line)
    for cell in ("f32[b'layers embed/d hidden/t']", "float32", "(2, 8, 16)", "P(None, 'd', 't')", "(2, 2, 8)",
                 "128 B"):
        assert cell in up, up
    assert "2 arrays on a d=4 x t=2 mesh (8 devices): 256 B per device" in proc.stdout

    script = run_process(model_dir, "plan", f"{MODULE}:Layers", *LAYERS, script=True)
    assert script.returncode == 0, script.stderr
    assert script.stdout == proc.stdout


def test_verify_as_a_process_and_console_script(model_dir):
    args = ["verify", f"{MODULE}:step_wrong", "--mesh", "d=64,t=64", "--dims", "embed=8192"]
    proc = run_process(model_dir, *args)
    assert proc.returncode == 1, proc.stderr
    assert "verify step_wrong on a d=64 x t=64 mesh (4,096 devices)" in proc.stdout
    assert "the value assigned to h of step_wrong() is not f32[b'batch/d hidden']" in proc.stdout
    script = run_process(model_dir, *args, script=True)
    assert (script.returncode, script.stdout) == (1, proc.stdout)


def test_help_as_a_process(model_dir):
    proc = run_process(model_dir, "--help")
    assert proc.returncode == 0
    assert "examples:" in proc.stdout
    assert "shardtypes plan mymodel:Layers --mesh d=64,t=64 --dims layers=80,embed=8192,hidden=28672" in proc.stdout
    assert "shardtypes verify mymodel:train_step --mesh d=64,t=64" in proc.stdout


def test_unknown_module_as_a_process(model_dir):
    proc = run_process(model_dir, "plan", "no_such_model_module:Layers", "--mesh", "d=4")
    assert proc.returncode != 0
    assert "shardtypes: cannot import 'no_such_model_module'" in proc.stderr
    assert "Traceback" not in proc.stderr


# ---------------------------------------------------------------------------------------------
# plan, in-process


def test_plan_table(here, capsys):
    code, out, err = run_main(capsys, "plan", f"{MODULE}:Layers", *LAYERS)
    assert code == 0, err
    assert out.startswith("path ")
    assert "PartitionSpec" in out.splitlines()[0] and "bytes/device" in out.splitlines()[0]
    assert "P(None, 't', 'd')" in out  # w_down
    assert "0.0% of the memory they take holds replicated copies" in out


def test_plan_json(here, capsys):
    code, out, err = run_main(capsys, "plan", f"{MODULE}:Layers", *LAYERS, "--json")
    assert code == 0, err
    data = json.loads(out)
    assert data["mesh"] == {"d": 4, "t": 2} and data["devices"] == 8 and data["ok"] is True
    assert [r["path"].rsplit(".", 1)[-1] for r in data["rows"]] == ["w_up", "w_down"]
    assert data["rows"][0]["shape"] == ["2", "8", "16"]
    assert data["rows"][0]["device_shape"] == ["2", "2", "8"]
    assert data["bytes_per_device"] == 256 and data["global_bytes"] == 2048


def test_plan_strict_fails_on_warnings(here, capsys):
    args = ["plan", f"{MODULE}:Table", "--mesh", "d=2", "--dims", "rows=4096,cols=8192"]
    code, out, _ = run_main(capsys, *args)
    assert code == 0
    assert "warning: the annotation (f32[b'rows cols']) is replicated on all 2 devices: 128.0 MiB on each" in out
    code, out, _ = run_main(capsys, *args, "--strict")
    assert code == 1
    assert "warning: the annotation (f32[b'rows cols']) is replicated" in out
    # no warnings: --strict passes
    code, _, _ = run_main(capsys, "plan", f"{MODULE}:Layers", *LAYERS, "--strict")
    assert code == 0


def test_plan_errors_exit_1(here, capsys):
    code, out, _ = run_main(capsys, "plan", f"{MODULE}:Layer", "--mesh", "d=4,t=2", "--dims", "embed=6,hidden=16")
    assert code == 1
    assert "error: Layer.w_up (f32[b'embed/d hidden/t']): dim 0 of size 6 does not divide over ('d',) " \
           "(4 devices); it would be padded to 8" in out
    code, out, _ = run_main(capsys, "plan", f"{MODULE}:Layer", "--mesh", "d=4,t=2", "--dims", "embed=8")
    assert code == 1
    assert "needs the size of 'hidden'; pass it in dims" in out


def test_plan_with_rules_and_mode(here, capsys):
    base = ["plan", f"{MODULE}:Logical", "--mesh", "d=4,t=2", "--dims", "embed=8,hidden=16",
            "--rules", f"{MODULE}:RULES"]
    code, out, err = run_main(capsys, *base)
    assert code == 0, err
    assert "P('d', 't')" in out and "(2, 8)" in out
    code, out, err = run_main(capsys, *base, "--mode", "decode")
    assert code == 0, err
    assert "P(None, 't')" in out and "P('d', 't')" not in out
    assert "Logical.w" in out and "(8, 8)" in out


def test_mode_without_rules_is_bad_usage(here, capsys):
    code, _, err = run_main(capsys, "plan", f"{MODULE}:Logical", "--mesh", "d=4,t=2", "--dims",
                            "embed=8,hidden=16", "--mode", "decode")
    assert code == 2
    assert "--mode needs --rules" in err


def test_unknown_mode_is_bad_usage(here, capsys):
    code, _, err = run_main(capsys, "plan", f"{MODULE}:Logical", "--mesh", "d=4,t=2", "--dims",
                            "embed=8,hidden=16", "--rules", f"{MODULE}:RULES", "--mode", "nosuch")
    assert code == 2
    assert "nosuch" in err


# ---------------------------------------------------------------------------------------------
# verify, in-process


def test_verify_correct_function(here, capsys):
    code, out, err = run_main(capsys, "verify", f"{MODULE}:step", "--mesh", "d=64,t=64", "--dims", "embed=8192",
                              "--static", "n=3")
    assert code == 0, out + err
    assert out.strip() == ("verify step on a d=64 x t=64 mesh (4,096 devices), dims embed=8192, batch=64*batch, "
                           "hidden=64*hidden: ok, no problems")


def test_verify_needs_static(here, capsys):
    code, out, _ = run_main(capsys, "verify", f"{MODULE}:step", "--mesh", "d=64,t=64")
    assert code == 1
    assert "[setup] argument \"n\" of step() is annotated <class 'int'>, which is not an array tree" in out
    code, out, _ = run_main(capsys, "verify", f"{MODULE}:step", "--mesh", "d=64,t=64", "--static", "n=3,m=1")
    assert code == 1
    assert "static values given for ['m'], which step() does not take" in out


def test_verify_wrong_copy(here, capsys):
    code, out, _ = run_main(capsys, "verify", f"{MODULE}:step_wrong", "--mesh", "d=64,t=64", "--dims", "embed=8192")
    assert code == 1
    assert "1 problem" in out.splitlines()[0]
    assert ("1. [check] the value assigned to h of step_wrong() is not f32[b'batch/d hidden']: sharding over "
            "Explicit axes is P('d', 't') but the annotation says P('d', None)") in out


def test_verify_reports_the_path(here, capsys):
    code, out, _ = run_main(capsys, "verify", f"{MODULE}:uses_layer", "--mesh", "d=64,t=64")
    assert code == 1
    assert "argument \"layer\" of inner(): layer.w_up is not f32[b'embed/d hidden/t']" in out


def test_verify_json(here, capsys):
    code, out, _ = run_main(capsys, "verify", f"{MODULE}:step_wrong", "--mesh", "d=64,t=64", "--dims",
                            "embed=8192", "--json")
    assert code == 1
    data = json.loads(out)
    assert data["function"] == "step_wrong" and data["ok"] is False
    assert data["mesh"] == {"d": 64, "t": 64} and data["dims"]["embed"] == "8192"
    assert data["problems"][0]["kind"] == "check"
    assert "the value assigned to h of step_wrong()" in data["problems"][0]["message"]
    code, out, _ = run_main(capsys, "verify", f"{MODULE}:step", "--mesh", "d=8", "--dims", "hidden=16",
                            "--static", "n=1", "--json")
    assert code == 1  # the mesh has no axis t
    assert json.loads(out)["problems"][0]["kind"] == "dims"


# ---------------------------------------------------------------------------------------------
# Usage errors


@pytest.mark.parametrize("mesh, message", [
    ("d=x", "--mesh: bad value for d: 'x'"),
    ("d=4,t", "--mesh: expected name=value pairs separated by commas, got 't'"),
    ("4=d", "--mesh: '4' is not a name"),
    ("", "--mesh: give the axes, as d=64,t=64"),
])
def test_bad_mesh(here, capsys, mesh, message):
    code, out, err = run_main(capsys, "plan", f"{MODULE}:Layers", "--mesh", mesh)
    assert code == 2
    assert message in err
    assert out == ""


def test_mesh_sizes_must_be_positive(here, capsys):
    code, _, err = run_main(capsys, "plan", f"{MODULE}:Layers", "--mesh", "d=0", "--dims", "layers=2,embed=8,hidden=16")
    assert code == 2
    assert "--mesh" in err


@pytest.mark.parametrize("dims, message", [
    ("embed=x", "--dims: bad value for embed: 'x'"),
    ("embed=True", "--dims: bad value for embed: 'True' (a size is an int, or a tuple of ints for a '*name' dim)"),
    ("embed=1.5", "--dims: bad value for embed: '1.5'"),
    ("embed", "--dims: expected name=value pairs separated by commas, got 'embed'"),
])
def test_bad_dims(here, capsys, dims, message):
    code, _, err = run_main(capsys, "plan", f"{MODULE}:Layers", "--mesh", "d=4", "--dims", dims)
    assert code == 2
    assert message in err


def test_bad_static(here, capsys):
    code, _, err = run_main(capsys, "verify", f"{MODULE}:step", "--mesh", "d=4", "--static", "n=abc")
    assert code == 2
    assert "--static: bad value for n: 'abc'" in err


def test_unknown_module_or_object(here, capsys):
    code, _, err = run_main(capsys, "plan", "no_such_model_module:Layers", "--mesh", "d=4")
    assert code not in (0, None)
    assert "no_such_model_module" in str(code) + err
    code, _, err = run_main(capsys, "plan", f"{MODULE}:NoSuchObject", "--mesh", "d=4")
    assert code not in (0, None)
    assert f"shardtypes: '{MODULE}' has no 'NoSuchObject'" in str(code) + err
    code, _, err = run_main(capsys, "verify", f"{MODULE}:Layer.nope", "--mesh", "d=4")
    assert "'Layer.nope'" in str(code) + err
    code, _, err = run_main(capsys, "plan", MODULE, "--mesh", "d=4")
    assert code not in (0, None)
    assert f"expected MODULE:OBJECT, got '{MODULE}'" in str(code) + err


def test_missing_command_or_mesh(capsys):
    code, _, err = run_main(capsys)
    assert code == 2 and "plan,verify" in err
    code, _, err = run_main(capsys, "plan", f"{MODULE}:Layers")
    assert code == 2 and "--mesh" in err


@pytest.mark.parametrize("command", ["plan", "verify"])
def test_subcommand_help_shows_examples(capsys, command):
    code, out, _ = run_main(capsys, command, "--help")
    assert code == 0
    assert "examples:" in out
    assert "--mesh AXIS=SIZE,..." in out and "--dims NAME=SIZE,..." in out
    assert "shardtypes verify mymodel:decode --mesh data=16,model=8 --static steps=4,greedy=True" in out
    assert ("--strict" in out) == (command == "plan")
    assert ("--static" in out.split("examples:")[0]) == (command == "verify")
