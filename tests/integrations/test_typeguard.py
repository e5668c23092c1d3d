"""Typeguard integration: plain typeguard, ``shardtypes.typechecked`` in its forms (functions,
methods, classes, async, under a scope), ``check``, ``Annotated``, and typeguard's import hook and
pytest plugin (docs/design.md, "Checking").

Functions typeguard cannot instrument are in test_typeguard_uninstrumentable.py, the error
messages in test_typeguard_messages.py. The annotations here are unsharded: these tests are about
checking and messages, not layouts.
"""

import asyncio
import os
import re
import subprocess
import sys
import textwrap
from typing import Optional

import jax.numpy as jnp
import numpy as np
import pytest
import typeguard
from typeguard import TypeCheckError

import shardtypes
from shardtypes import (
    Scope,
    ShapeSpec,
    check,
    dims,
    f32,
    floating,
    i32,
    register_with_typeguard,
    scope,
    typechecked,
)

from typeguard_kit import I, Z


@pytest.fixture
def all_items(monkeypatch):
    """Typeguard checks only the first item of a collection by default; check them all."""
    monkeypatch.setattr(
        typeguard.config, "collection_check_strategy", typeguard.CollectionCheckStrategy.ALL_ITEMS
    )


# ---------------------------------------------------------------------------------------------
# Plain typeguard.


@typeguard.typechecked
def plain_pair(x: f32[b"n m"], y: f32[b"n m"]) -> f32[b"n m"]:
    return x


@typeguard.typechecked
def plain_local(x: f32[b"n"], k: int) -> f32[b"n"]:
    z: f32[b"n"] = Z(k)
    return x


@typeguard.typechecked
def plain_return(x: f32[b"n"], k: int) -> f32[b"n"]:
    return Z(k)


def test_plain_typechecked_checks_dtype_and_rank():
    assert plain_pair(Z(2, 3), Z(2, 3)).shape == (2, 3)
    with pytest.raises(TypeCheckError, match=r'argument "x" .*has dtype int32, the annotation wants float32'):
        plain_pair(I(2, 3), Z(2, 3))
    with pytest.raises(TypeCheckError, match=r'argument "y" .*has 1 dim \[2\] but the annotation has 2'):
        plain_pair(Z(2, 3), Z(2))
    with pytest.raises(TypeCheckError, match=r'argument "x" .*is not an array'):
        plain_pair([1.0], Z(2, 3))


def test_plain_typechecked_arguments_share_a_table():
    with pytest.raises(TypeCheckError, match=re.escape(
        "dimension 'n' is 5 here (dim 0) but was bound to 2 by argument \"x\" of plain_pair()"
    )):
        plain_pair(Z(2, 3), Z(5, 3))


def test_plain_typechecked_locals_and_return_share_the_table():
    assert plain_local(Z(3), 3).shape == (3,)
    with pytest.raises(TypeCheckError, match=r"value assigned to z .*of plain_local\(\).*dimension 'n' is 4 here"):
        plain_local(Z(3), 4)
    assert plain_return(Z(3), 3).shape == (3,)
    with pytest.raises(TypeCheckError, match=r"the return value .*of plain_return\(\).*dimension 'n' is 4 here"):
        plain_return(Z(3), 4)


def test_plain_typechecked_does_not_leak_between_calls():
    for n in (3, 5, 3, 1):
        assert plain_pair(Z(n, 2), Z(n, 2)).shape == (n, 2)
        assert plain_return(Z(n), n).shape == (n,)
    with pytest.raises(TypeCheckError):
        plain_pair(Z(3, 2), Z(4, 2))
    assert plain_pair(Z(4, 2), Z(4, 2)).shape == (4, 2)  # the failed call left nothing
    assert dict(dims()) == {}


def test_plain_typechecked_class():
    @typeguard.typechecked
    class K:
        def m(self, x: f32[b"n"], y: f32[b"n"]) -> f32[b"n"]:
            return x

    assert K().m(Z(2), Z(2)).shape == (2,)
    with pytest.raises(TypeCheckError, match=r'argument "y" .*of .*K\.m\(\).*dimension \'n\' is 3 here'):
        K().m(Z(2), Z(3))


def test_plain_callee_shares_table_of_shardtypes_caller():
    @typechecked
    def caller(x: f32[b"n m"]) -> f32[b"n m"]:
        return plain_pair(Z(4, 2), Z(4, 2))

    with pytest.raises(TypeCheckError, match="dimension 'n' is 4 here"):
        caller(Z(3, 2))


def test_check_type_with_bytes_and_str_shapes():
    x = Z(5, 4)
    assert typeguard.check_type(x, f32[b"a b"]) is x
    assert typeguard.check_type(x, f32["a b"]) is x
    assert typeguard.check_type(x, floating["a 4"]) is x
    assert typeguard.check_type(jnp.zeros((2, 3)), f32["p q"]).shape == (2, 3)
    with pytest.raises(TypeCheckError, match=re.escape("numpy.ndarray is not f32[b'a']: has 2 dims [5,4]")):
        typeguard.check_type(x, f32["a"])
    with pytest.raises(TypeCheckError, match=re.escape("is not f32[b'a b']: has dtype int32")):
        typeguard.check_type(I(5, 4), f32[b"a b"])
    with pytest.raises(TypeCheckError, match=re.escape("dim '3' is 4, but the annotation fixes it to 3")):
        typeguard.check_type(x, f32["a 3"])


def test_check_type_in_containers():
    typeguard.check_type([Z(2, 3), Z(2, 3)], list[f32[b"a b"]])
    typeguard.check_type({"k": Z(2)}, dict[str, f32["c"]])
    typeguard.check_type(None, Optional[f32[b"d"]])
    with pytest.raises(TypeCheckError, match=r"item 1 .*dimension 'a' is 4 here"):
        typeguard.check_type(
            [Z(2, 3), Z(4, 3)],
            list[f32[b"a b"]],
            collection_check_strategy=typeguard.CollectionCheckStrategy.ALL_ITEMS,
        )


def _check_n(size):
    typeguard.check_type(Z(size), f32[b"n"])


def test_check_type_calls_from_different_frames_do_not_leak():
    _check_n(3)
    _check_n(5)
    assert dict(dims()) == {}


def test_check_type_calls_in_one_function_do_not_leak():
    typeguard.check_type(Z(3), f32[b"n"])
    typeguard.check_type(Z(5), f32[b"n"])


def test_check_type_in_a_loop_does_not_leak():
    for size in (3, 5):
        typeguard.check_type(Z(size), f32["n"])


def test_register_with_typeguard_is_idempotent():
    register_with_typeguard()
    register_with_typeguard()
    ours = [f for f in typeguard.checker_lookup_functions if f.__module__.startswith("shardtypes.")]
    assert len(ours) == 1  # one entry in typeguard's list, however often it is registered
    # and still works
    with pytest.raises(TypeCheckError):
        typeguard.check_type(I(2), f32[b"a"])


# ---------------------------------------------------------------------------------------------
# shardtypes.typechecked in its forms.


@typechecked
def st_pair(x: f32[b"n m"], y: f32[b"n m"]) -> f32[b"n m"]:
    """Docs of st_pair."""
    return x


def test_typechecked_function():
    assert st_pair(Z(2, 3), Z(2, 3)).shape == (2, 3)
    with pytest.raises(TypeCheckError, match=r"dimension 'm' is 4 here"):
        st_pair(Z(2, 3), Z(2, 4))
    with pytest.raises(TypeCheckError, match="has dtype int32"):
        st_pair(Z(2, 3), I(2, 3))
    assert st_pair.__name__ == "st_pair" and st_pair.__doc__ == "Docs of st_pair."
    assert hasattr(st_pair, "__wrapped__")


def test_typechecked_with_parentheses():
    @typechecked()
    def f(x: f32[b"n"]) -> f32[b"n"]:
        return x

    assert f(Z(2)).shape == (2,)
    with pytest.raises(TypeCheckError):
        f(I(2))


def test_typechecked_rejects_non_callable():
    with pytest.raises(TypeError, match="typechecked expects a function, method or class, got 3"):
        typechecked(3)


def test_typechecked_keyword_arguments_and_defaults():
    @typechecked
    def f(x: f32[b"n"], *, y: f32[b"n"] = Z(2), scale: float = 1.0) -> f32[b"n"]:
        return x

    assert f(Z(2)).shape == (2,)
    assert f(x=Z(3), y=Z(3)).shape == (3,)
    assert f(Z(4), y=Z(4), scale=2.0).shape == (4,)
    with pytest.raises(TypeCheckError, match=r'argument "y" .*dimension \'n\' is 2 here .*bound to 3'):
        f(Z(3))  # the default is checked against x
    with pytest.raises(TypeCheckError, match=r'argument "y" .*has dtype int32'):
        f(x=Z(3), y=I(3))
    with pytest.raises(TypeCheckError, match=r'argument "scale"'):
        f(Z(2), scale="big")


def test_typechecked_varargs(all_items):
    @typechecked
    def f(*xs: f32[b"n"], **kw: f32[b"n"]) -> int:
        return len(xs) + len(kw)

    assert f(Z(2), Z(2), a=Z(2)) == 3
    with pytest.raises(TypeCheckError, match="dimension 'n' is 3 here"):
        f(Z(2), Z(3))
    with pytest.raises(TypeCheckError, match="dimension 'n' is 3 here"):
        f(Z(2), a=Z(3))


class Methods:
    @typechecked
    def method(self, x: f32[b"n"], y: f32[b"n"]) -> f32[b"n"]:
        return x

    @typechecked
    @staticmethod
    def static_outer(x: f32[b"n"], y: f32[b"n"]) -> f32[b"n"]:
        return x

    @staticmethod
    @typechecked
    def static_inner(x: f32[b"n"], y: f32[b"n"]) -> f32[b"n"]:
        return x

    @typechecked
    @classmethod
    def class_outer(cls, x: f32[b"n"], y: f32[b"n"]) -> f32[b"n"]:
        return x

    @classmethod
    @typechecked
    def class_inner(cls, x: f32[b"n"], y: f32[b"n"]) -> f32[b"n"]:
        return x


@pytest.mark.parametrize("name", ["method", "static_outer", "static_inner", "class_outer", "class_inner"])
def test_typechecked_methods(name):
    bound = getattr(Methods(), name)
    assert bound(Z(2), Z(2)).shape == (2,)
    with pytest.raises(TypeCheckError, match=rf'argument "y" \(numpy.ndarray\) of Methods\.{name}\(\) .*dimension \'n\' is 3 here'):
        bound(Z(2), Z(3))
    with pytest.raises(TypeCheckError, match=rf'argument "x" .*of Methods\.{name}\(\).*has dtype int32'):
        bound(I(2), Z(2))
    if name != "method":
        unbound = getattr(Methods, name)
        with pytest.raises(TypeCheckError):
            unbound(Z(2), Z(3))
        assert unbound(Z(4), Z(4)).shape == (4,)


@typechecked
class Checked:
    def method(self, x: f32[b"n"], y: f32[b"n"]) -> f32[b"n"]:
        return x

    @staticmethod
    def static(x: f32[b"n"], y: f32[b"n"]) -> f32[b"n"]:
        return x

    @classmethod
    def klass(cls, x: f32[b"n"], y: f32[b"n"]) -> f32[b"n"]:
        return x

    def bad_return(self, x: f32[b"n"]) -> f32[b"n"]:
        return Z(x.shape[0] + 1)


@pytest.mark.parametrize("name", ["method", "static", "klass"])
def test_typechecked_class(name):
    f = getattr(Checked(), name)
    assert f(Z(2), Z(2)).shape == (2,)
    with pytest.raises(TypeCheckError, match=rf"of Checked\.{name}\(\) .*dimension 'n' is 3 here"):
        f(Z(2), Z(3))
    with pytest.raises(TypeCheckError, match="has dtype int32"):
        f(I(2), I(2))


def test_typechecked_class_checks_return():
    with pytest.raises(TypeCheckError, match=r"the return value .*of Checked\.bad_return\(\).*dimension 'n' is 3 here"):
        Checked().bad_return(Z(2))


def test_typechecked_class_checks_properties():
    @typechecked
    class WithProperty:
        @property
        def value(self) -> f32[b"n"]:
            return I(2)

    with pytest.raises(TypeCheckError):
        WithProperty().value


def test_typechecked_async_function():
    @typechecked
    async def f(x: f32[b"n"], y: f32[b"n"]) -> f32[b"n"]:
        await asyncio.sleep(0)
        z: f32[b"n"] = y
        return x

    @typechecked
    async def bad_return(x: f32[b"n"]) -> f32[b"n"]:
        await asyncio.sleep(0)
        return Z(x.shape[0] + 1)

    assert asyncio.run(f(Z(2), Z(2))).shape == (2,)
    with pytest.raises(TypeCheckError, match=r'argument "y" .*dimension \'n\' is 3 here'):
        asyncio.run(f(Z(2), Z(3)))
    with pytest.raises(TypeCheckError, match=r"the return value .*dimension 'n' is 3 here"):
        asyncio.run(bad_return(Z(2)))
    assert f.__name__ == "f"


def test_typechecked_under_scope():
    @scope
    @typechecked
    def kernel(x: f32[b"n"]) -> f32[b"n"]:
        return x

    @typechecked
    def caller(x: f32[b"n"]) -> f32[b"n"]:
        kernel(Z(7))
        return x

    assert caller(Z(2)).shape == (2,)


# ---------------------------------------------------------------------------------------------
# check(): the seed's low-level check.


def test_check_passes():
    assert check(jnp.float32, "a b", jnp.zeros((2, 3))) is None
    assert check(jnp.float32, "a b", Z(2, 3)) is None
    assert check(f32, ShapeSpec.parse("a b"), Z(2, 3)) is None
    assert check(np.dtype("float32"), b"a 3", Z(2, 3)) is None
    assert check(floating, "a b", jnp.zeros((2, 3), jnp.bfloat16)) is None
    assert check(jnp.int32, "", np.int32(3)) is None


def test_check_fails():
    with pytest.raises(TypeCheckError, match=re.escape("is not f32[b'a b']: has 1 dim [2] but the annotation has 2")):
        check(jnp.float32, "a b", jnp.zeros((2,)))
    with pytest.raises(TypeCheckError, match=re.escape("is not f32[b'a b']: has dtype int32, the annotation wants float32")):
        check(jnp.float32, "a b", jnp.zeros((2, 3), jnp.int32))
    with pytest.raises(TypeCheckError, match=re.escape("is not f32[b'a 3']: dim '3' is 4, but the annotation fixes it to 3")):
        check(f32, ShapeSpec.parse("a 3"), Z(2, 4))
    with pytest.raises(TypeCheckError, match=re.escape("(found float32[2] with SingleDeviceSharding)")):
        check(f32, ShapeSpec.parse("a b"), jnp.zeros((2,)))
    with pytest.raises(TypeCheckError, match="is not an array"):
        check(f32, "a", [1.0, 2.0])
    with pytest.raises(TypeCheckError, match="has dtype float32"):
        check(i32, ShapeSpec.parse("a"), Z(2))


def test_check_uses_the_current_table():
    # Outside any scope nothing is remembered between checks.
    check(f32, "a", Z(2))
    check(f32, "a", Z(3))
    assert dict(dims()) == {}
    with Scope(a=2):
        check(f32, "a b", Z(2, 5))
        assert dict(dims()) == {"a": 2, "b": 5}
        with pytest.raises(TypeCheckError, match=re.escape("dimension 'a' is 3 here (dim 0) but was bound to 2 by Scope(a=2)")):
            check(f32, ShapeSpec.parse("a"), Z(3))
        with pytest.raises(TypeCheckError, match=re.escape("dimension 'b' is 6 here (dim 0) but was bound to 5 by check()")):
            check(jnp.float32, "b", Z(6))


def test_message_names_method_and_path_in_container(all_items):
    with pytest.raises(TypeCheckError, match=re.escape(
        'argument "y" (numpy.ndarray) of Methods.method() is not f32[b\'n\']'
    )):
        Methods().method(Z(2), Z(3))

    @typechecked
    def many(xs: list[f32[b"n"]]) -> None:
        pass

    with pytest.raises(TypeCheckError, match=r'item 1 of argument "xs" \(list\) of .*many\(\) is not '
                       + re.escape("f32[b'n']: dimension 'n' is 3 here")):
        many([Z(2), Z(3)])


# ---------------------------------------------------------------------------------------------
# Annotated[T, <shardtypes annotation>] is checked like the annotation itself, everywhere.

from typing import Annotated  # noqa: E402

import jax  # noqa: E402


@pytest.mark.parametrize("checker", ["shardtypes", "typeguard"])
def test_annotated_metadata_is_checked(checker):
    decorate = typechecked if checker == "shardtypes" else typeguard.typechecked

    @decorate
    def f(x: Annotated[jax.Array, shardtypes.f32[b"batch embed"]],
          y: Annotated[jax.Array, shardtypes.f32[b"batch"]]) -> Annotated[jax.Array, shardtypes.f32[b"batch embed"]]:
        return x

    assert f(jnp.zeros((2, 3)), jnp.zeros(2)).shape == (2, 3)
    with pytest.raises(TypeCheckError, match="has dtype bfloat16, the annotation wants float32"):
        f(jnp.zeros((2, 3), jnp.bfloat16), jnp.zeros(2))
    with pytest.raises(TypeCheckError, match="dimension 'batch' is 4 here .*bound to 2 by argument \"x\""):
        f(jnp.zeros((2, 3)), jnp.zeros(4))
    with pytest.raises(TypeCheckError, match="is not an instance of"):
        f(np.zeros((2, 3), np.float32), jnp.zeros(2))  # the Annotated type is checked too


def test_annotated_under_check_type():
    typeguard.check_type(jnp.zeros(3), Annotated[jax.Array, shardtypes.f32[b"a"]])
    with pytest.raises(TypeCheckError, match=r"is not f32\[b'a'\]: has dtype bfloat16"):
        typeguard.check_type(jnp.zeros(3, jnp.bfloat16), Annotated[jax.Array, shardtypes.f32[b"a"]])
    # other metadata is left alone
    typeguard.check_type(jnp.zeros(3), Annotated[jax.Array, "a note"])


# ---------------------------------------------------------------------------------------------
# typeguard's import hook and pytest plugin check shardtypes annotations, one table per call.

_HOOKED_MODULE = '''
import jax.numpy as jnp
from shardtypes import f32


def pair(x: f32[b"n"], y: f32[b"n"]) -> f32[b"n"]:
    return x + y


def local(x: f32[b"n"]) -> f32[b"n"]:
    y: f32[b"n m"] = x
    return y
'''


def _write_package(tmp_path, name):
    pkg = tmp_path / name
    pkg.mkdir()
    (pkg / "__init__.py").write_text(_HOOKED_MODULE)
    return pkg


def test_typeguard_import_hook(tmp_path):
    _write_package(tmp_path, "hooked_pkg")
    code = textwrap.dedent('''
        import sys, typeguard, jax.numpy as jnp
        sys.path.insert(0, sys.argv[1])
        import shardtypes
        with typeguard.install_import_hook("hooked_pkg"):
            import hooked_pkg
        hooked_pkg.pair(jnp.zeros(2), jnp.zeros(2))
        hooked_pkg.pair(jnp.zeros(3), jnp.zeros(3))  # a new call, a new table
        for call in (lambda: hooked_pkg.pair(jnp.zeros(2), jnp.zeros(3)),
                     lambda: hooked_pkg.local(jnp.zeros(2))):
            try:
                call()
                print("passed")
            except typeguard.TypeCheckError as e:
                print("rejected:", e)
    ''')
    result = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    lines = [line for line in result.stdout.splitlines() if not line.startswith("See https://")]  # docs links
    assert lines[0].startswith('rejected: argument "y" (jax.Array)') and "dimension 'n' is 3 here" in lines[0]
    assert lines[1].startswith("rejected:") and "is not f32[b'n m']" in lines[1]


def test_typeguard_pytest_plugin(tmp_path):
    _write_package(tmp_path, "plugged_pkg")
    (tmp_path / "test_plugged.py").write_text(textwrap.dedent('''
        import jax.numpy as jnp, pytest, typeguard
        import shardtypes
        import plugged_pkg

        def test_good():
            plugged_pkg.pair(jnp.zeros(2), jnp.zeros(2))

        def test_bad():
            with pytest.raises(typeguard.TypeCheckError, match="dimension 'n' is 3 here"):
                plugged_pkg.pair(jnp.zeros(2), jnp.zeros(3))
    '''))
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--typeguard-packages=plugged_pkg",
         "test_plugged.py"], cwd=tmp_path, capture_output=True, text=True, timeout=300,
        env={**os.environ, "PYTHONPATH": str(tmp_path)})
    assert result.returncode == 0, result.stdout + result.stderr
    assert "2 passed" in result.stdout


def test_annotated_metadata_naming_a_plain_dataclass_with_annotated_fields_is_checked():
    """``Annotated[object, Plain]`` where ``Plain`` is a plain dataclass (not a pytree_dataclass)
    whose fields carry shardtypes annotations: checked field by field, never ignored."""
    import dataclasses
    from typing import Annotated

    import numpy as np

    from shardtypes import f32

    @dataclasses.dataclass
    class Plain:
        w: f32[b"a b"]

    typeguard.check_type(Plain(np.zeros((2, 3), np.float32)), Annotated[object, Plain])
    with pytest.raises(typeguard.TypeCheckError, match=r"\.w .*f32\[b'a b'\]"):
        typeguard.check_type(Plain(np.zeros((2,), np.float32)), Annotated[object, Plain])
