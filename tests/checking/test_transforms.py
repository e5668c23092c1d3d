"""Checked functions under every JAX transformation: transform x input kind x mesh kind.

Each cell runs a checked function through a transformation and compares the result with the
same transformation of the unchecked function; a wrong rank must be caught in every cell.

What a check sees under ``vmap``: the per-example value (the batch dim is not part of the
annotation), and on a mesh the sharding of the per-example dims only.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import AxisType

from shardtypes import TypeCheckError, f32, typechecked

from conftest import put

MESHES = {
    "none": None,
    "explicit": (AxisType.Explicit, AxisType.Explicit),
    "auto": (AxisType.Auto, AxisType.Auto),
    "mixed": (AxisType.Explicit, AxisType.Auto),
}


def _sum(f):
    return lambda x: jnp.sum(f(x))


def _custom_vjp(f):
    @jax.custom_vjp
    def g(x):
        return f(x)

    g.defvjp(lambda x: (f(x), x), lambda x, ct: (ct * 2.0,))
    return jax.grad(_sum(g))


TRANSFORMS = {
    "jit": jax.jit,
    "grad": lambda f: jax.grad(_sum(f)),
    "value_and_grad": lambda f: lambda x: jax.value_and_grad(_sum(f))(x)[1],
    "vmap": jax.vmap,
    "jvp": lambda f: lambda x: jax.jvp(f, (x,), (x,))[1],
    "hessian": lambda f: jax.hessian(_sum(f)),
    "checkpoint": lambda f: jax.checkpoint(f),
    "scan": lambda f: lambda x: jax.lax.scan(lambda c, _: (f(c), None), x, None, length=2)[0],
    "cond": lambda f: lambda x: jax.lax.cond(jnp.sum(x) > -1.0, f, lambda y: y, x),
    "custom_vjp": _custom_vjp,
    "jit_grad": lambda f: jax.jit(jax.grad(_sum(f))),
}


def _vector_fn(annotation):
    @typechecked
    def double(x: annotation) -> annotation:
        return x * 2.0

    return double


@typechecked
def square(x: f32[b""]) -> f32[b""]:
    return x * x


@typechecked
def wrong_rank(x: f32[b"n m"]) -> f32[b"n m"]:
    return x


def _mesh(kind):
    types = MESHES[kind]
    return None if types is None else jax.make_mesh((4, 2), ("d", "t"), axis_types=types)


def _inputs(kind, mesh, transform):
    """(value, annotation) for an input kind; vmap adds a leading batch dim."""
    shape = (2, 8) if transform == "vmap" else (8,)
    if kind == "numpy":
        return np.arange(np.prod(shape), dtype=np.float32).reshape(shape), f32[b"n"]
    if kind == "jnp" and mesh is not None:
        value = jnp.arange(np.prod(shape), dtype=jnp.float32).reshape(shape)
        spec = (None, "d") if transform == "vmap" else ("d",)
        return put(mesh, value, *spec), f32[b"n/d"]
    return jnp.arange(np.prod(shape), dtype=jnp.float32).reshape(shape), f32[b"n"]


def _run(mesh, call):
    if mesh is None:
        return call()
    with jax.set_mesh(mesh):
        return call()


@pytest.mark.parametrize("mesh_kind", sorted(MESHES))
@pytest.mark.parametrize("input_kind", ["numpy", "jnp"])
@pytest.mark.parametrize("name", sorted(TRANSFORMS))
def test_vector_function(name, input_kind, mesh_kind):
    mesh = _mesh(mesh_kind)
    value, annotation = _inputs(input_kind, mesh, name)
    transform = TRANSFORMS[name]
    checked = transform(_vector_fn(annotation))
    plain = transform(lambda x: x * 2.0)
    got = _run(mesh, lambda: checked(value))
    want = _run(mesh, lambda: plain(value))
    np.testing.assert_allclose(np.asarray(got), np.asarray(want))


@pytest.mark.parametrize("mesh_kind", sorted(MESHES))
@pytest.mark.parametrize("name", sorted(set(TRANSFORMS) - {"vmap"}))
def test_python_scalar(name, mesh_kind):
    mesh = _mesh(mesh_kind)
    transform = TRANSFORMS[name]
    got = _run(mesh, lambda: transform(square)(3.0))
    want = _run(mesh, lambda: transform(lambda x: x * x)(3.0))
    np.testing.assert_allclose(np.asarray(got), np.asarray(want))


@pytest.mark.parametrize("mesh_kind", sorted(MESHES))
@pytest.mark.parametrize("input_kind", ["numpy", "jnp"])
@pytest.mark.parametrize("name", sorted(TRANSFORMS))
def test_wrong_rank_is_caught(name, input_kind, mesh_kind):
    mesh = _mesh(mesh_kind)
    value, _ = _inputs(input_kind, mesh, name)
    with pytest.raises(TypeCheckError, match=r'argument "x" .* of wrong_rank\(\) is not f32\[b\'n m\'\]: has 1 dim'):
        _run(mesh, lambda: TRANSFORMS[name](wrong_rank)(value))


@pytest.mark.parametrize("name", ["grad", "vmap", "jvp", "checkpoint"])
def test_numpy_under_eager_transform_with_sharded_annotation(name):
    """Host data traced by an eager transformation is on one device; a sharded annotation says so."""
    mesh = _mesh("auto")
    value, _ = _inputs("numpy", mesh, name)
    f = TRANSFORMS[name](_vector_fn(f32[b"n/d"]))
    with pytest.raises(TypeCheckError, match=r"the array has a SingleDeviceSharding \(not sharded over any "
                                             r"named mesh axis\) but the annotation shards it as P\('d'\)"):
        _run(mesh, lambda: f(value))


def test_vmap_sees_the_per_example_layout():
    """Under vmap a check sees one example: its dims and their sharding, not the batch dim's."""
    mesh = _mesh("explicit")
    batch_sharded = put(mesh, jnp.zeros((4, 8)), "d", None)
    f = jax.vmap(_vector_fn(f32[b"n"]))
    _run(mesh, lambda: f(batch_sharded))  # the batch dim's sharding is not the annotation's business
    g = jax.vmap(_vector_fn(f32[b"n/t"]))
    with pytest.raises(TypeCheckError, match="sharding over Explicit axes is P\\(None\\) but the annotation says P\\('t'\\)"):
        _run(mesh, lambda: g(batch_sharded))


def test_vmap_on_auto_axes_checks_the_example_dims():
    """On Auto axes the compiled layout of the batched array is read; the batch dim leads (vmap's
    default in_axes=0) and the annotation is compared with the dims after it."""
    mesh = _mesh("auto")
    f = jax.vmap(_vector_fn(f32[b"n/d"]))
    _run(mesh, lambda: f(put(mesh, jnp.zeros((2, 8)), None, "d")))
    wrong = put(mesh, jnp.zeros((4, 8)), "d", None)  # the batch dim sharded, the example's not
    with pytest.raises(TypeCheckError, match=r"sharding is P\(None\) but the annotation says P\('d'\)"):
        _run(mesh, lambda: f(wrong))


def test_vmap_trailing_unsharded_dims_on_auto_axes():
    """JAX writes P(None, 'd', None) as P(None, 'd'): the batch dims are counted, not guessed."""
    mesh = _mesh("auto")

    @typechecked
    def f(x: f32[b"n/d m"]) -> f32[b"n/d m"]:
        return x * 2

    value = put(mesh, jnp.zeros((3, 8, 4)), None, "d")
    for call in (jax.vmap(f), jax.jit(jax.vmap(f))):
        _run(mesh, lambda: call(value))
    _run(mesh, lambda: jax.vmap(jax.vmap(f))(put(mesh, jnp.zeros((2, 3, 8, 4)), None, None, "d")))
    wrong = put(mesh, jnp.zeros((4, 8, 4)), "d", None)
    with pytest.raises(TypeCheckError, match=r"sharding is P\(None, None\) but the annotation says P\('d', None\)"):
        _run(mesh, lambda: jax.vmap(f)(wrong))
