"""Element-wise ops that the fuse pass folds into the preceding dense layer.

They keep a float reference (used for calibration before fusion) but have no kernel of their own:
a standalone instance is reported as unsupported with a hint.
"""

from __future__ import annotations

import numpy as np

from ..errors import UnsupportedOpError
from ..ir import Node
from .base import OpFamily


def _relu(node: Node, x: np.ndarray) -> np.ndarray:
    return np.maximum(x, 0)


def _bias_add(node: Node, x: np.ndarray) -> np.ndarray:
    return x + node.params["bias"]


def _standalone(node: Node, *_args) -> Node:
    what = {"relu": "ReLU", "bias_add": "bias Add"}[node.op]
    raise UnsupportedOpError(
        f"a standalone {what} (not directly after a Linear / Gemm / MatMul / Conv) has no AI Engine kernel yet",
        layer=node.name,
        hint=f"put the {what} right after a dense layer so aieflow fuses it into that layer's kernel",
    )


RELU = OpFamily(name="relu", float_forward=_relu, emulate=_standalone, quantise=_standalone, fused_only=True)
BIAS_ADD = OpFamily(name="bias_add", float_forward=_bias_add, emulate=_standalone, quantise=_standalone, fused_only=True)
