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
from aieflow.passes.transport import PING_PONG, Tiling, check_link, memtile_link, memtiles_for


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


@settings(max_examples=80, deadline=None)
@given(
    st.integers(1, 8), st.integers(1, 6), st.sampled_from(PANELS),  # producer rows, n_slice / panel, panel
    st.integers(1, 10), st.integers(1, 6), st.sampled_from(PANELS),  # consumer columns, k_slice / panel, panel
    st.sampled_from((8, 16, 32)),
)
def test_any_pair_of_plans_meets_exactly(rows, n_panels, out_panel, cols, k_panels, in_panel, batch_pad):
    """Producer and consumer blocks need not agree (different slices, panels, widths): every
    element still lands once and is read from the right place, the rest reads as zero."""
    prev = _node("a", 1, rows, 8, n_panels * out_panel, 8, out_panel, batch_pad)
    node = _node("b", cols, 1, k_panels * in_panel, 8, in_panel, 8, batch_pad)
    link = memtile_link(prev, node)
    check_link(link, prev, node)
    assert link.dims[0] >= rows * n_panels * out_panel and link.dims[0] >= cols * k_panels * in_panel
    assert (len(link.writes), len(link.reads)) == (rows, cols)
    # run the transport on data: the consumer columns see the producer's features, zero beyond
    dims = link.dims
    produced = rows * n_panels * out_panel
    feats = np.arange(produced)
    buf = np.full(dims[0] * dims[1], -7, dtype=np.int64)  # poisoned
    for r, w in enumerate(link.writes):
        f = r * n_panels * out_panel + np.arange(n_panels * out_panel)
        port = np.stack([f + 1000 * b for b in range(batch_pad)])  # value = feature + 1000 * sample
        stream = port.reshape(batch_pad, n_panels, out_panel).transpose(1, 0, 2).ravel()
        buf[w.addresses(dims)] = stream
    for c, rd in enumerate(link.reads):
        addr = rd.addresses(dims)
        got = np.where(addr >= 0, buf[np.maximum(addr, 0)], 0)
        f = c * k_panels * in_panel + np.arange(k_panels * in_panel)
        want = np.stack([np.where(f < produced, f + 1000 * b, 0) for b in range(batch_pad)])
        want = want.reshape(batch_pad, k_panels, in_panel).transpose(1, 0, 2).ravel()
        assert np.array_equal(got, want)
    assert feats.size == produced


@pytest.mark.parametrize(
    "corrupt, message",
    [
        (lambda lk: dataclasses.replace(lk, writes=(dataclasses.replace(lk.writes[0], offset=(1, 0)), *lk.writes[1:])), "row 0"),
        (lambda lk: dataclasses.replace(lk, writes=lk.writes[:1] * len(lk.writes)), "row 1"),
        (lambda lk: dataclasses.replace(lk, writes=(dataclasses.replace(lk.writes[0], wrap=lk.writes[0].wrap - 1), *lk.writes[1:])), "writes"),
        (lambda lk: dataclasses.replace(lk, reads=(dataclasses.replace(lk.reads[0], stride=lk.reads[0].stride * 2), *lk.reads[1:])), "column 0"),
        (lambda lk: dataclasses.replace(lk, reads=(*lk.reads[:-1], dataclasses.replace(lk.reads[-1], boundary=None))), "column 2"),
        (lambda lk: dataclasses.replace(lk, reads=(dataclasses.replace(lk.reads[0], tile=(8, 8)), *lk.reads[1:])), "column 0"),
    ],
)
def test_checker_catches_a_wrong_tiling(corrupt, message):
    # 3 rows of 12 outputs (36 features) -> 3 columns of 16 inputs: the last column reads padding
    prev = _node("a", 1, 3, 8, 12, 8, 4, 16)
    node = _node("b", 3, 1, 16, 8, 8, 8, 16)
    link = memtile_link(prev, node)
    check_link(link, prev, node)
    with pytest.raises(PlanError, match=message):
        check_link(corrupt(link), prev, node)


def test_dma_accounting_follows_the_device_catalog():
    dev = get_device("vek280")
    assert (dev.memtile_channels, dev.memtile_bds) == (6, 48)
    prev = _node("a", 1, 8, 8, 64, 8, 16, 32)
    node = _node("b", 13, 1, 40, 8, 8, 8, 32)
    link = memtile_link(prev, node)
    # 13 read ports need 3 memory tiles' channels; 2 x (8 + 13) buffer descriptors
    assert link.memtiles(dev) == 3 == memtiles_for(link.buffer_bytes, 13, dev)
    assert link.buffer_descriptors == PING_PONG * 21 <= link.memtiles(dev) * dev.memtile_bds
    assert link.buffer_bytes == PING_PONG * link.dims[0] * link.dims[1]
    j = link.to_json(dev)
    assert (j["write_ports"], j["read_ports"], j["memory_tiles"]) == (8, 13, 3)
    big = _node("c", 1, 1, 8, 4096, 8, 16, 64, bits=16)  # 2 x 4096 x 64 x 2 bytes = 1 MiB
    assert memtile_link(big, _node("d", 1, 1, 4096, 8, 8, 8, 64)).memtiles(dev) == 2
    assert memtiles_for(1, 1, get_device("vck190")) == 0


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
