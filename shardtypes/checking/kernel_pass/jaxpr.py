"""The one place the kernel pass reads JAX's primitives and their params.

JAX changes the params of its primitives between releases (0.11 describes ``scan``'s operand
groups with ``ft_in``/``ft_out`` where 0.9 and 0.10 had ``num_consts``/``num_carry``). Each
reader here tries the shapes of the supported releases by what the params hold, never by the
version string, and raises ``Unreadable`` when none fits. The pass (``interpreter``) then takes
what that equation computes as unknown and warns once (``unreadable``): the checker steps aside
where it cannot follow JAX, and never breaks the user's program.
"""

from __future__ import annotations

import re
import warnings
from typing import Any, NamedTuple

import jax
import jax.extend.core as jex

from . import messages as say

__all__ = ["KNOWN_BUGS", "known_bug", "REFUSALS", "refused_op", "about_unreduced", "KernelPassWarning", "Unreadable",
           "name", "shape", "param", "optional_param", "axis_names", "scan_groups", "while_groups", "branches",
           "inner_jaxpr", "call_jaxpr", "is_literal", "literal_number", "unreadable", "aval", "sub_jaxprs", "frames",
           "eqns", "invars", "outvars", "constvars", "is_var", "has_effects", "reset_warnings", "Contraction",
           "contraction", "nested_map"]


class KernelPassWarning(UserWarning):
    """The kernel pass met a JAX primitive, or a layout of a primitive's params, that it does not
    know: what that equation computes is taken as unknown (the boundary checks still run)."""


class Unreadable(Exception):
    """A primitive's params are not in any shape this module knows."""


def name(eqn: Any) -> str:
    """The primitive's name (``jax.extend.core.Primitive.name``). A primitive that stands for
    another and binds it with the same params (JAX 0.12's ``vjp_node[scan]`` in linearized jaxprs
    holds the one it wraps as ``.prim``) is read as the one it stands for."""
    primitive = eqn.primitive
    inner = getattr(primitive, "prim", None)
    if isinstance(inner, jex.Primitive) and inner is not primitive:
        return inner.name
    return primitive.name


#: JAX's words when it refuses an operation on a value it types unreduced, each with the releases
#: that say it; the operation's name is the pattern's group. (JAX raises NotImplementedError up
#: to 0.11 and its ShardingTypeError, not public, from 0.12: neither type says what was refused.)
REFUSALS: tuple[tuple[re.Pattern, str], ...] = (
    (re.compile(r"unreduced(?:/reduced)? rule for ([\w.\-]+) is not implemented"), "JAX 0.9.2 to 0.11.2"),
    (re.compile(r"passed to ([\w.\-]+) cannot be unreduced"), "JAX 0.10.2 to 0.11.2"),
    (re.compile(r"([\w.\-]+) is a non-linear operation and cannot accept input"),
     "JAX 0.12.0 on"),
)


#: Bugs of JAX's own that a correct kernel meets, each told by JAX's words, with the releases seen
#: in and what works instead (said by ``known_bug``).
KNOWN_BUGS: tuple[tuple[re.Pattern, str, str], ...] = (
    (re.compile(r"Primitive polynomial requires varying manual axes to match"), "JAX 0.12.0 (0.11.2 runs it)",
     "JAX {version} cannot differentiate an exact GELU or erf (jax.nn.gelu(approximate=False), "
     "jax.scipy.special.erf) of a value that varies over manual mesh axes inside shard_map with "
     "check_vma=True: the derivative's 'polynomial' is given constant coefficients that JAX does not "
     "make varying, which its own check then refuses. This is JAX's bug, not the kernel's. What works: "
     "jax.nn.gelu(x, approximate=True) (the tanh form), or typed_shard_map(..., check_vma=False) for "
     "this kernel (shardtypes' own pass still follows layouts and partial sums there)"),
)


def known_bug(error: BaseException) -> str | None:
    """What a known bug of JAX's (``KNOWN_BUGS``) that ``error`` is means and what works, or None."""
    text = str(error)
    for pattern, _, explanation in KNOWN_BUGS:
        if pattern.search(text):
            return explanation.format(version=jax.__version__)
    return None


def refused_op(text: str) -> str | None:
    """The operation JAX's error ``text`` says it refuses on an unreduced value, or None."""
    for pattern, _ in REFUSALS:
        found = pattern.search(text)
        if found:
            return found.group(1)
    return None


def about_unreduced(text: str) -> bool:
    """Whether an error of JAX's speaks of an unreduced value at all, in words no release has
    changed: the type's name, or how JAX prints one (``f32[4,8]{U:t}``)."""
    return "unreduced" in text.lower() or "{U:" in text


def shape(v: Any) -> tuple:
    """The shape of a jaxpr value (a Var or a Literal); () for one without (a token). A value
    that will hold another (JAX 0.12's ``AbstractFuture`` of an async collective's start, which
    keeps the result's aval as ``inner_aval``) has that one's shape."""
    found = getattr(v, "aval", None)
    found = getattr(found, "inner_aval", found)
    return tuple(getattr(found, "shape", ()))


def optional_param(eqn: Any, key: str) -> Any:
    """A param some releases or some uses of a primitive leave out (None then)."""
    params = getattr(eqn, "params", None)
    return params.get(key) if isinstance(params, dict) else None


def param(eqn: Any, key: str) -> Any:
    try:
        return eqn.params[key]
    except (KeyError, TypeError, AttributeError):
        raise Unreadable(f"no param {key!r}") from None


def axis_names(eqn: Any) -> tuple:
    """The mesh axes of a collective: ``axes`` (psum, pmax, pmin) or ``axis_name``."""
    params = getattr(eqn, "params", {})
    if params.get("axis_index_groups") is not None:  # (each group its own collective: not followed)
        raise Unreadable("axis_index_groups: a collective within groups of devices")
    names = params.get("axes", params.get("axis_name"))
    if names is None:
        raise Unreadable("no param 'axes' or 'axis_name'")
    names = tuple(names) if isinstance(names, (tuple, list)) else (names,)
    return tuple(a for a in names if isinstance(a, str))  # (positional axes are vmap's, not the mesh's)


def _count(group: Any) -> int:
    vals = getattr(group, "vals", None)
    if vals is None:
        raise Unreadable("a flat tree without values")
    return len(list(vals))


class Contraction(NamedTuple):
    """A contraction's dims: ``dimension_numbers`` as ``dot_general`` gives them (``((lhs
    contracting, rhs contracting), (lhs batch, rhs batch))``) and the rhs dims the result drops
    besides (``ragged_dot_general``'s group dim: each row group multiplies its own matrix)."""

    dimension_numbers: tuple
    rhs_dropped: tuple = ()


def contraction(eqn: Any) -> Contraction:
    """The dims of a contraction, by what its params hold: ``dimension_numbers`` (``dot_general``)
    or ``ragged_dot_dimension_numbers`` (``ragged_dot_general``, whose ragged lhs dim is a free
    dim: the forward of a grouped matmul; a ragged dim contracted or batched is not read)."""
    params = getattr(eqn, "params", None) or {}
    if "dimension_numbers" in params:
        return Contraction(tuple(params["dimension_numbers"]))
    ragged = params.get("ragged_dot_dimension_numbers")
    numbers = getattr(ragged, "dot_dimension_numbers", None)
    if numbers is None:
        raise Unreadable("no dimension_numbers or ragged_dot_dimension_numbers")
    (lc, rc), (lb, rb) = numbers
    lhs_ragged = tuple(getattr(ragged, "lhs_ragged_dimensions", ()))
    groups = tuple(getattr(ragged, "rhs_group_dimensions", ()))
    if any(d in lc or d in lb for d in lhs_ragged) or len(groups) != 1:
        raise Unreadable("a ragged dim that is contracted or batched (the weights' gradient of a grouped matmul)")
    return Contraction(tuple(numbers), groups)


def scan_groups(eqn: Any) -> tuple[int, int]:
    """``(consts, carries)``: how many of a scan's operands are constants and carries (the rest
    are scanned)."""
    params = eqn.params
    if "num_consts" in params and "num_carry" in params:  # JAX 0.9, 0.10
        return int(params["num_consts"]), int(params["num_carry"])
    ft = params.get("ft_in")  # JAX 0.11: a flat tree of (consts, carries, xs)
    if ft is not None and hasattr(ft, "update"):
        try:
            groups = ft.update(list(range(len(eqn.invars)))).unpack()
        except Exception as e:  # (its own API: any failure means another shape)
            raise Unreadable(f"ft_in did not unpack ({type(e).__name__})") from None
        if len(groups) == 3:
            consts, carries, xs = (_count(g) for g in groups)
            if consts + carries + xs == len(eqn.invars):
                return consts, carries
    raise Unreadable("no num_consts/num_carry, and no ft_in of three groups")


def while_groups(eqn: Any) -> tuple[int, int]:
    """``(cond_consts, body_consts)`` of a while loop."""
    return int(param(eqn, "cond_nconsts")), int(param(eqn, "body_nconsts"))


def branches(eqn: Any) -> tuple:
    found = param(eqn, "branches")
    if not isinstance(found, (tuple, list)) or not found:
        raise Unreadable("branches is not a sequence")
    return tuple(found)


def inner_jaxpr(closed: Any) -> Any:
    jaxpr = getattr(closed, "jaxpr", closed)
    if not isinstance(jaxpr, jex.Jaxpr):
        raise Unreadable(f"a {type(jaxpr).__name__} where a jaxpr was expected")
    return jaxpr


_CALLS = ("jaxpr", "call_jaxpr", "fun_jaxpr")


def call_jaxpr(eqn: Any) -> Any:
    """The jaxpr a call-like primitive (jit, remat, custom_jvp/vjp...) runs on its operands as
    they are (not a loop's body, whose operands are slices or carries); None if it has none of
    the operands' and results' count."""
    for key in _CALLS:
        inner = optional_param(eqn, key)
        jaxpr = getattr(inner, "jaxpr", inner)
        if isinstance(jaxpr, jex.Jaxpr) and len(jaxpr.invars) == len(eqn.invars) \
                and len(jaxpr.outvars) == len(eqn.outvars):
            return jaxpr
    return None


# The mesh axes a nested shard_map makes manual, by release: 'manual_axes' (0.9),
# 'newly_manual_axes' (0.10 to 0.12).
_NEWLY_MANUAL = ("newly_manual_axes", "manual_axes")


def nested_map(eqn: Any) -> tuple[Any, tuple, tuple, frozenset]:
    """A ``shard_map`` equation inside a kernel: (its body's jaxpr, in_specs, out_specs, the mesh
    axes it makes manual)."""
    body = inner_jaxpr(param(eqn, "jaxpr"))
    ins, outs = param(eqn, "in_specs"), param(eqn, "out_specs")
    for key in _NEWLY_MANUAL:
        axes = optional_param(eqn, key)
        if axes is not None:
            break
    else:
        raise Unreadable(f"none of {', '.join(_NEWLY_MANUAL)} among its params")
    if len(ins) != len(invars(eqn)) or len(outs) != len(outvars(eqn)):
        raise Unreadable("in_specs/out_specs of another count than its operands/results")
    return body, tuple(ins), tuple(outs), frozenset(axes)


def aval(v: Any) -> Any:
    """The abstract value of a jaxpr value (its shape, dtype and, with sharding in types, sharding)."""
    return getattr(v, "aval", None)


def eqns(jaxpr: Any) -> list:
    return list(getattr(jaxpr, "eqns", ()))


def invars(x: Any) -> list:
    """The operands of an equation, or the inputs of a jaxpr."""
    return list(getattr(x, "invars", ()))


def outvars(x: Any) -> list:
    return list(getattr(x, "outvars", ()))


def constvars(jaxpr: Any) -> list:
    return list(getattr(jaxpr, "constvars", ()))


_DROP = getattr(jex, "DropVar", ())


def is_var(v: Any) -> bool:
    """Whether a jaxpr value is a variable that holds a result (not a literal, not a dropped one)."""
    return isinstance(v, jex.Var) and not isinstance(v, _DROP)


def has_effects(eqn: Any) -> bool:
    """Whether the equation has effects JAX keeps it for (a callback, an ordered io), used or not."""
    return bool(getattr(eqn, "effects", None))


def sub_jaxprs(eqn: Any) -> list:
    """Every jaxpr among an equation's params (a call's, a loop's body and condition, a cond's
    branches, a custom rule's primal), in the params' order; whatever the primitive."""
    found: list = []
    for value in (getattr(eqn, "params", None) or {}).values():
        for item in value if isinstance(value, (tuple, list)) else (value,):
            jaxpr = getattr(item, "jaxpr", item)
            if isinstance(jaxpr, jex.Jaxpr):
                found.append(jaxpr)
    return found


def frames(eqn: Any) -> list[tuple[str, int, str]]:
    """``(file, line, function)`` of the Python frames that made the equation, innermost first;
    empty where JAX kept none."""
    traceback: Any = getattr(getattr(eqn, "source_info", None), "traceback", None)
    try:
        return [(f.file_name, int(f.line_num), f.function_name) for f in traceback.frames]
    except Exception:  # (no traceback kept, or another shape of it)
        return []


def is_literal(v: Any) -> bool:
    return isinstance(v, jex.Literal)


def literal_number(v: Any) -> float | None:
    """The value of a scalar literal, or None (not a literal, or not one number)."""
    if not is_literal(v):
        return None
    try:
        value: Any = getattr(v, "val", None)
        return float(value)
    except (TypeError, ValueError):
        return None


_WARNED: set = set()


def unreadable(name: str, why: str) -> None:
    """Warns once per primitive and reason that the pass cannot follow it here."""
    key = (name, why)
    if key in _WARNED:
        return
    _WARNED.add(key)
    warnings.warn(say.steps_aside(name, why, jax.__version__), KernelPassWarning, stacklevel=2)


def reset_warnings() -> None:
    """Test-facing: forgets which steps aside were warned about, so that the next one warns again
    (``unreadable`` warns once per primitive and reason in a process; a test that expects the
    warning calls this first)."""
    _WARNED.clear()
