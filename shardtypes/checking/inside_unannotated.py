"""Arguments and return values whose annotation holds no shardtypes annotation (``opt_state:
Any``, ``opt_state: optax.OptState``): each instance of an annotated class inside the value (a
``Params`` as an optax state's ``mu``) is still checked against its own class, as a dataclass
field annotated ``Any`` is (``integrations/containers.py``), so nothing that carries annotations
passes unchecked. typeguard skips ``Any`` before any checker runs, so the signature checker calls
``check_inside`` after typeguard's own check of the annotation; for a function typeguard
instruments (annotated locals), ``signature.looking_inside`` calls it around typeguard's code,
which leaves ``Any`` out. (Generators and coroutines are not looked into.)
"""

from __future__ import annotations

from typing import Any, Callable

from typeguard import TypeCheckError, TypeCheckMemo

from ..model import FieldError, annotated_instances, holds_shardtypes, qualified
from .typeguard_frames import FIELD_PATH, check_argument_types_internal, check_return_type_internal

__all__ = ["looks_inside", "check_inside"]

# Values that cannot hold an annotated class: not looked into (the common case, at no cost).
_SCALARS = (bool, int, float, complex, str, bytes, type(None))


def looks_inside(annotation: Any, plan: Any) -> bool:
    """Whether a parameter annotated ``annotation`` is looked into: it is annotated, and neither
    it nor anything inside it is a shardtypes annotation or a checked class."""
    if annotation is None or plan is not None or annotation in _SCALARS:  # (x: int holds nothing)
        return False
    return not holds_shardtypes((annotation,))


def check_inside(name: str | None, value: Any, func_name: str, memo: TypeCheckMemo,
                 run: Callable[..., Any]) -> None:
    """Checks each annotated instance inside ``value`` (argument ``name``, or the return value
    when ``name`` is None) against its class. ``run(check, *args)`` runs one of typeguard's
    checks the way the caller runs them (transactionally). A failure names the path from the
    argument: ``argument "opt_state" (tuple) of step(): opt_state[0].mu.w1 is not ...``."""
    if isinstance(value, _SCALARS) or hasattr(value, "dtype"):
        return
    for path, instance in annotated_instances(value):
        token = FIELD_PATH.set((path.lstrip("."),) if path else ())  # for compile-time messages
        try:
            if name is None:
                run(check_return_type_internal, func_name, instance, type(instance), memo)
            else:
                run(check_argument_types_internal, func_name, {name: (instance, type(instance))}, memo)
        except FieldError as e:
            raise _inside_error(name, value, path, e.fields, e.core, func_name) from None
        except TypeCheckError as e:  # pragma: no cover - an instance fails its own class as a whole
            raise _inside_error(name, value, path, [], str(e), func_name) from None
        finally:
            FIELD_PATH.reset(token)


def _inside_error(name: str | None, value: Any, path: str, fields: list[str], core: str,
                  func_name: str) -> FieldError:
    where = path + "".join("." + f for f in fields)
    root = name if name is not None else "the return value"
    error = FieldError(f"of {func_name}(): {root}{where} {core}", [path.lstrip("."), *fields] if path else fields,
                       core)
    role = f'argument "{name}"' if name is not None else "the return value"
    error.append_path_element(f"{role} ({qualified(value)})")
    return error
