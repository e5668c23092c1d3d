"""What the jaxpr pass over a kernel body (``interpreter``) knows of a value (``Fact``), what the
side table asks it to compare (``Point``), and which primitives are elementwise or nonlinear.

Per manual mesh axis of more than one device, a value is, as in PyTorch DTensor's placements and
meta-pytorch's spmd_types:

* **split** over it: one of its dims is (``dims``, per dim the mesh axes it is split over, None
  where the pass does not know);
* **invariant** (the same on every device along it) or **varying** (``vary``: the axes it may
  differ over; None where the pass does not know);
* **partial** over it (``owed`` with ``kind``): each device holds a part of a value the mesh still
  owes: a ``sum`` (a contraction or ``jnp.sum`` over a split dim; ``psum`` pays it), a ``max`` or
  ``min`` (``reduce_max`` over a split dim; ``pmax``/``pmin`` pay it) or a ``prefix`` (a ``cumsum``
  over a split dim: each block still needs the total of the blocks before it added);
* **relative to a local maximum** (``rel``): computed from a partial max (``s - m_local``), which
  is right only once rescaled by the same per-device factor (``exp(m_local - pmax(m))``), as the
  online softmax of ring attention and flash decoding do. Each entry is ``(token, axes, k)``: the
  partial max that made it, its axes, and the power it appears with (``exp(s - m)``: -1,
  ``exp(m - M)``: +1); a product adds powers, so a rescaled value is no longer relative.
* **counted** (``counted``): a ``psum`` over axes it was already invariant over counted it once
  per device; dividing by a constant (``pmean``'s division by the axis size) undoes it.
* **marked** (``mark``): ``shardtypes.ops.per_device`` said it differs per device by intent.
* **copies** (``copies``): the same on every device along these axes by value, but each device's
  own copy by JAX's typing (a plain ``all_gather``'s result, typed varying, and what is computed
  from it): a ``psum_scatter`` adds the copies up as JAX means it to (the transpose of a gather
  under ``jax.grad``), not a value counted once per device.
* **a ring's partial sums** (``ring``): a partial sum (max, min) over one mesh axis, rotated by
  ``ppermute`` cyclic shifts and added to (maxed with) itself: ``(axis, token, offsets)``, the
  partial sum it started from (``token``) and which devices' parts it holds, as shifts along the
  axis. Once the offsets are every device's, the sum is paid (a ring all-reduce, as collective
  matmuls accumulate them).
* **each device's own** (``lost``): computed from a part in a way the parts cannot be combined
  back into the whole (a nonlinear function of a partial sum, blocks of different parts of a dim
  multiplied together). Each entry is ``(axes, finding)``. Right only as per-device values: put
  side by side by the kernel's return along dims of the result's own, or gathered; combined over
  those axes (``psum``) or checked against an annotation, the finding is the refusal.
"""

from __future__ import annotations

import enum
import itertools

from .catalogue import is_cast

__all__ = ["Owed", "FOLD", "folded", "Dims", "Fact", "Point", "UNKNOWN", "lost_axes", "joined_lost", "ring_of",
           "RING_OPS"]

Dims = tuple  # per dim: a tuple of mesh axes, or None (unknown)

class Owed(enum.StrEnum):
    """What a partial value still owes (``Fact.kind``): see the module's docstring."""

    SUM = "sum"
    MAX = "max"
    MIN = "min"
    PREFIX = "prefix"
    FOLDSUM = "foldsum"  # blocks of a split dim added together by a psum
    FOLDMAX = "foldmax"
    FOLDMIN = "foldmin"


# The blocks of a split dim combined by the collective that pays a kind.
FOLD = {Owed.SUM: Owed.FOLDSUM, Owed.MAX: Owed.FOLDMAX, Owed.MIN: Owed.FOLDMIN}
FOLDS = frozenset(FOLD.values())


def folded(kind: str) -> bool:
    """Whether ``kind`` is blocks of a split dim that a collective combined (``FOLD``)."""
    return kind in FOLDS


class Fact:
    """What the pass knows of one value (see the module's docstring), and where it comes from
    (``origin``: the value it was computed from, and the last few primitives on the way, kept as
    names and only spelled out for a message)."""

    __slots__ = ("dims", "owed", "kind", "vary", "rel", "counted", "mark", "base", "chain", "owed_by", "lost", "copies",
                 "ring", "serial")

    def __init__(self, dims: Dims | None, owed: frozenset = frozenset(), origin: str = "",
                 owed_by: str = "", chain: tuple = (), *, kind: Owed = Owed.SUM, vary: frozenset | None = None,
                 rel: tuple | None = (), counted: frozenset = frozenset(), mark: str = "", lost: tuple = (),
                 copies: frozenset = frozenset(), ring: tuple = ()):
        self.dims = dims
        self.copies = copies
        self.ring = ring
        self.serial = next(_SERIALS)  # (names this value as the start of a ring: ``ring_of``)
        self.lost = lost
        self.owed = owed
        self.kind = Owed(kind) if owed else Owed.SUM
        self.vary = vary
        self.rel = rel
        self.counted = counted
        self.mark = mark
        self.base = origin
        self.chain = chain
        self.owed_by = owed_by

    @property
    def origin(self) -> str:
        if not self.chain:
            return self.base
        steps = ", ".join(self.chain)
        return f"{self.base}, through {'..., ' if len(self.chain) >= _CHAIN else ''}{steps}"

    def derived(self, dims: Dims | None, prim: str, owed: frozenset | None = None, owed_by: str = "",
                **changes) -> Fact:
        chain = self.chain
        if not is_cast(prim) and (not chain or chain[-1] != prim):
            chain = chain[1 - _CHAIN:] + (prim,) if len(chain) >= _CHAIN - 1 else chain + (prim,)
        owed = self.owed if owed is None else owed
        # (A cast of a partial value keeps the ring's parts; any other primitive makes a value of
        # its own. Only partial values a ring can pay carry one: nothing is built for the rest.)
        ring: tuple = ()
        if owed and owed == self.owed and self.kind in RING_OPS and is_cast(prim):
            ring = self.ring or (None, self.serial, _START)
        fact = Fact(dims, owed, self.base, owed_by or self.owed_by if owed else "", chain, kind=self.kind,
                    vary=self.vary, rel=self.rel, counted=self.counted, mark=self.mark, lost=self.lost,
                    copies=self.copies, ring=ring)
        for key, value in changes.items():
            setattr(fact, key, value)
        if not fact.owed:
            fact.kind = Owed.SUM
        return fact

    def same_origin(self, dims: Dims | None, owed: frozenset, owed_by: str, **changes) -> Fact:
        """This fact's origin with another layout and sum (and other ``changes``)."""
        fact = Fact(dims, owed, self.base, owed_by, self.chain, kind=self.kind, vary=self.vary, rel=self.rel,
                    counted=self.counted, mark=self.mark, lost=self.lost, copies=self.copies,
                    ring=self.ring if owed == self.owed else ())
        for key, value in changes.items():
            setattr(fact, key, value)
        return fact

    @property
    def known(self) -> bool:
        """Whether the pass knows anything of it worth keeping."""
        return self.dims is not None or bool(self.owed) or self.vary is not None or bool(self.rel) \
            or bool(self.counted) or bool(self.mark) or bool(self.lost)


_CHAIN = 6  # primitives named in an origin at most (the last ones)
_SERIALS = itertools.count()
_START = frozenset({0})  # a partial value's own part: no shift


class Point:
    """A value the side table met: ``declared`` (its layout and owed sum, known there) and/or
    ``check`` (compared with ``expected``: ``what`` says what was checked, ``sums_ok`` whether a
    partial sum may go there); ``mark``: ``(axes, call)`` of an ``ops.per_device`` call.
    ``own``: for the kernel's return value, per dim of its annotation whether the dim is the
    result's own (named like no dim annotated before it: ``kernel_layouts.own_dims``); None for
    any other check."""

    __slots__ = ("expected", "what", "sums_ok", "declared", "mark", "fallback", "own")

    def __init__(self, expected: Dims, what: str, sums_ok: bool = False, declared: Fact | None = None,
                 mark: tuple | None = None, own: tuple | None = None):
        self.fallback = ""  # JAX's varying check's finding, said where the pass does not know better
        self.expected = expected
        self.what = what
        self.sums_ok = sums_ok
        self.declared = declared
        self.mark = mark
        self.own = own


UNKNOWN = Fact(None, rel=None)


# What combines two parts of a partial value into a larger part, by what it owes.
RING_OPS = {Owed.SUM: "add", Owed.MAX: "max", Owed.MIN: "min"}


def ring_of(fact: Fact, axis: str) -> tuple | None:
    """``(axis, token, offsets)`` of a partial sum (max, min) owed over ``axis``, among others
    (``Fact.ring``): its own (the value itself, offset 0) unless a ppermute along ``axis`` or a
    sum of rotated parts made it; None for any other value. (A ring over one axis pays that
    axis; a ring over the next starts afresh from the result.)"""
    if fact.kind not in RING_OPS or axis not in fact.owed:
        return None
    if fact.ring and fact.ring[0] == axis:
        return fact.ring
    if fact.ring and fact.ring[0] is None:  # (a cast of a value no ring has rotated yet)
        return (axis, fact.ring[1], _START)
    return (axis, fact.serial, _START)


def lost_axes(fact: Fact) -> frozenset:
    """The mesh axes along which ``fact`` is each device's own (``Fact.lost``)."""
    return frozenset(a for axes, _ in fact.lost for a in axes)


def joined_lost(*facts: Fact) -> tuple:
    """The ``lost`` entries of a value computed from ``facts``."""
    out: dict = {}
    for f in facts:
        for entry in f.lost:
            out.setdefault(entry, None)
    return tuple(out)
