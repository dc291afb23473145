"""The cost functions the chain and the DAG share (``perf/costs.py``), against figures worked out
here from the catalog's rates and the movement model's stated constants, and one Dense layer costed
alike in both."""

from __future__ import annotations

import numpy as np
import pytest
from test_mapped import _two_layer

import aieflow
from aieflow.devices import get_device
from aieflow.mapped.place import Rect
from aieflow.perf import costs

# perf/movement.py's stated constants (cycles): a DMA channel starting its buffer descriptor, a lock
# acquire + release per buffer, the fixed start of a stream transfer, one cycle per switch hop.
DMA_START, LOCK, STREAM_FIXED, HOP = 8, 3 + 1, 3, 1


def test_the_hop_rules_follow_the_array_rows():
    vek280 = get_device(
        "vek280"
    )  # two memory-tile rows between the interface tiles and the compute rows
    assert vek280.memory_tile_rows == 2
    assert costs.interface_hops(vek280, 0) == 3 and costs.interface_hops(vek280, 4) == 7
    assert costs.memtile_hops(0) == 1 and costs.memtile_hops(3, -2) == 6 == costs.memtile_hops(3, 2)
    assert costs.interface_hops(get_device("vck190"), 2) == 3  # AIE1: no memory tiles


def test_a_memory_tile_link_crosses_the_rows_and_columns_between_its_rectangles():
    """One rule for both sides of a memory-tile link (the chain's and the DAG's), worked by hand:
    the write from the producer's top row and last column to the memory tile under the consumer's
    first column, the read from there up to the consumer's top row."""
    vek280 = get_device("vek280")
    prod = Rect("a", 2, 1, 3, 2)  # columns 2..4, rows 1..2: top row 2, last column 4
    low = Rect("b", 0, 0, 1, 1)  # column 0, row 0
    cons = Rect("c", 1, 0, 2, 3)  # columns 1..2, rows 0..2: first column 1, top row 2
    assert costs.memtile_link_hops(vek280, [prod], cons) == (3 + 2 + 1, 2 + 1)
    assert costs.memtile_link_hops(vek280, [low, prod], cons) == (6, 3)  # the farthest producer
    assert costs.memtile_link_hops(vek280, [low], cons) == (
        1 + 0 + 1,
        3,
    )  # one column west of the consumer
    assert costs.memtile_link_hops(vek280, [], cons) == (
        2,
        3,
    )  # the input PLIO: up the 2 memory-tile rows
    assert costs.memtile_link_hops(vek280, [prod], None) == (
        2 + 1,
        0,
    )  # the output: drained by its PLIO


def test_the_dag_costs_its_memory_tile_links_by_the_chains_hop_rule():
    """Every memory-tile read / write stage of a placed DAG is delayed by the stream's fixed start
    plus one cycle per hop, the hops counted here from the placement (top rows, columns between)."""
    from aieflow.dag.perf import lowered_dag
    from aieflow.model_zoo import residual_mlp

    x = np.random.default_rng(0).standard_normal((32, 32)).astype(np.float32)
    d = aieflow.compile(
        residual_mlp(32, 48),
        device="vek280",
        example_input=x[:8],
        calibration=x,
        config={
            "precision": "int8",
            "batch": 8,
            "layers": {
                "fc1": {"parallelism": {"cas_len": 2, "cas_num": 2}},
                "fc2": {"parallelism": {"cas_len": 1, "cas_num": 3}},
            },
        },
    )
    top = {r.layer: r.row + r.height - 1 for r in d.placement.rects}
    first = {r.layer: r.column for r in d.placement.rects}
    last = {r.layer: r.column + r.width - 1 for r in d.placement.rects}
    mg = lowered_dag(d.plan, d.placement, d.device)
    delays = {}
    for b in mg.buffers:
        delays[b.write_cost.name] = b.write_cost.delay_ns
        if b.read_cost is not None:
            delays[b.read_cost.name] = b.read_cost.delay_ns
    seen = 0
    for link in d.plan.links:
        prods = link.source.producers
        if link.consumer is None:
            w = max(top[p] + 1 for p in prods)
        else:
            w = max(top[p] + 1 + abs(last[p] - first[link.consumer]) for p in prods) if prods else 2
            assert delays[f"read:{link.name}"] == pytest.approx(
                (STREAM_FIXED + (top[link.consumer] + 1) * HOP) / 1.25
            )
            seen += 1
        assert delays[f"write:{link.name}"] == pytest.approx((STREAM_FIXED + w * HOP) / 1.25), (
            link.name
        )
    # reads costed, some node above row 0 and some write crossing columns
    assert seen >= 3 and max(top.values()) >= 2 and max(last.values()) > min(first.values())


@pytest.mark.parametrize(
    "nbytes, ports, memtiles, hops",
    [(1024, 2, 1, 3), (4096, 8, 1, 1), (4096, 8, 2, 5), (100, 1, 1, 0)],
)
def test_a_memory_tile_side_costs_its_rounds_of_channels(nbytes, ports, memtiles, hops):
    d = get_device(
        "vek280"
    )  # 32-bit streams, 128-bit memory-tile DMA memory port, 6 channels, 1.25 GHz
    per = -(-nbytes // 4) + DMA_START + 2 * LOCK  # one buffer per port at 4 bytes a cycle
    rounds = -(-ports // (6 * memtiles))
    c = costs.memtile("m", nbytes, ports, d, hops, memtiles)
    assert (c.kind, c.bound, c.cycles) == ("memtile", "memory", rounds * per)
    assert c.occupancy_ns == pytest.approx(rounds * per / 1.25) and c.delay_ns == pytest.approx(
        (STREAM_FIXED + hops * HOP) / 1.25
    )


def test_a_plio_and_a_tile_dma_cost_their_rates():
    d = get_device(
        "vck190"
    )  # AIE1 at 1.25 GHz: 64-bit PLIOs at 312.5 MHz (2 bytes per AIE cycle), 32-bit streams
    assert (d.clock_hz, d.pl_clock_hz, d.generation.stream_bits) == (1.25e9, 312.5e6, 32)
    p = costs.plio("p", 1000, d, 2)
    assert (p.kind, p.bound, p.cycles) == ("plio", "plio", 500 + DMA_START + LOCK)
    assert p.delay_ns == pytest.approx((STREAM_FIXED + 3 * HOP) / 1.25)
    t = costs.tile_dma("t", 1000, d, 4)
    assert (t.kind, t.bound, t.cycles) == ("dma", "stream", 250 + DMA_START + 2 * LOCK)
    assert t.delay_ns == pytest.approx((STREAM_FIXED + 4 * HOP) / 1.25)


def test_a_dense_layer_costs_alike_in_the_chain_and_the_dag():
    """The residual MLP's ``fc1`` in the DAG and the same layer (same plan) at a chain's head: every
    kernel of it carries one and the same stage cost in both lowerings."""
    from aieflow.dag.perf import lowered_dag
    from aieflow.model_zoo import residual_mlp
    from aieflow.passes.emit import lowered_chain

    x = np.random.default_rng(0).standard_normal((32, 32)).astype(np.float32)
    cfg = {
        "precision": "int8",
        "batch": 8,
        "layers": {"fc1": {"parallelism": {"cas_len": 2, "cas_num": 2}}},
    }
    dag = aieflow.compile(
        residual_mlp(32, 48), device="vek280", example_input=x[:8], calibration=x, config=cfg
    )
    chain = aieflow.compile(
        _two_layer(), device="vek280", example_input=x[:8], calibration=x, config=cfg
    )
    in_dag = {
        k.cost for k in lowered_dag(dag.plan, dag.placement, dag.device).kernels if k.node == "fc1"
    }
    in_chain = {
        k.cost
        for k in lowered_chain(chain.graph, chain.device, chain.placement).kernels
        if k.node == "fc1"
    }
    assert len(in_dag) == 1 and in_dag == in_chain
    (c,) = in_dag
    assert (
        (c.name, c.kind, c.tiles) == ("fc1", "kernel", 4) and c.occupancy_ns > 0 and c.delay_ns > 0
    )
