"""GRU / LSTM: import (PyTorch, ONNX), fp32 emulation, activation tables, errors.

References: PyTorch's own forward, onnxruntime, and a numpy implementation of the ONNX operator
definitions written here from the ONNX spec.  Fixed point against hls4ml: test_recurrent_hls4ml.py.
"""

from __future__ import annotations

import contextlib
import io
import math
import warnings
from fractions import Fraction

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from fixed_reference import ref_cast
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

import aieflow
from aieflow.config import parse_config
from aieflow.errors import ConfigError, UnsupportedOpError
from aieflow.frontends import import_onnx, import_torch
from aieflow.numerics import fixed
from aieflow.numerics.types import FixedType, Rounding, Saturation, parse_type
from aieflow.ops import activations as act
from aieflow.ops.recurrent import reorder_gates

FP32 = {"precision": "fp32"}


def _sig(x):
    return 1.0 / (1.0 + np.exp(-x))


# ------------------------------------------------------------------------------- PyTorch models


class Seq(torch.nn.Module):
    """GRU / LSTM, then a linear head on the last step (``h[-1]`` or ``out[:, -1]``) or on the
    flattened sequence; batch_first=False modules get ``x.transpose(0, 1)``."""

    def __init__(self, cell, inputs, hidden, steps, batch_first=True, layers=1, read="h", outputs=3):
        super().__init__()
        self.rnn = getattr(torch.nn, cell)(inputs, hidden, num_layers=layers, batch_first=batch_first)
        self.read, self.batch_first, self.lstm = read, batch_first, cell == "LSTM"
        self.fc = torch.nn.Linear(hidden * (steps if read == "seq" else 1), outputs)

    def forward(self, x):
        if not self.batch_first:
            x = x.transpose(0, 1)
        out, h = self.rnn(x)
        if self.lstm:
            h = h[0]
        if self.read == "h":
            y = h[-1]
        elif self.read == "last":
            y = out[:, -1] if self.batch_first else out[-1]
        else:
            y = (out if self.batch_first else out.transpose(0, 1)).flatten(1)
        return self.fc(y)


class Sequence(torch.nn.Module):
    """The recurrent layer's whole output sequence is the model's output."""

    def __init__(self, cell, inputs, hidden):
        super().__init__()
        self.rnn = getattr(torch.nn, cell)(inputs, hidden, batch_first=True)

    def forward(self, x):
        return self.rnn(x)[0]


def _torch(model, x):
    with torch.no_grad():
        return model(torch.from_numpy(x)).numpy()


def _data(shape, seed=0, scale=1.0):
    return (np.random.default_rng(seed).standard_normal(shape) * scale).astype(np.float32)


@pytest.mark.parametrize("cell", ["GRU", "LSTM"])
@pytest.mark.parametrize(
    "inputs, hidden, steps, batch_first, layers, read",
    [
        (6, 20, 20, True, 1, "h"),  # top tagging
        (6, 20, 20, False, 1, "last"),
        (16, 48, 9, True, 2, "last"),
        (3, 64, 12, False, 2, "h"),
        (5, 8, 7, True, 1, "seq"),
        (5, 8, 7, False, 2, "seq"),
    ],
)
def test_fp32_emulation_matches_pytorch(cell, inputs, hidden, steps, batch_first, layers, read):
    torch.manual_seed(inputs * hidden + steps)
    model = Seq(cell, inputs, hidden, steps, batch_first, layers, read).eval()
    x = _data((64, steps, inputs), scale=2.0)
    emu = aieflow.emulate(model, device="vck190", example_input=x[:2], config=FP32)
    recurrent = [n for n in emu.graph.nodes if n.op == cell.lower()]
    assert len(recurrent) == layers
    assert recurrent[-1].attrs["return_sequences"] == (read == "seq")
    assert all(n.attrs["return_sequences"] for n in recurrent[:-1])
    np.testing.assert_allclose(emu.predict(x), _torch(model, x), rtol=1e-5, atol=2e-6)


@pytest.mark.parametrize("cell", ["GRU", "LSTM"])
def test_whole_sequence_output_matches_pytorch(cell):
    torch.manual_seed(3)
    model = Sequence(cell, 4, 10).eval()
    x = _data((32, 6, 4), seed=1, scale=2.0)
    emu = aieflow.emulate(model, device="vck190", example_input=x[:2], config=FP32)
    y = emu.predict(x)
    assert y.shape == (32, 6, 10)
    np.testing.assert_allclose(y, _torch(model, x), rtol=1e-5, atol=2e-6)


def test_multi_layer_modules_become_nodes_that_answer_to_the_module_name():
    torch.manual_seed(0)
    model = Seq("GRU", 4, 6, 5, layers=3).eval()
    g = import_torch(model, _data((2, 5, 4))).graph
    assert [n.name for n in g.nodes if n.op == "gru"] == ["rnn_l0", "rnn_l1", "rnn_l2"]
    assert all(n.aliases == ("rnn",) for n in g.nodes if n.op == "gru")
    cfg = {"precision": "int16", "layers": {"rnn": {"output": "fixed<16,2>"}}}
    emu = aieflow.emulate(model, example_input=_data((8, 5, 4)), config=cfg)
    assert {str(n.types.output) for n in emu.graph.nodes if n.op == "gru"} == {"fixed<16,2,TRN,WRAP>"}


# ------------------------------------------------------------------------------- gate orders


def test_reorder_gates_is_the_documented_permutation():
    blocks = np.repeat(np.arange(3), 2)  # [r r z z n n] as PyTorch stores a GRU
    assert reorder_gates(blocks, "gru", "rzh").tolist() == [1, 1, 0, 0, 2, 2]  # [z z r r h h]
    lstm = np.repeat(np.arange(4), 2)  # ONNX [i o f c]
    assert reorder_gates(lstm, "lstm", "iofc").tolist() == [0, 0, 2, 2, 3, 3, 1, 1]  # [i f c o]


def test_pytorch_gru_update_gate_is_z():
    # z = 1 everywhere keeps h at its initial zero; had z and r been swapped, h would move.
    torch.manual_seed(1)
    model = Sequence("GRU", 3, 4).eval()
    with torch.no_grad():
        model.rnn.bias_ih_l0[4:8] = 30.0  # PyTorch [r, z, n]: the z block
    x = _data((8, 5, 3), scale=3.0)
    y = aieflow.emulate(model, device="vck190", example_input=x, config=FP32).predict(x)
    np.testing.assert_array_equal(y, 0.0)
    assert np.abs(_torch(model, x)).max() == 0.0


def test_pytorch_lstm_input_gate_is_i():
    # i = 0 keeps the cell state, and so h, at zero; with i and f swapped it would not.
    torch.manual_seed(2)
    model = Sequence("LSTM", 3, 4).eval()
    with torch.no_grad():
        model.rnn.bias_ih_l0[0:4] = -40.0  # PyTorch [i, f, g, o]: the i block
    x = _data((8, 5, 3), scale=3.0)
    y = aieflow.emulate(model, device="vck190", example_input=x, config=FP32).predict(x)
    assert np.abs(y).max() < 1e-12
    torch_y = _torch(model, x)
    assert np.abs(torch_y).max() < 1e-12


# ------------------------------------------------------------------------------- ONNX: real exports


def _export(model, x, dynamo, dynamic_batch=False):
    f = io.BytesIO()
    kwargs = {"dynamic_axes": {"x": {0: "N"}}} if dynamic_batch and not dynamo else {}
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        if dynamo:
            pytest.importorskip("onnxscript", reason="torch's dynamo ONNX exporter needs onnxscript")
            prog = torch.onnx.export(model, (torch.from_numpy(x),), dynamo=True, input_names=["x"], output_names=["y"])
            return prog.model_proto
        torch.onnx.export(model, (torch.from_numpy(x),), f, dynamo=False, input_names=["x"], output_names=["y"], **kwargs)
    return onnx.load_from_string(f.getvalue())


@pytest.mark.parametrize("cell", ["GRU", "LSTM"])
@pytest.mark.parametrize(
    "dynamo, batch_first, layers, read, dynamic_batch",
    [
        (False, True, 1, "h", False),
        (False, False, 2, "h", True),
        (False, True, 2, "last", True),
        (False, True, 1, "seq", False),
        (True, True, 1, "last", False),
        (True, False, 2, "h", False),
        (True, True, 1, "seq", False),
    ],
)
def test_onnx_exports_of_pytorch_models_import_and_match(cell, dynamo, batch_first, layers, read, dynamic_batch):
    # torch.onnx.export wraps the node in Transpose / Squeeze / Reshape / Gather and computes the
    # zero initial state with Shape / Gather / Concat / Expand: all of it must fold away.
    torch.manual_seed(layers + 10 * batch_first)
    model = Seq(cell, 5, 12, 6, batch_first, layers, read).eval()
    x = _data((4, 6, 5), seed=3, scale=2.0)
    proto = _export(model, x, dynamo, dynamic_batch)
    ops = {n.op_type for n in proto.graph.node}
    assert cell in ops and "Transpose" in ops
    g = import_onnx(proto).graph
    assert [n.op for n in g.nodes if n.op in ("gru", "lstm")] == [cell.lower()] * layers
    emu = aieflow.emulate(proto, device="vck190", example_input=x, config=FP32)
    xs = _data((40, 6, 5), seed=4, scale=2.0)
    np.testing.assert_allclose(emu.predict(xs), _torch(model, xs), rtol=1e-5, atol=2e-6)


# ------------------------------------------------------------------------------- ONNX: operator spec


def _onnx_gru_reference(x_tbf, w, r, b, lbr):
    """numpy transcription of the ONNX GRU definition (gates [z, r, h], f = sigmoid, g = tanh)."""
    n = r.shape[-1]
    wz, wr, wh = np.split(w[0].astype(np.float64), 3)
    rz, rr, rh = np.split(r[0].astype(np.float64), 3)
    wbz, wbr, wbh, rbz, rbr, rbh = np.split(b[0].astype(np.float64), 6)
    h = np.zeros((x_tbf.shape[1], n))
    ys = []
    for xt in x_tbf.astype(np.float64):
        z = _sig(xt @ wz.T + h @ rz.T + wbz + rbz)
        rt = _sig(xt @ wr.T + h @ rr.T + wbr + rbr)
        if lbr:
            cand = np.tanh(xt @ wh.T + rt * (h @ rh.T + rbh) + wbh)
        else:
            cand = np.tanh(xt @ wh.T + (rt * h) @ rh.T + rbh + wbh)
        h = (1 - z) * cand + z * h
        ys.append(h)
    return np.stack(ys), h


def _onnx_lstm_reference(x_tbf, w, r, b):
    """numpy transcription of the ONNX LSTM definition (gates [i, o, f, c], no peepholes)."""
    n = r.shape[-1]
    wi, wo, wf, wc = np.split(w[0].astype(np.float64), 4)
    ri, ro, rf, rc = np.split(r[0].astype(np.float64), 4)
    bias = np.split(b[0].astype(np.float64), 8)
    wbi, wbo, wbf, wbc = bias[:4]
    rbi, rbo, rbf, rbc = bias[4:]
    h = np.zeros((x_tbf.shape[1], n))
    c = np.zeros_like(h)
    ys = []
    for xt in x_tbf.astype(np.float64):
        i = _sig(xt @ wi.T + h @ ri.T + wbi + rbi)
        f = _sig(xt @ wf.T + h @ rf.T + wbf + rbf)
        cc = np.tanh(xt @ wc.T + h @ rc.T + wbc + rbc)
        c = f * c + i * cc
        o = _sig(xt @ wo.T + h @ ro.T + wbo + rbo)
        h = o * np.tanh(c)
        ys.append(h)
    return np.stack(ys), h


def _rnn_model(op, feats, hidden, steps, attrs, params, read="h", layout=0, opset=14, initial=None):
    """x [N, T, F] -> (Transpose) -> GRU/LSTM -> Y_h squeezed, or Y as [N, T*n]."""
    w, r, b = params
    g = 3 if op == "GRU" else 4
    inits = [numpy_helper.from_array(a, k) for k, a in (("W", w), ("R", r), ("B", b))]
    nodes = []
    x = "x"
    if layout == 0:
        nodes.append(helper.make_node("Transpose", ["x"], ["xt"], name="to_time_major", perm=[1, 0, 2]))
        x = "xt"
    ins = [x, "W", "R", "B"]
    if initial is not None:
        inits.append(numpy_helper.from_array(initial, "h0"))
        ins += ["", "h0"]
    nodes.append(helper.make_node(op, ins, ["Y", "Y_h"], name="rnn", hidden_size=hidden, layout=layout, **attrs))
    inits.append(numpy_helper.from_array(np.array([layout], dtype=np.int64), "dir_axis"))
    if read == "h":
        nodes.append(helper.make_node("Squeeze", ["Y_h", "dir_axis"], ["y"], name="squeeze"))
        out_shape = ["N", hidden]
    else:
        axis = 1 if layout == 0 else 2
        inits.append(numpy_helper.from_array(np.array([axis], dtype=np.int64), "axis"))
        nodes.append(helper.make_node("Squeeze", ["Y", "axis"], ["ys"], name="squeeze"))
        if layout == 0:
            nodes.append(helper.make_node("Transpose", ["ys"], ["yb"], name="to_batch_major", perm=[1, 0, 2]))
        inits.append(numpy_helper.from_array(np.array([0, -1], dtype=np.int64), "flat"))
        nodes.append(helper.make_node("Reshape", ["yb" if layout == 0 else "ys", "flat"], ["y"], name="flatten"))
        out_shape = ["N", steps * hidden]
    del g
    graph = helper.make_graph(
        nodes,
        "rnn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", steps, feats])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)],
        initializer=inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)
    onnx.checker.check_model(model)
    return model


def _params(op, feats, hidden, seed):
    g = 3 if op == "GRU" else 4
    rng = np.random.default_rng(seed)
    return (
        (rng.standard_normal((1, g * hidden, feats)) * 0.6).astype(np.float32),
        (rng.standard_normal((1, g * hidden, hidden)) * 0.6).astype(np.float32),
        (rng.standard_normal((1, 2 * g * hidden)) * 0.5).astype(np.float32),
    )


def _ort(model, x):
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {"x": x})[0]


@pytest.mark.parametrize("lbr", [0, 1])
@pytest.mark.parametrize("read", ["h", "seq"])
def test_onnx_gru_follows_the_operator_spec_for_both_reset_placements(lbr, read):
    feats, hidden, steps = 5, 7, 6
    params = _params("GRU", feats, hidden, seed=lbr)
    model = _rnn_model("GRU", feats, hidden, steps, {"linear_before_reset": lbr}, params, read)
    x = _data((16, steps, feats), seed=5, scale=2.0)
    ys, h = _onnx_gru_reference(x.transpose(1, 0, 2), *params, lbr)
    expected = h if read == "h" else ys.transpose(1, 0, 2).reshape(16, -1)
    np.testing.assert_allclose(_ort(model, x), expected, rtol=1e-5, atol=1e-6)  # the reference is right
    node = import_onnx(model).graph.node("rnn")
    assert node.attrs["reset_after"] == bool(lbr)
    emu = aieflow.emulate(model, device="vck190", example_input=x, config=FP32)
    np.testing.assert_allclose(emu.predict(x), expected, rtol=1e-5, atol=2e-6)
    if not lbr:  # the reset placement matters: the other formula is measurably different
        _, other = _onnx_gru_reference(x.transpose(1, 0, 2), *params, 1)
        assert np.abs(other - h).max() > 1e-3


@pytest.mark.parametrize("read", ["h", "seq"])
def test_onnx_lstm_follows_the_operator_spec(read):
    feats, hidden, steps = 4, 9, 5
    params = _params("LSTM", feats, hidden, seed=7)
    model = _rnn_model("LSTM", feats, hidden, steps, {}, params, read)
    x = _data((16, steps, feats), seed=6, scale=2.0)
    ys, h = _onnx_lstm_reference(x.transpose(1, 0, 2), *params)
    expected = h if read == "h" else ys.transpose(1, 0, 2).reshape(16, -1)
    np.testing.assert_allclose(_ort(model, x), expected, rtol=1e-5, atol=1e-6)
    emu = aieflow.emulate(model, device="vck190", example_input=x, config=FP32)
    np.testing.assert_allclose(emu.predict(x), expected, rtol=1e-5, atol=2e-6)


@pytest.mark.parametrize("op", ["GRU", "LSTM"])
def test_onnx_batch_major_layout(op):
    feats, hidden, steps = 3, 5, 4
    params = _params(op, feats, hidden, seed=11)
    attrs = {"linear_before_reset": 1} if op == "GRU" else {}
    model = _rnn_model(op, feats, hidden, steps, attrs, params, "seq", layout=1)
    x = _data((8, steps, feats), seed=8)
    ref = _onnx_gru_reference if op == "GRU" else _onnx_lstm_reference
    ys, _ = ref(x.transpose(1, 0, 2), *params, *([1] if op == "GRU" else []))
    emu = aieflow.emulate(model, device="vck190", example_input=x, config=FP32)
    np.testing.assert_allclose(emu.predict(x), ys.transpose(1, 0, 2).reshape(8, -1), rtol=1e-5, atol=2e-6)


def test_onnx_lstm_output_gate_is_o():
    # ONNX LSTM blocks are [i, o, f, c]: o = 0 forces h = 0; confusing o with f would not.
    feats, hidden, steps = 3, 4, 5
    w, r, b = _params("LSTM", feats, hidden, seed=9)
    b[0, hidden : 2 * hidden] = -40.0
    model = _rnn_model("LSTM", feats, hidden, steps, {}, (w, r, b), "seq")
    x = _data((8, steps, feats), scale=3.0)
    assert np.abs(_ort(model, x)).max() < 1e-12
    emu = aieflow.emulate(model, device="vck190", example_input=x, config=FP32)
    assert np.abs(emu.predict(x)).max() < 1e-12


# ------------------------------------------------------------------------------- clear errors


def test_bidirectional_pytorch_module_is_rejected_with_its_name():
    model = torch.nn.Sequential()
    model.add_module("enc", torch.nn.GRU(3, 4, batch_first=True, bidirectional=True))
    with pytest.raises(UnsupportedOpError, match=r"'enc'.*bidirectional"):
        import_torch(model, _data((2, 5, 3)))


def test_onnx_bidirectional_and_nonzero_initial_state_are_rejected():
    params = _params("GRU", 3, 4, seed=0)
    bidi = tuple(np.concatenate([p, p]) for p in params)
    with pytest.raises(UnsupportedOpError, match=r"'rnn'.*bidirectional"):
        import_onnx(_rnn_model("GRU", 3, 4, 5, {"direction": "bidirectional"}, bidi))
    h0 = np.full((1, 1, 4), 0.5, dtype=np.float32)
    with pytest.raises(UnsupportedOpError, match=r"'rnn'.*non-zero initial_h"):
        import_onnx(_rnn_model("GRU", 3, 4, 5, {}, params, initial=h0))
    zero = np.zeros((1, 1, 4), dtype=np.float32)
    assert import_onnx(_rnn_model("GRU", 3, 4, 5, {}, params, initial=zero)).graph.node("rnn").op == "gru"


def test_onnx_movement_that_mixes_batch_and_time_is_rejected_with_the_node_name():
    feats, hidden, steps = 3, 4, 5
    w, r, b = _params("GRU", feats, hidden, seed=1)
    nodes = [
        helper.make_node("Transpose", ["x"], ["xt"], name="tm", perm=[1, 0, 2]),
        helper.make_node("GRU", ["xt", "W", "R", "B"], ["Y"], name="rnn", hidden_size=hidden),
        helper.make_node("Reshape", ["Y", "rows"], ["y"], name="merge_time_and_batch"),  # (T*N, n)
    ]
    inits = [numpy_helper.from_array(a, k) for k, a in (("W", w), ("R", r), ("B", b))]
    inits.append(numpy_helper.from_array(np.array([-1, hidden], dtype=np.int64), "rows"))
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", steps, feats])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["M", hidden])],
        initializer=inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)], ir_version=8)
    with pytest.raises(UnsupportedOpError, match=r"'merge_time_and_batch'.*mixes the batch"):
        import_onnx(model)


def test_time_major_model_input_is_rejected_with_advice():
    class TimeMajor(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.rnn = torch.nn.GRU(3, 4)

        def forward(self, x):
            return self.rnn(x)[1][-1]

    with pytest.raises(UnsupportedOpError, match=r"'rnn'.*batch_first=False.*dimension 0"):
        import_torch(TimeMajor(), _data((5, 2, 3)))


def test_reading_the_sequence_and_the_last_step_is_rejected():
    class Both(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.rnn = torch.nn.GRU(3, 4, batch_first=True)
            self.a = torch.nn.Linear(20, 2)
            self.b = torch.nn.Linear(4, 2)

        def forward(self, x):
            out, h = self.rnn(x)
            return self.a(out.flatten(1)) + self.b(h[-1])

    with pytest.raises(UnsupportedOpError, match=r"'rnn'.*both"):
        import_torch(Both(), _data((2, 5, 3)))


def test_lstm_cell_state_is_rejected():
    class Cell(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.rnn = torch.nn.LSTM(3, 4, batch_first=True)

        def forward(self, x):
            return self.rnn(x)[1][1][-1]

    with pytest.raises(UnsupportedOpError, match="cell state"):
        import_torch(Cell(), _data((2, 5, 3)))


def test_compile_maps_the_recurrent_layer_and_predict_equals_emulate():
    from aieflow.recurrent.design import RecurrentDesign
    from aieflow.recurrent.select import RecurrentExploration

    torch.manual_seed(0)
    model = Seq("GRU", 6, 20, 20).eval()
    x = _data((32, 20, 6))
    emu = aieflow.emulate(model, device="vek280", example_input=x, config={"precision": "int16"})
    # Power-of-two PTQ at 16 bits stays close to the float model.
    np.testing.assert_allclose(emu.predict(x), _torch(model, x), atol=2e-2)
    codes = emu.predict(x, raw=True)
    assert codes.dtype == np.int64
    assert "rnn (gru)" in emu.summary()
    for cfg in ({"precision": "int16"}, {"precision": "int16", "target": "latency"}):
        d = aieflow.compile(model, device="vek280", example_input=x, config=cfg)
        assert isinstance(d, RecurrentDesign) and d.layer.name == "rnn"
        # fixed point: the same hls4ml-order arithmetic whatever the mapping
        np.testing.assert_array_equal(d.predict(x, raw=True), codes)
        assert (d.exploration is not None) == ("target" in cfg)
    ex = aieflow.explore(model, device="vek280", example_input=x, config={"precision": "int16", "target": "latency"})
    assert isinstance(ex, RecurrentExploration)
    assert ex.chosen.latency_ns == min(p.latency_ns for p in ex.front)
    assert ex.chosen.mapping == d.mapping  # explore shows what compile generates for the same target
    from aieflow.recurrent.emit import layout

    # every front mapping is generated: row kernels / chains with their packet sources, the compact tile
    # or the grid (issue 22)
    lays = [layout(p.mapping, d.device) for p in ex.front]
    assert all(lay.sources or lay.compact or lay.grid for lay in lays)
    assert "Pareto front" in ex.report() and "*" in ex.report()
    # without a target compile maps the planner's published design, and explore marks that one
    plain = aieflow.explore(model, device="vek280", example_input=x, config={"precision": "int16"})
    default = aieflow.compile(model, device="vek280", example_input=x, config={"precision": "int16"})
    assert plain.chosen.mapping == default.mapping and plain.chosen.tiles > min(p.tiles for p in plain.front)
    fewest = aieflow.explore(model, device="vek280", example_input=x, config={"precision": "int16", "target": "resources"})
    assert fewest.chosen.tiles == min(p.tiles for p in fewest.front)


def test_fixed_point_reset_before_gru_and_bf16_are_config_errors():
    params = _params("GRU", 3, 4, seed=0)
    model = _rnn_model("GRU", 3, 4, 5, {"linear_before_reset": 0}, params)
    x = _data((4, 5, 3))
    with pytest.raises(ConfigError, match=r"'rnn'.*reset gate.*before"):
        aieflow.emulate(model, example_input=x, config={"precision": "int16"})
    with pytest.raises(ConfigError, match=r"'rnn'.*bf16 is not available on VCK190"):  # bf16: AIE-ML / v2 only
        aieflow.emulate(model, device="vck190", example_input=x, config={"precision": "bf16"})
    with pytest.raises(ConfigError, match=r"fp32 is not available on VEK280"):
        aieflow.emulate(model, device="vek280", example_input=x, config=FP32)


# ------------------------------------------------------------------------------- config


def test_activations_config_presets_tables_and_precedence():
    cfg = parse_config(
        {
            "precision": "int16",
            "activations": {"sigmoid": "exact", "tanh": "espcn-thesis"},
            "layers": {
                "rnn": {
                    "accum": "fixed<20,8,RND,SAT>",
                    "recurrent_weight": "fixed<8,1>",
                    "activations": {"tanh": {"size": 512, "range": [-2, 2], "index_rounding": "round", "entry": "fixed<10,2>"}},
                }
            },
        }
    )
    assert cfg.activations["sigmoid"] == act.ExactActivation("sigmoid")
    assert cfg.activations["tanh"].preset == "espcn-thesis"
    table = cfg.layers["rnn"].activations["tanh"]
    assert (table.size, table.limit, table.index_rounding, str(table.entry)) == (512, 2, Rounding.SYM_INF, "fixed<10,2,TRN,WRAP>")
    assert str(cfg.layers["rnn"].types["accum"]) == "fixed<20,8,RND,SAT>"
    again = parse_config(cfg.to_json())
    assert again.activations == cfg.activations and again.layers["rnn"].activations == cfg.layers["rnn"].activations


@pytest.mark.parametrize(
    "raw, match",
    [
        ({"activations": {"relu": "exact"}}, "unknown function 'relu'"),
        ({"activations": {"tanh": "lut"}}, "unknown activation 'lut'"),
        ({"activations": {"sigmoid": "espcn-thesis"}}, "tanh table only"),
        ({"activations": {"tanh": {"range": [-1, 2]}}}, "symmetric"),
        ({"activations": {"tanh": {"size": 1000, "range": 3}}}, "dyadic"),
        ({"activations": {"tanh": {"index_rounding": "up"}}}, "unknown 'up'"),
        ({"layers": {"rnn": {"recurrent_weight": "ufixed<8,1>"}}}, "unsigned"),
    ],
)
def test_bad_activation_and_type_configs_are_clear_errors(raw, match):
    with pytest.raises(ConfigError, match=match):
        parse_config(raw)


def test_layer_activations_override_the_top_level_choice():
    torch.manual_seed(4)
    model = Sequence("GRU", 3, 5).eval()
    x = _data((16, 6, 3), scale=2.0)
    cfg = {"precision": "fp32", "activations": {"sigmoid": "hls4ml", "tanh": "hls4ml"}, "layers": {"rnn": {"activations": {"tanh": "exact"}}}}
    node = aieflow.emulate(model, device="vck190", example_input=x, config=cfg).graph.node("rnn")
    assert node.types.sigmoid.preset == "hls4ml" and node.types.tanh == act.ExactActivation("tanh")
    # Tables are coarse: fp32 with the hls4ml tables differs from PyTorch, but only by table error.
    y = aieflow.emulate(model, device="vck190", example_input=x, config=cfg).predict(x)
    err = np.abs(y - _torch(model, x)).max()
    assert 1e-4 < err < 0.05


# ------------------------------------------------------------------------------- tables vs the spec


def _trunc(v: Fraction) -> int:
    return math.trunc(v)


def _c_round(v: Fraction) -> int:
    return int(math.copysign(math.floor(abs(v) + Fraction(1, 2)), v))


@pytest.mark.parametrize("fn, limit", [("sigmoid", 8), ("tanh", 4)])
@pytest.mark.parametrize("size", [1024, 256])
def test_hls4ml_table_entries_match_the_spec(fn, limit, size):
    # rnn-semantics.md: entry i = f(2L (i - N/2) / N) truncated into ap_fixed<18,8>.
    spec = act.hls4ml_table(fn, size)
    x = 2 * limit * (np.arange(size) - size / 2) / size
    f = _sig(x) if fn == "sigmoid" else np.tanh(x)
    np.testing.assert_array_equal(spec.values(), np.floor(f * 2**10) / 2**10)


@pytest.mark.parametrize("fn, limit", [("sigmoid", 8), ("tanh", 4)])
def test_hls4ml_index_matches_the_spec_including_clamp_edges(fn, limit):
    # index = int(x N / 2L) + N/2 (toward zero), clamped to [0, N-1]; input ap_fixed<16,6>.
    spec = act.hls4ml_table(fn)
    frac = 10
    xs = [-32, -limit - 2**-frac, -limit, -limit + 2**-frac, -(2**-frac), 0, 2**-frac, limit - 2**-frac, limit, 31.999]
    codes = np.array([round(x * 2**frac) for x in xs], dtype=np.int64)
    expected = [min(max(_trunc(Fraction(int(c), 2**frac) * 1024 / (2 * limit)) + 512, 0), 1023) for c in codes]
    assert spec.index_of_codes(codes, frac).tolist() == expected
    assert expected[1] == 0 and expected[-3] == 1023 and expected[4] == 512  # clamps; -2^-10 truncates to 512


def test_espcn_table_matches_the_thesis_definition_and_edges():
    # espcn-super-resolution.md: entry i = tanh((i - 512) / 128) rounded to 1/256; index
    # 512 + round(x * 128); 1.0 for x >= 4, -1.0 for x < -4, and x just below 4 must not overflow.
    spec = act.parse_activation("tanh", "espcn-thesis")
    i = np.arange(1024)
    np.testing.assert_array_equal(spec.values(), np.round(np.tanh((i - 512) / 128) * 256) / 256)
    xs = np.array([4.0, 5.0, 4.0 - 2**-10, 4 - 1 / 256, -4.0, -4.001, -100.0, 0.3, -0.3, 1 / 256, -1 / 256], dtype=np.float32)
    expected = []
    for x in xs:
        k = min(max(512 + _c_round(Fraction(float(x)) * 128), 0), 1023)
        expected.append(round(math.tanh((k - 512) / 128) * 256) / 256)
    np.testing.assert_array_equal(act.apply_float32(spec, xs), np.array(expected, dtype=np.float32))
    assert act.apply_float32(spec, xs[:4]).tolist() == [1.0] * 4
    assert act.apply_float32(spec, xs[4:7]).tolist() == [-1.0] * 3


@settings(max_examples=200, deadline=None)
@given(
    codes=st.lists(st.integers(-(2**23), 2**23 - 1), min_size=1, max_size=20),
    frac=st.integers(0, 20),  # coarser inputs and 32-bit index overflow: checked against hls4ml
    size=st.sampled_from([64, 100, 1024, 4096]),
    limit=st.sampled_from([Fraction(1, 2), Fraction(1), Fraction(4), Fraction(8)]),
    rounding=st.sampled_from(list(act.INDEX_ROUNDINGS)),
)
def test_table_index_is_exact_for_any_input(codes, frac, size, limit, rounding):
    spec = act.TableSpec("tanh", size, limit, act.INDEX_ROUNDINGS[rounding], parse_type("fixed<18,8>"))
    assume(all(abs(Fraction(c, 2**frac) * spec.scale) < 2**30 for c in codes))  # no C int overflow
    ref_round = {
        "trunc": math.trunc,
        "floor": math.floor,
        "round": _c_round,
        "half_even": round,
        "half_up": lambda v: math.floor(v + Fraction(1, 2)),
    }[rounding]
    expected = [
        min(max(ref_round(Fraction(c) / Fraction(2) ** frac * Fraction(size) / (2 * limit)) + size // 2, 0), size - 1)
        for c in codes
    ]
    assert spec.index_of_codes(np.array(codes, dtype=np.int64), frac).tolist() == expected
    floats = np.array([float(Fraction(c) / Fraction(2) ** frac) for c in codes])
    assert spec.index_of_floats(floats).tolist() == expected


# ------------------------------------------------------------------------------- ap_fixed casts


_MODES = [(r, s) for r in (Rounding.FLOOR, Rounding.SYM_FLOOR, Rounding.POS_INF, Rounding.SYM_ZERO, Rounding.SYM_INF, Rounding.NEG_INF, Rounding.CONV_EVEN) for s in Saturation]


@settings(max_examples=300, deadline=None)
@given(
    codes=st.lists(st.integers(-(2**40), 2**40), min_size=1, max_size=10),
    frac=st.integers(-8, 40),
    width=st.integers(2, 32),
    tfrac=st.integers(-6, 36),
    mode=st.sampled_from(_MODES),
)
def test_cast_is_ap_fixed_assignment(codes, frac, width, tfrac, mode):
    t = FixedType(width, tfrac, True, *mode)
    got = fixed.cast(np.array(codes, dtype=np.int64), frac, t)
    assert got.tolist() == [ref_cast(c, frac, t) for c in codes]
