"""A DAG design (fan-out, residual Add, LayerNorm, Transpose views, Dense) on AIE-ML: the quantised
graph (``predict`` = the bit-exact emulator), the plan and its memory-tile links, the placement,
the generated project, the x86 check and the performance estimate."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from .. import design_schema
from ..atomic import save_directory, write_files
from ..config import Config, parse_config
from ..devices import Device, get_device
from ..emulation import Emulation
from ..errors import AieflowError
from ..graph_io import (
    REDO,
    graph_arrays,
    graph_to_json,
    json_default,
    read_saved_design,
    write_weights,
)
from ..ops.registry import family
from ..passes.place import Placement
from ..perf.bands import summary_line
from ..perf.system import attach as system_attach
from ..perf.system import design_lines as system_lines
from ..perf.system import report_lines as system_report_lines
from ..tables import plain
from .perf import DagPerformance, estimate_dag
from .plan import DagPlan

FORMAT = "aieflow-dag"
FORMAT_VERSION = 1


@dataclass
class DagDesign:
    plan: DagPlan
    device: Device
    config: Config
    placement: Placement
    source: str = ""
    files: dict[str, str] = field(default_factory=dict)

    @property
    def graph(self):
        return self.plan.graph

    # ------------------------------------------------------------------ numerics

    @cached_property
    def _emulation(self) -> Emulation:
        return Emulation(self.plan.graph, self.device, self.config, self.source)

    @property
    def input_type(self):
        return self.graph.tensors[self.graph.inputs[0]].dtype

    @property
    def output_type(self):
        return self.graph.tensors[self.graph.outputs[0]].dtype

    @property
    def input_shape(self) -> tuple[int, ...]:
        return tuple(self.graph.tensors[self.graph.inputs[0]].shape)

    def predict(self, x: Any, raw: bool = False, mask: Any = None) -> np.ndarray:
        """Bit-exact emulation (float in; float out, or output codes with ``raw=True``); the
        generated kernels compute the same (:meth:`verify`)."""
        return self._emulation.predict(x, raw=raw, mask=mask)

    def quantise_input(self, x: Any) -> np.ndarray:
        return self._emulation.quantise_input(x)

    def trace(self, xq: np.ndarray, mask: np.ndarray | None = None) -> dict[str, np.ndarray]:
        """Emulated value (codes) of every tensor; ``mask``: a run-time key padding mask's keep bytes
        (:meth:`quantise_mask`)."""
        return self._emulation.trace(xq, mask=mask)

    @property
    def mask_shape(self) -> tuple[int, ...] | None:
        """``(T_k,)`` of a run-time key padding mask (the graph's second input), or None."""
        return self._emulation._design().mask_shape

    def quantise_mask(self, mask: Any, samples: int) -> np.ndarray | None:
        return self._emulation._design().quantise_mask(mask, samples)

    def run(self, xq: np.ndarray, mask: np.ndarray | None = None) -> np.ndarray:
        """Graph-input codes (and a run-time key padding mask's keep bytes) -> graph-output codes
        (integer-exact)."""
        return self._emulation._design().run(xq, mask=mask)

    def verify(self, x: Any = None, samples: int = 64, seed: int = 0, mask: Any = None, **kwargs: Any):
        """Build the project's C++ for x86 against aieflow's shim, run it on ``x`` (float samples)
        or ``samples`` generated ones (edge rows first) and compare bit for bit with :meth:`predict`.
        A model with a run-time key padding mask takes ``mask`` for ``x`` (PyTorch's forms), else
        seeded jet-like paddings (``dag.api.example_mask``)."""
        from .verify import verify

        return verify(self, x, samples=samples, seed=seed, mask=mask, **kwargs)

    # ------------------------------------------------------------------ performance

    def estimate(self) -> DagPerformance:
        return self._performance

    @cached_property
    def _performance(self) -> DagPerformance:
        return estimate_dag(self.plan, self.device, self.placement)

    # ------------------------------------------------------------------ reports

    def resources(self) -> dict[str, Any]:
        p = self.estimate()
        return {"compute_tiles": p.tiles_used, "compute_tiles_available": self.device.compute_tiles,
                "memory_tiles": p.memory_tiles_used, "memory_tile_buffers": sum(len(k.shards) for k in self.plan.links),
                "plio_in": len(self.graph.inputs), "plio_out": 1}

    def summary(self) -> str:
        e = self.estimate()
        p = self.plan
        lines = [f"DAG {self.graph.name} on {self.device.key}: {e.tiles_used} compute tiles, "
                 f"{sum(len(k.shards) for k in p.links)} memory-tile buffers ({e.memory_tiles_used} memory tiles), "
                 f"batch {p.batch}, placement cost {self.placement.cost:.2f} ({self.placement.method})"]
        for name in p.compute:
            node = p.node(name)
            r = self.placement.rect(name)
            if node.op == "dense":
                q = node.plan
                what = (f"dense {q.in_features} -> {q.out_features}{' + ReLU' if node.attrs.get('activation') else ''}, "
                        f"{q.cas_len} x {q.cas_num} cascade, {q.batch} rows")
            else:
                rp = p.rows[name]
                what = f"{node.op}, {rp.rows} rows x {rp.features} in {rp.parts} part(s)" + (
                    f" of a {rp.cascade}-tile cascade over K" if rp.cascade > 1 else "")
            reads = ", ".join(f"{o.tensor}{' (transposed)' if o.transposed else ''}"
                              f"{f' [{o.start}:{o.stop}]' if o.sliced else ''}"
                              f"{f' (row {o.row})' if o.selected else ''}"
                              f"{' (concat of ' + ', '.join(q.tensor for q in o.parts) + ')' if o.parts else ''}"
                              for o in p.operands[name])
            lines.append(f"  {name}: {what}; at ({r.column}, {r.row}); reads {reads}")
        problems = [w for k in p.links for w in k.word_problems()]
        if problems:
            lines.append(f"  WARNING: {len(problems)} memory-tile port pattern(s) step single 8- / 16-bit elements; "
                         "AIE-ML DMAs address 32-bit words, so Vitis would refuse them (the x86 shim runs them; "
                         "docs/dag.md): " + "; ".join(problems[:3]) + (" ..." if len(problems) > 3 else ""))
        lines.append(f"  modelled: latency {e.latency_ns / 1e3:,.2f} us, interval {e.interval_ns / 1e3:,.2f} us per "
                     f"batch ({e.sample_ns:,.1f} ns per sample), {e.throughput_ops_per_s / 1e12:.2f} TOPS, "
                     f"bound: {e.bound} ({e.bottleneck})")
        lines += system_lines(self)
        lines.append("  " + summary_line())
        return "\n".join(lines)

    def report(self) -> str:
        e = self.estimate()
        rows = [self.summary(), "  stages (occupancy per batch):"]
        table = [[s.name, s.kind, f"{s.occupancy_ns / 1e3:,.3f} us", s.bound]
                 for s in sorted(e.stages, key=lambda s: -s.occupancy_ns)]
        if table:
            rows.append(plain(table, rule=False, indent="    ", right=(2,)))
        rows.append("  critical path: " + " -> ".join(e.critical_path))
        return "\n".join(rows + system_report_lines(self))

    def to_json(self) -> dict[str, Any]:
        p = self.plan
        nodes = {}
        for name in p.compute:
            node = p.node(name)
            fam = family(node.op)
            r = self.placement.rect(name)
            nodes[name] = {
                "op": node.op, "inputs": [{"tensor": o.tensor, "producer": o.producer, "transposed": o.transposed,
                                           "features": [o.start, o.stop], "transpose_at": o.transpose_at, "row": o.row,
                                           "concat": [{"tensor": q.tensor, "producer": q.producer} for q in o.parts]}
                                          for o in p.operands[name]],
                "types": fam.types_to_json(node.types) if fam.types_to_json else None,
                "plan": fam.plan_to_json(node.plan) if node.op == "dense" else {
                    "parts": p.rows[name].parts, "rows": p.rows[name].rows, "features": p.rows[name].features,
                    "bytes_per_tile": p.rows[name].memory, "transposes_inputs": list(p.rows[name].in_transposed),
                    "transposes_output": p.rows[name].out_transposed,
                    **({"cascade": p.rows[name].cascade} if p.rows[name].cascade > 1 else {})},
                "placement": {"column": r.column, "row": r.row, "width": r.width, "height": r.height},
            }
        return {
            **design_schema.header(FORMAT, FORMAT_VERSION, "dag"),
            "device": {"key": self.device.key, **self.device.describe()}, "source": self.source,
            "config": self.config.to_json(), "batch": p.batch, "nodes": nodes,
            "graph": graph_to_json(self.graph),  # the quantised graph; its parameters are in weights.npz
            "links": [k.to_json(self.device) for k in p.links], "placement": self.placement.to_json(),
            "resources": self.resources(), "performance": system_attach(self.estimate().to_json(), self, "dag"),
            "project_files": sorted(self.files),
        }

    def save(self, out_dir: str | os.PathLike, force: bool = False) -> Path:
        """Write ``design.json``, ``weights.npz`` and ``project/`` atomically (temporary sibling,
        then rename); :func:`load` reads them back."""
        def write(tmp: Path) -> None:
            (tmp / "design.json").write_text(json.dumps(self.to_json(), indent=2, default=json_default) + "\n")
            write_weights(tmp / "weights.npz", graph_arrays(self.graph))
            write_files(tmp / "project", self.files)

        return save_directory(out_dir, force, write)


    def report_html(self, path: str | os.PathLike | None = None, data: Any = None, verify: Any = None) -> str:
        """The self-contained HTML report (``aieflow.html_report.report_html``), written to ``path`` if given."""
        from ..html_report import report_html

        return report_html(self, path, data=data, verify=verify)

    def placement_svg(self) -> str:
        """The placement picture (``aieflow report``): the compute nodes' rectangles on the grid
        with the memory-tile rows, arrows along the DAG's producer -> consumer edges (skip paths
        included)."""
        from ..placement_svg import placement_svg

        return placement_svg(self.placement, sorted(set(self.plan.edges())), self.device.memory_tile_rows,
                             title=f"{self.graph.name} on {self.device.board}")


def _plan_json(meta: dict[str, Any]) -> dict[str, Any]:
    """The parts of ``design.json`` the planner decides (compared on load)."""
    nodes = {k: {f: v[f] for f in ("op", "inputs", "types", "plan")} for k, v in meta["nodes"].items()}
    return json.loads(json.dumps({"batch": meta["batch"], "nodes": nodes, "links": meta["links"]},
                                 default=json_default))


def load(path: str | os.PathLike) -> DagDesign:
    """Reload a design written by :meth:`DagDesign.save`: the quantised graph and its parameters
    (``predict`` needs no model file), the plan and links made again from them and the saved
    config (the planner is deterministic: a plan that differs from the saved one means another
    aieflow wrote it, and is refused), the saved placement, and the project as it is on disk
    (``verify`` builds those files)."""
    from .api import dag_problem
    from .plan import plan_dag

    saved = read_saved_design(path, "DAG", FORMAT, FORMAT_VERSION)
    d, meta, graph = saved.path, saved.meta, saved.graph
    device = get_device(meta["device"]["key"])
    config = parse_config(meta["config"])
    plan = plan_dag(graph, device, config)
    # a save without a cost (before branch and bound) has it recomputed over the DAG's own problem
    # edges (its links), not the chain's layer edges
    placement = Placement.from_json(meta["placement"], graph, snake=device.generation.cascade_serpentine,
                                    edges=lambda: dag_problem(plan, device, config).named_pairs)
    design = DagDesign(plan, device, config, placement, meta.get("source", ""))
    if _plan_json(design.to_json()) != _plan_json(meta):
        raise AieflowError(f"the DAG plan in '{d}/design.json' differs from the one this aieflow makes for it",
                           hint=REDO)
    design.files = saved.files
    return design


