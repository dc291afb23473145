"""Memory-tile transport: the tilings move exactly the elements both layers declare."""

from __future__ import annotations

import dataclasses
import itertools
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import aieflow
from aieflow.devices import get_device
from aieflow.errors import PlanError
from aieflow.model_zoo import qdq_mlp
from aieflow.passes.transport import PING_PONG, Tiling, check_link, memtile_link


def _brute_addresses(t: Tiling, dims) -> list[int]:
    """The ADF tiling walk written as plain loops: tiles along dimension 0, then each tile's
    elements with dimension 0 fastest; outside the boundary reads as padding (-1)."""
    lim = t.boundary or dims
    out = []
    for i in range(t.wrap):
        for e1 in range(t.tile[1]):
            for e0 in range(t.tile[0]):
                d0, d1 = t.offset[0] + i * t.stride + e0, t.offset[1] + e1
                out.append(d0 + d1 * dims[0] if 0 <= d0 < lim[0] and 0 <= d1 < lim[1] else -1)
    return out


@settings(max_examples=60, deadline=None)
@given(
    st.integers(1, 8), st.integers(1, 6), st.integers(0, 12), st.integers(0, 3), st.integers(1, 8), st.integers(1, 5),
    st.booleans(),
)
def test_tiling_addresses_match_a_loop_walk(t0, t1, off, stride_extra, wrap, d1, bounded):
    dims = (off + wrap * (t0 + stride_extra) + 3, d1 + 2)
    t = Tiling((t0, t1), (off, 1), t0 + stride_extra, wrap, (dims[0] - 2, d1) if bounded else None)
    assert t.addresses(dims).tolist() == _brute_addresses(t, dims)
    assert t.elements == t0 * t1 * wrap


def _node(name, cas_len, cas_num, k_slice, n_slice, in_panel, out_panel, batch_pad, bits=8):
    plan = SimpleNamespace(cas_len=cas_len, cas_num=cas_num, k_slice=k_slice, n_slice=n_slice, in_panel=in_panel,
                           out_panel=out_panel, batch_pad=batch_pad)
    types = SimpleNamespace(output=SimpleNamespace(container_bits=bits))
    return SimpleNamespace(name=name, plan=plan, types=types)


PANELS = (4, 8, 16)


def _run_link(link, rows, n_slice, out_panel, batch_pad):
    """The test's own walk of a link: producer row r's port carries feature + 1000 * sample in
    panel order; returns what each consumer column receives (poison -7 for unwritten elements)."""
    contents, received = {}, {}
    for i, sh in enumerate(link.shards):
        buf = np.full(sh.dims[0] * sh.dims[1], -7, dtype=np.int64)
        for ep, w in sh.writes:
            if ep.kind == "row":
                f = ep.index * n_slice + np.arange(n_slice)
                port = np.stack([f + 1000 * b for b in range(batch_pad)])
                stream = port.reshape(batch_pad, n_slice // out_panel, out_panel).transpose(1, 0, 2).ravel()
            else:
                stream = contents[ep.index]
            buf[w.addresses(sh.dims)] = stream
        for ep, rd in sh.reads:
            addr = rd.addresses(sh.dims)
            got = np.where(addr >= 0, buf[np.maximum(addr, 0)], 0)
            if ep.kind == "shard":
                contents[i] = got
            else:
                received[ep.index] = got
    return received


@settings(max_examples=120, deadline=None)
@given(
    st.integers(1, 8), st.integers(1, 6), st.sampled_from(PANELS),  # producer rows, n_slice / panel, panel
    st.integers(1, 20), st.integers(1, 6), st.sampled_from(PANELS),  # consumer columns, k_slice / panel, panel
    st.sampled_from((8, 16, 32)),
)
def test_any_pair_of_plans_meets_exactly(rows, n_panels, out_panel, cols, k_panels, in_panel, batch_pad):
    """Producer and consumer blocks need not agree (different slices, panels, widths, more than
    six rows or columns): every consumer column sees exactly its features, zero beyond, and no
    shard has more ports than a memory tile's six channels."""
    n_slice, k_slice = n_panels * out_panel, k_panels * in_panel
    produced = rows * n_slice
    cols = min(cols, -(-produced // k_slice))  # the planner never gives a column only padding
    prev = _node("a", 1, rows, 8, n_slice, 8, out_panel, batch_pad)
    node = _node("b", cols, 1, k_slice, 8, in_panel, 8, batch_pad)
    link = memtile_link(prev, node)
    check_link(link, prev, node)
    assert all(len(sh.writes) <= 6 and len(sh.reads) <= 6 for sh in link.shards)
    assert len([sh for sh in link.shards if any(ep.kind == "column" for ep, _ in sh.reads)]) == -(-cols // 6)
    received = _run_link(link, rows, n_slice, out_panel, batch_pad)
    assert sorted(received) == list(range(cols))
    for c in range(cols):
        f = c * k_slice + np.arange(k_slice)
        want = np.stack([np.where(f < produced, f + 1000 * b, 0) for b in range(batch_pad)])
        want = want.reshape(batch_pad, k_panels, in_panel).transpose(1, 0, 2).ravel()
        assert np.array_equal(received[c], want)


def _shard(link, j, **kw):
    shards = list(link.shards)
    shards[j] = dataclasses.replace(shards[j], **kw)
    return dataclasses.replace(link, shards=tuple(shards))


def _tiling(ports, i, **kw):
    ep, t = ports[i]
    return (*ports[:i], (ep, dataclasses.replace(t, **kw)), *ports[i + 1:])


@pytest.mark.parametrize(
    "corrupt, message",
    [
        (lambda lk: _shard(lk, 0, writes=_tiling(lk.shards[0].writes, 0, offset=(1, 0))), "same element|wrong features"),
        (lambda lk: _shard(lk, 0, writes=lk.shards[0].writes[:1] * 3), "same element"),
        (lambda lk: _shard(lk, 0, writes=lk.shards[0].writes[:2]), "nobody wrote|written nowhere"),
        (lambda lk: _shard(lk, 0, writes=_tiling(lk.shards[0].writes, 1, wrap=2)), "moves"),
        (lambda lk: _shard(lk, 0, reads=_tiling(lk.shards[0].reads, 0, stride=16)), "column 0"),
        (lambda lk: _shard(lk, 0, reads=_tiling(lk.shards[0].reads, 2, boundary=None)), "nobody wrote"),
        (lambda lk: _shard(lk, 0, reads=_tiling(lk.shards[0].reads, 0, tile=(8, 8))), "column 0"),
        (lambda lk: _shard(lk, 0, reads=lk.shards[0].reads[:2]), "column 2 is fed by no shard"),
    ],
)
def test_checker_catches_a_wrong_tiling(corrupt, message):
    # 3 rows of 12 outputs (36 features) -> 3 columns of 16 inputs: the last column reads padding
    prev = _node("a", 1, 3, 8, 12, 8, 4, 16)
    node = _node("b", 3, 1, 16, 8, 8, 8, 16)
    link = memtile_link(prev, node)
    assert len(link.shards) == 1
    check_link(link, prev, node)
    with pytest.raises(PlanError, match=message):
        check_link(corrupt(link), prev, node)


def test_shards_and_relays_respect_the_memory_tile_channels():
    dev = get_device("vek280")
    assert (dev.memtile_channels, dev.memtile_bds) == (6, 48)
    # 8 rows of 64 -> 13 columns of 40: three shards of 4, 5 and 4 columns, each fed by the rows it reads
    prev = _node("a", 1, 8, 8, 64, 8, 16, 32)
    node = _node("b", 13, 1, 40, 8, 8, 8, 32)
    link = memtile_link(prev, node)
    check_link(link, prev, node)
    assert [len(sh.reads) for sh in link.shards] == [4, 5, 4] and link.relays == 0
    assert link.memtiles(dev) == 3
    assert link.buffer_descriptors == PING_PONG * sum(len(sh.writes) + len(sh.reads) for sh in link.shards)
    j = link.to_json(dev)
    assert j["memory_tiles"] == 3 and [s["read_ports"] for s in j["shards"]] == [4, 5, 4]
    # 8 rows -> one column: the rows are gathered in two relays of 4, which feed the column's shard
    one = _node("c", 1, 1, 512, 8, 8, 8, 32)
    link = memtile_link(prev, one)
    check_link(link, prev, one)
    assert link.relays == 2 and len(link.shards) == 3
    assert [len(sh.writes) for sh in link.shards] == [4, 4, 2]
    assert max(len(sh.writes) for sh in link.shards) <= 6
    # a shard's bytes against one memory tile: the check pass's (tests/test_mapped_transport.py)


@pytest.mark.parametrize("device", ["vek280", "vek385"])
def test_every_link_of_searched_designs_checks(device):
    """Designs the search produces (many parallelism pairs per link) all pass the checker; the
    emitter runs it too, so compiling is enough to fail on a bad link."""
    model = qdq_mlp([96, 200, 72, 130, 40], seed=3)
    ex = aieflow.explore(model, device=device, config={"target": "latency"})
    checked = 0
    for point in ex.front[:: max(1, len(ex.front) // 6)]:
        layers = {name: {"parallelism": {"cas_len": cl, "cas_num": cn}} for name, cl, cn in point.parallelism}
        try:
            d = aieflow.compile(model, device=device, config={"layers": layers})
        except PlanError:
            continue  # not placeable: the search would not pick it either
        for prev, node in itertools.pairwise(d.layers()):
            check_link(memtile_link(prev, node), prev, node)
            checked += 1
    assert checked >= 8


def test_shards_and_relays_run_bit_exact_on_x86(tmp_path):
    """8 producer rows into one column (two relays) and 8 consumer columns (two shards): the
    emitted shared buffers, relays included, compute what the emulator computes."""
    model = qdq_mlp([32, 64, 64, 16], seed=4)
    names = [n.name for n in aieflow.compile(model, device="vek280").layers()]
    shape = [(1, 8), (1, 1), (8, 1)]
    layers = {nm: {"parallelism": {"cas_len": cl, "cas_num": cn}} for nm, (cl, cn) in zip(names, shape, strict=True)}
    d = aieflow.compile(model, device="vek280", config={"layers": layers})
    ls = d.layers()
    links = [memtile_link(a, b) for a, b in itertools.pairwise(ls)]
    assert links[0].relays == 2 and len(links[1].shards) == 2
    graph = d.files["src/graph.h"]
    assert graph.count("adf::num_buffers(") == 5  # one per shard
    assert all(len(sh.writes) <= 6 and len(sh.reads) <= 6 for lk in links for sh in lk.shards)
    stages = [s.name for s in d.estimate().stages]
    assert f"memtile_relay:{names[0]}->{names[1]}" in stages and f"memtile_relay:{names[1]}->{names[2]}" not in stages
    result = d.verify(samples=64, cache_dir=tmp_path)
    assert result.ok and result.values == 64 * 16


def test_mixed_precision_across_memory_tile_links_runs_bit_exact(tmp_path):
    """int16 -> a16w8 -> int8 layers: each link moves the producer's own output type, and the
    consumer reads it at that width (its input type follows the producer's output)."""
    import numpy as np

    from aieflow.model_zoo import torch_mlp

    model = torch_mlp([32, 64, 48, 10], seed=0)
    x = np.random.default_rng(0).normal(size=(256, 32)).astype(np.float32)
    d = aieflow.compile(model, device="vek280", example_input=x,
                        config={"precision": "int8", "layers": {"0": {"precision": "int16"}, "2": {"precision": "a16w8"}}})
    ls = d.layers()
    assert [n.types.weight.width for n in ls] == [16, 8, 8]
    for a, b in itertools.pairwise(ls):
        assert b.types.input == a.types.output
        assert memtile_link(a, b).element_bytes == a.types.output.container_bits // 8
    result = d.verify(samples=200, cache_dir=tmp_path)
    assert result.ok and result.values == 200 * 10
