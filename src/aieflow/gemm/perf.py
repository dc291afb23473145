"""Cycle model of the GotoBLAS GEMM designs (and the source of the spec's micro-kernel figures).

Every term, per (jc, pc, ic) block of ``l4_steps`` steps of ``rounds`` micro-kernels per tile:

- micro-kernel = max(Ar stream, MACs, Br loads): stream reads, vector loads and MACs issue in
  different VLIW slots and the L6 loop is software pipelined, so the slowest of the three sets it
  (the spec's measurements: reads + MACs take 4,110 cycles, reads alone 4,106).
  Ar stream = ceil(kc * mr * bytes / streams / rate) + STREAM_FIXED_CYCLES, rate = min(PLIO width
  x PL clock, stream width x AIE clock) = 4 B/cycle on VCK190.  The multicast costs the same for
  any fan-out (spec: ~19 cycles per vector "regardless of fan-out").
- Br copy: BR_COPY_CYCLES_PER_BYTE per byte, the same on every tile (spec); exposed once per step
  with one buffer, hidden behind the previous step's compute with two.
- Cr write-back: ``serial`` (published): after each micro-kernel every tile loads its Cr from DDR,
  adds, and stores it back through its own port (GMIO in the paper); the transfers overlap the
  next micro-kernel and what a tile waits for is the spec's measured `Copy Cr` per micro-kernel,
  which grows with the number of ports as DDR serialises them (:func:`copy_cr_cycles`, fitted to
  that calibration series).  ``overlapped`` (ours): the tile writes Cr to its stream (one 32-bit
  word per cycle) and goes on.  Either way the round cannot be shorter than the DDR traffic of all
  tiles' Cr in it (:func:`cr_ddr_cycles`: read + write for ``serial``; write, plus read when
  pc > 0, for ``overlapped``).
- Packing (Bc per (jc, pc), Ac per (jc, pc, ic)) reads DDR at :func:`ddr_bytes_per_cycle`.  It is
  reported separately and excluded from ``cycles``, as the spec's experiments exclude it; it is in
  ``total_cycles`` and the latency.

Costs are in AIE cycles.  Nothing here was measured by aieflow; the fitted constants name the
published figures they come from, and docs/gemm.md lists every constant.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from .. import design_schema
from ..devices import Device
from ..mapped.cache import memo
from ..perf import movement as mv
from ..perf.kernel import mac_cycles
from .dtypes import GemmType
from .plan import GemmPlan

PLIO_BITS = 128  # width of every GEMM PLIO port (the emitter declares adf::plio_128_bits)

# FITTED: gemm-gotoblas-versal.md § Calibration, "copying Br (16 KB) into local memory ~3,280
# cycles, the same whatever the number of tiles": 3,280 / 16,384 = 0.2002 cycles per byte (~5 B
# per cycle, all fixed costs included).  One figure fits one constant: how the time splits into a
# start-up cost and a rate is not known.  The spec does not say which path the paper used; the
# model applies the rate to the streamed Br the generated project loads through the tile's DMA.
BR_COPY_CYCLES_PER_BYTE = 3280 / 16384

# ASSUMED: DDR bandwidth seen by each PL mover / write-back AXI port: one DDR_AXI_BITS-bit beat per PL
# cycle at the board's PL clock (catalog ``pl_clock_hz``), i.e. DDR_AXI_BITS / 8 x PL clock / AIE clock
# bytes per AIE cycle (:func:`ddr_bytes_per_cycle`): 4 on VCK190 and VEK280 (PL at 1/4 of the AIE
# clock; the same as one 32-bit GMIO stream per AIE cycle), 8 on VEK385 (PL 500 MHz, AIE 1.0 GHz).
# No figure in the specs measures it, and the boards' DDR peak rates are not in the catalog (not
# found in the searchable sources), so the DDR devices themselves are taken not to be the limit.
DDR_AXI_BITS = 128

# ASSUMED: the start of one DDR transfer (burst / buffer-descriptor start), taken equal to the DMA
# start cost the dense model assumes (movement.DMA_START_CYCLES).
DDR_ACCESS_CYCLES = mv.DMA_START_CYCLES


# FITTED (calibration): gemm-gotoblas-versal.md § Calibration: `Copy Cr` per micro-kernel, the cycles
# a tile spends loading its 8 x 8 Cr from DDR through its GMIO port and storing it back, per
# micro-kernel, at 1, 2, 4, 8, 16, 32 tiles (one port each): 40, 58, 63, 84, 157, 282.  Form:
#     copy(T) = CR_COPY_CYCLES + [T > 1] x (CR_CONTENTION_CYCLES + CR_SERIAL_CYCLES x T x log2 T)
# one port alone; a fixed arbitration cost once ports contend; DDR serialisation growing a little
# faster than the number of ports.  The form is empirical (the spec says only that "DDR access is
# serial, so more ports wait longer"): it is the simplest we found within 10% on all six counts;
# a + b T misses T = 2 by 15-17% whichever way it is fitted, a + b T + c T^2 by 14%
# (benchmarks/gemm_copy_cr_fit.py prints them).  The three constants are a least-squares fit in
# relative error to the six figures (T = 1 alone sets CR_COPY_CYCLES; errors -3.7% .. +4.9%,
# -6.6% at 16 tiles; docs/validation.md).  Used beyond 32 ports it is an extrapolation.
CR_COPY_CYCLES = 40.0
CR_CONTENTION_CYCLES = 12.91
CR_SERIAL_CYCLES = 1.465

# The Cr the `Copy Cr` series moves: 8 x 8 values of the uint8 experiment's C, int32 (k = 2048:
# 255 x 255 x 2048 < 2^31) = 256 bytes.  ASSUMED: a Cr of another size (int64 C, fp32) costs in
# proportion to its bytes; the spec measures one size only.
CR_COPY_BYTES = 8 * 8 * 4


def copy_cr_cycles(ports: int, cr_bytes: int = CR_COPY_BYTES) -> float:
    """Cycles a tile waits per micro-kernel to load its Cr from DDR and store it back through its
    own port while ``ports`` ports do the same (the spec's `Copy Cr`, fitted; see above)."""
    if ports < 1:
        raise ValueError("ports must be at least 1")
    copy = CR_COPY_CYCLES
    if ports > 1:
        copy += CR_CONTENTION_CYCLES + CR_SERIAL_CYCLES * ports * math.log2(ports)
    return copy * cr_bytes / CR_COPY_BYTES


def stream_bytes_per_cycle(device: Device) -> float:
    """One Ar stream into the tiles: the slower of the PLIO (128 bits at the PL clock) and the
    kernel's stream port (``core_stream_bits``)."""
    plio = PLIO_BITS / 8 * device.pl_clock_hz / device.clock_hz
    return min(plio, mv.core_stream_bytes_per_cycle(device))


def plio_dma_bytes_per_cycle(device: Device) -> float:
    """A PLIO into a DMA channel (a memory tile's S2MM): the slower of the PLIO and the switch /
    DMA stream (``stream_bits``: 64 on AIE-MLv2)."""
    plio = PLIO_BITS / 8 * device.pl_clock_hz / device.clock_hz
    return min(plio, mv.stream_bytes_per_cycle(device))


def multicast_cycles(nbytes: int, device: Device, ar_streams: int = 1) -> float:
    """Ar of ``nbytes`` over ``ar_streams`` streams, to any number of tiles: one word per cycle per
    stream plus the fixed start (spec: one 64-byte vector ~19 cycles "regardless of fan-out")."""
    per_stream = math.ceil(nbytes / ar_streams)
    return math.ceil(per_stream / stream_bytes_per_cycle(device)) + mv.STREAM_FIXED_CYCLES


@dataclass(frozen=True)
class MicroKernelCycles:
    """One micro-kernel (mr x nr x kc) on one tile, without its epilogue."""

    stream: float
    mac: float
    load: float

    @property
    def cycles(self) -> float:
        return max(self.stream, self.mac, self.load)

    @property
    def bound(self) -> str:
        return max((self.stream, "stream"), (self.mac, "compute"), (self.load, "memory"))[1]


def microkernel_cycles(t: GemmType, kc: int, device: Device, ar_streams: int = 1, mr: int = 8, nr: int = 8,
                       *, stream: bool = True, macs: bool = True) -> MicroKernelCycles:
    """The L6 loop over ``kc``: reading Ar from ``ar_streams`` streams and/or issuing the MACs and
    Br loads (``stream`` / ``macs`` switch them off, as in the spec's three experiments)."""
    gen = device.generation
    ks = t.mmul[1]
    t_stream = multicast_cycles(kc * mr * t.bytes, device, ar_streams) if stream else 0.0
    t_mac = mac_cycles(kc * mr * nr, gen, t.pair) if macs else 0.0
    t_load = (kc // ks) * ks * nr * t.bits / gen.load_bits_per_cycle if macs else 0.0
    return MicroKernelCycles(float(t_stream), float(t_mac), float(t_load))


def br_copy_cycles(nbytes: int) -> float:
    return nbytes * BR_COPY_CYCLES_PER_BYTE


def ddr_bytes_per_cycle(device: Device) -> float:
    """Bytes per AIE cycle one PL AXI port moves to or from DDR (assumed: one DDR_AXI_BITS beat per
    PL cycle at the catalog's PL clock)."""
    return DDR_AXI_BITS / 8 * device.pl_clock_hz / device.clock_hz


def ddr_cycles(nbytes: int, device: Device) -> float:
    """One DDR transfer of ``nbytes`` by the PL (read or write), in ``device``'s AIE cycles."""
    return nbytes / ddr_bytes_per_cycle(device) + DDR_ACCESS_CYCLES


@dataclass(frozen=True)
class GemmPerformance:
    cycles: float  # AIE side: Br copies, micro-kernels, write-back (packing excluded)
    packing_cycles: float
    latency_ns: float
    interval_ns: float
    throughput_ops_per_s: float
    bound: str
    tiles_used: int
    macs_per_cycle_per_tile: float
    efficiency: float  # of the tiles' peak MAC rate over ``cycles``
    microkernel: MicroKernelCycles
    round_cycles: tuple[float, float]  # one round (micro-kernel + write-back) at pc == 0 and pc > 0
    step_cycles: tuple[float, float]  # one L4 step's compute (rounds), pc == 0 and pc > 0
    br_copy: float
    breakdown: dict[str, float]  # where ``cycles`` go; sums to ``cycles`` (not design.json's: breakdown_parts)
    loops: dict[str, int]
    clock_hz: float = field(kw_only=True)  # the AIE clock
    batch: int = 1  # one C = A B per interval (protocol.Performance)
    memory_tiles_used: int = 0  # set by the design from its mapped graph (gemm/lower.resources)
    replicas: int = 1  # one copy (protocol.Performance)

    @property
    def total_cycles(self) -> float:
        return self.cycles + self.packing_cycles

    def breakdown_parts(self) -> list[tuple[str, float, dict]]:
        """``protocol.Performance``: where the AIE cycles go, in ns, with their cycles and share."""
        return [(k, v / self.clock_hz * 1e9, {"cycles": v, "share": v / self.cycles if self.cycles else 0.0})
                for k, v in self.breakdown.items()]

    def extra_json(self) -> dict:
        return self._own(self.microkernel)

    def to_json(self) -> dict:
        """design.json's ``performance`` (``design_schema.performance_json``)."""
        return design_schema.performance_json(self)

    def _own(self, mk) -> dict:
        return {
            "cycles": self.cycles,
            "packing_cycles": self.packing_cycles,
            "total_cycles": self.total_cycles,
            "macs_per_cycle_per_tile": self.macs_per_cycle_per_tile,
            "efficiency": self.efficiency,
            "microkernel": {"stream": mk.stream, "mac": mk.mac, "load": mk.load, "cycles": mk.cycles,
                            "bound": mk.bound},
            "round_cycles": {"pc_first": self.round_cycles[0], "pc_later": self.round_cycles[1]},
            "l4_step_cycles": {"br_copy": self.br_copy, "compute_pc_first": self.step_cycles[0],
                               "compute_pc_later": self.step_cycles[1]},
            "loops": self.loops,
        }


def cr_bytes(plan: GemmPlan) -> int:
    """Bytes of one Cr in C's type (int64 C: two int32 words per value)."""
    return plan.blocks.mr * plan.blocks.nr * 4 * (2 if plan.output.wide else 1)


def cr_ddr_cycles(transfers: int, nbytes: int, device: Device) -> float:
    """DDR time of ``transfers`` Cr reads / writes of ``nbytes`` in one round, whichever path they
    take (GMIO ports or the PL write-back): the bytes at :func:`ddr_bytes_per_cycle`, without a start cost
    per transfer.  The starts overlap one another and the micro-kernel: the `Copy Cr` calibration
    has 32 ports moving 64 Cr transfers of 256 B per round with the round only 282 cycles longer
    than the micro-kernel, which 64 x DDR_ACCESS_CYCLES of serial starts (4,608 cycles in all at
    4 B/cycle) would exceed; the bytes alone (4,096) do not."""
    return transfers * nbytes / ddr_bytes_per_cycle(device)


def round_parts(plan: GemmPlan, mk: MicroKernelCycles, later_pc: bool) -> tuple[float, float]:
    """(what a tile spends on one round: micro-kernel + exposed write-back, the DDR traffic of all
    tiles' Cr in that round); the round takes the larger."""
    cfg, nbytes = plan.config, cr_bytes(plan)
    if cfg.writeback == "serial":  # load Cr, add, store Cr, every micro-kernel (spec's epilogue)
        return mk.cycles + copy_cr_cycles(plan.tiles, nbytes), cr_ddr_cycles(plan.tiles * 2, nbytes, plan.device)
    words_per_cycle = plan.device.generation.core_stream_bits / 32  # Cr leaves through the kernel's port
    epilogue = plan.cr_words / words_per_cycle
    return mk.cycles + epilogue, cr_ddr_cycles(plan.tiles * (2 if later_pc else 1), nbytes, plan.device)


def round_cycles(plan: GemmPlan, mk: MicroKernelCycles, later_pc: bool) -> float:
    """One L5 round: every tile runs one micro-kernel, and its Cr goes out."""
    return max(round_parts(plan, mk, later_pc))


def estimate(plan: GemmPlan) -> GemmPerformance:
    """The plan's modelled performance, computed once per plan (``mapped/cache.memo``: the search
    ranks a candidate by it more than once)."""
    return memo(plan, "gemm-estimate", (), lambda: _estimate(plan))


def _estimate(plan: GemmPlan) -> GemmPerformance:
    if plan.memtile:  # AIE-ML: the memory-tile level (gemm/perf_memtile.py)
        from .perf_memtile import estimate_memtile

        return estimate_memtile(plan)
    t, b, cfg, dev = plan.dtype, plan.blocks, plan.config, plan.device
    mk = microkernel_cycles(t, b.kc, dev, cfg.ar_streams, b.mr, b.nr)
    rounds, steps = plan.rounds, plan.l4_steps
    br = br_copy_cycles(plan.br_bytes)
    r_first, r_later = round_cycles(plan, mk, False), round_cycles(plan, mk, True)
    c_first, c_later = rounds * r_first, rounds * r_later

    from .lower import block_cycles

    def block(later_pc: bool, compute: float) -> tuple[float, float]:
        """(cycles, exposed Br copy) of one (jc, pc, ic) block: ``steps`` iterations of the mapped
        graph's stage graph (the Br copy, then the rounds), simulated."""
        cyc = block_cycles(plan, later_pc)
        return cyc, cyc - steps * compute

    blocks_first = plan.n_jc * plan.n_ic  # blocks with pc == 0
    blocks_later = blocks_first * (plan.n_pc - 1)
    (cyc_f, br_f) = block(False, c_first)
    (cyc_l, br_l) = block(True, c_later) if blocks_later else (0.0, 0.0)
    cycles = blocks_first * cyc_f + blocks_later * cyc_l
    kernels = (blocks_first + blocks_later) * steps * rounds
    breakdown = {
        "br_copy": blocks_first * br_f + blocks_later * br_l,
        f"microkernel ({mk.bound})": kernels * mk.cycles,
        "write_back": blocks_first * steps * rounds * (r_first - mk.cycles)
        + blocks_later * steps * rounds * (r_later - mk.cycles),
    }
    pack_b = ddr_cycles(b.kc * b.nc * t.bytes, dev)
    pack_a = ddr_cycles(b.mc * b.kc * t.bytes, dev)
    packing = plan.n_jc * plan.n_pc * (pack_b + plan.n_ic * pack_a)
    macs = plan.m * plan.n * plan.k
    per_tile = macs / (cycles * plan.tiles)
    latency_ns = (cycles + packing) / dev.clock_hz * 1e9
    # The bound: the Br copy if it dominates, else what limits a round (its micro-kernel's slowest
    # unit, or the write-back when that is the longer part of the round).
    exposed_br = breakdown["br_copy"]
    rounds_total = cycles - exposed_br
    tile_part, ddr_part = round_parts(plan, mk, False)
    wb_limited = ddr_part > tile_part or tile_part - mk.cycles > mk.cycles
    bound = "br_copy" if exposed_br > rounds_total else ("write_back" if wb_limited else mk.bound)
    loops = {
        "L1_jc": plan.n_jc,
        "L2_pc": plan.n_pc,
        "L3_ic": plan.n_ic,
        "L4_steps_per_block": steps,
        "L5_microkernels_per_tile_per_step": rounds,
        "L6_ksteps_per_microkernel": plan.ksteps,
    }
    return GemmPerformance(
        cycles=cycles,
        packing_cycles=packing,
        latency_ns=latency_ns,
        interval_ns=latency_ns,  # one GEMM after the other: nothing overlaps between calls
        throughput_ops_per_s=2 * macs / (latency_ns * 1e-9),
        bound=bound,
        tiles_used=plan.tiles,
        macs_per_cycle_per_tile=per_tile,
        efficiency=per_tile / dev.generation.macs_per_cycle[t.pair],
        microkernel=mk,
        round_cycles=(r_first, r_later),
        step_cycles=(c_first, c_later),
        br_copy=br,
        breakdown=breakdown,
        loops=loops,
        clock_hz=dev.clock_hz,
    )
