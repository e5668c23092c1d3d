"""Dimension tables: one table per call, shared by nested calls, isolated by scopes, threads and
asyncio tasks, and never left dirty by a failed check (docs/design.md, "Dimension tables (scopes)").

The annotations here are unsharded: these tests are about tables, not layouts.
"""

import asyncio
import inspect
import re
import threading
from typing import Union

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import typeguard
from hypothesis import given, settings, strategies as st_
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P
from typeguard import TypeCheckError

from shardtypes import Scope, dims, f32, i32, scope, typechecked


def Z(*shape):
    """A float32 numpy array of the given shape."""
    return np.zeros(shape, np.float32)


# ---------------------------------------------------------------------------------------------
# One table per call: arguments, annotated locals and the return value.


@typechecked
def same_nm(x: f32[b"n m"], y: f32[b"n m"]) -> f32[b"n m"]:
    return x


@typechecked
def local_of_size(x: f32[b"n m"], k: int) -> f32[b"n m"]:
    z: f32[b"n"] = Z(k)
    return x


@typechecked
def returns_size(x: f32[b"n m"], k: int) -> f32[b"n m"]:
    return Z(k, x.shape[1])


@typechecked
def snapshot(x: f32[b"n m"]) -> dict:
    return dict(dims())


def test_arguments_share_one_table():
    assert same_nm(Z(3, 4), Z(3, 4)).shape == (3, 4)
    with pytest.raises(TypeCheckError, match=r"dimension 'n' is 5 here \(dim 0\) but was bound to 3"):
        same_nm(Z(3, 4), Z(5, 4))
    with pytest.raises(TypeCheckError, match=r"dimension 'm' is 2 here \(dim 1\) but was bound to 4"):
        same_nm(Z(3, 4), Z(3, 2))


def test_arguments_bind_what_dims_reads():
    assert snapshot(Z(3, 4)) == {"n": 3, "m": 4}


def test_annotated_local_shares_the_table():
    assert local_of_size(Z(3, 4), 3).shape == (3, 4)
    with pytest.raises(TypeCheckError, match=r"value assigned to z .*dimension 'n' is 2 here"):
        local_of_size(Z(3, 4), 2)


def test_return_value_shares_the_table():
    assert returns_size(Z(3, 4), 3).shape == (3, 4)
    with pytest.raises(TypeCheckError, match=r"the return value .*dimension 'n' is 7 here"):
        returns_size(Z(3, 4), 7)


@settings(max_examples=25, deadline=None)
@given(n=st_.integers(1, 6), m=st_.integers(1, 6), n2=st_.integers(1, 6))
def test_arguments_agree_iff_sizes_agree(n, m, n2):
    if n == n2:
        assert same_nm(Z(n, m), Z(n2, m)).shape == (n, m)
    else:
        with pytest.raises(TypeCheckError, match=f"dimension 'n' is {n2} here"):
            same_nm(Z(n, m), Z(n2, m))
    assert dict(dims()) == {}


def test_jax_arrays_share_the_table_too():
    assert same_nm(jnp.zeros((2, 3)), jnp.zeros((2, 3))).shape == (2, 3)
    with pytest.raises(TypeCheckError, match="dimension 'm' is 4 here"):
        same_nm(jnp.zeros((2, 3)), jnp.zeros((2, 4)))


# The same table semantics for every kind of value: host numpy, a single-device jax.Array, and a
# jax.Array replicated over a mesh (a NamedSharding; checked through the memoised fast path).


@pytest.fixture(params=["numpy", "jax", "replicated"])
def make(request):
    if request.param == "numpy":
        return Z
    if request.param == "jax":
        return lambda *shape: jnp.zeros(shape, jnp.float32)
    mesh = jax.make_mesh((8,), ("d",), axis_types=(AxisType.Explicit,))
    sharding = NamedSharding(mesh, P())
    return lambda *shape: jax.device_put(np.zeros(shape, np.float32), sharding)


@typechecked
def pair_then_local(x: f32[b"n m"], y: f32[b"n m"], z_value) -> f32[b"n m"]:
    z: f32[b"m n"] = z_value
    return x


def test_table_semantics_for_each_kind_of_value(make):
    for _ in range(2):  # the second round runs on memoised checks
        assert pair_then_local(make(3, 4), make(3, 4), make(4, 3)).shape == (3, 4)
        assert pair_then_local(make(5, 2), make(5, 2), make(2, 5)).shape == (5, 2)  # no leak
        assert dict(dims()) == {}
        with pytest.raises(TypeCheckError, match=r'argument "y" .*dimension \'n\' is 5 here .*bound to 3 by argument "x"'):
            pair_then_local(make(3, 4), make(5, 4), make(4, 3))
        with pytest.raises(TypeCheckError, match=r"value assigned to z .*dimension 'n' is 5 here .*bound to 3"):
            pair_then_local(make(3, 4), make(3, 4), make(4, 5))
        with Scope(n=3):
            assert pair_then_local(make(3, 4), make(3, 4), make(4, 3)).shape == (3, 4)
            assert dict(dims()) == {"n": 3, "m": 4}
            with pytest.raises(TypeCheckError, match=re.escape("bound to 3 by Scope(n=3)")):
                pair_then_local(make(5, 4), make(5, 4), make(4, 5))
        with Scope(m=9):
            with pytest.raises(TypeCheckError, match="dimension 'm' is 4 here"):
                typeguard.check_type(make(3, 4), f32[b"n m"])
            assert dict(dims()) == {"m": 9}  # 'n' was not left behind


def test_threads_are_isolated_for_each_kind_of_value(make):
    inside = threading.Barrier(2, timeout=20)
    xs = {n: make(n, 2) for n in (3, 5)}

    @typechecked
    def f(x: f32[b"n m"], y: f32[b"n m"]) -> f32[b"n m"]:
        inside.wait()
        return y

    errors = []

    def worker(n):
        try:
            for _ in range(30):
                assert f(xs[n], xs[n]).shape == (n, 2)
        except BaseException as e:  # reported below
            errors.append(e)
            inside.abort()

    threads = [threading.Thread(target=worker, args=(n,)) for n in xs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


# ---------------------------------------------------------------------------------------------
# Nested checked calls share the caller's table.


@typechecked
def callee_sees(x: f32[b"k"]) -> dict:
    return dict(dims())


@typechecked
def callee_nk(x: f32[b"n k"]) -> f32[b"k"]:
    return Z(x.shape[1])


def test_callee_sees_callers_bindings():
    @typechecked
    def caller(x: f32[b"n m"]) -> dict:
        return callee_sees(Z(7))

    assert caller(Z(3, 4)) == {"n": 3, "m": 4, "k": 7}


def test_callee_clash_with_caller_fails():
    @typechecked
    def caller(x: f32[b"n m"]) -> f32[b"k"]:
        return callee_nk(Z(5, 2))

    with pytest.raises(TypeCheckError) as info:
        caller(Z(3, 4))
    message = str(info.value)
    assert 'argument "x"' in message and "callee_nk()" in message
    assert "dimension 'n' is 5 here (dim 0) but was bound to 3" in message
    assert "caller()" in message  # where 'n' was bound


def test_callee_new_binding_is_visible_to_caller_afterwards():
    seen = {}

    @typechecked
    def caller(x: f32[b"n m"], k_local: int) -> f32[b"n"]:
        callee_nk(Z(x.shape[0], 7))
        seen.update(dims())
        w: f32[b"k"] = Z(k_local)
        return Z(x.shape[0])

    assert caller(Z(3, 4), 7).shape == (3,)
    assert seen == {"n": 3, "m": 4, "k": 7}
    with pytest.raises(TypeCheckError, match=r"value assigned to w .*dimension 'k' is 6 here .*bound to 7"):
        caller(Z(3, 4), 6)


def test_callee_return_shares_callers_table():
    @typechecked
    def callee(x: f32[b"k"]) -> f32[b"n"]:
        return Z(x.shape[0])  # 'n' is the caller's

    @typechecked
    def caller(x: f32[b"n"], k: int) -> f32[b"n"]:
        return callee(Z(k))

    assert caller(Z(3), 3).shape == (3,)
    with pytest.raises(TypeCheckError, match=r"the return value .*callee\(\).*dimension 'n' is 4 here"):
        caller(Z(3), 4)


# ---------------------------------------------------------------------------------------------
# @scope and `with Scope():` isolate.


@scope
@typechecked
def scoped_callee(x: f32[b"n"]) -> dict:
    return dict(dims())


def test_scope_decorator_isolates_callee():
    @typechecked
    def caller(x: f32[b"n"]) -> dict:
        inner = scoped_callee(Z(9))  # reuses 'n' with another size
        return {"inner": inner, "after": dict(dims())}

    assert caller(Z(3)) == {"inner": {"n": 9}, "after": {"n": 3}}


def test_with_scope_isolates_callee():
    @typechecked
    def caller(x: f32[b"n"]) -> dict:
        with Scope():
            inner = callee_nk(Z(11, 2))
            inside = dict(dims())
        return {"inside": inside, "after": dict(dims()), "inner": inner.shape}

    assert caller(Z(3)) == {"inside": {"n": 11, "k": 2}, "after": {"n": 3}, "inner": (2,)}


def test_without_scope_the_same_reuse_fails():
    @typechecked
    def caller(x: f32[b"n"]) -> dict:
        return callee_nk(Z(11, 2))

    with pytest.raises(TypeCheckError, match="dimension 'n' is 11 here"):
        caller(Z(3))


def test_scope_prebinds():
    with Scope(batch=8):
        assert dims()["batch"] == 8
        assert dict(dims()) == {"batch": 8}

        @typechecked
        def f(x: f32[b"batch"]) -> dict:
            return dict(dims())

        assert f(Z(8)) == {"batch": 8}
        with pytest.raises(TypeCheckError, match=re.escape("is 4 here (dim 0) but was bound to 8 by Scope(batch=8)")):
            f(Z(4))
        with pytest.raises(TypeCheckError, match=re.escape("by Scope(batch=8)")):
            typeguard.check_type(Z(2, 3), f32[b"batch e"])
    assert dict(dims()) == {}


def test_scope_prebinds_several_and_tuples():
    with Scope(b=2, rest=(3, 4)):
        assert dict(dims()) == {"b": 2, "rest": (3, 4)}
        typeguard.check_type(Z(2, 3, 4), f32[b"b *rest"])
        with pytest.raises(TypeCheckError, match="rest"):
            typeguard.check_type(Z(2, 3, 5), f32[b"b *rest"])


@pytest.mark.parametrize("bad", ["8", True, False, None])
def test_scope_rejects_bad_values(bad):
    with pytest.raises(TypeError, match=r"Scope\(batch=\.\.\.\)"):
        Scope(batch=bad)


def test_scope_rejects_float():
    with pytest.raises(TypeError):
        Scope(batch=2.5)


def test_scope_rejects_list():
    with pytest.raises(TypeError):
        Scope(batch=[1, 2])


def test_scope_accepts_numpy_int():
    with Scope(batch=np.int64(4)):
        typeguard.check_type(Z(4), f32[b"batch"])


def test_nested_scopes_restore_outer_table():
    assert dict(dims()) == {}
    with Scope(a=1):
        with Scope(b=2):
            assert dict(dims()) == {"b": 2}
            typeguard.check_type(Z(5), f32[b"c"])
            assert dict(dims()) == {"b": 2, "c": 5}
        assert dict(dims()) == {"a": 1}
        with Scope():
            assert dict(dims()) == {}
        assert dict(dims()) == {"a": 1}
    assert dict(dims()) == {}


def test_nested_scopes_restore_outer_table_on_exception():
    with Scope(a=1):
        with pytest.raises(RuntimeError, match="boom"):
            with Scope(b=2):
                typeguard.check_type(Z(5), f32[b"c"])
                raise RuntimeError("boom")
        assert dict(dims()) == {"a": 1}
        with pytest.raises(TypeCheckError):
            with Scope(b=2):
                typeguard.check_type(Z(3), f32[b"b"])
        assert dict(dims()) == {"a": 1}
    assert dict(dims()) == {}


def test_scope_decorator_restores_on_exception():
    @scope
    def boom():
        typeguard.check_type(Z(5), f32[b"c"])
        raise ValueError("inside")

    with Scope(a=1):
        with pytest.raises(ValueError, match="inside"):
            boom()
        assert dict(dims()) == {"a": 1}


def test_same_scope_object_reentered():
    s = Scope(a=1)
    with s:
        typeguard.check_type(Z(2), f32[b"x"])
        with s:
            assert dict(dims()) == {"a": 1}
        assert dict(dims()) == {"a": 1, "x": 2}
    assert dict(dims()) == {}


def test_scope_keeps_wraps_metadata():
    def kernel(x):
        """Kernel docs."""
        return x

    wrapped = scope(kernel)
    assert wrapped.__name__ == "kernel"
    assert wrapped.__doc__ == "Kernel docs."
    assert wrapped.__wrapped__ is kernel
    assert wrapped.__qualname__ == kernel.__qualname__
    assert wrapped(3) == 3


def test_scope_on_async_function():
    async def kernel(x):
        """Async kernel."""
        typeguard.check_type(Z(9), f32[b"n"])  # would clash with the outer n=3
        await asyncio.sleep(0)
        return dict(dims())

    wrapped = scope(kernel)
    assert inspect.iscoroutinefunction(wrapped)
    assert wrapped.__name__ == "kernel" and wrapped.__doc__ == "Async kernel."
    assert wrapped.__wrapped__ is kernel

    async def main():
        with Scope(n=3):
            inner = await wrapped(1)
            return inner, dict(dims())

    assert asyncio.run(main()) == ({"n": 9}, {"n": 3})


def test_scope_on_async_checked_function():
    @scope
    @typechecked
    async def kernel(x: f32[b"n"]) -> f32[b"n"]:
        await asyncio.sleep(0)
        return x

    async def main():
        with Scope(n=3):
            return (await kernel(Z(9))).shape, dict(dims())

    assert asyncio.run(main()) == ((9,), {"n": 3})


# ---------------------------------------------------------------------------------------------
# dims(): a read-only view, empty outside any call.


def test_dims_is_read_only():
    with pytest.raises(TypeError):
        dims()["batch"] = 3
    with Scope(batch=2):
        view = dims()
        with pytest.raises(TypeError):
            view["batch"] = 3
        with pytest.raises(TypeError):
            del view["batch"]
        assert dims()["batch"] == 2


def test_dims_read_only_inside_checked_call():
    @typechecked
    def f(x: f32[b"n"]) -> f32[b"n"]:
        with pytest.raises(TypeError):
            dims()["n"] = 99
        return Z(3)

    assert f(Z(3)).shape == (3,)


def test_dims_empty_outside_any_call():
    assert dict(dims()) == {}
    assert "n" not in dims()
    with pytest.raises(KeyError):
        dims()["n"]


def test_top_level_calls_never_leak():
    assert same_nm(Z(3, 4), Z(3, 4)).shape == (3, 4)
    assert dict(dims()) == {}
    assert same_nm(Z(5, 2), Z(5, 2)).shape == (5, 2)
    assert dict(dims()) == {}
    assert snapshot(Z(1, 1)) == {"n": 1, "m": 1}
    assert dict(dims()) == {}


def test_failed_top_level_call_does_not_leak():
    with pytest.raises(TypeCheckError):
        same_nm(Z(3, 4), Z(5, 4))
    assert dict(dims()) == {}
    assert same_nm(Z(5, 4), Z(5, 4)).shape == (5, 4)


# ---------------------------------------------------------------------------------------------
# Threads and asyncio tasks are isolated.


def test_threads_are_isolated():
    rounds = 100
    start = threading.Barrier(2, timeout=20)
    inside = threading.Barrier(2, timeout=20)

    @typechecked
    def f(x: f32[b"n m"], y: f32[b"n m"]) -> f32[b"n m"]:
        inside.wait()  # both threads have bound 'n' (to different sizes) at once
        z: f32[b"n m"] = y
        return x

    errors = []

    def worker(n):
        try:
            for _ in range(rounds):
                start.wait()
                assert f(Z(n, 2), Z(n, 2)).shape == (n, 2)
                assert dict(dims()) == {}
        except BaseException as e:  # reported below
            errors.append(e)
            start.abort()
            inside.abort()

    threads = [threading.Thread(target=worker, args=(n,)) for n in (3, 5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def test_threads_inside_scope_do_not_see_it():
    results = {}

    def worker():
        results["dims"] = dict(dims())
        results["call"] = snapshot(Z(2, 2))

    with Scope(n=7):
        t = threading.Thread(target=worker)
        t.start()
        t.join()
        assert dict(dims()) == {"n": 7}
    # A new thread starts with an empty context: no table from the thread that started it.
    assert results == {"dims": {}, "call": {"n": 2, "m": 2}}


def test_asyncio_tasks_inside_one_scope_are_isolated():
    async def worker(name, other, size):
        typeguard.check_type(Z(size), f32[name.encode()])
        for _ in range(5):
            await asyncio.sleep(0)
            current = dict(dims())
            assert current == {"base": 1, name: size}, current
            assert other not in current
            typeguard.check_type(Z(size, 1), f32[(name + " base").encode()])
        return dict(dims())

    async def main():
        with Scope(base=1):
            got = await asyncio.gather(worker("a", "b", 3), worker("b", "a", 5))
            return got, dict(dims())

    got, after = asyncio.run(main())
    assert got == [{"base": 1, "a": 3}, {"base": 1, "b": 5}]
    assert after == {"base": 1}  # tasks never write into their parent's table


def test_asyncio_checked_calls_with_different_sizes_are_isolated():
    @typechecked
    async def f(x: f32[b"n"], y: f32[b"n"]) -> f32[b"n"]:
        await asyncio.sleep(0)
        z: f32[b"n"] = y
        await asyncio.sleep(0)
        return x

    async def main():
        for _ in range(20):
            outs = await asyncio.gather(f(Z(3), Z(3)), f(Z(5), Z(5)))
            assert [o.shape for o in outs] == [(3,), (5,)]
        with Scope():  # in one scope, each task inherits the table; siblings still isolated
            outs = await asyncio.gather(f(Z(3), Z(3)), f(Z(5), Z(5)))
            assert [o.shape for o in outs] == [(3,), (5,)]
            assert dict(dims()) == {}
        with pytest.raises(TypeCheckError, match="dimension 'n' is 4 here"):
            await f(Z(3), Z(4))
        return dict(dims())

    assert asyncio.run(main()) == {}


# ---------------------------------------------------------------------------------------------
# A failed check leaves nothing behind.


def test_failed_dtype_check_binds_nothing():
    with Scope():
        with pytest.raises(TypeCheckError, match="has dtype int32"):
            typeguard.check_type(np.zeros((3, 4), np.int32), f32[b"a b"])
        assert dict(dims()) == {}
        typeguard.check_type(Z(5, 4), f32[b"a b"])  # 'a' was not bound to 3
        assert dict(dims()) == {"a": 5, "b": 4}


def test_failed_size_check_binds_nothing():
    with Scope(b=5):
        with pytest.raises(TypeCheckError, match="dimension 'b' is 4 here"):
            typeguard.check_type(Z(3, 4), f32[b"a b"])  # 'a' would bind to 3 first
        assert dict(dims()) == {"b": 5}
        typeguard.check_type(Z(7, 5), f32[b"a b"])
        assert dict(dims()) == {"b": 5, "a": 7}


def test_failed_rank_check_binds_nothing():
    with Scope():
        with pytest.raises(TypeCheckError, match="has 3 dims"):
            typeguard.check_type(Z(3, 4, 5), f32[b"a b"])
        assert dict(dims()) == {}


def test_failed_union_branch_binds_nothing():
    with Scope():
        typeguard.check_type(Z(3, 4), Union[i32[b"a b"], f32[b"c d"]])
        assert dict(dims()) == {"c": 3, "d": 4}
    with Scope(q=9):
        # first branch binds 'a' then fails on 'q'; second branch passes
        typeguard.check_type(Z(3, 4), Union[f32[b"a q"], f32[b"c d"]])
        assert dict(dims()) == {"q": 9, "c": 3, "d": 4}


def test_failed_union_branch_binds_nothing_in_checked_function():
    @typechecked
    def f(x: Union[i32[b"a"], f32[b"x"]], w: f32[b"a"]) -> dict:
        return dict(dims())

    assert f(Z(3), Z(5)) == {"x": 3, "a": 5}


def test_failed_tuple_check_binds_nothing():
    with Scope():
        with pytest.raises(TypeCheckError, match="item 1"):
            typeguard.check_type((Z(3), Z(4)), tuple[f32[b"a"], i32[b"b"]])
        assert dict(dims()) == {}


def test_failed_union_tuple_branch_binds_nothing():
    with Scope():
        typeguard.check_type(
            (Z(3), Z(4)), Union[tuple[f32[b"a"], i32[b"b"]], tuple[f32[b"x"], f32[b"y"]]]
        )
        assert dict(dims()) == {"x": 3, "y": 4}


def test_failed_union_tuple_branch_binds_nothing_in_checked_function():
    @typechecked
    def f(x: Union[tuple[f32[b"a"], i32[b"b"]], tuple[f32[b"x"], f32[b"y"]]], w: f32[b"a"]) -> dict:
        return dict(dims())

    assert f((Z(3), Z(4)), Z(5)) == {"x": 3, "y": 4, "a": 5}


def test_failed_check_in_callee_inside_scope_keeps_caller_table_usable():
    with Scope(n=3):
        with pytest.raises(TypeCheckError):
            callee_nk(np.zeros((3, 2), np.int32))  # dtype fails before anything binds
        assert dict(dims()) == {"n": 3}
        assert callee_nk(Z(3, 2)).shape == (2,)
        assert dict(dims()) == {"n": 3, "k": 2}


def test_one_scope_object_shared_by_threads():
    shared = Scope(batch=8)
    errors = []

    def work():
        try:
            for _ in range(300):
                with shared:
                    assert dims()["batch"] == 8
        except Exception as e:  # noqa: BLE001 - collected for the assertion below
            errors.append(e)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert dict(dims()) == {}


def test_scope_on_a_generator_covers_its_body():
    @scope
    def numbers():
        yield dict(dims())

    with Scope(batch=8):
        assert list(numbers()) == [{}]
        assert dims()["batch"] == 8


# ---------------------------------------------------------------------------------------------
# jit's cache never changes a verdict.


@typechecked
def _batch_vector(x: f32[b"batch"]) -> f32[b"batch"]:
    return x + 1


def test_scope_bindings_are_part_of_jits_cache_key():
    f = jax.jit(_batch_vector)
    x = jnp.zeros(4)
    f(x)  # traced outside any Scope
    with Scope(batch=8):
        with pytest.raises(TypeCheckError, match=r"dimension 'batch' is 4 here .*but was bound to 8 by Scope\(batch=8\)"):
            f(x)
        with pytest.raises(TypeCheckError, match="bound to 8"):
            f(x)  # the same verdict the second time
    with Scope(batch=4):
        f(x)
    f(x)  # and outside again


def test_scope_rejection_first_then_outside():
    f = jax.jit(_batch_vector)
    x = jnp.zeros(3)
    with Scope(batch=8), pytest.raises(TypeCheckError):
        f(x)
    f(x)
    with Scope(batch=8), pytest.raises(TypeCheckError):
        f(x)


@typechecked
def _hidden_callee(x: f32[b"hidden"]) -> f32[b"hidden"]:
    return x * 2


_jitted_callee = jax.jit(_hidden_callee)


@typechecked
def _caller_needing_callee_bindings(x: f32[b"n"]) -> f32[b"hidden+1"]:
    return jnp.concatenate([_jitted_callee(x), jnp.zeros(1)])


@typechecked
def _caller_with_other_size(x: f32[b"hidden"]) -> f32[b""]:
    return jnp.sum(_jitted_callee(jnp.zeros(x.shape[0] + 1)))


def test_jitted_callee_bindings_do_not_reach_an_eager_caller():
    """The same answer on every call: names a jitted callee binds end with its trace."""
    for _ in range(3):
        with pytest.raises(TypeCheckError, match="uses 'hidden', which no argument has bound yet"):
            _caller_needing_callee_bindings(jnp.zeros(4))


def test_jitted_callee_starts_from_the_scope_not_the_eager_call():
    """A jitted callee checks against its own table (and the Scope's, which jit's key covers),
    not against the eager caller's bindings, which a cached trace would not see."""
    for _ in range(3):
        assert float(_caller_with_other_size(jnp.zeros(4))) == 0.0
    with Scope(hidden=5):
        with pytest.raises(TypeCheckError, match=r"dimension 'hidden' is 4 here .*but was bound to 5 by Scope"):
            _caller_with_other_size(jnp.zeros(4))


@jax.jit
@typechecked
def _jitted_inner(y: f32[b"n"]) -> f32[b"n"]:
    return y * 2


@jax.jit
@typechecked
def _outer_same(x: f32[b"n"]) -> f32[b"n"]:
    return _jitted_inner(x)


@jax.jit
@typechecked
def _outer_mismatch(x: f32[b"n"], y: f32[b"m"]) -> f32[b"m"]:
    return _jitted_inner(y)  # 'n' is x's size here, and y is not that long


def test_a_jitted_callee_in_a_trace_is_checked_against_that_trace_whatever_ran_before():
    """A jitted checked function called inside a staged checked call is traced for that call:
    a trace made inside another caller (same shapes, another table) is not reused, so the
    verdict never depends on what ran before."""
    message = r"dimension 'n' is 4 here .*bound to 3 by argument \"x\""
    with pytest.raises(TypeCheckError, match=message):
        _outer_mismatch(jnp.zeros(3), jnp.zeros(4))
    assert _outer_same(jnp.zeros(4)).shape == (4,)   # _jitted_inner traced with a 4-long y
    with pytest.raises(TypeCheckError, match=message):
        _outer_mismatch(jnp.zeros(3), jnp.zeros(4))
    assert _outer_same(jnp.zeros(4)).shape == (4,)


def test_a_jitted_callee_binds_into_each_tracing_caller():
    """What a jitted callee binds reaches every caller that traces it, not only the first."""

    @jax.jit
    @typechecked
    def widen(x: f32[b"n"]) -> f32[b"wide"]:
        return jnp.concatenate([x, x])

    def caller():
        @jax.jit
        @typechecked
        def uses_wide(x: f32[b"n"]) -> f32[b"wide+1"]:
            return jnp.concatenate([widen(x), jnp.zeros(1)])
        return uses_wide

    for _ in range(3):  # a new caller each time, the callee's trace cached by shape
        assert caller()(jnp.zeros(3)).shape == (7,)


def test_an_eager_transformation_reuses_jitted_traces_inside():
    """Under jax.grad without jit the checked body runs on every call; jitted functions inside
    it (its own and jax.numpy's) keep their traces, or every call would compile again."""
    traces = []

    @jax.jit
    @typechecked
    def inner(y: f32[b"n"]) -> f32[b"n"]:
        traces.append(1)
        return jnp.sin(y)

    @typechecked
    def loss(x: f32[b"n"]) -> f32[b""]:
        return jnp.sum(inner(x))

    for _ in range(3):
        jax.grad(loss)(jnp.ones(4))
    assert len(traces) == 1


def test_nested_checked_calls_inside_one_trace_share_the_table():
    @jax.jit
    @typechecked
    def outer(x: f32[b"n"]) -> f32[b"n+1"]:
        return jnp.concatenate([_hidden_callee(x), jnp.zeros(1)])

    @jax.jit
    @typechecked
    def outer_wrong(x: f32[b"n"]) -> f32[b"hidden+1"]:
        return jnp.concatenate([_hidden_callee(x), jnp.zeros(1)])

    assert outer(jnp.zeros(3)).shape == (4,)
    assert outer_wrong(jnp.zeros(3)).shape == (4,)  # 'hidden' bound by the nested callee


def test_scope_exited_out_of_order_is_an_error():
    a, b = Scope(a=1), Scope(b=2)
    a.__enter__()
    b.__enter__()
    with pytest.raises(RuntimeError, match=r"Scope exited out of order: 1 Scope\(s\) entered after it"):
        a.__exit__(None, None, None)
    assert dict(dims()) == {}  # as before either Scope (issue 19): b's sizes are not left behind
    with pytest.raises(RuntimeError, match="this Scope is not open here"):
        b.__exit__(None, None, None)
    with pytest.raises(RuntimeError, match="this Scope is not open here"):
        a.__exit__(None, None, None)
    assert dict(dims()) == {}
    with Scope(c=3):  # the context still works
        assert dict(dims()) == {"c": 3}
    assert dict(dims()) == {}


def test_scope_exited_out_of_order_inside_an_outer_scope_restores_the_outer_one():
    with Scope(outer=5):
        a, b = Scope(a=1), Scope(b=2)
        a.__enter__()
        b.__enter__()
        with pytest.raises(RuntimeError, match="out of order"):
            a.__exit__(None, None, None)
        assert dict(dims()) == {"outer": 5}
    assert dict(dims()) == {}


def test_generators_holding_scopes_across_yields_interleaved_leave_nothing_behind():
    def gen(name, size):
        with Scope(**{name: size}):
            yield dict(dims())
            yield dict(dims())

    g1, g2 = gen("a", 1), gen("b", 2)
    assert next(g1) == {"a": 1}
    assert next(g2) == {"b": 2}
    next(g1)
    with pytest.raises(RuntimeError, match="out of order"):
        next(g1)  # g1 leaves its Scope while g2's is still open
    assert dict(dims()) == {}
    next(g2)
    with pytest.raises(RuntimeError, match="this Scope is not open here"):
        next(g2)
    assert dict(dims()) == {}


def test_a_scope_leaves_nothing_behind_in_the_context():
    """Scopes (and @scope calls) leave the context as they found it: a long loop of them must not
    grow it (it did, one variable per Scope, slowing every later Scope)."""
    import contextvars

    @scope
    def step():
        return dict(dims())

    with Scope():   # every variable shardtypes uses is in the context now
        step()
    before = len(contextvars.copy_context())
    for i in range(200):
        with Scope(i=i):
            assert dims()["i"] == i
        step()
    assert len(contextvars.copy_context()) == before


def test_one_scope_object_entered_twice_exits_in_order():
    s = Scope(a=1)
    with s:
        with s:
            assert dims()["a"] == 1
        assert dims()["a"] == 1
    assert dict(dims()) == {}


# ---------------------------------------------------------------------------------------------
# Generators keep their call's table across resumptions.


def test_generator_yields_are_checked_against_the_calls_sizes():
    from typing import Iterator

    @typechecked
    def rows(x: f32[b"n m"]) -> Iterator[f32[b"m"]]:
        assert dims()["n"] == x.shape[0] and dims()["m"] == x.shape[1]
        for row in x:
            yield row
            assert dict(dims()) == {"n": x.shape[0], "m": x.shape[1]}  # after resumption too
        yield jnp.zeros(x.shape[1] + 1)  # wrong size for 'm'

    gen = rows(jnp.zeros((2, 3)))
    assert [r.shape for r in (next(gen), next(gen))] == [(3,), (3,)]
    with pytest.raises(TypeCheckError, match="dimension 'm' is 4 here .*but was bound to 3"):
        next(gen)


def test_generator_send_throw_close():
    from typing import Generator

    @typechecked
    def echo(x: f32[b"n"]) -> Generator[f32[b"n"], f32[b"n"], int]:
        got = yield x
        try:
            got = yield got
        except KeyError:
            yield x * 2
        return 7

    gen = echo(jnp.zeros(2))
    next(gen)
    assert gen.send(jnp.ones(2)).shape == (2,)
    assert float(gen.throw(KeyError())[0]) == 0.0
    with pytest.raises(StopIteration) as stop:
        gen.send(jnp.ones(2))
    assert stop.value.value == 7
    gen2 = echo(jnp.zeros(2))
    next(gen2)
    with pytest.raises(TypeCheckError, match="dimension 'n' is 3 here .*but was bound to 2"):
        gen2.send(jnp.ones(3))
    gen3 = echo(jnp.zeros(2))
    next(gen3)
    gen3.close()


def test_async_generator_keeps_its_table():
    from typing import AsyncIterator

    @typechecked
    async def rows(x: f32[b"n m"]) -> AsyncIterator[f32[b"m"]]:
        for row in x:
            yield row
        yield jnp.zeros(x.shape[1] + 1)

    async def collect():
        out = []
        async for r in rows(jnp.zeros((2, 3))):
            out.append(r.shape)
        return out

    with pytest.raises(TypeCheckError, match="dimension 'm' is 4 here .*but was bound to 3"):
        asyncio.run(collect())


@pytest.mark.parametrize("bindings, error, message", [
    ({"a": -1}, ValueError, "Scope(a=...): a size cannot be negative, got -1"),
    ({"a": (2, -3)}, ValueError, "a size cannot be negative"),
    ({"a b": 3}, ValueError, "Scope('a b'=...): a dimension name is an identifier other than '_'"),
    ({"_": 3}, ValueError, "Scope('_'=...)"),
    ({"1a": 3}, ValueError, "Scope('1a'=...)"),
    ({"a": "x"}, TypeError, "Scope(a=...) must be an int size"),
    ({"a": 2.0}, TypeError, "Scope(a=...) must be an int size"),
    ({"a": True}, TypeError, "Scope(a=...) must be an int size"),
])
def test_scope_validates_its_bindings(bindings, error, message):
    with pytest.raises(error) as info:
        Scope(**bindings)
    assert message in str(info.value)
