"""Scalar float32 / bf16 rounding written with ``struct`` and integers only (no aieflow, no numpy
float32 arithmetic): the independent reference the bf16 tests build their expected values from."""

from __future__ import annotations

import struct


def f32(v: float) -> float:
    """A double rounded to float32 (nearest, ties to even); what rounds past the largest float32
    is +-inf (``struct`` refuses exactly those)."""
    try:
        return struct.unpack("<f", struct.pack("<f", v))[0]
    except OverflowError:
        return float("inf") if v > 0 else float("-inf")


def bf16(v: float) -> float:
    """A double rounded to float32, then to bf16 by integers: nearest, ties to even on the upper 16
    bits; a NaN stays NaN, infinities stay infinite."""
    (u,) = struct.unpack("<I", struct.pack("<f", f32(v)))
    if (u & 0x7F800000) == 0x7F800000 and (u & 0x7FFFFF):
        return float("nan")
    lower, hi = u & 0xFFFF, u >> 16
    if lower > 0x8000 or (lower == 0x8000 and hi & 1):
        hi += 1
    return struct.unpack("<f", struct.pack("<I", (hi & 0xFFFF) << 16))[0]


def bf16_exact(q, signs: tuple[bool, ...] = ()) -> float:
    """An exact rational ``q`` (``fractions.Fraction``) rounded once to bf16: nearest, ties to even
    on the 8-bit significand (subnormals from 2^-133), +-inf past the largest bf16 (255 x 2^120).
    ``signs``: the operands' sign bits, for an exact zero (IEEE: -0 only when every operand is -0)."""
    from fractions import Fraction

    if q == 0:
        return -0.0 if signs and all(signs) else 0.0
    neg, a = q < 0, abs(Fraction(q))
    e = a.numerator.bit_length() - a.denominator.bit_length()  # 2^e <= a < 2^(e + 1) after the fix-up
    if a < Fraction(2) ** e:
        e -= 1
    quantum = Fraction(2) ** (max(e, -126) - 7)
    n, r = divmod(a, quantum)
    n = int(n)
    if r > quantum / 2 or (r == quantum / 2 and n % 2):
        n += 1
    v = n * quantum
    out = float("inf") if v >= Fraction(2) ** 128 else float(v)
    return -out if neg else out


def fp16(v: float) -> float:
    """A double rounded once to IEEE binary16 by exact rationals: nearest, ties to even on the 11-bit
    significand, subnormals in steps of 2^-24 (kept, not flushed), +-inf from 65520 on (the next
    step past the largest finite 65504 is a tie that rounds to the even 2^16); NaN stays NaN and a
    zero keeps its sign.  What docs/numerics.md assumes of AIE-MLv2's float16 conversion."""
    from fractions import Fraction

    if v != v or v in (float("inf"), float("-inf")) or v == 0:
        return v
    neg, a = v < 0, abs(Fraction(v))
    e = a.numerator.bit_length() - a.denominator.bit_length()
    if a < Fraction(2) ** e:
        e -= 1
    quantum = Fraction(2) ** (max(e, -14) - 10)
    n, r = divmod(a, quantum)
    n = int(n)
    if r > quantum / 2 or (r == quantum / 2 and n % 2):
        n += 1
    out = float("inf") if n * quantum > 65504 else float(n * quantum)
    return -out if neg else out
