"""The activation estimate on steps outside its own benchmark (issue 36 item 6): a jitted MLP step
and a scan over checkpointed blocks that return their loss and gradients, not donated, compiled
here on the 8 CPU devices and held within 3x of XLA's ``temp_size_in_bytes``, on Explicit and on
Auto axes; and each thing XLA keeps that the jaxpr does not show, worked out by hand on a small
step: the partial sum of a matmul over a split dim, a layer's weights a scan's body copies out, a
loop's carries updated in place, and zeros made in an output's buffer."""

import importlib.util
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import pytest
from jax.sharding import AbstractMesh, AxisType, PartitionSpec as P

from shardtypes import f32, typechecked, verify

ROOT = Path(__file__).resolve().parents[2]
KINDS = {"explicit": AxisType.Explicit, "auto": AxisType.Auto}


def _benchmark():
    spec = importlib.util.spec_from_file_location("activation_benchmark", ROOT / "benchmarks" / "activations.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


BENCHMARK = _benchmark()
STEPS = {
    "mlp+grad": lambda kind: BENCHMARK.mlp_grad_case(kind),
    "scan+grad": lambda kind: BENCHMARK.scan_grad_case(kind),
    "scan[i]+grad": lambda kind: BENCHMARK.scan_grad_case(kind, indexed=True),
}


@pytest.mark.parametrize("kind", sorted(KINDS))
@pytest.mark.parametrize("step", sorted(STEPS))
def test_within_3x_of_what_xla_allocates(step, kind):
    """Before: 0.66x (mlp+grad), 0.26x (scan+grad) and 4.7x (scan[i]+grad) on JAX 0.12; the issue
    measured 0.37x and 0.19x on steps written alike."""
    estimate, temp, report = STEPS[step](KINDS[kind])
    assert temp > 0 and report.activations.lower_bound == ()
    assert 1 / 3 <= estimate / temp <= 3, (estimate, temp, str(report.activations))


def test_the_benchmark_runs_them():
    assert {"mlp+grad", "scan+grad", "scan[i]+grad"} <= set(BENCHMARK.CASES)
    assert all(target == 3.0 for name, (_, target) in BENCHMARK.CASES.items() if name.endswith("+grad"))


# ---------------------------------------------------------------------------------------------
# Each rule by hand, through verify on a d=8 mesh: batch 64 (8 rows per device), embed 32,
# hidden 128, layers 4; float32.

DIMS = {"batch": 64, "embed": 32, "hidden": 128, "layers": 4}


def dims_but(name):
    """DIMS without a name the step does not use (verify refuses sizes no annotation uses)."""
    return {k: v for k, v in DIMS.items() if k != name}


def mesh(kind: str) -> AbstractMesh:
    return AbstractMesh((8,), ("d",), axis_types=(KINDS[kind],))


def whole(kind: str):
    """out_sharding for a matmul whose result is not split: Explicit axes ask where it goes."""
    return P(None, None) if kind == "explicit" else None


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_a_matmul_over_a_split_dim_holds_its_partial_sum_too(kind):
    out = whole(kind)

    @typechecked
    def weight_grad(x: f32[b"batch/d embed"], dy: f32[b"batch/d hidden"]) -> f32[b"embed hidden"]:
        g = jnp.einsum("be,bh->eh", x, dy, out_sharding=out)  # contracts batch, split over d: a sum over devices
        return jnp.tanh(g)

    @typechecked
    def rows(x: f32[b"batch/d embed"], w: f32[b"embed hidden"]) -> f32[b"batch/d hidden"]:
        return jnp.tanh(x @ w)  # contracts embed, whole on every device

    report = verify(weight_grad, mesh(kind), dims_but("layers"))
    assert report.ok, report
    result = 32 * 128 * 4  # the [embed, hidden] sum on every device: 16 KiB
    estimate = report.activations
    assert estimate.bytes_per_device == 2 * result  # the device's own part, and the sum of all
    assert {v.what for v in estimate.largest} == {"dot_general float32[32,128]", "dot_general partial sum float32[32,128]"}
    unsplit = verify(rows, mesh(kind), dims_but("layers")).activations
    assert unsplit.bytes_per_device == 8 * 128 * 4  # x @ w alone, no partial sum
    assert not any("partial sum" in v.what for v in unsplit.largest)


@typechecked
def layers_by_matmul(x: f32[b"batch/d embed"], ws: f32[b"layers embed embed"]) -> f32[b"batch/d embed"]:
    out, _ = jax.lax.scan(lambda h, w: (h @ w, None), x, ws)  # w: one layer of ws
    return out


@typechecked
def layers_by_product(x: f32[b"batch/d embed"], ws: f32[b"layers batch/d embed"]) -> f32[b"batch/d embed"]:
    out, _ = jax.lax.scan(lambda h, w: (h * w, None), x, ws)
    return out


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_a_scan_copies_out_the_layer_a_matmul_reads(kind):
    report = verify(layers_by_matmul, mesh(kind), dims_but("hidden"))
    assert report.ok, report
    layer = 32 * 32 * 4  # one layer of ws, copied out of the stack each trip: 4 KiB
    estimate = report.activations
    assert estimate.bytes_per_device == layer  # (h @ w is the loop's carry: the loop's buffer)
    assert "scan slice float32[32,32]" in {v.what for v in estimate.largest}
    # read elementwise (h * w), the slice is fused into what reads it: nothing copied
    assert verify(layers_by_product, mesh(kind), dims_but("hidden")).activation_bytes_per_device == 0


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_a_loop_updates_its_carry_in_place(kind):
    @typechecked
    def running(x: f32[b"batch/d embed"], xs: f32[b"layers batch/d embed"]) -> f32[b"batch/d"]:
        acc, _ = jax.lax.scan(lambda a, xi: (jnp.tanh(a + xi), None), jnp.sin(x), xs)
        return jnp.sum(acc @ jnp.ones((DIMS["embed"], DIMS["embed"])), axis=1)

    report = verify(running, mesh(kind), dims_but("hidden"))
    assert report.ok, report
    carry = 8 * 32 * 4
    ones = 32 * 32 * 4
    # sin(x) is the loop's buffer; the loop's result is that buffer again, not a second one
    # (before: both, 2 KiB at the scan); then acc, the ones and acc @ ones live together
    assert report.activation_bytes_per_device == carry + ones + carry


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_zeros_a_loop_accumulates_into_are_made_in_the_output(kind):
    @typechecked
    def total(xs: f32[b"layers batch/d embed"]) -> f32[b"batch/d embed"]:
        acc, _ = jax.lax.scan(lambda a, xi: (a + xi, None), jnp.zeros_like(xs[0]), xs)
        return acc

    report = verify(total, mesh(kind), dims_but("hidden"))
    assert report.ok, report
    assert report.activation_bytes_per_device == 0  # (before: the zeros, 1 KiB per device)


def test_on_auto_axes_a_layer_sliced_from_stacked_weights_keeps_their_split():
    """scan[i]+grad takes each layer's blocks by index inside the body: the stacked copies of the
    weights it keeps for the backward pass are split as the weights are (hidden over t), as the
    types say on Explicit axes."""
    estimates = {kind: verify(BENCHMARK.scan_grad_step(KINDS[kind], indexed=True),
                              AbstractMesh((4, 2), ("d", "t"), axis_types=(KINDS[kind],) * 2),
                              BENCHMARK.GRAD_SCAN_DIMS).activations for kind in KINDS}
    assert "scan float32[6,256,256]" in {v.what for v in estimates["auto"].largest}
    assert [v.bytes_per_device for v in estimates["auto"].largest] == \
        [v.bytes_per_device for v in estimates["explicit"].largest]
    assert abs(estimates["auto"].bytes_per_device - estimates["explicit"].bytes_per_device) <= 16  # (a scalar)


def test_what_donation_would_change_is_said():
    """Undonated, XLA may put values alike the outputs in their buffers; the estimate assumes it
    does not (as when the state is donated) and says so where such values are live at the peak."""
    estimate = STEPS["mlp+grad"](AxisType.Explicit)[2].activations
    assert "the outputs were assumed to have buffers of their own (the state donated: jax.jit(step, " \
           "donate_argnums=...)); undonated, XLA may put 4.0 MiB of these, alike outputs, in the outputs' " \
           "buffers" in estimate.assumed
    assert estimate.assumed in str(estimate)
