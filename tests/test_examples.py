"""The examples run: quickstart.py as a script, transformer.py as a module (a few training steps),
on Explicit and on Auto mesh axes, and their deliberate mistakes are caught with useful messages.
"""

import importlib.util
import math
import re
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import pytest

from conftest import make_mesh
from shardtypes import TypeCheckError

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


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
        r"TypeCheckError: argument \"x\" .* of block\(\) is not f32\[b'batch/d embed'\]: sharding "
        r"is P\('t', None\) but the annotation says P\('d', None\)", out
    ), out
    assert "dimension 'embed' is 6 here (dim 0) but was bound to 4 by argument \"x\"" in out


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


@pytest.mark.parametrize("flags", [[], ["--auto"]], ids=["explicit", "auto"])
def test_transformer_trains(transformer, flags, capsys):
    result = transformer.main(["--steps", "6", "--every", "1", *flags])
    losses = result["losses"]
    assert len(losses) == 6 and all(math.isfinite(x) for x in losses)
    assert losses[-1] < losses[0] - 1.0, losses  # a repeating sequence is learnt fast
    assert "state.weights.layers.w_up is not f32[b'layers embed/d hidden/t']" in result["mistake"]

    out = capsys.readouterr().out
    assert f"with {'Auto' if flags else 'Explicit'} axes" in out
    assert "weights.layers.w_up" in out and "P(None, 'd', 't')" in out  # the parameter table
    assert out.count("  step ") == 6
    assert "A deliberate mistake" in out


@pytest.mark.parametrize("kind", ["explicit", "auto"])
def test_wrongly_sharded_weight_is_caught_with_its_path(transformer, kind):
    mesh = make_mesh(kind)
    state = transformer.init_state(jax.random.key(0), mesh)
    rng = np.random.default_rng(0)
    batch = transformer.make_batch(rng, np.arange(12), mesh)
    wrong = transformer.wrongly_sharded(state, mesh)
    with jax.set_mesh(mesh), pytest.raises(TypeCheckError) as caught:
        transformer.train_step(wrong, batch)
    message = str(caught.value)
    assert 'argument "state"' in message and "train_step()" in message
    assert "state.weights.layers.w_up is not f32[b'layers embed/d hidden/t']" in message
    assert "P(None, 't', 'd')" in message and "P(None, 'd', 't')" in message


def test_parameter_table_is_derived_from_the_annotations(transformer):
    mesh = make_mesh("explicit")
    rows = {path: rest for path, *rest in transformer.parameter_table(mesh)}
    assert list(rows)[:3] == ["weights.embed", "weights.layers.ln1", "weights.layers.w_q"]
    annotation, spec, shape, nbytes = rows["weights.layers.w_q"]
    assert annotation == "f32['layers embed/d heads/t head_dim']"
    assert spec == "P(None, 'd', 't', None)" and shape == "(2, 32, 4, 8)"
    assert nbytes == 2 * 32 * 4 * 8 * 4 // 8
    # Every weight is fully sharded, so the devices together hold each element exactly once.
    structs = transformer.make_shape_dtype_structs(transformer.Weights, transformer.DIMS, mesh)
    total = sum(math.prod(s.shape) * s.dtype.itemsize for s in jax.tree.leaves(structs))
    assert sum(r[-1] for r in rows.values()) * 8 == total
