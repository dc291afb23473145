"""Element-wise activations and softmax as layers of their own (issue 17, item 5).

``activation`` nodes carry ``attrs["function"]`` (one of :data:`FUNCTIONS`) and its parameters
(``alpha``, ``beta``, ``min``, ``max``); ``softmax`` nodes normalise over the last axis.  A ReLU /
Tanh right after a Dense / Conv is still fused into that kernel (``passes/fuse.py``); whatever is
left becomes one of these nodes and, on AIE-ML / AIE-MLv2, a kernel of its own in the DAG mapping
(``dag/``, ``templates/dag/dag_kernels.h`` ``Activation`` / ``Softmax``), and in a recurrent model's
head; both run the C++ of ``templates/kernels/activation_fixed.h``.

Fixed point: what the kernel computes, bit for bit (the emulation below is the definition; the
tests check it against an independent float64 reference):

* **table** (8-bit inputs, every function): ``y = T[x - min_code]``, one entry per input code,
  ``T[c] = Q_out(f(c 2^-frac_in))`` with ``Q_out`` the output type's rounding and saturation: the
  exactly rounded function (variant ``exact``), or, with ``activations: {sigmoid: hls4ml}`` (or a
  custom table, sigmoid / tanh), hls4ml's lookup table read at hls4ml's index and its entry
  rounded into the output type (variant ``hls4ml`` / ``table``).
* **interpolated** (16-bit inputs): ``K = 2^10`` segments of ``2^SEG`` codes (``SEG = width - 10``),
  knots ``V_k = round_half_even(f((min_code + k 2^SEG) 2^-frac_in) 2^frac_out)`` (``k = 0..K``,
  clamped to +-2^30); ``u = x - min_code``, ``i = u >> SEG``, ``r = u mod 2^SEG``,
  ``y = sat(V_i + ((V_(i+1) - V_i) r + 2^(SEG-1)) >> SEG)`` (arithmetic shift: floor).
* **softmax** (last axis, 8- or 16-bit input): per row ``m = max x``, ``d_i = m - x_i``,
  ``e_i = E[min(d_i >> SD, n_E - 1)]`` with ``E[k] = round_half_even(exp(-t_k 2^-frac_in) 2^15)``
  (``t_k = k`` when ``SD = 0``, the bucket midpoint ``k 2^SD + 2^(SD-1)`` otherwise;
  ``SD = max(0, frac_in - 8)``; the table ends at its first zero entry), ``S = sum e_i``,
  ``inv = floor((2^46 + floor(S / 2)) / S)``,
  ``y_i = min(HI, (e_i inv + 2^(45 - frac_out)) >> (46 - frac_out))``.  All in int64 without
  overflow (``e <= 2^15``, ``S < 2^28``, ``inv < 2^32``).  The output type defaults to
  ``frac = width - 1`` (1.0 saturates to the largest code), whatever the calibration data.
* **masked softmax** (attention masks, ``params["keep"]``: a constant ``[T_q, T_k]`` 0/1 table, row
  ``r`` of a sample's scores reading row ``r``): ``m`` is the maximum over the kept ``x_i`` only,
  ``e_i = 0`` where ``keep = 0`` and as above elsewhere, ``S`` sums the kept ``e_i``; so a masked
  position's output is exactly 0 and the kept ones are the unmasked softmax of the kept values.
  Every row keeps at least one key (a row with none is refused at import: PyTorch gives NaN).
  The float reference is the softmax with ``-inf`` at the masked positions.  The kernel reads the
  table as a compile-time constant of its configuration (``layers.h`` ``KEEP``).
* **run-time key padding mask** (a softmax node's second input: the graph's second input, one keep
  byte per key per sample, :data:`MASK_TYPE`, 1 = the key takes part): sample ``n``'s row ``k_n``
  combines with the constant table (``keep & k_n``, every query row of every head) and the row is the
  masked softmax above.  A row that keeps no key (possible at run time only) has ``S = 0``: every
  output is 0 (no reciprocal is taken); the float reference gives 0 there too (PyTorch gives NaN).
  bf16 (no constant table: a constant mask stays int8 / int16 only): :func:`softmax_bf16` with the
  sample's keep row (the maximum over the kept values, a dropped value's exp +0.0, a row keeping none
  +0.0 everywhere).
* **integer softmax** (``activations: {softmax: integer}``; the default ``table`` is the one above):
  the same maximum, sum, reciprocal and product, with ``e_i = iexp(d_i)`` computed instead of read
  from a table: I-BERT's integer exp (Kim et al., "I-BERT: Integer-only BERT Quantization", ICML
  2021, arXiv:2101.01321, Algorithm 2 / eq. 11: ``exp(p) ~ 0.3585 (p + 1.353)^2 + 0.344`` on
  ``(-ln 2, 0]``, ``exp(-z ln 2 + p) = 2^-z exp(p)``) on a grid of ``2^-14``:
  ``D = d << (14 - frac_in)`` (``>>`` when ``frac_in > 14``, floor), ``e = 0`` when ``D >= 30 L2``,
  else ``z = (D M) >> 36`` (= ``floor(D / L2)`` exactly), ``p = D - z L2``,
  ``e = (A ((B - p)^2 + C) + 2^(27 + z)) >> (28 + z)`` with ``L2 = round(ln 2 2^14) = 11357``,
  ``M = ceil(2^36 / L2)``, ``B = round(1.353 2^14)``, ``C = round(0.344 / 0.3585 2^28)``,
  ``A = round(0.3585 2^15)``; ``e <= 32773`` (so ``S`` stays in ``[2^15, 2^28)``).  The polynomial's
  own error on ``(-ln 2, 0]`` is below 0.0022 absolute / 0.31 % relative (I-BERT); the measured
  error of the whole softmax against float is in docs/attention.md (``benchmarks/softmax_gelu.py``).
  The kernel computes ``iexp`` per element (no table; its five constants are the layer's
  ``params["table"]``).
* **polynomial GELU** (``activations: {gelu: polynomial}``; the default ``table`` is the full table
  / interpolation above): I-BERT's i-GELU, ``GELU(x) ~ x / 2 (1 + L(x / sqrt 2))``,
  ``L(v) = sgn(v) (-0.2888 (min(|v|, 1.769) - 1.769)^2 + 1)``, in integers on a grid of ``2^-14``:
  ``V = min((|x| C1 + 2^(s-1)) >> s, BC)`` with ``s = frac_in + 2`` (``<< -s`` when ``s <= 0``),
  ``C1 = round(2^16 / sqrt 2)``, ``BC = round(1.769 2^14)``; ``W = V - BC``;
  ``Lm = 2^28 + ((A W^2) >> 16)`` (floor), ``A = round(-0.2888 2^16)``; ``v = x (2^28 + sgn(x) Lm)``;
  ``y = sat((v + 2^(t-1)) >> t)``, ``t = frac_in + 29 - frac_out`` (rounds half up, as the
  interpolation does; the output type's rounding mode is not used: a non-default one is refused).
  I-BERT states its L-infinity error against GELU as 0.018; the measured error is in
  docs/attention.md.  The kernel computes it per element (its three constants are ``params["table"]``).

Float precisions: fp32 (AIE1) is what the CNN epilogue kernel computes, bit for bit
(``templates/cnn/cnn_float_post.h``), for the functions of :data:`FP32_FUNCTIONS`: a fixed sequence
of float32 additions, multiplications, comparisons, one division and exact scalings by powers of
two, each rounded to float32 (round to nearest even, no fused multiply-add), with no libm call
(:func:`exp_f32`, :func:`apply_f32`, :func:`softmax_f32`; the exp is Cody-Waite range reduction and
Cephes' ``expf`` polynomial, its error against float64 measured in ``tests/test_cnn_float_post.py``
and stated in docs/conv.md).  GELU (erf form) and ``gelu_tanh`` compute ``f`` in float64 and round
to float32 (an emulation only, no kernel).  bf16 (AIE-ML / AIE-MLv2, ``dag_kernels_bf16.h`` ``ActivationBf16`` / ``SoftmaxBf16``) is
what the kernel computes, bit for bit:

* **activation**: a bf16 value is sign ``s``, exponent field ``e`` and 7 mantissa bits ``m``.
  Exponents ``E_LO <= e <= E_HI`` read a table of bf16 results, ``T[s][e - E_LO][m]``; below the
  window (zero, subnormals, tiny values) and above it (large values, +-inf) a rule per side and
  sign, ``y = c0`` (when ``c1 = 0``) or ``y = bf16(float32(float32(c1 x) + c0))``; NaN passes
  through unchanged.  :func:`bf16_table` chooses the rules and the narrowest window with which
  this equals ``bf16(float32(f(x)))`` (``f`` in float64, round to nearest even twice) on every
  finite bf16 input, checked bit for bit on all 65 280 finite inputs when the layer is quantised.
* **softmax** (last axis): ``m = max x``; ``d_i = bf16(float32(x_i - m))``; ``e_i = E(d_i)``, the
  activation scheme above for ``exp`` on ``d <= 0``; ``S = sum e_i`` in float32 in increasing
  ``i``; ``inv = float32(1 / S)``; ``y_i = bf16(float32(e_i inv))``.  Inputs are finite (or -inf);
  a NaN or +inf gives NaN outputs in that row.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..config import PRECISIONS
from ..errors import ConfigError, ModelError, PlanError
from ..ir import Node
from ..numerics import fixed
from ..numerics.types import FixedType, FloatType, NumericType, Rounding, Saturation, parse_type
from . import activations as tables
from .base import OpFamily, QuantContext, not_mapped

# function -> (its parameters with defaults, a one-line description)
FUNCTIONS: dict[str, tuple[dict[str, float], str]] = {
    "relu": ({}, "max(x, 0)"),
    "sigmoid": ({}, "1 / (1 + exp(-x))"),
    "tanh": ({}, "tanh(x)"),
    "gelu": ({}, "x Phi(x) (erf form)"),
    "gelu_tanh": ({}, "GELU, tanh approximation"),
    "leaky_relu": ({"alpha": 0.01}, "x if x >= 0 else alpha x"),
    "elu": ({"alpha": 1.0}, "x if x > 0 else alpha (exp(x) - 1)"),
    # SELU's constants as PyTorch (nn.SELU) and ONNX (Selu defaults) define them
    "selu": ({"alpha": 1.6732632423543772, "gamma": 1.0507009873554805}, "gamma (x if x > 0 else alpha (exp(x) - 1))"),
    "hard_sigmoid": ({"alpha": 1 / 6, "beta": 0.5}, "clip(alpha x + beta, 0, 1)"),
    "hard_swish": ({}, "x clip(x / 6 + 1 / 2, 0, 1)"),
    "silu": ({}, "x sigmoid(x)"),
    "clip": ({"min": 0.0, "max": 6.0}, "clip(x, min, max) (ReLU6, Hardtanh)"),
}
SEGMENT_BITS = 10  # 16-bit inputs: 2^10 interpolation segments
EXP_BITS = 15  # softmax: exp table entries have 15 fractional bits (E[0] = 2^15)
RECIP_BITS = 46  # softmax: reciprocal 2^46 / S
# a run-time key padding mask (the graph's second input): one unsigned byte per key per sample, 1 = kept
MASK_TYPE = FixedType(8, 0, False, Rounding.CONV_EVEN, Saturation.SATURATE)
# I-BERT (arXiv:2101.01321) integer exp and GELU, on a grid of 2^-IBERT_P (module docstring)
IBERT_P = 14
IEXP_Z_CAP = 30  # D >= 30 L2: exp(-D) < 2^-43, e = 0
IEXP_M_SHIFT = 36
SOFTMAX_VARIANTS = ("table", "integer")
GELU_VARIANTS = ("table", "polynomial")
KNOT_LIMIT = 1 << 30
_WIDTH = {"i8": 8, "i16": 16}

_erf = np.frompyfunc(math.erf, 1, 1)


def float32(params) -> dict[str, float]:
    """Function parameters as the float32 values a model computes with (both frontends)."""
    return {k: float(np.float32(v)) for k, v in params.items()}


def evaluate(function: str, attrs, x: np.ndarray) -> np.ndarray:
    """``f(x)`` in float64 (the reference every variant rounds)."""
    x = np.asarray(x, dtype=np.float64)
    known = FUNCTIONS.get(function, ({}, ""))[0]
    a = {**known, **{k: float(v) for k, v in attrs.items() if k in known}}
    with np.errstate(over="ignore"):
        if function == "relu":
            return np.maximum(x, 0.0)
        if function == "sigmoid":
            return 1.0 / (1.0 + np.exp(-x))
        if function == "tanh":
            return np.tanh(x)
        if function == "gelu":
            return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)).astype(np.float64))
        if function == "gelu_tanh":
            return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))
        if function == "leaky_relu":
            return np.where(x >= 0, x, a["alpha"] * x)
        if function == "elu":
            return np.where(x > 0, x, a["alpha"] * np.expm1(np.minimum(x, 0.0)))
        if function == "selu":
            return a["gamma"] * np.where(x > 0, x, a["alpha"] * np.expm1(np.minimum(x, 0.0)))
        if function == "hard_sigmoid":
            return np.clip(a["alpha"] * x + a["beta"], 0.0, 1.0)
        if function == "hard_swish":
            return x * np.clip(x / 6.0 + 0.5, 0.0, 1.0)
        if function == "silu":
            return x / (1.0 + np.exp(-x))
        if function == "clip":
            return np.clip(x, a["min"], a["max"])
        if function == "exp":  # softmax's bf16 exp table (not a layer function)
            return np.exp(x)
    raise ConfigError(f"unknown activation function {function!r}; known: {', '.join(FUNCTIONS)}")


# ----------------------------------------------------------------------------- fp32 kernel definitions

FP32_FUNCTIONS = ("relu", "leaky_relu", "elu", "selu", "sigmoid", "tanh", "hard_sigmoid", "hard_swish", "silu",
                  "clip")
# exp(x) = 2^n p(r): n = floor(x log2(e) + 1/2), r = (x - n C1) - n C2 (Cody-Waite: C1 + C2 = ln 2,
# C1 with 9 significant bits so n C1 is exact for |n| < 2^15), p(r) = ((((P0 r + P1) r + P2) r + P3) r
# + P4) r + P5) r^2 + r + 1: Cephes expf (S. L. Moshier, netlib cephes/single/expf.c) constants.
EXP_LOG2E = 1.44269504088896341
EXP_C1 = 0.693359375
EXP_C2 = -2.12194440e-4
EXP_P = (1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2, 1.6666665459e-1, 5.0000001201e-1)
EXP_HI = 89.0  # x above: +inf (exp(88.73) overflows float32 already)
EXP_LO = -104.0  # x below: 0 (exp(-103.98) rounds to 0 in float32)
_f32 = np.float32


def _exp_steps(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(x clipped to [EXP_LO, EXP_HI], n as float32, q = p(r) - 1 = P(r) r^2 + r) of the fp32 exp."""
    with np.errstate(all="ignore"):
        xc = np.clip(np.nan_to_num(x, nan=0.0), _f32(EXP_LO), _f32(EXP_HI)).astype(np.float32)
        s = (xc * _f32(EXP_LOG2E)).astype(np.float32) + _f32(0.5)
        k = np.trunc(s)
        k = np.where(k > s, k - _f32(1.0), k).astype(np.float32)  # floor, as the kernel forms it
        r = (xc - k * _f32(EXP_C1)).astype(np.float32)
        r = (r - k * _f32(EXP_C2)).astype(np.float32)
        z = r * r
        p = _f32(EXP_P[0]) * r + _f32(EXP_P[1])
        for c in EXP_P[2:]:
            p = (p * r).astype(np.float32) + _f32(c)
        q = (p * z).astype(np.float32) + r
    return xc, k, q.astype(np.float32)


def _special(x: np.ndarray, y: np.ndarray, hi, lo) -> np.ndarray:
    y = np.where(x > _f32(EXP_HI), _f32(hi), np.where(x < _f32(EXP_LO), _f32(lo), y))
    return np.where(np.isnan(x), x, y).astype(np.float32)


def exp_f32(x: np.ndarray) -> np.ndarray:
    """The fp32 kernels' exp (module docstring): float32 in, float32 out, every step rounded to
    float32: ``y = (q + 1) 2^n1 2^n2`` (``n1 = n >> 1``, ``n2 = n - n1``: two exact scalings by
    normal powers of two, so a subnormal result is rounded once); +inf above ``EXP_HI``, 0 below
    ``EXP_LO``, NaN passes."""
    x = np.asarray(x, dtype=np.float32)
    _, k, q = _exp_steps(x)
    with np.errstate(all="ignore"):
        p = (q + _f32(1.0)).astype(np.float32)
        n = k.astype(np.int64)
        n1 = n >> 1
        y = (p * np.ldexp(_f32(1.0), n1).astype(np.float32)).astype(np.float32)
        y = (y * np.ldexp(_f32(1.0), n - n1).astype(np.float32)).astype(np.float32)
    return _special(x, y, np.inf, 0.0)


def expm1_f32(x: np.ndarray) -> np.ndarray:
    """``exp(x) - 1``: ``q`` itself where ``n = 0`` (``|x| <~ ln(2) / 2``: no cancellation), else
    ``exp_f32(x) - 1``; +inf above ``EXP_HI``, -1 below ``EXP_LO``."""
    x = np.asarray(x, dtype=np.float32)
    _, k, q = _exp_steps(x)
    with np.errstate(all="ignore"):
        y = np.where(k == 0, q, (exp_f32(x) - _f32(1.0)).astype(np.float32))
    return _special(x, y, np.inf, -1.0)


def fp32_params(function: str, attrs) -> tuple[float, float]:
    """The kernel's two float32 constants (A, B) of a function (module docstring of apply_f32)."""
    known = {**FUNCTIONS.get(function, ({}, ""))[0], **{k: float(v) for k, v in attrs.items()
                                                         if k in FUNCTIONS.get(function, ({}, ""))[0]}}
    if function == "selu":
        return float(_f32(known["gamma"])), float(_f32(known["gamma"] * known["alpha"]))
    if function in ("leaky_relu", "elu"):
        return float(_f32(known["alpha"])), 0.0
    if function == "hard_sigmoid":
        return float(_f32(known["alpha"])), float(_f32(known["beta"]))
    if function == "hard_swish":
        return float(_f32(1.0 / 6.0)), 0.5
    if function == "clip":
        return float(_f32(known["min"])), float(_f32(known["max"]))
    return 0.0, 0.0


def _min(a, b) -> np.ndarray:  # the kernel's ``b < a ? b : a`` (equal or signed zeros: a)
    return np.where(b < a, b, a)


def _max(a, b) -> np.ndarray:  # ``b > a ? b : a``
    return np.where(b > a, b, a)


def _sigmoid_f32(x: np.ndarray) -> np.ndarray:
    e = exp_f32(-np.abs(x))  # in (0, 1]: no overflow
    d = (_f32(1.0) + e).astype(np.float32)
    return np.where(x >= 0, _f32(1.0) / d, e / d).astype(np.float32)


def apply_f32(function: str, attrs, x: np.ndarray) -> np.ndarray:
    """The fp32 activation kernel (``cnn_float_post.h`` ``activation``), float32 in and out:

    relu ``x > 0 ? x : 0``; leaky_relu ``x >= 0 ? x : A x``; elu ``x > 0 ? x : A (exp(x) - 1)``;
    selu ``x > 0 ? A x : B (exp(x) - 1)`` (``A = gamma``, ``B = float32(gamma alpha)``; ``exp(x) - 1``
    is :func:`expm1_f32` of ``min(x, 0)``); sigmoid ``1 / (1 + e)`` for ``x >= 0``, ``e / (1 + e)``
    below, ``e = exp(-|x|)``; tanh ``sign(x) (-q / (q + 2))``, ``q = expm1_f32(-2 |x|)``; hard_sigmoid
    ``min(max(A x + B, 0), 1)``; hard_swish ``x min(max(A x + 1/2, 0), 1)`` (``A = float32(1/6)``);
    silu ``x sigmoid(x)``; clip ``min(max(x, A), B)``; ``min(a, b)`` is ``b < a ? b : a`` and ``max(a, b)``
    ``b > a ? b : a`` (between equal values and signed zeros: ``a``).  NaN passes through."""
    x = np.asarray(x, dtype=np.float32)
    a, b = (_f32(v) for v in fp32_params(function, attrs))
    one, zero = _f32(1.0), _f32(0.0)
    with np.errstate(all="ignore"):
        if function == "relu":
            y = np.where(x > 0, x, zero)
        elif function == "leaky_relu":
            y = np.where(x >= 0, x, a * x)
        elif function in ("elu", "selu"):
            em = expm1_f32(_min(x, zero))
            y = np.where(x > 0, x, a * em) if function == "elu" else np.where(x > 0, a * x, b * em)
        elif function == "sigmoid":
            y = _sigmoid_f32(x)
        elif function == "tanh":
            em = expm1_f32(_f32(-2.0) * np.abs(x))  # in [-1, 0]
            t = (-em / (em + _f32(2.0)).astype(np.float32)).astype(np.float32)
            y = np.where(x < 0, -t, t)
        elif function in ("hard_sigmoid", "hard_swish"):
            t = (a * x).astype(np.float32) + (b if function == "hard_sigmoid" else _f32(0.5))
            t = _min(_max(t, zero), one)
            y = t if function == "hard_sigmoid" else x * t
        elif function == "silu":
            y = x * _sigmoid_f32(x)
        elif function == "clip":
            y = _min(_max(x, a), b)
        else:
            raise ConfigError(f"{function} has no fp32 kernel definition; fp32 kernels: {', '.join(FP32_FUNCTIONS)}")
    return np.where(np.isnan(x), x, y).astype(np.float32)


def softmax_f32(x: np.ndarray) -> np.ndarray:
    """The fp32 softmax kernel over the last axis: ``m = max x``; ``e_i = exp(x_i - m)``; ``S = sum
    e_i`` in float32 in increasing ``i``; ``inv = 1 / S``; ``y_i = e_i inv``."""
    x = np.asarray(x, dtype=np.float32)
    with np.errstate(invalid="ignore", over="ignore"):
        m = x.max(axis=-1, keepdims=True)
        e = exp_f32((x - m).astype(np.float32))
        s = np.zeros(e.shape[:-1], dtype=np.float32)
        for j in range(e.shape[-1]):
            s = (s + e[..., j]).astype(np.float32)
        inv = (_f32(1.0) / s).astype(np.float32)[..., None]
        return (e * inv).astype(np.float32)


_FLOAT32_MAX = float(np.finfo(np.float32).max)


def check_function(function: str, attrs, layer: str) -> None:
    if function not in FUNCTIONS:
        raise ModelError(f"activation function {function!r} is not known; aieflow maps {', '.join(FUNCTIONS)}",
                         layer=layer)
    for k, v in attrs.items():
        # float32: the kernels hold the parameters as float32 constants (mapped/text.float_literal)
        if k in FUNCTIONS[function][0] and not (math.isfinite(float(v)) and abs(float(v)) <= _FLOAT32_MAX):
            raise ModelError(f"{function} parameter {k}={v} is not a finite float32 value", layer=layer,
                             hint=f"use a value of magnitude at most {_FLOAT32_MAX:.8g}")
    if function == "clip" and float(attrs.get("min", 0.0)) > float(attrs.get("max", 6.0)):
        raise ModelError(f"clip with min {attrs.get('min')} > max {attrs.get('max')}", layer=layer)


def softmax_reference(x: np.ndarray, keep: np.ndarray | None = None) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    if keep is not None:
        x = np.where(np.asarray(keep, dtype=bool), x, -np.inf)
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


# ----------------------------------------------------------------------------- I-BERT integer forms


def iexp_constants() -> np.ndarray:
    """[L2, M, B, C, A] of the integer exp (module docstring), int32."""
    l2 = round(math.log(2.0) * (1 << IBERT_P))
    m = -(-(1 << IEXP_M_SHIFT) // l2)
    b = round(1.353 * (1 << IBERT_P))
    c = round(0.344 / 0.3585 * (1 << (2 * IBERT_P)))
    a = round(0.3585 * (1 << EXP_BITS))
    return np.array([l2, m, b, c, a], dtype=np.int32)


def iexp_up(frac_in: int) -> int:
    """The shift of ``d`` onto the integer exp's grid (negative: a right shift)."""
    return IBERT_P - frac_in


def iexp_codes(d: np.ndarray, up: int, k: np.ndarray) -> np.ndarray:
    """``e = iexp(d)`` for ``d >= 0`` codes (module docstring), int64."""
    l2, m, b, c, a = (int(v) for v in np.asarray(k, dtype=np.int64))
    d = np.asarray(d).astype(np.int64)
    big_d = d << up if up >= 0 else d >> -up
    big = big_d >= IEXP_Z_CAP * l2
    dd = np.where(big, 0, big_d)
    z = (dd * m) >> IEXP_M_SHIFT
    p = dd - z * l2
    w = b - p
    sh = 2 * IBERT_P + z
    e = ((w * w + c) * a + (np.int64(1) << (sh - 1))) >> sh
    return np.where(big, 0, e)


def igelu_constants() -> np.ndarray:
    """[C1, BC, A] of the polynomial GELU (module docstring), int32."""
    return np.array([round((1 << 16) / math.sqrt(2.0)), round(1.769 * (1 << IBERT_P)), round(-0.2888 * (1 << 16))],
                    dtype=np.int32)


def igelu_shifts(tx: FixedType, out: FixedType) -> tuple[int, int]:
    """(s, t) of the polynomial GELU: |x| C1 >> s onto 2^-14, v >> t into the output."""
    return tx.frac + 16 - IBERT_P, tx.frac + 2 * IBERT_P + 1 - out.frac


def igelu_codes(x: np.ndarray, tx: FixedType, out: FixedType, k: np.ndarray) -> np.ndarray:
    """The polynomial GELU's output codes (module docstring), int64."""
    c1, bc, a = (int(v) for v in np.asarray(k, dtype=np.int64))
    s, t = igelu_shifts(tx, out)
    x = np.asarray(x).astype(np.int64)
    ax = np.abs(x) * c1
    v = (ax + (np.int64(1) << (s - 1))) >> s if s > 0 else ax << -s
    w = np.minimum(v, bc) - bc
    lm = (np.int64(1) << (2 * IBERT_P)) + ((a * w * w) >> 16)
    y = x * ((np.int64(1) << (2 * IBERT_P)) + np.sign(x) * lm)
    y = (y + (np.int64(1) << (t - 1))) >> t
    return np.clip(y, out.min_code, out.max_code)


def per_element_variant(node: Node) -> str | None:
    """``activations.softmax: integer`` / ``activations.gelu: polynomial`` when ``node`` computes one
    (only the DAG mapping's kernels compute them: the chain's fused post, the CNN's post layer and a
    recurrent head refuse them naming this), else None."""
    v = getattr(node.types, "variant", None)
    if node.op == "softmax" and v == "integer":
        return "activations.softmax: integer"
    if node.op == "activation" and v == "polynomial":
        return "activations.gelu: polynomial"
    return None


# ----------------------------------------------------------------------------- types


@dataclass(frozen=True)
class ActivationTypes:
    input: NumericType
    output: NumericType
    variant: str  # "exact" | "hls4ml" | "table" (8-bit: a full table), "interpolated" (16-bit), "fp32" (the
    # fp32 kernel definition, apply_f32), "float" (float64 rounded to float32: GELU), "bf16_table"
    segment_bits: int = 0  # SEG of the interpolated variant (0: a full table)

    @property
    def is_float(self) -> bool:
        return isinstance(self.output, FloatType)

    @property
    def shift(self) -> int:  # the rows kernels' common config field (unused by these kernels)
        return 0


@dataclass(frozen=True)
class SoftmaxTypes:
    input: NumericType
    output: NumericType
    index_shift: int = 0  # SD
    table_size: int = 0  # n_E (the integer variant: its 5 constants)
    variant: str = "table"  # "table" | "integer" (SOFTMAX_VARIANTS)

    @property
    def is_float(self) -> bool:
        return isinstance(self.output, FloatType)

    @property
    def shift(self) -> int:
        return 0


def _act_types_to_json(t: ActivationTypes) -> dict:
    return {"input": t.input.to_string(), "output": t.output.to_string(), "variant": t.variant,
            "segment_bits": t.segment_bits}


def _act_types_from_json(d: dict) -> ActivationTypes:
    return ActivationTypes(parse_type(d["input"]), parse_type(d["output"]), str(d["variant"]), int(d["segment_bits"]))


def _softmax_types_to_json(t: SoftmaxTypes) -> dict:
    return {"input": t.input.to_string(), "output": t.output.to_string(), "index_shift": t.index_shift,
            "table_size": t.table_size, "variant": t.variant}


def _softmax_types_from_json(d: dict) -> SoftmaxTypes:
    return SoftmaxTypes(parse_type(d["input"]), parse_type(d["output"]), int(d["index_shift"]), int(d["table_size"]),
                        str(d.get("variant", "table")))


# ----------------------------------------------------------------------------- activation


def activation_table(function: str, attrs, tx: FixedType, out: FixedType, spec=None) -> tuple[np.ndarray, int]:
    """(int32 entries, SEG): the full table (SEG = 0) or the interpolation knots of a layer."""
    if tx.width <= 8:
        codes = np.arange(tx.min_code, tx.max_code + 1, dtype=np.int64)
        if isinstance(spec, tables.TableSpec):  # hls4ml's (or a custom) table, read at its index
            values = spec.values()[spec.index_of_codes(codes, tx.frac)]
        else:
            values = evaluate(function, attrs, fixed.dequantize(codes, tx))
        return fixed.quantize(values, out).astype(np.int32), 0
    seg = tx.width - SEGMENT_BITS
    knots = tx.min_code + (np.arange((1 << SEGMENT_BITS) + 1, dtype=np.int64) << seg)
    v = evaluate(function, attrs, fixed.dequantize(knots, tx))
    grid = FixedType(48, out.frac, True, Rounding.CONV_EVEN, Saturation.SATURATE)
    v = np.clip(fixed.quantize(np.clip(v, -2.0**40, 2.0**40), grid), -KNOT_LIMIT, KNOT_LIMIT)
    return v.astype(np.int32), seg


# ----------------------------------------------------------------------------- bf16 tables

BF16_MANTISSA = 128  # 7 stored mantissa bits
BF16_TABLE_LIMIT = 16384  # entries (32 KiB): half a tile's data memory at most
_F32_ALPHA = ("alpha",)


def _bf16_bits_of(x32: np.ndarray) -> np.ndarray:
    return (np.asarray(x32, dtype=np.float32).view(np.uint32) >> np.uint32(16)).astype(np.uint16)


def _rule(x32: np.ndarray, c1: float, c0: float) -> np.ndarray:
    """The kernel's rule outside the table window, as bf16 bit patterns."""
    if c1 == 0.0:
        return np.full(x32.shape, _bf16_bits_of(np.float32(c0)), dtype=np.uint16)
    with np.errstate(over="ignore", invalid="ignore"):
        y = (np.float32(c1) * x32).astype(np.float32) + np.float32(c0)
    return _bf16_bits_of(fixed.to_bf16(y.astype(np.float32)))


def bf16_table(function: str, attrs, negative_only: bool = False) -> tuple[np.ndarray, tuple[int, int], np.ndarray]:
    """(table of bf16 bit patterns as uint16, (E_LO, E_HI), rules float32 [4, 2]) of a bf16
    activation (module docstring).  Rules, in order: tiny negative, tiny positive, large negative,
    large positive (``c1``, ``c0``).  ``negative_only`` (softmax's exp): positive inputs never
    occur, they read the tiny positive rule."""
    u = np.arange(1 << 16, dtype=np.uint32)
    x32 = (u << np.uint32(16)).view(np.float32)
    e = ((u >> 7) & 0xFF).astype(np.int64)
    sign = (u >> 15).astype(np.int64)
    with np.errstate(all="ignore"):
        ref = _bf16_bits_of(fixed.to_bf16(evaluate(function, attrs, x32.astype(np.float64)).astype(np.float32)))
    if negative_only:
        ref = np.where(sign == 0, ref[0], ref)
    finite = e < 255
    zero = (u & 0x7FFF) == 0
    known = {**FUNCTIONS.get(function, ({}, ""))[0], **{k: v for k, v in attrs.items()}}
    slopes = [0.0, 1.0, 0.5] + [float(np.float32(known[k])) for k in _F32_ALPHA if k in known]
    if "gamma" in known:  # selu: gamma x above, gamma alpha x for tiny negative x
        slopes += [float(np.float32(known["gamma"])), float(np.float32(known["gamma"] * known["alpha"]))]
    rules = np.zeros((6, 2), dtype=np.float32)
    lo_of, hi_of = [], []

    def value(bits: int) -> float:
        return float(np.uint32(int(bits) << 16).view(np.float32))

    for s in (1, 0):
        sel = (sign == s) & finite & ~zero
        xs, rs, es = x32[sel], ref[sel], e[sel]
        best_lo, best_hi = (-1, None), (256, None)
        for side in ("tiny", "large"):
            probes = (0x0001, 0x0080, 0x0100) if side == "tiny" else (0x7F7F, 0x7F00, 0x6000)
            c0s = {value(ref[(s << 15) | p]) for p in probes}
            for c1 in slopes:
                for c0 in (sorted(c0s) if c1 == 0.0 else [-0.0]):
                    if not np.isfinite(c0):
                        continue
                    bad = np.zeros(256, dtype=bool)
                    bad[np.unique(es[_rule(xs, c1, c0) != rs])] = True
                    if side == "tiny":
                        lo = int(np.argmax(bad)) if bad.any() else 255  # exponents below all match
                        if lo > best_lo[0]:
                            best_lo = (lo, (c1, c0))
                    else:
                        hi = int(np.flatnonzero(bad).max()) if bad.any() else -1  # exponents above all match
                        if hi < best_hi[0]:
                            best_hi = (hi, (c1, c0))
        rules[1 - s] = best_lo[1]
        rules[3 - s] = best_hi[1]
        rules[5 - s] = (0.0, value(ref[s << 15]))  # +-0: their own result (signed zeros)
        lo_of.append(best_lo[0])
        hi_of.append(best_hi[0])
    e_lo = min(lo_of)
    e_hi = max(max(hi_of), e_lo)  # at least one exponent in the window
    idx = np.concatenate([(s << 15) | (np.arange(e_lo, e_hi + 1)[:, None] << 7) | np.arange(BF16_MANTISSA)[None, :]
                          for s in (0, 1)], axis=None)
    table = ref[idx.astype(np.int64)].astype(np.uint16)
    return table, (e_lo, e_hi), rules


def apply_bf16_table(x: np.ndarray, table: np.ndarray, window, rules: np.ndarray) -> np.ndarray:
    """The bf16 activation kernel (module docstring) on float32 values (rounded to bf16 first)."""
    x32 = fixed.to_bf16(np.asarray(x, dtype=np.float32))
    u = x32.view(np.uint32) >> np.uint32(16)
    e = ((u >> 7) & 0xFF).astype(np.int64)
    sign = (u >> 15).astype(np.int64)
    e_lo, e_hi = int(window[0]), int(window[1])
    ne = e_hi - e_lo + 1
    out = np.empty(x32.shape, dtype=np.uint16)
    inside = (e >= e_lo) & (e <= e_hi) & ((u & 0x7FFF) != 0)
    pos = sign * ne * BF16_MANTISSA + (np.clip(e, e_lo, e_hi) - e_lo) * BF16_MANTISSA + (u & 0x7F).astype(np.int64)
    out[inside] = np.asarray(table)[pos[inside]]
    zero = (u & 0x7FFF) == 0
    for r, sel in enumerate(((e < e_lo) & (sign == 1) & ~zero, (e < e_lo) & (sign == 0) & ~zero,
                             (e > e_hi) & (sign == 1), (e > e_hi) & (sign == 0), zero & (sign == 1),
                             zero & (sign == 0))):
        out[sel] = _rule(x32[sel], float(rules[r][0]), float(rules[r][1]))
    y = (out.astype(np.uint32) << np.uint32(16)).view(np.float32)
    return np.where(np.isnan(x32), x32, y).astype(np.float32)


def softmax_bf16(x: np.ndarray, table: np.ndarray, window, rules: np.ndarray,
                 keep: np.ndarray | None = None) -> np.ndarray:
    """The bf16 softmax kernel (module docstring), last axis, sequential float32 sum.  ``keep`` (a
    run-time key padding mask, broadcast to ``x``): the maximum over the kept values, a dropped value's
    exp is +0.0 (so its output is +0.0 and the sum is the kept values' sum in the same order), a row
    keeping none gives +0.0 everywhere (dag_kernels_bf16.h SoftmaxPaddedBf16)."""
    x32 = fixed.to_bf16(np.asarray(x, dtype=np.float32))
    k = None if keep is None else np.broadcast_to(np.asarray(keep, dtype=bool), x32.shape)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        if k is None:
            m = x32.max(axis=-1, keepdims=True)
        else:
            m = np.where(k, x32, -np.inf).max(axis=-1, keepdims=True).astype(np.float32)
            m = np.where(np.isfinite(m), m, np.float32(0.0)).astype(np.float32)  # no key kept: any m
        d = fixed.to_bf16((x32 - m).astype(np.float32))
        ev = apply_bf16_table(d, table, window, rules)
        if k is not None:
            ev = np.where(k, ev, np.float32(0.0)).astype(np.float32)
        s = np.zeros(ev.shape[:-1], dtype=np.float32)
        for j in range(ev.shape[-1]):
            s = (s + ev[..., j]).astype(np.float32)
        inv = (np.float32(1.0) / s).astype(np.float32)[..., None]
        y = fixed.to_bf16((ev * inv).astype(np.float32))
        if k is not None:
            y = np.where(k.any(axis=-1, keepdims=True), y, np.float32(0.0)).astype(np.float32)
        return y


def apply_table(codes: np.ndarray, table: np.ndarray, seg: int, tx: FixedType, out: FixedType) -> np.ndarray:
    u = np.asarray(codes).astype(np.int64) - tx.min_code
    t = np.asarray(table).astype(np.int64)
    if seg == 0:
        return t[u]
    i, r = u >> seg, u & ((1 << seg) - 1)
    v = t[i] + (((t[i + 1] - t[i]) * r + (1 << (seg - 1))) >> seg)
    return np.clip(v, out.min_code, out.max_code)


def _act_forward(node: Node, x: np.ndarray) -> np.ndarray:
    return evaluate(node.attrs["function"], node.attrs, x)


def _act_emulate(node: Node, x: np.ndarray) -> np.ndarray:
    t: ActivationTypes = node.types
    if t.is_float and t.output.name == "bf16":
        return apply_bf16_table(x, node.params["table"], node.params["window"], node.params["rules"])
    if t.is_float and t.variant == "fp32":
        return apply_f32(node.attrs["function"], node.attrs, x)
    if t.is_float:
        return evaluate(node.attrs["function"], node.attrs, np.asarray(x, dtype=np.float64)).astype(np.float32)
    if t.variant == "polynomial":
        return igelu_codes(x, t.input, t.output, node.params["table"])
    return apply_table(x, node.params["table"], t.segment_bits, t.input, t.output)


def _output_type(node: Node, ctx: QuantContext, tx: FixedType, bounded: float | None) -> tuple[FixedType, bool]:
    """(output type, whether the user / model gave it): the config's ``output``, a QDQ hint, the
    function's own bound (sigmoid, softmax: [0, 1]), or the calibration range."""
    from .dense import power_of_two_type

    out = ctx.layer.types.get("output") or ctx.hints.tensors.get(node.outputs[0])
    if out is not None:
        if not isinstance(out, FixedType) or out.width > 16 or out.frac > 40 or out.frac < -8:
            raise ConfigError(f"output type {out} of {node.op} layer must be fixed point of at most 16 bits",
                              layer=node.name, hint=f"set layers.{node.name}.output to e.g. fixed<8,1>")
        return out, True
    precision = ctx.layer.precision or ctx.config.precision
    width = _WIDTH.get(PRECISIONS[precision][0], tx.width)
    if bounded is not None:
        return FixedType(width, width - 1, True, Rounding.CONV_EVEN, Saturation.SATURATE), False
    calib = ctx.calibration.get(node.outputs[0])
    m = float(np.max(np.abs(calib))) if calib is not None and calib.size else 0.0
    if m == 0.0:  # no calibration reached it: the function's values over the input's range
        codes = np.array([tx.min_code, -1, 0, 1, tx.max_code], dtype=np.int64)
        m = float(np.max(np.abs(evaluate(node.attrs["function"], node.attrs, fixed.dequantize(codes, tx)))))
    return power_of_two_type(m, width, Rounding.CONV_EVEN, Saturation.SATURATE), False


def _variant_spec(ctx: QuantContext, key: str):
    """The layer's (else the config's) ``activations.<key>``, or None."""
    return ctx.layer.activations.get(key) or ctx.config.activations.get(key)


def _fixed_input(node: Node, tx, what: str) -> FixedType:
    if not isinstance(tx, FixedType) or tx.width > 16:
        raise ConfigError(f"{what} needs an 8- or 16-bit fixed-point input, got {tx}", layer=node.name,
                          hint="use precision int8, int16 or a16w8")
    return tx


def _act_quantise(node: Node, ctx: QuantContext) -> Node:
    (tx,) = ctx.input_types
    function = node.attrs["function"]
    check_function(function, node.attrs, node.name)
    if node.params.get("keep") is not None and isinstance(tx, FloatType):
        raise ConfigError(f"softmax '{node.name}' has an attention mask; masks are mapped in int8 / int16 only",
                          layer=node.name, hint="use precision int8 or int16")
    spec = _variant_spec(ctx, "gelu" if function in ("gelu", "gelu_tanh") else function)
    if isinstance(tx, FloatType) and isinstance(spec, tables.NamedVariant) and spec.name != "table":
        raise ConfigError(f"activations.gelu: {spec.name} is integer arithmetic; layer '{node.name}' computes in {tx}",
                          layer=node.name, hint="use precision int8 / int16 or activations.gelu: table")
    if isinstance(tx, FloatType) and tx.name == "bf16":
        table, window, rules = bf16_table(function, node.attrs)
        if table.size > BF16_TABLE_LIMIT:
            raise ConfigError(f"a bf16 {function} needs a table of {table.size} entries (exponents {window[0]}.."
                              f"{window[1]}), more than the {BF16_TABLE_LIMIT} a tile holds", layer=node.name,
                              hint="use precision int8 / int16 for this layer")
        return node.evolve(types=ActivationTypes(tx, tx, "bf16_table"),
                           params=dict(node.params, table=table, window=np.array(window, dtype=np.int64), rules=rules))
    if isinstance(tx, FloatType):
        return node.evolve(types=ActivationTypes(tx, tx, "fp32" if function in FP32_FUNCTIONS else "float"))
    tx = _fixed_input(node, tx, f"a {function} layer")
    bounded = 1.0 if function in ("sigmoid", "hard_sigmoid") else None
    out, _ = _output_type(node, ctx, tx, bounded)
    variant = "exact" if tx.width <= 8 else "interpolated"
    if isinstance(spec, tables.NamedVariant) and spec.name == "polynomial":
        return _igelu_quantise(node, ctx, tx, out)
    if isinstance(spec, tables.TableSpec):
        if tx.width > 8:
            raise ConfigError(
                f"activations.{function}: a lookup table on a {tx.width}-bit input is not generated (its index "
                "arithmetic per element); 16-bit inputs use the interpolated variant",
                layer=node.name, hint=f"remove activations.{function} or use precision int8")
        variant = spec.preset or "table"
    table, seg = activation_table(function, node.attrs, tx, out, spec)
    return node.evolve(types=ActivationTypes(tx, out, variant, seg), params=dict(node.params, table=table))


def _igelu_quantise(node: Node, ctx: QuantContext, tx: FixedType, out: FixedType) -> Node:
    where = f"activations.gelu: polynomial on layer '{node.name}'"
    if out.rounding != Rounding.CONV_EVEN or out.saturation != Saturation.SATURATE:
        raise ConfigError(f"{where} rounds half up and saturates; an output type with rounding {out.rounding.name} / "
                          f"saturation {out.saturation.name} is not computed", layer=node.name,
                          hint=f"give layers.{node.name}.output the default modes or use activations.gelu: table")
    s, t = igelu_shifts(tx, out)
    if not (-16 <= s and 1 <= t <= 56):
        raise ConfigError(f"{where}: input {tx} / output {out} put the shifts at {s} / {t} (needs s >= -16, "
                          "1 <= t <= 56)", layer=node.name, hint="use activations.gelu: table for this layer")
    return node.evolve(types=ActivationTypes(tx, out, "polynomial"), params=dict(node.params, table=igelu_constants()))


# ----------------------------------------------------------------------------- softmax


def softmax_index_shift(tx: FixedType) -> int:
    return max(0, tx.frac - 8)


def exp_table(tx: FixedType) -> tuple[np.ndarray, int]:
    """(E as int32, SD) of a softmax on inputs of type ``tx`` (module docstring)."""
    sd = softmax_index_shift(tx)
    span = (1 << tx.width) - 1  # the largest d = max - min
    n = (span >> sd) + 1
    k = np.arange(n, dtype=np.int64)
    t = (k << sd) + ((1 << (sd - 1)) if sd else 0)
    e = fixed.quantize(np.exp(-fixed.dequantize(t, tx)), FixedType(32, EXP_BITS, True, Rounding.CONV_EVEN,
                                                                   Saturation.SATURATE))
    zeros = np.flatnonzero(e == 0)
    if zeros.size:
        e = e[: zeros[0] + 1]
    return e.astype(np.int32), sd


def softmax_codes(x: np.ndarray, table: np.ndarray, sd: int, out: FixedType,
                  keep: np.ndarray | None = None, iexp_up: int | None = None) -> np.ndarray:
    """The softmax's codes: the exp table (``iexp_up`` None) or the integer exp on ``d << iexp_up``
    (``table`` its constants)."""
    x = np.asarray(x).astype(np.int64)
    t = np.asarray(table).astype(np.int64)
    k = np.ones(x.shape, dtype=bool) if keep is None else np.broadcast_to(np.asarray(keep, dtype=bool), x.shape)
    m = np.where(k, x, np.iinfo(np.int64).min).max(axis=-1, keepdims=True)
    d = np.where(k, m - x, 0)
    if iexp_up is None:
        e = np.where(k, t[np.minimum(d >> sd, t.size - 1)], 0)
    else:
        e = np.where(k, iexp_codes(d, iexp_up, t), 0)
    s = e.sum(axis=-1, keepdims=True)
    inv = np.where(s > 0, ((1 << RECIP_BITS) + s // 2) // np.maximum(s, 1), 0)  # S = 0: a row keeping no key gives 0
    y = (e * inv + (1 << (RECIP_BITS - 1 - out.frac))) >> (RECIP_BITS - out.frac)
    return np.minimum(y, out.max_code)


def sample_keep(node: Node, x: np.ndarray, mask: np.ndarray | None) -> np.ndarray | None:
    """The keep table of ``node``'s softmax over a batch ``x`` ``[N, ..., T_q, T_k]``: its constant
    ``params["keep"]`` and / or the run-time key padding mask ``mask`` ``[N, T_k]`` (keep bytes), or None."""
    keep = node.params.get("keep")
    if mask is None:
        return keep
    m = np.asarray(mask).reshape(x.shape[0], *(1,) * (x.ndim - 2), x.shape[-1]) != 0
    return m if keep is None else m & (np.asarray(keep) != 0)


def _softmax_forward(node: Node, x: np.ndarray, mask: np.ndarray | None = None) -> np.ndarray:
    keep = sample_keep(node, x, mask)
    if keep is None:
        return softmax_reference(x, keep)
    k = np.broadcast_to(np.asarray(keep, dtype=bool), x.shape)
    some = k.any(axis=-1, keepdims=True)  # a row keeping no key (run-time masks only) gives 0, as the emulator
    return np.where(some, softmax_reference(x, k | ~some), 0.0)


def _softmax_emulate(node: Node, x: np.ndarray, mask: np.ndarray | None = None) -> np.ndarray:
    t: SoftmaxTypes = node.types
    if t.is_float and t.output.name == "bf16":
        return softmax_bf16(x, node.params["table"], node.params["window"], node.params["rules"],
                            sample_keep(node, x, mask))
    if t.is_float:
        return softmax_f32(x)
    return softmax_codes(x, node.params["table"], t.index_shift, t.output, sample_keep(node, x, mask),
                         iexp_up(t.input.frac) if t.variant == "integer" else None)


def _softmax_quantise(node: Node, ctx: QuantContext) -> Node:
    tx = ctx.input_types[0]
    if len(ctx.input_types) > 1 and ctx.input_types[1] != MASK_TYPE:  # pragma: no cover - the quantise pass's own
        raise ConfigError(f"softmax '{node.name}' reads a mask of type {ctx.input_types[1]}", layer=node.name)
    if len(node.inputs) > 1 and isinstance(tx, FloatType) and tx.name != "bf16":  # bf16 + a constant mask: below
        raise ConfigError(f"softmax '{node.name}' has a run-time key padding mask; it is emulated in int8 / int16 "
                          f"and bf16 only, not in {tx}", layer=node.name, hint="use precision int8, int16 or bf16")
    if node.params.get("keep") is not None and isinstance(tx, FloatType):
        raise ConfigError(f"softmax '{node.name}' has an attention mask; masks are mapped in int8 / int16 only",
                          layer=node.name, hint="use precision int8 or int16")
    spec = _variant_spec(ctx, "softmax")
    if isinstance(tx, FloatType) and isinstance(spec, tables.NamedVariant) and spec.name != "table":
        raise ConfigError(f"activations.softmax: {spec.name} is integer arithmetic; softmax '{node.name}' computes in "
                          f"{tx}", layer=node.name, hint="use precision int8 / int16 or activations.softmax: table")
    if isinstance(tx, FloatType) and tx.name == "bf16":
        table, window, rules = bf16_table("exp", {}, negative_only=True)
        return node.evolve(types=SoftmaxTypes(tx, tx, 0, int(table.size)),
                           params=dict(node.params, table=table, window=np.array(window, dtype=np.int64), rules=rules))
    if isinstance(tx, FloatType):
        return node.evolve(types=SoftmaxTypes(tx, tx))
    tx = _fixed_input(node, tx, "softmax")
    out, given = _output_type(node, ctx, tx, 1.0)
    if not 0 <= out.frac <= 31:
        raise (ConfigError if given else PlanError)(
            f"softmax output type {out} needs 0..31 fractional bits (its values are in [0, 1])", layer=node.name,
            hint=f"set layers.{node.name}.output to a type like fixed<8,1>")
    n = int(node.attrs.get("features", 0)) or 1
    if n > 4096:
        raise ConfigError(f"softmax over {n} values: at most 4096 are exact in int64", layer=node.name)
    if isinstance(spec, tables.NamedVariant) and spec.name == "integer":
        if not -8 <= iexp_up(tx.frac) <= 24:
            raise ConfigError(f"activations.softmax: integer on layer '{node.name}': input {tx} has {tx.frac} fractional "
                              f"bits; the integer exp takes -10..22", layer=node.name,
                              hint="use activations.softmax: table for this layer")
        k = iexp_constants()
        return node.evolve(types=SoftmaxTypes(tx, out, 0, int(k.size), "integer"), params=dict(node.params, table=k))
    table, sd = exp_table(tx)
    return node.evolve(types=SoftmaxTypes(tx, out, sd, int(table.size)), params=dict(node.params, table=table))


ACTIVATION = OpFamily(
    name="activation", float_forward=_act_forward, emulate=_act_emulate, quantise=_act_quantise, plan=not_mapped,
    types_to_json=_act_types_to_json, types_from_json=_act_types_from_json,
)
SOFTMAX = OpFamily(
    name="softmax", float_forward=_softmax_forward, emulate=_softmax_emulate, quantise=_softmax_quantise,
    plan=not_mapped, types_to_json=_softmax_types_to_json, types_from_json=_softmax_types_from_json,
)
