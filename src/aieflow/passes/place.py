"""A simple legal placement: each layer's cas_num x cas_len rectangle, packed left to right.

User-fixed coordinates are hard constraints; everything else is shelf-packed around them.  (The
branch-and-bound placer of issue 7 replaces the packing, not this interface.)
"""

from __future__ import annotations

from dataclasses import dataclass

from ..config import Config
from ..devices import Device
from ..errors import ConfigError, PlanError
from ..ir import Graph


@dataclass(frozen=True)
class Rect:
    layer: str
    column: int
    row: int
    width: int  # cas_len
    height: int  # cas_num

    def cells(self) -> set[tuple[int, int]]:
        return {(self.column + c, self.row + r) for c in range(self.width) for r in range(self.height)}


@dataclass(frozen=True)
class Placement:
    rects: tuple[Rect, ...]
    columns: int
    rows: int

    def rect(self, layer: str) -> Rect:
        return next(r for r in self.rects if r.layer == layer)

    def tile(self, layer: str, row: int, pos: int, cascade_east: bool = True) -> tuple[int, int]:
        """(column, row) of cascade row ``row``, cascade position ``pos`` of a layer.

        AIE1's cascade runs east on even array rows and west on odd ones (it snakes through the
        array, AM009); AIE-ML's runs east on every row.  A cascade row is laid out accordingly.
        """
        r = self.rect(layer)
        array_row = r.row + row
        east = cascade_east or array_row % 2 == 0
        col = r.column + pos if east else r.column + r.width - 1 - pos
        return col, array_row

    def to_json(self) -> dict:
        return {
            "grid": [self.columns, self.rows],
            "layers": {r.layer: {"column": r.column, "row": r.row, "width": r.width, "height": r.height} for r in self.rects},
        }


def place(graph: Graph, device: Device, config: Config) -> Placement:
    layers = [n for n in graph.nodes if n.plan is not None]
    occupied: set[tuple[int, int]] = set()
    rects: dict[str, Rect] = {}
    for n in layers:
        fixed = config.layer(n.name, *n.aliases).placement
        if fixed is None:
            continue
        r = Rect(n.name, fixed[0], fixed[1], n.plan.cas_len, n.plan.cas_num)
        if r.column + r.width > device.columns or r.row + r.height > device.rows:
            raise ConfigError(
                f"placement ({r.column}, {r.row}) puts the {r.height} x {r.width} layer outside the "
                f"{device.columns} x {device.rows} array of {device.board}",
                layer=n.name,
            )
        if r.cells() & occupied:
            raise ConfigError(f"placement ({r.column}, {r.row}) overlaps another fixed layer", layer=n.name)
        occupied |= r.cells()
        rects[n.name] = r
    for n in layers:
        if n.name in rects:
            continue
        w, h = n.plan.cas_len, n.plan.cas_num
        placed = None
        # First fit in reading order (columns, then shelves): legal and deterministic.
        for r0 in range(0, device.rows - h + 1):
            for c0 in range(0, device.columns - w + 1):
                cand = Rect(n.name, c0, r0, w, h)
                if not (cand.cells() & occupied):
                    placed = cand
                    break
            if placed:
                break
        if placed is None:
            raise PlanError(
                f"no free {h} x {w} rectangle is left on the {device.columns} x {device.rows} array",
                layer=n.name,
                hint="reduce parallelism of this or other layers, or the batch",
            )
        occupied |= placed.cells()
        rects[n.name] = placed
    ordered = tuple(rects[n.name] for n in layers)
    return Placement(ordered, device.columns, device.rows)


def check_placement(p: Placement, device: Device) -> None:
    """Assert legality: in bounds, no overlap (used by tests and before emission)."""
    seen: set[tuple[int, int]] = set()
    for r in p.rects:
        cells = r.cells()
        for c, rr in cells:
            if not (0 <= c < device.columns and 0 <= rr < device.rows):
                raise PlanError(f"tile ({c}, {rr}) is outside the array", layer=r.layer)
        if cells & seen:
            raise PlanError("overlaps another layer", layer=r.layer)
        seen |= cells
