"""Keras recurrent models as tf2onnx really exports them (tests/data/keras, made by
make_keras_onnx.py with TensorFlow 2.21 / Keras 3.15 / tf2onnx 1.17; these tests need neither):
Keras' weight layouts and gate order arrive through ONNX and must reproduce Keras' own predict."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

import aieflow
from aieflow.errors import UnsupportedOpError

DATA = Path(__file__).resolve().parent / "data" / "keras"
needs_gxx = pytest.mark.skipif(shutil.which("g++") is None, reason="g++ is not installed")


def _case(name: str):
    d = np.load(DATA / f"{name}.npz")
    assert "tensorflow" in str(d["versions"])  # made by Keras itself, not by aieflow
    return str(DATA / f"{name}.onnx"), d["x"], d["y"]


@pytest.mark.parametrize("name", ["keras_lstm", "keras_lstm_sequences"])
def test_keras_lstm_exports_match_keras_predict_in_fp32(name):
    model, x, y = _case(name)
    em = aieflow.emulate(model, device="vck190", example_input=x[:2], config={"precision": "fp32"})
    assert [n.op for n in em.graph.nodes][0] == "lstm"
    got = em.predict(x).reshape(y.shape)
    np.testing.assert_allclose(got, y, rtol=1e-5, atol=2e-6)
    assert np.abs(y).max() > 0.1  # the outputs are not all near zero


def test_keras_lstm_export_compiles_in_fixed_point_close_to_keras():
    model, x, y = _case("keras_lstm")
    d = aieflow.compile(model, device="vek280", example_input=x[:2], calibration=x, config={"precision": "int16"})
    err = np.abs(d.predict(x).reshape(y.shape) - y).max()
    assert err < 0.02 * np.abs(y).max()


@needs_gxx
def test_keras_lstm_export_verifies_on_x86():
    model, x, _ = _case("keras_lstm")
    d = aieflow.compile(model, device="vck190", example_input=x[:2], calibration=x, config={"precision": "fp32"})
    result = d.verify(x=x[:8])
    assert result.ok, result.verdict()


@pytest.mark.parametrize("name", ["keras_gru", "keras_gru_reset_before", "keras_gru_sequences"])
def test_keras_gru_loops_are_refused_with_the_reason_and_a_way_out(name):
    # tf2onnx does not fuse Keras 3 GRU layers into an ONNX GRU node: they arrive as a Loop
    model, x, _ = _case(name)
    with pytest.raises(UnsupportedOpError, match=r"is an ONNX Loop .* must arrive as ONNX GRU / LSTM nodes") as e:
        aieflow.emulate(model, device="vck190", example_input=x[:2], config={"precision": "fp32"})
    assert "PyTorch" in e.value.hint and "linear_before_reset=1" in e.value.hint
