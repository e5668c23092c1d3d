"""``shardtypes.testing.assert_same_on_every_mesh``: correct kernels and steps agree on every mesh,
on Explicit and Auto axes; each kind of value mistake is a MeshMismatch with the mesh, the output,
the first differing block and its diagnosis; what the check cannot compare is skipped and said."""

from __future__ import annotations

import dataclasses
import pickle

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from typeguard import TypeCheckError

from shardtypes import f32, i32, ops, pytree_dataclass, typechecked, typed_shard_map
from shardtypes.testing import MeshMismatch, MeshReport, assert_same_on_every_mesh


@typed_shard_map
def matmul(x: f32[b"batch/d embed/t"], w: f32[b"embed/t hidden"]) -> f32[b"batch/d hidden"]:
    return jax.lax.psum(x @ w, "t")


@typed_shard_map
def column_mean_psum(x: f32[b"batch/d embed"]) -> f32[b"embed"]:
    return jax.lax.psum(x.mean(0), "d")  # each device's mean, summed: d times the mean


@typed_shard_map
def column_mean(x: f32[b"batch/d embed"]) -> f32[b"embed"]:
    return jax.lax.pmean(x.mean(0), "d")


@typed_shard_map
def column_sum_pmean(x: f32[b"batch/d embed"]) -> f32[b"embed"]:
    return jax.lax.pmean(x.sum(0), "d")  # a mean of the parts where their sum was meant


def _ring(x: jax.Array, step: int) -> jax.Array:
    n = jax.lax.axis_size("t")
    return jax.lax.ppermute(x, "t", [(i, (i + step) % n) for i in range(n)])


@typed_shard_map
def rotate_back(x: f32[b"seq/t embed"]) -> f32[b"seq/t embed"]:
    return _ring(x, 1)  # each device's block moves to the next: a ring's one step, as a result


@typed_shard_map
def first_block_everywhere(x: f32[b"seq/t embed"]) -> f32[b"seq/t embed"]:
    return jax.lax.all_gather(x, "t")[0] + 0 * x  # device 0's block on every device


@typed_shard_map
def positions(x: f32[b"seq/t embed"]) -> f32[b"seq/t embed"]:
    local = jnp.arange(x.shape[0], dtype=x.dtype)[:, None]  # the shard's offset is missing
    return x + local


@typed_shard_map
def positions_right(x: f32[b"seq/t embed"]) -> f32[b"seq/t embed"]:
    offset = jax.lax.axis_index("t") * x.shape[0]
    return x + (offset + jnp.arange(x.shape[0]))[:, None].astype(x.dtype)


@typed_shard_map
def two_outputs(x: f32[b"batch/d embed"]) -> tuple[f32[b"batch/d embed"], f32[b"embed"]]:
    return x * 2, jax.lax.psum(x.mean(0), "d")


# ---------------------------------------------------------------------------------------------
# Correct kernels agree.


@pytest.mark.parametrize("kind", ["explicit", "auto"])
def test_a_correct_kernel_agrees_on_every_mesh_and_the_report_says_what_ran(kind):
    report = assert_same_on_every_mesh(matmul, axis_types=kind)
    assert isinstance(report, MeshReport)
    assert report.reference == {"d": 1, "t": 1}
    assert report.ran[0] == report.reference
    assert {"d": 2, "t": 4} in report.ran and {"d": 4, "t": 2} in report.ran and {"d": 8, "t": 1} in report.ran
    assert report.skipped == ()
    assert report.sizes == {"batch": 8, "embed": 8, "hidden": 4}
    assert report.largest_difference == {"result": 0.0}
    assert report.compared["result"].startswith("exactly")
    text = str(report)
    assert "matmul() gives the same numbers on 7 meshes over d, t" in text
    assert "sizes batch=8, embed=8, hidden=4" in text


def test_a_mean_of_non_integers_is_compared_within_a_tolerance_of_its_dtype():
    report = assert_same_on_every_mesh(column_mean)
    assert report.compared["result"].startswith("within")
    assert "float32" in report.compared["result"]


def test_the_current_mesh_is_among_the_meshes_tried_and_gives_the_axes():
    mesh = jax.make_mesh((2, 2, 2), ("d", "t", "e"))
    with jax.set_mesh(mesh):
        report = assert_same_on_every_mesh(matmul)
    assert report.axes == ("d", "t", "e")
    assert {"d": 2, "t": 2, "e": 2} in report.ran


def test_given_inputs_are_laid_out_as_annotated_and_compared():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((16, 8), np.float32)
    w = rng.standard_normal((8, 4), np.float32)
    report = assert_same_on_every_mesh(matmul, x, w)
    assert report.sizes is None
    assert report.compared["result"].startswith("within")


# ---------------------------------------------------------------------------------------------
# Mistakes differ, with their diagnosis.


def _mismatch(fn, *args, **options) -> MeshMismatch:
    with pytest.raises(MeshMismatch) as info:
        assert_same_on_every_mesh(fn, *args, **options)
    assert isinstance(info.value, AssertionError)
    return info.value


def test_a_psum_where_a_pmean_was_meant_is_a_factor_of_the_axis_size():
    e = _mismatch(column_mean_psum)
    text = str(e)
    assert text.startswith("column_mean_psum() gives other numbers on mesh {d: 2} than on the reference mesh {d: 1}")
    assert "every element is 2 times the reference's, the size of 'd': a psum where a pmean was meant" in text
    assert "it differs exactly where 'd' is larger than 1" in text
    assert e.mesh == {"d": 2} and e.reference == {"d": 1} and e.output == "result"
    assert e.differing == ({"d": 2}, {"d": 4}, {"d": 8})
    assert text.rstrip().endswith("See https://shardtypes.github.io/shardtypes/same-numbers/#reading-a-meshmismatch")


def test_a_pmean_where_a_sum_was_meant_is_one_over_the_axis_size():
    e = _mismatch(column_sum_pmean)
    assert "1/2 of the reference's, one over the size of 'd': a pmean where a psum was meant" in str(e)


def test_a_ring_turning_the_wrong_way_is_blocks_moved_along_its_axis():
    e = _mismatch(rotate_back)
    text = str(e)
    assert "the first differing block is [0:4, 0:4], held by the device at t=0" in text
    assert "block i along 't' holds the reference's block i+1 (mod 2), for every i: a ring turning the wrong way" in text


def test_the_ring_step_is_named_on_a_larger_mesh():
    e = _mismatch(rotate_back, meshes=[{"t": 8}])
    assert "block i along 't' holds the reference's block i-1 (mod 8)" in str(e)


def test_one_devices_part_on_every_device_is_named():
    e = _mismatch(first_block_everywhere, meshes=[{"t": 4}])
    assert "every block along 't' holds the reference's block 0: one device's part broadcast" in str(e)


def test_a_missing_shard_offset_differs_and_names_the_first_wrong_block():
    assert_same_on_every_mesh(positions_right)
    e = _mismatch(positions, meshes=[{"t": 4}], dims={"seq": 8, "embed": 4})
    assert "the first differing block is [2:4, 0:4], held by the device at t=1" in str(e)
    assert "block i along 't' is the reference's plus i * -2: a shard offset left out" in str(e)
    assert e.max_abs == 6.0


def test_the_output_that_differs_is_named_by_its_path():
    e = _mismatch(two_outputs)
    assert e.output == "result[1]"
    assert "output: result[1], float32[4]" in str(e)


def test_a_mismatch_pickles_with_its_fields():
    e = _mismatch(column_mean_psum)
    back = pickle.loads(pickle.dumps(e))
    assert str(back) == str(e) and back.mesh == e.mesh and back.diagnosis == e.diagnosis


# ---------------------------------------------------------------------------------------------
# What the kernel means by design: held axes, tolerances.


@typed_shard_map
def stages(x: f32[b"stage/s batch/d embed"]) -> f32[b"stage/s batch/d embed"]:
    n = jax.lax.axis_size("s")
    return jax.lax.ppermute(x, "s", [(i, (i + 1) % n) for i in range(n)])  # a pipeline's send to the next stage


def test_an_axis_whose_size_is_part_of_the_meaning_is_held_with_keep():
    e = _mismatch(stages)
    assert "it differs exactly where 's' is larger than 1" in str(e)
    assert "block i along 's' holds the reference's block i+1 (mod 2)" in str(e)
    report = assert_same_on_every_mesh(stages, keep={"s": 4})
    assert report.reference == {"s": 4, "d": 1} and all(m["s"] == 4 for m in report.ran)
    assert report.ran[1:] == ({"s": 4, "d": 2},)


@typed_shard_map
def jittered(x: f32[b"batch/d embed"]) -> f32[b"batch/d embed"]:
    return x + 1e-3 * jax.lax.axis_index("d").astype(x.dtype)


def test_an_axis_that_makes_the_difference_without_a_diagnosis_is_offered_to_keep():
    @typed_shard_map
    def per_device_noise(x: f32[b"batch/d embed/t"]) -> f32[b"batch/d embed/t"]:
        return x * (1 + jax.lax.axis_index("d").astype(x.dtype) ** 2)

    e = _mismatch(per_device_noise)
    assert ("it differs exactly where 'd' is larger than 1 (if the function's meaning depends on the size of 'd', "
            "as a pipeline's does on its stage count, hold it: keep={'d': 2})") in str(e)

    @typed_shard_map
    def one_axis(x: f32[b"batch/d embed"]) -> f32[b"batch/d embed"]:
        return x * (1 + jax.lax.axis_index("d").astype(x.dtype) ** 2)

    e = _mismatch(one_axis)
    assert ("(if the function's meaning depends on the size of 'd', the only axis varied, it is not a function of "
            "its global inputs alone, and this check does not apply to it)") in str(e)


@typed_shard_map
def layers(x: f32[b"batch/d embed"], ws: list[f32[b"embed out/t"]]) -> f32[b"batch/d embed"]:
    for w in ws:  # each layer's output split over t, gathered for the next
        x = ops.all_gather("batch/d out/t -> batch/d out", x @ w, invariant=True)
    return x


def test_a_list_of_arrays_is_laid_out_item_by_item():
    rng = np.random.default_rng(0)
    x = rng.integers(-2, 3, (8, 4)).astype(np.float32)
    ws = [rng.integers(-2, 3, (4, 4)).astype(np.float32) for _ in range(2)]
    report = assert_same_on_every_mesh(layers, x, ws, meshes=[{"d": 2, "t": 2}, {"t": 4}])
    assert report.axes == ("d", "t")  # 't' named inside list[...]
    assert report.ran[1:] == ({"d": 2, "t": 2}, {"d": 1, "t": 4})  # on Explicit axes: each w laid out over t


@typed_shard_map
def exchange(x: f32[b"rows/d embed"]) -> f32[b"rows/d embed"]:
    y = jax.lax.all_to_all(x, "d", 0, 0, tiled=True)  # each device's rows cut in d pieces
    return jax.lax.all_to_all(y, "d", 0, 0, tiled=True)


def test_a_mesh_the_body_cannot_divide_is_skipped_and_said():
    report = assert_same_on_every_mesh(exchange, np.ones((8, 2), np.float32), meshes=[{"d": 2}, {"d": 4}])
    assert report.ran == ({"d": 1}, {"d": 2})
    ((mesh, why),) = report.skipped
    assert mesh == {"d": 4} and why.startswith("it cannot run there: ValueError:") and "divisible" in why


@typed_shard_map
def per_device_rows(x: f32[b"batch/d embed"]) -> f32[b"blocks/d embed"]:
    return x.sum(0, keepdims=True)  # one row per device, tiled by out_specs


def test_a_global_shape_that_depends_on_the_mesh_is_said():
    with pytest.raises((MeshMismatch, TypeCheckError)) as info:
        assert_same_on_every_mesh(per_device_rows)
    if isinstance(info.value, MeshMismatch):
        assert "the global shape depends on the mesh" in str(info.value)


def test_a_function_that_returns_nothing_has_nothing_to_compare():
    def side_effect(x: f32[b"batch/d embed"]) -> None:
        return None

    with pytest.raises(ValueError, match=r"side_effect\(\) returned no arrays \(NoneType\), so there is nothing to "
                                         r"compare"):
        assert_same_on_every_mesh(side_effect)


def test_a_function_without_arguments_has_nothing_to_compare():
    def constant() -> f32[b"n"]:
        return jnp.zeros(4)

    with pytest.raises(TypeError, match=r"constant\(\) takes no arguments, so no input's layout changes"):
        assert_same_on_every_mesh(constant)


def test_the_tolerance_is_exact_for_integers_and_the_users_when_given():
    rng = np.random.default_rng(0)
    x = rng.integers(-2, 3, (8, 4)).astype(np.float32)
    e = _mismatch(jittered, x)
    assert "compared exactly (integer inputs gave integer results)" in str(e)
    report = assert_same_on_every_mesh(jittered, x, atol=1e-2)
    assert report.compared["result"] == "within rtol=0, atol=0.01 (as given)"


def test_sizes_that_a_mesh_does_not_divide_skip_it_and_say_so():
    report = assert_same_on_every_mesh(column_mean, dims={"batch": 4, "embed": 3})
    assert {"d": 8} not in report.ran
    assert report.skipped == (({"d": 8}, "parameter 'x': dim 0 of it is 4, which d (8 ways) does not divide"),)
    assert "skipped {d: 8}: parameter 'x'" in str(report)


def test_nothing_but_the_reference_runs_is_an_error_not_agreement():
    with pytest.raises(ValueError, match=r"only the reference mesh could run column_mean\(\); every other mesh was "
                                         r"skipped: \{d: 2\}: parameter 'x': dim 0 of it is 3"):
        assert_same_on_every_mesh(column_mean, np.ones((3, 4), np.float32))


# ---------------------------------------------------------------------------------------------
# Steps under jit, with trees and grad.


@pytree_dataclass
class Params:
    w_in: f32[b"embed hidden/t"]
    w_out: f32[b"hidden/t"]


@jax.jit
@typechecked
def train_step(params: Params, x: f32[b"batch/d embed"]) -> tuple[Params, f32[b""]]:
    def loss(p: Params) -> jax.Array:
        return jnp.mean(jnp.tanh(x @ p.w_in) * p.w_out) ** 2

    value, grads = jax.value_and_grad(loss)(params)
    return jax.tree.map(lambda w, g: w - 0.1 * g, params, grads), value


@pytest.mark.parametrize("kind", ["explicit", "auto"])
def test_a_jitted_training_step_agrees_on_every_mesh(kind):
    report = assert_same_on_every_mesh(train_step, axis_types=kind)
    assert set(report.compared) == {"result[0].w_in", "result[0].w_out", "result[1]"}


@jax.jit
@typechecked
def step_with_a_kernel(params: Params, x: f32[b"batch/d embed"]) -> f32[b"batch/d embed"]:
    @typed_shard_map
    def layer(x: f32[b"batch/d embed"], p: Params) -> f32[b"batch/d embed"]:
        h = jnp.tanh(x @ p.w_in) * p.w_out
        return x + jax.lax.psum(h.sum(1, keepdims=True), "t") / jax.lax.axis_size("d")  # an extra division by d

    return layer(x, params)


def test_a_mistake_in_a_kernel_inside_a_step_is_found():
    e = _mismatch(step_with_a_kernel)
    assert "it differs exactly where 'd' is larger than 1" in str(e)


# ---------------------------------------------------------------------------------------------
# The kernel's own errors pass through; bad input is named.


@typed_shard_map
def unpaid(x: f32[b"b f/t"], w: f32[b"f/t m"]) -> f32[b"b m"]:
    return x @ w  # a partial sum over 't', returned unpaid: the kernel pass refuses it


def test_a_type_check_error_from_the_kernel_passes_through_unchanged():
    with pytest.raises(TypeCheckError, match="unpaid"):
        assert_same_on_every_mesh(unpaid)
    with pytest.raises(TypeCheckError, match='argument "x"'):
        assert_same_on_every_mesh(matmul, np.ones((8, 4), np.int32), np.ones((4, 2), np.float32))


def test_a_function_on_a_mesh_of_its_own_is_refused():
    mesh = jax.make_mesh((8,), ("d",))

    def body(x: f32[b"batch/d embed"]) -> f32[b"batch/d embed"]:
        return jax.device_put(x * 2, jax.NamedSharding(mesh, jax.P("d")))

    with pytest.raises(ValueError, match=r"body\(\) returned result on 8 devices, not on the 2 of the mesh set for "
                                         r"it \(\{d: 2\}\): it runs on a mesh of its own"):
        assert_same_on_every_mesh(body)


def no_annotations(x):
    return x


@pytest.mark.parametrize(("call", "error", "message"), [
    (lambda: assert_same_on_every_mesh(no_annotations, np.ones(4)), TypeError,
     r"no_annotations\(\) has no annotated parameters"),
    (lambda: assert_same_on_every_mesh(Params), TypeError, "fn must be a function"),
    (lambda: assert_same_on_every_mesh(matmul, meshes=[{"d": 4, "t": 4}]), ValueError,
     r"meshes\[0\] is \{d: 4, t: 4\}, 16 devices, and there are 8"),
    (lambda: assert_same_on_every_mesh(matmul, meshes=[{"x": 2}]), ValueError,
     r"meshes\[0\] names 'x', which is not an axis of the check"),
    (lambda: assert_same_on_every_mesh(matmul, meshes={"d": 2}), TypeError, "meshes must be a list of mesh shapes"),
    (lambda: assert_same_on_every_mesh(matmul, meshes=[{"d": 0}]), ValueError, r"meshes\[0\]\['d'\] is 0"),
    (lambda: assert_same_on_every_mesh(matmul, axes=("d", "t", "pipe")), ValueError,
     "axes names 'pipe', which no annotation of the function names"),
    (lambda: assert_same_on_every_mesh(matmul, axes=("d",)), ValueError,
     "the annotations name mesh axis 't', which axes=\\('d',\\) leaves out"),
    (lambda: assert_same_on_every_mesh(matmul, keep={"stage": 2}), ValueError,
     "keep names 'stage', which is not an axis of the check"),
    (lambda: assert_same_on_every_mesh(matmul, keep={"d": 3}), ValueError,
     r"keep\['d'\] is 3, which does not divide the 8 devices"),
    (lambda: assert_same_on_every_mesh(matmul, keep={"d": 8, "t": 1}), ValueError,
     "no mesh but the reference"),
    (lambda: assert_same_on_every_mesh(matmul, np.ones((8, 4), np.float32)), TypeError,
     r"the args do not fit matmul\(x: .*missing a required argument: 'w'"),
    (lambda: assert_same_on_every_mesh(matmul, np.ones((8, 4)), np.ones((4, 2)), dims={"batch": 8}), ValueError,
     "with the inputs given \\(args\\) it would be unused"),
    (lambda: assert_same_on_every_mesh(matmul, dims={"hiden": 8}), ValueError, "hiden"),
    (lambda: assert_same_on_every_mesh(matmul, rtol=-1), TypeError, "rtol must be a number >= 0"),
    (lambda: assert_same_on_every_mesh(matmul, seed="0"), TypeError, "seed must be an int"),
    (lambda: assert_same_on_every_mesh(matmul, axis_types="manual"), TypeError, "axis_types must be 'explicit'"),
])
def test_bad_input_is_an_error_naming_the_argument(call, error, message):
    with pytest.raises(error, match=message):
        call()


def with_a_config(x: f32[b"batch/d embed"], n: int) -> f32[b"batch/d embed"]:
    return x * n


def test_a_parameter_with_no_layout_needs_an_input_or_a_partial():
    with pytest.raises(TypeError, match="parameter 'n' is annotated <class 'int'>, which is not an array tree"):
        assert_same_on_every_mesh(typechecked(with_a_config))
    import functools

    assert_same_on_every_mesh(functools.partial(typechecked(with_a_config), n=3))


@typed_shard_map
def lookup(table: f32[b"vocab/t embed"], ids: i32[b"batch/d"]) -> f32[b"batch/d embed"]:
    rows = ops.index_unreduced("[vocab/t] embed, batch/d -> batch/d embed", table, ids)
    return jax.lax.psum(rows, "t")


def test_integer_inputs_are_made_in_a_small_range():
    report = assert_same_on_every_mesh(lookup)
    assert report.compared["result"].startswith("exactly")


@dataclasses.dataclass(frozen=True)
class Scaling:
    factor: float = 1.0


@typed_shard_map
def scaled(x: f32[b"batch/d embed"], config: Scaling) -> f32[b"batch/d embed"]:
    return x * config.factor


def test_a_static_parameter_given_in_args_is_passed_as_it_is():
    report = assert_same_on_every_mesh(scaled, np.ones((8, 4), np.float32), Scaling(2.0))
    assert report.ran[1:] == ({"d": 2}, {"d": 4}, {"d": 8})


@typed_shard_map
def rms_norm_summed(x: f32[b"batch embed/t"]) -> f32[b"batch embed/t"]:
    variance = jax.lax.psum(jnp.mean(x * x, axis=-1, keepdims=True), "t")  # a sum of the means: t times
    return x * jax.lax.rsqrt(variance + 1e-6)


def test_a_sum_for_a_mean_under_a_square_root_is_named():
    e = _mismatch(rms_norm_summed, meshes=[{"t": 2}])
    assert "1/sqrt of the size of 't': a sum where a mean was meant (or the reverse) under a square root" in str(e)
