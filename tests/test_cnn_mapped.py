"""The CNN stream mapping lowered into the mapped graph (``cnn.emit.lower``, issue 17 migration
step 3): checked against the plan, with counts and sizes derived here from the plan's layers and
stages (not from the lowering): kernels per stage and replica, every stage fed by its producer's
windows (sizes agreeing on both ends), cascades, residual skip windows, PLIOs, distinct tiles on
the device, and the project's graph.h is the rendering of that graph; the estimate's stage graph
(``mapped.estimate.stage_graph`` of the costed lowering) against the one the plan's stages imply,
built here (mutations of the graph and of the lowering caught).  The thesis mapping
(``cnn.emit_thesis.lower``) against the published per-layer kernels and PLIOs."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import yaml

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

import aieflow  # noqa: E402
from aieflow.cnn.design import lowered_graph  # noqa: E402
from aieflow.cnn.emit import lower, place, stage_idents  # noqa: E402
from aieflow.cnn.emit_thesis import layer_info, place_thesis, thesis_problem  # noqa: E402
from aieflow.cnn.emit_thesis import lower as lower_thesis  # noqa: E402
from aieflow.mapped.adf import statements  # noqa: E402
from aieflow.mapped.estimate import stage_graph  # noqa: E402
from aieflow.mapped.ir import Port  # noqa: E402
from aieflow.model_zoo import cnn_classifier, espcn, residual_cnn  # noqa: E402
from aieflow.names import c_ident  # noqa: E402


class Separable(nn.Module):
    """Depthwise + pointwise twice (grouped stages), ReLU after each pointwise."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.dw1, self.pw1 = nn.Conv2d(3, 3, 3, padding=1, groups=3), nn.Conv2d(3, 8, 1)
        self.dw2, self.pw2 = nn.Conv2d(8, 8, 3, padding=2, dilation=2, groups=8), nn.Conv2d(8, 6, 1)

    def forward(self, x):
        return torch.relu(self.pw2(self.dw2(torch.relu(self.pw1(self.dw1(x))))))


class Up(nn.Module):
    """A convolution with nearest upsampling fused into its stage, then another convolution."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.a, self.b = nn.Conv2d(2, 4, 3, padding=1), nn.Conv2d(4, 3, 3, padding=1)

    def forward(self, x):
        return self.b(nn.functional.interpolate(torch.relu(self.a(x)), scale_factor=2))


class Cat(nn.Module):
    """conv a -> conv b, then conv c on cat(b, a, x): a part from the stage right before c, one from
    a stage further back (its windows moved by tile DMA) and one from the input PLIO."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.a, self.b, self.c = nn.Conv2d(3, 3, 3, padding=1), nn.Conv2d(3, 3, 3, padding=1), nn.Conv2d(9, 3, 1)

    def forward(self, x):
        h = torch.relu(self.a(x))
        return self.c(torch.cat([torch.relu(self.b(h)), h, x], dim=1))


def _x(shape, seed=0):
    return np.random.default_rng(seed).standard_normal((4, *shape)).astype(np.float32)


CASES = {
    "residual-aie1-2-replicas": lambda: (residual_cnn(), "vck190", _x((3, 8, 8)), {"precision": "int8", "cnn": {"replicas": 2}}),
    "residual-relu-aieml": lambda: (residual_cnn(relu_after_add=True), "vek280", _x((3, 8, 8)), {"precision": "int16"}),
    "classifier-pooling-fp32-aie1": lambda: (cnn_classifier(), "vck190", _x((3, 32, 32)), {"precision": "fp32"}),
    "classifier-pooling-aieml": lambda: (cnn_classifier(), "vek280", _x((3, 32, 32)), {"precision": "int8", "cnn": {"replicas": 3}}),
    "grouped-aieml": lambda: (Separable().eval(), "vek280", _x((3, 8, 8)), {"precision": "int8", "cnn": {"replicas": 2}}),
    "upsample-aieml": lambda: (Up().eval(), "vek280", _x((2, 6, 5)), {"precision": "int8", "cnn": {"replicas": 1}}),
}


@pytest.fixture(scope="module", params=sorted(CASES))
def design(request):
    model, device, x, config = CASES[request.param]()
    d = aieflow.compile(model, device=device, example_input=x[:1], calibration=x, config=config)
    assert d.plan.mapping == "stream"
    return d


def test_kernels_are_the_plans_tiles_per_stage_and_replica(design):
    plan = design.plan
    g = lower(plan)
    g.check()
    reps = plan.replicas
    assert len(g.kernels) == reps * sum(lay.cas_len * lay.cas_num for lay in plan.layers)
    per = Counter((k.replica, k.node) for k in g.kernels)
    for q in range(reps):
        for s, lay in zip(plan.stages, plan.layers, strict=True):
            assert per[(q, s.name)] == lay.cas_len * lay.cas_num, (q, s.name)
    # one tile each, all on the device's AI Engine array
    tiles = [k.tile for k in g.kernels]
    assert len(set(tiles)) == len(tiles)
    assert all(0 <= c < design.device.columns and 0 <= r < design.device.rows for c, r in tiles)
    assert not g.buffers  # the stream mapping moves windows tile to tile, no memory tile


def test_every_stage_is_fed_by_its_producers_windows(design):
    plan = design.plan
    g = lower(plan)
    stage_of = {s.name: i for i, s in enumerate(plan.stages)}
    kern = {k.var: k for k in g.kernels}
    into = {(link.dst.owner, link.dst.index): link for link in g.links}
    for k in g.kernels:
        si = stage_of[k.node]
        s, lay = plan.stages[si], plan.layers[si]
        _, h, w = s.geometry.in_shape
        src = into[(k.var, 0)]
        if si == 0:
            assert src.kind == "plio" and src.src.owner == f"in{k.replica}"
        else:
            p = kern[src.src.owner]
            assert src.kind == "buffer" and p.node == plan.stages[si - 1].name and p.replica == k.replica
            assert p.out_sizes[0] is not None  # the producer row's last tile, not a cascade port
        # the image window: this stage's channel group over the input image, as the producer writes it
        assert k.in_sizes[0] == lay.in_group * h * w
        if src.kind == "buffer":
            assert kern[src.src.owner].out_sizes[src.src.index] == k.in_sizes[0]
    # which producer rows: a convolution row's cascade positions read every producer row once (the
    # producer's output channel groups are its input channel groups); a pooling stage's rows read
    # every producer row once between them (row r pools channel group r)
    cascades = [link for link in g.links if link.kind == "cascade"]
    nxt = {link.src.owner: link.dst.owner for link in cascades}
    heads = {k.var for k in g.kernels} - set(nxt.values())
    for q in range(plan.replicas):
        for si in range(1, len(plan.stages)):
            lasts = sorted(k.var for k in g.kernels if k.replica == q and k.node == plan.stages[si - 1].name
                           and k.out_sizes[0] is not None)
            assert len(lasts) == plan.layers[si - 1].cas_num
            rows = []
            for head in sorted(h for h in heads if kern[h].replica == q and kern[h].node == plan.stages[si].name):
                chain = [head]
                while chain[-1] in nxt:
                    chain.append(nxt[chain[-1]])
                assert len(chain) == plan.layers[si].cas_len
                rows.append(sorted(into[(v, 0)].src.owner for v in chain))
            assert len(rows) == plan.layers[si].cas_num
            if plan.layers[si].kind == "pool":
                assert sorted(r for row in rows for r in row) == lasts
            else:
                assert all(row == lasts for row in rows), plan.stages[si].name
    # cascades: cas_len - 1 per convolution row
    assert len(cascades) == plan.replicas * sum(lay.cas_num * (lay.cas_len - 1) for lay in plan.layers)
    for link in cascades:
        a, b = kern[link.src.owner], kern[link.dst.owner]
        assert a.node == b.node and a.replica == b.replica and link.dst.index == 1


def test_plios_and_residual_skips(design):
    plan = design.plan
    g = lower(plan)
    reps, last = plan.replicas, plan.layers[-1]
    assert len([p for p in g.plios if p.direction == "in"]) == reps
    assert len([p for p in g.plios if p.direction == "out"]) == reps * last.cas_num
    out_links = [link for link in g.links if link.dst.owner.startswith("out")]
    assert {k.node for k in g.kernels if k.var in {link.src.owner for link in out_links}} == {plan.stages[-1].name}
    kern = {k.var: k for k in g.kernels}
    for si, s in enumerate(plan.stages):
        if s.residual is None:
            continue
        lay = plan.layers[si]
        oh, ow = s.out_hw
        lasts = [k for k in g.kernels if k.node == s.name and len(k.in_sizes) == (3 if lay.cas_len > 1 else 2)]
        assert len(lasts) == reps * lay.cas_num
        for k in lasts:
            skip = next(link for link in g.links if (link.dst.owner, link.dst.index) == (k.var, len(k.in_sizes) - 1))
            assert k.in_sizes[-1] == lay.out_group * oh * ow
            if s.residual.skip_from < 0:
                assert skip.src.owner == f"in{k.replica}"
            else:
                p = kern[skip.src.owner]
                assert p.node == plan.stages[s.residual.skip_from].name and p.replica == k.replica

def test_the_residual_cases_have_fused_adds():
    for name in ("residual-aie1-2-replicas", "residual-relu-aieml"):
        model, device, x, config = CASES[name]()
        d = aieflow.compile(model, device=device, example_input=x[:1], calibration=x, config=config)
        assert [s.residual.skip_from for s in d.plan.stages if s.residual is not None] == [0]


def _plan_stage_graph(plan):
    """The stage graph the plan implies, built here from its stages alone: {stage: producers},
    the sink.  One stage per stage's tile group (``stage:<i>``), the input and output PLIOs
    (``plio:in`` / ``plio:out``); stage i reads the stage before it (a pooling or convolution), or
    each part of its folded concat; a part from a stage other than i - 1, and a fused residual add's
    skip from a stage, pass through a tile-DMA stage of their own (``concat:<i>:<k>``,
    ``skip:<i>``); a part or skip from the network input is read from the input PLIO."""
    def name(k):
        return "plio:in" if k < 0 else f"stage:{k}"

    preds: dict[str, set[str]] = {"plio:in": set()}
    for i, s in enumerate(plan.stages):
        mine = preds.setdefault(f"stage:{i}", set())
        parts = [k for k, _, _ in s.concat.parts] if s.concat is not None else [i - 1]
        for k in parts:
            if k >= 0 and k != i - 1:
                preds[f"concat:{i}:{k}"] = {name(k)}
                mine.add(f"concat:{i}:{k}")
            else:
                mine.add(name(k))
        if s.residual is not None:
            k = s.residual.skip_from
            if k >= 0:
                preds[f"skip:{i}"] = {name(k)}
                mine.add(f"skip:{i}")
            else:
                mine.add(name(k))
    preds["plio:out"] = {f"stage:{len(plan.stages) - 1}"}
    return preds, "plio:out"


def _built_stage_graph(mg):
    sg = stage_graph(mg)
    return {c.name: set(sg.after[c.name]) for c in sg.stages}, sg.sink


@pytest.fixture(scope="module")
def concat_design():
    x = _x((3, 6, 6))
    return aieflow.compile(Cat().eval(), device="vek280", example_input=x[:1], calibration=x,
                           config={"precision": "int8", "cnn": {"replicas": 2}})


def test_the_estimate_stage_graph_is_the_plans_stages(design):
    _check_stage_graph(design)


def test_the_estimate_stage_graph_of_a_folded_concat(concat_design):
    c = concat_design.plan.stages[-1].concat
    assert c is not None and [k for k, _, _ in c.parts] == [1, 0, -1]
    _check_stage_graph(concat_design)
    _check_mutations(concat_design)


def _check_stage_graph(design):
    plan = design.plan
    g = lower(plan)
    assert _built_stage_graph(g) == _plan_stage_graph(plan)
    # every tile of stage i (every replica) carries stage i's cost: its tiles per replica and MACs
    per_stage = Counter(k.cost.name for k in g.kernels)
    for i, (s, lay) in enumerate(zip(plan.stages, plan.layers, strict=True)):
        assert per_stage[f"stage:{i}"] == lay.cas_num * lay.cas_len * plan.replicas
        cost = next(k.cost for k in g.kernels if k.node == s.name)
        assert cost.tiles == lay.cas_num * lay.cas_len and cost.macs == s.macs and cost.kind == "kernel"
    # the estimate is that graph's simulation: the first frame's latency is the longest path
    # (computed here over the built graph), the interval at least the slowest stage
    sg = stage_graph(g)
    finish: dict[str, float] = {}
    for c in sg.stages:
        finish[c.name] = max((finish[p] for p in sg.after[c.name]), default=0.0) + c.occupancy_ns + c.delay_ns
    e = design.estimate()
    assert e.latency_s * 1e9 == pytest.approx(finish[sg.sink], rel=1e-9)
    assert e.interval_s * 1e9 >= max(c.occupancy_ns for c in sg.stages) * (1 - 1e-9)
    # the design's tiles are the mapped graph's kernels; no memory tiles
    perf = design.to_json()["performance"]
    assert perf["tiles_used"] == len(g.kernels) == plan.tiles and perf["memory_tiles_used"] == 0


def test_a_rewired_or_uncosted_link_changes_the_stage_graph(design):
    """The comparison above catches a lowering that feeds a stage from the wrong producer or loses
    a DMA link's cost (the graph mutated here, as a wrong lowering would build it)."""
    _check_mutations(design)


def _check_mutations(design):
    plan = design.plan
    g = lower(plan)
    want = _plan_stage_graph(plan)
    # every tile of the last stage fed from the input PLIO instead of its producers' windows
    last = {k.var for k in g.kernels if k.node == plan.stages[-1].name}
    rewired = tuple(replace(lk, kind="plio", src=Port("in0", "out", 0)) if (lk.dst.owner in last and lk.dst.index == 0)
                    else lk for lk in g.links)
    assert _built_stage_graph(replace(g, links=rewired)) != want
    costed = [lk for lk in g.links if lk.cost is not None]
    if costed:
        stripped = tuple(replace(lk, cost=None) if lk.cost == costed[0].cost else lk for lk in g.links)
        assert _built_stage_graph(replace(g, links=stripped)) != want


def _plan_layer_edges(plan):
    """(producer, consumer) stage indices the plan's stages imply: the stage before (or each part
    of a folded concat) and a residual skip's producer; the network input is no layer."""
    edges = set()
    for i, s in enumerate(plan.stages):
        parts = [k for k, _, _ in s.concat.parts] if s.concat is not None else [i - 1]
        skip = [s.residual.skip_from] if s.residual is not None else []
        edges |= {(k, i) for k in parts + skip if k >= 0}
    return edges


def _check_placement(design):
    """The rectangles are the bounding boxes of ``cnn.emit.place``'s tiles per layer and replica;
    the arrows the plan's producer -> consumer relations in every replica."""
    plan = design.plan
    placement, edges = design.mapped_placement()
    cells: dict[str, list[tuple[int, int]]] = {}
    for t in place(plan):
        cells.setdefault(plan.stages[t.stage].name + (f" #{t.replica}" if t.replica else ""), []).append((t.col, t.row))
    want = {n: (min(c for c, _ in v), min(r for _, r in v), max(c for c, _ in v) - min(c for c, _ in v) + 1,
                max(r for _, r in v) - min(r for _, r in v) + 1) for n, v in cells.items()}
    assert {r.layer: (r.column, r.row, r.width, r.height) for r in placement.rects} == want
    names = [s.name for s in plan.stages]
    tag = [""] + [f" #{q}" for q in range(1, plan.replicas)]
    assert set(edges) == {(names[a] + t, names[b] + t) for a, b in _plan_layer_edges(plan) for t in tag}
    assert len(edges) == len(set(edges))


def test_the_placement_picture_reads_the_mapped_graph(design):
    _check_placement(design)


def test_the_placement_of_a_folded_concat(concat_design):
    _check_placement(concat_design)  # c's arrows from b and a, none from the input


def test_the_project_graph_is_the_rendered_mapped_graph(design):
    g = lower(design.plan)
    text = design.files["src/graph.h"]
    assert all(f"        {s};" in text for s in statements(g))
    assert text.count("adf::connect") == len(g.links)
    assert text.count("adf::kernel::create_object") == len(g.kernels)
    assert all(f'#include "{h}"' in text for h in g.headers)
    assert len(g.headers) == sum(lay.cas_len * lay.cas_num for lay in design.plan.layers if lay.kind != "pool")


# ------------------------------------------------------------------ the thesis mapping

THESIS_YAML = Path(__file__).resolve().parents[1] / "examples" / "espcn" / "thesis.yaml"
# the published per-layer tiles (examples/espcn/thesis.yaml, shared/spec/espcn-super-resolution.md):
# layer: (kernels, input PLIOs, tile M x K(padded) x N)
THESIS = {"conv1": (16, 4, (16, 32, 64)), "conv3": (128, 32, (8, 576, 8)), "conv4": (16, 16, (4, 288, 16))}


@pytest.fixture(scope="module")
def thesis():
    x = np.random.default_rng(0).uniform(0, 1, (2, 1, 16, 16)).astype(np.float32)
    d = aieflow.compile(espcn(), device="vck190", example_input=x, calibration=x,
                        config=yaml.safe_load(THESIS_YAML.read_text()))
    assert d.plan.mapping == "thesis"
    return d


def test_the_thesis_mapping_lowers_to_the_published_kernels(thesis):
    layers = [layer_info(s, lay, c_ident(s.name)) for s, lay in zip(thesis.plan.stages, thesis.plan.layers, strict=True)]
    g, _, _ = lower_thesis(thesis.plan, layers)
    g.check()
    assert len(g.kernels) == sum(n for n, _, _ in THESIS.values())
    per = Counter(k.node for k in g.kernels)
    assert dict(per) == {name: n for name, (n, _, _) in THESIS.items()}
    tiles = [k.tile for k in g.kernels]
    assert len(set(tiles)) == len(tiles)
    assert all(0 <= c < thesis.device.columns and 0 <= r < thesis.device.rows for c, r in tiles)
    # no kernel-to-kernel edge: every link joins a PLIO and a kernel, each window single-buffered
    kern = {k.var: k for k in g.kernels}
    plios = {p.var: p for p in g.plios}
    assert all((link.src.owner in plios) != (link.dst.owner in plios) and link.kind == "plio" for link in g.links)
    assert all(set(k.single) == {("in", 0), ("out", 0)} for k in g.kernels)
    # PLIOs: the published input PLIOs per layer (each broadcast to its N block), one output per kernel
    ins = Counter(kern[link.dst.owner].node for link in g.links if link.src.owner in plios)
    assert ins == Counter({name: n for name, (n, _, _) in THESIS.items()})
    assert len([p for p in g.plios if p.direction == "in"]) == sum(p for _, p, _ in THESIS.values())
    assert len([p for p in g.plios if p.direction == "out"]) == len(g.kernels)
    assert {p.freq_mhz for p in g.plios} == {312.5}
    feeders = {}
    for link in g.links:
        if link.src.owner in plios:
            feeders.setdefault(kern[link.dst.owner].node, set()).add(link.src.owner)
    assert {k: len(v) for k, v in feeders.items()} == {name: p for name, (_, p, _) in THESIS.items()}
    # windows: K(padded) x N patches in, M x N products out
    for k in g.kernels:
        m, kp, n = THESIS[k.node][2]
        assert k.in_sizes == (kp * n,) and k.out_sizes == (m * n,)
    text = thesis.files["src/graph.h"]
    assert all(f"        {s};" in text for s in statements(g))
    assert 'adf::plio_128_bits, "data/conv1_in0.txt", 312.5);' in text
    assert text.count("adf::single_buffer(") == 2 * len(g.kernels)


def test_the_thesis_pl_kernels_are_plkernels_of_its_mapped_graph_and_system_cfg_connects_them(thesis):
    layers = [layer_info(s, lay, c_ident(s.name)) for s, lay in zip(thesis.plan.stages, thesis.plan.layers, strict=True)]
    g, _, _ = lower_thesis(thesis.plan, layers)
    g.check()  # every PL port on a PLIO of the right direction, none on two ports
    names = list(THESIS)
    assert [pk.name for pk in g.pl_kernels] == [L["pl_name"] for L in layers]
    # each layer's PL kernel reads its kernels' output windows and writes the next layer's input PLIOs
    # (the published counts); the last one's pixel shuffle leaves the graph
    assert [len(pk.ins) for pk in g.pl_kernels] == [THESIS[n][0] for n in names]
    assert [len(pk.outs) for pk in g.pl_kernels] == [THESIS["conv3"][1], THESIS["conv4"][1], 1]
    assert g.pl_kernels[-1].outs == (("out_0", ""),)
    assert [pk.items for pk in g.pl_kernels] == [THESIS[n][0] * THESIS[n][2][0] * THESIS[n][2][2] for n in names]
    cfg = thesis.files["system.cfg"]
    for pk in g.pl_kernels:
        for port, plio in pk.ins:
            assert f"stream_connect=ai_engine_0.{plio}:{pk.name}_0.{port}\n" in cfg
        for port, plio in pk.outs:
            if plio:
                assert f"stream_connect={pk.name}_0.{port}:ai_engine_0.{plio}\n" in cfg
    assert f"stream_connect={g.pl_kernels[-1].name}_0.out_0:" in cfg  # to the s2mm
    # and the mm2s movers into conv1's input PLIOs; the s2mm's is the last kernel's out_0, counted
    movers = THESIS["conv1"][1]
    assert cfg.count("stream_connect=") == sum(len(pk.ins) + len(pk.outs) for pk in g.pl_kernels) + movers


def test_the_thesis_placement_reads_its_mapped_graph(thesis):
    # rectangles: each layer's kernel tiles (whole columns from row 0, the published kernel counts);
    # arrows: layer i -> i + 1 through the PL kernel between them (no kernel-to-kernel link)
    plan = thesis.plan
    placement, edges = thesis.mapped_placement()
    mg, _ = lowered_graph(plan)
    cells: dict[str, list[tuple[int, int]]] = {}
    for k in mg.kernels:
        cells.setdefault(k.node, []).append(k.tile)
    rects = {r.layer: r for r in placement.rects}
    assert set(rects) == set(cells) and rects["conv1"].width * rects["conv1"].height >= THESIS["conv1"][0]
    for name, v in cells.items():
        cols, rows = [c for c, _ in v], [r for _, r in v]
        assert (rects[name].column, rects[name].row) == (min(cols), min(rows))
        assert (rects[name].width, rects[name].height) == (max(cols) - min(cols) + 1, max(rows) - min(rows) + 1)
    names = [s.name for s in plan.stages]
    assert edges == list(zip(names, names[1:], strict=False))


def test_the_one_placer_puts_the_thesis_kernels_on_the_published_cells(thesis):
    """The thesis mapping is placed by the one placer (groups and edges read off its mapped graph,
    the layers joined through their PL kernels) and lands on the published cells: on the VCK190's 8
    rows, conv1's 16 kernels in columns 0-1, conv3's 128 in columns 2-17, conv4's 16 in columns
    18-19, each layer's kernels column by column from row 0 (mi-major, ni-minor), which the branch
    and bound proves optimal."""
    plan = thesis.plan
    idents = stage_idents(plan.stages)
    layers = [layer_info(s, lay, idents[i]) for i, (s, lay) in enumerate(zip(plan.stages, plan.layers, strict=True))]
    prob = thesis_problem(plan, layers)
    assert [(b.name, b.width, b.height, b.fixed) for b in prob.blocks] == [
        ("conv1", 2, 8, None), ("conv3", 16, 8, None), ("conv4", 2, 8, None)]
    # conv1 -> conv3: 128 kernels each reading a 576 x 8 window; conv3 -> conv4: 16 x (288 x 16)
    assert [(e.producer, e.consumer, e.words) for e in prob.edges] == [(0, 1, 128 * 576 * 8), (1, 2, 16 * 288 * 16)]
    p = place_thesis(plan, layers)
    assert p.method == "bnb" and p.optimal
    # J: two edges of one column each, three rectangles topped at row 7 (mu = 0.05), input at (0, 0)
    assert p.cost == pytest.approx(1 + 1 + 3 * 0.05 * 7)
    published = {"conv1": (0, 2), "conv3": (2, 16), "conv4": (18, 2)}  # first column, columns
    grid = {"conv1": (4, 4), "conv3": (4, 32), "conv4": (1, 16)}  # grid_m x grid_n (kernels / N blocks)
    mg, _ = lowered_graph(plan)
    tiles = {k.var: k.tile for k in mg.kernels}
    for name, (col0, width) in published.items():
        gm, gn = grid[name]
        want = {f"k_{name}_{mi}_{ni}": (col0 + (mi * gn + ni) // 8, (mi * gn + ni) % 8)
                for mi in range(gm) for ni in range(gn)}
        assert {v: t for v, t in tiles.items() if v.startswith(f"k_{name}_")} == want
        assert max(c for c, _ in want.values()) == col0 + width - 1
    text = thesis.files["src/graph.h"]
    assert "adf::location<adf::kernel>(k_conv3_0_0) = adf::tile(2, 0);" in text
    assert "adf::location<adf::kernel>(k_conv4_0_15) = adf::tile(19, 7);" in text
