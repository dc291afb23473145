"""Shared test parameters, and a small design of every kind (``build_design``)."""

from __future__ import annotations

from pathlib import Path

# Every (device, precision) pair the compiler supports: templates, plans and C++ are checked on all.
GENERATION_PRECISIONS = [
    ("vck190", "int8"),
    ("vck190", "int16"),
    ("vck190", "a16w8"),
    ("vck190", "fp32"),
    ("vek280", "int8"),
    ("vek280", "int16"),
    ("vek280", "a16w8"),
    ("vek280", "bf16"),
    ("vek385", "int8"),
    ("vek385", "int16"),
    ("vek385", "bf16"),
]

THESIS_YAML = Path(__file__).resolve().parents[1] / "examples" / "espcn" / "thesis.yaml"

DESIGN_KINDS = {  # build_design name -> (design.json kind, class name)
    "chain-vck190": ("chain", "Design"), "chain-vek280": ("chain", "Design"), "dag": ("dag", "DagDesign"),
    "cnn": ("cnn", "CnnDesign"), "cnn-thesis": ("cnn", "CnnDesign"), "cnn-residual": ("cnn", "CnnDesign"),
    "recurrent": ("recurrent", "RecurrentDesign"),
    "recurrent-stack": ("recurrent", "RecurrentDesign"), "streamed-dense": ("streamed_dense", "StreamedDenseDesign"),
    "segmented": ("segmented", "SegmentedDesign"), "gemm-vck190": ("gemm", "GemmDesign"),
    "gemm-vek280": ("gemm", "GemmDesign"), "cnn-rows": ("cnn", "CnnDesign"),
    "recurrent-compact": ("recurrent", "RecurrentDesign"), "recurrent-grid": ("recurrent", "RecurrentDesign"),
}


def design_case(kind):
    """(model, float samples, device, config) of a small design of ``kind`` (not a GEMM)."""
    import numpy as np
    import torch
    import yaml

    from aieflow.model_zoo import (
        cnn_classifier,
        espcn,
        gru_classifier,
        qdq_mlp,
        residual_cnn,
        residual_mlp,
        torch_mlp,
    )

    rng = np.random.default_rng(0)
    torch.manual_seed(0)
    x16 = rng.standard_normal((16, 16)).astype(np.float32)
    seq = rng.standard_normal((8, 5, 4)).astype(np.float32)
    img = rng.uniform(-1, 1, (4, 3, 32, 32)).astype(np.float32)
    frames = rng.uniform(0, 1, (2, 1, 16, 16)).astype(np.float32)
    # built all at once, in this order, so each model's seeded weights are those it always had
    cases = {
        "chain-vck190": (qdq_mlp([16, 24, 8]), x16, "vck190", {"batch": 8}),
        "chain-vek280": (torch_mlp([16, 32, 8]), x16, "vek280", {"precision": "int8", "batch": 8, "replicas": 2}),
        "dag": (residual_mlp(), x16, "vek280", {"precision": "int16", "batch": 8}),
        "cnn": (cnn_classifier(), img, "vck190", {"precision": "int8"}),
        "cnn-thesis": (espcn(), frames, "vck190", yaml.safe_load(THESIS_YAML.read_text())),
        "cnn-residual": (residual_cnn(relu_after_add=True), img[:, :, :8, :8], "vek280", {"precision": "int8"}),
        "recurrent": (gru_classifier(), seq, "vck190", {"precision": "int16"}),
        "recurrent-stack": (gru_classifier(layers=2), seq, "vek280", {"precision": "int16"}),
        "streamed-dense": (torch_mlp([64, 16]), rng.standard_normal((16, 64)).astype(np.float32), "vck190",
                           {"precision": "int8", "layers": {"0": {"weights": "streamed"}}}),
        "segmented": (torch_mlp([16, 32, 8]), x16, "vck190",
                      {"precision": "int8", "layers": {"0": {"weights": "streamed"}}}),
        "cnn-rows": (cnn_classifier(), img, "vck190", {"precision": "int8", "cnn": {"mapping": "rows"}}),
        "recurrent-compact": (gru_classifier(), seq, "vck190",
                              {"precision": "int16", "layers": {"rnn": {"mapping": {"distribution": "compact"}}}}),
        "recurrent-grid": (gru_classifier(), seq, "vek280",
                           {"precision": "int16", "layers": {"rnn": {"mapping": {"distribution": "grid", "chains": 2}}}}),
    }
    return cases[kind]


def build_design(kind):
    """(design, float samples or None for a GEMM) of ``kind``, a key of :data:`DESIGN_KINDS`."""
    import aieflow

    if kind == "gemm-vck190":
        return aieflow.gemm(256, 64, 128, "int8", "vck190", 4, "best"), None
    if kind == "gemm-vek280":
        return aieflow.gemm(256, 64, 128, "int8", "vek280", 2, "best"), None
    model, x, device, config = design_case(kind)
    return aieflow.compile(model, device=device, example_input=x[:2], calibration=x, config=config), x


def refused(call, *words):
    """``call()`` raises an AieflowError whose text holds each of ``words``; returns that text."""
    import pytest

    from aieflow.errors import AieflowError

    with pytest.raises(AieflowError) as e:
        call()
    for w in words:
        assert w in str(e.value), str(e.value)
    return str(e.value)
