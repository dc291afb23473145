"""2-D convolutions (+ bias + ReLU / Tanh / PReLU): IR, im2col and tiling helpers, numerics.

IR (shapes exclude the batch; images are CHW): op ``conv2d``; attrs ``in_channels``,
``out_channels``, ``in_size`` (H, W), ``kernel`` (kh, kw), ``stride`` (sh, sw), ``padding`` (top,
left, bottom, right) and ``activation`` (None, "relu", "tanh" or "prelu", folded in by the fuse
pass); params ``weight`` (O, C, kh, kw) as PyTorch and ONNX store it, ``bias`` (O,) and, for PReLU,
``slope`` (O,).  Grouped and depthwise convolutions (``groups`` > 1, weight (O, C / groups, kh,
kw)) compute as the dense convolution whose weight is block diagonal (:func:`full_weight`: zero
between groups), and a dilated one as the dense kernel with zero taps between the model's
(:func:`make_node`); both are exact (a zero weight adds an exact zero) and cost the dense layer's
multiply-accumulates on the AI Engine.

Numerics.  A convolution is a Dense layer applied to the im2col patches: row p = (y, x) of the
patch matrix holds input elements k = (c, i, j) (PyTorch ``unfold`` order, zero where the window
covers padding), and the weights are ``weight.reshape(O, C kh kw).T``.  :func:`emulate` builds the
patches and runs :func:`aieflow.ops.dense.emulate` on them, so an integer convolution accumulates
exactly, wraps at the accumulator width and shift-round-saturates exactly as a Dense layer, and an
fp32 one accumulates in increasing k from the bias, each product and sum rounded to float32; a bf16
one (AIE-ML / AIE-MLv2) the same with bf16 operands (weights and bias rounded to bf16 to nearest
even, products exact in float32) and the sum rounded to bf16 (nearest even) before its ReLU / tanh /
PReLU.  The activation follows:

* relu: ``max(y, 0)`` after the SRS (Dense's order);
* tanh, prelu, fixed point: the SRS writes a *pre-activation* type (PTQ from calibration), then one
  ap_fixed-style cast (:func:`aieflow.numerics.fixed.cast`) produces the output: tanh exact
  (float64, rounded by the output's mode) or a lookup table (``activations.tanh``, e.g. the
  ``espcn-thesis`` table); prelu ``p`` for ``p >= 0``, else the exact product ``p * slope``;
* fp32: tanh exact (float64 rounded to float32) or the table's entry; prelu ``y * slope`` in
  float32;
* bf16: tanh the bf16 activation kernel of :mod:`aieflow.ops.activation` (``bf16_table`` /
  ``apply_bf16_table``: ``bf16(float32(tanh(y)))`` for every bf16 ``y``, params ``table``,
  ``window``, ``rules``); prelu ``y`` for ``y >= 0``, else ``bf16(y * slope)`` (the slope rounded
  to bf16, the product exact in float32, one rounding to nearest even).

The chain planner does not map convolutions (:func:`base.not_mapped`); models with one compile
through ``aieflow.cnn`` (docs/conv.md).  :func:`im2col`, :func:`tile` and :func:`untile` are the
data movement of the ESPCN thesis's mapping (each convolution an im2col matrix multiply cut into
per-kernel tiles); the tests prove them exact permutations / gathers.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from dataclasses import dataclass, replace

import numpy as np

from ..config import PRECISIONS
from ..errors import ConfigError, ModelError, UnsupportedOpError
from ..ir import Node, frozen_map
from ..numerics import fast, fixed
from ..numerics.types import AffineType, FixedType, NumericType, Rounding, Saturation, parse_type
from . import activations as act
from . import dense
from .base import OpFamily, QuantContext, not_mapped

ACTIVATIONS = (None, "relu", "tanh", "prelu")
_TWO_STAGE = ("tanh", "prelu")  # activations that need a pre-activation type
_CHUNK_ELEMENTS = 1 << 22  # patch-matrix elements per emulation chunk (bounds memory)
_WIDTH = {"i8": 8, "i16": 16}


# ----------------------------------------------------------------------------- geometry


@dataclass(frozen=True)
class ConvGeometry:
    """Shapes of one convolution (or pooling window) over a CHW sample."""

    in_shape: tuple[int, int, int]  # (C, H, W)
    kernel: tuple[int, int]
    stride: tuple[int, int]
    padding: tuple[int, int, int, int]  # top, left, bottom, right

    @property
    def out_hw(self) -> tuple[int, int]:
        _, h, w = self.in_shape
        top, left, bottom, right = self.padding
        return ((h + top + bottom - self.kernel[0]) // self.stride[0] + 1, (w + left + right - self.kernel[1]) // self.stride[1] + 1)

    @property
    def pixels(self) -> int:
        oh, ow = self.out_hw
        return oh * ow

    @property
    def patch(self) -> int:
        """Elements per patch (the matrix multiply's K)."""
        return self.in_shape[0] * self.kernel[0] * self.kernel[1]


def pair(value, what: str, layer: str) -> tuple[int, int]:
    """An int or a 2-sequence as (height, width)."""
    v = (value, value) if isinstance(value, int | np.integer) else tuple(value)
    if len(v) != 2 or not all(isinstance(a, int | np.integer) for a in v):
        raise UnsupportedOpError(f"{what} {value!r} is not a pair of integers (height, width)", layer=layer)
    return int(v[0]), int(v[1])


def check_geometry(g: ConvGeometry, layer: str, op: str = "Conv2D") -> None:
    """Positive kernel and stride, non-negative padding, at least one output pixel."""
    if min(g.kernel) < 1 or min(g.stride) < 1:
        raise ModelError(f"{op} has kernel {g.kernel} and stride {g.stride}; both must be >= 1", layer=layer)
    if min(g.padding) < 0:
        raise UnsupportedOpError(f"{op} has negative padding {g.padding}", layer=layer)
    if min(g.out_hw) < 1:
        raise ModelError(
            f"{op} with kernel {g.kernel}, stride {g.stride} and padding {g.padding} (top, left, "
            f"bottom, right) has no output pixel on a {g.in_shape[1]} x {g.in_shape[2]} input",
            layer=layer,
        )


def geometry(node: Node) -> ConvGeometry:
    a = node.attrs
    return ConvGeometry((int(a["in_channels"]), *a["in_size"]), tuple(a["kernel"]), tuple(a["stride"]), tuple(a["padding"]))


def make_node(
    name: str,
    x: str,
    y: str,
    in_shape: tuple[int, ...],
    weight: np.ndarray,
    bias: np.ndarray | None,
    *,
    stride,
    padding: tuple[int, int, int, int],
    dilation=1,
    groups: int = 1,
) -> Node:
    """A ``conv2d`` node, after checking everything the IR does not support (named errors).

    ``groups`` > 1 (grouped / depthwise): ``weight`` is (O, C / groups, kh, kw) as PyTorch and ONNX
    store it; the node keeps it so and records ``attrs["groups"]`` (:func:`_weight_matrix` expands
    it).  ``dilation`` d: the kernel becomes the equivalent dense one of size d (k - 1) + 1 with zero
    taps between the model's (recorded as ``attrs["dilation"]``), so everything after the import
    sees an ordinary convolution."""
    dil = pair(dilation, "dilation", name)
    if min(dil) < 1:
        raise ModelError(f"dilation {dil} must be >= 1", layer=name)
    if len(in_shape) != 3:
        raise UnsupportedOpError(
            f"the convolution receives per-sample shape {tuple(in_shape)}; Conv2D needs (channels, height, width)",
            layer=name,
        )
    groups = int(groups)
    c_in = int(in_shape[0])
    w = np.ascontiguousarray(weight, dtype=np.float32)
    if w.ndim != 4:
        raise ModelError(f"weight shape {w.shape} is not (O, C, kh, kw)", layer=name)
    if groups < 1 or c_in % groups or w.shape[0] % groups:
        raise ModelError(
            f"groups={groups} must divide the {c_in} input channels and the {w.shape[0]} output channels",
            layer=name,
            hint="use a groups value that divides both channel counts (groups = in_channels for depthwise)",
        )
    if w.shape[1] * groups != c_in:
        what = f" in {groups} groups" if groups > 1 else ""
        raise ModelError(f"weight shape {w.shape} does not match an input with {c_in} channels{what} (O, C / groups, kh, kw)",
                         layer=name)
    if dil != (1, 1):
        o, cg, kh, kw = w.shape
        wide = np.zeros((o, cg, dil[0] * (kh - 1) + 1, dil[1] * (kw - 1) + 1), dtype=np.float32)
        wide[:, :, :: dil[0], :: dil[1]] = w
        w = wide
    g = ConvGeometry(tuple(int(d) for d in in_shape), (int(w.shape[2]), int(w.shape[3])), pair(stride, "stride", name), tuple(int(p) for p in padding))
    check_geometry(g, name)
    params = {"weight": w}
    if bias is not None:
        b = np.ascontiguousarray(bias, dtype=np.float32).reshape(-1)
        if b.shape != (w.shape[0],):
            raise ModelError(f"bias has {b.size} values for {w.shape[0]} output channels", layer=name)
        params["bias"] = b
    attrs = {
        "in_channels": g.in_shape[0],
        "out_channels": int(w.shape[0]),
        "in_size": g.in_shape[1:],
        "kernel": g.kernel,
        "stride": g.stride,
        "padding": g.padding,
        "activation": None,
    }
    if groups > 1:
        attrs["groups"] = groups
    if dil != (1, 1):
        attrs["dilation"] = dil
    return Node(name, "conv2d", (x,), (y,), attrs, params)


def output_shape(node: Node) -> tuple[int, int, int]:
    return (int(node.attrs["out_channels"]), *geometry(node).out_hw)


# ----------------------------------------------------------------------------- im2col, tiling


@functools.lru_cache(maxsize=128)
def im2col_index(g: ConvGeometry) -> np.ndarray:
    """(P, K) positions in a flattened CHW sample: row p = (y, x), column k = (c, i, j); -1 = padding."""
    c, h, w = g.in_shape
    kh, kw = g.kernel
    oh, ow = g.out_hw
    top, left = g.padding[0], g.padding[1]
    rows = (np.arange(oh) * g.stride[0])[:, None] + np.arange(kh)[None, :] - top  # (oh, kh)
    cols = (np.arange(ow) * g.stride[1])[:, None] + np.arange(kw)[None, :] - left  # (ow, kw)
    r = rows[:, None, None, :, None]  # axes: (y, x, c, i, j)
    q = cols[None, :, None, None, :]
    ch = np.arange(c)[None, None, :, None, None]
    inside = (r >= 0) & (r < h) & (q >= 0) & (q < w)
    idx = np.where(inside, ch * (h * w) + r * w + q, -1).reshape(oh * ow, c * kh * kw)
    idx.setflags(write=False)
    return idx


def im2col(x: np.ndarray, g: ConvGeometry, fill=0) -> np.ndarray:
    """(N, C, H, W) -> (N, P, K) patch matrices, ``fill`` where a window covers padding: code 0, or
    the zero point of float-scale codes (real 0, as ``QLinearConv`` pads)."""
    n = x.shape[0]
    flat = np.concatenate([x.reshape(n, -1), np.full((n, 1), fill, dtype=x.dtype)], axis=1)
    idx = im2col_index(g)
    return np.take(flat, np.where(idx < 0, flat.shape[1] - 1, idx), axis=1)  # contiguous, unlike flat[:, idx]


def col2im(cols: np.ndarray, g: ConvGeometry) -> np.ndarray:
    """(N, P, K) -> (N, C, H, W): the adjoint of :func:`im2col` (each patch entry added back to the
    element it was read from, padding dropped), i.e. ``torch.nn.functional.fold``."""
    n = cols.shape[0]
    size = int(np.prod(g.in_shape))
    idx = im2col_index(g)
    out = np.zeros((n, size + 1), dtype=np.float64 if cols.dtype.kind == "f" else np.int64)
    np.add.at(out, (np.arange(n)[:, None, None], np.where(idx < 0, size, idx)[None]), cols)
    return out[:, :size].reshape(n, *g.in_shape)


def rows_to_image(y: np.ndarray, out_hw: tuple[int, int]) -> np.ndarray:
    """(N, P, O) matrix-multiply result (one row per output pixel) -> (N, O, OH, OW)."""
    n, _, o = y.shape
    return y.reshape(n, *out_hw, o).transpose(0, 3, 1, 2)


def tile(a: np.ndarray, block: tuple[int, int]) -> np.ndarray:
    """(R, C) -> (R/br, C/bc, br, bc) blocks, zero-padded to whole blocks.

    The layout of per-kernel tiles of an im2col matrix multiply (the thesis's inter-tiling, e.g.
    conv1's 64 x 32 weights in 16 x 16 blocks) and of mmul blocks inside a kernel (intra-tiling).
    """
    br, bc = block
    if br < 1 or bc < 1:
        raise ValueError(f"block {block} must be positive")
    r, c = a.shape
    pr, pc = -(-r // br) * br, -(-c // bc) * bc
    padded = np.zeros((pr, pc), dtype=a.dtype)
    padded[:r, :c] = a
    return padded.reshape(pr // br, br, pc // bc, bc).transpose(0, 2, 1, 3)


def untile(t: np.ndarray, shape: tuple[int, int]) -> np.ndarray:
    """Inverse of :func:`tile`: the blocks back into an (R, C) matrix, padding dropped."""
    nr, nc, br, bc = t.shape
    return t.transpose(0, 2, 1, 3).reshape(nr * br, nc * bc)[: shape[0], : shape[1]]


# ----------------------------------------------------------------------------- types


@dataclass(frozen=True)
class ConvTypes:
    """``core``: the Dense numerics of patches x weights (its ``output`` is what the SRS writes:
    the pre-activation for tanh / prelu); ``output``: the layer's output after the activation."""

    core: dense.DenseTypes
    output: NumericType
    tanh: act.Activation | None = None
    slope: NumericType | None = None

    @property
    def input(self) -> NumericType:
        return self.core.input

    @property
    def is_float(self) -> bool:
        return self.core.is_float


def _types_to_json(t: ConvTypes) -> dict:
    d = {"core": dense.DENSE.types_to_json(t.core), "output": t.output.to_string()}
    if t.tanh is not None:
        d["tanh"] = act.activation_to_json(t.tanh)
    if t.slope is not None:
        d["slope"] = t.slope.to_string()
    return d


def _types_from_json(d: dict) -> ConvTypes:
    return ConvTypes(
        dense.DENSE.types_from_json(d["core"]),
        parse_type(d["output"]),
        act.parse_activation("tanh", d["tanh"]) if "tanh" in d else None,
        parse_type(d["slope"]) if "slope" in d else None,
    )


# ----------------------------------------------------------------------------- float reference


def full_weight(w: np.ndarray, groups: int) -> np.ndarray:
    """A grouped weight (O, C / groups, kh, kw) as the dense one (O, C, kh, kw) it equals: output
    channel o of group q = o // (O / groups) reads input channels q C / groups .. (q + 1) C / groups - 1,
    every other weight is zero (block diagonal)."""
    if groups == 1:
        return w
    o, cg, kh, kw = w.shape
    og = o // groups
    full = np.zeros((o, cg * groups, kh, kw), dtype=w.dtype)
    for q in range(groups):
        full[q * og : (q + 1) * og, q * cg : (q + 1) * cg] = w[q * og : (q + 1) * og]
    return full


def _weight_matrix(node: Node, key: str = "weight") -> np.ndarray:
    w = full_weight(node.params[key], int(node.attrs.get("groups", 1)))
    return w.reshape(w.shape[0], -1).T  # (K, O), rows in patch order (c, i, j)


def _chunks(x: np.ndarray, g: ConvGeometry) -> Iterator[np.ndarray]:
    step = max(1, _CHUNK_ELEMENTS // max(1, g.pixels * g.patch))
    for s in range(0, x.shape[0], step):
        yield x[s : s + step]


def _sample_shape(node: Node, x: np.ndarray, g: ConvGeometry) -> np.ndarray:
    if x.shape[1:] != g.in_shape:
        raise ModelError(f"input has per-sample shape {x.shape[1:]}, expected {g.in_shape}", layer=node.name)
    return x


def linear_forward(node: Node, x: np.ndarray) -> np.ndarray:
    """Float64 convolution + bias, before the activation."""
    g = geometry(node)
    x = _sample_shape(node, np.asarray(x, dtype=np.float64), g)
    w = _weight_matrix(node).astype(np.float64)
    b = node.params["bias"].astype(np.float64) if "bias" in node.params else 0.0
    parts = [rows_to_image(im2col(c, g) @ w + b, g.out_hw) for c in _chunks(x, g)]
    return np.concatenate(parts) if parts else np.zeros((0, *output_shape(node)))


def _slopes(node: Node, key: str = "slope") -> np.ndarray:
    return node.params[key].reshape(1, -1, 1, 1)


def float_forward(node: Node, x: np.ndarray) -> np.ndarray:
    """Float64 reference with the exact activation (calibration)."""
    y = linear_forward(node, x)
    a = node.attrs.get("activation")
    if a == "relu":
        return np.maximum(y, 0.0)
    if a == "tanh":
        return np.tanh(y)
    if a == "prelu":
        return np.where(y >= 0, y, y * _slopes(node).astype(np.float64))
    return y


# ----------------------------------------------------------------------------- quantise


def _dense_view(node: Node, output: str | None = None) -> Node:
    """The Dense layer the convolution is on its patches (what dense.quantise / emulate read)."""
    params = {"weight": _weight_matrix(node)}
    for key in ("bias", "weight_q", "bias_q", "rq_mult", "bias_codes"):
        if key in node.params:
            params[key] = node.params[key]
    if "weight_codes" in node.params:  # float-scale codes (onnxruntime quantize_static): as the matrix
        params["weight_codes"] = _weight_matrix(node, "weight_codes")
    relu = "relu" if node.attrs.get("activation") == "relu" else None
    attrs = {"in_features": geometry(node).patch, "out_features": int(node.attrs["out_channels"]), "activation": relu}
    types = node.types.core if isinstance(node.types, ConvTypes) else None
    return Node(node.name, "dense", node.inputs, (output or node.outputs[0],), attrs, params, types, aliases=node.aliases)


def refuse_float_scale_activation(layer: str, activation: str) -> None:
    """The refusal of a Tanh / PReLU after a float-scale convolution (here, and in passes/fuse.py,
    where onnxruntime's quantiser between the Conv and the Tanh is met first)."""
    raise UnsupportedOpError(f"a {activation} after a convolution with float scales (onnxruntime "
                             "quantize_static) is not supported; ReLU is", layer=layer,
                             hint="use ReLU, or quantise with power-of-two scales (precision + calibration data)")


def _reject_qdq(node: Node, ctx: QuantContext) -> None:
    if "weight_codes" in node.params:
        return  # float scales (onnxruntime quantize_static): dense.quantise_affine on the patches
    names = (node.name, *node.aliases)
    if any((n, k) in ctx.hints.params for n in names for k in ("weight", "bias")) or node.outputs[0] in ctx.hints.tensors:
        raise UnsupportedOpError(
            "QDQ-quantised convolutions are not supported yet",
            layer=node.name,
            hint="export the float model and quantise with precision + calibration data",
        )


def _tanh_choice(ctx: QuantContext) -> act.Activation:
    """Layer setting > top-level setting > exact (fp32 and fixed point alike)."""
    return ctx.layer.activations.get("tanh") or ctx.config.activations.get("tanh") or act.ExactActivation("tanh")


def quantise(node: Node, ctx: QuantContext) -> Node:
    """The Dense quantiser on the patches; tanh / prelu add a pre-activation stage (module docstring)."""
    _reject_qdq(node, ctx)
    precision = ctx.layer.precision or ctx.config.precision
    act_kind, w_kind = PRECISIONS[precision]
    if w_kind == "i4":
        raise ConfigError(
            f"precision {precision} (4-bit weights) is for Dense layers; convolutions take 8- or 16-bit weights",
            layer=node.name,
            hint=f"give layers.{node.name}.precision: int8 (or int16 / a16w8) and keep a8w4 for the Dense layers",
        )
    activation = node.attrs.get("activation")
    if act_kind == "bf16" and activation == "tanh" and not isinstance(_tanh_choice(ctx), act.ExactActivation):
        raise ConfigError(
            f"a bf16 convolution's tanh is the bf16 table of ops/activation.py (tanh rounded to bf16 on every "
            f"input); the configured tanh {_tanh_choice(ctx)} is for fp32 and fixed point",
            layer=node.name,
            hint=f"remove activations.tanh (top level or layers.{node.name}) for this bf16 layer",
        )
    if "weight_codes" in node.params and activation in _TWO_STAGE:
        refuse_float_scale_activation(node.name, activation)
    if activation not in _TWO_STAGE:
        core = dense.quantise(_dense_view(node), ctx)
        return node.evolve(types=ConvTypes(core.types, core.types.output), params=_with_codes(node, core))
    pre_key = f"{node.outputs[0]}:pre-activation"
    calibration = dict(ctx.calibration)
    if node.inputs[0] in ctx.calibration:
        calibration[pre_key] = linear_forward(node, ctx.calibration[node.inputs[0]])
    layer = replace(ctx.layer, types=frozen_map({k: v for k, v in ctx.layer.types.items() if k != "output"}))
    core = dense.quantise(_dense_view(node, pre_key), replace(ctx, layer=layer, calibration=calibration))
    params = _with_codes(node, core)
    tanh = _tanh_choice(ctx) if activation == "tanh" else None
    if core.types.is_float:
        ft = core.types.output
        bf16 = act_kind == "bf16"
        if activation == "prelu":  # bf16: the slopes are bf16 operands (nearest even)
            slope = node.params["slope"].astype(np.float32)
            params["slope_q"] = fixed.to_bf16(slope) if bf16 else slope
        elif bf16:  # tanh: the bf16 activation kernel's table (ops/activation.py bf16_table)
            from .activation import bf16_table

            table, window, rules = bf16_table("tanh", {})
            params.update(table=table, window=np.array(window, dtype=np.int64), rules=rules)
            tanh = None
        return node.evolve(types=ConvTypes(core.types, ft, tanh, ft if activation == "prelu" else None), params=params)
    out = _fixed_output_type(node, ctx, act_kind)
    slope_type = None
    if activation == "prelu":
        s = node.params["slope"]
        slope_type = dense.power_of_two_type(float(np.max(np.abs(s))), _WIDTH[w_kind], Rounding.CONV_EVEN, Saturation.SATURATE)
        params["slope_q"] = fixed.quantize(s, slope_type)
    return node.evolve(types=ConvTypes(core.types, out, tanh, slope_type), params=params)


def _with_codes(node: Node, core: Node) -> dict:
    params = dict(node.params, weight_q=core.params["weight_q"])
    for key in ("bias_q", "rq_mult"):
        if key in core.params:
            params[key] = core.params[key]
    return params


def _fixed_output_type(node: Node, ctx: QuantContext, act_kind: str) -> FixedType:
    """Explicit ``output`` > PTQ of the activation's output on calibration data > tanh's range."""
    t = ctx.layer.types.get("output")
    if t is None:
        values = ctx.calibration.get(node.outputs[0])
        if values is not None:
            m = float(np.max(np.abs(values))) if values.size else 0.0
        elif node.attrs["activation"] == "tanh":
            m = 1.0  # |tanh| <= 1 whatever the input
        else:
            raise ConfigError(
                "the PReLU output type needs calibration data",
                layer=node.name,
                hint=f"pass calibration=..., or give layers.{node.name}.output as a fixed type",
            )
        t = dense.power_of_two_type(m, _WIDTH[act_kind], Rounding.CONV_EVEN, Saturation.SATURATE)
    if not isinstance(t, FixedType) or t.width > 32:
        raise ConfigError(f"output type {t} must be fixed point, at most 32 bits wide", layer=node.name)
    return t


# ----------------------------------------------------------------------------- emulate


def emulate(node: Node, x: np.ndarray) -> np.ndarray:
    """Bit-exact emulation: Dense numerics on the im2col patches, then the activation."""
    t: ConvTypes = node.types
    if t is None:
        raise ConfigError("the layer has not been quantised", layer=node.name)
    g = geometry(node)
    x = _sample_shape(node, np.asarray(x), g)
    if not t.is_float and x.dtype != np.float32 and (x.size == 0 or np.abs(x).max() < fast.F32_EXACT):
        x = x.astype(np.float32)  # integer codes, exact in float32: half the im2col traffic of int64
    lin = _dense_view(node)
    fill = pad_code(t.input)
    parts = []
    for chunk in _chunks(x, g):
        n = chunk.shape[0]
        y = dense.emulate(lin, im2col(chunk, g, fill).reshape(n * g.pixels, g.patch))
        parts.append(_activate(node, t, rows_to_image(y.reshape(n, g.pixels, -1), g.out_hw)))
    if not parts:
        return np.zeros((0, *output_shape(node)), dtype=np.float32 if t.is_float else np.int64)
    return np.ascontiguousarray(np.concatenate(parts))


def pad_code(t: NumericType) -> int:
    """The code padding holds: real 0, which is the zero point of a float-scale (affine) type (the
    input zero point folded into the bias counts every tap, padding included)."""
    return t.zero_point if isinstance(t, AffineType) else 0


def _activate(node: Node, t: ConvTypes, y: np.ndarray) -> np.ndarray:
    a = node.attrs.get("activation")
    if a not in _TWO_STAGE:
        return y  # relu is part of the Dense numerics
    if t.is_float:
        bf16 = t.output.name == "bf16"
        if a == "tanh" and bf16:
            from .activation import apply_bf16_table

            p = node.params
            return apply_bf16_table(y, p["table"], p["window"], p["rules"])
        if a == "tanh":
            return act.apply_float32(t.tanh, y)
        neg = (y * _slopes(node, "slope_q").astype(np.float32)).astype(np.float32)
        return np.where(y >= 0, y, fixed.to_bf16(neg) if bf16 else neg).astype(np.float32)
    codes = y.astype(np.int64)
    pre: FixedType = t.core.output
    if a == "tanh":
        return act.apply_fixed(t.tanh, codes, pre.frac, t.output)
    neg = fixed.cast(codes * _slopes(node, "slope_q").astype(np.int64), pre.frac + t.slope.frac, t.output)
    return np.where(codes >= 0, fixed.cast(codes, pre.frac, t.output), neg)


# ----------------------------------------------------------------------------- plan


CONV2D = OpFamily(
    name="conv2d",
    float_forward=float_forward,
    emulate=emulate,
    quantise=quantise,
    plan=not_mapped,
    types_to_json=_types_to_json,
    types_from_json=_types_from_json,
)


# ----------------------------------------------------------------------------- standalone activations


def _prelu_forward(node: Node, x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    s = node.params["slope"].astype(np.float64)
    shape = (1, -1) + (1,) * (x.ndim - 2) if s.size > 1 else (1,)
    return np.where(x >= 0, x, x * s.reshape(shape))


def _standalone(node: Node, *_args) -> Node:
    what = {"tanh": "Tanh", "prelu": "PReLU"}[node.op]
    raise UnsupportedOpError(
        f"a standalone {what} (not directly after a Conv2d / Conv) is not supported yet",
        layer=node.name,
        hint=f"put the {what} right after a convolution so aieflow fuses it into that layer",
    )


TANH = OpFamily(name="tanh", float_forward=lambda node, x: np.tanh(x), emulate=_standalone, quantise=_standalone, fused_only=True)
PRELU = OpFamily(name="prelu", float_forward=_prelu_forward, emulate=_standalone, quantise=_standalone, fused_only=True)
