"""The one placer's problem (mapped/place.py): kernel groups and edges read off a mapped graph, by
hand on a small graph and against the plans of chain and DAG designs; user coordinates and
keep-out tiles honoured through it."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch
from torch import nn

import aieflow
from aieflow.api import _state
from aieflow.config import parse_config
from aieflow.dag.api import dag_problem, place_dag
from aieflow.dag.plan import plan_dag
from aieflow.devices import get_device
from aieflow.errors import ConfigError
from aieflow.mapped.ir import Kernel, Link, MappedGraph, Plio, Port, SharedBuffer
from aieflow.mapped.place import Block, Edge, Grid, named_cost, pack, problem, solve, staging
from aieflow.model_zoo import qdq_mlp
from aieflow.passes.emit import lowered_chain
from aieflow.passes.place import chain_problem, check_placement
from aieflow.pipeline import run_pipeline

# ------------------------------------------------------------------ a hand-made mapped graph


def _k(var, node, tile, ins, outs):
    return Kernel(var, node, "K", (), "k.cc", tile, ins, outs)


def _buf(var, writes, reads):
    # problem() reads only the links; the tilings are not looked at
    return SharedBuffer(var, "int8", (1,), (None,) * writes, (None,) * reads, "")


def _link(kind, src, si, dst, di):
    return Link(kind, Port(src, "out", si), Port(dst, "in", di))


SHAPES = (Block("a", 2, 1), Block("b", 1, 2), Block("c", 1, 1))


def hand_graph():
    """a (a0 -> a1 cascade, fed by the PLIO) writes a memory-tile buffer that b0, b1 and c read;
    b0 feeds c directly, b1 through a relay buffer.  Tiles as ``staging(SHAPES)`` lays them out:
    a at column 0, b at column 2, c at column 3."""
    kernels = (
        _k("a0", "a", (0, 0), (64,), (None,)),
        _k("a1", "a", (1, 0), (64, None), (32,)),
        _k("b0", "b", (2, 0), (32,), (16,)),
        _k("b1", "b", (2, 1), (32,), (16,)),
        _k("c0", "c", (3, 0), (16, 16, 32), (8,)),
    )
    buffers = (_buf("mt", 1, 3), _buf("relay", 1, 1))
    plios = (Plio("pin", "in", 64, "in.txt"), Plio("pout", "out", 64, "out.txt"))
    links = (
        _link("plio", "pin", 0, "a0", 0), _link("plio", "pin", 0, "a1", 0), _link("cascade", "a0", 0, "a1", 1),
        _link("memtile", "a1", 0, "mt", 0),
        _link("memtile", "mt", 0, "b0", 0), _link("memtile", "mt", 1, "b1", 0), _link("memtile", "mt", 2, "c0", 2),
        _link("buffer", "b0", 0, "c0", 0),
        _link("memtile", "b1", 0, "relay", 0), _link("memtile", "relay", 0, "c0", 1),
        _link("plio", "c0", 0, "pout", 0),
    )
    return MappedGraph(kernels, buffers, plios, links)


def test_problem_from_a_hand_made_mapped_graph():
    dev = get_device("vek280")
    at = staging(SHAPES, snake=False)
    assert [(r.column, r.row) for r in at.rects] == [(0, 0), (2, 0), (3, 0)]
    mg = hand_graph()
    mg.check()
    prob = problem(mg, SHAPES, at, dev)
    assert [(b.name, b.width, b.height) for b in prob.blocks] == [("a", 2, 1), ("b", 1, 2), ("c", 1, 1)]
    # the words each consumer's kernels receive from each producer group, per iteration, by hand:
    # b0 + b1 read 32 each from a's buffer; c0 reads 32 from it (port 2), 16 from b0, 16 through the relay
    assert prob.edges == (Edge(0, 1, 64), Edge(0, 2, 32), Edge(1, 2, 32))
    assert prob.kernels == (((0, 0), (1, 0)), ((0, 0), (0, 1)), ((0, 0),))
    assert (prob.grid.columns, prob.grid.rows, prob.grid.snake) == (dev.columns, dev.rows, False)
    # AIE1's serpentine cascade comes from the catalog
    assert problem(mg, SHAPES, at, get_device("vck190")).grid.snake is True


def competing_graph(light: int, heavy: int):
    """p writes two buffers: ``light`` elements to l0 and ``heavy`` to h0 (l before h in order)."""
    kernels = (_k("p0", "p", (0, 0), (8,), (light, heavy)), _k("l0", "l", (1, 0), (light,), (8,)),
               _k("h0", "h", (2, 0), (heavy,), (8,)))
    plios = (Plio("pin", "in", 64, "in.txt"), Plio("lout", "out", 64, "l.txt"), Plio("hout", "out", 64, "h.txt"))
    links = (_link("plio", "pin", 0, "p0", 0), _link("buffer", "p0", 0, "l0", 0), _link("buffer", "p0", 1, "h0", 0),
             _link("plio", "l0", 0, "lout", 0), _link("plio", "h0", 0, "hout", 0))
    return MappedGraph(kernels, (), plios, links)


def test_the_heavier_link_gets_the_shorter_route():
    """Two links of one producer compete for the one tile next to its output (a 3 x 1 strip, p at
    column 0 by the start term): J weighs each edge by the words its links deliver per graph
    iteration over the mean, so the 1,024-element link gets column 1 and the 16-element link
    column 2, whichever comes first; with equal links the tie goes to the first in order."""
    dev = get_device("vek280")
    shapes = (Block("p", 1, 1), Block("l", 1, 1), Block("h", 1, 1))
    at = staging(shapes, snake=False)
    strip = Grid(3, 1)
    for light, heavy, want in ((16, 1024, {"p": 0, "h": 1, "l": 2}), (1024, 16, {"p": 0, "l": 1, "h": 2}),
                               (64, 64, {"p": 0, "l": 1, "h": 2})):
        mg = competing_graph(light, heavy)
        mg.check()
        prob = replace(problem(mg, shapes, at, dev), grid=strip)
        assert prob.edges == (Edge(0, 1, light), Edge(0, 2, heavy))
        mean = (light + heavy) / 2
        assert prob.edge_weights == pytest.approx((light / mean, heavy / mean))
        p = solve(prob)
        assert {r.layer: r.column for r in p.rects} == want and p.optimal
        # J by hand: the start term is 0 and every top is row 0; the near consumer 1 column, the far one 2
        near, far = (heavy, light) if want["h"] == 1 else (light, heavy)
        assert p.cost == pytest.approx((near * 1 + far * 2) / mean)
        assert named_cost(p, prob.named_pairs) == pytest.approx(p.cost)


def test_a_kernel_off_its_rectangle_is_an_aieflow_bug():
    mg = hand_graph()
    moved = tuple(k if k.var != "b1" else Kernel(k.var, k.node, k.cls, k.args, k.source, (3, 1), k.in_sizes,
                                                   k.out_sizes) for k in mg.kernels)
    with pytest.raises(AssertionError, match="b1"):
        problem(MappedGraph(moved, mg.buffers, mg.plios, mg.links), SHAPES, staging(SHAPES, False), get_device("vek280"))
    # a period-2 group (a lender row above each kernel row): its kernels must sit on row 0
    shapes = (Block("a", 2, 2, period=2), *SHAPES[1:])
    at = staging(shapes, False)
    problem(mg, shapes, at, get_device("vek280"))
    lifted = tuple(k if k.var != "a1" else Kernel(k.var, k.node, k.cls, k.args, k.source, (1, 1), k.in_sizes,
                                                   k.out_sizes) for k in mg.kernels)
    with pytest.raises(AssertionError, match="a1"):
        problem(MappedGraph(lifted, mg.buffers, mg.plios, mg.links), shapes, at, get_device("vek280"))


def test_solve_honours_fixed_coordinates_and_keep_out():
    dev = get_device("vek280")
    shapes = (Block("a", 2, 1), Block("b", 1, 2, fixed=(7, 3)), Block("c", 1, 1))
    keep = {(0, 0), (1, 0), (2, 0), (8, 3)}
    prob = problem(hand_graph(), shapes, staging(SHAPES, False), dev, keep_out=keep)
    p = solve(prob)
    check_placement(p, dev)
    assert (p.rect("b").column, p.rect("b").row) == (7, 3)
    assert not any(r.cells() & keep for r in p.rects)
    assert set(p.keep_out) == keep
    # the same search as pack over the problem's rectangles and weighted edges
    ref = pack(prob.blocks, prob.pairs, Grid(dev.columns, dev.rows, keep_out=frozenset(keep)),
               edge_weights=prob.edge_weights)
    assert p.rects == ref.rects and p.cost == pytest.approx(ref.cost)
    with pytest.raises(ConfigError, match="keep-out"):
        solve(problem(hand_graph(), shapes, staging(SHAPES, False), dev, keep_out={(7, 4)}))


# ------------------------------------------------------------------ chain and DAG designs

PARALLELISM = {
    "vck190": {"fc0": {"cas_len": 2, "cas_num": 2}, "fc1": {"cas_len": 2, "cas_num": 1}},
    "vek280": {"fc0": {"cas_len": 2, "cas_num": 2}, "fc1": {"cas_len": 3, "cas_num": 2}},
}


@pytest.fixture(scope="module")
def chains():
    model = qdq_mlp([64, 48, 32, 24, 10], seed=2)
    return {dev: aieflow.compile(model, device=dev, config={"layers": {k: {"parallelism": v} for k, v in par.items()}})
            for dev, par in PARALLELISM.items()}


@pytest.mark.parametrize("dev", sorted(PARALLELISM))
def test_chain_problem_matches_its_plan(chains, dev):
    d = chains[dev]
    prob = chain_problem(d.graph, d.device, d.config)
    layers = d.layers()
    assert [b.name for b in prob.blocks] == [n.name for n in layers]
    for b, n in zip(prob.blocks, layers, strict=True):
        want = PARALLELISM[dev].get(n.name, {"cas_len": n.plan.cas_len, "cas_num": n.plan.cas_num})
        assert (b.width, b.height) == (want["cas_len"], want["cas_num"])
    for cells, b in zip(prob.kernels, prob.blocks, strict=True):
        assert set(cells) == {(c, r) for c in range(b.width) for r in range(b.height)}
    # one edge per consecutive pair, moving every consumer kernel's input slice
    assert prob.pairs == [(i, i + 1) for i in range(len(layers) - 1)]
    for e in prob.edges:
        p = layers[e.consumer].plan
        assert e.words == p.cas_num * p.cas_len * p.batch_pad * p.k_slice
    assert prob.grid.snake == (dev == "vck190")
    # the compiled design's kernels lie in their layers' rectangles
    for k in lowered_chain(d.graph, d.device, d.placement).kernels:
        assert k.tile in d.placement.rect(k.node).cells()


def test_chain_fixed_coordinates_and_keep_out_through_the_problem(chains):
    d = chains["vek280"]
    keep = {(0, 0), (1, 0), (5, 2)}
    config = parse_config({"layers": {**{k: {"parallelism": v} for k, v in PARALLELISM["vek280"].items()},
                                      "fc2": {"placement": [20, 4]}}})
    prob = chain_problem(d.graph, d.device, config, keep_out=keep)
    assert prob.blocks[2].fixed == (20, 4) and prob.grid.keep_out == frozenset(keep)
    p = solve(prob)
    assert (p.rect("fc2").column, p.rect("fc2").row) == (20, 4)
    assert not any(r.cells() & keep for r in p.rects)


class Residual(nn.Module):
    def __init__(self, f=32, h=48):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(f, h), nn.Linear(h, f)
        self.ln = nn.LayerNorm(f)

    def forward(self, x):
        return self.ln(x + self.fc2(torch.relu(self.fc1(x))))


def _dag(config):
    torch.manual_seed(0)
    x = np.random.default_rng(0).standard_normal((32, 8, 32)).astype(np.float32)
    st = run_pipeline(_state(Residual(), "vek280", x[:4], config, x), stop_after="quantise")
    return plan_dag(st.graph, st.device, st.config), st


def test_dag_problem_matches_its_plan_and_honours_fixed_coordinates():
    plan, st = _dag({"precision": "int8", "batch": 8})
    prob = dag_problem(plan, st.device, st.config)
    assert [b.name for b in prob.blocks] == list(plan.compute)
    assert [(b.width, b.height) for b in prob.blocks] == [plan.rect(n) for n in plan.compute]
    index = {n: i for i, n in enumerate(plan.compute)}
    assert prob.pairs == sorted({(index[a], index[b]) for a, b in plan.edges()})
    # by hand: 8 samples x 8 tokens of 48 (fc1 -> fc2) or 32 features; the add's skip reads the
    # graph input (a PLIO, no group), so it is no edge
    assert [b.name for b in prob.blocks] == ["fc1", "fc2", "add", "ln"]
    assert prob.edges == (Edge(0, 1, 8 * 8 * 48), Edge(1, 2, 8 * 8 * 32), Edge(2, 3, 8 * 8 * 32))
    dense = next(n for n in plan.compute if plan.node(n).op == "dense")
    plan2, st2 = _dag({"precision": "int8", "batch": 8, "layers": {dense: {"placement": [30, 5]}}})
    p = place_dag(plan2, st2.device, st2.config)
    assert (p.rect(dense).column, p.rect(dense).row) == (30, 5)
    check_placement(p, st2.device)


def _plan_stage_edges(plan):
    """(producer, consumer) stage indices from the plan's stages alone: the stage before (or each
    part of a folded concat) and a residual skip's producer; the network input is no group."""
    edges = set()
    for i, s in enumerate(plan.stages):
        parts = [k for k, _, _ in s.concat.parts] if s.concat is not None else [i - 1]
        skip = [s.residual.skip_from] if s.residual is not None else []
        edges |= {(k, i) for k in parts + skip if k >= 0}
    return sorted(edges)


@pytest.mark.parametrize("device,replicas", [("vck190", 2), ("vek280", 1)])
def test_cnn_stream_problem_and_placement(device, replicas):
    from aieflow.cnn.emit import place, place_stream, stream_problem
    from aieflow.model_zoo import residual_cnn

    x = np.random.default_rng(0).standard_normal((8, 3, 8, 8)).astype(np.float32)
    d = aieflow.compile(residual_cnn(), device=device, example_input=x[:1], calibration=x,
                        config={"precision": "int8", "cnn": {"replicas": replicas}})
    plan = d.plan
    prob = stream_problem(plan)
    assert [(b.name, b.width, b.height) for b in prob.blocks] == [
        (s.name, lay.cas_len, lay.cas_num) for s, lay in zip(plan.stages, plan.layers, strict=True)]
    assert prob.pairs == _plan_stage_edges(plan)
    assert prob.grid.snake == (device == "vck190")
    p = place_stream(plan)
    # each stage right of the one before from (0, 0) (the columns the cost model counts hops on)
    col = 0
    for r, lay in zip(p.rects, plan.layers, strict=True):
        assert (r.column, r.row) == (col, 0)
        col += lay.cas_len
    assert len(p.replicas) == plan.replicas == replicas
    tiles = place(plan)
    assert len({(t.col, t.row) for t in tiles}) == len(tiles) == plan.tiles
    assert all(0 <= t.col < d.device.columns and 0 <= t.row < d.device.rows for t in tiles)


def test_the_staged_lowering_is_built_once_per_graph(chains):
    from aieflow.mapped.cache import peek

    d = chains["vek280"]
    a = chain_problem(d.graph, d.device, d.config)
    staged = peek(d.graph, "chain:staged", (d.device,))
    assert staged is not None
    b = chain_problem(d.graph, d.device, d.config, keep_out={(30, 7)})
    assert peek(d.graph, "chain:staged", (d.device,)) is staged
    assert a.blocks == b.blocks and a.edges == b.edges and b.grid.keep_out == {(30, 7)}


@pytest.mark.parametrize("device", ["vck190", "vek280"])
def test_cnn_rows_problem_and_placement(device):
    """The rows mapping through the one placer: one 1 x 1 group per stage, the edges its row
    streams (on AIE-ML the skip merges through a memory-tile row buffer, which the problem looks
    through), column after column from (0, 0), wrapping to the next row on a narrow grid."""
    from dataclasses import replace

    from test_cnn_rows import TinyUNet, _compile

    from aieflow.cnn.emit_rows import lower, place_rows, rows_problem

    d = _compile(TinyUNet(), (32, 32), n=2, device=device, mapping="rows")
    plan = d.plan
    assert plan.mapping == "rows"
    prob = rows_problem(plan)
    assert [(b.name, b.width, b.height) for b in prob.blocks] == [(s.name, 1, 1) for s in plan.stages]
    assert prob.pairs == _plan_stage_edges(plan)
    assert any(lay.merged for lay in plan.layers) == (device == "vek280")  # the memory-tile path is covered
    p = place_rows(plan)
    assert [(r.column, r.row) for r in p.rects] == [(i, 0) for i in range(len(plan.stages))]
    tiles = {k.node: k.tile for k in lower(plan).kernels}
    assert tiles == {s.name: (i, 0) for i, s in enumerate(plan.stages)}
    narrow = solve(replace(prob, grid=Grid(3, 8, prob.grid.snake)), "greedy-right")
    assert [(r.column, r.row) for r in narrow.rects] == [(i % 3, i // 3) for i in range(len(plan.stages))]
