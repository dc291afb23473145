"""The emulator's hot path: exact integer arithmetic carried in floating point.

Why: int64 numpy has no BLAS and every int<->float conversion costs a pass over memory.  When a
bound proves every intermediate is an integer below 2^24 (float32) or 2^53 (float64), carrying the
codes in floats gives the same integers; a power-of-two scaling only changes the exponent, and
``y - floor(y)`` is exact for such values, so rounding and saturation can be done in floats too.
``tests/test_fast.py`` checks every rounding and saturation mode against the integer functions in
:mod:`aieflow.numerics.fixed`.
"""

from __future__ import annotations

import numpy as np

from . import fixed
from .types import FixedType, Rounding, Saturation

F32_EXACT = 1 << 24
F64_EXACT = 1 << 53


def matmul_exact(x: np.ndarray, w: np.ndarray, bound: int) -> np.ndarray | None:
    """``x @ w`` for integer-valued arrays when ``bound`` (>= every |partial sum|) proves it exact.

    Returns float32 (bound < 2^24) or float64 (bound < 2^53) integer values, else None.  Proof as
    in :func:`fixed.exact_matmul`: operands, products and every partial sum are integers below
    the format's 2^(mantissa+1), so each floating operation is exact in any order.
    """
    if bound < F32_EXACT:
        return x.astype(np.float32, copy=False) @ w.astype(np.float32, copy=False)
    if bound < F64_EXACT:
        return x.astype(np.float64, copy=False) @ w.astype(np.float64, copy=False)
    return None


def round_float(y: np.ndarray, rounding: Rounding) -> np.ndarray:
    """Round float values to integers by ``rounding``; exact for |y| below the format's 2^mantissa."""
    if rounding is Rounding.CONV_EVEN:
        return np.rint(y)
    if rounding is Rounding.FLOOR:
        return np.floor(y)
    if rounding is Rounding.CEIL:
        return np.ceil(y)
    if rounding is Rounding.SYM_FLOOR:
        return np.trunc(y)
    if rounding is Rounding.SYM_CEIL:
        return np.sign(y) * np.ceil(np.abs(y))
    f = np.floor(y)
    frac = y - f  # exact
    up = frac > 0.5
    tie = frac == 0.5
    if rounding is Rounding.POS_INF:
        up |= tie
    elif rounding is Rounding.SYM_INF:
        up |= tie & (y > 0)
    elif rounding is Rounding.SYM_ZERO:
        up |= tie & (y < 0)
    elif rounding is Rounding.CONV_ODD:
        up |= tie & (np.mod(f, 2) == 0)
    # NEG_INF: ties stay down
    return f + up.astype(y.dtype)


def saturate_float(y: np.ndarray, out: FixedType) -> np.ndarray:
    if out.saturation is Saturation.WRAP:
        return fixed.saturate(y.astype(np.int64), out).astype(y.dtype)
    lo = -out.max_code if (out.saturation is Saturation.SYMMETRIC and out.signed) else out.min_code
    return np.clip(y, lo, out.max_code)


def srs_float(acc: np.ndarray, shift: int, out: FixedType) -> np.ndarray:
    """SRS of integer values carried in floats (|acc| < 2^24 for float32, 2^53 for float64):
    the codes of ``fixed.srs``, in the same float dtype."""
    y = acc * acc.dtype.type(2.0**-shift)  # exact: a power-of-two scaling of an exact integer
    if shift > 0:
        y = round_float(y, out.rounding)
    return saturate_float(y, out)


def quantize_float(x: np.ndarray, t: FixedType) -> np.ndarray | None:
    """``fixed.quantize`` for finite inputs whose scaled magnitude stays below 2^52, as float32
    codes when the type is at most 24 bits wide (float64 otherwise); None when not applicable."""
    x = np.asarray(x, dtype=np.float64)
    y = x * (2.0**t.frac)
    if y.size and not (np.isfinite(y).all() and np.abs(y).max() < 2.0**52):
        return None
    # Scaling is exact unless it lands in the subnormal range; leave those to the integer path.
    if y.size and ((np.abs(y) < 2.0**-1000) & (x != 0)).any():
        return None
    codes = saturate_float(round_float(y, t.rounding), t)
    return codes.astype(np.float32) if t.width <= 24 else codes
