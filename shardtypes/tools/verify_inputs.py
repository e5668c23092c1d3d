"""``verify(..., inputs={...})``: parameters given as trees of values instead of built from their
annotations. A ``TrainState`` whose ``opt_state`` is ``Any`` (an optax state) has no annotation a
struct can be built from, but ``jax.eval_shape(init, key)`` gives its shapes; here each given
tree is laid out over verify's abstract mesh from the annotated classes inside it (the
value-tree derivation of ``make_shape_dtype_structs``; the shardings the values carry, if any,
are not used), and checked against its parameter's annotation, which also reads the sizes of
its named dims (``embed``) for the parameters verify builds.
"""

from __future__ import annotations

import inspect
from typing import Any, Callable, Mapping

import jax

from ..context import Scope, dims as current_dims, forced_checks
from ..integrations import typechecked
from ..layout import shardings, structs_of_values
from ..model import is_value_tree

__all__ = ["check_inputs_arg", "lay_out_input", "sizes_of_input"]


def check_inputs_arg(inputs: Any, parameters: Mapping[str, Any], static: Mapping[str, Any], name: str) -> dict:
    """``inputs`` validated: a mapping of a parameter name of ``fn`` (not also in ``static``) to
    a tree of values."""
    if inputs is None:
        return {}
    if not isinstance(inputs, Mapping) or not all(isinstance(k, str) for k in inputs):
        raise TypeError(f"verify: inputs must be a mapping of parameter name to a tree of values "
                        f"(jax.eval_shape(init, key)), got {type(inputs).__qualname__}")
    unknown = sorted(set(inputs) - set(parameters))
    if unknown:
        raise ValueError(f"verify: inputs given for {unknown}, which {name}() does not take "
                         f"(its parameters: {list(parameters)})")
    both = sorted(set(inputs) & set(static))
    if both:
        raise ValueError(f"verify: {both} given in both inputs and static; give each parameter once")
    for key, tree in inputs.items():
        if not is_value_tree(tree):
            raise TypeError(f'verify: inputs["{key}"] is {type(tree).__qualname__}, not a tree of values: give '
                            "arrays or jax.ShapeDtypeStructs (jax.eval_shape(init, key)); annotations go in "
                            "the signature")
    return dict(inputs)


def lay_out_input(key: str, tree: Any, mesh: Any) -> Any:
    """The tree's ShapeDtypeStructs over ``mesh``, laid out from the annotated classes inside
    it; an error names the parameter and the path."""
    what = f'verify: inputs["{key}"]'
    try:
        return structs_of_values(tree, shardings(tree, mesh), what)
    except (TypeError, ValueError) as e:
        text = str(e)
        raise type(e)(text if text.startswith(what) else f"{what}: {text}") from None


def sizes_of_input(key: str, structs: Any, annotation: Any, mesh: Any, given: Mapping[str, Any], name: str) -> dict:
    """The sizes the laid-out input binds when checked against its parameter's annotation (with
    the sizes ``given`` bound first), as ``name()``'s argument ``key``. A mismatch raises
    TypeCheckError naming the argument and the path."""
    found: dict = {}

    def probe(*args: Any) -> None:
        found.update(current_dims())

    parameter = inspect.Parameter(key, inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=annotation)
    probe.__signature__ = inspect.Signature([parameter], return_annotation=None)  # type: ignore[attr-defined]
    probe.__annotations__ = {key: annotation, "return": None}
    probe.__qualname__ = probe.__name__ = name
    checked: Callable = typechecked(probe)
    scope = Scope(**given)
    scope._origin = "verify(dims=...)"
    with jax.sharding.use_abstract_mesh(mesh), scope, forced_checks():
        jax.eval_shape(checked, structs)
    return {n: v for n, v in found.items() if n not in given}
