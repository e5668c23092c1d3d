"""Every sentence the kernel pass says: its refusals (each names the kernel, through ``head``;
the value, by its ``origin``; and the annotation, spec string or collective it contradicts), the
provenance it records for a partial value (``owed_by``), and the pieces they are made of. The
rules decide; this module words. A fact is read only for the attributes it names
(``owed``, ``kind``, ``owed_by``, ``origin``, ``dims``, ``rel``, ``counted``).
"""

from __future__ import annotations

from typing import Any, Iterable

from ...language import KERNEL_PASS, linked
from ...model import fmt_layout, mesh_axes

__all__ = ["refusal", "PER_DEVICE", "KINDS", "fmt", "axes_text", "split_text", "owed_text", "pay_text",
           "per_device_combined", "per_device_checked", "relative", "relative_psummed", "relative_checked",
           "owed_checked",
           "counted_checked", "laid_out", "varies", "fallback", "nonlinear", "apart", "contracted_apart",
           "product_of_sums", "adds_invariant", "cond_disagrees", "gather_order", "fold_by", "sum_by",
           "cumulative_by", "contraction_by", "nested_side_by_side", "steps_aside"]

PER_DEVICE = ("if each device's part is meant to stay its own (a per-device statistic), say so with "
              "shardtypes.ops.per_device(value, axes)")

# Per kind of partial value (``facts.Owed``, a str enum: its values are the keys): its name, what
# it still owes, and what pays it.
KINDS = {"sum": ("partial sum", "a sum", "shardtypes.ops.psum or shardtypes.ops.psum_scatter"),
         "max": ("partial maximum", "a max", "jax.lax.pmax"),
         "min": ("partial minimum", "a min", "jax.lax.pmin"),
         "prefix": ("prefix over a split dim", "the total of the blocks before it",
                    "an offset that differs per device: the all_gathered totals of the earlier blocks"),
         # A psum (pmax, pmin) over an axis a dim is split over adds that dim's blocks together:
         # right only once that dim is summed (maxed) over too.
         "foldsum": ("sum of different blocks of a dim", "a sum over that dim",
                     "jnp.sum over that dim (or gather the dim before the psum)"),
         "foldmax": ("maximum of different blocks of a dim", "a max over that dim",
                     "jnp.max over that dim (or gather the dim before the pmax)"),
         "foldmin": ("minimum of different blocks of a dim", "a min over that dim",
                     "jnp.min over that dim (or gather the dim before the pmin)")}


def refusal(message: str) -> str:
    """A refusal as the pass raises it: the docs section that explains the pass as its last line
    (docs/shard-map.md, "Layouts follow values through a kernel")."""
    return linked(message, KERNEL_PASS)


# -- pieces ----------------------------------------------------------------------------------

def fmt(dims: tuple | None) -> str:
    if dims is None:
        return "(layout unknown)"
    return fmt_layout(dims)


def axes_text(axes: Iterable[str]) -> str:
    return mesh_axes(axes)


def split_text(axes: tuple) -> str:
    """``'d'/'t'``, or ``no mesh axis``: the axes a dim is split over, in a message."""
    return "/".join(repr(a) for a in axes) if axes else "no mesh axis"


def _them(axes: Any) -> str:
    return "them" if len(axes) > 1 else "it"


def owed_text(fact: Any) -> str:
    """``is a partial sum still owing a sum over mesh axis 'd' (made by ...)``: what a value owes
    and where it was made (a value with no ``kind``, as the side table's entries, is a partial sum)."""
    name, what, _ = KINDS[getattr(fact, "kind", "sum")]
    return f"is a {name} still owing {what} over {axes_text(fact.owed)} (made by {fact.owed_by})"


def pay_text(fact: Any) -> str:
    """How to pay what ``fact`` owes."""
    if fact.kind == "prefix":
        return f"add {KINDS['prefix'][2]} first"
    paid = fact.kind in ("sum", "max", "min")
    return f"{'reduce it with ' if paid else 'follow with '}{KINDS[fact.kind][2]} first"


# -- each device's own values (``Fact.lost``) ------------------------------------------------

def per_device_combined(finding: str, axes: frozenset) -> str:
    return f"{finding}; the per-device values are then combined over {axes_text(axes)}"


def per_device_checked(finding: str, what: str, apart: frozenset) -> str:
    return (f"{finding}; the per-device values then reach {what}, "
            f"which does not keep them apart along {axes_text(apart)}")


def apart(head: str, name: str, dim: int, a: Any, b: Any, a_axes: tuple, b_axes: tuple) -> str:
    return (f"{head}, JAX's {name!r} combines dim {dim} of an operand laid out {fmt(a.dims)} ({a.origin}) with one "
            f"laid out {fmt(b.dims)} ({b.origin}): the dim is split over {split_text(a_axes)} in the first but over "
            f"{split_text(b_axes)} in the second (move mesh axes with the collectives first); each device combines "
            "blocks of different parts of the dim")


def contracted_apart(head: str, i: int, j: int, lhs: Any, rhs: Any, a: tuple, b: tuple) -> str:
    return (f"{head}, JAX's 'dot_general' (jnp.einsum, @, jnp.dot) contracts dim {i} of an operand "
            f"laid out {fmt(lhs.dims)} ({lhs.origin}) with dim {j} of one laid out {fmt(rhs.dims)} "
            f"({rhs.origin}): the dim is split over {split_text(a)} in the first but over {split_text(b)} in the "
            "second (move mesh axes with the collectives first); each device multiplies blocks of different parts "
            "of the dim")


# -- values relative to a local maximum (``Fact.rel``) ----------------------------------------

def relative(head: str, fact: Any, where: str) -> str:
    sums = "; ".join(dict.fromkeys(t for t, _, _ in fact.rel or () if type(t) is not str))
    maxima = "; ".join(dict.fromkeys(t for t, _, _ in fact.rel or () if type(t) is str))
    parts = ([f"a partial maximum or minimum (each device's own, not the global one: {maxima})"] if maxima else []) + \
        ([f"a partial sum divided by or taken the log of (each device's part, not the whole: {sums})"] if sums else [])
    return f"{head}, {where}, but it is computed from {' and '.join(parts)} ({fact.origin})"


def relative_psummed(head: str, fact: Any, name: str, paid: frozenset) -> str:
    return (relative(head, fact, f"JAX's {name!r} adds it up over {axes_text(paid)}") +
            "; rescale each device's part to the global maximum (exp(m_local - jax.lax.pmax(m_local, axes))) "
            "before adding them up")


def relative_checked(head: str, fact: Any, what: str) -> str:
    return (relative(head, fact, what) + "; take the global one with jax.lax.pmax (or pmin) first, or rescale by "
            f"exp(m_local - jax.lax.pmax(m_local, axes)) ({PER_DEVICE})")


# -- a value checked against an annotation or a spec string -----------------------------------

def owed_checked(head: str, what: str, fact: Any) -> str:
    return f"{head}, {what}: it {owed_text(fact)}; {pay_text(fact)} ({PER_DEVICE})"


def counted_checked(head: str, what: str, fact: Any) -> str:
    return (f"{head}, {what}: a psum (or psum_scatter) over {axes_text(fact.counted)} added up a value that is "
            f"already the same on every device along {_them(fact.counted)} ({fact.origin}), counting it once per "
            "device; leave that sum out (for a psum_scatter, take this device's block of the value instead), or use "
            "jax.lax.pmean")


def laid_out(head: str, what: str, fact: Any, want: tuple, spec: bool, differences: str) -> str:
    return (f"{head}, {what}: it is laid out {fmt(fact.dims)} ({fact.origin}), but "
            f"{'the spec string' if spec else 'the annotation'} says {fmt(want)}: {differences}")


def fallback(head: str, what: str, finding: str) -> str:
    return f"{head}, {what}: {finding}"


def varies(head: str, what: str, extra: list, why: str, expected: tuple) -> str:
    return (f"{head}, {what}: it varies over {axes_text(extra)} (it differs from device to device along "
            f"{_them(extra)}: {why}), but the annotation says it is the same on every device there "
            f"({fmt(expected)}); sum it with jax.lax.psum, gather it, or annotate a dim split over that axis")


# -- partial values meeting ops they do not pass through --------------------------------------

def nonlinear(head: str, name: str, fact: Any) -> str:
    return (f"{head}, a value that {owed_text(fact)} reaches JAX's {name!r}, which is not linear, so "
            f"applying it to each device's part and combining afterwards is not applying it to the whole"
            f"{'' if fact.owed_by in fact.origin else f' ({fact.origin})'}; {pay_text(fact)} "
            f"(see \"Sums still owed\" in docs/shard-map.md; {PER_DEVICE})")


def product_of_sums(head: str, name: str, a: Any, b: Any) -> str:
    return (f"{head}, JAX's {name!r} multiplies two partial sums ({a.owed_by}; {b.owed_by}): the product of sums "
            f"is not the sum of products; reduce them with shardtypes.ops.psum first ({PER_DEVICE})")


def adds_invariant(head: str, name: str, owing: Any, other: Any) -> str:
    return (f"{head}, JAX's {name!r} adds a value that {owed_text(owing)} and one that owes none and is the same "
            f"on every device ({other.origin}): after the sum over the mesh the second is counted once per device; "
            "reduce the partial sum with shardtypes.ops.psum first (or add the other value on one device only)")


def cond_disagrees(head: str, i: int, k: int, owing: Any, b: Any) -> str:
    return (f"{head}, the branches of a lax.cond (or switch) disagree on result {i}: in one it {owed_text(owing)}, "
            f"in branch {k} {'it ' + owed_text(b) if b.owed else 'it owes nothing'}; whichever branch runs, the "
            "result must be the same kind of value")


# -- collectives ------------------------------------------------------------------------------

def gather_order(head: str, prim: str, dim: int, names: tuple, dims: tuple, origin: str, axes: tuple) -> str:
    written = "(" + ", ".join(repr(a) for a in names) + ("," if len(names) == 1 else "") + ")"
    if set(names) == set(axes) and len(names) == len(axes):
        fix = (f"the gather puts the blocks back in the order {written}, so the result is the dim with its "
               f"blocks permuted; gather over {tuple(axes)!r}, the order the dim is split in (or annotate "
               f"the dim split {'/'.join(('',) + names)}, if that order is the layout meant)")
    else:
        fix = ("a tiled gather undoes the mesh axes a dim is split over from the last: all of them, or the "
               f"last ones, in order (here {tuple(axes)!r} or a suffix of it)")
    return (f"{head}, JAX's {prim!r} gathers dim {dim} over mesh axes {written}, in that order, but that dim of its "
            f"operand is laid out {fmt(dims)} ({origin}): split over {split_text(axes)}; " + fix)


# -- where a partial value comes from (``Fact.owed_by``) --------------------------------------

def fold_by(name: str, folded: frozenset, dims: list, origin: str) -> str:
    return (f"JAX's {name!r} over {axes_text(folded)}, which combines the blocks of dim "
            f"{', '.join(str(i) for i in dims)} split over {_them(folded)} ({origin})")


def sum_by(call: str, dims: Any, summed: frozenset, origin: str) -> str:
    return f"{call} over dim {dims} of a value split over {axes_text(summed)} ({origin})"


def cumulative_by(prim: str, axis: int, split: frozenset, origin: str) -> str:
    return f"JAX's {prim!r} along dim {axis} of a value split over {axes_text(split)} ({origin})"


def contraction_by(where: list, contracted: set, origin: str, prim: Any) -> str:
    """What made a partial sum: a contraction (``prim``: its record, which says what users write)."""
    return (f"a {prim.name} ({prim.called_as}) contracting {', '.join(where)} split over {axes_text(contracted)} "
            f"({origin})")


def nested_side_by_side(kept: frozenset, owed_by: str) -> str:
    return (f"a shard_map nested in the kernel, whose out_specs put each device's part over {axes_text(kept)} side "
            f"by side ({owed_by})")


# -- where the pass steps aside ---------------------------------------------------------------

def steps_aside(name: str, why: str, version: str) -> str:
    return (f"shardtypes' kernel pass cannot follow JAX's {name!r} here ({why}; JAX {version}): what it computes "
            "is taken as unknown from there on, so layouts, partial sums and varying values are not followed "
            "through it; the checks at the kernel's boundary still run. Please report it with the JAX version.")
