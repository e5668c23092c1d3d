"""Layer 8, tools: what a user runs on a whole model rather than on one call.

``verify`` (a training step traced on an abstract mesh of thousands of devices, every problem
collected), ``plan`` (the layout and bytes per device of every array), their reports, and the
``shardtypes`` command line.

May import: every layer below.
"""

from .activations import ActivationEstimate as ActivationEstimate
from .chips import StepTime as StepTime
from .cli import main as main
from .memory_plan import (
    PlanReport as PlanReport,
    PlanRow as PlanRow,
    plan as plan,
    plan_html as plan_html,
)
from .search import SearchReport as SearchReport, search as search
from .step_cost import Collective as Collective, Communication as Communication, StepCost as StepCost
from .verification import (
    Problem as Problem,
    VerificationError as VerificationError,
    VerifyReport as VerifyReport,
    verify as verify,
)

__all__ = [
    "ActivationEstimate",
    "Collective",
    "Communication",
    "PlanReport",
    "PlanRow",
    "Problem",
    "VerificationError",
    "SearchReport",
    "StepCost",
    "StepTime",
    "VerifyReport",
    "main",
    "plan",
    "search",
    "verify",
]

# What the layer offers the layers above, in its docstring, made from __all__ so that it cannot go stale.
__doc__ = f"{__doc__ or ''}\nOffers the layers above: {', '.join(__all__)}.\n"
