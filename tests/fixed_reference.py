"""Rounding, overflow and ap_fixed assignment in exact rationals: the independent reference several
tests compare with (the definitions of numerics/types.py, written out case by case)."""

from __future__ import annotations

import math
from fractions import Fraction

from aieflow.numerics.types import FixedType, Rounding, Saturation

_HALF = Fraction(1, 2)


def ref_round(v: Fraction, mode: Rounding) -> int:
    """``v`` rounded to an integer by ``mode``."""
    fl = math.floor(v)
    rem = v - fl
    if rem == 0:
        return fl
    up = {
        Rounding.FLOOR: False,
        Rounding.CEIL: True,
        Rounding.SYM_FLOOR: v < 0,
        Rounding.SYM_CEIL: v > 0,
    }.get(mode)
    if up is None:
        if rem != _HALF:
            up = rem > _HALF
        else:
            up = {Rounding.POS_INF: True, Rounding.NEG_INF: False, Rounding.SYM_INF: v > 0,
                  Rounding.SYM_ZERO: v < 0, Rounding.CONV_EVEN: fl % 2 == 1, Rounding.CONV_ODD: fl % 2 == 0}[mode]
    return fl + int(up)


def ref_overflow(q: int, t: FixedType) -> int:
    """An integer code brought into ``t``'s range by its overflow mode (wrap or clip)."""
    lo, hi = t.min_code, t.max_code
    if t.saturation is Saturation.WRAP:
        return (q - lo) % (1 << t.width) + lo
    if t.saturation is Saturation.SYMMETRIC and t.signed:
        lo = -hi
    return min(max(q, lo), hi)


def ref_cast_value(v: Fraction, t: FixedType) -> int:
    """The code of ``(t)v``: round to t's grid, then overflow."""
    return ref_overflow(ref_round(v * Fraction(2) ** t.frac, t.rounding), t)


def ref_cast(code: int, frac: int, t: FixedType) -> int:
    """The code of ``(t)(code * 2**-frac)``."""
    return ref_cast_value(Fraction(code) / Fraction(2) ** frac, t)
