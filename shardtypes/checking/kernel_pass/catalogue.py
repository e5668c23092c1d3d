"""Every JAX primitive the kernel pass (and the activation estimate, ``tools/activations``) names,
by what it does, in one place: where a rule must name a primitive (what it does cannot be read
from the jaxpr), the name is here, and where JAX renamed one or a release added one, with the
releases it was seen in. ``tests/kernel_pass/test_jax_releases.py`` traces each public collective on
every CI JAX and fails on a ``KernelPassWarning``.
"""

from __future__ import annotations

__all__ = ["CASTS", "VARIANTS", "ASYNC_STARTS", "ASYNC_DONES", "CALLS", "ELEMENTWISE_ADDED", "NONLINEAR", "ELEMENTWISE",
           "COMPARISONS", "STRUCTURAL", "OPAQUE", "IDENTITY", "EFFECTS", "LOOPS", "is_cast", "standing_for"]

#: check_vma's casts between varying, unreduced and reduced types: the value is unchanged.
CASTS: dict[str, str] = {
    "pvary": "JAX 0.9.2 to 0.12",
    "vary_unreduced_cast_p": "JAX 0.9.2 to 0.11.2",
    "vary_unreduced_cast": "JAX 0.12.0 on (renamed from vary_unreduced_cast_p)",
    "reduced_vary_cast_p": "JAX 0.10.2 to 0.11.2",
    "reduced_vary_cast": "JAX 0.12.0 on (renamed from reduced_vary_cast_p)",
    "pcast": "JAX 0.10 on, where jax.lax.pcast binds one of its own",
    "preduced": "JAX 0.10.2 on",
}

#: Collectives that do what another does, under another name: name -> (the one whose rule
#: applies, the releases seen in).
VARIANTS: dict[str, tuple[str, str]] = {
    "psum_invariant": ("psum", "JAX 0.10.2 on"),
    "psum2": ("psum", "JAX 0.9.2"),
    "unreduced_psum": ("psum", "JAX 0.9.2 on"),
    "unreduced_pmax": ("pmax", "JAX 0.12.0 on"),
    "unreduced_pmin": ("pmin", "JAX 0.12.0 on"),
    "all_gather_invariant": ("all_gather", "JAX 0.10.2 on"),
    "all_gather_reduced": ("all_gather", "JAX 0.10.2 on"),
    "unreduced_reduce_scatter": ("reduce_scatter", "JAX 0.9.2 on"),
    "pbroadcast_dynamic": ("pbroadcast", "JAX 0.12.0 on (the source given as an array)"),
}

#: The two halves of an async collective: the start does what the collective does (its result a
#: future that holds it); the done hands the future's value on. name -> (collective, releases).
ASYNC_STARTS: dict[str, tuple[str, str]] = {
    "reduce_scatter_start": ("reduce_scatter", "JAX 0.10.2 on; jax.lax.psum_scatter_start from 0.12.0"),
    "unreduced_reduce_scatter_start": ("reduce_scatter", "JAX 0.10.2 to 0.11.2"),
    "all_gather_start": ("all_gather", "JAX 0.10.2 on"),
    "all_gather_reduced_start": ("all_gather", "JAX 0.10.2 on"),
    "all_to_all_start": ("all_to_all", "JAX 0.10.2 on"),
    "ppermute_start": ("ppermute", "JAX 0.10.2 on"),
    "psum_start": ("psum", "JAX 0.10.2 to 0.11.2"),
    "unreduced_psum_start": ("psum", "JAX 0.10.2 to 0.11.2"),
    "psum_invariant_start": ("psum", "JAX 0.10.2 on"),
    "pbroadcast_start": ("pbroadcast", "JAX 0.10.2 to 0.11.2"),
}
ASYNC_DONES: dict[str, str] = {
    "reduce_scatter_done": "JAX 0.10.2 on", "all_gather_done": "JAX 0.10.2 on",
    "all_to_all_done": "JAX 0.10.2 on", "ppermute_done": "JAX 0.10.2 on", "psum_done": "JAX 0.10.2 on",
    "pbroadcast_done": "JAX 0.10.2 to 0.11.2",
}

#: Calls (their jaxpr runs on the operands as they are) that a release added.
CALLS_ADDED: dict[str, str] = {"xla_metadata_call": "JAX 0.12.0 on"}

#: Elementwise primitives a release added.
ELEMENTWISE_ADDED: dict[str, str] = {
    "polynomial": "JAX 0.12.0 on (erf's derivative, through exp_neg_sq)",
    "log2": "JAX 0.12.0 on",
    "one_minus_square": "JAX 0.12.0 on",
}


def standing_for(*bases: str) -> tuple[str, ...]:
    """The variants and async starts (``VARIANTS``, ``ASYNC_STARTS``) that do what ``bases`` do."""
    return tuple(name for table in (VARIANTS, ASYNC_STARTS) for name, (base, _) in table.items() if base in bases)


def is_cast(prim: str) -> bool:
    """Whether ``prim`` is one of check_vma's casts (the value unchanged; see ``CASTS``)."""
    return prim in CASTS


# Primitives that are not linear in any operand: a partial sum may not reach them.
NONLINEAR = frozenset({
    "exp", "exp2", "log", "log1p", "expm1", "tanh", "logistic", "sin", "cos", "tan", "asin", "acos",
    "atan", "sinh", "cosh", "asinh", "acosh", "atanh", "sqrt", "rsqrt", "cbrt", "pow", "integer_pow",
    "square", "abs", "sign", "floor", "ceil", "round", "max", "min", "erf", "erfc", "erf_inv", "lgamma",
    "digamma", "atan2", "rem", "lt", "le", "gt", "ge", "eq", "ne", "is_finite", "clamp", "nextafter",
    "reduce_max", "reduce_min", "reduce_prod", "argmax", "argmin", "cummax", "cummin", "cumprod",
    "cumlogsumexp", "sort", "top_k", "pmax", "pmin", "reduce_and", "reduce_or", "and", "or", "not",
    "xor", "population_count", "shift_left", "shift_right_logical", "shift_right_arithmetic",
    "polygamma", "igamma", "igammac", "bessel_i0e", "bessel_i1e", "regularized_incomplete_beta",
    "random_gamma_grad", "zeta", "clz", "tan", "log2", "one_minus_square", "mulhi", "igamma_grad_a",
    "eq_to", "le_to", "lt_to", *ELEMENTWISE_ADDED,
})
# Primitives applied element by element (all operands of the result's shape, or scalars).
ELEMENTWISE = NONLINEAR - {
    "reduce_max", "reduce_min", "reduce_prod", "argmax", "argmin", "cummax", "cummin", "cumprod",
    "cumlogsumexp", "sort", "top_k", "pmax", "pmin", "reduce_and", "reduce_or",
} | {"add", "sub", "mul", "div", "neg", "add_any", "convert_element_type", "copy", "copy_p", "real",
     "imag", "conj", "complex", "select_n", "reduce_precision",
     "bitcast_convert_type", "stop_gradient"}


# Comparisons: a partial maximum compared is a per-device predicate (vocab-parallel argmax).
COMPARISONS = frozenset({"eq", "ne", "lt", "le", "gt", "ge", "eq_to", "le_to", "lt_to"})
# Calls: their jaxpr runs on the operands as they are.
CALLS = frozenset({"jit", "pjit", "closed_call", "core_call", "remat", "remat2", "checkpoint",
                   "custom_jvp_call", "custom_vjp_call", "custom_vjp_call_jaxpr", "named_call",
                   "custom_jvp_call_jaxpr", "composite", *CALLS_ADDED})
# What moves, keeps or picks values without computing new ones (a partial max stays one).
STRUCTURAL = frozenset({"transpose", "squeeze", "broadcast_in_dim", "reshape", "slice", "pad", "rev",
                        "dynamic_slice", "gather", "concatenate", "convert_element_type", "copy", "copy_p",
                        "all_gather", "all_gather_invariant", "ppermute", "optimization_barrier", "select_n",
                        "sharding_constraint", "mesh_cast", "reshard", "reduce_precision"})
# Primitives whose results the pass does not follow (linear algebra, FFT, scatters other than
# add, random bits, callbacks...): their layout is unknown, they vary where their operands do.
OPAQUE = frozenset({
    "approx_top_k", "broadcast_to", "cholesky", "cholesky_update", "eig", "eigh", "fft", "lu",
    "lu_pivots_to_permutation", "qr", "svd", "triangular_solve", "tridiagonal", "tridiagonal_solve",
    "householder_product", "hessenberg", "schur", "geqrf", "geqp3", "ormqr", "symmetric_product",
    "ragged_dot_general", "reduce", "reduce_window_min", "reduce_xor", "scatter-max", "scatter-min",
    "scatter-mul", "scatter-sub", "select_and_gather_add", "select_and_scatter", "random_gamma",
    "random_clone", "philox2x32", "philox4x32", "threefry4x32", "iota_2x32_shape", "tile", "stack",
    "unstack", "zeros_like", "dim_as_value", "dimension_size", "pure_callback", "io_callback", "ffi_call",
    "scaled_dot", "scaled_matmul", "scaled_matmul_wrapper", "dot_product_attention_fwd",
    "dot_product_attention_fwd_wrapper", "dot_product_attention_bwd", "dot_product_attention_bwd_wrapper",
    "custom_partitioning", "custom_linear_solve", "linear_call", "custom_lin", "platform_index",
})
# Primitives that hand their operand on unchanged (layout hints, names).
IDENTITY = frozenset({"shardtypes_check_sharding",  # (shardtypes' own compile-time check)
                      "layout_constraint", "relayout", "with_memory_space_constraint", "name", "pin", "unpin",
                      "program_order"})
# Effects with no value of their own.
EFFECTS = frozenset({"debug_print", "check", "shape_assertion", "dce_sink", "after_all", "create_token"})
# Control flow: followed inside (loops.py).
LOOPS = frozenset({"scan", "while", "cond"})
