"""shardtypes: dtype, shape and sharding in one annotation, checked at call time.

>>> import jax, jax.numpy as jnp
>>> from shardtypes import f32, typechecked
>>> @typechecked
... def center(x: f32[jax.Array, b'batch/d channels']) -> f32[jax.Array, b'batch/d channels']:
...     return x - jnp.mean(x, axis=-1, keepdims=True)

See ``shardtypes.language.shape`` for the annotation language, and docs/architecture.md for
the layers of the package (one subpackage each).
"""

from typing import TYPE_CHECKING, Any

from .context.settings import config as config
from .context.tables import Scope as Scope, dims as dims, scope as scope
from .layout.auto import auto_partition_spec as auto_partition_spec, auto_partition_specs as auto_partition_specs
from .model.annotations import number as number
from .model.array_classes import HostOrDevice as HostOrDevice

# Static checkers read the annotation names as typing.Annotated, so that the static spelling
# f32[jax.Array, b'batch/d embed'] is a jax.Array to them (see _indirection); at run time they
# are the annotation classes.
if TYPE_CHECKING:
    from ._indirection import (
        PyTree as PyTree,
        Stacked as Stacked,
        anydtype as anydtype,
        bf16 as bf16,
        bool_ as bool_,
        c64 as c64,
        c128 as c128,
        complexfloating as complexfloating,
        f8e3m4 as f8e3m4,
        f8e4m3 as f8e4m3,
        f8e4m3b11fnuz as f8e4m3b11fnuz,
        f8e4m3fn as f8e4m3fn,
        f8e4m3fnuz as f8e4m3fnuz,
        f8e5m2 as f8e5m2,
        f8e5m2fnuz as f8e5m2fnuz,
        f8e8m0fnu as f8e8m0fnu,
        f16 as f16,
        f32 as f32,
        f64 as f64,
        floating as floating,
        i4 as i4,
        i8 as i8,
        i16 as i16,
        i32 as i32,
        i64 as i64,
        inexact as inexact,
        integer as integer,
        key as key,
        numeric as numeric,
        real as real,
        signed as signed,
        u4 as u4,
        u8 as u8,
        u16 as u16,
        u32 as u32,
        u64 as u64,
        unsigned as unsigned,
    )
else:
    from .model.annotations import (
        bf16 as bf16,
        bool_ as bool_,
        c64 as c64,
        c128 as c128,
        f8e3m4 as f8e3m4,
        f8e4m3 as f8e4m3,
        f8e4m3b11fnuz as f8e4m3b11fnuz,
        f8e4m3fn as f8e4m3fn,
        f8e4m3fnuz as f8e4m3fnuz,
        f8e5m2 as f8e5m2,
        f8e5m2fnuz as f8e5m2fnuz,
        f8e8m0fnu as f8e8m0fnu,
        f16 as f16,
        f32 as f32,
        f64 as f64,
        i4 as i4,
        i8 as i8,
        i16 as i16,
        i32 as i32,
        i64 as i64,
        u4 as u4,
        u8 as u8,
        u16 as u16,
        u32 as u32,
        u64 as u64,
    )
    from .model.categories import (
        anydtype as anydtype,
        complexfloating as complexfloating,
        floating as floating,
        inexact as inexact,
        integer as integer,
        key as key,
        numeric as numeric,
        real as real,
        signed as signed,
        unsigned as unsigned,
    )
    from .model.pytree_dataclasses import Stacked as Stacked
from .checking.kernel_pass import KernelPassWarning as KernelPassWarning
from .context.hosts import default_mesh as default_mesh, hybrid_mesh as hybrid_mesh
from .context.rule_presets import eformer_rules as eformer_rules, t5x_rules as t5x_rules
from .context.rules import (
    UNCONSTRAINED as UNCONSTRAINED,
    AxisRules as AxisRules,
    AxisRulesError as AxisRulesError,
    axis_rules as axis_rules,
    current_rules as current_rules,
)
from .kernels.shard_map import typed_shard_map as typed_shard_map
from .language.shape import DimSpec as DimSpec, ShapeSpec as ShapeSpec, ShapeSpecError as ShapeSpecError
from .layout.data_layout import (
    DataLayout as DataLayout,
    data_layout as data_layout,
    make_global_array as make_global_array,
)
from .layout.explanations import explain as explain
from .layout.least_sharding import (
    convert_specs as convert_specs,
    partition_specs_for_budget as partition_specs_for_budget,
)
from .layout.placement import shard as shard
from .layout.specs import (
    is_fully_sharded as is_fully_sharded,
    make_partition_specs as make_partition_specs,
    make_shape_dtype_structs as make_shape_dtype_structs,
    make_shardings as make_shardings,
)
from .layout.validate import ShardingProblem as ShardingProblem, validate_shardings as validate_shardings
from .model.pytree_dataclasses import Array as Array, pytree_dataclass as pytree_dataclass

if not TYPE_CHECKING:
    from .model.pytree_annotation import PyTree as PyTree
from dataclasses import field as field

from typeguard import TypeCheckError as TypeCheckError

from . import _public, linen as linen, nnx as nnx, ops as ops
from ._version import __version__ as __version__
from .checking.direct_checks import check as check, is_instance as is_instance
from .integrations.decorator import typechecked as typechecked
from .integrations.typeguard_hook import register_with_typeguard as register_with_typeguard
from .model.errors import ArrayError as ArrayError, FieldError as FieldError, ShardtypesWarning as ShardtypesWarning

if TYPE_CHECKING:  # (loaded on first use below: import shardtypes does not import the tools layer)
    from .tools import (
        ActivationEstimate as ActivationEstimate,
        Collective as Collective,
        Communication as Communication,
        StepCost as StepCost,
        StepTime as StepTime,
    )
    from .tools.memory_plan import PlanReport as PlanReport, plan as plan, plan_html as plan_html
    from .tools.search import SearchReport as SearchReport, search as search
    from .tools.verification import Problem as Problem, VerifyReport as VerifyReport, verify as verify

# The tools layer (verify, plan, their reports, the CLI and the HTML pages) is loaded when one of
# its names is first read, so that `import shardtypes` costs what checking costs.
_TOOLS = {
    "ActivationEstimate": "activations", "Collective": "step_cost", "Communication": "step_cost",
    "StepCost": "step_cost", "StepTime": "chips", "PlanReport": "memory_plan", "plan": "memory_plan",
    "plan_html": "memory_plan", "Problem": "verification", "VerifyReport": "verification",
    "verify": "verification", "search": "search", "SearchReport": "search",
}


def __getattr__(name: str) -> Any:
    module = _TOOLS.get(name)
    if module is None:
        raise AttributeError(f"module 'shardtypes' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f"shardtypes.tools.{module}"), name)
    globals()[name] = value  # (once: later reads find it here)
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_TOOLS))

__all__ = [
    "Array",
    "ArrayError",
    "AxisRules",
    "AxisRulesError",
    "DataLayout",
    "DimSpec",
    "FieldError",
    "KernelPassWarning",
    "HostOrDevice",
    "PlanReport",
    "Problem",
    "PyTree",
    "Scope",
    "ShapeSpec",
    "ShapeSpecError",
    "ShardingProblem",
    "ShardtypesWarning",
    "Stacked",
    "TypeCheckError",
    "UNCONSTRAINED",
    "VerifyReport",
    "SearchReport",
    "ActivationEstimate",
    "StepCost",
    "Communication",
    "Collective",
    "StepTime",
    "anydtype",
    "auto_partition_spec",
    "auto_partition_specs",
    "axis_rules",
    "bf16",
    "bool_",
    "c128",
    "c64",
    "check",
    "config",
    "convert_specs",
    "current_rules",
    "data_layout",
    "default_mesh",
    "dims",
    "eformer_rules",
    "explain",
    "f16",
    "f32",
    "f64",
    "f8e3m4",
    "f8e4m3",
    "f8e4m3b11fnuz",
    "f8e4m3fn",
    "f8e4m3fnuz",
    "f8e5m2",
    "f8e5m2fnuz",
    "f8e8m0fnu",
    "field",
    "floating",
    "hybrid_mesh",
    "i16",
    "i32",
    "i4",
    "i64",
    "i8",
    "integer",
    "is_fully_sharded",
    "is_instance",
    "make_global_array",
    "make_partition_specs",
    "make_shape_dtype_structs",
    "make_shardings",
    "linen",
    "nnx",
    "number",
    "ops",
    "partition_specs_for_budget",
    "plan",
    "plan_html",
    "pytree_dataclass",
    "register_with_typeguard",
    "scope",
    "shard",
    "t5x_rules",
    "typechecked",
    "typed_shard_map",
    "u16",
    "u32",
    "u4",
    "u64",
    "u8",
    "validate_shardings",
    "verify",
    "search",
    "complexfloating",
    "inexact",
    "key",
    "numeric",
    "real",
    "signed",
    "unsigned",
]

register_with_typeguard()

# The errors and warnings users see in tracebacks and catch by name carry their public home
# (shardtypes.ShapeSpecError, not shardtypes._shape.ShapeSpecError); pickle finds them there.
_public.rehome("shardtypes", (ShapeSpecError, AxisRulesError, ShardtypesWarning, FieldError, ArrayError))

