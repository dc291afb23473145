"""Bit-exactness of compiled Dense designs against independent references.

* QDQ ONNX: onnxruntime with graph optimisations disabled (its optimised QDQ fusion does not
  follow the exact ONNX semantics) is the oracle; exact equality on random and edge inputs.
* PyTorch float + PTQ: an independent numpy fake-quant reference of the documented semantics
  (power-of-two types from calibration maxima, round half to even, saturate), exact equality.
* PyTorch float + fp32 on AIE1: torch within float32 rounding.
"""

from __future__ import annotations

import math

import numpy as np
import onnxruntime as ort
import pytest
import torch

import aieflow
from aieflow.model_zoo import qdq_mlp, torch_mlp

DEVICES = ["vck190", "vek280", "vek385"]


def ort_run(model, x):
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return sess.run(None, {sess.get_inputs()[0].name: x})[0]


def edge_inputs(n_features: int, frac: int, rng) -> np.ndarray:
    """Saturating values, exact rounding ties of both signs, zero crossings, the code extremes."""
    step = 2.0**-frac
    rows = [
        np.full(n_features, 1e6),  # saturates high
        np.full(n_features, -1e6),  # saturates low
        np.full(n_features, 127 * step),
        np.full(n_features, -128 * step),
        np.full(n_features, 0.5 * step),  # tie -> 0 (even)
        np.full(n_features, -0.5 * step),  # tie -> 0 (even)
        np.full(n_features, 1.5 * step),  # tie -> 2
        np.full(n_features, -1.5 * step),  # tie -> -2
        np.full(n_features, -2.5 * step),  # tie -> -2
        np.zeros(n_features),
    ]
    ties = (rng.integers(-130, 130, size=(20, n_features)) + 0.5) * step
    return np.concatenate([np.stack(rows), ties]).astype(np.float32)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(
    "widths",
    [[20, 50, 37, 5], [64, 128, 10], [13, 7, 3], [100, 1], [256, 96, 200, 17]],
)
def test_qdq_mlp_equals_onnxruntime(device, widths):
    model = qdq_mlp(widths, seed=sum(widths))
    rng = np.random.default_rng(len(widths))
    x = np.concatenate(
        [(rng.standard_normal((500, widths[0])) * 4).astype(np.float32), edge_inputs(widths[0], 4, rng)]
    )
    design = aieflow.compile(model, device=device)
    want = ort_run(model, x)
    got = design.predict(x)
    assert got.shape == want.shape
    mism = np.argwhere(got.astype(np.float32) != want)
    assert mism.size == 0, f"{len(mism)} mismatches, first at {mism[0]}: {got[tuple(mism[0])]} vs {want[tuple(mism[0])]}"
    # The check is not vacuous: outputs vary and some of them saturate.
    assert np.unique(want).size > 10


@pytest.mark.parametrize("device", ["vck190", "vek280"])
def test_qdq_without_final_quantiser_keeps_accumulator_precision(device):
    model = qdq_mlp([30, 40, 6], seed=5, quantise_output=False)
    rng = np.random.default_rng(1)
    x = (rng.standard_normal((300, 30)) * 4).astype(np.float32)
    design = aieflow.compile(model, device=device)
    assert design.output_type.width == 32
    np.testing.assert_array_equal(design.predict(x).astype(np.float32), ort_run(model, x))


def _fake_quant(v: np.ndarray, frac: int, width: int) -> np.ndarray:
    lo, hi = -(2 ** (width - 1)), 2 ** (width - 1) - 1
    return np.clip(np.rint(v * 2.0**frac), lo, hi) / 2.0**frac  # np.rint: half to even


def _frac_for(max_abs: float, width: int) -> int:
    top = 2 ** (width - 1) - 1
    if max_abs == 0:
        return width - 1
    f = math.floor(math.log2(top / max_abs))
    while top * 2.0**-f < max_abs:
        f -= 1
    while top * 2.0 ** -(f + 1) >= max_abs:
        f += 1
    return f


def ptq_reference(net, calib: np.ndarray, x: np.ndarray, width: int) -> np.ndarray:
    """Independent statement of aieflow's documented PTQ semantics, in float64 (exact here)."""
    linears = [m for m in net if isinstance(m, torch.nn.Linear)]
    ws = [m.weight.detach().double().numpy().T for m in linears]
    bs = [m.bias.detach().double().numpy() for m in linears]
    # float calibration activations
    acts = [calib.astype(np.float64)]
    for i, (w, b) in enumerate(zip(ws, bs, strict=True)):
        y = acts[-1] @ w + b
        acts.append(np.maximum(y, 0) if i < len(ws) - 1 else y)
    f_in = _frac_for(float(np.abs(acts[0]).max()), width)
    v = _fake_quant(x.astype(np.float64), f_in, width)
    f_x = f_in
    for i, (w, b) in enumerate(zip(ws, bs, strict=True)):
        f_w = _frac_for(float(np.abs(w).max()), width)
        acc = f_x + f_w
        f_b = min(_frac_for(float(np.abs(b).max()), 32), acc)
        f_y = min(_frac_for(float(np.abs(acts[i + 1]).max()), width), acc)
        y = v @ _fake_quant(w, f_w, width) + _fake_quant(b, f_b, 32)
        y = _fake_quant(y, f_y, width)
        if i < len(ws) - 1:
            y = np.maximum(y, 0)
        v, f_x = y, f_y
    return v


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("precision,width", [("int8", 8), ("int16", 16)])
def test_torch_ptq_matches_independent_fake_quant(device, precision, width):
    net = torch_mlp([24, 40, 33, 7], seed=width)
    rng = np.random.default_rng(7)
    calib = rng.standard_normal((256, 24)).astype(np.float32)
    x = np.concatenate([rng.standard_normal((400, 24)).astype(np.float32) * 1.5, edge_inputs(24, 5, rng)])
    design = aieflow.compile(net, device=device, example_input=calib[:8], calibration=calib, config={"precision": precision})
    got = design.predict(x)
    want = ptq_reference(net, calib, x, width)
    np.testing.assert_array_equal(got, want)
    # and PTQ stays close to the float model (the reference is not trivially wrong)
    ref = net(torch.from_numpy(x[:400])).detach().numpy()
    tol = 0.15 if width == 8 else 0.002
    assert np.median(np.abs(got[:400] - ref)) < tol


@pytest.mark.parametrize("widths", [[20, 50, 37, 5], [256, 300, 10], [3, 700, 2]])
def test_torch_fp32_on_vck190_matches_torch(widths):
    net = torch_mlp(widths, seed=2)
    x = np.random.default_rng(3).standard_normal((300, widths[0])).astype(np.float32)
    design = aieflow.compile(net, device="vck190", example_input=x[:8], config={"precision": "fp32"})
    got = design.predict(x)
    want = net(torch.from_numpy(x)).detach().numpy()
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5 * np.abs(want).max())


def test_fp32_emulation_is_sequential_float32():
    """fp32 emulation accumulates in float32 in k order from the bias (the kernel's order)."""
    net = torch_mlp([9, 4], seed=4)
    x = np.random.default_rng(0).standard_normal((50, 9)).astype(np.float32)
    d = aieflow.compile(net, device="vck190", example_input=x[:8], config={"precision": "fp32"})
    w = net[0].weight.detach().numpy().T.astype(np.float32)
    b = net[0].bias.detach().numpy().astype(np.float32)
    want = np.empty((50, 4), dtype=np.float32)
    for i in range(50):
        for j in range(4):
            acc = np.float32(b[j])
            for k in range(9):
                acc = np.float32(acc + np.float32(x[i, k] * w[k, j]))
            want[i, j] = acc
    np.testing.assert_array_equal(d.predict(x), want)


def test_accumulator_width_follows_the_generation():
    """A bias of 2^38 is 0 modulo AIE-ML's 32-bit accumulator but fits AIE1's 48-bit one."""
    net = torch.nn.Sequential(torch.nn.Linear(16, 2))
    with torch.no_grad():
        net[0].weight.fill_(1.0)
        net[0].bias.fill_(2.0**38)
    cfg = {
        "precision": "int8",
        "layers": {
            "0": {
                "input": "fixed<8,8,RND_CONV,SAT>",
                "weight": "fixed<8,8>",
                "bias": "fixed<32,40>",  # code 2^30, loaded into the accumulator with a shift of 8
                "output": "fixed<32,32,TRN,SAT>",
            }
        },
    }
    x = np.full((4, 16), 3.0, dtype=np.float32)
    ml = aieflow.compile(net, device="vek280", example_input=x, config=cfg)
    aie1 = aieflow.compile(net, device="vck190", example_input=x, config=cfg)
    assert ml.graph.nodes[0].types.bias_shift == 8
    assert (ml.predict(x, raw=True) == 48).all()  # (2^38 + 48) mod 2^32
    assert (aie1.predict(x, raw=True) == 2**31 - 1).all()  # 2^38 + 48 saturates into int32


def test_predict_chunking_does_not_change_results():
    model = qdq_mlp([40, 30, 4], seed=9)
    x = (np.random.default_rng(0).standard_normal((1001, 40)) * 4).astype(np.float32)
    d = aieflow.compile(model, device="vek280")
    full = d.predict(x)
    np.testing.assert_array_equal(d.predict(x, chunk=7), full)
    raw = d.predict(x, raw=True)
    assert raw.dtype.kind == "i"
    np.testing.assert_array_equal(raw * d.output_type.scale, full)
