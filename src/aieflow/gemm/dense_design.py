"""A compiled model whose Dense layer streams its weights: what ``aieflow.compile`` returns when the
planner chooses ``streamed`` (``gemm/dense.py``).

It answers like :class:`aieflow.design.Design` (``predict``, ``run``, ``quantise_input``, ``verify``,
``estimate``, ``summary``, ``to_json``, ``save``, ``files``); its numerics are the Dense family's
own emulator (integer layers) or the GEMM's fp32 order (fp32 layers, ``gemm/streamed_float.py``),
and ``verify`` runs the generated GEMM and epilogue C++ on x86 against them.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
import time
from dataclasses import dataclass, field, replace
from functools import cached_property
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from .. import __version__, design_schema
from ..atomic import save_directory, write_files
from ..config import Config, Target, parse_config
from ..devices import Device, get_device
from ..emulation import EmulatedNumerics, Emulation
from ..errors import AieflowError, ConfigError, PlanError
from ..graph_io import graph_arrays, graph_from_json, graph_to_json, read_weights, write_weights
from ..integrity import read_project
from ..ir import Graph, Node, frozen_map
from ..names import comment, text
from ..numerics import fixed
from ..numerics.types import FloatType
from ..ops.dense import _types_to_json
from ..ops.registry import family
from ..perf.bands import summary_line
from ..perf.system import attach as system_attach
from ..perf.system import design_lines as system_lines
from ..perf.system import report_lines as system_report_lines
from ..templating import environment
from ..verify import VerifyError
from .aieml import is_memtile_device, ml_type
from .dense import (
    StreamedDensePerformance,
    StreamedDensePlan,
    dense_nodes,
    epilogue_of,
    estimate_streamed,
    plan_streamed,
    weights_mode,
)
from .design import GemmDesign
from .dtypes import get_type, output_type
from .lower import streamed_resources
from .plan import GemmConfig, make_plan
from .search import Alternative
from .streamed_float import GemmOrderEmulation

FORMAT = "aieflow-streamed-dense"  # read back by :func:`load` (``aieflow.load`` dispatches here)
FORMAT_VERSION = 1
KIND = "streamed_dense"
EPILOGUE_UNITS = ("x86/dense_epilogue_harness.cpp", "pl/dense_epilogue.cpp")

_ENV = environment("gemm")

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class StreamedVerifyResult:
    samples: int
    values: int
    mismatches: int
    first: tuple[int, int, Any, Any] | None  # sample, feature, expected, got (codes, or fp32 values)
    build_seconds: float
    run_seconds: float

    @property
    def ok(self) -> bool:
        return self.mismatches == 0

    def verdict(self) -> str:
        head = (f"{self.values} outputs of {self.samples} samples (GEMM + epilogue C++ on x86), built in "
                f"{self.build_seconds:.1f} s, ran in {self.run_seconds:.2f} s")
        if self.ok:
            return f"verify: PASS, bit-exact: {head}"
        s, j, want, got = self.first
        return (f"verify: FAIL, {self.mismatches} of {self.values} outputs differ: {head}\n"
                f"  first at sample {s}, feature {j}: expected {want}, got {got}")


@dataclass
class StreamedDenseDesign(EmulatedNumerics):
    graph: Graph
    device: Device
    config: Config
    plan: StreamedDensePlan
    source: str = ""
    timings: tuple[tuple[str, float], ...] = ()
    files: dict[str, str] = field(default_factory=dict)
    # graph-input codes of the samples given at compile time (example input, or the whole model's
    # values at this segment's cut): data/X.bin and Y_golden.bin hold all of them (else a random batch)
    example: np.ndarray | None = field(default=None, compare=False, repr=False)
    saved_data: dict[str, bytes] = field(default_factory=dict, compare=False, repr=False)  # a loaded design's data/

    def __post_init__(self) -> None:
        if not self.files:
            from .emit import streamed_dense_system
            from .lower import streamed_lowering

            g = self.gemm
            self.files = {**g.files, **self._dense_files(),
                          **streamed_dense_system(g.plan, g.estimate(), g.ships_data, self._x_c_type,
                                                  streamed_lowering(self.plan))}

    # ------------------------------------------------------------------ parts

    @cached_property
    def gemm(self) -> GemmDesign:
        return GemmDesign(self.plan.gemm, self.plan.alternatives)

    @property
    def node(self) -> Node:
        return self.graph.node(self.plan.layer)

    @property
    def is_float(self) -> bool:
        """An fp32 layer: its values are the GEMM's float order, not the resident kernel's."""
        return self.plan.epilogue.is_float

    @property
    def is_bf16(self) -> bool:
        """A bf16 layer (AIE-ML / v2): X, W and Y travel as bf16 bit patterns (``bf16_bits``)."""
        return self.plan.epilogue.bf16

    @property
    def numerics_note(self) -> str:
        """How an fp32 layer's values are computed (empty for integer layers: the Dense emulator's)."""
        if not self.is_float:
            return ""
        note = _FLOAT_NOTE.format(kc=self.plan.gemm.blocks.kc, t="bf16" if self.is_bf16 else "fp32")
        return note.replace("the bias is added last", "the bias is added last, then one rounding to bf16 and the ReLU") \
            if self.is_bf16 else note

    @property
    def _emulation(self) -> Emulation | GemmOrderEmulation:
        if self.is_float:  # the streamed layer in its GEMM's order (what the generated C++ computes)
            return GemmOrderEmulation(self.graph, self.device, self.config, None, self.source,
                                      streamed={self.plan.layer: self.plan})
        return Emulation(self.graph, self.device, self.config, self.source)

    # ------------------------------------------------------------------ numerics (the Dense emulator)

    def run(self, xq: np.ndarray) -> np.ndarray:
        y = np.asarray(self.trace(xq)[self.graph.outputs[0]])
        return y.astype(np.float32) if self.is_float else y.astype(np.int64)

    def layer_input(self, xq: np.ndarray) -> np.ndarray:
        """The Dense layer's input codes (samples x in_features; fp32 values for an fp32 layer), views
        applied."""
        x = np.asarray(self.trace(xq)[self.node.inputs[0]])
        x = x.reshape(x.shape[0], -1).astype(np.float32 if self.is_float else np.int64)
        return fixed.to_bf16(x) if self.is_bf16 else x  # as the resident bf16 kernel rounds its input

    def operands(self, x_codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """A and B of the GEMM for these layer inputs (the orientation decides which is which)."""
        w = np.asarray(self.node.params["weight_q"]).astype(np.float32 if self.is_float else np.int64)
        return (x_codes, w) if self.plan.orientation == "xw" else (np.ascontiguousarray(w.T),
                                                                    np.ascontiguousarray(x_codes.T))

    def bias_codes(self) -> np.ndarray:
        """``data/bias.bin``: int32 codes, or float32 values for an fp32 layer (zeros without a bias)."""
        bq = self.node.params.get("bias_q")
        n = self.plan.out_features
        if self.is_float:
            return np.zeros(n, np.float32) if bq is None else np.asarray(bq, dtype=np.float32)
        return np.zeros(n, np.int32) if bq is None else np.asarray(bq).astype(np.int64).astype(np.int32)

    # ------------------------------------------------------------------ performance

    def estimate(self) -> StreamedDensePerformance:
        return self._performance

    @cached_property
    def _performance(self) -> StreamedDensePerformance:
        """The model's figures, with the tiles counted on the layer's mapped graph."""
        e = estimate_streamed(self.plan)
        tiles, memtiles = streamed_resources(self.plan)
        return replace(e, gemm=replace(e.gemm, tiles_used=tiles), memory_tiles_used=memtiles)

    # ------------------------------------------------------------------ x86 check

    def verify(self, x: Any | None = None, samples: int | None = None, seed: int = 0,
               cache_dir: str | os.PathLike | None = None, jobs: int | None = None,
               xq: np.ndarray | None = None) -> StreamedVerifyResult:
        """Run the generated GEMM harness (AIE kernel + graph, PL mover and write-back, host loops)
        and then the epilogue kernel on x86, and compare every output code with :meth:`run`.
        ``x``: float samples (default: ``samples`` random ones over the input type's range, plus
        extreme rows); ``xq``: graph-input codes instead (a segment of a longer chain)."""
        from . import verify as gv

        p = self.plan
        if xq is not None:
            xq = np.asarray(xq)
        elif x is None:
            xq = self.random_input_codes(samples or p.batch, seed)
        else:
            xq = self.quantise_input(x)
        want = self.run(xq).reshape(xq.shape[0], -1)
        xc = self.layer_input(xq)
        a, b = self.operands(xc)
        m, n = a.shape[0], b.shape[1]
        cache = Path(cache_dir) if cache_dir else None
        arch = self.device.generation.arch_macro
        # the GEMM sources as this design holds them (a loaded design: as saved on disk)
        gemm_files = {rel: self.files.get(rel, text) for rel, text in self.gemm.files.items()}
        gemm_bin, _, t1 = gv.build(gemm_files, arch, cache, jobs)
        epi_bin, _, t2 = gv.build(self.files, arch, cache, jobs, units=EPILOGUE_UNITS)
        start = time.perf_counter()
        with tempfile.TemporaryDirectory(prefix="aieflow-dense-verify-") as tmp:
            work = Path(tmp)
            gv.write_inputs(work, m, n, p.in_features, a.astype(p.gemm.dtype.np_dtype), b.astype(p.gemm.dtype.np_dtype),
                            p.gemm.dtype.name)
            gv.run_harness(gemm_bin, work)
            (work / "epi").mkdir()
            (work / "out" / "C.bin").replace(work / "epi" / "C.bin")
            (work / "epi" / "epilogue.txt").write_text(f"{xc.shape[0]}\n")
            self.bias_codes().tofile(work / "epi" / "bias.bin")
            gv.run_harness(epi_bin, work / "epi")
            got = np.fromfile(work / "epi" / "out" / "Y.bin", dtype=np.dtype(p.epilogue.y_np))
            if self.is_bf16:  # bf16 bit patterns -> their float32 values
                got = (got.astype(np.uint32) << np.uint32(16)).view(np.float32)
        run_s = time.perf_counter() - start
        if got.size != want.size:
            raise VerifyError(f"the epilogue wrote {got.size} outputs; {want.size} were expected")
        got = got.reshape(want.shape)
        if self.is_float:  # bit for bit: -0.0 is not +0.0
            bad = want.astype(np.float32).view(np.uint32) != got.view(np.uint32)
        else:
            got = got.astype(np.int64)
            bad = want != got
        first = None
        if bad.any():
            s, j = (int(v) for v in np.argwhere(bad)[0])
            cast = float if self.is_float else int
            first = (s, j, cast(want[s, j]), cast(got[s, j]))
        return StreamedVerifyResult(int(xc.shape[0]), int(want.size), int(bad.sum()), first, t1 + t2, run_s)

    def random_input_codes(self, samples: int, seed: int = 0) -> np.ndarray:
        """Graph-input codes uniform over the input type's range, with all-minimum and all-maximum
        rows first (the extremes of every product); fp32: ``aieflow.verify``'s float edge rows (zeros,
        -0.0, subnormals, mixed magnitudes) then normal samples at several scales."""
        t = self.input_type
        shape = self.graph.tensors[self.graph.inputs[0]].shape
        if isinstance(t, FloatType):
            from ..verify import verification_inputs

            return verification_inputs(t, tuple(shape), samples, seed)
        rng = np.random.default_rng(seed)
        xq = rng.integers(t.min_code, t.max_code + 1, size=(samples, *shape), dtype=np.int64)
        if samples >= 2:
            xq[0] = t.min_code
            xq[1] = t.max_code
        return xq

    # ------------------------------------------------------------------ project

    def _dense_files(self) -> dict[str, str]:
        p = self.plan
        ctx = {"version": __version__, "layer": p.layer, "orientation": p.orientation, "e": p.epilogue,
               "out_c": p.gemm.output.name, "in_features": p.in_features, "out_features": p.out_features}
        base = resources.files("aieflow").joinpath("templates/gemm")
        header = "dense_epilogue_float.h.j2" if p.epilogue.is_float else "dense_epilogue.h.j2"
        return {
            "pl/dense_epilogue.h": _ENV.get_template(header).render(**ctx),
            "host/dense_host.cpp": self._host(ctx),
            "pl/dense_epilogue.cpp": base.joinpath("dense_epilogue.cpp").read_text(),
            "x86/dense_epilogue_harness.cpp": base.joinpath("dense_epilogue_harness.cpp").read_text(),
            "DENSE.md": self._readme(),
        }

    def _host(self, ctx: dict[str, Any]) -> str:
        """The XRT host of the layer (X from a file, W and bias from data/, GEMM, epilogue, Y to a
        file): the project's ``host.exe`` (``make host``; the tests build it against the real XRT)."""
        from .emit import GRAPH_VAR

        g = self.plan.gemm  # one stream argument per PLIO of the mover (Ar + Br) and of the write-back (Cr)
        t = self.graph.tensors[self.node.inputs[0]].dtype
        return _ENV.get_template("dense_host.cpp.j2").render(
            **ctx, board=self.device.board, ins=range(g.plio_in), outs=range(g.plio_out), graph_var=GRAPH_VAR,
            x_c_type=self._x_c_type, x_type=t.to_string())

    @property
    def _x_c_type(self) -> str:
        """The C type of the layer's input codes (``X.bin``: the host's and the x86 system run's input)."""
        t = self.graph.tensors[self.node.inputs[0]].dtype
        if self.is_bf16:
            return "std::uint16_t"  # bf16 bit patterns, as the GEMM's operands (gemm_cfg::a_t)
        return t.c_type if isinstance(t, FloatType) else f"std::{'' if t.signed else 'u'}int{t.container_bits}_t"

    def x_codes_np(self) -> np.dtype:
        """The numpy type of ``X.bin``'s codes (the layer input's container)."""
        t = self.graph.tensors[self.node.inputs[0]].dtype
        if self.is_bf16:
            return np.dtype(np.uint16)
        return np.dtype(np.float32) if isinstance(t, FloatType) else np.dtype(f"{'' if t.signed else 'u'}int{t.container_bits}")

    def _readme(self) -> str:
        p, e = self.plan, self.estimate()
        a, b = ("X (samples x in)", "W (in x out)") if p.orientation == "xw" else ("W^T (out x in)", "X^T (in x samples)")
        return (
            f"# Streamed Dense layer '{comment(p.layer)}' (aieflow {__version__})\n\n"
            f"Why streamed: {text(p.reason)}.\n\n"
            f"The layer runs as the GEMM of this project with A = {a} and B = {b} (orientation `{p.orientation}`, "
            f"chosen by the model: {', '.join(f'{o} {c:,.0f} cycles' for o, c in p.orientations.items())}). "
            f"The weights stay in DDR (`data/W.bin`, {'bf16 bit patterns' if self.is_bf16 else 'float32 values' if self.is_float else 'int codes'}, in x out "
            f"row-major; `data/bias.bin` {p.epilogue.bias_np}).\n"
            f"After the five loops, `pl/dense_epilogue.cpp` turns C into the layer's output "
            + (f"values in float32 ({'y = c + bias' if p.epilogue.has_bias else 'y = c'}, "
               f"{'then one rounding to bf16, Y as bf16 bit patterns, ' if self.is_bf16 else ''}"
               f"{'then ReLU' if p.epilogue.relu else 'no activation'}).\n\nNumerics: {self.numerics_note}.\n\n"
               if p.epilogue.is_float else
               f"codes (bias, {p.epilogue.acc_bits}-bit accumulator wrap, SRS by {p.epilogue.shift}, "
               f"{'ReLU' if p.epilogue.relu else 'no activation'}).\n\n")
            +
            f"XRT host: `host/dense_host.cpp` (usage: `dense_host design.xclbin X.bin Y.bin samples [Y_golden.bin]`) allocates "
            f"`xrt::bo`s for A, B, C, the bias and Y, runs the five loops and then the `dense_epilogue` kernel "
            f"(`system.cfg` links it: `nk=dense_epilogue:1` next to the GEMM kernels; the C buffer must be "
            f"in a bank both `gemm_collect` and `dense_epilogue` reach).  `make host` builds it as `host.exe` (aieflow's "
            f"tests build it against Debian's libxrt-dev, XRT 2.13); `make run X=... Y=... SAMPLES=...` runs it on the "
            f"board (default: `data/X.bin`, {'every sample given at compile time' if self.example is not None else 'a random batch'}, "
            f"compared with `data/Y_golden.bin`; latency and samples/s printed).  By hand: "
            f"`$(CXX) -std=c++17 -Isrc -I. -Ipl -I$(XILINX_XRT)/include host/dense_host.cpp "
            f"-L$(XILINX_XRT)/lib -lxrt_coreutil -o dense_host`.\n\n"
            f"x86 runs (no AMD tools): `make system-run` runs the host's steps on `data/X.bin` (the five loops with "
            f"`gemm_mover` / `gemm_collect`, then `dense_epilogue`, as HLS C simulation against Xilinx's ap_types: "
            f"`AP_TYPES=<dir>` unless Vitis HLS's settings or hls4ml provide them; the graph on aieflow's shim) and "
            f"compares Y with `data/Y_golden.bin`; `make shim-run` the same with the PL kernels on the shim's ap_int.  "
            f"`aieflow verify` builds `x86/harness.cpp` (the GEMM) and `x86/dense_epilogue_harness.cpp` "
            f"(reads C.bin, bias.bin, epilogue.txt; writes Y.bin).\n\n"
            f"Modelled: {e.cycles:,.0f} cycles ({e.latency_ns / 1e3:,.1f} us) per call of {p.batch} samples, "
            f"bound: {e.bound}.\n"
        )

    # ------------------------------------------------------------------ reports

    def to_json(self) -> dict[str, Any]:
        p, node = self.plan, self.node
        g = self.gemm.to_json()
        return {
            **design_schema.header(FORMAT, FORMAT_VERSION, KIND),
            "device": {"key": self.device.key, **self.device.describe()},
            "source": self.source,
            "config": self.config.to_json(),
            "input": {"tensor": self.graph.inputs[0], "shape": list(self.graph.tensors[self.graph.inputs[0]].shape),
                      "type": self.input_type.to_string()},
            "output": {"tensor": self.graph.outputs[0], "shape": list(self.graph.tensors[self.graph.outputs[0]].shape),
                       "type": self.output_type.to_string()},
            "layers": {
                node.name: {
                    "op": node.op,
                    "activation": node.attrs.get("activation"),
                    "weights": "streamed",
                    "weights_reason": p.reason,
                    "weight_bytes": p.weight_bytes,
                    "types": _types_to_json(node.types),
                    "orientation": p.orientation,
                    "orientation_cycles": p.orientations,
                    "epilogue": p.epilogue.to_json(),
                    **({"numerics": self.numerics_note} if self.is_float else {}),
                    "gemm": {k: g[k] for k in ("design", "problem", "types", "blocks", "config", "tiles", "memory",
                                                "plio", "alternatives")},
                }
            },
            "resources": {"compute_tiles": streamed_resources(p)[0],
                          "compute_tiles_available": self.device.compute_tiles,
                          "memory_tiles": streamed_resources(p)[1],
                          "plio_in": p.gemm.plio_in, "plio_out": p.gemm.plio_out,
                          "uram_bytes": p.gemm.uram_bytes, "bram_bytes": p.gemm.bram_bytes,
                          "bytes_per_tile_max": p.gemm.local_bytes,
                          "tile_memory_bytes": self.device.generation.data_memory_bytes},
            "performance": system_attach(design_schema.performance_json(self.estimate()),
                                         self, KIND),
            "project_files": sorted(self.files),
            "plan": _plan_json(p),  # what :func:`load` rebuilds the plan from
            "graph": graph_to_json(self.graph),  # the quantised graph; its params are in weights.npz
        }

    def report_html(self, path: str | os.PathLike | None = None, data: Any = None, verify: Any = None) -> str:
        """The self-contained HTML report (``aieflow.html_report.report_html``), written to ``path`` if given."""
        from ..html_report import report_html

        return report_html(self, path, data=data, verify=verify)

    def placement_svg(self) -> str:
        """The GEMM tiles on the array (``aieflow report``) where the one placer puts them
        (``gemm/emit.place``), as the generated graph's location constraints pin them."""
        return self.gemm.placement_svg(f"{self.plan.layer} (GEMM)")

    def report(self) -> str:
        return "\n".join([self.summary(), design_schema.breakdown_text(self.to_json()["performance"]),
                          *system_report_lines(self)])

    def summary(self) -> str:
        p, e = self.plan, self.estimate()
        g = e.gemm
        c = p.gemm.config
        return "\n".join([
            f"{self.graph.name} on {self.device.board}: Dense '{p.layer}' {p.in_features} x {p.out_features} "
            f"with STREAMED weights ({p.weight_bytes / (1 << 20):,.2f} MiB in DDR)",
            f"  why: {p.reason}",
            f"  GEMM {p.gemm.m} x {p.gemm.n} x {p.gemm.k} ({p.gemm.dtype.name} -> {p.gemm.output.name}), "
            f"orientation {p.orientation} (A = {'X' if p.orientation == 'xw' else 'W^T'}); tiles {p.gemm.tiles} = "
            f"{c.tiles_j} x {c.tiles_i}, Ar streams {c.ar_streams}, Br x{c.br_buffers}; blocks mc {p.gemm.blocks.mc}, "
            f"nc {p.gemm.blocks.nc}, kc {p.gemm.blocks.kc}",
            *([f"  epilogue (PL): {'bf16' if self.is_bf16 else 'fp32'} {'y = c + bias' if p.epilogue.has_bias else 'y = c'}"
               f"{', rounded to bf16' if self.is_bf16 else ''}{', then ReLU' if p.epilogue.relu else ''}",
               f"  numerics: {self.numerics_note}"] if p.epilogue.is_float else
              [f"  epilogue (PL): bias << {p.epilogue.bias_shift}, wrap {p.epilogue.acc_bits} bits, SRS >> "
               f"{p.epilogue.shift} to {p.epilogue.out_type}{', ReLU' if p.epilogue.relu else ''}"]),
            f"  modelled per call of {p.batch} samples: {e.cycles:,.0f} cycles = weights from DDR "
            f"{g.packing_cycles:,.0f} + AIE {g.cycles:,.0f} + epilogue {e.epilogue_cycles:,.0f}; latency "
            f"{e.latency_ns / 1e3:,.1f} us, {e.throughput_ops_per_s / 1e9:,.1f} GOPS, bound: {e.bound}",
            *system_lines(self),
            "  " + summary_line(),
        ])

    def data_files(self) -> dict[str, bytes]:
        """``data/``: the weights and bias the host reads, and for ``make run`` / ``make system-run``
        the layer inputs (``X.bin``: every sample given at compile time, :attr:`example`; without one
        a batch of seeded random codes with the type's extreme rows first, :meth:`random_input_codes`;
        ``samples.txt``), the emulator's outputs for them (``Y_golden.bin``) and the simulators' PLIO
        files of the GEMM's first graph iteration on them (``gemm/plio_data.py``)."""
        if self.saved_data:  # a loaded design: data/ as it was saved (its samples are not in design.json)
            return dict(self.saved_data)
        w = np.asarray(self.node.params["weight_q"]).astype(self.plan.gemm.dtype.np_dtype)
        xq = self.random_input_codes(self.plan.batch) if self.example is None else np.asarray(self.example)
        x = self.layer_input(xq)
        y = self.run(xq).reshape(xq.shape[0], -1)
        if self.is_bf16:  # W, X and Y as the PL and host hold them: bf16 bit patterns
            w, x, y = bf16_bits(w), bf16_bits(x), bf16_bits(y)
        x = x.astype(self.x_codes_np())
        y = y.astype(np.dtype(self.plan.epilogue.y_np))
        from .plio_data import golden_cr_files, plio_files

        # the simulators' input (x86sim / aiesim): the GEMM's PLIOs' first graph iteration for these A and B
        a, b = (v.astype(self.plan.gemm.dtype.np_dtype) for v in self.operands(self.layer_input(xq)))
        return {"data/W.bin": w.tobytes(), "data/bias.bin": self.bias_codes().tobytes(), "data/X.bin": x.tobytes(),
                "data/samples.txt": f"{x.shape[0]}\n".encode(), "data/Y_golden.bin": y.tobytes(),
                **{rel: text.encode() for rel, text in plio_files(self.plan.gemm, a, b).items()},
                **{rel: text.encode() for rel, text in golden_cr_files(self.plan.gemm, a, b).items()}}

    def save(self, out_dir: str | os.PathLike, force: bool = False) -> Path:
        """``design.json``, ``weights.npz`` and ``project/`` (GEMM + epilogue, with the weights in
        ``data/``), atomically."""
        def write(tmp: Path) -> None:
            (tmp / "design.json").write_text(json.dumps(self.to_json(), indent=2) + "\n")
            write_weights(tmp / "weights.npz", graph_arrays(self.graph))
            write_files(tmp / "project", {**self.files, **self.data_files()})

        return save_directory(out_dir, force, write)


_FLOAT_NOTE = ("{t} in the GEMM's order, which predict emulates: per kc block of {kc}, each sum starts at +0.0 and "
               "adds the products in increasing k, the blocks are added into C, the bias is added last; the "
               "resident kernel starts from the bias, so the values may differ from the same layer resident in "
               "the last bits (docs/gemm.md gives measured differences)")


def bf16_bits(x: np.ndarray) -> np.ndarray:
    """bf16 values (float32 whose low 16 bits are zero) as their 16-bit patterns (std::uint16_t)."""
    return (np.ascontiguousarray(x, dtype=np.float32).view(np.uint32) >> np.uint32(16)).astype(np.uint16)


def _plan_json(p: StreamedDensePlan) -> dict[str, Any]:
    g = p.gemm
    return {
        "layer": p.layer, "orientation": p.orientation, "batch": p.batch, "in_features": p.in_features,
        "out_features": p.out_features, "reason": p.reason, "orientations": dict(p.orientations),
        "epilogue": p.epilogue.to_json(),
        "gemm": {"m": g.m, "n": g.n, "k": g.k, "dtype": g.dtype.name, "output": g.output.name, "design": g.design,
                 "config": {k: v for k, v in g.config.to_json().items() if k != "tiles"},
                 "blocks": {"mc": g.blocks.mc, "nc": g.blocks.nc, "kc": g.blocks.kc}},
        "alternatives": [a.to_json() for a in p.alternatives],
    }


def _config_of(d: dict[str, Any]) -> GemmConfig:
    return GemmConfig(**{k: v for k, v in d.items() if k != "tiles"})


def _plan_from_json(d: dict[str, Any], graph: Graph, device: Device) -> StreamedDensePlan:
    """The saved plan, re-made (and so re-validated) by the GEMM planner with its saved design point
    and block sizes; the epilogue is derived again from the layer's saved types."""
    g = d["gemm"]
    t = get_type(g["dtype"])
    if is_memtile_device(device):  # the generation's mmul shape and accumulator (bf16 on AIE-ML / v2)
        t = ml_type(t, device)
    gemm = make_plan(int(g["m"]), int(g["n"]), int(g["k"]), t, output_type(t, int(g["k"]), g["output"]), device,
                     g["design"], _config_of(g["config"]), g["blocks"])
    alts = tuple(Alternative(_config_of(a["config"]), a["blocks"], a["cycles"], a["total_cycles"], a["chosen"],
                             a["note"]) for a in d["alternatives"])
    dense = [n for n in graph.nodes if n.op == "dense"]
    if [n.name for n in dense] != [d["layer"]]:
        raise AieflowError(f"the plan is for layer {d['layer']!r}, but the saved graph's Dense layer(s) are "
                           f"{[n.name for n in dense]}")
    node = dense[0]
    return StreamedDensePlan(d["layer"], d["orientation"], int(d["batch"]), int(d["in_features"]),
                             int(d["out_features"]), gemm, epilogue_of(node), d["reason"], alts,
                             dict(d["orientations"]))


def load(path: str | os.PathLike) -> StreamedDenseDesign:
    """Reload a design written by :meth:`StreamedDenseDesign.save`: the quantised graph and its
    params (``weights.npz``), the plan re-made from its saved design point (so ``estimate`` and
    ``summary`` equal the original's) and the project as it is on disk (``verify`` builds it)."""
    d = Path(path)
    where = f"'{d}/design.json'"
    redo = "re-run aieflow compile to write the design again"
    try:
        meta = json.loads((d / "design.json").read_text())
        weights = read_weights(d / "weights.npz")
    except FileNotFoundError as e:
        raise AieflowError(f"'{d}' is not an aieflow design directory: {e.filename} is missing") from None
    except (OSError, ValueError) as e:
        raise AieflowError(f"cannot read the streamed Dense design in '{d}': {e}") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT or meta.get("version") != FORMAT_VERSION:
        got = (meta.get("format"), meta.get("version")) if isinstance(meta, dict) else (None, None)
        raise AieflowError(f"{where} is format {got[0]!r} version {got[1]!r}; this reads {FORMAT!r} version "
                           f"{FORMAT_VERSION}", hint=redo)
    if "plan" not in meta or "graph" not in meta:
        raise AieflowError(f"{where} has no 'plan' / 'graph' section (written before streamed designs could be "
                           f"reloaded, or edited)", hint=redo)
    try:
        device = get_device(meta["device"]["key"])
        config = parse_config(meta["config"])
        graph = graph_from_json(meta["graph"], weights)
        plan = _plan_from_json(meta["plan"], graph, device)
        on_disk = read_project(d, meta)
        files = {rel: on_disk[rel] for rel in meta["project_files"]}
    except AieflowError as e:
        raise AieflowError(f"{where} does not describe a valid streamed Dense design: {e}", hint=redo) from None
    except KeyError as e:
        raise AieflowError(f"{where} or weights.npz is incomplete: {e} is missing", hint=redo) from None
    except FileNotFoundError as e:
        raise AieflowError(f"'{d}/project' is incomplete: {e.filename} is missing", hint=redo) from None
    except (TypeError, ValueError, AttributeError, OSError) as e:
        raise AieflowError(f"{where} is damaged: {type(e).__name__}: {e}", hint=redo) from None
    want = {"xw": (plan.batch, plan.out_features, plan.in_features),
            "wx": (plan.out_features, plan.batch, plan.in_features)}.get(plan.orientation)
    if want != (plan.gemm.m, plan.gemm.n, plan.gemm.k):
        raise AieflowError(f"{where}: the GEMM {plan.gemm.m} x {plan.gemm.n} x {plan.gemm.k} is not layer "
                           f"'{plan.layer}' ({plan.in_features} -> {plan.out_features}, batch {plan.batch}) in "
                           f"orientation {plan.orientation!r}", hint=redo)
    node = graph.node(plan.layer)
    w = np.asarray(node.params.get("weight_q", ()))
    if w.shape != (plan.in_features, plan.out_features):
        raise AieflowError(f"weights.npz holds layer '{plan.layer}' weights of shape {list(w.shape)}; the plan in "
                           f"{where} is {plan.in_features} x {plan.out_features}", hint=redo)
    if plan.epilogue.to_json() != meta["plan"].get("epilogue"):
        raise AieflowError(f"layer '{plan.layer}': the epilogue saved in {where} ({meta['plan'].get('epilogue')}) "
                           f"disagrees with the layer's saved types ({plan.epilogue.to_json()})", hint=redo)
    data_dir = d / "project" / "data"
    saved = {f"data/{f.name}": f.read_bytes() for f in sorted(data_dir.iterdir()) if f.is_file()} if data_dir.is_dir() else {}
    return StreamedDenseDesign(graph, device, config, plan, meta.get("source", ""), files=files, saved_data=saved)


def without_user_constraints(config: Config) -> Config:
    """``config`` without what the user fixed about the resident mapping (parallelism, placement,
    target, batch search, replicas): when the chain fits without them, its failure is theirs to
    fix, and streaming weights around it would silently change the design they asked for."""
    layers = {k: replace(lc, cas_len=None, cas_num=None, placement=None) for k, lc in config.layers.items()}
    return replace(config, layers=frozen_map(layers), target=Target(), batch_search=None, replicas=None)


def compile_streamed(state: Any, progress: Any = None, failure: PlanError | None = None
                     ) -> StreamedDenseDesign | Any | None:
    """The streamed-weights design of ``state``'s model, or None when no layer is to be streamed
    (``failure``: the resident pipeline's error; ``auto`` layers are streamed only when the resident
    chain does not fit).  A model whose only compute layer streams gives a
    :class:`StreamedDenseDesign`; one with resident layers too a
    :class:`~aieflow.gemm.segmented.SegmentedDesign` (segments joined through DDR)."""
    from ..pipeline import run_pipeline
    from .segmented import _FitCache, compile_segmented, partition, streamed_layers

    q = run_pipeline(state, progress, stop_after="quantise")
    if failure is not None and not any(weights_mode(q.config, n) == "streamed" for n in dense_nodes(q.graph)):
        relaxed = replace(q, config=without_user_constraints(q.config))
        if relaxed.config != q.config and _FitCache(relaxed).check(partition(q.graph, {})[0]) is None:
            raise failure  # the user's parallelism, placement or target failed, not the weights' size
    cache = _FitCache(q)
    picked = streamed_layers(q, failure, cache)
    if not picked and failure is None:  # `weights: streamed` named layers that are not Dense
        names = sorted(n for n, lc in q.config.layers.items() if getattr(lc, "weights", "auto") == "streamed")
        raise ConfigError(f"weights: streamed is set for {', '.join(names)}, which is not a Dense layer",
                          hint="weights applies to Dense (fully connected) layers only")
    if not picked:
        return None
    compute = [n for n in q.graph.nodes if not family(n.op, n.name).is_view]
    for name, reason in picked.items():
        log.info("layer %s: weights streamed from DDR through a GEMM design (%s)", name, reason)
    if progress:
        progress(f"plan streamed weights (GEMM): {', '.join(picked)}")
    if len(compute) > 1:
        return compile_segmented(q, picked, progress, cache)
    from ..options import refuse_unsupported

    refuse_unsupported(q.config, "streamed_dense")
    ((name, reason),) = picked.items()
    t0 = time.perf_counter()
    plan = plan_streamed(q.graph, q.device, q.config, q.graph.node(name), reason)
    design = StreamedDenseDesign(q.graph, q.device, q.config, plan, q.source)
    example = q.example_input if q.example_input is not None else q.calibration
    if example is not None:  # data/X.bin: all of the given samples (the files say so: rendered again)
        design = replace(design, example=design.quantise_input(example), files={})
    design.timings = (*q.timings, ("streamed", time.perf_counter() - t0))
    return design
