"""Requantisation between affine types (float scales, zero points) as the AI Engine computes it.

A Dense layer with affine input ``x`` (scale ``s_x``, zero point ``z_x``), per-channel weights
(scales ``s_w[n]``, zero point 0) and affine output ``y`` (``s_y``, ``z_y``) computes

    acc[n] = sum_k x_k w_kn + b'_n,    b'_n = b_n - z_x * sum_k w_kn      (bias folded at compile time)
    y_n    = saturate(round_half_even(acc[n] * s_x s_w[n] / s_y) + z_y)   (the exact rational result)

The accumulation is exact (integer MACs).  The ratio ``M_n = s_x s_w[n] / s_y`` is an exact
rational (the scales are float32 numbers); the kernel applies it as an integer multiplier ``m_n``
(below 2^31) and one right shift ``shift`` shared by the layer:

    a = sat_int32(acc)                          acc.to_vector<int32>(0)           (|acc| < 2^31: checked)
    r = sat_int32(round_half_even(a m_n / 2^shift))   aie::mul (int32 x int32) + to_vector<int32>(shift)
    q = sat_out(r + z_y)                        accumulator add + to_vector<T>(0)
    q = max(q, z_y)                             only for a ReLU the model keeps (real 0 is code z_y)

``m_n = round(M_n 2^shift)`` with the largest shift (at most the SRS limit) that keeps every
``m_n`` below 2^31, so ``|a m_n / 2^shift - a M_n| <= |a| 2^-(shift+1)``: the result is the
correctly rounded value of the rational ``a M_n`` unless that value lies within this distance of a
rounding tie (:func:`tie_window`).  The zero point is added after rounding, as ``QuantizeLinear``
does (adding it before would move ties to even by the zero point's parity).
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

from . import fixed
from .types import Rounding

MULT_BITS = 31  # the multiplier is a positive int32
INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1


def ratios(s_in: float, s_w: tuple[float, ...], s_out: float) -> list[Fraction]:
    """The exact rationals ``s_in * s_w[n] / s_out`` of float32 scales."""
    return [Fraction(s_in) * Fraction(w) / Fraction(s_out) for w in s_w]


def choose(ratio: list[Fraction], shift_max: int) -> tuple[np.ndarray, int]:
    """Per-channel multipliers (int64 array) and the shared shift: the largest shift at most
    ``shift_max`` with every ``round(M_n 2^shift) < 2^31``.  Raises ValueError when even shift 0
    overflows (a ratio of 2^31 or more)."""
    top = max(ratio)
    shift = shift_max
    while shift >= 0 and round(top * (1 << shift)) > INT32_MAX:
        shift -= 1
    if shift < 0:
        raise ValueError(f"requantisation ratio {float(top):.6g} is 2^31 or more")
    mult = np.array([round(r * (1 << shift)) for r in ratio], dtype=np.int64)  # round: half to even
    return mult, shift


def tie_window(acc_max: int, shift: int) -> Fraction:
    """How far from a rounding tie the rational ``acc * M_n`` must lie for the kernel's result to
    be the correctly rounded one: ``acc_max * 2^-(shift + 1)`` (in output steps)."""
    return Fraction(acc_max, 1 << (shift + 1))


def apply(acc: np.ndarray, mult: np.ndarray, shift: int, zero_point: int, lo: int, hi: int,
          relu: bool = False) -> np.ndarray:
    """The kernel's integer requantisation of accumulators ``acc`` (``[..., N]``) into codes
    ``[lo, hi]``; ``mult`` has one multiplier per channel (last axis).  int64 in, int64 out."""
    a = np.clip(np.asarray(acc, dtype=np.int64), INT32_MIN, INT32_MAX)
    p = a * np.asarray(mult, dtype=np.int64)  # |p| < 2^62: exact in int64 (and in acc64 / acc80)
    r = np.clip(fixed.round_shift(p, shift, Rounding.CONV_EVEN), INT32_MIN, INT32_MAX)
    q = np.clip(r + zero_point, lo, hi)
    return np.maximum(q, zero_point) if relu else q


@dataclass(frozen=True, eq=False)
class FloatOperands:
    """A requantising layer's constants as :func:`apply_float` uses them, derived once per layer:
    the weights and the bias (as one more row) each multiplied by its channel's ``m_n 2^-shift``
    in float64, and the bounds that decide whether the float path is exact."""

    sources: tuple[np.ndarray, np.ndarray, np.ndarray, int]  # (weights, bias, multipliers, shift) it came from
    scaled: np.ndarray  # float64 [K + 1, N]: w_kn m_n 2^-shift, then the row b_n m_n 2^-shift
    w_max: int
    b_max: int
    m_max: int
    # for apply_float32: the weights and bias as float32, m_n 2^-shift (float64), max_n sum_k |w_kn|
    w32: np.ndarray
    b32: np.ndarray
    s64: np.ndarray
    col_max: int
    # the weights with the bias as one more row (float32 [K + 1, N]), and m 2^-shift as a scalar
    # where every channel has the same multiplier (per-tensor weights): a row-broadcast add and
    # multiply over [..., N] cost about twice a whole-array pass
    w32b: np.ndarray
    s_scalar: float | None


_OPERANDS: weakref.WeakKeyDictionary[Any, FloatOperands] = weakref.WeakKeyDictionary()


def float_operands(owner: Any, weight: np.ndarray, bias: np.ndarray, mult: np.ndarray, shift: int) -> FloatOperands:
    """:class:`FloatOperands` of ``owner`` (the layer's IR node), kept while it lives and rebuilt
    whenever it is asked with other arrays (compared by identity) or another shift."""
    ops = _OPERANDS.get(owner)
    if ops is not None and all(a is b for a, b in zip(ops.sources[:3], (weight, bias, mult), strict=True)) \
            and ops.sources[3] == shift:
        return ops
    scale = np.ldexp(np.asarray(mult, dtype=np.float64), -shift)
    ops = FloatOperands(
        (weight, bias, mult, shift),
        np.vstack([np.asarray(weight, dtype=np.float64), np.asarray(bias, dtype=np.float64)[None, :]]) * scale,
        int(np.max(np.abs(weight))) if weight.size else 0, int(np.max(np.abs(bias))) if bias.size else 0,
        int(np.max(mult)) if mult.size else 0,
        np.asarray(weight, dtype=np.float32), np.asarray(bias, dtype=np.float32),
        scale,
        int(np.max(np.abs(np.asarray(weight, dtype=np.int64)).sum(axis=0))) if weight.size else 0,
        np.vstack([np.asarray(weight, dtype=np.float32), np.asarray(bias, dtype=np.float32)[None, :]]),
        float(scale[0]) if scale.size and np.all(scale == scale[0]) else None,
    )
    _OPERANDS[owner] = ops
    return ops


def apply_float(x: np.ndarray, ops: FloatOperands, zero_point: int, lo: int, hi: int, relu: bool = False,
                acc_bits: int = 32, x_max: int | None = None, narrow: bool = False) -> np.ndarray | None:
    """The layer (exact accumulation ``acc = x @ w + b``, then :func:`apply`) in float64 with the
    multipliers folded into the operands, or None where that is not proven exact for this ``x``
    (integer codes ``[..., K]``, any numeric dtype; ``x_max``, when given, bounds their magnitude,
    else it is measured; ``narrow``: float32 codes out where the output range is below 2^24).

    Proof: let ``A`` (the bound) be at least every |partial sum| of ``x @ w + b``; require ``A`` below
    2^31 and 2^(acc_bits-1) (no wrap of the accumulator, no int32 saturation: :func:`apply` is then
    ``rint(acc m_n / 2^shift)``) and ``A m_max`` below 2^53.  Every operand ``w_kn m_n 2^-shift`` and
    ``b_n m_n 2^-shift`` is exact (< 2^53 times a power of two), every product with a code is an
    integer times ``m_n 2^-shift`` below 2^53 of them, and so is every partial sum in whatever order
    (and with whatever fused multiply-adds) BLAS adds them: each is exact, so the product with
    ``[x, 1]`` is ``acc m_n 2^-shift`` exactly.  ``rint`` rounds half to even as the SRS does; the
    zero point is added after rounding.  One product and three in-place passes; integer-valued
    float64 out, equal to :func:`apply`'s codes."""
    k = ops.scaled.shape[0] - 1
    if x_max is None:
        x_max = max(int(x.max()), -int(x.min())) if x.size else 0
    acc_max = k * x_max * ops.w_max + ops.b_max
    if acc_max >= 1 << min(31, acc_bits - 1) or acc_max * max(ops.m_max, 1) >= 1 << 53:
        return None
    ones = np.empty((*x.shape[:-1], k + 1))  # [x, 1]: the bias row joins the product
    ones[..., :k] = x
    ones[..., k] = 1.0
    y = ones @ ops.scaled
    np.rint(y, out=y)
    lo_c = max(lo, zero_point) if relu else lo
    if narrow and max(abs(lo), abs(hi), abs(zero_point)) < 1 << 24:
        # the rounded integers as float32 (below 2^24 exact; larger ones keep their side of the
        # integer clip bounds), clipped there: the next layer's float32 product takes them as they are
        q = y.astype(np.float32)
        np.clip(q, lo_c - zero_point, hi - zero_point, out=q)
        if zero_point:
            q += zero_point
        return q
    if zero_point:
        y += zero_point
    return np.clip(y, lo_c, hi, out=y)


def apply_float32(x: np.ndarray, ops: FloatOperands, x_max: int, zero_point: int, lo: int, hi: int,
                  relu: bool = False, acc_bits: int = 32) -> np.ndarray | None:
    """The layer as :func:`apply_float`, with the product in float32 (sgemm, about twice as fast as
    the float64 product of :func:`apply_float`) and the requantisation in float64: integer-valued
    float32 codes out, equal to :func:`apply`'s, or None where the bound below fails (the caller
    then takes :func:`apply_float`).  ``x`` holds integer codes of magnitude at most ``x_max`` (the
    layer's input code range: a bound proved once per layer, no pass over ``x``).

    Proof.  Let ``A = x_max * max_n sum_k |w_kn| + max|b|``.  Every partial sum of ``x @ w``, in
    whatever order and with whatever fused multiply-adds BLAS forms it, is an integer of magnitude
    at most ``sum_k |x_k| |w_kn| <= A``, and so is ``acc = x @ w + b``, and so is every partial sum
    of ``[x, 1] @ [w; b]`` (the bias as one more row, where ``K < N``: a sum of a subset of the same
    terms).  With ``A < 2^24`` all of them are float32 numbers (integers below 2^24), so every float32
    operation is exact: the sgemm and the bias add give ``acc`` exactly.  ``A`` below 2^31 and 2^(acc_bits-1) means no wrap and no
    int32 saturation, so :func:`apply` is ``clip(rint(acc m_n 2^-shift) + z, lo, hi)``.  In float64,
    ``acc m_n`` is an integer below ``A m_max < 2^53`` (required), so ``acc * (m_n 2^-shift)`` (the
    factor a power-of-two scaling of an integer below 2^31) is exact; ``rint`` rounds half to even
    as the SRS does.  The rounded values are integers; those outside the output range are clipped
    (in float32 after the conversion: integers below 2^24 convert exactly, larger ones keep their
    side of the clip bounds, which are integers below 2^24), and the zero point is added after
    rounding, exactly (integers below 2^24)."""
    if ops.w32.shape[0] == 0 or not x.size:
        return None
    acc_max = x_max * ops.col_max + ops.b_max
    lo_r = (max(lo, zero_point) if relu else lo) - zero_point
    hi_r = hi - zero_point
    if (acc_max >= 1 << min(24, acc_bits - 1) or acc_max * max(ops.m_max, 1) >= 1 << 53
            or lo_r > hi_r or max(-lo_r, hi_r, abs(zero_point), abs(lo), abs(hi)) >= 1 << 24):
        return None
    k, n = ops.w32.shape
    if k < n:  # the bias joins the product as a row of the weights ([x, 1] is narrower than the output)
        xa = np.empty((*x.shape[:-1], k + 1), dtype=np.float32)
        xa[..., :k] = x
        xa[..., k] = 1.0
        acc = xa @ ops.w32b
    else:
        acc = x.astype(np.float32, copy=False) @ ops.w32
        acc += ops.b32
    y = acc.astype(np.float64)
    y *= ops.s64 if ops.s_scalar is None else ops.s_scalar
    np.rint(y, out=y)
    q = y.astype(np.float32)
    np.clip(q, lo_r, hi_r, out=q)
    if zero_point:
        q += zero_point
    return q


def affine_quantize(x: np.ndarray, t, float_codes: bool = False) -> np.ndarray:
    """Float samples to codes of a per-tensor :class:`~aieflow.numerics.types.AffineType` as ONNX
    ``QuantizeLinear`` defines it for float32 data: ``saturate(round_half_even(x / scale) + zero_point)``
    with the division in float32 (the host quantiser; onnxruntime computes the same).  int64 codes,
    or with ``float_codes`` (types of at most 24 bits) the same integers as float32: clipping the
    rounded quotient to ``[min - z, max - z]`` (integers below 2^24; a larger quotient or an
    infinity stays on its side) and then adding ``z`` is exact in float32."""
    x32 = np.asarray(x, dtype=np.float32)
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        q = x32 / np.float32(t.scale[0])
    np.rint(q, out=q)
    if float_codes and t.width <= 24:
        z = t.zero_point
        np.clip(q, t.min_code - z, t.max_code - z, out=q)
        q += np.float32(z)
        return q
    return np.clip(q.astype(np.float64) + t.zero_point, t.min_code, t.max_code).astype(np.int64)


def affine_dequantize(codes: np.ndarray, t) -> np.ndarray:
    """Codes to float32 values as ONNX ``DequantizeLinear``: ``float32(q - zero_point) * scale``,
    one float32 rounding (what onnxruntime returns).  ``codes``: integers, as int64 or as
    integer-valued floats (``q - zero_point`` is then exact for codes below 2^24 and rounds to the
    same float32 as the integer otherwise)."""
    codes = np.asarray(codes)
    if not np.issubdtype(codes.dtype, np.floating):
        codes = codes.astype(np.int64)
    d = (codes - t.zero_point).astype(np.float32, copy=False)
    d *= np.float32(t.scale[0])
    return d
