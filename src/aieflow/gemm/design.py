"""A GEMM design: its plan, modelled performance, generated project, emulator and x86 check."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from .. import design_schema
from ..atomic import save_directory, write_files
from ..perf.bands import summary_line
from ..perf.system import attach as system_attach
from ..perf.system import design_lines as system_lines
from ..perf.system import report_lines as system_report_lines
from ..tables import plain
from . import emulate
from .emit import project_files
from .perf import GemmPerformance, estimate
from .plan import GemmPlan
from .search import Alternative

FORMAT = "aieflow-gemm"
FORMAT_VERSION = 1
DATA_LIMIT = 1 << 22  # elements of A + B up to which the project ships data/ for `make shim-run`


def memory_tiles(p) -> int:
    """Memory tiles the plan uses (Ac and Bc on AIE-ML; none on AIE1): its mapped graph's
    (``gemm/lower.resources``)."""
    from .lower import resources

    return resources(p)[1]


@dataclass
class GemmDesign:
    plan: GemmPlan
    alternatives: tuple[Alternative, ...] = ()
    files: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.files:
            self.files = project_files(self.plan, self.estimate(), self.ships_data)

    @property
    def ships_data(self) -> bool:
        p = self.plan
        return p.m * p.k + p.k * p.n <= DATA_LIMIT

    # ------------------------------------------------------------------ numerics

    def predict(self, a: Any, b: Any) -> np.ndarray:
        """C = A B exactly as the design computes it (int32 / int64 / float32)."""
        a, b = emulate.check_operands(self.plan, a, b)
        return emulate.gemm(self.plan, a, b)

    def verify(self, a: Any = None, b: Any = None, seed: int = 0, **kwargs: Any):
        """Build the project's C++ (AIE kernel and graph, PL kernels, loops) for x86 against aieflow's
        shims, run it on A, B (default: random over the whole type range) and compare C bit for bit
        with :meth:`predict` (see :func:`aieflow.gemm.verify.verify`)."""
        from .verify import verify

        return verify(self, a, b, seed=seed, **kwargs)

    # ------------------------------------------------------------------ performance

    def estimate(self) -> GemmPerformance:
        return self._performance

    @cached_property
    def _performance(self) -> GemmPerformance:
        """The model's figures, with the tiles counted on the design's mapped graph."""
        from .lower import resources

        tiles, memtiles = resources(self.plan)
        return replace(estimate(self.plan), tiles_used=tiles, memory_tiles_used=memtiles)

    # ------------------------------------------------------------------ reports

    def to_json(self) -> dict[str, Any]:
        p = self.plan
        return {
            **design_schema.header(FORMAT, FORMAT_VERSION, "gemm"),
            "device": {"key": p.device.key, **p.device.describe()},
            "source": "",
            "resources": {"compute_tiles": self.estimate().tiles_used, "compute_tiles_available": p.device.compute_tiles,
                          "memory_tiles": memory_tiles(p), "plio_in": p.plio_in, "plio_out": p.plio_out},
            "design": p.design,
            "problem": {"m": p.m, "n": p.n, "k": p.k},
            "types": {"a": p.dtype.name, "b": p.dtype.name, "c": p.output.name, "accumulator": p.dtype.acc,
                      "cr_wide": p.output.wide, "c_reason": p.output.reason},
            "blocks": p.blocks.to_json(),
            "config": p.config.to_json(),
            "tiles": p.tiles,
            "memory": {
                "br_bytes": p.br_bytes, "br_copies": p.limits.br_copies, "local_bytes_per_tile": p.local_bytes,
                "local_bytes_available": p.limits.local_bytes, "spare_bytes": p.limits.spare_bytes,
                **({"memory_tiles": p.memtiles.to_json()} if p.memtiles is not None
                   else {"ac_uram_bytes": p.uram_bytes, "bc_bram_bytes": p.bram_bytes}),
                "limits": {"kc": p.limits.kc, "mc": p.limits.mc, "nc": p.limits.nc},
            },
            "plio": {"in": p.plio_in, "out": p.plio_out, "bits": 128},
            "performance": system_attach(design_schema.performance_json(self.estimate()), self, "gemm"),
            "alternatives": [a.to_json() for a in self.alternatives],
            "project_files": sorted(self.files),
        }

    def summary(self) -> str:
        p, e = self.plan, self.estimate()
        c = p.config
        lines = [
            f"GEMM ({p.design}) on {p.device.key}: C {p.m} x {p.n} ({p.output.name}) = A {p.m} x {p.k} x "
            f"B {p.k} x {p.n} ({p.dtype.name})",
            f"  tiles {p.tiles} = {c.tiles_j} (L4) x {c.tiles_i} (L5); Ar streams/tile {c.ar_streams}; "
            f"Br {c.br_transfer} x{c.br_buffers}; write-back {c.writeback}",
            f"  blocks mc {p.blocks.mc}, nc {p.blocks.nc}, kc {p.blocks.kc}, mr {p.blocks.mr}, nr {p.blocks.nr}; "
            f"loops {p.n_jc} x {p.n_pc} x {p.n_ic} blocks x {p.l4_steps} L4 steps x {p.rounds} micro-kernels",
            f"  local memory {p.local_bytes:,} of {p.limits.local_bytes:,} B per tile"
            + (f"; memory tiles: {p.memtiles.ac_memtiles} Ac + {p.memtiles.bc_memtiles} Bc "
               f"({p.memtiles.lanes_per_memtile} L4 lanes each)" if p.memtiles is not None else ""),
            f"  modelled: {e.cycles:,.0f} cycles (+ {e.packing_cycles:,.0f} packing), latency {e.latency_ns / 1e3:,.1f} us, "
            f"{e.throughput_ops_per_s / 1e9:,.1f} GOPS, {e.macs_per_cycle_per_tile:.1f} MACs/cycle/tile "
            f"({100 * e.efficiency:.1f}% of peak), bound: {e.bound}",
            *system_lines(self),
            "  " + summary_line(),
        ]
        return "\n".join(lines)

    def report(self) -> str:
        """The summary and where the AIE cycles go."""
        e = self.estimate()
        rows = [self.summary(), "  breakdown (AIE cycles):"]
        table = [[k, f"{v:,.0f} cycles", f"{100 * v / e.cycles if e.cycles else 0:.1f}%"] for k, v in e.breakdown.items()]
        if table:
            rows.append(plain(table, rule=False, indent="    ", right=(1, 2)))
        return "\n".join(rows + system_report_lines(self))

    def report_html(self, path: str | os.PathLike | None = None, data: Any = None, verify: Any = None) -> str:
        """The self-contained HTML report (``aieflow.html_report.report_html``), written to ``path`` if given."""
        from ..html_report import report_html

        return report_html(self, path, data=data, verify=verify)

    def placement_svg(self, label: str | None = None) -> str:
        """The GEMM tiles on the array (``aieflow report``) where the one placer puts them
        (``gemm/emit.place``) and the generated graph's location constraints pin them: whole
        columns, then the last column's remainder."""
        from ..passes.place import Placement, Rect
        from ..placement_svg import placement_svg
        from .emit import GROUP, place

        p = self.plan
        dev, tiles = p.device, p.tiles
        name = label or f"GEMM {p.m} x {p.n} x {p.k}"
        r = place(p).rect(GROUP)
        full, rest = divmod(tiles, dev.rows)  # r.height is dev.rows when a column fills
        rects = [Rect(f"{name}", r.column, r.row, full, r.height)] if full else []
        if rest:
            rects.append(Rect(f"{name} ({rest})", r.column + full, r.row, 1, rest))
        placement = Placement(tuple(rects), dev.columns, dev.rows, method="GEMM tiles column by column")
        return placement_svg(placement, (), dev.memory_tile_rows, title=f"{name} on {dev.board}, {tiles} tiles")

    # ------------------------------------------------------------------ persistence

    def data_files(self) -> dict[str, bytes]:
        """data/ for `make shim-run`: the problem, seeded random A and B, the emulator's C; for
        `x86sim` / `aiesim` the Ar / Br PLIO files of the first graph iteration (gemm/plio_data.py)."""
        if not self.ships_data:
            return {}
        from .verify import random_operands

        a, b = emulate.check_operands(self.plan, *random_operands(self, seed=0))
        p = self.plan
        from .plio_data import golden_cr_files, plio_files

        files = {"data/problem.txt": f"{p.m} {p.n} {p.k}\n".encode(), "data/A.bin": emulate.operand_bytes(p.dtype.name, a),
                 "data/B.bin": emulate.operand_bytes(p.dtype.name, b), "data/C_golden.bin": self.predict(a, b).tobytes()}
        # the simulators' input: the PLIOs' first graph iteration (not the memory-tile design's yet)
        files.update({rel: text.encode() for rel, text in plio_files(p, a, b).items()})
        files.update({rel: text.encode() for rel, text in golden_cr_files(p, a, b).items()})  # their Cr
        return files

    def save(self, out_dir: str | os.PathLike, force: bool = False) -> Path:
        """Write ``design.json`` and ``project/`` atomically (temporary sibling, then rename)."""
        def write(tmp: Path) -> None:
            (tmp / "design.json").write_text(json.dumps(self.to_json(), indent=2) + "\n")
            write_files(tmp / "project", {**self.files, **self.data_files()})

        return save_directory(out_dir, force, write)


def _plan_json(meta: dict[str, Any]) -> dict[str, Any]:
    """The parts of ``design.json`` the planner decides (compared on load)."""
    return {k: meta[k] for k in ("design", "problem", "types", "blocks", "config", "tiles", "memory", "plio")}


def load(path: str | os.PathLike) -> GemmDesign:
    """Reload a design written by :meth:`GemmDesign.save`: the plan made again from the saved
    problem, types, configuration and block sizes (a plan that differs from the saved one means
    another aieflow wrote it, and is refused), the alternatives as saved, and the project's text
    files as they are on disk (``verify`` builds those)."""
    from ..devices import get_device
    from ..errors import AieflowError
    from ..graph_io import REDO
    from ..integrity import read_project
    from .aieml import is_memtile_device, ml_type
    from .dtypes import get_type, output_type
    from .plan import GemmConfig, make_plan

    d = Path(path)
    try:
        meta = json.loads((d / "design.json").read_text())
    except FileNotFoundError as e:
        raise AieflowError(f"'{d}' is not a GEMM design directory: {e.filename} is missing", hint=REDO) from None
    except (OSError, ValueError) as e:
        raise AieflowError(f"cannot read the GEMM design in '{d}': {e}") from None
    if meta.get("format") != FORMAT or meta.get("version") != FORMAT_VERSION:
        raise AieflowError(f"'{d}/design.json' is format {meta.get('format')!r} version {meta.get('version')!r}; "
                           f"this aieflow reads {FORMAT!r} version {FORMAT_VERSION}", hint=REDO)
    try:
        dev = get_device(meta["device"]["key"])
        t = get_type(meta["types"]["a"])
        if is_memtile_device(dev):
            t = ml_type(t, dev)
        prob = meta["problem"]
        out = output_type(t, prob["k"], meta["types"]["c"])
        cfg = GemmConfig(**{k: v for k, v in meta["config"].items() if k != "tiles"})
        blocks = {k: meta["blocks"][k] for k in ("mc", "nc", "kc")}
        plan = make_plan(prob["m"], prob["n"], prob["k"], t, out, dev, meta["design"], cfg, blocks)
        alts = tuple(Alternative(GemmConfig(**{k: v for k, v in a["config"].items() if k != "tiles"}), a["blocks"],
                                 a["cycles"], a["total_cycles"], a["chosen"], a["note"])
                     for a in meta.get("alternatives", ()))
        names = list(meta["project_files"])
    except (KeyError, TypeError) as e:
        raise AieflowError(f"'{d}/design.json' is incomplete or damaged ({type(e).__name__}: {e})", hint=REDO) from None
    on_disk = read_project(d, meta)
    missing = [rel for rel in names if rel not in on_disk]
    if missing:
        raise AieflowError(f"'{d}/project' lacks {missing[0]}", hint=REDO)
    files = {rel: on_disk[rel] for rel in names}
    design = GemmDesign(plan, alts, files)
    if json.loads(json.dumps(_plan_json(design.to_json()))) != _plan_json(meta):
        raise AieflowError(f"the GEMM plan in '{d}/design.json' differs from the one this aieflow makes for it",
                           hint=REDO)
    return design
