"""Pickles made before the layer packages still load (issue 16): annotations, specs, rules and
errors pickled on main before the move name the old flat modules (``shardtypes._dtypes``,
``shardtypes._shape``, ...). ``tests/data/pickles_before_layers.pkl`` was saved then."""

import importlib
import pathlib
import pickle
import subprocess
import sys

import jax
import pytest
from typeguard import TypeCheckError

import shardtypes
from shardtypes import Array, AxisRules, DimSpec, ShapeSpec, bf16, f32, floating
from shardtypes._legacy import MOVED
from shardtypes.language import CHECK_FAILED, link_of, unlinked

SAVED = pathlib.Path(__file__).resolve().parents[1] / "data" / "pickles_before_layers.pkl"


def test_annotations_specs_and_rules_saved_before_the_move_load_as_the_same_objects():
    saved = pickle.loads(SAVED.read_bytes())
    assert saved["f32"] is f32
    assert saved["f32_bytes"] is f32[b"batch/d embed/t"]
    assert saved["bf16_str"] is bf16["layers embed/d/e hidden"]
    assert saved["floating"] is floating[b"*lead seq+1 #b"]
    assert saved["static"] is f32[jax.Array, b"batch/d embed"]
    assert saved["stacked_arr"] is Array["layers", f32[b"embed/d hidden/t"]]
    assert saved["shape_spec"] == ShapeSpec.parse("batch/d embed/t")
    assert saved["dim_spec"] == DimSpec.parse("batch/d/e")
    assert saved["rules"] == AxisRules([("embed", "d"), ("hidden", ("t",))])


def test_errors_saved_before_the_move_load_with_their_class_and_message():
    errors = pickle.loads(SAVED.read_bytes())["errors"]
    assert set(errors) == {"ShapeSpecError", "AxisRulesError", "TypeCheckError", "FieldError", "ArrayError"}
    for name, (class_name, message, error) in errors.items():
        assert type(error).__name__ == class_name, name
        # Our classes add their docs link when printed (tests/package/test_error_docs.py), once:
        # a plain TypeCheckError keeps the words it was pickled with.
        assert unlinked(str(error)) == message, name
        assert str(error) == (message if type(error) is TypeCheckError else f"{message}\n{link_of(str(error))}"), name
    assert isinstance(errors["ShapeSpecError"][2], shardtypes.ShapeSpecError)
    assert isinstance(errors["FieldError"][2], shardtypes.FieldError)
    assert errors["FieldError"][2].fields == ["w"]
    assert isinstance(errors["ArrayError"][2], TypeCheckError)


def test_new_pickles_name_no_old_module_and_load_in_a_fresh_process():
    data = pickle.dumps([f32[b"a/d b"], ShapeSpec.parse("a b"), AxisRules([("a", "d")])])
    assert b"shardtypes._dtypes" not in data and b"shardtypes._shape" not in data
    code = "import pickle, sys; print(pickle.loads(sys.stdin.buffer.read()))"
    out = subprocess.run([sys.executable, "-c", code], input=data, capture_output=True, check=True)
    assert out.stdout.decode().startswith("[shardtypes.f32[b'a/d b'], ShapeSpec")


def test_an_old_module_name_gives_a_clear_error_for_a_name_it_never_had():
    import importlib

    old = importlib.import_module("shardtypes._dtypes")
    assert old.number is shardtypes.number
    try:
        old.no_such_name
    except AttributeError as e:
        assert "no attribute 'no_such_name' (now in shardtypes.model.annotations, shardtypes.model.categories)" in str(e)
    else:
        raise AssertionError("expected AttributeError")


def test_array_errors_pickled_under_their_old_private_name_load_as_the_public_class():
    """Issue 19: the array error was shardtypes._errors._ArrayError (before the layers) and
    shardtypes.model.errors._ArrayError (after); both load as shardtypes.ArrayError."""
    for module in ("shardtypes._errors", "shardtypes.model.errors"):
        data = f"c{module}\n_ArrayError\n(S'jax.Array is not f32[b\\'a\\']'\ntR.".encode()
        error = pickle.loads(data)
        assert type(error) is shardtypes.ArrayError
        assert str(error) == f"jax.Array is not f32[b'a']\n{CHECK_FAILED.line}"
    assert pickle.dumps(shardtypes.ArrayError("x")).count(b"_ArrayError") == 0


@pytest.mark.parametrize("old, new", [(k, v[0]) for k, v in MOVED.items() if "." in k])
def test_a_module_renamed_inside_a_layer_still_imports_from_its_old_path(old, new):
    legacy = importlib.import_module(f"shardtypes.{old}")
    current = importlib.import_module(f"shardtypes.{new}")
    names = [n for n in vars(current) if not n.startswith("__") and not isinstance(getattr(current, n), type(legacy))]
    assert names, new
    for name in names:
        assert getattr(legacy, name) is getattr(current, name), (old, name)
    assert f"shardtypes.{new}" in legacy.__doc__
