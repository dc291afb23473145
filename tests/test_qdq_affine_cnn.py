"""Float scales and zero points in CNNs (issue 18 item 3): onnxruntime ``quantize_static`` models.

A small CNN (Conv 3x3 + ReLU + MaxPool, Conv + ReLU, global average pooling or Flatten, Dense) is
quantised here with onnxruntime's own ``quantize_static`` (QDQ; per tensor and per channel; uint8
and int8 activations) on random calibration data, and onnxruntime is the oracle.  The convolution's
requantisation is also checked against a reference written here that imports nothing from aieflow:
the exact integer convolution of the codes (padding = real 0) and the correctly rounded rational
requantisation (``fractions.Fraction``).
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

import aieflow
from aieflow.errors import AieflowError
from aieflow.model_zoo import onnx_float_cnn

ort = pytest.importorskip("onnxruntime")
quant = pytest.importorskip("onnxruntime.quantization")

SHAPE = (2, 8, 8)


def float_cnn(path, head: str) -> str:
    onnx.save(onnx_float_cnn(head), str(path))
    return str(path)


class Reader(quant.CalibrationDataReader):
    def __init__(self, seed: int):
        rng = np.random.default_rng(seed)
        self.batches = iter([{"x": rng.normal(size=(16, *SHAPE)).astype(np.float32)} for _ in range(8)])

    def get_next(self):
        return next(self.batches, None)


def quantised(float_path: str, out, per_channel: bool, act: str) -> str:
    quant.quantize_static(
        float_path, str(out), Reader(1), quant_format=quant.QuantFormat.QDQ, per_channel=per_channel,
        activation_type=quant.QuantType.QUInt8 if act == "uint8" else quant.QuantType.QInt8,
        weight_type=quant.QuantType.QInt8)
    return str(out)


def inits(path: str) -> dict[str, np.ndarray]:
    return {i.name: numpy_helper.to_array(i) for i in onnx.load(path).graph.initializer}


def sample_inputs(path: str, n: int, seed: int) -> np.ndarray:
    """Gaussian frames, exact ties of the input quantiser, zeros and saturating frames."""
    rng = np.random.default_rng(seed)
    s = np.float64(inits(path)["x_scale"])
    ties = ((rng.integers(-140, 140, size=(n // 4, *SHAPE)) + 0.5) * s).astype(np.float32)
    return np.concatenate([rng.normal(size=(n - n // 4, *SHAPE)).astype(np.float32) * 1.5, ties,
                           np.zeros((2, *SHAPE), np.float32), np.full((2, *SHAPE), 1e4, np.float32),
                           np.full((2, *SHAPE), -1e4, np.float32)])


def ort_run(path: str, x: np.ndarray) -> np.ndarray:
    return ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]


@pytest.fixture(scope="module")
def floats(tmp_path_factory):
    d = tmp_path_factory.mktemp("cnn")
    return {h: float_cnn(d / f"{h}.onnx", h) for h in ("gap", "flatten")}


# ----------------------------------------------------------------------------- onnxruntime


@pytest.mark.parametrize("head", ["gap", "flatten"])
@pytest.mark.parametrize("per_channel", [False, True], ids=["per_tensor", "per_channel"])
@pytest.mark.parametrize("act", ["uint8", "int8"])
def test_cnn_matches_onnxruntime(floats, tmp_path, head, per_channel, act):
    """Every output within 1 LSB of onnxruntime, >= 99 % exactly equal, on 2,000 frames."""
    path = quantised(floats[head], tmp_path / "q.onnx", per_channel, act)
    x = sample_inputs(path, 2000, 2)
    y = aieflow.emulate(path, device="vek280").predict(x)
    r = ort_run(path, x)
    s = float(inits(path)["y_scale"])
    lsb = np.abs(np.rint((y.astype(np.float64) - r) / s))
    assert y.shape == r.shape == (x.shape[0], 5)
    assert lsb.max() <= 1
    assert (lsb == 0).mean() >= 0.99


# ----------------------------------------------------------------------------- independent reference


def ref_round_half_even(num: int, den: int) -> int:
    q, r = divmod(num, den)
    if 2 * r > den or (2 * r == den and q % 2):
        q += 1
    return q


def ref_conv1(path: str, xq: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The first convolution on codes, from the QDQ model's own initializers: exact integer
    accumulation of (x - z_x) w + b with padding real 0, then QuantizeLinear of the exact rational
    value (half to even, + z_y, saturate); also each value's distance from a rounding tie."""
    p = inits(path)
    w, b = p["w1_quantized"].astype(np.int64), p["b1_quantized"].astype(np.int64)
    sx, zx = Fraction(float(p["x_scale"])), int(p["x_zero_point"])
    sw = np.broadcast_to(p["w1_scale"].astype(np.float64).reshape(-1), (w.shape[0],))
    sy, zy = Fraction(float(p["r1_scale"])), int(p["r1_zero_point"])
    lo, hi = (0, 255) if p["r1_zero_point"].dtype == np.uint8 else (-128, 127)
    xs = np.pad(xq.astype(np.int64) - zx, ((0, 0), (0, 0), (1, 1), (1, 1)))
    n, _, h, wd = xq.shape
    acc = np.zeros((n, w.shape[0], h, wd), dtype=np.int64)
    for i in range(3):
        for j in range(3):
            acc += np.einsum("nchw,oc->nohw", xs[:, :, i:i + h, j:j + wd], w[:, :, i, j])
    acc += b.reshape(1, -1, 1, 1)
    out = np.zeros_like(acc)
    tie = np.zeros(acc.shape, dtype=np.float64)
    for idx, a in np.ndenumerate(acc):
        v = int(a) * sx * Fraction(float(sw[idx[1]])) / sy
        out[idx] = min(max(ref_round_half_even(v.numerator, v.denominator) + zy, lo), hi)
        tie[idx] = float(abs(v - (v.numerator // v.denominator) - Fraction(1, 2)))
    return out, tie


@pytest.mark.parametrize(("per_channel", "act"), [(True, "uint8"), (False, "int8")])
def test_conv_requant_equals_independent_reference(floats, tmp_path, per_channel, act):
    """conv1's codes (the emulator's trace) equal the exact rational requantisation of the exact
    integer convolution wherever it lies outside a tie window of 2^-20 of an output step (the
    kernel's window is far smaller); the windows hold almost nothing."""
    path = quantised(floats["flatten"], tmp_path / "q.onnx", per_channel, act)
    d = aieflow.emulate(path, device="vek280")
    x = sample_inputs(path, 64, 7)
    xq = d.quantise_input(x)
    got = np.asarray(d.trace(xq)["r1"]).astype(np.int64)
    want, tie = ref_conv1(path, xq)
    assert got.shape == want.shape
    far = tie > 2.0 ** -20
    assert far.mean() > 0.999
    np.testing.assert_array_equal(got[far], want[far])


# ----------------------------------------------------------------------------- x86 verify


@pytest.mark.parametrize(("head", "per_channel", "act", "config"), [
    ("gap", True, "uint8", None),
    ("flatten", False, "int8", {"layers": {"conv2": {"mapping": {"groups": 2}}}}),
])
def test_cnn_verify_bit_exact(floats, tmp_path, head, per_channel, act, config):
    """The generated CNN kernels (RQ epilogue, zero-point padding, float-scale average pooling)
    run on x86 bit-exactly to predict (vek280; the second design splits conv2 into 2 output groups)."""
    path = quantised(floats[head], tmp_path / "q.onnx", per_channel, act)
    x = sample_inputs(path, 12, 3)
    d = aieflow.compile(path, device="vek280", example_input=x, config=config)
    assert "RQ = true" in d.files["src/layers.h"]
    if config:
        assert any(lay.stage == "conv2" and lay.cas_num == 2 for lay in d.plan.layers)
    r = d.verify(x)
    assert r.mismatches == 0 and r.values == x.shape[0] * 5
    np.testing.assert_array_equal(d.predict(x), aieflow.emulate(path, device="vek280").predict(x))


def test_cnn_verify_cascaded_conv_bit_exact(floats, tmp_path):
    """conv1 in 2 output groups makes conv2 read 2 input-channel groups: its partial sums go down a
    cascade of 2 tiles and the last (ConvLast) requantises them (the RQ epilogue after a cascade);
    generated C++ on x86 bit-exact to predict (vek280, per-channel uint8, Flatten head)."""
    path = quantised(floats["flatten"], tmp_path / "q.onnx", True, "uint8")
    x = sample_inputs(path, 12, 4)
    d = aieflow.compile(path, device="vek280", example_input=x,
                        config={"layers": {"conv1": {"mapping": {"groups": 2}}}})
    conv2 = next(lay for lay in d.plan.layers if lay.stage == "conv2")
    assert conv2.cas_len == 2
    kernels = "".join(v for k, v in d.files.items() if k.startswith("src/kernels/") and k.endswith(".cc"))
    assert "ConvLast<" in kernels and "ConvFirst<" in kernels
    r = d.verify(x)
    assert r.mismatches == 0 and r.values == x.shape[0] * 5
    np.testing.assert_array_equal(d.predict(x), aieflow.emulate(path, device="vek280").predict(x))


# ----------------------------------------------------------------------------- performance model


def test_float_scale_conv_stages_cost_the_requantisation(floats, tmp_path):
    """The same CNN compiled from onnxruntime's per-tensor int8 model (float scales) and by aieflow's
    own int8 PTQ (power-of-two types, zero points 0): same mapping and mmul shapes, and each conv
    stage costs more by exactly the requantisation term (cnn/perf.py REQUANT_CYCLES_PER_VALUE per
    output value: conv1 8 x 8 pixels x 6 channels, conv2 4 x 4 x 8, the Dense head 1 x 5); the max
    pooling in between costs the same."""
    from aieflow.cnn import perf

    path = quantised(floats["flatten"], tmp_path / "q.onnx", False, "int8")
    x = sample_inputs(path, 12, 4)
    affine = aieflow.compile(path, device="vek280", example_input=x)
    cal = np.random.default_rng(1).normal(size=(64, *SHAPE)).astype(np.float32)
    pow2 = aieflow.compile(floats["flatten"], device="vek280", example_input=cal, config={"precision": "int8"})
    assert [s.rq is not None for s in affine.plan.stages] == [True, False, True, True]
    assert all(s.rq is None for s in pow2.plan.stages)
    assert [(lay.mmul, lay.cas_len, lay.cas_num) for lay in affine.plan.layers] == \
        [(lay.mmul, lay.cas_len, lay.cas_num) for lay in pow2.plan.layers]
    clock = affine.device.clock_hz
    a = {st.stage: st.seconds * clock for st in affine.estimate().stages}
    b = {st.stage: st.seconds * clock for st in pow2.estimate().stages}
    assert perf.REQUANT_CYCLES_PER_VALUE == 10 / 16
    for stage, values in (("conv1", 64 * 6), ("pool1", 0), ("conv2", 16 * 8), ("fc", 5)):
        assert a[stage] - b[stage] == pytest.approx(values * 10 / 16, abs=1e-6), stage
    assert a["conv1"] > b["conv1"]


# ----------------------------------------------------------------------------- refusals


def test_tanh_after_float_scale_conv_is_refused(floats, tmp_path):
    """A Tanh between a float-scale Conv's output quantiser and the next layer: refused, naming the layer."""
    m = onnx.load(floats["flatten"])
    for n in m.graph.node:
        if n.name == "relu2":
            n.op_type = "Tanh"
    onnx.save(m, str(tmp_path / "t.onnx"))
    path = quantised(str(tmp_path / "t.onnx"), tmp_path / "q.onnx", True, "uint8")
    with pytest.raises(AieflowError) as e:
        aieflow.emulate(path, device="vek280")
    msg = str(e.value)
    # the specific refusal (what is mapped: ReLU), not fuse.py's generic one that used to shadow it
    assert "conv2" in msg and "tanh after a convolution with float scales" in msg and "ReLU is" in msg
    assert "not supported yet" not in msg
