"""verify's activation estimate against XLA's own figure for the compiled step, in one run.

    python benchmarks/activations.py

For each step below, on the simulated 8-device CPU mesh, it prints verify's estimate of the peak
intermediate memory per device (``VerifyReport.activation_bytes_per_device``, from the traced step,
no compilation), XLA's ``temp_size_in_bytes`` of ``jax.jit(step).lower(...).compile()`` (the
bytes per device it allocates besides arguments and outputs), and their ratio:

  kernel      examples/transformer.py's training kernel (a typed_shard_map: local shapes, exact
              layouts), under its train rules, Explicit axes; target within 2x
  mlp+optax   a jitted @typechecked MLP step with optax's Adam (batch over d, weights over t), Auto
              axes (XLA chooses the intermediates' layouts), its state donated; target within 3x
  scan+remat  a lax.scan over 8 stacked layers, each under jax.checkpoint, with its gradient, Auto
              axes, the layers donated; target within 3x
  mlp+grad    a jitted @typechecked MLP step that returns its loss and jax.grad's gradients, not
              donated (issue 36 item 6); target within 3x
  scan+grad   a lax.scan over 6 jax.checkpoint-ed blocks (the blocks scanned), its loss and
              gradients, not donated (issue 36 item 6); target within 3x
  scan[i]+grad  the same scan over the layers' indices, each block taken from the stacked blocks
              inside the body (jax.grad then accumulates the stacked gradients as the backward
              loop's carries, and keeps each layer's weights for it); target within 3x

Beside them, for a peer's figure, it prints the peak of ``jax.experimental.roofline``
(``roofline(shard_map of the step)(*args)[1].peak_hbm_bytes``, where the installed JAX has it):
its peak counts the arguments and outputs too, and every value unfused, so it is printed beside
XLA's arguments + outputs + temp, not beside the temp alone.

Where the estimate is high or low and why: docs/verify.md, "Activation memory".
"""

from __future__ import annotations

import logging
import os
import sys
import time

import jax

jax.config.update("jax_num_cpu_devices", 8)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402
from jax.sharding import AxisType, PartitionSpec as P  # noqa: E402

import shardtypes  # noqa: E402
from shardtypes import Array, axis_rules, f32, make_shape_dtype_structs, pytree_dataclass, typechecked, verify  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from _common import load_demo  # noqa: E402

# The state each step updates is donated, as training loops do: its outputs then take the
# arguments' buffers, and XLA's temp_size counts the intermediates (undonated, XLA may place
# them in the buffers of outputs not written yet, and reports less).
DONATE = (0, 1)


def compiled(fn, *args, donate=()):
    return jax.jit(fn, donate_argnums=donate).lower(*args).compile()


def xla_total(program) -> int:
    """What the compiled step holds per device: arguments, outputs (less those that are
    arguments' buffers) and temp."""
    stats = program.memory_analysis()
    return (stats.argument_size_in_bytes + stats.output_size_in_bytes - stats.alias_size_in_bytes
            + stats.temp_size_in_bytes)


def roofline_peak(fn, args, mesh, out_specs=None) -> int | None:
    """``jax.experimental.roofline``'s ``peak_hbm_bytes`` of ``fn(*args)`` per device: a step on
    global arrays runs under ``jax.shard_map`` (the args' own specs in, ``out_specs`` out), whose
    body roofline reads; a kernel (``out_specs`` None) as it is. None where the installed JAX has
    no roofline, or its roofline cannot read the step (said)."""
    try:
        from jax.experimental import roofline
    except ImportError:
        return None
    if out_specs is not None:
        in_specs = jax.tree.map(lambda a: a.sharding.spec, args)
        fn = jax.shard_map(getattr(fn, "__wrapped__", fn), mesh=mesh, in_specs=in_specs, out_specs=out_specs,
                           check_vma=False)
    # (it logs each primitive it has no rule for: through absl on some releases, its own logger on others)
    quiet = [logging.getLogger(name) for name in ("absl", roofline.roofline.__module__)]
    levels = [q.level for q in quiet]
    for q in quiet:
        q.setLevel(logging.ERROR)
    try:
        with jax.set_mesh(mesh):
            _, result = roofline.roofline(fn, mesh=mesh)(*args)
    except Exception as e:  # (an experimental API: say what went wrong, do not stop the benchmark)
        name = getattr(fn, "__name__", "the step")
        print(f"      (roofline could not read {name}: {type(e).__name__}: {str(e)[:120]})")
        return None
    finally:
        for q, level in zip(quiet, levels):
            q.setLevel(level)
    return getattr(result, "peak_hbm_bytes", None)


def real(structs):
    """Arrays of ones laid out as ``structs`` say."""
    return jax.tree.map(lambda s: jax.device_put(jnp.ones(s.shape, s.dtype), s.sharding), structs)


# ---------------------------------------------------------------------------------------------
# The estimate's own three steps.


class Measured(tuple):
    """(estimate, XLA's temp, verify's report) and, for the peers' figures, what roofline reads."""

    def __new__(cls, estimate: int, temp: int, report, peer: tuple = ()):
        self = super().__new__(cls, (estimate, temp, report))
        self.peer = peer
        return self


def kernel_case() -> Measured:
    demo = load_demo("transformer_demo_activations")
    mesh = jax.make_mesh((4, 2), ("d", "t"), axis_types=(AxisType.Explicit,) * 2)
    with axis_rules(demo.RULES):
        report = verify(demo.training_kernel, mesh.abstract_mesh, demo.DIMS)
        assert report.ok, report
        with jax.set_mesh(mesh):
            state = demo.init_state(jax.random.key(0), mesh)
            rng = np.random.default_rng(0)
            batch = demo.make_batch(rng, rng.permutation(demo.DIMS["vocab"])[:demo.PATTERN_LENGTH], mesh)
            with shardtypes.Scope(**demo.DIMS):
                program = compiled(demo.training_kernel, state, batch, donate=DONATE[:1])
                peak = roofline_peak(demo.training_kernel, (state, batch), mesh)
    temp = program.memory_analysis().temp_size_in_bytes
    return Measured(report.activation_bytes_per_device, temp, report, (xla_total(program), peak))


@pytree_dataclass
class Mlp:
    w_in: f32[b"embed hidden/t"]
    w_out: f32[b"hidden/t embed"]


MLP_DIMS = {"batch": 256, "embed": 512, "hidden": 2048}
OPTIMIZER = optax.adam(1e-3)


@typechecked
def mlp_step(params: Mlp, opt_state: optax.OptState, x: f32[b"batch/d embed"]) -> tuple[Mlp, optax.OptState, f32[b""]]:
    def loss(p: Mlp) -> f32[b""]:
        h: f32[b"batch/d hidden/t"] = jax.nn.gelu(x @ p.w_in)
        return jnp.mean((h @ p.w_out - x) ** 2)

    value, grads = jax.value_and_grad(loss)(params)
    updates, opt_state = OPTIMIZER.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, value


def mlp_case() -> Measured:
    mesh = jax.make_mesh((4, 2), ("d", "t"), axis_types=(AxisType.Auto,) * 2)
    params = make_shape_dtype_structs(Mlp, MLP_DIMS, mesh)
    opt_state = jax.eval_shape(OPTIMIZER.init, params)
    report = verify(mlp_step, mesh.abstract_mesh, MLP_DIMS, inputs={"opt_state": opt_state})
    assert report.ok, report
    x = make_shape_dtype_structs(f32[b"batch/d embed"], MLP_DIMS, mesh)
    with jax.set_mesh(mesh):
        p = real(params)
        args = (p, OPTIMIZER.init(p), real(x))
        program = compiled(mlp_step, *args, donate=DONATE)
    peak = roofline_peak(mlp_step, args, mesh, _out_specs(program))
    return Measured(report.activation_bytes_per_device, program.memory_analysis().temp_size_in_bytes, report,
                    (xla_total(program), peak))


def _out_specs(program):
    return jax.tree.map(lambda s: s.spec, program.output_shardings)


@pytree_dataclass
class Block:
    w_in: f32[b"embed hidden/t"]
    w_out: f32[b"hidden/t embed"]


SCAN_DIMS = {"layers": 8, "batch": 128, "embed": 512, "hidden": 1024}


@typechecked
def scan_step(blocks: Array["layers", Block], x: f32[b"batch/d embed"]) -> Array["layers", Block]:
    @jax.checkpoint
    def layer(h, block):
        return h + jnp.tanh(h @ block.w_in) @ block.w_out, None

    def loss(blocks):
        out, _ = jax.lax.scan(layer, x, blocks)
        return jnp.mean(out ** 2)

    grads = jax.grad(loss)(blocks)
    return jax.tree.map(lambda w, g: w - 0.01 * g, blocks, grads)


def scan_case() -> Measured:
    return measure(scan_step, (Array["layers", Block], f32[b"batch/d embed"]), SCAN_DIMS, AxisType.Auto,
                   donate=DONATE[:1])


def measure(step, annotations: tuple, dims: dict, kind: AxisType, donate: tuple = ()) -> Measured:
    """verify's estimate and XLA's temp of ``step`` on a (d=4, t=2) mesh of ``kind`` axes, its
    arguments made from ``annotations`` (and the figures roofline is measured on)."""
    mesh = jax.make_mesh((4, 2), ("d", "t"), axis_types=(kind,) * 2)
    report = verify(step, mesh.abstract_mesh, dims)
    assert report.ok, report
    structs = [make_shape_dtype_structs(a, dims, mesh) for a in annotations]
    with jax.set_mesh(mesh):
        args = tuple(real(s) for s in structs)
        program = compiled(step, *args, donate=donate)
    peer = (xla_total(program), (step, args, mesh, _out_specs(program)) if kind == AxisType.Auto else None)
    return Measured(report.activation_bytes_per_device, program.memory_analysis().temp_size_in_bytes, report, peer)


# ---------------------------------------------------------------------------------------------
# Steps from outside the estimate's own benchmark (issue 36 item 6): a step that returns its
# gradients, not donated. Built per axis type: on Explicit axes a matmul that contracts a split
# dim says where its result goes (out_sharding), as sharding in types asks.

GRAD_SCAN_DIMS = {"layers": 6, "batch": 32, "embed": 256, "hidden": 512}


def _rows(kind: AxisType):
    """A matmul whose result is split over d by rows, as the batch it is computed from."""
    spec = P("d", None) if kind == AxisType.Explicit else None
    return lambda a, b: jnp.matmul(a, b, out_sharding=spec)


def mlp_grad_step(kind: AxisType):
    matmul = _rows(kind)

    @typechecked
    def mlp_grad(params: Mlp, x: f32[b"batch/d embed"]) -> tuple[f32[b""], Mlp]:
        def loss(p: Mlp) -> f32[b""]:
            h = jax.nn.gelu(x @ p.w_in)
            return jnp.mean((matmul(h, p.w_out) - x) ** 2)

        return jax.value_and_grad(loss)(params)

    return mlp_grad


def scan_grad_step(kind: AxisType, indexed: bool = False):
    """The scan over checkpointed blocks; ``indexed``: over the layers' indices, each block taken
    from the stacked blocks in the body (closed over: the backward loop carries their gradients)."""
    matmul = _rows(kind)

    @jax.checkpoint
    def block(h, b: Block):
        return h + matmul(jnp.tanh(h @ b.w_in), b.w_out)

    @typechecked
    def scan_grad(blocks: Array["layers", Block], x: f32[b"batch/d embed"]) -> tuple[f32[b""], Array["layers", Block]]:
        def loss(blocks):
            if indexed:
                out, _ = jax.lax.scan(lambda h, i: (block(h, jax.tree.map(lambda w: w[i], blocks)), None), x,
                                      jnp.arange(GRAD_SCAN_DIMS["layers"]))
            else:
                out, _ = jax.lax.scan(lambda h, b: (block(h, b), None), x, blocks)
            return jnp.mean(out ** 2)

        return jax.value_and_grad(loss)(blocks)

    return scan_grad


def mlp_grad_case(kind: AxisType = AxisType.Auto) -> Measured:
    return measure(mlp_grad_step(kind), (Mlp, f32[b"batch/d embed"]), MLP_DIMS, kind)


def scan_grad_case(kind: AxisType = AxisType.Auto, indexed: bool = False) -> Measured:
    return measure(scan_grad_step(kind, indexed), (Array["layers", Block], f32[b"batch/d embed"]), GRAD_SCAN_DIMS,
                   kind)


CASES = {"kernel": (kernel_case, 2.0), "mlp+optax": (mlp_case, 3.0), "scan+remat": (scan_case, 3.0),
         "mlp+grad": (mlp_grad_case, 3.0), "scan+grad": (scan_grad_case, 3.0),
         "scan[i]+grad": (lambda: scan_grad_case(indexed=True), 3.0)}


def main() -> None:
    print(f"verify's activation estimate against XLA's temp_size_in_bytes, per device, 8 CPU devices "
          f"(JAX {jax.__version__})\n")
    print(f"  {'step':13s} {'estimate':>11s} {'XLA temp':>11s} {'ratio':>6s}  {'target':17s} "
          f"{'XLA all':>11s} {'roofline':>11s}")
    for name, (case, target) in CASES.items():
        start = time.perf_counter()
        measured = case()
        estimate, temp, report = measured
        seconds = time.perf_counter() - start
        total, peer = measured.peer
        peak = roofline_peak(*peer) if isinstance(peer, tuple) else peer
        ratio = estimate / temp
        inside = 1 / target <= ratio <= target
        verdict = "yes" if inside else "NO"
        print(f"  {name:13s} {estimate:11,d} {temp:11,d} {ratio:6.2f}  within {target:g}x: {verdict:3s}  "
              f"{total:11,d} {'-' if peak is None else format(peak, ',d'):>11s}  ({seconds:.1f} s)")
        print(f"      {report.activations}")
    print("\n  XLA all: arguments + outputs + temp per device; roofline: jax.experimental.roofline's peak_hbm_bytes "
          "(arguments and outputs included, nothing fused; '-' where the installed JAX has none)")


if __name__ == "__main__":
    main()
