"""Run a recurrent design's own generated C++ (AIE kernels, graph objects, PL FSM) on x86 and
compare its outputs bit for bit with ``predict``.

The harness (``x86/harness.cpp``) is built with ``aieflow.verify``'s compiler, flags, shim and build
cache (as ``gemm/verify.py``); the hybrid PL FSM (``pl/rnn_fsm.cpp``) is compiled as C++ against the
shim's ``hls_stream.h`` / ``ap_int.h``.  Inputs: the input type's edge values (its limits, zero)
then random ones, unless given.
"""

from __future__ import annotations

import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..numerics.types import FixedType
from ..verify import VerifyError, X86Outcome, _tail, build_units, run_binary, verification_inputs
from . import front as fr

if TYPE_CHECKING:
    from .design import RecurrentDesign


@dataclass(frozen=True)
class RecurrentVerifyResult(X86Outcome):
    samples: int
    values: int
    mismatches: int
    first: tuple[int, int, Any, Any] | None  # sample, output index, expected, got
    build_seconds: float
    run_seconds: float
    cached: bool

    def verdict(self) -> str:
        build = self.build_note()
        head = f"{self.values} output values of {self.samples} samples: {build}, ran in {self.run_seconds:.2f} s"
        if self.ok:
            return f"verify: PASS, bit-exact: {head}"
        s, i, want, got = self.first
        return f"verify: FAIL, {self.mismatches} differ: {head}\n  first at sample {s}, output {i}: expected {want}, got {got}"


def build(files: dict[str, str], arch: int, hybrid: bool, cache_dir: Path | None = None,
          jobs: int | None = None) -> tuple[Path, bool, float]:
    """The harness, and for the hybrid aggregation the PL FSM (through x86/fsm_csim.cpp) compiled as C++
    against the shim's ap_int / hls_stream."""
    units = ["x86/harness.cpp"] + (["x86/fsm_csim.cpp"] if hybrid else [])  # fsm_csim.cpp includes pl/rnn_fsm.cpp
    sources = {rel: text for rel, text in files.items() if rel.startswith(("src/", "x86/", "pl/"))}
    return build_units(sources, units, arch, "recurrent ", cache_dir, jobs)

def x_file(design: RecurrentDesign, xq: np.ndarray) -> str:
    """What the x PLIO carries: per sample and step, x zero-padded to the W kernels' lanes."""
    from .design import sequence_front
    from .emit import layout

    front = sequence_front(design.graph)
    if front is not None:  # the input steps as they come, the Conv1d front end computes layer 0's x
        d = front.convs[0]
        x = fr.x_steps(xq, front, int(d.attrs["in_size"][1]), int(d.attrs["in_channels"]))
        return "\n".join(str(int(v)) for v in x.ravel()) + "\n"
    n = design.layer  # the first layer reads the design's input
    t, f = n.attrs["seq_len"], n.attrs["input_size"]
    lane = layout(design.mapping, design.device).in_pad  # row kernels read x by lane groups; a compact tile x_k by x_k
    kp = -(-f // lane) * lane
    x = np.zeros((xq.shape[0], t, kp), dtype=xq.dtype)
    x[:, :, :f] = xq.reshape(xq.shape[0], t, f)
    if isinstance(design.layer.types.input, FixedType):
        return "\n".join(str(int(v)) for v in x.ravel()) + "\n"
    return "\n".join(repr(float(v)) for v in x.astype(np.float32).ravel()) + "\n"


def verify(design: RecurrentDesign, x: Any = None, samples: int = 16, seed: int = 0,
           cache_dir: str | os.PathLike | None = None, jobs: int | None = None) -> RecurrentVerifyResult:
    """``jobs``: parallel compiler processes (the harness and, hybrid, the PL FSM; default both)."""
    g = design.graph
    in_t = g.tensors[g.inputs[0]].dtype  # the design's input type (the first convolution's or layer's)
    shape = tuple(g.tensors[g.inputs[0]].shape)
    if x is None:
        xq = verification_inputs(in_t, shape, samples, seed)
    else:
        xq = design.quantise_input(x)
    want = np.asarray(design.run(xq))
    hybrid = any(m.aggregation == "hybrid" for m in design.mappings)  # pl/rnn_fsm.cpp holds every hybrid layer's FSM
    binary, cached, build_s = build(design.files, design.device.generation.arch_macro,
                                    hybrid, Path(cache_dir) if cache_dir else None, jobs)
    with tempfile.TemporaryDirectory(prefix="aieflow-rnn-verify-") as tmp:
        work = Path(tmp)
        (work / "data").mkdir()
        (work / "out").mkdir()
        (work / "data" / "l0_x.txt").write_text(x_file(design, xq))
        start = time.perf_counter()
        res = run_binary([str(binary), "--data", str(work / "data"), "--out", str(work / "out")], "recurrent ")
        run_s = time.perf_counter() - start
        if res.returncode != 0:
            raise VerifyError(f"the recurrent x86 harness failed (exit {res.returncode}):\n" + _tail(res.stderr + res.stdout),
                              hint="this is an aieflow bug; please report it")
        tokens = (work / "out" / "y.txt").read_text().split()
    fp = not isinstance(design.layer.types.input, FixedType)
    got = np.array([float(t) for t in tokens], dtype=np.float32) if fp else np.array([int(t) for t in tokens], dtype=np.int64)
    flat = want.reshape(want.shape[0], -1)
    got = _model_outputs(design, got, flat.shape)
    if fp:
        w32 = flat.astype(np.float32)
        bad = (w32.view(np.uint32) != got.view(np.uint32)) & ~(np.isnan(w32) & np.isnan(got))
    else:
        bad = flat.astype(np.int64) != got
    first = None
    if bad.any():
        s, i = (int(v) for v in np.argwhere(bad)[0])
        first = (s, i, flat[s, i].item(), got[s, i].item())
    return RecurrentVerifyResult(int(xq.shape[0]), int(flat.size), int(bad.sum()), first, build_s, run_s, cached)


def _model_outputs(design: RecurrentDesign, wire: np.ndarray, shape: tuple[int, int]) -> np.ndarray:
    """The model's outputs [samples, values] from what the output stream carried (y.txt): the
    last hybrid layer's FSM writes two values a 64-bit beat, so a zero follows each odd-sized
    output (rnn_fsm.h); the AIE aggregator and the compact tile write the values alone."""
    from .design import split_layers

    last = split_layers(design.graph)[0][-1]
    emissions = last.attrs["seq_len"] if last.attrs["return_sequences"] else 1
    samples, per_sample = shape
    ny = per_sample // emissions
    mappings = design.stack.layers if design.stack else (design.mapping,)
    period = ny + (ny % 2 if mappings[-1].aggregation == "hybrid" else 0)
    if wire.size != samples * emissions * period:
        raise VerifyError(f"the harness wrote {wire.size} output values; {samples * emissions * period} were expected")
    return wire.reshape(samples, emissions, period)[:, :, :ny].reshape(shape)
