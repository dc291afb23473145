"""Conv1d -> GRU / LSTM -> Dense -> activation (issue 17, compositions): the 1-D convolutions before
the first recurrent layer become kernels in front of its W x kernels (recurrent/front.py).

Checked here: both frontends import the model alike (the ONNX export's channels-first sequence is
read through an explicit transpose), the convolution's codes equal an independent integer
reference (plain numpy on the layer's integer weights, nothing from aieflow's numerics), the
generated project runs bit for bit on x86 (the SeqConv kernels, the recurrent kernels, the PL
FSM), the front is costed and counted, and what is not mapped is refused naming the layer."""

from __future__ import annotations

import io

import numpy as np
import onnx
import pytest
import torch
from torch import nn

import aieflow
from aieflow.errors import PlanError


class ConvGru(nn.Module):
    """The issue's model: Conv1d front end (channels-first input), GRU, Dense, sigmoid."""

    def __init__(self, cin=6, cout=16, k=3, pad=1, hidden=20):
        super().__init__()
        self.conv = nn.Conv1d(cin, cout, k, padding=pad)
        self.gru = nn.GRU(cout, hidden, batch_first=True)
        self.fc = nn.Linear(hidden, 1)

    def forward(self, x):
        y = torch.relu(self.conv(x)).transpose(1, 2)
        o, _ = self.gru(y)
        return torch.sigmoid(self.fc(o[:, -1]))


class DirectGru(nn.Module):
    def __init__(self):
        super().__init__()
        self.gru = nn.GRU(16, 20, batch_first=True)
        self.fc = nn.Linear(20, 1)

    def forward(self, x):
        o, _ = self.gru(x)
        return torch.sigmoid(self.fc(o[:, -1]))


class TwoConvLstm(nn.Module):
    """Step-major input (batch, steps, channels), two convolutions (the second strided, no
    padding, no ReLU), an LSTM, a Dense head."""

    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv1d(5, 8, 3, padding=1)
        self.c2 = nn.Conv1d(8, 12, 4, stride=2)
        self.lstm = nn.LSTM(12, 10, batch_first=True)
        self.fc = nn.Linear(10, 3)

    def forward(self, x):
        y = self.c2(torch.relu(self.c1(x.transpose(1, 2)))).transpose(1, 2)
        o, _ = self.lstm(y)
        return self.fc(o[:, -1])


def _data(shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _model(cls, **kw):
    torch.manual_seed(0)
    return cls(**kw).eval()


def _onnx(model, x):
    buf = io.BytesIO()
    torch.onnx.export(model, torch.tensor(x[:1]), buf, dynamo=False)
    return onnx.load_from_string(buf.getvalue())


@pytest.fixture(scope="module")
def conv_gru():
    m = _model(ConvGru)
    x = _data((64, 6, 20))
    return m, x, aieflow.compile(m, device="vek280", example_input=x[:1], calibration=x)


# --------------------------------------------------------------------------- independent reference


def _round_shift_even(acc: np.ndarray, shift: int) -> np.ndarray:
    """acc / 2^shift rounded half to even, in Python integers."""
    if shift <= 0:
        return acc * (1 << -shift)
    out = []
    for a in acc.ravel().tolist():
        q, r = divmod(a, 1 << shift)
        half = 1 << (shift - 1)
        q += 1 if r > half or (r == half and q % 2) else 0
        out.append(q)
    return np.array(out, dtype=object).reshape(acc.shape)


def ref_conv1d_codes(x, w, b, k, stride, pad, shift, bias_shift, width, relu):
    """Conv1d on integer codes: x (C, T), w (C * K, O) in (c, j) order, b (O,)."""
    c_in, t_in = x.shape
    xp = np.zeros((c_in, t_in + 2 * pad + k), dtype=object)
    xp[:, pad : pad + t_in] = x.astype(object)
    t_out = (t_in + 2 * pad - k) // stride + 1
    out = np.zeros((w.shape[1], t_out), dtype=object)
    for o in range(t_out):
        window = xp[:, o * stride : o * stride + k].reshape(-1)  # (c, j) order
        acc = window @ w.astype(object) + (b.astype(object) * (1 << bias_shift))
        y = _round_shift_even(acc, shift)
        lo, hi = -(1 << (width - 1)), (1 << (width - 1)) - 1
        y = np.minimum(np.maximum(y, lo), hi)
        out[:, o] = np.maximum(y, 0) if relu else y
    return out.astype(np.int64)


def test_the_convolution_codes_equal_an_independent_integer_reference(conv_gru):
    _, x, d = conv_gru
    conv = d.graph.node("conv")
    t = conv.types.core
    assert t.shift > 0 and t.output.width == 8  # the reference rounds half to even into 8 bits
    xq = d.quantise_input(x[:8])
    xq[0, :, 0] = t.input.max_code if hasattr(t.input, "max_code") else 127  # an edge value
    trace = d.trace(xq)
    got = trace[conv.outputs[0]].reshape(8, 16, 20)
    for s in range(8):
        want = ref_conv1d_codes(xq[s], np.asarray(conv.params["weight_q"]), np.asarray(conv.params["bias_q"]), 3, 1, 1,
                                t.shift, t.bias_shift, 8, True)
        np.testing.assert_array_equal(got[s], want)


# --------------------------------------------------------------------------- the model


def test_conv_gru_sigmoid_compiles_predicts_and_runs_bit_exact_on_x86(conv_gru):
    m, x, d = conv_gru
    want = m(torch.tensor(x)).detach().numpy()
    assert np.abs(d.predict(x) - want).max() < 0.02  # 8-bit codes through conv, GRU and head
    assert d.mapping.dims.front and d.mapping.front_tiles == 1
    f = d.mapping.dims.front[0]
    assert f.vector and f.lanes == 32  # int8 x int8 on AIE-ML: 32 output channels per aie::mac (16 padded to 32)
    assert "VECTOR = true" in d.files["src/rnn_config.h"]
    assert "Conv1d 6->16" in d.summary()
    files = d.files
    assert "src/rnn_front.h" in files and "SeqConv<rnn_front::F0>" in files["src/graph.h"]
    assert "front[0].out[0]" in files["src/graph.h"]  # the W x kernels read the convolution
    v = d.verify(samples=24)  # edge-value rows first, then random codes
    assert v.ok, v.verdict()
    assert v.values == 24


def test_onnx_export_imports_to_the_same_design(conv_gru):
    m, x, d = conv_gru
    d2 = aieflow.compile(_onnx(m, x), device="vek280", example_input=x[:1], calibration=x)
    np.testing.assert_array_equal(d.predict(x, raw=True), d2.predict(x, raw=True))
    assert d2.mapping.dims.front == d.mapping.dims.front


def test_the_front_is_costed_and_counted(conv_gru):
    m, x, d = conv_gru
    p = d.estimate()
    names = [s.name for s in p.stages]
    assert names[0] == "front0" and "w_mac" in names
    front = p.stages[0]
    dims = d.mapping.dims.front[0]
    assert dims.vector and front.tiles == 1
    # at least one vector MAC per window value and lane group, and one cycle per output word
    assert front.occupancy > -(-dims.c_out // dims.lanes) * dims.kernel * dims.c_in + dims.c_out
    assert p.tiles == d.mapping.u_tiles + d.mapping.w_tiles + d.mapping.aggregator_tiles + 1
    perf = d.to_json()["performance"]
    assert perf["tiles_used"] == p.tiles
    assert perf["interval_ns"] >= p.stages[0].occupancy / d.device.clock_hz * 1e9 * dims.t_out * 0.999
    # the same GRU fed directly (its input the convolution's output): one stage fewer, no slower
    direct = _model(DirectGru)
    direct.gru.load_state_dict(m.gru.state_dict())
    direct.fc.load_state_dict(m.fc.state_dict())
    y = _data((64, 20, 16))
    plain = aieflow.compile(direct, device="vek280", example_input=y[:1], calibration=y)
    q = plain.estimate()
    assert [s.name for s in q.stages] == names[1:]
    assert p.sequence_latency_ns > q.sequence_latency_ns
    assert p.tiles == q.tiles + 1


def test_save_and_load_keep_the_front(conv_gru, tmp_path):
    _, x, d = conv_gru
    d.save(tmp_path / "d")
    back = aieflow.load(tmp_path / "d")
    assert back.mapping.dims.front == d.mapping.dims.front
    assert back.files == d.files
    np.testing.assert_array_equal(back.predict(x[:4], raw=True), d.predict(x[:4], raw=True))


@pytest.mark.parametrize("device", ["vck190", "vek280"])
def test_two_convolutions_step_major_input_and_an_lstm_run_bit_exact(device):
    m = _model(TwoConvLstm)
    x = _data((64, 17, 5), seed=1)
    d = aieflow.compile(m, device=device, example_input=x[:1], calibration=x, config={"precision": "int16"})
    assert len(d.mapping.dims.front) == 2
    f0, f1 = d.mapping.dims.front
    assert (f0.t_out, f1.stride, f1.pad_left, f1.t_out) == (17, 2, 0, 7)
    # int16 codes: the vector form only where 2^15 x sum |w| < 2^31 for every channel, else scalar
    for conv, fd in zip(("c1", "c2"), (f0, f1), strict=True):
        w = np.abs(np.asarray(d.graph.node(conv).params["weight_q"]).astype(np.int64))
        assert fd.vector == bool(w.sum(axis=0).max() * 2**15 < 2**31)
    assert not (f0.vector and f1.vector)  # at least one scalar front kernel is exercised
    assert np.abs(d.predict(x) - m(torch.tensor(x)).detach().numpy()).max() < 0.05
    v = d.verify(samples=12)
    assert v.ok, v.verdict()
    onnx_d = aieflow.compile(_onnx(m, x), device=device, example_input=x[:1], calibration=x, config={"precision": "int16"})
    np.testing.assert_array_equal(onnx_d.predict(x, raw=True), d.predict(x, raw=True))


def test_explore_lists_the_mapping_compile_builds():
    m = _model(ConvGru, cout=8, hidden=8)
    x = _data((32, 6, 12))
    cfg = {"target": "latency"}
    ex = aieflow.explore(m, device="vek280", example_input=x[:1], calibration=x, config=cfg)
    d = aieflow.compile(m, device="vek280", example_input=x[:1], calibration=x, config=cfg)
    assert ex.chosen.mapping == d.mapping
    assert ex.front and all(p.mapping.dims.front for p in ex.front)


# --------------------------------------------------------------------------- refusals


class ConvPoolGru(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv1d(4, 8, 3, padding=1)
        self.pool = nn.MaxPool1d(2)
        self.gru = nn.GRU(8, 8, batch_first=True)

    def forward(self, x):
        o, _ = self.gru(self.pool(torch.relu(self.conv(x))).transpose(1, 2))
        return o[:, -1]


class ConvTanhGru(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv1d(4, 8, 3, padding=1)
        self.gru = nn.GRU(8, 8, batch_first=True)

    def forward(self, x):
        o, _ = self.gru(torch.tanh(self.conv(x)).transpose(1, 2))
        return o[:, -1]


@pytest.mark.parametrize("cls, layer, what", [
    (ConvPoolGru, "pool", "maxpool"),
    (ConvTanhGru, "conv", "tanh"),
])
def test_what_the_front_does_not_map_is_refused_by_name(cls, layer, what):
    m = _model(cls)
    x = _data((16, 4, 12))
    with pytest.raises(PlanError) as e:
        aieflow.compile(m, device="vek280", example_input=x[:1], calibration=x)
    msg = str(e.value)
    assert f"layer {layer}" in msg and "gru" in msg.lower() and what in msg.lower()
    # the same model still emulates
    assert aieflow.emulate(m, device="vek280", example_input=x[:1], calibration=x).predict(x).shape == (16, 8)


def test_a_float_front_is_refused_by_name():
    m = _model(ConvGru, cout=8, hidden=8)
    x = _data((16, 6, 12))
    with pytest.raises(PlanError, match=r"layer conv .*float"):
        aieflow.compile(m, device="vck190", example_input=x[:1], calibration=x, config={"precision": "fp32"})
