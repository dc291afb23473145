"""GEMM designs: block-size chooser, performance model, design choice, errors, predict, CLI.

References are independent of the code under test: the spec's numbers
(shared/spec/gemm-gotoblas-versal.md), numpy int64 / float64 matrix products, arithmetic written
out here.  The x86 execution of the generated C++ is in test_gemm_verify.py.
"""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

import aieflow
from aieflow.devices import VCK190
from aieflow.errors import ConfigError, OutputExistsError, PlanError
from aieflow.gemm import memory
from aieflow.gemm.dtypes import TYPES, output_type
from aieflow.gemm.perf import (
    BR_COPY_CYCLES_PER_BYTE,
    CR_CONTENTION_CYCLES,
    CR_COPY_CYCLES,
    CR_SERIAL_CYCLES,
    br_copy_cycles,
    copy_cr_cycles,
    estimate,
    microkernel_cycles,
)
from aieflow.gemm.plan import GemmConfig, make_plan
from aieflow.perf.published import FIGURES, evaluate

U8 = TYPES["uint8"]
BENCH = (256, 256, 2048)


# ----------------------------------------------------------------------------- block sizes


def test_chooser_matches_the_spec_bounds_on_vck190():
    lim = memory.limits(U8, VCK190, 8, 8, "stream", 1)
    # spec: "with ~2.5 KB spared, kc <= 3,750"; 32 KB - 2.5 KiB = 30,208 B of Br / 8 = 3,776
    assert lim.spare_bytes == 2560 and lim.kc == (32 * 1024 - 2560) // 8 // 16 * 16
    assert abs(lim.kc - 3750) / 3750 < 0.01
    # spec: "mc ~ URAM / kc ~ 4,500; nc ~ BRAM / kc ~ 1,200"
    assert abs(lim.mc - 4500) / 4500 < 0.01 and lim.mc % 8 == 0
    assert abs(lim.nc - 1200) / 1200 < 0.03 and lim.nc % 8 == 0
    assert lim.mc * lim.kc <= 16.27 * 2**20 and lim.nc * lim.kc <= 4.25 * 2**20


def test_gmio_br_costs_three_copies_and_ping_pong_two():
    single, _ = memory.kc_limit(U8, VCK190, 8, "stream", 1)
    ping, copies2 = memory.kc_limit(U8, VCK190, 8, "stream", 2)
    gmio, copies3 = memory.kc_limit(U8, VCK190, 8, "gmio", 1)
    assert (copies2, copies3) == (2, 3)
    room = 32 * 1024 - 2560
    assert ping == room // 16 // 16 * 16 and gmio == room // 24 // 16 * 16
    # spec: "10 KB Br -> 30 of 32 KB" with GMIO; the kc that gives 10 KB of Br does not fit a
    # streamed ping-pong plus the spare either, but fits a single streamed buffer
    assert 3 * gmio * 8 <= room < 3 * (gmio + 16) * 8 and single > ping > gmio


def test_benchmark_blocks_are_the_papers_and_edges_are_balanced():
    p = make_plan(*BENCH, U8, output_type(U8, 2048), VCK190, "published", GemmConfig(tiles_j=4))
    assert (p.blocks.mc, p.blocks.nc, p.blocks.kc) == BENCH  # (m, n, k) = (mc, nc, kc), spec "Block sizes"
    assert (p.n_jc, p.n_pc, p.n_ic, p.l4_steps, p.rounds, p.ksteps) == (1, 1, 1, 8, 32, 128)
    big = make_plan(10_000, 3_000, 5_000, U8, output_type(U8, 5000), VCK190, "published", GemmConfig())
    b = big.blocks
    assert (big.n_pc, big.n_ic, big.n_jc) == (2, 2, 2)
    assert b.kc == 2512 and b.kc * 2 - 5000 < 32  # two equal k blocks, not 3,776 + 1,224
    assert b.mc == 5000 and b.nc == 1504 and b.nc * b.kc <= 4.25 * 2**20


# ----------------------------------------------------------------------------- performance model


@pytest.mark.parametrize("key,published", [("gemm_stream", 4106), ("gemm_mac", 1042), ("gemm_full", 4110)])
def test_published_microkernel_figures_within_5_percent(key, published):
    result = next(r for r in evaluate() if r.figure.key == key)
    assert result.figure.published == published
    assert abs(result.modelled - published) / published <= 0.05
    # published.py takes these numbers from the GEMM model (single source)
    mk = microkernel_cycles(U8, 2048, VCK190, stream=key != "gemm_mac", macs=key != "gemm_stream")
    assert result.modelled == mk.cycles


def test_br_copy_is_the_fitted_figure_and_independent_of_tiles():
    assert br_copy_cycles(16 * 1024) == pytest.approx(3280)
    assert BR_COPY_CYCLES_PER_BYTE == 3280 / 16384
    figure = next(f for f in FIGURES if f.key == "gemm_br_copy")
    assert "BR_COPY_CYCLES_PER_BYTE" in figure.note
    copies = {estimate(make_plan(*BENCH, U8, output_type(U8, 2048), VCK190, "published",
                                 GemmConfig(tiles_j=t))).br_copy for t in (1, 8, 32)}
    assert copies == {3280.0}


# gemm-gotoblas-versal.md § Calibration: `Copy Cr` per micro-kernel (cycles), tiles -> cycles
COPY_CR = {1: 40, 2: 58, 4: 63, 8: 84, 16: 157, 32: 282}


@pytest.mark.parametrize("tiles,published", sorted(COPY_CR.items()))
def test_copy_cr_within_10_percent_of_the_published_series(tiles, published):
    # issue 21: the `Copy Cr` series within 10% on every tile count
    assert abs(copy_cr_cycles(tiles) - published) / published <= 0.10
    # and it is what the published design's round adds to the micro-kernel (one port per tile)
    e = estimate(make_plan(*BENCH, U8, output_type(U8, 2048), VCK190, "published", GemmConfig(tiles_j=tiles)))
    assert e.round_cycles[0] - e.microkernel.cycles == pytest.approx(copy_cr_cycles(tiles))


def test_copy_cr_constants_are_the_least_squares_fit_of_the_series():
    # relative least squares of copy(T) = a + [T > 1] (b + c T log2 T) on the spec's six figures,
    # solved here with numpy, independently of the model's code
    t = np.array(sorted(COPY_CR), dtype=float)
    y = np.array([COPY_CR[k] for k in sorted(COPY_CR)], dtype=float)
    cols = np.stack([np.ones_like(t), (t > 1).astype(float), t * np.log2(t)], 1)
    a, b, c = np.linalg.lstsq(cols / y[:, None], np.ones_like(y), rcond=None)[0]
    assert (CR_COPY_CYCLES, CR_CONTENTION_CYCLES, CR_SERIAL_CYCLES) == pytest.approx((a, b, c), rel=2e-3)
    assert a == pytest.approx(40)  # one port alone: the T = 1 figure itself


def test_copy_cr_scales_with_the_bytes_and_refuses_no_ports():
    assert copy_cr_cycles(8, 512) == pytest.approx(2 * copy_cr_cycles(8))  # int64 C: twice the bytes
    with pytest.raises(ValueError):
        copy_cr_cycles(0)


def test_multicast_independent_of_fan_out_and_write_back_grows_mildly_with_tiles():
    out = output_type(U8, 2048)
    runs = [estimate(make_plan(*BENCH, U8, out, VCK190, "published", GemmConfig(tiles_j=t))) for t in (1, 2, 8, 32)]
    assert len({r.microkernel.cycles for r in runs}) == 1
    rounds = [r.round_cycles[0] for r in runs]
    assert all(a < b for a, b in zip(rounds, rounds[1:], strict=False))
    # the spec: the micro-kernel stays at ~4,110 cycles, Copy Cr 40 -> 282 cycles from 1 to 32 tiles,
    # so a round grows by 242 / 4,150 = 5.8%; the per-tile rate falls by about that much, not by half
    assert rounds[-1] / rounds[0] - 1 == pytest.approx((282 - 40) / (4110 + 40), abs=0.01)
    rate = [r.macs_per_cycle_per_tile for r in runs]
    assert 0.92 < rate[-1] / rate[0] < 0.97
    # still stream bound: the write-back never exceeds the micro-kernel, DDR (32 x 512 B at 4 B per
    # cycle = 4,096 cycles) does not set the round
    assert all(r.bound == "stream" for r in runs) and rounds[-1] > 32 * 512 / 4


def test_published_one_tile_total_matches_hand_arithmetic():
    e = estimate(make_plan(*BENCH, U8, output_type(U8, 2048), VCK190, "published", GemmConfig()))
    stream = 2048 * 8 / 4 + 3  # Ar: one 32-bit word per cycle + STREAM_FIXED_CYCLES
    per_step = 3280 + 32 * (stream + 40)  # Br copy, 32 micro-kernels each with its Copy Cr (spec: 40 at 1 tile)
    assert e.cycles == pytest.approx(32 * per_step)  # 32 L4 steps (nc / nr = 32 micro-panels)
    assert e.macs_per_cycle_per_tile == pytest.approx(256 * 256 * 2048 / e.cycles)
    assert e.bound == "stream" and sum(e.breakdown.values()) == pytest.approx(e.cycles)
    assert e.packing_cycles == pytest.approx((2048 * 256 / 4 + 8) * 2)
    assert e.latency_ns == pytest.approx((e.cycles + e.packing_cycles) / 1.25)


def test_best_write_back_ddr_bound_counts_bytes():
    # 32 tiles, one k block: each round every tile writes one 256-byte Cr; 32 x 256 B at 4 B/cycle =
    # 2,048 cycles < the 2-stream micro-kernel (2,048 x 8 / 2 / 4 + 3 = 2,051) + 64 epilogue words
    d = aieflow.gemm(*BENCH, "uint8", "vck190", 32, "best")
    e = d.estimate()
    assert d.plan.config.tiles == 32 and d.plan.config.ar_streams == 2
    assert e.round_cycles[0] == pytest.approx(2051 + 64) and e.bound == "stream"


@pytest.mark.parametrize("tiles", [1, 2, 4, 8, 16, 32])
def test_best_beats_published_and_stays_under_peak(tiles):
    pub = aieflow.gemm(*BENCH, "uint8", "vck190", tiles, "published")
    best = aieflow.gemm(*BENCH, "uint8", "vck190", tiles, "best")
    ep, eb = pub.estimate(), best.estimate()
    assert eb.total_cycles < ep.total_cycles and eb.cycles < ep.cycles
    for e, d in ((ep, pub), (eb, best)):
        assert 0 < e.macs_per_cycle_per_tile <= 128 and e.tiles_used == d.plan.tiles <= tiles
        assert e.cycles >= 256 * 256 * 2048 / (128 * e.tiles_used)  # never above the MAC peak
    assert best.plan.config.ar_streams == 2  # the one stream per tile is the published bound
    chosen = [a for a in best.alternatives if a.chosen]
    assert len(chosen) == 1 and chosen[0].config == best.plan.config
    assert min(a.total_cycles for a in best.alternatives if a.config.br_transfer == "stream"
               and a.total_cycles is not None) == pytest.approx(eb.total_cycles)
    assert any(a.config.br_transfer == "gmio" and "3 copies" in a.note and not a.chosen for a in best.alternatives)


def test_best_parallelises_l5_when_l4_runs_out():
    d = aieflow.gemm(1024, 64, 512, "uint8", "vck190", 32, "best")  # only 8 micro-panels of B
    c = d.plan.config
    assert c.tiles_j <= 8 and c.tiles_i > 1 and c.tiles > 8
    with pytest.raises(PlanError, match="micro-panels of B"):
        aieflow.gemm(1024, 64, 512, "uint8", "vck190", 32, "published")


# ----------------------------------------------------------------------------- types and errors


def test_output_width_follows_the_int32_bound():
    assert output_type(U8, 2048).name == "int32" and 255 * 255 * 2048 < 2**31
    assert output_type(U8, 33025).name == "int32" and output_type(U8, 33026).name == "int64"
    assert output_type(TYPES["int16"], 1).name == "int32" and output_type(TYPES["int16"], 2).name == "int64"
    with pytest.raises(ConfigError, match="int32") as e:
        output_type(U8, 40_000, "int32")
    assert "int64" in str(e.value)
    assert output_type(TYPES["fp32"], 10**6).name == "float32"


@pytest.mark.parametrize("kwargs,error,match", [
    ({"dtype": "int4"}, ConfigError, "unsupported GEMM dtype"),
    ({"device": "vek385"}, ConfigError, "published design is the paper's VCK190"),
    ({"device": "vek280"}, ConfigError, "published design is the paper's VCK190"),
    ({"tiles": 401, "design": "best"}, PlanError, "400 compute tiles"),
    ({"tiles": 0}, PlanError, "positive"),
    ({"tiles": 64}, PlanError, "micro-panels of B"),
    ({"blocks": {"kc": 4096}}, PlanError, "local memory"),
    ({"blocks": {"kc": 100}}, ConfigError, "multiple of 16"),
    ({"blocks": {"mc": 12}}, ConfigError, "multiple of 8"),
    ({"blocks": {"nc": 8000}}, PlanError, "Block RAM"),
    ({"design": "fastest"}, ConfigError, "unknown GEMM design"),
    ({"m": 0}, ConfigError, "positive integer"),
    ({"output": "int32", "k": 40_000}, ConfigError, "overflow an int32"),
])
def test_invalid_requests_raise_user_errors(kwargs, error, match):
    args = {"m": 256, "n": 256, "k": 2048, **kwargs}
    with pytest.raises(error, match=match):
        aieflow.gemm(args.pop("m"), args.pop("n"), args.pop("k"), **args)


# ----------------------------------------------------------------------------- predict


@pytest.mark.parametrize("dtype", ["uint8", "int8", "int16"])
def test_predict_is_the_exact_integer_product(dtype):
    t = TYPES[dtype]
    m, n, k = 23, 17, 300
    d = aieflow.gemm(m, n, k, dtype, "vck190", 2, "best", blocks={"kc": 64})
    rng = np.random.default_rng(1)
    for a, b in ((rng.integers(t.lo, t.hi + 1, (m, k)), rng.integers(t.lo, t.hi + 1, (k, n))),
                 (np.full((m, k), t.lo), np.full((k, n), t.lo)), (np.full((m, k), t.hi), np.full((k, n), t.lo))):
        want = a.astype(object).dot(b.astype(object))  # Python integers: no overflow possible
        got = d.predict(a, b)
        assert got.dtype == (np.int32 if d.plan.output.name == "int32" else np.int64)
        assert np.array_equal(got.astype(object), want)


def test_predict_fp32_follows_the_blocked_order_and_is_close_to_float64():
    m, n, k = 9, 11, 70
    d = aieflow.gemm(m, n, k, "fp32", "vck190", 1, blocks={"kc": 32})
    rng = np.random.default_rng(2)
    a, b = rng.standard_normal((m, k)).astype(np.float32), rng.standard_normal((k, n)).astype(np.float32)
    got = d.predict(a, b)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    assert got.dtype == np.float32 and np.allclose(got, ref, rtol=1e-5, atol=1e-5)
    # element (0, 0) by hand: each k block sums in order from +0.0, then C += block (float32 each step)
    c = np.float32(0)
    for pc in range(0, k, 32):
        acc = np.float32(0)
        for p in range(pc, min(pc + 32, k)):
            acc = np.float32(acc + np.float32(a[0, p] * b[p, 0]))
        c = np.float32(c + acc)
    assert got[0, 0].view(np.uint32) == c.view(np.uint32)


def test_predict_rejects_bad_operands():
    d = aieflow.gemm(4, 5, 6, "uint8")
    with pytest.raises(ConfigError, match="shape"):
        d.predict(np.zeros((5, 6)), np.zeros((6, 5)))
    with pytest.raises(ConfigError, match="outside uint8"):
        d.predict(np.full((4, 6), 256), np.zeros((6, 5)))
    with pytest.raises(ConfigError, match="non-integer"):
        d.predict(np.full((4, 6), 0.5), np.zeros((6, 5)))


# ----------------------------------------------------------------------------- design.json and CLI


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "aieflow.cli", *args], capture_output=True, text=True)


def test_cli_writes_design_json_and_project(tmp_path):
    out = tmp_path / "g"
    r = run_cli("gemm", "--m", "256", "--n", "256", "--k", "2048", "--dtype", "uint8", "--device", "vck190",
                "--tiles", "32", "--design", "best", "--out", str(out))
    assert r.returncode == 0, r.stderr
    meta = json.loads((out / "design.json").read_text())
    assert meta["kind"] == "gemm" and meta["problem"] == {"m": 256, "n": 256, "k": 2048}
    assert meta["types"] == {**meta["types"], "a": "uint8", "b": "uint8", "c": "int32"}
    assert meta["blocks"] == {"mc": 256, "nc": 256, "kc": 2048, "mr": 8, "nr": 8}
    perf = meta["performance"]
    for key in ("latency_ns", "interval_ns", "throughput_ops_per_s", "bound", "tiles_used", "cycles",
                "macs_per_cycle_per_tile", "breakdown", "loops"):
        assert key in perf
    assert perf["tiles_used"] == meta["tiles"] == 32
    assert perf["throughput_ops_per_s"] == pytest.approx(2 * 256 * 256 * 2048 / (perf["latency_ns"] * 1e-9))
    assert sum(a["chosen"] for a in meta["alternatives"]) == 1 and len(meta["alternatives"]) >= 4
    files = {p.relative_to(out / "project").as_posix() for p in (out / "project").rglob("*") if p.is_file()}
    for f in ("src/graph.h", "src/graph.cpp", "src/kernels/gemm_tile.cc", "pl/gemm_mover.cpp", "pl/gemm_collect.cpp",
              "host/host.cpp", "host/gemm_loops.h", "system.cfg", "aie.cfg", "Makefile", "x86/harness.cpp",
              "data/A.bin", "data/C_golden.bin"):
        assert f in files
    graph = (out / "project" / "src" / "graph.h").read_text()
    assert graph.count("adf::kernel::create(gemm_tile)") == 32
    assert graph.count("adf::connect<adf::stream>(ar0_0.out[0]") == 32  # Ar multicast to all tiles
    cfg = (out / "project" / "system.cfg").read_text()
    assert "[connectivity]" in cfg and "stream_connect=gemm_mover_0.ar0_0:ai_engine_0.ar0_0" in cfg
    a = np.fromfile(out / "project" / "data" / "A.bin", dtype=np.uint8).reshape(256, 2048)
    b = np.fromfile(out / "project" / "data" / "B.bin", dtype=np.uint8).reshape(2048, 256)
    golden = np.fromfile(out / "project" / "data" / "C_golden.bin", dtype=np.int32).reshape(256, 256)
    assert np.array_equal(golden, a.astype(np.int64) @ b.astype(np.int64))


@pytest.mark.parametrize("args,match", [
    (["--tiles", "64"], "micro-panels of B"),
    (["--dtype", "int4"], "unsupported GEMM dtype"),
    (["--kc", "8192"], "local memory"),
    (["--device", "vek385"], "--design best"),
    (["--device", "vek280"], "--design best"),
])
def test_cli_errors_exit_2_and_write_nothing(tmp_path, args, match):
    out = tmp_path / "g"
    r = run_cli("gemm", "--m", "256", "--n", "256", "--k", "2048", "--out", str(out), *args)
    assert r.returncode == 2 and r.stderr.startswith("error: ") and match in r.stderr
    assert "Traceback" not in r.stderr and not out.exists() and list(tmp_path.iterdir()) == []


def test_save_needs_force_to_replace(tmp_path):
    d = aieflow.gemm(16, 16, 32)
    d.save(tmp_path / "g")
    with pytest.raises(OutputExistsError):
        d.save(tmp_path / "g")
    aieflow.gemm(16, 16, 32, "int8").save(tmp_path / "g", force=True)
    assert json.loads((tmp_path / "g" / "design.json").read_text())["types"]["a"] == "int8"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["g"]
    r = run_cli("gemm", "--m", "8", "--n", "8", "--k", "16", "--out", str(tmp_path / "g"))
    assert r.returncode == 2 and "--force" in r.stderr


# ----------------------------------------------------------------------------- placement


@pytest.mark.parametrize(("device", "tiles", "design"), [("vck190", 13, "published"), ("vek280", 16, "best")])
def test_the_one_placer_puts_the_tiles_column_by_column_from_the_origin(device, tiles, design):
    """The GEMM's tiles are one placer group with no edge (no kernel-to-kernel link): branch and
    bound proves column 0, row 0 optimal, and graph.h pins tile t at column t // 8, row t % 8 (both
    arrays have 8 rows: 13 tiles are a full column and 5 tiles of the next)."""
    from aieflow.gemm.emit import place

    d = aieflow.gemm(256, 256, 2048, "uint8", device, tiles, design)
    t = d.plan.tiles
    p = place(d.plan)
    assert [(r.layer, r.column, r.row, r.width, r.height) for r in p.rects] == [
        ("gemm", 0, 0, -(-t // 8), min(t, 8))]
    assert p.method == "bnb" and p.optimal and p.cost == pytest.approx(0.05 * (min(t, 8) - 1))
    g = d.files["src/graph.h"]
    want = [f"adf::location<adf::kernel>(tile{i}) = adf::tile({i // 8}, {i % 8});" for i in range(t)]
    got = [line.strip() for line in g.splitlines() if "adf::location<adf::kernel>" in line]
    assert got == want
