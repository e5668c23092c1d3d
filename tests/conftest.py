"""Test setup: 8 simulated CPU devices, and meshes of both axis types."""

import jax

# Must run before JAX initialises its backend (no test touches devices at import time).
jax.config.update("jax_num_cpu_devices", 8)

import pytest  # noqa: E402
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P  # noqa: E402

AXIS_TYPES = {"explicit": AxisType.Explicit, "auto": AxisType.Auto}


def make_mesh(kind: str, shape=(4, 2), names=("d", "t")):
    return jax.make_mesh(shape, names, axis_types=(AXIS_TYPES[kind],) * len(names))


@pytest.fixture(params=sorted(AXIS_TYPES))
def mesh(request):
    """A (d=4, t=2) mesh, once with Explicit axes and once with Auto axes."""
    return make_mesh(request.param)


def put(mesh, array, *spec):
    """``array`` laid out on ``mesh`` as ``P(*spec)``."""
    return jax.device_put(array, NamedSharding(mesh, P(*spec)))


def examples_from_env(variable: str, default: int) -> int:
    """A test budget (how many examples) from environment variable ``variable``, ``default``
    when unset; anything but a positive int is an error naming the variable."""
    import os

    raw = os.environ.get(variable, "").strip()
    if raw == "":
        return default
    try:
        n = int(raw)
    except ValueError:
        raise ValueError(f"{variable} must be an int, got {raw!r}") from None
    if n < 1:
        raise ValueError(f"{variable} must be at least 1, got {n}")
    return n
