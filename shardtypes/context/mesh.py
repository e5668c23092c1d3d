"""The current mesh, a mesh given by its axis sizes, and what to tell a user who has none.

JAX's public mesh context is ``jax.set_mesh(mesh)``: ``jax.sharding.get_mesh()`` (eagerly) and
``jax.sharding.get_abstract_mesh()`` (everywhere) read it. The legacy ``with Mesh(...):`` context
(seqax's ``main_contained``, older tutorials) sets neither, and no public API reads it, so when
no mesh is found the message names it as the likely cause; ``legacy_mesh_open`` tells whether it
is open, for the entries that would otherwise go on without a mesh.

``abstract_mesh({'d': 64, 't': 64})`` is a mesh with no devices behind it, for checking and
costing a plan for a large job on a laptop (``verify``, ``plan``).
"""

from __future__ import annotations

from typing import Any, Mapping

import jax
from jax.sharding import AbstractMesh, AxisType, Mesh, PartitionSpec

from ..language import IDENT

__all__ = ["current_mesh", "no_mesh_error", "abstract_mesh", "legacy_mesh_open"]


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


def _constrain(x: Any) -> Any:
    return jax.lax.with_sharding_constraint(x, PartitionSpec())


def legacy_mesh_open() -> bool:
    """Whether JAX's deprecated ``with Mesh(...):`` context is open (and ``jax.set_mesh`` set no
    mesh). No public API reads that context, but a constraint by a bare ``PartitionSpec`` traces
    only inside some mesh, so tracing one abstractly (no devices touched, nothing compiled) tells."""
    if not jax.sharding.get_abstract_mesh().empty:
        return False
    try:
        jax.eval_shape(_constrain, jax.ShapeDtypeStruct((1,), "float32"))
    except Exception:  # "requires a non-empty mesh": no mesh of any kind
        return False
    return True


def abstract_mesh(mesh: Any, axis_types: Any = AxisType.Explicit) -> Any:
    """``mesh`` as an abstract mesh: a Mesh or AbstractMesh as it is, or a mapping such as
    ``{'d': 64, 't': 64}`` (Explicit axes unless ``axis_types`` says otherwise)."""
    if isinstance(mesh, (AbstractMesh, jax.sharding.Mesh)):
        return mesh
    if isinstance(mesh, Mapping):
        if not mesh or not all(isinstance(k, str) and IDENT.match(k) and isinstance(v, int) and not isinstance(v, bool)
                               and v > 0 for k, v in mesh.items()):
            raise ValueError(f"a mesh mapping is axis name -> positive size, as {{'d': 64, 't': 64}}; got {mesh!r}")
        types = axis_types if isinstance(axis_types, tuple) else (axis_types,) * len(mesh)
        return AbstractMesh(tuple(mesh.values()), tuple(mesh.keys()), axis_types=types)
    raise TypeError(f"mesh must be a Mesh, an AbstractMesh or a mapping of axis sizes, got {mesh!r}")
