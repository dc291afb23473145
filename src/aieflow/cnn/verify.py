"""Run a CNN design's own generated C++ on x86 and compare its output bit for bit with ``predict``.

The harness is built with :mod:`aieflow.verify`'s compiler, flags, shim and build cache
(:func:`aieflow.verify.build_units`).  Stream mapping: the frames go to the replicas' input
PLIO files (frame f to replica f mod R, graph iteration f div R) and the output PLIOs are read back.
Thesis mapping: the harness runs the host's im2col, the graph and the PL kernels itself
(:mod:`aieflow.cnn.emit_thesis`) and reads / writes binary frames.
"""

from __future__ import annotations

import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..mapped.text import format_values
from ..numerics.types import FloatType, NumericType
from ..verify import (
    VerifyError,
    X86Outcome,
    _differs,
    _tail,
    build_units,
    run_binary,
    verification_inputs,
)
from .stages import array_frames

if TYPE_CHECKING:
    from .design import CnnDesign


@dataclass(frozen=True)
class CnnMismatch:
    frame: int
    index: tuple[int, int, int]  # (channel, y, x) of the output
    expected: Any
    got: Any


@dataclass(frozen=True)
class CnnVerifyResult(X86Outcome):
    frames: int
    values: int
    mismatches: int
    first: CnnMismatch | None
    build_seconds: float
    run_seconds: float
    cached: bool

    def verdict(self) -> str:
        build = self.build_note()
        head = f"{self.frames} frames, {self.values} output values: {build}, ran in {self.run_seconds:.2f} s"
        if self.ok:
            return f"verify: PASS, bit-exact: {head}"
        f = self.first
        return (f"verify: FAIL, {self.mismatches} of {self.values} output values differ: {head}\n"
                f"  first at frame {f.frame}, output {f.index}: expected {f.expected}, got {f.got}")


def build(files: dict[str, str], arch: int, cache_dir: Path | None = None, jobs: int | None = None
          ) -> tuple[Path, bool, float]:
    """The harness, the AI Engine kernels (src/kernels/*.cc) and the thesis mapping's PL kernels
    (pl/*.cpp); not the Vitis system's data movers (HLS C on Xilinx's ap_types: ``make system-run``)."""
    from ..vitis import PL_SOURCES

    sources = {rel: text for rel, text in files.items() if rel.startswith(("src/", "x86/", "pl/"))}
    units = ["x86/harness.cpp", *sorted(r for r in sources if r.startswith("src/kernels/") and r.endswith(".cc")),
             *sorted(r for r in sources if r.startswith("pl/") and r.endswith(".cpp") and r not in PL_SOURCES)]
    return build_units(sources, units, arch, "CNN ", cache_dir, jobs, setup=("x86/harness.cpp",))

def _parse(text: str, t: NumericType) -> np.ndarray:
    tokens = text.split()
    if isinstance(t, FloatType):
        return np.array(tokens, dtype=np.float64).astype(np.float32)
    return np.array(tokens, dtype=np.int64)


def _run(binary: Path, work: Path, iterations: int | None) -> float:
    args = [str(binary), "--data", str(work), "--out", str(work / "out")]
    if iterations is not None:
        args += ["--iterations", str(iterations)]
    start = time.perf_counter()
    res = run_binary(args, "CNN ")
    if res.returncode != 0:
        raise VerifyError(f"the CNN x86 harness failed (exit {res.returncode}):\n" + _tail(res.stderr + res.stdout),
                          hint="this is an aieflow bug; please report it with the design directory")
    return time.perf_counter() - start


def inputs(design: CnnDesign, x: Any, samples: int, seed: int) -> np.ndarray:
    if x is not None:
        return design.quantise_input(x)
    shape = tuple(design.graph.tensors[design.graph.inputs[0]].shape)  # the graph input's layout
    xq = verification_inputs(design.input_type, shape, samples, seed)
    if isinstance(design.input_type, FloatType):
        # Keep the frames in the range where the network's values stay finite (the edge rows of
        # verification_inputs reach 1e3 * 30): overflow to inf / NaN is not what is being checked.
        xq = np.clip(xq, -4.0, 4.0).astype(np.float32)
    return xq


def verify(design: CnnDesign, x: Any = None, samples: int = 16, seed: int = 0,
           cache_dir: str | os.PathLike | None = None, jobs: int | None = None) -> CnnVerifyResult:
    xq = inputs(design, x, samples, seed)
    n = xq.shape[0]
    if n == 0:
        raise VerifyError("verify needs at least one frame")
    # (N, C, H, W); a dense head's (N, F) output is (N, F, 1, 1) on the array
    expected = np.asarray(design._emulation._design().run(xq)).reshape(n, *design.plan.stages[-1].out_shape)
    binary, cached, build_s = build(design.files, design.device.generation.arch_macro,
                                            Path(cache_dir) if cache_dir else None, jobs)
    out_t = design.plan.stages[-1].out_type
    xq = array_frames(design.graph, design.plan.stages[0], xq)  # the input PLIO's order (stages.input_views)
    with tempfile.TemporaryDirectory(prefix="aieflow-cnn-verify-") as tmp:
        work = Path(tmp)
        if design.plan.mapping == "thesis":
            from .emit_thesis import read_output, write_input

            write_input(work, xq)
            run_s = _run(binary, work, None)
            got = read_output(work, expected.shape)
        elif design.plan.mapping == "rows":
            from .emit_rows import read_rows_output, write_rows_input

            write_rows_input(design.plan, work, xq)
            run_s = _run(binary, work, n)
            got = read_rows_output(design.plan, work, n)
        else:
            got, run_s = _run_stream(design, binary, work, xq, out_t, expected.shape[1:])
    bad = _differs(expected.reshape(n, -1), got.reshape(n, -1)).reshape(expected.shape)
    first = None
    if bad.any():
        f, c, y, xx = (int(v) for v in np.argwhere(bad)[0])
        cast = float if isinstance(out_t, FloatType) else int
        first = CnnMismatch(f, (c, y, xx), cast(expected[f, c, y, xx]), cast(got[f, c, y, xx]))
    return CnnVerifyResult(n, int(expected.size), int(bad.sum()), first, build_s, run_s, cached)


def _run_stream(design: CnnDesign, binary: Path, work: Path, xq: np.ndarray, out_t: NumericType,
                out_shape: tuple[int, ...]) -> tuple[np.ndarray, float]:
    plan = design.plan
    reps = plan.replicas
    n = xq.shape[0]
    iterations = -(-n // reps)
    pad = np.zeros((iterations * reps - n, *xq.shape[1:]), dtype=xq.dtype)
    frames = np.concatenate([xq, pad])
    in_t = plan.stages[0].in_type
    data = work / "data"
    data.mkdir(parents=True)
    for q in range(reps):
        (data / f"in{q}.txt").write_text(format_values(frames[q::reps].reshape(-1), in_t, 4))
    run_s = _run(binary, work, iterations)
    last = plan.layers[-1]
    c, h, w = out_shape
    per_row = c // last.cas_num
    got = np.zeros((iterations * reps, c, h, w), dtype=np.float32 if isinstance(out_t, FloatType) else np.int64)
    for q in range(reps):
        for r in range(last.cas_num):
            path = work / "out" / "data" / f"out{q}_{r}.txt"
            if not path.is_file():
                path = work / "out" / f"out{q}_{r}.txt"
            vals = _parse(path.read_text(), out_t)
            if vals.size != iterations * per_row * h * w:
                raise VerifyError(f"output PLIO out{q}_{r} holds {vals.size} values; "
                                  f"{iterations * per_row * h * w} were expected")
            got[q::reps, r * per_row:(r + 1) * per_row] = vals.reshape(iterations, per_row, h, w)
    return got[:n], run_s
