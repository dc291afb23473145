"""ONNX operators of convolutional networks, for the ONNX importer.

``Conv`` -> ``conv2d`` (``pads`` or ``auto_pad``), ``Tanh`` / ``PRelu`` -> ``tanh`` / ``prelu``
(folded into the convolution before them by the fuse pass, as ``Relu``), ``DepthToSpace`` ->
``pixel_shuffle`` (CRD and DCR), ``MaxPool`` / ``AveragePool`` -> ``maxpool`` / ``avgpool``,
``GlobalAveragePool`` and ``ReduceMean`` over the two spatial axes (what the dynamo exporter writes
for ``AdaptiveAvgPool2d(1)``) -> a full-window ``avgpool``; ``ReduceMean`` over axis 1 of ``[N, T, E]``
(``x.mean(dim=1)``, the axes an attribute up to opset 17 and an input from opset 18) -> the token mean
of ``pooling.py``.  A 1-D ``Conv`` / ``MaxPool`` /
``AveragePool`` / ``GlobalAveragePool`` / ``ReduceMean`` over the last axis (input ``[N, C, W]``)
runs as its 2-D form on a ``(C, 1, W)`` view (``sequence.py``), and an inference
``BatchNormalization`` becomes a ``batchnorm`` placeholder that ``batchnorm.fold`` folds into the
Conv / Gemm / MatMul (+ Add) before it.  Anything the IR cannot express is rejected with the node's
name and what to change.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import onnx

from ..errors import ModelError, UnsupportedOpError
from ..ir import Node
from ..ops import conv, pool, resize, shuffle
from . import batchnorm, pooling, sequence

CONV_OPS: tuple[str, ...] = (
    "Conv (2-D or 1-D, any dilations and group: grouped, depthwise)",
    "BatchNormalization (inference, directly after a Conv / Gemm / MatMul (+ Add) or directly before a Gemm / MatMul / unpadded Conv: folded into it)",
    "Tanh",
    "PRelu (after a Conv)",
    "DepthToSpace (CRD, DCR)",
    "Resize (nearest, whole factors; scales or sizes)",
    "MaxPool / AveragePool (2-D or 1-D, ceil_mode 0)",
    "GlobalAveragePool",
    "ReduceMean (over the spatial axes, the length of a 1-D sequence, or the tokens of [N, T, E]: a token mean)",
)
_CONVERTERS = {
    "Conv": "_onnx_conv",
    "Tanh": "_onnx_tanh",
    "PRelu": "_onnx_prelu",
    "DepthToSpace": "_onnx_depth_to_space",
    "Resize": "_onnx_resize",
    "MaxPool": "_onnx_max_pool",
    "AveragePool": "_onnx_average_pool",
    "GlobalAveragePool": "_onnx_global_average_pool",
    "ReduceMean": "_onnx_reduce_mean",
    "BatchNormalization": "_onnx_batch_norm",
}
_QDQ_ADVICE = "export the float model and quantise with precision + calibration data"


def _attrs(node: onnx.NodeProto) -> dict:
    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


def _text(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def pads_of(attrs: dict, name: str, op: str, hw: tuple[int, int], kernel: tuple[int, int], stride: tuple[int, int]) -> tuple[int, int, int, int]:
    """(top, left, bottom, right) from ONNX ``pads`` ([h_begin, w_begin, h_end, w_end]) or ``auto_pad``."""
    auto = _text(attrs.get("auto_pad", "NOTSET"))
    if auto in ("NOTSET", ""):
        pads = list(attrs.get("pads", [0, 0, 0, 0]))
        if len(pads) != 4:
            raise UnsupportedOpError(f"node '{name}' ({op}) has pads {pads}; expected 4 values for a 2-D window")
        return tuple(int(p) for p in pads)
    if auto == "VALID":
        return (0, 0, 0, 0)
    if auto not in ("SAME_UPPER", "SAME_LOWER"):
        raise UnsupportedOpError(f"node '{name}' ({op}) has auto_pad={auto}; use NOTSET, VALID, SAME_UPPER or SAME_LOWER")
    begin, end = [], []
    for size, k, s in zip(hw, kernel, stride, strict=True):
        total = max((math.ceil(size / s) - 1) * s + k - size, 0)
        small = total // 2
        begin.append(small if auto == "SAME_UPPER" else total - small)
        end.append(total - begin[-1])
    return (begin[0], begin[1], end[0], end[1])


class OnnxConvMixin:
    """The converters above (see ``onnx_frontend._OnnxImporter``)."""

    shapes: dict
    nodes: list
    lifted: dict  # (C, W) IR tensor -> its (C, 1, W) view (sequence.py)
    unlifts: set  # names of the reshapes that give a 1-D layer's result back as (C, W)

    def conv_converters(self) -> dict[str, Callable[[onnx.NodeProto, str], None]]:
        return {op: getattr(self, method) for op, method in _CONVERTERS.items()}

    def _add_node(self, ir: Node, shape: tuple[int, ...]) -> None:
        self.shapes[ir.outputs[0]] = tuple(int(d) for d in shape)
        self.nodes.append(ir)

    def _image(self, node: onnx.NodeProto, name: str) -> tuple[str, tuple[int, ...]]:
        x = self._data_input(node.input[0], name, node.op_type)
        return x, tuple(self.shapes[x])

    def _constant_input(self, node: onnx.NodeProto, k: int, name: str, what: str):
        c = self._const(node.input[k])
        if c is None:
            raise UnsupportedOpError(f"node '{name}' ({node.op_type}) takes its {what} from a computed tensor; it must be a constant")
        if c.affine is not None:
            raise UnsupportedOpError(
                f"node '{name}' ({node.op_type}) has a {what} quantised with float scales (onnxruntime "
                "quantize_static); aieflow takes such models as Dense chains (Gemm / MatMul + ReLU) only, not "
                "convolutions", hint="quantise the float model with power-of-two scales: aieflow's own PTQ "
                "(precision + calibration data)")
        if c.qtype is not None or c.codes is not None:
            raise UnsupportedOpError(f"node '{name}' ({node.op_type}) has a quantised {what}; QDQ-quantised convolutions are not supported yet", hint=_QDQ_ADVICE)
        return np.asarray(c.value, dtype=np.float32)

    def _conv_weight(self, node: onnx.NodeProto, name: str, affine: dict) -> np.ndarray:
        """A Conv's weight; one dequantised with float scales (onnxruntime ``quantize_static``, per
        tensor or per output channel, zero point 0) also gives its integer codes (``weight_codes``,
        same layout) and its type hint, as a Gemm's does (the requantisation: numerics/requant.py)."""
        c = self._const(node.input[1])
        if c is None or c.affine is None:
            return self._constant_input(node, 1, name, "weight")
        self._check_affine_weight(c, name, "Conv", True)  # output channels: axis 0, as a transposed Gemm weight
        affine["weight_codes"] = np.ascontiguousarray(np.asarray(c.acodes, dtype=np.int64))
        self.hint_params[(name, "weight")] = c.affine
        return np.asarray(c.value, dtype=np.float32)

    def _conv_bias(self, node: onnx.NodeProto, name: str, n: int, affine: dict) -> np.ndarray:
        c = self._const(node.input[2])
        if c is None or c.affine is None:
            return self._constant_input(node, 2, name, "bias")
        self._affine_bias(name, "Conv", c, n, affine)
        return np.asarray(c.value, dtype=np.float32).reshape(-1)

    # -- converters -------------------------------------------------------------------------------

    def _onnx_conv(self, node: onnx.NodeProto, name: str) -> None:
        attrs = _attrs(node)
        x, in_shape = self._image(node, name)
        affine: dict = {}
        w = self._conv_weight(node, name, affine)
        one_d = w.ndim == 3
        if one_d:  # [N, C, W]: a 1 x k convolution of the (C, 1, W) view
            attrs = sequence.attrs_2d(attrs, name, "Conv")
            x = self._lift(x, name, "Conv")
            in_shape = self.shapes[x]
            w = sequence.lift_weight(w)
            if "weight_codes" in affine:
                affine["weight_codes"] = affine["weight_codes"][:, :, None, :]
        if w.ndim != 4:
            raise UnsupportedOpError(f"node '{name}' (Conv) has a {w.ndim - 2}-D kernel; only 1-D and 2-D convolutions are supported")
        if "kernel_shape" in attrs and tuple(attrs["kernel_shape"]) != tuple(w.shape[2:]):
            raise UnsupportedOpError(f"node '{name}' (Conv) has kernel_shape {attrs['kernel_shape']} but weights of shape {w.shape}")
        b = self._conv_bias(node, name, int(w.shape[0]), affine) if len(node.input) > 2 and node.input[2] else None
        stride = tuple(attrs.get("strides", (1, 1)))
        dilation = tuple(attrs.get("dilations", (1, 1)))
        hw = tuple(in_shape[1:]) if len(in_shape) == 3 else (1, 1)
        dil2 = dilation if len(dilation) == 2 else (1, 1)
        reach = tuple(d * (k - 1) + 1 for d, k in zip(dil2, w.shape[2:], strict=True))  # the dilated kernel's extent
        pads = pads_of(attrs, name, "Conv", hw, reach, stride if len(stride) == 2 else (1, 1))
        y = self._fresh_tensor_name(f"{node.output[0]}_image") if one_d else node.output[0]
        ir = conv.make_node(name, x, y, in_shape, w, b, stride=stride, padding=pads, dilation=dilation, groups=int(attrs.get("group", 1)))
        if affine:
            ir = ir.evolve(params=dict(ir.params, **affine))
        self._add_node(ir, conv.output_shape(ir))
        if one_d:
            self._unlift(name, y, node.output[0])

    def _onnx_tanh(self, node: onnx.NodeProto, name: str) -> None:
        x, shape = self._image(node, name)
        self.elementwise(name, "tanh", x, node.output[0])

    def _onnx_prelu(self, node: onnx.NodeProto, name: str) -> None:
        x, shape = self._image(node, name)
        slope = self._constant_input(node, 1, name, "slope")
        if x in self.lifted and slope.ndim <= 3:  # [N, C, W]: slopes (C, 1) or a scalar, as for an image
            slope = slope.reshape(*slope.shape[:-1], 1, *slope.shape[-1:]) if slope.ndim >= 2 else slope
            shape = self.shapes[self.lifted[x]]
        full = (1,) * (4 - slope.ndim) + tuple(slope.shape) if slope.ndim <= 4 else slope.shape
        if len(shape) != 3 or len(full) != 4 or full[0] != 1 or full[2:] != (1, 1) or full[1] not in (1, shape[0]):
            raise UnsupportedOpError(
                f"node '{name}' (PRelu) has slope shape {tuple(slope.shape)} on per-sample shape {shape}; only one "
                "slope, or one per channel of an image, is supported (after a Conv)"
            )
        self.elementwise(name, "prelu", x, node.output[0], {"slope": slope.reshape(-1)})

    def _onnx_depth_to_space(self, node: onnx.NodeProto, name: str) -> None:
        attrs = _attrs(node)
        x, shape = self._image(node, name)
        r = int(attrs.get("blocksize", 0))
        ir = shuffle.make_node(name, x, node.output[0], shape, r, _text(attrs.get("mode", "DCR")))
        self._add_node(ir, shuffle.output_shape(shape, r))

    def _onnx_resize(self, node: onnx.NodeProto, name: str) -> None:
        """Nearest or linear ``Resize`` by whole factors (ops/resize.py says which coordinate transforms
        agree for nearest and how linear's are read)."""
        attrs = _attrs(node)
        x, shape = self._image(node, name)
        mode = _text(attrs.get("mode", "nearest"))
        coord = _text(attrs.get("coordinate_transformation_mode", "half_pixel"))
        nearest_mode = _text(attrs.get("nearest_mode", "round_prefer_floor"))
        fine = ((coord == "asymmetric" and nearest_mode == "floor")
                or (coord in ("half_pixel", "pytorch_half_pixel") and nearest_mode in ("round_prefer_floor", "round_prefer_ceil")))
        linear = {"half_pixel": "half_pixel", "pytorch_half_pixel": "half_pixel", "align_corners": "align_corners",
                  "asymmetric": "asymmetric"}
        if mode == "linear":
            if coord not in linear:
                raise UnsupportedOpError(f"node '{name}' (Resize) mode=linear with coordinate_transformation_mode={coord}",
                                         hint=f"{resize.ADVICE}; linear with {', '.join(linear)}")
            mode, coord = "bilinear", linear[coord]
        if mode == "nearest" and not fine:
            raise UnsupportedOpError(
                f"node '{name}' (Resize) has coordinate_transformation_mode={coord} with nearest_mode={nearest_mode}",
                hint=f"{resize.ADVICE}: asymmetric + floor (PyTorch's export), or half_pixel + round_prefer_floor / ceil")
        if "axes" in attrs or int(attrs.get("antialias", 0)):
            raise UnsupportedOpError(f"node '{name}' (Resize) with axes or antialias is not supported", hint=resize.ADVICE)
        given = [k for k in (1, 2, 3) if len(node.input) > k and node.input[k]]
        scales_at = 1 if len(node.input) == 2 else 2  # opset 10: (X, scales); 11+: (X, roi, scales, sizes)
        if scales_at in given and self._constant_input(node, scales_at, name, "scales").size:
            full = self._constant_input(node, scales_at, name, "scales").astype(np.float64).reshape(-1)
        elif 3 in given:
            sizes = self._constant_input(node, 3, name, "sizes").astype(np.float64).reshape(-1)
            full = sizes / np.array([sizes[0], shape[0], shape[1], shape[2]], dtype=np.float64)
        else:
            raise UnsupportedOpError(f"node '{name}' (Resize) has neither constant scales nor sizes", hint=resize.ADVICE)
        if full.size != 4 or full[0] != 1 or full[1] != 1:
            raise UnsupportedOpError(f"node '{name}' (Resize) scales {full.tolist()} resize more than the image's "
                                     "height and width", hint=resize.ADVICE)
        ir = resize.make_node(name, x, node.output[0], shape, (full[2], full[3]), mode, coord)
        self._add_node(ir, resize.output_shape(shape, ir.attrs["scale"]))

    def _window(self, node: onnx.NodeProto, name: str, op: str) -> None:
        attrs = _attrs(node)
        x, shape = self._image(node, name)
        if len(node.output) > 1 and node.output[1]:
            raise UnsupportedOpError(f"node '{name}' ({node.op_type}) has an Indices output; not supported")
        one_d = len(shape) == 2 and len(attrs.get("kernel_shape", ())) == 1
        if one_d:  # [N, C, W]: a 1 x k window over the (C, 1, W) view
            attrs = sequence.attrs_2d(attrs, name, node.op_type)
            x = self._lift(x, name, node.op_type)
            shape = self.shapes[x]
        if "kernel_shape" not in attrs or len(attrs["kernel_shape"]) != 2:
            raise UnsupportedOpError(f"node '{name}' ({node.op_type}) needs a 2-D kernel_shape, got {attrs.get('kernel_shape')}")
        kernel = tuple(int(k) for k in attrs["kernel_shape"])
        stride = tuple(int(s) for s in attrs.get("strides", (1, 1)))
        hw = tuple(shape[1:]) if len(shape) == 3 else (1, 1)
        pads = pads_of(attrs, name, node.op_type, hw, kernel, stride if len(stride) == 2 else (1, 1))
        y = self._fresh_tensor_name(f"{node.output[0]}_image") if one_d else node.output[0]
        ir = pool.make_node(
            name, op, x, y, shape, kernel, stride, pads,
            count_include_pad=bool(attrs.get("count_include_pad", 0)),
            dilation=tuple(attrs.get("dilations", (1, 1))),
            ceil_mode=bool(attrs.get("ceil_mode", 0)),
        )
        self._add_node(ir, pool.output_shape(ir))
        if one_d:
            self._unlift(name, y, node.output[0])

    def _onnx_max_pool(self, node: onnx.NodeProto, name: str) -> None:
        self._window(node, name, "maxpool")

    def _onnx_average_pool(self, node: onnx.NodeProto, name: str) -> None:
        self._window(node, name, "avgpool")

    def _global_average(self, name: str, x: str, shape: tuple[int, ...], y: str) -> None:
        """A full-window ``avgpool`` of an image, or of a sequence's (C, 1, W) view (then ``y`` is the
        (C, 1) result: the pooled (C, 1, 1) view given back by an unlift)."""
        if len(shape) == 2:
            src = self._lift(x, name, "global average pooling")
            pooled = self._fresh_tensor_name(f"{y}_image")
            self._global_average(name, src, self.shapes[src], pooled)
            self._unlift(name, pooled, y)
            return
        if len(shape) != 3:
            raise UnsupportedOpError(f"node '{name}' averages per-sample shape {shape}; global average pooling needs (channels, height, width) or (channels, length)")
        ir = pool.make_node(name, "avgpool", x, y, shape, shape[1:], shape[1:], (0, 0, 0, 0))
        self._add_node(ir, pool.output_shape(ir))

    def _onnx_global_average_pool(self, node: onnx.NodeProto, name: str) -> None:
        x, shape = self._image(node, name)
        self._global_average(name, x, shape, node.output[0])

    def _onnx_reduce_mean(self, node: onnx.NodeProto, name: str) -> None:
        attrs = _attrs(node)
        x, shape = self._image(node, name)
        if "axes" in attrs:
            axes = list(attrs["axes"])
        elif len(node.input) > 1 and node.input[1]:
            axes = [int(a) for a in self._static_or_fail(node.input[1], name, "ReduceMean", "axes").reshape(-1)]
        else:
            axes = []
        rank = len(shape) + 1
        if rank == 3 and sorted(a % rank for a in axes) == [1]:  # the tokens of [B, T, E]: x.mean(dim=1)
            nodes, shapes = pooling.token_mean_nodes(name, x, node.output[0], shape, bool(attrs.get("keepdims", 1)),
                                                     lambda b: b if b == name else self._fresh_node_name(b))
            for n in nodes:
                self._add_node(n, shapes[n.outputs[0]])
            return
        spatial = [2, 3] if len(shape) == 3 else [2]
        if len(shape) not in (2, 3) or sorted(a % rank for a in axes) != spatial:
            raise UnsupportedOpError(
                f"node '{name}' (ReduceMean) averages axes {axes} of a tensor of rank {rank}; only the two "
                "spatial axes of an image, or the last axis of a [N, C, W] sequence (global average pooling), "
                "are supported, or the tokens of a [N, T, E] sequence (axis 1: a token mean)"
            )
        if attrs.get("keepdims", 1):
            self._global_average(name, x, shape, node.output[0])
            return
        if len(shape) == 2:
            x = self._lift(x, name, "ReduceMean")
            shape = self.shapes[x]
        pooled = self._fresh_tensor_name(f"{name}_pooled")
        self._global_average(name, x, shape, pooled)
        self._emit(f"{name}_squeeze", "reshape", pooled, node.output[0], (shape[0],), {"shape": (shape[0],)})

    # -- batch normalisation (folded by batchnorm.fold at the end of the import) -----------------

    def _onnx_batch_norm(self, node: onnx.NodeProto, name: str) -> None:
        attrs = _attrs(node)
        export = "export the model in eval mode (model.eval() before torch.onnx.export)"
        if int(attrs.get("training_mode", 0)) or any(node.output[1:]):
            raise UnsupportedOpError(f"node '{name}' (BatchNormalization) runs in training mode (batch statistics)",
                                     hint=export)
        if not int(attrs.get("spatial", 1)):
            raise UnsupportedOpError(f"node '{name}' (BatchNormalization) has spatial=0 (statistics per element); only "
                                     "per-channel statistics fold into the layer before it")
        if len(node.input) != 5 or not all(node.input[1:]):
            raise ModelError(f"node '{name}' (BatchNormalization) needs X, scale, B, mean and var inputs")
        x = self._data_input(node.input[0], name, "BatchNormalization")
        shape = self.shapes[x]
        if not shape:
            raise UnsupportedOpError(f"node '{name}' (BatchNormalization) normalises a scalar per sample")
        gamma, beta, mean, var = (self._constant_input(node, k, name, what)
                                  for k, what in ((1, "scale"), (2, "B"), (3, "mean"), (4, "var")))
        src = self.lifted.get(x, x)
        y = self._fresh_tensor_name(f"{node.output[0]}_image") if x in self.lifted else node.output[0]
        self.shapes[y] = self.shapes[src]
        self.nodes.append(batchnorm.make_node(name, src, y, int(shape[0]), gamma, beta, mean, var,
                                              float(attrs.get("epsilon", 1e-5))))
        if x in self.lifted:
            self._unlift(name, y, node.output[0])

    # -- 1-D layers on a (C, 1, W) view (sequence.py) --------------------------------------------

    def _fresh_node_name(self, base: str) -> str:
        taken = {n.name for n in self.nodes} | set(self._names)
        name, k = base, 1
        while name in taken:
            name, k = f"{base}_{k}", k + 1
        return name

    def _lift(self, x: str, name: str, op: str) -> str:
        """The (C, 1, W) view of (C, W) tensor ``x`` (a reshape, made once per tensor)."""
        if x in self.lifted:
            return self.lifted[x]
        shape = sequence.image_shape(self.shapes[x], name, op)
        y = self._fresh_tensor_name(f"{x}_image")
        self._emit(self._fresh_node_name(f"{name}_as_image"), "reshape", x, y, shape, {"shape": shape})
        self.lifted[x] = y
        return y

    def _unlift(self, name: str, y3: str, y: str) -> None:
        """Give the (C, 1, W) result ``y3`` back as ONNX tensor ``y`` at its (C, W) shape."""
        c, _, w = self.shapes[y3]
        node = self._fresh_node_name(f"{name}_as_sequence")
        self._emit(node, "reshape", y3, y, (c, w), {"shape": (c, w)})
        self.unlifts.add(node)
        self.lifted[y] = y3

    def elementwise(self, name: str, op: str, x: str, y: str, params=None) -> None:
        """Relu / Tanh / PRelu: on a 1-D layer's result, computed on its (C, 1, W) view (so the fuse
        pass folds it into the convolution), else as usual."""
        if x not in self.lifted:
            self._emit(name, op, x, y, self.shapes[x], None, params)
            return
        x3 = self.lifted[x]
        y3 = self._fresh_tensor_name(f"{y}_image")
        self._emit(name, op, x3, y3, self.shapes[x3], None, params)
        self._unlift(name, y3, y)
