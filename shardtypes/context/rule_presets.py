"""Ready-made axis rules: T5X's standard rules (``t5x_rules``) and an eFormer-style set with
train, prefill and decode modes (``eformer_rules``).

>>> t5x_rules().name
't5x1x1'
"""

from __future__ import annotations

from typing import Iterable

from ..language import IDENT
from .rules import AxisRules, Rule, rule_list

__all__ = ["t5x_rules", "eformer_rules"]


def t5x_rules(activation_partitioning_dims: int = 1, parameter_partitioning_dims: int = 1,
              additional_rules: Iterable[Rule] | None = None) -> AxisRules:
    """T5X's standard rules over mesh axes ``data`` and ``model`` (1-D or 2-D activation and
    parameter partitioning), as ready AxisRules; ``additional_rules`` (None, as T5X's default,
    or rules) come after them."""
    for arg, value in (("activation_partitioning_dims", activation_partitioning_dims),
                       ("parameter_partitioning_dims", parameter_partitioning_dims)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"t5x_rules: {arg} must be the int 1 or 2, got {value!r}")
    extra = rule_list(additional_rules if additional_rules is not None else (), "t5x_rules: additional_rules")
    base: list[Rule] = [("batch", "data"), ("vocab", "model")]
    shape = (activation_partitioning_dims, parameter_partitioning_dims)
    if shape == (1, 1):
        rules = base + [("embed", None), ("mlp", "model"), ("heads", "model"), ("kv", None), ("joined_kv", "model")]
    elif shape == (2, 1):
        rules = base + [("mlp", "model"), ("heads", "model"), ("kv", None), ("joined_kv", "model"), ("embed", "model")]
    elif shape == (1, 2):
        rules = base + [("mlp", "model"), ("heads", "model"), ("kv", None), ("joined_kv", "model"), ("embed", "data")]
    elif shape == (2, 2):
        rules = base + [("mlp", "model"), ("heads", "model"), ("kv", None), ("joined_kv", "model"),
                        ("embed", "model"), ("embed", "data")]
    else:
        raise ValueError(
            f"t5x_rules: activation_partitioning_dims and parameter_partitioning_dims are 1 or 2, "
            f"got {shape}"
        )
    rules += [("relpos_buckets", None), ("abspos_buckets", None), ("length", None), ("layers", None),
              ("stack", None), ("mlp_activations", None)]
    rules += [(n, None if not t else t[0] if len(t) == 1 else t) for n, t in extra]
    # T5X (Flax) leaves a dim whose axes another dim took unsharded; the preset does the same.
    return AxisRules(rules, name=f"t5x{shape[0]}x{shape[1]}", on_conflict="drop")


def eformer_rules(dp: str = "dp", fsdp: str = "fsdp", tp: str = "tp", sp: str = "sp", ep: str = "ep") -> AxisRules:
    """eFormer's ``PartitionAxis`` defaults as a rule set over mesh axes dp, fsdp, tp, sp, ep,
    with train, prefill and decode modes (decode keeps the one-token query dim replicated and
    spreads the batch wider). An array whose ``query`` dim has size 1 gets the decode rules.

    >>> eformer_rules().table()['batch']
    (('fsdp', 'dp'),)
    """
    given = {"dp": dp, "fsdp": fsdp, "tp": tp, "sp": sp, "ep": ep}
    for arg, axis in given.items():
        if not isinstance(axis, str) or not IDENT.match(axis):
            raise TypeError(f"eformer_rules: {arg} must be a mesh axis name (an identifier), got {axis!r}")
    for axis in set(given.values()):
        args = [arg for arg, a in given.items() if a == axis]
        if len(args) > 1:
            raise ValueError(f"eformer_rules: {' and '.join(args)} name mesh axis {axis!r} twice; "
                             "give each its own axis")
    # eFormer's PartitionAxis defaults: batch over (fsdp, dp), the hidden state (embed) over tp
    # like heads, mlp and vocab. eFormer would put tp on two dims of a weight such as
    # 'embed heads'; here the tp rules of heads, mlp and vocab come first and embed falls back
    # to fsdp (FSDP-style weights), so every array the preset lays out is a valid layout.
    train: list[Rule] = [
        ("batch", (fsdp, dp)), ("length", sp), ("query", sp), ("kv_length", sp),
        ("heads", tp), ("kv_heads", tp), ("head_dim", None), ("mlp", tp), ("vocab", tp),
        ("embed", tp), ("embed", fsdp), ("expert", ep), ("layers", None),
    ]
    prefill: list[Rule] = [("query", sp), ("kv_length", sp)]
    # Decode: one query token, so the query and key/value lengths are replicated and the batch
    # takes sp as well (falling back to eFormer's (fsdp, dp)).
    decode: list[Rule] = [("batch", (fsdp, dp, sp)), ("batch", (fsdp, dp)), ("query", None),
                          ("kv_length", None), ("length", None)]
    return AxisRules(train, modes={"prefill": prefill, "decode": decode},
                     auto_mode=("query", 1, "decode"), name="eformer")
