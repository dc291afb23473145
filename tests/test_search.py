"""Targets and the design-space search: the Pareto front, budgets, objectives, errors, CLI."""

from __future__ import annotations

import itertools
import json

import onnx
import pytest

import aieflow
from aieflow.cli import main
from aieflow.config import Target, parse_config, parse_target
from aieflow.errors import ConfigError, PlanError
from aieflow.model_zoo import qdq_mlp

MODEL = qdq_mlp([128, 256, 64, 10], seed=1)


@pytest.mark.parametrize(
    "raw, want",
    [
        ("latency", Target("latency")),
        ("throughput", Target("throughput")),
        ("tiles <= 12", Target("latency", max_tiles=12)),
        ("latency_ns <= 2500", Target("resources", max_latency_ns=2500.0)),
        (["throughput", "tiles <= 40", "interval_ns <= 900"], Target("throughput", 40, None, 900.0)),
        ("latency, tiles <= 9", Target("latency", max_tiles=9)),
    ],
)
def test_parse_target(raw, want):
    t = parse_target(raw)
    assert t == want
    assert parse_target(t.to_string()) == t  # round trip through design.json


@pytest.mark.parametrize("raw", ["fastest", "tiles < 3", "latency_ns <= abc", "latency, throughput", "tiles <= -1"])
def test_bad_targets_are_config_errors(raw):
    with pytest.raises(ConfigError, match="target"):
        parse_config({"target": raw})


def _front(device):
    return aieflow.explore(MODEL, device=device)


@pytest.mark.parametrize("device", ["vck190", "vek280", "vek385"])
def test_front_is_a_pareto_front_and_targets_pick_from_it(device):
    ex = _front(device)
    front = ex.front
    assert len(front) > 3
    for p, q in itertools.permutations(front, 2):
        assert not (p.tiles <= q.tiles and p.latency_ns <= q.latency_ns and p.interval_ns <= q.interval_ns)
    lat = aieflow.compile(MODEL, device=device, config={"target": "latency"})
    thr = aieflow.compile(MODEL, device=device, config={"target": "throughput"})
    res = aieflow.compile(MODEL, device=device)
    # latency / throughput targets buy speed with tiles, judged by the full simulation as well
    assert lat.estimate().latency_ns < res.estimate().latency_ns
    assert thr.estimate().interval_ns < res.estimate().interval_ns
    assert lat.estimate().tiles_used > res.estimate().tiles_used
    assert lat.exploration.chosen.latency_ns == min(p.latency_ns for p in front if p.tiles <= 400)
    # the chosen parallelism is what the design uses
    got = tuple((n.name, n.plan.cas_len, n.plan.cas_num) for n in lat.layers())
    assert got == lat.exploration.chosen.parallelism


@pytest.mark.parametrize("device", ["vck190", "vek280"])
def test_budgets_hold_in_the_simulated_design(device):
    ex = _front(device)
    mid = sorted(ex.front, key=lambda p: p.tiles)[len(ex.front) // 2]
    d = aieflow.compile(MODEL, device=device, config={"target": f"tiles <= {mid.tiles}"})
    assert d.estimate().tiles_used <= mid.tiles
    best = min((p for p in ex.front if p.tiles <= mid.tiles), key=lambda p: p.latency_ns)
    assert d.exploration.chosen == best

    budget = sorted(p.latency_ns for p in ex.front)[len(ex.front) // 3] * 1.3
    d = aieflow.compile(MODEL, device=device, config={"target": f"latency_ns <= {budget}"})
    assert d.estimate().latency_ns <= budget  # checked against the simulation, not only the closed form
    # fewest tiles among the plans whose closed form meets the budget (or the next placeable one)
    assert d.estimate().tiles_used >= min(p.tiles for p in ex.front if p.latency_ns <= budget)


def test_impossible_budget_is_a_clear_error():
    with pytest.raises(PlanError, match="no plan meets the target 'latency, tiles <= 1'") as e:
        aieflow.compile(MODEL, device="vek280", config={"target": "tiles <= 1"})
    assert "fewest tiles" in str(e.value) and "aieflow explore" in str(e.value.hint)


def test_user_parallelism_is_kept_by_the_search():
    d = aieflow.compile(
        MODEL, device="vek280", config={"target": "latency", "layers": {"fc1": {"parallelism": {"cas_len": 1, "cas_num": 1}}}}
    )
    fc1 = next(n for n in d.layers() if n.name == "fc1")
    assert (fc1.plan.cas_len, fc1.plan.cas_num) == (1, 1)


def test_design_json_and_reload_keep_performance_and_exploration(tmp_path):
    d = aieflow.compile(MODEL, device="vek280", config={"target": "throughput"})
    d.save(tmp_path / "d")
    meta = json.loads((tmp_path / "d" / "design.json").read_text())
    perf = meta["performance"]
    for key in ("latency_ns", "interval_ns", "batch", "throughput_ops_per_s", "bound", "tiles_used", "memory_tiles_used", "stages"):
        assert key in perf
    macs = sum(n.plan.in_features * n.plan.out_features for n in d.layers())
    assert perf["replicas"] == d.replicas > 1  # throughput fills spare tiles with copies
    assert perf["throughput_ops_per_s"] == pytest.approx(2 * macs * perf["batch"] * perf["replicas"] / (perf["interval_ns"] * 1e-9))
    assert meta["config"]["target"] == "throughput"
    # the choice may sit behind front points that cannot be placed (copies that do not tile the array)
    assert meta["exploration"]["chosen"]["tiles"] == perf["tiles_used"]
    again = aieflow.load(tmp_path / "d")
    assert again.estimate() == d.estimate()
    assert again.exploration == d.exploration


def test_cli_explore_and_compile_target(tmp_path, capsys):
    path = tmp_path / "m.onnx"
    onnx.save(MODEL, path)
    assert main(["explore", str(path), "--device", "vck190", "--target", "latency", "--json"]) == 0
    ex = json.loads(capsys.readouterr().out)
    assert ex["target"] == "latency" and ex["chosen"] in ex["pareto_front"]
    assert main(["explore", str(path), "--device", "vck190"]) == 0
    out = capsys.readouterr().out
    assert "Pareto front" in out and "*" in out
    assert main(["compile", str(path), "--target", "tiles <= 1", "--out", str(tmp_path / "x"), "--quiet"]) == 2
    assert "no plan meets the target" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()
    assert main(["compile", str(path), "--target", "latency", "--out", str(tmp_path / "y"), "--quiet"]) == 0
    assert main(["report", str(tmp_path / "y")]) == 0
    out = capsys.readouterr().out
    assert "performance (model" in out and "share of interval" in out and "target 'latency'" in out


# --- the batch as a searched dimension ---------------------------------------------------------


@pytest.mark.parametrize(
    "raw, batch, search",
    [(16, 16, None), ("32", 32, None), ("auto", 8, "auto"), ([64, 8, 8], 8, (8, 64)), ([24], 24, None)],
)
def test_parse_batch(raw, batch, search):
    c = parse_config({"batch": raw})
    assert (c.batch, c.batch_search) == (batch, search)
    assert parse_config(c.to_json()) == c  # round trip through design.json / the CLI


@pytest.mark.parametrize("raw", [0, -8, "many", [], [8, 0], [8, 5000], 5000, True])
def test_bad_batches_are_config_errors(raw):
    with pytest.raises(ConfigError, match="batch"):
        parse_config({"batch": raw})


@pytest.mark.parametrize("device", ["vck190", "vek280"])
def test_auto_batch_candidates_fill_every_layers_row_blocks(device):
    from aieflow.config import MAX_AUTO_BATCH
    from aieflow.devices import get_device

    ex = aieflow.explore(MODEL, device=device, config={"batch": "auto", "target": "throughput"})
    dev = get_device(device)
    ms = {dev.generation.mmul_shapes[pair][0] for pair in (("i8", "i8"),)}
    assert len(ex.batches) >= 4 and max(ex.batches) <= MAX_AUTO_BATCH
    assert all(b % (2 * m) == 0 for b in ex.batches for m in ms)  # no padded rows at any candidate
    assert all(b2 == 2 * b1 for b1, b2 in itertools.pairwise(ex.batches))
    assert {p.batch for p in ex.front} <= set(ex.batches) and len({p.batch for p in ex.front}) > 1
    # the front is Pareto-optimal over (tiles, latency, interval per sample) across batches
    for p, q in itertools.permutations(ex.front, 2):
        assert not (p.tiles <= q.tiles and p.latency_ns <= q.latency_ns and p.sample_interval_ns <= q.sample_interval_ns)


@pytest.mark.parametrize("device", ["vck190", "vek280"])
def test_searching_the_batch_buys_throughput_and_keeps_latency(device):
    # one copy of the design: the batch alone (replication is tested below)
    fixed = aieflow.compile(MODEL, device=device, config={"target": "throughput", "replicas": 1})  # batch 8
    auto = aieflow.compile(MODEL, device=device, config={"target": "throughput", "batch": "auto", "replicas": 1})
    ex = auto.exploration
    assert auto.config.batch == ex.chosen.batch == auto.estimate().batch and auto.config.batch_search is None
    assert ex.chosen.sample_interval_ns == min(p.sample_interval_ns for p in ex.front)
    # batch 8 is one of the candidates, so the simulated throughput cannot be lower than batch 8's
    assert auto.estimate().throughput_ops_per_s >= fixed.estimate().throughput_ops_per_s * 0.999
    assert auto.config.batch > 8  # on this model a larger batch amortises the per-call overheads
    # a latency target with the batch searched picks the lowest-latency plan of any batch
    lat = aieflow.compile(MODEL, device=device, config={"target": "latency", "batch": "auto"})
    assert lat.exploration.chosen.latency_ns == min(p.latency_ns for p in lat.exploration.front)
    assert lat.config.batch == min(lat.exploration.batches)


def test_per_batch_interval_budget_is_honoured_across_batches():
    probe = aieflow.explore(MODEL, device="vek280", config={"batch": [8, 64], "target": "throughput"})
    big = [p for p in probe.front if p.batch == 64]
    assert probe.chosen.batch == 64 and big
    budget = min(p.interval_ns for p in big) * 0.9  # no batch-64 plan meets it
    d = aieflow.compile(MODEL, device="vek280", config={"batch": [8, 64], "target": f"throughput, interval_ns <= {budget}"})
    assert d.config.batch == 8 and d.estimate().interval_ns <= budget


def test_auto_batch_design_json_round_trip_and_cli(tmp_path, capsys):
    d = aieflow.compile(MODEL, device="vek280", config={"batch": "auto", "target": "throughput"})
    d.save(tmp_path / "d")
    meta = json.loads((tmp_path / "d" / "design.json").read_text())
    assert meta["config"]["batch"] == d.config.batch and meta["exploration"]["batches"] == list(d.exploration.batches)
    assert aieflow.load(tmp_path / "d").exploration == d.exploration
    # a file written before the batch was searched (no batch fields) still loads, at its own batch
    del meta["exploration"]["batches"]
    for p in (meta["exploration"]["chosen"], *meta["exploration"]["pareto_front"]):
        del p["batch"]
    from aieflow.passes.search import Exploration

    old = Exploration.from_json(meta["exploration"], 8)
    assert old.batches == (8,) and {p.batch for p in old.front} == {8}
    path = tmp_path / "m.onnx"
    onnx.save(MODEL, path)
    assert main(["explore", str(path), "--batch", "auto", "--target", "throughput"]) == 0
    out = capsys.readouterr().out
    assert "at batch 8, 16, 32" in out and "ns / sample" in out
    assert main(["compile", str(path), "--batch", "auto", "--target", "throughput", "--out", str(tmp_path / "c"), "--quiet"]) == 0
    assert main(["report", str(tmp_path / "c")]) == 0
    assert "and batch" in capsys.readouterr().out


@pytest.mark.parametrize("target", ["latency", "resources"])
def test_the_search_keeps_a_users_cas_len_on_aie1(target):
    # on AIE1 a layer's cas_len is its producer's cas_num: the search must pick the producer's
    # cas_num to match the user's cas_len (it used to take the producer's and drop the user's)
    d = aieflow.compile(MODEL, device="vck190", config={"target": target, "layers": {"fc1": {"parallelism": {"cas_len": 2}}}})
    plans = {n.name: n.plan for n in d.layers()}
    assert plans["fc1"].cas_len == 2 and plans["fc0"].cas_num == 2
    # and a cas_len no producer can give is an error, not ignored
    with pytest.raises(PlanError):
        aieflow.compile(MODEL, device="vck190", config={"target": target, "layers": {"fc1": {"parallelism": {"cas_len": 999}}}})


def test_the_copies_are_the_most_that_pass_the_checks_found_by_bisection(monkeypatch):
    """A throughput search on VEK280 fits up to 77 copies of a small MLP beside each other; with the
    checks failing beyond 23 copies (a stand-in for a port or channel limit) the search picks 23
    copies, the count it compiles to with the chosen point's figures, and checks far fewer
    replicated placements than one per count."""
    import aieflow.passes.place as place

    real, seen = place.check_placement, []

    def limited(pl, device):
        seen.append(len(pl.replicas))
        if len(pl.replicas) > 23:
            raise PlanError("more than 23 copies (a synthetic limit of the test)")
        real(pl, device)

    monkeypatch.setattr(place, "check_placement", limited)
    d = aieflow.compile(qdq_mlp([32, 32, 10], seed=1), device="vek280", config={"target": "throughput", "batch": 8})
    chosen = d.exploration.chosen
    assert chosen.replicas == 23 == d.replicas and max(seen) > 23
    perf = d.estimate()
    assert (perf.tiles_used, perf.latency_ns, perf.interval_ns) == (chosen.tiles, chosen.latency_ns, chosen.interval_ns)
    # a count per check would check every count up to the largest that fits (77 here) at least once
    replicated = [k for k in seen if k > 1]
    assert 0 < len(replicated) < max(replicated) - 1, seen
