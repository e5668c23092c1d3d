"""Resolving an array's logical axes through axis rules: ``layout`` (each dim's mesh axes) and
``choices`` (the same with the story of each dim, for ``explain``).

Flax linen's resolution, strict by default (see ``context.rules`` for the policies that relax it):

>>> rules = AxisRules([('batch', 'data'), ('embed', None)])
>>> layout(ShapeSpec.parse('b/batch e/embed'), 2, active=(rules, None))
(('data',), ())
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any, Literal, Mapping, Sequence

from ..language import LOGICAL_NAME, UNCONSTRAINED_AXES, ShapeSpec, divides, is_unconstrained, size_equal
from .rules import ACTIVE, Active, AxisRules, AxisRulesError, fmt_target

__all__ = ["DimChoice", "layout", "choices"]


@dataclasses.dataclass(frozen=True)
class DimChoice:
    """How one dim was placed: the logical names, the mesh axes they took, and why."""

    index: int
    dim: str
    axes: tuple[str, ...]
    notes: tuple[str, ...]


def _direct(spec: ShapeSpec, ndim: int) -> tuple[tuple[str, ...], ...]:
    """The axes as written (a variadic dim, never sharded, stands for its dims)."""
    return tuple(dim.sharding for dim in _expanded_dims(spec, ndim))


def layout(
    spec: ShapeSpec,
    ndim: int,
    mesh_sizes: Mapping[str, int] | None = None,
    shape: Sequence | None = None,
    where: str = "",
    active: Active | Literal[False] = False,
) -> tuple[tuple[str, ...], ...]:
    """The mesh axes of each of the ``ndim`` dims of an array annotated ``spec``: the names
    after ``/`` themselves, or, with rules active, what the rules make of them."""
    if active is False:
        active = ACTIVE.get()
    if active is None or not spec.is_sharded:
        return _direct(spec, ndim)
    rules, mode = active
    sizes_key = tuple(sorted(mesh_sizes.items())) if mesh_sizes is not None else None
    shape_key = tuple(shape) if shape is not None else None
    try:
        return _resolve(rules, mode, spec, ndim, sizes_key, shape_key)[0]
    except AxisRulesError as e:
        raise AxisRulesError(f"{where}: {e}" if where else str(e)) from None
    except TypeError:  # an unhashable size (some symbolic dims): resolve without the cache
        return _resolve.__wrapped__(rules, mode, spec, ndim, sizes_key, shape_key)[0]


def choices(spec: ShapeSpec, ndim: int, mesh_sizes: Mapping[str, int] | None = None, shape: Sequence[Any] | None = None,
            active: Active | Literal[False] = False) -> tuple[DimChoice, ...]:
    """The per-dim story behind ``layout`` (for ``explain``)."""
    if active is False:
        active = ACTIVE.get()
    if active is None:
        layout_ = _direct(spec, ndim)
        return tuple(DimChoice(i, str(d), layout_[i], ())
                     for i, d in enumerate(_expanded_dims(spec, ndim)))
    rules, mode = active
    sizes_key = tuple(sorted(mesh_sizes.items())) if mesh_sizes is not None else None
    return _resolve(rules, mode, spec, ndim, sizes_key, tuple(shape) if shape is not None else None)[1]


def _expanded_dims(spec: ShapeSpec, ndim: int) -> list:
    var = spec.variadic_index
    out = []
    for i, dim in enumerate(spec.dims):
        if i == var:
            out.extend([dim] * (ndim - len(spec.dims) + 1))
        else:
            out.append(dim)
    return out


@functools.lru_cache(maxsize=8192)
def _resolve(rules: AxisRules, mode: str | None, spec: ShapeSpec, ndim: int,
             sizes_key: tuple | None, shape: tuple | None):
    """Flax linen's resolution: the rules in order, each placing its mesh axes on the first dim
    of this array that names its logical axis, is still unplaced, and whose axes are all free.
    What that leaves unplaced is an error, or replicated where a policy says so."""
    mesh = dict(sizes_key) if sizes_key is not None else None
    mode_note = None
    chosen = ""  # said in every error when auto_mode chose the mode
    if mode is None and rules.auto_mode is not None:
        mode, mode_note, chosen = _auto_mode(rules, spec, ndim, shape)
    ordered = rules.ordered(mode)
    label = rules._label() + (f" (mode {mode!r})" if mode else "")
    placement = _Placement(rules, spec, _expanded_dims(spec, ndim), mesh, shape, chosen)
    seen_rule: dict[str, int] = {}
    for name, target in ordered:
        seen_rule[name] = seen_rule.get(name, 0) + 1
        placement.place(name, target, seen_rule[name])
    placement.leave_unplaced(rules.table(mode), label)
    return placement.outcome(mode_note)


def _auto_mode(rules: AxisRules, spec: ShapeSpec, ndim: int, shape: tuple | None) -> tuple:
    """(the mode ``rules.auto_mode`` chooses for an array of ``shape``, the note ``explain`` shows
    of it, the words every error adds), or (None, None, "") where it chooses none."""
    assert rules.auto_mode is not None  # (the caller asks only where there is one)
    dim_name, size, auto = rules.auto_mode
    for dim, n in zip(_expanded_dims(spec, ndim), shape or ()):
        if not dim.is_variadic and (dim.name == dim_name or dim_name in dim.sharding) and size_equal(n, size):
            return (auto, f"mode {auto!r}, as dim {str(dim)!r} has size {size}",
                    f" (mode {auto!r} was chosen by auto_mode={rules.auto_mode!r}, as dim "
                    f"{str(dim)!r} has size {size})")
    return None, None, ""


class _Placement:
    """One array's resolution under way: a slot per (dim, logical name after '/'), in the dim's
    order of names; the mesh axes placed on each slot, the dim each mesh axis is used by, and the
    notes of each dim and the rules passed over for each slot."""

    def __init__(self, rules: AxisRules, spec: ShapeSpec, dims: list, mesh: dict | None,
                 shape: tuple | None, chosen: str):
        self.rules, self.dims, self.mesh, self.shape, self.chosen = rules, dims, mesh, shape, chosen
        var = spec.variadic_index
        self.slots = [(i, logical) for i, dim in enumerate(dims)
                      if not (var is not None and dim is spec.dims[var]) for logical in dim.sharding]
        self.placed: dict[tuple, tuple] = {}
        self.used: dict[str, int] = {}
        self.notes: dict[int, list[str]] = {i: [] for i in range(len(dims))}
        self.skipped: dict[tuple, list[str]] = {slot: [] for slot in self.slots}

    def refuse(self, slot: tuple, text: str, policy: str, message: str) -> None:
        """A rule that cannot apply: an error by default, else passed over (noted)."""
        if policy == "error":
            raise AxisRulesError(f"dim {slot[0]} {text!r}: {message}{self.chosen}")
        self.skipped[slot].append(message)

    def axes_of(self, i: int) -> list[str]:
        return [a for (j, logical) in self.slots if j == i for a in self.placed.get((j, logical), ())]

    def place(self, name: str, target: Any, nth: int) -> None:
        """Places the ``nth`` rule for logical axis ``name`` on the first unplaced slot that names
        it and where its mesh axes fit (a rule places its axes on one dim only)."""
        placed, notes = self.placed, self.notes
        for slot in self.slots:
            i, logical = slot
            if logical != name or slot in placed:
                continue
            if is_unconstrained(target):
                placed[slot] = target
                notes[i].append(f"{logical} -> UNCONSTRAINED (XLA decides)")
                return
            if not target:
                placed[slot] = ()
                notes[i].append(f"{logical} -> None (replicated by its rule)")
                return
            if not self._fits(slot, target):
                continue
            placed[slot] = target
            for a in target:
                self.used[a] = i
            notes[i].extend(f"passed over {s}" for s in self.skipped[slot])
            notes[i].append(f"{logical} -> {fmt_target(target)}"
                            + (f" (rule {nth} for {logical!r})" if nth > 1 else ""))
            return

    def _fits(self, slot: tuple, target: tuple) -> bool:
        """Whether a rule's mesh axes can go on ``slot``: the mesh has them, no other dim uses
        them, and they divide the dim's size; if not, the rule is refused or passed over."""
        i, logical = slot
        text = str(self.dims[i])
        mesh, shape = self.mesh, self.shape
        unknown = [a for a in target if mesh is not None and a not in mesh]
        if unknown:
            self.refuse(slot, text, self.rules.on_unknown_axis,
                        f"rule {logical!r} -> {fmt_target(target)} names mesh axis {unknown[0]!r}, "
                        f"which the mesh does not have (axes: {tuple(mesh or ())}){_closest(unknown[0], mesh or ())}")
            return False
        taken = [a for a in target if a in self.used]
        if taken:
            owner = self.used[taken[0]]
            self.skipped[slot].append(f"rule {logical!r} -> {fmt_target(target)}: mesh axis {taken[0]!r} "
                                      f"is already used by dim {owner} {str(self.dims[owner])!r}")
            return False
        if mesh is not None and shape is not None and i < len(shape) and shape[i] is not None:
            parts = math.prod(mesh[a] for a in (*self.axes_of(i), *target))
            if not divides(shape[i], parts):
                self.refuse(slot, text, self.rules.on_indivisible,
                            f"rule {logical!r} -> {fmt_target(target)}: size {shape[i]} does not "
                            f"divide over {parts} devices")
                return False
        return True

    def leave_unplaced(self, table: Mapping, label: str) -> None:
        """Notes each slot no rule placed as replicated, or raises where the policy says so (a
        logical axis with no rule in ``table``, or one whose rules all found their axes used)."""
        rules, notes, chosen = self.rules, self.notes, self.chosen
        for slot in self.slots:
            if slot in self.placed:
                continue
            i, logical = slot
            text = str(self.dims[i])
            if logical not in table:
                if rules.on_missing == "error":
                    raise AxisRulesError(
                        f"dim {i} {text!r}: logical axis {logical!r} has no rule in {label} "
                        f"(rules exist for {sorted(table)}){_closest(logical, table)}{chosen}"
                    )
                notes[i].append(f"{logical}: no rule, replicated (on_missing='replicate')")
                continue
            reasons = self.skipped[slot]
            conflict = any("already used" in r for r in reasons)
            if conflict and rules.on_conflict == "error":
                raise AxisRulesError(
                    f"dim {i} {text!r}: no rule for {logical!r} applies: " + "; ".join(reasons) + chosen)
            notes[i].extend(f"passed over {r}" for r in reasons)
            notes[i].append(f"{logical}: replicated (no rule applies)")

    def outcome(self, mode_note: str | None) -> tuple[tuple[tuple[str, ...], ...], tuple[DimChoice, ...]]:
        """(each dim's mesh axes, the story of each dim): what ``layout`` and ``choices`` return."""
        result: list[tuple[str, ...]] = []
        story: list[DimChoice] = []
        slots, placed = self.slots, self.placed
        for i, dim in enumerate(self.dims):
            axes = tuple(self.axes_of(i))
            free = [logical for (j, logical) in slots if j == i and is_unconstrained(placed.get((j, logical)))]
            if free and axes:
                raise AxisRulesError(
                    f"dim {i} {str(dim)!r}: logical axis {free[0]!r} is UNCONSTRAINED (XLA decides) but the "
                    f"dim's other names place it on {axes}: a PartitionSpec entry is either, not both{self.chosen}")
            if free or dim.unconstrained:
                axes = UNCONSTRAINED_AXES
            result.append(axes)
            dim_notes = self.notes[i]
            if mode_note and i == 0:
                dim_notes.insert(0, mode_note)
            story.append(DimChoice(i, str(dim), axes, tuple(dim_notes)))
        return tuple(result), tuple(story)


def _closest(name: str, names) -> str:
    """``; did you mean 'embed'?`` when one of ``names`` is close to ``name`` (a typo)."""
    import difflib

    close = difflib.get_close_matches(name, sorted(names), n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""


def _is_logical(name: str) -> bool:
    """Whether ``name`` is a logical axis name of the active rules (for a parse error's words)."""
    active = ACTIVE.get()
    if active is None:
        return False
    try:
        return name in active[0].table(active[1])
    except Exception:  # (only the words of a parse error depend on it)
        return False


LOGICAL_NAME[0] = _is_logical
