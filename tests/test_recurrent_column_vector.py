"""Vector fixed-point cascade chains (templates/recurrent/rnn_cascade.h with C::VECTOR): column-wise
U h / W x chains use the exact vector forms recurrent/vector.py proves for row kernels; generated
designs run on x86 bit for bit against the emulator (hls4ml's order) for int8 / int16, AIE1 /
AIE-ML, GRU / LSTM, both aggregations and chains of 1, 2 and >= 3 tiles; what is not provable
stays scalar and still verifies; the config's kernel key applies to chains; the latency model
charges vector chains at the vector MAC rate and the search picks them where they win."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from aieflow.devices import get_device  # noqa: E402
from aieflow.errors import ConfigError  # noqa: E402
from aieflow.recurrent import costs  # noqa: E402
from aieflow.recurrent.design import compile_recurrent, mapping_fields, mapping_from_fields  # noqa: E402
from aieflow.recurrent.model import estimate_recurrent  # noqa: E402
from aieflow.recurrent.plan import MatvecMapping, RecurrentDims, RecurrentOptions, build_mapping  # noqa: E402
from aieflow.recurrent.select import choose_mapping  # noqa: E402
from aieflow.recurrent.vector import KERNELS, VectorForm, vector_form  # noqa: E402

needs_gxx = pytest.mark.skipif(shutil.which("g++") is None, reason="g++ is not installed")
KEYS = ("input", "weight", "bias", "recurrent_weight", "recurrent_bias", "accum", "output")


class _Net(torch.nn.Module):
    def __init__(self, cell: str, n_in: int, n_h: int, scale: float = 1.0):
        super().__init__()
        self.rnn = getattr(torch.nn, cell)(n_in, n_h, batch_first=True)
        with torch.no_grad():
            for p in self.rnn.parameters():
                p.mul_(scale)

    def forward(self, x):
        return self.rnn(x)[0]  # every step's h: a wrong partial sum anywhere shows


def _types(default: str = "fixed<16,6>", **over: str) -> dict:
    t = dict.fromkeys(KEYS, default)  # hls4ml's default ap_fixed<16,6> (TRN, WRAP)
    t.update(over)
    return t


def _chains(cas: int, in_cas: int, rows: int, in_rows: int, aggregation: str) -> dict:
    return {"distribution": "column", "input_distribution": "column", "cas_len": cas, "input_cas_len": in_cas,
            "row_reuse": rows, "input_row_reuse": in_rows, "aggregation": aggregation}


def _compile(cell, device, n_in, n_h, steps, precision, types, mapping, scale, seed=3):
    torch.manual_seed(seed)
    net = _Net(cell, n_in, n_h, scale).eval()
    x = torch.randn(40, steps, n_in, generator=torch.Generator().manual_seed(seed + 1)) * 2.0
    cfg = {"precision": precision, "layers": {"rnn": {**types, "mapping": mapping}}}
    return compile_recurrent(net, device, x[:4], cfg, x)


def _cfg_block(src: str, name: str) -> str:
    start = src.index(f"struct {name} {{")
    return src[start : src.index("\n};", start)]


# id, device, cell, n_in, n_h, steps, precision, types, mapping, kinds (U h, W x), weight scale
CASES = [
    # hls4ml's defaults (products 20 frac bits, TRN to 10 per product): aie::mul + floor per lane;
    # U h chains of 3 (ColFirst, ColMid, ColLast), two lane groups; weights x3 so accumulators wrap
    ("gru-int16-vck190-hybrid-cas3", "vck190", "GRU", 6, 20, 4, "int16", _types(), _chains(3, 2, 20, 10, "hybrid"),
     ("vector_round", "vector_round"), 3.0),
    # products on the accumulator grid (8 + 8 = 16): an aie::mac chain; AIE-ML acc64 lanes; chains of 1 (ColOnly)
    ("lstm-int16-vek280-aie-cas1", "vek280", "LSTM", 5, 12, 4, "int16",
     _types("fixed<16,8>", accum="fixed<32,16>"), _chains(1, 1, 12, 6, "aie"), ("vector", "vector"), 2.0),
    # products coarser than the accumulator (4 + 6 = 10 < 16): the exact sum moved onto its grid at the end;
    # chains of 4 (two ColMid) and 2; AIE1 acc48 in two cascade words
    ("gru-int16-vck190-aie-coarse-cas4", "vck190", "GRU", 4, 8, 3, "int16",
     _types("fixed<16,10>", weight="fixed<16,12>", recurrent_weight="fixed<16,12>", accum="fixed<32,16>"),
     _chains(4, 2, 8, 8, "aie"), ("vector", "vector"), 2.5),
    # int8 lanes (32 per vector on AIE1), products exact (4 + 4 = 8), 16-bit wrapping accumulator, chains of 2
    ("gru-int8-vck190-hybrid-cas2", "vck190", "GRU", 6, 10, 4, "int8",
     _types("fixed<8,4>", accum="fixed<16,8>"), _chains(2, 3, 10, 5, "hybrid"), ("vector", "vector"), 1.5),
    # int8 on AIE-ML (acc32 MAC lanes inside a tile, acc64 on the cascade), products (8 frac bits)
    # rounded to the accumulator's 6 per lane (RND); LSTM, chains of 3 and 1, AIE aggregation
    ("lstm-int8-vek280-aie-cas3", "vek280", "LSTM", 3, 9, 3, "int8",
     _types("fixed<8,4>", accum="fixed<16,10,RND,WRAP>"), _chains(3, 1, 9, 9, "aie"), ("vector_round", "vector_round"), 2.0),
    # a saturating accumulator whose partial sums cannot saturate (small weights): vector, RND_CONV per lane;
    # LSTM hybrid on AIE-ML with chains of 2 and 3
    ("lstm-int16-vek280-hybrid-sat-cas2", "vek280", "LSTM", 6, 8, 3, "int16",
     _types(accum="fixed<16,8,RND_CONV,SAT>", weight="fixed<16,2>", recurrent_weight="fixed<16,2>"),
     _chains(2, 3, 8, 4, "hybrid"), ("vector_round", "vector_round"), 0.05),
]


@needs_gxx
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_vector_cascade_chains_are_bit_exact_on_x86(case):
    _, device, cell, n_in, n_h, steps, precision, types, mapping, kinds, scale = case
    d = _compile(cell, device, n_in, n_h, steps, precision, types, mapping, scale)
    m = d.mapping
    assert (m.recurrent.distribution, m.input.distribution) == ("column", "column")
    assert (m.recurrent.cas_len, m.input.cas_len) == (mapping["cas_len"], mapping["input_cas_len"])
    assert (m.dims.kernel("u", "column"), m.dims.kernel("w", "column")) == kinds
    summary = d.summary()
    assert f"kernels: U h {kinds[0]}, W x {kinds[1]}" in summary and "per chain tile" in summary
    assert d.to_json()["kernels"][0]["u"] == kinds[0]
    src = d.files["src/rnn_config.h"]
    for cfg in ("UCfg", "WCfg"):
        block = _cfg_block(src, cfg)
        assert "static constexpr bool VECTOR = true;" in block and "static constexpr int CAS" in block
    result = d.verify(samples=14, seed=9)  # the input type's edge codes first, then random ones
    assert result.ok, result.verdict()
    assert result.values == 14 * steps * n_h


@needs_gxx
def test_non_provable_types_keep_scalar_chains_that_verify():
    """TRN_ZERO per product has no per-lane rounding mode on AIE1: the chains stay scalar
    (hls4ml's order on int64 codes) and still match the emulator; the summary says why."""
    types = _types("fixed<16,6,TRN_ZERO,WRAP>")
    d = _compile("GRU", "vck190", 5, 8, 3, "int16", types, _chains(2, 3, 8, 8, "aie"), 2.0)
    assert d.mapping.dims.kernels == ("scalar", "scalar")
    assert d.mapping.dims.kernel("u", "column") == "scalar"
    src = d.files["src/rnn_config.h"]
    assert "static constexpr bool VECTOR = true;" not in src
    assert "symmetric_floor" in d.to_json()["kernels"][0]["why"]
    result = d.verify(samples=10, seed=4)
    assert result.ok, result.verdict()


def test_the_bound_is_the_whole_rows_not_one_tiles_block():
    """Every tile's block of a row would fit int32 lanes on its own, the row's sum would not: the
    chain's carried partial sum can reach the row's bound, so the product stays scalar."""
    k = 8
    w = np.full((k, 2), 32767, dtype=np.int64)
    w[::2, 1] = -32768
    from aieflow.numerics.types import parse_type
    from aieflow.ops.activations import parse_activations
    from aieflow.ops.recurrent import RecurrentTypes

    class _Node:
        op = "gru"
        types = RecurrentTypes(**{key: parse_type("fixed<16,1>") for key in KEYS if key != "accum"},
                               accum=parse_type("fixed<32,2>"),
                               **parse_activations({"sigmoid": "hls4ml", "tanh": "hls4ml"}))
        params = {"weight_q": w, "recurrent_weight_q": w, "bias_q": np.zeros(2, dtype=np.int64),
                  "recurrent_bias_q": np.zeros(2, dtype=np.int64)}

    xmax = 2**15
    for cas in (4, 8):  # blocks of 2 and 1 columns: each block's |sum| bound is below 2^31
        kc = k // cas
        assert all(int((xmax * np.abs(w[j * kc : (j + 1) * kc])).sum(axis=0).max()) < 2**31 for j in range(cas))
    assert int((xmax * np.abs(w)).sum(axis=0).max()) > 2**31  # the row's is not
    form = vector_form(_Node(), True, get_device("vek280"), ("i16", "i16"))
    assert isinstance(form, str) and "beyond the int32 lanes" in form
    small = _Node()
    small.params = {**small.params, "recurrent_weight_q": w // 8}  # now the whole row fits too
    assert isinstance(vector_form(small, True, get_device("vek280"), ("i16", "i16")), VectorForm)


def test_kernel_key_applies_to_chains():
    """``kernel: scalar`` makes the chains scalar (same numbers); ``kernel: vector`` where it is
    not exact is a ConfigError naming the layer and the reason."""
    chains = _chains(2, 2, 8, 8, "aie")
    vec = _compile("GRU", "vck190", 4, 8, 3, "int16", _types(), chains, 2.0)
    sca = _compile("GRU", "vck190", 4, 8, 3, "int16", _types(), {**chains, "kernel": "scalar"}, 2.0)
    assert vec.mapping.dims.kernel("u", "column") == "vector_round"
    assert sca.mapping.dims.kernel("u", "column") == sca.mapping.dims.kernel("w", "column") == "scalar"
    assert "static constexpr bool VECTOR = true;" not in sca.files["src/rnn_config.h"]
    assert "static constexpr bool VECTOR = false;" not in vec.files["src/rnn_config.h"]
    x = np.random.default_rng(0).normal(size=(16, 3, 4)).astype(np.float32) * 2
    assert np.array_equal(vec.predict(x), sca.predict(x))
    assert sca.estimate().breakdown_ns["mac"] > 5 * vec.estimate().breakdown_ns["mac"]
    with pytest.raises(ConfigError, match=r"layers\.rnn\.mapping\.kernel: vector is not bit-exact.*symmetric_floor"):
        _compile("GRU", "vck190", 4, 8, 3, "int16", _types("fixed<16,6,TRN_ZERO,WRAP>"), {**chains, "kernel": "vector"}, 1.0)


def test_designs_saved_before_vector_chains_load_as_scalar_chains():
    dims = RecurrentDims("gru", 6, 16, 4, ("i16", "i16"), kernels=("vector_round", "vector"))
    m = build_mapping(dims, get_device("vck190"), MatvecMapping("column", 16, 2), MatvecMapping("row", 4), "aie",
                      RecurrentOptions())
    fields = mapping_fields(m)
    assert mapping_from_fields(fields).dims.kernel("u", "column") == "vector_round"  # saved now: as built
    del fields["dims"]["chain_vector"]  # an older design.json: its project has scalar chains
    old = mapping_from_fields(fields).dims
    assert old.kernel("u", "column") == "scalar" and old.kernel("w", "row") == "vector"


# ----------------------------------------------------------------------------- the latency model


def test_vector_chains_cost_fewer_cycles_than_scalar_ones():
    for board, pair in (("vck190", ("i16", "i16")), ("vck190", ("i8", "i8")), ("vek280", ("i16", "i16"))):
        dev = get_device(board)
        for rows, k, cas in ((16, 20, 1), (20, 64, 2), (32, 128, 4)):
            t = {kind: costs.column_chain(rows, k, cas, 10.0, dev, pair, kind) for kind in KERNELS}
            assert t["vector"].cycles < t["vector_round"].cycles < t["scalar"].cycles
            assert t["scalar"].mac > 10 * t["vector_round"].mac  # one product at a time vs one MAC of all lanes
            assert t["scalar"].cycles > 3 * t["vector_round"].cycles, (board, pair, rows, k, cas)
    # through a mapping: the estimate of the same column mapping follows the kernel kind
    dev = get_device("vck190")
    step = {}
    for kinds in (("vector", "vector"), ("scalar", "scalar")):
        d = RecurrentDims("gru", 16, 32, 10, ("i16", "i16"), kernels=kinds)
        m = build_mapping(d, dev, MatvecMapping("column", 32, 2), MatvecMapping("column", 16, 1), "aie", RecurrentOptions())
        step[kinds[0]] = estimate_recurrent(m, dev)
    assert step["scalar"].breakdown_ns["mac"] > 10 * step["vector"].breakdown_ns["mac"]
    assert step["scalar"].step_latency_ns > 2 * step["vector"].step_latency_ns


def test_the_search_picks_vector_chains_where_they_win():
    """Under a tile budget the W x product goes to vector cascade chains (one MAC covers a lane
    group's rows, no per-row reduction); with scalar kernels the same search keeps row kernels."""
    picks = {}
    for kinds in (("vector_round", "vector_round"), ("scalar", "scalar")):
        dims = RecurrentDims("gru", 6, 20, 10, ("i16", "i16"), kernels=kinds)
        ex = choose_mapping(dims, "vck190", "tiles <= 24")
        picks[kinds[0]] = ex.chosen
    assert picks["vector_round"].mapping.input.distribution == "column"
    assert picks["scalar"].mapping.input.distribution == "row"
    assert picks["vector_round"].latency_ns < picks["scalar"].latency_ns


@needs_gxx
@pytest.mark.parametrize("cell", ["GRU", "LSTM"])
def test_the_state_bound_vectorises_u_h_and_holds_on_x86(cell):
    """Recurrent weights at the top of ap_fixed<16,6> (|w| ~ 31): over h's whole type range a row
    of U h could sum past 2^31, but |h| <= 1 (the gate tables, ops.recurrent.state_max_code) keeps
    it 32x smaller, so U h runs a vector form; such weights drive h to +-1 at once, and the x86
    run must still match the emulator bit for bit."""
    from aieflow.ops.recurrent import state_max_code

    torch.manual_seed(5)
    net = _Net(cell, 4, 20).eval()
    with torch.no_grad():
        w = net.rnn.weight_hh_l0
        w.copy_(torch.where(torch.rand_like(w) < 0.5, -31.9, 31.9))
    x = torch.randn(40, 6, 4, generator=torch.Generator().manual_seed(6)) * 2.0
    cfg = {"precision": "int16", "layers": {"rnn": {**_types(accum="fixed<32,12>"), "mapping": {"aggregation": "aie"}}}}
    d = compile_recurrent(net, "vek280", x[:4], cfg, x)
    node, t = d.layer, d.layer.types
    full = max(-t.output.min_code, t.output.max_code)
    row = int(np.abs(node.params["recurrent_weight_q"]).sum(axis=0).max())
    assert row * full > 2**31 > row * state_max_code(t, node.op)  # only the bound makes U h fit
    assert state_max_code(t, node.op) <= 1 << t.output.frac  # |h| <= 1
    assert d.mapping.dims.kernels[0] != "scalar"
    result = d.verify(samples=14, seed=2)
    assert result.ok, result.verdict()
    h = d.predict(x.numpy())
    assert np.abs(h).max() >= 0.99  # the states reach the bound
