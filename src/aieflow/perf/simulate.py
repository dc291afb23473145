"""Transaction-level simulation of a design: whole buffers move, kernels fire on full buffers.

The one simulation engine of every design kind's estimate (:func:`run_pipeline`): a stage graph
whose edges are ping-pong buffers.  A Dense chain is its simplest case; each batch (one graph
iteration) flows through stages:

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

Stage graphs (the DAG, the CNN stream mapping, recurrent stacks): a stage may read several buffers
(an Add, a concat's memory-tile write) and starts batch b only when b is complete in all of them; a
buffer has one producer and may have several consumers (fan-out: a kernel's output read by several
memory-tile links), and its slot for batch b is free once every consumer has released batch
``b - slots``.  So a residual's skip path, which holds as many batches as its buffers have slots,
stalls its producer when the long path is longer than that: the back-pressure a closed form can
only flag.

Engine: the rules above make every start time the latest of a few earlier times (the stage's
previous start plus its occupancy, the producer's finish of the same batch, the consumer freeing the
slot ``slots`` batches back, the row's tail ``in-flight`` batches back), so the simulation is a
max-plus recurrence evaluated batch by batch, stage by stage in pipeline order: O(stages) work per
batch and no event queue.  It replaced an event-driven (heapq) simulation of the same rules and
reproduces it: the same completion and stall times, to 1e-12 ns, on 3,000 random chains with 1- to
3-slot buffers and cascade delays when run for the same number of batches; the hand-built pipeline
cases in tests/test_perf_model.py predate it.  It is deterministic by construction.  SimPy was not
used: the model needs no processes, interrupts or shared resources, and it would be a new
dependency.

Steady state: with constant stage times the recurrence becomes periodic, every time of batch ``b``
equal to that of batch ``b - p`` plus ``p`` intervals.  By default the simulation stops as soon as
the times of the last few batches (as many as any rule looks back) are such a translate for some
period ``p <= 12`` (a chain settles with p <= 4; a stage graph whose skip path back-pressures its
producer can alternate fast and slow batches with a longer period, 7 in the random graphs of
tests/test_sim_graph.py), because every later batch then repeats them; the interval and the
per-batch stall times are those of the period.  When no period is found (typically a stage
upstream of the bottleneck that is only slightly faster, so its buffers take many batches to fill)
it runs ``4 x stages + 8`` batches (at least enough to look for every period; capped at
``STEP_BUDGET`` stage-batch steps, at least 64 batches) and averages over the second half; the
interval is then still exact in practice (the output is periodic from the first batches), the
stall split of such near-bottleneck stages is approximate.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ..devices import Device
from ..ir import Node
from ..ops.dense import DensePlan, DenseTypes
from . import movement as mv
from .kernel import KernelCycles, layer_kernel_cycles

# Kernel bound -> design bound.  Local-memory loads/stores are "memory", the cascade is a stream.
_KERNEL_BOUND = {"compute": "compute", "overhead": "compute", "load": "memory", "store": "memory", "cascade": "stream",
                 "post": "compute"}


@dataclass(frozen=True)
class StageSpec:
    """One resource a batch passes through."""

    name: str
    kind: str  # "plio", "kernel", "memtile", "dma"
    bound: str  # what limits it: "compute", "memory", "stream", "plio"
    occupancy_ns: float  # the resource is busy this long per batch
    delay_ns: float = 0.0  # the output end starts this much after the input end (latency only)
    input: str | tuple[str, ...] | None = None  # buffer(s) read (None: the host supplies batches at will)
    output: str | None = None  # buffer written (None: the host drains)
    tiles: int = 0
    cycles: float = 0.0  # busy AIE-clock cycles per batch
    macs: int = 0  # real (unpadded) MACs per batch, kernel stages only
    peak_macs_per_cycle: float = 0.0  # per tile

    @property
    def reads(self) -> tuple[str, ...]:
        """The buffers the stage reads (all of them hold batch b before it starts b)."""
        if self.input is None:
            return ()
        return (self.input,) if isinstance(self.input, str) else tuple(self.input)


@dataclass(frozen=True)
class Pipeline:
    stages: tuple[StageSpec, ...]
    buffers: Mapping[str, int]  # buffer -> slots
    # Recurrent dependencies (producer stage, consumer stage): the consumer may not start batch
    # b + 1 (time step t + 1) before the producer has finished batch b -- e.g. a recurrent layer's
    # next step needs the hidden state its aggregation stage produces.  The producer is downstream.
    recurrences: tuple[tuple[str, str], ...] = ()
    # The stage whose completions are the design's outputs (None: the last in producer order, the
    # last stage of a chain).  A stage graph with several outputs names the one that finishes last.
    sink: str | None = None


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


MAX_PERIOD = 12  # steady-state periods (in batches) the default run looks for (stage graphs reach 7)
# Default run without a period found: 4 batches per stage (+ 8), at most about this many
# stage-batch steps (~0.3 s) but never fewer than 64 batches.
STEP_BUDGET = 100_000
_REL_TOL = 1e-9  # two times are "equal" within this share of the interval


def stage_order(upstream: list[list[int]]) -> list[int]:
    """Stages with producers before consumers, ``upstream[j]`` listing the stages ``j`` reads
    from: a topological order that keeps the list order where it can (the list order itself when
    the list is already a chain)."""
    state = [0] * len(upstream)  # 0 new, 1 on the path, 2 placed
    order: list[int] = []
    for root in range(len(upstream)):
        stack = [(root, 0)]
        while stack:
            j, k = stack.pop()
            if k == 0:
                if state[j] == 2:
                    continue
                if state[j] == 1:
                    raise ValueError("the pipeline's buffers form a cycle")
                state[j] = 1
            if k < len(upstream[j]):
                stack.append((j, k + 1))
                u = upstream[j][k]
                if state[u] == 1:
                    raise ValueError("the pipeline's buffers form a cycle")
                if state[u] == 0:
                    stack.append((u, 0))
            else:
                state[j] = 2
                order.append(j)
    return order


def _order(pipe: Pipeline) -> list[int]:
    producer = {s.output: i for i, s in enumerate(pipe.stages) if s.output is not None}
    return stage_order([[producer[b] for b in s.reads if b in producer] for s in pipe.stages])


def run_pipeline(
    pipe: Pipeline, batches: int | None = None, *, phases: Sequence[tuple[Pipeline, int]] = ()
) -> SimResult:
    """Simulate ``pipe`` over ``batches`` batches (default: until a steady state, see the module
    docstring).

    ``phases``: batches whose stages take other times (a GEMM's blocks with pc > 0 read C before
    writing it): ``(pipeline, count)`` pairs run in order, ``count`` batches each, every stage
    occupied as long as in that pipeline, which must have ``pipe``'s stages (names, buffers read
    and written) and buffers; the run is their batches (``batches`` must then be None), without
    looking for a steady state.

    A stage without ``delay`` starts when it is free, its next batch is in its input buffer and
    an output slot is free; it holds both for ``occupancy``.  A stage with ``delay`` (a cascade
    row) starts in two phases: the head takes the input slot (and frees it ``occupancy`` later,
    in its own time frame), and ``delay`` later the tail needs an output slot and is busy for
    ``occupancy``.  Up to ``1 + delay // occupancy`` batches can be inside the row at once; when
    the tail waits for an output slot the row fills and the head stalls (the 2-deep cascade FIFO
    back-pressures it).  Every buffer has one producer and one consumer; a buffer nobody consumes
    deadlocks once its slots are full.  A ``recurrences`` entry adds one more rule: the consumer's
    batch ``b`` also waits for the producer's batch ``b - 1`` to finish (counted as starved).  A
    consumer that reads no buffer (only the value carried from the previous batch: a recurrent
    layer's h return) has nothing to move at batch 0 (the initial state is in place: the U kernels
    start step 0 from h = 0 without reading, ``rnn_kernels.h``): its batch 0 takes no time.
    """
    stages = pipe.stages
    n_stages = len(stages)
    if batches is not None and batches < 2:
        raise ValueError("need at least two batches to measure an interval")
    order = _order(pipe)
    producer: dict[str, int] = {}
    for i, s in enumerate(stages):
        if s.output is not None:
            if s.output in producer:
                raise ValueError(f"buffer {s.output!r} has two producers")
            producer[s.output] = i
    consumers: dict[str, list[int]] = {}
    for i, s in enumerate(stages):
        for b in s.reads:
            consumers.setdefault(b, []).append(i)
    for name, k in pipe.buffers.items():
        if k < 1:
            raise ValueError(f"buffer {name!r} has no slots")
    occ = [s.occupancy_ns for s in stages]
    plan = _phase_plan(pipe, phases)  # per batch, the stage occupancies (None: ``occ`` throughout)
    if plan is not None:
        if batches is not None:
            raise ValueError("give either batches or phases")
        batches = len(plan)
    inflight = [1 + int(s.delay_ns // s.occupancy_ns) if s.delay_ns and s.occupancy_ns > 0 else 1 for s in stages]
    if any(b not in producer for s in stages for b in s.reads):
        raise ValueError("a stage reads a buffer no stage writes")
    src = [[producer[b] for b in s.reads] for s in stages]
    dst = [(consumers.get(s.output, []), pipe.buffers[s.output]) if s.output is not None else ([], 0) for s in stages]
    index = {s.name: i for i, s in enumerate(stages)}
    feedback: list[list[int]] = [[] for _ in stages]  # stage -> producers it waits for, one batch back
    for prod, cons in pipe.recurrences:
        if prod not in index or cons not in index:
            raise ValueError(f"recurrence {prod!r} -> {cons!r} names a stage the pipeline does not have")
        feedback[index[cons]].append(index[prod])
    carried_only = {i for i in range(n_stages) if feedback[i] and not src[i]}  # nothing to move at batch 0
    if pipe.sink is not None and pipe.sink not in index:
        raise ValueError(f"the pipeline has no stage {pipe.sink!r}")
    last = order[-1] if pipe.sink is None else index[pipe.sink]
    lag = max([1, *inflight, *(k for _, k in dst)])  # how far back any rule looks
    n = batches if batches is not None else min(max(4 * n_stages + 8, 2 * lag + 4 * MAX_PERIOD),
                                                max(64, STEP_BUDGET // n_stages))

    head: list[list[float]] = [[] for _ in stages]  # head (input side) start per batch
    tail: list[list[float]] = [[] for _ in stages]  # tail (output side) start per batch
    freed: list[list[float]] = [[] for _ in stages]  # head + the batch's occupancy: input slot released
    done: list[list[float]] = [[] for _ in stages]  # tail + the batch's occupancy: output complete
    starved: list[list[float]] = [[] for _ in stages]
    blocked: list[list[float]] = [[] for _ in stages]
    period = 0
    for b in range(n):
        if plan is not None:
            occ = plan[b]
        for i in order:
            s = stages[i]
            free_prev = freed[i][b - 1] if b else 0.0
            t_ready = 0.0
            for p in src[i]:
                t_ready = max(t_ready, done[p][b])
            if b:
                for f in feedback[i]:
                    t_ready = max(t_ready, done[f][b - 1])
            cs, k = dst[i]
            t_slot = 0.0
            if s.output is not None and b >= k:
                if not cs:
                    raise RuntimeError(f"pipeline deadlocked: nothing drains buffer {s.output!r}")
                for c in cs:
                    t_slot = max(t_slot, freed[c][b - k])
            ready = max(free_prev, t_ready)
            idle = b == 0 and i in carried_only
            if idle or not s.delay_ns:
                start = end = max(ready, t_slot)
                wait = start - ready
            else:
                start = max(ready, tail[i][b - inflight[i]] if b >= inflight[i] else 0.0)
                want = start + s.delay_ns
                end = max(want, done[i][b - 1] if b else 0.0, t_slot)
                wait = start - ready + end - want
            head[i].append(start)
            tail[i].append(end)
            freed[i].append(start + (0.0 if idle else occ[i]))
            done[i].append(end + (0.0 if idle else occ[i]))
            starved[i].append(max(0.0, min(start, t_ready) - free_prev))
            blocked[i].append(wait)
        if batches is None and b >= 2 * lag + 2:
            period = _period(head, tail, b, lag, last, min(MAX_PERIOD, (b - 2 * lag) // 2))
            if period:
                break

    out = list(done[last])
    if period:
        interval = (out[-1] - out[-1 - period]) / period
        window = period
    else:
        window = len(out) // 2
        interval = (out[-1] - out[-1 - window]) / window
    stats = tuple(
        StageStats(
            s.name,
            s.kind,
            s.bound,
            s.occupancy_ns,
            s.occupancy_ns / interval if interval else 0.0,
            sum(starved[i][-window:]) / window,
            sum(blocked[i][-window:]) / window,
        )
        for i, s in enumerate(stages)
    )
    neck = max(stages, key=lambda s: s.occupancy_ns)
    return SimResult(out[0], interval, len(out), tuple(out), stats, neck.name, neck.bound)


def _phase_plan(pipe: Pipeline, phases: Sequence[tuple[Pipeline, int]]) -> list[list[float]] | None:
    """Per batch, every stage's occupancy under ``phases`` (see :func:`run_pipeline`)."""
    if not phases:
        return None
    shape = [(s.name, s.reads, s.output) for s in pipe.stages]
    plan: list[list[float]] = []
    for ph, count in phases:
        if [(s.name, s.reads, s.output) for s in ph.stages] != shape or dict(ph.buffers) != dict(pipe.buffers):
            raise ValueError("a phase's pipeline must have the same stages and buffers")
        if count < 0:
            raise ValueError("a phase needs a count of at least 0 batches")
        row = [s.occupancy_ns for s in ph.stages]
        plan += [row] * count
    if len(plan) < 2:
        raise ValueError("need at least two batches to measure an interval")
    return plan


def _period(head: list[list[float]], tail: list[list[float]], b: int, lag: int, last: int, most: int) -> int:
    """The smallest p <= ``most`` for which the last ``lag`` batches' times of every stage are
    those of ``p`` batches earlier plus one common shift (0 when there is none yet)."""
    for p in range(1, most + 1):
        shift = tail[last][b] - tail[last][b - p]
        if shift <= 0:
            continue
        tol = _REL_TOL * shift
        if all(
            abs(x[b - j] - x[b - j - p] - shift) <= tol
            for times in (head, tail)
            for x in times
            for j in range(lag)
        ):
            return p
    return 0


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


def design_pipeline(design) -> Pipeline:
    """The chain's stage graph: the design lowered into its costed mapped graph
    (``passes/emit.lower_chain``, its costs from ``perf/costs.py``) and built by ``mapped.estimate``.  Both
    are built once per planned graph and placement (``mapped/cache.py``): the lowering the project
    was emitted from when there is one (every replica carries copy 0's costs, so the copies merge
    into the same stages), else copy 0 alone (a search's candidate: the others add no stage or edge)."""
    from ..mapped.cache import memo, peek
    from ..mapped.estimate import pipeline
    from ..passes.emit import lowered_chain

    g, device, pl = design.graph, design.device, design.placement

    def build() -> Pipeline:
        mg = peek(g, "chain:None", (device, pl)) or lowered_chain(g, device, pl, copies=1)
        return pipeline(mg)

    return memo(g, "chain:pipeline", (device, pl), build)


def chain_resources(design) -> tuple[int, int]:
    """(compute tiles, memory tiles) of every replica, counted on the chain's mapped graph
    (``mapped.estimate.resources``: its kernels and the lenders whose memory they borrow, the
    memory tiles of its shared buffers), as the DAG's and the CNN's are: the whole lowering when
    the project was emitted from one, else copy 0's times the replicas (the copies are identical)."""
    from ..mapped.cache import peek
    from ..mapped.estimate import resources
    from ..passes.emit import lowered_chain

    g, device, pl = design.graph, design.device, design.placement
    whole = peek(g, "chain:None", (device, pl))
    if whole is not None:
        return resources(whole, device)
    tiles, mem = resources(lowered_chain(g, device, pl, copies=1), device)
    return tiles * len(pl.replicas), mem * len(pl.replicas)


def simulate(design, batches: int | None = None) -> SimResult:
    """Event-simulate ``design`` over ``batches`` graph iterations (default: to a steady state)."""
    return run_pipeline(design_pipeline(design), batches)
