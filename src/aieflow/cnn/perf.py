"""Performance model of the CNN mappings: cycles per kernel, PL loops, PLIO transfers, frame latency
and frames per second.

Both mappings' steps are costs (``mapped.ir.Cost``) on their mapped graphs (:func:`stream_costs`,
attached by ``cnn.emit.lower``; :func:`thesis_costs`, attached by ``cnn.emit_thesis.lower``),
simulated by the one estimate engine (``mapped.estimate.stage_graph`` +
``perf.simulate.run_pipeline``, as the chain's and the DAG's).

No latency or FPS of the ESPCN thesis is published in ``shared/spec/espcn-super-resolution.md``
(its measured figures are held back for validation), so **no constant here is fitted to a
published figure**; each is an assumption stated where it is defined, and the thesis design's
structure (sequential PL loops at one element per cycle, single-buffered windows, no overlap
between frames) is what the model takes from the spec.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..mapped.estimate import resources, stage_graph, to_pipeline
from ..mapped.ir import Cost
from ..names import comment
from ..numerics.types import FloatType
from ..perf.activation import (
    activation_cycles,
    fp32_activation_cycles,
    fp32_softmax_cycles,
    softmax_cycles,
)
from ..perf.movement import dma_transfer
from ..perf.simulate import run_pipeline
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
    tiles_used: int = 0  # compute tiles of the mapped graph (all replicas)
    memory_tiles_used: int = 0

    @property
    def fps(self) -> float:
        return self.replicas / self.interval_s

    @property
    def gmacs(self) -> float:
        return self.fps * self.macs_per_frame / 1e9

    # protocol.Performance: design.json's names and units (a batch: one frame per replica)
    @property
    def latency_ns(self) -> float:
        return self.latency_s * 1e9

    @property
    def interval_ns(self) -> float:
        return self.interval_s * 1e9

    @property
    def batch(self) -> int:
        return 1  # one frame per replica per interval (protocol.Performance)

    @property
    def throughput_ops_per_s(self) -> float:
        return 2 * self.gmacs * 1e9

    def breakdown_parts(self) -> list[tuple[str, float, dict]]:
        """Each stage's busy time per frame."""
        return [(s.stage, s.seconds * 1e9, {"kind": s.where}) for s in self.stages]

    def extra_json(self) -> dict:
        """The CNN's own keys (µs, frames/s, GMAC/s, stages): :meth:`to_json`."""
        return self.to_json()

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
        per = SCALAR_EPILOGUE_CYCLES if stage.table is not None or stage.act_bf16 is not None else VECTOR_EPILOGUE_CYCLES
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
    constants of ``perf/activation.py`` (assumed there, none fitted), per value and per row; a bf16
    one's table as an 8-bit table; an fp32 one its float32 operations (``perf/activation.py`` ``FP32_OP_CYCLES``)."""
    p = stage.post
    if p is None:
        return 0.0
    values = stage.geometry.pixels * og
    if isinstance(p.in_type, FloatType) and p.in_type.name != "bf16":
        if p.op == "softmax":
            return fp32_softmax_cycles(stage.geometry.pixels, og)
        return fp32_activation_cycles(values, p.function)
    if p.op == "softmax":
        return softmax_cycles(stage.geometry.pixels, og)
    return activation_cycles(values, bool(p.seg))


def pool_tile_cycles(stage: Stage, lay: StreamLayer) -> float:
    kh, kw = stage.geometry.kernel
    return KERNEL_CALL_CYCLES + stage.geometry.pixels * lay.in_group * kh * kw * POOL_CYCLES_PER_ELEMENT


@dataclass(frozen=True)
class StageCost:
    """One stage of the stream mapping's stage graph: the :class:`~aieflow.mapped.ir.Cost` its
    entities carry in the mapped graph (``cnn.emit.lower``), and how the report names it."""

    cost: Cost
    stage: str  # the report's name: "input", a stage's name, "<stage>:skip", "output"
    where: str  # "plio" | "aie" | "dma"
    detail: str


def _step(name: str, stage: str, where: str, seconds: float, detail: str, *, kind: str, bound: str,
          **kernel) -> StageCost:
    return StageCost(Cost(name, kind, bound, seconds * 1e9, **kernel), stage, where, detail)


def stream_costs(plan: CnnPlan) -> dict[str, StageCost]:
    """The costs ``cnn.emit.lower`` attaches to the stream mapping's mapped graph, by cost name:

    * ``plio:in`` (every input PLIO: the frame over one 128-bit PLIO at the mover clock) and
      ``plio:out`` (every output PLIO: its cascade row's share of the last stage's output);
    * ``stage:<i>`` (every tile of stage i, all replicas: the slowest tile's cycles, ``conv_tile_cycles``
      / ``pool_tile_cycles``; the rows run in parallel);
    * ``skip:<i>`` (the links carrying a fused residual add's skip windows from a stage's last tiles:
      a tile DMA, ``perf.movement.dma_transfer``, busy plus latency cycles; a skip from the network
      input is the input PLIO's window, no cost of its own);
    * ``concat:<i>:<k>`` (a folded channel concat's windows from stage k when k is not the stage
      right before i: a tile DMA as the skip's).

    Every stage's output is one ping-pong buffer in the simulation (``mapped.estimate``); a DMA'd
    window is a buffer at each end (the producer's, and the one the DMA fills), so a skip or concat
    link holds two more frames than the direct window would."""
    d = plan.device
    out: dict[str, StageCost] = {}
    first = plan.stages[0]
    in_bytes = first.geometry.in_shape[0] * first.geometry.in_shape[1] * first.geometry.in_shape[2] * elem_bytes(first.in_type)
    cyc = in_bytes / PLIO_BYTES_PER_CYCLE
    out["plio:in"] = _step("plio:in", "input", "plio", cyc / plan.mover_clock_hz, f"{in_bytes} B over one 128-bit PLIO",
                           kind="plio", bound="plio")
    for i, (s, lay) in enumerate(zip(plan.stages, plan.layers, strict=True)):
        if lay.kind == "pool":
            cyc = pool_tile_cycles(s, lay)
            detail, rate = f"{lay.cas_num} tiles, {cyc:,.0f} cycles each", 0.0
        else:
            rate = d.generation.macs_per_cycle[(kind(s.in_type), kind(s.core.weight))]  # devices.py catalog
            cyc = max(conv_tile_cycles(s, lay, True, rate), conv_tile_cycles(s, lay, False, rate))
            detail = f"{lay.cas_num} x {lay.cas_len} tiles, mmul {'x'.join(map(str, lay.mmul))}, {cyc:,.0f} cycles"
        out[f"stage:{i}"] = _step(f"stage:{i}", s.name, "aie", cyc / d.clock_hz, detail, kind="kernel", bound="compute",
                                  tiles=lay.tiles, cycles=cyc, macs=s.macs, peak_macs_per_cycle=rate)
        if s.residual is not None and s.residual.skip_from >= 0:
            src = plan.layers[s.residual.skip_from]
            hops = max(1, lay.first_col + lay.cas_len - src.first_col - src.cas_len)  # last tile to last tile
            t = dma_transfer(lay.skip_bytes, d, hops)
            out[f"skip:{i}"] = _step(f"skip:{i}", f"{s.name}:skip", "dma", (t.busy_cycles + t.latency_cycles) / d.clock_hz,
                                     f"skip window of {s.residual.skip_name}: {lay.cas_num} x {lay.skip_bytes} B, tile DMA",
                                     kind="dma", bound=t.bound, cycles=t.busy_cycles + t.latency_cycles)
        if s.concat is not None:
            for k, name in sorted({(k, name) for k, name, _ in s.concat.parts if 0 <= k != i - 1}):
                src = plan.layers[k]
                j = next(j for j, (kk, _) in enumerate(lay.sources) if kk == k)
                hops = max(1, lay.first_col + j - src.first_col - src.cas_len + 1)  # last tile to position j
                _, h, w = s.geometry.in_shape
                nbytes = lay.in_group * h * w * elem_bytes(s.in_type)
                t = dma_transfer(nbytes, d, hops)
                out[f"concat:{i}:{k}"] = _step(
                    f"concat:{i}:{k}", f"{s.name}:concat:{name}", "dma", (t.busy_cycles + t.latency_cycles) / d.clock_hz,
                    f"concat window of {name}: {nbytes} B per producer row, tile DMA", kind="dma", bound=t.bound,
                    cycles=t.busy_cycles + t.latency_cycles)
    last = plan.stages[-1]
    c, h, w = last.out_shape
    out_bytes = c * h * w * elem_bytes(last.out_type) / plan.layers[-1].cas_num
    out["plio:out"] = _step("plio:out", "output", "plio", out_bytes / PLIO_BYTES_PER_CYCLE / plan.mover_clock_hz,
                            f"{plan.layers[-1].cas_num} PLIO(s) of {out_bytes:.0f} B", kind="plio", bound="plio")
    return out


def estimate_stream(plan: CnnPlan) -> CnnPerformance:
    """The stream mapping lowered into the mapped graph with its costs (``cnn.emit.lower``,
    :func:`stream_costs`) and that graph's stage graph simulated (``mapped.estimate``,
    ``perf.simulate.run_pipeline``): the latency is the first frame's, the interval the steady
    state's (a skip or concat window's buffers bound it when the producer would run further ahead
    of the stage reading them than its slots allow).  The bound names the slowest step, or, when
    the interval exceeds it, the windows of the stage the simulation sees blocked longest on full
    buffers and the stages that read them."""
    from ..mapped.cache import memo
    from .emit import lower

    def build():
        info = stream_costs(plan)
        mg = lower(plan, costs=info)
        sg = stage_graph(mg)
        return info, mg, sg, run_pipeline(to_pipeline(sg))

    # built once per plan (``mapped/cache.py``): the design's report, summary and design.json ask again
    info, mg, sg, sim = memo(plan, "cnn:stream", (), build)
    parts = tuple(StagePerf(info[c.name].stage, info[c.name].where, c.occupancy_ns * 1e-9, info[c.name].detail)
                  for c in sg.stages)
    neck = max(parts, key=lambda p: p.seconds)
    bound = f"{neck.where}: {comment(neck.stage)}"  # the model's names, sanitised once here
    if sim.interval_ns > neck.seconds * 1e9 * (1 + 1e-6):
        held = max(sim.stages, key=lambda st: st.blocked_ns).name
        readers = ", ".join(comment(info[n].stage) for n in sg.after if held in sg.after[n])
        bound = f"buffers: the windows of {comment(info[held].stage)} (read by {readers}) are full"
    tiles, memtiles = resources(mg, plan.device)
    return CnnPerformance(sim.latency_ns * 1e-9, sim.interval_ns * 1e-9, plan.replicas, bound, parts,
                          sum(s.macs for s in plan.stages), tiles, memtiles)


def thesis_kernel_cycles(lay: ThesisLayer) -> float:
    """One im2col matmul kernel: tile_m x k_pad x tile_n MACs at 8 fp32 MACs per cycle, plus the
    partial-sum buffer round trip between K chunks."""
    m, k, n = lay.mmul
    mac = (lay.tile_m // n) * round_up(lay.k_pad, k) // k * (lay.tile_n // m) * (m * k * n) / 8
    partial = (lay.k_chunks - 1) * lay.tile_m * lay.tile_n * PARTIAL_SUM_CYCLES_PER_VALUE
    return KERNEL_CALL_CYCLES + mac + partial


# The thesis PL kernels' loops as ``pl/thesis_pl.h`` writes them: each a pipelined inner loop at
# II = PL_LOOP_II inside a sequential outer loop (imperfect nests: a call and a second loop in the
# outer body, so HLS does not flatten them).  One execution of such a loop costs UG1399's
# "(trip count - 1) x II + iteration latency" plus one cycle to enter it and one to leave it (UG1399
# "Flattening Nested Loops": "one clock cycle to move from an outer loop to an inner loop and from
# an inner loop to an outer loop").
PL_LOOP_TRANSITION_CYCLES = 2
# Assumed (no synthesis report): the iteration latency of one of these loop bodies, a stream or
# BRAM read, the index arithmetic (constant divisions as multiplies) and a BRAM write, or in the
# tanh loop a float multiply and round at 260 MHz; 8 PL cycles.
PL_LOOP_DEPTH_CYCLES = 8


@dataclass(frozen=True)
class PLLoop:
    """One pipelined loop of a thesis PL kernel (``pl/thesis_pl.h``): ``runs`` executions per frame
    of ``trips`` iterations each."""

    what: str
    runs: int
    trips: int

    def cycles_per_run(self) -> int:
        return (self.trips - 1) * PL_LOOP_II + PL_LOOP_DEPTH_CYCLES + PL_LOOP_TRANSITION_CYCLES

    def cycles(self) -> int:
        return self.runs * self.cycles_per_run()


def pl_loops(plan: CnnPlan, i: int) -> list[PLLoop]:
    """The loops of the PL kernel after layer i, in the order ``pl/thesis_pl.cpp`` runs them:
    ``untile`` (per output tile a ``read_window`` of its tile_m x tile_n values and the reorder loop),
    ``activate`` (the tanh LUT over every output, where the layer has one), then ``im2col_tile``
    (per N block of the next layer the patch loop and its ``write_window``), or ``pixel_shuffle``
    and its ``write_window`` (or the untiled output's ``write_window``)."""
    s, lay = plan.stages[i], plan.layers[i]
    tile, outputs = lay.tile_m * lay.tile_n, lay.m * lay.n
    loops = [PLLoop("untile: read_window", lay.kernels, tile), PLLoop("untile: reorder", lay.kernels, tile)]
    if s.activation == "tanh":  # the template's `activate` (emit_thesis: a LUT only for tanh)
        loops.append(PLLoop("tanh LUT", 1, outputs))
    frame_out = 1
    for d in plan.stages[-1].out_shape:
        frame_out *= int(d)
    if lay.pl_kernel == "activation":
        nxt = plan.layers[i + 1]
        window = nxt.k_pad * nxt.tile_n
        loops += [PLLoop("im2col", nxt.grid[1], window), PLLoop("tile: write_window", nxt.grid[1], window)]
    elif lay.pl_kernel == "pixelshuffle":
        loops += [PLLoop("pixel shuffle", 1, outputs), PLLoop("write_window", 1, frame_out)]
    else:
        loops.append(PLLoop("write_window", 1, frame_out))
    return loops


def thesis_costs(plan: CnnPlan) -> dict[str, StageCost]:
    """The costs ``cnn.emit_thesis.lower`` attaches to the thesis mapping's mapped graph, by name:

    * ``plio:in``: layer 0's input PLIOs (one window each over its own 128-bit PLIO at the mover
      clock, all in parallel);
    * ``aie:<i>:<b>``: the kernels of layer i's N block b (each runs when its single-buffered window
      b is complete, :func:`thesis_kernel_cycles`; the block's kernels in parallel);
    * the steps of layer i's PL kernel (``PLKernel.steps``, :func:`pl_loops` in the order
      ``pl/thesis_pl.cpp`` runs them): ``pl:<i>:untile:<t>`` per output tile t in ``untile``'s
      order (mi-major; its ``read_window`` and reorder loops), also the cost of tile t's output
      PLIO (the AIE -> PL words move inside that ``read_window``, one 32-bit value per PL cycle,
      below the PLIO's rate: no PLIO term of their own); ``pl:<i>:tanh``; ``pl:<i>:im2col:<b>`` per
      N block b of layer i + 1 (the patch loop and its ``write_window``), also the cost of that
      block's input PLIO; or ``pl:<i>:shuffle`` then ``pl:<i>:write`` (the image out of the graph).
    """
    d = plan.device
    first = plan.layers[0]
    nbytes = first.k_pad * first.tile_n * 4
    out = {"plio:in": _step("plio:in", first.stage, "plio", nbytes / PLIO_BYTES_PER_CYCLE / plan.mover_clock_hz,
                            f"{first.grid[1]} input PLIOs (mm2s) x {nbytes:,} B, 128-bit words at "
                            f"{plan.mover_clock_hz / 1e6:g} MHz", kind="plio", bound="plio")}
    for i, lay in enumerate(plan.layers):
        cyc = thesis_kernel_cycles(lay)
        for b in range(lay.grid[1]):
            out[f"aie:{i}:{b}"] = _step(
                f"aie:{i}:{b}", lay.stage, "aie", cyc / d.clock_hz,
                f"{lay.kernels} kernels of {lay.tile_m} x {lay.k_pad} x {lay.tile_n}, {cyc:,.0f} cycles "
                f"({cyc / d.clock_hz * 1e6:,.2f} us) each, on the frame's path after its last window",
                kind="kernel", bound="compute", tiles=lay.grid[0], cycles=cyc)
        loops = {lp.what: lp for lp in pl_loops(plan, i)}
        clk = lay.pl_clock_hz
        busy = sum(lp.cycles() for lp in loops.values()) / clk
        detail = " + ".join(f"{lp.what} {lp.runs} x {lp.trips}" for lp in loops.values())
        detail = f"{detail} at II {PL_LOOP_II}, {clk / 1e6:g} MHz: {busy * 1e6:,.1f} us busy"

        def pl(name: str, cycles: int, _i=i, _detail=detail, _clk=clk) -> None:
            out[f"pl:{_i}:{name}"] = _step(f"pl:{_i}:{name}", f"{plan.layers[_i].stage}:{plan.layers[_i].pl_kernel}",
                                          "pl", cycles / _clk, _detail, kind="pl", bound="pl")

        per_tile = loops["untile: read_window"].cycles_per_run() + loops["untile: reorder"].cycles_per_run()
        for t in range(lay.kernels):
            pl(f"untile:{t}", per_tile)
        if "tanh LUT" in loops:
            pl("tanh", loops["tanh LUT"].cycles())
        if "im2col" in loops:
            for b in range(loops["im2col"].runs):
                pl(f"im2col:{b}", loops["im2col"].cycles_per_run() + loops["tile: write_window"].cycles_per_run())
        if "pixel shuffle" in loops:
            pl("shuffle", loops["pixel shuffle"].cycles())
        if "write_window" in loops:
            pl("write", loops["write_window"].cycles())
    return out


def thesis_stage_graph(plan: CnnPlan):
    """(costs, mapped graph, stage graph, simulation) of the thesis mapping with
    :func:`thesis_costs` attached (``cnn.emit_thesis.lower``), built once per plan."""
    from ..mapped.cache import memo
    from .emit import stage_idents
    from .emit_thesis import layer_info, lower

    def build():
        info = thesis_costs(plan)
        idents = stage_idents(plan.stages)
        layers = [layer_info(s, lay, idents[i]) for i, (s, lay) in enumerate(zip(plan.stages, plan.layers, strict=True))]
        mg, _, _ = lower(plan, layers, costs={n: c.cost for n, c in info.items()})
        sg = stage_graph(mg)
        return info, mg, sg, run_pipeline(to_pipeline(sg))

    return memo(plan, "cnn:thesis", (), build)


def critical_path(sg) -> list[str]:
    """The stages on the first frame's critical path through the thesis stage graph ``sg``, sink
    first: each stage's finish is its latest predecessor's plus its occupancy (one frame in flight:
    nothing else delays it); a tie goes to a PL step (``pl:...``: the step before, in the same PL
    kernel) over the kernels it waits for."""
    occ = {c.name: c.occupancy_ns for c in sg.stages}
    finish: dict[str, float] = {}
    for c in sg.stages:
        finish[c.name] = max((finish[p] for p in sg.after[c.name]), default=0.0) + occ[c.name]
    path, n = [], sg.sink
    while True:
        path.append(n)
        if not sg.after[n]:
            return path
        best = max(finish[p] for p in sg.after[n])
        n = next(p for p in sorted(sg.after[n], key=lambda p: not p.startswith("pl:")) if finish[p] == best)


def estimate_thesis(plan: CnnPlan) -> CnnPerformance:
    """The thesis mapping's mapped graph with :func:`thesis_costs`, its stage graph simulated
    (``mapped.estimate``, ``perf.simulate.run_pipeline``): single-buffered windows, each PL
    kernel's loops a chain of steps (each untile when its tile's kernel is done, each window of the
    next layer complete when its ``write_window`` ends) and one frame per host run (interval =
    latency).  Its stages are the time each step adds to the frame's critical path (traced back
    from the last write, :func:`critical_path`), so they add up to the latency; each stage's detail
    gives its whole time, hidden part included."""
    info, mg, sg, sim = thesis_stage_graph(plan)
    exposed: dict[tuple[str, str], float] = {}
    details: dict[tuple[str, str], str] = {}
    first = plan.layers[0]
    keys = [(first.stage, "plio")]
    for lay in plan.layers:
        keys += [(lay.stage, "aie"), (f"{lay.stage}:{lay.pl_kernel}", "pl")]
    for c in info.values():
        details.setdefault((c.stage, c.where), c.detail)
    on_path = set(critical_path(sg))
    for c in sg.stages:
        if c.name in info:
            key = (info[c.name].stage, info[c.name].where)
            exposed[key] = exposed.get(key, 0.0) + (c.occupancy_ns * 1e-9 if c.name in on_path else 0.0)
    parts = tuple(StagePerf(stage, where, exposed[stage, where], details[stage, where]) for stage, where in keys)
    latency = sim.latency_ns * 1e-9
    by_where: dict[str, float] = {}
    for p in parts:
        by_where[p.where] = by_where.get(p.where, 0.0) + p.seconds
    where = max(by_where, key=by_where.get)
    bound = f"{where} ({100 * by_where[where] / latency:.0f}% of the frame)"
    tiles, memtiles = resources(mg, plan.device)
    return CnnPerformance(latency, sim.interval_ns * 1e-9, plan.replicas, bound, parts, sum(s.macs for s in plan.stages),
                          tiles, memtiles)


def estimate(plan: CnnPlan) -> CnnPerformance:
    return estimate_stream(plan) if plan.mapping == "stream" else estimate_thesis(plan)
