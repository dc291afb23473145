"""Property tests of aieflow.numerics.fixed against an independent exact reference.

The reference works on Python ints and fractions.Fraction and implements every rounding mode from
its definition (nearest candidate, then the tie rule), not from the floor/remainder formulas the
implementation uses.
"""

from __future__ import annotations

import math
import struct
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from aieflow.errors import ConfigError
from aieflow.numerics import fixed
from aieflow.numerics.fixed import (
    dequantize,
    exact_matmul,
    float32_dot_sequential,
    max_abs_accumulation,
    quantize,
    round_shift,
    saturate,
    srs,
    to_bf16,
    wrap,
)
from aieflow.numerics.types import FixedType, Rounding, Saturation

INT64_MIN = -(1 << 63)
INT64_MAX = (1 << 63) - 1
SETTINGS = settings(max_examples=200, deadline=None)

roundings = st.sampled_from(list(Rounding))
saturations = st.sampled_from(list(Saturation))
int64s = st.integers(INT64_MIN, INT64_MAX)
code_lists = st.lists(st.one_of(int64s, st.integers(-1000, 1000)), min_size=1, max_size=16)


# ----------------------------------------------------------------------------- reference


def ref_round(v: Fraction, mode: Rounding) -> int:
    """Round a rational to an integer by the definition of each mode."""
    lo, hi = math.floor(v), math.ceil(v)
    if lo == hi:
        return lo
    toward_zero, away = (lo, hi) if abs(lo) < abs(hi) else (hi, lo)
    directed = {
        Rounding.FLOOR: lo,
        Rounding.CEIL: hi,
        Rounding.SYM_FLOOR: toward_zero,
        Rounding.SYM_CEIL: away,
    }
    if mode in directed:
        return directed[mode]
    if v - lo != hi - v:
        return lo if v - lo < hi - v else hi
    even, odd = (lo, hi) if lo % 2 == 0 else (hi, lo)
    return {
        Rounding.POS_INF: hi,
        Rounding.NEG_INF: lo,
        Rounding.SYM_INF: away,
        Rounding.SYM_ZERO: toward_zero,
        Rounding.CONV_EVEN: even,
        Rounding.CONV_ODD: odd,
    }[mode]


def ref_saturate(v: int, t: FixedType) -> int:
    lo, hi = t.min_code, t.max_code
    if t.saturation is Saturation.WRAP:
        return (v - lo) % (1 << t.width) + lo
    if t.saturation is Saturation.SYMMETRIC and t.signed:
        lo = -hi
    return min(max(v, lo), hi)


def ref_wrap(v: int, bits: int, signed: bool) -> int:
    lo = -(1 << (bits - 1)) if signed else 0
    return (v - lo) % (1 << bits) + lo


def as_ints(a: np.ndarray) -> list[int]:
    return [int(v) for v in np.asarray(a).ravel()]


# ----------------------------------------------------------------------------- ref self-checks


def test_reference_rounding_table():
    # Hand-written table (value -> result per mode) so the reference itself is pinned down.
    table = {
        Fraction(5, 2): [2, 3, 2, 3, 3, 2, 3, 2, 2, 3],
        Fraction(-5, 2): [-3, -2, -2, -3, -2, -3, -3, -2, -2, -3],
        Fraction(-1, 2): [-1, 0, 0, -1, 0, -1, -1, 0, 0, -1],
        Fraction(7, 4): [1, 2, 1, 2, 2, 2, 2, 2, 2, 2],
        Fraction(-7, 4): [-2, -1, -1, -2, -2, -2, -2, -2, -2, -2],
        Fraction(-1, 4): [-1, 0, 0, -1, 0, 0, 0, 0, 0, 0],
    }
    modes = [
        Rounding.FLOOR, Rounding.CEIL, Rounding.SYM_FLOOR, Rounding.SYM_CEIL, Rounding.POS_INF,
        Rounding.NEG_INF, Rounding.SYM_INF, Rounding.SYM_ZERO, Rounding.CONV_EVEN, Rounding.CONV_ODD,
    ]  # fmt: skip
    for v, expected in table.items():
        assert [ref_round(v, m) for m in modes] == expected, v
        codes = np.array([v.numerator * (4 // v.denominator)])
        assert [int(round_shift(codes, 2, m)[0]) for m in modes] == expected, v


# ----------------------------------------------------------------------------- round_shift


@SETTINGS
@given(code_lists, st.integers(0, 70), roundings)
def test_round_shift_right_matches_reference(codes, shift, mode):
    out = round_shift(np.array(codes, dtype=np.int64), shift, mode)
    assert out.dtype == np.int64
    assert as_ints(out) == [ref_round(Fraction(c, 1 << shift), mode) for c in codes]


@st.composite
def ties(draw):
    """(code, shift) with code / 2**shift == k + 1/2 exactly, any sign, code within int64."""
    shift = draw(st.integers(1, 62))
    lim = 1 << (63 - shift)  # |2k + 1| < 2**(64 - shift)
    k = draw(st.one_of(st.integers(-lim, lim - 1), st.integers(max(-3, -lim), min(2, lim - 1))))
    return (2 * k + 1) << (shift - 1), shift


@SETTINGS
@given(st.lists(ties(), min_size=1, max_size=8), roundings)
def test_round_shift_exact_ties(cases, mode):
    for code, shift in cases:
        assert INT64_MIN <= code <= INT64_MAX
        assert (Fraction(code, 1 << shift) - Fraction(1, 2)).denominator == 1
        out = round_shift(np.array([code]), shift, mode)
        assert as_ints(out) == [ref_round(Fraction(code, 1 << shift), mode)], (code, shift)


@pytest.mark.parametrize("mode", list(Rounding))
def test_round_shift_zero_crossings_and_extremes(mode):
    halves = np.array([-7, -5, -3, -1, 1, 3, 5, 7, -6, -4, -2, 0, 2, 4, 6])  # x/2
    assert as_ints(round_shift(halves, 1, mode)) == [
        ref_round(Fraction(int(c), 2), mode) for c in halves
    ]
    extremes = [INT64_MIN, INT64_MIN + 1, -1, 0, 1, INT64_MAX - 1, INT64_MAX, 1 << 62, -(1 << 62)]
    for shift in (1, 2, 31, 32, 48, 61, 62, 63, 64, 65, 100):
        out = round_shift(np.array(extremes, dtype=np.int64), shift, mode)
        assert as_ints(out) == [ref_round(Fraction(c, 1 << shift), mode) for c in extremes], shift


@SETTINGS
@given(code_lists, st.integers(1, 62), roundings)
def test_round_shift_left_is_exact(codes, left, mode):
    limit = INT64_MAX >> left
    codes = [max(min(c, limit), -limit) for c in codes]
    out = round_shift(np.array(codes, dtype=np.int64), -left, mode)
    assert as_ints(out) == [c << left for c in codes]


def test_round_shift_zero_shift_and_overflow():
    codes = np.array([INT64_MIN, -3, 0, 5, INT64_MAX])
    out = round_shift(codes, 0, Rounding.FLOOR)
    assert as_ints(out) == as_ints(codes) and out is not codes
    with pytest.raises(OverflowError):
        round_shift(np.array([1 << 62]), -1, Rounding.FLOOR)
    with pytest.raises(OverflowError):
        round_shift(np.array([-(1 << 62) - 1]), -1, Rounding.FLOOR)
    with pytest.raises(OverflowError):
        round_shift(np.array([1]), -63, Rounding.FLOOR)
    assert as_ints(round_shift(np.array([-(1 << 62)]), -1, Rounding.FLOOR)) == [INT64_MIN]
    assert as_ints(round_shift(np.array([0, 0]), -70, Rounding.FLOOR)) == [0, 0]


# ----------------------------------------------------------------------------- saturate / wrap


@st.composite
def fixed_types(draw, max_width=64):
    return FixedType(
        draw(st.integers(1, max_width)),
        draw(st.integers(-20, 80)),
        draw(st.booleans()),
        draw(roundings),
        draw(saturations),
    )


@SETTINGS
@given(code_lists, fixed_types())
def test_saturate_matches_reference(codes, t):
    out = saturate(np.array(codes, dtype=np.int64), t)
    expected = [ref_saturate(c, t) for c in codes]
    if t.width == 64 and not t.signed and t.saturation is Saturation.WRAP:
        # documented: unsigned 64-bit codes are held as their int64 bit pattern
        assert as_ints(out) == codes
        assert [v % (1 << 64) for v in as_ints(out)] == expected
    else:
        assert as_ints(out) == expected
    assert out.dtype == np.int64


@pytest.mark.parametrize("signed", [True, False])
@pytest.mark.parametrize("sat", list(Saturation))
def test_saturate_edges_every_width(signed, sat):
    for width in range(1, 65):
        t = FixedType(width, 0, signed, Rounding.FLOOR, sat)
        lo, hi = t.min_code, t.max_code
        probes = {0, 1, -1, INT64_MIN, INT64_MAX}
        for v in (lo, hi):
            probes |= {v - 1, v, v + 1}
        probes = sorted(p for p in probes if INT64_MIN <= p <= INT64_MAX)
        out = as_ints(saturate(np.array(probes, dtype=np.int64), t))
        if width == 64 and not signed and sat is Saturation.WRAP:
            assert [v % (1 << 64) for v in out] == [ref_saturate(p, t) for p in probes]
        else:
            assert out == [ref_saturate(p, t) for p in probes], (width, signed, sat)


def test_saturate_symmetric_examples():
    t = FixedType(8, 0, True, Rounding.FLOOR, Saturation.SYMMETRIC)
    out = saturate(np.array([-200, -128, -127, 127, 128]), t)
    assert as_ints(out) == [-127, -127, -127, 127, 127]
    u = FixedType(8, 0, False, Rounding.FLOOR, Saturation.SYMMETRIC)
    assert as_ints(saturate(np.array([-5, 300]), u)) == [0, 255]


@SETTINGS
@given(code_lists, st.sampled_from([1, 7, 8, 16, 31, 32, 33, 47, 48, 49, 63]), st.booleans())
def test_wrap_matches_reference(codes, bits, signed):
    out = wrap(np.array(codes, dtype=np.int64), bits, signed)
    assert as_ints(out) == [ref_wrap(c, bits, signed) for c in codes]


def test_wrap_accumulator_widths():
    acc = np.array([(1 << 31), -(1 << 31) - 1, (1 << 47) + 5, -(1 << 47) - 5, INT64_MAX])
    assert as_ints(wrap(acc, 32)) == [ref_wrap(int(v), 32, True) for v in acc]
    assert as_ints(wrap(acc, 48)) == [ref_wrap(int(v), 48, True) for v in acc]
    assert as_ints(wrap(acc, 32))[:2] == [-(1 << 31), (1 << 31) - 1]
    for bits in (64, 80):
        assert as_ints(wrap(acc, bits)) == as_ints(acc)
    with pytest.raises(ValueError):
        wrap(acc, 0)


@SETTINGS
@given(code_lists, st.integers(-8, 66), fixed_types(max_width=63))
def test_srs_is_round_then_saturate(codes, shift, t):
    if shift < 0:
        limit = INT64_MAX >> -shift
        codes = [max(min(c, limit), -limit) for c in codes]
    out = srs(np.array(codes, dtype=np.int64), shift, t)
    expected = [
        ref_saturate(ref_round(Fraction(c) / Fraction(2) ** shift, t.rounding), t) for c in codes
    ]
    assert as_ints(out) == expected


# ----------------------------------------------------------------------------- quantize


def ref_quantize(x: float, t: FixedType) -> int:
    return ref_saturate(ref_round(Fraction(x) * Fraction(2) ** t.frac, t.rounding), t)


float64s = st.floats(allow_nan=False, allow_infinity=False)


@SETTINGS
@given(st.lists(float64s, min_size=1, max_size=8), fixed_types(max_width=64))
def test_quantize_matches_reference(xs, t):
    assume(t.signed or t.width < 64)
    out = quantize(np.array(xs), t)
    assert out.dtype == np.int64
    assert as_ints(out) == [ref_quantize(x, t) for x in xs]


@SETTINGS
@given(
    st.lists(st.integers(-(1 << 50), 1 << 50), min_size=1, max_size=8),
    st.integers(-30, 60),
    fixed_types(max_width=64),
)
def test_quantize_exact_ties(ks, frac, t):
    assume(t.signed or t.width < 64)
    t = FixedType(t.width, frac, t.signed, t.rounding, t.saturation)
    xs = [float((k + Fraction(1, 2)) / Fraction(2) ** frac) for k in ks]
    assert all(
        Fraction(x) * Fraction(2) ** frac == k + Fraction(1, 2) for x, k in zip(xs, ks, strict=True)
    )
    assert as_ints(quantize(np.array(xs), t)) == [ref_quantize(x, t) for x in xs]


@pytest.mark.parametrize("mode", list(Rounding))
def test_quantize_special_values(mode):
    t = FixedType(8, 0, True, mode, Saturation.SATURATE)
    xs = [-0.0, 0.0, -0.5, -1.5, -2.5, 0.5, 1.5, 2.5, 1e300, -1e300]
    # just below / above a half: floor(y + 0.5) would round 0.5 - 2**-54 up
    xs += [0.5 - 2.0**-54, -0.5 + 2.0**-54, 2.5 - 2.0**-51, -2.5 + 2.0**-51, 127.5, -128.5, 126.5]
    assert as_ints(quantize(np.array(xs), t)) == [ref_quantize(x, t) for x in xs]
    assert int(quantize(np.float64(2.5), t)) == ref_quantize(2.5, t)  # a 0-d input
    assert as_ints(quantize(np.array([np.inf, -np.inf]), t)) == [127, -128]
    # subnormals: scaling underflows, the sign must still decide CEIL/FLOOR
    tiny = np.array([5e-324, -5e-324, 2.2e-308, -2.2e-308])
    for frac in (-1, -60, 0, 10):
        tt = FixedType(8, frac, True, mode, Saturation.SATURATE)
        assert as_ints(quantize(tiny, tt)) == [ref_quantize(float(x), tt) for x in tiny], frac
    # huge scaled values in a 64-bit type
    t64 = FixedType(64, 0, True, mode, Saturation.SATURATE)
    xs = [2.0**63, -(2.0**63), 2.0**63 - 1024, 1e20, -1e20]
    assert as_ints(quantize(np.array(xs), t64)) == [ref_quantize(x, t64) for x in xs]
    assert as_ints(quantize(np.array(xs[:2]), t64)) == [INT64_MAX, INT64_MIN]


def test_quantize_wrap_huge_and_errors():
    for width in (8, 32, 63, 64):
        t = FixedType(width, 0, True, Rounding.FLOOR, Saturation.WRAP)
        xs = [1e300, -1e300, 2.0**63, -(2.0**63), 2.0**64 + 4096, 3.0 * 2.0**70]
        xs += [2.0**64 - 2048, -(2.0**64 - 2048), 1.5 * 2.0**63, -1.5 * 2.0**63, 1e19 + 2048.0]
        assert as_ints(quantize(np.array(xs), t)) == [ref_quantize(x, t) for x in xs], width
    t = FixedType(8, 0, True, Rounding.FLOOR, Saturation.WRAP)
    with pytest.raises(ConfigError, match="inf"):
        quantize(np.array([np.inf]), t)
    with pytest.raises(ConfigError, match="NaN"):
        quantize(np.array([0.0, np.nan]), FixedType(8, 0))


def test_quantize_unsigned_64_limits():
    t = FixedType(64, 0, False, Rounding.FLOOR, Saturation.SATURATE)
    assert as_ints(quantize(np.array([1e30, -5.0, 12.75]), t)) == [INT64_MAX, 0, 12]


@SETTINGS
@given(st.lists(st.integers(-(1 << 52), 1 << 52), min_size=1, max_size=8), st.integers(-40, 60))
def test_dequantize_exact(codes, frac):
    t = FixedType(64, frac)
    out = dequantize(np.array(codes, dtype=np.int64), t)
    assert out.dtype == np.float64
    assert [Fraction(float(v)) for v in out] == [Fraction(c) / Fraction(2) ** frac for c in codes]
    assert as_ints(quantize(out, t)) == codes


# ----------------------------------------------------------------------------- exact_matmul


def ref_matmul(a: np.ndarray, b: np.ndarray) -> list[int]:
    a2 = a.reshape(-1, a.shape[-1])
    return [
        sum(int(a2[i, k]) * int(b[k, j]) for k in range(b.shape[0]))
        for i in range(a2.shape[0])
        for j in range(b.shape[1])
    ]


@st.composite
def matmul_case(draw, amax, bmax):
    k, m, n = draw(st.integers(1, 12)), draw(st.integers(1, 4)), draw(st.integers(1, 4))
    a = draw(st.lists(st.integers(-amax, amax), min_size=m * k, max_size=m * k))
    b = draw(st.lists(st.integers(-bmax, bmax), min_size=k * n, max_size=k * n))
    return np.array(a, dtype=np.int64).reshape(m, k), np.array(b, dtype=np.int64).reshape(k, n)


@SETTINGS
@given(matmul_case(1 << 24, 1 << 24))
def test_exact_matmul_fast_path(case):
    a, b = case
    assert fixed._matmul_path(a.shape[1], 1 << 24, 1 << 24) == "float64"
    out = exact_matmul(a, b)
    assert out.dtype == np.int64 and out.shape == (a.shape[0], b.shape[1])
    assert as_ints(out) == ref_matmul(a, b)


@SETTINGS
@given(matmul_case(1 << 31, 1 << 27))
def test_exact_matmul_int64_path(case):
    a, b = case
    a[0, 0], b[0, 0] = (1 << 31) - 1, -(1 << 27)  # force the bound past 2**53
    assert fixed._matmul_path(a.shape[1], fixed._max_abs(a), fixed._max_abs(b)) == "int64"
    assert as_ints(exact_matmul(a, b)) == ref_matmul(a, b)


def test_exact_matmul_boundaries_and_errors(monkeypatch):
    # just under 2**53: the float path must still be exact
    k = 32
    a = np.full((3, k), (1 << 24) - 1, dtype=np.int64)
    a[1] = -a[1]
    b = np.full((k, 2), (1 << 24) - 1, dtype=np.int64)
    b[::2, 1] -= 1
    assert fixed._matmul_path(k, (1 << 24) - 1, (1 << 24) - 1) == "float64"
    assert as_ints(exact_matmul(a, b)) == ref_matmul(a, b)
    # a product float64 cannot hold: must take the int path and stay exact
    a = np.array([[(1 << 40) + 1]])
    b = np.array([[(1 << 20) + 1]])
    assert as_ints(exact_matmul(a, b)) == [((1 << 40) + 1) * ((1 << 20) + 1)]
    assert fixed._matmul_path(1, 1 << 53, 1) == "int64"
    assert fixed._matmul_path(2, 1 << 62, 1) == "overflow"
    with pytest.raises(ValueError, match="int64"):
        exact_matmul(np.array([[1 << 40, 1]]), np.array([[1 << 30], [1]]))
    with pytest.raises(ValueError, match="shapes"):
        exact_matmul(np.ones((2, 3), dtype=np.int64), np.ones((4, 2), dtype=np.int64))
    # batch dims and row chunking (one row per chunk)
    rng = np.random.default_rng(0)
    a = rng.integers(-128, 128, size=(2, 3, 5))
    b = rng.integers(-128, 128, size=(5, 4))
    monkeypatch.setattr(fixed, "_CHUNK_BYTES", 1)
    out = exact_matmul(a, b)
    assert out.shape == (2, 3, 4)
    assert as_ints(out) == ref_matmul(a, b)
    a = rng.integers(-(1 << 30), 1 << 30, size=(7, 6))
    b = rng.integers(-(1 << 30), 1 << 30, size=(6, 3))
    assert as_ints(exact_matmul(a, b)) == ref_matmul(a, b)
    assert exact_matmul(
        np.zeros((0, 3), dtype=np.int64), np.ones((3, 2), dtype=np.int64)
    ).shape == (0, 2)


# ----------------------------------------------------------------------------- bfloat16


def f32_from_bits(bits: int) -> float:
    return struct.unpack("<f", struct.pack("<I", bits))[0]


def bits_from_f32(x: float) -> int:
    return struct.unpack("<I", struct.pack("<f", x))[0]


def ref_bf16_bits(bits: int) -> int | None:
    """Expected float32 bit pattern of the bf16 rounding; None for NaN."""
    f = f32_from_bits(bits)
    if math.isnan(f):
        return None
    if math.isinf(f) or f == 0:
        return bits
    sign = math.copysign(1.0, f)
    _, e = math.frexp(abs(f))  # |f| = m * 2**e, m in [0.5, 1): leading bit 2**(e-1)
    ulp = Fraction(2) ** (max(e - 1, -126) - 7)  # bf16: 8 significant bits, min exponent -126
    r = round(Fraction(abs(f)) / ulp) * ulp  # round() on Fraction is half-to-even
    if r >= Fraction(2) ** 128:
        return bits_from_f32(sign * math.inf)
    return bits_from_f32(sign * float(r))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, (1 << 32) - 1), min_size=1, max_size=16))
def test_to_bf16_matches_reference(patterns):
    x = np.array(patterns, dtype=np.uint32).view(np.float32)
    out = to_bf16(x)
    assert out.dtype == np.float32 and out.shape == x.shape
    for p, got in zip(patterns, out.view(np.uint32), strict=True):
        exp = ref_bf16_bits(p)
        if exp is None:
            assert np.isnan(got.view(np.float32)) and (int(got) >> 31) == (p >> 31)
        else:
            assert int(got) == exp, hex(p)


def test_to_bf16_explicit_cases():
    cases = {
        0x3F808000: 0x3F800000,  # 1 + 2**-8: tie, down to even
        0x3F818000: 0x3F820000,  # tie, up to even
        0x3F808001: 0x3F810000,  # just above the tie
        0xBF818000: 0xBF820000,  # negative tie
        0x7F7FFFFF: 0x7F800000,  # max float32 overflows to inf
        0x7F800000: 0x7F800000,
        0xFF800000: 0xFF800000,
        0x80000000: 0x80000000,  # -0.0
        0x00008000: 0x00000000,  # subnormal tie to even (zero)
        0x00018000: 0x00020000,
    }
    x = np.array(list(cases), dtype=np.uint32).view(np.float32)
    assert [hex(int(v)) for v in to_bf16(x).view(np.uint32)] == [hex(v) for v in cases.values()]
    nans = np.array([0x7F800001, 0xFF800001, 0x7FC00000], dtype=np.uint32).view(np.float32)
    assert np.isnan(to_bf16(nans)).all()  # truncating 0x7F800001 would give inf
    assert float(to_bf16(np.float32(3.0))) == 3.0  # 0-d input


# ----------------------------------------------------------------------------- float32 dot


def ref_dot(x, w, init):
    bsz, k = x.shape
    n = w.shape[1]
    out = np.zeros((bsz, n), dtype=np.float32)
    for b in range(bsz):
        for j in range(n):
            if init is None:
                acc = np.float32(0.0)
            else:
                acc = np.float32(init[j] if init.ndim == 1 else init[b, j])
            for i in range(k):
                acc = np.float32(acc + np.float32(np.float32(x[b, i]) * np.float32(w[i, j])))
            out[b, j] = acc
    return out


f32s = st.floats(width=32, allow_nan=False, allow_infinity=False)


@settings(max_examples=150, deadline=None)
@given(
    st.integers(1, 4), st.integers(0, 8), st.integers(1, 4), st.sampled_from(["none", "n", "bn"]),
    st.data(),
)  # fmt: skip
def test_float32_dot_sequential_matches_loop(bsz, k, n, init_kind, data):
    def arr(shape):
        size = int(np.prod(shape))
        return np.array(
            data.draw(st.lists(f32s, min_size=size, max_size=size)), dtype=np.float32
        ).reshape(shape)

    x, w = arr((bsz, k)), arr((k, n))
    init = {"none": None, "n": arr((n,)), "bn": arr((bsz, n))}[init_kind]
    with np.errstate(all="ignore"):
        out = float32_dot_sequential(x, w, init)
        expected = ref_dot(x, w, init)
    assert out.dtype == np.float32 and out.shape == (bsz, n)
    np.testing.assert_array_equal(out, expected)


def test_float32_dot_order_and_no_fma():
    # order: 1 + 1e8 loses the 1 in float32, so the increasing-k order gives 0, reversed gives 1
    x = np.array([[1.0, 1e8, -1e8]], dtype=np.float32)
    w = np.ones((3, 1), dtype=np.float32)
    assert float(float32_dot_sequential(x, w, None)[0, 0]) == 0.0
    assert float(float32_dot_sequential(x[:, ::-1], w, None)[0, 0]) == 1.0
    # no FMA: (1 + 2**-12)**2 = 1 + 2**-11 + 2**-24 rounds to 1 + 2**-11 before the add
    a = np.float32(1 + 2.0**-12)
    init = np.array([-(1 + 2.0**-11)], dtype=np.float32)
    out = float32_dot_sequential(np.array([[a]]), np.array([[a]]), init)
    assert float(out[0, 0]) == 0.0
    with pytest.raises(ValueError, match="shapes"):
        float32_dot_sequential(np.ones((2, 3), np.float32), np.ones((2, 3), np.float32), None)


# ----------------------------------------------------------------------------- accumulation bound


@pytest.mark.parametrize("wa", [1, 2, 3, 4])
@pytest.mark.parametrize("wb", [1, 2, 3, 4])
@pytest.mark.parametrize("sa", [True, False])
@pytest.mark.parametrize("sb", [True, False])
def test_max_abs_accumulation_brute_force(wa, wb, sa, sb):
    a, b = FixedType(wa, 0, sa), FixedType(wb, 0, sb)
    worst = max(
        abs(p * q)
        for p in range(a.min_code, a.max_code + 1)
        for q in range(b.min_code, b.max_code + 1)
    )
    for k in (0, 1, 7):
        assert max_abs_accumulation(k, a, b) == k * worst


def test_max_abs_accumulation_is_attained_and_guards_int64():
    a, b = FixedType(16, 0), FixedType(16, 0)
    k = 64
    bound = max_abs_accumulation(k, a, b)
    assert bound == k * (1 << 30)
    codes_a = np.full((1, k), a.min_code, dtype=np.int64)
    codes_b = np.full((k, 1), b.min_code, dtype=np.int64)
    assert int(exact_matmul(codes_a, codes_b)[0, 0]) == bound
    assert max_abs_accumulation(1 << 20, FixedType(32, 0), FixedType(32, 0)) >= 1 << 63
    with pytest.raises(ValueError):
        max_abs_accumulation(-1, a, b)
