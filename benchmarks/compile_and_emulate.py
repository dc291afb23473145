"""Issue 2 benchmarks, measured side by side in one run on this machine.

1. Compile time (import -> emitted project, in memory) of the 7-layer 512-wide int8 QDQ MLP for
   VEK280.  Target: < 2 s.
2. Emulator throughput on that MLP at batch 1,024 vs PyTorch float32 running the same network
   (same weights, dequantised) on the same CPU.  Target: within 4x of PyTorch.

    python benchmarks/compile_and_emulate.py [--repeats 5] [--markdown]
"""

from __future__ import annotations

import argparse
import os
import platform
import time

import numpy as np
import onnx

import aieflow
from aieflow.model_zoo import qdq_mlp


def best_of(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def torch_equivalent(design):
    import torch

    layers = []
    for n in design.layers():
        lin = torch.nn.Linear(n.plan.in_features, n.plan.out_features)
        with torch.no_grad():
            lin.weight.copy_(torch.from_numpy(np.asarray(n.params["weight"], dtype=np.float32).T))
            lin.bias.copy_(torch.from_numpy(np.asarray(n.params["bias"], dtype=np.float32)))
        layers.append(lin)
        if n.attrs.get("activation") == "relu":
            layers.append(torch.nn.ReLU())
    return torch.nn.Sequential(*layers).eval()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--markdown", action="store_true")
    args = ap.parse_args()
    import torch

    model = qdq_mlp([512] * 8, seed=3)
    data = model.SerializeToString()
    compile_s = best_of(lambda: aieflow.compile(onnx.load_from_string(data), device="vek280"), args.repeats)
    design = aieflow.compile(model, device="vek280")

    x = (np.random.default_rng(0).standard_normal((1024, 512)) * 3).astype(np.float32)
    design.predict(x)  # warm up
    emu_s = best_of(lambda: design.predict(x), args.repeats)
    net = torch_equivalent(design)
    xt = torch.from_numpy(x)
    with torch.no_grad():
        net(xt)
        torch_s = best_of(lambda: net(xt), args.repeats)
    ratio = emu_s / torch_s
    cpu = platform.processor() or platform.machine()
    rows = [
        ("compile 7x512 int8 MLP for VEK280 (import..emit)", f"{compile_s * 1e3:.0f} ms", "< 2 s", compile_s < 2.0),
        ("emulator, batch 1,024", f"{emu_s * 1e3:.1f} ms ({1024 / emu_s:,.0f} samples/s)", "", None),
        ("PyTorch float32, batch 1,024", f"{torch_s * 1e3:.1f} ms ({1024 / torch_s:,.0f} samples/s)", "", None),
        ("emulator / PyTorch time", f"{ratio:.2f}x", "<= 4x", ratio <= 4.0),
    ]
    print(f"machine: {cpu}, {os.cpu_count()} cores, torch threads {torch.get_num_threads()}, best of {args.repeats}")
    if args.markdown:
        print("| measurement | result | target | met |\n| --- | --- | --- | --- |")
        for name, val, target, ok in rows:
            print(f"| {name} | {val} | {target} | {'' if ok is None else ('yes' if ok else 'NO')} |")
    else:
        for name, val, target, ok in rows:
            flag = "" if ok is None else ("  [met]" if ok else "  [MISSED]")
            print(f"{name:52s} {val:32s} {target}{flag}")


if __name__ == "__main__":
    main()
