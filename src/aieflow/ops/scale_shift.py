"""Per-feature scale and shift, ``y = x s + t`` (issue 17 item 5: a standalone inference BatchNorm,
``s = gamma / sqrt(var + eps)``, ``t = beta - mean s``, that folds into neither the layer before nor
the layer after it, ``frontends/batchnorm.py``).  ``params["scale"]`` / ``params["shift"]`` are
float32 ``(C,)``, one per feature of a ``(C,)`` per-sample tensor (the first per-sample axis of a
larger one, the framework's channel axis, in the float reference).

Integer numerics (what :func:`emulate` computes; the definition the tests check):

* ``s`` is quantised once into ``ts`` (the precision's width, 8 or 16 bits, the power-of-two type of
  its largest magnitude, round half to even, saturating): the multiplier codes ``m``
  (``params["scale_q"]``);
* the products ``x m`` lie on the grid of ``F = frac_x + frac_s`` fractional bits; ``t`` is quantised
  once into ``tt`` (twice the precision's width, the power-of-two type of its largest magnitude, at
  most ``F`` fractional bits; round half to even, saturating): the codes ``c``
  (``params["shift_q"]``), upshifted onto that grid by ``shift_t = F - frac_t``;
* ``y = srs(x m + (c << shift_t), F - frac_y)``: one shift-round-saturate into the output type with
  its rounding and saturation, as the residual add's and the Dense kernel's epilogues.  The output
  type follows the add's rules (config > QDQ hint > calibration, power of two, never finer than
  ``F``).

Float: fp32 ``float32(x) float32(s) + float32(t)`` (two float32 roundings); bf16: ``s`` and ``t``
rounded once to bf16 (``params["scale_q"]`` / ``params["shift_q"]``), then
``y = bf16(float32(x) s + t)``: the bf16 product is exact in float32, the sum rounded once to
float32, then to bf16 (nearest even), as an AIE-ML ``aie::mul`` into accfloat lanes, an accfloat
add and ``to_vector<bfloat16>`` do.

On the DAG path (``kinds.DAG_OPS``: a model that keeps one compiles as a DAG) the kernel is
``dag_kernels.h`` ``ScaleShift`` for int8 / int16 on AIE-ML / AIE-MLv2: ``aie::mul`` of the input and
multiplier vectors into the accumulator, the shift's codes added by ``from_vector(c, SHIFT_T)``, one
``to_vector<TO>(SHIFT)``; for bf16 ``dag_kernels_bf16.h`` ``ScaleShiftBf16``: ``aie::mul`` into
accfloat lanes, ``aie::add`` of the shift, ``to_vector<bfloat16>``, the float32 order above.  fp32 is
refused by name (``dag/plan._check_row_types``; emulated as above), and the kernels scale
``(batch, features)`` tensors only.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..config import PRECISIONS
from ..errors import ConfigError, ModelError, PlanError
from ..ir import Node
from ..numerics import fixed
from ..numerics.types import FixedType, FloatType, NumericType, Rounding, Saturation, parse_type
from .base import OpFamily, QuantContext, require_shift

_WIDTH = {"i8": 8, "i16": 16}


@dataclass(frozen=True)
class ScaleShiftTypes:
    input: NumericType
    scale: NumericType  # the multiplier codes' type (float: the input's)
    offset: NumericType  # the shift's codes' type
    output: NumericType
    shift_t: int  # left shift of the shift's codes onto the products' grid
    shift: int  # SRS right shift from the products' grid to the output

    @property
    def is_float(self) -> bool:
        return isinstance(self.output, FloatType)


def _types_to_json(t: ScaleShiftTypes) -> dict:
    return {
        "input": t.input.to_string(),
        "scale": t.scale.to_string(),
        "offset": t.offset.to_string(),
        "output": t.output.to_string(),
        "shift_t": t.shift_t,
        "shift": t.shift,
    }


def _types_from_json(d: dict) -> ScaleShiftTypes:
    return ScaleShiftTypes(
        parse_type(d["input"]),
        parse_type(d["scale"]),
        parse_type(d["offset"]),
        parse_type(d["output"]),
        int(d["shift_t"]),
        int(d["shift"]),
    )


def make_node(name: str, x: str, y: str, scale, shift, aliases: tuple[str, ...] = ()) -> Node:
    s = np.ascontiguousarray(np.asarray(scale, dtype=np.float64).reshape(-1), dtype=np.float32)
    t = np.ascontiguousarray(np.asarray(shift, dtype=np.float64).reshape(-1), dtype=np.float32)
    return Node(
        name,
        "scale_shift",
        (x,),
        (y,),
        {"channels": int(s.size)},
        {"scale": s, "shift": t},
        aliases=aliases,
    )


def _per_channel(v: np.ndarray, x: np.ndarray) -> np.ndarray:
    """``v`` (C,) broadcast along axis 1 of a batch ``x`` (N, C, ...)."""
    return v.reshape((1, -1) + (1,) * (np.ndim(x) - 2))


def float_forward(node: Node, x: np.ndarray) -> np.ndarray:
    s = np.asarray(node.params["scale"], dtype=np.float64)
    t = np.asarray(node.params["shift"], dtype=np.float64)
    return np.asarray(x, dtype=np.float64) * _per_channel(s, x) + _per_channel(t, x)


def scale_shift_codes(
    x: np.ndarray, m: np.ndarray, c: np.ndarray, t: ScaleShiftTypes
) -> np.ndarray:
    """The integer kernel: exact products plus the upshifted shift codes, one SRS into the output."""
    x = np.asarray(x).astype(np.int64)
    acc = x * _per_channel(np.asarray(m, np.int64), x) + (
        _per_channel(np.asarray(c, np.int64), x) << t.shift_t
    )
    return fixed.srs(acc, t.shift, t.output)


def emulate(node: Node, x: np.ndarray) -> np.ndarray:
    t: ScaleShiftTypes = node.types
    if t.is_float:
        key = "_q" if t.output.name == "bf16" else ""
        s = _per_channel(np.asarray(node.params["scale" + key], np.float32), x)
        c = _per_channel(np.asarray(node.params["shift" + key], np.float32), x)
        y = np.asarray(x, dtype=np.float32) * s + c
        return fixed.to_bf16(y) if key else y.astype(np.float32)
    return scale_shift_codes(x, node.params["scale_q"], node.params["shift_q"], t)


def quantise(node: Node, ctx: QuantContext) -> Node:
    """Types and codes of the module docstring."""
    from .dense import power_of_two_type

    (tx,) = ctx.input_types
    s = np.asarray(node.params["scale"], dtype=np.float32)
    c = np.asarray(node.params["shift"], dtype=np.float32)
    if isinstance(tx, FloatType):
        types = ScaleShiftTypes(tx, tx, tx, tx, 0, 0)
        if tx.name == "bf16":
            return node.evolve(
                types=types,
                params=dict(node.params, scale_q=fixed.to_bf16(s), shift_q=fixed.to_bf16(c)),
            )
        return node.evolve(types=types)
    if not isinstance(tx, FixedType):
        raise ConfigError(
            f"'{node.name}' reads {tx}; a fixed-point or float input is needed", layer=node.name
        )
    precision = ctx.layer.precision or ctx.config.precision
    width = _WIDTH.get(PRECISIONS[precision][0], tx.width)
    rnd, sat = Rounding.CONV_EVEN, Saturation.SATURATE
    ts = power_of_two_type(float(np.max(np.abs(s))) if s.size else 0.0, width, rnd, sat)
    grid = tx.frac + ts.frac
    tt = power_of_two_type(float(np.max(np.abs(c))) if c.size else 0.0, 2 * width, rnd, sat)
    if tt.frac > grid:
        tt = FixedType(tt.width, grid, True, rnd, sat)
    out = ctx.layer.types.get("output") or ctx.hints.tensors.get(node.outputs[0])
    if out is None:
        calib = ctx.calibration.get(node.outputs[0])
        if calib is None:
            out = FixedType(width, min(tx.frac, grid), True, rnd, sat)
        else:
            out = power_of_two_type(
                float(np.max(np.abs(calib))) if calib.size else 0.0, width, rnd, sat
            )
        if out.frac > grid:
            out = FixedType(out.width, grid, True, out.rounding, out.saturation)
    if not isinstance(out, FixedType) or out.width > 32:
        raise ConfigError(
            f"output type {out} of the scale-and-shift must be fixed point, at most 32 bits",
            layer=node.name,
        )
    if out.frac > grid:
        raise ConfigError(
            f"output type {out} has {out.frac} fractional bits, more than the products' {grid}",
            layer=node.name,
            hint=f"use at most {grid} fractional bits for the output",
        )
    gen = ctx.device.generation
    if out.rounding not in gen.rounding_modes:
        raise ConfigError(
            f"rounding mode {out.rounding.value} is not available on {gen.name}", layer=node.name
        )
    explicit = "output" in ctx.layer.types
    blame = (
        ConfigError
        if explicit
        else ModelError
        if node.outputs[0] in ctx.hints.tensors
        else PlanError
    )
    why = f"input {tx} times scale {ts} lies on the grid of {grid} fractional bits, shift {tt}, output {out}"
    require_shift(
        gen,
        grid - tt.frac,
        "shift upshift",
        upshift=True,
        layer=node.name,
        error=PlanError,
        why=why,
        hint="the BatchNorm's shift is far smaller than its scale: check the model's statistics",
    )
    require_shift(
        gen,
        grid - out.frac,
        "output shift",
        upshift=False,
        layer=node.name,
        error=blame,
        why=why,
        hint=f"change layers.{node.name}.output"
        if explicit
        else "calibrate with data of the range the model will see, or give the output type explicitly",
    )
    return node.evolve(
        types=ScaleShiftTypes(tx, ts, tt, out, grid - tt.frac, grid - out.frac),
        params=dict(
            node.params,
            scale_q=fixed.quantize(s, ts).astype(np.int64),
            shift_q=fixed.quantize(c, tt).astype(np.int64),
        ),
    )


def _not_mapped(node: Node, ctx) -> Node:
    raise PlanError(
        "a standalone BatchNorm (per-feature scale and shift) has no kernel in a chain of Dense layers; the DAG "
        "mapping (vek280, vek385) maps it",
        layer=node.name,
        hint="put the BatchNorm directly after the Dense / Conv it normalises or directly before a Dense / unpadded "
        "Conv (both fold into that layer at import), or use aieflow.emulate(model, ...) for bit-exact predictions",
    )


SCALE_SHIFT = OpFamily(
    name="scale_shift",
    float_forward=float_forward,
    emulate=emulate,
    quantise=quantise,
    plan=_not_mapped,
    types_to_json=_types_to_json,
    types_from_json=_types_from_json,
)
