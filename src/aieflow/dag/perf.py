"""Performance model of a DAG design: the costs its lowering attaches to the mapped graph
(:func:`kernel_cost`, :func:`link_costs`, :func:`plio_in_cost`: every node's kernels one stage,
every link a memory-tile write and read stage), the stage graph ``mapped.estimate`` builds from
that graph alone, run by the one simulation engine of every design kind
(``perf.simulate.run_pipeline``): the first-output latency is the longest path through the graph,
the steady-state interval the slowest stage's occupancy unless a residual's skip path, which holds
only as many batches as its buffers have slots, back-pressures its producer (then the simulation
shows the longer interval and the producer's stall).

Dense kernels, memory-tile links and PLIOs cost what they cost in the chain: one function each in
``perf/costs.py`` (the chain's cycle model ``perf/simulate.kernel_stage``, the movement model
``perf/movement``).  The residual Add, LayerNorm,
activation and softmax kernels have no published figure: their cycle counts below are **assumed**
constants (each says why), so their stages are the least certain part of the estimate.

:attr:`DagPerformance.skip_slack` reports, per residual Add, how far its inputs' first arrivals
are apart in intervals (the skip path's wait), and the stages' ``blocked_ns`` the stall it causes.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from .. import design_schema
from ..devices import Device
from ..mapped.estimate import resources, to_pipeline
from ..mapped.estimate import stage_graph as mapped_stages
from ..mapped.ir import Cost, MappedGraph
from ..passes.place import Placement, Rect
from ..perf import costs
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
    activation_form,
    activation_form_cycles,
    softmax_cycles,
    softmax_vector_cycles,
    softmax_vectorised,
)
from ..perf.kernel import cascade_words
from ..perf.simulate import run_pipeline
from .links import DagLink
from .plan import DagPlan, input_tensor, mask_input, mask_pitch, masked, matmul_dims, matrix_shape

# Residual Add (dag_kernels.h ResidualAdd): per 16 lanes two vector loads (one per load unit,
# one cycle), two upshifts, one accumulator add and one SRS issued in the vector slots, one
# store.  Assumed: 4 cycles per 16 lanes (the four vector-unit operations one after the other;
# no published figure isolates them).
ADD_CYCLES_PER_VECTOR = 4
# LayerNorm (dag_kernels.h LayerNorm), its scalar path: 64-bit statistics and normalisation.  Assumed (no
# figure): 4 cycles per element for S1 / S2 (a load, and a 64-bit multiply-add emulated with
# 32-bit scalar multiplies), 12 per element for z (a 64-bit multiply, the rounding, two stores),
# 4 per 16 lanes for the vector SRS.  Both paths, per row (LN_ROW_CYCLES): Q = n S2 - S1^2 + E (two
# 64-bit multiplies emulated with 32-bit scalar multiplies), G by a 6-step binary search of the bit
# length (~3 cycles a step), u = Q << 2G split in two int32 and four stores: assumed 32.  Per group of
# 16 rows (LN_RECIP_GROUP_CYCLES) the square roots and reciprocals at once (row_recip.h
# layernorm_inv16): counted from the code, 129 vector operations of which 28 are 32 x 32-bit
# multiplies into 64-bit lanes; assumed one operation per cycle and 4 cycles per 32 x 32 multiply
# (AIE-ML has no native 32-bit multiplier lanes: the API composes it from 16-bit ones), so
# 129 + 28 * 3 = 213.  (Was 400 per row: a bit-by-bit square root and a 64-bit software divide.)
LN_STATS_CYCLES = 4
LN_Z_CYCLES = 12
LN_VECTOR_CYCLES = 4
LN_ROW_CYCLES = 32
LN_RECIP_GROUP_CYCLES = 213
# The vector path (rows of whole, 32-byte aligned 16-lane vectors; every Mixer LayerNorm): per 16
# lanes, assumed (no published figure): 2 cycles for S1 / S2 (a load, an int8 -> int16 widening
# SRS, two 16x16 macs in acc64 lanes); 8 for z (a 16x16 mul, an accumulator subtract, an SRS, a
# 32x32 mul, which AIE-ML issues as several 16-bit multiplies, a conv_even SRS and a store); 6 for
# the output (a 32x16 mul, two upshifts, two accumulator adds, the output SRS and a store).  Per
# row: the two lane sums (two SRS + 16 scalar 64-bit adds each, ~40 cycles each).
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
# The cascade over K (RowsPlan.cascade, docs/attention.md "Long products"): per output vector a tile that
# continues partial sums reads the 16 accumulator lanes from the cascade and a tile that passes them on
# writes them, as cascade words of the catalog's cascade width (Generation.cascade_bits: 512 bits on AIE-ML
# and AIE-MLv2, AM020 / AM027; 16 acc64 lanes = 2 words), one word per cycle each way (perf/kernel.py's
# Dense cascade, the same assumption).  The tiles of a cascade run concurrently, so the stage is the
# slowest tile: a middle one (reads and writes) or the last (reads, then the SRS and the store).
# Activation and softmax (dag_kernels.h Activation, Softmax: vector forms or activation_fixed.h): perf/activation.py.
CALL_CYCLES = 16  # as perf/kernel.py's call_cycles (assumed there)
# An in-memory transpose of a port's block (dag_kernels.h transpose_block): a scalar copy per element.
TRANSPOSE_CYCLES = COPY_CYCLES
# A run-time key padding mask (dag_kernels.h SoftmaxPadded), scalar rows: per row the keep row KEEP & mask,
# a scalar byte load, AND and store per key, assumed 2 cycles (as COPY_CYCLES: no published figure isolates
# it).  The vector rows' keep lanes: perf/activation.py SM_VEC_KEEP_CYCLES.
MASK_COMBINE_CYCLES = COPY_CYCLES
# Masked mean pooling (dag_kernels.h MaskedMean), counted from its code, per sample: the kept count (a
# byte load, a compare and an add per token: MASK_COMBINE_CYCLES); the sums of the kept rows, per 16
# features and token one vector load and one aie::add into acc32 lanes (one cycle: MEAN_ADD_CYCLES, as
# MM_MAC_CYCLES; features not in whole 16-lane vectors: a scalar load and add per element, COPY_CYCLES); per
# feature one exact 32-bit divide by the count and its rounding, then a lane extract and a store.  The AIE-ML
# / AIE-MLv2 scalar ALU has no divider (AM020 / AM027 "Arithmetic Logic Unit": one-cycle add, subtract,
# compare and shift; two-cycle multiply), so the compiler's software divide takes about one quotient bit per
# shift-compare-subtract step: 32 steps of 3 one-cycle operations plus the sign fix and the rounding's
# compares, MEAN_DIV_CYCLES 100 (an estimate from those figures, no published figure for the routine); the
# extract and store MEAN_LANE_CYCLES 2.  Every token is costed as kept (the mask is known at run time only).
MEAN_ADD_CYCLES = 1
MEAN_DIV_CYCLES = 100
MEAN_LANE_CYCLES = 2


def masked_mean_cycles(samples: int, tokens: int, features: int) -> int:
    """The MaskedMean kernel body of one part (the constants above)."""
    if features % 16 == 0:
        sums = features // 16 * tokens * MEAN_ADD_CYCLES
    else:
        sums = features * tokens * COPY_CYCLES
    return samples * (tokens * MASK_COMBINE_CYCLES + sums + features * (MEAN_DIV_CYCLES + MEAN_LANE_CYCLES))


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
    replicas: int = 1  # a DAG design is one copy (protocol.Performance)

    @property
    def sample_ns(self) -> float:
        return self.interval_ns / self.batch

    def breakdown_parts(self) -> list[tuple[str, float, dict]]:
        """``protocol.Performance``: each stage's occupancy per batch."""
        return [(s.name, s.occupancy_ns, {"kind": s.kind, "bound": s.bound}) for s in self.stages]

    def extra_json(self) -> dict:
        """The DAG's bottleneck, critical path, stages and skip slack."""
        return {"bottleneck": self.bottleneck, "critical_path": list(self.critical_path),
                "stages": [asdict(s) for s in self.stages], "skip_slack": dict(self.skip_slack)}

    def to_json(self) -> dict:
        """design.json's ``performance`` (``design_schema.performance_json``)."""
        return design_schema.performance_json(self)


def rows_kernel_cycles(plan: DagPlan, name: str, device: Device) -> float:
    rp = plan.rows[name]
    elems = rp.rows_per_part * rp.features
    node = plan.node(name)
    runtime_mask = rp.op == "softmax" and len(node.inputs) > 1
    ports = 3 if rp.op in ("add", "matmul") or runtime_mask else 2
    if rp.op == "matmul":
        return CALL_CYCLES + matmul_cycles(plan, name, device) + mv.lock_handoff_cycles(ports)
    if rp.op == "masked_mean":  # x, the mask, the output
        tokens = matrix_shape(plan.graph, node.inputs[0], name)[0]
        return CALL_CYCLES + masked_mean_cycles(rp.rows_per_part, tokens, rp.features) + mv.lock_handoff_cycles(3)
    if rp.op in ("add", "add_const", "scale_shift"):  # add_const / scale_shift: the add's vector step, operands
        # from tile memory (scale_shift: a multiply in place of operand A's upshift)
        body = math.ceil(elems / 16) * ADD_CYCLES_PER_VECTOR
    elif rp.op == "activation":
        t = plan.node(name).types
        form = activation_form(t, device.generation)
        body = activation_form_cycles(elems, form if form in ("lut", "vector", "polynomial") else
                                      ("interpolated" if t.segment_bits else "table"), device.generation)
    elif rp.op == "softmax":
        integer = node.types.variant == "integer"
        if softmax_vectorised(node.types, rp.features, masked(node), runtime_mask):  # a run-time mask: keep lanes
            body = softmax_vector_cycles(rp.rows_per_part, rp.features, integer, runtime_mask,
                                         node.params.get("keep") is not None)
        else:
            body = softmax_cycles(rp.rows_per_part, rp.features, integer)
            if runtime_mask:  # the keep row of every row: the constant table AND the sample's mask, element by element
                body += elems * MASK_COMBINE_CYCLES
    else:
        vectors = math.ceil(rp.features / 16) * rp.rows_per_part
        t = plan.node(name).types
        if layernorm_vectorised(rp.features, t.input.container_bits // 8, t.output.container_bits // 8):
            body = (vectors * (LN_VEC_STATS_CYCLES + LN_VEC_Z_CYCLES + LN_VEC_OUT_CYCLES)
                    + rp.rows_per_part * (LN_ROW_CYCLES + LN_VEC_ROW_CYCLES))
        else:
            body = (elems * (LN_STATS_CYCLES + LN_Z_CYCLES) + vectors * LN_VECTOR_CYCLES
                    + rp.rows_per_part * LN_ROW_CYCLES)
        body += math.ceil(rp.rows_per_part / 16) * LN_RECIP_GROUP_CYCLES  # 16 rows' reciprocals at once
    transposes = sum(rp.in_transposed) + int(rp.out_transposed)
    return CALL_CYCLES + body + transposes * elems * TRANSPOSE_CYCLES + mv.lock_handoff_cycles(ports)


def matmul_cycles(plan: DagPlan, name: str, device: Device | None = None) -> int:
    """The MatMul kernel body of one part (the assumed constants above); a cascaded one's slowest tile
    (``device``: the catalog's cascade width, needed then)."""
    rp = plan.rows[name]
    m, k, n = matmul_dims(plan.graph, plan.node(name), plan.operands[name])
    samples, m = rp.block(m)  # whole samples, or a run of one sample's rows (with its whole B)
    vectors = math.ceil(n / 16)
    per_vector = MM_OUT_CYCLES
    if rp.cascade > 1:  # each tile its K-slice; the partial sums on the cascade
        k //= rp.cascade
        bits = 32 if plan.node(name).types.is_float else 64
        words = cascade_words(16, bits, device.generation.cascade_bits)
        per_vector = max(words + MM_OUT_CYCLES, 2 * words if rp.cascade > 2 else 0)
    return samples * (k * n * COPY_CYCLES + m * vectors * (k * MM_MAC_CYCLES + per_vector))


# ----------------------------------------------------------------------------- costs of the mapped graph


def plio_in_cost(plan: DagPlan, device: Device) -> Cost:
    """The input PLIO: the whole batch of the graph input, into the links that read it."""
    x = plan.graph.tensors[input_tensor(plan.graph)]
    nbytes = plan.batch * math.prod(x.shape) * (x.dtype.container_bits // 8)
    return costs.plio("plio_in", nbytes, device, 0)


def plio_mask_cost(plan: DagPlan, device: Device) -> Cost | None:
    """The run-time key padding mask's PLIO: one keep byte per key per sample of the batch, or None."""
    m = mask_input(plan.graph)
    if m is None:
        return None
    nbytes = plan.batch * (mask_pitch(plan.graph) or math.prod(plan.graph.tensors[m].shape))  # rows padded to words
    return costs.plio("plio_mask", nbytes, device, 0)


def kernel_cost(plan: DagPlan, name: str, device: Device) -> Cost:
    """A compute node's kernels as one stage: a Dense cascade rectangle as in the chain
    (``perf/costs.dense_kernel``), the parts of a rows op in parallel."""
    node = plan.node(name)
    if node.op == "dense":
        return costs.dense_kernel(node, device, name)
    cycles = rows_kernel_cycles(plan, name, device)
    macs = 0
    if node.op == "matmul":  # the dynamic products count as MACs too
        m, k, n = matmul_dims(plan.graph, node, plan.operands[name])
        macs = plan.batch * m * k * n
    return Cost(name, "kernel", "compute", mv.cycles_to_ns(cycles, device), tiles=plan.tiles_of(name), cycles=cycles,
                macs=macs)


def link_costs(plan: DagPlan, link: DagLink, device: Device, rect_of) -> tuple[Cost, Cost]:
    """A link's memory-tile write (all producer ports in parallel, one buffer each) and its read
    (its ports in parallel; a Dense column's read is broadcast up the column), or for the graph
    output the output PLIO that drains it.  ``rect_of(node)``: the node's placed rectangle; the
    switch hops of both sides are the chain's (``perf/costs.memtile_link_hops``)."""
    eb = link.element_bytes
    sh = link.shards[0]
    w_bytes = max(tl.elements for _, tl in sh.writes) * eb
    r_ports = sum(len(s.reads) for s in link.shards)
    r_bytes = max(tl.elements for s in link.shards for _, tl in s.reads) * eb
    consumer = None if link.consumer is None else rect_of(link.consumer)
    hops_w, hops_r = costs.memtile_link_hops(device, [rect_of(p) for p in link.source.producers], consumer)
    write = costs.memtile(f"write:{link.name}", w_bytes, len(sh.writes), device, hops_w)
    if link.consumer is None:
        return write, costs.plio("plio_out", r_bytes, device, 0)
    return write, costs.memtile(f"read:{link.name}", r_bytes, r_ports, device, hops_r, len(link.shards))


def _unplaced(plan: DagPlan) -> Placement:
    """Every node's rectangle on row 0, side by side: the stand-in of an unplaced plan (its costs
    see every node on the bottom row)."""
    rects, col = [], 0
    for name in plan.compute:
        w, h = plan.rect(name)
        rects.append(Rect(name, col, 0, w, h))
        col += w
    return Placement(tuple(rects), col, max((r.height for r in rects), default=1))


def estimate_dag(plan: DagPlan, device: Device, placement=None) -> DagPerformance:
    """The DAG design lowered into the mapped graph with its costs, and that graph's stage graph
    simulated (``mapped.estimate``); without a placement every node is costed on row 0."""
    if placement is None:
        from .emit import idents, lower

        return mapped_performance(lower(plan, _unplaced(plan), idents(plan), [], device), plan, device)
    return mapped_performance(lowered_dag(plan, placement, device), plan, device)


def lowered_dag(plan: DagPlan, placement: Placement, device: Device) -> MappedGraph:
    """``dag.emit.lower`` of a placed plan with its costs, built once per (plan, placement,
    device) and kept with the plan (``mapped/cache.py``): the estimate and the project's emission
    share it (emission adds its weight headers)."""
    from ..mapped.cache import memo
    from .emit import idents, lower

    return memo(plan, "dag", (placement, device), lambda: lower(plan, placement, idents(plan), [], device))


def mapped_performance(mg: MappedGraph, plan: DagPlan, device: Device) -> DagPerformance:
    """The DAG's performance from its costed mapped graph: the simulation of its stage graph, the
    first batch's longest path through it (the critical path), each residual Add's skip slack, and
    the tiles and memory tiles the graph uses (``mapped/estimate.resources``)."""
    sg = mapped_stages(mg)
    sim = run_pipeline(to_pipeline(sg))
    interval = sim.interval_ns
    cost = {c.name: c for c in sg.stages}
    finish: dict[str, float] = {}
    best_pred: dict[str, str | None] = {}
    for c in sg.stages:  # producers first: the first batch's finish times along the longest path
        ends = {p: finish[p] for p in sg.after[c.name]}
        best_pred[c.name] = max(ends, key=lambda p: ends[p]) if ends else None
        finish[c.name] = max(ends.values(), default=0.0) + c.occupancy_ns + c.delay_ns
    path = [sg.sink]
    while best_pred[path[-1]] is not None:
        path.append(best_pred[path[-1]])
    stalls = {st.name: st for st in sim.stages}
    stages = tuple(DagStage(c.name, c.kind, c.bound, c.occupancy_ns, c.delay_ns, sg.after[c.name],
                            stalls[c.name].starved_ns, stalls[c.name].blocked_ns) for c in sg.stages)
    bottleneck = max(stages, key=lambda s: s.occupancy_ns)
    slack = {}
    for name in plan.compute:
        if plan.node(name).op == "add":
            ins = sg.after[cost[name].name]
            spread = max(finish[p] for p in ins) - min(finish[p] for p in ins)
            slack[name] = spread / interval if interval else 0.0
    macs = sum(c.macs for c in sg.stages)
    tiles, memtiles = resources(mg, device)  # the mapped graph's, as the chain's and the CNN's
    return DagPerformance(
        latency_ns=sim.latency_ns, interval_ns=interval, batch=plan.batch,
        throughput_ops_per_s=2 * macs / (interval * 1e-9) if interval else 0.0,
        bound=bottleneck.bound, bottleneck=bottleneck.name, tiles_used=tiles, memory_tiles_used=memtiles,
        critical_path=tuple(reversed(path)), stages=stages, skip_slack=slack,
    )
