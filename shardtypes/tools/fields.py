"""Checks of the fields of the reports' dataclasses (``StepCost``, ``Communication``,
``Collective``, ``StepTime``, ``StepBound``, ``ActivationEstimate``), worded alike:
``StepCost: flops_per_device must be an int >= 0, got str 'x'``. A report built by hand with a
wrong field fails where it is built, not where it is printed.
"""

from __future__ import annotations

from typing import Any, Mapping

__all__ = ["count", "amount", "seconds", "fraction", "texts", "items", "text", "mapping"]


def _got(value: Any) -> str:
    shown = repr(value)
    return f"{type(value).__name__} {shown if len(shown) <= 60 else shown[:57] + '...'}"


def count(owner: str, field: str, value: Any, least: int = 0) -> None:
    """An int (not a bool) of at least ``least``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise TypeError(f"{owner}: {field} must be an int >= {least}, got {_got(value)}")


def amount(owner: str, field: str, value: Any) -> None:
    """A number of bytes or FLOPs: an int or float >= 0 (not a bool)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
        raise TypeError(f"{owner}: {field} must be a number >= 0, got {_got(value)}")


def seconds(owner: str, field: str, value: Any) -> None:
    """A number of seconds: an int or float >= 0 (not a bool)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
        raise TypeError(f"{owner}: {field} must be a number of seconds >= 0, got {_got(value)}")


def fraction(owner: str, field: str, value: Any) -> None:
    """A share: an int or float from 0 to 1 (not a bool)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
        raise TypeError(f"{owner}: {field} must be a number from 0 to 1, got {_got(value)}")


def text(owner: str, field: str, value: Any) -> None:
    if not isinstance(value, str):
        raise TypeError(f"{owner}: {field} must be a str, got {_got(value)}")


def texts(owner: str, field: str, value: Any) -> None:
    """A tuple of str."""
    if not isinstance(value, tuple) or not all(isinstance(v, str) for v in value):
        raise TypeError(f"{owner}: {field} must be a tuple of str, got {_got(value)}")


def items(owner: str, field: str, value: Any, cls: type) -> None:
    """A tuple of ``cls``."""
    if not isinstance(value, tuple) or not all(isinstance(v, cls) for v in value):
        raise TypeError(f"{owner}: {field} must be a tuple of {cls.__name__}, got {_got(value)}")


def mapping(owner: str, field: str, value: Any, keys: str, check_value: Any) -> None:
    """A mapping whose keys are ``keys`` ('str' or 'axes': a tuple of str) and whose values pass
    ``check_value(owner, f'{field}[key]', v)``."""
    if not isinstance(value, Mapping):
        raise TypeError(f"{owner}: {field} must be a mapping, got {_got(value)}")
    for k, v in value.items():
        ok = isinstance(k, str) if keys == "str" else isinstance(k, tuple) and all(isinstance(a, str) for a in k)
        if not ok:
            what = "a str" if keys == "str" else "a tuple of mesh axis names"
            raise TypeError(f"{owner}: each key of {field} must be {what}, got {_got(k)}")
        check_value(owner, f"{field}[{k!r}]", v)
