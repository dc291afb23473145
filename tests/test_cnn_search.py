"""CNN designs take a target and explore (issue 17, item 7): the stream mapping's candidates
(group counts x replicas) are ranked by the target as for chains and DAGs, ``aieflow explore``
lists their Pareto front, and the compiled design's estimate is the front point of its own plan
(one cost model: ``cnn.perf.estimate`` of the same plan in both)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml
from onnx_files import export_onnx

import aieflow
from aieflow.cli import main
from aieflow.errors import AieflowError
from aieflow.model_zoo import cnn_classifier, espcn

IMG = np.random.default_rng(0).uniform(-1, 1, (4, 3, 32, 32)).astype(np.float32)
THESIS_YAML = Path(__file__).resolve().parents[1] / "examples" / "espcn" / "thesis.yaml"


def _compile(**config):
    return aieflow.compile(cnn_classifier(), device="vck190", example_input=IMG, config={"precision": "int8", **config})


def _figures(d):
    e = d.estimate()
    return d.plan.tiles, e.latency_s * 1e9, e.interval_s * 1e9, d.plan.replicas


@pytest.fixture(scope="module")
def front():
    return aieflow.explore(cnn_classifier(), device="vck190", example_input=IMG, config={"precision": "int8"})


def test_the_front_is_pareto_over_tiles_latency_and_interval_per_frame(front):
    pts = front.front
    assert len(pts) >= 3 and front.candidates >= len(pts)
    for p in pts:
        dominated = [q for q in pts if q is not p and q.tiles <= p.tiles and q.latency_ns <= p.latency_ns
                     and q.sample_interval_ns <= p.sample_interval_ns
                     and (q.tiles, q.latency_ns, q.sample_interval_ns) != (p.tiles, p.latency_ns, p.sample_interval_ns)]
        assert not dominated, (p, dominated)
    assert [p.tiles for p in pts] == sorted(p.tiles for p in pts)


@pytest.mark.parametrize("target", ["resources", "latency", "throughput"])
def test_compile_builds_the_point_explore_picks(target):
    ex = aieflow.explore(cnn_classifier(), device="vck190", example_input=IMG,
                         config={"precision": "int8", "target": target})
    d = _compile(target=target)
    tiles, latency, interval, reps = _figures(d)
    c = ex.chosen
    assert (c.tiles, c.replicas) == (tiles, reps)
    assert c.latency_ns == pytest.approx(latency, rel=1e-12) and c.interval_ns == pytest.approx(interval, rel=1e-12)
    # the pick is the best on the front by the objective
    key = {"resources": lambda p: p.tiles, "latency": lambda p: p.latency_ns,
           "throughput": lambda p: p.sample_interval_ns}[target]
    assert key(c) == min(key(p) for p in ex.front)


def test_without_a_target_compile_keeps_the_most_frames_per_second(front):
    tiles, _, interval, reps = _figures(_compile())
    best = min(p.sample_interval_ns for p in front.front)
    assert interval / reps == pytest.approx(best, rel=1e-12)


def test_budgets_hold_and_an_impossible_one_says_what_is_possible(front):
    fewest = min(p.tiles for p in front.front)
    budget = sorted({p.tiles for p in front.front})[1]
    tiles, *_ = _figures(_compile(target=f"throughput, tiles <= {budget}"))
    assert fewest <= tiles <= budget
    with pytest.raises(AieflowError, match="no plan meets the target"):
        _compile(target=f"tiles <= {fewest - 1}")


def test_the_thesis_mapping_takes_no_target_and_is_not_explored():
    x = np.random.default_rng(0).uniform(0, 1, (2, 1, 16, 16)).astype(np.float32)
    cfg = yaml.safe_load(THESIS_YAML.read_text())
    with pytest.raises(AieflowError, match="'target' does not apply to the thesis mapping"):
        aieflow.compile(espcn(), device="vck190", example_input=x, config={**cfg, "target": "latency"})
    with pytest.raises(AieflowError, match="explore searches the stream mapping"):
        aieflow.explore(espcn(), device="vck190", example_input=x, config=cfg)


def test_the_cli_explores_a_cnn(tmp_path, capsys):
    model = tmp_path / "cnn.onnx"
    export_onnx(cnn_classifier(), IMG[:1], model)
    np.save(tmp_path / "x.npy", IMG)
    assert main(["explore", str(model), "--device", "vck190", "--calibration", str(tmp_path / "x.npy"),
                 "--precision", "int8", "--target", "latency"]) == 0
    out = capsys.readouterr().out
    assert "latency" in out and "tiles" in out
