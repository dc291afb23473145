"""Cycle model of the AIE-ML GEMM design (memory tiles as the L2; gemm/aieml.py).

One graph iteration is one (jc, pc, ic) block.  :func:`stage_cycles` gives its stages, which
``gemm/lower.py`` attaches to the mapped graph and :func:`estimate_memtile` runs, every block in
loop order (:func:`block_kinds`), through the one simulation engine (``perf/simulate.run_pipeline``):

- ``ddr_a``: the PL mover reads the block's Ac (mc x kc) on its own AXI port at
  :func:`perf.ddr_bytes_per_cycle` (the catalog's PL clock); each group's PLIO into its Ac memory
  tile at the PLIO rate (in parallel): the slower of the two.
- ``ddr_b``: the Br panels of every L4 lane (tiles_j x l4_steps x kc x nr, idle lanes' zeros
  included) on a second AXI port; each Bc memory tile's PLIO in parallel.
- ``br``: each lane's panels from its Bc memory tile into the tile's Br buffer (one MM2S channel
  per lane), one or two buffers in the tile as the config says.
- ``tiles``: per tile ``l4_steps`` x ``rounds`` micro-kernels, each max(Ar stream, MACs, Br loads)
  (the AIE1 model's micro-kernel: software-pipelined L6, different VLIW slots) plus its Cr epilogue
  (one ``core_stream_bits`` output word per cycle); Ar stream = ceil(mr x kc x bytes / 4 B) +
  STREAM_FIXED_CYCLES: a memory-tile MM2S channel into the tile's 32-bit stream port (catalog
  ``core_stream_bits``: 32 on AIE-ML and AIE-MLv2, whose 64-bit switch meets the core through an
  adapter, AM027), multicast to the group.  The collector (``gemm_collect``) writes every Cr of the
  block to DDR on a third AXI port (read first when pc > 0) as it takes it from the Cr streams, with
  no buffer of its own, so it runs alongside the rounds: the stage takes the slower of the two.

The memory tiles' Ac and Bc are ping-pong (two buffers, AM020 memory-tile locks): a block's loads
overlap the previous block's rounds; the first block's cannot (the fill).  A single-buffered Br
(``br_buffers: 1``) makes the Br DMA of a block wait until the tile has finished the previous one.
There is no separate packing pass (the memory tiles' DMA tilers pack), so ``packing_cycles`` is 0
and ``cycles`` is the whole run, unlike the VCK190 designs' ``cycles`` (the paper's experiments
exclude packing there; compare ``total_cycles``).

Constants: the DDR rate and access cost are perf.py's (ASSUMED there); the memory-tile -> tile DMA
moves one switch word per AIE cycle per channel (catalog ``stream_bits`` capped by the channel's
memory interface ``memtile_dma_memory_bits``: 32 bits on AIE-ML, 64 on AIE-MLv2 (AM020 / AM027 give
the widths; that a channel sustains one word per cycle is ASSUMED)); the PLIO into a memory tile's
S2MM is the slower of the PLIO and that stream.  Nothing here was measured.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from ..perf import movement as mv
from ..perf.kernel import mac_cycles
from .perf import GemmPerformance, MicroKernelCycles, ddr_cycles, plio_dma_bytes_per_cycle
from .plan import GemmPlan


def dma_bytes_per_cycle(plan: GemmPlan) -> float:
    """Memory tile -> tile DMA (one MM2S channel): one stream word per AIE cycle (assumed)."""
    return mv.memtile_channel_bytes_per_cycle(plan.device)


def microkernel(plan: GemmPlan) -> MicroKernelCycles:
    t, b, gen = plan.dtype, plan.blocks, plan.device.generation
    ks = t.mmul[1]
    stream = math.ceil(b.mr * b.kc * t.bytes / mv.core_stream_bytes_per_cycle(plan.device)) + mv.STREAM_FIXED_CYCLES
    mac = mac_cycles(b.kc * b.mr * b.nr, gen, t.pair)
    load = (b.kc // ks) * ks * b.nr * t.bits / gen.load_bits_per_cycle
    return MicroKernelCycles(float(stream), float(mac), float(load))


@dataclass(frozen=True)
class StageCycles:
    """One block's stages (AIE cycles) of the memory-tile design (see the module docstring)."""

    ddr_a: float  # the mover's Ac read from DDR into the group's Ac memory tile (PLIO)
    ddr_b: float  # the Br panels of every lane from DDR into the Bc memory tiles (PLIOs)
    br: float  # one lane's Br panels, Bc memory tile -> tile (memory-tile MM2S DMA)
    compute: float  # the tile's L4_STEPS x ROUNDS micro-kernels and Cr epilogues
    c_write: float  # the block's C to DDR (read first when pc > 0) by the collector
    mk: MicroKernelCycles
    epilogue: float  # one Cr epilogue

    @property
    def tiles(self) -> float:
        """The tiles' stage: the rounds, with the C collection draining their Cr streams alongside."""
        return max(self.compute, self.c_write)


def stage_cycles(plan: GemmPlan, later_pc: bool) -> StageCycles:
    """The memory-tile design's stage times for a block with pc == 0 (``later_pc`` False) or pc > 0."""
    t, b, cfg, dev, lay = plan.dtype, plan.blocks, plan.config, plan.device, plan.memtiles
    assert lay is not None
    mk = microkernel(plan)
    epilogue = plan.cr_words / (dev.generation.core_stream_bits / 32)
    compute = plan.l4_steps * plan.rounds * (mk.cycles + epilogue)
    plio = plio_dma_bytes_per_cycle(dev)
    a_in = max(ddr_cycles(b.mc * b.kc * t.bytes, dev), lay.ac_bytes / plio)
    b_in = max(ddr_cycles(cfg.tiles_j * lay.lane_bytes, dev), lay.bc_bytes / plio)
    c_write = ddr_cycles(b.mc * b.nc * (8 if plan.output.name == "int64" else 4), dev)
    return StageCycles(a_in, b_in, lay.lane_bytes / dma_bytes_per_cycle(plan), compute,
                       2 * c_write if later_pc else c_write, mk, epilogue)


def block_kinds(plan: GemmPlan) -> tuple[tuple[bool, int], ...]:
    """The graph iterations in order, as (pc > 0, count) runs: per jc, its n_ic blocks with
    pc == 0, then its n_ic x (n_pc - 1) with pc > 0."""
    runs: list[tuple[bool, int]] = []
    for _ in range(plan.n_jc):
        runs.append((False, plan.n_ic))
        if plan.n_pc > 1:
            runs.append((True, plan.n_ic * (plan.n_pc - 1)))
    return tuple(runs)


def estimate_memtile(plan: GemmPlan) -> GemmPerformance:
    """The design's estimate: every block, in loop order, through the costed mapped graph's stage
    graph (``gemm/lower.memtile_cycles``, the one simulation engine)."""
    from .lower import memtile_cycles

    t, cfg, dev = plan.dtype, plan.config, plan.device
    first, later = stage_cycles(plan, False), stage_cycles(plan, True)
    mk, epilogue = first.mk, first.epilogue
    cycles, fill = memtile_cycles(plan)
    blocks_first = plan.n_jc * plan.n_ic
    blocks_later = blocks_first * (plan.n_pc - 1)
    nblocks = blocks_first + blocks_later
    kernels = nblocks * plan.l4_steps * plan.rounds
    single = cfg.br_buffers == 1
    breakdown = {
        "fill (first block's loads)": fill,
        f"microkernel ({mk.bound})": kernels * mk.cycles,
        "cr_epilogue": kernels * epilogue,
        # single-buffered: every later block's Br DMA waits for the tile (the first one's is in the fill)
        "br_copy": (nblocks - 1) * first.br if single else 0.0,
    }
    breakdown["ddr_wait"] = cycles - sum(breakdown.values())
    typ = later if blocks_later else first
    aie = typ.compute + (typ.br if single else 0.0)
    ddr = {"ddr_a": typ.ddr_a, "ddr_b": typ.ddr_b, "write_back": typ.c_write}
    if max(ddr.values()) > max(aie, 0.0 if single else typ.br):  # a DDR path sets the pace of a block
        bound = max(ddr.items(), key=lambda kv: kv[1])[0]
    else:
        bound = "br_copy" if typ.br > typ.compute else mk.bound
    macs = plan.m * plan.n * plan.k
    per_tile = macs / (cycles * plan.tiles)
    latency_ns = cycles / dev.clock_hz * 1e9
    round_c = mk.cycles + epilogue
    step = plan.rounds * round_c
    loops = {
        "L1_jc": plan.n_jc,
        "L2_pc": plan.n_pc,
        "L3_ic": plan.n_ic,
        "L4_steps_per_block": plan.l4_steps,
        "L5_microkernels_per_tile_per_step": plan.rounds,
        "L6_ksteps_per_microkernel": plan.ksteps,
    }
    return GemmPerformance(
        cycles=cycles,
        packing_cycles=0.0,
        latency_ns=latency_ns,
        interval_ns=latency_ns,
        throughput_ops_per_s=2 * macs / (latency_ns * 1e-9),
        bound=bound,
        tiles_used=plan.tiles,
        macs_per_cycle_per_tile=per_tile,
        efficiency=per_tile / dev.generation.macs_per_cycle[t.pair],
        microkernel=mk,
        round_cycles=(round_c, round_c),
        step_cycles=(step, step),
        br_copy=first.br,
        breakdown=breakdown,
        loops=loops,
        clock_hz=dev.clock_hz,
    )
