"""bf16 CNNs on AIE-ML (vek280) and AIE-MLv2 (vek385), the stream mapping (issue 24, item 4).

The reference below imports nothing from aieflow: bf16 rounding is written here on the float32 bit
pattern (round to nearest, ties to even), a convolution is a loop over the patch elements in PyTorch
``unfold`` order (c, i, j) accumulated in numpy float32 from the bias (every product of two bf16
values is exact in float32, every addition rounded to float32), the sum rounded to bf16, then the
ReLU; max pooling a maximum, average pooling a float32 row-major sum divided by the count and
rounded to bf16; a residual add one float32 add rounded to bf16.  The emulator (``predict``) must
equal it bit for bit; x86 verify runs the generated kernels against the emulator.
"""

from __future__ import annotations

import shutil

import numpy as np
import pytest

import aieflow
from aieflow.errors import ConfigError, PlanError

torch = pytest.importorskip("torch")
nn = torch.nn

needs_cxx = pytest.mark.skipif(shutil.which("g++") is None, reason="g++ not found: verify builds C++20 with g++")
ONE = {"precision": "bf16", "cnn": {"replicas": 1}}


# ------------------------------------------------------------------ the independent reference


def bf16(x) -> np.ndarray:
    """float32 -> nearest bf16 (ties to even), as float32; finite inputs."""
    u = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    r = (u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000
    return r.astype(np.uint32).view(np.float32)


def ref_conv(x, w, b, stride, pad, relu):
    """x (N, C, H, W) bf16 values, w (O, C, kh, kw), b (O,): float32 accumulation in (c, i, j) order."""
    w, b = bf16(w), bf16(b)
    n, c, h, wd = x.shape
    o, _, kh, kw = w.shape
    xp = np.zeros((n, c, h + 2 * pad, wd + 2 * pad), np.float32)
    xp[:, :, pad:pad + h, pad:pad + wd] = x
    oh, ow = (h + 2 * pad - kh) // stride + 1, (wd + 2 * pad - kw) // stride + 1
    acc = np.broadcast_to(b[None, :, None, None], (n, o, oh, ow)).astype(np.float32).copy()
    for ci in range(c):
        for i in range(kh):
            for j in range(kw):
                win = xp[:, ci, i:i + stride * oh:stride, j:j + stride * ow:stride]  # (n, oh, ow)
                acc = (acc + (win[:, None] * w[None, :, ci, i, j, None, None]).astype(np.float32)).astype(np.float32)
    y = bf16(acc)
    return np.maximum(y, np.float32(0)) if relu else y


def ref_maxpool(x, k):
    n, c, h, w = x.shape
    return x.reshape(n, c, h // k, k, w // k, k).max(axis=(3, 5))


def ref_avgpool(x, k):
    n, c, h, w = x.shape
    v = x.reshape(n, c, h // k, k, w // k, k)
    acc = v[:, :, :, 0, :, 0].copy()
    for i in range(k):
        for j in range(k):
            if i or j:
                acc = (acc + v[:, :, :, i, :, j]).astype(np.float32)
    return bf16(acc / np.float32(k * k))


def ref_dense(x, w, b):
    """x (N, K) bf16 values, w (O, K): float32 accumulation in increasing k from the bias, bf16 result."""
    w, b = bf16(w), bf16(b)
    acc = np.broadcast_to(b, (x.shape[0], w.shape[0])).astype(np.float32).copy()
    for k in range(x.shape[1]):
        acc = (acc + (x[:, k, None] * w[None, :, k]).astype(np.float32)).astype(np.float32)
    return bf16(acc)


def ref_tanh(y):
    """tanh of bf16 values: float64 tanh, rounded to float32, then to bf16 (docs/numerics.md's bf16
    activation definition)."""
    return bf16(np.tanh(np.asarray(y, np.float64)).astype(np.float32))


def ref_prelu(y, slope):
    """y >= 0: y, else the float32 product with the bf16-rounded channel slope, rounded to bf16."""
    s = bf16(np.asarray(slope, np.float32))[None, :, None, None]
    return np.where(y >= 0, y, bf16((y * s).astype(np.float32))).astype(np.float32)


def _p(t) -> np.ndarray:
    return t.detach().numpy().astype(np.float32)


# ------------------------------------------------------------------ models


class Classifier(nn.Module):
    """conv + ReLU, max pool, depthwise conv + ReLU, pointwise conv, average pool, flatten, Dense."""

    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(3, 8, 3, padding=1)
        self.p1 = nn.MaxPool2d(2)
        self.dw = nn.Conv2d(8, 8, 3, padding=1, groups=8)
        self.pw = nn.Conv2d(8, 8, 1)
        self.p2 = nn.AvgPool2d(2)
        self.fc = nn.Linear(8 * 2 * 2, 5)

    def forward(self, x):
        y = self.p1(torch.relu(self.c1(x)))
        y = self.p2(self.pw(torch.relu(self.dw(y))))
        return self.fc(y.flatten(1))


class Residual(nn.Module):
    """Two residual blocks (a one-conv branch, a two-conv branch with a ReLU after the add), a Dense head."""

    def __init__(self):
        super().__init__()
        self.c0 = nn.Conv2d(3, 8, 3, padding=1)
        self.c1 = nn.Conv2d(8, 8, 3, padding=1)
        self.c2, self.c3 = nn.Conv2d(8, 8, 3, padding=1), nn.Conv2d(8, 8, 1)
        self.fc = nn.Linear(8 * 6 * 6, 4)

    def forward(self, x):
        y = torch.relu(self.c0(x))
        z = self.c1(y) + y
        w = torch.relu(self.c3(torch.relu(self.c2(z))) + z)
        return self.fc(w.flatten(1))


def ref_classifier(m: Classifier, x: np.ndarray) -> np.ndarray:
    y = ref_maxpool(ref_conv(x, _p(m.c1.weight), _p(m.c1.bias), 1, 1, True), 2)
    # depthwise: the block-diagonal dense weight (zeros between groups add exact zeros)
    wd = np.zeros((8, 8, 3, 3), np.float32)
    for g in range(8):
        wd[g, g] = _p(m.dw.weight)[g, 0]
    y = ref_conv(y, wd, _p(m.dw.bias), 1, 1, True)
    y = ref_avgpool(ref_conv(y, _p(m.pw.weight), _p(m.pw.bias), 1, 0, False), 2)
    return ref_dense(y.reshape(y.shape[0], -1), _p(m.fc.weight), _p(m.fc.bias))


def ref_residual(m: Residual, x: np.ndarray) -> np.ndarray:
    y = ref_conv(x, _p(m.c0.weight), _p(m.c0.bias), 1, 1, True)
    z = bf16(ref_conv(y, _p(m.c1.weight), _p(m.c1.bias), 1, 1, False) + y)
    c = ref_conv(ref_conv(z, _p(m.c2.weight), _p(m.c2.bias), 1, 1, True), _p(m.c3.weight), _p(m.c3.bias), 1, 0, False)
    w = np.maximum(bf16(c + z), np.float32(0))
    return ref_dense(w.reshape(w.shape[0], -1), _p(m.fc.weight), _p(m.fc.bias))


class TanhPrelu(nn.Module):
    """conv + Tanh, conv + PReLU (per channel), conv + PReLU (one slope), a Dense head."""

    def __init__(self):
        super().__init__()
        self.c1, self.c2, self.c3 = nn.Conv2d(3, 8, 3, padding=1), nn.Conv2d(8, 8, 3, padding=1), nn.Conv2d(8, 4, 1)
        self.a1, self.a2, self.a3 = nn.Tanh(), nn.PReLU(8), nn.PReLU()
        with torch.no_grad():  # slopes off the bf16 grid: their rounding shows
            self.a2.weight.copy_(torch.linspace(-0.7, 0.9, 8) + 1e-3)
            self.a3.weight.fill_(0.3)
        self.fc = nn.Linear(4 * 8 * 8, 5)

    def forward(self, x):
        y = self.a3(self.c3(self.a2(self.c2(self.a1(self.c1(x))))))
        return self.fc(y.flatten(1))


def ref_tanh_prelu(m: TanhPrelu, x: np.ndarray, head=True) -> np.ndarray:
    y = ref_tanh(ref_conv(x, _p(m.c1.weight), _p(m.c1.bias), 1, 1, False))
    y = ref_prelu(ref_conv(y, _p(m.c2.weight), _p(m.c2.bias), 1, 1, False), _p(m.a2.weight))
    y = ref_prelu(ref_conv(y, _p(m.c3.weight), _p(m.c3.bias), 1, 0, False), np.repeat(_p(m.a3.weight), 4))
    return ref_dense(y.reshape(y.shape[0], -1), _p(m.fc.weight), _p(m.fc.bias)) if head else y


def _frames(n, seed, hw=8) -> np.ndarray:
    return bf16(np.random.default_rng(seed).standard_normal((n, 3, hw, hw)).astype(np.float32))


def _model(cls, seed=0):
    torch.manual_seed(seed)
    return cls().eval()


# ------------------------------------------------------------------ tests


def test_reference_rounding_edges():
    """The test's own bf16 rounding: ties to even both ways, carries into the exponent, signs."""
    vals = np.array([1.0 + 2**-8, 1.0 + 3 * 2**-8, 1.0 + 2**-8 + 2**-20, -(1.0 + 2**-8), 2 - 2**-9, 0.0, -0.0],
                    np.float32)
    want = np.array([1.0, 1.0 + 2**-6, 1.0 + 2**-7, -1.0, 2.0, 0.0, -0.0], np.float32)
    np.testing.assert_array_equal(bf16(vals).view(np.uint32), want.view(np.uint32))


@pytest.mark.parametrize("device", ["vek280", "vek385"])
def test_classifier_predict_equals_reference_and_pytorch(device):
    m = _model(Classifier)
    cal = _frames(32, 1)
    d = aieflow.compile(m, device, cal[:1], calibration=cal, config=ONE)
    x = np.concatenate([_frames(6, 2), _frames(2, 3) * np.float32(8.0)])  # bf16 values (x8 is exact)
    got = d.predict(x)
    want = ref_classifier(m, x)
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
    with torch.no_grad():
        fl = m(torch.from_numpy(x)).numpy()
    # bf16 keeps 8 significant bits (relative step 2^-8 = 0.4 %); a few layers of rounding stay within 3 %
    # of the output range
    assert np.abs(got - fl).max() < 0.03 * np.abs(fl).max()


def test_residual_predict_equals_reference_and_pytorch():
    m = _model(Residual)
    cal = _frames(32, 1, hw=6)
    d = aieflow.compile(m, "vek280", cal[:1], calibration=cal, config=ONE)
    x = _frames(6, 4, hw=6)
    got = d.predict(x)
    np.testing.assert_array_equal(got.view(np.uint32), ref_residual(m, x).view(np.uint32))
    with torch.no_grad():
        fl = m(torch.from_numpy(x)).numpy()
    assert np.abs(got - fl).max() < 0.03 * np.abs(fl).max()


def test_design_uses_bf16_shapes_and_rate():
    m = _model(Classifier)
    cal = _frames(8, 1)
    d = aieflow.compile(m, "vek280", cal[:1], calibration=cal, config=ONE)
    j = d.to_json()
    convs = [lay for lay in j["plan"]["layers"] if lay["kind"] == "conv"]
    assert convs and all(lay["mmul"] == [4, 8, 4] for lay in convs)  # UG1529 bf16 4x8x4 (devices.py)
    layers_h = d.files["src/layers.h"]
    assert "using TA = bfloat16;" in layers_h and "using ACC = accfloat;" in layers_h
    assert "using TW = bfloat16;" in layers_h and "using TO = bfloat16;" in layers_h
    # the cycle model at the catalog's bf16 rate (128 MACs per cycle on AIE-ML), by hand for c1 (8 x 1
    # tiles, one output channel each): 16 pixel blocks x 1 channel block x 4 k blocks (27 -> 32) of
    # 4 x 8 x 4 MACs / 128 = 64, gather 16 x 4 x 27 = 1728, call 200, epilogue 64 x 0.25 = 16
    c1 = next(s for s in j["performance"]["stages"] if s["stage"] == "c1")
    assert c1["detail"].endswith(f"{64 + 1728 + 200 + 16:,} cycles"), c1["detail"]
    # 128-bit PLIO words carry 8 bf16 values
    assert len(d.files["data/in0.txt"].splitlines()[0].split()) == 8


@needs_cxx
@pytest.mark.parametrize("device", ["vek280", "vek385"])
def test_classifier_verifies_bit_exact_on_x86(device):
    m = _model(Classifier)
    cal = _frames(16, 1)
    d = aieflow.compile(m, device, cal[:1], calibration=cal, config=ONE)
    v = d.verify(np.concatenate([_frames(2, 7), _frames(1, 8) * np.float32(16.0)]))
    assert v.ok and v.mismatches == 0 and v.values == 3 * 5


@needs_cxx
def test_residual_verifies_bit_exact_on_x86():
    m = _model(Residual)
    cal = _frames(16, 1, hw=6)
    d = aieflow.compile(m, "vek280", cal[:1], calibration=cal, config=ONE)
    v = d.verify(_frames(3, 9, hw=6))
    assert v.ok and v.mismatches == 0 and v.values == 3 * 4


def test_refusals_name_the_layer():
    cal = _frames(4, 1)
    with pytest.raises(ConfigError, match="bf16 is not available on VCK190") as e:
        aieflow.compile(_model(Classifier), "vck190", cal[:1], calibration=cal, config={"precision": "bf16"})
    assert e.value.layer == "c1"
    with pytest.raises(PlanError, match="the thesis mapping has no bf16 kernels") as e:  # rows has them
        aieflow.compile(_model(Classifier), "vek280", cal[:1], calibration=cal,
                        config={"precision": "bf16", "cnn": {"mapping": "thesis"}})
    assert e.value.layer == "c1"
    for reason in ("fp32 design", "aie::mmul<4,2,4>", "float32 values per 128-bit word", "PL tanh", "stream and rows"):
        assert reason in str(e.value), reason  # the refusal names why (issue 24: the PL side is fp32 too)
    # a fused tanh runs in bf16 (below); a tanh table configured for it (an fp32 / fixed-point LUT) is refused
    tanh = nn.Sequential(nn.Conv2d(3, 4, 3), nn.Tanh()).eval()
    with pytest.raises(ConfigError, match="configured tanh .* is for fp32 and fixed point") as e:
        aieflow.compile(tanh, "vek280", cal[:1], calibration=cal,
                        config={"precision": "bf16", "activations": {"tanh": "espcn-thesis"}})
    assert e.value.layer == "0"
    # bilinear upsampling is no longer refused in bf16 (its float kernel: tests/test_resize.py)
    up = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.Upsample(scale_factor=2, mode="bilinear")).eval()
    d = aieflow.compile(up, "vek280", cal[:1], calibration=cal, config={"precision": "bf16"})
    assert d.plan.stages[0].up == (2, 2) and d.plan.stages[0].up_mode == "half_pixel"


@needs_cxx
def test_conv_feature_map_verifies_bit_exact_on_x86():
    """A whole feature map out (1,536 values) from inputs over a wide range, bit for bit.  Mutation
    tried once: the shim's float -> bfloat16 conversion truncating instead of rounding to nearest
    even gives 776 mismatches of 1,536."""
    torch.manual_seed(3)
    m = nn.Sequential(nn.Conv2d(8, 8, 3, padding=1)).eval()
    rng = np.random.default_rng(11)
    # magnitudes over 2^-12 .. 2^12: bf16 products of similar size sum exactly in float32, so only a
    # wide range makes the float32 roundings (and hence the order) show
    x = bf16(rng.standard_normal((3, 8, 8, 8)) * 2.0 ** rng.integers(-12, 13, (3, 8, 8, 8))).astype(np.float32)
    d = aieflow.compile(m, "vek280", x[:1], calibration=x, config=ONE)
    with torch.no_grad():
        w = m[0].weight.numpy()
    np.testing.assert_array_equal(d.predict(x).view(np.uint32),
                                  ref_conv(x, w, _p(m[0].bias), 1, 1, False).view(np.uint32))
    v = d.verify(x)
    assert v.ok and v.mismatches == 0 and v.values == 3 * 8 * 8 * 8


def test_accumulation_order_is_increasing_input_channel():
    """By hand: channels (2^24, 1 + 2^-7, -2^24), weights 1, no bias.  In channel order the float32
    sum is 2^24 + 1.0078125 -> 2^24 + 2 (float32 spacing 2 there), then - 2^24 = 2; any order that
    adds the two large terms first gives 1.0078125."""
    m = nn.Sequential(nn.Conv2d(3, 1, 1, bias=False)).eval()
    with torch.no_grad():
        m[0].weight.fill_(1.0)
    x = np.zeros((1, 3, 2, 2), np.float32)
    x[0, 0], x[0, 1], x[0, 2] = 2.0**24, 1.0 + 2.0**-7, -(2.0**24)
    d = aieflow.compile(m, "vek280", x, calibration=x, config=ONE)
    np.testing.assert_array_equal(d.predict(x), np.full((1, 1, 2, 2), 2.0, np.float32))


# ------------------------------------------------------------------ tanh and PReLU after a bf16 convolution


def _wide(n, seed):
    """Frames over a wide range (x 2^-12 .. x 2^6): tanh's tiny (tanh x = x) and saturated inputs, and
    the table window between them."""
    rng = np.random.default_rng(seed)
    return bf16(rng.standard_normal((n, 3, 8, 8)) * 2.0 ** rng.integers(-12, 7, (n, 3, 8, 8))).astype(np.float32)


def test_reference_tanh_and_prelu_by_hand():
    """The test's own activations on values worked by hand: tanh(2^-10) = 2^-10 (1 - 2^-20 / 3) rounds
    back to 2^-10 in bf16; tanh(20) = 1; -0 keeps its sign; a slope 0.1 is bf16 0.10009765625, times -3
    = -0.30029296875 (float32), which rounds to bf16 -0.30078125 (the nearest of -0.30078125 / -0.2998046875,
    spacing 2^-9)."""
    np.testing.assert_array_equal(ref_tanh(np.float32([2.0**-10, 20.0, -20.0])), np.float32([2.0**-10, 1.0, -1.0]))
    assert np.signbit(ref_tanh(np.float32(-0.0)))
    y = ref_prelu(np.float32([-3.0, 2.0, -0.0]).reshape(1, 3, 1, 1), np.float32([0.1, 0.1, 0.1]))
    np.testing.assert_array_equal(y.reshape(-1), np.float32([-0.30078125, 2.0, -0.0]))


@pytest.mark.parametrize("device", ["vek280", "vek385"])
def test_tanh_prelu_predict_equals_reference_and_pytorch(device):
    m = _model(TanhPrelu)
    cal = _frames(16, 1)
    d = aieflow.compile(m, device, cal[:1], calibration=cal, config=ONE)
    assert [s.activation for s in d.plan.stages] == ["tanh", "prelu", "prelu", None]
    x = np.concatenate([_frames(4, 2), _wide(4, 3)])
    got = d.predict(x)
    np.testing.assert_array_equal(got.view(np.uint32), ref_tanh_prelu(m, x).view(np.uint32))
    with torch.no_grad():
        fl = m(torch.from_numpy(x[:4])).numpy()
    # the documented bf16 tolerance (3 % of the output range, as the other bf16 CNNs above)
    assert np.abs(got[:4] - fl).max() < 0.03 * np.abs(fl).max()


def test_tanh_every_bf16_value_through_a_convolution():
    """A 1x1 convolution with weight 1 and no bias passes every finite bf16 value x exactly (but -0: the
    sum starts from +0); its fused tanh then equals the reference on all 65,280 of them (both signs,
    subnormals, the extremes)."""
    m = nn.Sequential(nn.Conv2d(1, 1, 1, bias=False), nn.Tanh()).eval()
    with torch.no_grad():
        m[0].weight.fill_(1.0)
    u = np.arange(1 << 16, dtype=np.uint32)
    u = u[((u >> 7) & 0xFF) != 0xFF]  # finite values
    x = (u << np.uint32(16)).view(np.float32).reshape(255, 1, 16, 16)
    d = aieflow.compile(m, "vek280", x[:1], calibration=x[:4], config=ONE)
    lin = ref_conv(x, np.ones((1, 1, 1, 1), np.float32), np.zeros(1, np.float32), 1, 0, False)
    assert np.count_nonzero(lin.view(np.uint32) != x.view(np.uint32)) == 1  # -0: the sum from +0 is +0
    np.testing.assert_array_equal(d.predict(x).view(np.uint32), ref_tanh(lin).view(np.uint32))


@needs_cxx
def test_tanh_prelu_verifies_bit_exact_on_x86():
    """The generated kernels (act::bf16_table, act::float_prelu in bf16) against predict, bit for bit,
    on the whole feature map of the last convolution and on the Dense head's outputs."""
    m = _model(TanhPrelu)
    cal = _frames(8, 1)
    d = aieflow.compile(m, "vek280", cal[:1], calibration=cal, config=ONE)
    layers_h = d.files["src/layers.h"]
    assert "static constexpr int ACT = 5;" in layers_h and "static constexpr int ACT = 4;" in layers_h
    v = d.verify(np.concatenate([_frames(1, 5), _wide(2, 6)]))
    assert v.ok and v.mismatches == 0 and v.values == 3 * 5
    torch.manual_seed(4)
    fm = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.Tanh(), nn.Conv2d(8, 8, 3, padding=1), nn.PReLU(8)).eval()
    x = _wide(3, 7)
    dm = aieflow.compile(fm, "vek280", x[:1], calibration=x, config=ONE)
    np.testing.assert_array_equal(dm.predict(x).view(np.uint32), ref_prelu(
        ref_conv(ref_tanh(ref_conv(x, _p(fm[0].weight), _p(fm[0].bias), 1, 1, False)), _p(fm[2].weight),
                 _p(fm[2].bias), 1, 1, False), _p(fm[3].weight)).view(np.uint32))
    v = dm.verify(x)
    assert v.ok and v.mismatches == 0 and v.values == 3 * 8 * 8 * 8


@needs_cxx
def test_tanh_prelu_rows_mapping_verifies_bit_exact_on_vek385():
    """The rows mapping runs the same epilogue (ConvCore::store): its predict equals the stream
    mapping's and the reference, and its kernels verify bit for bit on x86 (VEK385)."""
    torch.manual_seed(5)
    m = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.Tanh(), nn.Conv2d(4, 4, 3, padding=1), nn.PReLU(4)).eval()
    with torch.no_grad():
        m[3].weight.copy_(torch.tensor([0.1, -0.3, 0.7, 0.2]))
    x = np.concatenate([_frames(1, 8), _wide(1, 9)])
    d = aieflow.compile(m, "vek385", x[:1], calibration=x, config={"precision": "bf16", "cnn": {"mapping": "rows"}})
    assert d.plan.mapping == "rows"
    want = ref_prelu(ref_conv(ref_tanh(ref_conv(x, _p(m[0].weight), _p(m[0].bias), 1, 1, False)), _p(m[2].weight),
                              _p(m[2].bias), 1, 1, False), _p(m[3].weight))
    np.testing.assert_array_equal(d.predict(x).view(np.uint32), want.view(np.uint32))
    v = d.verify(x)
    assert v.ok and v.mismatches == 0 and v.values == 2 * 4 * 8 * 8
