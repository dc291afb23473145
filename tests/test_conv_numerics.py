"""Conv2D numerics against independent references.

* fp32: PyTorch within float tolerance over random shapes, and bit for bit against a float32
  loop in the documented order (bias first, then k = (c, i, j), each product and sum rounded).
* int8 / int16 PTQ: an integer reference written here (torch ``unfold`` of the codes, int64
  ``einsum``, round half to even and saturate in Python integers), exact equality; the PTQ types
  restated independently (the Dense rules on the convolution's tensors).
* tanh: the ``espcn-thesis`` table restated from the spec (entries, index, clamp edges), used on
  float32 and fixed-point pre-activations; exact tanh; PReLU.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

import aieflow
from aieflow.ops import activations as act

# ------------------------------------------------------------------------------- models


class Conv(torch.nn.Module):
    """One Conv2d with an optional activation module after it."""

    def __init__(self, c, o, kernel, stride, padding, activation=None, bias=True):
        super().__init__()
        self.conv = torch.nn.Conv2d(c, o, kernel, stride=stride, padding=padding, bias=bias)
        self.act = {None: torch.nn.Identity(), "relu": torch.nn.ReLU(), "tanh": torch.nn.Tanh(), "prelu": torch.nn.PReLU(o)}[activation]
        if activation == "prelu":
            with torch.no_grad():
                self.act.weight.copy_(torch.linspace(-0.3, 0.6, o))

    def forward(self, x):
        return self.act(self.conv(x))


@st.composite
def conv_cases(draw):
    kh, kw = draw(st.integers(1, 5)), draw(st.integers(1, 5))
    ph, pw = draw(st.integers(0, kh)), draw(st.integers(0, kw))
    return {
        "c": draw(st.integers(1, 4)),
        "o": draw(st.integers(1, 6)),
        "kernel": (kh, kw),
        "stride": (draw(st.integers(1, 3)), draw(st.integers(1, 3))),
        "padding": (ph, pw),
        "h": draw(st.integers(max(1, kh - 2 * ph), 12)),
        "w": draw(st.integers(max(1, kw - 2 * pw), 12)),
        "activation": draw(st.sampled_from([None, "relu", "tanh", "prelu"])),
        "bias": draw(st.booleans()),
        "seed": draw(st.integers(0, 2**16)),
    }


def _make(case):
    torch.manual_seed(case["seed"])
    net = Conv(case["c"], case["o"], case["kernel"], case["stride"], case["padding"], case["activation"], case["bias"]).eval()
    rng = np.random.default_rng(case["seed"])
    x = (rng.standard_normal((3, case["c"], case["h"], case["w"])) * 2).astype(np.float32)
    return net, x


def _torch(net, x):
    with torch.no_grad():
        return net(torch.from_numpy(x)).numpy()


# ------------------------------------------------------------------------------- fp32


def _fp32_reference(net, x: np.ndarray, table=None) -> np.ndarray:
    """float32 loop in the documented order: bias, then k = (c, i, j); no FMA."""
    conv = net.conv
    w = conv.weight.detach().numpy().astype(np.float32)
    ph, pw = conv.padding
    cols = F.unfold(torch.from_numpy(x), conv.kernel_size, padding=(ph, pw), stride=conv.stride).numpy()  # (N, K, P)
    o = w.shape[0]
    acc = np.zeros((x.shape[0], o, cols.shape[2]), dtype=np.float32)
    if conv.bias is not None:
        acc += conv.bias.detach().numpy().astype(np.float32)[None, :, None]
    wk = w.reshape(o, -1)
    for k in range(wk.shape[1]):
        acc = acc + (cols[:, None, k, :] * wk[None, :, k, None]).astype(np.float32)
    oh = (x.shape[2] + 2 * ph - conv.kernel_size[0]) // conv.stride[0] + 1
    y = acc.reshape(x.shape[0], o, oh, -1)
    a = net.act
    if isinstance(a, torch.nn.ReLU):
        y = np.maximum(y, np.float32(0))
    elif isinstance(a, torch.nn.Tanh):
        y = _thesis_lut(y) if table else np.tanh(y.astype(np.float64)).astype(np.float32)
    elif isinstance(a, torch.nn.PReLU):
        s = a.weight.detach().numpy().astype(np.float32)[None, :, None, None]
        y = np.where(y >= 0, y, y * s)
    return y


@settings(max_examples=60, deadline=None)
@given(case=conv_cases())
def test_fp32_emulation_matches_pytorch_and_the_documented_order(case):
    net, x = _make(case)
    emu = aieflow.emulate(net, device="vck190", example_input=x, config={"precision": "fp32"})
    got = emu.predict(x)
    want = _torch(net, x)
    assert got.dtype == np.float32 and got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=2e-5 * (1 + np.abs(want).max()))
    np.testing.assert_array_equal(got, _fp32_reference(net, x))


# ------------------------------------------------------------------------------- fixed point


def _round_half_even_shift(v: int, shift: int) -> int:
    if shift <= 0:
        return v << -shift
    q, r = v >> shift, v & ((1 << shift) - 1)
    half = 1 << (shift - 1)
    return q + (r > half or (r == half and q & 1))


def _round_half_even_scaled(num: int, num_frac: int, out_frac: int) -> int:
    return _round_half_even_shift(num, num_frac - out_frac)


def _sat(v: int, width: int) -> int:
    return max(-(1 << (width - 1)), min((1 << (width - 1)) - 1, v))


def _wrap(v: int, bits: int) -> int:
    return ((v + (1 << (bits - 1))) % (1 << bits)) - (1 << (bits - 1))


def _codes(v: np.ndarray, frac: int, width: int) -> np.ndarray:
    """Round half to even, saturate: aieflow's documented quantiser (np.rint is half to even)."""
    lo, hi = -(2 ** (width - 1)), 2 ** (width - 1) - 1
    return np.clip(np.rint(np.asarray(v, dtype=np.float64) * 2.0**frac), lo, hi).astype(np.int64)


def _c_round(v: Fraction) -> int:
    """C round(): half away from zero."""
    return int(math.copysign(math.floor(abs(v) + Fraction(1, 2)), v))


def _thesis_entry(k: int) -> int:
    """Entry k of the thesis's table, in 1/256 units: tanh((k - 512) / 128) rounded (no ties)."""
    return round(math.tanh((k - 512) / 128) * 256)


def _thesis_index(x: Fraction) -> int:
    return min(max(512 + _c_round(x * 128), 0), 1023)


def _thesis_lut(y: np.ndarray) -> np.ndarray:
    flat = [_thesis_entry(_thesis_index(Fraction(float(v)))) / 256 for v in y.reshape(-1)]
    return np.array(flat, dtype=np.float32).reshape(y.shape)


def int_reference(net, xq: np.ndarray, types, params, table=False) -> np.ndarray:
    """Independent integer convolution: unfold the codes, int64 einsum, Python-integer SRS."""
    core = types.core
    conv = net.conv
    ph, pw = conv.padding
    cols = F.unfold(torch.from_numpy(xq.astype(np.float64)), conv.kernel_size, padding=(ph, pw), stride=conv.stride)
    cols = cols.numpy().astype(np.int64)  # codes < 2^16: exact through float64
    w = conv.weight.detach().numpy().astype(np.float64)
    o = w.shape[0]
    wq = _codes(w, core.weight.frac, core.weight.width).reshape(o, -1)
    acc = np.einsum("nkp,ok->nop", cols, wq)
    if conv.bias is not None:
        bq = _codes(conv.bias.detach().numpy(), core.bias.frac, core.bias.width)
        acc = acc + (bq << (core.acc_frac - core.bias.frac))[None, :, None]
    a = net.act
    out_w = types.output.width
    y = np.zeros(acc.shape, dtype=np.int64)
    for idx in np.ndindex(acc.shape):
        v = _wrap(int(acc[idx]), core.acc_bits) if core.acc_bits < 64 else int(acc[idx])
        pre = _sat(_round_half_even_shift(v, core.acc_frac - core.output.frac), core.output.width)
        if isinstance(a, torch.nn.ReLU):
            pre = max(pre, 0)
        if isinstance(a, torch.nn.Tanh):
            if table:
                e = _thesis_entry(_thesis_index(Fraction(pre) / Fraction(2) ** core.output.frac))
                pre = _sat(_round_half_even_scaled(e, 8, types.output.frac), out_w)
            else:
                t = math.tanh(pre * 2.0**-core.output.frac)
                pre = _sat(int(np.rint(t * 2.0**types.output.frac)), out_w)
        elif isinstance(a, torch.nn.PReLU):
            if pre >= 0:
                pre = _sat(_round_half_even_scaled(pre, core.output.frac, types.output.frac), out_w)
            else:
                s = int(params["slope_q"][idx[1]])
                pre = _sat(_round_half_even_scaled(pre * s, core.output.frac + types.slope.frac, types.output.frac), out_w)
        y[idx] = pre
    oh = (xq.shape[2] + 2 * ph - conv.kernel_size[0]) // conv.stride[0] + 1
    return y.reshape(xq.shape[0], o, oh, -1)


@settings(max_examples=40, deadline=None)
@given(case=conv_cases(), precision=st.sampled_from(["int8", "int16", "a16w8"]), device=st.sampled_from(["vck190", "vek280"]))
def test_quantised_conv_is_bit_exact_against_an_integer_reference(case, precision, device):
    net, x = _make(case)
    emu = aieflow.emulate(net, device=device, example_input=x, calibration=x, config={"precision": precision})
    (node,) = emu.graph.nodes
    got = emu.predict(x, raw=True)
    xq = emu.quantise_input(x).astype(np.int64)
    np.testing.assert_array_equal(got, int_reference(net, xq, node.types, node.params))
    if case["activation"] == "prelu":
        np.testing.assert_array_equal(node.params["slope_q"], _codes(net.act.weight.detach().numpy(), node.types.slope.frac, node.types.slope.width))


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


@pytest.mark.parametrize("activation", [None, "relu", "tanh", "prelu"])
@pytest.mark.parametrize("precision, width", [("int8", 8), ("int16", 16)])
def test_ptq_types_follow_the_dense_rules(activation, precision, width):
    case = {"c": 3, "o": 5, "kernel": (3, 3), "stride": (1, 2), "padding": (1, 0), "h": 9, "w": 10, "activation": activation, "bias": True, "seed": 4}
    net, x = _make(case)
    emu = aieflow.emulate(net, device="vek280", example_input=x, calibration=x, config={"precision": precision})
    t = emu.graph.nodes[0].types
    conv = net.conv.double()
    with torch.no_grad():
        pre = conv(torch.from_numpy(x.astype(np.float64))).numpy()
        out = net.act.double()(torch.from_numpy(pre)).numpy()
    f_in = _frac_for(float(np.abs(x).max()), width)
    f_w = _frac_for(float(net.conv.weight.detach().abs().max()), width)
    acc = f_in + f_w
    assert (t.core.input.frac, t.core.weight.frac) == (f_in, f_w)
    assert t.core.bias.frac == min(_frac_for(float(net.conv.bias.detach().abs().max()), 32), acc)
    # the SRS writes the output (none / relu) or the pre-activation (tanh / prelu), no finer than the accumulator
    srs_values = out if activation in (None, "relu") else pre
    assert t.core.output.frac == min(_frac_for(float(np.abs(srs_values).max()), width), acc)
    assert t.output.frac == (t.core.output.frac if activation in (None, "relu") else _frac_for(float(np.abs(out).max()), width))
    assert t.output.width == width and t.core.shift == acc - t.core.output.frac


# ------------------------------------------------------------------------------- tanh table


def test_espcn_thesis_table_matches_the_spec_including_the_clamp_edges():
    spec = act.parse_activation("tanh", "espcn-thesis")
    # entries: tanh((i - 512) / 128) rounded to a multiple of 1/256
    assert spec.codes().tolist() == [_thesis_entry(i) for i in range(1024)]
    assert spec.entry.frac == 8 and spec.entry.width == 12  # ap_fixed<12,4>
    below4 = np.nextafter(np.float32(4), np.float32(0))
    xs = np.array([4.0, 4.5, 1e30, np.inf, below4, 3.99609375, 3.99609374, -4.0, -4.00001, -1e30, -np.inf,
                   -3.99609375, 0.0, 1 / 256, -1 / 256, 0.5 / 128, -0.5 / 128, 1.5 / 128, -1.5 / 128, 0.3], dtype=np.float32)
    got = act.apply_float32(spec, xs)
    want = [_thesis_entry(_thesis_index(Fraction(float(v)))) / 256 if np.isfinite(v) else math.copysign(1.0, v) for v in xs]
    assert got.tolist() == want
    # the spec's edges: 1.0 for x >= 4 (and just below it, where 512 + round(x 128) = 1024 is
    # clamped), -1.0 for x < -4 and at x = -4; C round on the ties +-0.5/128, +-1.5/128
    assert got[:7].tolist() == [1.0] * 7
    assert got[7:11].tolist() == [-1.0] * 4
    assert spec.index_of_floats(np.array([below4, -4.0, 0.5 / 128, -0.5 / 128, 1.5 / 128])).tolist() == [1023, 0, 513, 511, 514]


@pytest.mark.parametrize("frac", [6, 9, 12])
def test_espcn_thesis_table_on_fixed_point_inputs(frac):
    spec = act.parse_activation("tanh", "espcn-thesis")
    codes = np.arange(-(6 << frac), (6 << frac) + 1, 1 << max(0, frac - 8), dtype=np.int64)
    idx = spec.index_of_codes(codes, frac)
    assert idx.tolist() == [_thesis_index(Fraction(int(c), 2**frac)) for c in codes]


@pytest.mark.parametrize("precision", ["fp32", "int8", "int16"])
def test_conv_with_the_thesis_tanh_table(precision):
    case = {"c": 2, "o": 4, "kernel": (3, 3), "stride": (1, 1), "padding": (1, 1), "h": 8, "w": 8, "activation": "tanh", "bias": True, "seed": 9}
    net, x = _make(case)
    x = x * 3  # drive the pre-activations past +-4
    cfg = {"precision": precision, "activations": {"tanh": "espcn-thesis"}}
    emu = aieflow.emulate(net, device="vck190", example_input=x, calibration=x, config=cfg)
    node = emu.graph.nodes[0]
    assert act.describe(node.types.tanh).startswith("tanh: espcn-thesis table")
    if precision == "fp32":
        got = emu.predict(x)
        np.testing.assert_array_equal(got, _fp32_reference(net, x, table=True))
        assert np.abs(got).max() == 1.0
    else:
        got = emu.predict(x, raw=True)
        np.testing.assert_array_equal(got, int_reference(net, emu.quantise_input(x).astype(np.int64), node.types, node.params, table=True))
    # a layer setting overrides the top level
    per_layer = {"precision": precision, "activations": {"tanh": "espcn-thesis"}, "layers": {"conv": {"activations": {"tanh": "exact"}}}}
    emu2 = aieflow.emulate(net, device="vck190", example_input=x, calibration=x, config=per_layer)
    assert isinstance(emu2.graph.nodes[0].types.tanh, act.ExactActivation)
