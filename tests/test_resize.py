"""Upsampling by whole factors (``ops/resize.py``; issue 25, item 1): PyTorch ``nn.Upsample``
/ ``F.interpolate`` and ONNX ``Resize`` import to one ``resize`` op.  Nearest copies codes, checked
against PyTorch's and onnxruntime's own nearest resize; bilinear's fixed-point definition (the exact
rational rounded half to even) against an exact Fraction reference written from the coordinate
formulas, and its float form against PyTorch and onnxruntime; what does not map is refused by name."""

from __future__ import annotations

import io
import shutil
from fractions import Fraction

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import aieflow
from aieflow.errors import PlanError, UnsupportedOpError
from aieflow.ops.registry import family

torch = pytest.importorskip("torch")
ort = pytest.importorskip("onnxruntime")
nn = torch.nn
F = torch.nn.functional
FP32 = {"precision": "fp32"}


class Up(nn.Module):
    def __init__(self, up: nn.Module | None = None, **interp):
        super().__init__()
        torch.manual_seed(0)
        self.a = nn.Conv2d(2, 4, 3, padding=1)
        self.up = up
        self.interp = interp
        self.b = nn.Conv2d(4, 3, 3, padding=1)

    def forward(self, x):
        h = torch.relu(self.a(x))
        h = self.up(h) if self.up is not None else F.interpolate(h, **self.interp)
        return self.b(h)


def _x(n=4, seed=0, hw=(6, 5)):
    return np.random.default_rng(seed).standard_normal((n, 2, *hw)).astype(np.float32)


FORMS = {
    "Upsample-2": lambda: Up(nn.Upsample(scale_factor=2)),
    "Upsample-2x3": lambda: Up(nn.Upsample(scale_factor=(2, 3), mode="nearest")),
    "UpsamplingNearest2d-size": lambda: Up(nn.UpsamplingNearest2d(size=(12, 15))),
    "interpolate-3": lambda: Up(scale_factor=3, mode="nearest"),
    "interpolate-size": lambda: Up(size=(18, 10)),
}


@pytest.mark.parametrize("form", sorted(FORMS))
def test_resize_copies_codes_as_pytorch_does(form):
    model = FORMS[form]().eval()
    x = _x()
    emu = aieflow.emulate(model, device="vek280", example_input=x, calibration=x, config={"precision": "int8"})
    assert [n.op for n in emu.graph.nodes] == ["conv2d", "resize", "conv2d"]
    r = emu.graph.nodes[1]
    # codes (edges included) through PyTorch's own nearest resize
    codes = np.random.default_rng(1).integers(-128, 128, size=(3, 4, 6, 5))
    codes[0, 0, 0, :] = [-128, 127, -128, 127, 0]
    want = F.interpolate(torch.from_numpy(codes.astype(np.float64)), scale_factor=tuple(float(v) for v in r.attrs["scale"]),
                         mode="nearest").numpy().astype(np.int64)
    got = family("resize").emulate(r, codes)
    np.testing.assert_array_equal(got, want)
    assert got.dtype == codes.dtype and r.types == emu.graph.nodes[0].types.output
    with torch.no_grad():
        ref = model(torch.from_numpy(x)).numpy()
    assert np.abs(emu.predict(x) - ref).max() < 0.05 * max(1.0, float(np.abs(ref).max()))
    f32 = aieflow.emulate(model, device="vck190", example_input=x, config=FP32)
    np.testing.assert_allclose(f32.predict(x), ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dynamo", [False, True])
def test_onnx_export_imports_the_same_resize(dynamo):
    pytest.importorskip("onnxscript")
    model = Up(nn.Upsample(scale_factor=(2, 3))).eval()
    x = _x()
    f = io.BytesIO()
    torch.onnx.export(model, (torch.from_numpy(x[:1]),), f, dynamo=dynamo, input_names=["x"], output_names=["y"])
    proto = onnx.load_from_string(f.getvalue())
    cfg = {"precision": "int8"}
    a = aieflow.emulate(model, device="vek280", example_input=x, calibration=x, config=cfg)
    b = aieflow.emulate(proto, device="vek280", example_input=x, calibration=x, config=cfg)
    np.testing.assert_array_equal(a.predict(x, raw=True), b.predict(x, raw=True))


def _resize_model(attrs, scales=None, sizes=None, shape=(3, 4, 5)):
    inits = [numpy_helper.from_array(np.zeros(0, np.float32), "roi")]
    inputs = ["x", "roi", "", ""]
    if scales is not None:
        inits.append(numpy_helper.from_array(np.asarray(scales, np.float32), "scales"))
        inputs[2] = "scales"
    if sizes is not None:
        inits.append(numpy_helper.from_array(np.asarray(sizes, np.int64), "sizes"))
        inputs[3] = "sizes"
    node = helper.make_node("Resize", inputs, ["y"], name="up", **attrs)
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", *shape])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", "c", "h", "w"])], initializer=inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


@pytest.mark.parametrize("attrs, scales, sizes", [
    ({"mode": "nearest"}, [1, 1, 2, 3], None),  # half_pixel + round_prefer_floor (the defaults)
    ({"mode": "nearest", "coordinate_transformation_mode": "asymmetric", "nearest_mode": "floor"}, [1, 1, 3, 2], None),
    ({"mode": "nearest", "coordinate_transformation_mode": "pytorch_half_pixel", "nearest_mode": "round_prefer_ceil"},
     None, [2, 3, 16, 20]),  # sizes fix the batch too: the sample batch is 2
])
def test_onnx_resize_matches_onnxruntime(attrs, scales, sizes):
    model = _resize_model(attrs, scales, sizes)
    x = np.random.default_rng(2).standard_normal((2, 3, 4, 5)).astype(np.float32)
    emu = aieflow.emulate(model, device="vck190", example_input=x, config=FP32)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    np.testing.assert_array_equal(emu.predict(x), sess.run(None, {"x": x})[0])


@pytest.mark.parametrize("attrs, scales, match", [
    ({"mode": "cubic"}, [1, 1, 2, 2], "mode 'cubic' is not supported"),
    ({"mode": "linear", "coordinate_transformation_mode": "tf_crop_and_resize"}, [1, 1, 2, 2],
     "linear with coordinate_transformation_mode=tf_crop_and_resize"),
    ({"mode": "nearest"}, [1, 1, 1.5, 2], r"not by whole factors"),
    ({"mode": "nearest", "coordinate_transformation_mode": "asymmetric"}, [1, 1, 2, 2],
     "asymmetric with nearest_mode=round_prefer_floor"),
    ({"mode": "nearest"}, [1, 2, 2, 2], "more than the image's height and width"),
])
def test_onnx_resize_variants_that_do_not_map_are_named(attrs, scales, match):
    with pytest.raises(UnsupportedOpError, match=match) as e:
        aieflow.emulate(_resize_model(attrs, scales), device="vck190", example_input=np.zeros((1, 3, 4, 5), np.float32),
                        config=FP32)
    assert "up" in str(e.value) and "whole factors" in str(e.value)


def test_pytorch_bicubic_and_fractional_scales_are_refused_by_name():
    for model, match in ((Up(nn.Upsample(scale_factor=2, mode="bicubic")), "mode 'bicubic'"),
                         (Up(scale_factor=1.5), r"not by whole factors")):
        with pytest.raises(UnsupportedOpError, match=match) as e:
            aieflow.emulate(model.eval(), device="vck190", example_input=_x(1), config=FP32)
        assert e.value.layer is not None


needs_cxx = pytest.mark.skipif(shutil.which("g++") is None, reason="g++ not found: verify builds C++20 with g++")


@needs_cxx
@pytest.mark.parametrize("device, precision, scale", [("vek280", "int8", (2, 3)), ("vek280", "int16", 2),
                                                      ("vck190", "fp32", 2)])
def test_upsampling_fused_into_the_convolution_verifies_bit_exact(device, precision, scale):
    model = Up(nn.Upsample(scale_factor=scale)).eval()
    x = _x(16)
    d = aieflow.compile(model, device, x[:1], calibration=x, config={"precision": precision})
    first = d.plan.stages[0]
    s = (scale, scale) if isinstance(scale, int) else scale
    assert first.up == s and first.up_name == "up" and first.out_shape == (4, 6 * s[0], 5 * s[1])
    assert f"nearest upsampling {s[0]} x {s[1]} in the store" in d.summary()
    assert d.to_json()["stages"][0]["upsample"] == list(s)
    with torch.no_grad():
        ref = model(torch.from_numpy(x)).numpy()
    tol = {"int8": 0.05, "int16": 1e-3, "fp32": 1e-4}[precision] * max(1.0, float(np.abs(ref).max()))
    assert np.abs(d.predict(x) - ref).max() < tol
    v = d.verify(samples=3)
    assert v.ok and v.mismatches == 0 and v.values == 3 * 3 * 6 * s[0] * 5 * s[1]


def test_upsampling_costs_its_stores():
    x = _x(8)
    up = aieflow.compile(Up(nn.Upsample(scale_factor=2)).eval(), "vek280", x[:1], calibration=x,
                         config={"precision": "int8"})
    plain = aieflow.compile(Up(nn.Identity()).eval(), "vek280", x[:1], calibration=x, config={"precision": "int8"})
    a = {p.stage: p.seconds for p in up.estimate().stages}
    b = {p.stage: p.seconds for p in plain.estimate().stages}
    assert a["a"] > b["a"]  # three extra stores per value in the first convolution's last tile


class PoolUp(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Conv2d(2, 4, 3, padding=1)
        self.pool = nn.MaxPool2d(2)
        self.up = nn.Upsample(scale_factor=2)
        self.b = nn.Conv2d(4, 3, 3, padding=1)

    def forward(self, x):
        return self.b(self.up(self.pool(self.a(x))))


def test_upsampling_the_cnn_mapping_cannot_fuse_is_refused_by_name():
    x = np.random.default_rng(0).standard_normal((8, 2, 8, 8)).astype(np.float32)
    with pytest.raises(PlanError, match=r"nearest upsampling is mapped into the epilogue.*follows the max pooling") as e:
        aieflow.compile(PoolUp().eval(), "vek280", x[:1], calibration=x, config={"precision": "int8"})
    assert e.value.layer == "up" and "aieflow.emulate" in str(e.value)


# ----------------------------------------------------------------------------- bilinear


def _ref_coord(y: int, n: int, s: int, coord: str) -> Fraction:
    """The source coordinate of output y (PyTorch's area_pixel_compute_source_index / the ONNX
    Resize spec), exactly."""
    if coord == "half_pixel":
        return max(Fraction(0), (y + Fraction(1, 2)) / s - Fraction(1, 2))
    if coord == "align_corners":
        return Fraction(0) if n * s == 1 else Fraction(y * (n - 1), n * s - 1)
    return Fraction(y, s)


def _ref_bilinear(codes: np.ndarray, scale, coord: str) -> np.ndarray:
    """Python Fractions: the exact interpolated value of every output, rounded half to even."""
    n_, c_, h, w = codes.shape
    sh, sw = scale
    out = np.zeros((n_, c_, h * sh, w * sw), dtype=np.int64)

    def taps(y, n, s):
        src = _ref_coord(y, n, s, coord)
        i0 = int(src)  # src >= 0: floor
        return [(min(i0, n - 1), 1 - (src - i0)), (min(i0 + 1, n - 1), src - i0)]

    for b in range(n_):
        for c in range(c_):
            for y in range(h * sh):
                for x in range(w * sw):
                    v = sum(wy * wx * int(codes[b, c, iy, ix]) for iy, wy in taps(y, h, sh) for ix, wx in taps(x, w, sw))
                    out[b, c, y, x] = round(v)  # Fraction.__round__: to nearest, ties to even
    return out


@pytest.mark.parametrize("coord", ["half_pixel", "align_corners", "asymmetric"])
@pytest.mark.parametrize("hw, scale", [((3, 4), (2, 2)), ((1, 5), (3, 2)), ((4, 2), (4, 3)), ((2, 3), (1, 2))])
def test_bilinear_codes_are_the_exact_value_rounded_half_to_even(coord, hw, scale):
    from aieflow.ops import resize

    rng = np.random.default_rng(sum(hw) * 7 + scale[0])
    codes = rng.integers(-128, 128, size=(2, 2, *hw)).astype(np.int8)
    codes[0, 0] = np.where(np.indices(hw).sum(0) % 2, 127, -128)  # extremes side by side: the largest steps
    from dataclasses import replace

    from aieflow.numerics.types import FixedType

    node = replace(resize.make_node("up", "x", "y", (2, *hw), scale, "bilinear", coord), types=FixedType(8, 4))
    got = family("resize").emulate(node, codes)
    assert got.dtype == np.int8
    np.testing.assert_array_equal(got.astype(np.int64), _ref_bilinear(codes, scale, coord))
    wide = rng.integers(-32768, 32768, size=(1, 1, *hw)).astype(np.int16)
    np.testing.assert_array_equal(family("resize").emulate(node, wide).astype(np.int64), _ref_bilinear(wide, scale, coord))
    # the emulator holds codes in float64 too: the same codes
    np.testing.assert_array_equal(family("resize").emulate(node, codes.astype(np.float64)), got.astype(np.float64))


def test_bilinear_ties_round_to_even():
    from aieflow.ops import resize

    # half_pixel by 2: output 1 of [0, 1] is 3/4 * 0 + 1/4 * 1; of [1, 3] ... choose pairs whose
    # quarter-weighted sums are exact halves: 1/4 * a + 3/4 * b = k + 1/2
    codes = np.array([[[[2, 0], [2, 0]]]], dtype=np.int8)  # row 0: 2, 0 -> outputs 2, 1.5, 0.5, 0
    got = resize.bilinear(codes, (1, 2), "half_pixel")
    np.testing.assert_array_equal(got[0, 0, 0], [2, 2, 0, 0])  # 1.5 -> 2, 0.5 -> 0 (even)


@pytest.mark.parametrize("align", [False, True])
def test_pytorch_bilinear_imports_and_matches_pytorch(align):
    model = Up(scale_factor=2, mode="bilinear", align_corners=align).eval()
    x = _x()
    f32 = aieflow.emulate(model, device="vck190", example_input=x, config=FP32)
    r = f32.graph.nodes[1]
    assert r.attrs["mode"] == "bilinear" and r.attrs["coord"] == ("align_corners" if align else "half_pixel")
    with torch.no_grad():
        ref = model(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(f32.predict(x), ref, rtol=1e-5, atol=1e-5)
    emu = aieflow.emulate(model, device="vek280", example_input=x, calibration=x, config={"precision": "int8"})
    assert np.abs(emu.predict(x) - ref).max() < 0.05 * max(1.0, float(np.abs(ref).max()))
    # in the emulator's own run (codes as it holds them) the resize is the exact rounded value
    tr = emu.trace(emu.quantise_input(x[:2]))
    r = emu.graph.nodes[1]
    codes = tr[r.inputs[0]]
    np.testing.assert_array_equal(tr[r.outputs[0]], _ref_bilinear(codes.astype(np.int64), (2, 2), r.attrs["coord"]))
    mod = Up(nn.UpsamplingBilinear2d(scale_factor=2)).eval()  # align_corners=True
    assert aieflow.emulate(mod, device="vck190", example_input=x, config=FP32).graph.nodes[1].attrs["coord"] == "align_corners"


@pytest.mark.parametrize("coord", ["half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric"])
def test_onnx_linear_resize_matches_onnxruntime(coord):
    model = _resize_model({"mode": "linear", "coordinate_transformation_mode": coord}, [1, 1, 2, 3])
    x = np.random.default_rng(3).standard_normal((2, 3, 4, 5)).astype(np.float32)
    emu = aieflow.emulate(model, device="vck190", example_input=x, config=FP32)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(emu.predict(x), sess.run(None, {"x": x})[0], rtol=1e-6, atol=1e-6)


def test_bilinear_onnx_export_imports_the_same_codes():
    model = Up(scale_factor=2, mode="bilinear").eval()
    x = _x()
    f = io.BytesIO()
    torch.onnx.export(model, (torch.from_numpy(x[:1]),), f, dynamo=False, input_names=["x"], output_names=["y"])
    cfg = {"precision": "int8"}
    a = aieflow.emulate(model, device="vek280", example_input=x, calibration=x, config=cfg)
    b = aieflow.emulate(onnx.load_from_string(f.getvalue()), device="vek280", example_input=x, calibration=x, config=cfg)
    assert [n.attrs.get("coord") for n in b.graph.nodes if n.op == "resize"] == ["half_pixel"]
    np.testing.assert_array_equal(a.predict(x, raw=True), b.predict(x, raw=True))


@needs_cxx
@pytest.mark.parametrize("precision, scale, align", [("int8", (2, 3), False), ("int16", 2, True)])
def test_bilinear_upsampling_fused_into_the_convolution_verifies_bit_exact(precision, scale, align):
    model = Up(scale_factor=scale, mode="bilinear", align_corners=align).eval()
    x = _x(16)
    x[0, :, 0, :] = 30.0  # saturating input codes on one row: extreme neighbours in the interpolation
    d = aieflow.compile(model, "vek280", x[:1], calibration=x[1:], config={"precision": precision})
    first = d.plan.stages[0]
    s = (scale, scale) if isinstance(scale, int) else scale
    assert first.up == s and first.up_mode == ("align_corners" if align else "half_pixel")
    assert first.out_shape == (4, 6 * s[0], 5 * s[1])
    assert d.to_json()["stages"][0]["upsample_mode"] == first.up_mode
    assert f"bilinear upsampling ({first.up_mode}) {s[0]} x {s[1]} in the last tile" in d.summary()
    with torch.no_grad():
        ref = model(torch.from_numpy(x[1:])).numpy()  # frame 0 saturates: outside the calibrated range
    tol = {"int8": 0.05, "int16": 1e-3}[precision] * max(1.0, float(np.abs(ref).max()))
    assert np.abs(d.predict(x[1:]) - ref).max() < tol
    v = d.verify(samples=3)
    assert v.ok and v.mismatches == 0 and v.values == 3 * 3 * 6 * s[0] * 5 * s[1]


def test_bilinear_upsampling_costs_its_interpolation_by_hand():
    from aieflow.cnn.perf import BILINEAR_CYCLES_PER_VALUE, UPSAMPLE_STORE_CYCLES

    x = _x(8)
    cfg = {"precision": "int8", "layers": {"a": {"mapping": {"groups": 1}}, "b": {"mapping": {"groups": 1}}}}
    near = aieflow.compile(Up(scale_factor=2).eval(), "vek280", x[:1], calibration=x, config=cfg)
    bil = aieflow.compile(Up(scale_factor=2, mode="bilinear").eval(), "vek280", x[:1], calibration=x, config=cfg)
    a = {p.stage: p.seconds for p in bil.estimate().stages}["a"]
    b = {p.stage: p.seconds for p in near.estimate().stages}["a"]
    # by hand: 6 x 5 pixels x 4 channels; bilinear stores each once (+1) and interpolates 4 values
    # each, nearest stores 3 extra copies
    per = 1 + 4 * BILINEAR_CYCLES_PER_VALUE - 3 * UPSAMPLE_STORE_CYCLES
    assert (a - b) * near.device.clock_hz == pytest.approx(30 * 4 * per)
    # and the tile holds the window before upsampling (4 x 6 x 5 int8 values) besides
    assert bil.plan.layers[0].memory.bytes - near.plan.layers[0].memory.bytes == 4 * 6 * 5


# ----------------------------------------------------------------------------- float bilinear


def _den(n: int, s: int, coord: str) -> int:
    """The definition's common denominator D of one axis (docs/conv.md "Bilinear upsampling")."""
    return 2 * s if coord == "half_pixel" else max(1, n * s - 1) if coord == "align_corners" else s


def _ref_float_bilinear(x: np.ndarray, scale, coord: str, prec: str) -> np.ndarray:
    """docs/conv.md's float definition, one scalar operation at a time with float_reference's
    float32 / bf16 roundings (Python doubles: every product of two float32 values is exact, and a
    sum, a product or a quotient rounded to double and then to float32 is rounded once, since
    53 >= 2 x 24 + 2); the taps from the exact coordinates (_ref_coord)."""
    from float_reference import bf16, f32

    n_, c_, h, w = x.shape
    sh, sw = scale
    out = np.zeros((n_, c_, h * sh, w * sw), dtype=np.float32)

    def taps(y, n, s):
        src = _ref_coord(y, n, s, coord)
        i0 = int(src)
        d = _den(n, s, coord)
        p = (src - i0) * d
        assert p.denominator == 1  # the weight is p / D with an integer p
        w1 = f32(int(p) * f32(1 / d))
        return min(i0, n - 1), min(i0 + 1, n - 1), f32(1 - w1), w1

    for b in range(n_):
        for c in range(c_):
            for y in range(h * sh):
                r0, r1, u0, u1 = taps(y, h, sh)
                for xx in range(w * sw):
                    c0, c1, w0, w1 = taps(xx, w, sw)
                    a = x[b, c].astype(np.float64)  # float32 values, exactly
                    t0 = f32(f32(w0 * a[r0, c0]) + f32(w1 * a[r0, c1]))
                    t1 = f32(f32(w0 * a[r1, c0]) + f32(w1 * a[r1, c1]))
                    v = f32(f32(u0 * t0) + f32(u1 * t1))
                    out[b, c, y, xx] = bf16(v) if prec == "bf16" else v
    return out


def _float_values(shape, seed: int, prec: str) -> np.ndarray:
    """Normal values, one channel spread over 2^-30 .. 2^30 with random signs, +-0 in another, the
    largest float32 / bf16 magnitudes beside small ones; bf16 values for bf16."""
    from float_reference import bf16

    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape).astype(np.float32)
    x[0, 0] = rng.choice([-1.0, 1.0], shape[2:]) * 2.0 ** rng.uniform(-30, 30, shape[2:])
    x[0, 1] = np.where(rng.random(shape[2:]) < 0.5, -0.0, 0.0)
    big = 3.3e38 if prec == "bf16" else 3.4e38
    x[-1, -1] = np.where(np.indices(shape[2:]).sum(0) % 2, big, -1e-3)
    if prec == "bf16":
        x = np.vectorize(bf16, otypes=[np.float32])(x)
    return x.astype(np.float32)


@pytest.mark.parametrize("prec", ["fp32", "bf16"])
@pytest.mark.parametrize("coord", ["half_pixel", "align_corners", "asymmetric"])
@pytest.mark.parametrize("hw, scale", [((3, 4), (2, 2)), ((4, 5), (3, 2)), ((2, 3), (4, 3)), ((5, 1), (1, 3))])
def test_float_bilinear_emulates_the_kernels_float32_order(prec, coord, hw, scale):
    """predict's float bilinear (the resize family's emulate on a float type) equals the documented
    float32 order of operations bit for bit (+-0 and infinities included)."""
    from dataclasses import replace

    from aieflow.numerics.types import FloatType
    from aieflow.ops import resize

    x = _float_values((2, 3, *hw), sum(hw) * 11 + scale[0], prec)
    node = replace(resize.make_node("up", "x", "y", (3, *hw), scale, "bilinear", coord), types=FloatType(prec))
    got = np.asarray(family("resize").emulate(node, x))
    assert got.dtype == np.float32 and got.shape == (2, 3, hw[0] * scale[0], hw[1] * scale[1])
    want = _ref_float_bilinear(x, scale, coord, prec)
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
    assert np.abs(want[-1, -1]).max() >= 3.2e38 and np.signbit(want[0, 1]).any()  # the edges reach the output


@pytest.mark.parametrize("prec", ["fp32", "bf16"])
@pytest.mark.parametrize("align", [False, True])
def test_float_bilinear_is_within_rounding_of_pytorch(prec, align):
    """The kernels' definition against F.interpolate(mode='bilinear') on the same (bf16) values:
    fp32 within 8 float32 ulps of the channel's largest input (PyTorch takes its weights from a
    float32 scale 1 / s, rounded for s = 3, the definition from p / D), bf16 within one bf16
    rounding (2^-8 relative) more; bf16 does round (not vacuous)."""
    from dataclasses import replace

    from aieflow.numerics.types import FloatType
    from aieflow.ops import resize

    rng = np.random.default_rng(5)
    x = _float_values((3, 4, 7, 6), 9, prec)[:2]  # the spread and +-0 frame, a normal one (no huge values)
    x = np.concatenate([x, rng.uniform(-100, 100, (1, 4, 7, 6)).astype(np.float32)])
    if prec == "bf16":
        from float_reference import bf16

        x = np.vectorize(bf16, otypes=[np.float32])(x).astype(np.float32)
    coord = "align_corners" if align else "half_pixel"
    for scale in ((2, 2), (3, 2)):
        node = replace(resize.make_node("up", "x", "y", (4, 7, 6), scale, "bilinear", coord), types=FloatType(prec))
        got = np.asarray(family("resize").emulate(node, x), np.float64)
        with torch.no_grad():
            want = F.interpolate(torch.from_numpy(x), scale_factor=scale, mode="bilinear",
                                 align_corners=align).numpy().astype(np.float64)
        span = np.abs(x).max(axis=(2, 3), keepdims=True).astype(np.float64)  # per frame and channel
        err = np.abs(got - want)
        if prec == "fp32":
            assert (err <= 8 * 2.0 ** -23 * span).all()
        else:
            assert (err <= 2.0 ** -8 * np.abs(want) + 8 * 2.0 ** -23 * span).all()
            assert err.max() > 0


@pytest.fixture(scope="module")
def float_bilinear_designs():
    """VCK190 fp32 (half_pixel by 2) and VEK280 bf16 (align_corners by (2, 3)): Up on the stream
    mapping, the bilinear in the conv's last tile."""
    out = {}
    for dev, prec, align, scale in (("vck190", "fp32", False, 2), ("vek280", "bf16", True, (2, 3))):
        model = Up(scale_factor=scale, mode="bilinear", align_corners=align).eval()
        x = _float_values((8, 2, 6, 5), 3, prec)[1:-1]
        out[prec] = (model, aieflow.compile(model, dev, x[:1], calibration=x, config={"precision": prec}))
    return out


@needs_cxx
@pytest.mark.parametrize("prec", ["fp32", "bf16"])
def test_float_bilinear_upsampling_verifies_bit_exact(float_bilinear_designs, prec):
    """Stream mapping: predict within the type's tolerance of PyTorch; x86 verify of the kernels
    bit-exact (edge frames included: +-0, values spread over 2^-30 .. 2^30)."""
    model, d = float_bilinear_designs[prec]
    first = d.plan.stages[0]
    s = first.up
    assert first.up_mode == ("half_pixel" if prec == "fp32" else "align_corners")
    assert f"bilinear upsampling ({first.up_mode}) {s[0]} x {s[1]} in the last tile" in d.summary()
    x = _float_values((4, 2, 6, 5), 13, prec)[:-1]
    with torch.no_grad():
        ref = model(torch.from_numpy(x[2:])).numpy()
    tol = {"fp32": 1e-5, "bf16": 0.05}[prec] * max(1.0, float(np.abs(ref).max()))
    assert np.abs(d.predict(x[2:]) - ref).max() < tol
    v = d.verify(x)
    assert v.ok and v.mismatches == 0 and v.values == 3 * 3 * 6 * s[0] * 5 * s[1]


@needs_cxx
def test_float_bilinear_order_mutation_fails_verify(float_bilinear_designs):
    """A kernel interpolating down the columns first (the definition mixes along each row first) is
    caught by verify: the same real value, other float32 roundings."""
    import dataclasses

    _, d = float_bilinear_designs["fp32"]
    key = "src/kernels/cnn_kernels.h"
    good = ("    const float p00 = c0 * a00, p01 = c1 * a01, p10 = c0 * a10, p11 = c1 * a11;\n"
            "    const float t0 = p00 + p01, t1 = p10 + p11;\n"
            "    const float q0 = r0 * t0, q1 = r1 * t1;\n"
            "    return q0 + q1;\n")
    assert d.files[key].count(good) == 1
    bad = dataclasses.replace(d, files={**d.files, key: d.files[key].replace(
        good, "    return c0 * (r0 * a00 + r1 * a10) + c1 * (r0 * a01 + r1 * a11);\n")})
    assert bad.verify(_float_values((3, 2, 6, 5), 13, "fp32")).mismatches > 0
