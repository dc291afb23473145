"""Keras CNNs exported by tf2onnx (issue 25): aieflow's modelled frame rate and latency per model
and device, beside onnxruntime on this machine's CPU in the same run.

The models are the committed exports of tests/data/keras/make_keras_cnn_onnx.py (a Conv1D
classifier on 64 x 3, Conv2D + BatchNorm + Selu + MaxPool on 16 x 16 x 1, SeparableConv2D on
16 x 16 x 3; all end in Dense + softmax).  For each model, device and precision (int8 / int16, fp32
on VCK190, bf16 on VEK280 / VEK385): compile (PTQ on the 16 committed test frames), the modelled per-frame latency, frames per second of the whole
array (the search's replicas: as many copies as fit) and of one copy, the bound, tiles, and the
largest difference of ``predict`` from Keras' own outputs.  onnxruntime: the float model on the CPU
(one thread and all threads), batch 1 latency (median of repeats) and batch 256 throughput.

Run: PYTHONPATH=src python benchmarks/keras_cnn.py [--repeats N]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort

import aieflow

DATA = Path(__file__).resolve().parents[1] / "tests" / "data" / "keras"
MODELS = ("keras_conv1d", "keras_conv2d_bn_selu", "keras_separable")
TARGETS = (("vck190", "int8"), ("vck190", "int16"), ("vck190", "fp32"), ("vek280", "int8"), ("vek280", "int16"),
           ("vek280", "bf16"), ("vek385", "int8"), ("vek385", "bf16"))


def onnxruntime_figures(model: str, x: np.ndarray, threads: int, repeats: int) -> tuple[float, float]:
    """(batch-1 latency in us, frames/s at batch 256) on this CPU."""
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    s = ort.InferenceSession(model, opts, providers=["CPUExecutionProvider"])
    name = s.get_inputs()[0].name
    one = x[:1]
    for _ in range(20):
        s.run(None, {name: one})
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        s.run(None, {name: one})
        times.append(time.perf_counter() - t)
    big = np.resize(x, (256, *x.shape[1:]))
    s.run(None, {name: big})
    t = time.perf_counter()
    runs = max(1, repeats // 50)
    for _ in range(runs):
        s.run(None, {name: big})
    fps = 256 * runs / (time.perf_counter() - t)
    return statistics.median(times) * 1e6, fps


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=2000, help="onnxruntime batch-1 runs per model")
    args = ap.parse_args()
    print(f"machine: {platform.machine()} {platform.processor() or ''}, {os.cpu_count()} logical CPUs; "
          f"aieflow {aieflow.__version__}, onnxruntime {ort.__version__}\n")
    print("| model | device | precision | latency (us) | frames/s (array) | replicas | frames/s (one copy) | "
          "bound | tiles | max abs diff from Keras |")
    print("| --- | --- | --- | ---: | ---: | ---: | ---: | --- | ---: | ---: |")
    for name in MODELS:
        d = np.load(DATA / f"{name}.npz")
        x, y = d["x"], d["y"]
        model = str(DATA / f"{name}.onnx")
        for device, precision in TARGETS:
            cfg = {"precision": precision}
            try:
                full = aieflow.compile(model, device=device, example_input=x[:2], calibration=x, config=cfg)
                one = aieflow.compile(model, device=device, example_input=x[:2], calibration=x,
                                      config={**cfg, "cnn": {"replicas": 1}})
            except aieflow.AieflowError as e:
                print(f"| {name} | {device} | {precision} | refused: {e.message} | | | | | | |")
                continue
            p, q = full.to_json()["performance"], one.to_json()["performance"]
            err = float(np.abs(full.predict(x).reshape(y.shape) - y).max())
            print(f"| {name} | {device} | {precision} | {q['latency_ns'] / 1e3:.2f} | "
                  f"{1e9 / p['interval_ns'] * full.plan.replicas:,.0f} | {full.plan.replicas} | "
                  f"{1e9 / q['interval_ns']:,.0f} | {q['bound']} | {q['tiles_used']} | {err:.2e} |")
    print("\nonnxruntime (float model, CPUExecutionProvider, this machine):\n")
    print("| model | threads | batch-1 latency (us, median) | frames/s at batch 256 |")
    print("| --- | ---: | ---: | ---: |")
    for name in MODELS:
        x = np.load(DATA / f"{name}.npz")["x"]
        for threads in (1, os.cpu_count() or 1):
            lat, fps = onnxruntime_figures(str(DATA / f"{name}.onnx"), x, threads, args.repeats)
            print(f"| {name} | {threads} | {lat:.1f} | {fps:,.0f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
