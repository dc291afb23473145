"""Small SVG charts, written as plain text (no dependency), for the HTML report and the Pareto plot.

Every piece of text goes through :func:`text` (XML-escaped, characters XML cannot hold replaced,
long names shortened; the whole name stays in a ``<title>`` tooltip), so a name from a model can
never become markup.  Class names start with ``af-``: an inline SVG's ``<style>`` applies to the
whole HTML page, so they must not meet the placement picture's (``.tile``, ``.label``, ...).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from xml.sax.saxutils import escape, quoteattr

# Tableau 10, the placement picture's palette (placement_svg.PALETTE)
PALETTE = ("#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac")
PICK = "#e15759"

# characters XML 1.0 cannot hold (the C0 controls but tab / newline / CR, surrogates, U+FFFE/F)
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def clean(value: object) -> str:
    """``value`` as text XML can hold (what it cannot becomes U+FFFD)."""
    return _NOT_XML.sub("\ufffd", str(value))


def text(value: object, limit: int | None = None) -> str:
    """``value`` escaped for SVG / HTML text, at most ``limit`` characters (then an ellipsis)."""
    s = clean(value)
    if limit is not None and len(s) > limit:
        s = s[: limit - 1] + "\u2026"
    return escape(s)


def attr(value: object) -> str:
    """``value`` as a quoted attribute value (quotes included)."""
    return quoteattr(clean(value))


def si(v: float, unit: str = "") -> str:
    """``v`` with 3 significant digits and an SI prefix: 1.23 k, 45.6 M."""
    if v == 0 or not math.isfinite(v):
        return f"{v:g}{(' ' + unit) if unit else ''}"
    for scale, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(v) >= scale:
            return f"{v / scale:.3g} {prefix}{unit}".rstrip()
    return f"{v:.3g} {unit}".rstrip() if abs(v) >= 1e-3 else f"{v:.2e} {unit}".rstrip()


def duration(ns: float) -> str:
    """A time given in ns, in ns, \u00b5s, ms or s with 3 significant digits: 124 ns, 1.07 ms."""
    for scale, unit in ((1e9, "s"), (1e6, "ms"), (1e3, "\u00b5s")):
        if abs(ns) >= scale:
            return f"{ns / scale:.3g} {unit}"
    return f"{ns:.3g} ns"


# ---------------------------------------------------------------------------------------- axes


@dataclass(frozen=True)
class Axis:
    """A linear or logarithmic axis from ``lo`` to ``hi`` (data) onto pixels ``a`` to ``b``."""

    lo: float
    hi: float
    log: bool
    a: float
    b: float

    @staticmethod
    def fit(values: Sequence[float], a: float, b: float, zero: bool = False) -> Axis:
        """An axis holding ``values``: logarithmic when they are positive and span 20x or more;
        ``zero``: a linear axis starts at 0."""
        lo, hi = min(values), max(values)
        if lo > 0 and hi / lo >= 20:
            return Axis(lo / 1.25, hi * 1.25, True, a, b)
        if zero and lo >= 0:
            lo = 0.0
        pad = (hi - lo) * 0.08 or (abs(hi) * 0.1 or 1.0)
        return Axis(lo - (pad if lo != 0 or not zero else 0), hi + pad, False, a, b)

    def __call__(self, v: float) -> float:
        if self.log:
            t = (math.log10(v) - math.log10(self.lo)) / (math.log10(self.hi) - math.log10(self.lo))
        else:
            t = (v - self.lo) / (self.hi - self.lo)
        return self.a + t * (self.b - self.a)

    def ticks(self) -> list[float]:
        if self.log:
            first, last = math.floor(math.log10(self.lo)), math.ceil(math.log10(self.hi))
            steps = (1, 2, 5) if last - first <= 3 else (1,)
            out = [m * 10.0**e for e in range(first, last + 1) for m in steps]
        else:
            raw = (self.hi - self.lo) / 5
            mag = 10 ** math.floor(math.log10(raw))
            step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
            out = [k * step for k in range(math.ceil(self.lo / step), math.floor(self.hi / step) + 1)]
        return [t for t in out if self.lo <= t <= self.hi]


def axes(x: Axis, y: Axis, xlabel: str, ylabel: str) -> list[str]:
    """Grid lines, tick labels and axis titles of a plot whose area is ``x.a..x.b`` by ``y.b..y.a``."""
    out = [f'<rect class="af-frame" x="{x.a:.1f}" y="{y.b:.1f}" width="{x.b - x.a:.1f}" height="{y.a - y.b:.1f}"/>']
    for t in x.ticks():
        px = x(t)
        out.append(f'<line class="af-grid" x1="{px:.1f}" y1="{y.b:.1f}" x2="{px:.1f}" y2="{y.a:.1f}"/>')
        out.append(f'<text class="af-tick" x="{px:.1f}" y="{y.a + 14:.1f}" text-anchor="middle">{text(si(t))}</text>')
    for t in y.ticks():
        py = y(t)
        out.append(f'<line class="af-grid" x1="{x.a:.1f}" y1="{py:.1f}" x2="{x.b:.1f}" y2="{py:.1f}"/>')
        out.append(f'<text class="af-tick" x="{x.a - 5:.1f}" y="{py + 3.5:.1f}" text-anchor="end">{text(si(t))}</text>')
    out.append(f'<text class="af-axis-title" x="{(x.a + x.b) / 2:.1f}" y="{y.a + 32:.1f}" text-anchor="middle">'
               f'{text(xlabel)}{" (log)" if x.log else ""}</text>')
    out.append(f'<text class="af-axis-title" transform="translate({x.a - 46:.1f},{(y.a + y.b) / 2:.1f}) rotate(-90)" '
               f'text-anchor="middle">{text(ylabel)}{" (log)" if y.log else ""}</text>')
    return out


STYLE = ("<style>.af-frame{fill:#fff;stroke:#999;stroke-width:1}.af-grid{stroke:#e4e4e4;stroke-width:1}"
         ".af-tick{fill:#555;font-size:10px}.af-axis-title{fill:#222;font-size:11px}"
         ".af-title{fill:#111;font-size:13px;font-weight:bold}.af-note{fill:#444;font-size:11px}"
         ".af-bar-label{fill:#222;font-size:11px}.af-value{fill:#333;font-size:10px}"
         ".af-front{fill:none;stroke:#4e79a7;stroke-width:1.5;opacity:0.7}"
         ".af-point{stroke:#fff;stroke-width:0.8}.af-pick{fill:none;stroke-width:2.5}"
         ".af-interval{stroke:#222;stroke-width:1.2;stroke-dasharray:4 3}</style>")


def document(width: float, height: float, body: Sequence[str], label: str) -> str:
    """An SVG document: ``label`` is its accessible name (``aria-label``)."""
    return "\n".join([
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{height:.0f}" '
        f'viewBox="0 0 {width:.0f} {height:.0f}" font-family="sans-serif" role="img" aria-label={attr(label)}>',
        STYLE,
        *body,
        "</svg>",
    ]) + "\n"


# ---------------------------------------------------------------------------------- bar chart


@dataclass(frozen=True)
class Bar:
    name: str
    ns: float
    kind: str = ""


def breakdown_svg(bars: Sequence[Bar], interval_ns: float, title: str) -> str:
    """Horizontal bars: each stage's time per batch, labelled with its share of the interval; a
    dashed line marks the interval; bars are coloured by stage kind (legend below)."""
    label_w, bar_w, row_h, top = 230, 420, 20, 34
    width = label_w + bar_w + 150
    kinds = list(dict.fromkeys(b.kind or "stage" for b in bars))
    colour = {k: PALETTE[i % len(PALETTE)] for i, k in enumerate(kinds)}
    high = max([b.ns for b in bars] + [interval_ns, 1e-9])
    scale = bar_w / high
    legend_rows = math.ceil(len(kinds) / 5)
    height = top + row_h * len(bars) + 26 + 16 * legend_rows
    out = [f'<text class="af-title" x="8" y="18">{text(title, 120)}</text>']
    for i, b in enumerate(bars):
        y = top + i * row_h
        share = 100 * b.ns / interval_ns if interval_ns else 0.0
        tip = f"{b.name}: {b.ns:,.1f} ns per batch, {share:.1f}% of the interval" + (f" ({b.kind})" if b.kind else "")
        out += [
            f'<g class="af-bar" data-stage={attr(b.name)}><title>{text(tip)}</title>',
            f'<text class="af-bar-label" x="{label_w - 6}" y="{y + 13}" text-anchor="end">{text(b.name, 34)}</text>',
            f'<rect x="{label_w}" y="{y + 3}" width="{max(b.ns * scale, 1.0):.1f}" height="{row_h - 6}" '
            f'fill="{colour[b.kind or "stage"]}"/>',
            f'<text class="af-value" x="{label_w + b.ns * scale + 5:.1f}" y="{y + 13}">{text(duration(b.ns))} '
            f'({share:.0f}%)</text>',
            "</g>",
        ]
    if interval_ns:
        x = label_w + interval_ns * scale
        y0, y1 = top - 4, top + row_h * len(bars)
        out.append(f'<line class="af-interval" x1="{x:.1f}" y1="{y0}" x2="{x:.1f}" y2="{y1}"/>')
        out.append(f'<text class="af-note" x="{x:.1f}" y="{y0 - 4}" text-anchor="middle">interval '
                   f'{text(duration(interval_ns))}</text>')
    y = top + row_h * len(bars) + 18
    for i, k in enumerate(kinds):
        lx, ly = 8 + (i % 5) * 150, y + (i // 5) * 16
        out.append(f'<rect x="{lx}" y="{ly - 9}" width="10" height="10" fill="{colour[k]}"/>')
        out.append(f'<text class="af-note" x="{lx + 14}" y="{ly}">{text(k, 20)}</text>')
    return document(width, height, out, title)
