"""The simulation engine on stage graphs (fan-out, fan-in, skip paths), against hand calculations
and an independent reference: the least solution of the same max-plus constraints found by plain
relaxation (iterate every constraint until nothing moves), which shares no code or evaluation
order with ``perf.simulate.run_pipeline``."""

from __future__ import annotations

import dataclasses
import random

import pytest

from aieflow.perf.simulate import Pipeline, StageSpec, run_pipeline


def _stage(name, occ, reads, out, delay=0.0):
    return StageSpec(name, "kernel", "compute", occ, delay, reads, out)


def _reference(stages, buffers, batches, occupancy=None):
    """Start (head) and output-side start (tail) of every stage and batch: the least times that
    satisfy the ADF buffer rules, by relaxation to a fixpoint.  ``occupancy[b][i]``: stage i's
    time at batch b, where batches differ (else each stage's own)."""
    n = len(stages)
    occ = [s.occupancy_ns for s in stages]

    def o(i, b):
        return occ[i] if occupancy is None else occupancy[b][i]
    producer = {s.output: i for i, s in enumerate(stages) if s.output}
    reads = [[producer[b] for b in ((s.input,) if isinstance(s.input, str) else (s.input or ()))] for s in stages]
    consumers = {b: [i for i in range(n) if producer[b] in reads[i]] for b in producer}
    head = [[0.0] * batches for _ in stages]
    tail = [[0.0] * batches for _ in stages]
    changed = True
    while changed:
        changed = False
        for i in reversed(range(n)):
            s = stages[i]
            inflight = 1 + int(s.delay_ns // occ[i]) if s.delay_ns else 1
            for b in range(batches):
                h = head[i][b - 1] + o(i, b - 1) if b else 0.0
                for p in reads[i]:
                    h = max(h, tail[p][b] + o(p, b))
                slot = 0.0
                k = buffers.get(s.output, 0)
                if s.output and b >= k:
                    slot = max(head[c][b - k] + o(c, b - k) for c in consumers[s.output])
                if s.delay_ns:
                    if b >= inflight:
                        h = max(h, tail[i][b - inflight])
                    t = max(h + s.delay_ns, tail[i][b - 1] + o(i, b - 1) if b else 0.0, slot)
                else:
                    h = t = max(h, slot)
                if h > head[i][b] + 1e-12 or t > tail[i][b] + 1e-12:
                    head[i][b], tail[i][b] = max(h, head[i][b]), max(t, tail[i][b])
                    changed = True
    return head, tail


def test_skip_path_back_pressure_by_hand():
    """x feeds a three-stage long path and, directly, the add (a residual's skip).  The skip
    buffer holds two batches, so x may start batch b only when the add has taken b - 2, which
    waits for the long path: x(b) >= x(b - 2) + 1 + 3 + 1, an interval of 2.5, not the slowest
    stage's 1 (what a closed form says)."""
    stages = (
        _stage("x", 1.0, None, "a"),
        _stage("l1", 1.0, "a", "b"),
        _stage("l2", 1.0, "b", "c"),
        _stage("l3", 1.0, "c", "d"),
        _stage("add", 1.0, ("a", "d"), None),
    )
    sim = run_pipeline(Pipeline(stages, {k: 2 for k in "abcd"}), batches=60)
    assert sim.latency_ns == pytest.approx(5.0)  # 1 + 3 + 1: the long path
    assert sim.interval_ns == pytest.approx(2.5)
    st = {s.name: s for s in sim.stages}
    assert st["x"].blocked_ns > 0  # waits for the skip buffer's slot
    # three slots on the skip path: x(b) >= x(b - 3) + 5, interval 5 / 3
    deep = run_pipeline(Pipeline(stages, {"a": 3, "b": 2, "c": 2, "d": 2}), batches=60)
    assert deep.interval_ns == pytest.approx(5.0 / 3.0)
    # five slots: the skip never stalls x and the slowest stage sets the pace
    wide = run_pipeline(Pipeline(stages, {"a": 5, "b": 2, "c": 2, "d": 2}), batches=60)
    assert wide.interval_ns == pytest.approx(1.0)


def test_fan_in_waits_for_the_slowest_input():
    stages = (
        _stage("src", 1.0, None, "s"),
        _stage("fast", 2.0, "s", "f"),
        _stage("slow", 3.0, "s", "g", delay=4.0),
        _stage("join", 1.0, ("f", "g"), None),
    )
    sim = run_pipeline(Pipeline(stages, {"s": 2, "f": 2, "g": 2}), batches=40)
    assert sim.latency_ns == pytest.approx(1 + 3 + 4 + 1)
    assert sim.interval_ns == pytest.approx(3.0)


def test_sink_may_be_named_and_order_does_not_matter():
    stages = (
        _stage("join", 1.0, ("f", "g"), None),
        _stage("slow", 3.0, "s", "g"),
        _stage("src", 1.0, None, "s"),
        _stage("fast", 2.0, "s", "f"),
    )
    sim = run_pipeline(Pipeline(stages, {"s": 2, "f": 2, "g": 2}, sink="join"), batches=40)
    assert sim.latency_ns == pytest.approx(5.0) and sim.interval_ns == pytest.approx(3.0)
    with pytest.raises(ValueError, match="no stage"):
        run_pipeline(Pipeline(stages, {"s": 2, "f": 2, "g": 2}, sink="nope"), batches=4)


def test_two_producers_of_one_buffer_are_refused():
    stages = (_stage("a", 1.0, None, "x"), _stage("b", 1.0, None, "x"), _stage("c", 1.0, "x", None))
    with pytest.raises(ValueError, match="two producers"):
        run_pipeline(Pipeline(stages, {"x": 2}), batches=4)


def test_cycle_is_refused():
    stages = (_stage("a", 1.0, "y", "x"), _stage("b", 1.0, "x", "y"))
    with pytest.raises(ValueError, match="cycle"):
        run_pipeline(Pipeline(stages, {"x": 2, "y": 2}), batches=4)


def _random_graph(rng: random.Random):
    """A random single-source, single-sink stage DAG: every stage reads one to three earlier
    stages' buffers, every buffer is read by someone (the sink reads the dangling ones)."""
    n = rng.randint(2, 9)
    stages = []
    for i in range(n):
        reads = () if i == 0 else tuple(sorted({f"b{rng.randrange(i)}" for _ in range(rng.randint(1, 3))}))
        stages.append([f"s{i}", rng.choice((rng.uniform(0.5, 8.0), float(rng.randint(1, 8)))),
                       reads, f"b{i}", 0.0 if rng.random() < 0.7 else rng.uniform(0.0, 20.0)])
    read = {b for s in stages for b in s[2]}
    dangling = tuple(f"b{i}" for i in range(n) if f"b{i}" not in read)
    stages.append(["sink", rng.uniform(0.5, 4.0), dangling, None, 0.0])
    specs = tuple(_stage(name, occ, (reads if len(reads) != 1 else reads[0]) or None, out, delay)
                  for name, occ, reads, out, delay in stages)
    buffers = {f"b{i}": rng.choice((1, 2, 2, 3)) for i in range(n)}
    return specs, buffers


def test_random_stage_graphs_match_the_relaxation_reference():
    rng = random.Random(11)
    for _ in range(150):
        stages, buffers = _random_graph(rng)
        batches = 24
        sim = run_pipeline(Pipeline(stages, buffers), batches=batches)
        head, tail = _reference(stages, buffers, batches)
        sink = len(stages) - 1
        out = [t + stages[sink].occupancy_ns for t in tail[sink]]
        assert sim.completions_ns == pytest.approx(out, rel=1e-12, abs=1e-9)
        # shuffling the list changes nothing
        order = list(range(len(stages)))
        rng.shuffle(order)
        shuffled = run_pipeline(Pipeline(tuple(stages[i] for i in order), buffers, sink="sink"), batches=batches)
        assert shuffled.completions_ns == pytest.approx(sim.completions_ns, rel=1e-12, abs=1e-9)
        # the default run (to a steady state) agrees with a long one on the interval, measured
        # over the long run's own period (the smallest p whose last gaps repeat)
        c = run_pipeline(Pipeline(stages, buffers), batches=400).completions_ns
        gaps = [y - x for x, y in zip(c, c[1:], strict=False)]
        p = next(p for p in range(1, 40) if all(abs(gaps[-j] - gaps[-j - p]) <= 1e-9 * gaps[-j] for j in range(1, 60)))
        assert run_pipeline(Pipeline(stages, buffers)).interval_ns == pytest.approx((c[-1] - c[-1 - p]) / p, rel=1e-9)


def test_phases_match_the_relaxation_reference_with_per_batch_times():
    """``run_pipeline(phases=...)``: runs of batches whose stages take other times (the memory-tile
    GEMM's blocks with pc > 0), against the reference with the same per-batch times."""
    rng = random.Random(5)
    for _ in range(60):
        stages, buffers = _random_graph(rng)
        other = tuple(dataclasses.replace(s, occupancy_ns=s.occupancy_ns * rng.uniform(0.3, 3.0)) for s in stages)
        pipes = (Pipeline(stages, buffers), Pipeline(other, buffers))
        runs = [(rng.randrange(2), rng.randint(0, 5)) for _ in range(rng.randint(1, 6))] + [(0, 2)]
        sim = run_pipeline(pipes[0], phases=[(pipes[k], n) for k, n in runs])
        per_batch = [[s.occupancy_ns for s in pipes[k].stages] for k, n in runs for _ in range(n)]
        head, tail = _reference(stages, buffers, len(per_batch), per_batch)
        sink = len(stages) - 1
        out = [t + per_batch[b][sink] for b, t in enumerate(tail[sink])]
        assert sim.completions_ns == pytest.approx(out, rel=1e-12, abs=1e-9)
    with pytest.raises(ValueError, match="same stages"):
        run_pipeline(pipes[0], phases=[(Pipeline(stages[:-1], buffers), 2)])
    with pytest.raises(ValueError, match="either batches or phases"):
        run_pipeline(pipes[0], 4, phases=[(pipes[1], 4)])
