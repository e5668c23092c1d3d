"""Will the step fit? (issue 29): verify's estimate of a step's peak intermediate memory per
device (``VerifyReport.activation_bytes_per_device``), the ``hbm=`` fit check, the page's band,
and the estimate against XLA's own figure for the compiled step."""

import importlib.util
import json
import math
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import pytest
from jax.sharding import AbstractMesh, AxisType

from shardtypes import f32, plan, plan_html, pytree_dataclass, typechecked, typed_shard_map, verify
from shardtypes.__main__ import main
from shardtypes.tools.memory_checks import step_activations

ROOT = Path(__file__).resolve().parents[2]
DIMS = {"batch": 64, "embed": 32, "hidden": 128}


def mesh(kind: AxisType) -> AbstractMesh:
    return AbstractMesh((8,), ("d",), axis_types=(kind,))


@typechecked
def two_live(x: f32[b"batch/d embed"], w: f32[b"embed hidden"], v: f32[b"hidden embed"]) -> f32[b"batch/d embed"]:
    h = x @ w  # 8 x 128 floats per device: 4 KiB
    t = jnp.tanh(h)  # read by a matmul, so written out (not fused): h and t are live together here
    return t @ v


@pytest.mark.parametrize("kind", [AxisType.Explicit, AxisType.Auto], ids=["explicit", "auto"])
def test_a_step_worked_out_by_hand(kind):
    report = verify(two_live, mesh(kind), DIMS)
    assert report.ok, report
    per_value = (64 // 8) * 128 * 4
    assert report.activation_bytes_per_device == 2 * per_value
    estimate = report.activations
    assert not estimate.lower_bound
    assert [v.bytes_per_device for v in estimate.largest] == [per_value, per_value]
    assert {v.what for v in estimate.largest} == {"dot_general float32[8,128]", "tanh float32[8,128]"}
    assert all(v.where.startswith("test_activations.py:") and "(two_live)" in v.where for v in estimate.largest)
    if kind == AxisType.Auto:  # what was assumed is said
        assert estimate.assumed.startswith("on Auto axes (d=8) XLA chooses layouts: each value was assumed split")
    else:
        assert estimate.assumed == ""
    assert "activations: 8.0 KiB per device at the peak, largest live then: 4.0 KiB" in str(report)
    assert json.loads(report.to_json())["activations"]["bytes_per_device"] == 2 * per_value


def test_elementwise_chains_are_fused_away():
    @typechecked
    def chain(x: f32[b"batch/d embed"]) -> f32[b"batch/d embed"]:
        return jnp.tanh(x * 2 + 1) * 3

    report = verify(chain, mesh(AxisType.Explicit), {"batch": 64, "embed": 32})
    assert report.activation_bytes_per_device == 0
    assert str(report.activations) == "none: every value the step makes is one of its outputs (or fused away)"


def test_inside_a_kernel_the_local_blocks_count():
    @typed_shard_map
    def kernel(x: f32[b"batch/d embed"], w: f32[b"embed hidden"], v: f32[b"hidden embed"]) -> f32[b"batch/d embed"]:
        return jnp.tanh(x @ w) @ v

    report = verify(kernel, mesh(AxisType.Explicit), DIMS)
    assert report.ok, report
    assert report.activation_bytes_per_device == 2 * (64 // 8) * 128 * 4


def test_a_host_callback_and_symbolic_sizes_make_a_lower_bound():
    @typechecked
    def with_callback(x: f32[b"batch/d embed"], w: f32[b"embed hidden"]) -> f32[b"batch/d"]:
        h = jax.pure_callback(lambda a: a, jax.ShapeDtypeStruct(x.shape, x.dtype), x)
        return jnp.sum(jnp.tanh(h @ w), axis=1)

    @typechecked
    def with_print(x: f32[b"batch/d embed"], w: f32[b"embed hidden"]) -> f32[b"batch/d"]:
        jax.debug.print("w {}", w[0, 0])  # a debug print holds no device memory: no lower bound
        return jnp.sum(jnp.tanh(x @ w), axis=1)

    assert verify(with_print, {"d": 8}, DIMS).activations.lower_bound == ()
    report = verify(with_callback, {"d": 8}, DIMS)
    estimate = report.activations
    assert estimate.bytes_per_device > 0
    (why,) = estimate.lower_bound
    assert why.startswith("the host callback pure_callback at test_activations.py:")
    assert str(estimate).startswith("at least ")
    report = verify(two_live, {"d": 8}, {"embed": 32})
    symbolic = report.activations
    assert symbolic.bytes_per_device == 0
    assert "activations" not in str(report)  # no sizes given, no bytes to say (the field has why)
    assert str(symbolic).startswith("not known: values of symbolic size (dims verify was not given) are not "
                                    "counted (from dot_general, tanh)")


def test_the_estimate_says_what_it_cannot_follow():
    estimate = step_activations(object(), [], mesh(AxisType.Explicit))  # (no jaxpr: nothing to read)
    assert estimate.bytes_per_device == 0
    assert estimate.lower_bound[0].startswith("the estimate could not follow this step (a object where a jaxpr")
    assert str(estimate).startswith("not known: the estimate could not follow this step")


def test_a_bug_in_the_estimate_is_raised_not_turned_into_nothing_counted(monkeypatch):
    import shardtypes.tools.activations as activations

    def broken(*args, **kwargs):
        raise ZeroDivisionError("a bug")

    monkeypatch.setattr(activations, "local_shape", broken)
    closed = jax.make_jaxpr(lambda x: jnp.tanh(x @ x.T).sum())(jnp.ones((8, 4)))  # (the product is live)
    with pytest.raises(ZeroDivisionError, match="a bug"):
        step_activations(closed, [jnp.ones((8, 4))], mesh(AxisType.Explicit))


def test_a_step_that_does_not_fit_names_the_largest_parts():
    assert verify(two_live, {"d": 8}, DIMS, hbm="h100").ok
    report = verify(two_live, {"d": 8}, DIMS, hbm="10KiB")
    (problem,) = report.problems
    assert problem.kind == "memory"
    # x: f32[b'batch/d embed'] is the step's batch (a step array), not parameters
    assert problem.message.startswith("two_live() does not fit in 10.0 KiB: 41.0 KiB per device (parameters 32.0 KiB "
                                      "+ step arrays 1.0 KiB + activations 8.0 KiB), 31.0 KiB over; the largest parts: "
                                      "w (P(None, None)) 16.0 KiB; v (P(None, None)) 16.0 KiB; x (P('d', None)) 1.0 KiB; "
                                      "the activation 4.0 KiB")
    symbolic = verify(two_live, {"d": 8}, {"embed": 32}, hbm="h100")
    assert [p.kind for p in symbolic.problems] == ["setup"]
    assert "hbm: the memory of two_live()'s arguments ['x', 'w', 'v'] is not known" in symbolic.problems[0].message


@typechecked
def three_alike(x: f32[b"batch/d embed"], w: f32[b"layers embed embed"]) -> f32[b""]:
    def body(h, wl):
        h = h @ wl
        return h, (jnp.sin(h), jnp.cos(h), jnp.tanh(h))
    _, (a, b, c) = jax.lax.scan(body, x, w)  # three stacked outputs alike: one shape, one line
    return jnp.sum(a * b * c)


def test_alike_activations_are_said_once_with_their_count():
    dims = {"batch": 64, "embed": 32, "layers": 4}
    report = verify(three_alike, {"d": 8}, dims)
    line = next(l for l in str(report).splitlines() if "activations:" in l)
    alike = "4.0 KiB scan float32[4,8,32] at test_activations.py:"
    assert "largest live then: 3 x " + alike in line and line.count(alike) == 1, line
    assert [v.what for v in report.activations.largest].count("scan float32[4,8,32]") == 3  # the data keeps each
    (problem,) = verify(three_alike, {"d": 8}, dims, hbm="8KiB").problems
    # (13 KiB the scan keeps, 4 KiB a layer of w its body copies out for the matmul)
    assert "(parameters 16.0 KiB + step arrays 1.0 KiB + activations 17.0 KiB)" in problem.message
    assert "; 3 activations of " + alike in problem.message and problem.message.count(alike) == 1, problem.message


@pytest.mark.parametrize("hbm, error, message", [
    ("80 gigs", ValueError, "verify: hbm: '80 gigs' is neither a size with a unit"),
    (0, ValueError, "verify: hbm: a device's memory must be positive, got 0"),
    (1.5, TypeError, "verify: hbm: expected a size such as '80GiB'"),
])
def test_an_hbm_that_does_not_parse(hbm, error, message):
    with pytest.raises(error) as info:
        verify(two_live, {"d": 8}, DIMS, hbm=hbm)
    assert message in str(info.value)


def test_the_estimate_can_be_left_out_but_not_under_hbm():
    report = verify(two_live, {"d": 8}, DIMS, activations=False)
    assert report.activations is None and report.activation_bytes_per_device is None
    assert "activations" not in str(report)
    with pytest.raises(TypeError, match="verify: activations must be True or False, got 'yes'"):
        verify(two_live, {"d": 8}, DIMS, activations="yes")
    with pytest.raises(ValueError, match="verify: hbm needs the activation estimate; leave activations=True"):
        verify(two_live, {"d": 8}, DIMS, hbm="h100", activations=False)


def test_the_command_line_checks_the_fit(tmp_path, monkeypatch, capsys):
    (tmp_path / "fit_model.py").write_text(
        "import jax.numpy as jnp\nfrom shardtypes import f32, typechecked\n\n@typechecked\n"
        "def step(x: f32[b'batch/d embed'], w: f32[b'embed hidden']) -> f32[b'batch/d']:\n"
        "    return jnp.sum(jnp.tanh(x @ w), axis=1)\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    argv = ["verify", "fit_model:step", "--mesh", "d=8", "--dims", "batch=64,embed=32,hidden=128"]
    assert main(argv + ["--hbm", "h100"]) == 0
    assert "activations: 4.0 KiB per device at the peak" in capsys.readouterr().out
    assert main(argv + ["--hbm", "10KiB"]) == 1
    assert "[memory] step() does not fit in 10.0 KiB" in capsys.readouterr().out


@pytree_dataclass
class Weights:
    w: f32[b"embed hidden/d"]


def test_the_page_draws_activations_as_their_own_band():
    report = verify(two_live, {"d": 8}, DIMS)
    weights = plan(Weights, {"d": 8}, DIMS)
    page = plan_html(weights, "h100", activations=report.activations)
    assert ">activations</td>" in page and "estimated by verify: 8.0 KiB per device at the peak" in page
    both = plan_html({"train": weights, "decode": weights}, activations={"train": report.activations})
    assert both.count("estimated by verify") == 1
    assert "activations" in report.to_html()  # verify's own page draws its estimate too
    with pytest.raises(TypeError, match="with several modes, activations must be a mapping"):
        plan_html({"train": weights, "decode": weights}, activations=report.activations)
    with pytest.raises(ValueError, match=r"activations\['eval'\]: no such mode \(modes: \['train', 'decode'\]\)"):
        plan_html({"train": weights, "decode": weights}, activations={"eval": report.activations})
    with pytest.raises(TypeError, match=r"activations\[''\] must be verify's report.activations .* got int 5"):
        plan_html(weights, activations=5)


def _benchmark():
    spec = importlib.util.spec_from_file_location("activation_benchmark", ROOT / "benchmarks" / "activations.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("case", ["kernel", "mlp+optax", "scan+remat"])
def test_the_estimate_is_near_what_xla_allocates(case):
    """The demo's training kernel within 2x of XLA's temp_size, a jitted MLP step with optax and
    a scan over checkpointed layers (both on Auto axes) within 3x (benchmarks/activations.py)."""
    pytest.importorskip("optax")
    run, target = _benchmark().CASES[case]
    estimate, temp, _ = run()
    assert temp > 0
    assert 1 / target <= estimate / temp <= target, (estimate, temp)


# ---------------------------------------------------------------------------------------------
# An oracle: random straight-line programs of matmuls, transposes and sums, whose peak is worked
# out from the program itself (each value live from its op to its last reader; arguments and the
# output not counted) and compared with verify's estimate of the traced step.

from hypothesis import given, settings, strategies as st  # noqa: E402

from conftest import examples_from_env  # noqa: E402

SIZES = (2, 4, 8, 16)


@st.composite
def programs(draw):
    """(argument shapes, ops): each op is (kind, operand indices), over the values made so far."""
    shapes = [tuple(draw(st.sampled_from(SIZES)) for _ in range(2)) for _ in range(draw(st.integers(1, 3)))]
    n_args = len(shapes)
    ops = []
    for _ in range(draw(st.integers(1, 8))):
        i = draw(st.sampled_from([j for j, s in enumerate(shapes) if s]))  # (no sum of a 0-d value)
        kind = draw(st.sampled_from(["matmul", "transpose", "sum"] if len(shapes[i]) == 2 else ["sum"]))
        if kind == "matmul":
            partners = [j for j, s in enumerate(shapes) if len(s) == 2 and s[0] == shapes[i][1]]
            if not partners:
                kind = "transpose"
            else:
                j = draw(st.sampled_from(partners))
                ops.append(("matmul", (i, j)))
                shapes.append((shapes[i][0], shapes[j][1]))
                continue
        if kind == "transpose":
            ops.append(("transpose", (i,)))
            shapes.append(shapes[i][::-1])
        else:
            ops.append(("sum", (i,)))
            shapes.append(shapes[i][1:])
    return shapes, n_args, ops


def run_program(ops, values):
    values = list(values)
    for kind, operands in ops:
        a = values[operands[0]]
        if kind == "matmul":
            values.append(a @ values[operands[1]])
        elif kind == "transpose":
            values.append(a.T)
        else:
            values.append(jnp.sum(a, axis=0))
    return values[-1]


def oracle_peak(shapes, n_args, ops) -> int:
    out = len(shapes) - 1
    needed = {out}  # an op whose value nothing needs is removed (as XLA does)
    for k in range(len(ops) - 1, -1, -1):
        if n_args + k in needed:
            needed.update(ops[k][1])
    last: dict = {}
    for k, (_, operands) in enumerate(ops):
        if n_args + k in needed:
            for i in operands:
                last[i] = n_args + k
    size = {i: 4 * math.prod(s) for i, s in enumerate(shapes)}
    peak = 0
    for k in range(len(ops)):
        made = n_args + k
        if made not in needed:
            continue
        live = sum(size[i] for i in range(n_args, made) if i != out and last.get(i, -1) >= made)
        peak = max(peak, live + (size[made] if made != out else 0))
    return peak


@pytest.mark.filterwarnings("ignore:shardtypes.typechecked cannot instrument")  # (made with exec)
@given(programs())
@settings(max_examples=examples_from_env("SHARDTYPES_ACTIVATION_ORACLE_EXAMPLES", 40), deadline=None)
def test_the_peak_of_random_programs_agrees_with_the_oracle(program):
    shapes, n_args, ops = program
    names = [f"a{i}" for i in range(n_args)]
    dims = {}
    params = []
    for name, shape in zip(names, shapes):
        dims[f"{name}r"], dims[f"{name}c"] = shape
        params.append(f"{name}: f32[b'{name}r {name}c']")
    source = f"def step({', '.join(params)}):\n    return run_program(OPS, [{', '.join(names)}])\n"
    scope = {"f32": f32, "run_program": run_program, "OPS": ops}
    exec(source, scope)
    report = verify(scope["step"], {"d": 8}, dims)
    assert report.ok, report
    assert report.activation_bytes_per_device == oracle_peak(shapes, n_args, ops), (shapes, ops, report.activations)


@typechecked
def masked(x: f32[b"batch/d seq"]) -> f32[b"batch/d"]:
    keep = jnp.broadcast_to(jnp.arange(x.shape[1]) < 100, x.shape)  # made from nothing split
    kept = jnp.sum(keep, axis=1)  # a reduction reads the mask: it is written out
    return jnp.sum(jnp.where(keep, x, 0.0), axis=1) / kept


def test_on_auto_axes_a_mask_is_split_like_what_it_masks():
    dims = {"batch": 64, "seq": 128}
    auto = verify(masked, mesh(AxisType.Auto), dims).activations
    explicit = verify(masked, mesh(AxisType.Explicit), dims).activations
    # Explicit: the types say the broadcast mask is replicated, so it is; Auto: XLA lays it out
    # like x, which the estimate follows back from the where.
    assert "broadcast_in_dim bool[64,128]" in {v.what for v in explicit.largest}
    assert "broadcast_in_dim bool[8,128]" in {v.what for v in auto.largest}
    assert auto.bytes_per_device < explicit.bytes_per_device


def test_values_nothing_needs_and_shardtypes_own_checks_take_no_memory():
    @typechecked
    def with_dead_code(x: f32[b"batch/d embed"], w: f32[b"embed hidden"]) -> f32[b"batch/d"]:
        unused = jnp.tanh(x @ w) @ w.T  # never read: XLA removes it
        del unused
        return jnp.sum(x * 2, axis=1)

    for kind in (AxisType.Explicit, AxisType.Auto):  # (Auto: the compile-time checks are in the jaxpr)
        report = verify(with_dead_code, mesh(kind), DIMS)
        assert report.activation_bytes_per_device == 0, report.activations
