"""The row-streamed CNN mapping in floating point (issues 25 and 24): fp32 on AIE1 (VCK190), bf16 on
AIE-ML (VEK280) and AIE-MLv2 (VEK385), and the rows mapping's residual refusals.

The rows kernels run the stream mapping's own ConvCore / Pool on a one-row view, so a float model
gives the same values in both mappings.  Checked here:

* a U-Net with every row kernel (conv, max pooling, nearest upsampling, a concat skip across
  scales, a residual block, a 1 x 1 output conv) at 16 x 16: ``predict`` of the rows design
  equals the frame (stream) design's and an independent reference bit for bit, and PyTorch within
  the float type's tolerance; x86 verify of the rows kernels bit-exact (one build per device); a
  mutation of the line buffer's padding rows fails it; the same U-Net with a bilinear (half_pixel)
  decoder upsampling (benchmarks/cnn_rows.py's BiResUNet): predict the same way, in float32 order
  (docs/conv.md "Bilinear upsampling"), and the rows kernel's float bilinear on x86 in a two-stage
  model (align_corners, 8 x 8 -> 16 x 16; VCK190 fp32, VEK280 and VEK385 bf16);
* a classifier (global average pooling, Dense, softmax: the float post layer) the same way;
* the per-row cost of the float kernels by hand (the stream mapping's constants, the catalog's
  fp32 / bf16 MAC rates and mmul shapes);
* the residual refusals docs/conv.md lists: a stride-2 and a size-changing residual convolution, a
  skip FIFO over a memory tile (AIE-ML), a skip of another type than the convolution's input, each
  naming the layer and the reason (a skip FIFO over a tile's memory on AIE1 goes to DDR instead).

The reference imports nothing from aieflow: numpy float32 arithmetic (each product and sum rounded
to float32, increasing (c, i, j) from the bias, docs/conv.md "bf16 on AI Engine-ML"), bf16 rounding
by ``float_reference.bf16`` (integers on the bit pattern, nearest even).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import shutil
from pathlib import Path

import numpy as np
import pytest
from float_reference import bf16 as bf16_scalar

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

import aieflow  # noqa: E402
from aieflow.errors import PlanError  # noqa: E402

needs_cxx = pytest.mark.skipif(shutil.which("g++") is None, reason="g++ not found: verify builds C++20 with g++")
HW = (16, 16)
CASES = [("vck190", "fp32"), ("vek280", "bf16"), ("vek385", "bf16")]


def _benchmark_module():
    path = Path(__file__).resolve().parents[1] / "benchmarks" / "cnn_rows.py"
    spec = importlib.util.spec_from_file_location("cnn_rows_benchmark", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


_BENCH = _benchmark_module()


def res_unet() -> nn.Module:
    """benchmarks/cnn_rows.py's BiResUNet with a nearest decoder upsampling: e, pool, m + nearest
    x 2, d on the concat [up, e], r1, r2 + d (ReLU), o."""
    m = _BENCH.BiResUNet()
    m.up = nn.Upsample(scale_factor=2, mode="nearest")
    return m.eval()


# ------------------------------------------------------------------ the independent reference

_bf16_vec = np.vectorize(bf16_scalar, otypes=[np.float32])


def _round(x: np.ndarray, prec: str) -> np.ndarray:
    return _bf16_vec(x).astype(np.float32) if prec == "bf16" else np.asarray(x, np.float32)


def _p(t) -> np.ndarray:
    return t.detach().numpy().astype(np.float32)


def ref_conv(x, conv: nn.Conv2d, prec: str, relu: bool) -> np.ndarray:
    """float32 accumulation from the (rounded) bias in increasing (c, i, j), every product and sum
    rounded to float32; the sum rounded to the type (bf16: nearest even), then the ReLU."""
    w, b = _round(_p(conv.weight), prec), _round(_p(conv.bias), prec)
    pad = conv.padding[0]
    n, c, h, wd = x.shape
    o, _, kh, kw = w.shape
    xp = np.zeros((n, c, h + 2 * pad, wd + 2 * pad), np.float32)
    xp[:, :, pad:pad + h, pad:pad + wd] = x
    oh, ow = h + 2 * pad - kh + 1, wd + 2 * pad - kw + 1
    acc = np.broadcast_to(b[None, :, None, None], (n, o, oh, ow)).astype(np.float32).copy()
    for ci in range(c):
        for i in range(kh):
            for j in range(kw):
                win = xp[:, ci, i:i + oh, j:j + ow]
                acc = (acc + (win[:, None] * w[None, :, ci, i, j, None, None]).astype(np.float32)).astype(np.float32)
    y = _round(acc, prec)
    return np.maximum(y, np.float32(0)) if relu else y


def ref_res_unet(m: nn.Module, x: np.ndarray, prec: str) -> np.ndarray:
    n, c, h, w = x.shape
    e = ref_conv(x, m.e, prec, True)
    p = e.reshape(n, 8, h // 2, 2, w // 2, 2).max(axis=(3, 5))
    g = ref_conv(p, m.m, prec, True).repeat(2, axis=2).repeat(2, axis=3)
    d = ref_conv(np.concatenate([g, e], axis=1), m.d, prec, True)
    r = ref_conv(ref_conv(d, m.r1, prec, True), m.r2, prec, False)
    z = np.maximum(_round((r + d).astype(np.float32), prec), np.float32(0))
    return ref_conv(z, m.o, prec, False)


def ref_bilinear_half_pixel(x: np.ndarray, s: int, prec: str) -> np.ndarray:
    """docs/conv.md's float bilinear (half_pixel, factor s on both axes): per axis the source
    (y + 1/2) / s - 1/2 clamped at 0 is i0 + p / (2 s); w1 = p * fl(1 / (2 s)), w0 = 1 - w1 in
    float32; each row mixed first, t = w0c a[., c0] + w1c a[., c1], then y = w0r t[r0] + w1r t[r1],
    every product and sum rounded to float32; bf16 rounds y once."""
    n, c, h, w = x.shape

    def taps(length):
        i0, i1, w0, w1 = [], [], [], []
        inv = np.float32(1.0) / np.float32(2 * s)
        for y in range(length * s):
            num = max(2 * y + 1 - s, 0)
            i0.append(num // (2 * s))
            i1.append(min(num // (2 * s) + 1, length - 1))
            one = np.float32(num % (2 * s)) * inv
            w1.append(one)
            w0.append(np.float32(1.0) - one)
        return np.array(i0), np.array(i1), np.array(w0, np.float32), np.array(w1, np.float32)

    r0, r1, u0, u1 = taps(h)
    c0, c1, w0, w1 = taps(w)
    f = np.float32
    t0 = (x[:, :, r0][..., c0] * w0).astype(f) + (x[:, :, r0][..., c1] * w1).astype(f)
    t1 = (x[:, :, r1][..., c0] * w0).astype(f) + (x[:, :, r1][..., c1] * w1).astype(f)
    y = ((t0.astype(f) * u0[:, None]).astype(f) + (t1.astype(f) * u1[:, None]).astype(f)).astype(f)
    return _round(y, prec)


def ref_bi_res_unet(m: nn.Module, x: np.ndarray, prec: str) -> np.ndarray:
    """benchmarks/cnn_rows.py's BiResUNet: e, pool, m + bilinear x 2, d on [up, e], r1, r2 + d, o."""
    n, c, h, w = x.shape
    e = ref_conv(x, m.e, prec, True)
    p = e.reshape(n, 8, h // 2, 2, w // 2, 2).max(axis=(3, 5))
    g = ref_bilinear_half_pixel(ref_conv(p, m.m, prec, True), 2, prec)
    d = ref_conv(np.concatenate([g, e], axis=1), m.d, prec, True)
    r = ref_conv(ref_conv(d, m.r1, prec, True), m.r2, prec, False)
    z = np.maximum(_round((r + d).astype(np.float32), prec), np.float32(0))
    return ref_conv(z, m.o, prec, False)


def _frames(n: int, seed: int, prec: str) -> np.ndarray:
    """Normal frames, one spread over 2^-6 .. 2^6 with random signs, and (n > 2) one of +-0."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, 3, *HW)).astype(np.float32)
    if n > 1:
        x[1] = (rng.choice([-1.0, 1.0], (3, *HW)) * 2.0 ** rng.uniform(-6, 6, (3, *HW))).astype(np.float32)
    if n > 2:
        x[2] = np.where(rng.random((3, *HW)) < 0.5, -0.0, 0.0).astype(np.float32)
    return _round(x, prec)


def _compile(model, device, prec, mapping, cal=None):
    cal = _frames(4, 1, prec) if cal is None else cal
    return aieflow.compile(model, device, cal[:1], calibration=cal,
                           config={"precision": prec, "cnn": {"mapping": mapping}})


@pytest.fixture(scope="module")
def designs():
    """(device, precision) -> (rows design, frame design) of the U-Net at 16 x 16."""
    return {(dev, prec): (_compile(res_unet(), dev, prec, "rows"), _compile(res_unet(), dev, prec, "stream"))
            for dev, prec in CASES}


# ------------------------------------------------------------------ values


@pytest.mark.parametrize(("device", "prec"), CASES)
def test_unet_rows_predict_equals_frame_reference_and_pytorch(designs, device, prec):
    rows, frame = designs[device, prec]
    assert rows.plan.mapping == "rows" and frame.plan.mapping == "stream"
    assert [lay.stage for lay in rows.plan.layers] == ["e", "pool", "m", "d", "r1", "r2", "o"]
    x = _frames(3, 7, prec)
    y_rows, y_frame = np.asarray(rows.predict(x), np.float32), np.asarray(frame.predict(x), np.float32)
    np.testing.assert_array_equal(y_rows.view(np.uint32), y_frame.view(np.uint32))
    np.testing.assert_array_equal(y_rows, ref_res_unet(res_unet(), x, prec))
    with torch.no_grad():
        want = res_unet()(torch.from_numpy(x)).numpy()
    span = float(np.abs(want).max())
    tol = 0.03 * span if prec == "bf16" else 1e-5 * span  # bf16 keeps 8 significant bits
    assert np.abs(y_rows - want).max() <= tol
    assert np.abs(y_rows - want).max() > 0 or prec == "fp32"  # bf16 does round: the check is not vacuous


@needs_cxx
@pytest.mark.parametrize(("device", "prec"), CASES[:2])
def test_unet_rows_verify_bit_exact(designs, device, prec):
    """The rows kernels on x86 against predict: normal, wide-range and +-0 frames (one build)."""
    rows, _ = designs[device, prec]
    v = rows.verify(_frames(3, 11, prec))
    assert v.ok and v.mismatches == 0 and v.values == 3 * 3 * 16 * 16


@pytest.fixture(scope="module")
def bi_designs():
    """(device, precision) -> (rows design, frame design) of the bilinear U-Net at 16 x 16."""
    return {(dev, prec): (_compile(_BENCH.BiResUNet().eval(), dev, prec, "rows"),
                          _compile(_BENCH.BiResUNet().eval(), dev, prec, "stream")) for dev, prec in CASES}


@pytest.mark.parametrize(("device", "prec"), CASES)
def test_bilinear_unet_rows_predict_equals_frame_reference_and_pytorch(bi_designs, device, prec):
    """Float bilinear in both mappings: the rows design's predict equals the frame design's and the
    reference bit for bit, PyTorch within the type's tolerance."""
    rows, frame = bi_designs[device, prec]
    assert rows.plan.mapping == "rows" and frame.plan.mapping == "stream"
    m = next(s for s in rows.plan.stages if s.name == "m")
    assert m.up == (2, 2) and m.up_mode == "half_pixel"
    x = _frames(3, 7, prec)
    y_rows, y_frame = np.asarray(rows.predict(x), np.float32), np.asarray(frame.predict(x), np.float32)
    np.testing.assert_array_equal(y_rows.view(np.uint32), y_frame.view(np.uint32))
    np.testing.assert_array_equal(y_rows.view(np.uint32), ref_bi_res_unet(_BENCH.BiResUNet().eval(), x, prec).view(np.uint32))
    with torch.no_grad():
        want = _BENCH.BiResUNet().eval()(torch.from_numpy(x)).numpy()
    span = float(np.abs(want).max())
    tol = 0.03 * span if prec == "bf16" else 1e-5 * span
    assert np.abs(y_rows - want).max() <= tol


class UpRows(nn.Module):
    """conv 3 -> 4 + ReLU, bilinear x 2 (align_corners=True), conv 4 -> 3: the rows kernel's float
    bilinear (its ring of two conv rows) in a two-stage design, small enough for a quick x86 build."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(3)
        self.a = nn.Conv2d(3, 4, 3, padding=1)
        self.up = nn.Upsample(scale_factor=2, mode="bilinear", align_corners=True)
        self.b = nn.Conv2d(4, 3, 3, padding=1)

    def forward(self, x):
        return self.b(self.up(torch.relu(self.a(x))))


@needs_cxx
@pytest.mark.parametrize(("device", "prec"), CASES)
def test_bilinear_rows_verify_bit_exact(device, prec):
    """The rows kernel's float bilinear on x86 against predict (normal, wide-range and +-0 frames),
    predict equal to the frame design's."""
    cal = _frames(4, 1, prec)[:, :, :8, :8]
    rows = _compile(UpRows().eval(), device, prec, "rows", cal)
    frame = _compile(UpRows().eval(), device, prec, "stream", cal)
    assert rows.plan.mapping == "rows" and rows.plan.stages[0].up_mode == "align_corners"
    x = _frames(3, 11, prec)[:, :, :8, :8]
    np.testing.assert_array_equal(np.asarray(rows.predict(x), np.float32).view(np.uint32),
                                  np.asarray(frame.predict(x), np.float32).view(np.uint32))
    v = rows.verify(x)
    assert v.ok and v.mismatches == 0 and v.values == 3 * 3 * 16 * 16


@needs_cxx
def test_padding_row_mutation_fails_bf16_verify(designs):
    """The line buffer's top / bottom padding rows holding 1 instead of the padding value 0."""
    rows, _ = designs["vek280", "bf16"]
    key, good = "src/kernels/rows_kernels.h", "lines[(c * C::KH + slot) * C::W + x] = TA(C::PADV);"
    assert rows.files[key].count(good) == 1
    bad = dataclasses.replace(rows, files={**rows.files, key: rows.files[key].replace(
        good, "lines[(c * C::KH + slot) * C::W + x] = TA(C::PADV + 1);")})
    assert bad.verify(_frames(1, 11, "bf16")).mismatches > 0


@needs_cxx
@pytest.mark.parametrize(("device", "prec"), [("vck190", "fp32"), ("vek385", "bf16")])
def test_classifier_rows_float_head(device, prec):
    """Global average pooling, Dense and softmax (cnn_float_post.h) in rows: predict equals the
    frame design's, PyTorch within tolerance, x86 bit-exact (one build)."""
    cal = _frames(4, 1, prec)
    rows = _compile(_BENCH.Classifier().eval(), device, prec, "rows", cal)
    frame = _compile(_BENCH.Classifier().eval(), device, prec, "stream", cal)
    assert [lay.kind for lay in rows.plan.layers] == ["conv", "pool", "conv", "gpool", "conv"]
    assert rows.plan.stages[-1].post is not None  # the softmax: a float post layer of fc
    x = _frames(3, 5, prec)
    y = np.asarray(rows.predict(x), np.float32)
    np.testing.assert_array_equal(y.view(np.uint32), np.asarray(frame.predict(x), np.float32).view(np.uint32))
    with torch.no_grad():
        want = _BENCH.Classifier().eval()(torch.from_numpy(x)).numpy()
    assert np.abs(y - want).max() <= (0.03 if prec == "bf16" else 1e-5)
    v = rows.verify(x)
    assert v.ok and v.mismatches == 0 and v.values == 3 * 10


def test_bf16_unet_256_maps_by_rows_under_auto():
    """Whole 256 x 256 frames do not fit: ``auto`` falls back to rows for bf16 as for int8."""
    cal = _frames(2, 1, "bf16")
    cal = np.repeat(np.repeat(cal, 16, axis=2), 16, axis=3)
    d = aieflow.compile(_BENCH.TinyUNet().eval(), "vek280", cal[:1], calibration=cal, config={"precision": "bf16"})
    assert d.plan.mapping == "rows" and d.plan.layers[3].merge_bytes == 2 * 16 * 256 * 2  # bf16: 2 B per value
    e = d.estimate()
    assert e.latency_s > e.interval_s > 0


# ------------------------------------------------------------------ model


def test_float_row_cost_by_hand(designs):
    """Cycles per output row of the encoder conv e (3 -> 8, 3 x 3, padding 1, W = 16): the stream
    mapping's one-row tile cycles (cnn/perf.conv_tile_cycles: mmul blocks at the catalog's rate,
    GATHER_CYCLES_PER_ELEMENT = 1 per patch element, VECTOR_EPILOGUE_CYCLES = 0.25 per value, less
    the 200-cycle call paid once per frame) + 1 per stream value read or written + 1 per value the
    line buffer slides.  e feeds the pooling and the decoder's skip: on AIE1 (two output ports) it
    writes each row twice, on AIE-ML / v2 once (one port, broadcast by the stream switch)."""
    pixel_blocks, gather, epilogue = 16 // 4, 16 * 27, 16 * 8 * 0.25
    shift = 2 * 3 * 16
    io = {"vck190": 3 * 16 + 2 * 8 * 16, "vek280": 3 * 16 + 8 * 16, "vek385": 3 * 16 + 8 * 16}
    # fp32 on AIE1: mmul<4, 2, 4>, 8 fp32 MACs per cycle: 4 pixel blocks x 2 channel blocks x 14 k blocks x 32 / 8
    mac = {"vck190": pixel_blocks * 2 * 14 * 32 / 8,
           # bf16 on AIE-ML: mmul<4, 8, 4>, 128 MACs per cycle: 4 x 2 x 4 blocks x 128 / 128
           "vek280": pixel_blocks * 2 * 4 * 128 / 128,
           # bf16 on AIE-MLv2: mmul<4, 8, 8>, 256 MACs per cycle: 4 x 1 x 4 blocks x 256 / 256
           "vek385": pixel_blocks * 1 * 4 * 256 / 256}
    for dev, prec in CASES:
        rows, _ = designs[dev, prec]
        assert rows.plan.layers[0].out_ports == (2 if dev == "vck190" else 1)
        assert rows.plan.layers[0].row_cycles == mac[dev] + gather + epilogue + io[dev] + shift
    # the Dense head + fp32 softmax (16 -> 10, one row of one pixel): mmul 1 x 3 x 8 blocks x 32 / 8,
    # gather 4 x 16, epilogue 10 x 0.25, softmax (10 x FP32_SOFTMAX_VALUE_OPS 29 + FP32_DIV_OPS 16) x
    # FP32_OP_CYCLES 2, stream values 16 in + 10 out
    cal = _frames(4, 1, "fp32")
    c = _compile(_BENCH.Classifier().eval(), "vck190", "fp32", "rows", cal)
    assert c.plan.layers[-1].row_cycles == 96 + 64 + 2.5 + (10 * 29 + 16) * 2 + 26


# ------------------------------------------------------------------ refusals


class StrideRes(nn.Module):
    """A residual whose last branch conv has stride 2: d (16 x 16) + r2(up(r1(d))) (32 -> 16)."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.d = nn.Conv2d(3, 4, 3, padding=1)
        self.r1 = nn.Conv2d(4, 4, 3, padding=1)
        self.up = nn.Upsample(scale_factor=2)
        self.r2 = nn.Conv2d(4, 4, 3, stride=2, padding=1)

    def forward(self, x):
        d = torch.relu(self.d(x))
        return torch.relu(self.r2(self.up(torch.relu(self.r1(d)))) + d)


class ShrinkRes(nn.Module):
    """A residual whose last branch conv shrinks the frame at stride 1: r1 pads 2 (18 x 18), r2 pads 0."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.d = nn.Conv2d(3, 4, 3, padding=1)
        self.r1 = nn.Conv2d(4, 4, 3, padding=2)
        self.r2 = nn.Conv2d(4, 4, 3, padding=0)

    def forward(self, x):
        d = torch.relu(self.d(x))
        return torch.relu(self.r2(torch.relu(self.r1(d))) + d)


class LongRes(nn.Module):
    """A residual block whose branch is six 3 x 3 convolutions through one channel: the 16-channel
    skip lags 7 rows behind the branch (8 with the row in flight)."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.d = nn.Conv2d(3, 16, 1)
        self.b = nn.ModuleList([nn.Conv2d(16, 1, 3, padding=1)] + [nn.Conv2d(1, 1, 3, padding=1) for _ in range(4)]
                               + [nn.Conv2d(1, 16, 3, padding=1)])

    def forward(self, x):
        d = y = torch.relu(self.d(x))
        for c in self.b[:-1]:
            y = torch.relu(c(y))
        return torch.relu(self.b[-1](y) + d)


def _int8(model, hw, device="vck190", mapping="rows"):
    cal = np.random.default_rng(1).standard_normal((2, 3, *hw)).astype(np.float32)
    return aieflow.compile(model.eval(), device, cal[:1], calibration=cal,
                           config={"precision": "int8", "cnn": {"mapping": mapping}})


@pytest.mark.parametrize(("model", "sizes"), [(StrideRes, "32 x 32 -> 16 x 16"), (ShrinkRes, "18 x 18 -> 16 x 16")])
def test_size_changing_residual_conv_is_refused_by_name(model, sizes):
    assert _int8(model(), HW, mapping="stream").plan.mapping == "stream"  # whole frames map it
    with pytest.raises(PlanError) as e:
        _int8(model(), HW)
    assert e.value.layer == "r2"
    assert f"'r2' has the residual add 'add' on a {sizes} convolution" in str(e.value)
    assert "keeps the frame's size" in str(e.value) and "cnn.mapping stream" in str(e.value)


def test_skip_fifo_over_a_tile_goes_to_ddr():
    """AIE1 holds a skip FIFO in a tile's data memory (32 KB): at W = 64 the 16-channel int8 skip of
    LongRes (8 rows) fits (8,192 B: 2,048 words); at W = 384 it would be 49,152 B, so the skip is held
    in a DDR segment instead: 16 rows x 16 x 384 B (tests/test_cnn_rows_ddr.py verifies it on x86 and
    tests what DDR cannot help, refused by name)."""
    ok = _int8(LongRes(), (16, 64))
    assert ok.plan.layers[-1].fifo_words == (0, 8 * 16 * 64 // 4) and not ok.plan.layers[-1].ddr_bytes
    wide = _int8(LongRes(), (16, 384))
    assert wide.plan.layers[-1].fifo_words == (0, 0)
    assert wide.plan.layers[-1].ddr_bytes == (0, 16 * 16 * 384)


def test_skip_fifo_over_a_memory_tile_goes_to_ddr():
    """AIE-ML: the skip's FIFO sits on its link into the memory tile where it meets b.4's row
    (row buffer 2 x 17 x 64 = 2,176 B, FIFO 8,192 B); with the memory tile shrunk below the two
    (10,368 B) the skip goes to DDR instead (tests/test_cnn_rows_ddr.py verifies it on x86); a
    memory tile below the row buffer alone is refused by name."""
    from aieflow.cnn.rows import rows_plan

    d = _int8(LongRes(), (16, 64), device="vek280")
    assert d.plan.layers[-1].merge_bytes == 2 * 17 * 64
    assert d.plan.layers[-1].fifo_words == (0, 8 * 16 * 64 // 4) and not d.plan.layers[-1].ddr_bytes
    for room in (8000, 10000):  # under the FIFO alone; under row buffer + FIFO (10,368 B)
        plan = rows_plan(dataclasses.replace(d.device, memory_tile_bytes=room), d.plan.stages, {})
        assert plan.layers[-1].fifo_words == (0, 0) and plan.layers[-1].ddr_bytes == (0, 16 * 16 * 64)
    assert rows_plan(dataclasses.replace(d.device, memory_tile_bytes=10368), d.plan.stages, {}).layers[-1].ddr_bytes == ()
    with pytest.raises(PlanError, match=r"the residual add 'add' into 'b.5' needs its row buffer \(2,176 B.*more than "
                                        r"its 2,000 B") as e:
        rows_plan(dataclasses.replace(d.device, memory_tile_bytes=2000), d.plan.stages, {})
    assert e.value.layer == "add"


class TypedRes(nn.Module):
    """relu(r2(relu(r1(d))) + d); the config makes r1's output (r2's input) 16-bit beside the 8-bit skip d."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.d = nn.Conv2d(3, 4, 3, padding=1)
        self.r1 = nn.Conv2d(4, 4, 3, padding=1)
        self.r2 = nn.Conv2d(4, 4, 3, padding=1)

    def forward(self, x):
        d = torch.relu(self.d(x))
        return torch.relu(self.r2(torch.relu(self.r1(d))) + d)


def test_skip_of_another_type_than_the_input_is_refused_by_name():
    cal = np.random.default_rng(1).standard_normal((2, 3, *HW)).astype(np.float32)
    config = {"precision": "int8", "layers": {"r1": {"output": "fixed<16,8>"}}}
    frame = aieflow.compile(TypedRes().eval(), "vck190", cal[:1], calibration=cal, config=config)
    assert frame.plan.mapping == "stream"  # whole frames add the two types in the epilogue
    with pytest.raises(PlanError) as e:
        aieflow.compile(TypedRes().eval(), "vck190", cal[:1], calibration=cal, config={**config, "cnn": {"mapping": "rows"}})
    assert e.value.layer == "r2"
    assert "the residual add 'add' whose skip is fixed<8," in str(e.value)
    assert "beside an input of fixed<16,8" in str(e.value) and "one stream element type per kernel" in str(e.value)
