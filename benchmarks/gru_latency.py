"""Modelled per-step latency of recurrent layers on the VCK190: AIE-only vs hybrid aggregation.

    python benchmarks/gru_latency.py

Workloads: the top-tagging GRU / LSTM of ``shared/spec/rnn-semantics.md`` (6 inputs, hidden 20,
20 steps), the hidden sizes over which ``shared/spec/gru-on-aie.md`` reports its trends (8-32, and
beyond 32 where its design ran out of resources), the flavour-tagging and QuickDraw layers of
``rnn-semantics.md``, and an input-size sweep.  fp32 on AIE1, as the published design.  Every
number comes from ``aieflow.recurrent`` (planner + latency model); nothing is measured (the
generated code runs on x86 for its values only).  Prints markdown.
"""

from __future__ import annotations

import platform
import time

from aieflow.recurrent import (
    RecurrentDims,
    RecurrentOptions,
    choose_mapping,
    estimate_recurrent,
    plan_recurrent,
)

DEVICE = "vck190"
CONFIGS = [
    ("top tagging GRU", RecurrentDims("gru", 6, 20, 20)),
    ("top tagging LSTM", RecurrentDims("lstm", 6, 20, 20)),
    *[(f"GRU hidden {n}", RecurrentDims("gru", 6, n, 20)) for n in (8, 16, 24, 32, 48, 64)],
    ("flavour tagging GRU", RecurrentDims("gru", 6, 120, 15)),
    ("QuickDraw GRU", RecurrentDims("gru", 3, 128, 100)),
]
PARTS = ("return", "broadcast", "mac", "reduction", "routing", "aggregation")


def _mapping(m) -> str:
    def side(x):
        return f"row x{x.rows}" if x.distribution == "row" else f"col {x.rows}r x {x.cas_len}t"

    return f"U {side(m.recurrent)}, W {side(m.input)}"


def published_table() -> list[str]:
    """The published mapping (row-wise, merges of one row block's gates, reuse 1 growing only
    when resources run out) with each aggregation."""
    out = [
        "| layer | aggregation | mapping | tiles | interface tiles | merges (fan-in) | step ns | "
        + " | ".join(PARTS)
        + " | interval ns | sequence us | bound |",
        "| --- | --- | --- | --- | --- | --- | --- | " + " | ".join("---" for _ in PARTS) + " | --- | --- | --- |",
    ]
    for name, dims in CONFIGS:
        for agg in ("aie", "hybrid"):
            m = plan_recurrent(dims, DEVICE, RecurrentOptions(aggregation=agg))
            p = estimate_recurrent(m, DEVICE)
            parts = " | ".join(f"{p.breakdown_ns[k]:.1f}" for k in PARTS)
            out.append(
                f"| {name} ({dims.n_in}->{dims.n_h}, {dims.seq_len} steps) | {agg} | {_mapping(m)} | {m.tiles} | "
                f"{m.interface_tiles} | {m.merges} ({m.merge_fanin}) | {p.step_latency_ns:.1f} | {parts} | "
                f"{p.interval_ns:.1f} | {p.sequence_latency_ns / 1e3:.2f} | {p.bound} |"
            )
    return out


def chosen_table() -> list[str]:
    """What ``target: latency`` picks among every legal mapping, per aggregation, and the fewest
    tiles within 1.25x of that latency (``latency_ns <= ...``)."""
    out = [
        "| layer | target | chosen | tiles | step ns | interval ns | sequence us | front size |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for name, dims in CONFIGS[:2] + CONFIGS[-2:]:
        best = choose_mapping(dims, DEVICE, "latency")
        budget = 1.25 * best.chosen.latency_ns
        for label, ex in (
            ("latency", best),
            (f"latency_ns <= {budget:.0f}", choose_mapping(dims, DEVICE, f"latency_ns <= {budget:.0f}")),
        ):
            m, p = ex.chosen.mapping, ex.performance
            out.append(
                f"| {name} | {label} | {m.aggregation}, {_mapping(m)} | {m.tiles} | {p.step_latency_ns:.1f} | "
                f"{p.interval_ns:.1f} | {p.sequence_latency_ns / 1e3:.2f} | {len(ex.front)} |"
            )
    return out


def variants_table() -> list[str]:
    """The PLIO width (128 bits at a quarter of the AIE clock matches the 32-bit stream,
    versal-devices.md) and AIE-ML (VEK280, bf16) for the same layers."""
    out = [
        "| layer | device | aggregation | PLIO bits | tiles | step ns | return | aggregation | interval ns |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    cases = [
        ("top tagging GRU", CONFIGS[0][1], "vck190", "hybrid", 128),
        ("QuickDraw GRU", CONFIGS[-1][1], "vck190", "hybrid", 128),
        ("top tagging GRU", CONFIGS[0][1], "vek280", "aie", 64),
        ("top tagging GRU", CONFIGS[0][1], "vek280", "hybrid", 64),
    ]
    for name, dims, device, agg, bits in cases:
        m = plan_recurrent(dims, device, RecurrentOptions(aggregation=agg, plio_bits=bits))
        p = estimate_recurrent(m, device)
        out.append(
            f"| {name} | {device} ({'x'.join(m.dims.pair)}) | {agg} | {bits} | {m.tiles} | {p.step_latency_ns:.1f} | "
            f"{p.breakdown_ns['return']:.1f} | {p.breakdown_ns['aggregation']:.1f} | {p.interval_ns:.1f} |"
        )
    return out


def input_sweep() -> list[str]:
    out = ["| inputs | step ns (loop) | interval ns | bound |", "| --- | --- | --- | --- |"]
    for n_in in (6, 24, 96, 128, 256, 512, 1024, 2048):
        p = estimate_recurrent(plan_recurrent(RecurrentDims("gru", n_in, 20, 20), DEVICE), DEVICE)
        out.append(f"| {n_in} | {p.step_latency_ns:.1f} | {p.interval_ns:.1f} | {p.bound} |")
    return out


def main() -> None:
    t0 = time.perf_counter()
    lines = [
        f"Modelled on {platform.machine()}, {platform.system()}, Python {platform.python_version()} "
        f"(the model is deterministic; the machine only sets how long it takes).",
        "",
        "Published mapping, per aggregation (VCK190, fp32, 1.25 GHz AIE, 312.5 MHz PL, 64-bit PLIOs):",
        "",
        *published_table(),
        "",
        "Chosen by the latency model among every legal mapping:",
        "",
        *chosen_table(),
        "",
        "Variants (published mapping):",
        "",
        *variants_table(),
        "",
        "Input-size sweep, GRU hidden 20, published mapping, hybrid:",
        "",
        *input_sweep(),
        "",
        f"Total time: {time.perf_counter() - t0:.1f} s.",
    ]
    print("\n".join(lines))


if __name__ == "__main__":
    main()
