"""A compile-time check's failure reaches the user as shardtypes' own error.

The compile-time check on Auto mesh axes runs inside XLA's SPMD partitioner, which turns any
Python exception into ``jax.errors.JaxRuntimeError: INTERNAL: Error calling inspect_sharding:
Traceback ...`` with the message buried in it. So the check records each error it raises
(``failed``), and a listener on JAX's backend-compile event (``jax.monitoring``, called as the
failed compilation unwinds, in the compiling thread) finds the recorded error whose message the
``JaxRuntimeError`` carries and raises that one instead: the user sees shardtypes'
``TypeCheckError`` with its message on the first line.

Where the listener cannot run (a JAX that stops recording the event), the ``JaxRuntimeError``
still carries the whole message: never a silent pass. A recorded error is matched by its text, so
a compile in another thread never takes someone else's error; unmatched ones are forgotten after
``_KEEP`` newer ones.
"""

from __future__ import annotations

import collections
import sys
import threading

import jax

__all__ = ["failed", "install"]

_EVENT = "/jax/core/compile/backend_compile_duration"
_KEEP = 64
_PENDING: collections.deque = collections.deque(maxlen=_KEEP)
_LOCK = threading.Lock()
_INSTALLED: list = []


def failed(error: BaseException) -> BaseException:
    """Records ``error``, which a compile-time check is about to raise; returns it."""
    with _LOCK:
        _PENDING.append(error)
    return error


def _take(text: str) -> BaseException | None:
    with _LOCK:
        for error in reversed(_PENDING):
            if str(error) and str(error) in text:
                _PENDING.remove(error)
                return error
    return None


def _on_duration(event: str, duration_secs: float, **kwargs: str | int) -> None:
    if event != _EVENT:
        return
    active = sys.exc_info()[1]
    if active is None or not isinstance(active, jax.errors.JaxRuntimeError):
        return
    error = _take(str(active))
    if error is not None:
        # JAX's wrapper says nothing the message does not; the user's traceback stays theirs.
        raise error.with_traceback(None) from None


def install() -> None:
    """Registers the listener once per process."""
    if not _INSTALLED:
        with _LOCK:
            if not _INSTALLED:
                jax.monitoring.register_event_duration_secs_listener(_on_duration)
                _INSTALLED.append(True)
