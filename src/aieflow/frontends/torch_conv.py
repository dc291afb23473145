"""PyTorch modules and functions of convolutional networks, for the torch converter.

``nn.Conv2d`` becomes ``conv2d`` (padding, including ``padding="same"``, as explicit per-side
amounts), ``nn.Tanh`` / ``nn.PReLU`` become ``tanh`` / ``prelu`` (the fuse pass folds them, and
``nn.ReLU``, into the convolution before them), ``nn.PixelShuffle`` ``pixel_shuffle`` (CRD), and
``nn.MaxPool2d`` / ``nn.AvgPool2d`` / ``nn.AdaptiveAvgPool2d(1)`` ``maxpool`` / ``avgpool``, and a
mean over an image's two spatial dimensions (``x.mean(dim=(2, 3))``, ``torch.mean``, ``keepdim``
either way) a full-window ``avgpool`` (+ a reshape without ``keepdim``), as the ONNX frontend maps
``ReduceMean``.  ``nn.Conv1d``, ``nn.MaxPool1d`` / ``nn.AvgPool1d``, ``nn.AdaptiveAvgPool1d(1)`` and a
mean over a sequence's length run as their 2-D forms on a ``(C, 1, W)`` view (``sequence.py``).
Eval-mode ``nn.BatchNorm1d`` / ``nn.BatchNorm2d`` become ``batchnorm`` placeholders that
``batchnorm.fold`` folds into the convolution or linear layer before them.
Grouped, depthwise and dilated convolutions are taken (``ops/conv.py``); everything the IR cannot
express (non-zero padding modes, ceil_mode, ...) is
rejected with the module's name and what to change (``ops/conv.py``, ``ops/pool.py``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import ModelError, UnsupportedOpError
from ..ir import Node
from ..ops import conv, pool, resize, shuffle
from . import batchnorm, sequence

SUPPORTED_MODULES: tuple[str, ...] = (
    "nn.Conv2d / nn.Conv1d (any dilation and groups: grouped, depthwise; zero padding)",
    "nn.BatchNorm2d / nn.BatchNorm1d (eval mode, directly after a Conv / Linear or directly before a Linear / unpadded Conv: folded into it)",
    "nn.Tanh",
    "nn.PReLU (after a convolution)",
    "nn.PixelShuffle",
    "nn.Upsample / nn.UpsamplingNearest2d / nn.UpsamplingBilinear2d (nearest, bilinear; whole factors)",
    "nn.MaxPool2d / nn.AvgPool2d / nn.MaxPool1d / nn.AvgPool1d (ceil_mode=False)",
    "nn.AdaptiveAvgPool2d(1) / nn.AdaptiveAvgPool1d(1)",
)
SUPPORTED_FUNCTIONS: tuple[str, ...] = (
    "torch.tanh / F.tanh / Tensor.tanh",
    "F.pixel_shuffle",
    "F.interpolate (nearest, whole factors)",
    "F.max_pool2d / F.avg_pool2d / F.max_pool1d / F.avg_pool1d",
    "F.adaptive_avg_pool2d(x, 1) / F.adaptive_avg_pool1d(x, 1)",
    "Tensor.mean / torch.mean over an image's spatial dims (dim=(2, 3)) or a sequence's length (dim=2): "
    "global average pooling",
)
_BN_EVAL_HINT = "call model.eval() before compiling: aieflow folds the running statistics into the layer before it"


def _symmetric(padding, name: str) -> tuple[int, int, int, int]:
    ph, pw = conv.pair(padding, "padding", name)
    return (ph, pw, ph, pw)


class ConvMixin:
    """Conversion of the modules and functions above (see ``torch_frontend._Converter``)."""

    torch: Any
    F: Any
    shapes: dict
    nodes: list
    lifted: dict  # (C, W) IR tensor -> its (C, 1, W) view (sequence.py)
    unlifts: set  # names of the reshapes that give a 1-D layer's result back as (C, W)
    training_bn: frozenset  # module paths of BatchNorms that were in training mode

    # -- hooks called by the converter: True when the node was handled ---------------------------

    def conv_module(self, fx_node, path: str, mod, x: str) -> bool:
        nn = self.torch.nn
        if isinstance(mod, nn.Conv2d):
            self._conv2d(fx_node, path, x, mod)
        elif isinstance(mod, nn.Conv1d):
            self._conv1d(fx_node, path, x, mod)
        elif isinstance(mod, nn.BatchNorm1d | nn.BatchNorm2d):
            self._batchnorm(fx_node, path, x, mod)
        elif isinstance(mod, nn.Tanh):
            self.elementwise(fx_node, path, "tanh", x)
        elif isinstance(mod, nn.PReLU):
            self.elementwise(fx_node, path, "prelu", x, params={"slope": self._numpy(mod.weight).reshape(-1)})
        elif isinstance(mod, nn.PixelShuffle):
            self._add(fx_node, shuffle.make_node(path, x, fx_node.name, self.shapes[x], mod.upscale_factor, "CRD"))
        elif isinstance(mod, nn.Upsample):
            self._upsample(fx_node, path, x, mod.size, mod.scale_factor, mod.mode, mod.align_corners)
        elif isinstance(mod, nn.MaxPool2d):
            if mod.return_indices:
                raise UnsupportedOpError("MaxPool2d with return_indices=True is not supported", layer=path)
            self._pool(fx_node, path, x, "maxpool", mod.kernel_size, mod.stride, mod.padding, dilation=mod.dilation, ceil_mode=mod.ceil_mode)
        elif isinstance(mod, nn.AvgPool2d):
            self._avg_pool(fx_node, path, x, mod.kernel_size, mod.stride, mod.padding, mod.ceil_mode, mod.count_include_pad, mod.divisor_override)
        elif isinstance(mod, nn.AdaptiveAvgPool2d):
            self._adaptive_avg(fx_node, path, x, mod.output_size)
        elif isinstance(mod, nn.MaxPool1d):
            if mod.return_indices:
                raise UnsupportedOpError("MaxPool1d with return_indices=True is not supported", layer=path)
            self._pool1d(fx_node, path, x, "maxpool", mod.kernel_size, mod.stride, mod.padding, mod.dilation, mod.ceil_mode, True)
        elif isinstance(mod, nn.AvgPool1d):
            self._pool1d(fx_node, path, x, "avgpool", mod.kernel_size, mod.stride, mod.padding, 1, mod.ceil_mode, mod.count_include_pad)
        elif isinstance(mod, nn.AdaptiveAvgPool1d):
            self._adaptive_avg1d(fx_node, path, x, mod.output_size)
        else:
            return False
        return True

    def conv_function(self, fx_node, fn, name: str) -> bool:
        torch, F = self.torch, self.F
        if fn not in (torch.tanh, F.pixel_shuffle, F.interpolate, F.max_pool2d, F.avg_pool2d, F.adaptive_avg_pool2d, F.max_pool1d,
                      F.avg_pool1d, F.adaptive_avg_pool1d, torch.mean):
            return False
        x = self._input(fx_node.args[0], name)
        arg = lambda i, key, default: self._arg(fx_node, i, key, default)  # noqa: E731 - local shorthand
        if fn is torch.tanh:
            self.elementwise(fx_node, name, "tanh", x)
        elif fn is F.pixel_shuffle:
            self._add(fx_node, shuffle.make_node(name, x, fx_node.name, self.shapes[x], int(arg(1, "upscale_factor", 0)), "CRD"))
        elif fn is F.interpolate:
            if arg(6, "antialias", False):
                raise UnsupportedOpError("F.interpolate with antialias=True is not supported", layer=name,
                                         hint=resize.ADVICE)
            self._upsample(fx_node, name, x, arg(1, "size", None), arg(2, "scale_factor", None), arg(3, "mode", "nearest"),
                           arg(4, "align_corners", None))
        elif fn is F.max_pool2d:
            if arg(6, "return_indices", False):
                raise UnsupportedOpError("F.max_pool2d with return_indices=True is not supported", layer=name)
            self._pool(fx_node, name, x, "maxpool", arg(1, "kernel_size", None), arg(2, "stride", None), arg(3, "padding", 0),
                       dilation=arg(4, "dilation", 1), ceil_mode=arg(5, "ceil_mode", False))
        elif fn is F.avg_pool2d:
            self._avg_pool(fx_node, name, x, arg(1, "kernel_size", None), arg(2, "stride", None), arg(3, "padding", 0),
                           arg(4, "ceil_mode", False), arg(5, "count_include_pad", True), arg(6, "divisor_override", None))
        elif fn is F.max_pool1d:
            if arg(6, "return_indices", False):
                raise UnsupportedOpError("F.max_pool1d with return_indices=True is not supported", layer=name)
            self._pool1d(fx_node, name, x, "maxpool", arg(1, "kernel_size", None), arg(2, "stride", None), arg(3, "padding", 0),
                         arg(4, "dilation", 1), arg(5, "ceil_mode", False), True)
        elif fn is F.avg_pool1d:
            self._pool1d(fx_node, name, x, "avgpool", arg(1, "kernel_size", None), arg(2, "stride", None), arg(3, "padding", 0),
                         1, arg(4, "ceil_mode", False), arg(5, "count_include_pad", True))
        elif fn is F.adaptive_avg_pool1d:
            self._adaptive_avg1d(fx_node, name, x, arg(1, "output_size", None))
        elif fn is torch.mean:
            self._mean(fx_node, name, x, arg(1, "dim", None), arg(2, "keepdim", False), fx_node.kwargs.get("dtype"))
        else:
            self._adaptive_avg(fx_node, name, x, arg(1, "output_size", None))
        return True

    def conv_method(self, fx_node, method: str, name: str, x: str) -> bool:
        if method == "tanh":
            self.elementwise(fx_node, name, "tanh", x)
        elif method == "mean":
            arg = lambda i, key, default: self._arg(fx_node, i, key, default)  # noqa: E731 - local shorthand
            self._mean(fx_node, name, x, arg(1, "dim", None), arg(2, "keepdim", False), fx_node.kwargs.get("dtype"))
        else:
            return False
        return True

    def elementwise(self, fx_node, name: str, op: str, x: str, params=None) -> None:
        """ReLU / Tanh / PReLU: on a 1-D layer's result, computed on its (C, 1, W) view (so the fuse
        pass folds it into the convolution), else as usual."""
        if x not in self.lifted:
            self._emit(fx_node, name, op, x, params=params)
            return
        x3 = self.lifted[x]
        y3 = self._fresh_tensor(f"{fx_node.name}_image")
        self.shapes[y3] = self.shapes[x3]
        self.nodes.append(Node(self._unique(name), op, (x3,), (y3,), params=params or {}))
        self._unlift(fx_node, name, y3)

    # -- converters -------------------------------------------------------------------------------

    def _add(self, fx_node, node: Node) -> None:
        """Append a node built (and checked) by an op module; its shape must match PyTorch's."""
        shape = self._per_sample(fx_node, node.name)
        expected = _output_shape(node, self.shapes[node.inputs[0]])
        if tuple(shape) != tuple(expected):
            raise ModelError(f"PyTorch computes per-sample shape {shape}, aieflow {expected}", layer=node.name)
        self.shapes[fx_node.name] = shape
        self.nodes.append(node.evolve(name=self._unique(node.name)))

    def _conv2d(self, fx_node, path: str, x: str, mod) -> None:
        if mod.padding_mode != "zeros":
            raise UnsupportedOpError(
                f"padding_mode={mod.padding_mode!r} is not supported", layer=path, hint="use padding_mode='zeros'"
            )
        left, right, top, bottom = (int(p) for p in mod._reversed_padding_repeated_twice)
        node = conv.make_node(
            path, x, fx_node.name, self.shapes[x], self._numpy(mod.weight), None if mod.bias is None else self._numpy(mod.bias),
            stride=mod.stride, padding=(top, left, bottom, right), dilation=mod.dilation, groups=mod.groups,
        )
        self._add(fx_node, node)

    def _upsample(self, fx_node, name, x, size, scale_factor, mode, align_corners=None) -> None:
        """Nearest or bilinear upsampling by whole factors, from ``scale_factor`` or from ``size``
        (ops/resize.py); bilinear's coordinates from ``align_corners`` (PyTorch's default: False)."""
        shape = self.shapes[x]
        if len(shape) != 3:
            raise UnsupportedOpError(f"upsampling of per-sample shape {tuple(shape)}; only images (C, H, W) are "
                                     "supported", layer=name, hint=resize.ADVICE)
        if size is not None:
            hw = (size, size) if isinstance(size, int) else tuple(size)
            scale = tuple(o / i for o, i in zip(hw, shape[1:], strict=True))
        else:
            scale = scale_factor
        coord = "align_corners" if align_corners else "half_pixel"
        self._add(fx_node, resize.make_node(name, x, fx_node.name, shape, scale, str(mode), coord))

    def _pool(self, fx_node, name, x, op, kernel, stride, padding, *, dilation=1, ceil_mode=False, count_include_pad=True) -> None:
        if kernel is None:
            raise UnsupportedOpError("pooling without a kernel size", layer=name)
        stride = kernel if stride is None or (isinstance(stride, list | tuple) and not stride) else stride
        node = pool.make_node(
            name, op, x, fx_node.name, self.shapes[x], kernel, stride, _symmetric(padding, name),
            count_include_pad=bool(count_include_pad), dilation=dilation, ceil_mode=bool(ceil_mode),
        )
        self._add(fx_node, node)

    def _avg_pool(self, fx_node, name, x, kernel, stride, padding, ceil_mode, count_include_pad, divisor_override) -> None:
        if divisor_override is not None:
            raise UnsupportedOpError("AvgPool2d with divisor_override is not supported", layer=name, hint="omit divisor_override")
        self._pool(fx_node, name, x, "avgpool", kernel, stride, padding, ceil_mode=ceil_mode, count_include_pad=count_include_pad)

    def _adaptive_avg(self, fx_node, name, x, output_size) -> None:
        shape = self.shapes[x]
        size = (output_size, output_size) if isinstance(output_size, int) else tuple(output_size or ())
        full = tuple(shape[1 + i] if s is None else s for i, s in enumerate(size)) if len(shape) == 3 and len(size) == 2 else size
        if full != (1, 1):
            raise UnsupportedOpError(
                f"AdaptiveAvgPool2d to {output_size} is not supported; only global average pooling (output size 1)",
                layer=name,
                hint="use AdaptiveAvgPool2d(1), or an AvgPool2d with an explicit kernel and stride",
            )
        hw = tuple(shape[1:]) if len(shape) == 3 else (1, 1)
        self._pool(fx_node, name, x, "avgpool", hw, hw, 0)


    # -- batch normalisation (folded by batchnorm.fold at the end of the conversion) ------------

    def _batchnorm(self, fx_node, path: str, x: str, mod) -> None:
        kind = type(mod).__name__
        if path in self.training_bn:
            raise UnsupportedOpError(f"{kind} is in training mode: it would normalise each batch with its own statistics",
                                     layer=path, hint=_BN_EVAL_HINT)
        if mod.running_mean is None or mod.running_var is None:
            raise UnsupportedOpError(
                f"{kind} has no running statistics (track_running_stats=False): it normalises each batch with its "
                "own statistics even in eval mode, so it cannot be folded into the layer before it",
                layer=path, hint="train with track_running_stats=True, or remove the BatchNorm")
        c = int(mod.num_features)
        ones, zeros = np.ones(c), np.zeros(c)
        gamma = ones if mod.weight is None else self._numpy(mod.weight)
        beta = zeros if mod.bias is None else self._numpy(mod.bias)
        src = self.lifted.get(x, x)
        y = self._fresh_tensor(f"{fx_node.name}_image") if x in self.lifted else fx_node.name
        self.shapes[y] = self.shapes[src] if x in self.lifted else self._per_sample(fx_node, path)
        self.nodes.append(batchnorm.make_node(self._unique(path), src, y, c, gamma, beta, self._numpy(mod.running_mean),
                                              self._numpy(mod.running_var), float(mod.eps)))
        if x in self.lifted:
            self._unlift(fx_node, path, y)

    # -- 1-D layers on a (C, 1, W) view (sequence.py) --------------------------------------------

    def _fresh_tensor(self, base: str) -> str:
        taken = set(self.shapes) | {n.name for n in self.gm.graph.nodes}
        name, k = base, 1
        while name in taken:
            name, k = f"{base}_{k}", k + 1
        return name

    def _lift(self, x: str, name: str, what: str) -> str:
        """The (C, 1, W) view of (C, W) tensor ``x`` (a reshape, made once per tensor)."""
        if x in self.lifted:
            return self.lifted[x]
        shape = sequence.image_shape(self.shapes[x], name, what)
        y = self._fresh_tensor(f"{x}_image")
        self.shapes[y] = shape
        self.nodes.append(Node(self._unique(f"{name}_as_image"), "reshape", (x,), (y,), {"shape": shape}))
        self.lifted[x] = y
        return y

    def _unlift(self, fx_node, name: str, y3: str) -> None:
        """Give the (C, 1, W) result ``y3`` back as the module's output at PyTorch's (C, W) shape."""
        shape = self._per_sample(fx_node, name)
        c, one, w = self.shapes[y3]
        if tuple(shape) != (c, w) or one != 1:
            raise ModelError(f"PyTorch computes per-sample shape {shape}, aieflow {(c, w)}", layer=name)
        node = Node(self._unique(f"{name}_as_sequence"), "reshape", (y3,), (fx_node.name,), {"shape": tuple(shape)})
        self.shapes[fx_node.name] = tuple(shape)
        self.nodes.append(node)
        self.unlifts.add(node.name)
        self.lifted[fx_node.name] = y3

    def _add_lifted(self, fx_node, node: Node) -> None:
        """Append a node computed on a (C, 1, W) view, then its result at PyTorch's shape."""
        self.shapes[node.outputs[0]] = tuple(_output_shape(node, self.shapes[node.inputs[0]]))
        self.nodes.append(node.evolve(name=self._unique(node.name)))
        self._unlift(fx_node, node.name, node.outputs[0])

    def _conv1d(self, fx_node, path: str, x: str, mod) -> None:
        if mod.padding_mode != "zeros":
            raise UnsupportedOpError(
                f"padding_mode={mod.padding_mode!r} is not supported", layer=path, hint="use padding_mode='zeros'"
            )
        x3 = self._lift(x, path, "Conv1d")
        left, right = (int(p) for p in mod._reversed_padding_repeated_twice)
        node = conv.make_node(
            path, x3, self._fresh_tensor(f"{fx_node.name}_image"), self.shapes[x3], sequence.lift_weight(self._numpy(mod.weight)),
            None if mod.bias is None else self._numpy(mod.bias), stride=(1, int(mod.stride[0])), padding=(0, left, 0, right),
            dilation=(1, int(mod.dilation[0])), groups=mod.groups,
        )
        self._add_lifted(fx_node, node)

    def _pool1d(self, fx_node, name, x, op, kernel, stride, padding, dilation, ceil_mode, count_include_pad) -> None:
        what = {"maxpool": "MaxPool1d", "avgpool": "AvgPool1d"}[op]
        if kernel is None:
            raise UnsupportedOpError("pooling without a kernel size", layer=name)
        k = sequence.single(kernel, "kernel_size", name)
        s = k if stride is None or (isinstance(stride, list | tuple) and not stride) else sequence.single(stride, "stride", name)
        p = sequence.single(padding, "padding", name)
        x3 = self._lift(x, name, what)
        node = pool.make_node(
            name, op, x3, self._fresh_tensor(f"{fx_node.name}_image"), self.shapes[x3], (1, k), (1, s), (0, p, 0, p),
            count_include_pad=bool(count_include_pad), dilation=(1, sequence.single(dilation, "dilation", name)),
            ceil_mode=bool(ceil_mode),
        )
        self._add_lifted(fx_node, node)

    def _adaptive_avg1d(self, fx_node, name, x, output_size) -> None:
        size = output_size if isinstance(output_size, int) else tuple(output_size or ())
        if size not in (1, (1,)):
            raise UnsupportedOpError(
                f"AdaptiveAvgPool1d to {output_size} is not supported; only global average pooling (output size 1)",
                layer=name, hint="use AdaptiveAvgPool1d(1), or an AvgPool1d with an explicit kernel and stride",
            )
        self._global_average(fx_node, name, x, keepdim=True)

    def _mean(self, fx_node, name, x, dim, keepdim, dtype) -> None:
        shape = self.shapes[x]
        rank = len(shape) + 1
        advice = ("only a mean over an image's spatial dims (dim=(2, 3)) or a sequence's length (dim=2), i.e. global "
                  "average pooling, or over the tokens of [B, T, E] (dim=1) is supported")
        if dtype is not None:
            raise UnsupportedOpError(f"mean with dtype={dtype} is not supported", layer=name, hint="omit dtype")
        if dim is None or (isinstance(dim, list | tuple) and not dim):
            raise UnsupportedOpError(f"mean over every dimension (the batch included); {advice}", layer=name,
                                     hint="pass dim=(2, 3) for an image")
        dims = [dim] if isinstance(dim, int) else list(dim)
        if not all(isinstance(d, int) for d in dims):
            raise UnsupportedOpError(f"mean over dims {dim!r}; {advice}", layer=name)
        axes = sorted(d % rank for d in dims)
        if rank == 3 and axes == [1]:  # the tokens of [B, T, E] (transformer pooling)
            self._token_mean(fx_node, name, x, bool(keepdim))
            return
        if not ((rank == 4 and axes == [2, 3]) or (rank == 3 and axes == [2])):
            raise UnsupportedOpError(f"mean over dims {tuple(dims)} of a tensor of shape (N, {', '.join(map(str, shape))}); "
                                     f"{advice}", layer=name)
        self._global_average(fx_node, name, x, keepdim=bool(keepdim))

    def _global_average(self, fx_node, name: str, x: str, keepdim: bool) -> None:
        """A full-window ``avgpool`` of an image or of a sequence's (C, 1, W) view; without ``keepdim``
        a reshape to (C,) follows (what the ONNX frontend makes of ReduceMean with keepdims=0)."""
        image = len(self.shapes[x]) == 3
        src = x if image else self._lift(x, name, "global average pooling")
        shape = self.shapes[src]
        pooled = fx_node.name if image and keepdim else self._fresh_tensor(f"{fx_node.name}_pooled")
        node = pool.make_node(name, "avgpool", src, pooled, shape, shape[1:], shape[1:], (0, 0, 0, 0))
        self.shapes[pooled] = pool.output_shape(node)
        self.nodes.append(node.evolve(name=self._unique(name)))
        if image and keepdim:
            if tuple(self._per_sample(fx_node, name)) != self.shapes[pooled]:  # pragma: no cover - PyTorch's own shape
                raise ModelError(f"PyTorch computes per-sample shape {self._per_sample(fx_node, name)}", layer=name)
        elif keepdim:
            self._unlift(fx_node, name, pooled)
        else:
            out = self._per_sample(fx_node, name)
            if tuple(out) != (shape[0],):  # pragma: no cover - PyTorch's own shape
                raise ModelError(f"PyTorch computes per-sample shape {out}, aieflow {(shape[0],)}", layer=name)
            self.shapes[fx_node.name] = tuple(out)
            self.nodes.append(Node(self._unique(f"{name}_squeeze"), "reshape", (pooled,), (fx_node.name,), {"shape": tuple(out)}))


def _output_shape(node: Node, in_shape: tuple[int, ...]) -> tuple[int, ...]:
    if node.op == "conv2d":
        return conv.output_shape(node)
    if node.op == "pixel_shuffle":
        return shuffle.output_shape(in_shape, node.attrs["upscale"])
    if node.op == "resize":
        return resize.output_shape(in_shape, node.attrs["scale"])
    return pool.output_shape(node)

