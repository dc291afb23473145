"""Stacked recurrent layers (two or more GRU / LSTM layers in sequence, or torch ``num_layers > 1``):
one mapping per layer, resources summed, and the latency of the layers as a pipeline.

Layer ``l + 1``'s x_t is layer ``l``'s h_t: its decoupled W x kernels take h_t from layer ``l``'s
aggregation (the AIE aggregator's output stream, or the PL FSM's output through a PLIO) while
layer ``l`` already works on step ``t + 1``, so layer ``l + 1`` runs one step behind (pipelined).

Latency: each layer is its own step pipeline (``model.py``: W path, then the loop with its
recurrence); the stack chains them, layer ``l``'s aggregation feeding layer ``l + 1``'s W path.
The per-step interval is the slowest layer's interval; one sample's latency is every layer's first
step (W path + loop) once, plus ``seq_len - 1`` intervals of the slowest layer, plus the head
after the last layer.  That closed form is what a tandem of fixed-latency, fixed-interval stages
gives; ``estimate_stack`` simulates the chained pipeline (``perf.simulate.run_pipeline`` with one
recurrence per layer) and the tests check the two agree.

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
from ..passes.transport import PING_PONG
from ..perf import movement as mv
from ..perf.simulate import Pipeline, run_pipeline
from ..tables import plain
from .model import (
    RecurrentPerformance,
    _spec,
    closed_cycles,
    estimate_closed,
    estimate_recurrent,
    head_stage,
    recurrence,
    relay_stage,
    sequence_json,
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
    """(first step: W path + loop, interval, step latency) of one layer, in AIE cycles."""
    stages = step_stages(m, device)
    step, interval, first = closed_cycles(stages, 1)
    return first, interval, step


def with_relay(cycles: tuple[float, ...], m: RecurrentMapping, device: Device, inner: bool) -> tuple[float, ...]:
    """A layer's (first step, interval, ...) with its output kernel's relay (``model.relay_stage``)
    where an inner layer has one: its h reaches the next layer's W kernels through it, so the first
    step grows by the relay and the interval is at least its occupancy (the last layer's relay is
    in the head stage)."""
    r = relay_stage(m, device) if inner else None
    if r is None:
        return cycles
    return (cycles[0] + r.occupancy + r.delay, max(cycles[1], r.occupancy), *cycles[2:])


def stack_closed_cycles(layers: Sequence[RecurrentMapping], device: Device) -> tuple[float, float, float]:
    """(step latency, interval, sequence latency without the head) in cycles, closed form: the
    slowest layer's interval; every layer's first step once plus ``seq_len - 1`` intervals."""
    parts = [with_relay(first_and_interval(m, device), m, device, i + 1 < len(layers)) for i, m in enumerate(layers)]
    interval = max(p[1] for p in parts)
    steps = layers[0].dims.seq_len
    return max(p[2] for p in parts), interval, sum(p[0] for p in parts) + (steps - 1) * interval


def stack_pipeline(layers: Sequence[RecurrentMapping], device: Device) -> Pipeline:
    """The layers' step pipelines chained (layer l's aggregate feeds layer l + 1's W path), one
    recurrence per layer, stage names prefixed ``l<i>.``."""
    specs, names, recurrences = [], [], []
    for i, m in enumerate(layers):
        w_path, loop = step_stages(m, device)
        relay = relay_stage(m, device) if i + 1 < len(layers) else None  # an inner layer's output kernel
        for s in (*w_path, *loop, *((relay,) if relay else ())):
            specs.append((f"l{i}.{s.name}", s))
        last, first = recurrence(loop)
        recurrences.append((f"l{i}.{last}", f"l{i}.{first}"))
    names = [f"{n}:out" for n, _ in specs[:-1]]
    out = []
    for k, (n, s) in enumerate(specs):
        spec = _spec(s, device, names[k - 1] if k else None, names[k] if k < len(names) else None)
        out.append(replace(spec, name=n))
    return Pipeline(tuple(out), MappingProxyType({n: PING_PONG for n in names}), recurrences=tuple(recurrences))


def _performance(stack: StackedMapping, device: Device, step_c: float, interval_c: float, seq_c: float,
                 simulate: bool) -> StackedPerformance:
    ns = lambda c: mv.cycles_to_ns(c, device)  # noqa: E731
    per = tuple((estimate_recurrent if simulate else estimate_closed)(m, device) for m in stack.layers)
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


def estimate_stack_closed(stack: StackedMapping, device: Device | str) -> StackedPerformance:
    device = get_device(device)
    step, interval, seq = stack_closed_cycles(stack.layers, device)
    return _performance(stack, device, step, interval, seq, simulate=False)


def estimate_stack(stack: StackedMapping, device: Device | str) -> StackedPerformance:
    """Simulate the chained layers over ``seq_len`` steps (at least 16, to measure the interval);
    the sequence latency is the last layer's completion of step ``seq_len`` plus the head."""
    device = get_device(device)
    steps = stack.layers[0].dims.seq_len
    sim = run_pipeline(stack_pipeline(stack.layers, device), batches=max(steps, 16))
    to_cycles = device.clock_hz / 1e9
    step = max(first_and_interval(m, device)[2] for m in stack.layers)
    return _performance(stack, device, step, sim.interval_ns * to_cycles, sim.completions_ns[steps - 1] * to_cycles,
                        simulate=True)


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


def _stacked_point(stack: StackedMapping, device: Device, first: float, interval: float, step: float) -> StackedPoint:
    """``first``: every layer's first step plus the head, ``interval`` the slowest layer's, in cycles."""
    ns = 1e9 / device.clock_hz
    steps = stack.layers[0].dims.seq_len
    return StackedPoint(stack, stack.tiles, (first + (steps - 1) * interval) * ns, interval * ns, step * ns)


def stack_point(stack: StackedMapping, device: Device | str) -> StackedPoint:
    """The stack costed as a point of ``choose_stack`` (closed form; the design's simulation equals it)."""
    device = get_device(device)
    n = len(stack.layers)
    parts = [with_relay(first_and_interval(m, device), m, device, i + 1 < n) for i, m in enumerate(stack.layers)]
    head = head_stage(stack.layers[-1], device)
    return _stacked_point(stack, device, sum(p[0] for p in parts) + head.occupancy + head.delay,
                          max(p[1] for p in parts), max(p[2] for p in parts))


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
    first: float  # cycles: sum of the layers' first steps
    interval: float  # cycles: the slowest so far


def _dominated_free(items: list[_Partial]) -> list[_Partial]:
    """Partial stacks no other beats or equals in tiles, first step and interval (the final
    latency grows with both latency terms).  Columns and interface tiles are checked on every
    combination but not used to prune (approximation: a stack that fits only through a dominated
    layer mapping with fewer columns is not found; the device's 50 / 38 columns are far from what
    the tested stacks need)."""
    return undominated(items, lambda p: (p.tiles, p.first, p.interval))


def choose_stack(
    dims: Sequence[RecurrentDims],
    device: Device | str,
    target: Target | str = "latency",
    options: Any = None,
) -> StackedExploration:
    """The stack the target picks among the combinations of every layer's legal mappings, and the
    Pareto front.  ``options``: a ``RecurrentOptions`` (or a tuple of them, their union) for
    every layer, or a list with one such entry per layer.  Each layer's mappings are pruned to those no other beats in (tiles, first
    step, interval), and partial stacks likewise after each layer, which keeps the search exact
    for tiles and latency (sequence latency = sum of first steps + (T - 1) x the largest interval
    + the last layer's head); see ``_dominated_free`` for columns and interface tiles."""
    device = get_device(device)
    target = target if isinstance(target, Target) else parse_target(target)
    dims = [dims_of(d, device) for d in dims]
    partial = [_Partial((), 0, 0, 0, 0.0, 0.0)]
    steps_of: dict[RecurrentMapping, float] = {}
    for i, (d, opts) in enumerate(zip(dims, _per_layer(options, len(dims)), strict=True)):
        pts = [p for p in costed_points(d, device, opts) if not p.mapping.grid]  # a grid maps one layer only
        if not pts:
            raise no_mapping_error(d, device, opts, f"layer {i} ({d.cell.upper()} {d.n_in}->{d.n_h})")
        mine = []
        for p in pts:
            # the stack's chain (first_and_interval: a layer's first step passes its W path and its loop;
            # the single layer's stage graph has none of that on step 0), and the head costed once in costed_points
            (first, interval, step_c), head_c = first_and_interval(p.mapping, device), p.cycles[3]
            steps_of[p.mapping] = step_c
            if i == len(dims) - 1:
                first += head_c
            else:
                first, interval = with_relay((first, interval), p.mapping, device, True)
            mine.append(_Partial((p.mapping,), p.mapping.tiles, p.mapping.columns, p.mapping.interface_tiles, first, interval))
        mine = _dominated_free(mine)
        combined = [
            _Partial(a.layers + b.layers, a.tiles + b.tiles, a.columns + b.columns, a.interface + b.interface,
                     a.first + b.first, max(a.interval, b.interval))
            for a in partial for b in mine
            if a.tiles + b.tiles <= device.compute_tiles and a.columns + b.columns <= device.columns
            and a.interface + b.interface <= device.plio_columns
        ]
        if not combined:
            raise PlanError(f"the {len(dims)} recurrent layers do not fit {device.board} together (layers 0-{i} already "
                            "exceed its tiles, columns or interface tiles)",
                            hint="use fewer or smaller layers, or a larger device")
        partial = _dominated_free(combined)
    pool = [_stacked_point(StackedMapping(p.layers), device, p.first, p.interval, max(steps_of[m] for m in p.layers))
            for p in partial]
    key = lambda q: (q.tiles, q.latency_ns, q.interval_ns)  # noqa: E731
    front = tuple(undominated(pool, key))
    chosen = ranked(tuple(pool), target)[0]
    return StackedExploration(target, front, chosen, estimate_stack(chosen.mapping, device), len(pool))

