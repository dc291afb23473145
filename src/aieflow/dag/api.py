"""``aieflow.compile`` for graphs that are not chains: import and quantise as usual, then the DAG
mapping (plan, memory-tile links, placement, project) instead of the chain's Dense passes."""

from __future__ import annotations

import logging
from collections.abc import Callable

import numpy as np

from ..kinds import DAG_OPS, is_dag
from ..mapped.place import Block, Placement, Problem, problem, solve, staging
from ..mapped.transport import check as check_transport
from ..numerics.types import FloatType
from ..pipeline import State, run_pipeline
from .design import DagDesign
from .emit import emit_dag
from .perf import lowered_dag
from .plan import DagPlan, default_batch, plan_dag
from .search import DagSearch, search_dag

__all__ = ["DAG_OPS", "compile_dag", "dag_problem", "is_dag", "place_dag"]

log = logging.getLogger(__name__)


def dag_problem(plan: DagPlan, device, config) -> Problem:
    """The DAG's placement problem: each compute node's kernels a group (a Dense layer's
    ``cas_num x cas_len`` cascade, a rows op's parts side by side), read off the plan lowered
    unplaced (``mapped.place.staging``); the edges are its links (memory-tile shared buffers)."""
    from ..mapped.cache import memo
    from .emit import idents, lower

    shapes = tuple(Block(name, *plan.rect(name), config.layer(name, *plan.node(name).aliases).placement)
                   for name in plan.compute)
    snake = device.generation.cascade_serpentine

    def staged():
        at = staging([Block(b.name, b.width, b.height) for b in shapes], snake)
        return at, lower(plan, at, idents(plan), [], device, costed=False)

    at, mg = memo(plan, "dag:staged", (device,), staged)
    return problem(mg, shapes, at, device)


def place_dag(plan: DagPlan, device, config) -> Placement:
    """Branch-and-bound placement of the DAG's kernel groups by the one placer (``mapped/place.py``)."""
    return solve(dag_problem(plan, device, config))


def compile_dag(state: State, progress: Callable[[str], None] | None = None, found: DagSearch | None = None
                ) -> DagDesign:
    """``found``: the search's result for ``state`` when the caller searched already
    (``passes.posts.choose``)."""
    state = run_pipeline(state, progress, stop_after="quantise")
    config = default_batch(state.graph, state.device, state.config)
    if config.batch != state.config.batch:
        log.info("batch %d (no batch given): the memory-tile tilers of %s cannot cut %d samples' rows; "
                 "set batch to choose another", config.batch, state.device.board, state.config.batch)
    if progress:
        progress("search" if config.searched else "plan")
    if config.searched:
        found = found or search_dag(state.graph, state.device, config)
        plan, config = found.plan, found.config
        log.debug("dag search for target '%s': %d points costed, batch %d chosen", config.target.to_string(),
                  len(found.points), plan.batch)
    else:
        plan = plan_dag(state.graph, state.device, config)
    log.debug("dag plan: batch %d, %d compute nodes (%s)", plan.batch, len(plan.compute), ", ".join(plan.compute))
    if progress:
        progress("place")
    placement = place_dag(plan, state.device, config)
    log.debug("dag placement: %s, wire cost %s%s", placement.method, placement.cost,
              " (optimal)" if placement.optimal else "")
    if progress:
        progress("check")
    # the check pass: the links of the lowered design (which the estimate and emission reuse)
    check_transport(lowered_dag(plan, placement, state.device), state.device)
    if progress:
        progress("emit")
    design = DagDesign(plan, state.device, config, placement, state.source)
    # the user's example input is written whole (``aieflow compile --input``); calibration data, two batches
    if state.example_input is not None:
        xq = _example(design, state.example_input, whole=True)
    else:
        xq = _example(design, state.calibration)
    mq = example_mask(design, xq.shape[0])
    design.files = emit_dag(plan, state.device, placement, xq, design.run(xq, mask=mq), state.graph.name, mq)
    log.debug("dag: emitted %d project files", len(design.files))
    return design


def example_mask(design: DagDesign, samples: int, seed: int = 0) -> np.ndarray | None:
    """Keep bytes of a run-time key padding mask for ``samples`` example samples (a model with one):
    seeded jet-like paddings, sample i keeping its first k_i keys (k_i in 1..T_k), or None."""
    if design.mask_shape is None:
        return None
    t = design.mask_shape[0]
    k = np.random.default_rng(seed).integers(1, t + 1, samples)
    return (np.arange(t)[None, :] < k[:, None]).astype(np.uint8)


def _example(design: DagDesign, x, whole: bool = False) -> np.ndarray:
    """Example inputs for the project's data files: two graph iterations (the first samples of
    ``x``, or seeded random codes) or, ``whole``, every sample of ``x``; zero-padded to whole
    iterations."""
    b = design.plan.batch
    if x is not None:
        xq = design.quantise_input(np.asarray(x))
        xq = xq if whole else xq[: 2 * b]
        n = -(-xq.shape[0] // b) * b
        return np.concatenate([xq, np.zeros((n - xq.shape[0], *xq.shape[1:]), dtype=xq.dtype)])
    t = design.input_type
    rng = np.random.default_rng(0)
    if isinstance(t, FloatType):  # float inputs: seeded values, rounded as the input carries them (bf16)
        return design.quantise_input(rng.standard_normal((2 * b, *design.input_shape)).astype(np.float32))
    return rng.integers(t.min_code, t.max_code + 1, size=(2 * b, *design.input_shape))
