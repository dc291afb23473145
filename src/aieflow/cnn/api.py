"""``aieflow.compile`` for graphs with convolutions: import and quantise as usual, then the CNN
mapping (:mod:`aieflow.cnn.directives`) instead of the Dense planner."""

from __future__ import annotations

from collections.abc import Callable

from ..ir import Graph
from ..pipeline import State, run_pipeline
from .design import CnnDesign
from .directives import make_plan
from .stages import lower

CNN_OPS = ("conv2d",)


def is_cnn(graph: Graph) -> bool:
    """Whether the (front end's) graph has a convolution (then the CNN mapping compiles it)."""
    return any(n.op in CNN_OPS for n in graph.nodes)


def compile_cnn(state: State, progress: Callable[[str], None] | None = None) -> CnnDesign:
    state = run_pipeline(state, progress, stop_after="quantise")
    if progress:
        progress("cnn: lower, plan, estimate, emit")
    stages = lower(state.graph)
    plan = make_plan(state.device, stages, state.config)
    return CnnDesign(state.graph, state.device, state.config, plan, state.source)
