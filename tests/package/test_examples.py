"""The examples run: quickstart.py as a script, transformer.py as a module (a few training steps
under its train rules, then greedy decoding under its decode rules), on Explicit and on Auto mesh
axes, and their deliberate mistakes are caught with useful messages.
"""

import contextlib
import importlib.util
import io
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

from shardtypes import TypeCheckError, axis_rules, make_partition_specs

from conftest import make_mesh

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.mark.parametrize("flags", [[], ["--auto"]], ids=["explicit", "auto"])
def test_quickstart_runs_and_shows_the_mistake(flags):
    proc = subprocess.run(
        [sys.executable, str(EXAMPLES / "quickstart.py"), *flags],
        capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert f"with {'Auto' if flags else 'Explicit'} axes on 8 CPU devices" in out
    assert "A deliberate mistake: x laid out over 't' instead of 'd'" in out
    assert re.search(
        r"TypeCheckError: argument \"x\" .* of block\(\) is not f32\[jax.Array, b'batch/d embed'\]: sharding "
        r"is P\('t', None\) but the annotation says P\('d', None\)", out
    ), out
    assert "dimension 'embed' is 6 here (dim 0) but was bound to 4 by argument \"x\"" in out


@pytest.mark.parametrize("flags", [[], ["--auto"]], ids=["explicit", "auto"])
def test_equinox_example(flags):
    pytest.importorskip("equinox")
    proc = subprocess.run([sys.executable, str(EXAMPLES / "equinox_mlp.py"), *flags],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "layout: {'w_up': P('d', 't'), 'w_down': P('t', 'd')}" in proc.stdout
    assert "output: (8, 16) P('d'" in proc.stdout
    caught = proc.stdout.split("caught: ", 1)[1]
    assert caught.startswith("argument \"model\" (__main__.MLP) of apply(): model.w_up is not "
                             "f32[jax.Array, b'embed/d hidden/t']: ")
    # How the unsharded weight is laid out depends on the JAX version (replicated over the mesh,
    # or on one device); the message names the annotation's layout either way.
    assert "P('d', 't')" in caught and "found float32[16,64]" in caught


@pytest.mark.parametrize("flags", [[], ["--auto"]], ids=["explicit", "auto"])
def test_flax_nnx_example(flags):
    pytest.importorskip("flax.nnx")
    proc = subprocess.run([sys.executable, str(EXAMPLES / "flax_nnx.py"), *flags],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "layout: P('d', 't') P('t', 'd')" in proc.stdout
    assert "output: (8, 16)" in proc.stdout
    assert ("caught: shardtypes.nnx.check: Model.blocks[1].w_down is not "
            "f32[jax.Array, b'hidden/t embed/d']: dimension 'hidden' is 32 here") in proc.stdout


@pytest.mark.parametrize("flags", [[], ["--auto"]], ids=["explicit", "auto"])
def test_optax_training_example(flags):
    pytest.importorskip("optax")
    proc = subprocess.run([sys.executable, str(EXAMPLES / "optax_training.py"), *flags],
                          capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr
    assert "mu.w_up: P('d', 't') count: P()" in proc.stdout
    assert "step 5: loss " in proc.stdout
    assert "nu.w_down after training: P('t', 'd')" in proc.stdout
    assert ("caught: argument \"state\" (__main__.TrainState) of train_step(): state.opt_state[1][0].mu.w_up "
            "is not f32[jax.Array, b'embed/d hidden/t']: sharding is P(None, None)") in proc.stdout
    if importlib.util.find_spec("orbax") is not None:
        assert ("checkpoint: restored 8 arrays, values and derived shardings equal: True; mu.w_up: P('d', 't')"
                in proc.stdout), proc.stdout


@pytest.mark.parametrize("flags", [[], ["--auto"]], ids=["explicit", "auto"])
def test_nnx_training_example(flags):
    pytest.importorskip("flax.nnx")
    pytest.importorskip("optax")
    proc = subprocess.run([sys.executable, str(EXAMPLES / "nnx_training.py"), *flags],
                          capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert f"nnx.Optimizer (optax AdamW) with {'Auto' if flags else 'Explicit'} axes" in out
    assert "mu.blocks[0].w_up: P('d', 't') count: P()" in out
    assert "step 5: loss " in out
    assert "nu.blocks[1].w_down after training: P('t', 'd')" in out
    if importlib.util.find_spec("orbax") is not None:
        assert "checkpoint: restored 14 arrays, values and derived shardings equal: True" in out
    caught = out.split("caught: ", 1)[1]
    assert "Model.blocks[1].w_up" in caught and "sharding" in caught
    assert "P(None, None) but the annotation says P('d', 't')" in caught


@pytest.mark.parametrize("flags", [[], ["--auto"]], ids=["explicit", "auto"])
def test_linen_block_example(flags):
    pytest.importorskip("flax.linen")
    proc = subprocess.run([sys.executable, str(EXAMPLES / "linen_block.py"), *flags],
                          capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr
    assert "query kernel: (16, 4, 8) P('d', 't', None)" in proc.stdout
    assert "plan: 8 arrays" in proc.stdout and "ok=True" in proc.stdout
    assert "flax, 'heads' forgotten: P('d', None, None)" in proc.stdout
    assert ("caught: ['params']['MultiHeadDotProductAttention_0']['key']['kernel'] "
            "(f32[b'16/embed 4/heads 8/head_dim']): dim 1 '4/heads': logical axis 'heads' has no rule") in proc.stdout
    assert ("output: (2, 8, 16)" in proc.stdout) == bool(flags)


@pytest.fixture(scope="module")
def transformer():
    """examples/transformer.py, imported from its path (conftest has set 8 devices already)."""
    spec = importlib.util.spec_from_file_location("examples_transformer", EXAMPLES / "transformer.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        del sys.modules[spec.name]


@pytest.fixture(scope="module", params=[[], ["--auto", "--no-search"]], ids=["explicit", "auto"])
def transformer_run(transformer, request, tmp_path_factory):
    """One run of the demo per mesh kind, shared by the tests below: long enough to learn the
    pattern (it is learnt by step 10), short enough to keep the file fast."""
    out = io.StringIO()
    page = tmp_path_factory.mktemp("demo") / "plan.html"
    with contextlib.redirect_stdout(out):
        result = transformer.main(["--steps", "20", "--every", "4", "--html", str(page), *request.param])
    result["page"] = page
    return request.param, result, out.getvalue()


def test_transformer_writes_its_plan_as_a_page_and_says_where(transformer_run):
    _, result, out = transformer_run
    page = result["page"].read_text()
    assert (f"The plan as a page (train: weights and Adam's moments; decode: the weights; side by side, "
            f"against an H100's memory): {result['page']}") in out
    assert page.startswith("<!DOCTYPE html>") or page.lower().startswith("<!doctype html>")
    for path in ("State.weights.embed", "State.weights.layers.w_up", "State.adam_mu.unembed", "State.adam_nu.embed"):
        assert path in page, path
    assert "train" in page and "decode" in page
    # The page's training bands are the weights and Adam's moments the demo prints (74.5 and 149 MiB
    # per chip at 70B-class sizes) and the step's activations verify estimates (about 300 GiB
    # without rematerialization: far past an H100); decode's is the weights' alone.
    assert "optimizer state" in page and "74.5 MiB" in page and "149 MiB" in page and "4.65 GiB" in page
    assert re.search(r">activations</td><td class=\"num\">3\d\d GiB<", page), page[:2000]
    assert "estimated by verify" in page and " over (" in page
    assert "Weights.embed" not in page


def test_transformer_trains(transformer_run):
    flags, result, out = transformer_run
    losses = result["losses"]
    assert len(losses) == 20 and all(math.isfinite(x) for x in losses)
    assert losses[5] < losses[0] - 1.0, losses  # a repeating sequence is learnt fast
    assert losses[-1] < 0.5, losses
    assert "state.weights.layers.w_up is not f32[jax.Array, b'layers embed/fsdp hidden/tp']" in result["mistake"]
    assert "sharding is P(None, 't', 'd') but the annotation says P(None, 'd', 't')" in result["mistake"]

    assert f"with {'Auto' if flags else 'Explicit'} axes" in out
    assert "axis rules 'transformer'" in out
    assert re.search(r"fsdp +train: d +decode: None", out), out  # the rule table
    assert "dim 1 'embed/fsdp': d  (fsdp -> 'd')" in out  # explain() for one layer weight
    # The parameter table: logical annotation, then its spec in train and in decode mode.
    assert re.search(
        r"weights\.layers\.w_up +f32\['layers embed/fsdp hidden/tp'\] +P\(None, 'd', 't'\) +"
        r"P\(None, None, 't'\)", out
    ), out
    assert sum(line.startswith("  step ") for line in out.splitlines()) == 6  # steps 0, 4, 8, 12, 16, the last
    assert "A deliberate mistake" in out


def test_transformer_decodes_the_pattern(transformer_run):
    """After training, greedy decoding under the decode rules continues the repeating sequence,
    with the activations laid out differently from the same annotations."""
    flags, result, out = transformer_run
    decoded, expected = result["decoded"], result["expected"]
    assert decoded.shape == expected.shape == (2, 8)
    np.testing.assert_array_equal(decoded, expected)
    assert out.count("(continues the pattern)") == 2

    layouts = result["layouts"]
    residual = layouts["residual stream f32[b'batch/dp seq embed/tp']"]
    assert residual == ("P('d', None, 't')", "P(None, None, 't')")
    assert layouts["decode context i32[b'batch/dp seq']"] == ("P('d', None)", "P(None, None)")
    assert layouts["layer weight w_q f32[b'layers embed/fsdp heads/tp head_dim']"] == (
        "P(None, 'd', 't', None)", "P(None, None, 't', None)")
    assert "train P('d', None, 't'), decode P(None, None, 't')" in out
    assert "size 2 does not divide over 4 devices" in out  # why the train rules would not do


def test_decode_rules_lay_out_activations_differently(transformer):
    """The same activation annotations resolve to other specs in decode mode."""
    rules = transformer.RULES
    for annotation in [transformer.RESIDUAL, transformer.Batch]:
        with axis_rules(rules):
            train = make_partition_specs(annotation)
        with axis_rules(rules, mode="decode"):
            decode = make_partition_specs(annotation)
        assert train != decode, annotation
    with axis_rules(rules):
        assert make_partition_specs(transformer.RESIDUAL) == P("d", None, "t")
        assert make_partition_specs(transformer.Batch).inputs == P("d", None)
    with axis_rules(rules, mode="decode"):
        assert make_partition_specs(transformer.RESIDUAL) == P(None, None, "t")
        assert make_partition_specs(transformer.Batch).inputs == P(None, None)


@pytest.mark.parametrize("kind", ["explicit", "auto"])
def test_wrongly_sharded_weight_is_caught_with_its_path(transformer, kind):
    mesh = make_mesh(kind)
    with axis_rules(transformer.RULES):  # train mode: embed/fsdp hidden/tp is P(None, 'd', 't')
        state = transformer.init_state(jax.random.key(0), mesh)
        rng = np.random.default_rng(0)
        batch = transformer.make_batch(rng, np.arange(12), mesh)
        wrong = transformer.wrongly_sharded(state, mesh)
        with jax.set_mesh(mesh), pytest.raises(TypeCheckError) as caught:
            transformer.train_step(wrong, batch)
    message = str(caught.value)
    assert 'argument "state"' in message and "train_step()" in message
    assert "state.weights.layers.w_up is not f32[jax.Array, b'layers embed/fsdp hidden/tp']" in message
    assert "P(None, 't', 'd')" in message and "P(None, 'd', 't')" in message


def test_parameter_table_is_derived_from_the_annotations(transformer):
    mesh = make_mesh("explicit")
    rows = {path: rest for path, *rest in transformer.parameter_table(mesh)}
    assert list(rows)[:3] == ["weights.embed", "weights.layers.ln1", "weights.layers.w_q"]
    annotation, train, decode, shape, nbytes = rows["weights.layers.w_q"]
    assert annotation == "f32['layers embed/fsdp heads/tp head_dim']"
    assert train == "P(None, 'd', 't', None)" and shape == "(2, 32, 4, 8)"
    assert decode == "P(None, None, 't', None)"
    assert rows["weights.layers.ln1"][1:3] == ["P(None, ('t', 'd'))", "P(None, 't')"]
    assert nbytes == 2 * 32 * 4 * 8 * 4 // 8
    # Every weight is fully sharded in training, so the devices together hold each element once.
    with axis_rules(transformer.RULES):
        structs = transformer.make_shape_dtype_structs(transformer.Weights, transformer.DIMS, mesh)
    total = sum(math.prod(s.shape) * s.dtype.itemsize for s in jax.tree.leaves(structs))
    assert sum(r[-1] for r in rows.values()) * 8 == total


def test_training_step_verifies_at_scale(transformer_run):
    """The demo's training step on a 64x64 abstract mesh with 70B-class sizes: no problems, a
    memory plan per chip, and the copy with a wrong annotation reported with its path."""
    _, result, _ = transformer_run
    scale = result["at_scale"]
    report = scale["report"]
    assert report.ok, str(report)
    assert report.mesh == {"d": 64, "t": 64} and report.dims["embed"] == 8192
    weights = scale["weights"]
    assert weights.ok and len(weights.rows) == 12
    w_up = next(r for r in weights.rows if r.path == "Weights.layers.w_up")
    assert w_up.shape == (80, 8192, 28672) and w_up.device_shape == (80, 128, 448)
    assert w_up.bytes_per_device == 80 * 128 * 448 * 4
    assert scale["state"].bytes_per_device == 3 * weights.bytes_per_device + 4  # + the step counter
    wrong = scale["wrong"]
    assert not wrong.ok and len(wrong.problems) == 1
    message = str(wrong.problems[0])
    assert "the value assigned to w_down of training_kernel_with_a_mistake()" in message
    assert "f32[jax.Array, b'layers hidden embed/fsdp']" in message
    assert "bound to 28672 by verify(dims=...)" in message


def test_the_demo_searches_its_step_at_scale(transformer_run):
    """The demo's search (issue 45): every (d, t) of 4,096 chips under three rule sets, ranked by
    the step's time on H100s, those over 80 GB marked; each ranked time is verify's on that mesh."""
    flags, result, out = transformer_run
    searched = result["searched"]
    if "--no-search" in flags:
        assert searched is None and "Which layout?" not in out
        return
    assert searched.considered == 39 and len(searched.candidates) + len(searched.rejected) == 39
    assert len(searched.candidates) >= 20
    best = searched.best
    assert best.fits and best.rules == "fsdp x tp" and math.prod(best.mesh.values()) == 4096
    times = [c.step_seconds for c in searched.candidates if c.fits]
    assert times == sorted(times) and best.step_seconds == times[0]
    assert all(c.memory_bytes > 80 * 2**30 for c in searched.candidates if not c.fits)
    assert {c.rules for c in searched.candidates} == {"fsdp x tp", "fsdp", "tp over d"}
    assert all("does not divide" in r.reason for r in searched.rejected)
    assert f"  best: {best.label} at " in out and "39 verified in" in out


def test_transformer_on_auto_axes_shows_the_checks_cost_on_a_cached_step(transformer_run):
    """The README's claim: on Auto axes the demo prints a cached step checked and with the
    check off, and the checked one enters no more Python frames than the unchecked one."""
    flags, _, out = transformer_run
    line = re.search(r"Auto axes, a cached call of the step: .* (\d+) Python frames entered checked, (\d+) unchecked", out)
    if not flags:
        assert line is None
        return
    assert line is not None, out
    assert int(line.group(1)) == int(line.group(2))


# The off switch changes nothing but the checks: every example runs with SHARDTYPES_DISABLE=1
# (the demo reads dims() in its body), and those that show a deliberate mistake say why not.
OFF_EXPECTS = {
    "quickstart.py": ["shard_map    -> (8, 16) P('d', 't')",
                      "Checks are off (SHARDTYPES_DISABLE=1), so the deliberate mistakes are left out"],
    "transformer.py": ["(continues the pattern)",
                       "Checks are off (SHARDTYPES_DISABLE=1), so the deliberate mistake is left out",
                       "1. [check] the value assigned to w_down of training_kernel_with_a_mistake()"],
    "equinox_mlp.py": ["output: (8, 16)"],
    "flax_nnx.py": ["output: (8, 16)"],
    "linen_block.py": ["checked Dense_0 against a written annotation"],
    "nnx_training.py": ["values and derived shardings equal: True"],
    "optax_training.py": ["values and derived shardings equal: True"],
}


@pytest.mark.parametrize("script", sorted(OFF_EXPECTS))
def test_every_example_runs_with_the_checks_switched_off(script, tmp_path):
    if script != "quickstart.py" and script != "transformer.py":
        pytest.importorskip({"equinox_mlp.py": "equinox", "optax_training.py": "optax"}.get(script, "flax"))
    env = {**os.environ, "SHARDTYPES_DISABLE": "1"}
    flags = ["--html", str(tmp_path / "plan.html"), "--no-search"] if script == "transformer.py" else []
    proc = subprocess.run([sys.executable, str(EXAMPLES / script), *flags], capture_output=True,
                          text=True, timeout=300, env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for line in OFF_EXPECTS[script]:
        assert line in proc.stdout, (line, proc.stdout[-3000:])
    assert "TypeCheckError" not in proc.stdout
    assert "caught: shardtypes.nnx.check" not in proc.stdout  # an explicit check is off too
