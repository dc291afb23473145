"""One design protocol and one design.json schema for every design kind (issue 17, item 3).

A design of every kind (Dense chain on AIE1 and AIE-ML, DAG, CNN in both mappings and a residual
CNN, one recurrent layer and a stack, a streamed Dense layer, a chain in segments, GEMM on VCK190
and VEK280) implements ``aieflow.protocol``; its design.json validates against
``schema/design.schema.json`` (checked with the ``jsonschema`` library); its common performance
keys agree with its own estimate; it saves, loads back (GEMM included) and reports with a
placement picture.
"""

from __future__ import annotations

import json
import pickle
import xml.etree.ElementTree as ET

import jsonschema
import numpy as np
import pytest
from cases import DESIGN_KINDS, build_design, design_case

import aieflow
from aieflow.cli import main
from aieflow.design_schema import COMMON_PERFORMANCE, schema
from aieflow.graph_io import json_default
from aieflow.protocol import AnyDesign, ModelDesign, Performance

KINDS = DESIGN_KINDS  # test name -> (design.json kind, class name)
_build = build_design


@pytest.fixture(scope="module", params=list(KINDS))
def built(request):
    d, x = _build(request.param)
    return request.param, d, x


def _json(d):
    return json.loads(json.dumps(d.to_json(), default=json_default))


def test_every_kind_follows_the_protocol_and_the_schema(built):
    name, d, x = built
    kind, cls = KINDS[name]
    assert type(d).__name__ == cls
    assert isinstance(d, AnyDesign)
    assert isinstance(d, ModelDesign) == (kind != "gemm")
    j = _json(d)
    jsonschema.validate(j, schema())
    assert j["kind"] == kind and j["schema"] == 2
    perf = j["performance"]
    assert set(COMMON_PERFORMANCE) <= set(perf)
    # the model's error band of these (array-only) figures, and the summary says it (perf/bands.py)
    assert perf["error_band"]["class"] == "array" and perf["error_band"]["figures"] >= 1
    assert "model error band of these figures" in d.summary()
    # the common figures are the design's own ones, in the common units
    e = d.estimate()
    if kind == "cnn":
        assert perf["latency_ns"] == pytest.approx(e.latency_s * 1e9) and perf["batch"] == 1
        assert perf["replicas"] == e.replicas
        assert perf["throughput_ops_per_s"] == pytest.approx(2 * e.fps * e.macs_per_frame)
    elif kind == "recurrent":
        assert perf["latency_ns"] == pytest.approx(e.sequence_latency_ns) and perf["batch"] == 1
        assert perf["interval_ns"] == pytest.approx(e.step_interval_ns * e.steps)  # a sequence's steps, one after the other
        assert perf["step_interval_ns"] == pytest.approx(e.model.interval_ns)
    assert perf["latency_ns"] == pytest.approx(e.latency_ns) and perf["interval_ns"] == pytest.approx(e.interval_ns)
    assert perf["tiles_used"] == j["resources"]["compute_tiles"]
    assert perf["tiles_used"] <= j["resources"]["compute_tiles_available"]
    assert j["resources"]["memory_tiles"] == perf["memory_tiles_used"]
    if d.to_json()["device"]["key"] == "vck190":
        assert perf["memory_tiles_used"] == 0  # AIE1 has none
    assert all(part["ns"] >= 0 for part in perf["breakdown"].values())
    # the slowest stage cannot take longer than the interval it sets (rounding aside)
    if kind in ("chain", "dag", "segmented"):
        assert max(p["ns"] for p in perf["breakdown"].values()) <= perf["interval_ns"] * 1.000001


def test_every_kind_saves_loads_and_reports(built, tmp_path, capsys):
    name, d, x = built
    out = d.save(tmp_path / "d")
    saved = json.loads((out / "design.json").read_text())
    jsonschema.validate(saved, schema())
    back = aieflow.load(out)
    assert type(back) is type(d)
    assert _json(back)["performance"] == _json(d)["performance"]
    if x is not None:
        np.testing.assert_array_equal(back.predict(x[:4]), d.predict(x[:4]))
    text = back.report()
    assert text.startswith(back.summary().splitlines()[0]) and len(text.splitlines()) > len(back.summary().splitlines()) - 1
    svg = ET.fromstring(back.placement_svg())
    assert any(e.tag.endswith("rect") for e in svg.iter())
    assert main(["report", str(out), "--svg", str(tmp_path / "p.svg")]) == 0
    assert ET.parse(tmp_path / "p.svg").getroot().tag.endswith("svg")
    assert back.summary().splitlines()[0] in capsys.readouterr().out


def _model_macs(name):
    """Multiply-accumulates of one sample, counted here from the model itself (its PyTorch modules'
    shapes through forward hooks, the ONNX MatMul weights, the GEMM's m n k), not by aieflow."""
    import torch

    if name.startswith("gemm"):
        return 256 * 64 * 128
    model, x, _, _ = design_case(name)
    if not isinstance(model, torch.nn.Module):  # the QDQ ONNX MLP: its 2-D initializers are the weights
        import onnx.numpy_helper

        return sum(w.size for w in map(onnx.numpy_helper.to_array, model.graph.initializer) if w.ndim == 2)
    macs = []

    def hook(mod, args, out):
        out = out[0] if isinstance(out, tuple) else out
        if isinstance(mod, torch.nn.Linear):
            macs.append(mod.in_features * out.numel())
        elif isinstance(mod, torch.nn.modules.conv._ConvNd):
            macs.append(out.numel() * mod.in_channels // mod.groups * int(np.prod(mod.kernel_size)))
        elif isinstance(mod, torch.nn.GRU):
            steps, h = args[0].shape[1], mod.hidden_size
            macs.extend(3 * h * (n_in + h) * steps for n_in in [mod.input_size] + [h] * (mod.num_layers - 1))

    for m in model.modules():
        if isinstance(m, (torch.nn.Linear, torch.nn.modules.conv._ConvNd, torch.nn.GRU)):
            m.register_forward_hook(hook)
    with torch.no_grad():
        model(torch.as_tensor(x[:1]))
    return sum(macs)


SAMPLES = {"chain-vck190": 8, "chain-vek280": 8, "dag": 8, "recurrent": 1, "recurrent-stack": 1,
           "recurrent-compact": 1, "recurrent-grid": 1, "gemm-vck190": 1, "gemm-vek280": 1, "streamed-dense": 8,
           "segmented": 8}
"""Samples per batch: the cases' ``batch`` (chain, DAG; the default 8 for the streamed layer and the
segments), one sequence (recurrent), one C = A B (GEMM)."""


def test_every_kind_estimate_is_the_common_performance_of_its_design_json(built, tmp_path):
    """``estimate()`` follows ``protocol.Performance`` with design.json's names and units: each
    common figure equals the saved design.json's after a save and a load, and throughput = 2 x the
    model's MACs x batch x replicas / interval (a batch is one replica's)."""
    name, d, _ = built
    kind = KINDS[name][0]
    e = d.estimate()
    assert isinstance(e, Performance)
    saved = json.loads((d.save(tmp_path / "d") / "design.json").read_text())["performance"]
    back = aieflow.load(tmp_path / "d").estimate()
    assert isinstance(back, Performance)
    for key in COMMON_PERFORMANCE:
        if key == "breakdown":
            for perf in (e, back):
                parts = perf.breakdown_parts()
                assert [n for n, _, _ in parts] == [n.split("#")[0] for n in saved["breakdown"]]
                assert [ns for _, ns, _ in parts] == pytest.approx([p["ns"] for p in saved["breakdown"].values()])
            continue
        assert getattr(e, key) == pytest.approx(saved[key]) and getattr(back, key) == pytest.approx(saved[key]), key
    assert e.batch == (1 if kind == "cnn" else SAMPLES[name])  # CNN: a frame per replica
    if kind == "recurrent":  # a sequence's 5 steps, one after the other
        assert e.interval_ns == pytest.approx(5 * e.step_interval_ns)
        assert e.latency_ns > e.interval_ns
    replicas = (d.config.replicas or 1) if kind == "chain" else d.plan.replicas if kind == "cnn" else 1
    assert e.replicas == replicas
    ops = 2 * _model_macs(name) * e.batch * replicas
    assert e.throughput_ops_per_s == pytest.approx(ops / (e.interval_ns * 1e-9), rel=1e-9)


def test_every_kind_pickles(built):
    name, d, x = built
    back = pickle.loads(pickle.dumps(d))
    assert _json(back) == _json(d)
    if x is not None:
        np.testing.assert_array_equal(back.predict(x[:4]), d.predict(x[:4]))


def test_the_schema_refuses_a_design_without_the_common_keys(built):
    _, d, _ = built
    j = _json(d)
    for key in ("latency_ns", "breakdown", "memory_tiles_used"):
        bad = json.loads(json.dumps(j))
        del bad["performance"][key]
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(bad, schema())
    bad = json.loads(json.dumps(j))
    bad["performance"]["breakdown"] = {"x": {"cycles": 3}}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, schema())


def test_a_recurrent_design_saved_before_the_common_schema_loads(tmp_path):
    d, x = _build("recurrent")
    out = d.save(tmp_path / "old")
    meta = json.loads((out / "design.json").read_text())
    meta["device"] = d.device.board  # the old form: the board's name
    for key in ("schema", "aieflow", "resources", "project_files", "integrity"):
        del meta[key]
    (out / "design.json").write_text(json.dumps(meta))
    back = aieflow.load(out)
    np.testing.assert_array_equal(back.predict(x[:3]), d.predict(x[:3]))


def test_a_loaded_gemm_refuses_an_edited_plan_and_verifies(tmp_path):
    d, _ = _build("gemm-vck190")
    out = d.save(tmp_path / "g")
    back = aieflow.load(out)
    a = np.random.default_rng(1).integers(-128, 128, (256, 128))
    b = np.random.default_rng(2).integers(-128, 128, (128, 64))
    np.testing.assert_array_equal(back.predict(a, b), a @ b)  # int8 x int8 sums are exact in int32
    meta = json.loads((out / "design.json").read_text())
    meta["blocks"]["kc"] += 16
    (out / "design.json").write_text(json.dumps(meta))
    with pytest.raises(aieflow.AieflowError, match="changed after aieflow saved it"):
        aieflow.load(out)  # the integrity record speaks first; without it, the loader's own check:
    del meta["integrity"]
    (out / "design.json").write_text(json.dumps(meta))
    with pytest.raises(aieflow.AieflowError, match="differs"):
        aieflow.load(out)
