"""Fixed-point GRU / LSTM emulation against a scalar transcription of hls4ml's static-mode
recurrence in exact rationals, for random types (every rounding and overflow mode, negative and
large fractional bit counts), random tables and codes at the types' edges.

The emulator runs these layers in int32 when ``_state_dtype`` proves every intermediate fits and in
int64 otherwise; both are compared with the reference, so the int32 shortcuts (narrowing casts,
clips, int32 table maps, unchecked aligned sums) are held to the definition, not to each other.
(tests/test_recurrent_hls4ml.py compares the default types with hls4ml's own C simulation.)

The table index is written out here from its definition (``_table_index``), not taken from
aieflow.ops.activations; the table entries still come from ``TableSpec.codes`` (checked entry by
entry against hls4ml's C++ in test_recurrent_hls4ml.py)."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from fixed_reference import ref_cast, ref_cast_value, ref_round
from hypothesis import event, given, settings
from hypothesis import strategies as st

from aieflow.numerics.types import FixedType, Rounding, Saturation, parse_type
from aieflow.ops import activations as act
from aieflow.ops import recurrent as rec

ROUNDINGS = list(Rounding)


@st.composite
def fixed_types(draw, widths=(2, 16), fracs=(-3, 3)) -> FixedType:
    width = draw(st.integers(*widths))
    frac = draw(st.integers(fracs[0], width + fracs[1]))
    # TRN half the time: hls4ml's default, and the int32 path's shortcut (a plain shift)
    rounding = draw(st.one_of(st.just(Rounding.FLOOR), st.sampled_from(ROUNDINGS)))
    return FixedType(width, frac, True, rounding, draw(st.sampled_from(list(Saturation))))


@st.composite
def tables(draw, function: str) -> act.TableSpec:
    return act.TableSpec(
        function,
        draw(st.sampled_from([12, 16, 64, 1000, 1024])),  # 12, 1000: N not a multiple of 2L
        Fraction(draw(st.sampled_from([1, 4, 8]))),
        draw(st.sampled_from(list(act.INDEX_ROUNDINGS.values()))),
        draw(fixed_types(widths=(6, 18), fracs=(-4, 0))),
    )


# A random fixed-point layer: cell, the types (input, weights, biases, accumulator, result), the two
# tables and a seed for its weights and inputs.
LAYERS = dict(
    op=st.sampled_from(["gru", "lstm"]),
    xt=fixed_types(),
    wt=fixed_types(),
    bt=fixed_types(),
    acc=fixed_types(widths=(6, 16)),
    res=fixed_types(widths=(4, 16)),
    sig=tables("sigmoid"),
    tanh=tables("tanh"),
    seed=st.integers(0, 2**16),
)


def _c_int(v: int) -> int:
    """A C ``int`` (32-bit two's complement wrap)."""
    return (v + (1 << 31)) % (1 << 32) - (1 << 31)


def _table_index(a: act.TableSpec, code: int, frac: int) -> int:
    """The index of the input ``code * 2**-frac`` in a table of ``N`` entries over ``[-L, L)``,
    from the definition (activations.py's docstring, hls4ml's ``nnet_activation.h``) in exact
    rationals: ``N/2 + R(x * N / (2L))`` as C ints, clamped to ``[0, N-1]``; with hls4ml's
    truncation (an integer ``2L``) and an input coarser than 1 (``frac < 0``), ap_fixed's
    ``x * N / 2L`` keeps only the input's resolution before ``int()``."""
    n, span = a.size, 2 * a.limit
    x = Fraction(code) / Fraction(2) ** frac
    if frac < 0 and a.index_rounding is Rounding.SYM_FLOOR and span.denominator == 1:
        step = 2 ** -frac
        raw = ref_round(x * n / span / step, Rounding.SYM_FLOOR) * step
    else:
        raw = ref_round(x * n / span, a.index_rounding)
    return min(max(_c_int(_c_int(raw) + n // 2), 0), n - 1)


def _table(a: act.TableSpec, code: int, frac: int, out: FixedType) -> int:
    entry = int(a.codes()[_table_index(a, code, frac)])
    return ref_cast(entry, a.entry.frac, out)


def _dense(x: list[int], xfrac: int, w: np.ndarray, wfrac: int, b: np.ndarray, bt: FixedType, acc: FixedType) -> list[int]:
    out = []
    for j in range(w.shape[1]):
        run = ref_cast(int(b[j]), bt.frac, acc)
        for k, xk in enumerate(x):
            run = ref_cast(run + ref_cast(xk * int(w[k, j]), xfrac + wfrac, acc), acc.frac, acc)
        out.append(run)
    return out


def _value(code: int, frac: int) -> Fraction:
    return Fraction(code) / Fraction(2) ** frac


def _reference(op: str, t: rec.RecurrentTypes, p: dict, x: np.ndarray, n: int) -> list[list[list[int]]]:
    """Per sample, per step, the state codes (hls4ml nnet_recurrent.h, static mode)."""
    acc, res = t.accum, t.output
    fa, fr = acc.frac, res.frac
    out = []
    for sample in x:
        h, c, states = [0] * n, [0] * n, []
        for xt in sample:
            gx = _dense([int(v) for v in xt], t.input.frac, p["weight_q"], t.weight.frac, p["bias_q"], t.bias, acc)
            gh = _dense(h, fr, p["recurrent_weight_q"], t.recurrent_weight.frac, p["recurrent_bias_q"], t.recurrent_bias, acc)
            pre = [ref_cast(a + b, fa, acc) for a, b in zip(gx, gh, strict=True)]
            if op == "gru":
                z = [_table(t.sigmoid, pre[j], fa, acc) for j in range(n)]
                r = [_table(t.sigmoid, pre[n + j], fa, acc) for j in range(n)]
                rh = [ref_cast(r[j] * gh[2 * n + j], 2 * fa, acc) for j in range(n)]
                cand = [_table(t.tanh, ref_cast(gx[2 * n + j] + rh[j], fa, acc), fa, acc) for j in range(n)]
                h = [
                    ref_cast_value(_value(cand[j], fa) * (1 - _value(z[j], fa)) + _value(h[j], fr) * _value(z[j], fa), res)
                    for j in range(n)
                ]
            else:
                i, f, g, o = ([_table(t.tanh if k == 2 else t.sigmoid, pre[k * n + j], fa, acc) for j in range(n)] for k in range(4))
                c = [ref_cast_value(_value(g[j], fa) * _value(i[j], fa) + _value(c[j], fr) * _value(f[j], fa), res) for j in range(n)]
                h = [ref_cast_value(_value(o[j], fa) * _value(_table(t.tanh, c[j], fr, acc), fa), res) for j in range(n)]
            states.append(h)
        out.append(states)
    return out


def _layer(op: str, t: rec.RecurrentTypes, feats: int, n: int, steps: int, rng: np.random.Generator):
    g = rec.gates(op)
    shapes = {"weight": (feats, g * n), "recurrent_weight": (n, g * n), "bias": (g * n,), "recurrent_bias": (g * n,)}
    node = rec.make_node("rnn", op, "x", "y", seq_len=steps, return_sequences=True,
                         **{k: np.zeros(s, dtype=np.float32) for k, s in shapes.items()})
    params = dict(node.params)
    for key, shape in shapes.items():
        ty = getattr(t, key)
        codes = rng.integers(ty.min_code, ty.max_code + 1, shape)
        codes.flat[: min(3, codes.size)] = [ty.min_code, ty.max_code, 0][: min(3, codes.size)]
        params[f"{key}_q"] = codes
    return node.evolve(types=t, params=params)


@settings(max_examples=100, deadline=None)
@given(**LAYERS)
def test_fixed_emulation_matches_the_scalar_reference_in_both_dtypes(op, xt, wt, bt, acc, res, sig, tanh, seed):
    t = rec.RecurrentTypes(xt, wt, wt, bt, bt, acc, res, sig, tanh)
    rng = np.random.default_rng(seed)
    feats, n, steps, batch = 2, 3, 3, 5
    node = _layer(op, t, feats, n, steps, rng)
    x = rng.integers(xt.min_code, xt.max_code + 1, (batch, steps, feats))
    x[0] = xt.max_code
    x[1] = xt.min_code
    expected = _reference(op, t, node.params, x, n)
    auto = rec._state_dtype(t, op)
    event(f"state dtype {np.dtype(auto).name}")
    for dtype in {auto, np.int64}:
        got = rec._emulate_fixed(node, x, dtype)
        assert got.dtype == np.int64
        assert got.tolist() == expected, np.dtype(dtype).name


@settings(max_examples=300, deadline=None)
@given(
    table=st.one_of(tables("sigmoid"), tables("tanh")),
    frac=st.integers(-4, 20),
    codes=st.lists(st.one_of(st.integers(-(1 << 16), 1 << 16), st.integers(-(1 << 40), 1 << 40)), min_size=1, max_size=64),
)
def test_table_index_matches_the_definition(table, frac, codes):
    """The emulator's table index (every lookup goes through it) against _table_index, the
    definition written out: at the clamp, around the centre, for coarse inputs (frac < 0) and
    past the C-int wrap."""
    edges = [-(1 << 31), (1 << 31) - 1, 0, -1, 1]
    span = int(2 * table.limit * Fraction(2) ** frac) or 1  # inputs at and around +-L
    codes = codes + edges + [k * span // 2 + d for k in (-1, 1) for d in (-1, 0, 1)]
    got = table.index_of_codes(np.array(codes, dtype=np.int64), frac).tolist()
    assert got == [_table_index(table, c, frac) for c in codes]


def test_hls4ml_default_types_run_in_int32_and_wide_accumulators_in_int64():
    # The hls4ml C-simulation comparison (test_recurrent_hls4ml.py) then covers the int32 path.
    d = parse_type("fixed<16,6>")
    tables_ = (act.hls4ml_table("sigmoid"), act.hls4ml_table("tanh"))
    default = rec.RecurrentTypes(d, d, d, d, d, d, d, *tables_)
    assert rec._state_dtype(default, "gru") is np.int32
    assert rec._state_dtype(default, "lstm") is np.int32
    wide = rec.RecurrentTypes(d, d, d, d, d, parse_type("fixed<24,8>"), d, *tables_)
    assert rec._state_dtype(wide, "gru") is np.int64
    exact = rec.RecurrentTypes(d, d, d, d, d, d, d, act.ExactActivation("sigmoid"), tables_[1])
    assert rec._state_dtype(exact, "lstm") is np.int64


def test_types_whose_step_overflows_int32_run_in_int64():
    # 20 fractional bits in the accumulator: (1 - z) is about 2**20 and h~ (1 - z) needs ~35 bits,
    # so the int32 shortcut would lose high bits; _state_dtype must see it from the bounds.
    acc = FixedType(16, 20, True, Rounding.FLOOR, Saturation.WRAP)
    res = FixedType(16, 14, True, Rounding.FLOOR, Saturation.SATURATE)
    d = parse_type("fixed<16,6>")
    t = rec.RecurrentTypes(d, d, d, d, d, acc, res, act.hls4ml_table("sigmoid"), act.hls4ml_table("tanh"))
    assert rec._state_dtype(t, "gru") is np.int64
    rng = np.random.default_rng(3)
    node = _layer("gru", t, 2, 3, 3, rng)
    x = rng.integers(d.min_code, d.max_code + 1, (6, 3, 2))
    expected = _reference("gru", t, node.params, x, 3)
    assert rec._emulate_fixed(node, x).tolist() == expected
    assert rec._emulate_fixed(node, x, np.int32).tolist() != expected  # the bound is not slack


@settings(max_examples=60, deadline=None)
@given(**LAYERS)
def test_the_state_bound_holds_on_every_step(op, xt, wt, bt, acc, res, sig, tanh, seed):
    # recurrent/vector.py proves kernel sums fit int32 with this bound in place of the result
    # type's range: every h the recurrence produces must lie within it.
    t = rec.RecurrentTypes(xt, wt, wt, bt, bt, acc, res, sig, tanh)
    rng = np.random.default_rng(seed)
    node = _layer(op, t, 3, 4, 12, rng)
    x = rng.integers(xt.min_code, xt.max_code + 1, (64, 12, 3))
    x[:8] = rng.choice([xt.min_code, xt.max_code], (8, 12, 3))
    bound = rec.state_max_code(t, op)
    h = rec._emulate_fixed(node, x)
    assert np.abs(h).max() <= bound <= max(-res.min_code, res.max_code)
    event("bound below the type's range" if bound < res.max_code else "type range")


def test_hls4ml_default_states_are_bounded_by_one():
    # sigmoid and tanh entries lie in [0, 1] and [-1, 1]: |h| <= 1, 1024 codes of ap_fixed<16,6>
    d = parse_type("fixed<16,6>")
    t = rec.RecurrentTypes(d, d, d, d, d, d, d, act.hls4ml_table("sigmoid"), act.hls4ml_table("tanh"))
    for op in ("gru", "lstm"):
        assert rec.state_max_code(t, op) <= 1 << d.frac < d.max_code


# ------------------------------------------------------------------------------- PTQ accumulator


def _top_tagging(cell: str):
    import torch

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.rnn = getattr(torch.nn, cell)(6, 20, batch_first=True)
            self.fc = torch.nn.Linear(20, 1)

        def forward(self, x):
            return self.fc(self.rnn(x)[0][:, -1])

    torch.manual_seed(3)
    return Net().eval()


@pytest.mark.parametrize("cell", ["GRU", "LSTM"])
@pytest.mark.parametrize("precision", ["int16", "int8"])
def test_ptq_accumulator_lets_the_kernels_vectorise_at_the_same_accuracy(cell, precision, monkeypatch):
    # The calibration alone gives a 2 x a_bits accumulator with every fractional bit it allows: no
    # row's worst-case sum then fits the vector lanes and every kernel is scalar. The PTQ drops
    # fractional bits until recurrent/vector.py can prove the vector form (it decides, on the
    # final types), keeping the calibration's integer bits, and the outputs stay as accurate.
    import torch

    import aieflow

    net = _top_tagging(cell)
    rng = np.random.default_rng(0)
    calib, test = (rng.standard_normal((n, 20, 6)).astype(np.float32) for n in (400, 400))
    with torch.no_grad():
        ref = net(torch.from_numpy(test)).numpy().ravel()

    def run():
        d = aieflow.compile(net, device="vek280", example_input=calib[:4], calibration=calib, config={"precision": precision})
        rms = float(np.sqrt(np.mean((d.predict(test).ravel() - ref) ** 2)))
        return d.mapping.dims.kernels, d.layer.types.accum, rms, d.estimate().sequence_latency_ns

    kernels, acc, rms, latency = run()
    monkeypatch.setattr(rec, "_mac_friendly_accum", lambda node, acc, *args: acc)
    kernels0, acc0, rms0, latency0 = run()
    assert "scalar" not in kernels and kernels0 == ("scalar", "scalar")
    assert acc.width == acc0.width and acc.frac < acc0.frac  # fewer fractional bits, more integer bits
    assert rms <= 1.1 * rms0 + 1e-6
    assert latency < 0.6 * latency0
