"""Recurrent-layer mapping (planner) and latency model: resource limits, row-reuse growth, the
published GRU-on-AIE trends, target selection against brute force, and physical sanity."""

from __future__ import annotations

import dataclasses
import math
import operator
import random

import numpy as np
import pytest

from aieflow.config import parse_target
from aieflow.devices import DEVICES, LIMIT_SOURCES, get_device
from aieflow.errors import ConfigError, PlanError
from aieflow.ops.recurrent import make_node
from aieflow.pareto import undominated
from aieflow.perf import movement as mv
from aieflow.perf.simulate import Pipeline, run_pipeline
from aieflow.recurrent import (
    PARTS,
    RecurrentDims,
    RecurrentOptions,
    choose_mapping,
    costed_points,
    costs,
    dims_of,
    estimate_closed,
    estimate_recurrent,
    legal_mappings,
    plan_recurrent,
    step_stages,
    violations,
)
from aieflow.recurrent.plan import build_mapping, kernel_bytes, matvec_options, reuse_candidates

VCK190 = get_device("vck190")


def _independent_counts(m, device):
    """Tiles, interface tiles and the largest merge fan-in, recomputed from the mapping's
    spreads without the planner's own counters."""
    if m.aggregation == "compact":  # the whole cell on one tile: x in and y out through one interface tile
        return 1, 1, 0
    g, n = m.dims.gates, m.dims.n_h
    u_src = g * math.ceil(n / m.recurrent.rows)
    w_src = g * math.ceil(n / m.input.rows)
    # AIE aggregation: the aggregator, and on a core with one output stream port its output kernel
    agg = (m.aggregation == "aie") * (2 if device.generation.stream_out_ports == 1 else 1)
    tiles = u_src * m.recurrent.cas_len + w_src * m.input.cas_len + agg
    if m.aggregation == "aie":
        ports = device.generation.stream_in_ports
        fanin = math.ceil(u_src / ports) + math.ceil(w_src / ports)
        outs, ins = 1, 1
    else:
        fanin = max(min(m.u_fanin, u_src), min(m.w_fanin, w_src))
        outs = math.ceil(u_src / m.u_fanin) + math.ceil(w_src / m.w_fanin)
        ins = 2
    interface = max(math.ceil(outs / device.plio_out_per_column), math.ceil(ins / device.plio_in_per_column))
    return tiles, interface, fanin


def _random_case(rng: random.Random):
    device = get_device(rng.choice(sorted(DEVICES)))
    dims = RecurrentDims(rng.choice(("gru", "lstm")), rng.randint(1, 3000), rng.randint(1, 300), rng.randint(1, 50))
    opts = RecurrentOptions(
        distribution=rng.choice(("row", "column", None)),
        aggregation=rng.choice(("aie", "hybrid", None)),
        row_reuse=rng.choice((1, 1, 2, 5)),
    )
    return device, dims, opts


def test_resource_limits_hold_on_random_sizes():
    rng = random.Random(5)
    planned = failed = 0
    for _ in range(60):
        device, dims, opts = _random_case(rng)
        try:
            m = plan_recurrent(dims, device, opts)
        except PlanError as e:
            # only when no mapping with these options fits: the exhaustive list agrees
            fixed = dataclasses.replace(opts, distribution=opts.distribution or "row", aggregation=opts.aggregation or "hybrid", merge_fanin=dims.gates)
            assert legal_mappings(dims, device, fixed) == [], str(e)
            assert "fits" in str(e)
            failed += 1
            continue
        planned += 1
        tiles, interface, fanin = _independent_counts(m, device)
        assert m.tiles == tiles <= device.compute_tiles
        assert m.interface_tiles == interface <= device.plio_columns
        assert m.merge_fanin == fanin <= device.generation.pktmerge_max_inputs
        assert m.columns <= device.columns and m.rows <= device.rows
        assert m.row_reuse >= opts.row_reuse
        if m.aggregation == "aie":
            assert m.u_merges <= device.generation.stream_in_ports
        for mv_, k in ((m.recurrent, dims.n_h), (m.input, dims.n_in)):
            assert kernel_bytes(mv_, k, m.dims, device) <= device.generation.data_memory_bytes
        assert violations(m, device) == []
    assert planned >= 40 and failed >= 1  # both branches exercised


def test_every_front_point_is_legal():
    for device in ("vck190", "vek280", "vek385"):
        ex = choose_mapping(RecurrentDims("lstm", 40, 24, 5), device, "latency")
        dev = get_device(device)
        assert ex.front
        for p in ex.front:
            tiles, interface, fanin = _independent_counts(p.mapping, dev)
            assert (p.tiles, p.mapping.interface_tiles, p.mapping.merge_fanin) == (tiles, interface, fanin)
            assert tiles <= dev.compute_tiles and interface <= dev.plio_columns
            assert fanin <= dev.generation.pktmerge_max_inputs


def test_row_reuse_grows_instead_of_failing():
    # 200 hidden: 600 U h kernels at row reuse 1 alone exceed the 400 tiles of the VCK190
    dims = RecurrentDims("gru", 6, 200, 10)
    m = plan_recurrent(dims, "vck190")
    assert m.row_reuse > 1 and m.tiles <= 400
    assert m.notes and "grown" in m.notes[0] and "tiles" in m.notes[0]
    # minimal: with the next smaller U h row reuse no W x spread fits
    smaller = [r for r in reuse_candidates(200) if r < m.row_reuse]
    assert smaller
    opts = RecurrentOptions(distribution="row", aggregation="hybrid", merge_fanin=3)
    from aieflow.recurrent.plan import MatvecMapping

    for w in matvec_options(dims_of(dims, VCK190), 6, VCK190, "row"):
        assert violations(build_mapping(dims_of(dims, VCK190), VCK190, MatvecMapping("row", smaller[-1]), w, "hybrid", opts), VCK190)
    # AIE-ML's aggregator has one input port: 32 packet sources in all, so reuse grows with fan-in
    m = plan_recurrent(RecurrentDims("gru", 6, 20), "vek280", RecurrentOptions(aggregation="aie"))
    assert m.u_merges == 1 and m.merge_fanin <= 32 and m.row_reuse > 1
    assert "pktmerge" in m.notes[0]
    # a requested minimum reuse is a floor, not a cap; larger candidates each save kernels
    assert reuse_candidates(20) == [1, 2, 3, 4, 5, 7, 10, 20]
    assert reuse_candidates(20, 6) == [6, 7, 10, 20]
    for floor in (4, 6):
        assert plan_recurrent(RecurrentDims("gru", 6, 20), "vck190", RecurrentOptions(row_reuse=floor)).row_reuse >= floor


def test_aggregator_ports_and_merge_fanin_follow_the_catalog():
    for device, ports in (("vck190", 2), ("vek280", 1)):
        dev = get_device(device)
        assert dev.generation.stream_in_ports == ports
        for m in legal_mappings(RecurrentDims("gru", 8, 16), device, RecurrentOptions(aggregation="aie", distribution="row")):
            assert m.u_merges <= ports and m.u_fanin + m.w_fanin <= 32
    assert VCK190.generation.pktmerge_max_inputs == 32 and "UG1079" in LIMIT_SOURCES["pktmerge_max_inputs"]
    m = plan_recurrent(RecurrentDims("lstm", 6, 20), "vck190")
    assert m.merge_fanin == 4 and m.u_merges == 20  # the published three(GRU)/four(LSTM)-way merges


# ----------------------------------------------------------------------------- published trends


def _interval(dims, device, agg, chosen):
    opts = RecurrentOptions(aggregation=agg)
    if chosen:
        return choose_mapping(dims, device, "latency", opts).performance.interval_ns
    return estimate_recurrent(plan_recurrent(dims, device, opts), device).interval_ns


@pytest.mark.parametrize("chosen", [False, True], ids=["published-mapping", "latency-optimal"])
@pytest.mark.parametrize("cell", ["gru", "lstm"])
def test_hybrid_advantage_grows_with_hidden_size(cell, chosen):
    """gru-on-aie.md finding 1: the hybrid (PL) aggregation's advantage over AIE-only grows with
    the hidden size, here over 8..32 on the VCK190 in fp32."""
    sizes = (8, 16, 24, 32)
    aie = [_interval(RecurrentDims(cell, 6, n, 20), "vck190", "aie", chosen) for n in sizes]
    hyb = [_interval(RecurrentDims(cell, 6, n, 20), "vck190", "hybrid", chosen) for n in sizes]
    gain = [a - h for a, h in zip(aie, hyb, strict=True)]
    ratio = [a / h for a, h in zip(aie, hyb, strict=True)]
    assert all(b > a for a, b in zip(gain, gain[1:], strict=False)), gain
    assert all(b > a for a, b in zip(ratio, ratio[1:], strict=False)), ratio
    assert ratio[-1] > 2  # at 32 the AIE-only aggregation is the bottleneck the paper describes


def test_step_latency_plateaus_as_the_input_grows():
    """gru-on-aie.md finding 2: input projections are decoupled, so latency does not depend on
    the input size until their path is the slower one; then it grows linearly with it."""
    sizes = (6, 12, 24, 48, 96, 512, 1024, 2048)
    perf = {n: estimate_recurrent(plan_recurrent(RecurrentDims("gru", n, 20, 20), "vck190"), "vck190") for n in sizes}
    loop = perf[6].step_latency_ns
    assert all(p.step_latency_ns == pytest.approx(loop) for p in perf.values())  # the loop never sees n_in
    assert all(perf[n].interval_ns == pytest.approx(loop) for n in (6, 12, 24, 48, 96))  # plateau
    assert all(perf[n].bound.startswith("input path") for n in (512, 1024, 2048))
    d1 = perf[1024].interval_ns - perf[512].interval_ns
    d2 = perf[2048].interval_ns - perf[1024].interval_ns
    assert d1 > 0 and d2 == pytest.approx(2 * d1, rel=0.01)  # linear in n_in
    # the rate of that line is x's PLIO: 64 bits at 312.5 MHz = 2 bytes per AIE cycle
    assert d2 == pytest.approx(1024 * 4 / 2 / 1.25, rel=0.01)


def test_fp32_on_aie1_runs_at_the_catalog_mac_rate():
    assert VCK190.generation.macs_per_cycle[("fp32", "fp32")] == 8
    assert costs.lanes(VCK190.generation, ("fp32", "fp32")) == 8
    pair = ("fp32", "fp32")
    # every row after the first costs k / 8 MAC cycles plus the loop's fill and drain
    a = costs.row_kernel(4, 256, 0.0, VCK190, pair)
    b = costs.row_kernel(5, 256, 0.0, VCK190, pair)
    assert b.mac - a.mac == 256 / 8 + costs.ROW_LOOP_CYCLES
    assert b.reduction - a.reduction == 3 * costs.REDUCE_STAGE_CYCLES  # log2(8) halving stages
    # the first row is limited by the stream: 256 words arriving over 256 cycles, MACs keep up
    first = costs.row_kernel(1, 256, 256.0, VCK190, pair)
    assert first.mac == 1 + costs.ROW_LOOP_CYCLES
    # a column chain's last tile does its rows' MACs at 8 per cycle too
    chain = costs.column_chain(16, 64, 2, 0.0, VCK190, pair)
    assert chain.mac == 2 * 32
    # bf16 on AIE-ML: 16 lanes per 256-bit load, load-bound below its 128 MAC/cycle peak
    assert costs.lanes(get_device("vek280").generation, ("bf16", "bf16")) == 16


# ----------------------------------------------------------------------------- selection


def _all_points(dims, device, options=None):
    """Brute force: every legal mapping, costed in closed form, no pruning."""
    out = []
    for m in legal_mappings(dims, device, options):
        p = estimate_closed(m, device)
        out.append((m.tiles, p.sequence_latency_ns, p.interval_ns))
    return out


def test_pruned_search_keeps_the_brute_force_front():
    for dims, device in ((RecurrentDims("gru", 10, 12, 8), "vck190"), (RecurrentDims("lstm", 30, 9, 4), "vek280")):
        brute = _all_points(dims, device)
        pts = [(p.tiles, p.latency_ns, p.interval_ns) for p in costed_points(dims, device)]
        assert len(pts) < len(brute)  # the pruning removed something
        key = operator.itemgetter(0, 1, 2)
        want = sorted(undominated(brute, key))
        got = sorted(undominated(pts, key))
        assert [(t, round(lat, 6), round(iv, 6)) for t, lat, iv in got] == [(t, round(lat, 6), round(iv, 6)) for t, lat, iv in want]


def test_latency_budget_picks_the_fewest_tiles_that_meet_it():
    dims = RecurrentDims("gru", 6, 12, 10)
    brute = _all_points(dims, "vck190")
    lats = sorted(lat for _, lat, _ in brute)
    for q in (0.0, 0.1, 0.3, 0.6, 0.9, 1.0):
        budget = lats[int(q * (len(lats) - 1))] + 1e-6
        ex = choose_mapping(dims, "vck190", f"latency_ns <= {budget}")
        fewest = min(t for t, lat, _ in brute if lat <= budget)
        assert ex.chosen.tiles == fewest
        assert ex.chosen.latency_ns <= budget
        assert ex.performance.sequence_latency_ns == pytest.approx(ex.chosen.latency_ns)  # simulated agrees
        assert ex.chosen in ex.front or any(p.tiles == ex.chosen.tiles and p.latency_ns <= ex.chosen.latency_ns for p in ex.front)
    with pytest.raises(PlanError, match="no plan meets the target"):
        choose_mapping(dims, "vck190", f"latency_ns <= {lats[0] / 2}")


def test_objectives_pick_their_extreme():
    dims = RecurrentDims("gru", 6, 16, 20)
    pool = costed_points(dims, "vck190")
    lat = choose_mapping(dims, "vck190", "latency").chosen
    res = choose_mapping(dims, "vck190", "resources").chosen
    thr = choose_mapping(dims, "vck190", "throughput").chosen
    assert lat.latency_ns == min(p.latency_ns for p in pool)
    assert res.tiles == min(p.tiles for p in pool)
    assert thr.interval_ns == min(p.interval_ns for p in pool)
    tight = choose_mapping(dims, "vck190", parse_target("tiles <= 20"))
    assert tight.chosen.tiles <= 20 and tight.chosen.latency_ns == min(p.latency_ns for p in pool if p.tiles <= 20)


# ----------------------------------------------------------------------------- physical sanity


def _sample_mappings():
    rng = random.Random(11)
    cases = [
        (RecurrentDims("gru", 6, 20, 20), "vck190"),
        (RecurrentDims("lstm", 64, 48, 7), "vck190"),
        (RecurrentDims("gru", 300, 30, 3), "vek280"),
        (RecurrentDims("lstm", 17, 33, 12), "vek385"),
    ]
    for dims, device in cases:
        legal = legal_mappings(dims, device)
        for m in rng.sample(legal, min(12, len(legal))):
            yield m, get_device(device)


def test_physical_sanity_of_the_model():
    checked = 0
    for m, device in _sample_mappings():
        closed = estimate_closed(m, device)
        sim = estimate_recurrent(m, device)
        # the breakdown sums to the step latency, and the loop is a critical path: the interval
        # of a recurrent loop is at least its latency
        assert sum(sim.breakdown_ns.values()) == pytest.approx(sim.step_latency_ns)
        assert tuple(sim.breakdown_ns) == PARTS and all(v >= 0 for v in sim.breakdown_ns.values())
        assert sim.interval_ns >= sim.step_latency_ns * (1 - 1e-9)
        # simulation and closed form agree (the search ranks by the closed form)
        assert sim.interval_ns == pytest.approx(closed.interval_ns)
        assert sim.sequence_latency_ns == pytest.approx(closed.sequence_latency_ns)
        # steps after the first follow at least one interval apart; the first has no h return, so
        # the fill (sequence latency - steps x interval - head) may be negative, by less than one step
        seq = sim.sequence_latency_ns - sim.head_ns
        assert seq >= (sim.steps - 1) * sim.interval_ns * (1 - 1e-9) and sim.fill_ns > -sim.step_latency_ns
        # no stage is faster than its data at its link's rate, and no link beats the stream
        stream = mv.stream_bytes_per_cycle(device) / 4
        w_path, loop = step_stages(m, device)
        for s in (*w_path, *loop):
            if s.words:
                assert 0 < s.rate <= stream
                assert s.occupancy >= s.words / s.rate - 1e-9, s.name
            assert sum(s.parts.values()) == pytest.approx(s.occupancy + s.delay), s.name
        # the U h kernels, from the first h word, take at least their MACs at the catalog peak
        h_in, u_mac = loop[0], loop[1]
        macs = m.recurrent.rows * math.ceil(m.dims.n_h / m.recurrent.cas_len)
        assert h_in.occupancy + u_mac.occupancy >= macs / device.generation.macs_per_cycle[m.dims.pair]
        checked += 1
    assert checked >= 40


def test_the_recurrence_defines_the_interval():
    from aieflow.ir import Node
    from aieflow.mapped.estimate import pipeline
    from aieflow.recurrent.lower import costed, lower

    m = plan_recurrent(RecurrentDims("gru", 6, 20, 20), "vck190")
    pipe = pipeline(costed(lower([Node("rnn", "gru", (), ())], [m], VCK190), [m], VCK190))  # the estimate's stage graph
    assert pipe.recurrences  # the h return: aggregate -> h_in
    with_loop = run_pipeline(pipe)
    free = run_pipeline(Pipeline(pipe.stages, pipe.buffers, sink=pipe.sink))  # as if steps did not depend on h
    assert free.interval_ns == pytest.approx(max(s.occupancy_ns for s in pipe.stages))
    assert with_loop.interval_ns > 2 * free.interval_ns
    perf = estimate_recurrent(m, "vck190")
    assert with_loop.interval_ns == pytest.approx(perf.step_latency_ns)
    # sequence latency = the first step + 19 intervals + the epilogue (no head: h written out); the
    # first step: the W path and the U h path (no h return) side by side, then the aggregation
    w_path, loop = step_stages(m, "vck190")
    f = {s.name: s.occupancy + s.delay for s in loop}
    first = (max(sum(s.occupancy + s.delay for s in w_path), f["u_mac"] + f["route"]) + f["aggregate"]) / 1.25
    assert perf.head_ns > 0 and perf.fill_ns == pytest.approx(first - perf.interval_ns)
    assert perf.sequence_latency_ns == pytest.approx(first + 19 * perf.interval_ns + perf.head_ns)


def test_hybrid_breakdown_has_a_pl_part_at_the_pl_clock():
    m = plan_recurrent(RecurrentDims("gru", 6, 20, 20), "vck190", RecurrentOptions(aggregation="hybrid"))
    perf = estimate_recurrent(m, "vck190")
    depth = costs.pl_fsm_depth("gru", ("fp32", "fp32"))
    # one item (one row block's three gates) through the FSM pipeline, in PL cycles at 312.5 MHz
    assert perf.breakdown_ns["aggregation"] == pytest.approx((depth + 1) / 312.5e6 * 1e9)
    # h goes back zero-padded to 8 fp32 lanes (24 words) through a 64-bit PLIO at 312.5 MHz
    assert perf.breakdown_ns["return"] == pytest.approx((24 * 4 / 2 + mv.STREAM_FIXED_CYCLES) / 1.25)
    aie = estimate_recurrent(plan_recurrent(RecurrentDims("gru", 6, 20, 20), "vck190", RecurrentOptions(aggregation="aie")), "vck190")
    assert aie.breakdown_ns["return"] == 0.0 and aie.interface_tiles == 1


# ----------------------------------------------------------------------------- inputs and errors


def test_dims_from_an_ir_node_and_errors():
    rng = np.random.default_rng(0)
    f, n = 6, 20

    def node(cell, reset_after=True):
        g = 3 if cell == "gru" else 4
        return make_node(
            "rnn", cell, "x", "y", seq_len=20,
            weight=rng.normal(size=(f, g * n)), recurrent_weight=rng.normal(size=(n, g * n)),
            bias=np.zeros(g * n), recurrent_bias=np.zeros(g * n), return_sequences=False, reset_after=reset_after,
        )

    d = dims_of(node("lstm"), VCK190)
    assert (d.cell, d.n_in, d.n_h, d.seq_len, d.pair) == ("lstm", 6, 20, 20, ("fp32", "fp32"))
    assert plan_recurrent(node("gru"), "vck190").dims.gates == 3
    with pytest.raises(PlanError, match="reset gate before"):
        plan_recurrent(node("gru", reset_after=False), "vck190")
    with pytest.raises(PlanError, match="no MAC rate"):
        plan_recurrent(RecurrentDims("gru", 6, 20, pair=("fp32", "fp32")), "vek280")
    assert dims_of(RecurrentDims("gru", 6, 20), get_device("vek280")).pair == ("bf16", "bf16")
    for bad in (dict(distribution="diagonal"), dict(aggregation="gpu"), dict(row_reuse=0), dict(plio_bits=48)):
        with pytest.raises(ConfigError):
            RecurrentOptions(**bad)
    with pytest.raises(ConfigError):
        RecurrentDims("rnn", 6, 20)
    with pytest.raises(PlanError, match="fits"):  # 40,000 fp32 per row cannot sit in 32 KB
        plan_recurrent(RecurrentDims("gru", 40_000, 8), "vck190")


def test_streaming_plio_and_packet_word_primitives():
    # 64-bit PLIO at 312.5 MHz = 2 bytes per 1.25 GHz cycle; 128 bits matches the 32-bit stream
    # (versal-devices.md), and nothing exceeds the stream it feeds
    assert mv.plio_stream_bytes_per_cycle(VCK190, 64) == 2.0
    assert mv.plio_stream_bytes_per_cycle(VCK190, 128) == 4.0
    assert mv.plio_stream_bytes_per_cycle(VCK190, 256) == 4.0
    t = mv.plio_stream_transfer(96, VCK190, hops=3)
    assert (t.busy_cycles, t.latency_cycles, t.bound) == (48, mv.STREAM_FIXED_CYCLES + 3, "plio")
    assert mv.plio_stream_transfer(96, VCK190, 0, 128).bound == "stream"
    assert mv.packet_stream_words(1, 3) == 6
    assert mv.packet_merge_transfer(1, 3, VCK190).busy_cycles == mv.packet_stream_words(1, 3)
