"""What the tests of logical axis rules (test_rules.py, test_rules_modes_and_presets.py,
test_rules_one_language.py) share: the meshes, an attention annotation, two small rule sets
(``A``, ``B``), the arrays ``X`` and ``W``, an MLP annotated with logical names only, and the spec
a rule set gives an annotation (``spec_under``, ``struct_spec``).
"""

import numpy as np
from jax.sharding import AbstractMesh

from shardtypes import (
    AxisRules,
    axis_rules,
    f32,
    make_partition_specs,
    make_shape_dtype_structs,
    pytree_dataclass,
)

from conftest import make_mesh

KINDS = ("explicit", "auto")
MESH3 = AbstractMesh((2, 2, 2), ("data", "fsdp", "model"))
EFORMER_MESH = AbstractMesh((1, 2, 2, 2, 1), ("dp", "fsdp", "tp", "sp", "ep"))
ATTN = f32[b"b/batch q/query h/heads d/head_dim"]


RNG = np.random.default_rng(0)
X = RNG.standard_normal((8, 4)).astype(np.float32)
W = RNG.standard_normal((4, 8)).astype(np.float32)


A = AxisRules([("dp", "data"), ("tp", "model")], name="A")
B = AxisRules([("dp", ("data", "fsdp")), ("tp", None)], name="B")


@pytree_dataclass  # two weights annotated with logical names only
class Mlp:
    w_in: f32["embed/fsdp mlp/tp"]
    w_out: f32["mlp/tp embed/fsdp"]


def mesh3(kind):
    return make_mesh(kind, (2, 2, 2), ("data", "fsdp", "model"))


def spec_under(rules, annotation, mode=None):
    with axis_rules(rules, mode=mode):
        return make_partition_specs(annotation)


def struct_spec(rules, annotation, dims, mesh=MESH3, mode=None):
    with axis_rules(rules, mode=mode):
        return make_shape_dtype_structs(annotation, dims, mesh).sharding.spec
