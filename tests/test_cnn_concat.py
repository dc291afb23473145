"""Channel concatenation on the CNN stream mapping (issue 25 item 1: U-Net-style skips,
``torch.cat(dim=1)`` / ONNX ``Concat`` axis 1): the convolution that reads a concat runs its cascade
over the parts' windows in channel order (``cnn/stages.Concat``, ``plan.concat_sources``), checked

* against PyTorch (predict within the int8 tolerance) and the ONNX export (same predictions);
* in the lowering: each cascade position's input window comes from the producer row that holds its
  channels (the plan's ``sources``), derived here by hand from the channel counts;
* in the model: the concat window's DMA step and its two-frame buffer bound, by hand;
* on x86: the generated C++ against predict, bit for bit (one build);
* what does not map is refused by name.
"""

from __future__ import annotations

import shutil

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

import aieflow  # noqa: E402
from aieflow.cnn.emit import lower  # noqa: E402
from aieflow.errors import AieflowError, PlanError  # noqa: E402

needs_cxx = pytest.mark.skipif(shutil.which("g++") is None, reason="g++ not found: verify builds C++20 with g++")


class UNet(nn.Module):
    """One U-Net level: encoder conv a, 2 x 2 max pooling, conv b, nearest 2 x upsampling, and the
    decoder conv c on the concat of the upsampled b (6 ch), the skip a (3 ch) and the input (3 ch)."""

    def __init__(self, mode="nearest"):
        super().__init__()
        torch.manual_seed(0)
        self.a = nn.Conv2d(3, 3, 3, padding=1)
        self.pool = nn.MaxPool2d(2)
        self.b = nn.Conv2d(3, 6, 3, padding=1)
        self.up = nn.Upsample(scale_factor=2, mode=mode)
        self.c = nn.Conv2d(12, 4, 3, padding=1)

    def forward(self, x):
        h = torch.relu(self.a(x))
        g = self.up(torch.relu(self.b(self.pool(h))))
        return self.c(torch.cat([g, h, x], dim=1))


class Pair(nn.Module):
    """conv a -> conv b, then conv c on cat(b, a) (4 + 4 channels)."""

    def __init__(self, a_out=4):
        super().__init__()
        torch.manual_seed(1)
        self.a = nn.Conv2d(3, a_out, 3, padding=1)
        self.b = nn.Conv2d(a_out, 4, 3, padding=1)
        self.c = nn.Conv2d(4 + a_out, 2, 3, padding=1)

    def forward(self, x):
        h = torch.relu(self.a(x))
        return self.c(torch.cat([torch.relu(self.b(h)), h], dim=1))


def _data(n: int, seed: int, hw=(8, 8)) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, 3, *hw)).astype(np.float32)


def _compile(model, device="vek280", precision="int8", **config):
    cal = _data(64, 1)
    return aieflow.compile(model, device, cal[:1], calibration=cal, config={"precision": precision, **config})


@pytest.fixture(scope="module")
def unet():
    return _compile(UNet().eval(), cnn={"replicas": 1})


def test_unet_concat_maps_its_parts_in_channel_order(unet):
    names = [s.name for s in unet.plan.stages]
    assert names == ["a", "pool", "b", "c"]
    # a concat converts nothing: calibration gives its parts one type (through b's upsampling)
    assert unet.plan.stages[0].out_type == unet.plan.stages[2].out_type == unet.plan.stages[0].in_type
    c = unet.plan.stages[3]
    assert c.concat is not None and [(k, ch) for k, _, ch in c.concat.parts] == [(2, 6), (0, 3), (-1, 3)]
    lay = unet.plan.layers[3]
    # by hand: windows of 3 channels each: b's 6 channels in 2 rows, a's 3 in 1, the input's 3 in 1
    assert unet.plan.layers[2].cas_num == 2 and unet.plan.layers[0].cas_num == 1
    assert lay.in_group == 3 and lay.cas_len == 4
    assert lay.sources == ((2, 0), (2, 1), (0, 0), (-1, 0))
    assert lay.to_json()["sources"] == [[2, 0], [2, 1], [0, 0], [-1, 0]]
    assert "reads the concat" in unet.summary()


def test_unet_lowering_reads_each_window_from_its_producer_row(unet):
    g = lower(unet.plan)
    feeds = {(lk.dst.owner, lk.dst.index): (lk.kind, lk.src.owner) for lk in g.links if lk.kind in ("buffer", "plio")}
    # the cascade positions of c (row 0): b row 0, b row 1, a row 0 (last tiles), the input PLIO
    want = [("buffer", "k_b_r0_c0"), ("buffer", "k_b_r1_c0"), ("buffer", "k_a_r0_c0"), ("plio", "in0")]
    assert [feeds[(f"k_c_r0_c{j}", 0)] for j in range(4)] == want
    g.check()  # raises on an input fed twice or not at all


def test_unet_predicts_as_pytorch(unet):
    x = _data(16, 2)
    with torch.no_grad():
        want = UNet().eval()(torch.from_numpy(x)).numpy()
    got = unet.predict(x)
    assert got.shape == want.shape == (16, 4, 8, 8)
    assert np.abs(got - want).max() < 0.06 * max(1.0, float(np.abs(want).max()))


def test_concat_model_by_hand(unet):
    e = unet.estimate()
    steps = {s.stage: s for s in e.stages}
    # a's window moves to c's third cascade position by tile DMA; the input's is the PLIO broadcast
    assert steps["c:concat:a"].where == "dma" and not any(n.startswith("c:concat:x") for n in steps)
    # the concat of the input holds its window for two frames from the input PLIO to c: the interval
    # is at least half of the steps input, a, pool, b, c (and at least the slowest step)
    chain = [steps[n].seconds for n in ("input", "a", "pool", "b", "c")]
    # (the input PLIO's window is a ping-pong buffer in each tile it is broadcast to: two frames)
    assert e.interval_s == pytest.approx(max(max(s.seconds for s in e.stages), sum(chain) / 2))
    if sum(chain) / 2 > max(s.seconds for s in e.stages):
        assert e.bound.startswith("buffers: the windows of input (read by a, c) are full"), e.bound


def test_onnx_export_imports_the_same_concat(tmp_path, unet):
    path = tmp_path / "unet.onnx"
    torch.onnx.export(UNet().eval(), torch.from_numpy(_data(1, 0)), str(path), input_names=["x"],
                      output_names=["y"], dynamo=False)
    b = _compile(str(path), cnn={"replicas": 1})
    assert [s.kind for s in b.plan.stages] == [s.kind for s in unet.plan.stages]
    assert b.plan.layers[-1].sources == unet.plan.layers[-1].sources
    x = _data(8, 5)
    np.testing.assert_array_equal(b.predict(x), unet.predict(x))


@needs_cxx
def test_unet_verifies_bit_exact_on_x86(unet):
    v = unet.verify(samples=3)
    assert v.ok and v.mismatches == 0 and v.values == 3 * 4 * 8 * 8


@needs_cxx
def test_bilinear_unet_on_aie1_verifies_bit_exact():
    """The decoder's upsampling bilinear (fused into b's last tiles), on VCK190 int16."""
    model = UNet("bilinear").eval()
    d = _compile(model, device="vck190", precision="int16", cnn={"replicas": 1})
    assert d.plan.stages[2].up_mode == "half_pixel" and d.plan.layers[3].sources[-1] == (-1, 0)
    x = _data(8, 3)
    with torch.no_grad():
        want = model(torch.from_numpy(x)).numpy()
    assert np.abs(d.predict(x) - want).max() < 2e-3 * max(1.0, float(np.abs(want).max()))
    v = d.verify(samples=3)
    assert v.ok and v.mismatches == 0 and v.values == 3 * 4 * 8 * 8


def test_mismatched_windows_are_refused_by_name():
    with pytest.raises(PlanError, match="different channel counts") as e:
        _compile(Pair(a_out=4).eval(), layers={"a": {"mapping": {"groups": 2}}, "b": {"mapping": {"groups": 1}}})
    assert "groups" in str(e.value)


def test_concat_read_twice_or_along_height_is_refused_by_name():
    class Twice(Pair):
        def forward(self, x):
            h = torch.relu(self.a(x))
            cat = torch.cat([torch.relu(self.b(h)), h], dim=1)
            return self.c(cat) + self.c(cat)

    class Height(Pair):
        def forward(self, x):
            h = torch.relu(self.a(x))
            return torch.cat([torch.relu(self.b(h)), h], dim=2)

    for model, what in ((Twice(), "read by 2 layer"), (Height(), "along axis 2")):
        with pytest.raises(AieflowError, match=what) as e:
            _compile(model.eval())
        assert e.value.layer is not None


def test_thesis_mapping_refuses_concat():
    with pytest.raises(PlanError, match="stream mapping only"):
        _compile(Pair().eval(), device="vck190", precision="fp32", cnn={"mapping": "thesis"})
