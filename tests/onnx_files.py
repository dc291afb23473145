"""Writing a PyTorch model to an ONNX file, as the CLI tests need one."""

from __future__ import annotations

import io
import warnings
from pathlib import Path

import numpy as np


def export_onnx(model, x: np.ndarray, path: Path, **options) -> None:
    """``model`` exported with the TorchScript exporter (input ``x``, output ``y``) to ``path``;
    ``options``: more ``torch.onnx.export`` arguments (``do_constant_folding=False`` keeps a
    BatchNormalization after its Conv)."""
    import torch

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        f = io.BytesIO()
        torch.onnx.export(model, (torch.from_numpy(x),), f, dynamo=False, input_names=["x"], output_names=["y"],
                          **options)
    path.write_bytes(f.getvalue())
