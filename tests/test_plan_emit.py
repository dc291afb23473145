"""Plans respect each tile's memory and the grid; projects contain every file; design.json round-trips."""

from __future__ import annotations

import json

import numpy as np
import pytest
from cases import GENERATION_PRECISIONS

import aieflow
from aieflow.devices import DEVICES
from aieflow.model_zoo import qdq_mlp, torch_mlp
from aieflow.ops.dense import banks_needed, from_panels, pack_tile, to_panels
from aieflow.passes.place import check_placement

PROJECT_FILES = [
    "Makefile",
    "aie.cfg",
    "README.md",
    "host/host.cpp",
    "scripts/compare.py",
    "src/graph.h",
    "src/graph.cpp",
    "src/layers.h",
    "src/kernels/dense.h",
]

CASES = GENERATION_PRECISIONS


def assert_plan_legal(design):
    dev = design.device
    gen = dev.generation
    used = 0
    for n in design.layers():
        p = n.plan
        assert p.memory.total <= gen.data_memory_bytes, n.name
        assert banks_needed(p.memory, gen.bank_bytes) <= gen.memory_banks, n.name
        assert p.cas_len <= dev.columns and p.cas_num <= dev.rows
        assert p.k_slice * p.cas_len >= p.in_features and p.n_slice * p.cas_num >= p.out_features
        assert p.k_slice % p.mmul[1] == 0 and p.n_slice % (2 * p.mmul[2]) == 0
        assert p.batch_pad % (2 * p.mmul[0]) == 0 and p.batch_pad >= p.batch
        # every cascade position has real input features, every row real outputs
        assert p.k_range(p.cas_len - 1)[1] > p.k_range(p.cas_len - 1)[0]
        assert p.n_range(p.cas_num - 1)[1] > p.n_range(p.cas_num - 1)[0]
        used += p.tiles
    assert used <= dev.compute_tiles
    check_placement(design.placement, dev)
    # AIE1 links layers with direct buffers: the consumer reads exactly the producer's slices.
    if dev.memory_tile_rows == 0:
        layers = design.layers()
        for a, b in zip(layers, layers[1:], strict=False):
            assert b.plan.cas_len == a.plan.cas_num and b.plan.k_slice == a.plan.n_slice
            assert a.plan.out_panel == b.plan.in_panel


@pytest.mark.parametrize("device,precision", CASES)
def test_templates_render_for_every_generation_and_type(device, precision):
    net = torch_mlp([40, 72, 19, 6], seed=1)
    x = np.random.default_rng(0).standard_normal((64, 40)).astype(np.float32)
    d = aieflow.compile(net, device=device, example_input=x[:16], calibration=x, config={"precision": precision})
    for f in PROJECT_FILES:
        assert f in d.files and d.files[f].strip(), f
    assert_plan_legal(d)
    tiles = sum(n.plan.tiles for n in d.layers())
    assert sum(1 for f in d.files if f.startswith("src/weights/")) == tiles
    graph_h = d.files["src/graph.h"]
    assert graph_h.count("adf::kernel::create_object") == tiles
    assert graph_h.count("adf::location<adf::kernel>") == tiles
    layers_h = d.files["src/layers.h"]
    for n in d.layers():
        assert f"KS = {n.plan.k_slice}" in layers_h
    if DEVICES[device].memory_tile_rows and any(n.plan.link == "memtile" for n in d.layers()):
        assert "adf::shared_buffer" in graph_h and "adf::tiling" in graph_h
    elif DEVICES[device].memory_tile_rows:  # every link direct (issue 7: layouts already agree)
        assert "adf::shared_buffer" not in graph_h and all(n.plan.link != "memtile" for n in d.layers())
    else:
        assert "shared_buffer" not in graph_h
    assert any(f.startswith("data/in_") for f in d.files)
    assert any(f.startswith("data/golden_out_") for f in d.files)


def test_big_layers_split_over_cascade_and_rows():
    model = qdq_mlp([512] * 8, seed=3)
    for dev in ("vck190", "vek280"):
        d = aieflow.compile(model, device=dev)
        assert_plan_legal(d)
        assert all(n.plan.tiles > 1 for n in d.layers())  # 256 KB of weights cannot sit in one tile


def test_user_parallelism_override_is_used_and_validated():
    model = qdq_mlp([256, 128, 10], seed=0)
    d = aieflow.compile(model, device="vek280", config={"layers": {"fc0": {"parallelism": {"cas_len": 4, "cas_num": 2}}}})
    p = d.graph.node("fc0").plan
    assert (p.cas_len, p.cas_num) == (4, 2)
    assert_plan_legal(d)
    with pytest.raises(aieflow.AieflowError, match="cas_len=99 exceeds"):
        aieflow.compile(model, device="vek280", config={"layers": {"fc0": {"parallelism": {"cas_len": 99}}}})
    with pytest.raises(aieflow.AieflowError, match="cas_num=9 exceeds"):
        aieflow.compile(model, device="vek280", config={"layers": {"fc0": {"parallelism": {"cas_num": 9}}}})
    # AIE1: the consumer's cascade length is the producer's row count
    with pytest.raises(aieflow.AieflowError, match="must equal layer i's cas_num"):
        aieflow.compile(
            model,
            device="vck190",
            config={"layers": {"fc0": {"parallelism": {"cas_num": 2}}, "fc1": {"parallelism": {"cas_len": 3}}}},
        )


def test_fixed_placement_is_honoured_and_checked():
    model = qdq_mlp([64, 64, 10], seed=0)
    d = aieflow.compile(model, device="vek280", config={"layers": {"fc1": {"placement": [10, 3]}}})
    r = d.placement.rect("fc1")
    assert (r.column, r.row) == (10, 3)
    assert "adf::tile(10, 3)" in d.files["src/graph.h"]
    with pytest.raises(aieflow.AieflowError, match="outside"):
        aieflow.compile(model, device="vek280", config={"layers": {"fc1": {"placement": [38, 0]}}})


def test_pack_and_panels_are_exact_permutations():
    model = qdq_mlp([50, 37, 5], seed=4)
    d = aieflow.compile(model, device="vek280", config={"layers": {"fc0": {"parallelism": {"cas_len": 2, "cas_num": 2}}}})
    node = d.graph.node("fc0")
    p = node.plan
    m, kk, nn = p.mmul
    wq = node.params["weight_q"]
    rebuilt = np.zeros((p.k_slice * p.cas_len, p.n_slice * p.cas_num), dtype=np.int64)
    for r in range(p.cas_num):
        for c in range(p.cas_len):
            t = pack_tile(node, r, c)
            blocks = t["weights"].reshape(p.k_slice // kk, p.n_slice // nn, kk, nn).transpose(0, 2, 1, 3)
            rebuilt[c * p.k_slice : (c + 1) * p.k_slice, r * p.n_slice : (r + 1) * p.n_slice] = blocks.reshape(p.k_slice, p.n_slice)
            if c == 0:
                bias = t["bias"].reshape(-1, m, nn)
                assert (bias == bias[:, :1, :]).all()  # each block repeats the bias row M times
    np.testing.assert_array_equal(rebuilt[:50, :37], wq)
    assert not rebuilt[50:].any() and not rebuilt[:, 37:].any()
    x = np.arange(3 * 10).reshape(3, 10)
    buf = to_panels(x, 8, 16, 8)
    assert buf.size == 8 * 16 and sorted(buf[buf != 0]) == sorted(x[x != 0].ravel())
    np.testing.assert_array_equal(from_panels(buf, 3, 8, 16, 8, 10), x)
    # panel layout: element (b, f) at ((f // P) * batch_pad + b) * P + f % P
    assert buf[((9 // 8) * 8 + 2) * 8 + 9 % 8] == x[2, 9]


def test_plio_files_hold_the_quantised_inputs_and_golden_outputs():
    model = qdq_mlp([20, 16, 8], seed=2)
    x = (np.random.default_rng(1).standard_normal((16, 20)) * 4).astype(np.float32)
    d = aieflow.compile(model, device="vek280", example_input=x)
    first, last = d.layers()[0], d.layers()[-1]
    vals = np.array(d.files[f"data/in_{first.name}_c0.txt"].split(), dtype=np.int64)
    p = first.plan
    xq = d.quantise_input(x)
    got = np.concatenate([from_panels(vals[i * p.batch_pad * p.k_slice : (i + 1) * p.batch_pad * p.k_slice], p.batch, p.batch_pad, p.k_slice, p.in_panel, 20) for i in range(2)])
    np.testing.assert_array_equal(got, xq)
    lines = d.files[f"data/in_{first.name}_c0.txt"].splitlines()
    assert all(len(line.split()) == 8 for line in lines)  # 64-bit PLIO words of int8
    gold = np.array(d.files[f"data/golden_out_{last.name}_r0.txt"].split(), dtype=np.int64)
    q = last.plan
    y = np.concatenate([from_panels(gold[i * q.batch_pad * q.n_slice : (i + 1) * q.batch_pad * q.n_slice], q.batch, q.batch_pad, q.n_slice, q.out_panel, 8) for i in range(2)])
    np.testing.assert_array_equal(y, d.predict(x, raw=True))


def test_design_json_and_save_load_round_trip(tmp_path):
    model = qdq_mlp([30, 20, 4], seed=8)
    x = (np.random.default_rng(2).standard_normal((100, 30)) * 4).astype(np.float32)
    d = aieflow.compile(model, device="vck190")
    out = d.save(tmp_path / "design")
    meta = json.loads((out / "design.json").read_text())
    assert meta["format"] == "aieflow-design" and meta["version"] == 1
    assert meta["device"]["key"] == "vck190" and meta["device"]["part"] == "xcvc1902"
    assert set(meta["layers"]) == {"fc0", "fc1"}
    fc0 = meta["layers"]["fc0"]
    assert fc0["types"]["weight"] == "fixed<8,1,RND_CONV,SAT>"
    assert fc0["plan"]["cas_len"] >= 1 and fc0["plan"]["mmul"] == [4, 8, 4]
    assert {"column", "row", "width", "height"} <= set(fc0["placement"])
    res = meta["resources"]
    assert res["compute_tiles"] == sum(v["plan"]["tiles"] for v in meta["layers"].values())
    assert res["memory_tiles"] == 0
    for f in PROJECT_FILES:
        assert (out / "project" / f).is_file()
    loaded = aieflow.load(out)
    np.testing.assert_array_equal(loaded.predict(x), d.predict(x))
    assert loaded.summary() == d.summary().split("\ncompile ")[0]


def test_compile_is_deterministic():
    model = qdq_mlp([64, 48, 8], seed=6)
    a = aieflow.compile(model, device="vek280")
    b = aieflow.compile(model, device="vek280")
    assert a.files == b.files
    assert json.dumps(a.to_json(), sort_keys=True, default=str) == json.dumps(b.to_json(), sort_keys=True, default=str)
