"""onnxruntime quantize_static MLPs (16 -> 64 -> 32 -> 5, ReLU): aieflow against onnxruntime.

Prints, for per-tensor / per-channel weights and uint8 / int8 activations:
* how often aieflow's output differs from onnxruntime's (default session, graph optimisations on:
  QGemm with float32 requantisation) and by how many LSB, over N random inputs;
* emulator throughput (``predict`` at batch 1,024, samples/s) against onnxruntime's own CPU
  inference of the same QDQ model, measured in the same run (median of repeats), and the ratio.

Run: PYTHONPATH=src python benchmarks/qdq_affine.py [--samples N] [--repeats R]
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time

import numpy as np
import onnx
import onnxruntime as ort
from onnxruntime import quantization as quant
from threadpoolctl import threadpool_limits

import aieflow
from aieflow.model_zoo import onnx_float_mlp


def float_mlp(path: str, dims=(16, 64, 32, 5), seed: int = 0) -> None:
    onnx.save(onnx_float_mlp(dims, seed), path)


class Reader(quant.CalibrationDataReader):
    def __init__(self):
        rng = np.random.default_rng(1)
        self.it = iter([{"x": rng.normal(size=(16, 16)).astype(np.float32)} for _ in range(8)])

    def get_next(self):
        return next(self.it, None)


def timed(fn, repeats: int) -> float:
    fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=int, default=200_000)
    ap.add_argument("--repeats", type=int, default=50)
    args = ap.parse_args()
    print(f"machine: {platform.machine()} {platform.processor() or ''} {os.cpu_count()} CPUs, "
          f"onnxruntime {ort.__version__}, numpy {np.__version__}")
    rng = np.random.default_rng(7)
    x = (rng.normal(size=(args.samples, 16)) * 1.5).astype(np.float32)
    x1024 = x[:1024]
    with tempfile.TemporaryDirectory() as tmp:
        fpath = os.path.join(tmp, "f.onnx")
        float_mlp(fpath)
        for per_channel in (False, True):
            for act in ("uint8", "int8"):
                qpath = os.path.join(tmp, f"q_{per_channel}_{act}.onnx")
                quant.quantize_static(fpath, qpath, Reader(), quant_format=quant.QuantFormat.QDQ,
                                      per_channel=per_channel, weight_type=quant.QuantType.QInt8,
                                      activation_type=quant.QuantType.QUInt8 if act == "uint8" else quant.QuantType.QInt8)
                em = aieflow.emulate(qpath, device="vek280")
                so = ort.SessionOptions()
                so.intra_op_num_threads = 1
                sess = ort.InferenceSession(qpath, so, providers=["CPUExecutionProvider"])
                y = em.predict(x)
                r = sess.run(None, {"x": x})[0]
                scale = em.output_type.scale[0]
                lsb = np.abs(np.rint((y.astype(np.float64) - r) / scale))
                # one BLAS thread, as onnxruntime's one intra-op thread (and as compile runs the
                # emulator), set once around the timing as the session's threads are set once: setting
                # it per call (threadpoolctl scans the loaded libraries) cost as much as the emulation
                with threadpool_limits(limits=1, user_api="blas"):
                    t_em = timed(lambda em=em: em.predict(x1024), args.repeats)
                t_ort = timed(lambda sess=sess: sess.run(None, {"x": x1024}), args.repeats)
                label = f"{'per-channel' if per_channel else 'per-tensor '} {act:5s}"
                print(f"{label}: {y.size} outputs, differ from onnxruntime: {(lsb != 0).mean() * 100:.4f}% "
                      f"(max {int(lsb.max())} LSB); batch 1024: aieflow emulator {1024 / t_em:,.0f} samples/s, "
                      f"onnxruntime (1 thread) {1024 / t_ort:,.0f} samples/s, ratio {t_ort / t_em:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
