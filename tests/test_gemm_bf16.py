"""bf16 GEMM on AIE-ML (VEK280) and AIE-MLv2 (VEK385), issue 24 item 4.

A and B are bf16, C float32.  What the design computes (docs/gemm.md "bf16"): for every kc block
each Cr lane starts at +0.0 and adds the block's products in increasing k, one float32 rounding
per addition (a bf16 x bf16 product is exact in float32); the PL write-back adds the blocks into
C, which starts at +0.0, in increasing block order, one more rounding each.

The reference below is written here from that description with Python's struct (float32
rounding of each double result) and integer bf16 rounding, importing nothing from aieflow.  A
crafted case shows the blocked order giving a value that neither the one-sum-over-k order nor the
exact sum gives.  x86 runs of the generated C++ (kernel, graph with memory tiles, PL mover and
write-back, loops) are compared bit for bit on both boards; the project's `make shim-run` and
`make system-run` in a moved copy; bf16 on AIE1 is refused by name.
"""

from __future__ import annotations

import shutil

import numpy as np
import pytest
from float_reference import bf16, f32
from hw_tools import make, make_host, needs_ap_types, needs_xrt, no_venv_env

import aieflow
from aieflow.errors import AieflowError

# ------------------------------------------------------------------ independent reference


def ref_gemm(a: np.ndarray, b: np.ndarray, kc: int) -> np.ndarray:
    m, k = a.shape
    n = b.shape[1]
    c = np.zeros((m, n), dtype=np.float32)
    for i in range(m):
        for j in range(n):
            total = 0.0
            for pc in range(0, k, kc):
                acc = 0.0
                for p in range(pc, min(pc + kc, k)):
                    prod = float(a[i, p]) * float(b[p, j])
                    if 2.0**-126 <= abs(prod) < 2.0**128:  # bf16 x bf16 is exact in float32 in the normal range
                        assert f32(prod) == prod
                    acc = f32(acc + f32(prod))
                total = f32(total + acc)
            c[i, j] = total
    return c


def bf16_matrix(rng, shape, scale=1.0) -> np.ndarray:
    x = rng.standard_normal(shape) * scale
    return np.array([[bf16(v) for v in row] for row in x], dtype=np.float32)


def bits(x: np.ndarray) -> np.ndarray:
    return np.asarray(x, dtype=np.float32).view(np.uint32)


# ------------------------------------------------------------------ plan and refusals
@pytest.mark.parametrize("device, shape", [("vek280", (4, 8, 4)), ("vek385", (4, 8, 8))])
def test_the_catalog_bf16_mmul_and_rate_are_used(device, shape):
    d = aieflow.gemm(64, 96, 200, dtype="bf16", device=device, tiles=4, design="best")
    p = d.plan
    assert p.dtype.mmul == shape and p.dtype.acc == "accfloat" and p.output.name == "float32"
    rate = p.device.generation.macs_per_cycle[("bf16", "bf16")]
    assert rate == {"vek280": 128, "vek385": 256}[device]
    perf = d.estimate()
    assert perf.microkernel.mac == p.blocks.kc * p.blocks.mr * p.blocks.nr / rate
    src = d.files["src/kernels/gemm_tile.cc"]
    assert "using TA = bfloat16;" in src and "using ACC = accfloat;" in src and "output_stream<float>" in src
    assert d.files["src/graph.h"].count("shared_buffer<bfloat16>::create") == p.memtiles.ac_memtiles + p.memtiles.bc_memtiles
    assert "using a_t = std::uint16_t;" in d.files["src/gemm_config.h"]


def test_bf16_on_aie1_and_non_bf16_operands_are_refused_by_name():
    with pytest.raises(AieflowError, match=r"dtype bf16 on vck190.*no bf16 multiply-accumulate") as e:
        aieflow.gemm(64, 64, 64, dtype="bf16", device="vck190")
    assert "vek280" in str(e.value.hint)
    d = aieflow.gemm(8, 8, 16, dtype="bf16", device="vek280", tiles=1, design="best")
    a = np.ones((8, 16), np.float32)
    a[3, 5] = 1.0 + 2.0**-10  # not a bf16 value (8 significand bits)
    with pytest.raises(AieflowError, match=r"A\[3, 5\].*not a bf16 value"):
        d.predict(a, np.ones((16, 8), np.float32))
    with pytest.raises(AieflowError, match="float32 C"):
        aieflow.gemm(8, 8, 16, dtype="bf16", device="vek280", design="best", output="int32")


# ------------------------------------------------------------------ the order
def test_blocked_order_differs_from_one_sum_and_from_the_exact_sum():
    """k = 16 in two blocks of 8: block 0 = 2^24 then seven 1s (each lost: 2^24 + 1 is a tie, to even),
    block 1 = eight 1s (8).  Blocked: 2^24 + 8 (exact in float32).  One sequential sum over k: 2^24
    (every 1 lost).  The exact sum 2^24 + 15 rounds to 2^24 + 16.  Three different answers."""
    d = aieflow.gemm(4, 4, 16, dtype="bf16", device="vek280", tiles=1, design="best", blocks={"kc": 8})
    assert d.plan.blocks.kc == 8
    a = np.ones((4, 16), np.float32)
    a[:, 0] = 2.0**24
    b = np.ones((16, 4), np.float32)
    c = d.predict(a, b)
    assert np.all(c == 2.0**24 + 8)
    assert np.array_equal(bits(c), bits(ref_gemm(a, b, 8)))
    seq = np.float32(0)
    for p in range(16):
        seq = np.float32(seq + a[0, p] * b[p, 0])
    assert seq == 2.0**24 and np.float32(2.0**24 + 15) == 2.0**24 + 16
    one_block = aieflow.gemm(4, 4, 16, dtype="bf16", device="vek280", tiles=1, design="best", blocks={"kc": 16})
    assert np.all(one_block.predict(a, b) == 2.0**24)  # kc = k: the one-sum order
    v = d.verify(a, b)  # the generated C++ adds in the same order
    assert v.ok, v.verdict()


def test_predict_equals_the_independent_reference_on_random_and_edge_values():
    rng = np.random.default_rng(3)
    d = aieflow.gemm(11, 13, 40, dtype="bf16", device="vek385", tiles=2, design="best", blocks={"kc": 16})
    assert d.plan.k // d.plan.blocks.kc >= 2
    for scale in (1e-3, 1.0, 1e30):
        a, b = bf16_matrix(rng, (11, 40), scale), bf16_matrix(rng, (40, 13))
        a[0, :] = 0.0
        a[1, ::2] = -0.0
        a[2, 0] = a[2, 1] = bf16(3.0e38)  # overflow to inf in the sum
        b[:, 0] = 2.0**-133  # bf16 subnormal: products underflow / stay subnormal
        want = ref_gemm(a, b, d.plan.blocks.kc)
        got = d.predict(a, b)
        same = (bits(got) == bits(want)) | (np.isnan(got) & np.isnan(want))
        assert same.all(), (scale, np.argwhere(~same)[:3])


# ------------------------------------------------------------------ x86: the generated C++
@pytest.mark.parametrize("device", ["vek280", "vek385"])
def test_x86_verify_is_bit_exact_and_a_mutated_kernel_fails(device):
    d = aieflow.gemm(37, 70, 150, dtype="bf16", device=device, tiles=4, design="best", blocks={"kc": 64})
    assert d.plan.k > d.plan.blocks.kc  # several k blocks through the write-back
    rng = np.random.default_rng(5)
    a, b = bf16_matrix(rng, (37, 150), 1e3), bf16_matrix(rng, (150, 70))
    a[0, :] = -0.0
    v = d.verify(a, b)
    assert v.ok and v.values == 37 * 70, v.verdict()
    assert np.array_equal(bits(d.predict(a, b)), bits(ref_gemm(a, b, d.plan.blocks.kc)))
    if device == "vek280":  # the kernel's mmul accumulating in bf16 instead of fp32: caught
        import dataclasses

        src = d.files["src/kernels/gemm_tile.cc"]
        bad = src.replace("aieflow_gemm::MicroKernel<TileCfg>::run(panels + step * gemm_cfg::KC * gemm_cfg::NR, ars, cr);",
                          "aieflow_gemm::MicroKernel<TileCfg>::run(panels + (gemm_cfg::L4_STEPS - 1 - step) * gemm_cfg::KC "
                          "* gemm_cfg::NR, ars, cr);")
        assert bad != src
        mutated = dataclasses.replace(d, files={**d.files, "src/kernels/gemm_tile.cc": bad})
        assert not mutated.verify(a, b).ok


# ------------------------------------------------------------------ the project
@pytest.fixture(scope="module")
def project(tmp_path_factory):
    d = aieflow.gemm(37, 29, 70, "bf16", "vek280", 2, "best")
    out = tmp_path_factory.mktemp("bf16") / "design"
    d.save(out)
    return d, out / "project"


def _copy(proj, tmp_path):
    work = tmp_path / "elsewhere" / "p"
    shutil.copytree(proj, work, ignore=shutil.ignore_patterns("shim_output", "system_output", "x86/harness",
                                                              "x86/system", "*.o", "host.exe"))
    return work


def _shipped(design, work):
    p = design.plan
    a = (np.fromfile(work / "data/A.bin", dtype="<u2").astype(np.uint32) << 16).view(np.float32).reshape(p.m, p.k)
    b = (np.fromfile(work / "data/B.bin", dtype="<u2").astype(np.uint32) << 16).view(np.float32).reshape(p.k, p.n)
    return a, b


@pytest.mark.skipif(shutil.which("g++") is None or shutil.which("make") is None, reason="needs g++ and make")
def test_shim_run_of_the_saved_project_is_bit_exact(project, tmp_path):
    design, proj = project
    work = _copy(proj, tmp_path)
    r = make(work, "shim-run", env=no_venv_env())
    assert r.returncode == 0, r.stdout + r.stderr
    assert "C bit-exact" in r.stdout.splitlines()
    a, b = _shipped(design, work)  # the shipped A and B as bf16 bit patterns, C from the reference
    assert np.abs(a).max() > 0 and not (bits(a) & 0xFFFF).any()
    c = np.fromfile(work / "shim_output/C.bin", dtype=np.float32).reshape(design.plan.m, design.plan.n)
    assert np.array_equal(bits(c), bits(ref_gemm(a, b, design.plan.blocks.kc)))


@needs_ap_types
def test_system_run_of_the_saved_project_is_bit_exact(project, tmp_path):
    from aieflow.vitis import ap_types_include

    design, proj = project
    work = _copy(proj, tmp_path)
    r = make(work, "system-run", f"AP_TYPES={ap_types_include()}", env=no_venv_env())
    assert r.returncode == 0, r.stdout + r.stderr
    assert "C bit-exact" in r.stdout.splitlines()
    a, b = _shipped(design, work)
    c = np.fromfile(work / "system_output/C.bin", dtype=np.float32).reshape(design.plan.m, design.plan.n)
    assert np.array_equal(bits(c), bits(ref_gemm(a, b, design.plan.blocks.kc)))
    golden = work / "data/C_golden.bin"
    data = bytearray(golden.read_bytes())
    data[-1] ^= 1
    golden.write_bytes(bytes(data))
    r = make(work, "system-run", f"AP_TYPES={ap_types_include()}", env=no_venv_env())
    assert r.returncode != 0 and "C bit-exact" not in r.stdout.splitlines()


@needs_xrt
def test_host_compiles_and_links_against_xrt(project, tmp_path):
    _, proj = project
    work = _copy(proj, tmp_path)
    r = make_host(work)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "value_of(A[" in (work / "host/host.cpp").read_text()  # the CPU check reads bf16 bit patterns


def test_saved_design_loads_back_with_the_same_plan_and_values(project):
    design, proj = project
    back = aieflow.load(proj.parent)
    assert back.plan.dtype == design.plan.dtype and back.plan.blocks == design.plan.blocks
    a, b = _shipped(design, proj)
    assert np.array_equal(bits(back.predict(a, b)),
                          np.fromfile(proj / "data/C_golden.bin", dtype=np.float32).view(np.uint32).reshape(
                              design.plan.m, design.plan.n))


@pytest.mark.parametrize("device", ["vek280", "vek385"])
def test_within_the_documented_tolerance_of_float32_pytorch(device):
    """float32 operands rounded to bf16 (nearest even, the test's own rounding) and multiplied by the
    design, against PyTorch's float32 product of the unrounded operands: max |C - C_torch| <= 2^-6
    max |C_torch| (docs/numerics.md, the bound for bf16 designs)."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(6)
    a, b = rng.standard_normal((24, 96)).astype(np.float32), rng.standard_normal((96, 20)).astype(np.float32)
    d = aieflow.gemm(24, 20, 96, dtype="bf16", device=device, tiles=2, design="best", blocks={"kc": 32})
    got = d.predict(np.vectorize(bf16)(a).astype(np.float32), np.vectorize(bf16)(b).astype(np.float32))
    want = (torch.from_numpy(a) @ torch.from_numpy(b)).numpy()
    err = np.abs(got - want).max()
    assert err <= 2.0**-6 * np.abs(want).max(), err
    assert err > 0  # the operands' bf16 rounding shows
