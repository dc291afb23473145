"""Inference batch normalisation, folded at import into the convolution or dense layer before it.

Both frontends emit a ``batchnorm`` node (an op that exists only inside a frontend: no op family
computes it) for an eval-mode ``nn.BatchNorm1d`` / ``nn.BatchNorm2d`` or an inference ONNX
``BatchNormalization``, then call :func:`fold` once the whole model is converted (when every reader
of every tensor is known).  With ``s = gamma / sqrt(var + eps)`` per channel, the layer that
directly produces the normalised tensor takes

    w' = w * s            (per output channel: a convolution's first weight axis, a dense
                           layer's output column)
    b' = (b - mean) * s + beta          (b = 0 without a bias)

computed in float64 and stored as float32, and the BatchNorm's name becomes one of its aliases (as
the fuse pass keeps a fused ReLU's name).  For ONNX ``MatMul`` + ``Add`` the scale goes into the
``dense`` weight and the shift into the ``bias_add`` that follows it.

A BatchNorm that does not directly follow a ``conv2d`` / ``dense`` (+ ``bias_add``), or whose
producer's output has another reader, is an :class:`UnsupportedOpError` naming it: there is no
standalone per-channel scale-and-shift op family (no op in ``aieflow.ops`` computes ``x * s + t``
per channel), so it cannot be mapped without folding.
"""

from __future__ import annotations

from collections.abc import Collection

import numpy as np

from ..errors import ModelError, UnsupportedOpError
from ..ir import Node, frozen_map

BN_OP = "batchnorm"  # placeholder op, folded away before the frontend returns its graph
_FUTURE = (
    "a standalone per-channel scale-and-shift kernel is future work: put the BatchNorm directly "
    "after the Conv / Linear it normalises (nothing else reading that layer's output), or fold it "
    "into that layer's weights yourself"
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


def fold(
    nodes: list[Node],
    shapes: dict[str, tuple[int, ...]],
    outputs: Collection[str],
    *,
    quantised_params: Collection[str] = (),
    quantised_tensors: Collection[str] = (),
) -> list[Node]:
    """``nodes`` with every ``batchnorm`` folded into its producer (see the module docstring);
    the folded-away tensors are removed from ``shapes``.  ``quantised_params`` names the nodes
    whose parameters carry QDQ types and ``quantised_tensors`` the tensors with QDQ types: folding
    would change those values, so a BatchNorm next to them is refused."""
    nodes = list(nodes)
    for bn in [n for n in nodes if n.op == BN_OP]:
        x = bn.inputs[0]
        producer = next((n for n in nodes if x in n.outputs), None)
        if producer is None:
            raise UnsupportedOpError("BatchNorm normalises the model input: there is no layer before it to fold it into",
                                     layer=bn.name, hint=_FUTURE)
        readers = [n.name for n in nodes if x in n.inputs and n is not bn]
        if readers or x in outputs:
            others = ", ".join(f"'{r}'" for r in readers) + (" and the model output" if x in outputs else "")
            raise UnsupportedOpError(
                f"BatchNorm cannot be folded into '{producer.name}': its output is also read by "
                f"{others.lstrip(', ')} (fan-out), which must see the values before normalisation",
                layer=bn.name, hint=_FUTURE)
        dense, bias_add = producer, None
        if producer.op == "bias_add":
            dense = next((n for n in nodes if producer.inputs[0] in n.outputs), None)
            if dense is None or dense.op != "dense" or any(
                    producer.inputs[0] in n.inputs for n in nodes if n is not producer) or producer.inputs[0] in outputs:
                raise UnsupportedOpError(
                    f"BatchNorm follows '{producer.name}' (an Add), which does not directly add a bias to a "
                    "MatMul / Gemm read by nothing else", layer=bn.name, hint=_FUTURE)
            bias_add = producer
        elif producer.op not in ("conv2d", "dense"):
            what = {"relu": "a ReLU", "tanh": "a Tanh", "prelu": "a PReLU", "maxpool": "a max pooling",
                    "avgpool": "an average pooling", "reshape": "a reshape / flatten",
                    BN_OP: "another BatchNorm"}.get(producer.op, f"a '{producer.op}'")
            raise UnsupportedOpError(
                f"BatchNorm follows '{producer.name}' ({what}), not a convolution or linear layer, so it "
                "cannot be folded into one", layer=bn.name, hint=_FUTURE)
        for n in {producer.name, dense.name}:
            if n in quantised_params:
                raise UnsupportedOpError(
                    f"BatchNorm follows '{n}', whose parameters are QDQ-quantised: folding would change them",
                    layer=bn.name, hint="fold the BatchNorm before quantising (export the float model and "
                    "quantise with precision + calibration data)")
        if x in quantised_tensors:
            raise UnsupportedOpError(
                "the tensor BatchNorm normalises is QDQ-quantised; folding would remove that type",
                layer=bn.name, hint="quantise after the BatchNorm, not before it")
        channels = int(bn.attrs["channels"])
        shape = tuple(shapes[x])
        if dense.op == "conv2d":
            out = int(dense.attrs["out_channels"])
        else:
            out = int(dense.attrs["out_features"])
            if len(shape) != 1:
                raise UnsupportedOpError(
                    f"BatchNorm normalises axis 1 of a {len(shape) + 1}-D output of linear layer '{dense.name}', "
                    f"whose features are its last axis; only a (batch, features) output folds", layer=bn.name,
                    hint=_FUTURE)
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
        aliases = (*producer.aliases, bn.name, *bn.aliases)
        if bias_add is None:
            new = dense.evolve(params=dict(params_w, bias=bias), outputs=bn.outputs, aliases=aliases)
            nodes[nodes.index(dense)] = new
        else:  # the names go on the dense node, which the fuse pass keeps (it takes the Add's name too)
            nodes[nodes.index(dense)] = dense.evolve(params=params_w, aliases=(*dense.aliases, bn.name, *bn.aliases))
            nodes[nodes.index(bias_add)] = bias_add.evolve(params=dict(bias_add.params, bias=bias), outputs=bn.outputs)
        nodes.remove(bn)
        shapes.pop(x, None)
    return nodes
