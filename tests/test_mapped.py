"""The mapped-graph IR (``aieflow.mapped``): its structural check catches broken graphs, and the
Dense chain (AIE1 direct buffers, AIE-ML memory-tile links, replicas) and the DAG lower into
graphs whose kernels, cascades, buffers and PLIOs are the ones their plans and placements say
(counts derived here from the plans, not from the lowering)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import aieflow
from aieflow.dag.emit import idents, lower
from aieflow.mapped import Kernel, Link, MappedGraph, Plio, Port
from aieflow.mapped.adf import statements
from aieflow.model_zoo import residual_mlp, torch_mlp
from aieflow.passes.emit import lower_chain


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


def _chain(device, dims, **config):
    x = np.random.default_rng(0).standard_normal((32, dims[0])).astype(np.float32)
    return aieflow.compile(torch_mlp(dims), device=device, example_input=x[:4], calibration=x,
                           config={"precision": "int8", **config})


@pytest.mark.parametrize("device, dims, config", [
    ("vck190", [256, 128, 10], {"batch": 8}),
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
    # the rendered graph is the project's
    assert all(str(s) in d.files["src/graph.h"] for s in statements(g))


def test_the_dag_lowers_to_its_plan():
    torch.manual_seed(0)
    x = np.random.default_rng(0).standard_normal((32, 32)).astype(np.float32)
    d = aieflow.compile(residual_mlp(32, 48), device="vek280", example_input=x[:4], calibration=x,
                        config={"precision": "int8", "batch": 8})
    g = lower(d.plan, d.placement, idents(d.plan), [])
    g.check()
    assert len(g.kernels) == d.plan.tiles
    assert len(g.buffers) == sum(len(k.shards) for k in d.plan.links)
    assert {k.node for k in g.kernels} == set(d.plan.compute)
    assert all(str(s) in d.files["src/graph.h"] for s in statements(g))
