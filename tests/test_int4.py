"""int4 weights x int8 activations (precision ``a8w4``) on AIE-ML / AIE-MLv2 Dense layers.

* Emulation against an independent numpy statement of the documented PTQ semantics (weights on
  a 4-bit power-of-two grid, activations on 8-bit ones, round half to even, saturate), exact.
* The generated project built on x86 against the shim (int4 weights packed two per byte, loaded
  as ``aie::vector<int8>::cast_to<int4>()`` into ``aie::mmul<4, 16, 8, int8, int4>``) bit-exact
  with the emulator on VEK280 and VEK385.
* The shim's int4 on its own: ``cast_to`` against an independent nibble unpacking, the 8b x 4b
  mmul against exact integer products, int4 refused on AIE at compile time.
* AIE1 refuses a8w4 by name; the performance model runs the layer at 512 MACs per cycle.
"""

from __future__ import annotations

import math
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import pytest
import torch

import aieflow
from aieflow.errors import ConfigError
from aieflow.model_zoo import torch_mlp

CACHE = Path(tempfile.gettempdir()) / "aieflow-test-verify-cache"
INCLUDE = Path(__file__).resolve().parents[1] / "src" / "aieflow" / "x86" / "include"
CXX = shutil.which("g++")
needs_gxx = pytest.mark.skipif(CXX is None, reason="g++ not found")


# ----------------------------------------------------------------------------- independent reference


def _fake_quant(v: np.ndarray, frac: int, width: int) -> np.ndarray:
    lo, hi = -(2 ** (width - 1)), 2 ** (width - 1) - 1
    return np.clip(np.rint(v * 2.0**frac), lo, hi) / 2.0**frac  # np.rint: half to even


def _frac_for(max_abs: float, width: int) -> int:
    top = 2 ** (width - 1) - 1
    f = math.floor(math.log2(top / max_abs))
    while top * 2.0**-f < max_abs:
        f -= 1
    while top * 2.0 ** -(f + 1) >= max_abs:
        f += 1
    return f


def a8w4_reference(net, calib: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Weights on 4-bit grids, activations, outputs on 8-bit ones, biases on 32-bit ones (float64 is
    exact at these sizes)."""
    linears = [m for m in net if isinstance(m, torch.nn.Linear)]
    ws = [m.weight.detach().double().numpy().T for m in linears]
    bs = [m.bias.detach().double().numpy() for m in linears]
    acts = [calib.astype(np.float64)]
    for i, (w, b) in enumerate(zip(ws, bs, strict=True)):
        y = acts[-1] @ w + b
        acts.append(np.maximum(y, 0) if i < len(ws) - 1 else y)
    f_x = _frac_for(float(np.abs(acts[0]).max()), 8)
    v = _fake_quant(x.astype(np.float64), f_x, 8)
    for i, (w, b) in enumerate(zip(ws, bs, strict=True)):
        f_w = _frac_for(float(np.abs(w).max()), 4)
        acc = f_x + f_w
        f_b = min(_frac_for(float(np.abs(b).max()), 32), acc)
        f_y = min(_frac_for(float(np.abs(acts[i + 1]).max()), 8), acc)
        y = _fake_quant(v @ _fake_quant(w, f_w, 4) + _fake_quant(b, f_b, 32), f_y, 8)
        v, f_x = (np.maximum(y, 0) if i < len(ws) - 1 else y), f_y
    return v


def _design(device: str, layers=None, widths=(40, 72, 24, 10)):
    rng = np.random.default_rng(5)
    calib = rng.standard_normal((256, widths[0])).astype(np.float32)
    net = torch_mlp(list(widths), seed=11)
    d = aieflow.compile(net, device=device, example_input=calib[:8], calibration=calib,
                        config={"precision": "a8w4", **({"layers": layers} if layers else {})})
    return net, calib, d


@pytest.mark.parametrize("device", ["vek280", "vek385"])
def test_a8w4_emulation_matches_independent_reference(device):
    net, calib, d = _design(device)
    rng = np.random.default_rng(9)
    x = np.concatenate([rng.standard_normal((500, 40)).astype(np.float32) * 1.5,
                        np.full((1, 40), 1e6, np.float32), np.full((1, 40), -1e6, np.float32),
                        ((rng.integers(-130, 130, size=(20, 40)) + 0.5) / 8).astype(np.float32)])
    for n in d.layers():
        assert n.types.weight.width == 4 and n.types.input.width == 8, n.types
        # UG1529 8b x 4b: AIE-ML 4x16x8; AIE-MLv2 row 8x8x8 (4x16x8 absent there)
        assert n.plan.mmul == {"vek280": (4, 16, 8), "vek385": (8, 8, 8)}[device]
        assert -8 <= n.params["weight_q"].min() and n.params["weight_q"].max() <= 7
    np.testing.assert_array_equal(d.predict(x), a8w4_reference(net, calib, x))


@needs_gxx
@pytest.mark.parametrize("device", ["vek280", "vek385"])
def test_a8w4_project_verifies_bit_exact(device):
    layers = {"0": {"parallelism": {"cas_len": 2, "cas_num": 2}}, "2": {"parallelism": {"cas_len": 2, "cas_num": 1}}}
    _, _, d = _design(device, layers)
    assert [(n.plan.cas_len, n.plan.cas_num) for n in d.layers()][:2] == [(2, 2), (2, 1)]
    layers_h = d.files["src/layers.h"]
    assert "using TW = int4;" in layers_h and "W_PACK = 2" in layers_h
    w = next(v for k, v in d.files.items() if k.startswith("src/weights/"))
    assert "int8" in w and "low nibble first" in w
    r = d.verify(samples=300, cache_dir=CACHE)
    assert r.ok, r.verdict()


def test_pack_int4_matches_nibble_layout():
    from aieflow.ops.dense import pack_int4

    codes = np.random.default_rng(1).integers(-8, 8, size=64)
    codes[:4] = [-8, 7, 0, -1]
    packed = pack_int4(codes)
    raw = packed.astype(np.int64) & 0xFF
    lo, hi = raw & 0xF, raw >> 4
    back = np.empty(64, dtype=np.int64)
    back[0::2] = np.where(lo >= 8, lo - 16, lo)
    back[1::2] = np.where(hi >= 8, hi - 16, hi)
    np.testing.assert_array_equal(back, codes)
    assert packed[:2].tolist() == [0x78, 0xF0 - 0x100]  # (-8, 7) -> 0x78, (0, -1) -> 0xF0
    with pytest.raises(ValueError):
        pack_int4(np.array([8, 0]))


def test_aie1_refuses_a8w4_by_name():
    with pytest.raises(ConfigError) as e:
        _design("vck190")
    msg = str(e.value)
    assert "a8w4" in msg and "aie" in msg and "int8 x int4" in msg


def test_convolution_refuses_a8w4_by_name():
    net = torch.nn.Sequential(torch.nn.Conv2d(2, 4, 3), torch.nn.ReLU(), torch.nn.Flatten(), torch.nn.Linear(4 * 6 * 6, 5))
    x = np.random.default_rng(0).standard_normal((16, 2, 8, 8)).astype(np.float32)
    with pytest.raises(ConfigError, match="a8w4"):
        aieflow.compile(net, device="vek280", example_input=x[:2], calibration=x, config={"precision": "a8w4"})


def test_int4_layer_costs_half_the_int8_mac_cycles():
    from aieflow.devices import VEK280
    from aieflow.perf.kernel import KernelShape, dense_kernel_cycles, mac_cycles, mmul_step_cycles

    gen = VEK280.generation
    # versal-devices.md: int8 x int4 512 MACs/cycle, int8 x int8 256
    assert mac_cycles(1 << 20, gen, ("i8", "i4")) * 2 == mac_cycles(1 << 20, gen, ("i8", "i8"))
    # a 16 x 8 block of int4 is 64 bytes: two cycles of one 256-bit load unit (int8: four)
    assert mmul_step_cycles((4, 16, 8), 8, 4, gen, ("i8", "i4"))[1] == 2
    assert mmul_step_cycles((4, 16, 8), 8, 8, gen, ("i8", "i8"))[1] == 4
    shape = KernelShape((4, 16, 8), 64, 256, 64, 8, 4, 8, 32, True, False, False, False, 8)
    c = dense_kernel_cycles(shape, gen, ("i8", "i4"))
    assert c.mac_ii == 2 * 4 * 16 * 8 * 2 / 512 and c.peak_macs_per_cycle == 512
    _, _, d = _design("vek280")
    assert d.estimate().latency_ns > 0


# ----------------------------------------------------------------------------- the shim's int4

SHIM_INT4 = r"""
#include <aie_api/aie.hpp>
#include <cstdio>
int main() {
    int a[64], bb[64];
    for (int& v : a) if (std::scanf("%d", &v) != 1) return 2;
    for (int& v : bb) if (std::scanf("%d", &v) != 1) return 2;
    alignas(32) int8 A[64], B[64];
    for (int i = 0; i < 64; ++i) { A[i] = int8(a[i]); B[i] = int8(bb[i]); }
    // B: 128 int4 codes (16 x 8) packed in 64 bytes
    const aie::vector<int4, 128> w = aie::load_v<64>(B).cast_to<int4>();
    for (unsigned i = 0; i < 128; ++i) std::printf("%d ", int(w[i]));
    std::printf("\n");
    const aie::vector<int8, 64> back = w.cast_to<int8>();
    for (unsigned i = 0; i < 64; ++i) std::printf("%d ", int(back[i]));
    std::printf("\n");
    aie::mmul<4, 16, 8, int8, int4> m;
    m.mul(aie::load_v<64>(A), w);
    const auto acc = m.to_accum();
    for (unsigned i = 0; i < 32; ++i) std::printf("%lld ", (long long)acc[i]);
    std::printf("\nlane_bits %u\n", decltype(acc)::lane_bits);
}
"""


def _build(tmp_path: Path, src: str, arch: int) -> subprocess.CompletedProcess:
    (tmp_path / "t.cpp").write_text(src)
    return subprocess.run([CXX, "-std=c++20", "-O1", "-Wall", "-Wextra", "-Werror", f"-D__AIE_ARCH__={arch}",
                           "-I", str(INCLUDE), str(tmp_path / "t.cpp"), "-o", str(tmp_path / "t")],
                          capture_output=True, text=True, timeout=300)


@needs_gxx
def test_shim_int4_cast_and_mmul_match_reference(tmp_path):
    p = _build(tmp_path, SHIM_INT4, 20)
    assert p.returncode == 0, p.stderr
    rng = np.random.default_rng(3)
    a = rng.integers(-128, 128, size=64)
    a[:16] = -128
    b = rng.integers(-128, 128, size=64)
    b[:2] = [-128, 127]
    out = subprocess.run([str(tmp_path / "t")], input=" ".join(map(str, [*a, *b])), capture_output=True,
                         text=True, timeout=60).stdout.splitlines()
    u = b & 0xFF  # independent nibble unpacking: element 2i low nibble of byte i
    codes = np.empty(128, dtype=np.int64)
    codes[0::2], codes[1::2] = u & 0xF, u >> 4
    codes = np.where(codes >= 8, codes - 16, codes)
    assert [int(v) for v in out[0].split()] == codes.tolist()
    assert [int(v) for v in out[1].split()] == b.tolist()
    want = a.reshape(4, 16) @ codes.reshape(16, 8)  # exact; |sum| < 2^31
    assert [int(v) for v in out[2].split()] == want.reshape(-1).tolist()
    assert out[3] == "lane_bits 32"


@needs_gxx
def test_shim_refuses_int4_on_aie1(tmp_path):
    p = _build(tmp_path, SHIM_INT4, 10)
    assert p.returncode != 0 and "int4 does not exist on AIE" in p.stderr
