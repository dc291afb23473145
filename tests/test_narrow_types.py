"""Output types narrower than their container (``fixed<10,1>`` held in int16) in every kernel family
that stores a fixed-point type through an SRS: the DAG's Dense / residual Add / LayerNorm / MatMul
(and its Activation / Softmax, whose tables clamp to the type), the CNN's conv stages and fused
residual add.  The SRS saturates at the container's width; ``templates/kernels/narrow.h`` applies the
type's own range after it.  Each design is built on x86 against the shim and compared bit for bit
with ``predict`` on inputs that drive the layers past their narrow range, under SAT, SAT_SYM and WRAP;
unsigned types (``ufixed<10,2>`` after a fused ReLU, in uint16 / uint8 containers) too.

The ranges asserted here are written from the type strings (2^(W-1) for a signed W-bit type, 2^W
for an unsigned one), not taken from aieflow."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch
from torch import nn

import aieflow

MODES = ("SAT", "SAT_SYM", "WRAP")


def _range(text: str) -> tuple[int, int]:
    """The codes of a ``fixed<W,I,...,mode>`` under its overflow mode (``ufixed``: 0 .. 2^W - 1)."""
    w = int(re.match(r"u?fixed<(\d+),", text).group(1))
    if text.startswith("ufixed"):
        return 0, 2**w - 1
    hi = 2 ** (w - 1) - 1
    return (-hi if text.endswith("SAT_SYM>") else -hi - 1), hi


def _typed(widths: dict[str, str], mode: str) -> dict[str, dict[str, str]]:
    return {name: {"output": f"{t[:-1]},RND_CONV,{mode}>"} for name, t in widths.items()}


def _check_ranges(design, x, types, mode, must_reach):
    """Every narrow tensor's emulated codes lie in its own range; under SAT / SAT_SYM the layers
    in ``must_reach`` reach a bound of it (the inputs drive them past the range)."""
    trace = design.trace(design.quantise_input(x))
    for name, layer in types.items():
        assert str(design.graph.node(name).types.output) == layer["output"]
        codes = trace.get(design.graph.node(name).outputs[0])
        if codes is None:
            assert name not in must_reach, name
            continue
        lo, hi = _range(layer["output"])
        assert lo <= codes.min() and codes.max() <= hi, name
        if mode != "WRAP" and name in must_reach:
            assert codes.min() == lo or codes.max() == hi, name


def _config_structs(text: str) -> dict[str, str]:
    return {m.group(1): m.group(2) for m in re.finditer(r"struct (\w+)_cfg \{(.*?)\n\};", text, re.S)}


class NarrowDag(nn.Module):
    """LayerNorm, Dense, residual Add, Q K^T MatMul, tanh, softmax and a last Add in one DAG."""

    def __init__(self):
        super().__init__()
        self.ln, self.fc, self.g = nn.LayerNorm(32), nn.Linear(32, 32), nn.Linear(32, 16)
        self.q, self.k = nn.Linear(32, 16), nn.Linear(32, 16)

    def forward(self, x):  # x: [16 tokens, 32 features]
        h = self.ln(x)
        a = h + self.fc(h)
        s = torch.matmul(self.q(x), self.k(x).transpose(1, 2))  # the MatMul's operands stay 16-bit
        return self.g(torch.tanh(a)) + torch.softmax(s, dim=-1)


DAG_TYPES = {"ln": "fixed<10,1>", "fc": "fixed<11,1>", "add": "fixed<11,1>", "matmul": "fixed<12,3>",
             "tanh": "fixed<10,1>", "softmax": "fixed<10,1>", "g": "fixed<10,1>", "add_1": "fixed<10,1>"}


@pytest.mark.parametrize("mode", MODES)
def test_dag_narrow_outputs_run_bit_exact_on_x86(mode):
    torch.manual_seed(0)
    x = np.random.default_rng(0).standard_normal((64, 16, 32)).astype(np.float32)
    types = _typed(DAG_TYPES, mode)
    d = aieflow.compile(NarrowDag().eval(), device="vek280", example_input=x[:4], calibration=x,
                        config={"precision": "int16", "batch": 2, "layers": types})
    structs = _config_structs(next(v for k, v in d.files.items() if k.endswith("layers.h")))
    for name in ("ln", "fc", "add", "matmul", "g", "add_1"):  # every SRS kernel carries its range
        lo, hi = _range(types[name]["output"])
        assert f"OUT_LO = {lo}, OUT_HI = {hi};" in structs[name], name
        wrap = 16 - int(DAG_TYPES[name][6:8]) if mode == "WRAP" else 0
        assert f"OUT_WRAP = {wrap};" in structs[name], name
    assert "OUT_LO" not in structs["q"]  # a container-wide type gets none
    xs = np.concatenate([x[:4] * 3.0, x[4:8]])
    _check_ranges(d, xs, types, mode, must_reach=("ln", "fc", "add", "matmul", "g", "add_1"))
    v = d.verify(xs)
    assert v.ok, v.verdict()
    v = d.verify(samples=16)  # type-edge rows, then random codes
    assert v.ok, v.verdict()


class NarrowCnn(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1, self.c2, self.c3 = nn.Conv2d(2, 8, 3, padding=1), nn.Conv2d(8, 8, 3, padding=1), nn.Conv2d(8, 4, 1)
        self.pool = nn.MaxPool2d(2)

    def forward(self, x):
        h = torch.relu(self.c1(x))
        h = self.c2(h) + h  # the residual add fused into c2's stage
        return self.c3(self.pool(h))


CNN_TYPES = {"c1": "fixed<10,1>", "c2": "fixed<11,1>", "add": "fixed<11,1>", "c3": "fixed<10,1>"}


@pytest.mark.parametrize("mode", MODES)
def test_cnn_narrow_outputs_run_bit_exact_on_x86(mode):
    torch.manual_seed(0)
    x = np.random.default_rng(0).standard_normal((16, 2, 16, 16)).astype(np.float32)
    types = _typed(CNN_TYPES, mode)
    d = aieflow.compile(NarrowCnn().eval(), device="vek280", example_input=x[:2], calibration=x,
                        config={"precision": "int16", "layers": types})
    layers_h = next(v for k, v in d.files.items() if k.endswith("layers.h"))
    assert layers_h.count("OUT_LO = ") == 3  # c1, c2, c3 (the fused add has its own RES_LO / RES_HI)
    xs = np.concatenate([x[:2] * 4.0, x[2:4]])
    _check_ranges(d, xs, types, mode, must_reach=("c2", "add", "c3"))
    v = d.verify(xs)
    assert v.ok, v.verdict()


# (cell, accumulator, state / output type, whether the state reaches its bound): the recurrent kernels
# cast through rnn_fixed.h at the type's width; the GRU's state [-0.5, 0.5) is driven past by the tanh
# outputs (the LSTM's o tanh(c) stays inside here), the accumulators overflow at 13 / 14 bits
RECURRENT = [("GRU", "fixed<14,3,RND_CONV,SAT_SYM>", "fixed<12,0,RND_CONV,WRAP>", False),
             ("LSTM", "fixed<13,3,RND_CONV,WRAP>", "fixed<12,0,RND_CONV,SAT_SYM>", False),
             ("GRU", "fixed<13,3,RND_CONV,WRAP>", "fixed<12,0,RND_CONV,SAT_SYM>", True),
             ("GRU", "fixed<14,3,RND_CONV,SAT>", "fixed<12,0,RND_CONV,SAT>", True)]


@pytest.mark.parametrize(("cell", "accum", "output", "reach"), RECURRENT)
def test_recurrent_narrow_types_run_bit_exact_on_x86(cell, accum, output, reach, tmp_path):
    from test_recurrent_compact import HLS4ML, _compile

    d, _, x = _compile(cell, "vek280", "int16", {**HLS4ML, "accum": accum, "output": output}, 6, 20, 8, False, 3.0)
    node = next(n for n in d.graph.nodes if n.op == cell.lower())
    assert (str(node.types.accum), str(node.types.output)) == (accum, output)
    codes = np.asarray(d.predict(x[:16].numpy()), dtype=np.float64) * 2**12  # the state's codes (12 fractional bits)
    assert np.array_equal(codes, np.round(codes))
    lo, hi = _range(output)
    assert lo <= codes.min() and codes.max() <= hi
    if reach:
        assert codes.min() == lo or codes.max() == hi  # the state saturates
    result = d.verify(x[:16].numpy(), cache_dir=tmp_path)
    assert result.ok, result.verdict()
    result = d.verify(samples=12, cache_dir=tmp_path)
    assert result.ok, result.verdict()


def _chain(mid):
    torch.manual_seed(3)
    return nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 32), mid(), nn.Linear(32, 5),
                         nn.Softmax(dim=-1)).eval()


# Dense chain with posts fused into the Dense kernels (ops/post.py, dense.h DensePost): the Dense
# outputs narrow (narrow.h before the post reads them), the activation / softmax outputs narrow
# (activation_fixed.h clamps to the type); int8 containers on AIE1, int16 on AIE-ML
CHAIN = [("vek280", "int16", nn.Tanh, {"0": "fixed<10,2>", "2": "fixed<10,1>", "3": "fixed<10,1>",
                                       "4": "fixed<10,0>", "5": "fixed<10,1>"}),
         ("vck190", "int8", nn.Sigmoid, {"0": "fixed<6,2>", "2": "fixed<6,1>", "3": "fixed<6,0>",
                                         "4": "fixed<6,0>", "5": "fixed<6,1>"})]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(("device", "precision", "mid", "widths"), CHAIN, ids=["vek280-int16", "vck190-int8"])
def test_chain_with_fused_posts_narrow_outputs_run_bit_exact_on_x86(device, precision, mid, widths, mode):
    x = np.random.default_rng(3).standard_normal((128, 16)).astype(np.float32)
    types = _typed(widths, mode)
    d = aieflow.compile(_chain(mid), device=device, example_input=x[:8], calibration=x,
                        config={"precision": precision, "batch": 4, "layers": types})
    head = d.files["src/layers.h"]
    assert "POST = 2" in head and "POST = 1" in head  # the posts are fused, not kernels of their own
    assert head.count("OUT_LO = ") == 3
    xs = x[:20] * 6.0
    _check_ranges(d, xs, types, mode, must_reach=("0", "2", "4"))
    v = d.verify(xs)
    assert v.ok, v.verdict()
    v = d.verify(samples=24)
    assert v.ok, v.verdict()


# The spread mappings (vck190): row-wise kernels or column cascade chains, aggregated on the AI Engine
# or by the PL FSM, with the dense head: narrow state, accumulator and head outputs
@pytest.mark.parametrize(("distribution", "aggregation"), [("row", "aie"), ("row", "hybrid"), ("column", "aie")])
def test_recurrent_spread_mappings_with_narrow_types_run_bit_exact_on_x86(distribution, aggregation, tmp_path):
    from test_recurrent_compact import HLS4ML
    from test_recurrent_verify import _Net

    from aieflow.recurrent.design import compile_recurrent
    from aieflow.recurrent.plan import RecurrentOptions

    torch.manual_seed(0)
    net = _Net("GRU", 6, 20, True).eval()
    with torch.no_grad():
        for p in net.rnn.parameters():
            p.mul_(3.0)  # overflowing accumulators
    x = torch.randn(64, 6, 6) * 2.0
    out = "fixed<12,0,RND_CONV,SAT_SYM>"
    cfg = {"precision": "int16", "layers": {"rnn": {**HLS4ML, "accum": "fixed<13,3,RND_CONV,WRAP>", "output": out},
                                            "fc1": {"output": out}, "fc2": {"output": "fixed<12,2,RND_CONV,WRAP>"}}}
    d = compile_recurrent(net, "vck190", x[:4], cfg, x,
                          RecurrentOptions(aggregation=aggregation, distribution=distribution))
    assert not d.mapping.compact and d.mapping.aggregation == aggregation
    assert str(next(n for n in d.graph.nodes if n.op == "gru").types.output) == out
    result = d.verify(x[:16].numpy(), cache_dir=tmp_path)
    assert result.ok, result.verdict()
    result = d.verify(samples=12, cache_dir=tmp_path)
    assert result.ok, result.verdict()


# Unsigned narrow outputs after fused ReLUs (ufixed<W,I> held in a signed container: 0 .. 2^W - 1,
# wrapping modulo 2^W under WRAP), a signed narrow last layer; int16 on AIE-ML, int8 on AIE1
UNSIGNED = [("vek280", "int16", {"0": "ufixed<10,2>", "2": "ufixed<9,1>", "4": "fixed<9,0>"}),
            ("vck190", "int8", {"0": "ufixed<6,2>", "2": "ufixed<7,1>", "4": "fixed<6,0>"})]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(("device", "precision", "widths"), UNSIGNED, ids=["vek280-int16", "vck190-int8"])
def test_unsigned_narrow_outputs_run_bit_exact_on_x86(device, precision, widths, mode):
    torch.manual_seed(3)
    m = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 5)).eval()
    x = np.random.default_rng(3).standard_normal((128, 16)).astype(np.float32)
    types = _typed(widths, mode)
    d = aieflow.compile(m, device=device, example_input=x[:8], calibration=x,
                        config={"precision": precision, "batch": 4, "layers": types})
    structs = _config_structs(d.files["src/layers.h"])
    container = 16 if precision == "int16" else 8
    for name, t in widths.items():
        lo, hi = _range(types[name]["output"])
        struct = structs[f"l_{name}"]  # the sanitised name of torch's "0"
        assert f"OUT_LO = {lo}, OUT_HI = {hi};" in struct, name
        width = int(re.match(r"u?fixed<(\d+),", t).group(1))
        assert f"OUT_WRAP = {container - width if mode == 'WRAP' else 0};" in struct, name
    xs = x[:20] * 6.0
    _check_ranges(d, xs, types, mode, must_reach=("0", "2", "4"))
    trace = d.trace(d.quantise_input(xs))
    if mode == "WRAP":  # values past 2^W wrapped back into the range: some small codes where SAT gives the top
        sat = aieflow.compile(m, device=device, example_input=x[:8], calibration=x,
                              config={"precision": precision, "batch": 4, "layers": _typed(widths, "SAT")})
        top = sat.trace(sat.quantise_input(xs))[sat.graph.node("0").outputs[0]] == _range(types["0"]["output"])[1]
        wrapped = trace[d.graph.node("0").outputs[0]][top]
        assert (wrapped < _range(types["0"]["output"])[1] // 2).any()
    v = d.verify(xs)
    assert v.ok, v.verdict()
    v = d.verify(samples=24)
    assert v.ok, v.verdict()
