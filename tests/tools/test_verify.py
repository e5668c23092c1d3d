"""Static verification and plan reports (shardtypes.tools; issue 5,
items 1, 2 and 4).

``verify`` evaluates a checked function with ``jax.eval_shape`` on an abstract mesh, with inputs
built from its annotations, and reports every problem it meets (the collect mode of
``shardtypes.model.errors``); ``plan`` lays an annotation tree out on a mesh and reports the
memory each device holds. Neither touches a device: the meshes here are far larger than the 8
simulated CPU devices.

The functions under verification are defined at module level (typeguard instruments their
source, annotated locals included).
"""

import dataclasses
import inspect
import json
import math
import re
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import AbstractMesh, AxisType, NamedSharding, PartitionSpec as P, reshard
from typeguard import TypeCheckError

import shardtypes
from shardtypes import (
    Array,
    AxisRules,
    PlanReport,
    Problem,
    VerifyReport,
    axis_rules,
    bf16,
    dims,
    f32,
    floating,
    i32,
    make_shape_dtype_structs,
    ops,
    plan,
    pytree_dataclass,
    typechecked,
    typed_shard_map,
    verify,
)
from shardtypes.context import abstract_mesh
from shardtypes.language import VERIFY_PROBLEMS
from shardtypes.model import COLLECTED
from shardtypes.tools import PlanRow, VerificationError

from conftest import make_mesh

MESH = {"d": 64, "t": 64}


def explicit(shape, names):
    return AbstractMesh(shape, names, axis_types=(AxisType.Explicit,) * len(names))


def assert_sentence(problem: Problem, function: str) -> None:
    """A problem's str() reads on its own: it names the function and says what is wrong."""
    text = str(problem)
    assert text == problem.message
    assert f"{function}()" in text, text
    assert re.search(r"\b(is|are|fails|does|has|have|needs|given)\b", text), text
    assert not text.rstrip().endswith((":", ",", "(")), text
    assert "\n" not in text, text


def line_of(fn, code: str) -> int:
    """The line number of the source line of ``fn`` that contains ``code``."""
    lines, start = inspect.getsourcelines(inspect.unwrap(fn))
    (offset,) = [i for i, line in enumerate(lines) if code in line]
    return start + offset


# ---------------------------------------------------------------------------------------------
# Functions under verification.


@typechecked
def matmul(x: f32[b"batch/d embed"], w: f32[b"embed hidden/t"]) -> f32[b"batch/d hidden/t"]:
    return x @ w


@typechecked
def bad_local(x: f32[b"batch/d embed"], w: f32[b"embed hidden/t"]) -> f32[b"batch/d hidden/t"]:
    y: f32[b"batch hidden/t"] = x @ w  # the product is P('d', 't'), not P(None, 't')
    return y


@typechecked
def bad_return(x: f32[b"batch/d embed"], w: f32[b"embed hidden/t"]) -> f32[b"batch hidden/t"]:
    return x @ w


@typechecked
def several(x: f32[b"batch/d embed"], w: f32[b"embed hidden/t"]) -> f32[b"batch hidden"]:
    y: f32[b"batch hidden/t"] = x @ w  # wrong sharding
    z: i32[b"batch/d hidden/t"] = x @ w  # wrong dtype
    return x @ w  # wrong sharding of the return value


@typechecked
def ambiguous(a: f32[b"n/d m"], b: f32[b"n m/d"]) -> f32[b"n m"]:
    return a + b


@typechecked
def lcm_dims(x: f32[b"n/d m"], y: f32[b"n/t m"]) -> f32[b"n/d m"]:
    return x


@typechecked
def two_axes(x: f32[b"n/d/t m"]) -> f32[b"n/d/t m"]:
    return x


def undecorated(x: f32[b"batch/d embed"]) -> f32[b"batch/d embed"]:
    y: f32[b"batch embed"] = x * 2
    return y


@typechecked
def uses_dims(x: f32[b"batch/d"]) -> f32[b"batch/d vocab"]:
    return jnp.zeros((x.shape[0], dims()["vocab"]), out_sharding=P("d", None))


# A nested checked call that disagrees with what its caller hands it, deep inside a dataclass.


@pytree_dataclass
class Weights:
    w_up: f32[b"embed/d hidden/t"]
    w_down: f32[b"hidden/t embed/d"]


@pytree_dataclass
class State:
    weights: Weights
    step: i32[b""]


@typechecked
def inner(state: State) -> f32[b""]:
    return jnp.sum(state.weights.w_up)


@typechecked
def outer(state: State) -> f32[b""]:
    w_up = reshard(state.weights.w_up, P("t", "d"))  # the layout inner() does not expect
    moved = State(weights=Weights(w_up=w_up, w_down=state.weights.w_down), step=state.step)
    return inner(moved)


# typed_shard_map kernels called from checked functions.


@typed_shard_map
def kernel_ok(x: f32[b"batch/d embed"], w: f32[b"embed hidden/t"]) -> f32[b"batch/d hidden/t"]:
    y: f32[b"batch/d hidden/t"] = x @ w
    return y


@typed_shard_map
def kernel_bad_local(x: f32[b"batch/d embed"], w: f32[b"embed hidden/t"]) -> f32[b"batch/d hidden/t"]:
    y: f32[b"batch/d hidden"] = x @ w  # locally hidden is hidden/64: the annotation says global
    return x @ w


@typechecked
def uses_kernel_ok(x: f32[b"batch/d embed"], w: f32[b"embed hidden/t"]) -> f32[b"batch/d hidden/t"]:
    return kernel_ok(x, w)


@typechecked
def uses_kernel_bad_local(x: f32[b"batch/d embed"], w: f32[b"embed hidden/t"]) -> f32[b"batch/d hidden/t"]:
    return kernel_bad_local(x, w)


@typechecked
def kernel_given_replicated(x: f32[b"batch/d embed"], w: f32[b"embed hidden/t"]) -> f32[b"batch/d hidden/t"]:
    return kernel_ok(x, reshard(w, P(None, None)))  # the kernel wants w split over t


@typed_shard_map
def kernel_doubles(x: f32[b"batch/d embed"]) -> f32[b"batch/d embed"]:
    return jnp.concatenate([x, x], axis=1)  # embed doubles: both the local and global results fail


@typechecked
def uses_kernel_doubles(x: f32[b"batch/d embed"]) -> f32[b"batch/d embed"]:
    return kernel_doubles(x)


@typed_shard_map
def kernel_ops_ok(x: f32[b"batch/d embed/t"], w: f32[b"embed/t hidden"]) -> f32[b"batch/d hidden/t"]:
    h = ops.einsum_unreduced("batch/d embed/t, embed/t hidden -> batch/d hidden", x, w)
    return ops.psum_scatter("batch/d hidden -> batch/d hidden/t", h)


@typed_shard_map
def kernel_ops_misused(x: f32[b"batch/d embed/t"], w: f32[b"embed/t hidden"]) -> f32[b"batch/d hidden/t"]:
    # x's embed dim is split over t, the spec says it is whole
    h = ops.einsum_unreduced("batch/d embed, embed/t hidden -> batch/d hidden", x, w)
    return ops.psum_scatter("batch/d hidden -> batch/d hidden/t", h)


@typechecked
def uses_ops_ok(x: f32[b"batch/d embed/t"], w: f32[b"embed/t hidden"]) -> f32[b"batch/d hidden/t"]:
    return kernel_ops_ok(x, w)


@typechecked
def uses_ops_misused(x: f32[b"batch/d embed/t"], w: f32[b"embed/t hidden"]) -> f32[b"batch/d hidden/t"]:
    return kernel_ops_misused(x, w)


# Parameters that are not arrays.


@pytree_dataclass
class Config:
    scale: float


@typechecked
def with_static(x: f32[b"batch/d embed"], n: int, cfg: Config) -> f32[b"batch/d _"]:
    return jnp.tile(x * cfg.scale, (1, n))


def unannotated(x: f32[b"batch/d embed"], n, k=3) -> f32[b"batch/d embed"]:
    return x * n * k


# ---------------------------------------------------------------------------------------------
# verify: meshes and dims


def test_a_mapping_is_an_abstract_mesh_with_explicit_axes():
    mesh = abstract_mesh(MESH)
    assert isinstance(mesh, AbstractMesh)
    assert dict(mesh.shape) == MESH
    assert tuple(mesh.axis_types) == (AxisType.Explicit, AxisType.Explicit)
    given = explicit((4, 2), ("d", "t"))
    assert abstract_mesh(given) is given
    with pytest.raises(ValueError, match=r"a mesh mapping is axis name -> positive size.*got \{'d': 0\}"):
        abstract_mesh({"d": 0})
    with pytest.raises(TypeError, match="mesh must be a Mesh, an AbstractMesh or a mapping"):
        abstract_mesh([64, 64])


def test_correct_function_is_ok_with_symbolic_dims():
    report = verify(matmul, MESH)
    assert isinstance(report, VerifyReport)
    assert report.ok and report.problems == ()
    assert report.function == "matmul" and dict(report.mesh) == MESH
    # Dims not given are symbolic, multiples of the product of the mesh axes that shard them.
    assert {k: str(v) for k, v in report.dims.items()} == {
        "batch": "64*batch", "embed": "embed", "hidden": "64*hidden"}
    assert str(report) == ("verify matmul on a d=64 x t=64 mesh (4,096 devices), dims batch=64*batch, "
                           "embed=embed, hidden=64*hidden: ok, no problems")
    assert report.activation_bytes_per_device == 0 and not report.activations.lower_bound
    out = report.outputs
    assert isinstance(out, jax.ShapeDtypeStruct) and out.dtype == jnp.float32
    assert tuple(map(str, out.shape)) == ("64*batch", "64*hidden")
    assert out.sharding.spec == P("d", "t")


def test_given_dims_are_the_sizes():
    report = verify(matmul, MESH, dims={"batch": 128, "embed": 16, "hidden": 256})
    assert report.ok, str(report)
    assert dict(report.dims) == {"batch": 128, "embed": 16, "hidden": 256}
    assert report.outputs.shape == (128, 256)
    assert "dims batch=128, embed=16, hidden=256: ok, no problems" in str(report)


def test_some_dims_given_the_others_symbolic():
    report = verify(matmul, MESH, dims={"embed": 8192})
    assert report.ok, str(report)
    assert report.dims["embed"] == 8192
    assert str(report.dims["batch"]) == "64*batch" and str(report.dims["hidden"]) == "64*hidden"


@pytest.mark.parametrize("kind", [AxisType.Explicit, AxisType.Auto], ids=["explicit", "auto"])
def test_an_abstract_mesh_is_used_as_given(kind):
    mesh = AbstractMesh((16, 8), ("d", "t"), axis_types=(kind, kind))
    report = verify(matmul, mesh, dims={"batch": 32, "embed": 8, "hidden": 16})
    assert report.ok, str(report)
    assert dict(report.mesh) == {"d": 16, "t": 8}
    assert report.outputs.shape == (32, 16)
    assert "on a d=16 x t=8 mesh (128 devices)" in str(report)


def test_plan_on_a_concrete_mesh():
    report = plan(f32[b"a/d b/t"], make_mesh("explicit"), {"a": 8, "b": 4})
    assert report.ok and report.devices == 8
    assert report.rows[0].device_shape == (2, 2)


def test_verify_on_a_concrete_mesh():
    report = verify(matmul, make_mesh("explicit"), dims={"batch": 8, "embed": 4, "hidden": 2})
    assert report.ok, str(report)
    assert dict(report.mesh) == {"d": 4, "t": 2}


def test_symbolic_dims_are_multiples_of_every_sharding():
    # n is split over d (4) in one argument and over t (6) in the other: a multiple of both.
    report = verify(lcm_dims, {"d": 4, "t": 6})
    assert report.ok, str(report)
    assert str(report.dims["n"]) == "12*n" and str(report.dims["m"]) == "m"
    report = verify(two_axes, {"d": 4, "t": 6})
    assert report.ok, str(report)
    assert str(report.dims["n"]) == "24*n"


def test_dims_that_cannot_divide_their_axes():
    report = verify(matmul, MESH, dims={"batch": 100, "embed": 16, "hidden": 96})
    assert not report.ok
    assert [p.kind for p in report.problems] == ["dims", "dims"]
    first, second = map(str, report.problems)
    assert first == ("argument \"x\" of matmul(): the annotation (f32[b'batch/d embed']): dim 0 'batch/d' "
                     "has size 100, which does not divide over mesh axes ('d',) of total size 64")
    assert second.startswith("argument \"w\" of matmul(): the annotation (f32[b'embed hidden/t']): ")
    assert "dim 1 'hidden/t' has size 96, which does not divide over mesh axes ('t',) of total size 64" in second
    for p in report.problems:
        assert_sentence(p, "matmul")
    assert "2 problems" in str(report)


def test_an_axis_the_mesh_lacks_is_a_dims_problem():
    report = verify(matmul, {"d": 8})
    assert [p.kind for p in report.problems] == ["dims"]
    assert "dim 1 'hidden/t' is sharded over mesh axis 't', which the mesh does not have (axes: ('d',))" in str(
        report.problems[0])
    assert 'argument "w" of matmul()' in str(report.problems[0])


# ---------------------------------------------------------------------------------------------
# verify: problems found


def test_wrong_sharding_of_an_annotated_local():
    report = verify(bad_local, MESH)
    assert [p.kind for p in report.problems] == ["check"]
    (problem,) = report.problems
    assert str(problem) == (
        "the value assigned to y of bad_local() is not f32[b'batch hidden/t']: sharding over Explicit "
        "axes is P('d', 't') but the annotation says P(None, 't') (found float32[64*batch,64*hidden] "
        "sharded P('d', 't'))")
    assert_sentence(problem, "bad_local")
    assert str(report).startswith("verify bad_local on a d=64 x t=64 mesh (4,096 devices)")
    assert str(report).splitlines()[1] == f"  1. [check] {problem}"


def test_an_undecorated_function_is_checked_too():
    report = verify(undecorated, {"d": 8})
    assert [p.kind for p in report.problems] == ["check"]
    assert str(report.problems[0]).startswith(
        "the value assigned to y of undecorated() is not f32[b'batch embed']: sharding over Explicit "
        "axes is P('d', None) but the annotation says P(None, None)")


def test_wrong_return_annotation():
    report = verify(bad_return, MESH)
    assert not report.ok
    problem = report.problems[0]
    assert problem.kind == "check"
    assert str(problem).startswith("the return value")
    assert "of bad_return() is not f32[b'batch hidden/t']: sharding over Explicit axes is P('d', 't') but " \
           "the annotation says P(None, 't')" in str(problem)


def test_wrong_return_annotation_is_one_problem_naming_the_function():
    report = verify(bad_return, MESH)
    assert len(report.problems) == 1, str(report)
    for p in report.problems:
        assert_sentence(p, "bad_return")


def test_field_path_when_a_nested_checked_call_disagrees():
    report = verify(outer, MESH)
    assert [p.kind for p in report.problems] == ["check"]
    (problem,) = report.problems
    assert str(problem).startswith(
        "argument \"state\" of inner(): state.weights.w_up is not f32[b'embed/d hidden/t']: sharding over "
        "Explicit axes is P('t', 'd') but the annotation says P('d', 't')")
    assert_sentence(problem, "inner")


def test_typed_shard_map_kernel_ok():
    assert verify(uses_kernel_ok, MESH).ok
    report = verify(kernel_ok, MESH, dims={"batch": 128, "embed": 8, "hidden": 128})
    assert report.ok, str(report)
    assert report.outputs.shape == (128, 128) and report.outputs.sharding.spec == P("d", "t")


def test_typed_shard_map_kernel_local_check():
    report = verify(uses_kernel_bad_local, MESH, dims={"batch": 128, "embed": 8, "hidden": 128})
    assert [p.kind for p in report.problems] == ["check"]
    (problem,) = report.problems
    assert str(problem) == (
        "the value assigned to y of kernel_bad_local() is not f32[b'batch/d hidden']: dimension 'hidden' is "
        "2 here (dim 1) but was bound to 128 by verify(dims=...) (found "
        "float32[2,2], a local block under manual axes ('d', 't'), sharded P(None, None))")
    # symbolic: the local block has hidden, the global size is 64*hidden
    report = verify(uses_kernel_bad_local, MESH)
    (problem,) = report.problems
    assert "dimension 'hidden' is hidden here (dim 1) but was bound to 64*hidden" in str(problem)


@typed_shard_map
def gathers_invariant(x: f32[b"rows/d/t cols"]) -> f32[b"rows/d cols"]:
    return ops.all_gather("rows/d/t cols -> rows/d cols", x, invariant=True)


@typed_shard_map
def gathers_plain(x: f32[b"rows/d/t cols"]) -> f32[b"rows/d cols"]:
    return ops.all_gather("rows/d/t cols -> rows/d cols", x)


def test_a_kernel_returning_a_gather():
    # invariant=True passes at 4,096 devices (symbolic sizes); a plain gather returned replicated
    # is the TypeCheckError typed_shard_map raises, before JAX's out_specs check.
    assert verify(gathers_invariant, {"d": 64, "t": 64}).ok
    (problem,) = verify(gathers_plain, {"d": 64, "t": 64}).problems
    assert problem.kind == "check"
    assert str(problem).startswith(
        "in kernel gathers_plain(), the return value varies over mesh axis 't' (jax.typeof gives "
        "float32[64*rows,cols]{V:(d,t)}), gathered by shardtypes.ops.all_gather('rows/d/t cols -> rows/d cols')")


def test_typed_shard_map_kernel_global_check():
    report = verify(kernel_given_replicated, MESH)
    assert report.problems[0].kind == "check"
    assert str(report.problems[0]).startswith(
        "argument \"w\" (traced jax.Array) of kernel_ok() is not f32[b'embed hidden/t']: sharding over "
        "Explicit axes is P(None, None) but the annotation says P(None, 't')")


def test_typed_shard_map_kernel_local_and_global_results():
    report = verify(uses_kernel_doubles, MESH)
    messages = [str(p) for p in report.problems]
    local = [m for m in messages if "of kernel_doubles()" in m and "found float32[batch,2*embed]" in m]
    global_ = [m for m in messages if "of kernel_doubles()" in m and "found float32[64*batch,2*embed] sharded P('d', None)" in m]
    assert local and global_, str(report)
    assert "dimension 'embed' is 2*embed here (dim 1) but was bound to embed by argument \"x\" of " \
           "uses_kernel_doubles()" in local[0]


def test_typed_collectives():
    assert verify(uses_ops_ok, MESH).ok
    report = verify(uses_ops_misused, MESH)
    assert [p.kind for p in report.problems] == ["check"]
    (problem,) = report.problems
    assert str(problem) == (
        "in kernel kernel_ops_misused(), "
        "shardtypes.ops.einsum_unreduced('batch/d embed, embed/t hidden -> batch/d hidden'): operand 0 "
        "(argument \"x\" of kernel_ops_misused(), annotated f32[b'batch/d embed/t']) is laid out P('d', 't'), "
        "but the spec string's input 'batch/d embed' says P('d', None): dim 1 is split over 't' here but "
        "not split in the spec")


def test_typed_collective_problem_names_its_kernel():
    (problem,) = verify(uses_ops_misused, MESH).problems
    assert "kernel_ops_misused" in str(problem)


def test_jax_ambiguous_sharding_error():
    report = verify(ambiguous, MESH)
    assert [p.kind for p in report.problems] == ["jax"]
    (problem,) = report.problems
    line = line_of(ambiguous, "return a + b")
    text = str(problem)
    assert text.startswith(f"ambiguous() fails under jax.eval_shape at test_verify.py:{line} "
                           "(ambiguous: return a + b): ShardingTypeError: ")
    assert "f32[64*n@d,64*m], f32[64*n,64*m@d] produces an illegally sharded result" in text
    assert_sentence(problem, "ambiguous")


def test_several_problems_in_one_run():
    report = verify(several, MESH)
    assert not report.ok and all(p.kind == "check" for p in report.problems)
    messages = [str(p) for p in report.problems]
    assert messages[0].startswith("the value assigned to y of several() is not f32[b'batch hidden/t']: "
                                  "sharding over Explicit axes is P('d', 't')")
    assert messages[1].startswith("the value assigned to z of several() is not i32[b'batch/d hidden/t']: "
                                  "has dtype float32, the annotation wants int32")
    assert messages[2].startswith("the return value of several() is not f32[b'batch hidden']: sharding over "
                                  "Explicit axes is P('d', 't') but the annotation says P(None, None)")
    text = str(report)
    assert f"{len(messages)} problems" in text.splitlines()[0]
    for i, m in enumerate(messages, 1):
        assert f"  {i}. [check] {m}" in text


def test_collect_mode_ends_with_verify():
    assert COLLECTED.get() is None
    verify(several, MESH)
    assert COLLECTED.get() is None
    with pytest.raises(VerificationError):
        verify(several, MESH, raise_on_error=True)
    assert COLLECTED.get() is None
    # checks raise again outside verify
    with pytest.raises(TypeCheckError, match=r"argument \"x\" \(jax.Array\) of matmul\(\) is not"):
        matmul(jnp.zeros((8, 4)), jnp.zeros((4, 2)))


# ---------------------------------------------------------------------------------------------
# verify: static parameters and setup problems


def test_static_parameters():
    report = verify(with_static, {"d": 4}, dims={"batch": 8, "embed": 2}, static={"n": 3, "cfg": Config(2.0)})
    assert report.ok, str(report)
    assert report.outputs.shape == (8, 6)  # n=3 copies of embed


def test_missing_static_is_a_setup_problem():
    report = verify(with_static, {"d": 4}, static={"n": 3})
    assert [p.kind for p in report.problems] == ["setup"]
    assert str(report.problems[0]) == (
        f"argument \"cfg\" of with_static() is annotated <class '{Config.__module__}.Config'>, which is not "
        "an array tree: give it in static={...}")
    report = verify(with_static, {"d": 4}, static={"cfg": Config(1.0)})
    assert str(report.problems[0]) == (
        "argument \"n\" of with_static() is annotated <class 'int'>, which is not an array tree: give it in "
        "static={...}")
    for p in report.problems:
        assert_sentence(p, "with_static")


def test_unknown_static_name_is_a_setup_problem():
    report = verify(with_static, {"d": 4}, static={"n": 3, "cfg": Config(2.0), "steps": 1})
    assert [p.kind for p in report.problems] == ["setup"]
    assert str(report.problems[0]) == "static values given for ['steps'], which with_static() does not take"
    assert_sentence(report.problems[0], "with_static")


def test_unannotated_parameter():
    report = verify(unannotated, {"d": 4})
    assert [str(p) for p in report.problems] == [
        'argument "n" of unannotated() has no annotation: give it in static={...}']
    assert report.problems[0].kind == "setup"
    assert verify(unannotated, {"d": 4}, static={"n": 2}).ok  # k has a default


def test_given_dims_are_visible_inside_the_function():
    report = verify(uses_dims, {"d": 8}, dims={"vocab": 16})
    assert report.ok, str(report)
    assert report.outputs.shape[1] == 16


# ---------------------------------------------------------------------------------------------
# verify: the report


def test_raise_on_error():
    with pytest.raises(VerificationError) as info:
        verify(several, MESH, raise_on_error=True)
    error = info.value
    assert isinstance(error, TypeCheckError)
    assert isinstance(error.report, VerifyReport) and not error.report.ok
    assert str(error) == f"{error.report}\n{VERIFY_PROBLEMS.line}"  # its docs link, once
    assert len(error.report.problems) >= 3
    # with nothing wrong it returns the report
    assert verify(matmul, MESH, raise_on_error=True).ok


def test_to_json():
    data = json.loads(verify(several, MESH).to_json())
    assert data["function"] == "several" and data["ok"] is False
    assert data["mesh"] == MESH
    assert data["dims"] == {"batch": "64*batch", "embed": "embed", "hidden": "64*hidden"}
    assert data["problems"][0]["kind"] == "check"
    assert data["problems"][0]["message"].startswith("the value assigned to y of several()")
    ok = json.loads(verify(matmul, MESH, dims={"batch": 64, "embed": 8, "hidden": 64}).to_json())
    assert ok["ok"] is True and ok["problems"] == [] and ok["dims"]["batch"] == "64"



@pytest.mark.parametrize("fn, kwargs", [
    pytest.param(bad_local, {}, id="local"),
    pytest.param(several, {}, id="several"),
    pytest.param(ambiguous, {}, id="jax"),
    pytest.param(outer, {}, id="nested"),
    pytest.param(uses_kernel_bad_local, {}, id="kernel"),
    pytest.param(matmul, {"dims": {"batch": 100}}, id="dims"),
    pytest.param(with_static, {"static": {"n": 1, "cfg": Config(1.0), "zz": 0}}, id="setup"),
])
def test_every_problem_is_a_sentence_naming_its_function(fn, kwargs):
    report = verify(fn, MESH, **kwargs)
    assert report.problems
    names = {"outer": "inner", "uses_kernel_bad_local": "kernel_bad_local"}
    for p in report.problems:
        assert p.kind in ("check", "jax", "dims", "setup")
        assert_sentence(p, names.get(fn.__name__, fn.__name__))


# ---------------------------------------------------------------------------------------------
# verify at scale: a stacked model with 70B-class dims on 4,096 abstract devices.


@pytree_dataclass
class BigLayer:
    ln: f32[b"embed"]
    w_qkv: bf16[b"embed/d qkv/t"]
    w_o: bf16[b"qkv/t embed/d"]
    w_up: bf16[b"embed/d hidden/t"]
    w_down: bf16[b"hidden/t embed/d"]


@pytree_dataclass
class BigWeights:
    embed: bf16[b"vocab/t embed/d"]
    layers: Array["layers", BigLayer]
    unembed: bf16[b"vocab/t embed/d"]


BIG_DIMS = {"embed": 8192, "hidden": 28672, "layers": 80, "vocab": 128256, "qkv": 3 * 8192}


def _mm(x, w, w_spec, out_spec):
    """FSDP: gather the weight's d-split dim, keep its t split."""
    return jnp.einsum("bse,ef->bsf", x, reshard(w, w_spec), out_sharding=out_spec)


@typechecked
def big_block(x: bf16[b"batch/d seq embed"], layer: BigLayer) -> bf16[b"batch/d seq embed"]:
    n = x * layer.ln.astype(x.dtype)
    q: bf16[b"batch/d seq qkv/t"] = _mm(n, layer.w_qkv, P(None, "t"), P("d", None, "t"))
    x = x + _mm(q, layer.w_o, P("t", None), P("d", None, None))
    h: bf16[b"batch/d seq hidden/t"] = _mm(x, layer.w_up, P(None, "t"), P("d", None, "t"))
    return x + _mm(h, layer.w_down, P("t", None), P("d", None, None))


@typechecked
def big_forward(weights: BigWeights, x: bf16[b"batch/d seq embed"]) -> f32[b"batch/d seq vocab/t"]:
    x, _ = jax.lax.scan(lambda c, layer: (big_block(c, layer), None), x, weights.layers)
    unembed = reshard(weights.unembed, P("t", None))
    return jnp.einsum("bse,ve->bsv", x, unembed, out_sharding=P("d", None, "t")).astype(jnp.float32)


@typechecked
def big_block_wrong(x: bf16[b"batch/d seq embed"], layer: BigLayer) -> bf16[b"batch/d seq embed"]:
    n = x * layer.ln.astype(x.dtype)
    q: bf16[b"batch/d seq qkv"] = _mm(n, layer.w_qkv, P(None, "t"), P("d", None, "t"))  # wrong: qkv/t
    return x + _mm(q, layer.w_o, P("t", None), P("d", None, None))


@typechecked
def big_forward_wrong(weights: BigWeights, x: bf16[b"batch/d seq embed"]) -> f32[b"batch/d seq vocab/t"]:
    x, _ = jax.lax.scan(lambda c, layer: (big_block_wrong(c, layer), None), x, weights.layers)
    unembed = reshard(weights.unembed, P("t", None))
    return jnp.einsum("bse,ve->bsv", x, unembed, out_sharding=P("d", None, "t")).astype(jnp.float32)


def test_verify_at_scale():
    start = time.perf_counter()
    report = verify(big_forward, MESH, dims=dict(BIG_DIMS, batch=256, seq=4096))
    elapsed = time.perf_counter() - start
    assert report.ok, str(report)
    assert elapsed < 20, elapsed
    out = report.outputs
    assert out.shape == (256, 4096, 128256) and out.sharding.spec == P("d", None, "t")
    assert "(4,096 devices)" in str(report)

    report = verify(big_forward_wrong, MESH, dims=BIG_DIMS)  # batch and seq symbolic
    assert [p.kind for p in report.problems] == ["check"]
    assert str(report.problems[0]).startswith(
        "the value assigned to q of big_block_wrong() is not bf16[b'batch/d seq qkv']: sharding over Explicit "
        "axes is P('d', None, 't') but the annotation says P('d', None, None)")
    assert str(report.dims["batch"]) == "64*batch"


def test_plan_at_scale():
    report = plan(BigWeights, MESH, BIG_DIMS)
    assert report.ok and report.warnings == ()
    by_path = {r.path: r for r in report.rows}
    assert set(by_path) == {"BigWeights.embed", "BigWeights.layers.ln", "BigWeights.layers.w_qkv",
                            "BigWeights.layers.w_o", "BigWeights.layers.w_up", "BigWeights.layers.w_down",
                            "BigWeights.unembed"}
    up = by_path["BigWeights.layers.w_up"]
    assert up.shape == (80, 8192, 28672) and up.device_shape == (80, 128, 448)
    assert up.bytes_per_device == 80 * 128 * 448 * 2
    embed = by_path["BigWeights.embed"]
    assert embed.device_shape == (2004, 128)  # 128256 / 64
    total = sum(math.prod(r.shape) * np.dtype(r.dtype).itemsize for r in report.rows)
    assert report.global_bytes == total
    assert "36.0 MiB per device" in str(report)


# ---------------------------------------------------------------------------------------------
# plan


@pytree_dataclass
class Layer:
    w_up: bf16[b"embed/d hidden/t"]
    w_down: f32[b"hidden/t embed/d"]
    ln: f32[b"embed"]


LAYER_DIMS = {"layers": 80, "embed": 8192, "hidden": 28672}


def test_plan_rows():
    report = plan(Array["layers", Layer], MESH, LAYER_DIMS)
    assert isinstance(report, PlanReport)
    assert report.ok and report.errors == ()
    assert [type(r) for r in report.rows] == [PlanRow] * 3
    up, down, ln = report.rows
    assert up.path.endswith(".w_up") and down.path.endswith(".w_down") and ln.path.endswith(".ln")
    assert up.annotation == "bf16[b'layers embed/d hidden/t']"
    assert up.dtype == "bfloat16" and down.dtype == "float32"
    assert up.shape == (80, 8192, 28672)
    assert up.spec == "P(None, 'd', 't')"
    assert up.device_shape == (80, 128, 448)
    assert up.bytes_per_device == 80 * 128 * 448 * 2
    assert up.global_bytes == 80 * 8192 * 28672 * 2 and up.replicas == 1
    assert down.spec == "P(None, 't', 'd')" and down.device_shape == (80, 448, 128)
    assert down.bytes_per_device == 80 * 448 * 128 * 4
    assert ln.spec == "P(None, None)" and ln.device_shape == (80, 8192)
    assert ln.replicas == 4096 and ln.bytes_per_device == ln.global_bytes == 80 * 8192 * 4


def test_plan_totals_and_replicated_fraction():
    report = plan(Array["layers", Layer], MESH, LAYER_DIMS)
    assert report.devices == 4096
    assert report.bytes_per_device == sum(r.bytes_per_device for r in report.rows)
    assert report.global_bytes == sum(r.global_bytes for r in report.rows)
    expected = 1 - report.global_bytes / (report.bytes_per_device * report.devices)
    assert report.replicated_fraction == pytest.approx(expected)
    assert 0.05 < report.replicated_fraction < 0.1  # the replicated ln vectors


def test_replicated_fraction_extremes():
    sharded = plan(f32[b"a/d b/t"], MESH, {"a": 128, "b": 128})
    assert sharded.replicated_fraction == 0.0
    replicated = plan({"a": f32[b"a b"], "b": i32[b"b"]}, MESH, {"a": 128, "b": 128})
    assert replicated.replicated_fraction == pytest.approx(1 - 1 / 4096)
    assert replicated.replicated_fraction > 0.999
    half = plan(f32[b"a/d b"], MESH, {"a": 128, "b": 128})  # replicated over t only
    assert half.replicated_fraction == pytest.approx(1 - 1 / 64)
    assert plan({}, MESH).replicated_fraction == 0.0


def test_plan_warns_of_large_replicated_leaves():
    report = plan(f32[b"rows cols"], {"d": 8}, {"rows": 4096, "cols": 8192})  # 128 MiB on every device
    assert report.ok
    assert report.warnings == ("the annotation (f32[b'rows cols']) is replicated on all 8 devices: "
                               "128.0 MiB on each",)
    assert "warning: the annotation (f32[b'rows cols']) is replicated on all 8 devices" in str(report)
    # below the default threshold, or sharded: no warning
    assert plan(f32[b"rows cols"], {"d": 8}, {"rows": 1024, "cols": 1024}).warnings == ()
    assert plan(f32[b"rows/d cols"], {"d": 8}, {"rows": 4096, "cols": 8192}).warnings == ()
    # the threshold is configurable
    small = plan({"w": f32[b"rows cols"]}, {"d": 8}, {"rows": 16, "cols": 16}, large_replicated_bytes=512)
    assert len(small.warnings) == 1 and "['w'] (f32[b'rows cols']) is replicated on all 8 devices: 1.0 KiB" \
        in small.warnings[0]
    assert plan({"w": f32[b"rows cols"]}, {"d": 8}, {"rows": 16, "cols": 16},
                large_replicated_bytes=1024).warnings == ()


def test_plan_non_divisible_dims_are_errors_with_padding():
    report = plan(f32[b"a/d b"], {"d": 8}, {"a": 100, "b": 3})
    assert not report.ok
    assert report.errors == ("the annotation (f32[b'a/d b']): dim 0 of size 100 does not divide over ('d',) "
                             "(8 devices); it would be padded to 104",)
    assert report.warnings == ("the annotation (f32[b'a/d b']): 48 B of padding across its shards",)
    (row,) = report.rows
    assert row.device_shape == (13, 3) and row.bytes_per_device == 13 * 3 * 4


def test_plan_errors():
    missing = plan(f32[b"a/d b"], {"d": 8}, {"a": 64})
    assert missing.rows == () and not missing.ok
    assert missing.errors == ("the annotation (f32[b'a/d b']): dim 1 'b' needs the size of 'b'; pass it in dims "
                              "(given: ['a'])",)
    axis = plan(f32[b"a/x b"], {"d": 8}, {"a": 64, "b": 2})
    assert axis.errors == ("the annotation (f32[b'a/x b']): mesh axis 'x' is not in the mesh (axes: ('d',)) (if these are logical axis names, activate rules with shardtypes.axis_rules)",)
    category = plan({"w": floating[b"a/d b"]}, {"d": 8}, {"a": 64, "b": 2})
    assert category.errors == ("['w'] (floating[b'a/d b']): floating is a category; plan needs a dtype",)
    # the rows that can be planned still are
    mixed = plan({"good": f32[b"a/d"], "bad": f32[b"a/x"]}, {"d": 8}, {"a": 64})
    assert [r.path for r in mixed.rows] == ["['good']"] and len(mixed.errors) == 1
    assert "error: ['bad'] (f32[b'a/x']): mesh axis 'x' is not in the mesh" in str(mixed)


def test_plan_variadic_dim_is_an_error():
    report = plan(f32[b"... embed/d"], {"d": 4}, {"embed": 8})
    assert not report.ok and "..." in report.errors[0]


def test_plan_str_is_a_table():
    report = plan(Array["layers", Layer], MESH, LAYER_DIMS)
    lines = str(report).splitlines()
    assert re.match(r"path +annotation +dtype +shape +PartitionSpec +per device +bytes/device$", lines[0])
    assert set(lines[1].replace(" ", "")) == {"-"}
    up = next(line for line in lines if ".w_up" in line)
    for cell in ("bf16[b'layers embed/d hidden/t']", "bfloat16", "(80, 8192, 28672)", "P(None, 'd', 't')",
                 "(80, 128, 448)", "8.8 MiB"):
        assert cell in up, up
    # columns line up under the headers
    assert lines[0].index("dtype") == up.index("bfloat16")
    assert lines[0].index("PartitionSpec") == up.index("P(None, 'd', 't')")
    assert lines[-1].startswith("3 arrays on a d=64 x t=64 mesh (4,096 devices): ")
    assert "per device" in lines[-1] and "in all" in lines[-1]
    assert f"{report.replicated_fraction:.1%} of the memory they take holds replicated copies" in lines[-1]


def test_plan_to_json():
    report = plan(Array["layers", Layer], MESH, LAYER_DIMS)
    data = json.loads(report.to_json())
    assert data["mesh"] == MESH and data["devices"] == 4096 and data["ok"] is True
    assert data["bytes_per_device"] == report.bytes_per_device
    assert data["global_bytes"] == report.global_bytes
    assert data["replicated_fraction"] == pytest.approx(report.replicated_fraction)
    row = data["rows"][0]
    assert row["path"].endswith(".w_up") and row["dtype"] == "bfloat16"
    assert row["shape"] == ["80", "8192", "28672"] and row["device_shape"] == ["80", "128", "448"]
    assert row["spec"] == "P(None, 'd', 't')" and row["bytes_per_device"] == 80 * 128 * 448 * 2
    bad = json.loads(plan(f32[b"a/d"], {"d": 8}, {"a": 12}).to_json())
    assert bad["ok"] is False and "does not divide" in bad["errors"][0] and "padding" in bad["warnings"][0]


def test_plan_of_shape_dtype_structs():
    mesh = explicit((8,), ("d",))
    tree = {"p": jax.ShapeDtypeStruct((64, 2), jnp.float32, sharding=NamedSharding(mesh, P("d", None))),
            "q": jax.ShapeDtypeStruct((3,), jnp.int32)}
    report = plan(tree, mesh)
    p, q = report.rows
    assert (p.path, p.annotation, p.spec, p.device_shape, p.bytes_per_device) == ("['p']", "-", "P('d', None)", (8, 2), 64)
    assert (q.path, q.spec, q.device_shape, q.bytes_per_device, q.replicas) == ("['q']", "P()", (3,), 12, 8)
    assert report.global_bytes == 64 * 2 * 4 + 12


def test_plan_of_structs_matches_plan_of_the_annotation():
    mesh = explicit((4, 2), ("d", "t"))
    dims_ = {"layers": 3, "embed": 8, "hidden": 4}
    structs = make_shape_dtype_structs(Array["layers", Layer], dims_, mesh)
    from_structs = plan(structs, mesh)
    from_annotation = plan(Array["layers", Layer], mesh, dims_)
    assert [r.path for r in from_structs.rows] == [".w_up", ".w_down", ".ln"]
    assert [(r.shape, r.spec, r.device_shape, r.bytes_per_device) for r in from_structs.rows] == \
        [(r.shape, r.spec, r.device_shape, r.bytes_per_device) for r in from_annotation.rows]


def test_plan_of_structs_on_a_mesh_without_their_axis():
    other = explicit((8,), ("x",))
    tree = {"p": jax.ShapeDtypeStruct((64, 2), jnp.float32, sharding=NamedSharding(other, P("x", None)))}
    report = plan(tree, {"d": 8})
    assert not report.ok and "'x'" in report.errors[0]


RULES = AxisRules([("fsdp", "d"), ("tp", "t")], modes={"decode": [("fsdp", None)]})


def test_plan_under_axis_rules():
    annotation = {"w": f32[b"embed/fsdp hidden/tp"]}
    sizes = {"embed": 8, "hidden": 8}
    with axis_rules(RULES):
        (row,) = plan(annotation, {"d": 4, "t": 2}, sizes).rows
    assert (row.spec, row.device_shape) == ("P('d', 't')", (2, 4))
    with axis_rules(RULES, mode="decode"):
        (row,) = plan(annotation, {"d": 4, "t": 2}, sizes).rows
    assert (row.spec, row.device_shape, row.replicas) == ("P(None, 't')", (8, 4), 4)
    # without rules the logical names are mesh axes, which this mesh lacks
    outside = plan(annotation, {"d": 4, "t": 2}, sizes)
    assert outside.errors == ("['w'] (f32[b'embed/fsdp hidden/tp']): mesh axis 'fsdp' is not in the mesh "
                              "(axes: ('d', 't')) (if these are logical axis names, activate rules with "
                              "shardtypes.axis_rules)",)


def test_top_level_exports():
    assert shardtypes.verify is verify and shardtypes.plan is plan
    assert shardtypes.VerifyReport is VerifyReport and shardtypes.PlanReport is PlanReport
    assert shardtypes.Problem is Problem
    assert issubclass(VerificationError, TypeCheckError)


# ---------------------------------------------------------------------------------------------
# Input validation: sizes, typos, the report classes, pickling (the catalogue has more).


@pytest.mark.parametrize(
    "dims, error, message",
    [
        ({"batch": -8}, ValueError, "verify: dims['batch'] is -8; a size cannot be negative"),
        ({"batch": "8"}, TypeError, "verify: dims['batch'] must be an int size"),
        ({"batch": 8.0}, TypeError, "verify: dims['batch'] must be an int size"),
        ([("batch", 8)], TypeError, "verify: dims must be a mapping of dim name to size"),
        ({"hiden": 8}, ValueError, "verify: dims gives 'hiden' (did you mean 'hidden'?), which no annotation uses"),
    ],
)
def test_verify_checks_its_dims(dims, error, message):
    with pytest.raises(error, match=re.escape(message)):
        verify(matmul, MESH, dims=dims)


def test_verify_checks_fn_static_and_raise_on_error():
    with pytest.raises(TypeError, match=re.escape("verify: fn must be a function (such as a checked train_step), got the class")):
        verify(Weights, MESH)
    with pytest.raises(TypeError, match=re.escape("verify: static must be a mapping of parameter name to value, got 3")):
        verify(matmul, MESH, static=3)
    with pytest.raises(TypeError, match=re.escape("verify: raise_on_error must be True or False, got 'yes'")):
        verify(matmul, MESH, raise_on_error="yes")
    with pytest.raises(ValueError, match="a mesh mapping is axis name -> positive size"):
        verify(matmul, {"d": True})


def test_plan_checks_its_dims_and_reports_sizes_it_cannot_compute():
    with pytest.raises(ValueError, match=re.escape("plan: dims['a'] is -8; a size cannot be negative")):
        plan(f32[b"a/d"], {"d": 2}, {"a": -8})
    with pytest.raises(ValueError, match=re.escape("plan: dims gives 'hiden' (did you mean 'hidden'?)")):
        plan(f32[b"hidden/d"], {"d": 2}, {"hidden": 8, "hiden": 8})
    # One table of sizes serves every part of a model: a name unlike any used one is fine.
    assert plan(f32[b"hidden/d"], {"d": 2}, {"hidden": 8, "batch": 4}).rows[0].shape == (8,)
    with pytest.raises(TypeError, match=re.escape("plan: dims['lead'] must be a tuple of sizes, since '*lead' stands")):
        plan(f32[b"*lead a"], {"d": 2}, {"lead": 3, "a": 2})
    with pytest.raises(TypeError, match=re.escape("plan: large_replicated_bytes must be a number of bytes, got 'x'")):
        plan(f32[b"a"], {"d": 2}, {"a": 2}, large_replicated_bytes="x")
    # Sizes computed from valid dims that make no array are errors of the report, as an
    # indivisible dim is (the command exits 1 with them).
    report = plan(f32[b"a//b"], {"d": 2}, {"a": 8, "b": 0})
    assert not report.ok and report.errors == (
        "the annotation (f32[b'a//b']): dim 0 'a//b' has a division by zero with a=8, b=0",)
    report = plan(f32[b"a-b"], {"d": 2}, {"a": 1, "b": 2})
    assert report.errors == ("the annotation (f32[b'a-b']): dim 0 'a-b' is -1 with a=1, b=2; a size cannot be negative",)
    assert "-8 B" not in str(plan(f32[b"a/d"], {"d": 2}, {"a": 8}))


def test_report_classes_check_their_fields():
    with pytest.raises(ValueError, match=re.escape("Problem: kind must be one of ('check', 'jax', 'dims', 'setup', 'memory'), got 'x'")):
        Problem("x", "m")
    with pytest.raises(TypeError, match=re.escape("VerifyReport: problems must be a tuple of Problem")):
        VerifyReport("f", {"d": 2}, {}, ("x",))
    with pytest.raises(TypeError, match=re.escape("PlanReport: rows must be a tuple of PlanRow")):
        PlanReport({"d": 2}, (3,), (), ())


def test_verification_error_pickles_with_its_report():
    import copy
    import pickle

    with pytest.raises(VerificationError) as info:
        verify(matmul, MESH, dims={"batch": 100, "embed": 16, "hidden": 96}, raise_on_error=True)
    error = info.value
    for back in (pickle.loads(pickle.dumps(error)), copy.deepcopy(error)):
        assert type(back) is VerificationError and str(back) == str(error)
        assert back.report.problems == error.report.problems


@dataclasses.dataclass
class PlainBatch:  # not registered as a pytree
    x: f32[jax.Array, b"batch/d embed"]


def takes_a_plain_dataclass(b: PlainBatch) -> f32[b"batch/d embed"]:
    return b.x * 2


def test_a_plain_dataclass_argument_says_to_register_the_class():
    report = verify(takes_a_plain_dataclass, {"d": 4}, {"batch": 8, "embed": 4})
    assert not report.ok
    (problem,) = report.problems
    assert problem.kind == "setup"
    assert re.search(r'argument "b" of takes_a_plain_dataclass\(\) holds .*PlainBatch, a plain dataclass JAX does '
                     r"not know as a pytree, so jax.eval_shape cannot trace it: register the class "
                     r"\(shardtypes.pytree_dataclass", problem.message), problem.message
    assert "Error interpreting argument" not in str(report)


def test_the_cost_line_is_written_from_the_cost():
    """The report's cost line is made from the StepCost's figures (the bytes per group of mesh
    axes among them), not by editing the StepCost's own text."""
    from shardtypes.tools import Collective, Communication, StepCost, VerifyReport

    gather = Collective("all-gather", ("d",), 3 * 2**20, 2, "m.py:1 (f)")
    comm = Communication((gather, Collective("all-reduce", ("t",), 2**10)))
    cost = StepCost(comm, 2 * 10**9, {"float32": 2 * 10**9}, 5 * 2**20, (), 10**9)
    text = str(VerifyReport("f", {"d": 2, "t": 2}, {}, (), cost=cost))
    assert text.endswith("\n  cost: 6.0 MiB sent (over d 6.0 MiB, t 1.0 KiB), 2.0 GFLOP (1.0 GFLOP in matmuls), "
                         "5.0 MiB read and written per device per step; the most by all-gather over d: 3.0 MiB x 2 "
                         "at m.py:1 (f)")
    quiet = StepCost(Communication(), 512, {"float32": 512}, 2048, ("a while loop's body is counted once",), 512)
    assert str(VerifyReport("f", {"d": 2}, {}, (), cost=quiet)).endswith(
        "\n  cost: no collectives, at least 512 FLOP (512 FLOP in matmuls), at least 2.0 KiB read and written per "
        "device per step")


def test_plan_reads_an_unreduced_spec_by_its_partitions():
    mesh = AbstractMesh((4, 2), ("d", "t"), axis_types=(AxisType.Explicit,) * 2)
    x = jax.ShapeDtypeStruct((8, 6, 5), jnp.float32, sharding=NamedSharding(mesh, P("d", None, unreduced={"t"})))
    (row,) = plan({"w": x}, mesh).rows
    assert row.device_shape == (2, 6, 5) and row.dim_axes == (("d",), (), ()) and row.replicas == 2
    assert row.bytes_per_device == 2 * 6 * 5 * 4
