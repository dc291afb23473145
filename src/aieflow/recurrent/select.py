"""Choosing a recurrent mapping for a target: every legal mapping costed in closed form, the
Pareto front over (tiles, latency, interval), and the pick of the config's ``Target``.

Ranking and pruning are the Dense search's own (``passes/search.ranked`` and ``pareto.undominated``), so a
target means the same thing for both: ``latency_ns`` budgets one sample's latency through the
layer (``seq_len`` steps, fill included), ``interval_ns`` the per-step interval, ``tiles`` the
compute tiles; ``resources`` takes the fewest tiles meeting the budgets, ``latency`` the lowest
latency, ``throughput`` the lowest interval.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..config import Target, parse_target
from ..devices import Device, get_device
from ..errors import PlanError
from ..ir import Node
from ..pareto import undominated
from ..passes.search import ranked
from ..tables import plain
from .costs import AGG_PACKET_CYCLES
from .model import (
    RecurrentPerformance,
    estimate_recurrent,
    head_stage,
    search_cycles,
    step_stages,
)
from .plan import (
    MatvecMapping,
    RecurrentDims,
    RecurrentMapping,
    RecurrentOptions,
    build_mapping,
    compact_candidate,
    dims_of,
    grid_candidates,
    plan_recurrent,
    search_space,
    violations,
)


@dataclass(frozen=True)
class RecurrentPoint:
    """One costed mapping, with the attributes ``passes/search.ranked`` reads."""

    mapping: RecurrentMapping
    tiles: int
    latency_ns: float  # seq_len steps of one sample
    interval_ns: float  # per step
    step_latency_ns: float
    batch: int = 1  # one sample at a time (static recurrent layer)
    # AIE cycles of the closed form, kept so that the stack search need not re-cost the mapping:
    # (first step: W path + loop, interval, step latency, head epilogue)
    cycles: tuple[float, float, float, float] = (0.0, 0.0, 0.0, 0.0)

    @property
    def sample_interval_ns(self) -> float:
        return self.interval_ns * self.mapping.dims.seq_len

    def to_json(self) -> dict[str, Any]:
        return {
            "tiles": self.tiles,
            "batch": self.batch,
            "replicas": 1,
            "latency_ns": self.latency_ns,
            "interval_ns": self.interval_ns,  # per step
            "sample_interval_ns": self.sample_interval_ns,  # per sequence: the design's interval_ns
            "step_latency_ns": self.step_latency_ns,
            "mapping": self.mapping.describe(),
        }


@dataclass(frozen=True)
class RecurrentExploration:
    target: Target
    front: tuple[RecurrentPoint, ...]  # Pareto-optimal, fewest tiles first
    chosen: RecurrentPoint
    performance: RecurrentPerformance  # the chosen mapping, simulated
    candidates: int  # legal mappings costed
    # the recurrent layers' names (each: the node's, then its aliases), in order: what
    # ``aieflow.points`` writes a point's ``layers.<name>.mapping`` under (set by ``aieflow.explore``)
    config_names: tuple[tuple[str, ...], ...] = ()
    kind = "recurrent"  # what the CLI's explore dispatches on (a class constant, not a field)

    def report(self) -> str:
        """The front as a text table (``aieflow explore`` of a GRU / LSTM model), the pick marked *."""
        rows = [["", "tiles", "sequence latency ns", "step ns", "interval ns", "mapping"]]
        shown = self.front if self.chosen in self.front else (*self.front, self.chosen)
        for p in shown:
            m = p.mapping
            what = ("compact: the whole cell on one tile" if m.compact else m.describe().split(": ", 1)[1] if m.grid else
                    f"U h {_spread(m.recurrent)}, W x {_spread(m.input)}, {m.aggregation}, fan-in {m.merge_fanin}")
            rows.append(["*" if p == self.chosen else "", str(p.tiles), f"{p.latency_ns:,.0f}", f"{p.step_latency_ns:,.1f}",
                         f"{p.interval_ns:,.1f}", what])
        head = (f"Pareto front of {len(self.front)} recurrent mappings ({self.candidates} legal mappings costed, "
                f"each point's figures the estimate compile gives it; latency = one sample's {self.chosen.mapping.dims.seq_len} steps); "
                f"target '{self.target.to_string()}' picks *")
        return head + "\n" + plain(rows, rule=False)

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": "recurrent",
            "target": self.target.to_string(),
            "candidates_costed": self.candidates,
            "chosen": self.chosen.to_json(),
            "performance": self.performance.to_json(),
            "pareto_front": [p.to_json() for p in self.front],
        }


def _spread(m: MatvecMapping) -> str:
    if m.distribution in ("compact", "grid"):
        return m.distribution
    return f"row x{m.rows}" if m.distribution == "row" else f"column {m.rows} rows x {m.cas_len} tiles"


def mapping_point(m: RecurrentMapping, device: Device) -> RecurrentPoint:
    """The mapping costed as a point of the search (``model.search_cycles``): the compact and grid
    mappings by the stage graph of their mapped graph (``model.mapped_cycles``, memoised), the row-
    and column-wise ones by that stage graph's timing in closed form (``model.graph_cycles``; the
    design's estimate, the stage graph itself, equals it)."""
    step, interval, first, seq = search_cycles(m, device, step_stages(m, device))
    head = head_stage(m, device)
    h = head.occupancy + head.delay
    seq += h  # the budget is per inference: the head is part of it
    ns = 1e9 / device.clock_hz
    return RecurrentPoint(m, m.tiles, seq * ns, interval * ns, step * ns, cycles=(first, interval, step, h))


def _input_side(m: RecurrentMapping, device: Device) -> tuple[float, ...]:
    """Everything the W x spread changes in a mapping, each the smaller the better: its tiles,
    packet sources (merges, fan-in, interface streams), placement block, its stages' occupancy
    and latency, and the aggregator's work on its packets (aie)."""
    *_, w_mac, w_route = step_stages(m, device)[0]  # after the convolution front end, if any
    pk, wpp = m.input.packets()
    return (
        m.w_tiles, m.input.sources(m.dims), m.w_columns, m.w_rows,
        w_mac.occupancy, w_mac.occupancy + w_mac.delay, w_route.occupancy, w_route.occupancy + w_route.delay,
        m.input.sources(m.dims) * pk * (AGG_PACKET_CYCLES + wpp - 1),
    )


def costed_points(node_or_dims: Node | RecurrentDims, device: Device | str,
                  options: RecurrentOptions | Sequence[RecurrentOptions] | None = None) -> list[RecurrentPoint]:
    """Every legal mapping the options allow, costed in closed form, except those whose W x
    spread another beats or equals in everything it affects (same U h spread, aggregation and
    fan-in): such a mapping is never better in tiles, latency, interval or legality.  A sequence
    of options: the union of their mappings (e.g. row-wise and column-wise, but not mixed)."""
    device = get_device(device)
    dims = dims_of(node_or_dims, device)
    if isinstance(options, Sequence):
        seen: dict[RecurrentMapping, RecurrentPoint] = {}
        for o in options:
            for pt in costed_points(dims, device, o):
                seen.setdefault(pt.mapping, pt)
        return list(seen.values())
    options = options or RecurrentOptions()
    points = []
    compact = compact_candidate(dims, device, options)  # the whole cell on one tile, where it fits
    if compact is not None:
        points.append(mapping_point(compact, device))
    # the grid mapping (one tile per chain), every distinct chain count that fits
    points += [mapping_point(g, device) for g in grid_candidates(dims, device, options)]
    if options.distribution in ("compact", "grid"):
        return points
    for _, agg, fanin, u_opts, w_opts in search_space(dims, device, options):
        if not u_opts or not w_opts:
            continue
        ref = u_opts[0]
        sides = [(_input_side(build_mapping(dims, device, ref, w, agg, options, fanin), device), w) for w in w_opts]
        w_kept = [w for _, w in undominated(sides, key=lambda side_w: side_w[0])]
        w_kept.sort(key=lambda w: w.tiles(dims))
        spare = device.compute_tiles - (agg == "aie")
        for u in u_opts:
            for w in w_kept:
                if u.tiles(dims) + w.tiles(dims) > spare:
                    break  # the rest have more tiles still
                m = build_mapping(dims, device, u, w, agg, options, fanin)
                if not violations(m, device):
                    points.append(mapping_point(m, device))
    return points


_KEY = operator.attrgetter("tiles", "latency_ns", "interval_ns")


def no_mapping_error(dims: RecurrentDims, device: Device, options: Any, what: str) -> PlanError:
    """Why no mapping fits: the planner's own diagnosis for these options (the limits the candidate
    with the fewest tiles still exceeds, or the memory no spread fits), which a search that found
    nothing cannot give.  ``options``: one RecurrentOptions or a sequence (their union: the first)."""
    first = options[0] if isinstance(options, Sequence) and options else options
    try:
        plan_recurrent(dims, device, first if isinstance(first, RecurrentOptions) else None)
    except PlanError as e:
        return PlanError(f"no mapping of {what} fits {device.board} with these options: {e.message}", hint=e.hint)
    return PlanError(f"no mapping of {what} fits {device.board} with these options",
                     hint="relax the options (distribution, aggregation, row reuse, merge fan-in)")


def choose_mapping(
    node_or_dims: Node | RecurrentDims,
    device: Device | str,
    target: Target | str = "latency",
    options: RecurrentOptions | Sequence[RecurrentOptions] | None = None,
) -> RecurrentExploration:
    """The mapping the target picks among every legal one, and the Pareto front.  The choice is
    re-estimated by simulation (equal to the closed form, tested)."""
    device = get_device(device)
    target = target if isinstance(target, Target) else parse_target(target)
    pool = costed_points(node_or_dims, device, options)
    if not pool:
        dims = dims_of(node_or_dims, device)
        raise no_mapping_error(dims, device, options, f"{dims.cell.upper()} {dims.n_in}->{dims.n_h}")
    front = tuple(undominated(pool, _KEY))
    chosen = ranked(tuple(pool), target)[0]
    return RecurrentExploration(target, front, chosen, estimate_recurrent(chosen.mapping, device), len(pool))
