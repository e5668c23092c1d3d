"""Simulated CPU devices for tests: ``use_cpu_devices(8)`` in a ``conftest.py``, before anything
starts JAX's backend, and the pytest plugin ``shardtypes.testing.pytest_plugin`` that does it for
a whole test run and offers the ``cpu_devices`` fixture.
"""

from __future__ import annotations

import jax

__all__ = ["use_cpu_devices"]


def use_cpu_devices(n: int = 8) -> None:
    """Asks JAX for ``n`` simulated CPU devices (``jax_num_cpu_devices``). Call it before JAX
    starts its backend (before the first array is made): in ``conftest.py``, at the top. Called
    later, it checks that the CPU backend already has ``n`` devices, and says how to get them if
    not."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise TypeError(f"use_cpu_devices: n must be an int >= 1, got {n!r}")
    try:
        jax.config.update("jax_num_cpu_devices", n)
        return
    except RuntimeError:
        pass  # the backend has started: see what it has
    have = len(jax.devices("cpu"))
    if have != n:
        raise RuntimeError(
            f"use_cpu_devices({n}): JAX's CPU backend has already started with {have} device"
            f"{'s' if have != 1 else ''}; call it before anything makes an array (at the top of conftest.py), "
            f"or set XLA_FLAGS=--xla_force_host_platform_device_count={n} before Python starts")
