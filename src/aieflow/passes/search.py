"""Design-space search: choose every layer's parallelism for the user's target with the
performance model.

For each layer it enumerates the legal (cas_len, cas_num) rectangles (the Dense planner says
which fit a tile's memory), costs each in closed form (``perf.estimate_plan``), and combines the
layers with a dynamic programme that keeps, after each layer, only the plans not dominated in
(tiles, latency, interval).  Latency adds up along the chain; the interval is the slowest layer's.
On AIE1 a layer's cas_len is fixed by its producer's cas_num (direct buffers), so the programme's
state is the previous layer's cas_num; on AIE-ML memory tiles decouple the layers.

The programme's surviving plans are then re-costed as compiled (``design_points``: planned,
placed and simulated by ``perf.estimate``, the compiled design's own estimate), and the result is
their Pareto front over (tiles, latency, interval) and the point the target picks, so a point
compiles to exactly its figures (one cost model for explore and compile); the chosen parallelism becomes per-layer config overrides that the normal plan pass then applies
(and validates), so a searched design is planned exactly like a hand-configured one.
"""

from __future__ import annotations

import math
import operator
from dataclasses import dataclass, replace
from typing import Any

from ..config import MAX_AUTO_BATCH, Config, LayerConfig, Target, parse_target
from ..devices import Device
from ..errors import AieflowError, PlanError
from ..ir import Graph, Node, frozen_map
from ..ops.base import PlanContext
from ..ops.dense import DenseLayout, with_out_panel
from ..ops.post import fused_post
from ..ops.registry import family
from ..pareto import undominated
from ..perf import estimate_plan
from ..progress import track


@dataclass(frozen=True)
class Point:
    tiles: int
    latency_ns: float  # the compiled design's estimate (perf.estimate: placed and simulated)
    interval_ns: float  # per graph iteration (one batch), the same estimate
    parallelism: tuple[tuple[str, int, int], ...]  # (layer, cas_len, cas_num) in graph order
    batch: int  # samples per graph iteration
    replicas: int = 1  # copies of the design (tiles counts all of them)
    # where a chain's activation / softmax after a Dense layer runs when explore lists both
    # mappings (passes/posts.py): "fused" or "standalone"; "" otherwise
    posts: str = ""
    # a CNN point of the row-streamed mapping (cnn/rows.py: one kernel per layer) when explore lists
    # it beside the stream mapping's points: "rows"; "" the kind's own mapping
    mapping: str = ""

    @property
    def sample_interval_ns(self) -> float:
        """Interval per sample: what throughput compares across batch sizes and replicas."""
        return self.interval_ns / (self.batch * self.replicas)

    @staticmethod
    def from_json(d: dict[str, Any], batch: int) -> Point:
        par = tuple((name, v["cas_len"], v["cas_num"]) for name, v in d["parallelism"].items())
        return Point(d["tiles"], d["latency_ns"], d["interval_ns"], par, d.get("batch", batch), d.get("replicas", 1),
                     d.get("posts", ""), d.get("mapping", ""))

    def to_json(self) -> dict[str, Any]:
        return {
            "tiles": self.tiles,
            "batch": self.batch,
            "replicas": self.replicas,
            "latency_ns": self.latency_ns,
            "interval_ns": self.interval_ns,
            "sample_interval_ns": self.sample_interval_ns,
            "parallelism": {name: {"cas_len": cl, "cas_num": cn} for name, cl, cn in self.parallelism},
            **({"posts": self.posts} if self.posts else {}),
            **({"mapping": self.mapping} if self.mapping else {}),
        }


@dataclass(frozen=True)
class Exploration:
    target: Target
    front: tuple[Point, ...]  # Pareto-optimal over (tiles, latency, interval per sample), fewest tiles first
    chosen: Point
    candidates: int  # layer plans costed
    batches: tuple[int, ...]  # the batch sizes searched (one unless the config's batch is searched)
    # what ``aieflow.explore`` adds for turning a point back into a config (``aieflow.points``):
    # the design kind ("chain", "dag", "cnn") and, per layer a point sets, the names the config
    # may give it (the node's, then its aliases); a CNN lists its convolutions only (the layers
    # that take ``mapping.groups``)
    kind: str = "chain"
    config_names: tuple[tuple[str, ...], ...] = ()

    @staticmethod
    def from_json(d: dict[str, Any], batch: int) -> Exploration:
        """``batch``: the design's batch, for files written before the batch was searched."""
        front = tuple(Point.from_json(p, batch) for p in d["pareto_front"])
        return Exploration(
            parse_target(d["target"]),
            front,
            Point.from_json(d["chosen"], batch),
            d["candidates_costed"],
            tuple(d.get("batches", (batch,))),
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "target": self.target.to_string(),
            "batches": list(self.batches),
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
    node: Node, device: Device, config: Config, layout: DenseLayout | None, last: bool, out_panel: int,
    post: Node | None = None,
) -> list[_Option]:
    """Every legal rectangle for ``node`` (the user's fixed values kept), costed."""
    fam = family(node.op, node.name)
    user = config.layer(node.name, *node.aliases)
    gen = device.generation
    m, kk, nn = gen.mmul_shapes[node.types.pair]
    k_total, n_total = int(node.attrs["in_features"]), int(node.attrs["out_features"])
    direct = device.memory_tile_rows == 0 and layout is not None
    if direct:  # AIE1: the producer's output slices fix cas_len; a user's other cas_len rules this state out
        lens = [layout.parts] if user.cas_len in (None, layout.parts) else []
    else:
        lens = [user.cas_len] if user.cas_len else range(1, min(device.columns, -(-k_total // kk)) + 1)
    nums = [user.cas_num] if user.cas_num else range(1, min(device.rows, -(-n_total // nn)) + 1)
    # a rectangle the config fixes may borrow neighbour memory, as the plan pass lets it
    pinned = (user.cas_len is not None or direct) and user.cas_num is not None
    out = []
    for cl in lens:
        for cn in nums:
            lc = replace(user, cas_len=cl, cas_num=cn)
            ctx = PlanContext(device, config, lc, None, layout, 1, post, neighbour_memory=pinned)
            try:
                planned = fam.plan(node, ctx)
            except AieflowError:
                continue
            planned = with_out_panel(planned, out_panel)  # as the plan pass will set it
            p = planned.plan
            est = estimate_plan(planned, device, output="plio" if last else None)
            out.append(_Option(cl, cn, p.footprint, est.latency_ns, est.interval_ns, p.output_layout))
    return out


def batch_candidates(graph: Graph, device: Device, config: Config) -> tuple[int, ...]:
    """The batch sizes to search: the config's list, or for ``auto`` every power-of-two multiple
    of the smallest batch that fills every layer's 2 x M row blocks (smaller batches are padded to
    it and cost the same), up to ``MAX_AUTO_BATCH``."""
    if config.batch_search is None:
        return (config.batch,)
    if config.batch_search != "auto":
        return tuple(config.batch_search)
    base = math.lcm(*(2 * device.generation.mmul_shapes[n.types.pair][0] for n in _dense(graph)))
    out = []
    b = base
    while b <= max(base, MAX_AUTO_BATCH):
        out.append(b)
        b *= 2
    return tuple(out)


def _front_for_batch(layers: list[Node], device: Device, config: Config,
                     posts: dict[str, Node | None]) -> tuple[list[tuple], int]:
    """Dynamic programme over the layers at ``config.batch``: the Pareto-optimal
    (tiles, latency, interval, choices) and the number of layer plans costed (``posts``: each
    layer's fused activation / softmax)."""
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
            opts = _options(node, device, config, layouts[state], last, panel, posts.get(node.name))
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
        states = {k: undominated(v, lambda it: it[:3]) for k, v in nxt.items() if v}
        layouts = nxt_layouts
        if not states:
            raise PlanError(
                f"no parallelism of layer '{node.name}' fits {device.board} together with the layers before it "
                f"at batch {config.batch}",
                layer=node.name,
                hint="use a smaller batch or a narrower precision",
            )
    return undominated([it for v in states.values() for it in v], lambda it: it[:3]), costed


def explore(graph: Graph, device: Device, config: Config) -> Exploration:
    """The dynamic programme's plans (closed form) re-costed as compiled (``design_points``): the
    front and the pick are over the compiled designs' own estimates, so a point compiles to
    exactly its figures and a budget holds in the design.

    With a searched batch, each batch size gets its own programme; the reported front is then
    Pareto-optimal over (tiles, latency, interval per sample), and the choice is made among every
    batch's own front (so a per-batch ``interval_ns`` budget is still honoured exactly).
    """
    layers = _dense(graph)
    if not layers:
        raise PlanError("the model has no dense layer to plan")
    batches = batch_candidates(graph, device, config)
    posts = {n.name: fused_post(graph, n) for n in layers}
    pool: list[Point] = []
    costed = 0
    failure: PlanError | None = None
    for b in batches:
        try:
            finals, n = _front_for_batch(layers, device, replace(config, batch=b), posts)
        except PlanError as e:
            failure = failure or e
            continue
        costed += n
        pool += [Point(t, lat, iv, ch, b) for t, lat, iv, ch in finals]
    if not pool:
        raise failure
    candidates = _replicated(pool, device, config)
    pool = design_points(candidates, graph, device, config)
    if not pool:
        raise PlanError(
            f"none of the {len(candidates)} Pareto-optimal plans for target '{config.target.to_string()}' can be "
            f"placed on the {device.columns} x {device.rows} array",
            hint="relax the target or reduce the batch",
        )
    key = operator.attrgetter("tiles", "latency_ns", "sample_interval_ns")
    front = tuple(undominated(pool, key))
    chosen = (None if config.searched else _planned_point(graph, device, config)) or ranked(tuple(pool), config.target)[0]
    return Exploration(config.target, front, chosen, costed, batches)


def _planned_point(graph: Graph, device: Device, config: Config) -> Point | None:
    """What ``compile`` builds when the config leaves nothing to search (no target, a fixed batch):
    the planner's own parallelism, as compiled; None when it cannot be planned or placed (then
    the fewest tiles the search finds stand for it)."""
    from .plan import plan

    try:
        g = plan(graph, device, config)
    except PlanError:
        return None
    par = tuple((n.name, n.plan.cas_len, n.plan.cas_num) for n in _dense(g))
    built = design_points([Point(0, 0.0, 0.0, par, config.batch, config.replicas or 1)], graph, device, config)
    return built[0] if built else None


def design_points(points: list[Point], graph: Graph, device: Device, config: Config) -> list[Point]:
    """Each point as ``compile`` builds it: its config (``apply``) planned, placed and estimated by
    the design's own simulation (``perf.estimate``, what the compiled design reports), whose
    tiles, latency and interval replace the closed form's; points that cannot be planned or
    placed are left out.  Copies of a design whose placement leaves room for them run with that
    placement (``place.replicate``: the same latency and interval, tiles times the copies);
    otherwise ``place`` chooses the copies' placement as it does in ``compile``."""
    from ..design import Design
    from ..mapped.transport import check as check_transport
    from ..mapped.transport import shared_demand, shared_demand_fits
    from ..perf import estimate
    from .emit import lower_copy, lowered_chain
    from .place import check_placement, place, replica_offsets, replicate
    from .plan import plan

    def checked(g: Graph, pl) -> bool:
        try:
            check_placement(pl, device)
            check_transport(lowered_chain(g, device, pl), device)  # the check pass, as compiled
        except PlanError:
            return False
        return True

    def build(cfg: Config, g: Graph | None = None, pl=None):
        try:
            g = g if g is not None else plan(graph, device, cfg)
            if pl is None:
                pl = place(g, device, cfg)
        except PlanError:
            return None
        if not checked(g, pl):
            return None
        return g, pl, estimate(Design(g, device, cfg, pl))

    def most_copies(g: Graph, pl, fit: int) -> int:
        """The most copies, up to ``fit``, whose replicated placement passes the checks.  The
        copies of k are the first k of k + 1's (``replicate``: the same offsets in the same
        order), so k + 1 copies use every tile, port and channel k copies use and more: a check
        that fails for k fails for every larger count, and a bisection finds the largest count
        that passes with a few checks instead of one per count (a throughput search on a large
        array costs up to a hundred counts per plan).  The transport check of k copies is read
        off each copy's own check, made once per copy (the copies share no buffer, kernel or
        link: ``transport.shared_demand``), and their summed PLIO, DDR and memory-tile demand."""
        whole = replicate(pl, fit)  # copy j lowers alike in every count above j: its offset and copy 0's rects
        alone: dict[int, tuple[int, ...] | None] = {}  # copy -> its shared demand; None: refused

        def copy_demand(j: int) -> tuple[int, ...] | None:
            if j not in alone:
                mg = lower_copy(g, device, whole, j)
                try:
                    check_transport(mg, device)
                    alone[j] = shared_demand(mg)
                except PlanError:
                    alone[j] = None
            return alone[j]

        def copies_checked(k: int) -> bool:
            try:
                check_placement(replicate(pl, k), device)
            except PlanError:
                return False
            demands = [copy_demand(j) for j in range(k)]
            return None not in demands and shared_demand_fits(tuple(map(sum, zip(*demands, strict=True))), device)

        lo, hi = 1, fit
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if copies_checked(mid):
                lo = mid
            else:
                hi = mid - 1
        return lo

    single: dict[tuple, Any] = {}  # (parallelism, batch) -> (graph, placement, performance) of one copy
    copies: dict[tuple, int] = {}  # (parallelism, batch) -> most_copies of its placement
    out = []
    for p in track(points, "cost the candidate designs as compiled"):
        key = (p.parallelism, p.batch)
        if key not in single:
            single[key] = build(apply(config, replace(p, replicas=1), graph))
        if single[key] is None:
            continue
        g, pl, perf = single[key]
        if p.replicas > 1:
            cfg = apply(config, p, graph)
            fit = len(replica_offsets(pl.rects, pl.columns, pl.rows, pl.snake, pl.keep_out))
            if fit >= p.replicas:  # what ``place`` returns for these copies: the one copy's placement, replicated
                if key not in copies:
                    copies[key] = most_copies(g, pl, fit)
                if p.replicas > copies[key]:
                    continue
                perf = estimate(Design(g, device, cfg, replicate(pl, p.replicas)))
            else:
                built = build(cfg, g)
                if built is None:
                    continue
                perf = built[2]
        out.append(replace(p, tiles=perf.tiles_used, latency_ns=perf.latency_ns, interval_ns=perf.interval_ns))
    return out


def _replicated(pool: list[Point], device: Device, config: Config) -> list[Point]:
    """Points with the replica count the config fixes, or, when it leaves it to the search and
    the objective is throughput, also every count of whole-design copies the tiles allow (each
    copy takes its own batches: same latency and interval, ``k`` times the samples).  Copies must
    also fit the array's shape and interface row; ``fits`` checks that for the chosen one."""
    budget = min(device.compute_tiles, config.target.max_tiles or device.compute_tiles)
    if config.replicas is None and config.target.objective != "throughput":
        return pool

    def counts(p: Point) -> range:
        if config.replicas is not None:
            return range(config.replicas, config.replicas + 1)
        return range(1, budget // p.tiles + 1)

    out = [replace(p, tiles=p.tiles * k, replicas=k) for p in pool for k in counts(p) if p.tiles * k <= budget]
    # keep, per (replicas, batch), only what is Pareto-optimal (there the per-sample and per-batch
    # intervals order alike, so interval budgets stay exact): the ranking then sees few points
    key = operator.attrgetter("tiles", "latency_ns", "interval_ns")
    groups: dict[tuple[int, int], list[Point]] = {}
    for p in out:
        groups.setdefault((p.replicas, p.batch), []).append(p)
    return [p for pts in groups.values() for p in undominated(pts, key)]


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
        best_iv = min(front, key=lambda p: (p.sample_interval_ns, p.tiles))
        fewest = min(front, key=lambda p: (p.tiles, p.latency_ns))
        raise PlanError(
            f"no plan meets the target '{target.to_string()}': the lowest modelled latency is "
            f"{best_lat.latency_ns:.0f} ns ({best_lat.tiles} tiles, batch {best_lat.batch}), the lowest interval "
            f"{best_iv.interval_ns:.0f} ns per batch of {best_iv.batch} ({best_iv.tiles} tiles), the fewest tiles "
            f"{fewest.tiles} (batch {fewest.batch})",
            hint="relax the budget, reduce the batch, or use `aieflow explore` to see the trade-offs",
        )
    order = {
        "latency": lambda p: (p.latency_ns, p.tiles, p.sample_interval_ns, p.batch),
        "throughput": lambda p: (p.sample_interval_ns, p.tiles, p.latency_ns, p.batch),
        "resources": lambda p: (p.tiles, p.latency_ns, p.sample_interval_ns, p.batch),
    }[target.objective]
    return sorted(ok, key=order)


def apply(config: Config, point: Point, graph: Graph) -> Config:
    """The config with the chosen batch, and the chosen parallelism as per-layer overrides (user
    entries kept, under whichever name the user gave the layer)."""
    layers = dict(config.layers)
    for name, cl, cn in point.parallelism:
        node = graph.node(name)
        key = next((k for k in (node.name, *node.aliases) if k in layers), node.name)
        layers[key] = replace(layers.get(key, LayerConfig()), cas_len=cl, cas_num=cn)
    return replace(config, layers=frozen_map(layers), batch=point.batch, batch_search=None, replicas=point.replicas)
