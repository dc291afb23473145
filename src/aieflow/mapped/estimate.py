"""The ``estimate`` pass: the stage graph of a mapped graph, run by the one simulation engine.

:func:`pipeline` reads only the mapped graph: its kernels, shared buffers, PLIOs and links, and the
:class:`~aieflow.mapped.ir.Cost` each lowering attached to them.  The rules:

- a **stage** is every entity carrying a cost of one name (a Dense layer's tiles; a memory-tile
  link's shards, whose write ports form one stage and read ports another; the PLIOs of one layer;
  the links of one tile-DMA transfer);
- a kernel and a PLIO belong wholly to their stage; a shared buffer's write ports belong to its
  write stage and its read ports to its read stage (its write stage when it has none: an output
  PLIO or another shard drains it in their own stage);
- an **edge** joins the stage of a link's source to the stage of its destination (through the
  link's own stage when the link carries a cost), and a buffer's write stage to its read stage;
  a packet switch (a pktmerge / pktsplit) is no stage: every stage a packet link into it leaves
  (the source's, or the link's own) joins the stage of every link out of it;
  edges inside one stage (a cascade, a broadcast to a column's rows) are dropped;
- a PL kernel (a recurrent layer's FSM) is a stage: the output PLIOs it reads feed it (they are
  no sinks) and it feeds the input PLIOs it writes; a port of it that leaves the graph (``""``)
  makes its stage a sink; a PL kernel with ``steps`` (the thesis mapping's loops) is a chain of
  stages instead, one per step, each after the one before it and after the PLIOs of the ports it
  reads, feeding the PLIOs of the ports it writes (a PLIO carrying the step's own cost, whose words
  the step's loop moves, is that step);
- a graph the host runs one iteration at a time (``MappedGraph.per_run``) has one more stage,
  :data:`HOST_RUN` (no time: the host's start of a run), which every stage that reads nothing
  reads, and a recurrence from the sink to it: iteration t + 1 enters once iteration t has left
  (the recurrence's consumer reads no buffer, so its iteration 0 waits for nothing);
- a **loop-carried** link (``Link.carried``) or PL-kernel port (``PLKernel.carried``: the h return
  of a recurrent layer) is no edge but a recurrence: the stage it enters takes step t + 1 only
  after the stage it leaves has finished step t (``perf.simulate.run_pipeline``'s
  ``recurrences``; the first edge of the link's chain is the carried one);
- every stage writes one ping-pong buffer that its successors read (a buffer's slot is free once
  all of them have released it), except the **sink**: the stage of the output PLIO(s) (or of a PL
  kernel's port out of the graph); a stage read only through single-buffered kernel ports, or
  writing only through them (``Kernel.single``), writes one slot;
- stages are listed producers first (:func:`aieflow.perf.simulate.stage_order`, which keeps the
  graph's own order where it can).

Replicas: a lowering gives every copy's entities the costs of copy 0 (same names), so the copies
merge into one stage graph (they are identical and independent; the caller multiplies throughput
and resources).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..passes.transport import PING_PONG
from ..perf.simulate import Pipeline, StageSpec, stage_order
from .ir import Cost, MappedGraph, PLStep

# The host's start of one run of a ``per_run`` graph (a token the sink hands back; no time of its own).
HOST_RUN = Cost("host:run", "host", "host", 0.0)
CTYPE_BYTES = {"int8": 1, "uint8": 1, "int16": 2, "uint16": 2, "bfloat16": 2, "float16": 2, "int32": 4, "uint32": 4, "float": 4}


@dataclass(frozen=True)
class StageGraph:
    """The stages in producer order and, per stage, the stages it reads from (in stage order)."""

    stages: tuple[Cost, ...]
    after: dict[str, tuple[str, ...]]
    sink: str
    # Stages whose every reader reads them through a single-buffered kernel port
    # (``Kernel.single``, ``adf::single_buffer``): their output buffer has one slot, not two.
    single: frozenset[str] = frozenset()
    recurrences: tuple[tuple[str, str], ...] = ()  # (producer, consumer): loop-carried, one step back


def _need(cost: Cost | None, what: str) -> Cost:
    if cost is None:
        raise ValueError(f"{what} carries no cost: the lowering did not cost it")
    return cost


def stage_graph(mg: MappedGraph) -> StageGraph:
    """The stages of ``mg`` and their edges (see the module docstring)."""
    costs: dict[str, Cost] = {}
    listed: list[str] = []

    def touch(c: Cost) -> Cost:
        held = costs.get(c.name)
        if held is None:
            costs[c.name] = c
            listed.append(c.name)
        elif held is not c and held != c:
            raise ValueError(f"stage {c.name!r} carries two different costs")
        return c

    in_side: dict[str, Cost] = {}  # entity -> the stage its input ports belong to
    out_side: dict[str, Cost] = {}
    for p in mg.plios:
        if p.direction == "in":
            out_side[p.var] = touch(_need(p.cost, f"PLIO {p.var}"))
    for k in mg.kernels:
        in_side[k.var] = out_side[k.var] = touch(_need(k.cost, f"kernel {k.var}"))
    edges: set[tuple[str, str]] = set()
    for b in mg.buffers:
        w = _need(b.write_cost, f"shared buffer {b.var}")
        in_side[b.var], out_side[b.var] = w, b.read_cost or w
        if b.read_cost is not None:
            edges.add((w.name, b.read_cost.name))
    sinks = set()
    read_by_pl = {v for k in mg.pl_kernels for _, v in k.ins}
    for p in mg.plios:
        if p.direction == "out":
            in_side[p.var] = out_side[p.var] = _need(p.cost, f"PLIO {p.var}")
            if p.var not in read_by_pl:
                sinks.add(p.cost.name)
    carried: set[tuple[str, str]] = set()
    for k in mg.pl_kernels:
        ins, outs, prev = dict(k.ins), dict(k.outs), None
        for st in k.steps or (PLStep(_need(k.cost, f"PL kernel {k.name}"), tuple(ins), tuple(outs)),):
            c = touch(st.cost)
            for a in ([prev] if prev else []) + [touch(out_side[ins[port]]) for port in st.reads]:
                if a.name != c.name:  # a PLIO whose words the step's own loop moves is that step
                    edges.add((a.name, c.name))
            for port in st.writes:
                if not outs[port]:
                    sinks.add(c.name)
                elif out_side[outs[port]].name != c.name:
                    (carried if port in k.carried else edges).add((c.name, touch(out_side[outs[port]]).name))
            prev = c
    switches = {s.var for s in mg.switches}
    into: dict[str, list[Cost]] = {s: [] for s in switches}  # switch -> the stages its inputs leave
    for link in mg.links:  # into a switch: the source's stage, then the link's own
        if link.dst.owner in switches:
            assert link.src.owner not in switches, f"{link}: a switch feeding a switch"
            into[link.dst.owner].append(link.cost or out_side[link.src.owner])
    single_ports = {(k.var, side, i) for k in mg.kernels for side, i in k.single}
    read_single: dict[str, list[bool]] = {}  # stage -> per edge out of it: into a single-buffered port
    for link in mg.links:
        if link.dst.owner in switches:
            chains = [[out_side[link.src.owner], *([link.cost] if link.cost else [])]]
        else:
            heads = into[link.src.owner] if link.src.owner in switches else [out_side[link.src.owner]]
            chains = [[h, *([link.cost] if link.cost else []), in_side[link.dst.owner]] for h in heads]
        for chain in chains:
            for i, (a, b) in enumerate(zip(chain, chain[1:], strict=False)):
                touch(a), touch(b)
                if a.name != b.name:
                    if link.carried and i == 0:
                        carried.add((a.name, b.name))
                        continue
                    edges.add((a.name, b.name))
                    last = i == len(chain) - 2 and link.dst.owner not in switches
                    first = i == 0 and link.src.owner not in switches
                    read_single.setdefault(a.name, []).append(
                        (last and (link.dst.owner, "in", link.dst.index) in single_ports)
                        or (first and (link.src.owner, "out", link.src.index) in single_ports))
    for c in (*in_side.values(), *out_side.values()):
        touch(c)
    if len(sinks) != 1:
        raise ValueError(f"the mapped graph needs one output stage, not {sorted(sinks)}")
    preds: dict[str, list[str]] = {n: [] for n in listed}
    for a, b in edges:
        preds[b].append(a)
    pos = {n: i for i, n in enumerate(listed)}
    names = [listed[i] for i in stage_order([sorted(pos[p] for p in preds[n]) for n in listed])]
    rank = {n: i for i, n in enumerate(names)}
    after = {n: tuple(sorted(preds[n], key=rank.__getitem__)) for n in names}
    single = frozenset(n for n, into_single in read_single.items() if all(into_single))
    sink = next(iter(sinks))
    if mg.per_run:  # one iteration at a time: the host's run token, returned by the sink
        costs[HOST_RUN.name] = HOST_RUN
        after = {HOST_RUN.name: (), **{n: after[n] or (HOST_RUN.name,) for n in names}}
        names = [HOST_RUN.name, *names]
        carried.add((sink, HOST_RUN.name))
    return StageGraph(tuple(costs[n] for n in names), after, sink, single, tuple(sorted(carried)))


def pipeline(mg: MappedGraph) -> Pipeline:
    """The simulation engine's stage graph of ``mg``."""
    return to_pipeline(stage_graph(mg))


def to_pipeline(sg: StageGraph) -> Pipeline:
    specs = tuple(
        StageSpec(c.name, c.kind, c.bound, c.occupancy_ns, c.delay_ns,
                  (tuple(f"out:{p}" for p in sg.after[c.name]) or None),
                  None if c.name == sg.sink else f"out:{c.name}",
                  c.tiles, c.cycles, c.macs, c.peak_macs_per_cycle)
        for c in sg.stages
    )
    return Pipeline(specs, {f"out:{c.name}": 1 if c.name in sg.single else PING_PONG
                            for c in sg.stages if c.name != sg.sink}, sink=sg.sink, recurrences=sg.recurrences)


def resources(mg: MappedGraph, device) -> tuple[int, int]:
    """(compute tiles, memory tiles) the mapped graph uses: one tile per kernel (every replica's;
    ``MappedGraph.check`` keeps them distinct) and each tile whose memory a kernel borrows
    (``Kernel.borrowed``: a Dense layer's lenders, which run nothing), and per shared buffer the
    memory tiles its bytes need, at least one (none on a device without memory tiles).  A segmented
    design's graph: the sum over its segments (:func:`segment_resources`; design.json's
    ``tiles_used`` of segments that each hold the array in turn, or pipelined on one array)."""
    per = segment_resources(mg, device).values()
    return sum(t for t, _ in per), sum(m for _, m in per)


def segment_resources(mg: MappedGraph, device) -> dict[int, tuple[int, int]]:
    """(compute tiles, memory tiles) of each segment (``Kernel.segment``, ``SharedBuffer.segment``)
    of ``mg``, counted as :func:`resources` counts a graph of one segment."""
    out: dict[int, tuple[int, int]] = {}
    for seg in sorted({k.segment for k in mg.kernels} | {b.segment for b in mg.buffers}):
        mem = 0
        if device.memory_tile_bytes:
            for b in mg.buffers:
                if b.segment == seg:
                    nbytes = math.prod(b.dims) * CTYPE_BYTES[b.ctype]
                    mem += max(1, math.ceil(nbytes / device.memory_tile_bytes))
        kernels = [k for k in mg.kernels if k.segment == seg]
        lenders = {t for k in kernels for t in k.borrowed} - {k.tile for k in kernels}
        out[seg] = (len(kernels) + len(lenders), mem)
    return out
