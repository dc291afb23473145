"""Memory-tile transport between two Dense layers (AIE-ML, AIE-MLv2), and its checker.

A link is one ``shared_buffer`` of ``[width, batch_pad]`` elements (feature fastest): every
producer cascade row writes its ``n_slice`` outputs, arriving in ``out_panel``-wide panels, at its
feature offset; every consumer cascade column reads its ``k_slice`` inputs in ``in_panel``-wide
panels, zero beyond the features the producer writes (``boundary_dimension``).  The tilings are
derived from the two plans' blocks, so any pair of parallelisms and panel widths meets here.

:func:`check_link` executes the tilings in numpy (its own implementation of the ADF tiling
semantics, independent of the C++ shim's) and proves that every port moves exactly the elements
it declares, in the order its kernel expects: each producer element lands once at its feature and
sample, nothing else is written, and each consumer element is the right feature or a padding
zero.  It runs for every link the emitter writes, so every design the test suite compiles is
checked.  The link also accounts for the memory-tile DMA it needs (channels and buffer
descriptors, ``versal-devices.md``: 6 + 6 channels and 48 BDs per memory tile).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..devices import Device
from ..errors import PlanError
from ..ir import Node
from ..ops.dense import DensePlan

PING_PONG = 2  # num_buffers of every link (graph.h.j2)


def memtiles_for(buffer_bytes: int, ports: int, device: Device) -> int:
    """Memory tiles one link occupies: enough capacity for its ping-pong buffer and enough DMA
    channels for its widest side."""
    if not device.memory_tile_bytes:
        return 0
    return max(1, math.ceil(buffer_bytes / device.memory_tile_bytes), math.ceil(ports / device.memtile_channels))


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
class MemtileLink:
    producer: str
    consumer: str
    dims: tuple[int, int]  # [features, batch_pad]
    element_bytes: int
    writes: tuple[Tiling, ...]  # one per producer cascade row
    reads: tuple[Tiling, ...]  # one per consumer cascade column

    @property
    def buffer_bytes(self) -> int:
        return PING_PONG * self.dims[0] * self.dims[1] * self.element_bytes

    def memtiles(self, device: Device) -> int:
        return memtiles_for(self.buffer_bytes, max(len(self.writes), len(self.reads)), device)

    @property
    def buffer_descriptors(self) -> int:
        """One BD per port and ping-pong buffer (each tiling is a single traversal)."""
        return PING_PONG * (len(self.writes) + len(self.reads))

    def to_json(self, device: Device) -> dict:
        return {
            "producer": self.producer,
            "consumer": self.consumer,
            "buffer": list(self.dims),
            "bytes": self.buffer_bytes,
            "write_ports": len(self.writes),
            "read_ports": len(self.reads),
            "memory_tiles": self.memtiles(device),
            "buffer_descriptors": self.buffer_descriptors,
        }


def memtile_link(prev: Node, node: Node) -> MemtileLink:
    """The tilings joining ``prev``'s cascade rows to ``node``'s cascade columns."""
    pp: DensePlan = prev.plan
    p: DensePlan = node.plan
    written = pp.cas_num * pp.n_slice
    width = max(written, p.cas_len * p.k_slice)
    writes = tuple(
        Tiling((pp.out_panel, p.batch_pad), (r * pp.n_slice, 0), pp.out_panel, pp.n_slice // pp.out_panel)
        for r in range(pp.cas_num)
    )
    reads = tuple(
        Tiling((p.in_panel, p.batch_pad), (c * p.k_slice, 0), p.in_panel, p.k_slice // p.in_panel, (written, p.batch_pad))
        for c in range(p.cas_len)
    )
    return MemtileLink(prev.name, node.name, (width, p.batch_pad), prev.types.output.container_bits // 8, writes, reads)


def _panel_order(first: int, count: int, panel: int, batch: int) -> tuple[np.ndarray, np.ndarray]:
    """(feature, sample) of each element of a ``[count / panel][batch][panel]`` port buffer."""
    j, b, e = np.meshgrid(np.arange(count // panel), np.arange(batch), np.arange(panel), indexing="ij")
    return (first + j * panel + e).ravel(), b.ravel()


def check_link(link: MemtileLink, prev: Node, node: Node) -> None:
    """Raise (an internal error) unless the link moves exactly what both plans declare."""
    pp: DensePlan = prev.plan
    p: DensePlan = node.plan
    where = f"memory-tile link {link.producer} -> {link.consumer}"

    def fail(msg: str) -> None:
        raise PlanError(f"internal: {where}: {msg}", layer=link.consumer, hint="please report this as a bug")

    if pp.batch_pad != p.batch_pad:
        fail(f"the layers pad the batch differently ({pp.batch_pad} vs {p.batch_pad})")
    dims = link.dims
    hits = np.zeros(dims[0] * dims[1], dtype=np.int64)
    for r, w in enumerate(link.writes):
        addr = w.addresses(dims)
        if addr.size != pp.batch_pad * pp.n_slice:
            fail(f"row {r} writes {addr.size} elements, its port holds {pp.batch_pad * pp.n_slice}")
        if (addr < 0).any():
            fail(f"row {r} writes outside the buffer")
        f, b = _panel_order(r * pp.n_slice, pp.n_slice, pp.out_panel, pp.batch_pad)
        if not np.array_equal(addr, f + b * dims[0]):
            fail(f"row {r}'s elements land at the wrong features or samples")
        np.add.at(hits, addr, 1)
    covered = hits.reshape(dims[1], dims[0])[:, : pp.cas_num * pp.n_slice]
    if hits.sum() != covered.sum() or not (covered == 1).all():
        fail("the rows do not write every produced element exactly once")
    for c, rd in enumerate(link.reads):
        addr = rd.addresses(dims)
        if addr.size != p.batch_pad * p.k_slice:
            fail(f"column {c} reads {addr.size} elements, its port holds {p.batch_pad * p.k_slice}")
        f, b = _panel_order(c * p.k_slice, p.k_slice, p.in_panel, p.batch_pad)
        want = np.where(f < pp.cas_num * pp.n_slice, f + b * dims[0], -1)
        if not np.array_equal(addr, want):
            fail(f"column {c} reads the wrong features or samples")
