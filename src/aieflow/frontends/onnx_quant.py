"""QONNX and QCDQ quantisation for the ONNX importer (issue 18, items 1 and 2).

What is mapped, and how (``docs/quantisation.md``; semantics from
``/work/shared/spec/quantisation-formats.md``):

* QONNX ``Quant(x, scale, zeropt, bitwidth; signed, narrow, rounding_mode)`` (domain
  ``qonnx.custom_op.general``, or the older ``finn.custom_op.general`` / ``onnx.brevitas``):
  y = scale * (clip(round(x / scale + zeropt), min, max) - zeropt).  With power-of-two scales and
  zero point 0 this is exactly a fixed-point type:

  - on a constant (a weight or a bias) it is folded at import: the codes are computed exactly (the
    rounding mode decided on the exact value, then the clip), and the value is carried in the
    narrowest signed 8 / 16 / 32-bit type that holds the declared range and the codes (an unsigned
    weight is its value set inside int8 / int16: exact), or a signed 4-bit type for signed codes of
    at most 4 bits (int4 weights on AIE-ML / AIE-MLv2, int8 on AIE).  Per-channel power-of-two scales
    share the finest one, the codes of coarser channels scaled up to it (int16 when they outgrow
    int8; refused beyond 32 bits);
  - on an activation it becomes the tensor's type (a :class:`~aieflow.ir.QuantHints` entry, as a
    QuantizeLinear -> DequantizeLinear pair): 8 or 16 bits, signed or unsigned, the rounding mode
    as the SRS writing the tensor rounds, ``narrow`` on a signed type as the symmetric saturation.

* ``BipolarQuant`` (sign to {-1, +1} times a scale) on constants; ``Trunc`` on constants, and on
  an activation that a Dense layer's accumulator produces on the grid of its ``scale`` (then it is
  that layer's SRS to the coarser output type).
* QCDQ: ``QuantizeLinear -> Clip -> DequantizeLinear`` where the Clip narrows an activation's codes
  to the symmetric range (e.g. [-127, 127]), and ``Clip`` of constant codes (weights); ``Mul`` /
  ``Div`` by a power-of-two constant folded into a constant or into the Dense layer before it.

* QONNX ``Quant`` with a float (not power-of-two) scale or a zero point (Brevitas' default
  ``*PerTensorFloat`` / ``*PerChannelFloat`` quantisers): an affine type (``numerics/types.AffineType``),
  as a QDQ model's ``DequantizeLinear`` of float scales gives: on a constant its codes computed as
  QONNX computes them (float32 ``x / scale + zeropt``, clipped, rounded), per tensor or per channel
  of one axis; on an activation a per-tensor 8- or 16-bit affine type rounded half to even.  The
  Dense layer then requantises with an integer multiplier and shift (docs/quantisation.md).

Everything else (activations of other widths, bipolar activations, float scales on other rounding
modes or narrow activations) is refused with the node's name and the quantiser that gives an
accepted model.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np
import onnx

from ..errors import ConfigError, ModelError, UnsupportedOpError
from ..numerics import fixed
from ..numerics.types import AffineType, FixedType, Rounding, Saturation

QONNX_DOMAINS = ("qonnx.custom_op.general", "finn.custom_op.general", "onnx.brevitas")
QONNX_OPS = ("Quant", "BipolarQuant", "Trunc")

# QONNX / Brevitas rounding_mode -> the same rounding on the AI Engine's SRS (numerics/types.py)
ROUNDING: dict[str, Rounding] = {
    "ROUND": Rounding.CONV_EVEN,  # numpy / torch round: half to even
    "HALF_EVEN": Rounding.CONV_EVEN,
    "CEIL": Rounding.CEIL,
    "FLOOR": Rounding.FLOOR,
    "UP": Rounding.SYM_CEIL,  # away from zero
    "DOWN": Rounding.SYM_FLOOR,  # towards zero (np.fix)
    "ROUND_TO_ZERO": Rounding.SYM_FLOOR,  # Brevitas' name for the same
    "HALF_UP": Rounding.SYM_INF,  # half away from zero
    "HALF_DOWN": Rounding.SYM_ZERO,  # half towards zero
}

POW2_ADVICE = (
    "aieflow computes power-of-two scales with zero point 0 exactly; quantise with power-of-two "
    "scales (Brevitas: Int8WeightPerTensorFixedPoint for weights, Int8ActPerTensorFixedPoint / "
    "Uint8ActPerTensorFixedPoint for activations, Int16Bias or Int32Bias for biases)"
)
ACT_ADVICE = (
    "aieflow's activations are 8 or 16 bits, signed or unsigned; quantise activations with an "
    "8-bit quantiser (Brevitas Int8ActPerTensorFixedPoint) or a 16-bit one"
)


@dataclass(frozen=True)
class QuantSpec:
    """What a Quant-like node asks for, checked: integer range [lo, hi] of ``bits`` bits and the
    power-of-two exponents ``fracs`` (scale = 2^-frac, broadcastable like the scale input)."""

    node: str
    op: str
    bits: int
    signed: bool
    narrow: bool
    rounding: Rounding
    fracs: np.ndarray  # int64, the scale's shape
    lo: int
    hi: int

    @property
    def per_tensor(self) -> bool:
        return bool(np.all(self.fracs == self.fracs.reshape(-1)[0])) if self.fracs.size else True

    @property
    def frac(self) -> int:
        return int(self.fracs.reshape(-1)[0])


def int_range(bits: int, signed: bool, narrow: bool) -> tuple[int, int]:
    """QONNX's min_int / max_int: narrow takes one off the top of an unsigned range and one off the
    bottom of a signed one."""
    if signed:
        return -(1 << (bits - 1)) + int(narrow), (1 << (bits - 1)) - 1
    return 0, (1 << bits) - 1 - int(narrow)


def pow2_fracs(node: str, op: str, scale: np.ndarray, what: str = "scale") -> np.ndarray:
    """``frac`` per element such that ``scale == 2**-frac``, or an error saying what to change."""
    s = np.asarray(scale, dtype=np.float64)
    if s.size == 0:
        raise ModelError(f"node '{node}' ({op}) has an empty {what}")
    flat = s.reshape(-1)
    bad = [v for v in flat if not (math.isfinite(v) and v > 0)]
    if bad:
        raise UnsupportedOpError(f"node '{node}' ({op}) has {what} {bad[0]!r}; a scale must be a positive number",
                                 hint=POW2_ADVICE)
    fracs = []
    for v in flat:
        mantissa, exponent = math.frexp(float(v))
        if mantissa != 0.5:
            raise UnsupportedOpError(
                f"node '{node}' ({op}) has {what} {float(v)!r}, which is not a power of two; arbitrary (float) "
                "scales are not supported by this importer", hint=POW2_ADVICE)
        fracs.append(1 - exponent)
    return np.asarray(fracs, dtype=np.int64).reshape(s.shape)


def broadcast(fracs: np.ndarray, shape: tuple, node: str, op: str, what: str = "scale") -> np.ndarray:
    """``fracs`` (a scale's exponents) broadcast to the tensor's shape, or a ModelError."""
    try:
        return np.broadcast_to(fracs, shape)
    except ValueError:
        raise ModelError(f"node '{node}' ({op}): its {what} of shape {tuple(np.shape(fracs))} does not broadcast to "
                         f"the tensor's shape {tuple(shape)}") from None


def exact_codes(x: np.ndarray, fracs: np.ndarray, rounding: Rounding, lo: int, hi: int) -> np.ndarray:
    """clip(round(x * 2^frac), lo, hi) with the rounding decided on the exact product (clipping
    before or after the rounding is the same: [lo, hi] has integer ends and rounding is monotone)."""
    x = np.asarray(x, dtype=np.float64)
    f = np.broadcast_to(fracs, x.shape)
    out = np.empty(x.shape, dtype=np.int64)
    for frac in np.unique(f):
        sel = f == frac
        wide = FixedType(64, int(frac), True, rounding, Saturation.SATURATE)
        out[sel] = fixed.quantize(x[sel], wide)
    return np.clip(out, lo, hi)


def container(lo: int, hi: int) -> int:
    """Bits of the narrowest signed 8 / 16 / 32-bit type holding [lo, hi], 0 when none does."""
    for bits in (8, 16, 32):
        if -(1 << (bits - 1)) <= lo and hi <= (1 << (bits - 1)) - 1:
            return bits
    return 0


def _attrs(node: onnx.NodeProto) -> dict:
    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


def _text(v) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


class OnnxQuantMixin:
    """QONNX ``Quant`` / ``BipolarQuant`` / ``Trunc`` and the QCDQ patterns (see
    ``onnx_frontend._OnnxImporter``, which provides the state used here)."""

    nodes: list
    shapes: dict
    alias: dict
    pending_q: dict
    hint_tensors: dict
    hint_params: dict

    # -- reading a node -------------------------------------------------------------------------

    def _scalar_input(self, node: onnx.NodeProto, k: int, name: str, what: str) -> np.ndarray:
        if len(node.input) <= k or not node.input[k]:
            raise ModelError(f"node '{name}' ({node.op_type}) has no {what} input (input {k})")
        c = self._const(node.input[k])
        if c is None:
            raise UnsupportedOpError(
                f"node '{name}' ({node.op_type}) takes its {what} from a computed tensor; it must be a constant",
                hint="export with constant (not run-time) quantisation parameters")
        return np.asarray(c.value)

    def _bit_width(self, node: onnx.NodeProto, k: int, name: str, what: str = "bit width") -> int:
        raw = self._scalar_input(node, k, name, what)
        if raw.size != 1:
            raise UnsupportedOpError(f"node '{name}' ({node.op_type}) has a {what} of shape {tuple(raw.shape)}; "
                                     "only one bit width per tensor is supported")
        v = float(raw.reshape(-1)[0])
        if not (math.isfinite(v) and v == int(v) and 1 <= v <= 32):
            raise UnsupportedOpError(f"node '{name}' ({node.op_type}) has {what} {v:g}; aieflow takes integer bit "
                                     "widths from 1 to 32")
        return int(v)

    def _zero_point(self, node: onnx.NodeProto, k: int, name: str) -> None:
        zp = np.asarray(self._scalar_input(node, k, name, "zero point"), dtype=np.float64)
        if np.any(zp != 0):
            value = zp.reshape(-1)[np.flatnonzero(zp.reshape(-1))[0]]
            raise UnsupportedOpError(
                f"node '{name}' ({node.op_type}) has zero point {value:g}; zero points are not supported by this "
                "importer (symmetric quantisation only)", hint=POW2_ADVICE)

    def _rounding(self, node: onnx.NodeProto, name: str, default: str) -> Rounding:
        mode = _text(_attrs(node).get("rounding_mode", default)).upper()
        if mode not in ROUNDING:
            raise UnsupportedOpError(
                f"node '{name}' ({node.op_type}) has rounding_mode {mode!r}, which aieflow does not map; use one "
                f"of {', '.join(ROUNDING)}",
                hint="Brevitas' DPU and learned / stochastic rounding have no AI Engine SRS equivalent; "
                "quantise with ROUND (the default)")
        return ROUNDING[mode]

    @staticmethod
    def _signed_narrow(node: onnx.NodeProto, name: str) -> tuple[bool, bool]:
        """A ``Quant``'s ``signed`` and ``narrow`` attributes, which QONNX requires."""
        attrs = _attrs(node)
        for key in ("signed", "narrow"):
            if key not in attrs:
                raise ModelError(f"node '{name}' (Quant) has no attribute '{key}', which QONNX requires",
                                 hint="re-export the model (Brevitas export_qonnx writes both)")
        return bool(attrs["signed"]), bool(attrs["narrow"])

    def quant_spec(self, node: onnx.NodeProto, name: str) -> QuantSpec:
        """A QONNX ``Quant`` node's parameters, checked."""
        if len(node.input) < 4:
            raise ModelError(f"node '{name}' (Quant) has {len(node.input)} inputs; QONNX Quant takes x, scale, "
                             "zeropt and bitwidth")
        signed, narrow = self._signed_narrow(node, name)
        bits = self._bit_width(node, 3, name)
        self._zero_point(node, 2, name)
        fracs = pow2_fracs(name, "Quant", self._scalar_input(node, 1, name, "scale"))
        rounding = self._rounding(node, name, "ROUND")
        lo, hi = (-1, 1) if bits == 1 and signed else int_range(bits, signed, narrow)
        return QuantSpec(name, "Quant", bits, signed, narrow, rounding, fracs, lo, hi)

    def is_affine_quant(self, node: onnx.NodeProto, name: str) -> bool:
        """Whether a QONNX ``Quant`` has a float (not power-of-two) scale or a non-zero zero point, all
        finite (a scale that is not positive is refused by :meth:`quant_spec`)."""
        if node.op_type != "Quant" or len(node.input) < 4:
            return False
        s = np.asarray(self._scalar_input(node, 1, name, "scale"), dtype=np.float64).reshape(-1)
        z = np.asarray(self._scalar_input(node, 2, name, "zero point"), dtype=np.float64).reshape(-1)
        if not s.size or not (np.all(np.isfinite(s)) and np.all(s > 0)) or not np.all(np.isfinite(z)):
            return False
        return bool(np.any(z != 0)) or any(math.frexp(float(v))[0] != 0.5 for v in s)

    def _affine_parts(self, node: onnx.NodeProto, name: str, shape: tuple) -> tuple:
        """An affine ``Quant``'s checked parameters for a tensor of ``shape``: (bits, signed, narrow,
        rounding mode name, lo, hi, scale and zero point as float32 arrays broadcastable to ``shape``,
        the per-channel axis or None)."""
        signed, narrow = self._signed_narrow(node, name)
        bits = self._bit_width(node, 3, name)
        mode = _text(_attrs(node).get("rounding_mode", "ROUND")).upper()
        self._rounding(node, name, "ROUND")  # a mode aieflow does not know: refused by name
        s = np.asarray(self._scalar_input(node, 1, name, "scale"), dtype=np.float32)
        z = np.asarray(self._scalar_input(node, 2, name, "zero point"), dtype=np.float32)
        if np.any(z != np.round(z)):
            raise UnsupportedOpError(f"node '{name}' (Quant) has a zero point that is not an integer "
                                     f"({float(z.reshape(-1)[np.flatnonzero(z != np.round(z))[0]]):g})",
                                     hint="quantise with integer zero points (Brevitas rounds them by default)")
        axes = set()
        for what, v in (("scale", s), ("zero point", z)):
            if v.ndim > len(shape):
                raise ModelError(f"node '{name}' (Quant): its {what} of shape {tuple(v.shape)} does not broadcast to "
                                 f"the tensor's shape {tuple(shape)}")
            lead = len(shape) - v.ndim
            for d, n in enumerate(v.shape):
                if n != 1 and n != shape[lead + d]:
                    raise ModelError(f"node '{name}' (Quant): its {what} of shape {tuple(v.shape)} does not "
                                     f"broadcast to the tensor's shape {tuple(shape)}")
                if n != 1:
                    axes.add(lead + d)
        if len(axes) > 1:
            raise UnsupportedOpError(f"node '{name}' (Quant) has scales or zero points that vary along axes "
                                     f"{sorted(axes)}; aieflow takes one per tensor or one per channel of one axis")
        lo, hi = int_range(bits, signed, narrow)
        return bits, signed, narrow, mode, lo, hi, s, z, (axes.pop() if axes else None)

    def fold_affine_quant(self, node: onnx.NodeProto, name: str, x) -> tuple:
        """A float-scale QONNX ``Quant`` on a constant (a weight or a bias): (float value, affine type,
        integer codes, per-channel axis or None, zero points per channel), the codes as QONNX
        computes them: ``round(clip(x / scale + zeropt, min, max))`` in float32."""
        x = np.asarray(x, dtype=np.float32)
        if not np.all(np.isfinite(x)):
            raise ModelError(f"node '{name}' (Quant) quantises a constant that holds inf or NaN")
        bits, signed, _, mode, lo, hi, s, z, axis = self._affine_parts(node, name, x.shape)
        if bits > 32:
            raise UnsupportedOpError(f"node '{name}' (Quant) quantises a constant to {bits} bits; aieflow carries "
                                     "constants in at most 32 bits")
        with np.errstate(over="ignore"):
            q = np.clip(x / s + z, np.float32(lo), np.float32(hi))
        # the float32 quotient rounded exactly by the node's mode (its float64 value is the float32's)
        codes = exact_codes(q, np.zeros((), np.int64), ROUNDING[mode], lo, hi)
        width = next(w for w in (8, 16, 32) if bits <= w)
        chan = None if axis is None else x.shape[axis]

        def per_channel(v: np.ndarray) -> np.ndarray:
            flat = np.broadcast_to(v, x.shape)
            if axis is None:
                return flat.reshape(-1)[:1]
            return np.moveaxis(flat, axis, 0).reshape(chan, -1)[:, 0]

        sc, zc = per_channel(s), per_channel(z).astype(np.int64)
        value = (codes - np.broadcast_to(z, x.shape)).astype(np.float64) * np.broadcast_to(s, x.shape)
        try:
            affine = AffineType(width, signed, tuple(float(v) for v in sc), int(zc[0]) if zc.size == 1 else 0)
        except ConfigError as e:
            raise UnsupportedOpError(f"node '{name}' (Quant): {e.message}") from None
        return value, affine, codes, axis, zc

    def affine_activation_type(self, node: onnx.NodeProto, name: str, shape: tuple) -> AffineType:
        """A float-scale QONNX ``Quant`` on an activation: its per-tensor affine type, or a refusal."""
        bits, signed, narrow, mode, _, _, s, z, axis = self._affine_parts(node, name, shape)
        where = f"node '{name}' (Quant)"
        if axis is not None or s.size != 1 or z.size != 1:
            raise UnsupportedOpError(f"{where} quantises an activation with per-channel scales or zero points; "
                                     "aieflow takes one scale and zero point per activation tensor", hint=ACT_ADVICE)
        if bits not in (8, 16):
            raise UnsupportedOpError(f"{where} quantises an activation to {bits} bits with a float scale; the AI "
                                     "Engine's activations are 8 or 16 bits", hint=ACT_ADVICE)
        if ROUNDING.get(mode) is not Rounding.CONV_EVEN:
            raise UnsupportedOpError(
                f"{where} rounds a float-scale activation with rounding_mode {mode!r}; aieflow requantises "
                "float-scale activations rounding half to even (an integer multiplier and shift, then the SRS)",
                hint="use ROUND (Brevitas' default) on float-scale activation quantisers, or power-of-two scales")
        if narrow:
            raise UnsupportedOpError(
                f"{where} quantises a float-scale activation with narrow range; aieflow saturates float-scale "
                "activations to the whole 8 / 16-bit range", hint="set narrow_range=False on the activation quantiser")
        try:
            return AffineType(bits, signed, (float(s.reshape(-1)[0]),), int(z.reshape(-1)[0]))
        except ConfigError as e:
            raise UnsupportedOpError(f"{where}: {e.message}") from None

    def trunc_spec(self, node: onnx.NodeProto, name: str) -> tuple[QuantSpec, np.ndarray]:
        """A QONNX ``Trunc`` (v2: x, scale, zeropt, input_bit_width, output_scale, output_bit_width):
        the requantisation it is, and the exponents of its input ``scale``."""
        if len(node.input) != 6:
            raise UnsupportedOpError(
                f"node '{name}' (Trunc) has {len(node.input)} inputs; aieflow reads QONNX Trunc with an output "
                "scale (6 inputs: x, scale, zeropt, input_bit_width, output_scale, output_bit_width)",
                hint="re-export the model with a current Brevitas (export_qonnx)")
        attrs = _attrs(node)
        signed, narrow = bool(attrs.get("signed", 1)), bool(attrs.get("narrow", 0))
        self._zero_point(node, 2, name)
        in_fracs = pow2_fracs(name, "Trunc", self._scalar_input(node, 1, name, "scale"))
        self._bit_width(node, 3, name, "input bit width")
        fracs = pow2_fracs(name, "Trunc", self._scalar_input(node, 4, name, "output scale"), "output scale")
        bits = self._bit_width(node, 5, name, "output bit width")
        rounding = self._rounding(node, name, "FLOOR")
        lo, hi = int_range(bits, signed, narrow)
        return QuantSpec(name, "Trunc", bits, signed, narrow, rounding, fracs, lo, hi), in_fracs

    # -- constants (weights, biases) -------------------------------------------------------------

    def fold_quant_op(self, node: onnx.NodeProto, name: str, ins: list) -> tuple[np.ndarray, FixedType]:
        """A QONNX node on a constant: (exact float value, the type its codes are carried in)."""
        x = np.asarray(ins[0].value, dtype=np.float64)
        if not np.all(np.isfinite(x)):
            raise ModelError(f"node '{name}' ({node.op_type}) quantises a constant that holds inf or NaN")
        if len(node.input) > 1 and node.input[1]:
            broadcast(pow2_fracs(name, node.op_type, self._scalar_input(node, 1, name, "scale")), x.shape, name,
                      node.op_type)
        if node.op_type == "BipolarQuant":
            if len(node.input) < 2:
                raise ModelError(f"node '{name}' (BipolarQuant) has no scale input")
            fracs = pow2_fracs(name, "BipolarQuant", self._scalar_input(node, 1, name, "scale"))
            spec = QuantSpec(name, "BipolarQuant", 2, True, True, Rounding.CONV_EVEN, fracs, -1, 1)
            codes = np.where(x >= 0, 1, -1).astype(np.int64)
        elif node.op_type == "Trunc":
            spec, in_fracs = self.trunc_spec(node, name)
            broadcast(spec.fracs, x.shape, name, "Trunc", "output scale")
            # round to the input grid (half to even, as QONNX), then the truncation's own rounding and clip
            on_grid = exact_codes(x, in_fracs, Rounding.CONV_EVEN, -(1 << 62), 1 << 62)
            value = np.ldexp(on_grid.astype(np.float64), -np.broadcast_to(in_fracs, x.shape))
            codes = exact_codes(value, spec.fracs, spec.rounding, spec.lo, spec.hi)
        else:
            spec = self.quant_spec(node, name)
            if spec.bits == 1 and spec.signed:  # QONNX: 1-bit signed Quant is bipolar
                codes = np.where(x / np.ldexp(1.0, -np.broadcast_to(spec.fracs, x.shape)) >= 0, 1, -1)
            else:
                codes = exact_codes(x, spec.fracs, spec.rounding, spec.lo, spec.hi)
        return self._carried(spec, codes, x.shape)

    def _carried(self, spec: QuantSpec, codes: np.ndarray, shape: tuple) -> tuple[np.ndarray, FixedType]:
        """Codes on per-element exponents as one fixed-point type: the finest exponent, codes scaled up
        to it, in the narrowest signed container that holds the declared range (the quantiser's intent:
        a 4-bit weight in int8, a 16-bit bias in int16) and the scaled codes themselves."""
        f = broadcast(spec.fracs, shape, spec.node, spec.op, "output scale" if spec.op == "Trunc" else "scale")
        value = np.ldexp(codes.astype(np.float64), -f)
        frac = int(f.max()) if f.size else spec.frac
        lifted = np.ldexp(codes.astype(np.float64), frac - f)  # exact: |codes| <= 2^32, any exponent gap
        actual = container(int(lifted.min()), int(lifted.max())) if lifted.size else 8
        if not actual:
            raise UnsupportedOpError(
                f"node '{spec.node}' ({spec.op}) quantises to {spec.bits} bits"
                + (f" with per-channel scales 2^-{int(f.max())} .. 2^-{int(f.min())}" if f.size and f.min() != frac else "")
                + "; its codes do not fit the 32 bits aieflow carries constants in",
                hint="use per-tensor scales (or per-channel scales within a factor of a few) and weights of at most "
                "16 bits; " + POW2_ADVICE)
        if spec.signed and spec.bits <= 4 and (not lifted.size or (lifted.min() >= -8 and lifted.max() <= 7)):
            # signed codes of at most 4 bits: a 4-bit type, which a Dense layer runs as int4 weights on
            # AIE-ML / AIE-MLv2 and holds in int8 elsewhere (ops/dense.py)
            return value, FixedType(4, frac, True, Rounding.CONV_EVEN, Saturation.SATURATE)
        return value, FixedType(max(container(spec.lo, spec.hi), actual), frac, True, Rounding.CONV_EVEN,
                                Saturation.SATURATE)

    # -- activations -----------------------------------------------------------------------------

    def activation_type(self, spec: QuantSpec) -> FixedType:
        """The type an activation quantised by ``spec`` has on the AI Engine, or a refusal."""
        where = f"node '{spec.node}' ({spec.op})"
        if not spec.per_tensor:
            raise UnsupportedOpError(f"{where} quantises an activation with per-channel scales; aieflow takes one "
                                     "power-of-two scale per activation tensor", hint=POW2_ADVICE)
        if spec.bits == 1:
            raise UnsupportedOpError(f"{where} quantises an activation to 1 bit (bipolar / binary); aieflow has no "
                                     "1-bit activations", hint=ACT_ADVICE)
        if spec.bits not in (8, 16):
            raise UnsupportedOpError(
                f"{where} quantises an activation to {spec.bits} bits; its saturation bounds [{spec.lo}, {spec.hi}] "
                f"have no {'int' if spec.signed else 'uint'}{8 if spec.bits < 8 else 16} SRS on the AI Engine",
                hint=ACT_ADVICE)
        saturation = Saturation.SATURATE
        if spec.narrow:
            if not spec.signed:
                raise UnsupportedOpError(f"{where} quantises an activation unsigned with narrow range "
                                         f"[0, {spec.hi}]; the AI Engine saturates unsigned values to [0, "
                                         f"{spec.hi + 1}] only", hint="set narrow_range=False on the activation quantiser")
            saturation = Saturation.SYMMETRIC  # [-(2^(b-1) - 1), 2^(b-1) - 1]
        return FixedType(spec.bits, spec.frac, spec.signed, spec.rounding, saturation)

    def record_tensor_type(self, source: str, qtype: FixedType, node: str) -> None:
        previous = self.hint_tensors.get(source)
        if previous is not None and previous != qtype:
            raise UnsupportedOpError(
                f"tensor '{source}' is quantised twice with different types ({previous} and {qtype}, the second by "
                f"'{node}'); give each tensor a single quantiser")
        self.hint_tensors[source] = qtype

    def _qonnx_node(self, node: onnx.NodeProto, name: str) -> None:
        """A QONNX node on a computed tensor: its type on that tensor, the node itself gone."""
        if node.op_type == "BipolarQuant":
            raise UnsupportedOpError(
                f"node '{name}' (BipolarQuant) quantises an activation to {{-1, +1}} (a sign function); aieflow has "
                "no 1-bit activations (BipolarQuant is folded on weights only)", hint=ACT_ADVICE)
        x = self._data_input(node.input[0], name, node.op_type)
        if node.op_type == "Trunc":
            spec, in_fracs = self.trunc_spec(node, name)
            qtype = self.activation_type(spec)
            if in_fracs.size != 1:
                raise UnsupportedOpError(f"node '{name}' (Trunc) has a per-channel input scale; only one scale per "
                                         "activation tensor is supported", hint=POW2_ADVICE)
            self._truncs.append((x, int(in_fracs.reshape(-1)[0]), name))
        elif self.is_affine_quant(node, name):
            qtype = self.affine_activation_type(node, name, (1, *self.shapes[x]))
        else:
            qtype = self.activation_type(self.quant_spec(node, name))
        self.record_tensor_type(x, qtype, name)
        self.alias[node.output[0]] = x

    def check_truncs(self) -> None:
        """A Trunc on an activation is its producer's SRS to the coarser type only when the value it
        reads lies on the grid of its input ``scale`` (QONNX rounds to that grid first): prove it from the
        Dense layer that computes the value (input type + weight type = the accumulator's grid)."""
        producers = {t: n for n in self.nodes for t in n.outputs}
        for tensor, in_frac, name in self._truncs:
            node = producers.get(tensor)
            while node is not None and node.op in ("relu", "bias_add"):
                node = producers.get(node.inputs[0])
            acc = None
            if node is not None and node.op == "dense":
                x_type = self.hint_tensors.get(node.inputs[0])
                w_type = self.hint_params.get((node.name, "weight"))
                if x_type is not None and w_type is not None:
                    acc = x_type.frac + w_type.frac
            if acc is None:
                raise UnsupportedOpError(
                    f"node '{name}' (Trunc) truncates tensor '{tensor}', which is not the result of a quantised Dense "
                    "layer (Gemm / MatMul with quantised input and weight); aieflow maps a Trunc only as the SRS of "
                    "such a layer",
                    hint="quantise the value with a Quant (e.g. Int8ActPerTensorFixedPoint) instead of truncating it")
            if acc > in_frac:
                raise UnsupportedOpError(
                    f"node '{name}' (Trunc) reads tensor '{tensor}' with scale 2^-{in_frac}, but the layer computes it "
                    f"on the finer grid 2^-{acc}; QONNX rounds to the coarser grid before truncating (two roundings), "
                    "which one SRS does not reproduce",
                    hint="give the Trunc the accumulator's scale (input scale x weight scale)")

    # -- QCDQ: QuantizeLinear -> Clip -> DequantizeLinear ------------------------------------------

    def _clip_or_narrow(self, node: onnx.NodeProto, name: str) -> None:
        src = self.canon(node.input[0])
        q = self.pending_q.get(src)
        if q is None:
            self._onnx_clip(node, name)
            return
        lo, hi = self._clip_bounds(node, name)
        t = q.qtype
        lo_c, hi_c = max(t.min_code, math.ceil(lo)), min(t.max_code, math.floor(hi))
        if (lo_c, hi_c) == (t.min_code, t.max_code):
            qtype = t
        elif t.signed and (lo_c, hi_c) == (-t.max_code, t.max_code):
            qtype = t.with_modes(t.rounding, Saturation.SYMMETRIC)  # narrow range
        else:
            raise UnsupportedOpError(
                f"node '{name}' (Clip) limits the {t.c_type} codes of QuantizeLinear '{q.node}' to [{lo_c}, {hi_c}]; "
                f"an activation's codes span the whole 8 / 16-bit range, or the symmetric one [-{t.max_code}, "
                f"{t.max_code}] (narrow range)", hint=ACT_ADVICE)
        self.pending_q[node.output[0]] = replace(q, qtype=qtype)

    def _clip_bounds(self, node: onnx.NodeProto, name: str) -> tuple[float, float]:
        a = _attrs(node)
        lo, hi = a.get("min", -math.inf), a.get("max", math.inf)  # opset < 11: attributes
        for k, what in ((1, "min"), (2, "max")):
            if len(node.input) > k and node.input[k]:
                v = self._scalar_input(node, k, name, what)
                if v.size != 1:
                    raise UnsupportedOpError(f"node '{name}' (Clip) has a {what} of shape {tuple(v.shape)}; "
                                             "only a scalar bound is supported")
                if what == "min":
                    lo = float(v.reshape(-1)[0])
                else:
                    hi = float(v.reshape(-1)[0])
        if lo > hi:
            raise ModelError(f"node '{name}' (Clip) has min {lo:g} above max {hi:g}")
        return float(lo), float(hi)

    def fold_clip(self, node: onnx.NodeProto, name: str, ins: list):
        """Clip of a constant (QCDQ weights: codes limited to the narrow range): the same codes."""
        lo, hi = self._clip_bounds(node, name)
        x = ins[0]
        value = np.clip(x.value, lo, hi).astype(np.asarray(x.value).dtype)
        qtype = x.qtype
        if qtype is not None and not all(math.isinf(b) or b * 2.0**qtype.frac == int(b * 2.0**qtype.frac)
                                         for b in (lo, hi)):
            qtype = None  # a bound off the grid: the clipped constant is a plain float
        codes = x.codes
        if codes is not None and codes[1] and codes[0] > 4 and -8 <= lo and hi <= 7:
            codes = (4, True)  # signed codes clipped to 4 bits (QCDQ int4 weights): as QONNX's 4-bit Quant
        return value, codes, qtype

    # -- Mul / Div by constants ------------------------------------------------------------------

    @staticmethod
    def _pow2_factor(c, op: str) -> float | None:
        """The scalar power of two a Mul / Div by constant ``c`` multiplies by, or None."""
        v = np.asarray(c.value, dtype=np.float64)
        if v.size != 1 or c.codes is not None:
            return None
        f = float(v.reshape(-1)[0])
        if op == "Div":
            if f == 0:
                return None
            f = 1.0 / f
        mantissa, _ = math.frexp(f)
        return f if f > 0 and abs(mantissa) == 0.5 and math.isfinite(f) else None

    def fold_mul(self, node: onnx.NodeProto, name: str, ins: list):
        """Mul / Div of constants: (value, codes, qtype).  A quantised constant keeps its type when the
        other operand is a positive power of two (the exponent moves); integer shape arithmetic is
        exact integer arithmetic, as ONNX defines it."""
        a, b = ins[0], ins[1]
        op = node.op_type
        try:
            np.broadcast_shapes(np.shape(a.value), np.shape(b.value))
        except ValueError:
            raise ModelError(f"node '{name}' ({op}) combines constants of shapes {tuple(np.shape(a.value))} and "
                             f"{tuple(np.shape(b.value))}, which do not broadcast") from None
        ints = all(np.asarray(c.value).dtype.kind in "iu" for c in (a, b))
        if ints and a.qtype is None and b.qtype is None and a.codes is None and b.codes is None:
            x, y = np.asarray(a.value), np.asarray(b.value)
            if op == "Mul":
                return x * y, None, None
            if np.any(y == 0):
                raise ModelError(f"node '{name}' (Div) divides by zero")
            return np.trunc(x / y).astype(x.dtype), None, None
        quantised = [c for c in (a, b) if c.qtype is not None or c.codes is not None]
        if not quantised:
            x, y = (np.asarray(c.value, dtype=np.float32) for c in (a, b))
            return (x * y if op == "Mul" else x / y), None, None
        q, other = (a, b) if quantised[0] is a else (b, a)
        factor = self._pow2_factor(other, op) if (other is b or op == "Mul") else None
        if q.codes is not None or len(quantised) > 1 or factor is None:
            raise UnsupportedOpError(
                f"node '{name}' ({op}) scales a quantised constant by {np.asarray(other.value).reshape(-1)[:3]}; only a "
                "scalar positive power of two keeps it on a power-of-two grid", hint=POW2_ADVICE)
        _, exponent = math.frexp(factor)
        t = q.qtype
        qtype = FixedType(t.width, t.frac - (exponent - 1), t.signed, t.rounding, t.saturation)
        return np.asarray(q.value, dtype=np.float64) * factor, None, qtype

    def _scale_activation(self, node: onnx.NodeProto, name: str) -> None:
        """``y = x * c`` (or ``x / c``) for a power of two ``c``: folded into the Dense layer (and its bias
        add) that computes ``x`` alone."""
        op = node.op_type
        t, c = self._split_const_operand(node, name)
        factor = self._pow2_factor(c, op) if (op == "Mul" or t == node.input[0]) else None
        advice = ("aieflow folds a Mul / Div by a scalar positive power of two into the Gemm / MatMul (+ Add) that "
                  "computes its operand, or into a constant")
        x = self._data_input(t, name, op)
        if (op == "Mul" and c.qtype is None and c.codes is None and c.affine is None
                and self.channel_affine(name, op, x, node.output[0], c.value)):
            return  # a per-channel scale of an image or sequence: Keras' BatchNorm (channels_last.py)
        chain = self._linear_chain(x)
        v = np.asarray(c.value, dtype=np.float64).reshape(-1)
        plain = not self.hint_params and not self.hint_tensors and c.codes is None and v.size == 1
        if plain and (factor is None or chain is None or not self._only_reader(t, node)):
            # a float model (no quantisation hints): any scalar goes to the Dense that computes its operand,
            # through views and a matmul's first operand (attention's 1 / sqrt(d)): frontends/attention.py
            f = 1.0 / float(v[0]) if op == "Div" and t == node.input[0] else float(v[0])
            if op == "Div" and t != node.input[0] or not math.isfinite(f) or f == 0:
                raise UnsupportedOpError(f"node '{name}' ({op}) divides a constant by a computed tensor, or scales by "
                                         f"{f}", hint=advice)
            self._emit(name, "scale", x, node.output[0], self.shapes[x], {"factor": f})
            return
        if factor is None:
            raise UnsupportedOpError(f"node '{name}' ({op}) scales a computed tensor by a constant that is not a "
                                     "scalar positive power of two", hint=advice)
        if chain is None or not self._only_reader(t, node):
            raise UnsupportedOpError(f"node '{name}' ({op}) scales tensor '{x}', which is not the result of a Gemm / "
                                     "MatMul (+ Add) read by this node alone", hint=advice)
        _, exponent = math.frexp(factor)
        shift = exponent - 1  # factor == 2**shift
        for i in chain:
            n = self.nodes[i]
            params = {k: (np.asarray(v, dtype=np.float64) * factor).astype(np.asarray(v).dtype)
                      for k, v in n.params.items()}
            self.nodes[i] = n.evolve(params=params)
            for key in ("weight", "bias"):
                ht = self.hint_params.get((n.name, key))
                if ht is not None:
                    self.hint_params[(n.name, key)] = FixedType(ht.width, ht.frac - shift, ht.signed, ht.rounding,
                                                                ht.saturation)
        if x in self.hint_tensors:
            ht = self.hint_tensors[x]
            self.hint_tensors[x] = FixedType(ht.width, ht.frac - shift, ht.signed, ht.rounding, ht.saturation)
        self.alias[node.output[0]] = x

    def _only_reader(self, t: str, reader: onnx.NodeProto) -> bool:
        """Whether ``reader`` is the one node that reads the value of ONNX tensor ``t`` (looking through
        the quantisation and identity nodes that pass it on), and no graph output is that value."""
        through = ("Identity", "Dropout", "Quant", "QuantizeLinear", "DequantizeLinear")
        quantized = set()  # QuantizeLinear outputs: a Clip on them is QCDQ's, not an activation
        same, readers, grew = {t}, set(), True
        while grew:
            grew = False
            for i, n in enumerate(self.g.node):
                passes = n.op_type in through or (n.op_type == "Clip" and n.input[0] in quantized)
                if n.input and n.input[0] in same and passes and n != reader:
                    if n.output[0] not in same:
                        same.add(n.output[0])
                        grew = True
                        if n.op_type == "QuantizeLinear":
                            quantized.add(n.output[0])
                elif any(i_ in same for i_ in n.input if i_):
                    readers.add(i)
        return [self.g.node[i] for i in readers] == [reader] and not any(o.name in same for o in self.g.output)

    def _linear_chain(self, x: str) -> list[int] | None:
        """Indices in ``self.nodes`` of the bias add (if any) and the Dense that compute ``x``."""
        idx = {t: i for i, n in enumerate(self.nodes) for t in n.outputs}
        i = idx.get(x)
        chain = []
        if i is not None and self.nodes[i].op == "bias_add":
            chain.append(i)
            inner = self.nodes[i].inputs[0]
            i = idx.get(inner)
            if i is None or sum(1 for n in self.nodes if inner in n.inputs) != 1:
                return None
        if i is None or self.nodes[i].op != "dense":
            return None
        chain.append(i)
        return chain

    def quant_converters(self) -> dict[str, Callable[[onnx.NodeProto, str], None]]:
        return {"Quant": self._qonnx_node, "BipolarQuant": self._qonnx_node, "Trunc": self._qonnx_node,
                "Clip": self._clip_or_narrow, "Mul": self._scale_activation, "Div": self._scale_activation}

