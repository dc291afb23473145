"""Memory capacities the block-size chooser works from, and the chooser's limits.

The PL memories are not in the shared device catalog (``devices.py``); they are kept here with the
GEMM spec as their source.  Every limit below is a capacity divided by what one block occupies:

- Br (kc x nr) lives in the tile's local memory: ``kc <= (local - spare) / (nr * bytes * copies)``
  where ``copies`` is 1 for a single streamed buffer, 2 for a streamed ping-pong, 3 for GMIO (the
  spec: "K KB of Br takes 3K KB of local memory").
- Ac (mc x kc) lives in UltraRAM, Bc (kc x nc) in Block RAM.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..devices import Device
from ..errors import ConfigError
from .dtypes import GemmType

SPEC = "shared/spec/gemm-gotoblas-versal.md"
MIB = 1 << 20


@dataclass(frozen=True)
class PlMemory:
    uram_bytes: int
    bram_bytes: int
    local_spare_bytes: int  # local memory not available to Br (stack, heap, other data)
    acc_lanes: int  # accumulator lanes for Cr (mr * nr)
    source: str


# gemm-gotoblas-versal.md "Memory hierarchy used (VCK190)": PL UltraRAM 16.27 MiB, PL Block RAM
# 4.25 MiB; "Block sizes": "with ~2.5 KB spared"; "Micro-kernel": Cr (8 x 8) fills the four 16-lane
# 48-bit accumulator registers, i.e. all of them.
PL_MEMORY: dict[str, PlMemory] = {
    "vck190": PlMemory(
        uram_bytes=round(16.27 * MIB),
        bram_bytes=round(4.25 * MIB),
        local_spare_bytes=2560,
        acc_lanes=64,
        source=f"{SPEC} § Memory hierarchy used (VCK190); § Block sizes; § Micro-kernel",
    ),
}

# Copies of Br the local memory holds, per transfer mode (spec "Block sizes").
BR_COPIES = {("stream", 1): 1, ("stream", 2): 2, ("gmio", 1): 3, ("gmio", 2): 3}


def pl_memory(device: Device) -> PlMemory:
    try:
        return PL_MEMORY[device.key]
    except KeyError:
        raise ConfigError(
            f"the PL-memory GEMM design is implemented for {', '.join(PL_MEMORY)} only; the PL memory capacities "
            f"of {device.key} (UltraRAM, Block RAM) are not in the catalog",
            hint="use --device vck190",
        ) from None


def round_down(x: int, mult: int) -> int:
    return x // mult * mult


def round_up(x: int, mult: int) -> int:
    return -(-x // mult) * mult


@dataclass(frozen=True)
class BlockLimits:
    """Largest legal blocks for one transfer mode, and what each one is limited by."""

    kc: int
    mc: int
    nc: int
    br_copies: int
    local_bytes: int
    spare_bytes: int


def kc_limit(t: GemmType, device: Device, nr: int, transfer: str, br_buffers: int) -> tuple[int, int]:
    """(largest kc, Br copies) such that the copies of Br fit the local memory with the spare."""
    mem = pl_memory(device)
    copies = BR_COPIES[(transfer, br_buffers)]
    room = device.generation.data_memory_bytes - mem.local_spare_bytes
    return round_down(room // (nr * t.bytes * copies), t.mmul[1]), copies


def limits(t: GemmType, device: Device, nr: int, mr_mult: int, transfer: str, br_buffers: int,
           kc: int | None = None) -> BlockLimits:
    """Block limits; mc and nc follow from the kc actually used (``kc``, default its own limit)."""
    mem = pl_memory(device)
    kc_max, copies = kc_limit(t, device, nr, transfer, br_buffers)
    kc_used = kc or kc_max
    mc = round_down(mem.uram_bytes // (kc_used * t.bytes), mr_mult)
    nc = round_down(mem.bram_bytes // (kc_used * t.bytes), nr)
    return BlockLimits(kc_max, mc, nc, copies, device.generation.data_memory_bytes, mem.local_spare_bytes)


def balanced(dim: int, cap: int, mult: int) -> int:
    """The block size for ``dim`` under ``cap``: as many blocks as needed, equally sized (rounded up
    to ``mult``), so that the edge block is not mostly padding."""
    if cap < mult:
        raise ValueError("cap below the multiple")
    blocks = math.ceil(dim / cap)
    return min(cap, round_up(math.ceil(dim / blocks), mult))
