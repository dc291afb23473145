"""Run a DAG design's own generated C++ on x86 against the open shim and compare its output, bit
for bit, with the emulator (``predict``).

The project's ``src/graph.h`` and kernels are built unchanged with :mod:`aieflow.verify`'s
compiler, flags, shim and build cache; the input PLIO file carries the test samples row-major and
the output PLIO file is read back the same way.
"""

from __future__ import annotations

import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..numerics.types import FixedType, FloatType
from ..ops.activation import MASK_TYPE
from ..verify import (
    VerifyError,
    X86Outcome,
    _differs,
    _tail,
    build_harness,
    run_binary,
    verification_inputs,
)
from .emit import PLIO_IN, PLIO_MASK, PLIO_OUT, plio_text, unwire_output, wire_output
from .plan import host_layout, mask_layout

if TYPE_CHECKING:
    from .design import DagDesign


@dataclass(frozen=True)
class DagMismatch:
    sample: int
    index: tuple[int, ...]  # element of the output sample
    expected: Any
    got: Any


@dataclass(frozen=True)
class DagVerifyResult(X86Outcome):
    samples: int
    values: int
    mismatches: int
    first: DagMismatch | None
    build_seconds: float
    run_seconds: float
    cached: bool

    def verdict(self) -> str:
        build = self.build_note()
        head = f"{self.samples} samples, {self.values} output values: {build}, ran in {self.run_seconds:.2f} s"
        if self.ok:
            return f"verify: PASS, bit-exact: {head}"
        f = self.first
        return (f"verify: FAIL, {self.mismatches} of {self.values} output values differ: {head}\n"
                f"  first at sample {f.sample}, output {f.index}: expected {f.expected}, got {f.got}")


def verify(design: DagDesign, x: Any | None = None, samples: int = 64, seed: int = 0,
           cache_dir: str | Path | None = None, jobs: int | None = None, mask: Any = None) -> DagVerifyResult:
    from .api import example_mask

    if x is not None:
        xq = design.quantise_input(x)
    else:
        xq = verification_inputs(design.input_type, tuple(design.input_shape), samples, seed)
    n = xq.shape[0]
    if n == 0:
        raise VerifyError("verify needs at least one sample")
    if mask is not None or x is not None:
        mq = design.quantise_mask(mask, n)
    else:
        mq = example_mask(design, n, seed)
    batch = design.plan.batch
    iterations = -(-n // batch)
    xq = np.concatenate([xq, np.zeros((iterations * batch - n, *xq.shape[1:]), dtype=xq.dtype)])
    if mq is not None:  # padding samples keep every key
        mq = np.concatenate([mq, np.ones((iterations * batch - n, *mq.shape[1:]), dtype=mq.dtype)])
    expected = design.run(xq, mask=mq)
    binary, cached, build_s = build_harness(design.files, design.device.generation.arch_macro,
                                            Path(cache_dir) if cache_dir else None, jobs)
    tout = design.output_type
    with tempfile.TemporaryDirectory(prefix="aieflow-dag-verify-") as tmp:
        work = Path(tmp)
        (work / "data").mkdir()
        (work / "data" / f"{PLIO_IN}.txt").write_text(plio_text(host_layout(design.graph, xq), design.input_type))
        if mq is not None:
            (work / "data" / f"{PLIO_MASK}.txt").write_text(plio_text(mask_layout(design.graph, mq), MASK_TYPE))
        args = [str(binary), "--data", str(work), "--out", str(work / "out"), "--iterations", str(iterations)]
        start = time.perf_counter()
        res = run_binary(args, "DAG ")
        run_s = time.perf_counter() - start
        if res.returncode != 0:
            raise VerifyError(f"the x86 harness failed (exit {res.returncode}):\n" + _tail(res.stderr + res.stdout),
                              hint="this is an aieflow bug; please report it with the design directory")
        tokens = (work / "out" / "data" / f"{PLIO_OUT}.txt").read_text().split()
    got = (np.array(tokens, dtype=np.float64).astype(np.float32) if isinstance(tout, FloatType)
           else np.array(tokens, dtype=np.int64))
    wire = wire_output(design.plan, expected).size  # rows padded to whole 32-bit words (plan.output_pitch)
    if got.size != wire:
        raise VerifyError(f"the output PLIO holds {got.size} values; {wire} were expected")
    got = unwire_output(design.plan, got, expected.shape)
    bad = _differs(expected[:n], got[:n])
    first = None
    if bad.any():
        idx = tuple(int(v) for v in np.argwhere(bad)[0])
        cast = int if isinstance(tout, FixedType) else float
        first = DagMismatch(idx[0], idx[1:], cast(expected[idx]), cast(got[idx]))
    return DagVerifyResult(n, int(expected[:n].size), int(bad.sum()), first, build_s, run_s, cached)
