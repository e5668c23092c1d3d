"""``typechecked``: the decorator users put on functions, methods and classes.

It checks a function's annotated arguments and return value, and its annotated locals, with one
dimension table per top-level call (nested checked calls share it). Two ways to get there:

* A function whose body annotates no locals (the usual model code) is checked by a wrapper that
  reads its signature once and checks shardtypes annotations directly, with no typeguard machinery
  per call; every other annotation (``int``, ``tuple[f32[...], ...]``, a config class) goes to
  typeguard's own argument checks, so the messages are typeguard's.
* A function that annotates locals, or a generator, is instrumented by ``typeguard.typechecked``,
  which is the only way to check an annotated assignment.

A function typeguard cannot instrument (no source, ``python -O``) is never left unchecked: its
arguments and return value are checked from the signature and a ShardtypesWarning says that its
annotated locals are not.

Here: the decorator and the choice between the two. The signature checker is ``checking.signature``'s;
the table each top-level call starts with is ``checking.call_tables``'.
"""

from __future__ import annotations

import ast
import inspect
import sys
import textwrap
import types
import warnings
from typing import Any, Callable, TypeVar, overload

import typeguard

from ..checking import SignatureChecker, generator_from_signature, looking_inside, signature_sizer, with_table
from ..context import scope
from ..model import ShardtypesWarning, number
from .instrument import has_str_shapes, instrument_str_shapes, with_closure

__all__ = ["typechecked"]

# What typechecked decorates, and gives back with the same type (so the same signature).
_Target = TypeVar(
    "_Target",
    bound="Callable[..., Any] | type | property | staticmethod[..., Any] | classmethod[Any, ..., Any]",
)


@overload
def typechecked(target: _Target, /) -> _Target: ...


@overload
def typechecked(target: None = None, /) -> Callable[[_Target], _Target]: ...


def typechecked(target: _Target | None = None, /) -> _Target | Callable[[_Target], _Target]:
    """Checks the annotated arguments, annotated locals and return value of each call.

    This is ``typeguard.typechecked`` plus dimension tables: a call of a checked function that is
    not inside another checked call gets a fresh table; nested checked calls share their caller's
    (use ``@scope`` or ``with Scope():`` to isolate a callee). Works on functions, methods,
    ``staticmethod``/``classmethod``, properties, classes and ``async`` functions.

    >>> @typechecked
    ... def center(x: f32[b'batch/d channels']) -> f32[b'batch/d channels']:
    ...     return x - jnp.mean(x, axis=-1, keepdims=True)
    """
    if target is None:  # @typechecked()
        return typechecked
    # Annotations may name variables of the scope the decorator is applied in (a class body, an
    # enclosing function); keep that scope's names to resolve them, as typeguard does.
    return typecheck_target(target, sys._getframe(1).f_locals)


def typecheck_target(target: Any, scope_vars: dict) -> Any:
    if isinstance(target, type) and issubclass(target, number):
        raise TypeError(
            f"typechecked expects a function, method or class, got the annotation {target!r}: "
            "annotate a function's parameters with it and decorate the function"
        )
    if isinstance(target, type):
        return _typecheck_class(target, scope_vars)
    if isinstance(target, (staticmethod, classmethod)):
        return type(target)(typecheck_target(target.__func__, scope_vars))
    if isinstance(target, property):
        def checked(f: Callable[..., Any] | None) -> Callable[..., Any] | None:
            return typecheck_target(f, scope_vars) if f is not None else None

        return property(checked(target.fget), checked(target.fset), checked(target.fdel), target.__doc__)
    if not callable(target) or not hasattr(target, "__code__"):
        raise TypeError(f"typechecked expects a function, method or class, got {target!r}")

    if getattr(target, "__no_type_check__", False):
        return target  # typing.no_type_check below the decorator: its annotations are not types
    if getattr(target, "__shardtypes_checked__", False):
        return target  # already checked: checking twice would only cost time
    if getattr(target, "__shardtypes_scope__", False):
        # typechecked(scope(f)): the checks belong inside the fresh table, as in scope(typechecked(f)).
        return scope(typecheck_target(getattr(target, "__wrapped__"), scope_vars))
    needs, why_not = _needs_instrumentation(target)
    if needs:
        instrumented, problem = _instrument(target, scope_vars)
        if problem is None:
            sizer = signature_sizer(target, scope_vars)
            return _mark(with_table(target, looking_inside(target, instrumented, scope_vars), sizer))
        _warn_unchecked_locals(target, problem)
        if _is_generator(target):
            return _mark(generator_from_signature(target, scope_vars))
    elif why_not is not None:
        _warn_unchecked_locals(target, why_not)
    return _mark(SignatureChecker(target, scope_vars).wrap())


def _mark(wrapper: Callable[..., Any]) -> Callable[..., Any]:
    setattr(wrapper, "__shardtypes_checked__", True)  # typechecked(typechecked(f)) is typechecked(f)
    return wrapper


def _warn_unchecked_locals(target: Callable, reason: str) -> None:
    warnings.warn(
        f"shardtypes.typechecked cannot instrument {_qualname(target)} ({reason}). Its arguments "
        f"{_WHAT_THE_SIGNATURE_CHECKS[_is_generator(target)]} are checked from its signature; "
        "annotated local variables inside it, if any, are NOT checked.",
        ShardtypesWarning,
        stacklevel=_user_stacklevel(),
    )


_WHAT_THE_SIGNATURE_CHECKS = {False: "and return value", True: "and its yielded, sent and returned values"}


def _is_generator(target: Callable) -> bool:
    return inspect.isgeneratorfunction(target) or inspect.isasyncgenfunction(target)


def _user_stacklevel() -> int:
    """The stacklevel of the first frame outside this module (the line that applied the decorator)."""
    frame: types.FrameType | None = sys._getframe(1)
    level = 1
    while frame is not None and frame.f_globals.get("__name__") == __name__:
        frame = frame.f_back
        level += 1
    return level


def _qualname(f: Any) -> str:
    return f"{getattr(f, '__module__', '?')}.{getattr(f, '__qualname__', repr(f))}"


def _typecheck_class(cls: type, scope_vars: dict) -> type:
    scope_vars = {**scope_vars, cls.__name__: cls}
    for name, attr in list(vars(cls).items()):
        if inspect.isfunction(attr) or isinstance(attr, (staticmethod, classmethod, property)):
            setattr(cls, name, typecheck_target(attr, scope_vars))
    return cls


# ---------------------------------------------------------------------------------------------
# Choosing how to check.


def _needs_instrumentation(target: Callable) -> tuple[bool, str | None]:
    """(whether typeguard must instrument ``target``, why its body could not be read)."""
    if _is_generator(target):
        return True, None
    if hasattr(target, "__wrapped__"):
        # A wrapper made by another decorator (scope, typed_shard_map, functools.wraps): its
        # source is the wrapped function's, which typeguard cannot find in the wrapper's code.
        # Its arguments and return value are checked from the signature; the wrapped function's
        # locals are the business of whoever checks it.
        return False, None
    try:
        source = textwrap.dedent(inspect.getsource(target))
        tree = ast.parse(source)
    except (OSError, TypeError, SyntaxError, IndentationError) as e:
        return False, f"its source is not available: {e}"
    if not source.strip():
        # (Python 3.13 finds lines for "<string>" that other code cached; they may be empty.)
        return False, "its source is not available: could not get source code"
    func = next(
        (n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))), None
    )
    if func is None:
        if getattr(target, "__name__", "") == "<lambda>":
            return False, None  # a lambda has no statements, so no annotated locals
        return False, "its source is not available: the lines found hold no definition of it"
    return _annotates_locals(func.body), None


def _annotates_locals(body: list) -> bool:
    stack = list(body)
    while stack:
        node = stack.pop()
        if isinstance(node, ast.AnnAssign):
            return True
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            continue  # a nested scope's locals are not this function's
        stack.extend(ast.iter_child_nodes(node))
    return False


def _instrument(target: Callable, scope_vars: dict) -> tuple[Callable, str | None]:
    """typeguard's instrumentation of ``target``, or why there is none."""
    if not __debug__:
        return target, "Python runs with -O, which turns typeguard's instrumentation off"
    if has_str_shapes(target, scope_vars):  # typeguard would read f32['batch embed'] as a forward reference
        return instrument_str_shapes(target, scope_vars)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            instrumented = typeguard.typechecked(
                collection_check_strategy=typeguard.CollectionCheckStrategy.ALL_ITEMS
            )(target)
        except SyntaxError:
            # typeguard re-reads the whole module: another function's str shape ('batch embed',
            # in an annotated local) is a syntax error to it, so read them all as bytes.
            return instrument_str_shapes(target, scope_vars)
        except Exception as e:  # typeguard fails on some exec'd or interactive code
            return target, f"typeguard failed: {type(e).__name__}: {e}"
    problems = [str(w.message) for w in caught if issubclass(w.category, typeguard.InstrumentationWarning)]
    for w in caught:
        if not issubclass(w.category, typeguard.InstrumentationWarning):
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    if instrumented is target or getattr(instrumented, "__code__", None) is target.__code__:
        return target, "; ".join(problems) or "typeguard left it unchanged"
    return with_closure(instrumented.__code__, target, scope_vars)
