"""``aieflow.compile`` for graphs with convolutions: import and quantise as usual, then the CNN
mapping (:mod:`aieflow.cnn.directives`) instead of the Dense planner."""

from __future__ import annotations

import logging
from collections.abc import Callable

from ..kinds import CNN_OPS, is_cnn
from ..mapped.transport import check as check_transport
from ..pipeline import State, run_pipeline
from .design import CnnDesign, lowered_graph
from .directives import make_plan
from .stages import lower

__all__ = ["CNN_OPS", "compile_cnn", "is_cnn"]

log = logging.getLogger(__name__)


def compile_cnn(state: State, progress: Callable[[str], None] | None = None) -> CnnDesign:
    state = run_pipeline(state, progress, stop_after="quantise")
    if progress:
        progress("lower")
    stages = lower(state.graph)
    log.debug("cnn: %d stages: %s", len(stages), ", ".join(f"{s.name} ({s.kind})" for s in stages))
    if progress:
        progress("search" if state.config.searched else "plan")
    plan = make_plan(state.device, stages, state.config)
    log.debug("cnn %s mapping: %d tiles, %d replica(s); %s", plan.mapping, plan.tiles, plan.replicas,
              ", ".join(_layer(lay) for lay in plan.layers))
    if progress:
        progress("check")
    # the check pass (mapped/transport.py) on the graph the project's graph.h is written from
    report = check_transport(lowered_graph(plan)[0], state.device)
    for line in report.word_problems:
        log.info("cnn transport: %s", line)
    if progress:
        progress("emit")
    design = CnnDesign(state.graph, state.device, state.config, plan, state.source,
                       example_input=_example(state, plan.replicas))
    log.debug("cnn: emitted %d project files", len(design.files))
    return design


def _example(state: State, replicas: int):
    """The frames written into the project's data/: all of the example input (``compile --input``),
    else two graph iterations of the calibration data, else None (verification frames)."""
    if state.example_input is not None:
        return state.example_input
    if state.calibration is not None:
        return state.calibration[: 2 * replicas]
    return None


def _layer(lay) -> str:
    """One layer of a CNN plan for the log: the stream mapping's rectangle, the thesis's kernels."""
    if hasattr(lay, "cas_len"):
        return f"{lay.stage} {lay.cas_num}x{lay.cas_len}"
    return f"{lay.stage} {lay.kernels} kernels"
