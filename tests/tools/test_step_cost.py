"""The step cost (communication, FLOPs, memory bytes per device) of a traced step, against XLA's
compiled program on the 8-device CPU mesh (tests/tools/xla_costs.py, the same cost convention):
the demo's training kernel, an MLP step with a reshard on Explicit axes and with a sharding
constraint on Auto axes, a lax.scan over stacked layers under jax.grad (both axis types);
collectives inside kernels of each kind against the ring convention and XLA; lower bounds
(symbolic sizes, host callbacks, while loops) named, never silent zeros; bad input."""

from __future__ import annotations

import functools
import json
import os
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P, reshard
from xla_costs import xla_cost

import shardtypes
from shardtypes import axis_rules, f32, make_shape_dtype_structs, pytree_dataclass, typechecked, verify
from shardtypes.tools.activations import trace_step
from shardtypes.tools.cost_model import step_cost
from shardtypes.tools.step_cost import Collective, Communication, StepCost

from conftest import make_mesh

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def ratio(a: int, b: int) -> float:
    return max(a, b) / max(min(a, b), 1)


def cost_of(fn, args: dict, mesh) -> StepCost:
    """The cost of ``fn`` on ``args`` (structs laid out on ``mesh``), traced as verify traces it."""
    with jax.set_mesh(mesh):
        _, closed, leaves = trace_step(fn, args)
    return step_cost(closed, leaves, mesh)


def against_xla(fn, args: dict, mesh, comm: float, flops: float = 1.25) -> tuple[StepCost, object]:
    cost = cost_of(fn, args, mesh)
    with jax.set_mesh(mesh):
        # (XLA's all-reduces as it runs them: these steps' collectives are the types' own)
        xla = xla_cost(jax.jit(fn), *args.values(), reduce_scatter=False)
    assert xla.bytes > 0 and xla.matmul_flops > 0
    assert ratio(cost.communication.bytes_per_device, xla.bytes) <= comm, (cost.communication, xla)
    assert ratio(cost.matmul_flops_per_device, xla.matmul_flops) <= flops, (cost, xla)
    assert cost.flops_per_device >= cost.matmul_flops_per_device
    assert sum(cost.flops_by_dtype.values()) == cost.flops_per_device
    assert cost.memory_bytes_per_device > 0
    return cost, xla


# -- (b), (c): an MLP step, a reshard on Explicit axes and a sharding constraint on Auto axes -----


@pytree_dataclass
class Mlp:
    w_in: f32[b"embed/d hidden/t"]  # FSDP over d, TP over t: gathered over d before use
    w_out: f32[b"hidden/t embed"]


MLP_DIMS = {"batch": 64, "embed": 128, "hidden": 256}


@typechecked
def mlp_step(params: Mlp, x: f32[b"batch/d embed"]) -> Mlp:
    explicit = jax.typeof(x).sharding.spec[0] == "d"

    def loss(p: Mlp) -> f32[b""]:
        w_in = reshard(p.w_in, P(None, "t")) if explicit else jax.lax.with_sharding_constraint(p.w_in, P(None, "t"))
        h = jax.nn.relu(x @ w_in)
        y = jnp.einsum("bh,he->be", h, p.w_out, **({"out_sharding": P("d", None)} if explicit else {}))
        return jnp.mean((y - x) ** 2)

    grads = jax.grad(loss)(params)
    return jax.tree.map(lambda w, g: w - 0.01 * g, params, grads)


def mlp_args(mesh) -> dict:
    return {"params": make_shape_dtype_structs(Mlp, MLP_DIMS, mesh),
            "x": make_shape_dtype_structs(f32[b"batch/d embed"], MLP_DIMS, mesh)}


def test_mlp_explicit_against_xla():
    mesh = make_mesh("explicit")
    cost, xla = against_xla(mlp_step, mlp_args(mesh), mesh, comm=1.25)
    kinds = {(c.kind, c.axes, c.source) for c in cost.communication.collectives}
    # the reshard gathers w_in over d; the second matmul's partial sum over t; the weight
    # gradients' partial sums over the batch's d
    assert kinds == {("all-gather", ("d",), "explicit"), ("all-reduce", ("t",), "explicit"),
                     ("all-reduce", ("d",), "explicit")}
    gather = next(c for c in cost.communication.collectives if c.kind == "all-gather")
    assert gather.bytes == 128 * 128 * 4 * 3 // 4  # (n-1)/n of the gathered [embed, hidden/t] block
    assert gather.where.startswith("test_step_cost.py:") and "loss" in gather.where
    assert set(cost.communication.by_axes) == {("d",), ("t",)}
    assert not cost.communication.assumptions and not cost.lower_bound


def test_mlp_auto_against_xla():
    mesh = make_mesh("auto")
    cost, _ = against_xla(mlp_step, mlp_args(mesh), mesh, comm=2.0)
    assert {c.source for c in cost.communication.collectives} == {"auto"}
    assert "Auto axes (d=4, t=2)" in cost.communication.assumptions[0]


def test_unreduced_results_pay_where_resharded():
    """A matmul typed unreduced over t sends nothing; resharding it pays the sum: an all-reduce
    to a layout without t, a reduce-scatter to one split over t. (XLA on CPU runs an all-reduce
    and a slice for the second, twice the bytes: a backend's choice a per-device model follows
    the types past; docs/verify.md says so.)"""
    mesh = make_mesh("explicit")

    def step(x, w):
        y = jnp.einsum("bh,he->be", x, w, out_sharding=P("d", None, unreduced={"t"}))
        whole = reshard(y, P("d", None))
        split = reshard(y, P("d", "t"))
        return whole, split

    sharding = functools.partial(jax.sharding.NamedSharding, mesh)
    args = {"x": jax.ShapeDtypeStruct((64, 128), jnp.float32, sharding=sharding(P("d", "t"))),
            "w": jax.ShapeDtypeStruct((128, 32), jnp.float32, sharding=sharding(P("t", None)))}
    try:
        cost = cost_of(step, args, mesh)
    except (TypeError, ValueError) as e:
        pytest.skip(f"this JAX has no unreduced types: {e}")
    block = 16 * 32 * 4  # the product's local block, [64/d, 32]
    found = sorted((c.kind, c.axes, c.bytes, c.where.split(" ")[0]) for c in cost.communication.collectives)
    lines = sorted({c.where.split(" ")[0] for c in cost.communication.collectives})
    assert [f[:3] for f in found] == [("all-reduce", ("t",), 2 * block // 2), ("reduce-scatter", ("t",), block // 2)]
    assert len(lines) == 2  # at the two reshards, nothing at the einsum
    assert not cost.lower_bound


# -- (d): a lax.scan over stacked layers under jax.grad -------------------------------------------


@pytree_dataclass
class Blocks:
    w_in: f32[b"layers embed hidden/t"]
    w_out: f32[b"layers hidden/t embed"]


SCAN_DIMS = {"layers": 6, "batch": 32, "embed": 256, "hidden": 512}


@typechecked
def scan_step(blocks: Blocks, x: f32[b"batch/d embed"]) -> Blocks:
    explicit = jax.typeof(x).sharding.spec[0] == "d"

    def layer(h, block):
        out = jnp.einsum("bh,he->be", jnp.tanh(h @ block.w_in), block.w_out,
                         **({"out_sharding": P("d", None)} if explicit else {}))
        return h + out, None

    def loss(blocks):
        out, _ = jax.lax.scan(layer, x, blocks)
        return jnp.mean(out ** 2)

    grads = jax.grad(loss)(blocks)
    return jax.tree.map(lambda w, g: w - 0.01 * g, blocks, grads)


@pytest.mark.parametrize("kind", ["explicit", "auto"])
def test_scan_under_grad_against_xla(kind):
    mesh = make_mesh(kind)
    args = {"blocks": make_shape_dtype_structs(Blocks, SCAN_DIMS, mesh),
            "x": make_shape_dtype_structs(f32[b"batch/d embed"], SCAN_DIMS, mesh)}
    cost, xla = against_xla(scan_step, args, mesh, comm=1.25 if kind == "explicit" else 2.0)
    # every collective is in the layer's body, forward and backward: 2 x 6 runs
    assert {c.times for c in cost.communication.collectives} == {2 * SCAN_DIMS["layers"]}
    # XLA's cost_analysis counts a while body once: its flops fall short of the matmuls run
    with jax.set_mesh(mesh):
        analysed = jax.jit(scan_step).lower(*args.values()).compile().cost_analysis()
    analysed = analysed[0] if isinstance(analysed, list) else analysed
    assert analysed["flops"] < xla.matmul_flops


# -- (a): the demo's training kernel (a typed_shard_map) ------------------------------------------


def load_demo():
    import importlib.util

    spec = importlib.util.spec_from_file_location("transformer_demo_step_cost",
                                                  os.path.join(ROOT, "examples", "transformer.py"))
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_demo_kernel_against_xla():
    demo = load_demo()
    mesh = make_mesh("explicit")
    with axis_rules(demo.RULES):
        report = verify(demo.training_kernel, mesh.abstract_mesh, demo.DIMS)  # (the cost: verify's own)
        assert report.ok, report
        cost = report.cost
        with shardtypes.Scope(**demo.DIMS), jax.set_mesh(mesh):
            args = (make_shape_dtype_structs(demo.State, demo.DIMS, mesh),
                    make_shape_dtype_structs(demo.Batch, demo.DIMS, mesh))
            xla = xla_cost(jax.jit(demo.training_kernel), *args)
    assert ratio(cost.communication.bytes_per_device, xla.bytes) <= 1.25, (cost.communication, xla)
    assert ratio(cost.matmul_flops_per_device, xla.matmul_flops) <= 1.25, (cost, xla)
    sources = {c.source for c in cost.communication.collectives}
    assert sources == {"kernel"}
    kinds = {c.kind for c in cost.communication.collectives}
    assert {"all-gather", "reduce-scatter", "all-reduce"} <= kinds
    # the weights' gathers run once per layer of the scan, forward and backward (remat again)
    layers = demo.DIMS["layers"]
    assert any(c.kind == "all-gather" and c.times % layers == 0 and c.times > 1
               for c in cost.communication.collectives)


# -- collectives inside kernels: each kind, its ring cost, trip counts ----------------------------


def kernel_step(x):
    """A shard_map over (d=4, t=2) running each collective kind, three times in a scan."""

    @functools.partial(jax.shard_map, in_specs=P("d", "t"), out_specs=P("d", "t"))
    def body(block):  # block: f32[8, 16] of a [32, 32] array
        def once(h, _):
            total = jax.lax.psum(h, "t")                                        # all-reduce over t
            gathered = jax.lax.all_gather(total, "d", tiled=True)              # [32, 16]
            scattered = jax.lax.psum_scatter(gathered, "d", tiled=True)         # [8, 16]
            swapped = jax.lax.all_to_all(scattered, "d", 0, 1, tiled=True)      # [2, 64]
            back = jax.lax.all_to_all(swapped, "d", 1, 0, tiled=True)           # [8, 16]
            turned = jax.lax.ppermute(back, "d", [(i, (i + 1) % 4) for i in range(4)])
            return jnp.tanh(turned) @ jnp.ones((16, 16), h.dtype) + h, None

        out, _ = jax.lax.scan(once, block, None, length=3)
        return out

    return body(x)


def test_kernel_collectives_ring_costs_and_xla():
    mesh = make_mesh("explicit")
    x = jax.ShapeDtypeStruct((32, 32), jnp.float32, sharding=jax.sharding.NamedSharding(mesh, P("d", "t")))
    cost = cost_of(kernel_step, {"x": x}, mesh)
    block = 8 * 16 * 4
    found = {(c.kind, c.axes): c for c in cost.communication.collectives}
    assert found[("all-reduce", ("t",))].bytes == 2 * block * 1 // 2
    assert found[("all-gather", ("d",))].bytes == (4 * block) * 3 // 4
    assert found[("reduce-scatter", ("d",))].bytes == (4 * block) * 3 // 4
    assert found[("all-to-all", ("d",))].bytes == block * 3 // 4
    assert found[("permute", ("d",))].bytes == block
    assert {c.source for c in found.values()} == {"kernel"}
    assert all(c.times == 3 for c in cost.communication.collectives)  # once per trip of the scan
    assert len([c for c in cost.communication.collectives if c.kind == "all-to-all"]) == 2  # (one a line)
    assert cost.communication.by_axes[("t",)] == 3 * block
    assert cost.matmul_flops_per_device == 3 * 2 * 8 * 16 * 16
    with jax.set_mesh(mesh):
        xla = xla_cost(jax.jit(kernel_step), x)
    assert ratio(cost.communication.bytes_per_device, xla.bytes) <= 1.25, (cost.communication, xla)
    assert ratio(cost.matmul_flops_per_device, xla.matmul_flops) <= 1.25


# -- lower bounds: never a silent zero ------------------------------------------------------------


@pytest.mark.parametrize("counted", [True, False])
def test_while_loop_trip_count_or_a_named_lower_bound(counted):
    mesh = make_mesh("explicit")

    @functools.partial(jax.shard_map, in_specs=P("d", "t"), out_specs=P("d", "t"))
    def body(block):
        def turn(carry):
            i, h = carry
            return i + 1, jax.lax.psum(h, "t") * 0.5 + h

        if counted:  # a counter from 0 below 5: five trips
            return jax.lax.while_loop(lambda carry: carry[0] < 5, turn, (0, block))[1]
        return jax.lax.while_loop(lambda carry: carry[1].sum() < 100.0, turn, (0, block))[1]  # data decides

    def step(x):
        return body(x)

    x = jax.ShapeDtypeStruct((32, 8), jnp.float32, sharding=jax.sharding.NamedSharding(mesh, P("d", "t")))
    cost = cost_of(step, {"x": x}, mesh)
    (psum,) = cost.communication.collectives
    assert (psum.kind, psum.axes, psum.bytes) == ("all-reduce", ("t",), 2 * 8 * 4 * 4 * 1 // 2)
    if counted:
        assert psum.times == 5 and not cost.lower_bound
        with jax.set_mesh(mesh):
            xla = xla_cost(jax.jit(step), x)
        assert xla.bytes == cost.communication.bytes_per_device  # (XLA's trip count: the same)
    else:
        assert psum.times == 1
        assert any("while loop's body" in why and "counted once" in why for why in cost.lower_bound)
        assert cost.communication.lower_bound == cost.lower_bound
        assert str(cost).startswith("at least ")



def test_symbolic_sizes_make_a_lower_bound():
    report = verify(mlp_step, {"d": 4, "t": 2})  # no dims: every size symbolic
    assert report.ok, report
    cost = report.cost
    assert cost.matmul_flops_per_device == 0  # (only the loss's scalars have a size)
    assert any(why.startswith("values of symbolic size") and "dot_general" in why for why in cost.lower_bound)
    # the collectives are still listed, with the bytes that could not be known as 0, and said so
    collectives = cost.communication.collectives
    assert {"all-gather", "all-reduce"} <= {c.kind for c in collectives}
    assert report.communication_bytes_per_device == 0
    assert str(cost.communication).startswith("at least 0 B sent")
    assert str(cost).startswith("at least ")


def test_host_callback_makes_a_lower_bound():
    mesh = make_mesh("explicit")

    def step(x):
        y = jax.pure_callback(lambda a: np.asarray(a) * 2, jax.ShapeDtypeStruct(x.shape, x.dtype), x)
        return y @ y.T

    x = jax.ShapeDtypeStruct((8, 8), jnp.float32, sharding=jax.sharding.NamedSharding(mesh, P()))
    cost = cost_of(step, {"x": x}, mesh)
    assert any("host callback pure_callback" in why for why in cost.lower_bound)
    assert cost.matmul_flops_per_device == 2 * 8 * 8 * 8


# -- the objects ----------------------------------------------------------------------------------


def test_communication_sums_tables_and_dicts():
    collectives = (Collective("all-gather", ("d",), 300, 80, "model.py:12 (layer)", "explicit"),
                   Collective("all-reduce", ("t",), 1000, 1, "model.py:40 (loss)", "auto"),
                   Collective("permute", ("d", "t"), 10, 2, "", "kernel"))
    comm = Communication(collectives, (), ("on Auto axes ...",))
    assert comm.bytes_per_device == 300 * 80 + 1000 + 20
    assert comm.by_axes == {("d",): 24000, ("t",): 1000, ("d", "t"): 20}
    text = str(comm)
    assert "all-gather" in text and "x 80" in text and "model.py:12 (layer)" in text
    assert text.index("all-gather") < text.index("all-reduce")  # the largest first (as given)
    data = json.loads(json.dumps(comm.to_dict()))
    assert data["bytes_per_device"] == comm.bytes_per_device
    assert data["by_axes"] == {"d": 24000, "t": 1000, "d,t": 20}
    assert data["collectives"][0]["axes"] == ["d"] and data["collectives"][0]["times"] == 80
    cost = StepCost(comm, 5_000_000, {"bfloat16": 4_000_000, "float32": 1_000_000}, 123_456, (), 4_000_000)
    assert json.loads(json.dumps(cost.to_dict()))["flops_by_dtype"] == {"bfloat16": 4_000_000, "float32": 1_000_000}
    assert "5.0 MFLOP" in str(cost) and "4.0 MFLOP in matmuls" in str(cost)


def test_collective_refuses_unknown_kind_and_source():
    with pytest.raises(ValueError, match=r"Collective: kind must be one of \('all-gather', .*'permute'\), "
                                         r"got 'broadcast'"):
        Collective("broadcast", ("d",), 1)
    with pytest.raises(ValueError, match=r"Collective: source must be one of \('kernel', 'explicit', 'auto'\), "
                                         r"got 'guess'"):
        Collective("permute", ("d",), 1, source="guess")


# -- on VerifyReport --------------------------------------------------------------------------------


def test_verify_reports_the_cost():
    report = verify(mlp_step, {"d": 4, "t": 2}, MLP_DIMS)
    assert report.ok, report
    cost = report.cost
    assert isinstance(cost, StepCost)
    assert report.communication is cost.communication
    assert report.communication_bytes_per_device == cost.communication.bytes_per_device > 0
    assert report.flops_per_device == cost.flops_per_device > 0
    assert report.memory_bytes_per_device == cost.memory_bytes_per_device > 0
    text = str(report)
    assert "\n  cost: " in text and "sent" in text and "FLOP" in text and "the most by all-reduce over d" in text
    assert len(text.splitlines()) == 3  # the head, activations, cost: a line, not a wall
    data = json.loads(report.to_json())
    assert data["cost"]["communication"]["bytes_per_device"] == report.communication_bytes_per_device
    assert data["cost"]["flops_per_device"] == report.flops_per_device
    # the same as the trace verify's own walk takes, on a mesh of 4,096 devices
    large = verify(mlp_step, {"d": 64, "t": 64}, {"batch": 4096, "embed": 8192, "hidden": 8192})
    gathered = next(c for c in large.communication.collectives if c.kind == "all-gather")
    assert gathered.bytes == 8192 * (8192 // 64) * 4 * 63 // 64


def test_verify_cost_false_skips_it_and_bad_values_are_refused():
    report = verify(mlp_step, {"d": 4, "t": 2}, MLP_DIMS, cost=False)
    assert report.cost is None and report.communication is None
    assert report.communication_bytes_per_device is None and report.flops_per_device is None
    assert report.memory_bytes_per_device is None
    assert "cost:" not in str(report) and json.loads(report.to_json())["cost"] is None
    with pytest.raises(TypeError, match=r"verify: cost must be True or False, got 'yes'"):
        verify(mlp_step, {"d": 4, "t": 2}, MLP_DIMS, cost="yes")
