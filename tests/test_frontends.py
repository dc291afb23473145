"""Frontends: ONNX (float and QDQ) and PyTorch models to the float IR."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
import torch.nn.functional as F
from onnx import TensorProto, helper, numpy_helper
from torch import nn

import aieflow
from aieflow.errors import AieflowError, ConfigError, ModelError, UnsupportedOpError
from aieflow.frontends import import_model, import_onnx, import_torch
from aieflow.numerics.types import FixedType, Rounding, Saturation

OPSET = 13
IR_VERSION = 8  # old enough for the installed onnxruntime


# ------------------------------------------------------------------------------------ builders


def _model(
    nodes, inits, in_shape, out_name="y", out_shape=None, opset=OPSET, in_type=TensorProto.FLOAT
):
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", in_type, in_shape)],
        [helper.make_tensor_value_info(out_name, TensorProto.FLOAT, out_shape)],
        initializer=inits,
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=IR_VERSION
    )
    onnx.checker.check_model(model)
    return model


def _init(name, arr):
    return numpy_helper.from_array(np.asarray(arr), name)


def _run_ort(model, x):
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {sess.get_inputs()[0].name: x})[0]


def _run_ir(imported, x):
    """Evaluate the float IR graph in numpy (batch kept as dimension 0)."""
    g = imported.graph
    values = {g.inputs[0]: np.asarray(x, dtype=np.float64)}
    for n in g.nodes:
        v = values[n.inputs[0]]
        if n.op == "dense":
            w = np.asarray(n.params["weight"], dtype=np.float64)
            assert w.shape == (n.attrs["in_features"], n.attrs["out_features"])
            out = v @ w
            if "bias" in n.params:
                out = out + np.asarray(n.params["bias"], dtype=np.float64)
        elif n.op == "bias_add":
            out = v + np.asarray(n.params["bias"], dtype=np.float64)
        elif n.op == "relu":
            out = np.maximum(v, 0.0)
        elif n.op == "reshape":
            out = v.reshape((v.shape[0], *n.attrs["shape"]))
        else:  # pragma: no cover
            raise AssertionError(n.op)
        assert out.shape[1:] == g.tensors[n.outputs[0]].shape
        values[n.outputs[0]] = out
    return values[g.outputs[0]]


def _float_mlp(rng, k=12, h=16, n=5, batch="N"):
    w1 = rng.standard_normal((h, k)).astype(np.float32)  # (out, in): transB=1
    b1 = rng.standard_normal(h).astype(np.float32)
    w2 = rng.standard_normal((h, n)).astype(np.float32)  # (in, out): transB=0
    b2 = rng.standard_normal(n).astype(np.float32)
    nodes = [
        helper.make_node("Gemm", ["x", "w1", "b1"], ["h"], name="fc1", transB=1),
        helper.make_node("Relu", ["h"], ["hr"], name="act1"),
        helper.make_node("Gemm", ["hr", "w2", "b2"], ["y"], name="fc2"),
    ]
    inits = [_init("w1", w1), _init("b1", b1), _init("w2", w2), _init("b2", b2)]
    return _model(nodes, inits, [batch, k], out_shape=[batch, n]), (w1, b1, w2, b2)


# ------------------------------------------------------------------------------- float ONNX


def test_gemm_relu_mlp_structure_and_values(tmp_path):
    rng = np.random.default_rng(0)
    model, (w1, b1, w2, b2) = _float_mlp(rng)
    path = tmp_path / "mlp.onnx"
    onnx.save(model, path)
    imported = import_model(str(path))
    g = imported.graph
    assert imported.source == "onnx"
    assert imported.hints.empty
    assert [(n.name, n.op) for n in g.nodes] == [
        ("fc1", "dense"),
        ("act1", "relu"),
        ("fc2", "dense"),
    ]
    assert g.inputs == ("x",) and g.outputs == ("y",)
    assert g.tensors["x"].shape == (12,)
    assert g.tensors["h"].shape == (16,) and g.tensors["hr"].shape == (16,)
    assert g.tensors["y"].shape == (5,)
    fc1 = g.node("fc1")
    assert dict(fc1.attrs) == {"in_features": 12, "out_features": 16, "activation": None}
    assert fc1.params["weight"].dtype == np.float32
    np.testing.assert_array_equal(fc1.params["weight"], w1.T)
    np.testing.assert_array_equal(g.node("fc2").params["weight"], w2)
    np.testing.assert_array_equal(fc1.params["bias"], b1)
    x = rng.standard_normal((3, 12)).astype(np.float32)
    np.testing.assert_allclose(_run_ir(imported, x), _run_ort(model, x), rtol=1e-5, atol=1e-5)


def test_gemm_alpha_beta_folded_and_unnamed_nodes_get_generated_names():
    rng = np.random.default_rng(1)
    w = rng.standard_normal((4, 3)).astype(np.float32)
    c = rng.standard_normal((1, 3)).astype(np.float32)  # (1, N) bias broadcasts over the batch
    nodes = [helper.make_node("Gemm", ["x", "w", "c"], ["y"], alpha=0.5, beta=2.0)]
    model = _model(nodes, [_init("w", w), _init("c", c)], [2, 4], out_shape=[2, 3])
    imported = import_onnx(model)
    (node,) = imported.graph.nodes
    assert node.name == "Gemm_0"
    np.testing.assert_allclose(node.params["weight"], w * 0.5)
    np.testing.assert_allclose(node.params["bias"], c.reshape(-1) * 2.0)
    x = rng.standard_normal((2, 4)).astype(np.float32)
    np.testing.assert_allclose(_run_ir(imported, x), _run_ort(model, x), rtol=1e-5, atol=1e-5)


def test_matmul_add_relu():
    rng = np.random.default_rng(2)
    w = rng.standard_normal((8, 6)).astype(np.float32)
    b = rng.standard_normal(6).astype(np.float32)
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["m"], name="mm"),
        helper.make_node("Add", ["b", "m"], ["a"], name="add"),  # constant first: commutes
        helper.make_node("Relu", ["a"], ["y"], name="relu"),
    ]
    model = _model(nodes, [_init("w", w), _init("b", b)], ["batch", 8], out_shape=["batch", 6])
    imported = import_onnx(model)
    g = imported.graph
    assert [(n.name, n.op) for n in g.nodes] == [
        ("mm", "dense"),
        ("add", "bias_add"),
        ("relu", "relu"),
    ]
    assert "bias" not in g.node("mm").params
    assert g.node("mm").attrs["in_features"] == 8 and g.node("mm").attrs["out_features"] == 6
    np.testing.assert_array_equal(g.node("add").params["bias"], b)
    assert g.node("add").inputs == ("m",)
    x = rng.standard_normal((4, 8)).astype(np.float32)
    np.testing.assert_allclose(_run_ir(imported, x), _run_ort(model, x), rtol=1e-5, atol=1e-5)


def test_matmul_weight_from_constant_node():
    rng = np.random.default_rng(3)
    w = rng.standard_normal((5, 2)).astype(np.float32)
    nodes = [
        helper.make_node("Constant", [], ["w"], name="wc", value=_init("w", w)),
        helper.make_node("MatMul", ["x", "w"], ["y"], name="mm"),
    ]
    model = _model(nodes, [], ["N", 5], out_shape=["N", 2])
    imported = import_onnx(model)
    assert [n.name for n in imported.graph.nodes] == ["mm"]
    np.testing.assert_array_equal(imported.graph.node("mm").params["weight"], w)


def test_flatten_then_gemm():
    rng = np.random.default_rng(4)
    w = rng.standard_normal((10, 12)).astype(np.float32)
    nodes = [
        helper.make_node("Flatten", ["x"], ["f"], name="flat", axis=1),
        helper.make_node("Gemm", ["f", "w"], ["y"], name="fc", transB=1),
    ]
    model = _model(nodes, [_init("w", w)], ["N", 3, 4], out_shape=["N", 10])
    imported = import_onnx(model)
    g = imported.graph
    assert [(n.name, n.op) for n in g.nodes] == [("flat", "reshape"), ("fc", "dense")]
    assert g.tensors["x"].shape == (3, 4)
    assert g.node("flat").attrs["shape"] == (12,)
    assert g.tensors["f"].shape == (12,)
    x = rng.standard_normal((2, 3, 4)).astype(np.float32)
    np.testing.assert_allclose(_run_ir(imported, x), _run_ort(model, x), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    ("target", "expected"),
    [
        ([-1, 12], (12,)),
        ([0, 12], (12,)),
        ([0, -1], (12,)),
        ([2, 6, 2], (6, 2)),
        ([0, 0, 2, 2], (3, 2, 2)),
    ],
)
def test_reshape_with_constant_shape(target, expected):
    nodes = [helper.make_node("Reshape", ["x", "s"], ["y"], name="rs")]
    init = _init("s", np.array(target, dtype=np.int64))
    model = _model(nodes, [init], [2, 3, 4], out_shape=[2, *expected])
    g = import_onnx(model).graph
    assert g.node("rs").attrs["shape"] == expected
    assert g.tensors["y"].shape == expected


def test_reshape_with_runtime_shape_uses_shape_inference():
    # x.view(x.size(0), -1) as older torch exports write it: Shape -> Gather -> Unsqueeze -> Concat.
    nodes = [
        helper.make_node("Shape", ["x"], ["sh"], name="shape"),
        helper.make_node("Gather", ["sh", "zero"], ["n"], name="gather", axis=0),
        helper.make_node("Unsqueeze", ["n", "axes"], ["n1"], name="unsq"),
        helper.make_node("Concat", ["n1", "minus1"], ["target"], name="cat", axis=0),
        helper.make_node("Reshape", ["x", "target"], ["y"], name="rs"),
    ]
    inits = [
        _init("zero", np.array(0, dtype=np.int64)),
        _init("axes", np.array([0], dtype=np.int64)),
        _init("minus1", np.array([-1], dtype=np.int64)),
    ]
    model = _model(nodes, inits, ["N", 3, 4], out_shape=["N", 12])
    g = import_onnx(model).graph
    assert [(n.name, n.op) for n in g.nodes] == [("rs", "reshape")]
    assert g.node("rs").attrs["shape"] == (12,)


def test_runtime_reshape_that_mixes_the_batch_is_rejected():
    # x.view(x.size(0) * 2, -1): the first dimension is computed but is not the batch.
    nodes = [
        helper.make_node("Shape", ["x"], ["sh"], name="shape"),
        helper.make_node("Gather", ["sh", "zero"], ["n"], name="gather", axis=0),
        helper.make_node("Mul", ["n", "two"], ["n2"], name="mul"),
        helper.make_node("Unsqueeze", ["n2", "axes"], ["n1"], name="unsq"),
        helper.make_node("Concat", ["n1", "minus1"], ["target"], name="cat", axis=0),
        helper.make_node("Reshape", ["x", "target"], ["y"], name="rs_mix"),
    ]
    inits = [
        _init("zero", np.array(0, dtype=np.int64)),
        _init("two", np.array(2, dtype=np.int64)),
        _init("axes", np.array([0], dtype=np.int64)),
        _init("minus1", np.array([-1], dtype=np.int64)),
    ]
    model = _model(nodes, inits, ["N", 3, 4], out_shape=["M", 6])
    with pytest.raises(UnsupportedOpError, match=r"'rs_mix'.*not the batch"):
        import_onnx(model)


def test_reshape_that_mixes_the_batch_is_rejected():
    nodes = [helper.make_node("Reshape", ["x", "s"], ["y"], name="bad_rs")]
    model = _model(
        nodes, [_init("s", np.array([-1, 6], dtype=np.int64))], ["N", 12], out_shape=["M", 6]
    )
    with pytest.raises(UnsupportedOpError, match="bad_rs"):
        import_onnx(model)


def test_identity_and_dropout_disappear():
    rng = np.random.default_rng(5)
    w = rng.standard_normal((4, 3)).astype(np.float32)
    nodes = [
        helper.make_node("Identity", ["x"], ["xi"], name="id"),
        helper.make_node("MatMul", ["xi", "w"], ["m"], name="mm"),
        helper.make_node("Dropout", ["m"], ["y"], name="drop"),
    ]
    model = _model(nodes, [_init("w", w)], ["N", 4], out_shape=["N", 3])
    g = import_onnx(model).graph
    assert [n.name for n in g.nodes] == ["mm"]
    assert g.node("mm").inputs == ("x",)
    assert g.outputs == ("m",)


# ------------------------------------------------------------------------------------- QDQ ONNX


def _qdq_mlp(rng, a_frac=4, w_frac=6, h_frac=3):
    """x -Q/DQ-> Gemm(DQ(int8 W), DQ(int32 b)) -Q/DQ-> Relu -Q/DQ(uint8)-> MatMul(DQ W2) + DQ(b2)."""
    k, h, n = 6, 8, 3
    w1 = rng.integers(-128, 128, size=(h, k), dtype=np.int8)
    b1 = rng.integers(-(2**20), 2**20, size=h, dtype=np.int32)
    w2 = rng.integers(-128, 128, size=(h, n), dtype=np.int8)
    b2 = rng.integers(-5000, 5000, size=n, dtype=np.int32)
    s = lambda f: np.array(2.0**-f, dtype=np.float32)  # noqa: E731
    inits = [
        _init("w1_q", w1), _init("b1_q", b1), _init("w2_q", w2), _init("b2_q", b2),
        _init("s_a", s(a_frac)), _init("s_w", s(w_frac)), _init("s_b", s(a_frac + w_frac)),
        _init("s_h", s(h_frac)), _init("s_b2", s(h_frac + w_frac)),
        _init("zp8", np.array(0, dtype=np.int8)), _init("zpu8", np.array(0, dtype=np.uint8)),
        _init("zp32", np.array(0, dtype=np.int32)),
    ]  # fmt: skip
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "s_a", "zp8"], ["x_q"], name="x_quant"),
        helper.make_node("DequantizeLinear", ["x_q", "s_a", "zp8"], ["x_dq"], name="x_dequant"),
        helper.make_node("DequantizeLinear", ["w1_q", "s_w", "zp8"], ["w1"], name="w1_dq"),
        helper.make_node("DequantizeLinear", ["b1_q", "s_b", "zp32"], ["b1"], name="b1_dq"),
        helper.make_node("Gemm", ["x_dq", "w1", "b1"], ["h"], name="fc1", transB=1),
        helper.make_node("QuantizeLinear", ["h", "s_h", "zp8"], ["h_q"], name="h_quant"),
        helper.make_node("DequantizeLinear", ["h_q", "s_h", "zp8"], ["h_dq"], name="h_dequant"),
        helper.make_node("Relu", ["h_dq"], ["r"], name="relu1"),
        helper.make_node("QuantizeLinear", ["r", "s_h", "zpu8"], ["r_q"], name="r_quant"),
        helper.make_node("DequantizeLinear", ["r_q", "s_h", "zpu8"], ["r_dq"], name="r_dequant"),
        helper.make_node("DequantizeLinear", ["w2_q", "s_w"], ["w2"], name="w2_dq"),
        helper.make_node("MatMul", ["r_dq", "w2"], ["m"], name="fc2_mm"),
        helper.make_node("DequantizeLinear", ["b2_q", "s_b2"], ["b2"], name="b2_dq"),
        helper.make_node("Add", ["m", "b2"], ["y"], name="fc2_add"),
    ]
    model = _model(nodes, inits, ["N", k], out_shape=["N", n])
    return model, (w1, b1, w2, b2)


def test_qdq_mlp_hints_and_exact_weights():
    rng = np.random.default_rng(10)
    model, (w1, b1, w2, b2) = _qdq_mlp(rng, a_frac=4, w_frac=6, h_frac=3)
    imported = import_onnx(model)
    g, hints = imported.graph, imported.hints
    assert [(n.name, n.op) for n in g.nodes] == [
        ("fc1", "dense"), ("relu1", "relu"), ("fc2_mm", "dense"), ("fc2_add", "bias_add"),
    ]  # fmt: skip
    # Q/DQ pairs are gone; consumers read the original tensors.
    assert g.node("fc1").inputs == ("x",)
    assert g.node("relu1").inputs == ("h",)
    assert g.node("fc2_mm").inputs == ("r",)
    assert g.outputs == ("y",)
    assert not any(t.endswith(("_q", "_dq")) for t in g.tensors)

    def fx(width, frac, signed=True):
        return FixedType(width, frac, signed, Rounding.CONV_EVEN, Saturation.SATURATE)

    assert dict(hints.tensors) == {"x": fx(8, 4), "h": fx(8, 3), "r": fx(8, 3, signed=False)}
    assert dict(hints.params) == {
        ("fc1", "weight"): fx(8, 6),
        ("fc1", "bias"): fx(32, 10),
        ("fc2_mm", "weight"): fx(8, 6),
        ("fc2_add", "bias"): fx(32, 9),
    }
    # Exact float values: codes * scale, weight transposed to (in, out).
    w1_ir = g.node("fc1").params["weight"]
    assert w1_ir.shape == (6, 8)
    assert np.array_equal(np.asarray(w1_ir, dtype=np.float64), w1.T.astype(np.float64) * 2.0**-6)
    b1_ir = np.asarray(g.node("fc1").params["bias"], dtype=np.float64)
    assert np.array_equal(b1_ir, b1.astype(np.float64) * 2.0**-10)
    assert np.array_equal(np.asarray(g.node("fc2_mm").params["weight"], np.float64), w2 * 2.0**-6)
    assert np.array_equal(np.asarray(g.node("fc2_add").params["bias"], np.float64), b2 * 2.0**-9)
    # Codes recovered from the float values are the stored codes.
    codes = np.asarray(w1_ir, dtype=np.float64) * 2.0 ** hints.params[("fc1", "weight")].frac
    assert np.array_equal(codes, w1.T)


def test_qdq_graph_matches_onnxruntime_when_fake_quant_is_applied():
    rng = np.random.default_rng(11)
    model, _ = _qdq_mlp(rng)
    imported = import_onnx(model)
    x = rng.standard_normal((5, 6)).astype(np.float32)

    # Evaluate the float IR with the activation hints applied as fake quantisation.
    g, hints = imported.graph, imported.hints

    def fq(name, v):
        t = hints.tensors.get(name)
        if t is None:
            return v
        return np.clip(np.rint(v * 2.0**t.frac), t.min_code, t.max_code) * 2.0**-t.frac

    values = {"x": fq("x", x.astype(np.float64))}
    for n in g.nodes:
        v = values[n.inputs[0]]
        if n.op == "dense":
            out = v @ np.asarray(n.params["weight"], np.float64)
            if "bias" in n.params:
                out = out + np.asarray(n.params["bias"], np.float64)
        elif n.op == "bias_add":
            out = v + np.asarray(n.params["bias"], np.float64)
        else:
            out = np.maximum(v, 0.0)
        values[n.outputs[0]] = fq(n.outputs[0], out)
    np.testing.assert_allclose(values["y"], _run_ort(model, x), rtol=1e-5, atol=1e-4)


def test_float_weight_through_quantize_dequantize_is_folded():
    w = np.array([[0.30, -0.71], [1.26, 0.0], [-3.0, 0.5078125]], dtype=np.float32)
    s = np.array(2.0**-2, dtype=np.float32)
    nodes = [
        helper.make_node("QuantizeLinear", ["w", "s", "zp"], ["w_q"], name="wq"),
        helper.make_node("DequantizeLinear", ["w_q", "s", "zp"], ["w_dq"], name="wdq"),
        helper.make_node("MatMul", ["x", "w_dq"], ["y"], name="mm"),
    ]
    inits = [_init("w", w), _init("s", s), _init("zp", np.array(0, dtype=np.int8))]
    model = _model(nodes, inits, ["N", 3], out_shape=["N", 2])
    imported = import_onnx(model)
    # round half to even: 0.30*4=1.2->1, -0.71*4=-2.84->-3, 1.26*4=5.04->5, 0.5078125*4=2.03->2
    expected = np.array([[1, -3], [5, 0], [-12, 2]]) * 0.25
    np.testing.assert_array_equal(imported.graph.node("mm").params["weight"], expected)
    assert imported.hints.params[("mm", "weight")] == FixedType(8, 2, True)
    x = np.eye(3, dtype=np.float32)
    np.testing.assert_allclose(_run_ir(imported, x), _run_ort(model, x), rtol=0, atol=0)


def test_quantize_of_float_constant_rounds_half_to_even_and_saturates():
    w = np.array([[0.5, 1.5], [2.5, 1000.0]], dtype=np.float32)  # scale 1: 0, 2, 2, saturate 127
    nodes = [
        helper.make_node("QuantizeLinear", ["w", "s", "zp"], ["w_q"], name="wq"),
        helper.make_node("DequantizeLinear", ["w_q", "s", "zp"], ["w_dq"], name="wdq"),
        helper.make_node("MatMul", ["x", "w_dq"], ["y"], name="mm"),
    ]
    inits = [_init("w", w), _init("s", np.float32(1.0)), _init("zp", np.array(0, dtype=np.int8))]
    model = _model(nodes, inits, ["N", 2], out_shape=["N", 2])
    weight = import_onnx(model).graph.node("mm").params["weight"]
    np.testing.assert_array_equal(weight, [[0.0, 2.0], [2.0, 127.0]])


def test_qdq_on_graph_output_renames_the_output():
    rng = np.random.default_rng(12)
    w = rng.standard_normal((4, 2)).astype(np.float32)
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["m"], name="mm"),
        helper.make_node("QuantizeLinear", ["m", "s", "zp"], ["m_q"], name="q"),
        helper.make_node("DequantizeLinear", ["m_q", "s", "zp"], ["y"], name="dq"),
    ]
    inits = [_init("w", w), _init("s", np.float32(2.0**-5)), _init("zp", np.array(0, np.int16))]
    model = _model(nodes, inits, ["N", 4], out_shape=["N", 2], opset=21)
    imported = import_onnx(model)
    assert imported.graph.outputs == ("m",)
    assert imported.hints.tensors["m"] == FixedType(16, 5, True)


def test_activation_quantize_without_zero_point_is_uint8():
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "s"], ["x_q"], name="xq"),
        helper.make_node("DequantizeLinear", ["x_q", "s"], ["x_dq"], name="xdq"),
        helper.make_node("Relu", ["x_dq"], ["y"], name="relu"),
    ]
    model = _model(nodes, [_init("s", np.float32(2.0**3))], ["N", 3], out_shape=["N", 3])
    imported = import_onnx(model)
    # ONNX: a QuantizeLinear without y_zero_point produces uint8; scale 8 is frac -3.
    assert imported.hints.tensors["x"] == FixedType(8, -3, signed=False)
    assert imported.graph.node("relu").inputs == ("x",)


def test_gemm_alpha_on_quantised_weight_adjusts_the_hint():
    codes = np.array([[3, -4], [127, -128]], dtype=np.int8)
    nodes = [
        helper.make_node("DequantizeLinear", ["w_q", "s"], ["w"], name="wdq"),
        helper.make_node("Gemm", ["x", "w"], ["y"], name="fc", alpha=0.5),
    ]
    inits = [_init("w_q", codes), _init("s", np.float32(2.0**-6))]
    model = _model(nodes, inits, ["N", 2], out_shape=["N", 2])
    imported = import_onnx(model)
    hint = imported.hints.params[("fc", "weight")]
    assert hint == FixedType(8, 7, True)
    weight = np.asarray(imported.graph.node("fc").params["weight"], dtype=np.float64)
    assert np.array_equal(weight * 2.0**hint.frac, codes)
    x = np.eye(2, dtype=np.float32)
    np.testing.assert_array_equal(_run_ir(imported, x), _run_ort(model, x))


def test_gemm_non_power_of_two_alpha_on_quantised_weight_rejected():
    nodes = [
        helper.make_node("DequantizeLinear", ["w_q", "s"], ["w"], name="wdq"),
        helper.make_node("Gemm", ["x", "w"], ["y"], name="fc", alpha=0.3),
    ]
    inits = [_init("w_q", np.ones((2, 2), np.int8)), _init("s", np.float32(2.0**-6))]
    model = _model(nodes, inits, ["N", 2], out_shape=["N", 2])
    with pytest.raises(UnsupportedOpError, match=r"'fc'.*alpha"):
        import_onnx(model)


@pytest.mark.parametrize(
    ("scale", "zero_point", "axis_scale"),
    [(0.1, 0, False), (0.125, 3, False), (0.125, 0, True), (0.1, 3, True)],
)
def test_float_scale_weight_quantisation(scale, zero_point, axis_scale):
    """Float and per-axis weight scales are taken (issue 18 item 3, tests/test_qdq_affine.py);
    a weight zero point is refused, naming the node and the quantiser to use."""
    w = np.ones((3, 2), dtype=np.int8)
    s = np.full(2, scale, np.float32) if axis_scale else np.array(scale, np.float32)
    zp = np.full(2, zero_point, np.int8) if axis_scale else np.array(zero_point, np.int8)
    attrs = {"axis": 1} if axis_scale else {}
    nodes = [
        helper.make_node("DequantizeLinear", ["w_q", "s", "zp"], ["w"], name="w_deq", **attrs),
        helper.make_node("MatMul", ["x", "w"], ["y"], name="mm"),
    ]
    inits = [_init("w_q", w), _init("s", s), _init("zp", zp)]
    model = _model(nodes, inits, ["N", 3], out_shape=["N", 2])
    if zero_point:
        with pytest.raises(UnsupportedOpError, match=f"zero point \\({zero_point}") as info:
            import_onnx(model)
        assert "w_deq" in str(info.value) and "'mm'" in str(info.value) and "WeightSymmetric" in str(info.value)
    else:
        imported = import_onnx(model)
        (node,) = imported.graph.nodes
        np.testing.assert_array_equal(node.params["weight_codes"], w)
        assert imported.hints.params[("mm", "weight")].scale == tuple(float(np.float32(scale)) for _ in s.reshape(-1))


def test_uint8_activation_with_nonzero_zero_point_outside_a_dense_layer_is_refused():
    """An affine activation (zero point 128) is imported; a layer other than Dense reading it is
    refused at quantisation, naming the layer and what is supported."""
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "s", "zp"], ["x_q"], name="xq"),
        helper.make_node("DequantizeLinear", ["x_q", "s", "zp"], ["x_dq"], name="xdq"),
        helper.make_node("Sigmoid", ["x_dq"], ["y"], name="sig"),
    ]
    inits = [_init("s", np.float32(0.25)), _init("zp", np.array(128, np.uint8))]
    model = _model(nodes, inits, ["N", 3], out_shape=["N", 3])
    assert import_onnx(model).hints.tensors["x"].zero_point == 128
    with pytest.raises(AieflowError, match=r"sig.*float scale / zero point.*Dense"):
        aieflow.emulate(model, device="vek280")


def test_activation_q_and_dq_with_different_scales_rejected():
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "s1", "zp"], ["x_q"], name="xq"),
        helper.make_node("DequantizeLinear", ["x_q", "s2", "zp"], ["x_dq"], name="xdq"),
        helper.make_node("Relu", ["x_dq"], ["y"], name="relu"),
    ]
    inits = [
        _init("s1", np.float32(0.25)),
        _init("s2", np.float32(0.5)),
        _init("zp", np.array(0, np.int8)),
    ]
    model = _model(nodes, inits, ["N", 3], out_shape=["N", 3])
    with pytest.raises(UnsupportedOpError, match="xdq"):
        import_onnx(model)


# ------------------------------------------------------------------------------ ONNX errors


@pytest.mark.parametrize("op", ["Softsign", "Softplus"])  # Tanh, Sigmoid, ... are supported (tests/test_activation.py)
def test_unsupported_onnx_op_names_node_and_lists_supported(op):
    nodes = [helper.make_node(op, ["x"], ["y"], name="my_act")]
    model = _model(nodes, [], ["N", 4], out_shape=["N", 4])
    with pytest.raises(UnsupportedOpError) as info:
        import_onnx(model)
    msg = str(info.value)
    assert "my_act" in msg and op in msg and "Gemm" in msg and "MatMul" in msg


def test_unsupported_conv_names_node():
    # Conv is imported (tests/test_conv_import.py); transposed convolutions are not
    w = np.ones((1, 2, 3, 3), dtype=np.float32)
    nodes = [helper.make_node("ConvTranspose", ["x", "w"], ["y"], name="conv1")]
    model = _model(nodes, [_init("w", w)], ["N", 1, 5, 5], out_shape=["N", 2, 7, 7])
    with pytest.raises(UnsupportedOpError, match=r"'conv1'.*'ConvTranspose'"):
        import_onnx(model)


def test_gemm_trans_a_rejected():
    w = np.ones((3, 2), dtype=np.float32)
    nodes = [helper.make_node("Gemm", ["x", "w"], ["y"], name="fc_t", transA=1)]
    model = _model(nodes, [_init("w", w)], [3, 4], out_shape=[4, 2])
    with pytest.raises(UnsupportedOpError, match=r"'fc_t'.*transA"):
        import_onnx(model)


def test_add_of_two_tensors_imports_as_residual_add():
    # issue 7: a residual Add of two computed tensors is its own op family (ops/add.py)
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="relu"),
        helper.make_node("Add", ["x", "r"], ["y"], name="residual"),
    ]
    model = _model(nodes, [], ["N", 4], out_shape=["N", 4])
    add = import_onnx(model).graph.node("residual")
    assert add.op == "add" and add.inputs == ("x", "r")


def test_flatten_other_axis_rejected():
    nodes = [helper.make_node("Flatten", ["x"], ["y"], name="flat0", axis=2)]
    model = _model(nodes, [], ["N", 2, 3, 4], out_shape=["A", "B"])
    with pytest.raises(UnsupportedOpError, match=r"'flat0'.*axis=2"):
        import_onnx(model)


@pytest.mark.parametrize("feature_dim", ["features", None])
def test_dynamic_feature_dim_rejected_unless_example_given(feature_dim):
    rng = np.random.default_rng(20)
    w = rng.standard_normal((5, 2)).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")]
    model = _model(nodes, [_init("w", w)], ["N", feature_dim], out_shape=["N", 2])
    with pytest.raises(ModelError, match=r"'x'.*dimension 1") as info:
        import_onnx(model)
    assert "example_input" in str(info.value)
    # An example input shape (with or without the batch) fixes the dimension.
    for example in [(7, 5), (5,)]:
        g = import_onnx(model, example_input_shape=example).graph
        assert g.tensors["x"].shape == (5,) and g.tensors["y"].shape == (2,)
    g = import_model(model, example_input=np.zeros((3, 5), np.float32)).graph
    assert g.tensors["x"].shape == (5,)


def test_two_graph_inputs_rejected():
    graph = helper.make_graph(
        [helper.make_node("Add", ["a", "b"], ["y"], name="add")],
        "g",
        [
            helper.make_tensor_value_info("a", TensorProto.FLOAT, ["N", 3]),
            helper.make_tensor_value_info("b", TensorProto.FLOAT, ["N", 3]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    with pytest.raises(UnsupportedOpError, match="2 graph inputs"):
        import_onnx(model)


def test_corrupt_file_is_a_model_error(tmp_path):
    path = tmp_path / "broken.onnx"
    path.write_bytes(b"\x08\x07this is not a protobuf\xff\xfe\x00garbage")
    with pytest.raises(ModelError, match="cannot read ONNX model '.*broken.onnx'"):
        import_onnx(path)
    with pytest.raises(ModelError, match="cannot read ONNX model"):
        import_model(str(path))


def test_truncated_model_file_is_a_model_error(tmp_path):
    model, _ = _float_mlp(np.random.default_rng(21))
    data = model.SerializeToString()
    path = tmp_path / "truncated.onnx"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(ModelError, match="cannot read ONNX model"):
        import_onnx(path)


def test_missing_file_is_a_model_error(tmp_path):
    with pytest.raises(ModelError, match="no such file"):
        import_onnx(tmp_path / "nope.onnx")


def test_checker_failure_is_a_model_error():
    # A node reading a tensor nobody produces fails onnx.checker.
    graph = helper.make_graph(
        [helper.make_node("Relu", ["ghost"], ["y"], name="r")],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    with pytest.raises(ModelError, match="cannot read ONNX model"):
        import_onnx(model)


# ------------------------------------------------------------------------------------- PyTorch


def _torch_out(module, x):
    with torch.no_grad():
        return module.eval()(torch.from_numpy(x)).numpy()


def test_torch_sequential_mlp():
    torch.manual_seed(0)
    net = nn.Sequential(
        nn.Flatten(),
        nn.Linear(12, 16),
        nn.ReLU(),
        nn.Dropout(0.5),
        nn.Sequential(nn.Linear(16, 8), nn.ReLU()),
        nn.Linear(8, 3, bias=False),
    )
    net.train()
    x = np.random.default_rng(30).standard_normal((4, 3, 4)).astype(np.float32)
    imported = import_model(net, example_input=torch.from_numpy(x))
    g = imported.graph
    assert net.training  # the caller's mode is restored
    assert imported.source == "torch" and imported.hints.empty
    assert [(n.name, n.op) for n in g.nodes] == [
        ("0", "reshape"), ("1", "dense"), ("2", "relu"), ("4.0", "dense"), ("4.1", "relu"),
        ("5", "dense"),
    ]  # fmt: skip
    assert g.tensors[g.inputs[0]].shape == (3, 4)
    assert g.node("0").attrs["shape"] == (12,)
    assert g.node("1").attrs == {"in_features": 12, "out_features": 16, "activation": None}
    w = g.node("1").params["weight"]
    assert w.dtype == np.float32 and w.shape == (12, 16)
    np.testing.assert_array_equal(w, net[1].weight.detach().numpy().T)
    np.testing.assert_array_equal(g.node("1").params["bias"], net[1].bias.detach().numpy())
    assert "bias" not in g.node("5").params
    assert g.tensors[g.outputs[0]].shape == (3,)
    # Dropout vanished: 4.0 reads the ReLU output directly.
    assert g.node("4.0").inputs == g.node("2").outputs
    np.testing.assert_allclose(_run_ir(imported, x), _torch_out(net, x), rtol=1e-5, atol=1e-5)


class _CustomNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(20, 10)
        self.act = nn.ReLU()
        self.w2 = nn.Parameter(torch.randn(6, 10))
        self.b2 = nn.Parameter(torch.randn(6))
        self.fc3 = nn.Linear(6, 2)

    def forward(self, x):
        x = torch.flatten(x, 1)
        x = self.act(self.fc1(x))
        x = F.relu(F.linear(x, self.w2, self.b2))
        x = x.view(x.size(0), -1)
        x = self.act(x)  # same module called twice
        return self.fc3(x).relu()


def test_torch_custom_module_with_functions():
    torch.manual_seed(1)
    net = _CustomNet()
    x = np.random.default_rng(31).standard_normal((3, 4, 5)).astype(np.float32)
    imported = import_torch(net, torch.from_numpy(x))
    g = imported.graph
    ops = [(n.name, n.op) for n in g.nodes]
    assert ops == [
        ("flatten", "reshape"), ("fc1", "dense"), ("act", "relu"), ("linear", "dense"),
        ("relu", "relu"), ("view", "reshape"), ("act_1", "relu"), ("fc3", "dense"),
        ("relu_1", "relu"),
    ]  # fmt: skip
    np.testing.assert_array_equal(g.node("linear").params["weight"], net.w2.detach().numpy().T)
    np.testing.assert_array_equal(g.node("linear").params["bias"], net.b2.detach().numpy())
    assert g.node("view").attrs["shape"] == (6,)
    assert g.tensors[g.inputs[0]].shape == (4, 5)
    np.testing.assert_allclose(_run_ir(imported, x), _torch_out(net, x), rtol=1e-5, atol=1e-5)


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_torch_onnx_export_of_view_imports():
    """A real torch.onnx export of x.view(x.size(0), -1) computes the shape at run time."""
    import io

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1 = nn.Linear(20, 10)
            self.fc2 = nn.Linear(10, 3)

        def forward(self, x):
            return self.fc2(F.relu(self.fc1(x.view(x.size(0), -1))))

    torch.manual_seed(2)
    net = Net().eval()
    buf = io.BytesIO()
    try:
        torch.onnx.export(
            net, torch.zeros(2, 4, 5), buf, dynamo=False, input_names=["x"],
            output_names=["y"], dynamic_axes={"x": {0: "N"}, "y": {0: "N"}},
        )  # fmt: skip
    except Exception as exc:  # the TorchScript exporter may be missing in future torch
        pytest.skip(f"torch.onnx.export unavailable: {exc}")
    model = onnx.load_from_string(buf.getvalue())
    imported = import_onnx(model)
    ops = [n.op for n in imported.graph.nodes]
    assert ops == ["reshape", "dense", "relu", "dense"]
    assert imported.graph.nodes[0].attrs["shape"] == (20,)
    x = np.random.default_rng(32).standard_normal((3, 4, 5)).astype(np.float32)
    np.testing.assert_allclose(_run_ir(imported, x), _torch_out(net, x), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(_run_ir(imported, x), _run_ort(model, x), rtol=1e-5, atol=1e-5)


def test_torch_example_input_as_shape_tuple():
    net = nn.Sequential(nn.Linear(7, 3))
    g = import_model(net, example_input=(2, 7)).graph
    assert g.tensors[g.inputs[0]].shape == (7,)
    assert g.nodes[0].params["weight"].shape == (7, 3)


def test_torch_conv_rejected_with_module_path():
    # Conv2d and Conv1d are imported (tests/test_conv_import.py, test_frontend_parity.py); transposed
    # convolutions are not
    net = nn.Sequential(nn.ConvTranspose1d(1, 2, 3), nn.Flatten(), nn.Linear(2 * 7, 2))
    with pytest.raises(UnsupportedOpError) as info:
        import_torch(net, torch.zeros(1, 1, 5))
    msg = str(info.value)
    assert "'0'" in msg and "ConvTranspose1d" in msg and "nn.Linear" in msg


def test_torch_unsupported_function_rejected():
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 4)

        def forward(self, x):
            return torch.sin(self.fc(x))

    with pytest.raises(UnsupportedOpError, match="sin"):
        import_torch(Net(), torch.zeros(2, 4))


def test_torch_data_dependent_control_flow_is_a_model_error():
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 4)

        def forward(self, x):
            if x.sum() > 0:
                return self.fc(x)
            return x

    with pytest.raises(ModelError, match="torch.fx") as info:
        import_torch(Net(), torch.zeros(2, 4))
    assert not isinstance(info.value, UnsupportedOpError)


def test_torch_flatten_of_batch_rejected():
    class Net(nn.Module):
        def forward(self, x):
            return torch.flatten(x)

    with pytest.raises(UnsupportedOpError, match="batch"):
        import_torch(Net(), torch.zeros(2, 4))


def test_torch_wrong_example_shape_is_a_model_error():
    with pytest.raises(ModelError, match="example_input"):
        import_torch(nn.Sequential(nn.Linear(4, 2)), torch.zeros(2, 5))


def test_torch_requires_example_input():
    with pytest.raises(ConfigError, match="example_input is required"):
        import_model(nn.Linear(3, 2))


# --------------------------------------------------------------------------------- dispatch


def test_import_model_rejects_unknown_inputs(tmp_path):
    with pytest.raises(ConfigError, match=r"\.onnx"):
        import_model(str(tmp_path / "model.pt"))
    with pytest.raises(ConfigError, match="cannot import"):
        import_model(42)


def test_import_model_accepts_model_proto_and_pathlike(tmp_path):
    model, _ = _float_mlp(np.random.default_rng(40))
    assert [n.op for n in import_model(model).graph.nodes] == ["dense", "relu", "dense"]
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    assert import_model(path).graph.outputs == ("y",)


def test_frontends_package_does_not_import_torch():
    import subprocess
    import sys

    code = "import sys, aieflow.frontends; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
