"""The grid mapping (issue 22; generated: templates/recurrent/rnn_grid.h): the split mapping's hidden
units over R chains, and each chain's U h columns over a cascade of C tiles, so that the loop-carried
path of a step holds only a C-th of the columns.  This is the generated kernels' model.

Chain r owns u = ceil(n_h / R) hidden units: G u gate-stacked rows of U (the compact tile's column
form).  Its C tiles each run those rows over kc = ceil(n_h / C) columns of h (tile c: the units
c kc .. (c + 1) kc - 1, its **column block**), all at once, then pass their exact partial sums east
down the chain's cascade (each tile adds what arrives to its own and passes it on, one cascade word of
the widest accumulator's lanes per cycle and one vector add per lane group); the chain's last tile (the
gate tile) adds them to its own, finishes the sums (the compact tile's vector finish), runs its u units'
gate math (the compact tile's generator for u units, ``compact.split_gate_cycles``) and sends its slice
of h as one packet (header + u words) into the one pktmerge, whose output is broadcast to every tile of
every chain and the head tile: each tile reads every chain's packet (its own included), one word per
cycle through its one input port, and keeps the units of its block.  Where every column block holds
whole chains (``block_merges``: ceil(n_h / C) a multiple of ceil(n_h / R), C > 1) each block has its own
merge of its chains' packets, broadcast to that block's R tiles only, so a tile reads only the packets
of the units it uses; the head tile then has a merge of every chain's packet (each gate tile's output
feeds two merges).  W x for step t + 1 runs on a
partner tile at the head of each chain while step t runs, and its gx reaches the gate tile on the
chain's cascade ahead of the partial sums (a partial-sum tile passes it on before it waits for h, off
the loop's path; the gate tile reads it: one cascade word per cycle).  The dense head runs after the
last step on one tile that reads every slice, as the compact tile's head.

Every cost is an existing one: the product loop and the finish are ``costs.compact_product_cycles``
(the compact kernel's VLIW schedule with G u rows and kc columns), the cascade hop
``perf.kernel.cascade_words`` at the catalog's ``cascade_bits`` and widest accumulator +
``movement.CASCADE_HOP_CYCLES`` + one vector add per lane group, the exchange ``movement``'s stream
constants (a packet per producer, header + u words, one 32-bit word per cycle through the consumer's
one input port, ``STREAM_FIXED_CYCLES`` + one ``SWITCH_HOP_CYCLES`` per tile of Manhattan distance on
the grid, the chains stacked as rows of the array), the gate math the compact tile's.  New constants:
none.

C = 1 is the split mapping with a stream exchange (its hop count the grid's distance, not one hop).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from ..devices import Device, get_device
from ..perf import movement as mv
from ..perf.kernel import KERNEL_CONSTANTS, cascade_words
from .costs import (
    compact_gate_cycles,
    compact_head_cycles,
    compact_product_cycles,
    lanes,
)
from .model import PARTS, WORD_BYTES
from .plan import RecurrentDims


@dataclass(frozen=True)
class GridStep:
    """One time step of the grid mapping.  ``parts`` are PARTS in AIE cycles of the loop-carried
    path: mac = a tile's U h over its column block, reduction = the partial sums down the chain's
    cascade + the gate tile's finish, aggregation = the gate math of u units + gx read from the
    cascade, routing = the h exchange (stream, every chain's packet to every tile), broadcast /
    return 0."""

    chains: int  # R
    chain_len: int  # C
    units: int  # hidden units per chain (the slowest's)
    columns: int  # columns of h per tile (the slowest's)
    tiles: int  # R C product tiles + R W-partner tiles
    parts: Mapping[str, float]
    cycles: float
    step_ns: float
    fill_ns: float
    head_ns: float
    sequence_ns: float


def slices(n: int, parts: int) -> list[range]:
    """``n`` units cut into ``parts`` contiguous slices of ceil(n / parts) (the last shorter; empty
    slices dropped)."""
    size = math.ceil(n / parts)
    return [range(s, min(s + size, n)) for s in range(0, n, size)]


def block_merges(n_h: int, chains: int, chain_len: int) -> tuple[range, ...] | None:
    """Per column block, the chains whose units it holds, where every block boundary is a chain boundary
    (ceil(n_h / C) a multiple of ceil(n_h / R)) and C > 1: then each block has a pktmerge of its own
    (those chains' packets, broadcast to the R tiles of that block and nothing else) and the head tile a
    merge of every chain (each gate tile's packet output feeds its block's merge and the head's).
    None: the one merge of every chain, broadcast to every tile (C = 1, or a block boundary inside a
    chain)."""
    units, blocks = slices(n_h, chains), slices(n_h, chain_len)
    starts = [s.start for s in units]
    if len(blocks) == 1 or any(b.start not in starts for b in blocks):
        return None
    return tuple(range(starts.index(b.start), starts.index(b.start) + sum(1 for s in units if s.start in b))
                 for b in blocks)


def grid_exchange_cycles(n_h: int, chains: int, chain_len: int, device: Device) -> float:
    """Cycles from the gate tiles' new h to the moment every tile holds its column block: each
    chain's gate tile (row r, the chain's last column) writes its slice as one packet (header + u
    words, one word per cycle) into its merge; the worst consumer tile (row r', column c) reads the
    packets of its merge through its one input port, one word per cycle, after STREAM_FIXED_CYCLES
    and one SWITCH_HOP_CYCLES per tile of the longest producer-to-consumer distance |r - r'| +
    (C - 1 - c): every chain's packet with the one merge, its block's chains' with per-block merges
    (``block_merges``: the block with the most packet words).  One tile in all: none."""
    if chains * chain_len == 1:
        return 0.0
    word = mv.core_stream_bytes_per_cycle(device) / WORD_BYTES
    units, blocks = slices(n_h, chains), slices(n_h, chain_len)
    write = mv.packet_stream_words(len(units[-1]), 1) / word
    merged = block_merges(n_h, chains, chain_len) or (range(len(units)),)
    read = max(sum(mv.packet_stream_words(len(units[r]), 1) for r in m) for m in merged) / word
    hops = (len(units) - 1) + (len(blocks) - 1)  # chain 0's gate tile to the last chain's first tile
    return write + mv.STREAM_FIXED_CYCLES + hops * mv.SWITCH_HOP_CYCLES + read


def grid_step(dims: RecurrentDims, device: Device | str, chains: int, chain_len: int,
              gate_cycles: float | None = None, plio_bits: int = mv.PLIO_BITS) -> GridStep:
    """The grid mapping's step (module docstring).  ``gate_cycles``: the gate math of u units
    (``compact.split_gate_cycles``), needed where the layer has a vector gate form."""
    device = get_device(device)
    gen, pair = device.generation, dims.pair
    if not 1 <= chains <= dims.n_h or not 1 <= chain_len <= dims.n_h:
        raise ValueError(f"grid {chains} x {chain_len}: 1..{dims.n_h} chains and tiles per chain (hidden {dims.n_h})")
    units = math.ceil(dims.n_h / chains)
    kc = math.ceil(dims.n_h / chain_len)
    if gate_cycles is None:
        if dims.gate_form:
            raise ValueError("a vector gate form: give gate_cycles (compact.split_gate_cycles)")
        gate_cycles = compact_gate_cycles(dims.cell, units, pair, ())
    rows = dims.gates * units
    fu, fw = dims.finish_ops if dims.fixed else (0, 0)
    kind = dims.kernel("u", "compact")
    u_mac, u_fin = compact_product_cycles(rows, kc, device, pair, kind, fu)
    lane = lanes(gen, pair)
    groups = math.ceil(rows / lane)
    # rnn_grid.h: gx and the partial sums on the cascade as the widest accumulator's lanes (int32 codes
    # exactly), one cascade word per cycle read / written
    words = cascade_words(lane, gen.widest_accumulator_bits, gen.cascade_bits)
    hop = groups * (words + KERNEL_CONSTANTS.vector_op_cycles) + mv.CASCADE_HOP_CYCLES
    n_blocks = len(slices(dims.n_h, chain_len))
    gx_words = groups * words
    parts = {  # h arrives in lane type: the packet read stores each word where U h reads it (no copy)
        "return": 0.0,
        "broadcast": 0.0,
        "mac": u_mac,
        "reduction": (n_blocks - 1) * hop + u_fin,
        "routing": grid_exchange_cycles(dims.n_h, chains, chain_len, device),
        "aggregation": gate_cycles + gx_words,
    }
    parts = {k: float(parts[k]) for k in PARTS}
    cycles = sum(parts.values())
    # fill: x_0 through its PLIO, read, the partner's first W x, gx on the cascade through the C - 1
    # partial-sum tiles (each reads and writes it: its words + a hop) to the gate tile
    w_mac, w_fin = compact_product_cycles(rows, dims.n_in, device, pair, dims.kernel("w", "compact"), fw)
    read = dims.n_in * WORD_BYTES / mv.core_stream_bytes_per_cycle(device)
    x = mv.plio_stream_transfer(dims.n_in * WORD_BYTES, device, device.memory_tile_rows + 1, plio_bits)
    fill = (x.busy_cycles + x.latency_cycles + read + w_mac + w_fin + gx_words + mv.CASCADE_HOP_CYCLES
            + (n_blocks - 1) * (gx_words + mv.CASCADE_HOP_CYCLES))
    # head: one tile reads every slice (one packet per chain), runs the compact head, writes out
    n_chains = len(slices(dims.n_h, chains))
    word = mv.core_stream_bytes_per_cycle(device) / WORD_BYTES
    gather = 0.0 if chains * chain_len == 1 else (
        mv.packet_stream_words(units, n_chains) / word + mv.STREAM_FIXED_CYCLES + mv.SWITCH_HOP_CYCLES)
    n_y = dims.head[-1] if dims.head else dims.n_h
    out = mv.plio_stream_transfer(n_y * WORD_BYTES, device, 0, plio_bits)
    head = gather + compact_head_cycles(dims.n_h, dims.head, dims.head_form, pair) + out.busy_cycles + out.latency_cycles
    ns = 1e9 / device.clock_hz
    return GridStep(n_chains, n_blocks, units, kc, n_chains * n_blocks + n_chains, MappingProxyType(parts), cycles,
                    cycles * ns, fill * ns, head * ns, (fill + dims.seq_len * cycles + head) * ns)


def grid_points(dims: RecurrentDims, device: Device | str, gate_cycles=None, plio_bits: int = mv.PLIO_BITS) -> list[GridStep]:
    """Every distinct grid (R chains x C tiles per chain, as ``slices`` leaves them) that fits the
    device's compute tiles, fastest first (then fewest tiles).  ``gate_cycles(units)``: the gate
    math of u units (``compact.split_gate_cycles`` of the layer), None for the scalar / float count."""
    device = get_device(device)
    seen: dict[tuple[int, int], GridStep] = {}
    for r in range(1, dims.n_h + 1):
        for c in range(1, dims.n_h + 1):
            key = (len(slices(dims.n_h, r)), len(slices(dims.n_h, c)))
            if key in seen:
                continue
            units = math.ceil(dims.n_h / r)
            g = grid_step(dims, device, r, c, None if gate_cycles is None else gate_cycles(units), plio_bits)
            if g.tiles <= device.compute_tiles:
                seen[key] = g
    return sorted(seen.values(), key=lambda g: (g.sequence_ns, g.tiles))
