"""``predict`` returns float32 for float models, like the model itself (issue 23, item 6), and
never rounds: float64 only for output types float32 cannot hold exactly."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
import torch

import aieflow
from aieflow.model_zoo import gru_classifier, qdq_mlp, torch_mlp
from aieflow.numerics.fixed import float32_exact
from aieflow.numerics.types import FixedType, parse_type

X = np.random.default_rng(0).standard_normal((32, 16)).astype(np.float32) * 2


def exact_values(design, x):
    """The real values of the output codes, computed here with fractions (not by aieflow)."""
    codes = design.predict(x, raw=True)
    frac = design.output_type.frac
    return [Fraction(int(c)) / Fraction(2) ** frac for c in codes.reshape(-1)]


@pytest.mark.parametrize("precision, device", [("int8", "vek280"), ("int16", "vek280"), ("a16w8", "vck190")])
def test_a_quantised_float_model_predicts_float32_exactly(precision, device):
    net = torch_mlp([16, 32, 8])
    d = aieflow.compile(net, device=device, example_input=X[:8], calibration=X, config={"precision": precision})
    y = d.predict(X)
    assert y.dtype == np.float32
    assert net(torch.from_numpy(X)).detach().numpy().dtype == y.dtype  # the model's own dtype
    assert [Fraction(float(v)) for v in y.reshape(-1)] == exact_values(d, X)
    assert d.predict(X[:0]).dtype == np.float32 and d.predict(X[:0]).shape == (0, 8)


def test_float_precisions_and_qdq_and_recurrent_models_too():
    fp32 = aieflow.compile(torch_mlp([16, 32, 8]), device="vck190", example_input=X[:8], config={"precision": "fp32"})
    assert fp32.predict(X).dtype == np.float32
    qdq = aieflow.compile(qdq_mlp([16, 32, 8]), device="vek280")
    y = qdq.predict(X)
    assert y.dtype == np.float32 and [Fraction(float(v)) for v in y.reshape(-1)] == exact_values(qdq, X)
    seq = np.random.default_rng(1).standard_normal((4, 5, 4)).astype(np.float32)
    gru = aieflow.compile(gru_classifier(), device="vek280", example_input=seq, calibration=seq,
                          config={"precision": "int16"})
    assert gru.predict(seq).dtype == np.float32


def test_an_output_wider_than_float32_stays_float64_and_exact():
    d = aieflow.compile(torch_mlp([16, 32, 8]), device="vek280", example_input=X[:8], calibration=X,
                        config={"precision": "int16", "layers": {"2": {"output": "fixed<32,8>"}}})
    y = d.predict(X)
    assert d.output_type.width == 32 and y.dtype == np.float64
    assert [Fraction(float(v)) for v in y.reshape(-1)] == exact_values(d, X)
    # float32 would have rounded some of them: the reason for float64
    assert any(Fraction(float(np.float32(v))) != Fraction(float(v)) for v in y.reshape(-1))


def test_which_types_float32_holds():
    assert float32_exact(parse_type("int8")) and float32_exact(parse_type("fixed<16,6>"))
    assert float32_exact(FixedType(24, 149)) and float32_exact(FixedType(24, -104))
    assert not float32_exact(FixedType(25, 8)) and not float32_exact(FixedType(24, 150))
    assert not float32_exact(FixedType(24, -105))  # its largest value reaches 2^128
