"""The mapped-graph IR (``aieflow.mapped``): its structural check catches broken graphs, and the
Dense chain (AIE1 direct buffers, AIE-ML memory-tile links, replicas) and the DAG lower into
graphs whose kernels, cascades, buffers and PLIOs are the ones their plans and placements say
(counts derived here from the plans, not from the lowering)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch

import aieflow
from aieflow.dag.emit import idents, lower
from aieflow.mapped import Kernel, Link, MappedGraph, Plio, Port
from aieflow.mapped.adf import statements
from aieflow.model_zoo import residual_mlp, torch_mlp
from aieflow.passes.emit import lower_chain
from aieflow.perf.simulate import design_pipeline


def _two_kernels(**links):
    k0 = Kernel("k0", "n", "C", (), "kernels/n.cc", (0, 0), (8,), (8,))
    k1 = Kernel("k1", "n", "C", (), "kernels/n.cc", (1, 0), (8, None), (8,))
    plios = (Plio("pin", "in", 64, "data/in.txt"), Plio("pout", "out", 64, "data/out.txt"))
    base = [Link("plio", Port("pin", "out", 0), Port("k0", "in", 0)),
            Link("plio", Port("pin", "out", 0), Port("k1", "in", 0)),
            Link("cascade", Port("k0", "out", 0), Port("k1", "in", 1)),
            Link("plio", Port("k1", "out", 0), Port("pout", "in", 0))]
    return MappedGraph((k0, k1), (), plios, tuple(links.get("links", base)))


def test_the_check_accepts_a_good_graph_and_renders_it():
    g = _two_kernels()
    g.check()
    text = [str(s) for s in statements(g)]
    assert "adf::connect<adf::cascade>(k0.out[0], k1.in[1])" in text
    assert "adf::dimensions(k1.in[0]) = {8}" in text and not any("k1.in[1]) =" in s for s in text)


@pytest.mark.parametrize("broken, why", [
    ("twice", "fed twice"), ("unfed", "never fed"), ("kind", "kind"), ("port", "index"),
])
def test_the_check_refuses_broken_graphs(broken, why):
    good = list(_two_kernels().links)
    if broken == "twice":
        links = [*good, Link("buffer", Port("k0", "out", 0), Port("k1", "in", 0))]
    elif broken == "unfed":
        links = [link for link in good if link.kind != "cascade"]
    elif broken == "kind":
        links = [Link("telepathy", good[0].src, good[0].dst), *good[1:]]
    else:
        links = [*good[:3], Link("plio", Port("k1", "out", 3), Port("pout", "in", 0))]
    with pytest.raises(AssertionError):
        _two_kernels(links=links).check()


def test_a_kernel_function_is_created_from_its_function_and_takes_no_arguments():
    """``Kernel.function``: ``adf::kernel::create(fn)`` (UG1079), which has no constructor arguments,
    so a function kernel with arguments is refused rather than written without them."""
    from aieflow.devices import get_device
    from aieflow.mapped.adf import graph_header

    g = _two_kernels()
    fn = replace(g, kernels=(replace(g.kernels[0], cls="k0_fn", function=True), g.kernels[1]))
    text = graph_header(fn, "G", version="0", device=get_device("vck190"), title="t")
    assert "k0 = adf::kernel::create(k0_fn);" in text
    assert "k1 = adf::kernel::create_object<C>();" in text
    with_args = replace(fn, kernels=(replace(fn.kernels[0], args=("7",)), fn.kernels[1]))
    with pytest.raises(
        AssertionError, match="k0: a kernel function takes no constructor arguments"
    ):
        with_args.check()
    with pytest.raises(AssertionError, match="no constructor arguments"):
        graph_header(with_args, "G", version="0", device=get_device("vck190"), title="t")


def _chain(device, dims, **config):
    x = np.random.default_rng(0).standard_normal((32, dims[0])).astype(np.float32)
    return aieflow.compile(torch_mlp(dims), device=device, example_input=x[:4], calibration=x,
                           config={"precision": "int8", **config})


@pytest.mark.parametrize("device, dims, config", [
    ("vck190", [256, 128, 10], {"batch": 8}),
    # a 2 x 2 cascade on AIE1: its second row (array row 1) cascades west
    ("vck190", [64, 32, 8], {"batch": 8, "layers": {"0": {"parallelism": {"cas_len": 2, "cas_num": 2}}}}),
    ("vek280", [512, 256, 10], {"batch": 8}),
    ("vek280", [64, 32, 8], {"batch": 8, "replicas": 2}),
])
def test_the_chain_lowers_to_its_plan(device, dims, config):
    d = _chain(device, dims, **config)
    g = lower_chain(d.graph, d.device, d.placement)
    g.check()
    layers, reps = d.layers(), d.replicas
    assert len(g.kernels) == reps * sum(n.plan.cas_num * n.plan.cas_len for n in layers) == d.estimate().tiles_used
    kinds = [link.kind for link in g.links]
    assert kinds.count("cascade") == reps * sum(n.plan.cas_num * (n.plan.cas_len - 1) for n in layers)
    # PLIOs: one input per cascade column of the first layer, one output per row of the last
    assert len([p for p in g.plios if p.direction == "in"]) == reps * layers[0].plan.cas_len
    assert len([p for p in g.plios if p.direction == "out"]) == reps * layers[-1].plan.cas_num
    # every kernel sits inside its layer's placed rectangle (replica 0)
    for k in g.kernels:
        if k.replica == 0:
            r = d.placement.rect(k.node)
            assert r.column <= k.tile[0] < r.column + r.width and r.row <= k.tile[1] < r.row + r.height
    if d.device.memory_tile_rows and any(n.plan.link == "memtile" for n in layers):
        assert g.buffers and "memtile" in kinds
    else:
        assert not g.buffers and "memtile" not in kinds
    # cascades join neighbouring tiles of a row in the generation's direction (AIE1: east on even
    # array rows, west on odd ones, AM009; AIE-ML: east), into the next position's cascade port
    tile = {k.var: k.tile for k in g.kernels}
    snake = d.device.generation.cascade_serpentine
    for link in (a for a in g.links if a.kind == "cascade"):
        (x0, y0), (x1, y1) = tile[link.src.owner], tile[link.dst.owner]
        assert (x1, y1) == (x0 + (-1 if snake and y0 % 2 else 1), y0) and link.dst.index == 1
    # the rendered graph is the project's
    assert all(str(s) in d.files["src/graph.h"] for s in statements(g))


def test_the_dag_lowers_to_its_plan():
    torch.manual_seed(0)
    x = np.random.default_rng(0).standard_normal((32, 32)).astype(np.float32)
    d = aieflow.compile(residual_mlp(32, 48), device="vek280", example_input=x[:4], calibration=x,
                        config={"precision": "int8", "batch": 8})
    g = lower(d.plan, d.placement, idents(d.plan), [], d.device, costed=False)
    g.check()
    assert len(g.kernels) == d.plan.tiles
    assert len(g.buffers) == sum(len(k.shards) for k in d.plan.links)
    assert {k.node for k in g.kernels} == set(d.plan.compute)
    assert all(str(s) in d.files["src/graph.h"] for s in statements(g))


# ----------------------------------------------------------------------------- the stage graph (estimate pass)
# Expected stages and edges are derived here from the plans (the DAG's links, the chain's layer
# order and link kinds), not from the stage builder.


def _edges(pipe):
    producer = {s.output: s.name for s in pipe.stages if s.output is not None}
    return {(producer[b], s.name) for s in pipe.stages for b in s.reads}


def _residual(device="vek280"):
    torch.manual_seed(0)
    x = np.random.default_rng(0).standard_normal((32, 32)).astype(np.float32)
    return aieflow.compile(residual_mlp(32, 48), device=device, example_input=x[:4], calibration=x,
                           config={"precision": "int8", "batch": 8})


def test_the_dag_stage_graph_is_its_plan():
    from aieflow.mapped.estimate import pipeline

    d = _residual()
    g = lower(d.plan, d.placement, idents(d.plan), [], d.device)
    pipe = pipeline(g)
    names = [s.name for s in pipe.stages]
    assert len(names) == len(set(names))
    # one stage per compute node (its kernel group), a write and a read (or the output PLIO) per link
    expected: set[tuple[str, str]] = set()
    for link in d.plan.links:
        w = f"write:{link.name}"
        expected |= {(p, w) for p in link.source.producers} | ({("plio_in", w)} if link.source.reads_input else set())
        if link.consumer is None:
            expected.add((w, "plio_out"))
        else:
            expected |= {(w, f"read:{link.name}"), (f"read:{link.name}", link.consumer)}
    assert _edges(pipe) == expected
    assert set(names) == {s for e in expected for s in e}
    assert {k.node for k in g.kernels} <= set(names)
    # the sink is the output PLIO's stage, which writes no buffer; every other stage writes one
    # ping-pong buffer that all its successors read (so each of them gates its slots)
    assert pipe.sink == "plio_out"
    for s in pipe.stages:
        succ = {b for a, b in expected if a == s.name}
        assert (s.output is None) == (s.name == "plio_out")
        if s.output is not None:
            assert {t.name for t in pipe.stages if s.output in t.reads} == succ and pipe.buffers[s.output] == 2
    # a fan-out exists in this design (the residual's input is read by the Dense path and the add)
    assert any(len({b for a, b in expected if a == s}) > 1 for s in names)
    # the estimate is that stage graph's: the stages it reports are these, with the kernels' costs
    e = d.estimate()
    assert {s.name for s in e.stages} == set(names)
    by = {s.name: s for s in e.stages}
    for k in g.kernels:
        assert by[k.node].occupancy_ns == k.cost.occupancy_ns > 0


@pytest.mark.parametrize("device, dims, config", [
    ("vck190", [256, 128, 10], {"batch": 8}),
    ("vek280", [512, 256, 10], {"batch": 8}),
    ("vek280", [64, 32, 8], {"batch": 8, "replicas": 2}),
])
def test_the_chain_stage_graph_is_a_path_through_its_layers(device, dims, config):
    from aieflow.mapped.estimate import pipeline

    d = _chain(device, dims, **config)
    g = lower_chain(d.graph, d.device, d.placement)
    pipe = pipeline(g)
    layers = d.layers()
    names = [s.name for s in pipe.stages]
    # a path: each stage reads exactly the one before it, from the first layer's PLIOs to the last's
    assert _edges(pipe) == set(zip(names, names[1:], strict=False))
    assert names[0] == f"plio_in:{layers[0].name}" and names[-1] == f"plio_out:{layers[-1].name}" == pipe.sink
    kernel_at = [names.index(n.name) for n in layers]
    assert kernel_at == sorted(kernel_at)
    for prev, node, a, b in zip(layers, layers[1:], kernel_at, kernel_at[1:], strict=False):
        between = names[a + 1:b]
        if node.plan.link == "memtile":
            assert between == [f"memtile_write:{prev.name}->{node.name}", f"memtile_read:{prev.name}->{node.name}"]
        else:  # AIE1: a tile DMA unless every consumer tile is a memory neighbour of its producer row
            east = not d.device.generation.cascade_serpentine
            near = all(abs(x0 - x1) + abs(y0 - y1) <= 1
                       for r in range(prev.plan.cas_num)
                       for x0, y0 in [d.placement.tile(prev.name, r, prev.plan.cas_len - 1, east)]
                       for rr in range(node.plan.cas_num)
                       for x1, y1 in [d.placement.tile(node.name, rr, r, east)])
            assert between == ([] if near else [f"dma:{prev.name}->{node.name}"])
    # every replica's kernels carry copy 0's stages: one stage per layer whatever the copies, and
    # the estimate's graph (copy 0 lowered alone) is the whole design's
    assert sum(s.kind == "kernel" for s in pipe.stages) == len(layers)
    assert [s.name for s in d.estimate().stages] == names
    assert design_pipeline(d) == pipe


def _costed(slow_reader_ns: float):
    """plio -> k0 -> {k1, k2} -> k3 (an add) -> plio, k2 ``slow_reader_ns`` per batch."""
    from aieflow.mapped import Cost

    def c(name, ns, kind="kernel"):
        return Cost(name, kind, "compute", ns)

    ks = [Kernel(f"k{i}", f"n{i}", "C", (), "kernels/n.cc", (i, 0), (8,) * (2 if i == 3 else 1), (8,),
                 cost=c(f"n{i}", ns)) for i, ns in enumerate((10.0, 10.0, slow_reader_ns, 10.0))]
    plios = (Plio("pin", "in", 64, "data/in.txt", cost=c("pin", 5.0, "plio")),
             Plio("pout", "out", 64, "data/out.txt", cost=c("pout", 5.0, "plio")))
    links = [Link("plio", Port("pin", "out", 0), Port("k0", "in", 0)),
             Link("buffer", Port("k0", "out", 0), Port("k1", "in", 0)),
             Link("buffer", Port("k0", "out", 0), Port("k2", "in", 0)),
             Link("buffer", Port("k1", "out", 0), Port("k3", "in", 0)),
             Link("buffer", Port("k2", "out", 0), Port("k3", "in", 1)),
             Link("plio", Port("k3", "out", 0), Port("pout", "in", 0))]
    return MappedGraph(tuple(ks), (), plios, tuple(links))


def test_every_reader_of_a_buffer_gates_its_slot():
    from aieflow.mapped.estimate import pipeline
    from aieflow.perf.simulate import run_pipeline

    fast, slow = run_pipeline(pipeline(_costed(10.0))), run_pipeline(pipeline(_costed(40.0)))
    assert fast.interval_ns == pytest.approx(10.0)
    # the slow reader holds k0's buffer 40 ns per batch: k0 (10 ns) waits for the slot, the fast
    # reader only for its input
    assert slow.interval_ns == pytest.approx(40.0)
    st = {s.name: s for s in slow.stages}
    assert st["n0"].blocked_ns == pytest.approx(30.0) and st["n1"].blocked_ns < st["n0"].blocked_ns
    # latency: the longest path, plio + k0 + k2 + k3 + plio
    assert slow.latency_ns == pytest.approx(5 + 10 + 40 + 10 + 5)


def test_the_stage_graph_refuses_uncosted_and_inconsistent_graphs():
    from aieflow.mapped.estimate import pipeline

    g = _costed(10.0)
    with pytest.raises(ValueError, match="kernel k2 carries no cost"):
        pipeline(replace(g, kernels=(*g.kernels[:2], replace(g.kernels[2], cost=None), g.kernels[3])))
    clash = replace(g.kernels[2], cost=replace(g.kernels[1].cost, occupancy_ns=99.0))
    with pytest.raises(ValueError, match="two different costs"):
        pipeline(replace(g, kernels=(*g.kernels[:2], clash, g.kernels[3])))


def test_the_mapped_graphs_resources_are_the_plans():
    """``mapped.estimate.resources`` (what CNN designs report as ``tiles_used`` /
    ``memory_tiles_used``) counts the chain's and the DAG's mapped graphs as their plans do: one
    tile per kernel, the memory tiles of their links' shards."""
    from aieflow.mapped.estimate import resources

    d = _residual()
    perf = d.to_json()["performance"]
    assert perf["memory_tiles_used"] > 0
    assert resources(lower(d.plan, d.placement, idents(d.plan), [], d.device, costed=False), d.device) == (perf["tiles_used"],
                                                                                   perf["memory_tiles_used"])
    d = _chain("vck190", [256, 128, 10], batch=8)
    perf = d.to_json()["performance"]
    assert resources(lower_chain(d.graph, d.device, d.placement), d.device) == (perf["tiles_used"], 0)


@pytest.mark.parametrize("device, dims, config", [
    # a memory-tile link of 8 consumer columns (two shards), two copies
    ("vek280", [128, 256, 64], {"batch": 8, "replicas": 2, "layers": {"2": {"parallelism": {"cas_len": 8, "cas_num": 1}}}}),
    ("vek385", [128, 256, 64], {"batch": 8, "layers": {"1": {"parallelism": {"cas_len": 4, "cas_num": 2}}}}),
    ("vck190", [64, 32, 8], {"batch": 8, "replicas": 2}),  # no memory tiles
])
def test_the_chains_resources_are_its_mapped_graphs(device, dims, config):
    """The chain's ``tiles_used`` / ``memory_tiles_used`` are ``mapped.estimate.resources`` of its
    lowering, and equal what the plans say (counted here: every copy's cascade tiles; per memory-tile
    link one memory tile per shard: the consumer's columns in groups of the memory tile's channels,
    none on AIE1)."""
    from aieflow.mapped.estimate import resources

    d = _chain(device, dims, **config)
    layers, copies = d.layers(), len(d.placement.replicas)
    perf = d.estimate()
    assert resources(lower_chain(d.graph, d.device, d.placement), d.device) == (perf.tiles_used, perf.memory_tiles_used)
    channels = d.device.memtile_channels
    memtiles = sum(-(-n.plan.cas_len // channels) for n in layers if n.plan.link == "memtile")
    assert perf.tiles_used == copies * sum(n.plan.cas_len * n.plan.cas_num for n in layers)
    assert perf.memory_tiles_used == copies * memtiles
    assert (memtiles > 0) == bool(d.device.memory_tile_rows) and copies == config.get("replicas", 1)


def test_a_borrowing_layers_lenders_are_counted_as_its_tiles():
    """A layer whose buffers live in its neighbours' memories occupies their tiles too: its kernels
    carry the tiles next to them (``Kernel.borrowed``, none of them a kernel's) and ``tiles_used``
    counts them, as the plan's footprint does."""
    from aieflow.mapped.estimate import resources
    from aieflow.perf.published import aie4ml_design

    d = aie4ml_design(("i16", "i8"), 128, True)
    p = d.layers()[0].plan
    assert sorted(p.borrows) == ["north", "south"]  # the published kernel's buffers do not fit one tile's memory
    mg = lower_chain(d.graph, d.device, d.placement)
    (k,) = mg.kernels
    step = {"north": 1, "south": -1}
    assert sorted(k.borrowed) == sorted((k.tile[0], k.tile[1] + step[b]) for b in p.borrows)
    assert resources(mg, d.device)[0] == 1 + len(p.borrows) == d.estimate().tiles_used


# ----------------------------------------------------------------------------- one Dense path (dense/resident_cascade)


def _two_layer(seed=0):
    """``fc2(relu(fc1(x)))`` with the weights of ``residual_mlp(32, 48, seed)``: the residual MLP's
    Dense layers as a chain (same layer names, so the same C identifiers)."""
    from torch import nn

    src = residual_mlp(32, 48, seed)

    class TwoLayer(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1, self.fc2 = src.fc1, src.fc2

        def forward(self, x):
            return self.fc2(torch.relu(self.fc1(x)))

    return TwoLayer().eval()


def test_a_dense_layer_lowers_and_emits_alike_in_the_chain_and_the_dag():
    """The chain and the DAG lower and emit a Dense layer through one path: the residual MLP's
    ``fc1`` in the DAG and the same layer (weights, calibration, types and plan, checked first) at
    the head of a chain have the same kernels (class, parameters, source, port sizes, tile within
    the layer's rectangle, buffer locations), the same cascades and byte-identical weight headers
    and kernel source."""
    x = np.random.default_rng(0).standard_normal((32, 32)).astype(np.float32)
    cfg = {"precision": "int8", "batch": 8, "layers": {"fc1": {"parallelism": {"cas_len": 2, "cas_num": 2}}}}
    dag = aieflow.compile(residual_mlp(32, 48), device="vek280", example_input=x[:8], calibration=x, config=cfg)
    chain = aieflow.compile(_two_layer(), device="vek280", example_input=x[:8], calibration=x, config=cfg)
    assert type(dag).__name__ == "DagDesign" and type(chain).__name__ == "Design"
    dn, cn = dag.plan.node("fc1"), next(n for n in chain.layers() if n.name == "fc1")
    # the same plan but for what feeds it (the DAG: a memory tile; the chain's head: its PLIOs)
    assert (dn.plan.link, cn.plan.link) == ("memtile", "plio")
    assert dn.types == cn.types and replace(dn.plan, link="plio") == cn.plan and (dn.plan.cas_len, dn.plan.cas_num) == (2, 2)
    dg = lower(dag.plan, dag.placement, idents(dag.plan), [], dag.device, costed=False)
    cg = lower_chain(chain.graph, chain.device, chain.placement)

    def rel(mg, placement):
        r = placement.rect("fc1")
        ks = {k.var: k for k in mg.kernels if k.node == "fc1"}
        kernels = {(v, k.cls, k.args, k.source, k.in_sizes, k.out_sizes, (k.tile[0] - r.column, k.tile[1] - r.row),
                    k.locations) for v, k in ks.items()}
        cascades = {(a.src, a.dst) for a in mg.links if a.kind == "cascade" and a.src.owner in ks}
        return kernels, cascades

    dk, dc = rel(dg, dag.placement)
    ck, cc = rel(cg, chain.placement)
    assert len(dk) == 4 and len(dc) == 2  # 2 x 2 tiles, one cascade per row
    assert dk == ck and dc == cc
    # each row's cascade runs east (AIE-ML) from position c into position c + 1's cascade port
    tile = {k.var: k.tile for k in dg.kernels}
    assert all(tile[b.owner] == (tile[a.owner][0] + 1, tile[a.owner][1]) and b.index == 1 for a, b in dc)
    own = sorted(p for p in dag.files if p.startswith(("src/weights/fc1_", "src/kernels/fc1.")))
    assert own == sorted(p for p in chain.files if p.startswith(("src/weights/fc1_", "src/kernels/fc1.")))
    assert len(own) == 5 and all(dag.files[p] == chain.files[p] for p in own)
