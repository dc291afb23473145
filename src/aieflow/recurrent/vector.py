"""When a fixed-point row kernel or cascade chain may use vector MACs and still match hls4ml bit
for bit.

hls4ml's dense (``nnet_dense_latency.h``, ``ops/recurrent.py``) casts every product to the
accumulator type and every partial sum too: ``a = C(b); a = C(a + C(x_k w_k))`` for k = 0, 1, ...
An AI Engine ``aie::mac`` chain keeps exact products in wide accumulator lanes, sums them in lane
order and reduces the lanes at the end.  The two agree exactly when

* every cast of a product is reproduced per lane: ``d = frac(x) + frac(w) - frac(acc)`` <= 0 (the
  product lies on the accumulator's grid: the cast drops nothing), or d > 0 and the accumulator's
  rounding is one of the device's shift-round-saturate modes, so ``aie::mul`` then
  ``to_vector<int32>(d)`` rounds each product as the cast does (``vector_round``);
* the overflow of the casts is either modular (``WRAP``: the wraps of every product and partial
  sum are one wrap of the exact sum, in any order) or provably absent (``SAT`` / ``SAT_SYM``:
  |C(b)| plus the largest possible |C(p_k)| summed over the row stays within the type);
* nothing overflows on the AIE: the row's largest possible |sum| (products, or rounded products)
  is below 2^31, so the accumulator lanes (at least 32 bits), ``to_vector<int32>`` and the int32
  lane reduction hold it exactly, whatever order the lanes are summed in;
* the vector's codes and the weights fit the MAC's lane types (the layer's kind pair, e.g.
  int16 x int16), so the MAC runs at the catalog's rate for that pair.

Bounds use the layer's actual weight codes and, for the vector, the input type's whole range
(W x) or the largest |h| the recurrence can produce (U h: ``ops.recurrent.state_max_code``, the
gate tables' bound, |h| <= 1 for hls4ml's tables, at most the result type's range).  The bias cast, the final overflow and the
wrap to the accumulator width are done once per row on the scalar unit (``rnn::cast``).  What
does not meet these conditions keeps the scalar kernel (hls4ml's order on int64 codes).

Cascade chains (``rnn_cascade.h``) need no further condition.  A chain splits a row's k terms
into column blocks, one per tile; each tile adds its block's terms to the partial sums it
received (lane = row), the first tile starting from 0, and the last adds the cast bias and
applies the one overflow, as a row kernel's ``finish``.  Every partial sum the chain forms (a
lane's running sum inside a tile, a tile's prefix of the row carried on the cascade) is a sum of
a subset of the row's terms, so its magnitude is at most the row sum bounded above over the
WHOLE row's k, not one tile's block: below 2^31, so it is exact in int32 lanes, in
``to_vector<int32>(0)`` and in the cascade's (48- or 64-bit) accumulator lanes, whatever the
chain's length.  Integer sums are exact, so the order of the blocks does not matter.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..devices import Device
from ..ir import Node
from ..numerics import fixed
from ..numerics.types import FixedType, Saturation
from ..ops.recurrent import state_max_code

KERNELS = ("vector", "vector_round", "scalar")  # mac chain | mul + per-lane rounding + add | hls4ml's scalar loop
INT32_LIMIT = 2**31 - 1


@dataclass(frozen=True)
class VectorForm:
    """How a row kernel's product is vectorised exactly."""

    shift: int  # frac(x) + frac(w) - frac(acc): <= 0 products on the accumulator grid; > 0 rounded per lane
    kind: str  # "vector" (shift <= 0) or "vector_round"


def _lane_fits(t: FixedType, bits: int) -> bool:
    return -(2 ** (bits - 1)) <= t.min_code and t.max_code <= 2 ** (bits - 1) - 1


def vector_form(node: Node, recurrent: bool, device: Device, pair: tuple[str, str]) -> VectorForm | str:
    """The exact vector form of the layer's U h (``recurrent``) or W x product, or why there is none."""
    t = node.types
    if t is None or t.is_float:
        return VectorForm(0, "vector")
    acc: FixedType = t.accum
    xt: FixedType = t.output if recurrent else t.input
    wt: FixedType = t.recurrent_weight if recurrent else t.weight
    bt: FixedType = t.recurrent_bias if recurrent else t.bias
    w = np.asarray(node.params["recurrent_weight_q" if recurrent else "weight_q"], dtype=np.int64)
    b = np.asarray(node.params["recurrent_bias_q" if recurrent else "bias_q"], dtype=np.int64)
    xbits, wbits = (int(p[1:]) for p in pair)
    what = "U h" if recurrent else "W x"
    if not _lane_fits(xt, xbits):
        return f"{what}: the vector's codes ({xt}) do not fit int{xbits} lanes"
    if w.size and (w.min() < -(2 ** (wbits - 1)) or w.max() > 2 ** (wbits - 1) - 1):
        return f"{what}: the weight codes do not fit int{wbits} lanes"
    shift = xt.frac + wt.frac - acc.frac
    if shift > 0 and acc.rounding not in device.generation.rounding_modes:
        return (f"{what}: each product loses {shift} bits with {acc.rounding.value} rounding, which "
                f"{device.generation.name} cannot apply per lane")
    xmax = max(abs(xt.min_code), abs(xt.max_code))
    if recurrent:  # h is bounded by the gate tables, usually far inside its type (|h| <= 1)
        xmax = min(xmax, state_max_code(t, node.op))
    mags = xmax * np.abs(w)  # (k, rows): largest |product| code of each term
    if shift > 0:
        terms = (mags >> shift) + (mags > 0)  # |round(p / 2^d)| <= floor(|p| / 2^d) + 1
    else:
        terms = mags
    row_sum = terms.sum(axis=0) if terms.size else np.zeros(b.shape, dtype=np.int64)
    if row_sum.size and int(row_sum.max()) > INT32_LIMIT:
        return f"{what}: a row's sum can reach {int(row_sum.max())}, beyond the int32 lanes"
    if shift < 0 and row_sum.size and int(row_sum.max()) > 2**62 >> -shift:
        return f"{what}: products shifted {-shift} bits onto the accumulator grid exceed 64 bits"
    if acc.saturation is not Saturation.WRAP:
        cb = np.abs(fixed.cast(b, bt.frac, acc)).astype(np.int64)
        grid = row_sum if shift >= 0 else row_sum << -shift
        worst = int((cb + grid).max()) if grid.size else 0
        lo = -acc.max_code if acc.saturation is Saturation.SYMMETRIC and acc.signed else acc.min_code
        if worst > acc.max_code or -worst < lo:
            return (f"{what}: a partial sum could saturate the accumulator ({acc}); hls4ml saturates it "
                    "step by step, which a lane-parallel sum does not reproduce")
    return VectorForm(shift, "vector" if shift <= 0 else "vector_round")


def kernel_kinds(node: Node, device: Device, pair: tuple[str, str]) -> tuple[str, str]:
    """(U h, W x) row-kernel kinds of a layer: the exact vector form where one exists, else scalar."""
    kinds = []
    for recurrent in (True, False):
        form = vector_form(node, recurrent, device, pair)
        kinds.append(form.kind if isinstance(form, VectorForm) else "scalar")
    return kinds[0], kinds[1]


def kernel_reasons(node: Node, device: Device, pair: tuple[str, str],
                   columns: tuple[bool, bool] = (False, False)) -> tuple[str, str]:
    """Why each product's kernel is what it is (summary, design.json); ``columns``: whether the
    (U h, W x) product runs as cascade chains rather than row kernels."""
    out = []
    for recurrent, column in zip((True, False), columns, strict=True):
        form = vector_form(node, recurrent, device, pair)
        chain = ("per chain tile, the partial sums exact on the cascade, the bias and one overflow at "
                 "the last tile" if column else "")
        if isinstance(form, str):
            out.append(f"scalar, hls4ml's order: {form}")
        elif node.types is None or node.types.is_float:
            out.append("vector (fp32 lanes)")
        elif form.shift <= 0:
            out.append("vector: aie::mac " + (chain if column else "chain") + ", products exact on the accumulator grid")
        else:
            out.append(f"vector: aie::mul{' ' + chain if column else ''}, each product rounded per lane by "
                       f"{form.shift} bits, int32 adds")
    return out[0], out[1]
