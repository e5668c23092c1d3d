"""The errors and warnings of checks, and how their messages name what was found.

``ArrayError`` (an array failed its annotation under typeguard), ``FieldError`` (a dataclass
field failed, with the field path), ``ShardtypesWarning`` (a check
that cannot run as asked), and the messages' pieces: a value's public class name (``jax.Array``,
never JAX's internal classes) and ``(found float32[8,16] sharded P('d', None))``. While
``shardtypes.verify`` runs a function, failed checks are collected (``COLLECTED``) instead of
raised.
"""

from __future__ import annotations

import contextvars
import re
from typing import Any

import jax
import jax.core
from typeguard import TypeCheckError

from ..language import CHECK_FAILED, FIELD_FAILED, link_of, linked, unlinked
from .describe import Mismatch, describe

__all__ = ["ShardtypesWarning", "ArrayError", "FieldError", "COLLECTED", "field_path", "in_function", "public_names"]


class ShardtypesWarning(UserWarning):
    """A check shardtypes was asked for cannot run as asked (for example, no source to instrument)."""


def qualified(value: Any) -> str:
    if isinstance(value, jax.core.Tracer):
        return "traced jax.Array"
    if isinstance(value, jax.Array):
        return "jax.Array"
    cls = type(value)
    return cls.__qualname__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"


# While shardtypes.verify runs a function, failed checks are collected here instead of raised,
# so that one run reports every problem it can reach.
COLLECTED: contextvars.ContextVar[list | None] = contextvars.ContextVar("shardtypes.collected", default=None)


def collect(error: TypeCheckError) -> bool:
    problems = COLLECTED.get()
    if problems is None:
        return False
    problems.append(error)
    return True


def found_text(value: Any, m: Mismatch) -> str:
    return "" if m.problem.endswith("which is not an array") else f" (found {describe(value)})"


_INTERNAL_NAMES = re.compile(r"(?:jax\.)?jaxlib\._jax\.(?:ArrayImpl|Array)\b|jax\._src\.[\w.]*Tracer")


def public_names(text: str) -> str:
    """typeguard and JAX name a value by its class: say ``jax.Array`` and ``traced jax.Array``,
    not JAX's internal classes (``jaxlib._jax.ArrayImpl``, JAX's private tracer classes)."""
    return _INTERNAL_NAMES.sub(lambda m: "traced jax.Array" if m.group().endswith("Tracer") else "jax.Array", text)




class ArrayError(TypeCheckError):
    """A value failed its shardtypes annotation where typeguard checks it (``typeguard.check_type``,
    an instrumented function, a container, union, dataclass or ``PyTree`` holding the annotation);
    typeguard adds the value's path to the message, which names the value's class by its public
    name (``jax.Array``, not ``jaxlib._jax.ArrayImpl``). A ``TypeCheckError``, so
    ``except TypeCheckError`` catches it."""

    def __str__(self) -> str:
        # The docs section as the last line, once (docs/checking.md, "Reading an error message").
        return linked(public_names(super().__str__()), CHECK_FAILED)



def in_function(error: TypeCheckError, func_name: str) -> TypeCheckError:
    """typeguard's own failure (``the return value (jaxlib._jax.ArrayImpl) is not a tuple``) as a
    ``TypeCheckError`` that names the function and the value's public class, as ours do:
    ``the return value (jax.Array) of f() is not a tuple``."""
    core = str(error.args[0]) if error.args else ""
    said = str(error)
    link = link_of(said) or CHECK_FAILED.line  # the error's own section, where it names one
    text = unlinked(said)
    if f"of {func_name}()" in text:  # ours already names it
        return TypeCheckError(f"{public_names(text)}\n{link}")
    path = text[: -len(core) - 1] if core and text.endswith(" " + core) else ""
    message = f"{path} of {func_name}() {core}" if path else f"{func_name}(): {text}"
    return TypeCheckError(f"{public_names(message)}\n{link}")


def field_path(fields: Any) -> str:
    """A field path as messages write it: attribute names after a dot (``.weights.embed``), the
    key paths of a ``PyTree``'s leaves as ``jax.tree_util.keystr`` writes them (``['mlp'][0]``)."""
    return "".join(f if f.startswith("[") else "." + f for f in fields)


class FieldError(TypeCheckError):
    """A field of a dataclass failed its annotation: ``fields`` is the attribute path from the
    outermost dataclass (``['weights', 'embed']``), ``core`` the leaf's own complaint. A
    ``TypeCheckError``, so ``except TypeCheckError`` catches it."""

    def __init__(self, message: str, fields: list[str], core: str):
        super().__init__(message)
        self.fields = fields
        self.core = core

    def __str__(self) -> str:
        # typeguard puts the value's own path before the message with a space; a message that
        # starts with the field path (``.weights.embed``) continues that path instead.
        message = str(self.args[0]) if self.args else ""
        if self._path and message.startswith((".", "[")):
            return linked(public_names(" of ".join(self._path) + message), FIELD_FAILED)
        # The docs section as the last line, once (docs/trees.md, "Checked field by field").
        return linked(public_names(super().__str__()), FIELD_FAILED)

    def __reduce__(self) -> Any:
        return (type(self), (self.args[0] if self.args else "", self.fields, self.core), self.__dict__)


FieldError.__module__ = "shardtypes"  # its public home: shardtypes.FieldError
ArrayError.__module__ = "shardtypes"  # shardtypes.ArrayError, in tracebacks and pytest's reports
