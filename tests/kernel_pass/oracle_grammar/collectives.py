"""The grammar's later steps: all_to_all, psum_scatter of a value owing nothing, while_loop and
fori_loop bodies, closures over traced values, list and dict arguments, and a nested shard_map
over another mesh axis."""

from typing import Any

from hypothesis import strategies as st

from .draft import Draft, Step, Value, annotation, axes_arg, drawn
from .steps import STEPS, emit, step_binary, step_cumsum, step_unary


def step_all_to_all(draw: Any, d: Draft, v: Value) -> Step | None:
    """all_to_all: the blocks of a dim split over axis ``a`` (its last) put back together, and the
    other dim split over ``a`` (appended: its last axis). Over the first of two axes the blocks
    come back out of order."""
    found = []
    for kc in (0, 1):
        ks = 1 - kc
        if not v.layout[kc] or v.names[ks] == "1" or (v.layout[ks] and not drawn("all_to_all_onto_a_split_dim")):
            continue
        for ax in dict.fromkeys((v.layout[kc][-1], v.layout[kc][-1], v.layout[kc][0])):
            if v.local(d.mesh, ks) % d.mesh[ax] == 0:
                found.append((kc, ks, ax))
    if not found:
        return None
    kc, ks, ax = draw(st.sampled_from(found))
    if ax != v.layout[kc][-1]:
        d.scrambled.add(v.names[kc])
        d.choices.append(f"all_to_all over {d.split((ax,))} of a dim split over {d.split(v.layout[kc])}")
    out = v.with_dim(kc, v.names[kc], tuple(a for a in v.layout[kc] if a != ax))
    out = out.with_dim(ks, v.names[ks], v.layout[ks] + (ax,))
    return Step(f"jax.lax.all_to_all(v, {ax!r}, {ks}, {kc}, tiled=True)", "v", out)


def step_scatter_replicated(draw: Any, d: Draft, v: Value) -> Step | None:
    """psum_scatter over an axis the value is the same on: each device's block, times the axis'
    size (right only where that size is 1)."""
    found = [(j, a) for j in (0, 1) for a in d.unused_axes(v.layout)
             if v.names[j] != "1" and v.local(d.mesh, j) % d.mesh[a] == 0]
    if not found or ("all_gather" in "\n".join(d.kernel) and not drawn("psum_scatter_of_a_gathered_value")):
        return None
    j, a = draw(st.sampled_from(found))
    if d.mesh[a] > 1:
        d.choices.append(f"psum_scatter over {d.split((a,))}, which the value is the same on")
    return Step(f"jax.lax.psum_scatter(v, {a!r}, scatter_dimension={j}, tiled=True)", "v",
                v.with_dim(j, v.names[j], v.layout[j] + (a,)))


def add_loop(draw: Any, d: Draft) -> None:
    """A fori_loop or while_loop of two trips over a step that keeps ``v``'s layout."""
    v = d.value
    body = draw(st.sampled_from([step_unary, step_unary, step_binary, step_cumsum]))(draw, d, v)
    if draw(st.booleans()):
        d.kernel.append(f"v = jax.lax.fori_loop(0, 2, lambda i, v: {body.expr}, v)")
    else:
        d.counter += 1
        d.kernel += [f"def body{d.counter}(c):", "    i, v = c", f"    return i + 1, {body.expr}",
                     f"v = jax.lax.while_loop(lambda c: c[0] < 2, body{d.counter}, (0, v))[1]"]
    d.ref += ["for _ in range(2):", f"    v = {body.ref}"]


def add_closure(draw: Any, d: Draft) -> None:
    """``v`` with a scalar the kernel closes over (a jit argument under jit, a concrete value when
    called eagerly): scaled or shifted by it, by its pmean (itself), or by its psum over an axis
    (the scalar times the axis' size)."""
    d.counter += 1
    s = f"s{d.counter}"
    d.closed.append(s)
    choices = ["scale", "shift", "pmean"] + (["psum"] if not d.eager or drawn("psum_of_a_closed_over_concrete_scalar_eagerly") else [])
    choice = draw(st.sampled_from(choices))
    if choice in ("scale", "shift"):
        op = "*" if choice == "scale" else "+"
        d.kernel.append(f"v = v {op} {s}")
        d.ref.append(f"v = v {op} {s}")
        return
    ax = draw(st.sampled_from(sorted(d.mesh)))
    if choice == "pmean":
        d.kernel.append(f"v = v * jax.lax.pmean({s}, {ax!r})")
        d.ref.append(f"v = v * {s}")
        return
    if d.mesh[ax] > 1:
        d.choices.append(f"psum over {d.split((ax,))} of the closed-over {s}, the same on every device")
    d.kernel.append(f"v = v + jax.lax.psum({s}, {ax!r})")
    d.ref.append(f"v = v + {s}")


def add_items(draw: Any, d: Draft) -> None:
    """``v`` with the items of a list argument (``list[X]``) or a dict one (``dict[str, X]``)."""
    v = d.value
    if draw(st.booleans()):
        xs = d.new_input("ls", v.names, v.layout, container="list")
        d.kernel.append(f"v = v + {xs}[0] * {xs}[1]")
        d.ref.append(f"v = v + {xs}[0] * {xs}[1]")
    else:
        xs = d.new_input("ds", v.names, v.layout, container="dict")
        d.kernel.append(f"v = v * {xs}['u'] + {xs}['w']")
        d.ref.append(f"v = v * {xs}['u'] + {xs}['w']")


def _spec(layout: tuple, axis: str) -> str:
    return "P(" + ", ".join(repr(axis) if axis in axes else "None" for axes in layout) + ")"


def _without(layout: tuple, axis: str) -> tuple:
    return tuple(tuple(a for a in axes if a != axis) for axes in layout)


def add_nested(draw: Any, d: Draft, axis: str, size: int, check_vma: bool) -> None:
    """A ``jax.shard_map`` over ``axis`` (a mesh axis the kernel is not manual over) inside the
    kernel: ``v`` goes in with one dim (or none) split over it, after the kernel's own axes; one
    step runs there, its collectives over any axis; the result comes out as the step left it."""
    v = d.value
    mesh = dict(d.mesh, **{axis: size})
    dims = [k for k in (0, 1) if v.names[k] != "1" and v.local(mesh, k) % size == 0]
    k = draw(st.sampled_from(dims + [None]))
    inside = v if k is None else v.with_dim(k, v.names[k], v.layout[k] + (axis,))
    outer, first, kernel, ref = d.mesh, len(d.params), d.kernel, d.ref
    d.mesh, d.inner = mesh, axis
    kinds = ["unary", "binary", "reduce", "reduce", "matmul", "matmul", "cumsum"]
    if any(inside.layout):
        kinds.append("gather")
    step = STEPS[draw(st.sampled_from(kinds))](draw, d, inside)
    d.mesh, d.inner = outer, None
    names, specs = ["v"], [_spec(inside.layout, axis)]
    for i in range(first, len(d.params)):  # the step's new inputs: the kernel's, without the inner axis
        name = d.params[i][0]
        _, dims_, layout, dtype = d.inputs[name]
        d.params[i] = (name, f"{dtype}[b'{annotation(dims_, _without(layout, axis))}']")
        names.append(name)
        specs.append(_spec(layout, axis))
    d.counter += 1
    fn = f"inner{d.counter}"
    d.kernel = kernel + [f"def {fn}({', '.join(names)}):", f"    return {step.expr}",
                         f"v = jax.shard_map({fn}, in_specs=({', '.join(specs)},), out_specs={_spec(step.value.layout, axis)}, "
                         f"axis_names={{{axis!r}}}, check_vma={check_vma})({', '.join(names)})"]
    d.ref = ref
    emit_ref = Step("v", step.ref, step.value)
    d.ref.append(f"v = {emit_ref.ref}" if emit_ref.ref != "v" else "# (the global value is unchanged)")
    d.value = Value(step.value.names, _without(step.value.layout, axis))


NEW_STEPS = {"all_to_all": step_all_to_all, "scatter": step_scatter_replicated}


def add_new_step(draw: Any, d: Draft, kind: str) -> bool:
    """Draws a step of ``kind`` from NEW_STEPS onto the draft; False where none fits ``v``."""
    step = NEW_STEPS[kind](draw, d, d.value)
    if step is None:
        return False
    emit(d, step)
    return True


__all__ = ["add_closure", "add_items", "add_loop", "add_nested", "add_new_step", "axes_arg"]
