"""Comparing one output of a mesh with the reference mesh's: how close is equal (exact where the
inputs made it exact, else a tolerance from the dtype and the reduction size, or the user's), where
the first differing block is and which device holds it, and what the difference looks like (a
constant factor that is a product of axis sizes, blocks moved along an axis, one block everywhere).
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from typing import Any, Mapping, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding

from ..language import entry_axes

__all__ = ["Tolerance", "LeafComparison", "compare_leaf", "needs_tolerance", "perturbed", "first_block", "diagnose",
           "float_eps"]


def float_eps(dtype: Any) -> float | None:
    """The machine epsilon of a floating dtype (bf16 and float8 included), None for others."""
    try:
        if not jnp.issubdtype(dtype, np.inexact):
            return None
        return float(jax.numpy.finfo(dtype).eps)
    except (TypeError, ValueError):
        return None


def _mantissa_bits(dtype: Any) -> int:
    return int(jax.numpy.finfo(dtype).nmant)


@dataclasses.dataclass(frozen=True)
class Tolerance:
    """How outputs are compared: ``rtol``/``atol`` as the user gave them (elementwise, as
    ``numpy.allclose``), else derived: exact for integer results of integer inputs, otherwise
    ``eps * (2 + 4 * sqrt(reduction))`` times the output's largest magnitude, with ``eps`` the
    coarsest float dtype among the inputs and the output."""

    rtol: float | None
    atol: float | None
    exact_inputs: bool
    input_eps: float | None
    reduction: int

    def given(self) -> bool:
        return self.rtol is not None or self.atol is not None


@dataclasses.dataclass(frozen=True)
class LeafComparison:
    """One output on one mesh against the reference: ``how`` says how it was compared ('exactly',
    'within 1.2e-05', ...); ``max_abs``/``max_rel`` are the largest absolute difference and the
    largest relative to the reference's largest magnitude; ``problem`` a shape or dtype that differs."""

    ok: bool
    how: str
    max_abs: float
    max_rel: float
    close: np.ndarray | None  # elementwise: equal within the comparison
    tol_abs: float
    problem: str | None = None


def _as_numeric(x: Any) -> np.ndarray:
    array = np.asarray(x)
    if array.dtype == np.bool_:
        return array.astype(np.int8)
    if jnp.issubdtype(array.dtype, np.inexact) and array.dtype.itemsize < 4:
        return array.astype(np.float32)
    return array


def _exact(r: np.ndarray, tol: Tolerance) -> bool:
    return bool(tol.exact_inputs and np.all(np.isfinite(r)) and np.array_equal(r, np.round(r))
                and (not r.size or float(np.max(np.abs(r))) <= 2.0 ** (_mantissa_bits(r.dtype) + 1)))


def needs_tolerance(ref: Any, tol: Tolerance) -> bool:
    """Whether this reference output is compared within a tolerance (not exactly, not as given)."""
    if tol.given() or isinstance(ref, jax.Array) and jnp.issubdtype(ref.dtype, jax.dtypes.prng_key):
        return False
    r = np.asarray(ref)
    return bool(jnp.issubdtype(r.dtype, np.inexact) and not _exact(_as_numeric(r), tol))


def perturbed(values: Any, seed: int) -> Any:
    """``values`` with each float element moved by one epsilon of its dtype, up or down at random
    (from ``seed``): how much that moves an output is how much the order of a sum may move it."""
    rng = np.random.default_rng(seed)

    def move(x: Any) -> Any:
        eps = float_eps(getattr(x, "dtype", None)) if hasattr(x, "dtype") else None
        if eps is None or isinstance(x, jax.Array) and jnp.issubdtype(x.dtype, jax.dtypes.prng_key):
            return x
        array = np.asarray(x)
        signs = rng.choice(np.array([-1.0, 1.0]), size=array.shape)
        return (array.astype(np.float64) * (1 + eps * signs)).astype(array.dtype)

    return jax.tree.map(move, values)


def compare_leaf(ref: Any, got: Any, tol: Tolerance, sensitivity: Any = 0.0) -> LeafComparison:
    """``got`` (a global output on some mesh) against ``ref`` (the reference mesh's).
    ``sensitivity``: how far each element of the reference moves when its inputs move by an
    epsilon (see ``perturbed``); an element's tolerance is at least 8 times its move."""
    if isinstance(ref, jax.Array) and jnp.issubdtype(ref.dtype, jax.dtypes.prng_key):
        ref, got = jax.random.key_data(ref), jax.random.key_data(got)
    r, g = np.asarray(ref), np.asarray(got)
    if r.shape != g.shape or r.dtype != g.dtype:
        return LeafComparison(False, "", math.inf, math.inf, None, 0.0,
                              f"{g.dtype}{list(g.shape)} here but {r.dtype}{list(r.shape)} on the reference mesh")
    rn, gn = _as_numeric(r), _as_numeric(g)
    floating = jnp.issubdtype(r.dtype, np.inexact)
    diff = np.abs(gn.astype(np.float64) - rn.astype(np.float64)) if rn.size else np.zeros(rn.shape)
    both_nan = np.isnan(rn) & np.isnan(gn) if floating else np.zeros(rn.shape, bool)
    diff = np.where(both_nan, 0.0, diff)
    scale = float(np.max(np.abs(np.where(np.isfinite(rn), rn, 0)))) if rn.size else 0.0
    max_abs = float(np.nanmax(np.where(np.isnan(diff), np.inf, diff))) if diff.size else 0.0
    max_rel = max_abs / scale if scale else (0.0 if max_abs == 0 else math.inf)
    if tol.given():
        rtol, atol = tol.rtol or 0.0, tol.atol or 0.0
        close = diff <= atol + rtol * np.abs(rn)
        how = f"within rtol={rtol:g}, atol={atol:g} (as given)"
        tol_abs = atol + rtol * scale
    elif not floating:
        close, how, tol_abs = diff == 0, "exactly (an integer dtype)", 0.0
    elif _exact(rn, tol):
        close, how, tol_abs = diff == 0, "exactly (integer inputs gave integer results)", 0.0
    else:
        eps = max(e for e in (float_eps(r.dtype), tol.input_eps) if e is not None)
        relative = eps * (2 + 4 * math.sqrt(max(1, tol.reduction)))
        tol_abs = relative * (scale or 1.0)
        moved = 8 * np.broadcast_to(np.asarray(sensitivity, np.float64), diff.shape)
        close = diff <= np.maximum(tol_abs, moved)
        how = f"within {tol_abs:.2g} ({r.dtype} round-off)"
        # An element that moves more than sqrt(eps) of the output's magnitude when the inputs move
        # by an epsilon has met a tie or a branch (an argmax, a top-k, the sign an optimizer
        # normalises a gradient to): it is compared within its own move; the others stay tight.
        flagged = moved > max(relative, math.sqrt(eps)) * (scale or 1.0)
        jumps = int(np.count_nonzero(flagged))
        if jumps:
            # Other meshes' sums flip other ties: no more elements than the epsilon flipped may
            # differ elsewhere, each by no more than the largest flip.
            outside = ~close
            if np.count_nonzero(outside) <= jumps:
                close = close | (outside & (diff <= moved.max()))
            how += (f"; {jumps} of {diff.size} elements jump when the inputs move by an epsilon (a tie or a branch "
                    "flipped): as many may differ, each within the largest jump")
    return LeafComparison(bool(np.all(close)), how, max_abs, max_rel, close, tol_abs)


def _devices_at(mesh: Any) -> dict[Any, dict[str, int]]:
    coords = {}
    for index in np.ndindex(mesh.devices.shape):
        coords[mesh.devices[index]] = dict(zip(mesh.axis_names, (int(i) for i in index)))
    return coords


def _fmt_slices(index: Sequence[slice], shape: Sequence[int]) -> str:
    parts = []
    for s, n in zip(index, shape):
        start, stop, _ = s.indices(n)
        parts.append(f"{start}:{stop}")
    return "[" + ", ".join(parts) + "]"


def first_block(close: np.ndarray, sharding: Any, mesh: Any) -> tuple[str, tuple | None]:
    """Where the first differing block of an output is (its index range, in index order) and
    which device holds it, along the axes that split the output; and that block's index."""
    shape = close.shape
    if not shape:
        return "", None
    if not isinstance(sharding, NamedSharding):
        bad = np.argwhere(~close)
        return (f"the first differing element is at {tuple(int(i) for i in bad[0])}" if len(bad) else ""), None
    sizes = dict(mesh.shape)
    split = [a for entry in sharding.spec for a in entry_axes(entry) if sizes.get(a, 1) > 1]
    where = _devices_at(mesh)
    blocks: dict[tuple, list] = {}
    for device, index in sharding.devices_indices_map(shape).items():
        key = tuple(s.indices(n)[:2] for s, n in zip(index, shape))
        blocks.setdefault(key, []).append((device, index))
    for key in sorted(blocks):
        device, index = blocks[key][0]
        if not np.all(close[index]):
            at = where.get(device, {})
            held = ", ".join(f"{a}={at[a]}" for a in split if a in at)
            whose = f"held by the device at {held}" if held else "on every device (the output is replicated)"
            return f"the first differing block is {_fmt_slices(index, shape)}, {whose}", tuple(index)
    return "", None


def _factor_axes(factor: float, sizes: Mapping[str, int]) -> str | None:
    """The axes whose sizes multiply to ``factor`` (fewest axes first), as words."""
    axes = [a for a, n in sizes.items() if n > 1]
    for k in range(1, len(axes) + 1):
        for group in itertools.combinations(axes, k):
            if math.isclose(math.prod(sizes[a] for a in group), factor, rel_tol=1e-6):
                return " times ".join(f"the size of {a!r}" for a in group)
    return None


def _constant_factor(r: np.ndarray, g: np.ndarray, tol_abs: float, sizes: Mapping[str, int]) -> str | None:
    if not r.size or not np.all(np.isfinite(r)) or not np.all(np.isfinite(g)):
        return None
    k = int(np.argmax(np.abs(r)))
    if r.flat[k] == 0:
        return None
    c = float(g.flat[k] / r.flat[k])
    if math.isclose(c, 1.0, rel_tol=1e-6) or not np.all(np.abs(g - c * r) <= tol_abs * max(1.0, abs(c)) + 1e-12):
        return None
    if c == 0:
        return "the output is zero everywhere: a result never written, or a mask that drops everything?"
    if abs(c) > 1:
        axes = _factor_axes(abs(c), sizes)
        if axes:
            return (f"every element is {c:g} times the reference's, {axes}: a psum where a pmean was meant, "
                    "or a sum counted on every device?")
    else:
        axes = _factor_axes(1 / abs(c), sizes)
        if axes:
            return (f"every element is 1/{1 / abs(c):g} of the reference's, one over {axes}: a pmean where a "
                    "psum was meant, or a sum divided by the device count?")
    root = _factor_axes(abs(c) ** 2 if abs(c) > 1 else 1 / abs(c) ** 2, sizes)
    if root:
        way = "sqrt" if abs(c) > 1 else "1/sqrt"
        return (f"every element is {c:g} times the reference's, {way} of {root}: a sum where a mean was meant (or the "
                "reverse) under a square root, as in a norm's variance?")
    return f"every element is {c:g} times the reference's" if r.size > 1 else None


def _chunks(x: np.ndarray, dim: int, n: int) -> list[np.ndarray]:
    return np.split(x, n, axis=dim)


def _offsets(rc: list[np.ndarray], gc: list[np.ndarray], tol_abs: float, name: str) -> str | None:
    """Each block off from the reference's by a constant of its own: growing with the block's
    index, an offset (``axis_index * block``) left out or counted twice."""
    deltas = []
    for r, g in zip(rc, gc):
        d = g - r
        if not d.size or np.ptp(d) > 2 * tol_abs:
            return None
        deltas.append(float(d.flat[0]))
    if all(abs(d) <= tol_abs for d in deltas):
        return None
    step = deltas[1] - deltas[0]
    if abs(deltas[0]) <= tol_abs and all(abs(d - i * step) <= tol_abs for i, d in enumerate(deltas)):
        return (f"block i along {name} is the reference's plus i * {step:g}: a shard offset left out or counted "
                "twice (axis_index times the block size)?")
    return (f"each block along {name} is the reference's plus a constant of its own: an offset that depends on the "
            "device?")


def _moved(r: np.ndarray, g: np.ndarray, tol_abs: float, sharding: Any) -> str | None:
    """Blocks of ``g`` that are blocks of ``r`` moved along an axis that splits the output."""
    if not isinstance(sharding, NamedSharding):
        return None
    sizes = dict(sharding.mesh.shape)
    for dim, entry in enumerate(sharding.spec):
        axes = entry_axes(entry)
        n = math.prod(sizes[a] for a in axes)
        if n < 2 or dim >= r.ndim or r.shape[dim] % n:
            continue
        rc, gc = _chunks(r, dim, n), _chunks(g, dim, n)

        def same(a: np.ndarray, b: np.ndarray) -> bool:
            return bool(np.all(np.abs(a.astype(np.float64) - b.astype(np.float64)) <= tol_abs))

        matches = [[j for j in range(n) if same(gc[k], rc[j])] for k in range(n)]
        name = repr(axes[0]) if len(axes) == 1 else repr(tuple(axes))
        offset = _offsets(rc, gc, tol_abs, name)
        if offset:
            return offset
        for j in range(n):
            if all(j in m for m in matches) and not all(same(rc[j], rc[i]) for i in range(n)):
                return (f"every block along {name} holds the reference's block {j}: one device's part broadcast "
                        "to every device?")
        for s in range(1, n):
            if all((k + s) % n in matches[k] for k in range(n)):
                step = s if s <= n // 2 else s - n
                return (f"block i along {name} holds the reference's block i{step:+d} (mod {n}), for every i: a "
                        "ring turning the wrong way, or an index offset?")
        for k in range(n):
            if k not in matches[k]:
                others = [j for j in matches[k] if j != k]
                if others:
                    return (f"block {k} along {name} holds the reference's block {others[0]}: an index offset "
                            "or a ring step off by one?")
                break
    return None


def _moved_within(r: np.ndarray, g: np.ndarray, tol_abs: float, block: tuple | None,
                  sizes: Mapping[str, int]) -> str | None:
    """Inside the first differing block: parts of it that are other parts of the reference's same
    block, cut along a dim into as many parts as an axis has devices (a ring that hands each step
    the wrong neighbour's block writes the right products in the wrong rows)."""
    if block is None:
        return None
    rb, gb = r[block], g[block]
    for axis, n in sizes.items():
        if n < 2:
            continue
        for dim in range(rb.ndim):
            if rb.shape[dim] % n or rb.shape[dim] < n:
                continue
            rc, gc = _chunks(rb, dim, n), _chunks(gb, dim, n)
            for k in range(n):
                if np.all(np.abs(gc[k] - rc[k]) <= tol_abs):
                    continue
                others = [j for j in range(n) if j != k and np.all(np.abs(gc[k] - rc[j]) <= tol_abs)]
                if others:
                    return (f"in that block, part {k} of {n} along dim {dim} (one part per device along {axis!r}) "
                            f"holds the reference's part {others[0]}: a ring turning the wrong way, or an index "
                            "offset?")
                break
    return None


def diagnose(ref: Any, got: Any, comparison: LeafComparison, sharding: Any, sizes: Mapping[str, int],
             block: tuple | None = None) -> str | None:
    """A likely cause of the difference, where one fits: a constant factor that is a product of
    axis sizes, blocks moved along an axis, one block broadcast, parts of the first differing
    block moved; None when none fits."""
    if comparison.problem is not None:
        return None
    r, g = _as_numeric(np.asarray(ref)).astype(np.float64), _as_numeric(np.asarray(got)).astype(np.float64)
    tol = comparison.tol_abs
    return (_constant_factor(r, g, tol, sizes) or _moved(r, g, tol, sharding)
            or _moved_within(r, g, tol, block, sizes))
