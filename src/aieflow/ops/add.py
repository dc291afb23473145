"""Element-wise addition of two computed tensors (residual connections): ``y = a + b``.

Why a family of its own rather than a flag on Dense: a residual add joins two tensors that come
from different producers with different scales, so it needs its own alignment shifts, rounding and
saturation; the dense kernel's bias / SRS epilogue cannot express a second activation operand.

Integer numerics (what :func:`emulate` computes; the only definition the tests and kernels follow):

* both operands are aligned to the finer of the two grids, ``F = max(frac_a, frac_b)``:
  ``s = (a << (F - frac_a)) + (b << (F - frac_b))``, exactly (int64: |s| < 2^(width + shift + 1));
* the sum is brought to the output type by one SRS, ``y = srs(s, F - frac_y)`` with the output
  type's rounding and saturation.  ``frac_y <= F``: a finer output would only add zero bits.

Float numerics: fp32 ``float32(a) + float32(b)`` (one rounding); bf16 the same sum rounded to bf16
(round to nearest even), as the AIE-ML vector add on bf16 operands accumulated in fp32.

A ReLU right after the add is folded into it by the fuse pass (``attrs["activation"] = "relu"``):
``max(y, 0)`` after the SRS (fixed point) or after the sum (float), as Dense and Conv2D do.  The
CNN stream mapping runs it in the epilogue of the convolution the add is fused into
(:mod:`aieflow.cnn.stages`); the DAG path's ``ResidualAdd`` kernel applies it after its SRS
(``cfg::RELU``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..config import PRECISIONS
from ..errors import ConfigError, ModelError, PlanError
from ..ir import Node
from ..numerics import fixed
from ..numerics.types import FixedType, FloatType, NumericType, Rounding, Saturation, parse_type
from .base import OpFamily, QuantContext, not_mapped, require_shift

_WIDTH = {"i8": 8, "i16": 16}


@dataclass(frozen=True)
class AddTypes:
    a: NumericType
    b: NumericType
    output: NumericType
    shift_a: int  # left shift aligning a to the common grid
    shift_b: int
    shift: int  # SRS right shift from the common grid to the output

    @property
    def is_float(self) -> bool:
        return isinstance(self.output, FloatType)


def _types_to_json(t: AddTypes) -> dict:
    return {"a": t.a.to_string(), "b": t.b.to_string(), "output": t.output.to_string(),
            "shift_a": t.shift_a, "shift_b": t.shift_b, "shift": t.shift}


def _types_from_json(d: dict) -> AddTypes:
    return AddTypes(parse_type(d["a"]), parse_type(d["b"]), parse_type(d["output"]),
                    int(d["shift_a"]), int(d["shift_b"]), int(d["shift"]))


def _relu(node: Node) -> bool:
    return node.attrs.get("activation") == "relu"


def float_forward(node: Node, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    y = np.asarray(a, dtype=np.float64) + np.asarray(b, dtype=np.float64)
    return np.maximum(y, 0.0) if _relu(node) else y


def add_codes(a: np.ndarray, b: np.ndarray, t: AddTypes) -> np.ndarray:
    """The integer kernel: align, add exactly, one SRS into the output type."""
    s = (np.asarray(a).astype(np.int64) << t.shift_a) + (np.asarray(b).astype(np.int64) << t.shift_b)
    return fixed.srs(s, t.shift, t.output)


def emulate(node: Node, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    t: AddTypes = node.types
    if t.is_float:
        y = np.asarray(a, dtype=np.float32) + np.asarray(b, dtype=np.float32)
        y = fixed.to_bf16(y) if t.output.name == "bf16" else y
        return np.maximum(y, np.float32(0)) if _relu(node) else y
    y = add_codes(a, b, t)
    return np.maximum(y, 0) if _relu(node) else y


def quantise(node: Node, ctx: QuantContext) -> Node:
    """Output type: explicit config > QDQ hint > calibration (power of two), never finer than the
    operands' common grid."""
    from .dense import power_of_two_type

    ta, tb = ctx.input_types
    precision = ctx.layer.precision or ctx.config.precision
    act_kind, _ = PRECISIONS[precision]
    if isinstance(ta, FloatType) or isinstance(tb, FloatType):
        if ta != tb or not isinstance(ta, FloatType):
            raise ConfigError(f"the two operands of the add are {ta} and {tb}; they must have the same float type",
                              layer=node.name, hint="use one precision for the whole model")
        return node.evolve(types=AddTypes(ta, tb, ta, 0, 0, 0))
    if not (isinstance(ta, FixedType) and isinstance(tb, FixedType)):
        raise ConfigError(f"operands {ta} and {tb} mix fixed and float types", layer=node.name)
    common = max(ta.frac, tb.frac)
    out = ctx.layer.types.get("output") or ctx.hints.tensors.get(node.outputs[0])
    if out is None:
        width = _WIDTH.get(act_kind, max(ta.width, tb.width))
        calib = ctx.calibration.get(node.outputs[0])
        if calib is None:
            # no calibration: the exact sum's range in the wider operand width plus a carry bit
            out = FixedType(max(ta.width, tb.width), common - 1, True, Rounding.CONV_EVEN, Saturation.SATURATE)
        else:
            m = float(np.max(np.abs(calib))) if calib.size else 0.0
            out = power_of_two_type(m, width, Rounding.CONV_EVEN, Saturation.SATURATE)
        if out.frac > common:
            out = FixedType(out.width, common, True, out.rounding, out.saturation)
    if not isinstance(out, FixedType) or out.width > 32:
        raise ConfigError(f"output type {out} of the add must be fixed point, at most 32 bits", layer=node.name)
    if out.frac > common:
        raise ConfigError(
            f"output type {out} has {out.frac} fractional bits, more than the operands' {common}",
            layer=node.name, hint=f"use at most {common} fractional bits for the output",
        )
    if out.rounding not in ctx.device.generation.rounding_modes:
        raise ConfigError(f"rounding mode {out.rounding.value} is not available on {ctx.device.generation.name}",
                          layer=node.name)
    gen = ctx.device.generation
    explicit = "output" in ctx.layer.types
    blame = ConfigError if explicit else ModelError if node.outputs[0] in ctx.hints.tensors else PlanError
    for what, shift, upshift in (("operand A upshift", common - ta.frac, True), ("operand B upshift", common - tb.frac, True),
                                 ("output shift", common - out.frac, False)):
        require_shift(
            gen, shift, what, upshift=upshift, layer=node.name, error=blame if not upshift else PlanError,
            why=f"operands {ta} and {tb} meet on the grid of {common} fractional bits, output {out}",
            hint=f"change layers.{node.name}.output" if explicit and not upshift
            else "the operands' scales (or the output's) lie too far apart: calibrate with data of the range the "
            "model will see, or give the producers' output types explicitly",
        )
    return node.evolve(types=AddTypes(ta, tb, out, common - ta.frac, common - tb.frac, common - out.frac))


ADD = OpFamily(
    name="add",
    float_forward=float_forward,
    emulate=emulate,
    quantise=quantise,
    plan=not_mapped,
    types_to_json=_types_to_json,
    types_from_json=_types_from_json,
)
