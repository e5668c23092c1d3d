"""Layer 6, integrations: where shardtypes meets the tools users already have.

typeguard's lookup (``register_with_typeguard``: array annotations, dataclasses, unions and
containers that hold them, ``Annotated`` metadata), typeguard's instrumentation of functions
whose annotations write shapes as ``str``, the ``typechecked`` decorator (which chooses between
the signature checker and typeguard's instrumentation), and Flax NNX modules.

May import: ``shardtypes.language``, ``shardtypes.context``, ``shardtypes.model``,
``shardtypes.checking``, ``shardtypes.layout``.
"""

from .decorator import typecheck_target as typecheck_target, typechecked as typechecked
from .typeguard_hook import register_with_typeguard as register_with_typeguard

__all__ = [
    "register_with_typeguard",
    "typecheck_target",
    "typechecked",
]

# What the layer offers the layers above, in its docstring, made from __all__ so that it cannot go stale.
__doc__ = f"{__doc__ or ''}\nOffers the layers above: {', '.join(__all__)}.\n"
