"""Dense layers with streamed weights (issue 8): the planner's resident / streamed choice, the
config, the report, and bit-exactness of the generated GEMM + epilogue C++ on x86."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
import torch

import aieflow
from aieflow.config import parse_config
from aieflow.devices import get_device
from aieflow.errors import ConfigError, PlanError
from aieflow.gemm.dense import plan_streamed
from aieflow.gemm.dense_design import StreamedDenseDesign

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def _linear(k: int, n: int, relu: bool = True, seed: int = 0, bias: bool = True) -> torch.nn.Module:
    torch.manual_seed(seed)
    layers = [torch.nn.Linear(k, n, bias=bias)]
    if relu:
        layers.append(torch.nn.ReLU())
    return torch.nn.Sequential(*layers).eval()


def _streamed(k=200, n=72, precision="int8", layer=None, relu=True, bias=True, samples=16, seed=0,
              orientation=None):
    model = _linear(k, n, relu, seed, bias)
    x = torch.randn(samples, k) * 2
    cfg = {"precision": precision, "layers": {"0": {"weights": "streamed", **(layer or {})}}}
    d = aieflow.compile(model, device="vck190", example_input=x, config=cfg)
    assert isinstance(d, StreamedDenseDesign)
    if orientation and d.plan.orientation != orientation:
        plan = plan_streamed(d.graph, d.device, d.config, d.node, d.plan.reason, orientation=orientation)
        d = StreamedDenseDesign(d.graph, d.device, d.config, plan, d.source)
    return d


def _reference(d: StreamedDenseDesign, xq: np.ndarray) -> np.ndarray:
    """Independent of the GEMM and of ops.dense.emulate: exact integer matmul, bias, 48-bit wrap,
    round-half-to-even by the remainder, saturate, ReLU (the default int8 types on AIE1)."""
    node = d.node
    t = node.types
    x = np.asarray(xq).reshape(xq.shape[0], -1).astype(object)
    w = np.asarray(node.params["weight_q"]).astype(object)
    acc = x.dot(w) + (np.asarray(node.params["bias_q"]).astype(object) * (1 << t.bias_shift))
    out = np.empty(acc.shape, dtype=np.int64)
    half = 1 << (t.shift - 1)
    for idx, v in np.ndenumerate(acc):
        v = int(v)
        v = ((v + (1 << 47)) % (1 << 48)) - (1 << 47)
        q, r = v >> t.shift, v & ((1 << t.shift) - 1)
        q += 1 if (r > half or (r == half and q & 1)) else 0
        q = min(max(q, t.output.min_code), t.output.max_code)
        out[idx] = max(q, 0)
    return out


# ----------------------------------------------------------------------------- the choice


def test_large_dense_is_streamed_on_vck190_and_reported():
    d = aieflow.compile(_linear(4096, 4096), device="vck190", example_input=torch.randn(8, 4096))
    assert isinstance(d, StreamedDenseDesign)
    assert "do not fit on chip" in d.plan.reason and "cas_len" in d.plan.reason
    # both orientations were costed, the cheaper one chosen
    assert set(d.plan.orientations) == {"xw", "wx"}
    assert d.plan.orientations[d.plan.orientation] == min(d.plan.orientations.values())
    e = d.estimate()
    assert e.cycles == pytest.approx(e.gemm.total_cycles + e.epilogue_cycles)
    # 16 MiB of weights at the assumed 4 B/cycle from DDR dominate
    assert e.gemm.packing_cycles >= 4096 * 4096 / 4
    assert e.bound.startswith("weights from DDR")
    j = json.loads(json.dumps(d.to_json()))
    layer = j["layers"]["0"]
    assert layer["weights"] == "streamed" and layer["weight_bytes"] == 4096 * 4096
    assert j["kind"] == "streamed_dense" and j["performance"]["gemm"]["cycles"] == e.gemm.cycles
    assert "STREAMED" in d.summary()
    x = np.random.default_rng(1).standard_normal((3, 4096))
    assert np.array_equal(d.predict(x), aieflow.emulate(_linear(4096, 4096), "vck190", torch.randn(8, 4096)).predict(x))


def test_small_dense_stays_resident_and_resident_mode_keeps_the_error():
    d = aieflow.compile(_linear(64, 32), device="vck190", example_input=torch.randn(8, 64))
    assert not isinstance(d, StreamedDenseDesign)
    with pytest.raises(PlanError, match="do not fit"):
        aieflow.compile(_linear(4096, 4096), device="vck190", example_input=torch.randn(8, 4096),
                        config={"layers": {"0": {"weights": "resident"}}})


def test_streaming_needs_a_gemm_device_and_a_single_layer_model():
    # a board with neither PL memory facts nor memory tiles has no GEMM design for an integer layer
    # (VEK280 / VEK385 stream on the memory-tile GEMM: tests/test_streamed_int_aieml.py)
    torch.manual_seed(0)
    q = aieflow.emulate(_linear(64, 16), "vck190", torch.randn(8, 64))
    bare = dataclasses.replace(get_device("vck190"), key="vck190-bare")
    with pytest.raises(PlanError, match="PL memory capacities of vck190-bare") as e:
        plan_streamed(q.graph, bare, q.config, q.graph.node("0"), "does not fit on chip")
    assert "does not fit on chip" in str(e.value) and "vek280" in e.value.hint
    # a model with other layers compiles as segments (tests/test_streamed_chain.py); planning the
    # streamed GEMM directly on the whole graph still refuses
    torch.manual_seed(0)
    two = torch.nn.Sequential(torch.nn.Linear(64, 48), torch.nn.ReLU(), torch.nn.Linear(48, 16)).eval()
    q = aieflow.emulate(two, "vck190", torch.randn(8, 64))
    with pytest.raises(PlanError, match="supported for a model whose only compute layer") as e:
        plan_streamed(q.graph, q.device, q.config, q.graph.node("0"), "test")
    assert "also has layer(s) 2" in str(e.value)


def test_weights_config_is_checked_and_round_trips():
    with pytest.raises(ConfigError, match="resident, streamed"):
        parse_config({"layers": {"fc": {"weights": "ddr"}}})
    c = parse_config({"layers": {"fc": {"weights": "Streamed"}}})
    assert c.layer("fc").weights == "streamed"
    assert parse_config(c.to_json()).layer("fc").weights == "streamed"
    assert "weights" not in parse_config({"layers": {"fc": {}}}).to_json()["layers"]["fc"]


def test_fp32_and_bf16_layers_stream_and_bf16_on_aie1_is_refused_by_name():
    # fp32 streams in its GEMM's float order (tests/test_streamed_fp32.py), bf16 on the bf16 memory-tile
    # GEMM of AIE-ML / v2 (tests/test_streamed_bf16.py); AIE1 has no bf16 MACs
    assert _streamed(k=32, n=16, precision="fp32").plan.gemm.dtype.name == "fp32"
    from aieflow.gemm.dense import gemm_dtype

    q = aieflow.emulate(_linear(32, 16), "vek280", torch.randn(8, 32), config={"precision": "bf16"})
    assert gemm_dtype(q.graph.node("0")) == "bf16"
    with pytest.raises(ConfigError, match="precision bf16 is not available on VCK190"):
        aieflow.emulate(_linear(32, 16), "vck190", torch.randn(8, 32), config={"precision": "bf16"})
    # a bf16 graph planned for AIE1 anyway (the planner's own check, behind the quantiser's)
    with pytest.raises(PlanError, match="needs bf16 MACs, and vck190") as e:
        plan_streamed(q.graph, get_device("vck190"), q.config, q.graph.node("0"), "test")
    assert "vek280" in e.value.hint


def test_saved_project_holds_gemm_epilogue_and_weights(tmp_path):
    d = _streamed(k=40, n=24)
    d.save(tmp_path / "out")
    proj = tmp_path / "out" / "project"
    w = np.fromfile(proj / "data" / "W.bin", dtype=np.int8).reshape(40, 24)
    assert np.array_equal(w, d.node.params["weight_q"].astype(np.int8))
    b = np.fromfile(proj / "data" / "bias.bin", dtype=np.int32)
    assert np.array_equal(b, d.node.params["bias_q"].astype(np.int32))
    for f in ("pl/dense_epilogue.cpp", "pl/dense_epilogue.h", "pl/gemm_mover.cpp", "src/graph.h", "DENSE.md"):
        assert (proj / f).is_file()
    meta = json.loads((tmp_path / "out" / "design.json").read_text())
    assert meta["config"]["layers"]["0"]["weights"] == "streamed"


# ----------------------------------------------------------------------------- bit-exact on x86


@pytest.mark.parametrize("orientation", ["xw", "wx"])
def test_int8_streamed_dense_is_bit_exact_on_x86(orientation):
    d = _streamed(k=200, n=72, orientation=orientation)
    assert d.plan.orientation == orientation
    xq = d.random_input_codes(13, seed=3)  # 13: not a multiple of the 8-row micro-tile
    r = d.verify(samples=13, seed=3)
    assert r.ok, r.verdict()
    assert r.values == 13 * 72
    assert np.array_equal(d.run(xq), _reference(d, xq))


@pytest.mark.parametrize("precision,output", [
    ("int16", None),
    ("a16w8", None),
    ("int8", "fixed<8,4,RND_INF,WRAP>"),
    ("int8", "fixed<8,5,TRN,SAT_SYM>"),
    ("int8", "fixed<16,6,RND_ZERO,SAT>"),
])
def test_epilogue_modes_match_the_dense_emulator(precision, output):
    layer = {"output": output} if output else {}
    d = _streamed(k=72, n=40, precision=precision, layer=layer, seed=1)
    if output:
        assert d.node.types.output.to_string() == output
    r = d.verify(samples=11, seed=5)
    assert r.ok, r.verdict()


def test_no_bias_no_relu_and_a_corrupted_epilogue_fails():
    d = _streamed(k=48, n=16, relu=False, bias=False)
    assert d.verify(samples=9).ok
    bad = dict(d.files)
    bad["pl/dense_epilogue.h"] = bad["pl/dense_epilogue.h"].replace("constexpr bool RELU = false",
                                                                    "constexpr bool RELU = true")
    assert bad["pl/dense_epilogue.h"] != d.files["pl/dense_epilogue.h"]
    broken = dataclasses.replace(d, files=bad)
    r = broken.verify(samples=9)
    assert not r.ok and r.mismatches > 0 and "FAIL" in r.verdict()



def test_streamed_on_a_non_dense_layer_is_a_config_error():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 8), torch.nn.ReLU(), torch.nn.Flatten()).eval()
    with pytest.raises(ConfigError, match="not a Dense layer"):
        aieflow.compile(model, device="vck190", example_input=torch.randn(4, 16),
                        config={"layers": {"2": {"weights": "streamed"}}})


# ----------------------------------------------------------------------------- save / load


def _edge_inputs(d: StreamedDenseDesign, samples: int, seed: int) -> np.ndarray:
    """Float samples: random over (and beyond) the input range, plus all-min / all-max / zero rows."""
    t = d.input_type
    k = d.plan.in_features
    rng = np.random.default_rng(seed)
    x = rng.uniform(t.min_code * t.scale * 1.5, t.max_code * t.scale * 1.5, size=(samples, k))
    x[0], x[1], x[2] = t.min_code * t.scale, t.max_code * t.scale, 0.0
    return x


def test_saved_streamed_design_reloads_identically(tmp_path):
    d = _streamed(k=40, n=24)
    d.save(tmp_path / "out")
    loaded = aieflow.load(tmp_path / "out")
    assert isinstance(loaded, StreamedDenseDesign)
    x = _edge_inputs(d, 21, seed=7)
    assert np.array_equal(loaded.predict(x, raw=True), d.predict(x, raw=True))
    assert np.array_equal(loaded.predict(x), d.predict(x))
    xq = d.random_input_codes(13, seed=2)
    assert np.array_equal(loaded.run(xq), _reference(d, xq))  # the independent reference, on the loaded design
    assert loaded.plan == d.plan
    assert loaded.estimate() == d.estimate()
    assert loaded.summary() == d.summary()
    assert loaded.to_json() == d.to_json()
    assert loaded.files == d.files
    # saving the loaded design again writes the same design.json
    loaded.save(tmp_path / "again")
    assert (tmp_path / "again" / "design.json").read_text() == (tmp_path / "out" / "design.json").read_text()


def test_reloaded_wx_design_keeps_its_orientation(tmp_path):
    d = _streamed(k=72, n=40, precision="a16w8", orientation="wx", seed=1)
    d.save(tmp_path / "out")
    loaded = aieflow.load(tmp_path / "out")
    assert loaded.plan.orientation == "wx" and loaded.plan == d.plan
    x = _edge_inputs(d, 9, seed=3)
    assert np.array_equal(loaded.predict(x, raw=True), d.predict(x, raw=True))


def test_loaded_design_uses_the_project_on_disk(tmp_path):
    d = _streamed(k=40, n=24)
    d.save(tmp_path / "out")
    h = tmp_path / "out" / "project" / "pl" / "dense_epilogue.h"
    h.write_text(h.read_text() + "// edited\n")
    with pytest.raises(aieflow.AieflowError, match="dense_epilogue.h' was changed after aieflow saved"):
        aieflow.load(tmp_path / "out")  # the integrity record (tests/test_integrity.py)
    assert aieflow.load(tmp_path / "out", check=False).files["pl/dense_epilogue.h"].endswith("// edited\n")


def test_cli_predict_verify_and_report_on_a_saved_streamed_design(tmp_path, capsys):
    from aieflow.cli import main

    d = _streamed(k=40, n=24)
    d.save(tmp_path / "out")
    x = _edge_inputs(d, 11, seed=5)
    np.save(tmp_path / "x.npy", x)
    assert main(["predict", str(tmp_path / "out"), "--input", str(tmp_path / "x.npy"),
                 "--output", str(tmp_path / "y.npy")]) == 0
    assert np.array_equal(np.load(tmp_path / "y.npy"), d.predict(x))
    assert main(["predict", str(tmp_path / "out"), "--input", str(tmp_path / "x.npy"),
                 "--output", str(tmp_path / "yq.npy"), "--raw"]) == 0
    assert np.array_equal(np.load(tmp_path / "yq.npy"), d.predict(x, raw=True))
    capsys.readouterr()
    assert main(["report", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    assert d.summary() in out
    svg = (tmp_path / "out" / "placement.svg").read_text()
    assert svg.startswith("<svg") and f"{d.plan.gemm.tiles} tiles" in svg
    # the one x86 build of these tests: the loaded design's own project, GEMM + epilogue
    assert main(["verify", str(tmp_path / "out"), "--samples", "9", "--quiet"]) == 0
    assert "PASS" in capsys.readouterr().out


def _corrupt_plan_key(meta):
    del meta["plan"]


def _corrupt_blocks(meta):
    meta["plan"]["gemm"]["blocks"]["kc"] = 24  # not a multiple of the int8 mmul's K (16)


def _corrupt_orientation(meta):
    meta["plan"]["orientation"] = "wx" if meta["plan"]["orientation"] == "xw" else "xw"


def _corrupt_epilogue(meta):
    meta["plan"]["epilogue"]["shift"] += 1


def _corrupt_layer(meta):
    meta["plan"]["layer"] = "nonexistent"


def _corrupt_version(meta):
    meta["version"] = 99


@pytest.mark.parametrize("corrupt,message", [
    (_corrupt_plan_key, "no 'plan'"),
    (_corrupt_blocks, "block size kc = 24"),
    (_corrupt_orientation, "is not layer '0'"),
    (_corrupt_epilogue, "disagrees with the layer's saved types"),
    (_corrupt_layer, "the plan is for layer 'nonexistent'"),
    (_corrupt_version, "version 99"),
])
def test_a_corrupted_design_json_is_a_clear_error(tmp_path, capsys, corrupt, message):
    from aieflow.cli import main
    from aieflow.errors import AieflowError

    d = _streamed(k=40, n=24)
    d.save(tmp_path / "out")
    path = tmp_path / "out" / "design.json"
    meta = json.loads(path.read_text())
    corrupt(meta)
    meta.pop("integrity", None)  # as an older save (no record): the loader's own check speaks
    path.write_text(json.dumps(meta))
    with pytest.raises(AieflowError, match="design.json") as e:
        aieflow.load(tmp_path / "out")
    assert message in str(e.value) and "re-run aieflow compile" in str(e.value)
    np.save(tmp_path / "x.npy", np.zeros((2, 40)))
    capsys.readouterr()
    assert main(["predict", str(tmp_path / "out"), "--input", str(tmp_path / "x.npy"),
                 "--output", str(tmp_path / "y.npy")]) == 2
    assert message in capsys.readouterr().err


def test_unreadable_design_json_and_missing_weights_are_clear_errors(tmp_path):
    from aieflow.errors import AieflowError
    from aieflow.graph_io import read_weights

    d = _streamed(k=40, n=24)
    d.save(tmp_path / "out")
    (tmp_path / "out" / "weights.npz").unlink()
    with pytest.raises(AieflowError, match="weights.npz is missing"):
        aieflow.load(tmp_path / "out")
    d.save(tmp_path / "out", force=True)
    arrays = read_weights(tmp_path / "out" / "weights.npz")
    arrays["0/weight_q"] = arrays["0/weight_q"][:, :20]
    np.savez(tmp_path / "out" / "weights.npz", **arrays)  # as an older aieflow wrote it: wide codes
    with pytest.raises(AieflowError, match=r"weights.npz' was changed after aieflow saved"):
        aieflow.load(tmp_path / "out")
    with pytest.raises(AieflowError, match=r"weights of shape \[40, 20\]; the plan .* is 40 x 24"):
        aieflow.load(tmp_path / "out", check=False)  # past the integrity record, the loader's own check
    d.save(tmp_path / "out", force=True)
    (tmp_path / "out" / "design.json").write_text('{"format": "aieflow-streamed-dense", ')
    with pytest.raises(AieflowError, match="cannot read"):
        aieflow.load(tmp_path / "out")
