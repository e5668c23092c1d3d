"""typeguard's instrumentation for a function whose shardtypes annotations write shapes as ``str``.

typeguard instruments a function (to check its annotated locals and yields) by recompiling its
source, and reads every string constant in an annotation as a forward reference:
``f32['batch embed']`` becomes a syntax error and ``f32['batch']`` a ``NameError`` at the call.
shardtypes reads ``str`` and ``bytes`` shapes alike, so before typeguard sees the function's
syntax tree, the shape strings of its shardtypes annotations are made ``bytes`` constants (the
shape of a dtype class, the axes of ``Array[...]`` and ``Stacked[...]``); everything else is
typeguard's own instrumentation. This needs two of typeguard's internals
(``TypeguardTransformer``, ``find_target_function``); where they are missing, the caller is told
why and checks the signature only, with a warning that says to write bytes.
"""

from __future__ import annotations

import ast
import inspect
import sys
import textwrap
import types
from typing import Any, Callable

from ..checking import instrumenter

__all__ = ["has_str_shapes", "instrument_str_shapes", "with_closure"]


def _function_node(tree: ast.AST, f: Callable) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    """``f``'s definition in its module's tree: its name, and its first line (the first
    decorator's, as in ``co_firstlineno``)."""
    first = f.__code__.co_firstlineno
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == f.__name__:
            if min([node.lineno] + [d.lineno for d in node.decorator_list]) == first:
                return node
    return None


def _annotations(node: ast.FunctionDef | ast.AsyncFunctionDef) -> list[ast.expr]:
    """The annotations typeguard reads in ``node``: parameters, return, annotated locals."""
    args = node.args
    found = [a.annotation for a in [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg]
             if a is not None and a.annotation is not None]
    if node.returns is not None:
        found.append(node.returns)
    found.extend(n.annotation for n in ast.walk(node) if isinstance(n, ast.AnnAssign))
    return found


def _resolve(expr: ast.expr, namespace: dict[str, Any]) -> Any:
    """The object a ``Name`` or ``a.b.c`` names in ``namespace``, else None (nothing is run)."""
    if isinstance(expr, ast.Name):
        return namespace.get(expr.id)
    if isinstance(expr, ast.Attribute):
        base = _resolve(expr.value, namespace)
        return getattr(base, expr.attr, None) if base is not None else None
    return None


def _shape_constants(annotations: list[ast.expr], namespace: dict[str, Any]) -> list[ast.Constant]:
    """The ``str`` constants that are shapes or axes of shardtypes annotations."""
    from ..model import Array, Stacked, number

    found: list[ast.Constant] = []
    for annotation in annotations:
        for node in ast.walk(annotation):
            if not isinstance(node, ast.Subscript):
                continue
            base = _resolve(node.value, namespace)
            if not (base is Array or base is Stacked or (isinstance(base, type) and issubclass(base, number))):
                continue
            items = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
            found.extend(i for i in items if isinstance(i, ast.Constant) and isinstance(i.value, str))
    return found


def _namespace(f: Callable, scope_vars: dict[str, Any]) -> dict[str, Any]:
    namespace = dict(vars(__builtins__)) if isinstance(__builtins__, types.ModuleType) else dict(__builtins__)
    namespace.update(f.__globals__)
    namespace.update(scope_vars)
    for name, cell in zip(f.__code__.co_freevars, f.__closure__ or ()):
        try:
            namespace[name] = cell.cell_contents
        except ValueError:  # an empty cell
            pass
    return namespace


def has_str_shapes(f: Callable, scope_vars: dict[str, Any]) -> bool:
    """Whether ``f``'s definition annotates with a ``str`` shape (False if its source is not
    available: typeguard will say why it cannot instrument it)."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(f)))
    except (OSError, TypeError, SyntaxError):
        return False
    node = next((n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))), None)
    return node is not None and bool(_shape_constants(_annotations(node), _namespace(f, scope_vars)))


def instrument_str_shapes(f: Callable, scope_vars: dict[str, Any]) -> tuple[Callable, str | None]:
    """typeguard's instrumentation of ``f``, its shape strings read as bytes; or (``f``, why not)."""
    try:
        TypeguardTransformer, find_target_function = instrumenter()
    except ImportError as e:  # another typeguard: its internals moved
        return f, f"its annotations write shapes as str, and this typeguard cannot be given bytes ({e}); write b'...'"
    module = sys.modules.get(f.__module__)
    if module is None:
        return f, f"its module {f.__module__!r} is not imported"
    try:
        tree = ast.parse(inspect.getsource(module))
    except (OSError, TypeError, SyntaxError) as e:
        return f, f"its source is not available: {e}"
    node = _function_node(tree, f)
    if node is None:
        return f, "its definition was not found in its module's source"
    # typeguard's transformer reads the annotations of every function on the way to f (an
    # enclosing test function and the other checked helpers defined in it), not only f's: their
    # str shapes become bytes too, or a sibling's 'batch embed' is a syntax error for f.
    namespace = _namespace(f, scope_vars)
    functions = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    for constant in _shape_constants([a for n in functions for a in _annotations(n)], namespace):
        if isinstance(constant.value, str):  # (a nested function's are found twice)
            constant.value = constant.value.encode()
    target_path = [part for part in f.__qualname__.split(".") if part != "<locals>"]
    transformer = TypeguardTransformer(target_path, f.__code__.co_firstlineno)
    transformer.visit(tree)
    if transformer.target_node is None or transformer.target_lineno is None:
        return f, "typeguard did not find it in its module's source"
    code = find_target_function(compile(tree, f.__code__.co_filename, "exec", dont_inherit=True),
                                target_path, transformer.target_lineno)
    if code is None:
        return f, "typeguard did not find it in its module's source"
    return with_closure(code, f, scope_vars)


def with_closure(code: types.CodeType, f: Callable, scope_vars: dict[str, Any]) -> tuple[Callable, str | None]:
    """``code`` (typeguard's recompiled ``f``) as a function with ``f``'s defaults and attributes,
    and a closure: ``f``'s cells, and for the names only its annotations use (typeguard's checks
    read them in the body, so they become free variables), cells holding their values in the
    scope ``f`` was decorated in. typeguard looks those up in its caller's frame, which is not that
    scope here; an annotation it cannot find would be a forward reference it lets pass. A name
    not in that scope either is (``f``, why not)."""
    if not any(n.startswith("check_argument_types") for n in (*code.co_names, *code.co_freevars)) and any(
        p.annotation not in (inspect.Parameter.empty, Any, object, "Any", "object")
        for p in inspect.signature(f).parameters.values()
    ):
        # typeguard drops an annotation naming a variable assigned in an enclosing function
        # (``F = f32`` there, ``x: F['batch']`` here): its checks would pass everything.
        return f, ("typeguard dropped its checks, as it does for annotations that name a variable "
                   "assigned in an enclosing function")
    cells = dict(zip(f.__code__.co_freevars, f.__closure__ or ()))
    missing = [n for n in code.co_freevars if n not in cells and n not in scope_vars]
    if missing:
        return f, (f"its annotations name {', '.join(map(repr, missing))} of an enclosing function, which is "
                   "not in the scope it is decorated in")
    closure = tuple(cells[n] if n in cells else types.CellType(scope_vars[n]) for n in code.co_freevars)
    out = types.FunctionType(code, f.__globals__, f.__name__, f.__defaults__, closure or None)
    out.__kwdefaults__ = f.__kwdefaults__
    out.__module__ = f.__module__
    out.__qualname__ = f.__qualname__
    out.__doc__ = f.__doc__
    out.__annotations__ = f.__annotations__
    out.__dict__.update(f.__dict__)
    return out, None
