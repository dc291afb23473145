"""GMIO Br transfers, generated: ``--design best --br-transfer gmio`` on VCK190 reads each Br panel
from DDR through an ``adf::input_gmio`` (host: ``gm2aie_nb`` / ``wait``; XRT: ``xrt::aie::bo::async``)
instead of the PL mover's stream.  The shim executes input GMIO (tested on its own here); the
generated design runs on x86 and matches an independent numpy int64 product bit for bit."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import pytest
from gemm_cases import reference

import aieflow
from aieflow.devices import get_device
from aieflow.errors import ConfigError
from aieflow.gemm import memory
from aieflow.gemm.dtypes import TYPES
from aieflow.verify import FLAGS, shim_include

GXX = shutil.which("g++")
needs_gxx = pytest.mark.skipif(GXX is None, reason="g++ not found: the x86 harness is C++20")
CACHE = Path(tempfile.gettempdir()) / "aieflow-test-gemm-cache" / "x86"
VCK190 = get_device("vck190")


def test_gmio_plan_holds_three_copies_of_br():
    d = aieflow.gemm(256, 256, 2048, "uint8", "vck190", 8, "best", br_transfer="gmio")
    p = d.plan
    assert p.config.br_transfer == "gmio" and p.limits.br_copies == 3
    assert p.local_bytes == 3 * p.blocks.kc * 8 + 2560 <= 32 * 1024
    kc_max, _ = memory.kc_limit(TYPES["uint8"], VCK190, 8, "gmio", p.config.br_buffers)
    assert p.blocks.kc <= kc_max == (32 * 1024 - 2560) // 24 // 16 * 16
    stream = aieflow.gemm(256, 256, 2048, "uint8", "vck190", 8, "best")
    assert stream.plan.config.br_transfer == "stream"  # never chosen unless asked: 3 copies shrink kc
    assert stream.estimate().total_cycles <= d.estimate().total_cycles
    assert [a for a in d.alternatives if a.chosen][0].config == p.config


def test_gmio_project_reads_br_through_gmio():
    d = aieflow.gemm(64, 64, 256, "uint8", "vck190", 4, "best", br_transfer="gmio")
    lanes = d.plan.config.tiles_j
    g, cfg, host = d.files["src/graph.h"], d.files["system.cfg"], d.files["host/host.cpp"]
    assert g.count("adf::input_gmio::create(") == lanes and "adf::input_plio br" not in g
    assert "stream_connect=gemm_mover_0.br" not in cfg and cfg.count("stream_connect=gemm_mover_0.ar") >= 1
    # each lane's panel (or the zero panel) by xrt::aie::bo::async, or by a blocking sync with an XRT before 2.14
    assert host.count("XCL_BO_SYNC_BO_GMIO_TO_AIE") == 4 * lanes and "xrt::aie::bo" in host
    assert host.count("bc.async(") == host.count("bc.sync(\"") == lanes and "#if AIEFLOW_ASYNC_GMIO" in host
    harness = d.files["x86/harness.cpp"]
    assert harness.count(".gm2aie_nb(") == lanes and harness.count(".wait();") == lanes
    assert "static a_t Bc[" not in d.files["pl/gemm_mover.cpp"]  # no Block RAM for Bc


@pytest.mark.parametrize("kwargs,match", [
    ({"design": "published", "br_transfer": "gmio"}, "published design streams Br"),
    ({"design": "best", "br_transfer": "dma"}, "unknown Br transfer"),
    ({"design": "best", "br_transfer": "memtile"}, "no memory tiles"),
])
def test_gmio_requests_that_are_refused(kwargs, match):
    with pytest.raises(ConfigError, match=match):
        aieflow.gemm(64, 64, 256, "uint8", "vck190", 2, **kwargs)


@needs_gxx
@pytest.mark.parametrize("dtype,tiles,blocks", [
    ("uint8", 3, {"mc": 16, "nc": 40, "kc": 32}),  # 5 panels over 3 GMIO lanes: idle lanes read a zero panel
    ("int16", 2, {"mc": 16, "nc": 24, "kc": 16}),  # int64 C, (hi, lo) Cr
])
def test_gmio_design_is_bit_exact_on_x86(dtype, tiles, blocks):
    t = TYPES[dtype]
    for m, n, k in [(37, 29, 70), (5, 3, 1), (16, 40, 32)]:
        d = aieflow.gemm(m, n, k, dtype, "vck190", tiles, "best", blocks=blocks, br_transfer="gmio")
        assert d.plan.config.br_transfer == "gmio"
        rng = np.random.default_rng(m * k)
        for a, b in [(rng.integers(t.lo, t.hi + 1, (m, k)), rng.integers(t.lo, t.hi + 1, (k, n))),
                     (np.full((m, k), t.lo), np.full((k, n), t.lo)), (np.full((m, k), t.hi), np.full((k, n), t.hi))]:
            r = d.verify(a, b, cache_dir=CACHE)
            assert r.ok and r.values == m * n, r.verdict()
            assert np.array_equal(d.predict(a, b).astype(np.int64), reference(a, b))


GMIO_CASE = r"""
#include <adf.h>
#include <cstdio>
#include <cstring>

// Adds 1000 x the iteration's first value to every value of a 4-value buffer.
void addfirst(adf::input_buffer<int16, adf::extents<4>>& in, output_stream<int32>* out) {
    const int16* p = in.data();
    for (int i = 0; i < 4; ++i) writeincr(out, 1000 * p[0] + p[i]);
}

class G : public adf::graph {
public:
    adf::input_gmio g;
    adf::output_plio o;
    adf::kernel k;
    G() {
        g = adf::input_gmio::create("g", 64, 1000);
        o = adf::output_plio::create("o", adf::plio_32_bits, "o.txt");
        k = adf::kernel::create(addfirst);
        adf::connect<>(g.out[0], k.in[0]);
        adf::connect<adf::stream>(k.out[0], o.in[0]);
    }
};

int main(int argc, char** argv) {
    aieflow_shim::parse_harness_args(argc, argv);
    G gr;
    gr.init();
    int16* buf = static_cast<int16*>(adf::GMIO::malloc(12 * sizeof(int16)));
    for (int i = 0; i < 12; ++i) buf[i] = static_cast<int16>(i + 1);
    gr.g.gm2aie_nb(buf, 8 * sizeof(int16));         // two windows in one transfer
    gr.g.gm2aie_nb(buf + 8, 4 * sizeof(int16));     // and a third one
    std::memset(buf, 0, 12 * sizeof(int16));         // the transfer copied the bytes already
    gr.run(3);
    gr.g.wait();
    for (int32 v : aieflow_shim::take_plio<int32>(gr.o)) std::printf("%d ", v);
    std::printf("\n");
    adf::GMIO::free(buf);
    return 0;
}
"""


@needs_gxx
def test_shim_executes_input_gmio(tmp_path):
    (tmp_path / "case.cpp").write_text(GMIO_CASE)
    exe = tmp_path / "case"
    build = subprocess.run([GXX, *FLAGS, "-D__AIE_ARCH__=10", f"-I{shim_include()}", str(tmp_path / "case.cpp"),
                            "-o", str(exe)], capture_output=True, text=True)
    assert build.returncode == 0, build.stderr
    run = subprocess.run([str(exe), "--out", str(tmp_path)], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    want = []
    for w in ([1, 2, 3, 4], [5, 6, 7, 8], [9, 10, 11, 12]):
        want += [1000 * w[0] + v for v in w]
    assert [int(v) for v in run.stdout.split()] == want
    short = subprocess.run([str(exe), "--out", str(tmp_path), "--iterations", "4"], capture_output=True, text=True)
    assert short.returncode != 0 and "gm2aie transferred only" in short.stderr


@needs_gxx
def test_gmio_sources_compile_on_their_own(tmp_path):
    from test_gemm_vek280 import compile_alone

    d = aieflow.gemm(256, 256, 2048, "uint8", "vck190", 4, "best", br_transfer="gmio")
    compile_alone(d.save(tmp_path / "g") / "project", 10)
