"""Shim extensions the GEMM designs use: PLIO stream multicast, in-memory PLIO feed / take, and the
hls::stream / ap_uint shims.  Each C++ program prints what it computed; the expected values are
worked out here independently."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from aieflow.verify import FLAGS, shim_include

CXX = shutil.which("g++")
pytestmark = pytest.mark.skipif(CXX is None, reason="g++ not found")

GRAPH = r"""
#include <adf.h>
#include <cstdio>
#include <vector>

// Sums every value of one stream window of N values.
void sum4(input_stream<int32>* in, output_stream<int32>* out) {
    int32 s = 0;
    for (int i = 0; i < 4; ++i) s += readincr(in);
    writeincr(out, s);
}
// Adds a buffer of 4 values elementwise to 4 stream values.
void addbuf(adf::input_buffer<int32, adf::extents<4>>& b, input_stream<int32>* in, output_stream<int32>* out) {
    const int32* p = b.data();
    for (int i = 0; i < 4; ++i) writeincr(out, p[i] + readincr(in));
}

class G : public adf::graph {
public:
    adf::input_plio a, buf;
    adf::output_plio o0, o1, o2;
    adf::kernel k0, k1, k2;
    G() {
        a = adf::input_plio::create("a", adf::plio_32_bits, "a.txt");
        buf = adf::input_plio::create("buf", adf::plio_32_bits, "buf.txt");
        o0 = adf::output_plio::create("o0", adf::plio_32_bits, "o0.txt");
        o1 = adf::output_plio::create("o1", adf::plio_32_bits, "o1.txt");
        o2 = adf::output_plio::create("o2", adf::plio_32_bits, "o2.txt");
        k0 = adf::kernel::create(sum4);
        k1 = adf::kernel::create(sum4);
        k2 = adf::kernel::create(addbuf);
        adf::connect<adf::stream>(a.out[0], k0.in[0]);   // one PLIO, three stream consumers
        adf::connect<adf::stream>(a.out[0], k1.in[0]);
        adf::connect<adf::stream>(a.out[0], k2.in[1]);
        adf::connect<>(buf.out[0], k2.in[0]);
        adf::dimensions(k2.in[0]) = {4};
        adf::connect<adf::stream>(k0.out[0], o0.in[0]);
        adf::connect<adf::stream>(k1.out[0], o1.in[0]);
        adf::connect<adf::stream>(k2.out[0], o2.in[0]);
    }
};

int main(int argc, char** argv) {
    aieflow_shim::parse_harness_args(argc, argv);
    G g;
    g.init();
#ifdef IN_MEMORY
    for (int it = 0; it < 2; ++it) {
        std::vector<int32> a, b;
        for (int i = 0; i < 4; ++i) { a.push_back(10 * it + i); b.push_back(100 * (it + 1) + i); }
        aieflow_shim::feed_plio(g.a, a);
        aieflow_shim::feed_plio(g.buf, b);
        g.run(1);
        for (auto* o : {&g.o0, &g.o1, &g.o2})
            for (int32 v : aieflow_shim::take_plio<int32>(*o)) std::printf("%d ", v);
        std::printf("\n");
    }
#else
    g.run(2);
#endif
    g.end();
    return 0;
}
"""


def build(tmp: Path, name: str, source: str, defines=(), std="-std=c++20") -> Path:
    src = tmp / f"{name}.cpp"
    src.write_text(source)
    exe = tmp / name
    flags = [f for f in FLAGS if not f.startswith("-std")]
    r = subprocess.run([CXX, std, *flags, "-D__AIE_ARCH__=10", *defines, f"-I{shim_include()}", str(src), "-o",
                        str(exe)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[:3000]
    return exe


def test_plio_stream_multicast_from_file(tmp_path):
    """Every stream consumer of one PLIO gets the whole file (before: only the first did)."""
    exe = build(tmp_path, "multicast", GRAPH)
    a = list(range(1, 9))  # two iterations of 4 values
    (tmp_path / "a.txt").write_text("\n".join(map(str, a)) + "\n")
    (tmp_path / "buf.txt").write_text("\n".join(map(str, range(100, 108))) + "\n")
    r = subprocess.run([str(exe), "--data", str(tmp_path), "--out", str(tmp_path / "out")], capture_output=True,
                       text=True)
    assert r.returncode == 0, r.stderr
    want_sums = [sum(a[:4]), sum(a[4:])]
    for o in ("o0", "o1"):
        assert [int(v) for v in (tmp_path / "out" / f"{o}.txt").read_text().split()] == want_sums
    want_add = [x + y for x, y in zip(range(100, 108), a, strict=True)]
    assert [int(v) for v in (tmp_path / "out" / "o2.txt").read_text().split()] == want_add


def test_plio_feed_and_take_in_memory(tmp_path):
    """feed_plio replaces the data files (no a.txt exists); take_plio returns each run's outputs."""
    exe = build(tmp_path, "inmem", GRAPH, defines=["-DIN_MEMORY"])
    r = subprocess.run([str(exe), "--data", str(tmp_path), "--out", str(tmp_path / "out")], capture_output=True,
                       text=True)
    assert r.returncode == 0, r.stderr
    lines = [list(map(int, ln.split())) for ln in r.stdout.strip().splitlines()]
    for it, got in enumerate(lines):
        a = [10 * it + i for i in range(4)]
        b = [100 * (it + 1) + i for i in range(4)]
        assert got == [sum(a), sum(a), *[x + y for x, y in zip(a, b, strict=True)]]
    assert len(lines) == 2
    assert (tmp_path / "out" / "o0.txt").read_text() == ""  # taken, so end() had nothing left to write


def test_feed_plio_type_mismatch_is_fatal(tmp_path):
    src = GRAPH.replace("std::vector<int32> a, b;", "std::vector<int32> b; std::vector<int16> a;")
    exe = build(tmp_path, "bad", src, defines=["-DIN_MEMORY"])
    r = subprocess.run([str(exe), "--data", str(tmp_path)], capture_output=True, text=True)
    assert r.returncode != 0 and "int16" in r.stderr and "int32" in r.stderr


HLS = r"""
#include <ap_int.h>
#include <hls_stream.h>
#include <cstdio>
#include <cstdint>

int main() {
    ap_uint<128> w = 0;
    for (unsigned i = 0; i < 16; ++i) w.range(8 * i + 7, 8 * i) = 200 + i;   // wraps to 8 bits
    w.range(127, 96) = 0xDEADBEEFu;
    const ap_uint<128> c = w;
    std::printf("%llu %llu %u %d\n", (unsigned long long)c.range(7, 0).to_uint64(),
                (unsigned long long)c.range(95, 88).to_uint64(), c.range(127, 96).to_uint(), (int)c[0]);
    ap_uint<8> x = 300;  // 300 mod 256
    std::printf("%u %u\n", x.to_uint(), (x << 1).to_uint());
    hls::stream<ap_uint<128>> s("s");
    s.write(w);
    s << c;
    const std::size_t n = s.size();
    std::printf("%zu %d\n", n, (int)(s.read() == c));
    ap_uint<128> r;
    s >> r;
    std::printf("%d %d\n", (int)(r == w), (int)s.empty());
    if (EMPTY) s.read();
    return 0;
}
"""


@pytest.mark.parametrize("std", ["-std=c++14", "-std=c++20"])
def test_ap_uint_and_hls_stream(tmp_path, std):
    exe = build(tmp_path, "hls", HLS, defines=["-DEMPTY=0"], std=std)
    out = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout.split("\n")
    # lane 0 = 200; lane 11 = (200 + 11) mod 256; bits 127:96 = 0xDEADBEEF; bit 0 of 200 (even) = 0
    assert out[0].split() == ["200", str(211), str(0xDEADBEEF), "0"]
    assert out[1].split() == [str(300 % 256), str((300 % 256) * 2 % 256)]
    assert out[2].split() == ["2", "1"] and out[3].split() == ["1", "1"]
    bad = build(tmp_path, "hls_empty", HLS, defines=["-DEMPTY=1"], std=std)
    r = subprocess.run([str(bad)], capture_output=True, text=True)
    assert r.returncode != 0 and "empty hls::stream 's'" in r.stderr
