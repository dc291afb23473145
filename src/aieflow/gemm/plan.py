"""GEMM plans: the design point (tiles, streams, Br buffering, write-back) and the block sizes.

A plan is everything the emitter and the model need; it is validated when it is made, so an
invalid request fails here with a :class:`~aieflow.errors.ConfigError` or
:class:`~aieflow.errors.PlanError` that says what to change.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from ..devices import Device
from ..errors import ConfigError, PlanError
from . import memory
from .aieml import MemtileLayout, block_override, is_memtile_device, make_ml_plan
from .dtypes import GemmType, OutputType

MR = NR = 8  # micro-tile: Cr fills the 64 accumulator lanes (spec "Micro-kernel")
DESIGNS = ("published", "best")
TRANSFERS = ("stream", "gmio", "memtile")  # memtile: AIE-ML only (gemm/aieml.py)
WRITEBACKS = ("serial", "overlapped")


@dataclass(frozen=True)
class GemmConfig:
    """One design point.

    ``tiles_j`` tiles parallelise L4 (each its own Br), ``tiles_i`` groups parallelise L5 (each
    group its own Ar multicast); ``ar_streams`` input streams per tile carry Ar; ``br_buffers`` 1
    (copy, then compute) or 2 (ping-pong: the next Br loads while this one is used);
    ``writeback`` ``serial`` (the published epilogue: after every micro-kernel each tile's Cr is
    read from DDR, added and written back through its own port, DDR serialising the ports; costed
    with the paper's measured GMIO `Copy Cr`, carried out by the PL write-back in the generated
    project) or ``overlapped`` (Cr leaves through a stream FIFO, the PL reads C only when pc > 0).  ``mr`` x ``nr``: the micro-tile (8 x 8 on AIE1; wider on AIE-ML,
    where Ar's one stream needs more reuse, see gemm/aieml.py)."""

    tiles_j: int = 1
    tiles_i: int = 1
    ar_streams: int = 1
    br_buffers: int = 1
    br_transfer: str = "stream"
    writeback: str = "serial"
    mr: int = MR
    nr: int = NR

    @property
    def tiles(self) -> int:
        return self.tiles_j * self.tiles_i

    def to_json(self) -> dict:
        return {"tiles_j": self.tiles_j, "tiles_i": self.tiles_i, "tiles": self.tiles,
                "ar_streams": self.ar_streams, "br_buffers": self.br_buffers,
                "br_transfer": self.br_transfer, "writeback": self.writeback, "mr": self.mr, "nr": self.nr}


@dataclass(frozen=True)
class GemmBlocks:
    mc: int
    nc: int
    kc: int
    mr: int = MR
    nr: int = NR

    def to_json(self) -> dict:
        return {"mc": self.mc, "nc": self.nc, "kc": self.kc, "mr": self.mr, "nr": self.nr}


@dataclass(frozen=True)
class GemmPlan:
    m: int
    n: int
    k: int
    dtype: GemmType
    output: OutputType
    device: Device
    design: str
    config: GemmConfig
    blocks: GemmBlocks
    limits: memory.BlockLimits
    memtiles: MemtileLayout | None = None  # AIE-ML: Ac / Bc staged in memory tiles

    @property
    def memtile(self) -> bool:
        """The AIE-ML design: one graph iteration per (jc, pc, ic) block, blocks in memory tiles."""
        return self.memtiles is not None

    # ---- loop counts (blocks are padded with zeros; the write-back clips) ----
    @property
    def tiles(self) -> int:
        return self.config.tiles

    @property
    def n_jc(self) -> int:
        return math.ceil(self.n / self.blocks.nc)

    @property
    def n_pc(self) -> int:
        return math.ceil(self.k / self.blocks.kc)

    @property
    def n_ic(self) -> int:
        return math.ceil(self.m / self.blocks.mc)

    @property
    def panels(self) -> int:
        """Micro-panels of B (nr columns) in one column block."""
        return self.blocks.nc // self.blocks.nr

    @property
    def l4_steps(self) -> int:
        """Graph iterations per (jc, pc, ic) block: each tile column takes one Br per step."""
        return math.ceil(self.panels / self.config.tiles_j)

    @property
    def mc_tile(self) -> int:
        """Rows of Ac one tile group works through per step."""
        return self.blocks.mc // self.config.tiles_i

    @property
    def rounds(self) -> int:
        """Micro-kernels per tile per step (L5 iterations)."""
        return self.mc_tile // self.blocks.mr

    @property
    def ksteps(self) -> int:
        """L6 iterations of one micro-kernel (k unrolled by the mmul's K)."""
        return self.blocks.kc // self.dtype.mmul[1]

    @property
    def br_bytes(self) -> int:
        return self.blocks.kc * self.blocks.nr * self.dtype.bytes

    @property
    def local_bytes(self) -> int:
        """Local memory per tile: the Br copies plus the spare (stack, heap, other data)."""
        if self.memtiles is not None:  # every Br panel of the tile's lane for one block
            return self.memtiles.lane_bytes * self.limits.br_copies + self.limits.spare_bytes
        return self.br_bytes * self.limits.br_copies + self.limits.spare_bytes

    @property
    def plio_in(self) -> int:
        if self.memtiles is not None:  # one PLIO into each Ac and Bc memory tile
            return self.memtiles.ac_memtiles + self.memtiles.bc_memtiles
        return self.config.tiles_j + self.config.tiles_i * self.config.ar_streams

    @property
    def plio_out(self) -> int:
        return self.tiles

    @property
    def uram_bytes(self) -> int:
        return self.blocks.mc * self.blocks.kc * self.dtype.bytes

    @property
    def bram_bytes(self) -> int:
        return self.blocks.kc * self.blocks.nc * self.dtype.bytes

    @property
    def cr_words(self) -> int:
        """32-bit words one micro-kernel writes to its Cr stream."""
        return self.blocks.mr * self.blocks.nr * (2 if self.output.wide else 1)


def _check_config(cfg: GemmConfig, device: Device) -> None:
    gen = device.generation
    for name in ("tiles_j", "tiles_i", "ar_streams", "br_buffers"):
        v = getattr(cfg, name)
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise ConfigError(f"GEMM {name} must be a positive integer, got {v!r}")
    if cfg.tiles > device.compute_tiles:
        raise PlanError(f"{cfg.tiles} tiles requested; {device.key} has {device.compute_tiles} compute tiles",
                        hint=f"use at most {device.compute_tiles} tiles")
    if cfg.ar_streams > gen.stream_in_ports:
        raise PlanError(f"{cfg.ar_streams} Ar input streams per tile; a {gen.name} tile has "
                        f"{gen.stream_in_ports} input stream ports")
    if cfg.br_buffers not in (1, 2):
        raise ConfigError(f"br_buffers must be 1 (single) or 2 (ping-pong), got {cfg.br_buffers}")
    if cfg.br_transfer not in TRANSFERS or cfg.writeback not in WRITEBACKS:
        raise ConfigError(f"unknown transfer {cfg.br_transfer!r} or write-back {cfg.writeback!r}")
    outs = device.plio_columns * device.plio_out_per_column
    ins = device.plio_columns * device.plio_in_per_column
    if cfg.tiles > outs:
        raise PlanError(f"{cfg.tiles} tiles need {cfg.tiles} Cr output PLIOs; {device.key} has {outs} "
                        f"({device.plio_columns} interface columns x {device.plio_out_per_column})",
                        hint=f"use at most {outs} tiles")
    if cfg.br_transfer == "memtile":  # input PLIOs feed memory tiles: checked by make_ml_plan
        return
    if cfg.tiles_j + cfg.tiles_i * cfg.ar_streams > ins:
        raise PlanError(f"the design needs {cfg.tiles_j + cfg.tiles_i * cfg.ar_streams} input PLIOs; "
                        f"{device.key} has {ins}")


def make_plan(m: int, n: int, k: int, t: GemmType, out: OutputType, device: Device, design: str,
              cfg: GemmConfig, blocks: Mapping[str, int] | None = None) -> GemmPlan:
    """Choose the block sizes for ``cfg`` from the memory capacities and validate everything."""
    for name, v in (("m", m), ("n", n), ("k", k)):
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise ConfigError(f"GEMM dimension {name} must be a positive integer, got {v!r}")
    if design not in DESIGNS:
        raise ConfigError(f"unknown GEMM design {design!r}; choose one of {', '.join(DESIGNS)}")
    _check_config(cfg, device)
    if is_memtile_device(device):
        return make_ml_plan(m, n, k, t, out, device, design, cfg, blocks)
    if cfg.br_transfer == "memtile" or (cfg.mr, cfg.nr) != (MR, NR):
        raise ConfigError(f"{device.key}: memory-tile transfers and micro-tiles other than {MR} x {NR} are for "
                          "AIE-ML devices (vek280)", hint="leave br_transfer, mr and nr at their defaults")
    blocks = dict(blocks or {})
    unknown = set(blocks) - {"mc", "nc", "kc"}
    if unknown:
        raise ConfigError(f"unknown block size(s) {sorted(unknown)}; give mc, nc and/or kc")
    ks = t.mmul[1]
    mr_mult = MR * cfg.tiles_i
    kc_max, _ = memory.kc_limit(t, device, NR, cfg.br_transfer, cfg.br_buffers)
    kc = block_override(blocks, "kc", ks, f"the {t.name} mmul's K")
    if kc is not None and kc > kc_max:
        copies = memory.BR_COPIES[(cfg.br_transfer, cfg.br_buffers)]
        raise PlanError(
            f"kc = {kc}: Br ({kc} x {NR} x {t.bytes} B = {kc * NR * t.bytes:,} B, {copies} cop"
            f"{'y' if copies == 1 else 'ies'}) plus {memory.pl_memory(device).local_spare_bytes:,} B spare "
            f"does not fit the {device.generation.data_memory_bytes // 1024} KB local memory",
            hint=f"kc <= {kc_max} with {cfg.br_transfer} Br and {cfg.br_buffers} buffer(s)",
        )
    if kc_max < ks:
        raise PlanError("no kc fits the local memory")
    kc = kc or memory.balanced(k, kc_max, ks)
    lim = memory.limits(t, device, NR, mr_mult, cfg.br_transfer, cfg.br_buffers, kc=kc)
    if lim.mc < mr_mult or lim.nc < NR:
        raise PlanError(f"kc = {kc} leaves no room for one micro-panel of Ac / Bc in the PL memories")
    mc = block_override(blocks, "mc", mr_mult, f"mr x tiles_i = {MR} x {cfg.tiles_i}")
    nc = block_override(blocks, "nc", NR, "nr")
    for key, v, cap, where in (("mc", mc, lim.mc, "UltraRAM (Ac = mc x kc)"),
                               ("nc", nc, lim.nc, "Block RAM (Bc = kc x nc)")):
        if v is not None and v > cap:
            raise PlanError(f"{key} = {v} with kc = {kc} does not fit the {where}", hint=f"{key} <= {cap}")
    mc = mc or memory.balanced(m, lim.mc, mr_mult)
    nc = nc or memory.balanced(n, lim.nc, NR)
    if not t.is_float and kc * t.max_product >= 2 ** (t.acc_bits - 1):
        raise PlanError(f"kc = {kc}: sums of {kc} products of {t.name} may overflow the {t.acc_bits}-bit "
                        f"accumulator lanes", hint="use a smaller kc")
    plan = GemmPlan(m, n, k, t, out, device, design, cfg, GemmBlocks(mc, nc, kc), lim)
    if design == "published" and cfg.tiles_i != 1:
        raise PlanError("the published design parallelises L4 only (tiles_i = 1)")
    if cfg.tiles_j > plan.panels:
        raise PlanError(
            f"{cfg.tiles_j} tiles share L4, but a column block has only nc / nr = {nc} / {NR} = "
            f"{plan.panels} micro-panels of B",
            hint=f"use at most {plan.panels} tiles"
            + (", or --design best (it also parallelises L5)" if design == "published" else ""),
        )
    if cfg.tiles_i > mc // MR:
        raise PlanError(f"{cfg.tiles_i} tile groups share L5, but a row block has only mc / mr = "
                        f"{mc // MR} micro-panels of A")
    return plan
