"""The architecture in the folders (docs/architecture.md): one subpackage per layer, each
importing only the layers below it, through that layer's package (``from ..model import walk_leaves``,
never ``from ..model.annotation_leaves import walk_leaves``); no name with a leading underscore imported from
another module (jaxtyping's convention: a module may be private, a name another module uses is
not); each layer's "Offers" line is its ``__all__``; no import cycles; no module over 800 lines (modules split by job, not by count); annotation
structure (``typing.get_origin``/``get_args``/``__origin__``) taken apart only in the model
layer; no private JAX API. Read from the source with ``ast``, so that a violation is reported
with the file, line and import that make it.
"""

from __future__ import annotations

import ast
import pathlib
import re
import textwrap

import pytest

import shardtypes

PACKAGE = pathlib.Path(shardtypes.__file__).resolve().parent

# Lowest first. A module may import modules of its own layer and of the layers before it.
LAYERS = ("language", "context", "model", "checking", "layout", "integrations", "kernels", "tools", "testing")
# Modules outside the layers: leaves every layer may import, and the public surface on top.
LEAVES = ("_version", "_public")
SURFACE = ("__init__", "__main__", "ops", "nnx", "linen", "_indirection")
MAX_LINES = 800
STRUCTURE_NAMES = ("get_origin", "get_args", "__origin__")


def _module_name(path: pathlib.Path, root: pathlib.Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    return ".".join(parts)


def _rank(module: str, package: str) -> int:
    """The layer's position; leaves rank below every layer, the surface above."""
    parts = module.split(".")
    if parts[0] != package or len(parts) == 1:
        return len(LAYERS) + 1 if parts == [package] else -2
    first = parts[1]
    if first in LAYERS:
        return LAYERS.index(first)
    if first in LEAVES:
        return -1
    return len(LAYERS) + 1  # the surface: __init__, ops, nnx, ...


def _imports(path: pathlib.Path, module: str, package: str) -> list[tuple[int, str, str]]:
    """(line, imported module, source text) for every import of ``package`` in ``path``,
    at any depth (imports inside functions count: they run too)."""
    source = path.read_text()
    tree = ast.parse(source)
    is_init = path.name == "__init__.py"
    here = module.split(".") if is_init else module.split(".")[:-1]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = here[: len(here) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if not target.startswith(package):
                continue
            if node.module is None or (node.level and target.count(".") < 2):
                # from . import x / from .. import layer: each name may be a module
                for alias in node.names:
                    sub = f"{target}.{alias.name}"
                    found.append((node.lineno, sub, ast.get_source_segment(source, node) or ""))
            else:
                found.append((node.lineno, target, ast.get_source_segment(source, node) or ""))
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith(package):
                    found.append((node.lineno, alias.name, ast.get_source_segment(source, node) or ""))
    return found


def _modules(root: pathlib.Path) -> dict[str, pathlib.Path]:
    return {_module_name(p, root).removesuffix(".__init__"): p for p in sorted(root.rglob("*.py"))}


def problems(root: pathlib.Path) -> list[str]:
    """Every breach of the architecture in the package at ``root``, as lines a reader can act on."""
    package = root.name
    modules = _modules(root)
    out: list[str] = []
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        rel = path.relative_to(root.parent)
        lines = path.read_text().count("\n")
        if lines > MAX_LINES:
            out.append(f"{rel}: {lines} lines, over {MAX_LINES} (split it by job)")
        if len(name.split(".")) > 1 and name.split(".")[1] not in LAYERS + LEAVES + SURFACE:
            out.append(f"{rel}: not in a layer package ({', '.join(LAYERS)}) nor a known top-level module")
        rank = _rank(name, package)
        edges = graph.setdefault(name, set())
        for line, target, text in _imports(path, name + (".__init__" if path.name == "__init__.py" else ""), package):
            if target not in modules:
                continue  # `from .x import name` where x.name is not a module: the module is x
            edges.add(target)
            target_rank = _rank(target, package)
            same_layer_init = path.name == "__init__.py" and target.startswith(name + ".")
            if target_rank > rank and not same_layer_init:
                where = LAYERS[rank] if 0 <= rank < len(LAYERS) else "a leaf module"
                to = LAYERS[target_rank] if 0 <= target_rank < len(LAYERS) else "the public surface"
                out.append(f"{rel}:{line}: {where} imports {to}, a layer above it: {text!s}")
        if "model" not in name.split(".")[1:2]:
            tree = ast.parse(path.read_text())
            for node in ast.walk(tree):
                word = node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else None
                if word in STRUCTURE_NAMES:
                    out.append(f"{rel}:{node.lineno}: {word} outside the model layer (ask shardtypes.model)")
        out.extend(_privacy(path, rel, name, package, modules))
        if path.name == "__init__.py" and len(name.split(".")) == 2 and name.split(".")[1] in LAYERS:
            out.extend(_offers(path, rel))
        if "jax._src" in path.read_text():
            out.append(f"{rel}: imports jax._src (public JAX APIs only)")
    out.extend(_cycles(graph))
    return out


def _privacy(path: pathlib.Path, rel: pathlib.Path, name: str, package: str, modules: dict) -> list[str]:
    """Underscore names imported from another module, and imports from another layer that go
    past that layer's package to one of its modules."""
    out = []
    source = path.read_text()
    parts = name.split(".")
    here = parts if path.name == "__init__.py" else parts[:-1]
    layer = parts[1] if len(parts) > 1 and parts[1] in LAYERS else None
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.ImportFrom):
            continue
        if node.level:
            target = ".".join(here[: len(here) - node.level + 1] + ([node.module] if node.module else []))
        else:
            target = node.module or ""
        if target.split(".")[0] != package:
            continue
        text = ast.get_source_segment(source, node) or ""
        for alias in node.names:
            private = alias.name.startswith("_") and not alias.name.startswith("__")
            if private and f"{target}.{alias.name}" not in modules:
                out.append(f"{rel}:{node.lineno}: imports the private name {alias.name} from {target} "
                           f"(a name another module imports has no underscore): {text}")
        tparts = target.split(".")
        if layer and len(tparts) > 2 and tparts[1] in LAYERS and tparts[1] != layer:
            out.append(f"{rel}:{node.lineno}: reaches past the {tparts[1]} layer's package into {target} "
                       f"(import from {package}.{tparts[1]}, which offers what other layers use): {text}")
    return out


def _offers(init: pathlib.Path, rel: pathlib.Path) -> list[str]:
    """A layer's docstring says what it offers the layers above: a hand-written "Offers" line must
    name exactly its ``__all__``; without one, the package must make the line from ``__all__``."""
    tree = ast.parse(init.read_text())
    names = None
    made = False
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
            if node.targets[0].id == "__all__":
                names = set(ast.literal_eval(node.value))
            elif node.targets[0].id == "__doc__":
                made = "Offers" in ast.unparse(node.value) and "__all__" in ast.unparse(node.value)
    if names is None:
        return [f"{rel}: a layer package without __all__ (what it offers the layers above)"]
    doc = ast.get_docstring(tree) or ""
    if "Offers" in doc:
        said = set(re.findall(r"``(\w+)``", doc[doc.index("Offers"):]))
        if said != names:
            return [f"{rel}: the docstring's Offers line differs from __all__: it names "
                    f"{sorted(said - names)} not in __all__ and leaves out {sorted(names - said)}"]
        return []
    return [] if made else [f"{rel}: no Offers line (write one that names __all__, or make it from __all__)"]


def _cycles(graph: dict[str, set[str]]) -> list[str]:
    """Each import cycle once, as ``a -> b -> a``. A package's __init__ importing its own
    modules is not a cycle with them (Python runs the module's import of the package first)."""
    found: list[str] = []
    seen_cycles: set[frozenset] = set()
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt.startswith(node + ".") or node.startswith(nxt + "."):
                continue  # a package and its own modules
            if state.get(nxt) == 1:
                cycle = stack[stack.index(nxt):] + [nxt]
                key = frozenset(cycle)
                if key not in seen_cycles:
                    seen_cycles.add(key)
                    found.append("import cycle: " + " -> ".join(cycle))
            elif state.get(nxt) is None:
                visit(nxt)
        stack.pop()
        state[node] = 2

    for node in sorted(graph):
        if state.get(node) is None:
            visit(node)
    return found


def test_the_package_keeps_its_architecture():
    found = problems(PACKAGE)
    assert not found, "\n" + "\n".join(found)


def test_every_layer_says_its_job_what_it_may_import_and_what_it_offers():
    for layer in LAYERS:
        init = PACKAGE / layer / "__init__.py"
        doc = ast.get_docstring(ast.parse(init.read_text())) or ""
        assert doc.startswith(f"Layer {LAYERS.index(layer) + 1}, "), (layer, doc[:40])
        assert "May import:" in doc, layer
        module = __import__(f"shardtypes.{layer}", fromlist=["__all__"])
        offers = (module.__doc__ or "").split("Offers the layers above: ")[1]
        assert offers.strip().rstrip(".").split(", ") == list(module.__all__), layer


# The test above must be able to fail: a made-up package with each breach.
LAYER_INIT = "__all__ = []\n__doc__ = f'Offers the layers above: {__all__}'\n"  # a layer package that is in order


def _write(root: pathlib.Path, files: dict[str, str]) -> pathlib.Path:
    for name, text in files.items():
        path = root / "pkg" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return root / "pkg"


def test_an_import_from_a_lower_layer_to_a_higher_one_is_reported_with_its_line(tmp_path):
    pkg = _write(tmp_path, {
        "__init__.py": "", "language/__init__.py": LAYER_INIT, "model/__init__.py": LAYER_INIT,
        "model/annotation_nodes.py": "x = 1\n",
        "language/shape.py": "import re\n\ndef f():\n    from ..model.annotation_nodes import x\n    return x\n",
    })
    assert problems(pkg) == [
        "pkg/language/shape.py:4: language imports model, a layer above it: from ..model.annotation_nodes import x",
        "pkg/language/shape.py:4: reaches past the model layer's package into pkg.model.annotation_nodes (import from "
        "pkg.model, which offers what other layers use): from ..model.annotation_nodes import x",
    ]


def test_a_private_name_from_another_module_and_a_way_past_a_layer_package_are_reported(tmp_path):
    pkg = _write(tmp_path, {
        "__init__.py": "from . import _version\n", "_version.py": "v = 1\n",
        "language/__init__.py": "from .shape import S\n__all__ = ['S']\n__doc__ = f'Offers the layers above: {__all__}'\n",
        "language/shape.py": "S = 1\n_hidden = 2\n",
        "context/__init__.py": "__all__ = []\n__doc__ = f'Offers the layers above: {__all__}'\n",
        "context/a.py": "from ..language.shape import S\nfrom ..language import shape\n",
        "context/b.py": "from ..language.shape import _hidden\n",
    })
    assert problems(pkg) == [
        "pkg/context/a.py:1: reaches past the language layer's package into pkg.language.shape "
        "(import from pkg.language, which offers what other layers use): from ..language.shape import S",
        "pkg/context/b.py:1: imports the private name _hidden from pkg.language.shape (a name another module "
        "imports has no underscore): from ..language.shape import _hidden",
        "pkg/context/b.py:1: reaches past the language layer's package into pkg.language.shape "
        "(import from pkg.language, which offers what other layers use): from ..language.shape import _hidden",
    ]


def test_an_offers_line_that_differs_from_all_or_is_missing_is_reported(tmp_path):
    pkg = _write(tmp_path, {
        "__init__.py": "",
        "language/__init__.py": '"""Layer 1.\n\nOffers the layers above: ``S`` and ``T``."""\nS = 1\n__all__ = ["S", "U"]\n',
        "context/__init__.py": '"""Layer 2."""\n__all__ = []\n',
        "model/__init__.py": '"""Layer 3."""\n',
    })
    assert problems(pkg) == [
        "pkg/context/__init__.py: no Offers line (write one that names __all__, or make it from __all__)",
        "pkg/language/__init__.py: the docstring's Offers line differs from __all__: it names ['T'] not in "
        "__all__ and leaves out ['U']",
        "pkg/model/__init__.py: a layer package without __all__ (what it offers the layers above)",
    ]


def test_a_cycle_a_long_module_a_stray_module_and_get_origin_outside_the_model_are_reported(tmp_path):
    pkg = _write(tmp_path, {
        "__init__.py": "", "context/__init__.py": LAYER_INIT,
        "context/a.py": "from .b import y\nx = 1\n",
        "context/b.py": "from .a import x\ny = 2\n",
        "context/long.py": "x = 1\n" * (MAX_LINES + 1),
        "context/typing_use.py": "import typing\nf = typing.get_origin\n",
        "stray.py": "",
    })
    found = problems(pkg)
    assert "import cycle: pkg.context.a -> pkg.context.b -> pkg.context.a" in found
    assert f"pkg/context/long.py: {MAX_LINES + 1} lines, over {MAX_LINES} (split it by job)" in found
    assert "pkg/context/typing_use.py:2: get_origin outside the model layer (ask shardtypes.model)" in found
    assert any(p.startswith("pkg/stray.py: not in a layer package") for p in found)
    assert len(found) == 4, found


def test_a_clean_package_has_no_problems(tmp_path):
    pkg = _write(tmp_path, {
        "__init__.py": "from .tools.cli import main\n", "language/__init__.py": "from .shape import S\n" + LAYER_INIT.replace("[]", "['S']"),
        "language/shape.py": "S = 1\n", "tools/__init__.py": LAYER_INIT, "tools/cli.py": "from ..language import S\nmain = S\n",
    })
    assert problems(pkg) == []


@pytest.mark.parametrize("layer", LAYERS)
def test_no_layer_reaches_a_layer_above_it_through_any_chain_of_imports(layer):
    """What a layer's package imports, and what those import in turn, stays at or below it."""
    reach = _reach(f"shardtypes.{layer}")
    above = {f"shardtypes.{a}" for a in LAYERS[LAYERS.index(layer) + 1:]}
    bad = sorted(m for m in reach if any(m == a or m.startswith(a + ".") for a in above))
    assert bad == [], f"shardtypes.{layer} reaches {bad}"


def _reach(start: str) -> set[str]:
    modules = _modules(PACKAGE)
    seen: set[str] = set()
    todo = [start]
    while todo:
        name = todo.pop()
        if name in seen or name not in modules:
            continue
        seen.add(name)
        path = modules[name]
        own = name + (".__init__" if path.name == "__init__.py" else "")
        todo.extend(t for _, t, _ in _imports(path, own, "shardtypes"))
    return seen


def test_import_shardtypes_does_not_load_the_tools_layer():
    """verify, plan, the CLI and the HTML pages load on first use of one of their names."""
    import subprocess
    import sys

    code = ("import sys, shardtypes; print(sorted(m for m in sys.modules if m.startswith('shardtypes.tools')));"
            "from shardtypes import verify, VerifyReport; print(verify.__name__, 'verify' in dir(shardtypes),"
            " shardtypes.plan.__name__)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["[]", "verify True plan"]
    with pytest.raises(AttributeError, match="module 'shardtypes' has no attribute 'verfy'"):
        shardtypes.verfy  # noqa: B018


def test_private_modules_of_other_packages_are_imported_in_one_adapter_each():
    """typeguard's private API is reached only through checking/typeguard_internals.py (JAX's is
    never: public APIs only); a private import anywhere else is a defect."""
    allowed = {"checking/typeguard_internals.py"}
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        where = path.relative_to(PACKAGE).as_posix()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                parts = node.module.split(".")
                names = [a.name for a in node.names]
            elif isinstance(node, ast.Import):
                parts, names = [], []
                for alias in node.names:
                    parts.extend(alias.name.split("."))
            else:
                continue
            if parts and parts[0] == "shardtypes":
                continue
            private = [p for p in parts + names if p.startswith("_") and not p.startswith("__")]
            if private:
                found.append(f"{where}:{node.lineno}")
    assert [f for f in found if f.split(":")[0] not in allowed] == []
    assert found, "the adapter imports typeguard's private modules"


def test_the_typeguard_adapter_names_the_lower_bound_ci_tests():
    """CI's oldest environment installs the first release the adapter was checked against: it
    must be pyproject.toml's lower bound."""
    import tomllib

    from shardtypes.checking import TYPEGUARD_CHECKED_AGAINST as CHECKED_AGAINST

    with open(PACKAGE.parent / "pyproject.toml", "rb") as f:
        dependencies = tomllib.load(f)["project"]["dependencies"]
    bound = next(d for d in dependencies if d.startswith("typeguard"))
    assert f">={CHECKED_AGAINST[0].rsplit('.', 1)[0]}" in bound, (bound, CHECKED_AGAINST)
