"""Dense (fully connected) layers: y = act(x W + b), the AIE4ML-style ``aie::mmul`` kernel.

Numerics (what the generated kernel computes, and so what :func:`emulate` reproduces):

* integer: ``acc = wrap_acc(sum_k x_k w_k + (b << bias_shift))``, then SRS by ``shift`` into the
  output type (its rounding and saturation), then ReLU as ``max(y, 0)`` *after* SRS (this matters
  only for WRAP outputs, where it is the kernel's order).  Partial sums travel the cascade at full
  accumulator width, so splitting K over tiles never changes the result (wrap is modular).
* fp32 (AIE1): each multiply and add rounded to float32, accumulated in increasing k from the bias.
* bf16 (AIE-ML): operands rounded to bf16, products exact in float32, float32 accumulation in
  increasing k, output rounded to bf16 (round to nearest even).

Layer scaling (dense-on-aie-ml.md): a ``cas_num`` x ``cas_len`` rectangle of tiles; the ``cas_len``
tiles of a cascade row split the input features, the ``cas_num`` rows split the output features.
Each tile holds its ``k_slice`` x ``n_slice`` weight block resident in local memory.

Data layout on every kernel port is the *panel* layout ``[slice / P][batch_pad][P]``: for the input
``P`` is the mmul ``K``, so each ``M x K`` block of A is contiguous; outputs use the panel width the
consumer needs (see :class:`DensePlan.out_panel`).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace
from fractions import Fraction

import numpy as np

from ..config import PRECISIONS
from ..errors import ConfigError, ModelError, PlanError
from ..ir import Node
from ..numerics import fast, fixed, requant
from ..numerics.types import (
    FLOAT_C_TYPES,
    AffineType,
    FixedType,
    FloatType,
    NumericType,
    Rounding,
    Saturation,
    type_from_json,
)
from .base import OpFamily, PlanContext, QuantContext, require_shift
from .post import post_kind

ALIGN = 32  # bytes: AIE vector loads want 32-byte aligned buffers (dense-on-aie-ml.md)


# ----------------------------------------------------------------------------- types


@dataclass(frozen=True)
class DenseTypes:
    input: NumericType
    weight: NumericType
    bias: NumericType | None
    output: NumericType
    acc_bits: int  # 0 for float accumulation
    shift: int  # SRS right shift from accumulator to output
    bias_shift: int  # left shift applied when the bias is loaded into the accumulator

    @property
    def is_float(self) -> bool:
        return isinstance(self.weight, FloatType)

    @property
    def pair(self) -> tuple[str, str]:
        return (kind_of(self.input), kind_of(self.weight))

    @property
    def acc_frac(self) -> int:
        assert isinstance(self.input, FixedType) and isinstance(self.weight, FixedType)
        return self.input.frac + self.weight.frac


def kind_of(t: NumericType) -> str:
    """The operand kind the device catalog keys its MAC rates and mmul shapes by: ``i4`` for signed
    codes of at most 4 bits (held packed two per byte), else the container (``i8``, ``i16`` ...)."""
    if isinstance(t, FloatType):
        return t.name
    if isinstance(t, FixedType) and t.signed and t.width <= 4:
        return "i4"
    return f"i{t.container_bits}"


ELEMENT_BITS = {"i4": 4}  # bits a weight code takes in memory, where not its container's


def element_bits(t: NumericType) -> int:
    """Bits one code of ``t`` takes in a kernel's memory (4 for packed int4 weights)."""
    return ELEMENT_BITS.get(kind_of(t), t.container_bits)


def pack_int4(codes: np.ndarray) -> np.ndarray:
    """Signed 4-bit codes, two per byte as the AIE API's ``int4`` vectors hold them (element 2i in
    the low nibble of byte i, 2i + 1 in the high one), returned as the bytes' int8 values."""
    c = np.asarray(codes, dtype=np.int64).reshape(-1)
    if c.size % 2:
        raise ValueError("int4 packing needs an even number of codes")
    if c.size and (c.min() < -8 or c.max() > 7):
        raise ValueError("int4 codes must lie in -8..7")
    lo, hi = c[0::2] & 0xF, c[1::2] & 0xF
    b = lo | (hi << 4)
    return np.where(b >= 128, b - 256, b).astype(np.int64)


def _types_to_json(t: DenseTypes) -> dict:
    return {
        "input": t.input.to_string(),
        "weight": t.weight.to_string(),
        "bias": t.bias.to_string() if t.bias is not None else None,
        "output": t.output.to_string(),
        "acc_bits": t.acc_bits,
        "shift": t.shift,
        "bias_shift": t.bias_shift,
    }


def _types_from_json(d: dict) -> DenseTypes:
    return DenseTypes(
        type_from_json(d["input"]),
        type_from_json(d["weight"]),
        type_from_json(d["bias"]) if d.get("bias") else None,
        type_from_json(d["output"]),
        int(d["acc_bits"]),
        int(d["shift"]),
        int(d["bias_shift"]),
    )


# ----------------------------------------------------------------------------- float reference


def float_forward(node: Node, x: np.ndarray) -> np.ndarray:
    y = x.astype(np.float64) @ node.params["weight"].astype(np.float64)
    if "bias" in node.params:
        y = y + node.params["bias"].astype(np.float64)
    if node.attrs.get("activation") == "relu":
        y = np.maximum(y, 0.0)
    return y


# ----------------------------------------------------------------------------- quantise


def power_of_two_type(max_abs: float, width: int, rounding: Rounding, saturation: Saturation) -> FixedType:
    """Finest power-of-two scale at which ``max_abs`` still fits ``width`` signed bits.

    frac = floor(log2((2^(width-1) - 1) / max_abs)): the calibration maximum maps to at most the
    largest code, so calibration data never saturates.
    """
    top = (1 << (width - 1)) - 1
    if not np.isfinite(max_abs):
        raise ConfigError("calibration data contains inf or NaN")
    if max_abs <= 0:
        frac = width - 1
    else:
        frac = math.floor(math.log2(top / max_abs))
        while top * 2.0 ** (-frac) < max_abs:  # guard log2 rounding
            frac -= 1
        while top * 2.0 ** (-(frac + 1)) >= max_abs:
            frac += 1
    return FixedType(width, frac, True, rounding, saturation)


_WIDTH = {"i4": 4, "i8": 8, "i16": 16}


def quantise(node: Node, ctx: QuantContext) -> Node:
    """Choose the layer's numeric types and integer parameter codes.

    Priority per type: explicit config type > type the model carries (QDQ) > PTQ from calibration.
    """
    name = node.name
    lc = ctx.layer
    precision = lc.precision or ctx.config.precision
    act_kind, w_kind = PRECISIONS[precision]
    in_type = ctx.input_types[0]
    gen = ctx.device.generation
    w = node.params["weight"]
    b = node.params.get("bias")

    hls_text = ctx.config.weights_rounding == "hls4ml"
    if hls_text and act_kind in FLOAT_C_TYPES:
        raise ConfigError(f"config option 'weights_rounding: hls4ml' rounds weights into fixed-point types; this "
                          f"layer's precision is {precision}", layer=name,
                          hint="leave weights_rounding out, or use a fixed-point precision (int8, int16, a16w8)")
    if act_kind in FLOAT_C_TYPES:
        if act_kind not in gen.float_types:
            raise ConfigError(
                f"precision {precision} is not available on {ctx.device.board} ({gen.name}); "
                f"use {', '.join(sorted(gen.float_types) + ['int8', 'int16'])}",
                layer=name,
            )
        ft = FloatType(act_kind)
        if not isinstance(in_type, FloatType) or in_type != ft:
            raise ConfigError(
                f"input is {in_type} but the layer's precision is {precision}; mixing float and "
                "fixed-point layers needs a conversion layer aieflow does not insert yet",
                layer=name,
                hint="use the same precision for all layers",
            )
        types = DenseTypes(ft, ft, ft if b is not None else None, ft, 0, 0, 0)
        wq = w.astype(np.float32)
        bq = b.astype(np.float32) if b is not None else None
        # PTQ to a float type is a cast: round-to-nearest-even into bf16 / fp16 (no calibration)
        wq = fixed.round_float(wq, act_kind)
        bq = fixed.round_float(bq, act_kind) if bq is not None else None
        params = dict(node.params, weight_q=wq)
        if bq is not None:
            params["bias_q"] = bq
        return node.evolve(types=types, params=params)

    if _affine_layer(node, ctx, in_type):
        if hls_text:
            raise ConfigError("config option 'weights_rounding: hls4ml' applies to float weights rounded into "
                              "fixed-point types; this layer's weights are float-scale (affine) codes the model carries",
                              layer=name, hint="leave weights_rounding out for this model")
        return quantise_affine(node, ctx, in_type)
    if not isinstance(in_type, FixedType):
        raise ConfigError(
            f"input is {in_type} but the layer's precision is {precision}",
            layer=name,
            hint="use the same precision for all layers",
        )
    width_w = _WIDTH[w_kind]

    def hinted(key: str) -> NumericType | None:
        for n in (name, *node.aliases):
            if (n, key) in ctx.hints.params:
                return ctx.hints.params[(n, key)]
        return None

    def pick(key: str, default: FixedType) -> FixedType:
        t = lc.types.get(key) or hinted(key) or default
        if not isinstance(t, FixedType):
            raise ConfigError(f"{key} type {t} is not fixed point, but the precision is {precision}", layer=name)
        return t

    w_type = pick("weight", power_of_two_type(float(np.max(np.abs(w))) if w.size else 0.0, width_w, Rounding.CONV_EVEN, Saturation.SATURATE))
    q_type = w_type  # the codes are made in the type given; a 4-bit type may be held in 8 bits below
    narrow = kind_of(w_type) == "i4"
    if not narrow and w_type.width not in (8, 16):
        if not w_type.signed or w_type.width > 16:
            raise ConfigError(f"weight type {w_type} must be signed and at most 16 bits wide on the AI Engine (8- or "
                              "16-bit multiplies; signed 4-bit ones with 8-bit activations on AIE-ML / AIE-MLv2)",
                              layer=name)
        # a signed 5..7 / 9..15-bit type (QKeras' quantized_bits(6, 0) is hls4ml's ap_fixed<6,1>): the
        # codes are made in it (q_type) and are exact in the 8- / 16-bit container the multiply reads
        w_type = FixedType(8 if w_type.width < 8 else 16, w_type.frac, True, w_type.rounding, w_type.saturation)
    if narrow and (kind_of(in_type), "i4") not in gen.mmul_shapes:
        if w_kind == "i4":
            raise ConfigError(
                f"precision {precision} (4-bit weights) needs an int8 x int4 matrix multiply, which {gen.name} "
                f"({ctx.device.board}) does not have" + ("" if kind_of(in_type) == "i8" else
                                                        f" for this layer's {kind_of(in_type)} input"),
                layer=name,
                hint="use precision int8 (4-bit weights run on AIE-ML / AIE-MLv2: vek280, vek385)",
            )
        # a 4-bit weight type from the model or config: its codes are exact in 8 bits
        w_type = FixedType(8, w_type.frac, True, w_type.rounding, w_type.saturation)
    pair = (kind_of(in_type), kind_of(w_type))
    if pair not in gen.mmul_shapes:
        supported = ", ".join(f"{a}x{b}" for a, b in gen.mmul_shapes if not a.startswith(("fp", "bf")))
        raise ConfigError(
            f"activation x weight types {pair[0]} x {pair[1]} have no matrix-multiply mode on {gen.name}; "
            f"supported: {supported}",
            layer=name,
        )
    acc_frac = in_type.frac + w_type.frac
    acc_bits = gen.accumulators[pair]

    # Output: explicit > QDQ hint on the output tensor > PTQ from calibration.
    out_tensor = node.outputs[0]
    out_type = lc.types.get("output") or ctx.hints.tensors.get(out_tensor)
    if out_type is None:
        if out_tensor in ctx.calibration:
            m = float(np.max(np.abs(ctx.calibration[out_tensor]))) if ctx.calibration[out_tensor].size else 0.0
            out_type = power_of_two_type(m, _WIDTH[act_kind], Rounding.CONV_EVEN, Saturation.SATURATE)
            if out_type.frac > acc_frac:  # no finer than the accumulator: the extra bits are zeros
                out_type = FixedType(out_type.width, acc_frac, True, out_type.rounding, out_type.saturation)
        else:
            # A graph output the model leaves unquantised (QDQ without a final Q): keep the full
            # accumulator precision in a 32-bit output, as the float reference does.
            out_type = FixedType(32, acc_frac, True, Rounding.CONV_EVEN, Saturation.SATURATE)
    if not isinstance(out_type, FixedType):
        raise ConfigError(f"output type {out_type} is not fixed point", layer=name)
    if out_type.width > 32:
        raise ConfigError(f"output type {out_type} is wider than 32 bits", layer=name)
    shift = acc_frac - out_type.frac
    if shift < 0:
        raise ConfigError(
            f"output type {out_type} has {out_type.frac} fractional bits, more than the accumulator's "
            f"{acc_frac} (input {in_type.frac} + weight {w_type.frac}); SRS cannot shift left",
            layer=name,
            hint=f"use at most {acc_frac} fractional bits for the output",
        )
    if out_type.rounding not in gen.rounding_modes:
        raise ConfigError(
            f"rounding mode {out_type.rounding.value} is not available on {gen.name}",
            layer=name,
            hint="AIE1 has no symmetric floor/ceil (TRN_ZERO); use TRN, RND or RND_CONV",
        )
    # Who chose the types a shift comes from: the config, the model (QDQ) or calibration (PTQ).
    explicit = [k for k in ("input", "weight", "bias", "output") if k in lc.types]
    qdq = hinted("weight") is not None or hinted("bias") is not None or out_tensor in ctx.hints.tensors
    blame = ConfigError if explicit else ModelError if qdq else PlanError
    change = (
        f"change {', '.join(f'layers.{name}.{k}' for k in explicit)}" if explicit
        else "the model's QDQ scales give it" if qdq
        else "calibration chose these types: calibrate with data of the range the model will see, or give "
        f"explicit types (layers.{name}.input / .output)"
    )
    need = acc_frac - gen.srs_shift_max  # fewest output fractional bits the SRS reaches
    require_shift(
        gen, shift, "output shift", upshift=False, layer=name, error=blame,
        why=f"accumulator {acc_frac} fractional bits = input {in_type.frac} + weight {w_type.frac}, "
        f"output {out_type} {out_type.frac}",
        hint=f"the output needs at least {need} fractional bits (fixed<{out_type.width},{out_type.width - need}> "
        f"or fewer integer bits); {change}",
    )

    if hls_text and (hinted("weight") is not None or hinted("bias") is not None):
        raise ConfigError("config option 'weights_rounding: hls4ml' applies to float weights rounded into "
                          "fixed-point types; this layer's weights carry their own quantised (QDQ / QONNX) codes",
                          layer=name, hint="leave weights_rounding out for this model")
    # hls4ml's C simulation reads its weights from decimal text (numerics/fixed.hls4ml_text_values)
    wq = fixed.quantize(fixed.hls4ml_text_values(w, q_type) if hls_text else w, q_type)
    if hinted("weight") is not None and not np.array_equal(fixed.dequantize(wq, q_type), w):
        raise ConfigError("weights do not lie on the grid of their QDQ type", layer=name)

    bias_type = None
    bias_shift = 0
    bq = None
    if b is not None:
        default_bias = FixedType(32, acc_frac, True, Rounding.CONV_EVEN, Saturation.SATURATE)
        if not lc.types.get("bias") and hinted("bias") is None:
            m = float(np.max(np.abs(b))) if b.size else 0.0
            fit = power_of_two_type(m, 32, Rounding.CONV_EVEN, Saturation.SATURATE)
            default_bias = fit if fit.frac < acc_frac else default_bias
        bias_type = pick("bias", default_bias)
        bias_codes_type = bias_type
        if bias_type.width < 8:  # a 4-bit bias (QONNX): its codes are exact in the int8 bias blocks
            bias_type = FixedType(8, bias_type.frac, bias_type.signed, bias_type.rounding, bias_type.saturation)
        bias_shift = acc_frac - bias_type.frac
        if bias_shift < 0:
            raise ConfigError(
                f"bias type {bias_type} has more fractional bits ({bias_type.frac}) than the accumulator "
                f"({acc_frac}); the sum cannot be formed exactly",
                layer=name,
                hint=f"use a bias type with at most {acc_frac} fractional bits (scale = input scale x weight scale)",
            )
        if bias_type.width > 32:
            raise ConfigError(f"bias type {bias_type} is wider than 32 bits", layer=name)
        require_shift(
            gen, bias_shift, "bias shift", upshift=True, layer=name, error=blame,
            why=f"accumulator {acc_frac} fractional bits, bias {bias_type} {bias_type.frac}",
            hint=f"the bias needs at least {acc_frac - gen.ups_shift_max} fractional bits; {change}",
        )
        bq = fixed.quantize(fixed.hls4ml_text_values(b, bias_codes_type) if hls_text else b, bias_codes_type)
    if acc_bits == 32 and pair == ("i16", "i8"):
        bound = fixed.max_abs_accumulation(w.shape[0], in_type, w_type)
        if bq is not None:
            bound += int(np.max(np.abs(bq))) << bias_shift if bq.size else 0
        if bound >= 1 << 31:
            acc_bits = 64  # AIE-ML offers acc64 for 16x8: use it when acc32 could wrap
    types = DenseTypes(in_type, w_type, bias_type, out_type, acc_bits, shift, bias_shift)
    params = dict(node.params, weight_q=wq)
    if bq is not None:
        params["bias_q"] = bq
    return node.evolve(types=types, params=params)


def _hint(node: Node, ctx: QuantContext, key: str) -> NumericType | None:
    for n in (node.name, *node.aliases):
        if (n, key) in ctx.hints.params:
            return ctx.hints.params[(n, key)]
    return None


def _affine_layer(node: Node, ctx: QuantContext, in_type: NumericType) -> bool:
    """Whether the model quantises this layer with float scales / zero points (onnxruntime
    ``quantize_static``): its input, weight, bias or output carries an :class:`AffineType`."""
    out = ctx.hints.tensors.get(node.outputs[0])
    return any(isinstance(t, AffineType) for t in (in_type, out, _hint(node, ctx, "weight"), _hint(node, ctx, "bias")))


def _as_affine(t: NumericType | None) -> AffineType | None:
    """A power-of-two fixed-point type (zero point 0, half-to-even, saturating) as an affine one."""
    if isinstance(t, AffineType):
        return t
    if (isinstance(t, FixedType) and t.width in (8, 16, 32) and t.rounding is Rounding.CONV_EVEN
            and t.saturation is Saturation.SATURATE and -126 <= -t.frac <= 127):
        return AffineType(t.width, t.signed, (2.0 ** -t.frac,), 0)
    return None


def quantise_affine(node: Node, ctx: QuantContext, in_type: NumericType) -> Node:
    """A layer with float scales and zero points, as the model gives them (numerics/requant.py):
    integer codes, the input zero point folded into the bias, requantisation by a per-channel
    integer multiplier and one shift (``rq_mult``, ``DenseTypes.shift``)."""
    name = node.name
    gen = ctx.device.generation
    hint = ("quantise the whole model with onnxruntime quantize_static (QDQ, per tensor or per channel), or give "
            "every input, weight and output a Brevitas quantiser (e.g. the last QuantLinear an output_quant)")
    if ctx.layer.types:
        raise ConfigError(f"layers.{name} gives types ({', '.join(sorted(ctx.layer.types))}) for a layer the model "
                          "quantises with float scales; the model's quantisation is taken as it is",
                          layer=name, hint=f"remove layers.{name}.{next(iter(sorted(ctx.layer.types)))}")
    x_t = _as_affine(in_type)
    w_t = _as_affine(_hint(node, ctx, "weight"))
    out_hint = ctx.hints.tensors.get(node.outputs[0])
    y_t = _as_affine(out_hint)
    for what, t, given in (("input", x_t, in_type), ("weight", w_t, _hint(node, ctx, "weight")), ("output", y_t, out_hint)):
        if t is None:
            raise ModelError(f"the layer is quantised with float scales but its {what} is "
                             f"{'not quantised' if given is None else given}; every input, weight and output of "
                             "such a layer needs a QuantizeLinear / DequantizeLinear pair", layer=name, hint=hint)
    if x_t.per_channel or y_t.per_channel:  # pragma: no cover - the importer refuses them
        raise ModelError("per-channel activation scales", layer=name)
    w = node.params["weight"]
    n_out = w.shape[1]
    if "weight_codes" in node.params:
        wq = np.asarray(node.params["weight_codes"], dtype=np.int64)
    else:  # a power-of-two weight next to float-scale activations: its exact codes
        wq = fixed.quantize(w, _hint(node, ctx, "weight"))
    s_w = w_t.scale if w_t.per_channel else w_t.scale * n_out
    pair = (kind_of(in_type), kind_of(w_t))
    if pair not in gen.mmul_shapes:
        raise ModelError(f"activation x weight codes {x_t.c_type} x {w_t.c_type} have no matrix-multiply mode on "
                         f"{gen.name}", layer=name, hint="quantise activations and weights to 8 or 16 bits")
    acc_bits = gen.accumulators[pair]
    ratio = requant.ratios(x_t.scale[0], s_w, y_t.scale[0])

    b_t = _hint(node, ctx, "bias")
    if "bias_codes" in node.params:
        bq = np.asarray(node.params["bias_codes"], dtype=np.int64)
        for n, (sb, sw) in enumerate(zip(b_t.scale, s_w, strict=True)):
            exact = Fraction(x_t.scale[0]) * Fraction(sw)
            if abs(Fraction(sb) - exact) > Fraction(sb) / (1 << 23):
                raise ModelError(f"bias scale {sb!r} of output {n} is not input scale x weight scale "
                                 f"({float(exact)!r}); the bias cannot be added to the exact accumulator",
                                 layer=name, hint=hint)
    elif "bias" in node.params:
        # A float bias (Brevitas' default bias_quant=None): int32 codes at input scale x weight scale,
        # rounded half to even from the exact rationals, as onnxruntime's quantize_static quantises biases
        # (docs/quantisation.md: where this can differ from a framework that adds the bias in float).
        b = np.asarray(node.params["bias"], dtype=np.float64).reshape(-1)
        bq = np.array([round(Fraction(float(v)) / (Fraction(x_t.scale[0]) * Fraction(sw)))  # half to even
                       for v, sw in zip(b, s_w, strict=True)], dtype=object)
        if bq.size and max(abs(int(v)) for v in bq) >= 1 << 31:
            raise ModelError("the float bias does not fit int32 codes at input scale x weight scale", layer=name,
                             hint="quantise the bias (Brevitas Int32Bias) or use coarser input / weight scales")
        bq = bq.astype(np.int64)
    else:
        bq = np.zeros(n_out, dtype=np.int64)
    # The input zero point, folded: sum_k (x_k - z_x) w_kn = sum_k x_k w_kn - z_x sum_k w_kn.
    bq = bq - x_t.zero_point * wq.sum(axis=0)
    if bq.size and int(np.max(np.abs(bq))) >= 1 << 31:
        raise ModelError("the bias with the input zero point folded in does not fit int32", layer=name, hint=hint)
    x_max = max(abs(x_t.min_code), abs(x_t.max_code))
    acc_max = int(np.max(x_max * np.abs(wq).sum(axis=0) + np.abs(bq))) if bq.size else 0
    if acc_max >= 1 << 31:
        raise ModelError(f"the accumulator can reach {acc_max}, beyond the 32 bits the requantisation multiplies",
                         layer=name, hint="use fewer input features or 8-bit codes")
    try:
        mult, shift = requant.choose(ratio, gen.srs_shift_max)
    except ValueError as e:
        raise ModelError(f"{e}: the output scale is too fine for the input and weight scales", layer=name,
                         hint=hint) from None
    bias_t = AffineType(32, True, tuple(float(np.float32(Fraction(x_t.scale[0]) * Fraction(sw))) for sw in s_w), 0)
    types = DenseTypes(in_type, w_t, bias_t, y_t if isinstance(out_hint, AffineType) else out_hint, acc_bits, shift, 0)
    params = dict(node.params, weight_q=wq, bias_q=bq, rq_mult=mult)
    return node.evolve(types=types, params=params)


def requant_window(node: Node) -> Fraction:
    """The layer's tie window (numerics/requant.tie_window): where its result may differ from the
    correctly rounded rational."""
    wq, bq = node.params["weight_q"], node.params["bias_q"]
    t = node.types.input
    x_max = max(abs(t.min_code), abs(t.max_code))
    acc_max = int(np.max(x_max * np.abs(wq).sum(axis=0) + np.abs(bq)))
    return requant.tie_window(acc_max, node.types.shift)


SGEMM_MIN_K = 32  # input features from which an affine layer's emulation takes the float32 product


def _emulate_requant(node: Node, x: np.ndarray) -> np.ndarray:
    """An affine layer (quantise_affine): exact accumulation, then numerics/requant.apply."""
    t: DenseTypes = node.types
    wq, bq = node.params["weight_q"], node.params["bias_q"]
    mult = node.params["rq_mult"]
    out = t.output
    zp = out.zero_point if isinstance(out, AffineType) else 0
    relu = node.attrs.get("activation") == "relu"
    ops = requant.float_operands(node, wq, bq, mult, t.shift)
    x_max = max(-t.input.min_code, t.input.max_code)  # x: codes of the input type
    y = None
    # The float32 product (sgemm) is about twice as fast as the float64 one but needs more passes
    # over the outputs (widening, scaling, narrowing; the bias add, or [x, 1] where K < N): it pays
    # from about 32 input features, or with one multiplier for every channel (per-tensor weights:
    # the scaling a whole-array multiply, not a row broadcast); benchmarks/qdq_affine_variants.py
    # times both paths on benchmarks/qdq_affine.py's MLP (16 -> 64 per-channel: float64 faster).
    if wq.shape[0] >= SGEMM_MIN_K or ops.s_scalar is not None:
        y = requant.apply_float32(x, ops, x_max, zp, out.min_code, out.max_code, relu=relu, acc_bits=t.acc_bits)
    if y is None:
        y = requant.apply_float(x, ops, zp, out.min_code, out.max_code, relu=relu, acc_bits=t.acc_bits, x_max=x_max,
                                narrow=True)
    if y is not None:  # exact in float32 / float64 (proved there)
        return y
    x_max = int(np.max(np.abs(x))) if x.size else 0
    bound = wq.shape[0] * x_max * (int(np.max(np.abs(wq))) if wq.size else 0)
    acc = fast.matmul_exact(x, wq, bound) if bound < fast.F64_EXACT else None
    acc = acc.astype(np.int64) if acc is not None else fixed.exact_matmul(x.astype(np.int64), wq.astype(np.int64))
    acc = fixed.wrap(acc + bq, t.acc_bits)
    return requant.apply(acc, mult, t.shift, zp, out.min_code, out.max_code, relu=relu)


# ----------------------------------------------------------------------------- emulate


def emulate(node: Node, x: np.ndarray) -> np.ndarray:
    """Exactly what the generated kernels compute.

    ``x`` holds integer codes (any integer-valued numeric dtype) or float32 values; integer results
    come back as integer-valued float64 on the fast path and int64 otherwise.
    """
    t: DenseTypes = node.types
    relu = node.attrs.get("activation") == "relu"
    if "rq_mult" in node.params:
        return _emulate_requant(node, x)
    if isinstance(t.weight, FloatType):
        init = node.params.get("bias_q")
        # bf16 / fp16 operands: their products are exact in float32 (8 x 8 and 11 x 11 significant
        # bits fit 24), so the float32 accumulation in k order is the kernel's accfloat sum
        xin = fixed.round_float(x.astype(np.float32), t.weight.name)
        w32 = node.params["weight_q"].astype(np.float32)  # rows of a [..., K] input: each multiplied alike
        y = fixed.float32_dot_sequential(xin.reshape(-1, xin.shape[-1]), w32, init).reshape(*xin.shape[:-1], -1)
        y = fixed.round_float(y, t.output.name)
        if relu:
            y = np.maximum(y, np.float32(0))
        return y
    wq = node.params["weight_q"]
    bq = node.params.get("bias_q")
    # Largest |accumulator| any sample of this call can reach: decides whether floats are exact.
    x_max = int(np.max(np.abs(x))) if x.size else 0
    bias_max = (int(np.max(np.abs(bq))) << t.bias_shift) if bq is not None and bq.size else 0
    bound = wq.shape[0] * x_max * (int(np.max(np.abs(wq))) if wq.size else 0) + bias_max
    if bound < (1 << (t.acc_bits - 1)) and bound < fast.F64_EXACT:
        acc = fast.matmul_exact(x, wq, bound)
        if acc is not None:  # no wrap is possible and every value is exact in float64
            if bq is not None:
                acc += (bq * 2.0**t.bias_shift).astype(acc.dtype)
            y = fast.srs_float(acc, t.shift, t.output)
            return np.maximum(y, 0.0) if relu else y
    acc = fixed.exact_matmul(x.astype(np.int64), wq.astype(np.int64))
    if bq is not None:
        acc = acc + (bq.astype(np.int64) << t.bias_shift)
    acc = fixed.wrap(acc, t.acc_bits)
    y = fixed.srs(acc, t.shift, t.output)
    if relu:
        y = np.maximum(y, 0)
    return y


# ----------------------------------------------------------------------------- plan


@dataclass(frozen=True)
class DenseLayout:
    """How a layer's output is split and laid out in memory, for the layer that reads it."""

    parts: int  # number of output slices (cas_num)
    slice: int  # padded features per slice (n_slice)
    panel: int  # panel width the producer writes


@dataclass(frozen=True)
class TileMemory:
    weights: int
    bias: int
    input: int  # both ping-pong buffers
    output: int  # both ping-pong buffers (last tile of a cascade row only)
    reserved: int  # stack + heap
    post: int = 0  # a fused activation / softmax (ops/post.py): its table and scratch (last tile only)

    @property
    def total(self) -> int:
        return self.weights + self.bias + self.input + self.output + self.reserved + self.post


@dataclass(frozen=True)
class DensePlan:
    cas_len: int
    cas_num: int
    mmul: tuple[int, int, int]
    batch: int
    batch_pad: int
    k_slice: int
    n_slice: int
    in_features: int
    out_features: int
    in_panel: int  # = mmul K
    out_panel: int  # panel width of the output buffers
    memory: TileMemory
    banks: int  # banks used on the most loaded tile
    link: str  # how the input arrives: "plio", "buffer" (AIE1 direct), "memtile" (AIE-ML)
    post: str = ""  # a fused activation / softmax in the last tiles (ops/post.post_kind): "", "table", "interp", "softmax", "fp32:<function>"
    # Neighbours ("south", "north") whose data memories every kernel tile of the layer borrows for
    # its activation buffers (empty: everything in its own memory).  The lenders run no kernel: the
    # layer's rectangle is ``period`` array rows per cascade row (``memory_homes``, docs/performance.md).
    borrows: tuple[str, ...] = ()

    @property
    def tiles(self) -> int:
        """Compute tiles (kernels)."""
        return self.cas_len * self.cas_num

    @property
    def period(self) -> int:
        """Array rows per cascade row: the kernel's row and its lenders' rows."""
        return 1 + len(self.borrows)

    @property
    def kernel_offset(self) -> int:
        """The kernel's row within its period: 1 when the south neighbour lends (below it)."""
        return 1 if "south" in self.borrows else 0

    @property
    def footprint(self) -> int:
        """Tiles the layer occupies: its kernels and the lenders, which run nothing."""
        return self.tiles * self.period

    @property
    def output_layout(self) -> DenseLayout:
        return DenseLayout(self.cas_num, self.n_slice, self.out_panel)

    def k_range(self, j: int) -> tuple[int, int]:
        """Real input features handled by cascade position ``j`` (the rest is zero padding)."""
        lo = min(j * self.k_slice, self.in_features)
        return lo, min(lo + self.k_slice, self.in_features)

    def n_range(self, r: int) -> tuple[int, int]:
        lo = min(r * self.n_slice, self.out_features)
        return lo, min(lo + self.n_slice, self.out_features)


def _plan_to_json(p: DensePlan) -> dict:
    d = asdict(p)
    d["mmul"] = list(p.mmul)
    d["tiles"] = p.tiles
    d["bytes_per_tile"] = p.memory.total
    return d


def _plan_from_json(d: dict) -> DensePlan:
    d = {k: v for k, v in d.items() if k not in ("tiles", "bytes_per_tile")}
    d["mmul"] = tuple(d["mmul"])
    d["memory"] = TileMemory(**d["memory"])
    d["borrows"] = tuple(d.get("borrows", ()))  # designs saved before neighbour memory: none
    return DensePlan(**d)


def _round_up(x: int, m: int) -> int:
    return -(-x // m) * m


def _nbytes(t: NumericType) -> int:
    return t.container_bits // 8


def weight_bytes(t: NumericType, count: int) -> int:
    """Bytes of ``count`` weight codes of type ``t`` in tile memory (int4: two per byte)."""
    return count * element_bits(t) // 8


def _aligned(n: int) -> int:
    return _round_up(n, ALIGN)


def tile_memory(t: DenseTypes, batch_pad: int, k_slice: int, n_slice: int, mmul, reserved: int,
                post: Node | None = None) -> TileMemory:
    m, _, n = mmul
    weights = _aligned(weight_bytes(t.weight, k_slice * n_slice))
    # a requantising layer (float scales: quantise_affine gives it an affine bias) also holds its
    # int32 multipliers in the storing tile, laid out like the bias
    blocks = (t.bias is not None) + isinstance(t.bias, AffineType)
    bias = _aligned((n_slice // n) * m * n * 4 * blocks)
    inp = 2 * _aligned(batch_pad * k_slice * _nbytes(t.input))
    out = 2 * _aligned(batch_pad * n_slice * _nbytes(t.output))
    return TileMemory(weights, bias, inp, out, reserved, post_memory(post, batch_pad, n_slice, _nbytes(t.output)))


def post_memory(post: Node | None, batch_pad: int, n_slice: int, elem: int) -> int:
    """A fused post's bytes in the last tile (dense.h ``DensePost``): its int32 table (none in fp32)
    and the SRS codes before it (one output buffer's worth); a softmax adds one sample's row in and out and its
    int32 exponentials."""
    if post is None:
        return 0
    table = _aligned(4 * int(post.params["table"].size)) if "table" in post.params else 0  # fp32: constants only
    pre = _aligned(batch_pad * n_slice * elem)
    row = 2 * _aligned(n_slice * elem) + _aligned(4 * n_slice) if post.op == "softmax" else 0
    return table + pre + row


def banks_needed(mem: TileMemory, bank_bytes: int) -> int:
    """Weights in banks of their own, so weight and activation loads never conflict; the rest
    (activations, bias, stack, heap) packed into the remaining banks."""
    rest = mem.bias + mem.input + mem.output + mem.reserved + mem.post
    return -(-mem.weights // bank_bytes) + -(-rest // bank_bytes)


@dataclass(frozen=True)
class BufferHome:
    """Where one buffer of a kernel tile lives: its own memory or a neighbour's, from which bank,
    over how many whole banks."""

    buffer: str  # "weights", "bias + stack/heap", "input ping", "input pong", "output ping", "output pong"
    memory: str  # "own" or the neighbour's direction ("south", "north")
    bank: int  # first bank
    banks: int
    bytes: int


def memory_homes(mem: TileMemory, borrows: tuple[str, ...], bank_bytes: int, banks: int) -> tuple[BufferHome, ...] | None:
    """Buffers of a kernel tile placed in its own memory and the ``borrows`` neighbours' memories,
    whole banks each, or None when they do not fit.

    The resident data stays in the tile's own memory: the weights in banks of their own, the bias
    with the stack and heap (and a fused post's table and scratch, ``TileMemory.post``).  The activation buffers (input and output, ping and pong: separate
    ADF buffers) go, largest first, to the first memory with enough free banks: own, then the
    neighbours in ``borrows`` order.  No two buffers share a bank, so the kernel's two loads per
    cycle (an input block and a weight block) and the DMA filling the other half of a ping-pong
    never meet in one bank: the arrangement the published kernel uses ("buffers placed on distinct
    banks so parallel loads do not conflict", dense-on-aie-ml.md), and the one the cycle model
    (perf/kernel.py, fitted to that kernel) assumes.  A tile's core addresses a neighbour's memory
    as it does its own (versal-devices.md: own + neighbours reachable), so where a buffer lives does
    not change the kernel's cycles."""
    free = {"own": banks, **dict.fromkeys(borrows, banks)}
    homes: list[BufferHome] = []

    def take(name: str, nbytes: int, where: tuple[str, ...]) -> bool:
        need = -(-nbytes // bank_bytes)
        for m in where:
            if free[m] >= need:
                homes.append(BufferHome(name, m, banks - free[m], need, nbytes))
                free[m] -= need
                return True
        return False

    own_rest = mem.bias + mem.reserved + mem.post  # a fused post's table and scratch: kernel members
    if not take("weights", mem.weights, ("own",)) or not take("bias + stack/heap", own_rest, ("own",)):
        return None
    acts = [("input ping", mem.input // 2), ("input pong", mem.input // 2),
            ("output ping", mem.output // 2), ("output pong", mem.output // 2)]
    for name, nbytes in sorted((a for a in acts if a[1]), key=lambda a: -a[1]):
        if not take(name, nbytes, ("own", *borrows)):
            return None
    return tuple(homes)


def lender_directions(gen, count: int) -> tuple[str, ...]:
    """The neighbours ``count`` borrowed memories come from: the north one first (the kernel stays
    nearest the interface row and the memory tiles below row 0), then north and south."""
    vertical = gen.vertical_lenders
    if count == 1:
        return ("north",) if "north" in vertical else vertical[:1]
    return vertical[:count]


def plan(node: Node, ctx: PlanContext) -> Node:
    t: DenseTypes = node.types
    dev = ctx.device
    gen = dev.generation
    name = node.name
    k_total = int(node.attrs["in_features"])
    n_total = int(node.attrs["out_features"])
    mmul = gen.mmul_shapes[t.pair]
    m, kk, nn = mmul
    batch = ctx.config.batch
    batch_pad = _round_up(batch, 2 * m)
    reserved = gen.stack_bytes + gen.heap_bytes
    lc = ctx.layer
    producer: DenseLayout | None = ctx.input_layout
    # AIE1 has no memory tiles: a consumer reads the producer's buffers directly, so its cascade
    # length and slice are the producer's.  Output slices are padded to 16 there so any consumer
    # mmul K (<= 16) divides them.
    direct = dev.memory_tile_rows == 0
    n_align = math.lcm(2 * nn, 16) if direct else 2 * nn

    def candidate(cas_len: int, cas_num: int, k_slice: int | None = None):
        if k_slice is None:
            k_slice = _round_up(-(-k_total // cas_len), kk)
        n_slice = _round_up(-(-n_total // cas_num), n_align)
        mem = tile_memory(t, batch_pad, k_slice, n_slice, mmul, reserved, post)
        return k_slice, n_slice, mem

    def fits(mem: TileMemory) -> bool:
        return mem.total <= gen.data_memory_bytes and banks_needed(mem, gen.bank_bytes) <= gen.memory_banks

    def borrowed(mem: TileMemory, cas_num: int) -> tuple[str, ...] | None:
        """The fewest neighbour memories (of the vertical ones) whose banks hold the buffers, the
        layer's rows with their lenders still within the array; None when none do."""
        for count in range(1, len(gen.vertical_lenders) + 1):
            dirs = lender_directions(gen, count)
            if cas_num * (1 + count) <= dev.rows and memory_homes(mem, dirs, gen.bank_bytes, gen.memory_banks):
                return dirs
        return None

    max_len = dev.columns
    max_num = dev.rows
    forced_len = None
    forced_k = None
    if direct and producer is not None:
        forced_len, forced_k = producer.parts, producer.slice
        if forced_k % kk:
            raise PlanError(
                f"input slices of {forced_k} features are not a multiple of this layer's mmul K={kk}",
                layer=name,
            )
        if lc.cas_len is not None and lc.cas_len != forced_len:
            raise ConfigError(
                f"parallelism.cas_len={lc.cas_len} conflicts with the previous layer's cas_num={forced_len}: "
                f"on {dev.board} (no memory tiles) layer i+1's cas_len must equal layer i's cas_num",
                layer=name,
                hint=f"set cas_len to {forced_len} or change the previous layer's cas_num",
            )
    if lc.cas_len is not None and lc.cas_len > max_len:
        raise ConfigError(f"parallelism.cas_len={lc.cas_len} exceeds the {max_len} columns of {dev.board}", layer=name)
    if lc.cas_num is not None and lc.cas_num > max_num:
        raise ConfigError(f"parallelism.cas_num={lc.cas_num} exceeds the {max_num} rows of {dev.board}", layer=name)
    if lc.cas_len is not None and lc.cas_len > -(-k_total // kk):
        raise ConfigError(
            f"parallelism.cas_len={lc.cas_len} leaves tiles without input features ({k_total} features, "
            f"{kk} per mmul step)",
            layer=name,
            hint=f"use cas_len <= {-(-k_total // kk)}",
        )
    if lc.cas_num is not None and lc.cas_num > -(-n_total // nn):
        raise ConfigError(
            f"parallelism.cas_num={lc.cas_num} leaves rows without outputs ({n_total} outputs)",
            layer=name,
            hint=f"use cas_num <= {-(-n_total // nn)}",
        )

    post = ctx.post
    if post is not None and post.op == "softmax":
        # one tile holds every output of a sample (ops/post.py)
        if (lc.cas_num or 1) > 1:
            raise ConfigError(
                f"parallelism.cas_num={lc.cas_num}: the softmax '{post.name}' after this layer runs in its last "
                "tile, which must hold every output of a sample", layer=name,
                hint="use cas_num: 1 for this layer (cas_len still spreads it over columns)")
        if ctx.min_cas_num > 1:
            raise PlanError(f"the softmax '{post.name}' needs this layer's outputs in one cascade row, but the next "
                            f"layer needs at least {ctx.min_cas_num} rows", layer=name)
    lens = [forced_len] if forced_len else ([lc.cas_len] if lc.cas_len else range(1, min(max_len, -(-k_total // kk)) + 1))
    nums = [lc.cas_num] if lc.cas_num else range(min(ctx.min_cas_num, max_num), min(max_num, -(-n_total // nn)) + 1)
    if post is not None and post.op == "softmax":
        nums = [1]
    # A rectangle fixed by the config (or, on AIE1, its cascade length by the producer) whose
    # buffers exceed a tile's own memory may borrow the neighbours' memories: only then, and only
    # where the plan pass allows it (ctx.neighbour_memory), so a layer the planner sizes itself
    # keeps its buffers in its own tiles.
    pinned = len(lens) == 1 and len(nums) == 1
    borrow = ctx.neighbour_memory and pinned and bool(gen.vertical_lenders)
    best = None
    smallest = None
    for cl in lens:
        for cn in nums:
            k_slice, n_slice, mem = candidate(cl, cn, forced_k)
            if smallest is None or mem.total < smallest[2].total:
                smallest = (cl, cn, mem)
            borrows: tuple[str, ...] | None = ()
            if not fits(mem):
                borrows = borrowed(mem, cn) if borrow else None
                if borrows is None:
                    continue
            # Fewest tiles; then the most balanced rectangle (shorter cascades, less padding).
            key = (cl * cn, abs(cl - cn), k_slice * cl + n_slice * cn)
            if best is None or key < best[0]:
                best = (key, cl, cn, k_slice, n_slice, mem, borrows)
    if best is None:
        cl, cn, mem = smallest
        what = "the requested parallelism" if (lc.cas_len or lc.cas_num) else f"any cas_len <= {max_len} x cas_num <= {max_num}"
        reach = (f", or {gen.data_memory_bytes * (1 + len(gen.vertical_lenders))} with the "
                 f"{' and '.join(gen.vertical_lenders)} neighbours' memories within {dev.rows} rows") if borrow else ""
        hint = "reduce the batch, use a narrower precision, raise parallelism, or split the layer"
        if not borrow and gen.vertical_lenders and ctx.neighbour_memory:
            hint += ("; or fix the rectangle (parallelism cas_len and cas_num) to let its tiles keep buffers in "
                     "their neighbours' data memories")
        raise PlanError(
            f"{k_total} x {n_total} weights do not fit {what} on {dev.board}: the smallest tile footprint "
            f"is {mem.total} bytes ({mem.weights} weights, {mem.input} input buffers, {mem.output} output "
            f"buffers) at cas_len={cl}, cas_num={cn}; a tile has {gen.data_memory_bytes} bytes in "
            f"{gen.memory_banks} banks{reach}",
            layer=name,
            hint=hint,
        )
    _, cl, cn, k_slice, n_slice, mem, borrows = best
    link = "plio" if producer is None else ("buffer" if direct else "memtile")
    p = DensePlan(
        cas_len=cl,
        cas_num=cn,
        mmul=mmul,
        batch=batch,
        batch_pad=batch_pad,
        k_slice=k_slice,
        n_slice=n_slice,
        in_features=k_total,
        out_features=n_total,
        in_panel=kk,
        out_panel=nn,  # provisional: the plan pass sets the consumer's panel once it is known
        memory=mem,
        banks=banks_needed(mem, gen.bank_bytes),
        link=link,
        post=post_kind(post),
        borrows=borrows,
    )
    return node.evolve(plan=p)


def with_out_panel(node: Node, panel: int) -> Node:
    p: DensePlan = node.plan
    if p.n_slice % panel:
        raise PlanError(f"output slice {p.n_slice} is not a multiple of the consumer's panel {panel}", layer=node.name)
    return node.evolve(plan=replace(p, out_panel=panel))


# ----------------------------------------------------------------------------- pack


def pack_tile(node: Node, row: int, col: int) -> dict[str, np.ndarray]:
    """Weights (and bias, for the first tile of a cascade row) of one tile, in kernel order.

    Weights: ``K x N`` mmul blocks, row-major inside a block, blocks ordered (k-block, n-block).
    Bias: one ``M x N`` block per n-block with the bias row repeated ``M`` times, so it loads
    straight into an accumulator (``from_vector(bias, bias_shift)``).
    """
    p: DensePlan = node.plan
    m, kk, nn = p.mmul
    wq = node.params["weight_q"]
    k0, k1 = p.k_range(col)
    n0, n1 = p.n_range(row)
    dtype = wq.dtype if wq.dtype.kind == "f" else np.int64
    block = np.zeros((p.k_slice, p.n_slice), dtype=dtype)
    block[: k1 - k0, : n1 - n0] = wq[k0:k1, n0:n1]
    tiles = block.reshape(p.k_slice // kk, kk, p.n_slice // nn, nn).transpose(0, 2, 1, 3).reshape(-1)
    # int4 weights: each K x N block's codes packed two per byte (K * N is even)
    out = {"weights": pack_int4(tiles) if kind_of(node.types.weight) == "i4" else tiles}
    if col == 0 and "bias_q" in node.params:
        bq = node.params["bias_q"]
        bias = np.zeros(p.n_slice, dtype=bq.dtype if bq.dtype.kind == "f" else np.int64)
        bias[: n1 - n0] = bq[n0:n1]
        out["bias"] = np.repeat(bias.reshape(-1, 1, nn), m, axis=1).reshape(-1)
    if col == p.cas_len - 1 and "rq_mult" in node.params:  # the storing tile's multipliers, after its bias
        mult = np.zeros(p.n_slice, dtype=np.int64)
        mult[: n1 - n0] = node.params["rq_mult"][n0:n1]
        blocks = np.repeat(mult.reshape(-1, 1, nn), m, axis=1).reshape(-1)
        out["bias"] = np.concatenate([out.get("bias", np.zeros(0, dtype=np.int64)), blocks])
    return out


def cascade_chunk_lanes(mn: int, acc_bits: int, cascade_bits: int) -> int:
    """Accumulator lanes dense.h moves per cascade word (its CASC_LANES): the widest count that
    fits the cascade and divides the M*N lanes of one accumulator."""
    lanes = max(1, cascade_bits // acc_bits)
    while mn % lanes:
        lanes -= 1
    return lanes


def to_panels(x: np.ndarray, batch_pad: int, width: int, panel: int) -> np.ndarray:
    """[B, F] -> zero-padded panel layout [width / panel][batch_pad][panel], flattened."""
    b, f = x.shape
    buf = np.zeros((batch_pad, width), dtype=x.dtype)
    buf[:b, :f] = x
    return buf.reshape(batch_pad, width // panel, panel).transpose(1, 0, 2).reshape(-1)


def from_panels(buf: np.ndarray, batch: int, batch_pad: int, width: int, panel: int, features: int) -> np.ndarray:
    """Inverse of :func:`to_panels`, dropping the padding."""
    x = buf.reshape(width // panel, batch_pad, panel).transpose(1, 0, 2).reshape(batch_pad, width)
    return x[:batch, :features]


DENSE = OpFamily(
    name="dense",
    float_forward=float_forward,
    emulate=emulate,
    quantise=quantise,
    plan=plan,
    types_to_json=_types_to_json,
    types_from_json=_types_from_json,
    plan_to_json=_plan_to_json,
    plan_from_json=_plan_from_json,
)


