"""An independent oracle for the annotation language and the sharding rule, written from the
contract (docs/design.md) and the user docs (docs/annotation-language.md, docs/checking.md) only,
never from shardtypes' implementation. It parses a shape string, checks sizes against a dimension
table (binding rules across several values of one call, pre-bound sizes), checks dtypes, and
decides whether an array's layout equals the annotation's (both padded to the rank, mesh axes of
size 1 dropped on both sides).

test_oracle.py compares its verdicts with the checker's on generated cases;
test_oracle_corners.py decides the corners the docs leave open (and pins the ``PENDING`` ones).
"""

from __future__ import annotations

import dataclasses
import re

import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec as P

from shardtypes import (
    anydtype,
    bf16,
    bool_,
    f16,
    f32,
    floating,
    i32,
    integer,
    u8,
)

# =============================================================================================
# The oracle, from the docs
#
# Shape string: whitespace-separated dims; '' is a scalar. A dim is a size, then '/axis' zero or
# more times. Only a single '/' starts the axes ('//' is floor division inside a size). Axis names
# are identifiers; a dim names an axis at most once; a mesh axis shards at most one dim. Sizes:
# name, integer literal, '_', '...', '*name', '#name', or an expression (+ - * // and parentheses
# over names and integers, no spaces, no unary operators, no '_'). At most one of '...'/'*name',
# and it cannot be sharded.

IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")  # ASCII: the docs reject 'bätch'
_INT = re.compile(r"[0-9]+\Z")
_TOKEN = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)|([0-9]+)|(//|[-+*()])")


# Where the checker does not (yet) do what the oracle says, the oracle mirrors today's checker
# behind one of these switches, so that the property tests keep testing everything else; a strict
# xfail test pins each one (in test_oracle_corners.py). Set a switch to False when its test passes.
PENDING = {
    # bug: '#lead' with 'lead' bound to a tuple by '*lead' passes for size 1
    # (test_corner_broadcast_of_a_tuple_bound_name)
    "broadcast_of_tuple": False,
    # decided: '_' is not a name, so '*_' and '#_' are errors, like '_+1'; today they bind '_'
    # (test_corner_underscore_is_not_a_name)
    "underscore_names": False,
}


class OracleParseError(Exception):
    """The oracle rejects a shape string."""

@dataclasses.dataclass(frozen=True)
class ODim:
    kind: str  # named, fixed, any, ellipsis, variadic, broadcast, expr
    shape: str  # the size text
    sharding: tuple[str, ...]
    name: str | None = None  # the name a dim binds or refers to (named, *name, #name)
    names: frozenset = frozenset()  # every name it reads or binds
    value: int | None = None  # fixed size
    expr: tuple | None = None  # expression tree: ('int', n) | ('name', x) | (op, left, right)


def o_split_axes(token: str) -> tuple[str, tuple[str, ...]]:
    i = 0
    while i < len(token):
        if token[i] == "/":
            if token[i + 1 : i + 2] == "/":
                i += 2
                continue
            return token[:i], tuple(token[i + 1 :].split("/"))
        i += 1
    return token, ()


def o_parse_expr(text: str) -> tuple:
    tokens = []
    pos = 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m or m.end() == pos:
            raise OracleParseError(f"bad character in {text!r}")
        if m.group(1) is not None:
            if m.group(1) == "_":
                raise OracleParseError("'_' in an expression")
            tokens.append(("name", m.group(1)))
        elif m.group(2) is not None:
            tokens.append(("int", int(m.group(2))))
        else:
            tokens.append(("op", m.group(3)))
        pos = m.end()

    def peek(i):
        return tokens[i] if i < len(tokens) else None

    def expr(i):
        left, i = term(i)
        while peek(i) in (("op", "+"), ("op", "-")):
            op = tokens[i][1]
            right, i = term(i + 1)
            left = (op, left, right)
        return left, i

    def term(i):
        left, i = factor(i)
        while peek(i) in (("op", "*"), ("op", "//")):
            op = tokens[i][1]
            right, i = factor(i + 1)
            left = (op, left, right)
        return left, i

    def factor(i):
        tok = peek(i)
        if tok is None:
            raise OracleParseError("operand expected")
        if tok[0] in ("name", "int"):
            return tok, i + 1
        if tok == ("op", "("):
            inner, i = expr(i + 1)
            if peek(i) != ("op", ")"):
                raise OracleParseError("unbalanced parentheses")
            return inner, i + 1
        raise OracleParseError(f"unexpected {tok}")

    tree, end = expr(0)
    if end != len(tokens):
        raise OracleParseError("trailing tokens")
    return tree


def o_expr_names(tree) -> frozenset:
    if tree[0] == "name":
        return frozenset([tree[1]])
    if tree[0] == "int":
        return frozenset()
    return o_expr_names(tree[1]) | o_expr_names(tree[2])


def o_parse_dim(token: str) -> ODim:
    size, axes = o_split_axes(token)
    for axis in axes:
        if not IDENT.match(axis):
            raise OracleParseError(f"bad axis {axis!r}")
    if len(set(axes)) != len(axes):
        raise OracleParseError("axis named twice in a dim")
    if size == "...":
        if axes:
            raise OracleParseError("sharded variadic")
        return ODim("ellipsis", size, ())
    if size == "_":
        return ODim("any", size, axes)
    if size[:1] in ("*", "#") and size[1:] == "_" and not PENDING["underscore_names"]:
        raise OracleParseError("'_' is not a name")
    if size.startswith("*"):
        if not IDENT.match(size[1:]) or axes:
            raise OracleParseError("bad *name")
        return ODim("variadic", size, (), name=size[1:], names=frozenset([size[1:]]))
    if size.startswith("#"):
        if not IDENT.match(size[1:]):
            raise OracleParseError("bad #name")
        return ODim("broadcast", size, axes, name=size[1:], names=frozenset([size[1:]]))
    if _INT.match(size):
        return ODim("fixed", size, axes, value=int(size))
    if IDENT.match(size):
        return ODim("named", size, axes, name=size, names=frozenset([size]))
    if not size:
        raise OracleParseError("empty size")
    tree = o_parse_expr(size)
    names = o_expr_names(tree)
    if not names:  # a constant: a size no array can have is refused when written (issue 19)
        try:
            value = o_eval(tree, {})
        except Reject:
            raise OracleParseError("a constant that divides by zero") from None
        if value < 0:
            raise OracleParseError("a negative constant size")
    return ODim("expr", size, axes, names=names, expr=tree)


def o_parse(spec) -> tuple[ODim, ...]:
    if isinstance(spec, bytes):
        try:
            spec = spec.decode("utf-8")
        except UnicodeDecodeError:
            raise OracleParseError("not UTF-8") from None
    parsed = tuple(o_parse_dim(t) for t in spec.split())
    if sum(d.kind in ("ellipsis", "variadic") for d in parsed) > 1:
        raise OracleParseError("two variadic dims")
    axes = [a for d in parsed for a in d.sharding]
    if len(set(axes)) != len(axes):
        raise OracleParseError("a mesh axis shards two dims")
    variadic = [d.name for d in parsed if d.kind == "variadic"]
    if variadic and any(variadic[0] in d.names for d in parsed if d.kind != "variadic"):
        raise OracleParseError("a name bound by '*name' used as a single dim of the same shape")
    return parsed


class Reject(Exception):
    """The oracle rejects a value."""


def o_eval(tree, table):
    kind = tree[0]
    if kind == "int":
        return tree[1]
    if kind == "name":
        if tree[1] not in table:
            raise Reject("expression reads an unbound name")
        value = table[tree[1]]
        if isinstance(value, tuple):
            raise Reject("expression reads a tuple")
        return value
    left, right = o_eval(tree[1], table), o_eval(tree[2], table)
    if kind == "+":
        return left + right
    if kind == "-":
        return left - right
    if kind == "*":
        return left * right
    if right == 0:
        raise Reject("division by zero")
    return left // right


def o_align(spec: tuple[ODim, ...], rank: int) -> list[tuple[ODim, slice | int]]:
    """Each dim of the spec with the position (or, for a variadic, the slice) it covers."""
    fixed = [d for d in spec if d.kind not in ("ellipsis", "variadic")]
    if len(fixed) == len(spec):
        if rank != len(spec):
            raise Reject("rank")
        return list(zip(spec, range(rank)))
    if rank < len(fixed):
        raise Reject("rank")
    v = next(i for i, d in enumerate(spec) if d.kind in ("ellipsis", "variadic"))
    after = len(spec) - v - 1
    out = [(d, i) for i, d in enumerate(spec[:v])]
    out.append((spec[v], slice(v, rank - after)))
    out += [(d, rank - after + j) for j, d in enumerate(spec[v + 1 :])]
    return out


def o_check_sizes(spec: tuple[ODim, ...], shape: tuple[int, ...], table: dict) -> dict:
    """The table after a value of ``shape`` passes ``spec``; raises Reject (table untouched)."""
    aligned = o_align(spec, len(shape))
    local = dict(table)
    # Binding dims first ('wherever they appear in it'): names, *names, then #names.
    for dim, where in aligned:
        if dim.kind == "variadic":
            found = tuple(shape[where])
            if dim.name in local:
                if local[dim.name] != found or not isinstance(local[dim.name], tuple):
                    raise Reject("variadic clash")
            else:
                local[dim.name] = found
        elif dim.kind == "named":
            found = shape[where]
            if dim.name in local:
                if isinstance(local[dim.name], tuple) or local[dim.name] != found:
                    raise Reject("named clash")
            else:
                local[dim.name] = found
    for dim, where in aligned:
        if dim.kind == "broadcast":
            found = shape[where]
            bound = local.get(dim.name)
            if isinstance(bound, tuple) and not (PENDING["broadcast_of_tuple"] and found == 1):
                raise Reject("#name of a name bound to several dims")
            if found == 1:
                continue
            if bound is None:
                local[dim.name] = found
            elif bound != found:
                raise Reject("broadcast clash")
    for dim, where in aligned:
        if dim.kind == "fixed" and shape[where] != dim.value:
            raise Reject("fixed")
        if dim.kind == "expr" and o_eval(dim.expr, local) != shape[where]:
            raise Reject("expr")
    return local


def o_layout(spec: tuple[ODim, ...], rank: int) -> list[tuple[str, ...]]:
    """The annotation's axes per array dim (the rank is known to fit)."""
    layout = [()] * rank
    for dim, where in o_align(spec, rank):
        if isinstance(where, int):
            layout[where] = dim.sharding
    return layout


def o_normalise(entries, rank: int, mesh: dict[str, int]) -> list[tuple[str, ...]]:
    """A PartitionSpec's entries padded to ``rank``, each a tuple of axes of size > 1."""
    out = []
    for i in range(rank):
        entry = entries[i] if i < len(entries) else None
        if entry is None or entry is P.UNCONSTRAINED:
            axes = ()
        elif isinstance(entry, str):
            axes = (entry,)
        else:
            axes = tuple(entry)
        out.append(tuple(a for a in axes if mesh[a] > 1))
    return out


DTYPE_CLASSES = {
    f32: {"float32"},
    bf16: {"bfloat16"},
    f16: {"float16"},
    i32: {"int32"},
    u8: {"uint8"},
    bool_: {"bool"},
    floating: {"float32", "bfloat16", "float16"},
    integer: {"int32", "uint8"},
    anydtype: {"float32", "bfloat16", "float16", "int32", "uint8", "bool"},
}
VALUE_DTYPES = ["float32", "bfloat16", "float16", "int32", "uint8", "bool"]


@dataclasses.dataclass
class Value:
    """One generated value: what it is, and what the oracle needs to know about it."""

    kind: str  # numpy, sds, sds_unsharded, jax, jax_single
    shape: tuple[int, ...]
    dtype: str
    mesh: dict[str, int] | None = None  # axis name -> size
    entries: tuple = ()  # PartitionSpec entries


def o_check(cls, spec_text, value: Value, table: dict) -> dict:
    """The oracle's verdict on one value: the new table, or Reject."""
    spec = o_parse(spec_text)
    if value.dtype not in DTYPE_CLASSES[cls]:
        raise Reject("dtype")
    new_table = o_check_sizes(spec, value.shape, table)
    annotated = o_layout(spec, len(value.shape))
    wanted_axes = [a for axes in annotated for a in axes]
    if value.kind in ("numpy", "jax_single"):
        if wanted_axes:
            raise Reject("host data or single device, annotation sharded")
    elif value.kind in ("sds", "jax"):
        if any(a not in value.mesh for a in wanted_axes):
            raise Reject("axis not in the mesh")
        rank = len(value.shape)
        if o_normalise(value.entries, rank, value.mesh) != o_normalise(
            tuple(annotated), rank, value.mesh
        ):
            raise Reject("layout")
    # sds_unsharded: a sharding of None is not checked
    return new_table


def numpy_value(shape, dtype: str):
    """A numpy array of this shape and dtype, with no memory behind it."""
    np_dtype = jnp.dtype(dtype)
    return np.broadcast_to(np.zeros((), np_dtype), shape)
