"""QONNX channels-last wrappers unwrapped before import (issue 25 item 1).

qonnx's ``ConvertToChannelsLastAndClean`` rewrites a channels-first model's ``Conv`` / ``MaxPool`` /
``BatchNormalization`` into the same ops in the ``qonnx.custom_op.channels_last`` domain, which read
and write channels-last tensors (``[N, H, W, C]``, ``[N, W, C]``; a Conv's weight too, as
``[O, KH, KW, I]``: qonnx's ``ChannelsLastWrappedOp.execute_node`` transposes input 0, and a Conv's
input 1, to channels first, runs the standard op and transposes its output back), with a Transpose
into channels last after the graph input and the layout pushed through the elementwise ops between
them.  :func:`unwrap` writes each wrapper back as what it computes, ``Transpose`` to channels first,
the standard op (a constant weight transposed in place, a computed one through a ``Transpose``),
``Transpose`` back to channels last; then sinks each ``Transpose`` below the elementwise unary ops
that follow it (an activation, or a QONNX ``Quant`` / ``Trunc`` / ``BipolarQuant`` whose parameters
are scalars) and cancels each pair of inverse Transposes.  What is left is what tf2onnx writes
(the input's transpose, a channels-last Flatten before a Dense), which ``channels_last.py`` folds.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import numpy_helper

from ..errors import ModelError

DOMAIN = "qonnx.custom_op.channels_last"
WRAPPED = ("Conv", "MaxPool", "BatchNormalization")
# elementwise on each value (a Transpose commutes with them); the QONNX ones only with scalar parameters
UNARY = (
    "Relu",
    "Selu",
    "Elu",
    "LeakyRelu",
    "Sigmoid",
    "Tanh",
    "HardSigmoid",
    "Softsign",
    "Identity",
)
QUANT = ("Quant", "Trunc", "BipolarQuant")


def to_first(ndim: int) -> list[int]:
    """The permutation of a channels-last tensor of rank ``ndim`` into channels first (qonnx's
    ``to_channels_first_args``)."""
    return [0, ndim - 1, *range(1, ndim - 1)]


def to_last(ndim: int) -> list[int]:
    """The inverse of :func:`to_first` (qonnx's ``to_channels_last_args``)."""
    return [0, *range(2, ndim), 1]


def uses_channels_last(proto: onnx.ModelProto) -> bool:
    return any(n.domain == DOMAIN for n in proto.graph.node)


def _ranks(proto: onnx.ModelProto) -> dict[str, int]:
    g = proto.graph
    out = {
        v.name: len(v.type.tensor_type.shape.dim)
        for v in (*g.input, *g.output, *g.value_info)
        if v.type.HasField("tensor_type") and v.type.tensor_type.HasField("shape")
    }
    out.update({t.name: len(t.dims) for t in g.initializer})
    return out


def _perm(node: onnx.NodeProto) -> list[int] | None:
    if node.op_type != "Transpose" or node.domain:
        return None
    for a in node.attribute:
        if a.name == "perm":
            return list(a.ints)
    return None


def unwrap(proto: onnx.ModelProto) -> None:
    """Rewrite ``proto`` in place (module docstring); ModelErrors name a wrapped op that is not a
    Conv / MaxPool / BatchNormalization or whose rank is unknown."""
    g = proto.graph
    ranks = _ranks(proto)
    inits = {t.name: t for t in g.initializer}
    nodes: list[onnx.NodeProto] = []
    fresh = 0

    def name(base: str) -> str:
        nonlocal fresh
        fresh += 1
        return f"{base}__cl{fresh}"

    for n in g.node:
        if n.domain != DOMAIN:
            nodes.append(n)
            continue
        if n.op_type not in WRAPPED:
            raise ModelError(
                f"node '{n.name}' ({DOMAIN} {n.op_type}): only channels-last {', '.join(WRAPPED)} are "
                "unwrapped",
                hint="export the model channels first (without ConvertToChannelsLast)",
            )
        rank = ranks.get(n.input[0]) or ranks.get(n.output[0])
        if not rank and n.op_type == "Conv" and n.input[1] in inits:
            rank = len(inits[n.input[1]].dims)
        if not rank:
            raise ModelError(
                f"node '{n.name}' ({DOMAIN} {n.op_type}): the rank of its input '{n.input[0]}' is not "
                "recorded in the model",
                hint="run qonnx's InferShapes before saving the model",
            )
        x_first, y_first = name(n.input[0]), name(n.output[0])
        nodes.append(
            onnx.helper.make_node(
                "Transpose", [n.input[0]], [x_first], name=name(n.name), perm=to_first(rank)
            )
        )
        inputs = [x_first, *n.input[1:]]
        if n.op_type == "Conv":  # the weight is channels last too: [O, KH, KW, I] -> [O, I, KH, KW]
            w = n.input[1]
            if w in inits:
                t = numpy_helper.from_array(
                    np.transpose(numpy_helper.to_array(inits[w]), to_first(rank)), name(w)
                )
                g.initializer.append(t)
                inputs[1] = t.name
            else:
                inputs[1] = name(w)
                nodes.append(
                    onnx.helper.make_node(
                        "Transpose", [w], [inputs[1]], name=name(n.name), perm=to_first(rank)
                    )
                )
        std = onnx.helper.make_node(n.op_type, inputs, [y_first], name=n.name)
        std.attribute.extend(n.attribute)
        nodes.append(std)
        nodes.append(
            onnx.helper.make_node(
                "Transpose", [y_first], [n.output[0]], name=name(n.name), perm=to_last(rank)
            )
        )
    _sink_and_cancel(g, nodes, {t.name: t for t in g.initializer})


def _scalar_params(n: onnx.NodeProto, inits: dict[str, onnx.TensorProto]) -> bool:
    return all(
        x in inits and int(np.prod(inits[x].dims, dtype=np.int64)) == 1 for x in n.input[1:] if x
    )


def _sink_and_cancel(
    g: onnx.GraphProto, nodes: list[onnx.NodeProto], inits: dict[str, onnx.TensorProto]
) -> None:
    outputs = {o.name for o in g.output}
    changed = True
    while changed:
        changed = False
        users: dict[str, list[onnx.NodeProto]] = {}
        for n in nodes:
            for x in n.input:
                users.setdefault(x, []).append(n)
        for t in nodes:
            p = _perm(t)
            if p is None or t.output[0] in outputs:
                continue
            used = users.get(t.output[0], [])
            if len(used) != 1:
                continue
            u = used[0]
            unary = (u.op_type in UNARY and not u.domain) or (
                u.op_type in QUANT and _scalar_params(u, inits)
            )
            if unary and u.input[0] == t.output[0]:  # U(T(a)) = T(U(a)): T moves below U
                a, mid, out = t.input[0], t.output[0], u.output[0]
                u.input[0], u.output[0] = a, mid
                t.input[0], t.output[0] = mid, out
                nodes.remove(t)
                nodes.insert(nodes.index(u) + 1, t)
                changed = True
                break
            q = _perm(u)
            if (
                q is not None
                and [p[k] for k in q] == list(range(len(p)))
                and u.output[0] not in outputs
            ):
                a = t.input[0]  # T2(T1(a)) = a: T2's users read a
                for n in nodes:
                    for k, x in enumerate(n.input):
                        if x == u.output[0]:
                            n.input[k] = a
                nodes.remove(u)
                nodes.remove(t)
                changed = True
                break
    del g.node[:]
    g.node.extend(nodes)
