"""Logical axis rules: the names after ``/`` in an annotation, mapped to mesh axes.

Without rules, ``f32[b'batch/d embed']`` shards ``batch`` over mesh axis ``d``. Inside
``with axis_rules(rules):`` the same names are *logical* axes, looked up in the rules, so one
model annotated once runs on different meshes and in different modes::

    rules = AxisRules([('dp', ('data', 'fsdp')), ('tp', 'model'), ('tp', None)])
    with axis_rules(rules):
        make_partition_specs(f32[b'batch/dp embed/tp'])   # P(('data', 'fsdp'), 'model')

Resolution follows Flax linen's: for each dim, its logical name's rules are tried in order (a
repeated name is a fallback) and a rule whose mesh axes another dim of the same array already
uses is passed over. Unlike Flax, nothing is silently replicated: by default a name with no rule,
a rule naming an axis the mesh lacks, a dim left without axes because another dim took them, and
a dim its axes do not divide are errors naming the array, the dim and the rule. Each can be
relaxed per rule set (``on_missing='replicate'``, ``on_unknown_axis='drop'``,
``on_conflict='drop'``, ``on_indivisible='drop'``). A rule ``(name, None)`` replicates on purpose.

Modes (train, prefill, decode, ...) are extra rule lists that take precedence for the names they
mention, chosen with ``axis_rules(rules, mode='decode')`` or, per array, from the size of a dim
(``AxisRules(..., auto_mode=('query', 1, 'decode'))``: an array whose ``query`` dim has size 1 is
laid out with the decode rules).

This module holds ``AxisRules`` and the active rules; ``context.rule_resolution`` resolves an array
through them, and ``context.rule_presets`` has ready-made rule sets.
"""

from __future__ import annotations

import contextlib
import contextvars
import types
from typing import Any, Iterable, Iterator, Mapping, TypeAlias

import jax

from ..language import AXIS_RULES, IDENT, UNCONSTRAINED_AXES, is_unconstrained, linked
from .compat import JitKey

__all__ = [
    "UNCONSTRAINED",
    "AxisRules",
    "AxisRulesError",
    "axis_rules",
    "current_rules",
    "RULES_HINT",
]

# "XLA decides this dim": JAX's own PartitionSpec.UNCONSTRAINED (the same object, so either
# spelling works as a rule target, and derived specs hold the value JAX and Flax use).
UNCONSTRAINED = jax.sharding.PartitionSpec.UNCONSTRAINED

_POLICIES = {
    "on_missing": ("error", "replicate"),
    "on_unknown_axis": ("error", "drop"),
    "on_conflict": ("error", "drop"),
    "on_indivisible": ("error", "drop"),
}


class AxisRulesError(ValueError):
    """A logical axis that the active rules cannot place on the mesh."""

    def __str__(self) -> str:
        # The docs section as the last line, once (docs/rules.md, "AxisRulesError"); an error
        # re-raised with a place before it (``f"{where}: {e}"``) keeps its one link at the end.
        return linked(super().__str__(), AXIS_RULES)


# A tuple of mesh axis names; () for "replicated"; UNCONSTRAINED_AXES (equal to () as a tuple,
# told apart by is_unconstrained) for "XLA decides", a rule to PartitionSpec.UNCONSTRAINED.
Target: TypeAlias = "tuple[str, ...]"

# One rule as written: (logical name, a mesh axis, a tuple of them, or None for replicated).
Rule: TypeAlias = (
    "tuple[str, str | tuple[str, ...] | list[str] | None] | list[str | tuple[str, ...] | list[str] | None]"
)


def _target(name: str, value: Any) -> Target:
    # As Flax and MaxText write them: None, () and [] replicate; a list is a tuple.
    # PartitionSpec.UNCONSTRAINED (shardtypes.UNCONSTRAINED is the same object) leaves it to XLA.
    if value is None:
        return ()
    if value is jax.sharding.PartitionSpec.UNCONSTRAINED:
        return UNCONSTRAINED_AXES
    written = value
    if isinstance(value, str):
        value = (value,)
    if isinstance(value, list):
        value = tuple(value)
    if not isinstance(value, tuple) or not all(isinstance(a, str) and IDENT.match(a) for a in value):
        raise TypeError(
            f"rule for {name!r}: the target must be a mesh axis name, a tuple or list of them, "
            f"None (or () or []) for replicated, or shardtypes.UNCONSTRAINED for 'XLA decides', "
            f"got {written!r}"
        )
    if len(set(value)) != len(value):
        raise TypeError(f"rule for {name!r}: mesh axis named twice in {written!r}")
    return value


def rule_list(rules: Iterable[Rule], where: str) -> tuple[tuple[str, Target], ...]:
    if isinstance(rules, (str, bytes)) or not isinstance(rules, Iterable):
        raise TypeError(f"{where}: rules are a sequence of (logical name, mesh axes) pairs, got {rules!r}")
    out = []
    for item in rules:
        if not isinstance(item, (tuple, list)) or len(item) != 2:
            raise TypeError(f"{where}: each rule is a (logical name, mesh axes) pair, got {item!r}")
        name, value = item
        if not isinstance(name, str) or not IDENT.match(name):
            raise TypeError(f"{where}: a logical axis name must be an identifier, got {name!r}")
        out.append((name, _target(name, value)))
    return tuple(out)


def _tkey(target: Target) -> tuple[str, ...]:
    """A target as a plain tuple that tells UNCONSTRAINED from replicated ('?' is no axis name)."""
    return ("?",) if is_unconstrained(target) else target


def _rules_key(pairs: tuple[tuple[str, Target], ...]) -> tuple:
    return tuple((n, _tkey(t)) for n, t in pairs)


def _public(target: Target) -> Any:
    """A target in the constructor's form: None replicates, UNCONSTRAINED leaves it to XLA."""
    if is_unconstrained(target):
        return jax.sharding.PartitionSpec.UNCONSTRAINED
    return None if not target else target[0] if len(target) == 1 else target


def fmt_target(target: Target) -> str:
    if is_unconstrained(target):
        return "UNCONSTRAINED"
    if not target:
        return "None"
    return repr(target[0]) if len(target) == 1 else repr(target)


class AxisRules:
    """An ordered table from logical axis names to mesh axes, written as Flax's rules are.

    >>> rules = AxisRules([('batch', 'data'), ('embed', None), ('mlp', 'model')])

    ``modes`` maps a mode name to more rules that come first for the names they mention in that
    mode (``{'decode': [('batch', ('data', 'model')), ('seq', None)]}``). ``auto_mode=(dim, size,
    mode)`` picks ``mode`` for an array whose dim named ``dim`` has that size. The ``on_*``
    policies relax the default strictness, per rule set.
    """

    __slots__ = ("rules", "modes", "auto_mode", "name", "on_missing", "on_unknown_axis",
                 "on_conflict", "on_indivisible", "_tables", "_key_cache")

    rules: tuple[tuple[str, Target], ...]
    modes: Mapping[str, tuple[tuple[str, Target], ...]]  # read-only (a MappingProxyType)
    auto_mode: tuple[str, int, str] | None
    name: str | None
    on_missing: str
    on_unknown_axis: str
    on_conflict: str
    on_indivisible: str
    _tables: dict[str | None, dict[str, tuple[Target, ...]]]

    def __init__(
        self,
        rules: Iterable[Rule] = (),
        *,
        modes: Mapping[str, Iterable[Rule]] | None = None,
        auto_mode: tuple[str, int, str] | None = None,
        name: str | None = None,
        on_missing: str = "error",
        on_unknown_axis: str = "error",
        on_conflict: str = "error",
        on_indivisible: str = "error",
    ):
        if name is not None and not isinstance(name, str):
            raise TypeError(f"AxisRules: name must be a str or None, got {name!r}")
        if name == "":
            raise ValueError("AxisRules: name must be a non-empty str or None, got ''")
        where = f"AxisRules({name!r})" if name else "AxisRules"
        self.rules = rule_list(rules, where)
        if modes is None:
            modes = {}
        if not isinstance(modes, Mapping):
            raise TypeError(
                f"{where}: modes must be a mapping of mode name to rules, as "
                f"{{'decode': [('batch', None)]}}, got {modes!r}"
            )
        for m in modes:
            if not isinstance(m, str) or not m:
                raise TypeError(f"{where}: each mode name must be a non-empty str, got {m!r} in modes")
        self.modes = types.MappingProxyType({m: rule_list(r, f"{where} mode {m!r}") for m, r in modes.items()})
        if auto_mode is not None:
            if not (isinstance(auto_mode, tuple) and len(auto_mode) == 3 and isinstance(auto_mode[0], str)
                    and isinstance(auto_mode[1], int) and not isinstance(auto_mode[1], bool)
                    and auto_mode[2] in self.modes):
                raise TypeError(
                    f"{where}: auto_mode is (dim name, size, mode) with a mode from modes "
                    f"{sorted(self.modes)}, got {auto_mode!r}"
                )
            if auto_mode[1] < 0:
                raise ValueError(f"{where}: the size in auto_mode {auto_mode!r} must be non-negative, "
                                 f"got {auto_mode[1]}")
        self.auto_mode = auto_mode
        self.name = name
        policies = {"on_missing": on_missing, "on_unknown_axis": on_unknown_axis,
                    "on_conflict": on_conflict, "on_indivisible": on_indivisible}
        for policy, value in policies.items():
            if value not in _POLICIES[policy]:
                raise ValueError(f"{where}: {policy} must be one of {_POLICIES[policy]}, got {value!r}")
        self.on_missing = on_missing
        self.on_unknown_axis = on_unknown_axis
        self.on_conflict = on_conflict
        self.on_indivisible = on_indivisible
        self._tables = {}

    def __setattr__(self, name: str, value: Any) -> None:
        object.__setattr__(self, name, value)
        if name not in ("_tables", "_key_cache"):
            object.__setattr__(self, "_key_cache", None)  # the key is computed again

    def _key(self) -> tuple:
        """What the rules are: equal keys, equal rules (and the same layouts). Kept: jit's cache
        and the resolution cache hash the active rules thousands of times per trace."""
        key = getattr(self, "_key_cache", None)
        if key is None:
            key = self._build_key()
            object.__setattr__(self, "_key_cache", key)
        return key

    def _build_key(self) -> tuple:
        return (_rules_key(self.rules), tuple(sorted((m, _rules_key(r)) for m, r in self.modes.items())),
                self.auto_mode, self.name, self.on_missing, self.on_unknown_axis, self.on_conflict, self.on_indivisible)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, AxisRules):
            return NotImplemented
        return self is other or self._key() == other._key()

    def __hash__(self) -> int:
        # By value: rules written afresh (axis_rules([...]) in a loop) are the same key for jit's
        # cache and for the resolution cache, so they neither retrace nor resolve again.
        return hash(self._key())

    def __getstate__(self) -> dict[str, Any]:
        state = {k: getattr(self, k) for k in self.__slots__ if k not in ("_tables", "_key_cache")}
        state["modes"] = dict(state["modes"])
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        for k, v in state.items():
            object.__setattr__(self, k, types.MappingProxyType(dict(v)) if k == "modes" else v)
        self._tables = {}
        object.__setattr__(self, "_key_cache", None)

    def table(self, mode: str | None = None) -> dict[str, tuple[Target, ...]]:
        """Logical name -> its candidate targets in order, for ``mode``."""
        table = self._tables.get(mode)
        if table is None:
            if mode is not None and mode not in self.modes:
                raise AxisRulesError(
                    f"{self._label()} has no mode {mode!r} (modes: {sorted(self.modes) or 'none'})"
                )
            lists: dict[str, list[Target]] = {}
            for name, target in self.rules:
                lists.setdefault(name, []).append(target)
            if mode is not None:
                override: dict[str, list[Target]] = {}
                for name, target in self.modes[mode]:
                    override.setdefault(name, []).append(target)
                lists.update(override)
            table = self._tables[mode] = {k: tuple(v) for k, v in lists.items()}
        return table

    def ordered(self, mode: str | None = None) -> tuple[tuple[str, Target], ...]:
        """All rules in the order they are tried in ``mode``: the mode's own first, then the
        base rules for the names the mode does not mention."""
        if mode is None:
            return self.rules
        self.table(mode)  # an unknown mode fails here
        mine = self.modes[mode]
        named = {n for n, _ in mine}
        return mine + tuple(r for r in self.rules if r[0] not in named)

    def logical_axes_on(self, mesh_axis: str, mode: str | None = None) -> tuple[str, ...]:
        """The logical names whose rules (in ``mode``) can place them on ``mesh_axis``, in the
        order they are tried: the reverse of the lookup.

        >>> AxisRules([('batch', ('data', 'fsdp')), ('embed', 'fsdp'), ('mlp', 'model')]).logical_axes_on('fsdp')
        ('batch', 'embed')
        """
        if not isinstance(mesh_axis, str) or not IDENT.match(mesh_axis):
            raise TypeError(f"AxisRules.logical_axes_on: mesh_axis must be a mesh axis name (an identifier), "
                            f"got {mesh_axis!r}")
        if mode is not None and not isinstance(mode, str):
            raise TypeError(f"AxisRules.logical_axes_on: mode must be a str or None, got {mode!r}")
        names: list[str] = []
        for name, targets in self.table(mode).items():
            if any(mesh_axis in t for t in targets) and name not in names:
                names.append(name)
        return tuple(names)

    def merge(self, other: "AxisRules") -> "AxisRules":
        """Both rule sets in one (as Flax's ``composite_rules``). A logical name that both map,
        differently, is a conflict and raises AxisRulesError naming it."""
        if not isinstance(other, AxisRules):
            raise TypeError(f"AxisRules.merge expects AxisRules, got {other!r}")
        mine, theirs = self.table(), other.table()
        def differ(a: tuple[Target, ...], b: tuple[Target, ...]) -> bool:
            return tuple(map(_tkey, a)) != tuple(map(_tkey, b))

        conflicts: list[tuple[str, str | None]] = [
            (n, None) for n in mine if n in theirs and differ(mine[n], theirs[n])]
        for mode in sorted(set(self.modes) & set(other.modes)):
            a, b = self.table(mode), other.table(mode)
            conflicts += [(n, mode) for n in a if n in b and differ(a[n], b[n])]
        if conflicts:
            def targets(rules: "AxisRules", n: str, mode: str | None) -> str:
                return " or ".join(fmt_target(t) for t in rules.table(mode).get(n, ()))

            details = "; ".join(
                f"{n}{f' (mode {mode!r})' if mode else ''}: {targets(self, n, mode)} vs {targets(other, n, mode)}"
                for n, mode in conflicts
            )
            raise AxisRulesError(f"cannot merge {self._label()} and {other._label()}: they map {details} differently")
        def public(pairs):  # the constructor's form: None for a replicating rule
            return [(n, _public(t)) for n, t in pairs]

        rules = public(self.rules) + public(r for r in other.rules if r[0] not in mine)
        modes = {m: public(r) for m, r in self.modes.items()}
        for m, r in other.modes.items():
            modes.setdefault(m, []).extend(x for x in public(r) if x not in modes[m])
        policies = {}
        for policy in _POLICIES:
            a, b = getattr(self, policy), getattr(other, policy)
            policies[policy] = a if a == b else "error"  # differing policies: the strict one
        return AxisRules(rules, modes=modes, auto_mode=self.auto_mode or other.auto_mode,
                         name=f"{self.name or 'rules'}+{other.name or 'rules'}", **policies)

    __add__ = merge

    def _label(self) -> str:
        return f"AxisRules {self.name!r}" if self.name else "the axis rules"

    def __iter__(self) -> Iterator[tuple[str, Any]]:
        for name, target in self.rules:
            yield name, _public(target)

    def __len__(self) -> int:
        return len(self.rules)

    def __repr__(self) -> str:
        body = ", ".join(f"({n!r}, {fmt_target(t)})" for n, t in self.rules)
        extra = f", modes={sorted(self.modes)}" if self.modes else ""
        name = f"name={self.name!r}, " if self.name else ""
        return f"AxisRules({name}[{body}]{extra})"


# ---------------------------------------------------------------------------------------------
# The active rules.

# (rules, mode) while rules are active, else None.
Active: TypeAlias = "tuple[AxisRules, str | None] | None"

ACTIVE: contextvars.ContextVar[Active] = contextvars.ContextVar("shardtypes.axis_rules", default=None)


@contextlib.contextmanager
def axis_rules(rules: AxisRules | Iterable | None, mode: str | None = None) -> Iterator[AxisRules | None]:
    """Makes ``rules`` the active rules (and ``mode`` their mode) inside the block; nestable,
    restored on exit. ``axis_rules(None)`` turns rules off inside it (names are mesh axes)."""
    if mode is not None and not isinstance(mode, str):
        raise TypeError(f"axis_rules: mode must be a str or None, got {mode!r}")
    if rules is not None and not isinstance(rules, AxisRules):
        rules = AxisRules(rules)
    if rules is not None and mode is not None:
        rules.table(mode)  # an unknown mode fails here, where it is named
    if rules is None and mode is not None:
        raise TypeError("axis_rules(None, mode=...): a mode needs rules")
    active: Active = None if rules is None else (rules, mode)
    token = ACTIVE.set(active)
    try:
        with _jit_context(active):
            yield rules
    finally:
        ACTIVE.reset(token)


# The rules are read while tracing, so jax.jit must not reuse a trace made under other rules:
# a JAX user context makes them part of jit's cache key (where this JAX has one).
_JIT_RULES = JitKey(default=None)


def _jit_context(active: Active) -> contextlib.AbstractContextManager[object]:
    return _JIT_RULES(active)


# How a message tells the user to turn rules on: the Python API by default; the command line
# sets its flag here for its own run.
RULES_HINT: contextvars.ContextVar[str] = contextvars.ContextVar(
    "shardtypes.rules_hint", default="activate rules with shardtypes.axis_rules")


def current_rules() -> tuple[AxisRules, str | None] | None:
    """The active (rules, mode), or None when annotations name mesh axes directly."""
    return ACTIVE.get()

