"""The steps real shard_map kernels use beyond the first grammar: ``psum_scatter``, ``all_to_all``,
``ppermute`` rings, ``fori_loop``/``while_loop``, closures over jit arguments, a nested
``jax.shard_map``, and list and dict arguments. Each draws right and wrong variants (the wrong
ones are named in ``Draft.choices``)."""

from typing import Any

from hypothesis import strategies as st

from .base import REDUCE, Draft, Value, axes_arg, draw_collective, step_cumsum, step_reduce, step_unary, wrap


def owing(draw: Any, d: Draft, v: Value, matmul: bool) -> tuple[str, str, tuple, Value] | None:
    """A partial sum made of ``v``: ``v @ w`` (a new weight whose rows are split like ``v``'s
    columns) or ``jnp.sum`` over a dim; (kernel expr, reference expr, the axes it owes, result)."""
    if matmul:
        n = f"n{d.counter + 1}"
        w = d.new_input("w", (v.names[1], n), (v.layout[1], ()))
        return f"v @ {w}", f"v @ {w}", v.layout[1], Value((v.names[0], n), (v.layout[0], ()))
    ks = [k for k in (0, 1) if v.names[1 - k] != "1"]
    if not ks:
        return None
    k = draw(st.sampled_from(ks))
    return (f"jnp.sum(v, axis={k}, keepdims=True)", f"np.sum(v, axis={k}, keepdims=True)", v.layout[k],
            Value(tuple("1" if i == k else n for i, n in enumerate(v.names)),
                  tuple(() if i == k else a for i, a in enumerate(v.layout))))


def add_psum_scatter(draw: Any, d: Draft) -> None:
    """A partial sum paid with a tiled ``psum_scatter`` along a dim, which becomes split over the
    scattered axes (after the ones it was split over); wrong: scattered over an axis not owed
    (too), or (the grammar ending there) the dim annotated unsplit."""
    v = d.value
    made = owing(draw, d, v, draw(st.booleans()))
    if made is None:
        return
    expr, ref, owed, out = made
    dims = [j for j in (0, 1) if out.names[j] != "1"]
    extra = [a for a in d.mesh if a not in owed and not any(a in axes for axes in out.layout)]
    choices = (["exact", "exact"] if owed else []) + (["superset", "unowed"] if extra else [])
    if not choices:
        d.kernel.append(f"v = {expr}")
        d.ref.append(f"v = {ref}")
        d.value = out
        return
    choice = draw(st.sampled_from(choices))
    axes = owed if choice == "exact" else (owed + (draw(st.sampled_from(extra)),) if choice == "superset" else
                                           (draw(st.sampled_from(extra)),))
    if choice != "exact":
        d.choices.append(f"psum_scatter over {d.split(axes)} of a partial sum owing {d.split(owed)}")
    j = draw(st.sampled_from(dims))
    d.kernel.append(f"v = jax.lax.psum_scatter({expr}, {axes_arg(axes)}, scatter_dimension={j}, tiled=True)")
    d.ref.append(f"v = {ref}")
    layout = tuple(a + axes if i == j else a for i, a in enumerate(out.layout))
    if draw(st.integers(0, 5)) == 0:
        d.choices.append(f"psum_scatter along dim {j} over {d.split(axes)}, the dim annotated unsplit")
        layout, d.done = out.layout, True
    d.value = Value(out.names, layout)


def add_all_to_all(draw: Any, d: Draft) -> None:
    """A tiled ``all_to_all`` moving the last mesh axis of a split dim ``k`` onto the other dim
    ``j`` (after its own): the global value is unchanged; wrong: moving the first of two (the
    blocks put back out of order), or the grammar annotating the moved axis before ``j``'s own."""
    v = d.value
    ks = [k for k in (0, 1) if v.layout[k] and v.names[1 - k] != "1"]
    if not ks:
        return
    k = draw(st.sampled_from(ks))
    j = 1 - k
    axes = v.layout[k]
    a = axes[-1] if len(axes) == 1 or draw(st.integers(0, 3)) else axes[0]
    if a != axes[-1]:
        d.choices.append(f"all_to_all moving {d.split((a,))} off a dim split over {d.split(axes)}")
    moved = v.layout[j] + (a,)
    if v.layout[j] and draw(st.integers(0, 3)) == 0:
        moved = (a,) + v.layout[j]
        d.choices.append(f"all_to_all onto a dim split over {d.split(v.layout[j])}, annotated {d.split(moved)}")
    layout = [None, None]
    layout[k], layout[j] = tuple(x for x in axes if x != a), moved
    d.kernel.append(f"v = jax.lax.all_to_all(v, {a!r}, {j}, {k}, tiled=True)")
    d.ref.append("# (all_to_all: the global value is unchanged)")
    d.value = Value(v.names, tuple(layout))


# FINDING (the lead's report, ring sums): the pass refuses every right ring (a partial sum plus
# its blocks rotated round the ring n - 1 times, which is the psum): it reads the sum of the
# ppermuted parts as still owing the axis ("it is a partial sum still owing a sum over mesh axis
# 'a'"). So the grammar draws only the wrong rings (one rotation too few, or one too many) until
# the pass follows rings; RIGHT_RINGS turns the right ones on.
RIGHT_RINGS = False


def add_ring(draw: Any, d: Draft) -> None:
    """A sum over a dim split over one axis of size n > 1, paid round a ring: the partial sum plus
    its block ``ppermute``'d to the next device n - 1 times (a Python loop or ``fori_loop``);
    wrong: one rotation too few or too many."""
    v = d.value
    ks = [k for k in (0, 1) if len(v.layout[k]) == 1 and d.mesh[v.layout[k][0]] > 1 and v.names[1 - k] != "1"]
    if not ks:
        return
    k = draw(st.sampled_from(ks))
    a = v.layout[k][0]
    n = d.mesh[a]
    turns = draw(st.sampled_from(([n - 1] if RIGHT_RINGS else []) + [n - 2, n]))
    if turns != n - 1:
        d.choices.append(f"ring sum over {d.split((a,))} with {turns} rotations")
    ring = f"jax.lax.ppermute({{}}, {a!r}, perm=[(i, (i + 1) % {n}) for i in range({n})])"
    d.kernel.append(f"acc = jnp.sum(v, axis={k}, keepdims=True)")
    if draw(st.booleans()):
        d.kernel += ["blk = acc", f"for _ in range({turns}):", f"    blk = {ring.format('blk')}",
                     "    acc = acc + blk", "v = acc"]
    else:
        d.kernel.append(f"v, _ = jax.lax.fori_loop(0, {turns}, lambda i, c: (lambda b: (c[0] + b, b))"
                        f"({ring.format('c[1]')}), (acc, acc))")
    d.ref.append(f"v = np.sum(v, axis={k}, keepdims=True)")
    d.value = Value(tuple("1" if i == k else x for i, x in enumerate(v.names)),
                    tuple(() if i == k else x for i, x in enumerate(v.layout)))


def add_loop(draw: Any, d: Draft) -> None:
    """The scan steps as ``fori_loop`` / ``while_loop``: a unary step or a cumsum twice, ``v + ys[i]``
    over a stacked input, or a sum (max) over a dim accumulated over a stacked input's slices with
    the collective after the loop."""
    v = d.value
    form = draw(st.sampled_from(["repeat", "stacked", "reduce"]))
    if form == "repeat":
        step = (step_unary if draw(st.booleans()) else step_cumsum)(draw, d, v)
        if draw(st.booleans()):
            d.kernel.append(f"v = jax.lax.fori_loop(0, 2, lambda i, v: {step.expr}, v)")
        else:
            d.kernel.append(f"_, v = jax.lax.while_loop(lambda c: c[0] < 2, lambda c: (c[0] + 1, "
                            f"(lambda v: {step.expr})(c[1])), (0, v))")
        d.ref += ["for _ in range(2):", f"    v = {step.ref}"]
    elif form == "stacked":
        ys = d.new_input("ys", ("l",) + v.names, ((),) + v.layout)
        op = draw(st.sampled_from(["+", "*"]))
        d.kernel.append(f"v = jax.lax.fori_loop(0, 2, lambda i, v: v {op} {ys}[i], v)")
        d.ref += [f"for y in {ys}:", f"    v = v {op} y"]
    else:
        k, kind = draw(st.integers(0, 1)), draw(st.sampled_from(sorted(REDUCE)))
        local, ref, _ = REDUCE[kind]
        zs = d.new_input("zs", ("l",) + v.names, ((),) + v.layout)
        combine = "acc + {}" if kind == "sum" else "jnp.maximum(acc, {})"
        d.kernel += [f"acc = {local}(v, axis={k}, keepdims=True)",
                     f"acc = jax.lax.fori_loop(0, 2, lambda i, acc: "
                     f"{combine.format(f'{local}({zs}[i], axis={k}, keepdims=True)')}, acc)",
                     f"v = {wrap('acc', draw_collective(draw, d, kind, v.layout[k]))}"]
        d.ref += [f"acc = {ref}(v, axis={k}, keepdims=True)", f"for z in {zs}:",
                  f"    acc = {combine.replace('jnp.', 'np.').format(f'{ref}(z, axis={k}, keepdims=True)')}",
                  "v = acc"]
        d.value = Value(tuple("1" if i == k else n for i, n in enumerate(v.names)),
                        tuple(() if i == k else a for i, a in enumerate(v.layout)))


def add_closure(draw: Any, d: Draft) -> None:
    """``v * s`` with ``s`` a jit argument the kernel closes over (replicated); wrong: psummed
    over a mesh axis first (counted once per device)."""
    d.closed.append(s := f"s{len(d.closed) + 1}")
    if d.mesh and draw(st.integers(0, 3)) == 0:
        a = draw(st.sampled_from(sorted(d.mesh)))
        d.choices.append(f"closed-over scalar psummed over {d.split((a,))}")
        d.kernel.append(f"v = v * jax.lax.psum({s}, {a!r})")
    else:
        d.kernel.append(f"v = v * {s}")
    d.ref.append(f"v = v * {s}")


def add_container(draw: Any, d: Draft) -> None:
    """``v + ls[0] * ls[1]`` with ``ls: list[X]``, or ``v + ds['u'] * ds['w']`` with ``ds:
    dict[str, X]``, X laid out as ``v`` (its dims named, or a weight's dim ``n<i>`` anonymous, ``_``); wrong: X's layout with
    one axis replaced by another of the same size (the same block shapes)."""
    v = d.value
    names = tuple("_" if n.startswith("n") and draw(st.booleans()) else n for n in v.names)
    layout = v.layout
    swaps = [(k, i, b) for k, axes in enumerate(layout) for i, a in enumerate(axes)
             for b in d.unused_axes(layout) if d.mesh[b] == d.mesh[a]]
    if swaps and draw(st.integers(0, 3)) == 0:
        k, i, b = draw(st.sampled_from(swaps))
        layout = tuple(axes[:i] + (b,) + axes[i + 1:] if j == k else axes for j, axes in enumerate(layout))
        d.choices.append(f"container items laid out {d.split(layout[k])} where v is {d.split(v.layout[k])}")
    op = draw(st.sampled_from(["+", "*"]))
    d.counter += 1
    item = f"f32[b'{' '.join(n + ''.join(f'/{a}' for a in axes) for n, axes in zip(names, layout))}']"
    if draw(st.booleans()):
        name = f"ls{d.counter}"
        d.params.append((name, f"list[{item}]"))
        first, second = f"{name}[0]", f"{name}[1]"
    else:
        name = f"ds{d.counter}"
        d.params.append((name, f"dict[str, {item}]"))
        first, second = f"{name}['u']", f"{name}['w']"
    d.kernel.append(f"v = v {op} {first} * {second}")
    d.ref.append(f"v = v {op} {first} * {second}")


def add_nested(draw: Any, d: Draft) -> None:
    """A ``jax.shard_map`` inside the kernel over the second (Auto) axis ``b``, its block of ``v``
    split over ``b`` along dim ``j``: the reduce step (its collective over the axes owed, of both
    the kernel and the nested map, or a wrong one), returned with ``b`` on dim ``j`` when that dim
    is kept; wrong: (the grammar ending there) returned with ``b`` dropped."""
    v = d.value
    (b, _), = d.inner.items()
    js = [j for j in (0, 1) if v.names[j] != "1"]
    if not js:
        return
    j = draw(st.sampled_from(js))
    inner = tuple(axes + (b,) if i == j else axes for i, axes in enumerate(v.layout))
    outer_mesh = d.mesh
    d.mesh = {**outer_mesh, **d.inner}
    try:
        step = step_reduce(draw, d, Value(v.names, inner))
    finally:
        d.mesh = outer_mesh
    out = step.value.layout
    spec = lambda layout: "P(" + ", ".join(repr(b) if b in axes else "None" for axes in layout) + ")"
    if any(b in axes for axes in out) and draw(st.integers(0, 4)) == 0:
        d.choices.append(f"nested shard_map returns dim {j} split over {b} as whole (out_specs without {b!r})")
        out, d.done = tuple(tuple(x for x in axes if x != b) for axes in out), True
    d.kernel.append(f"v = jax.shard_map(lambda v: {step.expr}, in_specs={spec(inner)}, out_specs={spec(out)}, "
                    f"axis_names={{{b!r}}}, check_vma={d.check_vma})(v)")
    d.ref.append(f"v = {step.ref}")
    d.value = Value(step.value.names, tuple(tuple(x for x in axes if x != b) for axes in out))
