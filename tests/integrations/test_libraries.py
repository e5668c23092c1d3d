"""Classes of the model libraries, first-class: Equinox modules, Flax struct dataclasses,
``jax.tree_util.register_dataclass`` classes, plain dataclasses and NamedTuples whose fields carry
shardtypes annotations are checked field by field, with the path in the error."""

import dataclasses
import typing

import jax
import jax.numpy as jnp
import pytest
import typeguard

from shardtypes import FieldError, TypeCheckError, f32, typechecked

from conftest import make_mesh, put

eqx = pytest.importorskip("equinox")
struct = pytest.importorskip("flax.struct")


class EqxLinear(eqx.Module):
    w: f32[b"embed/d hidden/t"]
    b: f32[b"hidden/t"]
    name: str = eqx.field(static=True, default="linear")


@struct.dataclass
class FlaxLinear:
    w: f32[b"embed/d hidden/t"]
    b: f32[b"hidden/t"]


@jax.tree_util.register_dataclass
@dataclasses.dataclass
class JaxLinear:
    w: f32[b"embed/d hidden/t"]
    b: f32[b"hidden/t"]


@dataclasses.dataclass
class PlainLinear:
    w: f32[b"embed/d hidden/t"]
    b: f32[b"hidden/t"]


class TupleLinear(typing.NamedTuple):
    w: f32[b"embed/d hidden/t"]
    b: f32[b"hidden/t"]


CLASSES = [EqxLinear, FlaxLinear, JaxLinear, PlainLinear, TupleLinear]


@pytest.fixture(scope="module")
def mesh():
    return make_mesh("explicit")


def good(cls, mesh, hidden=4):
    return cls(put(mesh, jnp.zeros((8, hidden)), "d", "t"), put(mesh, jnp.zeros(hidden), "t"))


def checked_fn(cls):
    @typechecked
    def apply(layer: cls, x: f32[b"batch/d embed"]) -> f32[b"batch/d hidden/t"]:
        return x @ layer.w

    return apply


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_checked_field_by_field(cls, mesh):
    apply = checked_fn(cls)
    x = put(mesh, jnp.zeros((8, 8)), "d")
    with jax.set_mesh(mesh):
        for _ in range(2):  # the second call takes the fast path where the class is a pytree
            assert apply(good(cls, mesh), x).shape == (8, 4)
        wrong_sharding = cls(good(cls, mesh).w, put(mesh, jnp.zeros(4)))
        with pytest.raises(TypeCheckError, match=r"layer\.b is not f32\[b'hidden/t'\]: sharding is P\(None\)"):
            apply(wrong_sharding, x)
        wrong_size = cls(good(cls, mesh).w, put(mesh, jnp.zeros(6), "t"))
        with pytest.raises(TypeCheckError, match="dimension 'hidden' is 6 here .*bound to 4"):
            apply(wrong_size, x)
        with pytest.raises(TypeCheckError, match="dimension 'embed' is 4 here .*bound to 8 by layer.w"):
            apply(good(cls, mesh), put(mesh, jnp.zeros((8, 4)), "d"))


@pytest.mark.parametrize("cls", [EqxLinear, FlaxLinear, JaxLinear, PlainLinear], ids=lambda c: c.__name__)
def test_check_type_and_plain_typeguard(cls, mesh):
    value = good(cls, mesh)
    assert typeguard.check_type(value, cls) is value
    with pytest.raises(FieldError, match=rf"{cls.__qualname__}\.b is not f32\[b'hidden/t'\]"):
        typeguard.check_type(cls(value.w, jnp.zeros(4, jnp.bfloat16)), cls)

    @typeguard.typechecked
    def plain(layer: cls) -> None:
        pass

    with pytest.raises(TypeCheckError, match="has dtype bfloat16"):
        plain(cls(value.w, jnp.zeros(4, jnp.bfloat16)))
    with pytest.raises(TypeCheckError, match="is not an instance of"):
        plain(object())


@pytest.mark.parametrize("cls", [EqxLinear, FlaxLinear, JaxLinear], ids=lambda c: c.__name__)
def test_under_jit_and_in_containers(cls, mesh):
    @typechecked
    def stack(layers: list[cls]) -> f32[b"embed/d hidden/t"]:
        return layers[0].w

    with jax.set_mesh(mesh):
        layers = [good(cls, mesh), good(cls, mesh)]
        jax.jit(stack)(layers)
        with pytest.raises(TypeCheckError, match="dimension 'hidden' is 6 here"):
            jax.jit(stack)([good(cls, mesh), good(cls, mesh, hidden=6)])


def test_equinox_static_field_is_checked_by_typeguard(mesh):
    apply = checked_fn(EqxLinear)
    x = put(mesh, jnp.zeros((8, 8)), "d")
    value = EqxLinear(good(EqxLinear, mesh).w, good(EqxLinear, mesh).b, name=3)
    with jax.set_mesh(mesh), pytest.raises(TypeCheckError, match="name"):
        apply(value, x)


# ---------------------------------------------------------------------------------------------
# Derivation: the class (built from its annotations), an instance, or an abstract instance.


class EqxWithInit(eqx.Module):
    w: f32[b"embed/d hidden/t"]
    b: f32[b"hidden/t"]
    name: str = eqx.field(static=True, default="mlp")

    def __init__(self, embed, hidden, key):
        self.w = jax.random.normal(key, (embed, hidden))
        self.b = jnp.zeros(hidden)


@pytest.mark.parametrize("cls", [EqxLinear, FlaxLinear, JaxLinear, TupleLinear], ids=lambda c: c.__name__)
def test_derivation_from_class_instance_and_abstract_instance(cls, mesh):
    from jax.sharding import PartitionSpec as P

    from shardtypes import make_partition_specs, make_shape_dtype_structs, make_shardings, shard

    value = cls(jnp.zeros((8, 4)), jnp.zeros(4))
    abstract = jax.eval_shape(lambda: value)
    for given in (cls, value, abstract):
        specs = make_partition_specs(given)
        assert type(specs) is cls and (specs.w, specs.b) == (P("d", "t"), P("t"))
        shardings = make_shardings(given, mesh)
        assert jax.tree.structure(shardings) == jax.tree.structure(value)
    structs = make_shape_dtype_structs(cls, {"embed": 8, "hidden": 4}, mesh)
    assert structs.w.shape == (8, 4) and structs.w.sharding.spec == P("d", "t")
    with jax.set_mesh(mesh):
        laid_out = shard(value, cls)
        assert laid_out.w.sharding.spec == P("d", "t") and laid_out.b.sharding.spec == P("t")
        checked_fn(cls)(laid_out, put(mesh, jnp.zeros((8, 8)), "d"))


def test_equinox_module_with_its_own_init(mesh):
    from shardtypes import make_shardings

    abstract = eqx.filter_eval_shape(EqxWithInit, 8, 4, jax.random.key(0))
    shardings = make_shardings(abstract, mesh)
    model = jax.device_put(EqxWithInit(8, 4, jax.random.key(0)), shardings)
    assert model.w.sharding.spec == jax.sharding.PartitionSpec("d", "t")
    assert model.name == "mlp"
    # the class too, built from its annotations without running its __init__
    assert make_shardings(EqxWithInit, mesh).b.spec == jax.sharding.PartitionSpec("t")


def test_unannotated_leaf_of_an_instance_is_an_error(mesh):
    from shardtypes import make_partition_specs

    @dataclasses.dataclass
    class Half:
        w: f32[b"a/d"]
        extra: jax.Array

    jax.tree_util.register_dataclass(Half, data_fields=["w", "extra"], meta_fields=[])
    with pytest.raises(TypeError, match=r"Half.extra has no shardtypes annotation on .*Half, so no layout"):
        make_partition_specs(Half(jnp.zeros(8), jnp.zeros(2)))
