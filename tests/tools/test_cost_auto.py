"""The step cost on Auto mesh axes against XLA's compiled program (tests/tools/xla_costs.py, an
all-reduce whose every use takes a 1/n slice counted as the reduce-scatter a GPU or TPU backend
makes of it): the steps of tests/tools/auto_steps.py (plain jnp code, jax.grad, logical names
laid out by four rule sets: FSDP, TP, FSDP x TP, data parallel) on every (d, t) mesh of the 8
CPU devices, bytes sent per device within 1.5x and matmul FLOPs within 1.25x of XLA's; each
Auto-axes assumption the walk made named in the cost."""

from __future__ import annotations

import jax
import pytest
from auto_steps import RULES, STEPS, args_for
from jax.sharding import AxisType
from xla_costs import xla_cost

from shardtypes import axis_rules, verify
from shardtypes.tools.cost_model import AUTO_CONTRACTION, AUTO_PARTIAL, AUTO_REGATHER

SHAPES = [(1, 8), (2, 4), (4, 2), (8, 1)]


def ratio(a: int, b: int) -> float:
    return max(a, b) / max(min(a, b), 1)


def auto_mesh(shape):
    return jax.make_mesh(shape, ("d", "t"), axis_types=(AxisType.Auto,) * 2)


_XLA: dict = {}


def xla_of(step: str, label: str, shape: tuple):
    """XLA's cost of ``step`` under ``RULES[label]`` on ``shape``, compiled once per layout of
    its arguments (rule sets that lay them out alike compile the same program)."""
    fn, dims = STEPS[step]
    mesh = auto_mesh(shape)
    with axis_rules(RULES[label]), jax.set_mesh(mesh):
        args = args_for(fn, mesh, dims)
        key = (step, shape, tuple(str(leaf.sharding.spec) for leaf in jax.tree.leaves(args)))
        if key not in _XLA:
            _XLA[key] = xla_cost(jax.jit(fn), *args)
    return _XLA[key]


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("label", list(RULES))
@pytest.mark.parametrize("step", list(STEPS))
def test_auto_cost_against_xla(step, label, shape):
    fn, dims = STEPS[step]
    mesh = auto_mesh(shape)
    with axis_rules(RULES[label]):
        report = verify(fn, mesh.abstract_mesh, dims)
    assert report.ok, report
    cost = report.cost
    xla = xla_of(step, label, shape)
    comm = cost.communication
    assert ratio(comm.bytes_per_device, xla.bytes) <= 1.5, (comm, xla)
    assert ratio(cost.matmul_flops_per_device, xla.matmul_flops) <= 1.25, (cost, xla)
    assert not cost.lower_bound
    # every collective is an Auto one, and what was assumed is named (the layout first)
    assert {c.source for c in comm.collectives} <= {"auto"}
    if comm.collectives:
        assumptions = comm.assumptions
        named = ", ".join(f"{a}={n}" for a, n in zip(("d", "t"), shape) if n > 1)
        assert assumptions[0].startswith(f"on Auto axes ({named}) XLA chooses layouts")
        assert AUTO_PARTIAL in assumptions  # every step here reduces gradients
        kinds = {c.kind for c in comm.collectives}
        if label == "fsdp" or (label == "fsdp x tp" and shape[0] > 1):  # weights split as the batch is
            assert "all-gather" in kinds and AUTO_CONTRACTION in assumptions and AUTO_REGATHER in assumptions
            assert "reduce-scatter" in kinds  # the weights' gradients, reduced into their FSDP layout
        if label == "dp":
            assert kinds == {"all-reduce"}  # replicated weights: their gradients all-reduced


def test_reduce_scatter_counting_is_optional():
    """XLA on CPU runs an all-reduce and a slice where a GPU runs a reduce-scatter: the oracle
    counts either (the FSDP step's weight gradients: twice the bytes as all-reduces)."""
    fn, dims = STEPS["mlp"]
    mesh = auto_mesh((8, 1))
    with axis_rules(RULES["fsdp"]), jax.set_mesh(mesh):
        args = args_for(fn, mesh, dims)
        as_run = xla_cost(jax.jit(fn), *args, reduce_scatter=False)
    scattered = xla_of("mlp", "fsdp", (8, 1))
    assert {k for k, *_ in as_run.collectives} == {"all-gather", "all-reduce"}
    assert {k for k, *_ in scattered.collectives} == {"all-gather", "reduce-scatter"}
    gathers = sum(b * t for k, _, b, t in as_run.collectives if k == "all-gather")
    assert as_run.bytes - gathers == 2 * (scattered.bytes - gathers)
