"""The emulator's fast paths for the recurrent gate math give the same bits as the definitions:
``fixed.wrap`` by narrowing casts, ``fixed.cast`` without a shift, table indices by a shift when
the divisor is a power of two, and table lookups through a per-code map.  Each is checked on
random codes and edge values against an independent formula (Python integers, Fractions)."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from fixed_reference import ref_round

from aieflow.numerics import fixed
from aieflow.numerics.types import FixedType, Rounding, Saturation, parse_type
from aieflow.ops import activations as act

EDGES = [0, 1, -1, 127, 128, -128, -129, 255, 256, 32767, 32768, -32768, -32769, 65535, 65536,
         2**31 - 1, 2**31, -(2**31), -(2**31) - 1, 2**32 - 1, 2**40 + 12345, -(2**40) - 7, 2**62, -(2**62)]


def _codes(rng, n=4000, bits=48):
    return np.concatenate([np.array(EDGES, dtype=np.int64), rng.integers(-(2**bits), 2**bits, n, dtype=np.int64)])


def _wrap_ref(v: int, bits: int, signed: bool) -> int:
    m = v % (1 << bits)
    return m - (1 << bits) if signed and m >= 1 << (bits - 1) else m


@pytest.mark.parametrize("bits", [8, 16, 32, 12, 18, 31])
@pytest.mark.parametrize("signed", [True, False])
def test_wrap_matches_modular_arithmetic(bits, signed):
    c = _codes(np.random.default_rng(bits))
    got = fixed.wrap(c, bits, signed)
    assert got.dtype == np.int64
    assert got.tolist() == [_wrap_ref(int(v), bits, signed) for v in c]


@pytest.mark.parametrize("t", ["fixed<16,6>", "fixed<16,6,RND_CONV,SAT>", "ufixed<12,4,TRN,SAT>", "fixed<18,8,RND,SAT_SYM>"])
def test_cast_without_a_shift_is_saturate(t):
    to = parse_type(t)
    c = _codes(np.random.default_rng(1), bits=24)
    got = fixed.cast(c, to.frac, to)
    if to.saturation is Saturation.WRAP:
        want = [_wrap_ref(int(v), to.width, to.signed) for v in c]
    else:
        lo = -to.max_code if to.saturation is Saturation.SYMMETRIC and to.signed else to.min_code
        want = [min(max(int(v), lo), to.max_code) for v in c]
    assert got.tolist() == want


def _tables():
    yield act.hls4ml_table("sigmoid")
    yield act.hls4ml_table("tanh")
    yield act.espcn_table("tanh")
    for rounding in (Rounding.FLOOR, Rounding.CONV_EVEN, Rounding.POS_INF):
        yield act.TableSpec("sigmoid", 384, Fraction(3), rounding, parse_type("fixed<10,2,RND,SAT>"), "float64")
        yield act.TableSpec("tanh", 1000, Fraction(125, 16), rounding, parse_type("fixed<16,2>"), "float32-c")


def _index_ref(spec: act.TableSpec, code: int, frac: int) -> int:
    x = Fraction(code) / Fraction(2) ** frac
    if frac < 0 and spec.index_rounding is Rounding.SYM_FLOOR and (2 * spec.limit).denominator == 1:
        q = ref_round(Fraction(code * spec.size) / int(2 * spec.limit), Rounding.SYM_FLOOR) << -frac
    else:
        q = ref_round(x * spec.scale, spec.index_rounding)
    idx = _wrap_ref(_wrap_ref(q, 32, True) + spec.size // 2, 32, True)
    return min(max(idx, 0), spec.size - 1)


@pytest.mark.parametrize("spec", list(_tables()), ids=lambda s: f"{s.function}-{s.size}-{s.index_rounding.name}")
@pytest.mark.parametrize("frac", [-2, 0, 4, 10, 14])
def test_table_lookup_matches_the_definition(spec, frac):
    rng = np.random.default_rng(frac + spec.size)
    out = parse_type("fixed<16,6>")
    small = np.concatenate([np.arange(-(2**15), -(2**15) + 50), np.arange(2**15 - 50, 2**15),
                            rng.integers(-(2**15), 2**15, 9000)]).astype(np.int64)  # the per-code map
    wide = np.concatenate([small[:3000], np.array(EDGES[:20], dtype=np.int64)])  # beyond 16 bits: direct
    entries = spec.codes()
    for codes in (small, wide, small[:100]):
        got = act.apply_fixed(spec, codes, frac, out)
        idx = [_index_ref(spec, int(c), frac) for c in codes]
        assert spec.index_of_codes(codes, frac).tolist() == idx
        want = fixed.cast(entries[idx], spec.entry.frac, out)  # the entry, then ap_fixed's assignment
        assert got.tolist() == want.tolist()
    # the map path and the direct path agree element for element on the same inputs
    np.testing.assert_array_equal(act.apply_fixed(spec, small, frac, out), act._apply_table(spec, small, frac, out))


def test_lookup_map_accepts_narrow_integer_dtypes():
    spec = act.hls4ml_table("sigmoid")
    out = FixedType(16, 10)
    c16 = np.random.default_rng(0).integers(-(2**15), 2**15, 10000).astype(np.int16)
    np.testing.assert_array_equal(act.apply_fixed(spec, c16, 10, out), act._apply_table(spec, c16.astype(np.int64), 10, out))


def _lane_dot_reference(x, w, b, lanes):
    """The row kernel's fp32 order one scalar at a time (np.float32 scalars round every operation):
    k padded with zeros to a multiple of ``lanes``, lane l sums k = l, l + L, ... from +0, a
    halving tree over the lanes, then the bias; ``lanes`` 0: in k order from the bias."""
    k, n = w.shape
    out = np.empty(n, dtype=np.float32)
    for j in range(n):
        if not lanes:
            acc = np.float32(b[j])
            for i in range(k):
                acc = np.float32(acc + np.float32(x[i] * w[i, j]))
            out[j] = acc
            continue
        kp = -(-k // lanes) * lanes
        xs = [x[i] if i < k else np.float32(0) for i in range(kp)]
        ws = [w[i, j] if i < k else np.float32(0) for i in range(kp)]
        lane = [np.float32(0)] * lanes
        for i in range(kp):
            lane[i % lanes] = np.float32(lane[i % lanes] + np.float32(xs[i] * ws[i]))
        width = lanes
        while width > 1:
            width //= 2
            lane = [np.float32(lane[i] + lane[i + width]) for i in range(width)]
        out[j] = np.float32(lane[0] + b[j])
    return out


@pytest.mark.parametrize("lanes", [0, 8, 16])
@pytest.mark.parametrize("k", [1, 5, 16, 21])
def test_fp32_column_dot_follows_the_lane_order(lanes, k):
    from aieflow.ops.recurrent import _dot32

    rng = np.random.default_rng(k + lanes)
    n, batch = 5, 7
    specials = np.array([0.0, -0.0, np.inf, -np.inf, 1e-40, -1e-40, 3e38, -3e38, 1.0, -1.0], dtype=np.float32)
    x = (rng.standard_normal((batch, k)) * 10.0 ** rng.integers(-3, 4, (batch, k))).astype(np.float32)
    w = (rng.standard_normal((k, n)) * 10.0 ** rng.integers(-3, 4, (k, n))).astype(np.float32)
    b = rng.standard_normal(n).astype(np.float32)
    x[0] = -0.0  # every product -0 or +0: the lanes and the bias decide the zero's sign
    b[0] = -0.0
    x[1] = rng.choice(specials, k)
    w[:, 1] = rng.choice(specials, k)
    with np.errstate(all="ignore"):
        got = _dot32(x.T.copy(), w, b, lanes).T
        expected = np.stack([_lane_dot_reference(row, w, b, lanes) for row in x])
    np.testing.assert_array_equal(got.view(np.uint32), expected.view(np.uint32))  # bits: -0.0 and NaN too
