"""An MLP with a softmax head (the hls4ml jet tagger's shape): the softmax fused into the Dense
kernel (the chain, ``ops/post.py``) against the DAG mapping's standalone softmax kernel, modelled
on VEK280, and the fused chain on VCK190 (which cannot hold the standalone one).

    python benchmarks/fused_post.py

Both designs are compiled in this run from the same quantised graph (the front end runs once;
the DAG design is built by calling ``dag.api.compile_dag`` on that state, which is what
``aieflow.compile`` did for this model before the fusion).  Prints a markdown table of modelled
latency, interval per batch, compute tiles and memory tiles; these are model figures (no
published measurement exists for either design), not timings of this machine.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

import aieflow
from aieflow.api import _state
from aieflow.dag.api import compile_dag
from aieflow.errors import AieflowError
from aieflow.pipeline import front_end


def model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(),
                         nn.Linear(32, 5), nn.Softmax(dim=-1)).eval()


def row(name: str, device: str, batch: int, build) -> str:
    try:
        d = build()
    except AieflowError as e:
        return f"| {name} | {device} | {batch} | - | - | - | - | {e.message.splitlines()[0][:70]} |"
    e = d.estimate()
    return (f"| {name} | {device} | {batch} | {e.latency_ns:.0f} | {e.interval_ns:.0f} | {e.tiles_used} | "
            f"{e.memory_tiles_used} | |")


def main() -> None:
    x = np.random.default_rng(0).standard_normal((256, 16)).astype(np.float32)
    print("| mapping | device | batch | latency ns | interval ns | tiles | memory tiles | note |")
    print("|---|---|---:|---:|---:|---:|---:|---|")
    for device in ("vek280", "vck190"):
        for batch in (1, 8, 32):
            cfg = {"batch": batch}
            print(row("fused (chain)", device, batch,
                      lambda d=device, c=cfg: aieflow.compile(model(), device=d, example_input=x[:1], calibration=x,
                                                              config=c)))
            if device == "vek280":
                print(row("standalone (DAG)", device, batch,
                          lambda d=device, c=cfg: compile_dag(front_end(_state(model(), d, x[:1], c, x)))))


if __name__ == "__main__":
    main()
