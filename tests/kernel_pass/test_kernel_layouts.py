"""Layouts that follow values through a typed_shard_map kernel, sums still owed, and the varying
axes of values checked inside any shard_map body (issue 17).

On a 2x2 mesh two mesh axes have the same size, so only the layouts themselves (not the block
shapes) can tell a swap: each case runs there, on Explicit and Auto axes, under jax.jit and
eagerly, with check_vma on and off where it matters.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P
from typeguard import TypeCheckError

from shardtypes import ShapeSpecError, f32, ops, pytree_dataclass, typechecked, typed_shard_map, verify

from conftest import AXIS_TYPES, make_mesh, put

KINDS = sorted(AXIS_TYPES)
RNG = np.random.default_rng(17)
W = RNG.standard_normal((8, 8)).astype(np.float32)
X = RNG.standard_normal((4, 8)).astype(np.float32)


def square(kind):
    return make_mesh(kind, (2, 2), ("embed", "mlp"))


def close(a, b):
    np.testing.assert_allclose(np.asarray(a), b, rtol=1e-5, atol=1e-5)


@pytree_dataclass
class Params:
    w2: f32[b"d_ff/embed d_model/mlp"]


def swapped_gather(p: Params) -> f32[b"d_ff d_model"]:
    return ops.all_gather("d_ff/mlp d_model/embed -> d_ff d_model", p.w2)  # FSDP and TP swapped


def right_gather(p: Params) -> f32[b"d_ff d_model"]:
    return ops.all_gather("d_ff/embed d_model/mlp -> d_ff d_model", p.w2)


SWAP = (r"in kernel swapped_gather\(\), shardtypes.ops.all_gather\('d_ff/mlp d_model/embed -> d_ff d_model'\): "
        r"operand \(p.w2 \(argument \"p\" of swapped_gather\(\)\), annotated f32\[b'd_ff/embed d_model/mlp'\]\) "
        r"is laid out P\('embed', 'mlp'\), but the spec string's input 'd_ff/mlp d_model/embed' says "
        r"P\('mlp', 'embed'\): dim 0 is split over 'embed' here but split over 'mlp' in the spec; .*"
        r"mesh axes 'embed', 'mlp' are swapped between dims; all of size 2")


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("check_vma", [True, False])
@pytest.mark.parametrize("jitted", [True, False], ids=["jit", "eager"])
def test_swapped_same_size_axes_in_a_gather(kind, check_vma, jitted):
    mesh = square(kind)
    wrap = jax.jit if jitted else (lambda f: f)
    with jax.set_mesh(mesh):
        w = Params(put(mesh, W, "embed", "mlp"))
        bad = wrap(typed_shard_map(swapped_gather, check_vma=check_vma))
        with pytest.raises(TypeCheckError, match=SWAP):
            bad(w)
        if not check_vma:  # the gathered result is returned replicated
            close(wrap(typed_shard_map(right_gather, check_vma=False))(w), W)


def test_swap_on_a_mesh_of_different_sizes_is_a_layout_error_not_a_size_clash():
    mesh = make_mesh("explicit", (4, 2), ("embed", "mlp"))
    with jax.set_mesh(mesh):
        with pytest.raises(TypeCheckError, match="is laid out P\\('embed', 'mlp'\\)"):
            typed_shard_map(swapped_gather, check_vma=False)(Params(put(mesh, W, "embed", "mlp")))


@typechecked
def helper(w: f32[b"d_ff/mlp d_model/embed"]) -> f32[b"d_ff/mlp d_model/embed"]:
    return w


def passes_to_wrong_helper(p: Params) -> f32[b"d_ff/embed d_model/mlp"]:
    helper(p.w2)
    return p.w2


def annotated_local(p: Params) -> f32[b"d_ff/embed d_model/mlp"]:
    w: f32[b"d_ff/mlp d_model/embed"] = p.w2
    return w


@pytest.mark.parametrize("kind", KINDS)
def test_known_layout_meets_an_annotation(kind):
    mesh = square(kind)
    with jax.set_mesh(mesh):
        w = Params(put(mesh, W, "embed", "mlp"))
        with pytest.raises(TypeCheckError, match=r"argument \"w\" .*of helper\(\) is not "
                           r"f32\[b'd_ff/mlp d_model/embed'\]: it is laid out P\('embed', 'mlp'\) \(as p.w2"):
            jax.jit(typed_shard_map(passes_to_wrong_helper))(w)
        with pytest.raises(TypeCheckError, match=r"value assigned to w .*of annotated_local\(\).*"
                           r"it is laid out P\('embed', 'mlp'\) .*but the annotation says P\('mlp', 'embed'\)"):
            jax.jit(typed_shard_map(annotated_local))(w)


# ---------------------------------------------------------------------------------------------
# Sums still owed.


def returns_partial(x: f32[b"b f/mlp"], w: f32[b"f/mlp m"]) -> f32[b"b m"]:
    return ops.einsum_unreduced("b f/mlp, f/mlp m -> b m", x, w)


def permutes_partial(x: f32[b"b f/mlp"], w: f32[b"f/mlp m"]) -> f32[b"b m"]:
    h = ops.einsum_unreduced("b f/mlp, f/mlp m -> b m", x, w)
    return ops.ppermute("b m", h, "mlp", [(0, 1), (1, 0)])


def reduces(x: f32[b"b f/mlp"], w: f32[b"f/mlp m"]) -> f32[b"b m"]:
    return ops.psum("b m", ops.einsum_unreduced("b f/mlp, f/mlp m -> b m", x, w), "mlp")


def scatters(x: f32[b"b f/mlp"], w: f32[b"f/mlp m"]) -> f32[b"b m/mlp"]:
    return ops.psum_scatter("b m -> b m/mlp", ops.einsum_unreduced("b f/mlp, f/mlp m -> b m", x, w))


def half_reduced(x: f32[b"b f/embed/mlp"], w: f32[b"f/embed/mlp m"]) -> f32[b"b m"]:
    h = ops.einsum_unreduced("b f/embed/mlp, f/embed/mlp m -> b m", x, w)
    return ops.psum("b m", h, "mlp")  # still owes the sum over embed


def means_partial(x: f32[b"b f/mlp"], w: f32[b"f/mlp m"]) -> f32[b"b m"]:
    return ops.pmean("b m", ops.einsum_unreduced("b f/mlp, f/mlp m -> b m", x, w), "mlp")


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("check_vma", [True, False])
def test_partial_sums_must_be_reduced(kind, check_vma):
    mesh = square(kind)
    with jax.set_mesh(mesh):
        x, w = put(mesh, X, None, "mlp"), put(mesh, W, "mlp")
        kernel = lambda f: jax.jit(typed_shard_map(f, check_vma=check_vma))  # noqa: E731
        with pytest.raises(TypeCheckError, match=(
                r"the return value .*of returns_partial\(\) is not f32\[b'b m'\]: it is a partial sum still "
                r"owing a sum over mesh axis 'mlp' \(made by shardtypes.ops.einsum_unreduced\("
                r"'b f/mlp, f/mlp m -> b m'\)\); reduce it with shardtypes.ops.psum")):
            kernel(returns_partial)(x, w)
        with pytest.raises(TypeCheckError, match=(
                r"in kernel permutes_partial\(\), shardtypes.ops.ppermute\('b m'\): operand "
                r"\(the result of shardtypes.ops.einsum_unreduced\(.*\)\) is a partial sum still owing a sum "
                r"over mesh axis 'mlp'")):
            kernel(permutes_partial)(x, w)
        # pmean pays a partial sum as jax.lax.pmean does: the mean of the devices' parts (the
        # data-parallel idiom, pmean of local means or gradient contributions).
        close(kernel(means_partial)(x, w), X @ W / 2)
        close(kernel(reduces)(x, w), X @ W)
        close(kernel(scatters)(x, w), X @ W)
        with pytest.raises(TypeCheckError, match=r"half_reduced\(\).*still owing a sum over mesh axis 'embed'"):
            kernel(half_reduced)(put(mesh, X, None, ("embed", "mlp")), put(mesh, W, ("embed", "mlp")))


TABLE = RNG.standard_normal((8, 4)).astype(np.float32)
IDS = RNG.integers(0, 8, (4, 3)).astype(np.int32)


def looks_up(table: f32[b"V/mlp M"], ids: jax.Array) -> f32[b"B L M"]:
    return ops.index_unreduced("[V/mlp] M, B L -> B L M", table, ids)


@pytest.mark.parametrize("kind", KINDS)
def test_index_unreduced_owes_its_bracketed_axes(kind):
    mesh = square(kind)

    def kernel(table: f32[b"V/mlp M"], ids: f32[b"B L"]) -> f32[b"B L M"]:
        return ops.index_unreduced("[V/mlp] M, B L -> B L M", table, ids.astype(jnp.int32))

    with jax.set_mesh(mesh):
        with pytest.raises(TypeCheckError, match=r"owing a sum over mesh axis 'mlp' \(made by "
                           r"shardtypes.ops.index_unreduced"):
            jax.jit(typed_shard_map(kernel, check_vma=False))(put(mesh, TABLE, "mlp"), put(mesh, IDS.astype(np.float32)))


def test_einsum_spec_lays_each_dim_out_alike():
    mesh = square("explicit")

    def kernel(x: f32[b"b f/mlp"], w: f32[b"f/mlp m"]) -> f32[b"b m/embed"]:
        return ops.einsum_unreduced("b f/mlp, f/mlp m -> b m/embed", x + 0, w + 0)  # operands unknown

    with jax.set_mesh(mesh), pytest.raises(ShapeSpecError, match=(
            r"einsum_unreduced: dim 'm' is split over no mesh axis in operand 1 but over 'embed' in the output")):
        typed_shard_map(kernel, check_vma=False)(put(mesh, X, None, "mlp"), put(mesh, W, "mlp"))


# ---------------------------------------------------------------------------------------------
# The table lives for one trace.


def test_a_failed_trace_leaves_no_layouts_behind():
    from shardtypes.checking import kernel_layouts  # the side table itself: closed after a failed trace

    mesh = square("explicit")
    with jax.set_mesh(mesh):
        with pytest.raises(TypeCheckError):
            typed_shard_map(swapped_gather)(Params(put(mesh, W, "embed", "mlp")))
    assert not kernel_layouts.trace_open()


def test_the_side_table_is_open_while_a_body_is_traced_and_only_then():
    from shardtypes.checking import kernel_layouts  # test-facing: trace_open

    seen = []

    def body(x: f32[b"b/embed f"]) -> f32[b"b/embed f"]:
        seen.append(kernel_layouts.trace_open())
        return x

    mesh = square("explicit")
    with jax.set_mesh(mesh):
        assert not kernel_layouts.trace_open()
        typed_shard_map(body)(put(mesh, X, "embed"))
    assert seen == [True] and not kernel_layouts.trace_open()


def test_tracked_kernels_compute_what_plain_shard_map_does():
    mesh = square("auto")

    def fsdp(x: f32[b"b/embed f"], w: f32[b"f/embed m/mlp"]) -> f32[b"b/embed m/mlp"]:
        w = ops.all_gather("f/embed m/mlp -> f m/mlp", w)
        return ops.einsum_unreduced("b/embed f, f m/mlp -> b/embed m/mlp", x, w)

    with jax.set_mesh(mesh):
        x, w = put(mesh, X, "embed"), put(mesh, W, "embed", "mlp")
        close(jax.jit(typed_shard_map(fsdp))(x, w), X @ W)
        close(jax.grad(lambda w: typed_shard_map(fsdp)(x, w).sum())(w), np.outer(X.sum(0), np.ones(8)))


# ---------------------------------------------------------------------------------------------
# Varying axes inside any shard_map body (item 4).


@typechecked
def body(x: f32[b"batch/d embed"]) -> f32[b"batch/d embed"]:
    return x * 2


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("jitted", [True, False], ids=["jit", "eager"])
def test_checked_body_in_a_plain_shard_map_compares_varying_axes(kind, jitted):
    mesh = make_mesh(kind)  # (d=4, t=2)
    split = jax.shard_map(body, in_specs=P("d", "t"), out_specs=P("d", "t"))
    wrap = jax.jit if jitted else (lambda f: f)
    with jax.set_mesh(mesh):
        x = put(mesh, np.ones((8, 16), np.float32), "d", "t")
        with pytest.raises(TypeCheckError, match=(
                r"argument \"x\" .*of body\(\) is not f32\[b'batch/d embed'\]: it varies over manual mesh "
                r"axis 't' \(jax.typeof gives float32\[2,8\]\{V:\(d,t\)\}\), which the annotation does not name")):
            wrap(split)(x)
        right = jax.shard_map(body, in_specs=P("d"), out_specs=P("d"))
        close(wrap(right)(put(mesh, np.ones((8, 16), np.float32), "d")), 2 * np.ones((8, 16)))
        # check_vma off: JAX tracks no varying axes, so only sizes are compared (as before)
        unchecked = jax.shard_map(body, in_specs=P("d", "t"), out_specs=P("d", "t"), check_vma=False)
        wrap(unchecked)(x)


@typechecked
def rms(x: f32[b"batch/embed d_model"]) -> f32[b"batch/embed d_model"]:
    return x / jnp.sqrt(jnp.mean(x * x, axis=-1, keepdims=True) + 1e-6)


@pytest.mark.parametrize("kind", KINDS)
def test_gathered_values_pass_checked_helpers_with_check_vma_on(kind):
    mesh = square(kind)

    def kernel(x: f32[b"batch/embed d_model/mlp"]) -> f32[b"batch/embed d_model/mlp"]:
        full = ops.all_gather("batch/embed d_model/mlp -> batch/embed d_model", x)
        rms(full * 1.0)  # typed varying over mlp by JAX, but gathered: the same everywhere
        return x

    with jax.set_mesh(mesh):
        jax.jit(typed_shard_map(kernel))(put(mesh, W, "embed", "mlp"))


# ---------------------------------------------------------------------------------------------
# verify sees it at 64 x 64.


def test_verify_reports_a_same_size_swap_with_op_and_operand():
    report = verify(typed_shard_map(swapped_gather, check_vma=False), {"embed": 64, "mlp": 64})
    assert not report.ok
    (problem,) = report.problems
    assert problem.kind == "check"
    assert "shardtypes.ops.all_gather('d_ff/mlp d_model/embed -> d_ff d_model')" in str(problem)
    assert "operand (p.w2" in str(problem) and "swapped between dims" in str(problem)
    report = verify(typed_shard_map(returns_partial, check_vma=False), {"embed": 64, "mlp": 64})
    (problem,) = report.problems
    assert "partial sum still owing a sum over mesh axis 'mlp'" in str(problem)


# ---------------------------------------------------------------------------------------------
# Kernels never crash raw (item 6), and rules errors inside collectives keep their context (7).


def bare_array(x: f32[b"B/d M"], w: jax.Array) -> f32[b"B/d M"]:
    return x * w.sum()


def generator_kernel(x: f32[b"B/d M"]) -> f32[b"B/d M"]:
    yield x


def static_scale(x: f32[b"B/d M"], scale) -> f32[b"B/d M"]:
    return x * scale


@pytree_dataclass
class Layer:
    w: f32[b"M F/t"]


from shardtypes import Array, AxisRules, axis_rules  # noqa: E402


@typechecked
def first_layer(layer: Layer) -> f32[b"M F/t"]:
    return layer.w


def over_layers(layers: Array["layers", Layer]) -> f32[b"M F/t"]:
    return first_layer(jax.tree.map(lambda a: a[0], layers))  # a slice, as lax.scan hands it


@pytest.mark.parametrize("kind", KINDS)
def test_kernels_never_crash_raw(kind):
    mesh = make_mesh(kind)
    with jax.set_mesh(mesh):
        x = put(mesh, np.ones((8, 4), np.float32), "d")
        with pytest.raises(TypeError, match=r"typed_shard_map: argument \"w\" of bare_array is annotated "
                           r"jax.Array, which says nothing of its dtype, dims or sharding"):
            typed_shard_map(bare_array)(x, jnp.ones(3))
        with pytest.raises(TypeError, match=r"typed_shard_map: argument 'scale' of static_scale is given an "
                           r"array, but its annotation has no array type in it"):
            typed_shard_map(static_scale)(x, jnp.ones(()))
        close(typed_shard_map(static_scale)(x, 2.0), 2 * np.ones((8, 4)))
        stack = Layer(put(mesh, np.ones((3, 4, 6), np.float32), None, None, "t"))
        close(jax.jit(typed_shard_map(over_layers))(stack), np.ones((4, 6)))
    with pytest.raises(TypeError, match="typed_shard_map: generator_kernel is a generator function; a kernel "
                       "must return its arrays"):
        typed_shard_map(generator_kernel)


def typo_in_spec(x: f32[b"B/batch M/embed"]) -> f32[b"B/batch M"]:
    return ops.all_gather("B/batch M/embd -> B/batch M", x)


@pytest.mark.parametrize("kind", KINDS)
def test_a_typo_in_an_ops_spec_names_kernel_op_and_closest_name(kind):
    from shardtypes import AxisRulesError

    mesh = make_mesh(kind)
    rules = AxisRules([("batch", "d"), ("embed", "t")])
    with jax.set_mesh(mesh), axis_rules(rules):
        x = put(mesh, np.ones((8, 4), np.float32), "d", "t")
        with pytest.raises(AxisRulesError, match=(
                r"in kernel typo_in_spec\(\), shardtypes.ops.all_gather\('B/batch M/embd -> B/batch M'\): "
                r"the spec string's dim 1 'M/embd': logical axis 'embd' has no rule .*; did you mean 'embed'\?")):
            typed_shard_map(typo_in_spec, check_vma=False)(x)


def test_no_rule_and_unknown_mesh_axis_messages_offer_the_closest_name():
    from shardtypes import AxisRulesError, make_partition_specs, make_shardings

    mesh = make_mesh("explicit", (4, 2), ("data", "model"))
    with axis_rules(AxisRules([("embed", "model")])):
        with pytest.raises(AxisRulesError, match=r"logical axis 'embd' has no rule.*did you mean 'embed'\?"):
            make_partition_specs(f32[b"B M/embd"])
    with axis_rules(AxisRules([("embed", "modle")])):
        with pytest.raises(AxisRulesError, match=r"names mesh axis 'modle'.*did you mean 'model'\?"):
            make_shardings(f32[b"B M/embed"], mesh)

    def gather_over(x: f32[b"B/data M/model"]) -> f32[b"B/data M/model"]:
        ops.all_gather("B/data M/modle -> B/data M", x)
        return x

    with jax.set_mesh(mesh), pytest.raises(ValueError, match=(
            r"shardtypes.ops.all_gather\('B/data M/modle -> B/data M'\): the spec: mesh axis 'modle' is not "
            r"in the mesh.*did you mean 'model'\?")):
        typed_shard_map(gather_over, check_vma=False)(put(mesh, np.ones((8, 4), np.float32), "data", "model"))
