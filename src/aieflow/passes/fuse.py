"""Fold bias adds and ReLUs into the dense layer before them (one kernel does all three), a
ReLU / Tanh / PReLU into the convolution before it, and a ReLU into the residual add before it; a
ReLU / Tanh left standing becomes an ``activation`` layer."""

from __future__ import annotations

import numpy as np

from ..errors import ModelError, UnsupportedOpError
from ..ir import Graph, Node, QuantHints, frozen_map
from ..ops.conv import refuse_float_scale_activation

CONV_ACTIVATIONS = ("relu", "tanh", "prelu")


def _single_consumer(graph: Graph, nodes: list[Node], tensor: str) -> Node | None:
    if tensor in graph.outputs:
        return None
    users = [n for n in nodes if tensor in n.inputs]
    return users[0] if len(users) == 1 else None


def fuse(graph: Graph, hints: QuantHints) -> tuple[Graph, QuantHints]:
    nodes = list(graph.nodes)
    tensors = dict(graph.tensors)
    tensor_hints = dict(hints.tensors)
    changed = True
    while changed:
        changed = False
        for i, node in enumerate(nodes):
            if node.op != "dense":
                continue
            nxt = _single_consumer(graph, nodes, node.outputs[0])
            if nxt is None:
                continue
            if nxt.op == "bias_add" and "bias" not in node.params and node.attrs.get("activation") is None:
                if nxt.params["bias"].shape != (node.attrs["out_features"],):
                    continue
                params = dict(node.params, bias=nxt.params["bias"])
                if "bias_codes" in nxt.params:  # an affine (float-scale) bias: its int32 codes
                    params["bias_codes"] = nxt.params["bias_codes"]
                fused = node.evolve(params=params, outputs=nxt.outputs, aliases=(*node.aliases, nxt.name))
            elif nxt.op == "relu" and node.attrs.get("activation") is None:
                _carry_relu_hint(node, nxt, tensor_hints, "output", "a fused kernel")
                attrs = dict(node.attrs, activation="relu")
                fused = node.evolve(attrs=attrs, outputs=nxt.outputs, aliases=(*node.aliases, nxt.name))
            else:
                continue
            tensors.pop(node.outputs[0], None)
            tensor_hints.pop(node.outputs[0], None)
            nodes[i] = fused
            nodes.remove(nxt)
            changed = True
            break
    _fuse_conv_activations(graph, nodes, tensors, tensor_hints)
    _fuse_add_relu(graph, nodes, tensors, tensor_hints)
    nodes = [standalone_activation(n) for n in nodes]
    out = graph.with_nodes(nodes, tensors)
    out.validate()
    return out, QuantHints(frozen_map(tensor_hints), hints.params)


def _carry_relu_hint(node: Node, relu: Node, tensor_hints: dict, what: str, fused: str) -> None:
    """A ReLU fused into ``node``: the fused output has one type, so QDQ types before and after the
    ReLU must agree; a ReLU of a quantised value stays on its grid, so a type before it carries over."""
    inner, outer = node.outputs[0], relu.outputs[0]
    if inner in tensor_hints and outer in tensor_hints and tensor_hints[inner] != tensor_hints[outer]:
        raise UnsupportedOpError(
            f"the {what} is quantised to {tensor_hints[inner]} before the ReLU and to {tensor_hints[outer]} after it; "
            f"{fused} has one output type",
            layer=node.name,
            hint="quantise once, after the ReLU (or use the same scale on both sides)",
        )
    if inner in tensor_hints and outer not in tensor_hints:
        tensor_hints[outer] = tensor_hints[inner]


def standalone_activation(node: Node) -> Node:
    """A ReLU / Tanh that no Dense / Conv before it absorbed becomes an ``activation`` layer of its
    own (``ops/activation.py``), which the DAG mapping gives a kernel."""
    if node.op in ("relu", "tanh"):
        return node.evolve(op="activation", attrs=dict(node.attrs, function=node.op))
    return node


def _fuse_conv_activations(graph: Graph, nodes: list[Node], tensors: dict, tensor_hints: dict) -> None:
    """Conv2D + the ReLU / Tanh / PReLU it alone feeds -> one conv2d node with ``activation`` set
    (the activation's name becomes an alias), as Dense + ReLU; edits the lists in place."""
    i = 0
    while i < len(nodes):
        node = nodes[i]
        nxt = None
        if node.op == "conv2d" and node.attrs.get("activation") is None:
            nxt = _single_consumer(graph, nodes, node.outputs[0])
        if nxt is None or nxt.op not in CONV_ACTIVATIONS:
            i += 1
            continue
        if node.outputs[0] in tensor_hints and "weight_codes" in node.params and nxt.op != "relu":
            refuse_float_scale_activation(node.name, nxt.op)  # float scales: say what is and is not mapped
        if node.outputs[0] in tensor_hints:
            raise UnsupportedOpError(
                "the convolution's output is quantised (QDQ) before its activation; QDQ-quantised "
                "convolutions are not supported yet",
                layer=node.name,
                hint="export the float model and quantise with precision + calibration data",
            )
        params = dict(node.params)
        if nxt.op == "prelu":
            params["slope"] = _channel_slopes(nxt, int(node.attrs["out_channels"]))
        tensors.pop(node.outputs[0], None)
        nodes[i] = node.evolve(
            attrs=dict(node.attrs, activation=nxt.op), params=params, outputs=nxt.outputs, aliases=(*node.aliases, nxt.name)
        )
        nodes.remove(nxt)


def _fuse_add_relu(graph: Graph, nodes: list[Node], tensors: dict, tensor_hints: dict) -> None:
    """Residual add + the ReLU it alone feeds -> one add node with ``activation = "relu"`` (ResNet's
    ``relu(x + f(x))``); the ReLU's name becomes an alias.  A ReLU of a quantised value keeps its grid,
    so a QDQ type on the sum carries over to the fused output, as for Dense + ReLU."""
    i = 0
    while i < len(nodes):
        node = nodes[i]
        nxt = None
        if node.op == "add" and node.attrs.get("activation") is None:
            nxt = _single_consumer(graph, nodes, node.outputs[0])
        if nxt is None or nxt.op != "relu":
            i += 1
            continue
        _carry_relu_hint(node, nxt, tensor_hints, "sum", "the fused add")
        tensors.pop(node.outputs[0], None)
        tensor_hints.pop(node.outputs[0], None)
        nodes[i] = node.evolve(attrs=dict(node.attrs, activation="relu"), outputs=nxt.outputs,
                               aliases=(*node.aliases, nxt.name))
        nodes.remove(nxt)


def _channel_slopes(prelu: Node, channels: int) -> np.ndarray:
    """One PReLU slope per output channel (a single shared slope is repeated)."""
    s = np.asarray(prelu.params["slope"], dtype=np.float32).reshape(-1)
    if s.size not in (1, channels):
        raise ModelError(f"PReLU has {s.size} slopes for {channels} channels", layer=prelu.name)
    return np.ascontiguousarray(np.broadcast_to(s, (channels,)))
