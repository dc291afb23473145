"""PyTorch modules and functions of convolutional networks, for the torch converter.

``nn.Conv2d`` becomes ``conv2d`` (padding, including ``padding="same"``, as explicit per-side
amounts), ``nn.Tanh`` / ``nn.PReLU`` become ``tanh`` / ``prelu`` (the fuse pass folds them, and
``nn.ReLU``, into the convolution before them), ``nn.PixelShuffle`` ``pixel_shuffle`` (CRD), and
``nn.MaxPool2d`` / ``nn.AvgPool2d`` / ``nn.AdaptiveAvgPool2d(1)`` ``maxpool`` / ``avgpool``.
Everything the IR cannot express (dilation, groups, non-zero padding modes, ceil_mode, ...) is
rejected with the module's name and what to change (``ops/conv.py``, ``ops/pool.py``).
"""

from __future__ import annotations

from typing import Any

from ..errors import ModelError, UnsupportedOpError
from ..ir import Node
from ..ops import conv, pool, shuffle

SUPPORTED_MODULES: tuple[str, ...] = (
    "nn.Conv2d (dilation 1, groups 1, zero padding)",
    "nn.Tanh",
    "nn.PReLU (after a convolution)",
    "nn.PixelShuffle",
    "nn.MaxPool2d / nn.AvgPool2d (ceil_mode=False)",
    "nn.AdaptiveAvgPool2d(1)",
)
SUPPORTED_FUNCTIONS: tuple[str, ...] = (
    "torch.tanh / F.tanh / Tensor.tanh",
    "F.pixel_shuffle",
    "F.max_pool2d / F.avg_pool2d",
    "F.adaptive_avg_pool2d(x, 1)",
)


def _symmetric(padding, name: str) -> tuple[int, int, int, int]:
    ph, pw = conv.pair(padding, "padding", name)
    return (ph, pw, ph, pw)


class ConvMixin:
    """Conversion of the modules and functions above (see ``torch_frontend._Converter``)."""

    torch: Any
    F: Any
    shapes: dict
    nodes: list

    # -- hooks called by the converter: True when the node was handled ---------------------------

    def conv_module(self, fx_node, path: str, mod, x: str) -> bool:
        nn = self.torch.nn
        if isinstance(mod, nn.Conv2d):
            self._conv2d(fx_node, path, x, mod)
        elif isinstance(mod, nn.Tanh):
            self._emit(fx_node, path, "tanh", x)
        elif isinstance(mod, nn.PReLU):
            self._emit(fx_node, path, "prelu", x, params={"slope": self._numpy(mod.weight).reshape(-1)})
        elif isinstance(mod, nn.PixelShuffle):
            self._add(fx_node, shuffle.make_node(path, x, fx_node.name, self.shapes[x], mod.upscale_factor, "CRD"))
        elif isinstance(mod, nn.MaxPool2d):
            if mod.return_indices:
                raise UnsupportedOpError("MaxPool2d with return_indices=True is not supported", layer=path)
            self._pool(fx_node, path, x, "maxpool", mod.kernel_size, mod.stride, mod.padding, dilation=mod.dilation, ceil_mode=mod.ceil_mode)
        elif isinstance(mod, nn.AvgPool2d):
            self._avg_pool(fx_node, path, x, mod.kernel_size, mod.stride, mod.padding, mod.ceil_mode, mod.count_include_pad, mod.divisor_override)
        elif isinstance(mod, nn.AdaptiveAvgPool2d):
            self._adaptive_avg(fx_node, path, x, mod.output_size)
        else:
            return False
        return True

    def conv_function(self, fx_node, fn, name: str) -> bool:
        torch, F = self.torch, self.F
        if fn not in (torch.tanh, F.pixel_shuffle, F.max_pool2d, F.avg_pool2d, F.adaptive_avg_pool2d):
            return False
        x = self._input(fx_node.args[0], name)
        arg = lambda i, key, default: self._arg(fx_node, i, key, default)  # noqa: E731 - local shorthand
        if fn is torch.tanh:
            self._emit(fx_node, name, "tanh", x)
        elif fn is F.pixel_shuffle:
            self._add(fx_node, shuffle.make_node(name, x, fx_node.name, self.shapes[x], int(arg(1, "upscale_factor", 0)), "CRD"))
        elif fn is F.max_pool2d:
            if arg(6, "return_indices", False):
                raise UnsupportedOpError("F.max_pool2d with return_indices=True is not supported", layer=name)
            self._pool(fx_node, name, x, "maxpool", arg(1, "kernel_size", None), arg(2, "stride", None), arg(3, "padding", 0),
                       dilation=arg(4, "dilation", 1), ceil_mode=arg(5, "ceil_mode", False))
        elif fn is F.avg_pool2d:
            self._avg_pool(fx_node, name, x, arg(1, "kernel_size", None), arg(2, "stride", None), arg(3, "padding", 0),
                           arg(4, "ceil_mode", False), arg(5, "count_include_pad", True), arg(6, "divisor_override", None))
        else:
            self._adaptive_avg(fx_node, name, x, arg(1, "output_size", None))
        return True

    def conv_method(self, fx_node, method: str, name: str, x: str) -> bool:
        if method != "tanh":
            return False
        self._emit(fx_node, name, "tanh", x)
        return True

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


def _output_shape(node: Node, in_shape: tuple[int, ...]) -> tuple[int, ...]:
    if node.op == "conv2d":
        return conv.output_shape(node)
    if node.op == "pixel_shuffle":
        return shuffle.output_shape(in_shape, node.attrs["upscale"])
    return pool.output_shape(node)

