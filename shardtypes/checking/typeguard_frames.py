"""Where typeguard is checking a value, and in which dimension table, read from typeguard's frames.

typeguard passes no argument name to its checkers, so the role of a value (``argument "x" of
f()``, the return value, an assignment, ``check_type()``) is read from typeguard's own frame, only
when a dim is first bound or a check fails. The table such a check uses is the current one inside
a shardtypes call or ``Scope``, else one kept with the typeguard call (see ``get_table``).
"""

from __future__ import annotations

import contextvars
import sys
import types

from typeguard import TypeCheckMemo

from ..context import TABLE, Table, commit_memo_table, memo_table, staged_read
from ..model import field_path
from .typeguard_internals import check_argument_types_internal, check_codes, check_return_type_internal

__all__ = ["check_argument_types_internal", "check_return_type_internal", "failed_function"]

_CODES = check_codes()


def _typeguard_frame() -> types.FrameType | None:
    frame: types.FrameType | None = sys._getframe(2)
    for _ in range(32):
        if frame is None or frame.f_code in _CODES:
            return frame
        frame = frame.f_back
    return None


def checked_role() -> tuple[str, str | None, str]:
    """(what is checked, in which function, which typeguard entry point), e.g.
    ('argument "x"', 'center', 'argument') or ('check_type()', None, 'check_type')."""
    frame = _typeguard_frame()
    if frame is None:
        return "a checked value", None, "unknown"
    kind = _CODES[frame.f_code]
    local = frame.f_locals
    func = local.get("func_name")
    if kind == "argument":
        return f'argument "{local.get("argname")}"', func, kind
    if kind == "return":
        return "the return value", func, kind
    if kind == "variable":
        caller = frame.f_back
        return f'the value assigned to {local.get("varname")}', caller and caller.f_code.co_qualname, kind
    if kind == "yield":
        return "a yielded value", func, kind
    if kind == "send":
        return "a sent value", func, kind
    return "check_type()", None, kind


def origin_phrase() -> str:
    role, func, kind = checked_role()
    phrase = f"{role} of {func}()" if func else role
    fields = FIELD_PATH.get()
    if fields:
        path = field_path(fields)
        if kind == "argument" and role.startswith('argument "'):
            path = role[len('argument "'):-1] + path
        phrase = f"{path} ({phrase})"
    return phrase


def failed_function(error: BaseException) -> str | None:
    """The function whose argument, return value, yield or sent value typeguard was checking when
    ``error`` was raised (read from the traceback's innermost typeguard frame), else None."""
    tb, found = error.__traceback__, None
    while tb is not None:
        if _CODES.get(tb.tb_frame.f_code) in ("argument", "return", "yield", "send"):
            found = tb.tb_frame.f_locals.get("func_name")
        tb = tb.tb_next
    return found if isinstance(found, str) else None


# The attribute path of the dataclass field being checked, for "bound by" phrases.
FIELD_PATH: contextvars.ContextVar[tuple] = contextvars.ContextVar("shardtypes.field_path", default=())


# ---------------------------------------------------------------------------------------------
# Tables when typeguard calls us. Inside a shardtypes call or Scope: that table. Otherwise, for
# checks made by a plain typeguard-instrumented function: a table kept with that call's frame
# (see memo_table). Otherwise (check_type at top level): a fresh table per check.


_CHECK_TYPE_TABLE = "_shardtypes_dimension_table"


def get_table(memo: TypeCheckMemo) -> tuple[Table, bool]:
    table = TABLE.get()
    if table is not None:
        staged_read()
        return table, True
    frame = _typeguard_frame()
    kind = _CODES[frame.f_code] if frame is not None else None
    if kind == "check_type":
        # check_type makes a fresh configuration object per call; the call's table rides on it,
        # so the items of one check_type([...]) share a table and separate calls never do.
        return getattr(memo.config, _CHECK_TYPE_TABLE, None) or Table(), False
    if kind is not None:
        return memo_table(memo), False
    return Table(), False


def set_table(memo: TypeCheckMemo, table: Table, scoped: bool) -> None:
    if scoped:
        TABLE.set(table)
        return
    frame = _typeguard_frame()
    kind = _CODES[frame.f_code] if frame is not None else None
    if kind == "check_type":
        try:
            setattr(memo.config, _CHECK_TYPE_TABLE, table)
        except (AttributeError, TypeError):  # a frozen or slotted config: one table per item
            pass
    elif kind is not None:
        commit_memo_table(memo, table)


def snapshot(memo: TypeCheckMemo):
    table = TABLE.get()
    if table is not None:
        return lambda: TABLE.set(table)
    config_table = getattr(memo.config, _CHECK_TYPE_TABLE, None)
    local_vars = memo.locals
    frame_table = memo_table(memo)

    def restore():
        if getattr(memo.config, _CHECK_TYPE_TABLE, None) is not config_table:
            setattr(memo.config, _CHECK_TYPE_TABLE, config_table)
        if isinstance(local_vars, dict) and local_vars is not memo.globals:
            commit_memo_table(memo, frame_table)

    return restore
