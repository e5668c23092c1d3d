"""Errors with a way out: each family of error shardtypes raises ends its message with a line that
names the docs section explaining it, ``See https://shardtypes.github.io/shardtypes/checking/#...``,
as Flax's errors do.

A family is a ``DocLink`` (a page of docs/ and a heading's anchor there, as mkdocs makes it).
``linked`` puts the link on the last line exactly once: a message that already holds a link (an
error re-raised inside another, a message made from another error's text) keeps its one link,
moved to the end. ``unlinked`` takes links out, for reports that collect errors (``verify``'s
problems) and add one link of their own. Errors of shardtypes' own classes add the link in
``__str__``, so their ``args`` (and so their pickles) hold the message without it.
"""

from __future__ import annotations

import re
from typing import NamedTuple

__all__ = ["DOCS_URL", "DocLink", "SHAPE_STRING", "CHECK_FAILED", "FIELD_FAILED", "COMPILE_TIME", "MALFORMED",
           "AXIS_RULES", "KERNEL_PASS", "KERNEL_OPS", "INVARIANT_GATHER", "VERIFY_PROBLEMS", "MESH_MISMATCH",
           "FAMILIES", "linked", "unlinked", "link_of"]

# The docs site (mkdocs.yml's site_url): the one place its address is written in the package.
DOCS_URL = "https://shardtypes.github.io/shardtypes/"


class DocLink(NamedTuple):
    """A docs section: ``page`` is a file of docs/ without ``.md``, ``anchor`` a heading's id there."""

    page: str
    anchor: str

    @property
    def url(self) -> str:
        return f"{DOCS_URL}{self.page}/#{self.anchor}"

    @property
    def line(self) -> str:
        """The last line of a message: ``See <url>``."""
        return f"See {self.url}"


# One per family of errors (tests/package/test_error_docs.py holds each to its heading).
SHAPE_STRING = DocLink("annotation-language", "shapespecerror")  # ShapeSpecError; DimError inside it
CHECK_FAILED = DocLink("checking", "reading-an-error-message")  # a value failed its annotation
FIELD_FAILED = DocLink("trees", "checked-field-by-field")  # FieldError: a dataclass field failed
AXIS_RULES = DocLink("rules", "axisruleserror")  # AxisRulesError: rules that cannot place a dim
KERNEL_PASS = DocLink("shard-map", "layouts-follow-values-through-a-kernel")  # the kernel pass's refusals
KERNEL_OPS = DocLink("shard-map", "errors")  # an operand or result of shardtypes.ops against its spec
INVARIANT_GATHER = DocLink("shard-map", "returning-a-gathered-value-invarianttrue")  # a gather's varying types
COMPILE_TIME = DocLink("checking", "jaxjit-on-auto-axes")  # the sharding XLA chose on Auto axes
MALFORMED = DocLink("annotation-language", "static-type-checkers-f32jaxarray-b")  # x: f32, bare
VERIFY_PROBLEMS = DocLink("verify", "problems")  # VerificationError: verify found problems
MESH_MISMATCH = DocLink("same-numbers", "reading-a-meshmismatch")  # shardtypes.testing.MeshMismatch

FAMILIES = {"SHAPE_STRING": SHAPE_STRING, "CHECK_FAILED": CHECK_FAILED, "FIELD_FAILED": FIELD_FAILED,
            "AXIS_RULES": AXIS_RULES, "KERNEL_PASS": KERNEL_PASS, "KERNEL_OPS": KERNEL_OPS,
            "INVARIANT_GATHER": INVARIANT_GATHER, "COMPILE_TIME": COMPILE_TIME, "MALFORMED": MALFORMED,
            "VERIFY_PROBLEMS": VERIFY_PROBLEMS, "MESH_MISMATCH": MESH_MISMATCH}

# A link line as ``linked`` writes it, with the line break before it (or the space, where a
# message was flattened onto one line).
_LINE = re.compile(r"[ \t]*\n?[ \t]*See " + re.escape(DOCS_URL) + r"[\w./#-]*")


def link_of(message: str) -> str | None:
    """The first link line in ``message`` (``See <url>``), or None."""
    m = _LINE.search(message)
    return m.group().strip() if m else None


def unlinked(message: str) -> str:
    """``message`` without its link lines."""
    return _LINE.sub("", message)


def linked(message: str, link: DocLink) -> str:
    """``message`` with one link as its last line: the link already in it where there is one (the
    error that said it first knows best which section explains it), else ``link``."""
    line = link_of(message) or link.line
    return f"{unlinked(message)}\n{line}"
