"""The GEMM design on VEK280 (AIE-ML): memory tiles as the L2, one input stream per tile, a wider
micro-tile.  The chooser's blocks are checked against the AIE-ML memories by independent
arithmetic, the model against hand-computed cycles, invalid requests against their messages, and
the generated C++ (graph with memory-tile shared buffers, AIE kernel, PL streamer and write-back,
loops) is run on x86 and compared bit for bit with an independent numpy int64 product, on shapes
that are not multiples of any block and on extreme values."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest
from gemm_cases import operands, reference

import aieflow
from aieflow.devices import get_device
from aieflow.errors import ConfigError, PlanError
from aieflow.gemm.aieml import micro_tiles, ml_type
from aieflow.gemm.design import GemmDesign
from aieflow.gemm.dtypes import TYPES, output_type
from aieflow.gemm.plan import GemmConfig, make_plan
from aieflow.verify import FLAGS, shim_include

VEK280 = get_device("vek280")
GXX = shutil.which("g++")
needs_gxx = pytest.mark.skipif(GXX is None, reason="g++ not found: the x86 harness is C++20")
CACHE = Path(tempfile.gettempdir()) / "aieflow-test-gemm-cache" / "x86"
BENCH = (256, 256, 2048)
LOCAL, MEMTILE, SPARE = 64 * 1024, 512 * 1024, 2560  # AIE-ML tile memory, memory tile (catalog), spare (spec)


def design(dtype, m, n, k, tj, ti, buffers, mr, nr, blocks) -> GemmDesign:
    t = TYPES[dtype]
    cfg = GemmConfig(tj, ti, 1, buffers, "memtile", "overlapped", mr, nr)
    return GemmDesign(make_plan(m, n, k, t, output_type(t, k), VEK280, "best", cfg, blocks))


# ----------------------------------------------------------------------------- chooser


def test_micro_tiles_fill_at_most_eight_accumulator_registers():
    # 8-bit: acc32, 32 lanes per 1024-bit register -> 256 lanes; int16: acc64 -> 128 lanes.
    assert micro_tiles(ml_type(TYPES["uint8"], VEK280)) == [(4, 8), (4, 16), (4, 32), (4, 64), (8, 8), (8, 16), (8, 32)]
    assert micro_tiles(ml_type(TYPES["int16"], VEK280)) == [(4, 8), (4, 16), (4, 32), (8, 8), (8, 16)]
    assert ml_type(TYPES["int8"], VEK280).mmul == (4, 8, 8) and ml_type(TYPES["int16"], VEK280).acc == "acc64"


@pytest.mark.parametrize("dtype,tiles", [("uint8", 1), ("uint8", 8), ("int8", 32), ("uint8", 64), ("int16", 16)])
def test_best_blocks_fit_the_aieml_memories(dtype, tiles):
    d = aieflow.gemm(*BENCH, dtype, "vek280", tiles, "best")
    p, c, b, lay = d.plan, d.plan.config, d.plan.blocks, d.plan.memtiles
    nbytes = TYPES[dtype].bytes
    l4 = -(-(b.nc // b.nr) // c.tiles_j)
    assert lay is not None and c.tiles <= tiles and c.ar_streams == 1  # one input stream per AIE-ML tile
    assert l4 * b.kc * b.nr * nbytes * c.br_buffers + SPARE <= LOCAL  # the lane's Br panels, in local memory
    assert p.local_bytes == l4 * b.kc * b.nr * nbytes * c.br_buffers + SPARE
    assert 2 * (b.mc // c.tiles_i) * b.kc * nbytes <= MEMTILE  # a group's Ac, ping-pong, in one memory tile
    assert 2 * lay.lanes_per_memtile * l4 * b.kc * b.nr * nbytes <= MEMTILE and lay.lanes_per_memtile <= 6
    assert lay.bc_memtiles == -(-c.tiles_j // lay.lanes_per_memtile) and c.tiles_i + lay.bc_memtiles <= 76
    acc_bits = 64 if dtype == "int16" else 32
    assert b.mr * b.nr * acc_bits <= 8 * 1024  # Cr in 8 of the 9 1024-bit accumulator registers
    assert b.kc * TYPES[dtype].max_product < 2 ** (acc_bits - 1)
    e = d.estimate()
    peak = 64 if dtype == "int16" else 256  # catalog MACs per cycle per AIE-ML tile
    assert 0 < e.macs_per_cycle_per_tile <= peak
    assert e.cycles >= 256 * 256 * 2048 / (peak * c.tiles)  # never above the MAC peak
    assert e.packing_cycles == 0 and d.to_json()["memory"]["memory_tiles"]["ac_memtiles"] == c.tiles_i


def test_one_tile_model_by_hand():
    d = design("uint8", 256, 64, 512, 1, 1, 1, 4, 64, {"mc": 256, "nc": 64, "kc": 512})
    e = d.estimate()
    stream = 4 * 512 // 4 + 3  # Ar: 4 rows x kc bytes at 4 B/cycle + the fitted start
    mac = 4 * 64 * 512 / 256
    assert (e.microkernel.stream, e.microkernel.mac, e.microkernel.load) == (stream, mac, 512 * 64 * 8 / 512)
    compute = 64 * (stream + 4 * 64)  # 64 micro-kernels, each followed by its 256-word Cr
    br = 512 * 64 / 4  # the Br panel from the memory tile into the tile, once (one block)
    a_in = max(256 * 512 / 4 + 8, 256 * 512 / 5)  # DDR (4 B/cycle + 8) vs PLIO (128 bits at PL clock)
    b_in = max(512 * 64 / 4 + 8, 512 * 64 / 5)
    c = 256 * 64 * 4 / 4 + 8  # drained by the collector as the rounds write Cr
    # the rounds start once Ac is in its memory tile and the Br panel in the tile (after Bc's)
    assert e.cycles == pytest.approx(max(a_in, b_in + br) + max(compute, c))
    assert e.bound == "stream" and e.macs_per_cycle_per_tile == pytest.approx(256 * 64 * 512 / e.cycles)


def test_ping_pong_hides_the_br_copy_between_blocks():
    blocks = {"mc": 64, "nc": 64, "kc": 256}
    one = design("uint8", 256, 64, 1024, 1, 1, 1, 4, 64, blocks).estimate()
    two = design("uint8", 256, 64, 1024, 1, 1, 2, 4, 64, blocks).estimate()
    # 16 blocks: with one buffer every Br DMA but the first (in the fill) waits for the tile
    assert one.breakdown["br_copy"] == pytest.approx(15 * 256 * 64 / 4) and two.breakdown["br_copy"] == 0
    assert two.cycles < one.cycles
    assert sum(one.breakdown.values()) == pytest.approx(one.cycles)


@pytest.mark.parametrize("tiles", [1, 2, 4])
def test_vek280_beats_vck190_on_few_tiles(tiles):
    ml = aieflow.gemm(*BENCH, "uint8", "vek280", tiles, "best").estimate()
    aie = aieflow.gemm(*BENCH, "uint8", "vck190", tiles, "best").estimate()
    assert ml.total_cycles < aie.total_cycles  # packing included on VCK190: VEK280 has none to add


def test_best_records_its_alternatives():
    d = aieflow.gemm(*BENCH, "uint8", "vek280", 16, "best")
    chosen = [a for a in d.alternatives if a.chosen]
    assert len(chosen) == 1 and chosen[0].config == d.plan.config
    assert min(a.total_cycles for a in d.alternatives) == pytest.approx(d.estimate().total_cycles)
    assert {(a.config.mr, a.config.nr) for a in d.alternatives} <= set(micro_tiles(d.plan.dtype))


@pytest.mark.parametrize("kwargs,error,match", [
    ({"dtype": "fp32", "design": "best"}, ConfigError, "no native fp32"),
    ({"design": "published"}, ConfigError, "published design is the paper's VCK190"),
    ({"tiles": 305, "design": "best"}, PlanError, "304 compute tiles"),
    ({"design": "best", "blocks": {"kc": 8192}}, PlanError, "local memory"),
    ({"design": "best", "blocks": {"kc": 12}}, ConfigError, "multiple of 8"),
    ({"design": "best", "blocks": {"mc": 8192}}, PlanError, "memory tile"),
    ({"design": "best", "br_transfer": "gmio"}, ConfigError, "memory tiles"),
])
def test_invalid_vek280_requests(kwargs, error, match):
    args = {"device": "vek280", "tiles": 4, **kwargs}
    with pytest.raises(error, match=match):
        aieflow.gemm(*BENCH, **args)


def test_too_many_l4_tiles_for_the_panels():
    t = TYPES["uint8"]
    cfg = GemmConfig(4, 1, 1, 1, "memtile", "overlapped", 4, 64)
    with pytest.raises(PlanError, match="at most 3 tiles"):
        make_plan(37, 29, 70, t, output_type(t, 70), VEK280, "best", cfg, {"mc": 16, "nc": 192, "kc": 32})
    with pytest.raises(PlanError, match="accumulator"):
        make_plan(37, 29, 70, t, output_type(t, 70), VEK280, "best", GemmConfig(1, 1, 1, 1, "memtile",
                                                                                  "overlapped", 8, 64))


# ----------------------------------------------------------------------------- x86


SHAPES = [(37, 29, 70), (5, 3, 1), (40, 200, 100)]  # edges in m, n, k; more than one block in each


@needs_gxx
@pytest.mark.parametrize("dtype,tj,ti,buffers,mr,nr,blocks,kinds", [
    # 4 x 64 micro-tile (8 mmul column blocks), two tile groups, 2 L4 steps with one idle lane
    ("uint8", 2, 2, 1, 4, 64, {"mc": 16, "nc": 192, "kc": 32}, ("random", "max")),
    # 8 x 32, ping-pong Br, 3 L4 steps, signed extremes
    ("int8", 2, 1, 2, 8, 32, {"mc": 16, "nc": 160, "kc": 48}, ("random", "min", "max", "mixed")),
    # int16: C is int64 for k >= 2 (Cr as (hi, lo) pairs)
    ("int16", 2, 2, 1, 8, 16, {"mc": 16, "nc": 48, "kc": 24}, ("random", "min", "mixed")),
    # 7 L4 lanes: two Bc memory tiles (6 MM2S channels each at most)
    ("uint8", 7, 1, 1, 8, 8, {"mc": 16, "nc": 56, "kc": 32}, ("random", "max")),
])
def test_memtile_design_is_bit_exact_on_x86(dtype, tj, ti, buffers, mr, nr, blocks, kinds):
    first = design(dtype, *SHAPES[0], tj, ti, buffers, mr, nr, blocks)
    if tj == 7:
        assert first.plan.memtiles.bc_memtiles == 2 and first.plan.memtiles.lanes(7) == [6, 1]
    if dtype == "int16":
        assert first.plan.output.wide
    for m, n, k in SHAPES:
        d = design(dtype, m, n, k, tj, ti, buffers, mr, nr, blocks)
        for kind in kinds:
            a, b = operands(dtype, m, n, k, kind, seed=m + n)
            r = d.verify(a, b, cache_dir=CACHE)
            assert r.ok and r.values == m * n, r.verdict()
            assert np.array_equal(d.predict(a, b).astype(np.int64), reference(a, b))


@needs_gxx
def test_a_broken_bc_stream_is_caught():
    d = design("uint8", 40, 200, 100, 2, 2, 1, 4, 64, {"mc": 16, "nc": 192, "kc": 32})
    src = d.files["pl/gemm_mover.cpp"]
    assert src.count("panel < PANELS && row < k") == 1
    d.files["pl/gemm_mover.cpp"] = src.replace("panel < PANELS && row < k", "panel + 1 < PANELS && row < k")
    a, b = operands("uint8", 40, 200, 100, "random", 1)
    r = d.verify(a, b, cache_dir=CACHE)
    # the last B panel of each column block (columns 128..191 of 192) is lost
    assert not r.ok and r.first is not None and r.first.col % 192 >= 128


@needs_gxx
def test_generated_graph_uses_memory_tiles():
    d = aieflow.gemm(256, 256, 2048, "uint8", "vek280", 16, "best")
    g = d.files["src/graph.h"]
    lay = d.plan.memtiles
    assert g.count("adf::shared_buffer<uint8>::create") == lay.ac_memtiles + lay.bc_memtiles
    # every Ac read repeats once per L4 step (tiling_parameters::repetition, written when not 1)
    steps = d.plan.l4_steps
    assert g.count(".repetition = ") == g.count(f".repetition = {steps}}})") == (lay.ac_memtiles if steps > 1 else 0)
    assert "adf::input_gmio" not in g
    # Ar: the tile's one input stream, read from its group's Ac memory tile
    assert sum(g.count(f"adf::connect(ac{i}.out[0], tile") for i in range(lay.ac_memtiles)) == d.plan.tiles
    assert "URAM" not in d.files["pl/gemm_mover.cpp"] and "impl = uram" not in d.files["pl/gemm_mover.cpp"]


SHIM_CASE = r"""
#include <adf.h>
#include <cstdio>

// Reads 12 values from its one stream and writes their running sums to its output stream.
void acc12(input_stream<int32>* in, output_stream<int32>* out) {
    int32 s = 0;
    for (int i = 0; i < 12; ++i) { s += readincr(in); writeincr(out, s); }
}

class G : public adf::graph {
public:
    adf::input_plio src;
    adf::output_plio o0, o1;
    adf::shared_buffer<int32> mt;
    adf::kernel k0, k1;
    G() {
        src = adf::input_plio::create("src", adf::plio_32_bits, "src.txt");
        o0 = adf::output_plio::create("o0", adf::plio_32_bits, "o0.txt");
        o1 = adf::output_plio::create("o1", adf::plio_32_bits, "o1.txt");
        mt = adf::shared_buffer<int32>::create({3, 2}, 1, 1);
        adf::write_access(mt.in[0]) = adf::tiling({.buffer_dimension = {3, 2}, .tiling_dimension = {3, 2}, .offset = {0, 0}});
        // column-major read of the 3 x 2 buffer, twice
        adf::read_access(mt.out[0]) = adf::tiling({.buffer_dimension = {3, 2}, .tiling_dimension = {1, 2}, .offset = {0, 0},
                                                   .tile_traversal = {{.dimension = 0, .stride = 1, .wrap = 3}},
                                                   .repetition = 2});
        k0 = adf::kernel::create(acc12);
        k1 = adf::kernel::create(acc12);
        adf::connect<>(src.out[0], mt.in[0]);
        adf::connect<adf::stream>(mt.out[0], k0.in[0]);  // one memory-tile read port, two stream consumers
        adf::connect<adf::stream>(mt.out[0], k1.in[0]);
        adf::connect<adf::stream>(k0.out[0], o0.in[0]);
        adf::connect<adf::stream>(k1.out[0], o1.in[0]);
    }
};

int main(int argc, char** argv) {
    aieflow_shim::parse_harness_args(argc, argv);
    G g;
    g.init();
    aieflow_shim::feed_plio(g.src, std::vector<int32>{1, 2, 3, 10, 20, 30, 100, 200, 300, 1000, 2000, 3000});
    g.run(2);
    for (auto* o : {&g.o0, &g.o1}) {
        for (int32 v : aieflow_shim::take_plio<int32>(*o)) std::printf("%d ", v);
        std::printf("\n");
    }
    return 0;
}
"""


@needs_gxx
def test_shim_memtile_read_port_feeds_stream_consumers(tmp_path):
    (tmp_path / "case.cpp").write_text(SHIM_CASE)
    exe = tmp_path / "case"
    build = subprocess.run([GXX, *FLAGS, "-D__AIE_ARCH__=20", f"-I{shim_include()}", str(tmp_path / "case.cpp"),
                            "-o", str(exe)], capture_output=True, text=True)
    assert build.returncode == 0, build.stderr
    run = subprocess.run([str(exe), "--out", str(tmp_path)], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    # iteration i writes 6 values [x0 x1 x2 y0 y1 y2] row-major as {3, 2}; read column-major twice
    want = []
    for base in ([1, 2, 3, 10, 20, 30], [100, 200, 300, 1000, 2000, 3000]):
        order = [base[c + 3 * r] for c in range(3) for r in range(2)] * 2
        want += list(np.cumsum(order))
    lines = run.stdout.split("\n")
    assert [int(v) for v in lines[0].split()] == want and [int(v) for v in lines[1].split()] == want


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "aieflow.cli", *args], capture_output=True, text=True)


def test_cli_vek280_writes_the_memtile_design(tmp_path):
    out = tmp_path / "g"
    r = run_cli("gemm", "--m", "256", "--n", "256", "--k", "2048", "--device", "vek280", "--design", "best",
                "--tiles", "8", "--out", str(out))
    assert r.returncode == 0, r.stderr
    j = json.loads((out / "design.json").read_text())
    assert j["config"]["br_transfer"] == "memtile" and j["device"]["key"] == "vek280"
    assert j["memory"]["memory_tiles"]["bc_memtiles"] >= 1 and j["performance"]["cycles"] > 0
    assert (out / "project" / "src" / "graph.h").read_text().count("shared_buffer") >= 2
    bad = run_cli("gemm", "--m", "256", "--n", "256", "--k", "2048", "--device", "vek280", "--out", str(tmp_path / "x"))
    assert bad.returncode == 2 and "--design best" in bad.stderr and not (tmp_path / "x").exists()


def compile_alone(project: Path, arch: int) -> None:
    """graph.cpp (the aiecompiler top level) against the ADF shim, the PL kernels as C++14 (the HLS
    dialect) against the hls shim, warning-free."""
    flags = ["-Wall", "-Wextra", "-Werror", "-fsyntax-only", f"-I{shim_include()}", f"-I{project / 'src'}"]
    units = [(["-std=c++20", f"-D__AIE_ARCH__={arch}", f"-I{project / 'src' / 'kernels'}"], project / "src" / "graph.cpp"),
             (["-std=c++14", f"-I{project / 'pl'}"], project / "pl" / "gemm_mover.cpp"),
             (["-std=c++14", f"-I{project / 'pl'}"], project / "pl" / "gemm_collect.cpp")]
    for extra, unit in units:
        r = subprocess.run([GXX, *extra, *flags, str(unit)], capture_output=True, text=True)
        assert r.returncode == 0, f"{unit.name}:\n{r.stderr[:3000]}"


@needs_gxx
def test_vek280_sources_compile_on_their_own(tmp_path):
    d = aieflow.gemm(256, 256, 2048, "int16", "vek280", 8, "best")
    compile_alone(d.save(tmp_path / "g") / "project", 20)
