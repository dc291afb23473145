"""Transaction-level event simulation of a design: whole buffers move, kernels fire on full buffers.

A design is a chain of Dense layers.  Each batch (one graph iteration) flows through stages:

    plio_in -> layer 0 -> [link] -> layer 1 -> ... -> layer n-1 -> plio_out

where a link is two memory-tile DMA stages (AIE-ML / AIE-MLv2: producer rows -> memory tile ->
consumer columns), one tile-DMA stream stage (AIE1, when producer and consumer tiles are not memory
neighbours) or nothing (AIE1 neighbours share the buffer).  Consecutive stages hand over through
ping-pong buffers (2 slots, the ADF default and ``num_buffers = 2`` on memory tiles): a stage starts
batch b when it is idle, b is complete in its input buffer and a slot of its output buffer is free,
and holds both for its ``occupancy``.  A stage with a ``delay`` (switch hops; a cascade row, whose
last tile starts ``cas_len - 1`` blocks after its first) takes its input at the start and its
output slot ``delay`` later, each end in its own time frame (see :func:`run_pipeline`).  That is
what ADF's lock protocol does at buffer granularity, so back-pressure, pipelining over batches and
pipeline fill come out of it.  Approximation: a stage stalled on its output slot still releases
its input slot on time (the stall shows up in its successors' and its own later starts).

Engine: a small heapq event loop rather than SimPy.  The model needs timed callbacks and FIFO
slot counters only (no process interrupts, priorities or shared resources), SimPy is not a
dependency of the package, and our own loop is trivially deterministic: events are ordered by
(time, sequence number) and stages are retried in pipeline order.
"""

from __future__ import annotations

import heapq
import itertools
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from ..devices import Device
from ..ir import Node
from ..ops.dense import DensePlan, DenseTypes
from . import movement as mv
from .kernel import KernelCycles, layer_kernel_cycles

PING_PONG = 2

# Kernel bound -> design bound.  Local-memory loads/stores are "memory", the cascade is a stream.
_KERNEL_BOUND = {"compute": "compute", "overhead": "compute", "load": "memory", "store": "memory", "cascade": "stream"}


@dataclass(frozen=True)
class StageSpec:
    """One resource a batch passes through."""

    name: str
    kind: str  # "plio", "kernel", "memtile", "dma"
    bound: str  # what limits it: "compute", "memory", "stream", "plio"
    occupancy_ns: float  # the resource is busy this long per batch
    delay_ns: float = 0.0  # the output end starts this much after the input end (latency only)
    input: str | None = None  # buffer read (None: the host supplies batches at will)
    output: str | None = None  # buffer written (None: the host drains)
    tiles: int = 0
    cycles: float = 0.0  # busy AIE-clock cycles per batch
    macs: int = 0  # real (unpadded) MACs per batch, kernel stages only
    peak_macs_per_cycle: float = 0.0  # per tile


@dataclass(frozen=True)
class Pipeline:
    stages: tuple[StageSpec, ...]
    buffers: Mapping[str, int]  # buffer -> slots


@dataclass(frozen=True)
class StageStats:
    name: str
    kind: str
    bound: str
    occupancy_ns: float
    busy: float  # occupancy / steady-state interval
    starved_ns: float  # mean idle time per batch waiting for input (steady state)
    blocked_ns: float  # mean idle time per batch waiting for a free output slot (back-pressure)


@dataclass(frozen=True)
class SimResult:
    latency_ns: float  # first batch: time from the first PLIO word in to the last word out
    interval_ns: float  # steady-state time between consecutive batch completions
    batches: int
    completions_ns: tuple[float, ...]
    stages: tuple[StageStats, ...]
    bottleneck: str  # the stage with the largest occupancy
    bound: str


@dataclass
class _State:
    next: int = 0  # next batch to start
    free_at: float = 0.0  # when the stage (the head of a cascade row) can take the next batch
    tail_free_at: float = 0.0  # when the last tile of a row can start its next batch
    pending: deque[tuple[int, float]] = field(default_factory=deque)  # (batch, tail start wanted)
    starved: float = 0.0
    blocked: float = 0.0


_WAKE, _FREE, _DONE = 0, 1, 2


def run_pipeline(pipe: Pipeline, batches: int | None = None) -> SimResult:
    """Simulate ``batches`` batches through ``pipe`` (default: enough for a steady state).

    A stage without ``delay`` starts when it is free, its next batch is in its input buffer and
    an output slot is free; it holds both for ``occupancy``.  A stage with ``delay`` (a cascade
    row) starts in two phases: the head takes the input slot (and frees it ``occupancy`` later,
    in its own time frame), and ``delay`` later the tail needs an output slot and is busy for
    ``occupancy``.  Up to ``1 + delay // occupancy`` batches can be inside the row at once; when
    the tail waits for an output slot the row fills and the head stalls (the 2-deep cascade FIFO
    back-pressures it).
    """
    stages = pipe.stages
    n = batches if batches is not None else 4 * len(stages) + 8
    if n < 2:
        raise ValueError("need at least two batches to measure an interval")
    window = n // 2
    free = dict(pipe.buffers)
    ready: dict[str, deque[tuple[int, float]]] = {name: deque() for name in pipe.buffers}
    state = [_State() for _ in stages]
    inflight = [1 + int(s.delay_ns // s.occupancy_ns) if s.delay_ns and s.occupancy_ns > 0 else 1 for s in stages]
    dones: list[list[float]] = [[] for _ in stages]
    heap: list[tuple[float, int, int, int, int]] = []
    seq = itertools.count()

    def push(t: float, kind: int, i: int, b: int) -> None:
        heapq.heappush(heap, (t, next(seq), kind, i, b))

    def take_input(i: int, now: float, b: int) -> None:
        s, x = stages[i], state[i]
        t_ready = 0.0
        if s.input is not None:
            t_ready = ready[s.input].popleft()[1]
        if b >= n - window:
            x.starved += max(0.0, min(now, t_ready) - x.free_at)
            x.blocked += now - max(x.free_at, t_ready)
        x.free_at = now + s.occupancy_ns
        x.next += 1
        push(x.free_at, _FREE, i, b)

    def give_output(i: int, now: float, b: int) -> None:
        s, x = stages[i], state[i]
        if s.output is not None:
            free[s.output] -= 1
        x.tail_free_at = now + s.occupancy_ns
        push(now + s.occupancy_ns, _DONE, i, b)

    def try_start(i: int, now: float) -> bool:
        s, x = stages[i], state[i]
        has_input = s.input is None or bool(ready[s.input])
        has_slot = s.output is None or free[s.output] > 0
        if not s.delay_ns:
            if x.next >= n or now < x.free_at or not (has_input and has_slot):
                return False
            b = x.next
            take_input(i, now, b)
            give_output(i, now, b)
            return True
        if x.pending and now >= x.pending[0][1] and now >= x.tail_free_at and has_slot:
            b, want = x.pending.popleft()
            if b >= n - window:
                x.blocked += now - want
            give_output(i, now, b)
            return True
        if x.next < n and now >= x.free_at and has_input and len(x.pending) < inflight[i]:
            b = x.next
            take_input(i, now, b)
            x.pending.append((b, now + s.delay_ns))
            push(now + s.delay_ns, _WAKE, i, b)
            return True
        return False

    def settle(now: float) -> None:
        while any([try_start(i, now) for i in range(len(stages))]):
            pass

    settle(0.0)
    while heap:
        t, _, kind, i, b = heapq.heappop(heap)
        s = stages[i]
        if kind == _FREE and s.input is not None:
            free[s.input] += 1
        elif kind == _DONE:
            if s.output is not None:
                ready[s.output].append((b, t))
            dones[i].append(t)
        settle(t)

    out = dones[-1]
    if len(out) != n:
        raise RuntimeError(f"pipeline deadlocked after {len(out)} of {n} batches")
    interval = (out[-1] - out[-1 - window]) / window
    stats = tuple(
        StageStats(
            s.name,
            s.kind,
            s.bound,
            s.occupancy_ns,
            s.occupancy_ns / interval if interval else 0.0,
            x.starved / window,
            x.blocked / window,
        )
        for s, x in zip(stages, state, strict=True)
    )
    neck = max(stages, key=lambda s: s.occupancy_ns)
    return SimResult(out[0], interval, n, tuple(out), stats, neck.name, neck.bound)


# ----------------------------------------------------------------------------- design -> stages


def _bytes(t) -> int:
    return t.container_bits // 8


def input_bytes(plan: DensePlan, types: DenseTypes) -> int:
    """One cascade column's input buffer (panel layout, batch padded): what a link delivers."""
    return plan.batch_pad * plan.k_slice * _bytes(types.input)


def output_bytes(plan: DensePlan, types: DenseTypes) -> int:
    """One cascade row's output buffer."""
    return plan.batch_pad * plan.n_slice * _bytes(types.output)


def kernel_stage(node: Node, device: Device, inp: str | None = None, out: str | None = None) -> tuple[StageSpec, dict[str, KernelCycles]]:
    """A layer's cascade rectangle as one stage: all rows run in parallel on the same broadcast
    input, the cascade runs in lockstep at the pace of its slowest role, and the last tile
    finishes ``cas_len - 1`` blocks after the first."""
    plan: DensePlan = node.plan
    types: DenseTypes = node.types
    relu = node.attrs.get("activation") == "relu"
    kernels = layer_kernel_cycles(plan, types, relu, device)
    ports = {"single": 2, "first": 1, "middle": 1, "last": 2}  # buffer ports: input (+ output)
    busy = {role: k.cycles + mv.lock_handoff_cycles(ports[role]) for role, k in kernels.items()}
    slowest = max(busy, key=lambda r: busy[r])
    lag = mv.cascade_chain_lag_cycles(max(k.block_cycles for k in kernels.values()), plan.cas_len - 1)
    spec = StageSpec(
        name=node.name,
        kind="kernel",
        bound=_KERNEL_BOUND[kernels[slowest].bound],
        occupancy_ns=mv.cycles_to_ns(busy[slowest], device),
        delay_ns=mv.cycles_to_ns(lag, device),
        input=inp,
        output=out,
        tiles=plan.tiles,
        cycles=busy[slowest],
        macs=plan.batch * plan.in_features * plan.out_features,
        peak_macs_per_cycle=device.generation.macs_per_cycle[types.pair],
    )
    return spec, kernels


def transfer_stage(name: str, kind: str, t: mv.Transfer, device: Device, inp: str | None, out: str | None) -> StageSpec:
    return StageSpec(
        name=name,
        kind=kind,
        bound=t.bound,
        occupancy_ns=mv.cycles_to_ns(t.busy_cycles, device),
        delay_ns=mv.cycles_to_ns(t.latency_cycles, device),
        input=inp,
        output=out,
        cycles=t.busy_cycles,
    )


def plio_in_stage(node: Node, device: Device, top_row: int, out: str | None) -> StageSpec:
    """The first layer's input: one PLIO per cascade column, in parallel, broadcast up the column."""
    hops = device.memory_tile_rows + top_row + 1
    t = mv.plio_transfer(input_bytes(node.plan, node.types), device, hops)
    return transfer_stage(f"plio_in:{node.name}", "plio", t, device, None, out)


def plio_out_stage(node: Node, device: Device, top_row: int, inp: str | None) -> StageSpec:
    """The last layer's output: one PLIO per cascade row, in parallel."""
    hops = device.memory_tile_rows + top_row + 1
    t = mv.plio_transfer(output_bytes(node.plan, node.types), device, hops)
    return transfer_stage(f"plio_out:{node.name}", "plio", t, device, inp, None)


def memtile_link(prev: Node, node: Node, device: Device) -> tuple[int, int]:
    """(ping-pong buffer bytes, ports) of the memory-tile buffer between two layers (as emitted)."""
    pp, p = prev.plan, node.plan
    width = max(pp.cas_num * pp.n_slice, p.cas_len * p.k_slice)
    return PING_PONG * width * p.batch_pad * _bytes(prev.types.output), max(pp.cas_num, p.cas_len)


def memtile_stages(prev: Node, node: Node, device: Device, hops_in: int, hops_out: int, inp: str, mid: str, out: str) -> tuple[StageSpec, StageSpec]:
    """Producer rows write their slices into the memory tile; its read tilers then send each
    consumer column its slice (broadcast to the column's rows)."""
    nbytes, ports = memtile_link(prev, node, device)
    tiles = mv.memtiles_for(nbytes, ports, device)
    write = mv.memtile_transfer(output_bytes(prev.plan, prev.types), prev.plan.cas_num, device, hops_in, tiles)
    read = mv.memtile_transfer(input_bytes(node.plan, node.types), node.plan.cas_len, device, hops_out, tiles)
    tag = f"{prev.name}->{node.name}"
    return (
        transfer_stage(f"memtile_write:{tag}", "memtile", write, device, inp, mid),
        transfer_stage(f"memtile_read:{tag}", "memtile", read, device, mid, out),
    )


def dma_stage(prev: Node, node: Node, device: Device, hops: int, inp: str, out: str) -> StageSpec:
    """AIE1 link between tiles that are not memory neighbours: each producer row's buffer goes out
    through its tile DMA and is broadcast to the consumer column it feeds (rows in parallel)."""
    t = mv.dma_transfer(output_bytes(prev.plan, prev.types), device, hops)
    return transfer_stage(f"dma:{prev.name}->{node.name}", "dma", t, device, inp, out)


def _aie1_link_hops(design, prev: Node, node: Node) -> int | None:
    """Largest switch-hop distance of an AIE1 link, or None when every consumer tile is a memory
    neighbour of its producer's last tile (the buffer is shared, nothing moves)."""
    pl = design.placement
    worst = 0
    shared = True
    for r in range(prev.plan.cas_num):
        src = pl.tile(prev.name, r, prev.plan.cas_len - 1, False)
        for rr in range(node.plan.cas_num):
            dst = pl.tile(node.name, rr, r, False)
            d = abs(src[0] - dst[0]) + abs(src[1] - dst[1])
            shared = shared and d <= 1
            worst = max(worst, d)
    return None if shared else worst


def design_pipeline(design) -> Pipeline:
    """Translate a compiled design into its stages and ping-pong buffers."""
    device: Device = design.device
    layers = design.layers()
    if not layers:
        raise ValueError("the design has no planned layers")
    stages: list[StageSpec] = []
    buffers: dict[str, int] = {}

    def buf(name: str) -> str:
        buffers[name] = PING_PONG
        return name

    def rect(node: Node):
        return design.placement.rect(node.name)

    first = layers[0]
    cur = buf(f"in:{first.name}")
    stages.append(plio_in_stage(first, device, rect(first).row + rect(first).height - 1, cur))
    for i, node in enumerate(layers):
        if i:
            prev = layers[i - 1]
            if node.plan.link == "memtile":
                rp, rn = rect(prev), rect(node)
                hops_in = abs(rp.column + rp.width - 1 - rn.column) + rp.row + rp.height
                hops_out = rn.row + rn.height
                mid = buf(f"memtile:{prev.name}->{node.name}")
                nxt = buf(f"in:{node.name}")
                stages.extend(memtile_stages(prev, node, device, hops_in, hops_out, cur, mid, nxt))
                cur = nxt
            else:
                hops = _aie1_link_hops(design, prev, node) if device.memory_tile_rows == 0 else None
                if hops is not None:
                    nxt = buf(f"in:{node.name}")
                    stages.append(dma_stage(prev, node, device, hops, cur, nxt))
                    cur = nxt
        out = buf(f"out:{node.name}")
        stages.append(kernel_stage(node, device, cur, out)[0])
        cur = out
    last = layers[-1]
    stages.append(plio_out_stage(last, device, rect(last).row + rect(last).height - 1, cur))
    return Pipeline(tuple(stages), MappingProxyType(buffers))


def memory_tiles_used(design) -> int:
    layers = design.layers()
    return sum(
        mv.memtiles_for(*memtile_link(prev, node, design.device), design.device)
        for prev, node in zip(layers, layers[1:], strict=False)
        if node.plan.link == "memtile"
    )


def simulate(design, batches: int | None = None) -> SimResult:
    """Event-simulate ``design`` over ``batches`` graph iterations (default: to a steady state)."""
    return run_pipeline(design_pipeline(design), batches)
