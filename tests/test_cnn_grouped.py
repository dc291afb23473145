"""Grouped, depthwise, separable and dilated convolutions, and SELU / ELU / LeakyReLU after a
convolution (issue 25, item 1), against independent references:

* float: PyTorch's own grouped / dilated ``F.conv2d`` (fp32 emulation within float tolerance);
* fixed point: the integer codes convolved by PyTorch's ``F.conv2d`` in float64 with the model's
  ``groups`` and ``dilation`` (exact: codes < 2^16, sums < 2^53), then the shift-round-saturate
  restated in Python integers (``test_conv_numerics``'s helpers): exact equality, so the grouped
  index arithmetic (which input channels each output channel reads) and the dilated taps are
  checked against an implementation that shares nothing with aieflow's;
* the CNN stream mapping: predict within tolerance of PyTorch, and x86 verify of the generated
  kernels bit for bit against the emulator, from PyTorch and from its ONNX export.
"""

from __future__ import annotations

import shutil

import numpy as np
import pytest

import aieflow
from aieflow.errors import ModelError, PlanError
from aieflow.ops import conv as conv_ops

torch = pytest.importorskip("torch")
nn = torch.nn
F = torch.nn.functional

from test_conv_numerics import _codes, _round_half_even_shift, _sat, _wrap  # noqa: E402

needs_cxx = pytest.mark.skipif(shutil.which("g++") is None, reason="g++ not found: verify builds C++20 with g++")

# (in channels, out channels, kernel, padding, stride, dilation, groups)
CASES = {
    "depthwise": (4, 4, 3, 1, 1, 1, 4),
    "depthwise-multiplier-2": (3, 6, 3, 1, 1, 1, 3),
    "grouped": (6, 4, (3, 2), (1, 0), 1, 1, 2),
    "grouped-strided": (4, 8, 3, 1, 2, 1, 4),
    "dilated": (3, 5, 3, 2, 1, 2, 1),
    "dilated-asymmetric": (2, 3, (2, 3), (1, 2), (1, 2), (2, 1), 1),
    "depthwise-dilated": (4, 4, 3, 3, 1, 3, 4),
}


def _conv(case: str, seed: int = 0) -> nn.Sequential:
    c, o, k, p, s, d, g = CASES[case]
    torch.manual_seed(seed)
    return nn.Sequential(nn.Conv2d(c, o, k, padding=p, stride=s, dilation=d, groups=g)).eval()


def _x(c: int, n: int, seed: int, hw=(9, 10)) -> np.ndarray:
    return (np.random.default_rng(seed).standard_normal((n, c, *hw)) * 1.5).astype(np.float32)


@pytest.mark.parametrize("case", sorted(CASES))
def test_fp32_emulation_matches_pytorch(case):
    model = _conv(case)
    m = model[0]
    x = _x(m.in_channels, 3, 1)
    emu = aieflow.emulate(model, device="vck190", example_input=x, config={"precision": "fp32"})
    (node,) = emu.graph.nodes
    assert node.attrs.get("groups", 1) == m.groups and node.params["weight"].shape[1] == m.in_channels // m.groups
    with torch.no_grad():
        want = m(torch.from_numpy(x)).numpy()
    got = emu.predict(x)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=2e-5 * (1 + np.abs(want).max()))


def _int_reference(m: nn.Conv2d, xq: np.ndarray, types) -> np.ndarray:
    """Codes through PyTorch's grouped / dilated convolution in float64, then SRS in Python ints."""
    core = types.core
    wq = _codes(m.weight.detach().numpy(), core.weight.frac, core.weight.width)
    acc = F.conv2d(torch.from_numpy(xq.astype(np.float64)), torch.from_numpy(wq.astype(np.float64)), None,
                   m.stride, m.padding, m.dilation, m.groups).numpy()
    assert np.abs(acc).max() < 2**52
    acc = acc.astype(np.int64)
    if m.bias is not None:
        bq = _codes(m.bias.detach().numpy(), core.bias.frac, core.bias.width)
        acc = acc + (bq << (core.acc_frac - core.bias.frac))[None, :, None, None]
    out = np.zeros(acc.shape, dtype=np.int64)
    for idx in np.ndindex(acc.shape):
        v = _wrap(int(acc[idx]), core.acc_bits) if core.acc_bits < 64 else int(acc[idx])
        out[idx] = _sat(_round_half_even_shift(v, core.acc_frac - core.output.frac), core.output.width)
    return out


@pytest.mark.parametrize("precision", ["int8", "int16"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_quantised_emulation_is_bit_exact_against_pytorch_on_the_codes(case, precision):
    model = _conv(case, seed=3)
    m = model[0]
    x = _x(m.in_channels, 3, 4)
    x[0, :, 0, :] = 40.0  # edge values: saturated input codes on one row
    x[1, :, :, 0] = -40.0
    emu = aieflow.emulate(model, device="vek280", example_input=x, calibration=x[1:], config={"precision": precision})
    (node,) = emu.graph.nodes
    xq = emu.quantise_input(x).astype(np.int64)
    got = emu.predict(x, raw=True)
    np.testing.assert_array_equal(got, _int_reference(m, xq, node.types))


def test_full_weight_is_block_diagonal_by_hand():
    """Two groups of two input / one output channel, written out: the second output channel reads
    only input channels 2 and 3."""
    w = np.arange(1, 5, dtype=np.float32).reshape(2, 2, 1, 1)  # (O=2, C/g=2, 1, 1)
    full = conv_ops.full_weight(w, 2)[:, :, 0, 0]
    np.testing.assert_array_equal(full, [[1, 2, 0, 0], [0, 0, 3, 4]])


class Separable(nn.Module):
    """Depthwise (dilated) 3 x 3 + pointwise 1 x 1, twice, each with its own activation."""

    def __init__(self, act1: nn.Module, act2: nn.Module):
        super().__init__()
        torch.manual_seed(0)
        self.dw1 = nn.Conv2d(3, 3, 3, padding=1, groups=3)
        self.pw1 = nn.Conv2d(3, 8, 1)
        self.a1 = act1
        self.dw2 = nn.Conv2d(8, 8, 3, padding=2, dilation=2, groups=8)
        self.pw2 = nn.Conv2d(8, 6, 1)
        self.bn = nn.BatchNorm2d(6)
        self.a2 = act2
        with torch.no_grad():
            self.bn.running_mean.uniform_(-0.3, 0.3)
            self.bn.running_var.uniform_(0.5, 2.0)

    def forward(self, x):
        return self.a2(self.bn(self.pw2(self.dw2(self.a1(self.pw1(self.dw1(x)))))))


ACTS = {"relu": nn.ReLU, "leaky_relu": lambda: nn.LeakyReLU(0.1), "elu": nn.ELU, "selu": nn.SELU}


def _data(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, 3, 8, 8)).astype(np.float32)


def _compile(model, device, precision):
    cal = _data(64, 1)
    return aieflow.compile(model, device, cal[:1], calibration=cal, config={"precision": precision})


@needs_cxx
@pytest.mark.parametrize("device, precision, act1, act2", [
    ("vek280", "int8", "relu", "selu"),
    ("vek280", "int16", "leaky_relu", "elu"),
    ("vek280", "int8", "elu", "leaky_relu"),
    ("vck190", "int8", "selu", "relu"),
])
def test_separable_cnn_predicts_and_verifies_bit_exact(device, precision, act1, act2):
    model = Separable(ACTS[act1](), ACTS[act2]()).eval()
    d = _compile(model, device, precision)
    names = [s.name for s in d.plan.stages]
    assert names == ["dw1", "pw1", "dw2", "pw2"]
    posts = [s.post.function if s.post else s.activation for s in d.plan.stages]
    assert posts[1] == act1 and posts[3] == act2 and posts[0] is None and posts[2] is None
    x = _data(24, 2)
    with torch.no_grad():
        want = model(torch.from_numpy(x)).numpy()
    tol = {"int8": 0.05, "int16": 1e-3}[precision] * max(1.0, float(np.abs(want).max()))
    assert np.abs(d.predict(x) - want).max() < tol
    v = d.verify(samples=3)
    assert v.ok and v.mismatches == 0 and v.values == 3 * 6 * 8 * 8


@needs_cxx
def test_fp32_separable_cnn_on_aie1_verifies_bit_exact():
    model = Separable(nn.ReLU(), nn.Identity()).eval()
    d = _compile(model, "vck190", "fp32")
    x = _data(8, 3)
    with torch.no_grad():
        want = model(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(d.predict(x), want, rtol=1e-4, atol=1e-5)
    v = d.verify(samples=2)
    assert v.ok and v.mismatches == 0


def test_onnx_export_imports_the_same_grouped_dilated_model(tmp_path):
    pytest.importorskip("onnx")
    model = Separable(nn.SELU(), nn.LeakyReLU(0.2)).eval()
    path = tmp_path / "sep.onnx"
    torch.onnx.export(model, torch.from_numpy(_data(1, 0)), str(path), input_names=["x"], output_names=["y"],
                      dynamo=False)
    a, b = _compile(model, "vek280", "int8"), _compile(str(path), "vek280", "int8")
    assert [s.geometry for s in a.plan.stages] == [s.geometry for s in b.plan.stages]
    x = _data(16, 5)
    np.testing.assert_array_equal(a.predict(x), b.predict(x))


def test_conv1d_grouped_and_dilated_match_pytorch():
    torch.manual_seed(0)
    m = nn.Sequential(nn.Conv1d(4, 8, 3, padding=2, dilation=2, groups=2), nn.ReLU(),
                      nn.Conv1d(8, 8, 5, groups=8)).eval()
    x = np.random.default_rng(0).standard_normal((4, 4, 20)).astype(np.float32)
    emu = aieflow.emulate(m, device="vck190", example_input=x, config={"precision": "fp32"})
    with torch.no_grad():
        want = m(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(emu.predict(x), want, rtol=1e-5, atol=1e-5)


def test_bad_groups_are_named_errors():
    w = np.zeros((4, 2, 3, 3), dtype=np.float32)
    with pytest.raises(ModelError, match="groups=3 must divide") as e:
        conv_ops.make_node("c1", "x", "y", (6, 8, 8), np.zeros((4, 2, 3, 3), np.float32), None, stride=1,
                           padding=(1, 1, 1, 1), groups=3)
    assert e.value.layer == "c1"
    with pytest.raises(ModelError, match="in 2 groups") as e:
        conv_ops.make_node("c2", "x", "y", (6, 8, 8), w, None, stride=1, padding=(1, 1, 1, 1), groups=2)
    assert e.value.layer == "c2"


def test_fp32_elu_after_a_grouped_conv_runs_in_its_stage_and_gelu_is_refused_by_name():
    """fp32 post layers after a convolution (docs/conv.md, float post layers): an ELU after the
    separable block runs in the stage's last tile, within float32 rounding of PyTorch; GELU has no
    fp32 kernel definition and is refused naming the layer."""
    model = Separable(nn.ReLU(), nn.ELU()).eval()
    d = _compile(model, "vck190", "fp32")
    x = _data(16, 2)
    want = model(torch.from_numpy(x)).detach().numpy()
    np.testing.assert_allclose(d.predict(x), want, rtol=1e-5, atol=1e-5)
    with pytest.raises(PlanError, match="gelu") as e:
        _compile(Separable(nn.ReLU(), nn.GELU()).eval(), "vck190", "fp32")
    assert e.value.layer is not None


def test_grouped_and_dilated_stages_report_what_runs():
    """The kernels run the dense equivalent: design.json and the summary say so, with both counts."""
    d = _compile(Separable(nn.ReLU(), nn.ReLU()).eval(), "vek280", "int8")
    stages = {s["name"]: s for s in d.to_json()["stages"]}
    # by hand: dw1 3 x 3 depthwise on 3 channels, 8 x 8 pixels: 64 * 9 * 3 MACs in the model, 3x run
    assert stages["dw1"]["groups"] == 3 and stages["dw1"]["model_macs"] == 64 * 9 * 3
    assert stages["dw1"]["macs"] == 3 * 64 * 9 * 3
    # dw2: depthwise (8 groups) 3 x 3 dilated 2 (a 5 x 5 extent): 64 * 9 * 8 in the model
    assert stages["dw2"]["dilation"] == [2, 2] and stages["dw2"]["model_macs"] == 64 * 9 * 8
    assert stages["dw2"]["macs"] == 64 * 25 * 8 * 8
    assert stages["pw1"]["macs"] == stages["pw1"]["model_macs"] == 64 * 3 * 8
    text = d.summary()
    assert "3 groups run as the dense layer (3x the model's MACs)" in text
    assert "8 groups and dilation (2, 2) run as the dense layer" in text
