"""Layer 6, integrations: where shardtypes meets the tools users already have.

typeguard's lookup (``register_with_typeguard``: array annotations, dataclasses, unions and
containers that hold them, ``Annotated`` metadata), typeguard's instrumentation of functions
whose annotations write shapes as ``str``, the ``typechecked`` decorator (which chooses between
the signature checker and typeguard's instrumentation), and Flax NNX modules.

May import: ``shardtypes.language``, ``shardtypes.context``, ``shardtypes.model``,
``shardtypes.checking``, ``shardtypes.layout``.
Offers the layers above: ``typechecked``, ``register_with_typeguard``, the container checkers.
"""

from .decorator import typechecked as typechecked
from .typeguard_hook import register_with_typeguard as register_with_typeguard

__all__ = [
    "register_with_typeguard",
    "typechecked",
]
