"""The mapped-graph IR: below the quantised graph, what runs where and how data moves.

Migration steps 1 and 3 (docs/ARCHITECTURE.md): the Dense chain, the DAG path and both CNN
mappings (stream, thesis) lower their plans and placements into a :class:`MappedGraph`, and one
renderer (:mod:`aieflow.mapped.adf`, ``templates/mapped/graph.h.j2``) writes the ADF graph of all of
them from it.  Placement, the transport checks and the performance model still read each path's own
plan; they move onto this graph in the next steps, and the recurrent and streamed paths lower into
it after them.

Everything here is frozen; names are identifiers made by :func:`aieflow.names.c_ident` (a model's
names never reach this graph raw).
"""

from __future__ import annotations

from dataclasses import dataclass

from .tiling import NdTiling

LINK_KINDS = ("cascade", "buffer", "memtile", "plio")
"""How a link moves data: a cascade (accumulator to the next tile), a buffer (tile to tile, or tile
to a memory tile's port: ``adf::connect`` of two buffer ports), a memory-tile shared buffer port
(its tiling says which elements), a PLIO (to or from the PL / the data file)."""


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
    # Buffer ports with one buffer instead of ping-pong (``adf::single_buffer``, UG1079): (side, port
    # index) each (the thesis CNN mapping's windows to and from the PL).
    single: tuple[tuple[str, int], ...] = ()


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


@dataclass(frozen=True)
class Plio:
    var: str
    direction: str  # "in" | "out"
    bits: int
    file: str  # the data file the simulators read or write
    freq_mhz: float = 0.0  # the PL-side clock of the PLIO (the 4th argument of ``create``); 0: the default


@dataclass(frozen=True)
class Link:
    kind: str  # one of LINK_KINDS
    src: Port
    dst: Port


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
