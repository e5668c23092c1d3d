"""Differential test: the independent oracle (annotation_oracle.py, written from the docs only)
against the checker, on cases Hypothesis generates: shape strings, tables, shapes, meshes and
layouts. Every test compares the oracle's verdict with the checker's, which it gets through the
public API only: ``ShapeSpec.parse``, ``check`` inside ``with Scope(**prebound):``,
``@typechecked`` functions of several arguments, ``jax.eval_shape``, on numpy arrays,
``jax.ShapeDtypeStruct`` values (on ``AbstractMesh``es of any shape, no devices needed) and real
arrays on the 8-device mesh.

Corners the docs leave open, where the two could disagree, are decided in
test_oracle_corners.py.

A CI run generates about 2,400 cases in total (see ``_DEFAULT_TOTAL``). For a long run, set
``SHARDTYPES_ORACLE_EXAMPLES`` to the total number of cases you want; each test gets its share:

    SHARDTYPES_ORACLE_EXAMPLES=50000 .venv/bin/python -m pytest tests/checking/test_oracle.py -q

(about 20 times the default; add ``--hypothesis-show-statistics`` to see the count per test).
"""

from __future__ import annotations

import math
import re
import types

import jax
import jax.numpy as jnp
import numpy as np
from hypothesis import HealthCheck, event, given, settings, strategies as st
from jax.sharding import AbstractMesh, AxisType, NamedSharding, PartitionSpec as P

from shardtypes import (
    Scope,
    ShapeSpec,
    ShapeSpecError,
    TypeCheckError,
    check,
    dims,
    f32,
    typechecked,
)

from annotation_oracle import (
    DTYPE_CLASSES,
    IDENT,
    VALUE_DTYPES,
    OracleParseError,
    Reject,
    Value,
    numpy_value,
    o_align,
    o_check,
    o_eval,
    o_expr_names,
    o_layout,
    o_normalise,
    o_parse,
)
from conftest import examples_from_env

# ---------------------------------------------------------------------------------------------
# How many cases

_DEFAULT_TOTAL = 2400  # the sum of the shares below


_TOTAL = examples_from_env("SHARDTYPES_ORACLE_EXAMPLES", _DEFAULT_TOTAL)


def _settings(share: int):
    """Hypothesis settings for a test that gets ``share`` of the default total of cases."""
    return settings(
        max_examples=max(1, math.ceil(share * _TOTAL / _DEFAULT_TOTAL)),
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )


# =============================================================================================
# Strategies

NAMES = ["a", "b", "seq"]
VNAMES = ["lead", "a"]  # 'a' on purpose: a name bound by '*a' must not serve as a size
MESH_AXES = ["d", "t", "e"]
ALL_AXES = MESH_AXES + ["x"]  # 'x' is never in a generated mesh


def _render(tree) -> str:
    if tree[0] == "int":
        return str(tree[1])
    if tree[0] == "name":
        return tree[1]
    prec = {"+": 1, "-": 1, "*": 2, "//": 2}[tree[0]]

    def side(child, right):
        text = _render(child)
        if child[0] in ("+", "-", "*", "//"):
            cprec = {"+": 1, "-": 1, "*": 2, "//": 2}[child[0]]
            if cprec < prec or (right and cprec == prec):
                return f"({text})"
        return text

    return side(tree[1], False) + tree[0] + side(tree[2], True)


_leaf = st.one_of(
    st.sampled_from(NAMES).map(lambda n: ("name", n)),
    st.integers(0, 4).map(lambda n: ("int", n)),
)
_tree = st.recursive(
    _leaf,
    lambda sub: st.tuples(st.sampled_from(["+", "-", "*", "//"]), sub, sub),
    max_leaves=4,
)


# floor division of a negative difference, where floor and truncation differ: (a-b)//2+1
_floor_tree = st.tuples(_leaf, _leaf, st.integers(1, 4), _leaf).map(
    lambda t: ("+", ("//", ("-", t[0], t[1]), ("int", t[2])), t[3])
)


@st.composite
def expr_text(draw) -> str:
    tree = draw(st.one_of(_tree, _floor_tree) if draw(st.integers(0, 4)) == 0 else _tree)
    if not o_expr_names(tree):  # a constant no array can have is a parse error: a name instead
        try:
            if o_eval(tree, {}) < 0:
                tree = ("+", tree, ("name", draw(st.sampled_from(NAMES))))
        except Reject:
            tree = ("name", draw(st.sampled_from(NAMES)))
    text = _render(tree)
    if tree[0] in ("int", "name") or draw(st.booleans()) and draw(st.booleans()):
        text = f"({text})"  # a lone leaf in parentheses is an expression too
    return text


@st.composite
def size_text(draw) -> str:
    kind = draw(
        st.sampled_from(["named", "named", "named", "fixed", "any", "broadcast", "expr", "expr"])
    )
    if kind == "named":
        return draw(st.sampled_from(NAMES))
    if kind == "fixed":
        return str(draw(st.integers(0, 6)))
    if kind == "any":
        return "_"
    if kind == "broadcast":
        return "#" + draw(st.sampled_from(NAMES))
    return draw(expr_text())


@st.composite
def shape_string(draw, axes=(), max_dims=4) -> str:
    """A valid shape string; the non-variadic dims are sharded over distinct axes from ``axes``."""
    n = draw(st.integers(0, max_dims))
    sizes = [draw(size_text()) for _ in range(n)]
    pool = list(axes)
    sharded = []
    for _ in sizes:
        chosen = []
        if pool:
            chosen = draw(st.permutations(pool))[: draw(st.sampled_from([0, 0, 0, 1, 1, 2]))]
            pool = [a for a in pool if a not in chosen]
        sharded.append(chosen)
    tokens = [s + "".join("/" + a for a in ax) for s, ax in zip(sizes, sharded)]
    if draw(st.integers(0, 2)) == 0:
        # name, after the dims, every name an expression or '#name' reads: they bind it
        # 'wherever they appear', also after the expression that reads them
        read = sorted({n for t in sizes if not IDENT.match(t) for n in re.findall(r"[a-z]+", t)})
        tokens += [n for n in read if n not in sizes]
    # (a '*name' whose name a dim of the same string uses is a parse error: not generated here)
    used = {n for t in tokens for n in re.findall(r"[a-z]+", re.split(r"(?<!/)/(?!/)", t)[0])}
    variadic = draw(st.sampled_from([None, None, "..."] + ["*" + n for n in VNAMES if n not in used]))
    if variadic:
        tokens.insert(draw(st.integers(0, len(tokens))), variadic)
    sep = draw(st.sampled_from([" ", " ", "  ", "\t", " \n "]))
    return sep.join(tokens)


@st.composite
def world_strategy(draw) -> dict:
    """The sizes a case is built around: an int per name, a tuple per '*name'."""
    world = {n: draw(st.integers(0, 5)) for n in NAMES}
    for name in VNAMES:
        world["*" + name] = tuple(draw(st.lists(st.integers(0, 4), max_size=2)))
    return world


_world_strategy = world_strategy()


@st.composite
def shape_for(draw, spec_text: str, world: dict) -> tuple[int, ...]:
    """A shape meant to pass ``spec_text`` under ``world``, then perhaps perturbed."""
    spec = o_parse(spec_text)
    shape: list[int] = []
    for dim in spec:
        if dim.kind == "named":
            shape.append(world[dim.name])
        elif dim.kind == "fixed":
            shape.append(dim.value)
        elif dim.kind == "any":
            shape.append(draw(st.integers(0, 6)))
        elif dim.kind == "broadcast":
            shape.append(draw(st.sampled_from([1, world[dim.name]])))
        elif dim.kind == "expr":
            try:
                value = o_eval(dim.expr, world)
            except Reject:
                value = -1
            shape.append(value if value >= 0 else draw(st.integers(0, 6)))
        elif dim.kind == "variadic":
            shape.extend(world["*" + dim.name])
        else:
            shape.extend(draw(st.lists(st.integers(0, 4), max_size=2)))
    perturb = draw(st.sampled_from(["none"] * 6 + ["size", "size", "rank"]))
    if perturb == "size" and shape:
        i = draw(st.integers(0, len(shape) - 1))
        shape[i] = draw(st.integers(0, 7))
    elif perturb == "rank":
        if shape and draw(st.booleans()):
            del shape[draw(st.integers(0, len(shape) - 1))]
        else:
            shape.insert(draw(st.integers(0, len(shape))), draw(st.integers(1, 4)))
    return tuple(shape)


@st.composite
def prebound_table(draw, world: dict) -> dict:
    """Some of the world's sizes pre-bound with Scope, some perhaps wrong, some tuples."""
    table = {}
    for name in NAMES:
        choice = draw(st.sampled_from(["skip", "skip", "same", "same", "other"]))
        if choice == "same":
            table[name] = world[name]
        elif choice == "other":
            table[name] = draw(st.integers(0, 6))
    choice = draw(st.sampled_from(["skip", "skip", "same", "other"]))
    if choice == "same":
        table["lead"] = world["*lead"]
    elif choice == "other":
        table["lead"] = tuple(draw(st.lists(st.integers(1, 4), max_size=2)))
    if "a" not in table and draw(st.integers(0, 9)) == 0:
        table["a"] = world["*a"]  # 'a' pre-bound as a tuple
    return table


def table_of(view) -> dict:
    """A dims() view as plain ints and tuples of ints."""
    return {k: tuple(map(int, v)) if isinstance(v, tuple) else int(v) for k, v in view.items()}


def oracle_verdict(cls, text, value: Value, table: dict):
    """(new table, None) if the oracle accepts, else (None, the reason); counted as an event."""
    try:
        new_table = o_check(cls, text, value, table)
    except Reject as why:
        event(f"oracle rejects: {why}")
        return None, str(why)
    event("oracle accepts")
    return new_table, None


def assert_same_verdict(ok: bool, expected, reason, where: str):
    if expected is None:
        assert not ok, f"checker accepts, oracle rejects ({reason}): {where}"
    else:
        assert ok, f"checker rejects, oracle accepts: {where}"


def _verdict(fn):
    """True if fn() passes, False on TypeCheckError; anything else propagates (a bug)."""
    try:
        fn()
    except TypeCheckError:
        return False
    return True


# =============================================================================================
# 1. Parsing

_FRAGMENTS = (
    ["a", "b", "seq", "x1", "_", "...", "*", "#", "/", "//", "/", "+", "-", "(", ")", "1", "0"]
    + ["12", " ", " ", "  ", "\t", "d", "t", "/d", "/t", "*a", "#b", "a+1", "2*a", "a//b"]
    + ["\u00a0", "\u2003", "\n", "\u00e4", "\u0663", "%", ".", "a.b", "*_", "#_"]
)


_DIM_PIECES = ["a", "b", "1", "0", "-", "+", "*", "//", "(", ")", "_", "#", "*a", "#a", "...", "/"]


@st.composite
def parse_input(draw):
    mode = draw(st.sampled_from(["valid", "near", "near", "stray", "random"]))
    if mode == "random":
        text = "".join(draw(st.lists(st.sampled_from(_FRAGMENTS), max_size=8)))
    else:
        text = draw(shape_string(axes=ALL_AXES))
    tokens = text.split()
    if mode == "near" and tokens:
        # one dim off: replaced by a few pieces of dims, or given one more axis (maybe a used one)
        i = draw(st.integers(0, len(tokens) - 1))
        if draw(st.booleans()):
            pieces = draw(st.lists(st.sampled_from(_DIM_PIECES), min_size=1, max_size=3))
            tokens[i] = "".join(pieces)
        else:
            tokens[i] += "/" + draw(st.sampled_from(ALL_AXES))
        text = " ".join(tokens)
    elif mode == "stray" and text:
        # a stray fragment anywhere (an axis, a '/', a '*', a space, ...)
        i = draw(st.integers(0, len(text)))
        text = text[:i] + draw(st.sampled_from(_FRAGMENTS)) + text[i:]
    if draw(st.integers(0, 20)) == 0:
        return text.encode() + b"\xff"  # not UTF-8
    return text.encode() if draw(st.booleans()) else text


@_settings(400)
@given(parse_input())
def test_parse_agrees_with_oracle(text):
    """ShapeSpec.parse accepts exactly what the oracle's grammar accepts, with the same dims."""
    try:
        expected = o_parse(text)
        event("oracle accepts")
    except OracleParseError:
        expected = None
        event("oracle rejects")
    try:
        spec = ShapeSpec.parse(text)
    except ShapeSpecError:
        assert expected is None, f"checker rejects {text!r}, oracle accepts {expected}"
        return
    assert expected is not None, f"checker accepts {text!r}, oracle rejects it"
    got = [(d.kind, d.shape, tuple(d.sharding), d.name, frozenset(d.names)) for d in spec.dims]
    want = [(d.kind, d.shape, d.sharding, d.name, d.names) for d in expected]
    assert got == want, text
    assert ShapeSpec.parse(str(spec)).dims == spec.dims  # str() round-trips


# =============================================================================================
# 2. Sizes: several values in sequence in one Scope, with pre-bound sizes


@st.composite
def size_case(draw):
    world = draw(_world_strategy)
    prebound = draw(prebound_table(world))
    values = []
    for _ in range(draw(st.integers(1, 4))):
        text = draw(shape_string())
        shape = draw(shape_for(text, world))
        cls = draw(st.sampled_from(list(DTYPE_CLASSES)))
        accepted = sorted(DTYPE_CLASSES[cls])
        dtype = draw(st.sampled_from(VALUE_DTYPES if draw(st.booleans()) else accepted))
        values.append((cls, text.encode() if draw(st.booleans()) else text, shape, dtype))
    return prebound, values


@_settings(700)
@given(size_case())
def test_sizes_in_sequence_agree_with_oracle(case):
    """check() inside Scope(**prebound), value after value: same verdicts, same table each step."""
    prebound, values = case
    table = dict(prebound)
    with Scope(**prebound):
        for cls, text, shape, dtype in values:
            expected, reason = oracle_verdict(cls, text, Value("numpy", shape, dtype), table)
            ok = _verdict(lambda: check(cls, text, numpy_value(shape, dtype)))
            where = f"{cls.__name__}[{text!r}] on a numpy {dtype}{list(shape)}, table {table}"
            assert_same_verdict(ok, expected, reason, where)
            table = expected if ok else table
            assert table_of(dims()) == table, where


# =============================================================================================
# 3. @typechecked functions of several arguments: one table per call, calls atomic in a Scope


def _template(x0, x1, x2, ret):
    return ret


_PARAMS = ["x0", "x1", "x2"]


def build_function(arg_annotations, return_annotation):
    fn = types.FunctionType(_template.__code__, _template.__globals__, "generated", None, None)
    fn.__annotations__ = {**dict(zip(_PARAMS, arg_annotations)), "return": return_annotation}
    return typechecked(fn)


@st.composite
def call_case(draw):
    world = draw(_world_strategy)
    prebound = draw(prebound_table(world))
    texts = [draw(shape_string(max_dims=3)) for _ in range(4)]  # 3 arguments, 1 return value
    calls = []
    for _ in range(draw(st.integers(1, 2))):
        call_world = world if draw(st.booleans()) else draw(_world_strategy)
        calls.append([draw(shape_for(t, call_world)) for t in texts])
    return prebound, texts, calls


@_settings(400)
@given(call_case())
def test_typechecked_calls_agree_with_oracle(case):
    """Arguments in order then the return value share one table; a failed call binds nothing."""
    prebound, texts, calls = case
    fn = build_function([f32[t.encode()] for t in texts[:3]], f32[texts[3].encode()])
    table = dict(prebound)
    with Scope(**prebound):
        for shapes in calls:
            expected, reason = table, None
            for text, shape in zip(texts, shapes):
                value = Value("numpy", shape, "float32")
                expected, reason = oracle_verdict(f32, text, value, expected)
                if expected is None:
                    break
            arrays = [numpy_value(s, "float32") for s in shapes]
            ok = _verdict(lambda: fn(*arrays))
            where = f"arguments then return value {texts}, shapes {shapes}, table {table}"
            assert_same_verdict(ok, expected, reason, where)
            table = expected if ok else table
            assert table_of(dims()) == table, where


# =============================================================================================
# 4. Sharding on ShapeDtypeStructs over AbstractMeshes (and numpy, and unsharded structs)


@st.composite
def mesh_strategy(draw, sizes=(1, 2, 3, 4)):
    names = draw(st.lists(st.sampled_from(MESH_AXES), unique=True, min_size=1, max_size=3))
    shape = [draw(st.sampled_from(sizes)) for _ in names]
    kinds = draw(st.sampled_from(["explicit", "auto", "mixed"]))
    if kinds == "mixed":
        types_ = [draw(st.sampled_from([AxisType.Explicit, AxisType.Auto])) for _ in names]
    else:
        types_ = [AxisType.Explicit if kinds == "explicit" else AxisType.Auto] * len(names)
    return dict(zip(names, shape)), tuple(types_)


@st.composite
def layout_for(draw, rank: int, mesh: dict, axis_types, like=None):
    """PartitionSpec entries over ``mesh`` for ``rank`` dims: random, or close to ``like``."""
    if like is not None and draw(st.booleans()):
        per_dim = [[a for a in axes if a in mesh] for axes in like]
        # add size-1 axes anywhere, which must not matter
        ones = [a for a in mesh if mesh[a] == 1 and not any(a in d for d in per_dim)]
        for a in ones:
            if rank and draw(st.booleans()):
                i = draw(st.integers(0, rank - 1))
                per_dim[i].insert(draw(st.integers(0, len(per_dim[i]))), a)
        # then perhaps a near miss, which matters unless only size-1 axes moved
        used = [(i, a) for i, axes in enumerate(per_dim) for a in axes]
        miss = draw(st.sampled_from(["none", "none", "reverse", "move", "drop", "add"]))
        several = [i for i, axes in enumerate(per_dim) if len(axes) > 1]
        if several and draw(st.booleans()):
            miss = "reverse"  # the order of a dim's axes matters: d/t is not t/d
        if miss == "reverse" and several:
            per_dim[draw(st.sampled_from(several))].reverse()
        elif miss == "move" and used and rank > 1:
            i, a = draw(st.sampled_from(used))
            per_dim[i].remove(a)
            per_dim[draw(st.integers(0, rank - 1))].append(a)
        elif miss == "drop" and used:
            i, a = draw(st.sampled_from(used))
            per_dim[i].remove(a)
        elif miss == "add" and rank:
            unused = [a for a in mesh if not any(a in d for d in per_dim)]
            if unused:
                per_dim[draw(st.integers(0, rank - 1))].append(draw(st.sampled_from(unused)))
    else:
        per_dim = [[] for _ in range(rank)]
        for a in draw(st.permutations(list(mesh))):
            if rank and draw(st.booleans()):
                per_dim[draw(st.integers(0, rank - 1))].append(a)
    entries = []
    all_auto = all(t == AxisType.Auto for t in axis_types)
    for axes in per_dim:
        if not axes:
            unsharded = [None, None, ()] + ([P.UNCONSTRAINED] if all_auto else [])
            entries.append(draw(st.sampled_from(unsharded)))
        elif len(axes) == 1:
            entries.append(draw(st.sampled_from([axes[0], (axes[0],)])))
        else:
            entries.append(tuple(axes))
    while entries and entries[-1] is None and draw(st.booleans()):
        entries.pop()  # P('d') is P('d', None)
    return tuple(entries)


@st.composite
def sharding_case(draw, value_kinds=("sds", "sds", "sds", "sds", "numpy", "sds_unsharded")):
    mesh, axis_types = draw(mesh_strategy())
    world = draw(_world_strategy)
    prebound = draw(prebound_table(world))
    values = []
    for _ in range(draw(st.integers(1, 3))):
        text = draw(shape_string(axes=draw(st.sampled_from([MESH_AXES, ALL_AXES, list(mesh)]))))
        shape = draw(shape_for(text, world))
        kind = draw(st.sampled_from(value_kinds))
        like = o_layout(o_parse(text), len(shape)) if _rank_fits(text, shape) else None
        entries = draw(layout_for(len(shape), mesh, axis_types, like)) if kind == "sds" else ()
        values.append((text, Value(kind, shape, "float32", mesh, entries)))
    return mesh, axis_types, prebound, values


def _rank_fits(text, shape) -> bool:
    try:
        o_align(o_parse(text), len(shape))
    except Reject:
        return False
    return True


def abstract_mesh(mesh: dict, axis_types):
    return AbstractMesh(tuple(mesh.values()), tuple(mesh), axis_types=axis_types)


def make_sds(value: Value, amesh):
    if value.kind == "sds_unsharded":
        return jax.ShapeDtypeStruct(value.shape, jnp.float32)
    return jax.ShapeDtypeStruct(
        value.shape, jnp.float32, sharding=NamedSharding(amesh, P(*value.entries))
    )


def run_sequence(prebound, values, make):
    table = dict(prebound)
    with Scope(**prebound):
        for text, value in values:
            expected, reason = oracle_verdict(f32, text, value, table)
            actual = make(value)
            ok = _verdict(lambda: check(f32, text, actual))
            where = f"f32[{text!r}] on {value}, table {table}"
            assert_same_verdict(ok, expected, reason, where)
            table = expected if ok else table
            assert table_of(dims()) == table, where


@_settings(600)
@given(sharding_case())
def test_sharding_of_structs_agrees_with_oracle(case):
    """ShapeDtypeStructs on AbstractMeshes of any shape and axis types, numpy, unsharded structs."""
    mesh, axis_types, prebound, values = case
    amesh = abstract_mesh(mesh, axis_types)

    def make(value):
        if value.kind == "numpy":
            return numpy_value(value.shape, "float32")
        return make_sds(value, amesh)

    run_sequence(prebound, values, make)


# =============================================================================================
# 5. Sharding of real arrays on the 8 devices


def divisible(shape, entries, mesh) -> tuple[int, ...]:
    """``shape``, each dim scaled up to a multiple of its axes' sizes, as JAX needs for arrays."""
    shape = list(shape)
    for i, entry in enumerate(o_normalise(entries, len(shape), mesh)):
        need = int(np.prod([mesh[a] for a in entry]))
        if shape[i] % need:
            shape[i] = need * max(1, shape[i])
    return tuple(shape)


_DEVICE_MESHES = [(8,), (4, 2), (2, 4), (2, 2, 2), (8, 1), (1, 8), (2, 1, 4), (1, 2, 1)]
_mesh_cache: dict = {}


@st.composite
def device_case(draw):
    mesh_shape = draw(st.sampled_from(_DEVICE_MESHES))
    names = tuple(draw(st.permutations(MESH_AXES))[: len(mesh_shape)])
    kind = draw(st.sampled_from(["explicit", "auto"]))
    mesh = dict(zip(names, mesh_shape))
    world = {n: draw(st.sampled_from([1, 2, 4, 8])) for n in NAMES}
    world.update({"*lead": (2,), "*a": (world["a"],)})
    values = []
    for _ in range(draw(st.integers(1, 2))):
        text = draw(shape_string(axes=draw(st.sampled_from([list(names), ALL_AXES]))))
        spec_shape = draw(shape_for(text, world))
        single = draw(st.integers(0, 5)) == 0
        like = o_layout(o_parse(text), len(spec_shape)) if _rank_fits(text, spec_shape) else None
        entries = () if single else draw(layout_for(len(spec_shape), mesh, (None,), like))
        shape = divisible(spec_shape, entries, mesh)
        value_kind = "jax_single" if single else "jax"
        values.append((text, Value(value_kind, shape, "float32", mesh, entries)))
    return mesh_shape, names, kind, values


@_settings(200)
@given(device_case())
def test_sharding_of_device_arrays_agrees_with_oracle(case):
    """Real jax.Arrays laid out on the 8 simulated devices, Explicit and Auto meshes."""
    mesh_shape, names, kind, values = case
    key = (mesh_shape, names, kind)
    if key not in _mesh_cache:
        axis_type = AxisType.Explicit if kind == "explicit" else AxisType.Auto
        _mesh_cache[key] = jax.make_mesh(mesh_shape, names, axis_types=(axis_type,) * len(names))
    mesh = _mesh_cache[key]

    def make(value):
        data = np.zeros(value.shape, np.float32)
        if value.kind == "jax_single":
            return jnp.asarray(data)
        return jax.device_put(data, NamedSharding(mesh, P(*value.entries)))

    run_sequence({}, values, make)


# =============================================================================================
# 6. Traced: jax.eval_shape of a checked function on Explicit AbstractMeshes


@st.composite
def traced_case(draw):
    mesh, _ = draw(mesh_strategy())
    axis_types = (AxisType.Explicit,) * len(mesh)
    world = draw(_world_strategy)
    texts, values = [], []
    for _ in range(2):
        text = draw(shape_string(axes=draw(st.sampled_from([MESH_AXES, list(mesh)])), max_dims=3))
        shape = draw(shape_for(text, world))
        like = o_layout(o_parse(text), len(shape)) if _rank_fits(text, shape) else None
        entries = draw(layout_for(len(shape), mesh, axis_types, like))
        shape = divisible(shape, entries, mesh)
        texts.append(text)
        values.append(Value("sds", shape, "float32", mesh, entries))
    return mesh, axis_types, texts, values


def _template2(x0, x1):
    return None


@_settings(100)
@given(traced_case())
def test_traced_explicit_sharding_agrees_with_oracle(case):
    """Under jax.eval_shape, Explicit axes are checked at trace time from jax.typeof(x)."""
    mesh, axis_types, texts, values = case
    amesh = abstract_mesh(mesh, axis_types)
    fn = types.FunctionType(_template2.__code__, _template2.__globals__, "traced", None, None)
    fn.__annotations__ = {"x0": f32[texts[0].encode()], "x1": f32[texts[1].encode()]}
    fn.__annotations__["return"] = None
    fn = typechecked(fn)
    expected, reason = {}, None
    for text, value in zip(texts, values):
        expected, reason = oracle_verdict(f32, text, value, expected)
        if expected is None:
            break
    args = [make_sds(v, amesh) for v in values]
    ok = _verdict(lambda: jax.eval_shape(fn, *args))
    assert_same_verdict(ok, expected, reason, f"arguments {texts} traced from {values}")
