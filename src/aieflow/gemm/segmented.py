"""Dense chains that mix resident and streamed layers: a sequence of segments joined through DDR.

A layer whose weights stream from DDR (``gemm/dense.py``) runs as a GEMM design of its own, so a
model with such a layer anywhere in its chain is cut around it: the resident sub-chains are
compiled by the ordinary pipeline (plan, pack, place, emit: the chain design, unchanged) on the
sub-graph between two cuts, each streamed layer by :class:`StreamedDenseDesign`.  Every cut
tensor keeps the quantised graph's type, so each segment computes exactly what the whole model's
emulator computes for that part, and the chain of segments is bit-exact end to end.  The whole
model's emulator is the Dense family's for every layer, except streamed fp32 / bf16 layers, which it
computes in their GEMM's float order (``gemm/streamed_float.py``), as their segment does.

Which layers stream (:func:`streamed_layers`): those the config marks ``weights: streamed``, then
``auto`` layers that cannot be resident even alone, then, while a resident sub-chain still does
not fit (its plan or placement fails), one more ``auto`` layer of that sub-chain: the smallest whose
streaming lets the rest fit (streaming costs about its weight bytes from DDR per call, by the GEMM
model), else the largest (frees the most tiles), and again.  ``weights: resident`` layers never
stream.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from .. import __version__, design_schema
from ..atomic import save_directory, write_files
from ..config import Config, parse_config
from ..design import Design
from ..devices import Device, get_device
from ..emulation import EmulatedNumerics, Emulation
from ..errors import AieflowError, ConfigError, PlanError
from ..graph_io import json_default, write_weights
from ..ir import Graph, Node
from ..mapped.estimate import resources, segment_resources
from ..mapped.ir import Cost, Link, MappedGraph, Port, in_segment, segment_name
from ..names import Code, c_ident, comment, text
from ..numerics import fixed
from ..numerics.types import FixedType, FloatType
from ..ops.registry import family
from ..perf.bands import summary_line
from ..perf.system import design_lines as system_lines
from ..perf.system import report_lines as system_report_lines
from .dense import dense_nodes, resident_error, weights_mode
from .perf import ddr_cycles
from .streamed_float import GemmOrderEmulation, float_plans, same_values

FORMAT = "aieflow-segmented"  # read back by :func:`load` (``aieflow.load`` dispatches here)
FORMAT_VERSION = 1
KIND = "segmented"
SCHEDULE = "segments in turn"  # how `interval` is modelled: the one host runs each segment over the batches, then the next


@dataclass(frozen=True)
class SegmentSpec:
    """A run of the graph's nodes that becomes one design: a resident sub-chain or one streamed layer
    (with the views before it)."""

    index: int
    kind: str  # "resident" | "streamed"
    nodes: tuple[str, ...]
    input: str  # the tensor it reads (graph input or the previous segment's output, through DDR)
    output: str

    @property
    def name(self) -> str:
        return f"{self.index:02d}_{self.kind}"

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "kind": self.kind, "layers": list(self.nodes), "input": self.input,
                "output": self.output, "dir": f"segments/{self.name}"}


def _is_view(node: Node) -> bool:
    return family(node.op, node.name).is_view


def partition(graph: Graph, streamed: Collection[str]) -> tuple[SegmentSpec, ...]:
    """Cut ``graph`` around its ``streamed`` layers.  Views join the next compute layer's segment
    (trailing views the last); consecutive resident layers share one segment.  Each cut must be a
    single tensor (a streamed layer on one branch of a residual block cannot be cut out)."""
    groups: list[tuple[str, list[Node]]] = []
    pending: list[Node] = []
    for node in graph.nodes:
        if _is_view(node):
            pending.append(node)
            continue
        kind = "streamed" if node.name in streamed else "resident"
        if kind == "resident" and groups and groups[-1][0] == "resident":
            groups[-1][1].extend([*pending, node])
        else:
            groups.append((kind, [*pending, node]))
        pending = []
    if not groups:
        raise PlanError("the model has no compute layer to map")
    groups[-1][1].extend(pending)
    specs = []
    for i, (kind, nodes) in enumerate(groups):
        inside = {t for n in nodes for t in n.outputs}
        reads = list(dict.fromkeys(t for n in nodes for t in n.inputs if t not in inside))
        later = {t for _, ns in groups[i + 1:] for n in ns for t in n.inputs}
        writes = [t for t in dict.fromkeys(t for n in nodes for t in n.outputs)
                  if t in later or t in graph.outputs]
        if len(reads) != 1 or len(writes) != 1:
            names = ", ".join(n.name for n in nodes if not _is_view(n))
            what = "streamed layer" if kind == "streamed" else "resident layers"
            raise PlanError(
                f"the {what} {names} cannot be cut out of the graph as a segment: it reads {len(reads)} and "
                f"hands on {len(writes)} tensors ({', '.join(reads + writes)}); segments joined through DDR "
                f"need exactly one of each",
                layer=nodes[-1].name,
                hint="stream a layer outside residual branches, or keep this part resident (weights: resident)",
            )
        specs.append(SegmentSpec(i, kind, tuple(n.name for n in nodes), reads[0], writes[0]))
    return tuple(specs)


def subgraph(graph: Graph, spec: SegmentSpec) -> Graph:
    """The segment as a graph of its own: same nodes, tensors and types, input = the cut tensor."""
    nodes = tuple(graph.node(n) for n in spec.nodes)
    used = {spec.input, *(t for n in nodes for t in (*n.inputs, *n.outputs))}
    tensors = {k: v for k, v in graph.tensors.items() if k in used}
    g = Graph(nodes, tensors, (spec.input,), (spec.output,), f"{graph.name}_{spec.name}")
    g.validate()
    return g


# ----------------------------------------------------------------------------- resident segments


def _passes(names: tuple[str, ...]):
    from ..pipeline import PIPELINE

    steps = dict(PIPELINE)
    return [steps[n] for n in names]


def _place_resident(state: Any) -> Any:
    """The resident pipeline after quantisation, up to placement (raises PlanError when the
    sub-chain does not fit)."""
    names = ("search", "plan", "pack", "place") if state.config.searched else ("plan", "pack", "place")
    for step in _passes(names):
        state = step(state)
    return state


def _emit_resident(state: Any) -> Design:
    (emit,) = _passes(("emit",))
    s = emit(state)
    return Design(s.graph, s.device, s.config, s.placement, s.source, dict(s.files), s.timings, s.exploration)


class _FitCache:
    """Placed states of resident sub-chains, by their nodes (the chooser asks about the same
    sub-chain several times)."""

    def __init__(self, q: Any) -> None:
        self.q = q
        self.placed: dict[tuple[str, ...], Any] = {}
        self.errors: dict[tuple[str, ...], PlanError] = {}

    def check(self, spec: SegmentSpec) -> PlanError | None:
        key = spec.nodes
        if key not in self.placed and key not in self.errors:
            sub = subgraph(self.q.graph, spec)
            state = replace(self.q, graph=sub, example_input=None, calibration=None, placement=None, files=None,
                            exploration=None, timings=())
            try:
                self.placed[key] = _place_resident(state)
            except PlanError as e:
                self.errors[key] = e
        return self.errors.get(key)


def _weight_bytes(node: Node) -> int:
    return int(node.attrs["in_features"]) * int(node.attrs["out_features"]) * node.types.weight.container_bits // 8


def _size(node: Node) -> str:
    b = _weight_bytes(node)
    return f"{b:,} bytes" if b < 1024 else f"{b // 1024:,} KiB"


def _first_line(err: PlanError, node: str | None = None) -> str:
    line = str(err).splitlines()[0]
    return line.removeprefix(f"layer '{node}': ") if node else line


def streamed_layers(q: Any, failure: PlanError | None, cache: _FitCache | None = None) -> dict[str, str]:
    """Layer name -> why its weights stream (empty: the model stays resident).  ``q``: the pipeline
    state after quantisation; ``failure``: the resident pipeline's error, if it ran."""
    graph, device, config = q.graph, q.device, q.config
    nodes = dense_nodes(graph)
    chosen = {n.name: "weights: streamed (config)" for n in nodes if weights_mode(config, n) == "streamed"}
    if not chosen and failure is None:
        return {}
    auto = [n for n in nodes if weights_mode(config, n) == "auto" and n.name not in chosen]
    for n in auto:
        err = resident_error(graph, n, device, config)
        if err is not None:
            chosen[n.name] = f"{_size(n)} of weights and their buffers do not fit on chip ({_first_line(err, n.name)})"
    cache = cache or _FitCache(q)
    while True:
        failing = None
        for spec in partition(graph, chosen):
            if spec.kind == "resident" and (err := cache.check(spec)) is not None:
                failing = (spec, err)
                break
        if failing is None:
            return chosen
        spec, err = failing
        cands = [graph.node(n) for n in spec.nodes if n not in chosen and any(a.name == n for a in auto)]
        if not cands:
            if not chosen:
                raise failure or err
            forced = [n for n in spec.nodes if weights_mode(config, graph.node(n)) == "resident"]
            raise PlanError(
                f"with {', '.join(chosen)} streamed, the resident sub-chain {', '.join(_compute(graph, spec))} "
                f"still does not fit: {_first_line(err)}",
                layer=err.layer,
                hint=("let the planner stream some of " + ", ".join(forced) + " (weights: auto)") if forced else
                     "use a smaller batch or a narrower precision, or stream more layers (weights: streamed)",
            )
        why = f"the resident chain {', '.join(_compute(graph, spec))} does not fit on chip ({_first_line(err)})"
        for c in sorted(cands, key=lambda n: (_weight_bytes(n), nodes.index(n))):
            trial = {**chosen, c.name: ""}
            rest = [s for s in partition(graph, trial) if s.kind == "resident" and set(s.nodes) <= set(spec.nodes)]
            if all(cache.check(s) is None for s in rest):
                chosen[c.name] = f"{why}; streaming this layer ({_size(c)}) is the cheapest that makes it fit"
                break
        else:
            c = max(cands, key=lambda n: (_weight_bytes(n), -nodes.index(n)))
            chosen[c.name] = f"{why}; this layer has the most weights of it ({_size(c)})"


def _compute(graph: Graph, spec: SegmentSpec) -> list[str]:
    return [n for n in spec.nodes if not _is_view(graph.node(n))]


# ----------------------------------------------------------------------------- the design


@dataclass(frozen=True)
class SegmentCost:
    name: str
    kind: str
    layers: tuple[str, ...]
    latency_ns: float  # one batch through the segment
    interval_ns: float  # per batch, steady state
    ddr_ns: float  # DDR traffic per batch (streamed: weights, operands, epilogue; resident: the cut tensors)
    boundary_ns: float  # the cut tensors' DDR write / read added to this segment (resident segments)
    tiles: int
    bound: str
    replicas: int = 1  # copies of a resident segment (each on its own batches; tiles counts them all)

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "kind": self.kind, "layers": list(self.layers), "latency_ns": self.latency_ns,
                "interval_ns": self.interval_ns, "ddr_ns": self.ddr_ns, "boundary_ns": self.boundary_ns,
                "tiles": self.tiles, "bound": self.bound, "replicas": self.replicas}


@dataclass(frozen=True)
class SegmentedPerformance:
    """Per batch of ``batch`` samples (:func:`_estimate`).  latency: the segments one after the
    other, each with its DDR passes; interval: the sum of the segments' intervals, as the one host
    runs them (each segment over the run's batches, then the next: they never overlap)."""

    segments: tuple[SegmentCost, ...]
    batch: int
    latency_ns: float
    interval_ns: float
    ddr_ns: float  # all segments' DDR traffic per batch
    throughput_ops_per_s: float
    bound: str
    tiles_used: int
    fits_one_array: bool  # all segments' tiles together fit the device (one image of them all would need it)
    schedule: str = SCHEDULE

    memory_tiles_used: int = 0  # every segment's (protocol.Performance)
    replicas: int = 1  # the segments' own replicas are inside ``batch``'s pipeline (protocol.Performance)

    def breakdown_parts(self) -> list[tuple[str, float, dict[str, Any]]]:
        """``protocol.Performance``: each segment's interval."""
        return [(s.name, s.interval_ns, {"kind": s.kind, "bound": s.bound}) for s in self.segments]

    def extra_json(self) -> dict[str, Any]:
        """The DDR time, the schedule and the segments."""
        return {"ddr_ns": self.ddr_ns, "fits_one_array": self.fits_one_array, "schedule": self.schedule,
                "segments": [s.to_json() for s in self.segments]}


@dataclass(frozen=True)
class SegmentCheck:
    name: str
    kind: str
    ok: bool
    verdict: str
    emulation_consistent: bool  # the segment's own emulation equals the whole model's on this cut


@dataclass(frozen=True)
class SegmentedVerifyResult:
    samples: int
    values: int
    segments: tuple[SegmentCheck, ...]

    @property
    def ok(self) -> bool:
        return all(s.ok and s.emulation_consistent for s in self.segments)

    @property
    def mismatches(self) -> int:
        return sum(not s.ok for s in self.segments)

    def verdict(self) -> str:
        lines = [f"verify: {'PASS, bit-exact end to end' if self.ok else 'FAIL'}: {self.samples} samples, "
                 f"{self.values} model outputs, {len(self.segments)} segments each run on x86 on the emulator's "
                 f"values at its input cut"]
        for s in self.segments:
            extra = "" if s.emulation_consistent else " (its emulation differs from the whole model's!)"
            lines.append(f"  {s.name}: {s.verdict.splitlines()[0]}{extra}")
            lines.extend(f"    {more}" for more in s.verdict.splitlines()[1:])
        return "\n".join(lines)


@dataclass
class SegmentedDesign(EmulatedNumerics):
    graph: Graph  # the whole quantised model
    device: Device
    config: Config
    specs: tuple[SegmentSpec, ...]
    segments: tuple[Any, ...]  # Design (resident) | StreamedDenseDesign, one per spec
    reasons: Mapping[str, str]  # streamed layer -> why
    source: str = ""
    timings: tuple[tuple[str, float], ...] = ()
    top_files: dict[str, str] = field(default_factory=dict)
    # the graph input's codes of the samples given at compile time and the whole model's output codes
    # (the one host's data/X.txt and data/Y_golden.txt); None without an example
    example: tuple[np.ndarray, np.ndarray] | None = None

    def __post_init__(self) -> None:
        if not self.top_files:
            self.top_files = self._top_files()

    # ------------------------------------------------------------------ numerics (the whole model's emulator)

    @property
    def _emulation(self) -> Emulation | GemmOrderEmulation:
        plans = float_plans({seg.plan.layer: seg.plan
                             for spec, seg in zip(self.specs, self.segments, strict=True) if spec.kind == "streamed"})
        if plans:  # streamed fp32 layers in their GEMM's order, as their segments compute them
            return GemmOrderEmulation(self.graph, self.device, self.config, None, self.source, streamed=plans)
        return Emulation(self.graph, self.device, self.config, self.source)

    def run(self, xq: np.ndarray) -> np.ndarray:
        y = np.asarray(self.trace(xq)[self.graph.outputs[0]])
        return y.astype(np.int64) if isinstance(self.output_type, FixedType) else y

    def run_segments(self, xq: np.ndarray) -> np.ndarray:
        """The segments' own emulators one after the other (what the chain of designs computes)."""
        v = xq
        for seg in self.segments:
            v = seg.run(v)
        return v

    # ------------------------------------------------------------------ files

    @property
    def files(self) -> dict[str, str]:
        out = dict(self.top_files)
        for spec, seg in zip(self.specs, self.segments, strict=True):
            out.update({f"segments/{spec.name}/project/{rel}": text for rel, text in seg.files.items()})
        return out

    def _top_files(self) -> dict[str, str]:
        from .segmented_host import data_files, host_files

        out = {"README.md": self._readme(), "Makefile": self._makefile(), **host_files(self)}
        if self.example is not None:
            out.update(data_files(self, *self.example))
        return out

    def _makefile(self) -> str:
        """The top Makefile: the one contract's targets, each run in every segment's project in order."""
        from ..templating import environment

        return environment("gemm").get_template("segmented_Makefile.j2").render(
            version=__version__, name=comment(self.graph.name), device=self.device,
            segments=[_Seg(spec.name) for spec in self.specs])

    def _readme(self) -> str:
        e = self.estimate()
        rows = ["| segment | kind | layers | input (from) | output | latency | interval | DDR per batch | tiles |",
                "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
        for spec, c in zip(self.specs, e.segments, strict=True):
            src = "graph input" if spec.index == 0 else "DDR"
            rows.append(f"| `segments/{spec.name}` | {spec.kind} | {comment(', '.join(c.layers))} | `{comment(spec.input)}` "
                        f"({src}) | `{comment(spec.output)}` | {c.latency_ns / 1e3:,.2f} us | {c.interval_ns / 1e3:,.2f} us | "
                        f"{c.ddr_ns / 1e3:,.2f} us | {c.tiles} |")
        why = "\n".join(f"- `{comment(k)}`: {text(v)}" for k, v in self.reasons.items())
        why += "".join(f"\n- `{comment(seg.plan.layer)}` numerics: {seg.numerics_note}" for spec, seg in
                       zip(self.specs, self.segments, strict=True) if spec.kind == "streamed" and seg.is_float)
        return (
            f"# {comment(self.graph.name)}: a Dense chain in {len(self.specs)} segments (aieflow {__version__})\n\n"
            f"Layers with streamed weights (kept in DDR, run as a GEMM design):\n\n{why}\n\n"
            f"Each segment is a complete project of its own in `segments/NN_kind/project/` (its own README, "
            f"Makefile and host).  They run one after the other; the tensor at every cut goes through DDR "
            f"with the quantised graph's type, so each segment's output codes are the next one's input "
            f"codes.\n\n" + "\n".join(rows) + "\n\n"
            f"Modelled per batch of {e.batch} samples: latency {e.latency_ns / 1e3:,.2f} us, interval "
            f"{e.interval_ns / 1e3:,.2f} us ({e.schedule}; bound: {e.bound}).  "
            f"{'All segments together fit one array.' if e.fits_one_array else 'The segments together need more tiles than the device has: they could not share one array image (the host loads each segment in turn, so they need not).'}\n\n"
            f"The top `Makefile` is the one contract of aieflow's projects over the segments: each target "
            f"(`make x86sim` / `aiesim` / `hw_emu` / `hw` / `package PLATFORM=<.xpfm>`, `make host`, `make shim-run`, "
            f"`make system-run`, `make clean`) runs in every segment's project, in order, with the variables "
            f"given; `make run X=... Y=... SAMPLES=...` runs `host/run_segments.sh` on the board.  Each "
            f"segment's `data/` holds the whole model's values at its cuts for the samples given at compile "
            f"time, so `make system-run` checks every segment bit for bit on the values the one before it "
            f"produces.  Not generated: one device image that holds every segment (one xclbin), and the "
            f"conversion between a resident segment's PLIO text files and the cut tensor's codes in DDR "
            f"(`host/run_segments.sh` stops at a resident segment on the board).  x86 check: `aieflow verify` runs every "
            f"segment's generated C++ on the emulator's values at its input cut and compares bit for bit.\n"
        )

    # ------------------------------------------------------------------ performance

    def estimate(self) -> SegmentedPerformance:
        return _estimate(self)

    def mapped(self) -> MappedGraph:
        """The whole design as one mapped graph (:func:`lower`), built once per design."""
        from ..mapped.cache import memo

        return memo(self, "segmented-lower", self.segments, lambda: lower(self))

    def resources(self) -> dict[str, Any]:
        """Counted on the one mapped graph, summed over the segments (``mapped.estimate.resources``)."""
        e = self.estimate()
        per = {spec.name: seg.to_json()["resources"] for spec, seg in zip(self.specs, self.segments, strict=True)}
        tiles, memory_tiles = resources(self.mapped(), self.device)
        return {"compute_tiles": tiles, "compute_tiles_available": self.device.compute_tiles,
                "memory_tiles": memory_tiles, "fits_one_array": e.fits_one_array, "segments": per}

    # ------------------------------------------------------------------ x86 check

    def verify(self, x: Any | None = None, samples: int | None = None, seed: int = 0,
               cache_dir: str | os.PathLike | None = None, jobs: int | None = None) -> SegmentedVerifyResult:
        """Run every segment's generated C++ on x86 on the whole model's emulated values at its
        input cut and compare its outputs bit for bit; check too that the segment's own emulation
        equals the whole model's at its output cut (so the chain is bit-exact end to end)."""
        from ..verify import verification_inputs

        if x is None:
            t = self.input_type
            xq = verification_inputs(t, tuple(self.graph.tensors[self.graph.inputs[0]].shape), samples or 64, seed)
        else:
            xq = self.quantise_input(x)
        values = self.trace(xq)
        checks = []
        for spec, seg in zip(self.specs, self.segments, strict=True):
            codes = np.asarray(values[spec.input])
            mine = np.asarray(seg.run(codes)).reshape(codes.shape[0], -1)
            whole = np.asarray(values[spec.output]).reshape(codes.shape[0], -1)
            floats = isinstance(self.graph.tensors[spec.output].dtype, FloatType)  # fp32: bit for bit
            same = same_values(mine, whole) if floats else bool(np.array_equal(mine, whole))
            if spec.kind == "streamed":
                r = seg.verify(xq=codes, cache_dir=cache_dir, jobs=jobs)
            else:
                r = seg.verify(_as_float_input(seg, codes, spec), cache_dir=cache_dir, jobs=jobs)
            checks.append(SegmentCheck(spec.name, spec.kind, r.ok, r.verdict(), same))
        out = values[self.graph.outputs[0]]
        return SegmentedVerifyResult(int(xq.shape[0]), int(np.asarray(out).size), tuple(checks))

    # ------------------------------------------------------------------ reports

    def report(self) -> str:
        return "\n".join([self.summary(), design_schema.breakdown_text(self.to_json()["performance"]),
                          *system_report_lines(self)])

    def summary(self) -> str:
        e = self.estimate()
        lines = [f"{self.graph.name} on {self.device.board}: {len(self.specs)} segments joined through DDR "
                 f"({sum(s.kind == 'streamed' for s in self.specs)} streamed Dense layer(s))"]
        for name, why in self.reasons.items():
            lines.append(f"  {name} streamed: {why}")
        for spec, seg in zip(self.specs, self.segments, strict=True):
            if spec.kind == "streamed" and seg.is_float:
                lines.append(f"  {seg.plan.layer} numerics: {seg.numerics_note}")
        for spec, c in zip(self.specs, e.segments, strict=True):
            lines.append(f"  [{spec.name}] {', '.join(c.layers)}: {spec.input} -> {spec.output}; latency "
                         f"{c.latency_ns / 1e3:,.2f} us, interval {c.interval_ns / 1e3:,.2f} us, DDR "
                         f"{c.ddr_ns / 1e3:,.2f} us, {c.tiles} tiles, bound: {c.bound}")
        lines.append(f"  modelled per batch of {e.batch}: latency {e.latency_ns / 1e3:,.2f} us, interval "
                     f"{e.interval_ns / 1e3:,.2f} us ({e.schedule}), {e.throughput_ops_per_s / 1e9:,.1f} GOPS, "
                     f"bound: {e.bound}; {e.tiles_used} tiles"
                     + ("" if e.fits_one_array else f" (more than the {self.device.compute_tiles} of the device)"))
        lines += system_lines(self)
        lines.append("  " + summary_line())
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        t_in, t_out = (self.graph.tensors[t] for t in (self.graph.inputs[0], self.graph.outputs[0]))
        return {
            **design_schema.header(FORMAT, FORMAT_VERSION, KIND),
            "device": {"key": self.device.key, **self.device.describe()},
            "source": self.source, "name": self.graph.name,
            "config": self.config.to_json(),
            "input": {"tensor": t_in.name, "shape": list(t_in.shape), "type": self.input_type.to_string()},
            "output": {"tensor": t_out.name, "shape": list(t_out.shape), "type": self.output_type.to_string()},
            "streamed": dict(self.reasons),
            "segments": [s.to_json() for s in self.specs],
            "resources": self.resources(),
            "performance": design_schema.performance_json(self.estimate()),
            "project_files": sorted(self.top_files),
        }

    def report_html(self, path: str | os.PathLike | None = None, data: Any = None, verify: Any = None) -> str:
        """The self-contained HTML report (``aieflow.html_report.report_html``), written to ``path`` if given."""
        from ..html_report import report_html

        return report_html(self, path, data=data, verify=verify)

    def placement_svg(self) -> str:
        """Every segment's own picture, one under the other (each is a project of its own)."""
        from ..placement_svg import design_svg

        parts, y, width = [], 0, 0
        for spec, seg in zip(self.specs, self.segments, strict=True):
            svg = seg.placement_svg() if hasattr(seg, "placement_svg") else design_svg(seg)
            w, h = _svg_size(svg)
            parts.append(f'<g transform="translate(0,{y})"><text x="4" y="14" font-size="13">segment {spec.name}</text>'
                         f'<svg y="20" width="{w}" height="{h}">{_svg_body(svg)}</svg></g>')
            y += h + 30
            width = max(width, w)
        return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{y}">' + "".join(parts)
                + "</svg>\n")

    def save(self, out_dir: str | os.PathLike, force: bool = False) -> Path:
        """``design.json`` (the segments in order), ``README.md``, ``host/run_segments.sh`` and each
        segment saved as a design of its own in ``segments/NN_kind/`` (``design.json``,
        ``weights.npz``, ``project/``), atomically.  The top ``weights.npz`` is empty: every
        segment holds its own."""
        def write(tmp: Path) -> None:
            (tmp / "design.json").write_text(json.dumps(self.to_json(), indent=2, default=json_default) + "\n")
            write_weights(tmp / "weights.npz", {})
            write_files(tmp, self.top_files)
            for spec, seg in zip(self.specs, self.segments, strict=True):
                seg.save(tmp / "segments" / spec.name)

        return save_directory(out_dir, force, write)


class _Seg(Code):
    """A segment's folder name in the top Makefile; ``ident``: its C identifier (host/seg_<ident>.cpp)."""

    __slots__ = ()

    @property
    def ident(self) -> Code:
        return Code(c_ident(self))


def _svg_size(svg: str) -> tuple[int, int]:
    import re

    def num(key: str) -> int:
        m = re.search(rf'{key}="([0-9.]+)', svg)
        return int(float(m.group(1))) if m else 400

    return num("width"), num("height")


def _svg_body(svg: str) -> str:
    start = svg.index(">", svg.index("<svg")) + 1
    return svg[start:svg.rindex("</svg>")]


def _as_float_input(seg: Design, codes: np.ndarray, spec: SegmentSpec) -> np.ndarray:
    """Cut-tensor codes as the float samples ``Design.verify`` quantises back (exactly: power-of-two
    scales); checked, so a resident segment is verified on exactly these codes."""
    t = seg.input_type
    x = fixed.dequantize(codes, t) if isinstance(t, FixedType) else codes
    if not np.array_equal(np.asarray(seg.quantise_input(x)), codes):
        from ..verify import VerifyError

        raise VerifyError(f"segment {spec.name}: the codes of '{spec.input}' do not survive the float round trip "
                          f"of its input type {t}")
    return x


def lower(d: SegmentedDesign) -> MappedGraph:
    """The segmented design as one mapped graph: each segment's own lowering (a resident segment's
    chain, ``passes/emit.lowered_chain``; a streamed layer's GEMM and epilogue,
    ``lower.streamed_lowering``) as segment ``i`` (``mapped.ir.in_segment``: its names prefixed
    ``s<i>_``, its kernels marked), and each cut a ``ddr`` link per end pair (``Link.tensor``: the
    cut tensor; ``segment``: its DDR buffer's bytes per design call) from the writing segment's ends
    (a resident segment's output PLIOs; a streamed layer's epilogue, which writes Y to DDR) to the
    reading segment's (a resident segment's input PLIOs; a streamed layer's A mover, which reads
    the host's packing of A); a PL kernel's DDR port numbered by the other side's end."""
    from ..mapped.ir import join
    from ..passes.emit import lowered_chain
    from .lower import streamed_lowering

    parts = []
    for spec, seg in zip(d.specs, d.segments, strict=True):
        g = streamed_lowering(seg.plan) if spec.kind == "streamed" else lowered_chain(seg.graph, seg.device,
                                                                                       seg.placement)
        parts.append(in_segment(g, spec.index))
    cuts = []
    for a, b in zip(d.specs, d.specs[1:], strict=False):
        tensor = c_ident(a.output)
        nbytes = d.config.batch * _bytes_per_sample(d.graph, a.output)
        writers, readers = _cut_ends(parts[a.index], a, "out"), _cut_ends(parts[b.index], b, "in")
        if len(readers) > 1:  # a streamed layer's epilogue into a resident segment's PLIOs
            pairs = [(replace(writers[0], index=i), r) for i, r in enumerate(readers)]
        else:  # a resident segment's PLIOs (or an epilogue) into a streamed layer's A mover
            pairs = [(w, replace(readers[0], index=i)) for i, w in enumerate(writers)]
        cost = cut_cost(tensor, nbytes, (a.kind, b.kind), d.device)
        cuts += [Link("ddr", w, r, cost=cost, segment=(1, nbytes), tensor=tensor) for w, r in pairs]
    g = join(tuple(parts), tuple(cuts))
    g.check()
    return g


def _cut_ends(g: MappedGraph, spec: SegmentSpec, side: str) -> list[Port]:
    """Where segment ``spec`` (lowered, :func:`in_segment`) meets DDR at its input (``side`` "in")
    or output ("out") cut: a resident segment's PLIOs of that direction; a streamed layer's A mover
    (in) or epilogue (out)."""
    from .lower import EPILOGUE, MOVER

    if spec.kind == "resident":
        return [Port(p.var, side, 0) for p in g.plios if p.direction == side]
    name = segment_name(spec.index, MOVER if side == "in" else EPILOGUE)
    assert any(k.name == name for k in g.pl_kernels), name
    return [Port(name, side, 0)]


def cut_cost(tensor: str, nbytes: int, kinds: tuple[str, str], device: Device) -> Cost:
    """The cost of one cut (every ``ddr`` link of it carries it: one stage): the cut tensor's DDR
    passes by the PL movers of its resident ends, ``nbytes`` each (``gemm.perf.ddr_cycles``: the
    writing segment's s2mm writes it, the reading segment's mm2s reads it back); a streamed layer's
    own end is in its own cost (its A packing reads X, its epilogue writes Y).  ``kinds``: the
    (writing, reading) segments' kinds."""
    passes = sum(k == "resident" for k in kinds)
    cycles = passes * ddr_cycles(nbytes, device)
    return Cost(f"ddr:{tensor}", "ddr", "ddr", cycles / device.clock_hz * 1e9, cycles=cycles)


def _estimate(d: SegmentedDesign) -> SegmentedPerformance:
    """The design's figures per batch of ``batch`` samples, read from its one mapped graph
    (:meth:`SegmentedDesign.mapped`) in the order the one host runs it: segment after segment, each
    over every batch of the run, the next once the cut is in DDR (``templates/gemm/segments_host.cpp.j2``;
    one device image at a time).  Each segment's figures are the simulation of its own costed
    lowering (a resident segment's chain stage graph, ``seg.estimate()``: its interval over its
    replicas; a streamed layer's GEMM blocks, packing and epilogue, ``estimate_streamed``), and each
    cut's DDR passes are its ``ddr`` links' cost (:func:`cut_cost`), charged to the resident
    segments that move it (half each when both do).  A run of ``n`` batches takes
    ``sum_i (L_i + (n - 1) I_i)`` plus the cuts' ``n`` passes each, so one batch's latency is the
    sum of the segments' latencies and the steady-state interval the sum of their intervals: the
    segments never overlap."""
    from .dense import estimate_streamed

    g = d.mapped()
    tiles_of = segment_resources(g, d.device)
    clock = d.device.clock_hz
    batch = d.config.batch
    boundary = [0.0] * len(d.specs)
    cut_of = {x.tensor: x.cost for x in g.cuts()}
    for a, b in zip(d.specs, d.specs[1:], strict=False):
        cost = cut_of[c_ident(a.output)]
        movers = [s for s in (a, b) if s.kind == "resident"]
        for s in movers:
            boundary[s.index] += cost.occupancy_ns / len(movers)
    costs = []
    for spec, seg in zip(d.specs, d.segments, strict=True):
        layers = tuple(_compute(d.graph, spec))
        if spec.kind == "streamed":
            p = estimate_streamed(seg.plan)
            ddr = (p.gemm.packing_cycles + p.epilogue_cycles) / clock * 1e9
            costs.append(SegmentCost(spec.name, spec.kind, layers, p.latency_ns, p.interval_ns, ddr, 0.0,
                                     tiles_of[spec.index][0], p.bound))
            continue
        p = seg.estimate()
        reps = max(1, p.replicas)
        cut_ns = boundary[spec.index]
        costs.append(SegmentCost(spec.name, spec.kind, layers, p.latency_ns + cut_ns, p.interval_ns / reps + cut_ns,
                                 cut_ns, cut_ns, tiles_of[spec.index][0], p.bound, reps))
    latency = sum(c.latency_ns for c in costs)
    interval = sum(c.interval_ns for c in costs)
    ddr = sum(c.ddr_ns for c in costs)
    slowest = max(costs, key=lambda c: c.interval_ns)
    bound = f"segment {slowest.name} ({slowest.bound})"
    macs = sum(int(n.attrs["in_features"]) * int(n.attrs["out_features"]) for n in dense_nodes(d.graph))
    tiles = sum(c.tiles for c in costs)
    return SegmentedPerformance(tuple(costs), batch, latency, interval, ddr, 2 * macs * batch / (interval * 1e-9),
                                bound, tiles, tiles <= d.device.compute_tiles,
                                memory_tiles_used=sum(seg.estimate().memory_tiles_used for seg in d.segments))


def _bytes_per_sample(graph: Graph, tensor: str) -> int:
    t = graph.tensors[tensor]
    # bf16 cuts travel as 16-bit patterns (a streamed bf16 segment's X.bin / Y.bin), fp32 ones as float32
    bits = t.dtype.container_bits if isinstance(t.dtype, FixedType) else 16 if t.dtype.name == "bf16" else 32
    return int(np.prod(t.shape)) * bits // 8


# ----------------------------------------------------------------------------- compile / load


def compile_segmented(q: Any, reasons: Mapping[str, str], progress: Any = None,
                      cache: _FitCache | None = None) -> SegmentedDesign:
    """Compile every segment of ``q`` (the state after quantisation) with ``reasons``' layers streamed."""
    from .dense import plan_streamed
    from .dense_design import StreamedDenseDesign

    if q.config.batch_search is not None:
        raise ConfigError(f"config option 'batch' ({q.config.to_json()['batch']}) does not apply to segmented designs: "
                          "a searched batch with streamed layers inside a chain; every segment must use the same batch",
                          hint="give one batch (e.g. batch: 8)")
    specs = partition(q.graph, reasons)
    cache = cache or _FitCache(q)
    t0 = time.perf_counter()
    plans = {}  # the streamed layers first: fp32 ones change the values the resident segments see
    for spec in specs:
        if spec.kind == "streamed":
            (layer,) = _compute(q.graph, spec)
            plans[spec.index] = plan_streamed(subgraph(q.graph, spec), q.device, q.config, q.graph.node(layer),
                                              reasons[layer])
    values = None
    example = q.example_input if q.example_input is not None else q.calibration
    if example is not None:
        fp32 = float_plans({p.layer: p for p in plans.values()})
        emu = (GemmOrderEmulation(q.graph, q.device, q.config, None, q.source, streamed=fp32) if fp32 else
               Emulation(q.graph, q.device, q.config, q.source))
        values = emu.trace(emu.quantise_input(example))
    segments = []
    for spec in specs:
        if progress:
            progress(f"segment {spec.name}: {', '.join(_compute(q.graph, spec))}")
        sub = subgraph(q.graph, spec)
        if spec.kind == "streamed":
            segments.append(StreamedDenseDesign(sub, q.device, q.config, plans[spec.index], q.source,
                                                example=None if values is None else np.asarray(values[spec.input])))
            continue
        err = cache.check(spec)
        if err is not None:
            raise err
        state = cache.placed[spec.nodes]
        if values is not None:
            t = q.graph.tensors[spec.input].dtype
            codes = np.asarray(values[spec.input])
            ex = fixed.dequantize(codes, t) if isinstance(t, FixedType) else codes
            state = replace(state, example_input=ex)
        segments.append(_emit_resident(state))
    ends = None if values is None else tuple(np.asarray(values[t]) for t in (q.graph.inputs[0], q.graph.outputs[0]))
    design = SegmentedDesign(q.graph, q.device, q.config, specs, tuple(segments), dict(reasons), q.source,
                             (*q.timings, ("segments", time.perf_counter() - t0)), example=ends)
    check_budgets(design)
    return design


# Target budget -> (its name in a config, the design's figure, each segment's figure, unit)
_BUDGET_FIELDS = {"max_tiles": ("tiles", "tiles_used", "tiles", "tiles"),
                  "max_latency_ns": ("latency_ns", "latency_ns", "latency_ns", "ns"),
                  "max_interval_ns": ("interval_ns", "interval_ns", "interval_ns", "ns")}


def check_budgets(design: SegmentedDesign) -> None:
    """The config's budgets hold for the whole segmented design, not only segment by segment (each
    resident segment's search sees them alone): a PlanError naming the budget and what each segment
    takes otherwise."""
    target = design.config.target
    budgets = {key: getattr(target, key) for key in _BUDGET_FIELDS if getattr(target, key) is not None}
    if not budgets:
        return
    e = design.estimate()
    for key, limit in budgets.items():
        name, attr, per_segment, unit = _BUDGET_FIELDS[key]
        got = getattr(e, attr)
        if got > limit:
            parts = ", ".join(f"{comment(c.name)} {getattr(c, per_segment):,.0f}" for c in e.segments)
            raise PlanError(f"the segmented design (weights streamed from DDR for {', '.join(map(comment, design.reasons))}) "
                            f"needs {got:,.0f} {unit} for '{name} <= {limit:,.0f}' over all its segments ({parts}); "
                            "each resident segment meets the budget alone, the whole design does not",
                            hint=f"relax the '{name}' budget, or give the resident layers less parallelism")


def load(path: str | os.PathLike) -> SegmentedDesign:
    """Reload a design written by :meth:`SegmentedDesign.save`: each segment by ``aieflow.load``
    of its own directory; the whole model's graph is their nodes in order."""
    from ..design import load as load_design

    d = Path(path)
    where = f"'{d}/design.json'"
    redo = "re-run aieflow compile to write the design again"
    try:
        meta = json.loads((d / "design.json").read_text())
    except FileNotFoundError as e:
        raise AieflowError(f"'{d}' is not an aieflow design directory: {e.filename} is missing") from None
    except (OSError, ValueError) as e:
        raise AieflowError(f"cannot read the segmented design in '{d}': {e}") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT or meta.get("version") != FORMAT_VERSION:
        got = (meta.get("format"), meta.get("version")) if isinstance(meta, dict) else (None, None)
        raise AieflowError(f"{where} is format {got[0]!r} version {got[1]!r}; this reads {FORMAT!r} version "
                           f"{FORMAT_VERSION}", hint=redo)
    try:
        device = get_device(meta["device"]["key"])
        config = parse_config(meta["config"])
        specs = tuple(SegmentSpec(i, s["kind"], tuple(s["layers"]), s["input"], s["output"])
                      for i, s in enumerate(meta["segments"]))
        reasons = dict(meta["streamed"])
        segments = []
        for spec, s in zip(specs, meta["segments"], strict=True):
            seg = load_design(d / s["dir"])
            want = "streamed_dense" if spec.kind == "streamed" else "chain"
            got_kind = seg.to_json().get("kind")
            if got_kind != want:
                raise AieflowError(f"segment {spec.name} in '{d / s['dir']}' is a {got_kind or 'resident'} design; "
                                   f"{where} says {spec.kind}")
            names = tuple(n.name for n in seg.graph.nodes)
            if names != spec.nodes or seg.graph.inputs != (spec.input,) or seg.graph.outputs != (spec.output,):
                raise AieflowError(f"segment {spec.name} holds layers {list(names)} ({seg.graph.inputs[0]} -> "
                                   f"{seg.graph.outputs[0]}); {where} says {list(spec.nodes)} ({spec.input} -> "
                                   f"{spec.output})")
            segments.append(seg)
    except AieflowError as e:
        raise AieflowError(f"{where} does not describe a valid segmented design: {e}", hint=redo) from None
    except (KeyError, TypeError, ValueError) as e:
        raise AieflowError(f"{where} is incomplete or damaged: {type(e).__name__}: {e}", hint=redo) from None
    for a, b in zip(specs, specs[1:], strict=False):
        ta = segments[a.index].graph.tensors[a.output].dtype
        tb = segments[b.index].graph.tensors[b.input].dtype
        if a.output != b.input or ta != tb:
            raise AieflowError(f"{where}: segment {a.name} hands on '{a.output}' ({ta}) but {b.name} reads "
                               f"'{b.input}' ({tb})", hint=redo)
    graph = _whole_graph(meta.get("name", "model"), segments)
    design = SegmentedDesign(graph, device, config, specs, tuple(segments), reasons, meta.get("source", ""))
    for name in ("samples.txt", "X.txt", "Y_golden.txt"):  # the one host's data, as saved
        if (d / "data" / name).is_file():
            design.top_files[f"data/{name}"] = (d / "data" / name).read_text()
    return design


def _whole_graph(name: str, segments: list[Any]) -> Graph:
    nodes = tuple(replace(n, plan=None) for seg in segments for n in seg.graph.nodes)
    tensors: dict[str, Any] = {}
    for seg in segments:
        tensors.update(seg.graph.tensors)
    g = Graph(nodes, tensors, segments[0].graph.inputs, segments[-1].graph.outputs, name)
    g.validate()
    return g
