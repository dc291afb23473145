"""Pooling over CHW images: max and average windows (global average pooling is a full window).

IR: op ``maxpool`` or ``avgpool``; attrs ``in_channels``, ``in_size`` (H, W), ``kernel``,
``stride``, ``padding`` (top, left, bottom, right) and, for averages, ``count_include_pad``.
Dilation is 1 and ``ceil_mode`` off (:func:`make_node` rejects anything else).

Numerics (the output keeps the input's type: neither a maximum nor an average leaves its range):

* max: the largest element of each window; padding never wins.  Exact in any type.
* average, fixed point: the exact integer sum of the window's codes (padding counts as 0) divided
  by the window's count (kh kw, or with ``count_include_pad`` false the elements inside the image),
  rounded once by the type's rounding mode.
* average, fp32: the window summed in row-major order, each addition rounded to float32, then
  divided by the count in float32; bf16: the same on the bf16 values (exact in float32), the
  quotient rounded to bf16 (nearest even).

Float scales and zero points (onnxruntime ``quantize_static``; input and output :class:`AffineType`):

* max: on the codes (the output has the input's scale and zero point, as ``quantize_static`` writes
  it: a maximum of codes is the code of the maximum).  A different output quantiser is refused.
* average: ``acc = sum(codes) - n z_in`` exact (n the window's size; windows without padding only),
  then the requantisation of :mod:`aieflow.numerics.requant` with the one ratio
  ``s_in / (n s_out)`` (``rq_mult`` / ``rq_shift``): the correctly rounded average up to the tie
  window, its zero point added after rounding, saturated.

Not mapped to the AI Engine yet: :func:`aieflow.ops.conv.plan` raises the PlanError.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from ..errors import ConfigError, ModelError, UnsupportedOpError
from ..ir import Node
from ..numerics import fixed, requant
from ..numerics.types import AffineType, FixedType, FloatType
from .base import QuantContext, not_mapped, one_type_family
from .conv import ConvGeometry, check_geometry, pair

OPS = {"maxpool": "MaxPool", "avgpool": "AvgPool"}


def make_node(
    name: str,
    op: str,
    x: str,
    y: str,
    in_shape: tuple[int, ...],
    kernel,
    stride,
    padding: tuple[int, int, int, int],
    *,
    count_include_pad: bool = True,
    dilation=1,
    ceil_mode: bool = False,
) -> Node:
    """A pooling node, after checking what the IR does not support (named errors)."""
    what = OPS[op]
    if len(in_shape) != 3:
        raise UnsupportedOpError(f"{what} receives per-sample shape {tuple(in_shape)}; pooling needs (channels, height, width)", layer=name)
    if pair(dilation, "dilation", name) != (1, 1):
        raise UnsupportedOpError(f"{what} with dilation {dilation} is not supported", layer=name, hint="use dilation=1")
    if ceil_mode:
        raise UnsupportedOpError(
            f"{what} with ceil_mode is not supported (windows that run past the input)",
            layer=name,
            hint="use ceil_mode=False, padding the input explicitly if needed",
        )
    g = ConvGeometry(tuple(int(d) for d in in_shape), pair(kernel, "kernel", name), pair(stride, "stride", name), tuple(int(p) for p in padding))
    check_geometry(g, name, what)
    if max(g.padding[0], g.padding[2]) >= g.kernel[0] or max(g.padding[1], g.padding[3]) >= g.kernel[1]:
        raise UnsupportedOpError(f"{what} padding {g.padding} is as large as the kernel {g.kernel}: a window could hold only padding", layer=name)
    attrs = {"in_channels": g.in_shape[0], "in_size": g.in_shape[1:], "kernel": g.kernel, "stride": g.stride, "padding": g.padding}
    if op == "avgpool":
        attrs["count_include_pad"] = bool(count_include_pad)
    return Node(name, op, (x,), (y,), attrs)


def geometry(node: Node) -> ConvGeometry:
    a = node.attrs
    return ConvGeometry((int(a["in_channels"]), *a["in_size"]), tuple(a["kernel"]), tuple(a["stride"]), tuple(a["padding"]))


def output_shape(node: Node) -> tuple[int, int, int]:
    return (int(node.attrs["in_channels"]), *geometry(node).out_hw)


def windows(x: np.ndarray, g: ConvGeometry, fill) -> np.ndarray:
    """(N, C, H, W) -> (N, C, OH, OW, kh kw): each output's window in row-major order."""
    top, left, bottom, right = g.padding
    xp = np.pad(x, ((0, 0), (0, 0), (top, bottom), (left, right)), constant_values=fill)
    v = sliding_window_view(xp, g.kernel, axis=(2, 3))[:, :, :: g.stride[0], :: g.stride[1]]
    oh, ow = g.out_hw
    return v[:, :, :oh, :ow].reshape(x.shape[0], x.shape[1], oh, ow, -1)


def counts(node: Node) -> np.ndarray:
    """(OH, OW) divisors of an average: the window size, or its elements inside the image."""
    g = geometry(node)
    if node.attrs["count_include_pad"]:
        return np.full(g.out_hw, g.kernel[0] * g.kernel[1], dtype=np.int64)
    ones = np.ones((1, 1, *g.in_shape[1:]), dtype=np.int64)
    return windows(ones, ConvGeometry((1, *g.in_shape[1:]), g.kernel, g.stride, g.padding), 0).sum(-1)[0, 0]


def _lowest(x: np.ndarray):
    return -np.inf if x.dtype.kind == "f" else np.iinfo(np.int64).min


def _max(node: Node, x: np.ndarray) -> np.ndarray:
    x = np.asarray(x) if np.asarray(x).dtype.kind == "f" else np.asarray(x, dtype=np.int64)
    return windows(x, geometry(node), _lowest(x)).max(axis=-1)


def _avg_float64(node: Node, x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    return windows(x, geometry(node), 0.0).sum(axis=-1) / counts(node)


def _avg_emulate(node: Node, x: np.ndarray) -> np.ndarray:
    t = node.types
    g = geometry(node)
    if "rq_mult" in node.params:
        acc = windows(np.asarray(x).astype(np.int64), g, 0).sum(axis=-1) - int(node.params["rq_bias"])
        return requant.apply(acc, node.params["rq_mult"], int(node.params["rq_shift"]), t.zero_point, t.min_code,
                             t.max_code)
    if isinstance(t, FloatType):
        w = windows(np.asarray(x, dtype=np.float32), g, np.float32(0))
        acc = w[..., 0].copy()
        for k in range(1, w.shape[-1]):
            acc += w[..., k]  # one float32 rounding per addition, row-major order
        y = acc / counts(node).astype(np.float32)
        return fixed.to_bf16(y) if t.name == "bf16" else y
    sums = windows(np.asarray(x).astype(np.int64), g, 0).sum(axis=-1)
    return fixed.saturate(fixed.round_divide(sums, counts(node), t.rounding), t)


_AFFINE_HINT = "quantise the whole model with onnxruntime quantize_static (QDQ), or with power-of-two scales"


def _quantise_affine(node: Node, ctx: QuantContext, t: AffineType) -> Node:
    """Pooling of float-scale codes (module docstring)."""
    out = ctx.hints.tensors.get(node.outputs[0]) or t
    if not isinstance(out, AffineType) or out.signed != t.signed or out.width != t.width:
        raise ModelError(f"{OPS[node.op]} reads {t} but its output is quantised as {out}; aieflow pools codes into "
                         "the same code type", layer=node.name, hint=_AFFINE_HINT)
    if node.op == "maxpool":
        if out != t:
            raise ModelError(f"MaxPool reads {t} and writes {out}: a maximum of codes needs one scale and zero "
                             "point on both sides (as quantize_static writes it)", layer=node.name, hint=_AFFINE_HINT)
        return node.evolve(types=t)
    g = geometry(node)
    if any(g.padding):
        raise UnsupportedOpError(f"AveragePool with padding {g.padding} on float-scale codes is not supported (the "
                                 "padded values' zero point would change the count per window)", layer=node.name,
                                 hint="pool without padding, or use global average pooling")
    n = g.kernel[0] * g.kernel[1]
    ratio = [Fraction(t.scale[0]) / (n * Fraction(out.scale[0]))]
    try:
        mult, shift = requant.choose(ratio, ctx.device.generation.srs_shift_max)
    except ValueError as e:
        raise ModelError(f"{e}: the output scale is too fine for the input's", layer=node.name, hint=_AFFINE_HINT) from None
    params = dict(node.params, rq_mult=mult, rq_shift=np.int64(shift), rq_bias=np.int64(n * t.zero_point))
    return node.evolve(types=out, params=params)


def _quantise(node: Node, ctx: QuantContext) -> Node:
    t = ctx.input_types[0]
    if isinstance(t, AffineType):
        return _quantise_affine(node, ctx, t)
    if isinstance(t, FloatType) and t.name not in ("fp32", "bf16"):
        raise ConfigError(f"{OPS[node.op]} on {t} values is not supported yet", layer=node.name,
                          hint="use fp32, bf16 or a fixed-point precision")
    if not isinstance(t, FixedType | FloatType):  # pragma: no cover - the quantise pass types every tensor
        raise ConfigError(f"input type {t} is not a numeric type", layer=node.name)
    return node.evolve(types=t)


MAXPOOL = one_type_family("maxpool", _max, quantise=_quantise, plan=not_mapped)
AVGPOOL = one_type_family("avgpool", _avg_float64, _avg_emulate, quantise=_quantise, plan=not_mapped)
