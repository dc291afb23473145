"""``aieflow.from_hls4ml`` for hls4ml's GRU / LSTM layers: the ModelGraph's own weights, precisions
and sigmoid / tanh tables compiled by aieflow, checked against hls4ml's C simulation
(``hls_model.compile(); hls_model.predict``: its generated C++ built with g++ against the ap_types
it ships), bit for bit.  Nothing on the reference side imports aieflow.  Skipped, with the reason,
where hls4ml, torch or g++ is missing.
"""

from __future__ import annotations

import contextlib
import shutil
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

hls4ml = pytest.importorskip("hls4ml", reason="hls4ml is not installed; its C simulation is the reference here")
torch = pytest.importorskip("torch")
if shutil.which("g++") is None:
    pytest.skip("g++ is needed to compile hls4ml's C simulation", allow_module_level=True)

from hls4ml_tools import hls4ml_return_sequences  # noqa: E402

import aieflow  # noqa: E402
from aieflow.errors import ModelError  # noqa: E402

RNN_KEYS = ("weight", "bias", "recurrent_weight", "recurrent_bias", "accum")
# every rounding and overflow mode somewhere, a saturating accumulator, a table of its own
EXOTIC = {"input": "ap_fixed<12,5,AP_RND,AP_SAT>", "weight": "ap_fixed<10,3,AP_RND_ZERO,AP_WRAP>",
          "bias": "ap_fixed<14,6,AP_TRN_ZERO,AP_SAT_SYM>", "recurrent_weight": "ap_fixed<12,2,AP_RND_CONV,AP_SAT>",
          "recurrent_bias": "ap_fixed<16,7,AP_RND_INF,AP_WRAP>", "accum": "ap_fixed<20,8,AP_RND_MIN_INF,AP_SAT>",
          "result": "ap_fixed<14,4,AP_RND_CONV,AP_SAT>"}
# hls4ml 1.3's LSTM template compiles only when input, accumulator and result types coincide
SAME = "ap_fixed<18,7,AP_RND_CONV,AP_WRAP>"
HEAD = "ap_fixed<16,6,AP_RND_CONV,AP_SAT>"

CASES = {
    # name: (cell, inputs, hidden, steps, head, sequences, types or None (hls4ml's defaults), table or None)
    "gru_head": ("GRU", 6, 12, 8, True, False, EXOTIC, (512, "ap_fixed<14,3,AP_RND,AP_SAT>")),
    "lstm_sequence": ("LSTM", 5, 8, 6, False, True, dict.fromkeys(("input", "accum", "result"), SAME), None),
}


class _Rnn(torch.nn.Module):
    def __init__(self, cell: str, inputs: int, hidden: int, head: bool, sequences: bool):
        super().__init__()
        self.rnn = getattr(torch.nn, cell)(inputs, hidden, batch_first=True)
        self.head, self.sequences = head, sequences
        if head:
            self.fc1, self.relu, self.fc2 = torch.nn.Linear(hidden, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3)

    def forward(self, x):
        out, _ = self.rnn(x)
        if self.sequences:
            return out
        last = out[:, -1]
        return self.fc2(self.relu(self.fc1(last))) if self.head else last


def _convert(name: str, out: str):
    cell, inputs, hidden, steps, head, sequences, types, table = CASES[name]
    torch.manual_seed(sum(map(ord, name)))
    model = _Rnn(cell, inputs, hidden, head, sequences).eval()
    with torch.no_grad():
        model.rnn.weight_ih_l0.mul_(3.0)  # large pre-activations: both table clamps, accumulator overflow
        model.rnn.weight_hh_l0.mul_(2.0)
    cfg = hls4ml.utils.config_from_pytorch_model(model, (steps, inputs), granularity="name", backend="Vivado",
                                                 default_precision="ap_fixed<16,6>", channels_last_conversion="off")
    layers = cfg["LayerName"]
    if types is not None:
        layers["x"]["Precision"]["result"] = types["input"]
        for k in RNN_KEYS:
            if k in types:
                layers["rnn"]["Precision"][k] = types[k]
        layers["rnn"]["Precision"]["result"] = types["result"]
    if table is not None:
        layers["rnn"]["TableSize"] = table[0]
        layers["rnn"]["table_t"] = table[1]  # hls4ml 1.3 reads the attribute, not Precision.table
    if head:
        for fc in ("fc1", "fc2"):
            layers[fc]["Precision"].update(weight="ap_fixed<16,6>", bias="ap_fixed<16,6>", accum="ap_fixed<48,24>",
                                           result=HEAD)
        layers["relu"]["Precision"]["result"] = HEAD
    with hls4ml_return_sequences() if sequences else contextlib.nullcontext():
        hm = hls4ml.converters.convert_from_pytorch_model(model, hls_config=cfg, output_dir=out, backend="Vivado",
                                                          io_type="io_parallel")
    for layer in hm.get_layers():  # hls4ml 1.3 leaves Linear weights (out, in) with channels-last off
        if layer.class_name == "Dense":
            w = layer.get_weights("weight")
            w.data = np.ascontiguousarray(w.data.T)
            w.shape = list(w.data.shape)
    hm.write()
    return hm


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    hms = {name: _convert(name, str(tmp_path_factory.mktemp(name))) for name in CASES}
    with ThreadPoolExecutor(max_workers=2) as pool:
        list(pool.map(lambda h: h._compile(), hms.values()))
    return hms


def _inputs(name: str) -> np.ndarray:
    """Normal samples, samples beyond the input type's range, and samples of its extreme values."""
    _, inputs, _, steps, _, _, _, _ = CASES[name]
    rng = np.random.default_rng(11)
    normal = rng.standard_normal((200, steps, inputs)) * 4
    beyond = rng.uniform(-40, 40, (60, steps, inputs))
    edges = rng.choice([-16.0, 16.0 - 2**-7, 0.0, 2**-7, -(2**-7)], (30, steps, inputs))
    return np.concatenate([normal, beyond, edges])


@pytest.mark.parametrize("name", list(CASES))
def test_bit_exact_with_hls4ml_c_simulation(compiled, name):
    hm = compiled[name]
    x = _inputs(name)
    expected = np.asarray(hm.predict(np.ascontiguousarray(x)), dtype=np.float64)
    design = aieflow.from_hls4ml(hm, device="vek280")
    got = design.predict(x)
    np.testing.assert_array_equal(got.reshape(expected.shape), expected)
    assert np.unique(got).size > 20  # the outputs really vary


def test_the_model_types_and_tables_are_taken(compiled):
    """The design's recurrent layer carries hls4ml's types and table, not aieflow defaults."""
    from aieflow.frontends.hls4ml_frontend import import_hls4ml

    _, types = import_hls4ml(compiled["gru_head"])
    rnn = types["rnn"]
    assert rnn["accum"] == "fixed<20,8,RND_MIN_INF,SAT>" and rnn["recurrent_weight"] == "fixed<12,2,RND_CONV,SAT>"
    assert rnn["activations"]["sigmoid"] == {"size": 512, "entry": "fixed<14,3,RND,SAT>"}
    assert rnn["input"] == "fixed<12,5,RND,SAT>" and rnn["output"] == "fixed<14,4,RND_CONV,SAT>"


def test_a_table_in_the_config_is_refused_beside_the_models(compiled):
    with pytest.raises(aieflow.errors.ConfigError, match="activations"):
        aieflow.from_hls4ml(compiled["gru_head"], device="vek280",
                            config={"layers": {"rnn": {"activations": {"sigmoid": "exact"}}}})


def test_weights_rounding_is_refused_for_the_recurrent_layer(compiled):
    with pytest.raises(aieflow.errors.ConfigError, match="weights_rounding: hls4ml") as e:
        aieflow.from_hls4ml(compiled["gru_head"], device="vek280", config={"weights_rounding": "hls4ml"})
    assert e.value.layer == "rnn"


def test_unmapped_recurrent_attributes_are_refused_by_name(compiled):
    hm = compiled["lstm_sequence"]
    layer = next(x for x in hm.get_layers() if x.class_name == "LSTM")
    # (an LSTM in Keras' layout is refused; a GRU in Keras' layout is mapped: tests/test_from_hls4ml_keras.py)
    for attr, value, text in (("direction", "bidirectional", "bidirectional"), ("pytorch", False, "Keras"),
                              ("recurrent_activation", "hard_sigmoid", "hard_sigmoid")):
        old = layer.get_attr(attr)
        layer.set_attr(attr, value)
        try:
            with pytest.raises(ModelError, match=text) as e:
                aieflow.from_hls4ml(hm, device="vek280")
            assert e.value.layer == "rnn" and e.value.hint
        finally:
            layer.set_attr(attr, old)


def test_verify_on_x86(compiled, tmp_path):
    """The GRU + head design's generated kernels equal predict on x86."""
    design = aieflow.from_hls4ml(compiled["gru_head"], device="vek280")
    result = design.verify(_inputs("gru_head")[:8], cache_dir=tmp_path)
    assert result.ok, result.verdict()
