"""The grid mapping as generated (issue 22; recurrent/grid.py, templates/recurrent/rnn_grid.h): R
chains of hidden units, each a cascade of a W x partner (GridInput), C - 1 partial-sum tiles
(GridPart: U h over a column block of h) and a gate tile (GridCell: its block, the carried sums, the
gate math), h exchanged through one pktmerge broadcast to every chain tile and the head tile
(GridHead), or, where every column block holds whole chains, a pktmerge per block (read by that
block's tiles only) and the head's merge of every chain.  x86 bit-exact with predict (hls4ml's types, weights scaled so tables clamp and sums
wrap; uneven chains and column blocks: the last one shorter), predict equal to the exact-rational
transcription of hls4ml, the lowering (kernels, merge, cascades), the model against hand counts,
the config keys and their refusals, and the search choosing the grid for top tagging.
"""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from test_recurrent_compact import HLS4ML, _compile, _exact_reference, _rnn_node, needs_gxx  # noqa: E402
from test_recurrent_split import _design  # noqa: E402  (the compiled top-tagging designs, one copy)

from aieflow.devices import get_device  # noqa: E402
from aieflow.errors import ConfigError, PlanError  # noqa: E402
from aieflow.recurrent.directives import mapping_directives  # noqa: E402
from aieflow.recurrent.grid import grid_step  # noqa: E402
from aieflow.recurrent.lower import lower  # noqa: E402
from aieflow.recurrent.model import estimate_recurrent  # noqa: E402
from aieflow.recurrent.plan import RecurrentOptions, build_grid, plan_recurrent  # noqa: E402
from aieflow.recurrent.select import choose_mapping, mapping_point  # noqa: E402

X86_CASES = [
    # id, cell, device, n_h, chains, head, steps, columns: 10 units in 3 chains = 4 + 4 + 2 (the last shorter)
    ("gru-vek280-head", "GRU", "vek280", 10, 3, True, 5, 1),
    ("lstm-vek280-sequence", "LSTM", "vek280", 8, 3, False, 4, 1),
    ("gru-vck190-head", "GRU", "vck190", 10, 4, True, 5, 1),
    # C > 1: U h's columns over a cascade of tiles per chain; 10 columns in 3 blocks = 4 + 4 + 2 (the last shorter).
    # Blocks that hold whole chains get a merge each (+ the head's): 3 x 3 and 4 x 4 (one chain per block, the
    # last block 1 unit), 4 x 2 (two chains of 2 units per block of 4); 6 units in 2 chains of 3 over blocks of 2
    # (a block boundary inside a chain) keep the one merge broadcast to every tile
    ("gru-vek280-head-3-columns", "GRU", "vek280", 10, 3, True, 5, 3),
    ("lstm-vek280-sequence-2-chains-per-block", "LSTM", "vek280", 8, 4, False, 4, 2),
    ("gru-vck190-head-4-columns", "GRU", "vck190", 10, 4, True, 5, 4),
    ("lstm-vck190-head-one-merge-3-columns", "LSTM", "vck190", 6, 2, True, 3, 3),
    # AIE-MLv2 (issue 24: every recurrent kernel variant verified on VEK385; the grid had no VEK385 case)
    ("gru-vek385-head-3-columns", "GRU", "vek385", 10, 3, True, 5, 3),
]


def _grid(cell, device, n_h, chains, head, steps, keys=None, columns=None):
    """A grid design: ``chains`` (and ``columns``) as compile's options, or the config's ``mapping`` ``keys``."""
    config = {"layers": {"rnn": {**HLS4ML, "mapping": keys}}} if keys else None
    return _compile(cell, device, types=None if keys else HLS4ML, n_in=4, n_h=n_h, steps=steps, head=head, scale=3.0,
                    options=None if keys else RecurrentOptions(distribution="grid", chains=chains, columns=columns),
                    config=config)[0]


@needs_gxx
@pytest.mark.parametrize("case", X86_CASES, ids=[c[0] for c in X86_CASES])
def test_grid_design_is_bit_exact_on_x86(case, tmp_path):
    _, cell, device, n_h, chains, head, steps, columns = case
    d = _grid(cell, device, n_h, chains, head, steps, columns=columns)
    m = d.mapping
    units = math.ceil(n_h / chains)
    assert m.grid and (m.chains, m.chain_len, m.u_tiles, m.w_tiles, m.aggregator_tiles, m.recurrent.rows) == (
        chains, columns, chains * columns, chains, 1, units)
    graph = d.files["src/graph.h"]
    assert graph.count("GridCell<rnn_l0::GCfg>") >= 1 and "pktmerge<" in graph
    kc = math.ceil(n_h / columns)
    whole = columns > 1 and kc % units == 0  # every block boundary a chain boundary: a merge per block + the head's
    assert len(re.findall(r"pktmerge<\d+>::create", graph)) == (columns + 1 if whole else 1)
    assert (graph.count("GridPart<rnn_l0::GCfg>") >= 1) == (columns > 1)
    config = d.files["src/rnn_config.h"]
    assert f"static constexpr int UNITS = {units};" in config
    assert f"static constexpr int COLS = {columns};" in config and f"static constexpr int KC = {kc};" in config
    assert f"static constexpr int BLOCK_MERGES = {int(whole)};" in config
    assert "struct GGates" in d.files["src/rnn_vgates.h"]
    result = d.verify(samples=3, cache_dir=tmp_path)  # aieflow's verification inputs: edge values, then random
    assert result.ok, result.verdict()
    assert result.values == 3 * (1 if head else steps * n_h)


@pytest.mark.parametrize("columns", [1, 3])
def test_grid_predict_is_the_reference_bit_for_bit(columns):
    """A grid layer's predict is the layer's emulation: equal to the exact-rational transcription of
    hls4ml's recurrence (tests/fixed_reference.py, which imports nothing of the code it checks)."""
    d = _grid("LSTM", "vek280", 8, 3, False, 4, columns=columns)
    assert d.mapping.chain_len == columns
    node = _rnn_node(d)
    in_t = d.graph.tensors[d.graph.inputs[0]].dtype
    rng = np.random.default_rng(3)
    xq = np.concatenate([rng.choice(np.array([in_t.min_code, in_t.max_code, 0, -1, 1]), (3, 4, 4)),
                         rng.integers(in_t.min_code, in_t.max_code + 1, (5, 4, 4))])
    got = d.run(xq).reshape(xq.shape[0], 4, 8)
    assert np.array_equal(got, _exact_reference(node, xq))


def test_lowering_has_the_chains_the_merge_and_the_cascades():
    d = _design("GRU", "vek280")
    dev = get_device("vek280")
    m = build_grid(d.mapping.dims, dev, 5)
    g = lower([d.layer], [m], dev)
    kinds = sorted(k.cls.split("<")[0] for k in g.kernels)
    assert kinds == ["GridCell"] * 5 + ["GridHead"] + ["GridInput"] * 5
    (sw,) = g.switches
    assert sw.kind == "merge" and len(sw.ids) == 5 and len(set(sw.ids)) == 5
    cascades = [(lk.src.owner, lk.dst.owner) for lk in g.links if lk.kind == "cascade"]
    assert cascades == [(f"gw0[{r}]", f"gc0[{r}]") for r in range(5)]
    merged_to = sorted(lk.dst.owner for lk in g.links if lk.src.owner == sw.var)
    assert merged_to == sorted([f"gc0[{r}]" for r in range(5)] + ["gh0"])  # every gate tile and the head


def test_lowering_of_chains_of_several_tiles():
    """C = 3: per chain the partner, two partial-sum tiles and the gate tile on one cascade, west to
    east on one array row; the merge's output to all 15 chain tiles and the head."""
    d = _design("GRU", "vek280")
    dev = get_device("vek280")
    m = build_grid(d.mapping.dims, dev, 5, columns=3)
    assert (m.chains, m.chain_len, m.u_tiles, m.tiles) == (5, 3, 15, 21)
    g = lower([d.layer], [m], dev)
    kinds = sorted(k.cls.split("<")[0] for k in g.kernels)
    assert kinds == ["GridCell"] * 5 + ["GridHead"] + ["GridInput"] * 5 + ["GridPart"] * 10
    cascades = [(lk.src.owner, lk.dst.owner) for lk in g.links if lk.kind == "cascade"]
    expect = []
    for r in range(5):
        chain = [f"gw0[{r}]", f"gp0[{2 * r}]", f"gp0[{2 * r + 1}]", f"gc0[{r}]"]
        expect += list(zip(chain[:-1], chain[1:], strict=True))
    assert cascades == expect
    tile = {k.var: k.tile for k in g.kernels}
    for a, b in expect:  # neighbours on one row, west to east (or the placer's mirror of it)
        assert tile[a][1] == tile[b][1] and abs(tile[a][0] - tile[b][0]) == 1
    (sw,) = g.switches
    merged_to = sorted(lk.dst.owner for lk in g.links if lk.src.owner == sw.var)
    assert merged_to == sorted([f"gc0[{r}]" for r in range(5)] + [f"gp0[{i}]" for i in range(10)] + ["gh0"])
    parts = [k for k in g.kernels if k.cls.startswith("GridPart")]
    assert [k.args[-1] for k in parts] == ["0", "1"] * 5  # each partial-sum tile's column block


def test_model_hand_count_and_estimate():
    """GRU top tagging on VEK280, R = 5 (4 units: 12 rows, one 16-lane group): U h 20 x 3 + 6 = 66
    and finish 3 (the compact tile's column form); the exchange: the tile's packet (header + 4
    words) written, the stream start (3), 4 hops to the farthest chain, then 5 packets of 5 words
    read: 37; aggregation: the gate math of 4 units (the generator's schedule) + gx read from the
    cascade (16 acc64 lanes in 512-bit words: 2).  The design's estimate is this step."""
    d = _design("GRU", "vek280")
    dev = get_device("vek280")
    m = build_grid(d.mapping.dims, dev, 5)
    g = grid_step(m.dims, dev, 5, 1, m.gate_cycles)
    assert m.gate_cycles == dict(m.dims.grid_gates)[4] > 0
    assert dict(g.parts) == {"return": 0, "broadcast": 0, "mac": 66, "reduction": 3, "routing": 5 + 3 + 4 + 25,
                             "aggregation": m.gate_cycles + 2}
    e = estimate_recurrent(m, dev)
    assert e.step_latency_ns == pytest.approx(g.step_ns)
    assert e.sequence_latency_ns == pytest.approx(g.sequence_ns)
    assert mapping_point(m, dev).latency_ns == pytest.approx(g.sequence_ns)


def test_model_hand_count_with_columns_and_estimate():
    """GRU top tagging on VEK280, R = 5 chains (4 units: 12 rows, one 16-lane group) of C = 3 tiles (7
    columns of h each, the last 6): U h 7 x 3 + 6 = 27; the cascade 2 hops, each the partial sums as two
    512-bit words (16 acc64 lanes), one vector add and 2 cycles, + the 3-op finish: 13; the exchange:
    the tile's packet (header + 4 words), the stream start (3), 4 + 2 hops to the farthest tile (chain 4's
    first), which reads the 5 chains' packets of 5 words: 39; aggregation: the gate math of 4 units + gx
    read from the cascade (2 words).  The design's estimate is this step."""
    d = _design("GRU", "vek280")
    dev = get_device("vek280")
    m = build_grid(d.mapping.dims, dev, 5, columns=3)
    g = grid_step(m.dims, dev, 5, 3, m.gate_cycles)
    assert dict(g.parts) == {"return": 0, "broadcast": 0, "mac": 7 * 3 + 6, "reduction": 2 * (2 + 1 + 2) + 3,
                             "routing": 5 + 3 + 6 + 5 * 5, "aggregation": m.gate_cycles + 2}
    e = estimate_recurrent(m, dev)
    assert e.step_latency_ns == pytest.approx(g.step_ns)
    assert e.sequence_latency_ns == pytest.approx(g.sequence_ns)
    assert mapping_point(m, dev).latency_ns == pytest.approx(g.sequence_ns)
    one = grid_step(m.dims, dev, 5, 1, m.gate_cycles)  # C = 1: U h over all 20 columns, no hops
    assert g.cycles < one.cycles


def test_model_hand_count_with_a_merge_per_block_and_estimate():
    """GRU top tagging on VEK280, R = 4 chains (5 units: 15 rows, one 16-lane group) of C = 4 tiles (5
    columns each: block j is chain j's units, so it has a merge of chain j's packet only): U h 5 x 3 + 6 =
    21; the cascade 3 hops of 5 + the 3-op finish: 18; the exchange: the packet (header + 5 words), the
    stream start (3), 3 + 3 hops, one packet of 6 words read: 21 (25 words more with the one merge of every
    chain).  The lowering has the 4 block merges, each read by its block's 4 tiles, and the head's merge of
    every chain; the design's estimate is this step."""
    d = _design("GRU", "vek280")
    dev = get_device("vek280")
    m = build_grid(d.mapping.dims, dev, 4, columns=4)
    g = grid_step(m.dims, dev, 4, 4, m.gate_cycles)
    assert dict(g.parts) == {"return": 0, "broadcast": 0, "mac": 5 * 3 + 6, "reduction": 3 * (2 + 1 + 2) + 3,
                             "routing": 6 + 3 + 6 + 6, "aggregation": m.gate_cycles + 2}
    assert m.u_merges == 5
    e = estimate_recurrent(m, dev)
    assert e.step_latency_ns == pytest.approx(g.step_ns)
    assert e.sequence_latency_ns == pytest.approx(g.sequence_ns)
    assert mapping_point(m, dev).latency_ns == pytest.approx(g.sequence_ns)
    lg = lower([d.layer], [m], dev)
    assert [s.var for s in lg.switches] == [f"m0_{i}" for i in range(5)]
    readers = {s.var: sorted(lk.dst.owner for lk in lg.links if lk.src.owner == s.var) for s in lg.switches}
    for j in range(3):
        assert readers[f"m0_{j}"] == sorted(f"gp0[{3 * r + j}]" for r in range(4))
    assert readers["m0_3"] == sorted(f"gc0[{r}]" for r in range(4)) and readers["m0_4"] == ["gh0"]
    feeds = {s.var: sorted(lk.src.owner for lk in lg.links if lk.dst.owner == s.var) for s in lg.switches}
    assert [feeds[f"m0_{j}"] for j in range(4)] == [[f"gc0[{j}]"] for j in range(4)]
    assert feeds["m0_4"] == sorted(f"gc0[{r}]" for r in range(4))


@pytest.mark.parametrize("cell", ["GRU", "LSTM"])
@pytest.mark.parametrize("device", ["vek280", "vck190"])
def test_search_picks_the_grid_for_top_tagging(cell, device):
    """target: latency costs every (chains, columns) beside the compact tile and the spread mappings;
    a grid with U h's columns over several tiles per chain (4-5, with a merge per column block) is the
    fastest for top tagging (below the one-tile chains' 2.61-3.22 us and the row-wise hybrid's 3.48-3.56
    us), and its directives compile to it."""
    d = _design(cell, device)
    ex = choose_mapping(d.mapping.dims, device, "latency")
    c = ex.chosen.mapping
    assert c.grid and c.chain_len > 1 and ex.chosen.latency_ns < 2900
    one_tile = choose_mapping(d.mapping.dims, device, "latency", RecurrentOptions(distribution="grid", columns=1))
    assert ex.chosen.latency_ns < one_tile.chosen.latency_ns - 100
    assert any(p.mapping.grid for p in ex.front)
    keys = mapping_directives(c)
    assert keys == {"distribution": "grid", "chains": c.chains, "columns": c.chain_len, "plio_bits": c.plio_bits}
    again = plan_recurrent(d.mapping.dims, device, RecurrentOptions(distribution="grid", chains=keys["chains"],
                                                                    columns=keys["columns"]))
    assert again == c


def test_config_key_and_refusals():
    d = _grid("GRU", "vek280", 6, None, False, 3, keys={"chains": 2})
    assert d.mapping.grid and d.mapping.u_tiles == 2 and "GridHead" in d.files["src/graph.h"]
    d = _grid("GRU", "vek280", 6, None, False, 3, keys={"chains": 2, "columns": 2})
    assert (d.mapping.chains, d.mapping.chain_len) == (2, 2) and "GridPart" in d.files["src/graph.h"]
    bad = [({"distribution": "row", "chains": 2}, ConfigError, "layers.rnn.mapping.chains"),
           ({"distribution": "column", "columns": 2}, ConfigError, "layers.rnn.mapping.columns"),
           ({"distribution": "grid", "cas_len": 2}, ConfigError, "cas_len"),
           ({"distribution": "grid"}, PlanError, "give chains"),
           ({"distribution": "grid", "chains": 1}, PlanError, "chains 1 is not in 2..6"),
           ({"distribution": "grid", "chains": 2, "columns": 7}, PlanError, "columns 7 is not in 1..6"),
           ({"distribution": "grid", "chains": 2, "columns": 2, "kernel": "scalar"}, PlanError,
            "columns 2 with a scalar U h product")]
    for keys, err, text in bad:
        with pytest.raises(err, match=text):
            _grid("GRU", "vek280", 6, None, False, 3, keys=keys)
    for dist in ("row", "compact"):
        with pytest.raises(ConfigError, match=f"recurrent columns 2: a key of distribution grid, not {dist}"):
            RecurrentOptions(distribution=dist, columns=2)
    with pytest.raises(PlanError, match="float grid is not generated"):
        _compile("GRU", "vck190", "fp32", None, 4, 6, 3, False, options=RecurrentOptions(distribution="grid", chains=2))
    with pytest.raises(PlanError, match="grid layer in a stack"):
        _compile("GRU", "vek280", types=None, n_in=4, n_h=6, steps=3, head=False, second="GRU",
                 options=[RecurrentOptions(distribution="grid", chains=2), RecurrentOptions(distribution="compact")])


def test_placement_picture_draws_every_chain_and_the_head_where_the_placer_put_them():
    d = _grid("GRU", "vek280", 10, 3, True, 5)
    svg = d.placement_svg()
    assert all(f"chain {r} (W x, gates)" in svg for r in range(3)) and "chain 3 " not in svg
    assert " head" in svg and "grid (chains of units)" in svg
