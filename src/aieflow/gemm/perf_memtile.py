"""Cycle model of the AIE-ML GEMM design (memory tiles as the L2; gemm/aieml.py).

One graph iteration is one (jc, pc, ic) block.  Its parts run concurrently, decoupled by the
memory tiles' ping-pong buffers and the Cr stream FIFOs, so a block takes the slowest of:

- **AIE**: per tile, ``l4_steps`` x ``rounds`` micro-kernels, each max(Ar stream, MACs, Br loads)
  (the AIE1 model's micro-kernel: software-pipelined L6, different VLIW slots) plus its Cr epilogue
  (one ``core_stream_bits`` output word per cycle); with a single Br buffer, plus the Br DMA from
  the Bc memory tile (with two, that DMA overlaps the previous block).
  Ar stream = ceil(mr x kc x bytes / 4 B) + STREAM_FIXED_CYCLES: a memory-tile MM2S channel into
  the tile's 32-bit stream port (catalog ``core_stream_bits``: 32 on AIE-ML and AIE-MLv2, whose
  64-bit switch meets the core through an adapter, AM027), multicast to the group.
- **A from DDR**: the PL mover reads the block's Ac (mc x kc) on its own AXI port at
  :func:`perf.ddr_bytes_per_cycle` (the catalog's PL clock); each group's PLIO into its Ac memory tile at the PLIO rate (in parallel).
- **B from DDR**: the Br panels of every L4 lane (tiles_j x l4_steps x kc x nr, idle lanes' zeros
  included) on a second AXI port; each Bc memory tile's PLIO in parallel.
- **C to DDR**: every Cr of the block written (and read first when pc > 0) on a third AXI port.

The first block cannot overlap its loads: ``fill`` = the slowest of its loads plus its Br DMA.
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


def estimate_memtile(plan: GemmPlan) -> GemmPerformance:
    t, b, cfg, dev, lay = plan.dtype, plan.blocks, plan.config, plan.device, plan.memtiles
    assert lay is not None
    mk = microkernel(plan)
    epilogue = plan.cr_words / (dev.generation.core_stream_bits / 32)
    round_c = mk.cycles + epilogue
    step = plan.rounds * round_c
    compute = plan.l4_steps * step
    br_dma = lay.lane_bytes / dma_bytes_per_cycle(plan)
    aie = compute + (br_dma if cfg.br_buffers == 1 else 0.0)
    plio = plio_dma_bytes_per_cycle(dev)
    a_in = max(ddr_cycles(b.mc * b.kc * t.bytes, dev), lay.ac_bytes / plio)
    b_in = max(ddr_cycles(cfg.tiles_j * lay.lane_bytes, dev), lay.bc_bytes / plio)
    c_bytes = b.mc * b.nc * (8 if plan.output.name == "int64" else 4)
    c_first, c_later = ddr_cycles(c_bytes, dev), 2 * ddr_cycles(c_bytes, dev)
    loads = max(a_in, b_in)  # the next block's Ac and Bc, into the other memory-tile buffers
    blocks_first = plan.n_jc * plan.n_ic
    blocks_later = blocks_first * (plan.n_pc - 1)
    # Every block but the last overlaps the next one's loads; the last one's C write is in its own time.
    first = max(aie, loads, c_first)
    later = max(aie, loads, c_later)
    last = max(aie, c_later if blocks_later else c_first)
    fill = loads + br_dma  # the first block's loads cannot overlap anything
    cycles = fill + blocks_first * first + blocks_later * later - (later if blocks_later else first) + last
    nblocks = blocks_first + blocks_later
    kernels = nblocks * plan.l4_steps * plan.rounds
    breakdown = {
        "fill (first block's loads)": fill,
        f"microkernel ({mk.bound})": kernels * mk.cycles,
        "cr_epilogue": kernels * epilogue,
        "br_copy": nblocks * (br_dma if cfg.br_buffers == 1 else 0.0),
    }
    breakdown["ddr_wait"] = cycles - sum(breakdown.values())
    typical = later if blocks_later else first
    if typical > aie:  # a DDR path sets the pace of a block
        terms = {"ddr_a": a_in, "ddr_b": b_in, "write_back": c_later if blocks_later else c_first}
        bound = max(terms.items(), key=lambda kv: kv[1])[0]
    else:
        bound = "br_copy" if cfg.br_buffers == 1 and br_dma > compute else mk.bound
    macs = plan.m * plan.n * plan.k
    per_tile = macs / (cycles * plan.tiles)
    latency_ns = cycles / dev.clock_hz * 1e9
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
        br_copy=br_dma,
        breakdown=breakdown,
        loops=loops,
        clock_hz=dev.clock_hz,
    )
