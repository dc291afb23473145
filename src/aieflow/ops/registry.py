"""The op families the compiler knows: one explicit dictionary, no import side effects."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from ..errors import UnsupportedOpError
from .base import OpFamily
from .dense import DENSE
from .elementwise import BIAS_ADD, RELU
from .recurrent import GRU, LSTM
from .views import RESHAPE

OP_FAMILIES: Mapping[str, OpFamily] = MappingProxyType(
    {
        "dense": DENSE,
        "reshape": RESHAPE,
        "relu": RELU,
        "bias_add": BIAS_ADD,
        "gru": GRU,
        "lstm": LSTM,
    }
)


def family(op: str, node_name: str = "") -> OpFamily:
    try:
        return OP_FAMILIES[op]
    except KeyError:
        raise UnsupportedOpError(
            f"op '{op}' has no op family; known: {', '.join(OP_FAMILIES)}", layer=node_name or None
        ) from None
