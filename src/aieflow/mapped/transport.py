"""The ``check`` pass: one transport checker over a mapped graph's links.

:func:`check` reads only a :class:`~aieflow.mapped.ir.MappedGraph` and the device catalog, and
refuses (a :class:`~aieflow.errors.PlanError` naming the layer, the buffer or the PLIO and what to
change) whatever the array cannot move as the graph says, per link kind:

- **memory-tile shared buffers** (``memtile`` links): a device with memory tiles at all; each
  buffer's bytes, ping-pong, within one memory tile (``Device.memory_tile_bytes``); its write and
  read ports within the memory tile's DMA channels per direction (``Device.memtile_channels``,
  UG1603); its buffer descriptors (one per port and ping-pong buffer, each tiling a single
  traversal) within ``Device.memtile_bds``; every port's tiling over the buffer's own dimensions,
  within the buffer descriptor's address dimensions (``tiling.MEMTILE_ADDRESS_DIMS``, AM020); and
  every port moving the element count of the port at its other end (a kernel's buffer port, or a
  relay buffer's read port);
- **compute-tile DMAs**: a kernel's buffer ports that something other than a memory it shares
  fills or drains (a PLIO, a memory-tile port, a ``buffer`` link from a tile that is not its
  neighbour: AIE1's direct links, AIE-ML direct links between non-neighbours) use the tile's DMA
  channels, ``Generation.tile_dma_channels`` per direction;
- **stream ports**: a kernel's stream inputs and outputs (``stream`` / ``packet`` / ``ddr`` links, a
  PLIO on a port that is not a buffer) within the core's ``Generation.stream_in_ports`` /
  ``stream_out_ports``;
- **cascades**: between two placed kernels on neighbouring tiles in the direction the generation's
  cascade runs (east; on AIE1 east on even rows and west on odd ones, ``cascade_serpentine``;
  vertically where ``cascade_vertical``);
- **PLIOs**: the input and output PLIOs within the interface row's streams
  (``Device.plio_columns`` x ``plio_in_per_column`` / ``plio_out_per_column``);
- **DDR segments** (``ddr`` links: an output and an input GMIO each): within one interface tile's
  DMA channels per direction (``Generation.interface_dma_channels``).

What the DMAs' 32-bit-word addressing cannot express (``tiling.word_problems``: element-wise
transposes of 8- / 16-bit data) is reported, not refused: the x86 shim runs those patterns and the
DAG design reports them (``TransportReport.word_problems``).  Kernels that are not pinned
(``Kernel.pinned`` False: aiecompiler places them) are not held to neighbour rules.

The lowerings' element-layout proofs (``passes/transport.check_link`` / ``check_direct_link``,
``dag/links.check_dag_link``: every consumer port receives exactly its kernel's layout) stay with
the plans they prove; the limits above live only here.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass

from ..devices import Device
from ..errors import PlanError
from .estimate import CTYPE_BYTES
from .ir import Link, MappedGraph
from .tiling import MEMTILE_ADDRESS_DIMS, word_problems

PING_PONG = 2  # buffers per memory-tile port (graph.h.j2: every shared buffer is ping-pong)


@dataclass(frozen=True)
class TransportReport:
    """What the checker found legal but worth saying: ports whose pattern the DMAs' 32-bit words
    cannot address (``tiling.word_problems``), one line each."""

    word_problems: tuple[str, ...] = ()


def element_bytes(ctype: str) -> int:
    return CTYPE_BYTES[ctype]


def buffer_bytes(dims: tuple[int, ...], ctype: str) -> int:
    """A shared buffer's bytes with its ping-pong copy."""
    return PING_PONG * math.prod(dims) * element_bytes(ctype)


def memtile_bds(writes: int, reads: int) -> int:
    """Buffer descriptors of a shared buffer: one per port and ping-pong buffer."""
    return PING_PONG * (writes + reads)


def plio_capacity(device: Device) -> tuple[int, int]:
    """(input, output) PLIO streams of the interface row."""
    return device.plio_columns * device.plio_in_per_column, device.plio_columns * device.plio_out_per_column


def neighbours(a: tuple[int, int], b: tuple[int, int]) -> bool:
    """Tiles whose kernels share a buffer in one of their memories (the same tile or one step
    apart; the chain's cost model and placement use the same rule)."""
    return abs(a[0] - b[0]) + abs(a[1] - b[1]) <= 1


def cascade_legal(src: tuple[int, int], dst: tuple[int, int], device: Device) -> bool:
    """Whether a cascade may run from the tile ``src`` to ``dst`` on this generation."""
    g = device.generation
    (c0, r0), (c1, r1) = src, dst
    if r0 == r1:
        east = not (g.cascade_serpentine and r0 % 2)
        return c1 - c0 == (1 if east else -1)
    return g.cascade_vertical and c0 == c1 and abs(r1 - r0) == 1


class _Names:
    """Who to name in a message: the layers of the kernels around an entity."""

    def __init__(self, mg: MappedGraph):
        self.kernel = {k.var: k for k in mg.kernels}
        self.into: dict[str, list[Link]] = defaultdict(list)
        self.out_of: dict[str, list[Link]] = defaultdict(list)
        for link in mg.links:
            self.into[link.dst.owner].append(link)
            self.out_of[link.src.owner].append(link)

    def layers(self, var: str, side: str) -> list[str]:
        """The layers of the kernels reading (``side`` "out") or writing ("in") ``var``,
        looking through relay buffers."""
        seen, todo, out = {var}, [var], []
        while todo:
            v = todo.pop()
            for link in (self.out_of if side == "out" else self.into)[v]:
                other = link.dst.owner if side == "out" else link.src.owner
                if other in self.kernel:
                    if self.kernel[other].node not in out:
                        out.append(self.kernel[other].node)
                elif other not in seen:
                    seen.add(other)
                    todo.append(other)
        return out


def _quote(layers: list[str]) -> str:
    return ", ".join(f"'{x}'" for x in layers) or "the graph's input / output"


def check(mg: MappedGraph, device: Device) -> TransportReport:
    """Refuse what the array cannot move (see the module docstring); return what to report."""
    names = _Names(mg)
    problems = _check_buffers(mg, device, names)
    _check_tile_ports(mg, device, names)
    _check_cascades(mg, device)
    _check_plios(mg, device, names)
    _check_ddr(mg, device)
    _check_memtile_pool(mg, device, names)
    return TransportReport(tuple(problems))


def shared_demand(mg: MappedGraph) -> tuple[int, ...]:
    """What a graph takes of the limits :func:`check` counts over the whole graph rather than per
    buffer, kernel or link: (input PLIOs, output PLIOs, DDR segments, and of the array's memory
    tiles (:func:`_check_memtile_pool`) the bytes, write ports and read ports of its shared
    buffers).  Every other limit is per shared buffer (its bytes, ports, descriptors, tilings), per
    kernel (its DMA channels and stream ports, counted over the links that touch it) or per link
    (a cascade's tiles), so a graph made of copies that share no entity (no link joins two copies)
    passes :func:`check` exactly when each copy passes it alone and the copies' summed demand fits
    (:func:`shared_demand_fits`)."""
    plios = [p for p in mg.plios if not p.gmio]
    return (sum(p.direction == "in" for p in plios), sum(p.direction == "out" for p in plios), len(mg.ddr_links()),
            *_memtile_demand(mg.buffers))


def shared_demand_fits(demand: tuple[int, ...], device: Device) -> bool:
    """Whether a (summed) :func:`shared_demand` is within the interface row's PLIO streams, an
    interface tile's DMA channels (what :func:`_check_plios` and :func:`_check_ddr` refuse) and
    the array's memory tiles (:func:`_check_memtile_pool`)."""
    cap_in, cap_out = plio_capacity(device)
    return (demand[0] <= cap_in and demand[1] <= cap_out and demand[2] <= device.generation.interface_dma_channels
            and _memtile_pool_fits(demand[3:], device))


def _memtile_demand(buffers) -> tuple[int, int, int]:
    """(bytes with ping-pong, write ports, read ports) of shared buffers."""
    return (sum(buffer_bytes(b.dims, b.ctype) for b in buffers), sum(len(b.writes) for b in buffers),
            sum(len(b.reads) for b in buffers))


def _memtile_pool_fits(demand: tuple[int, ...], device: Device) -> bool:
    nbytes, writes, reads = demand
    tiles = device.memory_tiles
    return (nbytes <= tiles * device.memory_tile_bytes and writes <= tiles * device.memtile_channels
            and reads <= tiles * device.memtile_channels)


def _check_memtile_pool(mg: MappedGraph, device: Device, names: _Names) -> None:
    """The shared buffers of one segment (segments hold the array in turn) together within the
    array's memory tiles: their bytes within the tiles' memory, their write / read ports within the
    tiles' DMA channels per direction (``Device.memory_tiles`` x ``memtile_channels``).  Each buffer
    alone is checked against one memory tile (:func:`_check_buffers`); this is the pool they share,
    a necessary condition (how the buffers pack into tiles is Vitis' choice), so it never refuses a
    design that fits."""
    for seg in sorted({b.segment for b in mg.buffers}):
        buffers = [b for b in mg.buffers if b.segment == seg]
        demand = _memtile_demand(buffers)
        if device.memory_tile_rows and not _memtile_pool_fits(demand, device):
            nbytes, writes, reads = demand
            tiles = device.memory_tiles
            layer = next((x for b in buffers for x in names.layers(b.var, "out") + names.layers(b.var, "in")), None)
            raise PlanError(f"the design's {len(buffers)} memory-tile buffers need {nbytes:,} bytes (ping-pong), "
                            f"{writes} write and {reads} read ports; {device.board}'s {tiles} memory tiles hold "
                            f"{tiles * device.memory_tile_bytes:,} bytes and {tiles * device.memtile_channels} "
                            "DMA channels per direction", layer=layer,
                            hint="use fewer copies (replicas), a smaller batch or fewer cascade rows / columns")


def _check_buffers(mg: MappedGraph, device: Device, names: _Names) -> list[str]:
    problems: list[str] = []
    ch, cap, bds = device.memtile_channels, device.memory_tile_bytes, device.memtile_bds
    sizes_in = {k.var: k.in_sizes for k in mg.kernels}
    sizes_out = {k.var: k.out_sizes for k in mg.kernels}
    reads_of = {b.var: b.reads for b in mg.buffers}
    writes_of = {b.var: b.writes for b in mg.buffers}
    for b in mg.buffers:
        writers, readers = names.layers(b.var, "in"), names.layers(b.var, "out")
        where = f"the memory-tile buffer {b.var} ({_quote(writers)} -> {_quote(readers)})"
        layer = (readers or writers or [None])[0]
        if not device.memory_tile_rows:
            raise PlanError(f"{where}: {device.board} has no memory tiles", layer=layer,
                            hint="link these layers by direct buffers (a device without memory tiles)")
        nbytes = buffer_bytes(b.dims, b.ctype)
        if nbytes > cap:
            raise PlanError(f"{where} needs {nbytes} bytes (ping-pong), more than one memory tile ({cap})",
                            layer=layer, hint="use a smaller batch")
        if len(b.writes) > ch or len(b.reads) > ch:
            many, side = (writers, "write") if len(b.writes) > ch else (readers, "read")
            n = len(b.writes) if side == "write" else len(b.reads)
            raise PlanError(f"{where} has {n} {side} ports; a memory tile has {ch} DMA channels per direction",
                            layer=(many or [layer])[0],
                            hint=f"use at most {ch} cascade {'rows (parallelism.cas_num)' if side == 'write' else 'columns'}"
                                 f" for {_quote(many)}")
        if memtile_bds(len(b.writes), len(b.reads)) > bds:
            raise PlanError(f"{where} needs {memtile_bds(len(b.writes), len(b.reads))} buffer descriptors "
                            f"(one per port and ping-pong buffer); a memory tile's DMA has {bds}", layer=layer,
                            hint="use fewer cascade rows / columns on this link")
        eb = element_bytes(b.ctype)
        for side, tilings in (("write", b.writes), ("read", b.reads)):
            for i, t in enumerate(tilings):
                port = f"{where}, {side} port {i}"
                if tuple(t.dims) != tuple(b.dims):
                    raise PlanError(f"internal: {port} describes a buffer of {t.dims}, the buffer is {b.dims}",
                                    layer=layer, hint="please report this as a bug")
                if t.address_dims > MEMTILE_ADDRESS_DIMS:
                    raise PlanError(f"internal: {port} needs {t.address_dims} address dimensions, a memory-tile "
                                    f"buffer descriptor has {MEMTILE_ADDRESS_DIMS}", layer=layer,
                                    hint="please report this as a bug")
                why = word_problems(t, eb)
                if why:
                    problems.append(f"{b.var} {side} port {i} ({_quote(writers)} -> {_quote(readers)}): "
                                    + ", ".join(why))
    # every memory-tile port moves what the port at its other end holds
    for link in mg.links:
        if link.kind != "memtile":
            continue
        src, dst = link.src, link.dst
        if src.owner in reads_of:
            moved = reads_of[src.owner][src.index].elements
            other = sizes_in.get(dst.owner, (None,) * (dst.index + 1))[dst.index]
        elif dst.owner in writes_of:
            moved = writes_of[dst.owner][dst.index].elements
            other = sizes_out.get(src.owner, (None,) * (src.index + 1))[src.index]
        else:
            raise PlanError(f"internal: the memory-tile link {src.ref()} -> {dst.ref()} touches no shared buffer",
                            hint="please report this as a bug")
        if other is not None and other != moved:
            raise PlanError(f"internal: the memory-tile link {src.ref()} -> {dst.ref()} moves {moved} elements, "
                            f"the kernel port holds {other}",
                            layer=names.kernel[dst.owner if dst.owner in names.kernel else src.owner].node,
                            hint="please report this as a bug")
    return problems


def _check_tile_ports(mg: MappedGraph, device: Device, names: _Names) -> None:
    g = device.generation
    kernels = names.kernel
    dma_in: dict[str, set[int]] = defaultdict(set)
    dma_out: dict[str, set[int]] = defaultdict(set)
    stream_in: dict[str, set[int]] = defaultdict(set)
    stream_out: dict[str, set[int]] = defaultdict(set)
    for link in mg.links:
        if link.kind == "cascade":
            continue
        src, dst = kernels.get(link.src.owner), kernels.get(link.dst.owner)
        if link.kind in ("stream", "packet", "ddr"):  # a DDR segment's GMIO meets the kernels' stream ports
            if src is not None:
                stream_out[src.var].add(link.src.index)
            if dst is not None:
                stream_in[dst.var].add(link.dst.index)
            continue
        # buffer, memtile, plio: a buffer port unless the kernel's port holds no buffer (a PLIO on a stream)
        shared = (link.kind == "buffer" and src is not None and dst is not None and src.pinned and dst.pinned
                  and neighbours(src.tile, dst.tile))
        if dst is not None:
            buffered = dst.in_sizes[link.dst.index] is not None
            if not buffered:
                stream_in[dst.var].add(link.dst.index)
            elif not shared:
                dma_in[dst.var].add(link.dst.index)
        if src is not None:
            buffered = src.out_sizes[link.src.index] is not None
            if not buffered:
                stream_out[src.var].add(link.src.index)
            elif not shared:
                dma_out[src.var].add(link.src.index)
    for counts, limit, what, hint in (
        (dma_in, g.tile_dma_channels, "buffers filled by its tile's DMA (S2MM)",
         "place its producers next to it, or give it fewer inputs that arrive by DMA"),
        (dma_out, g.tile_dma_channels, "buffers drained by its tile's DMA (MM2S)",
         "place its consumers next to it, or give it fewer outputs that leave by DMA"),
        (stream_in, g.stream_in_ports, "input streams", "use a mapping with fewer streams into this kernel"),
        (stream_out, g.stream_out_ports, "output streams", "use a mapping with fewer streams out of this kernel"),
    ):
        for var, ports in counts.items():
            if len(ports) > limit:
                k = kernels[var]
                raise PlanError(f"kernel {var} of '{k.node}' at tile {k.tile} has {len(ports)} {what}; {g.name} "
                                f"tiles have {limit}", layer=k.node, hint=hint)


def _check_cascades(mg: MappedGraph, device: Device) -> None:
    kernels = {k.var: k for k in mg.kernels}
    for link in mg.links:
        if link.kind != "cascade":
            continue
        src, dst = kernels.get(link.src.owner), kernels.get(link.dst.owner)
        if src is None or dst is None:
            raise PlanError(f"internal: the cascade {link.src.ref()} -> {link.dst.ref()} does not join two kernels",
                            hint="please report this as a bug")
        if src.pinned and dst.pinned and not cascade_legal(src.tile, dst.tile, device):
            raise PlanError(f"the cascade {src.var} -> {dst.var} of '{dst.node}' runs from tile {src.tile} to "
                            f"{dst.tile}; a {device.generation.name} cascade joins neighbouring tiles "
                            + ("east on even rows and west on odd ones" if device.generation.cascade_serpentine
                               else "eastwards") + (" or vertically" if device.generation.cascade_vertical else ""),
                            layer=dst.node, hint=f"move '{dst.node}' (its placement) so its cascade rows are unbroken")


def _check_ddr(mg: MappedGraph, device: Device) -> None:
    """DDR segments (``ddr`` links): each an output and an input GMIO on the interface DMA, at most its
    channels per direction (``interface_dma_channels``)."""
    segments = mg.ddr_links()
    have = device.generation.interface_dma_channels
    if len(segments) > have:
        kernels = {k.var: k for k in mg.kernels}
        reader = segments[have][1].dst.owner
        if reader not in kernels:  # into a shared buffer: the layer of the kernel it feeds
            reader = next(x.dst.owner for x in mg.links if x.src.owner == reader)
        raise PlanError(f"the design holds {len(segments)} DDR segments, each an output and an input GMIO; an "
                        f"interface tile's DMA has {have} channels per direction",
                        layer=kernels[reader].node, hint="fewer skips through DDR")


def _check_plios(mg: MappedGraph, device: Device, names: _Names) -> None:
    have = dict(zip(("in", "out"), plio_capacity(device), strict=True))
    for direction, what in (("in", "input"), ("out", "output")):
        plios = [p.var for p in mg.plios if p.direction == direction and not p.gmio]
        if len(plios) > have[direction]:
            layers: list[str] = []
            for p in plios:
                layers += [x for x in names.layers(p, "out" if direction == "in" else "in") if x not in layers]
            replicas = len({k.replica for k in mg.kernels}) or 1
            raise PlanError(
                f"the design needs {len(plios)} {what} PLIO ports ({replicas} cop{'ies' if replicas > 1 else 'y'}), "
                f"{device.board}'s interface tiles offer {have[direction]}",
                layer=layers[0] if layers else None,
                hint=f"use fewer replicas, or less parallelism in {_quote(layers)}")

