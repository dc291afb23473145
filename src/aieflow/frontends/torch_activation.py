"""PyTorch activations and softmax, for the torch converter: each becomes an ``activation`` node
(``attrs["function"]``, ``ops/activation.py``) or a ``softmax`` node over the last axis.
``nn.ReLU`` / ``nn.Tanh`` keep their own ops (the fuse pass folds them into the Dense / Conv before
them, or makes them ``activation`` layers)."""

from __future__ import annotations

from typing import Any

from ..errors import UnsupportedOpError
from ..ops.activation import float32

# PyTorch's SELU constants (torch.nn.functional.selu); float32() rounds them as the model computes
_SELU_ALPHA, _SELU_GAMMA = 1.6732632423543772, 1.0507009873554805

SUPPORTED_MODULES: tuple[str, ...] = (
    "nn.Sigmoid",
    "nn.Softmax (last dimension)",
    "nn.GELU",
    "nn.LeakyReLU",
    "nn.ELU",
    "nn.SELU",
    "nn.Hardsigmoid",
    "nn.Hardswish",
    "nn.SiLU",
    "nn.ReLU6 / nn.Hardtanh",
)
SUPPORTED_FUNCTIONS: tuple[str, ...] = (
    "torch.sigmoid / F.sigmoid / Tensor.sigmoid",
    "torch.softmax / F.softmax / Tensor.softmax (last dimension)",
    "F.gelu / F.leaky_relu / F.elu / F.selu / F.hardsigmoid / F.hardswish / F.silu / F.relu6 / F.hardtanh",
    "torch.clamp / torch.clip / Tensor.clamp / Tensor.clip (constant bounds)",
)


class ActivationMixin:
    """Conversion of the modules and functions above (see ``torch_frontend._Converter``)."""

    torch: Any
    F: Any
    shapes: dict

    def activation_module(self, fx_node, path: str, mod, x: str) -> bool:
        nn = self.torch.nn
        if isinstance(mod, nn.Sigmoid):
            self._act(fx_node, path, x, "sigmoid")
        elif isinstance(mod, nn.Softmax):
            self._softmax(fx_node, path, x, mod.dim)
        elif isinstance(mod, nn.GELU):
            self._act(fx_node, path, x, "gelu_tanh" if mod.approximate == "tanh" else "gelu")
        elif isinstance(mod, nn.LeakyReLU):
            self._act(fx_node, path, x, "leaky_relu", alpha=float(mod.negative_slope))
        elif isinstance(mod, nn.ELU):
            self._act(fx_node, path, x, "elu", alpha=float(mod.alpha))
        elif isinstance(mod, nn.SELU):
            self._act(fx_node, path, x, "selu", alpha=_SELU_ALPHA, gamma=_SELU_GAMMA)
        elif isinstance(mod, nn.Hardsigmoid):
            self._act(fx_node, path, x, "hard_sigmoid", alpha=1 / 6, beta=0.5)
        elif isinstance(mod, nn.Hardswish):
            self._act(fx_node, path, x, "hard_swish")
        elif isinstance(mod, nn.SiLU):
            self._act(fx_node, path, x, "silu")
        elif isinstance(mod, nn.Hardtanh):  # nn.ReLU6 is a Hardtanh(0, 6)
            self._act(fx_node, path, x, "clip", min=float(mod.min_val), max=float(mod.max_val))
        else:
            return False
        return True

    def activation_function(self, fx_node, fn, name: str) -> bool:
        torch, F = self.torch, self.F
        arg = lambda i, key, default: self._arg(fx_node, i, key, default)  # noqa: E731 - local shorthand
        simple = {torch.sigmoid: "sigmoid", F.sigmoid: "sigmoid", F.hardswish: "hard_swish", F.silu: "silu"}
        if fn in simple:
            self._act(fx_node, name, self._input(fx_node.args[0], name), simple[fn])
        elif fn in (torch.softmax, F.softmax):
            self._softmax(fx_node, name, self._input(fx_node.args[0], name), arg(1, "dim", None))
        elif fn is F.gelu:
            approximate = arg(1, "approximate", "none")
            self._act(fx_node, name, self._input(fx_node.args[0], name), "gelu_tanh" if approximate == "tanh" else "gelu")
        elif fn is F.leaky_relu:
            self._act(fx_node, name, self._input(fx_node.args[0], name), "leaky_relu",
                      alpha=float(arg(1, "negative_slope", 0.01)))
        elif fn is F.elu:
            self._act(fx_node, name, self._input(fx_node.args[0], name), "elu", alpha=float(arg(1, "alpha", 1.0)))
        elif fn is F.selu:
            self._act(fx_node, name, self._input(fx_node.args[0], name), "selu", alpha=_SELU_ALPHA, gamma=_SELU_GAMMA)
        elif fn is F.hardsigmoid:
            self._act(fx_node, name, self._input(fx_node.args[0], name), "hard_sigmoid", alpha=1 / 6, beta=0.5)
        elif fn is F.relu6:
            self._act(fx_node, name, self._input(fx_node.args[0], name), "clip", min=0.0, max=6.0)
        elif fn is F.hardtanh:
            self._act(fx_node, name, self._input(fx_node.args[0], name), "clip",
                      min=float(arg(1, "min_val", -1.0)), max=float(arg(2, "max_val", 1.0)))
        elif fn in (torch.clamp, torch.clip):
            self._clamp(fx_node, name, self._input(fx_node.args[0], name))
        else:
            return False
        return True

    def activation_method(self, fx_node, method: str, name: str, x: str) -> bool:
        if method == "sigmoid":
            self._act(fx_node, name, x, "sigmoid")
        elif method == "softmax":
            self._softmax(fx_node, name, x, self._arg(fx_node, 1, "dim", None))
        elif method in ("clamp", "clip"):
            self._clamp(fx_node, name, x)
        else:
            return False
        return True

    # -- converters -------------------------------------------------------------------------------

    def _act(self, fx_node, name: str, x: str, function: str, **params: float) -> None:
        # parameters as the float32 the model computes with (and ONNX stores)
        self._emit(fx_node, name, "activation", x, {"function": function, **float32(params)})

    def _clamp(self, fx_node, name: str, x: str) -> None:
        lo, hi = self._arg(fx_node, 1, "min", None), self._arg(fx_node, 2, "max", None)
        for v, what in ((lo, "min"), (hi, "max")):
            if v is not None and not isinstance(v, int | float):
                raise UnsupportedOpError(f"'{name}' (clamp) has a computed {what} bound; only constant bounds map",
                                         layer=name, hint="clamp to numbers, e.g. x.clamp(0, 6)")
        if lo is None and hi is None:
            raise UnsupportedOpError(f"'{name}' (clamp) has neither bound", layer=name)
        if lo is not None and hi is None and float(lo) == 0.0:
            self._emit(fx_node, name, "relu", x)
            return
        big = 3.0e38
        self._act(fx_node, name, x, "clip", min=-big if lo is None else float(lo), max=big if hi is None else float(hi))

    def _softmax(self, fx_node, name: str, x: str, dim) -> None:
        rank = len(self.shapes[x]) + 1  # with the batch dimension
        if dim is None or not isinstance(dim, int) or dim % rank != rank - 1 or rank < 2:
            raise UnsupportedOpError(
                f"'{name}' (softmax) normalises dimension {dim} of a rank-{rank} tensor; aieflow maps a softmax "
                "over the last dimension", layer=name, hint="use dim=-1 (transpose first if needed)")
        self._emit(fx_node, name, "softmax", x, {"axis": -1, "features": int(self.shapes[x][-1])})
