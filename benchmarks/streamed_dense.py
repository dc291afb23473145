"""Dense chains with streamed layers among resident ones (issue 8): which layers the planner
streams and the modelled cost of the segments joined through DDR.

    python benchmarks/streamed_dense.py [--write]   # --write: the chains table in docs/benchmarks.md

Modelled, not measured: every number is aieflow's model (resident segments: ``aieflow.perf``;
streamed ones: the GEMM model plus the epilogue; the cut tensors: one DDR pass each at the GEMM
model's assumed 4 B per AIE cycle).  No published figure exists for these designs.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from pathlib import Path

import torch

import aieflow
from aieflow.design import Design
from aieflow.gemm.segmented import SegmentedDesign

START, END = "<!-- streamed-chain-benchmark:start -->", "<!-- streamed-chain-benchmark:end -->"
DOC = Path(__file__).resolve().parents[1] / "docs" / "benchmarks.md"

# (dims, batch, streamed forced by the config)
CASES = [
    ([1024, 1536, 1536, 512, 16], 8, ()),
    ([4096, 4096, 16], 8, ()),
    ([4096, 4096, 16], 64, ()),
    ([512, 4096, 4096, 10], 8, ()),
    ([1536] * 5, 8, ()),
    ([256, 256, 256, 10], 8, ("2",)),
]


def _mlp(dims: list[int]) -> torch.nn.Module:
    torch.manual_seed(0)
    layers: list[torch.nn.Module] = []
    for i, (a, b) in enumerate(zip(dims[:-1], dims[1:], strict=True)):
        layers.append(torch.nn.Linear(a, b))
        if i < len(dims) - 2:
            layers.append(torch.nn.ReLU())
    return torch.nn.Sequential(*layers).eval()


def rows() -> list[list[str]]:
    out = [["chain (int8)", "batch", "streamed", "segments", "latency us", "interval us", "DDR us",
            "GOPS", "tiles", "bound", "compile s"]]
    for dims, batch, forced in CASES:
        cfg = {"batch": batch, "layers": {n: {"weights": "streamed"} for n in forced}}
        t0 = time.perf_counter()
        d = aieflow.compile(_mlp(dims), device="vck190", example_input=torch.randn(batch, dims[0]), config=cfg)
        secs = time.perf_counter() - t0
        name = "-".join(map(str, dims)) + (" (forced)" if forced else "")
        if isinstance(d, Design):
            e = d.estimate()
            out.append([name, str(batch), "none", "1 resident", f"{e.latency_ns / 1e3:,.2f}",
                        f"{e.interval_ns / 1e3:,.2f}", "-", f"{e.throughput_ops_per_s / 1e9:,.1f}",
                        str(e.tiles_used), e.bound, f"{secs:.1f}"])
            continue
        assert isinstance(d, SegmentedDesign)
        e = d.estimate()
        out.append([name, str(batch), ", ".join(d.reasons), " ".join(s.kind[0].upper() for s in d.specs),
                    f"{e.latency_ns / 1e3:,.2f}", f"{e.interval_ns / 1e3:,.2f}", f"{e.ddr_ns / 1e3:,.2f}",
                    f"{e.throughput_ops_per_s / 1e9:,.1f}", str(e.tiles_used), e.bound, f"{secs:.1f}"])
    return out


def table(r: list[list[str]]) -> str:
    lines = ["| " + " | ".join(r[0]) + " |", "|" + " --- |" * len(r[0])]
    lines += ["| " + " | ".join(row) + " |" for row in r[1:]]
    return "\n".join(lines)


def section(t: str) -> str:
    return f"""{START}
### Streamed Dense layers inside chains (segments, modelled)

Command: `python benchmarks/streamed_dense.py --write`.  **Modelled, not measured**, VCK190, int8
PTQ, layers named by their torch index (`0`, `2`, ...).  The planner chose what streams (`auto`)
unless the row says forced.  Segments: R = resident sub-chain, S = streamed layer, in order.
Latency: the segments one after the other, each with its DDR passes (the cuts' at the **assumed**
4 B per AIE cycle); interval: the sum of the segments' intervals, as the one host runs them (each
segment over the run's batches, then the next: they never overlap).  "compile s": wall time of `aieflow.compile` on the machine that ran the
script (shared 2-core x86_64; indicative only).  No published figure exists for these designs.

{t}

Weights read from DDR every batch bound every chain with a streamed layer at small batches;
the resident segments add little.  The all-1536 chain streams two layers (on AIE1 a middle
1536 x 1536 layer reading its producer's buffers has no plan, so every other layer must be first
in its segment).
{END}"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true", help="update docs/benchmarks.md")
    args = ap.parse_args()
    t = table(rows())
    print(t)
    if args.write:
        doc = DOC.read_text()
        if START in doc:
            doc = re.sub(re.escape(START) + ".*?" + re.escape(END), lambda _: section(t), doc, flags=re.S)
        else:
            marker = "<!-- gemm-benchmark:end -->"
            if marker not in doc:
                sys.exit(f"{DOC}: no '{marker}' to put the section after")
            doc = doc.replace(marker, marker + "\n\n" + section(t), 1)
        DOC.write_text(doc)
        print(f"wrote {DOC}")


if __name__ == "__main__":
    main()
