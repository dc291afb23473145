"""Human-readable reports of a design."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .perf.bands import summary_line
from .perf.system import design_lines
from .tables import plain

if TYPE_CHECKING:
    from .design import Design


def text_summary(d: Design) -> str:
    res = d.resources()
    dev = d.device
    head = [
        f"aieflow design for {dev.board} ({dev.part}, {dev.generation.name}, {dev.columns} x {dev.rows} tiles)",
        f"input  {d.graph.inputs[0]} {list(d.input_tensor.shape)} {d.input_type}",
        f"output {d.graph.outputs[0]} {list(d.output_tensor.shape)} {d.output_type}",
        f"batch  {d.config.batch} samples per iteration",
        "",
    ]
    rows = [["layer", "shape", "act", "in", "weight", "out", "shift", "cas_len x num", "mmul", "tiles", "bytes/tile", "at (col,row)"]]
    for n in d.layers():
        p, t = n.plan, n.types
        r = d.placement.rect(n.name)
        rows.append(
            [
                n.name,
                f"{p.in_features}->{p.out_features}",
                n.attrs.get("activation") or "-",
                str(t.input),
                str(t.weight),
                str(t.output),
                str(t.shift),
                f"{p.cas_len} x {p.cas_num}",
                "x".join(map(str, p.mmul)),
                str(p.tiles) + (f" + {p.footprint - p.tiles} lending" if p.borrows else ""),
                f"{p.memory.total}/{dev.generation.data_memory_bytes}"
                + (f" (+{'/'.join(p.borrows)} memory)" if p.borrows else ""),
                f"({r.column},{r.row})",
            ]
        )
    tail = [
        "",
        (f"{res['replicas']} copies of the design: " if res["replicas"] > 1 else "")
        + f"compute tiles {res['compute_tiles']}/{res['compute_tiles_available']}, "
        f"memory-tile buffers {res['memory_tiles']}, PLIO in {res['plio_in']} / out {res['plio_out']}"
        + (f", {res['lender_tiles']} tile{'s' if res['lender_tiles'] > 1 else ''} lending its data memory (no kernel)" if res["lender_tiles"] else ""),
        placement_text(d),
    ]
    tail += ["", performance_text(d), *design_lines(d, breakdown=True), "  " + summary_line()]
    if d.exploration is not None:
        ex = d.exploration
        tail.append(
            f"target '{ex.target.to_string()}': chose {ex.chosen.tiles} tiles"
            + (f" and batch {ex.chosen.batch} (of {', '.join(map(str, ex.batches))})" if len(ex.batches) > 1 else "")
            + " from a Pareto front of "
            f"{len(ex.front)} plans ({ex.candidates} layer plans costed; `aieflow explore` lists them)"
        )
    if d.timings:
        total = sum(t for _, t in d.timings)
        tail.append("compile " + ", ".join(f"{k} {v * 1e3:.0f} ms" for k, v in d.timings) + f" (total {total:.2f} s)")
    return "\n".join(head) + plain(rows) + "\n" + "\n".join(tail)


def placement_text(d: Design) -> str:
    """One line: how the layers were placed and the placement cost J (passes/place.py)."""
    p = d.placement
    cost = f"{p.cost:.2f}" if p.cost is not None else "-"
    proof = "optimal" if p.optimal else ("best found within the search budget" if p.method == "bnb" else "baseline")
    return f"placement {p.method}: cost J = {cost} (lambda {p.weights.lam:g}, mu {p.weights.mu:g}; {proof})"


def _si(v: float, unit: str) -> str:
    for scale, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(v) >= scale:
            return f"{v / scale:.3g} {prefix}{unit}"
    return f"{v:.3g} {unit}"


def performance_text(d: Design) -> str:
    """The modelled performance: totals, then one row per stage (transfers and layers)."""
    perf = d.estimate()
    head = (
        f"performance (model, {d.device.clock_hz / 1e9:g} GHz): latency {perf.latency_ns:,.0f} ns, "
        f"interval {perf.interval_ns:,.0f} ns per batch of {perf.batch}"
        + (f" on each of {perf.replicas} copies" if perf.replicas > 1 else "")
        + f" ({perf.interval_ns / (perf.batch * perf.replicas):,.1f} ns/sample), "
        f"throughput {_si(perf.throughput_ops_per_s, 'OPS')}, bound: {perf.bound} ({perf.bottleneck.name})"
        + ("; stages of one copy:" if perf.replicas > 1 else "")
    )
    rows = [["stage", "kind", "tiles", "cycles", "share of interval", "efficiency vs peak", "bound"]]
    for st in perf.stages:
        rows.append(
            [
                st.name,
                st.kind,
                str(st.tiles) if st.tiles else "-",
                f"{st.cycles:,.0f}",
                f"{100 * st.busy:.0f}%",
                f"{100 * st.efficiency:.1f}%" if st.efficiency is not None else "-",
                st.bound,
            ]
        )
    return head + "\n" + plain(rows)
