"""Mapping of recurrent layers (GRU, LSTM) onto the AI Engine array: planner and latency model.

``plan_recurrent`` gives the most parallel legal mapping for some options, ``choose_mapping`` the
one a target picks with the Pareto front, ``estimate_recurrent`` the per-step latency, its
breakdown, the interval and the sequence latency.  Kernels, graph and PL code for these mappings
are not generated yet (docs/recurrent.md, "Mapping and latency model").
"""

from __future__ import annotations

from .model import (
    PARTS,
    RecurrentPerformance,
    estimate_closed,
    estimate_recurrent,
    step_pipeline,
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

__all__ = [
    "PARTS",
    "MatvecMapping",
    "RecurrentDims",
    "RecurrentExploration",
    "RecurrentMapping",
    "RecurrentOptions",
    "RecurrentPerformance",
    "RecurrentPoint",
    "choose_mapping",
    "costed_points",
    "dims_of",
    "estimate_closed",
    "estimate_recurrent",
    "legal_mappings",
    "plan_recurrent",
    "step_pipeline",
    "step_stages",
    "violations",
]
