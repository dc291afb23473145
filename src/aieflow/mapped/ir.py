"""The mapped-graph IR: below the quantised graph, what runs where and how data moves.

Migration steps 1 and 3 (docs/ARCHITECTURE.md): the Dense chain, the DAG path and both CNN
mappings (stream, thesis) lower their plans and placements into a :class:`MappedGraph`, and one
renderer (:mod:`aieflow.mapped.adf`, ``templates/mapped/graph.h.j2``) writes the ADF graph of all of
them from it.  Placement, the transport checks and the performance model still read each path's own
plan; they move onto this graph in the next steps, and the recurrent and streamed paths lower into
it after them.

Everything here is frozen; names are identifiers made by :func:`aieflow.names.c_ident` (a model's
names never reach this graph raw).

Cost annotations (the ``estimate`` pass, :mod:`aieflow.mapped.estimate`): a lowering may give each
kernel, each shared buffer's write and read side, each PLIO and each link that moves data through
a tile DMA a :class:`Cost`, computed by the variant's own cost code (``perf/kernel.py``,
``perf/movement.py``, ``dag/perf.py``).  Entities carrying a cost of one name form one pipeline
stage (a Dense layer's tiles, a link's shards); the stage graph is built from these costs and the
links alone.
"""

from __future__ import annotations

from dataclasses import KW_ONLY, dataclass

from .tiling import NdTiling

LINK_KINDS = ("cascade", "buffer", "memtile", "plio", "stream")
"""How a link moves data: a cascade (accumulator to the next tile), a buffer (tile to tile, or tile
to a memory tile's port: ``adf::connect`` of two buffer ports), a memory-tile shared buffer port
(its tiling says which elements), a PLIO (to or from the PL / the data file), a stream (kernel stream
ports, ``readincr`` / ``writeincr``: the CNN rows mapping's rows)."""


@dataclass(frozen=True)
class Cost:
    """One pipeline stage's cost, per graph iteration (batch): what occupies the resource, for how
    long, and how much later its output end starts (switch hops, a cascade row's lag).  Every
    entity carrying a cost of the same ``name`` belongs to that one stage (they carry equal costs).
    ``tiles``, ``cycles``, ``macs`` and ``peak_macs_per_cycle`` describe a kernel stage (its
    compute tiles, busy AIE-clock cycles, real MACs per batch, peak MACs per cycle per tile);
    transfers give their busy cycles only."""

    name: str
    kind: str  # "plio", "kernel", "memtile", "dma"
    bound: str  # "compute", "memory", "stream", "plio"
    occupancy_ns: float
    delay_ns: float = 0.0
    tiles: int = 0
    cycles: float = 0.0
    macs: int = 0
    peak_macs_per_cycle: float = 0.0


@dataclass(frozen=True)
class Port:
    """Input or output ``index`` of a kernel, shared buffer or PLIO."""

    owner: str
    side: str  # "in" | "out"
    index: int

    def ref(self) -> str:
        return f"{self.owner}.{self.side}[{self.index}]"


@dataclass(frozen=True)
class Kernel:
    """One AI Engine kernel instance: the IR node it computes (a part of), its C++ class and
    constructor arguments (resident parameters), its source file, its tile, and the elements each
    buffer port moves per call (``None``: a cascade or stream port, no buffer)."""

    var: str
    node: str
    cls: str
    args: tuple[str, ...]
    source: str
    tile: tuple[int, int]
    in_sizes: tuple[int | None, ...]
    out_sizes: tuple[int | None, ...]
    replica: int = 0
    # Buffer location constraints: (side, port index, ((column, row, byte offset) of the ping,
    # (...) of the pong)), the tile being whichever tile's data memory holds the buffer (its own or
    # a neighbour's, ops/dense.py memory_homes).
    locations: tuple[tuple[str, int, tuple[tuple[int, int, int], ...]], ...] = ()
    _: KW_ONLY  # the fields below by keyword only (added by later steps; no positional mix-ups)
    # Buffer ports with one buffer instead of ping-pong (``adf::single_buffer``, UG1079): (side, port
    # index) each (the thesis CNN mapping's windows to and from the PL).
    single: tuple[tuple[str, int], ...] = ()
    cost: Cost | None = None  # the kernel group's stage (every tile of a Dense layer carries it)


@dataclass(frozen=True)
class SharedBuffer:
    """A memory-tile shared buffer (AIE-ML): element type, dimensions, one tiling per write and per
    read port, and a comment (already escaped text)."""

    var: str
    ctype: str
    dims: tuple[int, ...]
    writes: tuple[NdTiling, ...]
    reads: tuple[NdTiling, ...]
    comment: str
    # The stage that fills the buffer (its write ports) and the one that drains it (its read ports);
    # no read cost: whatever reads it (an output PLIO, another shard) drains it in its own stage.
    write_cost: Cost | None = None
    read_cost: Cost | None = None


@dataclass(frozen=True)
class Plio:
    var: str
    direction: str  # "in" | "out"
    bits: int
    file: str  # the data file the simulators read or write
    _: KW_ONLY
    freq_mhz: float = 0.0  # the PL-side clock of the PLIO (the 4th argument of ``create``); 0: the default
    cost: Cost | None = None  # its transfer stage (the PLIOs of one layer share one)


@dataclass(frozen=True)
class Link:
    kind: str  # one of LINK_KINDS
    src: Port
    dst: Port
    cost: Cost | None = None  # a transfer on the link itself (an AIE1 tile DMA between non-neighbours)
    fifo_depth: int = 0  # a stream's FIFO (``adf::fifo_depth``, 32-bit words, UG1079 DMA FIFO); 0: the default


@dataclass(frozen=True)
class MappedGraph:
    kernels: tuple[Kernel, ...]
    buffers: tuple[SharedBuffer, ...]
    plios: tuple[Plio, ...]
    links: tuple[Link, ...]
    headers: tuple[str, ...] = ()  # parameter headers the graph includes (relative to src/)

    def check(self) -> None:
        """Structural invariants (an ``AssertionError`` is an aieflow bug): known link kinds and
        endpoints, every port within its owner's ports, no input port fed twice, every kernel and
        shared-buffer input fed, tiles distinct."""
        ins: dict[str, int] = {}
        outs: dict[str, int] = {}
        for k in self.kernels:
            ins[k.var], outs[k.var] = len(k.in_sizes), len(k.out_sizes)
        for b in self.buffers:
            ins[b.var], outs[b.var] = len(b.writes), len(b.reads)
        for p in self.plios:
            ins[p.var], outs[p.var] = (0, 1) if p.direction == "in" else (1, 0)
        fed: set[tuple[str, int]] = set()
        for link in self.links:
            assert link.kind in LINK_KINDS, link
            assert link.src.side == "out" and link.dst.side == "in", link
            assert 0 <= link.src.index < outs[link.src.owner], link
            assert 0 <= link.dst.index < ins[link.dst.owner], link
            assert (link.dst.owner, link.dst.index) not in fed, f"{link.dst.ref()} is fed twice"
            fed.add((link.dst.owner, link.dst.index))
        missing = [f"{o}.in[{i}]" for o, n in ins.items() for i in range(n) if (o, i) not in fed]
        assert not missing, f"inputs never fed: {missing[:5]}"
        tiles = [(k.tile, k.replica) for k in self.kernels]
        assert len({t for t, _ in tiles}) == len(tiles), "two kernels on one tile"
