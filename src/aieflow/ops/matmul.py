"""Dynamic matrix product of two computed tensors (attention's ``Q K^T`` and ``A V``): ``y = a @ b``
or, with ``attrs["transpose_b"]``, ``y = a @ b^T`` (``b`` read as ``[N, K]``).

Both operands are activations (no weights): per sample ``a`` is ``[..., M, K]`` and ``b`` is
``[..., K, N]`` (``[..., N, K]`` transposed), the leading per-sample dimensions (heads) equal and
batched.  The frontends fold a transpose of the last two axes of ``b`` into ``transpose_b``
(``frontends/attention.py``).

Integer numerics (what :func:`emulate` computes; the DAG ``MatMul`` kernel follows it bit for bit):

* every product ``a_ik b_kj`` exactly (int8 / int16 codes), summed exactly in a wide accumulator
  (int64 here, 64-bit lanes in the kernel) on the grid of ``frac_a + frac_b`` fractional bits;
* one shift-round-saturate into the output type, ``y = srs(sum, frac_a + frac_b - frac_y)``, with
  the output type's rounding and saturation: the rule the Dense layers use for their output.

The output type is chosen as a Dense layer's is: explicit config type > a type the model carries
(QDQ) > calibration (the finest power-of-two scale that holds the calibration maximum in the
precision's width), never finer than the accumulator.

Float numerics: fp32 ``float32`` products summed in float32 (numpy's matmul order; emulation only,
no fp32 kernel).  bf16 (the DAG ``MatMul`` kernel on bfloat16, bit for bit): per output, a float32
sum starting at +0.0 adds ``float32(a_ik b_kj)`` for k = 0 .. K-1 in increasing order (a product
of two bf16 values is exact in float32 but for underflow / overflow), one rounding per addition,
then one rounding to bf16 (nearest, ties to even).
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
class MatMulTypes:
    a: NumericType
    b: NumericType
    output: NumericType
    shift: int  # SRS right shift from the accumulator grid (frac_a + frac_b) to the output

    @property
    def is_float(self) -> bool:
        return isinstance(self.output, FloatType)


def _types_to_json(t: MatMulTypes) -> dict:
    return {"a": t.a.to_string(), "b": t.b.to_string(), "output": t.output.to_string(), "shift": t.shift}


def _types_from_json(d: dict) -> MatMulTypes:
    return MatMulTypes(parse_type(d["a"]), parse_type(d["b"]), parse_type(d["output"]), int(d["shift"]))


def transpose_b(node: Node) -> bool:
    return bool(node.attrs.get("transpose_b", False))


def _b_view(node: Node, b: np.ndarray) -> np.ndarray:
    return np.swapaxes(b, -1, -2) if transpose_b(node) else b


def float_forward(node: Node, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.matmul(np.asarray(a, dtype=np.float64), _b_view(node, np.asarray(b, dtype=np.float64)))


def matmul_codes(a: np.ndarray, b: np.ndarray, t: MatMulTypes, trans_b: bool = False) -> np.ndarray:
    """The integer kernel: exact int64 products and sums, one SRS into the output type."""
    bb = np.asarray(b).astype(np.int64)
    acc = np.matmul(np.asarray(a).astype(np.int64), np.swapaxes(bb, -1, -2) if trans_b else bb)
    return fixed.srs(acc, t.shift, t.output)


def bf16_sequential(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """float32 sums of ``a @ b`` in the bf16 kernel's order: from +0.0, one product per k in
    increasing k, each product and each addition rounded to float32 (before the final bf16 rounding)."""
    acc = np.zeros(np.broadcast_shapes(a.shape[:-1] + (1,), b.shape[:-2] + (1, b.shape[-1])), dtype=np.float32)
    with np.errstate(over="ignore", invalid="ignore"):
        for k in range(a.shape[-1]):
            acc = acc + a[..., :, k:k + 1] * b[..., k:k + 1, :]
    return acc


def emulate(node: Node, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    t: MatMulTypes = node.types
    if t.is_float:
        a32 = np.asarray(a, dtype=np.float32)
        b32 = _b_view(node, np.asarray(b, dtype=np.float32))
        if t.output.name != "bf16":
            return np.matmul(a32, b32).astype(np.float32)
        return fixed.to_bf16(bf16_sequential(a32, b32))
    return matmul_codes(a, b, t, transpose_b(node))


def quantise(node: Node, ctx: QuantContext) -> Node:
    from .dense import power_of_two_type

    ta, tb = ctx.input_types
    precision = ctx.layer.precision or ctx.config.precision
    act_kind, _ = PRECISIONS[precision]
    if isinstance(ta, FloatType) or isinstance(tb, FloatType):
        if ta != tb or not isinstance(ta, FloatType):
            raise ConfigError(f"the two operands of the matmul are {ta} and {tb}; they must have the same float type",
                              layer=node.name, hint="use one precision for the whole model")
        return node.evolve(types=MatMulTypes(ta, tb, ta, 0))
    if not (isinstance(ta, FixedType) and isinstance(tb, FixedType)):
        raise ConfigError(f"operands {ta} and {tb} of the matmul mix fixed and float types", layer=node.name,
                          hint="use one precision for the whole model")
    for what, t in (("A", ta), ("B", tb)):
        if t.width not in (8, 16) or not t.signed:
            raise ConfigError(f"operand {what} of the matmul is {t}; the matmul multiplies signed 8- or 16-bit codes",
                              layer=node.name, hint="use precision int8 or int16")
    acc_frac = ta.frac + tb.frac
    out = ctx.layer.types.get("output") or ctx.hints.tensors.get(node.outputs[0])
    if out is None:
        width = _WIDTH.get(act_kind, max(ta.width, tb.width))
        calib = ctx.calibration.get(node.outputs[0])
        if calib is None:
            out = FixedType(32, acc_frac, True, Rounding.CONV_EVEN, Saturation.SATURATE)
        else:
            m = float(np.max(np.abs(calib))) if calib.size else 0.0
            out = power_of_two_type(m, width, Rounding.CONV_EVEN, Saturation.SATURATE)
            if out.frac > acc_frac:  # no finer than the accumulator: the extra bits are zeros
                out = FixedType(out.width, acc_frac, True, out.rounding, out.saturation)
    if not isinstance(out, FixedType) or out.width > 32:
        raise ConfigError(f"output type {out} of the matmul must be fixed point, at most 32 bits", layer=node.name,
                          hint=f"set layers.{node.name}.output to e.g. fixed<16,8>")
    gen = ctx.device.generation
    if out.rounding not in gen.rounding_modes:
        raise ConfigError(f"rounding mode {out.rounding.value} is not available on {gen.name}", layer=node.name)
    explicit = "output" in ctx.layer.types
    blame = ConfigError if explicit else ModelError if node.outputs[0] in ctx.hints.tensors else PlanError
    shift = acc_frac - out.frac
    require_shift(gen, shift, "output shift", upshift=False, layer=node.name, error=blame,
                  why=f"operands {ta} x {tb} accumulate with {acc_frac} fractional bits, output {out}",
                  hint=f"change layers.{node.name}.output" if explicit else
                  f"give layers.{node.name}.output a type with {acc_frac - gen.srs_shift_max}..{acc_frac} "
                  "fractional bits")
    return node.evolve(types=MatMulTypes(ta, tb, out, shift))


def _plan(node: Node, ctx) -> Node:
    raise PlanError("MatMul layers (a product of two computed tensors) have no kernel in a chain of Dense layers; "
                    "the DAG mapping, on AIE-ML / AIE-MLv2 devices (vek280, vek385; docs/attention.md), maps them",
                    layer=node.name, hint="compile for vek280 or vek385, or use aieflow.emulate(model, ...)")


MATMUL = OpFamily(
    name="matmul",
    float_forward=float_forward,
    emulate=emulate,
    quantise=quantise,
    plan=_plan,
    types_to_json=_types_to_json,
    types_from_json=_types_from_json,
)
