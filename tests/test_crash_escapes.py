"""Inputs that used to end in an internal error (exit 3) or a misleading message (issue 16): each is
now an AieflowError naming the layer / file and what to change, and the CLI exits 2."""

from __future__ import annotations

import shutil

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from test_cli_errors import run_cli

import aieflow
from aieflow.errors import ConfigError, ModelError, PlanError
from aieflow.model_zoo import qdq_mlp


def _model(nodes, inits, in_shape, out_shape):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", *in_shape])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", *out_shape])
    return helper.make_model(helper.make_graph(nodes, "g", [x], [y], inits), opset_imports=[helper.make_opsetid("", 17)])


def _cal(*shape):
    return np.random.default_rng(0).standard_normal((16, *shape)).astype(np.float32)


@pytest.fixture
def files(tmp_path):
    onnx.save(qdq_mlp([20, 16, 5], seed=0), tmp_path / "m.onnx")
    np.save(tmp_path / "x.npy", _cal(20))
    aieflow.compile(qdq_mlp([20, 16, 5], seed=0), device="vek280").save(tmp_path / "d")
    return tmp_path


def test_gemm_with_zero_outputs():
    w = numpy_helper.from_array(np.ones((8, 0), dtype=np.float32), "w")
    m = _model([helper.make_node("Gemm", ["x", "w"], ["y"], name="g0")], [w], [8], [0])
    with pytest.raises(ModelError, match=r"tensor 'y' \(output of layer 'g0'\) has shape \[0\]: an empty dimension"):
        aieflow.compile(m, device="vek280", calibration=_cal(8))


def test_dimension_limit():
    m = _model([helper.make_node("Relu", ["x"], ["y"], name="act")], [], [1 << 21], [1 << 21])
    with pytest.raises(ModelError, match=r"tensor 'x' has shape \[2097152\]: more than aieflow's limits of 1,048,576"):
        aieflow.compile(m, device="vek280", calibration=np.zeros((1, 1 << 21), dtype=np.float32))


def test_nan_weights_are_blamed_on_the_layer_not_calibration():
    wv = np.ones((8, 4), dtype=np.float32)
    wv[2, 1] = np.nan
    m = _model([helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")], [numpy_helper.from_array(wv, "w")], [8], [4])
    with pytest.raises(ModelError, match="layer 'mm': parameter 'weight' contains NaN") as e:
        aieflow.compile(m, device="vek280", calibration=_cal(8))
    assert "calibration" not in str(e.value)


def test_transpose_moving_the_batch_before_reshape():
    shape = numpy_helper.from_array(np.array([0, 24], dtype=np.int64), "shp")
    w = numpy_helper.from_array(np.ones((24, 5), dtype=np.float32), "w")
    nodes = [helper.make_node("Transpose", ["x"], ["t"], perm=[1, 0, 2], name="tr"),
             helper.make_node("Reshape", ["t", "shp"], ["r"], name="rs"),
             helper.make_node("MatMul", ["r", "w"], ["y"], name="mm")]
    m = _model(nodes, [shape, w], [4, 6], [5])
    with pytest.raises(ModelError, match=r"node 'rs' \(Reshape\) cannot be applied .* cannot reshape") as e:
        aieflow.compile(m, device="vek280", calibration=_cal(4, 6))
    assert "batch axis" in str(e.value)


def test_torch_meta_tensors():
    torch = pytest.importorskip("torch")
    from aieflow.model_zoo import torch_mlp

    x = np.zeros((8, 8), dtype=np.float32)
    with pytest.raises(ConfigError, match="example input is a torch 'meta' tensor"):
        aieflow.compile(torch_mlp([8, 4]), device="vek280", example_input=torch.zeros(8, 8, device="meta"))
    with pytest.raises(ModelError, match=r"parameter '0\.weight' of Sequential is a 'meta' tensor"):
        aieflow.compile(torch_mlp([8, 4]).to("meta"), device="vek280", example_input=x)


@pytest.mark.parametrize(
    "array,expect",
    [
        (np.ones((4, 20), dtype=np.complex64), "holds complex numbers"),
        (np.ones((4, 20), dtype=bool), "holds booleans"),
        (np.array([["a"] * 20] * 4), "holds strings"),
        (np.zeros((4, 20), dtype=[("a", "f4")]), "holds structured records"),
    ],
)
def test_input_dtypes_are_refused(files, array, expect):
    np.save(files / "bad.npy", array)
    r = run_cli("predict", str(files / "d"), "--input", str(files / "bad.npy"), "--output", str(files / "y.npy"))
    assert r.returncode == 2 and f"input file '{files / 'bad.npy'}' {expect}" in r.stderr, r.stderr
    assert not (files / "y.npy").exists()
    d = aieflow.load(files / "d")
    with pytest.raises(ConfigError, match=expect):
        d.predict(array)
    with pytest.raises(ConfigError, match=f"calibration data {expect}"):
        aieflow.compile(files / "m.onnx", device="vek280", calibration=array)


def test_npy_header_claiming_more_than_the_file_holds(files):
    header = b"{'descr': '<f4', 'fortran_order': False, 'shape': (1600000, 1000000), }"
    header += b" " * (117 - len(header)) + b"\n"
    (files / "huge.npy").write_bytes(b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header + b"\0" * 64)
    r = run_cli("compile", str(files / "m.onnx"), "--out", str(files / "o"), "--calibration", str(files / "huge.npy"))
    assert r.returncode == 2 and "cannot read calibration file" in r.stderr and "huge.npy" in r.stderr, r.stderr
    assert not (files / "o").exists()


@pytest.mark.parametrize("damage", ["truncated", "empty"])
def test_damaged_weights_npz(files, damage):
    path = files / "d" / "weights.npz"
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2] if damage == "truncated" else b"")
    r = run_cli("predict", str(files / "d"), "--input", str(files / "x.npy"), "--output", str(files / "y.npy"))
    assert r.returncode == 2 and f"'{path}' was changed after aieflow saved the design" in r.stderr, r.stderr
    # past the integrity record (--no-check), the reader itself names the damage
    r = run_cli("predict", str(files / "d"), "--input", str(files / "x.npy"), "--output", str(files / "y.npy"),
                "--no-check")
    assert r.returncode == 2 and f"'{path}' is not a readable weights archive" in r.stderr, r.stderr
    assert "re-run aieflow compile" in r.stderr


def test_batch_too_large_names_the_real_sizes_and_one_hint(files):
    with pytest.raises(PlanError) as e:
        # resident: with "auto" the layer streams through the memory-tile GEMM instead (gemm/dense.py)
        aieflow.compile(files / "m.onnx", device="vek280", config={"batch": 4096, "layers": {n: {"weights": "resident"} for n in ("fc0", "fc1")}})
    text = str(e.value)
    # the real sizes: the layer's 20 x 16 weights, the smallest tile footprint at batch 4096, a tile's 64 KiB
    assert "20 x 16 weights do not fit" in text and "199040 bytes" in text and "65536 bytes" in text
    assert "0 KiB" not in text
    assert text.count("hint:") == 1 and "reduce the batch" in text


def test_nul_in_a_node_name_compiles(tmp_path):
    m = qdq_mlp([20, 16, 5], seed=0)
    for n in m.graph.node:
        n.name += "\0x"
    onnx.save(m, tmp_path / "nul.onnx")
    r = run_cli("compile", str(tmp_path / "nul.onnx"), "--out", str(tmp_path / "o"), "--quiet")
    assert r.returncode == 0, r.stderr
    assert not any(b"\0" in p.read_bytes() for p in (tmp_path / "o" / "project").rglob("*") if p.is_file())
    shutil.rmtree(tmp_path / "o")
