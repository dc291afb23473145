"""The recurrent mappings lowered into the mapped graph (``recurrent.lower``, issue 17 migration
step 4), checked against the plans with counts derived here from the mappings (tiles, sources,
merges, PLIOs: not from the lowering): one kernel per planned tile, every packet source merged once
with a route ID used once per merge, each hybrid layer's PL FSM on exactly its layer's merged
streams and h PLIO (and on what system.cfg connects), tiles distinct and inside each layer's
block, and the project's graph.h is the rendering of that graph.  ``MappedGraph.check`` is shown
to catch broken graphs (packet switches and PL kernels included)."""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import replace

import pytest

torch = pytest.importorskip("torch")

import aieflow  # noqa: E402
from aieflow.devices import get_device  # noqa: E402
from aieflow.errors import PlanError  # noqa: E402
from aieflow.mapped.adf import declarations, statements  # noqa: E402
from aieflow.mapped.ir import Link, PacketSwitch  # noqa: E402
from aieflow.mapped.place import solve  # noqa: E402
from aieflow.mapped.transport import check as check_transport  # noqa: E402
from aieflow.recurrent.design import compile_recurrent, sequence_front, split_layers  # noqa: E402
from aieflow.recurrent.lower import _chains, lower, place_recurrent, recurrent_problem  # noqa: E402
from aieflow.recurrent.plan import RecurrentOptions as O  # noqa: E402


class _Stack(torch.nn.Module):
    def __init__(self, cells, n_in, n_h, head=0):
        super().__init__()
        sizes = [n_in, *n_h]
        self.rnns = torch.nn.ModuleList(getattr(torch.nn, c)(sizes[i], sizes[i + 1], batch_first=True)
                                        for i, c in enumerate(cells))
        self.fc = torch.nn.Linear(n_h[-1], head) if head else None

    def forward(self, x):
        for r in self.rnns:
            x, _ = r(x)
        return self.fc(x[:, -1]) if self.fc is not None else x[:, -1]


class _ConvGru(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.c1, self.c2 = torch.nn.Conv1d(5, 8, 3, padding=1), torch.nn.Conv1d(8, 6, 3, stride=2)
        self.gru, self.fc = torch.nn.GRU(6, 7, batch_first=True), torch.nn.Linear(7, 1)

    def forward(self, x):
        o, _ = self.gru(torch.relu(self.c2(torch.relu(self.c1(x)))).transpose(1, 2))
        return torch.sigmoid(self.fc(o[:, -1]))


COL = {"distribution": "column", "input_distribution": "column", "cas_len": 2, "input_cas_len": 3}


def _rec(cells, n_h, device, precision, opts, head=2, n_in=4):
    torch.manual_seed(0)
    x = torch.randn(8, 4, n_in) * 2.0
    return compile_recurrent(_Stack(cells, n_in, n_h, head).eval(), device, x[:2], {"precision": precision}, x, opts)


def _conv_gru(device):
    torch.manual_seed(0)
    x = torch.randn(8, 5, 10)
    return aieflow.compile(_ConvGru().eval(), device=device, example_input=x[:1], calibration=x,
                           config={"precision": "int16"})


CASES = {
    "gru-row-hybrid-vck190": lambda: _rec(["GRU"], [9], "vck190", "int16", O(aggregation="hybrid")),
    "gru-row-aie-vek280": lambda: _rec(["GRU"], [10], "vek280", "int8", O(aggregation="aie", row_reuse=2)),
    "lstm-column-aie-vck190": lambda: _rec(["LSTM"], [6], "vck190", "int16", O(aggregation="aie", **COL), n_in=40),
    "lstm-column-hybrid-vek280": lambda: _rec(["LSTM"], [5], "vek280", "int16", O(aggregation="hybrid", **COL), n_in=40),
    "gru-compact-vek280": lambda: _rec(["GRU"], [8], "vek280", "int16", O(distribution="compact")),
    "stack-hybrid-then-aie-column-vck190": lambda: _rec(
        ["GRU", "LSTM"], [6, 40], "vck190", "int16", [O(aggregation="hybrid"), O(aggregation="aie", **COL)]),
    "stack-compact-then-hybrid-vek280": lambda: _rec(
        ["GRU", "GRU"], [6, 5], "vek280", "int16", [O(distribution="compact"), O(aggregation="hybrid")], head=0),
    "conv-gru-vek280": lambda: _conv_gru("vek280"),
    "stack-aie-then-aie-column-vek280": lambda: _rec(
        ["GRU", "LSTM"], [6, 5], "vek280", "int16", [O(aggregation="aie"), O(aggregation="aie", **COL)], n_in=40),
    # AIE-MLv2's 4 rows: three 2-tile U chains fill rows 0-2 of both U columns, so the aggregator and its
    # output kernel take the two free slots (1, 3) and (0, 3), not a column of their own (plan: agg_columns 0)
    "gru-column-aie-vek385": lambda: _rec(
        ["GRU"], [10], "vek385", "int8", O(aggregation="aie", distribution="column", input_distribution="column",
                                            cas_len=2, input_cas_len=1, row_reuse=10, input_row_reuse=10)),
}


@pytest.fixture(scope="module", params=sorted(CASES))
def case(request):
    d = CASES[request.param]()
    layers, _ = split_layers(d.graph)
    return d, lower(layers, d.mappings, d.device, sequence_front(d.graph))


def test_one_kernel_per_planned_tile(case):
    d, g = case
    g.check()
    assert len(g.kernels) == sum(m.tiles for m in d.mappings)
    kinds = Counter(re.match(r"[a-z]+", k.var).group() for k in g.kernels)
    assert kinds["u"] == sum(m.u_tiles for m in d.mappings if not m.compact)
    assert kinds["w"] == sum(m.w_tiles for m in d.mappings)
    # the aggregator, and its output kernel o<l> where a core has one output stream port (AIE-ML / v2)
    assert kinds["agg"] + kinds["o"] == sum(m.aggregator_tiles for m in d.mappings if not m.compact)
    one = d.device.generation.stream_out_ports < 2
    assert kinds["o"] == (kinds["agg"] if one else 0)
    assert kinds["c"] == sum(m.compact for m in d.mappings)
    assert kinds["front"] == d.mappings[0].front_tiles
    assert all(not k.pinned and k.ratio == 1.0 for k in g.kernels)  # free-running, placed by aiecompiler


def test_every_source_is_merged_once_with_route_ids_used_once_per_merge(case):
    d, g = case
    assert len(g.switches) == sum(m.merges for m in d.mappings)
    # packet sources per layer: one per row kernel, one per cascade chain (its last tile)
    assert sum(len(s.ids) for s in g.switches) == sum(
        m.recurrent.sources(m.dims) + m.input.sources(m.dims) for m in d.mappings if not m.compact)
    senders = Counter(ln.src.owner for ln in g.links if ln.kind == "packet" and ln.dst.owner.startswith("m"))
    assert set(senders.values()) <= {1}, "a kernel sends into two merges"
    # the senders are the row kernels and each chain's last tile; the other chain tiles cascade east
    cls = {k.var: k.cls.split("<")[0] for k in g.kernels}
    assert set(senders) == {v for v, c in cls.items() if c in ("RowKernel", "ColLast", "ColOnly")}
    cascades = [ln for ln in g.links if ln.kind == "cascade"]
    assert sorted(ln.src.owner for ln in cascades) == sorted(v for v, c in cls.items() if c in ("ColFirst", "ColMid"))
    assert all(cls[ln.dst.owner] in ("ColMid", "ColLast") and ln.dst.index == 1 for ln in cascades)
    for s in g.switches:
        assert s.kind == "merge" and len(set(s.ids)) == len(s.ids)
        into = sorted(ln.dst.index for ln in g.links if ln.dst.owner == s.var)
        assert into == list(range(len(s.ids)))  # each route (input) fed exactly once
        outs = [ln for ln in g.links if ln.src.owner == s.var]
        assert len(outs) == 1 and outs[0].kind == "packet"


def test_the_fsm_ports_are_the_plans_plios_and_what_system_cfg_connects(case):
    d, g = case
    plios = {p.var: p for p in g.plios}
    hybrid = [li for li, m in enumerate(d.mappings) if m.aggregation == "hybrid"]
    assert [pk.name for pk in g.pl_kernels] == [f"rnn_fsm_l{li}" for li in hybrid]
    cfg = d.files["system.cfg"]
    for pk, li in zip(g.pl_kernels, hybrid, strict=True):
        m = d.mappings[li]
        assert len(pk.ins) == m.merges == m.plio_out  # one merged stream per AIE->PL PLIO of the plan
        assert {plios[v].port_name for _, v in pk.ins} == {f"rnn_l{li}_m{i}" for i in range(m.plio_out)}
        assert {p for p in plios.values() if p.direction == "out" and p.port_name.startswith(f"rnn_l{li}_")} == \
            {plios[v] for _, v in pk.ins}
        assert plios[dict(pk.outs)["h_out"]].port_name == f"rnn_l{li}_h"
        nxt = dict(pk.outs)["y_out"]
        assert (plios[nxt].port_name == f"rnn_l{li + 1}_x") if li + 1 < len(d.mappings) else nxt == ""
        assert pk.calls == m.dims.seq_len and pk.ii >= 1 and pk.items >= 1 and pk.depth > 0
        for port, v in pk.ins:
            assert f"ai_engine_0.{plios[v].port_name}:rnn_fsm_l{li}_0.{port}" in cfg
        for port, v in pk.outs:
            if v:
                assert f"rnn_fsm_l{li}_0.{port}:ai_engine_0.{plios[v].port_name}" in cfg
    if len(d.mappings) == 1:  # the plan's PLIO counts (a stack's later layers share their x)
        m = d.mappings[0]
        assert sum(p.direction == "in" for p in g.plios) == m.plio_in
        assert sum(p.direction == "out" for p in g.plios) == m.plio_out


def test_tiles_are_distinct_and_inside_each_layers_block(case):
    d, g = case
    dev = d.device
    at = [k.tile for k in g.kernels]
    assert len(set(at)) == len(at)
    x0 = 1 if d.mappings[0].front_tiles else 0
    for li, m in enumerate(d.mappings):
        mine = {k.var: k.tile for k in g.kernels if re.match(rf"(u|w|agg|o|c){li}(\[|$)", k.var)}
        assert len(mine) == m.tiles - (m.front_tiles if li == 0 else 0)
        for var, (c, r) in mine.items():
            assert x0 <= c < x0 + m.columns - m.front_columns and 0 <= r < dev.rows, (var, c, r)
            if var.startswith("u"):
                assert c < x0 + m.u_columns and r < m.u_rows
            if var.startswith("w"):
                assert x0 + m.u_columns <= c < x0 + m.u_columns + m.w_columns and r < m.w_rows
        x0 += m.columns - m.front_columns


def test_the_placement_problem_is_read_off_the_mapped_graph_as_the_plan_counts_it(case):
    """The one placer's problem (``mapped.place.problem`` on the design lowered unplaced): groups,
    their shapes, kernels and edges computed here from the mappings: the front end's convolutions
    one column, each layer one rectangle its plan's columns wide; an edge from the front end into
    layer 0 and from each layer whose output is an AIE stream (aie / compact aggregation) into the
    next; a hybrid layer's output goes through its PL FSM, no edge.  Streams move no buffer
    words.  Solved (greedy-right), the groups lie side by side along row 0 and every kernel of the
    lowering sits at its group's position plus its tile in the group."""
    d, g = case
    layers, _ = split_layers(d.graph)
    front = sequence_front(d.graph)
    dev, ms = d.device, d.mappings
    prob = recurrent_problem(layers, ms, dev, front)
    nf = 1 if ms[0].front_tiles else 0
    assert [b.name for b in prob.blocks] == ["Conv1d front end"] * nf + [n.name for n in layers]
    assert [b.width for b in prob.blocks] == [1] * nf + [m.columns - m.front_columns for m in ms]
    assert all(b.fixed is None and b.period == 1 for b in prob.blocks)
    kernels = [len(ms[0].dims.front)] * nf + [1 if m.compact else m.u_tiles + m.w_tiles + m.aggregator_tiles for m in ms]
    assert [len(k) for k in prob.kernels] == kernels
    assert sum(kernels) == len(g.kernels)
    for b, cells in zip(prob.blocks, prob.kernels, strict=True):
        assert len(set(cells)) == len(cells) and all(0 <= c < b.width and 0 <= r < b.height for c, r in cells)
        assert max(r for _, r in cells) == b.height - 1 and b.height <= dev.rows  # as high as its kernels
    if nf:
        assert prob.blocks[0].height == ms[0].front_tiles and prob.kernels[0] == tuple((0, i) for i in range(ms[0].front_tiles))
    for b, m in zip(prob.blocks[nf:], ms, strict=True):
        assert b.height >= (1 if m.compact else max(m.u_rows, m.w_rows))
    want = [(0, 1)] * nf + [(nf + li - 1, nf + li) for li in range(1, len(ms)) if ms[li - 1].aggregation != "hybrid"]
    assert prob.pairs == want
    assert all(e.words == 0 for e in prob.edges)
    assert (prob.grid.columns, prob.grid.rows, prob.grid.snake) == (dev.columns, dev.rows, dev.generation.cascade_serpentine)
    placed = solve(prob, "greedy-right")
    assert place_recurrent(layers, ms, dev, front) == placed
    x0 = 0
    for r in placed.rects:
        assert (r.column, r.row) == (x0, 0)
        x0 += r.width
    assert x0 == sum(m.columns for m in ms)  # the plans' columns side by side (the front's column in layer 0's)
    tiles = sorted(k.tile for k in g.kernels)
    assert tiles == sorted((r.column + c, r.row + rr) for r, cells in zip(placed.rects, prob.kernels, strict=True)
                           for c, rr in cells)
    assert sorted(k.tile for k in lower(layers, ms, dev, front, placed).kernels) == tiles


def test_the_project_graph_is_the_rendered_mapped_graph(case):
    d, g = case
    text = d.files["src/graph.h"]
    for s in statements(g):
        assert f"        {s};\n" in text
    assert text.count("adf::pktmerge<") == 2 * len(g.switches)  # declared and created
    assert f"static constexpr int NM = {sum(m.merges for m in d.mappings)};" in text
    assert "adf::location<adf::kernel>" not in text  # not pinned: as before the lowering
    for k in g.kernels:
        assert f"{k.var} = adf::kernel::create_object<{k.cls}>(" in text


def test_check_catches_broken_graphs(case):
    _, g = case
    g.check()
    stream = next(ln for ln in g.links if ln.kind == "stream")
    broken = [replace(g, links=tuple(ln for ln in g.links if ln is not stream))]  # an input never fed
    broken.append(replace(g, links=(*g.links, Link("stream", stream.src, stream.dst))))  # fed twice
    broken.append(replace(g, kernels=(*g.kernels, replace(g.kernels[0], var="extra", in_sizes=()))))  # same tile
    if g.switches:
        s = g.switches[0]
        broken.append(replace(g, switches=(replace(s, ids=(s.ids[0],) * len(s.ids)),) + g.switches[1:])
                      if len(s.ids) > 1 else replace(g, switches=(PacketSwitch(s.var, "split", s.ids),) + g.switches[1:]))
        pkt = next(ln for ln in g.links if ln.kind == "packet")
        broken.append(replace(g, links=tuple(replace(ln, kind="stream") if ln is pkt else ln for ln in g.links)))
    if g.pl_kernels:
        pk = g.pl_kernels[0]
        plio_in = next(p.var for p in g.plios if p.direction == "in")
        broken.append(replace(g, pl_kernels=(replace(pk, ins=((pk.ins[0][0], plio_in), *pk.ins[1:])),)))  # reads an input
        broken.append(replace(g, pl_kernels=(replace(pk, ins=(*pk.ins, ("again", pk.ins[0][1]))),)))  # one PLIO twice
    for b in broken:
        with pytest.raises(AssertionError):
            b.check()


def _streams_out(g, var):
    return {ln.src.index for ln in g.links if ln.src.owner == var and ln.kind in ("stream", "packet")}


_CONNECT = re.compile(r"adf::connect<(adf::stream|)>\((\w+(?:\[\d+\])?)\.out\[(\d+)\], ")


def test_the_check_pass_accepts_every_case_and_no_core_writes_more_streams_than_it_has_ports(case):
    """Every lowered recurrent design passes the check pass (mapped/transport.py), which the
    recurrent compile now runs; counted here without it: no kernel writes more output streams than
    its core has ports (catalog ``stream_out_ports``), on the mapped graph and on graph.h's
    ``adf::connect`` statements (stream and packet connections; a broadcast is one port feeding
    several inputs).  On AIE-ML the AIE aggregator writes h on its one port, broadcast to the U
    kernels and its output kernel o<l>, which alone writes the layer's output (issue 17)."""
    d, g = case
    check_transport(g, d.device)
    ports = d.device.generation.stream_out_ports
    kernels = {k.var for k in g.kernels}
    assert all(len(_streams_out(g, v)) <= ports for v in kernels)
    written: dict[str, set[int]] = {}
    for m in _CONNECT.finditer(d.files["src/graph.h"]):
        if m.group(2) in kernels:
            written.setdefault(m.group(2), set()).add(int(m.group(3)))
    assert written, "no kernel stream connections found in graph.h"
    assert all(len(p) <= ports for p in written.values()), written
    for li, m in enumerate(d.mappings):
        if m.aggregation != "aie":
            continue
        h_readers = {ln.dst.owner for ln in g.links if ln.src.owner == f"agg{li}"}
        u = {k for k in kernels if k.startswith(f"u{li}[")}
        if ports < 2:  # one port: h to every U kernel and the output kernel, nothing else
            assert written[f"agg{li}"] == {0} and h_readers == u | {f"o{li}"}
            out = {ln.dst.owner for ln in g.links if ln.src.owner == f"o{li}"}
            assert out == ({"y_out"} if li + 1 == len(d.mappings) else
                           {k for k in kernels if k.startswith(f"w{li + 1}[")} or {f"c{li + 1}"})
            assert f"AggOutput<rnn_l{li}::AggCfg>" in d.files["src/kernels/rnn_kernels.cc"]
            assert "static constexpr bool H_LAST = true;" in d.files["src/rnn_config.h"]
        else:
            assert written[f"agg{li}"] == {0, 1} and f"o{li}" not in kernels


def test_a_two_output_aggregator_is_refused_by_name_on_vek280_not_on_vck190():
    """A hand-built graph: one aggregator whose two output streams each feed a kernel."""
    from aieflow.mapped.ir import Kernel, MappedGraph, Port

    def k(var, ins, outs):
        return Kernel(var, "gru", "K", (), "k.cc", (0, 0), (None,) * ins, (None,) * outs, pinned=False)

    g = MappedGraph((k("agg0", 1, 2), k("u0[0]", 1, 1)), (), (), (
        Link("stream", Port("agg0", "out", 0), Port("u0[0]", "in", 0)),
        Link("stream", Port("u0[0]", "out", 0), Port("agg0", "in", 0)),
        Link("stream", Port("agg0", "out", 1), Port("u0[0]", "in", 0))))
    with pytest.raises(PlanError, match=r"kernel agg0 of 'gru' .* 2 output streams; aie-ml tiles have 1"):
        check_transport(g, get_device("vek280"))
    check_transport(g, get_device("vck190"))  # AIE1 cores have two output stream ports


def test_array_members_are_declared_once_with_their_length():
    assert declarations(["x0", "u0[0]", "u0[1]", "agg0", "u0[2]", "w0[0]"]) == ["x0", "u0[3]", "agg0", "w0[1]"]
    with pytest.raises(AssertionError):
        declarations(["u0[0]", "u0[2]"])


def test_column_chains_longer_than_the_array_snake_onto_distinct_tiles():
    """A chain longer than the array is wide snakes onto the next row, each tile a neighbour of the
    one before (as the plan counts its
    block: ``chain_rows`` rows a chain, chains stacked ``rows`` high, then the next columns)."""
    dev = replace(get_device("vek280"), columns=2, rows=4)
    at = _chains(5, 3, dev, 10)  # 5 chains of 3 tiles on a 2-column array: 2 rows a chain
    assert len(at) == 15 and len(set(at)) == 15
    assert at[:3] == [(10, 0), (11, 0), (11, 1)]  # chain 0: east along row 0, then back west on row 1
    assert all(10 <= c < 10 + 2 * 3 and 0 <= r < 4 for c, r in at)  # ceil(5 * 2 / 4) = 3 groups of 2 columns
    for ch in range(5):  # each tile beside the one before it
        chain = at[3 * ch : 3 * ch + 3]
        assert all(abs(a[0] - b[0]) + abs(a[1] - b[1]) == 1 for a, b in zip(chain, chain[1:], strict=False))


def test_the_compact_and_grid_estimates_run_the_stage_graph_of_their_mapped_graph():
    """The compact tile and the grid (R = 2, 3 chains) of the compact case's GRU: the stage graph
    of the costed lowering is the chain computed here from the plan (x PLIO, [the R W x partners],
    the cell / the R gate tiles, [the head tile], the output PLIO: the step model's stages, the head
    tile and the output PLIO idle per step), the grid's h exchange through its merge inside the
    gate tiles' stage, and the design's estimate is that chain's: a tandem of stages whose first
    step passes every stage once and whose later steps follow at the slowest stage's occupancy."""
    from aieflow.mapped.estimate import stage_graph
    from aieflow.perf.movement import cycles_to_ns
    from aieflow.recurrent.lower import costed
    from aieflow.recurrent.model import estimate_recurrent, head_stage, step_stages
    from aieflow.recurrent.plan import build_grid

    d = CASES["gru-compact-vek280"]()
    layers, _ = split_layers(d.graph)
    dev, compact = d.device, d.mappings[0]
    for m in (compact, build_grid(compact.dims, dev, 2), build_grid(compact.dims, dev, 3)):
        w_path, loop = step_stages(m, dev)
        want = [(s.name, cycles_to_ns(s.occupancy, dev), cycles_to_ns(s.delay, dev)) for s in (*w_path, *loop)]
        tiles = {"cell": 1} if m.compact else {"w_partner": m.u_tiles, "grid": m.u_tiles, "head_tile": 1}
        if m.grid:
            assert [n for n, *_ in want] == ["x_in", "w_partner", "grid"] and m.u_tiles in (2, 3)
            want.append(("head_tile", 0.0, 0.0))
        else:
            assert [n for n, *_ in want] == ["x_in", "cell"]
        want.append(("y_out", 0.0, 0.0))
        sg = stage_graph(costed(lower(layers, [m], dev), [m], dev))
        names = [n for n, *_ in want]
        assert [c.name for c in sg.stages] == names
        assert [x for c in sg.stages for x in (c.occupancy_ns, c.delay_ns)] == pytest.approx([x for w in want for x in w[1:]])
        assert sg.after == {n: tuple(names[i - 1:i]) for i, n in enumerate(names)} and sg.sink == "y_out"
        assert {c.name: c.tiles for c in sg.stages if c.tiles} == tiles
        steps = m.dims.seq_len
        first = sum(o + dl for _, o, dl in want)
        interval = max(o for _, o, _ in want)
        e = estimate_recurrent(m, dev)
        head = head_stage(m, dev)
        assert e.interval_ns == pytest.approx(interval, rel=1e-9)
        assert e.sequence_latency_ns == pytest.approx(first + (steps - 1) * interval
                                                      + cycles_to_ns(head.occupancy + head.delay, dev), rel=1e-9)


def test_the_search_memoises_the_stage_graph_estimate_without_changing_a_candidate():
    """``model.mapped_cycles`` is memoised by (catalog device key, mapping): every compact / grid
    candidate of a search costs the same with the cache as costed afresh (``cache=False``), the
    chosen mapping's design estimate is a cache hit, and a device changed with
    ``dataclasses.replace`` (same key, other figures) is not served from the cache."""
    import dataclasses

    from aieflow.recurrent.model import _mapped_cycles_memo, mapped_cycles
    from aieflow.recurrent.select import choose_mapping, costed_points

    d = CASES["gru-compact-vek280"]()
    dev, dims = d.device, d.mappings[0].dims
    _mapped_cycles_memo.cache_clear()
    pts = [p for p in costed_points(dims, dev) if p.mapping.compact or p.mapping.grid]
    assert len(pts) >= 2
    for p in pts:
        interval, first, _ = mapped_cycles(p.mapping, dev, cache=False)
        assert p.cycles[:2] == (first, interval)  # bit-equal: the cache returns what was computed
    misses = _mapped_cycles_memo.cache_info().misses
    assert misses == len({p.mapping for p in pts})
    hits = _mapped_cycles_memo.cache_info().hits
    ex = choose_mapping(dims, dev, "latency", O(distribution="compact"))
    assert _mapped_cycles_memo.cache_info().hits > hits  # the chosen mapping's estimate: no second simulation
    assert _mapped_cycles_memo.cache_info().misses == misses
    m = ex.chosen.mapping
    slow = dataclasses.replace(dev, clock_hz=dev.clock_hz / 2)  # same key, half the clock
    assert mapped_cycles(m, slow) == mapped_cycles(m, slow, cache=False) != mapped_cycles(m, dev)
    assert _mapped_cycles_memo.cache_info().misses == misses


@pytest.mark.parametrize("device", ["vck190", "vek280"])
@pytest.mark.parametrize("cell", ["gru", "lstm"])
def test_the_row_and_column_estimates_are_the_stage_graph_of_their_mapped_graph(cell, device):
    """A small GRU and LSTM in each row / column mapping with each aggregation (AIE1, and AIE-ML
    with its output kernel): the costed lowering's stage graph is the W path (the x PLIO with the W
    x kernels, ``w_mac``; their packets ``w_route``) and the U h path (``h_in``, ``u_mac``,
    ``route``) meeting at the aggregation (the AIE aggregator or the PL FSM), the h return a
    recurrence, not an edge; and the estimate is the hand count written here from the stages:
    step 0 has no h return (the U kernels start from h = 0 without reading, rnn_kernels.h), so it
    completes at max(W path, U h + routing) + aggregation; step t at the later of the W path's
    t-th pass and step t - 1 + the whole loop, then the aggregation."""
    from aieflow.mapped.estimate import stage_graph
    from aieflow.perf.movement import cycles_to_ns
    from aieflow.recurrent.lower import costed
    from aieflow.recurrent.model import estimate_closed, estimate_recurrent, head_stage, step_stages
    from aieflow.recurrent.plan import RecurrentDims, plan_recurrent

    dev = get_device(device)
    col = {"distribution": "column", "input_distribution": "column", "cas_len": 2, "input_cas_len": 2}
    w_bound = set()
    for steps, n_in in ((10, 6), (6, 96)):  # the loop the bound; the W path the bound (wide x)
        for agg, extra in (("hybrid", {}), ("aie", {}), ("hybrid", col), ("aie", col)):
            m = plan_recurrent(RecurrentDims(cell, n_in, 9, steps), dev, O(aggregation=agg, **extra))
            w_path, loop = step_stages(m, dev)
            assert [s.name for s in w_path] == ["w_mac", "w_route"]
            assert [s.name for s in loop] == ["h_in", "u_mac", "route", "aggregate"]
            sg = stage_graph(costed(lower([_node(cell)], [m], dev), [m], dev))
            names = {c.name for c in sg.stages}
            assert {"w_mac", "w_route", "h_in", "u_mac", "route", "aggregate"} <= names
            assert sg.after["w_route"] == ("w_mac",) and sg.after["u_mac"] == ("h_in",) and sg.after["route"] == ("u_mac",)
            if agg == "hybrid":  # the merged packets reach the FSM through its to-PL PLIOs
                assert sg.after["aggregate"] == ("to_pl",) and set(sg.after["to_pl"]) == {"w_route", "route"}
            else:
                assert set(sg.after["aggregate"]) == {"w_route", "route"}
            assert sg.after["h_in"] == () and sg.recurrences == (("aggregate", "h_in"),)
            assert sg.sink == ("aggregate" if agg == "hybrid" else "y_out")
            # the hand count, in cycles (F: a stage's occupancy + delay)
            f = {s.name: s.occupancy + s.delay for s in loop}
            w_full, w_busy = sum(s.occupancy + s.delay for s in w_path), max(s.occupancy for s in w_path)
            done = [max(w_full, f["u_mac"] + f["route"]) + f["aggregate"]]
            for t in range(1, steps):
                done.append(max(w_full + t * w_busy, done[-1] + sum(f.values()) - f["aggregate"]) + f["aggregate"])
            interval = max(sum(f.values()), w_busy)
            w_bound.add(w_busy > sum(f.values()))
            head = head_stage(m, dev)
            for e in (estimate_recurrent(m, dev), estimate_closed(m, dev)):
                assert e.interval_ns == pytest.approx(cycles_to_ns(interval, dev), rel=1e-9)
                assert e.sequence_latency_ns == pytest.approx(cycles_to_ns(done[-1] + head.occupancy + head.delay, dev),
                                                              rel=1e-9)
            # step 0 is shorter than the closed chain's (W path + the whole loop) by at least the h return
            assert done[0] <= w_full + sum(f.values()) - f["h_in"]
    assert w_bound == {True, False}  # both regimes: the loop bound and the W path bound


def _node(cell):
    from aieflow.ir import Node

    return Node("rnn", cell, (), ())


def test_a_conv1d_front_end_is_part_of_the_w_path_of_the_stage_graph():
    """The Conv1d -> GRU case: the x PLIO and the first convolution carry ``front0``, the second
    ``front1``, which feeds the W x kernels (``w_mac``); the estimate (the stage graph) equals the
    search's closed form, W path = the front stages, ``w_mac`` and ``w_route``."""
    from aieflow.mapped.estimate import stage_graph
    from aieflow.recurrent.lower import costed
    from aieflow.recurrent.model import estimate_closed, estimate_recurrent, step_stages

    d = CASES["conv-gru-vek280"]()
    layers, _ = split_layers(d.graph)
    m, dev = d.mappings[0], d.device
    assert [s.name for s in step_stages(m, dev)[0]] == ["front0", "front1", "w_mac", "w_route"]
    sg = stage_graph(costed(lower(layers, [m], dev, sequence_front(d.graph)), [m], dev))
    assert sg.after["front1"] == ("front0",) and sg.after["w_mac"] == ("front1",) and sg.after["front0"] == ()
    assert sg.recurrences == (("aggregate", "h_in"),)
    e, c = estimate_recurrent(m, dev), estimate_closed(m, dev)
    assert (e.interval_ns, e.sequence_latency_ns) == pytest.approx((c.interval_ns, c.sequence_latency_ns), rel=1e-9)


def test_a_compact_or_grid_layer_behind_a_conv1d_front_end_runs_the_front_in_its_stage_graph():
    """The Conv1d -> GRU case's layer as a compact tile and as a grid of 2 chains (modelled, not
    generated: ``plan._tile_limits``): the stage graph is the chain front0 (the x PLIO and the first
    convolution), front1, ``x_in`` (the last convolution's stream into the tile(s)), [the W x
    partners], the cell / gate tiles, [the head tile], the output PLIO.  Hand count: the front
    stages are the compiled row-wise design's own (its estimate), x_in is n_in 32-bit words at the
    core stream port's rate plus the fixed stream latency and two switch hops (across from the
    front's column, up one row), the cell / partner / gate stages are those of the same layer
    without the front; the estimate is that tandem's: the first step passes every stage once,
    later steps follow at the slowest stage's occupancy (here the second convolution), then the
    head; the search's point (what ``explore`` ranks) is the same figure."""
    from aieflow.mapped.estimate import stage_graph
    from aieflow.perf import movement as mv
    from aieflow.recurrent.lower import costed
    from aieflow.recurrent.model import estimate_recurrent, head_stage, step_stages
    from aieflow.recurrent.plan import build_compact, build_grid, violations
    from aieflow.recurrent.select import mapping_point

    d = CASES["conv-gru-vek280"]()
    layers, _ = split_layers(d.graph)
    dev, dims = d.device, d.mappings[0].dims
    front = [(s.name, s.occupancy, s.delay) for s in d.estimate().stages if s.name.startswith("front")]
    assert [n for n, *_ in front] == ["front0", "front1"]
    bare = replace(dims, front=())
    x_in = ("x_in", math.ceil(dims.n_in * 4 / mv.core_stream_bytes_per_cycle(dev)),
            mv.STREAM_FIXED_CYCLES + 2 * mv.SWITCH_HOP_CYCLES)
    for m, plain in ((build_compact(dims, dev), build_compact(bare, dev)), (build_grid(dims, dev, 2), build_grid(bare, dev, 2))):
        assert any("Conv1d front end" in v for v in violations(m, dev))  # modelled, not generated
        own = [(s.name, s.occupancy, s.delay) for w in step_stages(plain, dev) for s in w if s.name != "x_in"]
        want = [*front, x_in, *own, *([("head_tile", 0.0, 0.0)] if m.grid else []), ("y_out", 0.0, 0.0)]
        sg = stage_graph(costed(lower(layers, [m], dev, sequence_front(d.graph)), [m], dev))
        names = [n for n, *_ in want]
        assert [c.name for c in sg.stages] == names
        assert [x for c in sg.stages for x in (c.occupancy_ns, c.delay_ns)] == pytest.approx(
            [mv.cycles_to_ns(x, dev) for w in want for x in w[1:]])
        assert sg.after == {n: tuple(names[i - 1:i]) for i, n in enumerate(names)} and sg.recurrences == ()
        first = sum(o + dl for _, o, dl in want)
        interval = max(o for _, o, _ in want)
        assert interval == front[1][1]  # the second convolution, not the cell, bounds the interval
        head = head_stage(m, dev)
        seq = first + (dims.seq_len - 1) * interval + head.occupancy + head.delay
        e, p = estimate_recurrent(m, dev), mapping_point(m, dev)
        assert e.interval_ns == pytest.approx(mv.cycles_to_ns(interval, dev), rel=1e-9)
        assert e.sequence_latency_ns == pytest.approx(mv.cycles_to_ns(seq, dev), rel=1e-9)
        assert e.bound == "input path: front1 (compute)"
        assert (p.interval_ns, p.latency_ns) == pytest.approx((e.interval_ns, e.sequence_latency_ns), rel=1e-9)


@pytest.mark.parametrize("name", ["stack-hybrid-then-aie-column-vck190", "stack-compact-then-hybrid-vek280",
                                  "stack-aie-then-aie-column-vek280"])
def test_a_stacked_lowering_is_costed_layer_by_layer(name):
    """The stack's estimate (``stack.estimate_stack``) runs this costed lowering: every layer's stages named ``l<i>.<stage>``, one recurrence per row / column layer, layer l's
    output into layer l + 1's W path (an AIE-ML output kernel's relay between them), the sink the
    output PLIO or the last hybrid layer's FSM; its interval is the chained pipeline's (the
    slowest layer's), and its sequence no longer (no h return on step 0 in any layer)."""
    from aieflow.mapped.estimate import stage_graph
    from aieflow.recurrent.lower import costed
    from aieflow.recurrent.model import head_stage, stage_graph_cycles
    from aieflow.recurrent.stack import StackedMapping, estimate_stack, stack_bounds

    d = CASES[name]()
    layers, _ = split_layers(d.graph)
    ms, dev = tuple(d.mappings), d.device
    sg = stage_graph(costed(lower(layers, ms, dev, sequence_front(d.graph)), ms, dev))
    spread = [li for li, m in enumerate(ms) if not m.compact]
    assert sg.recurrences == tuple((f"l{li}.aggregate", f"l{li}.h_in") for li in spread)
    assert {c.name.split(".")[0] for c in sg.stages} - {"y_out"} == {f"l{li}" for li in range(len(ms))}
    for li in range(1, len(ms)):
        into = set(sg.after[f"l{li}.w_mac"])
        stage = "cell" if ms[li - 1].compact else "relay" if f"l{li - 1}.relay" in sg.after else "aggregate"
        prev = f"l{li - 1}.{stage}"
        assert into == {prev}
    assert sg.sink == (f"l{len(ms) - 1}.aggregate" if ms[-1].aggregation == "hybrid" else "y_out")
    interval, _, seq = stage_graph_cycles(ms, dev)
    _, chain_seq, chain_interval = stack_bounds(ms, dev)  # the step chain, the head included
    head = head_stage(ms[-1], dev)
    assert interval == pytest.approx(chain_interval, rel=1e-9) and seq + head.occupancy + head.delay < chain_seq
    est = estimate_stack(StackedMapping(ms), dev)  # the design's estimate is this graph's figure
    assert est.sequence_latency_ns == pytest.approx((seq + head.occupancy + head.delay) * 1e9 / dev.clock_hz, rel=1e-9)
