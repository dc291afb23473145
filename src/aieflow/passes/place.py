"""The Dense chain's placement: its layers as kernel groups of the one placer (``mapped/place.py``).

The chain is lowered once unplaced (``mapped.place.staging``: the layers side by side) into the
mapped graph, whose kernels and links give the placement problem (``mapped.place.problem``); the
user's per-layer ``placement`` coordinates and the keep-out tiles are its constraints, and
``mapped.place.solve`` places it.  The types stay importable from here for the modules that read
placements (``Placement``, ``Rect``, ...).
"""

from __future__ import annotations

from collections.abc import Iterable

from ..config import Config
from ..devices import Device
from ..ir import Graph, Node
from ..mapped.place import (
    METHODS,
    NODE_BUDGET,
    Block,
    Cell,
    Grid,
    Packing,
    Placement,
    Problem,
    Rect,
    Weights,
    check_placement,
    pack,
    problem,
    rects_cost,
    replica_offsets,
    replicate,
    solve,
    staging,
)

__all__ = [
    "METHODS", "Block", "Grid", "Packing", "Placement", "Rect", "Weights", "chain_problem", "check_placement",
    "layer_edges", "pack", "place", "rects_cost", "replica_offsets", "replicate",
]


def layer_edges(graph: Graph) -> tuple[tuple[str, str], ...]:
    """Producer -> consumer pairs of planned layers, looking through views (reshape): the arrows
    of the placement picture and the edges of a saved placement's recomputed cost."""
    producer = {t: n for n in graph.nodes for t in n.outputs}
    edges = []
    for n in graph.nodes:
        if n.plan is None:
            continue
        for t in n.inputs[:1]:
            src = producer.get(t)
            while src is not None and src.plan is None and src.inputs:
                src = producer.get(src.inputs[0])
            if src is not None and src.plan is not None:
                edges.append((src.name, n.name))
    return tuple(edges)


def _period(node: Node) -> int:
    """Array rows per cascade row of a planned layer (Dense plans with borrowed neighbour memory)."""
    return getattr(node.plan, "period", 1)


def chain_problem(
    graph: Graph, device: Device, config: Config, keep_out: Iterable[Cell] = (), weights: Weights | None = None
) -> Problem:
    """The placement problem of a planned chain: each Dense layer a ``cas_num x cas_len`` group
    (with its lenders' rows), read off the chain lowered unplaced (kept with the graph, so the
    search's placeability checks lower it once)."""
    from ..mapped.cache import memo
    from .emit import dense_layers, lower_chain

    layers = dense_layers(graph)
    shapes = tuple(
        Block(n.name, n.plan.cas_len, n.plan.cas_num * _period(n), config.layer(n.name, *n.aliases).placement,
              _period(n), getattr(n.plan, "kernel_offset", 0))
        for n in layers
    )
    snake = device.generation.cascade_serpentine
    unfixed = tuple(Block(b.name, b.width, b.height, None, b.period, b.offset) for b in shapes)

    def staged():
        at = staging(unfixed, snake)
        return at, lower_chain(graph, device, at, copies=1)

    at, mg = memo(graph, "chain:staged", (device,), staged)
    return problem(mg, shapes, at, device, keep_out, weights)


def place(
    graph: Graph,
    device: Device,
    config: Config,
    method: str = "bnb",
    keep_out: Iterable[Cell] = (),
    weights: Weights | None = None,
    node_budget: int = NODE_BUDGET,
) -> Placement:
    """Place every layer of a planned chain (``config.replicas`` copies); config per-layer
    ``placement`` coordinates are hard constraints."""
    prob = chain_problem(graph, device, config, keep_out, weights)
    return solve(prob, method, config.replicas or 1, node_budget)

