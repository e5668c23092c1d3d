"""A compile-time check's failure reaches the user as shardtypes' own error.

The compile-time check on Auto mesh axes runs inside XLA's SPMD partitioner, which turns any
Python exception into ``jax.errors.JaxRuntimeError: INTERNAL: Error calling inspect_sharding:
Traceback ...`` with the message buried in it. So the check records each error it raises
(``failed``), and a listener on JAX's backend-compile event (``jax.monitoring``, called as the
failed compilation unwinds, in the compiling thread) finds the recorded error whose message the
``JaxRuntimeError`` carries and raises that one instead: the user sees shardtypes'
``TypeCheckError`` with its message on the first line.

The listener raises from inside JAX's monitoring call, so the error is raised as an instance of
a subclass of its own class, named as it is (``typeguard.TypeCheckError``), whose
``with_traceback`` (which JAX's traceback filtering calls on its way out of ``jax.jit``) leaves
out that call's frame and shardtypes' own and makes the error of its own class again: the
traceback ends at the user's call of the jitted function, as any other failed check's does
(``config.traceback_filtering = 'off'`` keeps every frame).

Where the listener cannot run (a JAX that stops recording the event), the ``JaxRuntimeError``
still carries the whole message: never a silent pass. A recorded error is matched by its text, so
a compile in another thread never takes someone else's error; unmatched ones are forgotten after
``_KEEP`` newer ones.
"""

from __future__ import annotations

import collections
import os
import sys
import threading
from types import TracebackType
from typing import Any

import jax
import typeguard

from ..context import config

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
        raise BaseException.with_traceback(_shown_from_user_code(error), None) from None


_HIDDEN = (os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep,
           os.path.dirname(os.path.abspath(typeguard.__file__)) + os.sep)
_MONITORING = os.path.join(os.path.dirname(os.path.abspath(jax.__file__)), "_src", "monitoring.py")
_SHOWN: dict[type, type] = {}


def _with_traceback(self: BaseException, tb: TracebackType | None) -> BaseException:
    """``with_traceback`` without the frames of JAX's monitoring call and shardtypes' own; the
    error is of its own class again after (JAX's filtering calls this once, on its way out)."""
    self.__class__ = type(self).__mro__[1]
    if config.traceback_filtering == "off" or tb is None:
        return self.with_traceback(tb)
    kept = []
    entry: TracebackType | None = tb
    while entry is not None:
        filename = entry.tb_frame.f_code.co_filename
        if not filename.startswith(_HIDDEN) and os.path.abspath(filename) != _MONITORING:
            kept.append(entry)
        entry = entry.tb_next
    following: TracebackType | None = None
    for kept_entry in reversed(kept):
        kept_entry.tb_next = following
        following = kept_entry
    return self.with_traceback(following)


def _reduce(self: BaseException) -> tuple[Any, ...]:
    """Pickles as the error's own class."""
    base = type(self).__mro__[1]
    return (base, self.args) if not self.__dict__ else (base, self.args, self.__dict__)


def _shown_from_user_code(error: BaseException) -> BaseException:
    """``error`` as an instance of a subclass of its class with the same name and module, whose
    traceback (once JAX's filtering has set it) starts and ends in the user's code."""
    cls = type(error)
    shown = _SHOWN.get(cls)
    if shown is None:
        shown = _SHOWN[cls] = type(cls.__name__, (cls,), {
            "with_traceback": _with_traceback, "__reduce__": _reduce,
            "__module__": cls.__module__, "__qualname__": cls.__qualname__,
            "__doc__": cls.__doc__,
        })
    try:
        error.__class__ = shown
    except TypeError:  # (a class whose layout differs: shown as it is)
        pass
    return error


def install() -> None:
    """Registers the listener once per process."""
    if not _INSTALLED:
        with _LOCK:
            if not _INSTALLED:
                jax.monitoring.register_event_duration_secs_listener(_on_duration)
                _INSTALLED.append(True)
