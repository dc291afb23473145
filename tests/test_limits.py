"""Bounded resources and hostile inputs (issue 16): every one ends in an AieflowError that names
the file / key / value and the limit, quickly and without exhausting memory."""

from __future__ import annotations

import math
import time

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from test_cli_errors import run_cli

import aieflow
from aieflow.config import load_config_file
from aieflow.errors import ConfigError, ModelError
from aieflow.model_zoo import qdq_mlp


@pytest.fixture
def qdq_file(tmp_path):
    path = tmp_path / "mlp.onnx"
    onnx.save(qdq_mlp([20, 16, 5], seed=0), path)
    return path


BOMB = "a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n" + "".join(
    f"{c}: &{c} [{', '.join([f'*{p}'] * 9)}]\n" for p, c in zip("abcdefgh", "bcdefghi", strict=True)
)


def test_yaml_alias_bomb_is_refused_quickly(tmp_path):
    cfg = tmp_path / "bomb.yaml"
    cfg.write_text(BOMB)
    assert len(BOMB) < 1024
    start = time.perf_counter()
    with pytest.raises(ConfigError, match=r"bomb\.yaml' line 1: YAML anchors and aliases .* not allowed"):
        load_config_file(cfg)
    assert time.perf_counter() - start < 1.0


def test_yaml_alias_in_a_plain_config_is_refused(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("precision: &p int8\nlayers:\n  fc0: {precision: *p}\n")
    with pytest.raises(ConfigError, match="anchors and aliases"):
        load_config_file(cfg)
    cfg.write_text("precision: int8\nlayers:\n  fc0: {precision: int16}\n")
    assert load_config_file(cfg).layer("fc0").precision == "int16"


def test_config_that_is_not_utf8_or_huge(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_bytes(b"precision: int8\n# caf\xe9\n")
    with pytest.raises(ConfigError, match=r"c\.yaml' is not UTF-8 text"):
        load_config_file(cfg)
    cfg.write_bytes(b"#" * (2 << 20))
    with pytest.raises(ConfigError, match="at most 1,048,576 bytes"):
        load_config_file(cfg)


def test_bad_config_via_cli_exits_2(tmp_path, qdq_file):
    cfg = tmp_path / "c.yaml"
    cfg.write_bytes(b"precision: \xff\n")
    r = run_cli("compile", str(qdq_file), "--out", str(tmp_path / "o"), "--config", str(cfg))
    assert r.returncode == 2 and "not UTF-8" in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert not (tmp_path / "o").exists()


def _external_model(tmp_path, rows=20):
    """The qdq MLP saved with every initializer in ``w.bin`` next to the model."""
    path = tmp_path / "ext.onnx"
    onnx.save(qdq_mlp([rows, 16, 5], seed=0), path, save_as_external_data=True, all_tensors_to_one_file=True,
              location="w.bin", size_threshold=0)
    return path


def test_external_data_loads_and_compiles(tmp_path):
    path = _external_model(tmp_path)
    assert (tmp_path / "w.bin").stat().st_size > 400
    d = aieflow.compile(str(path), device="vek280")
    ref = aieflow.compile(qdq_mlp([20, 16, 5], seed=0), device="vek280")
    x = np.random.default_rng(0).standard_normal((4, 20)).astype(np.float32)
    np.testing.assert_array_equal(d.predict(x), ref.predict(x))


def test_external_data_shorter_than_its_tensor(tmp_path):
    path = _external_model(tmp_path)
    data = (tmp_path / "w.bin").read_bytes()
    (tmp_path / "w.bin").write_bytes(data[: len(data) // 2])
    with pytest.raises(ModelError, match=r"external data file 'w\.bin' holds .* needs"):
        aieflow.compile(str(path), device="vek280")


def test_external_data_length_not_matching_the_shape(tmp_path):
    path = _external_model(tmp_path)
    m = onnx.load(path, load_external_data=False)
    big = max(m.graph.initializer, key=lambda t: math.prod(t.dims))
    for e in big.external_data:
        if e.key == "length":
            e.value = str(int(e.value) + 4)
    onnx.save(m, path)
    with pytest.raises(ModelError, match=f"tensor '{big.name}': external data length .* does not match its shape"):
        aieflow.compile(str(path), device="vek280")


def test_sparse_40_gb_external_data_is_refused_without_reading(tmp_path):
    w = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[100_000, 100_000])
    w.data_location = TensorProto.EXTERNAL
    w.external_data.add(key="location", value="big.bin")
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 100_000])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 100_000])
    m = helper.make_model(helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")], "g", [x], [y], [w]),
                          opset_imports=[helper.make_opsetid("", 17)])
    path = tmp_path / "big.onnx"
    path.write_bytes(m.SerializeToString())
    with open(tmp_path / "big.bin", "wb") as f:
        f.truncate(40_000_000_000)  # sparse: no disk used
    start = time.perf_counter()
    with pytest.raises(ModelError, match=r"tensor 'w': the model's external data exceeds 4,294,967,296 bytes") as e:
        aieflow.compile(str(path), device="vek280")
    assert "AIEFLOW_MAX_EXTERNAL_DATA" in str(e.value)
    assert time.perf_counter() - start < 2.0


def test_external_data_limit_can_be_lowered_and_raised(tmp_path, monkeypatch):
    path = _external_model(tmp_path)
    monkeypatch.setenv("AIEFLOW_MAX_EXTERNAL_DATA", "100")
    with pytest.raises(ModelError, match="exceeds 100 bytes"):
        aieflow.compile(str(path), device="vek280")
    monkeypatch.setenv("AIEFLOW_MAX_EXTERNAL_DATA", "lots")
    with pytest.raises(ConfigError, match="AIEFLOW_MAX_EXTERNAL_DATA='lots' is not a number of bytes"):
        aieflow.compile(str(path), device="vek280")
    monkeypatch.setenv("AIEFLOW_MAX_EXTERNAL_DATA", str(10**6))
    assert aieflow.compile(str(path), device="vek280")


@pytest.fixture
def saved_design(tmp_path):
    out = tmp_path / "d"
    aieflow.compile(qdq_mlp([20, 16, 5], seed=0), device="vek280").save(out)
    return out


@pytest.mark.parametrize(
    "args,expect",
    [
        (["--samples", "1000000000"], "1,000,000,000 samples is more than the limit of 1,000,000"),
        (["--seed", "-1"], "--seed must be a non-negative integer, got -1"),
    ],
)
def test_verify_samples_and_seed_are_bounded(saved_design, args, expect):
    start = time.perf_counter()
    r = run_cli("verify", str(saved_design), *args)
    assert r.returncode == 2 and expect in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert time.perf_counter() - start < 30


def test_verification_inputs_limits_from_the_api():
    from aieflow.numerics.types import parse_type
    from aieflow.verify import verification_inputs

    t = parse_type("fixed<8,4>")
    with pytest.raises(ConfigError, match="more than the limit of 16,384 for this design"):
        verification_inputs(t, (8192,), 20_000)
    with pytest.raises(ConfigError, match="seed must be a non-negative integer, got -1"):
        verification_inputs(t, (4,), 10, seed=-1)
    with pytest.raises(ConfigError, match="samples must be a positive integer, got 2.5"):
        verification_inputs(t, (4,), 2.5)
    assert verification_inputs(t, (4,), 10, seed=3).shape == (10, 4)
