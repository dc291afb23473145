"""Bounded resources and hostile inputs (issue 16): every one ends in an AieflowError that names
the file / key / value and the limit, quickly and without exhausting memory."""

from __future__ import annotations

import time

import onnx
import pytest
from test_cli_errors import run_cli

from aieflow.config import load_config_file
from aieflow.errors import ConfigError
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
