"""Dimension sizes: size expressions (``seq+1``, ``heads//kv``) parsed and evaluated, sizes that
may be symbolic compared, and sizes users give (``dims={'batch': 8}``) validated. Pure Python, no
JAX at import.

>>> evaluate(("+", ("name", "seq"), ("int", 1)), {"seq": 128}.__getitem__)
129
"""

from __future__ import annotations

import operator
import re
from typing import Any, Callable, TypeAlias

from .doc_links import SHAPE_STRING, linked

__all__ = ["evaluate", "size_equal", "divides", "check_dims"]

IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_TOKEN = re.compile(r"\s*(?:(?P<int>[0-9]+)|(?P<name>[A-Za-z_][A-Za-z0-9_]*)|(?P<op>//|[-+*()]))")

# Size expressions are small: a bound on their length and on the nesting of parentheses keeps
# the recursive-descent parser and evaluate() far from Python's recursion limit.
_MAX_TOKENS = 256
_MAX_NESTING = 32


def _quote(text: str) -> str:
    """``text`` as repr, or its head for a long one."""
    return repr(text) if len(text) <= 60 else f"{text[:40]!r}... ({len(text)} characters)"


class DimError(Exception):
    """Raised inside DimSpec parsing; ShapeSpec.parse adds the string and the position."""

    def __str__(self) -> str:
        return linked(super().__str__(), SHAPE_STRING)


# ---------------------------------------------------------------------------------------------
# Size expressions: a tiny recursive-descent parser. Nodes are tuples:
#   ("int", value) | ("name", name) | (op, lhs, rhs) with op in + - * //
# Evaluated with the current bindings, never with eval().

Node: TypeAlias = tuple[Any, ...]
"""A node of a size expression: ``("int", 3)``, ``("name", "seq")`` or ``("+", lhs, rhs)``."""

Size: TypeAlias = Any
"""A dimension size: an ``int``, or a symbolic dim of ``jax.export.symbolic_shape`` (whose class
JAX does not export)."""


def parse_expr(text: str) -> Node:
    tokens: list[tuple[str, str]] = []
    pos = 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None or m.end() == pos or m.lastgroup is None:
            raise DimError(f"unexpected character {text[pos]!r} in size expression {text!r}")
        tokens.append((m.lastgroup, m.group(m.lastgroup)))
        pos = m.end()
        if len(tokens) > _MAX_TOKENS:
            raise DimError(f"size expression {_quote(text)} is too long (more than {_MAX_TOKENS} "
                            "names, integers and operators)")
    state = {"i": 0, "depth": 0}

    def peek() -> tuple[str, str | None]:
        i = state["i"]
        return tokens[i] if i < len(tokens) else ("end", None)

    def take() -> tuple[str, str | None]:
        tok = peek()
        state["i"] += 1
        return tok

    def factor() -> Node:
        kind, value = take()
        if value is None:
            raise DimError(f"size expression {text!r} ends where an operand was expected")
        if kind == "int":
            return ("int", int(value))
        if kind == "name":
            if value == "_":
                raise DimError(f"'_' (any size) cannot appear in size expression {text!r}")
            return ("name", value)
        if value == "(":
            state["depth"] += 1
            if state["depth"] > _MAX_NESTING:
                raise DimError(f"size expression {_quote(text)} is nested more than {_MAX_NESTING} "
                                "parentheses deep")
            node = expr()
            if take()[1] != ")":
                raise DimError(f"unbalanced parentheses in size expression {text!r}")
            state["depth"] -= 1
            return node
        raise DimError(f"expected a name or integer in size expression {text!r}, found {value!r}")

    def term() -> Node:
        node = factor()
        while peek()[1] in ("*", "//"):
            op = take()[1]
            node = (op, node, factor())
        return node

    def expr() -> Node:
        node = term()
        while peek()[1] in ("+", "-"):
            op = take()[1]
            node = (op, node, term())
        return node

    node = expr()
    if state["i"] != len(tokens):
        leftover = tokens[state["i"]][1]
        if leftover == ")":
            raise DimError(f"unbalanced parentheses in size expression {text!r}")
        raise DimError(f"unexpected {leftover!r} in size expression {text!r}")
    return node


def expr_names(node: Node) -> frozenset[str]:
    if node[0] == "name":
        return frozenset([node[1]])
    if node[0] == "int":
        return frozenset()
    return expr_names(node[1]) | expr_names(node[2])


def evaluate(node: Node, lookup: Callable[[str], Size]) -> Size:
    """Evaluates a size expression; ``lookup(name)`` gives a bound size (int or symbolic dim)."""
    head = node[0]
    if head == "int":
        return node[1]
    if head == "name":
        return lookup(node[1])
    lhs = evaluate(node[1], lookup)
    rhs = evaluate(node[2], lookup)
    if head == "+":
        return lhs + rhs
    if head == "-":
        return lhs - rhs
    if head == "*":
        return lhs * rhs
    return lhs // rhs


def size_equal(a: object, b: object) -> bool:
    """``a == b`` for sizes that may be symbolic (an undecidable comparison is False)."""
    try:
        return bool(a == b)
    except Exception:
        return False


def divides(size: Size, parts: int) -> bool:
    """Whether ``size`` splits evenly into ``parts``; symbolic sizes are given the benefit of the
    doubt (the checks at call time see the real ones)."""
    try:
        return size % parts == 0
    except Exception:
        return True


# ---------------------------------------------------------------------------------------------
# Sizes given by users (``dims={'batch': 8}``), validated where they enter.


def is_size(size: Any) -> bool:
    """An int (numpy ints too, not bool), or a symbolic dim of ``jax.export.symbolic_shape``."""
    if isinstance(size, bool):
        return False
    try:
        operator.index(size)
        return True
    except TypeError:
        return type(size).__module__.split(".")[0] in ("jax", "jaxlib")


def check_dims(dims: object, what: str, arg: str = "dims") -> dict[str, Any]:
    """``dims`` (argument ``arg`` of ``what``) as a dict of dim name -> size, validated: a mapping
    whose keys are dim names and whose values are sizes (ints >= 0, symbolic dims, or tuples of
    them for ``*name`` dims). Raises TypeError or ValueError naming the key."""
    from collections.abc import Mapping

    if not isinstance(dims, Mapping):
        raise TypeError(
            f"{what}: {arg} must be a mapping of dim name to size, as {{'batch': 8}}, got "
            f"{type(dims).__name__} {_brief(dims)}"
        )
    out: dict[str, Any] = {}
    for name, size in dims.items():
        if not isinstance(name, str) or not IDENT.match(name) or name == "_":
            raise TypeError(f"{what}: {arg} has the key {name!r}; "
                            "its keys are dim names (identifiers), as {'batch': 8}")
        sizes = size if isinstance(size, tuple) else (size,)
        if not all(is_size(s) for s in sizes):
            raise TypeError(
                f"{what}: {arg}[{name!r}] must be an int size (or a tuple of them for a '*{name}' dim), "
                f"got {_brief(size)}"
            )
        as_ints = tuple(_as_int(s) for s in sizes)
        if any(isinstance(s, int) and s < 0 for s in as_ints):
            raise ValueError(f"{what}: {arg}[{name!r}] is {size!r}; a size cannot be negative")
        out[name] = as_ints if isinstance(size, tuple) else as_ints[0]
    return out


def mapping_of_sizes(value: Any, what: str, arg: str) -> None:
    """Checks a report's field ``arg`` (of ``what``): a mapping of axis or dim names to sizes."""
    from collections.abc import Mapping

    if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
        raise TypeError(f"{what}: {arg} must be a mapping of axis or dim names to sizes, got {value!r}")


def unused_dims_error(unused: list[str], used: set[str], what: str, arg: str = "dims",
                      users: str = "no annotation uses (the annotations use") -> ValueError:
    """The error for ``arg`` keys that no annotation uses, with the close names (typos).
    ``users`` says who would have used them, up to the list of names used."""
    import difflib

    parts = []
    for name in unused:
        close = difflib.get_close_matches(name, sorted(used), n=1, cutoff=0.6)
        parts.append(f"{name!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
    return ValueError(
        f"{what}: {arg} gives {', '.join(parts)}, which {users} {sorted(used)})"
    )


def close_name(name: str, names: set[str]) -> str | None:
    import difflib

    close = difflib.get_close_matches(name, sorted(names), n=1, cutoff=0.75)
    return close[0] if close else None


def _as_int(size: Any) -> Any:
    try:
        return operator.index(size)
    except TypeError:
        return size


def _brief(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."

