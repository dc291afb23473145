"""Render a CNN plan into its Vitis project: ``{relative path: text}``.

Stream mapping: ``src/layers.h`` (one configuration struct per stage), ``src/kernels/<stage>.cc``
(the kernel classes each stage instantiates), ``src/weights/<tile>.h`` (resident parameters),
``src/graph.h`` (kernels, cascades, windows, PLIOs, locations: the stream mapping lowered into the
mapped graph by :func:`lower` and written by :mod:`aieflow.mapped.adf`), ``x86/harness.cpp``, ``aie.cfg``,
``data/`` (the example frames on the input PLIOs, the emulator's outputs as golden files) and the
Vitis system of :mod:`aieflow.vitis` (Makefile, system.cfg, PL movers, XRT host, x86 system run).
Thesis mapping: see :mod:`aieflow.cnn.emit_thesis`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from importlib import resources

import numpy as np

from .. import __version__
from ..mapped.adf import graph_header
from ..mapped.ir import Kernel, Link, MappedGraph, Plio, Port
from ..mapped.place import Block, Placement, Problem, problem, solve, staging
from ..mapped.text import c_array, format_values, narrow_output
from ..mapped.text import float_literal as _float_lit
from ..names import Code, c_ident
from ..numerics.types import AffineType, FixedType, FloatType, NumericType
from ..ops import activations as act
from ..ops.dense import cascade_chunk_lanes
from ..templating import environment
from ..vitis import system_files
from .plan import CnnPlan, StreamLayer, round_up
from .stages import Stage

GRAPH_CLASS = "CnnGraph"
PLIO_BITS = 128
STATIC = {"src/kernels/cnn_kernels.h": "cnn/cnn_kernels.h", "src/kernels/cnn_numerics.h": "cnn/cnn_numerics.h",
          "src/kernels/activation_fixed.h": "kernels/activation_fixed.h", "src/kernels/requant.h": "kernels/requant.h",
          "src/kernels/narrow.h": "kernels/narrow.h", "src/kernels/cnn_float_post.h": "cnn/cnn_float_post.h"}

ENV = environment("cnn")

ACT_CODES = {None: 0, "relu": 1}
UP_MODES = {"nearest": 0, "half_pixel": 1, "align_corners": 2, "asymmetric": 3}  # cnn_kernels.h UP_MODE


def ctype(t: NumericType) -> str:
    if isinstance(t, FloatType):
        return "bfloat16" if t.name == "bf16" else "float"
    if isinstance(t, AffineType):
        return t.c_type  # uint8 activations of onnxruntime quantize_static
    return f"int{t.container_bits}"


def words(t: NumericType) -> int:
    """Values per 128-bit PLIO word in the data files."""
    if isinstance(t, FloatType):
        return PLIO_BITS // (16 if t.name == "bf16" else 32)
    return PLIO_BITS // t.container_bits


def rq_cfg(s: Stage) -> dict:
    """Float-scale requantisation constants (numerics/requant.py); neutral ones without."""
    out = s.out_type if s.post is None and s.residual is None else s.conv_type
    if s.rq is None:
        return {"rq": False, "rq_zp": 0, "rq_shift": 0, "rq_mult": 0, "rq_bias": 0, "pad": 0}
    return {"rq": True, "rq_zp": out.zero_point, "rq_shift": s.rq_shift, "rq_mult": int(s.rq[0]),
            "rq_bias": s.rq_bias, "pad": s.in_type.zero_point if isinstance(s.in_type, AffineType) else 0}


def acc_type(plan: CnnPlan, s: Stage) -> str:
    if s.is_float:
        return "accfloat"
    return f"acc{s.core.acc_bits}"  # the catalog's accumulator lanes for the type pair (ops/dense.py)


@dataclass(frozen=True)
class Tile:
    var: str
    sym: str  # parameter symbol (shared by replicas)
    role: str
    cfg: str
    col: int
    row: int
    replica: int
    stage: int
    r: int
    j: int


def stage_idents(stages: tuple[Stage, ...]) -> list[str]:
    out: list[str] = []
    for s in stages:
        ident = c_ident(s.name)
        while ident in out:
            ident += "_"
        out.append(ident)
    return out


def roles(lay: StreamLayer) -> list[str]:
    return list(dict.fromkeys(role_of(lay, j) for j in range(lay.cas_len)))


def role_of(lay: StreamLayer, j: int) -> str:
    """The kernel class of cascade position j; the last position of a stage with a fused residual
    add is the ``...Skip`` variant (one more input window: the skip)."""
    if lay.kind == "pool":
        return "Pool"
    skip = "Skip" if lay.skip else ""
    if lay.cas_len == 1:
        return "ConvSingle" + skip
    return "ConvFirst" if j == 0 else "ConvLast" + skip if j == lay.cas_len - 1 else "ConvMiddle"


def skip_port(lay: StreamLayer) -> int:
    """The skip window's input port of a ``...Skip`` kernel: after the image (and the cascade)."""
    return 1 if lay.cas_len == 1 else 2


def layer_cfg(plan: CnnPlan, s: Stage, lay: StreamLayer, ident: str) -> dict:
    g = s.geometry
    _, h, w = g.in_shape
    oh, ow = g.out_hw
    top, left = g.padding[0], g.padding[1]
    info = {"name": s.name, "cfg": f"{ident}_cfg", "ident": ident, "kind": lay.kind, "ta": ctype(s.in_type),
            "c_in": lay.in_group, "h": h, "w": w, "kh": g.kernel[0], "kw": g.kernel[1], "sh": g.stride[0],
            "sw": g.stride[1], "pt": top, "pl": left, "oh": oh, "ow": ow, "roles": roles(lay),
            "comment": f"{s.source}: {lay.cas_num} x {lay.cas_len} tiles"}
    if lay.kind == "pool":
        t = s.in_type
        info.update(max=s.pool == "max", count_pad=s.count_include_pad,
                    rnd=0 if isinstance(t, FloatType) else list(RND).index(t.rounding.value),
                    min_code=0 if isinstance(t, FloatType) else (-t.max_code if t.saturation.value == "symmetric" else t.min_code),
                    max_code=0 if isinstance(t, FloatType) else t.max_code, **rq_cfg(s))
        return info
    core = s.core
    m, k, n = lay.mmul
    act_code = ACT_CODES.get(s.activation, 0)
    table_size, table_min, lut = 1, 0, None
    if s.activation in ("tanh", "prelu"):
        if not s.is_float:
            act_code, table_size, table_min = 2, lay.out_group * s.table.shape[1], core.output.min_code
        elif s.act_bf16 is not None:
            act_code = 5  # bf16 tanh: cnn_float_post.h lookup_bf16_table
        elif s.activation == "tanh":
            act_code, lut = 3, s.tanh
        else:
            act_code = 4
    out_t = core.output if (s.activation in ("tanh", "prelu") and not s.is_float) else s.conv_type
    info.update(
        tw=ctype(core.weight), tb="float" if s.is_float else "int32", to=ctype(s.conv_type), acc=acc_type(plan, s),
        m=m, k=k, n=n, og=lay.out_group,
        casc_lanes=cascade_chunk_lanes(m * n, 32 if s.is_float else core.acc_bits, plan.device.generation.cascade_bits),
        shift=0 if s.is_float else core.shift, bias_shift=0 if s.is_float else core.bias_shift,
        has_bias=s.bias is not None, act=act_code, shuf=s.shuffle or 1, up_h=s.up[0], up_w=s.up[1],
        up_mode=UP_MODES[s.up_mode],
        rounding="conv_even" if s.is_float else out_t.rounding.value,
        saturation="saturate" if s.is_float else out_t.saturation.value,
        table_size=table_size, table_codes=s.table.shape[1] if act_code == 2 else 1, table_min=table_min,
        lut_alloc=lut.size if lut is not None else 1, lut_size=lut.size if lut is not None else 1,
        lut_scale=repr(float(lut.scale)) if lut is not None else "1.0",
        lut_offset=lut.offset if lut is not None else 0,
        lut_rnd=list(RND).index(lut.index_rounding.value) if lut is not None else 0,
        slope_size=lay.out_group if act_code == 4 else 1,
        narrow=narrow_output(out_t) if not s.is_float and ctype(out_t) == ctype(s.conv_type) else None,
        **residual_cfg(s),
        **post_cfg(s),
        **act_bf16_cfg(s),
        **rq_cfg(s),
    )
    return info


def post_cfg(s: Stage) -> dict:
    """A post layer's constants (ops/activation.py's table and types); neutral ones without one."""
    p = s.post
    out = {"post": 0, "post_seg": 0, "post_sd": 0, "post_fo": 0, "post_min": 0, "post_lo": 0, "post_hi": 0,
           "post_size": 1, "post_table": "{0}", "post_text": "", "post_float": 0, "post_fn": 0, "post_a": "0.0f",
           "post_b": "0.0f", "post_elo": 0, "post_ehi": 0, "post_c1": "{0.0f}", "post_c0": "{0.0f}", "post_rules": 1}
    if p is None:
        return out
    out.update(post=1 if p.op == "activation" else 2, post_size=int(p.table.size),
               post_table=Code("{\n" + str(c_array(p.table, FixedType(32, 0))) + "}"))
    if isinstance(p.in_type, FloatType):  # cnn_float_post.h: fp32 (1) or bf16 (2)
        bf16 = p.in_type.name == "bf16"
        rules = p.rules if p.rules is not None else np.zeros((1, 2), dtype=np.float32)
        out.update(post_float=2 if bf16 else 1, post_fn=p.fn, post_a=_float_lit(p.params[0]),
                   post_b=_float_lit(p.params[1]), post_elo=p.window[0], post_ehi=p.window[1],
                   post_rules=len(rules), post_c1=Code("{" + ", ".join(_float_lit(v) for v in rules[:, 0]) + "}"),
                   post_c0=Code("{" + ", ".join(_float_lit(v) for v in rules[:, 1]) + "}"),
                   post_text=f"{p.function} {p.in_type}" + (f" (bf16 table, exponents {p.window[0]}..{p.window[1]})"
                                                             if bf16 else " (fp32 kernel: ops/activation.py apply_f32)"))
        return out
    out.update(post_seg=p.seg, post_sd=p.sd, post_fo=p.out_type.frac, post_min=p.in_type.min_code,
               post_lo=p.out_type.min_code, post_hi=p.out_type.max_code,
               post_text=f"{p.function} {p.in_type} -> {p.out_type}" + (f", {p.seg}-bit segments" if p.seg else ""))
    return out


def act_bf16_cfg(s: Stage) -> dict:
    """A bf16 tanh's table scheme (ops/activation.py bf16_table); neutral constants without one."""
    a = s.act_bf16
    if a is None:
        return {"act_size": 1, "act_table": "{0}", "act_elo": 0, "act_ehi": 0, "act_rules": 1, "act_c1": "{0.0f}",
                "act_c0": "{0.0f}", "act_text": ""}
    return {"act_size": int(a.table.size), "act_table": Code("{\n" + str(c_array(a.table, FixedType(32, 0))) + "}"),
            "act_elo": a.window[0], "act_ehi": a.window[1], "act_rules": len(a.rules),
            "act_c1": Code("{" + ", ".join(_float_lit(v) for v in a.rules[:, 0]) + "}"),
            "act_c0": Code("{" + ", ".join(_float_lit(v) for v in a.rules[:, 1]) + "}"),
            "act_text": f"{a.function} bf16 (bf16 table, exponents {a.window[0]}..{a.window[1]})"}


def residual_cfg(s: Stage) -> dict:
    """The fused residual add's constants (ops/add.py numerics); neutral ones without an add."""
    r = s.residual
    out = {"res": r is not None, "ts": ctype(r.skip_type if r else s.conv_type), "ty": ctype(s.out_type),
           "res_shift_a": 0, "res_shift_b": 0, "res_shift": 0, "res_rnd": 0, "res_lo": 0, "res_hi": 0,
           "res_wrap": False, "res_bits": 32, "res_signed": True, "res_relu": bool(r and r.relu),
           "res_text": ""}
    if r is None:
        return out
    out["res_text"] = (f"residual add {r.name}: + skip from {r.skip_name}"
                       + ("" if s.is_float else f" ({r.skip_type}), shifts {r.shift_conv} / {r.shift_skip}, "
                          f"srs {r.shift}") + (", relu" if r.relu else ""))
    t = s.out_type
    if isinstance(t, FixedType):
        sym = t.saturation.value == "symmetric" and t.signed
        out.update(res_shift_a=r.shift_conv, res_shift_b=r.shift_skip, res_shift=r.shift,
                   res_rnd=list(RND).index(t.rounding.value), res_lo=-t.max_code if sym else t.min_code,
                   res_hi=t.max_code, res_wrap=t.saturation.value == "none", res_bits=t.width, res_signed=t.signed)
    return out


RND = ("floor", "ceil", "symmetric_floor", "symmetric_ceil", "positive_inf", "negative_inf", "symmetric_inf",
       "symmetric_zero", "conv_even", "conv_odd")


def tile_params(s: Stage, lay: StreamLayer, r: int, j: int) -> dict[str, np.ndarray]:
    """The resident blocks of tile (row r, position j), in the kernel's layouts (module docstring of
    cnn_kernels.h)."""
    m, k, n = lay.mmul
    og, kt = lay.out_group, lay.k_tile
    og_pad, kt_pad = round_up(og, n), round_up(kt, k)
    wdt = np.float32 if s.is_float else np.int64
    wsub = np.zeros((kt_pad, og_pad), dtype=wdt)
    wsub[:kt, :og] = s.weight[j * kt:(j + 1) * kt, r * og:(r + 1) * og]
    blocks = wsub.reshape(kt_pad // k, k, og_pad // n, n).transpose(2, 0, 1, 3).reshape(-1)
    out = {"w": blocks}
    def blocks_of(v: np.ndarray) -> np.ndarray:  # (O,) -> one M x N block per channel block (rows repeated)
        b = np.zeros(og_pad, dtype=wdt)
        b[:og] = v[r * og:(r + 1) * og]
        return np.tile(b.reshape(og_pad // n, 1, n), (1, m, 1)).reshape(-1)

    if s.bias is not None and j == 0:
        out["b"] = blocks_of(s.bias)
    if s.rq is not None and j == lay.cas_len - 1:  # the multipliers follow the bias blocks (cnn_kernels.h)
        out["b"] = np.concatenate([out.get("b", np.zeros(0, dtype=wdt)), blocks_of(s.rq)])
    if s.table is not None and j == lay.cas_len - 1:
        if s.is_float:
            out["l"] = s.table.astype(np.float32)
        else:
            out["t"] = s.table[r * og:(r + 1) * og].reshape(-1)
    if s.slope is not None and j == lay.cas_len - 1:
        out["s"] = s.slope[r * og:(r + 1) * og].astype(np.float32)
    return out


def stream_problem(plan: CnnPlan) -> Problem:
    """The stream mapping's placement problem: each stage's kernels a ``cas_num x cas_len`` group,
    read off the plan lowered unplaced (``mapped.place.staging``, kept with the plan); the edges
    are its windows between stages (a skip's and a concat part's included)."""
    from ..mapped.cache import memo

    shapes = tuple(Block(s.name, lay.cas_len, lay.cas_num) for s, lay in zip(plan.stages, plan.layers, strict=True))
    assert len({b.name for b in shapes}) == len(shapes), "stage names repeat"

    def staged():
        at = staging(shapes, plan.device.generation.cascade_serpentine)
        return at, lower(plan, _tiles(plan, at))

    at, mg = memo(plan, "cnn:staged", (), staged)
    return problem(mg, shapes, at, plan.device)


def place_stream(plan: CnnPlan) -> Placement:
    """The one placer (``mapped/place.solve``) on :func:`stream_problem` with the ``greedy-right``
    baseline: each stage right of the one before from column 0, row 0, the layout whose columns
    the stream cost model counts hops on (``StreamLayer.first_col``, ``cnn/perf.py``); then the
    replicas, replica q at column block q // per_col, row block q % per_col of the design's
    bounding box (``cnn/plan.max_replicas`` counts them so)."""
    p = solve(stream_problem(plan), "greedy-right")
    for r, lay in zip(p.rects, plan.layers, strict=True):
        assert (r.column, r.row) == (lay.first_col, 0), (r, lay.first_col)
    width = max(r.column + r.width for r in p.rects)
    height = max(r.row + r.height for r in p.rects)
    per_col = max(1, plan.device.rows // height)
    return replace(p, replicas=tuple(((q // per_col) * width, (q % per_col) * height) for q in range(plan.replicas)))


def place(plan: CnnPlan) -> list[Tile]:
    """Every kernel's tile: :func:`place_stream`'s rectangles and replicas, cascade rows east on
    even array rows and west on odd ones (AIE1)."""
    return _tiles(plan, place_stream(plan))


def _tiles(plan: CnnPlan, placement: Placement) -> list[Tile]:
    idents = stage_idents(plan.stages)
    tiles: list[Tile] = []
    serpentine = plan.device.generation.cascade_serpentine
    for q, (c0, r0) in enumerate(placement.replicas):
        for si, lay in enumerate(plan.layers):
            ident = idents[si]
            rect = placement.rects[si]
            for r in range(lay.cas_num):
                row = r0 + rect.row + r
                for j in range(lay.cas_len):
                    jj = lay.cas_len - 1 - j if (serpentine and row % 2 == 1) else j
                    tiles.append(Tile(f"k_{ident}_r{r}_c{j}" + (f"_p{q}" if plan.replicas > 1 else ""),
                                      f"{ident}_r{r}_c{j}", role_of(lay, j), f"{ident}_cfg",
                                      c0 + rect.column + jj, row, q, si, r, j))
    return tiles


def graph_title(plan: CnnPlan) -> str:
    """The header comment of the stream mapping's ``graph.h`` (lines)."""
    return "\n".join((
        f"ADF graph (UG1079): the stream CNN mapping, {plan.replicas} replica(s) of {plan.tiles_per_replica} kernels.",
        "Windows between stages (each producer row broadcast to the cascade positions that read it), cascades",
        "inside the rows of a convolution, one input PLIO and one output PLIO per last-stage row per replica.",
        "A convolution with a fused residual add: the last tile of row r also reads row r of the skip",
        "producer (or the window of the input PLIO) as one more input window."))


def lower(plan: CnnPlan, tiles: list[Tile] | None = None, costs: dict | None = None) -> MappedGraph:
    """The stream mapping as a mapped graph: one kernel per stage tile and replica (``place``), a
    ``buffer`` link (an ADF window) from each producer row's last tile to every tile of the
    consumer row that reads it (a pooling row reads the producer row of its own index, a
    convolution's cascade position j reads producer row j), ``cascade`` links along a convolution
    row, a fused residual add's skip window into its row's last tile, a folded channel concat's
    windows (cascade position j reads ``lay.sources[j]``: a row of the part's producer, or the input
    PLIO), and per replica one input
    PLIO (``in{q}``) and one output PLIO per last-stage row (``out{q}_{r}``).  No memory tiles.

    Costs (``cnn.perf.stream_costs``, the ``estimate`` pass): every tile of stage i carries
    ``stage:<i>``, the input PLIOs ``plio:in``, the output PLIOs ``plio:out``, a skip link from a
    stage ``skip:<i>``, a concat link from a stage other than the one before ``concat:<i>:<k>``;
    replicas carry copy 0's costs (``costs``: ``stream_costs(plan)`` when the caller has them)."""
    from .perf import stream_costs

    cost = {name: c.cost for name, c in (stream_costs(plan) if costs is None else costs).items()}
    tiles = place(plan) if tiles is None else tiles
    by = {(t.replica, t.stage, t.r, t.j): t for t in tiles}
    idents = stage_idents(plan.stages)
    kernels: list[Kernel] = []
    links: list[Link] = []
    plios: list[Plio] = [Plio(f"in{q}", "in", PLIO_BITS, f"data/in{q}.txt", cost=cost["plio:in"])
                         for q in range(plan.replicas)]
    n_stages = len(plan.layers)

    def producer(q: int, stage: int, row: int) -> Port:
        """The window of row ``row`` of ``stage`` in replica q: its last tile's output (stage -1:
        the replica's input PLIO)."""
        if stage < 0:
            return Port(f"in{q}", "out", 0)
        return Port(by[(q, stage, row, plan.layers[stage].cas_len - 1)].var, "out", 0)

    for t in tiles:
        s, lay = plan.stages[t.stage], plan.layers[t.stage]
        _, h, w = s.geometry.in_shape
        oh, ow = s.out_hw
        last = t.j == lay.cas_len - 1
        window = lay.out_group * oh * ow
        ins: list[int | None] = [lay.in_group * h * w] + ([None] if t.j else [])  # image, cascade
        if last and s.residual is not None:
            assert len(ins) == skip_port(lay), (s.name, len(ins))
            ins.append(window)
        outs = (window * s.up[0] * s.up[1] if last else None,)  # a window, or the cascade
        args = () if lay.kind == "pool" else tuple(f"aieflow_design::{t.sym}_{b}" for b in "wbtls")
        kernels.append(Kernel(t.var, s.name, f"aieflow_cnn::{t.role}<aieflow_design::{t.cfg}>", args,
                              f"kernels/{idents[t.stage]}.cc", (t.col, t.row), tuple(ins), outs, t.replica,
                              cost=cost[f"stage:{t.stage}"]))
        q = t.replica
        k, row = lay.sources[t.j] if lay.sources else (t.stage - 1, t.r if lay.kind == "pool" else t.j)
        links.append(Link("plio" if k < 0 else "buffer", producer(q, k, row), Port(t.var, "in", 0),
                          cost.get(f"concat:{t.stage}:{k}")))
        if not last:
            links.append(Link("cascade", Port(t.var, "out", 0), Port(by[(q, t.stage, t.r, t.j + 1)].var, "in", 1)))
        if last and s.residual is not None:  # the skip producer's row r window (or the input PLIO's)
            k = s.residual.skip_from
            links.append(Link("plio" if k < 0 else "buffer", producer(q, k, t.r), Port(t.var, "in", skip_port(lay)),
                              cost.get(f"skip:{t.stage}")))
        if last and t.stage == n_stages - 1:
            port = f"out{q}_{t.r}"
            plios.append(Plio(port, "out", PLIO_BITS, f"data/{port}.txt", cost=cost["plio:out"]))
            links.append(Link("plio", Port(t.var, "out", 0), Port(port, "in", 0)))
    headers = tuple(f"weights/{t.sym}.h" for t in tiles if not t.replica and plan.layers[t.stage].kind != "pool")
    return MappedGraph(tuple(kernels), (), tuple(plios), tuple(links), headers)


def data_files(plan: CnnPlan, xq: np.ndarray, yq: np.ndarray) -> dict[str, str]:
    """The PLIO files of the stream mapping: frame f goes to replica f mod R in graph iteration
    f div R (``xq`` / ``yq``: whole iterations of frames and their emulated outputs, (N, C, H, W));
    output PLIO ``out{q}_{r}`` carries the channels of the last stage's cascade row r."""
    reps = plan.replicas
    in_t, out_t = plan.stages[0].in_type, plan.stages[-1].out_type
    last = plan.layers[-1]
    c = yq.shape[1]
    per_row = c // last.cas_num
    files = {}
    for q in range(reps):
        files[f"data/in{q}.txt"] = format_values(xq[q::reps].reshape(-1), in_t, words(in_t))
        for r in range(last.cas_num):
            files[f"data/golden_out{q}_{r}.txt"] = format_values(
                yq[q::reps, r * per_row:(r + 1) * per_row].reshape(-1), out_t, words(out_t))
    return files


def project_files(plan: CnnPlan, perf_json: dict, summary: str, xq: np.ndarray, yq: np.ndarray,
                  trace: dict[str, np.ndarray] | None = None) -> dict[str, str]:
    """All project files; ``xq`` / ``yq``: the example frames (quantised, a whole number of graph
    iterations: a multiple of the replicas) and their emulated outputs, written into ``data/``;
    ``trace``: the thesis mapping's later layers' inputs (:func:`.emit_thesis.thesis_files`)."""
    if plan.mapping == "thesis":
        from .emit_thesis import thesis_files

        return thesis_files(plan, perf_json, summary, xq, yq, trace)
    if plan.mapping == "rows":
        from .emit_rows import rows_files

        return rows_files(plan, perf_json, summary, xq, yq)
    idents = stage_idents(plan.stages)
    layers = [layer_cfg(plan, s, lay, idents[i]) for i, (s, lay) in enumerate(zip(plan.stages, plan.layers, strict=True))]
    tiles = place(plan)
    mapped = lower(plan, tiles)
    plio_in = [p for p in mapped.plios if p.direction == "in"]
    plio_out = [p for p in mapped.plios if p.direction == "out"]
    params = {}
    for t in tiles:
        if t.replica:
            continue
        s, lay = plan.stages[t.stage], plan.layers[t.stage]
        if lay.kind == "pool":
            continue
        p = tile_params(s, lay, t.r, t.j)
        wt = s.core.weight
        ot = s.core.output if not s.is_float else s.conv_type
        params[t.sym] = {
            "w": c_array(p["w"], wt), "b": c_array(p["b"], s.out_type if s.is_float else FixedType(32, 0)) if "b" in p else "",
            "t": c_array(p["t"], ot) if "t" in p else "", "l": c_array(p["l"], s.out_type) if "l" in p else "",
            "s": c_array(p["s"], s.out_type) if "s" in p else "",
            "tw": ctype(wt), "tb": "float" if s.is_float else "int32", "to": ctype(s.conv_type),
        }
    iterations = max(1, xq.shape[0] // plan.replicas)
    ctx = {"version": __version__, "device": plan.device, "layers": layers, "iterations": iterations, "graph_var": "cnn_graph",
           "plio_bits": PLIO_BITS, "graph_class": GRAPH_CLASS,
           "perf": perf_json, "summary": summary, "params": params, "plan": plan}
    files = {
        "src/layers.h": ENV.get_template("layers.h.j2").render(**ctx),
        "src/graph.h": graph_header(mapped, GRAPH_CLASS, version=__version__, device=plan.device, title=graph_title(plan)),
        "src/graph.cpp": ENV.get_template("graph.cpp.j2").render(**ctx),
        "x86/harness.cpp": ENV.get_template("x86_harness.cpp.j2").render(**ctx),
        "aie.cfg": ENV.get_template("aie.cfg.j2").render(**ctx),
        "README.md": ENV.get_template("README.md.j2").render(**ctx),
    }
    for L in layers:
        files[f"src/kernels/{L['ident']}.cc"] = ENV.get_template("layer_kernel.cc.j2").render(L=L, version=__version__)
    for sym, p in params.items():
        files[f"src/weights/{sym}.h"] = ENV.get_template("weights.h.j2").render(sym=sym, p=p, version=__version__)
    base = resources.files("aieflow").joinpath("templates")
    for rel, name in STATIC.items():
        files[rel] = base.joinpath(name).read_text()
    files.update(data_files(plan, xq, yq))
    tin, tout = ctype(plan.stages[0].in_type), ctype(plan.stages[-1].out_type)
    files.update(system_files(
        files, device=plan.device, graph_class=GRAPH_CLASS, graph_var="cnn_graph",
        plio_in=[{"var": p.var, "file": p.file, "ctype": tin} for p in plio_in],
        plio_out=[{"var": p.var, "file": p.file, "ctype": tout} for p in plio_out],
        iterations=iterations, samples_per_iteration=plan.replicas,
        classes=[f"aieflow_cnn::{role}<aieflow_design::{L['cfg']}>" for L in layers for role in L["roles"]],
        tiles=mapped.kernels, plio_bits=PLIO_BITS, refuse_hint=f"fewer replicas (cnn: replicas: below {plan.replicas})"))
    return files


def tanh_spec(s: Stage) -> act.TableSpec | None:
    return s.tanh if isinstance(s.tanh, act.TableSpec) else None
