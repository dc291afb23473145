"""Modelled effect of vector fixed-point cascade chains (``templates/recurrent/rnn_cascade.h``):
column-wise U h / W x chains with the exact vector kernels vs the scalar ones they replaced.

    python benchmarks/recurrent_chain_kernels.py

Workloads: the top-tagging GRU / LSTM of ``shared/spec/rnn-semantics.md`` (6 inputs, hidden 20,
20 steps) and a hidden-64 GRU, int16 x int16, on VCK190 and VEK280.  For each kernel kind
(``vector_round``: hls4ml's default ``ap_fixed<16,6>`` types; ``scalar``: what every chain ran
before) it prints the best all-column mapping for latency (per-step latency and its MAC part)
and what a ``tiles <= 24`` target picks (all distributions).  Every number comes from
``aieflow.recurrent`` (planner + latency model, the constants of ``recurrent/costs.py``); nothing
is measured.  Prints markdown.
"""

from __future__ import annotations

import platform
import time

from aieflow.recurrent import RecurrentDims, RecurrentOptions, choose_mapping

WORKLOADS = [
    ("top tagging GRU", "gru", 6, 20),
    ("top tagging LSTM", "lstm", 6, 20),
    ("GRU hidden 64", "gru", 6, 64),
]
DEVICES = ("vck190", "vek280")
KINDS = ("vector_round", "scalar")
BUDGET = "tiles <= 24"
COLUMN = RecurrentOptions(distribution="column", input_distribution="column")


def _side(m) -> str:
    return f"row x{m.rows}" if m.distribution == "row" else f"col {m.rows}r x {m.cas_len}t"


def main() -> None:
    t0 = time.perf_counter()
    print(f"Modelled (aieflow.recurrent latency model), int16 x int16, 20 steps; host {platform.machine()}\n")
    print("| layer | device | kernels | all-column: step ns | MAC ns | tiles | "
          f"`{BUDGET}` pick: U h | W x | step ns |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for name, cell, n_in, n_h in WORKLOADS:
        for dev in DEVICES:
            for kind in KINDS:
                dims = RecurrentDims(cell, n_in, n_h, 20, ("i16", "i16"), kernels=(kind, kind))
                col = choose_mapping(dims, dev, "latency", COLUMN)
                pick = choose_mapping(dims, dev, BUDGET)
                mac = col.performance.breakdown_ns["mac"]
                m = pick.chosen.mapping
                print(f"| {name} | {dev} | {kind} | {col.chosen.step_latency_ns:,.0f} | {mac:,.1f} | {col.chosen.tiles} | "
                      f"{_side(m.recurrent)} | {_side(m.input)} | {pick.chosen.step_latency_ns:,.0f} |")
    print(f"\n({time.perf_counter() - t0:.0f} s)")


if __name__ == "__main__":
    main()
