"""Model frontends: PyTorch modules and ONNX files to the aieflow float IR.

``torch`` is imported only when a PyTorch model is actually imported.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import numpy as np

from ..errors import ConfigError, ModelError
from ..ir import ImportedModel
from . import patches
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


MAX_DIM = 1 << 20  # one dimension of a tensor (batch excluded)
MAX_ELEMENTS = 1 << 24  # values of one tensor per sample
MAX_NAME = 1 << 16  # characters of a node or tensor name (names.py shortens what reaches files)


def check_imported(imported: ImportedModel) -> ImportedModel:
    """Every tensor has dimensions between 1 and :data:`MAX_DIM` and at most :data:`MAX_ELEMENTS`
    values per sample, every name at most :data:`MAX_NAME` characters and every parameter finite: a
    model file cannot ask for empty layers or for gigabytes per sample.  Then the ViT rewrites
    (``frontends/patches.py``: patch embeddings, class tokens) run on the checked graph."""
    graph = imported.graph
    producer = {t: node.name for node in graph.nodes for t in node.outputs}
    for node in graph.nodes:
        if len(node.name) > MAX_NAME:
            raise ModelError(f"a node name of {len(node.name):,} characters (limit {MAX_NAME:,})",
                             layer=node.name[:60] + "...", hint="rename the node")
        for key, value in node.params.items():
            arr = np.asarray(value)
            if arr.dtype.kind == "f" and not np.isfinite(arr).all():
                bad = "NaN" if np.isnan(arr).any() else "inf"
                raise ModelError(f"parameter '{key}' contains {bad}", layer=node.name[:200],
                                 hint="the model's weights are broken; re-export or retrain it")
    for t in graph.tensors.values():
        where = f"tensor '{t.name[:200]}'" + (f" (output of layer '{producer[t.name][:200]}')" if t.name in producer else "")
        if len(t.name) > MAX_NAME:
            raise ModelError(f"{where}: a name of {len(t.name):,} characters (limit {MAX_NAME:,})")
        if any(d < 1 for d in t.shape):
            raise ModelError(f"{where} has shape {list(t.shape)}: an empty dimension",
                             hint="every layer needs at least one input and one output value")
        if any(d > MAX_DIM for d in t.shape) or t.size > MAX_ELEMENTS:
            raise ModelError(f"{where} has shape {list(t.shape)}: more than aieflow's limits of {MAX_DIM:,} "
                             f"per dimension and {MAX_ELEMENTS:,} values per sample")
    return patches.rewrite(imported)


def import_model(model: Any, example_input: Any = None, mask_tokens: int | None = None) -> ImportedModel:
    """Import ``model``: a path to a ``.onnx`` file, an ``onnx.ModelProto`` or a ``torch.nn.Module``.

    ``example_input`` (a sample input batch or its shape, batch included) is required for PyTorch
    models and optional for ONNX models, where it fixes dimensions the model leaves dynamic.
    ``mask_tokens``: the token count of a PyTorch model's run-time key padding mask (``forward(x, mask)``)
    when it is not the input's second axis (a patch-embedded ViT); an ONNX model's mask input has its shape.
    """
    if isinstance(model, ImportedModel):  # already imported (frontends/hls4ml_frontend.py)
        return check_imported(model)
    if isinstance(model, str | os.PathLike):
        path = os.fspath(model)
        if str(path).lower().endswith(".onnx"):
            return check_imported(import_onnx(path, example_input_shape=_shape_of(example_input)))
        raise ConfigError(
            f"cannot import '{path}': expected a .onnx file (pass PyTorch models as an nn.Module "
            "from Python, or export them to ONNX)"
        )
    import onnx

    if isinstance(model, onnx.ModelProto):
        return check_imported(import_onnx(model, example_input_shape=_shape_of(example_input)))
    if _is_torch_module(model):
        if example_input is None:
            raise ConfigError("example_input is required for PyTorch models")
        return check_imported(import_torch(model, example_input, mask_tokens=mask_tokens))
    raise ConfigError(
        f"cannot import a {type(model).__module__}.{type(model).__name__}; pass a path to a .onnx "
        "file, an onnx.ModelProto or a torch.nn.Module"
    )
