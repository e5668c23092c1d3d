"""The error of ``assert_same_on_every_mesh``: ``MeshMismatch`` and its message, which names the
smallest mesh that differs, the output, the first differing block and the device that holds it,
the largest difference, the likely mistake (``comparison.diagnose``), which meshes differ and the
one axis that makes the difference, and a kernel that says it is per-device along it.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from ..language import MESH_MISMATCH, linked
from .comparison import diagnose, first_block
from .mesh_shapes import MeshShape, fmt_mesh

__all__ = ["MeshMismatch", "mismatch", "output_name"]


class MeshMismatch(AssertionError):
    """A function gave other global numbers on some mesh than on the reference mesh.

    ``reference`` and ``mesh`` are the two mesh shapes (``{axis: size}``), ``output`` the path of
    the output that differs (``'result'``, ``'result[0]'``, ``'result.w'``), ``diagnosis`` the
    likely mistake where one fits (else None), ``max_abs`` and ``max_rel`` the largest difference,
    absolute and relative to the output's largest magnitude, ``differing`` every mesh that differs.
    """

    def __init__(self, message: str, *, reference: MeshShape | None = None, mesh: MeshShape | None = None,
                 output: str = "", diagnosis: str | None = None, max_abs: float = math.nan,
                 max_rel: float = math.nan, differing: tuple = ()):
        super().__init__(message)
        self.reference = reference
        self.mesh = mesh
        self.output = output
        self.diagnosis = diagnosis
        self.max_abs = max_abs
        self.max_rel = max_rel
        self.differing = differing

    def __str__(self) -> str:
        return linked(str(self.args[0]) if self.args else "", MESH_MISMATCH)


def output_name(path: tuple) -> str:
    return "result" + jax.tree_util.keystr(path)


def _blame(reference: MeshShape, tried: list[MeshShape], differing: list[MeshShape], keep: dict,
           shape: MeshShape, hint: bool) -> str:
    """Which axis makes the difference: one whose growing always differs and whose staying at
    the reference's size always agrees (with ``hint``, how to hold it if that is by design)."""
    blamed = []
    for axis in reference:
        if axis in keep:
            continue
        grown = [s for s in tried if s[axis] != reference[axis]]
        still = [s for s in tried if s[axis] == reference[axis]]
        if grown and all(s in differing for s in grown) and all(s not in differing for s in still):
            blamed.append(axis)
    if len(blamed) != 1:
        return ""
    axis = blamed[0]
    text = f"; it differs exactly where {axis!r} is larger than {reference[axis]}"
    if hint and len(reference) - len(keep) == 1:
        text += (f" (if the function's meaning depends on the size of {axis!r}, the only axis varied, it is not a "
                 "function of its global inputs alone, and this check does not apply to it)")
    elif hint:
        text += (f" (if the function's meaning depends on the size of {axis!r}, as a pipeline's does on its stage "
                 f"count, hold it: keep={{{axis!r}: {shape[axis]}}})")
    return text


def mismatch(name: str, reference: MeshShape, failures: list, tried: list[MeshShape], keep: dict,
              per_device: list[str]) -> MeshMismatch:
    failures.sort(key=lambda f: math.prod(f[0].values()))
    shape, output, comparison, ref_leaf, leaf = failures[0]
    differing = [f[0] for f in failures]
    agreeing = [s for s in tried if s not in differing]
    lines = [f"{name}() gives other numbers on mesh {fmt_mesh(shape)} than on the reference mesh "
             f"{fmt_mesh(reference)}, from the same global inputs"]
    diagnosis = None
    max_abs = max_rel = math.inf
    if comparison is None:
        lines.append(f"  output: {output}, {ref_leaf}")
    elif comparison.problem is not None:
        lines.append(f"  output: {output}, {comparison.problem}")
        if "[" in comparison.problem:
            diagnosis = ("the global shape depends on the mesh: a per-device value laid out by the out_specs as if "
                         "it were global (a dim of its own whose size is a device's block)?")
            lines.append(f"  diagnosis: {diagnosis}")
    else:
        max_abs, max_rel = comparison.max_abs, comparison.max_rel
        g = np.asarray(leaf) if not jnp.issubdtype(leaf.dtype, jax.dtypes.prng_key) else None
        lines.append(f"  output: {output}, {leaf.dtype}{list(leaf.shape)}, compared {comparison.how}")
        lines.append(f"  largest difference: {max_abs:.4g} absolute, {max_rel:.3g} of the output's largest magnitude")
        sharding = getattr(leaf, "sharding", None)
        if g is not None and comparison.close is not None:
            mesh = getattr(sharding, "mesh", None)
            where, block = first_block(comparison.close, sharding, mesh) if mesh is not None else ("", None)
            if where:
                lines.append(f"  {where}")
            diagnosis = diagnose(ref_leaf, leaf, comparison, sharding, shape, block)
            if diagnosis:
                lines.append(f"  diagnosis: {diagnosis}")
    others = [fmt_mesh(s) for s in differing[1:]]
    tail = f"  meshes that differ: {', '.join([fmt_mesh(shape)] + others)}"
    if agreeing:
        tail += f"; that agree: {', '.join(fmt_mesh(s) for s in agreeing)}"
    lines.append(tail + _blame(reference, tried, differing, keep, shape, diagnosis is None))
    stated = [a for a in per_device if a in shape and shape[a] != reference[a]]
    if stated:
        axes = ", ".join(repr(a) for a in stated)
        lines.append(f"  {name}() says it is per-device along {axes} (shardtypes.ops.per_device), so its result "
                     f"depends "
                     f"on the size of {axes} by design: hold {'it' if len(stated) == 1 else 'them'} with keep="
                     + "{" + ", ".join(f"{a!r}: {shape[a]}" for a in stated) + "}")
    return MeshMismatch("\n".join(lines), reference=reference, mesh=shape, output=output, diagnosis=diagnosis,
                        max_abs=max_abs, max_rel=max_rel, differing=tuple(differing))
