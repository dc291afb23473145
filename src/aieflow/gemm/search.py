"""Design choice: the published configuration, or the best one the model finds.

``best`` enumerates every tile arrangement (tiles_j x tiles_i <= tiles) for every combination of
1 or 2 Ar streams per tile and single or ping-pong Br, with the overlapped write-back, and picks
the lowest modelled latency (ties: fewer tiles, then fewer streams and buffers).  GMIO Br is
costed too and reported; it is chosen only when asked for (``transfer="gmio"``): with the same
copy rate its 3x local-memory cost only shrinks kc, so it is never the fastest.  On AIE-ML the
memory-tile design is searched instead (``best_memtile_plan``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from ..devices import Device
from ..errors import AieflowError, PlanError
from .aieml import is_memtile_device, micro_tiles, ml_type
from .dtypes import GemmType, OutputType
from .perf import estimate
from .plan import GemmConfig, GemmPlan, make_plan


@dataclass(frozen=True)
class Alternative:
    config: GemmConfig
    blocks: dict | None
    cycles: float | None  # AIE cycles (packing excluded)
    total_cycles: float | None
    chosen: bool
    note: str

    def to_json(self) -> dict:
        return {"config": self.config.to_json(), "blocks": self.blocks, "cycles": self.cycles,
                "total_cycles": self.total_cycles, "chosen": self.chosen, "note": self.note}


def published_plan(m: int, n: int, k: int, t: GemmType, out: OutputType, device: Device, tiles: int,
                   blocks: Mapping[str, int] | None) -> GemmPlan:
    """The paper's design: L4 over ``tiles`` tiles, one Ar stream, single Br, serial write-back."""
    return make_plan(m, n, k, t, out, device, "published", GemmConfig(tiles_j=tiles), blocks)


def _key(plan: GemmPlan) -> tuple:
    c = plan.config
    return (estimate(plan).total_cycles, c.tiles, c.ar_streams, c.br_buffers, -c.tiles_j)


def best_plan(m: int, n: int, k: int, t: GemmType, out: OutputType, device: Device, tiles: int,
              blocks: Mapping[str, int] | None, *, transfer: str = "stream"
              ) -> tuple[GemmPlan, tuple[Alternative, ...]]:
    """The configuration with the lowest modelled latency, and the alternatives considered (the
    best tiling of each stream / buffer / transfer combination, and the published design)."""
    if not isinstance(tiles, int) or isinstance(tiles, bool) or tiles < 1:
        raise PlanError(f"tiles must be a positive integer, got {tiles!r}")
    if is_memtile_device(device):
        return best_memtile_plan(m, n, k, t, out, device, tiles, blocks)
    make_plan(m, n, k, t, out, device, "best", GemmConfig(), blocks)  # dimension / block errors first
    if tiles > device.compute_tiles:  # array limits are reported as such, not as "no candidate"
        make_plan(m, n, k, t, out, device, "best", GemmConfig(tiles_j=tiles), blocks)
    groups: dict[tuple, GemmPlan] = {}
    for streams in range(1, device.generation.stream_in_ports + 1):
        for buffers in (1, 2):
            for mode in ("stream", "gmio"):
                base = GemmConfig(ar_streams=streams, br_buffers=buffers, br_transfer=mode,
                                  writeback="overlapped")
                for tj in range(1, tiles + 1):
                    for ti in range(1, tiles // tj + 1):
                        try:
                            p = make_plan(m, n, k, t, out, device, "best", replace(base, tiles_j=tj, tiles_i=ti),
                                          blocks)
                        except AieflowError:
                            continue
                        g = (streams, buffers, mode)
                        if g not in groups or _key(p) < _key(groups[g]):
                            groups[g] = p
    candidates = [p for g, p in groups.items() if g[2] == transfer]
    if not candidates:
        raise PlanError(f"no GEMM configuration with {transfer} Br and at most {tiles} tiles fits {device.key}")
    chosen = min(candidates, key=_key)
    alts = []
    for g, p in sorted(groups.items()):
        e = estimate(p)
        note = ("chosen: lowest modelled latency" + (" with GMIO Br (asked for)" if transfer == "gmio" else "")
                if p is chosen
                else "GMIO Br: 3 copies of Br in local memory (ping, pong, the kernel's buffer) shrink kc; "
                "chosen only with --br-transfer gmio" if g[2] == "gmio" else "slower")
        alts.append(Alternative(p.config, p.blocks.to_json(), e.cycles, e.total_cycles, p is chosen, note))
    try:
        pub = published_plan(m, n, k, t, out, device, min(tiles, chosen.panels), blocks)
        e = estimate(pub)
        alts.append(Alternative(pub.config, pub.blocks.to_json(), e.cycles, e.total_cycles, False,
                                "the published design (reference)"))
    except AieflowError as err:
        alts.append(Alternative(GemmConfig(tiles_j=tiles), None, None, None, False,
                                f"the published design is not possible: {str(err).splitlines()[0]}"))
    return chosen, tuple(alts)


def best_memtile_plan(m: int, n: int, k: int, t: GemmType, out: OutputType, device: Device, tiles: int,
                      blocks: Mapping[str, int] | None) -> tuple[GemmPlan, tuple[Alternative, ...]]:
    """AIE-ML: every tile arrangement (tiles_j x tiles_i <= tiles), micro-tile (mr x nr within the
    accumulator registers) and Br buffering (single or ping-pong), Ac / Bc in memory tiles; the
    lowest modelled latency wins (ties: fewer tiles, smaller Cr, fewer buffers).  The alternatives
    are the best arrangement of each (micro-tile, buffers) pair."""
    t = ml_type(t, device)
    base = GemmConfig(br_transfer="memtile", writeback="overlapped")
    mr0, nr0 = micro_tiles(t)[0]
    make_plan(m, n, k, t, out, device, "best", replace(base, mr=mr0, nr=nr0), blocks)  # dimension / block errors
    if tiles > device.compute_tiles:
        make_plan(m, n, k, t, out, device, "best", replace(base, tiles_j=tiles, mr=mr0, nr=nr0), blocks)

    def key(p: GemmPlan) -> tuple:
        c = p.config
        return (estimate(p).total_cycles, c.tiles, c.mr * c.nr, c.br_buffers, -c.tiles_j)

    groups: dict[tuple, GemmPlan] = {}
    for mr, nr in micro_tiles(t):
        for buffers in (1, 2):
            for tj in range(1, tiles + 1):
                for ti in range(1, tiles // tj + 1):
                    cfg = replace(base, tiles_j=tj, tiles_i=ti, br_buffers=buffers, mr=mr, nr=nr)
                    try:
                        p = make_plan(m, n, k, t, out, device, "best", cfg, blocks)
                    except AieflowError:
                        continue
                    g = (mr, nr, buffers)
                    if g not in groups or key(p) < key(groups[g]):
                        groups[g] = p
    if not groups:
        raise PlanError(f"no GEMM configuration with at most {tiles} tiles fits {device.key}")
    chosen = min(groups.values(), key=key)
    alts = []
    for _, p in sorted(groups.items()):
        e = estimate(p)
        alts.append(Alternative(p.config, p.blocks.to_json(), e.cycles, e.total_cycles, p is chosen,
                                "chosen: lowest modelled latency" if p is chosen else "slower"))
    return chosen, tuple(alts)
