"""Keras CNNs as tf2onnx exports them (issue 25 "Must hold", issue 17 item 6): a Conv1D classifier, a
Conv2D + BatchNormalization + Selu + MaxPooling2D classifier and a SeparableConv2D model, made and
trained by tests/data/keras/make_keras_cnn_onnx.py with TensorFlow (these tests need neither
TensorFlow nor tf2onnx: they read the committed files and Keras' own outputs, the oracle).

tf2onnx writes them channels last: a Transpose (or Unsqueeze + Transpose, or a Reshape for one
channel) at the input, Transpose + Reshape (its target computed by Shape / Gather / Cast / Slice /
Concat) before the Dense for a Flatten, BatchNorm as Mul + Add, a Conv1D as a 2-D Conv between
Unsqueeze / Squeeze with its bias as an Add of [1, C, 1].  frontends/channels_last.py folds them."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest

import aieflow
from aieflow.errors import AieflowError
from aieflow.frontends.channels_last import per_channel, permuted_rows

DATA = Path(__file__).resolve().parent / "data" / "keras"
MODELS = ("keras_conv1d", "keras_conv2d_bn_selu", "keras_separable")
needs_gxx = pytest.mark.skipif(shutil.which("g++") is None, reason="g++ is not installed")


def _case(name: str):
    d = np.load(DATA / f"{name}.npz")
    assert "tensorflow" in str(d["versions"])  # made by Keras itself, not by aieflow
    return str(DATA / f"{name}.onnx"), d["x"], d["y"]


def _onnxruntime(model: str, x: np.ndarray) -> np.ndarray:
    ort = pytest.importorskip("onnxruntime")
    s = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    return s.run(None, {s.get_inputs()[0].name: x})[0]


def _compile(name: str, device: str, precision: str, **cnn):
    model, x, _ = _case(name)
    cfg = {"precision": precision, **({"cnn": cnn} if cnn else {})}
    return aieflow.compile(model, device=device, example_input=x[:2], calibration=x, config=cfg)


# ---------------------------------------------------------------- the exports are what tf2onnx writes


def test_the_files_hold_tf2onnx_channels_last_patterns():
    ops = {name: [n.op_type for n in onnx.load(DATA / f"{name}.onnx").graph.node] for name in MODELS}
    for name, o in ops.items():
        shape = [d.dim_value for d in onnx.load(DATA / f"{name}.onnx").graph.input[0].type.tensor_type.shape.dim]
        assert shape[-1] in (1, 3), name  # channels last at the input
        assert "Transpose" in o and "BatchNormalization" not in o
    assert {"Shape", "Gather", "Slice", "Concat", "Cast"} <= set(ops["keras_conv2d_bn_selu"])  # the Flatten chain
    assert {"Shape", "Gather"} <= set(ops["keras_separable"])
    assert {"Mul", "Selu"} <= set(ops["keras_conv2d_bn_selu"])  # BatchNorm as Mul + Add
    assert {"Unsqueeze", "Squeeze"} <= set(ops["keras_conv1d"])


# ---------------------------------------------------------------- import: the float graph is Keras' model


@pytest.mark.parametrize("name, ops", [
    ("keras_conv1d", ["transpose", "reshape", "conv2d", "maxpool", "conv2d", "maxpool", "reshape", "dense", "softmax"]),
    ("keras_conv2d_bn_selu", ["reshape", "conv2d", "activation", "maxpool", "conv2d", "activation", "maxpool",
                              "reshape", "dense", "softmax"]),
    ("keras_separable", ["transpose", "conv2d", "conv2d", "maxpool", "conv2d", "conv2d", "reshape", "dense",
                         "softmax"]),
])
def test_import_folds_to_a_channels_first_cnn_that_matches_keras(name, ops):
    model, x, y = _case(name)
    em = aieflow.emulate(model, device="vck190", example_input=x[:2], config={"precision": "fp32"})
    assert [n.op for n in em.graph.nodes] == ops  # BatchNorm, biases, ReLU folded; shape arithmetic gone
    assert em.graph.tensors[em.graph.inputs[0]].shape == x.shape[1:]  # the user's channels-last input
    got = em.predict(x).reshape(y.shape)
    np.testing.assert_allclose(got, y, rtol=1e-5, atol=2e-6)
    np.testing.assert_allclose(got, _onnxruntime(model, x), rtol=1e-5, atol=2e-6)
    assert y.std(axis=0).max() > 0.02  # the oracle's outputs differ between inputs


def test_the_selu_model_folds_both_batchnorms_into_its_convolutions():
    model, x, _ = _case("keras_conv2d_bn_selu")
    em = aieflow.emulate(model, device="vck190", example_input=x[:2], config={"precision": "fp32"})
    convs = [n for n in em.graph.nodes if n.op == "conv2d"]
    assert [any("bn" in a for a in n.aliases) and any("add" in a for a in n.aliases) for n in convs] == [True, True]
    assert [n.attrs["function"] for n in em.graph.nodes if n.op == "activation"] == ["selu", "selu"]


def test_permuted_rows_against_numpy():
    rng = np.random.default_rng(0)
    w = rng.standard_normal((24, 5))
    order = rng.permutation(24)
    x = rng.standard_normal((7, 24))
    np.testing.assert_allclose(x @ permuted_rows(w, order), x[:, order] @ w, rtol=1e-12)
    # the tf2onnx flatten: (C, H, W) read in (H, W, C) order
    c, h, wd = 2, 3, 4
    chw = np.arange(c * h * wd).reshape(c, h, wd)
    hwc_order = chw.transpose(1, 2, 0).reshape(-1)
    img = rng.standard_normal((c, h, wd))
    w2 = rng.standard_normal((c * h * wd, 3))
    np.testing.assert_allclose(img.reshape(-1) @ permuted_rows(w2, hwc_order),
                               img.transpose(1, 2, 0).reshape(-1) @ w2, rtol=1e-12)


@pytest.mark.parametrize("value, shape, channels", [
    (np.ones((1, 8, 1, 1)), (8, 4, 4), 8), (np.ones((8, 1, 1)), (8, 4, 4), 8), (np.ones((1, 8, 1)), (8, 60), 8),
    (np.ones((1, 1, 1, 4)), (8, 4, 4), None), (np.ones((4,)), (8, 4), None), (np.ones(()), (8, 4, 4), None),
    (np.ones((1, 8, 4, 1)), (8, 4, 4), None), (np.ones((1, 8, 1, 1)), (16,), None),
])
def test_per_channel_constants(value, shape, channels):
    v = per_channel(value, shape)
    assert (v is None) if channels is None else (v.shape == (channels,))


def test_a_reshape_that_mixes_the_batch_is_refused_by_name(tmp_path):
    model, x, _ = _case("keras_separable")
    proto = onnx.load(model)
    # the Dense reads a Flatten that folds two samples into one row: no channels-last fold applies
    flat = next(n for n in proto.graph.node if n.op_type == "Reshape" and "flatten" in n.name)
    shape = onnx.helper.make_tensor("two_rows", onnx.TensorProto.INT64, [2], [-1, 2 * 576])
    proto.graph.initializer.append(shape)
    flat.input[1] = "two_rows"
    w = next(i for i in proto.graph.initializer if i.name.endswith("fc_1/Cast/ReadVariableOp:0"))
    arr = onnx.numpy_helper.to_array(w)
    w.CopyFrom(onnx.numpy_helper.from_array(np.concatenate([arr, arr]), w.name))
    path = tmp_path / "mixed.onnx"
    onnx.save(proto, path)
    with pytest.raises(AieflowError, match=r"Reshape|batch"):
        aieflow.emulate(str(path), device="vck190", example_input=x[:2], config={"precision": "fp32"})


# ---------------------------------------------------------------- compile, predict, performance


@pytest.mark.parametrize("name, device, precision, tol", [
    ("keras_conv1d", "vek280", "int8", 0.03),
    ("keras_conv2d_bn_selu", "vek280", "int8", 0.04),
    ("keras_separable", "vek280", "int8", 0.03),
    ("keras_conv2d_bn_selu", "vck190", "int16", 3e-3),
    ("keras_separable", "vek385", "int16", 3e-3),
    # float: the fp32 / bf16 post layers (Selu, softmax; ops/activation.py's kernel definitions)
    ("keras_conv1d", "vck190", "fp32", 2e-6),
    ("keras_conv2d_bn_selu", "vck190", "fp32", 2e-6),
    ("keras_separable", "vck190", "fp32", 2e-6),
    ("keras_conv1d", "vek280", "bf16", 0.01),
    ("keras_conv2d_bn_selu", "vek280", "bf16", 0.01),
    ("keras_separable", "vek385", "bf16", 0.01),
])
def test_compiles_and_predicts_close_to_keras_and_onnxruntime(name, device, precision, tol):
    model, x, y = _case(name)
    d = _compile(name, device, precision)
    got = d.predict(x).reshape(y.shape)
    assert np.abs(got - y).max() < tol
    assert np.abs(got - _onnxruntime(model, x)).max() < tol
    assert (got.argmax(-1) == y.argmax(-1)).mean() >= 0.9
    perf = d.to_json()["performance"]
    assert perf["latency_ns"] > 0 and perf["interval_ns"] > 0 and perf["bound"]
    s = d.summary()
    assert "latency" in s and "frames/s" in s and "bound" in s


def test_float_designs_run_selu_and_softmax_in_the_last_tiles():
    for device, precision in (("vck190", "fp32"), ("vek280", "bf16")):
        posts = [(s.post.function, str(s.post.in_type)) for s in _compile("keras_conv2d_bn_selu", device,
                                                                           precision).plan.stages if s.post]
        assert posts == [("selu", precision), ("selu", precision), ("softmax", precision)]


# ---------------------------------------------------------------- x86: the generated C++ is the emulator


@needs_gxx
@pytest.mark.parametrize("name, device, precision", [
    ("keras_conv1d", "vek280", "int8"),  # (W, C) input: transposed and lifted by the host's frame order
    ("keras_conv2d_bn_selu", "vek280", "int8"),  # Selu tables after folded BatchNorms
    ("keras_separable", "vck190", "int16"),  # (H, W, 3) input transposed; depthwise + pointwise
    ("keras_conv2d_bn_selu", "vck190", "fp32"),  # fp32 Selu and softmax kernels (cnn_float_post.h)
    ("keras_conv2d_bn_selu", "vek280", "bf16"),  # bf16 Selu and softmax tables
])
def test_verifies_bit_exact_on_x86(name, device, precision):
    _, x, _ = _case(name)
    d = _compile(name, device, precision, replicas=1)
    r = d.verify(x=x[:4])
    assert r.ok and r.mismatches == 0, r.verdict()
    assert r.values == 4 * int(np.prod(d.plan.stages[-1].out_shape))
