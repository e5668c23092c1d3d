"""What the tests of shardtypes.ops (test_ops.py, test_ops_errors.py) share: the inputs (small,
seeded), ``kernel`` (a jitted typed_shard_map), ``run_op`` (one op in a fresh kernel), and the
comparisons of numbers and layouts.
"""

import functools

import jax
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec as P

from shardtypes import f32, i32, typed_shard_map

from conftest import put

RNG = np.random.default_rng(0)
V, M, B, L, F = 10, 4, 8, 3, 6
MAT = RNG.standard_normal((8, 16)).astype(np.float32)  # 'V/t M/d' with V=8, M=16
VEC = RNG.standard_normal(16).astype(np.float32)
ACT = RNG.standard_normal((B, L, M)).astype(np.float32)
WEIGHT = RNG.standard_normal((M, F)).astype(np.float32)
TABLE = RNG.standard_normal((V, M)).astype(np.float32)
IDS = RNG.integers(0, V, (B, L)).astype(np.int32)
TABLE16 = RNG.standard_normal((16, M)).astype(np.float32)
IDS16 = RNG.integers(0, 16, (B, L)).astype(np.int32)


def kernel(f=None, **kwargs):
    """``jax.jit(typed_shard_map(f, **kwargs))``."""
    if f is None:
        return functools.partial(kernel, **kwargs)
    return jax.jit(typed_shard_map(f, **kwargs))


def close(actual, expected, tol=1e-5):
    np.testing.assert_allclose(np.asarray(actual), expected, rtol=tol, atol=tol)


def assert_layout(out, mesh, *spec):
    assert out.sharding.is_equivalent_to(NamedSharding(mesh, P(*spec)), out.ndim), out.sharding


# Inputs of index_unreduced's general form (seqax's), and the ring of ppermute.
LOGP = RNG.standard_normal((B, 4, 16)).astype(np.float32)  # 'batch/d len V/t', V=16
TARGETS = RNG.integers(0, 16, (B, 4)).astype(np.int32)
CUBE = RNG.standard_normal((B, 16, M)).astype(np.float32)  # 'B/d V/t M'
RING = [(i, (i + 1) % 4) for i in range(4)]


def run_op(mesh, op):
    """Runs ``op(x, w, table, ids, y)`` in a fresh kernel (the errors come at trace time, before
    anything compiles), with x: 'B/d M' (8, 4), w: 'M F/t' (4, 6), table: 'V/t M' (10, 4),
    ids: 'B/d L' (8, 3), y: 'B/d/t M'."""

    @kernel(check_vma=False)
    def k(
        x: f32[b"B/d M"],
        w: f32[b"M F/t"],
        table: f32[b"V/t M"],
        ids: i32[b"B/d L"],
        y: f32[b"B/d/t M"],
    ) -> f32[b"B/d M"]:
        op(x, w, table, ids, y)
        return x

    with jax.set_mesh(mesh):
        return k(
            put(mesh, ACT[:, 0, :], "d"),
            put(mesh, WEIGHT, None, "t"),
            put(mesh, TABLE, "t"),
            put(mesh, IDS, "d"),
            put(mesh, ACT[:, 0, :], ("d", "t")),
        )
