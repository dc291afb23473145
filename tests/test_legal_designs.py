"""Legal designs only (issue 16, item 3): every shift or type the AI Engine cannot apply is a
ConfigError (a type the config gave) or a PlanError (a type calibration chose) at compile time,
naming the layer and the value; extreme calibration ends in such an error or in a legal design.

The limits are the device catalog's (devices.py: srs_shift_max, ups_shift_max, with sources)."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
import torch

import aieflow
from aieflow.devices import AIE1, AIE_ML
from aieflow.errors import ConfigError, PlanError
from aieflow.model_zoo import gru_classifier, torch_mlp


@pytest.fixture(scope="module")
def net():
    return torch_mlp([16, 8, 4], seed=0)  # Dense layers named '0' and '2'


@pytest.fixture(scope="module")
def x():
    return np.random.default_rng(0).standard_normal((32, 16)).astype(np.float32)


def compile_int8(net, x, device="vek280", layers=None, calibration=None):
    config = {"precision": "int8", "layers": layers or {}}
    return aieflow.compile(net, device=device, example_input=x[:4], config=config,
                           calibration=x if calibration is None else calibration)


def test_the_catalog_limits():
    # AIE intrinsics guide: SRS / UPS shift -1..62; AIE-ML UG1583: SRS -4..59, UPS 0..63.
    assert (AIE1.srs_shift_max, AIE1.ups_shift_max) == (62, 62)
    assert (AIE_ML.srs_shift_max, AIE_ML.ups_shift_max) == (59, 63)


@pytest.mark.parametrize("device, limit", [("vck190", 62), ("vek280", 59)])
def test_explicit_output_type_with_an_impossible_shift(net, x, device, limit):
    # fixed<8,60>: frac -52, so the SRS shift is the accumulator's fractional bits + 52 (> 59 / 62).
    with pytest.raises(ConfigError, match=rf"layer '0': output shift (\d+) is outside the 0\.\.{limit} ") as e:
        compile_int8(net, x, device, layers={"0": {"output": "fixed<8,60>"}})
    assert int(e.value.message.split()[2]) > limit
    assert "layers.0.output" in e.value.hint


def test_explicit_output_type_just_inside_the_limit_compiles(net, x):
    # Same layer, an output 20 integer bits coarser than calibration's: a shift the SRS applies.
    d = compile_int8(net, x, layers={"0": {"output": "fixed<8,20>"}})
    assert 0 <= d.graph.node("0").types.shift <= AIE_ML.srs_shift_max


def test_explicit_bias_type_with_an_impossible_upshift(net, x):
    with pytest.raises(ConfigError, match=r"layer '0': bias shift \d+ is outside the 0\.\.63 .*from_vector") as e:
        compile_int8(net, x, layers={"0": {"bias": "fixed<32,100>"}})
    assert "layers.0.bias" in e.value.hint


@pytest.mark.parametrize("key, text", [("weight", "fixed<8,4000>"), ("output", "fixed<8,-4000>"),
                                       ("input", "fixed<16,-200>")])
def test_explicit_type_beyond_float32_is_refused_by_key(net, x, key, text):
    with pytest.raises(ConfigError, match=rf"layers\.0\.{key}: numeric type '{text}' has .* at most 128 integer "
                                          r"and 126 fractional bits"):
        compile_int8(net, x, layers={"0": {key: text}})


@pytest.mark.parametrize("precision", ["int8", "int16"])
def test_tiny_calibration_is_a_plan_error_naming_the_layer(net, x, precision):
    config = {"precision": precision}
    with pytest.raises(PlanError, match=r"layer '0': output shift \d+ is outside the 0\.\.59 ") as e:
        aieflow.compile(net, device="vek280", example_input=x[:4], config=config, calibration=x * 1e-30)
    assert "calibrat" in e.value.hint
    with pytest.raises(PlanError, match="output shift"):  # emulate quantises the same way
        aieflow.emulate(net, device="vek280", example_input=x[:4], config=config, calibration=x * 1e-30)


@pytest.mark.parametrize("scale", [1e30, 0.0])
def test_huge_or_zero_calibration_gives_a_legal_design(net, x, scale):
    d = compile_int8(net, x, calibration=x * scale)
    for name in ("0", "2"):
        t = d.graph.node(name).types
        assert 0 <= t.shift <= AIE_ML.srs_shift_max and 0 <= t.bias_shift <= AIE_ML.ups_shift_max
    y = np.asarray(d.predict(x[:4] * scale))
    assert np.all(np.isfinite(y))


@pytest.mark.skipif(shutil.which("g++") is None, reason="g++ not found: verify builds the C++ on x86")
def test_huge_calibration_design_verifies_bit_exact(net, x):
    d = compile_int8(net, x, calibration=x * 1e30)
    assert d.verify(samples=32).ok


@pytest.mark.parametrize("types", [{"accum": "fixed<32,-60>"}, {"output": "fixed<16,-60>", "accum": "fixed<32,-40>"}])
def test_recurrent_types_beyond_int64_are_refused_at_compile(types):
    """A recurrent layer's types whose intermediates need more than the 62 bits the emulator and the
    generated C++ compute in: a ConfigError at compile naming the layer, not an OverflowError when
    the design predicts (found probing issue 16, item 3)."""
    torch.manual_seed(0)
    x = np.random.default_rng(0).standard_normal((8, 5, 4)).astype(np.float32)
    with pytest.raises(ConfigError, match=r"layer 'rnn': the layer's fixed-point types need intermediates beyond 62 bits"):
        aieflow.compile(gru_classifier(), device="vck190", example_input=x, calibration=x,
                        config={"precision": "int16", "layers": {"rnn": types}})
    ok = aieflow.compile(gru_classifier(), device="vck190", example_input=x, calibration=x,
                         config={"precision": "int16", "layers": {"rnn": {"weight": "fixed<16,40>", "accum": "fixed<32,-30>"}}})
    assert np.isfinite(ok.predict(x)).all()
