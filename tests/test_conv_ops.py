"""Convolution data movement: im2col / col2im / tiling, pixel shuffle, pooling.

References: PyTorch (``F.unfold``, ``F.fold``, ``pixel_shuffle``, pooling), onnxruntime
(``DepthToSpace`` in both modes), and element-id arrays (a value that names its own position), so
that a gather or permutation is checked position by position.
"""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper

import aieflow
from aieflow.errors import UnsupportedOpError
from aieflow.ops import conv, shuffle

# ------------------------------------------------------------------------------- im2col


@st.composite
def geometries(draw):
    kh, kw = draw(st.integers(1, 5)), draw(st.integers(1, 5))
    pads = tuple(draw(st.integers(0, k - 1)) for k in (kh, kw, kh, kw))  # top, left, bottom, right
    h = draw(st.integers(max(1, kh - pads[0] - pads[2]), 11))
    w = draw(st.integers(max(1, kw - pads[1] - pads[3]), 11))
    c = draw(st.integers(1, 4))
    stride = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    return conv.ConvGeometry((c, h, w), (kh, kw), stride, (pads[0], pads[1], pads[2], pads[3]))


def _unfold(x: np.ndarray, g: conv.ConvGeometry) -> np.ndarray:
    """torch's im2col: pad each side explicitly, then unfold; (N, P, K)."""
    top, left, bottom, right = g.padding
    t = F.pad(torch.from_numpy(x), (left, right, top, bottom))
    return F.unfold(t, g.kernel, stride=g.stride).transpose(1, 2).numpy()


@settings(max_examples=80, deadline=None)
@given(g=geometries())
def test_im2col_equals_torch_unfold_and_reads_the_right_element(g):
    x = np.random.default_rng(0).standard_normal((2, *g.in_shape))
    cols = conv.im2col(x, g)
    np.testing.assert_array_equal(cols, _unfold(x, g))
    assert cols.shape == (2, g.pixels, g.patch)
    # As a gather: entry (p, k) names input (c, y sh + i - top, x sw + j - left), or padding.
    c, h, w = g.in_shape
    oh, ow = g.out_hw
    idx = conv.im2col_index(g)
    for p in range(g.pixels):
        y, xx = divmod(p, ow)
        for k in range(g.patch):
            ch, rest = divmod(k, g.kernel[0] * g.kernel[1])
            i, j = divmod(rest, g.kernel[1])
            r, q = y * g.stride[0] + i - g.padding[0], xx * g.stride[1] + j - g.padding[1]
            inside = 0 <= r < h and 0 <= q < w
            assert idx[p, k] == (ch * h * w + r * w + q if inside else -1)


@settings(max_examples=40, deadline=None)
@given(g=geometries())
def test_col2im_is_the_adjoint_torch_fold(g):
    cols = np.random.default_rng(1).standard_normal((2, g.pixels, g.patch))
    top, left, bottom, right = g.padding
    c, h, w = g.in_shape
    padded = F.fold(torch.from_numpy(cols).transpose(1, 2), (h + top + bottom, w + left + right), g.kernel, stride=g.stride)
    want = padded[:, :, top : top + h, left : left + w].numpy()
    np.testing.assert_allclose(conv.col2im(cols, g), want, rtol=1e-12, atol=1e-12)
    # Integer version: how many patches read each element (a 1 x 1 stride-1 kernel: exactly one).
    ones = np.ones((1, g.pixels, g.patch), dtype=np.int64)
    counts = conv.col2im(ones, g)
    assert counts.sum() == int((conv.im2col_index(g) >= 0).sum())


@pytest.mark.parametrize("shape, block", [((64, 32), (16, 16)), ((32, 576), (8, 576)), ((4, 288), (4, 288)), ((37, 23), (8, 5)), ((1, 1), (3, 2))])
def test_tile_and_untile_are_exact_permutations(shape, block):
    ids = np.arange(1, shape[0] * shape[1] + 1).reshape(shape)  # 0 is reserved for padding
    t = conv.tile(ids, block)
    br, bc = block
    assert t.shape == (-(-shape[0] // br), -(-shape[1] // bc), br, bc)
    flat = t.reshape(-1)
    # every element exactly once, and only zeros besides
    assert sorted(flat[flat > 0].tolist()) == list(range(1, ids.size + 1))
    assert (flat == 0).sum() == t.size - ids.size
    for a, b, i, j in [(0, 0, 0, 0), (t.shape[0] - 1, t.shape[1] - 1, br - 1, bc - 1)]:
        r, c = a * br + i, b * bc + j
        assert t[a, b, i, j] == (ids[r, c] if r < shape[0] and c < shape[1] else 0)
    np.testing.assert_array_equal(conv.untile(t, shape), ids)


def test_blocked_matmul_over_tiles_equals_the_full_product():
    # The thesis's conv1 as a matmul: weights 64 x 32 (K zero-padded from 25), patches 32 x 256,
    # one 16 x 16 x 64 product per kernel with K split in two chunks.
    rng = np.random.default_rng(2)
    w, p = rng.integers(-128, 128, (64, 25)), rng.integers(-128, 128, (25, 256))
    wt, pt = conv.tile(w, (16, 16)), conv.tile(p, (16, 64))
    out = np.zeros((4, 4, 16, 64), dtype=np.int64)
    for m in range(4):
        for n in range(4):
            for k in range(2):
                out[m, n] += wt[m, k] @ pt[k, n]
    np.testing.assert_array_equal(conv.untile(out, (64, 256)), w @ p)


# ------------------------------------------------------------------------------- pixel shuffle


def _depth_to_space_ort(x: np.ndarray, r: int, mode: str) -> np.ndarray:
    node = helper.make_node("DepthToSpace", ["x"], ["y"], blocksize=r, mode=mode)
    _, c, h, w = x.shape
    out = ["N", c // (r * r), h * r, w * r]
    graph = helper.make_graph([node], "d2s", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", c, h, w])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, out)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {"x": x})[0], model


@pytest.mark.parametrize("r, c, h, w", [(2, 1, 16, 16), (3, 2, 4, 5), (2, 3, 1, 7), (1, 2, 3, 3)])
@pytest.mark.parametrize("mode", ["CRD", "DCR"])
def test_pixel_shuffle_matches_torch_and_onnxruntime(r, c, h, w, mode):
    ids = np.arange(2 * c * r * r * h * w, dtype=np.float32).reshape(2, c * r * r, h, w)
    got = shuffle.shuffle(ids, r, mode)
    want, model = _depth_to_space_ort(ids, r, mode)
    np.testing.assert_array_equal(got, want)
    if mode == "CRD":
        np.testing.assert_array_equal(got, F.pixel_shuffle(torch.from_numpy(ids), r).numpy())
    # a permutation: every element once
    assert sorted(got.reshape(-1).tolist()) == ids.reshape(-1).tolist()
    # through the importer and the emulator, on integer codes too
    x = np.random.default_rng(r).standard_normal((3, c * r * r, h, w)).astype(np.float32)
    for precision in ("fp32", "int8"):
        emu = aieflow.emulate(model, device="vck190", example_input=x, calibration=x, config={"precision": precision})
        assert [n.op for n in emu.graph.nodes] == ["pixel_shuffle"]
        codes = emu.quantise_input(x)
        np.testing.assert_array_equal(emu.predict(x, raw=True) if precision == "int8" else emu.predict(x),
                                      shuffle.shuffle(codes if precision == "int8" else x, r, mode))


def test_pixel_shuffle_rejects_bad_channels_and_modes():
    with pytest.raises(UnsupportedOpError, match=r"layer 'ps'.*divisible by 4"):
        shuffle.make_node("ps", "x", "y", (6, 4, 4), 2, "CRD")
    with pytest.raises(UnsupportedOpError, match=r"layer 'ps'.*mode 'XYZ'"):
        shuffle.make_node("ps", "x", "y", (4, 4, 4), 2, "XYZ")


# ------------------------------------------------------------------------------- pooling


@st.composite
def pools(draw):
    kh, kw = draw(st.integers(1, 4)), draw(st.integers(1, 4))
    ph, pw = draw(st.integers(0, kh // 2)), draw(st.integers(0, kw // 2))  # torch's limit
    h, w = draw(st.integers(kh, 10)), draw(st.integers(kw, 10))
    return {
        "c": draw(st.integers(1, 3)), "h": h, "w": w, "kernel": (kh, kw), "padding": (ph, pw),
        "stride": (draw(st.integers(1, 3)), draw(st.integers(1, 3))), "count_include_pad": draw(st.booleans()),
    }


def _pool_module(kind, p):
    if kind == "max":
        return torch.nn.MaxPool2d(p["kernel"], p["stride"], p["padding"])
    return torch.nn.AvgPool2d(p["kernel"], p["stride"], p["padding"], count_include_pad=p["count_include_pad"])


def _avg_int_reference(codes: np.ndarray, p: dict) -> np.ndarray:
    """Sum of each window's codes / its count, rounded half to even, in Python integers."""
    (kh, kw), (sh, sw), (ph, pw) = p["kernel"], p["stride"], p["padding"]
    n, c, h, w = codes.shape
    oh, ow = (h + 2 * ph - kh) // sh + 1, (w + 2 * pw - kw) // sw + 1
    out = np.zeros((n, c, oh, ow), dtype=np.int64)
    for idx in np.ndindex(n, c, oh, ow):
        s = cnt = 0
        for i in range(kh):
            for j in range(kw):
                r, q = idx[2] * sh + i - ph, idx[3] * sw + j - pw
                if 0 <= r < h and 0 <= q < w:
                    s += int(codes[idx[0], idx[1], r, q])
                    cnt += 1
        cnt = kh * kw if p["count_include_pad"] else cnt
        q_, rem = divmod(s, cnt)
        out[idx] = q_ + (2 * rem > cnt or (2 * rem == cnt and q_ % 2 == 1))
    return out


@settings(max_examples=30, deadline=None)
@given(p=pools(), kind=st.sampled_from(["max", "avg"]))
def test_pooling_matches_torch_in_float_and_an_integer_reference(p, kind):
    net = _pool_module(kind, p).eval()
    x = np.random.default_rng(3).standard_normal((3, p["c"], p["h"], p["w"])).astype(np.float32)
    want = net(torch.from_numpy(x)).numpy()
    fp32 = aieflow.emulate(net, device="vck190", example_input=x, config={"precision": "fp32"})
    np.testing.assert_allclose(fp32.predict(x), want, rtol=1e-6, atol=1e-6)
    emu = aieflow.emulate(net, device="vck190", example_input=x, calibration=x, config={"precision": "int8"})
    codes = emu.quantise_input(x).astype(np.int64)
    got = emu.predict(x, raw=True)
    if kind == "max":
        ref = net(torch.from_numpy(codes.astype(np.float64))).numpy()  # max of codes is exact
    else:
        ref = _avg_int_reference(codes, p)
    np.testing.assert_array_equal(got, ref)
    assert emu.output_type == emu.input_type


def _emulate_codes(net, codes: np.ndarray, precision: str, frac: int) -> list[int]:
    """Run integer ``codes`` (input type with ``frac`` fractional bits) through ``net``."""
    width = 8 if precision == "int8" else 16
    calib = np.full((1, *codes.shape[1:]), (2 ** (width - 1) - 1) * 2.0**-frac, dtype=np.float32)
    x = codes.astype(np.float64) * 2.0**-frac
    emu = aieflow.emulate(net, device="vek280", example_input=x, calibration=calib, config={"precision": precision})
    assert emu.input_type.frac == frac
    return emu.predict(x, raw=True).reshape(-1).tolist()


def test_average_pool_rounds_to_nearest_with_ties_to_even():
    windows = [[1, 1, 0, 0], [3, 0, 0, 0], [5, 1, 0, 0], [-2, 0, 0, 0], [-6, 0, 0, 0], [3, 2, 0, 0], [-3, -2, -2, 0]]
    codes = np.array(windows).reshape(len(windows), 1, 2, 2)
    # sums / 4: 0.5, 0.75, 1.5, -0.5, -1.5, 1.25, -1.75
    assert _emulate_codes(torch.nn.AvgPool2d(2), codes, "int8", 6) == [0, 1, 2, 0, -2, 1, -2]


def test_global_average_pool_divides_by_49_exactly():
    codes = np.zeros((4, 1, 7, 7), dtype=np.int64)
    codes[0, 0, 0, 0] = 49 * 3 + 24  # 3 + 24/49 -> 3
    codes[1, 0, 0, 0] = 49 * 3 + 25  # 3 + 25/49 -> 4
    codes[2, 0, 0, 0] = -(49 * 2 + 25)  # -2.51 -> -3
    codes[3, 0, :, :] = 30000  # 30000: no overflow of the sum
    assert _emulate_codes(torch.nn.AdaptiveAvgPool2d(1), codes, "int16", 10) == [3, 4, -3, 30000]


@pytest.mark.parametrize(
    "module, match",
    [
        (torch.nn.MaxPool2d(2, ceil_mode=True), r"layer '0'.*ceil_mode"),
        (torch.nn.MaxPool2d(2, dilation=2), r"layer '0'.*dilation"),
        (torch.nn.AvgPool2d(2, divisor_override=3), r"layer '0'.*divisor_override"),
        (torch.nn.AdaptiveAvgPool2d(2), r"layer '0'.*only global average pooling"),
    ],
)
def test_pool_errors_name_the_layer(module, match):
    with pytest.raises(UnsupportedOpError, match=match):
        aieflow.emulate(torch.nn.Sequential(module), example_input=np.zeros((1, 1, 6, 6), dtype=np.float32))
