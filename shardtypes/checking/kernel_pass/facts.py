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

import itertools
from typing import Any

from .catalogue import Arith, Family, Owed, Primitive, record

__all__ = ["Owed", "Dims", "Fact", "Point", "UNKNOWN", "lost_axes", "joined_lost", "SumToken", "keeps_parts",
           "keeps_number"]


class SumToken(str):
    """A ``Fact.rel`` token that is a partial sum (its ``owed_by``), not a partial maximum: a value
    divided by this device's part of a sum, or its log, is relative to that part (log-sum-exp)."""

Dims = tuple  # per dim: a tuple of mesh axes, or None (unknown)

_FIELDS = ("dims", "owed", "kind", "vary", "rel", "counted", "mark", "base", "chain", "owed_by", "lost", "copies",
           "ring", "count", "mean", "number")
# Facts of one value only: a value computed from it starts without them (``derived``, ``same_origin``).
_OWN = {"count": 0, "mean": 0, "number": None}


class Fact:
    """What the pass knows of one value (see the module's docstring), and where it comes from
    (``origin``: the value it was computed from, and the last few primitives on the way, kept as
    names and only spelled out for a message). A value: it never changes once made; rules make new
    facts (``evolve``, ``derived``, ``same_origin``), each with a serial of its own (which names it
    as the start of a ring: ``algebra.ring_of``)."""

    __slots__ = (*_FIELDS, "serial")

    dims: Dims | None
    owed: frozenset
    kind: Owed
    vary: frozenset | None
    rel: tuple | None
    counted: frozenset
    mark: str
    base: str
    chain: tuple
    owed_by: str
    lost: tuple
    copies: frozenset
    ring: tuple
    count: int  # a partial sum over split dims: how many local elements each device added
    mean: int  # such a sum divided by that count: this device's group's mean (the count)
    number: float | None  # a literal's value, through check_vma's casts and broadcasts
    serial: int

    def __init__(self, dims: Dims | None, owed: frozenset = frozenset(), origin: str = "",
                 owed_by: str = "", chain: tuple = (), *, kind: Owed = Owed.SUM, vary: frozenset | None = None,
                 rel: tuple | None = (), counted: frozenset = frozenset(), mark: str = "", lost: tuple = (),
                 copies: frozenset = frozenset(), ring: tuple = (), number: float | None = None):
        _init(self, dims=dims, owed=owed, kind=Owed(kind) if owed else Owed.SUM, vary=vary, rel=rel, counted=counted,
              mark=mark, base=origin, chain=chain, owed_by=owed_by, lost=lost, copies=copies, ring=ring, count=0,
              mean=0, number=number)

    def __setattr__(self, key: str, value: Any) -> None:
        raise AttributeError(f"a Fact is a value: make a new one (Fact.evolve(..., {key}=...)), not set .{key}")

    def __repr__(self) -> str:
        return "Fact(" + ", ".join(f"{k}={getattr(self, k)!r}" for k in _FIELDS if getattr(self, k)) + ")"

    def evolve(self, **changes: Any) -> Fact:
        """This fact with ``changes`` (field -> value), a new value. Nothing owed: the kind is a sum."""
        fields = {k: getattr(self, k) for k in _FIELDS}
        fields.update(changes)
        if not fields["owed"]:
            fields["kind"] = Owed.SUM
        fact = Fact.__new__(Fact)
        _init(fact, **fields)
        return fact

    @property
    def origin(self) -> str:
        if not self.chain:
            return self.base
        steps = ", ".join(self.chain)
        return f"{self.base}, through {'..., ' if len(self.chain) >= _CHAIN else ''}{steps}"

    def derived(self, dims: Dims | None, prim: str, owed: frozenset | None = None, owed_by: str = "",
                **changes: Any) -> Fact:
        """The fact of a value the primitive ``prim`` computes from this one: ``prim`` joins the
        chain its origin names (a cast does not); the ring's parts stay only through a cast."""
        found = record(prim)
        cast = found.cast
        chain = self.chain
        if not cast and (not chain or chain[-1] != prim):
            chain = chain[1 - _CHAIN:] + (prim,) if len(chain) >= _CHAIN - 1 else chain + (prim,)
        owed = self.owed if owed is None else owed
        # (A cast of a partial value keeps the ring's parts, a move keeps the parts it has; any
        # other primitive makes a value of its own. Only partial values a ring can pay carry one.)
        ring: tuple = ()
        if owed and owed == self.owed and self.kind in RING_KINDS and cast:
            ring = self.ring or (None, self.serial, START, None)
        elif owed and owed == self.owed and keeps_parts(found):  # (the same parts, moved: x[None], x.T)
            ring = self.ring
        fields: dict = {**_OWN, "dims": dims, "owed": owed, "chain": chain,
                        "owed_by": owed_by or self.owed_by if owed else "", "ring": ring,
                        "number": self.number if keeps_number(found) else None}
        fields.update(changes)
        return self.evolve(**fields)

    def same_origin(self, dims: Dims | None, owed: frozenset, owed_by: str, **changes: Any) -> Fact:
        """This fact's origin with another layout and sum (and other ``changes``)."""
        fields: dict = {**_OWN, "dims": dims, "owed": owed, "owed_by": owed_by,
                        "ring": self.ring if owed == self.owed else ()}
        fields.update(changes)
        fields.setdefault("kind", self.kind)
        return self.evolve(**fields)

    @property
    def known(self) -> bool:
        """Whether the pass knows anything of it worth keeping."""
        return self.dims is not None or bool(self.owed) or self.vary is not None or bool(self.rel) \
            or bool(self.counted) or bool(self.mark) or bool(self.lost)


def _init(fact: Fact, **fields: Any) -> None:
    put = object.__setattr__
    for key, value in fields.items():
        put(fact, key, value)
    put(fact, "serial", next(_SERIALS))


def keeps_parts(prim: Primitive) -> bool:
    """A primitive that moves a value's elements without computing (a broadcast, reshape,
    transpose, squeeze, conversion or copy): a partial value's parts (``Fact.ring``) stay."""
    return prim.family in _MOVES or (prim.family is Family.ELEMENTWISE and prim.moves_only
                                     and prim.arith in (None, Arith.CONVERT))


def keeps_number(prim: Primitive) -> bool:
    """A primitive that keeps a literal's value (a cast, a broadcast, a conversion)."""
    return prim.cast or prim.family is Family.BROADCAST or prim.arith is Arith.CONVERT


_MOVES = frozenset({Family.BROADCAST, Family.RESHAPE, Family.TRANSPOSE, Family.SQUEEZE})
_CHAIN = 6  # primitives named in an origin at most (the last ones)
_SERIALS = itertools.count()
START = frozenset({0})  # a partial value's own part: no shift
# The kinds a ring of ppermutes can pay (see ``algebra.RING_OPS``).
RING_KINDS = frozenset({Owed.SUM, Owed.MAX, Owed.MIN})


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
