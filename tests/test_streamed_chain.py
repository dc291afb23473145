"""Dense chains with streamed layers among resident ones (issue 8): the cut into segments, the
planner's resident / streamed choice against the memory model, bit-exactness of every segment's
generated C++ on x86 and of the whole chain, save / load / CLI, and the refusals."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

import aieflow
from aieflow.design import Design
from aieflow.errors import AieflowError, ConfigError, PlanError
from aieflow.gemm.dense_design import StreamedDenseDesign
from aieflow.gemm.segmented import SegmentedDesign, partition

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def _mlp(dims: list[int], seed: int = 0, relu_last: bool = False) -> torch.nn.Module:
    torch.manual_seed(seed)
    layers: list[torch.nn.Module] = []
    for i, (a, b) in enumerate(zip(dims[:-1], dims[1:], strict=True)):
        layers.append(torch.nn.Linear(a, b))
        if i < len(dims) - 2 or relu_last:
            layers.append(torch.nn.ReLU())
    return torch.nn.Sequential(*layers).eval()


def _compile(model, dims, streamed=(), precision="int8", device="vck190", **cfg):
    x = torch.randn(32, dims[0]) * 2
    config = {"precision": precision, "layers": {n: {"weights": "streamed"} for n in streamed}, **cfg}
    return aieflow.compile(model, device=device, example_input=x, config=config), x


def _reference(graph, xq: np.ndarray) -> np.ndarray:
    """Independent of the emulator and of the GEMM: per Dense layer, exact integer matmul (Python
    ints), bias << bias_shift, wrap to the accumulator, round half to even by the remainder,
    saturate, ReLU; views are reshapes."""
    v = np.asarray(xq).reshape(xq.shape[0], -1).astype(object)
    for node in graph.nodes:
        if node.op != "dense":
            continue
        t = node.types
        assert t.output.rounding.value == "conv_even" and t.output.saturation.value == "saturate"
        acc = v.dot(np.asarray(node.params["weight_q"]).astype(object))
        if node.params.get("bias_q") is not None:
            acc = acc + np.asarray(node.params["bias_q"]).astype(object) * (1 << t.bias_shift)
        out = np.empty(acc.shape, dtype=object)
        half, m = 1 << (t.shift - 1), 1 << t.acc_bits
        for idx, a in np.ndenumerate(acc):
            a = ((int(a) + m // 2) % m) - m // 2
            q, r = a >> t.shift, a & ((1 << t.shift) - 1)
            q += 1 if (r > half or (r == half and q & 1)) else 0
            q = min(max(q, t.output.min_code), t.output.max_code)
            out[idx] = max(q, 0) if node.attrs.get("activation") == "relu" else q
        v = out
    return v.astype(np.int64)


# ----------------------------------------------------------------------------- the cut


def test_partition_puts_views_with_the_next_layer_and_merges_resident_runs():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(24, 16), torch.nn.ReLU(), torch.nn.Linear(16, 12),
                                torch.nn.ReLU(), torch.nn.Linear(12, 8), torch.nn.Linear(8, 4)).eval()
    g = aieflow.emulate(model, "vck190", torch.randn(8, 4, 6)).graph
    dense = [n.name for n in g.nodes if n.op == "dense"]
    views = [n.name for n in g.nodes if n.op != "dense"]
    assert len(dense) == 4 and views  # the flatten survives fusion as a view
    specs = partition(g, {dense[1]})
    assert [s.kind for s in specs] == ["resident", "streamed", "resident"]
    assert specs[0].nodes[0] == views[0]  # the view joins the first layer's segment
    assert specs[2].nodes == (dense[2], dense[3])  # consecutive resident layers: one segment
    for a, b in zip(specs, specs[1:], strict=False):
        assert a.output == b.input  # every cut is one tensor
    assert specs[0].input == g.inputs[0] and specs[-1].output == g.outputs[0]
    # two adjacent streamed layers are two segments; all-streamed has no resident one
    assert [s.kind for s in partition(g, set(dense[:2]))] == ["streamed", "streamed", "resident"]
    assert [s.kind for s in partition(g, set(dense))] == ["streamed"] * 4


# ----------------------------------------------------------------------------- bit-exact on x86


@pytest.mark.parametrize("where,dims,streamed,kinds", [
    ("first", [40, 32, 16], ["0"], ["streamed", "resident"]),
    ("last", [24, 40, 72], ["2"], ["resident", "streamed"]),
])
def test_streamed_first_or_last_is_bit_exact_on_x86(where, dims, streamed, kinds):
    model = _mlp(dims, seed=3)
    d, x = _compile(model, dims, streamed)
    assert isinstance(d, SegmentedDesign)
    assert [s.kind for s in d.specs] == kinds, where
    xq = d.quantise_input(x.numpy())
    assert np.array_equal(d.run(xq), _reference(d.graph, xq))  # the whole chain, independent reference
    assert np.array_equal(d.run_segments(xq), d.run(xq))  # the segments' own emulators compose to it
    assert np.array_equal(d.predict(x.numpy()), aieflow.emulate(model, "vck190", x).predict(x.numpy()))
    r = d.verify(samples=13, seed=1)  # edge rows (type limits, alternating extremes) + random; 13: not a multiple of 8
    assert r.ok, r.verdict()
    assert [s.kind for s in r.segments] == kinds and all(s.ok for s in r.segments)
    assert "PASS, bit-exact end to end" in r.verdict()


def test_several_streamed_layers_int16_are_bit_exact_on_x86():
    dims = [32, 24, 40, 16]
    model = _mlp(dims, seed=5)
    d, x = _compile(model, dims, ["0", "2"], precision="int16")
    assert [s.kind for s in d.specs] == ["streamed", "streamed", "resident"]
    assert set(d.reasons) == {"0", "2"}
    r = d.verify(samples=11, seed=2)
    assert r.ok, r.verdict()
    # a corrupted segment is caught and named
    seg = d.segments[1]
    bad = dict(seg.files)
    bad["pl/dense_epilogue.h"] = bad["pl/dense_epilogue.h"].replace("constexpr bool RELU = true",
                                                                    "constexpr bool RELU = false")
    assert bad != seg.files
    seg.files = bad
    r = d.verify(samples=11, seed=2)
    assert not r.ok and "FAIL" in r.verdict()
    assert [s.ok for s in r.segments] == [True, False, True]


def test_streamed_middle_saves_reloads_and_runs_from_the_cli(tmp_path, capsys):
    from aieflow.cli import main

    dims = [40, 48, 32, 16]
    model = _mlp(dims, seed=1)
    d, x = _compile(model, dims, ["2"])
    assert [s.kind for s in d.specs] == ["resident", "streamed", "resident"]
    e = d.estimate()
    assert e.latency_ns == pytest.approx(sum(c.latency_ns for c in e.segments))
    assert e.interval_ns == pytest.approx(sum(c.interval_ns for c in e.segments))  # the host runs them in turn
    assert e.segments[0].boundary_ns > 0 and e.segments[2].boundary_ns > 0  # the cut tensors through DDR
    assert e.fits_one_array and e.tiles_used == sum(c.tiles for c in e.segments)
    d.save(tmp_path / "out")
    out = tmp_path / "out"
    for spec in d.specs:
        assert (out / "segments" / spec.name / "design.json").is_file()
        assert (out / "segments" / spec.name / "project" / "Makefile").is_file()
    assert (out / "README.md").read_text().count("| `segments/") == 3
    loaded = aieflow.load(out)
    assert isinstance(loaded, SegmentedDesign)
    assert isinstance(loaded.segments[0], Design) and isinstance(loaded.segments[1], StreamedDenseDesign)
    assert loaded.to_json() == d.to_json() and loaded.summary() == d.summary()
    xs = np.random.default_rng(4).uniform(-6, 6, size=(21, 40))
    xs[0], xs[1] = 1e3, -1e3  # saturate at the input
    assert np.array_equal(loaded.predict(xs, raw=True), d.predict(xs, raw=True))
    xq = loaded.quantise_input(xs)
    assert np.array_equal(loaded.run(xq), _reference(d.graph, xq))
    np.save(tmp_path / "x.npy", xs)
    assert main(["predict", str(out), "--input", str(tmp_path / "x.npy"), "--output", str(tmp_path / "y.npy")]) == 0
    assert np.array_equal(np.load(tmp_path / "y.npy"), d.predict(xs))
    capsys.readouterr()
    assert main(["report", str(out)]) == 0
    assert d.summary() in capsys.readouterr().out
    svg = (out / "placement.svg").read_text()
    assert svg.startswith("<svg") and svg.count("segment 0") == 3
    assert main(["verify", str(out), "--input", str(tmp_path / "x.npy"), "--quiet"]) == 0
    assert "PASS, bit-exact end to end" in capsys.readouterr().out


# ----------------------------------------------------------------------------- the choice


def test_a_chain_that_fits_stays_resident():
    dims = [64, 48, 32, 10]
    d, _ = _compile(_mlp(dims), dims)
    assert isinstance(d, Design)


def test_a_layer_too_large_alone_streams_and_the_rest_stays_resident():
    dims = [4096, 4096, 16]
    d, x = _compile(_mlp(dims), dims)
    assert isinstance(d, SegmentedDesign)
    assert [s.kind for s in d.specs] == ["streamed", "resident"]
    assert list(d.reasons) == ["0"] and "do not fit on chip" in d.reasons["0"]
    assert d.estimate().bound.startswith("segment 00_streamed")
    xs = x.numpy()[:5]
    assert np.array_equal(d.predict(xs), aieflow.emulate(_mlp(dims), "vck190", x).predict(xs))


def test_a_chain_that_does_not_fit_streams_the_cheapest_layer_that_makes_it_fit():
    """Every layer fits alone, the chain does not (on AIE1 a middle 1536 x 1536 layer reading its
    producer's buffers has no plan): the chooser must stream one layer, and the smallest one whose
    streaming lets the rest fit, by the resident planner (the memory model) itself."""
    from aieflow.gemm.segmented import _FitCache, subgraph
    from aieflow.pipeline import State, run_pipeline

    dims = [1024, 1536, 1536, 512, 16]
    model = _mlp(dims)
    with pytest.raises(PlanError, match="do not fit"):
        _compile(model, dims, layers={n: {"weights": "resident"} for n in "0246"})
    d, x = _compile(model, dims)
    assert isinstance(d, SegmentedDesign)
    assert list(d.reasons) == ["0"] and "cheapest that makes it fit" in d.reasons["0"]
    q = run_pipeline(State(model, d.device, d.config, example_input=x.numpy()), stop_after="quantise")
    cache = _FitCache(q)
    dense = [n.name for n in q.graph.nodes if n.op == "dense"]
    sizes = {n: q.graph.node(n).params["weight_q"].size for n in dense}
    for n in dense:  # each layer alone is resident
        assert cache.check(subgraph_spec(q.graph, n)) is None
    for n in sorted(dense, key=sizes.get):
        fits = all(cache.check(s) is None for s in partition(q.graph, {n}) if s.kind == "resident")
        if sizes[n] < sizes["0"]:
            assert not fits, n  # a smaller layer would not have been enough
    assert all(cache.check(s) is None for s in partition(q.graph, {"0"}) if s.kind == "resident")
    assert subgraph(q.graph, d.specs[1]).inputs == (d.specs[0].output,)


def subgraph_spec(graph, name):
    """The segment spec of one layer planned alone."""
    return next(s for s in partition(graph, {n.name for n in graph.nodes if n.op == "dense" and n.name != name})
                if s.kind == "resident")


# ----------------------------------------------------------------------------- what stays unsupported


def test_fp32_streamed_layer_in_a_chain_compiles_in_its_gemm_order():
    # no longer refused: the chain's emulator computes layer 2 in its GEMM's float order, as its
    # segment does (x86 checks in tests/test_streamed_fp32.py)
    dims = [32, 24, 16]
    d, x = _compile(_mlp(dims), dims, ["2"], precision="fp32")
    assert isinstance(d, SegmentedDesign) and d.segments[-1].is_float
    xq = d.quantise_input(x.numpy())
    assert np.array_equal(d.run(xq), d.run_segments(xq))
    assert "numerics: fp32 in the GEMM's order" in d.summary()


def test_batch_lists_are_refused():
    # integer chains with streamed layers on VEK280 / VEK385: tests/test_streamed_int_aieml.py
    dims = [32, 24, 16]
    with pytest.raises(ConfigError, match=r"config option .batch. \(\[8, 16\]\) does not apply to segmented designs"):
        _compile(_mlp(dims), dims, ["0"], batch=[8, 16])


def test_a_streamed_layer_on_a_residual_branch_cannot_be_cut_out():
    class Residual(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc1, self.fc2 = torch.nn.Linear(16, 16), torch.nn.Linear(16, 8)

        def forward(self, x):
            return self.fc2(torch.relu(self.fc1(x)) + x)

    torch.manual_seed(0)
    # (aieflow.compile refuses residual graphs on VCK190 before streaming is considered; the cut
    # itself refuses them too, whatever the device)
    g = aieflow.emulate(Residual().eval(), "vck190", torch.randn(8, 16)).graph
    fc1 = next(n.name for n in g.nodes if n.op == "dense" and "fc1" in (n.name, *n.aliases))
    with pytest.raises(PlanError, match="cannot be cut out of the graph") as e:
        partition(g, {fc1})
    assert "exactly one" in str(e.value)


def test_a_damaged_segmented_design_is_a_clear_error(tmp_path):
    dims = [24, 16, 8]
    d, _ = _compile(_mlp(dims), dims, ["0"])
    d.save(tmp_path / "out")
    path = tmp_path / "out" / "design.json"
    meta = json.loads(path.read_text())
    meta["segments"][0]["kind"] = "resident"
    meta.pop("integrity", None)  # as an older save (no record): the loader's own check speaks
    path.write_text(json.dumps(meta))
    with pytest.raises(AieflowError, match="is a streamed_dense design") as e:
        aieflow.load(tmp_path / "out")
    assert "re-run aieflow compile" in str(e.value)
    d.save(tmp_path / "out", force=True)
    meta = json.loads(path.read_text())
    meta["segments"][1]["input"] = "nope"
    meta.pop("integrity", None)  # as an older save (no record): the loader's own check speaks
    path.write_text(json.dumps(meta))
    with pytest.raises(AieflowError, match="says"):
        aieflow.load(tmp_path / "out")


def test_budgets_hold_for_the_whole_segmented_design():
    """A tiles budget that each resident segment meets alone but the segments together exceed is
    refused by name (the segments share the array); a budget the whole design meets compiles, and
    design.json records each segment's replicas."""
    dims = [40, 48, 32, 16]
    model = _mlp(dims, seed=1)
    d, _ = _compile(model, dims, ["2"])
    e = d.estimate()
    per = [c.tiles for c in e.segments]
    assert len(per) == 3 and e.tiles_used == sum(per)
    assert [c["replicas"] for c in d.to_json()["performance"]["segments"]] == [1, 1, 1]
    tight = max(per[0], per[2]) + 0  # each resident segment fits alone, the whole design does not
    assert tight < e.tiles_used
    with pytest.raises(PlanError, match="tiles <= ") as err:
        _compile(model, dims, ["2"], target=f"tiles <= {tight}")
    assert "over all its segments" in str(err.value)
    ok, _ = _compile(model, dims, ["2"], target=["resources", f"tiles <= {e.tiles_used}"])
    assert ok.estimate().tiles_used <= e.tiles_used
