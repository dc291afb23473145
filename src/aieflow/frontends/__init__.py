"""Model frontends: PyTorch modules and ONNX files to the aieflow float IR.

``torch`` is imported only when a PyTorch model is actually imported.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import numpy as np

from ..errors import ConfigError
from ..ir import ImportedModel
from .onnx_frontend import SUPPORTED_ONNX_OPS, import_onnx
from .torch_frontend import import_torch

__all__ = ["SUPPORTED_ONNX_OPS", "import_model", "import_onnx", "import_torch"]


def _shape_of(example_input: Any) -> tuple[int, ...] | None:
    """The shape of an example input given as an array/tensor or as a shape tuple."""
    if example_input is None:
        return None
    shape = getattr(example_input, "shape", None)
    if shape is not None:
        return tuple(int(d) for d in shape)
    if isinstance(example_input, tuple | list) and all(
        isinstance(d, int | np.integer) and not isinstance(d, bool) for d in example_input
    ):
        return tuple(int(d) for d in example_input)
    raise ConfigError(
        "example_input must be an array or tensor, or a shape tuple (batch included), got "
        f"{type(example_input).__name__}"
    )


def _is_torch_module(model: Any) -> bool:
    torch = sys.modules.get("torch")  # a module cannot exist unless torch is already imported
    return torch is not None and isinstance(model, torch.nn.Module)


def import_model(model: Any, example_input: Any = None) -> ImportedModel:
    """Import ``model``: a path to a ``.onnx`` file, an ``onnx.ModelProto`` or a ``torch.nn.Module``.

    ``example_input`` (a sample input batch or its shape, batch included) is required for PyTorch
    models and optional for ONNX models, where it fixes dimensions the model leaves dynamic.
    """
    if isinstance(model, str | os.PathLike):
        path = os.fspath(model)
        if str(path).lower().endswith(".onnx"):
            return import_onnx(path, example_input_shape=_shape_of(example_input))
        raise ConfigError(
            f"cannot import '{path}': expected a .onnx file (pass PyTorch models as an nn.Module "
            "from Python, or export them to ONNX)"
        )
    import onnx

    if isinstance(model, onnx.ModelProto):
        return import_onnx(model, example_input_shape=_shape_of(example_input))
    if _is_torch_module(model):
        if example_input is None:
            raise ConfigError("example_input is required for PyTorch models")
        return import_torch(model, example_input)
    raise ConfigError(
        f"cannot import a {type(model).__module__}.{type(model).__name__}; pass a path to a .onnx "
        "file, an onnx.ModelProto or a torch.nn.Module"
    )
