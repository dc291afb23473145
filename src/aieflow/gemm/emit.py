"""Render a GEMM plan into its Vitis project: ``{relative path: text}``.

Static sources (the AI Engine micro-kernel, the PL helpers, the five loops) are copied from
``templates/gemm/``; everything else that depends on the plan (configuration, PL top functions,
harness) is rendered from its ``.j2`` template, except ``src/graph.h`` and ``system.cfg``: those are
written from the design's mapped graph (``gemm/lower.py``; the one ADF graph writer,
``mapped/adf.py``, and the mapped graph's PL kernels).  The problem size (m, n, k) appears
only in the README, the host's defaults and ``data/``: the compiled sources do not depend on it, so
the x86 builds of designs that differ only in m, n, k are shared.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources

from .. import __version__
from ..mapped.adf import graph_header
from ..mapped.cache import memo
from ..mapped.ir import MappedGraph
from ..mapped.place import Block, Grid, Placement, Problem, solve
from ..names import Code
from ..templating import environment
from ..vitis import SHIM_DIR, ap_types_finder, compare_script, shim_files
from .perf import GemmPerformance
from .plan import GemmPlan

GRAPH_CLASS = "GemmGraph"
GRAPH_VAR = "gemm_graph"

_ENV = environment("gemm")

STATIC = {"src/kernels/gemm_tile.h": "gemm_tile.h", "pl/gemm_pl.h": "gemm_pl.h", "host/gemm_loops.h": "gemm_loops.h"}
RENDERED = {
    "src/gemm_config.h": "gemm_config.h.j2",
    "src/kernels/gemm_kernels.h": "gemm_kernels.h.j2",
    "src/kernels/gemm_tile.cc": "gemm_tile.cc.j2",
    "src/graph.cpp": "graph.cpp.j2",
    "pl/gemm_top.h": "gemm_top.h.j2",
    "pl/gemm_mover.cpp": "gemm_mover.cpp.j2",
    "pl/gemm_collect.cpp": "gemm_collect.cpp.j2",
    "host/host.cpp": "host.cpp.j2",
    "x86/harness.cpp": "x86_harness.cpp.j2",
    "x86/system.cpp": "x86_system.cpp.j2",
    "x86/gemm_csim.cpp": "gemm_csim.cpp.j2",
    "aie.cfg": "aie.cfg.j2",
    "Makefile": "Makefile.j2",
    "README.md": "README.md.j2",
}


@dataclass(frozen=True)
class Port:
    var: str
    group: int = 0  # tile group (L5 lane)
    lane: int = 0  # L4 lane
    stream: int = 0  # Ar stream of the tile
    lanes: tuple[int, ...] = ()  # memory-tile design: the L4 lanes a Bc memory tile holds


@dataclass(frozen=True)
class Tile:
    var: str
    col: int
    row: int
    br: str
    ar: tuple[str, ...]
    cr: str


GROUP = "gemm"  # the placement group of every tile


def place(plan: GemmPlan) -> Placement:
    """The one placer (``mapped/place.solve``, branch and bound) on the GEMM's tiles: one group
    of ``plan.tiles`` kernels filling whole columns of the array's height (tile t at column
    t // height, row t % height of the rectangle).  The tiles have no kernel-to-kernel link (Ar,
    Br and Cr each move between a tile and a PLIO or a memory tile, ``ports`` /
    ``memtile_ports``), so the problem has no edge and the group's origin is its one free choice;
    J (the start term and ``mu * r_top``) puts it at column 0, row 0, next to the interface row
    and, on AIE-ML, the memory tiles.  Built by hand: the lowering (``gemm/lower.py``) reads the
    placement, so it cannot stage the problem first.  Solved once per plan (``mapped/cache.memo``)."""
    dev = plan.device
    height = min(plan.tiles, dev.rows)
    block = Block(GROUP, -(-plan.tiles // height), height)
    grid = Grid(dev.columns, dev.rows, snake=dev.generation.cascade_serpentine)
    return memo(plan, "gemm-place", (), lambda: solve(Problem((block,), (), grid)))


def tile_cells(plan: GemmPlan, placement: Placement | None = None, *, placed: bool = True) -> list[tuple[int, int]]:
    """(column, row) of tile t = g * tiles_j + j, at ``placement`` (default: :func:`place`); with
    ``placed`` False the group's rectangle at the origin, unsolved (what the estimate and the
    resources read: neither depends on where the tiles are)."""
    if placed:
        r = (placement or place(plan)).rect(GROUP)
        col, row, height = r.column, r.row, r.height
    else:
        col, row, height = 0, 0, min(plan.tiles, plan.device.rows)
    return [(col + t // height, row + t % height) for t in range(plan.tiles)]


def ports(plan: GemmPlan, placed: bool = True) -> tuple[list[Port], list[Port], list[Port], list[Tile]]:
    """PLIO ports and tiles: Ar per (group, stream), Br per L4 lane, Cr and a kernel per tile,
    the tiles where :func:`place` puts them (``placed``: see :func:`tile_cells`)."""
    c = plan.config
    cells = tile_cells(plan, placed=placed)
    ar = [Port(f"ar{g}_{s}", group=g, stream=s) for g in range(c.tiles_i) for s in range(c.ar_streams)]
    br = [Port(f"br{j}", lane=j) for j in range(c.tiles_j)]
    cr, tiles = [], []
    for g in range(c.tiles_i):
        for j in range(c.tiles_j):
            t = g * c.tiles_j + j
            cr.append(Port(f"cr{t}", group=g, lane=j))
            tiles.append(Tile(f"tile{t}", *cells[t], f"br{j}",
                              tuple(f"ar{g}_{s}" for s in range(c.ar_streams)), f"cr{t}"))
    return ar, br, cr, tiles


def memtile_ports(plan: GemmPlan, placed: bool = True) -> tuple[list[Port], list[Port], list[Port], list[Tile]]:
    """AIE-ML design: PLIO a<g> into the Ac memory tile of group g, b<b> into Bc memory tile b (its
    lanes), Cr and a kernel per tile, the tiles where :func:`place` puts them (``placed``: see
    :func:`tile_cells`)."""
    c, lay = plan.config, plan.memtiles
    assert lay is not None
    cells = tile_cells(plan, placed=placed)
    ar = [Port(f"a{g}", group=g) for g in range(c.tiles_i)]
    br, first = [], 0
    for b, count in enumerate(lay.lanes(c.tiles_j)):
        br.append(Port(f"b{b}", lane=b, lanes=tuple(range(first, first + count))))
        first += count
    cr, tiles = [], []
    for g in range(c.tiles_i):
        for j in range(c.tiles_j):
            t = g * c.tiles_j + j
            b, jl = divmod(j, lay.lanes_per_memtile)
            cr.append(Port(f"cr{t}", group=g, lane=j))
            tiles.append(Tile(f"tile{t}", *cells[t], f"bc{b}.out[{jl}]", (f"ac{g}.out[0]",), f"cr{t}"))
    return ar, br, cr, tiles


# The memory-tile design (AIE-ML) replaces these templates; the rest are shared.
MEMTILE = {
    "src/kernels/gemm_kernels.h": "ml_kernels.h.j2",
    "src/kernels/gemm_tile.cc": "ml_tile.cc.j2",
    "pl/gemm_top.h": "ml_top.h.j2",
    "pl/gemm_mover.cpp": "ml_mover.cpp.j2",
    "x86/harness.cpp": "ml_harness.cpp.j2",
    "README.md": "ml_README.md.j2",
}


def project_files(plan: GemmPlan, perf: GemmPerformance, data: bool) -> dict[str, str]:
    from .lower import lower  # lower.py reads this module's ports

    ctx = _context(plan, perf, data)
    templates = {**RENDERED, **MEMTILE} if plan.memtile else RENDERED
    files = {rel: _ENV.get_template(tpl).render(**ctx) for rel, tpl in templates.items()}
    mapped = lower(plan)
    files["src/graph.h"] = graph_h(plan, mapped)
    files["system.cfg"] = system_cfg(plan, mapped)
    base = resources.files("aieflow").joinpath("templates/gemm")
    for rel, name in STATIC.items():
        files[rel] = base.joinpath(name).read_text()
    files.update(shim_files())  # make shim-run needs nothing outside the project
    files["scripts/find_ap_types.py"] = ap_types_finder()  # make system-run: where Xilinx's ap_types are
    files["scripts/compare.py"] = compare_script()  # make x86sim / aiesim: Cr against data/golden_cr*.txt
    return files


def graph_h(plan: GemmPlan, mapped: MappedGraph) -> str:
    """``src/graph.h``: the one mapped-graph writer (``mapped/adf.py``) on the design's lowering
    (``gemm/lower.py``), its kernels declared by ``kernels/gemm_kernels.h``."""
    return graph_header(mapped, GRAPH_CLASS, includes=("gemm_config.h", "kernels/gemm_kernels.h"),
                        version=__version__, device=plan.device, title=_graph_title(plan))


def _graph_title(plan: GemmPlan) -> str:
    c = plan.config
    head = f"ADF graph of the {plan.design} GotoBLAS GEMM: {c.tiles} tiles ({c.tiles_j} share L4 x {c.tiles_i} share L5)."
    if plan.memtile:
        lay = plan.memtiles
        assert lay is not None
        return "\n".join((
            head.replace(f"the {plan.design} ", "the memory-tile ").replace("ADF graph", "ADF graph (UG1603)"),
            "One graph iteration = one (jc, pc, ic) block.  The memory tiles are the L2 (no PL memories):",
            "  a<g> -> ac<g> : Ac share of tile group g (MC_TILE x KC), written row-major by the PL mover; read out as",
            "                  Ar micro-panels (mr x KS per k step) L4_STEPS times, over the single input stream of each",
            f"                  of the {c.tiles_j} tile(s) of the group (multicast)",
            f"  b<b> -> bc<b> : Br panels of up to {lay.lanes_per_memtile} L4 lanes (row-major kc x nr each); read port l gives",
            "                  the panels of lane l in the mmul layout, by DMA into the local memory of its tile(s)",
            "  cr<t>         : Cr of tile t to the PL write-back (stream FIFO of one whole Cr)",
            "Nothing here was built with aiecompiler (see README.md).",
        ))
    br = "single buffer: copy, then compute" if c.br_buffers == 1 else "ping-pong: the next Br loads during this step"
    via = "GMIO from DDR" if c.br_transfer == "gmio" else "PLIO"
    return "\n".join((
        head.replace("ADF graph", "ADF graph (UG1079)"),
        f"  ar<g>_<s> : Ar micro-panels of tile group g, stream s, multicast to the {c.tiles_j} tiles of the group",
        f"  br<j>     : Br micro-panel of L4 lane j by {via} ({br}), broadcast to the {c.tiles_i} tile(s) of lane j",
        "  cr<t>     : Cr of tile t to the PL write-back",
        "One graph iteration = one L4 step: every tile takes one Br and runs ROUNDS micro-kernels.",
    ))


def system_cfg(plan: GemmPlan, mapped: MappedGraph) -> str:
    """``system.cfg``: every PL kernel of the mapped graph (the movers, a streamed Dense layer's
    epilogue) and its ``stream_connect`` lines (``MappedGraph.stream_connects``), at the PL clock."""
    return _ENV.get_template("system.cfg.j2").render(
        version=__version__, device=plan.device, pl_kernels=mapped.pl_kernels,
        connects=mapped.stream_connects(), pl_clock_hz=int(plan.device.pl_clock_hz))


def streamed_dense_system(plan: GemmPlan, perf: GemmPerformance, data: bool, x_c_type: str,
                          mapped: MappedGraph) -> dict[str, str]:
    """The Makefile, system.cfg and x86 system run of a streamed Dense layer's project: the GEMM's,
    with the layer's ``dense_epilogue`` PL kernel compiled, linked (``nk``; it has no streams: C, bias
    and Y are DDR buffers), its host ``host/dense_host.cpp`` as ``host.exe`` and ``make system-run``
    running the host's steps (X -> A / B, five loops, epilogue) with the three PL kernels as C
    simulation; ``x_c_type``: the C type of the layer's input codes (``data/X.bin``); ``mapped``:
    the layer's mapped graph (``lower.lower_streamed``: the GEMM's and the epilogue)."""
    ctx = {**_context(plan, perf, data), "epilogue": True, "x_c_type": Code(x_c_type)}
    ctx["golden_cr"] = True  # data/ always
    templates = {**RENDERED, **MEMTILE} if plan.memtile else RENDERED
    rels = ("Makefile", "x86/system.cpp", "x86/gemm_csim.cpp", "README.md")
    return {**{rel: _ENV.get_template(templates[rel]).render(**ctx) for rel in rels},
            "system.cfg": system_cfg(plan, mapped)}


def _context(plan: GemmPlan, perf: GemmPerformance, data: bool) -> dict:
    ar, br, cr, tiles = memtile_ports(plan) if plan.memtile else ports(plan)
    gmio = plan.config.br_transfer == "gmio"
    ctx = {
        "version": __version__, "design": plan.design, "device": plan.device, "t": plan.dtype, "out": plan.output,
        "b": plan.blocks, "c": plan.config, "m": plan.m, "n": plan.n, "k": plan.k, "ar": ar, "cr": cr,
        # Br lanes: PL streams (``br``), or GMIO ports read from DDR (``gbr``, br_transfer gmio)
        "br": [] if gmio else br, "gbr": br if gmio else [],
        "tiles": tiles, "graph_class": GRAPH_CLASS, "graph_var": GRAPH_VAR, "perf": perf, "data": data,
        "br_bytes": plan.br_bytes, "pl_clock_hz": int(plan.device.pl_clock_hz),
        "platform_hint": plan.device.vitis_platform,
        "memtile": plan.memtile, "lay": plan.memtiles, "shim_dir": SHIM_DIR, "epilogue": False,
        # data/golden_cr*.txt are written (plio_data.golden_cr_files): the simulators' output is compared
        "golden_cr": data,
        # the element type the graph's PLIOs and memory tiles carry (bf16: bfloat16, the PL's a_t its bits)
        "aie_a": Code(plan.dtype.aie_type if plan.dtype.pl_holds_bits else "gemm_cfg::a_t"),
    }
    return ctx


def build_sources(files: dict[str, str]) -> dict[str, str]:
    """The files the x86 harness is built from (no README, host or problem-dependent data)."""
    keep = ("src/", "pl/", "x86/", "host/gemm_loops.h")
    return {rel: text for rel, text in files.items() if rel.startswith(keep) and not rel.startswith(f"{SHIM_DIR}/")}
