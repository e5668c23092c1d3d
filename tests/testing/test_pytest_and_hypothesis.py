"""The test-side helpers of shardtypes.testing: the hypothesis strategy of meshes (and its
shrinking to the smallest failing mesh), use_cpu_devices, the pytest plugin and its fixture, and
that ``import shardtypes`` loads none of it."""

from __future__ import annotations

import math
import subprocess
import sys
import textwrap

import jax
import pytest
from hypothesis import find, given, settings, strategies as st

from shardtypes import f32, typed_shard_map
from shardtypes.testing import MeshMismatch, assert_same_on_every_mesh, meshes, use_cpu_devices


@settings(max_examples=60, deadline=None)
@given(mesh=meshes(("d", "t", "e"), devices=8))
def test_a_drawn_mesh_fits_the_devices_and_names_every_axis(mesh):
    assert list(mesh) == ["d", "t", "e"]
    assert math.prod(mesh.values()) <= 8
    assert all(8 % n == 0 for n in mesh.values())


@settings(max_examples=30, deadline=None)
@given(mesh=meshes(("stage", "d"), devices=8, keep={"stage": 4}))
def test_a_held_axis_is_held(mesh):
    assert mesh["stage"] == 4 and mesh["d"] in (1, 2)


def test_a_failure_shrinks_to_the_smallest_mesh():
    found = find(meshes(("d", "t")), lambda m: m["t"] > 1)
    assert found == {"d": 1, "t": 2}
    found = find(meshes(("d", "t")), lambda m: m["d"] * m["t"] >= 4)
    assert math.prod(found.values()) == 4


@pytest.mark.parametrize(("call", "message"), [
    (lambda: meshes("d t"), "axes must be distinct mesh axis names"),  # one string is one (bad) name
    (lambda: meshes(("d", "d")), "axes must be distinct mesh axis names"),
    (lambda: meshes(("d",), devices=0), "devices must be an int >= 1"),
    (lambda: meshes(("d",), keep={"t": 2}), "keep names 't', which is not one of axes"),
    (lambda: meshes(("d",), keep={"d": 3}), r"keep\['d'\] must be an int size that divides devices=8"),
])
def test_the_strategy_names_its_bad_arguments(call, message):
    with pytest.raises((TypeError, ValueError), match=message):
        call()


@typed_shard_map
def scaled_sum(x: f32[b"batch/d embed/t"]) -> f32[b"embed/t"]:
    return jax.lax.psum(x.sum(0), "d") * jax.lax.axis_size("t")  # wrong where t > 1


def test_a_property_test_over_drawn_meshes_reports_the_smallest_failing_one():
    kernel = jax.jit(scaled_sum)

    @settings(max_examples=12, deadline=None, database=None)
    @given(mesh=meshes(("d", "t")))
    def check(mesh):
        if mesh == {"d": 1, "t": 1}:
            return
        assert_same_on_every_mesh(kernel, meshes=[mesh], axes=("d", "t"))

    with pytest.raises(MeshMismatch) as info:
        check()
    assert info.value.mesh == {"d": 1, "t": 2}  # hypothesis shrank it


@settings(max_examples=4, deadline=None, database=None)
@given(mesh=meshes(("d", "t")).filter(lambda m: m != {"d": 1, "t": 1}), seed=st.integers(0, 100))
def test_a_correct_kernel_agrees_on_drawn_meshes_and_inputs(mesh, seed):
    @typed_shard_map
    def total(x: f32[b"batch/d embed/t"]) -> f32[b"embed/t"]:
        return jax.lax.psum(x.sum(0), "d")

    assert_same_on_every_mesh(jax.jit(total), meshes=[mesh], axes=("d", "t"), seed=seed)


def test_use_cpu_devices_after_jax_started_checks_the_count():
    use_cpu_devices(len(jax.devices("cpu")))  # already so: nothing to do
    with pytest.raises(RuntimeError, match=r"use_cpu_devices\(3\): JAX's CPU backend has already started with 8 "
                                           r"devices; call it before anything makes an array"):
        use_cpu_devices(3)
    with pytest.raises(TypeError, match="n must be an int >= 1"):
        use_cpu_devices(0)


def test_import_shardtypes_loads_neither_the_testing_layer_nor_its_tools():
    proc = subprocess.run([sys.executable, "-c", "import sys, shardtypes; print(sorted(m for m in sys.modules if "
                           "m.startswith(('shardtypes.testing', 'hypothesis', '_pytest'))))"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def test_the_pytest_plugin_gives_devices_and_a_fixture(tmp_path):
    (tmp_path / "conftest.py").write_text('pytest_plugins = ["shardtypes.testing.pytest_plugin"]\n')
    (tmp_path / "test_kernel.py").write_text(textwrap.dedent('''
        import jax
        from shardtypes import f32, typed_shard_map
        from shardtypes.testing import assert_same_on_every_mesh

        @typed_shard_map
        def total(x: f32[b"batch/d embed"]) -> f32[b"embed"]:
            return jax.lax.psum(x.sum(0), "d")

        def test_devices(cpu_devices):
            assert len(cpu_devices) == 4

        def test_total(cpu_devices):
            report = assert_same_on_every_mesh(total)
            assert {"d": 4} in report.ran and {"d": 8} not in report.ran
    '''))
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--cpu-devices=4"],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "2 passed" in proc.stdout


def test_nothing_in_shardtypes_imports_the_testing_layer():
    import ast
    import pathlib

    import shardtypes

    root = pathlib.Path(shardtypes.__file__).parent
    found = []
    for path in root.rglob("*.py"):
        if "testing" in path.relative_to(root).parts:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([node.module or "", *(a.name for a in node.names)] if isinstance(node, ast.ImportFrom) else
                     [a.name for a in node.names] if isinstance(node, ast.Import) else [])
            if any(n == "testing" or n.endswith(".testing") or ".testing." in n for n in names):
                found.append(f"{path.relative_to(root)}:{node.lineno}")
    assert not found, found
