"""How far a streamed fp32 Dense layer's values are from the same layer resident, and from float64.

    python benchmarks/streamed_fp32_numerics.py

A streamed fp32 layer computes in its GEMM design's float order (per kc block, each sum from +0.0
in increasing k; the blocks added into C; the bias last), which ``predict`` emulates and the x86
check confirms bit for bit (tests/test_streamed_fp32.py).  The resident fp32 kernel starts from
the bias and adds every product in increasing k.  This script measures, on emulated values (no
hardware, deterministic seeds), the largest float32 ulp distance and the largest difference
relative to the output's largest magnitude, for: streamed vs resident, streamed vs PyTorch in
float64, resident vs PyTorch in float64.  docs/gemm.md quotes its output.
"""

from __future__ import annotations

import numpy as np
import torch

import aieflow
from aieflow.gemm.streamed_float import compare

CASES = [(1024, 256, 64), (4096, 4096, 16)]  # in_features, out_features, samples


def measure(k: int, n: int, samples: int) -> dict:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(k, n)).eval()
    example = torch.randn(16, k)
    streamed = aieflow.compile(model, device="vck190", example_input=example,
                               config={"precision": "fp32", "layers": {"0": {"weights": "streamed"}}})
    resident = aieflow.emulate(model, "vck190", example, config={"precision": "fp32"})
    x = np.random.default_rng(0).standard_normal((samples, k)).astype(np.float32)
    ys, yr = streamed.predict(x), resident.predict(x)
    with torch.no_grad():
        f64 = model.double()(torch.from_numpy(x.astype(np.float64))).numpy()
    return {"kc": streamed.plan.gemm.blocks.kc, "blocks": streamed.plan.gemm.n_pc,
            "streamed vs resident": compare(ys, yr), "streamed vs float64": compare(ys, f64),
            "resident vs float64": compare(yr, f64)}


def main() -> None:
    print("| layer | samples | kc (blocks) | comparison | values differing | median ulp | max ulp | "
          "max abs. diff / max abs. value |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for k, n, s in CASES:
        r = measure(k, n, s)
        for what in ("streamed vs resident", "streamed vs float64", "resident vs float64"):
            c = r[what]
            print(f"| {k} -> {n} | {s} | {r['kc']} ({r['blocks']}) | {what} | {c['differing']:,} of "
                  f"{c['values']:,} | {c['median_ulp']:g} | {c['max_ulp']:,} | {c['max_rel']:.2e} |")


if __name__ == "__main__":
    main()
