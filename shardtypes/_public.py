"""The public home of names the top-level modules re-export (``shardtypes``, ``shardtypes.ops``,
``shardtypes.nnx``, ``shardtypes.linen``): one helper, so that they say it the same way."""

from __future__ import annotations

from typing import Any, Iterable

__all__ = ["rehome"]


def rehome(module: str, objects: Iterable[Any]) -> None:
    """Sets each object's ``__module__`` to ``module``, its public home: reprs, tracebacks, the
    API reference and pickles name ``shardtypes.ops.psum``, not the layer module that defines it
    (pickle finds it there, since the public module re-exports it)."""
    for obj in objects:
        obj.__module__ = module
