"""The DAG's tiles and memory tiles are the mapped graph's (``mapped/estimate.resources``, as the
chain's and the CNN's): on a Mixer, a two-head attention block and the residual MLP they equal the
plan's own count (compute tiles per node, memory tiles per link) and, on the residual MLP, a count
made by hand here."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from test_attention import TwoHead, _data, _model
from test_graphs import Mixer

import aieflow
from aieflow.dag.perf import lowered_dag
from aieflow.mapped.estimate import resources
from aieflow.model_zoo import residual_mlp

X32 = np.random.default_rng(0).standard_normal((32, 32)).astype(np.float32)


def _mixer():
    torch.manual_seed(0)
    return Mixer().eval(), np.random.default_rng(0).standard_normal((16, 16, 32)).astype(np.float32)


def _attention():
    return _model(TwoHead), _data()


def _residual():
    return residual_mlp(32, 48), X32


def _plan_count(d) -> tuple[int, int]:
    """The plan's own count: each compute node's tiles, each link's memory tiles (its shards, or
    its ping-pong bytes over a memory tile's, whichever is more)."""
    p = d.plan
    tiles = sum(p.tiles_of(n) for n in p.compute)
    mem = sum(
        max(
            len(k.shards),
            math.ceil(
                sum(2 * math.prod(s.dims) * k.element_bytes for s in k.shards)
                / d.device.memory_tile_bytes
            ),
        )
        for k in p.links
    )
    return tiles, mem


@pytest.mark.parametrize(
    "make", [_mixer, _attention, _residual], ids=["mixer", "two-head", "residual-mlp"]
)
@pytest.mark.parametrize("device", ["vek280", "vek385"])
def test_the_dag_counts_its_tiles_on_the_mapped_graph(make, device):
    model, x = make()
    d = aieflow.compile(
        model, device=device, example_input=x[:1], calibration=x, config={"precision": "int8"}
    )
    mg = lowered_dag(d.plan, d.placement, d.device)
    counted = resources(mg, d.device)
    perf = d.to_json()["performance"]
    assert counted == _plan_count(d) == (d.estimate().tiles_used, d.estimate().memory_tiles_used)
    assert (perf["tiles_used"], perf["memory_tiles_used"]) == counted
    assert d.resources()["compute_tiles"] == counted[0] and counted[1] >= len(d.plan.links) > 0


def test_the_residual_mlps_tiles_counted_by_hand():
    """``x + fc2(relu(fc1(x)))`` at batch 8 on VEK280, fc1 a 2 x 2 cascade and fc2 1 x 3: 4 + 3
    Dense tiles and one Add tile (8 rows of 32 int8 fit one); five memory-tile links (the input to
    fc1 and to the Add, fc1 -> fc2, fc2 -> the Add, the Add to the output PLIO), each one shard
    of at most 8 x 48 bytes, ping-pong in one 512 KiB memory tile."""
    model, x = _residual()
    cfg = {
        "precision": "int8",
        "batch": 8,
        "layers": {
            "fc1": {"parallelism": {"cas_len": 2, "cas_num": 2}},
            "fc2": {"parallelism": {"cas_len": 1, "cas_num": 3}},
        },
    }
    d = aieflow.compile(model, device="vek280", example_input=x[:1], calibration=x, config=cfg)
    assert resources(lowered_dag(d.plan, d.placement, d.device), d.device) == (4 + 3 + 1, 5)
    assert (d.estimate().tiles_used, d.estimate().memory_tiles_used) == (8, 5)
