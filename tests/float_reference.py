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
