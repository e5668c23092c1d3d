"""What the catalogue of bad inputs (test_catalogue.py) and the test that every exception pickles
(test_exceptions_pickle_and_copy.py) work on: meshes, an array, a pytree layer and checked
functions (also the targets the ``shardtypes`` command imports from this module, ``HERE``),
rules, deep and recursive trees, kernels, and ``cli`` (the command run in process).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import io
from typing import Any, Callable

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding, PartitionSpec as P

from shardtypes import (
    AxisRules,
    f32,
    ops,
    pytree_dataclass,
    typechecked,
    typed_shard_map,
)
from shardtypes.__main__ import main as cli_main

# Private exception classes, imported by path: every exception of the package must pickle.

# ---------------------------------------------------------------------------------------------
# What the cases work on.


@functools.cache
def MESH() -> jax.sharding.Mesh:
    return jax.make_mesh((4, 2), ("d", "t"))


@functools.cache
def MESH2() -> jax.sharding.Mesh:
    return jax.make_mesh((2, 2, 2), ("x", "y", "z"))


ABSTRACT = {"d": 4, "t": 2}


def X() -> jax.Array:
    return jnp.zeros((8, 4), jnp.float32)


@pytree_dataclass
class Layer:
    w_up: f32[b"embed/d hidden/t"]
    w_down: f32[b"hidden/t embed/d"]


ANN = f32[b"batch/d embed"]


@typechecked
def step(x: f32[b"batch/d embed"], layer: Layer) -> f32[b"batch/d embed"]:
    return x


@typechecked
def with_n(x: f32[b"batch/d embed"], n: int) -> f32[b"batch/d embed"]:
    return x


RULES = AxisRules([("batch", "d"), ("embed", "t")], modes={"decode": [("batch", None)]}, name="cat")
NOT_AN_ANNOTATION = 3


def enter(cm: Any) -> None:
    with cm:
        pass


def deep_list(depth: int) -> Any:
    tree: Any = ANN
    for _ in range(depth):
        tree = [tree]
    return tree


def deep_arrays(depth: int) -> Any:
    tree: Any = X()
    for _ in range(depth):
        tree = [tree]
    return tree


def recursive_list() -> list:
    tree: list = [ANN]
    tree.append(tree)
    return tree


def recursive_dict() -> dict:
    tree: dict = {"a": ANN}
    tree["b"] = tree
    return tree


def in_shard_map(body: Callable[[jax.Array], Any]) -> Any:
    """Runs ``body`` inside a shard_map over MESH with every axis manual."""
    return jax.shard_map(body, mesh=MESH(), in_specs=P(), out_specs=P(), check_vma=False)(jnp.zeros((8,)))


def gather_kernel_vma_off(x: f32[b"a/d"]) -> f32[b"a"]:
    return ops.all_gather("a/d -> a", x, invariant=True)


def gather_kernel_plain(x: f32[b"a/d"]) -> f32[b"a"]:
    return ops.all_gather("a/d -> a", x)


def in_kernel(f: Callable[..., Any]) -> Any:
    """Calls ``f`` as a typed_shard_map kernel over MESH (check_vma off for ``*_vma_off``)."""
    with jax.set_mesh(MESH()):
        x = jax.device_put(jnp.zeros((8,)), NamedSharding(MESH(), P("d")))
        return typed_shard_map(f, check_vma=not f.__name__.endswith("_vma_off"))(x)


def define_pytree(**options: Any) -> type:
    class C:
        w: f32[b"a"]

    return pytree_dataclass(**options)(C)


@functools.cache
def nnx_block() -> Any:
    from flax import nnx as flax_nnx

    class Block(flax_nnx.Module):
        w: flax_nnx.Param[f32[jax.Array, b"embed/d hidden/t"]]

        def __init__(self) -> None:
            self.w = flax_nnx.Param(jnp.zeros((8, 4)))

    return Block()


def init_false_field() -> type:
    @dataclasses.dataclass
    class C:
        w: f32[b"a"]
        n: int = dataclasses.field(default=0, init=False)

    return pytree_dataclass(C)


class CLIFailed(Exception):
    """The command ended with a non-zero status; the message holds the status and the output."""

def cli(*argv: str) -> None:
    """Runs ``shardtypes ARGV`` in process; a non-zero exit status raises CLIFailed. An exception
    that escapes ``main`` (a traceback, for the user) escapes here too, and fails the case."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            status = cli_main(list(argv))
        except SystemExit as e:
            status = e.code if isinstance(e.code, int) else 1
            if isinstance(e.code, str):
                err.write(e.code)
    if status:
        raise CLIFailed(f"exit status {status}: {out.getvalue()}{err.getvalue()}")


HERE = __name__  # the command imports its targets from this module
