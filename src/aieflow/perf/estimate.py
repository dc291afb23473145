"""Performance of a design (latency, interval, throughput, utilisation) and a quick per-layer cost.

``estimate(design)`` runs the pipeline simulation (``simulate.py``) on the kernel and movement models
and summarises it; ``estimate_plan(node, device)`` costs one planned layer in closed form (no
simulation, the stage costs of ``perf/costs.py`` that the compiled design's mapped graph carries)
so a planner can compare candidate plans cheaply.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from types import MappingProxyType
from typing import Any

from ..devices import Device, get_device
from ..ir import Node
from ..mapped.place import Rect
from . import costs
from .kernel import KernelCycles
from .simulate import (
    SimResult,
    StageSpec,
    chain_resources,
    design_pipeline,
    input_bytes,
    output_bytes,
    run_pipeline,
)


@dataclass(frozen=True)
class StagePerformance:
    name: str
    kind: str  # "plio", "kernel", "memtile", "dma"
    tiles: int  # compute tiles (kernel stages), 0 for transfers
    cycles: float  # busy AIE-clock cycles per batch
    busy: float  # share of the steady-state interval the stage is busy
    efficiency: float | None  # real MACs / (tiles x peak MACs/cycle x busy cycles); None for transfers
    bound: str
    starved_ns: float  # waiting for input, per batch (steady state)
    blocked_ns: float  # waiting for a free output buffer, per batch (back-pressure)


@dataclass(frozen=True)
class Performance:
    latency_ns: float  # first batch in -> its last output word out
    interval_ns: float  # steady state, per batch (each replica takes a new batch this often)
    batch: int  # samples per batch (graph iteration of one replica)
    throughput_ops_per_s: float  # 2 * MACs per sample * batch * replicas / interval
    bound: str  # "compute", "memory", "stream", "plio" or "pl": the bottleneck stage's limit
    tiles_used: int  # tiles the layer rectangles occupy (kernels and neighbour-memory lenders), all replicas
    memory_tiles_used: int  # all replicas
    stages: tuple[StagePerformance, ...]  # one replica (they are identical and independent)
    replicas: int = 1
    clock_hz: float = field(kw_only=True)  # the AIE clock the stages' cycles run at

    @property
    def bottleneck(self) -> StagePerformance:
        return max(self.stages, key=lambda s: s.busy)

    def breakdown_parts(self) -> list[tuple[str, float, dict[str, Any]]]:
        """``protocol.Performance``: each stage's busy AIE-clock cycles per batch, in ns."""
        return [(s.name, s.cycles / self.clock_hz * 1e9, {"kind": s.kind, "bound": s.bound}) for s in self.stages]

    def extra_json(self) -> dict[str, Any]:
        """The replicas and the stages as a list of dicts."""
        return {"replicas": self.replicas, "stages": [asdict(s) for s in self.stages]}


def _stage_perf(spec: StageSpec, sim_busy: float, starved: float, blocked: float) -> StagePerformance:
    eff = None
    if spec.kind == "kernel" and spec.cycles:
        eff = spec.macs / (spec.tiles * spec.peak_macs_per_cycle * spec.cycles)
    return StagePerformance(spec.name, spec.kind, spec.tiles, spec.cycles, sim_busy, eff, spec.bound, starved, blocked)


def estimate(design, batches: int | None = None) -> Performance:
    """Simulate ``design`` to a steady state and summarise its performance."""
    pipe = design_pipeline(design)
    sim: SimResult = run_pipeline(pipe, batches)
    layers = design.layers()
    batch = design.config.batch
    replicas = len(design.placement.replicas)
    macs = sum(n.plan.in_features * n.plan.out_features for n in layers)
    tiles, memtiles = chain_resources(design)  # the mapped graph's: kernels and lenders, memory tiles
    stages = tuple(
        _stage_perf(spec, st.busy, st.starved_ns, st.blocked_ns) for spec, st in zip(pipe.stages, sim.stages, strict=True)
    )
    return Performance(
        latency_ns=sim.latency_ns,
        interval_ns=sim.interval_ns,
        batch=batch,
        throughput_ops_per_s=2.0 * macs * batch * replicas / (sim.interval_ns * 1e-9),
        bound=sim.bound,
        tiles_used=tiles,
        memory_tiles_used=memtiles,
        stages=stages,
        replicas=replicas,
        clock_hz=design.device.clock_hz,
    )


# ----------------------------------------------------------------------------- one layer


@dataclass(frozen=True)
class PlanEstimate:
    """Closed-form cost of one planned layer with its input (and optionally output) transfer."""

    kernels: Mapping[str, KernelCycles]  # per tile role: "single" | "first" | "middle" | "last"
    compute_ns: float  # kernel occupancy per batch (slowest role, lock hand-offs included)
    input_ns: float  # the transfer that fills its input buffers
    output_ns: float  # the transfer that drains its output buffers (0 when not asked for)
    interval_ns: float  # max of the three: they overlap through the ping-pong buffers
    latency_ns: float  # one batch through input, kernels (cascade lag included) and output
    bound: str
    efficiency: float  # real MACs / (tiles x peak x interval)


def estimate_plan(node: Node, device: Device | str, *, output: str | None = None) -> PlanEstimate:
    """Cost ``node`` (with ``types`` and ``plan`` set) without a design or placement, from the cost
    functions every lowering attaches to the mapped graph (``perf/costs.py``), so a layer alone costs
    here what its stages cost in a compiled design placed at the array's bottom left.

    The input transfer follows ``node.plan.link`` ("plio", "memtile" read, "buffer" costed as a
    tile DMA from the row below the layer, the worst case of a neighbour without a placement);
    ``output`` adds a "plio" or "memtile" write for the output side.  The switch hops are
    ``perf/costs``' rules for a rectangle at column 0, row 0.
    """
    device = get_device(device)
    plan = node.plan
    at = Rect(node.name, 0, 0, plan.cas_len, plan.cas_num)
    top = plan.cas_num - 1
    kern, kernels = costs.dense_kernel_roles(node, device)
    nin, nout = input_bytes(plan, node.types), output_bytes(plan, node.types)
    name = f"input:{node.name}"
    if plan.link == "plio":
        inp = costs.plio(name, nin, device, top)
    elif plan.link == "memtile":
        # one shard (memory tile) per group of memtile_channels columns (passes/transport.py)
        shards = -(-plan.cas_len // device.memtile_channels)
        hops = costs.memtile_link_hops(device, [], at)[1]
        inp = costs.memtile(name, nin, plan.cas_len, device, hops, shards)
    else:
        inp = costs.tile_dma(name, nin, device, top + 1)
    stages = [inp, kern]
    if output == "plio":
        stages.append(costs.plio(f"output:{node.name}", nout, device, top))
    elif output == "memtile":
        hops = costs.memtile_link_hops(device, [at])[0]
        stages.append(costs.memtile(f"output:{node.name}", nout, plan.cas_num, device, hops))
    elif output is not None:
        raise ValueError(f"output must be None, 'plio' or 'memtile', not {output!r}")
    neck = max(stages, key=lambda s: s.occupancy_ns)
    interval = neck.occupancy_ns
    latency = sum(s.occupancy_ns + s.delay_ns for s in stages)
    peak = plan.tiles * kern.peak_macs_per_cycle * device.clock_hz * 1e-9  # MACs per ns
    return PlanEstimate(
        kernels=MappingProxyType(dict(kernels)),
        compute_ns=kern.occupancy_ns,
        input_ns=inp.occupancy_ns,
        output_ns=stages[-1].occupancy_ns if output else 0.0,
        interval_ns=interval,
        latency_ns=latency,
        bound=neck.bound,
        efficiency=kern.macs / (peak * interval) if interval else 0.0,
    )
