"""DAG designs (issue 7 item 3): plans, memory-tile links and their checker, placement, estimate,
clear errors.  No C++ here (tests/test_dag_verify.py runs the generated projects on x86)."""

from __future__ import annotations

import itertools
from dataclasses import replace

import numpy as np
import pytest
import torch
from torch import nn

import aieflow
from aieflow.api import _state
from aieflow.dag.api import is_dag, place_dag
from aieflow.dag.design import DagDesign
from aieflow.dag.links import check_dag_link
from aieflow.dag.plan import plan_dag
from aieflow.errors import ConfigError, PlanError
from aieflow.mapped.tiling import NdTiling, Traversal
from aieflow.pipeline import run_pipeline


class Residual(nn.Module):
    def __init__(self, f=32, h=48):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(f, h), nn.Linear(h, f)

    def forward(self, x):
        return x + self.fc2(torch.relu(self.fc1(x)))


class MiniMixer(nn.Module):
    """One MLP-Mixer block: LayerNorm, token MLP between transposes, residual, LayerNorm, channel
    MLP, residual."""

    def __init__(self, tokens=16, channels=32):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(channels), nn.LayerNorm(channels)
        self.t1, self.t2 = nn.Linear(tokens, 8), nn.Linear(8, tokens)
        self.c1, self.c2 = nn.Linear(channels, 64), nn.Linear(64, channels)

    def forward(self, x):
        x = x + self.t2(torch.relu(self.t1(self.ln1(x).transpose(1, 2)))).transpose(1, 2)
        return x + self.c2(torch.relu(self.c1(self.ln2(x))))


def _quantised(model, shape, config, device="vek280", seed=0):
    torch.manual_seed(seed)
    x = np.random.default_rng(seed).standard_normal((32, *shape)).astype(np.float32)
    st = _state(model, device, x[:4], config, x)
    return st, run_pipeline(st, stop_after="quantise")


def _plan(model, shape, config=None, device="vek280"):
    _, st = _quantised(model, shape, config or {"precision": "int8", "batch": 8}, device)
    return plan_dag(st.graph, st.device, st.config), st


# ----------------------------------------------------------------------------- tiling walk


def _loop_addresses(t: NdTiling) -> list[int]:
    """Reference: the ADF tiling definition as plain nested loops."""
    out = []
    wraps = [tr.wrap for tr in t.traversal]
    for idx in itertools.product(*[range(w) for w in reversed(wraps)]):
        idx = idx[::-1]  # traversal[0] fastest
        origin = list(t.offset)
        for tr, i in zip(t.traversal, idx, strict=True):
            origin[tr.dimension] += i * tr.stride
        for e in itertools.product(*[range(n) for n in reversed(t.tile)]):
            e = e[::-1]  # dimension 0 fastest
            c = [o + k for o, k in zip(origin, e, strict=True)]
            lim = t.boundary or t.dims
            if any(v < 0 or v >= m for v, m in zip(c, lim, strict=True)):
                out.append(-1)
            else:
                out.append(c[0] + t.dims[0] * (c[1] + t.dims[1] * c[2]))
    return out


def test_tiling_walk_matches_loop_reference():
    rng = np.random.default_rng(1)
    for _ in range(60):
        dims = tuple(int(v) for v in rng.integers(1, 7, size=3))
        tile = tuple(int(rng.integers(1, d + 1)) for d in dims)
        offset = tuple(int(rng.integers(0, d)) for d in dims)
        trav = tuple(Traversal(int(rng.integers(0, 3)), int(rng.integers(1, 4)), int(rng.integers(1, 4)))
                     for _ in range(int(rng.integers(0, 4))))
        t = NdTiling(dims, tile, offset, trav, dims)
        assert t.addresses().tolist() == _loop_addresses(t)
        assert t.elements == len(_loop_addresses(t))


def test_address_loops_walk_the_same_addresses():
    # the (stride, wrap) loops the address-dimension count reads (merged where one continues the
    # other) visit the reference walk's addresses in its order, for random in-buffer patterns
    rng = np.random.default_rng(2)
    checked = merged = 0
    for _ in range(1500):
        dims = tuple(int(v) for v in rng.integers(1, 7, size=3))
        tile = tuple(int(rng.integers(1, d + 1)) for d in dims)
        offset = tuple(int(rng.integers(0, d)) for d in dims)
        trav = tuple(
            Traversal(int(rng.integers(0, 3)), int(rng.integers(1, 4)), int(rng.integers(1, 4)))
            for _ in range(int(rng.integers(0, 4)))
        )
        t = NdTiling(dims, tile, offset, trav)
        ref = _loop_addresses(t)
        if -1 in ref:
            continue
        base = offset[0] + dims[0] * (offset[1] + dims[1] * offset[2])
        walk = [base]
        for stride, wrap in t.address_loops():  # innermost first: each loop repeats the walk so far
            walk = [a + i * stride for i in range(wrap) for a in walk]
        assert walk == ref, (t, t.address_loops())
        checked += 1
        merged += len(t.address_loops()) < sum(n > 1 for n in tile) + sum(x.wrap > 1 for x in trav)
    assert checked > 150 and merged > 20


# ----------------------------------------------------------------------------- plans and links


def test_residual_graph_plans_links_for_fan_out_and_skip():
    plan, _ = _plan(Residual(), (32,))
    assert plan.compute == ("fc1", "fc2", "add")
    # the input feeds fc1 and the add (fan-out): two links of one tensor, one of them the skip path
    links_of_x = [k for k in plan.links if k.source.tensor == plan.graph.inputs[0]]
    assert sorted(k.consumer for k in links_of_x) == ["add", "fc1"]
    assert {k.consumer for k in plan.links} == {"fc1", "fc2", "add", None}
    assert plan.rows["add"].parts >= 1


def test_mixer_block_plans_transposed_reads():
    plan, _ = _plan(MiniMixer(), (16, 32))
    transposed = {(k.source.tensor, k.consumer) for k in plan.links if k.source.transposed}
    # ln1's output read transposed by t1; t2's output read transposed by the add
    assert len(transposed) == 2
    t1 = plan.node("t1").plan
    assert t1.batch == 8 * 32  # token mixing: rows = batch x channels


@pytest.mark.parametrize("what", ["offset", "wrap", "tile", "stride"])
def test_checker_catches_corrupted_tilings(what):
    plan, st = _plan(MiniMixer(), (16, 32))
    for link in plan.links:
        check_dag_link(plan, link)  # all legal as built
    caught = 0
    for link in plan.links:
        sh = link.shards[0]
        ep, t = sh.reads[0]
        if what == "offset":
            bad = replace(t, offset=(t.offset[0] + 1, *t.offset[1:]))
        elif what == "wrap":
            if not t.traversal:
                continue
            bad = replace(t, traversal=(replace(t.traversal[0], wrap=t.traversal[0].wrap + 1), *t.traversal[1:]))
        elif what == "tile":
            bad = replace(t, tile=(t.tile[0], t.tile[1], t.tile[2] + 1) if t.tile[2] < t.dims[2] else
                          (max(1, t.tile[0] - 1), *t.tile[1:]))
        else:
            if not t.traversal or t.traversal[0].wrap == 1:  # one step: the stride is never used
                continue
            bad = replace(t, traversal=(replace(t.traversal[0], stride=t.traversal[0].stride + 1), *t.traversal[1:]))
        if bad == t:
            continue
        broken = replace(link, shards=(replace(sh, reads=((ep, bad), *sh.reads[1:])), *link.shards[1:]))
        with pytest.raises(PlanError):
            check_dag_link(plan, broken)
        caught += 1
    assert caught >= 2


def test_checker_catches_a_missing_writer():
    plan, st = _plan(Residual(), (32,))
    link = next(k for k in plan.links if k.consumer == "add" and k.operand == 1)
    sh = link.shards[0]
    with pytest.raises(PlanError):
        check_dag_link(plan, replace(link, shards=(replace(sh, writes=()),)))


# ----------------------------------------------------------------------------- placement, estimate


def test_placement_is_legal_and_costs_dag_edges():
    plan, st = _plan(MiniMixer(), (16, 32))
    p = place_dag(plan, st.device, st.config)
    cells = [c for r in p.rects for c in r.cells()]
    assert len(cells) == len(set(cells)) == plan.tiles
    assert all(0 <= c < st.device.columns and 0 <= r < st.device.rows for c, r in cells)
    assert p.method == "bnb" and p.cost is not None
    # the residual edges are part of the cost: moving the last add far away costs more
    from aieflow.passes.place import Weights, rects_cost

    idx = {n: i for i, n in enumerate(plan.compute)}
    edges = sorted({(idx[a], idx[b]) for a, b in plan.edges()})
    far = [replace(r, column=st.device.columns - r.width) if r.layer == plan.compute[-1] else r for r in p.rects]
    assert rects_cost(p.rects, edges, False, Weights()) == pytest.approx(p.cost)
    assert rects_cost(far, edges, False, Weights()) > p.cost


def test_estimate_interval_is_slowest_stage_and_latency_the_longest_path():
    plan, st = _plan(MiniMixer(), (16, 32))
    d = DagDesign(plan, st.device, st.config, place_dag(plan, st.device, st.config))
    e = d.estimate()
    # the skip paths hold fewer batches than the long paths need here (slack < 2 intervals): the
    # simulation shows no back-pressure and the slowest stage sets the pace
    assert max(e.skip_slack.values()) < 2
    assert e.interval_ns == pytest.approx(max(s.occupancy_ns for s in e.stages), rel=1e-12)
    by = {s.name: s for s in e.stages}
    # upstream of the bottleneck (the residual add since LayerNorm's reciprocals are vector work, issue 19)
    # the stages wait for its slots; downstream (ln2) they wait for it
    assert max(e.stages, key=lambda s: s.occupancy_ns).name == "add"
    assert by["plio_in"].blocked_ns > 0 and by["ln2"].blocked_ns == pytest.approx(0.0, abs=1e-6)
    assert by["ln2"].starved_ns == pytest.approx(by["add"].occupancy_ns - by["ln2"].occupancy_ns, rel=1e-9)
    assert e.critical_path[0] == "plio_in" and e.critical_path[-1] == "plio_out"
    assert e.latency_ns == pytest.approx(sum(by[s].occupancy_ns + by[s].delay_ns for s in e.critical_path))
    # every compute node is a stage; the latency covers at least every node on any input->output path
    assert {n for n in plan.compute} <= set(by)
    assert e.latency_ns >= sum(by[n].occupancy_ns for n in ("ln1", "t1", "t2", "add", "ln2", "c1", "c2", "add_1"))
    macs = sum(plan.node(n).plan.batch * plan.node(n).plan.in_features * plan.node(n).plan.out_features
               for n in plan.compute if plan.node(n).op == "dense")
    assert e.throughput_ops_per_s == pytest.approx(2 * macs / (e.interval_ns * 1e-9))
    assert "modelled" in d.summary() and "critical path" in d.report()


# ----------------------------------------------------------------------------- dispatch and errors


def test_compile_dispatches_dags_and_keeps_chains():
    _, st = _quantised(Residual(), (32,), {"precision": "int8"})
    assert is_dag(st.graph)
    chain = nn.Sequential(nn.Linear(32, 16), nn.ReLU(), nn.Linear(16, 8))
    _, st2 = _quantised(chain, (32,), {"precision": "int8"})
    assert not is_dag(st2.graph)


def test_aie1_has_no_memory_tiles_for_dags():
    x = np.random.default_rng(0).standard_normal((16, 32)).astype(np.float32)
    with pytest.raises(PlanError) as e:
        aieflow.compile(Residual(), device="vck190", example_input=x[:4], calibration=x, config={"precision": "int8"})
    assert "memory tiles" in str(e.value) and "vek280" in (e.value.hint or "")


def test_batch_that_needs_row_padding_is_a_clear_error():
    with pytest.raises(PlanError) as e:
        _plan(Residual(), (32,), {"precision": "int8", "batch": 3})
    assert e.value.layer == "fc1" and "batch" in (e.value.hint or "")


class CatSplit(nn.Module):
    """Concat of a LayerNorm (rows kernel), the input (PLIO) and a Dense output; feature slices
    (splits) of it read by Dense layers; the concat read transposed (token mixing); a residual."""

    def __init__(self, tokens=8, channels=16):
        super().__init__()
        self.ln, self.a = nn.LayerNorm(channels), nn.Linear(channels, 16)
        self.t = nn.Linear(tokens, tokens)
        self.c, self.d = nn.Linear(12, 48), nn.Linear(36, 48)

    def forward(self, x):
        h = torch.cat([self.ln(x), x, self.a(x)], dim=-1)  # [tokens, 48]
        p, q = torch.split(h, [12, 36], dim=-1)
        return self.t(h.transpose(1, 2)).transpose(1, 2) + self.c(p) + self.d(q)


def test_concat_writers_land_at_their_offsets_and_slices_read_at_theirs():
    plan, st = _plan(CatSplit(), (8, 16), {"precision": "int8", "batch": 2})
    cat = [k for k in plan.links if k.source.parts]
    assert {k.consumer for k in cat} == {"t", "c", "d"}
    by = {k.consumer: k for k in cat}
    assert by["t"].source.transposed and not by["c"].source.transposed
    assert (by["c"].source.start, by["c"].source.stop) == (0, 12)
    assert (by["d"].source.start, by["d"].source.stop) == (12, 48)
    writes = by["c"].shards[0].writes
    assert {ep.kind: ep.offset for ep, _ in writes} == {"part": 0, "plio": 16, "row": 32}
    assert all(t.offset[0] >= ep.offset for ep, t in writes)
    assert sorted(p for p, q in plan.edges() if q == "d") == ["a", "ln"]  # the concat's producers, not the input
    # the checker proves the offsets: a writer moved by one feature, or a slice read one feature off, fails
    for k, moved in ((by["c"], "write"), (by["d"], "read")):
        sh = k.shards[0]
        if moved == "write":
            (ep, t), *rest = sh.writes
            bad = replace(sh, writes=((ep, replace(t, offset=(t.offset[0] + 1, *t.offset[1:]))), *rest))
        else:
            (ep, t), *rest = sh.reads
            bad = replace(sh, reads=((ep, replace(t, offset=(t.offset[0] - 1, *t.offset[1:]))), *rest))
        with pytest.raises(PlanError):
            check_dag_link(plan, replace(k, shards=(bad,)))


def test_concat_of_views_and_padded_middle_inputs_are_clear_errors():
    class Reorder(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = nn.Linear(32, 16), nn.Linear(32, 16)

        def forward(self, x):
            p, q = torch.split(torch.cat([self.a(x), self.b(x)], dim=-1), [20, 12], dim=-1)
            return torch.cat([q, p], dim=-1)

    with pytest.raises(PlanError) as e:
        _plan(Reorder(), (32,))
    assert e.value.layer is not None and "concat" in str(e.value) and "emulate" in (e.value.hint or "")

    class Padded(nn.Module):
        def __init__(self, first):
            super().__init__()
            self.first = first
            self.a, self.b, self.c = nn.Linear(32, 20), nn.Linear(32, 16), nn.Linear(36, 8)

        def forward(self, x):
            a, b = self.a(x), self.b(x)
            return self.c(torch.cat([a, b] if self.first else [b, a], dim=-1))

    plan, _ = _plan(Padded(first=False), (32,))  # a's padding lies beyond the concat's features: fine
    a = plan.node("a").plan
    assert a.cas_num * a.n_slice > 20  # a 20-wide int8 output is written padded to whole mmul panels
    with pytest.raises(PlanError) as e:  # first, its padding would overwrite b's features
        _plan(Padded(first=True), (32,))
    assert e.value.layer is not None and "last input" in (e.value.hint or "")


def test_fp32_dag_is_a_clear_error():
    # AIE-ML's vector unit has bf16, not fp32 (the DAG kernels are int8 / int16 / bf16): refused
    # when the graph is quantised, naming a layer and what works
    with pytest.raises(ConfigError) as e:
        _plan(MiniMixer(), (16, 32), {"precision": "fp32", "batch": 8})
    assert e.value.layer and "fp32" in str(e.value) and "bf16" in str(e.value)


def test_replicas_are_a_config_error():
    with pytest.raises(ConfigError, match="replicas"):
        _plan(Residual(), (32,), {"precision": "int8", "replicas": 2})


@pytest.mark.parametrize("objective", ["resources", "latency", "throughput"])
def test_the_search_picks_the_batch_the_target_asks_for(objective, tmp_path):
    # every candidate batch planned and estimated on its own: the compiled design has the one the
    # objective ranks first, and it saves / loads at that batch
    from aieflow.dag.perf import estimate_dag

    x = np.random.default_rng(0).standard_normal((64, 32)).astype(np.float32)
    cfg = {"precision": "int8", "batch": [1, 2, 4, 8, 16, 32, 64], "target": objective}
    d = aieflow.compile(Residual().eval(), device="vek280", example_input=x[:1], calibration=x, config=cfg)
    _, st = _quantised(Residual(), (32,), {"precision": "int8", "batch": 8})
    legal = {}
    for b in cfg["batch"]:
        try:
            plan = plan_dag(st.graph, st.device, replace(st.config, batch=b))
        except PlanError:
            continue
        e = estimate_dag(plan, st.device)
        legal[b] = (plan.tiles, e.latency_ns, e.interval_ns / b)
    assert len(legal) >= 3 and 1 not in legal  # batch 1 leaves the 8-row tilers short
    key = {"resources": lambda b: (legal[b][0], legal[b][1]), "latency": lambda b: (legal[b][1], legal[b][0]),
           "throughput": lambda b: (legal[b][2], legal[b][0])}[objective]
    assert d.plan.batch == min(legal, key=key)
    assert d.config.batch == d.plan.batch and d.config.batch_search is None
    loaded = aieflow.load(d.save(tmp_path / "d"))
    assert loaded.plan.batch == d.plan.batch


def test_a_budget_no_batch_meets_names_the_best_there_is():
    x = np.random.default_rng(0).standard_normal((64, 32)).astype(np.float32)
    with pytest.raises(PlanError, match=r"no plan meets the target .*the fewest tiles \d+"):
        aieflow.compile(Residual().eval(), device="vek280", example_input=x[:1], calibration=x,
                        config={"precision": "int8", "batch": "auto", "target": "tiles <= 2"})


def test_dma_word_granularity_is_reported_for_element_wise_transposes():
    from aieflow.mapped.tiling import word_problems

    # int8: a run of 8 elements at offset 8 is two whole words; single bytes at a pitch are not
    assert word_problems(NdTiling((32, 4, 2), (8, 4, 2), (8, 0, 0)), 1) == ()
    assert word_problems(NdTiling((32, 4, 2), (1, 4, 1), (3, 0, 0)), 1) != ()
    assert word_problems(NdTiling((32, 4, 2), (1, 4, 1), (3, 0, 0)), 4) == ()  # 32-bit elements: always words
    # the Mixer's transposes move into its rows kernels: ln1 writes its output transposed, the
    # residual add transposes the token MLP's output block in its memory; no element-wise DMA left
    plan, st = _plan(MiniMixer(), (16, 32))
    sites = {(k.source.tensor, k.consumer): k.source.transpose_at for k in plan.links if k.source.transposed}
    assert sorted(sites.values()) == ["consumer", "producer"]
    assert plan.rows["ln1"].out_transposed and any(plan.rows["add"].in_transposed)
    assert not any(k.word_problems() for k in plan.links)
    d = DagDesign(plan, st.device, st.config, place_dag(plan, st.device, st.config))
    assert "32-bit words" not in d.summary()

    class DenseTranspose(nn.Module):  # Dense -> transpose -> Dense: no rows kernel to do it
        def __init__(self):
            super().__init__()
            self.a, self.t = nn.Linear(32, 32), nn.Linear(16, 16)

        def forward(self, x):
            return self.t(self.a(x).transpose(1, 2))

    plan, st = _plan(DenseTranspose(), (16, 32))
    flagged = [k for k in plan.links if k.word_problems()]
    assert flagged and all(k.source.transposed and k.source.transpose_at == "dma" for k in flagged)
    d = DagDesign(plan, st.device, st.config, place_dag(plan, st.device, st.config))
    assert "32-bit words" in d.summary()


def test_explore_lists_the_batch_front_and_the_compile_pick():
    x = np.random.default_rng(0).standard_normal((64, 32)).astype(np.float32)
    cfg = {"precision": "int8", "target": "throughput"}
    # a fixed batch: the front still spans every auto batch, the pick is compile's (that batch)
    fixed = aieflow.explore(Residual().eval(), device="vek280", example_input=x[:1], calibration=x,
                            config={**cfg, "batch": 8})
    assert len(fixed.batches) >= 3 and fixed.chosen.batch == 8
    ex = aieflow.explore(Residual().eval(), device="vek280", example_input=x[:1], calibration=x,
                         config={**cfg, "batch": "auto"})
    assert ex.front == fixed.front and ex.chosen in ex.front
    # no batch written: the target searches the auto batches (dag.search.targeted_batches)
    free = aieflow.explore(Residual().eval(), device="vek280", example_input=x[:1], calibration=x, config=cfg)
    assert free.front == ex.front and free.chosen == ex.chosen
    for p in ex.front:  # Pareto: nothing in the front is beaten or equalled everywhere by another
        assert not any(q != p and q.tiles <= p.tiles and q.latency_ns <= p.latency_ns
                       and q.sample_interval_ns <= p.sample_interval_ns for q in ex.front)
    assert ex.chosen.sample_interval_ns == min(p.sample_interval_ns for p in ex.front)
    d = aieflow.compile(Residual().eval(), device="vek280", example_input=x[:1], calibration=x,
                        config={**cfg, "batch": "auto"})
    assert d.plan.batch == ex.chosen.batch


def test_a_device_without_memory_tiles_is_refused_before_any_batch_is_tried():
    x = np.random.default_rng(0).standard_normal((64, 32)).astype(np.float32)
    with pytest.raises(PlanError, match=r"^graphs with fan-out.*VCK190"):
        aieflow.compile(Residual().eval(), device="vck190", example_input=x[:1], calibration=x,
                        config={"precision": "int8", "batch": "auto", "target": "latency"})


class _LongResidual(nn.Module):
    def __init__(self, depth: int):
        super().__init__()
        self.b = nn.Sequential(*[m for _ in range(depth) for m in (nn.Linear(32, 32), nn.ReLU())])

    def forward(self, x):
        return self.b(x) + x


def test_long_residual_branch_back_pressures_the_skip_path():
    """The skip path holds as many batches as its ping-pong buffers have slots: a short branch
    runs at the slowest stage's pace, a long one stalls the input (the simulation's interval is
    longer than every stage's occupancy and the input PLIO is blocked)."""
    torch.manual_seed(0)
    short = aieflow.compile(_LongResidual(2), "vek280", torch.randn(1, 32), config={"batch": 8}).estimate()
    assert short.interval_ns == pytest.approx(max(s.occupancy_ns for s in short.stages), rel=1e-9)
    long = aieflow.compile(_LongResidual(6), "vek280", torch.randn(1, 32), config={"batch": 8}).estimate()
    slowest = max(s.occupancy_ns for s in long.stages)
    assert long.interval_ns > 1.5 * slowest
    by = {s.name: s for s in long.stages}
    assert by["plio_in"].blocked_ns > 0
    assert long.skip_slack["add"] > short.skip_slack["add"]


def test_layernorm_tile_memory_counts_every_array_of_the_kernel():
    """A LayerNorm part's data memory, by hand from dag_kernels.h's ``LayerNorm`` members (features
    40 -> NV 48 padded lanes; 8 rows of int16 in and out, double-buffered; every array 32-byte
    aligned): in / out windows 2 x 640 + 2 x 640, gamma_ int16 80 -> 96, beta_ int64 320, hi_ / lo_ /
    bhi_ / blo_ int32 x 48 = 192 each, the 16-row group (S1 int64 128, G / uh / ul / inv int32 64
    each), stack 1,024 + heap 1,024 (the catalog's AIE-ML reservation)."""
    from aieflow.devices import get_device
    from aieflow.ir import Node
    from aieflow.numerics.types import FixedType, Rounding, Saturation
    from aieflow.ops import layernorm as ln_op

    tx = FixedType(16, 12)
    out = FixedType(16, 10, True, Rounding.CONV_EVEN, Saturation.SATURATE)
    types = ln_op.LayerNormTypes(tx, FixedType(16, 14), FixedType(48, ln_op.Z_FRAC + 14), out, 0,
                                 ln_op.Z_FRAC + 14 - out.frac)
    node = Node("ln", "layernorm", ("x",), ("y",), attrs={"eps": 1e-5},
                params={"gamma_q": np.zeros(40, dtype=np.int64), "beta_q": np.zeros(40, dtype=np.int64)}, types=types)
    want = (2 * 640 + 2 * 640) + 96 + 320 + 4 * 192 + (128 + 4 * 64) + 1024 + 1024
    from aieflow.dag.plan import rows_memory

    assert rows_memory(node, 8, 40, get_device("vek280")) == want
