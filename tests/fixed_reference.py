"""ap_fixed assignment in exact rationals: the independent reference several tests compare with."""

from __future__ import annotations

import math
from fractions import Fraction

from aieflow.numerics.types import FixedType, Rounding, Saturation


def ref_cast_value(v: Fraction, t: FixedType) -> int:
    """The code of ``(t)v`` for a signed type ``t``: round to t's grid, then overflow."""
    v = v * Fraction(2) ** t.frac
    fl = math.floor(v)
    rem = v - fl
    half = Fraction(1, 2)
    up = {
        Rounding.FLOOR: False,
        Rounding.SYM_FLOOR: rem != 0 and v < 0,
        Rounding.POS_INF: rem >= half,
        Rounding.NEG_INF: rem > half,
        Rounding.SYM_INF: rem > half or (rem == half and v > 0),
        Rounding.SYM_ZERO: rem > half or (rem == half and v < 0),
        Rounding.CONV_EVEN: rem > half or (rem == half and fl % 2 == 1),
        Rounding.CONV_ODD: rem > half or (rem == half and fl % 2 == 0),
        Rounding.CEIL: rem != 0,
        Rounding.SYM_CEIL: rem != 0 and v > 0,
    }[t.rounding]
    q = fl + up
    if t.saturation is Saturation.WRAP:
        return (q + 2 ** (t.width - 1)) % 2**t.width - 2 ** (t.width - 1)
    lo = -t.max_code if t.saturation is Saturation.SYMMETRIC else t.min_code
    return min(max(q, lo), t.max_code)


def ref_cast(code: int, frac: int, t: FixedType) -> int:
    """The code of ``(t)(code * 2**-frac)``."""
    return ref_cast_value(Fraction(code) / Fraction(2) ** frac, t)
