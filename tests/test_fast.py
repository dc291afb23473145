"""The float fast path gives exactly the integer path's codes, in every mode."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from aieflow.numerics import fast, fixed
from aieflow.numerics.types import FixedType, Rounding, Saturation


@settings(max_examples=300, deadline=None)
@given(
    values=st.lists(st.integers(-(2**52), 2**52 - 1), min_size=1, max_size=40),
    shift=st.integers(-4, 40),
    rounding=st.sampled_from(list(Rounding)),
    saturation=st.sampled_from(list(Saturation)),
    width=st.sampled_from([8, 16, 32]),
    signed=st.booleans(),
)
def test_srs_float_equals_integer_srs(values, shift, rounding, saturation, width, signed):
    out = FixedType(width, 0, signed, rounding, saturation)
    acc = np.array(values, dtype=np.int64)
    if shift < 0:
        acc = acc >> 8  # keep |acc << -shift| below 2^53
    # ties and zero crossings around the rounding point
    if shift > 0:
        ties = np.array([1, -1, 3, -3, 5, -5], dtype=np.int64) << (shift - 1)
        acc = np.concatenate([acc, ties, ties + 1, ties - 1])
    want = fixed.srs(acc, shift, out)
    got = fast.srs_float(acc.astype(np.float64), shift, out)
    np.testing.assert_array_equal(got.astype(np.int64), want)


def test_matmul_exact_paths_agree_with_integer_matmul():
    rng = np.random.default_rng(0)
    for lo, k in ((128, 512), (32768, 64), (32768, 70000)):
        x = rng.integers(-lo, lo, size=(9, k))
        w = rng.integers(-lo, lo, size=(k, 5))
        bound = k * lo * lo
        got = fast.matmul_exact(x, w, bound)
        if bound >= fast.F64_EXACT:
            assert got is None
            continue
        np.testing.assert_array_equal(got.astype(np.int64), fixed.exact_matmul(x, w))


@settings(max_examples=300, deadline=None)
@given(
    values=st.lists(st.floats(-1e9, 1e9, allow_nan=False), min_size=1, max_size=30),
    frac=st.integers(-6, 20),
    rounding=st.sampled_from(list(Rounding)),
    saturation=st.sampled_from(list(Saturation)),
    width=st.sampled_from([8, 16]),
)
def test_quantize_float_equals_integer_quantize(values, frac, rounding, saturation, width):
    t = FixedType(width, frac, True, rounding, saturation)
    step = 2.0**-frac
    x = np.array(values + [0.5 * step, -0.5 * step, 1.5 * step, -2.5 * step, -0.0, 127.5 * step], dtype=np.float64)
    got = fast.quantize_float(x, t)
    if got is None:  # documented fallback: only for values scaled into the subnormal range
        assert ((np.abs(x * 2.0**frac) < 2.0**-1000) & (x != 0)).any()
        return
    np.testing.assert_array_equal(got.astype(np.int64), fixed.quantize(x, t))


@settings(max_examples=200, deadline=None)
@given(
    values=st.lists(st.integers(-(2**23), 2**23 - 1), min_size=1, max_size=30),
    shift=st.integers(0, 30),
    rounding=st.sampled_from(list(Rounding)),
    saturation=st.sampled_from(list(Saturation)),
)
def test_srs_in_float32_equals_integer_srs(values, shift, rounding, saturation):
    out = FixedType(8, 0, True, rounding, saturation)
    acc = np.array(values, dtype=np.int64)
    got = fast.srs_float(acc.astype(np.float32), shift, out)
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got.astype(np.int64), fixed.srs(acc, shift, out))
