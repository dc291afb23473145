"""Modelled per-step latency of recurrent layers on the VCK190: AIE-only vs hybrid aggregation,
and (issue 22) the compact mapping against the spread ones for top tagging on VEK280 and VCK190.

    python benchmarks/gru_latency.py            # every table
    python benchmarks/gru_latency.py split      # the split-mapping tables only (issue 22)
    python benchmarks/gru_latency.py grid       # the grid-mapping tables only (issue 22)
    python benchmarks/gru_latency.py compact    # the compact / spread / grid table only (issue 22)

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

import torch

from aieflow.devices import get_device
from aieflow.recurrent import (
    RecurrentDims,
    RecurrentOptions,
    choose_mapping,
    estimate_recurrent,
    plan_recurrent,
)
from aieflow.recurrent.compact import split_gate_cycles
from aieflow.recurrent.costs import SPLIT_EXCHANGES
from aieflow.recurrent.design import compile_recurrent
from aieflow.recurrent.grid import grid_points
from aieflow.recurrent.model import split_step

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
    if m.compact:
        return "compact (1 tile)"
    if m.grid:
        return f"grid, {m.chains} chains of {m.recurrent.rows} units x {m.chain_len} tile{'s' if m.chain_len > 1 else ''}"

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


HLS4ML_PUBLISHED_US = 1.7  # rnn-semantics.md: top tagging, hls4ml latency strategy, xcku115 at 200 MHz
_KEYS = ("input", "weight", "recurrent_weight", "bias", "recurrent_bias", "accum", "output")


class _TopTagging(torch.nn.Module):
    """Top tagging (rnn-semantics.md): 20 steps x 6 -> GRU / LSTM 20 -> Dense 64 ReLU -> 1."""

    def __init__(self, cell: str) -> None:
        super().__init__()
        self.rnn = getattr(torch.nn, cell)(6, 20, batch_first=True)
        self.fc1, self.fc2 = torch.nn.Linear(20, 64), torch.nn.Linear(64, 1)

    def forward(self, x):
        out, _ = self.rnn(x)
        return self.fc2(torch.relu(self.fc1(out[:, -1])))


def _top_tagging_design(cell: str, device: str, precision: str):
    """The compact design as compile makes it (types, kernels, the compact tile's vector forms):
    hls4ml's default ap_fixed<16,6> everywhere in fixed point, as the hls4ml comparison; random
    seeded weights (no constant depends on their values, only on the types)."""
    torch.manual_seed(0)
    x = torch.randn(64, 20, 6)
    cfg = {"precision": precision}
    if precision != "fp32":
        cfg["layers"] = {"rnn": dict.fromkeys(_KEYS, "fixed<16,6>")}
    return compile_recurrent(_TopTagging(cell).eval(), device, x[:4], cfg, x, RecurrentOptions(distribution="compact"))


def _top_tagging_dims(cell: str, device: str, precision: str):
    """The layer's dims as compile sees them (``_top_tagging_design``)."""
    return _top_tagging_design(cell, device, precision).mapping.dims


def compact_table() -> list[str]:
    """Issue 22: the compact mapping (the whole cell on one tile) against the best spread mapping
    of each kind (row-wise, column-wise) and the ``target: latency`` pick among all of them, with
    the per-step breakdown, the head and one inference's latency, against hls4ml's published 1.7 us."""
    out = [
        "| model | device (types) | mapping | tiles | step ns | " + " | ".join(PARTS)
        + " | head ns | inference us | vs 1.7 us | bound |",
        "| --- | --- | --- | --- | --- | " + " | ".join("---" for _ in PARTS) + " | --- | --- | --- | --- |",
    ]
    for cell in ("GRU", "LSTM"):
        for device, precision in (("vek280", "int16"), ("vck190", "int16"), ("vck190", "fp32")):
            dims = _top_tagging_dims(cell, device, precision)
            fp32 = precision == "fp32"
            spread = {d_: RecurrentOptions(distribution=d_, input_distribution=d_ if fp32 else None) for d_ in ("row", "column")}
            grid = () if fp32 else (RecurrentOptions(distribution="grid"),)  # the generated grid: fixed point
            pick = choose_mapping(dims, device, "latency", (*spread.values(), RecurrentOptions(distribution="compact"), *grid))
            rows = [("compact", choose_mapping(dims, device, "latency", RecurrentOptions(distribution="compact")).chosen.mapping)]
            rows += [(f"best {k}-wise", choose_mapping(dims, device, "latency", o).chosen.mapping) for k, o in spread.items()]
            rows += [("best grid (generated)", choose_mapping(dims, device, "latency", g).chosen.mapping) for g in grid]
            rows.append(("target: latency picks", pick.chosen.mapping))
            types = "fp32" if fp32 else "ap_fixed<16,6>"
            for label, m in rows:
                p = estimate_recurrent(m, device)
                parts = " | ".join(f"{p.breakdown_ns[k]:.1f}" for k in PARTS)
                what = label if m.compact else f"{label}: {_mapping(m)}" if m.grid else f"{label}: {m.aggregation}, {_mapping(m)}"
                us = p.sequence_latency_ns / 1e3
                out.append(
                    f"| top tagging {cell} | {device} ({types}) | {what} | {m.tiles} | {p.step_latency_ns:.1f} | {parts} | "
                    f"{p.head_ns:.1f} | {us:.2f} | {us / HLS4ML_PUBLISHED_US:.1f}x | {p.bound} |"
                )
    return out


SPLITS = range(2, 7)


def _split(design, device: str, tiles: int, exchange: str, w_ahead: bool):
    dims = design.mapping.dims
    units = -(-dims.n_h // tiles)
    return split_step(dims, device, tiles, exchange, w_ahead, split_gate_cycles(design.layer, get_device(device), units))


def split_table() -> list[str]:
    """Issue 22, the split mapping (modelled, not generated): the top-tagging cell's hidden units
    over T = 2..6 tiles, h all-gathered every step through neighbouring data memories, a cascade
    chain + stream back, or packet streams, with W x on the tile or on a partner tile ahead; per
    (cell, device, T) every exchange and W x placement, then the fastest's breakdown; and the
    floor (u = 1 unit per tile, no exchange, W x ahead) against the per-step budget that 1.7 us
    leaves after the fill and the head."""
    out = [
        "| model | device | T | units / tile | W x | exchange | tiles | step ns | " + " | ".join(PARTS)
        + " (cycles) | inference us | vs 1.7 us |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | " + " | ".join("---" for _ in PARTS) + " | --- | --- |",
    ]
    floors = ["| model | device | budget per step: 1.7 us - fill - head, / 20 (cycles) | fastest split (T, cycles) "
              "| floor: 1 unit / tile, W x ahead, no exchange (cycles: mac + reduction + aggregation) |",
              "| --- | --- | --- | --- | --- |"]
    for cell in ("GRU", "LSTM"):
        for device in ("vek280", "vck190"):
            design = _top_tagging_design(cell, device, "int16")
            clock = get_device(device).clock_hz
            best = None
            for tiles in SPLITS:
                steps = [_split(design, device, tiles, ex, wa) for ex in SPLIT_EXCHANGES for wa in (False, True)]
                s = min(steps, key=lambda s: (s.sequence_ns, s.tiles))
                best = s if best is None or s.sequence_ns < best.sequence_ns else best
                parts = " | ".join(f"{s.parts[k]:.0f}" for k in PARTS)
                us = s.sequence_ns / 1e3
                out.append(f"| top tagging {cell} | {device} | {tiles} | {s.units} | {'partner tile' if s.w_ahead else 'on tile'} | "
                           f"{s.exchange} | {s.tiles} | {s.step_ns:.1f} | {parts} | {us:.2f} | {us / HLS4ML_PUBLISHED_US:.2f}x |")
            budget = (HLS4ML_PUBLISHED_US * 1e3 - best.fill_ns - best.head_ns) / design.mapping.dims.seq_len * clock / 1e9
            f = _split(design, device, design.mapping.dims.n_h, "stream", True)
            floor = f.cycles - f.parts["routing"]
            floors.append(f"| top tagging {cell} | {device} | {budget:.0f} | T = {best.split}: {best.cycles:.0f} | "
                          f"{floor:.0f} ({f.parts['mac']:.0f} + {f.parts['reduction']:.0f} + {f.parts['aggregation']:.0f}) |")
    return [*out, "", *floors]


def grid_table() -> list[str]:
    """Issue 22, the grid mapping (recurrent/grid.py, generated: rnn_grid.h): per (cell, device) the fastest
    grids of R chains x C cascade tiles among every distinct one, with the per-step breakdown (cycles), then the
    per-step budget 1.7 us leaves after the fastest's fill and head, and the gate math of one unit (+ gx read from
    the cascade) that no placement removes."""
    out = [
        "| model | device | R chains x C tiles | units / chain | columns / tile | tiles | step ns | "
        + " | ".join(PARTS) + " (cycles) | fill ns | head ns | inference us | vs 1.7 us |",
        "| --- | --- | --- | --- | --- | --- | --- | " + " | ".join("---" for _ in PARTS) + " | --- | --- | --- | --- |",
    ]
    bounds = ["| model | device | grids costed | budget per step (cycles) | fastest step (cycles) | "
              "gate math of 1 unit + gx read (cycles) | fastest's mac + reduction + routing (cycles) |",
              "| --- | --- | --- | --- | --- | --- | --- |"]
    for cell in ("GRU", "LSTM"):
        for device in ("vek280", "vck190"):
            design = _top_tagging_design(cell, device, "int16")
            dev = get_device(device)
            points = grid_points(design.mapping.dims, device, lambda u, d=design, v=dev: split_gate_cycles(d.layer, v, u))
            for g in points[:3]:
                parts = " | ".join(f"{g.parts[k]:.0f}" for k in PARTS)
                us = g.sequence_ns / 1e3
                out.append(f"| top tagging {cell} | {device} | {g.chains} x {g.chain_len} | {g.units} | {g.columns} | {g.tiles} | "
                           f"{g.step_ns:.1f} | {parts} | {g.fill_ns:.1f} | {g.head_ns:.1f} | {us:.2f} | {us / HLS4ML_PUBLISHED_US:.2f}x |")
            best = points[0]
            budget = (HLS4ML_PUBLISHED_US * 1e3 - best.fill_ns - best.head_ns) / design.mapping.dims.seq_len * dev.clock_hz / 1e9
            gx = best.parts["aggregation"] - split_gate_cycles(design.layer, dev, best.units)  # gx's cascade words
            one = split_gate_cycles(design.layer, dev, 1) + gx
            rest = best.parts["mac"] + best.parts["reduction"] + best.parts["routing"]
            bounds.append(f"| top tagging {cell} | {device} | {len(points)} | {budget:.0f} | {best.cycles:.0f} | {one:.0f} | {rest:.0f} |")
    return [*out, "", *bounds]


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
        "Issue 22: compact (whole cell on one tile) vs spread and grid mappings, top tagging (6 -> 20, 20 steps, Dense 64 -> 1),",
        f"one inference against hls4ml's published {HLS4ML_PUBLISHED_US} us:",
        "",
        *compact_table(),
        "",
        "Issue 22: split mapping (hidden units over T tiles, h all-gathered every step; modelled, not generated), top tagging,",
        "hls4ml's ap_fixed<16,6> types; per T the fastest exchange and W x placement (cycles per step in the parts):",
        "",
        *split_table(),
        "",
        "Issue 22: grid mapping (R chains of hidden units x C-tile cascades over h's columns, W x ahead, h by packet streams;",
        "generated), top tagging, hls4ml's ap_fixed<16,6> types; the three fastest grids per model:",
        "",
        *grid_table(),
        "",
        f"Total time: {time.perf_counter() - t0:.1f} s.",
    ]
    print("\n".join(lines))


if __name__ == "__main__":
    import sys

    if sys.argv[1:] == ["split"]:
        print("\n".join(split_table()))
    elif sys.argv[1:] == ["compact"]:
        t0 = time.perf_counter()
        print("\n".join(compact_table()))
        print(f"\nModelled on {platform.machine()}, {platform.system()}, Python {platform.python_version()}, "
              f"{time.perf_counter() - t0:.1f} s.")
    elif sys.argv[1:] == ["grid"]:
        t0 = time.perf_counter()
        print("\n".join(grid_table()))
        print(f"\nModelled on {platform.machine()}, {platform.system()}, Python {platform.python_version()}, "
              f"{time.perf_counter() - t0:.1f} s.")
    else:
        main()
