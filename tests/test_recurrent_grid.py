"""The grid recurrent mapping's model (issue 22; recurrent/grid.py): R chains of hidden units, each
chain's U h columns over a cascade of C tiles, W x ahead, h exchanged by packet streams: the
generated kernels' (tests/test_recurrent_grid_generated.py: kernels, x86, search).  The model finds
no grid under hls4ml's 1.7 us for top tagging (docs/recurrent.md "Grid mapping"), so these tests
check it against hand counts of the constants it is documented with, its relation to the split
mapping at C = 1, its refusals and the gap the docs report.
"""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from test_recurrent_split import _design  # noqa: E402  (the compiled top-tagging designs, one copy)

from aieflow.devices import get_device  # noqa: E402
from aieflow.recurrent.compact import split_gate_cycles  # noqa: E402
from aieflow.recurrent.grid import (  # noqa: E402
    block_merges,
    grid_exchange_cycles,
    grid_points,
    grid_step,
    slices,
)
from aieflow.recurrent.model import split_step  # noqa: E402
from aieflow.recurrent.plan import RecurrentDims  # noqa: E402


def _gates(d, device):
    dev = get_device(device)
    return lambda u: split_gate_cycles(d.layer, dev, u)


def _grid(d, device, chains, chain_len):
    return grid_step(d.mapping.dims, device, chains, chain_len, _gates(d, device)(math.ceil(20 / chains)))


def test_slices_cover_every_unit_once():
    for n in (1, 7, 20, 120):
        for parts in range(1, n + 1):
            s = slices(n, parts)
            assert [u for r in s for u in r] == list(range(n))
            assert max(map(len, s)) == math.ceil(n / parts) and all(s)


def test_step_follows_the_hand_count():
    """GRU, VEK280, hls4ml's types, R = 10 chains (2 units: 6 rows, one 16-lane group), C = 5
    tiles per chain (4 columns each): U h 4 x 3 + 6 = 18 (per column a broadcast, the multiply and
    the int32 add on the vector slot; loop fill 6); the chain 4 hops, each the partial sums as two
    512-bit cascade words (16 acc64 lanes, rnn_grid.h), one vector add and 2 cycles, + the 3-op
    finish: 23; the exchange: the producer's packet (header + 2 words: 3), the stream start (3), 9 + 4
    hops to the farthest tile (chain 9's first), which reads its block's 2 chains' packets of 3 words
    (each block of 4 columns holds 2 whole chains: a merge per block): 25; the gate math of 2 units
    (the generator's schedule) + gx read from the cascade (2 words)."""
    d = _design("GRU", "vek280")
    g = _grid(d, "vek280", 10, 5)
    assert (g.chains, g.chain_len, g.units, g.columns, g.tiles) == (10, 5, 2, 4, 60)
    assert g.parts["mac"] == 18
    assert g.parts["reduction"] == 4 * (2 + 1 + 2) + 3
    assert g.parts["routing"] == 3 + 3 + 13 + 2 * 3
    assert g.parts["aggregation"] == split_gate_cycles(d.layer, get_device("vek280"), 2) + 2
    assert g.parts["return"] == g.parts["broadcast"] == 0
    assert g.cycles == sum(g.parts.values())
    assert g.step_ns == pytest.approx(g.cycles * 0.8)  # 1.25 GHz
    assert g.sequence_ns == pytest.approx(g.fill_ns + 20 * g.step_ns + g.head_ns)


def test_one_chain_is_the_split_mapping_with_a_stream_exchange():
    """C = 1 (the generated grid, rnn_grid.h): the split mapping (T = R tiles, W x ahead, stream
    exchange) with the same products, finish and gate math; where the generated kernels differ
    from the split's model: gx arrives over the partner's cascade (per 16-lane group two 384-bit
    words of acc48 lanes on VCK190, one per cycle) instead of the lock hand-off (3 + 1) and h's
    copy (one per unit: the packet read stores each word in lane type), and the exchange reads
    every chain's packet, the tile's own included (header + u words more), through one merge,
    with the grid's hop count (the distance to the farthest producer, R - 1, where the split
    counts one hop)."""
    d = _design("LSTM", "vck190")
    for tiles in (2, 4, 5):
        u = math.ceil(20 / tiles)
        g = _grid(d, "vck190", tiles, 1)
        s = split_step(d.mapping.dims, "vck190", tiles, "stream", True, _gates(d, "vck190")(u))
        for part in ("mac", "reduction", "broadcast"):
            assert g.parts[part] == s.parts[part], part
        assert g.parts["aggregation"] == s.parts["aggregation"] - (u + 4) + math.ceil(4 * u / 16) * 2
        assert g.parts["routing"] == s.parts["routing"] + (tiles - 2) + (u + 1)


def test_exchange_hand_counts():
    dev = get_device("vek280")
    assert grid_exchange_cycles(20, 1, 1, dev) == 0
    # one chain, C = 4: the gate tile at the end sends its 20 units to the 3 tiles before it (and itself)
    assert grid_exchange_cycles(20, 1, 4, dev) == 21 + 3 + 3 + 21
    # 4 chains, 4 tiles each: each block of 5 columns is one chain's units, so it has a merge of that chain's
    # packet only: a tile reads one packet of 6 words; farthest consumer 3 + 3 hops
    assert grid_exchange_cycles(20, 4, 4, dev) == 6 + 3 + 6 + 6
    # 5 chains of 4 units, 3 blocks of 7 columns (boundaries inside chains): the one merge, all 5 packets read
    assert grid_exchange_cycles(20, 5, 3, dev) == 5 + 3 + 6 + 5 * 5


def test_block_merges_where_every_block_holds_whole_chains():
    assert block_merges(20, 10, 5) == tuple(range(2 * b, 2 * b + 2) for b in range(5))
    assert block_merges(10, 4, 4) == (range(0, 1), range(1, 2), range(2, 3), range(3, 4))  # 3 + 3 + 3 + 1 units
    assert block_merges(20, 4, 2) == (range(0, 2), range(2, 4))
    assert block_merges(20, 5, 3) is None  # blocks of 7 cut chains of 4
    assert block_merges(20, 5, 1) is None  # one block: the one merge
    assert block_merges(6, 2, 3) is None  # blocks of 2 cut chains of 3


def test_refusals():
    d = _design("GRU", "vek280")
    dims = d.mapping.dims
    with pytest.raises(ValueError, match="grid 21 x 1"):
        grid_step(dims, "vek280", 21, 1, 50)
    with pytest.raises(ValueError, match="gate_cycles"):
        grid_step(dims, "vek280", 2, 2)
    g = grid_step(RecurrentDims("gru", 6, 20, 20, ("i16", "i16")), "vek280", 4, 2)
    assert g.parts["aggregation"] == 5 * 127 + 2  # the scalar count of 5 units, gx's two cascade words


@pytest.mark.parametrize("cell", ["GRU", "LSTM"])
@pytest.mark.parametrize("device", ["vek280", "vck190"])
def test_no_grid_reaches_hls4ml_and_the_gate_math_bounds_it(cell, device):
    """docs/recurrent.md "Grid mapping": every grid stays above 1.7 us; the fastest beats the
    best split (2.65-3.23 us before issue 22's gate folds) and the row-wise hybrid (3.48-3.56 us);
    its largest part is the gate math (after the widened tables and the folded wraps too), and one
    unit's gate math + gx read with the fastest grid's U h, chain and exchange exceed the
    per-step budget that 1.7 us leaves after the fill and the head."""
    d = _design(cell, device)
    points = grid_points(d.mapping.dims, device, _gates(d, device))
    best = points[0]
    assert all(p.sequence_ns > 1700 for p in points)
    split_best = {("GRU", "vek280"): 2650, ("GRU", "vck190"): 2910, ("LSTM", "vek280"): 3020, ("LSTM", "vck190"): 3230}
    assert best.sequence_ns < split_best[cell, device] - 100
    assert max(best.parts, key=best.parts.get) == "aggregation"
    clock = get_device(device).clock_hz
    budget = (1700 - best.fill_ns - best.head_ns) / 20 * clock / 1e9
    one = _gates(d, device)(1) + best.parts["aggregation"] - _gates(d, device)(best.units)  # + gx's cascade words
    assert one > budget / 3
    assert one + best.parts["mac"] + best.parts["reduction"] + best.parts["routing"] > budget
