"""Layer 4, the checker: one value against one annotation, in whichever context it is seen.

Eagerly (the array's real sharding), traced on Explicit mesh axes (``jax.typeof(x).sharding``),
at compile time on Auto axes, and inside ``shard_map`` (local sizes against global ones); the
fast path for concrete arrays and trees of them; the checks outside typeguard (``check``,
``isinstance``); the signature checker and the dimension table each top-level call starts with.

May import: ``shardtypes.language``, ``shardtypes.context``, ``shardtypes.model``.
"""

from .call_tables import with_table as with_table
from .compile_time import COMPILE_TIME_CHECKS as COMPILE_TIME_CHECKS
from .direct_checks import (
    check as check,
    check_named as check_named,
    check_with_plan as check_with_plan,
    is_instance as is_instance,
)
from .fast_path import (
    fast_check as fast_check,
    fast_tree as fast_tree,
    learn_layout as learn_layout,
)
from .generators import generator_from_signature as generator_from_signature
from .kernel_layouts import (
    einsum_owed as einsum_owed,
    flows as flows,
    gathered as gathered,
    is_staged as is_staged,
    kernel_check_vma as kernel_check_vma,
    mark_per_device as mark_per_device,
    mark_unreduced as mark_unreduced,
    op_check as op_check,
    op_operand as op_operand,
    op_result as op_result,
    still_owed as still_owed,
    tracking as tracking,
    with_op_context as with_op_context,
)
from .kernel_pass import (  # the kernel pass's reader of JAX's equations, for tools
    KernelPassWarning as KernelPassWarning,
    catalogue as primitives,
    in_facts as in_facts,
    jaxpr as jaxprs,
    known_bug as known_bug,
    traced as traced,
    walk as jaxpr_walk,
)
from .kernel_returns import returned as returned
from .signature import (
    SignatureChecker as SignatureChecker,
    looking_inside as looking_inside,
    signature_sizer as signature_sizer,
)
from .typeguard_frames import (
    FIELD_PATH as FIELD_PATH,
    checked_role as checked_role,
    get_table as get_table,
    origin_phrase as origin_phrase,
    set_table as set_table,
    snapshot as snapshot,
)
from .typeguard_internals import (
    CHECKED_AGAINST as TYPEGUARD_CHECKED_AGAINST,
    container_checkers as container_checkers,
    instrumenter as instrumenter,
)
from .value import check_value as check_value

__all__ = [
    "TYPEGUARD_CHECKED_AGAINST",
    "container_checkers",
    "instrumenter",
    "einsum_owed",
    "gathered",
    "mark_per_device",
    "mark_unreduced",
    "op_operand",
    "op_result",
    "still_owed",
    "jaxprs",
    "jaxpr_walk",
    "primitives",
    "COMPILE_TIME_CHECKS",
    "FIELD_PATH",
    "KernelPassWarning",
    "SignatureChecker",
    "check",
    "check_named",
    "check_value",
    "check_with_plan",
    "checked_role",
    "fast_check",
    "fast_tree",
    "flows",
    "generator_from_signature",
    "get_table",
    "in_facts",
    "is_instance",
    "is_staged",
    "kernel_check_vma",
    "known_bug",
    "learn_layout",
    "looking_inside",
    "op_check",
    "origin_phrase",
    "returned",
    "set_table",
    "signature_sizer",
    "snapshot",
    "traced",
    "tracking",
    "with_op_context",
    "with_table",
]

# What the layer offers the layers above, in its docstring, made from __all__ so that it cannot go stale.
__doc__ = f"{__doc__ or ''}\nOffers the layers above: {', '.join(__all__)}.\n"
