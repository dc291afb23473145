"""The lowered mapped graph is built once per plan (``mapped/cache.py``): emit and estimate of one
compile share it, repeated estimates reuse it, and a different plan or placement is lowered anew."""

from __future__ import annotations

import dataclasses
import gc

import numpy as np
import pytest
import torch

import aieflow
import aieflow.cnn.emit as cnn_emit
import aieflow.dag.emit as dag_emit
import aieflow.passes.emit as chain_emit
from aieflow.design import Design
from aieflow.mapped import cache
from aieflow.mapped.estimate import pipeline
from aieflow.model_zoo import cnn_classifier, residual_mlp, torch_mlp
from aieflow.perf import estimate
from aieflow.perf.simulate import design_pipeline, run_pipeline


def _counting(monkeypatch, module, name="lower", when=lambda *a, **k: True):
    calls = []
    real = getattr(module, name)

    def counted(*a, **k):
        if when(*a, **k):
            calls.append(a)
        return real(*a, **k)

    monkeypatch.setattr(module, name, counted)
    return calls


def _mlp(dims, **config):
    x = np.random.default_rng(0).standard_normal((32, dims[0])).astype(np.float32)
    return aieflow.compile(torch_mlp(dims), device="vek280", example_input=x[:4], calibration=x,
                           config={"precision": "int8", "batch": 8, **config})


def _fresh(d: Design):
    """The chain's estimate figures from a lowering made here, outside the cache."""
    sim = run_pipeline(pipeline(chain_emit.lower_chain(d.graph, d.device, d.placement, copies=1)))
    return sim.latency_ns, sim.interval_ns, sim.bound


@pytest.mark.parametrize("replicas", [1, 2])
def test_one_chain_compile_lowers_once(monkeypatch, replicas):
    calls = _counting(monkeypatch, chain_emit, "lower_chain")
    d = _mlp([64, 32, 8], replicas=replicas)
    # two lowerings: the placer's (the unplaced design at mapped.place.staging, where it reads the
    # problem) and the placed design's, which emission and every estimate share
    assert len(calls) == 2 and sum(1 for a in calls if a[2] == d.placement) == 1
    first = d.estimate()
    d.to_json()
    again = estimate(Design(d.graph, d.device, d.config, d.placement))  # a new design of the same plan
    assert len(calls) == 2
    assert (again.latency_ns, again.interval_ns, again.bound) == (first.latency_ns, first.interval_ns, first.bound)
    assert [s.busy for s in again.stages] == [s.busy for s in first.stages]
    assert "project_files" in d.to_json() and d.files["src/graph.h"]


def test_a_cached_lowering_is_not_shared_between_plans(monkeypatch):
    a, b = _mlp([64, 32, 8]), _mlp([64, 48, 8])
    calls = _counting(monkeypatch, chain_emit, "lower_chain")
    pa, pb = design_pipeline(a), design_pipeline(b)
    assert len(calls) == 0  # both lowered by their own compile
    assert pa is not pb and pa.stages != pb.stages
    for d in (a, b):
        perf = estimate(d)
        assert (perf.latency_ns, perf.interval_ns, perf.bound) == _fresh(d)
    # the same graph with another placement object (equal or not) is lowered again, not looked up
    calls.clear()
    moved = dataclasses.replace(a.placement, method="moved")
    p2 = design_pipeline(Design(a.graph, a.device, a.config, moved))
    assert len(calls) == 1 and p2 is not pa
    assert p2.stages == pa.stages  # the same rectangles: the same figures


def test_the_memo_lets_go_of_a_collected_plan():
    class Plan:
        pass

    plan, built = Plan(), []
    for _ in range(3):
        assert cache.memo(plan, "x", (), lambda: built.append(1) or len(built)) == 1
    other = Plan()
    assert cache.memo(other, "x", (), lambda: "other") == "other"
    slot = id(plan)
    assert slot in cache._MEMO
    del plan
    gc.collect()
    assert slot not in cache._MEMO and id(other) in cache._MEMO


def test_one_dag_compile_lowers_once(monkeypatch):
    calls = _counting(monkeypatch, dag_emit)
    torch.manual_seed(0)
    x = np.random.default_rng(0).standard_normal((32, 32)).astype(np.float32)
    d = aieflow.compile(residual_mlp(32, 48), device="vek280", example_input=x[:4], calibration=x,
                        config={"precision": "int8", "batch": 8})
    d.estimate(), d.to_json(), d.summary()
    # the placer's unplaced lowering (mapped.place.staging) and the placed one, shared by the rest
    assert len(calls) == 2 and sum(1 for a in calls if a[1] == d.placement) == 1
    headers = [f[4:] for f in d.files if f.startswith("src/weights/")]
    assert headers and all(f"#include \"{h}\"" in d.files["src/graph.h"] or h in d.files["src/graph.h"] for h in headers)


def test_the_cnn_estimate_lowers_its_plan_once(monkeypatch):
    calls = _counting(monkeypatch, cnn_emit, when=lambda *a, **k: k.get("costs") is not None)
    torch.manual_seed(1)
    x = np.random.default_rng(0).standard_normal((8, 3, 32, 32)).astype(np.float32)
    d = aieflow.compile(cnn_classifier(), device="vek280", example_input=x[:2], calibration=x,
                        config={"precision": "int8", "cnn": {"replicas": 1}})
    e1 = d.estimate()
    d.to_json(), d.summary(), d.estimate()
    # the planner costs many candidate plans; the compiled plan's costed lowering is made once
    assert sum(1 for a in calls if a[0] is d.plan) == 1
    assert d.estimate() == e1
