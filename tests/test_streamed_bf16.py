"""bf16 Dense layers with streamed weights on AIE-ML (VEK280) and AIE-MLv2 (VEK385), issue 24.

The layer runs on the bf16 memory-tile GEMM (A and B bf16, C float32) and a PL epilogue.  What it
computes (gemm/streamed_float.py, docs/gemm.md "Streamed bf16 Dense layers"): the layer input
rounded to bf16; per kc block each output's sum starts at +0.0 and adds the block's products in
increasing k (one float32 rounding per addition; a bf16 x bf16 product is exact in float32); the
blocks are added into C from +0.0; then ``y = float32(c + bias)``, one rounding to bf16 (nearest,
ties to even) and the ReLU (``y < 0 -> 0``).  Y leaves the PL as bf16 bit patterns.

The reference below is written from that description with Python's struct (float32 rounding of
each double result) and integer bf16 rounding, importing nothing from aieflow.  Crafted rows put
``c + bias`` exactly on bf16 ties (and below zero) with expected values typed by hand.  The
generated C++ (GEMM on the shim, PL mover / write-back, epilogue) is compared bit for bit on x86 on
both boards, `make system-run` in a saved project on VEK280, and a mutated epilogue rounding is
caught.
"""

from __future__ import annotations

import dataclasses
import shutil

import numpy as np
import pytest
import torch
from float_reference import bf16, f32
from hw_tools import make, needs_ap_types, no_venv_env

import aieflow
from aieflow.gemm.dense import plan_streamed
from aieflow.gemm.dense_design import StreamedDenseDesign
from aieflow.gemm.dense_design import load as load_streamed
from aieflow.gemm.plan import make_plan

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

IN, OUT, KC = 48, 24, 16  # three k blocks
# bias values that put 1.0 + bias on bf16 ties (spacing 2^-7 above 1.0, 2^-8 below), and plain ones
TIE_BIAS = [2.0**-8, 3 * 2.0**-8, 5 * 2.0**-8, -(2.0**-9), -3 * 2.0**-9, -1.5, -1.0, 0.0]
# bf16(1.0 + bias), ReLU after: typed by hand (ties go to the even significand)
TIE_WANT = [1.0, 1.0 + 2.0**-6, 1.0 + 2.0**-6, 1.0, 1.0 - 2.0**-7, 0.0, 0.0, 1.0]


# ------------------------------------------------------------------ independent reference




def ref_layer(x: np.ndarray, w: np.ndarray, bias, kc: int, relu: bool) -> np.ndarray:
    s, k = x.shape
    n = w.shape[1]
    out = np.zeros((s, n), dtype=np.float32)
    xb = [[bf16(float(v)) for v in row] for row in x]
    for i in range(s):
        for j in range(n):
            c = 0.0
            for pc in range(0, k, kc):
                acc = 0.0
                for p in range(pc, min(pc + kc, k)):
                    acc = f32(acc + f32(xb[i][p] * float(w[p, j])))
                c = f32(c + acc)
            y = bf16(f32(c + float(bias[j])) if bias is not None else c)
            out[i, j] = 0.0 if (relu and y < 0) else y
    return out


def bits(v: np.ndarray) -> np.ndarray:
    return np.asarray(v, dtype=np.float32).view(np.uint32)


# ------------------------------------------------------------------ designs


def _model(bias: bool = True, seed: int = 0) -> torch.nn.Module:
    """IN -> OUT Linear + ReLU with bf16-exact weights; feature 0's weights are 1.0 and the first
    biases the tie values, so the input e0 gives ``bf16(1.0 + bias)``."""
    torch.manual_seed(seed)
    lin = torch.nn.Linear(IN, OUT, bias=bias)
    with torch.no_grad():
        lin.weight.copy_(lin.weight.to(torch.bfloat16).float())
        lin.weight[:, 0] = 1.0
        if bias:
            b = torch.randn(OUT).to(torch.bfloat16).float()
            b[: len(TIE_BIAS)] = torch.tensor(TIE_BIAS)
            lin.bias.copy_(b)
    return torch.nn.Sequential(lin, torch.nn.ReLU()).eval()


def _design(device: str = "vek280", bias: bool = True, orientation: str | None = None) -> StreamedDenseDesign:
    model = _model(bias)
    d = aieflow.compile(model, device=device, example_input=torch.randn(8, IN),
                        config={"precision": "bf16", "layers": {"0": {"weights": "streamed"}}})
    assert isinstance(d, StreamedDenseDesign)
    p = d.plan
    if orientation and orientation != p.orientation:
        p = plan_streamed(d.graph, d.device, d.config, d.node, p.reason, orientation=orientation)
    g = p.gemm
    gemm = make_plan(g.m, g.n, g.k, g.dtype, g.output, g.device, g.design, g.config, {"kc": KC})
    out = StreamedDenseDesign(d.graph, d.device, d.config, dataclasses.replace(p, gemm=gemm), d.source)
    out.model = model  # type: ignore[attr-defined]
    return out


def _inputs(samples: int, seed: int = 0) -> np.ndarray:
    """e0 (the tie row), its negation, zeros, -0.0, large and tiny rows, then normal samples."""
    rng = np.random.default_rng(seed)
    e0 = np.zeros(IN)
    e0[0] = 1.0
    head = [e0, -e0, np.zeros(IN), np.full(IN, -0.0), np.full(IN, 3e30), np.full(IN, -1e-30)]
    body = rng.standard_normal((samples - len(head), IN)) * rng.choice([1e-2, 1.0, 1e3], size=(samples - len(head), 1))
    return np.concatenate([np.array(head), body]).astype(np.float32)


def _params(d: StreamedDenseDesign):
    lin = d.model[0]  # type: ignore[attr-defined]
    w = lin.weight.detach().numpy().T.astype(np.float32)  # bf16-exact already (in x out)
    b = None if lin.bias is None else lin.bias.detach().numpy().astype(np.float32)
    return w, b


@pytest.fixture(scope="module")
def d280() -> StreamedDenseDesign:
    return _design()


# ------------------------------------------------------------------ plan and numerics


def test_bf16_layer_streams_on_the_bf16_memtile_gemm(d280):
    p = d280.plan
    assert p.gemm.dtype.name == "bf16" and p.gemm.output.name == "float32" and p.gemm.memtile
    assert p.gemm.dtype.mmul == (4, 8, 4)  # AIE-ML's bf16 mmul (catalog)
    assert p.epilogue.bf16 and p.epilogue.is_float and p.epilogue.y_np == "uint16"
    assert p.gemm.blocks.kc == KC and -(-IN // KC) == 3
    s = d280.summary()
    assert "bf16 -> float32" in s and "rounded to bf16" in s
    h = d280.files["pl/dense_epilogue.h"]
    assert "using y_t = std::uint16_t;" in h and "round_bf16" in h
    assert "using x_t = std::uint16_t;" in d280.files["host/dense_host.cpp"]


def test_vek385_uses_the_v2_bf16_mmul():
    d = aieflow.compile(_model(), device="vek385", example_input=torch.randn(8, IN),
                        config={"precision": "bf16", "layers": {"0": {"weights": "streamed"}}})
    assert d.plan.gemm.dtype.name == "bf16" and d.plan.gemm.dtype.mmul == (4, 8, 8)  # UG1529 AIE-MLv2 row


@pytest.mark.parametrize("orientation, bias", [("xw", True), ("wx", True), ("xw", False)])
def test_predict_is_the_gemm_order_against_an_independent_reference(orientation, bias):
    d = _design(bias=bias, orientation=orientation)
    assert d.plan.orientation == orientation
    w, b = _params(d)
    assert np.array_equal(bits(np.asarray(d.node.params["weight_q"], np.float32)), bits(w))
    x = _inputs(14, seed=3)
    got = np.asarray(d.run(d.quantise_input(x)), np.float32).reshape(len(x), -1)
    want = ref_layer(x, w, b, KC, relu=True)
    assert np.array_equal(bits(got), bits(want))
    assert not (bits(got) & 0xFFFF).any()  # bf16 values
    if bias:  # the tie row, by hand
        assert got[0, : len(TIE_WANT)].tolist() == TIE_WANT


def test_within_the_documented_tolerance_of_float32_pytorch(d280):
    x = np.random.default_rng(5).standard_normal((32, IN)).astype(np.float32)
    want = d280.model(torch.from_numpy(x)).detach().numpy()  # type: ignore[attr-defined]
    got = np.asarray(d280.predict(x), np.float32).reshape(want.shape)
    err = np.abs(got - want).max()
    assert err <= 2.0**-6 * np.abs(want).max(), err  # docs/numerics.md: 2^-6 max |y_torch|
    assert err > 0  # bf16 is not float32


# ------------------------------------------------------------------ x86


def test_x86_bit_exact_on_vek280_and_a_mutated_rounding_is_caught(d280, tmp_path):
    x = _inputs(11, seed=1)
    w, b = _params(d280)
    r = d280.verify(x, cache_dir=tmp_path)
    assert r.ok, r.verdict()
    assert r.values == 11 * OUT
    assert np.array_equal(bits(np.asarray(d280.run(d280.quantise_input(x)), np.float32).reshape(11, -1)),
                          bits(ref_layer(x, w, b, KC, relu=True)))
    bad = dataclasses.replace(d280, files=dict(d280.files))  # ties away from even: the tie row differs
    good = "u = (u + 0x7FFFu + ((u >> 16) & 1u)) & 0xFFFF0000u;"
    assert good in d280.files["pl/dense_epilogue.h"]
    bad.files["pl/dense_epilogue.h"] = d280.files["pl/dense_epilogue.h"].replace(good, "u = (u + 0x8000u) & 0xFFFF0000u;")
    r = bad.verify(x, cache_dir=tmp_path)
    assert not r.ok and r.first is not None and r.first[0] == 0


def test_x86_bit_exact_on_vek385_transposed():
    d = _design("vek385", orientation="wx")
    r = d.verify(_inputs(9, seed=2))
    assert r.ok, r.verdict()


# ------------------------------------------------------------------ project, save / load


@needs_ap_types
def test_saved_project_system_run_is_bit_exact_and_reloads(d280, tmp_path):
    from aieflow.vitis import ap_types_include

    out = d280.save(tmp_path / "d")
    back = load_streamed(out)
    assert back.plan.gemm.blocks == d280.plan.gemm.blocks and back.plan.epilogue == d280.plan.epilogue
    proj = out / "project"
    x_bits = np.fromfile(proj / "data/X.bin", dtype="<u2")
    x = (x_bits.astype(np.uint32) << 16).view(np.float32).reshape(-1, IN)
    w, b = _params(d280)
    w_saved = (np.fromfile(proj / "data/W.bin", dtype="<u2").astype(np.uint32) << 16).view(np.float32)
    assert np.array_equal(bits(w_saved.reshape(IN, OUT)), bits(w))
    want = ref_layer(x, w, b, KC, relu=True)
    golden = np.fromfile(proj / "data/Y_golden.bin", dtype="<u2").astype(np.uint32) << 16
    assert np.array_equal(golden.reshape(want.shape), bits(want))
    work = tmp_path / "moved"
    shutil.copytree(proj, work)
    r = make(work, "system-run", f"AP_TYPES={ap_types_include()}", env=no_venv_env())
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Y bit-exact" in r.stdout.splitlines()
    y = np.fromfile(work / "system_output/Y.bin", dtype="<u2").astype(np.uint32) << 16
    assert np.array_equal(y.reshape(want.shape), bits(want))


# ------------------------------------------------------------------ segmented: a bf16 streamed segment


def test_segmented_bf16_chain_with_a_streamed_segment_verifies_per_segment():
    torch.manual_seed(1)
    model = torch.nn.Sequential(torch.nn.Linear(32, 40), torch.nn.ReLU(), torch.nn.Linear(40, 16)).eval()
    x = torch.randn(8, 32)
    d = aieflow.compile(model, device="vek280", example_input=x,
                        config={"precision": "bf16", "layers": {"0": {"weights": "streamed"}}})
    assert [s.kind for s in d.specs] == ["streamed", "resident"]
    assert d.segments[0].plan.epilogue.bf16
    want = model(x).detach().numpy()
    got = np.asarray(d.predict(x.numpy()), np.float32).reshape(want.shape)
    assert np.abs(got - want).max() <= 2.0**-6 * np.abs(want).max()
    # the whole model's emulator computes the streamed layer in its GEMM's order (as its segment)
    codes = d.quantise_input(x.numpy())
    assert np.array_equal(bits(np.asarray(d.run_segments(codes), np.float32)),
                          bits(np.asarray(d.trace(codes)[d.graph.outputs[0]], np.float32)))
    r = d.verify(samples=6)
    assert r.ok and all(c.ok and c.emulation_consistent for c in r.segments), r


def _ref_resident(x: np.ndarray, w: np.ndarray, bias: np.ndarray) -> np.ndarray:
    """A resident bf16 Dense layer (docs/numerics.md): bf16 operands, float32 accumulation from the
    bias in increasing k (a bf16 x bf16 product is exact in float32), one rounding to bf16."""
    s, k = x.shape
    out = np.zeros((s, w.shape[1]), dtype=np.float32)
    for i in range(s):
        for j in range(w.shape[1]):
            acc = float(bias[j])
            for p in range(k):
                acc = f32(acc + float(x[i, p]) * float(w[p, j]))
            out[i, j] = bf16(acc)
    return out


def test_segmented_bf16_chain_on_vek385_verifies_per_segment():
    """A streamed 32 -> 40 + ReLU (the bf16 memory-tile GEMM on the v2 4x8x8 mmul), then a resident
    40 -> 16, on VEK385: predict and the per-segment run equal the reference of this file layer by
    layer through the cut, bit for bit, and each segment's generated C++ verifies on x86."""
    torch.manual_seed(3)
    model = torch.nn.Sequential(torch.nn.Linear(32, 40), torch.nn.ReLU(), torch.nn.Linear(40, 16)).eval()
    with torch.no_grad():  # bf16-exact parameters: the reference needs no parameter rounding
        for p in model.parameters():
            p.copy_(p.to(torch.bfloat16).float())
    x = _inputs(12, seed=4)[:, :32]
    d = aieflow.compile(model, device="vek385", example_input=torch.from_numpy(x),
                        config={"precision": "bf16", "layers": {"0": {"weights": "streamed"}}})
    assert [s.kind for s in d.specs] == ["streamed", "resident"]
    g = d.segments[0].plan.gemm
    assert g.memtile and g.dtype.mmul == (4, 8, 8) and d.segments[0].plan.epilogue.bf16
    w0, b0 = (model[0].weight.detach().numpy().T.astype(np.float32), model[0].bias.detach().numpy())
    w2, b2 = (model[2].weight.detach().numpy().T.astype(np.float32), model[2].bias.detach().numpy())
    want = _ref_resident(ref_layer(x, w0, b0, g.blocks.kc, relu=True), w2, b2)
    codes = d.quantise_input(x)
    assert np.array_equal(bits(np.asarray(d.predict(x), np.float32).reshape(want.shape)), bits(want))
    assert np.array_equal(bits(np.asarray(d.run_segments(codes), np.float32).reshape(want.shape)), bits(want))
    with torch.no_grad():
        fl = model(torch.from_numpy(x[6:])).numpy()
    # bf16 keeps 8 significant bits: two layers within 2^-6 of the output range (the VEK280 test above)
    assert np.abs(want[6:] - fl).max() <= 2.0**-6 * np.abs(fl).max()
    r = d.verify(samples=6)
    assert r.ok and all(c.ok and c.emulation_consistent for c in r.segments), r
