"""Layer 2, context: what a check depends on besides the value and its annotation.

Dimension tables (``Scope``, ``scope``, ``dims``: which size each name is bound to in the
current call), the active logical axis rules (``AxisRules``, ``axis_rules``, their presets and
their resolution to mesh axes), process-wide settings (``config``), the current mesh and meshes
over hosts, and what differs between the supported JAX versions (``compat``).

May import: ``shardtypes.language``.
Offers the layers above: the current table and rules (context variables), ``config``, the mesh
helpers and the JAX version shims.
"""

from .compat import (
    OLDEST_JAX as OLDEST_JAX,
    JitKey as JitKey,
    jax_version as jax_version,
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
    UNCONSTRAINED as UNCONSTRAINED,
    AxisRules as AxisRules,
    AxisRulesError as AxisRulesError,
    axis_rules as axis_rules,
    current_rules as current_rules,
)
from .settings import config as config
from .tables import (
    Scope as Scope,
    Table as Table,
    dims as dims,
    scope as scope,
)

__all__ = [
    "UNCONSTRAINED",
    "AxisRules",
    "AxisRulesError",
    "DimChoice",
    "JitKey",
    "OLDEST_JAX",
    "Scope",
    "Table",
    "abstract_mesh",
    "axis_rules",
    "choices",
    "config",
    "current_mesh",
    "current_rules",
    "default_mesh",
    "dims",
    "eformer_rules",
    "hybrid_mesh",
    "jax_version",
    "legacy_mesh_open",
    "layout",
    "no_mesh_error",
    "scope",
    "t5x_rules",
]
