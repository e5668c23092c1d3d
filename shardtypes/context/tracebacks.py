"""Tracebacks without shardtypes' and typeguard's frames, as JAX leaves its own out
(``jax_traceback_filtering``): a failed check's traceback goes from the user's frames straight to
the error, whose message says what failed. ``config.traceback_filtering = 'off'`` keeps every
frame. Work is done only when an error leaves a public entry point, never on a passing call.
"""

from __future__ import annotations

import os
from types import TracebackType

import typeguard

from .settings import config

__all__ = ["filter_traceback"]

_SHARDTYPES = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_TYPEGUARD = os.path.dirname(os.path.abspath(typeguard.__file__)) + os.sep
_HIDDEN = (_SHARDTYPES, _TYPEGUARD)


def _hidden(tb: TracebackType) -> bool:
    return tb.tb_frame.f_code.co_filename.startswith(_HIDDEN)


def filter_traceback(error: BaseException) -> BaseException:
    """``error`` with its traceback relinked without shardtypes' and typeguard's frames (the
    caller, a public entry point, re-raises it with a bare ``raise``, which adds no frame; the
    frames it passes through on its way out, the user's, are added as it goes). Unchanged with
    ``config.traceback_filtering = 'off'``."""
    if config.traceback_filtering == "off":
        return error
    kept = []
    tb = error.__traceback__
    while tb is not None:
        if not _hidden(tb):
            kept.append(tb)  # a user's function called by a checked one, or by shard's callbacks
        tb = tb.tb_next
    following = None
    for entry in reversed(kept):
        entry.tb_next = following
        following = entry
    return error.with_traceback(following)
