"""``aieflow.compile`` for graphs with convolutions: import and quantise as usual, then the CNN
mapping (:mod:`aieflow.cnn.directives`) instead of the Dense planner."""

from __future__ import annotations

from collections.abc import Callable

from ..kinds import CNN_OPS, is_cnn
from ..pipeline import State, run_pipeline
from .design import CnnDesign
from .directives import make_plan
from .stages import lower

__all__ = ["CNN_OPS", "compile_cnn", "is_cnn"]


def compile_cnn(state: State, progress: Callable[[str], None] | None = None) -> CnnDesign:
    state = run_pipeline(state, progress, stop_after="quantise")
    if progress:
        progress("cnn: lower, plan, estimate, emit")
    stages = lower(state.graph)
    plan = make_plan(state.device, stages, state.config)
    return CnnDesign(state.graph, state.device, state.config, plan, state.source)
