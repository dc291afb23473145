"""Run a GEMM design's own generated C++ on x86 and compare C bit for bit with ``predict``.

The harness (``x86/harness.cpp``) is built from the project's AI Engine kernel and graph, its PL
kernels and its five-loop host code with ``aieflow.verify``'s compiler, flags, shim and build
cache; it reads A and B, runs the loops and writes C.
"""

from __future__ import annotations

import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..verify import VerifyError, X86Outcome, _tail, build_units, run_binary
from .emit import build_sources
from .emulate import C_DTYPES, check_operands, operand_bytes

if TYPE_CHECKING:
    from .design import GemmDesign

UNITS = ("x86/harness.cpp", "src/kernels/gemm_tile.cc", "pl/gemm_mover.cpp", "pl/gemm_collect.cpp")


@dataclass(frozen=True)
class GemmMismatch:
    row: int
    col: int
    expected: Any
    got: Any


@dataclass(frozen=True)
class GemmVerifyResult(X86Outcome):
    values: int
    mismatches: int
    first: GemmMismatch | None
    build_seconds: float
    run_seconds: float
    cached: bool

    def verdict(self) -> str:
        build = self.build_note()
        head = f"{self.values} values of C: {build}, ran in {self.run_seconds:.2f} s"
        if self.ok:
            return f"verify: PASS, bit-exact: {head}"
        f = self.first
        return (f"verify: FAIL, {self.mismatches} of {self.values} values of C differ: {head}\n"
                f"  first at C[{f.row}, {f.col}]: expected {f.expected}, got {f.got}")


def build(files: dict[str, str], arch: int, cache_dir: Path | None = None, jobs: int | None = None,
          units: tuple[str, ...] = UNITS) -> tuple[Path, bool, float]:
    """Compile a harness from ``units`` of the project's build sources."""
    return build_units(build_sources(files), units, arch, "GEMM ", cache_dir, jobs)

def run_harness(binary: Path, work: Path) -> float:
    start = time.perf_counter()
    res = run_binary([str(binary), "--data", str(work), "--out", str(work / "out")], "GEMM ")
    if res.returncode != 0:
        raise VerifyError(f"the GEMM x86 harness failed (exit {res.returncode}):\n" + _tail(res.stderr + res.stdout),
                          hint="this is an aieflow bug; please report it")
    return time.perf_counter() - start


def write_inputs(work: Path, m: int, n: int, k: int, a: np.ndarray, b: np.ndarray, dtype: str = "") -> None:
    work.mkdir(parents=True, exist_ok=True)
    (work / "problem.txt").write_text(f"{m} {n} {k}\n")
    (work / "A.bin").write_bytes(operand_bytes(dtype, a))  # native little-endian, as the x86 harness reads them
    (work / "B.bin").write_bytes(operand_bytes(dtype, b))


def random_operands(design: GemmDesign, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Uniform over the whole type range (integers) or normal with mixed scales (fp32; bf16 rounded)."""
    p = design.plan
    rng = np.random.default_rng(seed)
    if p.dtype.is_float:
        scale = np.float32(rng.choice([1e-3, 1.0, 1e3]))
        a = (rng.standard_normal((p.m, p.k)) * scale).astype(np.float32)
        b = rng.standard_normal((p.k, p.n)).astype(np.float32)
        if p.dtype.name == "bf16":  # bf16 values: rounded to nearest, ties to even
            from ..numerics.fixed import to_bf16
            a, b = to_bf16(a), to_bf16(b)
        return a, b
    t = p.dtype
    return (rng.integers(t.lo, t.hi + 1, size=(p.m, p.k), dtype=np.int64),
            rng.integers(t.lo, t.hi + 1, size=(p.k, p.n), dtype=np.int64))


def differs(want: np.ndarray, got: np.ndarray) -> np.ndarray:
    if want.dtype == np.float32:
        both_nan = np.isnan(want) & np.isnan(got)
        return (want.view(np.uint32) != got.view(np.uint32)) & ~both_nan
    return want != got


def verify(design: GemmDesign, a: Any = None, b: Any = None, seed: int = 0,
           cache_dir: str | os.PathLike | None = None, jobs: int | None = None) -> GemmVerifyResult:
    p = design.plan
    if (a is None) != (b is None):
        raise VerifyError("give both A and B, or neither (random operands are generated)")
    if a is None:
        a, b = random_operands(design, seed)
    a, b = check_operands(p, a, b)
    want = design.predict(a, b)
    binary, cached, build_s = build(design.files, p.device.generation.arch_macro,
                                    Path(cache_dir) if cache_dir else None, jobs)
    with tempfile.TemporaryDirectory(prefix="aieflow-gemm-verify-") as tmp:
        work = Path(tmp)
        write_inputs(work, p.m, p.n, p.k, a, b, p.dtype.name)
        run_s = run_harness(binary, work)
        got = np.fromfile(work / "out" / "C.bin", dtype=C_DTYPES[p.output.name])
    if got.size != want.size:
        raise VerifyError(f"the harness wrote {got.size} values of C; {want.size} were expected")
    got = got.reshape(want.shape)
    bad = differs(want, got)
    first = None
    if bad.any():
        i, j = (int(v) for v in np.argwhere(bad)[0])
        cast = float if p.dtype.is_float else int
        first = GemmMismatch(i, j, cast(want[i, j]), cast(got[i, j]))
    return GemmVerifyResult(int(want.size), int(bad.sum()), first, build_s, run_s, cached)
