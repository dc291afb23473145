"""CNN mappings (aieflow.cnn): the ESPCN thesis design from examples/espcn/thesis.yaml, aieflow's own
stream design (fp32 and int8), a small classifier; plans, model, errors and x86 verification of
the generated C++ (AI Engine kernels, PL HLS kernels, graph) bit for bit against the emulator."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml

torch = pytest.importorskip("torch")

import aieflow  # noqa: E402
from aieflow import model_zoo  # noqa: E402
from aieflow.cnn.emit import tile_params  # noqa: E402
from aieflow.cnn.plan import StreamLayer  # noqa: E402
from aieflow.errors import ConfigError, PlanError  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
THESIS_YAML = REPO / "examples" / "espcn" / "thesis.yaml"
LUT = {"tanh": "espcn-thesis"}


def _espcn():
    return model_zoo.espcn()


def _frames(shape, seed=0):
    return np.random.default_rng(seed).uniform(0, 1, size=shape).astype(np.float32)


@pytest.fixture(scope="module")
def espcn_designs():
    model, x = _espcn(), _frames((6, 1, 16, 16))
    thesis = aieflow.compile(model, device="vck190", example_input=x, calibration=x,
                             config=yaml.safe_load(THESIS_YAML.read_text()))
    ours = aieflow.compile(model, device="vck190", example_input=x, calibration=x,
                           config={"precision": "fp32", "activations": LUT})
    ours8 = aieflow.compile(model, device="vck190", example_input=x, calibration=x,
                            config={"precision": "int8", "activations": LUT})
    return x, thesis, ours, ours8


def test_thesis_yaml_uses_the_published_kernels_and_reports_borrowed_memory(espcn_designs):
    _, thesis, _, _ = espcn_designs
    p = thesis.plan
    assert p.mapping == "thesis"
    spec = {"conv1": ((64, 32, 256), (16, 64), 16, 2), "conv3": ((32, 576, 256), (8, 8), 128, 1),
            "conv4": ((4, 288, 256), (4, 16), 16, 1)}  # shared/spec/espcn-super-resolution.md
    for lay in p.layers:
        mkn, tile, kernels, chunks = spec[lay.stage]
        assert (lay.m, lay.k_pad, lay.n) == mkn and (lay.tile_m, lay.tile_n) == tile
        assert lay.kernels == kernels and lay.k_chunks == chunks and lay.mmul == (4, 2, 4)
    assert [lay.pl_clock_hz for lay in p.layers] == [260e6] * 3
    assert p.layers[0].plio_in == 4 and p.layers[0].plio_out == 16
    usage = {u["layer"]: u for u in thesis.tile_usage()}
    # conv3's kernels hold 576 x 8 patches + 8 x 576 weights in fp32: more than one tile's 32 KB
    assert usage["conv3"]["bytes_per_kernel"] > 32768 and usage["conv3"]["borrowed_per_kernel"] > 0
    assert usage["conv1"]["borrowed_per_kernel"] == 0 and usage["conv4"]["borrowed_per_kernel"] == 0
    assert p.borrowed_bytes == 128 * usage["conv3"]["borrowed_per_kernel"]
    assert "borrows" in thesis.summary() and thesis.plan.tiles == 160
    files = thesis.files
    assert "pl/thesis_pl.cpp" in files and "system.cfg" in files
    assert "adf::single_buffer" in files["src/graph.h"] and "aie::mmul<M, K, N, float, float, accfloat>" in files[
        "src/kernels/thesis_kernels.h"]
    assert "HLS PIPELINE II = 1" in files["pl/thesis_pl.h"]


def test_thesis_model_is_bound_by_the_sequential_pl_loops(espcn_designs):
    _, thesis, _, _ = espcn_designs
    e = thesis.estimate()
    pl = sum(s.seconds for s in e.stages if s.where == "pl")
    assert pl > 0.9 * e.latency_s and e.bound.startswith("pl")
    # the activation kernel after conv1 (pl/thesis_pl.h), one element per cycle at 260 MHz: per output
    # tile (16 of 16 x 64) read_window + reorder, the LUT over 64 x 256, per conv3 N block (32) the
    # im2col loop + write_window over 576 x 8; each loop execution (trips - 1) + 8 (depth, assumed) +
    # 2 (UG1399: into and out of the inner loop) cycles; all of it on the frame's path
    act1 = next(s for s in e.stages if s.stage == "conv1:activation")
    cycles = 2 * 16 * (1024 - 1 + 10) + (64 * 256 - 1 + 10) + 2 * 32 * (576 * 8 - 1 + 10)
    assert act1.seconds == pytest.approx(cycles / 260e6)



def test_the_summary_prints_the_bound_share_as_a_percentage(espcn_designs):
    """The thesis bound's share of the frame reads "NN% of the frame" in the summary (it once went
    through the name sanitiser, which writes '%' as '%25')."""
    _, thesis, ours, _ = espcn_designs
    e = thesis.estimate()
    pl = sum(s.seconds for s in e.stages if s.where == "pl")
    line = next(x for x in thesis.summary().splitlines() if "modelled:" in x)
    assert f"bound: pl ({100 * pl / e.latency_s:.0f}% of the frame)" in line, line
    assert "%25" not in thesis.summary() and "%25" not in thesis.report()
    # a stream design's bound names a stage, printed as the model named it (plain names stay plain)
    stream_bound = ours.estimate().bound
    assert f"bound: {stream_bound}" in ours.summary() and stream_bound.split(": ", 1)[1] in {
        s.name for s in ours.plan.stages} | {"output", "input"}

def test_ours_is_at_least_five_times_the_thesis_at_equal_output(espcn_designs):
    x, thesis, ours, ours8 = espcn_designs
    assert ours.plan.mapping == "stream"
    assert ours.estimate().fps >= 5 * thesis.estimate().fps
    assert ours8.estimate().fps > ours.estimate().fps
    # same numerics (fp32, the thesis's tanh table): identical outputs, hence equal PSNR
    assert np.array_equal(ours.predict(x), thesis.predict(x))
    assert ours.plan.tiles <= 400 and all(lay.memory.borrowed == 0 for lay in ours.plan.layers)


@pytest.mark.parametrize("which", ["thesis", "ours", "ours8"])
def test_espcn_generated_cpp_is_bit_exact(espcn_designs, which):
    x, thesis, ours, ours8 = espcn_designs
    design = {"thesis": thesis, "ours": ours, "ours8": ours8}[which]
    result = design.verify(x[:3])
    assert result.ok, result.verdict()
    assert result.values == 3 * 32 * 32
    result = design.verify(samples=3, seed=5)  # type-edge frames (zeros, -0.0, +-1, extremes)
    assert result.ok, result.verdict()


@pytest.mark.parametrize("precision", ["fp32", "int8"])
def test_classifier_compiles_verifies_and_estimates(precision):
    torch.manual_seed(1)
    model = model_zoo.cnn_classifier()
    x = _frames((12, 3, 32, 32), seed=2) * 2 - 1
    d = aieflow.compile(model, device="vck190", example_input=x[:4], calibration=x, config={"precision": precision})
    kinds = [s.kind for s in d.plan.stages]
    assert kinds == ["conv", "pool", "conv", "pool", "conv", "pool", "conv"]
    assert d.plan.stages[-1].geometry.kernel == (1, 1) and d.plan.stages[-1].out_shape == (10, 1, 1)
    with torch.no_grad():
        ref = model(torch.from_numpy(x)).numpy()
    got = d.predict(x)
    tol = 1e-4 if precision == "fp32" else 0.25 * np.abs(ref).max()
    assert np.abs(got - ref).max() < tol
    e = d.estimate()
    assert e.fps > 0 and e.latency_s > 0 and d.plan.tiles >= 7
    result = d.verify(x[:5])
    assert result.ok, result.verdict()


def test_tile_parameters_are_a_partition_of_the_weight_matrix(espcn_designs):
    """Every weight of conv3 lands in exactly one tile's block, at the (k, channel) the layout says."""
    _, _, ours, _ = espcn_designs
    s, lay = ours.plan.stages[1], ours.plan.layers[1]
    assert isinstance(lay, StreamLayer)
    m, k, n = lay.mmul
    seen = np.zeros(s.weight.shape, dtype=int)
    for r in range(lay.cas_num):
        for j in range(lay.cas_len):
            blocks = tile_params(s, lay, r, j)["w"]
            kp, op = -(-lay.k_tile // k) * k, -(-lay.out_group // n) * n
            w = blocks.reshape(op // n, kp // k, k, n).transpose(1, 2, 0, 3).reshape(kp, op)
            rows = slice(j * lay.k_tile, (j + 1) * lay.k_tile)
            cols = slice(r * lay.out_group, (r + 1) * lay.out_group)
            assert np.array_equal(w[:lay.k_tile, :lay.out_group], s.weight[rows, cols])
            assert not w[lay.k_tile:].any() and not w[:, lay.out_group:].any()
            seen[rows, cols] += 1
    assert (seen == 1).all()


def test_errors_name_the_layer_and_what_to_change():
    model, x = _espcn(), _frames((2, 1, 16, 16))
    cfg = yaml.safe_load(THESIS_YAML.read_text())
    cfg["layers"]["conv3"]["mapping"]["kernels"] = 64
    with pytest.raises(PlanError, match="conv3.*64 kernels"):
        aieflow.compile(model, device="vck190", example_input=x, config=cfg)
    cfg = yaml.safe_load(THESIS_YAML.read_text())
    cfg["layers"]["conv1"]["mapping"]["groups"] = 2
    with pytest.raises(ConfigError, match="layers.conv1.mapping.*groups"):
        aieflow.compile(model, device="vck190", example_input=x, config=cfg)
    with pytest.raises(PlanError, match="lookup table") as e:
        aieflow.compile(model, device="vck190", example_input=x, config={"precision": "fp32"})
    assert "conv1" in str(e.value) and "espcn-thesis" in str(e.value)
    with pytest.raises(ConfigError, match="cnn.mapping"):
        aieflow.compile(model, device="vck190", example_input=x, config={"precision": "fp32", "activations": LUT, "cnn": {"mapping": "x"}})
    with pytest.raises(PlanError, match="groups"):
        aieflow.compile(model, device="vck190", example_input=x,
                        config={"precision": "fp32", "activations": LUT, "layers": {"conv1": {"mapping": {"groups": 1}}}})


def test_saved_design_json(tmp_path, espcn_designs):
    _, thesis, ours, _ = espcn_designs
    import json

    out = ours.save(tmp_path / "ours")
    d = json.loads((out / "design.json").read_text())
    assert d["kind"] == "cnn" and d["plan"]["mapping"] == "stream"
    assert d["performance"]["fps"] == pytest.approx(ours.estimate().fps)
    assert (out / "project" / "src" / "graph.h").is_file()
    out = thesis.save(tmp_path / "thesis")
    d = json.loads((out / "design.json").read_text())
    assert [lay["kernels"] for lay in d["plan"]["layers"]] == [16, 128, 16]


def test_saved_designs_load_back_and_predict_the_same(tmp_path, espcn_designs, capsys):
    from aieflow.cli import main

    x, thesis, ours, ours8 = espcn_designs
    for name, design in (("thesis", thesis), ("ours", ours), ("ours8", ours8)):
        out = design.save(tmp_path / name)
        back = aieflow.load(out)
        assert type(back) is type(design)
        assert back.plan.to_json() == design.plan.to_json() and back.files == design.files
        assert back.estimate().fps == design.estimate().fps
        assert np.array_equal(back.predict(x, raw=True), design.predict(x, raw=True))
    np.save(tmp_path / "x.npy", x)
    assert main(["predict", str(tmp_path / "ours8"), "--input", str(tmp_path / "x.npy"), "--raw",
                 "--output", str(tmp_path / "y.npy")]) == 0
    assert np.array_equal(np.load(tmp_path / "y.npy"), ours8.predict(x, raw=True))
    assert main(["report", str(tmp_path / "thesis")]) == 0
    assert "borrowed neighbour memory" in capsys.readouterr().out
    # a hand-edited plan is refused, not silently re-planned
    import json

    meta = json.loads((tmp_path / "ours" / "design.json").read_text())
    meta["plan"]["replicas"] = meta["plan"]["replicas"] + 1
    meta.pop("integrity", None)  # as an older save (no record): the loader's own check speaks
    (tmp_path / "ours" / "design.json").write_text(json.dumps(meta))
    with pytest.raises(aieflow.AieflowError, match="plan .* differs"):
        aieflow.load(tmp_path / "ours")
    (tmp_path / "ours8" / "weights.npz").unlink()
    with pytest.raises(aieflow.AieflowError, match="weights.npz"):
        aieflow.load(tmp_path / "ours8")
