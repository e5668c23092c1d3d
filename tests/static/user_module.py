"""A user's module in the static spelling, checked by pyright and mypy (tests/package/test_static.py).

Everything outside ``must_fail`` is what a user writes and must pass both checkers with no
error. Each line inside ``must_fail`` must be an error: it carries the one suppression comment
per checker that silences it (``# type: ignore[code]`` for mypy, ``# pyright: ignore[rule]`` for
pyright; the configuration makes each checker read only its own), and an unneeded suppression is
itself an error, so a checker that stops seeing one of these errors fails the run.

The module also runs (``run()``, called by tests/package/test_static.py), so the static spelling is
checked at run time too.
"""

from __future__ import annotations

from functools import partial
from typing import Annotated, assert_type

import jax
import jax.numpy as jnp
import numpy as np

from shardtypes import (
    HostOrDevice,
    PyTree,
    Scope,
    Stacked,
    TypeCheckError,
    check,
    dims,
    f32,
    field,
    floating,
    i32,
    is_instance,
    make_partition_specs,
    make_shape_dtype_structs,
    make_shardings,
    pytree_dataclass,
    scope,
    shard,
    typechecked,
    typed_shard_map,
)

# ---------------------------------------------------------------------------------------------
# Annotations: f32[jax.Array, b'...'] is a jax.Array to the checkers.


@typechecked
def center(x: f32[jax.Array, b"batch embed"]) -> f32[jax.Array, b"batch embed"]:
    return x - jnp.mean(x, axis=-1, keepdims=True)


@typechecked
def total(x: floating[jax.Array, b"batch embed"], scale: float = 1.0) -> f32[jax.Array, b""]:
    return jnp.sum(x) * scale


@typechecked
def host_rows(x: i32[np.ndarray, b"rows"]) -> int:
    return int(x.shape[0])


@typechecked
def also_annotated(x: Annotated[jax.Array, f32[jax.Array, b"batch embed"]]) -> jax.Array:
    return x * 2


@scope
@typechecked
def callee(x: f32[jax.Array, b"batch"]) -> f32[jax.Array, b"batch"]:
    return x + 1


@typechecked
def with_locals(x: f32[jax.Array, b"batch embed"]) -> f32[jax.Array, b"batch"]:
    row: f32[jax.Array, b"batch"] = jnp.sum(x, axis=-1)  # annotated locals are checked too
    return row


class Model:
    @typechecked
    def apply(self, x: f32[jax.Array, b"batch embed"]) -> f32[jax.Array, b"batch embed"]:
        return x * 2.0

    @staticmethod
    @typechecked
    def norm(x: f32[jax.Array, b"batch embed"]) -> f32[jax.Array, b"batch"]:
        return jnp.linalg.norm(x, axis=-1)

    @property
    @typechecked
    def name(self) -> str:
        return "model"


# ---------------------------------------------------------------------------------------------
# Trees: pytree_dataclass is a dataclass_transform, Stacked[Layer, b'layers'] reads as Layer.


@pytree_dataclass
class Layer:
    w_up: f32[jax.Array, b"embed hidden"]
    w_down: f32[jax.Array, b"hidden embed"]
    heads: int = field(default=1, metadata={"static": True})


@pytree_dataclass(frozen=True)
class Weights:
    embed: f32[jax.Array, b"vocab embed"]
    layers: Stacked[Layer, b"layers"]


@typechecked
def layer_forward(x: f32[jax.Array, b"batch embed"], layer: Layer) -> f32[jax.Array, b"batch embed"]:
    return jax.nn.relu(x @ layer.w_up) @ layer.w_down


@typechecked
def forward(weights: Weights, tokens: i32[jax.Array, b"batch"]) -> f32[jax.Array, b"batch embed"]:
    x = weights.embed[tokens]

    def body(x: jax.Array, layer: Layer) -> tuple[jax.Array, None]:
        return layer_forward(x, layer), None

    x, _ = jax.lax.scan(body, x, weights.layers)
    return x


def first_layer(weights: Weights) -> Layer:
    return weights.layers  # a Stacked[Layer, ...] is a Layer to the checkers


# ---------------------------------------------------------------------------------------------
# PyTree[X] is Any to the checkers (as jaxtyping's): any tree of arrays is accepted.


@typechecked
def leaf_count(grads: PyTree[f32[jax.Array, b"batch embed"]]) -> int:
    return len(jax.tree.leaves(grads))


def count_both() -> int:
    return leaf_count({"a": jnp.ones((4, 3)), "b": [jnp.ones((4, 3))]}) + leaf_count(jnp.ones((4, 3)))


# ---------------------------------------------------------------------------------------------
# typed_shard_map keeps the signature, in all three forms.


@typed_shard_map
def local_sum(x: f32[jax.Array, b"batch/d embed"], n: int) -> f32[jax.Array, b"batch/d embed"]:
    return x * n


@partial(typed_shard_map, check_vma=False)
def local_scale(x: f32[jax.Array, b"batch/d embed"], factor: float) -> f32[jax.Array, b"batch/d embed"]:
    return x * factor


@typed_shard_map(check_vma=False)
def local_double(x: f32[jax.Array, b"batch/d embed"]) -> f32[jax.Array, b"batch/d embed"]:
    return x * 2


@typed_shard_map
def two_layers(
    params: tuple[tuple[f32[jax.Array, b"in hid/t"], f32[jax.Array, b"hid/t"]],
                  tuple[f32[jax.Array, b"hid/t out"], f32[jax.Array, b"out"]]],
    x: f32[jax.Array, b"b/d in"],
) -> f32[jax.Array, b"b/d out"]:
    (w1, b1), (w2, b2) = params
    return (x @ w1 + b1) @ w2 + b2


def two_layers_of(pairs: list[tuple[jax.Array, jax.Array]], x: jax.Array) -> jax.Array:
    return two_layers((pairs[0], pairs[1]), x)  # a tuple: what the checkers read in the annotation


# ---------------------------------------------------------------------------------------------
# Host-or-device: a field that holds host data before shard() reads as the union.


@pytree_dataclass
class HostBatch:
    x: f32[jax.Array | np.ndarray, b"batch embed"]
    ids: i32[HostOrDevice, b"batch"]


def host_then_device(mesh: jax.sharding.Mesh) -> HostBatch:
    on_host = HostBatch(x=np.zeros((4, 3), np.float32), ids=np.zeros(4, np.int32))
    HostBatch(x=jnp.zeros((4, 3)), ids=jnp.zeros(4, jnp.int32))  # a device value is one too
    placed = shard(on_host, HostBatch, mesh)
    assert_type(placed, HostBatch)  # shard keeps a tree's type
    assert_type(shard(np.zeros((4, 3), np.float32), f32[jax.Array, b"batch embed"], mesh), jax.Array)
    assert_type(shard(1.0, f32[jax.Array, b""], mesh), jax.Array)
    return placed


# is_instance is isinstance with an annotation, in a spelling the checkers narrow by.


def device_rows(x: object) -> jax.Array | None:
    if is_instance(x, f32[jax.Array, b"batch embed"]):
        assert_type(x, jax.Array)
        return x
    return None


def host_rows_of(x: object) -> np.ndarray | None:
    if is_instance(x, i32[np.ndarray, b"rows"], np.ndarray):
        return x  # narrowed: an object is not an np.ndarray
    return None


def either(x: object) -> jax.Array | np.ndarray | None:
    if is_instance(x, f32[jax.Array | np.ndarray, b"batch embed"], (jax.Array, np.ndarray)):
        return x  # narrowed to the union
    return None


def derive() -> object:
    return make_partition_specs(f32[jax.Array, b"batch/d embed"]), make_partition_specs(Weights)


# An alias of the static spelling is type[jax.Array] to the checkers: its derivations are Any to
# them (a PartitionSpec, a NamedSharding, a ShapeDtypeStruct at run time), not a class's tree.
Acts = f32[jax.Array, b"batch seq embed"]


def derive_from_an_alias(mesh: jax.sharding.Mesh) -> tuple[jax.sharding.PartitionSpec, jax.sharding.NamedSharding]:
    spec: jax.sharding.PartitionSpec = make_partition_specs(Acts)
    sharding: jax.sharding.NamedSharding = make_shardings(Acts, mesh)
    return spec, sharding


def run() -> dict[str, object]:
    """The module at run time: the static spelling is checked like the runtime one."""
    x = jnp.ones((4, 3), jnp.float32)
    out: dict[str, object] = {}
    out["center"] = center(x).shape
    out["total"] = float(total(x, 2.0))
    out["host_rows"] = host_rows(np.zeros(5, np.int32))
    out["also_annotated"] = also_annotated(x).shape
    out["with_locals"] = with_locals(x).shape
    out["model"] = (Model().apply(x).shape, Model.norm(x).shape, Model().name)
    layers = Layer(w_up=jnp.ones((2, 3, 5)), w_down=jnp.ones((2, 5, 3)))
    weights = Weights(embed=jnp.ones((7, 3)), layers=layers)
    out["forward"] = forward(weights, jnp.zeros(4, jnp.int32)).shape
    with Scope(batch=4):
        check(f32, "batch embed", x)
        out["dims"] = dict(dims())
        out["callee"] = callee(jnp.ones(9)).shape  # its own table: batch is 9 there
    try:
        center(np.ones((4, 3), np.float32))  # type: ignore[arg-type]  # pyright: ignore[reportArgumentType]
    except TypeCheckError as e:
        out["numpy_rejected"] = str(e)
    out["specs"] = derive()
    mesh = jax.sharding.Mesh(np.array(jax.devices()[:1]), ("d",))
    out["host_then_device"] = isinstance(host_then_device(mesh).x, jax.Array)
    out["is_instance"] = (device_rows(x) is x, host_rows_of(np.zeros(2, np.int32)) is not None,
                          either(np.ones((4, 3), np.float32)) is not None, device_rows(np.ones((4, 3))))
    out["shardings"] = make_shardings(HostBatch, mesh).x.spec
    out["leaves"] = count_both()
    return out


# ---------------------------------------------------------------------------------------------
# Lines that must fail static checking (never called).


def must_fail() -> None:
    x = jnp.ones((4, 3))
    # The runtime-only spelling is not a type to the checkers.
    def runtime_only(x: f32[b"batch"]) -> None: ...  # type: ignore[valid-type]  # pyright: ignore[reportInvalidTypeForm, reportGeneralTypeIssues]
    # A numpy array is not a jax.Array; an int is not one either.
    center(np.ones((4, 3)))  # type: ignore[arg-type]  # pyright: ignore[reportArgumentType]
    center(3)  # type: ignore[arg-type]  # pyright: ignore[reportArgumentType]
    # The return type is kept: a jax.Array is not a str.
    text: str = center(x)  # type: ignore[assignment]  # pyright: ignore[reportAssignmentType]
    # typechecked keeps the signature (arity, keywords, methods).
    total(x, "big")  # type: ignore[arg-type]  # pyright: ignore[reportArgumentType]
    Model().apply(x, x)  # type: ignore[call-arg]  # pyright: ignore[reportCallIssue]
    typechecked(3)  # type: ignore[call-overload]  # pyright: ignore[reportCallIssue, reportArgumentType]
    # The make_* functions give a tree shaped like an annotated class (specs in its fields), which
    # is neither an int nor the class itself (its fields hold no arrays).
    mesh = jax.sharding.Mesh(np.array(jax.devices()[:1]), ("d",))
    wrong_shardings: int = make_shardings(HostBatch, mesh)  # type: ignore[assignment]  # pyright: ignore[reportAssignmentType]
    wrong_specs: str = make_partition_specs(HostBatch)  # type: ignore[assignment]  # pyright: ignore[reportAssignmentType]
    wrong_structs: int = make_shape_dtype_structs(HostBatch, {"batch": 8})  # type: ignore[assignment]  # pyright: ignore[reportAssignmentType]
    not_arrays: HostBatch = make_shardings(HostBatch, mesh)  # type: ignore[assignment]  # pyright: ignore[reportAssignmentType]
    # scope keeps the signature.
    callee("x")  # type: ignore[arg-type]  # pyright: ignore[reportArgumentType]
    # pytree_dataclass makes the dataclass __init__; frozen=True is read-only.
    Layer(w_up=x)  # type: ignore[call-arg]  # pyright: ignore[reportCallIssue]
    Layer(x, x, heads="many")  # type: ignore[arg-type]  # pyright: ignore[reportArgumentType]
    weights = Weights(embed=x, layers=Layer(x, x))
    weights.embed = x  # type: ignore[misc]  # pyright: ignore[reportAttributeAccessIssue]
    # Stacked[Layer, b'layers'] is a Layer, not an array.
    Weights(embed=x, layers=x)  # type: ignore[arg-type]  # pyright: ignore[reportArgumentType]
    # typed_shard_map keeps the signature (mypy reads the partial(...) form as Any: pyright only).
    local_sum(x, "n")  # type: ignore[arg-type]  # pyright: ignore[reportArgumentType]
    local_double(x, 2)  # type: ignore[call-arg]  # pyright: ignore[reportCallIssue]
    local_scale(x, "f")  # pyright: ignore[reportArgumentType]
    typed_shard_map(mesh="mesh")  # type: ignore[call-overload]  # pyright: ignore[reportArgumentType]
    # A list given for a tuple[...] parameter runs (the body gets the tuple), but the checkers
    # read the annotation: they report the list, and accept tuple(...) of it.
    two_layers([(x, x), (x, x)], x)  # type: ignore[arg-type]  # pyright: ignore[reportArgumentType]
    # isinstance with an annotation is a run-time question only: checkers reject Annotated there
    # (shardtypes.is_instance is the spelling they accept).
    isinstance(x, f32[jax.Array, b"batch embed"])  # type: ignore[arg-type]  # pyright: ignore[reportArgumentType]
    # Host-or-device is jax.Array | np.ndarray: an int is neither.
    HostBatch(x=3, ids=np.zeros(4, np.int32))  # type: ignore[arg-type]  # pyright: ignore[reportArgumentType]
    # shard keeps a tree's type, so its fields are known.
    shard(HostBatch(x=x, ids=x), HostBatch).nonexistent  # type: ignore[attr-defined]  # pyright: ignore[reportAttributeAccessIssue]
    # An array comes back a jax.Array.
    label: str = shard(x, f32[jax.Array, b"batch embed"])  # type: ignore[assignment]  # pyright: ignore[reportAssignmentType]
    # is_instance's class must be a class.
    is_instance(x, f32[jax.Array, b"batch embed"], "jax.Array")  # type: ignore[call-overload]  # pyright: ignore[reportCallIssue, reportArgumentType]
