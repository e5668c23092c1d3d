"""Trees (shardtypes.model.pytree_dataclasses and the dataclass checker in shardtypes.integrations): pytree
dataclasses, checking them field by field with paths in the messages, and stacking with
``Array[axes, cls]`` (docs/design.md, "Trees"; issue 3, items 1 and 2).
"""

import dataclasses
import pickle
import re
from dataclasses import dataclass
from typing import Optional

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import typeguard
from hypothesis import given, settings, strategies as st
from jax import lax
from jax.sharding import PartitionSpec as P
from typeguard import TypeCheckError

from shardtypes import (
    Array,
    ShapeSpecError,
    bf16,
    f32,
    field,
    i32,
    make_partition_specs,
    pytree_dataclass,
    typechecked,
)

from conftest import put


def Z(*shape):
    """A float32 numpy array of the given shape."""
    return np.zeros(shape, np.float32)


def keys(tree):
    return [jax.tree_util.keystr(path) for path, _ in jax.tree_util.tree_flatten_with_path(tree)[0]]


# ---------------------------------------------------------------------------------------------
# Unsharded classes: checking and structure.


@pytree_dataclass
class Layer:
    w_up: f32["embed hidden"]
    w_down: f32["hidden embed"]


@pytree_dataclass
class Weights:
    w_q: f32["embed q"]
    layers: Array["layers", Layer]


@pytree_dataclass
class State:
    weights: Weights
    step: int = field(default=0, metadata={"static": True})


@pytree_dataclass
class Other:
    w_up: f32["embed hidden"]
    w_down: f32["hidden embed"]


def make_state(embed=4, hidden=8, layers=3, q=2, step=0, up=None, down=None):
    up = up if up is not None else (layers, embed, hidden)
    down = down if down is not None else (layers, hidden, embed)
    stacked = Array["layers", Layer](w_up=Z(*up), w_down=Z(*down))
    return State(Weights(w_q=Z(embed, q), layers=stacked), step=step)


@typechecked
def use_state(state: State, x: f32[b"b embed"]) -> f32[b"b embed"]:
    return x


@typechecked
def use_layer(layer: Layer) -> int:
    return 0


@typechecked
def use_stacked(layers: Array["layers", Layer]) -> int:
    return 0


def test_keystr_gives_attribute_keys():
    layer = Layer(w_up=Z(4, 8), w_down=Z(8, 4))
    assert keys(layer) == [".w_up", ".w_down"]
    state = make_state()
    assert keys(state) == [".weights.w_q", ".weights.layers.w_up", ".weights.layers.w_down"]
    assert keys(state.weights) == [".w_q", ".layers.w_up", ".layers.w_down"]


def test_static_field_is_not_a_leaf_and_survives_tree_map():
    state = make_state(step=7)
    assert len(jax.tree.leaves(state)) == 3
    doubled = jax.tree.map(lambda a: a + 1, state)
    assert type(doubled) is State and doubled.step == 7
    assert float(doubled.weights.w_q[0, 0]) == 1.0
    # Static fields are part of the structure.
    assert jax.tree.structure(make_state(step=1)) != jax.tree.structure(make_state(step=2))


def test_frozen_option():
    @pytree_dataclass(frozen=True)
    class Frozen:
        w: f32["a"]
        k: int = field(default=3, metadata={"static": True})

    x = Frozen(w=Z(2))
    with pytest.raises(dataclasses.FrozenInstanceError):
        x.w = Z(2)
    y = jax.tree.map(lambda a: a + 1, x)
    assert type(y) is Frozen and y.k == 3 and keys(y) == [".w"]


def test_frozen_existing_dataclass():
    @pytree_dataclass
    @dataclass(frozen=True)
    class Frozen:
        w: f32["a"]

    x = Frozen(w=Z(2))
    with pytest.raises(dataclasses.FrozenInstanceError):
        x.w = Z(2)
    assert keys(jax.tree.map(lambda a: a, x)) == [".w"]
    assert typeguard.check_type(x, Frozen) is x


def test_existing_dataclass_registered_as_is():
    @dataclass
    class Plain:
        w: f32["a"]
        n: int = field(default=1, metadata={"static": True})

    assert pytree_dataclass(Plain) is Plain
    assert keys(Plain(Z(2))) == [".w"]


def test_options_on_an_existing_dataclass_raise():
    @dataclass
    class Existing:
        w: f32["a"]

    with pytest.raises(TypeError, match="Existing is already a dataclass; pass options to @dataclass"):
        pytree_dataclass(frozen=True)(Existing)


def test_init_false_field_raises():
    with pytest.raises(TypeError, match=r"fields \['n'\] have init=False"):

        @pytree_dataclass
        class NoInit:
            w: f32["a"]
            n: int = field(default=0, init=False)


def test_not_a_class_raises():
    with pytest.raises(TypeError, match="pytree_dataclass expects a class, got 3"):
        pytree_dataclass(3)


# Transformations. Defined once so that jit caches the trace.


@jax.jit
def _jit_step(state):
    return jax.tree.map(lambda a: a * 2 + 1, state)


def test_jax_jit_with_a_dataclass():
    state = make_state(step=5)
    out = _jit_step(state)
    assert type(out) is State and out.step == 5
    assert type(out.weights.layers) is Array["layers", Layer]
    np.testing.assert_allclose(out.weights.layers.w_up, np.ones((3, 4, 8)))


def test_lax_scan_with_dataclass_carry_and_xs():
    layers = Array["layers", Layer](w_up=np.ones((3, 4, 8), np.float32), w_down=Z(3, 8, 4))

    def body(carry, layer):
        assert type(layer) is Array["layers", Layer]  # the slice keeps the stacked class
        assert layer.w_up.shape == (4, 8)
        new = Layer(w_up=carry.w_up + layer.w_up, w_down=carry.w_down + layer.w_down)
        return new, layer.w_up.sum()

    final, sums = lax.scan(body, Layer(w_up=Z(4, 8), w_down=Z(8, 4)), layers)
    assert type(final) is Layer
    np.testing.assert_allclose(final.w_up, np.full((4, 8), 3.0))
    np.testing.assert_allclose(sums, [32.0, 32.0, 32.0])


def test_jax_grad_with_a_dataclass():
    state = make_state(step=2)
    state = jax.tree.map(lambda a: a + 1.5, state)
    grads = jax.grad(lambda s: sum(jnp.sum(x**2) for x in jax.tree.leaves(s)))(state)
    assert type(grads) is State and grads.step == 2
    assert keys(grads) == keys(state)
    np.testing.assert_allclose(grads.weights.w_q, np.full((4, 2), 3.0))


# Checking field by field.


def test_checked_function_accepts_a_matching_dataclass():
    assert use_state(make_state(), Z(2, 4)).shape == (2, 4)


def test_checked_function_names_the_path_and_the_binding():
    bad = make_state(down=(3, 9, 4))  # hidden is 8 in w_up, 9 in w_down
    with pytest.raises(TypeCheckError) as info:
        use_state(bad, Z(2, 4))
    message = str(info.value)
    assert 'argument "state"' in message and "of use_state()" in message
    assert "state.weights.layers.w_down is not f32[b'layers hidden embed']" in message
    assert (
        "dimension 'hidden' is 9 here (dim 1) but was bound to 8 by state.weights.layers.w_up "
        '(argument "state" of use_state())'
    ) in message


def test_checked_function_failure_in_an_outer_field():
    bad = make_state(up=(3, 5, 8), down=(3, 8, 5))  # embed is 4 in w_q, 5 in the layers
    with pytest.raises(
        TypeCheckError,
        match=re.escape(
            "state.weights.layers.w_up is not f32[b'layers embed hidden']: dimension 'embed' is 5 "
            'here (dim 1) but was bound to 4 by state.weights.w_q (argument "state" of use_state())'
        ),
    ):
        use_state(bad, Z(2, 5))


def test_field_binding_is_seen_by_later_arguments():
    with pytest.raises(
        TypeCheckError,
        match=re.escape(
            'argument "x" (numpy.ndarray) of use_state() is not f32[b\'b embed\']: dimension '
            "'embed' is 5 here (dim 1) but was bound to 4 by state.weights.w_q "
            '(argument "state" of use_state())'
        ),
    ):
        use_state(make_state(), Z(2, 5))


def test_checked_function_rank_mismatch_in_a_field():
    with pytest.raises(
        TypeCheckError,
        match=re.escape("layers.w_up is not f32[b'layers embed hidden']: has 2 dims [4,8] but the annotation has 3"),
    ):
        use_stacked(Layer(w_up=Z(4, 8), w_down=Z(8, 4)))


@jax.jit
def _jit_use_state(state, x):
    return use_state(state, x)


def test_checked_dataclass_under_jit():
    assert _jit_use_state(make_state(), Z(2, 4)).shape == (2, 4)
    with pytest.raises(TypeCheckError, match=re.escape("state.weights.layers.w_down is not")):
        _jit_use_state(make_state(down=(3, 9, 4)), Z(2, 4))


@pytree_dataclass
class ShardedLayer:
    w: f32["embed/d hidden/t"]
    b: f32["hidden/t"]
    scale: float = field(default=1.0, metadata={"static": True})


@typechecked
def use_sharded(layers: Array["layers", ShardedLayer]) -> int:
    return 0


def test_checked_sharding_of_a_field(mesh):
    good = Array["layers", ShardedLayer](
        w=put(mesh, jnp.ones((3, 8, 4)), None, "d", "t"), b=put(mesh, jnp.ones((3, 4)), None, "t")
    )
    assert use_sharded(good) == 0
    bad = dataclasses.replace(good, w=put(mesh, jnp.ones((3, 8, 4)), None, None, "t"))
    with pytest.raises(
        TypeCheckError,
        match=re.escape(
            "layers.w is not f32[b'layers embed/d hidden/t']: sharding is P(None, None, 't') but "
            "the annotation says P(None, 'd', 't')"
        ),
    ):
        use_sharded(bad)


def test_check_type_of_a_dataclass():
    state = make_state()
    assert typeguard.check_type(state, State) is state
    with pytest.raises(
        TypeCheckError,
        match=re.escape(
            ".weights.layers.w_down is not f32[b'layers hidden embed']: dimension 'hidden' is 9 "
            "here (dim 1) but was bound to 8 by .weights.layers.w_up (check_type())"
        ),
    ):
        typeguard.check_type(make_state(down=(3, 9, 4)), State)


def test_check_type_wrong_class():
    with pytest.raises(TypeCheckError, match=r"Other is not an instance of test_trees\.Layer \(found test_trees\.Other\)"):
        typeguard.check_type(Other(Z(4, 8), Z(8, 4)), Layer)


def test_failed_field_check_leaves_no_bindings():
    # The failing state bound 'embed' before failing; a fresh call must not see it.
    with pytest.raises(TypeCheckError):
        use_state(make_state(up=(3, 5, 8), down=(3, 8, 4)), Z(2, 5))
    assert use_state(make_state(embed=6), Z(1, 6)).shape == (1, 6)


def test_wrong_class_argument_names_the_function():
    with pytest.raises(TypeCheckError, match=r'argument "layer" .*of use_layer\(\)'):
        use_layer(Other(Z(4, 8), Z(8, 4)))


def test_wrong_class_argument_fails():
    with pytest.raises(
        TypeCheckError,
        match=r"argument \"layer\" \(.*Other\) of use_layer\(\) is not an instance of .*\.Layer \(found .*Other\)",
    ):
        use_layer(Other(Z(4, 8), Z(8, 4)))


@pytree_dataclass
class WithStatic:
    w: f32["a"]
    heads: int = field(default=2, metadata={"static": True})


@typechecked
def use_with_static(x: WithStatic) -> int:
    return 0


def test_static_field_is_checked():
    with pytest.raises(TypeCheckError, match=r"x\.heads"):
        use_with_static(WithStatic(w=Z(2), heads="two"))


@pytree_dataclass
class WithTuple:
    w: f32["a b"]
    pair: tuple[f32["a"], f32["b"]]


@typechecked
def use_with_tuple(x: WithTuple) -> int:
    return 0


def test_tuple_field_message_names_the_function_once():
    with pytest.raises(TypeCheckError) as info:
        use_with_tuple(WithTuple(w=Z(2, 4), pair=(Z(2), Z(5))))
    message = str(info.value)
    assert "x.pair" in message and "bound to 4 by x.w" in message
    assert "item 1 of use_with_tuple() is not" not in message, message


def test_tuple_field_failure_names_the_path():
    with pytest.raises(TypeCheckError, match=r"x\.pair item 1 .*dimension 'b' is 5 here .*bound to 4 by x\.w"):
        use_with_tuple(WithTuple(w=Z(2, 4), pair=(Z(2), Z(5))))


# Unflattening with non-array leaves.


@pytree_dataclass
class Sharded:
    w: f32["embed/d hidden/t"]
    b: Optional[f32["hidden/t"]] = None
    n: int = field(default=4, metadata={"static": True})


def test_unflatten_with_none_leaves():
    value = Sharded(w=Z(8, 4), b=Z(4), n=3)
    nones = jax.tree.map(lambda _: None, value)
    assert type(nones) is Sharded and nones.w is None and nones.b is None and nones.n == 3
    treedef = jax.tree.structure(value)
    rebuilt = jax.tree.unflatten(treedef, [None, None])
    assert type(rebuilt) is Sharded and rebuilt.w is None


def test_unflatten_with_partition_spec_leaves():
    value = Sharded(w=Z(8, 4), b=Z(4))
    specs = make_partition_specs(Sharded)
    assert specs == Sharded(w=P("d", "t"), b=P("t"), n=4)
    assert jax.tree.structure(specs) == jax.tree.structure(value)
    assert jax.tree.map(lambda s: s, specs) == specs
    paired = jax.tree.map(lambda x, s: (x.shape, s), value, specs)
    assert paired.w == ((8, 4), P("d", "t")) and paired.b == ((4,), P("t"))
    stacked = make_partition_specs(Array["layers", Sharded])
    assert jax.tree.leaves(jax.tree.map(lambda s: s, stacked)) == [P(None, "d", "t"), P(None, "t")]


# ---------------------------------------------------------------------------------------------
# Array[axes, cls].


def test_array_of_an_array_annotation():
    assert Array["layers", f32[b"a b"]] == f32[b"layers a b"]
    assert Array[b"layers", f32["a b"]] == f32[b"layers a b"]
    assert Array["stages layers/p", bf16[b"a/d"]] == bf16[b"stages layers/p a/d"]
    assert Array["layers", i32[b""]] == i32[b"layers"]
    assert make_partition_specs(Array["layers/p", f32[b"a/d b"]]) == P("p", "d", None)


def test_array_of_optional_and_tuple():
    assert Array["l", Optional[f32["a"]]] == Optional[f32["l a"]]
    assert Array["l", tuple[f32["a"], i32["b"]]] == tuple[f32["l a"], i32["l b"]]


def test_array_of_a_dataclass():
    L = Array["layers", Layer]
    assert dataclasses.is_dataclass(L)
    assert [f.name for f in dataclasses.fields(L)] == ["w_up", "w_down"]
    assert make_partition_specs(Array["layers", ShardedLayer]) == Array["layers", ShardedLayer](
        w=P(None, "d", "t"), b=P(None, "t"), scale=1.0
    )


def test_array_is_cached():
    assert Array["layers", Layer] is Array["layers", Layer]
    assert Array[b"layers", Layer] is Array["layers", Layer]
    assert Array["layers/p", Layer] is Array["layers/p", Layer]
    assert Array["layers/p", Layer] is not Array["layers", Layer]


def test_nested_array_merges_axes():
    assert Array["stages", Array["layers", Layer]] is Array["stages layers", Layer]
    assert Array["stages", Array["layers", f32["a"]]] == f32["stages layers a"]


def test_stacking_a_class_with_a_stacked_field():
    S = Array["stages", Weights]
    field_types = {f.name: f.type for f in dataclasses.fields(S)}
    assert field_types["w_q"] == f32["stages embed q"]
    assert field_types["layers"] is Array["stages layers", Layer]


def test_pickle_the_class():
    for cls in (Array["layers", Layer], Array["stages layers/p", ShardedLayer]):
        assert pickle.loads(pickle.dumps(cls)) is cls


def test_pickle_an_instance():
    x = Array["layers", ShardedLayer](w=Z(3, 8, 4), b=Z(3, 4), scale=0.5)
    y = pickle.loads(pickle.dumps(x))
    assert type(y) is Array["layers", ShardedLayer] and y.scale == 0.5
    np.testing.assert_array_equal(y.w, x.w)
    state = pickle.loads(pickle.dumps(make_state(step=3)))
    assert type(state.weights.layers) is Array["layers", Layer] and state.step == 3


def test_repr():
    module = Layer.__module__
    assert repr(Array["layers", Layer]) == f"shardtypes.Array['layers', {module}.Layer]"
    assert repr(Array["stages layers/p", Layer]) == f"shardtypes.Array['stages layers/p', {module}.Layer]"
    instance = Array["layers", Layer](w_up=None, w_down=None)
    assert repr(instance) == "Array['layers', Layer](w_up=None, w_down=None)"


def test_several_leading_axes_and_a_sharded_axis():
    specs = make_partition_specs(Array["stages layers/p", ShardedLayer])
    assert specs.w == P(None, "p", "d", "t") and specs.b == P(None, "p", "t")
    specs = make_partition_specs(Array["layers/p", ShardedLayer])
    assert specs.w == P("p", "d", "t") and specs.b == P("p", "t")
    fields = {f.name: f.type for f in dataclasses.fields(Array["layers/p", ShardedLayer])}
    assert fields["w"] == f32["layers/p embed/d hidden/t"]


@pytree_dataclass(frozen=True)
class Configured:
    w: f32["a"]
    v: f32["a"] = None
    heads: int = field(default=8, metadata={"static": True})
    name: str = field(default="mlp", metadata={"static": True})


def test_defaults_frozen_and_static_fields_kept():
    S = Array["layers", Configured]
    assert S.__dataclass_params__.frozen
    fields = {f.name: f for f in dataclasses.fields(S)}
    assert fields["heads"].default == 8 and fields["heads"].metadata["static"]
    assert fields["heads"].type is int and fields["name"].default == "mlp"
    assert fields["v"].default is None
    x = S(w=Z(3, 2))
    assert x.heads == 8 and x.name == "mlp" and x.v is None
    with pytest.raises(dataclasses.FrozenInstanceError):
        x.w = Z(3, 2)
    assert keys(x) == [".w"]
    y = jax.tree.map(lambda a: a + 1, S(w=Z(3, 2), v=Z(3, 2), heads=2))
    assert type(y) is S and y.heads == 2 and keys(y) == [".w", ".v"]


# The slice lax.scan hands its body checks against the unstacked class.


@typechecked
def layer_body(x: f32[b"embed/d hidden/t"], layer: ShardedLayer) -> f32[b"embed/d hidden/t"]:
    return x * layer.w + layer.b * layer.scale


@typechecked
def run_layers(x: f32[b"embed/d hidden/t"], layers: Array["layers", ShardedLayer]) -> f32[b"embed/d hidden/t"]:
    return lax.scan(lambda c, layer: (layer_body(c, layer), None), x, layers)[0]


_jit_run_layers = jax.jit(run_layers)


def stacked_sharded(mesh, n=3):
    return Array["layers", ShardedLayer](
        w=put(mesh, jnp.full((n, 8, 4), 0.5), None, "d", "t"),
        b=put(mesh, jnp.ones((n, 4)), None, "t"),
    )


def test_scan_slice_checks_against_the_unstacked_class(mesh):
    x = put(mesh, jnp.ones((8, 4)), "d", "t")
    layers = stacked_sharded(mesh)
    expected = np.full((8, 4), 1.875)  # ((1 * .5 + 1) * .5 + 1) * .5 + 1
    np.testing.assert_allclose(run_layers(x, layers), expected)
    np.testing.assert_allclose(_jit_run_layers(x, layers), expected)


@typechecked
def wrong_body(x: f32[b"embed hidden"], layer: Array["layers", ShardedLayer]) -> f32[b"embed hidden"]:
    return x


def test_scan_slice_does_not_check_against_the_stacked_class():
    layers = Array["layers", ShardedLayer](w=Z(3, 8, 4), b=Z(3, 4))
    with pytest.raises(
        TypeCheckError,
        match=re.escape("layer.w is not f32[b'layers embed/d hidden/t']: has 2 dims [8,4] but the annotation has 3"),
    ):
        lax.scan(lambda c, layer: (wrong_body(c, layer), None), Z(8, 4), layers)


def test_scan_slice_checks_sizes_against_the_carry():
    layers = Array["layers", Layer](w_up=Z(3, 4, 8), w_down=Z(3, 8, 4))

    @typechecked
    def body(x: f32[b"embed hidden"], layer: Layer) -> f32[b"embed hidden"]:
        return x

    final, _ = lax.scan(lambda c, layer: (body(c, layer), None), Z(4, 8), layers)
    assert final.shape == (4, 8)
    with pytest.raises(TypeCheckError, match=r"layer\.w_up is not f32\[b'embed hidden'\]: dimension 'embed' is 4 here"):
        lax.scan(lambda c, layer: (body(c, layer), None), Z(5, 8), layers)


def test_stage_slice_checks_against_fewer_axes():
    staged = Array["stages layers", Layer](w_up=Z(2, 3, 4, 8), w_down=Z(2, 3, 8, 4))
    stage = jax.tree.map(lambda a: a[0], staged)
    assert stage.w_up.shape == (3, 4, 8)
    assert typeguard.check_type(stage, Array["layers", Layer]) is stage
    assert use_stacked(stage) == 0
    layer = jax.tree.map(lambda a: a[0], stage)
    assert use_layer(layer) == 0
    with pytest.raises(TypeCheckError, match=r"layers\.w_up is not f32\[b'layers embed hidden'\]: has 4 dims"):
        use_stacked(staged)


def test_unstacked_value_for_a_stacked_annotation_fails():
    with pytest.raises(TypeCheckError, match=r"has 2 dims \[4,8\] but the annotation has 3"):
        typeguard.check_type(Layer(Z(4, 8), Z(8, 4)), Array["layers", Layer])


def test_wrong_class_for_a_stacked_annotation():
    module = Layer.__module__
    with pytest.raises(
        TypeCheckError,
        match=re.escape(f"is not an instance of shardtypes.Array['layers', {module}.Layer] (found {module}.Array['layers', Other])"),
    ):
        use_stacked(Array["layers", Other](Z(3, 4, 8), Z(3, 8, 4)))
    with pytest.raises(TypeCheckError, match=r"weights\.layers is not an instance of shardtypes\.Array\['layers'"):
        use_state(State(Weights(Z(4, 2), Other(Z(3, 4, 8), Z(3, 8, 4)))), Z(2, 4))


@pytree_dataclass
class WithInt:
    w: f32["a"]
    n: int


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda: Array["layers"], r"write Array\[axes, cls\], as in Array\['layers', Layer\]; got Array\['layers'\]"),
        (lambda: Array["a", "b", Layer], r"write Array\[axes, cls\]"),
        (lambda: Array[3, Layer], r"axes must be a str or bytes shape string, got 3"),
        (lambda: Array["...", Layer], r"Array\['...', cls\]: stacked axes cannot be variadic"),
        (lambda: Array["*lead", Layer], r"Array\['\*lead', cls\]: stacked axes cannot be variadic"),
        (lambda: Array["", Layer], r"axes must name at least one dim"),
        (lambda: Array["layers", WithInt], r"cannot stack field WithInt\.n of type <class 'int'>.*metadata=\{'static': True\}"),
        (lambda: Array["layers", int], r"Array\['layers', \.\.\.\]: cannot stack an annotation of type <class 'int'>"),
        (lambda: Array["layers", "Layer"], r"cannot stack an annotation of type 'Layer'"),
    ],
)
def test_bad_uses_raise_type_error(make, message):
    with pytest.raises(TypeError, match=message):
        make()


def test_stacked_axis_reusing_a_mesh_axis_is_an_error():
    with pytest.raises(ShapeSpecError, match=r"mesh axis 'd' shards both"):
        Array["layers/d", ShardedLayer]


# ---------------------------------------------------------------------------------------------
# Property: the spec of a stacked array annotation is the axes' entries, then the shape's.

MESH_AXES = ("p", "q", "d", "t", "e")


def _entry(axes):
    if not axes:
        return None
    return axes[0] if len(axes) == 1 else tuple(axes)


@st.composite
def stacked_annotation(draw):
    n_axes = draw(st.integers(1, 3))
    n_shape = draw(st.integers(0, 3))
    mesh_axes = list(draw(st.permutations(MESH_AXES)))
    dims = []
    for i in range(n_axes + n_shape):
        k = draw(st.integers(0, min(2, len(mesh_axes))))
        used, mesh_axes = mesh_axes[:k], mesh_axes[k:]
        # Stacking dims are names or integers; the array's own dims may be any size.
        sizes = [f"n{i}", str(2 ** (i % 4))] + (["_", f"2*n{i}"] if i >= n_axes else [])
        size = draw(st.sampled_from(sizes))
        dims.append((size, used))
    def text(ds):
        return " ".join(size + "".join("/" + a for a in used) for size, used in ds)
    axes = text(dims[:n_axes])
    shape = text(dims[n_axes:])
    entries = [_entry(used) for _, used in dims]
    as_bytes = draw(st.booleans())
    return (axes.encode() if as_bytes else axes), shape, entries


@settings(max_examples=60, deadline=None)
@given(stacked_annotation())
def test_property_stacked_partition_spec(case):
    axes, shape, entries = case
    annotation = Array[axes, f32[shape.encode()]]
    assert make_partition_specs(annotation) == P(*entries)
    assert Array[axes, f32[shape.encode()]] == annotation


# ---------------------------------------------------------------------------------------------
# Input validation (the catalogue in test_catalogue.py has more).


@pytest.mark.parametrize("axes", ["a+1", "#a", "_", "2*layers", b"layers _"])
def test_stacking_dims_are_names_or_integers(axes):
    with pytest.raises(TypeError, match="stacking dims must be names or integers"):
        Array[axes, Layer]


def test_stacking_accepts_names_integers_and_sharded_names():
    assert Array["4 layers/p", f32[b"e"]] is f32[b"4 layers/p e"]


def test_stacking_axes_that_are_not_utf8():
    with pytest.raises(ShapeSpecError, match="not valid UTF-8"):
        Array[b"\xff", Layer]


def test_pytree_dataclass_names_an_unknown_option():
    with pytest.raises(TypeError, match=re.escape("unknown options ['bogus']; it takes the dataclass options")):
        @pytree_dataclass(bogus=True)
        class C:
            w: f32[b"a"]


# --- issue 19, item 4: pytree_dataclass on a class already registered ---------------------------


def _registered_by_jax():
    @dataclass
    class R:
        w: f32[b"a b"]
        n: int

    return jax.tree_util.register_dataclass(R, data_fields=["w"], meta_fields=["n"]), {"n": 3}


def _registered_by_flax():
    import flax.struct

    @flax.struct.dataclass
    class R:
        w: f32[b"a b"]
        n: int = flax.struct.field(pytree_node=False, default=3)

    return R, {}


@pytest.mark.parametrize("make", [_registered_by_jax, _registered_by_flax])
def test_pytree_dataclass_on_an_already_registered_class_keeps_its_registration(make):
    """Issue 19, item 4: JAX's 'Duplicate custom dataclass PyTreeDef type registration'."""
    cls, extra = make()
    assert pytree_dataclass(cls) is cls
    assert pytree_dataclass(cls) is cls  # idempotent
    value = cls(w=jnp.zeros((2, 3)), **extra)
    paths = jax.tree_util.tree_flatten_with_path(value)[0]
    assert [jax.tree_util.keystr(p) for p, _ in paths] == [".w"]  # n stays static, as registered
    assert make_partition_specs(cls).w == P(None, None)

    @typechecked
    def f(x: cls) -> f32[b"a"]:
        return x.w[:, 0]

    assert f(value).shape == (2,)
    with pytest.raises(TypeCheckError, match=r"x\.w is not f32\[b'a b'\]: has 1 dim"):
        f(cls(w=jnp.zeros(3), **extra))
    stacked = Array["layers", cls]
    assert stacked.__name__ and make_partition_specs(stacked).w == P(None, None, None)
