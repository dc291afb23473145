"""The one placer: kernel groups (rectangles) and their links on the AI Engine array, by branch
and bound over a wire cost.

The problem (:class:`Problem`, built by :func:`problem` from a mapped graph) is a list of kernel
groups (:class:`Block`: a layer's or stage's kernels, a ``height x width`` rectangle with the
kernels' rows inside it and the relative tile of every kernel), the edges between groups read off
the mapped graph's links (:class:`Edge`: producer -> consumer, through shared buffers, with the
elements moved per graph iteration), the user's fixed coordinates and keep-out tiles, and the
device grid with its generation's cascade direction (``Generation.cascade_serpentine``: AIE1's
cascade runs west on odd rows).  :func:`solve` places it and returns the :class:`Placement` the
lowering then puts the kernels by.  Every placed kind calls it (the Dense chain: ``passes/place.py``;
the DAG: ``dag/api.place_dag``; the CNN stream, rows and thesis mappings: ``cnn/emit.place_stream``,
``cnn/emit_rows.place_rows``, ``cnn/emit_thesis.place_thesis``; the recurrent mappings:
``recurrent/lower.place_recurrent``); ``pack`` is the same search over plain rectangles.

Each group is placed minimising the published cost (``shared/spec/dense-on-aie-ml.md``, "Placement")

    J = sum over edges e = p -> q of f_e * (|c_out(p) - c_in(q)| + lambda * |r_out(p) - r_in(q)|)
      + sum over layers i of mu * r_top(i)
      + |c0 - c_in(s)| + lambda * |r0 - r_in(s)| for each source layer s (no dense producer)

where f_e is the edge's factor (``Problem.edge_weights``; 1 in the published J) and, for our layers,

- ``c_in, r_in``: the tile where the layer's input enters: cascade position 0 of its bottom cascade
  row (the first cascade column; every column gets its own slice, the first one is the anchor);
  a layer whose kernels borrow their neighbours' data memories (``DensePlan.borrows``) is a taller
  rectangle: each cascade row with its lenders' rows above (north) and below (south), which run
  no kernel and are kept free of other layers like any other tile of the rectangle;
- ``c_out, r_out``: the tile where its output leaves: the last cascade position of the bottom row;
- ``r_top``: its top row (higher rows are further from the interface row and the memory tiles);
- ``(c0, r0)``: the start position, by default column 0 row 0 (next to the PLIO interface).

Each edge is weighed by what it moves: f_e = the elements its links deliver per graph iteration
(``Edge.words``) over the mean of the problem's edges that deliver any, so a heavier link gets the
shorter route, the factors sum to the number of such edges (J stays on the published scale, beside
``mu`` and the start term), and a design whose edges all move the same amount has every f_e = 1,
the published J.  An edge of streams only (0 words counted) keeps f_e = 1.

On AIE1 the cascade snakes (east on even rows, west on odd ones, ``Placement.tile``), so a layer
whose bottom row is odd takes its input at its right edge and gives its output at its left edge.
AIE1 layers share a buffer through the neighbour's memory when the producer's output tile and the
consumer's input tile are adjacent; an adjacent pair costs 1 (the least any two distinct tiles can
cost with lambda >= 1), so minimising J already favours memory borrowing.  AIE-ML links go through
the memory tiles below row 0, which the ``mu * r_top`` term favours.

Methods: ``bnb`` (default; depth-first branch and bound seeded with the best greedy baseline, so it
is never worse than they are), ``greedy-right``, ``greedy-up`` and ``first-fit`` (the reading-order
packing of earlier releases).  User-fixed coordinates and keep-out tiles are hard constraints.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import TYPE_CHECKING

import numpy as np

from ..devices import Device
from ..errors import ConfigError, PlanError

if TYPE_CHECKING:
    from ..ir import Graph
    from .ir import MappedGraph

DEFAULT_LAMBDA = 1.0
DEFAULT_MU = 0.05
METHODS = ("bnb", "greedy-right", "greedy-up", "first-fit")
# Search budget: node expansions only, never wall-clock time, so a placement (hence the estimate
# and the emitted graph) is the same on every run and machine load (explore's estimate equals the
# compiled design's).  4,000 expansions take 0.1-0.2 s of CPU (up to ~50 us each) for 20 layers
# on the 38 x 8 grid (2-core AMD EPYC test machine; docs/benchmarks.md, "Placement"); the 0.8 s
# wall-clock guard this replaced never fired there without load, so the search is as long as before.
NODE_BUDGET = 4000
_EPS = 1e-9

Cell = tuple[int, int]


# ---------------------------------------------------------------------------------------- types


@dataclass(frozen=True)
class Rect:
    layer: str
    column: int
    row: int
    width: int  # cas_len
    height: int  # array rows: cas_num x period
    # Array rows per cascade row (1 + the neighbour memories each kernel borrows: the lenders' rows
    # run no kernel, ops/dense.py memory_homes) and the kernel's row within its period.
    period: int = 1
    offset: int = 0

    def cells(self) -> set[Cell]:
        """Every tile the layer occupies, the lenders' included."""
        return {(self.column + c, self.row + r) for c in range(self.width) for r in range(self.height)}

    @property
    def top(self) -> int:
        return self.row + self.height - 1

    @property
    def kernel_row(self) -> int:
        """The array row of the bottom cascade row."""
        return self.row + self.offset

    def cascade_row(self, row: int) -> int:
        """The array row of cascade row ``row``."""
        return self.row + self.offset + row * self.period

    def _east(self, snake: bool) -> bool:
        return not snake or self.kernel_row % 2 == 0

    def in_tile(self, snake: bool = False) -> Cell:
        """Where the layer's input enters: cascade position 0 of its bottom cascade row."""
        return (self.column if self._east(snake) else self.column + self.width - 1), self.kernel_row

    def out_tile(self, snake: bool = False) -> Cell:
        """Where the layer's output leaves: the last cascade position of its bottom row."""
        return (self.column + self.width - 1 if self._east(snake) else self.column), self.kernel_row

    def lender_cells(self) -> set[Cell]:
        """The tiles that lend their data memory (no kernel)."""
        kernels = {self.cascade_row(r) for r in range(self.height // self.period)}
        return {(c, r) for c, r in self.cells() if r not in kernels}


@dataclass(frozen=True)
class Weights:
    """The cost's weights and start position (``None``: the first layer may go anywhere free)."""

    lam: float = DEFAULT_LAMBDA
    mu: float = DEFAULT_MU
    start: Cell | None = (0, 0)

    def to_json(self) -> dict:
        return {"lambda": self.lam, "mu": self.mu, "start": list(self.start) if self.start is not None else None}

    @staticmethod
    def from_json(d: dict | None) -> Weights:
        if not d:
            return Weights()
        start = d.get("start", [0, 0])
        return Weights(d.get("lambda", DEFAULT_LAMBDA), d.get("mu", DEFAULT_MU), tuple(start) if start is not None else None)


@dataclass(frozen=True)
class Block:
    """A rectangle to place: the pure input of :func:`pack` (no model needed)."""

    name: str
    width: int
    height: int
    fixed: Cell | None = None
    period: int = 1  # see Rect
    offset: int = 0

    def rect(self, column: int, row: int) -> Rect:
        return Rect(self.name, column, row, self.width, self.height, self.period, self.offset)


@dataclass(frozen=True)
class Grid:
    columns: int
    rows: int
    snake: bool = False  # AIE1: the cascade runs west on odd rows
    keep_out: frozenset[Cell] = frozenset()


@dataclass(frozen=True)
class Packing:
    rects: tuple[Rect, ...]
    cost: float
    method: str
    optimal: bool  # bnb only: the search finished within its budget, so ``cost`` is the minimum
    nodes: int = 0  # bnb node expansions


@dataclass(frozen=True)
class Placement:
    rects: tuple[Rect, ...]
    columns: int
    rows: int
    cost: float | None = None
    method: str = "first-fit"
    optimal: bool = False
    weights: Weights = field(default_factory=Weights)
    snake: bool = False
    keep_out: tuple[Cell, ...] = ()
    # (column, row) offset of each copy of the whole design; replica 0 is ``rects`` itself.
    replicas: tuple[Cell, ...] = ((0, 0),)

    def rect(self, layer: str) -> Rect:
        return self._by_layer[layer]

    @cached_property
    def _by_layer(self) -> dict[str, Rect]:
        """The rectangle of each layer (the first of a name), built once: a lowering asks per tile."""
        out: dict[str, Rect] = {}
        for r in self.rects:
            out.setdefault(r.layer, r)
        return out

    def __getstate__(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k != "_by_layer"}

    def replica_rects(self, k: int) -> tuple[Rect, ...]:
        dc, dr = self.replicas[k]
        return tuple(replace(r, column=r.column + dc, row=r.row + dr) for r in self.rects)

    def tile(self, layer: str, row: int, pos: int, cascade_east: bool = True, replica: int = 0) -> tuple[int, int]:
        """(column, row) of cascade row ``row``, cascade position ``pos`` of a layer.

        AIE1's cascade runs east on even array rows and west on odd ones (it snakes through the
        array, AM009); AIE-ML's runs east on every row.  A cascade row is laid out accordingly.
        Replicas are offset by an even number of rows on AIE1, so their cascades run the same way.
        """
        r = self.rect(layer)
        dc, dr = self.replicas[replica]
        array_row = r.cascade_row(row)
        east = cascade_east or array_row % 2 == 0
        col = r.column + pos if east else r.column + r.width - 1 - pos
        return col + dc, array_row + dr

    def to_json(self) -> dict:
        return {
            "grid": [self.columns, self.rows],
            "layers": {r.layer: {"column": r.column, "row": r.row, "width": r.width, "height": r.height}
                       | ({"period": r.period, "offset": r.offset} if r.period != 1 else {}) for r in self.rects},
            "method": self.method,
            "cost": self.cost,
            "optimal": self.optimal,
            "weights": self.weights.to_json(),
            "keep_out": [list(c) for c in self.keep_out],
            "replicas": [list(c) for c in self.replicas],
        }

    @staticmethod
    def from_json(
        d: dict, graph: Graph, snake: bool, edges: Callable[[], Iterable[tuple[str, str]]] | None = None
    ) -> Placement:
        """Inverse of :meth:`to_json`.  Files from before branch and bound have no method, cost or
        weights: they were placed first-fit, and their cost is recomputed with the default weights
        over the kind's own placement edges: ``edges()`` (named producer -> consumer pairs, e.g.
        the DAG's problem edges, ``dag/api.dag_problem``), by default the chain's layer edges of
        ``graph`` (``passes/place.layer_edges``)."""
        rects = tuple(Rect(name, v["column"], v["row"], v["width"], v["height"], v.get("period", 1), v.get("offset", 0))
                      for name, v in d["layers"].items())
        p = Placement(
            rects,
            d["grid"][0],
            d["grid"][1],
            d.get("cost"),
            d.get("method", "first-fit"),
            bool(d.get("optimal", False)),
            Weights.from_json(d.get("weights")),
            snake,
            tuple((int(c), int(r)) for c, r in d.get("keep_out", ())),
            tuple((int(c), int(r)) for c, r in d.get("replicas", ((0, 0),))),
        )
        if p.cost is not None:
            return p
        if edges is None:
            from ..passes.place import layer_edges  # the chain's edges, for saves from before B&B

            return replace(p, cost=named_cost(p, layer_edges(graph)))
        return replace(p, cost=named_cost(p, edges()))


# ---------------------------------------------------------------------------------------- cost


def edge_cost(producer: Rect, consumer: Rect, snake: bool, lam: float) -> float:
    (co, ro), (ci, ri) = producer.out_tile(snake), consumer.in_tile(snake)
    return abs(co - ci) + lam * abs(ro - ri)


def rects_cost(
    rects: Sequence[Rect],
    edges: Iterable[tuple[int, int]],
    snake: bool,
    weights: Weights,
    edge_weights: Sequence[float] | None = None,
) -> float:
    """J of ``rects`` (edges index into ``rects``; ``edge_weights``: each edge's factor, default 1),
    summed in a fixed order."""
    edges = list(edges)
    has_producer = {q for _, q in edges}
    total = 0.0
    for i, r in enumerate(rects):
        total += _start_cost(r, snake, weights, i in has_producer) + weights.mu * r.top
    for i, (p, q) in enumerate(edges):
        total += (1.0 if edge_weights is None else edge_weights[i]) * edge_cost(rects[p], rects[q], snake, weights.lam)
    return total


def named_cost(
    placement: Placement, pairs: Iterable[tuple[str, str] | tuple[str, str, float]], weights: Weights | None = None
) -> float:
    """J of ``placement`` over named producer -> consumer ``pairs`` (optionally with the edge's
    factor third, ``Problem.named_pairs``; pairs naming a layer the placement lacks are skipped),
    with ``weights`` or the ones it was placed with."""
    index = {r.layer: i for i, r in enumerate(placement.rects)}
    known = [(index[e[0]], index[e[1]], e[2] if len(e) > 2 else 1.0) for e in pairs if e[0] in index and e[1] in index]
    return rects_cost(placement.rects, [(p, q) for p, q, _ in known], placement.snake, weights or placement.weights,
                      [w for _, _, w in known])


def _start_cost(r: Rect, snake: bool, weights: Weights, has_producer: bool) -> float:
    if has_producer or weights.start is None:
        return 0.0
    c, rr = r.in_tile(snake)
    return abs(weights.start[0] - c) + weights.lam * abs(weights.start[1] - rr)


# ---------------------------------------------------------------------------------------- legality


def _validate(blocks: Sequence[Block], grid: Grid) -> None:
    """Fixed rectangles must be in bounds, off keep-out tiles and apart; every block must fit."""
    for c, r in grid.keep_out:
        if not (0 <= c < grid.columns and 0 <= r < grid.rows):
            raise ConfigError(f"keep-out tile ({c}, {r}) is outside the {grid.columns} x {grid.rows} array")
    taken: dict[Cell, str] = {}
    for b in blocks:
        if b.width > grid.columns or b.height > grid.rows:
            raise PlanError(
                f"its {b.height} x {b.width} rectangle (cas_num x cas_len) is larger than the "
                f"{grid.columns} x {grid.rows} array",
                layer=b.name,
                hint="reduce its parallelism (cas_len / cas_num)",
            )
        if b.fixed is None:
            continue
        r = b.rect(*b.fixed)
        if r.column < 0 or r.row < 0 or r.column + r.width > grid.columns or r.row + r.height > grid.rows:
            raise ConfigError(
                f"placement ({r.column}, {r.row}) puts the {r.height} x {r.width} layer outside the "
                f"{grid.columns} x {grid.rows} array",
                layer=b.name,
                hint=f"columns 0..{grid.columns - r.width}, rows 0..{grid.rows - r.height} fit it",
            )
        if r.cells() & grid.keep_out:
            raise ConfigError(f"placement ({r.column}, {r.row}) covers a keep-out tile", layer=b.name)
        clash = sorted({taken[c] for c in r.cells() if c in taken})
        if clash:
            raise ConfigError(f"placement ({r.column}, {r.row}) overlaps fixed layer '{clash[0]}'", layer=b.name)
        taken.update(dict.fromkeys(r.cells(), b.name))
    area = sum(b.width * b.height for b in blocks)
    free = grid.columns * grid.rows - len(grid.keep_out)
    if area > free:
        raise PlanError(
            f"the layers need {area} tiles; the {grid.columns} x {grid.rows} array has {free} free",
            layer=blocks[-1].name,
            hint="reduce parallelism of this or other layers, or the batch",
        )


def check_placement(p: Placement, device: Device) -> None:
    """Assert legality: in bounds, no overlap, off keep-out tiles (used by tests and before emission)."""
    seen: set[tuple[int, int]] = set(p.keep_out)
    for r in (r for k in range(len(p.replicas)) for r in p.replica_rects(k)):
        cells = r.cells()
        for c, rr in cells:
            if not (0 <= c < device.columns and 0 <= rr < device.rows):
                raise PlanError(f"tile ({c}, {rr}) is outside the array", layer=r.layer)
        if cells & seen:
            raise PlanError("overlaps another layer or a keep-out tile", layer=r.layer)
        seen |= cells


# ---------------------------------------------------------------------------------------- greedy


class _Occupancy:
    """Occupied tiles as a boolean grid [row, column]; fit tests by slicing."""

    def __init__(self, grid: Grid):
        self.grid = grid
        self.occ = np.zeros((grid.rows, grid.columns), dtype=bool)
        for c, r in grid.keep_out:
            self.occ[r, c] = True

    def fits(self, c: int, r: int, w: int, h: int) -> bool:
        g = self.grid
        return 0 <= c and 0 <= r and c + w <= g.columns and r + h <= g.rows and not self.occ[r : r + h, c : c + w].any()

    def take(self, rect: Rect) -> None:
        self.occ[rect.row : rect.row + rect.height, rect.column : rect.column + rect.width] = True


def _greedy(blocks: Sequence[Block], grid: Grid, method: str, start: Cell | None) -> tuple[Rect, ...]:
    """A baseline placement; PlanError naming the first layer it finds no room for (a baseline
    gives up where another order might still fit).  Fixed layers are placed first and do not move
    the cursor the baselines advance from ``start``."""
    occ = _Occupancy(grid)
    fixed = [b.rect(*b.fixed) for b in blocks if b.fixed is not None]
    for r in fixed:
        occ.take(r)
    step = {"greedy-right": _next_right, "greedy-up": _next_up, "first-fit": _next_first_fit}[method]
    cursor = (start or (0, 0)) + (0,)  # (column, row, shelf / band end)
    out: dict[str, Rect] = {r.layer: r for r in fixed}
    for b in blocks:
        if b.fixed is not None:
            continue
        found = step(b, occ, cursor)
        if found is None:
            raise _no_room(b, grid, method)
        rect, cursor = found
        occ.take(rect)
        out[b.name] = rect
    return tuple(out[b.name] for b in blocks)


def _next_right(b: Block, occ: _Occupancy, cursor: tuple[int, int, int]):
    """Immediately right of the previous layer on its shelf; a full shelf wraps to column 0 above
    the shelf's tallest layer."""
    c, row, top = cursor
    while row + b.height <= occ.grid.rows:
        for cc in range(c, occ.grid.columns - b.width + 1):
            if occ.fits(cc, row, b.width, b.height):
                return b.rect(cc, row), (cc + b.width, row, max(top, row + b.height))
        c, row, top = 0, max(top, row + 1), max(top, row + 1)
    return None


def _next_up(b: Block, occ: _Occupancy, cursor: tuple[int, int, int]):
    """Immediately above the previous layer in its column band; a full band wraps to row 0 right
    of the band's widest layer."""
    col, r, right = cursor
    while col + b.width <= occ.grid.columns:
        for rr in range(r, occ.grid.rows - b.height + 1):
            if occ.fits(col, rr, b.width, b.height):
                return b.rect(col, rr), (col, rr + b.height, max(right, col + b.width))
        col, r, right = max(right, col + 1), 0, max(right, col + 1)
    return None


def _next_first_fit(b: Block, occ: _Occupancy, cursor: tuple[int, int, int]):
    """The first free position in reading order (rows from the bottom, columns from the left)."""
    for r in range(occ.grid.rows - b.height + 1):
        for c in range(occ.grid.columns - b.width + 1):
            if occ.fits(c, r, b.width, b.height):
                return b.rect(c, r), cursor
    return None


# ---------------------------------------------------------------------------------------- bnb


class _Budget(Exception):
    """The node budget ran out: the search returns its best so far, not proven optimal."""


@dataclass
class _Layer:
    """One block's static candidate positions (row-major order: the tie-break) and their ports."""

    width: int
    height: int
    col: np.ndarray
    row: np.ndarray
    cin: np.ndarray
    rin: np.ndarray
    cout: np.ndarray
    rout: np.ndarray
    base: np.ndarray  # mu * r_top (+ the start term of a source layer)
    preds: tuple[int, ...]
    pred_w: tuple[float, ...] = ()  # each pred edge's factor (Problem.edge_weights)


def _candidates(
    b: Block, grid: Grid, blocked: np.ndarray, preds: tuple[int, ...], w: Weights, pred_w: tuple[float, ...] = ()
) -> _Layer:
    if b.fixed is not None:
        cols, rows = np.array([b.fixed[0]]), np.array([b.fixed[1]])
    else:
        rr, cc = np.mgrid[0 : grid.rows - b.height + 1, 0 : grid.columns - b.width + 1]
        rows, cols = rr.ravel(), cc.ravel()
        s = _integral(blocked)
        ok = _window(s, cols, rows, b.width, b.height) == 0
        rows, cols = rows[ok], cols[ok]
    krows = rows + b.offset  # the bottom cascade row (above a south lender)
    east = np.ones(len(rows), dtype=bool) if not grid.snake else krows % 2 == 0
    cin = np.where(east, cols, cols + b.width - 1)
    cout = np.where(east, cols + b.width - 1, cols)
    base = w.mu * (rows + b.height - 1)
    if not preds and w.start is not None:
        base = base + np.abs(w.start[0] - cin) + w.lam * np.abs(w.start[1] - krows)
    return _Layer(b.width, b.height, cols, rows, cin, krows, cout, krows, base.astype(float), preds, pred_w)


def _integral(occ: np.ndarray) -> np.ndarray:
    s = np.zeros((occ.shape[0] + 1, occ.shape[1] + 1), dtype=np.int32)
    s[1:, 1:] = occ.cumsum(0).cumsum(1)
    return s


def _window(s: np.ndarray, cols: np.ndarray, rows: np.ndarray, w: int, h: int) -> np.ndarray:
    """Occupied tiles inside each w x h window at (cols, rows), from the integral image ``s``."""
    return s[rows + h, cols + w] - s[rows, cols + w] - s[rows + h, cols] + s[rows, cols]


class _Search:
    """Depth-first branch and bound in block order over each block's static candidates.

    Children are tried in increasing incremental cost (ties: lower row, then lower column); a child
    is pruned when its cost so far plus a lower bound of the rest cannot beat the incumbent."""

    def __init__(
        self,
        blocks: Sequence[Block],
        edges: Sequence[tuple[int, int]],
        grid: Grid,
        w: Weights,
        incumbent: tuple[tuple[Rect, ...], float] | None,
        node_budget: int,
        edge_weights: Sequence[float] | None = None,
    ):
        self.blocks, self.w, self.n = blocks, w, len(blocks)
        ew = [1.0] * len(edges) if edge_weights is None else list(edge_weights)
        preds = [tuple(p for p, q in edges if q == k) for k in range(self.n)]
        pred_w = [tuple(ew[i] for i, (_, q) in enumerate(edges) if q == k) for k in range(self.n)]
        blocked = np.zeros((grid.rows, grid.columns), dtype=bool)
        for c, r in grid.keep_out:
            blocked[r, c] = True
        self.occ = blocked.copy()
        for b in blocks:
            if b.fixed is not None:
                blocked[b.fixed[1] : b.fixed[1] + b.height, b.fixed[0] : b.fixed[0] + b.width] = True
        self.layers = [_candidates(b, grid, blocked, preds[k], w, pred_w[k]) for k, b in enumerate(blocks)]
        self.lb = _lower_bounds(self.layers, w)
        self.best_cost = incumbent[1] if incumbent else float("inf")
        self.best: list[int] | None = None
        self.chosen = [0] * self.n
        self.nodes, self.deepest = 0, 0
        self.node_budget = node_budget

    def _children(self, k: int, g: float):
        """(cost so far, candidate index) of the legal children, cheapest first, while promising."""
        L = self.layers[k]
        free = np.flatnonzero(_window(_integral(self.occ), L.col, L.row, L.width, L.height) == 0)
        inc = L.base[free]
        for p, f in zip(L.preds, L.pred_w, strict=True):
            j = self.chosen[p]
            P = self.layers[p]
            inc = inc + f * (np.abs(P.cout[j] - L.cin[free]) + self.w.lam * np.abs(P.rout[j] - L.rin[free]))
        rest = self.lb[k + 1]
        for o in np.argsort(inc, kind="stable").tolist():
            cost = g + float(inc[o])
            if cost + rest >= self.best_cost - _EPS:
                return
            yield cost, int(free[o])

    def search(self, k: int, g: float) -> None:
        """Expand depth ``k`` (cost so far ``g``); raises _Budget when the budget runs out."""
        if k == self.n:
            if g < self.best_cost - _EPS:
                self.best_cost, self.best = g, list(self.chosen)
            return
        self.nodes += 1
        self.deepest = max(self.deepest, k)
        if self.nodes > self.node_budget:
            raise _Budget
        L = self.layers[k]
        for cost, j in self._children(k, g):
            c, r = int(L.col[j]), int(L.row[j])
            self.occ[r : r + L.height, c : c + L.width] = True
            self.chosen[k] = j
            try:
                self.search(k + 1, cost)
            finally:
                self.occ[r : r + L.height, c : c + L.width] = False

    def rects(self) -> tuple[Rect, ...] | None:
        if self.best is None:
            return None
        return tuple(
            b.rect(int(L.col[j]), int(L.row[j])) for b, L, j in zip(self.blocks, self.layers, self.best, strict=True)
        )


def _bnb(
    blocks: Sequence[Block],
    edges: Sequence[tuple[int, int]],
    grid: Grid,
    w: Weights,
    incumbent: tuple[tuple[Rect, ...], float] | None,
    node_budget: int,
    edge_weights: Sequence[float] | None = None,
) -> tuple[tuple[Rect, ...] | None, float, bool, int, int]:
    """Returns (rects, cost, optimal, nodes, deepest depth); optimal when the search finished.
    Deterministic: bounded by ``node_budget`` expansions, never by time."""
    s = _Search(blocks, edges, grid, w, incumbent, node_budget, edge_weights)
    try:
        s.search(0, 0.0)
        optimal = True
    except _Budget:
        optimal = False
    rects = s.rects()
    if rects is None:
        return (incumbent[0] if incumbent else None), s.best_cost, optimal, s.nodes, s.deepest
    return rects, s.best_cost, optimal, s.nodes, s.deepest


def _lower_bounds(layers: Sequence[_Layer], w: Weights) -> list[float]:
    """lb[k] <= the least cost layers k.. can add: each edge joins two distinct tiles, so it costs at
    least min(1, lambda) times its factor; each layer's base term is at least its smallest over its
    legal positions."""
    edge_lb = min(1.0, w.lam)
    lb = [0.0] * (len(layers) + 1)
    for k in range(len(layers) - 1, -1, -1):
        L = layers[k]
        least = float(L.base.min()) if L.base.size else 0.0
        lb[k] = lb[k + 1] + least + edge_lb * sum(L.pred_w)
    return lb


# ---------------------------------------------------------------------------------------- entry


def pack(
    blocks: Sequence[Block],
    edges: Sequence[tuple[int, int]],
    grid: Grid,
    method: str = "bnb",
    weights: Weights | None = None,
    node_budget: int = NODE_BUDGET,
    edge_weights: Sequence[float] | None = None,
) -> Packing:
    """Place ``blocks`` (in topological order; ``edges`` are (producer, consumer) indices with
    producer < consumer, ``edge_weights`` each edge's factor in J, default 1) on ``grid`` with
    ``method``.  Raises PlanError when it finds no legal placement, ConfigError for impossible
    fixed coordinates."""
    weights = weights or Weights()
    if method not in METHODS:
        raise ConfigError(f"unknown placement method {method!r}; choose one of {', '.join(METHODS)}")
    for p, q in edges:
        if not 0 <= p < q < len(blocks):
            raise ValueError(f"edge ({p}, {q}) is not producer < consumer within {len(blocks)} blocks")
    if not blocks:
        return Packing((), 0.0, method, True)
    _validate(blocks, grid)
    if method != "bnb":
        rects = _greedy(blocks, grid, method, weights.start)
        return Packing(rects, rects_cost(rects, edges, grid.snake, weights, edge_weights), method, False)
    seeds = []
    for m in ("greedy-right", "greedy-up", "first-fit"):
        try:
            rects = _greedy(blocks, grid, m, weights.start)
        except PlanError:
            continue
        seeds.append((rects_cost(rects, edges, grid.snake, weights, edge_weights), METHODS.index(m), rects))
    incumbent = (min(seeds)[2], min(seeds)[0]) if seeds else None
    rects, cost, optimal, nodes, deepest = _bnb(blocks, edges, grid, weights, incumbent, node_budget, edge_weights)
    if rects is None:
        raise _no_room(blocks[deepest], grid, "bnb", searched=not optimal)
    return Packing(rects, rects_cost(rects, edges, grid.snake, weights, edge_weights), "bnb", optimal, nodes)


def _no_room(b: Block, grid: Grid, method: str, searched: bool = False) -> PlanError:
    """``searched``: bnb ran out of budget (a placement may exist); bnb without it proved none does."""
    where = f"on the {grid.columns} x {grid.rows} array"
    if method != "bnb":
        text, hint = f"method '{method}' finds no free {b.height} x {b.width} rectangle for it {where}", (
            "use method 'bnb', which searches every position, or reduce parallelism"
        )
    elif searched:
        text, hint = f"no legal placement was found {where} within the search budget", (
            "raise the node budget, or reduce parallelism of this or other layers"
        )
    else:
        text, hint = f"no legal placement of every layer exists {where}; this {b.height} x {b.width} layer is the first that never fits", (
            "reduce parallelism of this or other layers, or the batch"
        )
    return PlanError(text, layer=b.name, hint=hint)


def _baselines(blocks, edges, grid: Grid, weights: Weights, edge_weights: Sequence[float] | None = None) -> list[Packing]:
    out = []
    for m in ("greedy-right", "greedy-up", "first-fit"):
        try:
            out.append(pack(blocks, edges, grid, m, weights, edge_weights=edge_weights))
        except PlanError:
            continue
    return out


def replica_offsets(rects: Sequence[Rect], columns: int, rows: int, snake: bool, keep_out: Iterable[Cell] = ()) -> list[Cell]:
    """Offsets at which whole copies of ``rects`` fit the array beside the original: its bounding
    box (from column 0 / row 0, so the copies tile the array) repeated along the columns, then
    along the rows; on AIE1 the row step is even so every copy's cascades run the same way."""
    if not rects:
        return [(0, 0)]
    width = max(r.column + r.width for r in rects)
    height = max(r.row + r.height for r in rects)
    if snake and height % 2:
        height += 1
    blocked = set(keep_out)
    cells = set().union(*(r.cells() for r in rects)) if blocked else set()  # the copy's tiles at offset 0
    out = []
    for dr in range(0, rows - height + 1 if height <= rows else 1, height):
        for dc in range(0, columns - width + 1, width):
            if all(r.column + dc + r.width <= columns and r.row + dr + r.height <= rows for r in rects) and not any(
                (c + dc, r + dr) in blocked for c, r in cells
            ):
                out.append((dc, dr))
    return out or [(0, 0)]


def replicate(placement: Placement, k: int) -> Placement:
    """``placement`` with ``k`` copies of the design (see :func:`replica_offsets`)."""
    if k == 1:
        return placement
    offsets = replica_offsets(placement.rects, placement.columns, placement.rows, placement.snake, placement.keep_out)
    if len(offsets) < k:
        raise PlanError(
            f"only {len(offsets)} copies of the design fit the {placement.columns} x {placement.rows} array, not {k}",
            hint="use fewer replicas, or less parallelism per copy",
        )
    return replace(placement, replicas=tuple(offsets[:k]))




# ---------------------------------------------------------------------------------------- problem


@dataclass(frozen=True)
class Edge:
    """A producer -> consumer edge between kernel groups (indices into ``Problem.blocks``,
    producer < consumer), read off the mapped graph's links; ``words``: the elements its links
    deliver to the consumer's kernels per graph iteration (buffer ports; streams count 0)."""

    producer: int
    consumer: int
    words: int


@dataclass(frozen=True)
class Problem:
    """What :func:`solve` places: kernel groups, edges, the grid (keep-out tiles, the cascade's
    direction rule) and the cost's weights.  ``kernels[i]``: the tiles of group i's kernels
    relative to its rectangle's origin, as laid out with its bottom cascade row on an even array
    row (on a serpentine generation the cascade rows above alternate direction)."""

    blocks: tuple[Block, ...]
    edges: tuple[Edge, ...]
    grid: Grid
    weights: Weights = field(default_factory=Weights)
    kernels: tuple[tuple[Cell, ...], ...] = ()

    @property
    def pairs(self) -> list[tuple[int, int]]:
        return [(e.producer, e.consumer) for e in self.edges]

    @property
    def edge_weights(self) -> tuple[float, ...]:
        """Each edge's factor in J: the words it delivers per graph iteration over the mean of the
        edges that deliver any (so the factors of a design whose edges all move the same amount
        are all 1, the published J); an edge of streams only (0 words counted) keeps 1."""
        moved = [e.words for e in self.edges if e.words > 0]
        total = sum(moved)
        return tuple(e.words * len(moved) / total if e.words > 0 else 1.0 for e in self.edges)

    @property
    def named_pairs(self) -> list[tuple[str, str, float]]:
        """The edges as (producer, consumer) group names with their factor (a saved placement's
        cost recomputed, :func:`named_cost`)."""
        return [(self.blocks[e.producer].name, self.blocks[e.consumer].name, w)
                for e, w in zip(self.edges, self.edge_weights, strict=True)]


def staging(shapes: Sequence[Block], snake: bool) -> Placement:
    """A placement to lower an unplaced design at: the groups side by side on a virtual grid wide
    enough, each with its bottom cascade row on an even row, so the lowering's kernels give every
    group's relative layout (:func:`problem`).  Not a placement on the device."""
    rects, column = [], 0
    for b in shapes:
        rects.append(b.rect(column, b.offset % 2 if snake else 0))
        column += b.width
    rows = max((r.row + r.height for r in rects), default=1)
    return Placement(tuple(rects), max(column, 1), rows, snake=snake)


def problem(
    mg: MappedGraph,
    shapes: Sequence[Block],
    staged: Placement,
    device: Device,
    keep_out: Iterable[Cell] = (),
    weights: Weights | None = None,
    group_of: Mapping[str, str] | None = None,
    hops: Iterable[tuple[str, str]] = (),
) -> Problem:
    """The placement problem of a design lowered at ``staged`` (:func:`staging` of ``shapes``):
    group i is ``shapes[i]`` (its rectangle, kernel rows and fixed coordinates, which the kind's
    plan and config give) holding the kernels of replica 0 whose ``node`` is its name (or, with
    ``group_of``, kernel var -> group name, whose entry is its name: a group of several nodes'
    kernels, e.g. the recurrent Conv1d front end's column); the edges are the links between groups,
    followed through shared buffers (a memory-tile link, a relay shard) and through ``hops``
    (source -> destination owner pairs the array does not link: a PL kernel reading an output PLIO
    and writing an input PLIO, the thesis mapping's PL kernels between its layers); the grid is the
    device's with its generation's cascade rule (catalog data)."""
    index = {b.name: i for i, b in enumerate(shapes)}
    group: dict[str, int] = {}
    relative: list[list[Cell]] = [[] for _ in shapes]
    for k in mg.kernels:
        name = k.node if group_of is None else group_of.get(k.var)
        if k.replica != 0 or name not in index:
            continue
        i = index[name]
        r = staged.rect(name)
        dc, dr = k.tile[0] - r.column, k.tile[1] - r.row
        b = shapes[i]
        assert 0 <= dc < b.width and 0 <= dr < b.height and (dr - b.offset) % b.period == 0, (
            f"kernel {k.var} of {name} at {k.tile} is not on a kernel row of its {b.height} x {b.width} rectangle")
        group[k.var] = i
        relative[i].append((dc, dr))
    empty = [b.name for b, cells in zip(shapes, relative, strict=True) if not cells]
    assert not empty, f"groups without kernels: {empty}"
    feeders: dict[str, list[str]] = {}
    for link in mg.links:
        feeders.setdefault(link.dst.owner, []).append(link.src.owner)
    for src, dst in hops:
        feeders.setdefault(dst, []).append(src)
    sizes = {k.var: k.in_sizes for k in mg.kernels}

    def sources(owner: str, seen: frozenset[str] = frozenset()) -> set[int]:
        if owner in group:
            return {group[owner]}
        if owner in seen:
            return set()
        return {g for f in feeders.get(owner, ()) for g in sources(f, seen | {owner})}

    words: dict[tuple[int, int], int] = {}
    for link in mg.links:
        q = group.get(link.dst.owner)
        if q is None:
            continue
        for p in sorted(sources(link.src.owner)):
            if p != q:
                words[(p, q)] = words.get((p, q), 0) + (sizes[link.dst.owner][link.dst.index] or 0)
    edges = tuple(Edge(p, q, w) for (p, q), w in sorted(words.items()))
    keep = frozenset(keep_out)
    grid = Grid(device.columns, device.rows, snake=device.generation.cascade_serpentine, keep_out=keep)
    return Problem(tuple(shapes), edges, grid, weights or Weights(), tuple(tuple(sorted(c)) for c in relative))


def solve(
    prob: Problem,
    method: str = "bnb",
    replicas: int = 1,
    node_budget: int = NODE_BUDGET,
) -> Placement:
    """Place ``prob``'s groups with ``method``; with ``replicas`` > 1, copies of the whole design
    beside it (:func:`replicate`), falling back to the cheapest baseline whose bounding box leaves
    room for every copy when the cheapest wiring spreads one copy too wide."""
    blocks, edges, grid, weights, factors = prob.blocks, prob.pairs, prob.grid, prob.weights, prob.edge_weights
    keep = tuple(sorted(grid.keep_out))
    result = pack(blocks, edges, grid, method, weights, node_budget, factors)
    if replicas > 1 and len(replica_offsets(result.rects, grid.columns, grid.rows, grid.snake, keep)) < replicas:
        for r in sorted(_baselines(blocks, edges, grid, weights, factors), key=lambda r: r.cost):
            if len(replica_offsets(r.rects, grid.columns, grid.rows, grid.snake, keep)) >= replicas:
                result = r
                break
    placement = Placement(
        result.rects, grid.columns, grid.rows, result.cost, result.method, result.optimal, weights, grid.snake, keep
    )
    return replicate(placement, replicas)

