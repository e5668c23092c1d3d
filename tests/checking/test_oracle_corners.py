"""Corners of the annotation language the docs leave open, where the oracle (annotation_oracle.py)
and the checker could disagree, decided in named tests; each docstring says what was decided and
why. A strict xfail is a checker bug or a decision not built yet: when it starts passing, remove
the mark and set its switch in ``annotation_oracle.PENDING`` to False.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest
from jax.sharding import AbstractMesh, AxisType, NamedSharding, PartitionSpec as P

from shardtypes import (
    Scope,
    ShapeSpec,
    ShapeSpecError,
    TypeCheckError,
    check,
    dims,
    f32,
    typechecked,
)

from annotation_oracle import numpy_value

# =============================================================================================
# 7. Corners: where the oracle and the checker disagreed, or the docs leave a choice open.
#    Each test says what was decided. A strict xfail is a checker bug or a decision not built yet;
#    when it starts passing, remove the mark and set its PENDING switch to False.


def z(*shape):
    return numpy_value(shape, "float32")


def test_corner_broadcast_of_a_tuple_bound_name():
    """A name bound by ``*lead`` is a tuple, so it cannot be used as a single dim (the docs,
    "Variadic"): not as ``lead``, and not as ``#lead`` either, whatever the size (size 1
    included: it once passed). In one shape string it is a shape-string error, where written."""
    with Scope(lead=(2, 3)):
        with pytest.raises(TypeCheckError, match="several dims"):
            check(f32, "#lead", z(1))
    with pytest.raises(ShapeSpecError, match=r"invalid shape string '\*lead #lead': .* both name 'lead'"):
        f32[b"*lead #lead"]


def test_corner_expression_over_a_tuple_bound_name_message():
    """Rejected with the message a plain ``lead`` dim gets ("'lead' is bound to several dims
    (2, 3) by '*lead'"), not Python's ("can only concatenate tuple (not "int") to tuple")."""
    with Scope(lead=(2, 3)):
        with pytest.raises(TypeCheckError, match=r"'lead' is bound to several dims \(2, 3\)"):
            check(f32, "lead+1", z(3))


def test_corner_underscore_is_not_a_name():
    """Decided: ``_`` is the "any size" dim, not a name, so ``*_`` and ``#_`` are shape-string
    errors, as ``_+1`` is. Binding ``_`` would make ``*_`` in two arguments stand for the same
    dims: the opposite of what ``_`` means everywhere else. Write ``...`` for any dims and ``_``
    for any size."""
    for text in ("*_ embed", "#_ embed"):
        with pytest.raises(ShapeSpecError):
            ShapeSpec.parse(text)


def test_corner_names_and_axes_are_ascii_identifiers():
    """Decided (the checker agrees): names and mesh axis names are ASCII identifiers. ``bätch``
    and ``batch/dä`` are shape-string errors although Python accepts both as identifiers; a mesh
    axis name like that is as hard to type as it is to spot in an error message."""
    for text in ("bätch", "batch/dä", "*lëad", "#bätch", "batch/d٣"):
        with pytest.raises(ShapeSpecError):
            ShapeSpec.parse(text)
    assert [d.sharding for d in ShapeSpec.parse("batch/d_0 x1/T").dims] == [("d_0",), ("T",)]


def test_corner_any_unicode_whitespace_separates_dims():
    """Decided (the checker agrees): dims are separated by any whitespace, as ``str.split()``
    splits, including tabs, newlines and non-breaking spaces."""
    for sep in (" ", "\t", "\n", "\u00a0", "\u2003"):
        spec = ShapeSpec.parse(f"batch/d{sep}embed")
        assert [(d.shape, d.sharding) for d in spec.dims] == [("batch", ("d",)), ("embed", ())]


def test_corner_integer_literals_may_have_leading_zeros():
    """Decided (the checker agrees): a fixed size is any run of digits, read in base 10, so
    ``007`` is 7 and ``0`` is a dim of size 0."""
    with Scope():
        check(f32, "007 0", z(7, 0))
        with pytest.raises(TypeCheckError):
            check(f32, "007", z(8))


def test_corner_binding_dims_count_wherever_they_appear():
    """Decided (the checker agrees): an expression reads names bound anywhere in the same shape
    string, not only by a plain ``name`` dim (the docs' ``seq+1 seq``) but also by a ``#name`` of
    size other than 1; never by ``*name`` (a tuple is not a size: a shape-string error)."""
    with Scope():
        check(f32, "a+1 #a", z(4, 3))
        assert dict(dims()) == {"a": 3}
    with Scope():
        with pytest.raises(TypeCheckError, match="no argument has bound yet"):
            check(f32, "a+1 #a", z(2, 1))  # '#a' of size 1 binds nothing
    with pytest.raises(ShapeSpecError, match="'a\\+1' reads it as one size"):
        check(f32, "a+1 *a", z(4, 3))


def test_corner_failed_call_in_a_scope_binds_nothing():
    """Decided (the checker agrees): inside ``Scope()``, a top-level call that fails at its second
    argument leaves nothing of its first argument in the Scope's table; a call is all or nothing,
    like a single value."""

    @typechecked
    def pair(x: f32[b"a b"], y: f32[b"b c"]) -> None:
        pass

    with Scope(c=5):
        with pytest.raises(TypeCheckError):
            pair(z(2, 3), z(4, 5))
        assert dict(dims()) == {"c": 5}
        pair(z(2, 4), z(4, 5))
        assert dict(dims()) == {"a": 2, "b": 4, "c": 5}


def test_corner_layout_is_compared_not_divisibility():
    """Decided (the checker agrees): the check compares layouts; it does not ask that a sharded
    dim divide by its axes' sizes. A ``ShapeDtypeStruct`` of 6 rows laid out ``P('d')`` on d=4
    passes ``f32[b'rows/d']``; JAX itself refuses such a layout where it cannot handle it
    (``device_put``, lowering). A wrong layout of the same struct still fails."""
    amesh = AbstractMesh((4, 2), ("d", "t"), axis_types=(AxisType.Explicit,) * 2)
    sds = jax.ShapeDtypeStruct((6, 3), jnp.float32, sharding=NamedSharding(amesh, P("d")))
    with Scope():
        check(f32, "rows/d cols", sds)
        with pytest.raises(TypeCheckError, match="sharding"):
            check(f32, "rows cols/t", sds)


def test_corner_expression_that_cannot_be_evaluated_fails_the_check():
    """Decided (the checker agrees): division by zero, or a negative result, is a failed check
    (``TypeCheckError``), never a ``ZeroDivisionError``; ``//`` floors as in Python."""
    with Scope(a=2, b=0):
        with pytest.raises(TypeCheckError):
            check(f32, "a//b", z(2))
    with Scope(a=2, b=3):
        with pytest.raises(TypeCheckError):
            check(f32, "a-b", z(0))
        check(f32, "(a-b)//2+1", z(0))  # floor(-1/2) + 1 == 0
