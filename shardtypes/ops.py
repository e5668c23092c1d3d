"""Typed collectives for ``shard_map`` kernels, written as spec strings (seqax's style).

Each op takes a spec string saying the layouts before and after, checks its operands and its
result against the current dimension table (global sizes, as in annotations), and calls the JAX
collective the layouts imply::

    all_gather('V/t M/d -> V/t M', w)          # gather dim 1 over mesh axis d
    all_gather('V/t M/d -> V/t M', w, invariant=True)   # typed invariant over d: a kernel may
                                                        # return it replicated (check_vma on)
    psum_scatter('B/d L M -> B/d L M/t', h)    # sum over t, leaving dim 2 scattered over t
    all_to_all('B/d L M -> B L M/d', x)        # move mesh axis d from dim 0 to dim 2
    einsum_unreduced('B/d L M, M F/t -> B/d L F/t', x, w)   # local einsum; sharded contracted
                                                            # dims leave partial sums
    index_unreduced('[V/t] M, B/d L -> B/d L M', table, ids)  # rows of a table sharded over t;
                                                              # rows held elsewhere are zero
    index_unreduced('B/d L [V/t], B/d L -> B/d L', logprobs, targets)  # batched over B and L

Ops that keep the layout take one shape and name their mesh axes as JAX does::

    psum('B/d L M', h, 't')                    # h holds partial sums over t: add them up
    pmean('B/d L M', h, ('d', 't'))
    ppermute('B/d L M', x, 'd', [(0, 1), (1, 2), (2, 3), (3, 0)])   # send blocks round a ring
    axis_index('d'), axis_size('d')
    per_device(stats, 'd')                     # per-device by intent: the kernel pass takes
                                               # it as each device's own, not as owed

An operand that does not match its spec raises TypeCheckError naming the op, the operand and
the spec; a malformed spec raises ShapeSpecError; a wrong axis argument, or a mesh axis that is
not a manual axis of the running ``shard_map`` (or no ``shard_map`` at all), raises TypeError or
ValueError naming the op and the argument.
"""

from . import _public
from .kernels.ops import (
    all_gather as all_gather,
    all_to_all as all_to_all,
    axis_index as axis_index,
    axis_size as axis_size,
    einsum_unreduced as einsum_unreduced,
    index_unreduced as index_unreduced,
    per_device as per_device,
    pmean as pmean,
    ppermute as ppermute,
    psum as psum,
    psum_scatter as psum_scatter,
)

__all__ = [
    "all_gather", "psum_scatter", "all_to_all", "psum", "pmean", "ppermute",
    "einsum_unreduced", "index_unreduced", "axis_index", "axis_size", "per_device",
]

_public.rehome(__name__, (globals()[name] for name in __all__))
