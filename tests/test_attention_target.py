"""`target` / budgets / `explore` on an attention block (issue 19 item 5): one pre-norm
nn.TransformerEncoderLayer (16 tokens x 32 features, 2 heads, GELU MLP 64) compiled for VEK280 int8.
What a DAG search chooses is the batch (dag/search.py): with a target and no batch written it
searches the `auto` batches, so `latency` and `throughput` pick different designs where the model
ranks them differently, a tile budget is held, an unmeetable one is refused naming the block, and
every explore front point compiles to a design whose own estimate is that point (issue 17: one cost
model)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

import aieflow
from aieflow.config import parse_config
from aieflow.dag.design import DagDesign
from aieflow.errors import AieflowError, PlanError
from aieflow.points import point_config

REL = 1e-9
BASE = {"precision": "int8"}


def _block():
    torch.manual_seed(0)
    return nn.TransformerEncoderLayer(32, 2, 64, batch_first=True, norm_first=True, activation="gelu").eval()


X = np.random.default_rng(0).standard_normal((32, 16, 32)).astype(np.float32)


def _compile(config: dict) -> DagDesign:
    d = aieflow.compile(_block(), device="vek280", example_input=X[:1], calibration=X, config={**BASE, **config})
    assert isinstance(d, DagDesign)
    return d


def _close(a: float, b: float) -> bool:
    return abs(a - b) <= REL * max(abs(a), abs(b))


def _perf(d: DagDesign) -> dict:
    return d.to_json()["performance"]


@pytest.fixture(scope="module")
def explored():
    ex = aieflow.explore(_block(), device="vek280", example_input=X[:1], calibration=X,
                         config={**BASE, "target": "latency"})
    assert ex.kind == "dag" and len(ex.batches) >= 4 and len(ex.front) >= 3
    return ex


def test_latency_and_throughput_targets_pick_what_the_model_ranks_first(explored):
    by_latency = min(explored.front, key=lambda p: (p.latency_ns, p.tiles))
    by_interval = min(explored.front, key=lambda p: (p.sample_interval_ns, p.tiles))
    # the model ranks them differently on this block: a small batch is fastest through, a large
    # batch spreads the fixed per-iteration costs (so the two targets must build different designs)
    assert by_latency.batch < by_interval.batch
    fast, wide = _compile({"target": "latency"}), _compile({"target": "throughput"})
    assert (fast.plan.batch, wide.plan.batch) == (by_latency.batch, by_interval.batch)
    ef, ew = fast.estimate(), wide.estimate()
    assert ef.latency_ns < ew.latency_ns
    assert ew.interval_ns / ew.batch < ef.interval_ns / ef.batch
    assert explored.chosen.batch == fast.plan.batch  # explore's pick is compile's
    # a batch the user writes is kept: the target then only checks its budgets
    assert _compile({"target": "latency", "batch": 8}).plan.batch == 8


def test_a_tile_budget_is_held_and_changes_the_pick(explored):
    unbudgeted = min(explored.front, key=lambda p: (p.sample_interval_ns, p.tiles))
    budget = unbudgeted.tiles - 1
    inside = [p for p in explored.front if p.tiles <= budget]
    assert inside, "the front has no point under the budget: choose another block"
    want = min(inside, key=lambda p: (p.sample_interval_ns, p.tiles))
    d = _compile({"target": f"throughput, tiles <= {budget}"})
    perf = _perf(d)
    assert perf["tiles_used"] <= budget and perf["tiles_used"] == want.tiles and d.plan.batch == want.batch
    assert d.plan.batch != unbudgeted.batch


def test_an_unmeetable_budget_is_refused_naming_the_block_and_the_target(explored):
    fewest = min(p.tiles for p in explored.front)
    target = f"tiles <= {fewest - 1}"
    for fn in (aieflow.compile, aieflow.explore):
        with pytest.raises(PlanError) as e:
            fn(_block(), device="vek280", example_input=X[:1], calibration=X, config={**BASE, "target": target})
        assert isinstance(e.value, AieflowError)
        msg = str(e.value)
        assert "TransformerEncoderLayer" in msg and target in msg and f"the fewest tiles {fewest}" in msg, msg


def test_every_explore_front_point_compiles_to_its_own_figures(explored):
    for p in explored.front:
        cfg = point_config(explored, p, parse_config({**BASE, "target": "latency"}))
        assert "target" not in cfg and cfg["batch"] == p.batch
        perf = _perf(_compile(cfg))
        assert (perf["tiles_used"], perf["batch"]) == (p.tiles, p.batch)
        assert _close(perf["latency_ns"], p.latency_ns) and _close(perf["interval_ns"], p.interval_ns), (perf, p)
