"""What a recurrent-layer mapping is, which mappings are legal on a device, and the default plan.

A GRU / LSTM step is two gate-stacked matrix-vector products, ``U h`` (recurrent: on the loop's
critical path) and ``W x`` (input projection: independent of ``h``, so its kernels run ahead on the
next ``x``), followed by the gate math that forms the new ``h``.  Each product is spread over tiles
one of two ways (``shared/spec/gru-on-aie.md``):

* ``row``: each kernel computes ``rows`` consecutive rows of one gate (the row reuse) over the
  whole vector, which a stream broadcasts to every kernel, and sends one 32-bit result per row on
  its packet stream;
* ``column``: a cascade chain of ``cas_len`` tiles splits the vector; each tile multiplies its
  column block for ``rows`` rows of one gate and passes partial sums east; the last tile sends the
  chain's ``rows`` results as one packet.

Aggregation gathers the packets: ``aie`` (pktmerges into the input ports of one aggregator kernel
that reorders by packet ID, applies the gate math and broadcasts ``h``) or ``hybrid`` (pktmerges of
``merge_fanin`` sources, one per AIE->PL stream, into a PL finite-state machine that applies LUT
activations and the update and writes the zero-padded ``h`` back through one PLIO).

Every limit checked here is a catalog fact (``devices.py``): compute tiles and columns, tile data
memory, stream ports per tile, PLIO streams per interface column and interface columns, and the
pktmerge fan-in.  When a mapping does not fit, :func:`plan_recurrent` grows the row reuse (input
side first, it is off the critical path) instead of failing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from ..devices import Device, get_device
from ..errors import ConfigError, PlanError
from ..ir import Node
from ..ops.dense import kind_of
from ..ops.recurrent import CANONICAL_GATES
from ..perf.movement import PLIO_BITS
from .costs import LUT_ENTRIES, element_bits, head_form_layers, lanes
from .front import FrontDims, front_from_json
from .front import kernel_bytes as front_kernel_bytes
from .vector import KERNELS

CELLS = tuple(CANONICAL_GATES)  # "gru", "lstm"
DISTRIBUTIONS = ("row", "column")  # how the spread mappings lay out one product (the search's space)
# The compact mapping (issue 22): the whole cell (W x, U h, gates, state update, and the dense head
# after the last layer) on one tile, h kept in its memory between steps; no packets, no PL.
COMPACT = "compact"
# The grid mapping (issue 22; recurrent/grid.py, templates/recurrent/rnn_grid.h): R chains of hidden
# units, each a cascade of C tiles over U h's column blocks (C - 1 partial-sum tiles, then the gate tile:
# its block, the finish, the gate math of its units) with a W x partner at its head; h exchanged every
# step as one packet per chain through one pktmerge broadcast to every chain tile and the head tile.
GRID = "grid"
AGGREGATIONS = ("aie", "hybrid")
RESULT_BYTES = 4  # every row result / bias / partial sum travels and is stored as one 32-bit word


@dataclass(frozen=True)
class RecurrentDims:
    """The layer as the mapping sees it: cell, sizes, steps per sample and operand kinds."""

    cell: str  # "gru" | "lstm"
    n_in: int
    n_h: int
    seq_len: int = 1
    pair: tuple[str, str] | None = None  # (activation, weight) kinds; None: the device's float
    # Output sizes of the dense head's layers, in order (the first reads h).  The head runs once
    # per sample in the aggregation epilogue; it adds to the sequence latency, not to a step.
    head: tuple[int, ...] = ()
    # How the (U h, W x) kernels multiply, row kernels and cascade chains alike (recurrent/vector.py):
    # "vector" (an aie::mac chain), "vector_round" (aie::mul, each product rounded per lane, int32
    # adds) or "scalar" (hls4ml's order on int64 codes).  fp32 is always vector.  From an IR node:
    # what the layer's types and weights allow bit-exactly; given dims without types assume the
    # vector form.
    kernels: tuple[str, str] = ("vector", "vector")
    # False only for designs saved before fixed-point cascade chains had vector forms: their
    # projects' chains are scalar (design.mapping_from_fields).
    chain_vector: bool = True
    # The 1-D convolutions before the layer (recurrent/front.py), in order; each is one kernel
    # in front of the W x kernels (a stack's first layer only).
    front: tuple[FrontDims, ...] = ()
    # The compact tile (rnn_compact.h): vector ops per lane group of the (U h, W x) finish (the
    # bias add, the wrap: recurrent/compact.finish_ops; given dims assume the bias add alone).
    finish_ops: tuple[int, int] = (1, 1)
    # The compact tile's gate math: (int32 lanes, vector ops and mode writes per lane group, table
    # reads per element, list-scheduled cycles of a full and of the last lane group, bytes of the
    # widened tables: 0 = clamped indices into rnn_cell.h's tables; absent in designs saved before
    # issue 22's widening: 0) of the vector form recurrent/compact.py generates where it is bit-exact;
    # () = rnn_cell.h's scalar step (float layers, types the vector form does not cover, given dims).
    gate_form: tuple[int, ...] = ()
    # The compact tile's dense head (the last layer's): (int32 lanes, then per head layer the vector
    # ops and mode writes of one output group's finish) of recurrent/compact.vector_head; () = the
    # scalar head loops (rnn_cell.h), also for given dims.
    head_form: tuple[int, ...] = ()
    # The grid mapping's gate tiles: (units per chain, list-scheduled cycles of their vector gate
    # math: compact.split_gate_cycles) for every distinct ceil(n_h / R), R = 2..n_h, where the layer
    # has a vector gate form (from an IR node); () = no grid (float layers, scalar gates, given dims).
    grid_gates: tuple[tuple[int, int], ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "front", front_from_json(self.front) if any(isinstance(f, dict) for f in self.front)
                           else tuple(self.front))
        if self.cell not in CELLS:
            raise ConfigError(f"recurrent cell {self.cell!r}: use one of {', '.join(CELLS)}")
        object.__setattr__(self, "kernels", tuple(self.kernels))
        object.__setattr__(self, "finish_ops", tuple(int(v) for v in self.finish_ops))
        object.__setattr__(self, "gate_form", tuple(int(v) for v in self.gate_form))
        object.__setattr__(self, "head_form", tuple(int(v) for v in self.head_form))
        object.__setattr__(self, "grid_gates", tuple((int(u), int(c)) for u, c in self.grid_gates))
        if len(self.kernels) != 2 or any(k not in KERNELS for k in self.kernels):
            raise ConfigError(f"recurrent kernels {self.kernels!r}: two of {', '.join(KERNELS)} (U h, W x)")
        for key in ("n_in", "n_h", "seq_len"):
            if int(getattr(self, key)) < 1:
                raise ConfigError(f"recurrent {key} must be at least 1, got {getattr(self, key)}")
        object.__setattr__(self, "head", tuple(int(m) for m in self.head))
        if any(m < 1 for m in self.head):
            raise ConfigError(f"every dense head layer needs at least 1 output, got {list(self.head)}")

    @property
    def gates(self) -> int:
        return len(CANONICAL_GATES[self.cell])

    @property
    def fixed(self) -> bool:
        return self.pair is not None and self.pair[0] not in ("fp32", "bf16")

    def kernel(self, product: str, distribution: str) -> str:
        """What the kernels of ``product`` ("u" or "w") spread ``distribution``-wise run: as
        ``kernels`` says, row kernels and cascade chains alike (the same exactness argument holds
        for a chain: recurrent/vector.py)."""
        if not self.fixed:
            return "vector"
        if distribution == "column" and not self.chain_vector:
            return "scalar"
        return self.kernels[0 if product == "u" else 1]


def default_pair(device: Device) -> tuple[str, str]:
    """fp32 where the vector unit has it (AIE1, as the published GRU design), else bf16."""
    return ("fp32", "fp32") if "fp32" in device.generation.float_types else ("bf16", "bf16")


def dims_of(node_or_dims: Node | RecurrentDims, device: Device) -> RecurrentDims:
    """Dims with a resolved operand pair, from an IR node (``gru`` / ``lstm``) or given dims."""
    if isinstance(node_or_dims, RecurrentDims):
        dims = node_or_dims
        layer = None
    else:
        node = node_or_dims
        layer = node.name
        if node.op not in CELLS:
            raise PlanError(f"op {node.op!r} is not a recurrent layer", layer=layer)
        if node.op == "gru" and not node.attrs.get("reset_after", True):
            raise PlanError(
                "a GRU that applies the reset gate before the recurrent product has a second "
                "matrix-vector product inside the step, which this mapping does not model",
                layer=layer,
                hint="use reset_after=True (PyTorch's form, ONNX linear_before_reset=1)",
            )
        pair = None
        t = node.types
        if t is not None:
            if t.is_float:
                pair = (kind_of(t.input), kind_of(t.weight))
            else:  # the wider of the two weight matrices sets the kernel's weight kind
                wbits = max(t.weight.container_bits, t.recurrent_weight.container_bits)
                pair = (kind_of(t.input), f"i{wbits}")
        a = node.attrs
        dims = RecurrentDims(node.op, int(a["input_size"]), int(a["hidden_size"]), int(a["seq_len"]), pair)
    pair = dims.pair or default_pair(device)
    if pair not in device.generation.macs_per_cycle:
        raise PlanError(
            f"{pair[0]} x {pair[1]} has no MAC rate on {device.board} ({device.generation.name})",
            layer=layer,
            hint=f"use {' or '.join('x'.join(p) for p in device.generation.macs_per_cycle)}",
        )
    if layer is not None and node_or_dims.types is not None:
        from .compact import VectorGates, finish_ops, vector_gates
        from .vector import kernel_kinds

        kinds = kernel_kinds(node_or_dims, device, pair)
        vg = vector_gates(node_or_dims, device, "rnn")
        form = vg.form if isinstance(vg, VectorGates) else ()
        dims = replace(dims, kernels=kinds, finish_ops=finish_ops(node_or_dims, kinds), gate_form=form, pair=pair)
        dims = fit_gate_form(node_or_dims, dims, device)
        return replace(dims, grid_gates=grid_gate_cycles(node_or_dims, dims, device))
    return replace(dims, pair=pair)


@dataclass(frozen=True)
class MatvecMapping:
    """How one gate-stacked product (gates x n_h rows over k columns) is spread over tiles."""

    distribution: str  # "row" | "column"
    rows: int  # rows per kernel (row: the row reuse) or per cascade chain (column), within a gate
    cas_len: int = 1  # column: tiles per chain (column blocks of the vector); row: 1

    def sources(self, dims: RecurrentDims) -> int:
        """Packet sources: kernels (row) or chains (column)."""
        return dims.gates * math.ceil(dims.n_h / self.rows)

    def tiles(self, dims: RecurrentDims) -> int:
        return self.sources(dims) * self.cas_len

    def packets(self) -> tuple[int, int]:
        """(packets per source per step, 32-bit words per packet)."""
        return (self.rows, 1) if self.distribution == "row" else (1, self.rows)

    def chain_rows(self, device: Device) -> int:
        """Array rows one cascade chain occupies: a chain longer than the array is wide snakes
        back on the next row (as the Dense placement does)."""
        return math.ceil(self.cas_len / device.columns)

    def block_columns(self, dims: RecurrentDims, device: Device) -> int:
        """Columns of its placement block: kernels column by column, or chains (cascades along
        a row, ``cas_len`` wide) stacked ``device.rows`` high."""
        if self.distribution == "row":
            return math.ceil(self.tiles(dims) / device.rows)
        stacked = math.ceil(self.sources(dims) * self.chain_rows(device) / device.rows)
        return min(self.cas_len, device.columns) * stacked

    def block_rows(self, dims: RecurrentDims, device: Device) -> int:
        if self.distribution == "column":
            return min(device.rows, self.sources(dims) * self.chain_rows(device))
        return min(device.rows, self.tiles(dims))


@dataclass(frozen=True)
class RecurrentOptions:
    """What the user fixes; None lets :func:`choose_mapping` search it (``plan_recurrent`` uses
    the published design's choice: row-wise, hybrid, merges of one row block's gates)."""

    distribution: str | None = None  # U h (and W x unless input_distribution is given)
    input_distribution: str | None = None
    aggregation: str | None = None
    row_reuse: int = 1  # at least this many rows per U h kernel / chain (grows when needed)
    input_row_reuse: int = 1  # at least, for the W x kernels / chains
    merge_fanin: int | None = None  # hybrid: packet sources per merged stream; None: the gates
    streams_per_interface_tile: int | None = None  # AIE->PL; None: the catalog's per column
    plio_bits: int = PLIO_BITS  # width of the PLIOs of x, h and the hybrid result streams
    cas_len: int | None = None  # column-wise U h: exactly this many tiles per chain (None: searched)
    input_cas_len: int | None = None  # column-wise W x: the same
    # at most this many rows per U h / W x kernel or chain (None: no limit).  The config's
    # ``mapping: {row_reuse: R}`` fixes the reuse: minimum and maximum R (directives.py).
    row_reuse_max: int | None = None
    input_row_reuse_max: int | None = None
    chains: int | None = None  # distribution grid: R chains of hidden units (None: searched)
    columns: int | None = None  # distribution grid: C tiles per chain over U h's column blocks (None: searched)

    def __post_init__(self) -> None:
        for key, allowed in (("distribution", (*DISTRIBUTIONS, COMPACT, GRID)),
                             ("input_distribution", (*DISTRIBUTIONS, COMPACT, GRID)),
                             ("aggregation", AGGREGATIONS)):
            v = getattr(self, key)
            if v is not None and v not in allowed:
                raise ConfigError(f"recurrent {key} {v!r}: use one of {', '.join(allowed)}")
        for key in ("row_reuse", "input_row_reuse", "merge_fanin", "streams_per_interface_tile", "plio_bits", "cas_len",
                    "input_cas_len", "row_reuse_max", "input_row_reuse_max", "chains", "columns"):
            v = getattr(self, key)
            if v is not None and int(v) < 1:
                raise ConfigError(f"recurrent {key} must be a positive integer, got {v!r}")
        if self.plio_bits not in (32, 64, 128):
            raise ConfigError(f"plio_bits {self.plio_bits}: a PLIO is 32, 64 or 128 bits wide")
        for key in ("chains", "columns"):
            if getattr(self, key) is not None and self.distribution not in (None, GRID):
                raise ConfigError(f"recurrent {key} {getattr(self, key)}: a key of distribution grid, not "
                                  f"{self.distribution}", hint=f"remove {key}, or use distribution grid")


@dataclass(frozen=True)
class RecurrentMapping:
    """One mapping of a recurrent layer with every resource it uses: what the planner, the
    latency model and the emitter (``emit.py`` / ``project.py``) agree on."""

    dims: RecurrentDims
    device: str
    recurrent: MatvecMapping  # U h
    input: MatvecMapping  # W x
    aggregation: str  # "aie" | "hybrid"
    u_fanin: int  # hybrid: U sources per merged stream; aie: U sources per aggregator port
    w_fanin: int  # the same for W sources
    u_merges: int  # hybrid: merged AIE->PL streams of U results; aie: aggregator ports used
    w_merges: int  # hybrid: merged AIE->PL streams of W results; aie: 0 (W shares the ports)
    u_tiles: int
    w_tiles: int
    aggregator_tiles: int  # aie: the aggregator, and its output kernel where a core has one output stream port
    plio_in: int  # PL->AIE streams: x (and h, hybrid)
    plio_out: int  # AIE->PL streams: merged results (hybrid) or the layer's h output (aie)
    interface_tiles: int
    u_columns: int  # placement: U block, W block, then the aggregator's column if it needs one
    w_columns: int
    agg_columns: int
    u_rows: int
    w_rows: int
    plio_bits: int = PLIO_BITS
    notes: tuple[str, ...] = ()
    # grid: the list-scheduled gate math of a chain's units (compact.split_gate_cycles; 0: unknown,
    # given dims without a layer)
    gate_cycles: int = 0

    @property
    def front_tiles(self) -> int:
        """One tile per convolution of the front end (recurrent/front.py)."""
        return len(self.dims.front)

    @property
    def tiles(self) -> int:
        return self.front_tiles + self.u_tiles + self.w_tiles + self.aggregator_tiles

    @property
    def front_columns(self) -> int:
        """The front end's kernels stand in one column before the U h block."""
        return 1 if self.dims.front else 0

    @property
    def columns(self) -> int:
        """Width of the placement rectangle (its height is ``rows``)."""
        return self.front_columns + self.u_columns + self.w_columns + self.agg_columns

    @property
    def rows(self) -> int:
        return max(self.u_rows, self.w_rows, self.aggregator_tiles, self.front_tiles)

    @property
    def distribution(self) -> str:
        return self.recurrent.distribution

    @property
    def row_reuse(self) -> int:
        return self.recurrent.rows

    @property
    def input_row_reuse(self) -> int:
        return self.input.rows

    @property
    def merges(self) -> int:
        """pktmerge instances."""
        return self.u_merges + self.w_merges

    @property
    def merge_fanin(self) -> int:
        """The most packet streams any one pktmerge joins."""
        if self.aggregation == "aie":
            return self.u_fanin + self.w_fanin
        return max(self.u_fanin, self.w_fanin)

    @property
    def compact(self) -> bool:
        """The whole cell on one tile (``COMPACT``): no merges, no aggregation stage."""
        return self.aggregation == COMPACT

    @property
    def grid(self) -> bool:
        """The grid mapping (``GRID``): ``chains`` chains of ``chain_len`` tiles (``u_tiles`` in all), a W x
        partner per chain, the head tile."""
        return self.aggregation == GRID

    @property
    def chains(self) -> int:
        """Grid: chains of hidden units (one W x partner and one gate tile each)."""
        return self.w_tiles

    @property
    def chain_len(self) -> int:
        """Grid: tiles per chain over U h's column blocks (C; the last is the gate tile)."""
        return self.recurrent.cas_len

    def describe(self) -> str:
        def mv(m: MatvecMapping) -> str:
            return f"row x{m.rows}" if m.distribution == "row" else f"column {m.rows} rows x {m.cas_len} tiles"

        front = "".join(f"Conv1d {f.c_in}->{f.c_out} (k {f.kernel}), " for f in self.dims.front)
        if self.grid:
            c = self.chain_len
            return (f"{front}{self.dims.cell.upper()} {self.dims.n_in}->{self.dims.n_h}: grid, {self.chains} chains of "
                    f"{self.recurrent.rows} hidden units x {c} tile{'s' if c > 1 else ''}"
                    f"{f' ({math.ceil(self.dims.n_h / c)} columns of h each)' if c > 1 else ''} (W x partners ahead, h by "
                    f"one pktmerge), {self.tiles} tiles, "
                    f"{self.interface_tiles} interface tile{'s' if self.interface_tiles > 1 else ''}")
        if self.compact:
            return (f"{front}{self.dims.cell.upper()} {self.dims.n_in}->{self.dims.n_h}: compact, the whole cell "
                    f"(W x, U h, gates, state) on {self.u_tiles} tile{'s' if self.u_tiles > 1 else ''}, {self.tiles} tiles, "
                    f"{self.interface_tiles} interface tile{'s' if self.interface_tiles > 1 else ''}")
        return (
            f"{front}{self.dims.cell.upper()} {self.dims.n_in}->{self.dims.n_h}: U h {mv(self.recurrent)}, "
            f"W x {mv(self.input)}, {self.aggregation} aggregation, {self.tiles} tiles, "
            f"{self.merges} merges (fan-in <= {self.merge_fanin}), {self.interface_tiles} interface tiles"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "cell": self.dims.cell,
            "n_in": self.dims.n_in,
            "n_h": self.dims.n_h,
            "seq_len": self.dims.seq_len,
            "pair": list(self.dims.pair or ()),
            "head": list(self.dims.head),
            "front": [f.to_json() for f in self.dims.front],
            "device": self.device,
            "recurrent": vars(self.recurrent).copy(),
            "input": vars(self.input).copy(),
            "kernels": {"u": self.dims.kernel("u", self.recurrent.distribution),
                        "w": self.dims.kernel("w", self.input.distribution)},
            "aggregation": self.aggregation,
            "tiles": {"front": self.front_tiles, "u": self.u_tiles, "w": self.w_tiles, "aggregator": self.aggregator_tiles,
                      "total": self.tiles},
            "merges": self.merges,
            "merge_fanin": self.merge_fanin,
            "plio": {"in": self.plio_in, "out": self.plio_out, "bits": self.plio_bits},
            "interface_tiles": self.interface_tiles,
            "rectangle": {"columns": self.columns, "rows": self.rows},
            "notes": list(self.notes),
        }


# ----------------------------------------------------------------------------- memory per tile


def kernel_bytes(m: MatvecMapping, k: int, dims: RecurrentDims, device: Device, product: str | None = None) -> int:
    """Data memory of the busiest tile of a product: weights, 32-bit biases, the vector (or its
    slice) kept for reuse, stack and heap.  Scalar fixed-point kernels keep the vector as the
    32-bit words it arrives in (``product``: "u" / "w"; None: scalar if either product is)."""
    gen = device.generation
    xb, wb = (math.ceil(element_bits(p) / 8) for p in dims.pair)
    kinds = [dims.kernel(p, m.distribution) for p in ((product,) if product else ("u", "w"))]
    if "scalar" in kinds:
        xb = RESULT_BYTES
    lane = lanes(gen, dims.pair)
    if m.distribution == "row":
        k_pad = math.ceil(k / lane) * lane
        data = m.rows * k_pad * wb + m.rows * RESULT_BYTES + k_pad * xb
    else:  # rows are the vector lanes: padded to whole lane groups
        kc = math.ceil(k / m.cas_len)
        r_pad = math.ceil(m.rows / lane) * lane
        data = r_pad * kc * wb + r_pad * RESULT_BYTES + kc * xb
    return data + gen.stack_bytes + gen.heap_bytes


def aggregator_bytes(dims: RecurrentDims, device: Device) -> int:
    """The AIE aggregator: U results, W results of two steps (they run ahead), h (and the LSTM
    cell state) padded to the lanes, one LUT per activation function (32-bit entries)."""
    gen = device.generation
    rows = dims.gates * dims.n_h
    lane = lanes(gen, dims.pair)
    h_pad = math.ceil(dims.n_h / lane) * lane
    states = 2 if dims.cell == "lstm" else 1
    data = 3 * rows * RESULT_BYTES + states * h_pad * RESULT_BYTES + 2 * LUT_ENTRIES * RESULT_BYTES
    return data + gen.stack_bytes + gen.heap_bytes


def compact_bytes(dims: RecurrentDims, device: Device) -> int:
    """Data memory of the compact tile (``rnn_compact.h``): U and W weight columns (rows
    zero-padded to the lanes, in the products' weight type), the two biases and the two gate
    vectors (32-bit words), h and c, x and h in the MAC's lane type (at most 32 bits each), one
    table per activation function (hls4ml's 1,024 32-bit entries, as ``aggregator_bytes``; the
    vector gate math reads the same tables, or its widened tables: their bytes are gate_form[6]),
    the dense head's weights (32-bit)
    and biases (64-bit) with its largest intermediate vector (padded to the vector head's lanes),
    and the stack and heap."""
    gen = device.generation
    wb = RESULT_BYTES if dims.pair[1] in ("fp32", "bf16") else math.ceil(element_bits(dims.pair[1]) / 8)
    lane = lanes(gen, dims.pair)
    rows = math.ceil(dims.gates * dims.n_h / lane) * lane + 2 * lane  # + the gate math's last-group overhang
    weights = (dims.n_h + dims.n_in) * rows * wb
    words = 4 * rows + 4 * dims.n_h + dims.n_in + dims.n_h
    head = 0
    widths = (dims.n_h, *dims.head)
    n_layers = len(widths) - 1
    pad, _, dots = head_form_layers(dims.head_form, n_layers) if dims.head_form else (1, (), (0,) * n_layers)
    for k, m, dot in zip(widths[:-1], widths[1:], dots, strict=True):
        mp = math.ceil(m / pad) * pad  # the vector head's outputs padded to its lanes
        if dot:  # dot form: per output its inputs padded to the lanes, and a bias vector
            head += m * math.ceil(k / pad) * pad * RESULT_BYTES + m * pad * RESULT_BYTES + mp * RESULT_BYTES
        else:
            head += k * mp * RESULT_BYTES + mp * 8 + mp * RESULT_BYTES
    widened = dims.gate_form[6] if len(dims.gate_form) > 6 else 0
    return (weights + words * RESULT_BYTES + 2 * LUT_ENTRIES * RESULT_BYTES + widened + head + gen.stack_bytes
            + gen.heap_bytes)


def fit_gate_form(node: Node, dims: RecurrentDims, device: Device) -> RecurrentDims:
    """``dims`` with the compact tile's vector gate math reading widened tables where the tile
    has room for them (compact_bytes), else hls4ml's clamped index into rnn_cell.h's tables."""
    from .compact import VectorGates, vector_gates

    if len(dims.gate_form) > 6 and dims.gate_form[6] and compact_bytes(dims, device) > device.generation.data_memory_bytes:
        vg = vector_gates(node, device, "rnn", widen=False)
        return replace(dims, gate_form=vg.form if isinstance(vg, VectorGates) else ())
    return dims


def grid_gate_cycles(node: Node, dims: RecurrentDims, device: Device) -> tuple[tuple[int, int], ...]:
    """RecurrentDims.grid_gates of the layer ``node``: its vector gate math for every distinct chain
    size, list-scheduled (tables widened as the compact tile's gate form says)."""
    from .compact import split_gate_cycles

    if not dims.gate_form:
        return ()
    widen = len(dims.gate_form) > 6 and dims.gate_form[6] > 0
    out = []
    for units in sorted({math.ceil(dims.n_h / r) for r in range(2, dims.n_h + 1)}):
        c = split_gate_cycles(node, device, units, widen)
        if c is not None:
            out.append((units, c))
    return tuple(out)


def compact_conflicts(options: RecurrentOptions) -> list[str]:
    """The options a compact mapping cannot honour (it has no row kernels, chains, merges or PL
    aggregation), by name; empty when ``distribution: compact`` can map with them."""
    return _one_kind_conflicts(options, COMPACT, "the compact tile computes W x itself",
                               "the compact tile applies the gates itself")


def _one_kind_conflicts(options: RecurrentOptions, kind: str, input_why: str, aggregation_why: str = "") -> list[str]:
    """The spread mappings' options set in ``options``, by name: what a compact or grid mapping
    (``kind``, which has no row kernels, chains of columns, merges to size or PL aggregation)
    cannot honour.  ``input_why`` / ``aggregation_why``: why, for those two keys."""
    out = []
    if options.input_distribution not in (None, kind):
        out.append(f"input_distribution {options.input_distribution} ({input_why})")
    for key in ("aggregation", "cas_len", "input_cas_len", "merge_fanin", "streams_per_interface_tile", "row_reuse_max",
                "input_row_reuse_max"):
        if getattr(options, key) is not None:
            why = f" ({aggregation_why})" if key == "aggregation" and aggregation_why else ""
            out.append(f"{key} {getattr(options, key)}{why}")
    for key in ("row_reuse", "input_row_reuse"):
        if getattr(options, key) != 1:
            out.append(f"{key} {getattr(options, key)}")
    return out


def _name(dims: RecurrentDims) -> str:
    return f"{dims.cell.upper()} {dims.n_in}->{dims.n_h}"


def _refuse_conflicts(dims: RecurrentDims, kind: str, conflicts: list[str], hint: str) -> None:
    """``distribution: compact`` / ``grid`` (``kind``) asked with options it cannot honour: a
    PlanError naming them (``conflicts``)."""
    if conflicts:
        raise PlanError(f"distribution {kind} for {_name(dims)} cannot honour: {'; '.join(conflicts)}", hint=hint)


def _refuse_limits(mapping: RecurrentMapping, device: Device, hint: str) -> RecurrentMapping:
    """The compact / grid mapping the config asked for, or a PlanError naming the limits it exceeds."""
    bad = violations(mapping, device)
    if bad:
        raise PlanError(f"distribution {mapping.aggregation} does not map {_name(mapping.dims)} on {device.board}: "
                        f"{'; '.join(bad)}", hint=hint)
    return mapping


def _tile_limits(mapping: RecurrentMapping, device: Device, what: str) -> list[str]:
    """The limits a compact / grid mapping shares with every mapping: compute tiles, array columns,
    and no Conv1d front end before it (``what``: the layer's kind, as error text)."""
    out = []
    if mapping.tiles > device.compute_tiles:
        out.append(f"{mapping.tiles} tiles > {device.compute_tiles}")
    if mapping.columns > device.columns:
        out.append(f"{mapping.columns} columns > {device.columns}")
    if mapping.dims.front:
        out.append(f"a Conv1d front end before a {what} layer is not generated")
    return out


def build_compact(dims: RecurrentDims, device: Device, options: RecurrentOptions | None = None) -> RecurrentMapping:
    """The compact mapping of a layer: one tile holds the whole cell, x comes in through a PLIO (or
    the previous layer's stream), the output (the dense head's, or h) leaves through a PLIO."""
    options = options or RecurrentOptions()
    whole = MatvecMapping(COMPACT, dims.n_h, 1)
    return RecurrentMapping(
        dims=dims, device=device.key, recurrent=whole, input=whole, aggregation=COMPACT,
        u_fanin=0, w_fanin=0, u_merges=0, w_merges=0, u_tiles=1, w_tiles=0, aggregator_tiles=0,
        plio_in=1, plio_out=1, interface_tiles=1, u_columns=1, w_columns=0, agg_columns=0, u_rows=1, w_rows=0,
        plio_bits=options.plio_bits,
    )


def _compact_violations(mapping: RecurrentMapping, device: Device) -> list[str]:
    dims, gen = mapping.dims, device.generation
    out = _tile_limits(mapping, device, "compact")
    need = compact_bytes(dims, device)
    if need > gen.data_memory_bytes:
        out.append(f"the compact cell needs {need} B > {gen.data_memory_bytes} B of one tile's memory (a short cascade "
                   "of compact tiles is not generated)")
    for i, f in enumerate(dims.front):
        need = front_kernel_bytes(f)
        if need > gen.data_memory_bytes:
            out.append(f"front convolution {i} needs {need} B > {gen.data_memory_bytes} B of tile memory")
    return out


# ----------------------------------------------------------------------------- building and checking


def output_kernel(aggregation: str, device: Device) -> bool:
    """Whether an AIE-aggregated layer needs an output kernel beside its aggregator: where a core
    has one output stream port (catalog ``Generation.stream_out_ports``: AIE-ML / AIE-MLv2) the
    aggregator writes h every step on that one port, broadcast to the U kernels and to the output
    kernel, which applies ``emits`` and the dense head and writes the layer's output (the next
    layer's x, or the model's y); with two ports (AIE1) the aggregator writes both streams itself."""
    return aggregation == "aie" and device.generation.stream_out_ports < 2


def build_mapping(
    dims: RecurrentDims,
    device: Device,
    u: MatvecMapping,
    w: MatvecMapping,
    aggregation: str,
    options: RecurrentOptions,
    merge_fanin: int | None = None,
) -> RecurrentMapping:
    """Count every resource of one mapping (legal or not: see :func:`violations`)."""
    u_src, w_src = u.sources(dims), w.sources(dims)
    per_out = options.streams_per_interface_tile or device.plio_out_per_column
    if aggregation == "hybrid":
        m = merge_fanin or options.merge_fanin or dims.gates
        u_fanin, w_fanin = min(m, u_src), min(m, w_src)
        u_merges, w_merges = math.ceil(u_src / u_fanin), math.ceil(w_src / w_fanin)
        plio_in, plio_out, agg_tiles = 2, u_merges + w_merges, 0
    else:  # every source reaches one of the aggregator's input ports, spread evenly
        ports = min(device.generation.stream_in_ports, u_src + w_src)
        u_fanin, w_fanin = math.ceil(u_src / ports), math.ceil(w_src / ports)
        u_merges, w_merges = ports, 0
        plio_in, plio_out = 1, 1
        agg_tiles = 2 if output_kernel(aggregation, device) else 1  # the aggregator (+ its output kernel)
    u_cols, w_cols = u.block_columns(dims, device), w.block_columns(dims, device)
    free = u_cols * device.rows - u.tiles(dims)  # the aggregator (and output kernel) take free slots of the U block
    agg_cols = 1 if agg_tiles and free < agg_tiles else 0
    interface = max(math.ceil(plio_out / per_out), math.ceil(plio_in / device.plio_in_per_column))
    return RecurrentMapping(
        dims=dims,
        device=device.key,
        recurrent=u,
        input=w,
        aggregation=aggregation,
        u_fanin=u_fanin,
        w_fanin=w_fanin,
        u_merges=u_merges,
        w_merges=w_merges,
        u_tiles=u.tiles(dims),
        w_tiles=w.tiles(dims),
        aggregator_tiles=agg_tiles,
        plio_in=plio_in,
        plio_out=plio_out,
        interface_tiles=interface,
        u_columns=u_cols,
        w_columns=w_cols,
        agg_columns=agg_cols,
        u_rows=u.block_rows(dims, device),
        w_rows=w.block_rows(dims, device),
        plio_bits=options.plio_bits,
    )


def violations(mapping: RecurrentMapping, device: Device | str) -> list[str]:
    """Every catalog limit the mapping exceeds (empty: legal)."""
    device = get_device(device)
    if mapping.compact:
        return _compact_violations(mapping, device)
    if mapping.grid:
        return _grid_violations(mapping, device)
    gen = device.generation
    dims = mapping.dims
    out = []
    if mapping.tiles > device.compute_tiles:
        out.append(f"{mapping.tiles} tiles > {device.compute_tiles}")
    if mapping.columns > device.columns:
        out.append(f"{mapping.columns} columns > {device.columns}")
    for name, m, k in (("U h", mapping.recurrent, dims.n_h), ("W x", mapping.input, dims.n_in)):
        if m.distribution == "column" and m.cas_len > 1 and math.ceil(k / math.ceil(k / m.cas_len)) != m.cas_len:
            out.append(f"{name}: a chain of {m.cas_len} tiles leaves a tile without columns of {k}")
        need = kernel_bytes(m, k, dims, device, "u" if name == "U h" else "w")
        if need > gen.data_memory_bytes:
            out.append(f"{name} kernel needs {need} B > {gen.data_memory_bytes} B of tile memory")
    if mapping.aggregator_tiles:
        need = aggregator_bytes(dims, device)
        if need > gen.data_memory_bytes:
            out.append(f"aggregator needs {need} B > {gen.data_memory_bytes} B of tile memory")
        if mapping.u_merges > gen.stream_in_ports:
            out.append(f"aggregator reads {mapping.u_merges} streams > {gen.stream_in_ports} input ports")
    if mapping.front_tiles > device.rows:
        out.append(f"{mapping.front_tiles} convolutions in front > {device.rows} rows of one column")
    for i, f in enumerate(dims.front):
        need = front_kernel_bytes(f)
        if need > gen.data_memory_bytes:
            out.append(f"front convolution {i} needs {need} B > {gen.data_memory_bytes} B of tile memory")
    if mapping.merge_fanin > gen.pktmerge_max_inputs:
        out.append(f"a pktmerge of {mapping.merge_fanin} inputs > {gen.pktmerge_max_inputs}")
    if mapping.interface_tiles > device.plio_columns:
        out.append(f"{mapping.interface_tiles} interface tiles > {device.plio_columns} usable for PLIO")
    return out


# ----------------------------------------------------------------------------- enumeration


def reuse_candidates(n: int, minimum: int = 1) -> list[int]:
    """Row reuses from ``minimum`` up, ascending: ``minimum`` itself, then every larger one that
    gives a smaller kernel count (the smallest rows per kernel for each ``ceil(n / rows)``)."""
    start = min(max(1, minimum), n)
    values = {math.ceil(n / math.ceil(n / r)) for r in range(start, n + 1)}
    return sorted({start} | {r for r in values if math.ceil(n / r) < math.ceil(n / start)})


def matvec_options(dims: RecurrentDims, k: int, device: Device, distribution: str, minimum: int = 1,
                   cas_len: int | None = None, maximum: int | None = None, product: str | None = None) -> list[MatvecMapping]:
    """Spreads of one product whose busiest tile fits its memory, fewest rows first.  Column
    chains: for each row count the shortest chain that fits, and doublings of it (a chain
    longer than the array is wide snakes onto the next row); ``cas_len``: only that length;
    ``maximum``: no more rows than that per kernel / chain."""
    out = []
    for rows in reuse_candidates(dims.n_h, minimum):
        if maximum is not None and rows > max(maximum, min(minimum, dims.n_h)):
            break
        if distribution == "row":
            m = MatvecMapping("row", rows)
            if kernel_bytes(m, k, dims, device, product) <= device.generation.data_memory_bytes:
                out.append(m)
            continue
        lens = sorted({math.ceil(k / math.ceil(k / c)) for c in range(1, min(k, device.compute_tiles) + 1)})
        if cas_len is not None:
            lens = [cas_len] if cas_len in lens else []
        fitting = [c for c in lens
                   if kernel_bytes(MatvecMapping("column", rows, c), k, dims, device, product) <= device.generation.data_memory_bytes]
        if not fitting:
            continue
        last = 0
        for c in fitting:  # the shortest chain that fits, then each at least twice as long
            if not last or c >= 2 * last:
                last = c
                out.append(MatvecMapping("column", rows, c))
    return out


def merge_fanins(dims: RecurrentDims, device: Device, options: RecurrentOptions) -> list[int]:
    """Hybrid merge fan-ins to try: the option's, or one row block's gates and its doublings."""
    if options.merge_fanin:
        return [options.merge_fanin]
    out, m = [], dims.gates  # one row block's gates per merge, as published; then 2, 4, ... blocks
    while m <= device.generation.pktmerge_max_inputs:
        out.append(m)
        m *= 2
    return out


def search_space(dims: RecurrentDims, device: Device, options: RecurrentOptions):
    """(distribution, aggregation, merge fan-in, U h spreads, W x spreads) the options allow."""
    dists = [options.distribution] if options.distribution else list(DISTRIBUTIONS)
    aggs = [options.aggregation] if options.aggregation else list(AGGREGATIONS)
    for dist in dists:
        wdists = [options.input_distribution] if options.input_distribution else ([dist] if options.distribution else list(DISTRIBUTIONS))
        u_opts = matvec_options(dims, dims.n_h, device, dist, options.row_reuse, options.cas_len, options.row_reuse_max, "u")
        w_opts = [m for wd in wdists for m in matvec_options(dims, dims.n_in, device, wd, options.input_row_reuse,
                                                             options.input_cas_len, options.input_row_reuse_max, "w")]
        for agg in aggs:
            for m in merge_fanins(dims, device, options) if agg == "hybrid" else [None]:
                yield dist, agg, m, u_opts, w_opts


def candidate_mappings(dims: RecurrentDims, device: Device, options: RecurrentOptions):
    """Every mapping the options allow (legal or not), recurrent side in the outer loop."""
    for _, agg, m, u_opts, w_opts in search_space(dims, device, options):
        for u in u_opts:
            for w in w_opts:
                yield build_mapping(dims, device, u, w, agg, options, m)


def legal_mappings(node_or_dims: Node | RecurrentDims, device: Device | str, options: RecurrentOptions | None = None) -> list[RecurrentMapping]:
    """Every mapping the options allow that fits the device."""
    device = get_device(device)
    dims = dims_of(node_or_dims, device)
    options = options or RecurrentOptions()
    out = [] if options.distribution in (COMPACT, GRID) else [m for m in candidate_mappings(dims, device, options)
                                                      if not violations(m, device)]
    compact = compact_candidate(dims, device, options)
    return out + ([compact] if compact is not None else [])


def compact_candidate(dims: RecurrentDims, device: Device, options: RecurrentOptions) -> RecurrentMapping | None:
    """The compact mapping when the options leave it open (or ask for it) and it fits, else None."""
    if options.distribution not in (None, COMPACT) or compact_conflicts(options):
        return None
    mapping = build_compact(dims, device, options)
    return None if violations(mapping, device) else mapping


def plan_recurrent(node_or_dims: Node | RecurrentDims, device: Device | str, options: RecurrentOptions | None = None,
                   node: Node | None = None) -> RecurrentMapping:
    """The most parallel legal mapping for the options (default: the published design, row-wise
    with hybrid aggregation and one row block's gates per merge).

    Candidates are tried with the fewest U h rows per kernel first and, for each, the fewest W x
    rows: when resources run out, the input side's row reuse grows first (it is off the loop's
    critical path), then the recurrent side's.  Raises a PlanError, with the limits the candidate
    with the fewest tiles still exceeds, only when nothing fits."""
    device = get_device(device)
    dims = dims_of(node_or_dims, device)
    options = options or RecurrentOptions()
    if options.distribution == COMPACT:
        return plan_compact(dims, device, options)
    if options.distribution == GRID:
        return plan_grid(dims, device, options, node_or_dims if isinstance(node_or_dims, Node) else node)
    fixed = published_options(dims, options)
    space = [(agg, m, u, w) for _, agg, m, u_opts, w_opts in search_space(dims, device, fixed) for u in u_opts for w in w_opts]
    if not space:
        raise PlanError(
            f"no {fixed.distribution}-wise spread of {dims.cell.upper()} {dims.n_in}->{dims.n_h} fits a tile's "
            f"{device.generation.data_memory_bytes} B memory on {device.board}"
            + (f" with chains of exactly {options.cas_len} / {options.input_cas_len} tiles (a chain length that leaves a "
               "tile without columns is not a spread)" if options.cas_len or options.input_cas_len else "")
            + _fixed_reuse(options),
            hint="try the other distribution (column-wise chains split long vectors)"
            + (", or allow more rows per kernel (row_reuse)" if _fixed_reuse(options) else ""),
        )

    def build(c: tuple) -> RecurrentMapping:
        agg, m, u, w = c
        return build_mapping(dims, device, u, w, agg, fixed, m)

    first = violations(build(space[0]), device)
    limit = device.compute_tiles - (fixed.aggregation == "aie")
    for c in space:
        if c[2].tiles(dims) + c[3].tiles(dims) > limit:
            continue  # cannot fit: skip building it
        mapping = build(c)
        if not violations(mapping, device):
            notes = []
            if mapping.row_reuse > options.row_reuse or mapping.input_row_reuse > options.input_row_reuse:
                notes.append(
                    f"row reuse grown to U h {mapping.row_reuse}, W x {mapping.input_row_reuse} "
                    f"(asked {options.row_reuse}, {options.input_row_reuse}): " + "; ".join(first)
                )
            return replace(mapping, notes=tuple(notes))
    fewest = build(min(space, key=lambda c: c[2].tiles(dims) + c[3].tiles(dims)))
    raise PlanError(
        f"no {fixed.distribution}-wise {fixed.aggregation} mapping of {dims.cell.upper()} "
        f"{dims.n_in}->{dims.n_h} fits {device.board}{_fixed_reuse(options)}; the one with the fewest tiles: "
        + "; ".join(violations(fewest, device)),
        hint="try the other distribution (column-wise chains split long vectors) or aggregation"
        + (", or allow more rows per kernel (row_reuse)" if _fixed_reuse(options) else ""),
    )


def plan_compact(dims: RecurrentDims, device: Device, options: RecurrentOptions) -> RecurrentMapping:
    """``distribution: compact``: the compact mapping, or a PlanError naming what stops it."""
    _refuse_conflicts(dims, COMPACT, compact_conflicts(options), "remove those mapping keys, or use distribution row / column")
    return _refuse_limits(build_compact(dims, device, options), device,
                          "use distribution row or column (the spread mappings), or smaller layers")


def published_options(dims: RecurrentDims, options: RecurrentOptions) -> RecurrentOptions:
    """The options with what they leave open set to the published design's choices: row-wise,
    hybrid aggregation, one row block's gates per merge (only the row reuse stays free)."""
    return replace(
        options,
        distribution=options.distribution or "row",
        aggregation=options.aggregation or "hybrid",
        merge_fanin=options.merge_fanin or dims.gates,
    )


def _fixed_reuse(options: RecurrentOptions) -> str:
    """The reuse limits of the options, as error text ('' when none)."""
    parts = [f"{name} at most {v}" for name, v in (("U h rows per kernel", options.row_reuse_max),
                                                   ("W x rows per kernel", options.input_row_reuse_max)) if v]
    return f" with {' and '.join(parts)}" if parts else ""



# ----------------------------------------------------------------------------- the grid mapping


def grid_conflicts(options: RecurrentOptions) -> list[str]:
    """The options a grid mapping cannot honour, by name (it has no row kernels, chains of columns,
    PL aggregation or fan-in to set: its one merge joins the R chains)."""
    return _one_kind_conflicts(options, GRID, "the grid's W x partners are part of it")


def grid_units(n_h: int, chains: int) -> int:
    """Hidden units per chain (every chain's stride; the last chain's extra units are zero rows)."""
    return math.ceil(n_h / chains)


def build_grid(dims: RecurrentDims, device: Device, chains: int, options: RecurrentOptions | None = None,
               node: Node | None = None, columns: int = 1) -> RecurrentMapping:
    """The grid mapping with ``chains`` chains of ``columns`` tiles (C; as ``grid.slices`` leaves the
    column blocks): per chain a W x partner, C - 1 partial-sum tiles and the gate tile on one array row,
    west to east (the cascade), the head tile in the next column; chains as rows, ``device.rows`` per
    group of C + 1 columns."""
    options = options or RecurrentOptions()
    units = grid_units(dims.n_h, chains)
    r = math.ceil(dims.n_h / units)  # chains that hold units (slices drop empty ones)
    c = math.ceil(dims.n_h / math.ceil(dims.n_h / columns))  # column blocks that hold columns
    pairs = math.ceil(r / device.rows)
    from .grid import block_merges

    blocks = block_merges(dims.n_h, chains, columns)  # per-block merges + the head's (None: the one merge)
    gate_cycles = dict(dims.grid_gates).get(units, 0)
    if node is not None and dims.gate_form and not gate_cycles:
        from .compact import split_gate_cycles

        gate_cycles = split_gate_cycles(node, device, units, len(dims.gate_form) > 6 and dims.gate_form[6] > 0) or 0
    return RecurrentMapping(
        dims=dims, device=device.key, recurrent=MatvecMapping(GRID, units, c), input=MatvecMapping(GRID, units, 1),
        aggregation=GRID, u_fanin=r, w_fanin=0, u_merges=1 if blocks is None else len(blocks) + 1, w_merges=0, u_tiles=r * c, w_tiles=r, aggregator_tiles=1,
        plio_in=1, plio_out=1, interface_tiles=1, u_columns=pairs * c, w_columns=pairs, agg_columns=1,
        u_rows=min(r, device.rows), w_rows=min(r, device.rows), plio_bits=options.plio_bits, gate_cycles=gate_cycles,
    )


def grid_bytes(mapping: RecurrentMapping, device: Device) -> int:
    """Data memory of a gate tile (rnn_grid.h GridCell): U's weight columns of its column block (kc =
    ceil(n_h / C) columns) for its G u rows (padded to the lanes, weight type), the two gate vectors,
    the bias and the partial sums from the cascade (32-bit), h and c of its units, h of its block in
    lane type, the activation tables (two of hls4ml's 1,024 32-bit entries, + the widened tables where
    the gate math reads them: gate_form[6]), stack and heap.  The partner (W x only), the partial-sum
    tiles (no gate math) and the head tile (the compact tile's head) hold less."""
    dims, gen = mapping.dims, device.generation
    wb = math.ceil(element_bits(dims.pair[1]) / 8)
    lane = lanes(gen, dims.pair)
    rows = math.ceil(dims.gates * mapping.recurrent.rows / lane) * lane + 2 * lane
    widened = dims.gate_form[6] if len(dims.gate_form) > 6 else 0
    kc = math.ceil(dims.n_h / mapping.chain_len)
    words = (4 if mapping.chain_len > 1 else 3) * rows + 2 * (mapping.recurrent.rows + 2 * lane) + kc
    return kc * rows * wb + words * RESULT_BYTES + 2 * LUT_ENTRIES * RESULT_BYTES + widened + gen.stack_bytes + gen.heap_bytes


def _grid_violations(mapping: RecurrentMapping, device: Device) -> list[str]:
    dims, gen = mapping.dims, device.generation
    out = _tile_limits(mapping, device, "grid")
    if mapping.u_fanin > gen.pktmerge_max_inputs:
        out.append(f"{mapping.u_fanin} chains > {gen.pktmerge_max_inputs} inputs of the h pktmerge")
    if not dims.fixed:
        out.append("a float grid is not generated (its gate tiles run the compact tile's vector gate math, fixed point)")
    elif not dims.gate_form or not mapping.gate_cycles:
        out.append("the layer has no vector gate math (the grid's gate tiles run the compact tile's vector form only)")
    elif mapping.chain_len > 1 and dims.kernel("u", "compact") == "scalar":
        out.append(f"columns {mapping.chain_len} with a scalar U h product (hls4ml's order casts every partial sum, so "
                   "column blocks' sums added on the cascade are not its result; the grid splits vector products only)")
    need = grid_bytes(mapping, device)
    if need > gen.data_memory_bytes:
        out.append(f"a gate tile needs {need} B > {gen.data_memory_bytes} B of tile memory")
    return out


def grid_candidates(dims: RecurrentDims, device: Device, options: RecurrentOptions,
                    node: Node | None = None) -> list[RecurrentMapping]:
    """The legal grid mappings the options leave open (``chains`` / ``columns`` given: those), one per
    distinct (chains, tiles per chain)."""
    if options.distribution not in (None, GRID) or grid_conflicts(options):
        return []
    counts = [options.chains] if options.chains else range(2, dims.n_h + 1)
    lengths = [options.columns] if options.columns else range(1, dims.n_h + 1)
    seen, out = set(), []
    for r in counts:
        for c in lengths:
            if r > dims.n_h or c > dims.n_h:
                continue
            m = build_grid(dims, device, r, options, node, c)
            key = (m.chains, m.chain_len)
            if key in seen or m.chains < 2:
                continue
            seen.add(key)
            if not violations(m, device):
                out.append(m)
    return out


def plan_grid(dims: RecurrentDims, device: Device, options: RecurrentOptions, node: Node | None = None) -> RecurrentMapping:
    """``distribution: grid`` (``chains: R``, ``columns: C``, default 1): the grid mapping, or a PlanError
    naming what stops it."""
    name = _name(dims)
    _refuse_conflicts(dims, GRID, grid_conflicts(options),
                      "remove those mapping keys (a grid takes chains and plio_bits), or use distribution row / column")
    if options.chains is None:
        raise PlanError(f"distribution grid for {name}: give chains (2..{dims.n_h} chains of hidden units)",
                        hint="add chains: R to the layer's mapping, or use target: latency to search it")
    if not 2 <= options.chains <= dims.n_h:
        raise PlanError(f"distribution grid for {name}: chains {options.chains} is not in 2..{dims.n_h} (the hidden units)",
                        hint=f"use chains 2..{dims.n_h} (1 chain is the compact tile: distribution compact)")
    columns = options.columns or 1
    if columns > dims.n_h:
        raise PlanError(f"distribution grid for {name}: columns {columns} is not in 1..{dims.n_h} (U h's columns: the "
                        "hidden units)", hint=f"use columns 1..{dims.n_h} tiles per chain")
    return _refuse_limits(build_grid(dims, device, options.chains, options, node, columns), device,
                          "use distribution compact, row or column, or fewer chains or columns")
