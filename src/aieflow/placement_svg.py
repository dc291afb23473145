"""An SVG picture of a placement: the tile grid, each layer's rectangle, and the layer-to-layer links.

Plain text, no dependency.  Array row 0 is drawn at the bottom, above the memory-tile rows (AIE-ML)
and the interface row, as on the device; each link is an arrow from the producer's output tile to
the consumer's input tile (the ports the placement cost measures, ``passes/place.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING
from xml.sax import saxutils

from .passes.place import Placement, layer_edges
from .svg_charts import clean

if TYPE_CHECKING:
    from .design import Design

def escape(value: str) -> str:
    """Text for the picture: XML-escaped, the characters XML cannot hold (NUL, most C0 controls)
    replaced, so a name from a model leaves a well-formed SVG."""
    return saxutils.escape(clean(value))


def quoteattr(value: str) -> str:
    return saxutils.quoteattr(clean(value))


def _short(name: str, limit: int = 40) -> str:
    """A label: the name, shortened past ``limit`` characters (the tooltip holds all of it)."""
    return name if len(name) <= limit else name[: limit - 1] + "\u2026"


CELL = 18  # pixels per tile
LEFT, TOP, BOTTOM = 44, 34, 30
PALETTE = ("#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#86bcb6")


def _centre(placement: Placement, cell: tuple[int, int]) -> tuple[float, float]:
    c, r = cell
    return LEFT + (c + 0.5) * CELL, TOP + (placement.rows - 1 - r + 0.5) * CELL


def _grid(placement: Placement, memory_tile_rows: int) -> list[str]:
    """Compute tiles, then the memory-tile and interface rows below them, with row / column labels."""
    out = []
    for r in range(placement.rows):
        y = TOP + (placement.rows - 1 - r) * CELL
        out.append(f'<text class="axis" x="{LEFT - 4}" y="{y + CELL * 0.7:.1f}" text-anchor="end">{r}</text>')
        for c in range(placement.columns):
            out.append(f'<rect class="tile" x="{LEFT + c * CELL}" y="{y}" width="{CELL}" height="{CELL}"/>')
    extra = [("memory-tile", "mem")] * memory_tile_rows + [("interface", "if")]
    for k, (cls, label) in enumerate(extra):
        y = TOP + (placement.rows + k) * CELL
        out.append(f'<text class="axis" x="{LEFT - 4}" y="{y + CELL * 0.7:.1f}" text-anchor="end">{label}</text>')
        out.append(f'<rect class="{cls}" x="{LEFT}" y="{y}" width="{placement.columns * CELL}" height="{CELL}"/>')
    y = TOP + (placement.rows + len(extra)) * CELL + 12
    for c in range(0, placement.columns, 5):
        out.append(f'<text class="axis" x="{LEFT + (c + 0.5) * CELL:.1f}" y="{y}" text-anchor="middle">{c}</text>')
    for c, r in placement.keep_out:
        y = TOP + (placement.rows - 1 - r) * CELL
        out.append(f'<rect class="keep-out" x="{LEFT + c * CELL}" y="{y}" width="{CELL}" height="{CELL}"/>')
    return out


def _layers(placement: Placement) -> list[str]:
    out = []
    for i, r in enumerate(placement.rects):
        x, y = LEFT + r.column * CELL, TOP + (placement.rows - r.row - r.height) * CELL
        w, h = r.width * CELL, r.height * CELL
        lenders = sorted(r.lender_cells())
        tip = (f"{r.layer}: {r.height // r.period} x {r.width} tiles (cas_num x cas_len) at column {r.column}, "
               f"row {r.kernel_row}") + (f"; {len(lenders)} tiles lend it their data memory (hatched)" if lenders else "")
        out += [
            f'<g class="layer" data-layer={quoteattr(r.layer)}>',
            f"<title>{escape(tip)}</title>",
            f'<rect class="layer" data-layer={quoteattr(r.layer)} x="{x + 1}" y="{y + 1}" width="{w - 2}" '
            f'height="{h - 2}" fill="{PALETTE[i % len(PALETTE)]}"/>',
            *(f'<rect class="lender" x="{LEFT + c * CELL + 1}" y="{TOP + (placement.rows - 1 - rr) * CELL + 1}" '
              f'width="{CELL - 2}" height="{CELL - 2}" fill="url(#lender)"/>' for c, rr in lenders),
            f'<text class="label" x="{x + w / 2:.1f}" y="{y + h / 2 + 4:.1f}" text-anchor="middle">{escape(_short(r.layer))}</text>',
            "</g>",
        ]
    return out


def _arrows(placement: Placement, edges: Sequence[tuple[str, str]]) -> list[str]:
    out = []
    for p, q in edges:
        (x1, y1) = _centre(placement, placement.rect(p).out_tile(placement.snake))
        (x2, y2) = _centre(placement, placement.rect(q).in_tile(placement.snake))
        out.append(
            f'<line class="edge" data-from={quoteattr(p)} data-to={quoteattr(q)} x1="{x1:.1f}" y1="{y1:.1f}" '
            f'x2="{x2:.1f}" y2="{y2:.1f}" marker-end="url(#arrow)"/>'
        )
    return out


def placement_svg(
    placement: Placement, edges: Sequence[tuple[str, str]], memory_tile_rows: int = 0, title: str = ""
) -> str:
    """The SVG document (a string) for ``placement`` with arrows along ``edges`` (producer, consumer)."""
    width = LEFT + placement.columns * CELL + 10
    height = TOP + (placement.rows + memory_tile_rows + 1) * CELL + BOTTOM
    cost = f"{placement.cost:.2f}" if placement.cost is not None else "-"
    w = placement.weights
    caption = (
        f"{title}{' - ' if title else ''}placement {placement.method}, cost J = {cost} "
        f"(lambda {w.lam:g}, mu {w.mu:g}){', optimal' if placement.optimal else ''}"
    )
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
        'font-family="sans-serif" font-size="10">',
        "<defs><marker id=\"arrow\" viewBox=\"0 0 10 10\" refX=\"9\" refY=\"5\" markerWidth=\"6\" markerHeight=\"6\" "
        "orient=\"auto-start-reverse\"><path d=\"M 0 0 L 10 5 L 0 10 z\" fill=\"#222\"/></marker>"
        "<pattern id=\"lender\" width=\"4\" height=\"4\" patternUnits=\"userSpaceOnUse\">"
        "<path d=\"M 0 4 L 4 0\" stroke=\"#fff\" stroke-width=\"1\"/></pattern></defs>",
        "<style>.tile{fill:#f4f4f4;stroke:#ccc;stroke-width:0.5}.memory-tile{fill:#dde6f0;stroke:#9ab}"
        ".interface{fill:#e8e0d0;stroke:#b9a}.keep-out{fill:#555;opacity:0.6}.layer rect{stroke:#222;"
        "stroke-width:1;opacity:0.85}.label{fill:#000;font-weight:bold}.axis{fill:#666}"
        ".edge{stroke:#222;stroke-width:1.5;fill:none}</style>",
        f'<text class="caption" x="{LEFT}" y="{TOP - 14}">{escape(caption)}</text>',
        *_grid(placement, memory_tile_rows),
        *_layers(placement),
        *_arrows(placement, edges),
        "</svg>",
    ]
    return "\n".join(parts) + "\n"


def design_svg(design: Design) -> str:
    """The placement picture of a compiled or loaded design."""
    dev = design.device
    return placement_svg(
        design.placement, layer_edges(design.graph), dev.memory_tile_rows, title=f"{design.graph.name} on {dev.board}"
    )
