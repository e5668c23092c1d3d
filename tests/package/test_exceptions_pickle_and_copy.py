"""Every exception class of the package pickles, deep-copies and copies to an equal exception (the
same class, message, args and attributes), and the test knows every such class: it walks the
package and compares what it finds with its own list.
"""

from __future__ import annotations

import copy
import functools
import importlib
import pickle
import pkgutil
from typing import Any, Callable

import jax.numpy as jnp
import pytest
import typeguard

import shardtypes
from shardtypes import (
    FieldError,
    ShapeSpec,
    ShapeSpecError,
    ShardtypesWarning,
    TypeCheckError,
    check,
    f32,
    verify,
)
from shardtypes.checking.kernel_pass import Unreadable
from shardtypes.context import compat
from shardtypes.language.sizes import DimError
from shardtypes.model import Mismatch
from shardtypes.testing import MeshMismatch

from catalogue_kit import ABSTRACT, RULES, Layer, X, step


@functools.cache
def package_exception_classes() -> dict[str, type]:
    """Every exception class defined in the package, by name, found by walking its modules (the
    private ones too: the test reaches them this way rather than importing private names)."""
    found = {}
    for info in pkgutil.walk_packages(shardtypes.__path__, "shardtypes."):
        try:
            module = importlib.import_module(info.name)
        except ImportError:  # _indirection: for static checkers only
            continue
        for value in vars(module).values():
            if (isinstance(value, type) and issubclass(value, BaseException)
                    and value.__module__.startswith("shardtypes")):
                found[value.__name__] = value
    return found


def _verification_error() -> Exception:
    with pytest.raises(Exception) as info:
        verify(step, ABSTRACT, dims={"batch": 8, "embed": 3}, raise_on_error=True)
    return info.value


def _field_error() -> Exception:
    with pytest.raises(FieldError) as info:
        typeguard.check_type(Layer(jnp.zeros((2, 3)), jnp.zeros((4, 2))), Layer)
    return info.value


def _type_check_error() -> Exception:
    with pytest.raises(TypeCheckError) as info:
        check(f32, "a", X())
    return info.value


EXCEPTIONS: dict[str, Callable[[], BaseException]] = {
    "ShapeSpecError": lambda: ShapeSpecError("a/", "dim 0: empty mesh axis", (0, 2)),
    "ShapeSpecError-parsed": lambda: _raised(lambda: ShapeSpec.parse("a/x b/x")),
    "ShapeSpecError-no-span": lambda: ShapeSpecError(3, "a shape string must be str or bytes"),
    "AxisRulesError": lambda: _raised(lambda: RULES.table("prefill")),
    "TypeCheckError": _type_check_error,
    "FieldError": _field_error,
    "VerificationError": _verification_error,
    "MeshMismatch": lambda: MeshMismatch("k() gives other numbers on mesh {d: 2} than on the reference mesh {d: 1}",
                                         reference={"d": 1}, mesh={"d": 2}, output="result[0]",
                                         diagnosis="every element is 2 times the reference's", max_abs=3.0,
                                         max_rel=1.0, differing=({"d": 2}, {"d": 4})),
    "ShardtypesWarning": lambda: ShardtypesWarning("unchecked locals"),
    "KernelPassWarning": lambda: shardtypes.KernelPassWarning("cannot follow JAX's 'scan' here"),
    "JaxFeatureWarning": lambda: compat.JaxFeatureWarning("the probe could not decide"),
    "Unreadable": lambda: Unreadable("no param 'axes'"),
    "_Unresolved": lambda: package_exception_classes()["_Unresolved"]("x"),
    # Internal ones, which a user meets only by accident (or in a traceback's chain).
    "Mismatch": lambda: Mismatch("has 2 dims (8, 4) but the annotation has 1"),
    "ArrayError": lambda: _raised(lambda: typeguard.check_type(X(), f32[b"a"])),
    "DimError": lambda: DimError("dim 'a/' has an empty mesh axis name"),
    "_StdoutClosed": lambda: package_exception_classes()["_StdoutClosed"](),
}


def _raised(call: Callable[[], Any]) -> BaseException:
    with pytest.raises(Exception) as info:
        call()
    return info.value


def _same(a: BaseException, b: BaseException) -> None:
    assert type(a) is type(b)
    assert str(a) == str(b)
    assert a.args == b.args
    for name, value in vars(a).items():
        if name.startswith("__"):
            continue
        other = getattr(b, name)
        assert str(other) == str(value), name


@pytest.mark.parametrize("name", sorted(EXCEPTIONS))
@pytest.mark.parametrize("how", ["pickle", "deepcopy", "copy"])
def test_exceptions_pickle_and_copy(name: str, how: str) -> None:
    error = EXCEPTIONS[name]()
    if how == "pickle":
        back = pickle.loads(pickle.dumps(error))
    elif how == "deepcopy":
        back = copy.deepcopy(error)
    else:
        back = copy.copy(error)
    _same(error, back)


def test_every_exception_class_of_the_package_is_in_the_pickle_test() -> None:
    found = set(package_exception_classes())
    assert {"AxisRulesError", "_StdoutClosed", "Mismatch"} <= found  # the walk finds them
    assert found <= {n.split("-")[0] for n in EXCEPTIONS}, found
