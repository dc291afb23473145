"""The GEMM design on VEK385 (AIE-MLv2): the AIE-ML memory-tile design, with AIE-MLv2's own data
movement (AM027): 64-bit switch and DMA streams (the Br copy from the memory tile, the PLIO into a
memory tile) but 32-bit core stream ports (the Ar stream into a kernel, its Cr out).  The model is
checked against cycles computed by hand from those widths, the chooser against the VEK385 memories,
and the generated C++ is run on x86 and compared bit for bit with an independent numpy int64
product on edge shapes and extreme values, as on VEK280."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import numpy as np
import pytest
from gemm_cases import operands, reference

import aieflow
from aieflow.devices import get_device
from aieflow.gemm.design import GemmDesign
from aieflow.gemm.dtypes import TYPES, output_type
from aieflow.gemm.plan import GemmConfig, make_plan

VEK385, VEK280 = get_device("vek385"), get_device("vek280")
GXX = shutil.which("g++")
needs_gxx = pytest.mark.skipif(GXX is None, reason="g++ not found: the x86 harness is C++20")
CACHE = Path(tempfile.gettempdir()) / "aieflow-test-gemm-cache" / "x86"
BENCH = (256, 256, 2048)
# Typed from the sources, not read from the catalog:
CORE_STREAM_BYTES = 4  # AM027: the core's stream interface is 32-bit (adapter to the 64-bit switch)
DMA_STREAM_BYTES = 8  # AM027: 64-bit switch, DMA channels at 64 bits per cycle, 256-bit memory interface
PLIO_BYTES = 128 / 8 * 500e6 / 1.0e9  # a 128-bit PLIO at the 500 MHz PL clock, per 1 GHz AIE cycle (spec)
LOCAL, MEMTILE, SPARE = 64 * 1024, 512 * 1024, 2560
# UG1529 "Matrix Multiplication Modes", native shapes: AIE-MLv2 8b x 8b 8x8x8 (acc32), 16b x 16b 4x4x8 (acc64);
# AIE-ML 8b x 8b 4x8x8, 16b x 16b 4x4x4.  Rates: MACs of one native mmul (v2), versal-devices.md (AIE-ML).
V2_MMUL = {"uint8": (8, 8, 8), "int8": (8, 8, 8), "int16": (4, 4, 8)}
ML_MMUL = {"uint8": (4, 8, 8), "int8": (4, 8, 8), "int16": (4, 4, 4)}
V2_MACS = {"uint8": 512, "int8": 512, "int16": 128}


def design(dtype, m, n, k, tj, ti, buffers, mr, nr, blocks, device=VEK385) -> GemmDesign:
    t = TYPES[dtype]
    cfg = GemmConfig(tj, ti, 1, buffers, "memtile", "overlapped", mr, nr)
    return GemmDesign(make_plan(m, n, k, t, output_type(t, k), device, "best", cfg, blocks))


def test_one_tile_model_by_hand():
    # 8 x 32 Cr: whole 8x8x8 mmuls in 8 of the 1024-bit accumulator registers (256 acc32 lanes)
    d = design("uint8", 256, 64, 512, 1, 1, 1, 8, 32, {"mc": 256, "nc": 64, "kc": 512})
    e = d.estimate()
    stream = 8 * 512 / CORE_STREAM_BYTES + 3  # Ar into the kernel's 32-bit port + the fitted start
    mac = 8 * 32 * 512 / 512  # one 8x8x8 mmul (512 MACs) per cycle
    assert (e.microkernel.stream, e.microkernel.mac) == (stream, mac)
    compute = 64 * (stream + 8 * 32)  # 32 x 2 micro-kernels, each followed by its 256 Cr words at 1 word/cycle
    br = 512 * 64 / DMA_STREAM_BYTES  # the Br panel over a 64-bit memory-tile DMA channel, once
    # DDR: one 128-bit AXI beat per PL cycle, 16 B x 500 MHz / 1 GHz = 8 B per AIE cycle (+ 8 to start)
    a_in = max(256 * 512 / 8 + 8, 256 * 512 / PLIO_BYTES)  # vs the PLIO into the memory tile
    b_in = max(512 * 64 / 8 + 8, 512 * 64 / PLIO_BYTES)
    c = 256 * 64 * 4 / 8 + 8
    # the rounds start once Ac is in its memory tile and the Br panel in the tile (after Bc's)
    assert e.cycles == pytest.approx(max(a_in, b_in + br) + max(compute, c))
    assert e.latency_ns == pytest.approx(e.cycles / 1.0)  # 1 GHz (spec)


def test_the_br_copy_takes_half_the_cycles_of_vek280():
    blocks = {"mc": 64, "nc": 64, "kc": 256}
    v2 = design("uint8", 256, 64, 1024, 1, 1, 1, 8, 32, blocks).estimate()
    ml = design("uint8", 256, 64, 1024, 1, 1, 1, 8, 32, blocks, VEK280).estimate()
    assert v2.breakdown["br_copy"] == pytest.approx(15 * 256 * 64 / DMA_STREAM_BYTES)  # the first: in the fill
    assert ml.breakdown["br_copy"] == pytest.approx(15 * 256 * 64 / 4)
    assert v2.microkernel.stream == ml.microkernel.stream  # the core port is 32-bit on both


@pytest.mark.parametrize("dtype,tiles", [("uint8", 8), ("int8", 32), ("int16", 16)])
def test_best_blocks_fit_the_vek385_memories(dtype, tiles):
    d = aieflow.gemm(*BENCH, dtype, "vek385", tiles, "best")
    p, c, b, lay = d.plan, d.plan.config, d.plan.blocks, d.plan.memtiles
    nbytes = TYPES[dtype].bytes
    l4 = -(-(b.nc // b.nr) // c.tiles_j)
    assert lay is not None and c.tiles <= tiles and c.ar_streams == 1
    assert p.local_bytes == l4 * b.kc * b.nr * nbytes * c.br_buffers + SPARE <= LOCAL
    assert 2 * (b.mc // c.tiles_i) * b.kc * nbytes <= MEMTILE
    assert 2 * lay.lanes_per_memtile * l4 * b.kc * b.nr * nbytes <= MEMTILE and lay.lanes_per_memtile <= 6
    assert c.tiles_i + lay.bc_memtiles <= 36  # one row of 36 memory tiles on the VEK385 (spec)
    e = d.estimate()
    peak = V2_MACS[dtype]
    assert p.dtype.mmul == V2_MMUL[dtype]
    assert 0 < e.macs_per_cycle_per_tile <= peak
    assert e.cycles >= 256 * 256 * 2048 / (peak * c.tiles)


@pytest.mark.parametrize("dtype", ["int8", "int16"])
def test_the_kernels_use_the_v2_mmul_shapes(dtype):
    v2 = aieflow.gemm(256, 256, 512, dtype, "vek385", 4, "best")
    ml = aieflow.gemm(256, 256, 512, dtype, "vek280", 4, "best")
    for d, shape in ((v2, V2_MMUL[dtype]), (ml, ML_MMUL[dtype])):
        assert "constexpr unsigned MS = {}, KS = {}, NS = {};".format(*shape) in d.files["src/gemm_config.h"]
    assert v2.plan.blocks.mr % V2_MMUL[dtype][0] == 0 and v2.plan.blocks.nr % V2_MMUL[dtype][2] == 0
    # the v2 micro-tile's MAC time is that of the wider mmul: mr * nr * kc / (M * K * N)
    mk = v2.estimate().microkernel
    assert mk.mac == v2.plan.blocks.mr * v2.plan.blocks.nr * v2.plan.blocks.kc / V2_MACS[dtype]


def test_too_many_tiles_for_the_vek385_array():
    with pytest.raises(aieflow.errors.PlanError, match="144 compute tiles"):
        aieflow.gemm(*BENCH, "uint8", "vek385", 145, "best")


@needs_gxx
@pytest.mark.parametrize("dtype,tj,ti,buffers,mr,nr,blocks,kinds", [
    ("int8", 2, 1, 2, 8, 32, {"mc": 16, "nc": 160, "kc": 48}, ("random", "min", "mixed")),
    ("int16", 2, 2, 1, 8, 16, {"mc": 16, "nc": 48, "kc": 24}, ("random", "max")),
])
def test_vek385_memtile_design_is_bit_exact_on_x86(dtype, tj, ti, buffers, mr, nr, blocks, kinds):
    for m, n, k in [(37, 29, 70), (5, 3, 1)]:
        d = design(dtype, m, n, k, tj, ti, buffers, mr, nr, blocks)
        assert d.plan.device.key == "vek385"
        for kind in kinds:
            a, b = operands(dtype, m, n, k, kind, seed=m + n)
            r = d.verify(a, b, cache_dir=CACHE)
            assert r.ok and r.values == m * n, r.verdict()
            assert np.array_equal(d.predict(a, b).astype(np.int64), reference(a, b))


def test_generated_project_is_for_the_vek385():
    d = aieflow.gemm(256, 256, 2048, "uint8", "vek385", 16, "best")
    assert "xilinx_vek385_base" in d.files["Makefile"]
    g = d.files["src/graph.h"]
    lay = d.plan.memtiles
    assert g.count("adf::shared_buffer<uint8>::create") == lay.ac_memtiles + lay.bc_memtiles
    assert d.to_json()["device"]["generation"] == "aie-mlv2"
    assert "__AIE_ARCH__=21" in d.files["Makefile"]  # the x86 build compiles for AIE-MLv2


@needs_gxx
@pytest.mark.parametrize("arch,shape,ok", [
    (21, (4, 4, 8), True), (21, (4, 4, 4), False),  # UG1529 AIE-MLv2 16b x 16b acc64: 2x4x8, 4x4x8 only
    (20, (4, 4, 4), True),  # AIE-ML row: 4x4x4
])
def test_the_shim_holds_the_v2_mmul_row(tmp_path, arch, shape, ok):
    import subprocess

    from aieflow.verify import shim_include

    src = tmp_path / "m.cpp"
    src.write_text('#include "aie_api/aie.hpp"\n'
                   "using M = aie::mmul<{}, {}, {}, int16, int16, acc64>;\n"
                   "int main() {{ return int(M::size_A); }}\n".format(*shape))
    r = subprocess.run([GXX, "-std=c++20", "-fsyntax-only", f"-D__AIE_ARCH__={arch}", f"-I{shim_include()}",
                        str(src)], capture_output=True, text=True)
    assert (r.returncode == 0) == ok, r.stderr[-2000:]
