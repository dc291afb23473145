"""AIE-MLv2 is a generation of its own (issue 24 item 1): the catalog differs from AIE-ML exactly
where AMD's public documents say it does, and every such field names its source.  Expected values
are typed here from the sources (quoted next to them), never read from the catalog."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import aieflow
from aieflow.devices import AIE1, AIE_ML, AIE_MLV2, VEK280, VEK385
from aieflow.perf import movement as mv

# Generation fields and the values the sources give, AIE-ML -> AIE-MLv2, where they differ.
DIFFERENCES = {
    # UG1603 Architecture Overview: "The AXI4-Stream crossbar is 32-bit for AIE-ML and 64-bit for AIE-ML v2";
    # AM027 AXI4-Stream Interconnect: "All elements of the switch data-path are 64-bit".
    "stream_bits": (32, 64),
    # versal-devices.md (AM020 / AM027): 2 x 256-bit loads + 1 x 256-bit store; 2 x 512 + 1 x 512.
    "load_bits_per_cycle": (512, 1024),
    "store_bits_per_cycle": (256, 512),
    # UG1603 "AIE-ML / AIE-ML v2 Memory Tile" table: banks 16 / 8, bank 128-bit / 256-bit x 2k words,
    # read interfaces 9 / 10, write interfaces 9 / 10.
    "memtile_banks": (16, 8),
    "memtile_bank_bits": (128, 256),
    "memtile_read_ports": (9, 10),
    "memtile_write_ports": (9, 10),
    # AM020: memory-tile DMA "6 x 128-bit memory interfaces"; AM027: "256-bit memory interfaces".
    "memtile_dma_memory_bits": (128, 256),
    # __AIE_ARCH__ 20 / 21 (UG1529 Architecture helpers: generation = __AIE_ARCH__ / 10).
    "arch_macro": (20, 21),
    # UG1603 "Lookup Tables and Linear Approximation": the LUT data repeats every 128 bits with four
    # parallel accesses on AIE-ML, every 256 bits with eight on AIE-ML v2.
    "lut_parallel_accesses": (4, 8),
    "lut_repeat_bits": (128, 256),
    # UG1529 "Matrix Multiplication Modes" table, shapes without the "emulated" footnote.  AIE-ML row (the
    # Dense tilings of dense-on-aie-ml.md): 8b x 8b 4x8x8, 8b x 4b 4x16x8, 16b x 8b 4x4x8, 16b x 16b 4x4x4,
    # bfloat16 4x8x4.  AIE-MLv2 row: 8b x 8b 8x8x8 (acc32), 8b x 4b 8x8x8 (4x16x8 absent), 16b x 8b
    # 4x4x8, 16b x 16b 4x4x8 (acc64; 4x4x4 absent), bfloat16 4x8x8 (4x8x4 emulated), float16 4x8x8 (AIE-MLv2
    # only; 4x8x4 and 8x8x8 emulated).
    "mmul_shapes": (
        {("i8", "i8"): (4, 8, 8), ("i8", "i4"): (4, 16, 8), ("i16", "i8"): (4, 4, 8), ("i16", "i16"): (4, 4, 4),
         ("bf16", "bf16"): (4, 8, 4)},
        {("i8", "i8"): (8, 8, 8), ("i8", "i4"): (8, 8, 8), ("i16", "i8"): (4, 4, 8), ("i16", "i16"): (4, 4, 8),
         ("bf16", "bf16"): (4, 8, 8), ("fp16", "fp16"): (4, 8, 8)},
    ),
    # UG1603 2025.1 "Data Types" (float16: 1 / 5 / 10 bits) and UG1529 "Basic Types" (float16 vectors on
    # AIE-MLv2 only): the vector unit's float types.  AIE-ML: bfloat16 only (UG1603 / AM020).
    "float_types": (frozenset({"bf16"}), frozenset({"bf16", "fp16"})),
    # AIE-ML: versal-devices.md "Peak MACs per cycle per tile".  AIE-MLv2: the MACs of those native shapes
    # (8*8*8, 8*8*8, 4*4*8, 4*4*8, 4*8*8, float16 4*8*8); 32-bit pairs assumed as AIE-ML (no figure found).
    # AIE API "Basic Types > Block Vector" table (aie_doc.hpp, UG1529): (block, mantissa bits, exponent bits,
    # sub-tile shifts, shift bits, block bytes) mx9 16/8/8/8/1/18, mx6 16/5/8/8/1/12, mx4 16/3/8/8/1/8, AIE-MLv2
    # only.  UG1529 "Matrix Multiplication Modes" AIE-MLv2 row: mx9 4x16x16, mx6 / mx4 4x16x16 and 8x16x16;
    # UG1603 "Block Floating Type Operations": the result is always accfloat.
    "block_float_types": (
        {},
        {"mx9": (16, 8, 8, 8, 1, 18, ((4, 16, 16),), "accfloat"),
         "mx6": (16, 5, 8, 8, 1, 12, ((4, 16, 16), (8, 16, 16)), "accfloat"),
         "mx4": (16, 3, 8, 8, 1, 8, ((4, 16, 16), (8, 16, 16)), "accfloat")},
    ),
    "macs_per_cycle": (
        {("i8", "i8"): 256, ("i8", "i4"): 512, ("i16", "i8"): 128, ("i16", "i16"): 64, ("i32", "i16"): 32,
         ("i32", "i32"): 16, ("bf16", "bf16"): 128},
        {("i8", "i8"): 512, ("i8", "i4"): 512, ("i16", "i8"): 128, ("i16", "i16"): 128, ("i32", "i16"): 32,
         ("i32", "i32"): 16, ("bf16", "bf16"): 256, ("fp16", "fp16"): 256},
    ),
}

# Fields the sources give the same on both: AM027 / UG1603 / versal-devices.md.
SAME = {
    "data_memory_bytes": 64 * 1024,  # versal-devices.md: 64 KB on both
    "program_memory_bytes": 16 * 1024,  # AM027 Tile Program Memory: 16 KB
    "neighbour_memory_bytes": 256 * 1024,  # AM027 Load and Store Unit: four 64 KB blocks as one 256 KB unit
    "neighbour_memories": ("north", "south", "west"),  # UG1603 Architecture Overview (AIE-ML / AIE-ML v2)
    "cascade_bits": 512,  # versal-devices.md
    "stream_in_ports": 1,
    "stream_out_ports": 1,
    "core_stream_bits": 32,  # AM027: "Core ... have a 32-bit stream interface, so an adapter is placed"
    # UG1529 AIE-MLv2 row: 8b x 8b shapes for acc32 only, 16b x 16b 4x4x8 for acc64 only (AIE-ML's lanes).
    "accumulators": {("i8", "i8"): 32, ("i8", "i4"): 32, ("i16", "i8"): 32, ("i16", "i16"): 64},
}

# Fields no searchable public source gave an AIE-MLv2 figure for: equal to AIE-ML and said so.
ASSUMED = ("srs_shift_max", "ups_shift_max", "cascade_serpentine")

# Every field not listed above is the same by construction (rounding, stack, heap, ...).
COVERED = set(DIFFERENCES) | set(SAME) | set(ASSUMED) | {"name", "sources"}


def _plain(field, value):
    if field == "block_float_types":  # BlockFloatFormat -> its fields, in declaration order
        return {k: dataclasses.astuple(f) for k, f in value.items()}
    return value


@pytest.mark.parametrize("field", sorted(DIFFERENCES))
def test_the_catalog_differs_where_the_sources_say(field):
    ml, v2 = DIFFERENCES[field]
    assert _plain(field, getattr(AIE_ML, field)) == ml and _plain(field, getattr(AIE_MLV2, field)) == v2


def test_block_float_layouts_add_up_to_the_documented_block_bytes():
    # UG1639 "MX Vector Types": each block is an 8-bit exponent, one byte of sub-tile shifts and 16
    # mantissas; the bytes follow from the bit widths (mx9 1 + 1 + 16, mx6 1 + 1 + 10, mx4 1 + 1 + 6).
    for name, f in AIE_MLV2.block_float_types.items():
        bits = f.exponent_bits + f.subtile_shifts * f.subtile_shift_bits + f.block * f.mantissa_bits
        assert bits == 8 * f.block_bytes, name
        assert f.mantissas_per_shift == 2, name  # "every two mantissas share a sub-tile shift bit"
    assert AIE1.block_float_types == {} and AIE_ML.block_float_types == {}


def test_the_catalog_is_equal_where_the_sources_say():
    for field, value in SAME.items():
        assert getattr(AIE_ML, field) == value and getattr(AIE_MLV2, field) == value, field


def test_no_other_field_differs_from_aie_ml():
    differing = {f.name for f in dataclasses.fields(AIE_MLV2) if getattr(AIE_MLV2, f.name) != getattr(AIE_ML, f.name)}
    assert differing == set(DIFFERENCES) | {"name", "sources"}
    uncovered = {f.name for f in dataclasses.fields(AIE_MLV2)} - COVERED
    assert all(getattr(AIE_MLV2, f) == getattr(AIE_ML, f) for f in uncovered)


def test_float16_is_an_aie_mlv2_type_only():
    # UG1529 "Basic Types": float16 vectors on AIE-MLv2 only; AIE1 computes fp32, AIE-ML bfloat16
    assert [("fp16" in g.float_types) for g in (AIE1, AIE_ML, AIE_MLV2)] == [False, False, True]
    assert [(("fp16", "fp16") in g.mmul_shapes) for g in (AIE1, AIE_ML, AIE_MLV2)] == [False, False, True]
    assert "derived" in AIE_MLV2.sources["macs_per_cycle"] and "fp16 4x8x8 = 256" in AIE_MLV2.sources["macs_per_cycle"]


def test_memory_tile_bank_arithmetic_gives_512_kb_on_both():
    # UG1603: 16 x 128-bit x 2k words and 8 x 256-bit x 2k words are both 512 KB.
    for gen in (AIE_ML, AIE_MLV2):
        assert gen.memtile_banks * gen.memtile_bank_bits // 8 * 2048 == 512 * 1024
    assert (AIE1.memtile_banks, AIE1.memtile_read_ports) == (0, 0)  # AM009: no memory tiles


@pytest.mark.parametrize("field", ["stream_bits", "core_stream_bits", "memtile", "memtile_dma_memory_bits",
                                   "neighbour_memories", "program_memory_bytes", "mmul shapes", "accumulators",
                                   "block_float_types", "float_types"])
def test_each_v2_fact_names_its_public_source(field):
    src = AIE_MLV2.sources[field]
    assert any(doc in src for doc in ("AM027", "UG1603", "UG1529")) and "assumed" not in src.lower(), src


def test_assumed_fields_say_so():
    # the rate is derived from the UG1529 shapes and says so; its 32-bit pairs are assumed
    assert "UG1529" in AIE_MLV2.sources["macs_per_cycle"] and "derived" in AIE_MLV2.sources["macs_per_cycle"]
    assert "assumed" in AIE_MLV2.sources["macs_per_cycle"]
    for f in ("srs_shift_max", "ups_shift_max", "cascade_serpentine"):
        assert "assumed" in AIE_MLV2.sources[f], f
    for f in ASSUMED:
        assert getattr(AIE_MLV2, f) == getattr(AIE_ML, f), f


def test_vek385_memory_tile_dma_is_sourced():
    # UG1603 "AIE-ML / AIE-ML v2 Memory Tile": six MM2S, six S2MM, 48 buffer descriptors.
    assert (VEK385.memtile_channels, VEK385.memtile_bds) == (6, 48)
    assert "UG1529" in VEK385.sources["gemm_design"] and "assumed" not in VEK385.sources["gemm_design"]
    src = VEK385.sources["memory tile DMA 6 + 6 channels, 48 BDs"]
    assert "UG1603" in src and "assumed" not in src
    assert VEK385.gemm_design == "memtile"


def test_the_movement_model_uses_the_v2_widths():
    # 4 KB over a DMA (64-bit on v2, 32-bit on AIE-ML), between kernel streams (32-bit core ports on both),
    # and over a memory-tile channel (stream-bound: 8 B/cycle on v2, 4 B/cycle on AIE-ML).
    n = 4096
    assert mv.dma_transfer(n, VEK385, 0).busy_cycles - mv.dma_transfer(n, VEK280, 0).busy_cycles == n / 8 - n / 4
    assert mv.stream_transfer(n, VEK385).busy_cycles == mv.stream_transfer(n, VEK280).busy_cycles == n / 4
    fixed = mv.DMA_START_CYCLES + mv.lock_handoff_cycles(2)
    assert mv.memtile_transfer(n, 6, VEK385, 0).busy_cycles == n / 8 + fixed
    assert mv.memtile_transfer(n, 6, VEK280, 0).busy_cycles == n / 4 + fixed
    # a 128-bit PLIO at 500 MHz into a 1 GHz kernel port: 8 B/cycle offered, the 32-bit port takes 4
    assert mv.plio_stream_bytes_per_cycle(VEK385) == 4


# The boards: VEK385 (2VE3858, AIE-MLv2) against VEK280 (XCVE2802, AIE-ML), typed from the sources.
BOARD_DIFFERENCES = {
    # versal-devices.md: VEK280 38 columns x 8 rows, 2 rows of memory tiles (AM020, DS958); VEK385 36 x 4 as
    # used by one published compiler, one memory tile row (the array size is not in AM027 or UG1603).
    "columns": (38, 36),
    "rows": (8, 4),
    "memory_tile_rows": (2, 1),
    "plio_columns": (38, 36),
    # versal-devices.md: 1.25 GHz in the published AIE4ML results, PL at 1/4 of it; AM027 rev 1.1 "Performance":
    # the AIE-ML v2 array's target is 1 GHz (-1 speed grade), PL clocks 500 MHz.
    "clock_hz": (1.25e9, 1.0e9),
    "pl_clock_hz": (312.5e6, 500e6),
    # AMD's base platform names (UG1603 Vitis flow); VEK385's is a placeholder without a release suffix.
    "vitis_platform": ("xilinx_vek280_base_202320_1", "xilinx_vek385_base"),
}
BOARD_SAME = {
    "memory_tile_bytes": 512 * 1024,  # UG1603 "AIE-ML / AIE-ML v2 Memory Tile": 512 KB on both
    "memtile_channels": 6,  # UG1603: six MM2S and six S2MM DMAs per memory tile
    "memtile_bds": 48,
    "plio_in_per_column": 2,  # versal-devices.md interface DMA 2 MM2S + 2 S2MM per column (AM020); as AIE-ML
    "plio_out_per_column": 2,
    "gemm_design": "memtile",  # the memory tiles are the L2 on both (gemm/aieml.py)
}


def test_the_boards_differ_where_the_sources_say():
    for f, (ml, v2) in BOARD_DIFFERENCES.items():
        assert (getattr(VEK280, f), getattr(VEK385, f)) == (ml, v2), f
    for f, value in BOARD_SAME.items():
        assert getattr(VEK280, f) == value and getattr(VEK385, f) == value, f
    identity = {"key", "board", "part", "generation", "notes", "sources"}
    differing = {f.name for f in dataclasses.fields(VEK385) if getattr(VEK385, f.name) != getattr(VEK280, f.name)}
    assert differing - identity == set(BOARD_DIFFERENCES)
    assert {f.name for f in dataclasses.fields(VEK385)} == identity | set(BOARD_DIFFERENCES) | set(BOARD_SAME)
    # AMD's AI Edge Gen 2 product table (as quoted publicly): 2VE3858 has 144 AIE-ML v2 tiles
    assert VEK385.compute_tiles == 144 and VEK385.memory_tiles == 36
    # the array peaks these give: 144 x 512 x 2 x 1 GHz = 147.456 TOPS int8, 304 x 256 x 2 x 1.25 GHz = 194.56
    assert VEK385.peak_ops_per_s(("i8", "i8")) == 144 * 512 * 2 * 1.0e9
    assert VEK280.peak_ops_per_s(("i8", "i8")) == 304 * 256 * 2 * 1.25e9


def test_the_vek385_clocks_name_am027():
    src = VEK385.sources["~1.0 GHz, PL 500 MHz"]
    assert "AM027" in src and "Performance" in src and "assumed" not in src.lower()


# ------------------------------------------------------------------ the design kinds take the v2 shapes

# UG1529 "Matrix Multiplication Modes", native shapes (typed here, as above): the tiling each kind plans
# per device and precision.
KIND_MMUL = {
    ("vek280", "int8"): (4, 8, 8), ("vek385", "int8"): (8, 8, 8),
    ("vek280", "int16"): (4, 4, 4), ("vek385", "int16"): (4, 4, 8),
    ("vek280", "bf16"): (4, 8, 4), ("vek385", "bf16"): (4, 8, 8),
}


@pytest.mark.parametrize("device", ["vek280", "vek385"])
def test_every_mmul_kind_plans_and_emits_its_generation_s_shape(device):
    """Issue 24 "Must hold": a design compiled for VEK385 uses the AIE-MLv2 shapes where they differ
    (the x86 runs of these kernels on VEK385: docs/devices.md "Design kinds").  Chain (Dense), DAG
    (its Dense layers), CNN stream mapping and GEMM, per precision; the chain's and the CNN's
    generated sources carry the shape."""
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    x = np.random.default_rng(0).standard_normal((32, 16)).astype(np.float32)
    mlp = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU(), torch.nn.Linear(16, 8)).eval()

    class Residual(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a = torch.nn.Linear(16, 16)

        def forward(self, v):
            return v + torch.relu(self.a(v))

    frames = np.random.default_rng(1).standard_normal((8, 3, 8, 8)).astype(np.float32)
    conv = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU()).eval()
    for precision in ("int8", "int16", "bf16"):
        want = KIND_MMUL[(device, precision)]
        m, k, n = want
        cfg = {"precision": precision}
        chain = aieflow.compile(mlp, device=device, example_input=x[:8], calibration=x, config=cfg)
        assert [lay.plan.mmul for lay in chain.layers()] == [want, want], precision
        assert f"static constexpr unsigned M = {m}, K = {k}, N = {n};" in chain.files["src/layers.h"]
        dag = aieflow.compile(Residual().eval(), device=device, example_input=x[:8], calibration=x,
                              config={**cfg, "batch": 16})
        dense = [dag.plan.node(c) for c in dag.plan.compute if dag.plan.node(c).op == "dense"]
        assert [d.plan.mmul for d in dense] == [want], precision
        if precision != "int16":  # int16 convolutions take int8 weights (a16w8 pair): the 16b x 8b row
            cnn = aieflow.compile(conv, device, frames[:1], calibration=frames, config={**cfg, "cnn": {"mapping": "stream"}})
            assert [lay.mmul for lay in cnn.plan.layers] == [want], precision
            assert f"mmul {m}x{k}x{n}" in cnn.files["README.md"]
        gemm = aieflow.gemm(64, 64, 64, dtype=precision, device=device, design="best")
        assert gemm.plan.dtype.mmul == want, precision
