"""One array's block on one device (``shardtypes.layout.per_device``): the entries of a
PartitionSpec (one unreduced over some axes too), into how many parts it splits each dim, and the
block's shape, the one per-device shape the memory plan, ``validate_shardings``, the step cost
and the activation estimate share."""

import math

from hypothesis import given, settings, strategies as st
from jax.sharding import PartitionSpec as P

from shardtypes.layout import per_device_shape, spec_entries, spec_parts

SIZES = {"d": 4, "t": 2, "e": 3}


def test_the_entries_of_a_spec():
    assert spec_entries(P("d", None, ("d", "t"))) == ("d", None, ("d", "t"))
    assert spec_entries(P()) == ()
    assert spec_entries(None) == ()
    assert spec_entries(42) == ()  # not a spec: no entries
    # JAX refuses tuple() of a spec unreduced over some axes; its partitions are the entries
    assert spec_entries(P("d", None, unreduced={"t"})) == ("d", None)


def test_the_parts_of_each_dim():
    assert spec_parts(P("d", ("t", "e")), 2, SIZES) == (4, 6)
    assert spec_parts(P("d"), 3, SIZES) == (4, 1, 1)  # dims past the spec: whole
    assert spec_parts(P("x", "d"), 2, SIZES) == (1, 4)  # an axis not in the sizes: one part
    assert spec_parts(None, 2, SIZES) == (1, 1)
    assert spec_parts(P("d", "t", "e"), 2, SIZES) == (4, 2)  # entries past the rank split nothing


def test_an_unreduced_spec_splits_only_by_its_partitions():
    # The unreduced axis 't' holds partial sums: it splits no dim.
    spec = P("d", None, unreduced={"t"})
    assert spec_parts(spec, 3, SIZES) == (4, 1, 1)
    assert per_device_shape((8, 6, 5), spec_parts(spec, 3, SIZES)) == (2, 6, 5)


def test_a_block_rounds_up_and_knows_no_symbolic_size():
    assert per_device_shape((10, 7), (4, 1)) == (3, 7)  # XLA pads 10 to 12
    assert per_device_shape((8, 8), (2, 2), (2,)) == (2, 4)  # several splits multiply
    assert per_device_shape((8, 8), None, (1, 4)) == (8, 2)
    assert per_device_shape((), ()) == ()
    assert per_device_shape((8, "b"), (2, 1)) is None


parts_of = st.lists(st.integers(1, 16), min_size=0, max_size=4)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, 10_000), min_size=0, max_size=4), parts_of, parts_of)
def test_a_block_covers_its_dims_and_is_the_least_that_does(shape, own, more):
    """Per dim, the block times the parts covers the dim, and one less would not: the block is
    the ceiling of size / parts, whatever split the parts come in."""
    block = per_device_shape(shape, own, more)
    assert block is not None and len(block) == len(shape)
    for i, (size, local) in enumerate(zip(shape, block)):
        n = (own[i] if i < len(own) else 1) * (more[i] if i < len(more) else 1)
        assert local * n >= size and (local - 1) * n < size
        assert local == math.ceil(size / n)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from([None, "d", "t", "e", ("d", "t"), ("t", "e")]), max_size=4),
       st.integers(0, 5), st.frozensets(st.sampled_from(["d", "t", "e"]), max_size=1))
def test_parts_are_the_product_of_each_entrys_axes(entries, ndim, unreduced):
    # an unreduced axis shards no dim: leave it out of the entries, as JAX requires
    entries = [e for e in entries if not set((e,) if isinstance(e, str) else e or ()) & unreduced]
    spec = P(*entries, unreduced=set(unreduced)) if unreduced else P(*entries)
    parts = spec_parts(spec, ndim, SIZES)
    assert len(parts) == ndim
    for i, n in enumerate(parts):
        entry = entries[i] if i < len(entries) else None
        axes = () if entry is None else (entry,) if isinstance(entry, str) else entry
        assert n == math.prod(SIZES[a] for a in axes)


def test_validate_shardings_reads_an_unreduced_spec_by_its_partitions():
    import jax
    import jax.numpy as jnp
    from jax.sharding import AbstractMesh, AxisType

    from shardtypes.layout import validate_shardings

    mesh = AbstractMesh((4, 2), ("d", "t"), axis_types=(AxisType.Explicit,) * 2)
    x = jax.ShapeDtypeStruct((8, 6, 5), jnp.float32)
    assert validate_shardings({"w": x}, {"w": P("d", None, unreduced={"t"})}, mesh) == []
    odd = jax.ShapeDtypeStruct((6, 6, 5), jnp.float32)
    (problem,) = validate_shardings({"w": odd}, {"w": P("d", None, unreduced={"t"})}, mesh)
    assert problem.kind == "indivisible" and "dim 0 has size 6" in problem.message
