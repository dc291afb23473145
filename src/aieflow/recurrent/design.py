"""A compiled recurrent model (one or several stacked GRU / LSTM layers + optional dense head):
mapping, latency, project.

``compile_recurrent`` imports and quantises like ``aieflow.compile``, picks the mapping
(``plan_recurrent``, or ``choose_mapping`` for a config ``target``; per layer for a stack:
``stack.plan_stack`` / ``stack.choose_stack``), and emits the project (``project.py``).  ``RecurrentDesign`` mirrors ``gemm/design.py``: ``predict`` (the emulator, bit
for bit what the generated code computes), ``estimate`` (per-step latency and its breakdown,
interval, sequence latency), ``verify`` (the generated C++ on x86), ``save`` / ``load``,
``summary``.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import numpy as np

from .. import design_schema
from ..atomic import save_directory
from ..config import Config, parse_config
from ..design import Design
from ..devices import Device, get_device
from ..emulation import Emulation
from ..errors import AieflowError, ConfigError, PlanError
from ..graph_io import graph_arrays, graph_from_json, graph_to_json, read_weights, write_weights
from ..integrity import read_project
from ..ir import Graph, Node
from ..perf.bands import summary_line
from ..perf.system import attach as system_attach
from ..perf.system import design_lines as system_lines
from ..perf.system import report_lines as system_report_lines
from .front import SequenceFront, front_dims, split_front
from .model import RecurrentPerformance, estimate_recurrent
from .plan import (
    COMPACT,
    MatvecMapping,
    RecurrentDims,
    RecurrentMapping,
    RecurrentOptions,
    dims_of,
    fit_gate_form,
    grid_gate_cycles,
    plan_recurrent,
    violations,
)
from .select import RecurrentExploration, choose_mapping, mapping_point
from .stack import (
    StackedExploration,
    StackedMapping,
    StackedPerformance,
    choose_stack,
    estimate_stack,
    plan_stack,
    stack_point,
    stack_violations,
)

FORMAT = "aieflow-recurrent-design"
FORMAT_VERSION = 1
ROW_ONLY = {"distribution": "row", "input_distribution": "row"}
COLUMN_ONLY = {"distribution": "column", "input_distribution": "column"}
COMPACT_ONLY = {"distribution": "compact", "input_distribution": None}

log = logging.getLogger(__name__)


HEAD_OPS = ("dense", "activation", "softmax")  # what the aggregation epilogue computes (recurrent/emit._head)


def split_layers(graph: Graph) -> tuple[list[Node], list[Node]]:
    """The recurrent layers (one, or a stack: each inner layer returns its whole sequence, which
    the next reads as its x) and the dense head after them; anything else is a clear PlanError."""
    front = sequence_front(graph)
    skip = {id(n) for n in front.nodes} if front is not None else set()
    nodes = [n for n in graph.nodes if n.op != "reshape" and id(n) not in skip]
    rec = [n for n in nodes if n.op in ("gru", "lstm")]
    names = ", ".join(f"{n.name} ({n.op})" for n in nodes)
    if not rec or nodes[: len(rec)] != rec:
        raise PlanError(
            f"the recurrent mapping takes GRU / LSTM layers (one, or a stack, after 1-D convolutions), then Dense "
            f"layers, activations and a softmax; this model has {names}",
            hint="put the recurrent layers first (1-D convolutions may come before them) and only Dense (+ ReLU) "
            "layers, activations and a softmax after them",
        )
    for a, b in zip(rec, rec[1:], strict=False):
        if not a.attrs["return_sequences"]:
            raise PlanError(f"layer {b.name} reads only the last step of {a.name}; a stack passes every step's h on",
                            layer=a.name, hint="feed the next recurrent layer the whole output sequence")
        if b.inputs[0] != a.outputs[0]:
            raise PlanError(f"layer {b.name} does not read {a.name}'s output directly", layer=b.name,
                            hint="stacked recurrent layers must follow each other with nothing in between")
        if a.types is not None and b.types is not None:
            if a.types.is_float != b.types.is_float:
                raise PlanError(f"{a.name} and {b.name} mix float and fixed point; a stack is generated in one numeric mode",
                                layer=b.name, hint="give every recurrent layer the same precision kind (fp32, or fixed point)")
            if not a.types.is_float and a.types.output != b.types.input:
                raise PlanError(f"{b.name} reads {a.name}'s h as {b.types.input} but {a.name} writes {a.types.output}",
                                layer=b.name, hint=f"give {b.name} input type {a.types.output} (the h type of {a.name})")
    head = nodes[len(rec):]
    for n in head:
        if n.op not in HEAD_OPS:
            raise PlanError(f"layer {n.op!r} after the recurrent layers is not mapped", layer=n.name,
                            hint="the head may hold Dense (+ ReLU) layers, activations and a softmax only")
    if head and rec[-1].attrs["return_sequences"]:
        raise PlanError("a dense head after a recurrent layer that returns the whole sequence is not mapped",
                        layer=rec[-1].name, hint="read the last step (out[:, -1]) before the head")
    return rec, head


def sequence_front(graph: Graph) -> SequenceFront | None:
    """The 1-D convolutions before the first recurrent layer (``front.py``), or None."""
    first = next((n for n in graph.nodes if n.op in ("gru", "lstm")), None)
    return split_front(graph, first) if first is not None else None


def with_head(node: Node, head: list[Node], device: Device) -> RecurrentDims:
    """The layer's dims (checked against the device, errors naming the layer) with the dense
    head's output sizes, so the latency model costs the epilogue too."""
    dims = replace(dims_of(node, device), head=tuple(int(d.params["weight_q"].shape[1]) for d in head if d.op == "dense"))
    if head and node.types is not None and not node.types.is_float:
        from .compact import VectorHead, vector_head

        vh = vector_head(head, dims.n_h, node.types.output, device, "rnn")
        if isinstance(vh, VectorHead):
            dims = replace(dims, head_form=vh.form)
        fitted = fit_gate_form(node, dims, device)  # the head's memory too: the widened tables where they still fit
        if fitted.gate_form != dims.gate_form:  # the grid's gate tiles read the same tables
            fitted = replace(fitted, grid_gates=grid_gate_cycles(node, fitted, device))
        dims = fitted
    return dims


def layer_dims(layers: list[Node], head: list[Node], device: Device, front: SequenceFront | None = None) -> list[RecurrentDims]:
    """Every layer's dims; the first carries the convolution front end, the last the head."""
    dims = [with_head(n, head if i == len(layers) - 1 else [], device) for i, n in enumerate(layers)]
    if front is not None:
        dims[0] = replace(dims[0], front=front_dims(front, device))
    return dims


def is_bf16(node: Node) -> bool:
    """Whether a recurrent layer is bf16 (bf16 operands, fp32 sums and gate math, h in bf16)."""
    return node.types is not None and node.types.is_float and node.types.output.name == "bf16"


def bf16_options(opts: RecurrentOptions, node: Node) -> RecurrentOptions:
    """A bf16 layer's options: every mapping (row-wise, column-wise, compact; AIE or hybrid
    aggregation); without an aggregation asked for, a row / column mapping takes the AIE one."""
    if not is_bf16(node) or opts.distribution == COMPACT or opts.aggregation is not None:
        return opts
    return replace(opts, aggregation="aie")


def search_options(opts: RecurrentOptions, fp32: bool, layer: str | None = None,
                   bf16: bool = False) -> RecurrentOptions | tuple[RecurrentOptions, ...]:
    """What a target's search may pick from.  Fixed point: any distribution of U h and W x (the
    kernels keep hls4ml's order either way) and the compact tile.  fp32: row-wise, column-wise
    and compact, not mixed: the emulator binds one float summation order to both products of a
    layer (lanes + tree for row kernels, sequential from the bias for cascade chains and the
    compact tile); bf16 the same (AIE aggregation unless asked: :func:`bf16_options`)."""
    if not fp32:
        return opts
    d, wd = opts.distribution, opts.input_distribution
    if d and wd and d != wd:
        raise PlanError(f"fp32 with U h {d}-wise and W x {wd}-wise: the emulator has one float summation order per layer",
                        layer=layer, hint="use the same distribution for both, or fixed point")
    if d or wd:
        return replace(opts, distribution=d or wd, input_distribution=d or wd)
    if bf16:
        return (replace(opts, **ROW_ONLY), replace(opts, **COLUMN_ONLY), replace(opts, **COMPACT_ONLY, aggregation=None))
    return (replace(opts, **ROW_ONLY), replace(opts, **COLUMN_ONLY), replace(opts, **COMPACT_ONLY))


def check_emittable(mapping: RecurrentMapping, node: Node) -> None:
    """fp32 and bf16 layers need one summation order for both products (see :func:`search_options`)."""
    if node.types.is_float and mapping.recurrent.distribution != mapping.input.distribution:
        raise PlanError(
            f"fp32 {node.op.upper()} with U h {mapping.recurrent.distribution}-wise and W x "
            f"{mapping.input.distribution}-wise: the emulator has one float summation order per layer",
            layer=node.name, hint="use the same distribution for both (distribution and input_distribution), or fixed point",
        )


def _with_lanes(graph: Graph, mappings: list[RecurrentMapping], device: Device) -> Graph:
    """Bind each fp32 layer's float summation order to its kernels: row kernels sum by lanes
    then a halving tree (``fp32_lanes`` = the lanes), cascade chains sequentially from the bias
    (``fp32_lanes`` = 0, the unmapped order)."""
    from .costs import lanes

    layers, _ = split_layers(graph)
    new = {}
    for node, m in zip(layers, mappings, strict=True):
        if node.types.is_float:
            n_lanes = lanes(device.generation, m.dims.pair) if m.recurrent.distribution == "row" else 0
            new[node.name] = node.evolve(attrs={**dict(node.attrs), "fp32_lanes": n_lanes})
    return graph.with_nodes(tuple(new.get(n.name, n) for n in graph.nodes))


@dataclass(frozen=True)
class SequencePerformance:
    """A recurrent design's ``estimate()`` (``protocol.Performance``): a batch is one sequence, its
    ``interval_ns`` the sequence's steps one after the other, its ``latency_ns`` the sequence
    latency, no memory tiles. ``step_interval_ns`` is the step model's interval per step (what
    TVALID-to-TVALID measures); every other attribute of the step model (``model``: one layer's
    :class:`~aieflow.recurrent.model.RecurrentPerformance` or a stack's
    :class:`~aieflow.recurrent.stack.StackedPerformance`), e.g. ``step_latency_ns``,
    ``breakdown_ns``, ``sequence_latency_ns``, ``steps``, ``tiles``, ``layers``, reads through."""

    model: RecurrentPerformance | StackedPerformance
    macs_per_sample: int  # one sequence's (RecurrentDesign.macs_per_sample)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_") or name == "model":  # copy / pickle probes, and before model is set
            raise AttributeError(name)
        return getattr(self.model, name)

    @property
    def step_interval_ns(self) -> float:
        return self.model.interval_ns

    @property
    def latency_ns(self) -> float:
        return self.model.sequence_latency_ns

    @property
    def interval_ns(self) -> float:
        return self.model.interval_ns * self.model.steps

    @property
    def batch(self) -> int:
        return 1

    @property
    def replicas(self) -> int:
        return 1

    @property
    def throughput_ops_per_s(self) -> float:
        return 2 * self.macs_per_sample / (self.interval_ns * 1e-9)

    @property
    def bound(self) -> str:
        return self.model.bound

    @property
    def tiles_used(self) -> int:
        return self.model.tiles

    @property
    def memory_tiles_used(self) -> int:
        return 0

    def breakdown_parts(self) -> list[tuple[str, float, dict[str, Any]]]:
        """The loop's parts per step, then the head's per sequence."""
        return ([(k, v, {"per": "step"}) for k, v in self.model.breakdown_ns.items()]
                + [(k, v, {"per": "sequence"}) for k, v in self.model.head_breakdown_ns.items()])

    def extra_json(self) -> dict[str, Any]:
        """``step_interval_ns``, then the step model's own keys (step latency and breakdown, fill,
        head; a stack's layers)."""
        own = self.model.to_json()
        own.pop("interval_ns")
        return {"step_interval_ns": self.step_interval_ns, **own}

    def to_json(self) -> dict[str, Any]:
        """design.json's ``performance`` (``design_schema.performance_json``)."""
        return design_schema.performance_json(self)


@dataclass(frozen=True)
class RecurrentDesign:
    graph: Graph
    device: Device
    config: Config
    mapping: RecurrentMapping  # the (first) layer's
    files: dict[str, str] = field(repr=False)
    exploration: RecurrentExploration | StackedExploration | None = None
    source: str = ""
    saved_exploration: dict[str, Any] | None = field(default=None, repr=False)  # a loaded design's, as saved
    stack: StackedMapping | None = None  # two or more layers: every layer's mapping (``mapping`` is the first)

    @property
    def layer(self) -> Node:
        return split_layers(self.graph)[0][0]

    @property
    def layers(self) -> list[Node]:
        return split_layers(self.graph)[0]

    @property
    def mappings(self) -> tuple[RecurrentMapping, ...]:
        return self.stack.layers if self.stack is not None else (self.mapping,)

    @property
    def head(self) -> list[Node]:
        return split_layers(self.graph)[1]

    def _design(self) -> Design:
        return Design(self.graph, self.device, self.config, placement=None, source=self.source)

    def predict(self, x: Any, raw: bool = False) -> np.ndarray:
        """Bit-exact emulation (float in; float out, or output codes with ``raw=True``)."""
        return self._design().predict(x, raw=raw)

    def quantise_input(self, x: Any) -> np.ndarray:
        return self._design().quantise_input(x)

    def run(self, xq: np.ndarray) -> np.ndarray:
        return self._design().run(xq)

    def trace(self, xq: np.ndarray) -> dict[str, np.ndarray]:
        """Emulated value (codes) of every tensor."""
        return self._design().trace(xq)

    def report(self) -> str:
        return "\n".join([self.summary(), design_schema.breakdown_text(self.to_json()["performance"]),
                          *system_report_lines(self)])

    def estimate(self) -> SequencePerformance:
        """Per sequence (:class:`SequencePerformance`) over the step model: one layer's
        (``model.py``) or the stack's, its layers chained (``stack.py``)."""
        if self.stack is not None:
            return SequencePerformance(estimate_stack(self.stack, self.device), self.macs_per_sample())
        return SequencePerformance(estimate_recurrent(self.mapping, self.device), self.macs_per_sample())

    def verify(self, x: Any = None, samples: int = 16, seed: int = 0, **kwargs: Any):
        from .verify import verify

        return verify(self, x, samples=samples, seed=seed, **kwargs)

    def to_json(self) -> dict[str, Any]:
        perf = self.estimate()
        out = {
            **design_schema.header(FORMAT, FORMAT_VERSION, "recurrent"),
            "device": {"key": self.device.key, **self.device.describe()},
            "source": self.source,
            "config": self.config.to_json(),
            "layer": {"name": self.layer.name, "op": self.layer.op, **{k: v for k, v in self.layer.attrs.items()}},
            "head": [n.name for n in self.head],
            "mapping": self.mapping.to_json() if self.stack is None else self.stack.to_json(),
            "resources": {"compute_tiles": perf.tiles, "compute_tiles_available": self.device.compute_tiles,
                          "memory_tiles": 0, "interface_tiles": perf.interface_tiles},
            "performance": system_attach(design_schema.performance_json(perf), self, "recurrent"),
            "exploration": self.exploration.to_json() if self.exploration else self.saved_exploration,
        }
        if self.stack is not None:  # every layer: its attributes, mapping and tiles
            out["layers"] = [{"name": n.name, "op": n.op, **dict(n.attrs), "mapping": m.to_json(), "tiles": m.tiles}
                             for n, m in zip(self.layers, self.stack.layers, strict=True)]
        out["project_files"] = sorted(self.files)
        out["kernels"] = [{"layer": n.name, "u": m.dims.kernel("u", m.recurrent.distribution),
                           "w": m.dims.kernel("w", m.input.distribution),
                           "why": f"{n.types.output.name} lanes" if n.types.is_float else kernel_note(n, m, self.device)}
                          for n, m in zip(self.layers, self.mappings, strict=True)]
        return out

    def macs_per_sample(self) -> int:
        """Multiply-accumulates of one sequence: the convolution front end's, every step's W x and
        U h products of every layer (3 gates for a GRU, 4 for an LSTM), then the dense head."""
        macs = sum(f.c_out * f.kernel * f.c_in * f.t_out for f in self.mapping.dims.front)
        for n in self.layers:
            a = n.attrs
            macs += (3 if n.op == "gru" else 4) * a["hidden_size"] * (a["input_size"] + a["hidden_size"]) * a["seq_len"]
        return macs + sum(n.attrs["in_features"] * n.attrs["out_features"] for n in self.head if n.op == "dense")

    def summary(self) -> str:
        p = self.estimate()
        fixed = "fp32" if self.layer.types.is_float else "fixed point"
        agg = {"hybrid": "PL FSM", "compact": "compact tile", "grid": "grid head tile"}.get(self.mappings[-1].aggregation,
                                                                                          "AIE aggregator")
        if self.stack is None:
            n = self.layer
            parts = ", ".join(f"{k} {v:.1f}" for k, v in p.breakdown_ns.items())
            lines = [
                f"{n.name}: {n.op.upper()} {n.attrs['input_size']} -> {n.attrs['hidden_size']}, {n.attrs['seq_len']} steps"
                f" on {self.device.board} ({fixed})",
                f"  mapping: {self.mapping.describe()}",
                f"  per step: {p.step_latency_ns:.1f} ns ({parts}); interval {p.step_interval_ns:.1f} ns; bound {p.bound}",
            ]
        else:
            lines = [f"{len(self.layers)} stacked recurrent layers, {self.layer.attrs['seq_len']} steps on {self.device.board} "
                     f"({fixed}); layer l + 1 runs one step behind layer l"]
            for i, (n, m, lp) in enumerate(zip(self.layers, self.stack.layers, p.layers, strict=True)):
                lines.append(f"  layer {i} {n.name}: {n.op.upper()} {n.attrs['input_size']} -> {n.attrs['hidden_size']}: "
                             f"{m.describe()}; step {lp.step_latency_ns:.1f} ns, interval {lp.interval_ns:.1f} ns")
            lines.append(f"  per step (slowest layer): {p.step_latency_ns:.1f} ns; interval {p.step_interval_ns:.1f} ns; "
                         f"bound {p.bound}")
        for i, (n, m) in enumerate(zip(self.layers, self.mappings, strict=True)):
            if not n.types.is_float:
                which = f"layer {i} " if self.stack is not None else ""
                lines.append(f"  {which}kernels: U h {m.dims.kernel('u', m.recurrent.distribution)}, "
                             f"W x {m.dims.kernel('w', m.input.distribution)} ({kernel_note(n, m, self.device)})")
        lines += [
            f"  sequence latency: {p.sequence_latency_ns / 1000:.2f} us (head {p.head_ns:.1f} ns); tiles {p.tiles},"
            f" interface tiles {p.interface_tiles}",
            f"  head: {', '.join(h.name for h in self.head) or 'none'} (in the {agg} epilogue)",
            *system_lines(self),
            "  " + summary_line(),
        ]
        return "\n".join(lines)

    def report_html(self, path: str | os.PathLike | None = None, data: Any = None, verify: Any = None) -> str:
        """The self-contained HTML report (``aieflow.html_report.report_html``), written to ``path`` if given."""
        from ..html_report import report_html

        return report_html(self, path, data=data, verify=verify)

    def placement_svg(self) -> str:
        """The placed design on the array (``aieflow report``): the one placer's groups
        (``recurrent/lower.place_recurrent``: the Conv1d front end's column, then each layer's
        rectangle along row 0) drawn per role, each the bounding box of its kernels' tiles in the
        lowering at that placement: a layer's U h block, W x block and aggregator (a compact
        layer's one tile).  These are the blocks the latency model counts switch hops on, not a
        placement by the ADF tools (the kernels are not location-constrained)."""
        from ..passes.place import Placement, Rect
        from ..placement_svg import placement_svg
        from .lower import lower, place_recurrent

        dev = self.device
        layers, _ = split_layers(self.graph)
        front = sequence_front(self.graph)
        placed = place_recurrent(layers, self.mappings, dev, front)
        at = {k.var: k.tile for k in lower(layers, self.mappings, dev, front, placed).kernels}

        def box(label: str, prefix: str) -> list[Rect]:
            cells = [t for v, t in at.items() if v == prefix or v.startswith(prefix + "[")]
            if not cells:
                return []
            c0, r0 = min(c for c, _ in cells), min(r for _, r in cells)
            return [Rect(label, c0, r0, max(c for c, _ in cells) - c0 + 1, max(r for _, r in cells) - r0 + 1)]

        rects = [Rect(f"{c.name} (Conv1d)", *at[f"front[{i}]"], 1, 1) for i, c in enumerate(front.convs)] if front else []
        for li, (n, m) in enumerate(zip(layers, self.mappings, strict=True)):
            if m.compact:
                rects += box(f"{n.name} compact cell", f"c{li}")
                continue
            if m.grid:  # per chain its W x partner, partial-sum tiles and gate tile side by side (the cascade), the head
                rects += [Rect(f"{n.name} chain {r} (W x, gates)", *at[f"gw{li}[{r}]"], m.chain_len + 1, 1)
                          for r in range(m.chains)]
                rects += box(f"{n.name} head", f"gh{li}")
                continue
            rects += box(f"{n.name} U h", f"u{li}") + box(f"{n.name} W x", f"w{li}") + box(f"{n.name} aggregator", f"agg{li}")
        grid = Placement(tuple(rects), max(dev.columns, placed.columns), dev.rows, method="recurrent blocks")
        aggregation = self.mappings[-1].aggregation
        agg = ("compact tile" if aggregation == "compact" else "grid (chains of units)" if aggregation == "grid" else
               "AIE aggregator" if aggregation == "aie" else "PL FSM (hybrid)")
        cells = "+".join(m.dims.cell.upper() for m in self.mappings)
        return placement_svg(grid, (), dev.memory_tile_rows, title=f"{self.layer.name} ({cells}) on {dev.board}, {agg}")

    def save(self, out_dir: str | os.PathLike, force: bool = False) -> Path:
        """design.json (mapping, performance, graph), weights.npz and project/ (atomic)."""

        def write(tmp: Path) -> None:
            meta = self.to_json()
            meta["graph"] = graph_to_json(self.graph)
            meta["mapping_fields"] = mapping_fields(self.mapping)
            if self.stack is not None:
                meta["stack_fields"] = [mapping_fields(m) for m in self.stack.layers]
                meta["stack_notes"] = list(self.stack.notes)
            (tmp / "design.json").write_text(json.dumps(meta, indent=2, default=str))
            write_weights(tmp / "weights.npz", graph_arrays(self.graph))
            for rel, text in self.files.items():
                p = tmp / "project" / rel
                p.parent.mkdir(parents=True, exist_ok=True)
                p.write_text(text)

        return save_directory(out_dir, force, write)


def kernel_note(node: Node, m: RecurrentMapping, device: Device) -> str:
    """Why each fixed-point product runs the kernel it does (summary, design.json)."""
    from .vector import kernel_reasons

    reasons = kernel_reasons(node, device, m.dims.pair,
                             (m.recurrent.distribution == "column", m.input.distribution == "column"))
    out = []
    for name, product, dist, reason in (("U h", "u", m.recurrent.distribution, reasons[0]),
                                        ("W x", "w", m.input.distribution, reasons[1])):
        kind = m.dims.kernel(product, dist)
        if dist == "column" and kind == "scalar" and not m.dims.chain_vector:
            out.append(f"{name}: cascade chains keep hls4ml's order on the scalar unit (saved before vector chains)")
        elif kind == "scalar" and not reason.startswith("scalar"):
            out.append(f"{name}: scalar as configured (kernel: scalar)")
        else:
            out.append(f"{name}: {reason}")
    return "; ".join(out)


def _front(model: Any, device: str | Device, example_input: Any, config: Any, calibration: Any,
           front: Emulation | None) -> tuple[Device, Config, Emulation]:
    """The device, config and quantised graph: ``front`` as given, else the model imported and
    quantised here."""
    if front is not None:
        return front.device, front.config, front
    from ..api import emulate

    dev = get_device(device) if isinstance(device, str) else device
    cfg = config if isinstance(config, Config) else parse_config(config)
    return dev, cfg, emulate(model, device=dev.key, example_input=example_input, config=cfg, calibration=calibration)


def check_lowered(layers: list[Node], mappings: list[RecurrentMapping], dev: Device,
                  front: SequenceFront | None = None) -> None:
    """The check pass (``mapped/transport.py``) on the mappings' lowering (``lower.py``): stream
    ports per core, cascades, PLIOs per interface row; a ``PlanError`` naming the kernel or PLIO
    and what to change where the array cannot move what the mapping needs."""
    from ..mapped.transport import check
    from .lower import lower

    check(lower(layers, mappings, dev, front), dev)


def _buildable(ex: RecurrentExploration | StackedExploration, layers: list[Node], dev: Device,
               front: SequenceFront | None) -> RecurrentExploration | StackedExploration:
    """The exploration with every front point the check pass refuses dropped (never proposed), and
    its pick checked (a refused pick is a ``PlanError`` naming what the array cannot move)."""
    def mappings(point: Any) -> list[RecurrentMapping]:
        m = point.mapping
        return list(m.layers) if isinstance(m, StackedMapping) else [m]

    def ok(point: Any) -> bool:
        try:
            check_lowered(layers, mappings(point), dev, front)
        except PlanError as e:
            log.debug("recurrent front point dropped by the check pass: %s", e)
            return False
        return True

    check_lowered(layers, mappings(ex.chosen), dev, front)
    return replace(ex, front=tuple(p for p in ex.front if ok(p)))


def compile_recurrent(
    model: Any,
    device: str | Device = "vck190",
    example_input: Any = None,
    config: Any = None,
    calibration: Any = None,
    options: RecurrentOptions | list[RecurrentOptions] | None = None,
    front: Emulation | None = None,
    progress: Callable[[str], None] | None = None,
) -> RecurrentDesign:
    """Import, quantise, map and emit.  Without a config ``target`` each layer gets
    ``plan_recurrent``'s mapping for the options (default: the published row-wise hybrid one);
    with a target the search picks among row-wise and column-wise mappings (fp32: not mixed
    within a layer), per layer for a stack, with the layers' resources summed.  ``options``: one
    for every layer, or a list with one per recurrent layer.  ``front``: the model already imported
    and quantised (``aieflow.compile`` passes its front end's result; the model is not read again).
    ``progress``: called with each stage's name (``aieflow.compile``'s stages)."""
    from .project import project_files

    dev, cfg, emu = _front(model, device, example_input, config, calibration, front)
    layers, head = split_layers(emu.graph)
    per, dims = layer_choices(cfg, layers, head, dev, options, sequence_front(emu.graph))
    per = [bf16_options(o, n) for o, n in zip(per, layers, strict=True)]
    searched = [search_options(o, n.types.is_float, n.name, is_bf16(n)) for o, n in zip(per, layers, strict=True)]
    planned = [o if isinstance(s, tuple) else s for o, s in zip(per, searched, strict=True)]
    exploration: RecurrentExploration | StackedExploration | None = None
    stack = None
    if progress:
        progress("search" if cfg.targeted else "plan")
    if cfg.targeted:
        exploration = _buildable(_search(dims, dev, cfg, searched), layers, dev, sequence_front(emu.graph))
        chosen = exploration.chosen.mapping
        log.debug("recurrent search for target '%s': %d mappings costed, front of %d", cfg.target.to_string(),
                  exploration.candidates, len(exploration.front))
    else:
        chosen = _planned(dims, dev, planned, layers)
    if len(layers) == 1:
        mappings = [chosen]
    else:
        stack = chosen
        mappings = list(stack.layers)
    for node, m in zip(layers, mappings, strict=True):
        check_emittable(m, node)
        log.debug("recurrent layer %s: %s", node.name, m.describe())
    check_lowered(layers, mappings, dev, sequence_front(emu.graph))  # the check pass, on the lowering graph.h is written from
    if progress:
        progress("emit")
    graph = _with_lanes(emu.graph, mappings, dev)
    layers, head = split_layers(graph)
    files = project_files(layers, head, mappings, dev, sequence_front(graph))
    design = RecurrentDesign(graph, dev, cfg, mappings[0], files, exploration, emu.source, stack=stack)
    return replace(design, files=system_data(design, example_input))


def system_data(design: RecurrentDesign, example_input: Any = None) -> dict[str, str]:
    """The design's files with its Vitis system (recurrent/project.py ``system_project``) and data:
    every sample of ``example_input`` or, without one, two of aieflow's verification inputs (the
    input type's edge values, then random ones)."""
    from ..verify import verification_inputs
    from .lower import lower
    from .project import system_project
    from .verify import x_file

    g = design.graph
    if example_input is not None:
        xq = design.quantise_input(example_input)
    else:
        xq = verification_inputs(g.tensors[g.inputs[0]].dtype, tuple(g.tensors[g.inputs[0]].shape), 2, 0)
    layers, _ = split_layers(g)
    mappings = list(design.stack.layers) if design.stack else [design.mapping]
    graph = lower(layers, mappings, design.device, sequence_front(g))
    return system_project(design.files, mappings, design.device, x_file(design, xq), np.asarray(design.run(xq)),
                          layers[-1], graph)


def _search(dims: list[RecurrentDims], dev: Device, cfg: Config, searched: list) -> RecurrentExploration | StackedExploration:
    if len(dims) == 1:
        return choose_mapping(dims[0], dev, cfg.target, searched[0])
    return choose_stack(dims, dev, cfg.target, searched)


def _planned(dims: list[RecurrentDims], dev: Device, planned: list, layers: list[Node] | None = None) -> RecurrentMapping | StackedMapping:
    """What compile maps without a target: each layer's ``plan_recurrent`` (a stack: ``plan_stack``);
    ``layers``: the nodes (the grid's gate math is list-scheduled from the layer)."""
    if len(dims) == 1:
        return plan_recurrent(dims[0], dev, planned[0], node=layers[0] if layers else None)
    if any(o.distribution == "grid" for o in planned):
        raise PlanError("a grid layer in a stack is not generated (the grid maps one GRU / LSTM layer)",
                        hint="use distribution compact, row or column for stacked layers")
    return plan_stack(dims, dev, planned)


def layer_choices(cfg: Config, layers: list[Node], head: list[Node], dev: Device,
                  options: RecurrentOptions | list[RecurrentOptions] | None,
                  front: SequenceFront | None = None) -> tuple[list[RecurrentOptions], list[RecurrentDims]]:
    """Each layer's options and dims: the config's ``layers.<name>.mapping`` keys
    (``directives.py``) or ``compile_recurrent``'s ``options`` (not both), and the row kernels'
    kind (vector where bit-exact, ``recurrent/vector.py``; the config's ``kernel`` key forces one)."""
    from .directives import check_head, layer_directives
    from .vector import kernel_reasons

    check_head(cfg, head)
    directives = layer_directives(cfg, layers)
    given = [d for d in directives if not d.empty]
    if options is not None and given:
        raise ConfigError("the recurrent mapping is given twice: in the config (layers.<name>.mapping) and as "
                          "compile_recurrent(options=...)", hint="give it one way")
    if isinstance(options, list | tuple):
        if len(options) != len(layers):
            raise PlanError(f"{len(options)} per-layer recurrent options for {len(layers)} recurrent layers",
                            hint="give one RecurrentOptions per recurrent layer, or one for all")
        per = [o or RecurrentOptions() for o in options]
    elif options is not None:
        per = [options] * len(layers)
    else:
        per = [d.options for d in directives]
    dims = layer_dims(layers, head, dev, front)
    for i, (node, d) in enumerate(zip(layers, directives, strict=True)):
        if d.kernel == "scalar":
            dims[i] = replace(dims[i], kernels=("scalar", "scalar"))
        elif d.kernel == "vector" and "scalar" in dims[i].kernels:
            why = [r for r, k in zip(kernel_reasons(node, dev, dims[i].pair), dims[i].kernels, strict=True) if k == "scalar"]
            raise ConfigError(f"layers.{d.key or node.name}.mapping.kernel: vector is not bit-exact with hls4ml here: "
                              + "; ".join(w.removeprefix("scalar, hls4ml's order: ") for w in why),
                              layer=node.name, hint="use kernel: auto (vector where exact) or scalar")
    return per, dims


def mapping_fields(m: RecurrentMapping) -> dict[str, Any]:
    """Every field of the mapping (``RecurrentMapping.to_json`` is the readable summary)."""
    out = {f.name: getattr(m, f.name) for f in fields(m)}
    out["dims"] = {f.name: getattr(m.dims, f.name) for f in fields(m.dims)}
    out["dims"]["front"] = [f.to_json() for f in m.dims.front]
    out["recurrent"], out["input"] = vars(m.recurrent).copy(), vars(m.input).copy()
    out["notes"] = list(m.notes)
    return out


def mapping_from_fields(d: dict[str, Any]) -> RecurrentMapping:
    dims = dict(d["dims"])
    dims["pair"] = tuple(dims["pair"]) if dims.get("pair") else None
    if "kernels" in dims:
        dims["kernels"] = tuple(dims["kernels"])
    elif dims["pair"] and dims["pair"][0] not in ("fp32", "bf16"):
        dims["kernels"] = ("scalar", "scalar")  # saved before vector fixed-point kernels: the project is scalar
    dims.setdefault("chain_vector", False)  # saved before vector cascade chains: the project's chains are scalar
    return RecurrentMapping(**{**d, "dims": RecurrentDims(**dims), "recurrent": MatvecMapping(**d["recurrent"]),
                               "input": MatvecMapping(**d["input"]), "notes": tuple(d.get("notes", ()))})


def load(path: str | os.PathLike) -> RecurrentDesign:
    """Reload a design written by :meth:`RecurrentDesign.save`: graph and weights (so ``predict``
    needs no model file), the mapping as saved (re-checked against the catalog and re-estimated)
    and the generated project as it is on disk (``verify`` builds those files)."""
    d = Path(path)
    try:
        meta = json.loads((d / "design.json").read_text())
        weights = read_weights(d / "weights.npz")
    except FileNotFoundError as e:
        raise AieflowError(f"'{d}' is not an aieflow design directory: {e.filename} is missing") from None
    except (OSError, ValueError) as e:
        raise AieflowError(f"cannot read recurrent design in '{d}': {e}") from None
    if meta.get("format") != FORMAT or meta.get("version") != FORMAT_VERSION or "mapping_fields" not in meta:
        raise AieflowError(
            f"'{d}/design.json' is format {meta.get('format')!r} version {meta.get('version')!r}; "
            f"this aieflow reads {FORMAT!r} version {FORMAT_VERSION}",
            hint="re-run aieflow compile to write it again",
        )
    device = get_device(meta["device"]["key"] if isinstance(meta["device"], dict) else meta["device"])  # old: the board
    mapping = mapping_from_fields(meta["mapping_fields"])
    stack = None
    if meta.get("stack_fields"):
        stack = StackedMapping(tuple(mapping_from_fields(f) for f in meta["stack_fields"]), tuple(meta.get("stack_notes", ())))
        bad = stack_violations(stack.layers, device)
    else:
        bad = violations(mapping, device)
    if bad:
        raise AieflowError(f"the saved mapping in '{d}' does not fit {device.board}: {'; '.join(bad)}")
    files = read_project(d, meta)
    graph = graph_from_json(meta["graph"], weights)
    return RecurrentDesign(graph, device, parse_config(meta["config"]), mapping, files, None, meta.get("source", ""),
                           saved_exploration=meta.get("exploration"), stack=stack)


def explore_recurrent(model: Any, device: str | Device = "vck190", example_input: Any = None, config: Any = None,
                      calibration: Any = None, front: Emulation | None = None) -> RecurrentExploration | StackedExploration:
    """``aieflow.explore`` for a recurrent model: the Pareto front (tiles, sequence latency, per-step
    interval) of the mappings ``compile`` can generate (row-wise and column-wise, fp32 not mixed
    within a layer; both aggregations, every row reuse, chain length and merge fan-in; per layer
    for a stack) and the one the config's target picks (default: fewest tiles)."""
    dev, cfg, emu = _front(model, device, example_input, config, calibration, front)
    layers, head = split_layers(emu.graph)
    per, dims = layer_choices(cfg, layers, head, dev, None, sequence_front(emu.graph))  # the config's mapping keys constrain the front
    per = [bf16_options(o, n) for o, n in zip(per, layers, strict=True)]
    opts = [search_options(o, n.types.is_float, n.name, is_bf16(n)) for o, n in zip(per, layers, strict=True)]
    ex = replace(_buildable(_search(dims, dev, cfg, opts), layers, dev, sequence_front(emu.graph)),
                 config_names=tuple((n.name, *n.aliases) for n in layers))
    if cfg.targeted:
        return ex
    # without a target compile maps the planner's choice: that is the point explore marks
    planned = [o if isinstance(s, tuple) else s for o, s in zip(per, opts, strict=True)]
    m = _planned(dims, dev, planned)
    check_lowered(layers, list(m.layers) if isinstance(m, StackedMapping) else [m], dev, sequence_front(emu.graph))
    if isinstance(m, StackedMapping):
        return replace(ex, chosen=stack_point(m, dev), performance=estimate_stack(m, dev))
    return replace(ex, chosen=mapping_point(m, dev), performance=estimate_recurrent(m, dev))
