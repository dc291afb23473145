"""Data-movement costs: PLIO, stream/switch hops, tile and memory-tile DMA, ping-pong hand-off,
cascade.

All rates come from the device catalog (``devices.py``, sourced from
``shared/spec/versal-devices.md``); the few fixed latencies below are either fitted to a published
figure (said so) or stated assumptions.  Costs are in AIE-clock cycles unless a name says ``_ns``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..devices import Device
from ..mapped.text import PLIO_BITS  # the width every emitted PLIO port declares

SPEC_DEVICES = "shared/spec/versal-devices.md"
SPEC_GEMM = "shared/spec/gemm-gotoblas-versal.md"


# FITTED: gemm-gotoblas-versal.md, "one Ar vector multicast ~19 cycles regardless of fan-out" on
# VCK190: 64 bytes at one 32-bit word per cycle is 16 cycles, the remaining 3 are the fixed cost of
# starting a stream transfer (the hop count of that experiment is not published, so all of it is
# attributed here).
STREAM_FIXED_CYCLES = 3

# Assumed: one registered stage per stream-switch hop (AM009/AM020 describe a registered switch;
# no figure in the specs isolates it).  Only adds latency, never throughput.
SWITCH_HOP_CYCLES = 1

# Assumed: lock acquire (request to the memory module's lock unit and grant when free) and release
# per buffer port per kernel call or DMA transfer; no figure in the specs isolates them.
LOCK_ACQUIRE_CYCLES = 3
LOCK_RELEASE_CYCLES = 1

# Assumed: a DMA channel fetching and starting its next buffer descriptor (tile, memory-tile and
# interface DMAs alike); no figure in the specs isolates it.
DMA_START_CYCLES = 8

# Assumed: the cascade FIFO is 2 deep (versal-devices.md), so a word crosses one hop in ~2 cycles.
CASCADE_HOP_CYCLES = 2


@dataclass(frozen=True)
class Transfer:
    """One buffer's worth of data moved over a path: how long the path is busy, and how much later
    the last word lands."""

    busy_cycles: float  # the path (channel, PLIO) is occupied this long per transfer
    latency_cycles: float  # extra pipeline latency after the busy time (hops, stream start)
    bound: str  # "plio", "stream", "memory" or "pl": what limits the rate


def lock_handoff_cycles(ports: int) -> int:
    """Acquire + release of ``ports`` ping-pong buffer locks (one call or one DMA transfer)."""
    return ports * (LOCK_ACQUIRE_CYCLES + LOCK_RELEASE_CYCLES)


def stream_bytes_per_cycle(device: Device) -> float:
    """The stream switch and the DMA channels on it: ``stream_bits`` per cycle (64 on AIE-MLv2)."""
    return device.generation.stream_bits / 8


def core_stream_bytes_per_cycle(device: Device) -> float:
    """A kernel's own stream port (readincr / writeincr): ``core_stream_bits`` per cycle, 32 on every
    generation (AIE-MLv2's 64-bit switch meets the core through a 32 <-> 64-bit adapter, AM027)."""
    return min(device.generation.core_stream_bits, device.generation.stream_bits) / 8


def memtile_channel_bytes_per_cycle(device: Device) -> float:
    """One memory-tile DMA channel: the slower of its stream (``stream_bits``) and its memory
    interface (``memtile_dma_memory_bits``: 128 on AIE-ML, 256 on AIE-MLv2)."""
    gen = device.generation
    return min(gen.stream_bits, gen.memtile_dma_memory_bits or gen.stream_bits) / 8


def plio_bytes_per_cycle(device: Device) -> float:
    """A PLIO port's rate in bytes per AIE cycle: PLIO width at the PL clock (emit.py's width)."""
    return PLIO_BITS / 8 * device.pl_clock_hz / device.clock_hz


def stream_cycles(nbytes: float, device: Device, hops: int = 0) -> float:
    """Busy + latency cycles of one stream transfer (used for primitive checks and estimates)."""
    t = stream_transfer(nbytes, device, hops)
    return t.busy_cycles + t.latency_cycles


def stream_transfer(nbytes: float, device: Device, hops: int = 0) -> Transfer:
    """A stream transfer inside the array from one kernel's stream port to another's: the core
    port's rate (``core_stream_bits``), which the switch (``stream_bits``) never undercuts."""
    busy = math.ceil(nbytes / core_stream_bytes_per_cycle(device))
    return Transfer(busy, STREAM_FIXED_CYCLES + hops * SWITCH_HOP_CYCLES, "stream")


def plio_transfer(nbytes: float, device: Device, hops: int) -> Transfer:
    """PL -> AIE (or back) through one PLIO port, the interface tile and ``hops`` switch hops into a
    tile's S2MM DMA: the slower of the PLIO (width x PL clock) and the array stream."""
    plio = plio_bytes_per_cycle(device)
    stream = stream_bytes_per_cycle(device)
    rate = min(plio, stream)
    busy = math.ceil(nbytes / rate) + DMA_START_CYCLES + lock_handoff_cycles(1)
    return Transfer(busy, STREAM_FIXED_CYCLES + hops * SWITCH_HOP_CYCLES, "plio" if plio < stream else "stream")


def dma_transfer(nbytes: float, device: Device, hops: int) -> Transfer:
    """Tile MM2S DMA -> stream (possibly broadcast) -> tile S2MM DMA: one buffer per transfer."""
    busy = math.ceil(nbytes / stream_bytes_per_cycle(device)) + DMA_START_CYCLES + lock_handoff_cycles(2)
    return Transfer(busy, STREAM_FIXED_CYCLES + hops * SWITCH_HOP_CYCLES, "stream")


def memtile_transfer(nbytes_per_port: float, ports: int, device: Device, hops: int, memtiles: int = 1) -> Transfer:
    """``ports`` equal buffers into (or out of) memory tiles: channels run in parallel, in rounds of
    ``device.memtile_channels`` per memory tile (each at :func:`memtile_channel_bytes_per_cycle`)."""
    rounds = math.ceil(ports / (device.memtile_channels * max(1, memtiles)))
    per = math.ceil(nbytes_per_port / memtile_channel_bytes_per_cycle(device)) + DMA_START_CYCLES + lock_handoff_cycles(2)
    return Transfer(rounds * per, STREAM_FIXED_CYCLES + hops * SWITCH_HOP_CYCLES, "memory")


def cascade_chain_lag_cycles(block_cycles: float, hops: int) -> float:
    """Extra latency of a cascade row of ``hops + 1`` tiles: each tile starts a block one block (plus
    the FIFO hop) after its western neighbour, so the last tile finishes that much later."""
    return hops * (block_cycles + CASCADE_HOP_CYCLES)


def cycles_to_ns(cycles: float, device: Device) -> float:
    return cycles / device.clock_hz * 1e9


# Packet switching (versal-devices.md "Streams, PLIO and packets"): every packet carries one 32-bit
# header word with its ID; ``pktmerge`` interleaves several packet streams onto one stream.
PACKET_HEADER_BITS = 32


def packet_merge_transfer(words_per_packet: int, packets: int, device: Device, hops: int = 0) -> Transfer:
    """``packets`` packets of ``words_per_packet`` 32-bit words merged onto one stream: the merged
    stream carries every payload and header word one after the other, whatever the fan-in (the
    merge serialises, it does not add bandwidth)."""
    words = packets * (words_per_packet + PACKET_HEADER_BITS // 32)
    busy = math.ceil(words * 32 / device.generation.stream_bits)
    return Transfer(busy, STREAM_FIXED_CYCLES + hops * SWITCH_HOP_CYCLES, "stream")


def pl_kernel_transfer(items: int, ii: int, depth: int, device: Device, clock_hz: float | None = None) -> Transfer:
    """A pipelined PL (HLS) kernel consuming ``items`` inputs at initiation interval ``ii`` with
    pipeline ``depth`` (both in PL cycles at ``clock_hz``, default the device's PL clock),
    expressed in AIE cycles: busy for ``items x ii`` PL cycles, the last result ``depth`` later."""
    ratio = device.clock_hz / (clock_hz or device.pl_clock_hz)
    return Transfer(math.ceil(items * ii * ratio), math.ceil(depth * ratio), "pl")


# ----------------------------------------------------------------------------- free-running streams
# Added for the recurrent mapping (src/aieflow/recurrent/): kernels that run in an infinite loop on
# streams, with no buffer, DMA or lock per transfer.


def packet_stream_words(words_per_packet: int, packets: int) -> int:
    """32-bit words a packet stream carries for ``packets`` packets: payload plus one header each
    (the word count :func:`packet_merge_transfer` serialises)."""
    return packets * (words_per_packet + PACKET_HEADER_BITS // 32)


def plio_stream_bytes_per_cycle(device: Device, plio_bits: int = PLIO_BITS) -> float:
    """Bytes per AIE cycle through a PLIO port ``plio_bits`` wide at the device's PL clock, capped
    by the kernel stream port it feeds (the slower of the two sets the rate)."""
    return min(plio_bits / 8 * device.pl_clock_hz / device.clock_hz, core_stream_bytes_per_cycle(device))


def plio_stream_transfer(nbytes: float, device: Device, hops: int = 0, plio_bits: int = PLIO_BITS) -> Transfer:
    """``nbytes`` crossing one PLIO port straight into (or out of) a free-running kernel's stream:
    no DMA or lock, the slower of the PLIO and the stream sets the rate; the crossing and ``hops``
    switch hops add latency."""
    plio = plio_bits / 8 * device.pl_clock_hz / device.clock_hz
    stream = core_stream_bytes_per_cycle(device)
    busy = math.ceil(nbytes / min(plio, stream))
    return Transfer(busy, STREAM_FIXED_CYCLES + hops * SWITCH_HOP_CYCLES, "plio" if plio < stream else "stream")
