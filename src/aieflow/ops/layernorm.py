"""Layer normalisation over the last (feature) axis: ``y = (x - mean) / sqrt(var + eps) * gamma + beta``.

Real MLP-Mixer blocks normalise before each MLP.  The integer algorithm below is what the layer
computes, bit for bit (emulation, and the DAG kernel ``LayerNorm`` of ``templates/dag/dag_kernels.h``,
which takes the per-row reciprocals 16 rows at a time in ``row_recip.h``).  It uses only integer
adds, multiplies, shifts, one integer square root and one integer division per row, all exact in
int64 for 8- and 16-bit inputs and up to 4096 features, which the kernel reproduces:

Per row of ``n`` codes ``x`` (``frac_x`` fractional bits):

1. ``S1 = sum x``, ``S2 = sum x^2``, ``V = n * S2 - S1^2`` (``= n^2 var`` in code units, exact, >= 0).
2. ``Q = V + E`` with ``E = round(n^2 * eps * 2^(2 frac_x))`` (a per-layer constant; eps in codes).
3. Normalise: ``G = (62 - bitlen(Q)) // 2`` (so ``Q << 2G`` has 61 or 62 bits),
   ``r = isqrt(Q << 2G)`` (floor), ``inv = round_half_up(2^P / r)`` with ``P = 46`` (a 16-bit
   reciprocal; 0 when ``r = 0``).
4. ``D_i = n x_i - S1``; ``z_i = round_conv_even(D_i * inv / 2^(P - G - Z))`` with ``Z = 20``
   fractional bits (``z ~ (x - mean) / sqrt(var + eps)``, ``|z| <= sqrt(n)``).  ``|D_i inv| <=
   sqrt(n) 2^(47 - G)`` because ``sum D_i^2 = n V``: no int64 overflow.
5. ``y_i = srs(z_i * gamma_i + beta_i, Z + frac_g - frac_y)`` with ``gamma`` as 16-bit codes and
   ``beta`` as codes on the product's grid (``Z + frac_g``), output rounding / saturation.

Relative error of the normalisation against exact arithmetic: below 2^-14 (the reciprocal), plus
the rounding of z (2^-21) and of the output.  fp32 computes the formula
in float32 in the order written (an emulation only); bf16 is the AIE-ML / AIE-MLv2 kernel's
float32 sequence, :func:`layernorm_bf16`.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from ..config import PRECISIONS
from ..errors import ConfigError, ModelError, PlanError
from ..ir import Node
from ..numerics import fixed
from ..numerics.types import FixedType, FloatType, NumericType, Rounding, Saturation, parse_type
from .base import OpFamily, QuantContext, not_mapped, require_shift

P_BITS = 46  # reciprocal 2^P / r with r in [2^30, 2^31): a 16-bit inverse
Z_FRAC = 20  # fractional bits of the normalised value z
GAMMA_BITS = 16
_WIDTH = {"i8": 8, "i16": 16}


@dataclass(frozen=True)
class LayerNormTypes:
    input: NumericType
    gamma: NumericType
    beta: NumericType  # on the grid of z * gamma (Z_FRAC + gamma.frac)
    output: NumericType
    eps_code: int  # E = round(n^2 eps 2^(2 frac_x))
    shift: int  # Z_FRAC + gamma.frac - output.frac

    @property
    def is_float(self) -> bool:
        return isinstance(self.output, FloatType)


def _types_to_json(t: LayerNormTypes) -> dict:
    return {"input": t.input.to_string(), "gamma": t.gamma.to_string(), "beta": t.beta.to_string(),
            "output": t.output.to_string(), "eps_code": t.eps_code, "shift": t.shift}


def _types_from_json(d: dict) -> LayerNormTypes:
    return LayerNormTypes(parse_type(d["input"]), parse_type(d["gamma"]), parse_type(d["beta"]),
                          parse_type(d["output"]), int(d["eps_code"]), int(d["shift"]))


def float_forward(node: Node, x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    y = (x - mean) / np.sqrt(var + float(node.attrs["eps"]))
    return y * node.params["gamma"].astype(np.float64) + node.params["beta"].astype(np.float64)


def isqrt(q: np.ndarray) -> np.ndarray:
    """Floor square root of non-negative int64 values below 2^62, exactly (float guess, then
    integer correction)."""
    q = np.asarray(q, dtype=np.int64)
    r = np.floor(np.sqrt(q.astype(np.float64))).astype(np.int64)
    for _ in range(3):
        r = np.where(r * r > q, r - 1, r)
        r = np.where((r + 1) * (r + 1) <= q, r + 1, r)
    return r


def bit_length(q: np.ndarray) -> np.ndarray:
    """Bits needed for non-negative int64 values (0 for 0)."""
    q = np.asarray(q, dtype=np.int64)
    return sum(((q >> k) > 0).astype(np.int64) for k in range(63))


def normalise_codes(x: np.ndarray, eps_code: int) -> np.ndarray:
    """Steps 1-4: the normalised value z of every element, ``Z_FRAC`` fractional bits (int64)."""
    x = np.asarray(x).astype(np.int64)
    n = x.shape[-1]
    s1 = x.sum(axis=-1, keepdims=True)
    s2 = (x * x).sum(axis=-1, keepdims=True)
    q = n * s2 - s1 * s1 + eps_code
    g = (62 - bit_length(q)) // 2
    r = isqrt(q << (2 * g))
    safe = np.maximum(r, 1)
    inv = np.where(r > 0, ((1 << P_BITS) + safe // 2) // safe, 0)
    d = n * x - s1
    shift = P_BITS - g - Z_FRAC  # >= 46 - 31 - 20: may be negative (an exact left shift)
    num = d * inv
    left = np.maximum(-shift, 0)
    den = np.left_shift(np.int64(1), np.maximum(shift, 0))
    return fixed.round_divide(num << left, np.broadcast_to(den, num.shape), Rounding.CONV_EVEN)


def layernorm_bf16(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, eps: np.float32) -> np.ndarray:
    """The bf16 kernel (``dag_kernels_bf16.h`` ``LayerNormBf16``), every step one float32 operation
    in this order: ``S = sum x_i`` (increasing i), ``mu = S / n``, ``c_i = x_i - mu``,
    ``V = sum c_i c_i`` (increasing i), ``var = V / n``, ``r = 1 / sqrt(var + eps)``,
    ``y_i = bf16((c_i r) gamma_i + beta_i)``."""
    xf = fixed.to_bf16(np.asarray(x, dtype=np.float32))
    n = xf.shape[-1]
    f32 = np.float32
    with np.errstate(all="ignore"):
        s = np.zeros(xf.shape[:-1], dtype=f32)
        for i in range(n):
            s = (s + xf[..., i]).astype(f32)
        mu = (s / f32(n)).astype(f32)[..., None]
        c = (xf - mu).astype(f32)
        v = np.zeros(xf.shape[:-1], dtype=f32)
        for i in range(n):
            v = (v + (c[..., i] * c[..., i]).astype(f32)).astype(f32)
        var = (v / f32(n)).astype(f32)
        r = (f32(1) / np.sqrt((var + eps).astype(f32)).astype(f32)).astype(f32)[..., None]
        y = (((c * r).astype(f32) * np.asarray(gamma, f32)).astype(f32) + np.asarray(beta, f32)).astype(f32)
    return fixed.to_bf16(y)


def emulate(node: Node, x: np.ndarray) -> np.ndarray:
    t: LayerNormTypes = node.types
    if t.is_float and t.output.name == "bf16":
        return layernorm_bf16(x, node.params["gamma_q"], node.params["beta_q"], np.float32(node.attrs["eps"]))
    if t.is_float:
        eps = np.float32(node.attrs["eps"])
        xf = np.asarray(x, dtype=np.float32)
        mean = xf.mean(axis=-1, keepdims=True, dtype=np.float32)
        c = xf - mean
        var = (c * c).mean(axis=-1, keepdims=True, dtype=np.float32)
        y = c / np.sqrt(var + eps) * node.params["gamma_q"] + node.params["beta_q"]
        y = y.astype(np.float32)
        return fixed.to_bf16(y) if t.output.name == "bf16" else y
    z = normalise_codes(x, t.eps_code)
    acc = z * node.params["gamma_q"].astype(np.int64) + node.params["beta_q"].astype(np.int64)
    return fixed.srs(acc, t.shift, t.output)


def quantise(node: Node, ctx: QuantContext) -> Node:
    from .dense import power_of_two_type

    (tx,) = ctx.input_types
    gamma = node.params["gamma"].astype(np.float64)
    beta = node.params["beta"].astype(np.float64)
    n = int(gamma.shape[0])
    if isinstance(tx, FloatType):
        gq, bq = gamma.astype(np.float32), beta.astype(np.float32)
        if tx.name == "bf16":
            gq, bq = fixed.to_bf16(gq), fixed.to_bf16(bq)
        return node.evolve(types=LayerNormTypes(tx, tx, tx, tx, 0, 0), params=dict(node.params, gamma_q=gq, beta_q=bq))
    if not isinstance(tx, FixedType) or tx.width > 16:
        raise ConfigError(f"layer normalisation needs an 8- or 16-bit fixed-point input, got {tx}", layer=node.name)
    if n > 4096:
        raise ConfigError(f"layer normalisation over {n} features: at most 4096 are exact in int64",
                          layer=node.name)
    precision = ctx.layer.precision or ctx.config.precision
    act_kind, _ = PRECISIONS[precision]
    g_type = power_of_two_type(float(np.max(np.abs(gamma))) if n else 0.0, GAMMA_BITS, Rounding.CONV_EVEN,
                               Saturation.SATURATE)
    prod_frac = Z_FRAC + g_type.frac
    b_type = FixedType(48, prod_frac, True, Rounding.CONV_EVEN, Saturation.SATURATE)
    out = ctx.layer.types.get("output") or ctx.hints.tensors.get(node.outputs[0])
    if out is None:
        calib = ctx.calibration.get(node.outputs[0])
        m = float(np.max(np.abs(calib))) if calib is not None and calib.size else float(np.sqrt(n)) * float(
            np.max(np.abs(gamma), initial=0.0)) + float(np.max(np.abs(beta), initial=0.0))
        out = power_of_two_type(m, _WIDTH.get(act_kind, tx.width), Rounding.CONV_EVEN, Saturation.SATURATE)
    if not isinstance(out, FixedType) or out.width > 32 or out.frac > prod_frac:
        raise ConfigError(f"output type {out} of the layer norm must be fixed point, <= 32 bits, "
                          f"<= {prod_frac} fractional bits", layer=node.name)
    explicit = "output" in ctx.layer.types
    require_shift(
        ctx.device.generation, prod_frac - out.frac, "output shift", upshift=False, layer=node.name,
        error=ConfigError if explicit else ModelError if node.outputs[0] in ctx.hints.tensors else PlanError,
        why=f"normalised value x gamma has {prod_frac} fractional bits, output {out} {out.frac}",
        hint=f"give the output at least {prod_frac - ctx.device.generation.srs_shift_max} fractional bits"
        + (f" in layers.{node.name}.output" if explicit else " (layers.<name>.output)"),
    )
    eps = Fraction(float(node.attrs["eps"])) * n * n * Fraction(2) ** (2 * tx.frac)
    eps_code = int(eps + Fraction(1, 2)) if eps >= 0 else 0  # round half up
    if eps_code >= 1 << 60:
        raise ConfigError(f"eps={node.attrs['eps']} is too large for the input scale", layer=node.name)
    types = LayerNormTypes(tx, g_type, b_type, out, eps_code, prod_frac - out.frac)
    params = dict(node.params, gamma_q=fixed.quantize(gamma, g_type), beta_q=fixed.quantize(beta, b_type))
    return node.evolve(types=types, params=params)


LAYERNORM = OpFamily(
    name="layernorm",
    float_forward=float_forward,
    emulate=emulate,
    quantise=quantise,
    plan=not_mapped,
    types_to_json=_types_to_json,
    types_from_json=_types_from_json,
)
