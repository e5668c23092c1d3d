"""The one registry of what each JAX primitive does (shardtypes/checking/kernel_pass/catalogue.py):
the docs' table is made from it, no module outside it writes a primitive's name, each family of a
record has its rules, facts are values, and ragged_dot is one entry that the pass, the step cost
and the activation estimate all follow."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax
from jax.sharding import AxisType
from typeguard import TypeCheckError

from shardtypes import f32, i32, shard, typed_shard_map, verify
from shardtypes.checking.kernel_pass import catalogue
from shardtypes.checking.kernel_pass.facts import Fact
from shardtypes.checking.kernel_pass.interpreter import LAYOUT_DOCS

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "shardtypes"


def test_the_docs_table_is_made_from_the_registry():
    page = (ROOT / "docs" / "shard-map.md").read_text()
    start = page.index("<!-- the registry's table")
    start = page.index("\n", start) + 1
    end = page.index("<!-- end of the registry's table -->")
    assert page[start:end].strip() == catalogue.markdown_table(LAYOUT_DOCS), (
        "docs/shard-map.md's table is not the registry's: paste catalogue.markdown_table(LAYOUT_DOCS) there")


def test_every_family_with_records_is_documented_and_has_a_pass_rule():
    for family in catalogue.Family:
        if not catalogue.names(family):
            continue
        assert family in LAYOUT_DOCS, family
        assert catalogue.rule_of(catalogue.Part.PASS, catalogue.record(next(iter(catalogue.names(family))))), family


def _names_branched_on(tree: ast.AST) -> list[tuple[int, str]]:
    """String constants that are primitive names where code decides by them: compared, tested
    for membership, listed in a literal collection, a decorator's argument, or a prefix tested."""
    known = catalogue.names()
    found = []
    for node in ast.walk(tree):
        candidates: list = []
        if isinstance(node, ast.Compare):
            candidates = [node.left, *node.comparators]
        elif isinstance(node, (ast.Set, ast.Tuple, ast.List)):
            candidates = list(node.elts)
        elif isinstance(node, ast.Dict):
            candidates = [k for k in node.keys if k is not None]
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                node.func.attr in ("startswith", "endswith", "get"):
            candidates = list(node.args)
        for c in candidates:
            if isinstance(c, ast.Constant) and isinstance(c.value, str) and c.value in known:
                found.append((c.lineno, c.value))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for deco in node.decorator_list:
                for arg in getattr(deco, "args", ()):
                    if isinstance(arg, ast.Constant) and arg.value in known:
                        found.append((arg.lineno, arg.value))
    return found


def _readers() -> list[Path]:
    """The modules that read JAX's equations (they import the release reader, the walk or the
    registry): the kernel pass, the step cost, the activation estimate, and any new one."""
    marks = ("from .jaxpr import", "import jaxprs", "jaxprs,", "jaxpr_walk", "from .walk import", "catalogue")
    return [p for p in sorted(PACKAGE.rglob("*.py")) if any(m in p.read_text() for m in marks)]


def test_no_primitive_name_is_written_outside_the_registry():
    offenders = []
    readers = _readers()
    assert {"cost_model.py", "activation_rules.py", "interpreter.py", "structural.py"} <= {p.name for p in readers}
    for path in readers:
        rel = path.relative_to(PACKAGE).as_posix()
        if rel == "checking/kernel_pass/catalogue.py":
            continue
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):  # (__all__ lists names of this module, not primitives)
            if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "__all__" for t in node.targets):
                node.value = ast.Constant(None)
        for line, name in _names_branched_on(tree):
            offenders.append(f"shardtypes/{rel}:{line} {name!r}")
    assert not offenders, "a primitive's name decided on outside the registry (catalogue.py): " + ", ".join(offenders)


def test_the_scan_finds_a_name_branch():  # (the check above can fail)
    code = 'def f(eqn):\n    if name(eqn) == "dot_general":\n        return 1\n    return name(eqn) in ("psum", "x")\n'
    assert _names_branched_on(ast.parse(code)) == [(2, "dot_general"), (4, "psum")]


def test_a_record_twice_and_a_rule_twice_are_refused():
    with pytest.raises(ValueError, match="two records for the primitive 'psum'"):
        catalogue.define(catalogue.Family.PSUM, "psum")

    def other(*args):
        return []

    with pytest.raises(ValueError, match="two kernel pass rules for the family 'transpose'"):
        catalogue.implements(catalogue.Part.PASS, catalogue.Family.TRANSPOSE)(other)


def test_a_primitive_no_record_knows_is_the_documented_default():
    found = catalogue.record("no_such_primitive")
    assert found.family is catalogue.Family.UNKNOWN and not found.linear
    assert catalogue.rule_of(catalogue.Part.PASS, found) is None  # (the pass's default: step aside, warn)


def test_records_are_values_and_say_their_releases():
    psum = catalogue.record("psum")
    with pytest.raises(dataclasses.FrozenInstanceError):
        psum.linear = False  # type: ignore[misc]
    assert catalogue.record("vary_unreduced_cast").seen.startswith("JAX 0.12.0 on")
    assert catalogue.record("unreduced_pmax").stands_for == "pmax"
    assert catalogue.record("reduce_scatter_start").collective == "reduce-scatter"


def test_facts_are_values():
    fact = Fact(((), ("d",)), frozenset({"t"}), origin="x", vary=frozenset({"d"}))
    with pytest.raises(AttributeError, match="a Fact is a value"):
        fact.dims = None  # type: ignore[misc]
    moved = fact.evolve(dims=(("d",), ()))
    assert moved.dims == (("d",), ()) and fact.dims == ((), ("d",)) and moved.owed == fact.owed
    assert moved.serial != fact.serial
    assert fact.evolve(owed=frozenset()).kind == catalogue.Owed.SUM


# -- ragged_dot: the grouped matmul of MoE layers, one entry in the registry -----------------------

def _grouped(x: f32[b"tokens model/t"], w: f32[b"experts model/t ff"], g: i32[b"experts"]) -> f32[b"tokens ff"]:
    return lax.psum(lax.ragged_dot(x, w, g), "t")


def _grouped_wrong_axis(x: f32[b"tokens model/t"], w: f32[b"experts model/t ff"],
                        g: i32[b"experts"]) -> f32[b"tokens ff"]:
    return lax.psum(lax.ragged_dot(x, w, g), "d")  # (the sum is owed over 't')


def _grouped_scatter_wrong(x: f32[b"tokens model/t"], w: f32[b"experts model/t ff"],
                           g: i32[b"experts"]) -> f32[b"tokens/d ff"]:
    return lax.psum_scatter(lax.ragged_dot(x, w, g), "d", scatter_dimension=0, tiled=True)


def _inputs():
    x = jnp.arange(8 * 16, dtype=jnp.float32).reshape(8, 16) / 100
    w = jnp.arange(2 * 16 * 4, dtype=jnp.float32).reshape(2, 16, 4) / 100
    g = jnp.array([3, 5], jnp.int32)
    return x, w, g


@pytest.mark.parametrize("axis_type", [AxisType.Explicit, AxisType.Auto])
@pytest.mark.parametrize("check_vma", [True, False])
def test_ragged_dot_leaves_a_sum_owed_over_the_split_contraction(axis_type, check_vma):
    x, w, g = _inputs()
    reference = lax.ragged_dot(x, w, g)
    mesh = jax.make_mesh((2, 4), ("d", "t"), axis_types=(axis_type, axis_type))
    with jax.set_mesh(mesh):
        args = (shard(x, f32[b"tokens model/t"]), shard(w, f32[b"experts model/t ff"]), shard(g, i32[b"experts"]))
        out = jax.jit(typed_shard_map(_grouped, check_vma=check_vma))(*args)
        np.testing.assert_allclose(np.asarray(out), np.asarray(reference), rtol=1e-5)
        for mistake in (_grouped_wrong_axis, _grouped_scatter_wrong):
            with pytest.raises(TypeCheckError, match=r"partial sum still owing a sum over mesh axis 't' \(made by a "
                                                     r"ragged_dot_general \(jax.lax.ragged_dot\) contracting dim 1"):
                jax.jit(typed_shard_map(mistake, check_vma=check_vma))(*args)


def test_ragged_dot_in_the_step_cost_and_the_activation_estimate():
    report = verify(typed_shard_map(_grouped), {"d": 2, "t": 4}, {"tokens": 8, "model": 16, "experts": 2, "ff": 4})
    # Per device: 8 rows x 4 columns, each a contraction of 16 / 4 model entries: 2 * 8 * 4 * 4.
    assert report.cost.matmul_flops_per_device == 2 * 8 * 4 * 4
    (psum,) = report.cost.communication.collectives
    assert (psum.kind, psum.axes, psum.source) == ("all-reduce", ("t",), "kernel")
    assert psum.bytes == 2 * 8 * 4 * 4 * 3 // 4  # 2(n-1)/n of the 8 x 4 float32 partial sum
    assert report.activations.bytes_per_device >= 8 * 4 * 4  # (the partial sum, before its psum)


def test_the_step_cost_counts_a_primitive_no_record_knows_as_elementwise_and_names_it():
    from jax.extend.core import Primitive

    from shardtypes.tools.cost_model import cost_of

    unknown = Primitive("shardtypes_test_unrecorded")
    unknown.def_abstract_eval(lambda x: jax.core.ShapedArray(x.shape, x.dtype))
    closed = jax.make_jaxpr(lambda x: unknown.bind(x) @ x.T)(jnp.ones((8, 4), jnp.float32))
    cost = cost_of(closed, [jnp.ones((8, 4), jnp.float32)], {}, {})
    assert cost.flops_by_dtype["float32"] == 8 * 4 + 2 * 8 * 8 * 4  # one per element, then the matmul
    (said,) = cost.communication.assumptions
    assert said.startswith("primitives the registry has no record of (shardtypes_test_unrecorded) were counted "
                           "as elementwise")
