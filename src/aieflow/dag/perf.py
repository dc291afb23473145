"""Performance model of a DAG design: every kernel and memory-tile transfer is a stage of a stage
graph whose edges are ping-pong buffers, run by the one simulation engine of every design kind
(``perf.simulate.run_pipeline``): the first-output latency is the longest path through the graph,
the steady-state interval the slowest stage's occupancy unless a residual's skip path, which holds
only as many batches as its buffers have slots, back-pressures its producer (then the simulation
shows the longer interval and the producer's stall).

Dense kernels use the chain's cycle model unchanged (``perf/simulate.kernel_stage``), memory-tile
and PLIO transfers the chain's movement model (``perf/movement``).  The residual Add, LayerNorm,
activation and softmax kernels have no published figure: their cycle counts below are **assumed**
constants (each says why), so their stages are the least certain part of the estimate.

:attr:`DagPerformance.skip_slack` reports, per residual Add, how far its inputs' first arrivals
are apart in intervals (the skip path's wait), and the stages' ``blocked_ns`` the stall it causes.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace

from .. import design_schema
from ..devices import Device
from ..passes.transport import PING_PONG
from ..perf import movement as mv
from ..perf.activation import (  # noqa: F401 - cnn/perf.py reads the constants here
    ACT_INTERP_CYCLES,
    ACT_TABLE_CYCLES,
    COPY_CYCLES,
    SM_EXP_CYCLES,
    SM_MAX_CYCLES,
    SM_OUT_CYCLES,
    SM_ROW_CYCLES,
    activation_cycles,
    softmax_cycles,
)
from ..perf.simulate import Pipeline, StageSpec, kernel_stage, run_pipeline
from .links import DagLink
from .plan import DagPlan, matmul_dims

# Residual Add (dag_kernels.h ResidualAdd): per 16 lanes two vector loads (one per load unit,
# one cycle), two upshifts, one accumulator add and one SRS issued in the vector slots, one
# store.  Assumed: 4 cycles per 16 lanes (the four vector-unit operations one after the other;
# no published figure isolates them).
ADD_CYCLES_PER_VECTOR = 4
# LayerNorm (dag_kernels.h LayerNorm), its scalar path: 64-bit statistics and normalisation.  Assumed (no
# figure): 4 cycles per element for S1 / S2 (a load, and a 64-bit multiply-add emulated with
# 32-bit scalar multiplies), 12 per element for z (a 64-bit multiply, the rounding, two stores),
# 4 per 16 lanes for the vector SRS, and 400 per row for the integer square root (31 iterations
# of a few scalar operations) and the 64-bit software divide.
LN_STATS_CYCLES = 4
LN_Z_CYCLES = 12
LN_VECTOR_CYCLES = 4
LN_ROW_CYCLES = 400
# The vector path (rows of whole, 32-byte aligned 16-lane vectors; every Mixer LayerNorm): per 16
# lanes, assumed (no published figure): 2 cycles for S1 / S2 (a load, an int8 -> int16 widening
# SRS, two 16x16 macs in acc64 lanes); 8 for z (a 16x16 mul, an accumulator subtract, an SRS, a
# 32x32 mul, which AIE-ML issues as several 16-bit multiplies, a conv_even SRS and a store); 6 for
# the output (a 32x16 mul, two upshifts, two accumulator adds, the output SRS and a store).  Per
# row: the two lane sums (two SRS + 16 scalar 64-bit adds each, ~40 cycles each) on top of
# LN_ROW_CYCLES.
LN_VEC_STATS_CYCLES = 2
LN_VEC_Z_CYCLES = 8
LN_VEC_OUT_CYCLES = 6
LN_VEC_ROW_CYCLES = 80


def layernorm_vectorised(features: int, in_bytes: int, out_bytes: int) -> bool:
    """Whether ``dag_kernels.h`` LayerNorm takes its vector path (its ``VEC`` condition)."""
    return features % 16 == 0 and (features * in_bytes) % 32 == 0 and (features * out_bytes) % 32 == 0 \
        and features < 32768
# MatMul (dag_kernels.h MatMul), assumed (no published figure isolates them): per output vector of 16
# lanes and per k one aie::mac of a broadcast int16 by a 16-lane int16 row into acc64 lanes, issued one
# per cycle (MM_MAC_CYCLES; a load and a broadcast in other slots of the same VLIW bundle), then 4
# cycles for the SRS and the store (MM_OUT_CYCLES); per sample the copy of B into its int16 [K][NV]
# form, COPY_CYCLES (2) per element (scalar, transposed when TRANS_B).
MM_MAC_CYCLES = 1
MM_OUT_CYCLES = 4
# Activation and softmax (dag_kernels.h Activation, Softmax on activation_fixed.h): perf/activation.py.
CALL_CYCLES = 16  # as perf/kernel.py's call_cycles (assumed there)
# An in-memory transpose of a port's block (dag_kernels.h transpose_block): a scalar copy per element.
TRANSPOSE_CYCLES = COPY_CYCLES


@dataclass(frozen=True)
class DagStage:
    name: str
    kind: str  # "plio", "kernel", "memtile"
    bound: str
    occupancy_ns: float
    delay_ns: float
    after: tuple[str, ...]  # stages that hand it its input
    starved_ns: float = 0.0  # steady state, per batch: waiting for an input
    blocked_ns: float = 0.0  # steady state, per batch: waiting for a free output slot (back-pressure)


@dataclass(frozen=True)
class DagPerformance:
    latency_ns: float
    interval_ns: float
    batch: int
    throughput_ops_per_s: float
    bound: str
    bottleneck: str
    tiles_used: int
    memory_tiles_used: int
    critical_path: tuple[str, ...]
    stages: tuple[DagStage, ...]
    skip_slack: dict  # residual add -> long-path latency / interval (> 2: the skip buffer fills)

    @property
    def sample_ns(self) -> float:
        return self.interval_ns / self.batch

    def to_json(self) -> dict:
        """design.json's common ``performance`` (each stage's occupancy per batch in ``breakdown``)
        plus the DAG's bottleneck, critical path, stages and skip slack."""
        return design_schema.performance(
            latency_ns=self.latency_ns, interval_ns=self.interval_ns, batch=self.batch,
            throughput_ops_per_s=self.throughput_ops_per_s, bound=self.bound, tiles_used=self.tiles_used,
            memory_tiles_used=self.memory_tiles_used,
            parts=[(s.name, s.occupancy_ns, {"kind": s.kind, "bound": s.bound}) for s in self.stages],
            extra={"bottleneck": self.bottleneck, "critical_path": list(self.critical_path),
                   "stages": [asdict(s) for s in self.stages], "skip_slack": dict(self.skip_slack)})


def rows_kernel_cycles(plan: DagPlan, name: str) -> float:
    rp = plan.rows[name]
    elems = rp.rows_per_part * rp.features
    ports = 3 if rp.op in ("add", "matmul") else 2
    if rp.op == "matmul":
        return CALL_CYCLES + matmul_cycles(plan, name) + mv.lock_handoff_cycles(ports)
    if rp.op == "add":
        body = math.ceil(elems / 16) * ADD_CYCLES_PER_VECTOR
    elif rp.op == "activation":
        body = activation_cycles(elems, bool(plan.node(name).types.segment_bits))
    elif rp.op == "softmax":
        body = softmax_cycles(rp.rows_per_part, rp.features)
    else:
        vectors = math.ceil(rp.features / 16) * rp.rows_per_part
        t = plan.node(name).types
        if layernorm_vectorised(rp.features, t.input.container_bits // 8, t.output.container_bits // 8):
            body = (vectors * (LN_VEC_STATS_CYCLES + LN_VEC_Z_CYCLES + LN_VEC_OUT_CYCLES)
                    + rp.rows_per_part * (LN_ROW_CYCLES + LN_VEC_ROW_CYCLES))
        else:
            body = (elems * (LN_STATS_CYCLES + LN_Z_CYCLES) + vectors * LN_VECTOR_CYCLES
                    + rp.rows_per_part * LN_ROW_CYCLES)
    transposes = sum(rp.in_transposed) + int(rp.out_transposed)
    return CALL_CYCLES + body + transposes * elems * TRANSPOSE_CYCLES + mv.lock_handoff_cycles(ports)


def matmul_cycles(plan: DagPlan, name: str) -> int:
    """The MatMul kernel body of one part (the assumed constants above)."""
    rp = plan.rows[name]
    m, k, n = matmul_dims(plan.graph, plan.node(name), plan.operands[name])
    samples = rp.rows_per_part // rp.per_sample
    vectors = math.ceil(n / 16)
    return samples * (k * n * COPY_CYCLES + m * vectors * (k * MM_MAC_CYCLES + MM_OUT_CYCLES))


def _hops(device: Device, row: int) -> int:
    return device.memory_tile_rows + row + 1


def estimate_dag(plan: DagPlan, device: Device, placement=None) -> DagPerformance:
    stages: dict[str, DagStage] = {}
    ns = lambda c: mv.cycles_to_ns(c, device)  # noqa: E731

    def row_of(name: str | None) -> int:
        return placement.rect(name).row if (placement is not None and name) else 0

    kernel_of: dict[str | None, str] = {None: "plio_in"}
    first_bytes = plan.batch * math.prod(plan.graph.tensors[plan.graph.inputs[0]].shape) * (
        plan.graph.tensors[plan.graph.inputs[0]].dtype.container_bits // 8)
    t = mv.plio_transfer(first_bytes, device, _hops(device, 0))
    stages["plio_in"] = DagStage("plio_in", "plio", t.bound, ns(t.busy_cycles), ns(t.latency_cycles), ())
    macs = 0
    for name in plan.compute:
        node = plan.node(name)
        if node.op == "dense":
            spec, _ = kernel_stage(node, device)
            stages[name] = DagStage(name, "kernel", spec.bound, spec.occupancy_ns, spec.delay_ns, ())
            macs += spec.macs
        else:
            stages[name] = DagStage(name, "kernel", "compute", ns(rows_kernel_cycles(plan, name)), 0.0, ())
            if node.op == "matmul":  # the dynamic products count as MACs too
                m, k, n = matmul_dims(plan.graph, node, plan.operands[name])
                macs += plan.batch * m * k * n
        kernel_of[name] = name
    for link in plan.links:
        _link_stages(plan, link, device, stages, kernel_of, row_of)
    finish: dict[str, float] = {}
    best_pred: dict[str, str | None] = {}

    def done(s: str) -> float:  # finish time of the first batch at stage s (longest path)
        if s not in finish:
            st = stages[s]
            ends = {p: done(p) for p in st.after}
            best_pred[s] = max(ends, key=lambda p: ends[p]) if ends else None
            finish[s] = max(ends.values(), default=0.0) + st.occupancy_ns + st.delay_ns
        return finish[s]

    for s in stages:
        done(s)
    end = "plio_out"
    path = [end]
    while best_pred[path[-1]] is not None:
        path.append(best_pred[path[-1]])
    sim = run_pipeline(stage_graph(stages, end))
    interval = sim.interval_ns
    stalls = {st.name: st for st in sim.stages}
    stages = {k: replace(v, starved_ns=stalls[k].starved_ns, blocked_ns=stalls[k].blocked_ns) for k, v in stages.items()}
    bottleneck = max(stages.values(), key=lambda s: s.occupancy_ns)
    slack = {}
    for name in plan.compute:
        if plan.node(name).op == "add":
            ins = stages[name].after
            spread = max(finish[p] for p in ins) - min(finish[p] for p in ins)
            slack[name] = spread / interval if interval else 0.0
    memtiles = sum(link.memtiles(device) for link in plan.links)
    return DagPerformance(
        latency_ns=sim.latency_ns, interval_ns=interval, batch=plan.batch,
        throughput_ops_per_s=2 * macs / (interval * 1e-9) if interval else 0.0,
        bound=bottleneck.bound, bottleneck=bottleneck.name, tiles_used=plan.tiles, memory_tiles_used=memtiles,
        critical_path=tuple(reversed(path)), stages=tuple(stages.values()), skip_slack=slack,
    )


def stage_graph(stages: dict[str, DagStage], sink: str) -> Pipeline:
    """The stages as the simulation engine's stage graph: each stage writes one ping-pong buffer
    (a kernel's output, a memory-tile shared buffer, a consumer's input) that every stage listing
    it in ``after`` reads."""
    specs = tuple(
        StageSpec(st.name, st.kind, st.bound, st.occupancy_ns, st.delay_ns,
                  tuple(f"out:{p}" for p in st.after) or None, None if st.name == sink else f"out:{st.name}")
        for st in stages.values()
    )
    return Pipeline(specs, {f"out:{k}": PING_PONG for k in stages if k != sink}, sink=sink)


def _link_stages(plan: DagPlan, link: DagLink, device: Device, stages: dict, kernel_of: dict, row_of) -> None:
    """A link's memory-tile write (all producer ports in parallel, one buffer each) and read (its
    ports in parallel; a Dense column's read is broadcast up the column)."""
    ns = lambda c: mv.cycles_to_ns(c, device)  # noqa: E731
    eb = link.element_bytes
    sh = link.shards[0]
    w_ports = len(sh.writes)
    w_bytes = max(tl.elements for _, tl in sh.writes) * eb
    r_ports = sum(len(s.reads) for s in link.shards)
    r_bytes = max(tl.elements for s in link.shards for _, tl in s.reads) * eb
    src = link.source
    producers = tuple(kernel_of[p] for p in src.producers) + (("plio_in",) if src.reads_input else ())
    tag = link.name
    row = max((row_of(p) for p in src.producers), default=0)
    tw = mv.memtile_transfer(w_bytes, w_ports, device, _hops(device, row))
    stages[f"write:{tag}"] = DagStage(f"write:{tag}", "memtile", tw.bound, ns(tw.busy_cycles), ns(tw.latency_cycles),
                                      producers)
    if link.consumer is None:
        tr = mv.plio_transfer(r_bytes, device, _hops(device, 0))
        stages["plio_out"] = DagStage("plio_out", "plio", tr.bound, ns(tr.busy_cycles), ns(tr.latency_cycles),
                                      (f"write:{tag}",))
        return
    tr = mv.memtile_transfer(r_bytes, r_ports, device, _hops(device, row_of(link.consumer)), len(link.shards))
    stages[f"read:{tag}"] = DagStage(f"read:{tag}", "memtile", tr.bound, ns(tr.busy_cycles), ns(tr.latency_cycles),
                                     (f"write:{tag}",))
    old = stages[link.consumer]
    stages[link.consumer] = DagStage(old.name, old.kind, old.bound, old.occupancy_ns, old.delay_ns,
                                     (*old.after, f"read:{tag}"))
