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


GROUP = "gemm"  # the placement group of every tile


def place(plan: GemmPlan) -> Placement:
    """The one placer (``mapped/place.solve``, branch and bound) on the GEMM's tiles: one group
    of ``plan.tiles`` kernels filling whole columns of the array's height (tile t at column
    t // height, row t % height of the rectangle).  The tiles have no kernel-to-kernel link (Ar,
    Br and Cr each move between a tile and a PLIO or a memory tile: ``gemm/lower.py``), so the
    problem has no edge and the group's origin is its one free choice; J (the start term and ``mu * r_top``) puts it at column 0, row 0, next to the interface row
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


@dataclass(frozen=True)
class ProjectPort:
    """A port of the design's mapped graph as the project files name it: ``var`` the PLIO / GMIO
    (the graph's member, ``Plio.var``), ``port`` the PL kernel's stream argument that drives or
    drains it (``PLKernel.outs`` / ``ins``; "" for a GMIO), ``file`` its data file (``Plio.file``);
    and what it feeds or drains, read from the links: ``group`` (L5 lane) and ``lane`` (L4 lane)
    of its tile(s), ``stream`` (the Ar stream: the tile's stream input ``1 + stream``) and, for a
    Bc memory tile, the L4 ``lanes`` of its read ports in order."""

    var: str
    port: str
    file: str
    group: int = 0
    lane: int = 0
    stream: int = 0
    lanes: tuple[int, ...] = ()


@dataclass(frozen=True)
class ProjectPorts:
    """What the movers, harnesses, host and data files connect (:func:`project_ports`): the Ar
    ports (Ar PLIOs, or the memory-tile design's Ac PLIOs), the Br PLIOs (the Bc PLIOs), the Br
    GMIOs (``br_transfer: gmio``), the Cr PLIOs and the tile kernels, in the movers' order."""

    ar: tuple[ProjectPort, ...]
    br: tuple[ProjectPort, ...]
    gbr: tuple[ProjectPort, ...]
    cr: tuple[ProjectPort, ...]
    tiles: tuple[str, ...]


def project_ports(plan: GemmPlan, mapped: MappedGraph) -> ProjectPorts:
    """The ports of ``mapped`` (``gemm/lower.py``: the design's lowering, the one description of
    them) for the project files: ``gemm_mover``'s outputs in order (Ar before Br), the input GMIOs,
    ``gemm_collect``'s inputs; tile t = the t-th ``gemm_tile`` kernel (group t // TILES_J, lane
    t % TILES_J).  A port feeding a tile's input 0 (directly or through a shared buffer's read port)
    carries Br, one feeding a stream input ``1 + s`` Ar stream s."""
    from .lower import KERNEL_CLASS, MOVER

    tiles = [k.var for k in mapped.kernels if k.cls == KERNEL_CLASS]
    index = {v: t for t, v in enumerate(tiles)}
    tj = plan.config.tiles_j
    links: dict[str, list] = {}
    for link in mapped.links:
        links.setdefault(link.src.owner, []).append(link)
    files = {p.var: p.file for p in mapped.plios}

    def fed(owner: str) -> list:
        """(source port index, tile, tile input) of every tile ``owner`` feeds, through a shared buffer too."""
        out = []
        for link in links.get(owner, []):
            if link.dst.owner in index:
                out.append((link.src.index, index[link.dst.owner], link.dst.index))
            else:
                out += fed(link.dst.owner)
        return out

    def port(var: str, pl_port: str) -> tuple[str, ProjectPort]:
        ends = fed(var)
        t, dst = ends[0][1], ends[0][2]
        lanes = ()
        buffers = [x.dst.owner for x in links[var] if x.dst.owner not in index]
        if buffers and dst == 0:  # a Bc memory tile: the lane of each read port
            reads = {i: tt % tj for i, tt, _ in ends}
            lanes = tuple(reads[i] for i in sorted(reads))
        p = ProjectPort(
            var,
            pl_port,
            files[var],
            group=t // tj,
            lane=t % tj,
            stream=max(dst - 1, 0),
            lanes=lanes,
        )
        return ("br" if dst == 0 else "ar"), p

    mover = next(k for k in mapped.pl_kernels if k.name == MOVER)
    collect = next(k for k in mapped.pl_kernels if k.name == "gemm_collect")
    ins = [port(plio, name) for name, plio in mover.outs]
    cr = []
    for name, plio in collect.ins:
        src = next(x.src.owner for x in mapped.links if x.dst.owner == plio)
        cr.append(
            ProjectPort(plio, name, files[plio], group=index[src] // tj, lane=index[src] % tj)
        )
    gbr = tuple(port(p.var, "")[1] for p in mapped.plios if p.gmio and p.direction == "in")
    ar, br = (tuple(p for kind, p in ins if kind == want) for want in ("ar", "br"))
    return ProjectPorts(ar, br, gbr, tuple(cr), tuple(tiles))


# The memory-tile design (AIE-ML) replaces these templates; the rest are shared.
MEMTILE = {
    "src/kernels/gemm_kernels.h": "ml_kernels.h.j2",
    "src/kernels/gemm_tile.cc": "ml_tile.cc.j2",
    "pl/gemm_top.h": "ml_top.h.j2",
    "pl/gemm_mover.cpp": "ml_mover.cpp.j2",
    "x86/harness.cpp": "ml_harness.cpp.j2",
    "README.md": "ml_README.md.j2",
}


def project_files(
    plan: GemmPlan, perf: GemmPerformance, data: bool, mapped: MappedGraph | None = None
) -> dict[str, str]:
    """Every project file but the data files; ``mapped``: the design's lowering (``lower.lower``,
    the default), which names the ports the movers, harnesses, host, graph and system.cfg connect."""
    from .lower import lower  # lower.py reads this module's placement

    mapped = mapped or lower(plan)
    ctx = _context(plan, perf, data, mapped)
    templates = {**RENDERED, **MEMTILE} if plan.memtile else RENDERED
    files = {rel: _ENV.get_template(tpl).render(**ctx) for rel, tpl in templates.items()}
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
    ctx = {**_context(plan, perf, data, mapped), "epilogue": True, "x_c_type": Code(x_c_type)}
    ctx["golden_cr"] = True  # data/ always
    templates = {**RENDERED, **MEMTILE} if plan.memtile else RENDERED
    rels = ("Makefile", "x86/system.cpp", "x86/gemm_csim.cpp", "README.md")
    return {**{rel: _ENV.get_template(templates[rel]).render(**ctx) for rel in rels},
            "system.cfg": system_cfg(plan, mapped)}


def _context(plan: GemmPlan, perf: GemmPerformance, data: bool, mapped: MappedGraph) -> dict:
    ports = project_ports(plan, mapped)
    ctx = {
        "version": __version__, "design": plan.design, "device": plan.device, "t": plan.dtype, "out": plan.output,
        "b": plan.blocks, "c": plan.config, "m": plan.m, "n": plan.n, "k": plan.k, "ar": ports.ar, "cr": ports.cr,
        # Br lanes: PL streams (``br``), or GMIO ports read from DDR (``gbr``, br_transfer gmio)
        "br": ports.br, "gbr": ports.gbr,
        "tiles": ports.tiles, "graph_class": GRAPH_CLASS, "graph_var": GRAPH_VAR, "perf": perf, "data": data,
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
