"""The mapped-graph IR: below the quantised graph, what runs where and how data moves.

Migration steps 1, 3 and 4 (docs/ARCHITECTURE.md): the Dense chain, the DAG path, both CNN
mappings (stream, thesis) and the recurrent mappings (row-wise, column-wise, compact, stacks, the
Conv1d front end; ``recurrent/lower.py``) lower their plans and placements into a
:class:`MappedGraph`, and one renderer (:mod:`aieflow.mapped.adf`, ``templates/mapped/graph.h.j2``)
writes the ADF graph of all of them from it.  The transport checks of the chain and the DAG read
this graph (:mod:`aieflow.mapped.transport`, the ``check`` pass), and so does the estimate
(:mod:`aieflow.mapped.estimate`) where a lowering attaches costs, and so does the placer of the
chain, the DAG and the CNN stream mapping (:mod:`aieflow.mapped.place`: their kernel groups and
links, lowered unplaced).  The GEMM designs and streamed-weights Dense layers lower into it too
(``gemm/lower.py``, step 5: their resources, the PL-memory GEMM's estimate, ``graph.h`` and
``system.cfg`` read it).

Everything here is frozen; names are identifiers made by :func:`aieflow.names.c_ident` (a model's
names never reach this graph raw).

Cost annotations (the ``estimate`` pass, :mod:`aieflow.mapped.estimate`): a lowering may give each
kernel, each shared buffer's write and read side, each PLIO and each link that moves data through
a tile DMA a :class:`Cost`, computed by the variant's own cost code through the shared cost
functions (``perf/costs.py``: a Dense kernel, a memory-tile side, a tile DMA, a PLIO; ``dag/perf.py``
for the DAG's rows ops).  Entities carrying a cost of one name form one pipeline
stage (a Dense layer's tiles, a link's shards); the stage graph is built from these costs and the
links alone.
"""

from __future__ import annotations

from dataclasses import KW_ONLY, dataclass, replace

from .tiling import NdTiling

LINK_KINDS = ("cascade", "buffer", "memtile", "plio", "gmio", "stream", "packet", "ddr")
"""How a link moves data: a cascade (accumulator to the next tile), a buffer (tile to tile, or tile
to a memory tile's port: ``adf::connect`` of two buffer ports), a memory-tile shared buffer port
(its tiling says which elements), a PLIO (to or from the PL / the data file), a stream (a kernel's
stream port: ``adf::connect<adf::stream>``, ``readincr`` / ``writeincr``; one source port linked to
several inputs is a stream broadcast; the CNN rows mapping's rows, with a FIFO depth where a skip
lags), a packet stream into or out of a :class:`PacketSwitch` (``adf::connect<>``), a DDR segment
from a kernel's stream port (``ddr``: the producer's stream into an ``adf::output_gmio`` that
writes the segment, an ``adf::input_gmio`` that reads it back into the consumer's stream port or a
memory-tile shared buffer's write port; the host moves it row by row, :attr:`Link.segment`; the
rows mapping's skip that does not fit on the array; or a segment cut, :attr:`Link.tensor`: the DDR
buffer between two segments of a segmented design, which run one after the other, from an output PLIO
or a PL kernel that writes DDR to an input PLIO or a PL kernel that reads it), a GMIO (``gmio``: an input GMIO, a
:class:`Plio` with ``gmio``, read from DDR by the interface tile's DMA into a kernel's buffer port:
the GEMM's Br with ``br_transfer: gmio``)."""


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
    ratio: float = 0.9  # ``adf::runtime<adf::ratio>``: 1.0 for a free-running kernel (the recurrent ones)
    # False: ``tile`` is where the plan counts the kernel (its block on the array, what the latency
    # model counts switch hops on), not a location constraint; aiecompiler places the kernel.
    pinned: bool = True
    # The neighbouring tiles whose data memory the kernel borrows for its buffers (ops/dense.py
    # memory_homes, a Dense layer's lender rows): they run no kernel, but the graph occupies them
    # (``mapped.estimate.resources`` counts them).
    borrowed: tuple[tuple[int, int], ...] = ()
    # A kernel function (``adf::kernel::create(fn)``, the GEMM's ``gemm_tile``) instead of a kernel
    # class (``adf::kernel::create_object<cls>(args)``); ``args`` is then empty.
    function: bool = False
    # The segment the kernel runs in (a segmented design: one graph per device-image run, one after
    # the other on the same tiles; ``MappedGraph.check`` keeps one kernel per tile per segment).
    segment: int = 0


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
    # ``adf::repetition_count``: fills per graph iteration (UG1603; the rows mapping's concat row
    # buffer fills once per row of a frame); 1: once, not written.
    repetitions: int = 1
    _: KW_ONLY
    segment: int = 0  # the segment it belongs to (``Kernel.segment``)


@dataclass(frozen=True)
class Plio:
    var: str
    direction: str  # "in" | "out"
    bits: int
    file: str  # the data file the simulators read or write
    _: KW_ONLY
    freq_mhz: float = 0.0  # the PL-side clock of the PLIO (the 4th argument of ``create``); 0: the default
    cost: Cost | None = None  # its transfer stage (the PLIOs of one layer share one)
    name: str = ""  # its name in the ADF graph and system.cfg (``create``'s first argument); "": ``var``
    # An ``adf::input_gmio`` / ``output_gmio`` (DDR through the interface tile's DMA, the host's
    # ``gm2aie``) instead of a PLIO: no PL stream, not counted against the PLIO ports.
    gmio: bool = False
    # A GMIO's bandwidth request (``create``'s third argument, MB/s); 0: the core stream's (``mapped/adf.py``).
    mbps: int = 0

    @property
    def port_name(self) -> str:
        return self.name or self.var


@dataclass(frozen=True)
class PacketSwitch:
    """An ``adf::pktmerge<N>`` (``kind`` "merge": N packet-stream inputs, one output) or
    ``adf::pktsplit<N>`` ("split": one input, N outputs).  ``ids``: the route ID of each input
    (merge) or output (split), the packet header's ID that the reader of the merged stream (a PL
    FSM's ID table, an aggregator) or the split's routing tells the sources apart by."""

    var: str
    kind: str  # "merge" | "split"
    ids: tuple[int, ...]

    @property
    def ports(self) -> tuple[int, int]:
        """(inputs, outputs)."""
        return (len(self.ids), 1) if self.kind == "merge" else (1, len(self.ids))


@dataclass(frozen=True)
class PLStep:
    """One part of a PL kernel's call that the estimate times as a stage of its own (the thesis
    mapping's loops: untile one tile, the tanh LUT, im2col + write one window): it runs after the
    step before it and after the data of the input ports it ``reads``, and its output ports'
    data (``writes``) is complete when it ends."""

    cost: Cost
    reads: tuple[str, ...] = ()
    writes: tuple[str, ...] = ()


@dataclass(frozen=True)
class PLKernel:
    """A PL (HLS) kernel beside the graph (a recurrent layer's aggregation FSM, the GEMM's movers, a
    streamed Dense layer's epilogue, the thesis CNN mapping's per-layer kernels): its top function
    ``name``, its source (relative to the project), its stream ports each with the PLIO it reads
    (``ins``: output PLIOs of the graph) or writes (``outs``: input PLIOs; ``""``: a port that
    leaves the mapped graph, e.g. to the design's output data mover), and what the system model
    reads: per call (one time step) ``items`` inputs at initiation interval ``ii`` through a
    pipeline ``depth`` PL cycles deep (0: not modelled), ``calls`` calls per sample (per graph
    iteration for the GEMM's movers, per call of the layer for the epilogue, per frame for the
    thesis kernels)."""

    name: str
    source: str
    ins: tuple[tuple[str, str], ...]  # (port, plio var)
    outs: tuple[tuple[str, str], ...]
    ii: int
    depth: int
    items: int
    calls: int
    # The estimate (``mapped/estimate.py``): its stage, and the output ports whose data is read
    # at the next call (the FSM's h return: a loop-carried edge, a recurrence, not a buffer edge).
    cost: Cost | None = None
    carried: tuple[str, ...] = ()
    # The call's steps in the order it runs them, each a stage (instead of the one ``cost``): a
    # kernel whose sequential loops overlap the AI Engine kernels they wait for (the thesis's).
    steps: tuple[PLStep, ...] = ()


@dataclass(frozen=True)
class Link:
    kind: str  # one of LINK_KINDS
    src: Port
    dst: Port
    cost: Cost | None = None  # a transfer on the link itself (an AIE1 tile DMA between non-neighbours)
    fifo_depth: int = 0  # a stream's FIFO (``adf::fifo_depth``, 32-bit words, UG1079 DMA FIFO); 0: the default
    # A ``ddr`` link's segment: (transfers per graph iteration, bytes per transfer), one GMIO
    # transaction each way per transfer (the rows mapping: one per row of the frame); (0, 0) otherwise.
    segment: tuple[int, int] = (0, 0)
    # Loop-carried: what the link moves at graph iteration t is read at t + 1 (a recurrent layer's h
    # broadcast from its aggregator to its U kernels); the estimate reads it as a recurrence.
    carried: bool = False
    # A segment cut (a ``ddr`` link between two segments): the cut tensor's identifier; its DDR
    # buffer's bytes per design call in ``segment`` (1 transfer).  Its ends are off the array: an
    # output PLIO's or a PL kernel's DDR side (``src``, side "out") and an input PLIO's or a PL
    # kernel's (``dst``, side "in"); a PL kernel's DDR ports are numbered per cut, a PLIO's is 0.
    tensor: str = ""


@dataclass(frozen=True)
class MappedGraph:
    kernels: tuple[Kernel, ...]
    buffers: tuple[SharedBuffer, ...]
    plios: tuple[Plio, ...]
    links: tuple[Link, ...]
    headers: tuple[str, ...] = ()  # parameter headers the graph includes (relative to src/)
    switches: tuple[PacketSwitch, ...] = ()
    pl_kernels: tuple[PLKernel, ...] = ()
    # The host runs the graph one iteration at a time (``graph.run(1)``, then waits for the output:
    # ``vitis.system_files`` ``per_run``, the thesis mapping): iteration t + 1 enters after t left.
    per_run: bool = False

    def ddr_links(self) -> list[tuple[str, Link]]:
        """The ``ddr`` links in order, each with its GMIO pair's base name (``ddr<n>``: ``ddr<n>_w``
        the output GMIO that writes the segment, ``ddr<n>_r`` the input GMIO that reads it back)."""
        return [(f"ddr{n}", link) for n, link in enumerate(x for x in self.links if x.kind == "ddr" and not x.tensor)]

    def cuts(self) -> list[Link]:
        """The segment cuts (``ddr`` links with a ``tensor``) in order."""
        return [x for x in self.links if x.kind == "ddr" and x.tensor]

    def stream_connects(self) -> list[str]:
        """``system.cfg``'s ``stream_connect`` lines between the AI Engine array and the PL kernels
        (compute unit ``<name>_0`` each): every output PLIO a PL kernel reads, then every input PLIO
        one writes (a port that leaves the mapped graph, ``""``, is the kind's own to connect)."""
        pl = self.pl_kernels
        out = [f"ai_engine_0.{plio}:{k.name}_0.{port}" for k in pl for port, plio in k.ins]
        return out + [f"{k.name}_0.{port}:ai_engine_0.{plio}" for k in pl for port, plio in k.outs if plio]

    def check(self) -> None:
        """Structural invariants (an ``AssertionError`` is an aieflow bug): known link kinds and
        endpoints (a ``ddr`` link, and only it, with a segment, from a kernel to a kernel or a shared buffer,
        or, a segment cut, from an output PLIO or a PL kernel to an input PLIO or a PL kernel), every port within its owner's ports, no input port fed twice, every kernel,
        shared-buffer and switch input fed, packet links exactly those touching a switch, a merge's
        route IDs distinct, tiles distinct within a segment, no constructor arguments on a kernel
        function (``Kernel.function``: ``adf::kernel::create`` has none); a PL kernel's ports each on a PLIO of the right
        direction (it reads output PLIOs, writes input PLIOs), no PLIO on two PL kernel ports, its
        steps' ports its own."""
        ins: dict[str, int] = {}
        outs: dict[str, int] = {}
        for k in self.kernels:
            ins[k.var], outs[k.var] = len(k.in_sizes), len(k.out_sizes)
            # ``adf::kernel::create(fn)`` takes the function alone (UG1079); arguments need a class
            assert not (k.function and k.args), f"{k.var}: a kernel function takes no constructor arguments"
        for b in self.buffers:
            ins[b.var], outs[b.var] = len(b.writes), len(b.reads)
        for p in self.plios:
            ins[p.var], outs[p.var] = (0, 1) if p.direction == "in" else (1, 0)
        switches = {s.var for s in self.switches}
        kernels = {k.var for k in self.kernels}
        buffers = {b.var for b in self.buffers}
        for s in self.switches:
            assert s.kind in ("merge", "split"), s
            assert len(set(s.ids)) == len(s.ids), f"{s.var}: route IDs {s.ids} repeat"
            ins[s.var], outs[s.var] = s.ports
        assert len(ins) == len(self.kernels) + len(self.buffers) + len(self.plios) + len(self.switches), "names repeat"
        fed: set[tuple[str, int]] = set()
        cut_fed: set[tuple[str, int]] = set()  # the DDR sides of PLIOs and PL kernels
        direction = {p.var: p.direction for p in self.plios}
        pl_names = {k.name for k in self.pl_kernels}
        for link in self.links:
            assert link.kind in LINK_KINDS, link
            if link.tensor:  # a segment cut: DDR between two segments' off-array ends
                assert link.kind == "ddr" and min(link.segment) > 0, f"{link}: a cut is a ddr link with its bytes"
                for port, side, plio_dir in ((link.src, "out", "out"), (link.dst, "in", "in")):
                    assert port.side == side, f"{link}: a cut runs from an out side to an in side"
                    on_plio = direction.get(port.owner) == plio_dir and port.index == 0
                    assert on_plio or (port.owner in pl_names and port.index >= 0), \
                        f"{port.ref()}: a cut's end is an {plio_dir}put PLIO (port 0) or a PL kernel"
                assert (link.dst.owner, link.dst.index) not in cut_fed, f"{link.dst.ref()} is fed twice"
                cut_fed.add((link.dst.owner, link.dst.index))
                continue
            assert (link.kind == "packet") == (link.src.owner in switches or link.dst.owner in switches), link
            assert link.src.side == "out" and link.dst.side == "in", link
            assert 0 <= link.src.index < outs[link.src.owner], link
            assert 0 <= link.dst.index < ins[link.dst.owner], link
            assert (link.kind == "ddr") == (min(link.segment) > 0), f"{link}: a ddr link and only it has a segment"
            if link.kind == "ddr":  # GMIO on both ends: a kernel's stream into a kernel or a shared buffer
                assert link.src.owner in kernels and (link.dst.owner in kernels or link.dst.owner in buffers), \
                    f"{link}: a DDR segment joins a kernel to a kernel or a shared buffer"
            assert (link.dst.owner, link.dst.index) not in fed, f"{link.dst.ref()} is fed twice"
            fed.add((link.dst.owner, link.dst.index))
        missing = [f"{o}.in[{i}]" for o, n in ins.items() for i in range(n) if (o, i) not in fed]
        assert not missing, f"inputs never fed: {missing[:5]}"
        tiles = [(k.segment, k.tile) for k in self.kernels]
        assert len(set(tiles)) == len(tiles), "two kernels on one tile in one segment"
        on_pl: set[str] = set()
        for pk in self.pl_kernels:
            ports = [port for port, _ in pk.ins + pk.outs]
            assert len(set(ports)) == len(ports), f"{pk.name}: port names repeat"
            for side, want in ((pk.ins, "out"), (pk.outs, "in")):
                for port, plio in side:
                    if not plio and side is pk.outs:
                        continue  # leaves the mapped graph (a data mover)
                    assert direction.get(plio) == want, f"{pk.name}.{port}: {plio!r} is not an {want}put PLIO"
                    assert plio not in on_pl, f"{plio} is on two PL kernel ports"
                    on_pl.add(plio)
            for st in pk.steps:  # a step reads input ports and writes output ports of its kernel
                assert set(st.reads) <= {p for p, _ in pk.ins}, f"{pk.name}: step {st.cost.name} reads {st.reads}"
                assert set(st.writes) <= {p for p, _ in pk.outs}, f"{pk.name}: step {st.cost.name} writes {st.writes}"
        on_cut = {port.owner for link in self.cuts() for port in (link.src, link.dst)}
        assert not on_cut & on_pl, f"{sorted(on_cut & on_pl)}: a PLIO's DDR side is a PL kernel's or a cut's, not both"


def segment_name(index: int, name: str) -> str:
    """``name`` as :func:`in_segment` renames it in segment ``index``."""
    return f"s{index}_{name}"


def in_segment(mg: MappedGraph, index: int) -> MappedGraph:
    """``mg`` as segment ``index`` of a segmented design's one graph: every kernel, shared buffer,
    PLIO, switch and PL kernel renamed ``s<index>_<name>`` (identifiers stay identifiers; segments
    never share a name) and its kernels and shared buffers marked with the segment."""
    pre = segment_name(index, "")

    def port(p: Port) -> Port:
        return replace(p, owner=pre + p.owner)

    return replace(
        mg,
        kernels=tuple(replace(k, var=pre + k.var, segment=index) for k in mg.kernels),
        buffers=tuple(replace(b, var=pre + b.var, segment=index) for b in mg.buffers),
        plios=tuple(replace(p, var=pre + p.var, name=p.name and pre + p.name) for p in mg.plios),
        links=tuple(replace(x, src=port(x.src), dst=port(x.dst)) for x in mg.links),
        switches=tuple(replace(s, var=pre + s.var) for s in mg.switches),
        pl_kernels=tuple(
            replace(k, name=pre + k.name, ins=tuple((n, pre + v) for n, v in k.ins),
                    outs=tuple((n, v and pre + v) for n, v in k.outs))
            for k in mg.pl_kernels
        ),
    )


def join(parts: tuple[MappedGraph, ...], cuts: tuple[Link, ...]) -> MappedGraph:
    """One graph of the segments ``parts`` (already :func:`in_segment`) and the ``cuts`` between them."""
    return MappedGraph(
        tuple(k for g in parts for k in g.kernels),
        tuple(b for g in parts for b in g.buffers),
        tuple(p for g in parts for p in g.plios),
        (*(x for g in parts for x in g.links), *cuts),
        tuple(dict.fromkeys(h for g in parts for h in g.headers)),
        tuple(s for g in parts for s in g.switches),
        tuple(k for g in parts for k in g.pl_kernels),
    )
