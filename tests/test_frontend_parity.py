"""Frontend parity for CNN models (issue 17 item 6, BatchNorm of item 5): BatchNorm folded into the
layer before it, global average pooling written as a mean, 1-D convolutions and pooling.

Each model compiles for vek280 from PyTorch and from its ONNX export (TorchScript exporter with and
without constant folding, dynamo exporter); ``predict`` is checked against PyTorch's float output
within the int8 tolerance of tests/test_conv_import.py, and the two frontends must give the same
quantised graph (node ops, activations, shapes).  Folded weights are checked against a numpy fold
written here from the BatchNorm formula; refused cases must raise an AieflowError naming the layer.
"""

from __future__ import annotations

import contextlib
import functools
import io
import logging
import shutil
import warnings

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
import torch.nn.functional as F
from onnx import TensorProto, helper, numpy_helper
from torch import nn

import aieflow
from aieflow.cnn.design import CnnDesign
from aieflow.errors import AieflowError, UnsupportedOpError
from aieflow.frontends import import_onnx, import_torch

INT8 = {"precision": "int8"}
FP32 = {"precision": "fp32"}
TOL = 0.05  # int8 PTQ vs float, relative to the output's largest magnitude (tests/test_conv_import.py)
EPS = 1e-3  # a BatchNorm eps large enough that forgetting it moves every folded weight by > 1e-4
needs_gxx = pytest.mark.skipif(shutil.which("g++") is None, reason="g++ is not installed")


# ------------------------------------------------------------------------------- models


def _randomise_bn(model: nn.Module, seed: int) -> nn.Module:
    """Non-trivial running statistics and affine parameters (a fresh BatchNorm is the identity)."""
    g = torch.Generator().manual_seed(seed)
    for m in model.modules():
        if isinstance(m, nn.modules.batchnorm._BatchNorm):
            with torch.no_grad():
                c = m.num_features
                m.weight.copy_(torch.rand(c, generator=g) + 0.5)
                m.bias.copy_(torch.rand(c, generator=g) - 0.5)
                m.running_mean.copy_(torch.rand(c, generator=g) - 0.5)
                m.running_var.copy_(torch.rand(c, generator=g) * 1.5 + 0.05)
    return model.eval()


class GapCnn(nn.Module):
    """Conv + ReLU, global average pooling written in one of PyTorch's forms, Linear."""

    def __init__(self, form: str):
        super().__init__()
        self.form = form
        self.conv = nn.Conv2d(2, 8, 3, padding=1)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(8, 5)

    def forward(self, x):
        z = F.relu(self.conv(x))
        if self.form == "method":
            z = z.mean(dim=(2, 3))
        elif self.form == "function":
            z = torch.mean(z, dim=(2, 3))
        elif self.form == "negative":
            z = z.mean((-2, -1))
        elif self.form == "keepdim":
            z = z.mean((2, 3), keepdim=True).flatten(1)
        elif self.form == "adaptive":
            z = torch.flatten(self.pool(z), 1)
        else:
            z = F.adaptive_avg_pool2d(z, 1).flatten(1)
        return self.fc(z)


class Conv1dGap(nn.Module):
    """Conv1d (strided, no bias) + BatchNorm1d + ReLU, mean over the length, Linear."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv1d(3, 8, 5, stride=2, bias=False)
        self.bn = nn.BatchNorm1d(8, eps=EPS)
        self.fc = nn.Linear(8, 4)

    def forward(self, x):
        return self.fc(torch.relu(self.bn(self.conv(x))).mean(-1))


def _model(name: str) -> tuple[nn.Module, np.ndarray]:
    """A fresh model (eval mode, fixed weights) and its calibration / test inputs."""
    torch.manual_seed(0)
    rng = np.random.default_rng(1)
    if name == "bn_cnn":  # the model
        m = nn.Sequential(nn.Conv2d(1, 8, 3), nn.BatchNorm2d(8, eps=EPS), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                          nn.Linear(8 * 7 * 7, 10))
        x = rng.random((16, 1, 16, 16), dtype=np.float32)
    elif name.startswith("gap_"):
        m, x = GapCnn(name[4:]), rng.random((16, 2, 8, 8), dtype=np.float32) * 2 - 1
    elif name == "conv1d_cnn":
        m = nn.Sequential(nn.Conv1d(2, 8, 3, padding=1), nn.BatchNorm1d(8, eps=EPS), nn.ReLU(), nn.MaxPool1d(2),
                          nn.AvgPool1d(2), nn.Flatten(), nn.Linear(8 * 8, 10))
        x = rng.random((16, 2, 32), dtype=np.float32) * 2 - 1
    elif name == "conv1d_seq":  # a sequence out: one stage, a quick x86 build
        m = nn.Sequential(nn.Conv1d(2, 4, 3, padding=1), nn.BatchNorm1d(4, eps=EPS), nn.ReLU())
        x = rng.random((16, 2, 16), dtype=np.float32) * 2 - 1
    elif name == "conv1d_gap":
        m, x = Conv1dGap(), rng.random((16, 3, 40), dtype=np.float32) * 2 - 1
    elif name == "mlp_bn":
        m = nn.Sequential(nn.Linear(12, 16), nn.BatchNorm1d(16, eps=EPS), nn.ReLU(), nn.Linear(16, 4))
        x = rng.random((16, 12), dtype=np.float32) * 2 - 1
    else:  # pragma: no cover
        raise KeyError(name)
    return _randomise_bn(m, seed=7), x


BN_MODELS = ("bn_cnn", "conv1d_cnn", "conv1d_gap", "conv1d_seq", "mlp_bn")
GAP_MODELS = ("gap_method", "gap_function", "gap_negative", "gap_keepdim", "gap_adaptive", "gap_F.adaptive")
EXPORTERS = ("torchscript-nofold", "torchscript", "dynamo")


def _torch(model: nn.Module, x: np.ndarray) -> np.ndarray:
    with torch.no_grad():
        return model(torch.from_numpy(x)).numpy()


def _export(model: nn.Module, x: np.ndarray, exporter: str) -> onnx.ModelProto:
    f = io.BytesIO()
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        logging.disable(logging.WARNING)
        try:
            if exporter == "dynamo":
                torch.onnx.export(model, (torch.from_numpy(x),), f, dynamo=True,
                                  dynamic_shapes=({0: torch.export.Dim("batch")},))
            else:
                torch.onnx.export(model, (torch.from_numpy(x),), f, dynamo=False, input_names=["x"], output_names=["y"],
                                  dynamic_axes={"x": {0: "b"}, "y": {0: "b"}},
                                  do_constant_folding=exporter == "torchscript")
        finally:
            logging.disable(logging.NOTSET)
    return onnx.load_from_string(f.getvalue())


def _ort(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {sess.get_inputs()[0].name: x})[0]


def _signature(graph) -> list[tuple]:
    """What must not depend on the frontend: each node's op, activation and output shape, in order."""
    return [(n.op, n.attrs.get("activation"), tuple(graph.tensors[n.outputs[0]].shape)) for n in graph.nodes]


@functools.cache
def _compiled_from_torch(name: str):
    model, x = _model(name)
    return aieflow.compile(model, device="vek280", example_input=x[:2], calibration=x, config=INT8)


def _compile(model, x):
    return aieflow.compile(model, device="vek280", example_input=x[:2], calibration=x, config=INT8)


def _close_to_float(design, model, x) -> None:
    want = _torch(model, x)
    got = design.predict(x)
    assert got.shape == want.shape
    assert np.abs(got - want).max() < TOL * np.abs(want).max()


# ------------------------------------------------------------------------------- PyTorch and ONNX alike


@pytest.mark.parametrize("exporter", EXPORTERS)
@pytest.mark.parametrize("name", BN_MODELS + GAP_MODELS[:1])
def test_models_compile_from_pytorch_and_onnx_to_the_same_graph(name, exporter):
    model, x = _model(name)
    via_torch = _compiled_from_torch(name)
    assert isinstance(via_torch, CnnDesign) == (name != "mlp_bn")
    _close_to_float(via_torch, model, x)
    proto = _export(model, x[:2], exporter)
    ops = [n.op_type for n in proto.graph.node]
    if exporter == "torchscript-nofold" and name in BN_MODELS:
        assert "BatchNormalization" in ops  # the exporter left the BatchNorm to the importer
    via_onnx = _compile(proto, x)
    assert type(via_onnx) is type(via_torch)
    _close_to_float(via_onnx, model, x)
    assert _signature(via_onnx.graph) == _signature(via_torch.graph)
    assert all(n.op != "batchnorm" for n in via_onnx.graph.nodes)
    if exporter == "torchscript-nofold":  # the same float weights, folded by the same code: the same codes
        np.testing.assert_array_equal(via_onnx.predict(x), via_torch.predict(x))


@pytest.mark.parametrize("name", GAP_MODELS)
def test_global_average_pooling_forms_map_like_the_onnx_frontend(name):
    model, x = _model(name)
    via_torch = _compiled_from_torch(name)
    assert [n.op for n in via_torch.graph.nodes][:2] == ["conv2d", "avgpool"]
    pool = via_torch.graph.nodes[1]
    assert pool.attrs["kernel"] == (8, 8) and pool.attrs["stride"] == (8, 8) and pool.attrs["padding"] == (0, 0, 0, 0)
    _close_to_float(via_torch, model, x)
    via_onnx = _compile(_export(model, x[:2], "torchscript"), x)
    assert _signature(via_onnx.graph) == _signature(via_torch.graph)
    np.testing.assert_array_equal(via_onnx.predict(x), via_torch.predict(x))
    assert [s.kind for s in via_torch.plan.stages] == ["conv", "pool", "conv"]


def test_conv1d_runs_as_a_one_row_conv2d_with_a_1xk_kernel():
    design = _compiled_from_torch("conv1d_cnn")
    ops = [n.op for n in design.graph.nodes]
    assert ops == ["reshape", "conv2d", "maxpool", "avgpool", "reshape", "dense"]  # BN and ReLU folded into the conv
    stages = design.plan.stages
    assert [s.kind for s in stages] == ["conv", "pool", "pool", "conv"]
    assert stages[0].geometry.in_shape == (2, 1, 32) and stages[0].geometry.kernel == (1, 3)
    assert stages[0].geometry.padding == (0, 1, 0, 1)
    assert stages[1].geometry.kernel == (1, 2) and stages[1].geometry.stride == (1, 2)
    assert stages[3].geometry.kernel == (1, 8)  # the Linear: a window over the whole (8, 1, 8) input
    gap = _compiled_from_torch("conv1d_gap")
    assert [s.kind for s in gap.plan.stages] == ["conv", "pool", "conv"]
    assert gap.plan.stages[0].geometry.stride == (1, 2) and gap.plan.stages[1].geometry.kernel == (1, 18)


# ------------------------------------------------------------------------------- the fold, independently


def _numpy_fold(w: np.ndarray, b: np.ndarray | None, bn: nn.modules.batchnorm._BatchNorm, out_axis: int):
    """w * gamma / sqrt(var + eps) along the output channels, (b - mean) * gamma / sqrt(var + eps) + beta."""
    gamma, beta = bn.weight.detach().double().numpy(), bn.bias.detach().double().numpy()
    mean, var = bn.running_mean.double().numpy(), bn.running_var.double().numpy()
    s = gamma / np.sqrt(var + bn.eps)
    shape = [1] * w.ndim
    shape[out_axis] = -1
    b = np.zeros_like(mean) if b is None else b.astype(np.float64)
    return w.astype(np.float64) * s.reshape(shape), (b - mean) * s + beta


@pytest.mark.parametrize("name", BN_MODELS)
def test_folded_weights_equal_an_independent_numpy_fold(name):
    model, x = _model(name)
    layer, bn = ((model.conv, model.bn) if isinstance(model, Conv1dGap) else (model[0], model[1]))
    w = layer.weight.detach().double().numpy()
    b = None if layer.bias is None else layer.bias.detach().double().numpy()
    want_w, want_b = _numpy_fold(w, b, bn, out_axis=0)
    if isinstance(layer, nn.Conv1d):
        want_w = want_w[:, :, None, :]  # (O, C, 1, k): the 1 x k kernel of the (C, 1, W) view
    if isinstance(layer, nn.Linear):
        want_w = want_w.T  # the IR stores (in, out)
    proto = _export(model, x[:2], "torchscript-nofold")
    bn_names = {"pytorch": "bn" if isinstance(model, Conv1dGap) else "1",
                "onnx": next(n.name for n in proto.graph.node if n.op_type == "BatchNormalization")}
    graphs = {"pytorch": import_torch(model, x[:2]).graph, "onnx": import_onnx(proto).graph}
    for source, graph in graphs.items():
        folded = next(n for n in graph.nodes if n.op in ("conv2d", "dense"))
        assert all(n.op != "batchnorm" for n in graph.nodes), source
        assert bn_names[source] in folded.aliases  # the BatchNorm's name answers for the folded layer
        assert graph.node(bn_names[source]) is folded
        np.testing.assert_allclose(folded.params["weight"], want_w, rtol=1e-6, atol=1e-7, err_msg=source)
        np.testing.assert_allclose(folded.params["bias"], want_b, rtol=1e-6, atol=1e-7, err_msg=source)
    # what the exporters fold themselves (TorchScript's Conv + BN fusion, dynamo's optimiser) agrees too
    if not isinstance(layer, nn.Linear):
        conv = next(n for n in import_onnx(_export(model, x[:2], "torchscript")).graph.nodes if n.op == "conv2d")
        np.testing.assert_allclose(conv.params["weight"], want_w, rtol=1e-5, atol=1e-6)


def _gemm_model(extra_nodes, inits):
    """x (N, 6) -> MatMul -> Add -> <extra_nodes> -> y."""
    nodes = [helper.make_node("MatMul", ["x", "w"], ["mm"], name="mm"), helper.make_node("Add", ["mm", "b"], ["h"], name="add"),
             *extra_nodes]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])],
        initializer=[numpy_helper.from_array(np.asarray(v, dtype=np.float32), k) for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 15)], ir_version=8)


def _bn_inits(rng, c=4):
    return {"scale": rng.random(c) + 0.5, "beta": rng.random(c) - 0.5, "mean": rng.random(c) - 0.5, "var": rng.random(c) + 0.1}


def test_onnx_matmul_add_batchnorm_folds_into_the_dense_layer_and_matches_onnxruntime():
    rng = np.random.default_rng(3)
    inits = {"w": rng.standard_normal((6, 4)), "b": rng.standard_normal(4), **_bn_inits(rng)}
    bn = helper.make_node("BatchNormalization", ["h", "scale", "beta", "mean", "var"], ["n"], name="norm", epsilon=EPS)
    model = _gemm_model([bn, helper.make_node("Relu", ["n"], ["y"], name="act")], inits)
    x = rng.standard_normal((5, 6)).astype(np.float32)
    emu = aieflow.emulate(model, device="vck190", example_input=x, config=FP32)
    assert [(n.op, n.attrs.get("activation")) for n in emu.graph.nodes] == [("dense", "relu")]
    node = emu.graph.nodes[0]
    assert node.name == "mm" and set(node.aliases) == {"add", "norm", "act"} and emu.graph.node("norm") is node
    s = inits["scale"] / np.sqrt(inits["var"] + EPS)
    np.testing.assert_allclose(node.params["weight"], inits["w"].astype(np.float32).astype(np.float64) * s, rtol=1e-6)
    np.testing.assert_allclose(node.params["bias"], (inits["b"].astype(np.float32) - inits["mean"].astype(np.float32)) * s
                               + inits["beta"].astype(np.float32), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(emu.predict(x), _ort(model, x), rtol=1e-5, atol=1e-5)


def _onnx_1d(nodes, inits, in_shape, out_shape, opset=18):
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", *in_shape])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", *out_shape])],
        initializer=[numpy_helper.from_array(np.asarray(v, dtype=np.float32 if np.asarray(v).dtype.kind == "f" else np.int64), k)
                     for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


@pytest.mark.parametrize("attrs", [{"pads": [2, 0], "strides": [2]}, {"auto_pad": "SAME_UPPER", "strides": [3]},
                                   {"auto_pad": "SAME_LOWER"}, {"auto_pad": "VALID", "strides": [2]}])
def test_onnx_1d_conv_pooling_batchnorm_and_reduce_mean_match_onnxruntime(attrs):
    rng = np.random.default_rng(5)
    inits = {"w": rng.standard_normal((4, 3, 4)), "wb": rng.standard_normal(4), "slope": rng.random((4, 1)) * 0.5,
             "axes": np.array([-1]), **_bn_inits(rng)}
    nodes = [
        helper.make_node("Conv", ["x", "w", "wb"], ["c"], name="conv", **attrs),
        helper.make_node("BatchNormalization", ["c", "scale", "beta", "mean", "var"], ["n"], name="bn", epsilon=EPS),
        helper.make_node("PRelu", ["n", "slope"], ["p"], name="prelu"),
        helper.make_node("MaxPool", ["p"], ["m"], name="max", kernel_shape=[3], pads=[1, 1], strides=[1]),
        helper.make_node("AveragePool", ["m"], ["a"], name="avg", kernel_shape=[2], pads=[0, 1], strides=[2]),
        helper.make_node("ReduceMean", ["a", "axes"], ["y"], name="mean", keepdims=0),
    ]
    model = _onnx_1d(nodes, inits, (3, 23), (4,))
    x = rng.standard_normal((3, 3, 23)).astype(np.float32)
    emu = aieflow.emulate(model, device="vck190", example_input=x, config=FP32)
    assert [n.op for n in emu.graph.nodes] == ["reshape", "conv2d", "maxpool", "avgpool", "avgpool", "reshape"]
    assert emu.graph.nodes[1].attrs["activation"] == "prelu" and emu.graph.nodes[1].attrs["kernel"] == (1, 4)
    np.testing.assert_allclose(emu.predict(x), _ort(model, x), rtol=1e-5, atol=1e-5)


class Functional1d(nn.Module):
    """The functional 1-D forms, with a Tanh and a PReLU fused into 1-D convolutions."""

    def __init__(self):
        super().__init__()
        self.c1, self.c2, self.act = nn.Conv1d(2, 6, 3, padding="same"), nn.Conv1d(6, 4, 2), nn.PReLU(4)
        self.fc = nn.Linear(4, 3)

    def forward(self, x):
        z = F.max_pool1d(torch.tanh(self.c1(x)), 2, stride=1, padding=1)
        z = F.avg_pool1d(self.act(self.c2(z)), 3, count_include_pad=False, padding=1)
        return self.fc(F.adaptive_avg_pool1d(z, 1).flatten(1))


def test_functional_1d_forms_fuse_and_match_pytorch_in_fp32():
    torch.manual_seed(2)
    model = Functional1d().eval()
    x = np.random.default_rng(4).standard_normal((4, 2, 19)).astype(np.float32)
    emu = aieflow.emulate(model, device="vck190", example_input=x, config=FP32)
    assert [(n.op, n.attrs.get("activation")) for n in emu.graph.nodes] == [
        ("reshape", None), ("conv2d", "tanh"), ("maxpool", None), ("conv2d", "prelu"), ("avgpool", None),
        ("avgpool", None), ("reshape", None), ("dense", None)]
    np.testing.assert_allclose(emu.predict(x), _torch(model, x), rtol=1e-5, atol=1e-6)


# ------------------------------------------------------------------------------- refused cases


class FanOut(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv, self.bn = nn.Conv2d(2, 4, 3), nn.BatchNorm2d(4)

    def forward(self, x):
        z = self.conv(x)
        return self.bn(z) + z


class Mean(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.conv, self.dim = nn.Conv2d(2, 4, 3), dim

    def forward(self, x):
        return self.conv(x).mean(self.dim)


IMAGE, SEQUENCE = (2, 2, 8, 8), (2, 2, 16)


@pytest.mark.parametrize("model, shape, match", [
    (nn.Sequential(nn.Conv2d(2, 4, 3), nn.ReLU(), nn.BatchNorm2d(4)), IMAGE,
     r"layer '2': BatchNorm folds neither into the layer before it \(it follows '1' \(a ReLU\), not a convolution or "
     r"linear layer\) nor into the one after it \(its output is the model output\); a standalone BatchNorm is a "
     r"scale-and-shift of \(batch, features\) tensors only, not of an image or sequence\n  hint: put the BatchNorm directly after"),
    (nn.Sequential(nn.Conv2d(2, 4, 3), nn.MaxPool2d(2), nn.BatchNorm2d(4)), IMAGE, r"layer '2': BatchNorm folds neither .*it follows '1' \(a max pooling\)"),
    (FanOut(), IMAGE, r"layer 'bn': BatchNorm folds neither .*the output of 'conv' is also read by 'add' \(fan-out\).*"
     r"nor into the one after it \('add' after it is a 'add', not a linear layer or an unpadded convolution\)"),
    (nn.Sequential(nn.BatchNorm2d(2), nn.Conv2d(2, 4, 3, padding=1)), IMAGE,
     r"layer '0': BatchNorm folds neither into the layer before it \(it normalises the model input.*convolution '1' after "
     r"it pads its input with zeros"),
    (nn.Sequential(nn.Conv2d(2, 4, 3), nn.BatchNorm2d(4, track_running_stats=False)), IMAGE,
     r"layer '1': BatchNorm2d has no running statistics"),
    (nn.Sequential(nn.Linear(16, 8), nn.BatchNorm1d(2)), SEQUENCE, r"layer '1': BatchNorm folds neither .*it normalises axis 1 of a 3-D output of linear layer '0'"),
    (Mean(1), IMAGE, r"layer 'mean': mean over dims \(1,\) of a tensor of shape \(N, 4, 6, 6\); only a mean over an image's spatial dims"),
    (Mean(None), IMAGE, r"layer 'mean': mean over every dimension"),
    (nn.Sequential(nn.Conv1d(2, 4, 3), nn.AdaptiveAvgPool1d(2)), SEQUENCE, r"layer '1': AdaptiveAvgPool1d to 2 is not supported"),
    (nn.Sequential(nn.Conv1d(2, 4, 3), nn.Upsample(scale_factor=2)), SEQUENCE,
     r"layer '1': upsampling of per-sample shape \(4, 14\).*\n  hint: aieflow maps nearest"),
    (nn.Sequential(nn.Conv1d(2, 4, 3, padding=1, padding_mode="circular")), SEQUENCE, r"layer '0': padding_mode='circular'"),
    (nn.Sequential(nn.Conv1d(2, 4, 3), nn.MaxPool1d(3, ceil_mode=True)), SEQUENCE, r"layer '1': MaxPool with ceil_mode"),
    (nn.Sequential(nn.Conv1d(2, 4, 3), nn.MaxPool1d(2, return_indices=True)), SEQUENCE, r"layer '1': MaxPool1d with return_indices"),
])
def test_pytorch_refusals_name_the_layer_and_what_to_change(model, shape, match):
    with pytest.raises(UnsupportedOpError, match=match):
        import_torch(model.eval(), np.zeros(shape, dtype=np.float32))


def test_a_batchnorm_in_training_mode_asks_for_eval_and_modes_are_left_as_they_were():
    model, x = _model("bn_cnn")
    model.train()
    with pytest.raises(UnsupportedOpError, match=r"layer '1': BatchNorm2d is in training mode.*\n  hint: call model.eval\(\)"):
        aieflow.compile(model, device="vek280", example_input=x[:2], calibration=x)
    assert all(m.training for m in model.modules())
    model.eval()
    model[3].train()  # a mixed model: each module's own mode survives the import
    import_torch(model, x[:2])
    assert [m.training for m in model] == [False, False, False, True, False, False]


@pytest.mark.parametrize("extra, match", [
    ([helper.make_node("BatchNormalization", ["h", "scale", "beta", "mean", "var"], ["y", "rm", "rv"], name="norm",
                       training_mode=1)],
     r"node 'norm' \(BatchNormalization\) runs in training mode.*\n  hint: export the model in eval mode"),
    ([helper.make_node("BatchNormalization", ["h", "h", "beta", "mean", "var"], ["y"], name="norm")],
     r"node 'norm' \(BatchNormalization\) takes its scale from a computed tensor"),
])
def test_onnx_refusals_name_the_node(extra, match):
    rng = np.random.default_rng(0)
    model = _gemm_model(extra, {"w": rng.standard_normal((6, 4)), "b": rng.standard_normal(4), **_bn_inits(rng)})
    with pytest.raises(UnsupportedOpError, match=match):
        import_onnx(model)


def test_a_batchnorm_after_a_qdq_quantised_layer_is_refused():
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.integers(-100, 100, (6, 4)).astype(np.int8), "wq"),
             numpy_helper.from_array(np.array(2.0 ** -6, dtype=np.float32), "s"),
             *(numpy_helper.from_array(np.asarray(v, dtype=np.float32), k) for k, v in _bn_inits(rng).items())]
    nodes = [helper.make_node("DequantizeLinear", ["wq", "s"], ["w"]), helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
             helper.make_node("BatchNormalization", ["h", "scale", "beta", "mean", "var"], ["y"], name="norm")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 6])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 15)], ir_version=8)
    with pytest.raises(UnsupportedOpError, match=r"layer 'norm': BatchNorm follows 'mm', whose parameters are QDQ-quantised"):
        import_onnx(model)


def test_every_refusal_is_an_aieflow_error_not_a_traceback():
    """The AieflowError base is what the CLI prints without a traceback."""
    assert issubclass(UnsupportedOpError, AieflowError)
    with pytest.raises(AieflowError):
        import_torch(nn.Sequential(nn.Conv1d(2, 4, 3), nn.BatchNorm1d(4)).train(), np.zeros(SEQUENCE, dtype=np.float32))


# ------------------------------------------------------------------------------- x86 verify


@needs_gxx
@pytest.mark.parametrize("name", ["bn_cnn", "conv1d_seq"])
def test_batchnorm_folded_cnns_verify_bit_exact_on_x86(name):
    """The issue's Conv2d + BatchNorm2d CNN, and a Conv1d + BatchNorm1d + ReLU one: a 1 x k kernel on a
    (C, 1, W) view, (C, W) in and out."""
    design = _compiled_from_torch(name)
    assert isinstance(design, CnnDesign) and all(n.op != "batchnorm" for n in design.graph.nodes)
    _, x = _model(name)
    result = design.verify(x[:3])
    assert result.ok, result.verdict()
    result = design.verify(samples=3, seed=2)  # type-edge frames (zeros, extremes)
    assert result.ok, result.verdict()


def test_cnn_mapping_keys_given_under_a_folded_or_fused_layer_name_apply():
    """A BatchNorm folded into the convolution, or a ReLU fused into it, keeps its name as an alias:
    mapping keys given under either name reach the convolution's stage (not ignored)."""
    torch.manual_seed(3)
    model = nn.Sequential(nn.Conv2d(1, 8, 3), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                          nn.Linear(8 * 7 * 7, 10)).eval()
    x = np.random.default_rng(3).standard_normal((16, 1, 16, 16)).astype(np.float32)
    groups = {}
    for name in ("0", "1", "2"):  # the conv, its BatchNorm, its ReLU
        for g in (1, 2):
            d = aieflow.compile(model, device="vek280", example_input=x[:2], calibration=x,
                                config={"layers": {name: {"mapping": {"groups": g}}}})
            groups[name, g] = d.plan.layers[0].cas_num
    assert groups == {(n, g): g for n in ("0", "1", "2") for g in (1, 2)}
    with pytest.raises(aieflow.errors.ConfigError, match="bogus"):
        aieflow.compile(model, device="vek280", example_input=x[:2], calibration=x,
                        config={"layers": {"1": {"mapping": {"bogus": 1}}}})
