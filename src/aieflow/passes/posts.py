"""Fused or standalone: where an activation / softmax right after a Dense layer runs.

A chain of Dense layers whose activation or softmax follows a Dense layer (``ops/post.py``) has
two mappings:

- **fused** (the chain): the post runs in the Dense layer's storing tiles; no tile, memory-tile
  hop or PLIO is added; a softmax's Dense keeps one cascade row.  It is the only mapping on AIE1
  (no memory tiles) and the one with the fewest tiles and, at small batches, the lowest latency.
- **standalone** (the DAG mapping, ``aieflow.dag``): the post is its own kernel behind a memory
  tile, pipelined with the Dense layers; at larger batches on AIE-ML its interval can be the
  lower one (the Dense tile no longer spends its time on the post).

The config's ``posts`` key chooses: ``fused``, ``standalone``, or ``auto`` (the default): without
a target, fused (the planner's own design, fewest tiles); with a target (or a searched batch) on a
device with memory tiles, both mappings are searched and the target ranks their picks
(``passes.search.ranked``; a tie keeps the fused one).  ``aieflow.explore`` lists the points of
both, each with its ``posts``, and picks what ``compile`` builds (``choose`` is the one place the
choice is made for both).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from ..config import Config
from ..devices import Device
from ..errors import ConfigError, PlanError
from ..ir import Graph
from ..ops.post import is_fused_post
from .search import Point, ranked


def has_posts(graph: Graph) -> bool:
    """Whether some activation / softmax of ``graph`` can run in the Dense kernel before it."""
    return any(is_fused_post(graph, n) for n in graph.nodes)


def fixed_mapping(graph: Graph, device: Device, config: Config) -> str | None:
    """The mapping that needs no search: "fused" or "standalone"; None when ``auto`` has to search
    both.  A ``posts`` setting that has nothing to act on is refused by name."""
    mode = config.posts
    if not has_posts(graph):
        if "posts" in config.given and mode != "auto":
            raise ConfigError(f"config option 'posts: {mode}': the model has no activation or softmax right after a "
                              "Dense layer (the only nodes it places)", hint="leave posts out")
        return "fused"
    if mode != "auto":
        return mode
    # the DAG mapping needs memory tiles and takes no copies; no target: fewest tiles
    return None if explores_both(graph, device, config) and config.searched else "fused"


@dataclass(frozen=True)
class Choice:
    mapping: str  # "fused" | "standalone"
    chain: Any = None  # pipeline.State after the chain's search (when it was searched)
    dag: Any = None  # dag.search.DagSearch (when it was searched)


def pick(chain: Point | None, dag: Point | None, config: Config) -> str:
    """The target's pick between the chain's and the DAG's own picks (either may be None: no
    design meets the target); ties keep the fused chain."""
    points = [p for p in (chain, dag) if p is not None]
    best = ranked(tuple(points), config.target)[0]
    return "fused" if best is chain else "standalone"


def choose(state: Any, progress: Any = None) -> Choice:
    """Search both mappings for ``state``'s target (``auto`` with a target) and keep the search
    results, so the compile that follows does not search again.  When neither has a design for
    the target, "fused": the chain's compile then says why (or streams the weights from DDR)."""
    fixed = fixed_mapping(state.graph, state.device, state.config)
    if fixed is not None:
        return Choice(fixed)
    from ..dag.search import search_dag  # only here: a chain without posts imports no DAG code
    from ..pipeline import run_pipeline

    chain = dag = None
    try:
        chain = run_pipeline(state, progress, stop_after="search")
    except PlanError:
        pass
    try:
        dag = search_dag(state.graph, state.device, state.config)
    except PlanError:
        pass
    if chain is None and dag is None:
        return Choice("fused")
    dag_pick = None if dag is None else next(p for p in dag.points if p.batch == dag.plan.batch)
    chain_pick = None if chain is None else chain.exploration.chosen
    return Choice(pick(chain_pick, dag_pick, state.config), chain, dag)


def explores_both(graph: Graph, device: Device, config: Config) -> bool:
    """Whether ``explore`` lists both mappings' points (``auto`` on a device the DAG maps onto;
    without a target it still picks the fused design, as ``compile`` does)."""
    return (config.posts == "auto" and has_posts(graph) and device.memory_tile_rows > 0
            and (config.replicas or 1) == 1)


def merged(chain_ex: Any, dag_ex: Any, config: Config, mapping: str | None) -> Any:
    """``explore`` over both mappings: the front of their points together (each point with its
    ``posts``), the pick what ``compile`` makes for ``config`` (``mapping``: ``fixed_mapping``'s
    answer, None when the target ranks the two picks).  Either exploration may be None (no design
    of that mapping meets the target)."""
    from ..pareto import undominated

    fused = [] if chain_ex is None else [replace(p, posts="fused") for p in chain_ex.front]
    alone = [] if dag_ex is None else [replace(p, posts="standalone") for p in dag_ex.front]
    key = lambda p: (p.tiles, p.latency_ns, p.sample_interval_ns)  # noqa: E731
    front = tuple(undominated(fused + alone, key))
    mapping = mapping or pick(chain_ex and chain_ex.chosen, dag_ex and dag_ex.chosen, config)
    chosen = replace(chain_ex.chosen if mapping == "fused" else dag_ex.chosen, posts=mapping)
    both = [ex for ex in (chain_ex, dag_ex) if ex is not None]
    return replace(both[0], front=front, chosen=chosen, candidates=sum(ex.candidates for ex in both),
                   batches=tuple(sorted({b for ex in both for b in ex.batches})))
