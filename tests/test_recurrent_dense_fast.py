"""The fast path of the fixed-point recurrent dense (hls4ml's TRN / WRAP accumulator) against a
plain transcription of hls4ml's ``dense_latency``: every product cast to the accumulator, summed
from the cast bias in input order, every partial sum cast."""

from __future__ import annotations

import numpy as np
import pytest

from aieflow.numerics import fixed
from aieflow.numerics.types import parse_type
from aieflow.ops.recurrent import _dense_fixed


def _reference(x, xt, w, wt, b, bt, acc):
    out = np.empty((x.shape[0], w.shape[1]), dtype=np.int64)
    for r in range(x.shape[0]):
        for j in range(w.shape[1]):
            run = fixed.cast(np.array([b[j]]), bt.frac, acc)
            for k in range(x.shape[1]):
                prod = fixed.cast(np.array([int(x[r, k]) * int(w[k, j])]), xt.frac + wt.frac, acc)
                run = fixed.cast(run + prod, acc.frac, acc)
            out[r, j] = run[0]
    return out


@pytest.mark.parametrize(
    "xt, wt, bt, acc",
    [
        ("fixed<16,6>", "fixed<16,6>", "fixed<16,6>", "fixed<16,6>"),  # hls4ml's defaults: int32 path, wraps
        ("fixed<12,4>", "fixed<10,2>", "fixed<14,6>", "fixed<20,8>"),
        ("fixed<24,8>", "fixed<24,4>", "fixed<16,6>", "fixed<32,12>"),  # products beyond int32: int64 path
        ("fixed<8,8>", "fixed<8,1>", "fixed<8,3>", "fixed<10,4>"),  # few fractional bits
    ],
)
def test_trn_wrap_dense_matches_hls4ml_order(xt, wt, bt, acc):
    xt, wt, bt, acc = map(parse_type, (xt, wt, bt, acc))
    rng = np.random.default_rng(xt.width + acc.width)
    rows, k, n = 23, 9, 7
    edges = np.array([xt.min_code, xt.max_code, 0, 1, -1])
    x = rng.integers(xt.min_code, xt.max_code + 1, (rows, k))
    x[:5] = rng.choice(edges, (5, k))  # the extreme codes: large products and wrapping sums
    w = rng.integers(wt.min_code, wt.max_code + 1, (k, n))
    w[0] = wt.min_code
    b = rng.integers(bt.min_code, bt.max_code + 1, n)
    got = _dense_fixed(x, xt, w, wt, b, bt, acc)
    np.testing.assert_array_equal(got, _reference(x, xt, w, wt, b, bt, acc))
    assert got.min() >= acc.min_code and got.max() <= acc.max_code
