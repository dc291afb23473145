"""Inference batch normalisation, folded at import into the layer before or after it.

Both frontends emit a ``batchnorm`` node (an op that exists only inside a frontend: no op family
computes it) for an eval-mode ``nn.BatchNorm1d`` / ``nn.BatchNorm2d`` or an inference ONNX
``BatchNormalization``, then call :func:`fold` once the whole model is converted (when every reader
of every tensor is known).  With ``s = gamma / sqrt(var + eps)`` and ``t = beta - mean s`` per
channel (``bn(x) = x s + t``):

**Backward fold** (tried first): the layer that directly produces the normalised tensor (a
``conv2d``, a ``dense``, a ``dense`` + ``bias_add``, its output read by the BatchNorm alone) takes

    w' = w * s            (per output channel: a convolution's first weight axis, a dense
                           layer's output column)
    b' = (b - mean) * s + beta          (b = 0 without a bias)

For ONNX ``MatMul`` + ``Add`` the scale goes into the ``dense`` weight and the shift into the
``bias_add`` that follows it.

**Forward fold** (a BatchNorm on the model input, after an Add, a pooling, a ReLU, or whose
producer's output fans out): the one layer that reads the normalised tensor, a ``dense`` (on a
``(features,)`` tensor, or after a flatten of a ``(C, ...)`` one) or a ``conv2d`` without padding,
takes ``layer(x s + t) = layer'(x)``:

    W' = diag(s) W,  b' = b + t W        (dense, W (in, out); after a flatten, s and t of channel c
                                          repeated over its positions, the flatten's C-major order)
    W'[o, c] = W[o, c] s[c],  b'[o] = b[o] + sum_{c, i, j} W[o, c, i, j] t[c]     (conv2d; grouped
                                          weights read channel q C / groups + c)

A padded convolution is not forward-folded: its zero padding is not shifted by ``t``, so the fold
would change the border outputs.  Both folds compute in float64 and store float32, and the
BatchNorm's name becomes one of the folded layer's aliases (as the fuse pass keeps a fused ReLU's
name).

**Standalone**: a BatchNorm of a ``(features,)`` tensor that neither fold takes (the model's last
layer, one after an Add that feeds another Add) becomes a ``scale_shift`` node (``ops/scale_shift.py``,
``y = x s + t`` per feature) under the BatchNorm's name.  On an image or a sequence it is an
:class:`UnsupportedOpError` naming it, both reasons, and what folds.
"""

from __future__ import annotations

from collections.abc import Collection

import numpy as np

from ..errors import ModelError, UnsupportedOpError
from ..ir import Node, frozen_map
from ..ops import scale_shift as scale_shift_op

BN_OP = "batchnorm"  # placeholder op, folded away before the frontend returns its graph
_FUTURE = (
    "put the BatchNorm directly after the Conv / Linear it normalises (nothing else reading that "
    "layer's output) or directly before a Linear / unpadded Conv, or fold it into a layer's weights yourself"
)


def make_node(name: str, x: str, y: str, channels: int, gamma, beta, mean, var, eps: float) -> Node:
    """A ``batchnorm`` placeholder with its four per-channel vectors (checked: finite, ``channels`` long,
    ``var + eps > 0``)."""
    params = {}
    for key, value in (("gamma", gamma), ("beta", beta), ("mean", mean), ("var", var)):
        v = np.asarray(value, dtype=np.float64).reshape(-1)
        if v.size != channels:
            raise ModelError(f"BatchNorm {key} has {v.size} values for {channels} channels", layer=name)
        if not np.isfinite(v).all():
            raise ModelError(f"BatchNorm {key} contains NaN or inf", layer=name,
                             hint="the model's statistics are broken; re-export or retrain it")
        params[key] = v
    eps = float(eps)
    if not np.isfinite(eps) or np.any(params["var"] + eps <= 0):
        raise ModelError(f"BatchNorm has a variance + eps <= 0 (eps {eps})", layer=name)
    return Node(name, BN_OP, (x,), (y,), frozen_map({"eps": eps, "channels": int(channels)}), frozen_map(params))


def scale_shift(bn: Node) -> tuple[np.ndarray, np.ndarray]:
    """(s, t) in float64 with ``bn(x) = x * s + t`` per channel."""
    p = bn.params
    s = p["gamma"] / np.sqrt(p["var"] + bn.attrs["eps"])
    return s, p["beta"] - p["mean"] * s


def _quantised_check(bn: Node, verb: str, names, tensor: str, quantised_params, quantised_tensors) -> None:
    for n in sorted(names):
        if n in quantised_params:
            raise UnsupportedOpError(
                f"BatchNorm {verb} '{n}', whose parameters are QDQ-quantised: folding would change them",
                layer=bn.name, hint="fold the BatchNorm before quantising (export the float model and "
                "quantise with precision + calibration data)")
    if tensor in quantised_tensors:
        raise UnsupportedOpError(
            "the tensor BatchNorm normalises is QDQ-quantised; folding would remove that type",
            layer=bn.name, hint="quantise after the BatchNorm, not before it")


def _backward(bn: Node, nodes: list[Node], shapes, outputs) -> tuple[Node, Node | None] | str:
    """The (dense / conv2d, bias_add or None) the BatchNorm folds into backward, or why it cannot."""
    x = bn.inputs[0]
    producer = next((n for n in nodes if x in n.outputs), None)
    if producer is None:
        return "it normalises the model input (no layer before it)"
    readers = [n.name for n in nodes if x in n.inputs and n is not bn]
    if readers or x in outputs:
        others = ", ".join(f"'{r}'" for r in readers) + (" and the model output" if x in outputs else "")
        return (f"the output of '{producer.name}' is also read by {others.lstrip(', ')} (fan-out), which must see the "
                "values before normalisation")
    if producer.op == "bias_add":
        dense = next((n for n in nodes if producer.inputs[0] in n.outputs), None)
        if dense is None or dense.op != "dense" or any(
                producer.inputs[0] in n.inputs for n in nodes if n is not producer) or producer.inputs[0] in outputs:
            return f"it follows '{producer.name}' (an Add), which does not directly add a bias to a MatMul / Gemm read by nothing else"
        return dense, producer
    if producer.op not in ("conv2d", "dense"):
        what = {"relu": "a ReLU", "tanh": "a Tanh", "prelu": "a PReLU", "maxpool": "a max pooling",
                "avgpool": "an average pooling", "reshape": "a reshape / flatten", "add": "an Add",
                BN_OP: "another BatchNorm"}.get(producer.op, f"a '{producer.op}'")
        return f"it follows '{producer.name}' ({what}), not a convolution or linear layer"
    if producer.op == "dense" and len(shapes[x]) != 1:
        return (f"it normalises axis 1 of a {len(shapes[x]) + 1}-D output of linear layer '{producer.name}', whose "
                "features are its last axis (only a (batch, features) output folds)")
    return producer, None


def _forward(bn: Node, nodes: list[Node], shapes, outputs) -> tuple[Node, Node | None, int] | str:
    """(the dense / conv2d after the BatchNorm, the flatten between them or None, how many input
    features each channel spans) for a forward fold, or why it cannot."""
    y = bn.outputs[0]
    readers = [n for n in nodes if y in n.inputs]
    if y in outputs or len(readers) != 1:
        return "its output is " + ("the model output" if y in outputs else f"read by {len(readers)} layers")
    layer, flatten, shape = readers[0], None, tuple(shapes[y])
    if layer.op == "reshape" and len(shape) > 1 and len(shapes[layer.outputs[0]]) == 1:
        after = [n for n in nodes if layer.outputs[0] in n.inputs]
        if layer.outputs[0] in outputs or len(after) != 1 or after[0].op != "dense":
            return f"the flatten '{layer.name}' after it does not feed one linear layer alone"
        flatten, layer = layer, after[0]
    if layer.op == "dense":
        if flatten is None and len(shape) != 1:
            return f"linear layer '{layer.name}' after it reads the last axis, not the normalised one"
        return layer, flatten, int(np.prod(shape[1:], dtype=np.int64))
    if layer.op == "conv2d":
        if any(int(p) for p in layer.attrs["padding"]):
            return (f"convolution '{layer.name}' after it pads its input with zeros, which the BatchNorm's shift "
                    "would not reach (a forward fold is exact only without padding)")
        return layer, None, 1
    return f"'{layer.name}' after it is a '{layer.op}', not a linear layer or an unpadded convolution"


def _fold_backward(nodes: list[Node], bn: Node, dense: Node, bias_add: Node | None) -> None:
    channels = int(bn.attrs["channels"])
    out = int(dense.attrs["out_channels"] if dense.op == "conv2d" else dense.attrs["out_features"])
    if out != channels:
        raise ModelError(f"BatchNorm has {channels} channels but '{dense.name}' produces {out}", layer=bn.name)
    s, t = scale_shift(bn)
    w = np.asarray(dense.params["weight"], dtype=np.float64)
    w = w * (s.reshape(-1, 1, 1, 1) if dense.op == "conv2d" else s.reshape(1, -1))
    owner = bias_add or dense
    b = np.asarray(owner.params.get("bias", np.zeros(channels)), dtype=np.float64).reshape(-1)
    params_w = dict(dense.params, weight=np.ascontiguousarray(w, dtype=np.float32))
    if bias_add is not None and "bias" in dense.params:  # a Gemm bias before the Add: scaled too
        params_w["bias"] = np.ascontiguousarray(np.asarray(dense.params["bias"], np.float64).reshape(-1) * s,
                                                dtype=np.float32)
    bias = np.ascontiguousarray(b * s + t, dtype=np.float32)
    aliases = (*(bias_add or dense).aliases, bn.name, *bn.aliases)
    if bias_add is None:
        nodes[nodes.index(dense)] = dense.evolve(params=dict(params_w, bias=bias), outputs=bn.outputs, aliases=aliases)
    else:  # the names go on the dense node, which the fuse pass keeps (it takes the Add's name too)
        nodes[nodes.index(dense)] = dense.evolve(params=params_w, aliases=(*dense.aliases, bn.name, *bn.aliases))
        nodes[nodes.index(bias_add)] = bias_add.evolve(params=dict(bias_add.params, bias=bias), outputs=bn.outputs)


def _fold_forward(nodes: list[Node], bn: Node, layer: Node, flatten: Node | None, span: int) -> None:
    """``layer(x s + t)`` as ``layer'(x)``: the weights of input feature / channel ``c`` times
    ``s[c]``, the bias plus the weights times ``t`` (module docstring)."""
    s, t = scale_shift(bn)
    w = np.asarray(layer.params["weight"], dtype=np.float64)
    if layer.op == "dense":  # (in, out); a flatten repeats each channel over its positions
        s, t = np.repeat(s, span), np.repeat(t, span)
        if w.shape[0] != s.size:
            raise ModelError(f"BatchNorm normalises {s.size} features but '{layer.name}' reads {w.shape[0]}", layer=bn.name)
        w_new, shift = w * s[:, None], t @ w
    else:  # (O, C / groups, kh, kw): output o of group q reads input channels q C / groups + j
        o, cg = w.shape[:2]
        if cg * int(layer.attrs.get("groups", 1)) != s.size:
            raise ModelError(f"BatchNorm normalises {s.size} channels but '{layer.name}' reads "
                             f"{cg * int(layer.attrs.get('groups', 1))}", layer=bn.name)
        channel = (np.arange(o)[:, None] // (o // int(layer.attrs.get("groups", 1)))) * cg + np.arange(cg)[None, :]
        w_new = w * s[channel][:, :, None, None]
        shift = np.einsum("ojhw,oj->o", w, t[channel])
    readers = [n for n in nodes if layer.outputs[0] in n.inputs]
    bias_add = (readers[0] if layer.op == "dense" and "bias" not in layer.params and len(readers) == 1
                and readers[0].op == "bias_add" else None)
    owner = bias_add or layer
    b = np.asarray(owner.params.get("bias", np.zeros(shift.size)), dtype=np.float64).reshape(-1)
    bias = np.ascontiguousarray(b + shift, dtype=np.float32)
    new = layer.evolve(params=dict(layer.params, weight=np.ascontiguousarray(w_new, dtype=np.float32)),
                       aliases=(*layer.aliases, bn.name, *bn.aliases))
    if bias_add is None:
        new = new.evolve(params=dict(new.params, bias=bias))
    else:
        nodes[nodes.index(bias_add)] = bias_add.evolve(params=dict(bias_add.params, bias=bias))
    x = bn.inputs[0]
    if flatten is not None:
        nodes[nodes.index(flatten)] = flatten.evolve(inputs=(x,))
    else:
        new = new.evolve(inputs=(x,))
    nodes[nodes.index(layer)] = new


def fold(
    nodes: list[Node],
    shapes: dict[str, tuple[int, ...]],
    outputs: Collection[str],
    *,
    quantised_params: Collection[str] = (),
    quantised_tensors: Collection[str] = (),
) -> list[Node]:
    """``nodes`` with every ``batchnorm`` folded backward into its producer, else forward into the
    layer after it (see the module docstring); the folded-away tensors are removed from ``shapes``.
    ``quantised_params`` names the nodes whose parameters carry QDQ types and ``quantised_tensors``
    the tensors with QDQ types: folding would change those values, so a BatchNorm next to them is
    refused."""
    nodes = list(nodes)
    for bn in [n for n in nodes if n.op == BN_OP]:
        bn = next(n for n in nodes if n.name == bn.name)  # an earlier fold may have rewired it
        back = _backward(bn, nodes, shapes, outputs)
        if not isinstance(back, str):
            dense, bias_add = back
            _quantised_check(bn, "follows", {dense.name, (bias_add or dense).name}, bn.inputs[0], quantised_params, quantised_tensors)
            _fold_backward(nodes, bn, dense, bias_add)
            nodes.remove(bn)
            shapes.pop(bn.inputs[0], None)
            continue
        fwd = _forward(bn, nodes, shapes, outputs)
        if not isinstance(fwd, str):
            layer, flatten, span = fwd
            _quantised_check(bn, "precedes", {layer.name}, bn.outputs[0], quantised_params, quantised_tensors)
            _fold_forward(nodes, bn, layer, flatten, span)
            nodes.remove(bn)
            shapes.pop(bn.outputs[0], None)
            continue
        if len(shapes[bn.inputs[0]]) != 1:
            raise UnsupportedOpError(
                f"BatchNorm folds neither into the layer before it ({back}) nor into the one after it ({fwd}); "
                "a standalone BatchNorm is a scale-and-shift of (batch, features) tensors only, not of an image or "
                "sequence", layer=bn.name, hint=_FUTURE)
        s, t = scale_shift(bn)  # neither fold: a standalone per-feature scale and shift (ops/scale_shift.py)
        nodes[nodes.index(bn)] = scale_shift_op.make_node(bn.name, bn.inputs[0], bn.outputs[0], s, t, bn.aliases)
    return nodes
