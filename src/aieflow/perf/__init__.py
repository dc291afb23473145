"""Performance model: kernel cycles, data movement, pipeline simulation, and their summary.

``estimate(design)`` is the entry point; ``estimate_plan(node, device)`` costs one layer's plan;
``docs/performance.md`` explains every term and ``docs/validation.md`` its errors against the
published figures.
"""

from __future__ import annotations

from .estimate import (
    Performance,
    PlanEstimate,
    StagePerformance,
    estimate,
    estimate_plan,
)
from .kernel import KernelCycles, KernelShape, dense_kernel_cycles
from .simulate import Pipeline, SimResult, StageSpec, run_pipeline, simulate

__all__ = [
    "KernelCycles",
    "KernelShape",
    "Performance",
    "Pipeline",
    "PlanEstimate",
    "SimResult",
    "StagePerformance",
    "StageSpec",
    "dense_kernel_cycles",
    "estimate",
    "estimate_plan",
    "run_pipeline",
    "simulate",
]
