"""Layer 9, testing: what users call from their own tests.

``assert_same_on_every_mesh(fn, ...)`` runs a kernel or a step on a one-device reference mesh and
on other mesh shapes from the same global inputs, laid out as its annotations say, and raises
``MeshMismatch`` (an ``AssertionError``) where a global result differs, with the first differing
block and a likely cause; ``meshes(axes)`` is a hypothesis strategy of mesh shapes;
``use_cpu_devices(8)`` and the pytest plugin ``shardtypes.testing.pytest_plugin`` give tests
simulated CPU devices. See docs/same-numbers.md.

Nothing in shardtypes imports this package, and ``import shardtypes`` does not load it.

May import: every layer below it.
"""

from .. import _public
from .devices import use_cpu_devices as use_cpu_devices
from .mesh_check import MeshReport as MeshReport, assert_same_on_every_mesh as assert_same_on_every_mesh
from .mismatch import MeshMismatch as MeshMismatch
from .strategies import meshes as meshes

__all__ = ["MeshMismatch", "MeshReport", "assert_same_on_every_mesh", "meshes", "use_cpu_devices"]
_public.rehome(__name__, (globals()[name] for name in __all__))

# What the layer offers its users, in its docstring, made from __all__ so that it cannot go stale.
__doc__ = f"{__doc__ or ''}\nOffers the layers above: {', '.join(__all__)}.\n"
