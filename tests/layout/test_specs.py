"""Deriving layouts from annotations (shardtypes.layout.specs): make_partition_specs, make_shardings,
make_shape_dtype_structs, shard and is_fully_sharded (docs/design.md, "Trees"; issue 3, item 3).
"""

import importlib
import math
import re
import sys
import textwrap
import typing
from typing import NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from jax.sharding import AbstractMesh, AxisType, NamedSharding, PartitionSpec as P
from typeguard import TypeCheckError

from shardtypes import (
    Array,
    bf16,
    f32,
    field,
    floating,
    i32,
    is_fully_sharded,
    make_partition_specs,
    make_shape_dtype_structs,
    make_shardings,
    pytree_dataclass,
    shard,
    typechecked,
)

from conftest import make_mesh, put

S = jax.ShapeDtypeStruct


@pytree_dataclass
class Layer:
    w: f32["embed/d hidden/t"]
    b: f32["hidden/t"]
    n: int = field(default=2, metadata={"static": True})


@pytree_dataclass
class Model:
    layers: Array["layers", Layer]
    emb: bf16["vocab/t embed/d"]
    norm: f32["embed"]
    extra: Optional[f32["2*embed/d"]] = None


class Pair(NamedTuple):
    x: f32["batch/d seq"]
    y: Optional[i32["batch/d"]]


def specs_of(tree):
    """The PartitionSpec of every leaf of a tree of shardings or arrays."""
    def spec(x):
        return x.sharding.spec if hasattr(x, "sharding") else x.spec

    return jax.tree.map(spec, tree)


# ---------------------------------------------------------------------------------------------
# make_partition_specs


@pytest.mark.parametrize(
    "annotation, spec",
    [
        (f32[b"batch/d seq embed/t"], P("d", None, "t")),
        (f32["batch/d seq embed/t"], P("d", None, "t")),
        (bf16[b"a/d/t b"], P(("d", "t"), None)),
        (i32[b"a b c"], P(None, None, None)),
        (f32[b""], P()),
        (f32[b"a/d ..."], P("d")),
        (f32[b"2*a/t #b"], P("t", None)),
    ],
)
def test_partition_specs_of_array_annotations(annotation, spec):
    assert make_partition_specs(annotation) == spec


def test_partition_specs_of_nested_and_stacked_dataclasses():
    specs = make_partition_specs(Model)
    assert type(specs) is Model and type(specs.layers) is Array["layers", Layer]
    assert specs.layers.w == P(None, "d", "t")  # the stacked axis is leading and unsharded
    assert specs.layers.b == P(None, "t")
    assert specs.layers.n == 2  # static fields keep their defaults
    assert specs.emb == P("t", "d") and specs.norm == P(None) and specs.extra == P("d")
    staged = make_partition_specs(Array["stages layers", Layer])
    assert staged.w == P(None, None, "d", "t")


def test_partition_specs_of_containers():
    assert make_partition_specs(tuple[f32[b"a/d"], bf16[b"b c/t"]]) == (P("d"), P(None, "t"))
    assert make_partition_specs([f32[b"a/d"], f32["b"]]) == [P("d"), P(None)]
    assert make_partition_specs({"k": f32[b"a/d/t"], "j": (f32[b""], Layer)}) == {
        "k": P(("d", "t")),
        "j": (P(), Layer(w=P("d", "t"), b=P("t"))),
    }
    assert make_partition_specs(Optional[f32[b"a/d"]]) == P("d")
    assert make_partition_specs(Pair) == Pair(x=P("d", None), y=P("d"))
    assert type(make_partition_specs(Pair)) is Pair


@pytest.mark.parametrize(
    "annotation, message",
    [
        (tuple[f32[b"a"], ...], r"has no fixed length, so no layout tree"),
        (typing.Union[f32[b"a"], i32[b"a"]], r"a Union of several types .* has no single layout"),
        (int, r"the annotation is <class 'int'>, which has no layout"),
        ("f32", r"the annotation is the string 'f32': pass the annotation itself"),
        ({"k": [int]}, r"\['k'\]\[0\] is <class 'int'>, which has no layout"),
    ],
)
def test_partition_specs_of_bad_annotations(annotation, message):
    with pytest.raises(TypeError, match=message):
        make_partition_specs(annotation)


PEP563_MODULE = '''
from __future__ import annotations

from typing import NamedTuple, Optional

from shardtypes import Array, bf16, f32, field, pytree_dataclass


@pytree_dataclass
class Block:
    w: f32[b"embed/d hidden/t"]
    b: Optional[f32["hidden/t"]] = None
    n: int = field(default=1, metadata={"static": True})


class Pair(NamedTuple):
    x: f32["a/d"]
    y: bf16["a b/t"]


@pytree_dataclass
class Net:
    blocks: Array["layers", Block]
    pair: Pair
    emb: bf16["vocab/t embed/d"]
'''


@pytest.fixture
def pep563(tmp_path, monkeypatch):
    name = "shardtypes_pep563_test_module"
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(PEP563_MODULE))
    monkeypatch.syspath_prepend(str(tmp_path))
    module = importlib.import_module(name)
    yield module
    sys.modules.pop(name, None)


def test_pep563_string_annotations(pep563):
    assert isinstance(pep563.Net.__annotations__["emb"], str)  # really PEP 563
    specs = make_partition_specs(pep563.Net)
    assert specs.blocks.w == P(None, "d", "t") and specs.blocks.b == P(None, "t") and specs.blocks.n == 1
    assert specs.pair == pep563.Pair(x=P("d"), y=P(None, "t"))
    assert specs.emb == P("t", "d")
    assert make_partition_specs(Array["stages", pep563.Block]).w == P(None, "d", "t")
    structs = make_shape_dtype_structs(
        pep563.Net, dict(embed=8, hidden=4, layers=2, vocab=2, a=4, b=2), make_mesh("auto")
    )
    assert structs.pair.y.shape == (4, 2) and structs.pair.y.dtype == jnp.bfloat16
    assert structs.blocks.w.shape == (2, 8, 4)


# ---------------------------------------------------------------------------------------------
# make_shardings


def test_make_shardings_with_an_explicit_mesh(mesh):
    shardings = make_shardings(Model, mesh)
    assert type(shardings) is Model
    for s in jax.tree.leaves(shardings):
        assert isinstance(s, NamedSharding) and s.mesh is mesh
    assert specs_of(shardings) == make_partition_specs(Model)
    assert make_shardings({"a": f32[b"a/d b/t"]}, mesh=mesh) == {"a": NamedSharding(mesh, P("d", "t"))}


def test_make_shardings_with_the_current_mesh(mesh):
    with jax.set_mesh(mesh):
        s = make_shardings(f32[b"a/d b"])
    assert s == NamedSharding(mesh, P("d", None)) and s.mesh is mesh


@jax.jit
def _shardings_under_jit(x):
    s = make_shardings(Layer)
    assert isinstance(s.w.mesh, AbstractMesh)
    _shardings_under_jit.seen = s
    return x


def test_make_shardings_under_jit_uses_the_abstract_mesh():
    mesh = make_mesh("explicit")
    with jax.set_mesh(mesh):
        _shardings_under_jit(jnp.ones(8))
    s = _shardings_under_jit.seen
    assert s.w.spec == P("d", "t") and s.b.spec == P("t")
    assert s.w.mesh == mesh.abstract_mesh
    assert s.w.mesh.axis_types == (AxisType.Explicit, AxisType.Explicit)


def test_make_shardings_axis_not_in_the_mesh():
    mesh = make_mesh("auto")
    module = Layer.__module__
    with pytest.raises(
        ValueError,
        match=re.escape(
            f"Array['layers/p', {module}.Layer].w (f32[b'layers/p embed/d hidden/t']): dim 0 'layers/p' is "
            "sharded over mesh axis 'p', which the mesh does not have (axes: ('d', 't'))"
        ),
    ):
        make_shardings(Array["layers/p", Layer], mesh)
    with pytest.raises(ValueError, match=re.escape("the annotation (f32[b'a/x']): dim 0 'a/x' is sharded over mesh axis 'x'")):
        make_shardings(f32[b"a/x"], mesh)


def test_make_shardings_fixed_dim_not_divisible():
    mesh = make_mesh("explicit")
    with pytest.raises(
        ValueError,
        match=re.escape(
            "['k'][0] (f32[b'a 3/t']): dim 1 '3/t' has size 3, which does not divide over mesh axes "
            "('t',) of total size 2"
        ),
    ):
        make_shardings({"k": [f32[b"a 3/t"]]}, mesh)
    with pytest.raises(ValueError, match=r"dim 0 '6/d/t' has size 6, which does not divide .* of total size 8"):
        make_shardings(f32[b"6/d/t"], mesh)
    assert make_shardings(f32[b"8/d/t"], mesh).spec == P(("d", "t"))


def test_make_shardings_without_a_mesh():
    with pytest.raises(ValueError, match=re.escape("make_shardings: no mesh; pass mesh=... or set one with `with jax.set_mesh(mesh):`")):
        make_shardings(f32[b"a/d"])


# ---------------------------------------------------------------------------------------------
# make_shape_dtype_structs

DIMS = dict(embed=8, hidden=4, layers=3, vocab=6)


def test_shape_dtype_structs_of_a_tree(mesh):
    structs = make_shape_dtype_structs(Model, DIMS, mesh)
    assert structs.layers.w == S((3, 8, 4), jnp.float32, sharding=NamedSharding(mesh, P(None, "d", "t")))
    assert structs.layers.b.shape == (3, 4) and structs.layers.n == 2
    assert structs.emb == S((6, 8), jnp.bfloat16, sharding=NamedSharding(mesh, P("t", "d")))
    assert structs.norm.shape == (8,) and structs.norm.sharding.spec == P(None)
    assert structs.extra.shape == (16,) and structs.extra.sharding.spec == P("d")


@pytest.mark.parametrize(
    "annotation, dims, shape",
    [
        (f32[b"a 3 b"], {"a": 2, "b": 5}, (2, 3, 5)),
        (f32[b"*lead a #b 2*a+1 a//2 (a-1)*b"], {"lead": (2, 5), "a": 4, "b": 7}, (2, 5, 4, 7, 9, 2, 21)),
        (f32[b"*lead a"], {"lead": (), "a": 4}, (4,)),
        (i32[b""], {}, ()),
    ],
)
def test_shape_dtype_struct_shapes(annotation, dims, shape):
    struct = make_shape_dtype_structs(annotation, dims)
    assert struct.shape == shape and struct.dtype == jnp.dtype(annotation.dtype)
    assert struct.sharding is None  # no mesh anywhere


def test_shape_dtype_structs_with_the_current_mesh_and_variadic_lead():
    mesh = make_mesh("auto")
    with jax.set_mesh(mesh):
        struct = make_shape_dtype_structs(f32[b"*lead a/d"], {"lead": (2, 3), "a": 8})
    assert struct.shape == (2, 3, 8) and struct.sharding == NamedSharding(mesh, P(None, None, "d"))


@pytest.mark.parametrize(
    "annotation, dims, error, message",
    [
        (Model, dict(embed=8, layers=3, vocab=6), ValueError,
         r"Model\.layers\.w \(f32\[b'layers embed/d hidden/t'\]\): dim 2 'hidden/t' needs the size of "
         r"'hidden'; pass it in dims \(given: \['embed', 'layers', 'vocab'\]\)"),
        (f32[b"a+b"], {"a": 1}, ValueError, r"dim 0 'a\+b' needs the size of 'b'; pass it in dims \(given: \['a'\]\)"),
        (f32[b"*lead"], {}, ValueError, r"dim 0 '\*lead' needs dims\['lead'\], a tuple of sizes"),
        (f32[b"_ a"], {"a": 1}, ValueError, r"dim 0 is '_' \(any size\), so it has no shape"),
        (f32[b"a ..."], {"a": 1}, ValueError, r"dim 1 is '...', which has no shape"),
        (floating[b"a"], {"a": 1}, ValueError, r"floating is a category of dtypes; a ShapeDtypeStruct needs one dtype"),
        (f32[b"a"], [("a", 1)], TypeError, r"dims must be a mapping of dim name to size, as \{'batch': 8\}, got list \[\('a', 1\)\]"),
    ],
)
def test_shape_dtype_struct_errors(annotation, dims, error, message):
    with pytest.raises(error, match=message):
        make_shape_dtype_structs(annotation, dims, make_mesh("auto"))


def test_shape_dtype_struct_dim_not_divisible():
    with pytest.raises(
        ValueError,
        match=re.escape(
            "Model.emb (bf16[b'vocab/t embed/d']): dim 0 'vocab/t' has size 5, which does not divide "
            "over mesh axes ('t',) of total size 2"
        ),
    ):
        make_shape_dtype_structs(Model, dict(DIMS, vocab=5), make_mesh("auto"))


@typechecked
def model_step(m: Model, x: f32[b"batch/d embed"]) -> bf16[b"vocab/t embed/d"]:
    return m.emb * 2


def test_shape_dtype_structs_with_jax_eval_shape():
    mesh = make_mesh("explicit")
    structs = make_shape_dtype_structs((Model, f32[b"batch/d embed"]), dict(DIMS, batch=4), mesh)
    out = jax.eval_shape(model_step, *structs)
    assert out.shape == (6, 8) and out.dtype == jnp.bfloat16


def test_shape_dtype_structs_on_an_abstract_mesh_pass_a_checked_function():
    mesh = AbstractMesh((64, 64), ("d", "t"), axis_types=(AxisType.Explicit,) * 2)
    dims = dict(embed=128, hidden=64, layers=3, vocab=64, batch=256)
    model, x = make_shape_dtype_structs((Model, f32[b"batch/d embed"]), dims, mesh)
    assert model.layers.w.sharding.mesh is mesh and model.layers.w.sharding.spec == P(None, "d", "t")
    out = jax.eval_shape(model_step, model, x)
    assert out.shape == (64, 128) and out.sharding.spec == P("t", "d")
    # The same structs with a wrong size are caught by the check.
    bad_x = S((256, 64), jnp.float32, sharding=NamedSharding(mesh, P("d", None)))
    with pytest.raises(TypeCheckError, match=r"dimension 'embed' is 64 here .* bound to 128"):
        jax.eval_shape(model_step, model, bad_x)


# ---------------------------------------------------------------------------------------------
# shard


def test_shard_an_array_eagerly(mesh):
    y = shard(jnp.ones((8, 4)), f32[b"embed/d hidden/t"], mesh)
    assert y.sharding == NamedSharding(mesh, P("d", "t"))
    with jax.set_mesh(mesh):
        z = shard(np.ones((8, 4), np.float32), f32[b"embed hidden/t"])
    assert z.sharding.is_equivalent_to(NamedSharding(mesh, P(None, "t")), 2)


def test_shard_a_tree_eagerly(mesh):
    value = Model(
        layers=Array["layers", Layer](w=jnp.ones((3, 8, 4)), b=jnp.ones((3, 4))),
        emb=jnp.ones((6, 8), jnp.bfloat16),
        norm=jnp.ones(8),
        extra=jnp.ones(16),
    )
    placed = shard(value, Model, mesh)
    assert type(placed) is Model and placed.layers.n == 2
    assert specs_of(placed) == Model(
        layers=Array["layers", Layer](w=P(None, "d", "t"), b=P(None, "t")),
        emb=P("t", "d"),
        norm=P(None),
        extra=P("d"),
    )
    for leaf in jax.tree.leaves(placed):
        assert leaf.sharding.mesh is mesh


@jax.jit
def _shard_in_jit(layer):
    out = shard(layer, Layer)
    _shard_in_jit.traced = jax.tree.map(lambda a: jax.typeof(a).sharding.spec, out)
    return out


def test_shard_under_jit(mesh):
    layer = Layer(w=put(mesh, jnp.ones((8, 4))), b=put(mesh, jnp.ones(4)))  # replicated
    with jax.set_mesh(mesh):
        out = _shard_in_jit(layer)
    assert out.w.sharding.is_equivalent_to(NamedSharding(mesh, P("d", "t")), 2)
    assert out.b.sharding.is_equivalent_to(NamedSharding(mesh, P("t")), 1)
    if mesh.axis_types[0] == AxisType.Explicit:  # reshard: the type says so at trace time
        assert _shard_in_jit.traced == Layer(w=P("d", "t"), b=P("t"))


def test_shard_mismatched_tree():
    mesh = make_mesh("auto")
    x = jnp.ones((8, 4))
    with pytest.raises(
        ValueError,
        match=re.escape(
            "shard: the value's leaves do not match the annotation's: value has "
            "[\"['b']\", \"['w']\"], annotation has ['.w', '.b']"
        ),
    ):
        shard({"w": x, "b": x}, Layer, mesh)
    with pytest.raises(ValueError, match=re.escape("value has ['.w', '.b'], annotation has ['']")):
        shard(Layer(w=x, b=jnp.ones(4)), f32[b"a/d b"], mesh)


def test_shard_without_a_mesh():
    with pytest.raises(ValueError, match=re.escape("shard: no mesh; pass mesh=...")):
        shard(jnp.ones(8), f32[b"a/d"])


def test_shard_optional_field_left_none():
    mesh = make_mesh("auto")
    value = Model(
        layers=Array["layers", Layer](w=jnp.ones((3, 8, 4)), b=jnp.ones((3, 4))),
        emb=jnp.ones((6, 8), jnp.bfloat16),
        norm=jnp.ones(8),
    )
    placed = shard(value, Model, mesh)
    assert placed.extra is None and placed.emb.sharding.spec == P("t", "d")


# ---------------------------------------------------------------------------------------------
# is_fully_sharded


def test_is_fully_sharded_with_a_mesh(mesh):
    assert is_fully_sharded(P("d", "t"), mesh=mesh)
    assert is_fully_sharded(P(("t", "d")), mesh=mesh)
    assert not is_fully_sharded(P("d"), mesh=mesh)
    assert not is_fully_sharded(P(None, "t"), mesh=mesh)


def test_is_fully_sharded_with_the_current_mesh(mesh):
    with jax.set_mesh(mesh):
        assert is_fully_sharded(P(None, ("d", "t")))
        assert not is_fully_sharded(P("d", None))


def test_is_fully_sharded_inside_shard_map(mesh):
    def body(a):
        return jnp.full((1,), is_fully_sharded(P("d")), dtype=jnp.int32)

    x = put(mesh, jnp.ones(8), "d")
    # Only 'd' manual: P('d') uses every manual axis.
    partial = jax.shard_map(body, mesh=mesh, in_specs=P("d"), out_specs=P("d"), axis_names={"d"})(x)
    np.testing.assert_array_equal(partial, [1, 1, 1, 1])
    # Both axes manual: P('d') leaves 't' out.
    full = jax.shard_map(body, mesh=mesh, in_specs=P("d"), out_specs=P(("d", "t")))(x)
    np.testing.assert_array_equal(full, [0] * 8)


def test_is_fully_sharded_without_a_mesh():
    with pytest.raises(ValueError, match=re.escape("is_fully_sharded: no mesh; pass mesh=... or set one with `with jax.set_mesh(mesh):`")):
        is_fully_sharded(P("d"))


# ---------------------------------------------------------------------------------------------
# Property: on random meshes, annotations whose sizes are multiples of their axes give structs
# whose sharded dims divide, and make_shardings never raises.

AXIS_NAMES = ("a", "b", "c")


@st.composite
def mesh_and_annotations(draw):
    n = draw(st.integers(1, 3))
    sizes = []
    for _ in range(n):
        left = 8 // math.prod(sizes) if sizes else 8
        sizes.append(draw(st.sampled_from([s for s in (1, 2, 4) if s <= left])))
    names = AXIS_NAMES[:n]
    kind = draw(st.sampled_from([AxisType.Explicit, AxisType.Auto]))
    mesh = AbstractMesh(tuple(sizes), names, axis_types=(kind,) * n)
    axis_size = dict(zip(names, sizes))
    annotations, expected, dims = [], [], {}
    for k in range(draw(st.integers(1, 3))):
        free = list(draw(st.permutations(names)))  # each annotation uses every mesh axis at most once
        text, entries, shape = [], [], []
        for i in range(draw(st.integers(0, 4))):
            j = draw(st.integers(0, min(2, len(free))))
            used, free = free[:j], free[j:]
            parts = math.prod(axis_size[a] for a in used)
            multiple = parts * draw(st.integers(1, 3))
            form = draw(st.sampled_from(["named", "fixed", "double"]))
            if form == "fixed":
                size_text, size = str(multiple), multiple
            else:
                name = f"n{k}_{i}"
                dims[name] = multiple
                size_text, size = (name, multiple) if form == "named" else (f"2*{name}", 2 * multiple)
            text.append(size_text + "".join("/" + a for a in used))
            entries.append(used[0] if len(used) == 1 else (tuple(used) if used else None))
            shape.append(size)
        annotations.append(f32[" ".join(text).encode()])
        expected.append((tuple(shape), P(*entries)))
    return mesh, annotations, expected, dims


@settings(max_examples=60, deadline=None)
@given(mesh_and_annotations())
def test_property_shape_dtype_structs_divide(case):
    mesh, annotations, expected, dims = case
    structs = make_shape_dtype_structs(tuple(annotations), dims, mesh)
    shardings = make_shardings(tuple(annotations), mesh)
    sizes = dict(zip(mesh.axis_names, mesh.axis_sizes))
    for struct, sharding, (shape, spec) in zip(structs, shardings, expected):
        assert struct.shape == shape and struct.dtype == jnp.float32
        assert struct.sharding.spec == spec and sharding.spec == spec and sharding.mesh == mesh
        for size, entry in zip(struct.shape, spec):
            axes = () if entry is None else ((entry,) if isinstance(entry, str) else entry)
            assert size % math.prod(sizes[a] for a in axes) == 0


# ---------------------------------------------------------------------------------------------
# Input validation (the catalogue in test_catalogue.py has more).


def test_shape_dtype_structs_check_sizes_and_names():
    with pytest.raises(ValueError, match=re.escape("make_shape_dtype_structs: dims['a'] is -1; a size cannot be negative")):
        make_shape_dtype_structs(f32[b"a"], {"a": -1})
    with pytest.raises(ValueError, match=re.escape("dims gives 'hiden' (did you mean 'hidden'?), which no annotation uses")):
        make_shape_dtype_structs(f32[b"embed hidden"], {"embed": 2, "hidden": 4, "hiden": 4})
    with pytest.raises(ValueError, match=re.escape("dim 0 'a//b' has a division by zero with a=8, b=0")):
        make_shape_dtype_structs(f32[b"a//b"], {"a": 8, "b": 0})
    with pytest.raises(TypeError, match=re.escape("dims['a'] is the tuple (2, 3), but 'a' is one dim here")):
        make_shape_dtype_structs(f32[b"a"], {"a": (2, 3)})
    assert make_shape_dtype_structs(f32[b"a//b"], {"a": np.int64(8), "b": 2}).shape == (4,)


def test_one_table_of_sizes_serves_every_part_of_a_model():
    # A name no annotation here uses is fine unless it is close to one they do (a typo).
    dims = {"batch": 8, "seq": 16, "embed": 4, "hidden": 8}
    assert make_shape_dtype_structs(f32[b"embed hidden"], dims).shape == (4, 8)
    with pytest.raises(ValueError, match=re.escape("dims gives 'embd' (did you mean 'embed'?)")):
        make_shape_dtype_structs(f32[b"embed hidden"], {**dims, "embd": 4})


def test_annotation_trees_must_be_finite():
    tree = [f32[b"a"]]
    tree.append(tree)
    with pytest.raises(ValueError, match=re.escape("[1] contains itself (a list that holds itself)")):
        make_partition_specs(tree)
    deep = f32[b"a"]
    for _ in range(100):
        deep = [deep]
    with pytest.raises(ValueError, match="nested more than 64 levels deep"):
        make_partition_specs(deep)


def test_mesh_arguments_are_meshes():
    with pytest.raises(TypeError, match=re.escape("make_shardings: mesh must be a Mesh or an AbstractMesh")):
        make_shardings(f32[b"a/d"], "d")
    with pytest.raises(TypeError, match=re.escape("shard: mesh must be a Mesh or an AbstractMesh")):
        shard(jnp.zeros(4), f32[b"a/d"], {"d": 4})


def test_shard_checks_the_value(mesh):
    with pytest.raises(TypeError, match=re.escape("shard: value is None, but its annotation f32[b'a/d'] is not Optional[...]")):
        shard(None, f32[b"a/d"], mesh)
    with pytest.raises(TypeError, match=re.escape("shard: value['w'] is str 'x', not an array")):
        shard({"w": "x"}, {"w": f32[b"a/d"]}, mesh)
    with pytest.raises(ValueError, match=re.escape("shard: value has rank 1, but its annotation f32[b'a/d b'] has 2 dims")):
        shard(jnp.zeros(8), f32[b"a/d b"], mesh)
    assert shard({"w": None}, {"w": Optional[f32[b"a/d"]]}, mesh) == {"w": None}


def test_is_fully_sharded_checks_spec_and_axes(mesh):
    with pytest.raises(TypeError, match=re.escape("is_fully_sharded: spec must be a PartitionSpec")):
        is_fully_sharded("d", mesh)
    with pytest.raises(ValueError, match=re.escape("is_fully_sharded: P('x',) names mesh axis 'x', which is not in the mesh")):
        is_fully_sharded(P("x"), mesh)


# --- issue 19, item 3: a plain dataclass (not a pytree) -----------------------------------------

import dataclasses as _dataclasses  # noqa: E402


@_dataclasses.dataclass
class PlainLayer:
    w: f32[b"embed/d hidden/t"]
    b: f32[b"hidden/t"]
    name: str = "layer"


def test_a_plain_dataclass_instance_has_its_classs_layout(mesh):
    layer = PlainLayer(jnp.zeros((8, 4)), jnp.zeros(4), "first")
    specs = make_partition_specs(layer)
    assert (specs.w, specs.b, specs.name) == (P("d", "t"), P("t"), "first")
    assert make_partition_specs(PlainLayer) == PlainLayer(P("d", "t"), P("t"), "layer")
    shardings = make_shardings(layer, mesh)
    assert shardings.w.spec == P("d", "t") and shardings.w.mesh.shape == mesh.shape
    structs = make_shape_dtype_structs(PlainLayer, {"embed": 8, "hidden": 4}, mesh)
    assert structs.w.shape == (8, 4) and structs.name == "layer"


def test_shard_lays_a_plain_dataclass_out_field_by_field(mesh):
    layer = PlainLayer(jnp.ones((8, 4)), jnp.ones(4), "first")
    with jax.set_mesh(mesh):
        placed = shard(layer, PlainLayer)
        assert placed.w.sharding.is_equivalent_to(NamedSharding(mesh, P("d", "t")), 2)
        assert placed.b.sharding.is_equivalent_to(NamedSharding(mesh, P("t")), 1)
        assert placed.name == "first" and layer.w is not placed.w  # a copy; the value is untouched
        placed = shard(layer, layer)  # an instance as the annotation, as make_partition_specs takes
        assert placed.w.sharding.is_equivalent_to(NamedSharding(mesh, P("d", "t")), 2)

        @jax.jit
        def inside(w, b):
            return shard(PlainLayer(w, b), PlainLayer).w

        assert inside(layer.w, layer.b).shape == (8, 4)


def test_shard_of_a_plain_dataclass_against_another_annotation_says_what_to_pass(mesh):
    layer = PlainLayer(jnp.ones((8, 4)), jnp.ones(4))
    with jax.set_mesh(mesh):
        with pytest.raises(TypeError, match=r"shard: value is a PlainLayer \(a dataclass that is not a pytree\), but the annotation is .*f32\[b'a'\]; pass its class"):
            shard(layer, f32[b"a"])
        with pytest.raises(TypeError, match=r"shard: value is float32\[8,4\].*, but its annotation is the dataclass PlainLayer; pass an instance of it"):
            shard(jnp.ones((8, 4)), PlainLayer)
        with pytest.raises(ValueError, match=r"shard: .*dim 0 has size 7, which does not divide"):
            shard(PlainLayer(jnp.ones((7, 4)), jnp.ones(4)), PlainLayer)
