"""Writing a PyTorch model to an ONNX file, as the CLI tests need one."""

from __future__ import annotations

import io
import warnings
from pathlib import Path

import numpy as np


def export_onnx(model, x: np.ndarray, path: Path) -> None:
    """``model`` exported with the TorchScript exporter (input ``x``, output ``y``) to ``path``."""
    import torch

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        f = io.BytesIO()
        torch.onnx.export(model, (torch.from_numpy(x),), f, dynamo=False, input_names=["x"], output_names=["y"])
    path.write_bytes(f.getvalue())
