"""Integer-exact fixed-point arithmetic for the bit-exact AI Engine emulator.

Codes are ``int64`` numpy arrays.  Everything here is exact: the emulator must reproduce the
hardware bit for bit, so rounding is decided with integer ops (or with float ops proven exact),
never by approximating a quotient in floating point.

Storage limit: codes live in ``int64``.  Types wider than that (signed > 64 bits, unsigned >= 64
bits) are handled within the int64 range only; see :func:`wrap` and :func:`saturate`.
"""

from __future__ import annotations

import numpy as np

from ..errors import ConfigError
from .types import FixedType, Rounding, Saturation

_INT64_MIN = -(1 << 63)
_INT64_MAX = (1 << 63) - 1
_TWO63 = float(1 << 63)
_TWO64 = float(1 << 64)

# Bound on the size of one row chunk's temporaries in exact_matmul.
_CHUNK_BYTES = 64 * 1024 * 1024


def _as_int64(codes: np.ndarray) -> np.ndarray:
    arr = np.asarray(codes)
    if arr.dtype != np.int64:
        if arr.dtype.kind not in "iub":
            raise TypeError(f"fixed-point codes must be integers, got dtype {arr.dtype}")
        arr = arr.astype(np.int64)
    return arr


def _round_from_floor(
    q: np.ndarray, inexact: np.ndarray, gt_half: np.ndarray, tie: np.ndarray, rounding: Rounding
) -> np.ndarray:
    """Finish a rounding given the floor ``q`` of the exact value and where the remainder lies.

    Shared by the integer (round_shift) and float64 (quantize) paths so that both use one
    definition of the ten modes.  ``q`` may be int64 or integer-valued float64; where a
    remainder is non-zero ``q + 1`` is exactly representable in either.
    """
    if rounding is Rounding.FLOOR:
        return q
    if rounding is Rounding.CEIL:
        return q + inexact
    # With a non-zero remainder the value is negative exactly when its floor is.
    if rounding is Rounding.SYM_FLOOR:
        return q + (inexact & (q < 0))
    if rounding is Rounding.SYM_CEIL:
        return q + (inexact & (q >= 0))
    # Nearest modes: round up above the half; on a tie (value q + 1/2) the mode decides.
    if rounding is Rounding.POS_INF:
        tie_up = tie
    elif rounding is Rounding.NEG_INF:
        tie_up = np.zeros_like(tie)
    elif rounding is Rounding.SYM_INF:
        tie_up = tie & (q >= 0)
    elif rounding is Rounding.SYM_ZERO:
        tie_up = tie & (q < 0)
    elif rounding in (Rounding.CONV_EVEN, Rounding.CONV_ODD):
        q_odd = (q & 1).astype(bool) if q.dtype.kind == "i" else np.fmod(q, 2.0) != 0
        tie_up = tie & (q_odd if rounding is Rounding.CONV_EVEN else ~q_odd)
    else:  # pragma: no cover - the enum is closed
        raise ValueError(f"unknown rounding mode {rounding!r}")
    return q + (gt_half | tie_up)


def round_shift(codes: np.ndarray, shift: int, rounding: Rounding) -> np.ndarray:
    """``codes / 2**shift`` rounded by ``rounding``, exact for every int64 input.

    A non-positive ``shift`` is an exact left shift; it raises :class:`OverflowError` rather than
    wrap silently, because a caller asking for an exact result must not get a wrapped one.
    """
    codes = _as_int64(codes)
    shift = int(shift)
    if shift == 0:
        return codes.copy()
    if shift < 0:
        left = -shift
        if codes.size:
            lo, hi = int(codes.min()), int(codes.max())
            too_far = left >= 63 or lo < (_INT64_MIN >> left) or hi > (_INT64_MAX >> left)
            if (lo or hi) and too_far:
                raise OverflowError(f"left shift by {left} bits overflows int64")
        return codes << left if left < 63 else codes.copy()
    if shift >= 64:
        # |codes| <= 2**63, so |value| <= 1/2, with equality only for INT64_MIN / 2**64.  Any
        # non-tie value is replaced by +-1/4 (same sign, same floor, below the half): every
        # mode rounds both alike, and numpy shifts by >= 64 bits are avoided.
        tie = (codes == _INT64_MIN) if shift == 64 else np.zeros(codes.shape, dtype=bool)
        codes = np.where(tie, -2, np.sign(codes)).astype(np.int64)
        shift = 2
    q = codes >> shift  # arithmetic shift: floor
    r = codes & ((1 << shift) - 1)  # remainder in [0, 2**shift)
    half = 1 << (shift - 1)
    return _round_from_floor(q, r != 0, r > half, r == half, rounding)


NARROW_DTYPES = {(8, True): np.int8, (16, True): np.int16, (32, True): np.int32,
           (8, False): np.uint8, (16, False): np.uint16, (32, False): np.uint32}


def wrap(codes: np.ndarray, bits: int, signed: bool = True) -> np.ndarray:
    """Two's-complement wrap to ``bits`` bits, as an accumulator register overflows.

    For ``bits >= 64`` the codes are returned unchanged: int64 arithmetic has already wrapped at
    64 bits, and wider (80-bit) accumulators cannot be represented, so callers must prove they
    do not exceed int64 (see :func:`max_abs_accumulation`).  Unsigned 64-bit codes are
    therefore held as their int64 bit pattern.
    """
    codes = _as_int64(codes)
    if bits < 1:
        raise ValueError(f"cannot wrap to {bits} bits")
    if bits >= 64:
        return codes.copy()
    narrow = NARROW_DTYPES.get((bits, signed))
    if narrow is not None:  # numpy integer casts are modular, as C's: the same bits, two passes
        return codes.astype(narrow).astype(np.int64)
    m = codes & ((1 << bits) - 1)
    if not signed:
        return m
    sign_bit = 1 << (bits - 1)
    return (m ^ sign_bit) - sign_bit


def saturate(codes: np.ndarray, t: FixedType) -> np.ndarray:
    """Bring codes into ``t``'s range the way the SRS writing ``t`` does on overflow.

    Bounds beyond int64 (unsigned 64-bit, widths > 64) are clipped to the int64 range.
    """
    codes = _as_int64(codes)
    if t.saturation is Saturation.WRAP:
        return wrap(codes, t.width, t.signed)
    hi = t.max_code
    lo = -hi if (t.saturation is Saturation.SYMMETRIC and t.signed) else t.min_code
    return np.clip(codes, max(lo, _INT64_MIN), min(hi, _INT64_MAX))


def srs(acc: np.ndarray, shift: int, out: FixedType) -> np.ndarray:
    """Shift-round-saturate: how the AIE moves an accumulator into an output register."""
    return saturate(round_shift(acc, shift, out.rounding), out)


def hls4ml_text_values(x: np.ndarray, t: FixedType) -> np.ndarray:
    """The values hls4ml's C simulation holds for float weights ``x`` of type ``t`` before the
    type's rounding: hls4ml writes each weight as decimal text with ``max(0, frac)`` decimals
    (``WeightVariable.precision_fmt``, Python's correctly rounded ``'{:.Nf}'`` of the exact float
    value) and its C++ reads the text back into a double (``std::istream >> double``, correctly
    rounded) that ``ap_fixed``'s constructor then rounds; ``quantize`` of the result is that code.
    A float32 weight on a rounding tie of ``t`` (or just below a grid point, for truncation) can
    therefore get another code than ``quantize(x, t)`` gives it."""
    arr = np.asarray(x)
    fmt = f"{{:.{max(0, t.frac)}f}}"
    values = [float(fmt.format(float(v))) for v in arr.ravel()]
    return np.asarray(values, dtype=np.float64).reshape(arr.shape)


def quantize(x: np.ndarray, t: FixedType) -> np.ndarray:
    """Float to codes of ``t``, with the exact rounding of ``x * 2**t.frac``.

    Scaling by a power of two is exact (up to overflow/underflow, handled below), floor is exact,
    and the value is compared with its floor plus a half (exact where it matters), so every mode
    rounds the true value.
    Overflow: SATURATE/SYMMETRIC clamp (infinities included).  WRAP reduces the exact integer
    modulo ``2**width`` (``fmod`` is exact), even for values far beyond int64; for widths >= 64
    the wrap is at 64 bits (int64 storage), and an infinity cannot be wrapped, so it raises
    :class:`ConfigError`.
    """
    x = np.asarray(x, dtype=np.float64)
    if np.isnan(x).any():
        raise ConfigError(f"cannot quantize to {t}: input contains NaN")
    if t.saturation is not Saturation.WRAP and t.width <= 48 and t.rounding in _NEAREST:
        return _quantize_nearest(x, t)
    with np.errstate(over="ignore"):  # overflow to +-inf is handled below
        y = np.ldexp(x, t.frac)
    # Underflow may round a tiny scaled value to a subnormal or zero.  The true |value| is then
    # < 1/4, so a same-signed +-1/4 rounds identically in every mode.
    tiny = (x != 0) & (np.abs(y) < 0.25)
    y = np.where(tiny, np.copysign(0.25, x), y)

    q = np.floor(y)
    finite = np.isfinite(y)
    # Where the value lies against its floor's half, by comparison with q + 1/2 (exact while
    # |q| < 2**52; beyond, y is an integer, so inexact is false there).  Not by the fraction
    # y - q: for y in (-1, 0) that is 1 + y, which rounds (-0.5 + 2**-54 gave a false tie).
    inexact = y != q  # false for infinities (floor(inf) == inf)
    half = q + 0.5
    with np.errstate(invalid="ignore"):  # fmod(inf, 2) for infinities: masked by inexact
        r = _round_from_floor(q, inexact, inexact & (y > half), inexact & (y == half), t.rounding)
    r = r + 0.0  # -0.0 -> 0.0

    if t.saturation is Saturation.WRAP:
        if np.isinf(x).any():
            raise ConfigError(
                f"cannot quantize to {t}: input contains inf, which has no wrapped value"
            )
        # A finite x whose scaled value overflowed is an integer multiple of 2**971, hence of
        # 2**width: it wraps to 0.
        r = np.where(finite, r, 0.0)
        bits = min(t.width, 64)
        r = np.fmod(r, 2.0**bits)  # exact, |r| < 2**bits
        if bits == 64:
            # Bring into [-2**63, 2**63); exact by Sterbenz's lemma.
            r = np.where(r >= _TWO63, r - _TWO64, r)
            r = np.where(r < -_TWO63, r + _TWO64, r)
        return wrap(r.astype(np.int64), bits, t.signed)

    over = r >= _TWO63
    under = r < -_TWO63
    codes = np.where(over | under, 0.0, r).astype(np.int64)
    codes = np.where(over, _INT64_MAX, codes)
    codes = np.where(under, _INT64_MIN, codes)
    return saturate(codes, t)


_NEAREST = (Rounding.CONV_EVEN, Rounding.POS_INF)


def _quantize_nearest(x: np.ndarray, t: FixedType) -> np.ndarray:
    """:func:`quantize` for a saturating type of at most 48 bits rounding to nearest, ties to even
    or up (every weight and bias type aieflow picks): the same codes in fewer passes.

    The scaled value is first clamped to one code beyond the type's range, which changes no result
    (a value past that bound rounds past the range and saturates to its end, as the bound does) and
    keeps every value below 2**49 in magnitude.  Ties to even is ``rint`` (IEEE round to integral,
    exact for every float64); ties up is the floor plus one where the value is at least the floor plus
    a half (no ``floor(y + 0.5)``, which rounds ``0.5 - 2**-54`` up).  Infinities clamp
    like any value beyond the range.  A scaled value that underflowed to a subnormal or zero stood
    for a true value of magnitude below a quarter, which rounds to 0 in both modes, as it does here.
    """
    hi = t.max_code
    lo = -hi if (t.saturation is Saturation.SYMMETRIC and t.signed) else t.min_code
    with np.errstate(over="ignore"):
        y = np.asarray(np.ldexp(x, t.frac))  # an array also for a 0-d x (ldexp gives a scalar)
    np.clip(y, lo - 1, hi + 1, out=y)
    if t.rounding is Rounding.CONV_EVEN:
        np.rint(y, out=y)
    else:
        q = np.floor(y)
        y = q + (y >= q + 0.5)  # q + 0.5 is exact: |q| <= 2**48
    return np.clip(y, lo, hi).astype(np.int64)


def dequantize(codes: np.ndarray, t: FixedType) -> np.ndarray:
    """Codes to float64 values (exact while |codes| < 2**53)."""
    return np.ldexp(np.asarray(codes).astype(np.float64), -t.frac)


def float32_exact(t: FixedType) -> bool:
    """Whether every value of ``t`` is a float32: at most 24 significant bits (float32's
    mantissa), the largest below 2^128 and the step at least 2^-149 (the smallest subnormal)."""
    return t.width <= 24 and t.int_bits <= 128 and t.frac <= 149


def to_real(codes: np.ndarray, t: FixedType) -> np.ndarray:
    """Output codes as the real values ``predict`` returns: float32, the dtype of a float model's own
    outputs, when every value of ``t`` is one (int8 / int16 / 24-bit outputs); else float64, exact
    while |codes| < 2**53 (wider outputs, e.g. 32-bit accumulators, which float32 would round)."""
    values = dequantize(codes, t)
    return values.astype(np.float32) if float32_exact(t) else values


def _matmul_path(k: int, max_a: int, max_b: int) -> str:
    """Which exact method handles a K-term dot product of codes bounded by max_a and max_b."""
    bound = k * max_a * max_b
    if bound < (1 << 53):
        return "float64"
    if bound < (1 << 63):
        return "int64"
    return "overflow"


def _max_abs(a: np.ndarray) -> int:
    return max(abs(int(a.min())), abs(int(a.max()))) if a.size else 0


def exact_matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Exact integer ``a (..., K) @ b (K, N)`` as int64, using BLAS when that is provably exact."""
    a = _as_int64(a)
    b = _as_int64(b)
    if b.ndim != 2 or a.ndim < 1 or a.shape[-1] != b.shape[0]:
        raise ValueError(
            f"exact_matmul: shapes {a.shape} and {b.shape} do not match (..., K) @ (K, N)"
        )
    k, n = b.shape
    lead = a.shape[:-1]
    m = int(np.prod(lead, dtype=np.int64))
    a2 = a.reshape(m, k)
    out = np.zeros((m, n), dtype=np.int64)
    ma, mb = _max_abs(a2), _max_abs(b)
    path = _matmul_path(k, ma, mb)
    if path == "overflow":
        raise ValueError(
            f"exact_matmul: K={k}, max|a|={ma}, max|b|={mb} can exceed int64 (bound {k * ma * mb})"
        )
    if m == 0 or k == 0 or n == 0 or ma == 0 or mb == 0:
        return out.reshape(*lead, n)
    # Float64 path proof: every operand is an integer of magnitude <= max|a| or max|b| (< 2**53),
    # every product has magnitude <= max|a|*max|b| < 2**53 and every partial sum of any subset of
    # the K products has magnitude <= K*max|a|*max|b| < 2**53.  All of these are integers that
    # float64 represents exactly, so each multiply, add or fused multiply-add that BLAS performs
    # returns its exact result, whatever the summation order or blocking; the final cast is exact.
    bf = b.astype(np.float64) if path == "float64" else b
    rows = max(1, _CHUNK_BYTES // (8 * (k + n)))
    for start in range(0, m, rows):
        chunk = a2[start : start + rows]
        if path == "float64":
            out[start : start + rows] = np.matmul(chunk.astype(np.float64), bf).astype(np.int64)
        else:
            # numpy's integer matmul is a plain loop (no BLAS); no partial sum exceeds the bound.
            out[start : start + rows] = np.matmul(chunk, bf)
    return out.reshape(*lead, n)


def to_bf16(x: np.ndarray) -> np.ndarray:
    """Round float32 values to bfloat16 (nearest, ties to even), returned as float32.

    Works on the bit pattern so that ties, subnormals and overflow to inf follow IEEE exactly;
    NaNs are kept as (quiet) NaNs, since truncating a NaN's payload could turn it into inf.
    """
    x32 = np.array(x, dtype=np.float32, copy=True)
    u = x32.view(np.uint32)
    nan = np.isnan(x32)
    lsb = (u >> np.uint32(16)) & np.uint32(1)
    with np.errstate(over="ignore"):  # NaN patterns may wrap; they are replaced below
        rounded = (u + np.uint32(0x7FFF) + lsb) & np.uint32(0xFFFF0000)
    quiet_nan = (u & np.uint32(0xFFFF0000)) | np.uint32(0x00400000)
    return np.where(nan, quiet_nan, rounded).astype(np.uint32).view(np.float32).reshape(x32.shape)


def to_fp16(x: np.ndarray) -> np.ndarray:
    """Round float32 values to IEEE binary16 (AIE-MLv2's float16: 1 / 5 / 10 bits), returned as float32.

    Round to nearest, ties to even, with binary16's subnormals kept (no flush to zero) and overflow to
    +-inf from 65520 on (the IEEE default conversion; numpy's float32 -> float16 cast implements it).
    UG1529 documents neither the rounding nor the subnormal handling of a conversion to float16: this
    is aieflow's assumption, shared with the x86 shim (docs/numerics.md).  NaNs stay NaNs.
    """
    x32 = np.asarray(x, dtype=np.float32)
    with np.errstate(over="ignore", invalid="ignore"):  # overflow to inf is the documented result here
        return x32.astype(np.float16).astype(np.float32)


def round_float(x: np.ndarray, name: str) -> np.ndarray:
    """float32 values rounded into the float type ``name`` ("fp32": unchanged, "bf16", "fp16")."""
    if name == "bf16":
        return to_bf16(x)
    if name == "fp16":
        return to_fp16(x)
    return np.asarray(x, dtype=np.float32)


def float32_dot_sequential(x: np.ndarray, w: np.ndarray, init: np.ndarray | None) -> np.ndarray:
    """``init + x @ w`` in float32 with the AIE accumulation order: k = 0, 1, ..., K-1.

    Each product and each sum is rounded to float32 separately (no FMA, no pairwise or blocked
    summation), which is the order the AIE fp32 MAC and the x86 shim both use; BLAS would not
    reproduce it.
    """
    x = np.asarray(x, dtype=np.float32)
    w = np.asarray(w, dtype=np.float32)
    if x.ndim != 2 or w.ndim != 2 or x.shape[1] != w.shape[0]:
        raise ValueError(
            f"float32_dot_sequential: shapes {x.shape} and {w.shape} do not match (B, K) @ (K, N)"
        )
    bsz, k = x.shape
    n = w.shape[1]
    acc = np.zeros((bsz, n), dtype=np.float32)
    if init is not None:
        acc[...] = np.broadcast_to(np.asarray(init, dtype=np.float32), (bsz, n))
    prod = np.empty_like(acc)
    with np.errstate(over="ignore", invalid="ignore"):  # IEEE: overflow gives inf, inf - inf NaN
        for i in range(k):
            np.multiply(x[:, i, None], w[i][None, :], out=prod)
            np.add(acc, prod, out=acc)
    return acc


def max_abs_accumulation(k: int, a: FixedType, b: FixedType) -> int:
    """Worst-case |sum of k products| of codes of ``a`` and ``b``, to prove an accumulator fits."""
    if k < 0:
        raise ValueError(f"number of products must be non-negative, got {k}")
    ma = max(abs(a.min_code), abs(a.max_code))
    mb = max(abs(b.min_code), abs(b.max_code))
    return k * ma * mb


def round_div(num: np.ndarray, den: int, rounding: Rounding) -> np.ndarray:
    """``num / den`` rounded by ``rounding``, exact for int64 ``num`` and a positive ``den``.

    Table indices (``int(x * N / 16)`` in hls4ml) divide by constants that are not powers of two,
    so :func:`round_shift` alone does not cover them.
    """
    num = _as_int64(num)
    den = int(den)
    if den <= 0:
        raise ValueError(f"round_div: denominator must be positive, got {den}")
    q = num // den  # floor
    r = num - q * den  # in [0, den)
    return _round_from_floor(q, r != 0, 2 * r > den, 2 * r == den, rounding)


def round_divide(num: np.ndarray, den: np.ndarray, rounding: Rounding) -> np.ndarray:
    """``num / den`` rounded by ``rounding``, element by element, exact for int64 ``num`` and
    positive integer ``den`` (broadcast against ``num``).

    Average pooling divides by the number of elements in each window, which varies at padded
    borders and is rarely a power of two.
    """
    num = _as_int64(num)
    den = _as_int64(den)
    if den.size and int(den.min()) <= 0:
        raise ValueError("round_divide: denominators must be positive")
    q = num // den  # floor
    r = num - q * den  # in [0, den)
    return _round_from_floor(q, r != 0, 2 * r > den, 2 * r == den, rounding)


def cast(codes: np.ndarray, frac: int, to: FixedType) -> np.ndarray:
    """ap_fixed assignment: exact codes with ``frac`` fractional bits into type ``to``.

    Rounds by ``to.rounding`` (when bits are dropped), then handles overflow by
    ``to.saturation``, which is what assigning a full-precision ap_fixed expression to a narrower
    ap_fixed variable does.  Adding fractional bits is exact; the overflow of a left shift is
    decided before shifting, so no int64 intermediate can overflow.
    """
    codes = _as_int64(codes)
    shift = int(frac) - to.frac
    if 0 < shift < 63 and to.rounding is Rounding.FLOOR:
        return saturate(codes >> shift, to)  # ap_fixed's default TRN: a plain arithmetic shift
    if shift == 0:
        return saturate(codes, to)  # nothing dropped (saturate returns a new array)
    if shift >= 0:
        return saturate(round_shift(codes, shift, to.rounding), to)
    left = -shift
    if to.saturation is Saturation.WRAP:
        if left >= to.width:
            return np.zeros_like(codes)
        low = codes & ((1 << (to.width - left)) - 1)  # the bits that survive the shift
        return wrap(low << left, to.width, to.signed)
    hi = to.max_code
    lo = -hi if (to.saturation is Saturation.SYMMETRIC and to.signed) else to.min_code
    hi_in = hi >> left  # largest code whose shifted value fits
    lo_in = -((-lo) >> left)  # smallest such code (ceil of lo / 2**left)
    shifted = np.clip(codes, lo_in, hi_in) << left
    return np.where(codes > hi_in, hi, np.where(codes < lo_in, lo, shifted)).astype(np.int64)
