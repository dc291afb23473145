"""Vector fixed-point row kernels (recurrent/vector.py, templates/recurrent/rnn_kernels.h): where a
lane-parallel aie::mac / aie::mul form reproduces hls4ml's per-product casts bit for bit, which
layers get it, what the generated C++ computes on x86 (random and edge inputs, against the
emulator, whose order is hls4ml's), and what the latency model charges for scalar and vector
kernels."""

from __future__ import annotations

import shutil
from fractions import Fraction

import numpy as np
import pytest
from fixed_reference import ref_cast, ref_overflow, ref_round

torch = pytest.importorskip("torch")

from aieflow.devices import get_device  # noqa: E402
from aieflow.numerics.types import FixedType, Rounding, Saturation, parse_type  # noqa: E402
from aieflow.recurrent import costs  # noqa: E402
from aieflow.recurrent.design import compile_recurrent  # noqa: E402
from aieflow.recurrent.model import estimate_recurrent, step_stages  # noqa: E402
from aieflow.recurrent.plan import RecurrentDims, RecurrentOptions, plan_recurrent  # noqa: E402
from aieflow.recurrent.vector import VectorForm, vector_form  # noqa: E402

needs_gxx = pytest.mark.skipif(shutil.which("g++") is None, reason="g++ is not installed")
KEYS = ("input", "weight", "bias", "recurrent_weight", "recurrent_bias", "accum", "output")


class _Net(torch.nn.Module):
    def __init__(self, cell: str, n_in: int, n_h: int, sequence: bool = True, scale: float = 1.0):
        super().__init__()
        self.rnn = getattr(torch.nn, cell)(n_in, n_h, batch_first=True)
        with torch.no_grad():
            for p in self.rnn.parameters():
                p.mul_(scale)
        self.sequence = sequence

    def forward(self, x):
        out, _ = self.rnn(x)
        return out if self.sequence else out[:, -1]


def _types(**over: str) -> dict:
    t = dict.fromkeys(KEYS, "fixed<16,6>")  # hls4ml's default ap_fixed<16,6> (TRN, WRAP) everywhere
    t.update(over)
    return t


def _data(shape, seed, scale=2.0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)) * scale


# ----------------------------------------------------------------------------- the exactness argument


def _hls4ml_row(x, w, b, xt, wt, bt, acc) -> int:
    """hls4ml's order, on Python integers: a = C(b); a = C(a + C(x_k w_k))."""
    a = ref_cast(int(b), bt.frac, acc)
    for xk, wk in zip(x, w, strict=True):
        a = ref_cast(a + ref_cast(int(xk) * int(wk), xt.frac + wt.frac, acc), acc.frac, acc)
    return a


def _lanes_row(x, w, b, xt, wt, bt, acc, lanes: int) -> int:
    """The vector kernel's order: products (rounded per lane when they are finer than the
    accumulator), summed per lane, lanes summed, then the bias and one overflow."""
    d = xt.frac + wt.frac - acc.frac
    terms = [ref_round(Fraction(int(xk) * int(wk), 2**d), acc.rounding) if d > 0 else int(xk) * int(wk)
             for xk, wk in zip(x, w, strict=True)]
    lane_sums = [sum(terms[i::lanes]) for i in range(lanes)]
    assert all(abs(s) < 2**31 for s in lane_sums) and abs(sum(lane_sums)) < 2**31  # int32 lanes and reduction
    total = sum(lane_sums) << max(0, -d)  # d < 0: the exact sum moved onto the accumulator's grid
    return ref_overflow(ref_cast(int(b), bt.frac, acc) + total, acc)


class _Node:
    """The parts of a GRU node vector_form reads."""

    def __init__(self, types: dict, w, u, b, c):
        from aieflow.ops.activations import parse_activations
        from aieflow.ops.recurrent import RecurrentTypes

        self.types = RecurrentTypes(**{k: parse_type(v) for k, v in types.items()},
                                    **parse_activations({"sigmoid": "hls4ml", "tanh": "hls4ml"}))
        self.params = {"weight_q": w, "recurrent_weight_q": u, "bias_q": b, "recurrent_bias_q": c}


def _random_case(rng):
    width = int(rng.choice([8, 12, 16]))
    xt = FixedType(width, int(rng.integers(0, width)), True)
    wt = FixedType(width, int(rng.integers(0, width + 3)), True)
    acc = FixedType(int(rng.choice([16, 24, 32])), int(rng.integers(0, 24)), True,
                    Rounding(rng.choice([r.value for r in Rounding])), Saturation(rng.choice([s.value for s in Saturation])))
    bt = FixedType(16, int(rng.integers(0, 16)), True)
    k = int(rng.integers(1, 24))
    wmax = 2 ** int(rng.integers(1, width)) - 1
    w = rng.integers(-wmax, wmax + 1, size=(k, 3))
    b = rng.integers(-2000, 2000, size=3)
    return xt, wt, bt, acc, w, b


def test_the_vector_form_is_exact_whenever_it_is_chosen_and_chosen_often():
    """On random types, weights and inputs (extreme codes included), every layer vector_form
    accepts gives hls4ml's result in lane order; the accepted set covers both forms."""
    rng = np.random.default_rng(7)
    dev = get_device("vek280")  # every rounding mode has a per-lane form there
    seen = {"vector": 0, "vector_round": 0, "scalar": 0}
    for _ in range(400):
        xt, wt, bt, acc, w, b = _random_case(rng)
        tstr = {"input": xt, "weight": wt, "bias": bt, "recurrent_weight": wt, "recurrent_bias": bt, "accum": acc,
                "output": xt}
        node = _Node({k: v.to_string() for k, v in tstr.items()}, w, np.zeros((1, 3), dtype=np.int64), b, np.zeros(3, dtype=np.int64))
        form = vector_form(node, False, dev, ("i16", "i16"))
        seen[form.kind if isinstance(form, VectorForm) else "scalar"] += 1
        if not isinstance(form, VectorForm):
            continue
        xs = [rng.integers(xt.min_code, xt.max_code + 1, size=w.shape[0]) for _ in range(6)]
        xs += [np.full(w.shape[0], xt.max_code), np.full(w.shape[0], xt.min_code),
               np.where(w[:, 0] >= 0, xt.max_code, xt.min_code)]  # the bound's worst case for row 0
        for x in xs:
            for j in range(3):
                want = _hls4ml_row(x, w[:, j], b[j], xt, wt, bt, acc)
                assert _lanes_row(x, w[:, j], b[j], xt, wt, bt, acc, 16) == want, (xt, wt, acc, form)
    assert seen["vector"] > 20 and seen["vector_round"] > 20 and seen["scalar"] > 20, seen


def _chain_row(x, w, b, xt, wt, bt, acc, cas: int) -> int:
    """A vector cascade chain's order (rnn_cascade.h): ``cas`` column blocks, each tile adding its
    block's terms to the carried partial sum (the first tile from 0), then the last tile's bias
    and one overflow.  Every partial sum the chain carries must fit int32 lanes."""
    d = xt.frac + wt.frac - acc.frac
    terms = [ref_round(Fraction(int(xk) * int(wk), 2**d), acc.rounding) if d > 0 else int(xk) * int(wk)
             for xk, wk in zip(x, w, strict=True)]
    kc = -(-len(terms) // cas)
    carried = 0
    for j in range(cas):
        block = terms[j * kc : (j + 1) * kc]
        carried += sum(block)  # integer sums: the block's lane order does not matter
        assert abs(carried) < 2**31, (j, carried)
    return ref_overflow(ref_cast(int(b), bt.frac, acc) + (carried << max(0, -d)), acc)


def test_the_chain_order_is_exact_whenever_the_vector_form_is_chosen():
    """The same random layers as above through a cascade chain's order (1 to 5 tiles): whenever
    vector_form accepts (a bound over the whole row), every carried partial sum fits and the
    result is hls4ml's; no further condition is needed for chains."""
    rng = np.random.default_rng(11)
    dev = get_device("vek280")
    accepted = 0
    for _ in range(300):
        xt, wt, bt, acc, w, b = _random_case(rng)
        tstr = {"input": xt, "weight": wt, "bias": bt, "recurrent_weight": wt, "recurrent_bias": bt, "accum": acc,
                "output": xt}
        node = _Node({k: v.to_string() for k, v in tstr.items()}, w, np.zeros((1, 3), dtype=np.int64), b, np.zeros(3, dtype=np.int64))
        if not isinstance(vector_form(node, False, dev, ("i16", "i16")), VectorForm):
            continue
        accepted += 1
        k = w.shape[0]
        xs = [rng.integers(xt.min_code, xt.max_code + 1, size=k), np.full(k, xt.min_code),
              np.where(w[:, 0] >= 0, xt.max_code, xt.min_code)]
        for x in xs:
            for j in range(3):
                want = _hls4ml_row(x, w[:, j], b[j], xt, wt, bt, acc)
                for cas in range(1, min(k, 5) + 1):
                    assert _chain_row(x, w[:, j], b[j], xt, wt, bt, acc, cas) == want, (xt, wt, acc, cas)
    assert accepted > 40, accepted


def test_saturating_accumulators_that_could_saturate_stay_scalar():
    """A SAT accumulator whose worst-case partial sum reaches its limit: hls4ml clamps step by
    step, a lane-parallel sum would not; a concrete input shows the difference."""
    xt, wt, bt = parse_type("fixed<8,4>"), parse_type("fixed<8,4>"), parse_type("fixed<16,8>")
    acc = parse_type("fixed<12,4,TRN,SAT>")  # frac 8 = the products': the casts only clamp
    w = np.array([[127], [-128], [127]])
    node = _Node({"input": "fixed<8,4>", "weight": "fixed<8,4>", "bias": "fixed<16,8>", "recurrent_weight": "fixed<8,4>",
                  "recurrent_bias": "fixed<16,8>", "accum": "fixed<12,4,TRN,SAT>", "output": "fixed<8,4>"},
                 w, np.zeros((1, 1), dtype=np.int64), np.zeros(1, dtype=np.int64), np.zeros(1, dtype=np.int64))
    assert isinstance(vector_form(node, False, get_device("vck190"), ("i8", "i8")), str)
    x = np.array([127, 127, 0])  # +big saturates first, then -big pulls it down: not the clamped exact sum
    assert _hls4ml_row(x, w[:, 0], 0, xt, wt, bt, acc) != ref_overflow(int(x @ w[:, 0]), acc)


def test_rounding_modes_the_device_lacks_stay_scalar_on_aie1():
    types = {k: "fixed<16,6,TRN_ZERO,WRAP>" for k in KEYS}
    w = np.ones((4, 3), dtype=np.int64)
    node = _Node(types, w, np.ones((1, 3), dtype=np.int64), np.zeros(3, dtype=np.int64), np.zeros(3, dtype=np.int64))
    assert "symmetric_floor" in vector_form(node, False, get_device("vck190"), ("i16", "i16"))
    assert vector_form(node, False, get_device("vek280"), ("i16", "i16")) == VectorForm(10, "vector_round")


# ----------------------------------------------------------------------------- generated code on x86

# id, device, cell, n_in, n_h, steps, types, options, kinds (U h, W x), weight scale
CASES = [
    # hls4ml's defaults: products have 20 fractional bits, TRN to 10 per product: aie::mul + floor per lane;
    # weights x3 so the accumulator and the state wrap
    ("gru-hls4ml-default-vck190", "vck190", "GRU", 6, 20, 5, _types(), RecurrentOptions(aggregation="hybrid"),
     ("vector_round", "vector_round"), 3.0),
    # products on the accumulator grid (8 + 8 = 16 = acc frac), wrapping accumulator: one aie::mac chain
    ("lstm-mac-wrap-vck190-aie", "vck190", "LSTM", 5, 12, 4,
     _types(input="fixed<16,8>", weight="fixed<16,8>", recurrent_weight="fixed<16,8>", output="fixed<16,8>",
            accum="fixed<32,16>", bias="fixed<16,8>", recurrent_bias="fixed<16,8>"),
     RecurrentOptions(aggregation="aie", row_reuse=3, input_row_reuse=2), ("vector", "vector"), 2.0),
    # RND (half up) per product, AIE-ML acc64 lanes, 16-lane int16
    ("gru-rnd-vek280", "vek280", "GRU", 9, 10, 4, _types(accum="fixed<16,6,RND,WRAP>"), RecurrentOptions(aggregation="hybrid"),
     ("vector_round", "vector_round"), 2.0),
    # TRN_ZERO (symmetric_floor, AIE-ML only), LSTM, AIE aggregation
    ("lstm-trnzero-vek280", "vek280", "LSTM", 4, 8, 3, _types(accum="fixed<16,6,TRN_ZERO,WRAP>"),
     RecurrentOptions(aggregation="aie", row_reuse=2), ("vector_round", "vector_round"), 2.0),
    # int8 lanes (32 per vector), products exact (4 + 4 = 8 = acc frac), wrapping 16-bit accumulator
    ("gru-int8-mac-vck190", "vck190", "GRU", 3, 8, 4,
     dict(input="fixed<8,4>", weight="fixed<8,4>", recurrent_weight="fixed<8,4>", output="fixed<8,4>",
          bias="fixed<8,4>", recurrent_bias="fixed<8,4>", accum="fixed<16,8>"),
     RecurrentOptions(aggregation="hybrid", row_reuse=2), ("vector", "vector"), 1.0),
    # a saturating accumulator whose partial sums cannot saturate (small weights): vector, clamps never hit
    ("gru-sat-bounded-vck190", "vck190", "GRU", 6, 8, 3,
     _types(accum="fixed<32,12,RND_CONV,SAT>", weight="fixed<16,2>", recurrent_weight="fixed<16,2>"),
     RecurrentOptions(aggregation="aie"), ("vector_round", "vector_round"), 0.05),
]


@needs_gxx
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_vector_kernels_are_bit_exact_on_x86(case):
    _, device, cell, n_in, n_h, steps, types, opts, kinds, scale = case
    torch.manual_seed(3)
    net = _Net(cell, n_in, n_h, sequence=True, scale=scale).eval()
    x = _data((40, steps, n_in), 5)
    d = compile_recurrent(net, device, x[:4], {"precision": "int16" if "16" in types["input"] else "int8",
                                               "layers": {"rnn": types}}, x, opts)
    assert d.mapping.dims.kernels == kinds
    assert f"kernels: U h {kinds[0]}, W x {kinds[1]}" in d.summary()
    assert d.to_json()["kernels"][0]["u"] == kinds[0]
    src = d.files["src/rnn_config.h"]
    assert "static constexpr bool VECTOR = true;" in src and "static constexpr bool VECTOR = false;" not in src
    result = d.verify(samples=14, seed=9)  # the input type's edge codes first, then random ones
    assert result.ok, result.verdict()
    assert result.values == 14 * steps * n_h  # every step's h of every sample


@needs_gxx
def test_forcing_scalar_kernels_keeps_them_bit_exact_and_costs_them_more():
    torch.manual_seed(4)
    net = _Net("GRU", 6, 12, sequence=True, scale=2.0).eval()
    x = _data((32, 4, 6), 6)
    cfg = {"precision": "int16", "layers": {"rnn": _types()}}
    vec = compile_recurrent(net, "vck190", x[:2], cfg, x)
    cfg["layers"]["rnn"]["mapping"] = {"kernel": "scalar"}
    sca = compile_recurrent(net, "vck190", x[:2], cfg, x)
    assert vec.mapping.dims.kernels == ("vector_round", "vector_round")
    assert sca.mapping.dims.kernels == ("scalar", "scalar")
    assert "static constexpr bool VECTOR = true;" not in sca.files["src/rnn_config.h"]
    assert sca.estimate().breakdown_ns["mac"] > 5 * vec.estimate().breakdown_ns["mac"]
    assert np.array_equal(sca.predict(x.numpy()), vec.predict(x.numpy()))  # the same numerics either way
    result = sca.verify(samples=8, seed=2)
    assert result.ok, result.verdict()


# ----------------------------------------------------------------------------- the latency model


def test_the_model_charges_scalar_kernels_their_products_one_at_a_time():
    dev = get_device("vck190")
    for k, rows in ((6, 1), (20, 3), (64, 2)):
        t = costs.row_kernel(rows, k, 10.0, dev, ("i16", "i16"), "scalar")
        assert t.mac >= rows * k * costs.SCALAR_PRODUCT_CYCLES and t.reduction == 0
        v = costs.row_kernel(rows, k, 10.0, dev, ("i16", "i16"), "vector")
        r = costs.row_kernel(rows, k, 10.0, dev, ("i16", "i16"), "vector_round")
        assert v.cycles < r.cycles < t.cycles
    chain = costs.column_chain(16, 64, 2, 0.0, dev, ("i16", "i16"), "scalar")
    assert chain.mac >= 16 * 32 * costs.SCALAR_PRODUCT_CYCLES  # every lane of the group, one product at a time


def test_mapped_fixed_point_layers_are_costed_as_their_kernels():
    """dims from a node carry the kernel kinds; a scalar U h kernel makes the step's MAC part at
    least n_h products per row at the scalar rate; fixed-point vectors travel as 32-bit words."""
    dev = get_device("vck190")
    scalar = RecurrentDims("gru", 6, 20, 20, ("i16", "i16"), kernels=("scalar", "scalar"))
    vector = RecurrentDims("gru", 6, 20, 20, ("i16", "i16"))
    ps, pv = (estimate_recurrent(plan_recurrent(d, dev), dev) for d in (scalar, vector))
    assert ps.breakdown_ns["mac"] >= 20 * costs.SCALAR_PRODUCT_CYCLES / 1.25
    assert pv.breakdown_ns["mac"] < ps.breakdown_ns["mac"] / 10
    (w_mac, _), (h_in, *_) = step_stages(plan_recurrent(vector, dev), dev)
    assert h_in.words == 32 and w_mac.words == 16  # h padded to 32 int16 lanes = 32 words; x to 16
    # cascade chains run the same kind as row kernels (rnn_cascade.h); scalar dims stay scalar either way
    assert vector.kernel("u", "column") == vector.kernel("u", "row") == "vector"
    assert scalar.kernel("w", "column") == scalar.kernel("w", "row") == "scalar"
