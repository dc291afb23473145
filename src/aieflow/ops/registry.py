"""The op families the compiler knows: one explicit dictionary, no import side effects."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from ..errors import UnsupportedOpError
from ..ir import Graph
from .activation import ACTIVATION, SOFTMAX
from .add import ADD
from .add_const import ADD_CONST
from .base import OpFamily
from .conv import CONV2D, PRELU, TANH
from .dense import DENSE
from .elementwise import BIAS_ADD, RELU
from .layernorm import LAYERNORM
from .masked_mean import MASKED_MEAN
from .matmul import MATMUL
from .pool import AVGPOOL, MAXPOOL
from .prepend_const import PREPEND_CONST
from .recurrent import GRU, LSTM
from .resize import RESIZE
from .scale_shift import SCALE_SHIFT
from .shuffle import PIXEL_SHUFFLE
from .views import CONCAT, PATCHES, RESHAPE, SLICE, TRANSPOSE

OP_FAMILIES: Mapping[str, OpFamily] = MappingProxyType(
    {
        "dense": DENSE,
        "reshape": RESHAPE,
        "relu": RELU,
        "bias_add": BIAS_ADD,
        "gru": GRU,
        "lstm": LSTM,
        "conv2d": CONV2D,
        "tanh": TANH,
        "prelu": PRELU,
        "pixel_shuffle": PIXEL_SHUFFLE,
        "resize": RESIZE,
        "maxpool": MAXPOOL,
        "avgpool": AVGPOOL,
        "add": ADD,
        "add_const": ADD_CONST,
        "layernorm": LAYERNORM,
        "transpose": TRANSPOSE,
        "concat": CONCAT,
        "slice": SLICE,
        "activation": ACTIVATION,
        "softmax": SOFTMAX,
        "matmul": MATMUL,
        "masked_mean": MASKED_MEAN,
        "patches": PATCHES,
        "prepend_const": PREPEND_CONST,
        "scale_shift": SCALE_SHIFT,
    }
)

# Families that import and emulate but have no AI Engine mapping yet: their ``plan`` raises a
# PlanError naming the layer (aieflow.emulate runs models that contain them).
EMULATION_ONLY: frozenset[str] = frozenset(
    {"gru", "lstm", "conv2d", "pixel_shuffle", "resize", "maxpool", "avgpool", "add", "add_const", "layernorm", "transpose", "concat", "slice",
     "activation", "softmax", "matmul", "masked_mean", "patches", "prepend_const",
     "scale_shift"}
)


def family(op: str, node_name: str = "") -> OpFamily:
    try:
        return OP_FAMILIES[op]
    except KeyError:
        raise UnsupportedOpError(
            f"op '{op}' has no op family; known: {', '.join(OP_FAMILIES)}", layer=node_name or None
        ) from None


def require_mapping(graph: Graph) -> None:
    """Raise the PlanError of the first layer of ``graph`` that has no AI Engine mapping, if any.

    For callers that would otherwise only see a planner's "nothing fits" (the search pass treats a
    layer it cannot plan as one that does not fit)."""
    from .post import is_fused_post

    for node in graph.nodes:
        if node.op in EMULATION_ONLY and not is_fused_post(graph, node):
            family(node.op, node.name).plan(node, None)
