"""Cost of checking one eager call, against peers measured in the same run.

    python benchmarks/overhead.py [--auto] [--number N] [--repeat R]

The function is ``f(x: f32[b'b/d e'], y: f32[b'b/d e']) -> f32[b'b/d e']`` on arrays sharded over an
8-device simulated CPU mesh, decorated each way below, with two bodies: ``return x`` (so the time is
the cost of checking alone; the targets are judged on this one) and ``return x + y`` (an eager op,
whose dispatch dominates and is noisy):

  bare                 no checks
  reads                reads each array's shape, dtype and sharding, and checks nothing
  floor                reads them and looks the triple up in a dict (the floor, below)
  typeguard            plain typeguard.typechecked with jax.Array annotations (type only)
  shardtypes           shardtypes.typechecked on f32[b'b/d e'] (dtype, shape, dimension table
                       AND sharding)
  shardtypes (static)  the same on the static spelling f32[jax.Array, b'b/d e'] (what pyright and
                       mypy read as jax.Array); it may not cost more than the one-argument form
  isinstance           no decorator: the body asserts isinstance(v, f32[b'b/d e']) for x, y and
                       the result inside `with shardtypes.Scope():` (so 'b' and 'e' bind across
                       them)
  shardtypes+beartype  @beartype on the f32[b'b/d e'] annotations, under @shardtypes.scope (each
                       call one dimension table, so names bind across arguments, as documented)
  jaxtyping+beartype   Float[Array, 'b e'] under jaxtyped(typechecker=beartype) (shape only)

Before timing, each version that compares sizes across arguments is shown to reject a ``y`` whose
'e' differs from ``x``'s, so all of them do the work they are timed for.

It prints µs per call, the cost above bare, and the ratios of the costs above bare: shardtypes
against floor, typeguard and jaxtyping+beartype; the static spelling against the one-argument form
(target <= 1); isinstance and shardtypes+beartype against jaxtyping+beartype. Machines are noisy:
only the ratios within one run mean anything. Under jax.jit it also compares the compiled program
of the checked function with the bare one, the cost of a cached call (target ~1.0, on Auto axes
too) and of a first call, trace and compile included (target <= 1.3). With checks off
(``SHARDTYPES_DISABLE=1``) it shows what a checked call still costs (it records its arguments, so
that ``dims()`` read in its body can work sizes out) and what reading ``dims()`` costs then.

The floor of any exact eager check is reading each array's shape, dtype and sharding and looking
the triple up in a dict: ``floor`` is a decorator that does only that, for every argument leaf and
the result (``reads`` leaves the lookup out: below the floor, shown for reference). Checking may cost at most
2x the floor, on the call above and on a call taking the 1,929-leaf parameter tree of
``benchmarks/make_shardings.py`` (params and two Adam moments, 80 unstacked layers, as pytree
dataclasses); both ratios are printed.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import jax

jax.config.update("jax_num_cpu_devices", 8)

import jax.numpy as jnp  # noqa: E402
import typeguard  # noqa: E402
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P  # noqa: E402

import shardtypes  # noqa: E402
from shardtypes import f32  # noqa: E402

sys.path.insert(0, os.path.dirname(__file__))
from _common import measure as _measure, program_text  # noqa: E402
from make_shardings import N_LAYERS, Layer  # noqa: E402

# The peers (pip install -e '.[bench]'). Imported here, not in make_versions: the annotations are
# strings (`from __future__ import annotations`), and jaxtyping resolves them in the module's
# globals only, silently reading one it cannot resolve as Any (which checks nothing).
try:
    from beartype import beartype
    from jaxtyping import Array, Float, jaxtyped
except ImportError:
    beartype = None


@shardtypes.pytree_dataclass
class Params:
    embed: f32[b"vocab/d embed"]
    layers: list[Layer]
    final_norm: f32[b"embed"]
    unembed: f32[b"embed vocab/d"]


@shardtypes.pytree_dataclass
class State:
    params: Params
    mu: Params
    nu: Params


def measure(fns: dict, args, number: int, repeat: int) -> dict:
    return _measure({name: (lambda fn=fn: fn(*args)) for name, fn in fns.items()}, number, repeat)


def floor(fn):
    """The least any exact eager check must do: read each array's shape, dtype and sharding, and
    look the triple up in a dict (of the layouts seen before)."""
    seen: dict = {}

    def wrapper(*args):
        for leaf in jax.tree_util.tree_leaves(args):
            seen.get((leaf.shape, leaf.dtype, leaf.sharding))
        result = fn(*args)
        for leaf in jax.tree_util.tree_leaves(result):
            seen.get((leaf.shape, leaf.dtype, leaf.sharding))
        return result

    return wrapper


def reads(fn):
    """Less than the floor: only read each array's shape, dtype and sharding (no lookup)."""

    def wrapper(*args):
        for leaf in jax.tree_util.tree_leaves(args):
            leaf.shape, leaf.dtype, leaf.sharding
        result = fn(*args)
        for leaf in jax.tree_util.tree_leaves(result):
            leaf.shape, leaf.dtype, leaf.sharding
        return result

    return wrapper


def make_versions(body):
    """The function decorated each way, with ``body(x, y)`` as its body."""

    def bare(x, y):
        return body(x, y)

    @floor
    def with_floor(x, y):
        return body(x, y)

    @reads
    def with_reads(x, y):
        return body(x, y)

    @typeguard.typechecked
    def with_typeguard(x: jax.Array, y: jax.Array) -> jax.Array:
        return body(x, y)

    @shardtypes.typechecked
    def with_shardtypes(x: f32[b"b/d e"], y: f32[b"b/d e"]) -> f32[b"b/d e"]:
        return body(x, y)

    @shardtypes.typechecked
    def with_static(
        x: f32[jax.Array, b"b/d e"], y: f32[jax.Array, b"b/d e"]
    ) -> f32[jax.Array, b"b/d e"]:
        return body(x, y)

    def with_isinstance(x, y):
        with shardtypes.Scope():
            if not isinstance(x, f32[b"b/d e"]):
                raise TypeError("x is not f32[b'b/d e']")
            if not isinstance(y, f32[b"b/d e"]):
                raise TypeError("y is not f32[b'b/d e']")
            result = body(x, y)
            if not isinstance(result, f32[b"b/d e"]):
                raise TypeError("the result is not f32[b'b/d e']")
            return result

    versions = {"bare": bare, "reads": with_reads, "floor": with_floor, "typeguard": with_typeguard,
                "shardtypes": with_shardtypes, "shardtypes (static)": with_static,
                "isinstance": with_isinstance}
    if beartype is None:
        return versions

    @shardtypes.scope
    @beartype
    def with_beartype(x: f32[b"b/d e"], y: f32[b"b/d e"]) -> f32[b"b/d e"]:
        return body(x, y)

    @jaxtyped(typechecker=beartype)
    def with_jaxtyping(x: Float[Array, "b e"], y: Float[Array, "b e"]) -> Float[Array, "b e"]:
        return body(x, y)

    versions["shardtypes+beartype"] = with_beartype
    versions["jaxtyping+beartype"] = with_jaxtyping
    return versions


# The versions that compare sizes across arguments (the others check types at most).
CROSS_CHECKED = ("shardtypes", "shardtypes (static)", "isinstance", "shardtypes+beartype",
                 "jaxtyping+beartype")


def check_rejects(fns: dict, x, wrong_y) -> None:
    """Each version in CROSS_CHECKED refuses ``wrong_y`` (its 'e' differs from ``x``'s)."""
    for name in CROSS_CHECKED:
        if name not in fns:
            continue
        try:
            fns[name](x, wrong_y)
        except Exception:  # typeguard's, beartype's, jaxtyping's or the body's TypeError
            continue
        raise AssertionError(f"{name} accepted y of another 'e' size than x: it checks less than "
                             "it is timed for")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--auto", action="store_true", help="Auto mesh axes (default Explicit)")
    parser.add_argument("--number", type=int, default=2000, help="calls per timing")
    parser.add_argument("--repeat", type=int, default=7, help="timings per function (best kept)")
    args = parser.parse_args()

    kind = AxisType.Auto if args.auto else AxisType.Explicit
    mesh = jax.make_mesh((8,), ("d",), axis_types=(kind,))
    sharding = NamedSharding(mesh, P("d"))
    x = jax.device_put(jnp.ones((64, 128), jnp.float32), sharding)
    y = jax.device_put(jnp.ones((64, 128), jnp.float32), sharding)
    wrong_y = jax.device_put(jnp.ones((64, 64), jnp.float32), sharding)

    print(f"f(x: f32[b'b/d e'], y: f32[b'b/d e']) -> f32[b'b/d e'] on float32[64,128] sharded "
          f"P('d') over 8 CPU devices, {kind.name} axes; best of {args.repeat} x {args.number}\n")
    over = {}
    for title, body in [("body `return x` (the cost of checking alone)", lambda x, y: x),
                        ("body `return x + y` (an eager op)", lambda x, y: x + y)]:
        fns = make_versions(body)
        for fn in fns.values():  # warm up, and prove every version accepts the call
            jax.block_until_ready(fn(x, y))
        check_rejects(fns, x, wrong_y)
        times = measure(fns, (x, y), args.number, args.repeat)
        base = times["bare"]
        print(f"{title}\n  {'':20s} {'µs/call':>9s} {'above bare':>11s}")
        for name, t in times.items():
            print(f"  {name:20s} {t:9.2f} {t - base:11.2f}")
        if not over:
            over = {name: max(t - base, 1e-3) for name, t in times.items()}
        print()

    def ratio(a: str, b: str, target: str = "") -> None:
        if a in over and b in over:
            line = f"  {a + ' / ' + b:40s} = {over[a] / over[b]:.2f}"
            print(line + (f"   (target {target})" if target else ""))

    print("ratios of checking cost (µs above bare, body `return x`):")
    ratio("shardtypes", "floor", "<= 2")
    ratio("shardtypes", "typeguard", "<= 1.5")
    ratio("shardtypes", "jaxtyping+beartype", "< 1")
    ratio("shardtypes (static)", "shardtypes", "<= 1")
    ratio("isinstance", "jaxtyping+beartype")
    ratio("shardtypes+beartype", "jaxtyping+beartype")

    ratio("shardtypes", "reads")

    checks_off(x, y, args.number, args.repeat)

    tree_ratio = tree_call(mesh, args.number // 20 or 1, args.repeat)
    print(f"  {'tree call: shardtypes / floor':40s} = {tree_ratio:.2f}   (target <= 2)")

    # Under jit, checks run once at trace time (and, on Auto axes, once at compile time).
    with jax.set_mesh(mesh):
        fns = make_versions(lambda x, y: x + y)
        jit_bare = jax.jit(fns["bare"])
        jit_checked = jax.jit(fns["shardtypes"])
        same = program_text(jit_bare, x, y) == program_text(jit_checked, x, y)
        jax.block_until_ready(jit_bare(x, y))
        jax.block_until_ready(jit_checked(x, y))
        jit_times = measure({"jit bare": jit_bare, "jit shardtypes": jit_checked}, (x, y),
                            args.number, args.repeat)
    print("\nunder jax.jit (body `return x + y`):")
    print(f"  compiled program identical to the unchecked one: {same}")
    print(f"  cached call: bare {jit_times['jit bare']:.2f} µs, shardtypes "
          f"{jit_times['jit shardtypes']:.2f} µs, ratio "
          f"{jit_times['jit shardtypes'] / jit_times['jit bare']:.2f}   (target ~1.0)")
    first = first_calls(mesh, x, y)
    print(f"  first call (trace + compile, median of {FIRST_CALLS}): bare {first['bare']:.1f} ms, "
          f"shardtypes {first['shardtypes']:.1f} ms, ratio "
          f"{first['shardtypes'] / first['bare']:.2f}   (target <= 1.3)")
    demo = demo_first_calls(kind)
    print(f"  the demo's training step, first call (median of {DEMO_FIRST_CALLS}): checks off "
          f"{demo['off']:.0f} ms, checked {demo['on']:.0f} ms, ratio {demo['on'] / demo['off']:.2f}"
          "   (target <= 1.3)")
    if kind == AxisType.Auto and shardtypes.config.auto_sharding_check == "compile":
        print("  (Auto axes: the compile-time check adds nothing to the executable and declares no\n"
              "   JAX effect, so cached calls stay on jit's C++ fast path; the first check in a\n"
              "   process also runs the check's self-test once, not counted above.)")


def checks_off(x, y, number: int, repeat: int) -> None:
    """The cost of a checked call with checks off (``SHARDTYPES_DISABLE=1``): it records its
    arguments so that ``dims()`` can work sizes out if read; and of reading ``dims()`` there."""

    def bare(x, y):
        return x

    def bare_reading(x, y):
        return x, x.shape[0]  # what dims()['b'] gives, read without shardtypes

    @shardtypes.typechecked
    def checked(x: f32[b"b/d e"], y: f32[b"b/d e"]) -> f32[b"b/d e"]:
        return x

    @shardtypes.typechecked
    def checked_reading(x: f32[b"b/d e"], y: f32[b"b/d e"]):
        return x, shardtypes.dims()["b"]

    fns = {"bare": bare, "shardtypes": checked, "bare, reads a size": bare_reading,
           "shardtypes, reads dims()": checked_reading}
    results = {}
    for on in (True, False):
        shardtypes.config.checks = on
        try:
            results[on] = measure(fns, (x, y), number, repeat)
        finally:
            shardtypes.config.checks = True
    print("\nchecks on and off (shardtypes.config.checks; SHARDTYPES_DISABLE=1), body `return x`, "
          "and a body that reads dims()['b']:")
    print(f"  {'':28s} {'on µs/call':>10s} {'off µs/call':>12s}")
    for name in fns:
        print(f"  {name:28s} {results[True][name]:10.2f} {results[False][name]:12.2f}")
    off = results[False]
    print(f"  checks off, above bare: {off['shardtypes'] - off['bare']:.2f} µs per call "
          f"(recording the arguments); reading dims() once: "
          f"{off['shardtypes, reads dims()'] - off['bare, reads a size']:.2f} µs above bare")


FIRST_CALLS = 5
DEMO_FIRST_CALLS = 3


def demo_first_calls(kind) -> dict:
    """Median ms of the first call (trace, compile, run) of examples/transformer.py's jitted
    training kernel, with shardtypes' checks off and on (a new jitted function each time, so
    each call traces and compiles it again)."""
    import importlib.util

    import numpy as np

    path = os.path.join(os.path.dirname(__file__), "..", "examples", "transformer.py")
    spec = importlib.util.spec_from_file_location("shardtypes_demo", path)
    demo = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = demo  # typeguard reads the module's source by name
    spec.loader.exec_module(demo)
    mesh = jax.make_mesh((4, 2), ("d", "t"), axis_types=(kind, kind))
    samples: dict = {"off": [], "on": []}
    with shardtypes.axis_rules(demo.RULES, mode=None), jax.set_mesh(mesh):
        state = demo.init_state(jax.random.key(0), mesh)
        rng = np.random.default_rng(0)
        batch = demo.make_batch(rng, rng.permutation(demo.DIMS["vocab"])[:demo.PATTERN_LENGTH], mesh)
        for _ in range(DEMO_FIRST_CALLS):
            for name in samples:
                shardtypes.config.checks = name == "on"
                try:
                    kernel = jax.jit(lambda s, b: demo.training_kernel(s, b))  # a new trace and compile
                    start = time.perf_counter()
                    with shardtypes.Scope(**demo.DIMS):  # dims() for the kernel, checks on or off
                        jax.block_until_ready(kernel(state, batch))
                    samples[name].append((time.perf_counter() - start) * 1e3)
                finally:
                    shardtypes.config.checks = True
    return {name: statistics.median(times) for name, times in samples.items()}


def first_calls(mesh, x, y) -> dict:
    """Median ms of a first call (trace, lower, compile, run) of a fresh jitted function."""
    samples: dict = {"bare": [], "shardtypes": []}
    with jax.set_mesh(mesh):
        for _ in range(FIRST_CALLS):
            for name in samples:
                fn = jax.jit(make_versions(lambda x, y: x + y)[name])
                start = time.perf_counter()
                jax.block_until_ready(fn(x, y))
                samples[name].append((time.perf_counter() - start) * 1e3)
    return {name: statistics.median(times) for name, times in samples.items()}


def tree_call(mesh, number: int, repeat: int) -> float:
    """A checked call taking the parameter tree of benchmarks/make_shardings.py, against floor."""
    sizes = {"vocab": 64, "embed": 16, "heads": 8, "head_dim": 4, "hidden": 32}
    mesh2 = jax.make_mesh((4, 2), ("d", "t"), axis_types=(mesh.axis_types[0],) * 2)

    def arrays(annotation):
        structs = shardtypes.make_shape_dtype_structs(annotation, sizes, mesh2)
        return jax.tree.map(lambda s: jax.device_put(jnp.zeros(s.shape, s.dtype), s.sharding), structs)

    def params():
        return Params(arrays(f32[b"vocab/d embed"]), [arrays(Layer) for _ in range(N_LAYERS)],
                      arrays(f32[b"embed"]), arrays(f32[b"embed vocab/d"]))

    state = State(params(), params(), params())
    n_leaves = len(jax.tree.leaves(state))

    def bare(state):
        return state

    @floor
    def with_floor(state):
        return state

    @shardtypes.typechecked
    def with_shardtypes(state: State):
        return state

    fns = {"bare": bare, "floor": with_floor, "shardtypes": with_shardtypes}
    for fn in fns.values():
        fn(state)
    times = measure(fns, (state,), number, repeat)
    print(f"\na call taking a {n_leaves}-leaf parameter tree (best of {repeat} x {number}):")
    for name, t in times.items():
        print(f"  {name:20s} {t:9.1f} µs/call  {t / n_leaves:6.3f} µs/leaf")
    return (times["shardtypes"] - times["bare"]) / (times["floor"] - times["bare"])


if __name__ == "__main__":
    main()
