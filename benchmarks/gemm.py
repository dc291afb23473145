"""GEMM benchmark (modelled): the published GotoBLAS design vs aieflow's best on VCK190, and
aieflow's memory-tile design on VEK280.

Workload of the spec's experiments (shared/spec/gemm-gotoblas-versal.md "Block sizes"):
(m, n, k) = (mc, nc, kc) = (256, 256, 2048), uint8, 1 to 32 tiles, packing excluded; plus 64 and
128 tiles ("beyond": the published design parallelises L4 only, so nc / nr = 32 tiles at most).
VEK280 (AIE-ML): the same problem in uint8 and int8, 1 to 128 tiles, `--design best` (the memory
tiles are the L2; there is no separate packing pass, so its cycles include every DDR transfer).
Every number is the performance model's (aieflow.gemm.perf; VEK280 / VEK385: the stage costs of
gemm/perf_memtile.py simulated on the mapped graph, gemm/lower.memtile_cycles); nothing is measured.

    python benchmarks/gemm.py [--write]   # --write: docs/benchmarks.md GEMM section + docs/img/gemm_*.svg
    python benchmarks/gemm.py --bf16      # the bf16 table (VEK280 / VEK385, memory-tile design), printed only
"""

from __future__ import annotations

import argparse
import math
import re
import textwrap
from pathlib import Path

import aieflow
from aieflow.errors import AieflowError
from aieflow.perf.published import evaluate

ROOT = Path(__file__).resolve().parent.parent
PROBLEM = (256, 256, 2048)
TILES = (1, 2, 4, 8, 16, 32, 64, 128)
PEAK = 128  # uint8 MACs per cycle per AIE1 tile (catalog)
START, END = "<!-- gemm-benchmark:start -->", "<!-- gemm-benchmark:end -->"


def run() -> list[dict]:
    rows = []
    base = {}
    for tiles in TILES:
        row = {"tiles": tiles}
        for design in ("published", "best"):
            try:
                d = aieflow.gemm(*PROBLEM, "uint8", "vck190", tiles, design)
            except AieflowError as e:
                row[design] = {"error": str(e).splitlines()[0]}
                continue
            e = d.estimate()
            base.setdefault(design, e.cycles)
            c = d.plan.config
            row[design] = {
                "cycles": e.cycles, "per_tile": e.macs_per_cycle_per_tile, "eff": e.efficiency,
                "speedup": base[design] / e.cycles, "used": e.tiles_used, "bound": e.bound,
                "config": f"{c.tiles_j}x{c.tiles_i}, {c.ar_streams} Ar stream{'s' if c.ar_streams > 1 else ''}, "
                          f"Br x{c.br_buffers}, kc {d.plan.blocks.kc}",
            }
        rows.append(row)
    return rows


ML_TYPES = ("uint8", "int8")
ML_PEAK = 256  # 8-bit MACs per cycle per AIE-ML tile (catalog)


def ml_run() -> list[dict]:
    """VEK280 best per tile budget and type, next to VCK190 best (total cycles: packing included)."""
    rows = []
    base: dict[str, float] = {}
    for tiles in TILES:
        row: dict = {"tiles": tiles}
        for dtype in ML_TYPES:
            d = aieflow.gemm(*PROBLEM, dtype, "vek280", tiles, "best")
            e, c, b = d.estimate(), d.plan.config, d.plan.blocks
            base.setdefault(dtype, e.cycles)
            row[dtype] = {
                "cycles": e.cycles, "per_tile": e.macs_per_cycle_per_tile, "eff": e.efficiency,
                "speedup": base[dtype] / e.cycles, "used": e.tiles_used, "bound": e.bound,
                "config": f"{c.tiles_j}x{c.tiles_i}, Cr {b.mr}x{b.nr}, Br x{c.br_buffers}, kc {b.kc}, nc {b.nc}, "
                          f"{d.plan.memtiles.ac_memtiles}+{d.plan.memtiles.bc_memtiles} memory tiles",
            }
        ref = aieflow.gemm(*PROBLEM, "uint8", "vck190", tiles, "best").estimate()
        row["vck190_total"] = ref.total_cycles
        row["vck190"] = {"per_tile": ref.macs_per_cycle_per_tile}
        rows.append(row)
    return rows


def ml_table(rows: list[dict]) -> str:
    head = ("| tiles | uint8: cycles | MACs/cycle/tile | efficiency | speed-up | tiles used | bound "
            "| uint8: configuration | int8: cycles | MACs/cycle/tile | bound | VCK190 ours, uint8: total cycles "
            "(packing incl.) | VEK280 / VCK190 |")
    lines = [head, "|" + " --- |" * (head.count("|") - 1)]
    for r in rows:
        u, i = r["uint8"], r["int8"]
        lines.append(f"| {r['tiles']} | {u['cycles']:,.0f} | {u['per_tile']:.1f} | {100 * u['eff']:.1f}% | "
                     f"{u['speedup']:.2f}x | {u['used']} | {u['bound']} | {u['config']} | {i['cycles']:,.0f} | "
                     f"{i['per_tile']:.1f} | {i['bound']} | {r['vck190_total']:,.0f} | "
                     f"{u['cycles'] / r['vck190_total']:.2f} |")
    return "\n".join(lines)


def table(rows: list[dict]) -> str:
    head = ("| tiles | published: cycles | MACs/cycle/tile | efficiency | speed-up | bound "
            "| ours: cycles | MACs/cycle/tile | efficiency | speed-up | tiles used | bound | ours: configuration |")
    lines = [head, "|" + " --- |" * (head.count("|") - 1)]
    for r in rows:
        cells = [str(r["tiles"])]
        for design in ("published", "best"):
            v = r[design]
            if "error" in v:
                cells += ["not possible (nc / nr = 32 micro-panels)", "-", "-", "-", "-"]
                if design == "best":
                    cells += ["-", "-"]
                continue
            cells += [f"{v['cycles']:,.0f}", f"{v['per_tile']:.1f}", f"{100 * v['eff']:.1f}%",
                      f"{v['speedup']:.2f}x"]
            if design == "best":
                cells.append(str(v["used"]))
            cells.append(v["bound"])
            if design == "best":
                cells.append(v["config"])
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def calibration() -> str:
    lines = ["| spec experiment (kc = 2048) | published cycles | modelled | error |",
             "| --- | --- | --- | --- |"]
    for r in evaluate():
        key = r.figure.key
        if key in ("gemm_stream", "gemm_mac", "gemm_full", "gemm_multicast", "gemm_full_32"):
            lines.append(f"| {r.figure.label} | {r.figure.published:,.0f} | {r.modelled:,.0f} | "
                         f"{100 * r.error:+.1f}% |")
        elif key.startswith("gemm_copy_cr_"):
            lines.append(f"| {r.figure.label} | {r.figure.published:,.0f} | {r.modelled:,.0f} | "
                         f"{100 * r.error:+.1f}% (fitted: 3 constants, least squares over the 6) |")
    lines.append("| copy Br (16 KB) into local memory | 3,280 | 3,280 | fitted (`BR_COPY_CYCLES_PER_BYTE`) |")
    return "\n".join(lines)


def svg(rows: list[dict], series=None, peak: int = PEAK,
        title: str = "GEMM 256 x 256 x 2048 uint8 on VCK190 (modelled): MACs/cycle per tile") -> str:
    """MACs per cycle per tile against tiles (log2 axis), one line per design; hand-written SVG.
    ``series``: (key, colour, label) of the row entries to draw (default: VCK190 published, best)."""
    series = series or (("published", "#c0392b", "published (1 stream, GMIO Copy Cr)"),
                        ("best", "#2471a3", "ours (model's choice)"))
    w, h, left, right, top, bottom = 640, 360, 60, 20, 30, 50
    xs = [r["tiles"] for r in rows]
    def x(t: float) -> float:
        return left + (math.log2(t) - math.log2(xs[0])) / (math.log2(xs[-1]) - math.log2(xs[0])) * (w - left - right)

    def y(v: float) -> float:
        return h - bottom - v / peak * (h - top - bottom)

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="12">',
           f'<rect width="{w}" height="{h}" fill="white"/>',
           f'<text x="{w / 2}" y="18" text-anchor="middle">{title}</text>']
    for v in range(0, peak + 1, 32):
        out.append(f'<line x1="{left}" y1="{y(v):.1f}" x2="{w - right}" y2="{y(v):.1f}" stroke="#ddd"/>')
        out.append(f'<text x="{left - 6}" y="{y(v) + 4:.1f}" text-anchor="end">{v}</text>')
    for t in xs:
        out.append(f'<line x1="{x(t):.1f}" y1="{h - bottom}" x2="{x(t):.1f}" y2="{h - bottom + 5}" stroke="black"/>')
        out.append(f'<text x="{x(t):.1f}" y="{h - bottom + 18}" text-anchor="middle">{t}</text>')
    out.append(f'<line x1="{left}" y1="{h - bottom}" x2="{w - right}" y2="{h - bottom}" stroke="black"/>')
    out.append(f'<line x1="{left}" y1="{top}" x2="{left}" y2="{h - bottom}" stroke="black"/>')
    out.append(f'<text x="{w / 2}" y="{h - 12}" text-anchor="middle">tiles</text>')
    for n_series, (design, colour, label) in enumerate(series):
        pts = [(x(r["tiles"]), y(r[design]["per_tile"])) for r in rows if "error" not in r[design]]
        out.append(f'<polyline fill="none" stroke="{colour}" stroke-width="2" points="'
                   + " ".join(f"{a:.1f},{b:.1f}" for a, b in pts) + '"/>')
        out += [f'<circle cx="{a:.1f}" cy="{b:.1f}" r="3" fill="{colour}"/>' for a, b in pts]
        ly = top + 14 + 16 * n_series
        out.append(f'<line x1="{w - 300}" y1="{ly - 4}" x2="{w - 280}" y2="{ly - 4}" stroke="{colour}" stroke-width="2"/>')
        out.append(f'<text x="{w - 275}" y="{ly}">{label}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


DENSE_CASES = ((4096, 4096, 8), (4096, 4096, 64), (4096, 4096, 256), (8192, 1024, 8))


def dense_rows() -> list[dict]:
    """Streamed Dense layers (int8, bias + ReLU, weights in DDR): the compiled design's model."""
    import torch

    rows = []
    for k, n, batch in DENSE_CASES:
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(k, n), torch.nn.ReLU()).eval()
        d = aieflow.compile(model, device="vck190", example_input=torch.randn(batch, k),
                            config={"batch": batch, "layers": {"0": {"weights": "streamed"}}})
        e, p = d.estimate(), d.plan
        rows.append({"shape": f"{k} x {n}", "batch": batch, "orientation": p.orientation,
                     "other": {o: c for o, c in p.orientations.items() if o != p.orientation},
                     "tiles": p.gemm.tiles, "packing": e.gemm.packing_cycles, "aie": e.gemm.cycles,
                     "epilogue": e.epilogue_cycles, "latency_us": e.latency_ns / 1e3,
                     "gops": e.throughput_ops_per_s / 1e9, "bound": e.bound})
    return rows


def dense_table(rows: list[dict]) -> str:
    head = ("| weights (in x out) | batch | orientation (other: total cycles) | tiles | weights from DDR | AIE GEMM "
            "| epilogue | latency us | GOPS | bound |")
    lines = [head, "|" + " --- |" * (head.count("|") - 1)]
    for r in rows:
        other = ", ".join(f"{o}: {c:,.0f}" for o, c in r["other"].items())
        lines.append(f"| {r['shape']} | {r['batch']} | {r['orientation']} ({other}) | {r['tiles']} | "
                     f"{r['packing']:,.0f} | {r['aie']:,.0f} | {r['epilogue']:,.0f} | {r['latency_us']:,.1f} | "
                     f"{r['gops']:,.1f} | {r['bound']} |")
    return "\n".join(lines)


def says(rows: list[dict]) -> str:
    """The VCK190 table's reading, with its numbers taken from ``rows``."""
    pub, best = {r["tiles"]: r["published"] for r in rows}, {r["tiles"]: r["best"] for r in rows}
    text = (
        f"What the model says: the published design is stream-bound at ~31 MACs/cycle (24% of peak) on one "
        f"tile, and the per-micro-kernel `Copy Cr` costs a little more with every GMIO port: from "
        f"{pub[1]['per_tile']:.1f} to {pub[32]['per_tile']:.1f} MACs/cycle/tile at 32 tiles "
        f"({100 * (pub[32]['per_tile'] / pub[1]['per_tile'] - 1):+.1f}%; the micro-kernel is 4,099 cycles and "
        f"`Copy Cr` 40 to 287).  Two Ar streams double the per-tile rate (the micro-kernel is still stream-bound: "
        f"2,051 cycles against 1,024 of MACs), and the overlapped write-back keeps it near 60 up to 32 tiles, where "
        f"every round writes 32 Cr of 256 B to DDR (2,048 cycles at the assumed 4 B/cycle, under the 2,115-cycle "
        f"round): {pub[32]['cycles'] / best[32]['cycles']:.2f}x the published design at 32 tiles.  64 tiles (two L5 "
        f"groups) gain only {100 * (1 - best[64]['cycles'] / best[32]['cycles']):.0f}%: each round then writes 64 Cr, "
        f"4,096 cycles of DDR, so the write-back bounds it, and 128 tiles buy nothing more."
    )
    return textwrap.fill(text, 100, break_on_hyphens=False)


def section(rows: list[dict], dense: list[dict], ml: list[dict]) -> str:
    return f"""{START}
## GEMM: published GotoBLAS design vs ours (modelled, issue 8)

Command: `python benchmarks/gemm.py --write`.  **Modelled, not measured**: every number comes from
aieflow's GEMM performance model (`src/aieflow/gemm/perf.py`, constants and assumptions in
[gemm.md](gemm.md)) on **VCK190** (AIE1, 1.25 GHz, uint8 peak 128 MACs/cycle per tile).  Workload of
the paper's experiments (`shared/spec/gemm-gotoblas-versal.md`): (m, n, k) = (mc, nc, kc) =
(256, 256, 2048), uint8, packing excluded.  The published figures it is compared with are the
spec's calibration cycles: one micro-kernel, the transfers, and the `Copy Cr` series per tile count
(the per-tile MACs/cycle the paper measured for the whole problem is held back to validate the
model, so the published design's rows below are predictions):

{calibration()}

Cycles are AIE cycles for the whole GEMM (Br copies, micro-kernels, Cr write-back); speed-up is
against the same design on one tile; efficiency is MACs/cycle/tile over the 128 peak.  "Published" is
the paper's design as the spec describes it (L4 over the tiles, one 32-bit Ar stream, single Br,
each tile's Cr loaded from and stored to DDR through its own GMIO port per micro-kernel, overlapped
with the next micro-kernel: the round is the micro-kernel plus the fitted `Copy Cr`); "ours" is the
configuration `--design best` picks with at most that many tiles (two Ar streams per tile, single or
ping-pong Br, Cr through a stream FIFO to the PL write-back, L5 groups when L4 runs out).

{table(rows)}

![MACs per cycle per tile](img/gemm_scaling.svg)

{says(rows)}

### VEK280: the memory tiles as the L2 (modelled)

Same problem on **VEK280** (AIE-ML, 1.25 GHz, 8-bit peak 256 MACs/cycle per tile; catalog), with
aieflow's memory-tile design (`--device vek280 --design best`, [gemm.md](gemm.md#vek280-aie-ml-the-memory-tiles-as-the-l2)):
Ac and Bc staged in memory tiles instead of PL UltraRAM / Block RAM, Ar over each tile's one input
stream from its group's memory tile, Br panels resident in the 64 KB tile memory, a micro-tile as
wide as the accumulator registers allow.  There is no packing pass: the PL streams each block from
DDR while the previous one computes, so these cycles include every DDR transfer, and the fair
comparison with VCK190 is against its total (packing included), in the last columns.  No published
figure exists for any of this (the paper is VCK190 only); the DDR rates are the model's assumed
4 B per AIE cycle per AXI port, which bound the larger tile counts on both boards.

{ml_table(ml)}

![VEK280 MACs per cycle per tile](img/gemm_vek280.svg)

What the model says: a 4 x 64 micro-tile turns the single 32-bit stream into 256 MACs per 4-byte
Ar column, so one tile reaches ~150 MACs/cycle (58% of the 256 peak, against 60 of 128 on VCK190);
what remains is the Cr epilogue (256 words per micro-kernel over the one output stream: 36% of the
one-tile cycles, because a 4 x 64 Br panel limits kc to 416 in 64 KB).  From 8 tiles on, DDR sets
the pace: with several k blocks C is written once and read-added for every further one (at 4 B/cycle),
and with one k block (kc = 2048, narrower Cr) the whole of A (512 KB) must arrive before the only
block can start, so this problem does not go below ~200 K cycles under the assumed DDR rate (VCK190:
~340 K with its packing).

### Streamed Dense layers (weights in DDR, modelled)

Dense layers whose weights do not fit on chip (`weights: streamed`, or `auto` when the resident
planner fails; [gemm.md](gemm.md#dense-layers-with-streamed-weights)) run as one GEMM plus a PL
epilogue.  int8 with bias and ReLU on VCK190, at most 32 tiles, cycles in AIE cycles per call of
`batch` samples; the orientation is the one the model picked (`xw`: A = activations, B = weights;
`wx`: A = W^T streamed as Ar, B = X^T held in tile memory), the other one's total in brackets.  No
published figure exists for these; the DDR rate behind "weights from DDR" is the model's assumed
4 B per AIE cycle.

{dense_table(dense)}

At small batches every weight is used `batch` times only, so reading the weights from DDR
(16 MiB at 4 B/cycle: 4.2 M cycles) bounds the layer whatever the tiles do; the AI Engine part is
2-3% of it.  Larger batches amortise the weights, and the GEMM itself starts to matter.
{END}
"""


BF16_TILES = (1, 4, 16, 64)


def bf16_table() -> str:
    """bf16 A and B, float32 C, on VEK280 and VEK385 (``--design best``): the model's cycles and
    rate against the catalog's bf16 peak (128 / 256 MACs per tile-cycle)."""
    lines = ["| board | tiles | cycles | latency | MACs/cycle/tile | of bf16 peak | tiles used | bound | configuration |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- |"]
    for dev in ("vek280", "vek385"):
        for tiles in BF16_TILES:
            d = aieflow.gemm(*PROBLEM, "bf16", dev, tiles, "best")
            e, c, b = d.estimate(), d.plan.config, d.plan.blocks
            lines.append(f"| {dev.upper()} | {tiles} | {e.cycles:,.0f} | {e.latency_ns / 1e3:,.1f} us | "
                         f"{e.macs_per_cycle_per_tile:.1f} | {e.efficiency:.1%} | {e.tiles_used} | {e.bound} | "
                         f"{c.tiles_j}x{c.tiles_i}, Cr {b.mr}x{b.nr}, mmul {'x'.join(map(str, d.plan.dtype.mmul))}, "
                         f"kc {b.kc}, nc {b.nc} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true", help="update docs/benchmarks.md and docs/img/gemm_scaling.svg")
    ap.add_argument("--bf16", action="store_true", help="print the bf16 table (VEK280 / VEK385) only")
    args = ap.parse_args()
    if args.bf16:
        print(bf16_table())
        return
    rows = run()
    ml = ml_run()
    text = section(rows, dense_rows(), ml)
    print(text)
    if args.write:
        (ROOT / "docs" / "img" / "gemm_scaling.svg").write_text(svg(rows))
        (ROOT / "docs" / "img" / "gemm_vek280.svg").write_text(svg(
            ml, (("uint8", "#2471a3", "VEK280 ours, uint8 (int8 the same)"),
                 ("vck190", "#7f8c8d", "VCK190 ours, uint8 (packing excluded)")), ML_PEAK,
            "GEMM 256 x 256 x 2048 on VEK280 (modelled): MACs/cycle per tile"))
        doc = ROOT / "docs" / "benchmarks.md"
        old = doc.read_text()
        pattern = re.compile(re.escape(START) + ".*?" + re.escape(END) + "\n?", re.S)
        new = pattern.sub(lambda _: text, old) if START in old else old.rstrip("\n") + "\n\n" + text
        doc.write_text(new)
        print(f"wrote {doc} (GEMM section), docs/img/gemm_scaling.svg and docs/img/gemm_vek280.svg")


if __name__ == "__main__":
    main()
