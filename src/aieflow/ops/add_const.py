"""Addition of a constant tensor shared by every sample (issue 19: a transformer's positional
embedding, ``tokens + self.pos``): ``y = x + C`` with ``C`` of the sample's shape ``[T, E]``
(``params["constant"]``, float32; a leading 1 of PyTorch's ``[1, T, E]`` dropped).

Integer numerics, the residual add's (``ops/add.py``) with operand B the constant's codes: ``C`` is
quantised once into ``tc`` (the precision's width, the power-of-two type of its largest magnitude,
round half to even, saturating; ``params["constant_q"]``), then per sample
``y = srs((x << sa) + (c << sb), shift)`` exactly as ``add_codes``.  The output type follows the add's
rules (config > QDQ hint > calibration).  Float: fp32 ``float32(x) + float32(C)`` (emulation only).
bf16: ``C`` rounded once to bf16 (nearest, ties to even; ``params["constant_q"]``), then per element
``y = bf16(float32(x) + float32(c))``: the residual add's bf16 rule (``ops/add.py``), what the AIE-ML
vector unit does with bf16 operands in accfloat lanes (``aie::add``, then ``to_vector<bfloat16>``,
nearest even).  The float32 sum of two bf16 values is exact when their exponents differ by 16 or
less; beyond that the smaller is below a quarter of the larger's bf16 ulp, so neither the float32
rounding nor the bf16 one can leave the larger: ``y`` is the exact sum rounded once to bf16
(``tests/test_add_const.py`` checks this against rational arithmetic).

On the DAG path the kernel is ``dag_kernels.h`` ``ConstAdd`` (bf16: ``dag_kernels_bf16.h``
``ConstAddBf16``): the residual add's vector step with operand B read from the constant's codes, row
``r`` of a part reading row ``r % T`` (the plan gives it whole samples per part).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from ..config import PRECISIONS
from ..errors import ConfigError
from ..ir import Node
from ..numerics import fixed
from ..numerics.types import FixedType, FloatType, Rounding, Saturation
from . import add
from .base import OpFamily, QuantContext, not_mapped

_WIDTH = {"i8": 8, "i16": 16}


class ConstAddTypes(add.AddTypes):
    """The add's types; ``input`` is operand A (the rows kernels' common field), ``b`` the constant's."""

    @property
    def input(self):
        return self.a


def _types_from_json(d: dict) -> ConstAddTypes:
    t = add._types_from_json(d)
    return ConstAddTypes(t.a, t.b, t.output, t.shift_a, t.shift_b, t.shift)


def float_forward(node: Node, x: np.ndarray) -> np.ndarray:
    return np.asarray(x, dtype=np.float64) + np.asarray(node.params["constant"], dtype=np.float64)


def emulate(node: Node, x: np.ndarray) -> np.ndarray:
    t: add.AddTypes = node.types
    if t.is_float:
        if t.output.name == "bf16":  # both operands bf16, the float32 sum rounded to bf16 (module docstring)
            c = np.asarray(node.params["constant_q"], dtype=np.float32)
            return fixed.to_bf16(np.asarray(x, dtype=np.float32) + c)
        return (np.asarray(x, dtype=np.float32) + np.asarray(node.params["constant"], dtype=np.float32)).astype(np.float32)
    c = np.broadcast_to(np.asarray(node.params["constant_q"], dtype=np.int64), np.shape(x))
    return add.add_codes(x, c, t)


def constant_type(c: np.ndarray, width: int) -> FixedType:
    """The constant's type: ``width`` bits, the power-of-two range of its largest magnitude."""
    from .dense import power_of_two_type

    m = float(np.max(np.abs(c))) if np.size(c) else 0.0
    return power_of_two_type(m if m > 0 else 1.0, width, Rounding.CONV_EVEN, Saturation.SATURATE)


def quantise(node: Node, ctx: QuantContext) -> Node:
    (tx,) = ctx.input_types
    c = np.asarray(node.params["constant"], dtype=np.float32)
    if isinstance(tx, FloatType):
        t = node.evolve(types=ConstAddTypes(tx, tx, tx, 0, 0, 0))
        if tx.name == "bf16":  # the constant rounded once to bf16, the kernel's parameter
            return t.evolve(params=dict(node.params, constant_q=fixed.to_bf16(c)))
        return t
    if not isinstance(tx, FixedType):
        raise ConfigError(f"'{node.name}' reads {tx}; a fixed-point or float input is needed", layer=node.name)
    precision = ctx.layer.precision or ctx.config.precision
    tc = constant_type(c, _WIDTH.get(PRECISIONS[precision][0], tx.width))
    t = add.quantise(node, replace(ctx, input_types=(tx, tc))).types
    return node.evolve(types=ConstAddTypes(t.a, t.b, t.output, t.shift_a, t.shift_b, t.shift),
                       params=dict(node.params, constant_q=fixed.quantize(c, tc).astype(np.int64)))


ADD_CONST = OpFamily(
    name="add_const", float_forward=float_forward, emulate=emulate, quantise=quantise, plan=not_mapped,
    types_to_json=add._types_to_json, types_from_json=_types_from_json,
)
