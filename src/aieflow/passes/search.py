"""Design-space search: choose every layer's parallelism for the user's target with the
performance model.

For each layer it enumerates the legal (cas_len, cas_num) rectangles (the Dense planner says
which fit a tile's memory), costs each in closed form (``perf.estimate_plan``), and combines the
layers with a dynamic programme that keeps, after each layer, only the plans not dominated in
(tiles, latency, interval).  Latency adds up along the chain; the interval is the slowest layer's.
On AIE1 a layer's cas_len is fixed by its producer's cas_num (direct buffers), so the programme's
state is the previous layer's cas_num; on AIE-ML memory tiles decouple the layers.

The result is the Pareto front over (tiles, latency, interval) and the point the target picks;
the chosen parallelism becomes per-layer config overrides that the normal plan pass then applies
(and validates), so a searched design is planned exactly like a hand-configured one.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, replace
from typing import Any

from ..config import Config, LayerConfig, Target, parse_target
from ..devices import Device
from ..errors import AieflowError, PlanError
from ..ir import Graph, Node, frozen_map
from ..ops.base import PlanContext
from ..ops.dense import DenseLayout, with_out_panel
from ..ops.registry import family
from ..perf import estimate_plan


@dataclass(frozen=True)
class Point:
    tiles: int
    latency_ns: float  # closed-form sum of the layers' latencies (the design estimate simulates)
    interval_ns: float  # slowest layer
    parallelism: tuple[tuple[str, int, int], ...]  # (layer, cas_len, cas_num) in graph order

    @staticmethod
    def from_json(d: dict[str, Any]) -> Point:
        par = tuple((name, v["cas_len"], v["cas_num"]) for name, v in d["parallelism"].items())
        return Point(d["tiles"], d["latency_ns"], d["interval_ns"], par)

    def to_json(self) -> dict[str, Any]:
        return {
            "tiles": self.tiles,
            "latency_ns": self.latency_ns,
            "interval_ns": self.interval_ns,
            "parallelism": {name: {"cas_len": cl, "cas_num": cn} for name, cl, cn in self.parallelism},
        }


@dataclass(frozen=True)
class Exploration:
    target: Target
    front: tuple[Point, ...]  # Pareto-optimal plans, fewest tiles first
    chosen: Point
    candidates: int  # layer plans costed

    @staticmethod
    def from_json(d: dict[str, Any]) -> Exploration:
        front = tuple(Point.from_json(p) for p in d["pareto_front"])
        return Exploration(parse_target(d["target"]), front, Point.from_json(d["chosen"]), d["candidates_costed"])

    def to_json(self) -> dict[str, Any]:
        return {
            "target": self.target.to_string(),
            "candidates_costed": self.candidates,
            "chosen": self.chosen.to_json(),
            "pareto_front": [p.to_json() for p in self.front],
        }


@dataclass(frozen=True)
class _Option:
    cas_len: int
    cas_num: int
    tiles: int
    latency_ns: float
    interval_ns: float
    layout: DenseLayout


def _dense(graph: Graph) -> list[Node]:
    return [n for n in graph.nodes if n.op == "dense"]


def _options(
    node: Node, device: Device, config: Config, layout: DenseLayout | None, last: bool, out_panel: int
) -> list[_Option]:
    """Every legal rectangle for ``node`` (the user's fixed values kept), costed."""
    fam = family(node.op, node.name)
    user = config.layer(node.name, *node.aliases)
    gen = device.generation
    m, kk, nn = gen.mmul_shapes[node.types.pair]
    k_total, n_total = int(node.attrs["in_features"]), int(node.attrs["out_features"])
    direct = device.memory_tile_rows == 0 and layout is not None
    lens = [layout.parts] if direct else ([user.cas_len] if user.cas_len else range(1, min(device.columns, -(-k_total // kk)) + 1))
    nums = [user.cas_num] if user.cas_num else range(1, min(device.rows, -(-n_total // nn)) + 1)
    out = []
    for cl in lens:
        for cn in nums:
            lc = replace(user, cas_len=cl, cas_num=cn)
            ctx = PlanContext(device, config, lc, None, layout, 1)
            try:
                planned = fam.plan(node, ctx)
            except AieflowError:
                continue
            planned = with_out_panel(planned, out_panel)  # as the plan pass will set it
            p = planned.plan
            est = estimate_plan(planned, device, output="plio" if last else None)
            out.append(_Option(cl, cn, p.tiles, est.latency_ns, est.interval_ns, p.output_layout))
    return out


def _prune(items: list[tuple], key) -> list[tuple]:
    """Keep the items whose (tiles, latency, interval) no other item beats or equals everywhere.

    Sorted by tiles, an item survives when no earlier survivor has both a latency and an interval
    at most its own; the earlier survivors' (latency, interval) minima form a staircase (latency
    ascending, interval descending) searched by bisection, so this is O(n log n) in practice.
    """
    items = sorted(items, key=key)
    lats: list[float] = []  # staircase: latency ascending
    ivs: list[float] = []  # interval descending along it
    kept: list[tuple] = []
    for it in items:
        _, lat, iv = key(it)
        j = bisect.bisect_right(lats, lat)
        if j and ivs[j - 1] <= iv:
            continue  # an item with fewer-or-equal tiles is at least as good on both
        kept.append(it)
        # drop staircase points this one dominates (latency >= lat and interval >= iv)
        k = j
        while k < len(lats) and ivs[k] >= iv:
            k += 1
        lats[j:k] = [lat]
        ivs[j:k] = [iv]
    return kept


def explore(graph: Graph, device: Device, config: Config, fits=None) -> Exploration:
    """``fits(config) -> bool`` rejects plans that cannot be placed (tried best first)."""
    layers = _dense(graph)
    if not layers:
        raise PlanError("the model has no dense layer to plan")
    # state -> partial solutions (tiles, latency, interval, choices); state = previous cas_num
    # (and its layout) on AIE1, nothing on AIE-ML.
    states: dict[Any, list[tuple]] = {None: [(0, 0.0, 0.0, ())]}
    layouts: dict[Any, DenseLayout | None] = {None: None}
    costed = 0
    for i, node in enumerate(layers):
        last = i == len(layers) - 1
        # the output panel the plan pass will give this layer: mmul N, or on AIE1 the next layer's K
        if last or device.memory_tile_rows:
            panel = device.generation.mmul_shapes[node.types.pair][2]
        else:
            panel = device.generation.mmul_shapes[layers[i + 1].types.pair][1]
        nxt: dict[Any, list[tuple]] = {}
        nxt_layouts: dict[Any, DenseLayout | None] = {}
        for state, partials in states.items():
            opts = _options(node, device, config, layouts[state], last, panel)
            costed += len(opts)
            for o in opts:
                key = (o.cas_num, o.layout.slice) if device.memory_tile_rows == 0 else None
                nxt_layouts[key] = o.layout if device.memory_tile_rows == 0 else None
                bucket = nxt.setdefault(key, [])
                for t, lat, iv, ch in partials:
                    tiles = t + o.tiles
                    if tiles > device.compute_tiles:
                        continue
                    bucket.append((tiles, lat + o.latency_ns, max(iv, o.interval_ns), (*ch, (node.name, o.cas_len, o.cas_num))))
        states = {k: _prune(v, lambda it: it[:3]) for k, v in nxt.items() if v}
        layouts = nxt_layouts
        if not states:
            raise PlanError(
                f"no parallelism of layer '{node.name}' fits {device.board} together with the layers before it",
                layer=node.name,
                hint="use a smaller batch or a narrower precision",
            )
    finals = _prune([it for v in states.values() for it in v], lambda it: it[:3])
    front = tuple(Point(t, lat, iv, ch) for t, lat, iv, ch in sorted(finals, key=lambda it: it[:3]))
    for point in ranked(front, config.target):
        if fits is None or fits(apply(config, point, graph)):
            return Exploration(config.target, front, point, costed)
    raise PlanError(
        f"none of the {len(front)} Pareto-optimal plans for target '{config.target.to_string()}' can be placed "
        f"on the {device.columns} x {device.rows} array",
        hint="relax the target or reduce the batch",
    )


def ranked(front: tuple[Point, ...], target: Target) -> list[Point]:
    """The plans meeting the target's budgets, best first."""
    ok = [
        p
        for p in front
        if (target.max_tiles is None or p.tiles <= target.max_tiles)
        and (target.max_latency_ns is None or p.latency_ns <= target.max_latency_ns)
        and (target.max_interval_ns is None or p.interval_ns <= target.max_interval_ns)
    ]
    if not ok:
        best_lat = min(front, key=lambda p: (p.latency_ns, p.tiles))
        best_iv = min(front, key=lambda p: (p.interval_ns, p.tiles))
        raise PlanError(
            f"no plan meets the target '{target.to_string()}': the lowest modelled latency is "
            f"{best_lat.latency_ns:.0f} ns ({best_lat.tiles} tiles), the lowest interval "
            f"{best_iv.interval_ns:.0f} ns ({best_iv.tiles} tiles), the fewest tiles {front[0].tiles}",
            hint="relax the budget, reduce the batch, or use `aieflow explore` to see the trade-offs",
        )
    order = {
        "latency": lambda p: (p.latency_ns, p.tiles, p.interval_ns),
        "throughput": lambda p: (p.interval_ns, p.tiles, p.latency_ns),
        "resources": lambda p: (p.tiles, p.latency_ns, p.interval_ns),
    }[target.objective]
    return sorted(ok, key=order)


def apply(config: Config, point: Point, graph: Graph) -> Config:
    """The config with the chosen parallelism as per-layer overrides (user entries kept, under
    whichever name the user gave the layer)."""
    layers = dict(config.layers)
    for name, cl, cn in point.parallelism:
        node = graph.node(name)
        key = next((k for k in (node.name, *node.aliases) if k in layers), node.name)
        layers[key] = replace(layers.get(key, LayerConfig()), cas_len=cl, cas_num=cn)
    return replace(config, layers=frozen_map(layers))
