"""The fuzzer's families of calls (test_fuzz.py runs them): one hypothesis strategy per group of
public entry points, each drawing a ``Call`` (fuzz_strategies.py) with generated valid and invalid
arguments.
"""

from __future__ import annotations

import contextlib
import functools
import io
import warnings
from typing import Any

import jax
import numpy as np
from flax import nnx as fnnx
from hypothesis import strategies as st
from jax.sharding import NamedSharding, PartitionSpec as P

import shardtypes
from shardtypes import (
    Array,
    AxisRules,
    DimSpec,
    Scope,
    ShapeSpec,
    Stacked,
    auto_partition_spec,
    auto_partition_specs,
    axis_rules,
    check,
    config,
    convert_specs,
    current_rules,
    data_layout,
    dims,
    eformer_rules,
    explain,
    f32,
    is_fully_sharded,
    make_global_array,
    make_partition_specs,
    make_shape_dtype_structs,
    make_shardings,
    nnx,
    ops,
    partition_specs_for_budget,
    plan,
    pytree_dataclass,
    shard,
    t5x_rules,
    typechecked,
    validate_shardings,
    verify,
)
from shardtypes.__main__ import main as cli_main

from fuzz_strategies import (
    DTYPES,
    NAMES,
    PENDING,
    Layer,
    annotations,
    array_annotation,
    arrays,
    bad_meshes,
    call,
    dims_dicts,
    dtype_names,
    good_annotation,
    mesh,
    mesh_args,
    meshes,
    rule_pairs,
    shape_arg,
    shape_text,
    values,
)

# ---------------------------------------------------------------------------------------------
# 1 language: ShapeSpec, DimSpec


@st.composite
def language_calls(draw: Any) -> Any:
    text = draw(shape_arg)
    which = draw(st.sampled_from(["ShapeSpec", "DimSpec", "roundtrip", "partition_spec"]))
    if which == "DimSpec":
        return call("DimSpec", f"DimSpec.parse({text!r})", lambda: DimSpec.parse(text), repr(text)[1:-1])
    if which == "roundtrip":
        def roundtrip() -> None:
            spec = ShapeSpec.parse(text)
            assert ShapeSpec.parse(str(spec)) == spec, (str(spec), spec)
        return call("ShapeSpec", f"roundtrip {text!r}", roundtrip, repr(text)[1:-1])
    if which == "partition_spec":
        ndim = draw(st.sampled_from([None, 0, 1, 2, 3, -1, "x", True]))
        return call("ShapeSpec", f"ShapeSpec.parse({text!r}).partition_spec(ndim={ndim!r})",
                    lambda: ShapeSpec.parse(text).partition_spec(ndim=ndim), "ndim", repr(text)[1:-1])
    return call("ShapeSpec", f"ShapeSpec.parse({text!r})", lambda: ShapeSpec.parse(text), repr(text)[1:-1])


# ---------------------------------------------------------------------------------------------
# 3 model: annotation classes, Array, Stacked, pytree_dataclass


@st.composite
def annotation_calls(draw: Any) -> Any:
    name = draw(dtype_names)
    cls = DTYPES[name]
    which = draw(st.sampled_from(["runtime", "static", "static", "Array", "Stacked", "number", "pytree_dataclass"]))
    text = draw(shape_arg)
    if which == "runtime":
        return call(name, f"{name}[{text!r}]", lambda: cls[text], repr(text)[1:-1])
    if which == "static":
        array_type = draw(st.sampled_from([jax.Array, np.ndarray, 3, None, f32[b"a"]]))
        return call(name, f"{name}[{array_type!r}, {text!r}]", lambda: cls[array_type, text], repr(text)[1:-1])
    inner = draw(st.sampled_from([Layer, f32[b"a/d"], int, None, "Layer", f32]))
    if which == "Array":
        return call("Array", f"Array[{text!r}, {inner!r}]", lambda: Array[text, inner], repr(text)[1:-1])
    if which == "Stacked":
        return call("Stacked", f"Stacked[{inner!r}, {text!r}]", lambda: Stacked[inner, text], repr(text)[1:-1])
    if which == "number":
        return call("number", f"number[{text!r}]", lambda: shardtypes.number[text])
    target = draw(st.sampled_from(["class", "int", "instance", "options"]))

    def decorate() -> Any:
        if target == "int":
            return pytree_dataclass(3)
        if target == "instance":
            return pytree_dataclass(object())
        body = {"__annotations__": {"w": cls[text]}}
        new = type("Fuzzed", (), body)
        return pytree_dataclass(frozen=True)(new) if target == "options" else pytree_dataclass(new)
    return call("pytree_dataclass", f"pytree_dataclass({target}) with w: {name}[{text!r}]", decorate, repr(text)[1:-1])


# ---------------------------------------------------------------------------------------------
# 4 checking: check, typechecked functions, isinstance; each also under jax.jit


@functools.cache
def jitted_check(dtype: Any, spec: Any) -> Any:
    return jax.jit(lambda v: (check(dtype, spec, v), v)[1])


@functools.cache
def checked_identity(annotation: Any) -> Any:
    def identity(x):
        return x

    identity.__annotations__ = {"x": annotation, "return": annotation}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # no source to instrument: signature checks only
        checked = typechecked(identity)
    return checked, jax.jit(checked)


@st.composite
def check_calls(draw: Any) -> Any:
    value = draw(values)
    which = draw(st.sampled_from(["check", "check", "typechecked", "typechecked", "isinstance"]))
    if which == "check":
        name = draw(st.sampled_from(sorted(DTYPES) + ["f32[b'a']", "'f32'", "None", "np.floating"]))
        dtype = DTYPES.get(name, {"f32[b'a']": f32[b"a"], "'f32'": "f32", "None": None, "np.floating": np.floating}.get(name))
        spec = draw(st.one_of(shape_text, shape_text, st.sampled_from([3, None])))
        jitted = (lambda: jitted_check(dtype, spec)(value.value)) if value.jittable else None
        return call("check", f"check({name}, {spec!r}, {value.text})", lambda: check(dtype, spec, value.value),
                    "check()", repr(spec), jitted=jitted)
    ann = draw(annotations)
    if which == "isinstance":
        if not isinstance(ann.value, type):  # isinstance's own TypeError, not ours
            ann = draw(good_annotation())
        return call("isinstance", f"isinstance({value.text}, {ann.text})", lambda: isinstance(value.value, ann.value),
                    "isinstance", ann.text)
    if ann.value is None or not isinstance(ann.value, type) or (PENDING["bare_dtype_class_message"] and ann.value in DTYPES.values()):
        ann = draw(array_annotation().filter(lambda a: a.value is not None))
    checked, jitted = checked_identity(ann.value)
    return call("typechecked", f"typechecked identity(x: {ann.text})({value.text})", lambda: checked(value.value),
                "identity()", jitted=(lambda: jitted(value.value)) if value.jittable else None)


# ---------------------------------------------------------------------------------------------
# 5 layout: specs, shardings, structs, shard, explain, auto specs, validation, data layout


@functools.cache
def jitted_shard(annotation: Any, m: Any) -> Any:
    return jax.jit(lambda v: shard(v, annotation, m))


@st.composite
def layout_calls(draw: Any) -> Any:
    ann, m, d, v = draw(annotations), draw(mesh_args), draw(dims_dicts()), draw(values)
    which = draw(st.sampled_from([
        "make_partition_specs", "make_shardings", "make_shape_dtype_structs", "shard", "explain", "is_fully_sharded",
        "auto_partition_spec", "auto_partition_specs", "partition_specs_for_budget", "validate_shardings",
        "convert_specs", "data_layout", "make_global_array"]))
    a, t = ann.value, ann.text
    shape = draw(st.sampled_from([(8, 4), (8,), (6, 4), (), (-8, 4), "8,4", None]))
    spec = draw(st.sampled_from([P(), P("d"), P("t", "d"), P("zz"), P("d", "d"), "d", None]))
    names = draw(st.sampled_from([None, ["d"], ["t", "d"], [("d", "t")], ["zz"], "d", [3]]))
    calls = {
        "make_partition_specs": (lambda: make_partition_specs(a), f"make_partition_specs({t})"),
        "make_shardings": (lambda: make_shardings(a, m), f"make_shardings({t}, {m!r})"),
        "make_shape_dtype_structs": (lambda: make_shape_dtype_structs(a, d, m), f"make_shape_dtype_structs({t}, {d!r}, {m!r})"),
        "shard": (lambda: shard(v.value, a, m), f"shard({v.text}, {t}, {m!r})"),
        "explain": (lambda: explain(a, m, d), f"explain({t}, {m!r}, {d!r})"),
        "is_fully_sharded": (lambda: is_fully_sharded(spec, m), f"is_fully_sharded({spec!r}, {m!r})"),
        "auto_partition_spec": (lambda: auto_partition_spec(v.value, m, names), f"auto_partition_spec({v.text}, {m!r}, {names!r})"),
        "auto_partition_specs": (lambda: auto_partition_specs({"x": v.value}, m, names), f"auto_partition_specs({{'x': {v.text}}}, {m!r}, {names!r})"),
        "partition_specs_for_budget": (lambda: partition_specs_for_budget({"x": v.value}, 64, m, names), f"partition_specs_for_budget({{'x': {v.text}}}, 64, {m!r}, {names!r})"),
        "validate_shardings": (lambda: validate_shardings(v.value, spec, m), f"validate_shardings({v.text}, {spec!r}, {m!r})"),
        "convert_specs": (lambda: convert_specs(spec, m, mesh("explicit", (2, 2, 2), ("x", "y", "z")), v.value), f"convert_specs({spec!r}, {m!r}, xyz-mesh, {v.text})"),
        "data_layout": (lambda: data_layout(a, shape, m), f"data_layout({t}, {shape!r}, {m!r})"),
        "make_global_array": (lambda: make_global_array(np.zeros((8, 4), np.float32), a, shape, m), f"make_global_array(np.zeros((8, 4)), {t}, {shape!r}, {m!r})"),
    }
    fn, text = calls[which]
    if which == "shard" and PENDING["shard_abstract_mesh"] and isinstance(m, jax.sharding.AbstractMesh):
        m = mesh("explicit")
    if which == "shard" and PENDING["plain_dataclass"] and ann.text == "PlainLayer":
        a, t = Layer, "Layer"
    jitted = None
    if which == "shard" and not PENDING["shard_under_jit_without_set_mesh"] and isinstance(a, type) and v.jittable and not isinstance(m, (str, int, dict, list, type(None))) and isinstance(m, jax.sharding.Mesh):
        jitted = lambda: jitted_shard(a, m)(v.value)  # noqa: E731
    return call(which, text, fn, t, repr(a), "the annotation", "dims[", "mesh", "names", "spec", jitted=jitted)


# ---------------------------------------------------------------------------------------------
# 2 context: rules, Scopes in odd orders, dims, config


@st.composite
def rules_calls(draw: Any) -> Any:
    pairs = draw(rule_pairs)
    which = draw(st.sampled_from(["AxisRules", "axis_rules", "axis_rules", "t5x_rules", "eformer_rules", "merge"]))
    if which == "AxisRules":
        mode = draw(st.sampled_from([None, {"decode": [("batch", None)]}, {"": []}, [("decode", [])], {"decode": 3}]))
        return call("AxisRules", f"AxisRules({pairs!r}, modes={mode!r})", lambda: AxisRules(pairs, modes=mode), "rule", "mode")
    if which == "t5x_rules":
        args = draw(st.tuples(st.sampled_from([1, 2, 3, True, "1"]), st.sampled_from([1, 2, 0]),
                              st.sampled_from([(), [("a", "d")], 3, [("a", 3)]])))
        return call("t5x_rules", f"t5x_rules{args!r}", lambda: t5x_rules(*args), "activation_partitioning_dims", "additional_rules", "rule for")
    if which == "eformer_rules":
        kw = draw(st.dictionaries(st.sampled_from(["dp", "fsdp", "tp", "sp", "ep"]), st.sampled_from(["x", "d", "", 3]), max_size=2))
        return call("eformer_rules", f"eformer_rules(**{kw!r})", lambda: eformer_rules(**kw))
    if which == "merge":
        other = draw(rule_pairs)
        return call("AxisRules", f"AxisRules({pairs!r}).merge(AxisRules({other!r}))",
                    lambda: AxisRules(pairs).merge(AxisRules(other)), "rule", "merge")
    rules = draw(st.one_of(st.just(pairs), st.sampled_from([None, 3, "batch"])))
    mode = draw(st.sampled_from([None, None, "decode", 3]))
    ann, m = draw(annotations), draw(meshes)

    def with_rules() -> Any:
        with axis_rules(rules, mode=mode) as active:
            assert current_rules() == (None if active is None else (active, mode)), current_rules()
            return make_shardings(ann.value, m)
    return call("axis_rules", f"with axis_rules({rules!r}, mode={mode!r}): make_shardings({ann.text}, {m!r})",
                with_rules, "AxisRules", "rule", "mode", ann.text, "the annotation")


@st.composite
def scope_calls(draw: Any, in_order_only: bool) -> Any:
    """Scopes opened and closed in odd orders, checks binding names inside them; afterwards every
    Scope is closed and ``dims()`` must be what it was."""
    steps = draw(st.lists(st.tuples(st.sampled_from(["open", "close", "check", "dims"]),
                                    st.dictionaries(st.sampled_from(NAMES), st.sampled_from([1, 2, 8, -1, "x", (2, 4)]), max_size=2),
                                    st.integers(0, 3), arrays()), min_size=1, max_size=6))

    def run() -> None:
        opened: list[Scope] = []
        try:
            for kind, bindings, index, value in steps:
                if kind == "open":
                    s = Scope(**bindings)
                    s.__enter__()
                    opened.append(s)
                elif kind == "close" and opened:
                    s = opened.pop(-1 if in_order_only else index % len(opened))
                    s.__exit__(None, None, None)
                elif kind == "check":
                    with contextlib.suppress(shardtypes.TypeCheckError):
                        check(f32, "batch embed" if value.value.ndim == 2 else "batch", value.value)
                else:
                    snapshot = dict(dims())
                    assert all(isinstance(k, str) for k in snapshot)
        finally:
            while opened:
                opened.pop().__exit__(None, None, None)
    return call("Scope", repr(steps), run, "Scope(", "scope")


@st.composite
def config_calls(draw: Any) -> Any:
    attr = draw(st.sampled_from(["checks", "auto_sharding_check", "bogus"]))
    value = draw(st.sampled_from([True, False, 1, "yes", "compile", "off", None, "never"]))
    return call("config", f"config.{attr} = {value!r}", lambda: setattr(config, attr, value), f"config.{attr}", attr)


# ---------------------------------------------------------------------------------------------
# 7 kernels: shardtypes.ops inside a shard_map body (and outside one)

OP_SPECS = ["a/d b -> a b", "a b/t -> a b", "a/d b -> a/d b/t", "a b -> a/d b", "a/d b -> a b/d", "a/d b", "a b/t",
            "a b", "a/d b, b c -> a/d c", "[a/d] b, c -> c b", "a/zz b -> a b", "a -> a", "a/", "x y z -> x y z"]


@st.composite
def ops_calls(draw: Any) -> Any:
    op = draw(st.sampled_from(ops.__all__))
    spec = draw(st.one_of(st.sampled_from(OP_SPECS), shape_text, st.sampled_from([None, 3])))
    axes = draw(st.sampled_from(["d", "t", ("d", "t"), "zz", 3, (), ("d", "d")]))
    perm = draw(st.sampled_from([[(0, 1), (1, 0)], [(0, 9)], "ab", 3, [(0, 1), (0, 2)]]))
    in_spec = draw(st.sampled_from([P(), P("d"), P("d", "t"), P(None, "t")]))
    kind = draw(st.sampled_from(["explicit", "auto", "outside"]))

    def invoke(x: Any) -> Any:
        if op in ("psum", "pmean"):
            return getattr(ops, op)(spec, x, axes)
        if op == "ppermute":
            return ops.ppermute(spec, x, axes, perm)
        if op in ("axis_index", "axis_size"):
            return getattr(ops, op)(axes)
        if op == "index_unreduced":
            return ops.index_unreduced(spec, x, x)
        if op == "einsum_unreduced":
            return ops.einsum_unreduced(spec, x, x)
        return getattr(ops, op)(spec, x)

    x = np.zeros((8, 4), np.float32)
    if kind == "outside":
        fn = lambda: invoke(x)  # noqa: E731
    else:
        def fn() -> Any:
            body = lambda v: (invoke(v), v)[1]  # noqa: E731
            m = mesh(kind)
            return jax.eval_shape(jax.shard_map(body, mesh=m, in_specs=in_spec, out_specs=in_spec, check_vma=False),
                                  jax.ShapeDtypeStruct((8, 4), np.float32, sharding=NamedSharding(m, in_spec)))
    return call("ops", f"ops.{op}({spec!r}, x, axes={axes!r}, perm={perm!r}) {kind} in_specs={in_spec}", fn, f"ops.{op}")


# ---------------------------------------------------------------------------------------------
# 6 integrations: shardtypes.nnx


class NnxBlock(fnnx.Module):
    w: fnnx.Param[f32[jax.Array, b"embed/d hidden/t"]]

    def __init__(self, embed: int, hidden: int) -> None:
        self.w = fnnx.Param(np.zeros((embed, hidden), np.float32))


@functools.cache
def nnx_model(kind: str) -> Any:
    if kind == "abstract":
        return fnnx.eval_shape(lambda: NnxBlock(8, 4))
    if kind == "wrong-shape":
        return NnxBlock(6, 4)
    return NnxBlock(8, 4)


@st.composite
def nnx_calls(draw: Any) -> Any:
    model = draw(st.one_of(st.sampled_from(["abstract", "real", "wrong-shape"]).map(nnx_model), st.sampled_from([3, None, [1], "model"])))
    filters = draw(st.sampled_from([(), (fnnx.Param,), (fnnx.BatchStat,), (3,)]))
    which = draw(st.sampled_from(nnx.__all__))
    m = draw(mesh_args)
    if which == "shardings":
        fn = lambda: nnx.shardings(model, m, *filters)  # noqa: E731
    else:
        fn = lambda: getattr(nnx, which)(model, *filters)  # noqa: E731
    return call("nnx", f"nnx.{which}({type(model).__name__}, filters={filters!r}, mesh={m!r})", fn, "shardtypes.nnx")


# ---------------------------------------------------------------------------------------------
# 8 tools: verify, plan, the command


@typechecked
def step(x: f32[b"batch/d embed"], layer: Layer) -> f32[b"batch/d embed"]:
    return x


@typechecked
def with_n(x: f32[b"batch/d embed"], n: int) -> f32[b"batch/d embed"]:
    return x


RULES = AxisRules([("batch", "d"), ("embed", "t")], modes={"decode": [("batch", None)]}, name="fuzz")
NOT_AN_ANNOTATION = 3
ABSTRACT_MESHES = [{"d": 4, "t": 2}, {"d": 2}, {}, {"d": 0}, {"d": "4"}]


@st.composite
def tools_calls(draw: Any) -> Any:
    which = draw(st.sampled_from(["verify", "plan", "cli", "cli"]))
    d = draw(dims_dicts())
    m = draw(st.one_of(st.sampled_from(ABSTRACT_MESHES), meshes, bad_meshes))
    if which == "verify":
        fn = draw(st.sampled_from([step, with_n, 3, Layer]))
        static = draw(st.sampled_from([None, {"n": 3}, {3: 3}, [("n", 3)]]))
        return call("verify", f"verify({getattr(fn, '__name__', fn)}, {m!r}, {d!r}, static={static!r})",
                    lambda: verify(fn, m, d, static=static), "dims", "mesh", "static", "step()", "with_n()")
    if which == "plan":
        ann = draw(annotations)
        return call("plan", f"plan({ann.text}, {m!r}, {d!r})", lambda: plan(ann.value, m, d), "dims", "mesh", ann.text, "the annotation")
    here = __name__
    argv = [draw(st.sampled_from(["plan", "verify", "bogus"])),
            draw(st.sampled_from([f"{here}:Layer", f"{here}:step", f"{here}:with_n", f"{here}:NOT_AN_ANNOTATION",
                                  "nocolon", f"{here}:Nope", "no_such_module_xyz:X"]))]
    for flag, choices in (("--mesh", ["d=2", "d=4,t=2", "d=0", "d", "d=x", "1=2", "d=2,d=4"]),
                          ("--dims", ["embed=8,hidden=8", "batch=8,embed=4", "embed=x", "=3", "embed=-8", "hiden=8"]),
                          ("--rules", [f"{here}:RULES", f"{here}:Layer"]), ("--mode", ["decode", "prefill"]),
                          ("--static", ["n=3", "n=("]), ("--json", [None])):
        if draw(st.booleans()):
            value = draw(st.sampled_from(choices))
            argv += [flag] if value is None else [flag, value]

    def run_cli() -> None:
        out = io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            try:
                status = cli_main(list(argv))
            except SystemExit as e:
                status = e.code
        assert status in (0, 1, 2, None) or isinstance(status, str), (status, out.getvalue())
    return call("cli", f"shardtypes {' '.join(argv)}", run_cli)


FAMILIES = {
    "language": language_calls(), "annotations": annotation_calls(), "checking": check_calls(), "layout": layout_calls(),
    "rules": rules_calls(), "config": config_calls(), "ops": ops_calls(), "nnx": nnx_calls(), "tools": tools_calls(),
}
