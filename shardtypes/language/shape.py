"""The shape language: parsing, printing and partition specs. Pure Python, no JAX at import.

A shape string is a whitespace-separated list of dims; the empty string is a scalar::

    ShapeSpec.parse(b'batch/d seq embed/t')   # 3 dims; batch over mesh axis d, embed over t

Each dim is a *size* optionally followed by ``/axis`` one or more times:

============  =============================================================
``batch``     a name: bound on first sight, checked afterwards
``128``       a fixed size
``_``         any size, not bound
``...``       zero or more dims, not bound
``*lead``     zero or more dims, bound together as a tuple
``#batch``    size 1, or the bound size of ``batch`` (broadcasting)
``seq+1``     arithmetic over names and integers: ``+ - * //`` and parentheses
============  =============================================================

``batch/d/e`` shards ``batch`` over mesh axes ``d`` then ``e``. ``embed/?`` leaves the dim's layout
to XLA (``PartitionSpec.UNCONSTRAINED``): ``?`` is not an identifier, so it cannot clash with a
mesh axis or logical axis name, and it stands alone after its ``/``. Note that ``//`` inside a size is
floor division (``heads//kv/t`` is ``heads//kv`` sharded over ``t``).
"""

from __future__ import annotations

import dataclasses
import functools
import re
from typing import TYPE_CHECKING, Any, Union

from .doc_links import SHAPE_STRING, linked, unlinked
from .sizes import IDENT, DimError, Node, evaluate, expr_names, parse_expr

if TYPE_CHECKING:
    from jax.sharding import PartitionSpec

__all__ = ["DimSpec", "ShapeSpec", "ShapeSpecError", "entry_axes", "axes_entry", "UNCONSTRAINED_AXES",
           "is_unconstrained"]

_INT = re.compile(r"[0-9]+\Z")

# Dim kinds.
NAMED = "named"
FIXED = "fixed"
ANY = "any"
ELLIPSIS = "ellipsis"
VARIADIC = "variadic"
BROADCAST = "broadcast"
EXPR = "expr"


class ShapeSpecError(ValueError):
    """A malformed shape string. The message quotes the string and points at the bad dim."""

    def __init__(self, spec: object, problem: str, span: tuple[int, int] | None = None):
        problem = unlinked(problem)  # a DimError's words, without its link: this error adds it
        self.spec = spec
        self.problem = problem
        self.span = span
        if isinstance(spec, (str, bytes)) and len(spec) > _LONG:
            # No caret under a string that long: its head and tail say which it is.
            shown = f"{spec[:60]!r}...{spec[-20:]!r} ({len(spec)} characters)"
            message = f"invalid shape string {shown}: {problem}"
        elif isinstance(spec, str) and span is not None:
            # The caret goes under the repr, where a tab or newline takes two characters.
            start, end = span
            offset = len(repr(spec[:start])) - 1
            width = len(repr(spec[start:end])) - 2
            pointer = " " * offset + "^" * max(1, width)
            message = f"invalid shape string {spec!r}: {problem}\n    {spec!r}\n    {pointer}"
        else:
            message = f"invalid shape string {spec!r}: {problem}"
        super().__init__(message)

    def __str__(self) -> str:
        # The docs section as the last line, once (docs/annotation-language.md, "ShapeSpecError").
        return linked(super().__str__(), SHAPE_STRING)

    def __reduce__(self) -> tuple[Any, ...]:
        # Rebuilt from what it was made of (the default would call it with the message alone).
        return (type(self), (self.spec, self.problem, self.span), self.__dict__ or None)


class _Unconstrained(tuple):
    """The axes of a dim whose layout XLA decides (``embed/?``, or a rule to
    ``PartitionSpec.UNCONSTRAINED``). It holds no mesh axes, so code that only collects axes
    (which axes are used, which the mesh lacks) sees none; code that compares or places a layout
    asks ``is_unconstrained``. Equal to ``()`` as a tuple, so ``DimSpec`` keeps a flag of its own."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "UNCONSTRAINED"

    def __reduce__(self) -> tuple[Any, ...]:
        return (_unconstrained, ())


UNCONSTRAINED_AXES = _Unconstrained()


def _unconstrained() -> _Unconstrained:
    return UNCONSTRAINED_AXES


def is_unconstrained(axes: object) -> bool:
    """Whether one dim's axes (of a layout, a target or a DimSpec) mean "XLA decides"."""
    return isinstance(axes, _Unconstrained)


# A shape string longer than this is quoted by its head and tail in messages.
_LONG = 200


def _split_size(text: str) -> tuple[str, list[str]]:
    """Splits ``size/ax1/ax2`` at the first '/' that is not part of a '//' operator."""
    i = 0
    while i < len(text):
        if text[i] == "/":
            if text.startswith("//", i) and i > 0:
                i += 2
                continue
            return text[:i], text[i + 1 :].split("/")
        i += 1
    return text, []


# ---------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class DimSpec:
    """One parsed dim: its size text (``shape``), its mesh axes (``sharding``) and its kind.

    >>> DimSpec.parse('embed/t')
    DimSpec(shape='embed', sharding=('t',), kind='named')
    """

    shape: str
    sharding: tuple[str, ...]
    kind: str
    expr: int | Node | None = dataclasses.field(default=None, repr=False, compare=False)
    # ``embed/?``: the sharding is UNCONSTRAINED_AXES (no axes); this flag keeps ``embed/?`` and
    # ``embed`` unequal (the sentinel compares equal to ``()``).
    unconstrained: bool = dataclasses.field(default=False, repr=False)

    @property
    def name(self) -> str | None:
        """The bound name: ``batch`` for ``batch``, ``*batch`` and ``#batch``; else None."""
        if self.kind == NAMED:
            return self.shape
        if self.kind in (VARIADIC, BROADCAST):
            return self.shape[1:]
        return None

    @property
    def is_variadic(self) -> bool:
        return self.kind in (ELLIPSIS, VARIADIC)

    @property
    def names(self) -> frozenset[str]:
        """Every dimension name this dim reads or binds."""
        if self.kind == EXPR and isinstance(self.expr, tuple):
            return expr_names(self.expr)
        name = self.name
        return frozenset([name]) if name is not None else frozenset()

    @staticmethod
    def parse(dim: Union[str, bytes]) -> "DimSpec":
        if isinstance(dim, bytes):
            try:
                dim = dim.decode("utf-8")
            except UnicodeDecodeError:
                raise ShapeSpecError(dim, "bytes are not valid UTF-8") from None
        if not isinstance(dim, str):
            raise ShapeSpecError(dim, f"a dim must be str or bytes, not {type(dim).__name__}")
        try:
            return _parse_dim(dim)
        except DimError as e:
            raise ShapeSpecError(dim, str(e), (0, len(dim))) from None

    def __str__(self) -> str:
        if self.unconstrained:
            return f"{self.shape}/?"
        return "/".join((self.shape,) + self.sharding)


@functools.lru_cache(maxsize=4096)
def _parse_dim(text: str) -> DimSpec:
    if not text or any(c.isspace() for c in text):
        raise DimError(f"a dim cannot be empty or contain whitespace: {text!r}")
    size, axes = _split_size(text)
    if size == "":
        raise DimError(f"dim {text!r} has no size before '/'")
    if "?" in axes:
        if axes != ["?"]:
            raise DimError(f"dim {text!r}: '?' (XLA decides the dim's layout) stands alone after one '/', "
                            f"as in {size + '/?'!r}, not beside mesh axes")
        if size in ("...",) or size[0] == "*":
            raise DimError(f"variadic dim {text!r} cannot be unconstrained: mark the dims it stands for")
        plain = _parse_dim(size)
        return DimSpec(plain.shape, UNCONSTRAINED_AXES, plain.kind, plain.expr, True)
    for axis in axes:
        if axis == "":
            raise DimError(f"dim {text!r} has an empty mesh axis name (a '/' with nothing after it)")
        if not IDENT.match(axis):
            raise DimError(f"dim {text!r}: mesh axis {axis!r} is not an identifier")
    if len(set(axes)) != len(axes):
        raise DimError(f"dim {text!r} names a mesh axis twice")
    sharding = tuple(axes)
    expr: int | Node | None = None
    if size == "...":
        kind = ELLIPSIS
    elif size == "_":
        kind = ANY
    elif size[0] == "*":
        if not IDENT.match(size[1:]) or size[1:] == "_":
            raise DimError(f"dim {text!r}: '*' must be followed by a name other than '_', as in '*batch'")
        kind = VARIADIC
    elif size[0] == "#":
        if not IDENT.match(size[1:]) or size[1:] == "_":
            raise DimError(f"dim {text!r}: '#' must be followed by a name other than '_', as in '#batch'")
        kind = BROADCAST
    elif _INT.match(size):
        kind = FIXED
        expr = int(size)
    elif IDENT.match(size):
        kind = NAMED
    else:
        expr = parse_expr(size)
        kind = EXPR
        if not expr_names(expr):  # a constant ('2-3', '4//0'): a size it can never be is an error now
            try:
                value = evaluate(expr, lambda name: 0)
            except ZeroDivisionError:
                raise DimError(f"dim {text!r} divides by zero") from None
            if value < 0:
                raise DimError(f"dim {text!r} is the constant {value}: a size cannot be negative")
    if kind in (ELLIPSIS, VARIADIC) and sharding:
        raise DimError(f"variadic dim {text!r} cannot be sharded: shard the dims it stands for")
    return DimSpec(size, sharding, kind, expr)


@dataclasses.dataclass(frozen=True)
class ShapeSpec:
    """A parsed shape string.

    >>> spec = ShapeSpec.parse(b'batch/d seq embed/t')
    >>> str(spec)
    'batch/d seq embed/t'
    >>> spec.partition_spec()
    P('d', None, 't')
    """

    dims: tuple[DimSpec, ...]

    @staticmethod
    def parse(spec: Union[str, bytes]) -> "ShapeSpec":
        if isinstance(spec, bytes):
            try:
                spec = spec.decode("utf-8")
            except UnicodeDecodeError:
                raise ShapeSpecError(spec, "bytes are not valid UTF-8") from None
        elif not isinstance(spec, str):
            raise ShapeSpecError(
                spec, f"a shape string must be str or bytes, not {type(spec).__name__}"
            )
        return _parse_shape(spec)

    @property
    def variadic_index(self) -> int | None:
        for i, dim in enumerate(self.dims):
            if dim.is_variadic:
                return i
        return None

    @property
    def mesh_axes(self) -> tuple[str, ...]:
        """Every mesh axis the spec names, in order."""
        return tuple(axis for dim in self.dims for axis in dim.sharding)

    @property
    def is_sharded(self) -> bool:
        return any(dim.sharding for dim in self.dims)

    def partition_spec(self, ndim: int | None = None) -> PartitionSpec:
        """The ``jax.sharding.PartitionSpec`` of this shape.

        A dim with no axes gives None, one axis gives ``'d'``, several give ``('d', 'e')``.
        With a variadic dim the positions of later dims depend on the rank: pass ``ndim``.
        """
        from jax.sharding import PartitionSpec

        if ndim is not None:
            if isinstance(ndim, bool) or not isinstance(ndim, int):
                raise TypeError(f"ShapeSpec.partition_spec: ndim must be an int or None, got {ndim!r}")
            if ndim < 0:
                raise ValueError(f"ShapeSpec.partition_spec: ndim must be non-negative, got {ndim}")
        entries: list[object] = []  # axis names, tuples of them, None, P.UNCONSTRAINED
        var = self.variadic_index
        if var is None and ndim is not None and ndim != len(self.dims):
            raise ShapeSpecError(str(self), f"rank {ndim} does not match the {len(self.dims)} dims")
        for i, dim in enumerate(self.dims):
            if i == var:
                if ndim is None:
                    if any(d.sharding or d.unconstrained for d in self.dims[i + 1 :]):
                        raise ShapeSpecError(
                            str(self),
                            f"the variadic dim {str(dim)!r} comes before sharded dims, so their "
                            "positions depend on the rank: call partition_spec(ndim=...)",
                        )
                    break
                fill = ndim - (len(self.dims) - 1)
                if fill < 0:
                    raise ShapeSpecError(
                        str(self), f"rank {ndim} is too small for {len(self.dims) - 1} fixed dims"
                    )
                entries.extend([None] * fill)
                continue
            if dim.unconstrained:
                entries.append(PartitionSpec.UNCONSTRAINED)
            elif not dim.sharding:
                entries.append(None)
            elif len(dim.sharding) == 1:
                entries.append(dim.sharding[0])
            else:
                entries.append(tuple(dim.sharding))
        return PartitionSpec(*entries)

    def __str__(self) -> str:
        return " ".join(str(dim) for dim in self.dims)


@functools.lru_cache(maxsize=4096)
def _parse_shape(spec: str) -> ShapeSpec:
    dims: list[DimSpec] = []
    variadic_at = None
    seen_axes: dict[str, str] = {}
    for m in re.finditer(r"\S+", spec):
        text = m.group()
        try:
            dim = _parse_dim(text)
        except DimError as e:
            raise ShapeSpecError(spec, f"dim {len(dims)}: {e}", m.span()) from None
        if dim.is_variadic:
            if variadic_at is not None:
                raise ShapeSpecError(
                    spec,
                    f"dim {len(dims)} {text!r} is a second variadic dim (after "
                    f"{variadic_at!r}); at most one of '...' and '*name' per shape",
                    m.span(),
                )
            variadic_at = text
        for axis in dim.sharding:
            if axis in seen_axes and LOGICAL_NAME[0](axis):
                raise ShapeSpecError(
                    spec,
                    f"logical axis {axis!r} names both {seen_axes[axis]!r} and {text!r}; under the active "
                    f"axis rules a logical axis names at most one dim of an array (the mesh axes its rule "
                    f"gives can shard only one): give the other dim a logical name of its own, with its own rule",
                    m.span(),
                )
            if axis in seen_axes:
                raise ShapeSpecError(
                    spec,
                    f"mesh axis {axis!r} shards both {seen_axes[axis]!r} and {text!r}; "
                    f"a mesh axis can shard at most one dim (under axis rules {axis!r} is a "
                    f"logical axis name, and one of those also names at most one dim of an "
                    f"array: give the other dim a logical name of its own, with its own rule)",
                    m.span(),
                )
            seen_axes[axis] = text
        _refuse_variadic_name_reused(spec, dims, dim, text, m.span())
        dims.append(dim)
    return ShapeSpec(tuple(dims))


def _refuse_variadic_name_reused(spec: str, dims: list[DimSpec], dim: DimSpec, text: str,
                                 span: tuple[int, int]) -> None:
    """``*b`` binds ``b`` to a tuple of sizes (the dims it stands for), a dim ``b``, ``#b`` or
    ``b+1`` to one size: one name cannot be both in a shape."""
    for i, earlier in enumerate(dims):
        variadic, single = (earlier, dim) if earlier.kind == VARIADIC else (dim, earlier)
        if variadic.kind != VARIADIC or single.kind in (VARIADIC, ELLIPSIS):
            continue
        name = variadic.shape[1:]
        if name in single.names:
            one = "reads it as one size" if single.kind == EXPR else "binds it to one size"
            raise ShapeSpecError(
                spec,
                f"dim {len(dims)} {text!r} and dim {i} {str(earlier)!r} both name {name!r}: "
                f"{str(variadic)!r} binds it to several dims (a tuple of sizes), {str(single)!r} {one}; "
                f"give the variadic dims a name of their own (as '*{name}s')",
                span,
            )


# Whether a name after '/' is a logical axis name of the active axis rules, for the words of an
# error only: this layer knows nothing of rules, the context layer sets it (rules.py).
LOGICAL_NAME: list = [lambda name: False]


def entry_axes(entry: object) -> tuple[str, ...]:
    """The mesh axes of one PartitionSpec entry: None -> (), 'd' -> ('d',), ('d', 'e') as is.
    (``PartitionSpec.UNCONSTRAINED`` has no axes either.)"""
    if entry is None or not isinstance(entry, (str, tuple, list)):
        return ()
    return (entry,) if isinstance(entry, str) else tuple(entry)


def axes_entry(axes: tuple[str, ...]) -> object:
    """The PartitionSpec entry for mesh axes: () -> None, ('d',) -> 'd', ('d', 'e') as is,
    UNCONSTRAINED_AXES -> PartitionSpec.UNCONSTRAINED."""
    if is_unconstrained(axes):
        from jax.sharding import PartitionSpec

        return PartitionSpec.UNCONSTRAINED
    return None if not axes else axes[0] if len(axes) == 1 else tuple(axes)
