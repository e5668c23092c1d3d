"""Flax NNX: a module's state checked against the annotations on its classes, and the
shardings of ``nnx.state(model)`` derived from them.

Annotate each variable on the module's class with the variable type around a shardtypes
annotation (static checkers read ``nnx.Param[jax.Array]``)::

    class MLP(nnx.Module):
        w: nnx.Param[f32[b'embed/d hidden/t']]
        b: nnx.Param[f32[b'hidden/t']]

        def __init__(self, embed, hidden, rngs):
            self.w = nnx.Param(nnx.initializers.lecun_normal()(rngs.params(), (embed, hidden)))
            self.b = nnx.Param(jnp.zeros(hidden))

    model = nnx.eval_shape(lambda: MLP(1024, 4096, nnx.Rngs(0)))     # or a real one
    shardings = shardtypes.nnx.shardings(model, mesh, nnx.Param)      # an nnx.State of them
    state = jax.device_put(nnx.state(real_model, nnx.Param), shardings)
    nnx.update(real_model, state)
    shardtypes.nnx.check(real_model, nnx.Param)                      # dtype, shape, sharding

Sub-modules are followed through attributes, ``nnx.List``/``nnx.Dict`` and lists and dicts; each
variable's annotation is read on the class of the module that holds it. ``filters`` are
``nnx.state``'s. A variable the filters select but no annotation describes is an error naming
its path: nothing is laid out or passed unchecked by default.
"""

from . import _public
from .integrations.nnx import (
    annotations as annotations,
    check as check,
    partition_specs as partition_specs,
    shardings as shardings,
)

__all__ = ["annotations", "partition_specs", "shardings", "check"]

_public.rehome(__name__, (globals()[name] for name in __all__))
