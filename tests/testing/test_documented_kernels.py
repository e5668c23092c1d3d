"""Every kernel the docs and examples show is checked on every mesh: those of docs/shard-map.md
(its code blocks run as written, each ``typed_shard_map`` they make recorded), the demo's training
and decode steps, and examples/same_numbers.py, whose output docs/same-numbers.md shows."""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import io
import linecache
import re
import sys
import types
from pathlib import Path
from typing import Any

import jax
import pytest
from typeguard import TypeCheckError

import shardtypes
from shardtypes import axis_rules
from shardtypes.testing import MeshMismatch, assert_same_on_every_mesh

ROOT = Path(__file__).resolve().parents[2]
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


def _load(path: Path, name: str) -> Any:
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


# ---------------------------------------------------------------------------------------------
# docs/shard-map.md


def _shard_map_page_kernels() -> dict[str, tuple[Any, dict, dict]]:
    """Runs the page's code blocks in order, in one namespace, and returns each function given to typed_shard_map, by name, with the
    options it was given and the namespace it was defined in."""
    real = shardtypes.typed_shard_map
    made: dict[str, tuple[Any, dict, dict]] = {}
    page = types.ModuleType("shard_map_page")  # one namespace, as a reader runs the page top to bottom
    sys.modules[page.__name__] = page  # (dataclasses look their module up)
    namespace: dict[str, Any] = page.__dict__

    def recording(f: Any = None, /, **options: Any) -> Any:
        if f is None:
            return lambda g: recording(g, **options)
        kernel = real(f, **options)
        key = f.__name__ + "".join(f", {k}={sorted(v) if isinstance(v, (set, frozenset)) else v!r}"
                                   for k, v in sorted(options.items()) if k != "mesh")
        while key in made and made[key][0] is not f:
            key += "#2"  # another function of the same name (the page has two mlps)
        made.setdefault(key, (f, options, namespace))
        return kernel

    shardtypes.typed_shard_map = recording
    try:
        for i, source in enumerate(BLOCK.findall((ROOT / "docs" / "shard-map.md").read_text())):
            source = source.replace('jax.config.update("jax_num_cpu_devices", 8)', "pass")
            # Checked functions read their source (typeguard instruments it): give each block a file.
            filename = f"docs/shard-map.md, block {i + 1}.py"
            linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
            with contextlib.redirect_stdout(io.StringIO()):
                exec(compile(source, filename, "exec"), namespace)
    finally:
        shardtypes.typed_shard_map = real
    # The page's plain functions that show what the pass knows of a value ("What the pass knows").
    for name in ("block_sum", "local_sums", "copies"):
        made.setdefault(name, (namespace[name], {}, namespace))
    return made


SAME, REFUSED, DIFFERS = "same", "refused", "differs"

# What each kernel of the page does on every mesh, and why where it is not the same numbers.
PAGE: dict[str, tuple[str, dict]] = {
    "project": (SAME, {}),
    "project#2": (SAME, {}),  # the same body again, given a mesh of its own (checked without it)
    "row_norms": (SAME, {}),
    "gathered": (REFUSED, {}),  # the page's mistake: the whole batch on every device
    "mlp": (SAME, {"bind": lambda ns: {"config": ns["Config"]()}}),  # the one with a static Config
    "mlp#2": (SAME, {}),  # the FSDP x TP one
    "double, axis_names=['d']": (SAME, {}),
    "column_sums": (REFUSED, {}),  # the page's mistake: each device's column sums
    "column_sums, check_vma=False": (REFUSED, {}),  # (the kernel pass refuses it without JAX's check too)
    "kernel": (SAME, {}),
    "embed": (SAME, {}),
    "gather_rows": (SAME, {}),
    # A psum_scatter of a value replicated over 't': t copies summed, as the page shows (2 * x).
    "sum_over_t": (SAME, {"keep": {"t": 2}}),
    # Dims of their own whose size is a device's block: not a global function by construction.
    "block_sum": (DIFFERS, {}),
    "local_sums": (DIFFERS, {}),
    "copies": (DIFFERS, {}),
    "aux_loss": (DIFFERS, {}),  # per-device router statistics by intent (ops.per_device)
    "gather_plain": (REFUSED, {}),
    "gather_invariant": (SAME, {}),
}


@pytest.fixture(scope="module")
def page_kernels() -> dict[str, tuple[Any, dict, dict]]:
    return _shard_map_page_kernels()


def test_every_kernel_of_the_page_is_listed(page_kernels):
    assert sorted(page_kernels) == sorted(PAGE)


@pytest.mark.parametrize("key", sorted(PAGE))
def test_each_kernel_of_the_shard_map_page_on_every_mesh(page_kernels, key):
    expected, options = PAGE[key]
    f, made_with, namespace = page_kernels[key]
    kernel = jax.jit(shardtypes.typed_shard_map(f, **{k: v for k, v in made_with.items() if k != "mesh"}))
    if "bind" in options:
        kernel = functools.partial(shardtypes.typed_shard_map(f), **options["bind"](namespace))
    run = functools.partial(assert_same_on_every_mesh, kernel, keep=options.get("keep"))
    if expected == SAME:
        report = run()
        assert len(report.ran) >= 3, report
    elif expected == REFUSED:
        with pytest.raises(TypeCheckError):
            run()
    else:
        with pytest.raises(MeshMismatch):
            run()


def test_a_per_device_kernel_of_the_page_is_told_to_hold_its_axis(page_kernels):
    f, _, _ = page_kernels["aux_loss"]
    with pytest.raises(MeshMismatch, match=r"aux_loss\(\) says it is per-device along 'd' \(shardtypes.ops.per_device\)"):
        assert_same_on_every_mesh(shardtypes.typed_shard_map(f))


# ---------------------------------------------------------------------------------------------
# examples/


@pytest.fixture(scope="module")
def transformer() -> Any:
    try:
        yield _load(ROOT / "examples" / "transformer.py", "examples_transformer_same_numbers")
    finally:
        sys.modules.pop("examples_transformer_same_numbers", None)


@pytest.fixture(scope="module")
def demo_inputs(transformer) -> tuple:
    """The demo's own state and batch (its initialisation: a whole training step is compared on
    the values it trains from, not on small integers, which a transformer's step amplifies)."""
    import numpy as np

    mesh = jax.make_mesh((1, 1), ("d", "t"), devices=jax.devices()[:1])
    rng = np.random.default_rng(0)
    pattern = rng.permutation(transformer.DIMS["vocab"])[:transformer.PATTERN_LENGTH]
    with axis_rules(transformer.RULES):
        state = transformer.init_state(jax.random.key(0), mesh)
        batch = transformer.make_batch(rng, pattern, mesh)
    return jax.device_get(state), jax.device_get(batch)


@pytest.mark.parametrize("kind", ["explicit", "auto"])
def test_the_demos_training_step_gives_the_same_numbers_on_other_meshes(transformer, demo_inputs, kind):
    with axis_rules(transformer.RULES):
        report = assert_same_on_every_mesh(transformer.compiled_kernel, *demo_inputs, axes=("d", "t"),
                                           axis_types=kind, meshes=[{"d": 2, "t": 2}])
    assert "result[1].loss" in report.compared and "result[0].step" in report.compared


def test_the_demos_decode_step_gives_the_same_numbers_on_other_meshes(transformer):
    with axis_rules(transformer.RULES, mode="decode"):
        report = assert_same_on_every_mesh(jax.jit(transformer.decode_kernel), meshes=[{"t": 2}, {"t": 4}])
    assert report.axes == ("t",)


def test_the_quickstarts_functions_on_every_mesh():
    quickstart = _load(ROOT / "examples" / "quickstart.py", "examples_quickstart_same_numbers")
    try:
        assert_same_on_every_mesh(jax.jit(quickstart.rms_norm))
        report = assert_same_on_every_mesh(jax.jit(quickstart.block), axes=("d", "t"))
        assert len(report.ran) == 7
        # Its shard_map body shows local shapes, and adds each device's block to the sum of all
        # of them: not a global function of x, which the kernel pass says as a typed kernel.
        with pytest.raises(TypeCheckError, match="a sum of different blocks"):
            assert_same_on_every_mesh(shardtypes.typed_shard_map(quickstart.local_sum),
                                      dims={"batch": 8, "hidden": 16})
    finally:
        sys.modules.pop("examples_quickstart_same_numbers", None)


def test_the_same_numbers_example_prints_what_its_page_shows():
    module = _load(ROOT / "examples" / "same_numbers.py", "examples_same_numbers")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        module.main()
    page = (ROOT / "docs" / "same-numbers.md").read_text()
    shown = page.split("`python examples/same_numbers.py` checks each and prints:\n\n```text\n", 1)[1]
    assert out.getvalue().rstrip("\n") == shown.split("\n```", 1)[0]
