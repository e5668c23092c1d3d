"""shardtypes.typechecked instruments functions whose annotations write shapes as str: typeguard
would read f32['batch'] as a forward reference (a NameError at the call) and f32['batch embed']
as a syntax error, so the shapes are handed to it as bytes."""

import re
import warnings
from typing import AsyncIterator, Generator, Iterator

import jax.numpy as jnp
import numpy as np
import pytest
from typeguard import TypeCheckError

from shardtypes import Array, Scope, ShardtypesWarning, Stacked, dims, f32, pytree_dataclass, typechecked
from shardtypes.language import CHECK_FAILED


@pytree_dataclass
class Layer:
    w: f32["embed hidden"]


def ones(*shape, dtype=np.float32):
    return np.ones(shape, dtype)


def test_one_word_and_several_word_shapes_in_the_signature_and_locals():
    with warnings.catch_warnings():
        warnings.simplefilter("error", ShardtypesWarning)  # instrumented: no fallback warning

        @typechecked
        def f(x: f32["batch"], m: f32["batch embed"]) -> f32["batch"]:
            y: f32["batch"] = x * 2
            z: f32["batch embed"] = m + y[:, None]
            return z.sum(-1)

    assert f(ones(2), ones(2, 3)).shape == (2,)
    with pytest.raises(TypeCheckError, match=r"argument \"m\" .* is not f32\[b'batch embed'\]"):
        f(ones(2), ones(3, 3))


def test_a_wrong_local_is_caught_with_a_str_shape():
    @typechecked
    def f(x: f32["batch"]) -> f32["batch"]:
        y: f32["batch embed"] = x * 2  # one dim, not two
        return y

    with pytest.raises(TypeCheckError, match=r"value assigned to y .* of .*f\(\) is not f32\[b'batch embed'\]: has 1 dim"):
        f(ones(2))


def test_sizes_bind_across_the_signature_and_str_locals():
    @typechecked
    def f(x: f32["batch embed"]) -> f32["batch"]:
        y: f32["embed"] = x[0]
        bad: f32["batch"] = y  # 'batch' is 2, y has 'embed' = 3
        return bad

    with pytest.raises(TypeCheckError, match="dimension 'batch' is 3 here"):
        f(ones(2, 3))


def test_stacked_axes_and_dtypes_by_attribute():
    import shardtypes

    @typechecked
    def f(layers: Array["layers", Layer], ids: shardtypes.i32["n"]) -> shardtypes.f32["layers"]:
        first: Stacked[Layer, "layers"] = layers
        total: Array["layers", Layer] = first
        count: shardtypes.i32["n"] = ids
        assert count.shape == ids.shape
        return total.w.sum((1, 2))

    layers = Layer(w=ones(4, 2, 3))
    assert f(layers, ones(5, dtype=np.int32)).shape == (4,)
    with pytest.raises(TypeCheckError, match="i32"):
        f(layers, ones(5))


def test_generators_with_str_shapes_check_their_yields():
    @typechecked
    def gen(x: f32["batch"]) -> Iterator[f32["batch"]]:
        yield x
        yield jnp.ones(x.shape[0] + 1)

    it = gen(ones(1))
    assert next(it).shape == (1,)
    with pytest.raises(TypeCheckError, match="dimension 'batch' is 2 here"):
        next(it)


def test_methods_and_defaults_keep_working():
    class Model:
        @typechecked
        def apply(self, x: f32["batch"], scale: float = 2.0, *, shift: float = 0.0) -> f32["batch"]:
            y: f32["batch"] = x * scale + shift
            return y

    m = Model()
    assert float(m.apply(ones(2))[0]) == 2.0
    assert float(m.apply(ones(2), shift=1.0)[0]) == 3.0
    assert Model.apply.__name__ == "apply"


def test_a_str_that_is_not_a_shape_is_left_to_typeguard():
    @typechecked
    def f(x: f32["batch"], n: "int") -> f32["batch"]:
        k: "int" = n + 1
        y: f32["batch"] = x * k
        return y

    assert f(ones(2), 1).shape == (2,)
    with pytest.raises(TypeCheckError, match=r"argument \"n\" \(str\) of .*f\(\) is not an instance of int"):
        f(ones(2), "1")


def test_an_alias_assigned_in_an_enclosing_function_is_never_waved_through():
    """typeguard drops annotations naming a variable assigned in an enclosing function, so its
    instrumented function would check nothing: the signature is checked instead, with a warning
    that the locals are not."""

    def outer():
        F = f32

        @typechecked
        def f(x: F["batch"]) -> F["batch"]:
            y: F["batch"] = x
            return y

        return f

    with pytest.warns(ShardtypesWarning, match="typeguard dropped its checks.*annotated local variables inside it, if any, are NOT checked"):
        f = outer()
    assert f(ones(2)).shape == (2,)
    with pytest.raises(TypeCheckError, match=r"argument \"x\" .* is not f32\[b'batch'\]: has dtype int32"):
        f(ones(2, dtype=np.int32))


def test_annotations_naming_an_enclosing_functions_parameter_are_checked():
    def outer(F):
        @typechecked
        def f(x: F["batch"]) -> F["batch"]:
            y: F["batch"] = x
            return y

        return f

    with warnings.catch_warnings():
        warnings.simplefilter("error", ShardtypesWarning)
        f = outer(f32)
    assert f(ones(2)).shape == (2,)
    with pytest.raises(TypeCheckError, match="has dtype int32"):
        f(ones(2, dtype=np.int32))


def test_two_checked_helpers_with_str_shapes_in_one_function():
    """Issue 19, item 1: decorating the second helper made typeguard re-read the enclosing
    function, where the first helper's 'batch embed' was still a str (a SyntaxError)."""

    @typechecked
    def first(x: f32["batch embed"]) -> f32["batch embed"]:
        y: f32["batch embed"] = x
        return y

    @typechecked
    def second(x: f32["batch embed"]) -> f32["batch"]:
        z: f32["batch embed"] = x.sum(-1)
        return z

    assert first(ones(2, 3)).shape == (2, 3)
    with pytest.raises(TypeCheckError, match=r"value assigned to z .* is not f32\[b'batch embed'\]: has 1 dim"):
        second(ones(2, 3))


def _generators_naming_an_enclosing_alias():
    F = f32

    @typechecked
    def gen(x: F["n"]) -> Generator[F["n"], F["n"], F["n"]]:
        received = yield x
        yield received
        yield jnp.zeros(7)
        return x  # (never reached)

    @typechecked
    async def agen(x: F["n"]) -> AsyncIterator[F["n"]]:
        yield x
        yield jnp.zeros(7)

    return gen, agen


def test_a_generator_checked_from_its_signature_checks_its_yields_sends_and_return():
    """Issue 19, item 7: a generator typeguard cannot instrument (an annotation naming a variable
    of the enclosing function) had its yields unchecked, and bound into its caller's table."""
    with pytest.warns(ShardtypesWarning, match=r"gen \(typeguard dropped its checks.*Its arguments and its yielded, sent and returned values are checked"):
        gen, _ = _generators_naming_an_enclosing_alias()
    it = gen(ones(3))
    assert next(it).shape == (3,)
    assert it.send(ones(3)).shape == (3,)  # a sent value of the bound size passes
    with pytest.raises(TypeCheckError, match=r"the yielded value \(jax.Array\) of .*gen\(\) is not f32\[b'n'\]: dimension 'n' is 7 here"):
        it.send(ones(3))

    it = gen(ones(3))
    next(it)
    with pytest.raises(TypeCheckError, match=r"the value sent to generator \(numpy.ndarray\) of .*gen\(\) is not f32\[b'n'\]: dimension 'n' is 2 here"):
        it.send(ones(2))

    with pytest.raises(TypeCheckError, match=r'argument "x" .* of .*gen\(\) is not f32'):
        gen(ones(2, 2))  # the arguments are checked when the generator is made

    with Scope(m=5):
        it = gen(ones(3))
        next(it)
        assert dict(dims()) == {"m": 5}  # the generator's 'n' stays in its own table


def test_an_async_generator_checked_from_its_signature_checks_its_yields():
    import asyncio

    with pytest.warns(ShardtypesWarning):
        _, agen = _generators_naming_an_enclosing_alias()

    async def consume():
        it = agen(ones(3))
        assert (await it.__anext__()).shape == (3,)
        await it.__anext__()

    with pytest.raises(TypeCheckError, match=r"yielded value .* is not f32\[b'n'\]: dimension 'n' is 7 here"):
        asyncio.run(consume())


@typechecked
def _instrumented_pair(x: f32[b"a"]) -> tuple[f32[b"a"], f32[b"a"]]:
    y: f32[b"a"] = x
    return y  # not a tuple


@typechecked
def _instrumented_rows(x: f32[b"a"]) -> Iterator[tuple[f32[b"a"]]]:
    yield x  # not a tuple


@pytest.mark.parametrize("jit", [False, True])
def test_typeguards_own_failures_in_an_instrumented_function_name_it(jit):
    """Issue 19, item 2, where typeguard instruments the function (annotated locals)."""
    import jax

    call = jax.jit(_instrumented_pair) if jit else _instrumented_pair
    found = "traced jax.Array" if jit else "jax.Array"
    with pytest.raises(TypeCheckError) as info:
        call(jnp.zeros(3))
    assert str(info.value) == f"the return value ({found}) of _instrumented_pair() is not a tuple\n{CHECK_FAILED.line}"
    with pytest.raises(TypeCheckError, match=r"^the yielded value \(jax.Array\) of _instrumented_rows\(\) is not a tuple\n"
                       + re.escape(CHECK_FAILED.line) + "$"):
        next(_instrumented_rows(jnp.zeros(3)))


# typing.no_type_check: its annotations are not types, above or below the decorator.

def _no_type_check_cases():
    import typing

    @typing.no_type_check
    @typechecked
    def above(x: f32[b"a"]) -> f32[b"a"]:
        return x

    @typechecked
    @typing.no_type_check
    def below(x: f32[b"a"]) -> f32[b"a"]:
        return x

    @typing.no_type_check
    @typechecked
    def with_local(x: f32["a"]) -> f32["a"]:
        y: f32["a b"] = x
        return y

    @typing.no_type_check
    @typechecked
    def generator(x: f32[b"a"]) -> Iterator[f32[b"a"]]:
        yield x

    @typing.no_type_check
    @typechecked
    class Layer:
        def apply(self, x: f32[b"a"]) -> f32[b"a"]:
            return x

    return above, below, with_local, (lambda x: list(generator(x))), Layer().apply


@pytest.mark.parametrize("index", range(5))
def test_no_type_check_turns_the_checks_off(index):
    fn = _no_type_check_cases()[index]
    fn(jnp.zeros((2, 3)))  # rank 2 where the annotations say rank 1: unchecked, so it passes


def test_no_type_check_leaves_other_checked_functions_checked():
    _no_type_check_cases()

    @typechecked
    def checked(x: f32[b"a"]) -> f32[b"a"]:
        return x

    with pytest.raises(TypeCheckError, match=r'argument "x" .* of .*checked\(\) is not f32\[b\'a\'\]'):
        checked(jnp.zeros((2, 3)))


def test_a_generator_beside_a_helper_with_a_str_shaped_local_is_instrumented():
    # typeguard re-reads the module to instrument the generator, and met the helper's 'a b' as
    # a str (a syntax error to it): the generator fell back to its signature, with a warning.
    with warnings.catch_warnings():
        warnings.simplefilter("error")

        @typechecked
        def helper(x: f32["a"]) -> f32["a"]:
            y: f32["a b"] = x[:, None]
            return y[:, 0]

        @typechecked
        def generator(x: f32[b"a"]) -> Iterator[f32[b"a"]]:
            z: f32[b"a"] = x + 1
            yield z

    assert list(generator(jnp.zeros(3)))[0].shape == (3,)
    with pytest.raises(TypeCheckError, match=r'argument "x" .* of .*generator\(\) is not f32\[b\'a\'\]'):
        next(generator(jnp.zeros((2, 3))))


def test_no_type_check_below_returns_the_function_and_binds_nothing():
    import typing

    @typing.no_type_check
    def below(x: f32[b"batch"]) -> f32[b"batch"]:
        return x

    assert typechecked(below) is below

    @typing.no_type_check
    @typechecked
    def above(x: f32[b"batch"]) -> f32[b"batch"]:
        return x

    @typechecked
    def caller(x: f32[b"batch"]) -> f32[b"batch"]:
        above(jnp.zeros(5))  # binds nothing in the caller's table
        return x

    assert caller(jnp.zeros(3)).shape == (3,)
    with Scope(batch=4):
        above(jnp.zeros(7))
        typechecked(below)(jnp.zeros(7))
        assert dims()["batch"] == 4
