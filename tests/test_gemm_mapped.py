"""The GEMM designs on the mapped graph (gemm/lower.py): kernels, links and PL movers against hand
counts, the resources design.json reports, and the estimate against an independent tandem
reference of the stage graph it simulates."""

from __future__ import annotations

import dataclasses
import math
import re
from collections import Counter

import pytest
import torch

import aieflow
from aieflow.errors import PlanError
from aieflow.gemm.dense_design import StreamedDenseDesign
from aieflow.gemm.lower import lower, lower_streamed, stage_costs
from aieflow.mapped import transport
from aieflow.mapped.estimate import resources, stage_graph
from aieflow.mapped.tiling import render


def _kinds(mg) -> Counter:
    return Counter(link.kind for link in mg.links)


def test_the_published_design_lowers_to_one_kernel_per_tile_with_its_plios_and_movers():
    d = aieflow.gemm(256, 256, 2048, dtype="uint8", device="vck190", tiles=4)
    mg = lower(d.plan)
    mg.check()
    # 4 tiles down column 0; Ar: 1 PLIO (one stream, multicast), Br: 4 (one per L4 lane), Cr: 4
    assert [k.tile for k in mg.kernels] == [(0, 0), (0, 1), (0, 2), (0, 3)]
    assert sorted(p.var for p in mg.plios if p.direction == "in") == [
        "ar0_0",
        "br0",
        "br1",
        "br2",
        "br3",
    ]
    assert sorted(p.var for p in mg.plios if p.direction == "out") == ["cr0", "cr1", "cr2", "cr3"]
    # per tile: Br PLIO into its buffer port, Ar stream in, Cr stream out
    assert _kinds(mg) == {"plio": 4, "stream": 8}
    assert all(k.single == (("in", 0),) for k in mg.kernels)  # the published design: one Br buffer
    assert [k.in_sizes for k in mg.kernels] == [(2048 * 8, None)] * 4  # kc x nr Br, the Ar stream
    mover, collect = mg.pl_kernels
    assert (mover.name, sorted(v for _, v in mover.outs)) == (
        "gemm_mover",
        ["ar0_0", "br0", "br1", "br2", "br3"],
    )
    assert (collect.name, sorted(v for _, v in collect.ins)) == (
        "gemm_collect",
        ["cr0", "cr1", "cr2", "cr3"],
    )
    assert resources(mg, d.plan.device) == (4, 0)
    assert transport.check(mg, d.plan.device).word_problems == ()
    perf = d.to_json()["performance"]
    assert (perf["tiles_used"], perf["memory_tiles_used"]) == (4, 0)


def test_gmio_br_is_a_gmio_link_and_no_plio():
    d = aieflow.gemm(
        256, 256, 2048, dtype="int8", device="vck190", tiles=6, design="best", br_transfer="gmio"
    )
    c = d.plan.config
    mg = lower(d.plan)
    mg.check()
    gmio = [p.var for p in mg.plios if p.gmio]
    assert sorted(gmio) == sorted(f"br{j}" for j in range(c.tiles_j))
    assert _kinds(mg) == {"gmio": c.tiles, "stream": c.tiles * (c.ar_streams + 1)}
    mover = mg.pl_kernels[0]
    assert not set(gmio) & {v for _, v in mover.outs}  # the host reads Br from DDR, not the mover
    transport.check(mg, d.plan.device)  # the GMIO ports are not counted as PLIOs


@pytest.mark.parametrize(
    ("device", "dtype", "tiles"),
    [("vek280", "int8", 8), ("vek385", "bf16", 6), ("vek280", "uint8", 64)],
)
def test_the_memory_tile_design_lowers_ac_and_bc_into_shared_buffers(device, dtype, tiles):
    d = aieflow.gemm(256, 256, 2048, dtype=dtype, device=device, tiles=tiles, design="best")
    p = d.plan
    c, lay = p.config, p.memtiles
    mg = lower(p)
    mg.check()
    bc = math.ceil(c.tiles_j / lay.lanes_per_memtile)
    assert len(mg.kernels) == c.tiles_j * c.tiles_i
    assert sorted(b.var for b in mg.buffers) == sorted(
        [f"ac{g}" for g in range(c.tiles_i)] + [f"bc{b}" for b in range(bc)]
    )
    # a PLIO into every buffer; every tile reads its Br lane (DMA) and its group's Ac (stream) from
    # the memory tiles and writes Cr to its own PLIO
    assert _kinds(mg) == {
        "memtile": c.tiles_i + bc + 2 * len(mg.kernels),
        "stream": len(mg.kernels),
    }
    assert sum(len(b.reads) for b in mg.buffers if b.var.startswith("bc")) == c.tiles_j
    assert len([p for p in mg.plios if p.direction == "in"]) == c.tiles_i + bc
    assert resources(mg, p.device) == (len(mg.kernels), c.tiles_i + bc)
    perf = d.to_json()["performance"]
    assert (perf["tiles_used"], perf["memory_tiles_used"]) == (len(mg.kernels), c.tiles_i + bc)


def test_the_memory_tile_reads_fit_a_buffer_descriptor_and_the_compile_checks_them():
    # one tile, NR 32, KC 256, MC 256, an 8 x 8 x 8 int8 mmul (NS = KS = 8, MR 8), nc 96: 3 L4 steps
    shape = {"dtype": "int8", "tiles": 1, "design": "best", "blocks": {"nc": 96, "kc": 256}}
    p = aieflow.gemm(256, 1024, 512, device="vek280", **shape).plan
    assert (p.blocks.nr, p.blocks.kc, p.blocks.mr, p.mc_tile, p.l4_steps) == (32, 256, 8, 256, 3)
    mg = lower(p)
    (ac,) = [b for b in mg.buffers if b.var.startswith("ac")]
    (bc,) = [b for b in mg.buffers if b.var.startswith("bc")]
    # Bc read, element strides: 1 (NS), 32 (KS rows), 8 (4 column blocks), 256 (32 k steps) and
    # 8192 (3 L4 steps) = 32 x 256: the step loop continues the k-step loop, 4 dimensions (UG1603
    # Table 1: a memory-tile DMA addresses 4)
    assert bc.reads[0].address_loops() == ((1, 8), (32, 8), (8, 4), (256, 96))
    # Ac read: strides 1 (KS), 256 (MR rows), 8 (32 k steps), 2048 (32 rounds), the whole of Ac
    # once per L4 step (the template's .repetition = L4_STEPS)
    assert ac.reads[0].address_loops() == ((1, 8), (256, 8), (8, 32), (2048, 32))
    assert (ac.reads[0].repetition, ac.reads[0].elements) == (3, 256 * 256 * 3)
    assert render(ac.reads[0]).endswith(", .repetition = 3})")
    assert "repetition" not in render(bc.reads[0])
    assert transport.check(mg, p.device).word_problems == ()
    # the compile runs the check pass: Bc (one write and one read port, ping-pong) needs 4 BDs
    tight = dataclasses.replace(p.device, memtile_bds=3)
    with pytest.raises(PlanError, match="needs 4 buffer descriptors"):
        aieflow.gemm(256, 1024, 512, device=tight, **shape)


def _tandem(br: float, compute: float, steps: int, buffers: int) -> float:
    """Independent reference: ``steps`` iterations through Br copy -> rounds, ``buffers`` Br slots."""
    free_br = done = 0.0
    starts: list[float] = []
    for s in range(steps):
        slot_free = starts[s - buffers] if s >= buffers else 0.0  # the kernel released the slot
        t_br = max(free_br, slot_free) + br
        free_br = t_br
        start = max(t_br, done)
        done = start + compute
        starts.append(done)
    return done


def _reference_cycles(p) -> float:
    """The GEMM's AIE cycles: every (jc, pc, ic) block's L4 steps through the tandem reference, on
    the stage costs the lowering attaches."""
    total = 0.0
    for later, count in ((False, p.n_jc * p.n_ic), (True, p.n_jc * p.n_ic * (p.n_pc - 1))):
        br, tl = stage_costs(p, later)
        total += count * _tandem(br.cycles, tl.cycles, p.l4_steps, p.config.br_buffers)
    return total


@pytest.mark.parametrize(
    ("tiles", "design", "k"),
    [(1, "published", 2048), (4, "published", 5000), (8, "best", 5000), (3, "best", 777)],
)
def test_the_estimate_is_the_simulated_stage_graph_of_the_mapped_graph(tiles, design, k):
    d = aieflow.gemm(256, 512, k, dtype="uint8", device="vck190", tiles=tiles, design=design)
    p = d.plan
    sg = stage_graph(lower(p, costed=True))
    assert [s.name for s in sg.stages] == ["br", "tiles"] and sg.after == {
        "br": (),
        "tiles": ("br",),
    }
    assert sg.single == (frozenset({"br"}) if p.config.br_buffers == 1 else frozenset())
    total = _reference_cycles(p)
    e = d.estimate()
    assert e.cycles == pytest.approx(total, rel=1e-9)
    assert e.breakdown["br_copy"] + e.breakdown[
        next(x for x in e.breakdown if x.startswith("micro"))
    ] + e.breakdown["write_back"] == pytest.approx(e.cycles, rel=1e-9)


# ------------------------------------------------------------- the memory-tile design's estimate

# The one VEK280 int8 plan of the buffer-descriptor test above: one tile, mr 8, nr 32, kc 256, mc 256,
# nc 96 (3 L4 steps of 32 rounds), 11 x 2 x 1 (jc, pc, ic) blocks.
SMALL = {"dtype": "int8", "tiles": 1, "design": "best", "blocks": {"nc": 96, "kc": 256}}


def test_the_memory_tile_stage_graph_against_a_hand_count():
    p = aieflow.gemm(256, 1024, 512, device="vek280", **SMALL).plan
    assert (p.n_jc, p.n_pc, p.n_ic, p.l4_steps, p.rounds) == (11, 2, 1, 3, 32)
    for buffers in (1, 2):
        q = dataclasses.replace(p, config=dataclasses.replace(p.config, br_buffers=buffers))
        for later in (False, True):
            sg = stage_graph(lower(q, costed=True, later_pc=later))
            # the mover's Ac and Br panels into their memory tiles, each lane's panels into its
            # tile by DMA, the tiles' rounds (with the Cr collection) last
            assert [s.name for s in sg.stages] == ["ddr_a", "ddr_b", "br", "tiles"]
            assert sg.after == {
                "ddr_a": (),
                "ddr_b": (),
                "br": ("ddr_b",),
                "tiles": ("ddr_a", "br"),
            }
            assert sg.sink == "tiles"
            # the memory tiles' Ac and Bc are ping-pong; the tile's Br buffer as the config says
            assert sg.single == (frozenset({"br"}) if buffers == 1 else frozenset())
            cyc = {s.name: s.cycles for s in sg.stages}
            # By hand (VEK280: a 128-bit AXI beat per PL cycle at a quarter of the AIE clock = 4 B
            # per AIE cycle, 8 cycles to start a DDR transfer; the PLIO into a memory tile 4 B per
            # cycle; the memory tile -> tile DMA 4 B per cycle):
            # Ac 256 x 256 B from DDR; Br 3 panels of 256 x 32 B; C 256 x 96 int32, read and written
            # when pc > 0.
            assert cyc["ddr_a"] == 256 * 256 / 4 + 8
            assert cyc["ddr_b"] == 3 * 256 * 32 / 4 + 8
            assert cyc["br"] == 3 * 256 * 32 / 4
            # a micro-kernel: the Ar stream ceil(8 x 256 / 4) + 3 cycles (MACs 8 x 256 x 32 / 256 =
            # 256 and Br loads 128 are slower), plus 8 x 32 Cr words out of the 32-bit port; 3 x 32
            # of them per block: 74,016 cycles, more than the C write (24,584 or 49,168)
            c_write = (2 if later else 1) * (256 * 96 * 4 / 4 + 8)
            assert cyc["tiles"] == max(3 * 32 * (515 + 256), c_write) == 74016


def _memtile_reference(p) -> float:
    """Independent reference: every (jc, pc, ic) block in loop order through four stages (Ac into
    its memory tile, Br panels into theirs, the lane's panels into the tile, the rounds), each
    starting a block when it is free, the block is in every buffer it reads and a slot of its
    output buffer is free (a buffer of k slots frees block b's slot when its reader finishes block
    b - k); the memory tiles' buffers hold 2 blocks, the tile's Br buffer 1 or 2.  Returns when the
    last block's rounds finish."""
    costs = {}
    for later in (False, True):
        sg = stage_graph(lower(p, costed=True, later_pc=later))
        costs[later] = {s.name: s.cycles for s in sg.stages}
    order = []
    for _ in range(p.n_jc):
        order += [False] * p.n_ic + [True] * p.n_ic * (p.n_pc - 1)
    slots = {"ddr_a": 2, "ddr_b": 2, "br": p.config.br_buffers}
    readers = {"ddr_a": "tiles", "ddr_b": "br", "br": "tiles"}
    start = {s: [] for s in ("ddr_a", "ddr_b", "br", "tiles")}
    done = {s: [] for s in start}
    for b, later in enumerate(order):
        for s, inputs in (
            ("ddr_a", ()),
            ("ddr_b", ()),
            ("br", ("ddr_b",)),
            ("tiles", ("ddr_a", "br")),
        ):
            t = done[s][b - 1] if b else 0.0
            for i in inputs:
                t = max(t, done[i][b])
            if s in slots and b >= slots[s]:
                t = max(t, done[readers[s]][b - slots[s]])
            start[s].append(t)
            done[s].append(t + costs[later][s])
    return done["tiles"][-1]


@pytest.mark.parametrize(
    ("device", "dtype", "tiles", "blocks"),
    [
        ("vek280", "int8", 1, SMALL["blocks"]),  # 22 blocks, compute bound
        ("vek280", "uint8", 4, None),  # the search's choice: write-back bound, single Br
        ("vek280", "bf16", 16, None),  # 3 pc blocks, C write slower than the rounds
        ("vek385", "bf16", 4, None),
        ("vek280", "int8", 32, None),  # one (jc, pc, ic) block, Ac from DDR the slowest
    ],
)
def test_the_memory_tile_estimate_is_its_stage_graph_simulated(device, dtype, tiles, blocks):
    d = aieflow.gemm(
        256,
        1024 if blocks else 256,
        512 if blocks else 2048,
        dtype=dtype,
        device=device,
        tiles=tiles,
        design="best",
        blocks=blocks,
    )
    p = d.plan
    e = d.estimate()
    assert e.cycles == pytest.approx(_memtile_reference(p), rel=1e-9)
    assert sum(e.breakdown.values()) == pytest.approx(e.cycles, rel=1e-9)
    assert min(e.breakdown.values()) >= 0
    # the other Br buffering of the same blocks
    q = dataclasses.replace(
        p, config=dataclasses.replace(p.config, br_buffers=3 - p.config.br_buffers)
    )
    from aieflow.gemm.perf import estimate

    assert estimate(q).cycles == pytest.approx(_memtile_reference(q), rel=1e-9)


@pytest.mark.parametrize(
    ("device", "dtype", "tiles"),
    [("vck190", "int8", 8), ("vek280", "uint8", 16), ("vek385", "bf16", 4)],
)
def test_the_search_ranks_with_the_figure_the_design_reports(device, dtype, tiles):
    d = aieflow.gemm(256, 256, 4096, dtype=dtype, device=device, tiles=tiles, design="best")
    chosen = [a for a in d.alternatives if a.chosen]
    assert len(chosen) == 1
    assert chosen[0].cycles == d.estimate().cycles
    assert chosen[0].total_cycles == d.to_json()["performance"]["total_cycles"]


@pytest.mark.parametrize("device", ["vck190", "vek280"])
def test_a_streamed_dense_layer_is_its_gemms_graph_and_the_epilogue_pl_kernel(device):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(200, 72), torch.nn.ReLU()).eval()
    cfg = {"precision": "int8", "batch": 16, "layers": {"0": {"weights": "streamed"}}}
    d = aieflow.compile(model, device=device, example_input=torch.randn(16, 200), config=cfg)
    assert isinstance(d, StreamedDenseDesign)
    g = d.plan.gemm
    mg = lower_streamed(d.plan)
    mg.check()
    assert [pk.name for pk in mg.pl_kernels] == ["gemm_mover", "gemm_collect", "dense_epilogue"]
    epi = mg.pl_kernels[2]
    assert (epi.ins, epi.outs, epi.items, epi.calls) == ((), (), 16 * 72, 1)  # C, bias, Y in DDR
    memtiles = (
        0
        if g.memtiles is None
        else g.config.tiles_i + math.ceil(g.config.tiles_j / g.memtiles.lanes_per_memtile)
    )
    assert resources(mg, g.device) == (g.config.tiles_j * g.config.tiles_i, memtiles)
    j = d.to_json()
    assert (j["resources"]["compute_tiles"], j["resources"]["memory_tiles"]) == resources(
        mg, g.device
    )
    assert (j["performance"]["tiles_used"], j["performance"]["memory_tiles_used"]) == resources(
        mg, g.device
    )
    e = d.estimate()
    if g.memtiles is None:  # the PL-memory GEMM: its AIE cycles are its stage graph's
        assert e.gemm.cycles == pytest.approx(_reference_cycles(g), rel=1e-9)
    assert e.cycles == pytest.approx(e.gemm.total_cycles + e.epilogue_cycles, rel=1e-12)


_CONNECT = re.compile(
    r"adf::connect(?:<[^>]*>)?(?: (\w+))?\((\w+\.out\[\d+\]), (\w+\.in\[\d+\])\);"
)


def _connections(graph_h: str) -> tuple[set, dict]:
    """graph.h's connections as (source port, destination port) pairs, and each named net's FIFO depth."""
    nets, pairs = {}, set()
    for name, src, dst in _CONNECT.findall(graph_h):
        pairs.add((src, dst))
        if name:
            nets[name] = (src, dst)
    depths = {nets[n]: int(v) for n, v in re.findall(r"adf::fifo_depth\((\w+)\) = (\d+);", graph_h)}
    return pairs, depths


@pytest.mark.parametrize("br_transfer", ["stream", "gmio"])
def test_the_pl_memory_graph_h_connects_what_the_design_moves(br_transfer):
    """graph.h (the one mapped-graph writer) and system.cfg against a hand list of the PL-memory
    design's connections: Ar of group g multicast to every tile of g, Br of lane j to the tiles of lane
    j, Cr of each tile to its PLIO through a FIFO of one Cr (mr x nr values) when overlapped."""
    kw = (
        {"design": "published"}
        if br_transfer == "stream"
        else {"design": "best", "br_transfer": "gmio"}
    )
    d = aieflow.gemm(256, 256, 2048, dtype="int8", device="vck190", tiles=6, **kw)
    c, b = d.plan.config, d.plan.blocks
    want, cfg = set(), set()
    for g in range(c.tiles_i):
        for j in range(c.tiles_j):
            t = g * c.tiles_j + j
            want |= {(f"br{j}.out[0]", f"tile{t}.in[0]"), (f"tile{t}.out[0]", f"cr{t}.in[0]")}
            want |= {(f"ar{g}_{s}.out[0]", f"tile{t}.in[{1 + s}]") for s in range(c.ar_streams)}
            cfg.add(f"stream_connect=ai_engine_0.cr{t}:gemm_collect_0.cr{t}")
        cfg |= {
            f"stream_connect=gemm_mover_0.ar{g}_{s}:ai_engine_0.ar{g}_{s}"
            for s in range(c.ar_streams)
        }
    if br_transfer == "stream":
        cfg |= {f"stream_connect=gemm_mover_0.br{j}:ai_engine_0.br{j}" for j in range(c.tiles_j)}
    g_h = d.files["src/graph.h"]
    pairs, depths = _connections(g_h)
    assert pairs == want
    fifo = (
        {}
        if c.writeback == "serial"
        else {(f"tile{t}.out[0]", f"cr{t}.in[0]"): b.mr * b.nr for t in range(c.tiles)}
    )
    assert depths == fifo
    assert g_h.count("adf::input_gmio::create(") == (c.tiles_j if br_transfer == "gmio" else 0)
    assert g_h.count("adf::kernel::create(gemm_tile);") == c.tiles
    assert {x for x in d.files["system.cfg"].splitlines() if x.startswith("stream_connect=")} == cfg


@pytest.mark.parametrize(
    ("device", "dtype", "tiles"), [("vek280", "int8", 8), ("vek385", "bf16", 6)]
)
def test_the_memory_tile_graph_h_connects_what_the_design_moves(device, dtype, tiles):
    """The memory-tile design's graph.h against a hand list: a<g> into Ac memory tile g, whose one
    read port is multicast to the tiles of group g (their stream port 1); b<m> into Bc memory tile m,
    whose read port l feeds lane m * lanes_per_memtile + l; Cr through a FIFO of one Cr."""
    d = aieflow.gemm(256, 256, 2048, dtype=dtype, device=device, tiles=tiles, design="best")
    c, b, lay = d.plan.config, d.plan.blocks, d.plan.memtiles
    want = {(f"a{g}.out[0]", f"ac{g}.in[0]") for g in range(c.tiles_i)}
    want |= {
        (f"b{m}.out[0]", f"bc{m}.in[0]")
        for m in range(math.ceil(c.tiles_j / lay.lanes_per_memtile))
    }
    for g in range(c.tiles_i):
        for j in range(c.tiles_j):
            t = g * c.tiles_j + j
            m, lane = divmod(j, lay.lanes_per_memtile)
            want |= {
                (f"ac{g}.out[0]", f"tile{t}.in[1]"),
                (f"bc{m}.out[{lane}]", f"tile{t}.in[0]"),
                (f"tile{t}.out[0]", f"cr{t}.in[0]"),
            }
    pairs, depths = _connections(d.files["src/graph.h"])
    assert pairs == want
    assert depths == {(f"tile{t}.out[0]", f"cr{t}.in[0]"): b.mr * b.nr for t in range(c.tiles)}



def _swap_links(mg, a: str, b: str):
    """``mg`` with the links out of PLIOs ``a`` and ``b`` exchanged (each now feeds the other's tiles)."""
    swap = {a: b, b: a}
    links = tuple(
        dataclasses.replace(x, src=dataclasses.replace(x.src, owner=swap[x.src.owner]))
        if x.src.owner in swap
        else x
        for x in mg.links
    )
    return dataclasses.replace(mg, links=links)


def test_the_movers_harnesses_and_data_files_read_the_ports_of_the_mapped_graph():
    """The PL-memory design's project ports against a hand list (Ar of group g, stream s; Br and Cr of
    lane j; the movers' order), and the project follows its mapped graph: with the links of PLIOs
    br0 and br1 exchanged in the lowering, the mover streams lane 1's panels into br0."""
    from aieflow.gemm.emit import project_files, project_ports

    d = aieflow.gemm(256, 256, 2048, dtype="int8", device="vck190", tiles=6, design="best")
    p = d.plan
    c = p.config
    # every field below takes two values
    assert c.tiles_i > 1 and c.tiles_j > 1 and c.ar_streams == 2
    ports = project_ports(p, lower(p))
    assert [(x.var, x.port, x.file, x.group, x.stream) for x in ports.ar] == [
        (f"ar{g}_{s}", f"ar{g}_{s}", f"data/ar{g}_{s}.txt", g, s)
        for g in range(c.tiles_i)
        for s in range(2)
    ]
    assert [(x.var, x.lane) for x in ports.br] == [(f"br{j}", j) for j in range(c.tiles_j)]
    assert ports.gbr == ()
    assert [(x.var, x.group, x.lane) for x in ports.cr] == [
        (f"cr{g * c.tiles_j + j}", g, j) for g in range(c.tiles_i) for j in range(c.tiles_j)
    ]
    assert ports.tiles == tuple(f"tile{t}" for t in range(c.tiles))
    mover = d.files["pl/gemm_mover.cpp"]
    assert "send_br(Bc, step * TILES_J + 0, br0);" in mover
    assert f"send_ar(Ac, {c.tiles_i - 1}, 1, round, p, ar{c.tiles_i - 1}_1);" in mover
    swapped = _swap_links(lower(p), "br0", "br1")
    swapped.check()
    moved = project_ports(p, swapped)
    assert [(x.var, x.lane) for x in moved.br][:2] == [("br0", 1), ("br1", 0)]
    files = project_files(p, d.estimate(), False, swapped)
    assert "send_br(Bc, step * TILES_J + 1, br0);" in files["pl/gemm_mover.cpp"]
    assert "send_br(Bc, step * TILES_J + 0, br1);" in files["pl/gemm_mover.cpp"]
    assert "adf::connect(br0.out[0], tile1.in[0])" in files["src/graph.h"]


@pytest.mark.parametrize(
    ("device", "dtype", "tiles"), [("vek280", "int8", 8), ("vek385", "bf16", 6)]
)
def test_the_memory_tile_project_reads_its_ports_from_the_mapped_graph(device, dtype, tiles):
    """The memory-tile design: a<g> feeds group g's tiles (through Ac g), b<m> holds the L4 lanes
    m * lanes_per_memtile .. of its read ports, Cr as tile t's; ml_mover.cpp sends exactly those."""
    from aieflow.gemm.emit import project_ports

    d = aieflow.gemm(256, 256, 2048, dtype=dtype, device=device, tiles=tiles, design="best")
    c, lay = d.plan.config, d.plan.memtiles
    ports = project_ports(d.plan, lower(d.plan))
    per = lay.lanes_per_memtile
    assert [(x.var, x.group) for x in ports.ar] == [(f"a{g}", g) for g in range(c.tiles_i)]
    assert [(x.var, x.lanes) for x in ports.br] == [
        (f"b{m}", tuple(range(m * per, min(c.tiles_j, (m + 1) * per))))
        for m in range(math.ceil(c.tiles_j / per))
    ]
    assert [(x.var, x.group, x.lane) for x in ports.cr] == [
        (f"cr{g * c.tiles_j + j}", g, j) for g in range(c.tiles_i) for j in range(c.tiles_j)
    ]
    mover = d.files["pl/gemm_mover.cpp"]
    sends = re.findall(r"send_lane\(B, n, k, jc, pc, (\d+), out, (\w+)\);", mover)
    assert sends == [(str(j), x.var) for x in ports.br for j in x.lanes]
    assert re.findall(r"send_ac\(A, m, k, ic, pc, (\d+), (\w+)\);", mover) == [
        (str(g), f"a{g}") for g in range(c.tiles_i)
    ]
