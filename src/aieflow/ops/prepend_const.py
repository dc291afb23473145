"""Constant rows put in front of every sample's tokens (issue 19: a ViT's class token,
``torch.cat([self.cls.expand(B, -1, -1), x], dim=1)``): ``y = [C; x]`` with ``C`` of shape ``[k, E]``
(``params["constant"]``, float32) and ``x`` of shape ``[T, E]``.

Emulation: the constant's codes in the input's type (a concat keeps one type: round half to even,
saturating; ``params["constant_q"]``) stacked above the input's codes; fp32 / bf16 the float values
(bf16 rounded to nearest even).

No kernel maps it as such: ``frontends/patches.py`` folds it, right after a patch / token
embedding that reads the model input, into a zero row of the input layout plus the constant
``C - b`` added to that row (``add_const``), which the DAG path maps.  Anywhere else the DAG path
refuses it naming the layer.
"""

from __future__ import annotations

import numpy as np

from ..errors import ConfigError
from ..ir import Node
from ..numerics import fixed
from ..numerics.types import FixedType, FloatType
from .base import OpFamily, QuantContext, keeps_input_type, one_type_family


def float_forward(node: Node, x: np.ndarray) -> np.ndarray:
    c = np.asarray(node.params["constant"], dtype=np.float64)
    return np.concatenate([np.broadcast_to(c, (x.shape[0], *c.shape)), np.asarray(x, dtype=np.float64)], axis=1)


def emulate(node: Node, x: np.ndarray) -> np.ndarray:
    t = node.types
    if isinstance(t, FloatType):
        c = np.asarray(node.params["constant"], dtype=np.float32)
        if t.name == "bf16":
            c = fixed.to_bf16(c)
        return np.concatenate([np.broadcast_to(c, (x.shape[0], *c.shape)).astype(x.dtype), x], axis=1)
    c = np.asarray(node.params["constant_q"], dtype=np.int64)
    return np.concatenate([np.broadcast_to(c, (x.shape[0], *c.shape)).astype(x.dtype), x], axis=1)


def quantise(node: Node, ctx: QuantContext) -> Node:
    (tx,) = ctx.input_types
    node = keeps_input_type(node, ctx)
    if isinstance(tx, FixedType):
        c = np.asarray(node.params["constant"], dtype=np.float32)
        return node.evolve(params=dict(node.params, constant_q=fixed.quantize(c, tx).astype(np.int64)))
    if not isinstance(tx, FloatType):
        raise ConfigError(f"'{node.name}' reads {tx}; a fixed-point or float input is needed", layer=node.name)
    return node


def _plan(node: Node, ctx) -> Node:
    from ..errors import PlanError

    raise PlanError(
        f"'{node.name}' puts constant rows (a class token) in front of the tokens; it maps only right after a "
        "patch / token embedding that reads the model input (it becomes a zero input row and a constant add)",
        layer=node.name,
        hint="concatenate the class token directly after the patch embedding, or use aieflow.emulate(model, ...)",
    )


PREPEND_CONST: OpFamily = one_type_family("prepend_const", float_forward, emulate=emulate, quantise=quantise, plan=_plan)
