"""The model's error bands (issue 21, item 4; ``perf/bands.py``): what the tools print next to a
modelled figure is the range of errors of its class in docs/validation.md, and is current."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

import aieflow
from aieflow.model_zoo import qdq_mlp
from aieflow.perf.bands import band, bands, from_results, summary_line
from aieflow.perf.published import evaluate

ROOT = Path(__file__).resolve().parent.parent


def _doc_errors() -> dict[str, list[float]]:
    """The main table of docs/validation.md, read as text: the error column per spec set
    (calibration -> kernel, claim -> array), rows without a number left out."""
    out: dict[str, list[float]] = {"kernel": [], "array": []}
    lines = (ROOT / "docs" / "validation.md").read_text().splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("| figure | source | published"))
    cols = [c.strip() for c in lines[header].strip("|").split("|")]
    for line in lines[header + 2:]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip().strip("|"))]
        row = dict(zip(cols, cells, strict=True))
        if row["error %"] in ("n/a", ""):
            continue
        out["kernel" if row["spec set"] == "calibration" else "array"].append(float(row["error %"]) / 100)
    return out


def test_the_bands_are_the_error_ranges_of_docs_validation():
    doc = _doc_errors()
    assert len(doc["kernel"]) >= 20 and len(doc["array"]) >= 1
    for cls, errs in doc.items():
        b = band(cls)
        assert b.figures == len(errs)
        # the page rounds to 0.1 %
        assert b.low == pytest.approx(min(errs), abs=0.0006) and b.high == pytest.approx(max(errs), abs=0.0006)
    assert band("system").figures == 0 and not band("system").known


def test_the_shipped_bands_are_what_the_model_gives_today():
    """bands.json is written by benchmarks/validate.py; a model change that moves a figure and is
    not followed by a re-run shows here."""
    assert from_results(evaluate()) == bands()


def test_designs_and_explore_carry_the_band():
    mlp = qdq_mlp([32, 64, 16], seed=1)
    d = aieflow.compile(mlp, device="vek280")
    j = json.loads(json.dumps(d.to_json()))
    assert j["performance"]["error_band"] == {"class": "array", "low": band("array").low,
                                               "high": band("array").high, "figures": band("array").figures}
    assert summary_line() in d.summary() and summary_line() in d.report()
    low = f"{100 * band('array').low:+.1f}%"
    assert low in d.summary()


def test_explore_prints_the_band(tmp_path, capsys):
    import onnx

    from aieflow.cli import main

    path = tmp_path / "m.onnx"
    onnx.save(qdq_mlp([32, 64, 16], seed=1), path)
    assert main(["explore", str(path), "--target", "latency"]) == 0
    assert summary_line() in capsys.readouterr().out
    assert main(["explore", str(path), "--target", "latency", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["error_band"]["class"] == "array"
