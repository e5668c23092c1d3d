"""The program the oracle draws, the value the grammar follows, and its first steps (unary,
binary, reduce, matmul, gather, cumsum, cond, prefix, scan, scan_reduce)."""

import dataclasses
import itertools
from typing import Any

from hypothesis import strategies as st
from jax.sharding import AxisType

AXIS_TYPES = {"explicit": AxisType.Explicit, "auto": AxisType.Auto}
SIZES = {"r": 16, "c": 16, "l": 2}  # global sizes of the dim names; n1..n4 are 8, a literal is itself

Layout = tuple  # per dim, the tuple of mesh axes it is split over


@dataclasses.dataclass(frozen=True)
class Program:
    """One generated kernel: the mesh, ``check_vma``, the kernel's source and the reference's
    (numpy, on the global arrays, with the same parameters)."""

    mesh: tuple  # (('a', 2), ('b', 4))
    axis_type: str  # 'explicit' | 'auto'
    check_vma: bool
    kernel: str
    reference: str
    # The grammar's choices that depart from the right kernel (wrong collectives, a cumsum over
    # a split dim, a perturbed return annotation...): not part of the program, a reading aid.
    choices: tuple = dataclasses.field(default=(), compare=False)
    axis_names: tuple = ()  # the kernel's manual axes (typed_shard_map's axis_names), all when empty
    eager: bool = False  # run and traced with no jax.jit

    def text(self) -> str:
        mesh = ", ".join(f"{n}={s}" for n, s in self.mesh)
        choices = "".join(f"\n  - {c}" for c in self.choices) or " none"
        how = (f", axis_names={set(self.axis_names)}" if self.axis_names else "") + (", eager" if self.eager else "")
        return (f"mesh ({mesh}), {self.axis_type} axes, check_vma={self.check_vma}{how}\n\n{self.kernel}\n"
                f"{self.reference}\ngrammar choices departing from the right kernel:{choices}\n")



@dataclasses.dataclass(frozen=True)
class Value:
    """What the grammar knows of ``v``: its global dim names and the mesh axes of each dim."""

    names: tuple
    layout: Layout


def annotation(names: tuple, layout: Layout) -> str:
    return " ".join(n + "".join(f"/{a}" for a in axes) for n, axes in zip(names, layout))


def axes_arg(axes: tuple) -> str:
    return repr(axes[0]) if len(axes) == 1 else repr(tuple(axes))


def product(mesh: dict, axes: tuple) -> int:
    out = 1
    for a in axes:
        out *= mesh[a]
    return out


@dataclasses.dataclass
class Draft:
    """A kernel under construction."""

    mesh: dict  # name -> size
    params: list  # (name, annotation string)
    kernel: list  # body lines
    ref: list  # reference body lines
    value: Value
    counter: int = 0
    choices: list = dataclasses.field(default_factory=list)
    check_vma: bool = False
    inner: dict = dataclasses.field(default_factory=dict)  # a nested map's axis (name -> size), not manual here
    closed: list = dataclasses.field(default_factory=list)  # jit arguments the kernel closes over
    done: bool = False  # a step the grammar's layout no longer follows: no more steps

    def split(self, axes: tuple) -> str:
        """``axes`` with their sizes, for a choice's description."""
        sizes = {**self.mesh, **self.inner}
        return "/".join(f"{a}({sizes[a]})" for a in axes) if axes else "no axis"

    def new_input(self, prefix: str, names: tuple, layout: Layout, dtype: str = "f32") -> str:
        self.counter += 1
        name = f"{prefix}{self.counter}"
        self.params.append((name, f"{dtype}[b'{annotation(names, layout)}']"))
        return name

    def unused_axes(self, *layouts: Layout) -> list:
        used = {a for layout in layouts for axes in layout for a in axes}
        return [a for a in self.mesh if a not in used]


UNARY = {
    "tanh": ("jnp.tanh(v * 0.1)", "np.tanh(v * 0.1)"),  # (scaled: a saturated tanh hides wrong sums)
    "affine": ("v * 2.0 + 1.0", "v * 2.0 + 1.0"),
    "exp": ("jnp.exp(v * 0.1)", "np.exp(v * 0.1)"),
}
REDUCE = {"sum": ("jnp.sum", "np.sum", "jax.lax.psum"), "max": ("jnp.max", "np.max", "jax.lax.pmax")}
OTHER = {"jax.lax.psum": "jax.lax.pmax", "jax.lax.pmax": "jax.lax.psum"}


def draw_collective(draw: Any, d: Draft, kind: str, axes: tuple) -> tuple[str, tuple] | None:
    """The collective after a local reduction over a dim split over ``axes``: over exactly them
    (the right one), over none, a subset, a superset, or the other collective."""
    right = REDUCE[kind][2]
    choices = ["exact", "exact", "none"]
    if len(axes) == 2:
        choices.append("subset")
    extra = [a for a in d.mesh if a not in axes]
    if extra:
        choices.append("superset")
    if axes:
        choices.append("other")
    choice = draw(st.sampled_from(choices))
    if choice == "exact":
        return (right, axes) if axes else None
    if choice == "none":
        if axes:
            d.choices.append(f"{kind} over a dim split over {d.split(axes)}, then no collective")
        return None
    if choice == "subset":
        out = right, (draw(st.sampled_from(axes)),)
    elif choice == "superset":
        more = axes + (draw(st.sampled_from(extra)),)
        out = right, tuple(draw(st.permutations(more))) if len(more) > 1 else more
    else:
        out = OTHER[right], axes
    d.choices.append(f"{kind} over a dim split over {d.split(axes)}, then {out[0]} over {d.split(out[1])}")
    return out


def wrap(expr: str, collective: tuple[str, tuple] | None) -> str:
    return expr if collective is None else f"{collective[0]}({expr}, {axes_arg(collective[1])})"


@dataclasses.dataclass
class Step:
    """One step as an expression of ``v`` (kernel and reference) and its result."""

    expr: str
    ref: str
    value: Value
    fixed: Any = None  # what the other branch of a cond keeps (the reduced dim, the weight)


def step_unary(draw: Any, d: Draft, v: Value) -> Step:
    op = draw(st.sampled_from(sorted(UNARY)))
    return Step(UNARY[op][0], UNARY[op][1], v)


def step_binary(draw: Any, d: Draft, v: Value, y: str | None = None) -> Step:
    op = draw(st.sampled_from(["+", "*"]))
    y = y or d.new_input("y", v.names, v.layout)
    return Step(f"v {op} {y}", f"v {op} {y}", v)


def step_reduce(draw: Any, d: Draft, v: Value, fixed: tuple | None = None) -> Step:
    k, kind = fixed or (draw(st.integers(0, 1)), draw(st.sampled_from(sorted(REDUCE))))
    local, ref, _ = REDUCE[kind]
    collective = draw_collective(draw, d, kind, v.layout[k])
    names = tuple("1" if i == k else n for i, n in enumerate(v.names))
    layout = tuple(() if i == k else a for i, a in enumerate(v.layout))
    return Step(wrap(f"{local}(v, axis={k}, keepdims=True)", collective),
                f"{ref}(v, axis={k}, keepdims=True)", Value(names, layout), (k, kind))


def step_matmul(draw: Any, d: Draft, v: Value, w: tuple | None = None) -> Step:
    rows, cols = v.layout  # cols: the contracted dim
    if w is None:
        rows_w = cols
        others = [t for n in (0, 1, 2) for t in itertools.permutations(d.mesh, n)
                  if t != cols and product(d.mesh, t) == product(d.mesh, cols) and not set(t) & set(rows)]
        if others and draw(st.integers(0, 5)) == 0:  # rarely: the weight split over other axes
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
    choice = draw(st.sampled_from(choices))
    collective = None
    if choice == "exact" and contracted:
        collective = ("jax.lax.psum", contracted)
    elif choice == "superset":
        collective = ("jax.lax.psum", contracted + (draw(st.sampled_from(extra)),))
        d.choices.append(f"matmul contracting a dim split over {d.split(contracted)}, then psum over "
                         f"{d.split(collective[1])}")
    elif choice == "none" and contracted:
        d.choices.append(f"matmul contracting a dim split over {d.split(contracted)}, then no psum")
    return Step(wrap(f"v @ {name}", collective), f"v @ {name}", Value((v.names[0], n), (rows, cols_w)), w)


def step_gather(draw: Any, d: Draft, v: Value) -> Step:
    k = draw(st.sampled_from([i for i, axes in enumerate(v.layout) if axes]))
    axes = v.layout[k]
    choices = [axes, axes] + ([axes[1:], axes[1:], axes[:1]] if len(axes) == 2 else [])
    gathered = draw(st.sampled_from(choices))
    if gathered[-1] != axes[-1]:
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
    k, kind = draw(st.integers(0, 1)), draw(st.sampled_from(sorted(REDUCE)))
    local, ref, _ = REDUCE[kind]
    zs = d.new_input("zs", ("l",) + v.names, ((),) + v.layout)
    combine = "acc + {}" if kind == "sum" else "jnp.maximum(acc, {})"
    part = f"{local}(z, axis={k}, keepdims=True)"
    d.kernel += [f"acc = {local}(v, axis={k}, keepdims=True)",
                 f"acc, _ = jax.lax.scan(lambda acc, z: ({combine.format(part)}, None), acc, {zs})",
                 f"v = {wrap('acc', draw_collective(draw, d, kind, v.layout[k]))}"]
    d.ref += [f"acc = {ref}(v, axis={k}, keepdims=True)", f"for z in {zs}:",
              f"    acc = {combine.replace('jnp.', 'np.').format(f'{ref}(z, axis={k}, keepdims=True)')}",
              "v = acc"]
    d.value = Value(tuple("1" if i == k else n for i, n in enumerate(v.names)),
                    tuple(() if i == k else a for i, a in enumerate(v.layout)))

