"""The rows mapping's project (:mod:`aieflow.cnn.rows`): its kernels lowered into the mapped graph
(:func:`lower`: one kernel per stage, ``stream`` links between them, a skip's FIFO depth, one input
and one output PLIO), ``src/layers.h`` (each stage's one-row configuration, the stream mapping's,
plus its frame geometry), ``templates/cnn/rows_kernels.h``, the weights, the x86 harness and the
data files.  Rows travel in order, each row channel by channel, so a frame on a PLIO is its
(H, C, W) transpose.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import numpy as np

from .. import __version__
from ..mapped.adf import graph_header
from ..mapped.ir import Kernel, Link, MappedGraph, Plio, Port, SharedBuffer
from ..mapped.place import Block, Placement, Problem, problem, solve, staging
from ..mapped.text import c_array, format_values
from ..mapped.tiling import NdTiling
from ..names import comment
from ..numerics.types import FixedType, FloatType
from ..verify import VerifyError
from ..vitis import system_files
from .emit import (
    ENV,
    GRAPH_CLASS,
    PLIO_BITS,
    STATIC,
    UP_MODES,
    ctype,
    layer_cfg,
    stage_idents,
    tile_params,
    words,
)
from .plan import CnnPlan
from .rows import RowLayer, bilinear, row_stage, row_stream_layer, skip_channels

STATIC_ROWS = {**STATIC, "src/kernels/rows_kernels.h": "cnn/rows_kernels.h"}


def rows_problem(plan: CnnPlan) -> Problem:
    """The rows mapping's placement problem: each stage's one kernel a 1 x 1 group, read off the
    plan lowered unplaced (``mapped.place.staging``, kept with the plan); the edges are its row
    streams between stages (a skip's and a merged part's through its memory-tile row buffer)."""
    from ..mapped.cache import memo

    shapes = tuple(Block(s.name, 1, 1) for s in plan.stages)
    assert len({b.name for b in shapes}) == len(shapes), "stage names repeat"

    def staged():
        at = staging(shapes, plan.device.generation.cascade_serpentine)
        return at, lower(plan, at)

    at, mg = memo(plan, "cnn:rows:staged", (), staged)
    return problem(mg, shapes, at, plan.device)


def place_rows(plan: CnnPlan) -> Placement:
    """The one placer (``mapped/place.solve``) on :func:`rows_problem` with the ``greedy-right``
    baseline: one tile per stage, column after column along row 0 from column 0, then the rows
    above (the layout of the code it replaced).  The rows performance model (``cnn/rows.py``)
    reads no tile positions, so branch and bound would move kernels where the model does not
    look; it waits until the model counts the streams' routes."""
    return solve(rows_problem(plan), "greedy-right")


def role(lay: RowLayer) -> str:
    cls = {"pool": "Pool", "gpool": "GlobalPool"}.get(lay.kind, "Conv")
    return f"Row{cls}_{lay.ins}_{lay.outs_used}"


def _readers(plan: CnnPlan) -> dict[int, list[tuple[int, int]]]:
    """Per producer, the (reader stage, part) streams it feeds, in order (a stage whose residual
    skip is its own input reads one producer twice)."""
    out: dict[int, list[tuple[int, int]]] = {}
    for i, lay in enumerate(plan.layers):
        for j, (p, _) in enumerate(lay.parts):
            out.setdefault(p, []).append((i, j))
    return out


def _source(plan: CnnPlan, idents: list[str], readers: dict[int, list[tuple[int, int]]], p: int, i: int,
            j: int) -> Port:
    """The output port that part ``j`` (from ``p``) of stage ``i`` reads: the input PLIO, the
    producer's port in its readers' order, or its one port where it broadcasts to all its readers."""
    if p < 0:
        return Port("in0", "out", 0)
    src = plan.layers[p]
    return Port(f"k_{idents[p]}", "out", readers[p].index((i, j)) if src.outs_used == src.outs else 0)


def lower(plan: CnnPlan, placement: Placement | None = None) -> MappedGraph:
    """Kernel ``k_<stage>`` per stage (stream ports only), a ``stream`` link from each part's
    producer (output port = its readers' order, or its one port broadcast to them all where the
    core has one output port) to the reader's input port, with the skip FIFO's depth; where the
    reader's core has fewer input ports than parts, the parts go (``memtile`` links, each with its
    FIFO depth) into the write ports of a memory-tile shared buffer ``cat_<stage>`` of one row of
    all channels (``[W, C, 1]``, W fastest; part k's write tiling at channel offset ``c0_k``), filled
    once per input row (``repetitions`` = the frame's rows), whose read port streams the row, parts
    in channel order, into the reader's one input port; a skip held in DDR (``RowLayer.ddr_bytes``) a
    ``ddr`` link, one GMIO transfer per row of the producer's frame, into the reader's stream port or
    its row buffer's write port; the input PLIO ``in0`` to every stage that
    reads the network input, the last stage to ``out0``.  Each kernel on its stage's tile of
    ``placement`` (by default :func:`place_rows`)."""
    idents = stage_idents(plan.stages)
    readers = _readers(plan)
    if placement is None:
        placement = place_rows(plan)
    cells = [(placement.rect(s.name).column, placement.rect(s.name).row) for s in plan.stages]
    kernels, links, buffers = [], [], []
    plios = [Plio("in0", "in", PLIO_BITS, "data/in0.txt"), Plio("out0", "out", PLIO_BITS, "data/out0.txt")]
    for i, (s, lay) in enumerate(zip(plan.stages, plan.layers, strict=True)):
        var, ident = f"k_{idents[i]}", idents[i]
        args = () if lay.kind != "conv" else tuple(f"aieflow_design::{ident}_r0_c0_{b}" for b in "wbtls")
        kernels.append(Kernel(var, s.name, f"aieflow_cnn::{role(lay)}<aieflow_design::{ident}_rows>", args,
                              f"kernels/{ident}.cc", cells[i], (None,) * lay.ins, (None,) * lay.outs_used))

        fifo = lay.fifo_words or (0,) * len(lay.parts)
        ddr = lay.ddr_bytes or (0,) * len(lay.parts)
        if lay.merged:
            (_, h, w), c = s.geometry.in_shape, sum(ch for _, ch in lay.parts)
            buf = f"cat_{ident}"
            dims, c0, writes = (w, c, 1), 0, []
            for j, (p, ch) in enumerate(lay.parts):
                writes.append(NdTiling(dims, (w, ch, 1), (0, c0, 0)))
                src = _source(plan, idents, readers, p, i, j)
                if ddr[j]:  # a skip held in DDR: read back into the row buffer's write port
                    rows = plan.stages[p].out_shape[1]
                    links.append(Link("ddr", src, Port(buf, "in", j), segment=(rows, ddr[j] // rows)))
                else:
                    links.append(Link("memtile", src, Port(buf, "in", j), fifo_depth=fifo[j]))
                c0 += ch
            buffers.append(SharedBuffer(buf, ctype(s.in_type), dims, tuple(writes), (NdTiling(dims, dims, (0, 0, 0)),),
                                        f"the input rows of {comment(s.name)}: {len(lay.parts)} parts meet, one row "
                                        f"({c} x {w}) per fill, {h} fills per frame", repetitions=h))
            links.append(Link("memtile", Port(buf, "out", 0), Port(var, "in", 0)))
            continue
        for j, (p, _) in enumerate(lay.parts):
            src = _source(plan, idents, readers, p, i, j)
            if ddr[j]:  # a skip held in DDR: the producer's whole frame of it, one GMIO transfer per row
                rows = plan.stages[p].out_shape[1]
                links.append(Link("ddr", src, Port(var, "in", j), segment=(rows, ddr[j] // rows)))
                continue
            links.append(Link("plio" if p < 0 else "stream", src, Port(var, "in", j), fifo_depth=fifo[j]))
    links.append(Link("plio", Port(f"k_{idents[-1]}", "out", 0), Port("out0", "in", 0)))
    headers = tuple(f"weights/{idents[i]}_r0_c0.h" for i, lay in enumerate(plan.layers) if lay.kind == "conv")
    return MappedGraph(tuple(kernels), tuple(buffers), tuple(plios), tuple(links), headers)


def graph_title(plan: CnnPlan) -> str:
    return "\n".join((
        f"ADF graph (UG1079): the rows CNN mapping, {len(plan.layers)} kernels, one per stage, each run once per",
        "frame: rows stream between them (readincr / writeincr), a skip's stream through a FIFO (fifo_depth);",
        "one input PLIO (frames as rows, each row channel by channel) and one output PLIO."))


def frames_as_rows(x: np.ndarray) -> np.ndarray:
    """(N, C, H, W) -> the values in stream order: (N, H, C, W)."""
    return np.ascontiguousarray(np.asarray(x).transpose(0, 2, 1, 3))


def rows_files(plan: CnnPlan, perf_json: dict, summary: str, xq: np.ndarray, yq: np.ndarray) -> dict[str, str]:
    idents = stage_idents(plan.stages)
    layers, rows, params = [], [], {}
    for i, (s, lay) in enumerate(zip(plan.stages, plan.layers, strict=True)):
        rs, rl = row_stage(s), row_stream_layer(plan.device, s)
        L = layer_cfg(plan, rs, rl, idents[i])
        L["comment"] = f"{s.source}: rows mapping, one kernel; one-row view"
        layers.append(L)
        rows.append({"cfg": f"{idents[i]}_rows", "base": L["cfg"], "ident": idents[i], "name": s.name,
                     "roles": [role(lay)], "ih": s.geometry.in_shape[1], "ish": s.geometry.stride[0],
                     "ipt": s.geometry.padding[0], "ioh": s.out_hw[0], "nin": lay.ins, "nout": lay.outs_used,
                     "part_c": [sum(c for _, c in lay.parts)] if lay.merged else [c for _, c in lay.parts],
                     "padv": L.get("pad", 0) if lay.kind == "conv" else 0, "skip_c": skip_channels(s),
                     "upm": UP_MODES[s.up_mode] if bilinear(s) else 0, "uh": s.up[0] if bilinear(s) else 1,
                     "uw": s.up[1] if bilinear(s) else 1})
        if lay.kind != "conv":
            continue
        p = tile_params(rs, rl, 0, 0)
        wt = s.core.weight
        ot = s.core.output if not s.is_float else s.conv_type
        params[f"{idents[i]}_r0_c0"] = {
            "w": c_array(p["w"], wt), "b": c_array(p["b"], s.out_type if s.is_float else FixedType(32, 0)) if "b" in p else "",
            "t": c_array(p["t"], ot) if "t" in p else "", "l": c_array(p["l"], s.out_type) if "l" in p else "",
            "s": c_array(p["s"], s.out_type) if "s" in p else "",
            "tw": ctype(wt), "tb": "float" if s.is_float else "int32", "to": ctype(s.conv_type)}
    mapped = lower(plan)
    iterations = max(1, xq.shape[0])
    ddr = [{"name": name, "transfers": link.segment[0], "bytes": link.segment[1]} for name, link in mapped.ddr_links()]
    ctx = {"ddr": ddr, "version": __version__, "device": plan.device, "layers": layers, "rows": rows, "iterations": iterations,
           "graph_var": "cnn_graph", "plio_bits": PLIO_BITS, "graph_class": GRAPH_CLASS, "perf": perf_json,
           "summary": summary, "params": params, "plan": plan}
    files = {
        "src/layers.h": ENV.get_template("rows_layers.h.j2").render(**ctx),
        "src/graph.h": graph_header(mapped, GRAPH_CLASS, version=__version__, device=plan.device, title=graph_title(plan)),
        "src/graph.cpp": ENV.get_template("graph.cpp.j2").render(**ctx),
        "x86/harness.cpp": ENV.get_template("x86_harness.cpp.j2").render(**{**ctx, "layers": rows}),
        "aie.cfg": ENV.get_template("aie.cfg.j2").render(**ctx),
        "README.md": ENV.get_template("README.md.j2").render(**ctx),
    }
    for R in rows:
        files[f"src/kernels/{R['ident']}.cc"] = ENV.get_template("layer_kernel.cc.j2").render(L=R, version=__version__)
    for sym, p in params.items():
        files[f"src/weights/{sym}.h"] = ENV.get_template("weights.h.j2").render(sym=sym, p=p, version=__version__)
    base = resources.files("aieflow").joinpath("templates")
    for rel, name in STATIC_ROWS.items():
        files[rel] = base.joinpath(name).read_text()
    in_t, out_t = plan.stages[0].in_type, plan.stages[-1].out_type
    files["data/in0.txt"] = format_values(frames_as_rows(xq).reshape(-1), in_t, words(in_t))
    files["data/golden_out0.txt"] = format_values(frames_as_rows(yq).reshape(-1), out_t, words(out_t))
    files.update(system_files(
        files, device=plan.device, graph_class=GRAPH_CLASS, graph_var="cnn_graph",
        plio_in=[{"var": "in0", "file": "data/in0.txt", "ctype": ctype(in_t)}],
        plio_out=[{"var": "out0", "file": "data/out0.txt", "ctype": ctype(out_t)}],
        iterations=iterations, samples_per_iteration=1,
        classes=[f"aieflow_cnn::{R['roles'][0]}<aieflow_design::{R['cfg']}>" for R in rows],
        tiles=mapped.kernels, plio_bits=PLIO_BITS, refuse_hint="cnn.mapping stream", ddr=ddr))
    return files


def write_rows_input(plan: CnnPlan, work: Path, xq: np.ndarray) -> None:
    data = work / "data"
    data.mkdir(parents=True, exist_ok=True)
    t = plan.stages[0].in_type
    (data / "in0.txt").write_text(format_values(frames_as_rows(xq).reshape(-1), t, words(t)))


def read_rows_output(plan: CnnPlan, work: Path, n: int) -> np.ndarray:
    """The output PLIO's values back as (N, C, H, W)."""
    c, h, w = plan.stages[-1].out_shape
    t = plan.stages[-1].out_type
    path = work / "out" / "data" / "out0.txt"
    if not path.is_file():
        path = work / "out" / "out0.txt"
    tokens = path.read_text().split()
    vals = (np.array(tokens, dtype=np.float64).astype(np.float32) if isinstance(t, FloatType)
            else np.array(tokens, dtype=np.int64))
    if vals.size != n * c * h * w:
        raise VerifyError(f"output PLIO out0 holds {vals.size} values; {n * c * h * w} were expected")
    return vals.reshape(n, h, c, w).transpose(0, 2, 1, 3)
