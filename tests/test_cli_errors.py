"""CLI behaviour and bad input: clear errors, non-zero exit, nothing half-written."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import aieflow
from aieflow.cli import main
from aieflow.model_zoo import qdq_mlp


def run_cli(*args: str, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "aieflow.cli", *args], capture_output=True, text=True, cwd=cwd)


@pytest.fixture
def qdq_file(tmp_path):
    path = tmp_path / "mlp.onnx"
    onnx.save(qdq_mlp([20, 16, 5], seed=0), path)
    return path


def listing(path):
    return sorted(str(p.relative_to(path)) for p in path.rglob("*"))


def test_devices_lists_all_three_with_facts(capsys):
    assert main(["devices"]) == 0
    out = capsys.readouterr().out
    for key, part in (("vck190", "xcvc1902"), ("vek280", "xcve2802"), ("vek385", "2ve3858")):
        assert key in out and part in out
    assert "50 x 8 = 400" in out and "38 x 8 = 304" in out
    assert main(["devices", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["vek280"]["macs_per_cycle"]["i8xi8"] == 256


def test_compile_and_predict_cli(tmp_path, qdq_file):
    x = (np.random.default_rng(0).standard_normal((50, 20)) * 4).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    out = tmp_path / "d"
    r = run_cli("compile", str(qdq_file), "--device", "vek280", "--out", str(out), "--input", str(tmp_path / "x.npy"))
    assert r.returncode == 0, r.stderr
    assert "fc0" in r.stdout and "compute tiles" in r.stdout
    assert (out / "design.json").is_file() and (out / "project" / "src" / "graph.h").is_file()
    r = run_cli("predict", str(out), "--input", str(tmp_path / "x.npy"), "--output", str(tmp_path / "y.npy"))
    assert r.returncode == 0, r.stderr
    y = np.load(tmp_path / "y.npy")
    np.testing.assert_array_equal(y, aieflow.load(out).predict(x))
    r = run_cli("predict", str(out), "--input", str(tmp_path / "x.npy"), "--output", str(tmp_path / "yr.npy"), "--raw")
    assert r.returncode == 0
    assert np.load(tmp_path / "yr.npy").dtype.kind == "i"
    r = run_cli("report", str(out))
    assert r.returncode == 0 and "fc1" in r.stdout


def test_existing_output_needs_force_and_is_left_untouched(tmp_path, qdq_file):
    out = tmp_path / "d"
    out.mkdir()
    (out / "mine.txt").write_text("user data")
    r = run_cli("compile", str(qdq_file), "--out", str(out))
    assert r.returncode != 0
    assert "already exists" in r.stderr and "--force" in r.stderr
    assert "Traceback" not in r.stderr
    assert listing(out) == ["mine.txt"]
    r = run_cli("compile", str(qdq_file), "--out", str(out), "--force", "--quiet")  # not a design: kept
    assert r.returncode == 2 and "not an aieflow design" in r.stderr, r.stderr
    assert listing(out) == ["mine.txt"]
    (out / "mine.txt").unlink()
    r = run_cli("compile", str(qdq_file), "--out", str(out), "--force", "--quiet")  # an empty directory is replaced
    assert r.returncode == 0, r.stderr
    r = run_cli("compile", str(qdq_file), "--out", str(out), "--force", "--quiet")  # and so is a design
    assert r.returncode == 0, r.stderr
    assert (out / "design.json").is_file()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no temp dirs or lock left


def _bad_cases(tmp_path):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 8])
    w = numpy_helper.from_array(np.ones((8, 8), dtype=np.float32), "w")
    sig = helper.make_model(
        helper.make_graph(
            [helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"), helper.make_node("Softsign", ["h"], ["y"], name="my_softsign")],
            "g", [x], [y], [w],
        ),
        opset_imports=[helper.make_opsetid("", 17)],
    )
    xd = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "features"])
    dyn = helper.make_model(
        helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")], "g", [xd], [y], [w]),
        opset_imports=[helper.make_opsetid("", 17)],
    )
    paths = {}
    for name, m in (("softsign", sig), ("dynamic", dyn)):
        paths[name] = tmp_path / f"{name}.onnx"
        onnx.save(m, paths[name])
    paths["corrupt"] = tmp_path / "corrupt.onnx"
    paths["corrupt"].write_bytes(b"\x08\x07garbage that is not a protobuf" * 10)
    huge = qdq_mlp([4096, 4096], seed=0)
    paths["huge"] = tmp_path / "huge.onnx"
    onnx.save(huge, paths["huge"])
    paths["resident"] = tmp_path / "resident.json"
    paths["resident"].write_text('{"layers": {"fc0": {"weights": "resident"}}}')
    return paths


@pytest.mark.parametrize(
    "case,extra,expect",
    [
        ("softsign", [], ["my_softsign", "Softsign"]),
        ("dynamic", [], ["features"]),
        ("corrupt", [], ["cannot read ONNX"]),
        # every device streams it (gemm/dense.py; VEK280 / VEK385 on the memory-tile GEMM) unless the
        # weights are held resident
        ("huge", ["--device", "vek280", "--config", "{resident}"], ["do not fit", "hint"]),
        ("missing", [], ["does not exist"]),
    ],
)
def test_bad_models_fail_clearly_and_write_nothing(tmp_path, case, extra, expect):
    paths = _bad_cases(tmp_path)
    model = str(paths.get(case, tmp_path / "nope.onnx"))
    out = tmp_path / "out"
    r = run_cli("compile", model, "--out", str(out), *(e.format(resident=paths["resident"]) for e in extra))
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert "Traceback" not in r.stderr and "\nerror: " in "\n" + r.stderr
    for text in expect:
        assert text in r.stderr, r.stderr
    assert not out.exists()
    assert not any(p.name.startswith(".out") for p in tmp_path.iterdir())


def test_invalid_overrides_and_config(tmp_path, qdq_file):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("layers:\n  fc0:\n    parallelism: {cas_len: 0}\n")
    r = run_cli("compile", str(qdq_file), "--out", str(tmp_path / "o"), "--config", str(cfg))
    assert r.returncode == 2 and "cas_len must be a positive integer" in r.stderr
    cfg.write_text("precison: int8\n")
    r = run_cli("compile", str(qdq_file), "--out", str(tmp_path / "o"), "--config", str(cfg))
    assert r.returncode == 2 and "unknown config key(s) precison" in r.stderr
    cfg.write_text("layers:\n  fc0:\n    output: fixed<8,3,RND_CONV,SAT_ZERO>\n")
    r = run_cli("compile", str(qdq_file), "--out", str(tmp_path / "o"), "--config", str(cfg))
    assert r.returncode == 2 and "SAT_ZERO" in r.stderr
    cfg.write_text(json.dumps({"precision": "int4"}))
    os.rename(cfg, tmp_path / "c.json")
    r = run_cli("compile", str(qdq_file), "--out", str(tmp_path / "o"), "--config", str(tmp_path / "c.json"))
    assert r.returncode == 2 and "unknown precision 'int4'" in r.stderr
    r = run_cli("compile", str(qdq_file), "--out", str(tmp_path / "o"), "--device", "vck999")
    assert r.returncode == 2 and "unknown device" in r.stderr
    assert not (tmp_path / "o").exists()


def test_unknown_layer_name_in_config_is_reported(qdq_file):
    with pytest.raises(aieflow.AieflowError, match="no_such_layer"):
        aieflow.compile(str(qdq_file), device="vek280", config={"layers": {"no_such_layer": {"precision": "int8"}}})


def test_precision_not_on_generation_is_reported():
    from aieflow.model_zoo import torch_mlp

    net = torch_mlp([8, 4])
    x = np.zeros((8, 8), dtype=np.float32)
    with pytest.raises(aieflow.AieflowError, match="fp32 is not available on VEK280"):
        aieflow.compile(net, device="vek280", example_input=x, config={"precision": "fp32"})
    with pytest.raises(aieflow.AieflowError, match="needs calibration data"):
        aieflow.compile(_float_onnx(), device="vek280")


def _float_onnx():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])
    w = numpy_helper.from_array(np.ones((8, 4), dtype=np.float32), "w")
    return helper.make_model(
        helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")], "g", [x], [y], [w]),
        opset_imports=[helper.make_opsetid("", 17)],
    )


def test_predict_input_shape_is_checked(tmp_path, qdq_file):
    d = aieflow.compile(str(qdq_file), device="vek280")
    with pytest.raises(aieflow.AieflowError, match=r"expects \(N, 20\)"):
        d.predict(np.zeros((4, 21), dtype=np.float32))
    with pytest.raises(aieflow.AieflowError, match="NaN"):
        d.predict(np.full((1, 20), np.nan, dtype=np.float32))
