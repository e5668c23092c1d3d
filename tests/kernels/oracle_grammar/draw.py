"""The strategy ``programs``: a mesh, a layout of ``x``, one to four steps, and the return
annotation (the layout the grammar followed, or a perturbed one)."""

from typing import Any

import numpy as np
from hypothesis import strategies as st

from .base import AXIS_TYPES, Draft, Layout, Program, STEPS, Value, add_cond, add_prefix, add_scan, add_scan_reduce, annotation
from . import extra

@st.composite
def meshes(draw: Any, sizes: tuple = (1, 2, 4)) -> tuple:
    n = draw(st.integers(1, 2))
    names = ("a", "b") if n == 2 else (draw(st.sampled_from(["a", "b"])),)
    sizes = draw(st.tuples(*[st.sampled_from(sizes)] * n).filter(lambda s: int(np.prod(s)) <= 8))
    return tuple(zip(names, sizes))


@st.composite
def layouts(draw: Any, axes: tuple) -> Layout:
    """A layout of a rank-2 value: each dim split over no axis, one or two, each axis used once."""
    left = list(axes)
    out = []
    for _ in range(2):
        n = draw(st.integers(0, len(left)))
        mine = tuple(draw(st.permutations(left))[:n]) if n else ()
        left = [a for a in left if a not in mine]
        out.append(mine)
    return tuple(out)


def perturb(draw: Any, d: Draft, v: Value) -> Layout:
    """The return annotation's layout: ``v``'s, or a perturbed one."""
    layout = [tuple(a) for a in v.layout]
    unused = d.unused_axes(v.layout)
    moves = []
    for k, axes in enumerate(layout):
        if axes:
            moves.append(("drop", k))
            if len(axes) == 2:
                moves.append(("drop last", k))
            if unused:
                moves.append(("replace", k))
        elif unused:
            moves.append(("add", k))
    if layout[0] and layout[1]:
        moves.append(("swap", 0))
    if not moves or draw(st.integers(0, 3)) != 0:
        return v.layout
    move, k = draw(st.sampled_from(moves))
    if move == "drop":
        layout[k] = ()
    elif move == "drop last":
        layout[k] = layout[k][:1]
    elif move == "replace":
        i = draw(st.integers(0, len(layout[k]) - 1))
        layout[k] = layout[k][:i] + (draw(st.sampled_from(unused)),) + layout[k][i + 1:]
    elif move == "add":
        layout[k] = (draw(st.sampled_from(unused)),)
    else:
        layout = layout[::-1]
    d.choices.append(f"return annotation {move}: {annotation(v.names, tuple(layout))} for "
                     f"{annotation(v.names, v.layout)} (mesh {', '.join(f'{a}={n}' for a, n in d.mesh.items())})")
    return tuple(layout)


EXTRA = {"psum_scatter": extra.add_psum_scatter, "all_to_all": extra.add_all_to_all, "ring": extra.add_ring,
         "loop": extra.add_loop, "closure": extra.add_closure, "container": extra.add_container,
         "nested": extra.add_nested}


@st.composite
def programs(draw: Any, sizes: tuple = (1, 2, 4)) -> Program:
    mesh = draw(meshes(sizes))
    axis_type = draw(st.sampled_from(sorted(AXIS_TYPES)))
    check_vma = draw(st.booleans())
    eager = draw(st.integers(0, 9)) == 0
    outer, inner = dict(mesh), {}
    if len(mesh) == 2 and draw(st.integers(0, 4)) == 0:  # a nested map over the second axis (Auto: JAX nests over those)
        axis_type, outer, inner = "auto", dict(mesh[:1]), dict(mesh[1:])
    x = draw(layouts(tuple(outer)))
    d = Draft(outer, [("x", f"f32[b'{annotation(('r', 'c'), x)}']")], ["v = x"], ["v = x"],
              Value(("r", "c"), x), check_vma=check_vma, inner=inner)
    for _ in range(draw(st.integers(1, 4))):
        kinds = ["unary", "binary", "reduce", "reduce", "matmul", "matmul", "cumsum", "cond", "scan",
                 "scan_reduce", "psum_scatter", "loop", "container"]
        if axis_type == "auto":  # (JAX closes over values sharded on Auto axes only)
            kinds.append("closure")
        if any(d.value.layout):
            kinds += ["gather", "gather", "prefix", "all_to_all", "ring"]
        if d.inner:
            kinds += ["nested", "nested"]
        kind = draw(st.sampled_from(kinds))
        if kind == "prefix":
            add_prefix(draw, d)
        elif kind == "cond":
            add_cond(draw, d)
        elif kind == "scan":
            add_scan(draw, d)
        elif kind == "scan_reduce":
            add_scan_reduce(draw, d)
        elif kind in EXTRA:
            EXTRA[kind](draw, d)
        else:
            step = STEPS[kind](draw, d, d.value)
            d.kernel.append(f"v = {step.expr}")
            d.ref.append(f"v = {step.ref}" if step.ref != "v" else "# (all_gather: the global value is unchanged)")
            d.value = step.value
        if d.done:
            break
    out = perturb(draw, d, d.value)
    params = ", ".join(f"{n}: {a}" for n, a in d.params)
    ret = annotation(d.value.names, out)
    tracked = "" if out == d.value.layout else f"  # the grammar's layout: {annotation(d.value.names, d.value.layout)}"
    kernel = ([f"def kernel({params}) -> f32[b'{ret}']:"] + [f"    {line}" for line in d.kernel]
              + [f"    return v{tracked}"])
    if d.closed:  # a kernel closing over jit arguments: made inside the jitted function
        kernel = [f"def make({', '.join(d.closed)}):"] + [f"    {line}" for line in kernel] + ["    return kernel"]
    reference = "\n".join([f"def reference({', '.join([n for n, _ in d.params] + d.closed)}):"]
                          + [f"    {line}" for line in d.ref] + ["    return v", ""])
    return Program(mesh, axis_type, check_vma, "\n".join(kernel + [""]), reference, tuple(d.choices),
                   axis_names=tuple(outer) if inner else (), eager=eager)
