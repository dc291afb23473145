"""Convolutional networks end to end: PyTorch and ONNX import (real ``torch.onnx.export`` output of
ESPCN and a small classifier), emulation in fp32 / int8 / int16, errors, and the ESPCN example.

References: PyTorch's forward, onnxruntime on the exported / hand-built models, and the two
frontends against each other (the same model through PyTorch and through its ONNX export must
give the same integer codes).
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import logging
import warnings
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
import torch.nn.functional as F
from onnx import TensorProto, helper, numpy_helper
from torch import nn

import aieflow
from aieflow import model_zoo
from aieflow.errors import ConfigError, ModelError, PlanError, UnsupportedOpError
from aieflow.ops import conv

REPO = Path(__file__).resolve().parents[1]
ESPCN_DATA = REPO.parent / "shared" / "data" / "espcn"
FP32 = {"precision": "fp32"}


# ------------------------------------------------------------------------------- models


def espcn(thesis_weights: bool = False):
    return model_zoo.espcn(ESPCN_DATA / "espcn_x2_weights.npz" if thesis_weights else None)


def classifier():
    return model_zoo.cnn_classifier()


def _torch(model, x):
    with torch.no_grad():
        return model(torch.from_numpy(x)).numpy()


def _images(shape, seed=0):
    return np.random.default_rng(seed).random(shape, dtype=np.float32)


def _export(model, x, dynamo: bool) -> onnx.ModelProto:
    f = io.BytesIO()
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        logging.disable(logging.WARNING)
        try:
            if dynamo:
                torch.onnx.export(model, (torch.from_numpy(x),), f, dynamo=True, dynamic_shapes=({0: torch.export.Dim("batch")},))
            else:
                torch.onnx.export(model, (torch.from_numpy(x),), f, dynamo=False, input_names=["x"], output_names=["y"], dynamic_axes={"x": {0: "b"}, "y": {0: "b"}})
        finally:
            logging.disable(logging.NOTSET)
    return onnx.load_from_string(f.getvalue())


def _ort(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {sess.get_inputs()[0].name: x})[0]


# ------------------------------------------------------------------------------- ESPCN


@pytest.mark.parametrize("thesis_weights", [False, True])
def test_espcn_imports_from_pytorch_and_matches_it_in_fp32(thesis_weights):
    if thesis_weights and not (ESPCN_DATA / "espcn_x2_weights.npz").is_file():
        pytest.skip(f"thesis weights not found in {ESPCN_DATA}")
    model = espcn(thesis_weights)
    x = _images((4, 1, 16, 16))
    emu = aieflow.emulate(model, device="vck190", example_input=x, config=FP32)
    nodes = emu.graph.nodes
    assert [(n.name, n.op, n.attrs.get("activation"), n.aliases) for n in nodes] == [
        ("conv1", "conv2d", "tanh", ("act1",)),
        ("conv3", "conv2d", "tanh", ("act3",)),
        ("conv4", "conv2d", None, ()),
        ("shuffle", "pixel_shuffle", None, ()),
    ]
    assert [emu.graph.tensors[n.outputs[0]].shape for n in nodes] == [(64, 16, 16), (32, 16, 16), (4, 16, 16), (1, 32, 32)]
    # the spec's counts: 21,284 parameters, 5,423,104 MACs per frame (P pixels x K patch x O filters)
    convs = [n for n in nodes if n.op == "conv2d"]
    assert sum(n.params["weight"].size + n.params["bias"].size for n in convs) == 21284
    macs = [conv.geometry(n).pixels * conv.geometry(n).patch * n.attrs["out_channels"] for n in convs]
    assert macs == [64 * 25 * 256, 32 * 576 * 256, 4 * 288 * 256] and sum(macs) == 5423104
    got, want = emu.predict(x), _torch(model, x)
    assert got.shape == (4, 1, 32, 32)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dynamo", [False, True])
def test_espcn_onnx_export_imports_and_matches_onnxruntime(dynamo):
    model = espcn()
    x = _images((5, 1, 16, 16), seed=1)
    proto = _export(model, x[:2], dynamo)
    ops = [n.op_type for n in proto.graph.node]
    assert ops.count("Conv") == 3 and "DepthToSpace" in ops
    emu = aieflow.emulate(proto, device="vck190", example_input=x, config=FP32)
    assert [n.op for n in emu.graph.nodes] == ["conv2d", "conv2d", "conv2d", "pixel_shuffle"]
    np.testing.assert_allclose(emu.predict(x), _ort(proto, x), rtol=1e-5, atol=1e-5)
    # quantised: the ONNX import and the PyTorch import give the same codes
    for precision in ("int8", "int16"):
        cfg = {"precision": precision}
        via_onnx = aieflow.emulate(proto, device="vek280", example_input=x, calibration=x, config=cfg)
        via_torch = aieflow.emulate(model, device="vek280", example_input=x, calibration=x, config=cfg)
        np.testing.assert_array_equal(via_onnx.predict(x, raw=True), via_torch.predict(x, raw=True))
        tol = 0.03 if precision == "int8" else 3e-4
        assert np.abs(via_onnx.predict(x) - _torch(model, x)).max() < tol


def test_espcn_numerics_modes_differ_as_documented():
    model = espcn()
    x = _images((3, 1, 16, 16), seed=2)
    want = _torch(model, x)
    exact = aieflow.emulate(model, device="vck190", example_input=x, config=FP32).predict(x)
    lut = aieflow.emulate(model, device="vck190", example_input=x, config={"precision": "fp32", "activations": {"tanh": "espcn-thesis"}}).predict(x)
    err_exact, err_lut = np.abs(exact - want).max(), np.abs(lut - want).max()
    assert err_exact < 1e-5 < err_lut < 0.05  # the table is the only approximation, and a small one


# ------------------------------------------------------------------------------- classifier


def test_classifier_imports_from_pytorch_and_emulates_in_fp32_and_int8():
    model = classifier()
    x = _images((8, 3, 32, 32), seed=3)
    emu = aieflow.emulate(model, device="vck190", example_input=x, config=FP32)
    assert [n.op for n in emu.graph.nodes] == ["conv2d", "maxpool", "conv2d", "avgpool", "conv2d", "avgpool", "reshape", "dense"]
    assert [n.attrs.get("activation") for n in emu.graph.nodes if n.op == "conv2d"] == ["relu", "prelu", "relu"]
    want = _torch(model, x)
    np.testing.assert_allclose(emu.predict(x), want, rtol=1e-5, atol=1e-6)
    for precision, tol in (("int8", 0.05), ("int16", 5e-4)):
        q = aieflow.emulate(model, device="vek280", example_input=x, calibration=x, config={"precision": precision})
        got = q.predict(x)
        assert got.shape == (8, 10)
        assert np.abs(got - want).max() < tol * np.abs(want).max()


@pytest.mark.parametrize("dynamo", [False, True])
def test_classifier_onnx_export_imports_and_matches(dynamo):
    model = classifier()
    x = _images((6, 3, 32, 32), seed=4)
    proto = _export(model, x[:2], dynamo)
    ops = {n.op_type for n in proto.graph.node}
    assert {"Conv", "MaxPool", "AveragePool", "PRelu", "Gemm"} <= ops
    assert ("ReduceMean" if dynamo else "GlobalAveragePool") in ops
    emu = aieflow.emulate(proto, device="vck190", example_input=x, config=FP32)
    np.testing.assert_allclose(emu.predict(x), _ort(proto, x), rtol=1e-5, atol=1e-6)
    cfg = {"precision": "int8"}
    via_onnx = aieflow.emulate(proto, device="vck190", example_input=x, calibration=x, config=cfg)
    via_torch = aieflow.emulate(model, device="vck190", example_input=x, calibration=x, config=cfg)
    np.testing.assert_array_equal(via_onnx.predict(x, raw=True), via_torch.predict(x, raw=True))


# ------------------------------------------------------------------------------- functional forms


class Functional(nn.Module):
    def __init__(self, tanh_after_pool: bool = False):
        super().__init__()
        self.a = nn.Conv2d(2, 8, (4, 2), padding="same")  # even kernel: asymmetric padding
        self.b = nn.Conv2d(8, 8, 3)
        self.tanh_after_pool = tanh_after_pool

    def forward(self, x):
        x = torch.tanh(self.a(x))
        x = F.max_pool2d(x, 2, stride=1, padding=1)
        x = self.b(x).tanh()
        x = F.avg_pool2d(x, (2, 3), stride=(1, 2), padding=(1, 1), count_include_pad=False)
        if self.tanh_after_pool:
            x = F.tanh(x)
        x = F.pixel_shuffle(x, 2)
        return F.adaptive_avg_pool2d(x, (1, 1)).flatten(1)


@pytest.mark.filterwarnings("ignore:Using padding=.same.")
def test_functional_forms_and_same_padding_match_pytorch():
    x = _images((3, 2, 9, 11), seed=5) * 2 - 1
    model = Functional().eval()
    emu = aieflow.emulate(model, device="vck190", example_input=x, config=FP32)
    assert [n.op for n in emu.graph.nodes] == ["conv2d", "maxpool", "conv2d", "avgpool", "pixel_shuffle", "avgpool", "reshape"]
    a = emu.graph.nodes[0]
    assert a.attrs["padding"] == (1, 0, 2, 1) and a.attrs["activation"] == "tanh"  # top, left, bottom, right
    np.testing.assert_allclose(emu.predict(x), _torch(model, x), rtol=1e-5, atol=1e-6)
    # a Tanh that does not follow a convolution is an activation layer of its own: it emulates
    # (tests/test_activation.py: the CNN mapping refuses it by name)
    standalone = Functional(tanh_after_pool=True).eval()
    emu = aieflow.emulate(standalone, device="vck190", example_input=x, config=FP32)
    assert [n.attrs.get("function") for n in emu.graph.nodes if n.op == "activation"] == ["tanh"]
    np.testing.assert_allclose(emu.predict(x), _torch(standalone, x), rtol=1e-5, atol=1e-6)


# ------------------------------------------------------------------------------- hand-built ONNX


def _onnx(nodes, inits, in_shape, opset=13, out_rank=4):
    out_shape = ["N", "c", "h", "w"][:out_rank]  # symbolic: the importer infers the sizes
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", *in_shape])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)],
        initializer=[numpy_helper.from_array(np.asarray(v, dtype=np.float32 if np.asarray(v).dtype.kind == "f" else np.int64), k) for k, v in inits.items()],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


@pytest.mark.parametrize(
    "attrs",
    [
        {"pads": [0, 2, 1, 0], "strides": [2, 1]},
        {"pads": [3, 0, 0, 1]},
        {"auto_pad": "SAME_UPPER", "strides": [2, 2]},
        {"auto_pad": "SAME_LOWER", "strides": [1, 3]},
        {"auto_pad": "VALID"},
    ],
)
def test_onnx_conv_padding_forms_match_onnxruntime(attrs):
    rng = np.random.default_rng(6)
    w, b = rng.standard_normal((5, 3, 4, 3)), rng.standard_normal(5)
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], kernel_shape=[4, 3], **attrs),
        helper.make_node("Relu", ["c"], ["y"]),
    ]
    model = _onnx(nodes, {"w": w, "b": b}, (3, 9, 10))
    x = rng.standard_normal((4, 3, 9, 10)).astype(np.float32)
    emu = aieflow.emulate(model, device="vck190", example_input=x, config=FP32)
    assert emu.graph.nodes[0].attrs["activation"] == "relu"
    np.testing.assert_allclose(emu.predict(x), _ort(model, x), rtol=1e-5, atol=1e-5)


def test_onnx_pooling_prelu_and_reduce_mean_match_onnxruntime():
    rng = np.random.default_rng(7)
    w = rng.standard_normal((4, 2, 3, 3))
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("PRelu", ["c", "slope"], ["p"]),
        helper.make_node("MaxPool", ["p"], ["m"], kernel_shape=[3, 2], pads=[1, 0, 1, 1], strides=[2, 1]),
        helper.make_node("AveragePool", ["m"], ["a"], kernel_shape=[2, 3], pads=[1, 1, 0, 1]),  # count_include_pad=0
        helper.make_node("ReduceMean", ["a", "axes"], ["y"], keepdims=0),
    ]
    model = _onnx(nodes, {"w": w, "slope": np.array([0.25], dtype=np.float32), "axes": np.array([-1, 2])}, (2, 8, 7), opset=18, out_rank=2)
    x = rng.standard_normal((3, 2, 8, 7)).astype(np.float32)
    emu = aieflow.emulate(model, device="vck190", example_input=x, config=FP32)
    assert [n.op for n in emu.graph.nodes] == ["conv2d", "maxpool", "avgpool", "avgpool", "reshape"]
    assert emu.graph.nodes[2].attrs["count_include_pad"] is False
    np.testing.assert_allclose(emu.predict(x), _ort(model, x), rtol=1e-5, atol=1e-6)


# ------------------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    "layer, match",
    [
        (nn.Conv2d(2, 4, 3, padding=1, padding_mode="reflect"), r"layer '0': padding_mode='reflect'.*\n  hint: use padding_mode='zeros'"),
        (nn.ConvTranspose2d(2, 4, 3), r"module '0' has type .*ConvTranspose2d, which aieflow does not support; supported modules: .*nn.Conv2d"),
        (nn.Upsample(scale_factor=2, mode="bicubic"), r"layer '0': resize mode 'bicubic' is not supported.*\n  hint: aieflow maps nearest"),
    ],
)
def test_pytorch_errors_name_the_layer_and_what_to_change(layer, match):
    with pytest.raises(UnsupportedOpError, match=match):
        aieflow.emulate(nn.Sequential(layer), example_input=np.zeros((1, 2, 8, 8), dtype=np.float32), config=FP32)


@pytest.mark.parametrize(
    "node, match",
    [
        (helper.make_node("ConvTranspose", ["x", "w"], ["y"], name="up"), r"node 'up' has op type 'ConvTranspose'.*supported ONNX ops: .*Conv \(2-D"),
        (helper.make_node("MaxPool", ["x"], ["y"], name="mp", kernel_shape=[2, 2], ceil_mode=1), r"layer 'mp': MaxPool with ceil_mode"),
        (helper.make_node("ReduceMean", ["x"], ["y"], name="rm", axes=[1]), r"node 'rm' \(ReduceMean\) averages axes \[1\]"),
    ],
)
def test_onnx_errors_name_the_node(node, match):
    inits = {"w": np.ones((4, 2, 3, 3))}
    model = _onnx([node], inits, (2, 8, 8))
    with pytest.raises(UnsupportedOpError, match=match):
        aieflow.emulate(model, example_input=np.zeros((1, 2, 8, 8), dtype=np.float32), config=FP32)


def test_bf16_and_qdq_convolutions_are_clear_errors():
    x = _images((2, 1, 6, 6))
    tanh = nn.Sequential(nn.Conv2d(1, 2, 3), nn.Tanh())  # bf16 conv + tanh runs (test_cnn_bf16.py), not with a LUT
    with pytest.raises(ConfigError, match=r"layer '0': a bf16 convolution's tanh is the bf16 table"):
        aieflow.emulate(tanh, device="vek280", example_input=x,
                        config={"precision": "bf16", "activations": {"tanh": "espcn-thesis"}})
    wq = numpy_helper.from_array(np.ones((2, 1, 3, 3), dtype=np.int8), "wq")
    s = numpy_helper.from_array(np.array(0.5, dtype=np.float32), "s")
    graph = helper.make_graph(
        [helper.make_node("DequantizeLinear", ["wq", "s"], ["w"]), helper.make_node("Conv", ["x", "w"], ["y"], name="qc")],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 6, 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 4, 4])], initializer=[wq, s],
    )
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    with pytest.raises(UnsupportedOpError, match=r"node 'qc' \(Conv\) has a quantised weight; QDQ-quantised convolutions"):
        aieflow.emulate(proto, config={"precision": "int8", "layers": {"qc": {"input": "fixed<8,4>"}}})


def test_without_calibration_data_tanh_uses_its_range_and_prelu_asks_for_data():
    w = np.random.default_rng(8).standard_normal((2, 1, 3, 3))
    cfg = {"precision": "int8", "layers": {"c": {"input": "fixed<8,1,RND_CONV,SAT>"}}}
    tanh = _onnx([helper.make_node("Conv", ["x", "w"], ["c"], name="c"), helper.make_node("Tanh", ["c"], ["y"], name="t")], {"w": w}, (1, 5, 5))
    t = aieflow.emulate(tanh, config=cfg).graph.nodes[0].types
    assert t.core.output.width == 32 and t.core.output.frac == t.core.acc_frac  # full accumulator precision
    assert (t.output.width, t.output.frac) == (8, 6)  # |tanh| <= 1: fixed<8,2>
    prelu = _onnx([helper.make_node("Conv", ["x", "w"], ["c"], name="c"), helper.make_node("PRelu", ["c", "s"], ["y"], name="p")],
                  {"w": w, "s": np.array([0.1], dtype=np.float32)}, (1, 5, 5))
    with pytest.raises(ConfigError, match=r"layer 'c': the PReLU output type needs calibration data"):
        aieflow.emulate(prelu, config=cfg)


def test_compile_stops_at_the_first_unmapped_layer_and_names_it():
    x = _images((4, 1, 16, 16))
    # Convolutional networks compile through aieflow.cnn (tests/test_cnn_mapping.py); what that
    # mapping cannot run is still a PlanError naming the layer (here: fp32 exact tanh has no kernel).
    with pytest.raises(PlanError, match=r"layer 'conv1': fp32 tanh on the AI Engine uses a lookup table"):
        aieflow.compile(espcn(), device="vck190", example_input=x, calibration=x, config=FP32)
    # explore maps CNNs too now (the stream mapping's front, tests/test_cnn_search.py)
    ex = aieflow.explore(espcn(), device="vek280", example_input=x, calibration=x, config={"precision": "int8"})
    assert ex.front and ex.chosen in ex.front
    pooled = nn.Sequential(nn.MaxPool2d(2), nn.Flatten(), nn.Linear(16, 3))
    with pytest.raises(PlanError, match=r"layer '0': MaxPool layers have no kernel in a chain of Dense layers; the CNN mapping, for models with a convolution"):
        aieflow.compile(pooled, device="vek280", example_input=_images((2, 1, 8, 8)), config={"precision": "int8", "batch": "auto"})


# ------------------------------------------------------------------------------- the example


def test_espcn_example_prints_the_psnr_table():
    if not (ESPCN_DATA / "espcn_x2_weights.npz").is_file():
        pytest.skip(f"ESPCN data not found in {ESPCN_DATA}")
    spec = importlib.util.spec_from_file_location("espcn_example", REPO / "examples" / "espcn" / "run.py")
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert example.main([]) == 0
    rows = {}
    for line in out.getvalue().splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) == 8 and cells[1][:1].isdigit():
            rows[cells[0]] = [float(c) for c in cells[1:7]]
    assert set(rows) == {"float (PyTorch)", *example.MODES}
    mean = {k: v[5] for k, v in rows.items()}
    ref = mean["float (PyTorch)"]
    assert abs(mean["fp32 exact tanh"] - ref) < 0.01
    assert abs(mean["int16 PTQ"] - ref) < 0.05
    assert 0 < ref - mean["fp32 LUT tanh (espcn-thesis)"] < 0.2
    assert 0 < ref - mean["int8 PTQ"] < 1.0
    with pytest.raises(SystemExit, match="ESPCN data not found"):
        example.main(["--data", str(REPO / "no-such-folder")])


@pytest.mark.parametrize(
    "attrs, pads",
    [
        ({"group": 4, "pads": [1, 1, 1, 1]}, None),  # depthwise
        ({"group": 2, "dilations": [2, 3], "pads": [2, 3, 2, 3]}, None),
        # onnxruntime refuses auto_pad with dilation: the reference is the same Conv with the pads the
        # ONNX spec's SAME formula gives, worked out by hand (total = (out - 1) stride + (k - 1) d + 1 - in)
        ({"group": 4, "dilations": [2, 2], "auto_pad": "SAME_UPPER"}, [2, 2, 2, 2]),
        ({"dilations": [3, 1], "auto_pad": "SAME_LOWER", "strides": [2, 2]}, [3, 1, 3, 0]),
    ],
)
def test_onnx_grouped_and_dilated_conv_match_onnxruntime(attrs, pads):
    g = attrs.get("group", 1)
    rng = np.random.default_rng(7)
    w = rng.standard_normal((4, 4 // g, 3, 3)).astype(np.float32)
    b = rng.standard_normal(4).astype(np.float32)
    model = _onnx([helper.make_node("Conv", ["x", "w", "b"], ["y"], name="c1", **attrs)], {"w": w, "b": b}, (4, 9, 8))
    explicit = {k: v for k, v in attrs.items() if k != "auto_pad"} | ({"pads": pads} if pads else {})
    ref = _onnx([helper.make_node("Conv", ["x", "w", "b"], ["y"], name="c1", **explicit)], {"w": w, "b": b}, (4, 9, 8))
    x = _images((3, 4, 9, 8))
    emu = aieflow.emulate(model, device="vck190", example_input=x, config=FP32)
    np.testing.assert_allclose(emu.predict(x), _ort(ref, x), rtol=1e-5, atol=1e-5)


def test_onnx_group_that_does_not_divide_the_channels_is_named():
    node = helper.make_node("Conv", ["x", "w"], ["y"], name="c1", group=3)
    model = _onnx([node], {"w": np.ones((4, 1, 3, 3))}, (2, 8, 8))
    with pytest.raises(ModelError, match=r"layer 'c1': groups=3 must divide the 2 input channels") as e:
        aieflow.emulate(model, example_input=np.zeros((1, 2, 8, 8), dtype=np.float32), config=FP32)
    assert "hint:" in str(e.value)
