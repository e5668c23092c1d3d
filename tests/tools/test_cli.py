"""The ``shardtypes`` command (shardtypes.__main__; issue 5, item 3): ``plan`` and ``verify`` of a
model module written into a temporary directory, in-process through ``main(argv)`` and, a few
times, as a real process (``python -m shardtypes`` and the installed console script); ``--version``;
sizes as numbers in ``--json``; a closed pipe (``| head -1``) ending the command quietly.

Reports go to standard output; the exit status is 0 when all is well, 1 when problems are found,
2 for bad usage, 141 when standard output's reader went away first.
"""

import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import textwrap
from pathlib import Path

import pytest

import shardtypes
from shardtypes.__main__ import EXIT_BROKEN_PIPE, main

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


    # '*lead' stands for several dims, given as a tuple: --dims lead=(2,3)
    Lead = f32[b"*lead embed/d"]

    # 3,000 rows, about 260 KB of table: more than a pipe holds, so a reader that stops after one
    # line makes the writer meet a closed pipe whatever the buffering
    Many = {f"w{i:04d}": f32[b"rows/d cols"] for i in range(3000)}
''')

# A module whose own code raises BrokenPipeError: that is the user's error, not a closed stdout.
PIPE_MODULE = "shardtypes_cli_raises_broken_pipe"

LAYERS = ["--mesh", "d=4,t=2", "--dims", "layers=2,embed=8,hidden=16"]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("cli")
    (path / f"{MODULE}.py").write_text(MODEL)
    (path / f"{PIPE_MODULE}.py").write_text('raise BrokenPipeError("a socket of the model\'s own")\n')
    yield path
    sys.modules.pop(MODULE, None)
    sys.modules.pop(PIPE_MODULE, None)


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


def process_env(cwd, unbuffered=None):
    """os.environ with ``cwd`` on PYTHONPATH; PYTHONUNBUFFERED set (True), unset (False) or as it is."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(cwd), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    if unbuffered is True:
        env["PYTHONUNBUFFERED"] = "1"
    elif unbuffered is False:
        env.pop("PYTHONUNBUFFERED", None)
    return env


def run_process(cwd, *args, script=False):
    command = [console_script()] if script else [sys.executable, "-m", "shardtypes"]
    return subprocess.run([*command, *args], cwd=cwd, env=process_env(cwd), capture_output=True, text=True,
                          timeout=120)


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
    assert data["rows"][0]["shape"] == [2, 8, 16]
    assert data["rows"][0]["device_shape"] == [2, 2, 8]
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
    assert data["mesh"] == {"d": 64, "t": 64} and data["dims"]["embed"] == 8192
    assert data["problems"][0]["kind"] == "check"
    assert "the value assigned to h of step_wrong()" in data["problems"][0]["message"]
    code, out, _ = run_main(capsys, "verify", f"{MODULE}:step", "--mesh", "d=8", "--dims", "hidden=16",
                            "--static", "n=1", "--json")
    assert code == 1  # the mesh has no axis t
    assert json.loads(out)["problems"][0]["kind"] == "dims"


# ---------------------------------------------------------------------------------------------
# --json: sizes are numbers; the text report is unchanged


def _strings(tree, path=""):
    """(path, value) of every string in a JSON tree."""
    if isinstance(tree, dict):
        return [x for k, v in tree.items() for x in _strings(v, f"{path}.{k}")]
    if isinstance(tree, list):
        return [x for i, v in enumerate(tree) for x in _strings(v, f"{path}[{i}]")]
    return [(path, tree)] if isinstance(tree, str) else []


def test_plan_json_sizes_are_numbers(here, capsys):
    code, out, err = run_main(capsys, "plan", f"{MODULE}:Layers", *LAYERS, "--json")
    assert code == 0, err
    data = json.loads(out)
    for row in data["rows"]:
        assert all(type(n) is int for n in row["shape"] + row["device_shape"]), row
        for key in ("bytes_per_device", "replicas", "global_bytes"):
            assert type(row[key]) is int, (key, row)
    assert data["rows"][1]["shape"] == [2, 16, 8] and data["rows"][1]["device_shape"] == [2, 8, 2]
    assert data["rows"][0]["bytes_per_device"] == 128 and data["rows"][0]["global_bytes"] == 1024
    assert data["rows"][0]["replicas"] == 1
    for key in ("devices", "bytes_per_device", "global_bytes"):
        assert type(data[key]) is int, key
    assert type(data["replicated_fraction"]) is float
    # What is left as a string is text, not a number written as one.
    strings = _strings(data)
    assert {p.rsplit(".", 1)[-1] for p, _ in strings} == {"path", "annotation", "dtype", "spec"}
    assert not [(p, v) for p, v in strings if v.strip().lstrip("-").isdigit()]


def test_plan_json_variadic_dims_are_lists_of_numbers(here, capsys):
    code, out, err = run_main(capsys, "plan", f"{MODULE}:Lead", "--mesh", "d=4", "--dims", "lead=(2,3),embed=8",
                              "--json")
    assert code == 0, err
    row = json.loads(out)["rows"][0]
    assert row["shape"] == [2, 3, 8] and row["device_shape"] == [2, 3, 2]


def test_plan_json_with_errors_keeps_numbers(here, capsys):
    code, out, _ = run_main(capsys, "plan", f"{MODULE}:Layer", "--mesh", "d=4,t=2", "--dims", "embed=6,hidden=16",
                            "--json")
    assert code == 1
    data = json.loads(out)
    assert data["ok"] is False and "does not divide" in data["errors"][0]
    assert data["rows"][0]["shape"] == [6, 16] and data["rows"][0]["device_shape"] == [2, 8]


def test_verify_json_dims_are_numbers_and_symbolic_ones_expressions(here, capsys):
    code, out, err = run_main(capsys, "verify", f"{MODULE}:step", "--mesh", "d=64,t=64", "--dims", "embed=8192",
                              "--static", "n=3", "--json")
    assert code == 0, out + err
    data = json.loads(out)
    assert data["ok"] is True and data["problems"] == []
    # embed was given: a number. batch and hidden were not: symbolic, a multiple of their axes,
    # which has no number, so it is written as its expression (never as a quoted number).
    assert data["dims"] == {"embed": 8192, "batch": "64*batch", "hidden": "64*hidden"}
    assert data["mesh"] == {"d": 64, "t": 64}
    assert type(data["dims"]["embed"]) is int


def test_json_sizes_do_not_change_the_text_report(here, capsys):
    code, text, _ = run_main(capsys, "plan", f"{MODULE}:Layers", *LAYERS)
    assert code == 0
    report = shardtypes.plan(__import__(MODULE).Layers, {"d": 4, "t": 2}, {"layers": 2, "embed": 8, "hidden": 16})
    table, bar = text.split("\nmemory per device  [")  # the table, then the terminal's memory bar
    assert table == str(report) + "\n"
    assert bar.startswith("█")
    assert "(2, 8, 16)" in text and "128 B" in text
    code, text, _ = run_main(capsys, "verify", f"{MODULE}:step", "--mesh", "d=64,t=64", "--dims", "embed=8192",
                             "--static", "n=3")
    assert code == 0
    assert "dims embed=8192, batch=64*batch, hidden=64*hidden: ok" in text


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
    # each subcommand's help shows its own examples only; the top-level help shows them all
    examples = out.split("examples:")[1]
    assert ("shardtypes verify mymodel:decode --mesh data=16,model=8 --static steps=4,greedy=True"
            in examples) == (command == "verify")
    assert ("shardtypes plan mymodel:Weights" in examples) == (command == "plan")
    assert f"shardtypes {command} mymodel:" in examples and "--rules mymodel:RULES" in examples
    assert ("--strict" in out) == (command == "plan")
    assert ("--static" in out.split("examples:")[0]) == (command == "verify")


def test_top_level_help_shows_every_example(capsys):
    code, out, _ = run_main(capsys, "--help")
    assert code == 0
    assert "shardtypes plan mymodel:Layers" in out and "shardtypes verify mymodel:decode" in out


@pytest.mark.parametrize("command, target, message", [
    ("plan", "Logical", "error: Logical.w (f32[b'embed/fsdp hidden/tp']): mesh axis 'fsdp' is not in the mesh "
     "(axes: ('d', 't')) (if these are logical axis names, pass --rules MODULE:OBJECT (an AxisRules defined "
     "in your module))"),
    ("verify", "step", "sharded over mesh axis"),
])
def test_logical_names_without_rules_hint_the_flag(capsys, here, command, target, message):
    dims = "embed=8,hidden=16" if command == "plan" else "batch=8,embed=8,hidden=16"
    if command == "verify":  # step's 'd' and 't' are mesh axes: rename them to logical names
        code, out, _ = run_main(capsys, command, f"{MODULE}:step", "--mesh", "x=4,y=2", "--dims", dims,
                                "--static", "n=1")
    else:
        code, out, _ = run_main(capsys, command, f"{MODULE}:{target}", "--mesh", "d=4,t=2", "--dims", dims)
    assert code == 1
    assert message in out
    assert "pass --rules MODULE:OBJECT (an AxisRules defined in your module)" in out
    assert "shardtypes.axis_rules" not in out
    code, out, _ = run_main(capsys, "plan", f"{MODULE}:Logical", "--mesh", "d=4,t=2", "--dims", "embed=8,hidden=16",
                            "--rules", f"{MODULE}:RULES")
    assert code == 0, out


def test_the_python_api_still_names_axis_rules():
    from shardtypes import TypeCheckError, check, f32
    with pytest.raises(TypeCheckError, match=r"activate rules with shardtypes.axis_rules"):
        import jax
        m = jax.make_mesh((4, 2), ("d", "t"))
        check(f32, "a/fsdp", jax.device_put(jax.numpy.zeros(8), jax.sharding.NamedSharding(m, jax.sharding.PartitionSpec("d"))))


# ---------------------------------------------------------------------------------------------
# --version


def test_version_in_process(capsys):
    code, out, err = run_main(capsys, "--version")
    assert code == 0
    assert out == f"shardtypes {shardtypes.__version__}\n"
    assert err == ""


def test_version_matches_the_installed_metadata():
    # pyproject.toml reads the version from shardtypes.__version__: one source of truth.
    try:
        installed = importlib.metadata.version("shardtypes")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("shardtypes is not installed (run from a source tree)")
    assert installed == shardtypes.__version__


def test_version_as_a_process_and_console_script(model_dir):
    proc = run_process(model_dir, "--version")
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, f"shardtypes {shardtypes.__version__}\n", "")
    script = run_process(model_dir, "--version", script=True)
    assert (script.returncode, script.stdout) == (0, proc.stdout)


def test_version_is_in_the_help(capsys):
    code, out, _ = run_main(capsys, "--help")
    assert code == 0 and "--version" in out


@pytest.mark.parametrize("argv", [["plan", "--version"], ["--version=1"], ["--versions"]])
def test_version_misused_is_bad_usage(capsys, argv):
    code, out, err = run_main(capsys, *argv)
    assert code == 2
    assert "shardtypes 0" not in out and "usage:" in err


# ---------------------------------------------------------------------------------------------
# A closed pipe: `shardtypes plan ... | head -1` ends quietly, with status 141 (128 + SIGPIPE)

needs_posix_pipes = pytest.mark.skipif(sys.platform == "win32", reason="POSIX pipes and shells")


def assert_quiet(stderr: str) -> None:
    for noise in ("Traceback", "BrokenPipeError", "Exception ignored", "Broken pipe"):
        assert noise not in stderr, stderr


def test_exit_status_for_a_closed_pipe_is_128_plus_sigpipe():
    import signal

    assert EXIT_BROKEN_PIPE == 141
    if hasattr(signal, "SIGPIPE"):
        assert EXIT_BROKEN_PIPE == 128 + signal.SIGPIPE


@needs_posix_pipes
@pytest.mark.parametrize("unbuffered", [False, True], ids=["buffered", "unbuffered"])
def test_plan_into_a_pipe_closed_before_it_writes(model_dir, unbuffered):
    # The reader is gone before the process starts: its first write meets a closed pipe, from
    # print (unbuffered) or from the flush after it (buffered).
    proc = subprocess.Popen([sys.executable, "-m", "shardtypes", "plan", f"{MODULE}:Layers", *LAYERS],
                            cwd=model_dir, env=process_env(model_dir, unbuffered),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    proc.stdout.close()
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == EXIT_BROKEN_PIPE, err
    assert_quiet(err)
    assert err == ""


@needs_posix_pipes
@pytest.mark.parametrize("unbuffered", [False, True], ids=["buffered", "unbuffered"])
def test_plan_into_a_reader_that_stops_after_one_line(model_dir, unbuffered):
    # 260 KB of report and a reader that takes one line and leaves: the writer is blocked on a
    # full pipe when it closes, whatever the buffering, so this never passes by luck.
    proc = subprocess.Popen([sys.executable, "-m", "shardtypes", "plan", f"{MODULE}:Many", "--mesh", "d=4",
                             "--dims", "rows=8,cols=8"],
                            cwd=model_dir, env=process_env(model_dir, unbuffered),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    first = proc.stdout.readline()
    proc.stdout.close()
    _, err = proc.communicate(timeout=120)
    assert first.split()[:4] == ["path", "annotation", "dtype", "shape"]
    assert proc.returncode == EXIT_BROKEN_PIPE, err
    assert err == ""


@needs_posix_pipes
def test_plan_piped_into_head_in_a_shell(model_dir):
    shell = shutil.which("bash")
    if shell is None or shutil.which("head") is None:
        pytest.skip("needs bash and head")
    command = (f"{shlex_quote(sys.executable)} -m shardtypes plan {MODULE}:Many --mesh d=4 --dims rows=8,cols=8 "
               f"| head -1; echo \"status=${{PIPESTATUS[0]}}\" >&2")
    proc = subprocess.run([shell, "-c", command], cwd=model_dir, env=process_env(model_dir), capture_output=True,
                          text=True, timeout=120)
    assert proc.stdout.split()[:4] == ["path", "annotation", "dtype", "shape"]
    assert len(proc.stdout.splitlines()) == 1
    assert proc.stderr == f"status={EXIT_BROKEN_PIPE}\n"


@needs_posix_pipes
@pytest.mark.parametrize("unbuffered", [False, True], ids=["buffered", "unbuffered"])
@pytest.mark.parametrize("args", [["--help"], ["--version"]], ids=["help", "version"])
def test_help_and_version_into_a_closed_pipe_are_quiet(model_dir, unbuffered, args):
    proc = subprocess.Popen([sys.executable, "-m", "shardtypes", *args], cwd=model_dir,
                            env=process_env(model_dir, unbuffered),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    proc.stdout.close()
    _, err = proc.communicate(timeout=120)
    # argparse itself ignores a failed write of help or version (unbuffered: status 0); a
    # buffered one fails at the flush after it, which the command reports as 141.
    assert proc.returncode in (0, EXIT_BROKEN_PIPE)
    assert err == ""


@needs_posix_pipes
def test_an_open_pipe_is_read_to_the_end(model_dir):
    # The negative: a reader that reads everything gets everything, and status 0.
    proc = subprocess.Popen([sys.executable, "-m", "shardtypes", "plan", f"{MODULE}:Many", "--mesh", "d=4",
                             "--dims", "rows=8,cols=8"],
                            cwd=model_dir, env=process_env(model_dir), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert "3000 arrays on a d=4 mesh (4 devices)" in out
    assert len(out.splitlines()) == 3000 + 4 + 2 + 1 + 8 + 1  # the table, the bar, the 8 largest


class _ClosedPipe:
    """A standard output whose reader has gone: every write and flush raises BrokenPipeError."""

    def write(self, text):
        raise BrokenPipeError(32, "Broken pipe")

    def flush(self):
        raise BrokenPipeError(32, "Broken pipe")


def test_closed_stdout_in_process(here, monkeypatch):
    monkeypatch.setattr(sys, "stdout", _ClosedPipe())
    assert main(["plan", f"{MODULE}:Layers", *LAYERS]) == EXIT_BROKEN_PIPE
    # No file descriptor to point at os.devnull: stdout is replaced by os.devnull instead, so
    # the interpreter's last flush has nowhere to fail.
    replaced = sys.stdout
    assert not isinstance(replaced, _ClosedPipe) and replaced.name == os.devnull
    replaced.close()


def test_a_broken_pipe_of_the_models_own_is_not_taken_for_a_closed_stdout(here, capsys):
    # BrokenPipeError raised by the user's code (importing the target) is not silenced as 141.
    with pytest.raises(BrokenPipeError, match="a socket of the model's own"):
        main(["plan", f"{PIPE_MODULE}:Anything", "--mesh", "d=4"])
    assert capsys.readouterr().out == ""


def shlex_quote(text: str) -> str:
    import shlex

    return shlex.quote(text)


def test_verify_refuses_a_dims_name_the_step_never_uses(here, capsys):
    code, out, err = run_main(capsys, "verify", f"{MODULE}:step", "--mesh", "d=4", "--dims", "embd=8",
                              "--static", "n=3")
    assert code == 2
    assert out == ""
    assert "shardtypes_cli_model:step: verify: dims gives 'embd' (did you mean 'embed'?), which no annotation" in err
