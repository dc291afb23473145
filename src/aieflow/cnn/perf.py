"""Performance model of the CNN mappings: cycles per kernel, PL loops, PLIO transfers, frame latency
and frames per second.

No latency or FPS of the ESPCN thesis is published in ``shared/spec/espcn-super-resolution.md``
(its measured figures are held back for validation), so **no constant here is fitted to a
published figure**; each is an assumption stated where it is defined, and the thesis design's
structure (sequential PL loops at one element per cycle, single-buffered windows, no overlap
between frames) is what the model takes from the spec.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..names import comment
from ..perf.activation import activation_cycles, softmax_cycles
from ..perf.movement import dma_transfer
from .plan import CnnPlan, StreamLayer, ThesisLayer, elem_bytes, kind, round_up
from .stages import Stage

# Assumptions (not fitted; no published per-kernel figure exists for these kernels):
KERNEL_CALL_CYCLES = 200  # per kernel invocation: lock acquire / release, loop set-up (UG1079 order of magnitude)
GATHER_CYCLES_PER_ELEMENT = 1.0  # on-array im2col: one scalar load + store per patch element per cycle
SCALAR_EPILOGUE_CYCLES = 2.0  # table activation (index, clamp, load) per output value, scalar
VECTOR_EPILOGUE_CYCLES = 0.25  # SRS / ReLU / store per output value, vector lanes
PARTIAL_SUM_CYCLES_PER_VALUE = 0.25  # thesis K chunks: write + read back one partial sum (vector)
PLIO_BYTES_PER_CYCLE = 16  # a 128-bit PLIO moves one word per PL clock cycle
POOL_CYCLES_PER_ELEMENT = 1.0  # scalar window walk
RESIDUAL_CYCLES_PER_VALUE = 3.0  # fused residual add, scalar: load the skip, align, add, round, clamp (+ ReLU)
SKIP_BUFFER_FRAMES = 2  # a skip window is ping-pong: its producer runs at most two frames ahead of the add
PL_LOOP_II = 1  # thesis PL loops: one element per cycle (spec)
UPSAMPLE_STORE_CYCLES = 1.0  # fused nearest upsampling: one scalar store per extra copy of a value
# a fused bilinear upsampling, scalar per output value (cnn_kernels.h bilinear): two tap computations
# (a division each), four loads, eight 64-bit multiplies, three adds, a division and the rounding
# test, a store: about 24 scalar operations, taken as 24 cycles (an assumption, not measured)
BILINEAR_CYCLES_PER_VALUE = 24.0
# Float-scale requantisation of a conv's output (templates/kernels/requant.h, per block of M x N
# values): counted vector operations: 1 multiplier load, 3 SRS (to int32, by SHIFT, into the output
# type), 1 UPS (from_vector), 1 add of the zero point, and the int32 x int32 multiply counted as
# 4 passes (a 32 x 32-bit product built from 16-bit partial products: an assumption, no published
# per-instruction figure for aie::mul on int32 x int32 is used) = 10; each operation assumed to
# take one cycle for 16 values (one 512-bit vector of int32 lanes).  Charged on top of
# VECTOR_EPILOGUE_CYCLES (the SRS / ReLU / store every conv pays) by the storing tile only.
REQUANT_VECTOR_OPS = 1 + 3 + 1 + 1 + 4
REQUANT_LANES = 16
REQUANT_CYCLES_PER_VALUE = REQUANT_VECTOR_OPS / REQUANT_LANES


@dataclass(frozen=True)
class StagePerf:
    stage: str
    where: str  # "aie" | "pl" | "plio"
    seconds: float
    detail: str

    def to_json(self) -> dict:
        return {"stage": self.stage, "where": self.where, "us": self.seconds * 1e6, "detail": self.detail}


@dataclass(frozen=True)
class CnnPerformance:
    latency_s: float
    interval_s: float  # between frames of one replica
    replicas: int
    bound: str  # text; the model's names in it already sanitised (names.comment)
    stages: tuple[StagePerf, ...]
    macs_per_frame: int

    @property
    def fps(self) -> float:
        return self.replicas / self.interval_s

    @property
    def gmacs(self) -> float:
        return self.fps * self.macs_per_frame / 1e9

    def to_json(self) -> dict:
        return {"latency_us": self.latency_s * 1e6, "interval_us": self.interval_s * 1e6, "fps": self.fps,
                "replicas": self.replicas, "bound": self.bound, "gmacs_per_s": self.gmacs,
                "stages": [s.to_json() for s in self.stages]}


def conv_tile_cycles(stage: Stage, lay: StreamLayer, last: bool, macs_per_cycle: float) -> float:
    """One stream-mapping conv tile: gather each pixel block's patches once, then the mmul blocks."""
    m, k, n = lay.mmul
    pixels = stage.geometry.pixels
    pb = -(-pixels // m)
    kb = -(-lay.k_tile // k)
    cb = -(-lay.out_group // n)
    mac = pb * cb * kb * (m * k * n) / macs_per_cycle
    gather = pb * m * lay.k_tile * GATHER_CYCLES_PER_ELEMENT
    cycles = KERNEL_CALL_CYCLES + mac + gather
    if last:
        per = SCALAR_EPILOGUE_CYCLES if stage.table is not None else VECTOR_EPILOGUE_CYCLES
        if stage.rq is not None:  # float scales: the requantisation before the store
            per += REQUANT_CYCLES_PER_VALUE
        if stage.residual is not None:
            per += RESIDUAL_CYCLES_PER_VALUE
        # a fused upsampling stores each value up[0] x up[1] times: the extra copies are scalar stores
        copies = stage.up[0] * stage.up[1] - 1
        if stage.up_mode != "nearest":  # bilinear: each value stored once, then every upsampled value interpolated
            cycles += pixels * lay.out_group * (per + 1 + (copies + 1) * BILINEAR_CYCLES_PER_VALUE)
        else:
            cycles += pixels * lay.out_group * (per + copies * UPSAMPLE_STORE_CYCLES)
        cycles += post_cycles(stage, lay.out_group)
    return cycles


def post_cycles(stage: Stage, og: int) -> float:
    """A post layer in the last tile (scalar, ``activation_fixed.h``): the activation and softmax
    constants of ``perf/activation.py`` (assumed there, none fitted), per value and per row."""
    p = stage.post
    if p is None:
        return 0.0
    if p.op == "softmax":
        return softmax_cycles(stage.geometry.pixels, og)
    return activation_cycles(stage.geometry.pixels * og, bool(p.seg))


def pool_tile_cycles(stage: Stage, lay: StreamLayer) -> float:
    kh, kw = stage.geometry.kernel
    return KERNEL_CALL_CYCLES + stage.geometry.pixels * lay.in_group * kh * kw * POOL_CYCLES_PER_ELEMENT


def estimate_stream(plan: CnnPlan) -> CnnPerformance:
    d = plan.device
    parts: list[StagePerf] = []
    first = plan.stages[0]
    in_bytes = first.geometry.in_shape[0] * first.geometry.in_shape[1] * first.geometry.in_shape[2] * elem_bytes(first.in_type)
    parts.append(StagePerf("input", "plio", in_bytes / PLIO_BYTES_PER_CYCLE / plan.mover_clock_hz,
                           f"{in_bytes} B over one 128-bit PLIO"))
    for s, lay in zip(plan.stages, plan.layers, strict=True):
        if lay.kind == "pool":
            cyc = pool_tile_cycles(s, lay)
            detail = f"{lay.cas_num} tiles, {cyc:,.0f} cycles each"
        else:
            rate = d.generation.macs_per_cycle[(kind(s.in_type), kind(s.core.weight))]  # devices.py catalog
            cyc = max(conv_tile_cycles(s, lay, True, rate), conv_tile_cycles(s, lay, False, rate))
            detail = f"{lay.cas_num} x {lay.cas_len} tiles, mmul {'x'.join(map(str, lay.mmul))}, {cyc:,.0f} cycles"
        parts.append(StagePerf(s.name, "aie", cyc / d.clock_hz, detail))
    last = plan.stages[-1]
    c, h, w = last.out_shape
    out_bytes = c * h * w * elem_bytes(last.out_type) / plan.layers[-1].cas_num
    parts.append(StagePerf("output", "plio", out_bytes / PLIO_BYTES_PER_CYCLE / plan.mover_clock_hz,
                           f"{plan.layers[-1].cas_num} PLIO(s) of {out_bytes:.0f} B"))
    slowest = max(parts, key=lambda p: p.seconds)
    latency = sum(p.seconds for p in parts)
    bound = f"{slowest.where}: {comment(slowest.stage)}"  # the model's names, sanitised once here
    interval = slowest.seconds
    steps: dict[int, list] = {}
    for i, step in residual_steps(plan, parts).items():
        steps.setdefault(i, []).append(step)
    for i, found in concat_steps(plan, parts).items():
        steps.setdefault(i, []).extend(found)
    chain, parts = parts, []
    for j, part in enumerate(chain):
        parts.append(part)
        added = 0.0
        for skip, extra, cycle, what in steps.get(j - 1, ()):  # chain[j] is stage j - 1
            if skip is not None:
                parts.append(skip)  # listed right after its stage
                added = max(added, extra)  # the skip windows of one stage move in parallel
                if skip.seconds > interval:
                    interval, bound = skip.seconds, f"dma: {comment(skip.stage)}"
            if cycle > interval:
                interval, bound = cycle, f"aie: {what}"
        latency += added
    return CnnPerformance(latency, interval, plan.replicas, bound, tuple(parts), sum(s.macs for s in plan.stages))


def residual_steps(plan: CnnPlan, parts: list[StagePerf]) -> dict[int, tuple[StagePerf | None, float, float, str]]:
    """What each fused residual add costs beyond its epilogue (``conv_tile_cycles``), given the
    chain's steps ``parts`` (input PLIO, one per stage, output PLIO):

    * the skip window's transfer, from the producer's tile to the convolution's last tile of each
      row (rows in parallel): a tile DMA (``perf.movement.dma_transfer``), a step of the pipeline.
      It overlaps the stages between the producer and the add, so it adds to the latency only what
      exceeds them (all of it when the branch is the one convolution: its own input windows are,
      as everywhere in this model, not costed separately).  A skip from the network input is the
      input PLIO's window broadcast to the last tiles too: no step of its own;
    * the skip window is double-buffered, so the producer can run at most two frames ahead of the
      add: the producer, every stage of the branch and the add's convolution form a cycle that
      holds two frames, and the interval is at least half its time (no bound beyond the slowest
      step when the branch is one convolution: half of two steps is at most the larger).
    Returns {stage index: (skip step, latency added, interval bound, what the bound is)} for the
    residual stages."""
    out = {}
    for i, (s, lay) in enumerate(zip(plan.stages, plan.layers, strict=True)):
        if s.residual is None:
            continue
        k = s.residual.skip_from
        step, extra = None, 0.0
        if k >= 0:
            src = plan.layers[k]
            hops = max(1, lay.first_col + lay.cas_len - src.first_col - src.cas_len)  # last tile to last tile
            t = dma_transfer(lay.skip_bytes, plan.device, hops)
            secs = (t.busy_cycles + t.latency_cycles) / plan.device.clock_hz
            step = StagePerf(f"{s.name}:skip", "dma", secs,
                             f"skip window of {s.residual.skip_name}: {lay.cas_num} x {lay.skip_bytes} B, tile DMA")
            between = sum(p.seconds for p in parts[k + 2:i + 1])  # parts[j + 1] is stage j; parts[0] the input
            extra = max(0.0, secs - between)
        cycle = sum(p.seconds for p in parts[k + 1:i + 2]) / SKIP_BUFFER_FRAMES
        out[i] = (step, extra, cycle,
                  f"skip buffer {comment(s.residual.skip_name)} -> {comment(s.residual.name)} ({SKIP_BUFFER_FRAMES} frames)")
    return out


def concat_steps(plan: CnnPlan, parts: list[StagePerf]) -> dict[int, list[tuple[StagePerf | None, float, float, str]]]:
    """What a folded channel concat costs, as a residual skip does (``residual_steps``): each part
    from a producer other than the stage right before the convolution is a window per producer row
    moved by tile DMA to the cascade positions that read it (rows in parallel: the largest), a step
    that overlaps the stages in between and adds to the latency only what exceeds them; and its
    windows are double-buffered, so the producer, the stages between and the convolution hold at
    most two frames: the interval is at least half their time.  A part from the network input is the
    input PLIO's window broadcast: no step of its own, but the same two-frame bound.  One entry per
    such producer (the parts from one producer share its windows' step)."""
    out = {}
    for i, (s, lay) in enumerate(zip(plan.stages, plan.layers, strict=True)):
        if s.concat is None:
            continue
        far = sorted({(k, name) for k, name, _ in s.concat.parts if k != i - 1})
        found = []
        for k, name in far:
            step, extra = None, 0.0
            if k >= 0:
                src = plan.layers[k]
                j = next(j for j, (kk, _) in enumerate(lay.sources) if kk == k)
                hops = max(1, lay.first_col + j - src.first_col - src.cas_len + 1)  # last tile to position j
                _, h, w = s.geometry.in_shape
                nbytes = lay.in_group * h * w * elem_bytes(s.in_type)
                t = dma_transfer(nbytes, plan.device, hops)
                secs = (t.busy_cycles + t.latency_cycles) / plan.device.clock_hz
                step = StagePerf(f"{s.name}:concat:{name}", "dma", secs,
                                 f"concat window of {name}: {nbytes} B per producer row, tile DMA")
                extra = max(0.0, secs - sum(p.seconds for p in parts[k + 2:i + 1]))
            cycle = sum(p.seconds for p in parts[k + 1:i + 2]) / SKIP_BUFFER_FRAMES
            found.append((step, extra, cycle,
                          f"concat buffer {comment(name)} -> {comment(s.name)} ({SKIP_BUFFER_FRAMES} frames)"))
        out[i] = found
    return out


def thesis_kernel_cycles(lay: ThesisLayer) -> float:
    """One im2col matmul kernel: tile_m x k_pad x tile_n MACs at 8 fp32 MACs per cycle, plus the
    partial-sum buffer round trip between K chunks."""
    m, k, n = lay.mmul
    mac = (lay.tile_m // n) * round_up(lay.k_pad, k) // k * (lay.tile_n // m) * (m * k * n) / 8
    partial = (lay.k_chunks - 1) * lay.tile_m * lay.tile_n * PARTIAL_SUM_CYCLES_PER_VALUE
    return KERNEL_CALL_CYCLES + mac + partial


def pl_loop_elements(plan: CnnPlan, i: int) -> tuple[int, str]:
    """Trip count of the PL kernel after layer i: untile (read every output), activation (every
    output), then im2col + tile (write every patch element of the next layer), or pixel shuffle."""
    s, lay = plan.stages[i], plan.layers[i]
    outputs = lay.m * lay.n
    if lay.pl_kernel == "pixelshuffle":
        return 2 * outputs, f"untile {outputs} + pixel shuffle {outputs}"
    if lay.pl_kernel == "activation":
        nxt = plan.layers[i + 1]
        act = outputs if s.activation else 0
        return outputs + act + nxt.k_pad * nxt.n, f"untile {outputs} + tanh LUT {act} + im2col/tile {nxt.k_pad * nxt.n}"
    return outputs, f"s2mm {outputs}"


def estimate_thesis(plan: CnnPlan) -> CnnPerformance:
    """Single-buffered windows and one frame at a time: the frame latency is the sum of the steps,
    and the next frame starts after it (interval = latency)."""
    parts: list[StagePerf] = []
    for i, lay in enumerate(plan.layers):
        tm, tn = lay.tile_m, lay.tile_n
        in_bytes = lay.k_pad * tn * 4 * (lay.n // tn) / lay.plio_in  # per input PLIO, all its N blocks
        parts.append(StagePerf(lay.stage, "plio", in_bytes / PLIO_BYTES_PER_CYCLE / plan.mover_clock_hz,
                               f"{lay.plio_in} input PLIOs x {in_bytes:,.0f} B"))
        cyc = thesis_kernel_cycles(lay)
        parts.append(StagePerf(lay.stage, "aie", cyc / plan.device.clock_hz,
                               f"{lay.kernels} kernels of {tm} x {lay.k_pad} x {tn}, {cyc:,.0f} cycles"))
        out_bytes = tm * tn * 4
        parts.append(StagePerf(lay.stage, "plio", out_bytes / PLIO_BYTES_PER_CYCLE / plan.mover_clock_hz,
                               f"{lay.plio_out} output PLIOs x {out_bytes} B"))
        elements, detail = pl_loop_elements(plan, i)
        parts.append(StagePerf(f"{lay.stage}:{lay.pl_kernel}", "pl", elements * PL_LOOP_II / lay.pl_clock_hz,
                               f"{detail} at {lay.pl_clock_hz / 1e6:g} MHz"))
    latency = sum(p.seconds for p in parts)
    by_where: dict[str, float] = {}
    for p in parts:
        by_where[p.where] = by_where.get(p.where, 0.0) + p.seconds
    where = max(by_where, key=by_where.get)
    bound = f"{where} ({100 * by_where[where] / latency:.0f}% of the frame)"
    return CnnPerformance(latency, latency, plan.replicas, bound, tuple(parts), sum(s.macs for s in plan.stages))


def estimate(plan: CnnPlan) -> CnnPerformance:
    return estimate_stream(plan) if plan.mapping == "stream" else estimate_thesis(plan)
