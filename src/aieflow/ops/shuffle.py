"""PixelShuffle / ONNX DepthToSpace: a fixed permutation of a CHW sample.

IR: op ``pixel_shuffle``; attrs ``upscale`` (r) and ``mode``.  A (C r^2, H, W) sample becomes
(C, H r, W r) with output element ``(c, h r + i, w r + j)`` read from input channel

* ``CRD`` (PyTorch ``PixelShuffle``, ONNX ``mode="CRD"``): ``c r^2 + i r + j``;
* ``DCR`` (ONNX's default): ``(i r + j) C + c``.

It moves values without changing them, so the output keeps the input's type and emulation is the
same permutation on codes.  Not mapped to the AI Engine yet (in the ESPCN thesis it runs in the
PL): :func:`aieflow.ops.conv.plan` raises the PlanError.
"""

from __future__ import annotations

import numpy as np

from ..errors import UnsupportedOpError
from ..ir import Node
from .base import not_mapped, one_type_family

MODES = ("CRD", "DCR")


def make_node(name: str, x: str, y: str, in_shape: tuple[int, ...], upscale: int, mode: str) -> Node:
    """A ``pixel_shuffle`` node, after checking the shape, factor and mode (named errors)."""
    if mode not in MODES:
        raise UnsupportedOpError(f"DepthToSpace mode {mode!r} is not one of {', '.join(MODES)}", layer=name)
    r = int(upscale)
    if r < 1:
        raise UnsupportedOpError(f"upscale factor {upscale} must be >= 1", layer=name)
    if len(in_shape) != 3 or in_shape[0] % (r * r):
        raise UnsupportedOpError(
            f"pixel shuffle by {r} needs a (channels, height, width) input with channels divisible by "
            f"{r * r}; got per-sample shape {tuple(in_shape)}",
            layer=name,
        )
    return Node(name, "pixel_shuffle", (x,), (y,), {"upscale": r, "mode": mode})


def output_shape(in_shape: tuple[int, int, int], r: int) -> tuple[int, int, int]:
    c, h, w = in_shape
    return (c // (r * r), h * r, w * r)


def shuffle(x: np.ndarray, r: int, mode: str) -> np.ndarray:
    """(N, C r^2, H, W) -> (N, C, H r, W r) as the module docstring defines; any dtype."""
    n, c, h, w = x.shape
    co = c // (r * r)
    if mode == "CRD":
        y = x.reshape(n, co, r, r, h, w).transpose(0, 1, 4, 2, 5, 3)
    else:
        y = x.reshape(n, r, r, co, h, w).transpose(0, 3, 4, 1, 5, 2)
    return np.ascontiguousarray(y.reshape(n, co, h * r, w * r))


def _forward(node: Node, x: np.ndarray) -> np.ndarray:
    return shuffle(np.asarray(x), int(node.attrs["upscale"]), node.attrs["mode"])


PIXEL_SHUFFLE = one_type_family("pixel_shuffle", _forward, plan=not_mapped)  # a permutation keeps the type
