"""Nearest-neighbour upsampling by integer factors (PyTorch ``nn.Upsample`` / ``F.interpolate`` with
``mode="nearest"``, ONNX ``Resize`` with ``mode="nearest"``).

IR: op ``resize``; attrs ``scale`` (sh, sw), positive integers, and ``mode`` ("nearest").  A
(C, H, W) sample becomes (C, H sh, W sw) with output element ``(c, y, x)`` read from input
``(c, y // sh, x // sw)``: PyTorch's ``nearest`` (source index ``floor(y / s)``), and ONNX's for the
coordinate transforms that give the same index at integer scales (``asymmetric`` with
``nearest_mode=floor``; ``half_pixel`` / ``pytorch_half_pixel`` with ``round_prefer_floor`` or
``round_prefer_ceil``, whose source coordinate ``y / s + (1 / s - 1) / 2`` lies strictly within 1/2 of
``floor(y / s)``).  Other modes (bilinear, cubic), fractional scales and other coordinate transforms
are refused by name.

It copies values without changing them, so the output keeps the input's type and emulation is the
same copy on codes.  The CNN stream mapping folds it into the store of the convolution before it
(``cnn/stages.py``); the chain planner does not map it.
"""

from __future__ import annotations

import numpy as np

from ..errors import UnsupportedOpError
from ..ir import Node
from .base import not_mapped, one_type_family

ADVICE = "aieflow maps nearest upsampling by whole factors (scale_factor=2, (2, 3), ...)"


def make_node(name: str, x: str, y: str, in_shape: tuple[int, ...], scale, mode: str = "nearest") -> Node:
    """A ``resize`` node, after checking the shape, factors and mode (named errors)."""
    if mode != "nearest":
        raise UnsupportedOpError(f"resize mode {mode!r} is not supported", layer=name,
                                 hint=f"{ADVICE}; bilinear / bicubic interpolation is not implemented")
    s = (scale, scale) if np.isscalar(scale) else tuple(scale)
    if len(s) != 2 or not all(float(v) == int(v) and int(v) >= 1 for v in s):
        raise UnsupportedOpError(f"resize by {tuple(float(v) for v in s)} is not by whole factors >= 1", layer=name,
                                 hint=ADVICE)
    if len(in_shape) != 3:
        raise UnsupportedOpError(f"resize of per-sample shape {tuple(in_shape)}; a (channels, height, width) image "
                                 "is needed", layer=name, hint=ADVICE)
    return Node(name, "resize", (x,), (y,), {"scale": (int(s[0]), int(s[1])), "mode": "nearest"})


def output_shape(in_shape: tuple[int, int, int], scale: tuple[int, int]) -> tuple[int, int, int]:
    c, h, w = in_shape
    return (c, h * scale[0], w * scale[1])


def nearest(x: np.ndarray, scale: tuple[int, int]) -> np.ndarray:
    """(N, C, H, W) -> (N, C, H sh, W sw): every element repeated over its sh x sw block; any dtype."""
    return np.ascontiguousarray(np.repeat(np.repeat(np.asarray(x), scale[0], axis=2), scale[1], axis=3))


def _forward(node: Node, x: np.ndarray) -> np.ndarray:
    return nearest(x, tuple(node.attrs["scale"]))


RESIZE = one_type_family("resize", _forward, plan=not_mapped)  # a copy keeps the type
