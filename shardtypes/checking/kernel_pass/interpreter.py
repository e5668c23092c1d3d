"""Layouts and owed sums inferred over a kernel body's jaxpr, from JAX's primitives themselves.

The side table (``kernel_layouts``) knows the values the library touches: arguments, the results
of ``shardtypes.ops`` calls, values checked against annotations. What the user computes between
them with ``jnp`` is staged into a jaxpr, and this pass follows it, whatever the mesh and with
``check_vma`` on or off:

* the body's inputs have the layouts of their in_specs (per dim, the manual mesh axes it is split
  over); values the side table knows have its layout and owed sum (they override what the pass
  infers: an op's spec string says what its result is);
* elementwise primitives keep the layout their operands agree on (a dim the operands disagree on
  becomes unknown); transpose, broadcast, reshape (dims it keeps), squeeze, slices and the other
  structural primitives move it; collectives move mesh axes (``all_gather``, ``all_to_all``,
  ``reduce_scatter``) and pay sums (``psum``, ``reduce_scatter``);
* ``dot_general`` contracting, and ``reduce_sum`` over, a dim split over mesh axes leave a sum
  owed over them (each device holds a partial sum);
* call-like primitives (``jit``, ``remat``, ``custom_jvp_call``, ``custom_vjp_call``) and
  control flow (``scan``, ``while``, ``cond``: ``loops``) are followed inside; primitives
  the catalogue knows as opaque (linear algebra, sorts, random bits) have results of unknown
  layout that vary where their operands do; a primitive with no rule, or whose params
  ``jaxpr`` (the one reader of JAX's equations) cannot read, gives unknown results and one
  ``KernelPassWarning``.

The body is traced once (``traced``): staged with ``jax.jit(body, inline=True).trace``, whose
jaxpr the pass reads, then called through that ``jax.jit`` in the shard_map's trace, which
inlines the jaxpr from jit's cache without tracing the body again.

Errors (``TypeCheckError`` naming the kernel, what was checked, both layouts, the primitive and
what made a partial sum): a check the side table deferred (an annotated local or checked
argument, an ops operand, whose layout it did not know) that the inferred layout contradicts; a
partial sum reaching a nonlinear primitive, an annotation, an op other than a reduction, or the
kernel's return; a ``dot_general`` contracting dims split over different axes; a tiled
``all_gather``/``all_to_all`` over axes its dim is not split over last.
"""


from __future__ import annotations

from typing import Any, Sequence

from typeguard import TypeCheckError

from ...language import entry_axes
from ...model import in_kernel
from ..kernel_specs import differences
from . import messages as say
from .algebra import (
    FLIP as _FLIP,
    FOLD,
    RING_OPS,
    ZERO as _ZERO,
    folded,
    keeps,
    linear_only,
    monotone as _monotone,
    over_ones as _over_ones,
    rel_join,
    rel_mul,
    rel_neg,
    ring_of,
    zero as _zero,
    zeros as _zeros,
)
from .catalogue import Arith, Family, Part, Primitive, implements
from .facts import UNKNOWN, Fact, Owed, Point, SumToken, joined_lost
from .jaxpr import (
    KernelPassWarning,
    Unreadable,
    constvars,
    invars,
    is_literal,
    is_var,
    literal_number,
    name as prim_name,
    outvars,
    shape,
    unreadable,
)
from .walk import Walk, nesting, primitive_of

__all__ = ["Pass"]

# The families whose jaxprs run on the operands as given (a partial value goes in as it is).
_FOLLOWED_INSIDE = frozenset({Family.CALL, Family.SCAN, Family.WHILE, Family.COND})
# What a partial value of blocks a psum folded may be combined with, element by element, when the
# other operand differs per device: a scaling, not a sum.
_SCALINGS = frozenset({Arith.MUL, Arith.DIV, Arith.CONVERT, Arith.NEG})


class Pass(Walk):
    """The kernel pass over one body (``run``): a ``walk.Walk`` of facts (``Fact``)."""

    part = Part.PASS

    def __init__(self, kernel: str, manual: frozenset, points: dict, sizes: dict | None = None):
        self.sizes = sizes or {}  # mesh axis -> its size
        self.kernel = kernel
        self.manual = manual  # the manual mesh axes of more than one device
        self.points = points  # Var -> [Point]
        self.head = in_kernel(kernel)
        self.quiet = 0  # > 0 while a loop's carries settle: findings wait for the settled run
        self.failures = 0

    def fail(self, message: str) -> None:
        if not self.quiet:
            raise TypeCheckError(say.refusal(message))
        self.failures += 1  # (found while a loop's carries settle: said by the settled run)

    # -- values ----------------------------------------------------------------------------

    def read(self, env: dict, v: Any) -> Any:
        if is_literal(v):
            return Fact(None if shape(v) else (), origin=_ZERO if _zero(v) else "a constant",
                        vary=frozenset(), number=literal_number(v))
        fact = env.get(v, UNKNOWN)
        if fact.dims is not None and len(fact.dims) != len(shape(v)):
            return fact.same_origin(None, fact.owed, fact.owed_by)  # (a rule's slip: never compare it)
        return fact

    def write(self, env: dict, v: Any, value: Any) -> None:
        if not is_var(v):
            return
        points = self.points.get(v)
        env[v] = self.meet(value, points) if points else value

    # -- where the side table meets the pass: a value the library declared (an op's result, laid
    # out as its spec string says), checked (an annotation, an op's operand: compared with what
    # the pass inferred, in program order) or marked (ops.per_device) ---------------------------

    def meet(self, fact: Fact, points: Sequence[Point]) -> Fact:
        """Takes what the side table declared of a value (an op's result is laid out as its spec
        string says), then, in program order, compares the inferred fact with its checks and
        applies its ``ops.per_device`` marks."""
        for point in points:
            if point.declared is not None:
                fact = self.declare(fact, point.declared)
        for point in points:
            if point.mark is not None:
                fact = self.marked(fact, *point.mark)
            elif point.what:
                self.compare(fact, point)
                fact = self.adopt(fact, point)
        return fact

    def declare(self, fact: Fact, declared: Fact) -> Fact:
        dims = declared.dims
        if dims is not None:
            dims = tuple(tuple(a for a in axes if a in self.manual) for axes in dims)
        vary = fact.vary
        if vary is None and dims is not None:
            vary = frozenset(a for axes in dims for a in axes) | (declared.owed & self.manual)
        return declared.same_origin(dims, declared.owed & self.manual, declared.owed_by, vary=vary,
                                    rel=fact.rel, counted=fact.counted, mark=fact.mark)

    def marked(self, fact: Fact, axes: frozenset, call: str) -> Fact:
        """``shardtypes.ops.per_device(value, axes)``: what is owed over ``axes`` is the value's
        own by intent; it varies over them."""
        owed = fact.owed - axes
        rel = None if fact.rel is None else tuple(e for e in fact.rel if not set(e[1]) & axes)
        vary = (fact.vary or frozenset()) | (axes & self.manual)
        return fact.same_origin(fact.dims, owed, fact.owed_by if owed else "", kind=fact.kind if owed else Owed.SUM,
                                vary=vary, rel=rel, mark=call)

    def adopt(self, fact: Fact, point: Point) -> Fact:
        """A value checked against an annotation or a spec is laid out so from there on (the dims
        the pass did not know)."""
        want = tuple(tuple(a for a in axes if a in self.manual) for axes in point.expected)
        vary = fact.vary
        if vary is None:
            vary = frozenset(a for axes in want for a in axes) | fact.owed
        if fact.dims is None:
            return fact.same_origin(want, fact.owed, fact.owed_by, vary=vary) if fact.known else \
                Fact(want, origin=point.what, vary=vary)
        if len(fact.dims) != len(want) or None not in fact.dims:
            return fact.same_origin(fact.dims, fact.owed, fact.owed_by, vary=vary)
        return fact.same_origin(tuple(w if h is None else h for h, w in zip(fact.dims, want)), fact.owed,
                                fact.owed_by, vary=vary)

    def owned(self, fact: Fact, point: Point, axes: frozenset) -> bool:
        """Whether the kernel's return annotation takes what ``fact`` owes (or is relative to)
        over ``axes`` as each device's own: out_specs put the devices' values side by side along
        a dim of the result's own (``Point.own``) split over each of them (per-device sums,
        prefixes, maxima). Blocks a psum added together (``fold``) are the result's own where
        the dims they were split along are."""
        own = point.own
        if own is None or len(own) != len(point.expected) or not axes:
            return False
        if folded(fact.kind) and axes == fact.owed:  # (where no dim says which was folded: not)
            along = [mine for dim, mine in zip(fact.dims or (), own) if set(dim or ()) & axes]
            return fact.dims is not None and len(fact.dims) == len(own) and bool(along) and all(along)
        return all(any(a in want for want, mine in zip(point.expected, own) if mine) for a in axes)

    def laid_out_ok(self, fact: Fact, point: Point, have: tuple, want: tuple) -> bool:
        """A returned value laid out otherwise than its annotation only along the result's own
        dims, split over no mesh axis the annotation does not name (blocks a psum added
        together aside): the devices' blocks put side by side are what the annotation declares."""
        own = point.own
        if own is None or len(own) != len(want):
            return False
        named = {a for axes in want for a in axes}
        combined = fact.owed if folded(fact.kind) else frozenset()
        for h, w, mine in zip(have, want, own):
            if h != w and not mine:
                return False
            if set(h) - named - combined:
                return False
        return True

    def compare(self, fact: Fact, point: Point) -> None:
        spec = "ops." in point.what
        for apart, finding in fact.lost:
            if not self.owned(fact, point, apart):
                self.fail(say.per_device_checked(finding, point.what, apart))
        if fact.owed and not (point.sums_ok and fact.kind == Owed.SUM) and not self.owned(fact, point, fact.owed):
            self.fail(say.owed_checked(self.head, point.what, fact))
        if fact.rel and not spec and not self.owned(fact, point, frozenset(a for e in fact.rel for a in e[1])):
            self.fail(say.relative_checked(self.head, fact, point.what))
        if fact.counted and not spec:
            self.fail(say.counted_checked(self.head, point.what, fact))
        if fact.dims is None or len(fact.dims) != len(point.expected):
            want = None
        else:
            want = tuple(tuple(a for a in axes if a in self.manual) for axes in point.expected)
            have = tuple(w if h is None else h for h, w in zip(fact.dims, want))
            if have != want and not self.laid_out_ok(fact, point, have, want):
                self.fail(say.laid_out(self.head, point.what, fact, want, spec,
                                       differences(have, want, 'the spec' if spec else 'the annotation')))
        if fact.vary is None and point.fallback:
            self.fail(say.fallback(self.head, point.what, point.fallback))
        if fact.vary is None or spec or point.sums_ok:
            return
        named = {a for axes in point.expected for a in axes}
        extra = sorted(a for a in fact.vary if a in self.manual and a not in named)
        if extra:
            why = (f"marked so by {fact.mark}" if fact.mark else fact.origin)
            self.fail(say.varies(self.head, point.what, extra, why, point.expected))

    # -- the jaxpr -------------------------------------------------------------------------

    def inputs(self, jaxpr: Any, env: dict, ins: Sequence[Fact]) -> None:
        for v in constvars(jaxpr):  # (the same on every device; a block of what, unknown: see _iota)
            self.write(env, v, Fact(None if shape(v) else (), origin="a constant", vary=frozenset()))
        super().inputs(jaxpr, env, ins)

    def default(self, eqn: Any, ins: list[Fact]) -> list[Fact]:
        """A primitive no record knows (or of a family the pass has no rule for): its results are
        unknown, said once with a ``KernelPassWarning``."""
        unreadable(prim_name(eqn), "no rule for this primitive")
        return [UNKNOWN] * len(outvars(eqn))

    def apply(self, eqn: Any, ins: list[Fact]) -> list[Fact]:
        """``eqn``'s facts; where the pass cannot read the equation (params in a shape it does not
        know, or any failure of its own), unknown, with a warning: it never breaks the kernel."""
        n_out = len(outvars(eqn))
        try:
            outs = self.eqn(eqn, primitive_of(eqn), ins)
            if len(outs) != n_out:
                raise Unreadable(f"{len(outs)} facts for {n_out} results")
            return outs
        except (TypeCheckError, KernelPassWarning):  # (a finding; a warning the caller made an error)
            raise
        except Unreadable as e:
            unreadable(prim_name(eqn), f"its params: {e}")
        except Exception as e:  # the pass's own failure is never the user's
            unreadable(prim_name(eqn), f"{type(e).__name__}: {e}")
        return [UNKNOWN] * n_out

    def eqn(self, eqn: Any, prim: Primitive, ins: list[Fact]) -> list[Fact]:
        """The facts of ``eqn``'s results: each operand as the primitive uses it (a partial value
        reaching a primitive that is not linear is each device's own from there on), then the
        rule of its family."""
        if prim.family is Family.UNKNOWN:
            return self.default(eqn, ins)
        if prim.family not in _FOLLOWED_INSIDE:
            ins = [self.used(prim, eqn, ins, i) for i in range(len(ins))]
        owing = [f for i, f in enumerate(ins) if f.owed and linear_only(f.kind) and not keeps(prim, f.kind)
                 and not (f.kind in _FLIP and _monotone(eqn, ins, i))]  # (a monotone map of a max)
        if owing and not prim.linear and not _over_ones(eqn):
            if any(folded(f.kind) for f in owing):
                self.nonlinear(prim.name, owing[0])
            # Each device's own from here on: right where the values stay per device (put side by
            # side by the return, gathered), the finding where they are combined or checked.
            finding = self.nonlinear_text(prim.name, owing[0])
            ins = [self.own_part(f, finding) if any(f is g for g in owing) else f for f in ins]
        return super().apply(eqn, ins)

    def used(self, prim: Primitive, eqn: Any, ins: list[Fact], i: int) -> Fact:
        """Operand ``i`` as ``eqn`` uses it. A partial maximum (minimum) through a monotone map
        (``m * 2 + 1``, ``exp(m - M)`` with ``M`` the same on every device) is still one (of the
        other kind if the map decreases); reaching anything else it is a per-device value
        relative to that local maximum from there on (see ``Fact.rel``)."""
        fact = ins[i]
        if fact.owed and fact.kind == Owed.SUM and fact.rel is not None and \
                ((prim.arith is Arith.DIV and i == 1) or prim.arith is Arith.LOG):
            # This device's part of a sum as a scale (o / l_local) or through log (lse_local):
            # relative to that part, right once rescaled by it (exp(lse_local - M) * o: FlashDecoding).
            entry: tuple = ((SumToken(fact.owed_by), tuple(sorted(fact.owed)), 1),)
            return fact.same_origin(fact.dims, frozenset(), "", kind=Owed.SUM, rel=rel_mul(fact.rel, entry))
        if not fact.owed or fact.kind not in _FLIP or keeps(prim, fact.kind) or prim.moves_only or prim.cast:
            return fact
        direction = _monotone(eqn, ins, i)
        if direction > 0:
            return fact
        if direction < 0:
            return fact.same_origin(fact.dims, fact.owed, fact.owed_by, kind=_FLIP[fact.kind])
        if folded(fact.kind):
            return fact  # (a nonlinear primitive is an error; a linear one carries it)
        if prim.compares:  # (is this device's max the global one?): a per-device predicate
            vary = None if fact.vary is None else fact.vary | fact.owed
            return fact.same_origin(fact.dims, frozenset(), "", kind=Owed.SUM, vary=vary)
        entry = ((fact.owed_by, tuple(sorted(fact.owed)), 1),)  # (a partial maximum's token: a plain str)
        return fact.same_origin(fact.dims, frozenset(), "", kind=Owed.SUM, rel=rel_mul(fact.rel, entry))

    def nonlinear(self, name: str, fact: Fact) -> None:
        self.fail(self.nonlinear_text(name, fact))

    def nonlinear_text(self, name: str, fact: Fact) -> str:
        return say.nonlinear(self.head, name, fact)

    @staticmethod
    def own_part(fact: Fact, finding: str) -> Fact:
        """``fact``'s part, taken by a nonlinear primitive: each device's own value from there on
        (``Fact.lost``), varying over the axes it owed, the ``finding`` said where it is
        combined or checked."""
        vary = None if fact.vary is None else fact.vary | fact.owed
        return fact.same_origin(fact.dims, frozenset(), "", kind=Owed.SUM, vary=vary,
                                lost=fact.lost + ((fact.owed, finding),))

    def elementwise(self, eqn: Any, ins: list[Fact]) -> Fact:
        ndim = len(shape(outvars(eqn)[0]))
        prim = primitive_of(eqn)
        name = prim.name
        shaped = [(v, f) for v, f in zip(invars(eqn), ins) if len(shape(v)) == ndim]
        dims: list = [None] * ndim
        seen = [False] * ndim
        first = None
        out_shape = shape(outvars(eqn)[0])
        lost: list = []
        owner: list = [None] * ndim  # per dim, the operand its layout was taken from
        for v, f in shaped:
            if f.dims is None or len(f.dims) != ndim:
                continue
            first = first or f
            for i, axes in enumerate(f.dims):
                if axes is None or (shape(v)[i] == 1 and out_shape[i] != 1):
                    continue  # (unknown, or broadcast along the dim by the op itself)
                if not seen[i]:
                    dims[i], seen[i], owner[i] = axes, True, f
                elif dims[i] != axes:
                    # Operands disagree: unknown from here. Both split, over different mesh axes:
                    # each device combines blocks of different parts of the dim, its own value
                    # from here on (``Fact.lost``). (One unsplit is often the pass not knowing
                    # better: a scan's stacked results, a constant's broadcast.)
                    if dims[i] and axes:
                        lost.append(self.apart(name, i, owner[i] or f, f, dims[i], axes))
                    dims[i] = None
        if first is not None and any(f.dims is None for _, f in shaped):
            first = first if ndim else None  # a 0-d value with an unknown operand is unknown
        owing = [f for f in ins if f.owed]
        owed: frozenset = frozenset()
        by, kind = "", Owed.SUM
        if owing:
            owed, by, kind = self.linear_owed(prim, eqn, ins, owing)
        vary: frozenset | None = frozenset()
        for f in ins:
            vary = None if vary is None or f.vary is None else vary | f.vary
        ring: tuple = ()
        if len(owing) == 2 == len(ins) and prim.arith is not None and RING_OPS.get(owing[0].kind) is prim.arith:
            ring = self.ring_sum(*owing)
            if ring and ring[3] == "ring" and len(ring[2]) == self.sizes.get(ring[0]):  # every device's part: the sum
                axis = ring[0]
                owed, by, ring = owed - {axis}, "", ()
                vary = None if vary is None else vary - {axis}
        elif len(owing) == 1 == len(ins) - 1 and prim.arith is Arith.ADD and owing[0].kind in RING_OPS and \
                all(_zeros(f) for f in ins if f is not owing[0]):  # 0 + x is x (a carry started at zeros)
            ring = owing[0].ring or (None, owing[0].serial, frozenset({0}), None)
        rel = self.combined_rel(prim, ins)
        counted = frozenset().union(*(f.counted for f in ins))
        if counted and self.averages(prim, eqn, counted):
            counted = frozenset()  # pmean: the psum divided by the axes' size
        base = first or (owing[0] if owing else None) or next((f for f in ins if f.known), None)
        if base is None:
            return UNKNOWN
        # (A local sum divided by how many elements it added: this device's group's mean.)
        mean = ins[0].count if prim.arith is Arith.DIV and len(ins) == 2 and ins[0].owed and ins[0].count and \
            ins[1].number == ins[0].count else 0
        return base.derived(tuple(dims) if first is not None else None, name, owed, by, kind=kind, vary=vary,
                            rel=rel, counted=counted, mark=next((f.mark for f in ins if f.mark), ""),
                            lost=joined_lost(*ins) + tuple(lost),
                            copies=frozenset().union(*(f.copies for f in ins)), ring=ring, mean=mean)

    @staticmethod
    def ring_sum(a: Fact, b: Fact) -> tuple:
        """The ring (``Fact.ring``) of the sum (max, min) of two rotations of one partial value
        holding the parts of different devices; () for any other."""
        axis = next((r[0] for r in (a.ring, b.ring) if r and r[0] is not None), None)
        if axis is None:
            return ()
        ra, rb = ring_of(a, axis), ring_of(b, axis)
        if ra is None or rb is None or ra[:2] != rb[:2] or ra[2] & rb[2]:
            return ()
        kinds = {ra[3], rb[3]} - {None}  # (a ring's shifts and a chain's do not mix)
        if len(kinds) > 1:
            return ()
        return (ra[0], ra[1], ra[2] | rb[2], kinds.pop() if kinds else None)

    def apart(self, name: str, dim: int, a: Fact, b: Fact, a_axes: tuple, b_axes: tuple) -> tuple:
        """The ``Fact.lost`` entry of an elementwise ``name`` whose operands split ``dim`` over
        different mesh axes."""
        axes = frozenset(x for x in (*a_axes, *b_axes) if x in self.manual)
        return (axes, say.apart(self.head, name, dim, a, b, a_axes, b_axes))

    def averages(self, prim: Primitive, eqn: Any, counted: frozenset) -> bool:
        """Whether ``eqn`` divides by a multiple of the counted axes' size (``pmean``: a psum
        divided by its axes' size, or multiplied by the inverse)."""
        if len(invars(eqn)) != 2 or prim.arith not in (Arith.DIV, Arith.MUL):
            return False
        value = literal_number(invars(eqn)[1]) or 0.0
        by = value if prim.arith is Arith.DIV else (1 / value if value else 0.0)
        others = sorted(self.manual - counted)
        for mask in range(1 << len(others)):  # the psum's axes: the counted ones and any others
            n = 1
            for a in list(counted) + [a for i, a in enumerate(others) if mask >> i & 1]:
                n *= self.sizes.get(a, 0)
            if n and abs(by - n) < 1e-6 * n:
                return True
        return False

    def combined_rel(self, prim: Primitive, ins: list[Fact]) -> tuple | None:
        rels = [f.rel for f in ins]
        if not any(rels) and None not in rels:
            return ()
        if prim.arith is Arith.MUL and len(ins) == 2:
            return rel_mul(rels[0], rels[1])
        if prim.arith is Arith.DIV and len(ins) == 2:
            return rel_mul(rels[0], rels[1], -1)
        if prim.arith in (Arith.ADD, Arith.SUB) and len(ins) == 2 and rels[0] and rels[1] and \
                any(isinstance(t, SumToken) for r in rels for t, _, _ in r or ()):  # (logs: offsets add)
            return rel_mul(rels[0], rels[1], 1 if prim.arith is Arith.ADD else -1)
        if prim.arith is Arith.SUB and len(ins) == 2:
            return rel_join(rels[0], rel_neg(rels[1]))
        if prim.arith is Arith.NEG:
            return rel_neg(rels[0])
        out = rels[0]
        for r in rels[1:]:
            out = rel_join(out, r)
        return out

    def linear_owed(self, prim: Primitive, eqn: Any, ins: list[Fact],
                    owing: list[Fact]) -> tuple[frozenset, str, Owed]:
        """What a linear primitive's result owes, from its operands that owe (``owing``); the
        refusals of combinations that are not linear (a product of two partial sums, a division
        by one, a partial sum added to a value the same on every device)."""
        name = prim.name
        kinds = {f.kind for f in owing}
        kind = owing[0].kind
        if kinds == {Owed.PREFIX, Owed.SUM} and prim.arith is Arith.ADD and len(owing) == 2:
            prefix, carried = sorted(owing, key=lambda f: f.kind != Owed.PREFIX)
            if self.earlier_blocks(prefix, carried):
                return frozenset(), "", Owed.SUM  # the totals of the blocks before, carried: the prefix
        if len(kinds) > 1:
            self.nonlinear(name, next((f for f in owing if f.kind == Owed.PREFIX), owing[1]))
        if folded(kind):  # blocks combined, with a value that differs from block to block
            owed = frozenset().union(*(f.owed for f in owing))
            mixed = [f for f in ins if not f.owed and not _zeros(f) and (f.vary is None or f.vary & owed)]
            if mixed and not (prim.family is Family.ELEMENTWISE and prim.arith in _SCALINGS):
                self.nonlinear(f"{name} (with a value that differs from device to device: {mixed[0].origin})",
                               owing[0])
        if kind in _FLIP:  # max(partial max, anything): still a partial max
            owed = frozenset().union(*(f.owed for f in owing))
            return owed, owing[0].owed_by, kind
        if prim.arith is Arith.MUL and len(owing) > 1:
            if all(f.kind == Owed.SUM and f.mean and f.mean == owing[0].mean and f.owed == owing[0].owed
                   for f in owing):
                return frozenset(), "", Owed.SUM  # means of this device's group multiplied: per group
            self.fail(say.product_of_sums(self.head, name, owing[0], owing[1]))
        if prim.arith is Arith.DIV and ins[1].owed:
            self.nonlinear(f"{name} (by a partial sum)", ins[1])
        if prim.arith is Arith.SELECT and ins[0].owed:
            self.nonlinear(f"{name} (choosing by a partial sum)", ins[0])
        owed = frozenset().union(*(f.owed for f in owing))
        if kind == Owed.PREFIX and prim.arith in (Arith.ADD, Arith.SUB):
            if self.offset(ins, owed):
                return frozenset(), "", Owed.SUM
            return owed, owing[0].owed_by, kind
        # (Not add_any, which only JAX's AD emits, to add up cotangents: each is one device's
        # contribution to a sum that the transpose of a pvary pays after, owed or not here.)
        if prim.arith in (Arith.ADD, Arith.SUB):
            other = [f for f in ins if not f.owed and f.vary is not None and not (f.vary & owed)
                     and not _zeros(f)]
            if other:
                self.fail(say.adds_invariant(self.head, name, owing[0], other[0]))
        return owed, owing[0].owed_by, kind

    def earlier_blocks(self, prefix: Fact, carried: Fact) -> bool:
        """Whether ``carried`` holds, on each device along the prefix's one axis, the totals of
        the blocks of every device before it: the block totals of that prefix (one origin),
        passed one device on down a chain of ppermutes (no wrap round) and added up, each
        earlier device's once (``Fact.ring``: a chain's shifts 1 .. n - 1)."""
        if len(prefix.owed) != 1 or carried.owed != prefix.owed or carried.owed_by != prefix.owed_by:
            return False
        axis = next(iter(prefix.owed))
        ring = carried.ring
        return bool(ring) and ring[0] == axis and ring[3] == "chain" and \
            ring[2] == frozenset(range(1, self.sizes.get(axis, 0)))

    def offset(self, ins: list[Fact], owed: frozenset) -> bool:
        """Whether a prefix is added an offset that differs per device along its axes and is not
        a block of split data (the earlier blocks' total)."""
        for f in ins:
            if f.owed or f.vary is None or not owed <= f.vary:
                continue
            if f.dims is not None and any(set(a or ()) & owed for a in f.dims):
                continue
            return True
        return False




@implements(Part.PASS, Family.CALL)
def _call(p: Pass, eqn: Any, ins: list[Fact]) -> list[Fact]:
    """A call: its jaxpr runs on the operands as they are."""
    inside = nesting(eqn)
    assert inside is not None
    return p.run(inside.bodies[0], ins)


@implements(Part.PASS, Family.SHARD_MAP)
def _nested_map(p: Pass, eqn: Any, ins: list[Fact]) -> list[Fact]:
    """A shard_map inside the kernel, over more mesh axes (``new``): its body runs on each
    operand's block along them (the dims its in_specs split, split further), with those axes
    manual too; its results are the blocks put side by side along the dims its out_specs name."""
    inside = nesting(eqn)
    assert inside is not None
    body, in_specs, out_specs = inside.bodies[0], inside.in_specs, inside.out_specs
    new = frozenset(a for a in inside.new_axes if p.sizes.get(a, 2) != 1)
    inner = [_blocks(f, spec, new, split=True) for f, spec in zip(ins, in_specs)]
    outer_manual = p.manual
    p.manual = outer_manual | new
    try:
        outs = p.run(body, inner)
    finally:
        p.manual = outer_manual
    return [_blocks(f, spec, new, split=False) for f, spec in zip(outs, out_specs)]


def _blocks(fact: Fact, spec: Any, new: frozenset, split: bool) -> Fact:
    """``fact`` seen inside a nested shard_map (``split``: each device's block along ``spec``'s
    axes among ``new``) or outside it (the blocks side by side along them again)."""
    if fact is UNKNOWN:
        return fact
    entries = tuple(spec) if spec is not None else ()
    named = frozenset(a for e in entries for a in entry_axes(e)) & new
    # Parts still owed over axes the out_specs split a dim over: each device's part, put side by
    # side along that dim. They stay owed, their axes on the dim, so that only a dim of the
    # result's own takes them (``Pass.owned``): named like an argument's, it claims the whole.
    kept = frozenset() if split else fact.owed & named
    dims = fact.dims
    if dims is not None:
        out: list[tuple | None] = []
        for i, axes in enumerate(dims):
            these = tuple(a for a in entry_axes(entries[i] if i < len(entries) else None) if a in new)
            if axes is None:
                out.append(None)
            elif split:
                out.append(tuple(axes) + these)
            elif kept & set(these):
                out.append(tuple(axes))
            elif tuple(axes[len(axes) - len(these):]) == these:
                out.append(tuple(axes[:len(axes) - len(these)]))
            else:
                out.append(None)  # (put side by side along another dim than it is split along)
        dims = tuple(out)
    if split:
        vary = None if fact.vary is None else fact.vary | named
        return fact.same_origin(dims, fact.owed, fact.owed_by, vary=vary)
    vary = None if fact.vary is None else fact.vary - new
    lost = tuple(e for e in fact.lost if not e[0] <= named)
    owed = (fact.owed - named) | kept
    if kept:
        kind = FOLD.get(fact.kind, fact.kind)
        by = say.nested_side_by_side(kept, fact.owed_by)
        return fact.same_origin(dims, owed, by, kind=kind, vary=vary, lost=lost)
    return fact.same_origin(dims, owed, fact.owed_by if owed else "", vary=vary, lost=lost)


@implements(Part.PASS, Family.ELEMENTWISE, Family.CAST)
def _elementwise(p: Pass, eqn: Any, ins: list[Fact]) -> list[Fact]:
    """Element by element (and check_vma's casts, which change no value)."""
    return [p.elementwise(eqn, ins)] * len(outvars(eqn))


from . import collectives, loops, structural  # noqa: E402, F401 - the rule modules register themselves

#: What the pass does with each family's results, in docs/shard-map.md's words; the page's table
#: of what the pass knows is ``catalogue.markdown_table(LAYOUT_DOCS)`` (tests/kernel_pass/test_registry.py).
LAYOUT_DOCS = {
    Family.ELEMENTWISE: "the layout its operands agree on; a dim they disagree on becomes unknown",
    Family.CAST: "unchanged (check_vma's casts of the varying type)",
    Family.TRANSPOSE: "moved with its dims",
    Family.SQUEEZE: "the kept dims keep theirs",
    Family.BROADCAST: "moved with its dims; a broadcast dim is unknown",
    Family.RESHAPE: "kept for dims it leaves alone; merged or split dims are unknown (unsplit if none was split)",
    Family.SAME_SIZE: "kept for dims whose size is unchanged; indices that vary make it vary",
    Family.CONCATENATE: "what the operands agree on, but along the joined dim",
    Family.SPLIT: "each piece keeps the layout, but along the dim it is cut",
    Family.IOTA: "the same on every device, its layout unknown",
    Family.REDUCE: "the reduced dims leave; over a split dim each device holds a partial sum, maximum or minimum",
    Family.CUMULATIVE: "kept; along a split dim each block's prefix still needs the blocks before it",
    Family.CONTRACTION: "batch and free dims keep theirs (a ragged dot's group dim leaves); contracting a dim split "
                        "over mesh axes leaves a sum owed over them; contracting dims split over different axes "
                        "is each device's own product",
    Family.CONVOLUTION: "unknown (what its operands owe is carried)",
    Family.PSUM: "kept; pays what is owed over its axes (psum a sum, pmax a maximum, pmin a minimum)",
    Family.ALL_GATHER: "tiled: the gathered axes leave the dim (all of them, or the last ones); untiled: a new "
                       "leading dim, not split",
    Family.ALL_TO_ALL: "the concatenated dim gathered, the split dim split over the axes",
    Family.REDUCE_SCATTER: "pays the sum over its axes; the scattered dim split over them",
    Family.PPERMUTE: "kept, but a dim split over the permuted axes is unknown (another device's block); a "
                     "ring that adds every device's part pays the sum",
    Family.PBROADCAST: "the source device's value on every device",
    Family.ASYNC_DONE: "the value its start computed",
    Family.AXIS_INDEX: "varies over its axes",
    Family.RESHARD: "unchanged (a layout for the Auto or Explicit axes outside the kernel's)",
    Family.CONSTRAINT: "unchanged",
    Family.IDENTITY: "unchanged",
    Family.EACH: "each operand's to its result",
    Family.OPAQUE: "unknown, varying where the operands do (what they owe is carried)",
    Family.EFFECT: "no value the pass follows",
    Family.CALL: "followed inside",
    Family.SCAN: "followed inside: a scanned slice has its operand's layout without the leading dim; a carry "
                 "what holds in every iteration",
    Family.WHILE: "followed inside: a carry has what holds in every iteration",
    Family.COND: "what its branches agree on",
    Family.SHARD_MAP: "followed inside, on each block, with its axes manual too; its results side by side along "
                      "the dims its out_specs name",
}
