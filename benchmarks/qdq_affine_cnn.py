"""onnxruntime quantize_static CNNs (model_zoo.onnx_float_cnn): how often aieflow differs from onnxruntime.

The model: Conv 2->6 3x3 + ReLU, MaxPool 2, Conv 6->8 3x3 + ReLU, GlobalAveragePool ("gap") or
Flatten ("flatten") head, Gemm -> 5; quantised by onnxruntime's ``quantize_static`` (QDQ, int8
weights) per tensor / per channel with uint8 / int8 activations on 8 random calibration batches.
Prints, for each of the eight, how many outputs of aieflow's emulator (vek280) differ from
onnxruntime's default CPU session and by how many LSB, on N frames: Gaussian frames (x 1.5), a
quarter exact ties of the input quantiser, and two each of zeros, +1e4 and -1e4 (saturation).

Run: PYTHONPATH=src python benchmarks/qdq_affine_cnn.py [--frames N]
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile

import numpy as np
import onnx
import onnxruntime as ort
from onnx import numpy_helper
from onnxruntime import quantization as quant

import aieflow
from aieflow.model_zoo import onnx_float_cnn

SHAPE = (2, 8, 8)


class Reader(quant.CalibrationDataReader):
    def __init__(self, seed: int = 1):
        rng = np.random.default_rng(seed)
        self.batches = iter([{"x": rng.normal(size=(16, *SHAPE)).astype(np.float32)} for _ in range(8)])

    def get_next(self):
        return next(self.batches, None)


def frames(x_scale: float, n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    ties = ((rng.integers(-140, 140, size=(n // 4, *SHAPE)) + 0.5) * np.float64(x_scale)).astype(np.float32)
    return np.concatenate([rng.normal(size=(n - n // 4, *SHAPE)).astype(np.float32) * 1.5, ties,
                           np.zeros((2, *SHAPE), np.float32), np.full((2, *SHAPE), 1e4, np.float32),
                           np.full((2, *SHAPE), -1e4, np.float32)])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--frames", type=int, default=20_000, help="random frames (+ 6 edge frames)")
    args = ap.parse_args()
    print(f"machine: {platform.machine()} {platform.processor() or ''} {os.cpu_count()} CPUs, "
          f"onnxruntime {ort.__version__}, numpy {np.__version__}")
    with tempfile.TemporaryDirectory() as tmp:
        for head in ("gap", "flatten"):
            fpath = os.path.join(tmp, f"{head}.onnx")
            onnx.save(onnx_float_cnn(head), fpath)
            for per_channel in (False, True):
                for act in ("uint8", "int8"):
                    qpath = os.path.join(tmp, f"q_{head}_{per_channel}_{act}.onnx")
                    quant.quantize_static(
                        fpath, qpath, Reader(), quant_format=quant.QuantFormat.QDQ, per_channel=per_channel,
                        weight_type=quant.QuantType.QInt8,
                        activation_type=quant.QuantType.QUInt8 if act == "uint8" else quant.QuantType.QInt8)
                    p = {i.name: numpy_helper.to_array(i) for i in onnx.load(qpath).graph.initializer}
                    x = frames(float(p["x_scale"]), args.frames, 11)
                    y = aieflow.emulate(qpath, device="vek280").predict(x)
                    r = ort.InferenceSession(qpath, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
                    lsb = np.abs(np.rint((y.astype(np.float64) - r) / float(p["y_scale"])))
                    label = f"{head:7s} {'per-channel' if per_channel else 'per-tensor '} {act:5s}"
                    print(f"{label}: {x.shape[0]} frames, {lsb.size} outputs, differ from onnxruntime: "
                          f"{int((lsb != 0).sum())} ({(lsb != 0).mean() * 100:.4f}%), max {int(lsb.max())} LSB",
                          flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
