"""CNN classifiers with an activation or softmax head (issue 17, items 4 and 5): Conv2d ->
BatchNorm -> ReLU -> pooling -> Flatten -> Dense -> Softmax / Sigmoid compile through the CNN
stream mapping, the head running in the Dense stage's last tile (``cnn/stages.Post``,
``activation_fixed.h``), and verify bit-exact on x86 against the emulator; the layers that cannot
take a post layer are refused by name."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

import aieflow
from aieflow.errors import PlanError

torch = pytest.importorskip("torch")
nn = torch.nn

needs_cxx = pytest.mark.skipif(shutil.which("g++") is None, reason="g++ not found: verify builds C++20 with g++")


def _classifier(head: nn.Module, classes: int = 10) -> nn.Module:
    torch.manual_seed(0)
    m = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                      nn.Linear(8 * 4 * 4, classes), head)
    with torch.no_grad():  # a BatchNorm that is not the identity
        m[1].running_mean.uniform_(-0.5, 0.5)
        m[1].running_var.uniform_(0.5, 2.0)
        m[1].weight.uniform_(0.5, 1.5)
    return m.eval()


def _data(n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, 1, 8, 8)).astype(np.float32)


def _compile(model, device="vek280", precision="int8", **extra):
    cal = _data(64, 1)
    return aieflow.compile(model, device, cal[:1], calibration=cal, config={"precision": precision, **extra})


def _ref(model, x):
    with torch.no_grad():
        return model(torch.from_numpy(x)).numpy()


@needs_cxx
@pytest.mark.parametrize("device, precision, head", [
    ("vek280", "int8", "softmax"),
    ("vek280", "int16", "sigmoid"),  # 16-bit input: the interpolated table
    ("vck190", "int8", "softmax"),
])
def test_head_predicts_and_verifies_bit_exact(device, precision, head):
    model = _classifier(nn.Softmax(dim=1) if head == "softmax" else nn.Sigmoid())
    d = _compile(model, device, precision)
    last = d.plan.stages[-1]
    assert last.post is not None and last.post.function == head and last.kind == "conv"
    x = _data(48, 2)
    y = d.predict(x)
    tol = {"int8": 0.02, "int16": 1e-3}[precision]
    assert np.abs(y - _ref(model, x)).max() < tol
    if head == "softmax":
        assert np.abs(y.sum(axis=1) - 1).max() < 10 * tol  # rows of probabilities
    v = d.verify(samples=24)
    assert v.ok and v.mismatches == 0 and v.values == 24 * 10


def test_head_is_recorded_costed_and_round_trips(tmp_path):
    model = _classifier(nn.Softmax(dim=1))
    d = _compile(model)
    meta = d.to_json()
    assert meta["stages"][-1]["post"] == "softmax"
    assert "then softmax in the last tile" in d.summary()
    plain = _compile(_classifier(nn.Identity()))
    assert plain.plan.stages[-1].post is None
    # the softmax runs in the head's last tile: that stage is slower than without it
    with_head = {p.stage: p.seconds for p in d.estimate().stages}
    without = {p.stage: p.seconds for p in plain.estimate().stages}
    head_stage = d.plan.stages[-1].name
    assert with_head[head_stage] > without[plain.plan.stages[-1].name]
    d.save(tmp_path / "d")
    back = aieflow.load(tmp_path / "d")
    x = _data(16, 3)
    assert np.array_equal(back.predict(x), d.predict(x))
    assert back.plan.stages[-1].post.function == "softmax"


def test_onnx_export_maps_the_same_head(tmp_path):
    pytest.importorskip("onnxscript")
    model = _classifier(nn.Softmax(dim=1))
    path = tmp_path / "m.onnx"
    torch.onnx.export(model, torch.from_numpy(_data(1)), str(path), input_names=["x"], output_names=["y"],
                      dynamo=False)
    a, b = _compile(model), _compile(str(path))
    assert b.plan.stages[-1].post is not None and b.plan.stages[-1].post.function == "softmax"
    x = _data(32, 4)
    assert np.array_equal(a.predict(x), b.predict(x))


def test_softmax_over_pixels_is_refused_by_name():
    torch.manual_seed(0)
    m = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.Softmax(dim=-1)).eval()  # over each row of pixels
    with pytest.raises(PlanError, match="pixel") as e:
        _compile(m)
    assert e.value.layer is not None and "Dense head" in str(e.value)


def test_activation_after_pooling_is_refused_by_name():
    torch.manual_seed(0)
    m = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.MaxPool2d(2), nn.Sigmoid()).eval()
    with pytest.raises(PlanError, match="pooling") as e:
        _compile(m)
    assert "convolution or Dense" in str(e.value)


def test_split_softmax_head_is_refused_by_name():
    model = _classifier(nn.Softmax(dim=1))
    head = aieflow.emulate(model, "vek280", _data(1), config={"precision": "int8"}).graph.nodes
    dense = next(n for n in head if n.op == "dense")
    with pytest.raises(PlanError, match="one tile") as e:
        _compile(model, layers={dense.name: {"mapping": {"groups": 2}}})
    assert "softmax" in str(e.value)


def test_float_head_without_a_kernel_is_refused_by_name():
    # fp32 / bf16 heads run ops/activation.py's float kernels (tests/test_cnn_float_post.py); GELU
    # (erf) has no fp32 kernel definition
    model = _classifier(nn.GELU())
    with pytest.raises(PlanError, match="gelu after a convolution in fp32 has no kernel") as e:
        _compile(model, "vck190", "fp32")
    assert e.value.layer is not None and "int8" in e.value.hint and "sigmoid" in e.value.hint


def test_fp32_and_bf16_heads_predict_close_to_pytorch():
    x = _data(32, 2)
    for head, device, precision, tol in (("sigmoid", "vck190", "fp32", 1e-5), ("softmax", "vek280", "bf16", 0.03)):
        model = _classifier(nn.Softmax(dim=1) if head == "softmax" else nn.Sigmoid())
        d = _compile(model, device, precision)
        assert d.plan.stages[-1].post.function == head
        assert np.abs(d.predict(x) - _ref(model, x)).max() < tol
