"""fp32 Dense layers with streamed weights: their numerics are the GEMM design's own order.

A resident fp32 Dense kernel (``ops/dense.py``) starts every output at its bias and adds the
products in increasing k, one float32 rounding per product and per sum.  The GEMM design that a
streamed layer runs on (``gemm/emulate.py``) starts each Cr at +0.0 for every kc block, the PL
write-back adds the blocks into C (from +0.0), and the epilogue adds the bias last.  Float addition
is not associative, so the two orders may differ in the last bits; aieflow does not pretend
otherwise: a design with a streamed fp32 layer emulates *that* layer in the GEMM's order
(:func:`emulate_streamed_float`) and every other layer as before (:class:`GemmOrderEmulation`).

Epilogue (``templates/gemm/dense_epilogue_float.h.j2``), per output, in this order:
``y = c + bias`` (one float32 rounding; no add without a bias), then ReLU as ``y < 0 ? 0 : y``.

bf16 layers (AIE-ML / AIE-MLv2, the bf16 memory-tile GEMM): the layer input is rounded to bf16 as the
resident bf16 kernel rounds it, the weights are bf16 already, every product is exact in float32 so
the GEMM's order is the same float32 order; the epilogue adds the bias in float32, rounds once to
bf16 (nearest, ties to even: ``numerics.fixed.to_bf16``), then applies the ReLU, as the resident bf16
kernel does after its own sum.  Y leaves the PL as bf16 bit patterns.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

import numpy as np

from ..design import Design
from ..ir import Node
from ..numerics import fixed
from ..ops.registry import family
from . import emulate

if TYPE_CHECKING:
    from .dense import StreamedDensePlan


def gemm_operands(plan: StreamedDensePlan, x: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A and B of the layer's GEMM: (X, W) for ``xw``, (W^T, X^T) for ``wx``."""
    if plan.orientation == "xw":
        return x, w
    return np.ascontiguousarray(w.T), np.ascontiguousarray(x.T)


def epilogue_float(c: np.ndarray, bias: np.ndarray | None, relu: bool, bf16: bool = False) -> np.ndarray:
    """The fp32 / bf16 epilogue kernel's operations on C (samples x features, float32), in its order."""
    y = np.asarray(c, dtype=np.float32)
    if bias is not None:
        y = y + np.asarray(bias, dtype=np.float32)[None, :]  # float32 + float32: one rounding
    if bf16:
        y = fixed.to_bf16(y)  # one rounding to bf16, nearest, ties to even
    if relu:
        y = np.where(y < np.float32(0), np.float32(0), y).astype(np.float32)  # -0.0 stays -0.0, as in C++
    return y


def emulate_streamed_float(plan: StreamedDensePlan, node: Node, x: np.ndarray) -> np.ndarray:
    """What the generated GEMM + fp32 epilogue compute for the layer's inputs ``x`` (..., in_features):
    the GEMM's fp32 emulation (``gemm/emulate.py``, bit-exact with its x86 harness) on the operands
    of the plan's orientation, then the epilogue's bias add and ReLU."""
    x = np.asarray(x, dtype=np.float32)
    if plan.epilogue.bf16:
        x = fixed.to_bf16(x)  # as the resident bf16 kernel rounds its input
    lead = x.shape[:-1]
    x2 = np.ascontiguousarray(x.reshape(-1, x.shape[-1]))
    w = np.asarray(node.params["weight_q"], dtype=np.float32)
    a, b = gemm_operands(plan, x2, w)
    gp = replace(plan.gemm, m=a.shape[0], n=b.shape[1])  # the sample count is a run-time argument
    a, b = emulate.check_operands(gp, a, b)
    c = emulate.gemm(gp, a, b)
    if plan.orientation == "wx":
        c = np.ascontiguousarray(c.T)
    bias = node.params.get("bias_q")
    y = epilogue_float(c, bias, node.attrs.get("activation") == "relu", plan.epilogue.bf16)
    return y.reshape(*lead, -1)


@dataclass
class GemmOrderEmulation(Design):
    """The whole model's emulator (``Design``'s numerics: quantise, trace, predict, dequantise) with
    the streamed fp32 layers in ``streamed`` computed in their GEMM's order."""

    streamed: Mapping[str, StreamedDensePlan] = field(default_factory=dict)

    def trace(self, xq: np.ndarray, keep: bool = True, mask: np.ndarray | None = None) -> dict[str, np.ndarray]:
        if mask is not None:  # Design.run passes the keyword; a Dense chain has no run-time mask input
            raise ValueError("a streamed Dense model takes no run-time mask")
        values = {self.graph.inputs[0]: xq}
        last_use = {t: i for i, node in enumerate(self.graph.nodes) for t in node.inputs}
        for i, node in enumerate(self.graph.nodes):
            args = [values[t] for t in node.inputs]
            plan = self.streamed.get(node.name)
            if plan is not None:
                values[node.outputs[0]] = emulate_streamed_float(plan, node, *args)
            else:
                values[node.outputs[0]] = family(node.op, node.name).emulate(node, *args)
            if not keep:
                for t in set(node.inputs):
                    if last_use[t] == i and t not in self.graph.outputs:
                        del values[t]
        return values


def float_plans(plans: Mapping[str, StreamedDensePlan]) -> dict[str, StreamedDensePlan]:
    """The plans whose layer is fp32 or bf16 (the ones emulated in the GEMM's order)."""
    return {name: p for name, p in plans.items() if p.epilogue.is_float}


def same_values(a: np.ndarray, b: np.ndarray) -> bool:
    """fp32 values equal bit for bit (-0.0 differs from +0.0; NaNs equal when both are NaN).  Not
    for integer codes: the Dense emulator's fast path returns them as float64, where -0.0 == 0."""
    a32, b32 = np.asarray(a, dtype=np.float32), np.asarray(b, dtype=np.float32)
    if a32.shape != b32.shape:
        return False
    both_nan = np.isnan(a32) & np.isnan(b32)
    return bool(np.all((a32.view(np.uint32) == b32.view(np.uint32)) | both_nan))


def ulp_distance(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """|a - b| in units in the last place of float32, elementwise (0 for equal values; +0.0 and
    -0.0 are 0 apart): the distance between the two values' positions on the ordered float line."""
    def ordered(v: np.ndarray) -> np.ndarray:
        i = np.asarray(v, dtype=np.float32).view(np.int32).astype(np.int64)
        return np.where(i < 0, -(i & 0x7FFFFFFF), i)

    return np.abs(ordered(a) - ordered(b))


def compare(got: np.ndarray, ref: np.ndarray) -> dict[str, float]:
    """Largest and median float32 ulp distance, and largest difference relative to the output's
    scale, |got - ref| / max|ref| (ulps of outputs near zero, where the sum cancelled, are large
    even when the difference is tiny against the output's scale)."""
    got64, ref64 = np.asarray(got, np.float64), np.asarray(ref, np.float64)
    scale = float(np.max(np.abs(ref64))) or 1.0
    ulp = ulp_distance(got, ref64.astype(np.float32))  # a float64 reference: its nearest float32
    return {"max_ulp": int(ulp.max()) if ulp.size else 0,
            "median_ulp": float(np.median(ulp)) if ulp.size else 0.0,
            "differing": int(np.count_nonzero(ulp)),
            "values": int(ulp.size),
            "max_rel": float(np.max(np.abs(got64 - ref64)) / scale) if ulp.size else 0.0}
