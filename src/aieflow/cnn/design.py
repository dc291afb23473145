"""A CNN design: the quantised graph (its emulator is ``predict``), the mapping's plan, modelled
performance, generated project and x86 check.  Mirrors :class:`aieflow.gemm.design.GemmDesign`."""

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
from ..emulation import EmulatedNumerics, Emulation
from ..errors import AieflowError
from ..graph_io import REDO, graph_arrays, graph_to_json, read_saved_design, write_weights
from ..ir import Graph
from ..names import comment, text
from ..perf.bands import summary_line
from ..perf.system import attach as system_attach
from ..perf.system import design_lines as system_lines
from ..perf.system import report_lines as system_report_lines
from ..tables import plain
from .perf import CnnPerformance, estimate
from .plan import CnnPlan, StreamLayer

FORMAT = "aieflow-cnn"
FORMAT_VERSION = 1


@dataclass
class CnnDesign(EmulatedNumerics):
    graph: Graph
    device: Device
    config: Config
    plan: CnnPlan
    source: str = ""
    files: dict[str, str] = field(default_factory=dict)
    # float frames written into the project's data/ (``aieflow compile --input``: all of them);
    # without them, verification frames (edge values, then random ones) for two graph iterations
    example_input: Any = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.files:
            from .emit import project_files
            from .stages import array_frames

            xq, yq = self._example_frames()
            self.files = project_files(self.plan, self.estimate().to_json(), self.summary(),
                                       array_frames(self.graph, self.plan.stages[0], xq), yq, self._conv_inputs(xq))
        self.example_input = None  # written into data/; not kept

    def _example_frames(self) -> tuple[np.ndarray, np.ndarray]:
        """The quantised example frames, zero frames appended to whole graph iterations (one frame
        per replica), and their emulated outputs (N, C, H, W)."""
        from .verify import inputs

        reps = self.plan.replicas
        xq = inputs(self, self.example_input, 2 * reps, 0)
        pad = -xq.shape[0] % reps
        if pad:
            xq = np.concatenate([xq, np.zeros((pad, *xq.shape[1:]), dtype=xq.dtype)])
        yq = np.asarray(self._emulation._design().run(xq)).reshape(xq.shape[0], *self.plan.stages[-1].out_shape)
        return xq, yq

    def _conv_inputs(self, xq: np.ndarray) -> dict[str, np.ndarray] | None:
        """The thesis mapping's later layers read what the PL made of the layer before: the
        emulated tensor each convolution reads, by the convolution's name (their PLIO files)."""
        if self.plan.mapping != "thesis":
            return None
        trace = self._emulation.trace(xq)
        nodes = {n.name: n for n in self.graph.nodes}
        names = [s.source.split(" + ")[0] for s in self.plan.stages[1:]]
        return {name: trace[nodes[name].inputs[0]] for name in names}

    # ------------------------------------------------------------------ numerics

    @cached_property
    def _emulation(self) -> Emulation:
        return Emulation(self.graph, self.device, self.config, self.source)

    def verify(self, x: Any = None, samples: int = 16, seed: int = 0, **kwargs: Any):
        """Build the project's C++ for x86 against aieflow's shims, run it on ``x`` (float frames) or
        ``samples`` generated ones and compare every output value bit for bit with :meth:`predict`
        (see :func:`aieflow.cnn.verify.verify`)."""
        from .verify import verify

        return verify(self, x, samples=samples, seed=seed, **kwargs)

    # ------------------------------------------------------------------ performance

    def estimate(self) -> CnnPerformance:
        return self._performance

    @cached_property
    def _performance(self) -> CnnPerformance:
        if self.plan.mapping == "rows":
            from .rows import estimate_rows

            return estimate_rows(self.plan)
        return estimate(self.plan)

    # ------------------------------------------------------------------ reports

    def tile_usage(self) -> list[dict]:
        """Per layer: kernels, bytes per kernel and bytes borrowed from a neighbour's memory."""
        rows = []
        for lay in self.plan.layers:
            n = lay.tiles if isinstance(lay, StreamLayer) else lay.kernels
            rows.append({"layer": lay.stage, "kernels": n * self.plan.replicas, "bytes_per_kernel": lay.memory.bytes,
                         "borrowed_per_kernel": lay.memory.borrowed})
        return rows

    def to_json(self) -> dict[str, Any]:
        return {
            **design_schema.header(FORMAT, FORMAT_VERSION, "cnn"),
            "device": {"key": self.device.key, **self.device.describe()},
            "resources": {"compute_tiles": self.estimate().tiles_used, "compute_tiles_available": self.device.compute_tiles,
                          "memory_tiles": self.estimate().memory_tiles_used, "plio_in": self.plan.plio_in,
                          "plio_out": self.plan.plio_out},
            "model": self.graph.name, "config": self.config.to_json(),
            "stages": [{"name": s.name, "kind": s.kind, "source": s.source, "in_shape": list(s.geometry.in_shape),
                        "out_shape": list(s.out_shape), "activation": s.activation, "shuffle": s.shuffle,
                        "post": s.post.function if s.post else None,
                        "input": s.in_type.to_string(), "output": s.out_type.to_string(), "macs": s.macs,
                        "groups": s.groups, "dilation": list(s.dilation), "model_macs": s.model_macs,
                        "upsample": list(s.up), "upsample_mode": s.up_mode}
                       for s in self.plan.stages],
            "plan": self.plan.to_json(), "tile_usage": self.tile_usage(),
            "performance": system_attach(self._performance_json(), self, "cnn"), "project_files": sorted(self.files),
            "graph": graph_to_json(self.graph), "source": self.source,  # params in weights.npz
        }

    def _performance_json(self) -> dict[str, Any]:
        """The common ``performance``: a batch is one frame per replica (``replicas`` frames every
        interval), the compute and memory tiles of the mapped graph; then the CNN's own keys (µs,
        frames/s, GMAC/s, stages)."""
        return design_schema.performance_json(self.estimate(),
                                              {"mapping_choice": self.plan.choice} if self.plan.choice else None)

    def summary(self) -> str:
        p, e = self.plan, self.estimate()
        lines = [f"CNN {comment(self.graph.name)} on {self.device.key} ({p.mapping} mapping): {p.tiles} tiles "
                 f"({p.replicas} replica(s) x {p.tiles_per_replica}), borrowed neighbour memory "
                 f"{p.borrowed_bytes:,} B, PLIO {p.plio_in} in / {p.plio_out} out"]
        for s, lay in zip(p.stages, p.layers, strict=True):
            if p.mapping == "rows":
                held = (f"line buffer {lay.line_rows} rows ({lay.line_bytes:,} B)" if lay.kind != "gpool"
                        else "global pooling: a running value per channel")
                shape = (f"1 kernel, {len(lay.parts)} row stream(s) in / {lay.outs} out, {held}, "
                         f"{lay.row_cycles:,.0f} cycles per {'input ' if lay.kind == 'gpool' else ''}row"
                         + "".join(f", FIFO from {comment(p.stages[k].name) if k >= 0 else 'the input'} {4 * n:,} B"
                                   for (k, _), n in zip(lay.parts, lay.fifo_words or (0,) * len(lay.parts), strict=True) if n)
                         + "".join(f", skip in a DDR segment of {n:,} B (GMIO)" for n in lay.ddr_bytes if n))
            elif isinstance(lay, StreamLayer):
                shape = f"{lay.cas_num} x {lay.cas_len} tiles"
                if lay.kind == "conv":
                    shape += f", mmul {'x'.join(map(str, lay.mmul))}, K/tile {lay.k_tile}"
            else:
                shape = (f"{lay.kernels} kernels of {lay.tile_m} x {lay.k_pad} x {lay.tile_n} (K in {lay.k_chunks}), "
                         f"PL {lay.pl_kernel} @ {lay.pl_clock_hz / 1e6:g} MHz")
            borrowed = f", borrows {lay.memory.borrowed:,} B" if lay.memory.borrowed else ""
            if s.residual is not None:
                shape += f", + skip from {comment(s.residual.skip_name)} ({s.residual.skip_type.to_string()})"
            if s.concat is not None:
                shape += (f", reads the concat {comment(s.concat.name)} of "
                          + " + ".join(f"{comment(n)} ({c} ch)" for _, n, c in s.concat.parts))
            if s.post is not None:
                shape += f", then {s.post.function} in the last tile"
            if s.up != (1, 1) and s.up_mode == "nearest":
                shape += f", nearest upsampling {s.up[0]} x {s.up[1]} in the store"
            elif s.up != (1, 1):
                shape += f", bilinear upsampling ({s.up_mode}) {s.up[0]} x {s.up[1]} in the last tile"
            if s.macs != s.model_macs:
                what = " and ".join(w for w in (f"{s.groups} groups" if s.groups > 1 else "",
                                                f"dilation {s.dilation}" if s.dilation != (1, 1) else "") if w)
                shape += f", {what} run as the dense layer ({s.macs / s.model_macs:.3g}x the model's MACs)"
            lines.append(f"  {comment(s.source)}: {s.kind} {s.in_type.to_string()} -> {s.out_type.to_string()}; {shape}; "
                         f"{lay.memory.bytes:,} B/tile{borrowed}")
        lines.append(f"  modelled: latency {e.latency_s * 1e6:,.1f} us, {e.fps:,.0f} frames/s, "
                     f"{e.gmacs:,.1f} GMAC/s, bound: {e.bound}")  # names in it sanitised by cnn/perf.py
        if p.choice:  # cnn.mapping auto: which mapping and why (directives.auto_design)
            lines.append(f"  mapping chosen (auto): {text(p.choice)}")
        lines += system_lines(self)
        lines.append("  " + summary_line())
        return "\n".join(lines)

    def report_html(self, path: str | os.PathLike | None = None, data: Any = None, verify: Any = None) -> str:
        """The self-contained HTML report (``aieflow.html_report.report_html``), written to ``path`` if given."""
        from ..html_report import report_html

        return report_html(self, path, data=data, verify=verify)

    def placement_svg(self) -> str:
        """Each layer's tiles (per replica) as the generated graph places them, arrows from each
        producer to the layers that read it (:meth:`mapped_placement`)."""
        from ..placement_svg import placement_svg

        placement, edges = self.mapped_placement()
        d = self.device
        return placement_svg(placement, edges, d.memory_tile_rows, title=f"{self.graph.name} on {d.board}")

    def mapped_placement(self):
        """The placement read from the mapped graph the project's ``graph.h`` is written from
        (``cnn.emit.lower`` / ``cnn.emit_thesis.lower``): one rectangle per layer and replica, the
        bounding box of its kernels' tiles; an edge per pair of layers a link joins (a window, a
        skip, a concat part), and in the thesis mapping per layer whose input PLIOs the PL kernel
        after the layer before writes.  Returns (``passes.place.Placement``, edges)."""
        from ..passes.place import Placement, Rect

        p = self.plan
        index = {s.name: i for i, s in enumerate(p.stages)}
        mg, pl_edges = lowered_graph(p)
        boxes: dict[tuple[int, int], list[tuple[int, int]]] = {}
        owner: dict[str, tuple[int, int]] = {}
        for k in mg.kernels:
            owner[k.var] = (k.replica, index[k.node])
            boxes.setdefault(owner[k.var], []).append(k.tile)

        def name(key: tuple[int, int]) -> str:
            q, si = key
            return p.stages[si].name + (f" #{q}" if q else "")

        rects = []
        for key, cells in sorted(boxes.items()):
            cols, rows = [c for c, _ in cells], [r for _, r in cells]
            rects.append(Rect(name(key), min(cols), min(rows), max(cols) - min(cols) + 1, max(rows) - min(rows) + 1))
        pairs = [(owner[lk.src.owner], owner[lk.dst.owner]) for lk in mg.links
                 if lk.src.owner in owner and lk.dst.owner in owner]
        pairs += [((0, a), (0, b)) for a, b in pl_edges]
        edges = [(name(a), name(b)) for a, b in dict.fromkeys(pairs) if a != b]
        d = self.device
        return Placement(tuple(rects), d.columns, d.rows, method=f"{p.mapping} mapping"), edges

    def report(self) -> str:
        e = self.estimate()
        rows = [self.summary(), "  per step:"]
        table = [[s.stage, s.where, f"{s.seconds * 1e6:,.2f} us", s.detail] for s in e.stages]
        if table:
            rows.append(plain(table, rule=False, indent="    ", right=(2,)))
        return "\n".join(rows + system_report_lines(self))

    # ------------------------------------------------------------------ persistence

    def save(self, out_dir: str | os.PathLike, force: bool = False) -> Path:
        """Write ``design.json``, ``weights.npz`` and ``project/`` atomically (temporary sibling,
        then rename)."""
        def write(tmp: Path) -> None:
            (tmp / "design.json").write_text(json.dumps(self.to_json(), indent=2) + "\n")
            write_weights(tmp / "weights.npz", graph_arrays(self.graph))
            write_files(tmp / "project", self.files)

        return save_directory(out_dir, force, write)


def lowered_graph(p):
    """The mapped graph the project's ``graph.h`` is written from (``cnn.emit.lower``,
    ``cnn.emit_rows.lower``, ``cnn.emit_thesis.lower``) for the plan ``p``, and in the thesis mapping
    the (layer before, layer) pairs whose input PLIOs the PL kernel after the layer before writes."""
    from .emit import lower, stage_idents
    from .emit_thesis import layer_info
    from .emit_thesis import lower as lower_thesis

    if p.mapping == "thesis":
        idents = stage_idents(p.stages)
        mg, plio_in, _ = lower_thesis(p, [layer_info(s, lay, idents[i])
                                          for i, (s, lay) in enumerate(zip(p.stages, p.layers, strict=True))])
        return mg, sorted({(q["layer"] - 1, q["layer"]) for q in plio_in if q["pl"]})
    if p.mapping == "rows":
        from .emit_rows import lower as lower_rows

        return lower_rows(p), []
    return lower(p), []


def load(path: str | os.PathLike) -> CnnDesign:
    """Reload a design written by :meth:`CnnDesign.save`: the quantised graph and its weights (so
    ``predict`` needs no model file), the plan made again from them and the saved config (the
    planner is deterministic; a plan that differs from the saved one means another aieflow wrote
    it, and is refused) and the project as it is on disk (``verify`` builds those files)."""
    from .directives import make_plan
    from .stages import lower

    saved = read_saved_design(path, "CNN", FORMAT, FORMAT_VERSION)
    d, meta, graph = saved.path, saved.meta, saved.graph
    device = get_device(meta["device"]["key"])
    config = parse_config(meta["config"])
    plan = make_plan(device, lower(graph), config)
    if plan.to_json() != meta["plan"]:
        raise AieflowError(f"the CNN plan in '{d}/design.json' differs from the one this aieflow makes for it",
                           hint=REDO)
    return CnnDesign(graph, device, config, plan, meta.get("source", ""), saved.files)
