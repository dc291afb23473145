"""The target / batch search of DAG designs.

What it chooses is the batch (samples per graph iteration), so a target with no ``batch`` in the
config searches the ``auto`` batches (``targeted_batches``: the objective would have nothing to
choose at the default batch); a batch the user fixes is the only candidate.  Every candidate batch is planned
(``plan.plan_dag``: each Dense node the planner's parallelism for that batch, or the config's),
placed and estimated as compiled (``api.place_dag``, ``perf.estimate_dag``), and ``passes.search.ranked`` picks by the
target as for chains: fewest tiles, lowest latency, lowest interval per sample, within any budgets.
A batch whose design is illegal (rows the memory-tile tilers cannot cut, memory, tiles) is left
out; the error names the first reason when none is legal.  Per-layer parallelism is not searched
(fix it per layer with ``parallelism`` when a target needs more).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ..config import MAX_AUTO_BATCH, Config, Target
from ..devices import Device
from ..errors import PlanError
from ..ir import Graph
from ..mapped.transport import check as check_transport
from ..pareto import undominated
from ..passes.search import Exploration, Point, ranked
from ..progress import track
from .perf import estimate_dag, lowered_dag
from .plan import DagPlan, check_dag_device, default_batch, plan_dag


@dataclass(frozen=True)
class DagSearch:
    plan: DagPlan
    config: Config  # the user's, with the chosen batch fixed (``batch_search`` cleared)
    points: tuple[Point, ...]  # every legal candidate, for the summary / design.json


def batch_candidates(config: Config) -> tuple[int, ...]:
    """The config's batch list, or for ``auto`` the powers of two up to ``MAX_AUTO_BATCH`` (the
    DAG's row constraint leaves the small ones out per model), or its fixed batch."""
    if config.batch_search is None:
        return (config.batch,)
    if config.batch_search != "auto":
        return tuple(config.batch_search)
    out, b = [], 1
    while b <= MAX_AUTO_BATCH:
        out.append(b)
        b *= 2
    return tuple(out)


def targeted_batches(config: Config) -> Config:
    """The config whose batch the search may choose: with a target and no ``batch`` written, the
    ``auto`` batches (the batch is all a DAG search chooses: without this the objective would pick
    among one candidate); a written batch, list or ``auto`` stays as it is."""
    if config.targeted and config.batch_search is None and "batch" not in config.given:
        return replace(config, batch_search="auto")
    return config


def search_dag(graph: Graph, device: Device, config: Config) -> DagSearch:
    from .api import place_dag

    check_dag_device(device, config, graph)
    config = targeted_batches(config)
    fixed = replace(config, target=Target(), batch_search=None)
    points, plans, first_error = [], {}, None
    for b in track(batch_candidates(config), "cost the DAG batch candidates"):
        try:
            plan = plan_dag(graph, device, replace(fixed, batch=b))
            placement = place_dag(plan, device, fixed)
            check_transport(lowered_dag(plan, placement, device), device)  # the check pass, as compiled
        except PlanError as e:
            first_error = first_error or (b, e)
            continue
        perf = estimate_dag(plan, device, placement)  # as compiled: placed
        par = tuple((n.name, n.plan.cas_len, n.plan.cas_num) for n in plan.graph.nodes if n.op == "dense")
        points.append(Point(perf.tiles_used, perf.latency_ns, perf.interval_ns, par, b))
        plans[b] = plan
    if not points:
        b, e = first_error
        raise PlanError(f"no candidate batch gives a legal DAG design (batch {b}: {e.message})",
                        layer=e.layer, hint=e.hint or "give other batch sizes")
    try:
        best = ranked(tuple(points), config.target)[0]
    except PlanError as e:  # name the design and what was searched, as the target's refusal
        batches = ", ".join(str(p.batch) for p in points)
        raise PlanError(f"DAG design '{graph.name}' (batches {batches} costed): {e.message}", hint=e.hint) from None
    return DagSearch(plans[best.batch], replace(config, batch=best.batch, batch_search=None), tuple(points))


def explore_dag(graph: Graph, device: Device, config: Config) -> Exploration:
    """``aieflow explore`` for a DAG: the batch is what the search chooses, so the front is over the
    config's batch list, or every ``auto`` batch (and the config's) when the config fixes one; the
    pick is what ``compile`` builds for the config (a fixed batch: that batch; no batch given: the
    target's pick of the ``auto`` batches, or without a target the batch compile settles on,
    ``plan.default_batch``)."""
    config = targeted_batches(default_batch(graph, device, config))
    wide = config
    if config.batch_search is None:
        auto = batch_candidates(replace(config, batch_search="auto"))
        wide = replace(config, batch_search=tuple(sorted({*auto, config.batch})))
    found = search_dag(graph, device, wide)
    key = lambda p: (p.tiles, p.latency_ns, p.sample_interval_ns)  # noqa: E731
    front = tuple(undominated(list(found.points), key))
    # the pick is compile's: with a fixed batch, that batch's design (within the target's budgets)
    own = found if wide is config else search_dag(graph, device, config)
    chosen = next(p for p in own.points if p.batch == own.plan.batch)
    return Exploration(config.target, front, chosen, len(found.points), tuple(p.batch for p in found.points))
