"""``PyTree[X]``: any JAX pytree whose every leaf is ``X`` (jaxtyping's ``PyTree``), with dim
names bound across the leaves.

``X`` is a shardtypes annotation: an array annotation (``PyTree[f32[b'batch/d embed']]``: every
leaf JAX flattens the value to is such an array), an annotated class (``PyTree[Layer]``: the
leaves are ``Layer`` instances, found with ``is_leaf``, each checked field by field), or a
``PyTree[...]`` again (the same class). ``None`` is an empty subtree, as JAX treats it, so
``None`` and ``{}`` pass. All leaves share the call's dimension table: two leaves with different
``batch`` sizes fail, naming both leaves' paths (``jax.tree_util.keystr``).

>>> @typechecked
... def mean_norm(grads: PyTree[f32[b'...']]) -> f32[b'']: ...   # doctest: +SKIP

The same arguments give the same class; it pickles and its repr is what was written. Static
checkers read ``PyTree[X]`` as ``X | Any`` (``_indirection``), so any value passes there, as with jaxtyping's.
"""

from __future__ import annotations

import copyreg
import functools
import typing
from typing import Any, Callable

from .annotation_nodes import PYTREES, ArrayNode, ClassNode, model
from .annotations import annotation_class, is_dtype_class

__all__ = ["PyTree", "holds_pytree", "install_pytree_instance_check", "is_pytree", "pytree_leaf"]

# isinstance(x, PyTree[X]) needs the checker, which sits in a later layer; it installs itself.
_INSTANCE_CHECK: list[Callable[[type, object], bool]] = []


def install_pytree_instance_check(check: Callable[[type, object], bool]) -> None:
    _INSTANCE_CHECK[:] = [check]


class _PyTreeMeta(type):
    """The metaclass of ``PyTree`` and ``PyTree[X]``: a readable repr, ``isinstance`` as the full
    check (as a bool), and pickling by recipe."""

    def __repr__(cls) -> str:
        if cls not in PYTREES:
            return "shardtypes.PyTree"
        return f"shardtypes.PyTree[{_text(PYTREES[cls])}]"

    def __instancecheck__(cls, value: object) -> bool:
        if cls not in PYTREES:
            raise TypeError("isinstance(x, PyTree): say what the leaves are, as in PyTree[f32[b'...']]")
        if not _INSTANCE_CHECK:
            raise RuntimeError("isinstance(x, PyTree[...]) needs shardtypes' checker (import shardtypes)")
        return _INSTANCE_CHECK[0](cls, value)

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        raise TypeError(f"{cls!r} is an annotation, not a class to instantiate")


def _reduce(cls: _PyTreeMeta) -> Any:
    return (_pytree_of, (PYTREES[cls],)) if cls in PYTREES else "PyTree"


copyreg.pickle(_PyTreeMeta, _reduce)


class PyTree(metaclass=_PyTreeMeta):
    """``PyTree[X]``: any JAX pytree whose every leaf is ``X`` (an array annotation, an annotated
    class, or a ``PyTree[...]``), names bound across leaves. See the module docstring.

    >>> PyTree[f32[b'batch embed']]   # doctest: +SKIP
    shardtypes.PyTree[f32[b'batch embed']]
    """

    def __class_getitem__(cls, key: Any) -> Any:
        if isinstance(key, tuple):
            raise TypeError(
                f"PyTree[{', '.join(_text(k) for k in key)}]: shardtypes' PyTree takes one leaf annotation, "
                "as in PyTree[f32[b'batch embed']]; jaxtyping's structure argument (PyTree[X, 'T']) is not "
                "supported: annotate the structure itself (a pytree dataclass, tuple[...], dict[str, ...])"
            )
        return _pytree_of(key)


PyTree.__module__ = "shardtypes"  # its public home: pickles of PyTree name shardtypes.PyTree


def _text(x: Any) -> str:
    if is_dtype_class(x) or (isinstance(x, type) and type(x) is type):
        return x.__qualname__
    return repr(x).replace("shardtypes.", "")


@functools.lru_cache(maxsize=None)
def _pytree_of(leaf: Any) -> type:
    if isinstance(leaf, type) and leaf in PYTREES:  # PyTree[PyTree[X]] is PyTree[X]
        return leaf
    _validate(leaf)
    name = f"PyTree[{_text(leaf)}]"
    cls = _PyTreeMeta(name, (PyTree,), {"__module__": "shardtypes", "__qualname__": name})
    PYTREES[cls] = leaf
    return cls


_KINDS = ("an array annotation (PyTree[f32[b'batch embed']]), an annotated class (PyTree[Layer]) "
          "or PyTree[...]")


def _validate(leaf: Any) -> None:
    where = f"PyTree[{_text(leaf)}]"
    if leaf is PyTree:
        raise TypeError(f"{where}: say what the leaves are, as in PyTree[f32[b'...']]")
    if isinstance(leaf, (str, bytes)):
        raise TypeError(f"{where}: the leaf annotation is a string; write {_KINDS}")
    if is_dtype_class(leaf) and annotation_class(leaf) is None:
        raise TypeError(
            f"{where}: {leaf.__name__} has no shape; write {leaf.__name__}[b'...'] for any shape, as in "
            f"PyTree[{leaf.__name__}[b'...']]"
        )
    try:
        node = model(leaf)
    except (NameError, TypeError) as e:
        raise TypeError(f"{where}: the leaf annotation cannot be read: {e}") from None
    if isinstance(node, ArrayNode) or (isinstance(node, ClassNode) and node.has_arrays):
        return
    if typing.get_origin(leaf) in (tuple, list, dict) or leaf in (tuple, list, dict):
        raise TypeError(
            f"{where}: JAX flattens tuples, lists and dicts, so they are never leaves; write {_KINDS}, "
            "or annotate the container itself"
        )
    raise TypeError(f"{where}: the leaf annotation must be a shardtypes annotation: {_KINDS}; got {_text(leaf)}")


def is_pytree(annotation: Any) -> bool:
    """Whether ``annotation`` is a ``PyTree[X]`` class."""
    return isinstance(annotation, type) and annotation in PYTREES


def pytree_leaf(annotation: Any) -> Any:
    """``X`` of ``PyTree[X]``, or None for any other annotation."""
    return PYTREES.get(annotation) if isinstance(annotation, type) else None


def holds_pytree(annotation: Any) -> bool:
    """Whether ``annotation`` is or holds (in a union, tuple, list or dict) a ``PyTree[X]``."""
    if is_pytree(annotation):
        return True
    try:
        return any(holds_pytree(a) for a in typing.get_args(annotation))
    except TypeError:
        return False
