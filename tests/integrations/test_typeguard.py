"""Typeguard integration: plain typeguard, ``shardtypes.typechecked`` in its forms, the fallback
for functions typeguard cannot instrument, ``check`` and the error messages (docs/design.md,
"Checking" and "Errors").

The annotations here are unsharded: these tests are about checking and messages, not layouts.
"""

import asyncio
import gc
import os
import re
import subprocess
import sys
import textwrap
import types
import warnings
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
    ShardtypesWarning,
    check,
    dims,
    f32,
    floating,
    i32,
    register_with_typeguard,
    scope,
    typechecked,
)


def Z(*shape):
    """A float32 numpy array of the given shape."""
    return np.zeros(shape, np.float32)


def I(*shape):
    """An int32 numpy array of the given shape."""
    return np.zeros(shape, np.int32)


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
    from shardtypes.integrations.typeguard_hook import _lookup  # the entry registered in typeguard's list

    assert typeguard.checker_lookup_functions.count(_lookup) == 1
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
# Functions typeguard cannot instrument.

NO_SOURCE = '''
def generated_fn(x: f32[b"n m"], y: f32[b"n m"] = None, *, k: int = 0) -> f32[b"n m"]:
    z: f32[b"n"] = RESULT  # annotated local: not checked in the fallback
    return RESULT if RESULT is not None else x

async def generated_async(x: f32[b"n"]) -> f32[b"n"]:
    return x
'''


def _no_source_namespace(**extra):
    # __name__ names this module (so typeguard looks for the function here, and cannot find it).
    ns = {"f32": f32, "RESULT": None, "__name__": __name__, **extra}
    exec(compile(NO_SOURCE, "<string>", "exec"), ns)
    return ns


def test_no_source_function_warns_and_still_checks():
    ns = _no_source_namespace()
    with pytest.warns(ShardtypesWarning, match="cannot instrument .*generated_fn") as record:
        f = typechecked(ns["generated_fn"])
    message = str(record[0].message)
    assert "annotated local variables inside it, if any, are NOT checked" in message
    assert record[0].filename == __file__  # points at the decoration, not inside shardtypes

    # y=None is not an array; pass both
    assert f(Z(2, 3), Z(2, 3)).shape == (2, 3)
    assert f(x=Z(4, 3), y=Z(4, 3), k=1).shape == (4, 3)
    with pytest.raises(TypeCheckError, match=r'argument "x" \(numpy.ndarray\) of generated_fn\(\) is not '
                       + re.escape("f32[b'n m']: has dtype int32")):
        f(I(2, 3), Z(2, 3))
    with pytest.raises(TypeCheckError, match=re.escape(
        "dimension 'n' is 5 here (dim 0) but was bound to 2 by argument \"x\" of generated_fn()"
    )):
        f(Z(2, 3), Z(5, 3))
    with pytest.raises(TypeCheckError, match=r'argument "y" .*is not an array'):
        f(Z(2, 3))  # the default None is checked
    with pytest.raises(TypeCheckError, match=r'argument "k"'):
        f(Z(2, 3), Z(2, 3), k="one")
    assert dict(dims()) == {}
    assert f(Z(7, 3), Z(7, 3)).shape == (7, 3)  # no leak between calls


def test_no_source_function_return_value_is_checked():
    ns = _no_source_namespace()
    with pytest.warns(ShardtypesWarning):
        f = typechecked(ns["generated_fn"])
    ns["RESULT"] = Z(9, 3)
    with pytest.raises(TypeCheckError, match=r"the return value .*of generated_fn\(\).*dimension 'n' is 9 here"):
        f(Z(2, 3), Z(2, 3))
    ns["RESULT"] = I(2, 3)
    with pytest.raises(TypeCheckError, match=r"the return value .*has dtype int32"):
        f(Z(2, 3), Z(2, 3))
    ns["RESULT"] = Z(2, 3)
    assert f(Z(2, 3), Z(2, 3)) is ns["RESULT"]


def test_plain_typeguard_on_no_source_function_is_silent_about_it():
    # For contrast: plain typeguard only emits its own InstrumentationWarning and checks nothing.
    ns = _no_source_namespace()
    with pytest.warns(typeguard.InstrumentationWarning):
        g = typeguard.typechecked(ns["generated_fn"])
    assert g(I(2, 3), Z(2, 3)).shape == (2, 3)


def test_no_source_function_gives_shardtypes_warning_not_instrumentation_warning():
    ns = _no_source_namespace()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        typechecked(ns["generated_fn"])
    categories = [w.category for w in caught]
    assert ShardtypesWarning in categories
    assert typeguard.InstrumentationWarning not in categories  # replaced by the louder warning


def test_no_source_async_function_still_checks():
    ns = _no_source_namespace()
    with pytest.warns(ShardtypesWarning):
        f = typechecked(ns["generated_async"])
    with pytest.raises(TypeCheckError, match='argument "x"'):
        asyncio.run(f(I(2)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # the bug leaves a coroutine un-awaited
        try:
            result = asyncio.run(f(Z(2))).shape
        except TypeCheckError as e:
            result = str(e)
        gc.collect()
    assert result == (2,)


def test_no_source_function_without_module_name():
    ns = {"f32": f32}
    exec(compile("def g(x: f32[b'n']) -> f32[b'n']:\n    return x\n", "<string>", "exec"), ns)
    with pytest.warns(ShardtypesWarning):
        g = typechecked(ns["g"])
    with pytest.raises(TypeCheckError):
        g(I(2))


def test_no_source_function_with_unknown_module_name():
    ns = {"f32": f32, "__name__": "generated_module_not_imported"}
    exec(compile("def g(x: f32[b'n']) -> f32[b'n']:\n    return x\n", "<string>", "exec"), ns)
    with pytest.warns(ShardtypesWarning):
        g = typechecked(ns["g"])
    with pytest.raises(TypeCheckError):
        g(I(2))


def test_python_c_warns_where_python_keeps_no_source_and_still_checks():
    code = textwrap.dedent(
        """
        import warnings, numpy as np
        from typeguard import TypeCheckError
        import shardtypes
        from shardtypes import f32
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            @shardtypes.typechecked
            def f(x: f32[b"n"]) -> f32[b"n"]:
                return x
        print("warned", any(w.category is shardtypes.ShardtypesWarning for w in caught))
        import inspect
        try:
            print("source", bool(inspect.getsource(f).strip()))
        except OSError:
            print("source False")
        try:
            f(np.zeros(2, np.int32))
        except TypeCheckError:
            print("checked")
        """
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    # Python 3.13 keeps the source of `python -c` (inspect finds it): nothing to warn of there.
    has_source = "source True" in proc.stdout
    assert f"warned {not has_source}" in proc.stdout and "checked" in proc.stdout
    assert has_source == (sys.version_info >= (3, 13))


OPTIMIZED_SCRIPT = textwrap.dedent(
    '''
    import numpy as np
    from typeguard import TypeCheckError
    import shardtypes
    from shardtypes import f32

    assert not __debug__

    @shardtypes.typechecked
    def f(x: f32[b"n m"], y: f32[b"n m"]) -> f32[b"n m"]:
        return x

    @shardtypes.typechecked  # annotates a local: needs typeguard, which -O turns off
    def g(x: f32[b"n m"]) -> f32[b"n m"]:
        y: f32[b"n m"] = x
        return y

    print("ok g", g(np.zeros((2, 3), np.float32)).shape)
    try:
        g(np.zeros((2, 3), np.int32))
    except TypeCheckError as e:
        print("raised g:", e)
    print("ok", f(np.zeros((2, 3), np.float32), np.zeros((2, 3), np.float32)).shape)
    for args in [(np.zeros((2, 3), np.int32), np.zeros((2, 3), np.float32)),
                 (np.zeros((2, 3), np.float32), np.zeros((4, 3), np.float32))]:
        try:
            f(*args)
        except TypeCheckError as e:
            print("raised:", e)
        else:
            print("NOT CHECKED")
    '''
)


def test_python_O_still_checks_and_warns_about_locals(tmp_path):
    """Under -O typeguard instruments nothing. Arguments and return values are still checked (by
    the signature checker); a function that annotates locals gets a loud warning naming -O."""
    script = tmp_path / "optimized.py"
    script.write_text(OPTIMIZED_SCRIPT)
    env = dict(os.environ)
    env.pop("PYTHONWARNINGS", None)
    env.pop("PYTHONOPTIMIZE", None)
    proc = subprocess.run(
        [sys.executable, "-O", str(script)], capture_output=True, text=True, env=env, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.count("ShardtypesWarning") == 1, proc.stderr
    assert "-O" in proc.stderr and "cannot instrument __main__.g" in proc.stderr
    assert "annotated local variables inside it, if any, are NOT checked" in proc.stderr
    assert "ok g (2, 3)" in proc.stdout
    assert "raised g:" in proc.stdout and "has dtype int32" in proc.stdout
    assert "ok (2, 3)" in proc.stdout
    assert "NOT CHECKED" not in proc.stdout
    raised = [line for line in proc.stdout.splitlines() if line.startswith("raised:")]
    assert len(raised) == 2
    assert 'argument "x"' in raised[0] and "has dtype int32" in raised[0]
    assert "dimension 'n' is 4 here (dim 0) but was bound to 2 by argument \"x\" of f()" in raised[1]


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


# ---------------------------------------------------------------------------------------------
# Error messages: function, argument, annotation, what was found, where a clashing dim was bound.


@typechecked
def center(x: f32[b"batch embed"], bias: f32[b"embed"]) -> f32[b"batch embed"]:
    return x


def test_message_names_function_argument_annotation_found_and_origin():
    with pytest.raises(TypeCheckError) as info:
        center(Z(8, 16), Z(32))
    assert str(info.value) == (
        'argument "bias" (numpy.ndarray) of center() is not f32[b\'embed\']: '
        "dimension 'embed' is 32 here (dim 0) but was bound to 16 by argument \"x\" of center() "
        "(found float32[32] (numpy, on the host))"
    )


def test_message_for_wrong_dtype():
    with pytest.raises(TypeCheckError, match=re.escape(
        'argument "x" (numpy.ndarray) of center() is not f32[b\'batch embed\']: has dtype int32, '
        "the annotation wants float32 (found int32[8,16] (numpy, on the host))"
    )):
        center(I(8, 16), Z(16))


def test_message_for_wrong_rank_with_jax_array():
    with pytest.raises(TypeCheckError, match=re.escape(
        'argument "x" (jax.Array) of center() is not f32[b\'batch embed\']: has 3 dims [2,4,16] '
        "but the annotation has 2 (found float32[2,4,16] with SingleDeviceSharding)"
    )):
        center(jnp.zeros((2, 4, 16)), jnp.zeros((16,)))


def test_message_for_return_value():
    @typechecked
    def shrink(x: f32[b"batch embed"]) -> f32[b"batch embed"]:
        return x[:, :-1]

    with pytest.raises(TypeCheckError, match=re.escape(
        "the return value (numpy.ndarray) of test_message_for_return_value.<locals>.shrink() is not "
        "f32[b'batch embed']: dimension 'embed' is 15 here (dim 1) but was bound to 16 by argument \"x\" of "
        "test_message_for_return_value.<locals>.shrink() (found float32[8,15] (numpy, on the host))"
    )):
        shrink(Z(8, 16))


def test_message_for_local_and_local_origin():
    @typechecked
    def body(k: int) -> None:
        a: f32[b"m"] = Z(3)
        b: f32[b"m"] = Z(k)

    with pytest.raises(TypeCheckError, match=re.escape(
        "value assigned to b (numpy.ndarray) of test_message_for_local_and_local_origin.<locals>.body() "
        "is not f32[b'm']: dimension 'm' is 4 here (dim 0) but was bound to 3 by the value assigned to a of "
        "test_message_for_local_and_local_origin.<locals>.body()"
    )):
        body(4)


def test_message_origin_names_argument_inside_container():
    @typechecked
    def pairs(xs: tuple[f32[b"n"], f32[b"m"]], y: f32[b"n"]) -> None:
        pass

    with pytest.raises(TypeCheckError, match=re.escape(
        "dimension 'n' is 4 here (dim 0) but was bound to 2 by argument \"xs\" of "
        "test_message_origin_names_argument_inside_container.<locals>.pairs()"
    )):
        pairs((Z(2), Z(3)), Z(4))


def test_message_origin_survives_rebinding_the_argument():
    @typechecked
    def rebinds(x: f32[b"n"]) -> f32[b"n"]:
        x0 = x
        x = x * 2
        locals()
        return Z(5)

    with pytest.raises(TypeCheckError, match=re.escape('but was bound to 2 by argument "x" of')):
        rebinds(Z(2))


def test_message_names_caller_as_origin_in_callee_clash():
    @typechecked
    def outer(x: f32[b"batch embed"]) -> f32[b"batch embed"]:
        return center(x, Z(4))

    with pytest.raises(TypeCheckError, match=re.escape(
        'argument "bias" (numpy.ndarray) of center() is not f32[b\'embed\']: dimension \'embed\' is 4 here '
        '(dim 0) but was bound to 16 by argument "x" of '
        "test_message_names_caller_as_origin_in_callee_clash.<locals>.outer()"
    )):
        outer(Z(8, 16))


def test_message_names_scope_as_origin():
    with Scope(embed=8):
        with pytest.raises(TypeCheckError, match=re.escape(
            'argument "x" (numpy.ndarray) of center() is not f32[b\'batch embed\']: dimension \'embed\' is 16 '
            "here (dim 1) but was bound to 8 by Scope(embed=8)"
        )):
            center(Z(8, 16), Z(16))


def test_message_for_check_type_origin():
    with Scope():
        typeguard.check_type(Z(4), f32[b"embed"])
        with pytest.raises(TypeCheckError, match=re.escape(
            "numpy.ndarray is not f32[b'embed']: dimension 'embed' is 5 here (dim 0) but was bound to 4 "
            "by check_type() (found float32[5] (numpy, on the host))"
        )):
            typeguard.check_type(Z(5), f32["embed"])


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


def test_message_for_malformed_annotation():
    with pytest.raises(TypeCheckError, match=re.escape("has a malformed annotation f32")):
        typeguard.check_type(Z(2), types.GenericAlias(f32, (3,)))  # built around __class_getitem__


def test_shardtypes_exports_typecheckerror():
    assert shardtypes.TypeCheckError is TypeCheckError


def test_unresolvable_annotations_name_the_function(tmp_path):
    """A PEP 563 annotation naming something that never exists: a NameError at the first call
    (not at decoration, where a forward reference may still be defined later), naming who asked."""
    import importlib.util

    import shardtypes

    source = (
        "from __future__ import annotations\n"
        "import shardtypes\n"
        "@shardtypes.typechecked\n"
        "def f(x: Missing) -> None: ...\n"
        "def g(x: Missing) -> None: ...\n"
    )
    path = tmp_path / "unresolvable.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("unresolvable", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    with pytest.raises(NameError, match=r"shardtypes.typechecked cannot resolve the annotations of "
                                        r"unresolvable.f: NameError: name 'Missing' is not defined"):
        module.f(1)
    report = shardtypes.verify(module.g, {"d": 2})
    assert [p.kind for p in report.problems] == ["setup"]
    assert "verify cannot resolve the annotations of unresolvable.g" in str(report.problems[0])


# ---------------------------------------------------------------------------------------------
# FieldError: a public name, a message without a stray space, and it pickles.


@shardtypes.pytree_dataclass
class _Inner:
    embed: shardtypes.f32["vocab d"]


@shardtypes.pytree_dataclass
class _Outer:
    weights: _Inner


def test_field_error_is_public_and_reads_well_under_check_type():
    import copy
    import pickle

    bad = _Outer(_Inner(jnp.zeros((3, 4), jnp.bfloat16)))
    with pytest.raises(shardtypes.FieldError) as info:
        typeguard.check_type(bad, _Outer)
    e = info.value
    assert type(e).__module__ == "shardtypes" and type(e).__qualname__ == "FieldError"
    assert repr(type(e)) == "<class 'shardtypes.FieldError'>"
    assert str(e).startswith(f"{__name__}._Outer.weights.embed is not f32[b'vocab d']: has dtype bfloat16")
    assert e.fields == ["weights", "embed"]
    for again in (pickle.loads(pickle.dumps(e)), copy.deepcopy(e)):
        assert type(again) is shardtypes.FieldError
        assert str(again) == str(e) and again.fields == e.fields and again.core == e.core


def test_field_error_under_typechecked_names_the_argument_path():
    @typechecked
    def step(state: _Outer) -> None:
        pass

    with pytest.raises(shardtypes.FieldError,
                       match=r'argument "state" \(.*_Outer\) of .*step\(\): state\.weights\.embed is not'):
        step(_Outer(_Inner(jnp.zeros((3,), jnp.float32))))


@pytest.mark.parametrize("dtype, shape, message", [
    ("f32", "a", "check(): dtype must be a shardtypes dtype class (f32, floating, ...) or a numpy/JAX dtype"),
    (object, "a", "check(): dtype must be a shardtypes dtype class"),
    (shardtypes.f32[b"a"], "a b", "check(): dtype is the annotation shardtypes.f32[b'a'], which has a shape of its own"),
    (shardtypes.f32, 3, "check(): shape_spec must be a shape string ('batch embed') or a ShapeSpec, got 3"),
    (shardtypes.f32, None, "check(): shape_spec must be a shape string"),
])
def test_check_validates_its_arguments(dtype, shape, message):
    with pytest.raises(TypeError) as info:
        shardtypes.check(dtype, shape, np.zeros(3, np.float32))
    assert message in str(info.value)


def test_check_accepts_dtype_names_and_abstract_numpy_types():
    shardtypes.check("float32", "a", np.zeros(3, np.float32))
    shardtypes.check(np.floating, "a", np.zeros(3, np.float16))
    shardtypes.check(np.integer, "a", np.zeros(3, np.int8))
    with pytest.raises(TypeCheckError, match="the annotation wants any floating dtype"):
        shardtypes.check(np.floating, "a", np.zeros(3, np.int8))


@shardtypes.pytree_dataclass
class _Base:
    w: shardtypes.f32["a"]


@shardtypes.pytree_dataclass
class _Sub(_Base):
    v: shardtypes.f32["a"]


def test_subclass_of_a_pytree_dataclass_is_accepted_and_checked_whole():
    @typechecked
    def g(b: _Base) -> None:
        pass

    g(_Sub(jnp.zeros(3), jnp.zeros(3)))
    with pytest.raises(shardtypes.FieldError, match=r"b\.v is not f32\[b'a'\]: dimension 'a' is 4 here"):
        g(_Sub(jnp.zeros(3), jnp.zeros(4)))

    class Unregistered(_Base):
        pass

    with pytest.raises(TypeCheckError, match="Unregistered subclasses _Base but is not registered as a pytree: "
                                             "decorate it with @pytree_dataclass too"):
        g(Unregistered(jnp.zeros(3)))


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
    lines = result.stdout.splitlines()
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


# Issue 19: plain typeguard.typechecked names JAX's public classes in failures of shardtypes
# annotations (unions, dataclasses, Annotated's class check), and the function, as ours does.


def test_plain_typeguard_names_public_classes():
    import typing

    import jax
    import jax.numpy as jnp
    import numpy as np

    from shardtypes import f32, pytree_dataclass

    @pytree_dataclass
    class Box:
        w: f32[b"a b"]

    @typeguard.typechecked
    def opt(x: typing.Optional[f32[b"a b"]]) -> None:
        pass

    @typeguard.typechecked
    def bar(x: f32[b"a b"] | int) -> None:
        pass

    @typeguard.typechecked
    def boxed(x: Box) -> None:
        pass

    @typeguard.typechecked
    def annotated(x: typing.Annotated[jax.Array, f32[b"a"]]) -> None:
        pass

    cases = [
        (opt, jnp.ones(3), r"argument \"x\" \(jax\.Array\) of .*opt\(\) did not match any element in the union:\n"
                           r"  f32\[b'a b'\]: is not f32\[b'a b'\]: has 1 dim \[3\]"),
        (bar, jnp.ones(3), r"argument \"x\" \(jax\.Array\) of .*bar\(\) did not match any element in the union:\n"
                           r"  f32\[b'a b'\]: is not"),
        (boxed, jnp.ones(3), r"argument \"x\" \(jax\.Array\) of .*boxed\(\) is not an instance of .*Box \(found jax\.Array\)"),
        (annotated, np.ones(2, np.float32), r"argument \"x\" \(numpy\.ndarray\) of .*annotated\(\) is not an instance of jax\.Array$"),
    ]
    for fn, value, message in cases:
        with pytest.raises(TypeCheckError, match=message) as info:
            fn(value)
        assert "jaxlib" not in str(info.value) and "<class" not in str(info.value)
