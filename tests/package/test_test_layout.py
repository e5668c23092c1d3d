"""The tests' own house rules (issue 35, item 7): no file under tests/ passes 1,000 lines (a file
that grows past it is split by what its tests are about), and no test reaches into shardtypes'
private names (``from shardtypes.x import _y``, or ``module._y`` on a name a shardtypes import
bound): tests use the surface, and where a test must see inside, the module offers a small
test-facing function. The sources are read with ``ast``; each rule is also run on a made-up file,
so that it can fail.
"""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
LIMIT = 1000


def python_files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*.py") if "__pycache__" not in p.parts)


def too_long(root: Path, limit: int = LIMIT) -> list[str]:
    """``'path: n lines'`` for each Python file under ``root`` of more than ``limit`` lines."""
    found = []
    for path in python_files(root):
        n = len(path.read_text(encoding="utf-8").splitlines())
        if n > limit:
            found.append(f"{path.relative_to(root)}: {n} lines")
    return found


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _from_shardtypes(module: str | None) -> bool:
    return module is not None and (module == "shardtypes" or module.startswith("shardtypes."))


def private_names(root: Path) -> list[str]:
    """``'path:line: what'`` for each private name of shardtypes a file under ``root`` imports
    (``from shardtypes... import _x``) or reads (``name._x``, ``name.a._x``, where ``name`` was
    bound by an import from shardtypes)."""
    found: list[tuple[str, int, str]] = []
    for path in python_files(root):
        where = str(path.relative_to(root))
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        bound: set[str] = set()  # names a shardtypes import bound in this file
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if _from_shardtypes(alias.name):
                        bound.add(alias.asname or alias.name.split(".")[0])
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and _from_shardtypes(node.module):
                for alias in node.names:
                    if _private(alias.name):
                        found.append((where, node.lineno, f"from {node.module} import {alias.name}"))
                    bound.add(alias.asname or alias.name)
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and _private(node.attr):
                chain, base = [node.attr], node.value
                while isinstance(base, ast.Attribute):
                    chain.append(base.attr)
                    base = base.value
                if isinstance(base, ast.Name) and base.id in bound:
                    found.append((where, node.lineno, ".".join([base.id, *reversed(chain)])))
    return [f"{where}:{line}: {what}" for where, line, what in sorted(found)]


def test_no_test_file_passes_1000_lines() -> None:
    assert too_long(TESTS) == [], "split these by what their tests are about"


def test_no_test_reaches_into_a_private_name_of_shardtypes() -> None:
    assert private_names(TESTS) == [], "use the surface, or a test-facing function of the module"


def test_a_made_up_file_past_the_limit_is_found(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "test_long.py").write_text("x = 1\n" * (LIMIT + 1))
    (tmp_path / "test_at_the_limit.py").write_text("x = 1\n" * LIMIT)
    assert too_long(tmp_path) == [f"{Path('sub', 'test_long.py')}: {LIMIT + 1} lines"]


def test_made_up_private_imports_and_reads_are_found(tmp_path: Path) -> None:
    (tmp_path / "test_private.py").write_text(
        "import numpy as np\n"
        "import shardtypes\n"
        "from shardtypes import f32, typechecked as _typechecked\n"
        "from shardtypes.layout.data_layout import _layout, data_layout\n"
        "from shardtypes.checking import kernel_layouts as kl\n"
        "from helpers import _local\n"
        "\n"
        "def test_it():\n"
        "    kl._TRACE.get()\n"
        "    shardtypes.model._hidden\n"
        "    kl.trace_open(), shardtypes.__version__, f32.__name__\n"
        "    np._internal, _local._x\n"
    )
    assert private_names(tmp_path) == [
        # An underscore alias of a public name is the test's own name, not a private one.
        "test_private.py:4: from shardtypes.layout.data_layout import _layout",
        "test_private.py:9: kl._TRACE",
        "test_private.py:10: shardtypes.model._hidden",
    ]
