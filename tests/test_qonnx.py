"""QONNX (``Quant`` / ``BipolarQuant`` / ``Trunc``) and QCDQ models (issue 18, items 1 and 2).

The oracle is :func:`ref_quant`, an independent implementation of the QONNX ``Quant`` semantics in
exact rational arithmetic (it imports nothing from aieflow; the semantics are those of
``/work/shared/spec/quantisation-formats.md`` and qonnx's ``custom_op/general/intquant.py``, against
which it is cross-checked where qonnx is installed).  Real Brevitas exports (tests/data/brevitas,
made by ``make_brevitas_models.py``) must reproduce Brevitas' own outputs exactly where every scale is
a power of two, and within one output step where Brevitas' float-scale quantisers are used (their
bound and measured agreement: docs/quantisation.md "QONNX with float scales and zero points").
"""

from __future__ import annotations

import math
import shutil
from fractions import Fraction
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import aieflow
from aieflow.errors import AieflowError, UnsupportedOpError
from aieflow.frontends import import_onnx

DATA = Path(__file__).resolve().parent / "data" / "brevitas"
QONNX = "qonnx.custom_op.general"
MODES = ["ROUND", "HALF_EVEN", "CEIL", "FLOOR", "UP", "DOWN", "ROUND_TO_ZERO", "HALF_UP", "HALF_DOWN"]
needs_gxx = pytest.mark.skipif(shutil.which("g++") is None, reason="g++ is not installed: verify builds C++")


# ------------------------------------------------------------------------------ the oracle


def _round(v: Fraction, mode: str) -> int:
    sign = 1 if v >= 0 else -1
    a = abs(v)
    if mode in ("ROUND", "HALF_EVEN"):
        return round(v)  # Python rounds a Fraction half to even
    if mode == "CEIL":
        return math.ceil(v)
    if mode == "FLOOR":
        return math.floor(v)
    if mode == "UP":
        return sign * math.ceil(a)
    if mode in ("DOWN", "ROUND_TO_ZERO"):
        return sign * math.floor(a)
    if mode == "HALF_UP":
        return sign * math.floor(a + Fraction(1, 2))
    if mode == "HALF_DOWN":
        return sign * math.ceil(a - Fraction(1, 2))
    raise ValueError(mode)


def int_bounds(bits: int, signed: bool, narrow: bool) -> tuple[int, int]:
    if signed:
        return -(2 ** (bits - 1)) + (1 if narrow else 0), 2 ** (bits - 1) - 1
    return 0, 2**bits - 1 - (1 if narrow else 0)


def ref_quant(x, scale, zeropt, bits, signed, narrow, mode) -> np.ndarray:
    """QONNX Quant, exactly: y = scale * (clip(round(x / scale + zeropt), min, max) - zeropt)."""
    x = np.asarray(x, dtype=np.float64)
    s = np.broadcast_to(np.asarray(scale, dtype=np.float64), x.shape)
    z = np.broadcast_to(np.asarray(zeropt, dtype=np.float64), x.shape)
    lo, hi = int_bounds(bits, signed, narrow)
    out = np.empty(x.shape, dtype=np.float64)
    for i in np.ndindex(x.shape):
        si, zi = Fraction(float(s[i])), Fraction(float(z[i]))
        v = Fraction(float(x[i])) / si + zi
        if bits == 1 and signed:  # bipolar
            q = 1 if v >= 0 else -1
        else:
            q = _round(min(max(v, lo), hi), mode)
        out[i] = float((q - zi) * si)
    return out


def ref_trunc(x, scale, out_scale, out_bits, signed, narrow, mode) -> np.ndarray:
    """QONNX Trunc (with an output scale): round to the input grid half to even, then to the output
    grid by ``mode``, clipped to the output bit width."""
    on_grid = ref_quant(x, scale, 0, 62, True, False, "ROUND")
    return ref_quant(on_grid, out_scale, 0, out_bits, signed, narrow, mode)


def edge_values(scale: float, bits: int, signed: bool, rng: np.random.Generator, n: int = 64) -> np.ndarray:
    """Random values, exact ties (k + 1/2 steps, both signs), the bounds, one step past them, far past
    them, zeros and values far below one step."""
    lo, hi = int_bounds(bits, signed, False)
    k = rng.integers(max(lo - 3, -(2**40)), min(hi + 3, 2**40), size=n)
    return np.concatenate([
        rng.standard_normal(n) * scale * min(hi, 2**20) / 3,
        (k + 0.5) * scale,
        np.array([lo, hi, lo - 1, hi + 1, lo + 0.5, hi - 0.5, hi + 0.5, 0.0, -0.0]) * scale,
        np.array([1e30, -1e30, 0.25 * scale, -0.25 * scale, 0.75 * scale, -0.75 * scale, scale * 2.0**-40]),
    ])  # fmt: skip


def test_reference_agrees_with_qonnx_where_its_float_arithmetic_is_exact():
    qonnx_quant = pytest.importorskip("qonnx.custom_op.general.quant", reason="qonnx is not installed").quant
    rng = np.random.default_rng(0)
    for mode in MODES[:2] + MODES[2:5] + MODES[7:]:  # qonnx's names (it has no ROUND_TO_ZERO)
        for bits, signed, narrow in ((8, True, False), (8, True, True), (4, False, False), (4, False, True), (1, True, False)):
            x = edge_values(2.0**-3, max(bits, 2), signed, rng)[:-9]  # not the 1e30 / tiny values
            want = qonnx_quant(x, np.float64(2.0**-3), np.float64(0.0), np.float64(bits), signed, narrow, mode)
            np.testing.assert_array_equal(ref_quant(x, 2.0**-3, 0, bits, signed, narrow, mode), want)


# ------------------------------------------------------------------------------ model builders


def _init(name, arr):
    return numpy_helper.from_array(np.asarray(arr), name)


def _quant(x, scale, bits, *, signed=1, narrow=0, mode="ROUND", name, zeropt=None, domain=QONNX):
    """A Quant node plus its parameter initialisers."""
    inits = [
        _init(f"{name}_s", np.asarray(scale, dtype=np.float32)),
        _init(f"{name}_z", np.asarray(0.0 if zeropt is None else zeropt, dtype=np.float32)),
        _init(f"{name}_b", np.float32(bits)),
    ]
    node = helper.make_node("Quant", [x, f"{name}_s", f"{name}_z", f"{name}_b"], [f"{name}_out"], name=name,
                            domain=domain, signed=signed, narrow=narrow, rounding_mode=mode)
    return node, inits


def _model(nodes, inits, k, n, *, opset_qonnx=True, out="y"):
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", k])],
                              [helper.make_tensor_value_info(out, TensorProto.FLOAT, ["N", n])], initializer=inits)
    opsets = [helper.make_opsetid("", 13)] + ([helper.make_opsetid(QONNX, 1)] if opset_qonnx else [])
    return helper.make_model(graph, opset_imports=opsets, ir_version=8)


def bias_model(bias, scale, bits, signed, narrow, mode, n):
    """y = x + Quant(bias): the folded constant is the Add's bias."""
    q, inits = _quant("b", scale, bits, signed=signed, narrow=narrow, mode=mode, name="bq")
    nodes = [q, helper.make_node("Add", ["x", "bq_out"], ["y"], name="add")]
    return _model(nodes, [_init("b", np.asarray(bias, np.float32)), *inits], n, n)


def mlp(rng, k=6, n=4, *, x_frac=3, w_frac=5, y_frac=2, x_bits=8, y_bits=8, x_mode="ROUND", y_mode="ROUND",
        y_signed=1, y_narrow=0, w_bits=8, per_channel=False, bias=True, w_gain=0.6):
    """x -> Quant -> Gemm(Quant(W), Quant(b)) -> Quant -> y, with float weights to be quantised."""
    w = (rng.standard_normal((n, k)) * w_gain).astype(np.float32)
    b = (rng.standard_normal(n) * 0.5).astype(np.float32)
    w_scale = (2.0 ** -rng.integers(w_frac - 2, w_frac + 1, size=(n, 1))) if per_channel else 2.0**-w_frac
    qx, ix = _quant("x", 2.0**-x_frac, x_bits, mode=x_mode, name="qx")
    qw, iw = _quant("w", w_scale, w_bits, narrow=1, name="qw")
    qb, ib = _quant("b", np.asarray(w_scale).reshape(-1) * 2.0**-x_frac if per_channel else 2.0 ** -(x_frac + w_frac),
                    32, name="qb")
    qy, iy = _quant("h", 2.0**-y_frac, y_bits, signed=y_signed, narrow=y_narrow, mode=y_mode, name="qy")
    gemm_in = ["qx_out", "qw_out", "qb_out"] if bias else ["qx_out", "qw_out"]
    nodes = [qx, qw, *([qb] if bias else []), helper.make_node("Gemm", gemm_in, ["h"], name="fc", transB=1), qy,
             helper.make_node("Identity", ["qy_out"], ["y"], name="out")]
    inits = [_init("w", w), _init("b", b), *ix, *iw, *(ib if bias else []), *iy]
    ref = dict(w=w, b=b, w_scale=w_scale, x_frac=x_frac, y_frac=y_frac, x_bits=x_bits, y_bits=y_bits, x_mode=x_mode,
               y_mode=y_mode, y_signed=bool(y_signed), y_narrow=bool(y_narrow), w_bits=w_bits, bias=bias)
    return _model(nodes, inits, k, n), ref


def ref_mlp(x, r) -> np.ndarray:
    """The float graph evaluated with every Quant by the oracle (float64 sums are exact here)."""
    xq = ref_quant(x, 2.0 ** -r["x_frac"], 0, r["x_bits"], True, False, r["x_mode"])
    wq = ref_quant(r["w"], r["w_scale"], 0, r["w_bits"], True, True, "ROUND")
    h = xq @ wq.T
    if r["bias"]:
        b_scale = np.asarray(r["w_scale"]).reshape(-1) * 2.0 ** -r["x_frac"]
        h = h + ref_quant(r["b"], b_scale, 0, 32, True, False, "ROUND")
    return ref_quant(h, 2.0 ** -r["y_frac"], 0, r["y_bits"], r["y_signed"], r["y_narrow"], r["y_mode"])


def _inputs(rng, k, frac, bits=8):
    """Gaussian rows, then rows of edge values of the input quantiser (ties, bounds, far beyond)."""
    edges = rng.choice(edge_values(2.0**-frac, bits, True, rng, 16), size=(24, k))
    return np.concatenate([rng.standard_normal((40, k)) * 3, edges]).astype(np.float32)


# ------------------------------------------------------------------------------ import-time quantisation


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("bits, signed, narrow", [(2, True, False), (4, True, True), (4, False, False),
                                                  (7, False, True), (8, True, True), (16, True, False),
                                                  (24, True, False), (32, True, True), (1, True, False)])
def test_constant_quant_equals_the_oracle(mode, bits, signed, narrow):
    rng = np.random.default_rng(bits * 100 + MODES.index(mode))
    frac = int(rng.integers(-3, 12))
    b = edge_values(2.0**-frac, bits, signed, rng, 24).astype(np.float32)
    imported = import_onnx(bias_model(b, 2.0**-frac, bits, signed, narrow, mode, b.size))
    node = imported.graph.node("add")
    want = ref_quant(b, 2.0**-frac, 0, bits, signed, narrow, mode)
    np.testing.assert_array_equal(np.asarray(node.params["bias"], np.float64), want)
    t = imported.hints.params[("add", "bias")]
    # signed codes of at most 4 bits keep a 4-bit type (int4 weights on AIE-ML / AIE-MLv2)
    assert t.signed and t.frac == frac and t.width == (4 if signed and bits <= 4 else 8 if bits <= 7 or (bits == 8 and signed)
                                                       else 16 if bits <= 16 else 32)
    codes = want * 2.0**frac
    assert np.array_equal(codes, np.round(codes)) and codes.min() >= t.min_code and codes.max() <= t.max_code


def test_per_channel_power_of_two_weight_scales_share_the_finest():
    rng = np.random.default_rng(3)
    model, r = mlp(rng, per_channel=True, w_frac=6)
    imported = import_onnx(model)
    w_ir = np.asarray(imported.graph.node("fc").params["weight"], np.float64)
    np.testing.assert_array_equal(w_ir, ref_quant(r["w"], r["w_scale"], 0, 8, True, True, "ROUND").T)
    t = imported.hints.params[("fc", "weight")]
    finest = -int(np.log2(r["w_scale"].min()))
    lifted = w_ir * 2.0**finest  # each channel's codes scaled to the finest scale
    assert t.frac == finest and np.array_equal(lifted, np.round(lifted))
    assert t.width == (8 if np.abs(lifted).max() <= 127 else 16)
    assert np.abs(lifted).max() > 127  # this model needs int16: the rescaled codes outgrow int8


def test_per_channel_scales_too_far_apart_for_32_bits_are_refused():
    model = bias_model(np.array([100.0, 100.0], np.float32), np.array([1.0, 2.0**-30], np.float32), 8, True, False,
                       "ROUND", 2)
    with pytest.raises(UnsupportedOpError, match=r"node 'bq' \(Quant\) quantises to 8 bits with per-channel scales "
                       r"2\^-30 \.\. 2\^-0; its codes do not fit the 32 bits"):
        import_onnx(model)


def test_bipolar_quant_of_a_weight():
    w = np.array([[0.3, -0.2], [0.0, -0.0], [-5.0, 7.0]], np.float32)
    nodes = [helper.make_node("BipolarQuant", ["w", "s"], ["wq"], name="bq", domain=QONNX),
             helper.make_node("MatMul", ["x", "wq"], ["y"], name="mm")]
    imported = import_onnx(_model(nodes, [_init("w", w), _init("s", np.float32(0.25))], 3, 2))
    np.testing.assert_array_equal(imported.graph.node("mm").params["weight"], ref_quant(w, 0.25, 0, 1, True, False, "ROUND"))
    assert imported.hints.params[("mm", "weight")].frac == 2


@pytest.mark.parametrize("mode", ["FLOOR", "ROUND", "HALF_UP"])
def test_trunc_of_a_constant_equals_the_oracle(mode):
    rng = np.random.default_rng(5)
    b = edge_values(2.0**-6, 12, True, rng, 16).astype(np.float32)
    inits = [_init("b", b), _init("s", np.float32(2.0**-6)), _init("z", np.float32(0)), _init("ib", np.float32(12)),
             _init("os", np.float32(2.0**-3)), _init("ob", np.float32(8))]
    nodes = [helper.make_node("Trunc", ["b", "s", "z", "ib", "os", "ob"], ["bt"], name="tr", domain=QONNX,
                              rounding_mode=mode, signed=1, narrow=0),
             helper.make_node("Add", ["x", "bt"], ["y"], name="add")]
    imported = import_onnx(_model(nodes, inits, b.size, b.size))
    np.testing.assert_array_equal(imported.graph.node("add").params["bias"],
                                  ref_trunc(b, 2.0**-6, 2.0**-3, 8, True, False, mode))


# ------------------------------------------------------------------------------ activations: end to end


@pytest.mark.parametrize("x_mode, y_mode", [("ROUND", "FLOOR"), ("CEIL", "HALF_UP"), ("HALF_DOWN", "UP"),
                                            ("DOWN", "ROUND_TO_ZERO"), ("FLOOR", "CEIL"), ("UP", "HALF_EVEN")])
def test_activation_rounding_modes_are_exact(x_mode, y_mode):
    rng = np.random.default_rng(7)
    model, r = mlp(rng, x_mode=x_mode, y_mode=y_mode)
    x = _inputs(rng, 6, r["x_frac"])
    em = aieflow.emulate(model, device="vek280", example_input=x[:2])
    np.testing.assert_array_equal(em.predict(x), ref_mlp(x, r))


@pytest.mark.parametrize("y_bits, y_signed, y_narrow, x_bits", [(8, 1, 1, 8), (8, 0, 0, 8), (16, 1, 0, 16),
                                                                (16, 1, 1, 8)])
def test_activation_widths_signedness_and_narrow_range_are_exact(y_bits, y_signed, y_narrow, x_bits):
    rng = np.random.default_rng(8)
    y_frac = 6 if y_bits == 8 else 9
    model, r = mlp(rng, y_bits=y_bits, y_signed=y_signed, y_narrow=y_narrow, x_bits=x_bits, y_frac=y_frac,
                   x_frac=4 if x_bits == 8 else 10, w_gain=2.0)
    x = _inputs(rng, 6, r["x_frac"], x_bits)
    x = np.concatenate([x, x * 40])  # drive the output into both saturation bounds
    em = aieflow.emulate(model, device="vek280", example_input=x[:2])
    got, want = em.predict(x), ref_mlp(x, r)
    np.testing.assert_array_equal(got, want)
    lo, hi = int_bounds(y_bits, bool(y_signed), bool(y_narrow))
    assert want.min() == lo * 2.0**-y_frac and want.max() == hi * 2.0**-y_frac  # both bounds were reached


@pytest.mark.parametrize("device, weight_bits", [("vek280", 4), ("vek385", 4), ("vck190", 8)])
def test_four_bit_weights_run_as_int4_where_the_generation_has_it(device, weight_bits):
    rng = np.random.default_rng(9)
    model, r = mlp(rng, w_bits=4, w_frac=2)
    imported = import_onnx(model)
    assert imported.hints.params[("fc", "weight")].width == 4
    x = _inputs(rng, 6, r["x_frac"])
    em = aieflow.emulate(model, device=device, example_input=x[:2])
    np.testing.assert_array_equal(em.predict(x), ref_mlp(x, r))
    # AIE-ML / AIE-MLv2: int8 x int4 (the input is 8-bit); AIE: the same codes held in int8
    assert em.graph.node("fc").types.weight.width == weight_bits
    w = np.asarray(imported.graph.node("fc").params["weight"]) * 4
    assert w.min() >= -7 and w.max() <= 7 and len(np.unique(w)) > 5


def test_missing_qonnx_opset_import_is_tolerated(tmp_path):
    rng = np.random.default_rng(10)
    model, r = mlp(rng)
    bare = _model(list(model.graph.node), list(model.graph.initializer), 6, 4, opset_qonnx=False)
    assert [o.domain for o in bare.opset_import] == [""]
    path = tmp_path / "bare.onnx"
    onnx.save(bare, path)
    x = _inputs(rng, 6, r["x_frac"])
    for m in (bare, str(path)):
        em = aieflow.emulate(m, device="vek280", example_input=x[:2])
        np.testing.assert_array_equal(em.predict(x), ref_mlp(x, r))
    assert [o.domain for o in bare.opset_import] == [""]  # the caller's proto is not changed


def test_mul_and_div_by_powers_of_two_fold_into_the_layer_and_constants():
    rng = np.random.default_rng(11)
    model, r = mlp(rng, y_frac=4)
    g = model.graph
    # Gemm -> Mul(0.5) -> Div(0.25) -> Quant: the layer's result times 2; the weight's Quant output times 4 / 4
    gemm = next(n for n in g.node if n.op_type == "Gemm")
    gemm.output[0] = "h0"
    g.node.insert(list(g.node).index(gemm) + 1, helper.make_node("Mul", ["h0", "half"], ["h1"], name="mul"))
    g.node.insert(list(g.node).index(gemm) + 2, helper.make_node("Div", ["h1", "quarter"], ["h"], name="div"))
    gemm.input[1] = "w4"
    g.node.insert(list(g.node).index(gemm), helper.make_node("Mul", ["four", "qw_out"], ["w1"], name="wmul"))
    g.node.insert(list(g.node).index(gemm), helper.make_node("Div", ["w1", "four"], ["w4"], name="wdiv"))
    g.initializer.extend([_init("half", np.float32(0.5)), _init("quarter", np.float32(0.25)), _init("four", np.float32(4))])
    x = _inputs(rng, 6, r["x_frac"])
    em = aieflow.emulate(model, device="vek280", example_input=x[:2])
    want = ref_quant(ref_mlp_pre(x, r) * 2.0, 2.0**-4, 0, 8, True, False, "ROUND")
    np.testing.assert_array_equal(em.predict(x), want)


def ref_mlp_pre(x, r) -> np.ndarray:
    """The Gemm's output before the output Quant."""
    xq = ref_quant(x, 2.0 ** -r["x_frac"], 0, r["x_bits"], True, False, r["x_mode"])
    h = xq @ ref_quant(r["w"], r["w_scale"], 0, r["w_bits"], True, True, "ROUND").T
    return h + ref_quant(r["b"], 2.0 ** -(r["x_frac"] + 5), 0, 32, True, False, "ROUND")


@pytest.mark.parametrize("mode", ["FLOOR", "ROUND", "HALF_DOWN"])
def test_trunc_of_a_layer_result_is_its_srs(mode):
    rng = np.random.default_rng(12)
    model, r = mlp(rng, x_frac=3)  # accumulator grid 2^-(3 + 5)
    g = model.graph
    qy = next(n for n in g.node if n.name == "qy")
    g.node.remove(qy)
    g.node.insert(len(g.node) - 1, helper.make_node("Trunc", ["h", "ts", "tz", "tib", "tos", "tob"], ["qy_out"],
                                                    name="trunc", domain=QONNX, rounding_mode=mode, signed=1, narrow=0))
    g.initializer.extend([_init("ts", np.float32(2.0**-8)), _init("tz", np.float32(0)), _init("tib", np.float32(24)),
                          _init("tos", np.float32(2.0**-3)), _init("tob", np.float32(8))])
    x = _inputs(rng, 6, 3)
    em = aieflow.emulate(model, device="vek280", example_input=x[:2])
    np.testing.assert_array_equal(em.predict(x), ref_trunc(ref_mlp_pre(x, r), 2.0**-8, 2.0**-3, 8, True, False, mode))


# ------------------------------------------------------------------------------ refusals


def _refusal(model, *patterns):
    with pytest.raises(AieflowError) as e:
        aieflow.emulate(model, device="vek280", example_input=np.zeros((2, 6), np.float32))
    text = str(e.value)
    for p in patterns:
        assert p in text, text
    return text


def _edit(model, name, **changes):
    """Change a Quant's initialiser (scale / zero point / bit width) or attributes."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    for key, value in changes.items():
        if key in ("s", "z", "b"):
            init = next(i for i in m.graph.initializer if i.name == f"{name}_{key}")
            init.CopyFrom(_init(init.name, np.asarray(value, dtype=np.float32)))
        else:
            node = next(n for n in m.graph.node if n.name == name)
            for a in list(node.attribute):
                if a.name == key:
                    node.attribute.remove(a)
            node.attribute.append(helper.make_attribute(key, value))
    return m


@pytest.fixture(scope="module")
def base():
    return mlp(np.random.default_rng(20))[0]


def test_scales_that_are_not_positive_are_refused(base):
    _refusal(_edit(base, "qy", s=-0.5), "node 'qy' (Quant)", "a scale must be a positive number")
    _refusal(_edit(base, "qw", s=0.0), "node 'qw' (Quant)", "a scale must be a positive number")


@pytest.mark.parametrize("bits, signed, narrow, words", [
    (4, 1, 0, ["quantises an activation to 4 bits", "[-8, 7]", "Int8ActPerTensorFixedPoint"]),
    (12, 0, 0, ["quantises an activation to 12 bits", "[0, 4095]"]),
    (1, 1, 0, ["to 1 bit"]),
    (8, 0, 1, ["unsigned with narrow range [0, 254]", "narrow_range=False"]),
])  # fmt: skip
def test_activation_types_the_ai_engine_cannot_saturate_to_are_refused(base, bits, signed, narrow, words):
    _refusal(_edit(base, "qy", b=bits, signed=signed, narrow=narrow), "node 'qy' (Quant)", *words)


def test_other_refusals_name_the_node_and_what_to_change(base):
    _refusal(_edit(base, "qy", rounding_mode="DPU"), "node 'qy' (Quant) has rounding_mode 'DPU'", "ROUND")
    _refusal(_edit(base, "qw", b=24), "node 'fc' (Gemm) has a weight quantised by 'qw' to 32-bit codes", "16 bits")
    _refusal(_edit(base, "qx", b=7.5), "node 'qx' (Quant) has bit width 7.5")
    m = _edit(base, "qx", s=[0.5, 0.25, 0.5, 0.5, 0.5, 0.5])
    _refusal(m, "node 'qx' (Quant) quantises an activation with per-channel scales")
    m = onnx.ModelProto()
    m.CopyFrom(base)
    qy = next(n for n in m.graph.node if n.name == "qy")
    qy.attribute.remove(next(a for a in qy.attribute if a.name == "rounding_mode"))  # QONNX's default: ROUND
    aieflow.emulate(m, device="vek280", example_input=np.zeros((2, 6), np.float32))
    narrowless = onnx.ModelProto()
    narrowless.CopyFrom(base)
    node = next(n for n in narrowless.graph.node if n.name == "qy")
    for a in list(node.attribute):
        if a.name == "narrow":
            node.attribute.remove(a)
    _refusal(narrowless, "node 'qy' (Quant) has no attribute 'narrow', which QONNX requires")


def test_unsupported_qonnx_patterns_are_refused(base):
    m = onnx.ModelProto()
    m.CopyFrom(base)
    m.graph.node.insert(0, helper.make_node("MultiThreshold", ["x", "qx_s"], ["t"], name="mt", domain=QONNX))
    _refusal(m, "node 'mt' has op type 'MultiThreshold' from the QONNX domain", "Quant, BipolarQuant, Trunc")
    m = onnx.ModelProto()
    m.CopyFrom(base)
    qx = next(n for n in m.graph.node if n.name == "qx")
    qx.CopyFrom(helper.make_node("BipolarQuant", ["x", "qx_s"], ["qx_out"], name="qx", domain=QONNX))
    _refusal(m, "node 'qx' (BipolarQuant) quantises an activation to {-1, +1}")
    m = onnx.ModelProto()
    m.CopyFrom(base)
    qy = next(n for n in m.graph.node if n.name == "qy")
    qy.CopyFrom(helper.make_node("Trunc", ["h", "qy_s", "qy_z", "qy_b", "qy_b"], ["qy_out"], name="qy", domain=QONNX,
                                 rounding_mode="FLOOR"))
    _refusal(m, "node 'qy' (Trunc) has 5 inputs", "output scale")
    qy.CopyFrom(helper.make_node("Trunc", ["h", "qy_s", "qy_z", "qy_b", "qy_s", "qy_b"], ["qy_out"], name="qy",
                                 domain=QONNX, rounding_mode="FLOOR"))
    _refusal(m, "node 'qy' (Trunc) reads tensor 'h' with scale 2^-2, but the layer computes it on the finer grid 2^-8")
    g = onnx.ModelProto()
    g.CopyFrom(base)
    gemm = next(n for n in g.graph.node if n.op_type == "Gemm")
    gemm.output[0] = "h0"
    g.graph.node.insert(list(g.graph.node).index(gemm) + 1, helper.make_node("Mul", ["h0", "three"], ["h"], name="mul"))
    g.graph.initializer.append(_init("three", np.float32(3)))
    _refusal(g, "node 'mul' (Mul) scales a computed tensor by a constant that is not a scalar positive power of two")


def test_malformed_constants_are_model_errors_not_crashes():
    from aieflow.errors import ModelError

    b = np.zeros(4, np.float32)
    with pytest.raises(ModelError, match=r"node 'bq' \(Quant\): its scale of shape \(3,\) does not broadcast to the "
                       r"tensor's shape \(4,\)"):
        import_onnx(bias_model(b, np.full(3, 0.5, np.float32), 8, True, False, "ROUND", 4))
    with pytest.raises(ModelError, match="quantises a constant that holds inf or NaN"):
        import_onnx(bias_model(np.array([1.0, np.nan], np.float32), 0.5, 8, True, False, "ROUND", 2))
    nodes = [helper.make_node("Mul", ["a", "c"], ["ac"], name="mul"), helper.make_node("Add", ["x", "ac"], ["y"], name="add")]
    with pytest.raises(ModelError, match=r"node 'mul' \(Mul\) combines constants of shapes \(2,\) and \(3,\)"):
        import_onnx(_model(nodes, [_init("a", np.ones(2, np.float32)), _init("c", np.ones(3, np.float32))], 2, 2))


def test_computed_quantisation_parameters_are_refused(base):
    m = onnx.ModelProto()
    m.CopyFrom(base)
    m.graph.node.insert(0, helper.make_node("Relu", ["x"], ["rx"], name="relu"))
    qx = next(n for n in m.graph.node if n.name == "qx")
    qx.input[1] = "rx"
    with pytest.raises(UnsupportedOpError, match="node 'qx' \\(Quant\\) takes its scale from a computed tensor"):
        import_onnx(m)


# ------------------------------------------------------------------------------ QCDQ


def _qcdq(lo, hi, w_lo=-127, w_hi=127):
    """x -> Q -> Clip(lo, hi) -> DQ -> Gemm(DQ(Clip(int8 W)), DQ(int32 b)) -> y."""
    rng = np.random.default_rng(30)
    w = rng.integers(-128, 128, size=(4, 6), dtype=np.int8)
    b = rng.integers(-2000, 2000, size=4, dtype=np.int32)
    inits = [_init("s", np.float32(0.125)), _init("zp", np.int8(0)), _init("lo", np.int8(lo)), _init("hi", np.int8(hi)),
             _init("w", w), _init("wlo", np.int8(w_lo)), _init("whi", np.int8(w_hi)), _init("ws", np.float32(2.0**-6)),
             _init("b", b), _init("bs", np.float32(2.0**-9)), _init("bz", np.int32(0))]
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "s", "zp"], ["xq"], name="q"),
        helper.make_node("Clip", ["xq", "lo", "hi"], ["xc"], name="clip"),
        helper.make_node("DequantizeLinear", ["xc", "s", "zp"], ["xd"], name="dq"),
        helper.make_node("Clip", ["w", "wlo", "whi"], ["wc"], name="wclip"),
        helper.make_node("DequantizeLinear", ["wc", "ws", "zp"], ["wd"], name="wdq"),
        helper.make_node("DequantizeLinear", ["b", "bs", "bz"], ["bd"], name="bdq"),
        helper.make_node("Gemm", ["xd", "wd", "bd"], ["y"], name="fc", transB=1),
    ]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 6])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])], initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8), w, b


def test_qcdq_narrow_range_clip_is_symmetric_saturation_and_matches_onnxruntime():
    ort = pytest.importorskip("onnxruntime")
    model, w, b = _qcdq(-127, 127, -100, 90)
    imported = import_onnx(model)
    t = imported.hints.tensors["x"]
    assert (t.width, t.frac, t.saturation.value) == (8, 3, "symmetric")
    np.testing.assert_array_equal(imported.graph.node("fc").params["weight"], np.clip(w, -100, 90).T * 2.0**-6)
    rng = np.random.default_rng(31)
    x = np.concatenate([rng.standard_normal((30, 6)) * 8, np.full((2, 6), -1e3), (np.arange(-20, 20) + 0.5)
                        .reshape(-1, 1).repeat(6, 1) / 8]).astype(np.float32)
    em = aieflow.emulate(model, device="vek280")  # no calibration: the unquantised output keeps the accumulator's grid
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    want = sess.run(None, {"x": x})[0]
    np.testing.assert_array_equal(em.predict(x), want.astype(np.float64))  # float32 sums are exact here
    assert (np.round(x * 8) < -127).any()  # the narrow bound was exercised


def test_qcdq_clips_to_other_ranges_are_refused():
    model, _, _ = _qcdq(-8, 7)
    _refusal(model, "node 'clip' (Clip) limits the int8 codes of QuantizeLinear 'q' to [-8, 7]", "narrow range")
    model, _, _ = _qcdq(-128, 127)  # the whole range: no narrowing
    assert import_onnx(model).hints.tensors["x"].saturation.value == "saturate"


# ------------------------------------------------------------------------------ real Brevitas exports


CASES = [("brevitas_mlp", "qonnx"), ("brevitas_mlp", "qcdq"), ("brevitas_modes", "qonnx")]


def _case(name: str, fmt: str):
    d = np.load(DATA / f"{name}.npz")
    assert "brevitas" in str(d["versions"])  # made by Brevitas itself, not by aieflow
    return str(DATA / f"{name}_{fmt}.onnx"), d["x"], d["y"]


@pytest.mark.parametrize("name, fmt", CASES)
def test_brevitas_exports_reproduce_brevitas_outputs_exactly(name, fmt):
    model, x, y = _case(name, fmt)
    proto = onnx.load(model)
    ops = {n.op_type for n in proto.graph.node}
    assert ("Quant" in ops) if fmt == "qonnx" else ({"QuantizeLinear", "Clip", "DequantizeLinear"} <= ops)
    em = aieflow.emulate(model, device="vek280", example_input=x[:2])
    got = em.predict(x)
    np.testing.assert_array_equal(got, y.astype(np.float64))
    assert len(np.unique(y)) > 50


def test_brevitas_qonnx_and_qcdq_exports_import_to_the_same_types():
    a, b = (import_onnx(_case("brevitas_mlp", f)[0]) for f in ("qonnx", "qcdq"))
    assert [n.op for n in a.graph.nodes] == [n.op for n in b.graph.nodes] == ["dense", "relu", "dense"]
    assert list(a.hints.params.items())[::2] == list(b.hints.params.items())[::2]  # the weights (biases: int16 vs int32)
    assert sorted(map(str, a.hints.tensors.values())) == sorted(map(str, b.hints.tensors.values()))
    assert a.hints.params[("/fc2/Gemm", "weight")].width == 4  # the 4-bit weights (int4 on AIE-ML / AIE-MLv2)
    assert [n.aliases[:1] for n in a.graph.nodes] == [("fc1",), ("act.act_quant.activation_impl",), ("fc2",)]


def test_a_fresh_brevitas_export_reproduces_brevitas(tmp_path):
    """The stored exports are what Brevitas writes today: build the model again, export it, compare."""
    pytest.importorskip("brevitas", reason="brevitas is not installed (pip install brevitas onnxoptimizer)")
    pytest.importorskip("onnxoptimizer", reason="onnxoptimizer is not installed (Brevitas' ONNX export needs it)")
    import importlib.util
    import warnings

    import torch
    from brevitas.export import export_qonnx

    spec = importlib.util.spec_from_file_location("make_brevitas_models", DATA / "make_brevitas_models.py")
    maker = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(maker)
    torch.manual_seed(5)
    module = maker.build("brevitas_mlp")
    module.train()
    with torch.no_grad():
        for _ in range(4):
            module(torch.randn(32, 12) * 3.0)
    module.eval()
    x = maker.inputs(module, 12, np.random.default_rng(5))
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        y = module(torch.from_numpy(x)).numpy()
        export_qonnx(module, torch.from_numpy(x[:1]), export_path=str(tmp_path / "m.onnx"), dynamo=False)
    em = aieflow.emulate(str(tmp_path / "m.onnx"), device="vek280", example_input=x[:2])
    np.testing.assert_array_equal(em.predict(x), y.astype(np.float64))


@needs_gxx
def test_brevitas_qonnx_export_compiles_and_verifies_bit_exact_on_x86():
    model, x, y = _case("brevitas_mlp", "qonnx")
    d = aieflow.compile(model, device="vek280", example_input=x[:2], config={"layers": {
        "fc1": {"parallelism": {"cas_len": 2, "cas_num": 2}}}})
    assert d.graph.node("/fc1/Gemm").plan.cas_len == 2  # the module name reaches the layer
    np.testing.assert_array_equal(d.predict(x), y.astype(np.float64))
    result = d.verify(x=x)
    assert result.ok, result.verdict()


# ------------------------------------------------------------------------------ float scales and zero points
# A Quant whose scale is not a power of two, or whose zero point is not 0 (Brevitas' default
# *PerTensorFloat / *PerChannelFloat quantisers), is an affine type, as a QDQ model's float scales are
# (docs/quantisation.md "QONNX with float scales"): the constants' codes as QONNX computes them (float32
# x / scale + zeropt, clipped, rounded), the layers requantised with an integer multiplier and shift.


def _qonnx_float32_codes(w, scale, zeropt, bits, signed, narrow, mode):
    """QONNX's own arithmetic on float32 arrays (qonnx custom_op/general/quant.py): the codes of
    round(clip(w / scale + zeropt, min, max)), rounded by ``mode`` (the oracle's rounding on the exact
    float32 quotient)."""
    lo, hi = int_bounds(bits, signed, narrow)
    q = np.clip(np.asarray(w, np.float32) / np.asarray(scale, np.float32) + np.float32(zeropt), lo, hi)
    return np.vectorize(lambda v: _round(Fraction(float(v)), mode), otypes=[np.int64])(q)


@pytest.mark.parametrize("mode", ["ROUND", "FLOOR", "HALF_UP", "ROUND_TO_ZERO"])
@pytest.mark.parametrize("bits, narrow, per_channel", [(8, 1, True), (8, 0, False), (5, 0, True), (16, 0, False)])
def test_float_scale_weight_codes_are_qonnxs(mode, bits, narrow, per_channel):
    rng = np.random.default_rng(bits * 7 + MODES.index(mode))
    k, n = 9, 6
    scale = (rng.uniform(0.002, 0.05, (n, 1)) if per_channel else np.array(0.0123)).astype(np.float32)
    lo, hi = int_bounds(bits, True, bool(narrow))
    w = (rng.standard_normal((n, k)) * float(np.max(scale)) * hi / 3).astype(np.float32)
    w[0, :4] = ((np.array([-1.5, 2.5, hi + 4.0, lo - 4.0]) * np.broadcast_to(scale, (n, 1))[0]).astype(np.float32))
    qx, ix = _quant("x", 0.037, 8, name="qx")
    qw, iw = _quant("w", scale, bits, narrow=narrow, mode=mode, name="qw")
    qy, iy = _quant("h", 0.11, 8, name="qy")
    nodes = [qx, qw, helper.make_node("Gemm", ["qx_out", "qw_out"], ["h"], name="fc", transB=1), qy,
             helper.make_node("Identity", ["qy_out"], ["y"], name="out")]
    imported = import_onnx(_model(nodes, [_init("w", w), *ix, *iw, *iy], k, n))
    want = _qonnx_float32_codes(w, scale, 0, bits, True, bool(narrow), mode)
    np.testing.assert_array_equal(imported.graph.node("fc").params["weight_codes"], want.T)
    t = imported.hints.params[("fc", "weight")]
    assert t.scale == tuple(float(v) for v in np.broadcast_to(scale, (n, 1)).reshape(-1)[: n if per_channel else 1])
    assert t.width == (8 if bits <= 8 else 16) and t.signed
    qonnx_quant = pytest.importorskip("qonnx.custom_op.general.quant", reason="qonnx is not installed").quant
    if mode != "ROUND_TO_ZERO":  # a Brevitas name qonnx does not have
        y = qonnx_quant(w, scale, np.float32(0), np.float32(bits), 1, narrow, mode)
        np.testing.assert_array_equal(((want * scale).astype(np.float32)), y)


@pytest.fixture(scope="module")
def float_base():
    """The MLP with float scales everywhere and a float32 bias quantised at input x weight scale."""
    rng = np.random.default_rng(30)
    model, _ = mlp(rng)
    model = _edit(model, "qx", s=0.0371)
    model = _edit(model, "qw", s=0.0193)
    model = _edit(model, "qb", s=float(np.float32(0.0371) * np.float32(0.0193)))
    return _edit(model, "qy", s=0.0917)


def _float_ref(x, model):
    """The float MLP with every Quant on float32 quotients (QONNX's arithmetic), the Gemm in float64."""
    inits = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    attrs = {n.name: {a.name: helper.get_attribute_value(a) for a in n.attribute} for n in model.graph.node}

    def q(v, name):
        a = attrs[name]
        mode = a.get("rounding_mode", b"ROUND")
        mode = mode.decode() if isinstance(mode, bytes) else mode
        s, z, b = inits[f"{name}_s"], inits[f"{name}_z"], int(inits[f"{name}_b"])
        codes = _qonnx_float32_codes(v, s, z, b, bool(a["signed"]), bool(a["narrow"]), mode)
        return (codes - z.astype(np.float64)) * s.astype(np.float64)

    h = q(x, "qx") @ q(inits["w"], "qw").T.astype(np.float64) + q(inits["b"], "qb")
    return q(h.astype(np.float32), "qy")


def test_float_scales_and_zero_points_compute_within_one_step_of_qonnx(float_base):
    rng = np.random.default_rng(31)
    x = _inputs(rng, 6, 4)
    for model, step in ((float_base, 0.0917), (_edit(float_base, "qx", z=3.0), 0.0917),
                        (_edit(_edit(float_base, "qy", signed=0), "qy", z=17.0), 0.0917)):
        got = aieflow.emulate(model, device="vek280", example_input=x[:2]).predict(x)
        want = _float_ref(x, model)
        assert np.abs(np.round(got / step) - np.round(want / step)).max() <= 1
        assert np.mean(np.round(got / step) == np.round(want / step)) >= 0.99
        assert len(np.unique(want)) > 20


def test_float_scale_quantisers_aieflow_cannot_compute_are_refused_by_name(float_base):
    _refusal(_edit(float_base, "qy", rounding_mode="FLOOR"), "node 'qy' (Quant) rounds a float-scale activation with "
             "rounding_mode 'FLOOR'", "ROUND")
    _refusal(_edit(float_base, "qy", narrow=1), "node 'qy' (Quant) quantises a float-scale activation with narrow "
             "range", "narrow_range=False")
    _refusal(_edit(float_base, "qx", b=4), "node 'qx' (Quant) quantises an activation to 4 bits with a float scale")
    _refusal(_edit(float_base, "qx", s=np.linspace(0.01, 0.02, 6)), "node 'qx' (Quant) quantises an activation with "
             "per-channel scales or zero points")
    _refusal(_edit(float_base, "qx", z=0.5), "node 'qx' (Quant) has a zero point that is not an integer (0.5)")
    _refusal(_edit(float_base, "qx", z=300.0), "node 'qx' (Quant): zero point 300 outside the int8 range")
    _refusal(_edit(float_base, "qw", z=1.0), "node 'fc' (Gemm)", "zero point")


# the share of outputs equal to Brevitas' each model must keep (docs/quantisation.md: Int32Bias models every
# output; a float bias, which Brevitas adds in float32, 5 of 2,080 differ; the CNN's float32 convolutions 12 of 800)
FLOAT_CASES = {"brevitas_float_pt": 1.0, "brevitas_float_pc": 1.0, "brevitas_default": 0.99, "brevitas_shifted": 0.99,
               "brevitas_float_cnn": 0.98}


def _output_step(model: onnx.ModelProto) -> float:
    last = [n for n in model.graph.node if n.op_type in ("Quant", "DequantizeLinear")][-1]
    inits = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    consts = {n.output[0]: numpy_helper.to_array(n.attribute[0].t) for n in model.graph.node if n.op_type == "Constant"}
    return float(inits.get(last.input[1], consts.get(last.input[1])))


@pytest.mark.parametrize("fmt", ["qonnx", "qcdq"])
@pytest.mark.parametrize("name", FLOAT_CASES)
def test_brevitas_float_scale_exports_match_brevitas_within_one_step(name, fmt):
    model, x, y = _case(name, fmt)
    proto = onnx.load(model)
    assert ("Quant" in {n.op_type for n in proto.graph.node}) == (fmt == "qonnx")
    step = _output_step(proto)
    assert math.frexp(step)[0] != 0.5  # a float scale
    got = aieflow.emulate(model, device="vek280", example_input=x[:2]).predict(x)
    # Brevitas computes in float32 (and, without Int32Bias, adds its bias in float): one output step
    assert np.abs(np.round(got / step) - np.round(y / step)).max() <= 1
    assert np.mean(np.round(got / step) == np.round(y / step)) >= FLOAT_CASES[name]
    assert len(np.unique(y)) > 50


def test_brevitas_float_qonnx_and_qcdq_exports_import_to_the_same_types():
    for name in FLOAT_CASES:
        a, b = (import_onnx(_case(name, f)[0]) for f in ("qonnx", "qcdq"))
        assert [n.op for n in a.graph.nodes] == [n.op for n in b.graph.nodes]
        assert sorted(map(str, a.hints.tensors.values())) == sorted(map(str, b.hints.tensors.values()))
        for n, m in zip(a.graph.nodes, b.graph.nodes, strict=True):
            if "weight_codes" in n.params:
                np.testing.assert_array_equal(n.params["weight_codes"], m.params["weight_codes"])
    shifted = import_onnx(_case("brevitas_shifted", "qonnx")[0])
    assert any(getattr(t, "zero_point", 0) != 0 for t in shifted.hints.tensors.values())  # Brevitas' zero points


def test_a_float_bias_becomes_int32_codes_at_input_scale_times_weight_scale():
    """Brevitas' default QuantLinear has no bias quantiser: its float bias is added as int32 codes on the
    accumulator's grid, rounded half to even from the exact rationals (as quantize_static does)."""
    model, x, _ = _case("brevitas_default", "qonnx")
    proto = onnx.load(model)
    inits = {i.name: numpy_helper.to_array(i) for i in proto.graph.initializer}
    consts = {n.output[0]: numpy_helper.to_array(n.attribute[0].t) for n in proto.graph.node if n.op_type == "Constant"}
    quants = {n.output[0]: n for n in proto.graph.node if n.op_type == "Quant"}
    d = aieflow.emulate(model, device="vek280", example_input=x[:2])
    gemms = [n for n in proto.graph.node if n.op_type == "Gemm"]
    assert len(gemms) == 2
    prev_scale = None
    for gemm, layer in zip(gemms, [n for n in d.graph.nodes if n.op == "dense"], strict=True):
        qx, qw = quants[gemm.input[0]], quants[gemm.input[1]]
        s_x = float(consts.get(qx.input[1], inits.get(qx.input[1])))
        s_w = float(consts.get(qw.input[1], inits.get(qw.input[1])))
        z_x = int(consts.get(qx.input[2], inits.get(qx.input[2])))
        bias = inits.get(gemm.input[2], consts.get(gemm.input[2]))
        assert bias.dtype == np.float32 and gemm.input[2] not in quants  # a float bias, no Quant
        want = [round(Fraction(float(b)) / (Fraction(s_x) * Fraction(s_w))) for b in bias]
        wq = np.asarray(layer.params["weight_q"], np.int64)
        got = np.asarray(layer.params["bias_q"], np.int64) + z_x * wq.sum(axis=0)  # the input zero point unfolded
        assert got.tolist() == want and max(map(abs, want)) > 100
        assert s_x != prev_scale
        prev_scale = s_x


@needs_gxx
@pytest.mark.parametrize("name, device", [("brevitas_float_pc", "vek280"), ("brevitas_shifted", "vck190"),
                                          ("brevitas_float_cnn", "vek280")])
def test_brevitas_float_scale_qonnx_verifies_bit_exact_on_x86(name, device):
    model, x, y = _case(name, "qonnx")
    d = aieflow.compile(model, device=device, example_input=x[:2])
    layers = [n for n in d.graph.nodes if n.op in ("dense", "conv2d")]
    assert len(layers) >= 2 and all("rq_mult" in n.params for n in layers)  # every layer requantises
    result = d.verify(x=x[:8] if x.ndim == 4 else x[:64])
    assert result.ok, result.verdict()
