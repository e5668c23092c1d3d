"""Pickles of annotations, specs and rules load in a fresh process."""

import pickle
import subprocess
import sys

from shardtypes import AxisRules, ShapeSpec, f32


def test_pickles_load_in_a_fresh_process():
    data = pickle.dumps([f32[b"a/d b"], ShapeSpec.parse("a b"), AxisRules([("a", "d")])])
    code = "import pickle, sys; print(pickle.loads(sys.stdin.buffer.read()))"
    out = subprocess.run([sys.executable, "-c", code], input=data, capture_output=True, check=True)
    assert out.stdout.decode().startswith("[shardtypes.f32[b'a/d b'], ShapeSpec")
