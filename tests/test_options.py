"""An option works for a design kind or is refused by name (issue 17, item 7; the brief's standard):
CNN designs do not take batch / top-level replicas, recurrent designs not batch / replicas;
from Python and from the CLI, where only the options the user wrote count."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from onnx_files import export_onnx

import aieflow
from aieflow.cli import main
from aieflow.errors import ConfigError
from aieflow.model_zoo import cnn_classifier, gru_classifier

IMG = np.random.default_rng(0).uniform(-1, 1, (4, 3, 32, 32)).astype(np.float32)
SEQ = np.random.default_rng(0).standard_normal((4, 5, 4)).astype(np.float32)


@pytest.mark.parametrize("key, value", [("batch", 16), ("replicas", 2)])
def test_cnn_designs_refuse_options_they_would_ignore(key, value):
    with pytest.raises(ConfigError, match=f"config option '{key}' does not apply to cnn designs"):
        aieflow.compile(cnn_classifier(), device="vck190", example_input=IMG, config={"precision": "int8", key: value})


@pytest.mark.parametrize("key, value", [("batch", 16), ("replicas", 2)])
def test_recurrent_designs_refuse_options_they_would_ignore(key, value):
    torch.manual_seed(0)
    with pytest.raises(ConfigError, match=f"config option '{key}' does not apply to recurrent designs"):
        aieflow.compile(gru_classifier(), device="vck190", example_input=SEQ, config={"precision": "int16", key: value})
    with pytest.raises(ConfigError, match=f"'{key}'"):
        aieflow.explore(gru_classifier(), device="vck190", example_input=SEQ, config={"precision": "int16", key: value})


def test_options_a_kind_takes_still_work():
    torch.manual_seed(0)
    d = aieflow.compile(gru_classifier(), device="vck190", example_input=SEQ, config={"precision": "int16", "target": "latency"})
    assert d.exploration is not None
    c = aieflow.compile(cnn_classifier(), device="vck190", example_input=IMG, config={"precision": "int8", "cnn": {"replicas": 2}})
    assert c.plan.replicas == 2


def test_the_cli_counts_only_the_options_the_user_gave(tmp_path, capsys):
    model = tmp_path / "cnn.onnx"
    export_onnx(cnn_classifier(), IMG[:1], model)
    np.save(tmp_path / "x.npy", IMG)
    cal = ["--calibration", str(tmp_path / "x.npy")]
    # --precision rewrites the config through to_json (which writes a batch): still accepted
    assert main(["compile", str(model), "--device", "vck190", "--out", str(tmp_path / "a"), "--precision", "int8", *cal]) == 0
    assert main(["compile", str(model), "--device", "vck190", "--out", str(tmp_path / "b"), "--batch", "16", *cal]) == 2
    assert "'batch' does not apply to cnn designs" in capsys.readouterr().err


@pytest.mark.parametrize("key, value", [("target", "latency"), ("target", "tiles <= 2"), ("replicas", 2),
                                        ("batch", "auto"), ("batch", [8, 16])])
def test_streamed_dense_designs_refuse_options_they_would_ignore(key, value):
    from aieflow.model_zoo import qdq_mlp

    one = qdq_mlp([32, 64], seed=1)
    cfg = {"layers": {"fc0": {"weights": "streamed"}}}
    assert aieflow.compile(one, device="vck190", config={**cfg, "batch": 16}).to_json()["performance"]["batch"] == 16
    with pytest.raises(ConfigError, match=f"config option '{key}'.* does not apply to streamed_dense designs"):
        aieflow.compile(one, device="vck190", config={**cfg, key: value})


def test_segmented_designs_refuse_a_searched_batch_by_name():
    from aieflow.model_zoo import qdq_mlp

    with pytest.raises(ConfigError, match=r"config option 'batch' \(auto\) does not apply to segmented designs"):
        aieflow.compile(qdq_mlp([32, 64, 16], seed=1), device="vck190",
                        config={"batch": "auto", "layers": {"fc0": {"weights": "streamed"}}})
