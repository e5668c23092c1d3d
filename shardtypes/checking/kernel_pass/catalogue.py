"""The one registry of what each JAX primitive does: a record per primitive name, read by the
kernel pass (layouts, varying axes, sums still owed), the step cost (FLOPs, bytes, collectives)
and the activation estimate (what stays live), and the only place in shardtypes that writes a
primitive's name.

A record (``Primitive``) says which **family** the primitive is of (``Family``: what kind of
rule applies to it) and the facts about it that a rule needs and the jaxpr cannot say: whether it
is linear, monotone, a comparison, which partial value it keeps or pays, which collective it is,
whether it moves data or makes a buffer, whether XLA fuses it; and the JAX releases its name and
params were seen in. Each part registers one rule per family (``implements``), beside the rule's
definition, as JAX registers each primitive's rules beside the primitive; the parts look a record
up (``record``) and call the rule its family has, never branching on a name. A primitive no record
knows has the record ``unknown(name)``, whose family (``Family.UNKNOWN``) each part handles with
its one documented default (the pass steps aside with a warning; the cost counts its elementwise
bytes and names it; the estimate counts its results as buffers).

Adding a primitive is one entry in ``_TABLE`` (of a family the parts know: its rules follow), or,
for a primitive of a new kind, a family and a rule in each part that needs one.
``docs/shard-map.md``'s table of what the pass knows is made from here (``markdown_table``; a test
compares), and a test fails on a primitive's name written in any other module.
"""

from __future__ import annotations

import dataclasses
import enum
from typing import Any, Callable, Iterable

__all__ = ["Family", "Arith", "Data", "Owed", "Part", "Primitive", "record", "unknown", "names", "implements",
           "rule_of", "define", "RECORDS", "markdown_table", "COLLECTIVE_KINDS", "SHARDTYPES_CHECK"]


class Owed(enum.StrEnum):
    """What a partial value still owes (the pass's ``Fact.kind``; see ``facts``), and what a
    reduction or a collective makes or pays."""

    SUM = "sum"
    MAX = "max"
    MIN = "min"
    PREFIX = "prefix"
    FOLDSUM = "foldsum"  # blocks of a split dim added together by a psum
    FOLDMAX = "foldmax"
    FOLDMIN = "foldmin"


class Family(enum.Enum):
    """What kind of rule a primitive takes; each part registers one rule per family it handles."""

    ELEMENTWISE = "elementwise"
    CAST = "cast"  # check_vma's casts between varying, unreduced and reduced types: the value unchanged
    TRANSPOSE = "transpose"
    SQUEEZE = "squeeze"
    BROADCAST = "broadcast"
    RESHAPE = "reshape"
    SAME_SIZE = "same size"  # slices, pads, gathers: dims keeping their size keep their layout
    CONCATENATE = "concatenate"
    SPLIT = "split"
    IOTA = "iota"
    REDUCE = "reduce"
    CUMULATIVE = "cumulative"
    CONTRACTION = "contraction"
    CONVOLUTION = "convolution"
    PSUM = "all-reduce"
    ALL_GATHER = "all-gather"
    ALL_TO_ALL = "all-to-all"
    REDUCE_SCATTER = "reduce-scatter"
    PPERMUTE = "permute"
    PBROADCAST = "broadcast from one device"
    ASYNC_DONE = "async done"
    AXIS_INDEX = "axis index"
    RESHARD = "reshard"
    CONSTRAINT = "sharding constraint"
    IDENTITY = "identity"
    EACH = "each operand on"
    OPAQUE = "opaque"
    EFFECT = "effect"
    CALL = "call"
    SCAN = "scan"
    WHILE = "while"
    COND = "cond"
    SHARD_MAP = "shard_map"
    UNKNOWN = "unknown"


class Arith(enum.Enum):
    """The arithmetic an elementwise primitive does, where a rule needs to know (products of
    partial sums, rescaled maxima, ``pmean``'s division)."""

    ADD = "add"
    SUB = "sub"
    MUL = "mul"
    DIV = "div"
    NEG = "neg"
    MAX = "max"
    MIN = "min"
    SELECT = "select"
    CONVERT = "convert"
    ADD_ANY = "add_any"
    LOG = "log"  # of a partial sum: relative to that part (log-sum-exp)
    LESS = "less than"  # strictly: a counting loop's condition
    GREATER = "greater than"


class Data(enum.Enum):
    """What a primitive's results are in memory: a new buffer written (``WRITE``, the default),
    a view that moves no data but is a value of its own (``VIEW``: a reshape; the estimate counts
    it, the cost moves nothing) or its operand itself (``ALIAS``: casts, identities)."""

    WRITE = "write"
    VIEW = "view"
    ALIAS = "alias"


class Part(enum.Enum):
    """The three readers of the registry."""

    PASS = "kernel pass"
    COST = "step cost"
    LIVE = "activation estimate"


#: The collective a family's primitives are, in the step cost's words.
COLLECTIVE_KINDS = {Family.PSUM: "all-reduce", Family.ALL_GATHER: "all-gather", Family.ALL_TO_ALL: "all-to-all",
                    Family.REDUCE_SCATTER: "reduce-scatter", Family.PPERMUTE: "permute",
                    Family.PBROADCAST: "permute"}

_ALWAYS = "JAX 0.9.2 on"


@dataclasses.dataclass(frozen=True)
class Primitive:
    """What shardtypes knows of one JAX primitive (see the module's docstring)."""

    name: str
    family: Family
    seen: str = _ALWAYS  # the JAX releases its name and params were seen in
    linear: bool = True  # a partial sum may go through it (element by element, or linearly)
    monotone: int = 0  # +1 increasing, -1 decreasing in its one operand (a partial max stays one)
    compares: bool = False  # a comparison: of a partial max, a per-device predicate
    moves_only: bool = False  # moves, keeps or picks values without computing new ones
    keeps: frozenset = frozenset()  # the partial values (Owed) it keeps one (max of maxima)
    pays: Owed | None = None  # what a collective pays (psum: SUM) or a reduction makes
    arith: Arith | None = None
    invariant: bool = False  # a gather typed invariant by JAX (all_gather_invariant)
    writes_into: bool = False  # an update of its first operand (dynamic_update_slice)
    data: Data = Data.WRITE
    fuses: bool = False  # XLA fuses it into its readers (elementwise, broadcasts, windows)
    callback: bool = False  # runs host code: its own cost is not known
    stands_for: str = ""  # the primitive whose rule it takes (a variant, an async start)
    called_as: str = ""  # what users write that binds it, for messages

    @property
    def collective(self) -> str | None:
        """The collective it is, in the step cost's words (``COLLECTIVE_KINDS``), or None."""
        return COLLECTIVE_KINDS.get(self.family)

    @property
    def cast(self) -> bool:
        return self.family is Family.CAST

    @property
    def nested(self) -> bool:
        """Whether it runs jaxprs of its own (a call, a loop, a cond, a shard_map)."""
        return self.family in _NESTED


_NESTED = frozenset({Family.CALL, Family.SCAN, Family.WHILE, Family.COND, Family.SHARD_MAP})

RECORDS: dict[str, Primitive] = {}


def define(family: Family, names: Iterable[str] | str | dict[str, str], **facts: Any) -> None:
    """Records ``names`` (a string of names, or name -> the releases it was seen in)."""
    if isinstance(names, dict):
        for name, seen in names.items():
            define(family, [name], **{**facts, "seen": seen})
        return
    for name in names.split() if isinstance(names, str) else names:
        if name in RECORDS:
            raise ValueError(f"two records for the primitive {name!r}")
        RECORDS[name] = Primitive(name, family, **facts)


def _variants(family: Family, base: str, table: dict[str, str], **facts: Any) -> None:
    """Primitives that do what ``base`` does under other names (variants, async starts): name ->
    the releases seen in."""
    define(family, table, stands_for=base, **facts)


E = Family.ELEMENTWISE
# -- element by element ------------------------------------------------------------------------
define(E, "exp exp2 log1p expm1 tanh logistic sqrt cbrt atan asinh sinh erf", linear=False, monotone=1,
        fuses=True)
define(E, "log", linear=False, monotone=1, arith=Arith.LOG, fuses=True)
define(E, "sin cos tan asin acos acosh atanh cosh rsqrt pow integer_pow square abs sign floor ceil round erfc "
        "erf_inv lgamma digamma atan2 rem is_finite clamp nextafter and or not xor population_count shift_left "
        "shift_right_logical shift_right_arithmetic polygamma igamma igammac bessel_i0e bessel_i1e "
        "regularized_incomplete_beta random_gamma_grad zeta clz mulhi igamma_grad_a", linear=False, fuses=True)
define(E, "lt", linear=False, compares=True, arith=Arith.LESS, fuses=True)
define(E, "gt", linear=False, compares=True, arith=Arith.GREATER, fuses=True)
define(E, "le ge eq ne", linear=False, compares=True, fuses=True)
define(E, "eq_to le_to lt_to", linear=False, compares=True, fuses=True, seen="JAX 0.10 on")
define(E, "polynomial", linear=False, fuses=True, seen="JAX 0.12.0 on (erf's derivative, through exp_neg_sq)")
define(E, "log2", linear=False, monotone=1, fuses=True, seen="JAX 0.12.0 on")
define(E, "one_minus_square", linear=False, fuses=True, seen="JAX 0.12.0 on")
define(E, "max", linear=False, arith=Arith.MAX, keeps=frozenset({Owed.MAX, Owed.FOLDMAX}), fuses=True)
define(E, "min", linear=False, arith=Arith.MIN, keeps=frozenset({Owed.MIN, Owed.FOLDMIN}), fuses=True)
define(E, "add", arith=Arith.ADD, fuses=True)
define(E, "add_any", arith=Arith.ADD_ANY, fuses=True)
define(E, "sub", arith=Arith.SUB, fuses=True)
define(E, "mul", arith=Arith.MUL, fuses=True)
define(E, "div", arith=Arith.DIV, fuses=True)
define(E, "neg", arith=Arith.NEG, monotone=-1, fuses=True)
define(E, "select_n", arith=Arith.SELECT, moves_only=True, fuses=True)
define(E, "convert_element_type", arith=Arith.CONVERT, monotone=1, moves_only=True, fuses=True)
define(E, "reduce_precision copy copy_p", monotone=1, moves_only=True, fuses=True)
define(E, "real imag conj complex", fuses=True)
define(E, "bitcast_convert_type", data=Data.VIEW)
define(Family.CAST, {"pvary": "JAX 0.9.2 to 0.12", "vary_unreduced_cast_p": "JAX 0.9.2 to 0.11.2",
                      "vary_unreduced_cast": "JAX 0.12.0 on (renamed from vary_unreduced_cast_p)",
                      "reduced_vary_cast_p": "JAX 0.10.2 to 0.11.2",
                      "reduced_vary_cast": "JAX 0.12.0 on (renamed from reduced_vary_cast_p)",
                      "pcast": "JAX 0.10 on, where jax.lax.pcast binds one of its own", "preduced": "JAX 0.10.2 on"},
        data=Data.ALIAS)

# -- moving values -----------------------------------------------------------------------------
define(Family.TRANSPOSE, "transpose", moves_only=True)
define(Family.SQUEEZE, "squeeze", moves_only=True, data=Data.VIEW)
define(Family.BROADCAST, "broadcast_in_dim", moves_only=True, fuses=True)
define(Family.RESHAPE, "reshape", moves_only=True, data=Data.VIEW)
define(Family.SAME_SIZE, "slice pad rev gather", moves_only=True)
define(Family.SAME_SIZE, "dynamic_slice", moves_only=True, fuses=True)
define(Family.SAME_SIZE, "dynamic_update_slice", writes_into=True, fuses=True)
define(Family.CONCATENATE, "concatenate", moves_only=True)
define(Family.SPLIT, "split")
define(Family.IOTA, "iota")

# -- reductions and contractions ---------------------------------------------------------------
define(Family.REDUCE, "reduce_sum", pays=Owed.SUM)
define(Family.REDUCE, "reduce_max", pays=Owed.MAX, linear=False, keeps=frozenset({Owed.MAX, Owed.FOLDMAX}))
define(Family.REDUCE, "reduce_min", pays=Owed.MIN, linear=False, keeps=frozenset({Owed.MIN, Owed.FOLDMIN}))
define(Family.REDUCE, "reduce_prod argmax argmin reduce_and reduce_or reduce_xor", linear=False)
define(Family.CUMULATIVE, "cumsum")
define(Family.CUMULATIVE, "cummax", linear=False, keeps=frozenset({Owed.MAX}))
define(Family.CUMULATIVE, "cummin", linear=False, keeps=frozenset({Owed.MIN}))
define(Family.CUMULATIVE, "cumprod cumlogsumexp", linear=False)
define(Family.CONTRACTION, "dot_general", arith=Arith.MUL, called_as="jnp.einsum, @, jnp.dot")
define(Family.CONTRACTION, "ragged_dot_general", arith=Arith.MUL, called_as="jax.lax.ragged_dot",
        seen="JAX 0.9.2 on (jax.lax.ragged_dot binds it; ragged_dot_dimension_numbers)")
define(Family.CONVOLUTION, "conv_general_dilated")

# -- collectives -------------------------------------------------------------------------------
define(Family.PSUM, "psum", pays=Owed.SUM)
define(Family.PSUM, "pmax", pays=Owed.MAX, linear=False, keeps=frozenset({Owed.MAX}))
define(Family.PSUM, "pmin", pays=Owed.MIN, linear=False, keeps=frozenset({Owed.MIN}))
_variants(Family.PSUM, "psum", {"psum_invariant": "JAX 0.10.2 on", "psum2": "JAX 0.9.2",
                                "unreduced_psum": "JAX 0.9.2 on", "psum_start": "JAX 0.10.2 to 0.11.2",
                                "unreduced_psum_start": "JAX 0.10.2 to 0.11.2",
                                "psum_invariant_start": "JAX 0.10.2 on"}, pays=Owed.SUM)
_variants(Family.PSUM, "pmax", {"unreduced_pmax": "JAX 0.12.0 on"}, pays=Owed.MAX, linear=False,
          keeps=frozenset({Owed.MAX}))
_variants(Family.PSUM, "pmin", {"unreduced_pmin": "JAX 0.12.0 on"}, pays=Owed.MIN, linear=False,
          keeps=frozenset({Owed.MIN}))
define(Family.ALL_GATHER, "all_gather", moves_only=True)
_variants(Family.ALL_GATHER, "all_gather", {"all_gather_invariant": "JAX 0.10.2 on"}, moves_only=True,
          invariant=True)
_variants(Family.ALL_GATHER, "all_gather", {"all_gather_reduced": "JAX 0.10.2 on", "all_gather_start": "JAX 0.10.2 on",
                                            "all_gather_reduced_start": "JAX 0.10.2 on"}, moves_only=True)
define(Family.ALL_TO_ALL, "all_to_all")
_variants(Family.ALL_TO_ALL, "all_to_all", {"all_to_all_start": "JAX 0.10.2 on"})
define(Family.REDUCE_SCATTER, "reduce_scatter")
_variants(Family.REDUCE_SCATTER, "reduce_scatter", {
    "unreduced_reduce_scatter": "JAX 0.9.2 on",
    "reduce_scatter_start": "JAX 0.10.2 on; jax.lax.psum_scatter_start from 0.12.0",
    "unreduced_reduce_scatter_start": "JAX 0.10.2 to 0.11.2"})
define(Family.PPERMUTE, "ppermute", moves_only=True)
_variants(Family.PPERMUTE, "ppermute", {"ppermute_start": "JAX 0.10.2 on"}, moves_only=True)
define(Family.PBROADCAST, "pbroadcast", data=Data.ALIAS)
_variants(Family.PBROADCAST, "pbroadcast", {"pbroadcast_dynamic": "JAX 0.12.0 on (the source given as an array)",
                                            "pbroadcast_start": "JAX 0.10.2 to 0.11.2"}, data=Data.ALIAS)
define(Family.ASYNC_DONE, {"reduce_scatter_done": "JAX 0.10.2 on", "all_gather_done": "JAX 0.10.2 on",
                            "all_to_all_done": "JAX 0.10.2 on", "ppermute_done": "JAX 0.10.2 on",
                            "psum_done": "JAX 0.10.2 on", "pbroadcast_done": "JAX 0.10.2 to 0.11.2"}, data=Data.VIEW)
define(Family.AXIS_INDEX, "axis_index")

#: shardtypes' own compile-time check (``checking/sharding_primitive.py`` defines it).
SHARDTYPES_CHECK = "shardtypes_check_sharding"

# -- layouts, names, effects -------------------------------------------------------------------
define(Family.RESHARD, "reshard mesh_cast sharding_cast", moves_only=True)
define(Family.CONSTRAINT, "sharding_constraint", moves_only=True)
define(Family.IDENTITY, [SHARDTYPES_CHECK, *"layout_constraint relayout with_memory_space_constraint name pin "
                          "unpin program_order stop_gradient".split()], data=Data.ALIAS)
define(Family.EACH, "optimization_barrier", moves_only=True)
define(Family.EACH, "device_put", data=Data.ALIAS)
define(Family.EFFECT, "debug_print check shape_assertion dce_sink after_all create_token debug_callback")
define(Family.OPAQUE, "sort top_k", linear=False)
define(Family.OPAQUE, "pure_callback io_callback ffi_call", callback=True)
define(Family.OPAQUE, """
    approx_top_k broadcast_to cholesky cholesky_update eig eigh fft lu lu_pivots_to_permutation qr svd
    triangular_solve tridiagonal tridiagonal_solve householder_product hessenberg schur geqrf geqp3 ormqr
    symmetric_product reduce reduce_window_min scatter-max scatter-min scatter-mul scatter-sub
    select_and_gather_add select_and_scatter random_gamma random_clone philox2x32 philox4x32 threefry4x32
    iota_2x32_shape tile stack unstack zeros_like dim_as_value dimension_size scaled_dot scaled_matmul
    scaled_matmul_wrapper dot_product_attention_fwd dot_product_attention_fwd_wrapper dot_product_attention_bwd
    dot_product_attention_bwd_wrapper custom_partitioning custom_linear_solve linear_call custom_lin platform_index
    scatter-add scatter_add scatter select_and_scatter_add reduce_window_sum reduce_window_max reduce_window
    random_bits random_seed random_wrap random_unwrap random_fold_in random_split threefry2x32 rng_bit_generator
    rng_uniform argsort""")

# -- jaxprs inside -----------------------------------------------------------------------------
define(Family.CALL, "jit pjit closed_call core_call remat remat2 checkpoint custom_jvp_call custom_vjp_call "
        "custom_vjp_call_jaxpr named_call custom_jvp_call_jaxpr composite")
define(Family.CALL, "xla_metadata_call", seen="JAX 0.12.0 on")
define(Family.SCAN, "scan")
define(Family.WHILE, "while")
define(Family.COND, "cond")
define(Family.SHARD_MAP, "shard_map")
del E


def unknown(name: str) -> Primitive:
    """The record of a primitive no entry knows (``Family.UNKNOWN``: each part's default)."""
    return Primitive(name, Family.UNKNOWN, linear=False)


def record(name: str) -> Primitive:
    """The record of the primitive named ``name`` (``unknown(name)`` for one not in the registry)."""
    found = RECORDS.get(name)
    return found if found is not None else unknown(name)


def names(family: Family | None = None) -> frozenset:
    """The names the registry knows (of ``family``)."""
    return frozenset(n for n, r in RECORDS.items() if family is None or r.family is family)


# -- each part's rules, one per family ---------------------------------------------------------

_RULES: dict[Part, dict[Family, Callable]] = {part: {} for part in Part}


def implements(part: Part, *families: Family) -> Callable[[Callable], Callable]:
    """Registers the decorated function as ``part``'s rule for ``families``."""
    def register(fn: Callable) -> Callable:
        for family in families:
            held = _RULES[part].get(family)
            if held is not None and held is not fn:
                raise ValueError(f"two {part.value} rules for the family {family.value!r}: {held.__name__} and "
                                 f"{fn.__name__}")
            _RULES[part][family] = fn
        return fn
    return register


def rule_of(part: Part, prim: Primitive) -> Callable | None:
    """``part``'s rule for ``prim``'s family, or None (the part's default applies)."""
    return _RULES[part].get(prim.family)


# -- the docs' table ---------------------------------------------------------------------------

def markdown_table(docs: dict[Family, str]) -> str:
    """docs/shard-map.md's table of what the pass does with each family (``docs``: family -> the
    result's layout, in words), every primitive of the registry under its family."""
    lines = ["| family | primitives | the result's layout |", "| --- | --- | --- |"]
    for family, said in docs.items():
        listed = sorted(names(family))
        if listed:
            lines.append(f"| {family.value} | {', '.join(f'`{n}`' for n in listed)} | {said} |")
    return "\n".join(lines)
