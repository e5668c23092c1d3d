"""Process-wide settings: ``shardtypes.config``.

Three switches:

* ``config.checks``: every check on (default) or off. Off, checked functions, ``check``,
  typeguard's checks of shardtypes annotations and the typed collectives' operand checks do
  nothing, while derivation (specs, shardings, ``typed_shard_map``'s specs, ``shard``) keeps
  working. The environment variable ``SHARDTYPES_DISABLE=1`` turns checks off at import, for
  production runs that want no trace-time cost at all (as ``JAXTYPING_DISABLE`` does for
  jaxtyping).
* ``config.auto_sharding_check``: how Auto mesh axes are checked under ``jax.jit``.
* ``config.traceback_filtering``: ``'on'`` (default) leaves shardtypes' and typeguard's frames
  out of a failed check's traceback, as JAX does with its own; ``'off'`` keeps them.

The first two are part of jit's cache key (through ``jax.make_user_context``; on JAX before 0.10 a change
empties jit's caches instead, see ``context.compat``): a jitted function traced with checks off is traced
again once they are on, so jit's cache never keeps an unchecked trace.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
from typing import Iterator

from .compat import JitKey

__all__ = ["config"]

_AUTO_MODES = ("compile", "off")
_FILTERING = ("on", "off")
_ENV = "SHARDTYPES_DISABLE"
_TRUE = ("1", "true", "yes", "on")
_FALSE = ("", "0", "false", "no", "off")


def _checks_from_environment() -> bool:
    raw = os.environ.get(_ENV, "")
    value = raw.strip().lower()
    if value in _TRUE:
        return False
    if value in _FALSE:
        return True
    raise ValueError(
        f"shardtypes: environment variable {_ENV}={raw!r} is not understood; use 1 (checks off) "
        f"or 0 (checks on)"
    )


# What tracing depends on, as part of jit's cache key where this JAX can key on it:
# (checks on, auto_sharding_check).
_JIT_STATE = JitKey(default=(True, "compile"))

# Set while a tool that exists to check (``verify``) runs: checks are on for it whatever the switch.
FORCED: contextvars.ContextVar[bool] = contextvars.ContextVar("shardtypes.checks_forced", default=False)


class Config:
    """Settings of shardtypes.

    ``shardtypes.config.checks`` (bool, default ``True`` unless ``SHARDTYPES_DISABLE=1`` is set
    in the environment): ``False`` turns every check off; annotations still give specs,
    shardings and ``typed_shard_map`` layouts. ``dims()`` then works sizes out from the
    arguments of the checked calls it is read in, when read (nothing is compared). ``verify``
    and ``plan`` check regardless.

    ``shardtypes.config.auto_sharding_check`` is one of:

    * ``"compile"`` (default): under ``jax.jit`` on Auto mesh axes, where the sharding is only
      known once XLA has partitioned the program, the check runs at compile time through
      ``jax.debug.inspect_array_sharding`` (no cost in the compiled program) and a mismatch makes
      compilation fail with the shardtypes message.
    * ``"off"``: Auto axes are not checked under jit (Explicit and Manual axes still are). Use it
      when annotations on Auto meshes describe intent rather than what XLA chose.

    ``shardtypes.config.traceback_filtering`` is ``"on"`` (default: a failed check's traceback
    has no shardtypes or typeguard frame, as JAX's ``jax_traceback_filtering`` leaves out JAX's)
    or ``"off"`` (every frame, for debugging shardtypes itself). Tracing does not depend on it.

    >>> import shardtypes
    >>> shardtypes.config.checks = False   # production: no checks, same layouts
    """

    __slots__ = ("_auto", "_checks", "_filtering")

    def __init__(self) -> None:
        self._filtering = "on"
        self._auto = "compile"
        self._checks = _checks_from_environment()
        self._publish()

    @property
    def checks(self) -> bool:
        return self._checks

    @checks.setter
    def checks(self, on: bool) -> None:
        if not isinstance(on, bool):
            raise TypeError(f"shardtypes.config.checks must be True or False, got {on!r}")
        self._checks = on
        self._publish()

    @property
    def auto_sharding_check(self) -> str:
        return self._auto

    @auto_sharding_check.setter
    def auto_sharding_check(self, mode: str) -> None:
        if not isinstance(mode, str) or mode not in _AUTO_MODES:
            raise ValueError(
                f"shardtypes.config.auto_sharding_check must be one of {_AUTO_MODES}, got {mode!r}"
            )
        self._auto = mode
        self._publish()

    @property
    def traceback_filtering(self) -> str:
        return self._filtering

    @traceback_filtering.setter
    def traceback_filtering(self, mode: str) -> None:
        if not isinstance(mode, str) or mode not in _FILTERING:
            raise ValueError(f"shardtypes.config.traceback_filtering must be one of {_FILTERING}, got {mode!r}")
        self._filtering = mode

    def __setattr__(self, name: str, value: object) -> None:
        # A typo (config.check = False) must not pass as a no-op or an anonymous AttributeError.
        if name not in ("checks", "auto_sharding_check", "traceback_filtering", "_auto", "_checks", "_filtering"):
            raise AttributeError(
                f"shardtypes.config has no setting {name!r}: the settings are 'checks', "
                "'auto_sharding_check' and 'traceback_filtering'"
            )
        object.__setattr__(self, name, value)

    def _publish(self) -> None:
        _JIT_STATE.set_global((self._checks, self._auto))

    def __repr__(self) -> str:
        return (f"shardtypes.Config(checks={self._checks!r}, auto_sharding_check={self._auto!r}, "
                f"traceback_filtering={self._filtering!r})")


config: Config = Config()


def checks_on() -> bool:
    """Whether checks run now: the switch, or a tool that forces them."""
    return config._checks or FORCED.get()


@contextlib.contextmanager
def forced_checks() -> Iterator[None]:
    """Checks on inside, whatever ``config.checks`` says (for ``verify``); jit traces again."""
    token = FORCED.set(True)
    try:
        if not config._checks:
            # A value no process-wide setting takes, so a forced trace is never shared with one
            # made with checks off (on any JAX: see _compat).
            with _JIT_STATE(("forced", config._auto)):
                yield
        else:
            yield
    finally:
        FORCED.reset(token)
