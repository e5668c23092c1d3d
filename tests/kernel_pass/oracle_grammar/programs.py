"""Whole programs: a mesh, how the kernel is called (under jit or eagerly, closing over scalars
or not, manual over all the mesh's axes or one with a nested shard_map over the other), its
input, one to four steps, and its return annotation (the layout the grammar followed, or a
perturbed one)."""

from typing import Any

import numpy as np
from hypothesis import strategies as st

from .collectives import add_closure, add_items, add_loop, add_nested, add_new_step
from .draft import Draft, Layout, Value, annotation
from .judging import AXIS_TYPES, Program
from .steps import STEPS, add_cond, add_prefix, add_scan, add_scan_reduce, emit


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
                moves += [("drop last", k), ("reorder", k)]
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
    elif move == "reorder":
        layout[k] = layout[k][::-1]
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


# The steps and how often each is drawn (the later ones cost more to judge, or are rarer in use).
KINDS = {"unary": 2, "binary": 2, "reduce": 4, "matmul": 4, "cumsum": 2, "cond": 2, "scan": 2, "scan_reduce": 2,
         "loop": 2, "items": 1}
SPLIT_KINDS = {"gather": 4, "prefix": 2, "all_to_all": 3}  # (where v is split)
REPLICATED_KINDS = {"scatter": 1}  # (where a mesh axis splits no dim of v)


@st.composite
def programs(draw: Any, sizes: tuple = (1, 2, 4)) -> Program:
    mesh = draw(meshes(sizes))
    axis_type = draw(st.sampled_from(sorted(AXIS_TYPES)))
    check_vma = draw(st.booleans())
    # How it is called: nested (an inner shard_map over the second axis: JAX nests them over Auto
    # axes), closing over scalars (JAX closes over values on Auto axes only), eagerly.
    nested = None
    if axis_type == "auto" and len(mesh) == 2 and draw(st.integers(0, 4)) == 0:
        nested = draw(st.sampled_from([0, 1]))
    closures = axis_type == "auto" and draw(st.integers(0, 3)) == 0
    # (JAX 0.10.2 cannot call a partial-manual shard_map eagerly with check_vma=False: its
    # out_specs check names the other axes; JAX 0.12 can.)
    eager = nested is None and draw(st.integers(0, 24)) == 0
    manual = dict(mesh) if nested is None else dict([mesh[nested]])
    x = draw(layouts(tuple(manual)))
    d = Draft(manual, [("x", f"f32[b'{annotation(('r', 'c'), x)}']")], ["v = x"], ["v = x"], Value(("r", "c"), x), eager=eager)
    for i in range(draw(st.integers(1, 4))):
        kinds = dict(KINDS)
        if any(d.value.layout):
            kinds.update(SPLIT_KINDS)
        if d.unused_axes(d.value.layout):
            kinds.update(REPLICATED_KINDS)
        if closures:
            kinds["closure"] = 3
        if nested is not None:
            kinds["nested"] = 6
        kind = draw(st.sampled_from([k for k, n in kinds.items() for _ in range(n)]))
        adders = {"prefix": add_prefix, "cond": add_cond, "scan": add_scan, "scan_reduce": add_scan_reduce,
                  "loop": add_loop, "items": add_items, "closure": add_closure}
        if kind in adders:
            adders[kind](draw, d)
        elif kind == "nested":
            assert nested is not None
            add_nested(draw, d, *mesh[1 - nested], check_vma)
        elif kind in ("all_to_all", "scatter"):
            if not add_new_step(draw, d, kind):
                emit(d, STEPS["unary"](draw, d, d.value))
        else:
            emit(d, STEPS[kind](draw, d, d.value, **({"scatter": True} if kind in ("reduce", "matmul") else {})))
    out = perturb(draw, d, d.value)
    params = ", ".join(f"{n}: {a}" for n, a in d.params)
    ret = annotation(d.value.names, out)
    tracked = "" if out == d.value.layout else f"  # the grammar's layout: {annotation(d.value.names, d.value.layout)}"
    body = ([f"def kernel({params}) -> f32[b'{ret}']:"] + [f"    {line}" for line in d.kernel]
            + [f"    return v{tracked}"])
    if d.closed:
        body = [f"def make({', '.join(d.closed)}):"] + [f"    {line}" for line in body] + ["    return kernel"]
    kernel = "\n".join(body + [""])
    reference = "\n".join([f"def reference({', '.join([n for n, _ in d.params] + d.closed)}):"]
                          + [f"    {line}" for line in d.ref] + ["    return v", ""])
    return Program(mesh, axis_type, check_vma, kernel, reference, eager=eager, closed=tuple(d.closed),
                   axis_names=None if nested is None else (mesh[nested][0],), choices=tuple(d.choices))
