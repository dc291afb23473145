"""The costs a lowering attaches to the mapped graph (``mapped.ir.Cost``, read by the ``estimate``
pass, ``mapped/estimate.py``): one function per kind of entity, shared by the Dense chain
(``passes/emit.lower_chain``) and the DAG (``dag/emit.lower``, ``dag/perf.py``), so a Dense kernel, a
memory-tile link, a direct buffer moved by tile DMA and a PLIO cost the same wherever they occur.

The transfer models are ``perf/movement.py``'s (rates from the device catalog); the kernel model is
``perf/simulate.kernel_stage`` (``perf/kernel.py``'s cycles).  The switch hops, which only add
latency (``movement.SWITCH_HOP_CYCLES`` each), follow the array's layout (AM009 / AM020: the
interface tiles in row 0, the memory-tile rows above them, then the compute rows, counted from 0 in a
placement): :func:`interface_hops` from a compute row down to the interface tiles (a PLIO),
:func:`memtile_hops` from a compute row down to the memory tiles (plus the columns between), and
:func:`memtile_link_hops`, the one rule for both sides of a memory-tile link in the chain and the DAG
(UG1603 "Memory Tile": the memory tiles lie between a column's compute tiles and its interface tile,
so a compute tile's words reach them through the compute rows below it, the farthest row's last).
"""

from __future__ import annotations

from collections.abc import Sequence

from ..devices import Device
from ..ir import Node
from ..mapped.ir import Cost
from . import movement as mv
from .kernel import KernelCycles
from .simulate import kernel_stage


def interface_hops(device: Device, row: int) -> int:
    """Switch hops between compute row ``row`` and the interface tiles: through the memory-tile rows."""
    return device.memory_tile_rows + row + 1


def memtile_hops(row: int, columns: int = 0) -> int:
    """Switch hops between compute row ``row`` and the memory tile in the row below the compute rows,
    ``columns`` columns to the side."""
    return abs(columns) + row + 1


def memtile_link_hops(device: Device, producers: Sequence, consumer=None) -> tuple[int, int]:
    """(write hops, read hops) of a memory-tile link between placed rectangles (``Rect``: ``column``,
    ``row``, ``width``, ``height``): the write from each producer's top row and last column to the
    memory tile below the consumer's first column (the farthest producer's), the read from there
    up to the consumer's top row.  No producer (the graph input, written by the input PLIO): the
    words come up from the interface tile through the memory-tile rows.  No consumer (the graph
    output, drained by the output PLIO): the write has no columns to cross, the read no hops."""
    first = consumer.column if consumer is not None else None
    write = max(
        (
            memtile_hops(
                p.row + p.height - 1, 0 if first is None else p.column + p.width - 1 - first
            )
            for p in producers
        ),
        default=device.memory_tile_rows,
    )
    read = 0 if consumer is None else memtile_hops(consumer.row + consumer.height - 1)
    return write, read


def transfer(name: str, kind: str, t: mv.Transfer, device: Device) -> Cost:
    """A transfer stage: busy for the transfer's cycles, its last word its latency later."""
    return Cost(
        name,
        kind,
        t.bound,
        mv.cycles_to_ns(t.busy_cycles, device),
        mv.cycles_to_ns(t.latency_cycles, device),
        cycles=t.busy_cycles,
    )


def dense_kernel(node: Node, device: Device, name: str | None = None) -> Cost:
    """A Dense layer's cascade rectangle as one stage (``perf/simulate.kernel_stage``), named after
    the layer unless ``name`` is given."""
    return dense_kernel_roles(node, device, name)[0]


def dense_kernel_roles(
    node: Node, device: Device, name: str | None = None
) -> tuple[Cost, dict[str, KernelCycles]]:
    """:func:`dense_kernel` and the cycles of each tile role it was taken from (``perf/kernel.py``)."""
    s, roles = kernel_stage(node, device)
    return Cost(
        name or s.name,
        "kernel",
        s.bound,
        s.occupancy_ns,
        s.delay_ns,
        s.tiles,
        s.cycles,
        s.macs,
        s.peak_macs_per_cycle,
    ), roles


def plio(name: str, nbytes: float, device: Device, row: int) -> Cost:
    """One PLIO (or several in parallel, each ``nbytes``) between the PL and compute row ``row``."""
    return transfer(
        name, "plio", mv.plio_transfer(nbytes, device, interface_hops(device, row)), device
    )


def memtile(
    name: str, bytes_per_port: float, ports: int, device: Device, hops: int, memtiles: int = 1
) -> Cost:
    """One side (the writes or the reads) of a memory-tile shared buffer: ``ports`` ports of
    ``bytes_per_port`` each, in parallel over ``memtiles`` memory tiles' DMA channels."""
    return transfer(
        name, "memtile", mv.memtile_transfer(bytes_per_port, ports, device, hops, memtiles), device
    )


def tile_dma(name: str, nbytes: float, device: Device, hops: int) -> Cost:
    """A buffer moved between compute tiles that share no memory: the producer's tile DMA, the
    stream (broadcast to the consumers), the consumers' tile DMAs."""
    return transfer(name, "dma", mv.dma_transfer(nbytes, device, hops), device)
