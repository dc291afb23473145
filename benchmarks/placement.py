"""Placement benchmark (issue 7): branch and bound vs the greedy baselines.

For the example designs of ``examples/run_examples.py`` and random 20-layer chains on the VCK190
(50 x 8, AIE1 snake) and VEK280 (38 x 8) grids, prints the cost J (lambda 1.0, mu 0.05, start at
column 0 row 0) of every method, whether branch and bound proved its result optimal within the
default budget, and its wall-clock time (best of 3).

    python benchmarks/placement.py [--random 5]
"""

from __future__ import annotations

import argparse
import platform
import random
import sys
import time

import numpy as np

import aieflow
from aieflow.errors import PlanError
from aieflow.model_zoo import qdq_mlp, torch_mlp
from aieflow.passes.place import Block, Grid, layer_edges, pack

METHODS = ("greedy-right", "greedy-up", "first-fit", "bnb")


def example_designs():
    """(name, design) for every design the examples compile."""
    rng = np.random.default_rng(0)
    qdq = qdq_mlp([64, 100, 37, 10], seed=1)
    for dev in ("vek280", "vck190", "vek385"):
        yield f"QDQ MLP 64-100-37-10 int8 ({dev})", aieflow.compile(qdq, device=dev)
    net = torch_mlp([32, 64, 64, 8], seed=0)
    xt = rng.standard_normal((512, 32)).astype(np.float32)
    for dev, prec in (("vck190", "fp32"), ("vek280", "int16"), ("vek280", "int8"), ("vek280", "bf16")):
        cfg = {"precision": prec, "batch": 8}
        yield f"torch MLP 32-64-64-8 {prec} ({dev})", aieflow.compile(
            net, device=dev, example_input=xt[:8], calibration=xt, config=cfg
        )
    big = qdq_mlp([512] * 8, seed=3)
    for dev in ("vek280", "vck190"):
        yield f"7-layer 512-wide int8 MLP ({dev})", aieflow.compile(big, device=dev, config={"batch": 8})


def design_case(d):
    layers = d.layers()
    index = {n.name: i for i, n in enumerate(layers)}
    blocks = [Block(n.name, n.plan.cas_len, n.plan.cas_num) for n in layers]
    edges = [(index[p], index[q]) for p, q in layer_edges(d.graph)]
    return blocks, edges, Grid(d.device.columns, d.device.rows, snake=d.device.generation.cascade_serpentine)


def random_case(seed: int, grid: Grid):
    """20 layers, 2-4 tiles wide and 1-4 high (AIE1: cas_len of a consumer = its producer's cas_num)."""
    rng = random.Random(seed)
    heights = [rng.randint(1, 4) for _ in range(21)]
    widths = heights[:20] if grid.snake else [rng.randint(2, 4) for _ in range(20)]
    blocks = [Block(f"l{i}", max(1, widths[i]), heights[i + 1]) for i in range(20)]
    return blocks, [(i, i + 1) for i in range(19)], grid


def measure(blocks, edges, grid) -> dict:
    row = {}
    for m in METHODS:
        times, res = [], None
        for _ in range(3 if m == "bnb" else 1):
            t0 = time.perf_counter()
            try:
                res = pack(blocks, edges, grid, m)
            except PlanError:  # a baseline can run out of room where the search does not
                pass
            times.append(time.perf_counter() - t0)
        row[m] = res
        row[f"{m}_s"] = min(times)
    return row


def fmt(res) -> str:
    return "fails" if res is None else f"{res.cost:.2f}"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--random", type=int, default=5, help="random 20-layer chains per grid")
    args = ap.parse_args()
    cases = [(name, *design_case(d)) for name, d in example_designs()]
    grids = {"VCK190": Grid(50, 8, snake=True), "VEK280": Grid(38, 8)}
    for gname, grid in grids.items():
        for seed in range(args.random):
            cases.append((f"random 20-layer chain #{seed} ({gname})", *random_case(seed, grid)))
    print(f"Machine: {platform.machine()}, Python {platform.python_version()}, {platform.processor() or 'cpu'}")
    print("| workload | layers | tiles | right-only J | up-only J | first-fit J | B&B J | B&B optimal | B&B time | B&B nodes |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    worse = 0
    for name, blocks, edges, grid in cases:
        r = measure(blocks, edges, grid)
        b = r["bnb"]
        worse += any(r[m] is not None and b.cost > r[m].cost + 1e-9 for m in METHODS[:3])
        tiles = sum(x.width * x.height for x in blocks)
        print(
            f"| {name} | {len(blocks)} | {tiles} | "
            + " | ".join(fmt(r[m]) for m in METHODS[:3])
            + f" | **{b.cost:.2f}** | {'yes' if b.optimal else 'no (budget)'} | {1e3 * r['bnb_s']:.0f} ms | {b.nodes} |"
        )
    return 1 if worse else 0


if __name__ == "__main__":
    sys.exit(main())
