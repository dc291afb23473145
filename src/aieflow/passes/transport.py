"""Memory-tile transport between two Dense layers (AIE-ML, AIE-MLv2), and its checker.

Every producer cascade row writes its ``n_slice`` outputs (arriving in ``out_panel``-wide panels)
into ``shared_buffer`` shards of ``[features, batch_pad]`` elements (feature fastest); every
consumer cascade column reads its ``k_slice`` inputs in ``in_panel``-wide panels, zero beyond the
features the producer writes (``boundary_dimension``).  A memory tile has six DMA channels per
direction, shared by its buffers (UG1603; ``Device.memtile_channels``), so a link whose consumer
has more than six columns is split into shards of at most six columns each, and a shard that more
than six producer rows feed gathers them through relay shards first.  The tilings are derived
from the two plans' blocks, so any pair of parallelisms and panel widths meets here.

:func:`check_link` executes the tilings in numpy (its own implementation of the ADF tiling
semantics, independent of the C++ shim's) and proves that every port moves exactly the elements
it declares, in the order its kernel expects.  It runs for every link the emitter writes and the
plan pass accepts, so every design the test suite compiles is checked.  The memory tile's limits
(channels per shard, buffer descriptors, a shard's bytes per memory tile) are checked once the
link is lowered, on the mapped graph (``mapped/transport.py``, the ``check`` pass), as every
other kind's links are.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, replace

import numpy as np

from ..devices import Device
from ..errors import PlanError
from ..ir import Node
from ..ops.dense import DensePlan

PING_PONG = 2  # num_buffers of every link (graph.h.j2)


@dataclass(frozen=True)
class Tiling:
    """One port's ``adf::tiling`` over a 2-D buffer: ``wrap`` tiles of ``tile`` elements, the
    i-th at ``offset + i * stride`` along dimension 0; coordinates at or beyond ``boundary`` read
    as zero (reads only)."""

    tile: tuple[int, int]
    offset: tuple[int, int]
    stride: int
    wrap: int
    boundary: tuple[int, int] | None = None

    @property
    def elements(self) -> int:
        return self.tile[0] * self.tile[1] * self.wrap

    def addresses(self, dims: tuple[int, int]) -> np.ndarray:
        """Flat buffer address of each element the port moves, in stream order; -1 = padding."""
        t0, t1 = self.tile
        i, e1, e0 = np.meshgrid(np.arange(self.wrap), np.arange(t1), np.arange(t0), indexing="ij")
        d0 = (self.offset[0] + i * self.stride + e0).ravel()
        d1 = (self.offset[1] + e1 + 0 * i).ravel()
        lim = self.boundary or dims
        inside = (d0 >= 0) & (d0 < lim[0]) & (d1 >= 0) & (d1 < lim[1])
        return np.where(inside, d0 + d1 * dims[0], -1)

    def to_template(self) -> dict:
        d = {"tile": list(self.tile), "offset": list(self.offset), "stride": self.stride, "wrap": self.wrap}
        if self.boundary is not None:
            d["boundary"] = list(self.boundary)
        return d


@dataclass(frozen=True)
class Endpoint:
    """Where a shard's port leads: a producer cascade ``row``, a consumer cascade ``column``, or
    another ``shard`` of the same link (a relay)."""

    kind: str  # "row" | "column" | "shard"
    index: int


@dataclass(frozen=True)
class Shard:
    """One ``shared_buffer`` (in its own memory tile): features ``[base, base + dims[0])`` of the
    link, at most ``channels`` ports per side."""

    base: int
    dims: tuple[int, int]  # [features, batch_pad]
    writes: tuple[tuple[Endpoint, Tiling], ...]
    reads: tuple[tuple[Endpoint, Tiling], ...]


@dataclass(frozen=True)
class MemtileLink:
    """Producer rows -> shards (-> relay) -> consumer columns.

    Consumer columns are split into groups of at most ``channels`` adjacent columns, one shard
    per group holding the whole producer rows the group reads (a row that two groups need is
    broadcast to both).  When more than ``channels`` rows feed one group they are first gathered in
    relay shards of at most ``channels`` rows each, which then write into the group's shard.
    """

    producer: str
    consumer: str
    element_bytes: int
    shards: tuple[Shard, ...]  # relay shards before the shards they feed

    @property
    def buffer_bytes(self) -> int:
        return sum(PING_PONG * sh.dims[0] * sh.dims[1] * self.element_bytes for sh in self.shards)

    @property
    def relays(self) -> int:
        return sum(1 for sh in self.shards for ep, _ in sh.reads if ep.kind == "shard")

    def memtiles(self, device: Device) -> int:
        """Memory tiles the link occupies: one per shard (its ports), or more for capacity."""
        if not device.memory_tile_bytes:
            return 0
        return max(len(self.shards), math.ceil(self.buffer_bytes / device.memory_tile_bytes))

    @property
    def buffer_descriptors(self) -> int:
        """One BD per port and ping-pong buffer (each tiling is a single traversal)."""
        return PING_PONG * sum(len(sh.writes) + len(sh.reads) for sh in self.shards)

    def to_json(self, device: Device) -> dict:
        return {
            "producer": self.producer,
            "consumer": self.consumer,
            "shards": [
                {"features": [sh.base, sh.base + sh.dims[0]], "batch": sh.dims[1], "write_ports": len(sh.writes),
                 "read_ports": len(sh.reads)}
                for sh in self.shards
            ],
            "relays": self.relays,
            "bytes": self.buffer_bytes,
            "memory_tiles": self.memtiles(device),
            "buffer_descriptors": self.buffer_descriptors,
        }


def _groups(n: int, size: int) -> list[range]:
    """``range(n)`` in ceil(n / size) balanced runs of consecutive indices."""
    k = -(-n // size)
    cuts = [round(i * n / k) for i in range(k + 1)]
    return [range(a, b) for a, b in itertools.pairwise(cuts)]


def memtile_link(prev: Node, node: Node, channels: int = 6) -> MemtileLink:
    """The shards and tilings joining ``prev``'s cascade rows to ``node``'s cascade columns."""
    pp: DensePlan = prev.plan
    p: DensePlan = node.plan
    ns, ks, bp = pp.n_slice, p.k_slice, p.batch_pad
    written = pp.cas_num * ns
    shards: list[Shard] = []
    groups = _groups(p.cas_len, channels)
    for cols in groups:
        lo, hi = cols.start * ks, min(cols.stop * ks, written)
        if lo >= hi:
            raise PlanError(
                f"cascade columns {cols.start}..{cols.stop - 1} of '{node.name}' read only padding",
                layer=node.name,
                hint="use a smaller cas_len for this layer",
            )
        # the last shard also takes rows that hold only padding no column reads: every kernel
        # output buffer must be connected somewhere
        rows = range(lo // ns, pp.cas_num if cols is groups[-1] else (hi - 1) // ns + 1)
        base = rows.start * ns
        width = max(rows.stop * ns, cols.stop * ks) - base
        reads = tuple(
            (Endpoint("column", c), Tiling((p.in_panel, bp), (c * ks - base, 0), p.in_panel, ks // p.in_panel,
                                          (min(written, rows.stop * ns) - base, bp)))
            for c in cols
        )
        writes: list[tuple[Endpoint, Tiling]] = []
        for grp in _groups(len(rows), channels) if len(rows) > channels else [range(len(rows))]:
            first = rows.start + grp.start
            row_writes = tuple(
                (Endpoint("row", r), Tiling((pp.out_panel, bp), ((r - first) * ns, 0), pp.out_panel, ns // pp.out_panel))
                for r in range(first, rows.start + grp.stop)
            )
            if len(rows) <= channels:
                writes = list(row_writes)
                break
            # relay: gather these rows in their own shard, then copy it whole into the group's shard
            rw = len(grp) * ns
            full = Tiling((rw, bp), (0, 0), rw, 1, (rw, bp))
            shards.append(Shard(first * ns, (rw, bp), row_writes, ((Endpoint("shard", -1), full),)))
            writes.append((Endpoint("shard", len(shards) - 1), replace(full, offset=((first - rows.start) * ns, 0), boundary=None)))
        shards.append(Shard(base, (width, bp), tuple(writes), reads))
        for i, _ in writes:
            if i.kind == "shard":  # point the relay's read at the shard it feeds
                relay = shards[i.index]
                shards[i.index] = replace(relay, reads=((Endpoint("shard", len(shards) - 1), relay.reads[0][1]),))
    return MemtileLink(prev.name, node.name, prev.types.output.container_bits // 8, tuple(shards))


def check_link(link: MemtileLink, prev: Node, node: Node) -> None:
    """Raise unless the link moves exactly what both plans declare: run it on values that encode
    (feature, sample), with every shard poisoned, and compare what each consumer column receives
    with its panel layout (zero beyond the produced features); check every port's element count
    and that no read meets an unwritten element.  The memory tile's limits (DMA channels, buffer
    descriptors, capacity) are checked on the mapped graph, ``mapped/transport.py``."""
    pp: DensePlan = prev.plan
    p: DensePlan = node.plan
    where = f"memory-tile link {link.producer} -> {link.consumer}"

    def fail(msg: str) -> None:
        raise PlanError(f"internal: {where}: {msg}", layer=link.consumer, hint="please report this as a bug")

    if pp.batch_pad != p.batch_pad:
        fail(f"the layers pad the batch differently ({pp.batch_pad} vs {p.batch_pad})")
    bp = p.batch_pad
    produced = pp.cas_num * pp.n_slice
    poison = -1
    rows = {}
    for r in range(pp.cas_num):
        f, b = _panel_order(r * pp.n_slice, pp.n_slice, pp.out_panel, bp)
        rows[r] = f + b * produced  # the value a (feature, sample) pair carries
    outs: dict[int, np.ndarray] = {}  # shard -> its contents
    received: dict[int, np.ndarray] = {}
    fed_rows: set[int] = set()
    for i, sh in enumerate(link.shards):
        buf = np.full(sh.dims[0] * sh.dims[1], poison, dtype=np.int64)
        for ep, t in sh.writes:
            src = rows.get(ep.index) if ep.kind == "row" else outs.get(ep.index)
            if src is None:
                fail(f"shard {i} is written by {ep.kind} {ep.index}, which has no data yet")
            addr = t.addresses(sh.dims)
            if addr.size != src.size or (addr < 0).any():
                fail(f"shard {i}: the write from {ep.kind} {ep.index} moves {addr.size} elements into the buffer, "
                     f"its source holds {src.size}")
            if (buf[addr] != poison).any():
                fail(f"shard {i}: two writes land on the same element")
            buf[addr] = src
            fed_rows |= {ep.index} if ep.kind == "row" else set()
        for ep, t in sh.reads:
            addr = t.addresses(sh.dims)
            vals = np.where(addr >= 0, buf[np.maximum(addr, 0)], 0)
            if (vals == poison).any():
                fail(f"shard {i}: the read for {ep.kind} {ep.index} meets elements nobody wrote")
            if ep.kind == "shard":
                outs[i] = vals
            else:
                if ep.index in received:
                    fail(f"column {ep.index} is fed twice")
                received[ep.index] = vals
    if fed_rows != set(range(pp.cas_num)):
        fail(f"rows {sorted(set(range(pp.cas_num)) - fed_rows)} are written nowhere")
    for c in range(p.cas_len):
        if c not in received:
            fail(f"column {c} is fed by no shard")
        f, b = _panel_order(c * p.k_slice, p.k_slice, p.in_panel, bp)
        want = np.where(f < produced, f + b * produced, 0)
        if received[c].size != p.batch_pad * p.k_slice or not np.array_equal(received[c], want):
            fail(f"column {c} reads the wrong features or samples")


def _panel_order(first: int, count: int, panel: int, batch: int) -> tuple[np.ndarray, np.ndarray]:
    """(feature, sample) of each element of a ``[count / panel][batch][panel]`` port buffer."""
    j, b, e = np.meshgrid(np.arange(count // panel), np.arange(batch), np.arange(panel), indexing="ij")
    return (first + j * panel + e).ravel(), b.ravel()


# ----------------------------------------------------------------------------- direct links


def direct_link_possible(prev: Node, node: Node) -> bool:
    """True when ``prev``'s output buffers already are ``node``'s input buffers, so the memory
    tile can be skipped (AIE-ML / AIE-MLv2): one producer cascade row per consumer cascade column,
    slices of the same width, the same padded batch, and a panel width both sides can use (the
    producer writes the consumer's mmul-K panels)."""
    pp: DensePlan = prev.plan
    p: DensePlan = node.plan
    return (
        pp.cas_num == p.cas_len
        and pp.n_slice == p.k_slice
        and pp.batch_pad == p.batch_pad
        and pp.n_slice % p.in_panel == 0
        and prev.types.output == node.types.input
    )


def check_direct_link(prev: Node, node: Node) -> None:
    """Raise unless producer row ``r``'s output buffer, element for element, is the input buffer
    consumer column ``r`` expects (the check_link proof for a link without a memory tile): values
    encode (feature, sample); features the producer pads are zero on both sides."""
    pp: DensePlan = prev.plan
    p: DensePlan = node.plan
    where = f"direct link {prev.name} -> {node.name}"
    if pp.cas_num != p.cas_len:
        raise PlanError(f"internal: {where}: {pp.cas_num} producer rows feed {p.cas_len} consumer columns",
                        layer=node.name, hint="please report this as a bug")
    bp = p.batch_pad
    produced = pp.out_features
    for r in range(pp.cas_num):
        f, b = _panel_order(r * pp.n_slice, pp.n_slice, pp.out_panel, pp.batch_pad)
        sent = np.where(f < produced, f + b * produced, 0)
        f, b = _panel_order(r * p.k_slice, p.k_slice, p.in_panel, bp)
        want = np.where(f < min(produced, p.in_features), f + b * produced, 0)
        if sent.size != bp * p.k_slice or not np.array_equal(sent, want):
            raise PlanError(f"internal: {where}: column {r} would read the wrong features or samples",
                            layer=node.name, hint="please report this as a bug")
