"""The generated GEMM C++ (AIE kernel and ADF graph, PL kernels, five-loop host code), built with
g++ -O2 -Wall -Wextra -Werror against aieflow's shims and run on x86, computes C bit for bit:
compared with an independent numpy int64 product (integers) and with predict (fp32).

Builds are shared through the build cache: the compiled sources do not depend on m, n, k, so every
shape of one (dtype, blocks, configuration) reuses one build.  Shapes include non-multiples of
every block, tile counts 1, 2, 4 and 8, and the type's extreme values.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest
from gemm_cases import operands, reference

import aieflow
from aieflow.gemm.design import GemmDesign
from aieflow.gemm.dtypes import TYPES, output_type
from aieflow.gemm.plan import GemmConfig, make_plan
from aieflow.verify import shim_include

GXX = shutil.which("g++")
pytestmark = pytest.mark.skipif(GXX is None, reason="g++ not found: the x86 harness is C++20")
CACHE = Path(tempfile.gettempdir()) / "aieflow-test-gemm-cache" / "x86"  # = $AIEFLOW_CACHE_DIR/x86
BLOCKS = {"mc": 16, "nc": 16, "kc": 32}
SHAPES = [(37, 29, 70), (16, 16, 32), (5, 3, 1), (8, 40, 100)]  # edges in m, n, k; one exact block


def check(d, a, b) -> None:
    r = d.verify(a, b, cache_dir=CACHE)
    want = reference(a, b)
    assert r.ok and r.values == want.size, r.verdict()
    assert np.array_equal(d.predict(a, b).astype(np.int64), want)


@pytest.mark.parametrize("tiles,blocks", [(1, BLOCKS), (2, BLOCKS), (4, {**BLOCKS, "nc": 40})])
def test_published_uint8_shapes_and_tiles(tiles, blocks):
    for m, n, k in SHAPES:
        d = aieflow.gemm(m, n, k, "uint8", "vck190", tiles, "published", blocks=blocks)
        assert d.plan.config.tiles_j == tiles
        for kind in ("random", "max"):  # max: all 255
            check(d, *operands("uint8", m, n, k, kind))


def test_published_uint8_padding_lanes_in_the_last_l4_step():
    d = aieflow.gemm(37, 40, 70, "uint8", "vck190", 4, "published", blocks={**BLOCKS, "nc": 40})
    assert d.plan.panels == 5 and d.plan.l4_steps == 2  # step 2 has one micro-panel and 3 idle lanes
    check(d, *operands("uint8", 37, 40, 70, "random", 3))


@pytest.mark.parametrize("dtype", ["int8", "int16"])
def test_published_signed_extremes(dtype):
    for m, n, k in SHAPES[:2]:
        d = aieflow.gemm(m, n, k, dtype, "vck190", 2, "published", blocks=BLOCKS)
        for kind in ("random", "min", "max", "mixed"):
            check(d, *operands(dtype, m, n, k, kind, seed=m))
    d = aieflow.gemm(37, 29, 70, "int16", "vck190", 2, "published", blocks=BLOCKS)
    assert d.plan.output.name == "int64" and d.plan.output.wide  # 70 x 2^30 > int32: (hi, lo) Cr


def test_best_design_two_streams_ping_pong_and_l5_groups():
    d = aieflow.gemm(64, 40, 100, "uint8", "vck190", 8, "best")
    c, b = d.plan.config, d.plan.blocks
    assert (c.ar_streams, c.br_buffers, c.writeback, c.tiles_j, c.tiles_i) == (2, 2, "overlapped", 1, 4)
    check(d, *operands("uint8", 64, 40, 100, "random"))
    # the same configuration on shapes with several k blocks (pc > 0 adds into C) and edges
    u8 = TYPES["uint8"]
    for m, n, k in ((50, 33, 250), (64, 80, 300)):
        e = GemmDesign(make_plan(m, n, k, u8, output_type(u8, k), aieflow.devices.VCK190, "best", c,
                                 {"mc": b.mc, "nc": b.nc, "kc": b.kc}))
        assert e.plan.n_pc == 3
        for kind in ("random", "max"):
            check(e, *operands("uint8", m, n, k, kind, seed=k))


def test_two_by_two_tiles_fp32_bit_exact_with_predict():
    t = TYPES["fp32"]
    cfg = GemmConfig(tiles_j=2, tiles_i=2, ar_streams=2, br_buffers=2, writeback="overlapped")
    rng = np.random.default_rng(5)
    for m, n, k in ((37, 29, 70), (32, 16, 8)):
        d = GemmDesign(make_plan(m, n, k, t, output_type(t, k), aieflow.devices.VCK190, "best", cfg, BLOCKS))
        for a, b in (
            (rng.standard_normal((m, k)), rng.standard_normal((k, n))),
            (rng.choice([-1e18, 1e18], (m, k)) * rng.random((m, k)), rng.choice([-1e18, 1e18], (k, n))),
            (np.full((m, k), 1e-20), np.full((k, n), 3e-21)),  # subnormal products
        ):
            a32, b32 = a.astype(np.float32), b.astype(np.float32)
            r = d.verify(a32, b32, cache_dir=CACHE)
            assert r.ok, r.verdict()
            ref = a32.astype(np.float64) @ b32.astype(np.float64)
            got = d.predict(a32, b32)
            assert np.allclose(got, ref, rtol=1e-4, atol=1e-4 * np.abs(ref).max() + 1e-44)


def test_random_operands_default_and_cli_verify(tmp_path):
    d = aieflow.gemm(37, 29, 70, "uint8", "vck190", 1, "published", blocks=BLOCKS)
    r = d.verify(cache_dir=CACHE)
    assert r.ok and r.cached and r.values == 37 * 29 and "PASS" in r.verdict()
    env = {**os.environ, "AIEFLOW_CACHE_DIR": str(CACHE.parent)}  # the same build cache
    cli = subprocess.run([sys.executable, "-m", "aieflow.cli", "gemm", "--m", "37", "--n", "29", "--k", "70",
                          "--mc", "16", "--nc", "16", "--kc", "32", "--out", str(tmp_path / "g"), "--verify"],
                         capture_output=True, text=True, env=env)
    assert cli.returncode == 0, cli.stderr
    assert "verify: PASS, bit-exact: 1073 values of C: cached build" in cli.stdout


def test_a_broken_write_back_is_caught(tmp_path):
    d = aieflow.gemm(37, 29, 70, "uint8", "vck190", 1, "published", blocks=BLOCKS)
    pl = d.files["pl/gemm_pl.h"]
    assert "dst = add ? static_cast<c_t>(dst + v) : v;" in pl
    d.files["pl/gemm_pl.h"] = pl.replace("static_cast<int>(g * MC_TILE + round * MR + rb * MS + e / NS)",
                                         "static_cast<int>(g * MC_TILE + round * MR + rb * MS + e % NS)")
    a, b = operands("uint8", 37, 29, 70, "random")
    r = d.verify(a, b, cache_dir=CACHE)
    assert not r.ok and r.mismatches > 0 and "FAIL" in r.verdict()
    want = reference(a, b)
    assert r.first.expected == want[r.first.row, r.first.col] != r.first.got


def test_generated_sources_compile_on_their_own(tmp_path):
    """graph.cpp (the aiecompiler top level) against the ADF shim, and the PL kernels as C++14 (the
    HLS dialect) against the hls shim, warning-free."""
    d = aieflow.gemm(256, 256, 2048, "int16", "vck190", 4, "best")
    out = d.save(tmp_path / "g") / "project"
    flags = ["-Wall", "-Wextra", "-Werror", "-fsyntax-only", f"-I{shim_include()}", f"-I{out / 'src'}"]
    units = [(["-std=c++20", "-D__AIE_ARCH__=10", f"-I{out / 'src' / 'kernels'}"], out / "src" / "graph.cpp"),
             (["-std=c++14", f"-I{out / 'pl'}"], out / "pl" / "gemm_mover.cpp"),
             (["-std=c++14", f"-I{out / 'pl'}"], out / "pl" / "gemm_collect.cpp")]
    for extra, unit in units:
        r = subprocess.run([GXX, *extra, *flags, str(unit)], capture_output=True, text=True)
        assert r.returncode == 0, f"{unit.name}:\n{r.stderr[:3000]}"
