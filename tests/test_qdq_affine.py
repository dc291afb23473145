"""Float scales and zero points (issue 18 item 3): onnxruntime ``quantize_static`` models.

The models are built here with onnxruntime's own ``quantize_static`` (a calibration data reader,
QDQ format; per tensor and per channel; uint8 and int8 activations) and onnxruntime is the oracle.
The requantisation is checked against two references written here, which import nothing from
aieflow: the exact rational result (``fractions.Fraction``) and the integer multiplier + shift.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import aieflow
from aieflow.errors import AieflowError
from aieflow.model_zoo import onnx_float_mlp

ort = pytest.importorskip("onnxruntime")
quant = pytest.importorskip("onnxruntime.quantization")


# ----------------------------------------------------------------------------- references


def ref_round_half_even(num: int, den: int) -> int:
    """round(num / den), ties to even, for Python ints (den > 0)."""
    q, r = divmod(num, den)
    if 2 * r > den or (2 * r == den and q % 2):
        q += 1
    return q


def ref_exact(acc: int, s_in: float, s_w: float, s_out: float, zp: int, lo: int, hi: int) -> tuple[int, Fraction]:
    """The correctly rounded requantisation (QuantizeLinear of the exact real value) and the
    distance of the rational value from the nearest rounding tie."""
    v = acc * Fraction(s_in) * Fraction(s_w) / Fraction(s_out)
    q = ref_round_half_even(v.numerator, v.denominator)
    tie_dist = abs(v - (v.numerator // v.denominator) - Fraction(1, 2))
    return min(max(q + zp, lo), hi), tie_dist


def ref_integer(acc: int, m: int, shift: int, zp: int, lo: int, hi: int) -> int:
    """The kernel's integer arithmetic: int32 lanes, product, SRS (half to even) to int32, + zp, saturate."""
    a = min(max(acc, -(1 << 31)), (1 << 31) - 1)
    r = ref_round_half_even(a * m, 1 << shift)
    r = min(max(r, -(1 << 31)), (1 << 31) - 1)
    return min(max(r + zp, lo), hi)


# ----------------------------------------------------------------------------- models


def float_mlp(dims, seed: int, path) -> str:
    onnx.save(onnx_float_mlp(dims, seed), str(path))
    return str(path)


class Reader(quant.CalibrationDataReader):
    def __init__(self, shape, seed: int):
        rng = np.random.default_rng(seed)
        self.batches = iter([{"x": rng.normal(size=(16, *shape)).astype(np.float32)} for _ in range(8)])

    def get_next(self):
        return next(self.batches, None)


def quantised(float_path: str, out, shape, per_channel: bool, act: str) -> str:
    quant.quantize_static(
        float_path, str(out), Reader(shape, 1), quant_format=quant.QuantFormat.QDQ, per_channel=per_channel,
        activation_type=quant.QuantType.QUInt8 if act == "uint8" else quant.QuantType.QInt8,
        weight_type=quant.QuantType.QInt8)
    return str(out)


def ort_run(path: str, x: np.ndarray) -> np.ndarray:
    return ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]


def out_scale_zp(path: str) -> tuple[float, int]:
    m = onnx.load(path)
    out = m.graph.output[0].name
    dq = next(n for n in m.graph.node if n.output[0] == out and n.op_type == "DequantizeLinear")
    init = {i.name: numpy_helper.to_array(i) for i in m.graph.initializer}
    return float(init[dq.input[1]]), int(init[dq.input[2]])


def sample_inputs(path: str, n: int, features: int, seed: int) -> np.ndarray:
    """Gaussian samples, far-out values, zeros, and exact ties of the input quantiser."""
    rng = np.random.default_rng(seed)
    m = onnx.load(path)
    init = {i.name: numpy_helper.to_array(i) for i in m.graph.initializer}
    s = float(init["x_scale"])
    ties = ((rng.integers(-140, 140, size=(n // 4, features)) + 0.5) * np.float64(s)).astype(np.float32)
    return np.concatenate([rng.normal(size=(n // 2, features)).astype(np.float32) * 1.5, ties,
                           np.zeros((4, features), np.float32), np.full((4, features), 1e4, np.float32),
                           np.full((4, features), -1e4, np.float32)])


# ----------------------------------------------------------------------------- requantisation


@pytest.mark.parametrize("seed", range(4))
def test_requant_equals_references(seed):
    """numerics/requant: equal to the integer reference everywhere; equal to the exact rational
    result wherever that lies farther than the tie window from a tie; random, tie and edge accs."""
    from aieflow.numerics import requant

    rng = np.random.default_rng(seed)
    n = 8
    s_in = float(np.float32(rng.uniform(1e-3, 5e-2)))
    s_w = [float(np.float32(v)) for v in rng.uniform(1e-3, 1e-2, n)]
    s_out = float(np.float32(rng.uniform(1e-3, 5e-2)))
    zp, lo, hi = int(rng.integers(0, 256)), 0, 255
    ratios = [Fraction(s_in) * Fraction(w) / Fraction(s_out) for w in s_w]
    mult, shift = requant.choose(requant.ratios(s_in, tuple(s_w), s_out), 59)
    assert all(0 < int(m) < 1 << 31 for m in mult) and 0 <= shift <= 59
    for m, r in zip(mult, ratios, strict=True):
        assert abs(Fraction(int(m), 1 << shift) - r) <= Fraction(1, 1 << (shift + 1))  # correctly rounded
    accs = [int(v) for v in rng.integers(-(1 << 24), 1 << 24, size=400)]
    accs += [0, 1, -1, (1 << 31) - 1, -(1 << 31), 1 << 33, -(1 << 33)]
    # values whose rational result is a tie or next to one: acc = (k + 1/2) / M rounded
    for c in range(n):
        for k in rng.integers(-300, 300, size=20):
            a = round((Fraction(int(k)) + Fraction(1, 2)) / ratios[c])
            accs += [a - 1, a, a + 1]
    acc = np.array(accs, dtype=np.int64)
    got = requant.apply(np.repeat(acc[:, None], n, axis=1), mult, shift, zp, lo, hi)
    small = 1 << 25  # accumulators of real layers; beyond, only the integer reference is compared
    window = Fraction(int(np.max(np.abs(acc[np.abs(acc) < small]))), 1 << (shift + 1))
    assert window < Fraction(1, 1 << 6)
    checked = 0
    for i, a in enumerate(accs):
        for c in range(n):
            assert got[i, c] == ref_integer(a, int(mult[c]), shift, zp, lo, hi), (a, c)
            exact, dist = ref_exact(a, s_in, s_w[c], s_out, zp, lo, hi)
            if abs(a) < small and dist > window:
                assert got[i, c] == exact, (a, c)
                checked += 1
    assert checked > 0.9 * len(accs) * n


def test_requant_rounds_exact_ties_to_even_after_zero_point():
    """The zero point is added after rounding (QuantizeLinear): with an odd zero point a tie still
    goes to the even integer before it, then the zero point is added."""
    from aieflow.numerics import requant

    # M = 1/2 exactly: acc 1 -> 0.5 -> 0 (even), acc 3 -> 1.5 -> 2
    mult, shift = requant.choose([Fraction(1, 2)], 59)
    got = requant.apply(np.array([[1], [3], [-1], [-3], [5]]), mult, shift, 3, 0, 255)
    assert got.ravel().tolist() == [3 + 0, 3 + 2, 3 + 0, 3 - 2, 3 + 2]
    relu = requant.apply(np.array([[-9]]), mult, shift, 3, 0, 255, relu=True)
    assert relu.item() == 3


# ----------------------------------------------------------------------------- end to end


@pytest.fixture(scope="module")
def mlp_float(tmp_path_factory):
    return float_mlp([16, 64, 32, 5], 0, tmp_path_factory.mktemp("mlp") / "f.onnx")


@pytest.mark.parametrize("per_channel", [False, True], ids=["per_tensor", "per_channel"])
@pytest.mark.parametrize("act", ["uint8", "int8"])
def test_mlp_matches_onnxruntime(mlp_float, tmp_path, per_channel, act):
    path = quantised(mlp_float, tmp_path / "q.onnx", (16,), per_channel, act)
    x = sample_inputs(path, 4000, 16, 2)
    y = aieflow.emulate(path, device="vek280").predict(x)
    r = ort_run(path, x)
    s, zp = out_scale_zp(path)
    lsb = np.abs(np.rint((y.astype(np.float64) - r) / s))
    assert y.dtype == np.float32 and y.shape == r.shape
    assert lsb.max() <= 1
    assert (lsb == 0).mean() >= 0.99
    # the graph input quantiser is QuantizeLinear's own (float32 division, half to even)
    d = aieflow.emulate(path, device="vek280")
    init = {i.name: numpy_helper.to_array(i) for i in onnx.load(path).graph.initializer}
    sx, zx = np.float32(init["x_scale"]), int(init["x_zero_point"])
    lo, hi = (0, 255) if act == "uint8" else (-128, 127)
    want = np.clip(np.rint(x / sx).astype(np.int64) + zx, lo, hi)
    assert np.array_equal(d.quantise_input(x), want)


def test_input_quantiser_equals_onnxruntime(tmp_path):
    """quantise_input against onnxruntime's QuantizeLinear node itself, ties included."""
    rng = np.random.default_rng(5)
    s, z = np.float32(0.0237), np.uint8(119)
    g = helper.make_graph(
        [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"])], "q",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
        [helper.make_tensor_value_info("q", TensorProto.UINT8, ["N", 4])],
        [numpy_helper.from_array(np.array(s), "s"), numpy_helper.from_array(np.array(z), "z")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    x = np.concatenate([rng.normal(size=(500, 4)) * 3, (rng.integers(-200, 200, (500, 4)) + 0.5) * float(s)])
    x = x.astype(np.float32)
    want = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    from aieflow.numerics.requant import affine_quantize
    from aieflow.numerics.types import AffineType

    t = AffineType(8, False, (float(s),), int(z))
    assert np.array_equal(affine_quantize(x, t), want.astype(np.int64))
    # the emulator's float32 codes (predict) are the same integers, saturation with +-inf included
    xf = np.concatenate([x, np.array([[np.inf, -np.inf, 1e30, -1e30]], np.float32)])
    wf = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": xf})[0]
    got = affine_quantize(xf, t, float_codes=True)
    assert got.dtype == np.float32 and np.array_equal(got, wf.astype(np.float32))


@pytest.mark.parametrize(("device", "per_channel", "act", "config"), [
    ("vek280", True, "uint8", None),
    ("vek280", False, "int8", {"layers": {"fc1": {"parallelism": {"cas_len": 2, "cas_num": 2}}}}),
    ("vck190", True, "int8", None),
    ("vek385", False, "uint8", None),
])
def test_mlp_verify_bit_exact(mlp_float, tmp_path, device, per_channel, act, config):
    """The generated kernels (DenseSingleRq / DenseLastRq) run on x86 bit-exactly to predict."""
    path = quantised(mlp_float, tmp_path / "q.onnx", (16,), per_channel, act)
    x = sample_inputs(path, 64, 16, 3)
    d = aieflow.compile(path, device=device, example_input=x, config=config)
    graph_h = d.files["src/graph.h"]
    assert "DenseSingleRq" in graph_h or "DenseLastRq" in graph_h
    if config:
        assert "DenseLastRq" in graph_h and "DenseFirst" in graph_h
    r = d.verify(x)
    assert r.mismatches == 0 and r.values == x.shape[0] * 5
    np.testing.assert_array_equal(d.predict(x), aieflow.emulate(path, device=device).predict(x))


def test_affine_design_saves_and_loads(mlp_float, tmp_path):
    path = quantised(mlp_float, tmp_path / "q.onnx", (16,), True, "uint8")
    x = sample_inputs(path, 64, 16, 4)
    d = aieflow.compile(path, device="vek280", example_input=x)
    back = aieflow.design.load(d.save(tmp_path / "design"))
    assert back.input_type == d.input_type and back.output_type == d.output_type
    np.testing.assert_array_equal(back.predict(x), d.predict(x))


def test_padded_average_pool_with_float_scales_is_refused_by_name(tmp_path):
    """A quantize_static CNN maps (tests/test_qdq_affine_cnn.py); a padded AveragePool on float-scale
    codes does not: refused, naming the layer and what to change."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.normal(0, 0.3, (4, 1, 3, 3)).astype(np.float32), "cw"),
             numpy_helper.from_array(np.zeros(4, np.float32), "cb"),
             numpy_helper.from_array(rng.normal(0, 0.2, (64, 3)).astype(np.float32), "dw"),
             numpy_helper.from_array(np.zeros(3, np.float32), "db")]
    nodes = [helper.make_node("Conv", ["x", "cw", "cb"], ["c"], pads=[1, 1, 1, 1], name="conv"),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("AveragePool", ["r"], ["p"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1],
                              name="pool"),
             helper.make_node("Flatten", ["p"], ["f"], name="flat"),
             helper.make_node("Gemm", ["f", "dw", "db"], ["y"], name="fc")]
    g = helper.make_graph(nodes, "cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 1, 8, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, str(tmp_path / "f.onnx"))
    path = quantised(str(tmp_path / "f.onnx"), tmp_path / "q.onnx", (1, 8, 8), True, "uint8")
    with pytest.raises(AieflowError) as e:
        aieflow.compile(path, device="vek280", example_input=np.zeros((8, 1, 8, 8), np.float32))
    text = str(e.value)
    assert "pool" in text and "padding" in text


def test_weight_zero_point_is_refused(mlp_float, tmp_path):
    """uint8 (asymmetric) weights would need a data-dependent correction: refused with the fix."""
    quant.quantize_static(mlp_float, str(tmp_path / "q.onnx"), Reader((16,), 1), quant_format=quant.QuantFormat.QDQ,
                          activation_type=quant.QuantType.QUInt8, weight_type=quant.QuantType.QUInt8)
    with pytest.raises(AieflowError, match="zero point.*symmetric|symmetric"):
        aieflow.emulate(str(tmp_path / "q.onnx"), device="vek280")


# ----------------------------------------------------------------------------- the emulator's float path


def ref_layer(x, w, b, mult, shift, zp, lo, hi, relu):
    """The layer in Python integers: exact accumulation, then the kernel's requantisation
    (ref_integer) per element, then the ReLU the model keeps (real 0 is code zp)."""
    acc = x.astype(object) @ w.astype(object) + b.astype(object)
    out = np.empty(acc.shape, dtype=np.int64)
    for (i, n), a in np.ndenumerate(acc):
        q = ref_integer(int(a), int(mult[n]), shift, zp, lo, hi)
        out[i, n] = max(q, zp) if relu else q
    return out


def _tie_case(rng, k: int, rows: int, n: int = 6):
    """A uint8-input layer of ``k`` inputs and ``n`` outputs for the float paths' reference tests:
    ratios 1/2 and 3/8 (exact ties) and rational float32 ratios, random int8 weights with row 0 all
    ones, ``rows`` random codes with their edge values, then rows whose accumulator (x[0] + b) puts
    each output's rational result on a tie and one step either side.  Returns w, b, x, the
    multipliers, shifts and the tie accumulators."""
    from aieflow.numerics import requant

    ratios = [Fraction(1, 2), Fraction(3, 8)] + [Fraction(float(np.float32(v))) for v in rng.uniform(1e-3, 5e-3, n - 2)]
    mult, shift = requant.choose(ratios, 59)
    w = rng.integers(-128, 128, size=(k, n))
    w[0] = 1  # the tie rows below: acc = x[0] + b
    b = rng.integers(-200, 200, size=n)
    x = rng.integers(0, 256, size=(rows, k))
    x[:4] = [[0], [255], [1], [128]]
    ties = []
    for c, r in enumerate(ratios):  # accumulators whose rational result is a tie, and their neighbours
        for j in range(-3, 130):
            a = round((Fraction(j) + Fraction(1, 2)) / r) - int(b[c])
            ties += [a + d for d in (-1, 0, 1) if 0 <= a + d < 256]
    tie_rows = np.zeros((len(ties), k), dtype=np.int64)
    tie_rows[:, 0] = ties
    return w, b, np.concatenate([x, tie_rows]), mult, shift, ties


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("relu", [False, True])
def test_the_float_path_equals_the_integer_reference(seed, relu):
    """numerics/requant.apply_float (the emulator's path for affine Dense layers) against the
    reference in Python integers: random codes with their edge values, and accumulators on and
    next to rounding ties (ratios 1/2 and 3/8 give exact ties: to even, then the odd zero point;
    the others ties of their rational ratio, one step either side)."""
    from aieflow.numerics import requant

    rng = np.random.default_rng(seed)
    w, b, x, mult, shift, ties = _tie_case(rng, 24, 200)
    zp = int(rng.integers(0, 128)) | 1  # odd: adding it before rounding would move the ties
    owner = type("Layer", (), {})()
    ops = requant.float_operands(owner, w, b, mult, shift)
    got = requant.apply_float(x, ops, zp, 0, 255, relu=relu)
    assert got is not None and got.dtype == np.float64
    want = ref_layer(x, w, b, mult, shift, zp, 0, 255, relu)
    np.testing.assert_array_equal(got.astype(np.int64), want)
    assert 0 < np.mean((want > 0) & (want < 255)) and len(ties) > 100  # not all saturated
    assert requant.float_operands(owner, w, b, mult, shift) is ops  # kept for the layer
    assert requant.float_operands(owner, w.copy(), b, mult, shift) is not ops  # other weights: rebuilt


def test_the_float_path_next_to_2_pow_53_and_beyond():
    """A multiplier near 2^31 and accumulators near 2^22: acc * m just below 2^53 stays on the
    float path and exact; a larger input is left to the integer path (None)."""
    from aieflow.numerics import requant

    mult, shift = requant.choose([Fraction(2**31 - 3, 2**31), Fraction(5, 7)], 59)
    assert int(mult.max()) > 1 << 30
    w = np.array([[127, -127]])
    b = np.array([0, 3])
    limit = ((1 << 53) // int(mult.max())) // 127  # the largest |x| whose acc * m stays below 2^53
    x = np.array([[limit - 1], [-(limit - 1)], [limit // 2], [1], [0]])
    owner = type("Layer", (), {})()
    ops = requant.float_operands(owner, w, b, mult, shift)
    lo, hi = -(1 << 31), (1 << 31) - 1
    got = requant.apply_float(x, ops, 0, lo, hi)
    assert got is not None
    np.testing.assert_array_equal(got.astype(np.int64), ref_layer(x, w, b, mult, shift, 0, lo, hi, False))
    assert requant.apply_float(np.array([[limit + 1]]), ops, 0, lo, hi) is None
    assert requant.apply_float(np.array([[1 << 24]]), ops, 0, lo, hi, acc_bits=32) is None  # acc >= 2^31


def test_the_float_path_with_accumulators_beyond_float32():
    """A small shift limit keeps the multipliers small: accumulators between 2^24 and 2^31 stay
    on the float path (float64 holds them and their products exactly) and equal the reference;
    2^31 and beyond (int32 saturation in the kernel) go to the integer path."""
    from aieflow.numerics import requant

    mult, shift = requant.choose([Fraction(1, 1000), Fraction(1, 3), Fraction(7, 5)], 20)
    assert shift == 20 and int(mult.max()) < 1 << 21
    rng = np.random.default_rng(5)
    w = np.array([[127, -127, 3], [-128, 1, 127]])
    b = np.array([1 << 20, -(1 << 20), 12345])
    x = rng.integers(-(1 << 22), 1 << 22, size=(500, 2))
    x[:3] = [[(1 << 22) - 1, -(1 << 22)], [1 << 20, 1 << 20], [0, 0]]
    owner = type("Layer", (), {})()
    ops = requant.float_operands(owner, w, b, mult, shift)
    lo, hi = -(1 << 31), (1 << 31) - 1
    acc = x.astype(object) @ w.astype(object) + b.astype(object)
    assert max(abs(int(a)) for a in acc.ravel()) > 1 << 29  # well beyond float32's 2^24
    got = requant.apply_float(x, ops, -7, lo, hi)
    assert got is not None
    np.testing.assert_array_equal(got.astype(np.int64), ref_layer(x, w, b, mult, shift, -7, lo, hi, False))
    assert requant.apply_float(np.array([[1 << 23, 0]]), ops, 0, lo, hi) is None  # 2 x 127 x 2^23 + b >= 2^31


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("relu", [False, True])
def test_the_float32_path_equals_the_integer_reference(seed, relu):
    """numerics/requant.apply_float32 (sgemm accumulation, float64 requantisation) against the
    reference in Python integers: random codes with their edge values, the exact ties of ratios
    1/2 and 3/8 and the near-ties of rational ratios, an odd zero point."""
    from aieflow.numerics import requant

    rng = np.random.default_rng(10 + seed)
    w, b, x, mult, shift, ties = _tie_case(rng, 40, 300)
    zp = int(rng.integers(0, 128)) | 1
    ops = requant.float_operands(type("Layer", (), {})(), w, b, mult, shift)
    for xin in (x, x.astype(np.float32), x.astype(np.float64)):  # int64 codes and the float carriers
        got = requant.apply_float32(xin, ops, 255, zp, 0, 255, relu=relu)
        assert got is not None and got.dtype == np.float32
        np.testing.assert_array_equal(got.astype(np.int64), ref_layer(x, w, b, mult, shift, zp, 0, 255, relu))
    assert len(ties) > 100


def test_the_float32_path_next_to_2_pow_24_and_beyond():
    """Accumulators just below 2^24 (odd ones: float32's last exact integers) stay on the float32
    path and equal the integer reference with a ratio that shows every unit of the accumulator; a
    bound of 2^24 or more is left to the float64 path (None), as is acc * m reaching 2^53."""
    from aieflow.numerics import requant

    mult, shift = requant.choose([Fraction(1), Fraction(1, 3)], 28)  # m <= 2^28: acc * m < 2^52
    w = np.array([[127, -127], [1, 1]])
    b = np.array([0, 3])
    x_max = ((1 << 24) - 4) // 128  # acc_max = x_max * 128 + 3 < 2^24
    rng = np.random.default_rng(3)
    x = np.stack([rng.integers(-x_max, x_max + 1, 400), rng.integers(-1, 2, 400)], axis=1)
    x[:4] = [[x_max, 1], [-x_max, -1], [x_max, 0], [x_max - 1, 1]]
    ops = requant.float_operands(type("Layer", (), {})(), w, b, mult, shift)
    lo, hi = -(1 << 23), (1 << 23) - 1
    got = requant.apply_float32(x, ops, x_max, 0, lo, hi)
    assert got is not None
    want = ref_layer(x, w, b, mult, shift, 0, lo, hi, False)
    assert np.abs(want).max() > 1 << 21 and (want % 2 != 0).any()  # large, odd results: every bit counts
    np.testing.assert_array_equal(got.astype(np.int64), want)
    assert requant.apply_float32(x, ops, x_max + 1, 0, lo, hi) is None  # 2^24 + ...: float32 would round
    big, bshift = requant.choose([Fraction(2**31 - 3, 2**31)], 59)
    ops_big = requant.float_operands(type("Layer", (), {})(), np.array([[127]]), np.array([0]), big, bshift)
    assert requant.apply_float32(np.array([[1]]), ops_big, (1 << 22) // 127 + 1, 0, lo, hi) is None  # acc*m >= 2^53


@pytest.mark.parametrize("per_channel", [False, True])
def test_the_float32_path_with_the_bias_row_next_to_2_pow_24(per_channel):
    """apply_float32 with fewer inputs than outputs (the bias joins the sgemm as one more weight
    row) and, per tensor, one multiplier for every channel (a scalar scaling): accumulators just
    below 2^24 with the bias near 2^23 in them, ties of the rational result (exact ones for a ratio of 1/1024) and their neighbours,
    an odd zero point, against the integer reference; a bound of 2^24 is left to float64 (None)."""
    from aieflow.numerics import requant

    rng = np.random.default_rng(21)
    k, n = 3, 8
    # s_x s_w / s_y of float32 scales: a multiplier with more significant bits than float32 holds
    composite = Fraction(float(np.float32(0.0123))) * Fraction(float(np.float32(0.0047))) / Fraction(float(np.float32(0.0391)))
    ratios = [composite] * n if not per_channel else \
        [Fraction(1, 1024), composite] + [Fraction(float(np.float32(v))) for v in rng.uniform(1e-3, 2e-3, n - 2)]
    mult, shift = requant.choose(ratios, 37)  # m < 2^29: acc * m < 2^53
    assert int(mult.max()) < 1 << 29
    w = rng.choice([-127, 127, 1, -1], size=(k, n))
    w[0] = 1  # tie rows: acc = x[0] + b
    w[1:, :2] = 127  # columns 0 and 1 reach the bound: +-x_max in every input, +-(2^23 - 1) bias
    b = rng.integers(-(1 << 23), 1 << 23, size=n)
    b[:2] = [(1 << 23) - 1, -(1 << 23) + 1]
    b_max = int(np.abs(b).max())
    col_max = int(np.abs(w).sum(axis=0).max())
    x_max = ((1 << 24) - 1 - b_max) // col_max  # acc_max = x_max * col_max + b_max < 2^24
    x = rng.integers(-x_max, x_max + 1, size=(300, k))
    x[:4] = [[x_max] * k, [-x_max] * k, [0] * k, [x_max, -x_max, x_max]]
    ties = []
    for c, r in enumerate(ratios):  # acc = x0 + b_c on or next to a tie of the rational result, one step either side
        j0 = round(int(b[c]) * r)
        for j in range(j0 - 40, j0 + 40):
            a = round((Fraction(j) + Fraction(1, 2)) / r) - int(b[c])
            ties += [a + d for d in (-1, 0, 1) if abs(a + d) <= x_max]
    tie_rows = np.zeros((len(ties), k), dtype=np.int64)
    tie_rows[:, 0] = ties
    x = np.concatenate([x, tie_rows])
    ops = requant.float_operands(type("Layer", (), {})(), w, b, mult, shift)
    assert (ops.s_scalar is None) == per_channel and len(ties) > 100
    m1 = int(mult[1])  # the composite ratio's multiplier: float32 would round it
    assert m1.bit_length() - (m1 & -m1).bit_length() >= 24
    zp = 7
    lo, hi = -(1 << 23), (1 << 23) - 1
    want = ref_layer(x, w, b, mult, shift, zp, lo, hi, False)
    for xin in (x, x.astype(np.float32)):
        got = requant.apply_float32(xin, ops, x_max, zp, lo, hi)
        assert got is not None and got.dtype == np.float32
        np.testing.assert_array_equal(got.astype(np.int64), want)
    acc = x.astype(object) @ w.astype(object) + b.astype(object)
    assert max(abs(int(a)) for a in acc.ravel()) > (1 << 24) - (1 << 20)  # next to float32's last integers
    assert requant.apply_float32(x, ops, x_max + 1, zp, lo, hi) is None  # the bound reaches 2^24
