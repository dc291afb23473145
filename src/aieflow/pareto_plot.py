"""The Pareto plot of ``aieflow explore --plot FILE.svg`` (and of the HTML report when a design
carries its exploration, and of ``aieflow sweep`` for each model and device): latency vs tiles and
interval per sample vs tiles, the pick marked (a sweep has none).

:func:`pareto_svg` takes explore's points as they are: anything with ``tiles``, ``latency_ns`` and
``sample_interval_ns`` (``passes.search.Point``, the recurrent and stacked points; ``batch`` is
shown when there is one).  In each panel the points that no other point beats on both of its axes
are joined by a step line; the others belong to the front through the third figure (a sweep's:
or are dominated).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .pareto import undominated
from .svg_charts import PALETTE, PICK, Axis, axes, document, duration, text


def _tip(p: Any) -> str:
    batch = getattr(p, "batch", None)
    return (f"{p.tiles} tiles" + (f", batch {batch}" if batch is not None else "")
            + f": latency {p.latency_ns:,.0f} ns, interval {p.sample_interval_ns:,.1f} ns per sample")


def _panel(points: Sequence[Any], chosen: Any, value: str, x0: float, y0: float, w: float, h: float,
           ylabel: str) -> list[str]:
    xs = [float(p.tiles) for p in points]
    ys = [float(getattr(p, value)) for p in points]
    x = Axis.fit(xs, x0, x0 + w)
    y = Axis.fit(ys, y0 + h, y0)
    out = axes(x, y, "compute tiles", ylabel)
    steps = undominated(zip(xs, ys, strict=True), lambda xy: xy)  # no other has fewer tiles and a lower value
    if len(steps) > 1:
        path = [f"M {x(steps[0][0]):.1f} {y(steps[0][1]):.1f}"]
        for qx, qy in steps[1:]:
            path.append(f"H {x(qx):.1f} V {y(qy):.1f}")
        out.append(f'<path class="af-front" d="{" ".join(path)}"/>')
    for p, px, py in zip(points, xs, ys, strict=True):
        if p is chosen:
            continue
        out.append(f'<circle class="af-point" cx="{x(px):.1f}" cy="{y(py):.1f}" r="3.5" fill="{PALETTE[0]}">'
                   f"<title>{text(_tip(p))}</title></circle>")
    if chosen is None:
        return out
    cx, cy = x(float(chosen.tiles)), y(float(getattr(chosen, value)))
    out += [
        f'<g class="af-chosen"><title>{text("pick: " + _tip(chosen))}</title>',
        f'<circle class="af-point" cx="{cx:.1f}" cy="{cy:.1f}" r="4.5" fill="{PICK}"/>',
        f'<circle class="af-pick" cx="{cx:.1f}" cy="{cy:.1f}" r="9" stroke="{PICK}"/>',
        f'<text class="af-note" x="{cx + (12 if cx < x.b - 40 else -12):.1f}" y="{cy - 8 if cy > y.b + 20 else cy + 20:.1f}" '
        f'text-anchor="{"start" if cx < x.b - 40 else "end"}" fill="{PICK}">pick</text>',
        "</g>",
    ]
    return out


def pareto_svg(front: Sequence[Any], chosen: Any, title: str = "", what: str = "points on the front") -> str:
    """The SVG document (a string): two panels, latency vs tiles and interval per sample vs tiles,
    every point of ``front`` (and ``chosen``, when the target picked a point outside it), the pick
    ringed in red.  ``chosen`` None: no pick (a sweep's points); ``what`` says what the points are."""
    points = list(front)
    if chosen is None:
        pass
    elif not any(p is chosen or p == chosen for p in points):
        points.append(chosen)
    else:  # the very object, so the panel draws it once, as the pick
        points = [chosen if p == chosen else p for p in points]
    w, h, left, top, gap = 380, 260, 70, 48, 100
    width, height = left + 2 * w + gap + 20, top + h + 80
    head = title or "Pareto front"
    note = f"{len(front)} {what}"
    if chosen is not None:
        note += (f"; pick: {chosen.tiles} tiles, latency {duration(chosen.latency_ns)}, "
                 f"{duration(chosen.sample_interval_ns)} per sample")
    body = [
        f'<text class="af-title" x="{left}" y="18">{text(head, 140)}</text>',
        f'<text class="af-note" x="{left}" y="34">{text(note)}</text>',
        *_panel(points, chosen, "latency_ns", left, top, w, h, "latency (ns)"),
        *_panel(points, chosen, "sample_interval_ns", left + w + gap, top, w, h, "interval per sample (ns)"),
    ]
    y = top + h + 56
    legend = "a point of the front" if chosen is not None else "a point; the step line joins the undominated ones"
    body += [
        f'<circle cx="{left + 6}" cy="{y - 4}" r="3.5" fill="{PALETTE[0]}"/>',
        f'<text class="af-note" x="{left + 16}" y="{y}">{legend} (hover for its figures)</text>',
    ]
    if chosen is not None:
        body += [
            f'<circle class="af-pick" cx="{left + 306}" cy="{y - 4}" r="7" stroke="{PICK}"/>',
            f'<text class="af-note" x="{left + 318}" y="{y}">the pick (what compile builds for this config)</text>',
        ]
    return document(width, height, body, head)
