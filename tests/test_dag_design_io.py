"""DAG designs saved and loaded back (``aieflow.load``), and the CLI on them: compile an ONNX
residual MLP, report (with the placement picture), predict, verify."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch
from onnx_files import export_onnx
from test_dag_plan import Residual

import aieflow
from aieflow.cli import main
from aieflow.dag.design import DagDesign

needs_gxx = pytest.mark.skipif(shutil.which("g++") is None, reason="g++ is not installed")


def _data(n=48, f=32, seed=0):
    return np.random.default_rng(seed).standard_normal((n, f)).astype(np.float32)


@pytest.fixture(scope="module")
def residual():
    torch.manual_seed(3)
    model = Residual().eval()
    x = _data()
    d = aieflow.compile(model, device="vek280", example_input=x[:4], calibration=x,
                        config={"precision": "int16", "batch": 8})
    assert isinstance(d, DagDesign)
    return model, x, d


def test_saved_dag_design_loads_back_and_predicts_the_same(tmp_path, residual):
    _, x, d = residual
    out = d.save(tmp_path / "res")
    back = aieflow.load(out)
    assert isinstance(back, DagDesign)
    assert back.files == d.files and back.plan.compute == d.plan.compute
    assert back.placement.rects == d.placement.rects
    assert back.estimate().interval_ns == d.estimate().interval_ns
    assert np.array_equal(back.predict(x, raw=True), d.predict(x, raw=True))
    assert back.to_json()["links"] == json.loads(json.dumps(d.to_json()["links"]))


def test_load_refuses_an_edited_plan_and_missing_files(tmp_path, residual):
    _, _, d = residual
    out = d.save(tmp_path / "res")
    meta = json.loads((out / "design.json").read_text())
    meta["nodes"]["fc1"]["plan"]["cas_len"] += 1  # a hand-edited plan is refused, not re-planned
    meta.pop("integrity", None)  # as an older save (no record): the loader's own check speaks
    (out / "design.json").write_text(json.dumps(meta))
    with pytest.raises(aieflow.AieflowError, match="plan .* differs"):
        aieflow.load(out)
    out2 = d.save(tmp_path / "res2")
    (out2 / "weights.npz").unlink()
    with pytest.raises(aieflow.AieflowError, match="weights.npz"):
        aieflow.load(out2)


def _wire_cost(rects, edges, mu=0.05, lam=1.0):
    """The published J, written out here (no aieflow code): each layer's input enters at its
    bottom-left tile and leaves at its bottom-right one (the cascade runs east on every row of an
    AIE-ML array); sources start at (0, 0)."""
    fed = {q for _, q in edges}
    total = sum(mu * (r["row"] + r["height"] - 1) for r in rects.values())
    total += sum(abs(r["column"]) + lam * abs(r["row"]) for name, r in rects.items() if name not in fed)
    for p, q in edges:
        a, b = rects[p], rects[q]
        total += abs(a["column"] + a["width"] - 1 - b["column"]) + lam * abs(a["row"] - b["row"])
    return total


def test_a_save_without_a_placement_cost_gets_the_dags_own_cost_back(tmp_path, residual):
    """Saves from before branch and bound have no cost: the loader recomputes it over the DAG's
    edges (fc1 -> fc2 -> add), not the chain's layer edges (which miss fc2 -> add, so the Add was
    costed as a source from (0, 0): 3.0 instead of 2.0)."""
    _, _, d = residual
    assert not d.device.generation.cascade_serpentine
    out = d.save(tmp_path / "res")
    meta = json.loads((out / "design.json").read_text())
    rects = meta["placement"]["layers"]
    want = _wire_cost(rects, [tuple(e) for e in d.plan.edges()])
    assert meta["placement"]["cost"] == pytest.approx(want)
    for key in ("cost", "method", "optimal", "weights"):  # as written before branch and bound
        meta["placement"].pop(key)
    meta.pop("integrity", None)
    (out / "design.json").write_text(json.dumps(meta))
    back = aieflow.load(out)
    assert back.placement.method == "first-fit" and back.placement.cost == pytest.approx(want)
    assert back.placement.cost == pytest.approx(d.placement.cost)


@needs_gxx
def test_cli_compiles_reports_predicts_and_verifies_a_dag(tmp_path, residual, capsys):
    model, x, _ = residual
    onnx_path = tmp_path / "res.onnx"
    export_onnx(model, x[:1], onnx_path)
    np.save(tmp_path / "x.npy", x)
    out = tmp_path / "design"
    assert main(["compile", str(onnx_path), "--out", str(out), "--quiet", "--precision", "int8", "--batch", "8",
                 "--calibration", str(tmp_path / "x.npy")]) == 0
    meta = json.loads((out / "design.json").read_text())
    assert meta["kind"] == "dag" and meta["format"] == "aieflow-dag"

    assert main(["report", str(out)]) == 0
    text = capsys.readouterr().out
    assert "DAG" in text and "memory-tile buffers" in text
    svg = (out / "placement.svg").read_text()
    assert svg.startswith("<svg") and all(name in svg for name in meta["nodes"])

    assert main(["predict", str(out), "--input", str(tmp_path / "x.npy"), "--output", str(tmp_path / "y.npy")]) == 0
    with torch.no_grad():
        want = model(torch.from_numpy(x)).numpy()
    got = np.load(tmp_path / "y.npy")
    assert got.shape == want.shape and np.abs(got - want).max() < 0.1 * np.abs(want).max()  # int8 quantisation

    assert main(["verify", str(out), "--samples", "20", "--quiet"]) == 0
    assert "verify: PASS, bit-exact" in capsys.readouterr().out
