"""Render the thesis mapping (:class:`~aieflow.cnn.plan.ThesisLayer` per convolution) into its
project: AI Engine matmul kernels and graph, PL HLS kernels (untile -> tanh LUT -> im2col -> tile,
pixel shuffle), host im2col and the x86 harness, on the one Makefile contract of
:mod:`aieflow.vitis` (issue 20): mm2s movers feed the first layer's input PLIOs with the im2col
windows (``data/``), the PL kernels sit between the layers (``system.cfg`` ``stream_connect``), an
s2mm drains the pixel shuffle into DDR, and ``make system-run`` runs that whole chain on x86."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import numpy as np

from .. import __version__
from ..mapped.adf import graph_header
from ..mapped.ir import Cost, Kernel, Link, MappedGraph, Plio, PLKernel, PLStep, Port
from ..mapped.place import Block, Placement, Problem, problem, solve, staging
from ..mapped.text import c_array
from ..vitis import KERNELS_OBJECT, system_files
from .emit import ENV, RND, stage_idents
from .plan import CnnPlan, ThesisLayer, round_up
from .stages import Stage

GRAPH_CLASS = "ThesisGraph"
PLIO_BITS = 128
LANES = PLIO_BITS // 32  # floats per PLIO word
GRAPH_VAR = "cnn_graph"  # graph.cpp's instance (cnn/templates graph.cpp.j2)
INCLUDES = ("thesis_config.h", "kernels/thesis_kernels.h")  # the kernel class and its configurations
STATIC = {"src/kernels/thesis_kernels.h": "thesis_kernels.h", "src/kernels/cnn_numerics.h": "cnn_numerics.h",
          "pl/thesis_pl.h": "thesis_pl.h"}


def layer_info(s: Stage, lay: ThesisLayer, ident: str) -> dict:
    g = s.geometry
    _, h, w = g.in_shape
    oh, ow = g.out_hw
    lut = s.tanh if s.activation == "tanh" else None
    return {
        "cfg": f"{ident}_mm", "ident": ident, "comment": f"{s.source}: {lay.m} x {lay.k_pad} x {lay.n} in {lay.kernels} "
        f"kernels of {lay.tile_m} x {lay.k_pad} x {lay.tile_n}, K in {lay.k_chunks} chunk(s)",
        "mm": lay.mmul, "m": lay.m, "k": lay.k, "k_pad": lay.k_pad, "n": lay.n, "tile_m": lay.tile_m,
        "tile_n": lay.tile_n, "k_chunks": lay.k_chunks, "grid_m": lay.grid[0], "grid_n": lay.grid[1],
        "c_in": g.in_shape[0], "h": h, "w": w, "kh": g.kernel[0], "kw": g.kernel[1], "sh": g.stride[0], "sw": g.stride[1],
        "pt": g.padding[0], "pl": g.padding[1], "oh": oh, "ow": ow, "shuf": s.shuffle or 1, "tanh": lut is not None,
        "lut_size": lut.size if lut else 1, "lut_scale": repr(float(lut.scale)) if lut else "1.0",
        "lut_offset": lut.offset if lut else 0, "lut_rnd": RND.index(lut.index_rounding.value) if lut else 0,
        "pl_name": f"{lay.pl_kernel}_{ident}",
    }


def kernel_params(s: Stage, lay: ThesisLayer, mi: int) -> dict[str, np.ndarray]:
    m, k, n = lay.mmul
    wsub = np.zeros((lay.k_pad, lay.tile_m), dtype=np.float32)
    wsub[:lay.k, :] = s.weight[:, mi * lay.tile_m:(mi + 1) * lay.tile_m]
    blocks = wsub.reshape(lay.k_pad // k, k, lay.tile_m // n, n).transpose(2, 0, 1, 3).reshape(-1)
    b = np.zeros(lay.tile_m, dtype=np.float32) if s.bias is None else s.bias[mi * lay.tile_m:(mi + 1) * lay.tile_m]
    bias = np.tile(b.reshape(lay.tile_m // n, 1, n), (1, m, 1)).reshape(-1)
    return {"w": blocks, "b": bias}


def shapes(plan: CnnPlan) -> list[Block]:
    """Each layer's kernel group for the one placer: its grid_m x grid_n kernels fill whole columns
    of the array's height from the group's bottom row (kernel t at column t // height, row
    t % height of its rectangle), the layout of the published design (the thesis pinned every
    kernel by a location constraint)."""
    out = []
    for s, lay in zip(plan.stages, plan.layers, strict=True):
        n = lay.grid[0] * lay.grid[1]
        height = min(n, plan.device.rows)
        out.append(Block(s.name, -(-n // height), height))
    return out


def _hops(plio_in: list[dict], plio_out: list[dict]) -> list[tuple[str, str]]:
    """(output PLIO, input PLIO) pairs the PL kernel after each layer joins: it reads every output
    PLIO of its layer and writes every input PLIO of the next (``system_args``' connections)."""
    return [(o["var"], i["var"]) for i in plio_in if i["layer"] for o in plio_out if o["layer"] == i["layer"] - 1]


def thesis_problem(plan: CnnPlan, layers: list[dict]) -> Problem:
    """The placement problem read off the thesis mapping's mapped graph (lowered at
    ``mapped.place.staging``): one group per layer (:func:`shapes`), an edge from each layer to the
    next through the PL kernel between them (no kernel-to-kernel link: ``problem``'s ``hops``),
    weighed by the words of the next layer's input windows."""
    blocks = shapes(plan)
    staged = staging(blocks, plan.device.generation.cascade_serpentine)
    mg, plio_in, plio_out = _lower(plan, layers, staged)
    return problem(mg, blocks, staged, plan.device, hops=_hops(plio_in, plio_out))


def place_thesis(plan: CnnPlan, layers: list[dict]) -> Placement:
    """The one placer (``mapped/place.solve``, branch and bound) on :func:`thesis_problem`.  For the
    published ESPCN design it proves the published cells optimal: conv1's input at column 0, row 0
    and each layer's input next to the previous layer's output (``tests/test_cnn_mapped.py``)."""
    return solve(thesis_problem(plan, layers))


def kernel_cells(plan: CnnPlan, placement: Placement) -> list[tuple[int, int, int]]:
    """(layer index, column, row) of every kernel in order, at ``placement``'s rectangles."""
    cells = []
    for li, (s, lay) in enumerate(zip(plan.stages, plan.layers, strict=True)):
        r = placement.rect(s.name)
        cells += [(li, r.column + t // r.height, r.row + t % r.height) for t in range(lay.grid[0] * lay.grid[1])]
    return cells


def graph_title(kernels: int) -> str:
    """The header comment of the thesis mapping's ``graph.h`` (lines)."""
    return "\n".join((
        f"ADF graph (UG1079) of the thesis mapping: {kernels} im2col matrix-multiply kernels, no",
        "kernel-to-kernel edges; every kernel exchanges single-buffered windows with the PL over 128-bit PLIOs",
        "(one input PLIO per N block, broadcast to that block of kernels; one output PLIO per kernel).",
        "Placement is fixed by location constraints (the thesis placed its kernels by hand)."))


def lower(plan: CnnPlan, layers: list[dict], placement: Placement | None = None, costs: dict[str, Cost] | None = None
          ) -> tuple[MappedGraph, list[dict], list[dict]]:
    """The thesis mapping as a mapped graph: per convolution one input PLIO per N block
    (``<layer>_in<b>``, broadcast by ``plio`` links to the kernels of that block), grid_m x grid_n
    matmul kernels at :func:`kernel_cells` of ``placement`` (default: :func:`place_thesis`) with
    single-buffered windows, one output PLIO per
    kernel (``<layer>_out<t>``); no kernel-to-kernel link.  Also the PLIOs as the PL side names
    them (``layer``, ``block`` / ``tile``, the PL kernel ``pl`` on the other end), for
    system.cfg and the x86 harness.  ``layers``: :func:`layer_info` of each stage.  ``costs``
    (``cnn.perf.thesis_costs``, by name): attached to the kernels (``aie:<layer>:<block>``), the
    PLIOs (layer 0's inputs ``plio:in``; a later layer's input block b is the ``write_window`` of
    the PL step ``pl:<layer - 1>:im2col:<b>``, output tile t the ``read_window`` of
    ``pl:<layer>:untile:<t>``) and the PL kernels' steps; the graph runs one frame per host run
    (``MappedGraph.per_run``)."""
    return _lower(plan, layers, place_thesis(plan, layers) if placement is None else placement, costs)


def _lower(plan: CnnPlan, layers: list[dict], placement: Placement, costs: dict[str, Cost] | None = None
           ) -> tuple[MappedGraph, list[dict], list[dict]]:
    def cost(name: str) -> Cost | None:
        return None if costs is None else costs[name]

    kernels, links, plios, plio_in, plio_out = [], [], [], [], []
    mhz = plan.mover_clock_hz / 1e6
    cells = iter(kernel_cells(plan, placement))
    for li, (lay, L) in enumerate(zip(plan.layers, layers, strict=True)):
        gm, gn = lay.grid
        ident = L["ident"]
        for b in range(gn):
            plio_in.append({"var": f"{ident}_in{b}", "layer": li, "block": b, "pl": layers[li - 1]["pl_name"] if li else "",
                            "cost": f"pl:{li - 1}:im2col:{b}" if li else "plio:in"})
        for mi in range(gm):
            for ni in range(gn):
                t = mi * gn + ni
                _, col, row = next(cells)
                out = {"var": f"{ident}_out{t}", "layer": li, "tile": t, "pl": L["pl_name"], "cost": f"pl:{li}:untile:{t}"}
                plio_out.append(out)
                var, sym = f"k_{ident}_{mi}_{ni}", f"{ident}_m{mi}"
                kernels.append(Kernel(
                    var, plan.stages[li].name, f"aieflow_thesis::MatmulTile<aieflow_design::{L['cfg']}>",
                    (f"aieflow_design::{sym}_w", f"aieflow_design::{sym}_b"), f"kernels/{ident}.cc", (col, row),
                    (lay.k_pad * lay.tile_n,), (lay.tile_m * lay.tile_n,), single=(("in", 0), ("out", 0)),
                    cost=cost(f"aie:{li}:{ni}")))
                links.append(Link("plio", Port(f"{ident}_in{ni}", "out", 0), Port(var, "in", 0)))
                links.append(Link("plio", Port(var, "out", 0), Port(out["var"], "in", 0)))
    plios = [Plio(p["var"], "in", PLIO_BITS, f"data/{p['var']}.txt", freq_mhz=mhz, cost=cost(p["cost"])) for p in plio_in]
    plios += [Plio(p["var"], "out", PLIO_BITS, f"data/{p['var']}.txt", freq_mhz=mhz, cost=cost(p["cost"]))
              for p in plio_out]
    headers = tuple(dict.fromkeys(f"weights/{k.args[0].removeprefix('aieflow_design::')[:-2]}.h" for k in kernels))
    pl = tuple(_pl_kernel(plan, li, L, plio_in, plio_out, costs) for li, L in enumerate(layers))
    return (MappedGraph(tuple(kernels), (), tuple(plios), tuple(links), headers, pl_kernels=pl, per_run=True),
            plio_in, plio_out)


def _pl_kernel(plan: CnnPlan, li: int, L: dict, plio_in: list[dict], plio_out: list[dict],
               costs: dict[str, Cost] | None = None) -> PLKernel:
    """Layer ``li``'s PL kernel (``pl/thesis_pl.cpp``: untile, then tanh + im2col + tile into the
    next layer's input PLIOs, or the pixel shuffle / s2mm out of the graph): port ``tiles_<t>`` on
    each of the layer's output PLIOs, ``out_<b>`` on each of the next layer's input PLIOs (``out_0``
    leaving the graph after the last layer); per frame (one call) it reads every output window's
    elements at ``cnn/perf.PL_LOOP_II`` through ``PL_LOOP_DEPTH_CYCLES``.  With ``costs``, its
    steps (``cnn/perf.thesis_costs``' ``pl:<li>:...`` in order): each untile reads its tile's
    port, each im2col writes its block's port, the last step writes the image out of the graph."""
    from .perf import PL_LOOP_DEPTH_CYCLES, PL_LOOP_II

    lay = plan.layers[li]
    ins = tuple((f"tiles_{p['tile']}", p["var"]) for p in plio_out if p["layer"] == li)
    nxt = [p for p in plio_in if p["layer"] == li + 1]
    outs = tuple((f"out_{p['block']}", p["var"]) for p in nxt) or (("out_0", ""),)
    steps = []
    for name in () if costs is None else (n for n in costs if n.startswith(f"pl:{li}:")):
        what = name.split(":")[2:]
        reads = (f"tiles_{what[1]}",) if what[0] == "untile" else ()
        writes = (f"out_{what[1]}",) if what[0] == "im2col" else ("out_0",) if what[0] == "write" else ()
        steps.append(PLStep(costs[name], reads, writes))
    return PLKernel(L["pl_name"], "pl/thesis_pl.cpp", ins, outs, PL_LOOP_II, PL_LOOP_DEPTH_CYCLES,
                    lay.kernels * lay.tile_m * lay.tile_n, 1, steps=tuple(steps))


def im2col_windows(L: dict, x: np.ndarray) -> np.ndarray:
    """(frames, grid_n, k_pad * tile_n) float32: what one layer's input PLIOs carry per frame, in the
    order ``thesis_pl.h``'s ``im2col_tile`` streams it (numpy, written independently of that C++;
    the x86 system run checks the two agree).  ``L``: :func:`layer_info`; ``x``: (frames, C, H, W)."""
    m, k, _ = L["mm"]
    e = np.arange(L["k_pad"] * L["tile_n"])
    blk, inner = e // (m * k), e % (m * k)
    kb, pb = blk // (L["tile_n"] // m), blk % (L["tile_n"] // m)
    kk = kb * k + inner % k
    c, ij = kk // (L["kh"] * L["kw"]), kk % (L["kh"] * L["kw"])
    out = np.zeros((x.shape[0], L["grid_n"], e.size), dtype=np.float32)
    for ni in range(L["grid_n"]):
        p = ni * L["tile_n"] + pb * m + inner // k
        yy = (p // L["ow"]) * L["sh"] + ij // L["kw"] - L["pt"]
        xx = (p % L["ow"]) * L["sw"] + ij % L["kw"] - L["pl"]
        ok = (kk < L["k"]) & (yy >= 0) & (yy < L["h"]) & (xx >= 0) & (xx < L["w"])
        out[:, ni, ok] = x[:, c[ok], yy[ok], xx[ok]]
    return out


def _text(v: np.ndarray, per_line: int = 4) -> str:
    """Float values as PLIO text: C's %.9g (exact for float32), four (one 128-bit word) per line."""
    vals = [f"{float(a):.9g}" for a in np.asarray(v, dtype=np.float32).ravel()]
    return "".join(" ".join(vals[i:i + per_line]) + "\n" for i in range(0, len(vals), per_line))


def data_files(plan: CnnPlan, layers: list[dict], plio_in: list[dict], xq: np.ndarray, yq: np.ndarray,
               trace: dict[str, np.ndarray] | None) -> tuple[dict[str, str], int]:
    """``data/``: every input PLIO's windows for each frame (layer 0: the host's im2col of the
    example frames, what mm2s streams; later layers: the im2col of the emulator's activated output
    of the layer before, what the PL kernel streams on the board and the simulators read from the
    file), the frames themselves (``frames.txt``, the shim run's input), and the golden output
    (``golden_image.txt``: each frame's pixel-shuffled image, zeros after it to a whole 128-bit word).
    Also the values per frame of that output stream."""
    frames = xq.shape[0]
    ins = {0: xq.reshape(frames, *plan.stages[0].geometry.in_shape)}
    for li in range(1, len(layers)):
        if trace is not None:  # the tensor the layer's convolution reads
            conv = plan.stages[li].source.split(" + ")[0]
            ins[li] = np.asarray(trace[conv], dtype=np.float32).reshape(frames, *plan.stages[li].geometry.in_shape)
    windows = {li: im2col_windows(layers[li], x) for li, x in ins.items()}
    files = {f"data/{p['var']}.txt": _text(windows[p["layer"]][:, p["block"]]) for p in plio_in if p["layer"] in windows}
    files["data/frames.txt"] = _text(xq)
    per_frame = round_up(int(np.prod(plan.stages[-1].out_shape)), LANES)
    out = np.zeros((frames, per_frame), dtype=np.float32)
    out[:, :int(np.prod(plan.stages[-1].out_shape))] = np.asarray(yq, dtype=np.float32).reshape(frames, -1)
    files["data/golden_image.txt"] = _text(out)
    return files, per_frame


def thesis_files(plan: CnnPlan, perf_json: dict, summary: str, xq: np.ndarray, yq: np.ndarray,
                 trace: dict[str, np.ndarray] | None = None) -> dict[str, str]:
    """All project files; ``xq`` / ``yq``: the example frames (one graph iteration each) and their
    emulated outputs, ``trace``: for those frames, the tensor each convolution reads, keyed by the
    convolution's node name (the later layers' PLIO input files; without it they are not written)."""
    idents = stage_idents(plan.stages)
    layers = [layer_info(s, lay, idents[i]) for i, (s, lay) in enumerate(zip(plan.stages, plan.layers, strict=True))]
    f32 = plan.stages[0].in_type
    mapped, plio_in, plio_out = lower(plan, layers)
    params = {f"{L['ident']}_m{mi}": kernel_params(s, lay, mi)
              for s, lay, L in zip(plan.stages, plan.layers, layers, strict=True) for mi in range(lay.grid[0])}
    last = plan.stages[-1]
    frame_out = int(np.prod(last.out_shape))
    pl = []
    for li, (s, lay, L) in enumerate(zip(plan.stages, plan.layers, layers, strict=True)):
        lut = s.tanh if s.activation == "tanh" else None
        what = {"activation": "untile -> tanh LUT -> im2col -> tile", "pixelshuffle": "untile -> pixel shuffle",
                "s2mm": "untile"}[lay.pl_kernel]
        pl.append({"name": L["pl_name"], "kind": lay.pl_kernel, "cfg": L["cfg"], "tiles": lay.kernels,
                   "outs": layers[li + 1]["grid_n"] if lay.pl_kernel == "activation" else 1,
                   "next": layers[li + 1]["cfg"] if lay.pl_kernel == "activation" else "",
                   "lut": c_array(lut.values().astype(np.float32), f32) if lut else "", "lut_size": lut.size if lut else 0,
                   "clock_mhz": f"{lay.pl_clock_hz / 1e6:g}", "clock_hz": int(lay.pl_clock_hz), "what": what})
    ctx = {"version": __version__, "device": plan.device, "layers": layers, "plio_in": plio_in,
           "plio_out": plio_out, "graph_class": GRAPH_CLASS, "pl": pl, "mover_mhz": f"{plan.mover_clock_hz / 1e6:g}",
           "frame_in": int(np.prod(plan.stages[0].geometry.in_shape)), "frame_out": frame_out, "summary": summary,
           "plan": plan, "perf": perf_json, "graph_var": GRAPH_VAR,
           "iterations": xq.shape[0]}  # graph.cpp's default run count in the simulators: a frame each
    data, per_frame = data_files(plan, layers, plio_in, xq, yq, trace)
    ctx["per_frame"] = per_frame
    files = {
        "src/thesis_config.h": ENV.get_template("thesis_config.h.j2").render(**ctx),
        "src/graph.h": graph_header(mapped, GRAPH_CLASS, includes=INCLUDES, version=__version__, device=plan.device,
                                    title=graph_title(len(mapped.kernels))),
        "src/graph.cpp": ENV.get_template("graph.cpp.j2").render(**ctx),
        "pl/thesis_pl_top.h": ENV.get_template("thesis_pl_top.h.j2").render(**ctx),
        "pl/thesis_pl.cpp": ENV.get_template("thesis_pl.cpp.j2").render(**ctx),
        "x86/harness.cpp": ENV.get_template("thesis_harness.cpp.j2").render(**ctx),
        "x86/thesis_csim.cpp": ENV.get_template("thesis_csim.cpp.j2").render(**ctx),
        "aie.cfg": ENV.get_template("aie.cfg.j2").render(**ctx),
        "README.md": ENV.get_template("README.md.j2").render(**ctx),
    }
    for L in layers:
        files[f"src/kernels/{L['ident']}.cc"] = (
            f"// Generated by aieflow {__version__}: the matmul kernel class of {L['ident']}.\n"
            f'#include "thesis_config.h"\n#include "kernels/thesis_kernels.h"\n\n'
            f"template class aieflow_thesis::MatmulTile<aieflow_design::{L['cfg']}>;\n")
    for sym, p in params.items():
        files[f"src/weights/{sym}.h"] = (
            f"// Generated by aieflow {__version__}: resident weights and bias of {sym}.\n#pragma once\n#include <vector>\n\n"
            f"namespace aieflow_design {{\ninline const std::vector<float> {sym}_w = {{\n{c_array(p['w'], f32)}\n}};\n"
            f"inline const std::vector<float> {sym}_b = {{\n{c_array(p['b'], f32)}\n}};\n}}  // namespace aieflow_design\n")
    base = resources.files("aieflow").joinpath("templates/cnn")
    for rel, name in STATIC.items():
        files[rel] = base.joinpath(name).read_text()
    files.update(data)
    files.update(system_files(files, **system_args(plan, ctx, plio_in, plio_out, mapped)))
    return files


def system_args(plan: CnnPlan, ctx: dict, plio_in: list[dict], plio_out: list[dict], mapped: MappedGraph) -> dict:
    """The thesis mapping on the one Makefile contract: mm2s movers feed the first layer's input
    PLIOs, the PL kernels (``pl/thesis_pl.cpp``) take every output PLIO and feed the next layer's
    input PLIOs (``stream_connect``), one s2mm drains the last PL kernel (pixel shuffle); the
    x86 runs are the thesis's own (its pipelined harness, and the system run around it)."""
    pl = mapped.pl_kernels  # the PL kernels and their ports, from the mapped graph
    deps = ["pl/thesis_pl_top.h", "pl/thesis_pl.h", "src/thesis_config.h", "src/kernels/cnn_numerics.h"]
    kernels = [{"name": k.name, "cu": f"{k.name}_0", "source": k.source, "deps": deps} for k in pl]
    connects = mapped.stream_connects()
    leaves = [f"{k.name}_0.{port}" for k in pl for port, plio in k.outs if not plio]
    assert len(leaves) == 1, leaves  # the last PL kernel's image stream, to the s2mm
    out = {"var": "image", "file": "data/image.txt", "ctype": "float", "period": ctx["per_frame"],
           "real": ctx["frame_out"], "src": leaves[0]}
    x86 = {"text": ENV.get_template("thesis_system.cpp.j2").render(**ctx),
           "shim_units": ["x86/harness.cpp", KERNELS_OBJECT, "pl/thesis_pl.cpp"],
           "shim_args": "--data data --out shim_output", "shim_out": "shim_output",
           "system_units": ["x86/system.cpp", KERNELS_OBJECT], "csim_units": ["x86/pl_csim.cpp", "x86/thesis_csim.cpp"]}
    return dict(
        device=plan.device, graph_class=GRAPH_CLASS, graph_var=GRAPH_VAR,
        plio_in=[{"var": p["var"], "file": f"data/{p['var']}.txt", "ctype": "float"} for p in plio_in if p["layer"] == 0],
        plio_out=[out], iterations=ctx["iterations"], samples_per_iteration=1, classes=[], tiles=mapped.kernels,
        plio_bits=PLIO_BITS, pl_kernels=kernels, connects=connects, x86=x86, per_run=True,
        refuse_hint="fewer kernels or input PLIOs per layer (layers: <conv>: mapping: kernels / plio_in)")


def write_input(work: Path, xq: np.ndarray) -> None:
    (work / "data").mkdir(parents=True, exist_ok=True)
    np.ascontiguousarray(xq, dtype=np.float32).tofile(work / "frames.bin")


def read_output(work: Path, shape: tuple[int, ...]) -> np.ndarray:
    got = np.fromfile(work / "out" / "out.bin", dtype=np.float32)
    if got.size != int(np.prod(shape)):
        from ..verify import VerifyError

        raise VerifyError(f"the thesis harness wrote {got.size} values; {int(np.prod(shape))} were expected")
    return got.reshape(shape)


__all__ = ["thesis_files", "write_input", "read_output", "round_up"]
