"""Layer 4, the checker: one value against one annotation, in whichever context it is seen.

Eagerly (the array's real sharding), traced on Explicit mesh axes (``jax.typeof(x).sharding``),
at compile time on Auto axes, and inside ``shard_map`` (local sizes against global ones); the
fast path for concrete arrays and trees of them; the checks outside typeguard (``check``,
``isinstance``); the signature checker and the dimension table each top-level call starts with.

May import: ``shardtypes.language``, ``shardtypes.context``, ``shardtypes.model``.
Offers the layers above: ``check_value`` (via ``check``), ``check``, ``check_with_plan``,
``check_named``, the signature checker, the call-table wrapper and the fast path.
"""

from .entry import (
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
from .value import check_value as check_value

__all__ = [
    "check",
    "check_named",
    "check_value",
    "check_with_plan",
    "fast_check",
    "fast_tree",
    "is_instance",
    "learn_layout",
]
