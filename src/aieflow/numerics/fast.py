"""The emulator's hot path: exact integer arithmetic carried in floating point.

Why: int64 numpy has no BLAS and every int<->float conversion costs a pass over memory.  When a
bound proves every intermediate is an integer below 2^24 (float32) or 2^53 (float64), carrying the
codes in floats gives the same integers, and a power-of-two shift is an exact exponent change, so
SRS can be done with floor/rint in float64 as well.  ``tests/test_fast.py`` checks every rounding
and saturation mode against :func:`aieflow.numerics.fixed.srs`.
"""

from __future__ import annotations

import numpy as np

from . import fixed
from .types import FixedType, Rounding, Saturation

F32_EXACT = 1 << 24
F64_EXACT = 1 << 53


def matmul_exact(x: np.ndarray, w: np.ndarray, bound: int) -> np.ndarray | None:
    """``x @ w`` for integer-valued arrays when ``bound`` (>= every |partial sum|) proves it exact.

    Returns float64 integer values, or None when no float path is exact.  Proof as in
    :func:`fixed.exact_matmul`: operands, products and every partial sum are integers below the
    format's 2^(mantissa+1), so each floating operation is exact in any order.
    """
    if bound < F32_EXACT:
        return (x.astype(np.float32, copy=False) @ w.astype(np.float32, copy=False)).astype(np.float64)
    if bound < F64_EXACT:
        return x.astype(np.float64, copy=False) @ w.astype(np.float64, copy=False)
    return None


def srs_float(acc: np.ndarray, shift: int, out: FixedType) -> np.ndarray:
    """SRS of float64 integer values |acc| < 2^53: same codes as ``fixed.srs``, as float64."""
    y = acc * (2.0 ** -shift)  # exact: a power-of-two scaling of an integer below 2^53
    if shift > 0:
        r = out.rounding
        if r is Rounding.CONV_EVEN:
            y = np.rint(y)
        elif r is Rounding.FLOOR:
            y = np.floor(y)
        elif r is Rounding.CEIL:
            y = np.ceil(y)
        elif r is Rounding.SYM_FLOOR:
            y = np.trunc(y)
        elif r is Rounding.SYM_CEIL:
            y = np.sign(y) * np.ceil(np.abs(y))
        else:
            f = np.floor(y)
            frac = y - f  # exact
            up = frac > 0.5
            tie = frac == 0.5
            if r is Rounding.POS_INF:
                up |= tie
            elif r is Rounding.SYM_INF:
                up |= tie & (y > 0)
            elif r is Rounding.SYM_ZERO:
                up |= tie & (y < 0)
            elif r is Rounding.CONV_ODD:
                up |= tie & (np.mod(f, 2) == 0)
            # NEG_INF: ties stay down
            y = f + up
    if out.saturation is Saturation.WRAP:
        return fixed.saturate(y.astype(np.int64), out).astype(np.float64)
    lo = -out.max_code if (out.saturation is Saturation.SYMMETRIC and out.signed) else out.min_code
    return np.clip(y, lo, out.max_code)
