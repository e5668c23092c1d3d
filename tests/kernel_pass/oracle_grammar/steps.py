"""The grammar's first steps on ``v``: elementwise ops, reductions and matmuls with their
collectives (and the psum_scatter that finishes a sum onto the other dim), tiled gathers, cumsums,
carried prefix sums, cond and scan."""

import itertools
from typing import Any

from hypothesis import strategies as st

from .draft import REDUCE, Collective, Draft, Step, Value, axes_arg, draw_collective, drawn, product, wrap

UNARY = {
    "tanh": ("jnp.tanh(v * 0.01)", "np.tanh(v * 0.01)"),  # (scaled: a saturated tanh hides wrong sums)
    "affine": ("v * 2.0 + 1.0", "v * 2.0 + 1.0"),
    "exp": ("jnp.exp(v * 0.1)", "np.exp(v * 0.1)"),
}


def step_unary(draw: Any, d: Draft, v: Value) -> Step:
    op = draw(st.sampled_from(sorted(UNARY)))
    return Step(UNARY[op][0], UNARY[op][1], v)


def disagreeing(draw: Any, d: Draft, v: Value) -> tuple | None:
    """A layout with the same blocks' shape as ``v``'s but other blocks: an axis replaced by an
    unused one of the same size, or the two dims' axes swapped (dims of one size)."""
    out = []
    for k, axes in enumerate(v.layout):
        for i, a in enumerate(axes):
            for b in d.unused_axes(v.layout):
                if d.mesh[b] == d.mesh[a] > 1:
                    out.append(tuple(axes[:i] + (b,) + axes[i + 1:] if j == k else x for j, x in enumerate(v.layout)))
    if v.names[0] == v.names[1] or {v.names[0], v.names[1]} <= {"r", "c"}:
        swapped = v.layout[::-1]
        if swapped != v.layout and product(d.mesh, swapped[0]) == product(d.mesh, v.layout[0]) > 1:
            out.append(swapped)
    return draw(st.sampled_from(out)) if out else None


def step_binary(draw: Any, d: Draft, v: Value, y: str | None = None) -> Step:
    op = draw(st.sampled_from(["+", "*"]))
    if y is None:
        layout = v.layout
        if drawn("elementwise_operands_disagree") and draw(st.integers(0, 7)) == 0:
            other = disagreeing(draw, d, v)
            if other is not None:
                layout = other
                d.choices.append(f"v {op} y with y laid out {other}, v {v.layout}")
        y = d.new_input("y", v.names, layout)
    return Step(f"v {op} {y}", f"v {op} {y}", v)


def scatter_onto(draw: Any, d: Draft, v: Value, j: int, axes: tuple) -> bool:
    """Whether to finish a partial sum over ``axes`` with a psum_scatter onto dim ``j``."""
    return (bool(axes) and v.names[j] != "1" and not set(axes) & set(v.layout[j])
            and v.local(d.mesh, j) % product(d.mesh, axes) == 0 and draw(st.integers(0, 3)) == 0)


def step_reduce(draw: Any, d: Draft, v: Value, fixed: tuple | None = None, scatter: bool = False) -> Step:
    k, kind = fixed or (draw(st.integers(0, 1)), draw(st.sampled_from(sorted(REDUCE))))
    k = d.reduced_dim(v, k)
    local, ref, _ = REDUCE[kind]
    collective = draw_collective(draw, d, kind, v.layout[k])
    out = v.with_dim(k, "1", ())
    expr = f"{local}(v, axis={k}, keepdims=True)"
    if scatter and kind == "sum" and collective == Collective("jax.lax.psum", v.layout[k]) and \
            scatter_onto(draw, d, out, 1 - k, collective.axes):
        j = 1 - k
        return Step(f"jax.lax.psum_scatter({expr}, {axes_arg(collective.axes)}, scatter_dimension={j}, tiled=True)",
                    f"{ref}(v, axis={k}, keepdims=True)", out.with_dim(j, out.names[j], out.layout[j] + collective.axes))
    return Step(wrap(expr, collective, d.mesh), f"{ref}(v, axis={k}, keepdims=True)", out, (k, kind))


def step_matmul(draw: Any, d: Draft, v: Value, w: tuple | None = None, scatter: bool = False) -> Step:
    rows, cols = v.layout  # cols: the contracted dim
    if w is None:
        rows_w = cols
        others = [t for n in (0, 1, 2) for t in itertools.permutations(d.mesh, n)
                  if t != cols and product(d.mesh, t) == product(d.mesh, cols) and not set(t) & set(rows)]
        if others and d.inner is None and draw(st.integers(0, 5)) == 0:  # rarely: the weight split over other axes
            rows_w = draw(st.sampled_from(others))
            d.choices.append(f"matmul contracting a dim split over {d.split(cols)} with one split over "
                             f"{d.split(rows_w)}")
        free = [a for a in d.unused_axes((rows,)) if a not in rows_w]
        cols_w = draw(st.sampled_from([(), ()] + [(a,) for a in free]))
        n = f"n{d.counter + 1}"
        name = d.new_input("w", (v.names[1], n), (rows_w, cols_w))
        w = (name, n, rows_w, cols_w)
    name, n, rows_w, cols_w = w
    contracted = tuple(dict.fromkeys(tuple(cols) + tuple(rows_w)))
    choices = ["exact", "exact", "none"]
    extra = [a for a in d.mesh if a not in contracted]
    if extra:
        choices.append("superset")
    if contracted and drawn("ring_pays_a_partial_result"):
        choices.append("ring")
    choice = draw(st.sampled_from(choices))
    collective = None
    out = Value((v.names[0], n), (rows, cols_w))
    if choice == "exact" and contracted:
        collective = Collective("jax.lax.psum", contracted)
        j = draw(st.integers(0, 1))
        if scatter and scatter_onto(draw, d, out, j, contracted):
            return Step(f"jax.lax.psum_scatter(v @ {name}, {axes_arg(contracted)}, scatter_dimension={j}, tiled=True)",
                        f"v @ {name}", out.with_dim(j, out.names[j], out.layout[j] + contracted), w)
    elif choice == "ring":  # (a collective matmul: the blocks' products passed round and added up)
        collective = Collective("ring", contracted, "sum", draw(st.sampled_from([1, -1])))
    elif choice == "superset":
        collective = Collective("jax.lax.psum", contracted + (draw(st.sampled_from(extra)),))
        d.choices.append(f"matmul contracting a dim split over {d.split(contracted)}, then psum over "
                         f"{d.split(collective.axes)}")
    elif choice == "none" and contracted:
        d.choices.append(f"matmul contracting a dim split over {d.split(contracted)}, then no psum")
    return Step(wrap(f"v @ {name}", collective, d.mesh), f"v @ {name}", out, w)


def step_gather(draw: Any, d: Draft, v: Value) -> Step:
    k = draw(st.sampled_from([i for i, axes in enumerate(v.layout) if axes]))
    axes = v.layout[k]
    choices = [axes, axes] + ([axes[1:], axes[1:], axes[:1]] if len(axes) == 2 else [])
    gathered = draw(st.sampled_from(choices))
    if gathered[-1] != axes[-1]:
        d.scrambled.add(v.names[k])
        d.choices.append(f"all_gather over {d.split(gathered)} of a dim split over {d.split(axes)}")
    layout = tuple(tuple(a for a in x if a not in gathered) if i == k else x for i, x in enumerate(v.layout))
    return Step(f"jax.lax.all_gather(v, {axes_arg(gathered)}, axis={k}, tiled=True)", "v", Value(v.names, layout))


def step_cumsum(draw: Any, d: Draft, v: Value) -> Step:
    k = draw(st.integers(0, 1))
    if v.layout[k]:
        d.choices.append(f"cumsum along a dim split over {d.split(v.layout[k])}")
    return Step(f"jnp.cumsum(v, axis={k})", f"np.cumsum(v, axis={k})", v)


STEPS = {"unary": step_unary, "binary": step_binary, "reduce": step_reduce, "matmul": step_matmul,
         "gather": step_gather, "cumsum": step_cumsum}


def emit(d: Draft, step: Step) -> None:
    d.kernel.append(f"v = {step.expr}")
    d.ref.append(f"v = {step.ref}" if step.ref != "v" else "# (the global value is unchanged)")
    d.value = step.value


def variant(draw: Any, d: Draft, kind: str, first: Step, v: Value) -> Step:
    """Another step of ``kind`` with the same result as ``first`` (the other branch of a cond)."""
    if kind in ("unary", "cumsum"):
        return step_unary(draw, d, v)
    if kind == "binary":
        return step_binary(draw, d, v, first.expr.split()[-1])
    if kind == "reduce":
        return step_reduce(draw, d, v, first.fixed)
    return step_matmul(draw, d, v, first.fixed)


def add_cond(draw: Any, d: Draft) -> None:
    v = d.value
    kind = draw(st.sampled_from(["unary", "binary", "reduce", "matmul", "cumsum"]))
    p = d.new_input("p", (), (), "bool_")
    first = STEPS[kind](draw, d, v)
    other = variant(draw, d, kind, first, v)
    d.kernel.append(f"v = jax.lax.cond({p}, lambda v: {first.expr}, lambda v: {other.expr}, v)")
    d.ref.append(f"v = {first.ref} if {p} else {other.ref}")
    d.value = first.value


def add_prefix(draw: Any, d: Draft) -> None:
    """A prefix sum along a split dim, carried right: each block's local cumsum plus the totals
    of the blocks before it (gathered, masked by ``axis_index``)."""
    v = d.value
    k = draw(st.sampled_from([i for i, axes in enumerate(v.layout) if axes]))
    ax = axes_arg(v.layout[k])
    shape = "(-1, 1)" if k == 0 else "(1, -1)"
    d.kernel += [f"c = jnp.cumsum(v, axis={k})",
                 f"t = jax.lax.all_gather(jax.lax.slice_in_dim(c, c.shape[{k}] - 1, c.shape[{k}], axis={k}), {ax}, "
                 f"axis={k}, tiled=True)",
                 f"before = (jnp.arange(t.shape[{k}]) < jax.lax.axis_index({ax})).reshape{shape}",
                 f"v = c + jnp.sum(jnp.where(before, t, 0.0), axis={k}, keepdims=True)"]
    d.ref.append(f"v = np.cumsum(v, axis={k})")


def add_scan(draw: Any, d: Draft) -> None:
    v = d.value
    if draw(st.booleans()):
        step = step_unary(draw, d, v)
        d.kernel.append(f"v, _ = jax.lax.scan(lambda v, _: ({step.expr}, None), v, None, length=2)")
        d.ref += ["for _ in range(2):", f"    v = {step.ref}"]
        return
    ys = d.new_input("ys", ("l",) + v.names, ((),) + v.layout)
    op = draw(st.sampled_from(["+", "*"]))
    d.kernel.append(f"v, _ = jax.lax.scan(lambda v, y: (v {op} y, None), v, {ys})")
    d.ref += [f"for y in {ys}:", f"    v = v {op} y"]


def add_scan_reduce(draw: Any, d: Draft) -> None:
    v = d.value
    k, kind = d.reduced_dim(v, draw(st.integers(0, 1))), draw(st.sampled_from(sorted(REDUCE)))
    local, ref, _ = REDUCE[kind]
    zs = d.new_input("zs", ("l",) + v.names, ((),) + v.layout)
    combine = "acc + {}" if kind == "sum" else "jnp.maximum(acc, {})"
    part = f"{local}(z, axis={k}, keepdims=True)"
    d.kernel += [f"acc = {local}(v, axis={k}, keepdims=True)",
                 f"acc, _ = jax.lax.scan(lambda acc, z: ({combine.format(part)}, None), acc, {zs})",
                 f"v = {wrap('acc', draw_collective(draw, d, kind, v.layout[k]), d.mesh)}"]
    d.ref += [f"acc = {ref}(v, axis={k}, keepdims=True)", f"for z in {zs}:",
              f"    acc = {combine.replace('jnp.', 'np.').format(f'{ref}(z, axis={k}, keepdims=True)')}",
              "v = acc"]
    d.value = v.with_dim(k, "1", ())
