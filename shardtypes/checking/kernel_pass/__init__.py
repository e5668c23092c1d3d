"""The kernel pass: what a ``typed_shard_map`` kernel's body does to layouts, varying values and
sums still owed, followed over its jaxpr from the layouts of its in_specs.

One entry point, ``traced`` (the body traced once, followed, then bound in the shard_map's trace);
one registry of what each JAX primitive does (``catalogue``: a record per primitive, by family,
with the releases it was seen in; read by the step cost and the activation estimate too); one
walk over a jaxpr (``walk.Walk``, with ``walk.nesting`` for calls, loops, conds and nested
shard_maps), of which the pass is one (``interpreter.Pass``), each family's rule registered beside
its definition (``structural``, ``collectives``, ``loops``); one module that reads JAX's jaxprs
(``jaxpr``: equations, params, avals, invars and outvars; the only importer of
``jax.extend.core`` and ``jax.core`` in the pass); what it knows of a value (``facts``) and how
facts combine (``algebra``); every sentence it says, refusals and the provenance of partial
values (``messages``); where it meets the side table the checker writes
(``interpreter.Pass.meet``; the table: ``checking/kernel_layouts.py``).
"""

from . import catalogue as catalogue, jaxpr as jaxpr, walk as walk
from .driver import in_facts, infer, traced
from .jaxpr import KernelPassWarning, Unreadable, known_bug

__all__ = ["traced", "in_facts", "infer", "KernelPassWarning", "Unreadable", "known_bug"]
