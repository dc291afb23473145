"""fp32 Dense layers with streamed weights (issue 8 follow-up): the layer's values are the GEMM
design's float order (each kc block's sums from +0.0, the blocks added into C, then the bias and
ReLU in the epilogue), emulated by ``predict`` and checked bit for bit against the generated GEMM and
epilogue C++ on x86, alone and inside a chain of resident layers; the plan, the model, the reports
and save / load."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
import torch

import aieflow
from aieflow.errors import ConfigError
from aieflow.gemm.dense import gemm_dtype, plan_streamed
from aieflow.gemm.dense_design import StreamedDenseDesign
from aieflow.gemm.perf import ddr_cycles, estimate
from aieflow.gemm.plan import make_plan
from aieflow.gemm.segmented import SegmentedDesign
from aieflow.gemm.streamed_float import compare, same_values, ulp_distance

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

EDGES = np.array([0.0, -0.0, 1e18, -3e17, 1e-30, -2e-38, 1.4e-45, -3e-40, 65504.0, -1.0, 0.5], dtype=np.float32)


def _mlp(dims: list[int], seed: int = 0, bias: bool = True, relu_last: bool = True) -> torch.nn.Module:
    torch.manual_seed(seed)
    layers: list[torch.nn.Module] = []
    for i, (a, b) in enumerate(zip(dims[:-1], dims[1:], strict=True)):
        layers.append(torch.nn.Linear(a, b, bias=bias))
        if i < len(dims) - 2 or relu_last:
            layers.append(torch.nn.ReLU())
    return torch.nn.Sequential(*layers).eval()


def _compile(model, k, streamed=("0",), **cfg):
    config = {"precision": "fp32", "layers": {n: {"weights": "streamed"} for n in streamed}, **cfg}
    return aieflow.compile(model, device="vck190", example_input=torch.randn(16, k), config=config)


def _with_kc(d: StreamedDenseDesign, kc: int, orientation: str | None = None) -> StreamedDenseDesign:
    """The same layer with its GEMM re-planned with kc forced (several k blocks on a small layer) and,
    optionally, the other orientation."""
    p = d.plan
    if orientation and orientation != p.orientation:
        p = plan_streamed(d.graph, d.device, d.config, d.node, p.reason, orientation=orientation)
    g = p.gemm
    gemm = make_plan(g.m, g.n, g.k, g.dtype, g.output, g.device, g.design, g.config, {"kc": kc})
    return StreamedDenseDesign(d.graph, d.device, d.config, dataclasses.replace(p, gemm=gemm), d.source)


def _f32(v: float) -> float:
    """Round a Python float (double) to float32: correctly rounded for a sum or product of two
    float32 values (double has more than 2 x 24 + 2 bits)."""
    return float(np.float32(v))


def _gemm_order_reference(x: np.ndarray, w: np.ndarray, bias, kc: int, relu: bool) -> np.ndarray:
    """Independent of gemm/emulate.py and of numpy's float32 arithmetic: Python doubles rounded to
    float32 after every product and sum; per kc block a sum from +0.0 in increasing k, added into C
    (from +0.0); then + bias, then ReLU (y < 0 -> 0)."""
    s, k = x.shape
    n = w.shape[1]
    out = np.zeros((s, n), dtype=np.float32)
    for i in range(s):
        for j in range(n):
            c = 0.0
            for pc in range(0, k, kc):
                acc = 0.0
                for p in range(pc, min(pc + kc, k)):
                    acc = _f32(acc + _f32(float(x[i, p]) * float(w[p, j])))
                c = _f32(c + acc)
            y = _f32(c + float(bias[j])) if bias is not None else c
            out[i, j] = 0.0 if (relu and y < 0) else y
    return out


def _resident_reference(x: np.ndarray, w: np.ndarray, bias, relu: bool) -> np.ndarray:
    """The resident kernel's order, same rounding rules: from the bias, increasing k."""
    s, k = x.shape
    out = np.zeros((s, w.shape[1]), dtype=np.float32)
    for i in range(s):
        for j in range(w.shape[1]):
            y = float(bias[j]) if bias is not None else 0.0
            for p in range(k):
                y = _f32(y + _f32(float(x[i, p]) * float(w[p, j])))
            out[i, j] = max(y, 0.0) if relu else y
    return out


def _edge_inputs(samples: int, k: int, seed: int = 0) -> np.ndarray:
    """Rows of zeros, -0.0, huge, tiny / subnormal and mixed edge values, then normal samples."""
    rng = np.random.default_rng(seed)
    head = [np.zeros(k), np.full(k, -0.0), np.full(k, 1e18), np.full(k, -1e-30), np.full(k, 3e-40)]
    head += [rng.choice(EDGES, size=k) for _ in range(4)]
    body = rng.standard_normal((samples - len(head), k)) * rng.choice([1e-3, 1.0, 1e4], size=(samples - len(head), 1))
    return np.concatenate([np.array(head), body]).astype(np.float32)


# ----------------------------------------------------------------------------- plan, model, report


def test_fp32_layer_streams_through_the_fp32_gemm_and_reports_its_order():
    d = _compile(_mlp([40, 24]), 40)
    assert isinstance(d, StreamedDenseDesign) and d.is_float
    g = d.plan.gemm
    assert (g.dtype.name, g.output.name) == ("fp32", "float32")
    assert d.plan.epilogue.is_float and d.plan.epilogue.has_bias and d.plan.epilogue.relu
    assert d.plan.weight_bytes == 40 * 24 * 4
    s = d.summary()
    assert "GEMM's order" in s and "last bits" in s and "fp32 y = c + bias, then ReLU" in s
    j = json.loads(json.dumps(d.to_json()))
    layer = j["layers"]["0"]
    assert "kc block of" in layer["numerics"] and layer["gemm"]["types"]["c"] == "float32"
    assert "Numerics: fp32 in the GEMM's order" in d.files["DENSE.md"]
    # the project: the fp32 epilogue header, float bias and input types in the host
    assert "using bias_t = float;" in d.files["pl/dense_epilogue.h"]
    assert "y = c + bias" in d.files["pl/dense_epilogue.h"]
    assert "using x_t = float;" in d.files["host/dense_host.cpp"]


def test_estimate_uses_the_fp32_gemm_model():
    d = _compile(_mlp([512, 64]), 512)
    e = d.estimate()
    g = estimate(d.plan.gemm)
    assert e.gemm.cycles == g.cycles and e.gemm.packing_cycles == g.packing_cycles
    elems = d.plan.batch * 64  # C (float32) read, Y (float32) written, the bias (float32) read
    dev = d.device
    assert e.epilogue_cycles == ddr_cycles(elems * 4, dev) + ddr_cycles(elems * 4, dev) + ddr_cycles(64 * 4, dev)
    assert e.cycles == pytest.approx(g.total_cycles + e.epilogue_cycles)
    # fp32 MACs run at 8 per cycle against int8's 128, and its weights are 4x the bytes: slower
    i8 = aieflow.compile(_mlp([512, 64]), device="vck190", example_input=torch.randn(16, 512),
                         config={"precision": "int8", "layers": {"0": {"weights": "streamed"}}})
    assert e.gemm.packing_cycles > i8.estimate().gemm.packing_cycles
    assert e.cycles > i8.estimate().cycles


def test_mixed_float_layers_are_refused_with_a_message():
    q = aieflow.emulate(_mlp([32, 16]), "vek280", torch.randn(8, 32), config={"precision": "bf16"})
    node = q.graph.node("0")
    fp32 = aieflow.emulate(_mlp([32, 16]), "vck190", torch.randn(8, 32)).graph.node("0").types.output
    mixed = dataclasses.replace(node, types=dataclasses.replace(node.types, output=fp32))  # bf16 x bf16 -> fp32
    with pytest.raises(ConfigError, match="int8, int16, a16w8, fp32 and bf16") as e:
        gemm_dtype(mixed)
    assert "'0'" in str(e.value) and "bf16" in str(e.value) and "fp32" in str(e.value)


# ----------------------------------------------------------------------------- numerics


def test_predict_is_the_gemm_order_against_an_independent_reference():
    model = _mlp([40, 24])
    d = _with_kc(_compile(model, 40), 8)  # five k blocks
    assert d.plan.gemm.n_pc == 5
    x = _edge_inputs(14, 40)
    y = d.predict(x)
    w = d.node.params["weight_q"]
    b = d.node.params["bias_q"]
    want = _gemm_order_reference(x, w, b, 8, relu=True)
    assert same_values(y, want)
    # the order matters: the resident kernel's (from the bias) differs in the last bits somewhere,
    # and the whole-model emulator without streaming is exactly that order
    resident = aieflow.emulate(model, "vck190", torch.randn(16, 40), config={"precision": "fp32"}).predict(x)
    assert same_values(resident, _resident_reference(x, w, b, relu=True))
    assert not same_values(y, resident)
    assert int(ulp_distance(y, resident).max()) > 0
    assert np.max(np.abs(y.astype(np.float64) - resident)) <= 1e-5 * np.max(np.abs(resident))


def test_predict_without_bias_or_relu_and_in_the_other_orientation():
    model = _mlp([24, 16], bias=False, relu_last=False)
    base = _compile(model, 24)
    x = _edge_inputs(11, 24, seed=3)
    want = _gemm_order_reference(x, base.node.params["weight_q"], None, 6, relu=False)
    for o in ("xw", "wx"):
        d = _with_kc(base, 6, orientation=o)
        assert d.plan.orientation == o
        assert same_values(d.predict(x), want)  # A and B swap, the float sums do not change


def test_measured_difference_from_the_resident_order_and_from_float64():
    """The numbers docs/gemm.md quotes (benchmarks/streamed_fp32_numerics.py prints them): a
    1024 -> 256 layer, two k blocks of 512, 64 normal samples."""
    model = _mlp([1024, 256], relu_last=False)
    d = _compile(model, 1024)
    assert d.plan.gemm.blocks.kc == 512 and d.plan.gemm.n_pc == 2
    x = np.random.default_rng(0).standard_normal((64, 1024)).astype(np.float32)
    y = d.predict(x)
    resident = aieflow.emulate(model, "vck190", torch.randn(16, 1024), config={"precision": "fp32"}).predict(x)
    with torch.no_grad():
        f64 = model.double()(torch.from_numpy(x.astype(np.float64))).numpy()
    vs_res, vs_f64, res_f64 = compare(y, resident), compare(y, f64), compare(resident, f64)
    assert vs_res["differing"] > 0  # the two orders do differ
    # a priori bound: k x eps(float32) = 1024 x 6e-8 = 6e-5 of the output's scale; typical is far less
    assert vs_res["max_rel"] < 1e-5 and vs_f64["max_rel"] < 1e-5
    # streaming is as close to float64 as the resident order (within a factor of 2)
    assert vs_f64["max_rel"] < 2 * res_f64["max_rel"]


# ----------------------------------------------------------------------------- x86, alone


def test_x86_bit_exact_alone_with_bias_relu_and_edge_values():
    d = _with_kc(_compile(_mlp([40, 24]), 40), 8, orientation="xw")
    x = _edge_inputs(21, 40, seed=1)  # 21 samples: not a multiple of 8
    r = d.verify(x)
    assert r.ok, r.verdict()
    assert r.values == 21 * 24
    # the default inputs: aieflow.verify's float edge rows and random samples
    assert d.verify(samples=13).ok


def test_x86_bit_exact_transposed_without_bias_and_a_corrupted_epilogue_fails():
    d = _with_kc(_compile(_mlp([24, 16], bias=False, relu_last=False), 24), 6, orientation="wx")
    x = _edge_inputs(10, 24, seed=2)
    r = d.verify(x)
    assert r.ok, r.verdict()
    bad = dataclasses.replace(d, files=dict(d.files))
    bad.files["pl/dense_epilogue.h"] = d.files["pl/dense_epilogue.h"].replace("y_t y = c;", "y_t y = c * 1.0000001f;")
    assert bad.files["pl/dense_epilogue.h"] != d.files["pl/dense_epilogue.h"]
    r = bad.verify(x)
    assert not r.ok and r.first is not None and isinstance(r.first[2], float)


# ----------------------------------------------------------------------------- chains, save / load


def test_x86_bit_exact_inside_a_chain_end_to_end(tmp_path):
    dims = [32, 24, 16, 8]
    model = _mlp(dims, relu_last=False)
    d = _compile(model, 32, streamed=("2",))
    assert isinstance(d, SegmentedDesign) and [s.kind for s in d.specs] == ["resident", "streamed", "resident"]
    i = 1
    seg = _with_kc(d.segments[i], 6)  # four k blocks in the streamed middle layer
    d = dataclasses.replace(d, segments=(*d.segments[:i], seg, *d.segments[i + 1:]))
    assert "2 numerics: fp32 in the GEMM's order" in d.summary()
    x = _edge_inputs(12, 32, seed=4)
    xq = d.quantise_input(x)
    # the whole model's emulator: resident layers in the resident order, layer 2 in the GEMM's
    v = xq
    for node in (n for n in d.graph.nodes if n.op == "dense"):
        w, b, relu = node.params["weight_q"], node.params.get("bias_q"), node.attrs.get("activation") == "relu"
        v = (_gemm_order_reference(v, w, b, 6, relu) if node.name == "2" else _resident_reference(v, w, b, relu))
    assert same_values(d.run(xq), v)
    assert same_values(d.run_segments(xq), d.run(xq))
    r = d.verify(x)
    assert r.ok, r.verdict()
    assert all(s.emulation_consistent for s in r.segments) and len(r.segments) == 3


def test_save_load_round_trip_alone_and_in_a_chain(tmp_path):
    x = _edge_inputs(10, 40, seed=5)
    d = _with_kc(_compile(_mlp([40, 24]), 40), 8)
    d.save(tmp_path / "alone")
    w = np.fromfile(tmp_path / "alone" / "project" / "data" / "W.bin", dtype=np.float32).reshape(40, 24)
    assert np.array_equal(w, d.node.params["weight_q"])
    b = np.fromfile(tmp_path / "alone" / "project" / "data" / "bias.bin", dtype=np.float32)
    assert np.array_equal(b, d.node.params["bias_q"])
    back = aieflow.load(tmp_path / "alone")
    assert isinstance(back, StreamedDenseDesign) and back.is_float and back.plan.gemm.blocks.kc == 8
    assert back.to_json() == d.to_json() and back.summary() == d.summary()
    assert same_values(back.predict(x), d.predict(x))
    assert back.verify(x).ok  # the project as saved
    from aieflow.cli import main

    np.save(tmp_path / "x.npy", x)
    assert main(["predict", str(tmp_path / "alone"), "--input", str(tmp_path / "x.npy"),
                 "--output", str(tmp_path / "y.npy")]) == 0
    assert same_values(np.load(tmp_path / "y.npy"), d.predict(x))

    dims = [32, 24, 16]
    c = _compile(_mlp(dims), 32, streamed=("0",))
    assert isinstance(c, SegmentedDesign) and c.specs[0].kind == "streamed"
    c.save(tmp_path / "chain")
    back = aieflow.load(tmp_path / "chain")
    xc = _edge_inputs(10, 32, seed=6)
    assert back.summary() == c.summary()
    assert json.dumps(back.to_json(), sort_keys=True) == json.dumps(c.to_json(), sort_keys=True)
    assert same_values(back.predict(xc), c.predict(xc))
    # the reloaded chain still computes layer 0 in its GEMM's order (not the resident one)
    assert same_values(back.run_segments(back.quantise_input(xc)), back.run(back.quantise_input(xc)))
