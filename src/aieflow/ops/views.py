"""Views: reshapes that only reinterpret a row-major sample, so they cost no kernel and no tile."""

from __future__ import annotations

import numpy as np

from ..ir import Node
from ..numerics.types import parse_type
from .base import OpFamily, QuantContext


def _forward(node: Node, x: np.ndarray) -> np.ndarray:
    return x.reshape((x.shape[0], *node.attrs["shape"]))


def _quantise(node: Node, ctx: QuantContext) -> Node:
    # A view keeps its input's type; nothing to choose.
    return node.evolve(types=ctx.input_types[0])


RESHAPE = OpFamily(
    name="reshape",
    float_forward=_forward,
    emulate=_forward,
    quantise=_quantise,
    types_to_json=lambda t: {"type": t.to_string()},
    types_from_json=lambda d: parse_type(d["type"]),
    is_view=True,
)
