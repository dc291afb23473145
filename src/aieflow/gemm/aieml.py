"""The GEMM design for AIE-ML (VEK280): the memory tiles are the L2.

What changes from the VCK190 design (``shared/spec/gemm-gotoblas-versal.md``) and why:

- **No PL memories.**  The catalog has no UltraRAM / Block RAM figures for the VEK280 part, but it
  has its 76 memory tiles of 512 KB.  The PL mover streams A and B straight from DDR (zeros outside
  the matrices) into memory-tile ``shared_buffer``s; their DMA tilers do GotoBLAS's packing: the Ac
  buffer of a tile group is read out in Ar micro-panel order (once per L4 step, ``repetition``),
  the Bc buffer in the mmul layout of each L4 lane's Br panels.
- **One input stream per tile.**  An AIE-ML tile has one stream input (catalog), so Ar comes from the
  group's Ac memory tile over that stream (multicast to the group's tiles), and Br arrives by DMA
  into a local-memory buffer.
- **A wider micro-tile.**  With one 32-bit stream, an 8 x 8 Cr would be stream-bound at 32 MACs per
  cycle (12.5% of the 256 peak).  Ar's reuse is nr, so aieflow widens Cr to what the accumulator
  registers hold: AIE-ML has nine 1024-bit accumulator registers (UG1603, "Accumulator Registers":
  am / bm / cm 0..8), i.e. 32 acc32 lanes or 16 acc64 lanes each; Cr may use 8 of them (one left for
  the compiler: assumption).  Candidates mr in {4, 8} x nr in {8, 16, 32, 64} within that budget;
  the search picks one (4 x 64 for 8-bit: one 4-byte Ar column per 256 MACs).
- **Br panels resident for the whole block.**  One graph iteration = one (jc, pc, ic) block: each
  tile receives all of its L4 lane's Br panels (``l4_steps`` of them) once, and reads Ar
  ``l4_steps`` times from the stream.  nc is chosen so that they fit the 64 KB local memory.
- **bf16** (A and B bf16, C float32): the catalog's bf16 mmul (4x8x4 on AIE-ML, 4x8x8 on AIE-MLv2,
  UG1529), accfloat lanes; each kc block's Cr starts at +0.0 and the PL write-back adds the blocks
  into C in float32 (``emulate.py`` gives the order, ``docs/gemm.md`` the choice of an fp32 C).
- **fp32** is refused: AIE-ML has no native fp32 vector MACs (catalog: no fp32 rate; UG1529 lists
  float x float ``mmul`` on AIE-ML as emulated with bfloat16 operations), so a bit-exact fp32 design
  would rest on an undocumented emulation order.  Use ``--device vck190`` for fp32.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace

from ..devices import Device
from ..errors import ConfigError, PlanError
from . import memory
from .dtypes import GemmType

SPARE_BYTES = 2560  # local memory not available to Br: the spec's "~2.5 KB spared" (AIE1), assumed on AIE-ML
MEMTILE_BUFFERS = 2  # Ac and Bc memory-tile buffers are ping-pong: the next block loads during this one
ACC_REGISTERS = 9  # 1024-bit accumulator registers cm0..cm8 (UG1603 "Accumulator Registers")
CR_REGISTERS = 8  # of them for Cr (one left for the compiler: assumption)
ACC_REGISTER_BITS = 1024
MR_CHOICES = (4, 8)
NR_CHOICES = (8, 16, 32, 64)
SOURCE = "UG1603 Accumulator Registers; devices.py catalog (memory tiles, DMA channels, stream ports)"


def is_memtile_device(device: Device) -> bool:
    """Devices whose GEMM design stages blocks in memory tiles (catalog: ``gemm_design``)."""
    return device.gemm_design == "memtile"


def check_device(device: Device) -> None:
    if device.gemm_design is not None:
        return
    raise ConfigError(
        f"GEMM designs are implemented for boards with a catalog gemm_design (vck190, vek280, vek385); {device.key} "
        f"({device.generation.name}) is not supported: the catalog gives it no GEMM design",
        hint="use --device vck190, vek280 or vek385",
    )


def ml_type(t: GemmType, device: Device) -> GemmType:
    """The element type with AIE-ML's mmul shape and accumulator (catalog: the Dense kernels' native
    tilings and accumulator widths, UG1529)."""
    gen = device.generation
    if t.is_float and t.pair not in gen.mmul_shapes:
        raise ConfigError(
            f"dtype {t.name} on {device.key}: {device.generation.name} has no native fp32 multiply-accumulate (UG1529 lists float x "
            "float mmul on AIE-ML as emulated with bfloat16 operations, in an undocumented order), so aieflow does "
            "not generate a bit-exact fp32 GEMM for it",
            hint=f"use --device vck190 for fp32, or bf16 or an integer dtype (uint8, int8, int16) on {device.key}",
        )
    shape = gen.mmul_shapes[t.pair]
    if t.is_float:  # bf16: the catalog's bf16 mmul, fp32 (accfloat) lanes
        return replace(t, mmul=shape)
    bits = gen.accumulators[t.pair]
    return replace(t, mmul=shape, acc=f"acc{bits}", acc_bits=bits)


def cr_lanes(t: GemmType) -> int:
    """Accumulator lanes Cr may use: CR_REGISTERS registers of 1024 bits."""
    return CR_REGISTERS * ACC_REGISTER_BITS // t.acc_bits


def micro_tiles(t: GemmType) -> list[tuple[int, int]]:
    """(mr, nr) candidates: whole mmul tiles whose Cr fits the accumulator budget."""
    ms, _, ns = t.mmul
    return [(mr, nr) for mr in MR_CHOICES for nr in NR_CHOICES
            if mr % ms == 0 and nr % ns == 0 and mr * nr <= cr_lanes(t)]


@dataclass(frozen=True)
class MemtileLayout:
    """How the blocks sit in the memory tiles (one Ac tile per group, Bc tiles of up to
    ``lanes_per_memtile`` L4 lanes, each read by its own MM2S channel)."""

    lanes_per_memtile: int
    bc_memtiles: int
    ac_memtiles: int
    ac_bytes: int  # per Ac memory tile, one buffer (x MEMTILE_BUFFERS for ping-pong)
    bc_bytes: int  # per full Bc memory tile, one buffer
    lane_bytes: int  # Br panels of one L4 lane for one block (= each tile's Br buffer)
    buffers: int = MEMTILE_BUFFERS

    def lanes(self, tiles_j: int) -> list[int]:
        """L4 lanes held by each Bc memory tile."""
        return [min(self.lanes_per_memtile, tiles_j - b * self.lanes_per_memtile) for b in range(self.bc_memtiles)]

    def to_json(self) -> dict:
        return {"ac_memtiles": self.ac_memtiles, "bc_memtiles": self.bc_memtiles,
                "lanes_per_bc_memtile": self.lanes_per_memtile, "ac_bytes_per_buffer": self.ac_bytes,
                "bc_bytes_per_buffer": self.bc_bytes, "buffers": self.buffers, "br_lane_bytes": self.lane_bytes}


def block_override(blocks: Mapping[str, int], key: str, mult: int, what: str) -> int | None:
    """A user's block size (``gemm.blocks.<key>``), checked against the micro-kernel's multiple."""
    v = blocks.get(key)
    if v is None:
        return None
    if not isinstance(v, int) or isinstance(v, bool) or v < mult or v % mult:
        raise ConfigError(f"block size {key} = {v!r} must be a positive multiple of {mult} ({what})")
    return v


def _balanced(dim: int, cap: int, mult: int, what: str) -> int:
    if cap < mult:
        raise PlanError(f"no {what} block fits: the limit {cap} is below one micro-panel ({mult})")
    return memory.balanced(dim, cap, mult)


def make_ml_plan(m: int, n: int, k: int, t: GemmType, out, device: Device, design: str, cfg,
                 blocks: Mapping[str, int] | None = None):
    """Block sizes and memory-tile layout for ``cfg`` on an AIE-ML device, all limits checked."""
    from .plan import GemmBlocks, GemmPlan  # plan imports this module

    if design != "best":
        raise ConfigError(
            f"the published design is the paper's VCK190 design (PL UltraRAM / Block RAM, two stream ports per "
            f"tile); on {device.key} aieflow generates its memory-tile design only",
            hint="use --design best (or --device vck190 for the published design)",
        )
    gen = device.generation
    if t.mmul != gen.mmul_shapes.get(t.pair) or (not t.is_float and t.acc_bits != gen.accumulators.get(t.pair)):
        t = ml_type(t, device)  # the AIE1 entry of the type table: take AIE-ML's shape and accumulator
    ms, ks, ns = t.mmul
    mr, nr = cfg.mr, cfg.nr
    if cfg.br_transfer != "memtile" or cfg.writeback != "overlapped" or cfg.ar_streams != 1:
        raise ConfigError(f"on {device.key} the GEMM design streams Ar from memory tiles (one stream per tile), "
                          "Br through memory tiles and writes Cr back overlapped",
                          hint="br_transfer='memtile', writeback='overlapped', ar_streams=1")
    if (mr, nr) not in micro_tiles(t):
        raise PlanError(f"micro-tile {mr} x {nr}: {t.name} Cr must be whole {ms} x {ns} mmul tiles within "
                        f"{cr_lanes(t)} accumulator lanes ({CR_REGISTERS} of the {ACC_REGISTERS} 1024-bit registers)",
                        hint=f"choose one of {micro_tiles(t)}")
    blocks = dict(blocks or {})
    unknown = set(blocks) - {"mc", "nc", "kc"}
    if unknown:
        raise ConfigError(f"unknown block size(s) {sorted(unknown)}; give mc, nc and/or kc")
    room = gen.data_memory_bytes - SPARE_BYTES
    kc_max = memory.round_down(room // (nr * t.bytes * cfg.br_buffers), ks)
    # integer sums must fit the lanes; accfloat (bf16) lanes do not overflow on the kernel's operands
    acc_cap = kc_max if t.is_float else memory.round_down((2 ** (t.acc_bits - 1) - 1) // t.max_product, ks)
    kc = block_override(blocks, "kc", ks, f"the {t.name} mmul's K on {gen.name}")
    if kc is not None and kc > kc_max:
        raise PlanError(
            f"kc = {kc}: one Br panel ({kc} x {nr} x {t.bytes} B, x{cfg.br_buffers} buffers) plus {SPARE_BYTES:,} B "
            f"spare does not fit the {gen.data_memory_bytes // 1024} KB local memory",
            hint=f"kc <= {kc_max} with nr = {nr} and {cfg.br_buffers} buffer(s)")
    if kc is not None and kc > acc_cap:
        raise PlanError(f"kc = {kc}: sums of {kc} products of {t.name} may overflow the {t.acc_bits}-bit "
                        "accumulator lanes", hint=f"kc <= {acc_cap}")
    kc = kc or _balanced(k, min(kc_max, acc_cap), ks, "kc")
    # Ac share of a tile group in one memory tile, ping-pong.
    mc_tile_max = memory.round_down(device.memory_tile_bytes // (MEMTILE_BUFFERS * kc * t.bytes), mr)
    mc_mult = mr * cfg.tiles_i
    mc = block_override(blocks, "mc", mc_mult, f"mr x tiles_i = {mr} x {cfg.tiles_i}")
    if mc is not None and mc // cfg.tiles_i > mc_tile_max:
        raise PlanError(f"mc = {mc} with kc = {kc}: a tile group's Ac ({mc // cfg.tiles_i} x {kc}, ping-pong) does "
                        f"not fit a {device.memory_tile_bytes // 1024} KB memory tile",
                        hint=f"mc <= {mc_tile_max * cfg.tiles_i}")
    mc = mc or _balanced(m, mc_tile_max * cfg.tiles_i, mc_mult, "mc")
    # Each tile keeps its lane's Br panels of the block in local memory.
    panel_bytes = kc * nr * t.bytes
    l4_max = room // (panel_bytes * cfg.br_buffers)
    nc = block_override(blocks, "nc", nr, "nr")
    if nc is not None and math.ceil(nc // nr / cfg.tiles_j) > l4_max:
        raise PlanError(f"nc = {nc}: each tile would hold {math.ceil(nc // nr / cfg.tiles_j)} Br panels of "
                        f"{panel_bytes:,} B (x{cfg.br_buffers}) in its {gen.data_memory_bytes // 1024} KB local memory",
                        hint=f"nc <= {l4_max * cfg.tiles_j * nr}")
    nc = nc or _balanced(n, l4_max * cfg.tiles_j * nr, nr, "nc")
    panels = nc // nr
    if cfg.tiles_j > panels:
        raise PlanError(f"{cfg.tiles_j} tiles share L4, but a column block has only nc / nr = {nc} / {nr} = "
                        f"{panels} micro-panels of B", hint=f"use at most {panels} tiles in L4")
    if cfg.tiles_i > mc // mr:
        raise PlanError(f"{cfg.tiles_i} tile groups share L5, but a row block has only mc / mr = {mc // mr} "
                        "micro-panels of A")
    l4 = math.ceil(panels / cfg.tiles_j)
    lane_bytes = l4 * panel_bytes
    lanes_per = min(device.memtile_channels, cfg.tiles_j,
                    device.memory_tile_bytes // (MEMTILE_BUFFERS * lane_bytes))
    bc_tiles = math.ceil(cfg.tiles_j / lanes_per)
    layout = MemtileLayout(lanes_per, bc_tiles, cfg.tiles_i, (mc // cfg.tiles_i) * kc * t.bytes, lanes_per * lane_bytes,
                           lane_bytes)
    if cfg.tiles_i + bc_tiles > device.memory_tiles:
        raise PlanError(f"the design needs {cfg.tiles_i} Ac + {bc_tiles} Bc memory tiles; {device.key} has "
                        f"{device.memory_tiles}", hint="use fewer tiles")
    ins = device.plio_columns * device.plio_in_per_column
    if cfg.tiles_i + bc_tiles > ins:
        raise PlanError(f"the design needs {cfg.tiles_i + bc_tiles} input PLIOs; {device.key} has {ins}")
    lim = memory.BlockLimits(kc_max, mc_tile_max * cfg.tiles_i, l4_max * cfg.tiles_j * nr, cfg.br_buffers,
                             gen.data_memory_bytes, SPARE_BYTES)
    return GemmPlan(m, n, k, t, out, device, design, cfg, GemmBlocks(mc, nc, kc, mr, nr), lim, layout)
