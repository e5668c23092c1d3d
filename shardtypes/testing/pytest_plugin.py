"""A pytest plugin for tests of sharded code: ``pytest_plugins = ["shardtypes.testing.pytest_plugin"]``
in a ``conftest.py`` (or ``-p shardtypes.testing.pytest_plugin``) gives the run 8 simulated CPU
devices (``--cpu-devices=N`` for another count) and the fixture ``cpu_devices``: the list of
devices, which skips the test where fewer than it needs are present."""

from __future__ import annotations

from typing import Any

import jax
import pytest

from .devices import use_cpu_devices


def pytest_addoption(parser: Any) -> None:
    parser.addoption("--cpu-devices", type=int, default=8,
                     help="simulated CPU devices for JAX (shardtypes.testing.use_cpu_devices); default 8")


def pytest_configure(config: Any) -> None:
    use_cpu_devices(config.getoption("--cpu-devices"))


@pytest.fixture
def cpu_devices(request: Any) -> list:
    """JAX's devices; the test is skipped where fewer than the run asked for are present."""
    want = request.config.getoption("--cpu-devices")
    devices = jax.devices()
    if len(devices) < want:
        pytest.skip(f"needs {want} devices, JAX has {len(devices)}")
    return devices
