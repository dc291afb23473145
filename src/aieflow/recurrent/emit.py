"""The Vitis project of a recurrent mapping (one or several stacked GRU / LSTM layers, each
row-wise or column-wise): AIE kernels, ADF graph, PL FSM, configs.

What is generated (``shared/spec/gru-on-aie.md``; C++ checked against UG1079 / UG1529 / UG1399):

* ``src/rnn_kernels.h`` (static, ``templates/recurrent``): ``RowKernel<C>`` (row reuse rows of one
  gate over the stream-broadcast vector, one packet per row) and the AIE aggregator;
  ``rnn_cascade.h`` (the column-wise chains: ``ColFirst`` / ``ColMid`` / ``ColLast`` /
  ``ColOnly``, partial sums on the cascade, one packet of the chain's rows);
  ``rnn_collect.h`` (ID reordering, shared with the PL), ``rnn_fixed.h`` (ap_fixed casts on codes),
  ``rnn_fsm.h`` (the PL FSM's step, one instantiation per hybrid layer);
* ``src/rnn_config.h``: per layer (``namespace rnn_l<i>``) the kernel configurations, packet
  sources, their rows and words per packet;
* ``src/rnn_cell.h``: per layer the gate math and the layer's output (the next layer's x, zero
  padded, or the dense head), operation by operation as ``ops/recurrent.py`` / ``ops/dense.py``
  emulate them (used by the AIE aggregator and the PL FSM);
* ``src/rnn_weights.h``, ``src/graph.h``, ``src/graph.cpp``: the graph (free-running class kernels,
  stream broadcasts, pktmerges, PLIOs);
* ``pl/rnn_fsm.cpp`` (hybrid layers): one HLS top per layer reading its merged packet streams;
* ``system.cfg`` (``[connectivity]``), ``host.cpp``, ``Makefile``, ``README.md``;
* ``x86/harness.cpp``: runs the graph's own kernel objects (and the FSMs) on x86, step by step.

Stacked layers: layer ``l + 1`` reads layer ``l``'s h_t as its x_t: the AIE aggregator's output
stream is broadcast to the next layer's W x kernels, or the PL FSM's output stream comes back
through the next layer's x PLIO; the next layer runs one step behind (pipelined).

The dense head runs in the aggregation epilogue (the AIE aggregator, or the PL FSM), once per
sequence: it is a few hundred MACs against seq_len steps of the layer, and it needs the last h,
which only the aggregation holds; a separate Dense kernel would add a stream-to-buffer boundary and
a PLIO round trip for that.  Packet IDs: the AIE aggregator asks ``getPacketid``; the PL FSM's
table holds the IDs chosen here, which the x86 harness gives the routes (on hardware compare them
with aiecompiler's packet-switching report).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..devices import Device
from ..errors import PlanError
from ..ir import Node
from ..names import comment
from ..numerics.types import FixedType, Rounding, Saturation
from ..ops import activations as act
from .costs import COMPACT_GROUP_BLOCK, lanes
from .plan import RecurrentMapping, output_kernel

TEMPLATES = Path(__file__).resolve().parent.parent / "templates" / "recurrent"
STATIC = ("rnn_kernels.h", "rnn_cascade.h", "rnn_collect.h", "rnn_fixed.h", "rnn_fsm.h", "rnn_compact.h", "rnn_grid.h")
_RND = {
    Rounding.FLOOR: "R_FLOOR", Rounding.CEIL: "R_CEIL", Rounding.SYM_FLOOR: "R_SYM_FLOOR",
    Rounding.SYM_CEIL: "R_SYM_CEIL", Rounding.POS_INF: "R_POS_INF", Rounding.NEG_INF: "R_NEG_INF",
    Rounding.SYM_INF: "R_SYM_INF", Rounding.SYM_ZERO: "R_SYM_ZERO", Rounding.CONV_EVEN: "R_CONV_EVEN",
    Rounding.CONV_ODD: "R_CONV_ODD",
}
_SAT = {Saturation.WRAP: "S_WRAP", Saturation.SATURATE: "S_SAT", Saturation.SYMMETRIC: "S_SAT_SYM"}


def packet_id(index: int) -> int:
    """The route ID of merge input ``index``: a bijection of 0..31 that differs from the index
    (as aiecompiler's may), so code that confuses the two fails on x86."""
    return (7 * index + 5) % 32


@dataclass(frozen=True)
class Source:
    """One packet source (a row kernel, or a cascade chain's last tile): rows ``base .. base +
    rows - 1`` of the stacked product; a row kernel sends one word per packet, a chain all its
    rows in one packet."""

    is_w: bool
    gate: int
    row0: int
    rows: int
    n_h: int
    column: bool = False

    @property
    def base(self) -> int:
        return self.gate * self.n_h + self.row0

    @property
    def words(self) -> int:
        return self.rows if self.column else 1


@dataclass(frozen=True)
class Layout:
    """Sources and merges of one layer's mapping, in the order the graph declares them."""

    u: tuple[Source, ...]
    w: tuple[Source, ...]
    merges: tuple[tuple[int, ...], ...]  # per merge (aie: per aggregator port): source indices
    lanes: int
    u_cas: int = 1  # tiles per source: 1 (row) or the chain's length (column)
    w_cas: int = 1
    u_column: bool = False
    w_column: bool = False
    compact: bool = False  # the whole cell on one tile (rnn_compact.h): no sources, no merges
    grid: bool = False  # the grid mapping (rnn_grid.h): chains of units, one merge of their h packets
    chains: int = 0  # grid: chains (gate tiles)
    units: int = 0  # grid: hidden units per chain (the stride of its gate-stacked rows)

    @property
    def sources(self) -> tuple[Source, ...]:
        return self.u + self.w

    @property
    def in_pad(self) -> int:
        """What the layer's x is zero-padded to as it arrives: whole lane groups for row kernels
        and chains (they read it by vectors), nothing for a compact tile (it reads x_k by x_k)."""
        return 1 if self.compact or self.grid else self.lanes


def _sources(n_h: int, gates: int, rows: int, is_w: bool, column: bool) -> list[Source]:
    out = []
    for b in range(math.ceil(n_h / rows)):  # block-major: one row block's gates side by side
        for g in range(gates):
            r0 = b * rows
            out.append(Source(is_w, g, r0, min(rows, n_h - r0), n_h, column))
    return out


def _chunks(idx: list[int], size: int) -> list[list[int]]:
    return [idx[i : i + size] for i in range(0, len(idx), size)] if size else []


def layout(mapping: RecurrentMapping, device: Device) -> Layout:
    d = mapping.dims
    if mapping.compact:
        return Layout((), (), (), lanes(device.generation, d.pair), compact=True)
    if mapping.grid:
        return Layout((), (), (), lanes(device.generation, d.pair), grid=True, chains=mapping.chains,
                      units=mapping.recurrent.rows, u_cas=mapping.chain_len)
    uc, wc = mapping.recurrent.distribution == "column", mapping.input.distribution == "column"
    u = _sources(d.n_h, d.gates, mapping.recurrent.rows, False, uc)
    w = _sources(d.n_h, d.gates, mapping.input.rows, True, wc)
    ui = list(range(len(u)))
    wi = [len(u) + i for i in range(len(w))]
    if mapping.aggregation == "hybrid":
        merges = _chunks(ui, mapping.u_fanin) + _chunks(wi, mapping.w_fanin)
    else:
        uch, wch = _chunks(ui, mapping.u_fanin), _chunks(wi, mapping.w_fanin)
        merges = [(uch[p] if p < len(uch) else []) + (wch[p] if p < len(wch) else []) for p in range(mapping.u_merges)]
    return Layout(tuple(u), tuple(w), tuple(tuple(m) for m in merges if m), lanes(device.generation, d.pair),
                  mapping.recurrent.cas_len if uc else 1, mapping.input.cas_len if wc else 1, uc, wc)


def ns(li: int) -> str:
    """The C++ namespace of layer ``li``'s configuration, cell and weights."""
    return f"rnn_l{li}"


# ----------------------------------------------------------------------------- C++ fragments


def _fx(t: FixedType) -> str:
    return f"rnn::fxtype{{{t.width}, {t.frac}, {'true' if t.signed else 'false'}, rnn::{_RND[t.rounding]}, rnn::{_SAT[t.saturation]}}}"


def _arr(values, per_line: int = 16) -> str:
    vals = list(values)
    lines = [", ".join(vals[i : i + per_line]) for i in range(0, len(vals), per_line)]
    return "{\n    " + ",\n    ".join(lines) + "}" if vals else "{}"


def _f32(v: float) -> str:
    v = np.float32(v)
    if np.isnan(v):
        return "__builtin_nanf(\"\")"
    if np.isinf(v):
        return "__builtin_inff()" if v > 0 else "-__builtin_inff()"
    return f"{float(v).hex()}f" if v != 0 or not np.signbit(v) else "-0.0f"


def _ints(a) -> list[str]:
    return list(map(str, np.asarray(a).astype(np.int64).ravel().tolist()))  # Python ints: no numpy scalar per element


def _floats(a) -> list[str]:
    """Exact C hex literals; finite non-negative-zero values (almost all) take the fast path."""
    flat = np.asarray(a, dtype=np.float32).ravel()
    plain = np.isfinite(flat) & ~((flat == 0) & np.signbit(flat))
    return [f"{v.hex()}f" if ok else _f32(v) for v, ok in zip(flat.astype(np.float64).tolist(), plain.tolist(), strict=True)]


def _wtype(t) -> str:
    if not isinstance(t, FixedType):
        return "float"
    return "int8_t" if t.width <= 8 else "int16_t" if t.width <= 16 else "int32_t"


def _activation(name: str, a: act.Activation, fp32: bool) -> str:
    fn = f"act_{name}"
    if isinstance(a, act.ExactActivation):
        if not fp32:
            raise PlanError(
                f"activation {name}: 'exact' has no fixed-point kernel (the AIE and the PL apply tables)",
                hint=f"use activations: {{{name}: hls4ml}} (the default in fixed point) or an explicit table",
            )
        return f"inline float {fn}(float x) {{ return rnn::{name}_exact(x); }}\n"
    span = 2 * a.limit
    ix = (f"rnn::table_index{{{a.scale.numerator}, {a.scale.denominator}, {span.numerator if span.denominator == 1 else 0}, "
          f"{a.size}, rnn::{_RND[a.index_rounding]}, {'true' if a.index_rounding is Rounding.SYM_FLOOR else 'false'}}}")
    if fp32:
        return (f"static const rnn::table_index {fn.upper()}_IX = {ix};\n"
                f"static const float {fn.upper()}_T[{a.size}] = {_arr(_floats(a.values()), 8)};\n"
                f"inline float {fn}(float x) {{ return {fn.upper()}_T[rnn::index_of_float(x, {fn.upper()}_IX)]; }}\n")
    return (f"static const rnn::table_index {fn.upper()}_IX = {ix};\n"
            f"static const int32_t {fn.upper()}_T[{a.size}] = {_arr(_ints(a.codes()))};\n"
            f"inline int64_t {fn}(int64_t c, int frac) {{\n"
            f"    return rnn::cast({fn.upper()}_T[rnn::index_of_code(c, frac, {fn.upper()}_IX)], {a.entry.frac}, ACC);\n}}\n")


def _sum_cast(terms: list[tuple[str, int]], out: str, out_frac_var: str = "RES") -> str:
    top = max(f for _, f in terms)
    parts = [f"(({e}) << {top - f})" if top > f else f"({e})" for e, f in terms]
    return f"rnn::cast({' + '.join(parts)}, {top}, {out_frac_var})"


def _cell_fixed(node: Node) -> str:
    t = node.types
    fa, fr = t.accum.frac, t.output.frac
    n = node.attrs["hidden_size"]
    if node.op == "gru":
        f1 = max(fa, 0)
        body = f"""    for (int j = 0; j < NH; ++j) {{
        const int64_t z = act_sigmoid(rnn::cast(int64_t(gx[j]) + gh[j], {fa}, ACC), {fa});
        const int64_t r = act_sigmoid(rnn::cast(int64_t(gx[NH + j]) + gh[NH + j], {fa}, ACC), {fa});
        const int64_t rh = rnn::cast(r * gh[2 * NH + j], {2 * fa}, ACC);
        const int64_t cand = act_tanh(rnn::cast(int64_t(gx[2 * NH + j]) + rh, {fa}, ACC), {fa});
        const int64_t omz = (int64_t(1) << {f1}) - (z << {f1 - fa});
        h[j] = static_cast<X>({_sum_cast([("cand * omz", fa + f1), ("int64_t(h[j]) * z", fr + fa)], "RES")});
    }}
"""
    else:
        body = f"""    for (int j = 0; j < NH; ++j) {{
        const int64_t i = act_sigmoid(rnn::cast(int64_t(gx[j]) + gh[j], {fa}, ACC), {fa});
        const int64_t f = act_sigmoid(rnn::cast(int64_t(gx[NH + j]) + gh[NH + j], {fa}, ACC), {fa});
        const int64_t o = act_sigmoid(rnn::cast(int64_t(gx[3 * NH + j]) + gh[3 * NH + j], {fa}, ACC), {fa});
        const int64_t cand = act_tanh(rnn::cast(int64_t(gx[2 * NH + j]) + gh[2 * NH + j], {fa}, ACC), {fa});
        const int64_t cn = {_sum_cast([("cand * i", 2 * fa), ("int64_t(c[j]) * f", fr + fa)], "RES")};
        c[j] = static_cast<X>(cn);
        const int64_t ca = act_tanh(cn, {fr});
        h[j] = static_cast<X>({_sum_cast([("o * ca", 2 * fa)], "RES")});
    }}
"""
    del n
    return body


def _cell_float(node: Node) -> str:
    """fp32 gate math; the new h through ``round_h`` (bf16: round to nearest even, else as is)."""
    if node.op == "gru":
        return """    for (int j = 0; j < NH; ++j) {
        const float z = act_sigmoid(gx[j] + gh[j]);
        const float r = act_sigmoid(gx[NH + j] + gh[NH + j]);
        const float rg = r * gh[2 * NH + j];
        const float cand = act_tanh(gx[2 * NH + j] + rg);
        const float omz = 1.0f - z;
        const float a = cand * omz;
        const float b = h[j] * z;
        h[j] = round_h(a + b);
    }
"""
    return """    for (int j = 0; j < NH; ++j) {
        const float i = act_sigmoid(gx[j] + gh[j]);
        const float f = act_sigmoid(gx[NH + j] + gh[NH + j]);
        const float o = act_sigmoid(gx[3 * NH + j] + gh[3 * NH + j]);
        const float cand = act_tanh(gx[2 * NH + j] + gh[2 * NH + j]);
        const float a = cand * i;
        const float b = c[j] * f;
        c[j] = a + b;
        h[j] = round_h(o * act_tanh(c[j]));
    }
"""


def _head(head: list[Node], fp32: bool, n_h: int, pad_to: int | None = None) -> tuple[str, int]:
    """The dense head as C++ (ops/dense.emulate's arithmetic), and its output size.  ``pad_to``:
    an inner layer of a stack, whose output is h zero-padded to the next layer's vector width."""
    if pad_to is not None:
        return ("inline void head(const X* h, X* y) { for (int i = 0; i < NY; ++i) y[i] = i < NH ? h[i] : X(0); }\n",
                pad_to)
    if not head:
        return "inline void head(const X* h, X* y) { for (int i = 0; i < NH; ++i) y[i] = h[i]; }\n", n_h
    decl, body = [], []
    width = n_h
    for li, d in enumerate(head):
        if d.op in ("activation", "softmax"):
            if fp32:
                raise PlanError(f"a float {d.op} in the head after a recurrent layer has no generated code (fixed point "
                                "has: a table)", layer=d.name, hint="use a fixed-point precision, or emulate")
            src = "h" if li == 0 else f"a{li - 1}"
            dst = "y" if li == len(head) - 1 else f"a{li}"
            if dst != "y":
                body.append(f"    X {dst}[{width}];")
            table = np.asarray(d.params["table"])
            decl.append(f"static const int32_t HT{li}[{table.size}] = {_arr(_ints(table))};")
            body.append(_head_table(d, li, src, dst, width))
            continue
        t = d.types
        w = d.params["weight_q"]
        k, m = w.shape
        if k != width:
            raise PlanError(f"dense layer reads {k} features, its input has {width}", layer=d.name)
        relu = d.attrs.get("activation") == "relu"
        src = "h" if li == 0 else f"a{li - 1}"
        dst = "y" if li == len(head) - 1 else f"a{li}"
        if dst != "y":
            body.append(f"    X {dst}[{m}];")
        b = d.params.get("bias_q")
        if fp32:
            decl.append(f"static const float HW{li}[{k * m}] = {_arr(_floats(w), 8)};")
            decl.append(f"static const float HB{li}[{m}] = {_arr(_floats(b if b is not None else np.zeros(m)), 8)};")
            init = f"HB{li}[j]" if b is not None else "0.0f"
            act_line = "        s = (s >= 0.0f || s != s) ? s : 0.0f;\n" if relu else ""
            if t.output.name == "bf16":  # ops/dense.emulate: the sum rounded to bf16, then the ReLU
                act_line = "        s = rnn::round_bf16(s);\n" + act_line
            body.append(f"""    for (int j = 0; j < {m}; ++j) {{
        RNN_HEAD_PIPELINE
        float s = {init};
        for (int q = 0; q < {k}; ++q) {{ const float p = {src}[q] * HW{li}[q * {m} + j]; s = s + p; }}
{act_line}        {dst}[j] = s;
    }}""")
        else:
            decl.append(f"static const int32_t HW{li}[{k * m}] = {_arr(_ints(w))};")
            decl.append(f"static const int64_t HB{li}[{m}] = {_arr(_ints(b if b is not None else np.zeros(m, dtype=np.int64)))};")
            out = t.output
            act_line = "        y0 = y0 < 0 ? 0 : y0;\n" if relu else ""
            body.append(f"""    for (int j = 0; j < {m}; ++j) {{
        RNN_HEAD_PIPELINE
        int64_t s = 0;
        for (int q = 0; q < {k}; ++q) s += int64_t({src}[q]) * HW{li}[q * {m} + j];
        s = rnn::wrap(s + (HB{li}[j] << {t.bias_shift}), {t.acc_bits}, true);
        int64_t y0 = rnn::saturate(rnn::round_shift(s, {t.shift}, rnn::{_RND[out.rounding]}), {_fx(out)});
{act_line}        {dst}[j] = static_cast<X>(y0);
    }}""")
        width = m
    text = "\n".join(decl) + "\ninline void head(const X* h, X* y) {\n" + "\n".join(body) + "\n}\n"
    return text, width


def head_tables(head: list[Node]) -> bool:
    """Whether the head computes an activation or softmax (then the project ships activation_fixed.h)."""
    return any(d.op in ("activation", "softmax") for d in head)


def _head_table(d: Node, li: int, src: str, dst: str, n: int) -> str:
    """An activation or softmax of the head as C++: ``activation_fixed.h`` (ops/activation.py's
    integer definitions) on the layer's table ``HT<li>``."""
    t = d.types
    if d.op == "softmax":
        return f"""    {{
        int32_t e[{n}];
        aieflow_act::softmax_row({src}, {dst}, {n}, HT{li}, {t.table_size}, {t.index_shift}, {t.output.frac}, {t.output.max_code}, e);
    }}"""
    return (f"    for (int j = 0; j < {n}; ++j) {dst}[j] = static_cast<X>(aieflow_act::lookup(HT{li}, int64_t({src}[j]) - "
            f"({t.input.min_code}), {t.segment_bits}, {t.output.min_code}, {t.output.max_code}));")


def padded(n: int, lane: int) -> int:
    return math.ceil(n / lane) * lane


def cell_header(layers: list[Node], head: list[Node], lays: list[Layout]) -> str:
    """Every layer's gate math and output, each in its namespace (``rnn_l<i>::cell`` functions and
    the ``rnn_l<i>::Cell`` struct the aggregator and the FSM are instantiated with)."""
    lines = ["// Gate math and outputs of this design's recurrent layers (and the dense head after the last),",
             "// operation by operation as the emulator (ops/recurrent.py, ops/dense.py).  Generated by aieflow;",
             "// plain C++ (AIE, HLS, x86).", "#pragma once", "", "#include <cstdint>", "", '#include "rnn_fixed.h"',
             *(['#include "activation_fixed.h"'] if head_tables(head) else []), "",
             "// Vitis HLS (the PL FSM's head): one output per cycle, the product loop unrolled (UG1399,",
             "// pragma HLS pipeline on an outer loop).  Nothing on the AIE or x86.",
             "#ifdef __SYNTHESIS__", '#define RNN_HEAD_PIPELINE _Pragma("HLS PIPELINE II=1")', "#else",
             "#define RNN_HEAD_PIPELINE", "#endif", ""]
    for li, (node, lay) in enumerate(zip(layers, lays, strict=True)):
        last = li == len(layers) - 1
        pad_to = None if last else padded(node.attrs["hidden_size"], lays[li + 1].in_pad)
        lines.append(_cell_one(node, head if last else [], padded(node.attrs["hidden_size"], lay.lanes), ns(li), pad_to))
    return "\n".join(lines) + "\n"


def _cell_one(node: Node, head: list[Node], n_hp: int, space: str, pad_to: int | None) -> str:
    t = node.types
    fp32 = t.is_float
    lines = [f"// ---- layer {comment(node.name)} ({node.op.upper()})", f"namespace {space} {{", "namespace cell {", ""]
    lines.append(f"using X = {'float' if fp32 else 'int32_t'};")
    lines.append(f"constexpr int NH = {node.attrs['hidden_size']};")
    lines.append(f"constexpr int NHP = {n_hp};")
    lines.append(f"constexpr int STEPS = {node.attrs['seq_len']};")
    lines.append(f"constexpr bool SEQUENCES = {'true' if node.attrs['return_sequences'] else 'false'};")
    if not fp32:
        lines.append(f"constexpr rnn::fxtype ACC = {_fx(t.accum)};")
        lines.append(f"constexpr rnn::fxtype RES = {_fx(t.output)};")
    lines.append(_activation("sigmoid", t.sigmoid, fp32))
    lines.append(_activation("tanh", t.tanh, fp32))
    if fp32:
        lines.append("// the state h as the U h MACs read it and the layer outputs it: "
                     + ("bf16 (rnn_fixed.h round_bf16: nearest, ties to even)" if t.output.name == "bf16" else "fp32"))
        lines.append("inline float round_h(float v) { return "
                     + ("rnn::round_bf16(v)" if t.output.name == "bf16" else "v") + "; }")
    head_text, ny = _head(head, fp32, node.attrs["hidden_size"], pad_to)
    lines.append(f"constexpr int NY = {ny};")
    lines.append(head_text)
    lines.append("// One step: gx = W x + b, gh = U h + b' (canonical gate order), h and c updated in place.")
    lines.append("inline void step(const X* gx, const X* gh, X* h, X* c) {")
    lines.append("    (void)c;")
    lines.append(_cell_float(node) if fp32 else _cell_fixed(node))
    lines.append("}")
    lines.append("// Whether the layer's output (or the head's) leaves after step t.")
    lines.append("inline bool emits(int t) { return SEQUENCES || t + 1 == STEPS; }")
    lines.append("inline void output(const X* h, X* y) { head(h, y); }")
    lines.append("")
    lines.append("}  // namespace cell")
    lines.append("// What the aggregator / FSM templates are instantiated with (AggCfg::Cell).")
    lines.append("struct Cell {")
    lines.append("    using X = cell::X;")
    lines.append("    static constexpr int NY = cell::NY;")
    lines.append("    static void step(const X* gx, const X* gh, X* h, X* c) { cell::step(gx, gh, h, c); }")
    lines.append("    static bool emits(int t) { return cell::emits(t); }")
    lines.append("    static void output(const X* h, X* y) { cell::output(h, y); }")
    lines.append("};")
    lines.append(f"}}  // namespace {space}")
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------- configuration


def acc_tag(device: Device, fp32: bool) -> str:
    """The cascade's accumulator: accfloat, or integer lanes wide enough for 32-bit accumulator
    codes: the generation's widest (acc48 on AIE1, acc64 on AIE-ML, whose integer accumulators are
    32 / 64 bits)."""
    if fp32:
        return "accfloat"
    return f"acc{device.generation.widest_accumulator_bits}"


def _acc_bits(tag: str) -> int:
    return {"accfloat": 32, "acc48": 48, "acc64": 64}[tag]


def _kernel_cfg(name: str, node: Node, mapping_rows: int, k: int, lay: Layout, recurrent: bool, column: bool, cas: int,
                device: Device, kind: str = "scalar", pair: tuple[str, str] = ("i16", "i16"), extra: tuple[str, ...] = (),
                h_last: bool = False) -> str:
    """One product's kernel configuration; ``kind``: the kernel (row-wise, or each tile of a cascade
    chain) the mapping was costed with (``RecurrentDims.kernel``: vector forms are re-checked
    here, recurrent/vector.py)."""
    t = node.types
    fp32 = t.is_float
    lane = lay.lanes
    kp = padded(k, lane)
    wt = t.recurrent_weight if recurrent else t.weight
    xtype = "float" if fp32 else "int32_t"
    wtype, vtype, vector, shift, vrnd = _wtype(wt), xtype, False, 0, "R_FLOOR"
    if fp32 and wt.name == "bf16":  # bf16 operands in the MAC lanes, fp32 sums (accfloat) and results
        wtype = vtype = "rnn_bf16_lane"  # config_header: bfloat16 on the AI Engine and x86
    if not fp32 and kind != "scalar":
        from .vector import VectorForm, vector_form

        form = vector_form(node, recurrent, device, pair)
        if not isinstance(form, VectorForm):
            what = "compact tile's product" if lay.compact else "cascade chain" if column else "row kernel"
            raise PlanError(f"the vector {what} is not bit-exact here: {form}", layer=node.name,
                            hint="use mapping: {kernel: scalar} (hls4ml's order on the scalar unit)")
        wtype, vtype = (f"int{int(p[1:])}_t" for p in (pair[1], pair[0]))
        vector, shift, vrnd = True, form.shift, _RND[t.accum.rounding]
    lines = [f"struct {name} {{",
             f"    using W = {wtype};",
             f"    using X = {xtype};",
             f"    using V = {vtype};  // the vector as the kernel keeps it: X, or the MAC's lane type",
             f"    static constexpr bool FP32 = {'true' if fp32 else 'false'};  // float: fp32, or bf16 lanes (W, V)",
             "    // fixed point: aie::mul / aie::mac lanes, bit-exact with hls4ml's per-product casts (recurrent/vector.py)",
             f"    static constexpr bool VECTOR = {'true' if vector else 'false'};",
             f"    static constexpr int SHIFT = {shift};  // product frac - accumulator frac (> 0: rounded per lane)",
             f"    static constexpr int VRND = rnn::{vrnd};",
             f"    static constexpr int ROWS = {mapping_rows};",
             f"    static constexpr int K = {k};",
             f"    static constexpr int KP = {kp};",
             f"    static constexpr int LANES = {lane};",
             f"    static constexpr bool RECURRENT = {'true' if recurrent else 'false'};",
             f"    static constexpr int STEPS = {node.attrs['seq_len']};",
             "    // the aggregator also sends a sequence's last h (one output port, an output kernel beside it):",
             "    // a U kernel drops it at the next sequence's step 0 (plan.output_kernel)",
             f"    static constexpr bool H_LAST = {'true' if recurrent and h_last else 'false'};"]
    if not fp32:
        bt = t.recurrent_bias if recurrent else t.bias
        vin = t.output if recurrent else t.input
        lines += [f"    static constexpr rnn::fxtype ACC = {_fx(t.accum)};",
                  f"    static constexpr int BFRAC = {bt.frac};",
                  f"    static constexpr int PFRAC = {vin.frac + wt.frac};"]
    else:
        lines += ["    static constexpr rnn::fxtype ACC = rnn::fxtype{32, 0, true, rnn::R_FLOOR, rnn::S_WRAP};",
                  "    static constexpr int BFRAC = 0;", "    static constexpr int PFRAC = 0;"]
    if column:
        from ..ops.dense import cascade_chunk_lanes

        tag = acc_tag(device, fp32)
        if not fp32 and t.accum.width >= 32 and not t.accum.signed:
            raise PlanError("the cascade carries accumulator codes as 32-bit signed lanes; an unsigned 32-bit "
                            "accumulator does not fit", layer=node.name, hint="use a signed accumulator type or distribution: row")
        kc = math.ceil(k / cas)
        lines += [f"    // cascade accumulator (rnn_cascade.h picks the tag: {tag} here)",
                  f"    static constexpr int CAS = {cas};",
                  f"    static constexpr int KC = {kc};",
                  f"    static constexpr int GROUPS = {math.ceil(mapping_rows / lane)};",
                  f"    static constexpr int CASC_LANES = {cascade_chunk_lanes(lane, _acc_bits(tag), device.generation.cascade_bits)};"]
    lines += list(extra)
    return "\n".join(lines) + "\n};\n"


def config_header(layers: list[Node], mappings: list[RecurrentMapping], lays: list[Layout], device: Device) -> str:
    text = ["// Configuration of this design's kernels, per layer.  Generated by aieflow.", "#pragma once", "",
            "#include <cstdint>", "", '#include "rnn_cell.h"', '#include "rnn_fixed.h"', ""]
    if any(n.types.is_float and n.types.output.name == "bf16" for n in layers):
        text += ["// bf16 MAC lanes (the kernels' W, V): the AIE API's bfloat16 on the AI Engine and on x86 (the shim",
                 "// defines __AIE_ARCH__ as the AI Engine compiler does).  The PL FSM includes this header for its",
                 "// AggCfg / Cell only, and Vitis HLS has no bfloat16 type: there the alias is float, which no PL",
                 "// code instantiates.",
                 "#ifdef __AIE_ARCH__", "using rnn_bf16_lane = bfloat16;", "#else", "using rnn_bf16_lane = float;",
                 "#endif", ""]
    for li, (node, mapping, lay) in enumerate(zip(layers, mappings, lays, strict=True)):
        text.append(_config_one(node, mapping, lay, device, ns(li)))
    return "\n".join(text)


def _compact_config(node: Node, mapping: RecurrentMapping, lay: Layout, device: Device, space: str) -> str:
    """A compact layer's two products (CUCfg: U h, CWCfg: W x, column form, rows padded to the lanes)
    and the tile's configuration (CCfg), rnn_compact.h."""
    d = mapping.dims
    t = node.types
    fp32 = t.is_float
    lane = lay.lanes
    gp = padded(d.gates * d.n_h, lane)
    room = max(lane, d.gate_form[0] if d.gate_form else 1)  # the gate math's last group reads past the rows
    if not fp32 and t.accum.width >= 32 and not t.accum.signed:
        raise PlanError("the compact tile keeps accumulator codes in 32-bit signed lanes; an unsigned 32-bit "
                        "accumulator does not fit", layer=node.name, hint="use a signed accumulator type or distribution: row")
    kinds = (d.kernel("u", "compact"), d.kernel("w", "compact"))
    wrap = 0 if fp32 or t.accum.saturation is not Saturation.WRAP else t.accum.width

    def extra() -> tuple[str, ...]:
        return (f"    static constexpr int GN = {d.gates * d.n_h};  // real rows (gates x hidden)",
                f"    static constexpr int GP = {gp};  // rows padded to the lanes",
                f"    static constexpr int WRAP_BITS = {wrap};  // vector finish: the accumulator's wrap (0: none needed)",
                f"    static constexpr int BLOCK = {COMPACT_GROUP_BLOCK};  // lane groups per pass over the columns")

    vrnd = "-1"
    if not fp32 and "vector_round" in kinds:
        vrnd = f"rnn::{_RND[t.accum.rounding]}"
    return "\n".join([
        f"// ---- layer {comment(node.name)}: {mapping.describe()}", f"namespace {space} {{", "",
        _kernel_cfg("CUCfg", node, d.gates * d.n_h, d.n_h, lay, True, False, 1, device, kinds[0], d.pair, extra()),
        _kernel_cfg("CWCfg", node, d.gates * d.n_h, d.n_in, lay, False, False, 1, device, kinds[1], d.pair, extra()),
        "// The compact tile: products, gate math, sizes (rnn_compact.h CompactCell).",
        "struct VGates;  // the vector gate math (rnn_vgates.h), where it is bit-exact",
        "struct VHead;  // the vector dense head (rnn_vgates.h), where it is bit-exact",
        "struct CCfg {",
        f"    using X = {'float' if fp32 else 'int32_t'};",
        f"    using Cell = {space}::Cell;",
        (f"    using Gates = {space}::VGates;  // the gate math and state update: vector (rnn_vgates.h)" if d.gate_form
         else f"    using Gates = {space}::Cell;  // the gate math and state update: scalar (rnn_cell.h)"),
        (f"    using Head = {space}::VHead;  // the layer's output: the dense head on vector lanes (rnn_vgates.h)"
         if d.head_form else f"    using Head = {space}::Cell;  // the layer's output (h, or the dense head): rnn_cell.h"),
        "    using U = CUCfg;",
        "    using Wx = CWCfg;",
        f"    static constexpr int NX = {d.n_in};  // x words per step",
        f"    static constexpr int NH = {d.n_h};",
        f"    static constexpr int NHP = {padded(d.n_h, room) + room};  // h, c with room for the last lane group",
        f"    static constexpr int GP = {gp + room};",
        f"    static constexpr int STEPS = {d.seq_len};",
        f"    static constexpr int VRND = {vrnd};  // the products' per-lane rounding (-1: none)",
        "};", "", f"}}  // namespace {space}", ""])


def _grid_config(node: Node, mapping: RecurrentMapping, lay: Layout, device: Device, space: str) -> str:
    """A grid layer's two products per chain (GUCfg: U h over one column block of KC units, GWCfg: W x;
    the chain's G u gate-stacked rows in column form, padded to the lanes) and the chain tiles'
    configuration (GCfg, rnn_grid.h)."""
    from ..ops.dense import cascade_chunk_lanes
    from .grid import block_merges

    d = mapping.dims
    t = node.types
    lane = lay.lanes
    rows = d.gates * lay.units
    gp = padded(rows, lane)
    kc = math.ceil(d.n_h / lay.u_cas)  # columns of h per chain tile
    room = max(lane, d.gate_form[0])
    hroom = max(lane, d.head_form[0] if d.head_form else 1)
    kinds = (d.kernel("u", "compact"), d.kernel("w", "compact"))
    wrap = 0 if t.accum.saturation is not Saturation.WRAP else t.accum.width
    if t.accum.width >= 32 and not t.accum.signed:
        raise PlanError("the grid's tiles keep accumulator codes in 32-bit signed lanes; an unsigned 32-bit "
                        "accumulator does not fit", layer=node.name, hint="use a signed accumulator type or distribution: row")
    tag = acc_tag(device, False)
    cl = cascade_chunk_lanes(lane, _acc_bits(tag), device.generation.cascade_bits)

    def extra() -> tuple[str, ...]:
        return (f"    static constexpr int GN = {rows};  // real rows of a chain (gates x units per chain)",
                f"    static constexpr int GP = {gp};  // rows padded to the lanes",
                f"    static constexpr int WRAP_BITS = {wrap};  // vector finish: the accumulator's wrap (0: none needed)",
                f"    static constexpr int BLOCK = {COMPACT_GROUP_BLOCK};  // lane groups per pass over the columns")

    vrnd = f"rnn::{_RND[t.accum.rounding]}" if "vector_round" in kinds else "-1"
    return "\n".join([
        f"// ---- layer {comment(node.name)}: {mapping.describe()}", f"namespace {space} {{", "",
        _kernel_cfg("GUCfg", node, rows, kc, lay, True, False, 1, device, kinds[0], d.pair, extra()),
        _kernel_cfg("GWCfg", node, rows, d.n_in, lay, False, False, 1, device, kinds[1], d.pair, extra()),
        "// The grid's chain tiles: products, gate math of a chain's units, sizes (rnn_grid.h).",
        "struct GGates;  // the vector gate math of one chain's units (rnn_vgates.h)",
        "struct VHead;  // the vector dense head (rnn_vgates.h), where it is bit-exact",
        "struct GCfg {",
        "    using X = int32_t;",
        f"    using Cell = {space}::Cell;",
        f"    using Gates = {space}::GGates;  // the gate math and state update of a chain's units (rnn_vgates.h)",
        (f"    using Head = {space}::VHead;  // the layer's output: the dense head on vector lanes (rnn_vgates.h)"
         if d.head_form else f"    using Head = {space}::Cell;  // the layer's output (h, or the dense head): rnn_cell.h"),
        "    using U = GUCfg;",
        "    using Wx = GWCfg;",
        f"    using CAS = {tag};  // gx and the partial sums on a chain's cascade",
        f"    static constexpr int CASC_LANES = {cl};  // lanes per cascade word",
        f"    static constexpr int NX = {d.n_in};  // x words per step",
        f"    static constexpr int NH = {d.n_h};",
        f"    static constexpr int CHAINS = {lay.chains};",
        f"    static constexpr int UNITS = {lay.units};  // hidden units per chain (the last chain: the rest)",
        f"    static constexpr int COLS = {lay.u_cas};  // tiles per chain (column blocks of h; the last: the gate tile)",
        f"    static constexpr int KC = {kc};  // units of h per column block (the last block: the rest)",
        f"    static constexpr int BLOCK_MERGES = {int(block_merges(d.n_h, lay.chains, lay.u_cas) is not None)};"
        "  // 1: a merge per column block (its chains' packets) + the head's",
        f"    static constexpr int NHP = {padded(lay.units, room) + room};  // a chain's h, c with room for the last lane group",
        f"    static constexpr int NHH = {padded(d.n_h, hroom) + hroom};  // the head tile's h",
        f"    static constexpr int GP = {gp + room};",
        f"    static constexpr int GPC = {gp};  // gx words on the cascade",
        f"    static constexpr int STEPS = {d.seq_len};",
        f"    static constexpr int VRND = {vrnd};  // the products' per-lane rounding (-1: none)",
        "};", "", f"}}  // namespace {space}", ""])


def _config_one(node: Node, mapping: RecurrentMapping, lay: Layout, device: Device, space: str) -> str:
    if lay.compact:
        return _compact_config(node, mapping, lay, device, space)
    if lay.grid:
        return _grid_config(node, mapping, lay, device, space)
    d = mapping.dims
    fp32 = node.types.is_float
    n_hp = padded(d.n_h, lay.lanes)
    srcs = lay.sources
    ports = lay.merges
    maxin = max(len(m) for m in ports)
    port_src = [list(m) + [-1] * (maxin - len(m)) for m in ports]
    id_src = []
    for m in ports:
        row = [-1] * 32
        for j, s in enumerate(m):
            row[packet_id(j)] = s
        id_src.append(row)
    text = [f"// ---- layer {comment(node.name)}: {mapping.describe()}", f"namespace {space} {{", "",
            _kernel_cfg("UCfg", node, mapping.recurrent.rows, d.n_h, lay, True, lay.u_column, lay.u_cas, device,
                        d.kernel("u", mapping.recurrent.distribution), d.pair,
                        h_last=output_kernel(mapping.aggregation, device)),
            _kernel_cfg("WCfg", node, mapping.input.rows, d.n_in, lay, False, lay.w_column, lay.w_cas, device,
                        d.kernel("w", mapping.input.distribution), d.pair),
            "// Packet sources (U kernels / chains, then W), merges / aggregator ports and route IDs.",
            "struct AggCfg {",
            f"    using X = {'float' if fp32 else 'int32_t'};",
            f"    using Cell = {space}::Cell;",
            f"    static constexpr int NH = {d.n_h};",
            f"    static constexpr int NHP = {n_hp};",
            f"    static constexpr int GN = {d.gates * d.n_h};",
            f"    static constexpr int STEPS = {d.seq_len};",
            f"    static constexpr int NSRC = {len(srcs)};",
            f"    static constexpr int SRC_BASE[{len(srcs)}] = {_arr([str(s.base) for s in srcs])};",
            f"    static constexpr int SRC_ROWS[{len(srcs)}] = {_arr([str(s.rows) for s in srcs])};",
            f"    static constexpr int SRC_WORDS[{len(srcs)}] = {_arr([str(s.words) for s in srcs])};",
            f"    static constexpr bool SRC_IS_W[{len(srcs)}] = {_arr(['true' if s.is_w else 'false' for s in srcs])};",
            f"    static constexpr int NPORTS = {len(ports)};",
            f"    static constexpr int PORT_N[{len(ports)}] = {_arr([str(len(m)) for m in ports])};",
            f"    static constexpr int PORT_SRC[{len(ports)}][{maxin}] = {{{', '.join(_arr(map(str, r)) for r in port_src)}}};",
            "    // the PL FSM's ID table: source of each packet ID, per merged stream (packet_id(j) for input j)",
            f"    static constexpr int ID_SRC[{len(ports)}][32] = {{{', '.join(_arr(map(str, r)) for r in id_src)}}};",
            "};", "", f"}}  // namespace {space}", ""]
    return "\n".join(text)


def weights_header(layers: list[Node], lays: list[Layout]) -> str:
    out = ["// Weights and biases of every kernel, per layer: row kernels' rows zero-padded to the lanes; cascade",
           "// tiles' column blocks, rows as lanes ([chain][tile][group][k][lane]).  Generated by aieflow.",
           "#pragma once", "", '#include "rnn_config.h"', ""]
    for li, (node, lay) in enumerate(zip(layers, lays, strict=True)):
        out.append(f"namespace {ns(li)} {{")
        out += _compact_weights(node, lay) if lay.compact else _grid_weights(node, lay) if lay.grid else _weights_one(node, lay)
        out.append(f"}}  // namespace {ns(li)}")
        out.append("")
    return "\n".join(out)


def _compact_weights(node: Node, lay: Layout) -> list[str]:
    """A compact tile's weight columns ([k][rows], rows padded to the lanes) and biases."""
    p = node.params
    fmt, dt = _number_format(node)
    out = []
    for tag, w, b, cfg in (("CU", p["recurrent_weight_q"], p["recurrent_bias_q"], "CUCfg"),
                           ("CW", p["weight_q"], p["bias_q"], "CWCfg")):
        w, b = np.asarray(w), np.asarray(b)
        k, gn = w.shape
        gp = padded(gn, lay.lanes)
        wa = np.zeros((k, gp), dtype=dt)
        wa[:, :gn] = w
        ba = np.zeros(gp, dtype=dt)
        ba[:gn] = b
        out.append(f"static const {cfg}::W {tag}_W[{wa.size}] = {_arr(fmt(wa))};")
        out.append(f"static const {cfg}::X {tag}_B[{ba.size}] = {_arr(fmt(ba))};")
        out.append("")
    return out


def _grid_weights(node: Node, lay: Layout) -> list[str]:
    """Per chain r its rows of U and W in column form ([chain][tile][k][rows], the chain's gate-stacked
    rows g u + i = row g n_h + r u + i of the layer, zero past n_h, padded to the lanes; U's columns in
    blocks of kc per chain tile, W x on one tile) and biases ([chain][rows])."""
    p = node.params
    fmt, dt = _number_format(node)
    n_h = node.attrs["hidden_size"]
    gates = 3 if node.op == "gru" else 4
    u = lay.units
    gp = padded(gates * u, lay.lanes)
    out = []
    for tag, w, b, cfg, tiles in (("GU", p["recurrent_weight_q"], p["recurrent_bias_q"], "GUCfg", lay.u_cas),
                                  ("GW", p["weight_q"], p["bias_q"], "GWCfg", 1)):
        w, b = np.asarray(w), np.asarray(b)
        k = w.shape[0]
        kc = math.ceil(k / tiles)
        wa = np.zeros((lay.chains, tiles, kc, gp), dtype=dt)
        ba = np.zeros((lay.chains, gp), dtype=dt)
        for r in range(lay.chains):
            for g in range(gates):
                for i in range(u):
                    j = r * u + i
                    if j < n_h:
                        for c in range(tiles):
                            block = w[c * kc:(c + 1) * kc, g * n_h + j]
                            wa[r, c, :len(block), g * u + i] = block
                        ba[r, g * u + i] = b[g * n_h + j]
        out.append(f"static const {cfg}::W {tag}_W[{wa.size}] = {_arr(fmt(wa))};")
        out.append(f"static const {cfg}::X {tag}_B[{ba.size}] = {_arr(fmt(ba))};")
        out.append("")
    return out


def _number_format(node: Node):
    """(formatter, numpy dtype) of a layer's weight arrays: floats for fp32, integer codes else."""
    return (_floats, np.float32) if node.types.is_float else (_ints, np.int64)


def _weights_one(node: Node, lay: Layout) -> list[str]:
    p = node.params
    fmt, dt = _number_format(node)
    out = []
    for tag, sources, w, b, cfg, k, column, cas in (
        ("U", lay.u, p["recurrent_weight_q"], p["recurrent_bias_q"], "UCfg", node.attrs["hidden_size"], lay.u_column, lay.u_cas),
        ("W", lay.w, p["weight_q"], p["bias_q"], "WCfg", node.attrs["input_size"], lay.w_column, lay.w_cas),
    ):
        w, b = np.asarray(w), np.asarray(b)
        rows = max(s.rows for s in sources)
        if not column:
            kp = padded(k, lay.lanes)
            wa = np.zeros((len(sources), rows, kp), dtype=dt)
            ba = np.zeros((len(sources), rows), dtype=dt)
            for i, s in enumerate(sources):
                cols = s.base + np.arange(s.rows)
                wa[i, : s.rows, :k] = w[:, cols].T
                ba[i, : s.rows] = b[cols]
        else:
            lane = lay.lanes
            groups = math.ceil(rows / lane)
            kc = math.ceil(k / cas)
            wa = np.zeros((len(sources), cas, groups * lane, kc), dtype=dt)  # transposed to [g][k][lane] below
            ba = np.zeros((len(sources), groups * lane), dtype=dt)
            for i, s in enumerate(sources):
                cols = s.base + np.arange(s.rows)
                for j in range(cas):
                    k0, k1 = j * kc, min(k, (j + 1) * kc)
                    wa[i, j, : s.rows, : k1 - k0] = w[k0:k1, cols].T
                ba[i, : s.rows] = b[cols]
            wa = wa.reshape(len(sources), cas, groups, lane, kc).transpose(0, 1, 2, 4, 3)
            c0 = [j * kc for j in range(cas)]
            out.append(f"static const int {tag}_C0[{cas}] = {_arr([str(v) for v in c0])};")
            out.append(f"static const int {tag}_KC[{cas}] = {_arr([str(min(k, v + kc) - v) for v in c0])};")
        out.append(f"static const {cfg}::W {tag}_W[{wa.size}] = {_arr(fmt(wa))};")
        out.append(f"static const {cfg}::X {tag}_B[{ba.size}] = {_arr(fmt(ba))};")
        out.append(f"static const int {tag}_ROWS[{len(sources)}] = {_arr([str(s.rows) for s in sources])};")
        out.append("")
    return out
