"""Device catalog: every hardware fact the planner, emulator and emitter rely on, with its source.

Facts come from ``shared/spec/versal-devices.md`` (which cites AMD AM009, AM020, AM027, UG1079,
UG1603, UG1529 and the DS957/DS958 data sheets).  Nothing else in the package hard-codes a device
number: look it up here.

Differences between generations and boards are data here too: code asks the catalog what it
depends on (``cascade_serpentine``, ``float_types``, ``accumulators``, ``vitis_platform``,
``gemm_design`` ...), never which generation it has; a generation's ``name`` is for messages only
(``tests/test_devices.py`` checks this).  Fields added for such decisions have their source under
their own name in ``sources``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from .errors import ConfigError
from .numerics.types import Rounding

SPEC = "shared/spec/versal-devices.md"
GEMM_SPEC = "shared/spec/gemm-gotoblas-versal.md"

# Operand kinds used as keys: "i4", "i8", "i16", "i32", "fp32", "bf16", "fp16" ("i4": signed 4-bit codes
# packed two per byte, AIE-ML / AIE-MLv2 weights only; "fp16": IEEE binary16, AIE-MLv2's float16).
TypePair = tuple[str, str]


@dataclass(frozen=True)
class BlockFloatFormat:
    """The documented layout of one block floating-point ("MX") type of the AIE API (``aie::block_vector``).

    Only what AMD's documents state is held here (block size, field widths, bytes per block, the
    native ``aie::mmul`` shapes and the accumulator they produce).  What the documents do not state
    (mantissa encoding, exponent bias, how a conversion picks the shared exponent and sub-tile
    shifts and rounds, the precision of the block dot product) is deliberately absent:
    ``docs/devices.md`` "Data types AIE-MLv2 adds" lists those gaps.
    """

    block: int  # mantissas sharing one exponent (exponent block size, EBS)
    mantissa_bits: int  # bits per element mantissa
    exponent_bits: int  # bits of the shared exponent
    subtile_shifts: int  # sub-tile shift fields per block
    subtile_shift_bits: int  # bits per sub-tile shift
    block_bytes: int  # bytes of one block in memory
    mmul_shapes: tuple[tuple[int, int, int], ...]  # UG1529 AIE-MLv2 row, same type on A and B
    accumulator: str  # accumulator the mmul produces ("accfloat")

    @property
    def mantissas_per_shift(self) -> int:
        """Consecutive mantissas one sub-tile shift applies to (block / shifts, AIE API basic types)."""
        return self.block // self.subtile_shifts if self.subtile_shifts else 0


@dataclass(frozen=True)
class Generation:
    """Per-tile architecture of one AI Engine generation."""

    name: str  # "aie", "aie-ml", "aie-mlv2"
    arch_macro: int  # value of __AIE_ARCH__ the AMD compiler defines for it
    data_memory_bytes: int
    memory_banks: int
    program_memory_bytes: int
    stack_bytes: int
    heap_bytes: int
    neighbour_memory_bytes: int  # own + reachable neighbours
    load_bits_per_cycle: int  # two vector load units together
    store_bits_per_cycle: int
    stream_in_ports: int
    stream_out_ports: int
    stream_bits: int
    cascade_bits: int
    cascade_vertical: bool
    # The horizontal cascade runs east on even array rows and west on odd ones, so a chain snakes
    # through the array (AIE1); False: it runs east on every row.  Placement, kernel locations and
    # link distances follow it.
    cascade_serpentine: bool
    macs_per_cycle: Mapping[TypePair, float]
    mmul_shapes: Mapping[TypePair, tuple[int, int, int]]  # the native tiling the Dense kernel uses
    accumulators: Mapping[TypePair, int]  # accumulator lane width in bits for the type pair
    rounding_modes: frozenset[Rounding]
    float_types: frozenset[str]  # float types the vector unit handles natively
    # Largest right shift of a shift-round-saturate (aie::to_vector(shift), the SRS intrinsics) and
    # largest left shift of an upshift into an accumulator (from_vector(v, shift), UPS); aieflow uses
    # only shifts >= 0.  Every shift a design applies must lie in 0..max (ops/base.require_shift).
    srs_shift_max: int
    ups_shift_max: int
    sources: Mapping[str, str] = field(default_factory=dict)
    # Packet switching: a pktmerge joins at most this many packet streams (UG1079); see
    # LIMIT_SOURCES.  Added for the recurrent mapping; the same on every generation.
    pktmerge_max_inputs: int = 32
    # A compute tile's own DMA: channels per direction (S2MM into its data memory, MM2S out of it),
    # which move every buffer a kernel reads or writes from anything but a memory it shares (a PLIO,
    # a memory tile, a tile that is not its neighbour); see LIMIT_SOURCES.
    tile_dma_channels: int = 2
    # An array interface tile's DMA (the one GMIO goes through): channels per direction (MM2S from
    # DDR into the array, S2MM from the array to DDR).  The rows CNN mapping holds a skip that does
    # not fit on the array in a DDR segment through one output and one input GMIO, on one interface
    # tile's DMA: at most this many segments (see LIMIT_SOURCES).
    interface_dma_channels: int = 2
    # The neighbours whose data memories a tile's core addresses besides its own ("north", "south",
    # "west", or "horizontal": west or east depending on the row, AIE1's mirrored rows).  The Dense
    # planner borrows the vertical ones (ops/dense.py); ``neighbour_memory_bytes`` is own + these.
    neighbour_memories: tuple[str, ...] = ()
    # The core's own stream ports (readincr / writeincr in a kernel) move this many bits per cycle,
    # whatever the switch width: on AIE-MLv2 the 64-bit switch reaches the core through a 32 <-> 64
    # bit adapter (AM027).  DMA channels run at ``stream_bits``.
    core_stream_bits: int = 32
    # Memory tiles (none on AIE1): physical banks and their width, the read / write interfaces that
    # reach the banks, and the width of one DMA channel's memory interface.
    memtile_banks: int = 0
    memtile_bank_bits: int = 0
    memtile_read_ports: int = 0
    memtile_write_ports: int = 0
    memtile_dma_memory_bits: int = 0
    # aie::lut / aie::parallel_lookup (UG1529 "Lookup Tables": from AIE-ML on): parallel accesses of
    # one lookup (the aie::lut template argument) and the bits of one duplicated block of the table's
    # layout (UG1603 "Lookup Tables and Linear Approximation"); 0: no lookup tables (AIE1).
    lut_parallel_accesses: int = 0
    lut_repeat_bits: int = 0
    # Block floating-point element types of aie::block_vector / aie::mmul (AIE API "Block Vector";
    # UG1603 "Block Floating Type Operations"): name -> documented layout.  Empty where the
    # generation has none.  Catalog data only: no kernel, emulation or PTQ uses them (docs/devices.md).
    block_float_types: Mapping[str, BlockFloatFormat] = field(default_factory=dict)

    @property
    def bank_bytes(self) -> int:
        return self.data_memory_bytes // self.memory_banks

    @property
    def vertical_lenders(self) -> tuple[str, ...]:
        """The neighbours above and below whose memories a tile can borrow, south first."""
        return tuple(d for d in ("south", "north") if d in self.neighbour_memories)

    @property
    def widest_accumulator_bits(self) -> int:
        """Widest integer accumulator lane of the catalog's 8/16-bit type pairs (``accumulators``)."""
        return max(self.accumulators.values())


@dataclass(frozen=True)
class Device:
    """One board / part: a generation plus its array size, clocks and interfaces."""

    key: str  # "vck190"
    board: str
    part: str
    generation: Generation
    columns: int
    rows: int  # compute-tile rows
    memory_tile_rows: int
    memory_tile_bytes: int
    clock_hz: float
    pl_clock_hz: float
    plio_columns: int  # interface tiles usable for PLIO
    plio_in_per_column: int
    plio_out_per_column: int
    vitis_platform: str  # name of the board's Vitis base platform (the .xpfm a generated Makefile asks for)
    # GEMM design the board gets: "pl-memory" (GotoBLAS blocks in PL UltraRAM / Block RAM, AIE1),
    # "memtile" (the memory tiles are the L2, AIE-ML), None (no GEMM design).
    gemm_design: str | None
    memtile_channels: int = 0  # DMA channels per memory tile and direction (MM2S = S2MM)
    memtile_bds: int = 0  # buffer descriptors per memory-tile DMA
    notes: str = ""
    sources: Mapping[str, str] = field(default_factory=dict)

    @property
    def compute_tiles(self) -> int:
        return self.columns * self.rows

    @property
    def memory_tiles(self) -> int:
        return self.columns * self.memory_tile_rows

    def peak_macs_per_cycle(self, pair: TypePair) -> float:
        return self.generation.macs_per_cycle[pair]

    def peak_ops_per_s(self, pair: TypePair) -> float:
        return self.compute_tiles * self.peak_macs_per_cycle(pair) * 2 * self.clock_hz

    def describe(self) -> dict[str, object]:
        g = self.generation
        return {
            "device": self.key,
            "board": self.board,
            "part": self.part,
            "generation": g.name,
            "grid": f"{self.columns} x {self.rows} = {self.compute_tiles} compute tiles",
            "memory_tiles": f"{self.memory_tiles} x {self.memory_tile_bytes // 1024} KB "
            f"({g.memtile_banks} banks x {g.memtile_bank_bits}-bit, {g.memtile_read_ports} read / "
            f"{g.memtile_write_ports} write interfaces)"
            if self.memory_tiles
            else "none",
            "clock": f"{self.clock_hz / 1e9:.2f} GHz (PL {self.pl_clock_hz / 1e6:.1f} MHz)",
            "tile_memory": f"{g.data_memory_bytes // 1024} KB in {g.memory_banks} banks",
            "streams": f"{g.stream_in_ports} in / {g.stream_out_ports} out x {g.core_stream_bits}-bit core ports, "
            f"{g.stream_bits}-bit switch and DMA",
            "cascade": f"{g.cascade_bits}-bit" + (", horizontal and vertical" if g.cascade_vertical else ", horizontal"),
            "macs_per_cycle": {f"{a}x{b}": v for (a, b), v in g.macs_per_cycle.items()},
            "mmul": {f"{a}x{b}": "x".join(map(str, s)) for (a, b), s in g.mmul_shapes.items()},
        }


def _frozen(d: dict) -> Mapping:
    return MappingProxyType(d)


# Sources of limits added after the first catalog (fields with defaults, same on every generation).
LIMIT_SOURCES: Mapping[str, str] = MappingProxyType(
    {
        "pktmerge_max_inputs": "UG1079 'Packet Split and Merge Sizes': at most a 32-to-1 pktmerge and a "
        "1-to-32 pktsplit (n <= 32 packet streams on one physical channel); assumed the same on AIE-ML / "
        "AIE-MLv2 (UG1603 has the same pktmerge<n> construct; its limit is not in the specs)",
        "tile_dma_channels": "shared/spec/versal-devices.md 'DMA per tile': 2 MM2S + 2 S2MM (AM009 AIE tile DMA); "
        "AM020 'AIE-ML Tile DMA' the same two channels per direction; assumed the same on AIE-MLv2",
        "interface_dma_channels": "shared/spec/versal-devices.md 'PL interface' (AIE-ML): interface DMA 2 MM2S + "
        "2 S2MM, 4 B/cycle each; AM009 'AI Engine Array Interface' the same two channels per direction on AIE1; "
        "assumed the same on AIE-MLv2",
    }
)


_ALL_ROUNDING = frozenset(Rounding)
_AIE1_ROUNDING = _ALL_ROUNDING - {Rounding.SYM_FLOOR, Rounding.SYM_CEIL}

AIE1 = Generation(
    name="aie",
    arch_macro=10,
    data_memory_bytes=32 * 1024,
    memory_banks=8,
    program_memory_bytes=16 * 1024,
    stack_bytes=1024,
    heap_bytes=1024,
    neighbour_memory_bytes=128 * 1024,
    load_bits_per_cycle=512,
    store_bits_per_cycle=256,
    stream_in_ports=2,
    stream_out_ports=2,
    stream_bits=32,
    cascade_bits=384,
    cascade_vertical=False,
    cascade_serpentine=True,
    macs_per_cycle=_frozen(
        {
            ("i8", "i8"): 128,
            ("i16", "i8"): 64,
            ("i16", "i16"): 32,
            ("i32", "i16"): 16,
            ("i32", "i32"): 8,
            ("fp32", "fp32"): 8,
        }
    ),
    # UG1529 "Matrix Multiplication" table, AIE row; <4,2,4> float is the shape the ESPCN thesis used.
    mmul_shapes=_frozen(
        {
            ("i8", "i8"): (4, 8, 4),
            ("i16", "i8"): (4, 4, 4),
            ("i16", "i16"): (4, 4, 4),
            ("fp32", "fp32"): (4, 2, 4),
        }
    ),
    accumulators=_frozen({("i8", "i8"): 48, ("i16", "i8"): 48, ("i16", "i16"): 48}),
    rounding_modes=_AIE1_ROUNDING,
    float_types=frozenset({"fp32"}),
    srs_shift_max=62,
    ups_shift_max=62,
    sources=_frozen(
        {
            "srs_shift_max": "AI Engine Intrinsics User Guide (AIE) v2023.2, Vector Conversions > Shift-Round-"
            "Saturate: shift amount -1..62 (encoded 0..63 in the instruction)",
            "ups_shift_max": "AI Engine Intrinsics User Guide (AIE) v2023.2, Vector Conversions > Upshift: "
            "shift amount -1..62",
            "memory, banks, stack, ports, cascade, MACs": f"{SPEC} (AM009, UG1079)",
            "mmul shapes": "UG1529 Matrix Multiplication table (AIE); ESPCN thesis for float <4,2,4>",
            "accumulators": "AM009: 48-bit lanes for 8/16-bit operands",
            "rounding modes": "AIE intrinsics guide: rnd_floor..rnd_conv_odd (no symmetric floor/ceil)",
            "core_stream_bits": f"AM009 AXI4-Stream Interconnect: a 32-bit stream switch; {SPEC}: 2 x 32-bit in, 2 x 32-bit "
            "out per tile",
            "memtile": "AM009: AIE1 has no memory tiles",
            "cascade_serpentine": f"AM009 cascade stream: horizontal only, east on even rows and west on odd "
            f"ones, so a chain snakes through the array; {SPEC} (cascade: horizontal only)",
            "neighbour_memories": f"{SPEC}: 'own + 3 neighbours (128 KB)' (AM009).  Which three is aieflow's "
            "reading of AM009, not in the spec: north, south, and the horizontal neighbour on the core's side "
            "away from its own memory module, west or east by row because AIE1 rows are mirrored (the mirroring "
            "that makes the cascade serpentine)",
        }
    ),
    neighbour_memories=("north", "south", "horizontal"),
)

AIE_ML = Generation(
    name="aie-ml",
    arch_macro=20,
    data_memory_bytes=64 * 1024,
    memory_banks=8,
    program_memory_bytes=16 * 1024,
    stack_bytes=1024,
    heap_bytes=1024,
    neighbour_memory_bytes=256 * 1024,
    load_bits_per_cycle=512,
    store_bits_per_cycle=256,
    stream_in_ports=1,
    stream_out_ports=1,
    stream_bits=32,
    cascade_bits=512,
    cascade_vertical=True,
    cascade_serpentine=False,
    macs_per_cycle=_frozen(
        {
            ("i8", "i8"): 256,
            ("i8", "i4"): 512,
            ("i16", "i8"): 128,
            ("i16", "i16"): 64,
            ("i32", "i16"): 32,
            ("i32", "i32"): 16,
            ("bf16", "bf16"): 128,
        }
    ),
    # AIE4ML's tilings (dense-on-aie-ml.md), all native per UG1529; int8 x int4: UG1529's AIE-ML
    # 8b x 4b column (4x16x8, 8x16x8, 4x32x8), the smallest, one 512-MAC step.
    mmul_shapes=_frozen(
        {
            ("i8", "i8"): (4, 8, 8),
            ("i8", "i4"): (4, 16, 8),
            ("i16", "i8"): (4, 4, 8),
            ("i16", "i16"): (4, 4, 4),
            ("bf16", "bf16"): (4, 8, 4),
        }
    ),
    accumulators=_frozen({("i8", "i8"): 32, ("i8", "i4"): 32, ("i16", "i8"): 32, ("i16", "i16"): 64}),
    rounding_modes=_ALL_ROUNDING,
    float_types=frozenset({"bf16"}),
    srs_shift_max=59,
    ups_shift_max=63,
    lut_parallel_accesses=4,
    lut_repeat_bits=128,
    sources=_frozen(
        {
            "lut": "UG1603 'Lookup Tables and Linear Approximation': on AIE-ML each LUT's data repeats every "
            "128 bits and the LUT has two copies, four parallel accesses (aie::lut<4, T>)",
            "srs_shift_max": "AI Engine-ML Intrinsics User Guide UG1583 v2023.2, Shift-Round-Saturate: shift "
            "-4..59 (-4..-2 unsafe)",
            "ups_shift_max": "AI Engine-ML Intrinsics User Guide UG1583 v2023.2, Upshift: shft 0..63",
            "memory, banks, ports, cascade, MACs": f"{SPEC} (AM020, UG1603)",
            "mmul shapes": "shared/spec/dense-on-aie-ml.md kernel tilings; UG1529",
            "accumulators": "shared/spec/dense-on-aie-ml.md: i8 acc32, i16xi16 acc64; AM020",
            "int8 x int4": f"{SPEC} 'Peak MACs per cycle per tile': int8 x int4 512 on AIE-ML, none on AIE; "
            "UG1529 Matrix Multiplication table and AMD's AI Engine-ML Matrix Multiplication Instruction Set "
            "tutorial (XD100): 8b x 4b modes 4x16x8, 8x16x8, 4x32x8 (no 8b x 4b column for AIE); accumulator "
            "acc32 as for 8b x 8b (UG1529 default accumulation for 8-bit operands)",
            "rounding modes": "AIE-ML intrinsics guide UG1583: adds rnd_sym_floor / rnd_sym_ceil",
            "cascade_serpentine": f"AM020 cascade: horizontal west to east on every row, plus vertical; {SPEC} "
            "(cascade: horizontal and vertical)",
            "neighbour_memories": f"{SPEC}: 'own + N/S/W (256 KB)' (AM020)",
            "stream_bits": "AM020 AXI4-Stream Interconnect: 'a fully programmable, 32-bit, AXI4-Stream crossbar'; "
            "UG1603 Architecture Overview: 'The AXI4-Stream crossbar is 32-bit for AIE-ML and 64-bit for AIE-ML v2'",
            "core_stream_bits": "AM020 Summary of key differences: tile stream interface 1 x 32-bit in and 1 x 32-bit out",
            "memtile": "AM020 AIE-ML Memory Tile Memory: 512 KB as 16 banks, each 128 bits wide and 2k words deep, "
            "nine read and nine write interfaces of 128 bits; UG1603 'AIE-ML / AIE-ML v2 Memory Tile' table (16 banks, "
            "128-bit x 2k, 9 read / 9 write interfaces)",
            "memtile_dma_memory_bits": "AM020 AIE-ML Memory Tile Overview and Features: MM2S / S2MM six channels, "
            "6 x 32-bit stream interfaces and 6 x 128-bit memory interfaces each way",
        }
    ),
    neighbour_memories=("north", "south", "west"),
    memtile_banks=16,
    memtile_bank_bits=128,
    memtile_read_ports=9,
    memtile_write_ports=9,
    memtile_dma_memory_bits=128,
)

# AIE-MLv2 (AM027, UG1603): every field below that differs from AIE-ML has its public source under its
# own name in ``sources``; the fields still marked "assumed" are those no searchable public source
# gave a figure for (docs/devices.md lists both).
AIE_MLV2 = Generation(
    name="aie-mlv2",
    arch_macro=21,
    data_memory_bytes=64 * 1024,
    memory_banks=8,
    program_memory_bytes=16 * 1024,
    stack_bytes=1024,
    heap_bytes=1024,
    neighbour_memory_bytes=256 * 1024,
    load_bits_per_cycle=1024,
    store_bits_per_cycle=512,
    stream_in_ports=1,
    stream_out_ports=1,
    stream_bits=64,
    cascade_bits=512,
    cascade_vertical=True,
    cascade_serpentine=False,
    # UG1529 "Matrix Multiplication Modes", AIE-MLv2 row (sources["mmul shapes"]): the native (not
    # emulated) shapes differ from AIE-ML's, and the MACs of one native mmul give the rate
    # (sources["macs_per_cycle"]).  32-bit operands: assumed equal to AIE-ML.
    macs_per_cycle=_frozen(
        {
            ("i8", "i8"): 512,
            ("i8", "i4"): 512,
            ("i16", "i8"): 128,
            ("i16", "i16"): 128,
            ("i32", "i16"): AIE_ML.macs_per_cycle[("i32", "i16")],
            ("i32", "i32"): AIE_ML.macs_per_cycle[("i32", "i32")],
            ("bf16", "bf16"): 256,
            ("fp16", "fp16"): 256,
        }
    ),
    mmul_shapes=_frozen(
        {
            ("i8", "i8"): (8, 8, 8),
            ("i8", "i4"): (8, 8, 8),
            ("i16", "i8"): (4, 4, 8),
            ("i16", "i16"): (4, 4, 8),
            ("bf16", "bf16"): (4, 8, 8),
            ("fp16", "fp16"): (4, 8, 8),
        }
    ),
    # UG1529 AIE-MLv2 row: 8b x 8b only with acc32, 16b x 16b 4x4x8 only with acc64 (AIE-ML's lanes).
    accumulators=AIE_ML.accumulators,
    rounding_modes=_ALL_ROUNDING,
    # float16 (IEEE binary16): AIE-MLv2 only (sources["float_types"]); the Dense chain computes in it
    float_types=frozenset({"bf16", "fp16"}),
    srs_shift_max=AIE_ML.srs_shift_max,
    ups_shift_max=AIE_ML.ups_shift_max,
    lut_parallel_accesses=8,
    lut_repeat_bits=256,
    # AIE API (UG1529) "Basic Types > Block Vector" parameter table and "Matrix Multiplication Modes"
    # AIE-MLv2 row (sources["block_float_types"]).
    block_float_types=_frozen(
        {
            "mx9": BlockFloatFormat(16, 8, 8, 8, 1, 18, ((4, 16, 16),), "accfloat"),
            "mx6": BlockFloatFormat(16, 5, 8, 8, 1, 12, ((4, 16, 16), (8, 16, 16)), "accfloat"),
            "mx4": BlockFloatFormat(16, 3, 8, 8, 1, 8, ((4, 16, 16), (8, 16, 16)), "accfloat"),
        }
    ),
    sources=_frozen(
        {
            "block_float_types": "AIE API (UG1529) 'Basic Types > Block Vector' table (the doc comment of "
            "aie_doc.hpp in AMD's AIE API sources, 2026, from which the UG1529 page is generated): mx9 / mx6 / "
            "mx4 have a block of 16 mantissas of 8 / 5 / 3 bits, 8 sub-tile shifts of 1 bit (each applies to 16 / 8 "
            "= 2 consecutive mantissas), an 8-bit exponent, 18 / 12 / 8 bytes per block; block vectors of 64 / 128 "
            "/ 256 elements on AIE-MLv2 only (bfp16ebs8 / bfp16ebs16 are XDNA2 only).  AI Engine-ML v2 Intrinsics "
            "User Guide (UG1639 2025.1) 'MX Vector Types': MX9 (bfp16) / MX6 (bfp13) / MX4 (bfp11), 'only EBS 16 "
            "is supported', a sub-tile shift bit 'decreases the shared exponent by one for the pair of mantissas'. "
            "UG1529 'Matrix Multiplication Modes' AIE-MLv2 row: mx9 x mx9 4x16x16 (b: extra data manipulation), "
            "mx6 x mx6 and mx4 x mx4 4x16x16 and 8x16x16 (a: emulated, two 4x16x16 calls in the API's "
            "detail/aie2ps/mmul_mx_mx.hpp).  UG1603 'Block Floating Type Operations': AIE-ML v2 only, the result "
            "is always an accfloat accumulator, no element-wise operators.  Not documented (so not in the "
            "catalog): mantissa encoding, exponent bias, conversion rounding and exponent choice, block "
            "dot-product precision",
            "float_types": "float16 (fp16): UG1603 2025.1 'Data Types', 'Vector Based Floating-point Data Types' "
            "table: 1 sign, 5 exponent, 10 mantissa bits; AIE API (UG1529) 'Basic Types' vector table: float16 "
            "vectors of 8 / 16 / 32 / 64 lanes on AIE-MLv2 only; UG1529 'Matrix Multiplication Modes' AIE-MLv2 row: "
            "f16 x f16 4x8x8 native, accumulation in accfloat.  The rounding of a float -> float16 conversion "
            "(accum<accfloat>::to_vector<float16>) and subnormal handling are not documented; aieflow's emulator "
            "and x86 shim take IEEE round-to-nearest-even with subnormals kept (docs/numerics.md)",
            "lut": "UG1603 2026.1 'Lookup Tables and Linear Approximation': on AIE-ML v2 each LUT's data repeats "
            "every 256 bits and the LUT has two copies, the values present eight times for eight parallel "
            "accesses; the aie::lut template argument 8 is read from that sentence (not confirmed by a compile)",
            "srs_shift_max": "assumed equal to AIE-ML (UG1583); no AIE-MLv2 intrinsics figure found",
            "ups_shift_max": "assumed equal to AIE-ML (UG1583); no AIE-MLv2 intrinsics figure found",
            "memory, loads, cascade": f"{SPEC} (AM027): 64 KB data memory, 2 x 512-bit loads + 1 x 512-bit "
            "store, 512-bit cascade",
            "data memory and neighbours": "AM027 Load and Store Unit: the core addresses four 64 KB data memory "
            "blocks as one 256 KB unit (own + three neighbours)",
            "program_memory_bytes": "AM027 AIE-ML v2 Tile Program Memory: 16 KB, 128-bit wide",
            "mmul shapes": "UG1529 (AIE API 2026.1) 'Matrix Multiplication Modes' table, AIE-MLv2 row, shapes "
            "without the 'emulated' (a) footnote: 8b x 4b 8x8x8; 8b x 8b 4x8x8 and 8x8x8 (acc32 only); 16b x 8b "
            "4x4x8 / 8x2x8 (b: extra data manipulation); 16b x 16b 4x2x8 / 8x2x8 (acc32), 2x4x8 / 4x4x8 (acc64 "
            "only); bfloat16 4x8x8; float16 x float16 4x8x8 (4x8x4 and 8x8x8 emulated), accfloat.  AIE-ML's 8b x 4b 4x16x8 and 16b x 16b 4x4x4 are not in the AIE-MLv2 row, and "
            "its bfloat16 4x8x4 is emulated there.  The table is the doc comment of include/aie_api/detail/mmul.hpp "
            "in AMD's AIE API sources, from which UG1529's page is generated",
            "macs_per_cycle": "derived, not a documented rate: the MACs of the largest native mmul in UG1529's "
            "AIE-MLv2 row (i8 8x8x8 = 512, i8 x i4 8x8x8 = 512, i16 x i8 4x4x8 = 128, i16 x i16 acc64 4x4x8 = 128, "
            "bf16 4x8x8 = 256, fp16 4x8x8 = 256), one mmul issued per cycle.  The same rule on UG1529's AIE-ML row gives AIE-ML's "
            f"documented rates ({SPEC}: 256, 512, 128, 64, 128).  AM027 rev 1.1's 'Performance' section, searched again, "
            "gives clock targets (array 1 GHz at -1, PL 500 MHz) and AXI4 memory-mapped bandwidths in the part the search "
            "returned, no MAC rate; UG1603 says only that AIE-ML v2 has wider SIMDs.  32-bit operands (i32 x i16, "
            "i32 x i32): assumed equal to AIE-ML (the rule does not give AIE-ML's documented 32-bit rates)",
            "accumulators": "UG1529 AIE-MLv2 row: 8b x 8b shapes for acc32 only, 16b x 16b 4x4x8 for acc64 only, "
            "i.e. AIE-ML's lane widths",
            "stream_bits": "AM027 AXI4-Stream Interconnect: 'a 64-bit AXI4-Stream crossbar ... All elements of the "
            "switch data-path are 64-bit, which supports the transport of two 32-bit-words in parallel per cycle'; "
            "DMA sources and destinations run at 64 bits per cycle; UG1603 Architecture Overview (32-bit on AIE-ML, "
            "64-bit on AIE-ML v2)",
            "core_stream_bits": "AM027 AXI4-Stream Interconnect: 'Core, trace, and control-packet blocks have a "
            "32-bit stream interface, so an adapter is placed for 32 <-> 64-bit conversion'",
            "memtile": "UG1603 'AIE-ML / AIE-ML v2 Memory Tile' table: 8 banks of 256-bit x 2k words, 10 read and 10 "
            "write interfaces (AIE-ML: 16 x 128-bit, 9 / 9); AM027 AIE-ML v2 Memory Tile Overview and Features: "
            "512 KB in eight physical banks, 256 bits wide and 2K words deep",
            "memtile_dma_memory_bits": "AM027 AIE-ML v2 Memory Tile Features: six MM2S and S2MM channels with 64-bit "
            "stream interfaces and 256-bit memory interfaces",
            "cascade_serpentine": f"assumed as AIE-ML (AM027; {SPEC} gives only the 512-bit width)",
            "neighbour_memories": "UG1603 Architecture Overview (AIE-ML / AIE-ML v2): 'The AI Engine can access the "
            "memory module to the north, south, and west, in addition to its own memory module (always on east)'",
        }
    ),
    neighbour_memories=("north", "south", "west"),
    memtile_banks=8,
    memtile_bank_bits=256,
    memtile_read_ports=10,
    memtile_write_ports=10,
    memtile_dma_memory_bits=256,
)

VCK190 = Device(
    key="vck190",
    board="VCK190",
    part="xcvc1902",
    generation=AIE1,
    columns=50,
    rows=8,
    memory_tile_rows=0,
    memory_tile_bytes=0,
    clock_hz=1.25e9,
    pl_clock_hz=312.5e6,
    plio_columns=39,
    plio_in_per_column=8,
    plio_out_per_column=6,
    vitis_platform="xilinx_vck190_base_202320_1",
    gemm_design="pl-memory",
    sources=_frozen(
        {
            "grid 50x8, 39 PLIO interface tiles, 8 in / 6 out per column": f"{SPEC} (AM009, DS957)",
            "1.25 GHz (-2 speed grade), PL 1/4 of AIE clock": SPEC,
            "vitis_platform": "AMD's Vitis 2023.2 base platform for the VCK190 (Vitis flow: UG1079); "
            f"the name is not in {SPEC}",
            "gemm_design": f"{GEMM_SPEC}: the published VCK190 design keeps Ac / Bc in PL UltraRAM / Block RAM",
        }
    ),
)

VEK280 = Device(
    key="vek280",
    board="VEK280",
    part="xcve2802",
    generation=AIE_ML,
    columns=38,
    rows=8,
    memory_tile_rows=2,
    memory_tile_bytes=512 * 1024,
    clock_hz=1.25e9,
    pl_clock_hz=312.5e6,
    plio_columns=38,
    plio_in_per_column=2,
    plio_out_per_column=2,
    vitis_platform="xilinx_vek280_base_202320_1",
    gemm_design="memtile",
    memtile_channels=6,
    memtile_bds=48,
    sources=_frozen(
        {
            "vitis_platform": "AMD's Vitis 2023.2 base platform for the VEK280 (Vitis flow: UG1603); "
            f"the name is not in {SPEC}",
            "gemm_design": f"aieflow's AIE-ML GEMM (gemm/aieml.py) on the memory tiles and DMA channels below "
            f"({SPEC}, AM020)",
            "grid 38x8, 2 rows of 512 KB memory tiles": f"{SPEC} (AM020, DS958)",
            "memory tile DMA 6 MM2S + 6 S2MM channels, 48 BDs": f"{SPEC} (AM020)",
            "1.25 GHz as in the published AIE4ML results": SPEC,
            "interface DMA 2 MM2S + 2 S2MM per column": SPEC,
        }
    ),
)

VEK385 = Device(
    key="vek385",
    board="VEK385",
    part="2ve3858",
    generation=AIE_MLV2,
    columns=36,
    rows=4,
    memory_tile_rows=1,
    memory_tile_bytes=512 * 1024,
    clock_hz=1.0e9,
    pl_clock_hz=500e6,
    plio_columns=36,
    plio_in_per_column=2,
    plio_out_per_column=2,
    vitis_platform="xilinx_vek385_base",
    gemm_design="memtile",
    memtile_channels=6,
    memtile_bds=48,
    notes="36 x 4 compute tiles as used by one published compiler; see AM027 for the full part",
    sources=_frozen(
        {
            "36 x 4 compute tiles, memory tiles of 512 KB": f"{SPEC} (AM027; one published compiler).  The "
            "2VE3858 array shape is not in AM027 or UG1603 and no Versal AI Edge Gen 2 data sheet figure was found, "
            "so the grid stays the published compiler's; its tile count, 144, agrees with AMD's Versal AI Edge "
            "Series Gen 2 product table (2VE3804 / 2VE3858: 144 AIE-ML v2 tiles), as two public repositories "
            "quote it (the table itself was not in the searchable sources)",
            "~1.0 GHz, PL 500 MHz": f"AM027 rev 1.1 'Performance': the AIE-ML v2 array's performance target for -1 "
            "speed grade devices is 1 GHz, and its 'Interfacing Clock Domains' table gives PL clocks a 500 MHz target "
            f"(-1L); {SPEC} (~1.0-1.05 GHz, PL 500 MHz).  AMD's Vitis Libraries L2 benchmarks run xc2ve3858-ssva2112-2LP "
            "at 1.05 GHz with 64-bit PLIOs at 625 MHz (recorded in docs/devices.md, not used)",
            "memory tile DMA 6 + 6 channels, 48 BDs": "UG1603 'AIE-ML / AIE-ML v2 Memory Tile': six MM2S and six "
            "S2MM DMAs, buffer descriptors (48); AM027 AIE-ML v2 Memory Tile DMA: 12 independent channels",
            "interface DMA / PLIO 64-bit streams": "AM027 AIE-ML v2 Array Interface: each PL stream has a 64-bit "
            "interface (32 / 64-bit, or two as one 128-bit)",
            "vitis_platform": f"placeholder without a release suffix: no VEK385 platform name in {SPEC}",
            "gemm_design": "aieflow's memory-tile GEMM (gemm/aieml.py) on the memory tiles and DMA channels above, "
            "with AIE-MLv2's 64-bit DMA streams, 32-bit core ports (AM027) and its mmul shapes and MAC rates "
            "(UG1529 AIE-MLv2 row, see AIE_MLV2.sources)",
        }
    ),
)

DEVICES: Mapping[str, Device] = _frozen({d.key: d for d in (VCK190, VEK280, VEK385)})


def get_device(key: str | Device) -> Device:
    if isinstance(key, Device):
        return key
    try:
        return DEVICES[str(key).lower()]
    except KeyError:
        raise ConfigError(
            f"unknown device {key!r}; choose one of {', '.join(DEVICES)}"
        ) from None
