"""Resolving annotations, PEP 563 strings included, with an error that says whose they are."""

from __future__ import annotations

import typing
from typing import Any


def resolve_hints(obj: Any, who: str, localns: dict | None = None) -> dict[str, Any]:
    """``typing.get_type_hints(obj)`` with ``Annotated`` kept; a failure is a NameError that
    names ``who`` wanted them (``shardtypes.typechecked cannot resolve the annotations of f``)."""
    try:
        return typing.get_type_hints(obj, localns=localns, include_extras=True)
    except Exception as e:
        name = f"{getattr(obj, '__module__', '?')}.{getattr(obj, '__qualname__', repr(obj))}"
        raise NameError(f"{who} cannot resolve the annotations of {name}: {type(e).__name__}: {e}") from e
