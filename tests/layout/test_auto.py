"""Automatic specs (shardtypes.layout.auto): auto_partition_spec(s), partition_specs_for_budget,
validate_shardings and convert_specs (issue 4, item 5).
"""

import dataclasses
import math
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from jax.sharding import AbstractMesh, NamedSharding, PartitionSpec as P

from shardtypes.layout import (
    ShardingProblem,
    auto_partition_spec,
    auto_partition_specs,
    convert_specs,
    partition_specs_for_budget,
    validate_shardings,
)

from conftest import make_mesh

S = jax.ShapeDtypeStruct


def zeros(*shape, dtype=jnp.float32):
    return jnp.zeros(shape, dtype)


def axes_of(spec):
    return [a for e in spec if e is not None for a in ((e,) if isinstance(e, str) else e)]


def parallelism(spec, mesh):
    return math.prod(dict(mesh.shape)[a] for a in axes_of(spec))


def kinds(problems):
    return [p.kind for p in problems]


# ------------------------------------------------------------------ auto_partition_spec


@pytest.mark.parametrize(
    "shape, expected",
    [
        ((16, 8), P("d", "t")),  # largest dim takes the largest axis
        ((6, 8), P("t", "d")),  # 8 is the largest dim, so it takes 'd'; 6 takes 't'
        ((6, 10), P(None, "t")),  # 4 divides neither; 't' goes to the larger dim
        ((8, 16, 3), P("t", "d", None)),
        ((3, 5), P()),  # nothing divides: replicated
        ((64,), P("d")),  # one dim takes one axis only (eFormer's rule)
    ],
)
def test_largest_dims_take_largest_axes(mesh, shape, expected):
    x = zeros(*shape)
    spec = auto_partition_spec(x, mesh)
    assert spec == expected
    # The spec is usable as is on the real mesh.
    y = jax.device_put(x, NamedSharding(mesh, spec))
    assert y.sharding.is_equivalent_to(NamedSharding(mesh, expected), x.ndim)


def test_inputs_numpy_shape_dtype_struct_and_abstract_mesh(mesh):
    abstract = AbstractMesh((4, 2), ("d", "t"))
    for x in (np.zeros((16, 8)), S((16, 8), jnp.bfloat16), zeros(16, 8)):
        assert auto_partition_spec(x, mesh) == P("d", "t")
        assert auto_partition_spec(x, abstract) == P("d", "t")
    with pytest.raises(TypeError, match=r"auto_partition_spec: the array is list .*\.shape"):
        auto_partition_spec([1, 2, 3], mesh)


def test_current_mesh_eager_and_under_jit(mesh):
    with pytest.raises(ValueError, match="auto_partition_spec: no mesh"):
        auto_partition_spec(zeros(16, 8))
    with jax.set_mesh(mesh):
        assert auto_partition_spec(zeros(16, 8)) == P("d", "t")

        @jax.jit
        def f(x):
            assert isinstance(x, jax.core.Tracer)
            assert auto_partition_spec(x) == P("d", "t")
            return x * 2

        f(zeros(16, 8))


def test_reverse(mesh):
    # Smallest dims first: 8 takes 'd', then 16 takes 't'.
    assert auto_partition_spec(zeros(16, 8), mesh) == P("d", "t")
    assert auto_partition_spec(zeros(16, 8), mesh, reverse=True) == P("t", "d")
    # Ties keep dim order either way; a size-1 dim never takes an axis.
    assert auto_partition_spec(zeros(1, 8, 8), mesh, reverse=True) == P(None, "d", "t")


def test_names_order_and_tuples(mesh):
    x = zeros(16, 8)
    assert auto_partition_spec(x, mesh, names=["t", "d"]) == P("t", "d")
    assert auto_partition_spec(x, mesh, names=["t"]) == P("t", None)
    assert auto_partition_spec(zeros(512, 1024), mesh, names=[("d", "t")]) == P(None, ("d", "t"))
    # A tuple first, single axes as fallbacks: an axis already used is never taken again.
    names = [("d", "t"), "d", "t"]
    assert auto_partition_spec(zeros(16, 12), mesh, names=names) == P(("d", "t"), None)
    assert auto_partition_spec(zeros(12, 6), mesh, names=names) == P("d", "t")
    assert auto_partition_spec(zeros(12, 6), mesh, names=[]) == P()


def test_names_are_validated(mesh):
    with pytest.raises(ValueError, match=r"names has 'x', which is not an axis of the mesh \(axes: \('d', 't'\)"):
        auto_partition_spec(zeros(16, 8), mesh, names=["d", ("t", "x")])
    with pytest.raises(TypeError, match=r"names=\['d'\]"):
        auto_partition_spec(zeros(16, 8), mesh, names="d")
    with pytest.raises(TypeError, match="each entry of names"):
        auto_partition_spec(zeros(16, 8), mesh, names=[("d", 3)])
    with pytest.raises(ValueError, match="repeats a mesh axis"):
        auto_partition_spec(zeros(16, 8), mesh, names=[("d", "d")])


def test_min_sharding_size(mesh):
    # Default: the number of devices (8). Four elements are too few.
    assert auto_partition_spec(zeros(4, 1), mesh) == P()
    assert auto_partition_spec(zeros(4, 2), mesh) == P("d", "t")
    assert auto_partition_spec(zeros(4, 1), mesh, min_sharding_size=1) == P("d", None)
    assert auto_partition_spec(zeros(16, 8), mesh, min_sharding_size=129) == P()
    assert auto_partition_spec(zeros(16, 8), mesh, min_sharding_size=128) == P("d", "t")


@pytest.mark.parametrize("kind", ["explicit", "auto"])
def test_size_one_axes_are_never_used(kind):
    mesh = make_mesh(kind, (8, 1), ("d", "one"))
    assert auto_partition_spec(zeros(16, 8), mesh) == P("d", None)
    assert auto_partition_spec(zeros(16, 8), mesh, names=["one"]) == P()
    assert auto_partition_spec(zeros(16, 8), mesh, names=["one", "d"]) == P("d", None)
    assert auto_partition_spec(zeros(16, 8), mesh, names=[("one", "d")]) == P("d", None)
    abstract = AbstractMesh((1, 1), ("a", "b"))
    assert auto_partition_spec(S((16, 8), jnp.float32), abstract, min_sharding_size=1) == P()


def test_auto_partition_specs_tree(mesh):
    tree = {"w": zeros(64, 32), "b": zeros(3), "layers": [zeros(4, 8, 16), None]}
    specs = auto_partition_specs(tree, mesh)
    assert specs == {"w": P("d", "t"), "b": P(), "layers": [P(None, "t", "d"), None]}
    assert auto_partition_specs(tree, mesh, names=["t"])["w"] == P("t", None)
    assert auto_partition_specs(tree, mesh, reverse=True)["layers"][0] == P("d", "t", None)
    with pytest.raises(TypeError, match=r"auto_partition_specs: \['x'\]\[1\] is int"):
        auto_partition_specs({"x": [zeros(8), 3]}, mesh)


# ------------------------------------------------------------------ memory budget


def per_device_bytes(x, spec, mesh):
    return x.size * x.dtype.itemsize // parallelism(spec, mesh)


def test_budget_least_sharding_that_fits(mesh):
    w = zeros(1024, 1024)  # 4 MiB
    b = zeros(1024)  # 4 KiB
    specs = partition_specs_for_budget({"w": w, "b": b}, 2**20, mesh)
    assert specs == {"w": P("d", None), "b": P()}
    # Halving the parallelism need: the 2-way axis is enough.
    assert partition_specs_for_budget({"w": w}, 2 * 2**20, mesh) == {"w": P("t", None)}
    # Needing all 8 devices: both axes, on different dims (largest remaining dim first).
    assert partition_specs_for_budget({"w": w}, 2**19, mesh) == {"w": P("d", "t")}
    # One dim may take several axes.
    assert partition_specs_for_budget(zeros(4096), 2048, mesh) == P(("d", "t"))
    for budget in (2**19, 2**20, 3 * 2**20, 4 * 2**20 - 1):
        spec = partition_specs_for_budget(w, budget, mesh)
        assert per_device_bytes(w, spec, mesh) <= budget
        # Least: no smaller parallelism on this mesh (1, 2, 4, 8) would fit.
        smaller = [p for p in (1, 2, 4, 8) if p < parallelism(spec, mesh)]
        assert all(w.size * 4 // p > budget for p in smaller)


def test_budget_leaves_under_budget_stay_replicated(mesh):
    tree = {"a": zeros(1024, 1024), "b": zeros(8, 8, dtype=jnp.bfloat16)}
    assert partition_specs_for_budget(tree, 4 * 2**20, mesh) == {"a": P(), "b": P()}
    assert partition_specs_for_budget(S((64, 64), jnp.int8), 4096, mesh) == P()


def test_budget_names_limit_the_axes(mesh):
    w = S((1024, 1024), jnp.float32)
    assert partition_specs_for_budget(w, 2 * 2**20, mesh, names=["t"]) == P("t", None)
    assert partition_specs_for_budget(w, 2**19, mesh, names=[("d", "t")]) == P(("d", "t"), None)
    with pytest.raises(ValueError, match=r"at best 2 MiB .* per device with P\('t', None\) over 2 devices"):
        partition_specs_for_budget(w, 2**20, mesh, names=["t"])


def test_budget_impossible_names_every_failing_leaf(mesh):
    tree = {
        "ok": zeros(2),
        "odd": zeros(3, 5),  # nothing divides: 60 bytes at best
        "nested": {"half": zeros(6, 5)},  # only 't' divides: 120 -> 60 bytes
        "fine": zeros(8, 4),  # 128 bytes -> needs 4 ways, gets them
    }
    with pytest.raises(ValueError) as info:
        partition_specs_for_budget(tree, 40, mesh)
    message = str(info.value)
    assert message.startswith("partition_specs_for_budget: 2 leaves cannot fit in 40 bytes per device")
    assert re.search(r"\['odd'\]: shape \(3, 5\), dtype float32, 60 bytes in all; at best 60 bytes per device", message)
    assert re.search(r"\['nested'\]\['half'\]: shape \(6, 5\), dtype float32, 120 bytes in all; at best 60 bytes", message)
    assert "'fine'" not in message and "'ok'" not in message
    assert "Raise the budget" in message


def test_budget_arguments(mesh):
    with pytest.raises(ValueError, match="must be positive"):
        partition_specs_for_budget(zeros(8), 0, mesh)
    with pytest.raises(TypeError, match="number of bytes"):
        partition_specs_for_budget(zeros(8), "1GB", mesh)
    with pytest.raises(ValueError, match="no mesh"):
        partition_specs_for_budget(zeros(8), 4)


def test_budget_on_abstract_mesh():
    mesh = AbstractMesh((2, 2, 2), ("x", "y", "z"))
    tree = {"w": S((64, 32), jnp.float32)}  # 8 KiB
    specs = partition_specs_for_budget(tree, 1024, mesh)
    assert specs == {"w": P(("x", "z"), "y")}
    assert partition_specs_for_budget(tree, 2048, mesh) == {"w": P("x", "y")}
    assert partition_specs_for_budget(tree, 4096, mesh) == {"w": P("x", None)}


# ------------------------------------------------------------------ validate_shardings


def test_validate_good_tree_is_empty(mesh):
    tree = {"w": zeros(64, 32), "b": zeros(3), "s": S((8, 16), jnp.bfloat16)}
    assert validate_shardings(tree, auto_partition_specs(tree, mesh), mesh) == []
    assert validate_shardings(tree, {"w": P("d"), "b": None, "s": P(None, ("d", "t"))}, mesh) == []


def test_validate_indivisible(mesh):
    (problem,) = validate_shardings({"w": zeros(6, 8)}, {"w": P("d", None)}, mesh)
    assert isinstance(problem, ShardingProblem)
    assert (problem.path, problem.kind) == ("['w']", "indivisible")
    assert problem.message == (
        "['w'] (shape (6, 8), spec P('d', None)): dim 0 has size 6, which mesh axes ('d',) of "
        "total size 4 do not divide."
    )
    assert str(problem) == problem.message
    with pytest.raises(dataclasses.FrozenInstanceError):
        problem.kind = "x"
    (problem,) = validate_shardings(zeros(12, 6), P(None, ("d", "t")), mesh)
    assert problem.kind == "indivisible" and problem.path == ""
    assert "the array" in problem.message and "('d', 't') of total size 8" in problem.message


def test_validate_unknown_and_duplicate_axes(mesh):
    problems = validate_shardings({"x": zeros(8, 8)}, {"x": P("e", None)}, mesh)
    assert kinds(problems) == ["unknown_axis"]
    assert "mesh axis 'e', which the mesh does not have (axes: ('d', 't'))" in problems[0].message
    problems = validate_shardings({"x": zeros(8, 8)}, {"x": P("d", "d")}, mesh)
    assert kinds(problems) == ["duplicate_axis"]
    assert "'d' is used by dim 0 and again by dim 1" in problems[0].message
    problems = validate_shardings({"x": zeros(16)}, {"x": P(("t", "t"))}, mesh)
    assert kinds(problems) == ["duplicate_axis"]


def test_validate_rank(mesh):
    problems = validate_shardings({"x": zeros(8, 8)}, {"x": P("d", None, "t")}, mesh)
    assert kinds(problems) == ["rank"]
    assert "3 entries but the array has only 2 dims" in problems[0].message
    # Entries past the rank are still checked for axes.
    problems = validate_shardings({"x": zeros(8)}, {"x": P("d", "nope")}, mesh)
    assert sorted(kinds(problems)) == ["rank", "unknown_axis"]


def test_validate_large_replicated(mesh):
    tree = {"w": zeros(64, 64)}  # 16 KiB
    problems = validate_shardings(tree, {"w": P()}, mesh, large_replicated_bytes=1024)
    assert kinds(problems) == ["large_replicated"]
    assert "16 KiB" in problems[0].message and "could also be sharded over 'd'" in problems[0].message
    # Partly sharded, still over the threshold, with 't' free: reported.
    problems = validate_shardings(tree, {"w": P("d")}, mesh, large_replicated_bytes=1024)
    assert kinds(problems) == ["large_replicated"] and "'t'" in problems[0].message
    # Fully sharded, or nothing can split it: not a problem.
    assert validate_shardings(tree, {"w": P("d", "t")}, mesh, large_replicated_bytes=1024) == []
    assert validate_shardings(zeros(3, 5), P(), mesh, large_replicated_bytes=8) == []
    # Default threshold is 64 MiB.
    assert validate_shardings(tree, {"w": P()}, mesh) == []
    assert kinds(validate_shardings(S((8192, 4096), jnp.float32), P(), mesh)) == ["large_replicated"]


def test_validate_prefix_specs_and_named_shardings(mesh):
    tree = {"layer": {"w": zeros(8, 6), "b": zeros(6)}, "emb": zeros(16, 8)}
    problems = validate_shardings(tree, {"layer": P("d"), "emb": P()}, mesh)
    assert [(p.path, p.kind) for p in problems] == [("['layer']['b']", "indivisible")]
    other = make_mesh("explicit", (8,), ("e",))
    specs = {"layer": NamedSharding(other, P("e")), "emb": NamedSharding(mesh, P("d", "t"))}
    problems = validate_shardings(tree, specs)  # each NamedSharding carries its mesh
    assert [(p.path, p.kind) for p in problems] == [("['layer']['b']", "indivisible")]
    with pytest.raises(ValueError, match="validate_shardings: the specs tree does not match"):
        validate_shardings(tree, {"layer": P()}, mesh)
    with pytest.raises(TypeError, match=r"the spec at \['emb'\] is 'd'"):
        validate_shardings(tree, {"layer": P(), "emb": "d"}, mesh)


def test_validate_on_abstract_mesh():
    mesh = AbstractMesh((4, 2), ("d", "t"))
    tree = {"a": S((6, 8), jnp.float32), "b": S((8,), jnp.float32)}
    problems = validate_shardings(tree, {"a": P("d", "d"), "b": P("x")}, mesh)
    assert kinds(problems) == ["indivisible", "duplicate_axis", "unknown_axis"]


# ------------------------------------------------------------------ convert_specs


@pytest.mark.parametrize("kind", ["explicit", "auto"])
def test_convert_preserve_balance(kind):
    old = make_mesh(kind, (4, 2), ("d", "t"))
    cube = make_mesh(kind, (2, 2, 2), ("x", "y", "z"))
    line = make_mesh(kind, (8,), ("e",))
    shapes = {"w": zeros(64, 32), "v": zeros(64, 32), "b": zeros(32), "c": zeros(4, 6)}
    specs = {"w": P("d", "t"), "v": P("t", None), "b": P(), "c": P("d", "t")}
    new = convert_specs(specs, old, cube, shapes)
    assert new == {"w": P(("x", "z"), "y"), "v": P("x", None), "b": P(), "c": P(("y", "z"), "x")}
    for name, spec in new.items():
        assert parallelism(spec, cube) == parallelism(specs[name], old)
        jax.device_put(shapes[name], NamedSharding(cube, spec))
    new = convert_specs(specs, old, line, shapes)
    # Parallelism 2 cannot be had on a single 8-way axis: the least that reaches it is 8.
    # 'c' (4, 6): 8 divides neither dim, so the best the new mesh allows is replication.
    assert new == {"w": P("e", None), "v": P("e", None), "b": P(), "c": P()}
    back = convert_specs(convert_specs(specs, old, cube, shapes), cube, old, shapes)
    assert back["w"] == P("d", "t") and back["v"] == P("t", None)


def test_convert_same_axes():
    old = make_mesh("explicit", (4, 2), ("d", "t"))
    renamed = make_mesh("explicit", (2, 2, 2), ("d", "t", "e"))
    line = make_mesh("auto", (8,), ("d",))
    shapes = {"w": zeros(64, 32), "odd": zeros(12, 8), "v": zeros(8, 8)}
    specs = {"w": P("d", "t"), "odd": P("d", None), "v": P("t", None)}
    # Every axis exists and divides: specs kept as they are.
    assert convert_specs(specs, old, renamed, shapes, strategy="same_axes") == specs
    new = convert_specs(specs, old, line, shapes, strategy="same_axes")
    # 't' is gone: the auto rule on the new mesh, reaching at least the old 8 ways.
    assert new["w"] == P("d", None)
    # 'd' is 8-way now and does not divide 12: the auto rule, reaching at least 4.
    assert new["odd"] == P(None, "d")
    # 't' is gone: the auto rule, reaching at least 2.
    assert new["v"] == P("d", None)
    # Under preserve_balance the same tree is rebuilt rather than kept.
    assert convert_specs(specs, old, renamed, shapes)["w"] == P(("d", "e"), "t")


def test_convert_errors():
    old = make_mesh("explicit", (4, 2), ("d", "t"))
    new = AbstractMesh((2, 2, 2), ("x", "y", "z"))
    shapes = {"w": S((64, 32), jnp.float32)}
    with pytest.raises(ValueError, match=r"unknown strategy 'balanced'; use one of \('preserve_balance', 'same_axes'\)"):
        convert_specs({"w": P("d")}, old, new, shapes, strategy="balanced")
    with pytest.raises(ValueError, match=r"\['w'\] \(shape \(64, 32\), spec .*\) uses mesh axis 'x', which old_mesh does not have \(axes: \('d', 't'\)\)"):
        convert_specs({"w": P("x")}, old, new, shapes)
    with pytest.raises(ValueError, match="convert_specs: the specs tree does not match the shapes tree"):
        convert_specs({"w": P("d"), "b": P()}, old, new, shapes)
    with pytest.raises(ValueError, match=r"the spec at \['w'\] .* stands for 2 arrays"):
        convert_specs({"w": P("d")}, old, new, {"w": (S((8,), jnp.float32), S((8,), jnp.float32))})


# ------------------------------------------------------------------ properties


@st.composite
def mesh_and_shape(draw):
    n_axes = draw(st.integers(1, 3))
    sizes = []
    for _ in range(n_axes):
        room = 8 // math.prod(sizes) if sizes else 8
        sizes.append(draw(st.sampled_from([s for s in (1, 2, 4) if s <= room])))
    names = ("a", "b", "c")[:n_axes]
    shape = tuple(draw(st.lists(st.sampled_from([1, 2, 3, 4, 5, 6, 8, 12, 16, 24, 32]), max_size=4)))
    if draw(st.booleans()):
        order = list(draw(st.permutations(names)))
        group = draw(st.integers(0, len(order)))
        axis_names = ([tuple(order[:group])] if group > 1 else order[:group]) + order[group:]
        axis_names += draw(st.lists(st.sampled_from(names), max_size=2))  # overlapping fallbacks
    else:
        axis_names = None
    return AbstractMesh(tuple(sizes), names), shape, axis_names


@settings(max_examples=300, deadline=None)
@given(mesh_and_shape(), st.booleans(), st.sampled_from([None, 1, 64]))
def test_auto_spec_always_valid(case, reverse, min_size):
    mesh, shape, names = case
    x = S(shape, jnp.float32)
    spec = auto_partition_spec(x, mesh, names=names, min_sharding_size=min_size, reverse=reverse)
    sizes = dict(mesh.shape)
    used = axes_of(spec)
    assert len(used) == len(set(used))
    assert all(sizes[a] > 1 for a in used)
    assert len(spec) in (0, len(shape))
    for dim, entry in zip(shape, spec):
        if entry is not None:
            assert dim % math.prod(sizes[a] for a in ((entry,) if isinstance(entry, str) else entry)) == 0
    bad = [p for p in validate_shardings(x, spec, mesh) if p.kind != "large_replicated"]
    assert bad == []


@settings(max_examples=150, deadline=None)
@given(mesh_and_shape(), st.integers(1, 4096))
def test_budget_result_fits_or_raises(case, budget):
    mesh, shape, _ = case
    x = S(shape, jnp.float32)
    try:
        spec = partition_specs_for_budget(x, budget, mesh)
    except ValueError as e:
        assert "cannot fit" in str(e) and str(shape) in str(e)
        return
    assert math.prod(shape) * 4 // parallelism(spec, mesh) <= budget
    assert [p for p in validate_shardings(x, spec, mesh) if p.kind != "large_replicated"] == []


def test_symbolic_dims_are_never_sharded():
    mesh = AbstractMesh((4, 2), ("d", "t"))
    (b,) = jax.export.symbolic_shape("b")
    x = S((b, 16), jnp.float32)
    assert auto_partition_spec(x, mesh) == P(None, "d")
    assert validate_shardings(x, P("d", "t"), mesh) == []
    with pytest.raises(ValueError, match=r"symbolic shape \(b, 16\)"):
        partition_specs_for_budget(x, 16, mesh)


# ---------------------------------------------------------------------------------------------
# Input validation (the catalogue in test_catalogue.py has more).


def test_meshes_options_and_trees_are_checked():
    x, mesh = jnp.zeros((8, 4)), make_mesh("explicit")
    with pytest.raises(TypeError, match=re.escape("auto_partition_spec: mesh must be a Mesh or an AbstractMesh")):
        auto_partition_spec(x, {"d": 4})
    with pytest.raises(TypeError, match=re.escape("convert_specs: old_mesh must be a Mesh or an AbstractMesh")):
        convert_specs(P("d"), "d", mesh, x)
    with pytest.raises(TypeError, match=re.escape("validate_shardings: mesh must be a Mesh or an AbstractMesh")):
        validate_shardings(x, P("d"), "d")
    with pytest.raises(TypeError, match=re.escape("auto_partition_spec: min_sharding_size must be an int")):
        auto_partition_spec(x, mesh, min_sharding_size="8")
    with pytest.raises(TypeError, match=re.escape("auto_partition_specs: reverse must be True or False, got 'yes'")):
        auto_partition_specs({"x": x}, mesh, reverse="yes")
    with pytest.raises(ValueError, match=re.escape("validate_shardings: large_replicated_bytes must be non-negative")):
        validate_shardings(x, P("d"), mesh, large_replicated_bytes=-1)
    deep = x
    for _ in range(1000):
        deep = [deep]
    with pytest.raises(ValueError, match=re.escape("auto_partition_specs: tree is nested too deeply")):
        auto_partition_specs(deep, mesh)
    with pytest.raises(ValueError, match=re.escape("ShardingProblem: kind must be one of")):
        ShardingProblem("", "bogus", "m")
