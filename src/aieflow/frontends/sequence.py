"""1-D convolutional layers as 2-D ones over a one-row image.

A ``Conv1d`` / ONNX ``Conv`` on ``[N, C, W]`` is a ``conv2d`` on the ``(C, 1, W)`` image (same
values in the same order: a reshape) with a ``1 x k`` kernel, stride ``(1, s)`` and padding
``(0, left, 0, right)``; ``MaxPool1d`` / ``AvgPool1d`` / global average pooling over the length
likewise.  The frontends *lift* a ``(C, W)`` tensor into its ``(C, 1, W)`` view with a ``reshape``
(once per tensor) and give every 1-D layer's result back at the framework's shape ``(C, W)`` with
another ``reshape`` (an *unlift*), so every framework tensor keeps its shape in the IR.  The
layers that know about lifting (1-D convolutions, pooling, BatchNorm, ReLU / Tanh / PReLU) read
the ``(C, 1, W)`` view directly; :func:`simplify` then lets every ``reshape`` that reads an unlift
read the view instead (a reshape of a reshape is one reshape) and removes the unlifts nothing reads
anymore, so a Conv1d -> ReLU -> MaxPool1d -> Flatten chain is one view at the input and one
flatten, as a 2-D CNN is, and the same model gives the same IR from PyTorch and from ONNX.
"""

from __future__ import annotations

from collections.abc import Collection

import numpy as np

from ..errors import UnsupportedOpError
from ..ir import Node


def image_shape(shape: tuple[int, ...], layer: str, what: str) -> tuple[int, int, int]:
    """(C, 1, W) for a (C, W) per-sample shape, else a named error."""
    if len(shape) != 2:
        raise UnsupportedOpError(
            f"{what} receives per-sample shape {tuple(shape)}; a 1-D layer needs (channels, length)", layer=layer
        )
    return (int(shape[0]), 1, int(shape[1]))


def lift_weight(w: np.ndarray) -> np.ndarray:
    """(O, C, k) -> (O, C, 1, k)."""
    return np.ascontiguousarray(np.asarray(w, dtype=np.float32)[:, :, None, :])


def single(value, what: str, layer: str) -> int:
    """An int or a 1-sequence (PyTorch stores 1-D kernel sizes as 1-tuples) as an int."""
    v = value if isinstance(value, int | np.integer) else tuple(value)
    if isinstance(v, tuple):
        if len(v) != 1 or not isinstance(v[0], int | np.integer):
            raise UnsupportedOpError(f"{what} {value!r} is not one integer (a 1-D window)", layer=layer)
        v = v[0]
    return int(v)


def attrs_2d(attrs: dict, layer: str, op: str) -> dict:
    """ONNX 1-D window attributes as the 2-D ones of the (C, 1, W) view: kernel_shape, strides and
    dilations gain a leading 1, pads [begin, end] become [0, begin, 0, end]."""
    out = dict(attrs)
    for key in ("kernel_shape", "strides", "dilations"):
        if key in attrs:
            v = list(attrs[key])
            if len(v) != 1:
                raise UnsupportedOpError(f"node '{layer}' ({op}) on a 1-D input has {key} {v}; expected one value")
            out[key] = [1, int(v[0])]
    if "pads" in attrs:
        p = list(attrs["pads"])
        if len(p) != 2:
            raise UnsupportedOpError(f"node '{layer}' ({op}) on a 1-D input has pads {p}; expected [begin, end]")
        out["pads"] = [0, int(p[0]), 0, int(p[1])]
    return out


def simplify(nodes: list[Node], outputs: Collection[str], unlifts: Collection[str],
             shapes: dict[str, tuple[int, ...]]) -> list[Node]:
    """Reshapes read through unlifts, then unlifts nobody reads removed (see the module docstring).
    A reshape that, read through an unlift, gives the view back unchanged (an exporter's Unsqueeze
    of a 1-D layer's result) disappears: its readers read the view."""
    source = {n.outputs[0]: n.inputs[0] for n in nodes if n.name in unlifts}
    renamed: dict[str, str] = {}
    rewired = []
    for n in nodes:
        n = n.evolve(inputs=tuple(renamed.get(t, t) for t in n.inputs))
        if n.op == "reshape" and n.inputs[0] in source and n.name not in unlifts:
            view = source[n.inputs[0]]
            if tuple(shapes[view]) == tuple(shapes[n.outputs[0]]) and n.outputs[0] not in outputs:
                renamed[n.outputs[0]] = view
                shapes.pop(n.outputs[0], None)
                continue
            n = n.evolve(inputs=(view,))
        rewired.append(n)
    nodes = rewired
    read = {t for n in nodes for t in n.inputs} | set(outputs)
    kept = []
    for n in nodes:
        if n.name in unlifts and n.outputs[0] not in read:
            shapes.pop(n.outputs[0], None)
            continue
        kept.append(n)
    return kept
