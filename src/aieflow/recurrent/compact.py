"""The compact mapping's per-layer facts (issue 22): what the compact tile's vector finish does per
lane group, from the layer's types (``rnn_compact.h`` ``CompactProduct::finish``), for the cycle
model (``costs.compact_product_cycles``) and the emitter (``emit._compact_config``).
"""

from __future__ import annotations

from ..ir import Node
from ..numerics.types import Saturation
from .costs import COMPACT_FINISH_ADD_OPS, COMPACT_FINISH_WRAP_OPS


def finish_ops(node: Node, kinds: tuple[str, str]) -> tuple[int, int]:
    """Vector ops per lane group of the (U h, W x) finish: the bias add, the aie::mac form's
    conversion to int32 lanes, the upshift of coarse products (SHIFT < 0) and the wrap of an
    accumulator narrower than 32 bits.  fp32 and scalar products have none (the bias is the
    lanes' start value, or part of hls4ml's scalar order)."""
    t = node.types
    if t is None or t.is_float:
        return (0, 0)
    out = []
    for recurrent, kind in zip((True, False), kinds, strict=True):
        if kind == "scalar":
            out.append(0)
            continue
        xt = t.output if recurrent else t.input
        wt = t.recurrent_weight if recurrent else t.weight
        shift = xt.frac + wt.frac - t.accum.frac
        ops = COMPACT_FINISH_ADD_OPS + (kind == "vector") + (shift < 0)
        if t.accum.saturation is Saturation.WRAP and t.accum.width < 32:
            ops += COMPACT_FINISH_WRAP_OPS
        out.append(ops)
    return out[0], out[1]
