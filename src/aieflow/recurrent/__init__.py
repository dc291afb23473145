"""Mapping of recurrent layers (GRU, LSTM) onto the AI Engine array: planner and latency model.

``plan_recurrent`` gives the most parallel legal mapping for some options, ``choose_mapping`` the
one a target picks with the Pareto front, ``estimate_recurrent`` the per-step latency, its
breakdown, the interval and the sequence latency; ``plan_stack`` / ``choose_stack`` /
``estimate_stack`` do the same for stacked layers.  ``design.compile_recurrent`` emits the
project (row-wise and column-wise cascade kernels, AIE or PL aggregation; docs/recurrent.md).
"""

from __future__ import annotations

from .model import (
    PARTS,
    RecurrentPerformance,
    estimate_closed,
    estimate_recurrent,
    step_stages,
)
from .plan import (
    MatvecMapping,
    RecurrentDims,
    RecurrentMapping,
    RecurrentOptions,
    dims_of,
    legal_mappings,
    plan_recurrent,
    violations,
)
from .select import RecurrentExploration, RecurrentPoint, choose_mapping, costed_points
from .stack import (
    StackedExploration,
    StackedMapping,
    StackedPerformance,
    choose_stack,
    estimate_stack,
    plan_stack,
    stack_violations,
)

__all__ = [
    "PARTS",
    "MatvecMapping",
    "RecurrentDims",
    "RecurrentExploration",
    "RecurrentMapping",
    "RecurrentOptions",
    "RecurrentPerformance",
    "RecurrentPoint",
    "StackedExploration",
    "StackedMapping",
    "StackedPerformance",
    "choose_mapping",
    "choose_stack",
    "costed_points",
    "dims_of",
    "estimate_closed",
    "estimate_recurrent",
    "estimate_stack",
    "legal_mappings",
    "plan_recurrent",
    "plan_stack",
    "stack_violations",
    "step_stages",
    "violations",
]
