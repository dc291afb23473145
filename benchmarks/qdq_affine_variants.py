"""The emulator's two float paths for an affine Dense layer, timed per layer on benchmarks/qdq_affine.py's
onnxruntime-quantised MLPs (16 -> 64 -> 32 -> 5, ReLU) at batch 1,024, in one process: ``apply_float``
(float64 product, multipliers folded into the weights) and ``apply_float32`` (sgemm, then the float64
requantisation), interleaved (median of rounds), with the path ``ops/dense._emulate_requant`` picks.
Both paths give the same codes (checked here too; proved in numerics/requant.py).

Run: PYTHONPATH=src python benchmarks/qdq_affine_variants.py [--rounds R] [--repeats N]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

import numpy as np
from onnxruntime import quantization as quant
from threadpoolctl import threadpool_limits

sys.path.insert(0, str(Path(__file__).resolve().parent))
import qdq_affine  # noqa: E402  (the same model, calibration data and timer)

import aieflow  # noqa: E402
from aieflow.numerics import requant  # noqa: E402
from aieflow.ops import dense  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--repeats", type=int, default=40)
    args = ap.parse_args()
    x = (np.random.default_rng(7).normal(size=(1024, 16)) * 1.5).astype(np.float32)
    with tempfile.TemporaryDirectory() as tmp:
        fpath = os.path.join(tmp, "f.onnx")
        qdq_affine.float_mlp(fpath)
        for per_channel in (False, True):
            qpath = os.path.join(tmp, f"q_{per_channel}.onnx")
            quant.quantize_static(fpath, qpath, qdq_affine.Reader(), quant_format=quant.QuantFormat.QDQ,
                                  per_channel=per_channel, weight_type=quant.QuantType.QInt8,
                                  activation_type=quant.QuantType.QUInt8)
            design = aieflow.emulate(qpath, device="vek280")._design()
            values = design.trace(design.quantise_input(x).astype(np.float32), keep=True)
            with threadpool_limits(limits=1, user_api="blas"):
                for node in design.graph.nodes:
                    if node.op != "dense":
                        continue
                    t, out = node.types, node.types.output
                    zp, relu = out.zero_point, node.attrs.get("activation") == "relu"
                    ops = requant.float_operands(node, node.params["weight_q"], node.params["bias_q"],
                                                 node.params["rq_mult"], t.shift)
                    xin = values[node.inputs[0]]
                    x_max = max(-t.input.min_code, t.input.max_code)
                    paths = {
                        "float64": lambda xin=xin, ops=ops, zp=zp, out=out, relu=relu, x_max=x_max, t=t:
                            requant.apply_float(xin, ops, zp, out.min_code, out.max_code, relu=relu,
                                                acc_bits=t.acc_bits, x_max=x_max, narrow=True),
                        "float32": lambda xin=xin, ops=ops, zp=zp, out=out, relu=relu, x_max=x_max, t=t:
                            requant.apply_float32(xin, ops, x_max, zp, out.min_code, out.max_code, relu=relu,
                                                  acc_bits=t.acc_bits),
                    }
                    a, b = (p() for p in paths.values())
                    assert a is not None and b is not None and np.array_equal(a, b), node.name
                    times: dict[str, list[float]] = {k: [] for k in paths}
                    for _ in range(args.rounds):
                        for k, p in paths.items():
                            times[k].append(qdq_affine.timed(p, args.repeats))
                    picked = "float32" if (xin.shape[1] >= dense.SGEMM_MIN_K or ops.s_scalar is not None) else "float64"
                    label = "per-channel" if per_channel else "per-tensor "
                    print(f"{label} {node.name} {xin.shape[1]:>3} -> {a.shape[1]:<3}: "
                          + ", ".join(f"{k} {np.median(v) * 1e6:6.1f} us" for k, v in times.items())
                          + f"; emulator takes {picked}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
