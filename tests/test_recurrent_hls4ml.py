"""Fixed-point GRU / LSTM emulation against hls4ml's own C simulation, bit for bit.

The ground truth is hls4ml 1.x (PyPI ``hls4ml``): each model is converted with
``convert_from_pytorch_model``, its generated C++ compiled with g++ against the ap_types headers
hls4ml ships (``hls_model.compile()``), and run with ``hls_model.predict``.  aieflow's side is an
independent numpy implementation (ops/recurrent.py, ops/activations.py) given the same per-layer
types and tables.  Skipped, with the reason, when hls4ml or g++ is unavailable.
"""

from __future__ import annotations

import contextlib
import re
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

hls4ml = pytest.importorskip(
    "hls4ml", reason="hls4ml is not installed (pip install hls4ml); its C simulation is the reference here"
)
torch = pytest.importorskip("torch")
if shutil.which("g++") is None:
    pytest.skip("g++ is needed to compile hls4ml's C simulation", allow_module_level=True)

from hls4ml_tools import hls4ml_return_sequences  # noqa: E402

import aieflow  # noqa: E402
from aieflow.numerics import fixed  # noqa: E402
from aieflow.numerics.types import FixedType, parse_type  # noqa: E402
from aieflow.ops import activations as act  # noqa: E402

TEMPLATES = Path(hls4ml.__file__).parent / "templates" / "vivado"
RNN_KEYS = ("weight", "bias", "recurrent_weight", "recurrent_bias", "accum")
_Q = {"TRN": "AP_TRN", "TRN_ZERO": "AP_TRN_ZERO", "RND": "AP_RND", "RND_ZERO": "AP_RND_ZERO",
      "RND_INF": "AP_RND_INF", "RND_MIN_INF": "AP_RND_MIN_INF", "RND_CONV": "AP_RND_CONV"}
_O = {"WRAP": "AP_WRAP", "SAT": "AP_SAT", "SAT_SYM": "AP_SAT_SYM"}


def ap(t: str) -> str:
    """aieflow's ``fixed<W,I,Q,O>`` as the ``ap_fixed<W,I,AP_Q,AP_O>`` hls4ml's config wants."""
    ft = parse_type(t)
    q, o = re.match(r"fixed<\d+,-?\d+,(\w+),(\w+)>", ft.to_string()).groups()
    return f"ap_fixed<{ft.width},{ft.int_bits},{_Q[q]},{_O[o]}>"


# ------------------------------------------------------------------------- activations alone


def _activation_probe(tmp: Path, fn: str, data_t: str, res_t: str, table_t: str, size: int) -> np.ndarray:
    """hls4ml's nnet::sigmoid / nnet::tanh on every code of ``data_t``, compiled with g++."""
    d = parse_type(data_t)
    src = tmp / f"{fn}.cpp"
    src.write_text(
        f"""#include "nnet_utils/nnet_activation.h"
#include <cmath>
#include <cstdio>
typedef {ap(data_t)} data_t;
typedef {ap(res_t)} res_t;
struct cfg : nnet::activ_config {{
    static const unsigned n_in = 1;
    static const unsigned table_size = {size};
    typedef {ap(table_t)} table_t;
}};
int main() {{
    for (long long c = {d.min_code}; c <= {d.max_code}; ++c) {{
        data_t x[1] = {{data_t(std::ldexp((double)c, {-d.frac}))}};
        res_t y[1];
        nnet::{fn}<data_t, res_t, cfg>(x, y);
        std::printf("%.17g\\n", y[0].to_double());
    }}
}}
"""
    )
    exe = tmp / fn
    subprocess.run(
        ["g++", "-std=c++14", "-O1", f"-I{TEMPLATES}", f"-I{TEMPLATES / 'ap_types'}", str(src), "-o", str(exe)],
        check=True,
        capture_output=True,
    )
    out = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout
    return np.array(out.split(), dtype=np.float64)


@pytest.mark.parametrize(
    "data_t, res_t, table_t, size",
    [
        ("fixed<16,6>", "fixed<16,6>", "fixed<18,8>", 1024),  # hls4ml's defaults
        ("fixed<14,5,RND_CONV,SAT>", "fixed<20,8,RND,SAT>", "fixed<16,4,RND_ZERO,SAT>", 2048),
        # steps of 2**18: the index division loses bits at the input's resolution, and int() wraps
        ("fixed<12,30>", "fixed<16,6>", "fixed<18,8>", 1024),
    ],
)
@pytest.mark.parametrize("fn", ["sigmoid", "tanh"])
def test_tables_and_indices_match_hls4ml_on_every_input_code(tmp_path, fn, data_t, res_t, table_t, size):
    # Every code of the input type: every table entry, both clamps and the index truncation.
    expected = _activation_probe(tmp_path, fn, data_t, res_t, table_t, size)
    d, r = parse_type(data_t), parse_type(res_t)
    spec = act.parse_activation(fn, {"size": size, "entry": table_t})
    codes = np.arange(d.min_code, d.max_code + 1)
    got = fixed.dequantize(act.apply_fixed(spec, codes, d.frac, r), r)
    np.testing.assert_array_equal(got, expected)
    if d.frac >= 0:
        assert np.unique(spec.index_of_codes(codes, d.frac)).size == size  # every entry was looked up


# ------------------------------------------------------------------------- whole layers and models


class _Rnn(torch.nn.Module):
    """A GRU / LSTM alone (last step, or every step), or followed by the top-tagging head."""

    def __init__(self, cell: str, inputs: int, hidden: int, head: bool, sequences: bool = False):
        super().__init__()
        self.rnn = getattr(torch.nn, cell)(inputs, hidden, batch_first=True)
        self.head = head
        self.sequences = sequences
        if head:
            self.fc1 = torch.nn.Linear(hidden, 64)
            self.relu = torch.nn.ReLU()
            self.fc2 = torch.nn.Linear(64, 1)

    def forward(self, x):
        out, _ = self.rnn(x)
        if self.sequences:
            return out
        last = out[:, -1]
        return self.fc2(self.relu(self.fc1(last))) if self.head else last


DEFAULT = "fixed<16,6>"  # hls4ml's default precision, TRN / WRAP
EXOTIC = {  # every rounding and overflow mode somewhere, accumulator saturating
    "input": "fixed<12,5,RND,SAT>",
    "weight": "fixed<10,3,RND_ZERO,WRAP>",
    "bias": "fixed<14,6,TRN_ZERO,SAT_SYM>",
    "recurrent_weight": "fixed<12,2,RND_CONV,SAT>",
    "recurrent_bias": "fixed<16,7,RND_INF,WRAP>",
    "accum": "fixed<20,8,RND_MIN_INF,SAT>",
    "output": "fixed<14,4,RND_CONV,SAT>",
}
# hls4ml 1.3's non-static LSTM template (instantiated even in static mode) passes the accumulator
# array where the result type is expected and the state where the input type is: its LSTM only
# compiles when input, accumulator and result types coincide.
SAME = "fixed<18,7,RND_CONV,WRAP>"
EXOTIC_WRAP = dict(EXOTIC, input=SAME, accum=SAME, output=SAME)
HEAD_OUT = "fixed<16,6,RND_CONV,SAT>"  # the head's result types: one SRS on the AIE, one cast in hls4ml

CASES = {
    # name: (cell, inputs, hidden, steps, head, sequences, types, table (size, entry) or None)
    "gru_toptag": ("GRU", 6, 20, 20, True, False, None, None),
    "lstm_toptag": ("LSTM", 6, 20, 20, True, False, None, None),
    "gru_toptag_states": ("GRU", 6, 20, 20, False, True, None, None),
    "lstm_toptag_states": ("LSTM", 6, 20, 20, False, True, None, None),
    "gru_large_sequence": ("GRU", 16, 48, 30, False, True, EXOTIC, (2048, "fixed<16,4>")),
    "lstm_large_sequence": ("LSTM", 12, 40, 25, False, True, EXOTIC_WRAP, (512, "fixed<14,3,RND,SAT>")),
}


def _model(name: str) -> torch.nn.Module:
    cell, inputs, hidden, _, head, sequences, _, _ = CASES[name]
    torch.manual_seed(sum(map(ord, name)))
    m = _Rnn(cell, inputs, hidden, head, sequences).eval()
    with torch.no_grad():
        m.rnn.weight_ih_l0.mul_(3.0)  # large pre-activations: table clamps and overflow
        m.rnn.weight_hh_l0.mul_(2.0)
    return m


def _types(name: str) -> dict[str, str]:
    types = CASES[name][6]
    return types or dict.fromkeys(("input", "output", *RNN_KEYS), DEFAULT)


def _hls4ml_config(name: str, model) -> dict:
    _, _, _, steps, head, _, _, table = CASES[name]
    inputs = CASES[name][1]
    cfg = hls4ml.utils.config_from_pytorch_model(
        model, (steps, inputs), granularity="name", backend="Vivado", default_precision=ap(DEFAULT),
        channels_last_conversion="off",  # the input is already (sequence, features)
    )
    types = _types(name)
    layers = cfg["LayerName"]
    layers["x"]["Precision"]["result"] = ap(types["input"])
    prec = layers["rnn"]["Precision"]
    for k in RNN_KEYS:
        prec[k] = ap(types[k])
    prec["result"] = ap(types["output"])
    if table is not None:
        layers["rnn"]["TableSize"] = table[0]
        # hls4ml 1.3 ignores Precision["table"] on recurrent layers; the attribute sets the type.
        layers["rnn"]["table_t"] = ap(table[1])
    if head:
        for fc in ("fc1", "fc2"):
            layers[fc]["Precision"].update(weight=ap(DEFAULT), bias=ap(DEFAULT), accum="ap_fixed<48,24>", result=ap(HEAD_OUT))
        layers["relu"]["Precision"]["result"] = ap(HEAD_OUT)
    return cfg


def _aieflow_config(name: str) -> dict:
    head, table = CASES[name][4], CASES[name][7]
    rnn = dict(_types(name))
    if table is not None:
        rnn["activations"] = {f: {"size": table[0], "entry": table[1]} for f in act.FUNCTIONS}
    layers = {"rnn": rnn}
    if head:
        for fc in ("fc1", "fc2"):
            layers[fc] = {"weight": DEFAULT, "bias": DEFAULT, "output": HEAD_OUT}
    return {"precision": "int16", "layers": layers}


def _transpose_dense_weights(model) -> None:
    """hls4ml 1.3's PyTorch converter leaves Linear weights as (out, in) and transposes them only in
    its channels-last pass, which must stay off here (it would also transpose the (sequence,
    features) input of the recurrent layer); nnet::dense reads (in, out)."""
    for layer in model.get_layers():
        if layer.class_name == "Dense":
            w = layer.get_weights("weight")
            w.data = np.ascontiguousarray(w.data.T)
            w.shape = list(w.data.shape)


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    """Every case converted and compiled once (the g++ builds run two at a time)."""
    models, hls = {}, {}
    for name in CASES:
        models[name] = _model(name)
        ctx = hls4ml_return_sequences() if CASES[name][5] else contextlib.nullcontext()
        with ctx:
            hls[name] = hls4ml.converters.convert_from_pytorch_model(
                models[name],
                hls_config=_hls4ml_config(name, models[name]),
                output_dir=str(tmp_path_factory.mktemp(name)),
                backend="Vivado",
                io_type="io_parallel",
            )
        _transpose_dense_weights(hls[name])
        hls[name].write()
    with ThreadPoolExecutor(max_workers=2) as pool:
        list(pool.map(lambda h: h._compile(), hls.values()))
    return models, hls


def _inputs(name: str, types: dict[str, str]) -> np.ndarray:
    """Normal samples, samples past the input type's range (saturation / wrap), and samples made
    of the input type's extreme codes."""
    steps, inputs = CASES[name][3], CASES[name][1]
    t = parse_type(types["input"])
    rng = np.random.default_rng(7)
    lo, hi = t.min_code * t.scale, t.max_code * t.scale
    normal = rng.standard_normal((300, steps, inputs)) * (hi / 4)
    beyond = rng.uniform(1.5 * lo, 1.5 * hi, (100, steps, inputs))
    edges = rng.choice([lo, hi, 0.0, t.scale, -t.scale], (40, steps, inputs))
    return np.concatenate([normal, beyond, edges]).astype(np.float64)


@pytest.mark.parametrize("name", list(CASES))
def test_bit_exact_with_hls4ml_c_simulation(compiled, name):
    models, hls = compiled
    x = _inputs(name, _types(name))
    expected = np.asarray(hls[name].predict(x), dtype=np.float64)
    emu = aieflow.emulate(models[name], device="vek280", example_input=x[:4], config=_aieflow_config(name))
    got = emu.predict(x)
    np.testing.assert_array_equal(got.reshape(expected.shape), expected)
    assert np.unique(got).size > 20  # the outputs really vary (no saturated constant)


def test_the_inputs_exercise_wrap_saturation_and_both_table_clamps(compiled):
    # The comparisons above mean something only if they reach the awkward paths.
    models, _ = compiled
    name = "gru_toptag_states"
    x = _inputs(name, _types(name))
    t = parse_type(DEFAULT)
    assert np.any(np.abs(x) > t.max_code * t.scale)  # input conversion wraps
    emu = aieflow.emulate(models[name], device="vek280", example_input=x[:4], config=_aieflow_config(name))
    node = emu.graph.node("rnn")
    xq = emu.quantise_input(x).astype(np.int64)
    acc = node.types.accum
    prod_frac = node.types.input.frac + node.types.weight.frac
    gx = fixed.dequantize(fixed.exact_matmul(xq.reshape(-1, x.shape[-1]), node.params["weight_q"]), FixedType(64, prod_frac))
    assert np.max(gx) > 8 and np.min(gx) < -8  # beyond the sigmoid table on both sides
    assert np.max(np.abs(gx)) > acc.max_code * acc.scale  # the accumulator overflows (wraps)
