"""Process-wide settings."""

from __future__ import annotations

import jax

__all__ = ["config"]

_AUTO_MODES = ("compile", "off")

# The mode decides, while tracing, whether a compile-time check is registered; as part of jit's
# cache key (where this JAX can), changing it makes jitted functions trace again.
_JIT_AUTO_MODE = jax.make_user_context(default_value="compile") if hasattr(jax, "make_user_context") else None


class Config:
    """Settings of shardtypes. ``shardtypes.config.auto_sharding_check`` is one of:

    * ``"compile"`` (default): under ``jax.jit`` on Auto mesh axes, where the sharding is only
      known once XLA has partitioned the program, the check runs at compile time through
      ``jax.debug.inspect_array_sharding`` (no cost in the compiled program) and a mismatch makes
      compilation fail with the shardtypes message.
    * ``"off"``: Auto axes are not checked under jit (Explicit and Manual axes still are). Use it
      when annotations on Auto meshes describe intent rather than what XLA chose.
    """

    __slots__ = ("_auto",)

    def __init__(self) -> None:
        self._auto = "compile"

    @property
    def auto_sharding_check(self) -> str:
        return self._auto

    @auto_sharding_check.setter
    def auto_sharding_check(self, mode: str) -> None:
        if mode not in _AUTO_MODES:
            raise ValueError(
                f"shardtypes.config.auto_sharding_check must be one of {_AUTO_MODES}, got {mode!r}"
            )
        self._auto = mode
        if _JIT_AUTO_MODE is not None:
            _JIT_AUTO_MODE.set_global(mode)

    def __repr__(self) -> str:
        return f"shardtypes.Config(auto_sharding_check={self._auto!r})"


config = Config()
