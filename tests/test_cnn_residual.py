"""Residual CNN blocks in the CNN stream mapping (issue 17, item 4): a tensor that fans out to a
convolution branch and a skip path, joined by an element-wise Add (optionally + ReLU), fused into the
epilogue of the branch's last convolution (docs/conv.md).  Checked: predict against PyTorch within
the int8 tolerance of the other CNN tests, the Add's integer semantics against a numpy reference
written here (no aieflow numerics), the generated C++ bit for bit on x86 (random, saturating and
type-edge frames) on AIE1, AIE-ML and AIE-MLv2, the performance model's skip costs, placement /
report / save / load, and the errors for what does not map."""

from __future__ import annotations

import json
import shutil
import xml.etree.ElementTree as ET
from dataclasses import replace

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

import aieflow  # noqa: E402
from aieflow.errors import AieflowError, PlanError  # noqa: E402
from aieflow.model_zoo import residual_cnn  # noqa: E402

needs_cxx = pytest.mark.skipif(shutil.which("g++") is None, reason="g++ not found: verify builds C++20 with g++")
ONE = {"cnn": {"replicas": 1}}  # one copy: the x86 build stays small


class TwoBlocks(nn.Module):
    """Block 1: a one-convolution branch; block 2: a two-convolution branch (the skip spans two
    stages) with a ReLU after the add; then global average pooling (AdaptiveAvgPool2d) + Linear."""

    def __init__(self):
        super().__init__()
        self.c1, self.c2 = nn.Conv2d(3, 8, 3, padding=1), nn.Conv2d(8, 8, 3, padding=1)
        self.c3, self.c4 = nn.Conv2d(8, 8, 3, padding=1), nn.Conv2d(8, 8, 1)
        self.gap, self.fc = nn.AdaptiveAvgPool2d(1), nn.Linear(8, 5)

    def forward(self, x):
        y = torch.relu(self.c1(x))
        z = torch.relu(self.c2(y)) + y
        w = torch.relu(self.c4(torch.relu(self.c3(z))) + z)
        return self.fc(self.gap(w).flatten(1))


class InputSkip(nn.Module):
    """The skip is the network input itself (its PLIO window, broadcast), ReLU after the add."""

    def __init__(self):
        super().__init__()
        self.c0, self.c1 = nn.Conv2d(3, 3, 3, padding=1), nn.Conv2d(3, 6, 3, padding=1)
        self.p, self.fc = nn.AvgPool2d(8), nn.Linear(6, 3)

    def forward(self, x):
        y = torch.relu(self.c0(x) + x)
        return self.fc(self.p(torch.relu(self.c1(y))).flatten(1))


def _frames(n, seed, scale=1.0):
    return (np.random.default_rng(seed).standard_normal((n, 3, 8, 8)) * scale).astype(np.float32)


CAL = _frames(64, 1)


def _compile(model, device, config=None):
    torch.manual_seed(0)
    return aieflow.compile(model, device=device, example_input=CAL[:1], calibration=CAL, config=config)


def _adds(d):
    return [n for n in d.graph.nodes if n.op == "add"]


def _reference_add(a, b, fa, fb, fy, width, relu):
    """The residual add in Python integers: both codes on the grid of max(fa, fb) fractional bits,
    summed exactly, rounded half to even to fy bits, saturated to the signed width, then ReLU.
    Returns the codes, how many sums were ties and how many were clamped."""
    common = max(fa, fb)
    out, ties, clamped = [], 0, 0
    lo, hi = -(2 ** (width - 1)), 2 ** (width - 1) - 1
    for x, y in zip(a.reshape(-1).tolist(), b.reshape(-1).tolist(), strict=True):
        s = int(x) * 2 ** (common - fa) + int(y) * 2 ** (common - fb)
        d = 2 ** (common - fy)
        q, r = divmod(s, d)  # floor division: r in [0, d)
        ties += d > 1 and 2 * r == d
        if 2 * r > d or (2 * r == d and q % 2 == 1):
            q += 1
        clamped += not lo <= q <= hi
        q = max(lo, min(hi, q))
        out.append(max(q, 0) if relu else q)
    return np.array(out, dtype=np.int64).reshape(a.shape), ties, clamped


@pytest.fixture(scope="module")
def brief():
    """The model of the issue, compiled exactly as it asks (vek280, defaults)."""
    model = residual_cnn()
    return model, aieflow.compile(model, device="vek280", example_input=CAL[:1], calibration=CAL)


def test_the_issue_model_compiles_and_predicts_like_torch(brief):
    model, d = brief
    assert [s.kind for s in d.plan.stages] == ["conv", "conv", "pool", "conv"]
    s = d.plan.stages[1]
    assert s.residual is not None and s.residual.skip_from == 0 and s.residual.skip_name == "c1"
    assert s.residual.relu is False and d.plan.stages[2].geometry.kernel == (8, 8)  # global average pooling
    x = _frames(32, 2)
    with torch.no_grad():
        ref = model(torch.from_numpy(x)).numpy()
    assert np.abs(d.predict(x) - ref).max() < 0.25 * np.abs(ref).max()
    # the skip window is counted: in the tile memory, in the plan, in the estimate and in the report
    lay = d.plan.layers[1]
    assert lay.skip == "c1" and lay.skip_bytes == lay.out_group * 64 and d.plan.to_json()["layers"][1]["skip"] == "c1"
    e = d.estimate()
    assert "c2:skip" in [p.stage for p in e.stages] and "c2:skip" in d.report()
    assert "+ skip from c1" in d.summary()
    assert d.plan.tiles == d.plan.tiles_per_replica * d.plan.replicas == sum(t["kernels"] for t in d.tile_usage())


@pytest.mark.parametrize("which", ["brief", "relu-after-add", "two-blocks", "input-skip"])
def test_add_codes_match_an_independent_integer_reference(which):
    model = {"brief": residual_cnn(), "relu-after-add": residual_cnn(relu_after_add=True), "two-blocks": TwoBlocks(),
             "input-skip": InputSkip()}[which]
    d = _compile(model, "vek280")
    x = np.concatenate([_frames(16, 3), _frames(8, 4, scale=40.0)])  # the second half saturates
    trace = d.trace(d.quantise_input(x))
    ties = clamped = 0
    for node in _adds(d):
        t = node.types
        a, b, y = (np.asarray(trace[n], dtype=np.int64) for n in (*node.inputs, node.outputs[0]))
        relu = node.attrs.get("activation") == "relu"
        want, n_ties, n_clamped = _reference_add(a, b, t.a.frac, t.b.frac, t.output.frac, t.output.width, relu)
        assert np.array_equal(y, want), node.name
        ties, clamped = ties + n_ties, clamped + n_clamped
    assert ties > 0  # round half to even is exercised
    if which != "input-skip":  # there both operands share a grid and the sum is one bit coarser: no overflow
        assert clamped > 0  # the saturating inputs reach the clamp
    assert (which in ("relu-after-add", "input-skip")) == all(n.attrs.get("activation") == "relu" for n in _adds(d))
    with torch.no_grad():
        ref = model(torch.from_numpy(x[:16])).numpy()
    assert np.abs(d.predict(x[:16]) - ref).max() < 0.25 * np.abs(ref).max()


def _groups(**g):
    return {"layers": {name: {"mapping": {"groups": n}} for name, n in g.items()}}


CASES = {  # name -> (model, device, config): every generation the stream mapping supports, both kernel
    # variants (ConvLastSkip after a cascade, ConvSingleSkip), a skip from the input, replicas, int16, fp32
    "relu-after-add-vck190-int8-x2": (lambda: residual_cnn(relu_after_add=True), "vck190",
                                      {"precision": "int8", "cnn": {"replicas": 2}, **_groups(c1=2)}),
    "relu-after-add-vck190-fp32": (lambda: residual_cnn(relu_after_add=True), "vck190",
                                   {"precision": "fp32", **ONE, **_groups(c1=2)}),
    "two-blocks-vek385": (TwoBlocks, "vek385", {**ONE, **_groups(c1=2, c3=1)}),
    "input-skip-vek280-int16-x2": (InputSkip, "vek280", {"precision": "int16", "cnn": {"replicas": 2}}),
}


@needs_cxx
@pytest.mark.parametrize("case", list(CASES))
def test_generated_cpp_is_bit_exact(case):
    make, device, config = CASES[case]
    d = _compile(make(), device, config)
    assert any(s.residual for s in d.plan.stages)
    files = d.files
    assert "ConvSingleSkip" in files["src/graph.h"] or "ConvLastSkip" in files["src/graph.h"]
    result = d.verify(np.concatenate([_frames(4, 5), _frames(2, 6, scale=40.0)]))  # random + saturating
    assert result.ok, result.verdict()
    result = d.verify(samples=4, seed=3)  # type-edge frames (zeros, +-1, extremes)
    assert result.ok, result.verdict()


def test_a_branch_of_two_convolutions_is_held_by_the_skip_windows_buffers():
    # one tile per convolution: c2 (the skip's producer) -> c3 -> c4 + add_1.  The skip window is
    # moved by tile DMA, a ping-pong buffer at each end (UG1079 "Tiling Parameters Specification",
    # AM009 "AI Engine Tile to AI Engine Tile Data Communication via Memory and DMA"), so c2 may run
    # four frames ahead of the add: here the slowest step sets the interval.  With the skip's DMA
    # stage taken out of the same mapped graph (one ping-pong buffer, as the old closed form
    # assumed), the simulation holds two frames on the branch: half of c2 + c3 + c4.
    from aieflow.cnn.emit import lower
    from aieflow.mapped.estimate import pipeline
    from aieflow.perf.simulate import run_pipeline

    d = _compile(TwoBlocks(), "vek280", {**ONE, **_groups(c1=1, c3=1)})
    e = d.estimate()
    step = {p.stage: p.seconds for p in e.stages}
    cycle = (step["c2"] + step["c3"] + step["c4"]) / 2
    assert cycle > max(step.values())
    assert e.interval_s == pytest.approx(max(step.values()), rel=1e-9) and e.bound == "aie: c2"
    mg = lower(d.plan)
    skipped = {lk.cost.name for lk in mg.links if lk.cost is not None}
    assert skipped == {"skip:1", "skip:3"}  # c2's and c4's skips (from c1 and c2)
    one = replace(mg, links=tuple(replace(lk, cost=None) if lk.cost and lk.cost.name == "skip:3" else lk
                                  for lk in mg.links))
    assert run_pipeline(pipeline(one)).interval_ns * 1e-9 == pytest.approx(cycle, rel=1e-9)
    assert [s.residual.skip_name for s in d.plan.stages if s.residual] == ["c1", "c2"]
    # the skip transfers are steps of their own (listed before the stage that reads them) and add to
    # the latency only what the branch does not cover
    names = [p.stage for p in e.stages]
    assert names.index("c2:skip") < names.index("c2") and names.index("c3") < names.index("c4:skip") < names.index("c4")
    chain = sum(p.seconds for p in e.stages if not p.stage.endswith(":skip"))
    assert e.latency_s == pytest.approx(chain + step["c2:skip"], rel=1e-12)  # c4's skip overlaps c3
    # compile without a target is the front point with the most frames per second (one cost model)
    d = _compile(TwoBlocks(), "vek280", ONE)
    front = aieflow.explore(TwoBlocks(), device="vek280", example_input=CAL[:1], calibration=CAL, config=ONE)
    assert any(p.tiles == d.plan.tiles and p.interval_ns == pytest.approx(d.estimate().interval_s * 1e9)
               for p in front.front)


def test_groups_are_tied_to_the_skip_and_a_conflicting_directive_names_both_layers():
    d = _compile(residual_cnn(), "vck190", {"precision": "int8", **ONE})
    c1, c2 = d.plan.layers[0], d.plan.layers[1]
    assert c1.cas_num == c2.cas_num and c2.skip_bytes == c2.out_group * 64
    with pytest.raises(PlanError, match=r"c2.*2 output channel group.*'c1'.*4") as e:
        _compile(residual_cnn(), "vck190",
                 {"precision": "int8", **ONE, "layers": {"c1": {"mapping": {"groups": 4}}, "c2": {"mapping": {"groups": 2}}}})
    assert "'add'" in str(e.value)


def test_the_onnx_export_maps_to_the_same_codes(tmp_path):
    from onnx_files import export_onnx

    model = residual_cnn(relu_after_add=True)
    export_onnx(model, CAL[:1], tmp_path / "res.onnx")
    via_onnx = aieflow.compile(str(tmp_path / "res.onnx"), device="vek280", example_input=CAL[:1], calibration=CAL)
    via_torch = aieflow.compile(model, device="vek280", example_input=CAL[:1], calibration=CAL)
    assert [n.attrs.get("activation") for n in _adds(via_onnx)] == ["relu"]
    assert via_onnx.plan.stages[1].residual is not None and via_onnx.plan.tiles == via_torch.plan.tiles
    x = _frames(8, 9)
    assert np.array_equal(via_onnx.predict(x, raw=True), via_torch.predict(x, raw=True))


def test_save_load_report_and_placement(tmp_path, brief):
    _, d = brief
    out = d.save(tmp_path / "res")
    meta = json.loads((out / "design.json").read_text())
    assert meta["plan"]["layers"][1]["skip"] == "c1" and "c2:skip" in meta["performance"]["breakdown"]
    back = aieflow.load(out)
    assert back.plan.to_json() == d.plan.to_json() and back.files == d.files
    x = _frames(4, 7)
    assert np.array_equal(back.predict(x, raw=True), d.predict(x, raw=True))
    svg = ET.fromstring(d.placement_svg())
    assert any(e.tag.endswith("rect") for e in svg.iter())
    assert "c2:skip" in back.report()


class _Net(nn.Module):
    def __init__(self, forward):
        super().__init__()
        self.c1, self.c2, self.c3 = (nn.Conv2d(3 if i == 0 else 8, 8, 3, padding=1) for i in range(3))
        self.gp, self.sp = nn.AdaptiveAvgPool2d(1), nn.MaxPool2d(3, stride=1, padding=1)
        self.fc = nn.Linear(8, 2)
        self._forward = forward

    def forward(self, x):
        return self.fc(self.gp(self._forward(self, x)).flatten(1))


def _error(forward, device="vek280", config=None):
    with pytest.raises(AieflowError) as e:
        _compile(_Net(forward), device, config)
    return e


def test_what_does_not_map_is_an_error_naming_the_layers():
    # a pooling on the branch changes the shape (PyTorch broadcasts the sum): refused by the front end,
    # naming both operands' producers
    e = _error(lambda s, x: (lambda y: s.gp(s.c2(y)) + y)(torch.relu(s.c1(x))))
    assert "(8, 1, 1) (from 'gp')" in str(e.value) and "(8, 8, 8) (from 'relu')" in str(e.value)
    assert "'add'" in str(e.value)
    # the branch ends in a pooling: nothing to fuse the add into
    e = _error(lambda s, x: (lambda y: s.sp(s.c2(y)) + y)(torch.relu(s.c1(x))))
    assert e.type is PlanError and "'add'" in str(e.value) and "'sp'" in str(e.value) and "pooling" in str(e.value)
    # a projection on the skip path (two branches): the second reads a tensor that is not the chain's
    e = _error(lambda s, x: (lambda y: s.c2(y) + s.c3(y))(torch.relu(s.c1(x))))
    assert e.type is PlanError and "'c3'" in str(e.value) and "'c1'" in str(e.value) and "'c2'" in str(e.value)
    # one skip read by two adds
    e = _error(lambda s, x: (lambda y: s.c3(s.c2(y) + y) + y)(torch.relu(s.c1(x))))
    assert e.type is PlanError and "'add_1'" in str(e.value) and "'c1'" in str(e.value)
    # the thesis mapping refuses by name
    e = _error(lambda s, x: (lambda y: s.c2(y) + y)(torch.relu(s.c1(x))), "vck190",
               {"precision": "fp32", "cnn": {"mapping": "thesis"}})
    assert e.type is PlanError and "'add'" in str(e.value) and "stream mapping" in str(e.value)
    assert "Traceback" not in str(e.value)


def test_a_skip_through_a_same_shape_pooling_maps():
    """A stride-1 pooling inside the branch keeps the shape: the skip window spans two stages."""
    d = _compile(_Net(lambda s, x: (lambda y: torch.relu(s.c2(s.sp(y))) + y)(torch.relu(s.c1(x)))), "vek280", ONE)
    s = next(s for s in d.plan.stages if s.residual)
    assert s.name == "c2" and s.residual.skip_name == "c1" and [t.kind for t in d.plan.stages[:3]] == ["conv", "pool", "conv"]


def test_relu_after_a_dense_residual_add_runs_in_the_dag_add_kernel():
    class Mlp(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1, self.fc2 = nn.Linear(16, 16), nn.Linear(16, 16)

        def forward(self, x):
            return torch.relu(x + self.fc2(torch.relu(self.fc1(x))))

    x = np.random.default_rng(0).standard_normal((16, 16)).astype(np.float32)
    d = aieflow.compile(Mlp().eval(), device="vek280", example_input=x[:8], calibration=x,
                        config={"precision": "int8", "batch": 8})
    add = next(n for n in d.graph.nodes if n.op == "add")
    assert add.attrs["activation"] == "relu"  # fused, not an activation kernel of its own
    assert (d.predict(x) >= 0).all()
    assert (d.predict(x) == 0).any()  # the ReLU clips something: the kernel's max(y, 0) is exercised
    v = d.verify(x * 3.0)
    assert v.ok, v.verdict()
