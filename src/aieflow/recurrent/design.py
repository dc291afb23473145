"""A compiled recurrent model (GRU / LSTM layer + optional dense head): mapping, latency, project.

``compile_recurrent`` imports and quantises like ``aieflow.compile``, picks the mapping
(``plan_recurrent``, or ``choose_mapping`` for a config ``target``), and emits the project
(``project.py``).  ``RecurrentDesign`` mirrors ``gemm/design.py``: ``predict`` (the emulator, bit
for bit what the generated code computes), ``estimate`` (per-step latency and its breakdown,
interval, sequence latency), ``verify`` (the generated C++ on x86), ``save`` / ``load``,
``summary``.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import numpy as np

from ..atomic import save_directory
from ..config import Config, parse_config
from ..design import Design
from ..devices import Device, get_device
from ..errors import AieflowError, PlanError
from ..graph_io import graph_arrays, graph_from_json, graph_to_json
from ..ir import Graph, Node
from .model import RecurrentPerformance, estimate_recurrent
from .plan import (
    MatvecMapping,
    RecurrentDims,
    RecurrentMapping,
    RecurrentOptions,
    dims_of,
    plan_recurrent,
    violations,
)
from .select import RecurrentExploration, choose_mapping

FORMAT = "aieflow-recurrent-design"
FORMAT_VERSION = 1
ROW_ONLY = {"distribution": "row", "input_distribution": "row"}


def split_graph(graph: Graph) -> tuple[Node, list[Node]]:
    """The recurrent layer and the dense head after it; anything else is a clear PlanError."""
    nodes = [n for n in graph.nodes if n.op != "reshape"]
    rec = [n for n in nodes if n.op in ("gru", "lstm")]
    if len(rec) != 1 or nodes[0] is not rec[0]:
        names = ", ".join(f"{n.name} ({n.op})" for n in nodes)
        raise PlanError(
            f"the recurrent mapping takes one GRU / LSTM layer first, then Dense layers; this model has {names}",
            hint="stacked recurrent layers (num_layers > 1) are emulated (aieflow.emulate) but not mapped yet",
        )
    head = nodes[1:]
    for n in head:
        if n.op != "dense":
            raise PlanError(f"layer {n.op!r} after the recurrent layer is not mapped", layer=n.name,
                            hint="the head may hold Dense (+ ReLU) layers only")
    if head and rec[0].attrs["return_sequences"]:
        raise PlanError("a dense head after a recurrent layer that returns the whole sequence is not mapped",
                        layer=rec[0].name, hint="read the last step (out[:, -1]) before the head")
    return rec[0], head


def with_head(node: Node, head: list[Node], device: Device) -> RecurrentDims:
    """The layer's dims (checked against the device, errors naming the layer) with the dense
    head's output sizes, so the latency model costs the epilogue too."""
    return replace(dims_of(node, device), head=tuple(int(d.params["weight_q"].shape[1]) for d in head))


def _with_lanes(graph: Graph, node: Node, lanes: int) -> Graph:
    if not node.types.is_float:
        return graph
    mapped = node.evolve(attrs={**dict(node.attrs), "fp32_lanes": lanes})
    return graph.with_nodes(tuple(mapped if n is node else n for n in graph.nodes))


@dataclass(frozen=True)
class RecurrentDesign:
    graph: Graph
    device: Device
    config: Config
    mapping: RecurrentMapping
    files: dict[str, str] = field(repr=False)
    exploration: RecurrentExploration | None = None
    source: str = ""
    saved_exploration: dict[str, Any] | None = field(default=None, repr=False)  # a loaded design's, as saved

    @property
    def layer(self) -> Node:
        return split_graph(self.graph)[0]

    @property
    def head(self) -> list[Node]:
        return split_graph(self.graph)[1]

    def _design(self) -> Design:
        return Design(self.graph, self.device, self.config, placement=None, source=self.source)

    def predict(self, x: Any, raw: bool = False) -> np.ndarray:
        """Bit-exact emulation (float in; float out, or output codes with ``raw=True``)."""
        return self._design().predict(x, raw=raw)

    def quantise_input(self, x: Any) -> np.ndarray:
        return self._design().quantise_input(x)

    def run(self, xq: np.ndarray) -> np.ndarray:
        return self._design().run(xq)

    def estimate(self) -> RecurrentPerformance:
        return estimate_recurrent(self.mapping, self.device)

    def verify(self, x: Any = None, samples: int = 16, seed: int = 0, **kwargs: Any):
        from .verify import verify

        return verify(self, x, samples=samples, seed=seed, **kwargs)

    def to_json(self) -> dict[str, Any]:
        perf = self.estimate()
        return {
            "format": FORMAT,
            "version": FORMAT_VERSION,
            "kind": "recurrent",
            "device": self.device.board,
            "source": self.source,
            "config": self.config.to_json(),
            "layer": {"name": self.layer.name, "op": self.layer.op, **{k: v for k, v in self.layer.attrs.items()}},
            "head": [n.name for n in self.head],
            "mapping": self.mapping.to_json(),
            "performance": perf.to_json(),
            "exploration": self.exploration.to_json() if self.exploration else self.saved_exploration,
        }

    def summary(self) -> str:
        p = self.estimate()
        n = self.layer
        parts = ", ".join(f"{k} {v:.1f}" for k, v in p.breakdown_ns.items())
        lines = [
            f"{n.name}: {n.op.upper()} {n.attrs['input_size']} -> {n.attrs['hidden_size']}, {n.attrs['seq_len']} steps"
            f" on {self.device.board} ({'fp32' if n.types.is_float else 'fixed point'})",
            f"  mapping: {self.mapping.describe()}",
            f"  per step: {p.step_latency_ns:.1f} ns ({parts}); interval {p.interval_ns:.1f} ns; bound {p.bound}",
            f"  sequence latency: {p.sequence_latency_ns / 1000:.2f} us (head {p.head_ns:.1f} ns); tiles {p.tiles},"
            f" interface tiles {p.interface_tiles}",
            f"  head: {', '.join(h.name for h in self.head) or 'none'} (in the {'PL FSM' if self.mapping.aggregation == 'hybrid' else 'AIE aggregator'} epilogue)",
        ]
        return "\n".join(lines)

    def placement_svg(self) -> str:
        """The mapping's blocks on the array (``aieflow report``): U h kernels column by column, then
        the W x kernels, the aggregator in a free slot of the U block or its own column.  These are
        the rectangles the latency model counts switch hops on, not a placement by the ADF tools."""
        from ..passes.place import Placement, Rect
        from ..placement_svg import placement_svg

        m, dev, name = self.mapping, self.device, self.layer.name
        rects = [Rect(f"{name} U h", 0, 0, m.u_columns, m.u_rows)]
        if m.w_tiles:
            rects.append(Rect(f"{name} W x", m.u_columns, 0, m.w_columns, m.w_rows))
        if m.aggregator_tiles:
            col, row = (m.u_columns - 1, m.u_tiles % dev.rows) if not m.agg_columns else (m.u_columns + m.w_columns, 0)
            rects.append(Rect("aggregator", col, row, 1, 1))
        grid = Placement(tuple(rects), max(dev.columns, m.columns), dev.rows, method="recurrent blocks")
        agg = "AIE aggregator" if m.aggregation == "aie" else "PL FSM (hybrid)"
        return placement_svg(grid, (), dev.memory_tile_rows, title=f"{name} ({m.dims.cell.upper()}) on {dev.board}, {agg}")

    def save(self, out_dir: str | os.PathLike, force: bool = False) -> Path:
        """design.json (mapping, performance, graph), weights.npz and project/ (atomic)."""

        def write(tmp: Path) -> None:
            meta = self.to_json()
            meta["graph"] = graph_to_json(self.graph)
            meta["mapping_fields"] = mapping_fields(self.mapping)
            (tmp / "design.json").write_text(json.dumps(meta, indent=2, default=str))
            np.savez(tmp / "weights.npz", **graph_arrays(self.graph))
            for rel, text in self.files.items():
                p = tmp / "project" / rel
                p.parent.mkdir(parents=True, exist_ok=True)
                p.write_text(text)

        return save_directory(out_dir, force, write)


def compile_recurrent(
    model: Any,
    device: str | Device = "vck190",
    example_input: Any = None,
    config: Any = None,
    calibration: Any = None,
    options: RecurrentOptions | None = None,
) -> RecurrentDesign:
    """Import, quantise, map (row-wise; the target's choice with a config ``target``) and emit."""
    from ..api import emulate
    from .project import project_files

    dev = get_device(device) if isinstance(device, str) else device
    cfg = config if isinstance(config, Config) else parse_config(config)
    emu = emulate(model, device=dev.board.lower(), example_input=example_input, config=cfg, calibration=calibration)
    node, head = split_graph(emu.graph)
    opts = options or RecurrentOptions(**ROW_ONLY)
    if opts.distribution not in (None, "row") or opts.input_distribution not in (None, "row"):
        raise PlanError("only the row-wise distribution is generated (the column-wise cascade is estimated only)",
                        layer=node.name, hint="use distribution='row'")
    opts = replace(opts, distribution="row", input_distribution="row")
    exploration = None
    dims = with_head(node, head, dev)
    if cfg.target.searched:
        exploration = choose_mapping(dims, dev, cfg.target, opts)
        mapping = exploration.chosen.mapping
    else:
        mapping = plan_recurrent(dims, dev, opts)
    from .costs import lanes

    graph = _with_lanes(emu.graph, node, lanes(dev.generation, mapping.dims.pair))
    node, head = split_graph(graph)
    files = project_files(node, head, mapping, dev)
    return RecurrentDesign(graph, dev, cfg, mapping, files, exploration, emu.source)


def is_recurrent_design(path: str | os.PathLike) -> bool:
    try:
        return json.loads((Path(path) / "design.json").read_text()).get("format") == FORMAT
    except (OSError, ValueError):
        return False


def mapping_fields(m: RecurrentMapping) -> dict[str, Any]:
    """Every field of the mapping (``RecurrentMapping.to_json`` is the readable summary)."""
    out = {f.name: getattr(m, f.name) for f in fields(m)}
    out["dims"] = {f.name: getattr(m.dims, f.name) for f in fields(m.dims)}
    out["recurrent"], out["input"] = vars(m.recurrent).copy(), vars(m.input).copy()
    out["notes"] = list(m.notes)
    return out


def mapping_from_fields(d: dict[str, Any]) -> RecurrentMapping:
    dims = dict(d["dims"])
    dims["pair"] = tuple(dims["pair"]) if dims.get("pair") else None
    return RecurrentMapping(**{**d, "dims": RecurrentDims(**dims), "recurrent": MatvecMapping(**d["recurrent"]),
                               "input": MatvecMapping(**d["input"]), "notes": tuple(d.get("notes", ()))})


def load(path: str | os.PathLike) -> RecurrentDesign:
    """Reload a design written by :meth:`RecurrentDesign.save`: graph and weights (so ``predict``
    needs no model file), the mapping as saved (re-checked against the catalog and re-estimated)
    and the generated project as it is on disk (``verify`` builds those files)."""
    d = Path(path)
    try:
        meta = json.loads((d / "design.json").read_text())
        weights = np.load(d / "weights.npz")
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
    device = get_device(meta["device"])
    mapping = mapping_from_fields(meta["mapping_fields"])
    bad = violations(mapping, device)
    if bad:
        raise AieflowError(f"the saved mapping in '{d}' does not fit {device.board}: {'; '.join(bad)}")
    proj = d / "project"
    files = {str(p.relative_to(proj)): p.read_text() for p in sorted(proj.rglob("*")) if p.is_file()} if proj.is_dir() else {}
    graph = graph_from_json(meta["graph"], weights)
    return RecurrentDesign(graph, device, parse_config(meta["config"]), mapping, files, None, meta.get("source", ""),
                           saved_exploration=meta.get("exploration"))


def explore_recurrent(model: Any, device: str | Device = "vck190", example_input: Any = None, config: Any = None,
                      calibration: Any = None) -> RecurrentExploration:
    """``aieflow.explore`` for a recurrent model: the Pareto front (tiles, sequence latency, per-step
    interval) of the mappings ``compile`` can generate (row-wise; both aggregations, every row
    reuse and merge fan-in) and the one the config's target picks (default: fewest tiles)."""
    from ..api import emulate

    dev = get_device(device) if isinstance(device, str) else device
    cfg = config if isinstance(config, Config) else parse_config(config)
    emu = emulate(model, device=dev.board.lower(), example_input=example_input, config=cfg, calibration=calibration)
    node, head = split_graph(emu.graph)
    return choose_mapping(with_head(node, head, dev), dev, cfg.target, RecurrentOptions(**ROW_ONLY))


def is_recurrent(state: Any) -> bool:
    """Whether ``api.compile``'s imported model has a GRU / LSTM layer (then this module maps it)."""
    from ..frontends import import_model

    torch = sys.modules.get("torch")  # a torch module says so without a trace (compile imports it next)
    if torch is not None and isinstance(state.model, torch.nn.Module):
        return any(isinstance(m, (torch.nn.GRU, torch.nn.LSTM)) for m in state.model.modules())
    return any(n.op in ("gru", "lstm") for n in import_model(state.model, state.example_input).graph.nodes)
