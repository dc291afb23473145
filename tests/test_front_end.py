"""The front end (import, fuse, quantise) runs once per ``aieflow.compile`` / ``explore``, whatever
path maps the model (issue 17, item 1): counted at the frontends' entry points."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import aieflow
import aieflow.frontends as frontends
from aieflow.model_zoo import cnn_classifier, gru_classifier, qdq_mlp, residual_mlp, torch_mlp


@pytest.fixture
def imports(monkeypatch):
    """How often a model was imported (ONNX or torch) since the test began."""
    calls = []
    for name in ("import_onnx", "import_torch"):
        real = getattr(frontends, name)

        def counted(*args, _real=real, _name=name, **kwargs):
            calls.append(_name)
            return _real(*args, **kwargs)

        monkeypatch.setattr(frontends, name, counted)
    return calls




def _cases():
    rng = np.random.default_rng(0)
    torch.manual_seed(0)
    x16 = rng.standard_normal((16, 16)).astype(np.float32)
    return {
        "chain-onnx": (qdq_mlp([16, 24, 8]), x16, "vek280", {"batch": 8}, "Design"),
        "chain-torch": (torch_mlp([16, 24, 8]), x16, "vck190", {"precision": "int8"}, "Design"),
        "chain-target": (torch_mlp([16, 24, 8]), x16, "vek280", {"precision": "int8", "target": "latency"}, "Design"),
        "dag": (residual_mlp(), x16, "vek280", {"precision": "int8", "batch": 8}, "DagDesign"),
        "cnn": (cnn_classifier(), rng.uniform(-1, 1, (4, 3, 32, 32)).astype(np.float32), "vck190",
                {"precision": "int8"}, "CnnDesign"),
        "recurrent": (gru_classifier(), rng.standard_normal((4, 5, 4)).astype(np.float32), "vck190",
                      {"precision": "int16"}, "RecurrentDesign"),
        "streamed": (torch_mlp([16, 32, 8]), x16, "vck190", {"precision": "int8", "layers": {"0": {"weights": "streamed"}}},
                     "SegmentedDesign"),
    }


@pytest.mark.parametrize("case", list(_cases()))
def test_compile_imports_the_model_once(case, imports):
    model, x, device, config, kind = _cases()[case]
    d = aieflow.compile(model, device=device, example_input=x[:4], calibration=x, config=config)
    assert type(d).__name__ == kind
    assert len(imports) == 1, imports


def test_a_chain_that_falls_back_to_streamed_weights_imports_once(imports):
    x = np.random.default_rng(1).standard_normal((8, 4096)).astype(np.float32)
    d = aieflow.compile(torch_mlp([4096, 4096, 16]), device="vck190", example_input=x[:4], calibration=x,
                        config={"precision": "int8"})
    assert type(d).__name__ in ("SegmentedDesign", "StreamedDenseDesign")
    assert len(imports) == 1, imports


@pytest.mark.parametrize("case", ["chain-target", "dag", "recurrent"])
def test_explore_imports_the_model_once(case, imports):
    model, x, device, config, _ = _cases()[case]
    aieflow.explore(model, device=device, example_input=x[:4], calibration=x, config=config)
    assert len(imports) == 1, imports
