"""Layer 8, tools: what a user runs on a whole model rather than on one call.

``verify`` (a training step traced on an abstract mesh of thousands of devices, every problem
collected), ``plan`` (the layout and bytes per device of every array), their reports, and the
``shardtypes`` command line.

May import: every layer below.
Offers: ``verify``, ``plan``, their reports and their HTML pages (``plan_html``), and ``main`` (the command line).
"""

from .cli import main as main
from .memory_plan import (
    PlanReport as PlanReport,
    PlanRow as PlanRow,
    plan as plan,
    plan_html as plan_html,
)
from .verification import (
    Problem as Problem,
    VerificationError as VerificationError,
    VerifyReport as VerifyReport,
    verify as verify,
)

__all__ = [
    "PlanReport",
    "PlanRow",
    "Problem",
    "VerificationError",
    "VerifyReport",
    "main",
    "plan",
    "verify",
]
