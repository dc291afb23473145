"""Fused or standalone posts (``passes/posts.py``): an MLP with a softmax head maps as a chain with
the softmax in the last Dense kernel, or through the DAG mapping with a softmax kernel of its own.
The config's ``posts`` fixes it; ``auto`` lets the target rank the two, and ``explore`` lists both
and picks what ``compile`` builds.

The expectations are judged by compiling each mapping on its own (``posts: fused`` /
``posts: standalone``) and comparing the designs' own estimates, not by the chooser's figures."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

import aieflow
from aieflow.config import parse_config
from aieflow.dag.design import DagDesign
from aieflow.design import Design
from aieflow.errors import ConfigError, PlanError
from aieflow.points import point_config

X = np.random.default_rng(0).standard_normal((128, 16)).astype(np.float32)


def _mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 5),
                         nn.Softmax(dim=-1)).eval()


MLP = _mlp()


def _compile(config: dict, device: str = "vek280"):
    return aieflow.compile(MLP, device=device, example_input=X[:1], calibration=X, config=config)


def _explore(config: dict, device: str = "vek280"):
    return aieflow.explore(MLP, device=device, example_input=X[:1], calibration=X, config=config)


def _figures(d) -> tuple[int, float, float]:
    e = d.estimate()
    return e.tiles_used, e.latency_ns, e.interval_ns


@pytest.fixture(scope="module")
def alone8():
    """Both mappings at batch 8, each compiled on its own."""
    return _compile({"batch": 8, "posts": "fused"}), _compile({"batch": 8, "posts": "standalone"})


def test_the_two_mappings_are_different_designs(alone8):
    fused, alone = alone8
    assert isinstance(fused, Design) and not isinstance(fused, DagDesign)
    assert isinstance(alone, DagDesign)
    assert fused.layers()[-1].plan.post == "softmax"
    # the standalone softmax is a kernel of its own: more tiles, and at batch 8 a shorter interval
    assert _figures(alone)[0] > _figures(fused)[0]
    assert _figures(alone)[2] < _figures(fused)[2]


def test_without_a_target_the_softmax_is_fused(alone8):
    d = _compile({"batch": 8})
    assert type(d) is type(alone8[0]) and _figures(d) == _figures(alone8[0])


def test_an_interval_budget_only_the_standalone_softmax_meets_picks_it(alone8):
    fused, alone = alone8
    budget = (_figures(fused)[2] + _figures(alone)[2]) / 2  # between the two mappings' intervals
    d = _compile({"batch": 8, "target": f"interval_ns <= {budget}"})
    assert isinstance(d, DagDesign) and d.estimate().interval_ns <= budget
    with pytest.raises(PlanError, match="no plan meets the target"):  # the fused mapping alone cannot
        _compile({"batch": 8, "target": f"interval_ns <= {budget}", "posts": "fused"})


@pytest.mark.parametrize("objective", ["latency", "throughput", "resources"])
def test_the_pick_is_no_worse_than_either_mapping_alone(objective):
    cfg = {"batch": [8, 32], "target": objective}
    chosen = _compile(cfg).estimate()
    for posts in ("fused", "standalone"):
        other = _compile({**cfg, "posts": posts}).estimate()
        key = {"latency": lambda e: e.latency_ns,
               "throughput": lambda e: e.interval_ns / (e.batch * getattr(e, "replicas", 1)),
               "resources": lambda e: e.tiles_used}[objective]
        assert key(chosen) <= key(other), (objective, posts)


def test_explore_lists_both_and_picks_what_compile_builds(alone8):
    budget = (_figures(alone8[0])[2] + _figures(alone8[1])[2]) / 2
    for cfg, kind in (({"batch": 8}, Design), ({"batch": 8, "target": f"interval_ns <= {budget}"}, DagDesign)):
        ex = _explore(cfg)
        if "target" not in cfg:
            assert {p.posts for p in ex.front} == {"fused", "standalone"}
        d = _compile(cfg)
        assert type(d) is kind
        assert ex.chosen.posts == ("standalone" if kind is DagDesign else "fused")
        assert (ex.chosen.tiles, ex.chosen.latency_ns, ex.chosen.interval_ns) == _figures(d)


def test_front_points_of_both_mappings_compile_to_their_figures():
    ex = _explore({"batch": [8, 32]})
    for posts in ("fused", "standalone"):
        pts = [p for p in ex.front if p.posts == posts]
        assert pts, posts
        for p in (pts[0], pts[-1]):
            cfg = point_config(ex, p, parse_config({"batch": [8, 32]}))
            assert cfg["posts"] == posts and cfg["batch"] == p.batch
            assert ("replicas" in cfg) == (posts == "fused")
            d = _compile(cfg)
            assert isinstance(d, DagDesign) == (posts == "standalone")
            tiles, lat, iv = _figures(d)
            assert tiles == p.tiles and lat == pytest.approx(p.latency_ns, rel=1e-9)
            assert iv == pytest.approx(p.interval_ns, rel=1e-9)


def test_aie1_has_only_the_fused_mapping():
    ex = _explore({"batch": 8, "target": "latency"}, device="vck190")
    assert {p.posts for p in ex.front} == {""}  # nothing else to list
    assert not isinstance(_compile({"batch": 8, "target": "latency"}, device="vck190"), DagDesign)
    with pytest.raises(PlanError, match="memory tiles"):
        _compile({"batch": 8, "posts": "standalone"}, device="vck190")


def test_posts_is_refused_where_it_has_nothing_to_place():
    relu = nn.Sequential(nn.Linear(16, 8), nn.ReLU(), nn.Linear(8, 4)).eval()
    with pytest.raises(ConfigError, match="posts: standalone.*no activation or softmax"):
        aieflow.compile(relu, device="vek280", example_input=X[:1], calibration=X, config={"posts": "standalone"})
    # auto is the default: harmless anywhere
    aieflow.compile(relu, device="vek280", example_input=X[:1], calibration=X, config={"posts": "auto"})


def test_posts_fused_is_refused_for_a_graph():
    class Residual(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = nn.Linear(16, 16), nn.Linear(16, 5)

        def forward(self, x):
            return torch.softmax(self.b(torch.relu(self.a(x)) + x), dim=-1)

    torch.manual_seed(1)
    with pytest.raises(ConfigError, match="posts: fused.*DAG path"):
        aieflow.compile(Residual().eval(), device="vek280", example_input=X[:1], calibration=X,
                        config={"posts": "fused"})


def test_bad_posts_values_are_named():
    with pytest.raises(ConfigError, match="posts must be one of 'auto', 'fused' or 'standalone'"):
        parse_config({"posts": "separate"})
    assert parse_config({"posts": "standalone"}).to_json()["posts"] == "standalone"
    assert "posts" not in parse_config({}).to_json()
