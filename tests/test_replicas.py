"""Whole-design replication: copies side by side on the array, each on its own batches."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import aieflow
from aieflow.config import parse_config
from aieflow.devices import get_device
from aieflow.errors import ConfigError, PlanError
from aieflow.model_zoo import qdq_mlp
from aieflow.passes.place import check_placement

MODEL = qdq_mlp([32, 48, 16], seed=1)


@pytest.mark.parametrize("raw, want", [(None, None), ("auto", None), (3, 3), (1, 1)])
def test_parse_replicas(raw, want):
    c = parse_config({} if raw is None else {"replicas": raw})
    assert c.replicas == want
    assert parse_config(c.to_json()) == c


@pytest.mark.parametrize("raw", [0, -2, "many", 2.5, True])
def test_bad_replicas_are_config_errors(raw):
    with pytest.raises(ConfigError, match="replicas"):
        parse_config({"replicas": raw})


@pytest.mark.parametrize("device", ["vck190", "vek280", "vek385"])
def test_copies_are_legal_disjoint_and_keep_cascade_direction(device):
    dev = get_device(device)
    d = aieflow.compile(MODEL, device=device, config={"replicas": 4, "layers": {"fc0": {"parallelism": {"cas_num": 3}}}})
    p = d.placement
    assert len(p.replicas) == 4 and d.replicas == 4
    check_placement(p, dev)  # in bounds, no overlap across copies
    cells = [c for k in range(4) for r in p.replica_rects(k) for c in r.cells()]
    assert len(cells) == len(set(cells)) == 4 * sum(n.plan.tiles for n in d.layers())
    if dev.generation.name == "aie":  # the cascade snakes: copies move by even rows only
        assert all(dr % 2 == 0 for _, dr in p.replicas)
    # every copy's kernels are emitted at their own tiles
    locs = [line for line in d.files["src/graph.h"].splitlines() if "adf::location<adf::kernel>" in line]
    assert len(locs) == len(set(loc.split("=")[1] for loc in locs)) == len(cells)


def test_too_many_copies_and_too_few_interface_ports_are_clear_errors():
    with pytest.raises(PlanError, match="copies of the design fit"):
        # a copy 4 columns wide and 6 rows high: one band of at most 9 copies on 38 columns
        aieflow.compile(MODEL, device="vek280", config={"replicas": 12, "layers": {"fc0": {"parallelism": {"cas_len": 4, "cas_num": 6}}}})
    # VEK280 offers 2 input PLIOs per interface column: 77 one-column copies need 77
    with pytest.raises(PlanError, match="input PLIO ports"):
        aieflow.compile(qdq_mlp([16, 8], seed=0), device="vek280", config={"replicas": 77})


@pytest.mark.parametrize("device", ["vck190", "vek280"])
def test_throughput_target_fills_spare_tiles_with_copies(device):
    """The search replicates only for throughput; a copy is the same design, so the modelled
    throughput is exactly k times that of one copy with the same parallelism."""
    thr = aieflow.compile(MODEL, device=device, config={"target": "throughput"})
    k = thr.replicas
    assert k > 1 and thr.exploration.chosen.replicas == k
    layers = {n.name: {"parallelism": {"cas_len": n.plan.cas_len, "cas_num": n.plan.cas_num}} for n in thr.layers()}
    one = aieflow.compile(MODEL, device=device, config={"layers": layers, "replicas": 1})
    a, b = thr.estimate(), one.estimate()
    assert a.tiles_used == k * b.tiles_used <= get_device(device).compute_tiles
    assert a.memory_tiles_used == k * b.memory_tiles_used
    assert a.interval_ns == pytest.approx(b.interval_ns)
    # the copies may be placed differently from the lone design (a bounding box that tiles the
    # array): a few switch hops more or less
    assert a.latency_ns == pytest.approx(b.latency_ns, rel=0.01)
    assert a.throughput_ops_per_s == pytest.approx(k * b.throughput_ops_per_s)
    assert thr.resources()["plio_in"] == k * one.resources()["plio_in"]
    # latency and resources targets never replicate
    for target in ("latency", "resources"):
        assert aieflow.compile(MODEL, device=device, config={"target": target}).replicas == 1


@pytest.mark.parametrize("device", ["vck190", "vek280"])
def test_copies_run_bit_exact_on_x86_and_a_swapped_copy_is_caught(device, tmp_path):
    d = aieflow.compile(MODEL, device=device, config={"replicas": 3})
    ins = sorted(f for f in d.files if f.startswith("data/in_"))
    assert len(ins) == 3 * d.layers()[0].plan.cas_len
    r = d.verify(samples=100, cache_dir=tmp_path)  # 100 samples: 13 batches over 3 copies, padded
    assert r.ok and r.values == 100 * 16
    # copies 0 and 1 exchange their input files: each computes the other's samples
    first = d.layers()[0].name
    a, b = f"data/in_{first}_c0.txt", f"data/in_{first}_c0_x1.txt"
    graph = d.files["src/graph.h"].replace(a, "@@").replace(b, a).replace("@@", b)
    bad = dataclasses.replace(d, files={**d.files, "src/graph.h": graph})
    r = bad.verify(samples=100, cache_dir=tmp_path)
    assert not r.ok and r.mismatches > 0


def test_emitted_data_files_split_iterations_round_robin():
    d = aieflow.compile(MODEL, device="vek280", config={"replicas": 2})
    x = np.random.default_rng(0).standard_normal((64, 32)).astype(np.float32)
    from aieflow.passes.emit import replica_merge, replica_share

    xq = d.quantise_input(x)
    batch = d.config.batch
    parts = [replica_share(xq, batch, 2, k) for k in range(2)]
    assert np.array_equal(parts[1][:batch], xq[batch : 2 * batch])  # copy 1 takes the second batch
    assert np.array_equal(replica_merge(parts, batch), xq)
