"""Layer 2, context: what a check depends on besides the value and its annotation.

Dimension tables (``Scope``, ``scope``, ``dims``: which size each name is bound to in the
current call), the active logical axis rules (``AxisRules``, ``axis_rules``, their presets and
their resolution to mesh axes), process-wide settings (``config``), the current mesh and meshes
over hosts, and what differs between the supported JAX versions (``compat``).

May import: ``shardtypes.language``.
"""

from .compat import (
    OLDEST_JAX as OLDEST_JAX,
    JitKey as JitKey,
    all_gather_invariant as all_gather_invariant,
    jax_version as jax_version,
    trace_state as trace_state,
    varying_axes as varying_axes,
)
from .hosts import default_mesh as default_mesh, hybrid_mesh as hybrid_mesh
from .mesh import (
    abstract_mesh as abstract_mesh,
    current_mesh as current_mesh,
    legacy_mesh_open as legacy_mesh_open,
    no_mesh_error as no_mesh_error,
)
from .rule_presets import eformer_rules as eformer_rules, t5x_rules as t5x_rules
from .rule_resolution import (
    DimChoice as DimChoice,
    choices as choices,
    layout as layout,
)
from .rules import (
    ACTIVE as ACTIVE,
    RULES_HINT as RULES_HINT,
    UNCONSTRAINED as UNCONSTRAINED,
    AxisRules as AxisRules,
    AxisRulesError as AxisRulesError,
    axis_rules as axis_rules,
    current_rules as current_rules,
)
from .settings import FORCED as FORCED, checks_on as checks_on, config as config, forced_checks as forced_checks
from .tables import (
    BASE as BASE,
    IN_TRACE as IN_TRACE,
    NAMES_USED as NAMES_USED,
    TABLE as TABLE,
    UNCHECKED as UNCHECKED,
    Scope as Scope,
    Table as Table,
    UncheckedCall as UncheckedCall,
    commit_memo_table as commit_memo_table,
    dims as dims,
    memo_table as memo_table,
    scope as scope,
    staged_read as staged_read,
    trace_key as trace_key,
    tracing as tracing,
)
from .tracebacks import filter_traceback as filter_traceback

__all__ = [
    "commit_memo_table",
    "memo_table",
    "ACTIVE",
    "AxisRules",
    "AxisRulesError",
    "BASE",
    "DimChoice",
    "FORCED",
    "IN_TRACE",
    "JitKey",
    "OLDEST_JAX",
    "RULES_HINT",
    "Scope",
    "TABLE",
    "Table",
    "UNCHECKED",
    "UNCONSTRAINED",
    "UncheckedCall",
    "abstract_mesh",
    "all_gather_invariant",
    "axis_rules",
    "checks_on",
    "choices",
    "config",
    "current_mesh",
    "current_rules",
    "default_mesh",
    "dims",
    "eformer_rules",
    "filter_traceback",
    "forced_checks",
    "hybrid_mesh",
    "jax_version",
    "layout",
    "legacy_mesh_open",
    "no_mesh_error",
    "scope",
    "t5x_rules",
    "NAMES_USED",
    "staged_read",
    "trace_key",
    "trace_state",
    "tracing",
    "varying_axes",
]

# What the layer offers the layers above, in its docstring, made from __all__ so that it cannot go stale.
__doc__ = f"{__doc__ or ''}\nOffers the layers above: {', '.join(__all__)}.\n"
