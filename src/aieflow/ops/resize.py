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

**Bilinear** (attr ``mode`` "bilinear", ``coord`` one of ``half_pixel`` (PyTorch
``align_corners=False``; ONNX ``half_pixel`` / ``pytorch_half_pixel``, equal for outputs longer than
one pixel), ``align_corners`` (PyTorch ``align_corners=True``) or ``asymmetric``).  Per axis of
input length ``n`` and factor ``s``, output index ``y`` reads source coordinate

* half_pixel: ``max(0, (y + 1/2) / s - 1/2)``, a multiple of ``1 / (2 s)``;
* align_corners: ``y (n - 1) / (n s - 1)``, a multiple of ``1 / (n s - 1)`` (``n s = 1``: 0);
* asymmetric: ``y / s``, a multiple of ``1 / s``;

the two neighbours ``i0 = floor(src)``, ``i1 = min(i0 + 1, n - 1)`` and the weight ``f = src - i0``
(ONNX clamps the coordinate to ``[0, n - 1]``, which gives the same value).  So each axis's weights
are ``(D - p) / D`` and ``p / D`` with integers ``p`` and ``D`` (:func:`axis_weights`), and the output
is the exact rational ``N / (Dh Dw)`` with ``N`` the integer sum of the four products of weights'
numerators and input codes.  **Fixed point** (the output keeps the input's type: a convex
combination cannot leave its range): the code is ``N / (Dh Dw)`` rounded to the nearest integer,
ties to even (``numpy.round``'s rule), computed exactly in int64.

**Float (fp32, bf16)**: what the CNN kernels compute (``cnn_kernels.h`` ``up_weight`` /
``up_mix_float``), every operation one IEEE float32 operation rounded to nearest even (no fused
multiply-add): per axis ``w1 = fl(p * fl(1 / D))`` (the reciprocal a float32 division of
constants), ``w0 = fl(1 - w1)``; then the two rows first, ``t0 = fl(fl(w0c a00) + fl(w1c a01))``,
``t1 = fl(fl(w0c a10) + fl(w1c a11))``, and ``y = fl(fl(w0r t0) + fl(w1r t1))`` (``a_rc`` the
neighbour at row tap r, column tap c, as float32); bf16 rounds ``y`` once to bf16 (nearest even).
Within a few float32 ulps (fp32) or one bf16 rounding (bf16) of PyTorch's ``F.interpolate``, not
bit-exact with it (:func:`bilinear_float`).  The unquantised float forward (calibration) keeps the
exact weights in float64 (:func:`bilinear` with ``codes=False``).

Nearest and bilinear upsampling keep the input's type.  The CNN mappings fold a resize into the
store of the convolution before it (``cnn/stages.py``); the chain planner does not map it.
"""

from __future__ import annotations

import numpy as np

from ..errors import UnsupportedOpError
from ..ir import Node
from ..numerics import fixed
from ..numerics.types import FloatType
from .base import not_mapped, one_type_family

ADVICE = "aieflow maps nearest upsampling by whole factors (scale_factor=2, (2, 3), ...)"


COORDS = ("half_pixel", "align_corners", "asymmetric")


def make_node(name: str, x: str, y: str, in_shape: tuple[int, ...], scale, mode: str = "nearest",
              coord: str = "half_pixel") -> Node:
    """A ``resize`` node, after checking the shape, factors and mode (named errors)."""
    if mode not in ("nearest", "bilinear"):
        raise UnsupportedOpError(f"resize mode {mode!r} is not supported", layer=name,
                                 hint=f"{ADVICE}; nearest and bilinear interpolation are; bicubic is not")
    if mode == "bilinear" and coord not in COORDS:
        raise UnsupportedOpError(f"bilinear resize with coordinate transform {coord!r} is not supported", layer=name,
                                 hint=f"use one of {', '.join(COORDS)} (PyTorch's align_corners=False / True)")
    s = (scale, scale) if np.isscalar(scale) else tuple(scale)
    if len(s) != 2 or not all(float(v) == int(v) and int(v) >= 1 for v in s):
        raise UnsupportedOpError(f"resize by {tuple(float(v) for v in s)} is not by whole factors >= 1", layer=name,
                                 hint=ADVICE)
    if len(in_shape) != 3:
        raise UnsupportedOpError(f"resize of per-sample shape {tuple(in_shape)}; a (channels, height, width) image "
                                 "is needed", layer=name, hint=ADVICE)
    attrs = {"scale": (int(s[0]), int(s[1])), "mode": mode}
    if mode == "bilinear":
        attrs["coord"] = coord
    return Node(name, "resize", (x,), (y,), attrs)


def output_shape(in_shape: tuple[int, int, int], scale: tuple[int, int]) -> tuple[int, int, int]:
    c, h, w = in_shape
    return (c, h * scale[0], w * scale[1])


def nearest(x: np.ndarray, scale: tuple[int, int]) -> np.ndarray:
    """(N, C, H, W) -> (N, C, H sh, W sw): every element repeated over its sh x sw block; any dtype."""
    return np.ascontiguousarray(np.repeat(np.repeat(np.asarray(x), scale[0], axis=2), scale[1], axis=3))


def axis_weights(n: int, s: int, coord: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """For each of the ``n s`` outputs of one axis: ``(i0, i1, p)`` and the common denominator ``D``;
    the output reads ``((D - p) x[i0] + p x[i1]) / D`` (module docstring)."""
    y = np.arange(n * s, dtype=np.int64)
    if coord == "half_pixel":  # (y + 1/2) / s - 1/2 = (2 y + 1 - s) / (2 s), clamped at 0
        d, num = 2 * s, np.maximum(2 * y + 1 - s, 0)
    elif coord == "align_corners":
        d = max(1, n * s - 1)
        num = y * (n - 1) if n * s > 1 else np.zeros_like(y)
    elif coord == "asymmetric":
        d, num = s, y
    else:
        raise ValueError(coord)
    i0 = num // d
    p = num - i0 * d
    i1 = np.minimum(i0 + 1, n - 1)
    return i0, i1, p, d


def bilinear(x: np.ndarray, scale: tuple[int, int], coord: str, codes: bool | None = None) -> np.ndarray:
    """(N, C, H, W) -> (N, C, H sh, W sw), in ``x``'s dtype.  ``codes`` (default: an integer dtype):
    integer codes (the emulator may hold them in float64), the exact rational rounded half to even;
    else real values: float64 weights and sum."""
    x = np.asarray(x)
    _, _, h, w = x.shape
    r0, r1, pr, dr = axis_weights(h, scale[0], coord)
    c0, c1, pc, dc = axis_weights(w, scale[1], coord)
    if codes is None:
        codes = not np.issubdtype(x.dtype, np.floating)
    if not codes:
        v = x.astype(np.float64)
        fr, fc = (pr / dr)[:, None], (pc / dc)[None, :]
        rows = lambda c: v[:, :, r0][..., c] * (1 - fr) + v[:, :, r1][..., c] * fr  # noqa: E731
        return (rows(c0) * (1 - fc) + rows(c1) * fc).astype(x.dtype)
    v = np.rint(x).astype(np.int64) if np.issubdtype(x.dtype, np.floating) else x.astype(np.int64)
    qr, qc = (dr - pr)[:, None], (dc - pc)[None, :]
    num = (v[:, :, r0][..., c0] * qr * qc + v[:, :, r0][..., c1] * qr * pc[None, :]
           + v[:, :, r1][..., c0] * pr[:, None] * qc + v[:, :, r1][..., c1] * pr[:, None] * pc[None, :])
    den = dr * dc
    q, rem = np.divmod(num, den)  # floor division: 0 <= rem < den
    up = (2 * rem > den) | ((2 * rem == den) & (q % 2 == 1))  # to nearest, ties to even
    return (q + up).astype(x.dtype)


def float_weights(n: int, s: int, coord: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per output of one axis: ``(i0, i1, w0, w1)`` with the float32 weights the kernel computes,
    ``w1 = fl(p * fl(1 / D))``, ``w0 = fl(1 - w1)`` (module docstring)."""
    i0, i1, p, d = axis_weights(n, s, coord)
    inv = np.float32(1) / np.float32(d)  # float32 division, rounded once
    w1 = (p.astype(np.float32) * inv).astype(np.float32)
    return i0, i1, (np.float32(1) - w1).astype(np.float32), w1


def bilinear_float(x: np.ndarray, scale: tuple[int, int], coord: str, bf16: bool = False) -> np.ndarray:
    """(N, C, H, W) float values -> (N, C, H sh, W sw) float32: the kernels' float32 order of
    operations (module docstring), rounded to bf16 at the end when ``bf16``."""
    v = np.asarray(x, dtype=np.float32)
    _, _, h, w = v.shape
    r0, r1, u0, u1 = float_weights(h, scale[0], coord)
    c0, c1, w0, w1 = float_weights(w, scale[1], coord)
    a, b = v[:, :, r0], v[:, :, r1]  # rows i0, i1 of every output row

    def row(t: np.ndarray) -> np.ndarray:  # fl(fl(w0c t[c0]) + fl(w1c t[c1])), each op in float32
        return (t[..., c0] * w0).astype(np.float32) + (t[..., c1] * w1).astype(np.float32)

    t0, t1 = row(a), row(b)
    y = (t0 * u0[:, None]).astype(np.float32) + (t1 * u1[:, None]).astype(np.float32)
    y = y.astype(np.float32)
    return fixed.to_bf16(y) if bf16 else y


def _forward(node: Node, x: np.ndarray) -> np.ndarray:
    """The unquantised float forward (calibration): nearest, or bilinear with exact weights."""
    if node.attrs.get("mode", "nearest") == "bilinear":  # codes once quantised to a fixed / affine type
        codes = node.types is not None and not isinstance(node.types, FloatType)
        return bilinear(x, tuple(node.attrs["scale"]), node.attrs["coord"], codes)
    return nearest(x, tuple(node.attrs["scale"]))


def _emulate(node: Node, x: np.ndarray) -> np.ndarray:
    """What the kernels compute: a float type's bilinear in the kernels' float32 order."""
    if node.attrs.get("mode", "nearest") == "bilinear" and isinstance(node.types, FloatType):
        return bilinear_float(x, tuple(node.attrs["scale"]), node.attrs["coord"], node.types.name == "bf16")
    return _forward(node, x)


RESIZE = one_type_family("resize", _forward, emulate=_emulate, plan=not_mapped)  # keeps the type
