"""The kernel pass's one registry of rules: a primitive's name -> the function that says what its
results are, given the running pass, the equation and its operands' facts. Each rule module
registers its rules beside their definitions (``@rule("transpose")``), as JAX's own
``shard_map.py`` registers its rules per primitive; the interpreter looks a primitive up here and
nowhere else.
"""

from __future__ import annotations

from typing import Any, Callable

__all__ = ["RULES", "Rule", "rule", "lookup"]

Rule = Callable[[Any, Any, list], list]

RULES: dict[str, Rule] = {}
_GENERAL: set[str] = set()  # names held by a rule for a whole kind (elementwise): a named rule wins


def rule(*names: str, general: bool = False) -> Callable[[Rule], Rule]:
    """Registers the decorated function for ``names``. ``general``: a rule for a whole kind of
    primitive (every elementwise one), which a rule naming the primitive itself overrides."""
    def register(fn: Rule) -> Rule:
        for name in names:
            held = RULES.get(name)
            if held is not None and held is not fn and name not in _GENERAL:
                if general:
                    continue  # (a primitive's own rule stays)
                raise ValueError(f"two kernel-pass rules for {name!r}: {held.__name__} and {fn.__name__}")
            RULES[name] = fn
            if general:
                _GENERAL.add(name)
            else:
                _GENERAL.discard(name)
        return fn
    return register


def lookup(name: str) -> Rule | None:
    return RULES.get(name)
