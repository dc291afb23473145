"""BatchNorm folded forward into the layer after it (issue 17 item 5): a BatchNorm that cannot fold
into the layer before it (the model input, after a ReLU, a pooling, a residual Add) but directly
feeds a Linear (after a Flatten too) or an unpadded Conv.

Each model imports from PyTorch and from its ONNX export (the TorchScript exporter without constant
folding, so the file holds the ``BatchNormalization``); the fp32 emulation must equal PyTorch /
onnxruntime in float (1e-5) and int8 ``predict`` must be within the int8 tolerance of
tests/test_frontend_parity.py.  The folded weights are checked against a numpy fold written here
from the BatchNorm formula (``x s + t`` into the next layer's input).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from onnx import helper, numpy_helper
from test_frontend_parity import (
    EPS,
    FP32,
    INT8,
    _close_to_float,
    _export,
    _ort,
    _randomise_bn,
    _torch,
)
from torch import nn

import aieflow
from aieflow.errors import UnsupportedOpError
from aieflow.frontends import import_onnx, import_torch


class ResidualBn(nn.Module):
    """Linear, a residual Add, BatchNorm1d on the sum, Linear: the BatchNorm cannot fold backward."""

    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(16, 16), nn.Linear(16, 16)
        self.bn, self.out = nn.BatchNorm1d(16, eps=EPS), nn.Linear(16, 5)

    def forward(self, x):
        h = torch.relu(self.fc1(x))
        return self.out(self.bn(self.fc2(h) + h))


def _model(name: str):
    torch.manual_seed(0)
    rng = np.random.default_rng(2)
    if name == "jet_mlp":  # hls4ml's jet tagger: BatchNorm1d(16) on the model input
        m = nn.Sequential(
            nn.BatchNorm1d(16, eps=EPS),
            nn.Linear(16, 64),
            nn.ReLU(),
            nn.Linear(64, 32),
            nn.ReLU(),
            nn.Linear(32, 32),
            nn.ReLU(),
            nn.Linear(32, 5),
        )
        x = rng.standard_normal((64, 16)).astype(np.float32) * 2 + 1
    elif name == "relu_bn_mlp":  # Linear -> ReLU -> BatchNorm -> Linear
        m = nn.Sequential(
            nn.Linear(12, 16), nn.ReLU(), nn.BatchNorm1d(16, eps=EPS), nn.Linear(16, 4)
        )
        x = rng.standard_normal((64, 12)).astype(np.float32)
    elif name == "residual_bn":
        m, x = ResidualBn(), rng.standard_normal((64, 16)).astype(np.float32)
    elif (
        name == "pool_bn_flatten"
    ):  # MaxPool -> BatchNorm2d -> Flatten -> Linear: s, t repeated per position
        m = nn.Sequential(
            nn.Conv2d(1, 4, 3),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.BatchNorm2d(4, eps=EPS),
            nn.Flatten(),
            nn.Linear(4 * 3 * 3, 6),
        )
        x = rng.random((32, 1, 8, 8), dtype=np.float32)
    elif name == "relu_bn_conv":  # Conv -> ReLU -> BatchNorm2d -> unpadded grouped Conv
        m = nn.Sequential(
            nn.Conv2d(2, 4, 3, padding=1),
            nn.ReLU(),
            nn.BatchNorm2d(4, eps=EPS),
            nn.Conv2d(4, 6, 3, groups=2),
            nn.ReLU(),
            nn.Flatten(),
            nn.Linear(6 * 6 * 6, 5),
        )
        x = rng.random((32, 2, 8, 8), dtype=np.float32) * 2 - 1
    else:  # pragma: no cover
        raise KeyError(name)
    return _randomise_bn(m, seed=11), x


MODELS = ("jet_mlp", "relu_bn_mlp", "residual_bn", "pool_bn_flatten", "relu_bn_conv")


def _bn_and_next(model: nn.Module) -> tuple[nn.Module, nn.Module]:
    mods = [
        m
        for m in model.modules()
        if isinstance(m, nn.BatchNorm1d | nn.BatchNorm2d | nn.Linear | nn.Conv2d)
    ]
    i = next(i for i, m in enumerate(mods) if isinstance(m, nn.modules.batchnorm._BatchNorm))
    return mods[i], mods[i + 1]


def _numpy_forward_fold(bn, layer, span: int = 1):
    """The next layer's (weight, bias) with ``x s + t`` folded into its input, from the formula."""
    s = bn.weight.detach().double().numpy() / np.sqrt(bn.running_var.double().numpy() + bn.eps)
    t = bn.bias.detach().double().numpy() - bn.running_mean.double().numpy() * s
    w = layer.weight.detach().double().numpy()
    b = layer.bias.detach().double().numpy()
    if isinstance(
        layer, nn.Linear
    ):  # (out, in); channel c covers inputs c * span .. (c + 1) * span - 1
        s, t = np.repeat(s, span), np.repeat(t, span)
        return (w * s[None, :]).T, b + w @ t
    per_group = w.shape[1]  # (O, C / groups, kh, kw)
    out_per_group = w.shape[0] // layer.groups
    ws, bs = np.empty_like(w), b.copy()
    for o in range(w.shape[0]):
        chans = (o // out_per_group) * per_group + np.arange(per_group)
        ws[o] = w[o] * s[chans][:, None, None]
        bs[o] += (w[o] * t[chans][:, None, None]).sum()
    return ws, bs


@pytest.mark.parametrize("name", MODELS)
def test_forward_folded_weights_equal_an_independent_numpy_fold(name):
    model, x = _model(name)
    bn, layer = _bn_and_next(model)
    span = 9 if name == "pool_bn_flatten" else 1
    want_w, want_b = _numpy_forward_fold(bn, layer, span)
    proto = _export(model, x[:2], "torchscript-nofold")
    assert "BatchNormalization" in [n.op_type for n in proto.graph.node]
    for source, graph in {
        "pytorch": import_torch(model, x[:2]).graph,
        "onnx": import_onnx(proto).graph,
    }.items():
        assert all(n.op != "batchnorm" for n in graph.nodes), source
        folded = [
            n
            for n in graph.nodes
            if n.op in ("conv2d", "dense")
            and n.params["weight"].shape == want_w.shape
            and np.allclose(n.params["weight"], want_w, rtol=1e-5, atol=1e-6)
        ]
        assert len(folded) == 1, source
        node = folded[0]
        np.testing.assert_allclose(
            node.params["weight"], want_w, rtol=1e-6, atol=1e-7, err_msg=source
        )
        bias = node.params.get("bias")
        if bias is None:  # ONNX MatMul + Add: the shift is in the Add's bias
            bias = next(
                n for n in graph.nodes if n.op == "bias_add" and node.outputs[0] in n.inputs
            ).params["bias"]
        np.testing.assert_allclose(bias, want_b, rtol=1e-5, atol=1e-6, err_msg=source)


@pytest.mark.parametrize("name", MODELS)
def test_forward_folded_models_equal_pytorch_and_onnxruntime_in_float(name):
    model, x = _model(name)
    want = _torch(model, x)
    proto = _export(model, x[:2], "torchscript-nofold")
    np.testing.assert_allclose(_ort(proto, x), want, rtol=1e-5, atol=1e-5)  # the export itself
    for source in (model, proto):
        emu = aieflow.emulate(source, device="vck190", example_input=x[:2], config=FP32)
        assert all(n.op != "batchnorm" for n in emu.graph.nodes)
        np.testing.assert_allclose(emu.predict(x), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", ["jet_mlp", "residual_bn", "pool_bn_flatten"])
def test_forward_folded_models_predict_in_int8_within_tolerance_from_both_frontends(name):
    model, x = _model(name)
    for source in (model, _export(model, x[:2], "torchscript-nofold")):
        design = aieflow.compile(
            source, device="vek280", example_input=x[:2], calibration=x, config=INT8
        )
        assert all(n.op != "batchnorm" for n in design.graph.nodes)
        _close_to_float(design, model, x)


def test_the_batchnorm_name_answers_for_the_layer_it_folded_into():
    model, x = _model("jet_mlp")
    graph = import_torch(model, x[:2]).graph
    assert graph.node("0") is graph.node("1")  # the BatchNorm's name finds the Linear after it


def test_an_onnx_batchnorm_on_the_input_folds_into_a_matmul_add():
    rng = np.random.default_rng(4)
    c = 6
    inits = {
        "scale": rng.random(c) + 0.5,
        "beta": rng.random(c) - 0.5,
        "mean": rng.random(c) - 0.5,
        "var": rng.random(c) + 0.1,
        "w": rng.standard_normal((c, 4)),
        "b": rng.standard_normal(4),
    }
    nodes = [
        helper.make_node(
            "BatchNormalization",
            ["x", "scale", "beta", "mean", "var"],
            ["n"],
            name="norm",
            epsilon=EPS,
        ),
        helper.make_node("MatMul", ["n", "w"], ["mm"], name="mm"),
        helper.make_node("Add", ["mm", "b"], ["y"], name="add"),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", 1, ["N", c])],
        [helper.make_tensor_value_info("y", 1, ["N", 4])],
        initializer=[
            numpy_helper.from_array(np.asarray(v, np.float32), k) for k, v in inits.items()
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 15)], ir_version=8)
    x = rng.standard_normal((8, c)).astype(np.float32)
    emu = aieflow.emulate(model, device="vck190", example_input=x, config=FP32)
    assert [n.op for n in emu.graph.nodes] == ["dense"]
    np.testing.assert_allclose(emu.predict(x), _ort(model, x), rtol=1e-5, atol=1e-5)


def test_a_padded_convolution_after_a_batchnorm_is_not_folded_forward():
    """Zero padding is not shifted by t: folding would change the border outputs, so it is refused."""
    model = nn.Sequential(
        nn.Conv2d(2, 4, 3), nn.ReLU(), nn.BatchNorm2d(4), nn.Conv2d(4, 4, 3, padding=1)
    ).eval()
    with pytest.raises(
        UnsupportedOpError,
        match=r"layer '2': BatchNorm folds neither .*convolution '3' after it pads",
    ):
        import_torch(model, np.zeros((2, 2, 8, 8), np.float32))
