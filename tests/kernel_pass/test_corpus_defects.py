"""Defects that running other people's kernels through typed_shard_map showed (the kernel-pass
issue's item 3), each with the kernel that showed it: the wrong verdict first, then the right one."""

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from typeguard import TypeCheckError

from shardtypes import f32, i32, typed_shard_map

from conftest import AXIS_TYPES, make_mesh, put

KINDS = sorted(AXIS_TYPES)
X = np.arange(8, dtype=np.float32)


def closing_over(w_of, returns_psum: bool, check_vma: bool):
    """A jitted function whose typed kernel closes over ``w`` (a jit argument: a tracer)."""

    def f(x, w):
        @partial(typed_shard_map, check_vma=check_vma)
        def scaled_total(x: f32[b"n/i"]) -> f32[b""]:
            local = jnp.sum(x * w_of(w))
            return jax.lax.psum(local, "i") if returns_psum else local

        return scaled_total(x)

    return f


@pytest.mark.parametrize("check_vma", [False, True])
def test_a_closed_over_traced_value_does_not_take_an_arguments_layout(check_vma):
    """Closing over a jit argument (Auto axes: JAX refuses closures on Explicit ones) used to give
    the closed-over value the first argument's layout: a missing psum passed with check_vma=False
    and the kernel returned device 0's partial sum."""
    mesh = make_mesh("auto", (8,), ("i",))
    with jax.set_mesh(mesh):
        x = put(mesh, X, "i")
        with pytest.raises(TypeCheckError, match=r"the return value of .*scaled_total\(\), annotated f32\[b''\]: it "
                                                 r"varies over mesh axis 'i'"):
            jax.jit(closing_over(lambda w: w, False, check_vma))(x, jnp.float32(1.0))
        assert float(jax.jit(closing_over(lambda w: w, True, check_vma))(x, jnp.float32(2.0))) == 56.0
        # Under grad, the closed-over value is a JVP tracer.
        grad = jax.grad(lambda w: closing_over(lambda w: w * w, True, check_vma)(x, w))(jnp.float32(3.0))
        assert float(grad) == pytest.approx(2 * 3.0 * 28.0)


@pytest.mark.parametrize("kind", KINDS)
def test_an_eager_body_that_branches_on_values_runs_as_jax_runs_it(kind):
    """JAX runs an eager shard_map's body op by op, so Python may read values there; the typed
    kernel used to die with TracerBoolConversionError 'while tracing for jit'. It runs now, its
    boundary checked, and one KernelPassWarning says the pass could not follow it."""
    from shardtypes import KernelPassWarning

    mesh = make_mesh(kind, (8,), ("i",))

    def clip_positive_blocks(x: f32[b"n/i"]) -> f32[b"n/i"]:
        if jax.lax.psum(x.sum(), "i") > 200:  # a Python branch on a value (the same on every device)
            return x * 0
        return x

    with jax.set_mesh(mesh):
        x = put(mesh, X * 10, "i")
        plain = jax.shard_map(clip_positive_blocks, mesh=mesh, in_specs=jax.P("i"), out_specs=jax.P("i"))(x)
        with pytest.warns(KernelPassWarning, match=r"the body of kernel .*clip_positive_blocks\(\) reads the values "
                                                   r"of arrays in Python \(TracerBoolConversionError"):
            out = typed_shard_map(clip_positive_blocks)(x)
        np.testing.assert_array_equal(np.asarray(out), np.asarray(plain))
        # Under jit JAX cannot run it either, and says why.
        with pytest.raises(jax.errors.TracerBoolConversionError):
            jax.jit(typed_shard_map(clip_positive_blocks))(x)
        # Its boundary is still checked.
        with pytest.raises(TypeCheckError, match="clip_positive_blocks"):
            typed_shard_map(clip_positive_blocks)(put(mesh, X.astype(np.int32), "i"))


@pytest.mark.parametrize("kind", KINDS)
def test_lists_and_dicts_of_arrays_are_kernel_parameters_and_results(kind):
    """The tutorial's MLP takes its params as a list of (W, b) pairs: list[...] and dict[str, ...]
    of annotated arrays (or of tuples of them) are parameters; a list of arrays is a result."""
    mesh = make_mesh(kind, (4, 2), ("b", "m"))
    rng = np.random.default_rng(7)
    ws = [rng.standard_normal((8, 8)).astype(np.float32) for _ in range(2)]
    bs = [rng.standard_normal((8,)).astype(np.float32) for _ in range(2)]
    x = rng.standard_normal((8, 8)).astype(np.float32)

    def mlp(params: list[tuple[f32[b"i o/m"], f32[b"o/m"]]], x: f32[b"n/b i"]) -> f32[b"n/b o"]:
        for w, b in params:
            x = jax.lax.all_gather(jnp.tanh(x @ w + b), "m", axis=1, tiled=True)
        return x

    def named(xs: dict[str, f32[b"n/b i"]]) -> list[f32[b"n/b i"]]:
        return [xs["a"] + xs["b"], xs["a"] - xs["b"]]

    expected = x
    for w, b in zip(ws, bs):
        expected = np.tanh(expected @ w + b)
    with jax.set_mesh(mesh):
        params = [(put(mesh, w, None, "m"), put(mesh, b, "m")) for w, b in zip(ws, bs)]
        for f in (typed_shard_map(mlp, check_vma=False), jax.jit(typed_shard_map(mlp, check_vma=False))):
            np.testing.assert_allclose(np.asarray(f(params, put(mesh, x, "b"))), expected, rtol=1e-5, atol=1e-5)
        total, diff = jax.jit(typed_shard_map(named))({"a": put(mesh, x, "b"), "b": put(mesh, x * 2, "b")})
        np.testing.assert_allclose(np.asarray(total), x * 3, rtol=1e-6)
        np.testing.assert_allclose(np.asarray(diff), -x, rtol=1e-6)
        # Each item is checked against the one annotation: a wrong layout names its place.
        with pytest.raises(TypeCheckError, match=r'argument "params"'):
            typed_shard_map(mlp, check_vma=False)([params[0], (params[1][0], put(mesh, bs[1]))], put(mesh, x, "b"))


def test_list_and_dict_literals_as_annotations_say_what_to_write():
    mesh = make_mesh("explicit", (8,), ("i",))

    def literal(xs: [f32[b"n/i"], f32[b"n/i"]]) -> f32[b"n/i"]:  # type: ignore[valid-type]
        return xs[0]

    def literal_dict(xs: {"a": f32[b"n/i"]}) -> f32[b"n/i"]:  # type: ignore[valid-type]  # noqa: F821
        return xs["a"]

    with jax.set_mesh(mesh):
        x = put(mesh, X, "i")
        with pytest.raises(TypeError, match=(
                r'argument "xs" of .*literal\(\) is annotated with a list literal \(\[.*\]\), which is not a type '
                r"Python's typing can check; write tuple\[...\] with one annotation per item \(fixed length\), "
                r"or list\[X\] for any length")):
            typed_shard_map(literal)([x, x])
        with pytest.raises(TypeError, match=r"annotated with a dict literal .*write dict\[str, X\]"):
            typed_shard_map(literal_dict)({"a": x})


def test_a_list_of_trees_as_a_result_says_what_to_write():
    def pairs(x: f32[b"n/i"]) -> list[tuple[f32[b"n/i"], f32[b"n/i"]]]:
        return [(x, x)]

    mesh = make_mesh("explicit", (8,), ("i",))
    with jax.set_mesh(mesh), pytest.raises(TypeError, match=(
            r"the return value of .*pairs is annotated list\[tuple\[.*\]\]: a container of any length whose "
            r"items are trees has no out_specs before the body runs; return a tuple\[...\] of fixed length")):
        typed_shard_map(pairs)(put(mesh, X, "i"))


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("check_vma", [True, False])
def test_a_value_the_same_on_every_device_returned_under_a_split_annotation(kind, check_vma):
    """JAX's all_gather then out_specs=P('i'): each device's block is the gathered value, side by
    side. A result dim named otherwise declares that; named like the gathered dim it claims that
    dim's global value, and its size says it is not."""
    mesh = make_mesh(kind, (8,), ("i",))

    def gathered(x: f32[b"n/i"]) -> f32[b"copies/i"]:
        return jax.lax.all_gather(x, "i", tiled=True)

    def claims_n(x: f32[b"n/i"]) -> f32[b"n/i"]:
        return jax.lax.all_gather(x, "i", tiled=True)

    def varies(x: f32[b"n/i"]) -> f32[b"copies/i"]:
        return jnp.tile(x, 8) * jax.lax.axis_index("i")

    with jax.set_mesh(mesh):
        x = put(mesh, X, "i")
        np.testing.assert_array_equal(np.asarray(typed_shard_map(gathered, check_vma=check_vma)(x)), np.tile(X, 8))
        with pytest.raises(TypeCheckError, match=r"dimension 'n' is 64 here \(dim 0\) but was bound to 8"):
            typed_shard_map(claims_n, check_vma=check_vma)(x)
        # A value that differs per device is its block, as declared: the pass does not object.
        out = typed_shard_map(varies, check_vma=check_vma)(x)
        np.testing.assert_array_equal(np.asarray(out), np.concatenate([np.tile(X[i:i + 1], 8) * i for i in range(8)]))


@pytest.mark.parametrize("kind", KINDS)
def test_psum_scatter_of_a_value_split_over_the_scattered_axis(kind):
    """It adds the blocks of the split dim together (as a psum would) and scatters the sum: a valid
    layout (not P(('i', 'i'))), a sum of different blocks that a dim named like the original may
    not hold, and the numbers JAX gives where the dim is summed over afterwards."""
    mesh = make_mesh(kind, (8,), ("i",))
    data = np.arange(64, dtype=np.float32)

    def scatter_back(x: f32[b"n/i"]) -> f32[b"n/i"]:
        return jax.lax.psum_scatter(x, "i", tiled=True)

    def total(x: f32[b"n/i"]) -> f32[b""]:
        return jax.lax.psum(jnp.sum(jax.lax.psum_scatter(x, "i", tiled=True)), "i")

    with jax.set_mesh(mesh):
        x = put(mesh, data, "i")
        with pytest.raises(TypeCheckError, match=r"dimension 'n' is 8 here") as caught:
            typed_shard_map(scatter_back, check_vma=False)(x)
        assert "('i', 'i')" not in str(caught.value)
        assert float(typed_shard_map(total, check_vma=False)(x)) == float(data.sum())


@pytest.mark.parametrize("kind", KINDS)
def test_all_to_all_within_one_dim_permutes_it(kind):
    """all_to_all with split_axis == concat_axis permutes a dim (no layout to claim): it runs as
    JAX runs it, under a dim of its own name."""
    mesh = make_mesh(kind, (8,), ("i",))
    data = np.arange(64, dtype=np.float32)

    def in_place(x: f32[b"n/i"]) -> f32[b"k/i"]:
        return jax.lax.all_to_all(x, "i", 0, 0, tiled=True)

    with jax.set_mesh(mesh):
        x = put(mesh, data, "i")
        plain = jax.shard_map(lambda x: jax.lax.all_to_all(x, "i", 0, 0, tiled=True), mesh=mesh,
                              in_specs=jax.P("i"), out_specs=jax.P("i"))(x)
        np.testing.assert_array_equal(np.asarray(typed_shard_map(in_place)(x)), np.asarray(plain))


def test_a_collective_over_axis_index_groups_is_not_followed_and_says_so():
    """Each group is a collective of its own: the pass does not follow it (one KernelPassWarning
    naming axis_index_groups), and the kernel runs as JAX runs it."""
    from shardtypes import KernelPassWarning

    mesh = make_mesh("auto", (8,), ("i",))
    data = np.arange(64, dtype=np.float32)
    groups = [[0, 1, 2, 3], [4, 5, 6, 7]]

    def grouped(x: f32[b"n/i"]) -> f32[b"k/i"]:
        return jax.lax.psum(x, "i", axis_index_groups=groups)

    with jax.set_mesh(mesh):
        x = put(mesh, data, "i")
        expected = jax.shard_map(lambda x: jax.lax.psum(x, "i", axis_index_groups=groups), mesh=mesh,
                                 in_specs=jax.P("i"), out_specs=jax.P("i"), check_vma=False)(x)
        with pytest.warns(KernelPassWarning, match="axis_index_groups"):
            out = typed_shard_map(grouped, check_vma=False)(x)
        np.testing.assert_array_equal(np.asarray(out), np.asarray(expected))


def test_jax_errors_name_the_users_kernel():
    mesh = make_mesh("explicit", (8,), ("i",))

    def my_kernel(x: f32[b"n/i"]) -> f32[b"n"]:
        return x * 2

    with jax.set_mesh(mesh), pytest.raises(Exception) as caught:
        typed_shard_map(my_kernel)(put(mesh, X, "i"))
    assert "mapped" not in str(caught.value)


def vocab_parallel_argmax(logits: f32[b"b/d v/t"]) -> i32[b"b/d"]:
    """The argmax over a vocabulary split over 't' (jax-ml/jax issue 28334): the local max, the
    global one, and the index on the device whose max is the global one."""
    local_max = logits.max(-1)
    global_max = jax.lax.pmax(local_max, "t")
    local_idx = jnp.argmax(logits, -1).astype(jnp.int32) + jax.lax.axis_index("t") * logits.shape[-1]
    return jax.lax.pmin(jnp.where(local_max == global_max, local_idx, jnp.int32(2 ** 30)), "t")


def argmax_without_the_agreement(logits: f32[b"b/d v/t"]) -> i32[b"b/d"]:
    local_idx = jnp.argmax(logits, -1).astype(jnp.int32) + jax.lax.axis_index("t") * logits.shape[-1]
    return jnp.where(logits.max(-1) > 0, local_idx, 0)  # each device's own index, returned as the answer


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("check_vma", [True, False])
def test_the_vocab_parallel_argmax_runs_and_its_mistake_is_caught(kind, check_vma):
    mesh = make_mesh(kind, (2, 4), ("d", "t"))
    logits = np.random.default_rng(28334).standard_normal((8, 32)).astype(np.float32)
    with jax.set_mesh(mesh):
        x = put(mesh, logits, "d", "t")
        out = jax.jit(typed_shard_map(vocab_parallel_argmax, check_vma=check_vma))(x)
        np.testing.assert_array_equal(np.asarray(out), logits.argmax(-1))
        with pytest.raises(TypeCheckError, match=r"argmax_without_the_agreement\(\).*varies over mesh axis 't'"):
            jax.jit(typed_shard_map(argmax_without_the_agreement, check_vma=False))(x)
