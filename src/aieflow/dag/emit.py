"""Render a DAG design's Vitis project: kernels (Dense from ``templates/kernels/dense.h``, residual
Add, LayerNorm, activation, softmax, matmul and masked mean from ``templates/dag/dag_kernels.h``, the last two on
``templates/kernels/activation_fixed.h``), resident parameters, the ADF graph with
memory-tile shared buffers and their N-D tilings, PLIO data, x86 harness; the Vitis system around
the graph (Makefile, PL movers, system.cfg, XRT host, x86 system run) comes from :mod:`aieflow.vitis`.

PLIO data: one input PLIO writes the graph input into its links' memory tiles, one output PLIO
reads the graph output from its memory tile; both carry each iteration's ``batch`` samples
row-major (``[batch][rows][features]``), 64-bit words per line.  A run-time key padding mask (the
graph's second input) has its own input PLIO (``PLIO_MASK``: ``[batch][keys]`` keep bytes) into the
links of the softmaxes and masked mean poolings that read it.
"""

from __future__ import annotations

from dataclasses import replace
from importlib import resources
from typing import Any

import numpy as np

from .. import __version__
from ..devices import Device
from ..errors import PlanError
from ..families.dense import resident_cascade
from ..families.dense.resident_cascade import tile_var
from ..mapped.adf import graph_header
from ..mapped.ir import Kernel, Link, MappedGraph, Plio, Port, SharedBuffer
from ..mapped.text import PLIO_BITS, c_array, format_values, narrow_output, values_per_word
from ..names import c_ident, comment, unique_idents
from ..numerics.types import FixedType
from ..ops.activation import MASK_TYPE, iexp_up, igelu_shifts
from ..ops.dense import cascade_chunk_lanes
from ..passes.place import Placement
from ..perf.activation import activation_form, softmax_vectorised
from ..templating import environment
from ..vitis import system_files
from .links import DagLink, Endpoint
from .perf import kernel_cost, link_costs, lowered_dag, plio_in_cost, plio_mask_cost
from .plan import (
    DagPlan,
    host_layout,
    mask_input,
    mask_layout,
    masked,
    matmul_dims,
    matmul_transposes,
    matrix_shape,
)

_ENV = environment("dag")
_PROJECT = environment("project")  # the chain's graph.cpp / aie.cfg templates
PLIO_IN = "in_x"
PLIO_OUT = "out_y"
PLIO_MASK = "in_mask"  # a run-time key padding mask (the graph's second input): keep bytes, one row per sample


def idents(plan: DagPlan) -> dict[str, str]:
    return unique_idents(list(plan.compute))


def part_var(ident: str, i: int, pos: int | None = None) -> str:
    """Part ``i``'s kernel; a cascaded matmul's tile at cascade position ``pos`` (the last one, which
    writes the output, is the part's own name)."""
    return f"k_{ident}_p{i}" + ("" if pos is None else f"_c{pos}")


def cascade_var(plan: DagPlan, name: str, ident: str, i: int, pos: int) -> str:
    return part_var(ident, i, None if pos == plan.rows[name].cascade - 1 else pos)


# a cascaded matmul's tile classes by role (dag_kernels.h): the first sends, a middle one passes on, the last stores
CASCADE_CLASS = ("MatMulFirst", "MatMulMiddle", "MatMulLast")


def cascade_class(pos: int, tiles: int) -> str:
    return CASCADE_CLASS[0 if pos == 0 else 2 if pos == tiles - 1 else 1]


def kernel_classes_of(plan: DagPlan, name: str) -> list[str]:
    """The kernel classes of a rows node: its one class, or a cascaded matmul's roles in cascade order."""
    c = plan.rows[name].cascade
    if c == 1:
        return [rows_class(plan.node(name))]
    return list(dict.fromkeys(cascade_class(j, c) for j in range(c)))


def _modes(t) -> tuple[str, str]:
    return (t.rounding.value, t.saturation.value) if isinstance(t, FixedType) else ("conv_even", "saturate")


def _acc_for_add(t) -> str:
    bits = max(t.a.width + t.shift_a, t.b.width + t.shift_b) + 1
    return "acc32" if bits <= 32 else "acc64"


def _acc_for_scale_shift(t) -> str:
    """acc32 where |x m| + |c << SHIFT_T| fits 32 signed bits, else acc64."""
    bits = max(t.input.width + t.scale.width - 1, t.offset.width + t.shift_t) + 1
    return "acc32" if bits <= 32 else "acc64"


# the kernel class of each rows op (templates/dag/dag_kernels.h; bf16: dag_kernels_bf16.h)
ROWS_CLASS = {"add": "ResidualAdd", "add_const": "ConstAdd", "scale_shift": "ScaleShift", "layernorm": "LayerNorm", "activation": "Activation", "softmax": "Softmax",
              "matmul": "MatMul", "masked_mean": "MaskedMean"}


def _is_bf16(node) -> bool:
    t = node.types
    return t is not None and getattr(t, "is_float", False) and t.output.name == "bf16"


# rows ops whose one kernel class serves integers and bf16 (chosen from the config's types)
ONE_CLASS = ("matmul", "masked_mean")


def rows_class(node) -> str:
    if node.op == "softmax" and len(node.inputs) > 1:  # a run-time key padding mask: a second input port
        return "SoftmaxPadded" + ("Bf16" if _is_bf16(node) else "")
    return ROWS_CLASS[node.op] + ("Bf16" if _is_bf16(node) and node.op not in ONE_CLASS else "")


def _float_lit(v: float) -> str:
    return f"{float(np.float32(v)):.9e}f" if v != 0 or not np.signbit(v) else "-0.0f"


def _bf16_info(node) -> dict:
    """The bf16 kernels' table window and rules (ops/activation.bf16_table)."""
    if node.op in ("add", "add_const", "scale_shift"):
        return {"bf16": True}
    if node.op == "layernorm":
        return {"bf16": True, "eps_text": _float_lit(float(np.float32(node.attrs["eps"])))}
    rules = np.asarray(node.params["rules"], dtype=np.float32)
    w = np.asarray(node.params["window"])
    return {"bf16": True, "e_lo": int(w[0]), "e_hi": int(w[1]), "c1": ", ".join(_float_lit(v) for v in rules[:, 0]),
            "c0": ", ".join(_float_lit(v) for v in rules[:, 1])}


def rows_infos(plan: DagPlan, ids: dict[str, str], device: Device) -> dict[str, list[dict]]:
    """Each rows kernel's layers.h configuration, by kind: adds, norms, acts, softmaxes, matmuls, consts,
    means, scales."""
    adds, norms, acts, softmaxes, matmuls, consts, means, scales = [], [], [], [], [], [], [], []
    for name in plan.compute:
        node = plan.node(name)
        if node.op not in ROWS_CLASS:
            continue
        rp = plan.rows[name]
        t = node.types
        if node.op == "masked_mean":  # one type (the input's, ops/masked_mean.py); one output row per sample
            means.append({"name": name, "cfg": f"{ids[name]}_cfg", "samples": rp.rows_per_part, "parts": rp.parts,
                          "tokens": matrix_shape(plan.graph, node.inputs[0], name)[0], "features": rp.features,
                          "mp": rp.pitch_in(1, matrix_shape(plan.graph, node.inputs[0], name)[0]),
                          "ti": t.c_type, "rounding": _modes(t)[0],
                          "types_text": str(t) + (" (accfloat sums, one reciprocal, one rounding to bf16; RND unused)"
                                                  if not isinstance(t, FixedType) else "")})
            continue
        rnd, sat = _modes(t.output)
        common = {"name": name, "cfg": f"{ids[name]}_cfg", "rows": rp.rows_per_part, "features": rp.features,
                  "ip": rp.pitch_in(0, rp.features), "op": rp.pitch_out,
                  "parts": rp.parts, "to": t.output.c_type, "rounding": rnd, "saturation": sat,
                  "shift": getattr(t, "shift", 0), "trans": _transposes(plan, name), "bf16": False,
                  "narrow": narrow_output(t.output)}
        if node.op == "matmul":  # one kernel class for integers and bf16 (dag_kernels.h MatMul)
            m, k, n = matmul_dims(plan.graph, node, plan.operands[name])
            samples, m = rp.block(m)  # whole samples, or a run of one sample's rows
            kc = k // rp.cascade  # a cascade tile's K-slice
            ta, tb = matmul_transposes(node, plan.operands[name])  # transposed views read by the kernel
            matmuls.append({**common, "ta": t.a.c_type, "tb": t.b.c_type, "samples": samples,
                            "m": m, "k": kc, "n": n, "kp": rp.pitch_in(0, k) if rp.cascade == 1 else kc,
                            "cascade": rp.cascade, "k_total": k,
                            "casc_lanes": cascade_chunk_lanes(16, 32 if _is_bf16(node) else 64,
                                                              device.generation.cascade_bits),
                            "trans_a": ta, "trans_b": tb,
                            "types_text": f"a {t.a}, b {t.b}, out {t.output}" + (
                                " (accfloat lanes, one rounding to bf16; SHIFT / RND / SAT unused)"
                                if _is_bf16(node) else "")})
            continue
        if _is_bf16(node):
            common["types_text"] = "bf16"
            common.update(_bf16_info(node))
            common.update(relu=node.attrs.get("activation") == "relu", table=int(np.asarray(
                node.params["table"]).size) if node.op in ("activation", "softmax") else 0,
                function=node.attrs.get("function", ""), variant="bf16 table",
                runtime=node.op == "softmax" and len(node.inputs) > 1, rs=rp.per_sample, mp=rp.pitch_in(1, rp.features))
            if node.op == "add_const":
                common["mq"] = int(np.asarray(node.params["constant_q"]).shape[0])
            {"add": adds, "add_const": consts, "scale_shift": scales, "layernorm": norms, "activation": acts,
             "softmax": softmaxes}[node.op].append(common)
            continue
        if node.op == "add_const":
            consts.append({**common, "ta": t.a.c_type, "tb": t.b.c_type, "acc": _acc_for_add(t),
                           "shift_a": t.shift_a, "shift_b": t.shift_b, "mq": int(node.params["constant_q"].shape[0]),
                           "types_text": f"in {t.a}, constant {t.b}, out {t.output}"})
        elif node.op == "scale_shift":
            scales.append({**common, "ti": t.input.c_type, "ts": t.scale.c_type, "tt": t.offset.c_type,
                           "acc": _acc_for_scale_shift(t), "shift_t": t.shift_t,
                           "types_text": f"in {t.input}, scale {t.scale}, shift {t.offset}, out {t.output}"})
        elif node.op == "add":
            adds.append({**common, "ta": t.a.c_type, "tb": t.b.c_type, "acc": _acc_for_add(t),
                         "shift_a": t.shift_a, "shift_b": t.shift_b, "relu": node.attrs.get("activation") == "relu",
                         "types_text": f"a {t.a}, b {t.b}, out {t.output}"})
        elif node.op == "layernorm":
            norms.append({**common, "ti": t.input.c_type, "eps": t.eps_code,
                          "types_text": f"in {t.input}, gamma {t.gamma}, out {t.output}"})
        elif node.op == "activation":
            gen = device.generation
            form = activation_form(t, gen)
            lut_p = gen.lut_parallel_accesses if form == "lut" else 0
            acts.append({**common, "ti": t.input.c_type, "function": node.attrs["function"], "variant": t.variant,
                         "lut_p": lut_p, "lut_v": gen.lut_repeat_bits // 16 if lut_p else 1, "vec": form == "vector",
                         "poly": form == "polynomial",
                         "ps_pt": igelu_shifts(t.input, t.output) if form == "polynomial" else (0, 1),
                         "form_text": {"lut": f"aie::parallel_lookup, aie::lut<{lut_p}, int16>",
                                       "vector": "vector interpolation, knots read by the scalar unit",
                                       "polynomial": "I-BERT i-GELU per element (activation_fixed.h igelu)"}.get(
                                           form, "scalar loop (activation_fixed.h)"),
                         "table": int(node.params["table"].size), "min": t.input.min_code, "seg": t.segment_bits,
                         "lo": t.output.min_code, "hi": t.output.max_code,
                         "types_text": f"in {t.input}, out {t.output}"})
        else:
            keep = node.params.get("keep")
            mq = 1 if keep is None else int(np.asarray(keep).shape[0])
            if rp.rows_per_part % mq:
                raise PlanError(f"softmax '{name}' holds {rp.rows_per_part} rows per tile, not whole {mq}-row "
                                "attention masks", layer=name, hint="use a batch that splits into whole samples")
            softmaxes.append({**common, "ti": t.input.c_type, "table": t.table_size, "sd": t.index_shift,
                              "vec": softmax_vectorised(t, rp.features, masked(node), len(node.inputs) > 1),
                              "runtime": len(node.inputs) > 1, "rs": rp.per_sample, "mp": rp.pitch_in(1, rp.features),
                              "fo": t.output.frac, "hi": t.output.max_code, "mq": mq,
                              "iexp": t.variant == "integer", "up": iexp_up(t.input.frac),
                              "keep": None if keep is None else [int(v) for v in np.asarray(keep).reshape(-1)],
                              "types_text": f"in {t.input}, out {t.output}"})
    return {"adds": adds, "norms": norms, "acts": acts, "softmaxes": softmaxes, "matmuls": matmuls, "consts": consts,
            "means": means, "scales": scales}


def _transposes(plan: DagPlan, name: str) -> list[dict[str, Any]]:
    """The kernel's in-memory transposes, one per port (``transpose_block<S, A, B>``: [S][A][B] ->
    [S][B][A]): an input received in source layout [samples][R][f run], or the output written as
    [samples][F][rows]; ports that need none get ``on = false``."""
    rp = plan.rows[name]
    out = []
    operands = plan.operands[name]
    if rp.op == "softmax":  # a run-time key padding mask (operand 1) is read as it is
        operands = operands[:1]
    for k, o in enumerate(operands):
        if k < len(rp.in_transposed) and rp.in_transposed[k]:
            r_src, f_src = matrix_shape(plan.graph, o.tensor, name)
            samples, run = rp.block(f_src)
            out.append({"port": "IN" if len(operands) == 1 else "AB"[k], "on": True,
                        "s": samples, "a": r_src, "b": run})
        else:
            out.append({"port": "IN" if len(operands) == 1 else "AB"[k], "on": False, "s": 1, "a": 1, "b": 1})
    if rp.out_transposed:
        samples, run = rp.block(rp.per_sample)
        out.append({"port": "OUT", "on": True, "s": samples, "a": run, "b": rp.features})
    else:
        out.append({"port": "OUT", "on": False, "s": 1, "a": 1, "b": 1})
    return out


def _port_src(plan: DagPlan, ep: Endpoint, ids: dict[str, str]) -> Port:
    """The output port a producer endpoint writes from."""
    if ep.kind == "plio":
        return Port(PLIO_MASK if ep.index == 1 else PLIO_IN, "out", 0)
    if ep.kind == "row":
        p = plan.node(ep.node).plan
        return Port(tile_var(ids[ep.node], ep.index, p.cas_len - 1), "out", 0)
    return Port(part_var(ids[ep.node], ep.index), "out", 0)


def _port_dsts(plan: DagPlan, ep: Endpoint, operand: int, ids: dict[str, str]) -> list[Port]:
    """The input ports a consumer endpoint feeds (a Dense column: every row's tile, broadcast)."""
    if ep.kind == "out":
        return [Port(PLIO_OUT, "in", 0)]
    if ep.kind == "column":
        p = plan.node(ep.node).plan
        return [Port(tile_var(ids[ep.node], r, ep.index), "in", 0) for r in range(p.cas_num)]
    if plan.rows[ep.node].cascade > 1:  # a cascaded matmul's tile at its cascade position
        return [Port(cascade_var(plan, ep.node, ids[ep.node], ep.index, ep.pos), "in", operand)]
    return [Port(part_var(ids[ep.node], ep.index), "in", operand)]


def _cascade_kernels(plan: DagPlan, name: str, ident: str, placement: Placement, device: Device,
                     ins: tuple[int, int], size: int, cost) -> list[Kernel]:
    """A cascaded matmul's tiles: part ``i``'s cascade at positions ``i * cascade ..`` of its rectangle's
    row, laid out in the generation's cascade direction (``Placement.tile``), each reading its K-slices
    of A and B; the cascade in (port 2) after the first, the cascade out before the last."""
    c = plan.rows[name].cascade
    east = not device.generation.cascade_serpentine
    out = []
    for i in range(plan.rows[name].parts):
        for j in range(c):
            out.append(Kernel(cascade_var(plan, name, ident, i, j), name,
                              f"aieflow::{cascade_class(j, c)}<aieflow_design::{ident}_cfg>", (), f"kernels/{ident}.cc",
                              placement.tile(name, 0, i * c + j, east), ins + ((None,) if j else ()),
                              (size if j == c - 1 else None,), cost=cost))
    return out


def lower(plan: DagPlan, placement: Placement, ids: dict[str, str], headers: list[str], device: Device, *,
          costed: bool = True) -> MappedGraph:
    """The DAG design as a mapped graph: Dense cascades and Add / LayerNorm parts on their tiles,
    one memory-tile shared buffer per link shard, the PLIOs (a run-time mask's too).  Dense layers
    lower through the chain's own code (``families/dense/resident_cascade.lower``).  ``costed``: every kernel,
    shard and PLIO carries its cost (``dag/perf.py``: one stage per node, a write and a read stage
    per link, the PLIOs')."""
    costs = {name: kernel_cost(plan, name, device) for name in plan.compute} if costed else {}
    kernels: list[Kernel] = []
    links: list[Link] = []
    for name in plan.compute:
        node = plan.node(name)
        ident = ids[name]
        rect = placement.rect(name)
        if node.op == "dense":
            k, cascades = resident_cascade.lower(node, ident, placement, device, cost=costs.get(name))
            kernels += k
            links += cascades
        else:
            rp = plan.rows[name]
            cls = rows_class(node)
            args = {"add": (), "matmul": (), "masked_mean": (),
                    "layernorm": (f"aieflow_design::{ident}_gamma", f"aieflow_design::{ident}_beta"),
                    "scale_shift": (f"aieflow_design::{ident}_scale", f"aieflow_design::{ident}_shift")}.get(
                node.op, (f"aieflow_design::{ident}_table",))
            size = rp.rows_per_part * rp.pitch_out  # rows at their pitch (plan.row_pitches)
            ins = tuple(rp.rows_per_part * rp.pitch_in(j, rp.features) for j in range(len(node.inputs)))
            if node.op == "matmul":  # A: the part's rows; B: its samples' whole B
                m, k, n = matmul_dims(plan.graph, node, plan.operands[name])
                ins = (rp.rows_per_part * rp.pitch_in(0, k), rp.block(m)[0] * k * n)
                if rp.cascade > 1:  # each tile: its K-slice of both, the cascade in after the first
                    kernels += _cascade_kernels(plan, name, ident, placement, device, (rp.rows_per_part * (k // rp.cascade),
                                                rp.block(m)[0] * (k // rp.cascade) * n), size, costs.get(name))
                    links += [Link("cascade", Port(cascade_var(plan, name, ident, i, j), "out", 0),
                                   Port(cascade_var(plan, name, ident, i, j + 1), "in", 2))
                              for i in range(rp.parts) for j in range(rp.cascade - 1)]
                    continue
            if node.op == "softmax" and len(node.inputs) > 1:  # the run-time mask: one keep row per sample
                ins = (rp.rows_per_part * rp.pitch_in(0, rp.features),
                       rp.rows_per_part // rp.per_sample * rp.pitch_in(1, rp.features))  # rows at the mask's pitch
            if node.op == "masked_mean":  # its samples' [T, E] rows and their mask rows (at the mask's pitch)
                tokens = matrix_shape(plan.graph, node.inputs[0], name)[0]
                ins = (rp.rows_per_part * tokens * rp.features, rp.rows_per_part * rp.pitch_in(1, tokens))
            for i in range(rp.parts):
                kernels.append(Kernel(part_var(ident, i), name, f"aieflow::{cls}<aieflow_design::{ident}_cfg>", args,
                                      f"kernels/{ident}.cc", (rect.column + i, rect.row), ins, (size,),
                                      cost=costs.get(name)))
    buffers: list[SharedBuffer] = []
    out_cost = None
    for link in plan.links:
        write = read = None
        if costed:
            write, read = link_costs(plan, link, device, placement.rect)
            if link.consumer is None:
                out_cost, read = read, None
        buffers += _link_buffers(plan, link, ids, len(buffers), links, write, read)
    plios = (Plio(PLIO_IN, "in", PLIO_BITS, f"data/{PLIO_IN}.txt", cost=plio_in_cost(plan, device) if costed else None),
             Plio(PLIO_OUT, "out", PLIO_BITS, f"data/{PLIO_OUT}.txt", cost=out_cost))
    if mask_input(plan.graph) is not None:
        plios += (Plio(PLIO_MASK, "in", PLIO_BITS, f"data/{PLIO_MASK}.txt",
                       cost=plio_mask_cost(plan, device) if costed else None),)
    return MappedGraph(tuple(kernels), tuple(buffers), plios, tuple(links), tuple(headers))


def _link_buffers(plan: DagPlan, link: DagLink, ids, first: int, links: list[Link], write=None,
                  read=None) -> list[SharedBuffer]:
    out = []
    t = plan.graph.tensors[link.source.tensor].dtype
    for j, sh in enumerate(link.shards):
        var = f"mt{first + j}"
        how = {"dma": "transposed by the read pattern", "producer": "written transposed by its producer",
               "consumer": "transposed by its consumer"}[link.source.transpose_at] if link.source.transposed \
            else "row-major"
        out.append(SharedBuffer(
            var, t.c_type, tuple(sh.dims), tuple(tl for _, tl in sh.writes), tuple(tl for _, tl in sh.reads),
            comment(f"{link.name} ({how}), buffer [features {sh.dims[0]}, rows {sh.dims[1]}, samples {sh.dims[2]}]: "
                    f"{len(sh.writes)} writer(s), {len(sh.reads)} reader(s)"), write, read))
        for w, (ep, _) in enumerate(sh.writes):
            src = _port_src(plan, ep, ids)
            links.append(Link("plio" if src.owner in (PLIO_IN, PLIO_MASK) else "memtile", src, Port(var, "in", w)))
        for r, (ep, _) in enumerate(sh.reads):
            for dst in _port_dsts(plan, ep, link.operand, ids):
                links.append(Link("plio" if dst.owner == PLIO_OUT else "memtile", Port(var, "out", r), dst))
    return out


def plio_text(codes: np.ndarray, t) -> str:
    """Samples row-major, 64-bit words per line (the PLIO file format of the chain's projects)."""
    return format_values(np.asarray(codes).reshape(-1), t, values_per_word(t))


def wire_output(plan: DagPlan, y: np.ndarray) -> np.ndarray:
    """Output samples ``[N, ...]`` as the output PLIO carries them: each row padded with zeros to
    ``plan.out_pitch`` (rows that are not whole 32-bit words, ``plan.output_pitch``)."""
    y = np.asarray(y)
    if not plan.out_pitch:
        return y
    f = y.shape[-1]
    rows = y.reshape(y.shape[0], -1, f)
    return np.concatenate([rows, np.zeros((*rows.shape[:2], plan.out_pitch - f), dtype=y.dtype)], axis=2)


def unwire_output(plan: DagPlan, values: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """The inverse of :func:`wire_output`: the PLIO's values back to samples of ``shape``
    (``[N, ...]``), the rows' padding dropped."""
    if not plan.out_pitch:
        return values.reshape(shape)
    f = shape[-1]
    return values.reshape(shape[0], -1, plan.out_pitch)[:, :, :f].reshape(shape)


def emit_dag(plan: DagPlan, device: Device, placement: Placement, inputs_q: np.ndarray, outputs_q: np.ndarray,
             graph_name: str = "model", mask_q: np.ndarray | None = None) -> dict[str, str]:
    """``mask_q``: the keep bytes of the samples' run-time key padding masks (a model with one)."""
    ids = idents(plan)
    version = __version__
    graph_class = c_ident(graph_name).capitalize() + "Graph"
    files: dict[str, str] = {}
    dense_infos = []
    headers = []
    classes = []
    for name in plan.compute:
        node = plan.node(name)
        ident = ids[name]
        if node.op == "dense":
            L, own = resident_cascade.kernel_files(node, ident, device)
            files.update(own)
            dense_infos.append(L)
            headers += resident_cascade.weight_headers(node, ident)
            classes += resident_cascade.kernel_classes(L)
        else:
            own = kernel_classes_of(plan, name)
            files[f"src/kernels/{ident}.cc"] = _ENV.get_template("rows_kernel.cc.j2").render(
                version=version, name=name, classes=own, cfg=f"{ident}_cfg")
            classes += [f"aieflow::{cls}<aieflow_design::{ident}_cfg>" for cls in own]
            if node.op == "layernorm":
                t = node.types
                g, b = node.params["gamma_q"], node.params["beta_q"]
                pt = ("bfloat16", "bfloat16") if _is_bf16(node) else ("int16", "std::int64_t")
                files[f"src/weights/{ident}_ln.h"] = _ENV.get_template("ln_params.h.j2").render(
                    version=version, name=name, ident=ident, n=len(g), gamma_type=t.gamma, beta_type=t.beta,
                    gamma_ctype=pt[0], beta_ctype=pt[1],
                    gamma_text=c_array(np.asarray(g), t.gamma), beta_text=c_array(np.asarray(b), t.beta))
                headers.append(f"weights/{ident}_ln.h")
            elif node.op == "scale_shift":
                t = node.types
                files[f"src/weights/{ident}_ss.h"] = _ENV.get_template("ln_params.h.j2").render(
                    version=version, name=name, ident=ident, n=len(node.params["scale_q"]), what="scale and shift",
                    a_name="scale", b_name="shift", gamma_type=t.scale, beta_type=t.offset,
                    gamma_ctype=t.scale.c_type, beta_ctype=t.offset.c_type,
                    gamma_text=c_array(np.asarray(node.params["scale_q"]), t.scale),
                    beta_text=c_array(np.asarray(node.params["shift_q"]), t.offset))
                headers.append(f"weights/{ident}_ss.h")
            elif node.op == "add_const":
                q = np.asarray(node.params["constant_q"])
                files[f"src/weights/{ident}_table.h"] = _ENV.get_template("table_params.h.j2").render(
                    version=version, name=name, ident=ident, n=q.size, what=f"the constant's codes ({node.types.b}), "
                    f"[{q.shape[0]} rows][{q.shape[-1]} features]",
                    ctype="bfloat16" if _is_bf16(node) else node.types.b.c_type,
                    table_text=c_array(q.reshape(-1), node.types.b))
                headers.append(f"weights/{ident}_table.h")
            elif node.op in ("activation", "softmax"):
                table = np.asarray(node.params["table"])
                if _is_bf16(node):
                    what = (f"{node.attrs['function']} bf16 results" if node.op == "activation"
                            else "softmax exp bf16 results") + " as bit patterns, [sign][exponent - E_LO][mantissa]"
                    ctype, tt = "std::uint16_t", FixedType(16, 0, False)
                else:
                    what = ("i-GELU constants C1, BC, A" if getattr(node.types, "variant", "") == "polynomial"
                            else "integer exp constants L2, M, B, C, A" if getattr(node.types, "variant", "") == "integer"
                            else f"{node.attrs['function']} ({node.types.variant}) table" if node.op == "activation"
                            else "softmax exp table (2^15 = 1)")
                    ctype, tt = "int32", FixedType(32, 0, True)
                files[f"src/weights/{ident}_table.h"] = _ENV.get_template("table_params.h.j2").render(
                    version=version, name=name, ident=ident, n=len(table), what=what, ctype=ctype,
                    table_text=c_array(table.astype(np.int64), tt))
                headers.append(f"weights/{ident}_table.h")
    rows = rows_infos(plan, ids, device)
    # the estimate's lowering (``perf.lowered_dag``, built once per plan and placement) with this
    # project's weight headers; ``ids`` are ``idents(plan)``, the names it lowered with
    mapped = replace(lowered_dag(plan, placement, device), headers=tuple(headers))
    tin = plan.graph.tensors[plan.graph.inputs[0]].dtype
    tout = plan.graph.tensors[plan.graph.outputs[0]].dtype
    plio_in = [{"var": PLIO_IN, "file": f"data/{PLIO_IN}.txt", "ctype": tin.c_type}]
    if mask_input(plan.graph) is not None:
        plio_in.append({"var": PLIO_MASK, "file": f"data/{PLIO_MASK}.txt", "ctype": MASK_TYPE.c_type})
    plio_out = [{"var": PLIO_OUT, "file": f"data/{PLIO_OUT}.txt"}]
    iterations = max(1, int(inputs_q.shape[0] // plan.batch)) if inputs_q.size else 1
    nodes = []
    for name in plan.compute:
        node = plan.node(name)
        if node.op == "dense":
            p = node.plan
            what = f"{p.in_features} -> {p.out_features}, {p.cas_len} x {p.cas_num} cascade, {p.batch} rows"
        else:
            rp = plan.rows[name]
            what = f"{rp.rows} rows x {rp.features} features in {rp.parts} part(s)"
        nodes.append({"name": name, "op": node.op, "tiles": plan.tiles_of(name), "what": what})
    ctx = dict(
        version=version, device=device, graph_class=graph_class, graph_var="g", tiles=mapped.kernels,
        memtiles=mapped.buffers, plio_in=plio_in, plio_out=plio_out, dense=dense_infos, **rows,
        headers=headers, classes=classes, bf16=any(_is_bf16(plan.node(n)) for n in plan.rows), plio_bits=PLIO_BITS, iterations=iterations, batch=plan.batch, nodes=nodes,
        platform_hint=device.vitis_platform,
    )
    files["src/layers.h"] = _ENV.get_template("layers.h.j2").render(**ctx)
    files["src/graph.h"] = graph_header(mapped, graph_class, version=version, device=device,
                                        title="ADF graph of a DAG design: kernels, cascade chains, memory-tile shared "
                                              "buffers with N-dimensional tilings (fan-out, skip paths, transposes), "
                                              "PLIOs, locations.")
    files["x86/harness.cpp"] = _ENV.get_template("x86_harness.cpp.j2").render(**ctx)
    files["README.md"] = _ENV.get_template("README.md.j2").render(**ctx)
    for chain_file, rel in (("graph.cpp.j2", "src/graph.cpp"), ("aie.cfg.j2", "aie.cfg")):
        files[rel] = _PROJECT.get_template(chain_file).render(**ctx)
    kernels = resources.files("aieflow").joinpath("templates")
    if dense_infos:
        files["src/kernels/dense.h"] = kernels.joinpath("kernels/dense.h").read_text()
        files["src/kernels/requant.h"] = kernels.joinpath("kernels/requant.h").read_text()
        files["src/kernels/cnn_float_post.h"] = kernels.joinpath("cnn/cnn_float_post.h").read_text()  # dense.h includes it
    files["src/kernels/narrow.h"] = kernels.joinpath("kernels/narrow.h").read_text()
    files["src/kernels/dag_kernels.h"] = kernels.joinpath("dag/dag_kernels.h").read_text()
    files["src/kernels/row_recip.h"] = kernels.joinpath("dag/row_recip.h").read_text()
    files["src/kernels/activation_fixed.h"] = kernels.joinpath("kernels/activation_fixed.h").read_text()
    if ctx["bf16"]:
        files["src/kernels/dag_kernels_bf16.h"] = kernels.joinpath("dag/dag_kernels_bf16.h").read_text()
    files[f"data/{PLIO_IN}.txt"] = plio_text(host_layout(plan.graph, inputs_q), tin)  # a patch view: patch order
    if mask_input(plan.graph) is not None:
        files[f"data/{PLIO_MASK}.txt"] = plio_text(mask_layout(plan.graph, mask_q), MASK_TYPE)  # rows padded to words
    files[f"data/golden_{PLIO_OUT}.txt"] = plio_text(wire_output(plan, outputs_q), tout)
    files.update(system_files(
        files, device=device, graph_class=graph_class, graph_var="g",
        plio_in=plio_in,
        plio_out=[{**p, "ctype": tout.c_type, **({"period": plan.out_pitch, "real": int(outputs_q.shape[-1])}
                                                  if plan.out_pitch else {})} for p in plio_out],
        iterations=iterations, samples_per_iteration=plan.batch, classes=classes, tiles=mapped.kernels))
    return files
