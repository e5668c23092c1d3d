"""Static checking: pyright (standard mode) and mypy, configured in pyproject.toml, report no
error on the package, the examples and ``tests/static/user_module.py``.

The user module is written in the static spelling (``f32[jax.Array, b'...']``,
``Stacked[Layer, b'layers']``) and holds lines that must fail, each with the one suppression per
checker that silences it. The configuration makes an unneeded suppression an error, so a checker
that stops seeing one of those errors fails here too. The tests skip, saying so, only where a
checker is not installed (``pip install pyright mypy``) or cannot start.
"""

import importlib.util
import json
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TARGETS = ["shardtypes", "examples", "tests/static/user_module.py"]


def _installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def _run(*command: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", *command], cwd=ROOT, capture_output=True, text=True, timeout=600)


@pytest.mark.skipif(not _installed("pyright"), reason="pyright is not installed (pip install pyright)")
def test_pyright_reports_no_errors():
    proc = _run("pyright", "--pythonpath", sys.executable, "--outputjson", *TARGETS)
    try:
        report = json.loads(proc.stdout)
    except json.JSONDecodeError:
        pytest.skip(f"pyright is installed but did not run (it needs Node.js): {(proc.stderr or proc.stdout)[-800:]}")
    found = [
        f"{d['file']}:{d['range']['start']['line'] + 1}: {d['severity']}: {d['message']} [{d.get('rule', '')}]"
        for d in report["generalDiagnostics"]
    ]
    summary = report["summary"]
    assert summary["errorCount"] == 0 and summary["warningCount"] == 0, "\n".join(found)
    assert summary["filesAnalyzed"] >= 20, summary  # the package, the examples, the user module


@pytest.mark.skipif(not _installed("mypy"), reason="mypy is not installed (pip install mypy)")
def test_mypy_reports_no_errors():
    proc = _run("mypy", *TARGETS)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.startswith("Success: no issues found"), proc.stdout


def test_unneeded_suppressions_are_errors():
    """What makes the must-fail lines of the user module bite: each checker reads only its own
    suppressions, and an unneeded one is an error."""
    with open(ROOT / "pyproject.toml", "rb") as f:
        tool = tomllib.load(f)["tool"]
    assert tool["pyright"]["typeCheckingMode"] == "standard"
    assert tool["pyright"]["enableTypeIgnoreComments"] is False
    assert tool["pyright"]["reportUnnecessaryTypeIgnoreComment"] == "error"
    assert tool["mypy"]["warn_unused_ignores"] is True
    text = (ROOT / "tests/static/user_module.py").read_text()
    failing = text[text.index("def must_fail"):]
    lines = [line for line in failing.splitlines()[1:] if line.strip() and not line.strip().startswith("#")]
    statements = [line for line in lines if not line.strip().startswith(("x =", "weights =", "mesh ="))]
    assert statements and all("# pyright: ignore[" in line for line in statements), statements


def test_the_user_module_runs():
    """The static spelling at run time: checked like the one-argument spelling, plus its array type."""
    sys.path.insert(0, str(ROOT / "tests" / "static"))
    try:
        import user_module
    finally:
        sys.path.pop(0)
    out = user_module.run()
    assert out["center"] == (4, 3) and out["forward"] == (4, 3) and out["callee"] == (9,)
    assert out["dims"] == {"batch": 4, "embed": 3}
    assert out["host_then_device"] is True and out["is_instance"] == (True, True, True, None)
    assert tuple(out["shardings"]) == (None, None)
    assert "is not f32[jax.Array, b'batch embed']: the annotation wants a jax.Array, not a numpy.ndarray" in str(
        out["numpy_rejected"]
    )


# A user's own project, outside this repository, after the README's install: the checkers must
# find the installed package (an editable install that is an import hook hides it from them).
USER_PROJECT = '''
import jax
import jax.numpy as jnp
from shardtypes import f32, make_shardings, typechecked


@typechecked
def double(x: f32[jax.Array, b"batch embed"]) -> f32[jax.Array, b"batch embed"]:
    return x * 2


y: jax.Array = double(jnp.ones((2, 3)))
wrong: int = double(jnp.ones((2, 3)))  # must fail: only a checker that resolved shardtypes sees it
'''


def _outside(tmp_path: Path) -> Path:
    project = tmp_path / "user_project"
    project.mkdir()
    (project / "train.py").write_text(USER_PROJECT)
    return project


@pytest.mark.skipif(not _installed("pyright"), reason="pyright is not installed (pip install pyright)")
def test_pyright_in_a_users_project_outside_the_repository_sees_the_installed_package(tmp_path):
    project = _outside(tmp_path)
    proc = subprocess.run([sys.executable, "-m", "pyright", "--pythonpath", sys.executable, "--outputjson", "train.py"],
                          cwd=project, capture_output=True, text=True, timeout=600)
    try:
        report = json.loads(proc.stdout)
    except json.JSONDecodeError:
        pytest.skip(f"pyright is installed but did not run (it needs Node.js): {(proc.stderr or proc.stdout)[-800:]}")
    found = [(d["range"]["start"]["line"] + 1, d["message"]) for d in report["generalDiagnostics"]]
    wrong_line = USER_PROJECT.splitlines().index(next(l for l in USER_PROJECT.splitlines() if l.startswith("wrong")))
    assert [line for line, _ in found] == [wrong_line + 1], found  # the must-fail line, and nothing else
    assert '"Array" is not assignable to "int"' in found[0][1], found


@pytest.mark.skipif(not _installed("mypy"), reason="mypy is not installed (pip install mypy)")
def test_mypy_in_a_users_project_outside_the_repository_sees_the_installed_package(tmp_path):
    project = _outside(tmp_path)
    proc = subprocess.run([sys.executable, "-m", "mypy", "--no-incremental", "train.py"],
                          cwd=project, capture_output=True, text=True, timeout=600)
    lines = [l for l in proc.stdout.splitlines() if ": error:" in l]
    assert len(lines) == 1 and lines[0].startswith("train.py:13: error: Incompatible types in assignment"), proc.stdout
    assert "import-not-found" not in proc.stdout and "import-untyped" not in proc.stdout


# What the checkers say the derivation functions and is_instance give (reveal_type), in a user's
# project: shard keeps a tree's type and gives a jax.Array for an array, is_instance narrows to
# the class named, the make_* functions give trees shaped like the class (ShardingTree[Batch]), whose
# fields are Any (they hold specs, not arrays).
REVEAL = '''
import jax
import numpy as np
from shardtypes import f32, is_instance, make_partition_specs, make_shardings, make_shape_dtype_structs
from shardtypes import pytree_dataclass, shard


@pytree_dataclass
class Batch:
    x: f32[jax.Array | np.ndarray, b"batch embed"]


def f(batch: Batch, x: object, mesh: jax.sharding.Mesh) -> None:
    reveal_type(batch.x)
    reveal_type(shard(batch, Batch, mesh))
    reveal_type(shard(np.zeros((2, 3)), f32[jax.Array, b"batch embed"], mesh))
    reveal_type(make_partition_specs(Batch))
    reveal_type(make_shardings(Batch, mesh))
    reveal_type(make_shape_dtype_structs(Batch, {"batch": 2, "embed": 3}, mesh))
    reveal_type(make_shardings(Batch, mesh).x.spec)
    if is_instance(x, f32[jax.Array, b"batch embed"]):
        reveal_type(x)
    if is_instance(x, f32[jax.Array | np.ndarray, b"batch embed"], (jax.Array, np.ndarray)):
        reveal_type(x)
'''

REVEALED = ["Array | ndarray", "Batch", "Array", "PartitionSpecTree", "ShardingTree", "StructTree", "Any", "Array",
            "Array | ndarray"]


def _shortened(revealed: str) -> str:
    """``jax._src.basearray.Array | numpy.ndarray[Any, Any]`` -> ``Array | ndarray``."""
    return " | ".join(part.split("[")[0].rsplit(".", 1)[-1] for part in revealed.split(" | "))


@pytest.mark.skipif(not _installed("pyright"), reason="pyright is not installed (pip install pyright)")
def test_pyright_reveals_the_derivation_and_narrowing_types(tmp_path):
    (tmp_path / "reveal.py").write_text(REVEAL)
    proc = subprocess.run([sys.executable, "-m", "pyright", "--pythonpath", sys.executable, "--outputjson", "reveal.py"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=600)
    try:
        report = json.loads(proc.stdout)
    except json.JSONDecodeError:
        pytest.skip(f"pyright is installed but did not run (it needs Node.js): {(proc.stderr or proc.stdout)[-800:]}")
    messages = [d["message"] for d in report["generalDiagnostics"]]
    assert all(d["severity"] == "information" for d in report["generalDiagnostics"]), messages
    revealed = [_shortened(m.split(" is ", 1)[1].strip('"')) for m in messages]
    assert revealed == REVEALED, messages


@pytest.mark.skipif(not _installed("mypy"), reason="mypy is not installed (pip install mypy)")
def test_mypy_reveals_the_derivation_and_narrowing_types(tmp_path):
    (tmp_path / "reveal.py").write_text(REVEAL)
    proc = subprocess.run([sys.executable, "-m", "mypy", "--no-incremental", "reveal.py"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert ": error:" not in proc.stdout, proc.stdout
    revealed = [_shortened(line.split('Revealed type is "', 1)[1].rstrip('"'))
                for line in proc.stdout.splitlines() if "Revealed type is" in line]
    assert revealed == REVEALED, proc.stdout
