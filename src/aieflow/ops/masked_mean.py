"""Masked mean pooling over tokens with a run-time key padding mask (issue 19: a jet tagger's
``forward(x, mask)`` pooling only the particles it has): ``y[e] = sum_t keep[t] x[t, e] / sum_t keep[t]``.

Inputs: ``x`` of per-sample shape ``(T, E)`` and the graph's run-time mask (``graph.inputs[1]``,
per-sample ``(T,)``, keep bytes of :data:`ops.activation.MASK_TYPE`, 1 = the token is kept); output
``(E,)``.  Imported from PyTorch's masked mean patterns (``frontends/torch_pooling.py``).

Integer numerics (what :func:`emulate` computes; the kernel and the tests follow it): the output type
is the input's type (a mean of kept codes lies between their minimum and maximum, so it never
saturates), ``S = sum of the kept codes`` exactly (int64), ``k`` the kept count, and
``y = round(S / k)``: the exact rational ``S / k`` rounded once by the input type's rounding mode
(round half to even by default; ``numerics.fixed.round_divide``, the same definition as average
pooling's window divide).  A sample keeping no token (``k = 0``: possible at run time only) gives 0
everywhere, as the masked softmax's fully masked row; PyTorch gives NaN (0 / 0) there.

bf16 numerics (AIE-ML / AIE-MLv2: what the kernel computes in accfloat lanes and the emulation bit for
bit): the output is bf16; per sample and feature a float32 sum starts at +0.0 and adds each kept token's
bf16 value (exact in float32) in increasing ``t``, one float32 rounding per addition; ``inv = float32(1 / k)``
(one correctly rounded float32 division per sample, as the bf16 softmax's reciprocal);
``y = bf16(float32(S inv))``, nearest, ties to even (docs/numerics.md "bf16").  ``k = 0`` gives +0.0.

Float (calibration, ``float_forward``): ``sum(x keep) / k`` in float64, 0 where ``k = 0``.  fp32 is refused
by name (no fp32 DAG kernels): the layer is emulated in int8 / int16 / bf16.

Mapping: the DAG path (``dag/plan.py``, a rows kernel with one output row per sample: ``dag_kernels.h``
MaskedMean, the run-time mask read from its own PLIO as the padded softmax reads it); :func:`plan`, the
chain planner's, refuses it by name (a model with a run-time mask is always a DAG design: ``kinds.DAG_OPS``).
"""

from __future__ import annotations

import numpy as np

from ..errors import ConfigError, PlanError
from ..ir import Node
from ..numerics import fixed
from ..numerics.types import FixedType, FloatType
from .activation import MASK_TYPE
from .base import QuantContext, one_type_family

NOT_MAPPED = ("masked mean pooling (a mean over the tokens kept by the run-time key padding mask) maps on the DAG "
              "path only (a MaskedMean kernel reading the mask PLIO), not in a chain of Dense layers")


def _keep(mask: np.ndarray, n: int, t: int) -> np.ndarray:
    return (np.asarray(mask).reshape(n, t) != 0).astype(np.int64)


def float_forward(node: Node, x: np.ndarray, mask: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    keep = _keep(mask, x.shape[0], x.shape[1]).astype(np.float64)
    s = np.einsum("nte,nt->ne", x, keep)
    k = keep.sum(axis=1, keepdims=True)
    return np.where(k > 0, s / np.maximum(k, 1.0), 0.0)


def emulate_bf16(x: np.ndarray, keep: np.ndarray) -> np.ndarray:
    """The bf16 rule (module docstring) on float32 values (rounded to bf16 first); ``keep`` ``[n, T]``."""
    x = fixed.to_bf16(np.asarray(x, dtype=np.float32))
    s = np.zeros((x.shape[0], x.shape[2]), dtype=np.float32)
    with np.errstate(over="ignore", invalid="ignore"):  # IEEE: a sum past float32's range is inf, inf - inf NaN
        for t in range(x.shape[1]):  # increasing t, one float32 rounding per addition; a dropped token adds nothing
            s = np.where(keep[:, t, None] != 0, s + x[:, t], s).astype(np.float32)
    k = keep.sum(axis=1, keepdims=True)
    inv = (np.float32(1.0) / np.maximum(k, 1).astype(np.float32)).astype(np.float32)
    return np.where(k > 0, fixed.to_bf16((s * inv).astype(np.float32)), np.float32(0.0)).astype(np.float32)


def emulate(node: Node, x: np.ndarray, mask: np.ndarray) -> np.ndarray:
    t: FixedType = node.types
    if isinstance(t, FloatType):  # bf16 (quantise refuses fp32)
        return emulate_bf16(x, _keep(mask, x.shape[0], x.shape[1]))
    x = np.asarray(x, dtype=np.int64)
    keep = _keep(mask, x.shape[0], x.shape[1])
    s = (x * keep[:, :, None]).sum(axis=1)  # exact: |S| <= T 2^(width - 1)
    k = np.broadcast_to(keep.sum(axis=1, keepdims=True), s.shape)
    y = fixed.round_divide(s, np.maximum(k, 1), t.rounding)
    return np.where(k > 0, fixed.saturate(y, t), 0)


def quantise(node: Node, ctx: QuantContext) -> Node:
    tx = ctx.input_types[0]
    if len(ctx.input_types) != 2 or ctx.input_types[1] != MASK_TYPE:  # pragma: no cover - the frontend's own
        raise ConfigError(f"masked mean '{node.name}' reads no run-time key padding mask", layer=node.name)
    if not isinstance(tx, FixedType) and tx != FloatType("bf16"):
        raise ConfigError(f"masked mean pooling '{node.name}' reads {tx}; it is emulated in int8 / int16 / bf16 only",
                          layer=node.name, hint="use precision int8, int16 or bf16")
    return node.evolve(types=tx)


def plan(node: Node, ctx) -> None:
    raise PlanError(NOT_MAPPED, layer=node.name,
                    hint="compile the model with aieflow.compile (it takes the DAG path), or use aieflow.emulate")


MASKED_MEAN = one_type_family("masked_mean", float_forward, emulate, quantise=quantise, plan=plan)
