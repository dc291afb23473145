"""Stacked recurrent layers (two or more GRU / LSTM layers in sequence, or torch ``num_layers > 1``):
one mapping per layer, resources summed, and the latency of the layers as a pipeline.

Layer ``l + 1``'s x_t is layer ``l``'s h_t: its decoupled W x kernels take h_t from layer ``l``'s
aggregation (the AIE aggregator's output stream, or the PL FSM's output through a PLIO) while
layer ``l`` already works on step ``t + 1``, so layer ``l + 1`` runs one step behind (pipelined).

Latency (issue 17): the stack's mapped graph (``lower.lower`` of every layer, costed by
``lower.costed``: stages ``l<i>.<stage>``, one h recurrence per row / column layer, layer ``l``'s
aggregation, or its output kernel's relay, feeding layer ``l + 1``'s W path) run as its stage graph
(``model.stack_cycles``, memoised), as one layer's estimate is.  The per-step interval is the
slowest layer's; step 0 passes every layer's x path (W path, the stage ending the loop, the relay:
the U paths start from h = 0), so a sample's latency is at least those x paths plus ``seq_len -
1`` intervals plus the head (:func:`stack_bounds`' lower bound, what the search prunes by) and at
most the step chain (the W path ahead of the loop in every layer: :func:`stack_bounds`' upper
end, the estimate before issue 17).

Resources: tiles, interface tiles and placement columns (each layer's rectangle beside the
previous one) are summed and checked against the device, besides every layer's own limits.
Counting is conservative for AIE-aggregated inner layers: their h leaves by a stream to the next
layer's W kernels, but each layer still counts its own x / y PLIO.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Any

from ..config import Target, parse_target
from ..devices import Device, get_device
from ..errors import PlanError
from ..pareto import undominated
from ..passes.search import ranked
from ..perf import movement as mv
from ..tables import plain
from .model import (
    RecurrentPerformance,
    closed_cycles,
    estimate_recurrent,
    head_stage,
    relay_stage,
    sequence_json,
    stack_cycles,
    step_stages,
)
from .plan import (
    RecurrentDims,
    RecurrentMapping,
    RecurrentOptions,
    dims_of,
    plan_recurrent,
    published_options,
    violations,
)
from .select import costed_points, no_mapping_error


@dataclass(frozen=True)
class StackedMapping:
    """The mappings of a stack's layers, in order (the last carries the dense head's sizes)."""

    layers: tuple[RecurrentMapping, ...]
    notes: tuple[str, ...] = ()

    @property
    def tiles(self) -> int:
        return sum(m.tiles for m in self.layers)

    @property
    def interface_tiles(self) -> int:
        return sum(m.interface_tiles for m in self.layers)

    @property
    def columns(self) -> int:
        return sum(m.columns for m in self.layers)

    @property
    def rows(self) -> int:
        return max(m.rows for m in self.layers)

    def describe(self) -> str:
        return "; ".join(f"layer {i}: {m.describe()}" for i, m in enumerate(self.layers))

    def to_json(self) -> dict[str, Any]:
        return {"layers": [m.to_json() for m in self.layers], "tiles": self.tiles,
                "interface_tiles": self.interface_tiles, "rectangle": {"columns": self.columns, "rows": self.rows},
                "notes": list(self.notes)}


def stack_violations(layers: Sequence[RecurrentMapping], device: Device | str) -> list[str]:
    """Every limit the stack exceeds: each layer's own (prefixed with its index), then the sums."""
    device = get_device(device)
    out = [f"layer {i}: {v}" for i, m in enumerate(layers) for v in violations(m, device)]
    tiles = sum(m.tiles for m in layers)
    if tiles > device.compute_tiles:
        out.append(f"{tiles} tiles in all > {device.compute_tiles}")
    cols = sum(m.columns for m in layers)
    if cols > device.columns:
        out.append(f"{cols} columns side by side > {device.columns}")
    itf = sum(m.interface_tiles for m in layers)
    if itf > device.plio_columns:
        out.append(f"{itf} interface tiles in all > {device.plio_columns} usable for PLIO")
    return out


# ----------------------------------------------------------------------------- latency


@dataclass(frozen=True)
class StackedPerformance:
    mapping: StackedMapping
    layers: tuple[RecurrentPerformance, ...]  # each layer alone (its own step, breakdown, interval)
    step_latency_ns: float  # the slowest layer's step (the loop's critical path)
    interval_ns: float  # per step: the slowest layer's interval
    sequence_latency_ns: float  # one sample: every layer's first step, (seq_len - 1) intervals, the head
    fill_ns: float  # sequence latency - seq_len x interval - head
    steps: int
    tiles: int
    interface_tiles: int
    bound: str  # "layer i: <that layer's bound>" of the slowest layer
    head_ns: float
    head_breakdown_ns: Mapping[str, float]

    @property
    def breakdown_ns(self) -> Mapping[str, float]:
        """The slowest layer's step breakdown."""
        return self.layers[self.slowest].breakdown_ns

    @property
    def slowest(self) -> int:
        return max(range(len(self.layers)), key=lambda i: self.layers[i].interval_ns)

    def to_json(self) -> dict[str, Any]:
        return {**sequence_json(self), "layers": [p.to_json() for p in self.layers]}


def first_and_interval(m: RecurrentMapping, device: Device) -> tuple[float, float, float]:
    """(first step: W path + loop, interval, step latency) of one layer's step chain, in AIE cycles."""
    stages = step_stages(m, device)
    step, interval, first = closed_cycles(stages, 1)
    return first, interval, step


@dataclass(frozen=True)
class LayerBounds:
    """One layer's share of the bounds on a stack's stage-graph figure, in AIE cycles.

    ``x_path``: x_t in to the layer's output (its W path stages, the stage ending the loop,
    ``aggregate`` or the compact ``cell``, and an inner layer's relay), each stage's occupancy +
    delay: no run of the stage graph passes step t through the layer faster (every edge of that
    path is a data dependence of ``run_pipeline``).  ``first``: the step chain's first step (the W
    path, then the whole loop, then the relay), what :func:`stack_bounds`' upper end adds.  ``interval``:
    the largest of the loop and every x-path stage's occupancy, the layer's interval in the stage
    graph.  The last layer's ``x_path`` and ``first`` include the head."""

    x_path: float
    first: float
    interval: float
    step: float


def layer_bounds(m: RecurrentMapping, device: Device, inner: bool, head: bool = False) -> LayerBounds:
    w_path, loop = step_stages(m, device)
    step, interval, first = closed_cycles((w_path, loop), 1)
    x_path = sum(s.occupancy + s.delay for s in (*w_path, loop[-1]))
    r = relay_stage(m, device) if inner else None
    if r is not None:
        x_path, first, interval = x_path + r.occupancy + r.delay, first + r.occupancy + r.delay, max(interval, r.occupancy)
    if head:
        h = head_stage(m, device)
        x_path, first = x_path + h.occupancy + h.delay, first + h.occupancy + h.delay
    return LayerBounds(x_path, first, interval, step)


def stack_bounds(layers: Sequence[RecurrentMapping], device: Device) -> tuple[float, float, float]:
    """(lower bound, step-chain figure, interval) in cycles of a stack's sequence latency, the head
    included.  Lower bound: the x paths of every layer (step 0 passes each, in order) plus
    ``seq_len - 1`` of the slowest layer's intervals (the bottleneck layer passes its steps one
    interval apart: its loop's recurrence or a stage's occupancy); no run of the stage graph is
    faster.  The step chain (the W path ahead of the loop in every layer: more precedences than the
    stage graph) is no faster than the stage graph (tested on random stacks)."""
    n = len(layers)
    parts = [layer_bounds(m, device, i + 1 < n, i + 1 == n) for i, m in enumerate(layers)]
    interval = max(p.interval for p in parts)
    rest = (layers[0].dims.seq_len - 1) * interval
    return sum(p.x_path for p in parts) + rest, sum(p.first for p in parts) + rest, interval


def _performance(stack: StackedMapping, device: Device, step_c: float, interval_c: float,
                 seq_c: float) -> StackedPerformance:
    ns = lambda c: mv.cycles_to_ns(c, device)  # noqa: E731
    per = tuple(estimate_recurrent(m, device) for m in stack.layers)
    head = head_stage(stack.layers[-1], device)
    steps = stack.layers[0].dims.seq_len
    slowest = max(range(len(per)), key=lambda i: per[i].interval_ns)
    return StackedPerformance(
        mapping=stack,
        layers=per,
        step_latency_ns=ns(step_c),
        interval_ns=ns(interval_c),
        sequence_latency_ns=ns(seq_c + head.occupancy + head.delay),
        fill_ns=ns(seq_c - steps * interval_c),
        steps=steps,
        tiles=stack.tiles,
        interface_tiles=stack.interface_tiles,
        bound=f"layer {slowest}: {per[slowest].bound}",
        head_ns=ns(head.occupancy + head.delay),
        head_breakdown_ns=MappingProxyType({k: ns(v) for k, v in head.parts.items()}),
    )


def estimate_stack(stack: StackedMapping, device: Device | str) -> StackedPerformance:
    """The stack's mapped graph (``lower.lower`` of every layer, ``lower.costed``: stages
    ``l<i>.<stage>``) run as its stage graph (``model.stack_cycles``, memoised) over ``seq_len``
    steps (at least 16, to measure the interval); the sequence latency is the last layer's output
    of step ``seq_len`` plus the head."""
    device = get_device(device)
    interval, _, seq = stack_cycles(stack.layers, device)
    step = max(first_and_interval(m, device)[2] for m in stack.layers)
    return _performance(stack, device, step, interval, seq)


# ----------------------------------------------------------------------------- planning and choice


def _per_layer(options: Any, n: int) -> list[Any]:
    """One options entry per layer: a list gives each layer its own, anything else is shared."""
    if isinstance(options, list):
        if len(options) != n:
            raise PlanError(f"{len(options)} per-layer recurrent options for {n} stacked layers",
                            hint="give one RecurrentOptions per recurrent layer, or one for all")
        return options
    return [options] * n


def plan_stack(dims: Sequence[RecurrentDims], device: Device | str,
               options: RecurrentOptions | list[RecurrentOptions] | None = None, fallback: Any = None) -> StackedMapping:
    """Each layer's ``plan_recurrent`` (most parallel legal mapping for its options; a list:
    one per layer); when their sum does not fit the device, the fastest stack that fits
    (``choose_stack``'s ``latency`` pick, the stack's "most parallel") among ``fallback``'s
    mappings, by default those with ``plan_recurrent``'s published choices for what the options
    leave open (row-wise, hybrid, one row block's gates per merge: only the row reuse varies),
    with a note saying why."""
    device = get_device(device)
    per = _per_layer(options, len(dims))
    layers = tuple(plan_recurrent(d, device, o) for d, o in zip(dims, per, strict=True))
    bad = stack_violations(layers, device)
    if not bad:
        return StackedMapping(layers)
    if fallback is None:  # plan_recurrent's own choices, only the row reuse searched: cheap
        fallback = [published_options(dims_of(d, device), o or RecurrentOptions()) for d, o in zip(dims, per, strict=True)]
    ex = choose_stack(dims, device, "latency", fallback)
    return replace(ex.chosen.mapping, notes=(f"the layers' own plans do not fit together ({'; '.join(bad)}): "
                                             "took the fastest stack that fits",))


@dataclass(frozen=True)
class StackedPoint:
    """One costed stack, with the attributes ``passes/search.ranked`` reads."""

    mapping: StackedMapping
    tiles: int
    latency_ns: float  # one sample through every layer, the head included
    interval_ns: float  # per step
    step_latency_ns: float
    batch: int = 1

    @property
    def sample_interval_ns(self) -> float:
        return self.interval_ns * self.mapping.layers[0].dims.seq_len

    def to_json(self) -> dict[str, Any]:
        return {"tiles": self.tiles, "batch": self.batch, "replicas": 1, "latency_ns": self.latency_ns,
                "interval_ns": self.interval_ns, "sample_interval_ns": self.sample_interval_ns,
                "step_latency_ns": self.step_latency_ns, "mapping": self.mapping.describe()}


def stack_point(stack: StackedMapping, device: Device | str) -> StackedPoint:
    """The stack costed as a point of ``choose_stack``: its estimate (:func:`estimate_stack`, the
    stage graph of its mapped graph, memoised)."""
    device = get_device(device)
    p = estimate_stack(stack, device)
    return StackedPoint(stack, stack.tiles, p.sequence_latency_ns, p.interval_ns, p.step_latency_ns)


@dataclass(frozen=True)
class StackedExploration:
    target: Target
    front: tuple[StackedPoint, ...]  # Pareto-optimal over (tiles, latency, interval), fewest tiles first
    chosen: StackedPoint
    performance: StackedPerformance  # the chosen stack, simulated
    candidates: int  # stacks costed (after pruning each layer's and each partial stack's dominated ones)
    # the recurrent layers' names (each: the node's, then its aliases), in order: what
    # ``aieflow.points`` writes a point's ``layers.<name>.mapping`` under (set by ``aieflow.explore``)
    config_names: tuple[tuple[str, ...], ...] = ()
    kind = "recurrent"

    def report(self) -> str:
        rows = [["", "tiles", "sequence latency ns", "step ns", "interval ns", "mapping per layer"]]
        shown = self.front if self.chosen in self.front else (*self.front, self.chosen)
        for p in shown:
            desc = " | ".join(_short(m) for m in p.mapping.layers)
            rows.append(["*" if p == self.chosen else "", str(p.tiles), f"{p.latency_ns:,.0f}", f"{p.step_latency_ns:,.1f}",
                         f"{p.interval_ns:,.1f}", desc])
        head = (f"Pareto front of {len(self.front)} stacks of {len(self.chosen.mapping.layers)} recurrent layers "
                f"({self.candidates} stacks costed, each point's figures the estimate compile gives it); target '{self.target.to_string()}' picks *")
        return head + "\n" + plain(rows, rule=False)

    def to_json(self) -> dict[str, Any]:
        return {"kind": "recurrent", "target": self.target.to_string(), "candidates_costed": self.candidates,
                "chosen": self.chosen.to_json(), "performance": self.performance.to_json(),
                "pareto_front": [p.to_json() for p in self.front]}


def _short(m: RecurrentMapping) -> str:
    if m.compact:
        return "compact (1 tile)"
    if m.grid:
        return f"grid ({m.chains} chains x {m.chain_len} tiles)"

    def mv_(x) -> str:
        return f"row x{x.rows}" if x.distribution == "row" else f"col {x.rows}x{x.cas_len}"

    return f"U {mv_(m.recurrent)}, W {mv_(m.input)}, {m.aggregation}"


@dataclass(frozen=True)
class _Partial:
    layers: tuple[RecurrentMapping, ...]
    tiles: int
    columns: int
    interface: int
    low: float  # cycles: the layers' x paths (LayerBounds.x_path), summed
    interval: float  # cycles: the slowest so far


def _dominated_free(items: list[_Partial]) -> list[_Partial]:
    """Partial stacks no other beats or equals in tiles, summed x paths and interval: exact for the
    stacks' lower bound (:func:`stack_bounds`: summed x paths + ``seq_len - 1`` largest intervals,
    the head in the last layer's x path), which the stage graph exceeds by a few cycles at most on
    the sampled stacks (its U path on step 0, back-pressure: tests/test_recurrent_stacked.py), so a
    pruned stack can beat a kept one by that much at most there.  Columns and interface tiles are
    checked on every combination but not used to prune (approximation: a stack that fits only
    through a dominated layer mapping with fewer columns is not found; the device's 50 / 38 columns
    are far from what the tested stacks need)."""
    return undominated(items, lambda p: (p.tiles, p.low, p.interval))


def choose_stack(
    dims: Sequence[RecurrentDims],
    device: Device | str,
    target: Target | str = "latency",
    options: Any = None,
) -> StackedExploration:
    """The stack the target picks among the combinations of every layer's legal mappings, and the
    Pareto front, each stack costed by its estimate (:func:`estimate_stack`: the stage graph of
    its mapped graph, memoised).  ``options``: a ``RecurrentOptions`` (or a tuple of them, their
    union) for every layer, or a list with one such entry per layer.  Each layer's mappings, and
    the partial stacks after each layer, are pruned to those no other beats in (tiles, x path,
    interval) (:func:`_dominated_free`: exact for the stacks' lower bound, :func:`stack_bounds`);
    the stacks left are simulated."""
    device = get_device(device)
    target = target if isinstance(target, Target) else parse_target(target)
    dims = [dims_of(d, device) for d in dims]
    partial = [_Partial((), 0, 0, 0, 0.0, 0.0)]
    for i, (d, opts) in enumerate(zip(dims, _per_layer(options, len(dims)), strict=True)):
        pts = [p for p in costed_points(d, device, opts) if not p.mapping.grid]  # a grid maps one layer only
        if not pts:
            raise no_mapping_error(d, device, opts, f"layer {i} ({d.cell.upper()} {d.n_in}->{d.n_h})")
        last = i == len(dims) - 1
        mine = []
        for p in pts:
            b = layer_bounds(p.mapping, device, not last, last)
            mine.append(_Partial((p.mapping,), p.mapping.tiles, p.mapping.columns, p.mapping.interface_tiles, b.x_path,
                                 b.interval))
        mine = _dominated_free(mine)
        combined = [
            _Partial(a.layers + b.layers, a.tiles + b.tiles, a.columns + b.columns, a.interface + b.interface,
                     a.low + b.low, max(a.interval, b.interval))
            for a in partial for b in mine
            if a.tiles + b.tiles <= device.compute_tiles and a.columns + b.columns <= device.columns
            and a.interface + b.interface <= device.plio_columns
        ]
        if not combined:
            raise PlanError(f"the {len(dims)} recurrent layers do not fit {device.board} together (layers 0-{i} already "
                            "exceed its tiles, columns or interface tiles)",
                            hint="use fewer or smaller layers, or a larger device")
        partial = _dominated_free(combined)
    pool = [stack_point(StackedMapping(p.layers), device) for p in partial]
    key = lambda q: (q.tiles, q.latency_ns, q.interval_ns)  # noqa: E731
    front = tuple(undominated(pool, key))
    chosen = ranked(tuple(pool), target)[0]
    return StackedExploration(target, front, chosen, estimate_stack(chosen.mapping, device), len(pool))
