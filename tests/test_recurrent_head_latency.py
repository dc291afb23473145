"""The dense head's latency: it runs once per sample in the aggregation epilogue (the AIE
aggregator's core, or the PL FSM at the PL clock) and adds to the sequence latency only."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from aieflow.devices import get_device
from aieflow.errors import ConfigError, PlanError
from aieflow.recurrent import estimate_closed, estimate_recurrent, plan_recurrent
from aieflow.recurrent.model import step_stages
from aieflow.recurrent.plan import RecurrentDims, RecurrentOptions
from aieflow.recurrent.select import choose_mapping

PAIRS = [None, ("i16", "i16")]  # fp32 (the device's float) and fixed point


def _perf(head, agg, pair, cell="gru", device="vck190", estimate=estimate_recurrent):
    m = plan_recurrent(RecurrentDims(cell, 6, 20, 20, pair, head), device, RecurrentOptions(aggregation=agg))
    return m, estimate(m, device)


@pytest.mark.parametrize("agg", ["hybrid", "aie"])
@pytest.mark.parametrize("pair", PAIRS)
@pytest.mark.parametrize("cell", ["gru", "lstm"])
def test_head_latency_grows_with_the_head_and_leaves_the_step_alone(agg, pair, cell):
    perfs = [_perf(h, agg, pair, cell)[1] for h in [(1,), (16, 1), (64, 1), (64, 64, 1), (256, 1)]]
    base = _perf((), agg, pair, cell)[1]
    heads = [p.head_ns for p in perfs]
    assert all(a < b for a, b in zip(heads[:2], heads[1:3], strict=True)) and heads[2] < heads[3]
    assert heads[2] < heads[4]
    for p in perfs:  # the step, its breakdown and the interval do not see the head
        assert p.step_latency_ns == base.step_latency_ns and p.interval_ns == base.interval_ns
        assert dict(p.breakdown_ns) == dict(base.breakdown_ns)
        assert p.sequence_latency_ns == pytest.approx(base.sequence_latency_ns - base.head_ns + p.head_ns)
        assert p.head_ns == pytest.approx(sum(p.head_breakdown_ns.values()))
        assert p.to_json()["head_ns"] == p.head_ns


@pytest.mark.parametrize("agg", ["hybrid", "aie"])
@pytest.mark.parametrize("pair", PAIRS)
def test_sequence_is_the_first_step_plus_later_steps_plus_head(agg, pair):
    """Top-tagging size: the loop is the bound (interval == step), so one sample takes the first
    step (the W path and the U h path side by side, no h return on step 0, then the aggregation),
    ``T - 1`` steps and the head, in the simulation and the search's closed form alike."""
    dev = get_device("vck190")
    for est in (estimate_recurrent, estimate_closed):
        m, p = _perf((64, 1), agg, pair, estimate=est)
        w_path, loop = step_stages(m, dev)
        f = {s.name: s.occupancy + s.delay for s in loop}
        assert p.interval_ns == pytest.approx(p.step_latency_ns)
        first = max(sum(s.occupancy + s.delay for s in w_path), f["u_mac"] + f["route"]) + f["aggregate"]
        ns = 1e9 / dev.clock_hz
        assert p.sequence_latency_ns == pytest.approx(first * ns + 19 * p.step_latency_ns + p.head_ns)
        assert sum(f.values()) * ns == pytest.approx(p.step_latency_ns)


@pytest.mark.parametrize("pair", PAIRS)
def test_pl_head_takes_one_pl_cycle_per_extra_output(pair):
    """The FSM's head loop is pipelined at II 1: one more output of the last layer costs one PL
    cycle (the PL clock, not the AIE's); the AIE aggregator's scalar head costs a whole row."""
    dev = get_device("vck190")
    a = _perf((64, 10), "hybrid", pair)[1].head_breakdown_ns["head"]
    b = _perf((64, 30), "hybrid", pair)[1].head_breakdown_ns["head"]
    assert b - a == pytest.approx(20 * 1e9 / dev.pl_clock_hz, abs=1e9 / dev.clock_hz)  # ceil to AIE cycles
    a = _perf((64, 10), "aie", pair)[1].head_breakdown_ns["head"]
    b = _perf((64, 30), "aie", pair)[1].head_breakdown_ns["head"]
    assert b - a > 20 * 64 * 1e9 / dev.clock_hz  # at least one AIE cycle per product


def test_latency_budget_includes_the_head():
    """``target: latency`` compares the budget with the whole inference: a budget between the
    sequence without and with the head rules out the mapping that met it without the head."""
    dims = RecurrentDims("gru", 6, 20, 20, None, (256, 1))
    best = choose_mapping(dims, "vck190", "latency").performance
    no_head = choose_mapping(replace(dims, head=()), "vck190", "latency").performance
    assert best.head_ns > 0 and best.sequence_latency_ns > no_head.sequence_latency_ns
    budget = math.floor(best.sequence_latency_ns - best.head_ns / 2)
    assert no_head.sequence_latency_ns < budget  # met without the head, not with it
    with pytest.raises(PlanError, match="no plan meets the target"):
        choose_mapping(dims, "vck190", f"latency_ns <= {budget}")
    assert choose_mapping(replace(dims, head=()), "vck190", f"latency_ns <= {budget}").performance.head_ns > 0


def test_head_sizes_are_checked():
    with pytest.raises(ConfigError, match="at least 1 output"):
        RecurrentDims("gru", 6, 20, 20, None, (64, 0))
