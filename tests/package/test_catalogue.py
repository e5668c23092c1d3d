"""A catalogue of bad inputs to every public entry point (every name in ``shardtypes.__all__``, the
``shardtypes.ops`` functions and the ``shardtypes`` command), each with the error class it must
raise and fragments of the message, which must be ours and name the argument.

docs/design.md, "Every public entry point validates its input": a wrong type or value gets a shardtypes
error (or TypeError/ValueError with our message) naming the argument; never an AttributeError,
KeyError, ZeroDivisionError, UnicodeDecodeError, RecursionError or another library's error about
our input. What a user sees of every error (its message, its class as tracebacks and pytest
print it) names no private class (``_ArrayError``, ``jaxlib._jax.ArrayImpl``, JAX's tracer
classes; issue 19). That our exceptions pickle and deep-copy is tested in
test_exceptions_pickle_and_copy.py; what the cases work on is in catalogue_kit.py.

A case found before its fix is kept with ``xfail=`` naming the fix it needs (a strict xfail:
when the fix lands it starts passing, and the strict marker says to drop the mark). None is
pending now.
"""

from __future__ import annotations

import dataclasses
import re
import traceback
import typing
import warnings
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import typeguard
from jax.sharding import AbstractMesh, AxisType, NamedSharding, PartitionSpec as P

import shardtypes
from shardtypes import (
    ActivationEstimate,
    Array,
    ArrayError,
    AxisRules,
    AxisRulesError,
    Collective,
    Communication,
    DataLayout,
    DimSpec,
    FieldError,
    PlanReport,
    Problem,
    PyTree,
    Scope,
    ShapeSpec,
    ShapeSpecError,
    ShardingProblem,
    ShardtypesWarning,
    Stacked,
    StepCost,
    StepTime,
    TypeCheckError,
    VerifyReport,
    auto_partition_spec,
    auto_partition_specs,
    axis_rules,
    check,
    config,
    convert_specs,
    current_rules,
    data_layout,
    default_mesh,
    dims,
    eformer_rules,
    explain,
    f32,
    field,
    floating,
    hybrid_mesh,
    i32,
    is_fully_sharded,
    make_global_array,
    make_partition_specs,
    make_shape_dtype_structs,
    make_shardings,
    nnx,
    number,
    ops,
    partition_specs_for_budget,
    plan,
    pytree_dataclass,
    register_with_typeguard,
    scope,
    shard,
    t5x_rules,
    typechecked,
    typed_shard_map,
    validate_shardings,
    verify,
)

from catalogue_kit import (
    ABSTRACT,
    ANN,
    HERE,
    MESH,
    MESH2,
    RULES,
    CLIFailed,
    Layer,
    X,
    cli,
    deep_arrays,
    deep_list,
    define_pytree,
    enter,
    gather_kernel_plain,
    gather_kernel_vma_off,
    in_kernel,
    in_shard_map,
    init_false_field,
    nnx_block,
    recursive_dict,
    recursive_list,
    step,
    with_n,
)

# ---------------------------------------------------------------------------------------------
# The table: (entry point, case id, call, expected class, message fragments, xfail reason).


class Case(NamedTuple):
    entry: str
    id: str
    call: Callable[[], Any]
    expected: type | tuple[type, ...]
    fragments: tuple[str, ...]
    xfail: str | None = None


CASES: list[Case] = []


def case(entry: str, id: str, call: Callable[[], Any], expected: Any, *fragments: str,
         xfail: str | None = None) -> None:
    CASES.append(Case(entry, id, call, expected, fragments, xfail))


# --- the shape language: ShapeSpec, DimSpec, ShapeSpecError --------------------------------

case("ShapeSpec", "parse-None", lambda: ShapeSpec.parse(None), ShapeSpecError, "a shape string must be str or bytes, not NoneType")
case("ShapeSpec", "parse-int", lambda: ShapeSpec.parse(3), ShapeSpecError, "a shape string must be str or bytes, not int")
case("ShapeSpec", "parse-list", lambda: ShapeSpec.parse(["a"]), ShapeSpecError, "not list")
case("ShapeSpec", "parse-bad-utf8", lambda: ShapeSpec.parse(b"\xff"), ShapeSpecError, "not valid UTF-8")
case("ShapeSpec", "empty-axis", lambda: ShapeSpec.parse("a/"), ShapeSpecError, "empty mesh axis name")
case("ShapeSpec", "broadcast-underscore", lambda: ShapeSpec.parse("#_"), ShapeSpecError, "'#_'", "'_'")
case("ShapeSpec", "variadic-underscore", lambda: ShapeSpec.parse("*_"), ShapeSpecError, "'*_'", "'_'")
case("ShapeSpec", "two-variadics", lambda: ShapeSpec.parse("... *b"), ShapeSpecError, "second variadic dim")
case("ShapeSpec", "axis-twice", lambda: ShapeSpec.parse("a/x b/x"), ShapeSpecError, "mesh axis 'x' shards both")
case("ShapeSpec", "axis-twice-in-dim", lambda: ShapeSpec.parse("a/x/x"), ShapeSpecError, "names a mesh axis twice")
case("ShapeSpec", "dangling-operator", lambda: ShapeSpec.parse("a+"), ShapeSpecError, "ends where an operand was expected")
case("ShapeSpec", "unbalanced", lambda: ShapeSpec.parse("(a"), ShapeSpecError, "unbalanced parentheses")
case("ShapeSpec", "bad-character", lambda: ShapeSpec.parse("a$"), ShapeSpecError, "unexpected character '$'")
case("ShapeSpec", "axis-not-identifier", lambda: ShapeSpec.parse("a/1x"), ShapeSpecError, "mesh axis '1x' is not an identifier")
case("ShapeSpec", "no-size", lambda: ShapeSpec.parse("/d"), ShapeSpecError, "has no size before '/'")
case("ShapeSpec", "sharded-ellipsis", lambda: ShapeSpec.parse(".../d"), ShapeSpecError, "cannot be sharded")
case("ShapeSpec", "underscore-in-expr", lambda: ShapeSpec.parse("a+_"), ShapeSpecError, "'_' (any size) cannot appear")
case("ShapeSpec", "nul-character", lambda: ShapeSpec.parse("a\x00"), ShapeSpecError, "unexpected character")
case("ShapeSpec", "deep-parentheses", lambda: ShapeSpec.parse("(" * 40 + "a" + ")" * 40), ShapeSpecError, "nested more than 32 parentheses deep")
case("ShapeSpec", "huge-parentheses", lambda: ShapeSpec.parse("(" * 5000 + "a" + ")" * 5000), ShapeSpecError, "too long", "(10001 characters)")
case("ShapeSpec", "surrogate", lambda: ShapeSpec.parse("a\udcff"), ShapeSpecError, "unexpected character")
case("ShapeSpec", "long-chain", lambda: ShapeSpec.parse("+".join(["a"] * 20000)), ShapeSpecError, "too long")
case("ShapeSpec", "partition-spec-ndim-str", lambda: ShapeSpec.parse("a/d").partition_spec(ndim="x"), TypeError, "ndim must be an int")
case("ShapeSpec", "partition-spec-ndim-negative", lambda: ShapeSpec.parse("... a/d").partition_spec(ndim=-1), ValueError, "ndim", "-1")
case("ShapeSpec", "partition-spec-ndim-bool", lambda: ShapeSpec.parse("a/d").partition_spec(ndim=True), TypeError, "ndim must be an int")
case("ShapeSpec", "partition-spec-rank", lambda: ShapeSpec.parse("a/d b").partition_spec(ndim=3), ShapeSpecError, "rank 3 does not match the 2 dims")
case("DimSpec", "parse-whitespace", lambda: DimSpec.parse("a b"), ShapeSpecError, "cannot be empty or contain whitespace")
case("DimSpec", "parse-empty", lambda: DimSpec.parse(""), ShapeSpecError, "cannot be empty")
case("DimSpec", "parse-None", lambda: DimSpec.parse(None), ShapeSpecError, "a dim must be str or bytes, not NoneType")
case("DimSpec", "parse-bad-utf8", lambda: DimSpec.parse(b"\xfe"), ShapeSpecError, "not valid UTF-8")
case("DimSpec", "parse-broadcast-underscore", lambda: DimSpec.parse("#_"), ShapeSpecError, "'_'")
case("DimSpec", "parse-deep-parentheses", lambda: DimSpec.parse("(" * 40 + "a" + ")" * 40), ShapeSpecError, "nested more than 32")
case("DimSpec", "parse-long-chain", lambda: DimSpec.parse("*".join(["a"] * 5000)), ShapeSpecError, "too long")

# --- annotation classes: every dtype class and category ---------------------------------------

DTYPE_NAMES = [n for n in shardtypes.__all__ if shardtypes.model.is_dtype_class(getattr(shardtypes, n))]
for _name in DTYPE_NAMES:
    _cls = getattr(shardtypes, _name)
    case(_name, f"{_name}[None]", lambda c=_cls: c[None], ShapeSpecError, "a shape string must be str or bytes, not NoneType")
    case(_name, f"{_name}[int-array-type]", lambda c=_cls: c[3, b"a"], TypeError, "array_type must be a class")
case("f32", "bad-utf8", lambda: f32[b"\xff\xfe"], ShapeSpecError, "not valid UTF-8")
case("f32", "two-strings", lambda: f32["a", "b"], TypeError, "takes a shape string")
case("f32", "three-args", lambda: f32[jax.Array, "a", "b"], TypeError, "takes a shape string")
case("f32", "empty-tuple", lambda: f32[()], TypeError, "takes a shape string")
case("f32", "array-type-and-None", lambda: f32[jax.Array, None], ShapeSpecError, "not NoneType")
case("f32", "subscript-twice", lambda: f32[b"a"][b"b"], TypeError, "already has a shape")

# --- host-or-device array classes and is_instance ------------------------------------------------
case("f32", "union-with-int", lambda: f32[int | np.ndarray, b"b e"], TypeError, "f32[int | numpy.ndarray, b'b e']", "must be a class of arrays", "got int")
case("f32", "union-with-None", lambda: f32[jax.Array | None, b"b e"], TypeError, "f32[jax.Array | None, b'b e']", "None is not an array class")
case("HostOrDevice", "union-with-str", lambda: f32[shardtypes.HostOrDevice | str, b"b e"], TypeError, "f32[jax.Array | numpy.ndarray | str, b'b e']", "got str")
case("is_instance", "not-an-annotation", lambda: shardtypes.is_instance(3, int), TypeError, "is_instance: annotation must be an array annotation", "got <class 'int'>")
case("is_instance", "bare-dtype-class", lambda: shardtypes.is_instance(3, f32), TypeError, "is_instance: annotation must be an array annotation", "got <class 'shardtypes.f32'>")
case("is_instance", "array-type-str", lambda: shardtypes.is_instance(3, f32[b"a"], "x"), TypeError, "array_type must be a class or a tuple of classes, got 'x'")
case("is_instance", "wrong-class", lambda: shardtypes.is_instance(np.ones(2), f32[np.ndarray, b"a"]), TypeError, "f32[numpy.ndarray, b'a'] wants a numpy.ndarray", "is_instance(value, annotation, numpy.ndarray)")
case("is_instance", "union-needs-both", lambda: shardtypes.is_instance(np.ones(2), f32[jax.Array | np.ndarray, b"a"], np.ndarray), TypeError, "wants a jax.Array | numpy.ndarray", "(jax.Array, numpy.ndarray)")
case("f32", "unhashable-list", lambda: f32[["a"]], ShapeSpecError, "not list")
case("f32", "bad-dim", lambda: f32[b"a/"], ShapeSpecError, "empty mesh axis name")
case("number", "number-subscript", lambda: number[b"a"], TypeError, "number is the base class")
case("floating", "category-bad-spec", lambda: floating[b"a b/x c/x"], ShapeSpecError, "mesh axis 'x' shards both")

# --- trees: Array, Stacked, pytree_dataclass, field -------------------------------------------

case("Array", "axes-None", lambda: Array[None, Layer], TypeError, "axes must be a str or bytes")
case("Array", "axes-int", lambda: Array[3, Layer], TypeError, "axes must be a str or bytes")
case("Array", "one-argument", lambda: Array["layers"], TypeError, "write Array[axes, cls]")
case("Array", "three-arguments", lambda: Array["layers", Layer, Layer], TypeError, "write Array[axes, cls]")
case("Array", "stack-int", lambda: Array["layers", int], TypeError, "cannot stack")
case("Array", "stack-None", lambda: Array["layers", None], TypeError, "cannot stack")
case("Array", "stack-str", lambda: Array["layers", "Layer"], TypeError, "cannot stack")
case("Array", "stack-dtype-class", lambda: Array["layers", f32], TypeError, "cannot stack")
case("Array", "expression-axis", lambda: Array["a+1", Layer], TypeError, "'a+1'", "names or integers")
case("Array", "broadcast-axis", lambda: Array["#a", Layer], TypeError, "'#a'", "names or integers")
case("Array", "any-axis", lambda: Array["_", Layer], TypeError, "'_'", "names or integers")
case("Array", "ellipsis-axis", lambda: Array["...", Layer], TypeError, "cannot be variadic")
case("Array", "empty-axes", lambda: Array["", Layer], TypeError, "at least one dim")
case("Array", "bad-utf8", lambda: Array[b"\xff", Layer], ShapeSpecError, "not valid UTF-8")
case("Array", "bad-dim", lambda: Array["layers/", Layer], ShapeSpecError, "empty mesh axis name")
case("Stacked", "one-argument", lambda: Stacked[Layer], TypeError, "write Stacked[cls, axes]")
case("Stacked", "axes-first", lambda: Stacked["layers", Layer], TypeError, "takes the class first")
case("Stacked", "axes-None", lambda: Stacked[Layer, None], TypeError, "axes must be a str or bytes")
case("Stacked", "bad-utf8", lambda: Stacked[Layer, b"\xff"], ShapeSpecError, "not valid UTF-8")
case("Stacked", "broadcast-axis", lambda: Stacked[Layer, "#a"], TypeError, "names or integers")
case("Stacked", "stack-int", lambda: Stacked[int, "layers"], TypeError, "cannot stack")
case("pytree_dataclass", "int", lambda: pytree_dataclass(3), TypeError, "pytree_dataclass expects a class")
case("pytree_dataclass", "str", lambda: pytree_dataclass("Layer"), TypeError, "pytree_dataclass expects a class")
case("pytree_dataclass", "instance", lambda: pytree_dataclass(object()), TypeError, "pytree_dataclass expects a class")
case("pytree_dataclass", "unknown-option", lambda: define_pytree(bogus=1), TypeError, "'bogus'", "dataclass options")
case("pytree_dataclass", "options-on-a-dataclass", lambda: pytree_dataclass(frozen=True)(dataclasses.dataclass(type("D", (), {}))), TypeError, "already a dataclass")
case("pytree_dataclass", "init-false-field", init_false_field, TypeError, "init=False")
case("field", "positional", lambda: field(3), TypeError, "field()")

# --- UNCONSTRAINED: 'embed/?' and the rule target (XLA decides a dim) ----------------------------


def _mesh_of(kind: AxisType) -> jax.sharding.Mesh:
    return jax.make_mesh((4, 2), ("d", "t"), axis_types=(kind,) * 2)


def _unconstrained_kernel() -> Any:
    @typed_shard_map
    def kernel(x: f32[b"batch/d embed/?"]) -> f32[b"batch/d embed"]:
        return x

    mesh = _mesh_of(AxisType.Explicit)
    with jax.set_mesh(mesh):
        return kernel(jax.device_put(jnp.zeros((8, 4)), NamedSharding(mesh, P("d"))))


def _unconstrained_local_block() -> Any:
    @typechecked
    def helper(y: f32[b"batch/d embed/?"]) -> f32[b"batch/d embed/?"]:
        return y

    @typed_shard_map
    def kernel(x: f32[b"batch/d embed/t"]) -> f32[b"batch/d embed/t"]:
        return helper(x)

    mesh = _mesh_of(AxisType.Explicit)
    with jax.set_mesh(mesh):
        return kernel(jax.device_put(jnp.zeros((8, 4)), NamedSharding(mesh, P("d", "t"))))


_FREE = f32[b"batch/d embed/?"]
_FREE_RULES = AxisRules([("batch", "d"), ("act", shardtypes.UNCONSTRAINED), ("embed", "t")])
case("UNCONSTRAINED", "beside-an-axis", lambda: ShapeSpec.parse("e/?/d"), ShapeSpecError, "'?' (XLA decides the dim's layout) stands alone")
case("UNCONSTRAINED", "variadic", lambda: ShapeSpec.parse(".../?"), ShapeSpecError, "variadic dim '.../?' cannot be unconstrained")
case("UNCONSTRAINED", "make_shardings", lambda: make_shardings(_FREE, _mesh_of(AxisType.Auto)), ValueError, "make_shardings: the annotation", "dim 1 'embed/?' is UNCONSTRAINED", "cannot be placed on devices")
case("UNCONSTRAINED", "make_shape_dtype_structs", lambda: make_shape_dtype_structs(_FREE, {"batch": 8, "embed": 4}, _mesh_of(AxisType.Auto)), ValueError, "make_shape_dtype_structs: the annotation", "dim 1 'embed/?' is UNCONSTRAINED")
case("UNCONSTRAINED", "shard-eagerly", lambda: shard(jnp.zeros((8, 4)), _FREE, _mesh_of(AxisType.Auto)), ValueError, "shard: the value", "dim 1 is UNCONSTRAINED", "eagerly shard puts the value on devices")
case("UNCONSTRAINED", "shard-explicit-mesh", lambda: shard(jnp.zeros((8, 4)), _FREE, _mesh_of(AxisType.Explicit)), ValueError, "dim 1 'embed/?' is UNCONSTRAINED", "the mesh's axes are all Explicit ('d', 't')")
case("UNCONSTRAINED", "typed_shard_map", _unconstrained_kernel, TypeError, 'typed_shard_map: argument "x" of ', 'kernel: dim 1 is UNCONSTRAINED', 'shard_map splits every dim')
case("UNCONSTRAINED", "beside-a-placed-name", lambda: _with_rules(_FREE_RULES, lambda: make_partition_specs(f32[b"b/batch e/embed/act"])), AxisRulesError, "logical axis 'act' is UNCONSTRAINED (XLA decides) but the dim's other names place it on ('t',)")
case("UNCONSTRAINED", "local-block", _unconstrained_local_block, TypeCheckError, 'argument "y"', "helper() is not f32[b'batch/d embed/?']", "a local block inside shard_map, where an UNCONSTRAINED ('/?') dim has no meaning (dim 1)")
case("UNCONSTRAINED", "merge-with-None", lambda: _FREE_RULES.merge(AxisRules([("act", None)])), AxisRulesError, "act: UNCONSTRAINED vs None")
case("UNCONSTRAINED", "rule-target-in-a-tuple", lambda: AxisRules([("act", ("d", shardtypes.UNCONSTRAINED))]), TypeError, "or shardtypes.UNCONSTRAINED for 'XLA decides'")


def _with_rules(rules: AxisRules, body: Callable[[], Any]) -> Any:
    with axis_rules(rules):
        return body()


# --- logical axis rules -------------------------------------------------------------------------

case("AxisRules", "rules-int", lambda: AxisRules(3), TypeError, "rules are a sequence of (logical name, mesh axes) pairs")
case("AxisRules", "rules-str", lambda: AxisRules("batch"), TypeError, "rules are a sequence")
case("AxisRules", "rules-None", lambda: AxisRules(None), TypeError, "rules are a sequence")
case("AxisRules", "rule-one-element", lambda: AxisRules([("a",)]), TypeError, "each rule is a (logical name, mesh axes) pair")
case("AxisRules", "rule-not-a-pair", lambda: AxisRules([3]), TypeError, "each rule is a (logical name, mesh axes) pair")
case("AxisRules", "rule-name-int", lambda: AxisRules([(3, "x")]), TypeError, "a logical axis name must be an identifier")
case("AxisRules", "rule-name-empty", lambda: AxisRules([("", "x")]), TypeError, "a logical axis name must be an identifier")
case("AxisRules", "rule-target-int", lambda: AxisRules([("a", 3)]), TypeError, "rule for 'a'", "the target must be")
case("AxisRules", "rule-target-list-with-None", lambda: AxisRules([("a", ["x", None])]), TypeError,
     "rule for 'a'", "the target must be", "['x', None]")
case("AxisRules", "rule-target-list-repeated", lambda: AxisRules([("a", ["x", "x"])]), TypeError,
     "rule for 'a'", "mesh axis named twice in ['x', 'x']")
case("AxisRules", "logical-axes-on-int", lambda: AxisRules([("a", "x")]).logical_axes_on(3), TypeError,
     "AxisRules.logical_axes_on: mesh_axis must be a mesh axis name", "got 3")
case("AxisRules", "logical-axes-on-unknown-mode", lambda: AxisRules([("a", "x")], name="r").logical_axes_on("x", "serve"),
     AxisRulesError, "AxisRules 'r' has no mode 'serve'")
case("AxisRules", "rule-target-not-identifier", lambda: AxisRules([("a", "x y")]), TypeError, "the target must be")
case("AxisRules", "rule-target-twice", lambda: AxisRules([("a", ("x", "x"))]), TypeError, "mesh axis named twice")
case("AxisRules", "modes-list", lambda: AxisRules([], modes=[("decode", [])]), TypeError, "modes must be a mapping")
case("AxisRules", "modes-str", lambda: AxisRules([], modes="decode"), TypeError, "modes must be a mapping")
case("AxisRules", "mode-rules-int", lambda: AxisRules([], modes={"decode": 3}), TypeError, "mode 'decode'", "rules are a sequence")
case("AxisRules", "mode-name-int", lambda: AxisRules([], modes={3: []}), TypeError, "modes", "mode name must be a non-empty str")
case("AxisRules", "mode-name-empty", lambda: AxisRules([], modes={"": []}), TypeError, "mode name must be a non-empty str")
case("AxisRules", "name-int", lambda: AxisRules([], name=3), TypeError, "name must be a str")
case("AxisRules", "name-empty", lambda: AxisRules([], name=""), ValueError, "name must be a non-empty str")
case("AxisRules", "auto-mode-unknown-mode", lambda: AxisRules([], auto_mode=("q", 1, "decode")), TypeError, "auto_mode")
case("AxisRules", "auto-mode-list", lambda: AxisRules([], modes={"decode": []}, auto_mode=["q", 1, "decode"]), TypeError, "auto_mode")
case("AxisRules", "auto-mode-negative", lambda: AxisRules([], modes={"decode": []}, auto_mode=("q", -1, "decode")), ValueError, "auto_mode", "-1")
case("AxisRules", "auto-mode-bool", lambda: AxisRules([], modes={"decode": []}, auto_mode=("q", True, "decode")), TypeError, "auto_mode")
case("AxisRules", "on-missing", lambda: AxisRules([], on_missing="ignore"), ValueError, "on_missing must be one of")
case("AxisRules", "on-unknown-axis", lambda: AxisRules([], on_unknown_axis=None), ValueError, "on_unknown_axis must be one of")
case("AxisRules", "on-conflict", lambda: AxisRules([], on_conflict=3), ValueError, "on_conflict must be one of")
case("AxisRules", "on-indivisible", lambda: AxisRules([], on_indivisible=[]), ValueError, "on_indivisible must be one of")
case("AxisRules", "merge-int", lambda: RULES.merge(3), TypeError, "AxisRules.merge expects AxisRules")
case("AxisRules", "add-list", lambda: RULES + [("a", "x")], TypeError, "AxisRules.merge expects AxisRules")
case("AxisRules", "merge-conflict", lambda: RULES.merge(AxisRules([("batch", "t")])), AxisRulesError, "cannot merge", "batch")
case("AxisRules", "table-unknown-mode", lambda: RULES.table("prefill"), AxisRulesError, "has no mode 'prefill'")
case("AxisRules", "ordered-unknown-mode", lambda: RULES.ordered("prefill"), AxisRulesError, "has no mode 'prefill'")
case("axis_rules", "int", lambda: enter(axis_rules(3)), TypeError, "rules are a sequence")
case("axis_rules", "str", lambda: enter(axis_rules("batch")), TypeError, "rules are a sequence")
case("axis_rules", "bad-rule", lambda: enter(axis_rules([("a", 3)])), TypeError, "the target must be")
case("axis_rules", "unknown-mode", lambda: enter(axis_rules(RULES, mode="prefill")), AxisRulesError, "has no mode 'prefill'")
case("axis_rules", "mode-int", lambda: enter(axis_rules(RULES, mode=3)), TypeError, "mode must be a str")
case("axis_rules", "mode-without-rules", lambda: enter(axis_rules(None, mode="decode")), TypeError, "a mode needs rules")
case("current_rules", "argument", lambda: current_rules(3), TypeError, "current_rules()")
case("t5x_rules", "shape-str", lambda: t5x_rules("x"), TypeError, "activation_partitioning_dims must be the int 1 or 2")
case("t5x_rules", "shape-3", lambda: t5x_rules(3, 1), ValueError, "activation_partitioning_dims and parameter_partitioning_dims are 1 or 2")
case("t5x_rules", "shape-bool", lambda: t5x_rules(True, 1), TypeError, "activation_partitioning_dims")
case("t5x_rules", "additional-int", lambda: t5x_rules(additional_rules=3), TypeError, "additional_rules")
case("t5x_rules", "additional-bad-rule", lambda: t5x_rules(additional_rules=[("a", 3)]), TypeError, "the target must be")
case("eformer_rules", "axis-int", lambda: eformer_rules(dp=3), TypeError, "eformer_rules: dp must be a mesh axis name")
case("eformer_rules", "axis-empty", lambda: eformer_rules(tp=""), TypeError, "eformer_rules: tp must be a mesh axis name")
case("eformer_rules", "axes-repeat", lambda: eformer_rules(dp="x", fsdp="x"), ValueError, "eformer_rules", "'x'", "twice")
case("explain", "mesh-str", lambda: explain(ANN, "x"), TypeError, "explain: mesh must be a Mesh")
case("explain", "mesh-int", lambda: explain(ANN, 3), TypeError, "explain: mesh must be a Mesh")
case("explain", "annotation-None", lambda: explain(None), TypeError, "has no layout")
case("explain", "dims-list", lambda: explain(ANN, dims=[1]), TypeError, "explain: dims must be a mapping")
case("explain", "dims-str-size", lambda: explain(ANN, dims={"batch": "x"}), TypeError, "dims['batch']")
case("explain", "dims-negative", lambda: explain(ANN, dims={"batch": -8}), ValueError, "dims['batch']", "-8")

# --- derivation: make_partition_specs, make_shardings, make_shape_dtype_structs, shard -------

case("make_partition_specs", "None", lambda: make_partition_specs(None), TypeError, "is None, which has no layout")
case("make_partition_specs", "int", lambda: make_partition_specs(3), TypeError, "which has no layout")
case("make_partition_specs", "str", lambda: make_partition_specs("f32[b'a']"), TypeError, "is the string")
case("make_partition_specs", "bytes", lambda: make_partition_specs(b"a b"), TypeError, "has no layout")
case("make_partition_specs", "dtype-class", lambda: make_partition_specs(f32), TypeError, "has no layout")
case("make_partition_specs", "list-leaf", lambda: make_partition_specs([ANN, 3]), TypeError, "[1] is 3")
case("make_partition_specs", "dict-leaf", lambda: make_partition_specs({"a": None}), TypeError, "['a'] is None")
case("make_partition_specs", "union", lambda: make_partition_specs(typing.Union[ANN, f32[b"a"]]), TypeError, "a Union of several types")
case("make_partition_specs", "variadic-tuple", lambda: make_partition_specs(tuple[ANN, ...]), TypeError, "has no fixed length")
case("make_partition_specs", "deep-nesting", lambda: make_partition_specs(deep_list(5000)), ValueError, "nested more than")
case("make_partition_specs", "recursive-list", lambda: make_partition_specs(recursive_list()), ValueError, "contains itself")
case("make_partition_specs", "recursive-dict", lambda: make_partition_specs(recursive_dict()), ValueError, "contains itself")
case("make_partition_specs", "variadic-before-sharded", lambda: make_partition_specs(f32[b"... a/d"]), ValueError, "the annotation (f32[b'... a/d'])", "partition_spec(ndim=...)")
case("PyTree", "not-an-annotation", lambda: PyTree[3], TypeError, "PyTree[3]", "must be a shardtypes annotation")
case("PyTree", "dtype-without-shape", lambda: PyTree[f32], TypeError, "PyTree[f32]", "f32 has no shape")
case("PyTree", "structure-argument", lambda: PyTree[f32[b"a"], "T"], TypeError, "structure argument", "not supported")
case("PyTree", "container-leaf", lambda: PyTree[tuple[f32[b"a"]]], TypeError, "never leaves")
case("PyTree", "instantiated", lambda: PyTree[f32[b"a"]](), TypeError, "not a class to instantiate")
case("PyTree", "leaves-disagree", lambda: typeguard.check_type({"x": np.zeros(2, np.float32), "y": np.zeros(3, np.float32)}, PyTree[f32[b"n"]]), TypeCheckError, "['y']", "bound to 2 by ['x']")
case("make_partition_specs", "pytree-alone", lambda: make_partition_specs(PyTree[f32[b"a/d"]]), TypeError, "PyTree[f32[b'a/d']]", "like=")
case("make_partition_specs", "pytree-like-non-array", lambda: make_partition_specs({"a": 3}, like=PyTree[f32[b"a/d"]]), TypeError, "['a'] is int, not an array")
case("make_shardings", "mesh-str", lambda: make_shardings(ANN, "x"), TypeError, "make_shardings: mesh must be a Mesh")
case("make_shardings", "mesh-int", lambda: make_shardings(ANN, 3), TypeError, "make_shardings: mesh must be a Mesh")
case("make_shardings", "mesh-dict", lambda: make_shardings(ANN, {"d": 4}), TypeError, "make_shardings: mesh must be a Mesh")
case("make_shardings", "no-mesh", lambda: make_shardings(ANN), ValueError, "make_shardings: no mesh")
case("make_shardings", "unknown-axis", lambda: make_shardings(f32[b"a/zz"], MESH()), ValueError, "mesh axis 'zz', which the mesh does not have")
case("make_shardings", "indivisible", lambda: make_shardings(f32[b"3/d"], MESH()), ValueError, "has size 3, which does not divide")
case("make_shardings", "annotation-None", lambda: make_shardings(None, MESH()), TypeError, "has no layout")
case("make_shardings", "deep-nesting", lambda: make_shardings(deep_list(5000), MESH()), ValueError, "nested more than")
case("make_shape_dtype_structs", "dims-list", lambda: make_shape_dtype_structs(ANN, [1, 2]), TypeError, "dims must be a mapping")
case("make_shape_dtype_structs", "dims-None", lambda: make_shape_dtype_structs(ANN, None), TypeError, "dims must be a mapping")
case("make_shape_dtype_structs", "size-negative", lambda: make_shape_dtype_structs(ANN, {"batch": -8, "embed": 4}), ValueError, "dims['batch']", "-8")
case("make_shape_dtype_structs", "size-str", lambda: make_shape_dtype_structs(ANN, {"batch": "8", "embed": 4}), TypeError, "dims['batch']", "'8'")
case("make_shape_dtype_structs", "size-float", lambda: make_shape_dtype_structs(ANN, {"batch": 8.0, "embed": 4}), TypeError, "dims['batch']")
case("make_shape_dtype_structs", "size-bool", lambda: make_shape_dtype_structs(ANN, {"batch": True, "embed": 4}), TypeError, "dims['batch']")
case("make_shape_dtype_structs", "size-None", lambda: make_shape_dtype_structs(ANN, {"batch": None, "embed": 4}), TypeError, "dims['batch']")
case("make_shape_dtype_structs", "key-int", lambda: make_shape_dtype_structs(ANN, {3: 8, "embed": 4}), TypeError, "dims", "3")
case("make_shape_dtype_structs", "unused-key-typo", lambda: make_shape_dtype_structs(Layer, {"embed": 8, "hidden": 8, "hiden": 8}, MESH()), ValueError, "'hiden'", "did you mean 'hidden'")
case("make_shape_dtype_structs", "divide-by-zero", lambda: make_shape_dtype_structs(f32[b"a//b"], {"a": 8, "b": 0}), ValueError, "'a//b'", "division by zero")
case("make_shape_dtype_structs", "negative-expression", lambda: make_shape_dtype_structs(f32[b"a-b"], {"a": 1, "b": 2}), ValueError, "'a-b'", "-1")
case("make_shape_dtype_structs", "variadic-not-tuple", lambda: make_shape_dtype_structs(f32[b"*lead a"], {"lead": 3, "a": 2}), (TypeError, ValueError), "dims['lead']", "tuple")
case("make_shape_dtype_structs", "variadic-negative", lambda: make_shape_dtype_structs(f32[b"*lead a"], {"lead": (2, -1), "a": 2}), ValueError, "dims['lead']", "-1")
case("make_shape_dtype_structs", "tuple-for-plain-name", lambda: make_shape_dtype_structs(ANN, {"batch": (2, 4), "embed": 4}), TypeError, "dims['batch']", "'*batch'")
case("make_shape_dtype_structs", "missing-size", lambda: make_shape_dtype_structs(ANN, {"batch": 8}), ValueError, "needs the size of 'embed'")
case("make_shape_dtype_structs", "ellipsis", lambda: make_shape_dtype_structs(f32[b"... a"], {"a": 8}), ValueError, "is '...', which has no shape")
case("make_shape_dtype_structs", "any-size", lambda: make_shape_dtype_structs(f32[b"_"], {}), ValueError, "'_' (any size)")
case("make_shape_dtype_structs", "category", lambda: make_shape_dtype_structs(floating[b"a"], {"a": 8}), ValueError, "category of dtypes")
case("make_shape_dtype_structs", "no-dims-annotation", lambda: make_shape_dtype_structs(ANN, mesh=MESH()), TypeError, "dims must be a mapping", "for an annotation tree")
case("make_shape_dtype_structs", "values-indivisible", lambda: make_shape_dtype_structs(Layer(jax.ShapeDtypeStruct((6, 8), jnp.float32), jax.ShapeDtypeStruct((8, 6), jnp.float32)), mesh=MESH()), ValueError, "Layer.w_up is float32[6, 8]", "cannot be split")
case("make_shape_dtype_structs", "mesh-str", lambda: make_shape_dtype_structs(ANN, {"batch": 8, "embed": 4}, "x"), TypeError, "make_shape_dtype_structs: mesh must be a Mesh")
case("make_shape_dtype_structs", "indivisible", lambda: make_shape_dtype_structs(ANN, {"batch": 6, "embed": 4}, MESH()), ValueError, "has size 6, which does not divide")
case("shard", "value-None", lambda: shard(None, ANN, MESH()), TypeError, "shard: value", "None")
case("shard", "value-str", lambda: shard("abc", ANN, MESH()), TypeError, "shard: value", "str")
case("shard", "value-leaf-None", lambda: shard({"a": None}, {"a": ANN}, MESH()), TypeError, "shard: value['a']", "None")
case("shard", "deep-value", lambda: shard(deep_arrays(5000), ANN, MESH()), ValueError, "shard: value is nested too deeply")
case("shard", "recursive-value", lambda: shard(recursive_list(), ANN, MESH()), ValueError, "shard: value", "contains itself")
case("shard", "mesh-str", lambda: shard(X(), ANN, "x"), TypeError, "shard: mesh must be a Mesh")
case("shard", "annotation-None", lambda: shard(X(), None, MESH()), TypeError, "has no layout")
case("shard", "tree-mismatch", lambda: shard({"a": X()}, ANN, MESH()), ValueError, "do not match the annotation's")
case("shard", "indivisible", lambda: shard(jnp.zeros((6, 4)), ANN, MESH()), ValueError, "dim 0 has size 6, which does not divide")
case("shard", "rank", lambda: shard(jnp.zeros((8,)), ANN, MESH()), ValueError, "shard: value", "rank 1", "2 dims")
case("shard", "no-mesh", lambda: shard(X(), ANN), ValueError, "shard: no mesh")
case("is_fully_sharded", "spec-None", lambda: is_fully_sharded(None, MESH()), TypeError, "is_fully_sharded: spec must be a PartitionSpec")
case("is_fully_sharded", "spec-str", lambda: is_fully_sharded("d", MESH()), TypeError, "is_fully_sharded: spec must be a PartitionSpec")
case("is_fully_sharded", "spec-tuple", lambda: is_fully_sharded(("d", "t"), MESH()), TypeError, "is_fully_sharded: spec must be a PartitionSpec")
case("is_fully_sharded", "unknown-axis", lambda: is_fully_sharded(P("x"), MESH()), ValueError, "mesh axis 'x'", "not in the mesh")
case("is_fully_sharded", "mesh-str", lambda: is_fully_sharded(P("d"), "x"), TypeError, "is_fully_sharded: mesh must be a Mesh")
case("is_fully_sharded", "no-mesh", lambda: is_fully_sharded(P("d")), ValueError, "is_fully_sharded: no mesh")

# --- automatic specs -----------------------------------------------------------------------------

case("auto_partition_spec", "x-None", lambda: auto_partition_spec(None, MESH()), TypeError, "auto_partition_spec: the array is NoneType")
case("auto_partition_spec", "x-int", lambda: auto_partition_spec(3, MESH()), TypeError, "not an array")
case("auto_partition_spec", "x-class", lambda: auto_partition_spec(np.ndarray, MESH()), TypeError, "not an array")
case("auto_partition_spec", "mesh-str", lambda: auto_partition_spec(X(), "x"), TypeError, "auto_partition_spec: mesh must be a Mesh")
case("auto_partition_spec", "mesh-dict", lambda: auto_partition_spec(X(), {"d": 4}), TypeError, "auto_partition_spec: mesh must be a Mesh")
case("auto_partition_spec", "no-mesh", lambda: auto_partition_spec(X()), ValueError, "auto_partition_spec: no mesh")
case("auto_partition_spec", "names-str", lambda: auto_partition_spec(X(), MESH(), names="d"), TypeError, "names must be a list")
case("auto_partition_spec", "names-unknown", lambda: auto_partition_spec(X(), MESH(), names=["zz"]), ValueError, "names has 'zz'")
case("auto_partition_spec", "names-int", lambda: auto_partition_spec(X(), MESH(), names=[3]), TypeError, "each entry of names")
case("auto_partition_spec", "names-repeat", lambda: auto_partition_spec(X(), MESH(), names=[("d", "d")]), ValueError, "repeats a mesh axis")
case("auto_partition_spec", "names-empty-tuple", lambda: auto_partition_spec(X(), MESH(), names=[()]), TypeError, "each entry of names")
case("auto_partition_spec", "min-size-str", lambda: auto_partition_spec(X(), MESH(), min_sharding_size="x"), TypeError, "min_sharding_size must be")
case("auto_partition_spec", "min-size-negative", lambda: auto_partition_spec(X(), MESH(), min_sharding_size=-1), ValueError, "min_sharding_size", "-1")
case("auto_partition_spec", "reverse-str", lambda: auto_partition_spec(X(), MESH(), reverse="yes"), TypeError, "reverse must be True or False")
case("auto_partition_specs", "leaf-int", lambda: auto_partition_specs({"a": 3}, MESH()), TypeError, "auto_partition_specs: ['a'] is int")
case("auto_partition_specs", "deep-tree", lambda: auto_partition_specs(deep_arrays(5000), MESH()), ValueError, "auto_partition_specs: tree is nested too deeply")
case("auto_partition_specs", "recursive-tree", lambda: auto_partition_specs(recursive_list(), MESH()), ValueError, "auto_partition_specs: tree", "contains itself")
case("auto_partition_specs", "mesh-str", lambda: auto_partition_specs({"a": X()}, "x"), TypeError, "auto_partition_specs: mesh must be a Mesh")
case("auto_partition_specs", "names-unknown", lambda: auto_partition_specs({"a": X()}, MESH(), names=["zz"]), ValueError, "names has 'zz'")
case("auto_partition_specs", "min-size-float-str", lambda: auto_partition_specs({"a": X()}, MESH(), min_sharding_size="8"), TypeError, "min_sharding_size must be")
case("partition_specs_for_budget", "budget-str", lambda: partition_specs_for_budget({"a": X()}, "1MiB", MESH()), TypeError, "max_bytes_per_device must be a number")
case("partition_specs_for_budget", "budget-negative", lambda: partition_specs_for_budget({"a": X()}, -1, MESH()), ValueError, "max_bytes_per_device must be positive")
case("partition_specs_for_budget", "budget-bool", lambda: partition_specs_for_budget({"a": X()}, True, MESH()), TypeError, "max_bytes_per_device must be a number")
case("partition_specs_for_budget", "budget-nan", lambda: partition_specs_for_budget({"a": X()}, float("nan"), MESH()), ValueError, "max_bytes_per_device must be positive")
case("partition_specs_for_budget", "budget-too-small", lambda: partition_specs_for_budget({"a": X()}, 1, MESH()), ValueError, "cannot fit in 1 bytes per device")
case("partition_specs_for_budget", "leaf-int", lambda: partition_specs_for_budget({"a": 3}, 100, MESH()), TypeError, "['a'] is int")
case("partition_specs_for_budget", "deep-tree", lambda: partition_specs_for_budget(deep_arrays(5000), 100, MESH()), ValueError, "partition_specs_for_budget: tree is nested too deeply")
case("partition_specs_for_budget", "mesh-str", lambda: partition_specs_for_budget({"a": X()}, 100, "x"), TypeError, "partition_specs_for_budget: mesh must be a Mesh")
case("partition_specs_for_budget", "names-unknown", lambda: partition_specs_for_budget({"a": X()}, 100, MESH(), names=["zz"]), ValueError, "names has 'zz'")
case("validate_shardings", "mesh-str", lambda: validate_shardings(X(), P("d"), "x"), TypeError, "validate_shardings: mesh must be a Mesh")
case("validate_shardings", "specs-int", lambda: validate_shardings(X(), 3, MESH()), TypeError, "the spec at the array is 3")
case("validate_shardings", "specs-str", lambda: validate_shardings(X(), "d", MESH()), TypeError, "is 'd', not a PartitionSpec")
case("validate_shardings", "deep-tree", lambda: validate_shardings(deep_arrays(5000), P(), MESH()), ValueError, "validate_shardings: tree or specs is nested too deeply")
case("validate_shardings", "structure", lambda: validate_shardings(X(), {"a": P()}, MESH()), ValueError, "does not match the array tree")
case("validate_shardings", "tree-int", lambda: validate_shardings(3, P(), MESH()), TypeError, "not an array")
case("validate_shardings", "threshold-str", lambda: validate_shardings(X(), P("d"), MESH(), large_replicated_bytes="x"), TypeError, "large_replicated_bytes must be")
case("validate_shardings", "threshold-negative", lambda: validate_shardings(X(), P("d"), MESH(), large_replicated_bytes=-1), ValueError, "large_replicated_bytes", "-1")
case("validate_shardings", "no-mesh", lambda: validate_shardings(X(), P("d")), ValueError, "validate_shardings: no mesh")
case("convert_specs", "old-mesh-str", lambda: convert_specs(P("d"), "x", MESH2(), X()), TypeError, "convert_specs: old_mesh must be a Mesh")
case("convert_specs", "new-mesh-None", lambda: convert_specs(P("d"), MESH(), None, X()), TypeError, "convert_specs: new_mesh must be a Mesh")
case("convert_specs", "strategy", lambda: convert_specs(P("d"), MESH(), MESH2(), X(), strategy="bogus"), ValueError, "unknown strategy 'bogus'")
case("convert_specs", "strategy-int", lambda: convert_specs(P("d"), MESH(), MESH2(), X(), strategy=3), ValueError, "unknown strategy 3")
case("convert_specs", "spec-int", lambda: convert_specs(3, MESH(), MESH2(), X()), TypeError, "is 3, not a PartitionSpec")
case("convert_specs", "spec-unknown-axis", lambda: convert_specs(P("zz"), MESH(), MESH2(), X()), ValueError, "'zz', which old_mesh does not have")
case("convert_specs", "spec-axis-twice", lambda: convert_specs(P("d", "d"), MESH(), MESH2(), X()), ValueError, "uses a mesh axis twice")
case("convert_specs", "structure", lambda: convert_specs({"a": P()}, MESH(), MESH2(), X()), ValueError, "does not match the shapes tree")
case("convert_specs", "deep-shapes", lambda: convert_specs(deep_arrays(5000), MESH(), MESH2(), deep_arrays(5000)), ValueError, "convert_specs: specs or shapes is nested too deeply")
case("convert_specs", "shapes-int", lambda: convert_specs(P(), MESH(), MESH2(), 3), TypeError, "not an array")
case("ShardingProblem", "kind", lambda: ShardingProblem("", "bogus", "m"), ValueError, "ShardingProblem: kind must be one of")
case("ShardingProblem", "path-int", lambda: ShardingProblem(3, "rank", "m"), TypeError, "ShardingProblem: path must be a str")
case("ShardingProblem", "message-None", lambda: ShardingProblem("", "rank", None), TypeError, "ShardingProblem: message must be a str")

# --- meshes and hosts --------------------------------------------------------------------------

case("default_mesh", "names-int", lambda: default_mesh(3), TypeError, "default_mesh: axis_names must be")
case("default_mesh", "names-empty-str", lambda: default_mesh(("", "m")), ValueError, "default_mesh: axis_names", "''")
case("default_mesh", "names-repeat", lambda: default_mesh(("a", "a")), ValueError, "repeat a name")
case("default_mesh", "names-four", lambda: default_mesh(("a", "b", "c", "e")), ValueError, "default_mesh knows 1 to 3")
case("default_mesh", "names-none", lambda: default_mesh(()), ValueError, "axis_names must be a non-empty sequence")
case("default_mesh", "model-parallelism-zero", lambda: default_mesh(model_parallelism=0), ValueError, "model_parallelism must be a positive int")
case("default_mesh", "model-parallelism-str", lambda: default_mesh(model_parallelism="2"), TypeError, "model_parallelism must be a positive int")
case("default_mesh", "model-parallelism-3", lambda: default_mesh(model_parallelism=3), ValueError, "model_parallelism=3 must divide")
case("default_mesh", "devices-int", lambda: default_mesh(devices=3), TypeError, "default_mesh: devices must be")
case("default_mesh", "devices-empty", lambda: default_mesh(devices=[]), ValueError, "default_mesh: no devices")
case("default_mesh", "devices-str", lambda: default_mesh(devices=["cpu:0"]), TypeError, "default_mesh: devices must be", "'cpu:0'")
case("default_mesh", "devices-twice", lambda: default_mesh(devices=jax.devices()[:1] * 2), ValueError, "appears twice")
case("default_mesh", "axis-types-str", lambda: default_mesh(("data",), axis_types="x"), TypeError, "default_mesh: axis_types")
case("default_mesh", "axis-types-count", lambda: default_mesh(axis_types=(AxisType.Explicit,)), ValueError, "1 axis_types")
case("hybrid_mesh", "ici-int", lambda: hybrid_mesh(3, (1,), ("d",)), TypeError, "hybrid_mesh: ici_shape must be a sequence of ints")
case("hybrid_mesh", "ici-str-entry", lambda: hybrid_mesh(("a",), (1,), ("d",)), TypeError, "hybrid_mesh: ici_shape must be a sequence of ints")
case("hybrid_mesh", "ici-float-entry", lambda: hybrid_mesh((8.5,), (1,), ("d",)), TypeError, "hybrid_mesh: ici_shape must be a sequence of ints")
case("hybrid_mesh", "ici-zero", lambda: hybrid_mesh((0,), (1,), ("d",)), ValueError, "ici_shape (0,) has a size below 1")
case("hybrid_mesh", "dcn-None", lambda: hybrid_mesh((8,), None, ("d",)), TypeError, "dcn_shape must be a sequence of ints")
case("hybrid_mesh", "dcn-product", lambda: hybrid_mesh((8,), (2,), ("d",)), ValueError, "the product of dcn_shape must be 1")
case("hybrid_mesh", "ici-product", lambda: hybrid_mesh((4,), (1,), ("d",)), ValueError, "the product of ici_shape must be 8")
case("hybrid_mesh", "names-int", lambda: hybrid_mesh((8,), (1,), 3), TypeError, "hybrid_mesh: axis_names must be")
case("hybrid_mesh", "lengths", lambda: hybrid_mesh((8,), (1,), ("d", "t")), ValueError, "one entry per mesh axis")
case("hybrid_mesh", "devices-int", lambda: hybrid_mesh((8,), (1,), ("d",), devices=3), TypeError, "hybrid_mesh: devices must be")
case("data_layout", "annotation-None", lambda: data_layout(None, (8, 4), MESH()), TypeError, "data_layout: the annotation must be one array annotation")
case("data_layout", "annotation-tree", lambda: data_layout(Layer, (8, 4), MESH()), TypeError, "the annotation must be one array annotation")
case("data_layout", "shape-str", lambda: data_layout(ANN, "x", MESH()), TypeError, "global_shape must be a tuple of ints")
case("data_layout", "shape-None", lambda: data_layout(ANN, None, MESH()), TypeError, "global_shape must be a tuple of ints")
case("data_layout", "shape-float", lambda: data_layout(ANN, (8.5, 4), MESH()), TypeError, "global_shape must be a tuple of ints")
case("data_layout", "shape-negative", lambda: data_layout(ANN, (-8, 4), MESH()), ValueError, "global_shape (-8, 4)", "negative")
case("data_layout", "shape-empty", lambda: data_layout(ANN, (), MESH()), ValueError, "needs a batch dim")
case("data_layout", "shape-rank", lambda: data_layout(ANN, (8,), MESH()), ValueError, "global_shape (8,) does not fit")
case("data_layout", "indivisible", lambda: data_layout(ANN, (6, 4), MESH()), ValueError, "global_shape (6, 4)", "does not divide")
case("data_layout", "mesh-str", lambda: data_layout(ANN, (8, 4), "x"), TypeError, "data_layout: mesh must be a Mesh")
case("data_layout", "mesh-abstract", lambda: data_layout(ANN, (8, 4), AbstractMesh((4, 2), ("d", "t"))), ValueError, "needs a mesh with devices")
case("make_global_array", "local-shape", lambda: make_global_array(np.zeros((3,)), ANN, (8, 4), MESH()), ValueError, "found local_data of shape (3,)")
case("make_global_array", "local-None", lambda: make_global_array(None, ANN, (8, 4), MESH()), TypeError, "make_global_array: local_data", "None")
case("make_global_array", "local-str", lambda: make_global_array("abc", ANN, (8, 4), MESH()), TypeError, "make_global_array: local_data", "str")
case("make_global_array", "local-dtype", lambda: make_global_array(np.zeros((8, 4), np.int32), ANN, (8, 4), MESH()), TypeError, "found local_data of dtype int32")
case("make_global_array", "local-dtype-unicode", lambda: make_global_array(np.full((8, 4), "a"), ANN, (8, 4), MESH()), TypeError, "local_data", "<U1")
case("make_global_array", "annotation-None", lambda: make_global_array(np.zeros((8, 4)), None, (8, 4), MESH()), TypeError, "make_global_array: the annotation must be")
case("make_global_array", "shape-str", lambda: make_global_array(np.zeros((8, 4)), ANN, "8,4", MESH()), TypeError, "global_shape must be a tuple of ints")
case("make_global_array", "mesh-int", lambda: make_global_array(np.zeros((8, 4)), ANN, (8, 4), 3), TypeError, "make_global_array: mesh must be a Mesh")
case("DataLayout", "no-arguments", lambda: DataLayout(), TypeError, "sharding")

# --- verification and plans --------------------------------------------------------------------

case("verify", "fn-int", lambda: verify(3, ABSTRACT), TypeError, "verify: fn must be a function")
case("verify", "fn-None", lambda: verify(None, ABSTRACT), TypeError, "verify: fn must be a function")
case("verify", "fn-class", lambda: verify(Layer, ABSTRACT), TypeError, "verify: fn must be a function", "class")
case("verify", "fn-annotation", lambda: verify(ANN, ABSTRACT), TypeError, "verify: fn must be a function")
case("verify", "mesh-str", lambda: verify(step, "x"), TypeError, "mesh must be a Mesh, an AbstractMesh or a mapping")
case("verify", "mesh-empty", lambda: verify(step, {}), ValueError, "a mesh mapping is axis name -> positive size")
case("verify", "mesh-zero", lambda: verify(step, {"d": 0}), ValueError, "a mesh mapping is axis name -> positive size")
case("verify", "mesh-str-size", lambda: verify(step, {"d": "4"}), ValueError, "a mesh mapping is axis name -> positive size")
case("verify", "mesh-bool-size", lambda: verify(step, {"d": True}), ValueError, "a mesh mapping is axis name -> positive size")
case("verify", "mesh-bad-name", lambda: verify(step, {"d e": 4}), ValueError, "a mesh mapping is axis name -> positive size")
case("verify", "dims-list", lambda: verify(step, ABSTRACT, dims=[1, 2]), TypeError, "verify: dims must be a mapping")
case("verify", "dims-str", lambda: verify(step, ABSTRACT, dims="batch=8"), TypeError, "verify: dims must be a mapping")
case("verify", "dims-negative", lambda: verify(step, ABSTRACT, dims={"batch": -8}), ValueError, "dims['batch']", "-8")
case("verify", "dims-str-size", lambda: verify(step, ABSTRACT, dims={"batch": "8"}), TypeError, "dims['batch']")
case("verify", "dims-float", lambda: verify(step, ABSTRACT, dims={"batch": 8.0}), TypeError, "dims['batch']")
case("verify", "dims-key-int", lambda: verify(step, ABSTRACT, dims={1: 8}), TypeError, "dims", "1")
case("verify", "dims-typo", lambda: verify(step, ABSTRACT, dims={"hiden": 8}), ValueError, "'hiden'", "did you mean 'hidden'")
case("verify", "static-int", lambda: verify(with_n, ABSTRACT, static=3), TypeError, "verify: static must be a mapping")
case("verify", "static-list", lambda: verify(with_n, ABSTRACT, static=[("n", 3)]), TypeError, "verify: static must be a mapping")
case("verify", "static-key-int", lambda: verify(with_n, ABSTRACT, static={3: 3}), TypeError, "static", "3")
case("verify", "raise-on-error-str", lambda: verify(step, ABSTRACT, raise_on_error="yes"), TypeError, "raise_on_error must be True or False")
case("verify", "inputs-list", lambda: verify(step, ABSTRACT, inputs=[1]), TypeError, "verify: inputs must be a mapping")
case("verify", "inputs-unknown", lambda: verify(step, ABSTRACT, inputs={"lyr": {}}), ValueError, "inputs given for ['lyr']", "does not take")
case("verify", "inputs-annotation", lambda: verify(step, ABSTRACT, inputs={"layer": Layer}), TypeError, 'inputs["layer"] is type', "not a tree of values")
case("verify", "inputs-and-static", lambda: verify(step, ABSTRACT, inputs={"layer": Layer(jax.ShapeDtypeStruct((8, 8), jnp.float32), jax.ShapeDtypeStruct((8, 8), jnp.float32))}, static={"layer": 1}), ValueError, "given in both inputs and static")
case("plan", "annotation-None", lambda: plan(None, ABSTRACT), TypeError, "has no layout")
case("plan", "annotation-int", lambda: plan(3, ABSTRACT), TypeError, "has no layout")
case("plan", "mesh-str", lambda: plan(ANN, "x"), TypeError, "mesh must be a Mesh, an AbstractMesh or a mapping")
case("plan", "mesh-None", lambda: plan(ANN, None), TypeError, "mesh must be a Mesh, an AbstractMesh or a mapping")
case("plan", "mesh-zero", lambda: plan(ANN, {"d": 0}), ValueError, "positive size")
case("plan", "mesh-negative", lambda: plan(ANN, {"d": -2}), ValueError, "positive size")
case("plan", "dims-list", lambda: plan(ANN, ABSTRACT, [1]), TypeError, "plan: dims must be a mapping")
case("plan", "dims-negative", lambda: plan(ANN, ABSTRACT, {"batch": -8, "embed": 4}), ValueError, "dims['batch']", "-8")
case("plan", "dims-str-size", lambda: plan(ANN, ABSTRACT, {"batch": "x", "embed": 4}), TypeError, "dims['batch']")
case("plan", "dims-float", lambda: plan(ANN, ABSTRACT, {"batch": 8.5, "embed": 4}), TypeError, "dims['batch']")
case("plan", "dims-typo", lambda: plan(Layer, ABSTRACT, {"embed": 8, "hiden": 8}), ValueError, "'hiden'", "did you mean 'hidden'")
case("plan", "variadic-not-tuple", lambda: plan(f32[b"*lead a"], ABSTRACT, {"lead": 3, "a": 2}), (TypeError, ValueError), "dims['lead']", "tuple")
case("plan", "threshold-str", lambda: plan(ANN, ABSTRACT, large_replicated_bytes="x"), TypeError, "large_replicated_bytes must be")
case("plan", "threshold-negative", lambda: plan(ANN, ABSTRACT, large_replicated_bytes=-1), ValueError, "large_replicated_bytes", "-1")
case("plan", "deep-nesting", lambda: plan(deep_list(5000), ABSTRACT), ValueError, "nested more than")
case("Problem", "kind", lambda: Problem("bogus", "m"), ValueError, "Problem: kind must be one of")
case("Problem", "message-int", lambda: Problem("check", 3), TypeError, "Problem: message must be a str")
case("VerifyReport", "mesh-str", lambda: VerifyReport("f", "x", {}, ()), TypeError, "VerifyReport: mesh must be a mapping")
case("VerifyReport", "problems-str", lambda: VerifyReport("f", {"d": 2}, {}, ("x",)), TypeError, "VerifyReport: problems must be")
case("search", "devices-zero", lambda: shardtypes.search(step, 0, axes=("d",), rules={"r": shardtypes.AxisRules([])},
                                                       chip="h100"), ValueError, "search: devices must be a positive int")
case("search", "rules-empty", lambda: shardtypes.search(step, 8, axes=("d",), rules={}, chip="h100"), ValueError,
     "search: rules must be a non-empty mapping of label to AxisRules")
case("search", "chip-unknown", lambda: shardtypes.search(step, 8, axes=("d",), rules={"r": shardtypes.AxisRules([])},
                                                       chip="h1000"), ValueError, "search(chip=...): 'h1000' is not a known chip")
case("SearchReport", "candidates-list", lambda: shardtypes.SearchReport("f", 8, "h100", None, [], (), 0), TypeError,
     "SearchReport: candidates must be a tuple of Candidate")
case("SearchReport", "devices-zero", lambda: shardtypes.SearchReport("f", 0, "h100", None, (), (), 0), TypeError,
     "SearchReport: devices must be a positive int")
case("PlanReport", "mesh-str", lambda: PlanReport("x", (), (), ()), TypeError, "PlanReport: mesh must be a mapping")
case("PlanReport", "rows-int", lambda: PlanReport({"d": 2}, (3,), (), ()), TypeError, "PlanReport: rows must be")
# What a report holds, built by hand (a wrong field fails where it is built).
case("ActivationEstimate", "bytes-negative", lambda: ActivationEstimate(-1), TypeError,
     "ActivationEstimate: bytes_per_device must be an int >= 0, got int -1")
case("ActivationEstimate", "largest-str", lambda: ActivationEstimate(8, ("x",)), TypeError,
     "ActivationEstimate: largest must be a tuple of LiveValue, got tuple ('x',)")
case("Collective", "kind", lambda: Collective("broadcast", ("d",), 8), ValueError, "Collective: kind must be one of")
case("Collective", "axes-str", lambda: Collective("all-gather", "d", 8), TypeError,
     "Collective: axes must be a tuple of str, got str 'd'")
case("Collective", "bytes-str", lambda: Collective("all-gather", ("d",), "8"), TypeError,
     "Collective: bytes must be a number >= 0, got str '8'")
case("Collective", "times-zero", lambda: Collective("all-gather", ("d",), 8, times=0), TypeError,
     "Collective: times must be an int >= 1, got int 0")
case("Communication", "collectives-list", lambda: Communication([Collective("permute", ("d",), 8)]), TypeError,
     "Communication: collectives must be a tuple of Collective, got list")
case("StepCost", "communication-dict", lambda: StepCost({}, 1, {}, 1), TypeError,
     "StepCost: communication must be a Communication, got dict")
case("StepCost", "flops-by-dtype-key", lambda: StepCost(Communication(), 1, {1: 1}, 1), TypeError,
     "StepCost: each key of flops_by_dtype must be a str, got int 1")
case("StepCost", "memory-negative", lambda: StepCost(Communication(), 1, {}, -5), TypeError,
     "StepCost: memory_bytes_per_device must be a number >= 0, got int -5")
case("StepTime", "compute-str", lambda: StepTime("h100", "1s", 0.0, {}, {}, ""), TypeError,
     "StepTime: compute must be a number of seconds >= 0, got str '1s'")
case("StepTime", "communication-key", lambda: StepTime("h100", 1.0, 0.0, {"d": 1.0}, {}, ""), TypeError,
     "StepTime: each key of communication must be a tuple of mesh axis names, got str 'd'")
case("StepTime", "links-value", lambda: StepTime("h100", 1.0, 0.0, {}, {"d": "nvlink"}, ""), TypeError,
     "StepTime: links['d'] must be a Link, got str")

# --- checking ----------------------------------------------------------------------------------

case("check", "dtype-name-str", lambda: check("f32", "a", X()), TypeError, "check(): dtype must be")
case("check", "dtype-abstract-numpy", lambda: check(np.floating, "a b", jnp.zeros((2,), jnp.int32)), TypeCheckError, "check()")
case("check", "dtype-None", lambda: check(None, "a b", X()), TypeError, "check(): dtype must be")
case("check", "dtype-annotation", lambda: check(f32[b"a"], "a", X()), TypeError, "has a shape of its own")
case("check", "spec-int", lambda: check(f32, 3, X()), TypeError, "check(): shape_spec must be")
case("check", "spec-bad", lambda: check(f32, "a/", X()), ShapeSpecError, "empty mesh axis name")
case("check", "value-str", lambda: check(f32, "a b", "x"), TypeCheckError, "check(): value is not")
case("check", "value-wrong-rank", lambda: check(f32, "a", X()), TypeCheckError, "check(): value is not")
case("typechecked", "int", lambda: typechecked(3), TypeError, "typechecked expects a function")
case("typechecked", "str", lambda: typechecked("f"), TypeError, "typechecked expects a function")
case("typechecked", "annotation", lambda: typechecked(ANN), TypeError, "typechecked expects a function")
case("register_with_typeguard", "argument", lambda: register_with_typeguard(3), TypeError, "register_with_typeguard()")
case("Scope", "negative", lambda: Scope(a=-1), ValueError, "a size cannot be negative")
case("Scope", "not-identifier", lambda: Scope(**{"a b": 3}), ValueError, "a dimension name is an identifier")
case("Scope", "underscore", lambda: Scope(_=3), ValueError, "a dimension name is an identifier other than '_'")
case("Scope", "str-size", lambda: Scope(a="x"), TypeError, "Scope(a=...) must be an int size")
case("Scope", "float-size", lambda: Scope(a=1.5), TypeError, "Scope(a=...) must be an int size")
case("Scope", "tuple-with-str", lambda: Scope(a=(1, "x")), TypeError, "Scope(a=...) must be an int size")
case("scope", "int", lambda: scope(3), TypeError, "scope", "function")
case("dims", "argument", lambda: dims(3), TypeError, "dims()")
case("config", "checks-str", lambda: setattr(config, "checks", "yes"), TypeError, "shardtypes.config.checks must be True or False")
case("config", "checks-int", lambda: setattr(config, "checks", 1), TypeError, "shardtypes.config.checks must be True or False")
case("config", "auto-sharding-check", lambda: setattr(config, "auto_sharding_check", "never"), ValueError, "auto_sharding_check must be one of")
case("config", "unknown-setting", lambda: setattr(config, "check", False), AttributeError, "shardtypes.config has no setting 'check'", "'checks'")
case("config", "traceback-filtering", lambda: setattr(config, "traceback_filtering", "never"), ValueError, "shardtypes.config.traceback_filtering must be one of ('on', 'off'), got 'never'")
case("config", "auto-sharding-check-None", lambda: setattr(config, "auto_sharding_check", None), ValueError, "auto_sharding_check must be one of")

def pytree_kernel() -> Any:
    def k(x: PyTree[f32[b"b/d"]]) -> f32[b"b/d"]:
        return x

    mesh = MESH()
    return typed_shard_map(k, mesh=mesh)({"a": jax.device_put(jnp.zeros(8), NamedSharding(mesh, P("d")))})


case("typed_shard_map", "pytree-parameter", pytree_kernel, TypeError, 'argument "x" of', "PyTree[f32[b'b/d']]", "fixes no tree structure")
case("typed_shard_map", "int", lambda: typed_shard_map(3), TypeError, "typed_shard_map expects a function")
case("typed_shard_map", "check-rep-and-vma", lambda: typed_shard_map(step, check_rep=True, check_vma=False), TypeError, "check_rep is the old name of check_vma")
case("typed_shard_map", "axis-names-int", lambda: typed_shard_map(step, axis_names=3), TypeError, "axis_names")
case("typed_shard_map", "mesh-str", lambda: typed_shard_map(step, mesh="x"), TypeError, "typed_shard_map: mesh must be a Mesh")
case("typed_shard_map", "check-vma-str", lambda: typed_shard_map(step, check_vma="yes"), TypeError, "check_vma must be")


def tanh_of_partial_sum() -> Any:
    """A nonlinear op on a partial sum JAX types unreduced (jit, check_vma on), issue 17."""
    def tanh_psum(x: f32[b"b f/t"], w: f32[b"f/t m"]) -> f32[b"b m"]:
        return ops.psum("b m", jnp.tanh(ops.einsum_unreduced("b f/t, f/t m -> b m", x, w)), "t")

    mesh = MESH()
    with jax.set_mesh(mesh):
        x = jax.device_put(jnp.ones((4, 8)), NamedSharding(mesh, P(None, "t")))
        w = jax.device_put(jnp.ones((8, 8)), NamedSharding(mesh, P("t")))
        return jax.jit(typed_shard_map(tanh_psum))(x, w)


case("typed_shard_map", "tanh-of-partial-sum", tanh_of_partial_sum, TypeCheckError,
     "in kernel tanh_of_partial_sum.<locals>.tanh_psum(), a partial sum reached JAX's 'tanh'",
     "shardtypes.ops.einsum_unreduced('b f/t, f/t m -> b m') made a partial sum owing a sum over mesh axis 't'",
     "reduce it with shardtypes.ops.psum or shardtypes.ops.psum_scatter first")

# --- shardtypes.nnx ----------------------------------------------------------------------------

case("nnx", "annotations-int", lambda: nnx.annotations(3), TypeError, "shardtypes.nnx: model must be an nnx.Module")
case("linen", "annotations-int", lambda: shardtypes.linen.annotations(3), TypeError,
     "shardtypes.linen.annotations: variables (int) is in no nn.Partitioned box")
case("linen", "shardings-int", lambda: shardtypes.linen.shardings(3, MESH()), TypeError,
     "shardtypes.linen", "variables (int) is in no nn.Partitioned box")
case("plan_html", "reports-int", lambda: shardtypes.plan_html(3), TypeError,
     "plan_html: reports must be a PlanReport or a non-empty mapping of mode name to PlanReport or VerifyReport, got int 3")
case("plan_html", "reports-empty", lambda: shardtypes.plan_html({}), TypeError,
     "plan_html: reports must be a PlanReport or a non-empty mapping", "got dict {}")
case("plan_html", "hbm-bad", lambda: shardtypes.plan_html(plan(ANN, ABSTRACT, {"batch": 8, "embed": 4}), "lots"),
     ValueError, "'lots' is neither a size with a unit", "nor a known device kind (h100")
case("nnx", "partition-specs-None", lambda: nnx.partition_specs(None), TypeError, "shardtypes.nnx: model must be an nnx.Module")
case("nnx", "shardings-str", lambda: nnx.shardings("model", MESH()), TypeError, "shardtypes.nnx: model must be an nnx.Module")
case("nnx", "check-list", lambda: nnx.check([1]), TypeError, "shardtypes.nnx: model must be an nnx.Module")
# Found by the fuzzer (test_fuzz.py):
case("nnx", "annotations-filter-int", lambda: nnx.annotations(nnx_block(), 3), TypeError, "shardtypes.nnx: filters[0] is 3", "not an nnx filter")
case("nnx", "check-filter-nested-int", lambda: nnx.check(nnx_block(), (3,)), TypeError, "shardtypes.nnx: filters[0][0] is 3")
case("nnx", "shardings-mesh-str", lambda: nnx.shardings(nnx_block(), "x"), TypeError, "shardtypes.nnx.shardings: mesh must be a Mesh")

# --- shardtypes.ops ----------------------------------------------------------------------------

case("ops", "all_gather-spec-int", lambda: ops.all_gather(3, X()), ShapeSpecError, "shardtypes.ops.all_gather wants a str spec")
case("ops", "all_gather-spec-None", lambda: ops.all_gather(None, X()), ShapeSpecError, "shardtypes.ops.all_gather wants a str spec")
case("ops", "all_gather-no-arrow", lambda: ops.all_gather("a/d", X()), ShapeSpecError, "wants 'inputs -> output'")
case("ops", "all_gather-bad-dim", lambda: ops.all_gather("a/ -> a", X()), ShapeSpecError, "shardtypes.ops.all_gather: dim 0", "empty mesh axis name")
case("ops", "all_gather-bracket-dim", lambda: ops.all_gather("[a/d] b -> a b", X()), ShapeSpecError, "shardtypes.ops.all_gather:", "'d]' is not an identifier")
case("ops", "psum-bad-dim", lambda: ops.psum("a/", X(), "d"), ShapeSpecError, "shardtypes.ops.psum:", "empty mesh axis name")
case("ops", "all_gather-different-dims", lambda: ops.all_gather("a/d -> b", X()), ShapeSpecError, "same dims")
case("ops", "all_gather-outside-shard-map", lambda: ops.all_gather("a/d b -> a b", X()), ValueError, "no shard_map is running")
case("ops", "all_gather-unknown-axis", lambda: in_shard_map(lambda x: ops.all_gather("a/zz -> a", x)), ValueError, "mesh axis 'zz' is not in the mesh")
case("ops", "all_gather-invariant-int", lambda: ops.all_gather("a/d b -> a b", X(), invariant=1), TypeError, "shardtypes.ops.all_gather('a/d b -> a b'): argument 'invariant' must be True or False, not 1")
case("ops", "all_gather-invariant-vma-off", lambda: in_shard_map(lambda x: ops.all_gather("a/d -> a", x, invariant=True)), TypeCheckError, "shardtypes.ops.all_gather('a/d -> a') with invariant=True: the operand does not vary over mesh axis 'd'", "check_vma=False", "gradient")
case("ops", "all_gather-invariant-kernel-vma-off", lambda: in_kernel(gather_kernel_vma_off), TypeCheckError, "in kernel gather_kernel_vma_off(), shardtypes.ops.all_gather('a/d -> a') with invariant=True: the kernel runs with check_vma=False", "gradient")
case("ops", "all_gather-plain-returned-replicated", lambda: in_kernel(gather_kernel_plain), TypeCheckError, "in kernel gather_kernel_plain(), the return value varies over mesh axis 'd'", "gathered by shardtypes.ops.all_gather('a/d -> a')", "invariant=True")
case("ops", "psum_scatter-spec-int", lambda: ops.psum_scatter(3, X()), ShapeSpecError, "psum_scatter wants a str spec")
case("ops", "psum_scatter-no-dim-gains", lambda: ops.psum_scatter("a/d b -> a/d b", X()), ShapeSpecError, "at least one dim must gain mesh axes")
case("ops", "all_to_all-spec-None", lambda: ops.all_to_all(None, X()), ShapeSpecError, "all_to_all wants a str spec")
case("ops", "all_to_all-one-dim", lambda: ops.all_to_all("a/d b -> a b", X()), ShapeSpecError, "exactly two dims must change")
case("ops", "psum-spec-int", lambda: ops.psum(3, X(), "d"), ShapeSpecError, "shardtypes.ops.psum wants a shape string")
case("ops", "psum-arrow", lambda: ops.psum("a -> a", X(), "d"), ShapeSpecError, "keeps the layout")
case("ops", "psum-axes-int", lambda: ops.psum("a b", X(), 3), TypeError, "argument 'axes' must be a mesh axis name")
case("ops", "psum-axes-empty", lambda: ops.psum("a b", X(), ()), TypeError, "argument 'axes' must be a mesh axis name")
case("ops", "psum-axes-twice", lambda: ops.psum("a b", X(), ("d", "d")), ValueError, "argument 'axes' names a mesh axis twice")
case("ops", "psum-outside-shard-map", lambda: ops.psum("a b", X(), "d"), ValueError, "no shard_map is running")
case("ops", "psum-split-dim", lambda: in_shard_map(lambda x: ops.psum("a/d", x, "d")), ValueError, "argument 'axes' reduces over mesh axis 'd'")
case("ops", "psum-operand-str", lambda: in_shard_map(lambda x: ops.psum("a", "x", "d")), TypeCheckError, "operand is not 'a'")
case("ops", "pmean-axes-None", lambda: ops.pmean("a b", X(), None), TypeError, "argument 'axes' must be a mesh axis name")
case("ops", "pmean-spec-bytes-bad", lambda: ops.pmean(b"\xff", X(), "d"), ShapeSpecError, "not valid UTF-8")
case("ops", "ppermute-perm-int", lambda: in_shard_map(lambda x: ops.ppermute("a", x, "d", 3)), TypeError, "perm", "(source, destination) pairs")
case("ops", "ppermute-perm-str", lambda: in_shard_map(lambda x: ops.ppermute("a", x, "d", "ab")), TypeError, "(source, destination) pairs")
case("ops", "ppermute-out-of-range", lambda: in_shard_map(lambda x: ops.ppermute("a", x, "d", [(0, 9)])), ValueError, "pair (0, 9) is out of range")
case("ops", "ppermute-source-twice", lambda: in_shard_map(lambda x: ops.ppermute("a", x, "d", [(0, 1), (0, 2)])), ValueError, "device 0 is a source twice")
case("ops", "ppermute-axis-int", lambda: ops.ppermute("a", X(), 3, [(0, 1)]), TypeError, "argument 'axis' must be a mesh axis name")
case("ops", "einsum_unreduced-spec-int", lambda: ops.einsum_unreduced(3, X()), ShapeSpecError, "einsum_unreduced wants a str spec")
case("ops", "einsum_unreduced-inputs", lambda: ops.einsum_unreduced("a, a -> a", X()), ShapeSpecError, "takes 1 input spec(s), found 2")
case("ops", "einsum_unreduced-not-a-name", lambda: ops.einsum_unreduced("_ b -> b", X()), ShapeSpecError, "must be a plain name")
case("ops", "einsum_unreduced-stray-output", lambda: ops.einsum_unreduced("a b -> c", X()), ShapeSpecError, "output dim 'c' is in no input")
case("ops", "einsum_unreduced-operand-rank", lambda: ops.einsum_unreduced("a -> a", X()), TypeCheckError, "operand 0 is not 'a'")
case("ops", "index_unreduced-spec-int", lambda: ops.index_unreduced(3, X(), X()), ShapeSpecError, "index_unreduced")
case("ops", "index_unreduced-no-brackets", lambda: ops.index_unreduced("a b, a -> a", X(), X()), ShapeSpecError, "index_unreduced")
case("ops", "axis_index-int", lambda: ops.axis_index(3), TypeError, "argument 'name' must be a mesh axis name")
case("ops", "axis_index-outside", lambda: ops.axis_index("d"), ValueError, "no shard_map is running")
case("ops", "axis_size-None", lambda: ops.axis_size(None), TypeError, "argument 'name' must be a mesh axis name")
case("ops", "axis_size-list-empty", lambda: ops.axis_size([]), TypeError, "argument 'name' must be a mesh axis name")
case("ops", "per_device-axes-int", lambda: in_shard_map(lambda x: ops.per_device(x, 3)), TypeError, "argument 'axes' must be a mesh axis name")
case("ops", "per_device-outside", lambda: ops.per_device(X(), "d"), ValueError, "no shard_map is running")
case("ops", "per_device-value-str", lambda: in_shard_map(lambda x: ops.per_device("x", "d")), TypeError, "argument 'value' must be a jax.Array or a tree of them (found str)")
case("ops", "axis_size-unknown", lambda: in_shard_map(lambda x: ops.axis_size("zz")), ValueError, "mesh axis 'zz' is not in the mesh")

# --- issue 19: crashes, wrong names and silent accepts, each as users met it --------------------


def two_str_helpers() -> Any:
    """Two checked helpers with str shapes in annotated locals, in one function (item 1)."""

    @typechecked
    def first(x: f32["batch embed"]) -> f32["batch embed"]:
        y: f32["batch embed"] = x
        return y

    @typechecked
    def second(x: f32["batch embed"]) -> f32["batch embed"]:
        z: f32["batch embed"] = x.sum(-1)
        return z

    first(X())
    return second(X())


@typechecked
def tuple_return(x: f32[b"a b"]) -> tuple[f32[b"a b"], f32[b"a b"]]:
    return x  # type: ignore[return-value]


@typechecked
def tuple_return_instrumented(x: f32[b"a b"]) -> tuple[f32[b"a b"], f32[b"a b"]]:
    y: f32[b"a b"] = x
    return y  # type: ignore[return-value]


@dataclasses.dataclass
class PlainLayer:
    w: f32[b"embed/d hidden/t"]


def registered_then_checked() -> None:
    """pytree_dataclass on a class register_dataclass registered (item 4), then a bad value."""

    @dataclasses.dataclass
    class R:
        w: f32[b"a b"]

    cls = pytree_dataclass(jax.tree_util.register_dataclass(R, data_fields=["w"], meta_fields=[]))
    typeguard.check_type(cls(jnp.zeros(3)), cls)


def scopes_out_of_order() -> None:
    a, b = Scope(a=1), Scope(b=2)
    a.__enter__()
    b.__enter__()
    a.__exit__(None, None, None)


def unchecked_generator_yield() -> None:
    """A generator typeguard cannot instrument (item 7): its yields are checked all the same."""
    F = f32

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ShardtypesWarning)

        @typechecked
        def gen(x: F[b"n"]) -> typing.Iterator[F[b"n"]]:
            yield x
            yield jnp.zeros(7)

    it = gen(jnp.zeros(3))
    next(it)
    next(it)


case("typechecked", "two-str-helpers-in-one-function", two_str_helpers, TypeCheckError, "value assigned to z", "is not f32[b'batch embed']: has 1 dim")
case("typechecked", "tuple-return-eager", lambda: tuple_return(X()), TypeCheckError, "the return value (jax.Array) of tuple_return() is not a tuple")
case("typechecked", "tuple-return-jit", lambda: jax.jit(tuple_return)(X()), TypeCheckError, "the return value (traced jax.Array) of tuple_return() is not a tuple")
case("typechecked", "tuple-return-instrumented", lambda: tuple_return_instrumented(X()), TypeCheckError, "the return value (jax.Array) of tuple_return_instrumented() is not a tuple")
case("typechecked", "tuple-return-instrumented-jit", lambda: jax.jit(tuple_return_instrumented)(X()), TypeCheckError, "the return value (traced jax.Array) of tuple_return_instrumented() is not a tuple")
case("ArrayError", "check_type", lambda: typeguard.check_type(X(), f32[b"a"]), ArrayError, "jax.Array is not f32[b'a']: has 2 dims")
case("shard", "plain-dataclass-other-annotation", lambda: shard(PlainLayer(X()), ANN, MESH()), TypeError, "shard: value is a PlainLayer (a dataclass that is not a pytree)", "pass its class")
case("shard", "array-for-plain-dataclass", lambda: shard(X(), PlainLayer, MESH()), TypeError, "shard: value is float32[8,4]", "its annotation is the dataclass PlainLayer")
case("shard", "plain-dataclass-indivisible", lambda: shard(PlainLayer(jnp.zeros((7, 4))), PlainLayer, MESH()), ValueError, "dim 0 has size 7, which does not divide")
case("pytree_dataclass", "already-registered-then-bad-field", registered_then_checked, FieldError, ".w is not f32[b'a b']: has 1 dim")
case("Scope", "exited-out-of-order", scopes_out_of_order, RuntimeError, "Scope exited out of order: 1 Scope(s) entered after it", "as it was before this Scope")
case("f32", "negative-constant-size", lambda: f32[b"2-3"], ShapeSpecError, "dim '2-3' is the constant -1: a size cannot be negative")
case("f32", "constant-divides-by-zero", lambda: f32[b"a 4//0"], ShapeSpecError, "dim '4//0' divides by zero")
case("check", "struct-negative-dim", lambda: check(f32, "a b", jax.ShapeDtypeStruct((-2, 3), jnp.float32)), TypeCheckError, "is a ShapeDtypeStruct of shape (-2, 3), whose dim 0 is negative")
case("check", "dtype-np-number", lambda: check(np.number, "a", jnp.zeros(3, jnp.bool_)), TypeError, "check(): dtype numpy.number is an abstract numpy type")
case("check", "dtype-np-inexact", lambda: check(np.inexact, "a", jnp.zeros(3)), TypeError, "numpy.inexact is an abstract numpy type")
case("typechecked", "generator-checked-from-signature-yield", unchecked_generator_yield, TypeCheckError, "the yielded value (jax.Array) of", "gen() is not f32[b'n']: dimension 'n' is 7 here")
case("floating", "nested-no-common-dtype", lambda: floating[i32[jax.Array, b"a"], b"b"], TypeError, "no dtype is both floating and i32")
case("floating", "nested-dtype-class", lambda: floating[f32, b"a"], TypeError, "array_type is the dtype class f32, which has no shape")
case("f32", "nested-two-variadics", lambda: f32[f32[b"..."], b"*lead"], TypeError, "means shape '*lead ...'", "second variadic dim")


# --- the command (shardtypes plan | verify) ----------------------------------------------------

case("cli", "no-command", lambda: cli(), CLIFailed, "exit status 2", "required")
case("cli", "unknown-command", lambda: cli("bogus"), CLIFailed, "exit status 2", "invalid choice")
case("cli", "no-target", lambda: cli("plan", "--mesh", "d=2"), CLIFailed, "exit status 2", "MODULE:OBJECT")
case("cli", "target-no-colon", lambda: cli("plan", "nocolon", "--mesh", "d=2"), CLIFailed, "expected MODULE:OBJECT")
case("cli", "target-no-module", lambda: cli("plan", "no_such_module_xyz:X", "--mesh", "d=2"), CLIFailed, "cannot import 'no_such_module_xyz'")
case("cli", "target-no-object", lambda: cli("plan", f"{HERE}:Nope", "--mesh", "d=2"), CLIFailed, "has no 'Nope'")
case("cli", "target-surrogate", lambda: cli("plan", "\udcff:X", "--mesh", "d=2"), CLIFailed, "cannot import")
case("cli", "mesh-missing", lambda: cli("plan", f"{HERE}:Layer"), CLIFailed, "exit status 2", "--mesh")
case("cli", "mesh-zero", lambda: cli("plan", f"{HERE}:Layer", "--mesh", "d=0"), CLIFailed, "exit status 2", "axis sizes must be positive")
case("cli", "mesh-no-size", lambda: cli("plan", f"{HERE}:Layer", "--mesh", "d"), CLIFailed, "exit status 2", "name=value pairs")
case("cli", "mesh-str-size", lambda: cli("plan", f"{HERE}:Layer", "--mesh", "d=x"), CLIFailed, "exit status 2", "bad value for d")
case("cli", "mesh-bad-name", lambda: cli("plan", f"{HERE}:Layer", "--mesh", "1=2"), CLIFailed, "exit status 2", "is not a name")
case("cli", "dims-str", lambda: cli("plan", f"{HERE}:Layer", "--mesh", "d=2", "--dims", "embed=x"), CLIFailed, "exit status 2", "bad value for embed")
case("cli", "dims-float", lambda: cli("plan", f"{HERE}:Layer", "--mesh", "d=2", "--dims", "embed=1.5"), CLIFailed, "exit status 2", "embed")
case("cli", "dims-no-name", lambda: cli("plan", f"{HERE}:Layer", "--mesh", "d=2", "--dims", "=3"), CLIFailed, "exit status 2", "is not a name")
case("cli", "mode-without-rules", lambda: cli("plan", f"{HERE}:Layer", "--mesh", "d=2", "--mode", "decode"), CLIFailed, "exit status 2", "--mode needs --rules")
case("cli", "rules-not-rules", lambda: cli("plan", f"{HERE}:Layer", "--mesh", "d=2", "--rules", f"{HERE}:Layer"), CLIFailed, "exit status 2", "expected AxisRules")
case("cli", "unknown-mode", lambda: cli("plan", f"{HERE}:Layer", "--mesh", "d=2", "--rules", f"{HERE}:RULES", "--mode", "prefill"), CLIFailed, "exit status 2", "'prefill'")
case("cli", "static-bad", lambda: cli("verify", f"{HERE}:with_n", "--mesh", "d=2", "--static", "n=("), CLIFailed, "exit status 2", "bad value for n")
case("cli", "plan-dims-negative", lambda: cli("plan", f"{HERE}:Layer", "--mesh", "d=2,t=2", "--dims", "embed=-8,hidden=8"), CLIFailed, "exit status 2", "embed", "-8")
case("cli", "plan-dims-typo", lambda: cli("plan", f"{HERE}:Layer", "--mesh", "d=2,t=2", "--dims", "embed=8,hiden=8"), CLIFailed, "exit status 2", "did you mean 'hidden'")
case("cli", "plan-not-an-annotation", lambda: cli("plan", f"{HERE}:NOT_AN_ANNOTATION", "--mesh", "d=2"), CLIFailed, "exit status 2", "has no layout")
case("cli", "verify-a-class", lambda: cli("verify", f"{HERE}:Layer", "--mesh", "d=2"), CLIFailed, "exit status 2", "fn must be a function")
case("cli", "verify-dims-negative", lambda: cli("verify", f"{HERE}:step", "--mesh", "d=2,t=2", "--dims", "batch=-8"), CLIFailed, "exit status 2", "-8")
case("cli", "mesh-axis-twice", lambda: cli("plan", f"{HERE}:Layer", "--mesh", "d=2,d=4"), CLIFailed, "exit status 2", "'d'", "twice")
case("cli", "dims-name-twice", lambda: cli("plan", f"{HERE}:Layer", "--mesh", "d=2", "--dims", "embed=8,embed=16"), CLIFailed, "exit status 2", "'embed'", "twice")


# ---------------------------------------------------------------------------------------------
# The tests.

# Exceptions that mean an input reached code that did not validate it.
RAW = (AttributeError, KeyError, IndexError, ZeroDivisionError, UnicodeError, RecursionError, AssertionError)


def _params() -> list:
    params = []
    for c in CASES:
        marks = [pytest.mark.xfail(strict=True, reason=c.xfail)] if c.xfail else []
        params.append(pytest.param(c, id=f"{c.entry}:{c.id}", marks=marks))
    return params


@pytest.mark.parametrize("c", _params())
def test_bad_input(c: Case) -> None:
    saved = (config.checks, config.auto_sharding_check)
    try:
        with pytest.raises(Exception) as info:
            c.call()
    finally:
        config.checks, config.auto_sharding_check = saved
    error = info.value
    assert isinstance(error, c.expected), f"expected {c.expected}, got {type(error).__name__}: {error}"
    # AttributeError only where a case expects it: an unknown setting of shardtypes.config
    assert c.expected is AttributeError or not isinstance(error, RAW), f"a raw {type(error).__name__}: {error}"
    module = type(error).__module__
    assert module.split(".")[0] in ("builtins", "shardtypes", "typeguard", CLIFailed.__module__), (
        f"another library's error: {module}.{type(error).__name__}: {error}")
    message = str(error)
    for fragment in c.fragments:
        assert fragment in message, f"{fragment!r} not in the message:\n{message}"
    assert "Traceback" not in message
    _assert_public_names(error)


# A private class name in what a user sees (issue 19): the message, the class as tracebacks and
# pytest print it, its __name__.
PRIVATE_NAMES = re.compile(r"_ArrayError|jaxlib\._jax|jax\._src|\bshardtypes\.(?:_|language|context|model|checking"
                           r"|layout|integrations|kernels|tools)\w*\.\w*Error")


def _assert_public_names(error: BaseException) -> None:
    shown = "".join(traceback.format_exception_only(type(error), error))
    assert not PRIVATE_NAMES.search(shown), f"a private name in what the user sees: {shown}"
    assert not type(error).__name__.startswith("_"), type(error).__qualname__
    assert not any(part.startswith("_") for part in type(error).__module__.split(".")), type(error).__module__


def test_the_catalogue_is_large_and_covers_every_entry_point() -> None:
    assert len(CASES) >= 200
    ids = [f"{c.entry}:{c.id}" for c in CASES]
    assert len(ids) == len(set(ids)), "case ids repeat"
    exceptions = {n for n in shardtypes.__all__ if isinstance(getattr(shardtypes, n), type)
                  and issubclass(getattr(shardtypes, n), BaseException)}
    covered = {c.entry for c in CASES}
    assert set(shardtypes.__all__) - exceptions - covered == set()  # the exceptions: each pickles
    ops_covered = {c.id.split("-")[0] for c in CASES if c.entry == "ops"}
    assert set(ops.__all__) - ops_covered == set()
    assert "cli" in covered
