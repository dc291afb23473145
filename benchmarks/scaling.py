"""Full-array scaling of one linear layer (+ bias + ReLU) on VEK280, modelled.

    python benchmarks/scaling.py [--plot docs/img/scaling.svg] [--quick]

The workload of `dense-on-aie-ml.md` ("single linear layer + bias + ReLU scaled from 1 tile to the
full array, input size growing with tiles"): every tile keeps the same slice of the weights, so a
``cas_len x cas_num`` layer is ``(k * cas_len) x (n * cas_num)``.  For each type pair the per-tile
slice is the one with the best single-tile efficiency among a few that fit a 64 KB tile.  Each
design is compiled with that parallelism fixed and estimated by the performance model (nothing is
measured on hardware).  Prints a markdown table; ``--plot`` writes the TOPS and efficiency curves.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import aieflow

# precision -> (k per tile, n per tile, batch): the best single-tile efficiency of those tried
# (int8 / a16w8: 256 x 128 at batch 16; int16: 128 x 64 at batch 32, as 128 x 128 does not fit).
PER_TILE = {"int8": (256, 128, 16), "a16w8": (256, 128, 16), "int16": (128, 64, 32)}
PAIRS = {"int8": "i8 x i8", "a16w8": "i16 x i8", "int16": "i16 x i16"}
SHAPES = [(1, 1), (2, 1), (2, 2), (4, 2), (4, 4), (8, 4), (8, 8), (16, 8), (24, 8), (32, 8), (38, 8)]
QUICK = [(1, 1), (4, 4), (38, 8)]


def _layer(k: int, n: int):
    import torch

    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(k, n), torch.nn.ReLU()).eval()


def point(precision: str, cas_len: int, cas_num: int) -> dict:
    k, n, batch = PER_TILE[precision]
    k_total, n_total = k * cas_len, n * cas_num
    x = np.random.default_rng(0).normal(size=(64, k_total)).astype(np.float32)
    config = {"precision": precision, "batch": batch, "layers": {"0": {"parallelism": {"cas_len": cas_len, "cas_num": cas_num}}}}
    d = aieflow.compile(_layer(k_total, n_total), device="vek280", example_input=x, config=config)
    perf = d.estimate()
    node = d.layers()[0]
    peak = perf.tiles_used * d.device.generation.macs_per_cycle[node.types.pair] * 2 * d.device.clock_hz
    return {
        "precision": precision,
        "shape": f"{cas_len} x {cas_num}",
        "layer": f"{k_total} x {n_total}",
        "tiles": perf.tiles_used,
        "tops": perf.throughput_ops_per_s / 1e12,
        "efficiency": perf.throughput_ops_per_s / peak,
        "bound": perf.bound,
    }


def plot(rows: list[dict], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    matplotlib.rcParams.update({"svg.fonttype": "none", "svg.hashsalt": "aieflow"})  # small, reproducible SVG
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 4))
    for prec in PER_TILE:
        pts = [r for r in rows if r["precision"] == prec]
        a.plot([r["tiles"] for r in pts], [r["tops"] for r in pts], marker="o", label=PAIRS[prec])
        b.plot([r["tiles"] for r in pts], [r["relative"] for r in pts], marker="o", label=PAIRS[prec])
    a.set(xlabel="tiles", ylabel="TOPS (modelled)", title="One linear layer on VEK280")
    b.set(xlabel="tiles", ylabel="per-tile throughput / one tile's", title="Scaling efficiency", ylim=(0, 1.05))
    for ax in (a, b):
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, metadata={"Date": None})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--plot", help="write the curves to this SVG/PNG file")
    ap.add_argument("--quick", action="store_true", help="three points per type pair")
    args = ap.parse_args()
    rows = []
    t0 = time.perf_counter()
    for prec in PER_TILE:
        one = None
        for cl, cn in QUICK if args.quick else SHAPES:
            r = point(prec, cl, cn)
            one = one or r["tops"]
            r["relative"] = r["tops"] / r["tiles"] / one
            rows.append(r)
    print("| type pair | cascade (len x num) | layer | tiles | TOPS | of peak | vs 1 tile | bound |")
    print("| --- | --- | --- | ---: | ---: | ---: | ---: | --- |")
    for r in rows:
        print(f"| {PAIRS[r['precision']]} | {r['shape']} | {r['layer']} | {r['tiles']} | {r['tops']:.2f} | "
              f"{r['efficiency']:.1%} | {r['relative']:.1%} | {r['bound']} |")
    print(f"\n(modelled by aieflow.perf on VEK280 at 1.25 GHz; {time.perf_counter() - t0:.0f} s to compile and estimate)")
    if args.plot:
        plot(rows, args.plot)
        print(f"wrote {args.plot}")


if __name__ == "__main__":
    main()
