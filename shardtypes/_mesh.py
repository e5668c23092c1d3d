"""The current mesh, and what to tell a user who has none.

JAX's public mesh context is ``jax.set_mesh(mesh)``: ``jax.sharding.get_mesh()`` (eagerly) and
``jax.sharding.get_abstract_mesh()`` (everywhere) read it. The legacy ``with Mesh(...):`` context
(seqax's ``main_contained``, older tutorials) sets neither, and no public API can see it, so when
no mesh is found the message names it as the likely cause.
"""

from __future__ import annotations

import jax
from jax.sharding import AbstractMesh, Mesh

__all__ = ["current_mesh", "no_mesh_error"]


def no_mesh_error(what: str) -> ValueError:
    """The error for ``what`` finding no mesh."""
    return ValueError(
        f"{what}: no mesh; pass mesh=... or set one with `with jax.set_mesh(mesh):`. If you "
        "opened JAX's legacy `with Mesh(...):` context (seqax, older examples), that is why: "
        "it is not visible through jax.sharding.get_abstract_mesh(), which shardtypes reads; "
        "use `with jax.set_mesh(mesh):` instead"
    )


def current_mesh(mesh: Mesh | AbstractMesh | None = None, what: str = "make_shardings") -> Mesh | AbstractMesh:
    """``mesh`` if given, else the current one: the concrete mesh eagerly, the abstract mesh
    under jit (both from ``jax.set_mesh``)."""
    if mesh is not None:
        return mesh
    try:
        concrete = jax.sharding.get_mesh()
    except Exception:  # under jit only the abstract mesh is available
        concrete = None
    if concrete is not None and not concrete.empty:
        return concrete
    abstract = jax.sharding.get_abstract_mesh()
    if abstract.empty:
        raise no_mesh_error(what)
    return abstract
