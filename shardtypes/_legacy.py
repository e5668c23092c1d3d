"""Where the modules of shardtypes lived before the layer packages, so that pickles made then
still load. An annotation, spec, rule set or error pickled by shardtypes 0.1 (before the move)
names the function that rebuilds it by its old module (``shardtypes._dtypes._subscript``);
importing such a name gives a stand-in module whose attributes are looked up in the modules
that hold the code now. Nothing in shardtypes imports the old names, and new pickles never
refer to them. Modules renamed inside the layers (``shardtypes.model.trees``, now
``model.pytree_dataclasses``) are forwarded the same way.

No release of shardtypes has been made: this module and its import hook go in the first one
(0.2.0), when pickles from before it no longer need to load.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types
from typing import Any, Sequence

__all__ = ["install"]

# Old module -> the modules that hold its names now (looked up in order).
MOVED: dict[str, tuple[str, ...]] = {
    "_shape": ("language.shape",), "_sizes": ("language.sizes",),
    "_compat": ("context.compat",), "_config": ("context.settings",), "_dims": ("context.tables",),
    "_mesh": ("context.mesh",), "_hosts": ("context.hosts",), "_rules": ("context.rules",),
    "_rule_presets": ("context.rule_presets",), "_rule_resolution": ("context.rule_resolution",),
    "_dtypes": ("model.annotations", "model.categories"), "_hints": ("model.hints",),
    "_trees": ("model.pytree_dataclasses",),
    "_model": ("model.annotation_nodes", "checking.fast_path"), "_plans": ("model.plans", "checking.fast_path"),
    "_tree_walk": ("model.annotation_leaves",), "_describe": ("model.describe",), "_errors": ("model.errors",),
    "_check": ("checking.value",), "_check_entry": ("checking.direct_checks",),
    "_sharding_check": ("checking.sharding",), "_compile_time": ("checking.compile_time",),
    "_call_tables": ("checking.call_tables",), "_signature": ("checking.signature",),
    "_typeguard_frames": ("checking.typeguard_frames",),
    "_specs": ("layout.specs",), "_shard": ("layout.placement",), "_auto": ("layout.auto",),
    "_least_sharding": ("layout.least_sharding",), "_validate_specs": ("layout.validate",),
    "_explain": ("layout.explanations",), "_data_layout": ("layout.data_layout",),
    "_typeguard": ("integrations.typeguard_hook",), "_containers": ("integrations.containers",),
    "_instrument": ("integrations.instrument",), "_decorator": ("integrations.decorator",),
    "_shard_map": ("kernels.shard_map",), "_collectives": ("kernels.op_specs",),
    "_verify": ("tools.verification",), "_memory_plan": ("tools.memory_plan",),
    # Modules renamed inside the layers for what they hold (issue 35).
    "model.trees": ("model.pytree_dataclasses",), "model.pytrees": ("model.pytree_annotation",),
    "model.value_trees": ("model.optimizer_states",), "model.walk": ("model.annotation_leaves",),
    "model.nodes": ("model.annotation_nodes",), "checking.inside": ("checking.inside_unannotated",),
    "checking.entry": ("checking.direct_checks",), "checking.frames": ("checking.typeguard_frames",),
    "kernels.collectives": ("kernels.op_specs",),
}


def _forwarder(targets: Sequence[str]) -> Any:
    def __getattr__(name: str) -> Any:
        for target in targets:
            module = importlib.import_module(f"shardtypes.{target}")
            if hasattr(module, name):
                return getattr(module, name)
        raise AttributeError(f"shardtypes 0.1's module has no attribute {name!r} (now in "
                             f"{', '.join('shardtypes.' + t for t in targets)})")
    return __getattr__


class _OldNames(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname: str, path: Any, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        package, _, name = fullname.partition(".")
        if package != "shardtypes" or name not in MOVED:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType | None:
        return None  # the default: a new, empty module

    def exec_module(self, module: types.ModuleType) -> None:
        targets = MOVED[module.__name__.partition(".")[2]]
        module.__doc__ = f"Stand-in for pickles: now {', '.join('shardtypes.' + t for t in targets)}."
        module.__getattr__ = _forwarder(targets)  # type: ignore[method-assign]


def install() -> None:
    """Lets pickles name the old modules (idempotent)."""
    if not any(isinstance(f, _OldNames) for f in sys.meta_path):
        sys.meta_path.append(_OldNames())
