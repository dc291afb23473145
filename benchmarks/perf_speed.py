"""How long ``aieflow.perf.estimate`` takes on designs of about 300 tiles (the issue asks < 1 s).

    python benchmarks/perf_speed.py

Compiles each design once (not timed against the budget), then times ``estimate(design)`` best of
five and prints it with the machine it ran on: "estimate s" reuses the lowering the compile emitted
the project from (``mapped/cache.py``: what a compiled design's estimate, report and save do),
"cold s" lowers copy 0 first (a copy of the planned graph: what a search's candidate costs).  The designs span both ways of reaching ~300 tiles:
a few wide layers (few pipeline stages, many tiles each) and one tile per layer (the most
pipeline stages a design of that size can have, the simulation's worst case).
"""

from __future__ import annotations

import copy
import os
import platform
import sys
import time

import aieflow
import aieflow.design
from aieflow.model_zoo import qdq_mlp
from aieflow.perf import estimate, simulate
from aieflow.perf.simulate import design_pipeline

BUDGET_S = 1.0
REPEATS = 5


def _layers(shape: list[tuple[int, int]]) -> dict:
    return {f"fc{i}": {"parallelism": {"cas_len": cl, "cas_num": cn}} for i, (cl, cn) in enumerate(shape)}


# (name, device, widths, batch, per-layer (cas_len, cas_num)).  weight_frac=8 keeps the QDQ scales of
# qdq_mlp from drifting over hundreds of 128-wide layers (its default loses a bit per layer).
DESIGNS = (
    ("4 x 1024x1024 layers, 9/9/9/10 x 8 tiles", "vek280", [1024] * 5, 32, [(9, 8), (9, 8), (9, 8), (10, 8)]),
    ("5 x 1024x1024 layers, 8 x 8 tiles each", "vck190", [1024] * 6, 8, [(8, 8)] * 5),
    ("38 x 128x128 layers, 2 x 4 tiles each", "vek280", [128] * 39, 8, [(2, 4)] * 38),
    ("304 x 128x128 layers, one tile each", "vek280", [128] * 305, 8, [(1, 1)] * 304),
)


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), cpu)
    except OSError:
        pass
    return f"{cpu}, {os.cpu_count()} CPUs, {platform.system()} {platform.release()}, Python {sys.version.split()[0]}"


def main() -> int:
    print(f"machine: {machine()}")
    print(f"estimate(design), best of {REPEATS}; budget {BUDGET_S:.1f} s per design\n")
    print("| design | device | tiles | stages | batches simulated | compile s | estimate s | cold s |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    worst = 0.0
    for name, device, widths, batch, shape in DESIGNS:
        config = {"batch": batch, "layers": _layers(shape)}
        t0 = time.perf_counter()
        design = aieflow.compile(qdq_mlp(widths, weight_frac=8), device=device, config=config)
        compile_s = time.perf_counter() - t0
        times = []
        for _ in range(REPEATS):
            t0 = time.perf_counter()
            perf = estimate(design)
            times.append(time.perf_counter() - t0)
        best = min(times)
        cold = []
        for _ in range(REPEATS):
            fresh = aieflow.design.Design(copy.copy(design.graph), design.device, design.config, design.placement)
            t0 = time.perf_counter()
            estimate(fresh)
            cold.append(time.perf_counter() - t0)
        worst = max(worst, best)
        stages = len(design_pipeline(design).stages)
        print(f"| {name} | {device} | {perf.tiles_used} | {stages} | {simulate(design).batches} | "
              f"{compile_s:.2f} | {best:.4f} | {min(cold):.4f} |")
    print(f"\nslowest estimate: {worst:.4f} s ({'within' if worst < BUDGET_S else 'OVER'} the {BUDGET_S:.0f} s budget)")
    return 0 if worst < BUDGET_S else 1


if __name__ == "__main__":
    raise SystemExit(main())
