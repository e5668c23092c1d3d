"""ops.all_gather(..., invariant=True): a gather JAX types as invariant, so a kernel can return it
replicated with check_vma on (issue #17).

Values and gradients (jax.grad of a loss of the kernel's result against the unsharded
computation) on Explicit and Auto meshes, eagerly and under jax.jit; a gradient taken inside the
kernel (a loss of an invariant gather is counted once, not once per device); the errors: an
invariant gather with check_vma off (in a typed kernel, and in a hand-written shard_map), a bad
``invariant`` argument, and a kernel returning a plain gather replicated (a TypeCheckError naming
the kernel, the value's path, the gather and the fix, before JAX's own ValueError). The same file
runs on the oldest JAX (0.9.2), where the invariant gather is a psum of the zero-padded block.
"""

import functools
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P
from typeguard import TypeCheckError

from shardtypes import f32, ops, pytree_dataclass, typed_shard_map

from conftest import put

RNG = np.random.default_rng(3)
MAT = RNG.standard_normal((8, 16)).astype(np.float32)  # 'V/t M/d' on a (d=4, t=2) mesh


def close(actual, expected):
    np.testing.assert_allclose(np.asarray(actual), expected, rtol=1e-5, atol=1e-5)


@typed_shard_map
def gather_both(x: f32[b"V/t M/d"]) -> f32[b"V M"]:
    return ops.all_gather("V/t M/d -> V M", x, invariant=True)


@typed_shard_map
def gather_one_keep_other(x: f32[b"V/t M/d"]) -> f32[b"V/t M"]:
    return ops.all_gather("V/t M/d -> V/t M", x, invariant=True)  # still varies over t


@typed_shard_map
def gather_tuple(x: f32[b"V M/t/d"]) -> f32[b"V M"]:
    return ops.all_gather("V M/t/d -> V M", x, invariant=True)  # blocks ordered t-major


def loss(kernel, x):
    return jnp.sum(jnp.sin(kernel(x)) * jnp.arange(x.shape[1], dtype=x.dtype))


def true_grad(x):
    return jax.grad(lambda x: jnp.sum(jnp.sin(x) * jnp.arange(x.shape[1], dtype=x.dtype)))(x)


@pytest.mark.parametrize("jitted", [True, False], ids=["jit", "eager"])
@pytest.mark.parametrize(
    "kernel, spec",
    [(gather_both, ("t", "d")), (gather_one_keep_other, ("t", "d")), (gather_tuple, (None, ("t", "d")))],
    ids=["two-dims", "one-dim", "tuple"],
)
def test_values_and_gradients_match_the_unsharded_computation(mesh, jitted, kernel, spec):
    wrap = jax.jit if jitted else (lambda f: f)
    with jax.set_mesh(mesh):
        x = put(mesh, MAT, *spec)
        close(wrap(kernel)(x), MAT)
        close(wrap(jax.grad(functools.partial(loss, kernel)))(x), true_grad(MAT))


@typed_shard_map
def grad_inside(x: f32[b"V/t M/d"]) -> f32[b"V/t M/d"]:
    return jax.grad(lambda b: jnp.sum(jnp.sin(ops.all_gather("V/t M/d -> V M", b, invariant=True))))(x)


@typed_shard_map
def grad_inside_plain(x: f32[b"V/t M/d"]) -> f32[b"V/t M/d"]:
    return jax.grad(lambda b: jnp.sum(jnp.sin(ops.all_gather("V/t M/d -> V M", b))))(x)


def test_a_loss_of_an_invariant_gather_is_counted_once_inside_a_kernel(mesh):
    # Taken inside the kernel (as a training step does): the plain gather's loss is counted on
    # each of the 8 devices, the invariant one's once in all.
    with jax.set_mesh(mesh):
        x = put(mesh, MAT, "t", "d")
        close(jax.jit(grad_inside)(x), np.cos(MAT))
        close(jax.jit(grad_inside_plain)(x), 8 * np.cos(MAT))


# ---------------------------------------------------------------------------------------------
# Errors.


@typed_shard_map(check_vma=False)
def invariant_unchecked(x: f32[b"V/t M/d"]) -> f32[b"V M"]:
    return ops.all_gather("V/t M/d -> V M", x, invariant=True)


OFF = (r"in kernel invariant_unchecked\(\), shardtypes.ops.all_gather\('V/t M/d -> V M'\) with "
       r"invariant=True: the kernel runs with check_vma=False, where JAX's gradient of an invariant "
       r"gather is wrong \(scaled by one over the number of devices gathered over\); use a plain "
       r"gather \(invariant=False\) or turn check_vma on")


@pytest.mark.parametrize("jitted", [True, False], ids=["jit", "eager"])
def test_invariant_gather_with_check_vma_off_is_refused(mesh, jitted):
    wrap = jax.jit if jitted else (lambda f: f)
    with jax.set_mesh(mesh):
        with pytest.raises(TypeCheckError, match=OFF):
            wrap(invariant_unchecked)(put(mesh, MAT, "t", "d"))


def raw_gather(x):
    return ops.all_gather("V/t M/d -> V M", x, invariant=True)


def test_invariant_gather_in_a_hand_written_shard_map(mesh):
    with jax.set_mesh(mesh):
        x = put(mesh, MAT, "t", "d")
        close(jax.shard_map(raw_gather, in_specs=P("t", "d"), out_specs=P())(x), MAT)
        with pytest.raises(TypeCheckError, match=(
                r"in raw_gather\(\), shardtypes.ops.all_gather\('V/t M/d -> V M'\) with invariant=True: "
                r"the operand does not vary over mesh axis 't' \(jax.typeof gives float32\[4,4\]\): the "
                r"shard_map runs with check_vma=False, .*scaled by one over the number of devices")):
            jax.shard_map(raw_gather, in_specs=P("t", "d"), out_specs=P(), check_vma=False)(x)


@pytest.mark.parametrize("bad", [1, None, "yes"])
def test_invariant_must_be_a_bool(mesh, bad):
    @typed_shard_map
    def kernel(x: f32[b"V/t M/d"]) -> f32[b"V M"]:
        return ops.all_gather("V/t M/d -> V M", x, invariant=bad)

    with jax.set_mesh(mesh):
        with pytest.raises(TypeError, match=r"shardtypes.ops.all_gather\('V/t M/d -> V M'\): argument "
                                            rf"'invariant' must be True or False, not {bad!r}"):
            kernel(put(mesh, MAT, "t", "d"))


@pytree_dataclass
class Gathered:
    w: f32[b"V M/d"]
    b: f32[b"V/t M/d"]


@typed_shard_map
def returns_plain_gather(x: f32[b"V/t M/d"]) -> Gathered:
    return Gathered(w=2 * ops.all_gather("V/t M/d -> V M/d", x), b=x)  # M/d still split, V gathered


def plain_gather_tuple(x: f32[b"V/t M/d"]) -> tuple[f32[b"V/t M"], f32[b"V/t M/d"]]:
    return ops.all_gather("V/t M/d -> V/t M", x), x


@pytest.mark.parametrize("jitted", [True, False], ids=["jit", "eager"])
def test_returning_a_plain_gather_replicated_names_the_value_the_gather_and_the_fix(mesh, jitted):
    wrap = jax.jit if jitted else (lambda f: f)
    with jax.set_mesh(mesh):
        x = put(mesh, MAT, "t", "d")
        with pytest.raises(TypeCheckError, match=(
                r"in kernel returns_plain_gather\(\), the return value\.w varies over mesh axis 't' "
                r"\(jax.typeof gives float32\[8,4\]\{V:\(d,t\)\}\), gathered by "
                r"shardtypes.ops.all_gather\('V/t M/d -> V M/d'\), but the return annotation replicates "
                r"it over 't' \(out_specs P\(None, 'd'\)\): JAX types a plain all_gather's result as "
                r"varying, so shard_map would reject the out_specs; gather it with "
                r"shardtypes.ops.all_gather\(\.\.\., invariant=True\)")):
            wrap(returns_plain_gather)(x)
        with pytest.raises(TypeCheckError, match=(
                r"in kernel plain_gather_tuple\(\), the return value\[0\] varies over mesh "
                r"axis 'd' .*gathered by shardtypes.ops.all_gather\('V/t M/d -> V/t M'\)")):
            wrap(typed_shard_map(plain_gather_tuple))(x)


def test_a_plain_gather_returned_with_check_vma_off_still_passes(mesh):
    with jax.set_mesh(mesh):
        out = typed_shard_map(plain_gather_tuple, check_vma=False)(put(mesh, MAT, "t", "d"))
    close(out[0], MAT)


def test_compiles_to_one_all_gather_where_jax_has_to_invarying(mesh):
    # JAX 0.10+: jax.lax.all_gather(..., to='invarying'), however the caller's mesh is set; older
    # JAX: a psum of the zero-padded block, an all-reduce.
    version = tuple(int("".join(c for c in p if c.isdigit()) or 0) for p in jax.__version__.split(".")[:2])
    with jax.set_mesh(mesh):
        text = jax.jit(gather_both).lower(put(mesh, MAT, "t", "d")).compile().as_text()
    collectives = set(re.findall(r"= \S+ (all-gather|all-reduce)\(", text))
    assert collectives == ({"all-gather"} if version >= (0, 10) else {"all-reduce"}), collectives


@pytest.mark.parametrize("dtype", [np.bool_, np.int32, jnp.bfloat16], ids=["bool", "int32", "bfloat16"])
def test_keeps_the_dtype(mesh, dtype):
    # (older JAX's psum adds bools as int32)
    x = (np.arange(16) % 3 == 0).astype(dtype)
    gather = jax.shard_map(lambda v: ops.all_gather("a/d/t -> a", v, invariant=True), mesh=mesh,
                           in_specs=P(("d", "t")), out_specs=P())
    with jax.set_mesh(mesh):
        out = jax.jit(gather)(put(mesh, x, ("d", "t")))
    assert out.dtype == x.dtype
    np.testing.assert_array_equal(np.asarray(out), x)
