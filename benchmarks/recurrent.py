"""The issue-5 benchmarks: the three recurrent models of ``shared/spec/rnn-semantics.md`` as GRU and
LSTM, compiled by aieflow for VCK190 (fp32, the published design's arithmetic) and VEK280 (int16
with hls4ml's default types), next to hls4ml 1.x on the same models.

    python benchmarks/recurrent.py [--quick] [--markdown]

Per model and cell, measured in one run on this machine:

- modelled latency per inference of the compiled designs (``design.estimate()``: the recurrent
  layer's ``seq_len`` steps, fill included, then the dense head in the aggregation epilogue, the
  PL FSM's here), with the published hls4ml FPGA latencies (``rnn-semantics.md``, min-max us,
  the lowest-reuse configuration listed there) and PyTorch float32 on this CPU at batch 1;
- emulator throughput (``design.predict`` on a test set) against hls4ml's ``predict`` (its C
  simulation through ctypes) on the same model and the same samples, and whether the two agree bit
  for bit (the int16 design uses hls4ml's types, so they must);
- compile time: ``aieflow.compile`` (import .. project emission, in memory; median of 3) against hls4ml's
  ``convert_from_pytorch_model`` + ``write`` + ``compile`` (the g++ build of its C simulation);
- a stacked model (two GRU layers of the flavour-tagging size, torch ``num_layers=2``), aieflow
  only (modelled latency, emulator, compile time) next to PyTorch: hls4ml 1.x's PyTorch converter
  takes one recurrent layer per module.

The int16 designs state which row kernels they run (``design.mapping.dims.kernels``): with
hls4ml's default types every product is truncated per lane (``vector_round``, recurrent/vector.py).

Weights are random (seeded): the models' trained weights are not public here, and neither the
latency model nor the timings depend on their values.  The final sigmoid / softmax of the
published models is left out on both sides (a monotonic map of the outputs; aieflow's head is
Dense + ReLU).  Needs torch, hls4ml and g++.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import tempfile
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

import aieflow

# (name, seq len, inputs, hidden, dense widths after the RNN (ReLU), outputs): rnn-semantics.md
MODELS = [
    ("top tagging", 20, 6, 20, (64,), 1),
    ("flavour tagging", 15, 6, 120, (50, 10), 3),
    ("QuickDraw", 100, 3, 128, (256, 128), 5),
]
# hls4ml FPGA latency (us, min-max) of the lowest reuse listed in rnn-semantics.md, per cell
HLS4ML_FPGA_US = {
    ("top tagging", "GRU"): "1.7 (latency strategy, xcku115, 200 MHz)",
    ("top tagging", "LSTM"): "1.7 (latency strategy, xcku115, 200 MHz)",
    ("flavour tagging", "GRU"): "6.7-24.8 (R=(48,40), 200 MHz)",
    ("flavour tagging", "LSTM"): "6.9-25.0 (R=(48,40), 200 MHz)",
    ("QuickDraw", "GRU"): "35.4-164.0 (R=(48,32), Alveo U250, 200 MHz)",
    ("QuickDraw", "LSTM"): "35.9-164.0 (R=(48,32), Alveo U250, 200 MHz)",
}
DEFAULT = "fixed<16,6>"  # hls4ml's default precision ap_fixed<16,6> (TRN, WRAP)
HEAD_OUT = "fixed<16,6,RND_CONV,SAT>"  # head results: one SRS on the AIE, one cast in hls4ml
PREDICT_REPEATS = 3  # both predicts timed as the median of 3 runs: this shared machine's speed varies
RNN_KEYS = ("input", "weight", "bias", "recurrent_weight", "recurrent_bias", "accum", "output")


# (name, seq len, inputs, hidden, recurrent layers, dense widths, outputs): aieflow only
STACKED = [("flavour tagging, 2 x GRU", 15, 6, 120, 2, (50, 10), 3)]


class Net(torch.nn.Module):
    """RNN (batch first, last step), then Dense + ReLU layers and the output Dense; attribute names
    are the layer names hls4ml's and aieflow's configs use."""

    def __init__(self, cell: str, inputs: int, hidden: int, dense: tuple[int, ...], outputs: int, layers: int = 1):
        super().__init__()
        self.rnn = getattr(torch.nn, cell)(inputs, hidden, num_layers=layers, batch_first=True)
        self.names = []
        prev = hidden
        for i, width in enumerate((*dense, outputs), start=1):
            setattr(self, f"fc{i}", torch.nn.Linear(prev, width))
            self.names.append(f"fc{i}")
            if i <= len(dense):
                setattr(self, f"relu{i}", torch.nn.ReLU())
                self.names.append(f"relu{i}")
            prev = width

    def forward(self, x):
        y = self.rnn(x)[0][:, -1]
        for name in self.names:
            y = getattr(self, name)(y)
        return y


def aieflow_int16_config(net: Net) -> dict:
    layers = {"rnn": dict.fromkeys(RNN_KEYS, DEFAULT)}
    for name in net.names:
        if name.startswith("fc"):
            layers[name] = {"weight": DEFAULT, "bias": DEFAULT, "output": HEAD_OUT}
    return {"precision": "int16", "layers": layers}


def _ap(t: str) -> str:
    return {"fixed<16,6>": "ap_fixed<16,6>", HEAD_OUT: "ap_fixed<16,6,AP_RND_CONV,AP_SAT>"}[t]


def hls4ml_model(net: Net, steps: int, inputs: int, out_dir: str):
    """hls4ml's model of ``net`` with the types of ``aieflow_int16_config`` (as
    tests/test_recurrent_hls4ml.py drives it): convert, write, compile (g++)."""
    import hls4ml

    cfg = hls4ml.utils.config_from_pytorch_model(
        net, (steps, inputs), granularity="name", backend="Vivado", default_precision=_ap(DEFAULT),
        channels_last_conversion="off",
    )
    layers = cfg["LayerName"]
    for name in net.names:
        if name.startswith("fc"):
            layers[name]["Precision"].update(weight=_ap(DEFAULT), bias=_ap(DEFAULT), accum="ap_fixed<48,24>",
                                             result=_ap(HEAD_OUT))
        else:
            layers[name]["Precision"]["result"] = _ap(HEAD_OUT)
    model = hls4ml.converters.convert_from_pytorch_model(net, hls_config=cfg, output_dir=out_dir, backend="Vivado",
                                                         io_type="io_parallel")
    for layer in model.get_layers():  # nnet::dense reads (in, out); see tests/test_recurrent_hls4ml.py
        if layer.class_name == "Dense":
            w = layer.get_weights("weight")
            w.data = np.ascontiguousarray(w.data.T)
            w.shape = list(w.data.shape)
    model.write()
    model._compile()
    return model


def torch_batch1_us(net: Net, x: np.ndarray, repeats: int) -> float:
    """Median time of one sample through PyTorch (float32, no_grad, one thread: at batch 1 a second
    thread does not help, and on a loaded machine its spin-waits made single runs 50x slower),
    microseconds."""
    times = []
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    with torch.no_grad():
        xs = [torch.from_numpy(x[i : i + 1]) for i in range(min(len(x), repeats))]
        for s in xs[:5]:
            net(s)
        for s in xs:
            t0 = time.perf_counter()
            net(s)
            times.append(time.perf_counter() - t0)
    torch.set_num_threads(threads)
    return statistics.median(times) * 1e6


@dataclass
class Row:
    model: str
    cell: str
    params: int
    vck190_us: float
    vck190_tiles: int
    vek280_us: float
    vek280_tiles: int
    torch_us: float
    fpga: str
    samples: int
    emu_fp32_per_s: float
    emu_int16_per_s: float
    hls4ml_per_s: float
    bit_exact: bool
    compile_fp32_s: float
    compile_int16_s: float
    hls4ml_compile_s: float
    kernels: str = ""  # the int16 design's row kernels (U h / W x)


def timed(fn, repeats: int = 1):
    """The result and the median wall time of ``repeats`` calls."""
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return out, statistics.median(times)


def run(name: str, steps: int, inputs: int, hidden: int, dense: tuple[int, ...], outputs: int, cell: str,
        samples: int, hls_samples: int) -> Row:
    torch.manual_seed(sum(map(ord, name + cell)))
    net = Net(cell, inputs, hidden, dense, outputs).eval()
    rng = np.random.default_rng(1)
    x = rng.standard_normal((samples, steps, inputs)).astype(np.float32)
    rnn_params = sum(p.numel() for p in net.rnn.parameters())
    # hls4ml's GRU counts 3(n(n_in + n) + 2n) parameters like PyTorch's; the LSTM 4(n(n_in + n) + n),
    # one bias fewer (PyTorch keeps b_ih and b_hh, which add up)
    params = rnn_params - (4 * hidden if cell == "LSTM" else 0)

    a = aieflow_side(net, x)
    fp32, int16 = a.fp32, a.int16

    with tempfile.TemporaryDirectory(prefix="aieflow-bench-hls4ml-") as tmp:
        hls, t_hls = timed(lambda: hls4ml_model(net, steps, inputs, tmp))
        xh = x[:hls_samples].astype(np.float64)
        hls.predict(xh[:2])
        yh, t_hls_pred = timed(lambda: np.asarray(hls.predict(xh), dtype=np.float64), PREDICT_REPEATS)
    bit_exact = bool(np.array_equal(yh.reshape(len(xh), -1), a.y16[: len(xh)].reshape(len(xh), -1).astype(np.float64)))
    e32, e16 = fp32.estimate(), int16.estimate()
    return Row(
        name, cell, params, e32.sequence_latency_ns / 1e3, e32.tiles, e16.sequence_latency_ns / 1e3, e16.tiles,
        a.torch_us, HLS4ML_FPGA_US[(name, cell)], samples, samples / a.emu_fp32_s, samples / a.emu_int16_s,
        len(xh) / t_hls_pred, bit_exact, a.compile_fp32_s, a.compile_int16_s, t_hls, _kernels(int16),
    )


@dataclass
class AieflowSide:
    fp32: Any  # the VCK190 fp32 design
    int16: Any  # the VEK280 int16 design (hls4ml's default types)
    compile_fp32_s: float
    compile_int16_s: float
    torch_us: float
    emu_fp32_s: float  # predict of the whole test set
    emu_int16_s: float
    y16: np.ndarray  # the int16 design's outputs


def aieflow_side(net: Net, x: np.ndarray) -> AieflowSide:
    """Both designs compiled (median of 3), PyTorch at batch 1, and both predicts timed (after a
    warm-up call)."""
    fp32, t_fp32 = timed(lambda: aieflow.compile(net, device="vck190", example_input=x[:4], calibration=x,
                                                 config={"precision": "fp32"}), 3)
    int16, t_int16 = timed(lambda: aieflow.compile(net, device="vek280", example_input=x[:4], calibration=x,
                                                   config=aieflow_int16_config(net)), 3)
    torch_us = torch_batch1_us(net, x, 300)
    fp32.predict(x[:8])
    _, t_emu32 = timed(lambda: fp32.predict(x), PREDICT_REPEATS)
    int16.predict(x[:8])
    y16, t_emu16 = timed(lambda: int16.predict(x), PREDICT_REPEATS)
    return AieflowSide(fp32, int16, t_fp32, t_int16, torch_us, t_emu32, t_emu16, y16)


def _kernels(design) -> str:
    return ", ".join(sorted({k for m in design.mappings for k in m.dims.kernels}))


@dataclass
class StackRow:
    model: str
    params: int
    vck190_us: float
    vck190_tiles: int
    vek280_us: float
    vek280_tiles: int
    torch_us: float
    samples: int
    emu_fp32_per_s: float
    emu_int16_per_s: float
    compile_fp32_s: float
    compile_int16_s: float
    kernels: str


def run_stacked(name: str, steps: int, inputs: int, hidden: int, layers: int, dense: tuple[int, ...], outputs: int,
                samples: int) -> StackRow:
    """A torch ``num_layers`` GRU: every layer gets the config of ``rnn`` (its layers answer to the
    module's path), layer l + 1 reads layer l's h in ap_fixed<16,6>, as its input type says."""
    torch.manual_seed(sum(map(ord, name)))
    net = Net("GRU", inputs, hidden, dense, outputs, layers).eval()
    x = np.random.default_rng(1).standard_normal((samples, steps, inputs)).astype(np.float32)
    params = sum(p.numel() for p in net.rnn.parameters())
    a = aieflow_side(net, x)
    e32, e16 = a.fp32.estimate(), a.int16.estimate()
    return StackRow(name, params, e32.sequence_latency_ns / 1e3, e32.tiles, e16.sequence_latency_ns / 1e3, e16.tiles,
                    a.torch_us, samples, samples / a.emu_fp32_s, samples / a.emu_int16_s, a.compile_fp32_s,
                    a.compile_int16_s, _kernels(a.int16))


def _gxx() -> str:
    try:
        return subprocess.run(["g++", "--version"], capture_output=True, text=True).stdout.splitlines()[0]
    except (OSError, IndexError):
        return "g++ not found"


def report(rows: list[Row], seconds: float, stacked: list[StackRow] = ()) -> str:
    import hls4ml

    lines = [
        f"Measured: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
        f"torch {torch.__version__} (batch 1 on 1 thread), hls4ml {hls4ml.__version__}, {_gxx()}; "
        f"whole script {seconds:.0f} s.",
        "",
        "Latency per inference (one sample): aieflow modelled (recurrent layer, all steps, then the dense head), hls4ml on "
        "FPGA (published), PyTorch on this CPU (measured, batch 1):",
        "",
        "| model | cell | RNN params | VCK190 fp32 us (tiles) | VEK280 int16 us (tiles) | int16 row kernels "
        "| hls4ml FPGA us (published) | PyTorch CPU batch 1 us |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        lines.append(f"| {r.model} | {r.cell} | {r.params:,} | {r.vck190_us:.2f} ({r.vck190_tiles}) | "
                     f"{r.vek280_us:.2f} ({r.vek280_tiles}) | {r.kernels} | {r.fpga} | {r.torch_us:.0f} |")
    lines += [
        "",
        "Emulator throughput vs hls4ml `predict` (same model, same samples; target >= 10x) and compile time vs "
        "hls4ml `convert + write + compile` (target >= 10x faster):",
        "",
        "| model | cell | emulator int16 samples/s | emulator fp32 samples/s | hls4ml predict samples/s | "
        "int16 / hls4ml | bit-exact with hls4ml | aieflow compile s (int16 / fp32) | hls4ml convert + compile s | "
        "hls4ml / aieflow |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        ratio = r.emu_int16_per_s / r.hls4ml_per_s
        speed = r.hls4ml_compile_s / r.compile_int16_s
        lines.append(
            f"| {r.model} | {r.cell} | {r.emu_int16_per_s:,.0f} | {r.emu_fp32_per_s:,.0f} | {r.hls4ml_per_s:,.1f} | "
            f"{ratio:.1f}x {'(met)' if ratio >= 10 else '(missed)'} | {'yes' if r.bit_exact else 'NO'} | "
            f"{r.compile_int16_s:.2f} / {r.compile_fp32_s:.2f} | {r.hls4ml_compile_s:.1f} | "
            f"{speed:.0f}x {'(met)' if speed >= 10 else '(missed)'} |"
        )
    if stacked:
        lines += [
            "",
            "Stacked recurrent layers (aieflow only; modelled latency, emulator and compile time measured in this run):",
            "",
            "| model | RNN params | VCK190 fp32 us (tiles) | VEK280 int16 us (tiles) | int16 row kernels | "
            "PyTorch CPU batch 1 us | emulator int16 samples/s | emulator fp32 samples/s | aieflow compile s (int16 / fp32) |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
        ]
        for r in stacked:
            lines.append(f"| {r.model} | {r.params:,} | {r.vck190_us:.2f} ({r.vck190_tiles}) | {r.vek280_us:.2f} "
                         f"({r.vek280_tiles}) | {r.kernels} | {r.torch_us:.0f} | {r.emu_int16_per_s:,.0f} | "
                         f"{r.emu_fp32_per_s:,.0f} | {r.compile_int16_s:.2f} / {r.compile_fp32_s:.2f} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="top tagging only, fewer samples")
    ap.add_argument("--markdown", action="store_true", help="(the output is always markdown)")
    args = ap.parse_args()
    t0 = time.perf_counter()
    rows = []
    models = MODELS[:1] if args.quick else MODELS
    for name, steps, inputs, hidden, dense, outputs in models:
        # hls4ml's C simulation costs ~50 ns per product: fewer samples for the larger models
        # the emulator's test set (hls4ml's cost per sample does not depend on the set's size)
        samples = {"top tagging": 10000, "flavour tagging": 2000, "QuickDraw": 200}[name] // (4 if args.quick else 1)
        hls_samples = {"top tagging": 500, "flavour tagging": 100, "QuickDraw": 20}[name]
        for cell in ("GRU", "LSTM"):
            rows.append(run(name, steps, inputs, hidden, dense, outputs, cell, samples, hls_samples))
            print(f"  done: {name} {cell}", flush=True)
    stacked = []
    for name, steps, inputs, hidden, layers, dense, outputs in STACKED:
        stacked.append(run_stacked(name, steps, inputs, hidden, layers, dense, outputs, 500 if args.quick else 2000))
        print(f"  done: {name}", flush=True)
    print(report(rows, time.perf_counter() - t0, stacked))


if __name__ == "__main__":
    main()
