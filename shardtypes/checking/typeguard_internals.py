"""typeguard's private API, in one place: the only module of shardtypes that imports typeguard's
private modules (the architecture test counts them), as ``kernel_pass/jaxpr.py`` is for JAX.

What shardtypes needs that typeguard does not publish:

* ``typeguard._functions``: the functions the instrumented code and our decorator call to check
  arguments, return values, yields and sends (renamed ``..._internal`` in 4.5, the old names then
  reading frames), and their code objects, by which a checker finds the role of the value it is
  checking in typeguard's frame (``typeguard_frames``);
* ``typeguard._checkers.origin_type_checkers``: typeguard's own checkers of containers, which
  shardtypes wraps so that a failing item keeps its index in the path;
* ``typeguard._transformer.TypeguardTransformer`` and ``typeguard._decorators.find_target_function``:
  the instrumentation of a function whose annotations write shapes as ``str`` (given bytes).

Checked against typeguard 4.4.0 (the lower bound in pyproject.toml, CI's oldest environment) and
4.6.1 (the newest when written; CI's newest environment takes the newest the index serves).
"""

from __future__ import annotations

from types import CodeType
from typing import Any, Callable

import typeguard._checkers as typeguard_checkers  # (typeguard's private modules: this adapter's job)
import typeguard._functions as typeguard_functions

__all__ = ["CHECKED_AGAINST", "check_argument_types_internal", "check_return_type_internal", "check_yield",
           "check_send", "check_codes", "container_checkers", "instrumenter"]

CHECKED_AGAINST = ("4.4.0", "4.6.1")

# typeguard renamed these in 4.5 (the old names became frame-reading helpers); the instrumented
# code and our decorator call whichever this typeguard has.
check_argument_types_internal: Callable[..., Any] = getattr(
    typeguard_functions, "check_argument_types_internal", typeguard_functions.check_argument_types)
check_return_type_internal: Callable[..., Any] = getattr(
    typeguard_functions, "check_return_type_internal", typeguard_functions.check_return_type)
check_yield: Callable[..., Any] = getattr(typeguard_functions, "check_yield_type_internal",
                                         typeguard_functions.check_yield_type)
check_send: Callable[..., Any] = getattr(typeguard_functions, "check_send_type_internal",
                                        typeguard_functions.check_send_type)

_ROLE_NAMES = {
    "check_argument_types_internal": "argument",
    "check_return_type_internal": "return",
    "check_variable_assignment": "variable",
    "check_yield_type_internal": "yield",
    "check_send_type_internal": "send",
    "check_type": "check_type",
}
if check_argument_types_internal.__name__ == "check_argument_types":  # typeguard < 4.5
    _ROLE_NAMES.update(check_argument_types="argument", check_return_type="return")
if not hasattr(typeguard_functions, "check_yield_type_internal"):  # the yield and send checks' names then
    _ROLE_NAMES.update(check_yield_type="yield", check_send_type="send")


def check_codes() -> dict[CodeType, str]:
    """The code object of each of typeguard's check functions, with the role of what it checks
    ('argument', 'return', 'variable', 'yield', 'send', 'check_type')."""
    return {getattr(typeguard_functions, name).__code__: role for name, role in _ROLE_NAMES.items()
            if hasattr(typeguard_functions, name)}


def container_checkers() -> dict[Any, Callable[..., Any]]:
    """typeguard's checkers of containers and unions, by origin (``tuple``, ``list``, ...)."""
    return dict(typeguard_checkers.origin_type_checkers)


def instrumenter() -> tuple[Any, Callable[..., Any]]:
    """``(TypeguardTransformer, find_target_function)``; ImportError where this typeguard moved them."""
    from typeguard._decorators import find_target_function
    from typeguard._transformer import TypeguardTransformer

    return TypeguardTransformer, find_target_function
