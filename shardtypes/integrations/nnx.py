"""Flax NNX modules: the implementation behind the public module ``shardtypes.nnx``, whose
docstring is the user's guide."""

import importlib
from typing import Any

import jax
from jax.sharding import NamedSharding

from ..context import Scope
from ..layout import make_partition_specs, mesh_arg
from ..model import item_annotation, resolve_hints, variable_annotation

__all__ = ["annotations", "partition_specs", "shardings", "check"]


def _nnx() -> Any:
    # Imported by name: Flax is optional, and static checkers must not need it installed.
    try:
        return importlib.import_module("flax.nnx")
    except ImportError as e:  # pragma: no cover - flax is an optional dependency
        raise ImportError("shardtypes.nnx needs Flax: pip install 'shardtypes[flax]'") from e


def annotations(model: Any, *filters: Any) -> Any:
    """An ``nnx.State`` shaped like ``nnx.state(model, *filters)`` holding each variable's
    shardtypes annotation (from ``w: nnx.Param[f32[...]]`` on its module's class)."""
    nnx = _nnx()
    if not isinstance(model, nnx.Module):
        raise TypeError(f"shardtypes.nnx: model must be an nnx.Module, got {type(model).__qualname__}")
    _check_filters(filters, "filters")
    state = nnx.state(model, *filters)
    found = {}
    missing = []
    for path, _ in jax.tree_util.tree_flatten_with_path(state)[0]:
        annotation, where = _annotation_at(model, path, nnx)
        if annotation is None:
            missing.append(where)
        found[path] = annotation
    if missing:
        shown = ", ".join(missing[:8]) + (f" and {len(missing) - 8} more" if len(missing) > 8 else "")
        raise TypeError(
            f"shardtypes.nnx: no shardtypes annotation for {shown}; annotate them on their module's "
            "class (w: nnx.Param[f32[b'embed/d hidden/t']]) or leave them out with a filter "
            "(shardtypes.nnx.shardings(model, mesh, nnx.Param))"
        )
    return jax.tree_util.tree_map_with_path(lambda path, _: found[path], state)


def _check_filters(filters: Any, where: str) -> None:
    """The filters ``nnx.state`` takes (Flax's ``filterlib.to_predicate``): a str tag, a type, a
    bool, ``...``, None, a callable, or a list or tuple of filters. Checked here, since Flax's own
    message for a bad one fails to format (a ValueError about a format specifier)."""
    for i, f in enumerate(filters):
        at = f"{where}[{i}]"
        if isinstance(f, (list, tuple)):
            _check_filters(f, at)
        elif not (isinstance(f, (str, type, bool)) or f is Ellipsis or f is None or callable(f)):
            raise TypeError(
                f"shardtypes.nnx: {at} is {f!r} ({type(f).__qualname__}), not an nnx filter: pass a "
                "Variable type (nnx.Param), a str tag, a predicate, ..., None, or a tuple of them"
            )


def partition_specs(model: Any, *filters: Any) -> Any:
    """An ``nnx.State`` of the PartitionSpec of each variable (``nnx.get_partition_spec``'s
    shape), derived from the annotations on the module classes."""
    return jax.tree.map(make_partition_specs, annotations(model, *filters))


def shardings(model: Any, mesh: Any = None, *filters: Any) -> Any:
    """An ``nnx.State`` of NamedShardings over ``mesh`` (default: the current one), for
    ``jax.device_put(nnx.state(model, *filters), ...)`` and ``nnx.update``."""
    mesh = mesh_arg(mesh, "shardtypes.nnx.shardings")
    specs = partition_specs(model, *filters)

    def sharding(path: Any, spec: jax.sharding.PartitionSpec) -> NamedSharding:
        if jax.sharding.PartitionSpec.UNCONSTRAINED in tuple(spec):
            raise ValueError(
                f"shardtypes.nnx.shardings: {jax.tree_util.keystr(path)} is laid out {spec}: an "
                "UNCONSTRAINED dim (XLA decides) cannot be placed on devices; give it mesh axes")
        return NamedSharding(mesh, spec)

    return jax.tree_util.tree_map_with_path(sharding, specs,
                                            is_leaf=lambda x: isinstance(x, jax.sharding.PartitionSpec))


def check(model: Any, *filters: Any) -> None:
    """Checks every selected variable of ``model`` against its annotation (dtype, shape,
    sharding), all in one dimension table, so ``embed`` means one size across the model.
    Raises TypeCheckError naming the variable's path (``MLP.blocks[0].w``)."""
    from ..checking import check_named

    nnx = _nnx()
    anns = annotations(model, *filters)
    state = nnx.state(model, *filters)
    flat_anns = dict(jax.tree_util.tree_flatten_with_path(anns)[0])
    with Scope():
        for path, value in jax.tree_util.tree_flatten_with_path(state)[0]:
            _, where = _annotation_at(model, path, nnx)
            check_named(value, flat_anns[path], where, "shardtypes.nnx.check")


def _annotation_at(model: Any, path: tuple, nnx: Any) -> tuple[Any, str]:
    """(the shardtypes annotation of the variable at ``path`` of ``nnx.state(model)``, or None;
    the path written as attribute access, ``MLP.blocks[0].w``)."""
    obj: Any = model
    annotation: Any = None
    where = type(model).__name__
    for key in path:
        if isinstance(obj, nnx.Variable):
            break  # the remaining key reaches into the variable (its value)
        name = getattr(key, "key", getattr(key, "name", getattr(key, "idx", None)))
        if isinstance(obj, nnx.Module) and isinstance(name, str) and not isinstance(obj, (nnx.List, nnx.Dict)):
            hints = resolve_hints(type(obj), "shardtypes.nnx")
            annotation = hints.get(name)
            where += f".{name}"
            obj = getattr(obj, name)
        else:
            annotation = item_annotation(annotation)
            where += f"[{name!r}]" if isinstance(name, str) else f"[{name}]"
            obj = obj[name]
    if not isinstance(obj, nnx.Variable) or annotation is None:
        return None, where
    wrapper, inner = variable_annotation(annotation, nnx.Variable)
    if wrapper is not None:
        if not isinstance(obj, wrapper):
            raise TypeError(
                f"shardtypes.nnx: {where} is an nnx.{type(obj).__name__} but its annotation says "
                f"{wrapper.__name__}"
            )
        annotation = inner
    return annotation, where
