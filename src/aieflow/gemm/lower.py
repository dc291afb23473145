"""The GEMM designs lowered into the mapped graph (``mapped/ir.py``; issue 17, migration step 5).

One :class:`~aieflow.mapped.ir.Kernel` per tile (``gemm_tile``) on the tile the one placer gives it
(``emit.place`` / ``tile_cells``), and what ``graph.h`` connects to it:

- **PL-memory design (VCK190):** Ar over ``ar_streams`` input PLIOs per tile group (``ar<g>_<s>``,
  stream links, one PLIO multicast to the group's tiles), Br per L4 lane into the tile's buffer port
  0 (an input PLIO ``br<j>``, or with ``br_transfer: gmio`` an input GMIO, ``Plio.gmio``, read from
  DDR by the interface tile's DMA: a ``gmio`` link), Cr out of the tile's stream port to an output
  PLIO ``cr<t>``;
- **memory-tile design (AIE-ML / v2):** a PLIO into each Ac memory tile (``a<g>`` -> shared buffer
  ``ac<g>``, read as a stream multicast to the group's tiles) and each Bc memory tile (``b<b>`` ->
  ``bc<b>``, one read port per L4 lane it holds, into the lane's tiles' buffer port 0), Cr as above;
- the PL movers as :class:`~aieflow.mapped.ir.PLKernel`\\ s: ``gemm_mover`` writing every input
  PLIO, ``gemm_collect`` reading every Cr PLIO (``system.cfg``'s ``stream_connect`` lines).

With ``costed`` the lowering is tile 0's alone (the tiles are identical and independent, as the
chain's replicas are when its estimate lowers copy 0) and attaches the stage costs of one graph
iteration, every tile's (``gemm/perf.py``'s
cycle model, in ns): the PL-memory design's graph iteration is one L4 step (the Br copy into the
tile, stage ``br``, then the tile's rounds, stage ``tiles``: its micro-kernels, whose Ar stream and
Cr write-back run inside the round, so the Ar and Cr PLIOs belong to that stage).  ``later_pc``
costs a round of a block with pc > 0 (the write-back reads Cr first).  :func:`block_cycles`
simulates ``l4_steps`` iterations of that stage graph (``mapped/estimate.stage_graph``, the one
simulation engine) for one (jc, pc, ic) block; ``perf.estimate`` sums the blocks.  The memory-tile
design's graph iteration is one block (:func:`memtile_costs`: the Ac / Bc loads into the memory
tiles, the Br DMA into the tiles, the rounds with the C collection), and :func:`memtile_cycles`
runs every block, in loop order, through its stage graph in one simulation.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import lru_cache

from ..mapped.cache import memo
from ..mapped.estimate import StageGraph, stage_graph, to_pipeline
from ..mapped.estimate import resources as mapped_resources
from ..mapped.ir import Cost, Kernel, Link, MappedGraph, Plio, PLKernel, Port, SharedBuffer
from ..mapped.tiling import NdTiling, Traversal
from ..perf import movement as mv
from ..perf.simulate import run_pipeline
from .emit import tile_cells
from .perf import PLIO_BITS, br_copy_cycles, microkernel_cycles, round_cycles
from .plan import GemmPlan

NODE = "gemm"  # the IR node every tile computes a part of
KERNEL_CLASS = "gemm_tile"
KERNEL_SOURCE = "kernels/gemm_tile.cc"
# ``HLS PIPELINE II = 1`` on the movers' inner loops (templates/gemm/gemm_pl.h, ml_mover.cpp.j2);
# their pipeline depth is not modelled (0): nothing reads it for the GEMM yet.
MOVER_II = 1
# The PL kernels that read A from DDR (and write the input PLIOs) and, for a streamed Dense layer,
# write Y to DDR: a segmented design's cut reads and writes DDR through them (``gemm/segmented.py``).
MOVER = "gemm_mover"
EPILOGUE = "dense_epilogue"


@dataclass(frozen=True)
class _Io:
    """One end the lowering builds its PLIOs from (its own helper: the project files read the
    mapped graph, ``emit.project_ports``)."""

    var: str
    group: int = 0  # tile group (L5 lane)
    lane: int = 0  # L4 lane
    stream: int = 0  # Ar stream of the tile
    lanes: tuple[int, ...] = ()  # memory-tile design: the L4 lanes a Bc memory tile holds


@dataclass(frozen=True)
class _Tile:
    var: str
    col: int
    row: int
    br: str
    ar: tuple[str, ...]
    cr: str


def _ports(plan: GemmPlan, placed: bool = True) -> tuple[list[_Io], list[_Io], list[_Io], list[_Tile]]:
    """PLIO ports and tiles: Ar per (group, stream), Br per L4 lane, Cr and a kernel per tile,
    the tiles where ``emit.place`` puts them (``placed``: see ``emit.tile_cells``)."""
    c = plan.config
    cells = tile_cells(plan, placed=placed)
    ar = [_Io(f"ar{g}_{s}", group=g, stream=s) for g in range(c.tiles_i) for s in range(c.ar_streams)]
    br = [_Io(f"br{j}", lane=j) for j in range(c.tiles_j)]
    cr, tiles = [], []
    for g in range(c.tiles_i):
        for j in range(c.tiles_j):
            t = g * c.tiles_j + j
            cr.append(_Io(f"cr{t}", group=g, lane=j))
            tiles.append(_Tile(f"tile{t}", *cells[t], f"br{j}",
                               tuple(f"ar{g}_{s}" for s in range(c.ar_streams)), f"cr{t}"))
    return ar, br, cr, tiles


def _memtile_ports(plan: GemmPlan, placed: bool = True) -> tuple[list[_Io], list[_Io], list[_Io], list[_Tile]]:
    """AIE-ML design: PLIO a<g> into the Ac memory tile of group g, b<b> into Bc memory tile b (its
    lanes), Cr and a kernel per tile, the tiles where ``emit.place`` puts them."""
    c, lay = plan.config, plan.memtiles
    assert lay is not None
    cells = tile_cells(plan, placed=placed)
    ar = [_Io(f"a{g}", group=g) for g in range(c.tiles_i)]
    br, first = [], 0
    for b, count in enumerate(lay.lanes(c.tiles_j)):
        br.append(_Io(f"b{b}", lane=b, lanes=tuple(range(first, first + count))))
        first += count
    cr, tiles = [], []
    for g in range(c.tiles_i):
        for j in range(c.tiles_j):
            t = g * c.tiles_j + j
            b, jl = divmod(j, lay.lanes_per_memtile)
            cr.append(_Io(f"cr{t}", group=g, lane=j))
            tiles.append(_Tile(f"tile{t}", *cells[t], f"bc{b}.out[{jl}]", (f"ac{g}.out[0]",), f"cr{t}"))
    return ar, br, cr, tiles



def _tile_kernel(tl, in_sizes: tuple, c, cost=None) -> Kernel:
    """One ``gemm_tile`` kernel on its placed tile (``in_sizes``: its input ports' buffer elements,
    None for a stream); Br's port single-buffered when the config says so (``br_buffers: 1``)."""
    single = (("in", 0),) if c.br_buffers == 1 else ()
    return Kernel(tl.var, NODE, KERNEL_CLASS, (), KERNEL_SOURCE, (tl.col, tl.row), in_sizes, (None,),
                  single=single, cost=cost, function=True)


def _cr_link(plan: GemmPlan, tl) -> Link:
    """Cr out of the tile's stream port to its PLIO; with the overlapped write-back through a FIFO of
    one whole Cr (``plan.cr_words`` 32-bit values, ``adf::fifo_depth``): the tile never waits for
    the PL."""
    depth = 0 if plan.config.writeback == "serial" else plan.cr_words
    return Link("stream", Port(tl.var, "out", 0), Port(tl.cr, "in", 0), fifo_depth=depth)

# A GMIO Br port's bandwidth request in MB/s (64-byte bursts): UG1079's example figure
# ("Programming Model for AI Engine-DDR Memory Connection"), as docs/gemm.md says.
GMIO_MBPS = 1000


def _plio(var: str, direction: str, cost: Cost | None, gmio: bool = False) -> Plio:
    return Plio(var, direction, PLIO_BITS, f"data/{var}.txt", cost=cost, gmio=gmio, mbps=GMIO_MBPS if gmio else 0)


def _ns(cycles: float, plan: GemmPlan) -> float:
    return mv.cycles_to_ns(cycles, plan.device)


def stage_costs(plan: GemmPlan, later_pc: bool = False) -> tuple[Cost, Cost]:
    """(the Br copy, the tiles' rounds) of one L4 step of the PL-memory design (``gemm/perf.py``)."""
    t, b, cfg = plan.dtype, plan.blocks, plan.config
    mk = microkernel_cycles(t, b.kc, plan.device, cfg.ar_streams, b.mr, b.nr)
    br = br_copy_cycles(plan.br_bytes)
    compute = plan.rounds * round_cycles(plan, mk, later_pc)
    macs = plan.rounds * b.mr * b.nr * b.kc * plan.tiles
    peak = plan.device.generation.macs_per_cycle[t.pair]
    return (
        Cost("br", "dma", "memory", _ns(br, plan), cycles=br),
        Cost(
            "tiles",
            "kernel",
            mk.bound,
            _ns(compute, plan),
            tiles=plan.tiles,
            cycles=compute,
            macs=macs,
            peak_macs_per_cycle=peak,
        ),
    )


def lower(
    plan: GemmPlan, *, placed: bool = True, costed: bool = False, later_pc: bool = False
) -> MappedGraph:
    """The mapped graph of ``plan`` (see the module docstring), built once per plan and arguments
    (``mapped/cache.memo``: the estimate, the resources and the report share it); ``placed``
    False: the tiles at the placement problem's staging, unsolved (``emit.tile_cells``); a costed
    lowering is never placed (the costs do not depend on the tiles' places)."""
    placed = placed and not costed
    return memo(
        plan,
        "gemm-lower",
        (placed, costed, later_pc),
        lambda: _lower(plan, placed, costed, later_pc),
    )


def resources(plan: GemmPlan) -> tuple[int, int]:
    """(compute tiles, memory tiles) of the design: ``mapped.estimate.resources`` of its mapped graph
    (unplaced: the counts do not depend on the tiles' places)."""
    return mapped_resources(lower(plan, placed=False), plan.device)


def _lower(plan: GemmPlan, placed: bool, costed: bool, later_pc: bool) -> MappedGraph:
    if plan.memtile:
        return _lower_memtile(plan, placed, memtile_costs(plan, later_pc) if costed else None)
    c = plan.config
    if costed:  # the tiles are identical and independent (as the chain's replicas): tile 0 carries the stage
        ar = [_Io(f"ar0_{s}", stream=s) for s in range(c.ar_streams)]
        br, cr = [_Io("br0")], [_Io("cr0")]
        tiles = [_Tile("tile0", 0, 0, "br0", tuple(p.var for p in ar), "cr0")]
    else:
        ar, br, cr, tiles = _ports(plan, placed)
    br_cost, tile_cost = stage_costs(plan, later_pc) if costed else (None, None)
    gmio = c.br_transfer == "gmio"
    plios = [_plio(p.var, "in", tile_cost) for p in ar]
    plios += [_plio(p.var, "in", br_cost, gmio=gmio) for p in br]
    plios += [_plio(p.var, "out", tile_cost) for p in cr]
    kernels, links = [], []
    for tl in tiles:
        sizes = (b := plan.blocks).kc * b.nr
        kernels.append(_tile_kernel(tl, (sizes, *(None,) * len(tl.ar)), c, tile_cost))
        links.append(Link("gmio" if gmio else "plio", Port(tl.br, "out", 0), Port(tl.var, "in", 0)))
        links += [
            Link("stream", Port(a, "out", 0), Port(tl.var, "in", 1 + s))
            for s, a in enumerate(tl.ar)
        ]
        links.append(_cr_link(plan, tl))
    movers = (
        ()
        if costed
        else _movers(
            plan, [p.var for p in ar] + ([] if gmio else [p.var for p in br]), [p.var for p in cr]
        )
    )
    return MappedGraph(tuple(kernels), (), tuple(plios), tuple(links), pl_kernels=movers)


def _movers(plan: GemmPlan, ins: list[str], outs: list[str]) -> tuple[PLKernel, ...]:
    """``gemm_mover`` (writes the input PLIOs) and ``gemm_collect`` (reads the Cr PLIOs); items: the
    128-bit words each moves per graph iteration, one call per iteration."""
    words = PLIO_BITS // 8
    b, t = plan.blocks, plan.dtype
    if plan.memtile:
        lay = plan.memtiles
        assert lay is not None
        in_bytes = plan.config.tiles_i * lay.ac_bytes + plan.config.tiles_j * lay.lane_bytes
        cr_per_tile = plan.l4_steps * plan.rounds
    else:
        in_bytes = plan.config.tiles_i * plan.rounds * b.mr * b.kc * t.bytes
        in_bytes += 0 if plan.config.br_transfer == "gmio" else plan.config.tiles_j * plan.br_bytes
        cr_per_tile = plan.rounds
    cr_bytes = plan.tiles * cr_per_tile * plan.cr_words * 4
    return (
        PLKernel(
            MOVER,
            "pl/gemm_mover.cpp",
            (),
            tuple((v, v) for v in ins),
            MOVER_II,
            0,
            math.ceil(in_bytes / words),
            1,
        ),
        PLKernel(
            "gemm_collect",
            "pl/gemm_collect.cpp",
            tuple((v, v) for v in outs),
            (),
            MOVER_II,
            0,
            math.ceil(cr_bytes / words),
            1,
        ),
    )


def memtile_costs(plan: GemmPlan, later_pc: bool) -> dict[str, Cost]:
    """The memory-tile design's stages of one graph iteration (one (jc, pc, ic) block; pc > 0 with
    ``later_pc``), from ``gemm/perf_memtile.stage_cycles``: ``ddr_a`` (the mover's Ac into the Ac
    memory tiles: their PLIOs and write ports), ``ddr_b`` (the Br panels into the Bc memory tiles),
    ``br`` (the Bc memory tiles' read ports: each lane's panels into its tiles by DMA) and
    ``tiles`` (the tiles' rounds, whose Ar stream from the Ac memory tile runs inside the
    micro-kernel, and the C collection, which drains the Cr streams as the rounds write them: the
    Cr PLIOs belong to it)."""
    from .perf_memtile import stage_cycles

    sc, b = stage_cycles(plan, later_pc), plan.blocks
    peak = plan.device.generation.macs_per_cycle[plan.dtype.pair]
    macs = plan.l4_steps * plan.rounds * b.mr * b.nr * b.kc * plan.tiles
    tiles_bound = "memory" if sc.c_write > sc.compute else sc.mk.bound
    return {
        "ddr_a": Cost("ddr_a", "plio", "memory", _ns(sc.ddr_a, plan), cycles=sc.ddr_a),
        "ddr_b": Cost("ddr_b", "plio", "memory", _ns(sc.ddr_b, plan), cycles=sc.ddr_b),
        "br": Cost("br", "memtile", "memory", _ns(sc.br, plan), cycles=sc.br),
        "tiles": Cost("tiles", "kernel", tiles_bound, _ns(sc.tiles, plan), tiles=plan.tiles,
                      cycles=sc.tiles, macs=macs, peak_macs_per_cycle=peak),
    }


def _lower_memtile(plan: GemmPlan, placed: bool, costs: dict[str, Cost] | None) -> MappedGraph:
    c, lay, b, t = plan.config, plan.memtiles, plan.blocks, plan.dtype
    assert lay is not None
    ar, br, cr, tiles = _memtile_ports(plan, placed)
    if costs:  # the tiles are identical and independent: tile 0, its Ac and Bc carry the stages
        ar, br, cr, tiles = ar[:1], br[:1], cr[:1], tiles[:1]
    ks, ns = t.mmul[1], t.mmul[2]
    ctype = t.aie_type  # what the PLIOs and memory tiles carry (bf16 as bfloat16)
    cost = costs or {}
    plios = [_plio(p.var, "in", cost.get("ddr_a")) for p in ar]
    plios += [_plio(p.var, "in", cost.get("ddr_b")) for p in br]
    plios += [_plio(p.var, "out", cost.get("tiles")) for p in cr]
    buffers, links = [], []
    mc_tile, steps = plan.mc_tile, plan.l4_steps
    for p in ar:  # [MC_TILE][KC], read as (k step, round) tiles of KS x MR, L4_STEPS times
        dims = (b.kc, mc_tile)
        read = NdTiling(
            dims,
            (ks, b.mr),
            (0, 0),
            (Traversal(0, ks, b.kc // ks), Traversal(1, b.mr, plan.rounds)),
            repetition=steps,
        )
        buffers.append(
            SharedBuffer(
                f"ac{p.group}",
                ctype,
                dims,
                (NdTiling(dims, dims, (0, 0)),),
                (read,),
                f"Ac of group {p.group}",
                write_cost=cost.get("ddr_a"),
            )
        )
        links.append(Link("memtile", Port(p.var, "out", 0), Port(f"ac{p.group}", "in", 0)))
    for p in br:  # [lane][step][KC][NR], read per lane as (column block, k step, step) tiles
        dims = (b.nr, b.kc, steps, len(p.lanes))
        reads = tuple(
            NdTiling(
                dims,
                (ns, ks, 1, 1),
                (0, 0, 0, i),
                (
                    Traversal(0, ns, b.nr // ns),
                    Traversal(1, ks, b.kc // ks),
                    Traversal(2, 1, steps),
                ),
            )
            for i in range(len(p.lanes))
        )
        buffers.append(
            SharedBuffer(
                f"bc{p.lane}",
                ctype,
                dims,
                (NdTiling(dims, dims, (0, 0, 0, 0)),),
                reads,
                f"Br panels of L4 lanes {', '.join(map(str, p.lanes))}",
                write_cost=cost.get("ddr_b"),
                read_cost=cost.get("br"),
            )
        )
        links.append(Link("memtile", Port(p.var, "out", 0), Port(f"bc{p.lane}", "in", 0)))
    kernels = []
    lane_elems = lay.lane_bytes // t.bytes
    for tl in tiles:
        kernels.append(_tile_kernel(tl, (lane_elems, None), c, cost.get("tiles")))
        bc, port = tl.br.split(".out[")
        links.append(Link("memtile", Port(bc, "out", int(port.rstrip("]"))), Port(tl.var, "in", 0)))
        links.append(Link("memtile", Port(tl.ar[0].split(".")[0], "out", 0), Port(tl.var, "in", 1)))
        links.append(_cr_link(plan, tl))
    # costed: the movers' work is the PLIOs' stages (their DDR reads and the C collection's writes)
    movers = () if costs else _movers(plan, [p.var for p in ar + br], [p.var for p in cr])
    return MappedGraph(
        tuple(kernels), tuple(buffers), tuple(plios), tuple(links), pl_kernels=movers
    )


def memtile_cycles(plan: GemmPlan) -> tuple[float, float]:
    """(AIE cycles of the whole memory-tile GEMM, of its fill: before the first block's rounds
    start): every (jc, pc, ic) block, in loop order, one graph iteration of the costed mapped
    graph's stage graph (a block with pc > 0 in its ``later_pc`` costs), simulated as one run: the
    first block's loads fill the memory tiles, later blocks' loads overlap the rounds through their
    ping-pong buffers."""
    from .perf_memtile import block_kinds

    keys = {}
    for later in (False, True):
        sg = stage_graph(lower(plan, costed=True, later_pc=later))
        keys[later] = (sg.stages, tuple(sg.after.items()), sg.sink, sg.single)
    done, first_ns = _memtile_run(keys[False], keys[True], block_kinds(plan))
    hz = plan.device.clock_hz / 1e9
    # to 1e-6 cycles: the ns round trip must not split plans whose cycles are equal (the search's ties)
    return round(done * hz, 6), round(first_ns * hz, 6)


@lru_cache(maxsize=4096)
def _memtile_run(first: tuple, later: tuple, kinds: tuple) -> tuple[float, float]:
    """(when the last block completes, when the first block's rounds start), in ns: the one
    simulation engine's run of the blocks ``kinds`` lists, kept per stage graphs and block order."""
    pipes = {k: to_pipeline(StageGraph(st, dict(after), sink, single))
             for k, (st, after, sink, single) in ((False, first), (True, later))}
    phases = [(pipes[k], n) for k, n in kinds if n]
    blocks = sum(n for _, n in phases)
    if blocks < 2:  # the engine measures an interval: one more block, which cannot move the first
        phases.append((pipes[kinds[-1][0]], 1))
    sim = run_pipeline(pipes[False], phases=phases)
    sink = next(s for s in pipes[False].stages if s.name == pipes[False].sink)
    return sim.completions_ns[blocks - 1], sim.completions_ns[0] - sink.occupancy_ns


def block_cycles(plan: GemmPlan, later_pc: bool) -> float:
    """AIE cycles of one (jc, pc, ic) block of the PL-memory design: ``l4_steps`` graph iterations of
    the costed mapped graph's stage graph, simulated (the Br copy single- or ping-pong-buffered as
    the tile's Br port is)."""
    sg = stage_graph(lower(plan, costed=True, later_pc=later_pc))
    key = (sg.stages, tuple(sg.after.items()), sg.sink, sg.single)
    # to 1e-6 cycles: the ns round trip must not split plans whose cycles are equal (the search's ties)
    return round(_completion_ns(key, plan.l4_steps) * plan.device.clock_hz / 1e9, 6)


@lru_cache(maxsize=4096)
def _completion_ns(key: tuple, steps: int) -> float:
    """When the ``steps``-th graph iteration of a stage graph (given as ``block_cycles``' key)
    completes: the one simulation engine's run, kept per stage graph (the search's candidates
    share many)."""
    stages, after, sink, single = key
    pipe = to_pipeline(StageGraph(stages, dict(after), sink, single))
    return run_pipeline(pipe, max(2, steps)).completions_ns[steps - 1]


# ``HLS PIPELINE II = 1`` on the epilogue's per-element loop (templates/gemm/dense_epilogue.cpp)
EPILOGUE_II = 1


def lower_streamed(plan) -> MappedGraph:
    """A streamed-weights Dense layer (``gemm/dense.StreamedDensePlan``): its GEMM's mapped graph
    plus the requantising epilogue as a PL kernel (``dense_epilogue``: no stream port, it reads C
    and the bias from DDR and writes Y there; one element per cycle, ``batch x out_features`` per
    call, one call per design call)."""
    g = lower(plan.gemm)
    epi = PLKernel(
        EPILOGUE,
        "pl/dense_epilogue.cpp",
        (),
        (),
        EPILOGUE_II,
        0,
        plan.batch * plan.out_features,
        1,
    )
    return replace(g, pl_kernels=(*g.pl_kernels, epi))


def streamed_lowering(plan) -> MappedGraph:
    """:func:`lower_streamed` once per plan (``mapped/cache.memo``: the resources and the project share it)."""
    return memo(plan, "streamed-lower", (), lambda: lower_streamed(plan))


def streamed_resources(plan) -> tuple[int, int]:
    """(compute tiles, memory tiles) of a streamed-weights Dense layer, counted on its mapped graph."""
    return mapped_resources(streamed_lowering(plan), plan.gemm.device)
